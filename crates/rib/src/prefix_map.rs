//! Compact IPv4 prefix map: prefixes are grouped in buckets of 256
//! siblings (same length, same upper bits); each bucket is a sorted pair of
//! vectors, so a /24 costs one key byte plus the value, with no per-entry
//! heap allocation and no power-of-two slack per entry.

use holdfast_wire::Prefix4;

use crate::intern::FxMap;

#[derive(Clone)]
struct Chunk<V> {
    keys: Vec<u8>,
    vals: Vec<V>,
}

/// Map from [`Prefix4`] to `V`.
#[derive(Clone)]
pub(crate) struct PrefixMap4<V> {
    buckets: FxMap<u32, Chunk<V>>,
    len: usize,
}

impl<V> Default for PrefixMap4<V> {
    fn default() -> Self {
        PrefixMap4 {
            buckets: FxMap::default(),
            len: 0,
        }
    }
}

/// Splits a prefix into (bucket id, position in bucket).
#[inline]
pub(crate) fn split4(p: &Prefix4) -> (u32, u8) {
    let k = if p.len == 0 {
        0
    } else {
        p.addr >> (32 - p.len as u32)
    };
    (((p.len as u32) << 24) | (k >> 8), (k & 0xff) as u8)
}

#[inline]
fn join4(bucket: u32, low: u8) -> Prefix4 {
    let len = (bucket >> 24) as u8;
    let k = ((bucket & 0x00ff_ffff) << 8) | low as u32;
    let addr = if len == 0 { 0 } else { k << (32 - len as u32) };
    Prefix4 { addr, len }
}

impl<V> PrefixMap4<V> {
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    pub(crate) fn get(&self, p: &Prefix4) -> Option<&V> {
        let (b, l) = split4(p);
        let c = self.buckets.get(&b)?;
        c.keys.binary_search(&l).ok().map(|i| &c.vals[i])
    }

    pub(crate) fn get_mut(&mut self, p: &Prefix4) -> Option<&mut V> {
        let (b, l) = split4(p);
        let c = self.buckets.get_mut(&b)?;
        match c.keys.binary_search(&l) {
            Ok(i) => Some(&mut c.vals[i]),
            Err(_) => None,
        }
    }

    /// Returns the entry for `p`, inserting `make()` if absent.
    pub(crate) fn entry_or_insert_with(&mut self, p: &Prefix4, make: impl FnOnce() -> V) -> &mut V {
        let (b, l) = split4(p);
        let c = self.buckets.entry(b).or_insert_with(|| Chunk {
            keys: Vec::new(),
            vals: Vec::new(),
        });
        let i = match c.keys.last() {
            Some(&last) if last < l => {
                c.keys.push(l);
                c.vals.push(make());
                self.len += 1;
                c.keys.len() - 1
            }
            _ => match c.keys.binary_search(&l) {
                Ok(i) => i,
                Err(i) => {
                    c.keys.insert(i, l);
                    c.vals.insert(i, make());
                    self.len += 1;
                    i
                }
            },
        };
        &mut c.vals[i]
    }

    pub(crate) fn insert(&mut self, p: &Prefix4, v: V) -> Option<V> {
        let mut v = Some(v);
        let slot = self.entry_or_insert_with(p, || v.take().expect("value"));
        v.map(|nv| std::mem::replace(slot, nv))
    }

    pub(crate) fn remove(&mut self, p: &Prefix4) -> Option<V> {
        let (b, l) = split4(p);
        let c = self.buckets.get_mut(&b)?;
        let i = c.keys.binary_search(&l).ok()?;
        c.keys.remove(i);
        let v = c.vals.remove(i);
        self.len -= 1;
        if c.keys.is_empty() {
            self.buckets.remove(&b);
        }
        Some(v)
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = (Prefix4, &V)> {
        self.buckets.iter().flat_map(|(b, c)| {
            c.keys
                .iter()
                .zip(c.vals.iter())
                .map(move |(k, v)| (join4(*b, *k), v))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_join_roundtrip_and_ops() {
        let mut m = PrefixMap4::default();
        let ps = [
            Prefix4 { addr: 0, len: 0 },
            Prefix4 {
                addr: 0x0a00_0000,
                len: 8,
            },
            Prefix4 {
                addr: 0x0a01_0200,
                len: 24,
            },
            Prefix4 {
                addr: 0x0a01_0100,
                len: 24,
            },
            Prefix4 {
                addr: 0xffff_ffff,
                len: 32,
            },
        ];
        for (i, p) in ps.iter().enumerate() {
            let (b, l) = split4(p);
            assert_eq!(join4(b, l), *p);
            assert!(m.insert(p, i).is_none());
        }
        assert_eq!(m.len(), 5);
        assert_eq!(m.get(&ps[2]), Some(&2));
        assert_eq!(m.insert(&ps[2], 9), Some(2));
        assert_eq!(m.remove(&ps[3]), Some(3));
        assert_eq!(m.remove(&ps[3]), None);
        assert_eq!(m.remove(&ps[1]), Some(1));
        assert_eq!(m.len(), 3);
        let mut all: Vec<_> = m.iter().map(|(p, v)| (p, *v)).collect();
        all.sort();
        assert_eq!(all, vec![(ps[0], 0), (ps[2], 9), (ps[4], 4)]);
    }
}
