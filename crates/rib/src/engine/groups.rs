//! A peer's Adj-RIB-In as a list, and its Adj-RIB-In and Adj-RIB-Out
//! grouped by attribute set for encoding them as UPDATEs (the NSR snapshot
//! of a session): each distinct set is converted or exported once, with
//! its prefixes, and no per-route attribute copy is made, so a million
//! routes cost one pass over the tables and one sort of compact (set,
//! prefix) pairs.
//!
//! # Known issues
//!
//! - The Adj-RIB-Out is grouped by the fingerprint of what was sent; two
//!   different exports with the same 64-bit fingerprint would be encoded
//!   with one set (the takeover comparison trusts these fingerprints too).

use std::sync::Arc;

use holdfast_wire::{PathAttrs, Prefix, Prefix4, Prefix6};

use super::Engine;
use crate::attrs::Attrs;
use crate::decision::SrcFacts;
use crate::export::ExportParams;
use crate::intern::FxMap;
use crate::rib::{Key, Tables};
use crate::PeerId;

impl Engine {
    /// Routes of `id`'s Adj-RIB-In and Adj-RIB-Out set, replaced or
    /// removed since the last [`Engine::reset_route_changes`] (or since it
    /// came up): with the routes both tables hold now, how much of a log of
    /// the UPDATEs received from and sent to it is dead (an NSR log
    /// compaction is only worth it when most of it is).
    pub fn route_changes(&self, id: PeerId) -> u64 {
        let received: u64 = self
            .shards
            .iter()
            .filter_map(|s| s.counts.get(&id))
            .map(|c| c.changes)
            .sum();
        received + self.out_changes.get(&id).copied().unwrap_or(0)
    }

    /// Starts [`Engine::route_changes`] again from 0 (the log was
    /// compacted, or the session is new).
    pub fn reset_route_changes(&mut self, id: PeerId) {
        for s in &mut self.shards {
            if let Some(c) = s.counts.get_mut(&id) {
                c.changes = 0;
            }
        }
        self.out_changes.remove(&id);
    }

    /// The peer's Adj-RIB-In (pre-policy), sorted by prefix.
    pub fn adj_rib_in(&self, id: PeerId) -> Vec<(Prefix, Arc<PathAttrs>)> {
        let mut v = Vec::new();
        // Routes with the same (interned) attribute set share one
        // `PathAttrs`: converted once, and grouped by pointer downstream.
        let mut shared = FxMap::default();
        for s in &self.shards {
            collect_in(&s.v4, id, &mut shared, &mut v);
            collect_in(&s.v6, id, &mut shared, &mut v);
        }
        v.sort_by_key(|a| a.0);
        v
    }

    /// `id`'s Adj-RIB-In grouped by attribute set, for encoding it as
    /// UPDATEs (an NSR snapshot): `f` gets each distinct (interned) set
    /// once, converted once, with its prefixes sorted. No per-route
    /// attribute copy is made, so a million routes cost one pass over the
    /// table and one sort of (set, prefix) pairs. Sets come in the order
    /// the shards are visited (deterministic).
    pub fn visit_adj_rib_in_groups(&self, id: PeerId, mut f: impl FnMut(&PathAttrs, &[Prefix])) {
        let mut slot: FxMap<usize, u32> = FxMap::default();
        let mut sets: Vec<Arc<Attrs>> = Vec::new();
        // Per family: a `Prefix` is 48 bytes, an IPv4 (set, prefix) pair 12.
        let expected = self.counts(id).received.min(1 << 24) as usize;
        let mut v4: Vec<(u32, Prefix4)> = Vec::with_capacity(expected);
        let mut v6: Vec<(u32, Prefix6)> = Vec::new();
        for s in &self.shards {
            tag_in(&s.v4, id, &mut slot, &mut sets, &mut v4);
            tag_in(&s.v6, id, &mut slot, &mut sets, &mut v6);
        }
        drop(slot);
        emit_groups(v4, v6, |set, prefixes| {
            f(&sets[set].to_path_attrs(), prefixes)
        });
    }

    /// `id`'s Adj-RIB-Out grouped by attribute set, as
    /// [`Self::visit_adj_rib_in_groups`] does for the Adj-RIB-In: routes
    /// are grouped by the fingerprint of what was sent (the one the
    /// takeover comparison trusts too), and each group's export is computed
    /// once, from its first route, instead of once per route.
    pub fn visit_adj_rib_out_groups(&self, id: PeerId, mut f: impl FnMut(&PathAttrs, &[Prefix])) {
        let Some(p) = self.peers.get(&id) else {
            return;
        };
        let params = self.params(&p.spec);
        let facts = self.facts();
        let mut slot: FxMap<u64, u32> = FxMap::default();
        let mut sets: Vec<PathAttrs> = Vec::new();
        let expected = self.counts(id).advertised.min(1 << 24) as usize;
        let mut v4: Vec<(u32, Prefix4)> = Vec::with_capacity(expected);
        let mut v6: Vec<(u32, Prefix6)> = Vec::new();
        for s in &self.shards {
            let mut env = OutTag {
                id,
                params: &params,
                facts: &facts,
                slot: &mut slot,
                sets: &mut sets,
            };
            env.tag(&s.v4, &mut v4);
            env.tag(&s.v6, &mut v6);
        }
        drop(slot);
        emit_groups(v4, v6, |set, prefixes| f(&sets[set], prefixes));
    }
}

/// `id`'s Adj-RIB-In entries of one table, each tagged with the index of
/// its attribute set in `sets` (`slot`: a set's address to its index).
fn tag_in<K: Key>(
    t: &Tables<K>,
    id: PeerId,
    slot: &mut FxMap<usize, u32>,
    sets: &mut Vec<Arc<Attrs>>,
    tagged: &mut Vec<(u32, K)>,
) {
    crate::rib::PMap::visit(&t.dests, |k, d| {
        if let Some(p) = d.paths.iter().find(|p| p.peer == id) {
            let i = *slot.entry(Arc::as_ptr(&p.pre) as usize).or_insert_with(|| {
                sets.push(p.pre.clone());
                (sets.len() - 1) as u32
            });
            tagged.push((i, k));
        }
    });
}

/// Calls `f` with each set's index (ascending) and its prefixes, sorted,
/// from (set, prefix) pairs of both families.
fn emit_groups(
    mut v4: Vec<(u32, Prefix4)>,
    mut v6: Vec<(u32, Prefix6)>,
    mut f: impl FnMut(usize, &[Prefix]),
) {
    v4.sort_unstable();
    v6.sort_unstable();
    let (mut i4, mut i6) = (0, 0);
    let mut prefixes: Vec<Prefix> = Vec::new();
    while i4 < v4.len() || i6 < v6.len() {
        let set = match (v4.get(i4), v6.get(i6)) {
            (Some(a), Some(b)) => a.0.min(b.0),
            (Some(a), None) => a.0,
            (None, Some(b)) => b.0,
            (None, None) => break,
        };
        prefixes.clear();
        while i4 < v4.len() && v4[i4].0 == set {
            prefixes.push(Prefix::V4(v4[i4].1));
            i4 += 1;
        }
        while i6 < v6.len() && v6[i6].0 == set {
            prefixes.push(Prefix::V6(v6[i6].1));
            i6 += 1;
        }
        f(set as usize, &prefixes);
    }
}

/// What [`Engine::visit_adj_rib_out_groups`] gathers over the tables: a
/// fingerprint's set index (`slot`) and the sets, exported once each.
struct OutTag<'a> {
    id: PeerId,
    params: &'a ExportParams,
    facts: &'a FxMap<PeerId, SrcFacts>,
    slot: &'a mut FxMap<u64, u32>,
    sets: &'a mut Vec<PathAttrs>,
}

impl OutTag<'_> {
    /// Tags each route of `id`'s Adj-RIB-Out in `t` with its set's index.
    fn tag<K: Key>(&mut self, t: &Tables<K>, tagged: &mut Vec<(u32, K)>) {
        let Some(o) = t.out.get(&self.id) else {
            return;
        };
        crate::rib::PMap::visit(o, |k, h| {
            let i = match self.slot.get(h) {
                Some(&i) => i,
                None => {
                    let Some(a) = t.current_export(k, self.id, self.params, self.facts) else {
                        return;
                    };
                    self.sets.push(a);
                    let i = (self.sets.len() - 1) as u32;
                    self.slot.insert(*h, i);
                    i
                }
            };
            tagged.push((i, k));
        });
    }
}

/// `id`'s Adj-RIB-In entries of one table; `shared` maps an interned
/// attribute set (by address) to its one converted `PathAttrs`.
fn collect_in<K: Key>(
    t: &Tables<K>,
    id: PeerId,
    shared: &mut FxMap<usize, Arc<PathAttrs>>,
    v: &mut Vec<(Prefix, Arc<PathAttrs>)>,
) {
    crate::rib::PMap::visit(&t.dests, |k, d| {
        if let Some(p) = d.paths.iter().find(|p| p.peer == id) {
            let a = shared
                .entry(Arc::as_ptr(&p.pre) as usize)
                .or_insert_with(|| Arc::new(p.pre.to_path_attrs()));
            v.push((k.prefix(), a.clone()));
        }
    });
}
