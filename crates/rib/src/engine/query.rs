//! Read-only views of the engine's tables: the Adj-RIB-Out (as sent and
//! as its fingerprints), the Loc-RIB, one prefix's paths, per-peer counts.
//! Queries and the NSR takeover's comparison use them; none changes state.

use std::net::IpAddr;
use std::sync::Arc;

use holdfast_wire::{PathAttrs, Prefix};

use super::Engine;
use crate::attrs::Attrs;
use crate::decision::SrcFacts;
use crate::export::{ExportParams, OutAttrs};
use crate::intern::FxMap;
use crate::rib::{shard_of4, shard_of6, Counts, Key, Tables};
use crate::{EngineConfig, PeerCounts, PeerId};

impl Engine {
    /// Fingerprints of what the peer was last sent, sorted by prefix: the
    /// Adj-RIB-Out as the engine keeps it, without recomputing the export
    /// (see [`Self::out_fingerprint`]).
    pub fn adj_rib_out_fingerprints(&self, id: PeerId) -> Vec<(Prefix, u64)> {
        let mut v: Vec<(Prefix, u64)> = Vec::new();
        for s in &self.shards {
            if let Some(o) = s.v4.out.get(&id) {
                crate::rib::PMap::visit(o, |k, h| v.push((Prefix::V4(k), *h)));
            }
            if let Some(o) = s.v6.out.get(&id) {
                crate::rib::PMap::visit(o, |k, h| v.push((Prefix::V6(k), *h)));
            }
        }
        v.sort_unstable_by_key(|a| a.0);
        v
    }

    /// The fingerprint the engine records in `id`'s Adj-RIB-Out when it
    /// sends a route of family `afi` with these (exported) attributes, as
    /// decoded from the wire. Comparable within one process only.
    pub fn out_fingerprint(
        &self,
        id: PeerId,
        afi: holdfast_wire::Afi,
        attrs: &PathAttrs,
    ) -> Option<u64> {
        let p = self.peers.get(&id)?;
        let params = self.params(&p.spec);
        Some(OutAttrs::encode(&params, afi, attrs.clone()).hash)
    }

    /// What the peer was last sent, sorted by prefix.
    pub fn adj_rib_out(&self, id: PeerId) -> Vec<(Prefix, Arc<PathAttrs>)> {
        let Some(p) = self.peers.get(&id) else {
            return Vec::new();
        };
        let params = self.params(&p.spec);
        let facts = self.facts();
        let mut v: Vec<(Prefix, Arc<PathAttrs>)> = Vec::new();
        for s in &self.shards {
            collect_out(&s.v4, id, &params, &facts, |k, a| {
                v.push((Prefix::V4(k), Arc::new(a)))
            });
            collect_out(&s.v6, id, &params, &facts, |k, a| {
                v.push((Prefix::V6(k), Arc::new(a)))
            });
        }
        v.sort_by_key(|a| a.0);
        v
    }

    pub(super) fn effective(&self, a: &Attrs) -> Arc<PathAttrs> {
        let mut x = a.to_path_attrs();
        x.local_pref = Some(x.local_pref.unwrap_or(self.cfg.default_local_pref));
        Arc::new(x)
    }

    /// Best path per prefix (peer `LOCAL_PEER` = locally originated), with
    /// the effective LOCAL_PREF filled in; sorted by prefix.
    pub fn loc_rib(&self) -> Vec<(Prefix, PeerId, Arc<PathAttrs>)> {
        let mut v = Vec::new();
        for s in &self.shards {
            crate::rib::PMap::visit(&s.v4.dests, |k, d| {
                if let Some((p, a)) = d.best() {
                    v.push((Prefix::V4(k), p.peer, self.effective(a)));
                }
            });
            crate::rib::PMap::visit(&s.v6.dests, |k, d| {
                if let Some((p, a)) = d.best() {
                    v.push((Prefix::V6(k), p.peer, self.effective(a)));
                }
            });
        }
        v.sort_by_key(|a| a.0);
        v
    }

    /// Every eligible (post-policy) path for `prefix`, best flagged.
    pub fn lookup(&self, prefix: &Prefix) -> Vec<(PeerId, Arc<PathAttrs>, bool)> {
        let n = self.shards.len();
        let d = match prefix {
            Prefix::V4(k) => crate::rib::PMap::get(&self.shards[shard_of4(k, n)].v4.dests, k),
            Prefix::V6(k) => crate::rib::PMap::get(&self.shards[shard_of6(k, n)].v6.dests, k),
        };
        let Some(d) = d else { return Vec::new() };
        d.paths
            .iter()
            .enumerate()
            .filter_map(|(i, p)| p.post.as_ref().map(|a| (p.peer, self.effective(a), i == 0)))
            .collect()
    }

    pub fn counts(&self, id: PeerId) -> PeerCounts {
        let mut c = Counts::default();
        let mut adv = 0;
        for s in &self.shards {
            if let Some(x) = s.counts.get(&id) {
                c.received += x.received;
                c.accepted += x.accepted;
                c.stale += x.stale;
                c.duplicates += x.duplicates;
            }
            adv += s.v4.out.get(&id).map_or(0, crate::rib::PMap::size);
            adv += s.v6.out.get(&id).map_or(0, crate::rib::PMap::size);
        }
        PeerCounts {
            received: c.received as u64,
            accepted: c.accepted as u64,
            advertised: adv as u64,
            stale: c.stale as u64,
            policy_rejected: self.policy_rejected.get(&id).copied().unwrap_or(0),
            duplicates: c.duplicates,
        }
    }

    /// Prefixes with a best path (counted as paths change, not walked).
    pub fn loc_rib_len(&self) -> usize {
        self.shards
            .iter()
            .map(|s| s.v4.with_best + s.v6.with_best)
            .sum()
    }

    /// [`Engine::loc_rib_len`] by walking every table: the check of the
    /// counter in tests.
    pub fn loc_rib_len_walked(&self) -> usize {
        let mut n = 0;
        for s in &self.shards {
            crate::rib::PMap::visit(&s.v4.dests, |_, d| n += d.best().is_some() as usize);
            crate::rib::PMap::visit(&s.v6.dests, |_, d| n += d.best().is_some() as usize);
        }
        n
    }

    /// Distinct interned attribute sets in use.
    pub fn attr_sets(&self) -> usize {
        self.interner.live()
    }

    /// The configuration this engine was built with.
    pub fn config(&self) -> &EngineConfig {
        &self.cfg
    }

    /// Whether the peer is registered and Established.
    pub fn is_up(&self, id: PeerId) -> bool {
        self.peers.get(&id).is_some_and(|p| p.up)
    }

    /// Address of a registered peer.
    pub fn peer_address(&self, id: PeerId) -> Option<IpAddr> {
        self.peers.get(&id).map(|p| p.spec.address)
    }
}

/// Current export of every prefix in the peer's Adj-RIB-Out.
pub(super) fn collect_out<K: Key>(
    t: &Tables<K>,
    id: PeerId,
    params: &ExportParams,
    facts: &FxMap<PeerId, SrcFacts>,
    mut f: impl FnMut(K, PathAttrs),
) {
    if let Some(o) = t.out.get(&id) {
        crate::rib::PMap::visit(o, |k, _| {
            if let Some(a) = t.current_export(k, id, params, facts) {
                f(k, a);
            }
        });
    }
}
