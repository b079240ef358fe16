//! One task per neighbour on the I/O thread: it owns the neighbour's
//! connection(s), feeds every input to the pure FSM (`holdfast_fsm`),
//! executes the FSM's actions, and hands UPDATE bodies to the RIB thread.
//!
//! Covers RFC 4271 §6.8 connection collision detection (a second, inbound
//! connection gets its own FSM until one of the two wins), RFC 4724 §4.2
//! (a new connection from a graceful-restart peer while Established is a
//! restart: the old session ends gracefully), and the RFC 4724 restart and
//! stale-path timers on the helper side.
//!
//! Every event passes through [`PeerTask::fsm`], the one choke point where
//! it is traced; session state is changed only by the FSM.

mod nsr_ops;

use crate::conn::Conn;
use crate::nsr::Nsr;
use crate::obs::{Metrics, PeerLabels};
use crate::rib_thread::{RibCmd, RibHandle, ToPeer};
use crate::socket::{self, SockOpts};
use crate::tables::append_message;
use holdfast_fsm::{
    resolve_collision, Action, CollisionWinner, Event, Negotiated, Session, SessionConfig, State,
    Time,
};
use holdfast_rib::{PeerId, PeerSpec};
use holdfast_wire::{
    decode_notification, decode_open, decode_route_refresh, encode_keepalive, encode_notification,
    encode_open, msg_type, Notification, HEADER_LEN,
};
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, oneshot, watch};
use tracing::Instrument;

/// How long a graceful-restart peer's routes stay stale after it comes back,
/// waiting for End-of-RIB (FRR's default stale-path time).
const STALE_PATH_TIME: Duration = Duration::from_secs(360);

use holdfast_wire::error::cease_subcode::{
    ADMINISTRATIVE_RESET as CEASE_ADMIN_RESET, CONNECTION_COLLISION_RESOLUTION as CEASE_COLLISION,
    MAX_PREFIXES as CEASE_MAX_PREFIX, OTHER_CONFIGURATION_CHANGE as CEASE_CONFIG_CHANGE,
};
use holdfast_wire::error::error_code::CEASE;

/// Monotonic time since the daemon started: the FSM's time input.
pub fn now() -> Time {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    EPOCH.get_or_init(Instant::now).elapsed()
}

fn instant_of(t: Time) -> tokio::time::Instant {
    let epoch = Instant::now() - now();
    tokio::time::Instant::from_std(epoch + t)
}

/// Everything a peer task needs to know about its neighbour.
#[derive(Clone)]
pub struct PeerSettings {
    pub id: PeerId,
    pub instance: String,
    pub address: IpAddr,
    pub port: u16,
    pub enabled: bool,
    pub session: SessionConfig,
    pub sock: SockOpts,
    /// Engine spec without the per-session facts (filled at Established).
    pub spec: PeerSpec,
    /// Keep the peer's routes stale when it restarts (RFC 4724 helper).
    pub graceful_restart: bool,
    /// After a max-prefix Cease: restart automatically (`Some`) or stay
    /// down until an operator resets the session (`None`).
    pub max_prefix_restart: Option<u32>,
}

/// A session's tables from the RIB thread: (Adj-RIB-In, Adj-RIB-Out) as
/// encoded UPDATEs.
type SnapshotReply = oneshot::Receiver<(Vec<u8>, Vec<u8>)>;

/// Commands to a peer task.
pub enum PeerCmd {
    Inbound(TcpStream),
    /// NSR takeover: the session's connection, rebuilt with TCP_REPAIR.
    Resume(Box<crate::resume::Resumed>),
    /// NSR takeover: the connection could not be restored; start afresh.
    AbortResume,
    Rib(ToPeer),
    Reconfigure(Box<PeerSettings>),
    AdminReset,
    Shutdown,
}

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

struct Slot {
    fsm: Session,
    conn: Option<Conn>,
    connecting: Option<oneshot::Receiver<std::io::Result<TcpStream>>>,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Which {
    Main,
    Extra,
}

pub struct PeerTask {
    s: PeerSettings,
    main: Slot,
    /// A second connection racing the main one (collision detection).
    extra: Option<Slot>,
    /// Session generation: bumped at every Established.
    gen: u64,
    /// The RIB has been told the session is up.
    up: bool,
    last_negotiated: Option<Negotiated>,
    stale_deadline: Option<Time>,
    rib: RibHandle,
    rx: mpsc::UnboundedReceiver<PeerCmd>,
    status: SharedStatus,
    metrics: Arc<Metrics>,
    labels: PeerLabels,
    nsr: Option<Nsr>,
    /// Waiting for a restored connection (NSR takeover): RIB output is
    /// kept until the session resumes.
    resuming: Option<Vec<ToPeer>>,
    resync: Option<watch::Receiver<u64>>,
    /// A table snapshot being taken: (reply, whether it re-synchronises
    /// the session after a store outage or only compacts its logs).
    snapshot: Option<(SnapshotReply, bool)>,
    /// Log bytes after which the session's logs are compacted.
    compact_at: u64,
    /// When the peer's acknowledgement should be written again (the send
    /// tail is not empty yet).
    acked_due: Option<Time>,
}

/// Starts a peer task on the current (I/O) runtime.
pub fn spawn(
    s: PeerSettings,
    rib: RibHandle,
    metrics: Arc<Metrics>,
    nsr: Option<Nsr>,
    resuming: bool,
) -> (mpsc::UnboundedSender<PeerCmd>, SharedStatus) {
    let (tx, rx) = mpsc::unbounded_channel();
    let fsm = Session::new(s.session.clone());
    let status = Arc::new(Mutex::new(PeerStatus {
        state: fsm.state(),
        established_at: None,
        negotiated: None,
        stats: fsm.stats().clone(),
        local: None,
    }));
    let labels = PeerLabels {
        instance: s.instance.clone(),
        peer: s.address.to_string(),
    };
    let span = tracing::info_span!("peer", instance = %s.instance, peer = %s.address, asn = s.session.remote_as);
    let task = PeerTask {
        main: Slot {
            fsm,
            conn: None,
            connecting: None,
        },
        extra: None,
        gen: 0,
        up: false,
        last_negotiated: None,
        stale_deadline: None,
        rib,
        rx,
        status: status.clone(),
        metrics,
        labels,
        resync: nsr.as_ref().map(|n| n.shared.resync.subscribe()),
        nsr,
        resuming: resuming.then(Vec::new),
        snapshot: None,
        compact_at: u64::MAX,
        acked_due: None,
        s,
    };
    tokio::spawn(task.run().instrument(span));
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

async fn snapshot_done(s: Option<&mut (SnapshotReply, bool)>) -> Option<(Vec<u8>, Vec<u8>)> {
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
    async fn run(mut self) {
        self.metrics.peer_configured(&self.labels);
        if self.s.enabled && self.resuming.is_none() {
            self.fsm(Which::Main, Event::ManualStart);
        }
        loop {
            let deadline = [
                self.main.fsm.next_deadline(),
                self.extra.as_ref().and_then(|e| e.fsm.next_deadline()),
                self.stale_deadline,
                self.acked_due,
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
                r = read_from(self.main.conn.as_mut()) => self.on_read(Which::Main, r),
                r = read_from(self.extra.as_mut().and_then(|e| e.conn.as_mut())) => self.on_read(Which::Extra, r),
                r = connected(self.main.connecting.as_mut()) => {
                    self.main.connecting = None;
                    self.on_connected(r);
                }
                _ = tokio::time::sleep_until(sleep_to) => self.on_timer(),
                Ok(()) = changed(self.resync.as_mut()) => self.start_snapshot(true),
                r = snapshot_done(self.snapshot.as_mut()) => self.on_snapshot(r),
            }
        }
        self.metrics.peer_removed(&self.labels);
    }

    fn slot(&mut self, w: Which) -> Option<&mut Slot> {
        match w {
            Which::Main => Some(&mut self.main),
            Which::Extra => self.extra.as_mut(),
        }
    }

    /// The choke point: every FSM input of this neighbour passes here.
    fn fsm(&mut self, w: Which, ev: Event) {
        tracing::trace!(slot = ?w, event = ?ev, "fsm input");
        let t = now();
        let Some(slot) = self.slot(w) else { return };
        let actions = slot.fsm.handle(t, ev);
        self.execute(w, actions);
    }

    /// Carries out FSM actions. The shared status is refreshed when the main
    /// FSM acted; inputs that only move counters (an UPDATE or KEEPALIVE in
    /// Established) are published once per read instead of once per message.
    fn execute(&mut self, w: Which, actions: Vec<Action>) {
        if actions.is_empty() {
            return;
        }
        for a in actions {
            self.action(w, a);
        }
        if w == Which::Main {
            self.publish();
        }
    }

    fn action(&mut self, w: Which, a: Action) {
        match a {
            Action::Connect => {
                if w == Which::Main {
                    self.start_connect();
                }
            }
            Action::CloseConnection => {
                if let Some(slot) = self.slot(w) {
                    slot.conn = None;
                    slot.connecting = None;
                }
            }
            Action::SendOpen(open) => {
                let mut buf = Vec::with_capacity(64);
                encode_open(&open, &mut buf);
                if let Some(r) = self
                    .slot(w)
                    .and_then(|s| s.conn.as_mut())
                    .and_then(|c| c.repl.as_mut())
                {
                    r.open_tx = Some(buf[HEADER_LEN..].to_vec());
                }
                self.send(w, buf);
            }
            Action::SendKeepalive => {
                let mut buf = Vec::with_capacity(HEADER_LEN);
                encode_keepalive(&mut buf);
                self.send(w, buf);
            }
            Action::SendNotification(n) => {
                tracing::warn!(code = n.code, subcode = n.subcode, "sending NOTIFICATION");
                self.metrics.notification(&self.labels, "sent", &n);
                let mut buf = Vec::with_capacity(HEADER_LEN + 2 + n.data.len());
                encode_notification(&n, &mut buf);
                self.send(w, buf);
            }
            Action::StateChanged { from, to, reason } => {
                if w == Which::Main {
                    self.metrics.session_state(&self.labels, from, to, &reason);
                }
            }
            Action::Established(neg) => self.established(w, neg),
            Action::SessionDown { graceful, reason } => {
                if w == Which::Main {
                    self.session_down(graceful, &reason);
                }
            }
        }
    }

    fn send(&mut self, w: Which, buf: Vec<u8>) {
        if let Some(conn) = self.slot(w).and_then(|s| s.conn.as_mut()) {
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
        self.main.connecting = Some(rx);
    }

    fn on_connected(&mut self, r: std::io::Result<TcpStream>) {
        match r.and_then(|s| Conn::new(s, true, self.nsr.as_ref())) {
            Ok(conn) => {
                if self.main.conn.is_some() {
                    return;
                }
                tracing::debug!(local = %conn.local, "outbound connection up");
                self.main.conn = Some(conn);
                self.fsm(Which::Main, Event::TcpCrAcked);
            }
            Err(e) => {
                tracing::debug!(error = %e, "connect failed");
                self.fsm(Which::Main, Event::TcpConnectionFails);
            }
        }
    }

    fn on_inbound(&mut self, stream: TcpStream) {
        if !self.s.enabled {
            return;
        }
        if let Err(e) = socket::accepted(&stream, &self.s.sock) {
            tracing::warn!(error = %e, "socket options on accepted connection");
            return;
        }
        let conn = match Conn::new(stream, false, self.nsr.as_ref()) {
            Ok(c) => c,
            Err(e) => {
                tracing::debug!(error = %e, "inbound connection vanished");
                return;
            }
        };
        tracing::debug!(remote = %conn.remote, "inbound connection");
        match self.main.fsm.state() {
            State::Idle | State::Connect | State::Active => {
                self.main.connecting = None;
                self.main.conn = None;
                self.attach_inbound(Which::Main, conn);
            }
            State::OpenSent | State::OpenConfirm => {
                if self.extra.is_none() {
                    let fsm = Session::new(self.s.session.clone());
                    self.extra = Some(Slot {
                        fsm,
                        conn: None,
                        connecting: None,
                    });
                    self.attach_inbound(Which::Extra, conn);
                }
            }
            State::Established => {
                let peer_gr = self
                    .main
                    .fsm
                    .negotiated()
                    .and_then(|n| n.peer_graceful_restart.as_ref())
                    .is_some();
                if peer_gr && self.s.graceful_restart {
                    tracing::info!("new connection from an established graceful-restart peer: treating it as a restart");
                    self.fsm(Which::Main, Event::TcpConnectionFails);
                    self.main.conn = None;
                    self.attach_inbound(Which::Main, conn);
                } else {
                    // RFC 4271 §6.8: the new connection loses to the
                    // Established one; say why before closing it.
                    let mut conn = conn;
                    let mut buf = Vec::new();
                    encode_notification(&Self::collision_cease(), &mut buf);
                    conn.send_vec(buf);
                    tracing::info!("second connection while Established: closed with Cease/7");
                }
            }
        }
    }

    /// Puts an accepted connection on a slot's FSM, starting it if needed.
    fn attach_inbound(&mut self, w: Which, conn: Conn) {
        let Some(slot) = self.slot(w) else { return };
        if slot.fsm.state() == State::Idle {
            let t = now();
            let actions: Vec<Action> = slot
                .fsm
                .handle(t, Event::AutomaticStart)
                .into_iter()
                .filter(|a| !matches!(a, Action::Connect))
                .collect();
            self.execute(w, actions);
        }
        let Some(slot) = self.slot(w) else { return };
        slot.connecting = None;
        slot.conn = Some(conn);
        self.fsm(w, Event::TcpConnectionConfirmed);
    }

    fn on_read(&mut self, w: Which, r: std::io::Result<usize>) {
        match r {
            Ok(0) | Err(_) => {
                if let Err(e) = &r {
                    tracing::info!(slot = ?w, error = %e, "connection error");
                } else {
                    tracing::info!(slot = ?w, "connection closed by peer");
                }
                if let Some(slot) = self.slot(w) {
                    slot.conn = None;
                }
                self.fsm(w, Event::TcpConnectionFails);
                if w == Which::Extra {
                    self.extra = None;
                }
            }
            Ok(_) => self.drain_frames(w),
        }
    }

    fn drain_frames(&mut self, w: Which) {
        let mut updates: Vec<Vec<u8>> = Vec::new();
        let mut counts = [0u64; 6];
        let mut raw: Vec<u8> = Vec::new();
        while let Some(conn) = self.slot(w).and_then(|s| s.conn.as_mut()) {
            let frame = match conn.next_frame() {
                Ok(Some(f)) => f,
                Ok(None) => break,
                Err(e) => {
                    self.flush_updates(&mut updates);
                    self.fsm(w, Event::BgpHeaderErr(e.to_notification()));
                    break;
                }
            };
            counts[usize::from(frame.msg_type).min(5)] += 1;
            if frame.msg_type == msg_type::UPDATE {
                let established = self.slot(w).map(|s| s.fsm.state()) == Some(State::Established);
                if w == Which::Main && established && self.up {
                    // Asked per message: the session may have become
                    // replicated (Established) earlier in this same read.
                    if self.main_replicated(w) {
                        append_message(&mut raw, msg_type::UPDATE, &frame.body);
                    }
                    updates.push(frame.body);
                }
                self.fsm(w, Event::UpdateMsg);
                continue;
            }
            let body = frame.body.as_slice();
            self.flush_updates(&mut updates);
            let ev = match frame.msg_type {
                msg_type::OPEN => match decode_open(body) {
                    Ok(open) => {
                        if let Some(r) = self
                            .slot(w)
                            .and_then(|s| s.conn.as_mut())
                            .and_then(|c| c.repl.as_mut())
                        {
                            r.open_rx = Some(body.to_vec());
                        }
                        Event::BgpOpen(open)
                    }
                    Err(e) => Event::BgpOpenMsgErr(e.to_notification()),
                },
                msg_type::KEEPALIVE => Event::KeepAliveMsg,
                msg_type::NOTIFICATION => {
                    let n = decode_notification(body).unwrap_or(Notification {
                        code: 0,
                        subcode: 0,
                        data: body.to_vec(),
                    });
                    tracing::warn!(code = n.code, subcode = n.subcode, "received NOTIFICATION");
                    self.metrics.notification(&self.labels, "received", &n);
                    Event::NotifMsg(n)
                }
                msg_type::ROUTE_REFRESH => {
                    match decode_route_refresh(body) {
                        Ok(rr) if self.up && w == Which::Main && rr.subtype == 0 => {
                            self.rib.send(RibCmd::RouteRefresh {
                                peer: self.s.id,
                                family: rr.family,
                            })
                        }
                        Ok(_) => {}
                        Err(e) => tracing::warn!(error = %e, "malformed ROUTE-REFRESH ignored"),
                    }
                    Event::RouteRefreshMsg
                }
                _ => continue,
            };
            let was_open = matches!(ev, Event::BgpOpen(_));
            self.fsm(w, ev);
            if was_open {
                self.check_collision();
            }
        }
        self.flush_updates(&mut updates);
        self.replicate_received(w, raw);
        self.metrics.messages_in(&self.labels, &counts);
        if w == Which::Main {
            self.publish();
        }
    }

    fn flush_updates(&mut self, updates: &mut Vec<Vec<u8>>) {
        if !updates.is_empty() {
            let bodies = std::mem::take(updates);
            self.rib.send(RibCmd::Updates {
                peer: self.s.id,
                bodies,
            });
        }
    }

    /// RFC 4271 §6.8: once both connections know the peer's identifier, the
    /// one opened by the speaker with the higher identifier survives.
    fn check_collision(&mut self) {
        let Some(extra) = &self.extra else { return };
        let both_open = matches!(self.main.fsm.state(), State::OpenConfirm)
            && extra.fsm.state() == State::OpenConfirm;
        if !both_open {
            return;
        }
        let Some(remote_id) = extra.fsm.negotiated().map(|n| n.remote_id) else {
            return;
        };
        let existing_outbound = self.main.conn.as_ref().map(|c| c.outbound).unwrap_or(false);
        let winner = resolve_collision(self.s.session.local_id, remote_id, existing_outbound);
        tracing::info!(?winner, "connection collision resolved");
        match winner {
            CollisionWinner::Existing => self.drop_extra(),
            CollisionWinner::New => self.promote_extra(),
        }
    }

    fn collision_cease() -> Notification {
        Notification {
            code: CEASE,
            subcode: CEASE_COLLISION,
            data: vec![],
        }
    }

    fn drop_extra(&mut self) {
        self.fsm(Which::Extra, Event::Stop(Self::collision_cease()));
        self.extra = None;
    }

    fn promote_extra(&mut self) {
        let Some(extra) = self.extra.take() else {
            return;
        };
        let t = now();
        let actions = self
            .main
            .fsm
            .handle(t, Event::Stop(Self::collision_cease()));
        for a in actions {
            if matches!(a, Action::SendNotification(_) | Action::CloseConnection) {
                self.action(Which::Main, a);
            }
        }
        self.main = extra;
        self.publish();
    }

    fn established(&mut self, w: Which, neg: Negotiated) {
        if w == Which::Extra {
            self.promote_extra();
        } else if let Some(extra) = &self.extra {
            if extra.conn.is_some() {
                self.drop_extra();
            }
        }
        self.gen += 1;
        self.up = true;
        let local = self.main.conn.as_ref().map(|c| c.local);
        let spec = session_spec(&self.s, &neg, local);
        tracing::info!(
            remote_id = %neg.remote_id,
            hold = neg.hold_time,
            families = ?neg.families,
            local = ?local,
            "session established"
        );
        if self.stale_deadline.is_some() {
            self.stale_deadline = Some(now() + STALE_PATH_TIME);
        }
        self.last_negotiated = Some(neg);
        self.rib.send(RibCmd::PeerUp {
            spec,
            gen: self.gen,
        });
        self.replicate_session();
        if let Ok(mut st) = self.status.lock() {
            st.established_at = Some(Instant::now());
            st.local = local;
        }
    }

    fn session_down(&mut self, graceful: bool, reason: &str) {
        if !self.up {
            return;
        }
        self.up = false;
        let restart_time = self
            .last_negotiated
            .as_ref()
            .and_then(|n| n.peer_graceful_restart.as_ref())
            .map(|gr| gr.restart_time);
        let graceful = graceful && self.s.graceful_restart && restart_time.is_some();
        tracing::warn!(graceful, reason, "session down");
        self.rib.send(RibCmd::PeerDown {
            peer: self.s.id,
            graceful,
        });
        self.stale_deadline = if graceful {
            Some(now() + Duration::from_secs(restart_time.unwrap_or(0) as u64))
        } else {
            None
        };
        if let Ok(mut st) = self.status.lock() {
            st.established_at = None;
        }
    }

    fn on_timer(&mut self) {
        self.replicate_acked();
        let t = now();
        let actions = self.main.fsm.poll(t);
        self.execute(Which::Main, actions);
        if let Some(extra) = self.extra.as_mut() {
            let actions = extra.fsm.poll(t);
            self.execute(Which::Extra, actions);
            if self.extra.as_ref().map(|e| e.fsm.state()) == Some(State::Idle) {
                self.extra = None;
            }
        }
        if let Some(d) = self.stale_deadline {
            if d <= t {
                self.stale_deadline = None;
                tracing::info!("graceful-restart timer expired: flushing stale routes");
                self.rib.send(RibCmd::StaleTimeout(self.s.id));
            }
        }
    }

    /// Returns false when the task must end.
    fn on_cmd(&mut self, cmd: PeerCmd) -> bool {
        match cmd {
            PeerCmd::Inbound(stream) => self.on_inbound(stream),
            PeerCmd::Resume(r) => self.resume(*r),
            PeerCmd::AbortResume => {
                self.resuming = None;
                if self.s.enabled {
                    self.fsm(Which::Main, Event::ManualStart);
                }
            }
            PeerCmd::Rib(out) if self.resuming.is_some() => {
                if let Some(q) = self.resuming.as_mut() {
                    q.push(out);
                }
            }
            PeerCmd::Rib(ToPeer::Send { gen, bytes }) => {
                if self.up && gen == self.gen {
                    self.metrics.bytes_out(&self.labels, bytes.len());
                    let updates = count_messages(&bytes);
                    if let Some(conn) = self.main.conn.as_mut() {
                        conn.send(bytes);
                        // RIB output (UPDATEs, End-of-RIB) bypasses the FSM: tell it, so
                        // updates_out / msgs_out count it and the KeepaliveTimer restarts
                        // (RFC 4271 §4.4). One publish per batch, not per message.
                        self.fsm(Which::Main, Event::UpdatesSent(updates as u64));
                        self.publish();
                        self.replicate_acked();
                    }
                }
            }
            PeerCmd::Rib(ToPeer::Reset { gen, notification }) => {
                if self.up && gen == self.gen {
                    let max_prefix =
                        notification.code == CEASE && notification.subcode == CEASE_MAX_PREFIX;
                    self.fsm(Which::Main, Event::Stop(notification));
                    if max_prefix && self.s.max_prefix_restart.is_none() {
                        tracing::warn!(
                            "maximum prefix count exceeded: session stays down until reset"
                        );
                        self.fsm(Which::Main, Event::ManualStop);
                    }
                }
            }
            PeerCmd::Reconfigure(new) => self.reconfigure(*new),
            PeerCmd::AdminReset => {
                if self.main.fsm.state() == State::Idle {
                    if self.s.enabled {
                        self.fsm(Which::Main, Event::ManualStart);
                    }
                } else {
                    let n = Notification {
                        code: CEASE,
                        subcode: CEASE_ADMIN_RESET,
                        data: vec![],
                    };
                    self.fsm(Which::Main, Event::Stop(n));
                }
            }
            PeerCmd::Shutdown => {
                self.fsm(Which::Main, Event::ManualStop);
                self.session_down(false, "neighbour removed");
                return false;
            }
        }
        true
    }

    fn reconfigure(&mut self, new: PeerSettings) {
        let sock_changed = new.sock != self.s.sock || new.port != self.s.port;
        let reset = self.main.fsm.update_config(new.session.clone()) || sock_changed;
        let was_enabled = self.s.enabled;
        self.s = new;
        if !self.s.enabled {
            if was_enabled {
                self.fsm(Which::Main, Event::ManualStop);
                self.session_down(false, "neighbour disabled");
            }
        } else if !was_enabled {
            self.fsm(Which::Main, Event::ManualStart);
        } else if reset {
            tracing::info!("session settings changed: resetting");
            let n = Notification {
                code: CEASE,
                subcode: CEASE_CONFIG_CHANGE,
                data: vec![],
            };
            self.fsm(Which::Main, Event::Stop(n));
        }
    }

    fn publish(&self) {
        if let Ok(mut st) = self.status.lock() {
            st.state = self.main.fsm.state();
            st.negotiated = self.main.fsm.negotiated().cloned();
            st.stats = self.main.fsm.stats().clone();
        }
    }
}

/// The engine's view of an established session: the neighbour's spec
/// completed with what the OPENs negotiated and our local addresses.
pub fn session_spec(s: &PeerSettings, neg: &Negotiated, local: Option<SocketAddr>) -> PeerSpec {
    let mut spec = s.spec.clone();
    spec.router_id = neg.remote_id;
    spec.families = neg.families.clone();
    spec.four_octet_as = neg.four_octet_as;
    if let Some(local) = local {
        let (v4, v6, ll) = crate::addrs::local_addresses(local.ip());
        spec.local_addr_v4 = spec.local_addr_v4.or(v4);
        spec.local_addr_v6 = spec.local_addr_v6.or(v6);
        spec.local_addr_v6_ll = spec.local_addr_v6_ll.or(ll);
    }
    spec
}

/// BGP messages in a buffer of whole, framed messages (length at header octets 16..18).
fn count_messages(mut buf: &[u8]) -> usize {
    let mut n = 0;
    while buf.len() >= 19 {
        let len = usize::from(u16::from_be_bytes([buf[16], buf[17]]));
        if len < 19 || len > buf.len() {
            break;
        }
        buf = &buf[len..];
        n += 1;
    }
    n
}

#[cfg(test)]
mod count_tests {
    #[test]
    fn counts_framed_messages() {
        let msg = |len: u16| {
            let mut m = vec![0xff; 16];
            m.extend_from_slice(&len.to_be_bytes());
            m.push(2);
            m.resize(usize::from(len), 0);
            m
        };
        assert_eq!(super::count_messages(&[]), 0);
        assert_eq!(
            super::count_messages(&[msg(23), msg(54), msg(4096)].concat()),
            3
        );
    }
}
