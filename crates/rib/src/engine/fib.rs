//! Forwarding entries for the kernel FIB (issue 13).
//!
//! With `EngineConfig::fib_ecmp` > 0 every Loc-RIB change marks its prefix
//! (`Tables::fib_dirty`, filled by `Tables::change`: no allocation per
//! route beyond the mark), and [`Engine::take_fib`] turns the marks into
//! [`FibRoute`]s computed from the final state of each prefix, so a prefix
//! changed several times in a batch is reported once, as it ends.
//!
//! The next hops of a prefix are its best path's next hop and, with
//! `fib_ecmp` > 1, those of every eligible path equal to the best through
//! the RFC 4271 §9.1.2.2 steps before the BGP identifier: LOCAL_PREF,
//! AS_PATH length, ORIGIN, MED (compared between paths from the same
//! neighbouring AS, or always with `always_compare_med`), eBGP over iBGP,
//! and RFC 4456's CLUSTER_LIST length. At most `fib_ecmp` distinct next
//! hops are kept, in the order of the remaining tie-breaks (BGP identifier,
//! peer address); the result is sorted.
//!
//! # Known issues
//! - A locally originated best path (a `[[network]]`) is not installed:
//!   its prefix gets an empty entry.
//! - An IPv6 path whose MP_REACH_NLRI carries only a link-local next hop
//!   has no global next hop to install and counts as no next hop.

use std::net::IpAddr;

use holdfast_wire::Prefix;

use super::Engine;
use crate::attrs::Attrs;
use crate::decision::{origin_rank, SrcFacts};
use crate::intern::FxMap;
use crate::rib::{Dest, Key, PMap, Tables};
use crate::{FibRoute, NextHops, LOCAL_PEER};

/// The next hop to forward a path's prefix on.
fn path_next_hop(prefix: &Prefix, a: &Attrs) -> Option<IpAddr> {
    match prefix {
        Prefix::V4(_) => a
            .next_hop
            .map(IpAddr::V4)
            .or_else(|| a.mp_next_hop().map(|n| n.global)),
        Prefix::V6(_) => a
            .mp_next_hop()
            .map(|n| n.global)
            .filter(|g| !g.is_unspecified()),
    }
}

/// What must be equal for two paths to share the forwarding entry.
#[derive(PartialEq, Eq)]
struct EqualCost {
    local_pref: u32,
    as_path_len: usize,
    origin: u8,
    ebgp: bool,
    cluster_len: usize,
}

struct FibEnv<'a> {
    ecmp: usize,
    default_lp: u32,
    always_compare_med: bool,
    local_as: u32,
    facts: &'a FxMap<u32, SrcFacts>,
}

impl FibEnv<'_> {
    fn cost(&self, a: &Attrs, peer: u32) -> EqualCost {
        EqualCost {
            local_pref: a.local_pref.unwrap_or(self.default_lp),
            as_path_len: a.decision_len(),
            origin: origin_rank(a),
            ebgp: self.facts.get(&peer).is_some_and(|f| f.ebgp),
            cluster_len: a.cluster_list().len(),
        }
    }

    /// The forwarding entry of one destination (`None`: no entry).
    fn entry(&self, prefix: &Prefix, d: Option<&Dest>) -> NextHops {
        let mut out = NextHops::new();
        let Some((best, ba)) = d.and_then(Dest::best) else {
            return out;
        };
        if best.peer == LOCAL_PEER {
            return out;
        }
        if let Some(nh) = path_next_hop(prefix, ba) {
            out.push(nh);
        }
        let d = d.expect("best implies a destination");
        if self.ecmp > 1 && d.paths.len() > 1 {
            let want = self.cost(ba, best.peer);
            let b_as = ba.first_as().unwrap_or(self.local_as);
            let b_med = ba.med.unwrap_or(0);
            // Candidates in the order of the remaining tie-breaks.
            let mut rest: smallvec::SmallVec<[(u32, IpAddr, IpAddr); 4]> =
                smallvec::SmallVec::new();
            for p in &d.paths[1..] {
                let Some(a) = &p.post else { continue };
                if p.peer == LOCAL_PEER || self.cost(a, p.peer) != want {
                    continue;
                }
                let same_as = a.first_as().unwrap_or(self.local_as) == b_as;
                if (same_as || self.always_compare_med) && a.med.unwrap_or(0) != b_med {
                    continue;
                }
                let Some(nh) = path_next_hop(prefix, a) else {
                    continue;
                };
                let f = self.facts.get(&p.peer);
                let rid = a
                    .originator_id()
                    .or(f.map(|f| f.router_id))
                    .map_or(u32::MAX, u32::from);
                let addr = f.map_or(nh, |f| f.addr);
                rest.push((rid, addr, nh));
            }
            rest.sort_unstable();
            for (_, _, nh) in rest {
                if out.len() >= self.ecmp {
                    break;
                }
                if !out.contains(&nh) {
                    out.push(nh);
                }
            }
            out.sort_unstable();
        }
        out
    }
}

fn take_table<K: Key>(t: &mut Tables<K>, env: &FibEnv<'_>, out: &mut Vec<FibRoute>) {
    if t.fib_dirty.is_empty() {
        return;
    }
    let mut keys = std::mem::take(&mut t.fib_dirty);
    keys.sort_unstable();
    keys.dedup();
    out.reserve(keys.len());
    for &k in &keys {
        let prefix = k.prefix();
        let nexthops = env.entry(&prefix, t.dests.get(&k));
        out.push(FibRoute { prefix, nexthops });
    }
    keys.clear();
    t.fib_dirty = keys;
}

fn all_table<K: Key>(t: &Tables<K>, env: &FibEnv<'_>, out: &mut Vec<FibRoute>) {
    t.dests.visit(|k, d| {
        let prefix = k.prefix();
        let nexthops = env.entry(&prefix, Some(d));
        if !nexthops.is_empty() {
            out.push(FibRoute { prefix, nexthops });
        }
    });
}

impl Engine {
    fn fib_env<'a>(&self, facts: &'a FxMap<u32, SrcFacts>) -> FibEnv<'a> {
        FibEnv {
            ecmp: self.cfg.fib_ecmp.max(1),
            default_lp: self.cfg.default_local_pref,
            always_compare_med: self.cfg.always_compare_med,
            local_as: self.cfg.local_as,
            facts,
        }
    }

    /// The forwarding entries that may have changed since the last call
    /// (appended to `out`; an empty `nexthops` removes the prefix). Nothing
    /// when `fib_ecmp` is 0.
    pub fn take_fib(&mut self, out: &mut Vec<FibRoute>) {
        if self.cfg.fib_ecmp == 0 {
            return;
        }
        let facts = self.facts();
        let mut shards = std::mem::take(&mut self.shards);
        {
            let env = self.fib_env(&facts);
            for s in &mut shards {
                take_table(&mut s.v4, &env, out);
                take_table(&mut s.v6, &env, out);
            }
        }
        self.shards = shards;
    }

    /// `fib_ecmp` now (0: no FIB output).
    pub fn fib_ecmp(&self) -> usize {
        self.cfg.fib_ecmp
    }

    /// Changes `fib_ecmp` at run time (a reload of `[kernel]`): 0 turns
    /// the FIB output off and drops the marks not yet taken. The entries
    /// already handed out are not recomputed here: call [`Engine::fib_all`]
    /// for the full set under the new value.
    pub fn set_fib_ecmp(&mut self, ecmp: usize) {
        self.cfg.fib_ecmp = ecmp;
        if ecmp == 0 {
            for s in &mut self.shards {
                s.v4.fib_dirty.clear();
                s.v6.fib_dirty.clear();
            }
        }
    }

    /// Every forwarding entry (prefixes with next hops only), in no
    /// particular order; clears the marks `take_fib` would report.
    pub fn fib_all(&mut self, out: &mut Vec<FibRoute>) {
        let facts = self.facts();
        let env = self.fib_env(&facts);
        for s in &self.shards {
            all_table(&s.v4, &env, out);
            all_table(&s.v6, &env, out);
        }
        for s in &mut self.shards {
            s.v4.fib_dirty.clear();
            s.v6.fib_dirty.clear();
        }
    }
}
