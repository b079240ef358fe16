//! The FIB core's entries: one 32-byte slot a prefix, found through a map
//! from a packed key (16 bytes a bucket for IPv4), and the order a round of
//! queued slots is written in (see the parent module).

use std::collections::HashMap;

use holdfast_wire::{Prefix, Prefix4, Prefix6};

use super::{LIVE, NONE};

/// One prefix's entry.
#[derive(Debug, Clone, Copy)]
pub(super) struct Entry {
    /// The prefix's address, host order.
    pub(super) addr: u128,
    pub(super) want: u32,
    pub(super) kernel: u32,
    pub(super) len: u8,
    pub(super) v6: bool,
    pub(super) flags: u8,
}

impl Entry {
    pub(super) fn new(p: &Prefix) -> Self {
        let (addr, len, v6) = match p {
            Prefix::V4(k) => (u128::from(k.addr), k.len, false),
            Prefix::V6(k) => (k.addr, k.len, true),
        };
        Entry {
            addr,
            want: NONE,
            kernel: NONE,
            len,
            v6,
            flags: LIVE,
        }
    }

    pub(super) fn prefix(&self) -> Prefix {
        if self.v6 {
            Prefix::V6(Prefix6 {
                addr: self.addr,
                len: self.len,
            })
        } else {
            Prefix::V4(Prefix4 {
                addr: self.addr as u32,
                len: self.len,
            })
        }
    }
}

/// The map's key for an IPv4 prefix: address and length in one word.
fn key4(k: &Prefix4) -> u64 {
    (u64::from(k.addr) << 8) | u64::from(k.len)
}

/// Prefix → slot, and the slots.
#[derive(Default)]
pub(super) struct Slots {
    v4: HashMap<u64, u32, ahash::RandomState>,
    v6: HashMap<(u128, u8), u32, ahash::RandomState>,
    pub(super) all: Vec<Entry>,
    free: Vec<u32>,
}

impl Slots {
    pub(super) fn find(&self, p: &Prefix) -> Option<u32> {
        match p {
            Prefix::V4(k) => self.v4.get(&key4(k)).copied(),
            Prefix::V6(k) => self.v6.get(&(k.addr, k.len)).copied(),
        }
    }

    pub(super) fn alloc(&mut self, p: &Prefix) -> u32 {
        let e = Entry::new(p);
        match self.free.pop() {
            Some(s) => {
                self.all[s as usize] = e;
                s
            }
            None => {
                self.all.push(e);
                (self.all.len() - 1) as u32
            }
        }
    }

    /// The prefix's slot, a new one if it has none (`true`: new).
    pub(super) fn find_or_insert(&mut self, p: &Prefix) -> (u32, bool) {
        let next = self.free.last().copied().unwrap_or(self.all.len() as u32);
        let (s, new) = match p {
            Prefix::V4(k) => match self.v4.entry(key4(k)) {
                std::collections::hash_map::Entry::Occupied(o) => (*o.get(), false),
                std::collections::hash_map::Entry::Vacant(v) => (*v.insert(next), true),
            },
            Prefix::V6(k) => match self.v6.entry((k.addr, k.len)) {
                std::collections::hash_map::Entry::Occupied(o) => (*o.get(), false),
                std::collections::hash_map::Entry::Vacant(v) => (*v.insert(next), true),
            },
        };
        if new {
            let got = self.alloc(p);
            debug_assert_eq!(got, s);
        }
        (s, new)
    }

    pub(super) fn remove(&mut self, s: u32) {
        let e = &mut self.all[s as usize];
        if e.flags & LIVE == 0 {
            return;
        }
        match e.prefix() {
            Prefix::V4(k) => self.v4.remove(&key4(&k)),
            Prefix::V6(k) => self.v6.remove(&(k.addr, k.len)),
        };
        e.flags = 0;
        e.want = NONE;
        e.kernel = NONE;
        self.free.push(s);
    }

    pub(super) fn get(&mut self, s: u32) -> &mut Entry {
        &mut self.all[s as usize]
    }

    pub(super) fn len(&self) -> usize {
        self.v4.len() + self.v6.len()
    }

    /// Every live slot.
    pub(super) fn live(&self) -> impl Iterator<Item = (u32, &Entry)> {
        self.all
            .iter()
            .enumerate()
            .filter(|(_, e)| e.flags & LIVE != 0)
            .map(|(i, e)| (i as u32, e))
    }

    pub(super) fn live_mut(&mut self) -> impl Iterator<Item = (u32, &mut Entry)> {
        self.all
            .iter_mut()
            .enumerate()
            .filter(|(_, e)| e.flags & LIVE != 0)
            .map(|(i, e)| (i as u32, e))
    }
}

/// Rounds shorter than this are written as they were queued.
const ORDER_MIN: usize = 256;

/// Puts a round of slots into the order they are written in, reversed (the
/// caller pops from the end): sorted by prefix (IPv4 first), then in
/// bit-reversed rank order, so that every stretch of the round spreads
/// over the whole of it. Short rounds keep the order they were queued in.
pub(super) fn order_round(round: &mut Vec<u32>, all: &[Entry]) {
    if round.len() < ORDER_MIN {
        round.reverse();
        return;
    }
    let mut keyed: Vec<(bool, u128, u8, u32)> = round
        .iter()
        .map(|&s| {
            let e = &all[s as usize];
            (e.v6, e.addr, e.len, s)
        })
        .collect();
    keyed.sort_unstable();
    let n = keyed.len();
    let bits = usize::BITS - (n - 1).leading_zeros();
    round.clear();
    for i in 0..(1usize << bits) {
        let j = i.reverse_bits() >> (usize::BITS - bits);
        if j < n {
            round.push(keyed[j].3);
        }
    }
    round.reverse();
}
