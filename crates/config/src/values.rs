//! Scalar value types of the configuration: each is written as a string in
//! TOML, parsed with `FromStr`, and serialised back with `Display`, so a
//! loaded [`Config`](crate::Config) re-serialises to the same syntax.

use holdfast_wire::{Afi, Family, LargeCommunity, Prefix, Prefix4, Prefix6};
use serde::de::{self, Deserializer, IntoDeserializer, Visitor};
use serde::{Deserialize, Serialize, Serializer};
use std::fmt;
use std::marker::PhantomData;
use std::net::{IpAddr, Ipv4Addr};
use std::str::FromStr;

/// Implements `Serialize` via `Display` and `Deserialize` via `FromStr`.
macro_rules! string_serde {
    ($t:ty, $expect:literal) => {
        impl Serialize for $t {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.collect_str(self)
            }
        }
        impl<'de> Deserialize<'de> for $t {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                struct V;
                impl<'de> Visitor<'de> for V {
                    type Value = $t;
                    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                        f.write_str($expect)
                    }
                    fn visit_str<E: de::Error>(self, v: &str) -> Result<$t, E> {
                        v.parse().map_err(E::custom)
                    }
                }
                d.deserialize_str(V)
            }
        }
    };
}

/// Deserialises either one value or a list of values into a `Vec`, so that
/// `community = "65000:1"` and `community = ["65000:1", "65000:2"]` both work.
pub(crate) fn one_or_many<'de, D, T>(d: D) -> Result<Vec<T>, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de>,
{
    struct V<T>(PhantomData<T>);
    impl<'de, T: Deserialize<'de>> Visitor<'de> for V<T> {
        type Value = Vec<T>;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a value or a list of values")
        }
        fn visit_str<E: de::Error>(self, v: &str) -> Result<Vec<T>, E> {
            T::deserialize(v.into_deserializer()).map(|t| vec![t])
        }
        fn visit_i64<E: de::Error>(self, v: i64) -> Result<Vec<T>, E> {
            T::deserialize(v.into_deserializer()).map(|t| vec![t])
        }
        fn visit_u64<E: de::Error>(self, v: u64) -> Result<Vec<T>, E> {
            T::deserialize(v.into_deserializer()).map(|t| vec![t])
        }
        fn visit_bool<E: de::Error>(self, v: bool) -> Result<Vec<T>, E> {
            T::deserialize(v.into_deserializer()).map(|t| vec![t])
        }
        fn visit_seq<A: de::SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<T>, A::Error> {
            let mut out = Vec::new();
            while let Some(t) = seq.next_element()? {
                out.push(t);
            }
            Ok(out)
        }
    }
    d.deserialize_any(V(PhantomData))
}

/// Parses a prefix and rejects host bits beyond the length, naming the
/// intended network so that a typo is not silently masked.
pub fn parse_prefix_strict(s: &str) -> Result<Prefix, String> {
    let p: Prefix = s.trim().parse()?;
    let (addr, _) = s
        .trim()
        .split_once('/')
        .ok_or_else(|| format!("{s}: missing /len"))?;
    let given: IpAddr = addr.parse().map_err(|e| format!("{s}: {e}"))?;
    let net = match p {
        Prefix::V4(p) => IpAddr::V4(p.ip()),
        Prefix::V6(p) => IpAddr::V6(p.ip()),
    };
    if given != net {
        return Err(format!("{s}: host bits set (did you mean {p}?)"));
    }
    Ok(p)
}

/// Serde adapter for a wire [`Prefix`] written as `"10.0.0.0/24"`.
pub(crate) mod prefix_str {
    use super::*;
    pub fn serialize<S: Serializer>(p: &Prefix, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(p)
    }
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Prefix, D::Error> {
        let s = String::deserialize(d)?;
        parse_prefix_strict(&s).map_err(de::Error::custom)
    }
}

/// The maximum prefix length of the prefix's family.
pub fn max_len(p: &Prefix) -> u8 {
    match p.afi() {
        Afi::Ipv4 => 32,
        Afi::Ipv6 => 128,
    }
}

/// The first `bits` bits of the prefix address, right-aligned in a `u128`
/// so that both families compare the same way.
pub(crate) fn leading_bits(p: &Prefix, bits: u8) -> u128 {
    let (addr, width) = match p {
        Prefix::V4(Prefix4 { addr, .. }) => (u128::from(*addr), 32),
        Prefix::V6(Prefix6 { addr, .. }) => (*addr, 128),
    };
    if bits == 0 {
        0
    } else {
        (addr << (128 - width)) >> (128 - bits)
    }
}

/// Which policy a neighbour's import or export uses, as in BIRD:
/// `"all"`, `"none"`, or the name of a `[[policy]]`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum PolicyRef {
    All,
    None,
    Named(String),
}

impl PolicyRef {
    /// The referenced policy's name, if any.
    pub fn name(&self) -> Option<&str> {
        match self {
            PolicyRef::Named(n) => Some(n),
            _ => None,
        }
    }
}

impl FromStr for PolicyRef {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "all" => Ok(PolicyRef::All),
            "none" => Ok(PolicyRef::None),
            "" => Err("policy reference must not be empty".into()),
            n => Ok(PolicyRef::Named(n.to_string())),
        }
    }
}

impl fmt::Display for PolicyRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PolicyRef::All => f.write_str("all"),
            PolicyRef::None => f.write_str("none"),
            PolicyRef::Named(n) => f.write_str(n),
        }
    }
}
string_serde!(PolicyRef, "\"all\", \"none\" or a policy name");

/// An RFC 1997 community: `"65000:100"` or a well-known name
/// (`no-export`, `no-advertise`, `no-export-subconfed`, `blackhole`,
/// `graceful-shutdown`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CommunityValue(pub u32);

impl FromStr for CommunityValue {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let v = match s {
            "no-export" => 0xFFFF_FF01,
            "no-advertise" => 0xFFFF_FF02,
            "no-export-subconfed" => 0xFFFF_FF03,
            "blackhole" => 0xFFFF_029A,
            "graceful-shutdown" => 0xFFFF_0000,
            _ => {
                let (a, b) = s
                    .split_once(':')
                    .ok_or_else(|| format!("{s:?}: expected \"ASN:VALUE\" with 16-bit parts"))?;
                let a: u16 = a
                    .parse()
                    .map_err(|_| format!("{s:?}: ASN part must be 0..=65535"))?;
                let b: u16 = b
                    .parse()
                    .map_err(|_| format!("{s:?}: value part must be 0..=65535"))?;
                (u32::from(a) << 16) | u32::from(b)
            }
        };
        Ok(CommunityValue(v))
    }
}
impl fmt::Display for CommunityValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.0 >> 16, self.0 & 0xFFFF)
    }
}
string_serde!(CommunityValue, "a community \"ASN:VALUE\"");

/// An RFC 8092 large community: `"65000:1:2"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LargeCommunityValue(pub LargeCommunity);

impl FromStr for LargeCommunityValue {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let parts: Vec<&str> = s.split(':').collect();
        let bad = || format!("{s:?}: expected \"GLOBAL:LOCAL1:LOCAL2\" with 32-bit parts");
        if parts.len() != 3 {
            return Err(bad());
        }
        let n = |i: usize| parts[i].parse::<u32>().map_err(|_| bad());
        Ok(LargeCommunityValue(LargeCommunity {
            global: n(0)?,
            local1: n(1)?,
            local2: n(2)?,
        }))
    }
}
impl fmt::Display for LargeCommunityValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}:{}", self.0.global, self.0.local1, self.0.local2)
    }
}
string_serde!(
    LargeCommunityValue,
    "a large community \"GLOBAL:LOCAL1:LOCAL2\""
);

/// An RFC 4360 extended community: `"rt:65000:1"`, `"soo:65000:1"`,
/// `"rt:192.0.2.1:7"`, `"rt:4200000000:7"` (4-octet AS, RFC 5668), or the
/// raw 8 octets as `"0x0002fde800000001"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ExtCommunityValue(pub [u8; 8]);

impl FromStr for ExtCommunityValue {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        if let Some(hex) = s.strip_prefix("0x") {
            if hex.len() != 16 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
                return Err(format!("{s:?}: hex form needs exactly 16 hex digits"));
            }
            let v = u64::from_str_radix(hex, 16).map_err(|e| format!("{s:?}: {e}"))?;
            return Ok(ExtCommunityValue(v.to_be_bytes()));
        }
        let bad = || {
            format!(
                "{s:?}: expected \"rt:ADMIN:VALUE\", \"soo:ADMIN:VALUE\" or \"0x\" + 16 hex digits"
            )
        };
        let (kind, rest) = s.split_once(':').ok_or_else(bad)?;
        let subtype = match kind {
            "rt" => 0x02,
            "soo" => 0x03,
            _ => return Err(bad()),
        };
        let (admin, val) = rest.rsplit_once(':').ok_or_else(bad)?;
        let mut b = [0u8; 8];
        b[1] = subtype;
        if let Ok(ip) = admin.parse::<Ipv4Addr>() {
            let v: u16 = val
                .parse()
                .map_err(|_| format!("{s:?}: value must be 0..=65535 with an IPv4 admin"))?;
            b[0] = 0x01;
            b[2..6].copy_from_slice(&ip.octets());
            b[6..8].copy_from_slice(&v.to_be_bytes());
        } else {
            let asn: u32 = admin.parse().map_err(|_| bad())?;
            if let Ok(asn16) = u16::try_from(asn) {
                let v: u32 = val
                    .parse()
                    .map_err(|_| format!("{s:?}: value must be 0..=4294967295"))?;
                b[0] = 0x00;
                b[2..4].copy_from_slice(&asn16.to_be_bytes());
                b[4..8].copy_from_slice(&v.to_be_bytes());
            } else {
                let v: u16 = val
                    .parse()
                    .map_err(|_| format!("{s:?}: value must be 0..=65535 with a 4-octet AS"))?;
                b[0] = 0x02;
                b[2..6].copy_from_slice(&asn.to_be_bytes());
                b[6..8].copy_from_slice(&v.to_be_bytes());
            }
        }
        Ok(ExtCommunityValue(b))
    }
}
impl fmt::Display for ExtCommunityValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let b = self.0;
        let kind = match b[1] {
            0x02 => "rt",
            0x03 => "soo",
            _ => "",
        };
        let be16 = |i: usize| u16::from_be_bytes([b[i], b[i + 1]]);
        let be32 = |i: usize| u32::from_be_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
        match (b[0], kind.is_empty()) {
            (0x00, false) => write!(f, "{kind}:{}:{}", be16(2), be32(4)),
            (0x01, false) => write!(
                f,
                "{kind}:{}:{}",
                Ipv4Addr::new(b[2], b[3], b[4], b[5]),
                be16(6)
            ),
            (0x02, false) if be32(2) > 0xFFFF => write!(f, "{kind}:{}:{}", be32(2), be16(6)),
            _ => write!(f, "0x{:016x}", u64::from_be_bytes(b)),
        }
    }
}
string_serde!(
    ExtCommunityValue,
    "an extended community \"rt:ADMIN:VALUE\" or hex"
);

/// A TCP MD5 key (RFC 2385). `Debug` does not print it.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Md5Key(pub String);

impl Md5Key {
    pub fn as_bytes(&self) -> &[u8] {
        self.0.as_bytes()
    }
}
impl fmt::Debug for Md5Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Md5Key(<redacted>)")
    }
}

/// A negotiable address family, written `"ipv4-unicast"` / `"ipv6-unicast"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum AfiSafi {
    Ipv4Unicast,
    Ipv6Unicast,
}

impl AfiSafi {
    pub fn family(self) -> Family {
        match self {
            AfiSafi::Ipv4Unicast => Family::IPV4_UNICAST,
            AfiSafi::Ipv6Unicast => Family::IPV6_UNICAST,
        }
    }
}

/// Where the NSR state store lives (`[nsr] store`): the type is the state
/// store's own, [`holdfast_nsr::StoreUrl`].
pub use holdfast_nsr::StoreUrl as NsrStore;
