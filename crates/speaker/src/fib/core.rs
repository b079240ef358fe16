//! The kernel FIB's decisions, pure: Loc-RIB forwarding entries, kernel
//! dumps, notifications and the kernel's answers in; route messages out.
//!
//! Each prefix has what the RIB wants (a set of BGP next hops) and what
//! the kernel has from us (a list of (gateway, interface) pairs); both are
//! interned, so an entry is three words and comparing them is comparing
//! ids. A BGP next hop is resolved through the kernel's own routes (the
//! main table and ours, never our own routes, never a default route): the
//! longest matching unicast route, lowest metric, its usable next hops; a
//! connected route gives the BGP next hop itself on that interface. What a
//! prefix should have in the kernel is the union of its next hops'
//! resolutions, at most `ecmp` of them, or nothing when none resolves.
//!
//! Start: the core holds (a standby, or a takeover rebuilding its
//! tables: nothing is written) until [`Core::activate`]; then the shell
//! dumps the kernel's routes ([`Core::dump_begin`], [`Core::dump_route`],
//! [`Core::dump_end`]), ours are adopted as they are, and only the
//! difference is written. With a hold given to `activate` (a fresh start,
//! whose sessions need time to bring the table back), the routes adopted
//! are kept exactly as they are until it ends, as graceful restart keeps
//! forwarding state: no replace, no delete while the sessions come up one
//! by one; then every difference is written (those not wanted removed). The same dump reconciles the
//! table whenever the core lost track (an answer lost to ENOBUFS, a link
//! or address change).
//!
//! Writes: [`Core::next_batch`] encodes up to `max` messages (add with
//! `NLM_F_EXCL`, so another protocol's route is never overwritten;
//! replace for ours; delete by our protocol), the last one asking for an
//! acknowledgement; the kernel handles a batch within the `sendmsg`, so
//! the errors (by sequence number) and that acknowledgement are all queued
//! when it returns ([`Core::batch_done`]).
//!
//! Reconfiguration (a SIGHUP reload of `[kernel]`, [`Core::reconfigure`]):
//! a new metric, table or protocol is a new key for every route. The core
//! reads the table again; each route is written under the new key, and
//! ours under an old key (another metric of our table and protocol, or a
//! table and protocol we used before: `retired`) are deleted only once
//! every queued write has gone out, so a prefix always has a route. The
//! protocol is not part of the kernel's key (table, destination, TOS,
//! metric): a new protocol alone in the same table at the same metric
//! would collide with our old route (EEXIST), so that route is taken as
//! the prefix's own and replaced in place, which sets the new protocol
//! (`proto_of`). An old key's routes are not a resolution route
//! meanwhile; during a start-up hold that still keeps routes found at the
//! start, they are kept until it ends, as those are. A new `ecmp`
//! re-resolves every next-hop set (the RIB hands over its entries again
//! with the new set sizes) and rewrites only what differs.
//!
//! # Known issues
//! - Resolution is one level deep (the kernel's routes have directly
//!   connected gateways); next hops are re-resolved all together when a
//!   kernel route changes, which rescans every prefix (tens of ms at 1M).
//! - Our routes deleted by hand are put back only at the next dump
//!   (a link or address change, a lost answer); notifications of our own
//!   protocol are not followed.
//! - Interned next-hop sets are never freed (there are few distinct ones).

use std::collections::HashMap;
use std::net::IpAddr;
use std::time::{Duration, Instant};

use holdfast_linux::rtnl::codec::{self, KernelRoute, RouteKey, RouteOp, NLM_F_ACK, RTN_UNICAST};
use holdfast_rib::{FibRoute, NextHops};
use holdfast_wire::Prefix;
use smallvec::SmallVec;

/// The main routing table.
const MAIN_TABLE: u32 = 254;
const NONE: u32 = u32::MAX;
const QUEUED: u8 = 1;
const SEEN: u8 = 2;
const FAILED: u8 = 4;
/// Found in the table at the start and kept as it is for the hold.
const ADOPTED: u8 = 8;
/// Failed routes are tried again this often.
const RETRY: Duration = Duration::from_secs(10);

/// Our route under a key we no longer use: deleted once the queue is empty.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Old {
    prefix: Prefix,
    table: u32,
    protocol: u8,
    metric: u32,
}

/// What [`Core::reconfigure`] did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Reconfigured {
    /// Table, protocol or metric changed: the table is read again, every
    /// route written under the new key, the old ones deleted after.
    pub moved: bool,
    /// `ecmp` changed: every next-hop set resolved again.
    pub rewrite: bool,
    /// The start-up hold was running and its adopted routes are now
    /// written under the new key (their old copies are kept until the hold
    /// ends).
    pub hold_cut: bool,
}

/// `[kernel]` as the core needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FibConfig {
    pub table: u32,
    pub metric: u32,
    pub ecmp: usize,
    pub protocol: u8,
}

/// What the kernel is given for a prefix: (gateway, interface) pairs.
pub type Resolved = SmallVec<[(IpAddr, u32); 2]>;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Nothing is written (standby, takeover in progress).
    Hold,
    /// Waiting for a dump of the kernel's routes.
    Dumping,
    Running,
}

impl Phase {
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Hold => "hold",
            Phase::Dumping => "syncing",
            Phase::Running => "running",
        }
    }
}

#[derive(Debug, Clone, Copy)]
struct Entry {
    want: u32,
    kernel: u32,
    flags: u8,
}

struct Interner<T> {
    items: Vec<T>,
    ids: HashMap<T, u32, ahash::RandomState>,
}

impl<T: Clone + Eq + std::hash::Hash> Interner<T> {
    fn new() -> Self {
        Interner {
            items: Vec::new(),
            ids: HashMap::default(),
        }
    }
    fn id(&mut self, v: &T) -> u32 {
        if let Some(i) = self.ids.get(v) {
            return *i;
        }
        self.items.push(v.clone());
        let i = (self.items.len() - 1) as u32;
        self.ids.insert(v.clone(), i);
        i
    }
    fn get(&self, i: u32) -> &T {
        &self.items[i as usize]
    }
}

/// Counters for `show fib` and the metrics.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counters {
    pub added: u64,
    pub replaced: u64,
    pub deleted: u64,
    pub errors: u64,
    pub batches: u64,
    pub dumps: u64,
    /// Our routes found in the table at a dump and kept as they were.
    pub adopted: u64,
    /// Kernel route, link and address notifications handled.
    pub notifications: u64,
    pub lost_answers: u64,
}

/// One entry for `show fib`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RouteView {
    pub prefix: Prefix,
    pub bgp_next_hops: Vec<IpAddr>,
    pub installed: Vec<(IpAddr, u32)>,
    /// `installed`, `pending`, `unresolved`, `failed`, `stale`.
    pub state: &'static str,
    pub error: Option<i32>,
}

/// One BGP next hop for `show fib`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NextHopView {
    pub next_hop: IpAddr,
    /// The kernel route it resolves through (`prefix/len`), if any.
    pub via_route: Option<String>,
    pub resolved: Vec<(IpAddr, u32)>,
}

pub struct Core {
    cfg: FibConfig,
    phase: Phase,
    routes: HashMap<Prefix, Entry, ahash::RandomState>,
    wants: Interner<NextHops>,
    res: Interner<Resolved>,
    /// Per want set: its resolution (a `res` id or NONE).
    want_res: Vec<u32>,
    /// The kernel routes next hops resolve through (not ours).
    foreign: Vec<KernelRoute>,
    queue: Vec<Prefix>,
    /// Ours under an old key (another metric, or a retired table and
    /// protocol), found by the last dump: deleted once the queue is empty
    /// and no start-up hold runs.
    old: Vec<Old>,
    /// Prefixes whose route in the kernel carries a retired protocol at
    /// our table and metric (the same key as ours): replaced in place, or
    /// deleted with that protocol.
    proto_of: HashMap<Prefix, u8, ahash::RandomState>,
    /// (table, protocol) used before a reconfiguration whose routes may
    /// still be in the kernel: found by a dump into `old`, never used for
    /// resolution; forgotten once none is left.
    retired: Vec<(u32, u8)>,
    in_flight: Vec<(Prefix, RouteOp, u32)>,
    in_flight_old: Vec<Old>,
    errors: HashMap<Prefix, i32, ahash::RandomState>,
    /// Ours not wanted are kept until then (after activation).
    keep_stale_until: Option<Instant>,
    resync: bool,
    next_retry: Option<Instant>,
    pub counters: Counters,
}

fn contains(net: &IpAddr, len: u8, a: &IpAddr) -> bool {
    match (net, a) {
        (IpAddr::V4(n), IpAddr::V4(a)) => {
            let m = if len == 0 {
                0
            } else {
                u32::MAX << (32 - len.min(32))
            };
            u32::from(*n) & m == u32::from(*a) & m
        }
        (IpAddr::V6(n), IpAddr::V6(a)) => {
            let m = if len == 0 {
                0
            } else {
                u128::MAX << (128 - len.min(128))
            };
            u128::from(*n) & m == u128::from(*a) & m
        }
        _ => false,
    }
}

fn route_key(p: &Prefix, cfg: &FibConfig, metric: u32) -> RouteKey {
    let (dst, dst_len) = match p {
        Prefix::V4(k) => (IpAddr::V4(k.addr.into()), k.len),
        Prefix::V6(k) => (IpAddr::V6(k.addr.into()), k.len),
    };
    RouteKey {
        dst,
        dst_len,
        table: cfg.table,
        protocol: cfg.protocol,
        priority: metric,
    }
}

fn prefix_of(r: &KernelRoute) -> Option<Prefix> {
    match r.dst {
        IpAddr::V4(a) => holdfast_wire::Prefix4::new(a, r.dst_len).map(Prefix::V4),
        IpAddr::V6(a) => holdfast_wire::Prefix6::new(a, r.dst_len).map(Prefix::V6),
    }
}

impl Core {
    pub fn new(cfg: FibConfig) -> Self {
        Core {
            cfg,
            phase: Phase::Hold,
            routes: HashMap::default(),
            wants: Interner::new(),
            res: Interner::new(),
            want_res: Vec::new(),
            foreign: Vec::new(),
            queue: Vec::new(),
            old: Vec::new(),
            proto_of: HashMap::default(),
            retired: Vec::new(),
            in_flight: Vec::new(),
            in_flight_old: Vec::new(),
            errors: HashMap::default(),
            keep_stale_until: None,
            resync: false,
            next_retry: None,
            counters: Counters::default(),
        }
    }

    pub fn config(&self) -> &FibConfig {
        &self.cfg
    }

    pub fn phase(&self) -> Phase {
        self.phase
    }

    fn enqueue(&mut self, p: Prefix) {
        if let Some(e) = self.routes.get_mut(&p) {
            if e.flags & QUEUED == 0 {
                e.flags |= QUEUED;
                self.queue.push(p);
            }
        }
    }

    /// Forwarding entries from the RIB.
    pub fn routes(&mut self, changes: Vec<FibRoute>) {
        for c in changes {
            let want = if c.nexthops.is_empty() {
                NONE
            } else {
                let id = self.wants.id(&c.nexthops);
                if id as usize >= self.want_res.len() {
                    let r = self.resolve_set(&c.nexthops);
                    self.want_res.push(r);
                }
                id
            };
            match self.routes.get_mut(&c.prefix) {
                Some(e) if e.want == want => continue,
                Some(e) => e.want = want,
                None if want == NONE => continue,
                None => {
                    self.routes.insert(
                        c.prefix,
                        Entry {
                            want,
                            kernel: NONE,
                            flags: 0,
                        },
                    );
                }
            }
            self.enqueue(c.prefix);
        }
    }

    /// Start writing: the shell dumps the table first. Ours that the RIB
    /// does not want are kept for `hold`.
    pub fn activate(&mut self, now: Instant, hold: Duration) {
        if self.phase == Phase::Hold {
            self.phase = Phase::Dumping;
            self.keep_stale_until = (!hold.is_zero()).then(|| now + hold);
        }
    }

    /// The shell should dump the kernel's routes now.
    pub fn wants_dump(&self) -> bool {
        self.phase == Phase::Dumping || (self.phase == Phase::Running && self.resync)
    }

    pub fn dump_begin(&mut self) {
        self.foreign.clear();
        self.old.clear();
        self.proto_of.clear();
        for e in self.routes.values_mut() {
            e.flags &= !SEEN;
        }
    }

    fn ours(&self, r: &KernelRoute) -> bool {
        r.table == self.cfg.table && r.protocol == self.cfg.protocol
    }

    fn retired_key(&self, r: &KernelRoute) -> bool {
        self.retired.contains(&(r.table, r.protocol))
    }

    fn resolution_domain(&self, r: &KernelRoute) -> bool {
        (r.table == MAIN_TABLE || r.table == self.cfg.table)
            && r.protocol != self.cfg.protocol
            && !self.retired_key(r)
            && r.kind == RTN_UNICAST
            && r.dst_len > 0
    }

    fn installed_of(r: &KernelRoute) -> Resolved {
        let mut v: Resolved = r
            .nexthops
            .iter()
            .filter_map(|n| n.gateway.map(|g| (g, n.oif)))
            .collect();
        v.sort_unstable();
        v
    }

    pub fn dump_route(&mut self, r: &KernelRoute) {
        let same_key = r.table == self.cfg.table && r.priority == self.cfg.metric;
        if self.retired_key(r) && !self.ours(r) && same_key {
            // Our old protocol at our table and metric: the kernel's key
            // is ours, so this is the prefix's route (replaced in place).
            let Some(p) = prefix_of(r) else { return };
            let id = self.res.id(&Self::installed_of(r));
            let hold = self.keep_stale_until.is_some();
            let e = self.routes.entry(p).or_insert(Entry {
                want: NONE,
                kernel: NONE,
                flags: 0,
            });
            e.kernel = id;
            e.flags |= SEEN;
            if hold {
                e.flags |= ADOPTED;
            }
            self.proto_of.insert(p, r.protocol);
        } else if self.retired_key(r) && !self.ours(r) {
            if let Some(prefix) = prefix_of(r) {
                self.old.push(Old {
                    prefix,
                    table: r.table,
                    protocol: r.protocol,
                    metric: r.priority,
                });
            }
        } else if self.ours(r) {
            let Some(p) = prefix_of(r) else { return };
            if r.priority != self.cfg.metric {
                self.old.push(Old {
                    prefix: p,
                    table: r.table,
                    protocol: r.protocol,
                    metric: r.priority,
                });
                return;
            }
            let id = self.res.id(&Self::installed_of(r));
            let e = self.routes.entry(p).or_insert(Entry {
                want: NONE,
                kernel: NONE,
                flags: 0,
            });
            if self.phase == Phase::Dumping && e.kernel == NONE {
                self.counters.adopted += 1;
                if self.keep_stale_until.is_some() {
                    e.flags |= ADOPTED;
                }
            }
            e.kernel = id;
            e.flags |= SEEN;
        } else if self.resolution_domain(r) {
            self.foreign.push(r.clone());
        }
    }

    pub fn dump_end(&mut self) {
        self.counters.dumps += 1;
        self.resync = false;
        self.phase = Phase::Running;
        let mut all = Vec::with_capacity(self.routes.len());
        for (p, e) in self.routes.iter_mut() {
            if e.flags & SEEN == 0 {
                // Not in the table (any more).
                e.kernel = NONE;
            }
            e.flags &= !SEEN;
            all.push(*p);
        }
        self.reresolve_all();
        for p in all {
            self.enqueue(p);
        }
        self.forget_retired();
    }

    /// Retired keys with no route left in `old` (or in flight) are
    /// forgotten: their routes are gone.
    fn forget_retired(&mut self) {
        let (old, in_flight, proto_of) = (&self.old, &self.in_flight_old, &self.proto_of);
        let table = self.cfg.table;
        self.retired.retain(|k| {
            old.iter()
                .chain(in_flight)
                .any(|o| (o.table, o.protocol) == *k)
                || proto_of.values().any(|p| (table, *p) == *k)
        });
    }

    /// A reload changed `[kernel]`. A new table, protocol or metric moves
    /// every route (the table is read again; written under the new key,
    /// deleted under the old one once the queue is empty); a new `ecmp`
    /// resolves every next-hop set again (the RIB sends its entries again
    /// with the new sets) and rewrites what differs.
    pub fn reconfigure(&mut self, new: FibConfig) -> Reconfigured {
        let old = std::mem::replace(&mut self.cfg, new.clone());
        let mut out = Reconfigured {
            moved: (old.table, old.protocol, old.metric) != (new.table, new.protocol, new.metric),
            rewrite: old.ecmp != new.ecmp,
            hold_cut: false,
        };
        if (old.table, old.protocol) != (new.table, new.protocol)
            && !self.retired.contains(&(old.table, old.protocol))
        {
            self.retired.push((old.table, old.protocol));
        }
        self.retired.retain(|k| *k != (new.table, new.protocol));
        if out.moved {
            // Adopted routes are kept as they are by their old copies (not
            // deleted before the hold ends); under the new key each prefix
            // gets what the RIB wants.
            for e in self.routes.values_mut() {
                if e.flags & ADOPTED != 0 {
                    e.flags &= !ADOPTED;
                    out.hold_cut = true;
                }
            }
            if !out.hold_cut {
                // The hold keeps nothing found at the start (none adopted
                // or all taken back already): the old copies need not
                // wait for its end either.
                self.keep_stale_until = None;
            }
            if self.phase == Phase::Running {
                self.resync = true;
            }
        } else if out.rewrite {
            self.reresolve_all();
        }
        out
    }

    /// The protocols whose route notifications are ours (the socket filter
    /// drops them): the current one and any retired one.
    pub fn own_protocols(&self) -> Vec<u8> {
        let mut v = vec![self.cfg.protocol];
        for (_, p) in &self.retired {
            if !v.contains(p) {
                v.push(*p);
            }
        }
        v
    }

    /// A route, link or address notification (`deleted`: RTM_DEL*).
    pub fn kernel_route(&mut self, r: &KernelRoute, deleted: bool) {
        self.counters.notifications += 1;
        if self.ours(r)
            || self.retired_key(r)
            || !self.resolution_domain(r)
            || self.phase != Phase::Running
        {
            return;
        }
        self.foreign.retain(|x| {
            !(x.dst == r.dst
                && x.dst_len == r.dst_len
                && x.table == r.table
                && x.priority == r.priority)
        });
        if !deleted {
            self.foreign.push(r.clone());
        }
        self.reresolve_all();
    }

    /// A link or address changed: routes may have lost or regained next
    /// hops without a notification; reconcile through a dump.
    pub fn link_changed(&mut self) {
        self.counters.notifications += 1;
        if self.phase == Phase::Running {
            self.resync = true;
        }
    }

    /// The kernel dropped notifications for us.
    pub fn notifications_lost(&mut self) {
        self.counters.lost_answers += 1;
        if self.phase == Phase::Running {
            self.resync = true;
        }
    }

    fn resolve_one(&self, nh: &IpAddr) -> (Option<usize>, Resolved) {
        let mut best: Option<usize> = None;
        for (i, r) in self.foreign.iter().enumerate() {
            if !contains(&r.dst, r.dst_len, nh) {
                continue;
            }
            let better = match best {
                None => true,
                Some(b) => {
                    let b = &self.foreign[b];
                    (r.dst_len, std::cmp::Reverse(r.priority))
                        > (b.dst_len, std::cmp::Reverse(b.priority))
                }
            };
            if better {
                best = Some(i);
            }
        }
        let mut out = Resolved::new();
        if let Some(b) = best {
            for n in self.foreign[b].nexthops.iter().filter(|n| n.usable()) {
                out.push((n.gateway.unwrap_or(*nh), n.oif));
            }
        }
        (best, out)
    }

    fn resolve_set(&mut self, set: &NextHops) -> u32 {
        let mut all = Resolved::new();
        for nh in set {
            for x in self.resolve_one(nh).1 {
                if !all.contains(&x) {
                    all.push(x);
                }
            }
        }
        all.sort_unstable();
        all.truncate(self.cfg.ecmp.max(1));
        if all.is_empty() {
            NONE
        } else {
            self.res.id(&all)
        }
    }

    fn reresolve_all(&mut self) {
        let sets: Vec<NextHops> = self.wants.items.clone();
        let mut changed = Vec::with_capacity(sets.len());
        for (i, set) in sets.iter().enumerate() {
            let r = self.resolve_set(set);
            changed.push(r != self.want_res[i]);
            self.want_res[i] = r;
        }
        let any = changed.iter().any(|c| *c);
        if !any {
            return;
        }
        let hit: Vec<Prefix> = self
            .routes
            .iter()
            .filter(|(_, e)| e.want != NONE && changed[e.want as usize])
            .map(|(p, _)| *p)
            .collect();
        for p in hit {
            self.enqueue(p);
        }
    }

    fn holding_stale(&self, now: Instant) -> bool {
        self.keep_stale_until.is_some_and(|t| now < t)
    }

    fn target(&self, e: &Entry, now: Instant) -> u32 {
        if e.flags & ADOPTED != 0 && self.holding_stale(now) {
            return e.kernel;
        }
        if e.want == NONE {
            return NONE;
        }
        self.want_res[e.want as usize]
    }

    /// Timers: the end of the stale hold, retries of failed routes.
    pub fn tick(&mut self, now: Instant) {
        if self.keep_stale_until.is_some_and(|t| now >= t) {
            self.keep_stale_until = None;
            let mut stale: Vec<Prefix> = Vec::new();
            for (p, e) in self.routes.iter_mut() {
                if e.flags & ADOPTED != 0 || e.want == NONE {
                    e.flags &= !ADOPTED;
                    stale.push(*p);
                }
            }
            for p in stale {
                self.enqueue(p);
            }
        }
        if self.next_retry.is_some_and(|t| now >= t) {
            self.next_retry = None;
            let failed: Vec<Prefix> = self.errors.keys().copied().collect();
            for p in failed {
                self.enqueue(p);
            }
        }
    }

    /// When [`Core::tick`] has something to do.
    pub fn next_wake(&self) -> Option<Instant> {
        match (self.keep_stale_until, self.next_retry) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Work is queued and may be written (routes under an old key wait
    /// for the end of the start-up hold).
    pub fn has_work(&self) -> bool {
        self.phase == Phase::Running
            && !self.resync
            && (!self.queue.is_empty() || (!self.old.is_empty() && self.keep_stale_until.is_none()))
    }

    /// Encodes up to `max` route messages into `buf` (cleared), sequence
    /// numbers from `seq`; returns the number of messages (0: nothing to
    /// do). The last message asks for an acknowledgement.
    pub fn next_batch(&mut self, now: Instant, buf: &mut Vec<u8>, seq: u32, max: usize) -> usize {
        buf.clear();
        self.in_flight.clear();
        self.in_flight_old.clear();
        if !self.has_work() {
            return 0;
        }
        let mut last = None;
        while self.in_flight.len() < max {
            let Some(p) = self.queue.pop() else { break };
            let Some(e) = self.routes.get_mut(&p) else {
                continue;
            };
            e.flags &= !QUEUED;
            let e = *e;
            let target = self.target(&e, now);
            let old_proto = self.proto_of.get(&p).copied();
            let op = match (e.kernel, target) {
                // Same content under a retired protocol: rewritten to set ours.
                (k, t) if k == t && k != NONE && old_proto.is_some() => RouteOp::Replace,
                (k, t) if k == t => {
                    if e.want == NONE && e.kernel == NONE {
                        self.routes.remove(&p);
                        self.errors.remove(&p);
                    }
                    continue;
                }
                (NONE, _) => RouteOp::Add,
                (_, NONE) => RouteOp::Delete,
                _ => RouteOp::Replace,
            };
            last = Some(buf.len());
            let mut key = route_key(&p, &self.cfg, self.cfg.metric);
            if let (RouteOp::Delete, Some(proto)) = (op, old_proto) {
                key.protocol = proto;
            }
            let s = seq.wrapping_add(self.in_flight.len() as u32);
            let nhs: &[(IpAddr, u32)] = if target == NONE {
                &[]
            } else {
                self.res.get(target)
            };
            codec::encode_route(buf, s, false, op, &key, nhs);
            self.in_flight.push((p, op, target));
        }
        // Old keys last, once every queued write is in this batch or done:
        // the new route of a prefix always goes in before its old one goes.
        while self.queue.is_empty()
            && self.keep_stale_until.is_none()
            && self.in_flight.len() + self.in_flight_old.len() < max
        {
            let Some(o) = self.old.pop() else { break };
            last = Some(buf.len());
            let key = RouteKey {
                table: o.table,
                protocol: o.protocol,
                priority: o.metric,
                ..route_key(&o.prefix, &self.cfg, o.metric)
            };
            let s = seq.wrapping_add((self.in_flight.len() + self.in_flight_old.len()) as u32);
            codec::encode_route(buf, s, false, RouteOp::Delete, &key, &[]);
            self.in_flight_old.push(o);
        }
        if let Some(at) = last {
            let flags = u16::from_ne_bytes([buf[at + 6], buf[at + 7]]) | NLM_F_ACK;
            buf[at + 6..at + 8].copy_from_slice(&flags.to_ne_bytes());
            self.counters.batches += 1;
        }
        self.in_flight.len() + self.in_flight_old.len()
    }

    /// The kernel's answers to the batch starting at `seq`: the errors
    /// (sequence number, positive errno), and whether the final
    /// acknowledgement arrived (`complete`); without it, answers may have
    /// been lost and the table is reconciled by a dump.
    pub fn batch_done(&mut self, now: Instant, seq: u32, errors: &[(u32, i32)], complete: bool) {
        let failed: HashMap<usize, i32> = errors
            .iter()
            .map(|(s, e)| (s.wrapping_sub(seq) as usize, *e))
            .collect();
        let in_flight = std::mem::take(&mut self.in_flight);
        if !complete {
            self.counters.lost_answers += 1;
            self.resync = true;
        }
        let first_old = in_flight.len();
        for (i, _) in self.in_flight_old.iter().enumerate() {
            match failed.get(&(first_old + i)) {
                None | Some(&libc::ESRCH) => self.counters.deleted += 1,
                // Left in the kernel; the next dump finds it while its key
                // is retired or ours.
                Some(_) => self.counters.errors += 1,
            }
        }
        self.in_flight_old.clear();
        for (i, (p, op, target)) in in_flight.into_iter().enumerate() {
            let err = failed.get(&i).copied();
            let Some(e) = self.routes.get_mut(&p) else {
                continue;
            };
            match (op, err) {
                (RouteOp::Delete, None) | (RouteOp::Delete, Some(libc::ESRCH)) => {
                    e.kernel = NONE;
                    self.counters.deleted += 1;
                    self.proto_of.remove(&p);
                }
                (_, None) => {
                    e.kernel = target;
                    self.proto_of.remove(&p);
                    if op == RouteOp::Add {
                        self.counters.added += 1;
                    } else {
                        self.counters.replaced += 1;
                    }
                }
                (_, Some(code)) => {
                    e.flags |= FAILED;
                    self.counters.errors += 1;
                    self.errors.insert(p, code);
                    self.next_retry.get_or_insert(now + RETRY);
                    continue;
                }
            }
            e.flags &= !FAILED;
            if e.want == NONE && e.kernel == NONE {
                self.routes.remove(&p);
            }
            self.errors.remove(&p);
        }
        self.forget_retired();
    }

    /// The batch could not be sent: everything in it is queued again.
    pub fn batch_unsent(&mut self) {
        let in_flight = std::mem::take(&mut self.in_flight);
        for (p, _, _) in in_flight {
            self.enqueue(p);
        }
        let old = std::mem::take(&mut self.in_flight_old);
        self.old.extend(old);
        self.resync = true;
    }

    /// A normal stop without `persist`: every route of ours goes.
    pub fn withdraw_all(&mut self) {
        self.keep_stale_until = None;
        let all: Vec<Prefix> = self.routes.keys().copied().collect();
        for p in &all {
            if let Some(e) = self.routes.get_mut(p) {
                e.want = NONE;
            }
        }
        for p in all {
            self.enqueue(p);
        }
    }

    /// Ours under an old key, still to be deleted or (a protocol alone
    /// changed) rewritten.
    pub fn old_key_routes(&self) -> usize {
        self.old.len() + self.in_flight_old.len() + self.proto_of.len()
    }

    /// Prefixes the RIB wants in the kernel.
    pub fn wanted(&self) -> usize {
        self.routes.values().filter(|e| e.want != NONE).count()
    }

    /// Counts for `show fib`: (installed, pending, unresolved, failed, stale).
    pub fn counts(&self, now: Instant) -> (usize, usize, usize, usize, usize) {
        let (mut inst, mut pend, mut unres, mut fail, mut stale) = (0, 0, 0, 0, 0);
        for e in self.routes.values() {
            if e.kernel != NONE {
                inst += 1;
            }
            if e.flags & FAILED != 0 {
                fail += 1;
            } else if e.want == NONE && e.kernel != NONE {
                stale += 1;
            } else if e.want != NONE && self.want_res[e.want as usize] == NONE {
                unres += 1;
            } else if e.kernel != self.target(e, now) {
                pend += 1;
            }
        }
        (inst, pend, unres, fail, stale)
    }

    /// Up to `limit` entries, sorted by prefix (all when `prefix` names one).
    pub fn view(&self, now: Instant, limit: usize) -> Vec<RouteView> {
        let mut keys: Vec<&Prefix> = self.routes.keys().collect();
        keys.sort_unstable();
        keys.into_iter()
            .take(limit)
            .map(|p| {
                let e = &self.routes[p];
                let bgp = if e.want == NONE {
                    Vec::new()
                } else {
                    self.wants.get(e.want).to_vec()
                };
                let installed = if e.kernel == NONE {
                    Vec::new()
                } else {
                    self.res.get(e.kernel).to_vec()
                };
                let state = if e.flags & FAILED != 0 {
                    "failed"
                } else if e.want == NONE {
                    "stale"
                } else if self.want_res[e.want as usize] == NONE {
                    "unresolved"
                } else if e.kernel != self.target(e, now) {
                    "pending"
                } else {
                    "installed"
                };
                RouteView {
                    prefix: *p,
                    bgp_next_hops: bgp,
                    installed,
                    state,
                    error: self.errors.get(p).copied(),
                }
            })
            .collect()
    }

    /// Every BGP next hop in use and how it resolves.
    pub fn next_hops(&self) -> Vec<NextHopView> {
        let mut all: Vec<IpAddr> = self.wants.items.iter().flatten().copied().collect();
        all.sort_unstable();
        all.dedup();
        all.into_iter()
            .map(|nh| {
                let (via, resolved) = self.resolve_one(&nh);
                NextHopView {
                    next_hop: nh,
                    via_route: via.map(|i| {
                        let r = &self.foreign[i];
                        format!("{}/{}", r.dst, r.dst_len)
                    }),
                    resolved: resolved.to_vec(),
                }
            })
            .collect()
    }
}

#[cfg(test)]
mod tests;
