//! The [`Engine`]: peer bookkeeping and the parallel batch pipeline.

use std::borrow::{Borrow, Cow};
use std::collections::BTreeMap;
use std::net::Ipv4Addr;
use std::sync::Arc;

use holdfast_wire::{
    Afi, Family, Notification, Origin, PathAttrs, Prefix, Prefix4, Prefix6, Update,
};
use rayon::prelude::*;

use crate::attrs::Attrs;
use crate::codec::{self, CodecCtx, Rfc7606Action};
use crate::decision::{DecisionCtx, SrcFacts};
use crate::export::{encode_changes, Changes, ExportParams, OutAttrs};
use crate::intern::{FxMap, Interner};
use crate::policy::{PolicyCtx, PolicyRef, PolicyVerdict};
use crate::rib::{shard_of4, shard_of6, Counts, Key, Path, Shard, Tables, STALE};
use crate::{EngineConfig, Output, PeerId, PeerSpec, LOCAL_PEER};
use holdfast_rtr::VrpTable;

mod fib;
mod groups;
mod query;
mod rpki;
mod watch;

pub use rpki::RpkiCounts;
pub use watch::{BestChange, PostChange};

const WITHDRAW: u32 = u32::MAX;

/// Largest number of UPDATEs processed as one unit by `apply_raw`.
const SUB_BATCH: usize = 2048;

/// Batches carrying fewer UPDATE bytes than this run on the calling thread
/// (same results): below it, waking the pool costs more than it saves.
const PAR_MIN_BYTES: usize = 64 * 1024;

/// UPDATEs of one peer decoded as one parallel task.
const DECODE_CHUNK: usize = 64;

struct PeerState {
    spec: PeerSpec,
    up: bool,
}

/// One routing instance's RIBs.
pub struct Engine {
    cfg: EngineConfig,
    peers: BTreeMap<PeerId, PeerState>,
    shards: Vec<Shard>,
    interner: Interner,
    pool: Option<rayon::ThreadPool>,
    /// False while handling a batch too small to be worth parallel dispatch.
    par: bool,
    sweep_base: usize,
    /// Per peer: routes of its Adj-RIB-Out set, replaced or removed since
    /// [`Engine::reset_route_changes`] (see [`Engine::route_changes`]).
    out_changes: FxMap<PeerId, u64>,
    /// Per peer: prefixes announced to us that import policy rejected (BMP
    /// statistics type 0), since the peer was added.
    policy_rejected: FxMap<PeerId, u64>,
    /// The VRPs routes are validated against (`Engine::set_vrps`).
    rpki: Option<Arc<VrpTable>>,
}

/// An UPDATE as handed to the engine.
enum Input {
    Raw(Vec<u8>),
    Decoded(Box<Update>),
}

/// Result of the per-peer decode + import phase.
struct PeerBatch {
    peer: PeerId,
    /// (pre-policy, post-policy) attribute pairs referenced by the ops.
    sets: Vec<(Arc<Attrs>, Option<Arc<Attrs>>)>,
    ops4: Vec<Vec<(Prefix4, u32)>>,
    ops6: Vec<Vec<(Prefix6, u32)>>,
    eor: Vec<Family>,
    reset: Option<Notification>,
    warnings: Vec<String>,
    /// Announced prefixes the import policy rejected.
    policy_rejected: u64,
}

/// Read-only facts shared by the import phase.
struct ImportEnv<'a> {
    cfg: &'a EngineConfig,
    interner: &'a Interner,
    shards: &'a [Shard],
    /// The VRPs of RFC 6811 validation (`Match::Rpki`).
    rpki: Option<&'a VrpTable>,
}

/// Runs `f` on every shard (in parallel when a pool exists); results are
/// returned in shard order.
fn for_shards<R: Send>(
    pool: Option<&rayon::ThreadPool>,
    shards: &mut [Shard],
    f: impl Fn(usize, &mut Shard) -> R + Sync + Send,
) -> Vec<R> {
    match pool {
        Some(p) => p.install(|| {
            shards
                .par_iter_mut()
                .enumerate()
                .map(|(i, s)| f(i, s))
                .collect()
        }),
        None => shards
            .iter_mut()
            .enumerate()
            .map(|(i, s)| f(i, s))
            .collect(),
    }
}

fn import_ctx<'r>(spec: &PeerSpec, rpki: Option<&'r VrpTable>) -> PolicyCtx<'r> {
    PolicyCtx {
        local_as: spec.local_as,
        next_hop_v4: spec.local_addr_v4,
        next_hop_v6: spec.local_addr_v6,
        rpki,
    }
}

fn has_family(spec: &PeerSpec, afi: Afi) -> bool {
    spec.families.iter().any(|f| f.afi == afi)
}

impl ImportEnv<'_> {
    fn cluster_id(&self) -> Ipv4Addr {
        self.cfg.cluster_id.unwrap_or(self.cfg.router_id)
    }

    /// Route-independent import checks (AS loop, RFC 4456 loops) and the
    /// eBGP LOCAL_PREF rule (ignored when received from an external peer).
    fn sanitize<'a>(
        &self,
        spec: &PeerSpec,
        pre: &'a PathAttrs,
    ) -> Result<Cow<'a, PathAttrs>, &'static str> {
        if pre.as_path.contains(spec.local_as)
            || (self.cfg.local_as != spec.local_as && pre.as_path.contains(self.cfg.local_as))
        {
            return Err("AS loop");
        }
        if pre.originator_id == Some(self.cfg.router_id) {
            return Err("ORIGINATOR_ID loop");
        }
        if pre.cluster_list.contains(&self.cluster_id()) {
            return Err("CLUSTER_LIST loop");
        }
        if spec.is_ebgp() && pre.local_pref.is_some() {
            let mut a = pre.clone();
            a.local_pref = None;
            return Ok(Cow::Owned(a));
        }
        Ok(Cow::Borrowed(pre))
    }

    /// Import policy over the sanitized attributes; `pre` is the interned
    /// Adj-RIB-In form, reused when nothing changed.
    fn policy(
        &self,
        spec: &PeerSpec,
        prefix: &Prefix,
        base: &PathAttrs,
        unchanged: bool,
        pre: &Arc<Attrs>,
    ) -> Option<Arc<Attrs>> {
        match spec
            .import
            .evaluate_ext(prefix, base, &import_ctx(spec, self.rpki))
            .0
        {
            PolicyVerdict::Reject => None,
            PolicyVerdict::Accept(Cow::Borrowed(_)) if unchanged => Some(pre.clone()),
            PolicyVerdict::Accept(a) => Some(self.interner.intern(Attrs::from_path_attrs(&a))),
        }
    }

    /// Full import of one prefix (used by soft reconfiguration).
    fn import(&self, spec: &PeerSpec, prefix: &Prefix, pre: &Arc<Attrs>) -> Option<Arc<Attrs>> {
        let full = pre.to_path_attrs();
        let base = self.sanitize(spec, &full).ok()?;
        self.policy(spec, prefix, &base, matches!(base, Cow::Borrowed(_)), pre)
    }

    /// Soft reconfiguration of one stored path: `Some(path)` with its
    /// post-policy result evaluated again when that result changed, `None`
    /// when it did not (for `Tables::map_peer` / `map_where`).
    fn reimport(&self, spec: &PeerSpec, prefix: Prefix, p: &Path) -> Option<Option<Path>> {
        let post = self.import(spec, &prefix, &p.pre);
        (!crate::rib::same_post(post.as_ref(), p.post.as_ref()))
            .then(|| Some(Path { post, ..p.clone() }))
    }

    /// Import of an UPDATE whose policy does not depend on the prefix: one
    /// evaluation for all its prefixes, attributes moved, not copied.
    fn import_shared(
        &self,
        spec: &PeerSpec,
        attrs: PathAttrs,
        announced: &[Prefix],
        b: &mut PeerBatch,
        ops: &mut Vec<(Prefix, u32)>,
        rejected: &mut [usize; 4],
    ) {
        let verdict = match self.sanitize(spec, &attrs) {
            Err(why) => Err(why),
            Ok(base) => {
                let unchanged = matches!(base, Cow::Borrowed(_));
                Ok(
                    match spec
                        .import
                        .evaluate_ext(&announced[0], &base, &import_ctx(spec, self.rpki))
                        .0
                    {
                        PolicyVerdict::Reject => None,
                        PolicyVerdict::Accept(Cow::Borrowed(_)) if unchanged => Some(None),
                        PolicyVerdict::Accept(a) => Some(Some(Attrs::from_owned(a.into_owned()))),
                    },
                )
            }
        };
        let pre = self.interner.intern(Attrs::from_owned(attrs));
        let post = match verdict {
            Err(why) => {
                rejected[reject_index(why)] += announced.len();
                None
            }
            Ok(None) => {
                b.policy_rejected += announced
                    .iter()
                    .filter(|p| has_family(spec, p.afi()))
                    .count() as u64;
                None
            }
            Ok(Some(None)) => Some(pre.clone()),
            Ok(Some(Some(a))) => Some(self.interner.intern(a)),
        };
        b.sets.push((pre, post));
        let idx = (b.sets.len() - 1) as u32;
        for p in announced {
            if has_family(spec, p.afi()) {
                ops.push((*p, idx));
            } else {
                rejected[3] += 1;
            }
        }
    }

    /// Import with a prefix-dependent policy: one evaluation per prefix.
    fn import_per_prefix(
        &self,
        spec: &PeerSpec,
        attrs: PathAttrs,
        announced: &[Prefix],
        b: &mut PeerBatch,
        ops: &mut Vec<(Prefix, u32)>,
        rejected: &mut [usize; 4],
    ) {
        let pre = self.interner.intern(Attrs::from_path_attrs(&attrs));
        let base = match self.sanitize(spec, &attrs) {
            Ok(base) => base,
            Err(why) => {
                rejected[reject_index(why)] += announced.len();
                b.sets.push((pre, None));
                let idx = (b.sets.len() - 1) as u32;
                ops.extend(
                    announced
                        .iter()
                        .filter(|p| has_family(spec, p.afi()))
                        .map(|p| (*p, idx)),
                );
                return;
            }
        };
        let unchanged = matches!(base, Cow::Borrowed(_));
        for p in announced {
            if !has_family(spec, p.afi()) {
                rejected[3] += 1;
                continue;
            }
            let post = self.policy(spec, p, &base, unchanged, &pre);
            b.policy_rejected += post.is_none() as u64;
            let same_as_last = b.sets.last().is_some_and(|(lp, lpost)| {
                Arc::ptr_eq(lp, &pre)
                    && match (lpost, &post) {
                        (None, None) => true,
                        (Some(x), Some(y)) => Arc::ptr_eq(x, y),
                        _ => false,
                    }
            });
            if !same_as_last {
                b.sets.push((pre.clone(), post));
            }
            ops.push((*p, (b.sets.len() - 1) as u32));
        }
    }

    /// Was `peer`'s path for `p` accepted before this batch?
    fn accepted_now(&self, peer: PeerId, p: &Prefix) -> bool {
        let n = self.shards.len();
        let d = match p {
            Prefix::V4(k) => crate::rib::PMap::get(&self.shards[shard_of4(k, n)].v4.dests, k),
            Prefix::V6(k) => crate::rib::PMap::get(&self.shards[shard_of6(k, n)].v6.dests, k),
        };
        d.and_then(|d| d.paths.iter().find(|x| x.peer == peer))
            .is_some_and(|x| x.post.is_some())
    }

    fn accepted_total(&self, peer: PeerId) -> i64 {
        self.shards
            .iter()
            .filter_map(|s| s.counts.get(&peer))
            .map(|c| c.accepted)
            .sum()
    }

    /// Decode + Adj-RIB-In + import policy for one peer's updates.
    fn peer_batch(&self, spec: &PeerSpec, inputs: Vec<Input>) -> PeerBatch {
        let n = self.shards.len();
        let mut b = PeerBatch {
            peer: spec.id,
            sets: Vec::new(),
            ops4: vec![Vec::new(); n],
            ops6: vec![Vec::new(); n],
            eor: Vec::new(),
            reset: None,
            warnings: Vec::new(),
            policy_rejected: 0,
        };
        let ctx = CodecCtx {
            four_octet_as: spec.four_octet_as,
            ibgp: !spec.is_ebgp(),
        };
        let mut limit = spec.max_prefix.map(|l| {
            (
                l,
                self.accepted_total(spec.id),
                FxMap::<Prefix, bool>::default(),
            )
        });
        let mut rejected: [usize; 4] = [0; 4];
        let per_prefix = spec.import.prefix_dependent();
        'msgs: for input in inputs {
            let u = match input {
                Input::Decoded(u) => *u,
                Input::Raw(body) => match codec::decode_update(&body, &ctx) {
                    Ok(o) => {
                        if o.action != Rfc7606Action::None {
                            let why = o.reason.clone().unwrap_or_default();
                            b.warnings.push(format!("RFC 7606 {:?}: {why}", o.action));
                        }
                        o.update
                    }
                    Err(e) => {
                        b.reset = Some(e.to_notification());
                        b.warnings.push(format!("UPDATE decode error: {e}"));
                        break 'msgs;
                    }
                },
            };
            if let Some(f) = u.end_of_rib {
                b.eor.push(f);
            }
            let mut ops: Vec<(Prefix, u32)> = u.withdrawn.iter().map(|p| (*p, WITHDRAW)).collect();
            if let (Some(attrs), false) = (u.attrs, u.announced.is_empty()) {
                if per_prefix {
                    self.import_per_prefix(
                        spec,
                        attrs,
                        &u.announced,
                        &mut b,
                        &mut ops,
                        &mut rejected,
                    );
                } else {
                    self.import_shared(spec, attrs, &u.announced, &mut b, &mut ops, &mut rejected);
                }
            }
            for (p, idx) in ops {
                if let Some((lim, count, seen)) = &mut limit {
                    let now = idx != WITHDRAW && b.sets[idx as usize].1.is_some();
                    let before = match seen.get(&p) {
                        Some(v) => *v,
                        None => self.accepted_now(spec.id, &p),
                    };
                    let next = *count + now as i64 - before as i64;
                    if next > *lim as i64 {
                        let mut data = p.afi().code().to_be_bytes().to_vec();
                        data.push(1);
                        data.extend_from_slice(&lim.to_be_bytes());
                        b.reset = Some(Notification {
                            code: 6,
                            subcode: 1,
                            data,
                        });
                        b.warnings
                            .push(format!("maximum prefix limit {lim} exceeded"));
                        break 'msgs;
                    }
                    *count = next;
                    seen.insert(p, now);
                }
                match p {
                    Prefix::V4(k) => b.ops4[shard_of4(&k, n)].push((k, idx)),
                    Prefix::V6(k) => b.ops6[shard_of6(&k, n)].push((k, idx)),
                }
            }
        }
        let names = [
            "AS loop",
            "ORIGINATOR_ID loop",
            "CLUSTER_LIST loop",
            "family not negotiated",
        ];
        for (i, c) in rejected.iter().enumerate() {
            if *c > 0 {
                b.warnings
                    .push(format!("{c} prefixes rejected: {}", names[i]));
            }
        }
        b
    }
}

/// Index into the per-batch rejection counters for a sanitize failure.
fn reject_index(why: &str) -> usize {
    match why {
        "AS loop" => 0,
        "ORIGINATOR_ID loop" => 1,
        _ => 2,
    }
}

fn apply_ops<K: Key>(
    t: &mut Tables<K>,
    counts: &mut FxMap<PeerId, Counts>,
    b: &PeerBatch,
    ops: &[(K, u32)],
    ctx: &DecisionCtx<'_>,
) {
    for (k, idx) in ops {
        let new = if *idx == WITHDRAW {
            None
        } else {
            let (pre, post) = &b.sets[*idx as usize];
            Some(Path {
                peer: b.peer,
                flags: 0,
                pre: pre.clone(),
                post: post.clone(),
            })
        };
        t.change(counts, *k, b.peer, new, ctx, true);
    }
}

fn mark_stale<K>(_: K, p: &Path) -> Option<Option<Path>> {
    (p.flags & STALE == 0).then(|| {
        Some(Path {
            flags: p.flags | STALE,
            ..p.clone()
        })
    })
}

fn sweep_stale<K: Key>(
    t: &mut Tables<K>,
    counts: &mut FxMap<PeerId, Counts>,
    peer: PeerId,
    ctx: &DecisionCtx<'_>,
) {
    t.map_peer(counts, peer, ctx, |_, p| {
        if p.flags & STALE != 0 {
            Some(None)
        } else {
            None
        }
    });
}

impl Engine {
    pub fn new(cfg: EngineConfig) -> Self {
        let threads = cfg.threads.max(1);
        let pool = if threads > 1 {
            rayon::ThreadPoolBuilder::new()
                .num_threads(threads)
                .build()
                .ok()
        } else {
            None
        };
        let shards = (0..cfg.shards.max(1)).map(|_| Shard::default()).collect();
        Engine {
            cfg,
            peers: BTreeMap::new(),
            shards,
            interner: Interner::default(),
            pool,
            par: true,
            sweep_base: 0,
            out_changes: FxMap::default(),
            policy_rejected: FxMap::default(),
            rpki: None,
        }
    }

    /// Register a configured neighbour (down). Idempotent.
    pub fn add_peer(&mut self, spec: PeerSpec) {
        match self.peers.get_mut(&spec.id) {
            Some(p) => p.spec = spec,
            None => {
                self.peers.insert(spec.id, PeerState { spec, up: false });
            }
        }
    }

    fn cluster_id(&self) -> Ipv4Addr {
        self.cfg.cluster_id.unwrap_or(self.cfg.router_id)
    }

    fn params(&self, spec: &PeerSpec) -> ExportParams {
        ExportParams {
            ebgp: spec.is_ebgp(),
            local_as: spec.local_as,
            nh4: spec.local_addr_v4,
            nh6: spec.local_addr_v6,
            nh6_ll: spec.local_addr_v6_ll,
            four_octet_as: spec.four_octet_as,
            families: spec.families.clone(),
            rr_client: spec.rr_client,
            next_hop_self: spec.next_hop_self,
            policy: spec.export.clone(),
            cluster_id: self.cluster_id(),
            default_lp: self.cfg.default_local_pref,
        }
    }

    fn facts(&self) -> FxMap<PeerId, SrcFacts> {
        let mut m: FxMap<PeerId, SrcFacts> = self
            .peers
            .iter()
            .map(|(id, p)| {
                let s = &p.spec;
                (
                    *id,
                    SrcFacts {
                        ebgp: s.is_ebgp(),
                        local: false,
                        rr_client: s.rr_client,
                        router_id: s.router_id,
                        addr: s.address,
                    },
                )
            })
            .collect();
        m.insert(LOCAL_PEER, SrcFacts::local(self.cfg.router_id));
        m
    }

    /// Update groups and targets: every Established peer, or only `only`.
    fn targets(&self, only: Option<PeerId>) -> (Vec<ExportParams>, Vec<(PeerId, usize)>) {
        let mut groups: Vec<ExportParams> = Vec::new();
        let mut keys = Vec::new();
        let mut targets = Vec::new();
        for (id, p) in &self.peers {
            if !p.up || only.is_some_and(|o| o != *id) {
                continue;
            }
            let params = self.params(&p.spec);
            let key = params.key();
            let g = match keys.iter().position(|k| *k == key) {
                Some(g) => g,
                None => {
                    keys.push(key);
                    groups.push(params);
                    groups.len() - 1
                }
            };
            targets.push((*id, g));
        }
        (groups, targets)
    }

    /// Runs `mutate` on every shard, then exports (dirty prefixes, or all
    /// with `full`) to `only` or every Established peer, and encodes.
    fn pass(
        &mut self,
        only: Option<PeerId>,
        full: bool,
        mutate: impl Fn(usize, &mut Shard, &DecisionCtx<'_>) + Sync + Send,
    ) -> Output {
        let facts = self.facts();
        let (groups, targets) = self.targets(only);
        let ctx = DecisionCtx {
            peers: &facts,
            local_as: self.cfg.local_as,
            always_compare_med: self.cfg.always_compare_med,
            default_lp: self.cfg.default_local_pref,
            fib_ecmp: self.cfg.fib_ecmp,
        };
        let env = crate::rib::ExportEnv {
            groups: &groups,
            targets: &targets,
            facts: &facts,
        };
        let pool = self.pool.as_ref().filter(|_| self.par);
        let per_shard = for_shards(pool, &mut self.shards, |i, s| {
            mutate(i, s, &ctx);
            let mut a = s.v4.export(&env, full);
            let b = s.v6.export(&env, full);
            if a.is_empty() {
                return b;
            }
            for (x, y) in a.iter_mut().zip(b) {
                x.append(y);
            }
            a
        });
        for shard in &per_shard {
            for ((peer, _), ch) in targets.iter().zip(shard) {
                let n = (ch.v4.len() + ch.v6.len()) as u64;
                if n > 0 {
                    *self.out_changes.entry(*peer).or_default() += n;
                }
            }
        }
        let out = self.encode(&targets, per_shard);
        self.maybe_sweep();
        out
    }

    /// Concatenates per-shard changes per target and encodes them, sharing
    /// the bytes between peers of one update group with equal changes.
    fn encode(&self, targets: &[(PeerId, usize)], per_shard: Vec<Vec<Changes>>) -> Output {
        let mut per_target: Vec<Changes> = targets.iter().map(|_| Changes::default()).collect();
        for shard in per_shard {
            for (t, c) in per_target.iter_mut().zip(shard) {
                t.append(c);
            }
        }
        // Distinct (group, changes) lists; targets point at one of them.
        let mut reps: Vec<usize> = Vec::new();
        let mut rep_of: Vec<usize> = Vec::with_capacity(targets.len());
        for (i, (_, g)) in targets.iter().enumerate() {
            let found = reps
                .iter()
                .position(|&r| targets[r].1 == *g && per_target[r].same_as(&per_target[i]));
            match found {
                Some(j) => rep_of.push(j),
                None => {
                    reps.push(i);
                    rep_of.push(reps.len() - 1);
                }
            }
        }
        let pool = self.pool();
        let enc = |&r: &usize| {
            let mut buf = Vec::new();
            encode_changes(&per_target[r], pool.is_some(), &mut buf);
            Arc::new(buf)
        };
        let encoded: Vec<Arc<Vec<u8>>> = match pool {
            Some(p) => p.install(|| reps.par_iter().map(enc).collect()),
            None => reps.iter().map(enc).collect(),
        };
        let mut out = Output::default();
        for (i, (peer, _)) in targets.iter().enumerate() {
            let bytes = &encoded[rep_of[i]];
            if !bytes.is_empty() {
                out.messages.push((*peer, bytes.clone()));
            }
        }
        out
    }

    fn maybe_sweep(&mut self) {
        if self.interner.table_len() > 2 * self.sweep_base + 4096 {
            self.sweep_base = self.interner.sweep();
        }
    }

    /// Session reached Established: store the negotiated facts and return
    /// the full initial table export followed by End-of-RIB per family.
    pub fn peer_up(&mut self, spec: PeerSpec) -> Output {
        let id = spec.id;
        self.peers.insert(id, PeerState { spec, up: true });
        for s in &mut self.shards {
            s.v4.out.remove(&id);
            s.v6.out.remove(&id);
        }
        self.reset_route_changes(id);
        let mut out = self.pass(Some(id), true, |_, _, _| {});
        let mut fams = self.peers[&id].spec.families.clone();
        fams.sort();
        fams.dedup();
        let mut eor = Vec::new();
        for f in fams {
            codec::encode_end_of_rib(f, &mut eor);
        }
        match out.messages.iter_mut().find(|(p, _)| *p == id) {
            Some((_, m)) => Arc::make_mut(m).extend_from_slice(&eor),
            None if !eor.is_empty() => out.messages.push((id, Arc::new(eor))),
            None => {}
        }
        out
    }

    /// Session went down. `graceful` (RFC 4724 helper): keep its routes as
    /// stale until End-of-RIB or [`Self::stale_timeout`]; otherwise withdraw
    /// them everywhere.
    pub fn peer_down(&mut self, id: PeerId, graceful: bool) -> Output {
        let Some(p) = self.peers.get_mut(&id) else {
            return Output::default();
        };
        p.up = false;
        for s in &mut self.shards {
            s.v4.out.remove(&id);
            s.v6.out.remove(&id);
        }
        if graceful {
            self.pass(None, false, move |_, s, ctx| {
                let Shard { v4, v6, counts } = s;
                v4.map_peer(counts, id, ctx, mark_stale);
                v6.map_peer(counts, id, ctx, mark_stale);
            })
        } else {
            self.pass(None, false, move |_, s, ctx| {
                let Shard { v4, v6, counts } = s;
                v4.map_peer(counts, id, ctx, |_, _| Some(None));
                v6.map_peer(counts, id, ctx, |_, _| Some(None));
            })
        }
    }

    /// Restart timer expired: flush the peer's remaining stale routes.
    pub fn stale_timeout(&mut self, id: PeerId) -> Output {
        self.pass(None, false, move |_, s, ctx| {
            let Shard { v4, v6, counts } = s;
            sweep_stale(v4, counts, id, ctx);
            sweep_stale(v6, counts, id, ctx);
        })
    }

    /// Forget a neighbour, withdrawing its routes.
    pub fn remove_peer(&mut self, id: PeerId) -> Output {
        let out = self.peer_down(id, false);
        self.peers.remove(&id);
        for s in &mut self.shards {
            s.counts.remove(&id);
        }
        self.out_changes.remove(&id);
        self.policy_rejected.remove(&id);
        out
    }

    /// Policy change: re-evaluate import from the stored Adj-RIB-In and
    /// re-export; only differences are sent.
    pub fn set_policies(&mut self, id: PeerId, import: PolicyRef, export: PolicyRef) -> Output {
        let Some(p) = self.peers.get_mut(&id) else {
            return Output::default();
        };
        p.spec.import = import;
        p.spec.export = export;
        let spec = p.spec.clone();
        let up = p.up;
        let interner = std::mem::take(&mut self.interner);
        let rpki = self.rpki.clone();
        let mut out = {
            let cfg = self.cfg.clone();
            let env = ImportEnv {
                cfg: &cfg,
                interner: &interner,
                shards: &[],
                rpki: rpki.as_deref(),
            };
            let reimport = |k: Prefix, p: &Path| env.reimport(&spec, k, p);
            self.pass(None, false, |_, s, ctx| {
                let Shard { v4, v6, counts } = s;
                v4.map_peer(counts, id, ctx, |k, p| reimport(k.prefix(), p));
                v6.map_peer(counts, id, ctx, |k, p| reimport(k.prefix(), p));
            })
        };
        self.interner = interner;
        if up {
            out.merge(self.pass(Some(id), true, |_, _, _| {}));
        }
        out
    }

    /// THE hot path: raw UPDATE bodies (after the 19-byte header), in
    /// arrival order per peer.
    pub fn apply_raw(&mut self, batch: Vec<(PeerId, Vec<u8>)>) -> Output {
        self.apply_inputs(batch.into_iter().map(|(p, b)| (p, Input::Raw(b))).collect())
    }

    /// Decoded form of [`Self::apply_raw`].
    pub fn apply(&mut self, batch: Vec<(PeerId, Update)>) -> Output {
        self.apply_inputs(
            batch
                .into_iter()
                .map(|(p, u)| (p, Input::Decoded(Box::new(u))))
                .collect(),
        )
    }

    /// Splits very large batches into consecutive sub-batches of
    /// [`SUB_BATCH`] UPDATEs, bounding transient memory. Each sub-batch's
    /// output is complete and ordered, so the concatenation leaves every
    /// prefix in its final state; a peer reset in one sub-batch drops its
    /// UPDATEs from the following ones.
    fn apply_inputs(&mut self, batch: Vec<(PeerId, Input)>) -> Output {
        if batch.len() <= SUB_BATCH {
            return self.apply_chunk(batch);
        }
        let mut out = Output::default();
        let mut it = batch.into_iter().peekable();
        while it.peek().is_some() {
            let chunk: Vec<(PeerId, Input)> = it
                .by_ref()
                .take(SUB_BATCH)
                .filter(|(p, _)| !out.resets.iter().any(|(r, _)| r == p))
                .collect();
            let o = self.apply_chunk(chunk);
            out.merge(o);
        }
        out
    }

    fn apply_chunk(&mut self, batch: Vec<(PeerId, Input)>) -> Output {
        let work: usize = batch
            .iter()
            .map(|(_, i)| match i {
                Input::Raw(b) => b.len(),
                Input::Decoded(u) => 4 * (u.announced.len() + u.withdrawn.len()) + 32,
            })
            .sum();
        self.par = work >= PAR_MIN_BYTES;
        let out = self.apply_chunk_inner(batch);
        self.par = true;
        out
    }

    /// The pool to use for the current call, if any.
    fn pool(&self) -> Option<&rayon::ThreadPool> {
        self.pool.as_ref().filter(|_| self.par)
    }

    fn apply_chunk_inner(&mut self, batch: Vec<(PeerId, Input)>) -> Output {
        let mut order: Vec<(PeerId, Vec<Input>)> = Vec::new();
        let mut idx: FxMap<PeerId, usize> = FxMap::default();
        let mut out = Output::default();
        for (peer, i) in batch {
            match self.peers.get(&peer) {
                Some(p) if p.up => {}
                _ => {
                    if !out.warnings.iter().any(|(p, _)| *p == peer) {
                        out.warnings.push((
                            peer,
                            "UPDATEs from a peer that is not established ignored".into(),
                        ));
                    }
                    continue;
                }
            }
            let k = *idx.entry(peer).or_insert_with(|| {
                order.push((peer, Vec::new()));
                order.len() - 1
            });
            order[k].1.push(i);
        }
        // Work items: a peer's messages, split in ordered chunks when the
        // pool can use them (not with max-prefix, whose count is sequential).
        let mut work_items: Vec<(PeerId, Vec<Input>)> = Vec::new();
        // Chunking never depends on the thread count, so neither do results.
        for (peer, inputs) in order {
            let chunk = if self.peers[&peer].spec.max_prefix.is_none() {
                DECODE_CHUNK
            } else {
                usize::MAX
            };
            if inputs.len() <= chunk {
                work_items.push((peer, inputs));
                continue;
            }
            let mut it = inputs.into_iter().peekable();
            while it.peek().is_some() {
                work_items.push((peer, it.by_ref().take(chunk).collect()));
            }
        }
        let import_started = std::time::Instant::now();
        let batches: Vec<PeerBatch> = {
            let env = ImportEnv {
                cfg: &self.cfg,
                interner: &self.interner,
                shards: &self.shards,
                rpki: self.rpki.as_deref(),
            };
            let peers = &self.peers;
            let work =
                |(peer, inputs): (PeerId, Vec<Input>)| env.peer_batch(&peers[&peer].spec, inputs);
            match self.pool() {
                Some(p) => p.install(|| work_items.into_par_iter().map(work).collect()),
                None => work_items.into_iter().map(work).collect(),
            }
        };
        // A session reset drops that peer's later chunks.
        let mut dead: Vec<PeerId> = Vec::new();
        let batches: Vec<PeerBatch> = batches
            .into_iter()
            .filter(|b| {
                if dead.contains(&b.peer) {
                    return false;
                }
                if b.reset.is_some() {
                    dead.push(b.peer);
                }
                true
            })
            .collect();
        for b in &batches {
            if b.policy_rejected > 0 {
                *self.policy_rejected.entry(b.peer).or_default() += b.policy_rejected;
            }
            if let Some(n) = &b.reset {
                out.resets.push((b.peer, n.clone()));
            }
            out.warnings
                .extend(b.warnings.iter().map(|w| (b.peer, w.clone())));
        }
        out.timing.import += import_started.elapsed();
        let decision_started = std::time::Instant::now();
        let batches = &batches;
        let res = self.pass(None, false, |si, s, ctx| {
            let Shard { v4, v6, counts } = s;
            for b in batches {
                apply_ops(v4, counts, b, &b.ops4[si], ctx);
                apply_ops(v6, counts, b, &b.ops6[si], ctx);
                for f in &b.eor {
                    match f.afi {
                        Afi::Ipv4 => sweep_stale(v4, counts, b.peer, ctx),
                        Afi::Ipv6 => sweep_stale(v6, counts, b.peer, ctx),
                    }
                }
            }
        });
        out.merge(res);
        out.timing.decision += decision_started.elapsed();
        out
    }

    /// ROUTE-REFRESH: re-send the peer's whole Adj-RIB-Out for `family`,
    /// followed by End-of-RIB.
    pub fn route_refresh(&mut self, id: PeerId, family: Family) -> Output {
        let Some(p) = self.peers.get(&id) else {
            return Output::default();
        };
        if !p.up {
            return Output::default();
        }
        let params = self.params(&p.spec);
        let facts = self.facts();
        let mut ch = Changes::default();
        for s in &self.shards {
            match family.afi {
                Afi::Ipv4 => refresh_table(&s.v4, id, &params, &facts, &mut ch),
                Afi::Ipv6 => refresh_table(&s.v6, id, &params, &facts, &mut ch),
            }
        }
        ch.v4.sort_by_key(|a| a.0);
        ch.v6.sort_by_key(|a| a.0);
        let mut buf = Vec::new();
        encode_changes(&ch, false, &mut buf);
        codec::encode_end_of_rib(family, &mut buf);
        Output {
            messages: vec![(id, Arc::new(buf))],
            ..Output::default()
        }
    }

    /// Locally originated routes, next hop self on export. ORIGIN and
    /// AS_PATH are the given ones (ORIGIN IGP when absent; `[[network]]`
    /// gives IGP and an empty AS_PATH, the GoBGP API what its client asks).
    pub fn originate<A: Borrow<PathAttrs>>(&mut self, prefixes: Vec<(Prefix, A)>) -> Output {
        let n = self.shards.len();
        let mut ops: Vec<Vec<(Prefix, Arc<Attrs>)>> = vec![Vec::new(); n];
        // Consecutive prefixes of one `[[network]]` share their attributes: intern once.
        let mut last: Option<(PathAttrs, Arc<Attrs>)> = None;
        for (p, a) in prefixes {
            let a: &PathAttrs = a.borrow();
            let a = match &last {
                Some((prev, interned)) if prev == a => interned.clone(),
                _ => {
                    let mut own = a.clone();
                    own.origin = Some(own.origin.unwrap_or(Origin::Igp));
                    let interned = self.interner.intern(Attrs::from_path_attrs(&own));
                    last = Some((a.clone(), interned.clone()));
                    interned
                }
            };
            let s = match &p {
                Prefix::V4(k) => shard_of4(k, n),
                Prefix::V6(k) => shard_of6(k, n),
            };
            ops[s].push((p, a));
        }
        self.local_ops(ops)
    }

    /// Withdraw locally originated routes.
    pub fn withdraw_originated(&mut self, prefixes: Vec<Prefix>) -> Output {
        let n = self.shards.len();
        let mut ops: Vec<Vec<(Prefix, Option<Arc<Attrs>>)>> = vec![Vec::new(); n];
        for p in prefixes {
            let s = match &p {
                Prefix::V4(k) => shard_of4(k, n),
                Prefix::V6(k) => shard_of6(k, n),
            };
            ops[s].push((p, None));
        }
        self.local_changes(ops)
    }

    fn local_ops(&mut self, ops: Vec<Vec<(Prefix, Arc<Attrs>)>>) -> Output {
        self.local_changes(
            ops.into_iter()
                .map(|v| v.into_iter().map(|(p, a)| (p, Some(a))).collect())
                .collect(),
        )
    }

    fn local_changes(&mut self, ops: Vec<Vec<(Prefix, Option<Arc<Attrs>>)>>) -> Output {
        let ops = &ops;
        self.pass(None, false, move |si, s, ctx| {
            let Shard { v4, v6, counts } = s;
            for (p, a) in &ops[si] {
                let new = a.as_ref().map(|a| Path {
                    peer: LOCAL_PEER,
                    flags: 0,
                    pre: a.clone(),
                    post: Some(a.clone()),
                });
                match p {
                    Prefix::V4(k) => v4.change(counts, *k, LOCAL_PEER, new, ctx, false),
                    Prefix::V6(k) => v6.change(counts, *k, LOCAL_PEER, new, ctx, false),
                }
            }
        })
    }
}

fn refresh_table<K: Key>(
    t: &Tables<K>,
    id: PeerId,
    params: &ExportParams,
    facts: &FxMap<PeerId, SrcFacts>,
    ch: &mut Changes,
) {
    query::collect_out(t, id, params, facts, |k, a| {
        let o = OutAttrs::encode(params, k.prefix().afi(), a);
        K::push(ch, k, Some(Arc::new(o)));
    });
}
