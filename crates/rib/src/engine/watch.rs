//! Best-path watching: the changes of each prefix's best path, noted by
//! the export pass (`Tables::note_best`) while a watcher is registered,
//! for streams such as the GoBGP API's `WatchEvent` (BEST table) and BMP's
//! Loc-RIB monitoring (RFC 9069).
//!
//! Post-policy watching: each change of a peer's path after import policy
//! (`Tables::change`), for BMP's post-policy Adj-RIB-In monitoring
//! (RFC 7854 §4.2, the L flag).
//!
//! # Known issues
//!
//! - A best-path change made and undone between two export passes is not
//!   seen; a change that leaves the same best path (same peer and
//!   attributes) is not noted.

use std::sync::Arc;

use holdfast_wire::{PathAttrs, Prefix};

use super::Engine;
use crate::attrs::Attrs;
use crate::intern::FxMap;
use crate::rib::{Key, Tables};
use crate::PeerId;

/// A prefix and its new best path (source peer, attributes), or `None`
/// when it has none any more.
pub type BestChange = (Prefix, Option<(PeerId, Arc<PathAttrs>)>);

/// A peer's path for a prefix after import policy: its new attributes as
/// the policy left them, or `None` (withdrawn, or now rejected by the
/// policy).
pub type PostChange = (PeerId, Prefix, Option<Arc<PathAttrs>>);

impl Engine {
    /// Turns best-path watching on or off. While on, every change of a
    /// prefix's best path (a new best, new attributes, or no best any
    /// more) is kept until [`Engine::take_best_changes`]; off, nothing is
    /// kept and the cost is one flag test per shard and pass.
    pub fn set_watch_best(&mut self, on: bool) {
        for s in &mut self.shards {
            s.v4.watch = on;
            s.v6.watch = on;
            if !on {
                s.v4.best_log = Vec::new();
                s.v6.best_log = Vec::new();
            }
        }
    }

    /// The best-path changes since the last call (watching on): per
    /// prefix its new best path (peer `LOCAL_PEER` = locally originated,
    /// LOCAL_PREF filled in as in [`Engine::loc_rib`]) or `None` when it
    /// has none; sorted by prefix within each shard.
    pub fn take_best_changes(&mut self) -> Vec<BestChange> {
        let mut v = Vec::new();
        for i in 0..self.shards.len() {
            let log4 = std::mem::take(&mut self.shards[i].v4.best_log);
            let log6 = std::mem::take(&mut self.shards[i].v6.best_log);
            for (k, b) in log4 {
                v.push((Prefix::V4(k), b.map(|(p, a)| (p, self.effective(&a)))));
            }
            for (k, b) in log6 {
                v.push((Prefix::V6(k), b.map(|(p, a)| (p, self.effective(&a)))));
            }
        }
        v
    }

    /// Turns post-policy watching on or off. While on, every change of a
    /// peer's post-policy path (a route accepted, changed, withdrawn, or
    /// rejected by a new policy) is kept until
    /// [`Engine::take_post_changes`]; off, nothing is kept and the cost is
    /// one flag test per path change.
    pub fn set_watch_post(&mut self, on: bool) {
        for s in &mut self.shards {
            s.v4.watch_post = on;
            s.v6.watch_post = on;
            if !on {
                s.v4.post_log = Vec::new();
                s.v6.post_log = Vec::new();
            }
        }
    }

    /// The post-policy changes since the last call (watching on), in the
    /// order made within each shard. Attributes are as the import policy
    /// left them (no default LOCAL_PREF filled in); changes sharing one
    /// attribute set share one `Arc`.
    pub fn take_post_changes(&mut self) -> Vec<PostChange> {
        let mut v = Vec::new();
        let mut shared: FxMap<usize, Arc<PathAttrs>> = FxMap::default();
        let mut conv = |a: Option<Arc<Attrs>>| {
            a.map(|a| {
                shared
                    .entry(Arc::as_ptr(&a) as usize)
                    .or_insert_with(|| Arc::new(a.to_path_attrs()))
                    .clone()
            })
        };
        for s in &mut self.shards {
            for (k, peer, a) in std::mem::take(&mut s.v4.post_log) {
                v.push((peer, Prefix::V4(k), conv(a)));
            }
            for (k, peer, a) in std::mem::take(&mut s.v6.post_log) {
                v.push((peer, Prefix::V6(k), conv(a)));
            }
        }
        v
    }

    /// The peer's Adj-RIB-In after import policy (the routes it accepted,
    /// attributes as the policy left them), sorted by prefix.
    pub fn adj_rib_in_post(&self, id: PeerId) -> Vec<(Prefix, Arc<PathAttrs>)> {
        let mut v = Vec::new();
        let mut shared: FxMap<usize, Arc<PathAttrs>> = FxMap::default();
        for s in &self.shards {
            collect_post(&s.v4, id, &mut shared, &mut v);
            collect_post(&s.v6, id, &mut shared, &mut v);
        }
        v.sort_by_key(|a| a.0);
        v
    }
}

fn collect_post<K: Key>(
    t: &Tables<K>,
    id: PeerId,
    shared: &mut FxMap<usize, Arc<PathAttrs>>,
    v: &mut Vec<(Prefix, Arc<PathAttrs>)>,
) {
    crate::rib::PMap::visit(&t.dests, |k, d| {
        if let Some(a) = d
            .paths
            .iter()
            .find(|p| p.peer == id)
            .and_then(|p| p.post.as_ref())
        {
            let a = shared
                .entry(Arc::as_ptr(a) as usize)
                .or_insert_with(|| Arc::new(a.to_path_attrs()));
            v.push((k.prefix(), a.clone()));
        }
    });
}
