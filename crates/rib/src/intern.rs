//! Attribute interning (hash-consing): identical [`Attrs`] values share
//! one reference-counted allocation. Unused sets are swept when the table has
//! grown enough since the last sweep, so the amortised cost stays O(1).

use std::hash::{BuildHasher, Hash, Hasher};
use std::sync::{Arc, Mutex};

use crate::attrs::Attrs;
use hashbrown::HashTable;

const SHARDS: usize = 16;

/// Fixed-seed hasher state so that hashing never depends on the process.
pub(crate) fn hasher() -> ahash::RandomState {
    ahash::RandomState::with_seeds(
        0x243f_6a88_85a3_08d3,
        0x1319_8a2e_0370_7344,
        0xa409_3822_299f_31d0,
        0x082e_fa98_ec4e_6c89,
    )
}

pub(crate) fn hash_of<T: Hash>(a: &T) -> u64 {
    hasher().hash_one(a)
}

/// Sharded intern table; safe to use from several rayon workers at once.
pub(crate) struct Interner {
    shards: Vec<Mutex<Table>>,
}

/// One intern shard: (hash, set).
type Table = HashTable<(u64, Arc<Attrs>)>;

impl Default for Interner {
    fn default() -> Self {
        Interner {
            shards: (0..SHARDS).map(|_| Mutex::new(HashTable::new())).collect(),
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Interner {
    /// Returns the shared allocation equal to `attrs`, creating it if needed.
    pub(crate) fn intern(&self, attrs: Attrs) -> Arc<Attrs> {
        let h = hash_of(&attrs);
        let mut t = lock(&self.shards[(h as usize) % SHARDS]);
        if let Some((_, a)) = t.find(h, |(eh, e)| *eh == h && **e == attrs) {
            return a.clone();
        }
        let a = Arc::new(attrs);
        t.insert_unique(h, (h, a.clone()), |(eh, _)| *eh);
        a
    }

    /// Number of sets referenced from outside the table.
    pub(crate) fn live(&self) -> usize {
        self.shards
            .iter()
            .map(|s| {
                lock(s)
                    .iter()
                    .filter(|(_, a)| Arc::strong_count(a) > 1)
                    .count()
            })
            .sum()
    }

    pub(crate) fn table_len(&self) -> usize {
        self.shards.iter().map(|s| lock(s).len()).sum()
    }

    /// Drops every set only the table still holds.
    pub(crate) fn sweep(&self) -> usize {
        let mut n = 0;
        for s in &self.shards {
            let mut t = lock(s);
            t.retain(|(_, a)| Arc::strong_count(a) > 1);
            t.shrink_to_fit(|(h, _)| *h);
            n += t.len();
        }
        n
    }
}

/// A tiny deterministic hasher for integer keys (Fx-style multiply).
#[derive(Default, Clone, Copy)]
pub(crate) struct FxBuild;

pub(crate) struct Fx(u64);

impl Hasher for Fx {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.write_u64(*b as u64);
        }
    }
    fn write_u8(&mut self, i: u8) {
        self.write_u64(i as u64);
    }
    fn write_u32(&mut self, i: u32) {
        self.write_u64(i as u64);
    }
    fn write_u64(&mut self, i: u64) {
        self.0 = (self.0.rotate_left(5) ^ i).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
    fn write_u128(&mut self, i: u128) {
        self.write_u64(i as u64);
        self.write_u64((i >> 64) as u64);
    }
    fn write_usize(&mut self, i: usize) {
        self.write_u64(i as u64);
    }
}

impl BuildHasher for FxBuild {
    type Hasher = Fx;
    fn build_hasher(&self) -> Fx {
        Fx(0)
    }
}

pub(crate) type FxMap<K, V> = hashbrown::HashMap<K, V, FxBuild>;
