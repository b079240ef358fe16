//! The ACK gate: outgoing TCP segments of BGP sessions pass through an
//! NFQUEUE served by a thread of the speaker, which keeps the kernel from
//! acknowledging received bytes before they are replicated (TENSOR §3.1,
//! TCPR §II-C).
//!
//! # Kernel side
//!
//! [`rules::install_gate`](crate::rules::install_gate) sends every outgoing
//! TCP packet to or from the BGP ports to queue `queue_num`. This module
//! binds the queue over a raw `NETLINK_NETFILTER` socket (the `nfq` crate
//! hides its descriptor, so it cannot be polled together with a wake-up
//! eventfd), asks for whole packets, and deliberately sets neither
//! `NFQA_CFG_F_FAIL_OPEN` nor `NFQA_CFG_F_GSO`:
//!
//! - without `GSO` the kernel segments large packets and completes their
//!   checksums before queueing, so headers can be rewritten with an
//!   incremental checksum update;
//! - without fail-open (and without `--queue-bypass` on the rule) the kernel
//!   drops packets when the queue is full or nobody is bound. When the
//!   speaker dies its netlink socket closes, the kernel drops every packet
//!   still queued and every new one: a dying primary's FIN or RST never
//!   reaches the peer.
//!
//! # Gating (mode [`GateMode::Protected`])
//!
//! Per registered connection the gate knows `C`, the highest ACK number that
//! may leave. For a packet with the ACK flag and ACK number `A` after `C`:
//!
//! - data or FIN: *clamped* (TCPR): the ACK field becomes `C`, the window
//!   field grows by `ceil((A - C) / 2^rcv_wscale)` (saturating) so the
//!   advertised right edge does not move left, the checksum is updated
//!   incrementally, and the packet leaves at once;
//! - a pure ACK is *held*; only the newest is kept (ACKs are cumulative),
//!   older ones are dropped (`superseded`). It is released unmodified once
//!   `C` reaches its `A`. Exception: a pure *window update* (same `A` as the
//!   kernel's previous packet, right edge beyond what the peer was told) is
//!   clamped instead, so that a peer stopped by a closed window hears about
//!   the opened window even while `C` is stuck behind a partial message;
//! - when [`AckGate::confirm`] advances `C` past what the peer has been told
//!   and no held packet carries it, the gate *synthesises* a pure ACK for
//!   `min(C, highest ACK the kernel sent)` from the headers of the
//!   connection's newest packet (sequence number, timestamp option, window
//!   keeping the kernel's right edge) and injects it through a raw socket.
//!   Without this, data whose ACK was only ever carried (clamped) by our
//!   own data segments would be acknowledged by nobody until the peer's
//!   retransmission timer fired. Each `confirm` that moves `C` past what
//!   the peer knows (and is not covered by a held ACK) costs one packet:
//!   confirm per store write, not per byte;
//! - a held pure ACK that later packets have overtaken (clamped data, a
//!   synthesised ACK) is not released as it is when `C` reaches it: its
//!   timestamp is older than one the peer has seen, and the peer's PAWS
//!   check (RFC 7323 §5) would silently discard it (observed: the peer then
//!   waits for its RTO). It is dropped and re-synthesised from the newest
//!   packet instead.
//!
//! Packets that cannot be rewritten, because they carry a TCP-MD5 or TCP-AO
//! signature or because they exceed the 65531-byte copy range, are held in
//! order (with everything after them on that connection) instead of being
//! clamped, and no ACK is synthesised for signed connections.
//!
//! RSTs, packets whose `A` is not after `C`, packets of unregistered
//! connections and anything that is not TCP pass unmodified.

use crate::packet::{self, seq_after, TcpMeta, ACK, RST, SYN};
use crate::sockopt;
use std::collections::{HashMap, VecDeque};
use std::io;
use std::mem::size_of;
use std::net::{IpAddr, SocketAddr, SocketAddrV4, SocketAddrV6};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::Instant;

/// A TCP connection as its socket sees it (`local_addr()`, `peer_addr()`).
/// IPv4-mapped IPv6 addresses are normalised to IPv4 (and flow info and
/// scope id cleared) so keys built from sockets match keys built from
/// packets; [`AckGate`] normalises every key it is given.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ConnKey {
    pub local: SocketAddr,
    pub remote: SocketAddr,
}

impl ConnKey {
    /// A normalised key.
    pub fn new(local: SocketAddr, remote: SocketAddr) -> Self {
        ConnKey {
            local: normalise(local),
            remote: normalise(remote),
        }
    }

    /// This key with both addresses normalised.
    pub fn normalised(self) -> Self {
        ConnKey::new(self.local, self.remote)
    }
}

fn normalise(a: SocketAddr) -> SocketAddr {
    match a {
        SocketAddr::V6(v6) => match v6.ip().to_ipv4_mapped() {
            Some(v4) => SocketAddr::V4(SocketAddrV4::new(v4, v6.port())),
            None => SocketAddr::V6(SocketAddrV6::new(*v6.ip(), v6.port(), 0, 0)),
        },
        v4 => v4,
    }
}

/// What the gate does with packets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GateMode {
    /// Normal operation: ACKs beyond the confirmed point are held or clamped.
    Protected,
    /// Store outage: every packet passes unmodified; held ones are released.
    Bypass,
    /// Fenced or exiting: every queued packet is dropped, registered or not.
    DropAll,
}

/// Counters of an [`AckGate`].
#[derive(Debug, Clone, Default)]
pub struct GateStats {
    /// Packets received from the queue (including synthesised ACKs, which
    /// come back through it).
    pub packets: u64,
    /// Accepted at once, unmodified.
    pub passed: u64,
    /// Accepted at once with the ACK field clamped.
    pub clamped: u64,
    /// Put on hold (ever).
    pub held: u64,
    /// On hold now.
    pub held_now: u64,
    /// Held, then let go: accepted, or (a held ACK overtaken by later
    /// packets) replaced by a synthesised one.
    pub released: u64,
    /// Dropped by [`GateMode::DropAll`] (new and held packets).
    pub dropped: u64,
    /// Held pure ACKs dropped because a newer one was held.
    pub superseded: u64,
    /// Added ACK delay in µs: for every packet whose ACK could not leave at
    /// once (held, or clamped), the time until an ACK covering it left.
    pub delay_p50_us: u64,
    pub delay_p99_us: u64,
    pub delay_max_us: u64,
    pub delay_samples: u64,
    /// Pure ACKs the gate built and injected (see the module docs).
    pub synthesized: u64,
}

// ---------------------------------------------------------------------------
// Delay histogram: fixed size, logarithmic buckets with 8 sub-buckets per
// power of two (relative error below 12.5%).

const HIST_LINEAR: usize = 16;
const HIST_BUCKETS: usize = HIST_LINEAR + 60 * 8;

struct Histogram {
    counts: Box<[u64; HIST_BUCKETS]>,
    n: u64,
    max: u64,
}

impl Histogram {
    fn new() -> Self {
        Histogram {
            counts: Box::new([0; HIST_BUCKETS]),
            n: 0,
            max: 0,
        }
    }

    fn bucket(v: u64) -> usize {
        if v < HIST_LINEAR as u64 {
            return v as usize;
        }
        let e = 63 - v.leading_zeros() as usize; // >= 4
        HIST_LINEAR + (e - 4) * 8 + ((v >> (e - 3)) & 7) as usize
    }

    /// The largest value that falls in bucket `i`.
    fn upper(i: usize) -> u64 {
        if i < HIST_LINEAR {
            return i as u64;
        }
        let e = (i - HIST_LINEAR) / 8 + 4;
        let sub = ((i - HIST_LINEAR) % 8) as u64;
        let step = 1u64 << (e - 3);
        (8 + sub) * step + (step - 1)
    }

    fn record(&mut self, v: u64) {
        self.counts[Self::bucket(v)] += 1;
        self.n += 1;
        self.max = self.max.max(v);
    }

    fn quantile(&self, q: f64) -> u64 {
        if self.n == 0 {
            return 0;
        }
        let rank = ((q * self.n as f64).ceil() as u64).clamp(1, self.n);
        let mut seen = 0;
        for (i, c) in self.counts.iter().enumerate() {
            seen += c;
            if seen >= rank {
                return Self::upper(i).min(self.max);
            }
        }
        self.max
    }
}

// ---------------------------------------------------------------------------
// The gate's decisions, free of I/O.

/// What to do with the packet just handed to [`Core::packet`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Verdict {
    Accept,
    /// Accept with the (rewritten) packet bytes.
    AcceptModified,
    Drop,
    /// Keep it; a later [`Out`] decides.
    Hold,
}

/// Further actions, to be carried out in order before the verdict of the
/// packet being handled.
#[derive(Debug)]
enum Out {
    Accept(u32),
    Drop(u32),
    Inject {
        pkt: Vec<u8>,
        dst: SocketAddr,
        oif: u32,
    },
}

/// A packet held in the kernel queue, and what we need to know about it.
struct Held {
    id: u32,
    arrival: u64,
    meta: TcpMeta,
    /// Its IP + TCP headers (for the template once it leaves).
    hdr: Vec<u8>,
    oif: u32,
}

/// The last packet of a connection that left: the pattern for synthesised
/// ACKs.
struct Template {
    meta: TcpMeta,
    hdr: Vec<u8>,
    arrival: u64,
    oif: u32,
}

/// How many not-yet-covered delay samples a connection keeps; beyond this
/// the newest sample is merged into the previous one.
const WAIT_CAP: usize = 1024;

struct Conn {
    /// `false` once unregistered, until the thread has released its packets.
    gated: bool,
    dirty: bool,
    confirmed: u32,
    wscale: u8,
    held_ack: Option<Held>,
    backlog: VecDeque<Held>,
    /// (arrival, ACK number) of packets whose ACK could not leave at once.
    waiting: VecDeque<(Instant, u32)>,
    /// Highest ACK number and right edge that left (what the peer knows).
    sent_ack: Option<u32>,
    sent_edge: Option<u32>,
    /// Highest ACK number and latest right edge the kernel produced.
    kernel_ack: Option<u32>,
    kernel_edge: Option<u32>,
    template: Option<Template>,
}

fn seq_max(a: Option<u32>, b: u32) -> u32 {
    match a {
        Some(a) if seq_after(a, b) => a,
        _ => b,
    }
}

impl Conn {
    fn new(confirmed: u32, wscale: u8) -> Self {
        Conn {
            gated: true,
            dirty: false,
            confirmed,
            wscale: wscale.min(14),
            held_ack: None,
            backlog: VecDeque::new(),
            waiting: VecDeque::new(),
            sent_ack: None,
            sent_edge: None,
            kernel_ack: None,
            kernel_edge: None,
            template: None,
        }
    }

    /// The highest ACK number that may leave: `C`, or what already left if
    /// that is more (after a bypass period) — repeating it reveals nothing.
    fn floor(&self) -> u32 {
        seq_max(self.sent_ack, self.confirmed)
    }

    fn gates(&self, m: &TcpMeta) -> bool {
        m.has(ACK) && !m.has(RST | SYN) && seq_after(m.ack, self.floor())
    }

    fn held_count(&self) -> u64 {
        self.backlog.len() as u64 + u64::from(self.held_ack.is_some())
    }

    /// Whether something is waiting that `confirm` could move.
    fn wants_confirm(&self) -> bool {
        self.held_count() > 0
            || self
                .kernel_ack
                .is_some_and(|k| !matches!(self.sent_ack, Some(s) if !seq_after(k, s)))
    }

    fn wait(&mut self, now: Instant, ack: u32) {
        if self.waiting.len() >= WAIT_CAP {
            if let Some(last) = self.waiting.back_mut() {
                last.1 = ack;
                return;
            }
        }
        self.waiting.push_back((now, ack));
    }

    /// Bookkeeping for a packet that leaves with ACK number `ack` and
    /// window field `win`.
    #[allow(clippy::too_many_arguments)]
    fn left(
        &mut self,
        hist: &mut Histogram,
        m: &TcpMeta,
        hdr: &[u8],
        ack: u32,
        win: u16,
        arrival: u64,
        oif: u32,
        now: Instant,
    ) {
        if !m.has(ACK) {
            return;
        }
        self.sent(
            hist,
            ack,
            (!m.has(SYN)).then(|| ack.wrapping_add(u32::from(win) << self.wscale)),
            now,
        );
        if m.has(SYN | RST) {
            return;
        }
        let newer = match &self.template {
            Some(t) => arrival > t.arrival,
            None => true,
        };
        if newer {
            match &mut self.template {
                Some(t) => {
                    t.meta = *m;
                    t.hdr.clear();
                    t.hdr.extend_from_slice(hdr);
                    t.arrival = arrival;
                    t.oif = oif;
                }
                None => {
                    self.template = Some(Template {
                        meta: *m,
                        hdr: hdr.to_vec(),
                        arrival,
                        oif,
                    })
                }
            }
        }
    }

    /// The peer is told `ack` (and `edge`): record covered delays.
    fn sent(&mut self, hist: &mut Histogram, ack: u32, edge: Option<u32>, now: Instant) {
        self.sent_ack = Some(seq_max(self.sent_ack, ack));
        if let Some(e) = edge {
            self.sent_edge = Some(seq_max(self.sent_edge, e));
        }
        while let Some(&(t, a)) = self.waiting.front() {
            if seq_after(a, ack) {
                break;
            }
            hist.record(now.saturating_duration_since(t).as_micros() as u64);
            self.waiting.pop_front();
        }
    }
}

struct Core {
    mode: GateMode,
    mode_changed: bool,
    conns: HashMap<ConnKey, Conn>,
    dirty: Vec<ConnKey>,
    arrival: u64,
    /// Whether ACKs can be synthesised (raw sockets are open).
    can_inject: bool,
    stats: GateStats,
    hist: Histogram,
}

impl Core {
    fn new(can_inject: bool) -> Self {
        Core {
            mode: GateMode::Protected,
            mode_changed: false,
            conns: HashMap::new(),
            dirty: Vec::new(),
            arrival: 0,
            can_inject,
            stats: GateStats::default(),
            hist: Histogram::new(),
        }
    }

    fn snapshot(&self) -> GateStats {
        let mut s = self.stats.clone();
        s.delay_p50_us = self.hist.quantile(0.50);
        s.delay_p99_us = self.hist.quantile(0.99);
        s.delay_max_us = self.hist.max;
        s.delay_samples = self.hist.n;
        s
    }

    fn mark_dirty(&mut self, key: ConnKey) -> bool {
        match self.conns.get_mut(&key) {
            Some(c) if !c.dirty => {
                c.dirty = true;
                self.dirty.push(key);
                true
            }
            _ => false,
        }
    }

    /// Returns whether the gate thread must be woken.
    fn register(&mut self, key: ConnKey, confirmed: u32, wscale: u8) -> bool {
        match self.conns.get_mut(&key) {
            Some(c) => {
                c.gated = true;
                c.wscale = wscale.min(14);
                if seq_after(confirmed, c.confirmed) {
                    c.confirmed = confirmed;
                }
                c.wants_confirm() && self.mark_dirty(key)
            }
            None => {
                self.conns.insert(key, Conn::new(confirmed, wscale));
                false
            }
        }
    }

    fn unregister(&mut self, key: &ConnKey) -> bool {
        match self.conns.get_mut(key) {
            Some(c) => {
                c.gated = false;
                self.mark_dirty(*key)
            }
            None => false,
        }
    }

    fn confirm(&mut self, key: &ConnKey, ack: u32) -> bool {
        let Some(c) = self.conns.get_mut(key) else {
            return false;
        };
        if !seq_after(ack, c.confirmed) {
            return false;
        }
        c.confirmed = ack;
        c.gated && c.wants_confirm() && self.mode == GateMode::Protected && self.mark_dirty(*key)
    }

    fn set_mode(&mut self, mode: GateMode) -> bool {
        if self.mode == mode {
            return false;
        }
        self.mode = mode;
        self.mode_changed = true;
        true
    }

    /// Decides about one queued packet. `pkt` may be rewritten in place.
    fn packet(
        &mut self,
        id: u32,
        pkt: &mut [u8],
        oif: u32,
        now: Instant,
        out: &mut Vec<Out>,
    ) -> Verdict {
        self.stats.packets += 1;
        self.arrival += 1;
        let arrival = self.arrival;
        if self.mode == GateMode::DropAll {
            self.stats.dropped += 1;
            return Verdict::Drop;
        }
        let Some(m) = packet::parse(pkt) else {
            self.stats.passed += 1;
            return Verdict::Accept;
        };
        let key = ConnKey::new(m.src, m.dst);
        let Some(c) = self.conns.get(&key) else {
            self.stats.passed += 1;
            return Verdict::Accept;
        };
        let (gated, kernel_ack) = (c.gated, c.kernel_ack);
        if !gated || self.mode == GateMode::Bypass {
            // Whatever is still held goes first.
            let target = if gated { None } else { kernel_ack };
            self.release_all(&key, target, now, out);
            if !gated {
                self.conns.remove(&key);
                self.stats.passed += 1;
                return Verdict::Accept;
            }
        }
        let mode = self.mode;
        let can_inject = self.can_inject;
        let hdr_len = m.headers_len().min(pkt.len());
        let Core {
            conns, stats, hist, ..
        } = self;
        let c = conns.get_mut(&key).expect("present");
        if mode == GateMode::Protected {
            release_ready(c, stats, hist, can_inject, now, out);
        }
        let prev_kernel_ack = c.kernel_ack;
        if m.has(ACK) && !m.has(SYN) {
            c.kernel_ack = Some(seq_max(c.kernel_ack, m.ack));
            c.kernel_edge = Some(m.right_edge(c.wscale));
        }
        if mode == GateMode::Bypass || !c.gates(&m) {
            c.left(
                hist,
                &m,
                &pkt[..hdr_len],
                m.ack,
                m.window,
                arrival,
                oif,
                now,
            );
            stats.passed += 1;
            return Verdict::Accept;
        }
        // The ACK number is beyond what may leave.
        c.wait(now, m.ack);
        let modifiable = !m.truncated && !m.signed;
        let hold = Held {
            id,
            arrival,
            meta: m,
            hdr: pkt[..hdr_len].to_vec(),
            oif,
        };
        if m.is_pure_ack() {
            let window_update = modifiable
                && c.backlog.is_empty()
                && prev_kernel_ack == Some(m.ack)
                && c.sent_edge
                    .is_some_and(|e| seq_after(m.right_edge(c.wscale), e));
            if !window_update {
                if let Some(old) = c.held_ack.replace(hold) {
                    out.push(Out::Drop(old.id));
                    stats.superseded += 1;
                    stats.held_now -= 1;
                }
                stats.held += 1;
                stats.held_now += 1;
                return Verdict::Hold;
            }
        } else if !modifiable || !c.backlog.is_empty() {
            c.backlog.push_back(hold);
            stats.held += 1;
            stats.held_now += 1;
            return Verdict::Hold;
        }
        let floor = c.floor();
        let win = packet::clamp_ack(pkt, &m, floor, c.wscale);
        c.left(hist, &m, &pkt[..hdr_len], floor, win, arrival, oif, now);
        stats.clamped += 1;
        Verdict::AcceptModified
    }

    /// Releases (or, in `DropAll`, drops) everything held for `key`, in
    /// arrival order, then synthesises an ACK up to `target` if given.
    fn release_all(
        &mut self,
        key: &ConnKey,
        target: Option<u32>,
        now: Instant,
        out: &mut Vec<Out>,
    ) {
        let can_inject = self.can_inject;
        let drop = self.mode == GateMode::DropAll;
        let Core {
            conns, stats, hist, ..
        } = self;
        let Some(c) = conns.get_mut(key) else { return };
        let mut all: Vec<Held> = c.backlog.drain(..).chain(c.held_ack.take()).collect();
        all.sort_by_key(|h| h.arrival);
        for h in all {
            if drop {
                out.push(Out::Drop(h.id));
                stats.dropped += 1;
                stats.held_now -= 1;
            } else {
                release(c, h, stats, hist, can_inject, now, out);
            }
        }
        if let (false, Some(t)) = (drop, target) {
            synthesize(c, stats, hist, can_inject, t, now, out);
        }
    }

    /// Work queued by `confirm`, `unregister` and `set_mode`.
    fn drain(&mut self, now: Instant, out: &mut Vec<Out>) {
        if self.mode_changed {
            self.mode_changed = false;
            if self.mode != GateMode::Protected {
                let keys: Vec<ConnKey> = self.conns.keys().copied().collect();
                for k in keys {
                    let target = match self.mode {
                        GateMode::Bypass => self.conns[&k].kernel_ack,
                        _ => None,
                    };
                    self.release_all(&k, target, now, out);
                }
            }
        }
        let dirty = std::mem::take(&mut self.dirty);
        for key in dirty {
            let Some(c) = self.conns.get_mut(&key) else {
                continue;
            };
            c.dirty = false;
            if !c.gated {
                let target = if self.mode == GateMode::DropAll {
                    None
                } else {
                    c.kernel_ack
                };
                self.release_all(&key, target, now, out);
                self.conns.remove(&key);
                continue;
            }
            if self.mode != GateMode::Protected {
                continue;
            }
            let can_inject = self.can_inject;
            let Core {
                conns, stats, hist, ..
            } = self;
            let c = conns.get_mut(&key).expect("present");
            release_ready(c, stats, hist, can_inject, now, out);
            if let Some(k) = c.kernel_ack {
                let target = if seq_after(k, c.confirmed) {
                    c.confirmed
                } else {
                    k
                };
                synthesize(c, stats, hist, can_inject, target, now, out);
            }
        }
    }
}

/// Releases, in arrival order, the held packets of `c` whose ACK may now
/// leave (the backlog only from its front).
fn release_ready(
    c: &mut Conn,
    stats: &mut GateStats,
    hist: &mut Histogram,
    can_inject: bool,
    now: Instant,
    out: &mut Vec<Out>,
) {
    let floor = c.floor();
    let ready = |m: &TcpMeta| !(m.has(ACK) && seq_after(m.ack, floor));
    let mut ready_list: Vec<Held> = Vec::new();
    while c.backlog.front().is_some_and(|h| ready(&h.meta)) {
        ready_list.extend(c.backlog.pop_front());
    }
    if c.held_ack.as_ref().is_some_and(|h| ready(&h.meta)) {
        ready_list.extend(c.held_ack.take());
    }
    ready_list.sort_by_key(|h| h.arrival);
    for h in ready_list {
        release(c, h, stats, hist, can_inject, now, out);
    }
}

/// Lets a held packet's ACK leave.
///
/// A held pure ACK that later packets have overtaken (a clamped data
/// segment, a synthesised ACK) is not released as it is: its timestamp is
/// older than one the peer has already seen, so the peer's PAWS check
/// (RFC 7323 §5) would discard it, and its sequence number is stale. It is
/// dropped and the same acknowledgment is synthesised from the newest
/// packet instead.
fn release(
    c: &mut Conn,
    h: Held,
    stats: &mut GateStats,
    hist: &mut Histogram,
    can_inject: bool,
    now: Instant,
    out: &mut Vec<Out>,
) {
    stats.released += 1;
    stats.held_now -= 1;
    let overtaken = c.template.as_ref().is_some_and(|t| t.arrival > h.arrival);
    if h.meta.is_pure_ack() && overtaken && can_inject && !h.meta.signed {
        out.push(Out::Drop(h.id));
        synthesize(c, stats, hist, can_inject, h.meta.ack, now, out);
        return;
    }
    out.push(Out::Accept(h.id));
    c.left(
        hist,
        &h.meta,
        &h.hdr,
        h.meta.ack,
        h.meta.window,
        h.arrival,
        h.oif,
        now,
    );
}

/// Tells the peer `target` with a synthesised pure ACK if it has not been
/// told that much yet and no held packet will tell it.
fn synthesize(
    c: &mut Conn,
    stats: &mut GateStats,
    hist: &mut Histogram,
    can_inject: bool,
    target: u32,
    now: Instant,
    out: &mut Vec<Out>,
) {
    if !can_inject || c.sent_ack.is_some_and(|s| !seq_after(target, s)) {
        return;
    }
    // A held pure ACK that will be released exactly here covers it.
    if c.held_ack.as_ref().is_some_and(|h| h.meta.ack == target) {
        return;
    }
    // The newest packet of the connection that left or is held as the
    // pattern: the held pure ACK if nothing left since it arrived (its
    // sequence number and timestamp are current). Held data (the backlog)
    // is never used: its sequence numbers have not been sent.
    let (meta, hdr, oif) = match (&c.template, &c.held_ack) {
        (Some(t), Some(h)) if h.arrival > t.arrival => (h.meta, &h.hdr, h.oif),
        (Some(t), _) => (t.meta, &t.hdr, t.oif),
        (None, Some(h)) => (h.meta, &h.hdr, h.oif),
        (None, None) => return,
    };
    if meta.signed {
        return;
    }
    let ws = c.wscale;
    let edge = seq_max(
        c.sent_edge,
        c.kernel_edge.unwrap_or_else(|| meta.right_edge(ws)),
    );
    let window = packet::window_for_edge(edge, target, ws);
    let pkt = packet::build_pure_ack(hdr, &meta, meta.seq_end(), target, window);
    out.push(Out::Inject {
        pkt,
        dst: meta.dst,
        oif,
    });
    stats.synthesized += 1;
    c.sent(
        hist,
        target,
        Some(target.wrapping_add(u32::from(window) << ws)),
        now,
    );
}

// ---------------------------------------------------------------------------
// Netlink.

const NFNL_SUBSYS_QUEUE: u16 = 3;
const NFQNL_MSG_PACKET: u16 = 0;
const NFQNL_MSG_VERDICT: u16 = 1;
const NFQNL_MSG_CONFIG: u16 = 2;
const NFQNL_CFG_CMD_BIND: u8 = 1;
const NFQNL_COPY_PACKET: u8 = 2;
const NFQA_CFG_CMD: u16 = 1;
const NFQA_CFG_PARAMS: u16 = 2;
const NFQA_CFG_QUEUE_MAXLEN: u16 = 3;
const NFQA_CFG_MASK: u16 = 4;
const NFQA_CFG_FLAGS: u16 = 5;
const NFQA_CFG_F_FAIL_OPEN: u32 = 1 << 0;
const NFQA_CFG_F_GSO: u32 = 1 << 2;
const NFQA_PACKET_HDR: u16 = 1;
const NFQA_VERDICT_HDR: u16 = 2;
const NFQA_IFINDEX_OUTDEV: u16 = 6;
const NFQA_PAYLOAD: u16 = 10;
const NF_DROP: u32 = 0;
const NF_ACCEPT: u32 = 1;
const NLA_TYPE_MASK: u16 = 0x3fff;
const NLMSG_HDRLEN: usize = 16;
const NFGEN_HDRLEN: usize = 4;
/// Kernel queue length: packets held plus packets not yet read.
const QUEUE_MAXLEN: u32 = 16384;
/// Receive buffer of the netlink socket.
const RCVBUF: libc::c_int = 8 << 20;
/// One queued packet (copy range at most 65531) plus its metadata.
const RECV_BUF: usize = 128 << 10;

fn align4(n: usize) -> usize {
    (n + 3) & !3
}

fn cvt(rc: libc::c_int) -> io::Result<libc::c_int> {
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(rc)
    }
}

fn cvt_size(rc: isize) -> io::Result<usize> {
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(rc as usize)
    }
}

/// Netlink message header + nfgenmsg for queue `queue` (length patched by
/// the caller).
fn nfq_header(buf: &mut Vec<u8>, msg_type: u16, flags: u16, seq: u32, queue: u16) {
    buf.clear();
    buf.extend_from_slice(&0u32.to_ne_bytes()); // nlmsg_len
    buf.extend_from_slice(&((NFNL_SUBSYS_QUEUE << 8) | msg_type).to_ne_bytes());
    buf.extend_from_slice(&flags.to_ne_bytes());
    buf.extend_from_slice(&seq.to_ne_bytes());
    buf.extend_from_slice(&0u32.to_ne_bytes()); // nlmsg_pid
    buf.push(libc::AF_UNSPEC as u8); // nfgen_family
    buf.push(0); // NFNETLINK_V0
    buf.extend_from_slice(&queue.to_be_bytes()); // res_id
}

fn put_attr(buf: &mut Vec<u8>, ty: u16, data: &[u8]) {
    buf.extend_from_slice(&((4 + data.len()) as u16).to_ne_bytes());
    buf.extend_from_slice(&ty.to_ne_bytes());
    buf.extend_from_slice(data);
    buf.resize(align4(buf.len()), 0);
}

fn patch_len(buf: &mut [u8], len: usize) {
    buf[..4].copy_from_slice(&(len as u32).to_ne_bytes());
}

/// One message read from the netlink socket.
#[derive(Debug, PartialEq, Eq)]
enum NlMsg {
    Packet {
        id: u32,
        payload: std::ops::Range<usize>,
        oif: u32,
    },
    /// `NLMSG_ERROR` (error 0 is an ACK).
    Error {
        seq: u32,
        errno: i32,
    },
    Other,
}

fn u16_at(b: &[u8], at: usize) -> u16 {
    u16::from_ne_bytes([b[at], b[at + 1]])
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_ne_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

fn be32_at(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

/// Splits a datagram read from the socket into messages.
fn parse_nl(buf: &[u8], msgs: &mut Vec<NlMsg>) {
    let mut off = 0;
    while off + NLMSG_HDRLEN <= buf.len() {
        let len = u32_at(buf, off) as usize;
        if len < NLMSG_HDRLEN || off + len > buf.len() {
            break;
        }
        let ty = u16_at(buf, off + 4);
        let seq = u32_at(buf, off + 8);
        let msg = if ty == libc::NLMSG_ERROR as u16 && len >= NLMSG_HDRLEN + 4 {
            NlMsg::Error {
                seq,
                errno: -(u32_at(buf, off + NLMSG_HDRLEN) as i32),
            }
        } else if ty == (NFNL_SUBSYS_QUEUE << 8) | NFQNL_MSG_PACKET {
            let mut id = None;
            let mut payload = 0..0;
            let mut oif = 0;
            let mut a = off + NLMSG_HDRLEN + NFGEN_HDRLEN;
            let end = off + len;
            while a + 4 <= end {
                let alen = usize::from(u16_at(buf, a));
                let aty = u16_at(buf, a + 2) & NLA_TYPE_MASK;
                if alen < 4 || a + alen > end {
                    break;
                }
                let data = a + 4..a + alen;
                match aty {
                    NFQA_PACKET_HDR if data.len() >= 4 => id = Some(be32_at(buf, data.start)),
                    NFQA_IFINDEX_OUTDEV if data.len() >= 4 => oif = be32_at(buf, data.start),
                    NFQA_PAYLOAD => payload = data,
                    _ => {}
                }
                a += align4(alen);
            }
            match id {
                Some(id) => NlMsg::Packet { id, payload, oif },
                None => NlMsg::Other,
            }
        } else {
            NlMsg::Other
        };
        msgs.push(msg);
        off += align4(len);
    }
}

/// The netlink socket bound to one queue.
struct Nl {
    fd: OwnedFd,
    queue: u16,
    hdr: Vec<u8>,
}

impl Nl {
    /// Opens the socket in the calling thread's network namespace, binds the
    /// queue and configures it. Packets that arrive before the
    /// configuration is acknowledged are returned (to be accepted: nothing
    /// is registered yet).
    fn open(queue: u16) -> io::Result<(Nl, Vec<u32>)> {
        // SAFETY: plain socket(2) call; the result is checked.
        let raw = cvt(unsafe {
            libc::socket(
                libc::AF_NETLINK,
                libc::SOCK_RAW | libc::SOCK_CLOEXEC,
                libc::NETLINK_NETFILTER,
            )
        })?;
        // SAFETY: `raw` is a fresh descriptor that nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        // SAFETY: all-zero is a valid `sockaddr_nl` (port id 0: the kernel
        // picks one).
        let mut addr: libc::sockaddr_nl = unsafe { std::mem::zeroed() };
        addr.nl_family = libc::AF_NETLINK as libc::sa_family_t;
        // SAFETY: `addr` is a valid `sockaddr_nl` of the given length.
        cvt(unsafe {
            libc::bind(
                fd.as_raw_fd(),
                (&addr as *const libc::sockaddr_nl).cast(),
                size_of::<libc::sockaddr_nl>() as libc::socklen_t,
            )
        })?;
        let b = fd.as_fd();
        sockopt::set_int(b, libc::SOL_NETLINK, libc::NETLINK_NO_ENOBUFS, 1)?;
        if sockopt::set_int(b, libc::SOL_SOCKET, libc::SO_RCVBUFFORCE, RCVBUF).is_err() {
            sockopt::set_int(b, libc::SOL_SOCKET, libc::SO_RCVBUF, RCVBUF)?;
        }
        let mut nl = Nl {
            fd,
            queue,
            hdr: Vec::with_capacity(64),
        };
        let early = nl.configure()?;
        Ok((nl, early))
    }

    fn configure(&mut self) -> io::Result<Vec<u32>> {
        const SEQ: u32 = 1;
        let mut m = Vec::with_capacity(96);
        nfq_header(
            &mut m,
            NFQNL_MSG_CONFIG,
            (libc::NLM_F_REQUEST | libc::NLM_F_ACK) as u16,
            SEQ,
            self.queue,
        );
        // struct nfqnl_msg_config_cmd { u8 command; u8 pad; be16 pf; }
        put_attr(&mut m, NFQA_CFG_CMD, &[NFQNL_CFG_CMD_BIND, 0, 0, 0]);
        // struct nfqnl_msg_config_params { be32 copy_range; u8 copy_mode; }
        // (packed); the kernel caps the range at 65531.
        let mut params = 0xffffu32.to_be_bytes().to_vec();
        params.push(NFQNL_COPY_PACKET);
        put_attr(&mut m, NFQA_CFG_PARAMS, &params);
        put_attr(&mut m, NFQA_CFG_QUEUE_MAXLEN, &QUEUE_MAXLEN.to_be_bytes());
        // Explicitly clear fail-open and GSO.
        put_attr(
            &mut m,
            NFQA_CFG_MASK,
            &(NFQA_CFG_F_FAIL_OPEN | NFQA_CFG_F_GSO).to_be_bytes(),
        );
        put_attr(&mut m, NFQA_CFG_FLAGS, &0u32.to_be_bytes());
        let len = m.len();
        patch_len(&mut m, len);
        self.send(&[&m])?;
        let mut early = Vec::new();
        let mut buf = vec![0u8; RECV_BUF];
        let mut msgs = Vec::new();
        loop {
            let n = self.recv(&mut buf, false)?.unwrap_or(0);
            msgs.clear();
            parse_nl(&buf[..n], &mut msgs);
            for msg in msgs.drain(..) {
                match msg {
                    NlMsg::Error { seq: SEQ, errno: 0 } => return Ok(early),
                    NlMsg::Error { seq: SEQ, errno } => {
                        let e = io::Error::from_raw_os_error(errno);
                        return Err(io::Error::new(
                            e.kind(),
                            format!("binding NFQUEUE {}: {e}", self.queue),
                        ));
                    }
                    NlMsg::Packet { id, .. } => early.push(id),
                    _ => {}
                }
            }
        }
    }

    fn send(&self, parts: &[&[u8]]) -> io::Result<()> {
        let mut iov: [libc::iovec; 3] = [libc::iovec {
            iov_base: std::ptr::null_mut(),
            iov_len: 0,
        }; 3];
        let n = parts.len().min(3);
        for (v, p) in iov.iter_mut().zip(parts) {
            v.iov_base = p.as_ptr() as *mut libc::c_void;
            v.iov_len = p.len();
        }
        // SAFETY: all-zero is a valid `msghdr` (no name: the kernel is the
        // default destination of a netlink socket; no control data).
        let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
        msg.msg_iov = iov.as_mut_ptr();
        msg.msg_iovlen = n as _;
        loop {
            // SAFETY: `msg` points to `n` iovecs describing live slices that
            // the kernel only reads during the call.
            let rc = unsafe { libc::sendmsg(self.fd.as_raw_fd(), &msg, 0) };
            match cvt_size(rc) {
                Ok(_) => return Ok(()),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
        }
    }

    /// Reads one datagram; `Ok(None)` when nothing is waiting (non-blocking
    /// mode) or the datagram was larger than `buf` (dropped).
    fn recv(&self, buf: &mut [u8], nonblocking: bool) -> io::Result<Option<usize>> {
        let flags = libc::MSG_TRUNC | if nonblocking { libc::MSG_DONTWAIT } else { 0 };
        loop {
            // SAFETY: `buf` is writable for `buf.len()` bytes.
            let rc = unsafe {
                libc::recv(
                    self.fd.as_raw_fd(),
                    buf.as_mut_ptr().cast(),
                    buf.len(),
                    flags,
                )
            };
            match cvt_size(rc) {
                Ok(n) if n > buf.len() => return Ok(Some(0)),
                Ok(n) => return Ok(Some(n)),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(None),
                Err(e) if e.raw_os_error() == Some(libc::ENOBUFS) => continue,
                Err(e) => return Err(e),
            }
        }
    }

    /// Issues a verdict, retrying briefly on transient memory shortage. A
    /// verdict that cannot be sent leaves the packet queued (it is dropped
    /// when the queue goes away): the gate fails closed.
    fn verdict(&mut self, id: u32, verdict: u32, payload: Option<&[u8]>) -> io::Result<()> {
        let mut tries = 0;
        loop {
            match self.verdict_once(id, verdict, payload) {
                Err(e)
                    if tries < 5
                        && matches!(
                            e.raw_os_error(),
                            Some(libc::ENOBUFS | libc::ENOMEM | libc::EAGAIN)
                        ) =>
                {
                    tries += 1;
                    std::thread::sleep(std::time::Duration::from_micros(100 << tries));
                }
                r => return r,
            }
        }
    }

    fn verdict_once(&mut self, id: u32, verdict: u32, payload: Option<&[u8]>) -> io::Result<()> {
        let mut hdr = std::mem::take(&mut self.hdr);
        nfq_header(
            &mut hdr,
            NFQNL_MSG_VERDICT,
            libc::NLM_F_REQUEST as u16,
            0,
            self.queue,
        );
        let mut vh = [0u8; 8];
        vh[..4].copy_from_slice(&verdict.to_be_bytes());
        vh[4..].copy_from_slice(&id.to_be_bytes());
        put_attr(&mut hdr, NFQA_VERDICT_HDR, &vh);
        let r = match payload {
            None => {
                let len = hdr.len();
                patch_len(&mut hdr, len);
                self.send(&[&hdr])
            }
            Some(p) => {
                hdr.extend_from_slice(&((4 + p.len()) as u16).to_ne_bytes());
                hdr.extend_from_slice(&NFQA_PAYLOAD.to_ne_bytes());
                let pad = [0u8; 3];
                let pad = &pad[..align4(p.len()) - p.len()];
                let len = hdr.len() + p.len() + pad.len();
                patch_len(&mut hdr, len);
                self.send(&[&hdr, p, pad])
            }
        };
        self.hdr = hdr;
        r
    }
}

// ---------------------------------------------------------------------------
// Raw sockets for synthesised ACKs.

struct Injector {
    v4: Option<OwnedFd>,
    v6: Option<OwnedFd>,
}

fn raw_socket(domain: libc::c_int) -> Option<OwnedFd> {
    // SAFETY: plain socket(2) call; the result is checked.
    let raw = unsafe {
        libc::socket(
            domain,
            libc::SOCK_RAW | libc::SOCK_CLOEXEC,
            libc::IPPROTO_RAW,
        )
    };
    // SAFETY: a fresh descriptor that nothing else owns.
    (raw >= 0).then(|| unsafe { OwnedFd::from_raw_fd(raw) })
}

#[repr(C)]
struct Cmsg4 {
    hdr: libc::cmsghdr,
    info: libc::in_pktinfo,
}

#[repr(C)]
struct Cmsg6 {
    hdr: libc::cmsghdr,
    info: libc::in6_pktinfo,
}

impl Injector {
    fn open() -> Injector {
        Injector {
            v4: raw_socket(libc::AF_INET),
            v6: raw_socket(libc::AF_INET6),
        }
    }

    fn usable(&self) -> bool {
        self.v4.is_some() || self.v6.is_some()
    }

    /// Sends a complete IP packet (header included) to `dst`, leaving by
    /// interface `oif` if it is not 0.
    fn send(&self, pkt: &[u8], dst: SocketAddr, oif: u32) -> io::Result<()> {
        let r = self.send_with(pkt, dst, oif);
        match r {
            Err(e) if oif != 0 && e.raw_os_error() == Some(libc::EINVAL) => {
                self.send_with(pkt, dst, 0)
            }
            r => r,
        }
    }

    fn send_with(&self, pkt: &[u8], dst: SocketAddr, oif: u32) -> io::Result<()> {
        let mut iov = libc::iovec {
            iov_base: pkt.as_ptr() as *mut libc::c_void,
            iov_len: pkt.len(),
        };
        // SAFETY: all-zero is valid for these plain C structs.
        let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        let fd;
        // Both kept alive until sendmsg returns.
        let mut sin: libc::sockaddr_in;
        let mut sin6: libc::sockaddr_in6;
        let mut c4: Cmsg4;
        let mut c6: Cmsg6;
        match dst.ip() {
            IpAddr::V4(ip) => {
                fd = self.v4.as_ref().ok_or(io::ErrorKind::Unsupported)?;
                // SAFETY: all-zero is a valid `sockaddr_in`.
                sin = unsafe { std::mem::zeroed() };
                sin.sin_family = libc::AF_INET as libc::sa_family_t;
                sin.sin_addr.s_addr = u32::from_ne_bytes(ip.octets());
                msg.msg_name = (&mut sin as *mut libc::sockaddr_in).cast();
                msg.msg_namelen = size_of::<libc::sockaddr_in>() as libc::socklen_t;
                if oif != 0 {
                    // SAFETY: all-zero is valid for `cmsghdr` + `in_pktinfo`.
                    c4 = unsafe { std::mem::zeroed() };
                    c4.hdr.cmsg_len =
                        std::mem::offset_of!(Cmsg4, info) + size_of::<libc::in_pktinfo>();
                    c4.hdr.cmsg_level = libc::IPPROTO_IP;
                    c4.hdr.cmsg_type = libc::IP_PKTINFO;
                    c4.info.ipi_ifindex = oif as libc::c_int;
                    msg.msg_control = (&mut c4 as *mut Cmsg4).cast();
                    msg.msg_controllen = size_of::<Cmsg4>() as _;
                }
            }
            IpAddr::V6(ip) => {
                fd = self.v6.as_ref().ok_or(io::ErrorKind::Unsupported)?;
                // SAFETY: all-zero is a valid `sockaddr_in6` (port 0: the
                // protocol is the socket's, IPPROTO_RAW).
                sin6 = unsafe { std::mem::zeroed() };
                sin6.sin6_family = libc::AF_INET6 as libc::sa_family_t;
                sin6.sin6_addr.s6_addr = ip.octets();
                msg.msg_name = (&mut sin6 as *mut libc::sockaddr_in6).cast();
                msg.msg_namelen = size_of::<libc::sockaddr_in6>() as libc::socklen_t;
                if oif != 0 {
                    // SAFETY: all-zero is valid for `cmsghdr` + `in6_pktinfo`.
                    c6 = unsafe { std::mem::zeroed() };
                    c6.hdr.cmsg_len =
                        std::mem::offset_of!(Cmsg6, info) + size_of::<libc::in6_pktinfo>();
                    c6.hdr.cmsg_level = libc::IPPROTO_IPV6;
                    c6.hdr.cmsg_type = libc::IPV6_PKTINFO;
                    c6.info.ipi6_ifindex = oif;
                    msg.msg_control = (&mut c6 as *mut Cmsg6).cast();
                    msg.msg_controllen = size_of::<Cmsg6>() as _;
                }
            }
        }
        loop {
            // SAFETY: `msg` points to a live iovec over `pkt`, a socket
            // address and optional control data that outlive the call; the
            // kernel only reads them.
            let rc = unsafe { libc::sendmsg(fd.as_raw_fd(), &msg, 0) };
            match cvt_size(rc) {
                Ok(_) => return Ok(()),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
        }
    }
}

// ---------------------------------------------------------------------------
// Thread and public handle.

struct Shared {
    core: Mutex<Core>,
    wake: OwnedFd,
    stop: AtomicBool,
    running: AtomicBool,
    error: Mutex<Option<String>>,
}

impl Shared {
    fn core(&self) -> MutexGuard<'_, Core> {
        // A panic while holding the lock leaves consistent-enough state for
        // counters; keep serving rather than cascading the panic.
        self.core.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Records a non-fatal error (the latest one is kept).
    fn note(&self, r: io::Result<()>) {
        if let Err(e) = r {
            *self.error.lock().unwrap_or_else(|p| p.into_inner()) = Some(format!("verdict: {e}"));
        }
    }

    fn wake(&self) {
        let one = 1u64.to_ne_bytes();
        // SAFETY: writes 8 bytes from a live buffer to our eventfd. A full
        // counter (EAGAIN) already means "wake up", so errors are ignored.
        let _ = unsafe { libc::write(self.wake.as_raw_fd(), one.as_ptr().cast(), 8) };
    }
}

/// The ACK gate. See the module documentation.
pub struct AckGate {
    shared: Arc<Shared>,
    thread: Mutex<Option<JoinHandle<()>>>,
    queue_num: u16,
}

impl std::fmt::Debug for AckGate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AckGate")
            .field("queue_num", &self.queue_num)
            .field("mode", &self.mode())
            .finish()
    }
}

impl AckGate {
    /// Binds NFQUEUE `queue_num` (in the calling thread's network namespace)
    /// and starts the gate thread ("ack-gate"). Mode starts `Protected`.
    ///
    /// Fails if the queue is bound by another socket (another speaker).
    pub fn start(queue_num: u16) -> io::Result<Arc<AckGate>> {
        let (mut nl, early) = Nl::open(queue_num)?;
        for id in early {
            nl.verdict(id, NF_ACCEPT, None)?;
        }
        // SAFETY: plain eventfd(2) call; the result is checked.
        let efd = cvt(unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) })?;
        // SAFETY: a fresh descriptor that nothing else owns.
        let wake = unsafe { OwnedFd::from_raw_fd(efd) };
        let injector = Injector::open();
        let shared = Arc::new(Shared {
            core: Mutex::new(Core::new(injector.usable())),
            wake,
            stop: AtomicBool::new(false),
            running: AtomicBool::new(true),
            error: Mutex::new(None),
        });
        let s2 = Arc::clone(&shared);
        let thread = std::thread::Builder::new()
            .name("ack-gate".into())
            .spawn(move || {
                if let Err(e) = run(&s2, nl, injector) {
                    *s2.error.lock().unwrap_or_else(|p| p.into_inner()) = Some(e.to_string());
                }
                s2.running.store(false, Ordering::SeqCst);
            })?;
        Ok(Arc::new(AckGate {
            shared,
            thread: Mutex::new(Some(thread)),
            queue_num,
        }))
    }

    /// Gate this connection from now on. `confirmed` = highest ACK number
    /// that may leave now; `rcv_wscale` = our receive window scale (to widen
    /// the window field when clamping). Registering a registered connection
    /// updates its window scale and raises (never lowers) `confirmed`.
    pub fn register(&self, key: ConnKey, confirmed: u32, rcv_wscale: u8) {
        if self
            .shared
            .core()
            .register(key.normalised(), confirmed, rcv_wscale)
        {
            self.shared.wake();
        }
    }

    /// Stop gating: its packets pass untouched (used before a deliberate
    /// close, TCPR's `done_writing`). Packets still held are released, and
    /// the peer is told the kernel's latest ACK.
    pub fn unregister(&self, key: &ConnKey) {
        if self.shared.core().unregister(&key.normalised()) {
            self.shared.wake();
        }
    }

    /// Bytes before sequence `ack` are replicated: held packets whose ACK is
    /// now covered are released (in order). Sequence arithmetic is mod 2^32;
    /// a value not after the current one is ignored.
    pub fn confirm(&self, key: &ConnKey, ack: u32) {
        if self.shared.core().confirm(&key.normalised(), ack) {
            self.shared.wake();
        }
    }

    pub fn set_mode(&self, mode: GateMode) {
        if self.shared.core().set_mode(mode) {
            self.shared.wake();
        }
    }

    pub fn mode(&self) -> GateMode {
        self.shared.core().mode
    }

    pub fn stats(&self) -> GateStats {
        self.shared.core().snapshot()
    }

    /// The queue number this gate serves.
    pub fn queue_num(&self) -> u16 {
        self.queue_num
    }

    /// Whether the gate thread is still serving the queue. If it stopped on
    /// an error ([`AckGate::error`]), its queue socket is closed and the
    /// kernel drops every matching packet (fail closed, like a crash): the
    /// speaker should treat that as fatal.
    pub fn is_running(&self) -> bool {
        self.shared.running.load(Ordering::SeqCst)
    }

    /// The error the gate thread stopped on, or else the latest verdict
    /// that could not be sent, if any.
    pub fn error(&self) -> Option<String> {
        self.shared
            .error
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
}

impl Drop for AckGate {
    /// Stops the thread and closes the queue socket: the kernel then drops
    /// every packet still queued and every new one that matches the rules
    /// (like a crash). For an orderly shutdown, switch to `Bypass` and
    /// remove the rules first.
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        self.shared.wake();
        let handle = self.thread.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(h) = handle {
            let _ = h.join();
        }
    }
}

/// Carries out `out` in order. A verdict that cannot be sent is recorded
/// and skipped (its packet stays queued: fail closed); a lost synthesised
/// ACK is recovered like any lost ACK.
fn execute(shared: &Shared, nl: &mut Nl, inj: &Injector, out: &mut Vec<Out>) {
    for o in out.drain(..) {
        match o {
            Out::Accept(id) => shared.note(nl.verdict(id, NF_ACCEPT, None)),
            Out::Drop(id) => shared.note(nl.verdict(id, NF_DROP, None)),
            Out::Inject { pkt, dst, oif } => {
                let _ = inj.send(&pkt, dst, oif);
            }
        }
    }
}

fn run(shared: &Shared, mut nl: Nl, inj: Injector) -> io::Result<()> {
    let mut buf = vec![0u8; RECV_BUF];
    let mut msgs = Vec::new();
    let mut out = Vec::new();
    let mut pfd = [
        libc::pollfd {
            fd: nl.fd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        },
        libc::pollfd {
            fd: shared.wake.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        },
    ];
    loop {
        // SAFETY: `pfd` is a live array of two pollfds.
        let rc = unsafe { libc::poll(pfd.as_mut_ptr(), 2, -1) };
        if rc < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        if shared.stop.load(Ordering::SeqCst) {
            return Ok(());
        }
        if pfd[1].revents != 0 {
            let mut v = [0u8; 8];
            // SAFETY: reads at most 8 bytes into a live buffer; the eventfd
            // is non-blocking, so EAGAIN just means it was already reset.
            let _ = unsafe { libc::read(shared.wake.as_raw_fd(), v.as_mut_ptr().cast(), 8) };
        }
        shared.core().drain(Instant::now(), &mut out);
        execute(shared, &mut nl, &inj, &mut out);
        // Up to 256 datagrams per round, so a flood cannot starve confirms.
        for _ in 0..256 {
            let Some(n) = nl.recv(&mut buf, true)? else {
                break;
            };
            msgs.clear();
            parse_nl(&buf[..n], &mut msgs);
            for msg in msgs.drain(..) {
                let NlMsg::Packet { id, payload, oif } = msg else {
                    continue;
                };
                let pkt = &mut buf[payload];
                let v = {
                    let mut core = shared.core();
                    core.drain(Instant::now(), &mut out);
                    core.packet(id, pkt, oif, Instant::now(), &mut out)
                };
                execute(shared, &mut nl, &inj, &mut out);
                let r = match v {
                    Verdict::Accept => nl.verdict(id, NF_ACCEPT, None),
                    Verdict::AcceptModified => nl.verdict(id, NF_ACCEPT, Some(pkt)),
                    Verdict::Drop => nl.verdict(id, NF_DROP, None),
                    Verdict::Hold => Ok(()),
                };
                shared.note(r);
            }
        }
    }
}

/// Reads the next expected receive sequence number (`rcv_nxt`) of a TCP
/// socket by briefly entering `TCP_REPAIR` (needs `CAP_NET_ADMIN`) and
/// leaving it without a window probe. Meant for a quiescent socket right
/// after the handshake, to register it with `confirmed = rcv_nxt`; the
/// speaker's repair-based connection capture gives the same value.
pub fn read_rcv_nxt(fd: BorrowedFd<'_>) -> io::Result<u32> {
    const TCP_NO_QUEUE: libc::c_int = 0;
    const TCP_RECV_QUEUE: libc::c_int = 1;
    const TCP_REPAIR_OFF_NO_WP: libc::c_int = -1;
    // Leaving repair mode resets `sk_reuse`; keep SO_REUSEADDR as it was.
    let reuse = sockopt::get_int(fd, libc::SOL_SOCKET, libc::SO_REUSEADDR)?;
    sockopt::set_int(fd, libc::IPPROTO_TCP, libc::TCP_REPAIR, 1)?;
    let r = sockopt::set_int(
        fd,
        libc::IPPROTO_TCP,
        libc::TCP_REPAIR_QUEUE,
        TCP_RECV_QUEUE,
    )
    .and_then(|_| sockopt::get_int(fd, libc::IPPROTO_TCP, libc::TCP_QUEUE_SEQ));
    let _ = sockopt::set_int(fd, libc::IPPROTO_TCP, libc::TCP_REPAIR_QUEUE, TCP_NO_QUEUE);
    if sockopt::set_int(
        fd,
        libc::IPPROTO_TCP,
        libc::TCP_REPAIR,
        TCP_REPAIR_OFF_NO_WP,
    )
    .is_err()
    {
        sockopt::set_int(fd, libc::IPPROTO_TCP, libc::TCP_REPAIR, 0)?;
    }
    if reuse != 0 {
        sockopt::set_int(fd, libc::SOL_SOCKET, libc::SO_REUSEADDR, 1)?;
    }
    r.map(|v| v as u32)
}

#[cfg(test)]
mod tests;
