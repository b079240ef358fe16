//! Deterministic route workloads for tests and benchmarks.
//!
//! - **packed**: 500 consecutive /24s per attribute set (TENSOR Fig. 6 style
//!   bulk load; best case for update packing).
//! - **realistic**: a full-table-like mix: prefix lengths weighted like the
//!   public IPv4 table (about 60 % /24), AS paths of 2 to 6 hops, some
//!   communities and MEDs, and 1 to 4 prefixes per attribute set (2.5 on
//!   average), so that attribute interning and packing are stressed.
//! - **dfz**: the same prefix lengths, paths, MEDs and communities with 2 to
//!   4 prefixes per attribute set (3 on average): issue 12's third mix, closer
//!   to a full table as a route server or transit feed sends it.

use holdfast_wire::{AsPath, AsSegment, Origin, PathAttrs, Prefix, Prefix4};
use std::net::Ipv4Addr;

/// Which workload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Packed,
    Realistic,
    Dfz,
}

impl std::str::FromStr for Kind {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "packed" => Ok(Kind::Packed),
            "realistic" => Ok(Kind::Realistic),
            "dfz" => Ok(Kind::Dfz),
            other => Err(format!(
                "unknown workload {other:?} (packed | realistic | dfz)"
            )),
        }
    }
}

impl std::fmt::Display for Kind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Kind::Packed => "packed",
            Kind::Realistic => "realistic",
            Kind::Dfz => "dfz",
        })
    }
}

/// Routes grouped by attribute set.
pub type Workload = Vec<(PathAttrs, Vec<Prefix>)>;

/// A small deterministic PRNG (xorshift64*), so workloads are identical in
/// every run and on every machine.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed.max(1))
    }
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }
}

/// First address handed out; the workloads never use 0/8 or 127/8.
const BASE: u32 = 0x0100_0000;

fn base_attrs(local_as: u32, next_hop: Ipv4Addr) -> PathAttrs {
    PathAttrs {
        origin: Some(Origin::Igp),
        as_path: AsPath {
            segments: vec![AsSegment::Sequence(vec![local_as])],
        },
        next_hop: Some(next_hop),
        ..PathAttrs::default()
    }
}

/// Generates `n` IPv4 routes as announced by a speaker in `local_as`.
pub fn generate(kind: Kind, n: usize, local_as: u32, next_hop: Ipv4Addr) -> Workload {
    match kind {
        Kind::Packed => packed(n, local_as, next_hop),
        Kind::Realistic => realistic(n, local_as, next_hop, 1..=4),
        Kind::Dfz => realistic(n, local_as, next_hop, 2..=4),
    }
}

fn packed(n: usize, local_as: u32, next_hop: Ipv4Addr) -> Workload {
    let mut out = Vec::with_capacity(n / 500 + 1);
    let mut i = 0usize;
    let mut group = 0u32;
    while i < n {
        let take = (n - i).min(500);
        let mut attrs = base_attrs(local_as, next_hop);
        // The middle hop is a 4-octet private AS (RFC 6996): a 16-bit private
        // one (64512..65535) would match the AS of the device under test in
        // some sets, which then rejects them as AS loops.
        attrs.as_path = AsPath {
            segments: vec![AsSegment::Sequence(vec![
                local_as,
                4_200_000_000 + group % 1000,
                100_000 + group,
            ])],
        };
        let prefixes = (i..i + take)
            .map(|k| {
                Prefix::V4(Prefix4 {
                    addr: BASE + ((k as u32) << 8),
                    len: 24,
                })
            })
            .collect();
        out.push((attrs, prefixes));
        i += take;
        group += 1;
    }
    out
}

/// Prefix length drawn with roughly the weights of the public IPv4 table.
fn realistic_len(rng: &mut Rng) -> u8 {
    match rng.below(1000) {
        0..=599 => 24,
        600..=699 => 23,
        700..=799 => 22,
        800..=859 => 21,
        860..=909 => 20,
        910..=939 => 19,
        940..=959 => 18,
        960..=974 => 17,
        975..=989 => 16,
        _ => 15 - (rng.below(4) as u8),
    }
}

/// Full-table-like routes with `per_set` prefixes per attribute set.
fn realistic(
    n: usize,
    local_as: u32,
    next_hop: Ipv4Addr,
    per_set: std::ops::RangeInclusive<usize>,
) -> Workload {
    let (lo, span) = (*per_set.start(), per_set.end() - per_set.start() + 1);
    let mut rng = Rng::new(0x5EED_0001);
    let mut cursor: u64 = BASE as u64;
    let mut out = Vec::with_capacity(n / 2);
    let mut made = 0usize;
    let mut seen = std::collections::HashSet::with_capacity(n);
    while made < n {
        let size = (lo + rng.below(span as u64) as usize).min(n - made);
        let mut attrs = base_attrs(local_as, next_hop);
        let hops = 1 + rng.below(5) as usize;
        let mut path = vec![local_as];
        for _ in 0..hops {
            let hop = 1 + rng.below(400_000) as u32;
            // Keep clear of the 16-bit private range, where the lab's devices
            // under test live (an AS loop would reject the route there).
            path.push(if (64_512..=65_535).contains(&hop) {
                hop + 70_000
            } else {
                hop
            });
        }
        attrs.as_path = AsPath {
            segments: vec![AsSegment::Sequence(path)],
        };
        if rng.below(4) == 0 {
            attrs.med = Some(rng.below(1000) as u32);
        }
        for _ in 0..rng.below(4) {
            attrs
                .communities
                .push(((local_as & 0xffff) << 16) | rng.below(1000) as u32);
        }
        let mut prefixes = Vec::with_capacity(size);
        while prefixes.len() < size {
            let len = realistic_len(&mut rng);
            let block = 1u64 << (32 - len);
            cursor = cursor.div_ceil(block) * block;
            if cursor + block > 0xDF00_0000 {
                // Past about 490k prefixes the space is used up and the
                // cursor starts over: later prefixes overlap earlier ones
                // (more or less specific), but an exact repeat is skipped
                // so that the workload holds `n` distinct prefixes.
                cursor = BASE as u64;
            }
            // Skip what BGP speakers discard as martians (host and link
            // scope): 127.0.0.0/8 and 169.254.0.0/16.
            if (0x7F00_0000..0x8000_0000).contains(&cursor) {
                cursor = 0x8000_0000;
            }
            if cursor < 0xA9FF_0000 && cursor + block > 0xA9FE_0000 {
                cursor = 0xA9FF_0000u64.div_ceil(block) * block;
            }
            let p = Prefix::V4(Prefix4 {
                addr: cursor as u32,
                len,
            });
            cursor += block;
            if seen.insert(p) {
                prefixes.push(p);
            }
        }
        made += prefixes.len();
        out.push((attrs, prefixes));
    }
    out
}

/// Number of prefixes in a workload.
pub fn prefix_count(w: &Workload) -> usize {
    w.iter().map(|(_, p)| p.len()).sum()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn packed_has_500_per_set_and_unique_prefixes() {
        let w = generate(Kind::Packed, 10_250, 65001, Ipv4Addr::new(198, 18, 0, 1));
        assert_eq!(prefix_count(&w), 10_250);
        assert_eq!(w.len(), 21);
        assert!(w[..20].iter().all(|(_, p)| p.len() == 500));
        let set: HashSet<_> = w.iter().flat_map(|(_, p)| p.iter().copied()).collect();
        assert_eq!(set.len(), 10_250);
    }

    #[test]
    fn realistic_is_deterministic_unique_and_mixed() {
        let a = generate(Kind::Realistic, 50_000, 65001, Ipv4Addr::new(198, 18, 0, 1));
        let b = generate(Kind::Realistic, 50_000, 65001, Ipv4Addr::new(198, 18, 0, 1));
        assert_eq!(a, b);
        assert_eq!(prefix_count(&a), 50_000);
        let set: HashSet<_> = a.iter().flat_map(|(_, p)| p.iter().copied()).collect();
        assert_eq!(set.len(), 50_000, "prefixes must be unique");
        let per_set = 50_000.0 / a.len() as f64;
        assert!(
            (2.0..3.0).contains(&per_set),
            "prefixes per attribute set {per_set}"
        );
        let slash24 = set.iter().filter(|p| p.len() == 24).count() as f64 / 50_000.0;
        assert!((0.5..0.7).contains(&slash24), "share of /24s {slash24}");
    }

    #[test]
    fn dfz_has_two_to_four_per_set() {
        let w = generate(Kind::Dfz, 50_000, 65001, Ipv4Addr::new(198, 18, 0, 1));
        assert_eq!(prefix_count(&w), 50_000);
        assert!(w[..w.len() - 1]
            .iter()
            .all(|(_, p)| (2..=4).contains(&p.len())));
        let per_set = 50_000.0 / w.len() as f64;
        assert!((2.8..3.2).contains(&per_set), "prefixes per set {per_set}");
        let set: HashSet<_> = w.iter().flat_map(|(_, p)| p.iter().copied()).collect();
        assert_eq!(set.len(), 50_000, "prefixes must be unique");
    }

    /// A DUT in AS 64512..65535 (the lab uses 65000) must not see its own AS
    /// in a workload path, or it rejects those routes as AS loops.
    #[test]
    fn paths_avoid_the_16_bit_private_range() {
        for kind in [Kind::Packed, Kind::Realistic, Kind::Dfz] {
            let w = generate(kind, 1_000_000, 65001, Ipv4Addr::new(198, 18, 0, 1));
            for (a, _) in &w {
                let hops: Vec<u32> = a
                    .as_path
                    .segments
                    .iter()
                    .flat_map(|s| match s {
                        AsSegment::Sequence(v) | AsSegment::Set(v) => v.clone(),
                        _ => vec![],
                    })
                    .collect();
                assert!(
                    hops[1..].iter().all(|h| !(64_512..=65_535).contains(h)),
                    "{kind}: {hops:?}"
                );
            }
        }
    }

    #[test]
    fn realistic_million_is_unique() {
        let w = generate(
            Kind::Realistic,
            1_000_000,
            65001,
            Ipv4Addr::new(198, 18, 0, 1),
        );
        assert_eq!(prefix_count(&w), 1_000_000);
        let set: HashSet<_> = w.iter().flat_map(|(_, p)| p.iter().copied()).collect();
        assert_eq!(
            set.len(),
            1_000_000,
            "prefixes must be unique past the address-space wrap"
        );
        let martian = |p: &Prefix| match p {
            Prefix::V4(p) => {
                let (lo, hi) = (p.addr as u64, p.addr as u64 + (1u64 << (32 - p.len)) - 1);
                [
                    (0x7F00_0000u64, 0x7FFF_FFFFu64),
                    (0xA9FE_0000, 0xA9FE_FFFF),
                    (0, 0x00FF_FFFF),
                    (0xE000_0000, 0xFFFF_FFFF),
                ]
                .iter()
                .any(|(a, b)| lo <= *b && hi >= *a)
            }
            Prefix::V6(_) => true,
        };
        assert!(
            !set.iter().any(martian),
            "no prefix may overlap 0/8, 127/8, 169.254/16 or 224/3"
        );
    }
}
