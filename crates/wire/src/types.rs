//! The BGP data model shared by every Holdfast crate.
//!
//! These are the decoded forms of RFC 4271 messages and the attributes of
//! RFC 1997, 4360, 4456, 4760, 6793 and 8092. They carry no I/O and no
//! encoding logic; `decode`/`encode` live beside them.
//!
//! Representation choices made for the hot path:
//! - Prefixes are plain integers (`Prefix4`, `Prefix6`), `Copy`, cheap to hash.
//! - `PathAttrs` is one flat struct so that it can be interned whole
//!   (`Arc<PathAttrs>` keyed by value) by the RIB.
//! - AS numbers are always 4 octets in memory; the 2-octet forms and
//!   AS4_PATH / AS4_AGGREGATOR merging of RFC 6793 are handled by the codec.

use serde::{Deserialize, Serialize};
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Address family identifier (IANA "Address Family Numbers").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Afi {
    Ipv4,
    Ipv6,
}

impl Afi {
    pub const fn code(self) -> u16 {
        match self {
            Afi::Ipv4 => 1,
            Afi::Ipv6 => 2,
        }
    }
    pub const fn from_code(c: u16) -> Option<Afi> {
        match c {
            1 => Some(Afi::Ipv4),
            2 => Some(Afi::Ipv6),
            _ => None,
        }
    }
}

/// Subsequent address family identifier. Only unicast is routed; others are
/// still representable so that capabilities can be parsed and ignored.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Safi {
    Unicast,
    Multicast,
    Other(u8),
}

impl Safi {
    pub const fn code(self) -> u8 {
        match self {
            Safi::Unicast => 1,
            Safi::Multicast => 2,
            Safi::Other(c) => c,
        }
    }
    pub const fn from_code(c: u8) -> Safi {
        match c {
            1 => Safi::Unicast,
            2 => Safi::Multicast,
            c => Safi::Other(c),
        }
    }
}

/// An (AFI, SAFI) pair as negotiated by the multiprotocol capability.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Family {
    pub afi: Afi,
    pub safi: Safi,
}

impl Family {
    pub const IPV4_UNICAST: Family = Family {
        afi: Afi::Ipv4,
        safi: Safi::Unicast,
    };
    pub const IPV6_UNICAST: Family = Family {
        afi: Afi::Ipv6,
        safi: Safi::Unicast,
    };
}

/// An IPv4 prefix. `addr` is host-order with bits beyond `len` zeroed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Prefix4 {
    pub addr: u32,
    pub len: u8,
}

/// An IPv6 prefix. `addr` is host-order with bits beyond `len` zeroed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Prefix6 {
    pub addr: u128,
    pub len: u8,
}

impl Prefix4 {
    /// Builds a prefix, masking host bits. Returns `None` if `len > 32`.
    pub fn new(addr: Ipv4Addr, len: u8) -> Option<Self> {
        if len > 32 {
            return None;
        }
        let raw = u32::from(addr);
        let mask = if len == 0 { 0 } else { u32::MAX << (32 - len) };
        Some(Prefix4 {
            addr: raw & mask,
            len,
        })
    }
    pub fn ip(&self) -> Ipv4Addr {
        Ipv4Addr::from(self.addr)
    }
    /// True if `other` is equal to or more specific than `self`.
    pub fn contains(&self, other: &Prefix4) -> bool {
        if other.len < self.len {
            return false;
        }
        let mask = if self.len == 0 {
            0
        } else {
            u32::MAX << (32 - self.len)
        };
        other.addr & mask == self.addr
    }
}

impl Prefix6 {
    /// Builds a prefix, masking host bits. Returns `None` if `len > 128`.
    pub fn new(addr: Ipv6Addr, len: u8) -> Option<Self> {
        if len > 128 {
            return None;
        }
        let raw = u128::from(addr);
        let mask = if len == 0 {
            0
        } else {
            u128::MAX << (128 - len)
        };
        Some(Prefix6 {
            addr: raw & mask,
            len,
        })
    }
    pub fn ip(&self) -> Ipv6Addr {
        Ipv6Addr::from(self.addr)
    }
    /// True if `other` is equal to or more specific than `self`.
    pub fn contains(&self, other: &Prefix6) -> bool {
        if other.len < self.len {
            return false;
        }
        let mask = if self.len == 0 {
            0
        } else {
            u128::MAX << (128 - self.len)
        };
        other.addr & mask == self.addr
    }
}

/// A unicast prefix of either family.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Prefix {
    V4(Prefix4),
    V6(Prefix6),
}

impl Prefix {
    pub fn afi(&self) -> Afi {
        match self {
            Prefix::V4(_) => Afi::Ipv4,
            Prefix::V6(_) => Afi::Ipv6,
        }
    }
    /// The prefix length in bits (a prefix is never "empty": /0 is the
    /// default route).
    #[allow(clippy::len_without_is_empty)]
    pub fn len(&self) -> u8 {
        match self {
            Prefix::V4(p) => p.len,
            Prefix::V6(p) => p.len,
        }
    }
}

impl fmt::Display for Prefix4 {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.ip(), self.len)
    }
}
impl fmt::Display for Prefix6 {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.ip(), self.len)
    }
}
impl fmt::Display for Prefix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Prefix::V4(p) => p.fmt(f),
            Prefix::V6(p) => p.fmt(f),
        }
    }
}

impl std::str::FromStr for Prefix {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (a, l) = s
            .split_once('/')
            .ok_or_else(|| format!("{s}: missing /len"))?;
        let len: u8 = l.parse().map_err(|_| format!("{s}: bad length"))?;
        match a.parse::<IpAddr>().map_err(|e| format!("{s}: {e}"))? {
            IpAddr::V4(v4) => Prefix4::new(v4, len).map(Prefix::V4),
            IpAddr::V6(v6) => Prefix6::new(v6, len).map(Prefix::V6),
        }
        .ok_or_else(|| format!("{s}: length out of range"))
    }
}

/// ORIGIN attribute values (RFC 4271 §5.1.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Origin {
    Igp = 0,
    Egp = 1,
    Incomplete = 2,
}

/// One AS_PATH segment (RFC 4271 §4.3; confederation types of RFC 5065).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum AsSegment {
    Set(Vec<u32>),
    Sequence(Vec<u32>),
    ConfedSequence(Vec<u32>),
    ConfedSet(Vec<u32>),
}

/// AS_PATH, always held with 4-octet AS numbers (RFC 6793).
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct AsPath {
    pub segments: Vec<AsSegment>,
}

impl AsPath {
    /// Path length for the decision process: a SET counts 1, confederation
    /// segments count 0 (RFC 4271 §9.1.2.2, RFC 5065 §5.3).
    pub fn decision_len(&self) -> usize {
        self.segments
            .iter()
            .map(|s| match s {
                AsSegment::Sequence(v) => v.len(),
                AsSegment::Set(_) => 1,
                _ => 0,
            })
            .sum()
    }
    /// The neighbouring AS: first AS of the first SEQUENCE segment.
    pub fn first_as(&self) -> Option<u32> {
        match self.segments.first() {
            Some(AsSegment::Sequence(v)) => v.first().copied(),
            _ => None,
        }
    }
    /// The originating AS: last AS of the last SEQUENCE segment.
    pub fn origin_as(&self) -> Option<u32> {
        match self.segments.last() {
            Some(AsSegment::Sequence(v)) => v.last().copied(),
            _ => None,
        }
    }
    pub fn contains(&self, asn: u32) -> bool {
        self.segments.iter().any(|s| match s {
            AsSegment::Set(v)
            | AsSegment::Sequence(v)
            | AsSegment::ConfedSequence(v)
            | AsSegment::ConfedSet(v) => v.contains(&asn),
        })
    }
    /// Prepends `asn` `count` times to the leading SEQUENCE, creating one
    /// (or splitting at 255 entries) as RFC 4271 §5.1.2 requires.
    pub fn prepend(&mut self, asn: u32, count: usize) {
        for _ in 0..count {
            match self.segments.first_mut() {
                Some(AsSegment::Sequence(v)) if v.len() < 255 => v.insert(0, asn),
                _ => self.segments.insert(0, AsSegment::Sequence(vec![asn])),
            }
        }
    }
    /// Every AS number in order, for AS-path matching.
    pub fn iter_asns(&self) -> impl Iterator<Item = u32> + '_ {
        self.segments.iter().flat_map(|s| match s {
            AsSegment::Set(v)
            | AsSegment::Sequence(v)
            | AsSegment::ConfedSequence(v)
            | AsSegment::ConfedSet(v) => v.iter().copied(),
        })
    }
}

/// RFC 8092 large community.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct LargeCommunity {
    pub global: u32,
    pub local1: u32,
    pub local2: u32,
}

/// Well-known communities of RFC 1997.
pub mod well_known {
    pub const NO_EXPORT: u32 = 0xFFFF_FF01;
    pub const NO_ADVERTISE: u32 = 0xFFFF_FF02;
    pub const NO_EXPORT_SUBCONFED: u32 = 0xFFFF_FF03;
}

/// An attribute the codec does not interpret, kept verbatim so that
/// optional transitive attributes pass through (RFC 4271 §5, §9.1.4).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct RawAttr {
    pub flags: u8,
    pub type_code: u8,
    pub value: Vec<u8>,
}

/// Path attributes of one UPDATE, excluding MP_REACH/MP_UNREACH NLRI which
/// are lifted into [`Update`]. The IPv6 next hop from MP_REACH_NLRI is kept
/// here (`mp_next_hop`) because it belongs to the route, not the message.
///
/// Lists keep wire order; `communities` etc. are not de-duplicated.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct PathAttrs {
    pub origin: Option<Origin>,
    pub as_path: AsPath,
    /// NEXT_HOP (type 3), IPv4 only.
    pub next_hop: Option<Ipv4Addr>,
    /// Next hop carried in MP_REACH_NLRI: global and optional link-local.
    pub mp_next_hop: Option<MpNextHop>,
    pub med: Option<u32>,
    pub local_pref: Option<u32>,
    pub atomic_aggregate: bool,
    /// AGGREGATOR: (AS, router id), 4-octet AS form.
    pub aggregator: Option<(u32, Ipv4Addr)>,
    pub communities: Vec<u32>,
    pub ext_communities: Vec<[u8; 8]>,
    pub large_communities: Vec<LargeCommunity>,
    /// ORIGINATOR_ID (RFC 4456).
    pub originator_id: Option<Ipv4Addr>,
    /// CLUSTER_LIST (RFC 4456).
    pub cluster_list: Vec<Ipv4Addr>,
    /// Unrecognised attributes kept for pass-through (optional transitive)
    /// or dropped on export (optional non-transitive).
    pub unknown: Vec<RawAttr>,
}

/// Next hop of MP_REACH_NLRI (RFC 4760 §3, RFC 2545 §3 for IPv6).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct MpNextHop {
    pub global: IpAddr,
    pub link_local: Option<Ipv6Addr>,
}

/// A decoded UPDATE (RFC 4271 §4.3) with MP_REACH/MP_UNREACH (RFC 4760)
/// folded in: `announced`/`withdrawn` hold prefixes of every family.
///
/// ```text
/// +-----------------------------------------------------+
/// |   Withdrawn Routes Length (2 octets)                |
/// +-----------------------------------------------------+
/// |   Withdrawn Routes (variable)                       |
/// +-----------------------------------------------------+
/// |   Total Path Attribute Length (2 octets)            |
/// +-----------------------------------------------------+
/// |   Path Attributes (variable)                        |
/// +-----------------------------------------------------+
/// |   Network Layer Reachability Information (variable) |
/// +-----------------------------------------------------+
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Update {
    pub withdrawn: Vec<Prefix>,
    /// Present when the UPDATE carries path attributes.
    pub attrs: Option<PathAttrs>,
    pub announced: Vec<Prefix>,
    /// Set when this UPDATE is an End-of-RIB marker (RFC 4724 §2).
    pub end_of_rib: Option<Family>,
}

/// One capability from the OPEN's Capabilities optional parameter
/// (RFC 5492).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Capability {
    /// RFC 4760, code 1.
    Multiprotocol(Family),
    /// RFC 2918, code 2.
    RouteRefresh,
    /// RFC 8950 extended next hop, code 5: (NLRI family, next-hop AFI).
    ExtendedNextHop(Vec<(Family, Afi)>),
    /// RFC 4724, code 64.
    GracefulRestart(GracefulRestartCap),
    /// RFC 6793, code 65.
    FourOctetAs(u32),
    /// RFC 7911, code 69: (family, send/receive bits).
    AddPath(Vec<(Family, u8)>),
    /// RFC 7313, code 70.
    EnhancedRouteRefresh,
    /// draft-walton-bgp-hostname, code 73 (FRR sends it).
    Fqdn { hostname: String, domain: String },
    /// Anything else, kept verbatim.
    Unknown { code: u8, value: Vec<u8> },
}

/// Graceful Restart capability value (RFC 4724 §3).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct GracefulRestartCap {
    /// The R bit: the sender has restarted.
    pub restart_state: bool,
    /// The N bit of RFC 8538 (notification support), kept for pass-through.
    pub notification: bool,
    /// Restart time in seconds (12 bits).
    pub restart_time: u16,
    /// Per family: the F bit (forwarding state preserved).
    pub families: Vec<(Family, bool)>,
}

/// OPEN message (RFC 4271 §4.2).
///
/// ```text
///  0                   1                   2                   3
///  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
/// +-+-+-+-+-+-+-+-+
/// |    Version    |
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// |     My Autonomous System      |
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// |           Hold Time           |
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// |                         BGP Identifier                        |
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// | Opt Parm Len  |
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// |             Optional Parameters (variable)                    |
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Open {
    pub version: u8,
    /// The 2-octet "My Autonomous System" field (AS_TRANS when > 65535).
    pub my_as: u16,
    pub hold_time: u16,
    pub bgp_id: Ipv4Addr,
    pub capabilities: Vec<Capability>,
}

impl Open {
    /// The speaker's real AS: from the 4-octet AS capability if present.
    pub fn asn(&self) -> u32 {
        self.capabilities
            .iter()
            .find_map(|c| match c {
                Capability::FourOctetAs(a) => Some(*a),
                _ => None,
            })
            .unwrap_or(self.my_as as u32)
    }
}

/// NOTIFICATION message (RFC 4271 §4.5).
///
/// ```text
///  0                   1                   2                   3
///  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// | Error code    | Error subcode |   Data (variable)             |
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Notification {
    pub code: u8,
    pub subcode: u8,
    pub data: Vec<u8>,
}

/// ROUTE-REFRESH message (RFC 2918 §3, RFC 7313 subtypes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct RouteRefresh {
    pub family: Family,
    /// 0 = normal request, 1 = BoRR, 2 = EoRR (RFC 7313).
    pub subtype: u8,
}

/// Message type codes (RFC 4271 §4.1, RFC 2918).
pub mod msg_type {
    pub const OPEN: u8 = 1;
    pub const UPDATE: u8 = 2;
    pub const NOTIFICATION: u8 = 3;
    pub const KEEPALIVE: u8 = 4;
    pub const ROUTE_REFRESH: u8 = 5;
}

/// Any BGP message. Messages are transient (decoded, used, dropped), so
/// the size difference between variants costs nothing worth a box.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[allow(clippy::large_enum_variant)]
pub enum Message {
    Open(Open),
    Update(Update),
    Notification(Notification),
    Keepalive,
    RouteRefresh(RouteRefresh),
}

/// Path attribute type codes.
pub mod attr_type {
    pub const ORIGIN: u8 = 1;
    pub const AS_PATH: u8 = 2;
    pub const NEXT_HOP: u8 = 3;
    pub const MULTI_EXIT_DISC: u8 = 4;
    pub const LOCAL_PREF: u8 = 5;
    pub const ATOMIC_AGGREGATE: u8 = 6;
    pub const AGGREGATOR: u8 = 7;
    pub const COMMUNITIES: u8 = 8;
    pub const ORIGINATOR_ID: u8 = 9;
    pub const CLUSTER_LIST: u8 = 10;
    pub const MP_REACH_NLRI: u8 = 14;
    pub const MP_UNREACH_NLRI: u8 = 15;
    pub const EXTENDED_COMMUNITIES: u8 = 16;
    pub const AS4_PATH: u8 = 17;
    pub const AS4_AGGREGATOR: u8 = 18;
    pub const LARGE_COMMUNITIES: u8 = 32;
}

/// Attribute flag bits (RFC 4271 §4.3).
pub mod attr_flags {
    pub const OPTIONAL: u8 = 0x80;
    pub const TRANSITIVE: u8 = 0x40;
    pub const PARTIAL: u8 = 0x20;
    pub const EXTENDED_LENGTH: u8 = 0x10;
}

/// The 2-octet AS used in place of a 4-octet one (RFC 6793).
pub const AS_TRANS: u16 = 23456;
