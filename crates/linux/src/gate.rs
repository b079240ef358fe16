//! The ACK gate's decisions, free of I/O: which outgoing TCP segment of a
//! gated BGP connection passes, is clamped, is held, or is dropped, and
//! when the gate synthesises an ACK. Time is an input (`now`); the packets
//! are byte slices as NFQUEUE hands them over; the results are a
//! `Verdict` for the packet at hand plus a list of `Out` actions (verdicts
//! on held packets, ACKs to inject) that the gate thread
//! ([`crate::nfq`]) carries out in order.
//!
//! Standards: TCPR (§II-C: the application decides what may be
//! acknowledged; clamping the ACK of data segments), TENSOR §3.1
//! (kernel-modification-free replication: hold the kernel's ACKs until the
//! state store confirms), RFC 9293 sequence-number arithmetic (mod 2^32),
//! RFC 7323 window scaling and §5 PAWS, RFC 1624 incremental checksums
//! (in [`crate::packet`]).
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
//! - when `confirm` advances `C` past what the peer has been told
//!   and no held packet carries it, the gate *synthesises* a pure ACK for
//!   `min(C, highest ACK the kernel sent)` from the headers of the
//!   connection's newest packet (sequence number, timestamp option, window
//!   keeping the kernel's right edge), to be injected through a raw socket.
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
//! signature, because they exceed the 65531-byte copy range, or because
//! they are GSO packets (several segments the kernel has not split yet),
//! are held in order (with everything after them on that connection)
//! instead of being clamped, and no ACK is synthesised for signed
//! connections. A clamped packet whose checksum the kernel had left partial
//! ([`SkbInfo::csum_partial`]) gets its checksum computed in full. A GSO
//! packet beyond 64 KiB (BIG TCP) has 0 in its IP length field; its length
//! is the one the queue reports ([`SkbInfo::wire_len`]), so it is gated
//! like any other.
//!
//! RSTs, packets whose `A` is not after `C`, packets of unregistered
//! connections and anything that is not TCP pass unmodified. In
//! [`GateMode::Bypass`] everything passes and held packets are released; in
//! [`GateMode::DropAll`] everything is dropped, held packets included.
//!
//! # Known issues
//!
//! - Connections of a TCP-MD5 or TCP-AO signed session cannot be clamped or
//!   given a synthesised ACK (the signature covers the headers): their data
//!   waits with its ACK until the store confirms, which adds the store's
//!   latency to every segment they send.
//! - The added-delay histogram has a relative error below 12.5 % and
//!   counts, per connection, at most 1024 not-yet-covered samples (newer
//!   ones are merged into the last).
//! - A connection that is never unregistered (its socket closed without
//!   [`AckGate::unregister`](crate::nfq::AckGate::unregister)) keeps its
//!   state until the gate is dropped.

use crate::packet::{self, seq_after, TcpMeta, ACK, RST, SYN};
use std::collections::{HashMap, VecDeque};
use std::net::{SocketAddr, SocketAddrV4, SocketAddrV6};
use std::time::Instant;

/// A TCP connection as its socket sees it (`local_addr()`, `peer_addr()`).
/// IPv4-mapped IPv6 addresses are normalised to IPv4 (and flow info and
/// scope id cleared) so keys built from sockets match keys built from
/// packets; [`AckGate`](crate::nfq::AckGate) normalises every key it is
/// given.
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

/// What the kernel says of a queued packet's buffer (`NFQA_SKB_INFO`,
/// reported because the queue is bound with `NFQA_CFG_F_GSO`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SkbInfo {
    /// The TCP checksum field holds only the pseudo-header's sum
    /// (`CHECKSUM_PARTIAL`, completed by the device or the stack): a
    /// rewritten packet needs its checksum computed in full.
    pub csum_partial: bool,
    /// A GSO packet, larger than the path's MSS: the kernel would lose its
    /// segmentation if it were handed back rewritten.
    pub gso: bool,
    /// The packet's length when the queue's copy was cut short
    /// (`NFQA_CAP_LEN`): how long a BIG TCP packet, whose IP length field
    /// is 0, really is.
    pub wire_len: Option<u32>,
}

/// Counters of an [`AckGate`](crate::nfq::AckGate).
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
    /// The delay histogram's non-empty buckets, (index, count): two
    /// snapshots' difference is the delay over the time between them
    /// ([`delay_quantile`]).
    pub delay_buckets: Vec<(u32, u64)>,
    /// Pure ACKs the gate built and injected (see the module docs).
    pub synthesized: u64,
    /// Window probes injected on request ([`AckGate::probe`](crate::nfq::AckGate::probe)).
    pub probes: u64,
}

/// The `q` quantile (µs, the bucket's upper bound) of delay buckets as
/// [`GateStats::delay_buckets`] holds them, or of a difference of two.
pub fn delay_quantile(buckets: &[(u32, u64)], q: f64) -> u64 {
    let n: u64 = buckets.iter().map(|(_, c)| c).sum();
    if n == 0 {
        return 0;
    }
    let rank = ((q * n as f64).ceil() as u64).clamp(1, n);
    let mut sorted = buckets.to_vec();
    sorted.sort_unstable();
    let mut seen = 0;
    for (i, c) in sorted {
        seen += c;
        if seen >= rank {
            return Histogram::upper(i as usize);
        }
    }
    0
}

/// `later` less `earlier` (two [`GateStats::delay_buckets`] of one gate):
/// the delays recorded between the two snapshots.
pub fn delay_buckets_since(later: &[(u32, u64)], earlier: &[(u32, u64)]) -> Vec<(u32, u64)> {
    let before: std::collections::HashMap<u32, u64> = earlier.iter().copied().collect();
    later
        .iter()
        .filter_map(|&(i, c)| {
            let d = c.saturating_sub(before.get(&i).copied().unwrap_or(0));
            (d > 0).then_some((i, d))
        })
        .collect()
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

    /// The non-empty buckets as (index, count) ([`GateStats::delay_buckets`]).
    fn buckets(&self) -> Vec<(u32, u64)> {
        self.counts
            .iter()
            .enumerate()
            .filter(|(_, c)| **c > 0)
            .map(|(i, c)| (i as u32, *c))
            .collect()
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
pub(crate) enum Verdict {
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
pub(crate) enum Out {
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

/// One connection as the gate sees it (for diagnostics).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnView {
    /// Whether it is gated (registered and not unregistered).
    pub gated: bool,
    /// `C`: the highest ACK number that may leave.
    pub confirmed: u32,
    /// Highest ACK number that left, and the kernel's highest.
    pub sent_ack: Option<u32>,
    pub kernel_ack: Option<u32>,
    /// Packets on hold.
    pub held: usize,
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

/// The state of every gated connection and the gate's counters. The gate
/// thread owns one behind a mutex: the speaker's calls (`register`,
/// `confirm`, …) only mark work, which [`Core::drain`] turns into [`Out`]
/// actions on the thread.
pub(crate) struct Core {
    mode: GateMode,
    mode_changed: bool,
    /// After leaving [`GateMode::DropAll`]: the kernel's last packet id
    /// then. Packets up to it were queued while everything was to be
    /// dropped (a dead process's RST, say) and are dropped whenever the
    /// thread gets to them.
    drop_through: Option<u32>,
    conns: HashMap<ConnKey, Conn>,
    dirty: Vec<ConnKey>,
    /// Window probes asked for: (connection, sequence number).
    probes: Vec<(ConnKey, u32)>,
    arrival: u64,
    /// Whether ACKs can be synthesised (raw sockets are open).
    can_inject: bool,
    stats: GateStats,
    hist: Histogram,
}

impl Core {
    /// `can_inject`: whether ACKs can be synthesised (the raw sockets are
    /// open).
    pub(crate) fn new(can_inject: bool) -> Self {
        Core {
            mode: GateMode::Protected,
            mode_changed: false,
            drop_through: None,
            conns: HashMap::new(),
            dirty: Vec::new(),
            probes: Vec::new(),
            arrival: 0,
            can_inject,
            stats: GateStats::default(),
            hist: Histogram::new(),
        }
    }

    pub(crate) fn mode(&self) -> GateMode {
        self.mode
    }

    /// The counters, with the delay quantiles.
    pub(crate) fn snapshot(&self) -> GateStats {
        let mut s = self.stats.clone();
        s.delay_p50_us = self.hist.quantile(0.50);
        s.delay_p99_us = self.hist.quantile(0.99);
        s.delay_max_us = self.hist.max;
        s.delay_samples = self.hist.n;
        s.delay_buckets = self.hist.buckets();
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

    /// What the gate knows of `key` (for diagnostics).
    pub(crate) fn view(&self, key: &ConnKey) -> Option<ConnView> {
        let c = self.conns.get(key)?;
        Some(ConnView {
            gated: c.gated,
            confirmed: c.confirmed,
            sent_ack: c.sent_ack,
            kernel_ack: c.kernel_ack,
            held: usize::from(c.held_ack.is_some()) + c.backlog.len(),
        })
    }

    /// Gates `key` with `C = confirmed` (raised, never lowered, if it is
    /// registered already). Returns whether the gate thread must be woken
    /// (as for the other calls that change what may leave).
    pub(crate) fn register(&mut self, key: ConnKey, confirmed: u32, wscale: u8) -> bool {
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

    /// Stops gating `key`; its held packets are released by the next
    /// [`Core::drain`] or packet of the connection.
    pub(crate) fn unregister(&mut self, key: &ConnKey) -> bool {
        match self.conns.get_mut(key) {
            Some(c) => {
                c.gated = false;
                self.mark_dirty(*key)
            }
            None => false,
        }
    }

    /// Asks for a window probe on `key`: a pure ACK with sequence number
    /// `seq`, which the caller chooses before what the peer has received,
    /// so that the peer answers it with an ACK (RFC 9293 §3.10.7.4: an
    /// unacceptable segment is answered), as the kernel's own probe after
    /// a TCP_REPAIR restore is. It acknowledges only what the peer has been
    /// told already. Returns whether the thread must be woken; `false`
    /// when the connection is not gated or nothing can be injected.
    pub(crate) fn probe(&mut self, key: &ConnKey, seq: u32) -> bool {
        if !self.can_inject || !self.conns.get(key).is_some_and(|c| c.gated) {
            return false;
        }
        self.probes.push((*key, seq));
        true
    }

    /// Raises `C` of `key` to `ack` (a value not after it is ignored).
    pub(crate) fn confirm(&mut self, key: &ConnKey, ack: u32) -> bool {
        let Some(c) = self.conns.get_mut(key) else {
            return false;
        };
        if !seq_after(ack, c.confirmed) {
            return false;
        }
        c.confirmed = ack;
        c.gated && c.wants_confirm() && self.mode == GateMode::Protected && self.mark_dirty(*key)
    }

    #[cfg(test)]
    pub(crate) fn set_mode(&mut self, mode: GateMode) -> bool {
        self.set_mode_after(mode, None)
    }

    /// [`Core::set_mode`], where `queued_through` is the id of the last
    /// packet the kernel had queued when the mode changed (`None`: not
    /// known). Leaving [`GateMode::DropAll`], the packets up to it keep
    /// the old mode's verdict: dropped, however late the thread reads
    /// them.
    pub(crate) fn set_mode_after(&mut self, mode: GateMode, queued_through: Option<u32>) -> bool {
        if self.mode == mode {
            return false;
        }
        if self.mode == GateMode::DropAll {
            self.drop_through = queued_through;
        } else if mode == GateMode::DropAll {
            self.drop_through = None;
        }
        self.mode = mode;
        self.mode_changed = true;
        true
    }

    /// Whether the mode (or the `queued_through` of the last change)
    /// drops packet `id`.
    fn drops(&mut self, id: u32) -> bool {
        if self.mode == GateMode::DropAll {
            return true;
        }
        match self.drop_through {
            Some(n) if !seq_after(id, n) => true,
            Some(_) => {
                self.drop_through = None;
                false
            }
            None => false,
        }
    }

    /// Decides about one queued packet `id`, which leaves by interface
    /// `oif`. `pkt` may be rewritten in place; actions that must come first
    /// are pushed to `out`.
    pub(crate) fn packet(
        &mut self,
        id: u32,
        pkt: &mut [u8],
        oif: u32,
        skb: SkbInfo,
        now: Instant,
        out: &mut Vec<Out>,
    ) -> Verdict {
        self.stats.packets += 1;
        self.arrival += 1;
        let arrival = self.arrival;
        if self.drops(id) {
            self.stats.dropped += 1;
            return Verdict::Drop;
        }
        let Some(m) = packet::parse_len(pkt, skb.wire_len.map(|n| n as usize)) else {
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
        let modifiable = !m.truncated && !m.signed && !skb.gso;
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
        if skb.csum_partial {
            // The kernel hands a rewritten packet on as checksummed
            // (`CHECKSUM_NONE`): the field must hold the whole sum.
            let _ = packet::fill_tcp_checksum(pkt);
        }
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
    pub(crate) fn drain(&mut self, now: Instant, out: &mut Vec<Out>) {
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
        for (key, seq) in std::mem::take(&mut self.probes) {
            if let Some(c) = self.conns.get(&key).filter(|c| c.gated) {
                if let Some(pkt) = probe_packet(c, seq) {
                    out.push(pkt);
                    self.stats.probes += 1;
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

/// A window probe for `c` with sequence number `seq`, built like a
/// synthesised ACK from the connection's newest packet that left (its
/// timestamp is one the peer has seen or newer, so PAWS keeps it), and
/// acknowledging what the peer has been told already. `None` before any
/// packet of the connection left, or on a signed connection.
fn probe_packet(c: &Conn, seq: u32) -> Option<Out> {
    let t = c.template.as_ref()?;
    if t.meta.signed {
        return None;
    }
    let ack = c.sent_ack?;
    let ws = c.wscale;
    let edge = seq_max(
        c.sent_edge,
        c.kernel_edge.unwrap_or_else(|| t.meta.right_edge(ws)),
    );
    let window = packet::window_for_edge(edge, ack, ws);
    Some(Out::Inject {
        pkt: packet::build_pure_ack(&t.hdr, &t.meta, seq, ack, window),
        dst: t.meta.dst,
        oif: t.oif,
    })
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

#[cfg(test)]
mod tests;
