//! The kernel FIB's decisions, pure: Loc-RIB forwarding entries, kernel
//! dumps, notifications and the kernel's answers in; route messages out.
//!
//! Each prefix has what the RIB wants (a set of BGP next hops) and what
//! the kernel has from us (a list of (gateway, interface) pairs); both are
//! interned, so an entry is three words and comparing them is comparing
//! ids. Entries live in slots (32 bytes each); a prefix is looked up once,
//! when the RIB hands it over, through a map from a packed key (16 bytes a
//! bucket for IPv4) to its slot, and the queue and the batch in flight
//! carry slot numbers.
//!
//! Order of writes: the kernel's IPv4 table is a level-compressed trie
//! that doubles a node once it is half full, copying its children and
//! splitting theirs; filled in ascending order, the upper nodes double
//! again and again under ever larger subtrees. So the queue is taken in
//! rounds ([`order_round`]): a large round is sorted by prefix and written
//! in bit-reversed rank order (the median first, then the quartiles, ...),
//! which gives the upper nodes their final width while the trie is still
//! small. 1M sequential /24s into an empty table, 4096 routes a `sendmsg`,
//! on this 2-core machine: 2.7–3.7 s of system time against 4.0–4.9 s in
//! ascending order and 3.8–4.5 s shuffled. A BGP next hop is resolved through the kernel's own routes (the
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
//! Next-hop objects: an IPv4 route whose next hop is one IPv4 gateway
//! names a next-hop object of ours (`RTA_NH_ID`; created in the same batch
//! before the first route that needs it, owned by our protocol number)
//! instead of carrying the gateway. The kernel then builds no next hop per
//! route (with a gateway it builds one, with a per-CPU cache, and throws
//! it away when an equal one exists): 1M routes took 2.0–2.2 s of system
//! time against 3.0–3.7 s. Objects no route of ours uses are deleted when
//! the queue is empty (at most every [`NH_GC`], and at a normal stop). A
//! kernel without next-hop objects (before 5.3) gets gateways, as do ECMP
//! sets and IPv6.
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
//! - Next-hop objects are collected by resolution, not by id: two objects
//!   of ours with the same gateway (one adopted, one created) both stay
//!   while either is in use. After a `protocol` change, routes keep naming
//!   the objects created under the old number; a later start no longer
//!   counts those as ours, so one left unused then is not removed.
//! - ECMP sets and IPv6 routes carry their gateways (no group objects).

use std::collections::HashMap;
use std::net::IpAddr;
use std::time::{Duration, Instant};

use holdfast_linux::rtnl::codec::{self, KernelRoute, RouteKey, RouteOp, NLM_F_ACK, RTN_UNICAST};
use holdfast_rib::{FibRoute, NextHops};
use holdfast_wire::Prefix;

use self::nexthops::Nexthops;
use self::slots::{order_round, Entry, Slots};
use crate::msg::fib::FibConfig;
use smallvec::SmallVec;

/// The main routing table.
const MAIN_TABLE: u32 = 254;
const NONE: u32 = u32::MAX;
const QUEUED: u8 = 1;
const SEEN: u8 = 2;
const FAILED: u8 = 4;
/// Found in the table at the start and kept as it is for the hold.
const ADOPTED: u8 = 8;
/// The slot holds a prefix (a free slot does not).
const LIVE: u8 = 16;
/// Failed routes are tried again this often.
const RETRY: Duration = Duration::from_secs(10);
/// Unused next-hop objects of ours are looked for this often.
const NH_GC: Duration = Duration::from_secs(60);
/// Where our next-hop object ids start (others' ids are skipped).
const NH_BASE: u32 = 0x6b00_0000;

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

/// One message of the batch in flight.
#[derive(Debug, Clone, Copy)]
enum Flight {
    /// A delete of ours under an old key.
    Old(Old),
    Route {
        slot: u32,
        op: RouteOp,
        target: u32,
    },
    NhAdd {
        res: u32,
        id: u32,
    },
    NhDel {
        id: u32,
    },
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
    /// Next-hop objects of ours created and deleted.
    pub nexthops_added: u64,
    pub nexthops_deleted: u64,
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
    routes: Slots,
    wants: Interner<NextHops>,
    /// The last next-hop set interned and its id (a table's routes mostly
    /// share a few sets, and arrive grouped).
    last_want: Option<(NextHops, u32)>,
    res: Interner<Resolved>,
    /// Per want set: its resolution (a `res` id or NONE).
    want_res: Vec<u32>,
    /// The kernel routes next hops resolve through (not ours).
    foreign: Vec<KernelRoute>,
    /// Slots to look at, in the order they were queued.
    queue: Vec<u32>,
    /// The round being written, in reverse (the next is last).
    round: Vec<u32>,
    /// Ours under an old key (another metric, or a retired table and
    /// protocol), found by the last dump: deleted once the queue is empty
    /// and no start-up hold runs.
    old: Vec<Old>,
    /// Slots whose route in the kernel carries a retired protocol at our
    /// table and metric (the same key as ours): replaced in place, or
    /// deleted with that protocol.
    proto_of: HashMap<u32, u8, ahash::RandomState>,
    /// (table, protocol) used before a reconfiguration whose routes may
    /// still be in the kernel: found by a dump into `old`, never used for
    /// resolution; forgotten once none is left.
    retired: Vec<(u32, u8)>,
    in_flight: Vec<Flight>,
    nh: Nexthops,
    /// Failed slots and their errno.
    errors: HashMap<u32, i32, ahash::RandomState>,
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
            routes: Slots::default(),
            wants: Interner::new(),
            last_want: None,
            res: Interner::new(),
            want_res: Vec::new(),
            foreign: Vec::new(),
            queue: Vec::new(),
            round: Vec::new(),
            old: Vec::new(),
            proto_of: HashMap::default(),
            retired: Vec::new(),
            in_flight: Vec::new(),
            nh: Nexthops::default(),
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

    fn enqueue(&mut self, s: u32) {
        let e = self.routes.get(s);
        if e.flags & (QUEUED | LIVE) == LIVE {
            e.flags |= QUEUED;
            self.queue.push(s);
        }
    }

    fn want_id(&mut self, set: &NextHops) -> u32 {
        if set.is_empty() {
            return NONE;
        }
        if let Some((last, id)) = &self.last_want {
            if last == set {
                return *id;
            }
        }
        let id = self.wants.id(set);
        if id as usize >= self.want_res.len() {
            let r = self.resolve_set(set);
            self.want_res.push(r);
        }
        self.last_want = Some((set.clone(), id));
        id
    }

    /// Forwarding entries from the RIB.
    pub fn routes(&mut self, changes: Vec<FibRoute>) {
        for c in changes {
            let want = self.want_id(&c.nexthops);
            let s = if want == NONE {
                match self.routes.find(&c.prefix) {
                    Some(s) => s,
                    None => continue,
                }
            } else {
                self.routes.find_or_insert(&c.prefix).0
            };
            let e = self.routes.get(s);
            if e.want == want {
                continue;
            }
            e.want = want;
            self.enqueue(s);
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
        self.nh.of_res.clear();
        self.nh.res_of.clear();
        self.nh.taken.clear();
        self.nh.refused.clear();
        self.nh.enabled = false;
        for (_, e) in self.routes.live_mut() {
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

    fn installed_of(&mut self, r: &KernelRoute) -> Resolved {
        if r.nexthops.is_empty() {
            if let Some(res) = r.nh_id.and_then(|id| self.nh.res_of.get(&id)) {
                return self.res.get(*res).clone();
            }
        }
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
            let installed = self.installed_of(r);
            let id = self.res.id(&installed);
            let hold = self.keep_stale_until.is_some();
            let (s, _) = self.routes.find_or_insert(&p);
            let e = self.routes.get(s);
            e.kernel = id;
            e.flags |= SEEN;
            if hold {
                e.flags |= ADOPTED;
            }
            self.proto_of.insert(s, r.protocol);
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
            let installed = self.installed_of(r);
            let id = self.res.id(&installed);
            let (s, _) = self.routes.find_or_insert(&p);
            let phase = self.phase;
            let e = self.routes.get(s);
            if phase == Phase::Dumping && e.kernel == NONE {
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
        for (s, e) in self.routes.live_mut() {
            if e.flags & SEEN == 0 {
                // Not in the table (any more).
                e.kernel = NONE;
            }
            e.flags &= !SEEN;
            all.push(s);
        }
        self.reresolve_all();
        for s in all {
            self.enqueue(s);
        }
        self.forget_retired();
    }

    /// Retired keys with no route left in `old` (or in flight) are
    /// forgotten: their routes are gone.
    fn forget_retired(&mut self) {
        let in_flight: Vec<Old> = self
            .in_flight
            .iter()
            .filter_map(|f| match f {
                Flight::Old(o) => Some(*o),
                _ => None,
            })
            .collect();
        let (old, proto_of) = (&self.old, &self.proto_of);
        let table = self.cfg.table;
        self.retired.retain(|k| {
            old.iter()
                .chain(&in_flight)
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
            for (_, e) in self.routes.live_mut() {
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
        let hit: Vec<u32> = self
            .routes
            .live()
            .filter(|(_, e)| e.want != NONE && changed[e.want as usize])
            .map(|(s, _)| s)
            .collect();
        for s in hit {
            self.enqueue(s);
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
            let mut stale: Vec<u32> = Vec::new();
            for (s, e) in self.routes.live_mut() {
                if e.flags & ADOPTED != 0 || e.want == NONE {
                    e.flags &= !ADOPTED;
                    stale.push(s);
                }
            }
            for s in stale {
                self.enqueue(s);
            }
        }
        if !self.nh.res_of.is_empty() {
            match self.nh.next_gc {
                Some(t) if now >= t => {
                    self.nh.gc_due = true;
                    self.nh.next_gc = Some(now + NH_GC);
                }
                None => self.nh.next_gc = Some(now + NH_GC),
                _ => {}
            }
        }
        if self.next_retry.is_some_and(|t| now >= t) {
            self.next_retry = None;
            let failed: Vec<u32> = self.errors.keys().copied().collect();
            for s in failed {
                self.enqueue(s);
            }
        }
    }

    /// When [`Core::tick`] has something to do.
    pub fn next_wake(&self) -> Option<Instant> {
        [self.keep_stale_until, self.next_retry, self.nh.next_gc]
            .into_iter()
            .flatten()
            .min()
    }

    /// Work is queued and may be written.
    pub fn has_work(&self) -> bool {
        self.phase == Phase::Running
            && !self.resync
            && (!self.queue.is_empty()
                || !self.round.is_empty()
                || (!self.old.is_empty() && self.keep_stale_until.is_none())
                || self.nh.gc_due)
    }

    /// Encodes up to `max` route messages into `buf` (cleared), sequence
    /// numbers from `seq`; returns the number of messages (0: nothing to
    /// do). The last message asks for an acknowledgement.
    pub fn next_batch(&mut self, now: Instant, buf: &mut Vec<u8>, seq: u32, max: usize) -> usize {
        buf.clear();
        self.in_flight.clear();
        if !self.has_work() {
            return 0;
        }
        let mut last = None;
        while self.in_flight.len() < max {
            if self.round.is_empty() {
                self.round = std::mem::take(&mut self.queue);
                order_round(&mut self.round, &self.routes.all);
            }
            let Some(s) = self.round.pop() else {
                break;
            };
            let e = self.routes.get(s);
            if e.flags & QUEUED == 0 {
                // A slot freed and taken again while queued.
                continue;
            }
            e.flags &= !QUEUED;
            let e = *e;
            let target = self.target(&e, now);
            let old_proto = self.proto_of.get(&s).copied();
            let op = match (e.kernel, target) {
                // Same content under a retired protocol: rewritten to set ours.
                (k, t) if k == t && k != NONE && old_proto.is_some() => RouteOp::Replace,
                (k, t) if k == t => {
                    if e.want == NONE && e.kernel == NONE {
                        self.routes.remove(s);
                        self.errors.remove(&s);
                        self.proto_of.remove(&s);
                    }
                    continue;
                }
                (NONE, _) => RouteOp::Add,
                (_, NONE) => RouteOp::Delete,
                _ => RouteOp::Replace,
            };
            let mut key = route_key(&e.prefix(), &self.cfg, self.cfg.metric);
            if let (RouteOp::Delete, Some(proto)) = (op, old_proto) {
                key.protocol = proto;
            }
            let nh = if op == RouteOp::Delete || e.v6 {
                None
            } else {
                self.nexthop_object(target, buf, seq)
            };
            last = Some(buf.len());
            let sq = seq.wrapping_add(self.in_flight.len() as u32);
            match nh {
                Some(id) => codec::encode_route_nh(buf, sq, op, &key, id),
                None => {
                    let nhs: &[(IpAddr, u32)] = if target == NONE {
                        &[]
                    } else {
                        self.res.get(target)
                    };
                    codec::encode_route(buf, sq, false, op, &key, nhs);
                }
            }
            self.in_flight.push(Flight::Route {
                slot: s,
                op,
                target,
            });
        }
        // Old keys last, once every queued write is in this batch or done:
        // the new route of a prefix always goes in before its old one goes.
        while self.queue.is_empty()
            && self.round.is_empty()
            && self.keep_stale_until.is_none()
            && self.in_flight.len() < max
        {
            let Some(o) = self.old.pop() else { break };
            last = Some(buf.len());
            let key = RouteKey {
                table: o.table,
                protocol: o.protocol,
                priority: o.metric,
                ..route_key(&o.prefix, &self.cfg, o.metric)
            };
            let sq = seq.wrapping_add(self.in_flight.len() as u32);
            codec::encode_route(buf, sq, false, RouteOp::Delete, &key, &[]);
            self.in_flight.push(Flight::Old(o));
        }
        // Collected in a batch of their own, once the routes' answers are in.
        if self.nh.gc_due
            && self.in_flight.is_empty()
            && self.queue.is_empty()
            && self.round.is_empty()
        {
            self.nh.gc_due = false;
            for id in self.unused_nexthops(now) {
                if self.in_flight.len() >= max {
                    self.nh.gc_due = true;
                    break;
                }
                last = Some(buf.len());
                let sq = seq.wrapping_add(self.in_flight.len() as u32);
                codec::encode_nexthop_delete(buf, sq, id);
                self.in_flight.push(Flight::NhDel { id });
            }
        }
        if let Some(at) = last {
            let flags = u16::from_ne_bytes([buf[at + 6], buf[at + 7]]) | NLM_F_ACK;
            buf[at + 6..at + 8].copy_from_slice(&flags.to_ne_bytes());
            self.counters.batches += 1;
        }
        self.in_flight.len()
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
        let mut nh_failed: Vec<u32> = Vec::new();
        for (i, f) in in_flight.into_iter().enumerate() {
            let err = failed.get(&i).copied();
            let (s, op, target) = match f {
                Flight::Old(_) => {
                    match err {
                        None | Some(libc::ESRCH) => self.counters.deleted += 1,
                        // Left in the kernel; the next dump finds it while
                        // its key is retired or ours.
                        Some(_) => self.counters.errors += 1,
                    }
                    continue;
                }
                Flight::NhAdd { res, id } => {
                    if err.is_some() {
                        nh_failed.push(res);
                    }
                    self.nexthop_added(res, id, err);
                    continue;
                }
                Flight::NhDel { id } => {
                    if matches!(err, None | Some(libc::ENOENT)) {
                        self.nh.res_of.remove(&id);
                        self.nh.of_res.retain(|_, v| *v != id);
                        self.nh.taken.remove(&id);
                        self.counters.nexthops_deleted += 1;
                    } else {
                        self.counters.errors += 1;
                    }
                    continue;
                }
                Flight::Route { slot, op, target } => (slot, op, target),
            };
            if err.is_some() && nh_failed.contains(&target) {
                // Its next-hop object was refused: written again at once
                // (with another id, or with its gateways).
                self.enqueue(s);
                continue;
            }
            let e = self.routes.get(s);
            if e.flags & LIVE == 0 {
                continue;
            }
            match (op, err) {
                (RouteOp::Delete, None) | (RouteOp::Delete, Some(libc::ESRCH)) => {
                    e.kernel = NONE;
                    self.counters.deleted += 1;
                    self.proto_of.remove(&s);
                }
                (_, None) => {
                    e.kernel = target;
                    self.proto_of.remove(&s);
                    if op == RouteOp::Add {
                        self.counters.added += 1;
                    } else {
                        self.counters.replaced += 1;
                    }
                }
                (_, Some(code)) => {
                    e.flags |= FAILED;
                    self.counters.errors += 1;
                    self.errors.insert(s, code);
                    self.next_retry.get_or_insert(now + RETRY);
                    continue;
                }
            }
            e.flags &= !FAILED;
            if e.want == NONE && e.kernel == NONE {
                self.routes.remove(s);
                self.proto_of.remove(&s);
            }
            if !self.errors.is_empty() {
                self.errors.remove(&s);
            }
        }
        self.forget_retired();
    }

    /// The batch could not be sent: everything in it is queued again.
    pub fn batch_unsent(&mut self) {
        let in_flight = std::mem::take(&mut self.in_flight);
        for f in in_flight {
            match f {
                Flight::Route { slot, .. } => self.enqueue(slot),
                Flight::Old(o) => self.old.push(o),
                Flight::NhAdd { res, id } => {
                    self.nh.res_of.remove(&id);
                    if self.nh.of_res.get(&res) == Some(&id) {
                        self.nh.of_res.remove(&res);
                    }
                }
                Flight::NhDel { .. } => self.nh.gc_due = true,
            }
        }
        self.resync = true;
    }

    /// A normal stop without `persist`: every route of ours goes.
    pub fn withdraw_all(&mut self) {
        self.keep_stale_until = None;
        let mut all = Vec::with_capacity(self.routes.len());
        for (s, e) in self.routes.live_mut() {
            e.want = NONE;
            all.push(s);
        }
        for s in all {
            self.enqueue(s);
        }
        self.nh.gc_due = true;
    }

    /// Ours under an old key, still to be deleted or (a protocol alone
    /// changed) rewritten.
    pub fn old_key_routes(&self) -> usize {
        let in_flight = self
            .in_flight
            .iter()
            .filter(|f| matches!(f, Flight::Old(_)))
            .count();
        self.old.len() + in_flight + self.proto_of.len()
    }

    /// Prefixes the RIB wants in the kernel.
    pub fn wanted(&self) -> usize {
        self.routes.live().filter(|(_, e)| e.want != NONE).count()
    }

    /// Counts for `show fib`: (installed, pending, unresolved, failed, stale).
    pub fn counts(&self, now: Instant) -> (usize, usize, usize, usize, usize) {
        let (mut inst, mut pend, mut unres, mut fail, mut stale) = (0, 0, 0, 0, 0);
        for (_, e) in self.routes.live() {
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
        let mut keys: Vec<(Prefix, u32)> =
            self.routes.live().map(|(s, e)| (e.prefix(), s)).collect();
        keys.sort_unstable();
        keys.into_iter()
            .take(limit)
            .map(|(p, s)| {
                let e = &self.routes.all[s as usize];
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
                    prefix: p,
                    bgp_next_hops: bgp,
                    installed,
                    state,
                    error: self.errors.get(&s).copied(),
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

mod nexthops;
mod slots;
#[cfg(test)]
mod tests;
