//! Best-path watching: the changes of each prefix's best path, noted by
//! the export pass (`Tables::note_best`) while a watcher is registered,
//! for streams such as the GoBGP API's `WatchEvent` (BEST table).
//!
//! # Known issues
//!
//! - A change made and undone between two export passes is not seen; a
//!   change that leaves the same best path (same peer and attributes) is
//!   not noted.

use std::sync::Arc;

use holdfast_wire::{PathAttrs, Prefix};

use super::Engine;
use crate::PeerId;

/// A prefix and its new best path (source peer, attributes), or `None`
/// when it has none any more.
pub type BestChange = (Prefix, Option<(PeerId, Arc<PathAttrs>)>);

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
}
