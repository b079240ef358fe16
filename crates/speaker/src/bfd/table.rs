//! The BFD thread's sessions: demultiplexing, the one choke point of every
//! session input ([`Table::input`]), transmission, and telling BGP.

use super::{BfdCmd, BfdSpec, MULTIHOP_PORT, SINGLE_HOP_PORT};
use crate::msg::peer::PeerCmd;
use crate::nsr::{Nsr, Samples, Then};
use crate::obs::{Metrics, PeerLabels};
use holdfast_api::BfdSessionInfo;
use holdfast_bfd::{ControlPacket, Input, Output, ResumeState, Session, State, Time};
use holdfast_config::NeighborKey;
use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::num::NonZeroU32;
use std::os::fd::AsFd;
use std::sync::Arc;
use std::time::Instant;
use tokio::sync::mpsc;

/// RFC 5881 §4: the source port range of control packets.
const SOURCE_PORTS: std::ops::RangeInclusive<u16> = 49152..=65535;

/// One received datagram.
pub struct Rx {
    pub data: Vec<u8>,
    pub from: SocketAddr,
    pub ttl: Option<u8>,
    pub multihop: bool,
    /// When the kernel received it, when it said.
    pub at: Option<Time>,
}

struct Entry {
    key: NeighborKey,
    labels: PeerLabels,
    span: tracing::Span,
    spec: BfdSpec,
    session: Session,
    /// The send socket (bound to the source address and port), once the
    /// source address is known.
    sock: Option<UdpSocket>,
    peer_tx: mpsc::UnboundedSender<PeerCmd>,
    up_since: Option<Instant>,
    state_changes: u64,
    /// When our last packet left, and the longest gap between two while Up.
    last_tx: Option<Instant>,
    tx_gap_max: std::time::Duration,
    /// Recent gaps while Up, µs.
    tx_gaps: Samples,
    /// What was last replicated (the resume state without the
    /// authentication sequence numbers, and the source), with NSR.
    replicated: Option<(ResumeState, SocketAddr)>,
}

pub struct Table {
    metrics: Arc<Metrics>,
    nsr: Option<Nsr>,
    entries: HashMap<u32, Entry>,
    by_key: HashMap<NeighborKey, u32>,
    /// (peer address, multihop) → local discriminator.
    by_addr: HashMap<(IpAddr, bool), u32>,
    rng: u64,
    next_port: u16,
    /// The latest time an input was handled at: inputs never go back in
    /// time (a packet's arrival time may precede a timer just handled).
    clock: Time,
}

/// Whether a packet with Your Discriminator zero and this My
/// Discriminator may be handed to `session`, found by address: only while
/// the session is Down or has no remote discriminator yet, or when it is
/// the one the session knows.
fn address_match_accepts(session: &Session, my_discriminator: u32) -> bool {
    matches!(session.state(), State::Down | State::AdminDown)
        || session.remote_discriminator() == 0
        || session.remote_discriminator() == my_discriminator
}

/// An IPv4-mapped IPv6 address as IPv4, so that both spellings match.
fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

impl Table {
    pub fn new(metrics: Arc<Metrics>, nsr: Option<Nsr>) -> Table {
        let seed = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64)
            ^ u64::from(std::process::id()) << 32;
        Table {
            metrics,
            nsr,
            entries: HashMap::new(),
            by_key: HashMap::new(),
            by_addr: HashMap::new(),
            rng: seed | 1,
            next_port: *SOURCE_PORTS.start() + (seed % 16_000) as u16,
            clock: Time::ZERO,
        }
    }

    fn random(&mut self) -> u64 {
        // xorshift64*
        self.rng ^= self.rng >> 12;
        self.rng ^= self.rng << 25;
        self.rng ^= self.rng >> 27;
        self.rng.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// A random discriminator, non-zero and not in use (RFC 5880 §6.8.1).
    fn discriminator(&mut self) -> NonZeroU32 {
        loop {
            let d = (self.random() >> 32) as u32;
            if let Some(d) = NonZeroU32::new(d) {
                if !self.entries.contains_key(&d.get()) {
                    return d;
                }
            }
        }
    }

    pub fn next_deadline(&self) -> Option<Time> {
        self.entries
            .values()
            .filter_map(|e| e.session.next_deadline())
            .min()
    }

    pub fn command(&mut self, now: Time, cmd: BfdCmd) {
        match cmd {
            BfdCmd::Add {
                key,
                spec,
                peer,
                resume,
            } => match resume {
                Some(rec) => self.resume(now, key, spec, peer, *rec),
                None => self.add(now, key, spec, peer),
            },
            BfdCmd::Configure { key, session } => {
                if let Some(&d) = self.by_key.get(&key) {
                    if let Some(e) = self.entries.get_mut(&d) {
                        e.spec.session = session.clone();
                    }
                    self.input(now, d, Input::Configure(session));
                }
            }
            BfdCmd::PathReady => {
                let all: Vec<u32> = self.entries.keys().copied().collect();
                for d in all {
                    self.input(now, d, Input::PathReady);
                }
            }
            BfdCmd::Remove { key } => self.remove(now, &key),
            BfdCmd::Show(reply) => {
                let _ = reply.send(self.show());
            }
            BfdCmd::Realtime(priority) => super::schedule(priority),
        }
    }

    fn add(
        &mut self,
        now: Time,
        key: NeighborKey,
        spec: BfdSpec,
        peer_tx: mpsc::UnboundedSender<PeerCmd>,
    ) {
        self.remove(now, &key);
        let labels = PeerLabels {
            instance: key.instance.clone(),
            peer: key.address.to_string(),
        };
        let span = tracing::info_span!("bfd", instance = %key.instance, peer = %key.address);
        let discr = self.discriminator();
        let seed = self.random();
        let session = match Session::new(spec.session.clone(), discr, seed, now) {
            Ok(s) => s,
            Err(e) => {
                span.in_scope(|| tracing::error!("BFD session not started: {e}"));
                return;
            }
        };
        span.in_scope(|| {
            self.metrics
                .bfd_configured(&labels, discr.get(), &spec.peer.to_string())
        });
        self.by_key.insert(key.clone(), discr.get());
        self.by_addr
            .insert((canonical(spec.peer), spec.multihop), discr.get());
        self.entries.insert(
            discr.get(),
            Entry {
                key,
                labels,
                span,
                spec,
                session,
                sock: None,
                peer_tx,
                up_since: None,
                state_changes: 0,
                last_tx: None,
                tx_gap_max: std::time::Duration::ZERO,
                tx_gaps: Samples::default(),
                replicated: None,
            },
        );
        self.input(now, discr.get(), Input::Timer);
    }

    /// Takeover: the session continues from the old primary's record, on
    /// the same source address and port.
    fn resume(
        &mut self,
        now: Time,
        key: NeighborKey,
        spec: BfdSpec,
        peer_tx: mpsc::UnboundedSender<PeerCmd>,
        rec: holdfast_nsr::BfdRecord,
    ) {
        let span = tracing::info_span!("bfd", instance = %key.instance, peer = %key.address);
        let rs: ResumeState = match serde_json::from_value(rec.state.clone()) {
            Ok(rs) => rs,
            Err(e) => {
                span.in_scope(|| {
                    tracing::error!("stored BFD state unreadable, starting afresh: {e}")
                });
                return self.add(now, key, spec, peer_tx);
            }
        };
        let usable = canonical(rec.peer) == canonical(spec.peer)
            && rec.multihop == spec.multihop
            && !self.entries.contains_key(&rs.local_discriminator);
        let seed = self.random();
        let resumed = if usable {
            Session::resume(spec.session.clone(), rs, seed, now).map_err(|e| e.to_string())
        } else {
            Err("the stored session no longer matches the configuration".to_string())
        };
        let (session, outputs) = match resumed {
            Ok(x) => x,
            Err(e) => {
                span.in_scope(|| tracing::warn!("BFD session not resumed, starting afresh: {e}"));
                return self.add(now, key, spec, peer_tx);
            }
        };
        self.remove(now, &key);
        let d = session.local_discriminator();
        let labels = PeerLabels {
            instance: key.instance.clone(),
            peer: key.address.to_string(),
        };
        let sock = match open_socket_at(rec.local, spec.vrf.as_deref()) {
            Ok(s) => Some(s),
            Err(e) => {
                span.in_scope(
                    || tracing::warn!(local = %rec.local, "BFD source not bound yet: {e}"),
                );
                None
            }
        };
        span.in_scope(|| {
            self.metrics
                .bfd_configured(&labels, d, &spec.peer.to_string());
            tracing::info!(local = %rec.local, state = %session.state(), "BFD session resumed after takeover");
        });
        self.by_key.insert(key.clone(), d);
        self.by_addr
            .insert((canonical(spec.peer), spec.multihop), d);
        let up = session.state() == State::Up;
        self.entries.insert(
            d,
            Entry {
                key,
                labels,
                span,
                spec,
                session,
                sock,
                peer_tx,
                up_since: up.then(Instant::now),
                state_changes: 0,
                last_tx: None,
                tx_gap_max: std::time::Duration::ZERO,
                tx_gaps: Samples::default(),
                replicated: None,
            },
        );
        self.carry_out(d, outputs);
    }

    /// With NSR: writes every session's record anew (after a store outage).
    pub fn replicate_all(&mut self) {
        let ds: Vec<u32> = self.entries.keys().copied().collect();
        for d in ds {
            if let Some(e) = self.entries.get_mut(&d) {
                e.replicated = None;
            }
            self.replicate(d);
        }
    }

    /// With NSR: replicates the session's record if it changed.
    fn replicate(&mut self, d: u32) {
        let Some(nsr) = &self.nsr else { return };
        let Some(e) = self.entries.get_mut(&d) else {
            return;
        };
        let Some(local) = e.sock.as_ref().and_then(|s| s.local_addr().ok()) else {
            return;
        };
        let rs = e.session.resume_state();
        let mut cmp = rs.clone();
        // Keyed MD5/SHA1 advance bfd.XmitAuthSeq only when the packet's
        // content changes: replicated on every change, so that the store
        // (and a relay) holds the number of the packets being sent. The
        // meticulous types advance it with every packet: not a reason to
        // write.
        if rs.auth.is_some_and(|a| a.auth_type.is_meticulous()) {
            cmp.xmit_auth_seq = 0;
        }
        cmp.rcv_auth_seq = None;
        if e.replicated.as_ref() == Some(&(cmp.clone(), local)) {
            return;
        }
        let state = match serde_json::to_value(&rs) {
            Ok(v) => v,
            Err(err) => {
                tracing::error!("BFD state not replicated: {err}");
                return;
            }
        };
        let key = e.key.to_string();
        let record = holdfast_nsr::BfdRecord {
            schema: holdfast_nsr::SCHEMA_VERSION,
            instance: e.key.instance.clone(),
            peer: e.spec.peer,
            local,
            multihop: e.spec.multihop,
            state,
        };
        e.span
            .in_scope(|| tracing::debug!(state = %rs.state, "BFD state replicated"));
        nsr.submit(
            &key.clone(),
            Some(holdfast_nsr::Op::Bfd { key, record }),
            nsr.gen(),
            Then::Nothing,
        );
        e.replicated = Some((cmp, local));
    }

    fn remove(&mut self, now: Time, key: &NeighborKey) {
        let Some(d) = self.by_key.get(key).copied() else {
            return;
        };
        self.input(now, d, Input::AdminDown);
        self.by_key.remove(key);
        if let Some(nsr) = &self.nsr {
            let k = key.to_string();
            nsr.submit(
                &k.clone(),
                Some(holdfast_nsr::Op::BfdRemove { key: k }),
                nsr.gen(),
                Then::Nothing,
            );
        }
        if let Some(e) = self.entries.remove(&d) {
            self.by_addr
                .remove(&(canonical(e.spec.peer), e.spec.multihop));
            let _ = e.peer_tx.send(PeerCmd::Bfd(true));
            e.span.in_scope(|| self.metrics.bfd_removed(&e.labels));
        }
    }

    /// The daemon stops: every session sends AdminDown.
    pub fn shutdown(&mut self, now: Time) {
        let keys: Vec<NeighborKey> = self.by_key.keys().cloned().collect();
        for k in keys {
            self.remove(now, &k);
        }
    }

    /// Every session whose timer is due.
    pub fn timers(&mut self, now: Time) {
        let due: Vec<u32> = self
            .entries
            .iter()
            .filter(|(_, e)| e.session.next_deadline().is_some_and(|d| d <= now))
            .map(|(d, _)| *d)
            .collect();
        for d in due {
            self.input(now, d, Input::Timer);
        }
    }

    /// A datagram from a receive socket: the RFC 5881 TTL check, then the
    /// session by Your Discriminator, or by address when it is zero
    /// (RFC 5880 §6.8.6). It is handled at its arrival time when the
    /// kernel stamped it (never later than `now`).
    pub fn received(&mut self, now: Time, rx: Rx) {
        let now = rx.at.map_or(now, |at| at.min(now));
        if !rx.multihop && rx.ttl != Some(255) {
            tracing::debug!(from = %rx.from, ttl = ?rx.ttl, "BFD single-hop packet with TTL ≠ 255 dropped (RFC 5881 §5)");
            return;
        }
        let pkt = match ControlPacket::decode(&rx.data) {
            Ok(p) => p,
            Err(e) => {
                tracing::debug!(from = %rx.from, "BFD packet dropped: {e}");
                return;
            }
        };
        let from = canonical(rx.from.ip());
        let d = if pkt.your_discriminator != 0 {
            pkt.your_discriminator
        } else {
            match self.by_addr.get(&(from, rx.multihop)) {
                Some(d) => *d,
                None => {
                    tracing::debug!(%from, "BFD packet for no session dropped");
                    return;
                }
            }
        };
        let Some(e) = self.entries.get(&d) else {
            tracing::debug!(%from, discriminator = d, "BFD packet for an unknown discriminator dropped");
            return;
        };
        if pkt.your_discriminator == 0 && !address_match_accepts(&e.session, pkt.my_discriminator) {
            // RFC 5880 §6.8.6 selects a session by Your Discriminator; when
            // it is zero, by address "possibly including the My
            // Discriminator field". A session past Down that knows its
            // remote discriminator is not the one a packet with another
            // My Discriminator is for: the peer runs a second session to
            // this address (frr: bfdd's own peer beside bgpd's), whose Down
            // packets would otherwise take ours Down.
            e.span.in_scope(|| {
                self.metrics.bfd_packet(
                    &e.labels,
                    "dropped",
                    Some(&"another session of the peer (My Discriminator differs)"),
                )
            });
            return;
        }
        if canonical(e.spec.peer) != from || e.spec.multihop != rx.multihop {
            e.span.in_scope(|| {
                self.metrics.bfd_packet(
                    &e.labels,
                    "dropped",
                    Some(&"source address or mode differs"),
                )
            });
            return;
        }
        self.metrics.bfd_packet(&e.labels, "in", None);
        self.input(now, d, Input::Received(rx.data));
    }

    /// The one choke point of every input to a session: traced, handled
    /// by the session machine, its outputs carried out in order.
    fn input(&mut self, now: Time, d: u32, input: Input) {
        let now = now.max(self.clock);
        self.clock = now;
        let Some(e) = self.entries.get_mut(&d) else {
            return;
        };
        let outputs = e.span.in_scope(|| {
            tracing::trace!(input = input_name(&input), "BFD input");
            e.session.handle(now, input)
        });
        self.carry_out(d, outputs);
    }

    /// Whether this process is handing its sessions to another (a planned
    /// switchover it agreed to, or fenced): the new primary owns the BFD
    /// sessions from then on.
    fn handing_over(&self) -> bool {
        self.nsr.as_ref().is_some_and(|n| {
            n.shared.switching.load(std::sync::atomic::Ordering::SeqCst)
                || n.shared.fenced.load(std::sync::atomic::Ordering::SeqCst)
        })
    }

    /// Carries out a session's outputs in order, then replicates it.
    ///
    /// While handing over (see [`Table::handing_over`]) a session that is no
    /// longer Up is muted: its packets are not sent, its Down does not take
    /// BGP down, and it is not replicated (an Up session still replicates
    /// its changes until the new primary has claimed the instance). Once the service address has
    /// moved this process stops hearing the peer and would declare the
    /// session Down within the detection time; the peer must not see that
    /// (the new primary and the relay keep it Up).
    fn carry_out(&mut self, d: u32, outputs: Vec<Output>) {
        let handing_over = self.handing_over();
        let Some(e) = self.entries.get_mut(&d) else {
            return;
        };
        let span = e.span.clone();
        let _g = span.enter();
        for o in outputs {
            match o {
                Output::Send(_) if handing_over && e.session.state() != State::Up => {
                    self.metrics.bfd_packet(&e.labels, "dropped", None);
                }
                Output::Send(bytes) => {
                    let sent = send(e, &mut self.next_port, &bytes);
                    if sent {
                        let t = Instant::now();
                        if let (Some(last), Some(_)) = (e.last_tx, e.up_since) {
                            e.tx_gap_max = e.tx_gap_max.max(t - last);
                            e.tx_gaps.push((t - last).as_micros() as u64);
                        }
                        e.last_tx = Some(t);
                    }
                    let dir = if sent { "out" } else { "dropped" };
                    self.metrics.bfd_packet(&e.labels, dir, None);
                }
                Output::StateChanged { from, to, diag } => {
                    e.state_changes += 1;
                    self.metrics.bfd_state(&e.labels, from, to, diag);
                    e.up_since = (to == State::Up).then(Instant::now);
                    e.tx_gap_max = std::time::Duration::ZERO;
                    e.tx_gaps = Samples::default();
                    e.last_tx = None;
                    if to == State::Up {
                        let _ = e.peer_tx.send(PeerCmd::Bfd(true));
                    } else if handing_over {
                        tracing::info!(%from, %to, "BFD state change while handing over to the new primary: not acted on");
                    } else if from == State::Up
                        && to == State::Down
                        && e.session.remote_state() != State::AdminDown
                    {
                        let _ = e.peer_tx.send(PeerCmd::Bfd(false));
                    }
                }
                Output::PollComplete => {
                    let (tx, rx) = e.session.advertised_intervals();
                    tracing::info!(
                        tx_us = tx,
                        rx_us = rx,
                        "BFD Poll Sequence complete: new intervals in use"
                    );
                }
                Output::Dropped(reason) => {
                    self.metrics.bfd_packet(&e.labels, "dropped", Some(&reason));
                }
            }
        }
        let muted = handing_over && e.session.state() != State::Up;
        if !muted {
            self.replicate(d);
        }
    }

    pub fn show(&self) -> Vec<BfdSessionInfo> {
        let mut v: Vec<BfdSessionInfo> = self.entries.values().map(info).collect();
        v.sort_by(|a, b| a.neighbor.cmp(&b.neighbor));
        v
    }
}

fn input_name(i: &Input) -> &'static str {
    match i {
        Input::Received(_) => "received",
        Input::Timer => "timer",
        Input::AdminDown => "admin-down",
        Input::AdminUp => "admin-up",
        Input::Configure(_) => "configure",
        Input::PathReady => "path-ready",
    }
}

/// The source address: the configured local address, else the one the
/// kernel routes from towards the peer.
fn source_address(spec: &BfdSpec) -> std::io::Result<IpAddr> {
    if let Some(l) = spec.local {
        return Ok(l);
    }
    let any: SocketAddr = match spec.peer {
        IpAddr::V4(_) => (std::net::Ipv4Addr::UNSPECIFIED, 0).into(),
        IpAddr::V6(_) => (std::net::Ipv6Addr::UNSPECIFIED, 0).into(),
    };
    let probe = UdpSocket::bind(any)?;
    probe.connect((spec.peer, SINGLE_HOP_PORT))?;
    Ok(probe.local_addr()?.ip())
}

/// A send socket on the source address and a free port of 49152–65535,
/// TTL / hop limit 255 (RFC 5881 §4, RFC 5883 §5).
fn open_socket(spec: &BfdSpec, next_port: &mut u16) -> std::io::Result<UdpSocket> {
    use socket2::{Domain, Protocol, Socket, Type};
    let src = source_address(spec)?;
    let span = u32::from(*SOURCE_PORTS.end() - *SOURCE_PORTS.start()) + 1;
    for _ in 0..span {
        let port = *next_port;
        *next_port = if port == *SOURCE_PORTS.end() {
            *SOURCE_PORTS.start()
        } else {
            port + 1
        };
        let domain = if src.is_ipv6() {
            Domain::IPV6
        } else {
            Domain::IPV4
        };
        let s = Socket::new(domain, Type::DGRAM, Some(Protocol::UDP))?;
        if let Some(vrf) = &spec.vrf {
            holdfast_linux::bind_to_device(s.as_fd(), vrf)?;
        }
        match s.bind(&SocketAddr::new(src, port).into()) {
            Ok(()) => {
                holdfast_linux::set_ttl(s.as_fd(), src.is_ipv6(), 255)?;
                s.set_nonblocking(true)?;
                return Ok(s.into());
            }
            Err(e) if e.kind() == std::io::ErrorKind::AddrInUse => continue,
            Err(e) => return Err(e),
        }
    }
    Err(std::io::Error::from(std::io::ErrorKind::AddrInUse))
}

/// A send socket on exactly `addr` (a takeover keeps the old primary's
/// source port); `IP_FREEBIND`, as the service address may arrive later.
fn open_socket_at(addr: SocketAddr, vrf: Option<&str>) -> std::io::Result<UdpSocket> {
    use socket2::{Domain, Protocol, Socket, Type};
    let domain = if addr.is_ipv6() {
        Domain::IPV6
    } else {
        Domain::IPV4
    };
    let s = Socket::new(domain, Type::DGRAM, Some(Protocol::UDP))?;
    if let Some(vrf) = vrf {
        holdfast_linux::bind_to_device(s.as_fd(), vrf)?;
    }
    if addr.is_ipv6() {
        s.set_freebind_ipv6(true)?;
    } else {
        s.set_freebind(true)?;
    }
    s.set_reuse_address(true)?;
    s.bind(&addr.into())?;
    holdfast_linux::set_ttl(s.as_fd(), addr.is_ipv6(), 255)?;
    s.set_nonblocking(true)?;
    Ok(s.into())
}

/// Sends one control packet; `false` when it could not leave.
fn send(e: &mut Entry, next_port: &mut u16, bytes: &[u8]) -> bool {
    if e.sock.is_none() {
        match open_socket(&e.spec, next_port) {
            Ok(s) => {
                if let Ok(a) = s.local_addr() {
                    tracing::info!(local = %a, "BFD source bound");
                }
                e.sock = Some(s);
            }
            Err(err) => {
                tracing::debug!("BFD send socket: {err}");
                return false;
            }
        }
    }
    let port = if e.spec.multihop {
        MULTIHOP_PORT
    } else {
        SINGLE_HOP_PORT
    };
    let Some(s) = &e.sock else { return false };
    match s.send_to(bytes, (e.spec.peer, port)) {
        Ok(_) => true,
        Err(err) => {
            tracing::debug!("BFD send: {err}");
            false
        }
    }
}

fn info(e: &Entry) -> BfdSessionInfo {
    let s = &e.session;
    let r = s.resume_state();
    let stats = s.stats();
    let agreed_rx = u64::from(r.required_min_rx_us.max(r.remote_desired_min_tx_us));
    BfdSessionInfo {
        neighbor: e.key.to_string(),
        peer: e.spec.peer.to_string(),
        local: e
            .sock
            .as_ref()
            .and_then(|s| s.local_addr().ok())
            .map(|a| a.to_string())
            .unwrap_or_default(),
        mode: if e.spec.multihop {
            "multihop"
        } else {
            "single-hop"
        }
        .into(),
        local_discriminator: s.local_discriminator(),
        remote_discriminator: s.remote_discriminator(),
        state: format!("{:?}", s.state()),
        remote_state: format!("{:?}", s.remote_state()),
        diag: s.local_diag().to_string(),
        tx_interval_us: s.tx_interval().map_or(0, |d| d.as_micros() as u64),
        rx_interval_us: if r.remote_detect_mult == 0 {
            0
        } else {
            agreed_rx
        },
        detection_time_us: s.detection_time().map_or(0, |d| d.as_micros() as u64),
        multiplier: s.config().detect_mult,
        remote_multiplier: r.remote_detect_mult,
        uptime_secs: e.up_since.map_or(0, |t| t.elapsed().as_secs()),
        packets_in: stats.packets_received,
        packets_out: stats.packets_sent,
        packets_dropped: stats.packets_dropped,
        state_changes: e.state_changes,
        auth: s
            .config()
            .auth
            .as_ref()
            .map_or_else(|| "none".to_string(), |a| a.auth_type.to_string()),
        tx_gap_max_us: e.tx_gap_max.as_micros() as u64,
        tx_gap_p50_us: e.tx_gaps.percentile(0.5),
        tx_gap_p99_us: e.tx_gaps.percentile(0.99),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use holdfast_bfd::{Diag, SessionConfig};

    fn from_peer(state: State, my: u32, your: u32) -> Input {
        Input::Received(
            ControlPacket {
                diag: Diag::None,
                state,
                poll: false,
                final_: false,
                control_plane_independent: false,
                demand: false,
                detect_mult: 3,
                my_discriminator: my,
                your_discriminator: your,
                desired_min_tx_us: 100_000,
                required_min_rx_us: 100_000,
                required_min_echo_rx_us: 0,
                auth: None,
            }
            .encode(),
        )
    }

    /// frr at lab start: bgpd's session (77) comes Up with ours; bfdd's
    /// second session to the same address (78) keeps sending Down with
    /// Your Discriminator zero. Those packets are not ours to take.
    #[test]
    fn a_second_session_of_the_peer_does_not_take_ours_down() {
        let local = NonZeroU32::new(5).unwrap();
        let t0 = Time::ZERO;
        let mut s = Session::new(SessionConfig::default(), local, 1, t0).unwrap();
        assert!(
            address_match_accepts(&s, 77),
            "a Down session takes any peer"
        );
        s.handle(t0, from_peer(State::Down, 77, 0));
        assert_eq!(s.state(), State::Init);
        assert!(address_match_accepts(&s, 77));
        assert!(
            !address_match_accepts(&s, 78),
            "Init knows its remote: 78 is another session"
        );
        s.handle(t0, from_peer(State::Init, 77, 5));
        assert_eq!(s.state(), State::Up);
        assert!(address_match_accepts(&s, 77));
        assert!(!address_match_accepts(&s, 78));
        // What the table protects against: handed to the session, 78's
        // Down packet takes it Down (RFC 5880 §6.8.6's state table).
        s.handle(t0, from_peer(State::Down, 78, 0));
        assert_eq!(
            s.state(),
            State::Down,
            "negative control: the session itself cannot tell"
        );
        assert!(
            address_match_accepts(&s, 78),
            "once Down, the peer's new session may join"
        );
    }

    #[test]
    fn a_kernel_timestamp_maps_onto_the_monotonic_scale() {
        let wall = std::time::SystemTime::now();
        let now = Time::from_secs(100);
        let at = super::super::arrival(wall - std::time::Duration::from_millis(1500), now, wall);
        assert_eq!(at, Time::from_millis(98_500));
        // A timestamp "in the future" (clock stepped) is now.
        let at = super::super::arrival(wall + std::time::Duration::from_secs(5), now, wall);
        assert_eq!(at, now);
    }
}
