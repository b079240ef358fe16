//! RPKI origin validation in the engine (RFC 6811): the VRP table import
//! policies validate against (`Match::Rpki`), revalidation when it changes,
//! and the per-state route counts of `show rpki`.
//!
//! A route's state is not stored: it is a function of its prefix, its
//! origin AS and the table, computed when import policy runs. When the
//! table changes, [`Engine::set_vrps`] re-runs import (as soft
//! reconfiguration does, from the stored Adj-RIB-In) for the paths whose
//! prefix a changed VRP covers, of the peers whose import policy matches on
//! `rpki`, and exports the differences. No session is touched.
//!
//! # Known issues
//! - Revalidation visits every prefix of the table once per change (a cover
//!   test of a few hash probes each), not only the covered ones.

use std::sync::Arc;

use holdfast_rtr::{Validity, Vrp, VrpTable};
use holdfast_wire::Prefix;

use super::{Engine, ImportEnv};
use crate::intern::FxMap;
use crate::rib::{Path, Shard};
use crate::{Output, PeerId, PeerSpec, LOCAL_PEER};

/// Received routes (Adj-RIB-In paths, before import policy) by RFC 6811
/// state.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RpkiCounts {
    pub valid: u64,
    pub invalid: u64,
    pub not_found: u64,
}

impl RpkiCounts {
    fn add(&mut self, v: Validity) {
        match v {
            Validity::Valid => self.valid += 1,
            Validity::Invalid => self.invalid += 1,
            Validity::NotFound => self.not_found += 1,
        }
    }
}

impl Engine {
    /// The VRP table in force, if any was set.
    pub fn vrps(&self) -> Option<&Arc<VrpTable>> {
        self.rpki.as_ref()
    }

    /// Replaces the VRP table. `changed` holds the VRPs added and removed
    /// since the previous table: the paths their prefixes cover are
    /// imported again by peers whose import policy matches on `rpki`, and
    /// the resulting changes exported.
    pub fn set_vrps(&mut self, table: Arc<VrpTable>, changed: &[Vrp]) -> Output {
        self.rpki = Some(table);
        let specs: FxMap<PeerId, PeerSpec> = self
            .peers
            .iter()
            .filter(|(_, p)| p.spec.import.uses_rpki())
            .map(|(id, p)| (*id, p.spec.clone()))
            .collect();
        if specs.is_empty() || changed.is_empty() {
            return Output::default();
        }
        let cover = VrpTable::new(changed);
        let interner = std::mem::take(&mut self.interner);
        let rpki = self.rpki.clone();
        let cfg = self.cfg.clone();
        let out = {
            let env = ImportEnv {
                cfg: &cfg,
                interner: &interner,
                shards: &[],
                rpki: rpki.as_deref(),
            };
            let reimport = |k: Prefix, p: &Path| env.reimport(specs.get(&p.peer)?, k, p);
            let cover = &cover;
            self.pass(None, false, |_, s, ctx| {
                let Shard { v4, v6, counts } = s;
                v4.map_where(
                    counts,
                    ctx,
                    |k| cover.covers(&Prefix::V4(k)),
                    |k, p| reimport(Prefix::V4(k), p),
                );
                v6.map_where(
                    counts,
                    ctx,
                    |k| cover.covers(&Prefix::V6(k)),
                    |k, p| reimport(Prefix::V6(k), p),
                );
            })
        };
        self.interner = interner;
        out
    }

    /// The state of a peer's path as received, against the current table
    /// (`not-found` without one).
    fn path_validity(&self, prefix: &Prefix, p: &Path) -> Validity {
        let Some(t) = &self.rpki else {
            return Validity::NotFound;
        };
        let local_as = self
            .peers
            .get(&p.peer)
            .map_or(self.cfg.local_as, |s| s.spec.local_as);
        t.validate(prefix, p.pre.origin_for_validation(local_as))
    }

    /// Every received route's state, counted.
    pub fn rpki_counts(&self) -> RpkiCounts {
        let mut c = RpkiCounts::default();
        for s in &self.shards {
            crate::rib::PMap::visit(&s.v4.dests, |k, d| {
                for p in d.paths.iter().filter(|p| p.peer != LOCAL_PEER) {
                    c.add(self.path_validity(&Prefix::V4(k), p));
                }
            });
            crate::rib::PMap::visit(&s.v6.dests, |k, d| {
                for p in d.paths.iter().filter(|p| p.peer != LOCAL_PEER) {
                    c.add(self.path_validity(&Prefix::V6(k), p));
                }
            });
        }
        c
    }

    /// The state of `peer`'s route for `prefix` as received, if it has one.
    pub fn route_validity(&self, peer: PeerId, prefix: &Prefix) -> Option<Validity> {
        let n = self.shards.len();
        let d = match prefix {
            Prefix::V4(k) => {
                crate::rib::PMap::get(&self.shards[crate::rib::shard_of4(k, n)].v4.dests, k)
            }
            Prefix::V6(k) => {
                crate::rib::PMap::get(&self.shards[crate::rib::shard_of6(k, n)].v6.dests, k)
            }
        }?;
        let p = d.paths.iter().find(|p| p.peer == peer)?;
        Some(self.path_validity(prefix, p))
    }
}
