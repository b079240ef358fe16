//! Validated ROA Payloads and RFC 6811 origin validation.
//!
//! A route is **valid** if some VRP covers its prefix (the VRP's prefix is
//! equal or less specific), allows its length (at most the VRP's max
//! length) and names its origin AS; **invalid** if VRPs cover it but none
//! matches; **not-found** if no VRP covers it. A VRP for AS 0 (RFC 6483
//! §4, RFC 7607) covers prefixes but never matches, so it makes them
//! invalid. A route whose AS_PATH ends in an AS_SET has no origin AS
//! (RFC 6811 §2: NONE), so no VRP matches it.

use holdfast_wire::{Prefix, Prefix4, Prefix6};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeSet, HashMap};
use std::fmt;
use std::net::{Ipv4Addr, Ipv6Addr};

/// One VRP: (prefix, max length, origin AS).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Vrp {
    pub prefix: Prefix,
    pub max_len: u8,
    pub asn: u32,
}

impl Vrp {
    /// A VRP from an RTR Prefix PDU's fields (host bits masked).
    pub fn v4(addr: Ipv4Addr, len: u8, max_len: u8, asn: u32) -> Option<Vrp> {
        Some(Vrp {
            prefix: Prefix::V4(Prefix4::new(addr, len)?),
            max_len,
            asn,
        })
    }

    pub fn v6(addr: Ipv6Addr, len: u8, max_len: u8, asn: u32) -> Option<Vrp> {
        Some(Vrp {
            prefix: Prefix::V6(Prefix6::new(addr, len)?),
            max_len,
            asn,
        })
    }
}

impl fmt::Display for Vrp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{} AS{}", self.prefix, self.max_len, self.asn)
    }
}

/// The RFC 6811 validation state of a route.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Validity {
    Valid,
    Invalid,
    NotFound,
}

impl Validity {
    pub fn as_str(self) -> &'static str {
        match self {
            Validity::Valid => "valid",
            Validity::Invalid => "invalid",
            Validity::NotFound => "not-found",
        }
    }
}

impl fmt::Display for Validity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An immutable VRP set indexed for validation: per family, the VRPs by
/// exact prefix, and a bit per prefix length present, so a lookup probes
/// only the lengths some VRP has.
#[derive(Debug, Clone, Default)]
pub struct VrpTable {
    by_prefix: HashMap<Prefix, Vec<(u8, u32)>>,
    lens4: u64,
    lens6: [u64; 3],
    count4: usize,
    count6: usize,
}

impl VrpTable {
    /// Builds the index of a set of VRPs.
    pub fn new<'a>(vrps: impl IntoIterator<Item = &'a Vrp>) -> VrpTable {
        let mut t = VrpTable::default();
        for v in vrps {
            let l = v.prefix.len() as usize;
            match v.prefix {
                Prefix::V4(_) => {
                    t.lens4 |= 1 << l;
                    t.count4 += 1;
                }
                Prefix::V6(_) => {
                    t.lens6[l / 64] |= 1 << (l % 64);
                    t.count6 += 1;
                }
            }
            t.by_prefix
                .entry(v.prefix)
                .or_default()
                .push((v.max_len, v.asn));
        }
        t
    }

    /// VRP counts (IPv4, IPv6).
    pub fn counts(&self) -> (usize, usize) {
        (self.count4, self.count6)
    }

    /// Whether some VRP's prefix is equal to or less specific than `prefix`.
    pub fn covers(&self, prefix: &Prefix) -> bool {
        self.validate(prefix, None) != Validity::NotFound
    }

    /// RFC 6811 §2: the state of a route for `prefix` whose origin AS is
    /// `origin` (`None`: NONE, e.g. an AS_PATH ending in an AS_SET).
    pub fn validate(&self, prefix: &Prefix, origin: Option<u32>) -> Validity {
        let mut covered = false;
        let plen = prefix.len();
        let mut check = |key: Prefix| {
            if let Some(v) = self.by_prefix.get(&key) {
                covered = true;
                if let Some(asn) = origin {
                    return v.iter().any(|&(max, a)| a != 0 && a == asn && plen <= max);
                }
            }
            false
        };
        match prefix {
            Prefix::V4(p) => {
                for l in 0..=p.len {
                    if self.lens4 & (1 << l) != 0 {
                        let k = Prefix4::new(p.ip(), l).map(Prefix::V4);
                        if k.is_some_and(&mut check) {
                            return Validity::Valid;
                        }
                    }
                }
            }
            Prefix::V6(p) => {
                for l in 0..=p.len {
                    let li = l as usize;
                    if self.lens6[li / 64] & (1 << (li % 64)) != 0 {
                        let k = Prefix6::new(p.ip(), l).map(Prefix::V6);
                        if k.is_some_and(&mut check) {
                            return Validity::Valid;
                        }
                    }
                }
            }
        }
        if covered {
            Validity::Invalid
        } else {
            Validity::NotFound
        }
    }
}

/// The prefixes whose validation may differ between two VRP sets: those
/// of the VRPs in one but not the other. A route's state can only change
/// if one of them covers it.
pub fn changed_prefixes(added: &[Vrp], removed: &[Vrp]) -> Vec<Prefix> {
    let s: BTreeSet<Prefix> = added.iter().chain(removed).map(|v| v.prefix).collect();
    s.into_iter().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> Prefix {
        s.parse().unwrap()
    }

    fn vrp(s: &str, max_len: u8, asn: u32) -> Vrp {
        Vrp {
            prefix: p(s),
            max_len,
            asn,
        }
    }

    #[test]
    fn rfc_6811_states() {
        let t = VrpTable::new(&[
            vrp("10.0.0.0/8", 16, 65001),
            vrp("10.1.0.0/16", 24, 65002),
            vrp("192.0.2.0/24", 24, 0),
            vrp("2001:db8::/32", 48, 65003),
        ]);
        assert_eq!(t.counts(), (3, 1));
        // Exact VRP and within max length.
        assert_eq!(t.validate(&p("10.0.0.0/8"), Some(65001)), Validity::Valid);
        assert_eq!(t.validate(&p("10.2.0.0/16"), Some(65001)), Validity::Valid);
        // Longer than max length: covered but no match.
        assert_eq!(
            t.validate(&p("10.2.3.0/24"), Some(65001)),
            Validity::Invalid
        );
        // Another covering VRP matches: valid.
        assert_eq!(t.validate(&p("10.1.3.0/24"), Some(65002)), Validity::Valid);
        // Wrong origin.
        assert_eq!(
            t.validate(&p("10.1.3.0/24"), Some(65009)),
            Validity::Invalid
        );
        // AS0 covers and never matches, not even origin 0.
        assert_eq!(t.validate(&p("192.0.2.0/24"), Some(0)), Validity::Invalid);
        assert_eq!(
            t.validate(&p("192.0.2.0/24"), Some(65001)),
            Validity::Invalid
        );
        // Not covered: a less specific prefix or elsewhere.
        assert_eq!(
            t.validate(&p("10.0.0.0/7"), Some(65001)),
            Validity::NotFound
        );
        assert_eq!(
            t.validate(&p("198.51.100.0/24"), Some(65001)),
            Validity::NotFound
        );
        // Origin NONE (AS_SET): covered, so invalid.
        assert_eq!(t.validate(&p("10.0.0.0/8"), None), Validity::Invalid);
        assert_eq!(t.validate(&p("198.51.100.0/24"), None), Validity::NotFound);
        // IPv6.
        assert_eq!(
            t.validate(&p("2001:db8:1::/48"), Some(65003)),
            Validity::Valid
        );
        assert_eq!(
            t.validate(&p("2001:db8:1:2::/64"), Some(65003)),
            Validity::Invalid
        );
        assert_eq!(
            t.validate(&p("2001:db9::/32"), Some(65003)),
            Validity::NotFound
        );
        // IPv4 VRPs never cover IPv6 routes and the reverse.
        assert_eq!(t.validate(&p("::/0"), Some(65001)), Validity::NotFound);
    }

    #[test]
    fn default_route_and_host_lengths() {
        let t = VrpTable::new(&[vrp("0.0.0.0/0", 32, 1), vrp("::/0", 128, 2)]);
        assert_eq!(t.validate(&p("203.0.113.7/32"), Some(1)), Validity::Valid);
        assert_eq!(t.validate(&p("203.0.113.7/32"), Some(2)), Validity::Invalid);
        assert_eq!(t.validate(&p("2001:db8::1/128"), Some(2)), Validity::Valid);
        let empty = VrpTable::default();
        assert_eq!(
            empty.validate(&p("10.0.0.0/8"), Some(1)),
            Validity::NotFound
        );
    }

    #[test]
    fn changed_prefixes_are_deduplicated() {
        let a = [vrp("10.0.0.0/8", 8, 1), vrp("10.0.0.0/8", 8, 2)];
        let r = [vrp("2001:db8::/32", 32, 1)];
        assert_eq!(
            changed_prefixes(&a, &r),
            vec![p("10.0.0.0/8"), p("2001:db8::/32")]
        );
    }
}
