//! Per-shard route storage: Adj-RIB-In (pre-policy) and Loc-RIB
//! (post-policy, best first) live in one destination entry per prefix, and
//! each peer's Adj-RIB-Out is a fingerprint map of what it was last sent.

use std::sync::Arc;

use holdfast_wire::{PathAttrs, Prefix, Prefix4, Prefix6};
use smallvec::SmallVec;

use crate::attrs::Attrs;
use crate::decision::{best_index, DecisionCtx, SrcFacts};
use crate::export::{export_route, Changes, ExportParams, Out, OutAttrs};
use crate::intern::FxMap;
use crate::policy::PolicyRef;
use crate::prefix_map::{split4, PrefixMap4};
use crate::PeerId;

pub(crate) const STALE: u8 = 1;

/// One peer's path for a prefix: `pre` is the Adj-RIB-In entry, `post` the
/// import-policy result (None = rejected, kept for soft reconfiguration).
#[derive(Debug, Clone)]
pub(crate) struct Path {
    pub peer: PeerId,
    pub flags: u8,
    pub pre: Arc<Attrs>,
    pub post: Option<Arc<Attrs>>,
}

/// All paths for a prefix; `paths[0]` is the best when it is eligible.
#[derive(Debug, Clone, Default)]
pub(crate) struct Dest {
    pub paths: SmallVec<[Path; 1]>,
}

impl Dest {
    pub(crate) fn best(&self) -> Option<(&Path, &Arc<Attrs>)> {
        let p = self.paths.first()?;
        p.post.as_ref().map(|a| (p, a))
    }

    fn best_id(&self) -> Option<(PeerId, usize)> {
        self.best().map(|(p, a)| (p.peer, Arc::as_ptr(a) as usize))
    }

    /// Re-runs the decision process and moves the winner to index 0.
    pub(crate) fn reselect(&mut self, ctx: &DecisionCtx<'_>) {
        if self.paths.len() > 1 {
            if let Some(i) = best_index(&self.paths, ctx) {
                self.paths.swap(0, i);
            }
        }
    }
}

/// Per-peer route counters of one shard.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Counts {
    pub received: i64,
    pub accepted: i64,
    pub stale: i64,
    /// Paths of the peer set, replaced or removed, since the counter was
    /// last reset ([`crate::Engine::reset_route_changes`]).
    pub changes: u64,
    /// Announcements received of a prefix the peer had announced with the
    /// very same attributes (not stale): duplicates (BMP statistics
    /// type 1).
    pub duplicates: u64,
}

impl Counts {
    fn add(&mut self, p: &Path, sign: i64) {
        self.received += sign;
        if p.post.is_some() {
            self.accepted += sign;
        }
        if p.flags & STALE != 0 {
            self.stale += sign;
        }
    }
}

/// Minimal map interface shared by the IPv4 and IPv6 tables.
pub(crate) trait PMap<K, V>: Default + Send {
    fn get(&self, k: &K) -> Option<&V>;
    fn get_mut(&mut self, k: &K) -> Option<&mut V>;
    fn entry(&mut self, k: &K) -> &mut V
    where
        V: Default;
    fn insert(&mut self, k: &K, v: V) -> Option<V>;
    fn remove(&mut self, k: &K) -> Option<V>;
    fn keys(&self) -> Vec<K>;
    fn size(&self) -> usize;
    fn visit(&self, f: impl FnMut(K, &V));
}

impl<V: Send> PMap<Prefix4, V> for PrefixMap4<V> {
    fn get(&self, k: &Prefix4) -> Option<&V> {
        PrefixMap4::get(self, k)
    }
    fn get_mut(&mut self, k: &Prefix4) -> Option<&mut V> {
        PrefixMap4::get_mut(self, k)
    }
    fn entry(&mut self, k: &Prefix4) -> &mut V
    where
        V: Default,
    {
        self.entry_or_insert_with(k, V::default)
    }
    fn insert(&mut self, k: &Prefix4, v: V) -> Option<V> {
        PrefixMap4::insert(self, k, v)
    }
    fn remove(&mut self, k: &Prefix4) -> Option<V> {
        PrefixMap4::remove(self, k)
    }
    fn keys(&self) -> Vec<Prefix4> {
        self.iter().map(|(k, _)| k).collect()
    }
    fn size(&self) -> usize {
        self.len()
    }
    fn visit(&self, mut f: impl FnMut(Prefix4, &V)) {
        for (k, v) in self.iter() {
            f(k, v)
        }
    }
}

impl<V: Send> PMap<Prefix6, V> for FxMap<Prefix6, V> {
    fn get(&self, k: &Prefix6) -> Option<&V> {
        hashbrown::HashMap::get(self, k)
    }
    fn get_mut(&mut self, k: &Prefix6) -> Option<&mut V> {
        hashbrown::HashMap::get_mut(self, k)
    }
    fn entry(&mut self, k: &Prefix6) -> &mut V
    where
        V: Default,
    {
        hashbrown::HashMap::entry(self, *k).or_default()
    }
    fn insert(&mut self, k: &Prefix6, v: V) -> Option<V> {
        hashbrown::HashMap::insert(self, *k, v)
    }
    fn remove(&mut self, k: &Prefix6) -> Option<V> {
        hashbrown::HashMap::remove(self, k)
    }
    fn keys(&self) -> Vec<Prefix6> {
        hashbrown::HashMap::keys(self).copied().collect()
    }
    fn size(&self) -> usize {
        self.len()
    }
    fn visit(&self, mut f: impl FnMut(Prefix6, &V)) {
        for (k, v) in self.iter() {
            f(*k, v)
        }
    }
}

/// A prefix type with its table types.
pub(crate) trait Key: Copy + Ord + Send + Sync + 'static {
    type DMap: PMap<Self, Dest>;
    type OMap: PMap<Self, u64>;
    fn prefix(self) -> Prefix;
    fn push(ch: &mut Changes, k: Self, a: Out);
}

impl Key for Prefix4 {
    type DMap = PrefixMap4<Dest>;
    type OMap = PrefixMap4<u64>;
    fn prefix(self) -> Prefix {
        Prefix::V4(self)
    }
    fn push(ch: &mut Changes, k: Self, a: Out) {
        ch.v4.push((k, a))
    }
}

impl Key for Prefix6 {
    type DMap = FxMap<Prefix6, Dest>;
    type OMap = FxMap<Prefix6, u64>;
    fn prefix(self) -> Prefix {
        Prefix::V6(self)
    }
    fn push(ch: &mut Changes, k: Self, a: Out) {
        ch.v6.push((k, a))
    }
}

/// A best path noted for watchers: its source peer and attributes.
pub(crate) type Noted = (PeerId, Arc<Attrs>);

/// Loc-RIB + Adj-RIB-Out tables of one address family in one shard.
pub(crate) struct Tables<K: Key> {
    pub dests: K::DMap,
    /// Prefixes of `dests` with a best path, kept by [`Tables::change`] (the
    /// only writer of `dests`), so the Loc-RIB's size is read without a
    /// walk (`show neighbors` and the metrics ask for it while a table
    /// of a million routes is being loaded).
    pub with_best: usize,
    /// Per peer: fingerprint of the attributes last advertised.
    pub out: FxMap<PeerId, K::OMap>,
    /// Prefixes whose best path changed since the last export pass.
    pub dirty: Vec<K>,
    /// Best-path watching is on (`Engine::set_watch_best`): each export
    /// pass first notes the new best of its dirty prefixes in `best_log`.
    pub watch: bool,
    /// The best paths noted (None: no best any more), taken by
    /// `Engine::take_best_changes`.
    pub best_log: Vec<(K, Option<Noted>)>,
    /// With FIB output: prefixes whose forwarding entry may have changed
    /// since the last `Engine::take_fib` (duplicates possible).
    pub fib_dirty: Vec<K>,
    /// Post-policy watching is on (`Engine::set_watch_post`): each change
    /// of a peer's post-policy path is noted in `post_log`.
    pub watch_post: bool,
    /// Per change: the prefix, the peer, its new post-policy attributes
    /// (None: withdrawn or now rejected), taken by
    /// `Engine::take_post_changes`.
    pub post_log: Vec<(K, PeerId, Option<Arc<Attrs>>)>,
}

impl<K: Key> Default for Tables<K> {
    fn default() -> Self {
        Tables {
            dests: K::DMap::default(),
            with_best: 0,
            out: FxMap::default(),
            dirty: Vec::new(),
            watch: false,
            best_log: Vec::new(),
            fib_dirty: Vec::new(),
            watch_post: false,
            post_log: Vec::new(),
        }
    }
}

/// One shard: a disjoint slice of the prefix space.
#[derive(Default)]
pub(crate) struct Shard {
    pub v4: Tables<Prefix4>,
    pub v6: Tables<Prefix6>,
    pub counts: FxMap<PeerId, Counts>,
}

pub(crate) fn shard_of4(p: &Prefix4, n: usize) -> usize {
    let (b, _) = split4(p);
    ((b as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 32) as usize % n
}

pub(crate) fn shard_of6(p: &Prefix6, n: usize) -> usize {
    let x = ((p.addr >> 64) as u64) ^ ((p.addr >> 40) as u64) ^ p.len as u64;
    (x.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 32) as usize % n
}

/// Who receives an export pass, and with which parameters.
pub(crate) struct ExportEnv<'a> {
    pub groups: &'a [ExportParams],
    /// (peer, index into `groups`)
    pub targets: &'a [(PeerId, usize)],
    pub facts: &'a FxMap<PeerId, SrcFacts>,
}

type OutCache = FxMap<(usize, PeerId, usize), Out>;

fn export_one(
    env: &ExportEnv<'_>,
    cache: &mut OutCache,
    g: usize,
    src: PeerId,
    prefix: Prefix,
    a: &Arc<Attrs>,
) -> Out {
    let p = &env.groups[g];
    let compute = || {
        let f = env.facts.get(&src)?;
        export_route(p, f, &prefix, a.to_path_attrs())
            .map(|o| Arc::new(OutAttrs::encode(p, prefix.afi(), o)))
    };
    if p.policy.prefix_dependent() {
        return compute();
    }
    let key = (
        g * 2 + (prefix.afi() == holdfast_wire::Afi::Ipv6) as usize,
        src,
        Arc::as_ptr(a) as usize,
    );
    cache.entry(key).or_insert_with(compute).clone()
}

/// Whether two post-policy results are the same interned attributes (or
/// both rejected).
pub(crate) fn same_post(a: Option<&Arc<Attrs>>, b: Option<&Arc<Attrs>>) -> bool {
    match (a, b) {
        (None, None) => true,
        (Some(a), Some(b)) => Arc::ptr_eq(a, b),
        _ => false,
    }
}

impl<K: Key> Tables<K> {
    /// Sets (`new` = Some) or removes `peer`'s path for `k`, re-running the
    /// decision and marking the prefix dirty if the best path changed.
    /// `received`: the change is an UPDATE from the peer (duplicates are
    /// counted).
    pub(crate) fn change(
        &mut self,
        counts: &mut FxMap<PeerId, Counts>,
        k: K,
        peer: PeerId,
        new: Option<Path>,
        ctx: &DecisionCtx<'_>,
        received: bool,
    ) {
        let d = match &new {
            Some(_) => self.dests.entry(&k),
            None => match self.dests.get_mut(&k) {
                Some(d) => d,
                None => return,
            },
        };
        let old_best = d.best_id();
        let pos = d.paths.iter().position(|p| p.peer == peer);
        let c = counts.entry(peer).or_default();
        if pos.is_some() || new.is_some() {
            c.changes += 1;
        }
        if let (true, Some(i), Some(n)) = (received, pos, &new) {
            let o = &d.paths[i];
            if o.flags & STALE == 0 && Arc::ptr_eq(&o.pre, &n.pre) {
                c.duplicates += 1;
            }
        }
        if self.watch_post {
            let old_post = pos.and_then(|i| d.paths[i].post.as_ref());
            let new_post = new.as_ref().and_then(|n| n.post.as_ref());
            if !same_post(old_post, new_post) {
                self.post_log.push((k, peer, new_post.cloned()));
            }
        }
        match (pos, new) {
            (Some(i), Some(n)) => {
                c.add(&d.paths[i], -1);
                c.add(&n, 1);
                d.paths[i] = n;
            }
            (Some(i), None) => {
                c.add(&d.paths[i], -1);
                d.paths.remove(i);
            }
            (None, Some(n)) => {
                c.add(&n, 1);
                d.paths.push(n);
            }
            (None, None) => return,
        }
        if d.paths.is_empty() {
            self.dests.remove(&k);
            if old_best.is_some() {
                self.with_best -= 1;
                self.dirty.push(k);
                if ctx.fib_ecmp > 0 {
                    self.fib_dirty.push(k);
                }
            }
            return;
        }
        d.reselect(ctx);
        let new_best = d.best_id();
        match (old_best.is_some(), new_best.is_some()) {
            (false, true) => self.with_best += 1,
            (true, false) => self.with_best -= 1,
            _ => {}
        }
        let changed = new_best != old_best;
        if changed {
            self.dirty.push(k);
        }
        // With ECMP a change of any path may change the equal-cost set.
        if ctx.fib_ecmp > 1 || (changed && ctx.fib_ecmp > 0) {
            self.fib_dirty.push(k);
        }
    }

    /// Applies `f` to every path of `peer`; `f` returns the replacement
    /// (None removes). Prefixes whose best changed become dirty.
    pub(crate) fn map_peer(
        &mut self,
        counts: &mut FxMap<PeerId, Counts>,
        peer: PeerId,
        ctx: &DecisionCtx<'_>,
        mut f: impl FnMut(K, &Path) -> Option<Option<Path>>,
    ) {
        self.map_where(
            counts,
            ctx,
            |_| true,
            |k, p| {
                if p.peer == peer {
                    f(k, p)
                } else {
                    None
                }
            },
        );
    }

    /// Applies `f` to every path of every prefix `want` selects; `f`
    /// returns the replacement (None removes). Prefixes whose best changed
    /// become dirty.
    pub(crate) fn map_where(
        &mut self,
        counts: &mut FxMap<PeerId, Counts>,
        ctx: &DecisionCtx<'_>,
        want: impl Fn(K) -> bool,
        mut f: impl FnMut(K, &Path) -> Option<Option<Path>>,
    ) {
        let mut todo: Vec<(K, PeerId, Option<Path>)> = Vec::new();
        self.dests.visit(|k, d| {
            if want(k) {
                for p in &d.paths {
                    if let Some(r) = f(k, p) {
                        todo.push((k, p.peer, r));
                    }
                }
            }
        });
        todo.sort_by_key(|a| (a.0, a.1));
        for (k, peer, r) in todo {
            self.change(counts, k, peer, r, ctx, false);
        }
    }

    /// Exports the dirty prefixes (or `all`: every prefix known to the
    /// Loc-RIB or to the targets' Adj-RIB-Out) to the targets; returns each
    /// target's changes and updates its Adj-RIB-Out fingerprints.
    pub(crate) fn export(&mut self, env: &ExportEnv<'_>, all: bool) -> Vec<Changes> {
        if self.watch {
            self.note_best();
        }
        let mut keys: Vec<K> = if all {
            let mut ks = self.dests.keys();
            for (peer, _) in env.targets {
                if let Some(o) = self.out.get(peer) {
                    ks.extend(o.keys());
                }
            }
            ks.sort();
            ks.dedup();
            self.dirty.clear();
            ks
        } else {
            std::mem::take(&mut self.dirty)
        };
        if env.targets.is_empty() || keys.is_empty() {
            keys.clear();
            self.dirty = keys;
            return Vec::new();
        }
        let mut res: Vec<Changes> = env.targets.iter().map(|_| Changes::default()).collect();
        let mut cache = OutCache::default();
        let mut per_group: Vec<Out> = vec![None; env.groups.len()];
        // A group that exports nothing (`export = "none"`), and each of its
        // targets that holds nothing from this table, need no visit per
        // prefix: nothing can change for them (a route server's many
        // receive-only sessions cost nothing here).
        let silent: Vec<bool> = env
            .groups
            .iter()
            .map(|g| matches!(g.policy, PolicyRef::None))
            .collect();
        let idle: Vec<bool> = env
            .targets
            .iter()
            .map(|(peer, g)| silent[*g] && self.out.get(peer).is_none_or(|o| o.size() == 0))
            .collect();
        for &k in &keys {
            let best = self
                .dests
                .get(&k)
                .and_then(|d| d.best())
                .map(|(p, a)| (p.peer, a.clone()));
            if let Some((src, a)) = &best {
                for (g, slot) in per_group.iter_mut().enumerate() {
                    *slot = if silent[g] {
                        None
                    } else {
                        export_one(env, &mut cache, g, *src, k.prefix(), a)
                    };
                }
            }
            for (ti, (peer, g)) in env.targets.iter().enumerate() {
                if idle[ti] {
                    continue;
                }
                let want = match &best {
                    Some((src, _)) if src != peer => per_group[*g].as_ref(),
                    _ => None,
                };
                let out = self.out.entry(*peer).or_default();
                match want {
                    None => {
                        if out.remove(&k).is_some() {
                            K::push(&mut res[ti], k, None);
                        }
                    }
                    Some(a) => {
                        if out.insert(&k, a.hash) != Some(a.hash) {
                            K::push(&mut res[ti], k, Some(a.clone()));
                        }
                    }
                }
            }
        }
        if !all {
            keys.clear();
            self.dirty = keys;
        }
        res
    }

    /// Notes the best path of each dirty prefix (once per prefix) in
    /// `best_log`, before the export pass consumes them. The dirty list is
    /// deduplicated in place: the export pass does not depend on its order,
    /// and visits each prefix once instead of once per change.
    fn note_best(&mut self) {
        self.dirty.sort_unstable();
        self.dirty.dedup();
        for &k in &self.dirty {
            let best = self
                .dests
                .get(&k)
                .and_then(|d| d.best())
                .map(|(p, a)| (p.peer, a.clone()));
            self.best_log.push((k, best));
        }
    }

    /// Current export of `k` for one target (for queries and refresh).
    pub(crate) fn current_export(
        &self,
        k: K,
        peer: PeerId,
        p: &ExportParams,
        facts: &FxMap<PeerId, SrcFacts>,
    ) -> Option<PathAttrs> {
        let (src, a) = self.dests.get(&k)?.best()?;
        if src.peer == peer {
            return None;
        }
        export_route(p, facts.get(&src.peer)?, &k.prefix(), a.to_path_attrs())
    }
}
