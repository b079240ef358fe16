//! One task per neighbour on the I/O thread: the thin I/O shell around the
//! pure [`PeerCore`]. It owns the neighbour's sockets, turns everything that
//! happens to them (and every command, timer and RIB output) into a
//! [`PeerInput`], passes it through [`PeerTask::input`] — the one choke
//! point, where inputs are traced and, with `holdfastd --record DIR`,
//! recorded — and carries out the core's [`PeerOutput`]s: writing
//! messages, attaching and closing connections, and talking to the RIB
//! thread and the NSR replicator.
//!
//! The protocol decisions (RFC 4271 §6.8 collisions, RFC 4724 restarts and
//! stale timers, RFC 4486 max-prefix restarts, ROUTE-REFRESH and its
//! pending requests, the NSR resume and the RIB output held until it) are
//! the core's, in the tokio-free crate `holdfast-neighbor`; the RIB's
//! output bytes go through the core too ([`PeerInput::RibSend`] in,
//! [`PeerOutput::WriteRib`] out), so a recording holds what was sent.

mod bmp_ops;
mod nsr_ops;

use crate::addrs::Interfaces;
use crate::clock::{instant_of, now};
use crate::conn::Conn;
use crate::msg::peer::{PeerCmd, PeerSettings};
use crate::msg::rib::{RibCmd, RibHandle, ToPeer};
use crate::nsr::Nsr;
use crate::obs::{Metrics, PeerLabels};
use crate::socket;
use crate::tables::append_message;
use holdfast_fsm::negotiate;
use holdfast_fsm::{Negotiated, State, Time};
use holdfast_neighbor::{Message, PeerCore, PeerInput, PeerOutput, Recorder, RibBytes, Which};
use holdfast_rib::PeerSpec;
use holdfast_wire::{
    decode_open, encode_keepalive, encode_notification, encode_open, msg_type, CodecCtx, HEADER_LEN,
};
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, oneshot, watch};
use tracing::Instrument;

/// While the core works through one read, the socket is read again after
/// every this many bytes of messages, and what arrived is replicated ahead
/// of the framer (a replicated, Established session only).
const READ_AHEAD_EVERY: usize = 16 * 1024;

/// At most this many bytes are read ahead while one read is worked
/// through, so the task gives the thread back.
const READ_AHEAD_MAX: usize = 256 * 1024;

/// A session's tables from the RIB thread: (Adj-RIB-In, Adj-RIB-Out) as
/// encoded UPDATEs.
type SnapshotReply = oneshot::Receiver<crate::msg::rib::Snapshot>;

/// What the control socket and metrics read about a peer.
#[derive(Clone)]
pub struct PeerStatus {
    pub state: State,
    pub established_at: Option<Instant>,
    pub negotiated: Option<Negotiated>,
    pub stats: holdfast_fsm::SessionStats,
    pub local: Option<SocketAddr>,
}

pub type SharedStatus = Arc<Mutex<PeerStatus>>;

pub struct PeerTask {
    s: PeerSettings,
    core: PeerCore,
    /// The connections of the core's two slots.
    main: Option<Conn>,
    extra: Option<Conn>,
    connecting: Option<oneshot::Receiver<std::io::Result<TcpStream>>>,
    /// A connection waiting for the core's `Attach` or `Refuse`.
    pending: Option<Conn>,
    /// UPDATE bodies of the current read, for the RIB, and their raw
    /// form for the replicator.
    updates: Vec<Vec<u8>>,
    raw: Vec<u8>,
    /// Reused output buffer of [`PeerTask::input`].
    out: Vec<PeerOutput>,
    rib: RibHandle,
    rx: mpsc::UnboundedReceiver<PeerCmd>,
    status: SharedStatus,
    metrics: Arc<Metrics>,
    labels: PeerLabels,
    recorder: Option<Recorder>,
    /// `[[mrt]] kind = "updates"` naming this neighbour.
    mrt: Option<crate::mrt::UpdateLog>,
    /// What the BMP collectors are told about this session.
    bmp: bmp_ops::BmpTap,
    nsr: Option<Nsr>,
    resync: Option<watch::Receiver<u64>>,
    /// A table snapshot being taken: (reply, whether it re-synchronises
    /// the session after a store outage or only compacts its logs).
    snapshot: Option<(SnapshotReply, bool)>,
    /// Log bytes after which the session's logs are compacted.
    compact_at: u64,
    /// When the peer's acknowledgement should be written again (the send
    /// tail is not empty yet).
    acked_due: Option<Time>,
    /// A resumed connection whose window probe the peer has not answered
    /// yet (`nsr_ops::Reprobe`).
    reprobe: Option<nsr_ops::Reprobe>,
}

/// Starts a peer task on the current (I/O) runtime. `record`: a directory
/// where the task writes its inputs and outputs (`holdfastd --record`).
pub fn spawn(
    s: PeerSettings,
    rib: RibHandle,
    metrics: Arc<Metrics>,
    nsr: Option<Nsr>,
    resuming: bool,
    record: Option<&std::path::Path>,
) -> (mpsc::UnboundedSender<PeerCmd>, SharedStatus) {
    let (tx, rx) = mpsc::unbounded_channel();
    let core = PeerCore::new(s.params());
    let status = Arc::new(Mutex::new(PeerStatus {
        state: core.state(),
        established_at: None,
        negotiated: None,
        stats: core.stats().clone(),
        local: None,
    }));
    let labels = PeerLabels {
        instance: s.instance.clone(),
        peer: s.address.to_string(),
    };
    let span = tracing::info_span!("peer", instance = %s.instance, peer = %s.address, asn = s.session.remote_as);
    let recorder = record.and_then(|dir| {
        Recorder::create(dir, &s.instance, s.address, &s.params())
            .map_err(
                |e| tracing::error!(parent: &span, error = %e, "cannot record this peer's inputs"),
            )
            .ok()
    });
    let task = PeerTask {
        core,
        main: None,
        extra: None,
        connecting: None,
        pending: None,
        updates: Vec::new(),
        raw: Vec::new(),
        out: Vec::new(),
        rib,
        rx,
        status: status.clone(),
        metrics,
        labels,
        recorder,
        mrt: None,
        bmp: bmp_ops::BmpTap::default(),
        resync: nsr.as_ref().map(|n| n.shared.resync.subscribe()),
        nsr,
        snapshot: None,
        compact_at: u64::MAX,
        acked_due: None,
        reprobe: None,
        s,
    };
    tokio::spawn(task.run(resuming).instrument(span));
    (tx, status)
}

async fn read_from(conn: Option<&mut Conn>) -> std::io::Result<usize> {
    match conn {
        Some(c) => c.read_more().await,
        None => std::future::pending().await,
    }
}

async fn changed(rx: Option<&mut watch::Receiver<u64>>) -> Result<(), watch::error::RecvError> {
    match rx {
        Some(rx) => rx.changed().await,
        None => std::future::pending().await,
    }
}

async fn snapshot_done(s: Option<&mut (SnapshotReply, bool)>) -> Option<crate::msg::rib::Snapshot> {
    match s {
        Some((rx, _)) => rx.await.ok(),
        None => std::future::pending().await,
    }
}

async fn connected(
    rx: Option<&mut oneshot::Receiver<std::io::Result<TcpStream>>>,
) -> std::io::Result<TcpStream> {
    match rx {
        Some(rx) => rx
            .await
            .unwrap_or_else(|_| Err(std::io::ErrorKind::Interrupted.into())),
        None => std::future::pending().await,
    }
}

impl PeerTask {
    async fn run(mut self, resuming: bool) {
        self.metrics.peer_configured(&self.labels);
        self.input(PeerInput::Start { resuming });
        loop {
            let deadline = [
                self.core.next_deadline(),
                self.acked_due,
                self.reprobe.as_ref().map(|r| r.due),
            ]
            .into_iter()
            .flatten()
            .min();
            let sleep_to = instant_of(deadline.unwrap_or(now() + Duration::from_secs(3600)));
            tokio::select! {
                biased;
                cmd = self.rx.recv() => match cmd {
                    Some(cmd) => if !self.on_cmd(cmd) { break },
                    None => break,
                },
                r = read_from(self.main.as_mut()) => self.on_read(Which::Main, r),
                r = read_from(self.extra.as_mut()) => self.on_read(Which::Extra, r),
                r = connected(self.connecting.as_mut()) => {
                    self.connecting = None;
                    self.on_connected(r);
                }
                _ = tokio::time::sleep_until(sleep_to) => self.on_timer(),
                Ok(()) = changed(self.resync.as_mut()) => self.start_snapshot(true),
                r = snapshot_done(self.snapshot.as_mut()) => self.on_snapshot(r),
            }
        }
        if let Some(r) = self.recorder.as_mut() {
            r.flush();
        }
        self.metrics.peer_removed(&self.labels);
    }

    /// The choke point: every input of this neighbour passes here, is
    /// traced, recorded when asked, handed to the core, and the core's
    /// outputs are carried out in order.
    fn input(&mut self, input: PeerInput) {
        tracing::trace!(input = ?input, "peer input");
        let t = now();
        let mut out = std::mem::take(&mut self.out);
        match self.recorder.as_mut() {
            None => self.core.handle_into(t, input, &mut out),
            Some(rec) => {
                let line = rec.input_line(t, &input);
                self.core.handle_into(t, input, &mut out);
                rec.write(line, &out);
            }
        }
        let publish = out.iter().any(|o| !matches!(o, PeerOutput::Update(_)));
        for o in out.drain(..) {
            self.output(o);
        }
        self.out = out;
        if publish {
            self.publish();
        }
    }

    fn conn(&mut self, w: Which) -> Option<&mut Conn> {
        match w {
            Which::Main => self.main.as_mut(),
            Which::Extra => self.extra.as_mut(),
        }
    }

    fn output(&mut self, o: PeerOutput) {
        match o {
            PeerOutput::Connect => self.start_connect(),
            PeerOutput::Close(Which::Main) => {
                self.main = None;
                self.connecting = None;
            }
            PeerOutput::Close(Which::Extra) => self.extra = None,
            PeerOutput::Attach(w) => {
                let conn = self.pending.take();
                match w {
                    Which::Main => self.main = conn,
                    Which::Extra => self.extra = conn,
                }
            }
            PeerOutput::Refuse(n) => {
                if let (Some(mut conn), Some(n)) = (self.pending.take(), n) {
                    let mut buf = Vec::new();
                    encode_notification(&n, &mut buf);
                    conn.send_vec(buf);
                }
            }
            PeerOutput::Promote => {
                self.main = self.extra.take();
                self.bmp.opens[0] = std::mem::take(&mut self.bmp.opens[1]);
            }
            PeerOutput::Send(w, m) => self.send(w, m),
            PeerOutput::WriteRib(RibBytes(bytes)) => {
                if let Some(conn) = self.main.as_mut() {
                    self.metrics.bytes_out(&self.labels, bytes.len());
                    self.bmp.sent(&bytes);
                    conn.send(bytes);
                    self.replicate_acked();
                }
            }
            PeerOutput::StateChanged { from, to, reason } => {
                self.metrics.session_state(&self.labels, from, to, &reason);
                if let Some(log) = &self.mrt {
                    log.state(
                        &self.mrt_session(),
                        crate::mrt::mrt_state(from),
                        crate::mrt::mrt_state(to),
                    );
                }
            }
            PeerOutput::NotificationReceived(n) => {
                self.metrics.notification(&self.labels, "received", &n);
                self.bmp.notification(false, &n);
            }
            PeerOutput::Update(body) => {
                if let Some(log) = &self.mrt {
                    log.message(&self.mrt_session(), msg_type::UPDATE, &body);
                }
                self.bmp.received(&body);
                if self.beyond_ahead() {
                    append_message(&mut self.raw, msg_type::UPDATE, &body);
                }
                self.updates.push(body);
            }
            PeerOutput::RouteRefresh(family) => {
                self.flush_updates();
                self.rib.send(RibCmd::RouteRefresh {
                    peer: self.s.id,
                    family,
                });
            }
            PeerOutput::RefreshPending(families) => self.replicate_refresh(&families),
            PeerOutput::PeerUp { gen, negotiated } => {
                self.established(gen, &negotiated);
                self.bmp_up(&negotiated, false);
            }
            PeerOutput::PeerDown { graceful } => {
                self.bmp_down();
                self.flush_updates();
                self.rib.send(RibCmd::PeerDown {
                    peer: self.s.id,
                    graceful,
                });
                if let Ok(mut st) = self.status.lock() {
                    st.established_at = None;
                }
            }
            PeerOutput::StaleTimeout => self.rib.send(RibCmd::StaleTimeout(self.s.id)),
            PeerOutput::Resumed => {
                self.resumed();
                if let Some(neg) = self.core.negotiated().cloned() {
                    self.bmp_up(&neg, true);
                }
            }
        }
    }

    fn send(&mut self, w: Which, m: Message) {
        let mut buf = Vec::with_capacity(64);
        match &m {
            Message::Open(open) => {
                encode_open(open, &mut buf);
                if let Some(r) = self.conn(w).and_then(|c| c.repl.as_mut()) {
                    r.open_tx = Some(buf[HEADER_LEN..].to_vec());
                }
                self.bmp.opens[bmp_ops::slot(w)].0 = Some(buf[HEADER_LEN..].to_vec());
            }
            Message::Keepalive => encode_keepalive(&mut buf),
            Message::Notification(n) => {
                self.metrics.notification(&self.labels, "sent", n);
                self.bmp.notification(true, n);
                if n.code == holdfast_wire::error::error_code::HOLD_TIMER_EXPIRED {
                    if let Some(c) = self.conn(w).filter(|c| c.repl.is_some()) {
                        tracing::warn!(receive = %c.receive_diagnosis(), "hold timer expired on a replicated connection");
                    }
                }
                encode_notification(n, &mut buf);
            }
        }
        if let Some(conn) = self.conn(w) {
            conn.send_vec(buf);
        }
    }

    fn start_connect(&mut self) {
        let remote = SocketAddr::new(self.s.address, self.s.port);
        let opts = self.s.sock.clone();
        let limit = Duration::from_secs(self.s.session.connect_retry.max(1) as u64);
        let (tx, rx) = oneshot::channel();
        tokio::spawn(async move {
            let r = match tokio::time::timeout(limit, socket::connect(remote, &opts)).await {
                Ok(r) => r,
                Err(_) => Err(std::io::ErrorKind::TimedOut.into()),
            };
            let _ = tx.send(r);
        });
        self.connecting = Some(rx);
    }

    fn on_connected(&mut self, r: std::io::Result<TcpStream>) {
        match r.and_then(|s| Conn::new(s, true, self.nsr.as_ref())) {
            Ok(conn) => {
                tracing::debug!(local = %conn.local, "outbound connection up");
                self.pending = Some(conn);
                self.input(PeerInput::Connected);
            }
            Err(e) => {
                tracing::debug!(error = %e, "connect failed");
                self.input(PeerInput::ConnectFailed);
            }
        }
        self.pending = None;
    }

    fn on_inbound(&mut self, stream: TcpStream) {
        if !self.s.enabled {
            return;
        }
        if let Err(e) = socket::accepted(&stream, &self.s.sock) {
            tracing::warn!(error = %e, "socket options on accepted connection");
            return;
        }
        match Conn::new(stream, false, self.nsr.as_ref()) {
            Ok(conn) => {
                tracing::debug!(remote = %conn.remote, "inbound connection");
                self.pending = Some(conn);
                self.input(PeerInput::Inbound);
                self.pending = None;
            }
            Err(e) => tracing::debug!(error = %e, "inbound connection vanished"),
        }
    }

    fn on_read(&mut self, w: Which, r: std::io::Result<usize>) {
        match r {
            Ok(0) | Err(_) => {
                if let Err(e) = &r {
                    tracing::info!(slot = ?w, error = %e, "connection error");
                } else {
                    tracing::info!(slot = ?w, "connection closed by peer");
                }
                self.input(PeerInput::Closed(w));
            }
            Ok(_) => self.drain_frames(w),
        }
    }

    fn drain_frames(&mut self, w: Which) {
        let mut counts = [0u64; 6];
        let mut ahead_budget = READ_AHEAD_MAX;
        let mut since_ahead = 0;
        self.replicate_ahead(w);
        loop {
            if since_ahead >= READ_AHEAD_EVERY && ahead_budget > 0 {
                since_ahead = 0;
                ahead_budget = ahead_budget.saturating_sub(self.read_ahead(w));
            }
            let Some(conn) = self.conn(w) else { break };
            let frame = match conn.next_frame() {
                Ok(Some(f)) => f,
                Ok(None) => break,
                Err(e) => {
                    self.flush_updates();
                    let notification = e.to_notification();
                    self.input(PeerInput::HeaderError {
                        slot: w,
                        notification,
                    });
                    break;
                }
            };
            counts[usize::from(frame.msg_type).min(5)] += 1;
            since_ahead += HEADER_LEN + frame.body.len();
            if frame.msg_type == msg_type::OPEN {
                if let Some(r) = conn.repl.as_mut() {
                    r.open_rx = Some(frame.body.clone());
                }
                self.bmp.opens[bmp_ops::slot(w)].1 = Some(frame.body.clone());
            }
            if self.beyond_ahead() {
                // This message goes the framer's way, and so does what
                // follows it in this read: its bytes are written once the
                // core has seen it.
                ahead_budget = 0;
            }
            if frame.msg_type != msg_type::UPDATE {
                self.flush_updates();
            }
            self.input(PeerInput::Message {
                slot: w,
                msg_type: frame.msg_type,
                body: frame.body,
            });
        }
        self.flush_updates();
        let raw = std::mem::take(&mut self.raw);
        self.replicate_received(w, raw);
        self.metrics.messages_in(&self.labels, &counts);
        if let Some(r) = self.recorder.as_mut() {
            r.flush();
        }
        if w == Which::Main {
            self.publish();
        }
    }

    fn flush_updates(&mut self) {
        if !self.updates.is_empty() {
            let bodies = std::mem::take(&mut self.updates);
            self.rib.send(RibCmd::Updates {
                peer: self.s.id,
                bodies,
            });
        }
    }

    /// The core reports Established: tell the RIB, write the NSR record.
    fn established(&mut self, gen: u64, neg: &Negotiated) {
        let local = self.main.as_ref().map(|c| c.local);
        let spec = session_spec(&self.s, neg, local, &Interfaces::new());
        tracing::info!(local = ?local, gen, "session up");
        self.rib.send(RibCmd::PeerUp { spec, gen });
        self.replicate_session();
        if let Ok(mut st) = self.status.lock() {
            st.established_at = Some(Instant::now());
            st.local = local;
        }
    }

    /// The session as an MRT BGP4MP record names it.
    fn mrt_session(&self) -> holdfast_wire::mrt::MrtSession {
        let local = self
            .main
            .as_ref()
            .map(|c| c.local.ip())
            .unwrap_or(match self.s.address {
                IpAddr::V4(_) => IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED),
                IpAddr::V6(_) => IpAddr::V6(std::net::Ipv6Addr::UNSPECIFIED),
            });
        let four_octet_as = self
            .status
            .lock()
            .ok()
            .and_then(|s| s.negotiated.as_ref().map(|n| n.four_octet_as))
            .unwrap_or(true);
        holdfast_wire::mrt::MrtSession {
            peer_as: self.s.spec.remote_as,
            local_as: self.s.spec.local_as,
            peer: self.s.address,
            local,
            four_octet_as,
        }
    }

    fn on_timer(&mut self) {
        self.replicate_acked();
        self.reprobe_due();
        if self.core.hold_grace_due(now()) {
            if let Some(last_ack_ms) = self.main.as_ref().and_then(Conn::last_ack_recv_ms) {
                self.input(PeerInput::TransportAlive { last_ack_ms });
            }
        }
        if self.core.next_deadline().is_some_and(|d| d <= now()) {
            // Bytes the kernel holds for a session are read before any of
            // its timers (the HoldTimer above all) is judged: after this
            // process was stopped or starved, the peer's KEEPALIVEs wait
            // there, and the loop reads them first on its next turn.
            if [self.main.as_ref(), self.extra.as_ref()]
                .into_iter()
                .flatten()
                .any(Conn::unread_in_kernel)
            {
                return;
            }
            self.input(PeerInput::Timer);
        }
    }

    /// Returns false when the task must end.
    fn on_cmd(&mut self, cmd: PeerCmd) -> bool {
        match cmd {
            PeerCmd::Inbound(stream) => self.on_inbound(stream),
            PeerCmd::Resume(r) => self.resume(*r),
            PeerCmd::AbortResume => self.input(PeerInput::AbortResume),
            PeerCmd::Rib(ToPeer::Send { gen, bytes }) => {
                let bytes = RibBytes(bytes);
                self.input(PeerInput::RibSend { gen, bytes });
            }
            PeerCmd::Rib(ToPeer::Reset { gen, notification }) => {
                self.input(PeerInput::RibReset { gen, notification });
            }
            PeerCmd::Rib(ToPeer::Refreshed { gen }) => self.input(PeerInput::RibRefreshed { gen }),
            PeerCmd::Reconfigure(new) => {
                let transport_changed = new.sock != self.s.sock || new.port != self.s.port;
                let params = new.params();
                self.s = *new;
                self.input(PeerInput::Reconfigure {
                    params,
                    transport_changed,
                });
            }
            PeerCmd::AdminReset => self.input(PeerInput::AdminReset),
            PeerCmd::Bfd(true) => self.input(PeerInput::BfdUp),
            PeerCmd::Bfd(false) => self.input(PeerInput::BfdDown),
            PeerCmd::Mrt(log) => self.mrt = log,
            PeerCmd::Bmp(hub) => self.bmp.hub = Some(hub),
            PeerCmd::Shutdown => {
                self.input(PeerInput::Shutdown);
                self.bmp_deconfigured();
                return false;
            }
        }
        true
    }

    fn publish(&self) {
        if let Ok(mut st) = self.status.lock() {
            st.state = self.core.state();
            st.negotiated = self.core.negotiated().cloned();
            st.stats = self.core.stats().clone();
        }
    }
}

/// The engine's view of an established session: the neighbour's spec
/// completed with what the OPENs negotiated and our local addresses (the
/// addresses of `local`'s interface, from `ifs`).
pub fn session_spec(
    s: &PeerSettings,
    neg: &Negotiated,
    local: Option<SocketAddr>,
    ifs: &Interfaces,
) -> PeerSpec {
    let mut spec = s.spec.clone();
    spec.router_id = neg.remote_id;
    spec.families = neg.families.clone();
    spec.four_octet_as = neg.four_octet_as;
    if let Some(local) = local {
        let (v4, v6, ll) = ifs.local_addresses(local.ip());
        spec.local_addr_v4 = spec.local_addr_v4.or(v4);
        spec.local_addr_v6 = spec.local_addr_v6.or(v6);
        spec.local_addr_v6_ll = spec.local_addr_v6_ll.or(ll);
    }
    spec
}

/// The engine spec and codec context of a stored session resumed by the
/// neighbour `s`: what its stored OPENs negotiate with the configuration.
/// `None` (logged) when they cannot be read or no longer negotiate: the
/// session then starts afresh.
pub fn resume_spec(
    s: &PeerSettings,
    rec: &holdfast_nsr::SessionRecord,
    ifs: &Interfaces,
) -> Option<(holdfast_rib::PeerSpec, CodecCtx)> {
    let opens = decode_open(&rec.open_sent).and_then(|l| Ok((l, decode_open(&rec.open_received)?)));
    let neg = match opens {
        Ok((local, remote)) => negotiate(&local, &remote, &s.session),
        Err(e) => {
            tracing::error!(peer = %s.address, error = %e, "stored OPEN unreadable: session starts afresh");
            return None;
        }
    };
    let neg = match neg {
        Ok(n) => n,
        Err(n) => {
            tracing::error!(peer = %s.address, code = n.code, subcode = n.subcode, "stored OPENs no longer negotiate with this configuration: session starts afresh");
            return None;
        }
    };
    let spec = session_spec(s, &neg, Some(rec.local), ifs);
    let ctx = CodecCtx {
        four_octet_as: neg.four_octet_as,
        ibgp: neg.remote_as == s.session.local_as,
    };
    Some((spec, ctx))
}
