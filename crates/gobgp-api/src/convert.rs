//! Pure conversions between GoBGP's API messages and holdfast's control
//! types (`holdfast_api`): a neighbour as a GoBGP `Peer`, a route as a
//! GoBGP `Path` (attributes packed in `google.protobuf.Any` the way
//! GoBGP's `apiutil.MarshalPathAttributes` packs them: type URL
//! `type.googleapis.com/apipb.<Message>`), and a GoBGP `Path` given to
//! `AddPath` as a route to originate.
//!
//! Attribute mapping (RFC 4271 §5, RFC 4760, RFC 1997, RFC 4360, RFC 8092):
//! ORIGIN → `OriginAttribute`, AS_PATH → `AsPathAttribute` (one
//! AS_SEQUENCE per run, `{…}` as AS_SET), NEXT_HOP → `NextHopAttribute`
//! (IPv4) or `MpReachNLRIAttribute` with the NLRI (IPv6), MED →
//! `MultiExitDiscAttribute`, LOCAL_PREF → `LocalPrefAttribute`,
//! COMMUNITIES → `CommunitiesAttribute`, LARGE_COMMUNITY →
//! `LargeCommunitiesAttribute`, EXTENDED_COMMUNITIES → `UnknownAttribute`
//! (type 16, the raw 8-octet values: GoBGP's typed extended-community
//! messages are not built).
//!
//! # Known issues
//! - Per-family route counters: `holdfast show neighbors` keeps one total
//!   per neighbour, so the whole count is reported on the neighbour's
//!   first family and 0 on the others (`gobgp neighbor` sums them; with
//!   `-a` the figures are those of the first family).
//! - Message counters: only the totals are known; the per-type ones
//!   (`Updates`, `Keepalives`, …) are 0.
//! - Route age is not kept by holdfast: paths carry the time of the
//!   request as their age.

use crate::apipb::{
    self, as_segment, family, peer_state, AfiSafi, AfiSafiConfig, AfiSafiState, AsPathAttribute,
    AsSegment, CommunitiesAttribute, Destination, Family, IpAddressPrefix,
    LargeCommunitiesAttribute, LargeCommunity, LocalPrefAttribute, Message, Messages,
    MpReachNlriAttribute, MultiExitDiscAttribute, NextHopAttribute, OriginAttribute, Path, Peer,
    PeerConf, PeerState, Queues, RouteReflector, RouteServer, Timers, TimersConfig, TimersState,
    UnknownAttribute,
};
use holdfast_api::{NeighborInfo, RibEntry, RouteSpec};
use prost_types::{Any, Timestamp};
use std::net::IpAddr;

/// What cannot be converted, said so that an operator can fix the request.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConvError {
    #[error("path has no NLRI")]
    NoNlri,
    #[error("unsupported NLRI {0:?}: only IPAddressPrefix (ipv4-unicast, ipv6-unicast) is")]
    UnsupportedNlri(String),
    #[error(
        "unsupported address family afi {afi} safi {safi}: only ipv4-unicast and ipv6-unicast are"
    )]
    UnsupportedFamily { afi: i32, safi: i32 },
    #[error("bad prefix {0:?}")]
    BadPrefix(String),
    #[error("bad next hop {0:?}")]
    BadNextHop(String),
    #[error("cannot decode attribute {0}: {1}")]
    Decode(String, String),
    #[error("unsupported path attribute {0} (holdfast originates ORIGIN, AS_PATH, NEXT_HOP, MED, LOCAL_PREF, COMMUNITIES, EXTENDED_COMMUNITIES and LARGE_COMMUNITY)")]
    UnsupportedAttribute(String),
}

const TYPE_PREFIX: &str = "type.googleapis.com/apipb.";

/// Packs `m` as GoBGP does (`anypb.New`).
pub fn pack<M: prost::Message>(name: &str, m: &M) -> Any {
    Any {
        type_url: format!("{TYPE_PREFIX}{name}"),
        value: m.encode_to_vec(),
    }
}

fn unpack<M: prost::Message + Default>(a: &Any, name: &str) -> Result<M, ConvError> {
    M::decode(a.value.as_slice()).map_err(|e| ConvError::Decode(name.to_string(), e.to_string()))
}

/// The message name of an `Any` (`apipb.OriginAttribute` → `OriginAttribute`).
fn any_name(a: &Any) -> &str {
    a.type_url.rsplit(['/', '.']).next().unwrap_or("")
}

pub fn ipv4_unicast() -> Family {
    Family {
        afi: family::Afi::Ip as i32,
        safi: family::Safi::Unicast as i32,
    }
}

pub fn ipv6_unicast() -> Family {
    Family {
        afi: family::Afi::Ip6 as i32,
        safi: family::Safi::Unicast as i32,
    }
}

/// Whether `prefix` (`10.0.0.0/8`, `2001:db8::/32`) is of `fam`; no
/// family (`None`) matches IPv4 and IPv6 unicast.
pub fn in_family(prefix: &str, fam: Option<&Family>) -> bool {
    let v6 = prefix.contains(':');
    match fam {
        None => true,
        Some(f) if f.safi != family::Safi::Unicast as i32 => false,
        Some(f) => (f.afi == family::Afi::Ip6 as i32) == v6,
    }
}

fn split_prefix(prefix: &str) -> Result<(IpAddr, u8), ConvError> {
    let bad = || ConvError::BadPrefix(prefix.to_string());
    let (a, l) = prefix.split_once('/').ok_or_else(bad)?;
    let addr: IpAddr = a.parse().map_err(|_| bad())?;
    let len: u8 = l.parse().map_err(|_| bad())?;
    let max = if addr.is_ipv4() { 32 } else { 128 };
    if len > max {
        return Err(bad());
    }
    Ok((addr, len))
}

/// The length of `prefix` when it covers `addr` (same family), for a
/// longest-match lookup of an address.
pub fn covers(prefix: &str, addr: &IpAddr) -> Option<u8> {
    let (net, len) = split_prefix(prefix).ok()?;
    let bits = |a: &IpAddr| -> Option<u128> {
        match a {
            IpAddr::V4(v) => Some(u128::from(u32::from(*v)) << 96),
            IpAddr::V6(v) => Some(u128::from(*v)),
        }
    };
    if net.is_ipv4() != addr.is_ipv4() {
        return None;
    }
    let mask = if len == 0 {
        0
    } else {
        u128::MAX << (128 - u32::from(len))
    };
    (bits(&net)? & mask == bits(addr)? & mask).then_some(len)
}

fn family_of(addr: &IpAddr) -> Family {
    if addr.is_ipv4() {
        ipv4_unicast()
    } else {
        ipv6_unicast()
    }
}

fn session_state(s: &str) -> peer_state::SessionState {
    use peer_state::SessionState as S;
    match s {
        "Idle" => S::Idle,
        "Connect" => S::Connect,
        "Active" => S::Active,
        "OpenSent" => S::Opensent,
        "OpenConfirm" => S::Openconfirm,
        "Established" => S::Established,
        _ => S::Unknown,
    }
}

fn family_from_name(name: &str) -> Option<Family> {
    match name {
        "ipv4-unicast" => Some(ipv4_unicast()),
        "ipv6-unicast" => Some(ipv6_unicast()),
        _ => None,
    }
}

/// A neighbour as GoBGP's `Peer`, every message `gobgp neighbor [ADDR]`
/// reads present. `now` is the Unix time of the request (seconds).
pub fn peer(n: &NeighborInfo, now: i64) -> Peer {
    let state = session_state(&n.state);
    let mut fams: Vec<Family> = n
        .families
        .iter()
        .filter_map(|f| family_from_name(f))
        .collect();
    if fams.is_empty() {
        fams.push(match n.address.parse::<IpAddr>() {
            Ok(a) => family_of(&a),
            Err(_) => ipv4_unicast(),
        });
    }
    let afi_safis = fams
        .into_iter()
        .enumerate()
        .map(|(i, f)| {
            let first = i == 0;
            AfiSafi {
                config: Some(AfiSafiConfig {
                    family: Some(f),
                    enabled: true,
                }),
                state: Some(AfiSafiState {
                    family: Some(f),
                    enabled: true,
                    received: if first { n.prefixes_received } else { 0 },
                    accepted: if first { n.prefixes_accepted } else { 0 },
                    advertised: if first { n.prefixes_advertised } else { 0 },
                }),
                ..AfiSafi::default()
            }
        })
        .collect();
    let since = n.uptime_secs.map(|u| Timestamp {
        seconds: now - u as i64,
        nanos: 0,
    });
    Peer {
        conf: Some(PeerConf {
            local_asn: n.local_as,
            neighbor_address: n.address.clone(),
            peer_asn: n.remote_as,
            vrf: if n.instance == "default" {
                String::new()
            } else {
                n.instance.clone()
            },
            ..PeerConf::default()
        }),
        state: Some(PeerState {
            local_asn: n.local_as,
            neighbor_address: n.address.clone(),
            peer_asn: n.remote_as,
            messages: Some(Messages {
                received: Some(Message {
                    total: n.msgs_in,
                    ..Message::default()
                }),
                sent: Some(Message {
                    total: n.msgs_out,
                    ..Message::default()
                }),
            }),
            queues: Some(Queues::default()),
            session_state: state as i32,
            admin_state: peer_state::AdminState::Up as i32,
            flops: n.dropped_count as u32,
            router_id: n.remote_id.clone().unwrap_or_default(),
            ..PeerState::default()
        }),
        timers: Some(Timers {
            config: Some(TimersConfig {
                hold_time: u64::from(n.hold_time),
                keepalive_interval: u64::from(n.keepalive),
                ..TimersConfig::default()
            }),
            state: Some(TimersState {
                hold_time: u64::from(n.hold_time),
                keepalive_interval: u64::from(n.keepalive),
                negotiated_hold_time: u64::from(n.hold_time),
                uptime: since,
                downtime: None,
                ..TimersState::default()
            }),
        }),
        route_reflector: Some(RouteReflector::default()),
        route_server: Some(RouteServer::default()),
        afi_safis,
        ..Peer::default()
    }
}

/// Parses holdfast's AS_PATH text (`65001 65002 {65003 65004}`).
fn as_segments(text: &str) -> Vec<AsSegment> {
    let mut out: Vec<AsSegment> = Vec::new();
    let mut seq: Vec<u32> = Vec::new();
    let mut set: Option<Vec<u32>> = None;
    for tok in text.split_whitespace() {
        let mut t = tok;
        if let Some(rest) = t.strip_prefix('{') {
            if !seq.is_empty() {
                out.push(AsSegment {
                    r#type: as_segment::Type::AsSequence as i32,
                    numbers: std::mem::take(&mut seq),
                });
            }
            set = Some(Vec::new());
            t = rest;
        }
        let close = t.ends_with('}');
        let t = t.trim_end_matches('}');
        for n in t.split(',').filter(|s| !s.is_empty()) {
            if let Ok(asn) = n.parse::<u32>() {
                match &mut set {
                    Some(s) => s.push(asn),
                    None => seq.push(asn),
                }
            }
        }
        if close {
            if let Some(s) = set.take() {
                out.push(AsSegment {
                    r#type: as_segment::Type::AsSet as i32,
                    numbers: s,
                });
            }
        }
    }
    if let Some(s) = set.take() {
        out.push(AsSegment {
            r#type: as_segment::Type::AsSet as i32,
            numbers: s,
        });
    }
    if !seq.is_empty() {
        out.push(AsSegment {
            r#type: as_segment::Type::AsSequence as i32,
            numbers: seq,
        });
    }
    out
}

fn parse_community(s: &str) -> Option<u32> {
    let (a, b) = s.split_once(':')?;
    Some((a.parse::<u16>().ok()? as u32) << 16 | b.parse::<u16>().ok()? as u32)
}

fn parse_large(s: &str) -> Option<LargeCommunity> {
    let mut it = s.split(':');
    let c = LargeCommunity {
        global_admin: it.next()?.parse().ok()?,
        local_data1: it.next()?.parse().ok()?,
        local_data2: it.next()?.parse().ok()?,
    };
    it.next().is_none().then_some(c)
}

fn parse_hex8(s: &str) -> Option<Vec<u8>> {
    if s.len() != 16 {
        return None;
    }
    (0..8)
        .map(|i| u8::from_str_radix(&s[2 * i..2 * i + 2], 16).ok())
        .collect()
}

/// A route of `holdfast show rib` as GoBGP's `Path`. `local_as` and
/// `router_id` name the source of locally originated routes.
pub fn path(e: &RibEntry, now: i64, local_as: u32) -> Result<Path, ConvError> {
    let (addr, len) = split_prefix(&e.prefix)?;
    let fam = family_of(&addr);
    let nlri = pack(
        "IPAddressPrefix",
        &IpAddressPrefix {
            prefix_len: u32::from(len),
            prefix: addr.to_string(),
        },
    );
    let mut pattrs = Vec::new();
    let origin = match e.origin.as_str() {
        "i" | "igp" => 0,
        "e" | "egp" => 1,
        _ => 2,
    };
    pattrs.push(pack("OriginAttribute", &OriginAttribute { origin }));
    pattrs.push(pack(
        "AsPathAttribute",
        &AsPathAttribute {
            segments: as_segments(&e.as_path),
        },
    ));
    match (&addr, &e.next_hop) {
        (IpAddr::V4(_), Some(nh)) if !nh.contains(':') => pattrs.push(pack(
            "NextHopAttribute",
            &NextHopAttribute {
                next_hop: nh.clone(),
            },
        )),
        (_, nh) => pattrs.push(pack(
            "MpReachNLRIAttribute",
            &MpReachNlriAttribute {
                family: Some(fam),
                next_hops: nh.iter().cloned().collect(),
                nlris: vec![nlri.clone()],
            },
        )),
    }
    if let Some(med) = e.med {
        pattrs.push(pack(
            "MultiExitDiscAttribute",
            &MultiExitDiscAttribute { med },
        ));
    }
    if let Some(local_pref) = e.local_pref {
        pattrs.push(pack(
            "LocalPrefAttribute",
            &LocalPrefAttribute { local_pref },
        ));
    }
    if !e.communities.is_empty() {
        pattrs.push(pack(
            "CommunitiesAttribute",
            &CommunitiesAttribute {
                communities: e
                    .communities
                    .iter()
                    .filter_map(|c| parse_community(c))
                    .collect(),
            },
        ));
    }
    if !e.ext_communities.is_empty() {
        let value: Vec<u8> = e
            .ext_communities
            .iter()
            .filter_map(|c| parse_hex8(c))
            .flatten()
            .collect();
        pattrs.push(pack(
            "UnknownAttribute",
            &UnknownAttribute {
                flags: 0xc0,
                r#type: 16,
                value,
            },
        ));
    }
    if !e.large_communities.is_empty() {
        pattrs.push(pack(
            "LargeCommunitiesAttribute",
            &LargeCommunitiesAttribute {
                communities: e
                    .large_communities
                    .iter()
                    .filter_map(|c| parse_large(c))
                    .collect(),
            },
        ));
    }
    let (neighbor_ip, source_asn) = match &e.peer {
        Some(p) => (p.clone(), 0),
        None => (String::new(), local_as),
    };
    Ok(Path {
        nlri: Some(nlri),
        pattrs,
        age: Some(Timestamp {
            seconds: now,
            nanos: 0,
        }),
        best: e.best,
        family: Some(fam),
        source_asn,
        neighbor_ip,
        is_from_external: e.peer.is_some(),
        ..Path::default()
    })
}

/// A withdrawn best path (`WatchEvent`): the NLRI alone, `is_withdraw`.
pub fn withdrawn_path(prefix: &str, now: i64) -> Result<Path, ConvError> {
    let (addr, len) = split_prefix(prefix)?;
    Ok(Path {
        nlri: Some(pack(
            "IPAddressPrefix",
            &IpAddressPrefix {
                prefix_len: u32::from(len),
                prefix: addr.to_string(),
            },
        )),
        is_withdraw: true,
        family: Some(family_of(&addr)),
        age: Some(Timestamp {
            seconds: now,
            nanos: 0,
        }),
        ..Path::default()
    })
}

/// Routes (sorted by prefix, as `show rib` gives them) grouped into
/// GoBGP destinations, one per prefix, best path first.
pub fn destinations(
    entries: &[RibEntry],
    now: i64,
    local_as: u32,
) -> Result<Vec<Destination>, ConvError> {
    let mut out: Vec<Destination> = Vec::new();
    for e in entries {
        let p = path(e, now, local_as)?;
        match out.last_mut() {
            Some(d) if d.prefix == e.prefix => {
                if p.best {
                    d.paths.insert(0, p);
                } else {
                    d.paths.push(p);
                }
            }
            _ => out.push(Destination {
                prefix: e.prefix.clone(),
                paths: vec![p],
            }),
        }
    }
    Ok(out)
}

/// The prefix of a GoBGP path's NLRI (`IPAddressPrefix`), as text.
pub fn path_prefix(p: &Path) -> Result<String, ConvError> {
    let nlri = p.nlri.as_ref().ok_or(ConvError::NoNlri)?;
    if any_name(nlri) != "IPAddressPrefix" {
        return Err(ConvError::UnsupportedNlri(nlri.type_url.clone()));
    }
    let n: IpAddressPrefix = unpack(nlri, "IPAddressPrefix")?;
    let text = format!("{}/{}", n.prefix, n.prefix_len);
    let (addr, _) = split_prefix(&text)?;
    if let Some(f) = &p.family {
        if f.safi != family::Safi::Unicast as i32 || family_of(&addr).afi != f.afi {
            return Err(ConvError::UnsupportedFamily {
                afi: f.afi,
                safi: f.safi,
            });
        }
    }
    Ok(text)
}

/// A GoBGP path given to `AddPath` as a route to originate.
pub fn route_spec(p: &Path) -> Result<RouteSpec, ConvError> {
    let prefix = path_prefix(p)?;
    let mut r = RouteSpec {
        prefix,
        ..RouteSpec::default()
    };
    let check_nh = |s: &str| -> Result<String, ConvError> {
        let a: IpAddr = s
            .parse()
            .map_err(|_| ConvError::BadNextHop(s.to_string()))?;
        if a.is_unspecified() {
            return Ok(String::new());
        }
        Ok(a.to_string())
    };
    for a in &p.pattrs {
        match any_name(a) {
            "OriginAttribute" => {
                let o: OriginAttribute = unpack(a, "OriginAttribute")?;
                r.origin = o.origin.min(2) as u8;
            }
            "AsPathAttribute" => {
                let x: AsPathAttribute = unpack(a, "AsPathAttribute")?;
                for s in x.segments {
                    if s.r#type != as_segment::Type::AsSequence as i32 {
                        return Err(ConvError::UnsupportedAttribute(
                            "AS_PATH with an AS_SET or confederation segment".into(),
                        ));
                    }
                    r.as_path.extend(s.numbers);
                }
            }
            "NextHopAttribute" => {
                let x: NextHopAttribute = unpack(a, "NextHopAttribute")?;
                let nh = check_nh(&x.next_hop)?;
                r.next_hop = (!nh.is_empty()).then_some(nh);
            }
            "MpReachNLRIAttribute" => {
                let x: MpReachNlriAttribute = unpack(a, "MpReachNLRIAttribute")?;
                if let Some(first) = x.next_hops.first() {
                    let nh = check_nh(first)?;
                    r.next_hop = (!nh.is_empty()).then_some(nh);
                }
            }
            "MultiExitDiscAttribute" => {
                let x: MultiExitDiscAttribute = unpack(a, "MultiExitDiscAttribute")?;
                r.med = Some(x.med);
            }
            "LocalPrefAttribute" => {
                let x: LocalPrefAttribute = unpack(a, "LocalPrefAttribute")?;
                r.local_pref = Some(x.local_pref);
            }
            "CommunitiesAttribute" => {
                let x: CommunitiesAttribute = unpack(a, "CommunitiesAttribute")?;
                r.communities.extend(x.communities);
            }
            "LargeCommunitiesAttribute" => {
                let x: LargeCommunitiesAttribute = unpack(a, "LargeCommunitiesAttribute")?;
                r.large_communities.extend(
                    x.communities
                        .iter()
                        .map(|c| (c.global_admin, c.local_data1, c.local_data2)),
                );
            }
            "UnknownAttribute" => {
                let x: UnknownAttribute = unpack(a, "UnknownAttribute")?;
                if x.r#type != 16 || !x.value.chunks_exact(8).remainder().is_empty() {
                    return Err(ConvError::UnsupportedAttribute(format!(
                        "unknown attribute type {}",
                        x.r#type
                    )));
                }
                for c in x.value.chunks_exact(8) {
                    let mut v = [0u8; 8];
                    v.copy_from_slice(c);
                    r.ext_communities.push(v);
                }
            }
            other => return Err(ConvError::UnsupportedAttribute(other.to_string())),
        }
    }
    if let Some(nh) = &r.next_hop {
        if nh.contains(':') != r.prefix.contains(':') {
            return Err(ConvError::BadNextHop(format!(
                "{nh} for {} (holdfast needs a next hop of the prefix's family)",
                r.prefix
            )));
        }
    }
    Ok(r)
}

/// GoBGP's `Global` for `GetBgp`.
pub fn global(asn: u32, router_id: &str) -> apipb::Global {
    apipb::Global {
        asn,
        router_id: router_id.to_string(),
        listen_port: 179,
        ..apipb::Global::default()
    }
}

#[cfg(test)]
#[path = "convert_tests.rs"]
mod tests;
