//! Path attribute decoding with RFC 7606 revised error handling, AS_PATH
//! (RFC 4271 §4.3, RFC 5065), RFC 6793 AS4_PATH/AS4_AGGREGATOR merging,
//! RFC 7607 AS 0 checks and MP_REACH/MP_UNREACH (RFC 4760).
//!
//! Path attribute TLV (RFC 4271 §4.3):
//!
//! ```text
//!  0                   1
//!  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5
//! +---------------+---------------+
//! |  Attr. Flags  |Attr. Type Code|
//! +---------------+---------------+
//! | Attr. Length (1 or 2 octets)  |
//! +-------------------------------+
//! |  Attr. Value (variable)       |
//! +-------------------------------+
//! ```

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use crate::error::{update_subcode, DecodeError, DecodeErrorKind, Rfc7606Action};
use crate::nlri::decode_prefixes;
use crate::types::{
    attr_flags, attr_type, Afi, AsPath, AsSegment, LargeCommunity, MpNextHop, Origin, PathAttrs,
    Prefix, RawAttr, AS_TRANS,
};
use crate::CodecCtx;

/// AS_PATH segment types (RFC 4271 §4.3, RFC 5065 §3).
pub(crate) mod seg_type {
    pub const AS_SET: u8 = 1;
    pub const AS_SEQUENCE: u8 = 2;
    pub const AS_CONFED_SEQUENCE: u8 = 3;
    pub const AS_CONFED_SET: u8 = 4;
}

/// Required Optional/Transitive bits for recognised attributes.
pub(crate) fn expected_flags(t: u8) -> Option<u8> {
    use attr_type::*;
    const WK: u8 = attr_flags::TRANSITIVE;
    const OPT: u8 = attr_flags::OPTIONAL;
    const OPT_T: u8 = attr_flags::OPTIONAL | attr_flags::TRANSITIVE;
    match t {
        ORIGIN | AS_PATH | NEXT_HOP | LOCAL_PREF | ATOMIC_AGGREGATE => Some(WK),
        MULTI_EXIT_DISC | ORIGINATOR_ID | CLUSTER_LIST | MP_REACH_NLRI | MP_UNREACH_NLRI => {
            Some(OPT)
        }
        AGGREGATOR | COMMUNITIES | EXTENDED_COMMUNITIES | AS4_PATH | AS4_AGGREGATOR
        | LARGE_COMMUNITIES => Some(OPT_T),
        _ => None,
    }
}

/// Accumulates the RFC 7606 verdict over all attributes (§3.e: the
/// strongest action wins).
#[derive(Debug, Default)]
pub(crate) struct Verdict {
    pub action: Option<Rfc7606Action>,
    pub discarded: Vec<u8>,
    pub reason: Option<String>,
}

impl Verdict {
    fn raise(&mut self, a: Rfc7606Action, t: u8, why: &str) {
        if self.action.map_or(true, |cur| a > cur) {
            self.action = Some(a);
            self.reason = Some(format!("attribute {t}: {why}"));
        }
    }
    pub(crate) fn discard(&mut self, t: u8, why: &str) {
        if !self.discarded.contains(&t) {
            self.discarded.push(t);
        }
        self.raise(Rfc7606Action::AttributeDiscard, t, why);
    }
    pub(crate) fn withdraw(&mut self, t: u8, why: &str) {
        self.raise(Rfc7606Action::TreatAsWithdraw, t, why);
    }
    pub(crate) fn action(&self) -> Rfc7606Action {
        self.action.unwrap_or(Rfc7606Action::None)
    }
}

/// Result of parsing the Path Attributes field.
#[derive(Debug, Default)]
pub(crate) struct Parsed {
    pub attrs: PathAttrs,
    /// An attribute other than MP_UNREACH_NLRI was present.
    pub any_path_attr: bool,
    pub has_as_path: bool,
    pub has_next_hop: bool,
    /// NEXT_HOP is syntactically fine but cannot be a host address.
    pub martian_next_hop: bool,
    /// Prefixes from MP_REACH_NLRI (IPv4/IPv6 unicast only).
    pub mp_announced: Vec<Prefix>,
    /// Prefixes from MP_UNREACH_NLRI (IPv4/IPv6 unicast only).
    pub mp_withdrawn: Vec<Prefix>,
    /// (AFI, SAFI) of an MP_UNREACH_NLRI carrying nothing else, when it was
    /// the only attribute: the End-of-RIB marker of RFC 4724 §2.
    pub eor: Option<(u16, u8)>,
}

fn mp_error(t: u8, raw: &[u8], reason: &'static str) -> DecodeError {
    DecodeError::update(
        update_subcode::OPTIONAL_ATTRIBUTE,
        raw.to_vec(),
        DecodeErrorKind::MalformedMpAttribute {
            type_code: t,
            reason,
        },
    )
}

fn be32(v: &[u8]) -> u32 {
    u32::from_be_bytes([v[0], v[1], v[2], v[3]])
}

fn ip4(v: &[u8]) -> Ipv4Addr {
    Ipv4Addr::new(v[0], v[1], v[2], v[3])
}

/// Parse the Path Attributes field. `Err` means session reset; softer
/// outcomes are accumulated in `verdict`.
pub(crate) fn parse_attrs(
    block: &[u8],
    ctx: &CodecCtx,
    verdict: &mut Verdict,
) -> Result<Parsed, DecodeError> {
    let mut p = Parsed::default();
    let mut seen = [false; 256];
    let mut count = 0usize;
    let mut as4_path: Option<AsPath> = None;
    let mut as4_aggregator: Option<(u32, Ipv4Addr)> = None;
    let mut i = 0;
    while i < block.len() {
        let rem = &block[i..];
        // RFC 7606 §4: too few octets for an attribute header, or an
        // attribute overrunning the field: treat-as-withdraw, and rely on the
        // Total Path Attribute Length to find the NLRI.
        let hlen = if rem[0] & attr_flags::EXTENDED_LENGTH != 0 {
            4
        } else {
            3
        };
        if rem.len() < hlen {
            verdict.withdraw(0, "truncated attribute header");
            break;
        }
        let flags = rem[0];
        let t = rem[1];
        let len = if hlen == 4 {
            u16::from_be_bytes([rem[2], rem[3]]) as usize
        } else {
            rem[2] as usize
        };
        let is_mp = t == attr_type::MP_REACH_NLRI || t == attr_type::MP_UNREACH_NLRI;
        if rem.len() - hlen < len {
            if is_mp {
                return Err(mp_error(
                    t,
                    rem,
                    "attribute overruns the path attributes field",
                ));
            }
            verdict.withdraw(t, "attribute length overruns the path attributes field");
            break;
        }
        let raw = &rem[..hlen + len];
        let v = &raw[hlen..];
        i += hlen + len;
        count += 1;
        if t != attr_type::MP_UNREACH_NLRI {
            p.any_path_attr = true;
        }
        // RFC 7606 §3.g: duplicates.
        if seen[t as usize] {
            if is_mp {
                return Err(DecodeError::update(
                    update_subcode::MALFORMED_ATTRIBUTE_LIST,
                    Vec::new(),
                    DecodeErrorKind::MalformedAttributeList(
                        "MP_REACH_NLRI or MP_UNREACH_NLRI appears twice",
                    ),
                ));
            }
            verdict.discard(t, "duplicate attribute");
            continue;
        }
        seen[t as usize] = true;
        // RFC 7606 §7.5: LOCAL_PREF from an external peer is discarded.
        if t == attr_type::LOCAL_PREF && !ctx.ibgp {
            verdict.discard(t, "LOCAL_PREF from an external peer");
            continue;
        }
        // RFC 6793 §4.1: a NEW speaker ignores AS4_* from a NEW speaker.
        if (t == attr_type::AS4_PATH || t == attr_type::AS4_AGGREGATOR) && ctx.four_octet_as {
            continue;
        }
        // RFC 7606 §3.c: wrong Optional/Transitive bits.
        if let Some(want) = expected_flags(t) {
            if flags & (attr_flags::OPTIONAL | attr_flags::TRANSITIVE) != want {
                if is_mp {
                    return Err(DecodeError::update(
                        update_subcode::ATTRIBUTE_FLAGS,
                        raw.to_vec(),
                        DecodeErrorKind::MalformedMpAttribute {
                            type_code: t,
                            reason: "attribute flags",
                        },
                    ));
                }
                verdict.withdraw(t, "attribute flags conflict with the type code");
                continue;
            }
        }
        let a = &mut p.attrs;
        match t {
            // RFC 7606 §7.1
            attr_type::ORIGIN => match v {
                [0] => a.origin = Some(Origin::Igp),
                [1] => a.origin = Some(Origin::Egp),
                [2] => a.origin = Some(Origin::Incomplete),
                _ => verdict.withdraw(t, "malformed ORIGIN"),
            },
            // RFC 7606 §7.2, RFC 7607 §2
            attr_type::AS_PATH => match decode_as_path(v, ctx.four_octet_as) {
                Some(path) if path.contains(0) => verdict.withdraw(t, "AS_PATH contains AS 0"),
                Some(path) => {
                    a.as_path = path;
                    p.has_as_path = true;
                }
                None => verdict.withdraw(t, "malformed AS_PATH"),
            },
            // RFC 7606 §7.3
            attr_type::NEXT_HOP => {
                if v.len() == 4 {
                    let nh = ip4(v);
                    p.martian_next_hop =
                        nh.is_unspecified() || nh.is_multicast() || nh.is_broadcast();
                    a.next_hop = Some(nh);
                    p.has_next_hop = true;
                } else {
                    verdict.withdraw(t, "NEXT_HOP length is not 4");
                }
            }
            // RFC 7606 §7.4
            attr_type::MULTI_EXIT_DISC if v.len() == 4 => a.med = Some(be32(v)),
            attr_type::MULTI_EXIT_DISC => verdict.withdraw(t, "MULTI_EXIT_DISC length is not 4"),
            // RFC 7606 §7.5 (internal peer)
            attr_type::LOCAL_PREF if v.len() == 4 => a.local_pref = Some(be32(v)),
            attr_type::LOCAL_PREF => verdict.withdraw(t, "LOCAL_PREF length is not 4"),
            // RFC 7606 §7.6
            attr_type::ATOMIC_AGGREGATE if v.is_empty() => a.atomic_aggregate = true,
            attr_type::ATOMIC_AGGREGATE => verdict.discard(t, "ATOMIC_AGGREGATE length is not 0"),
            // RFC 7606 §7.7, RFC 7607 §2
            attr_type::AGGREGATOR => {
                let agg = match (ctx.four_octet_as, v.len()) {
                    (true, 8) => Some((be32(v), ip4(&v[4..]))),
                    (false, 6) => Some((u16::from_be_bytes([v[0], v[1]]) as u32, ip4(&v[2..]))),
                    _ => None,
                };
                match agg {
                    Some((0, _)) => verdict.discard(t, "AGGREGATOR AS 0"),
                    Some(agg) => a.aggregator = Some(agg),
                    None => verdict.discard(t, "AGGREGATOR length"),
                }
            }
            // RFC 7606 §7.8
            attr_type::COMMUNITIES if !v.is_empty() && v.len() % 4 == 0 => {
                a.communities = v.chunks_exact(4).map(be32).collect();
            }
            attr_type::COMMUNITIES => verdict.withdraw(t, "COMMUNITIES length"),
            // RFC 7606 §7.9
            attr_type::ORIGINATOR_ID if v.len() == 4 => a.originator_id = Some(ip4(v)),
            attr_type::ORIGINATOR_ID => verdict.withdraw(t, "ORIGINATOR_ID length is not 4"),
            // RFC 7606 §7.10
            attr_type::CLUSTER_LIST if !v.is_empty() && v.len() % 4 == 0 => {
                a.cluster_list = v.chunks_exact(4).map(ip4).collect();
            }
            attr_type::CLUSTER_LIST => verdict.withdraw(t, "CLUSTER_LIST length"),
            // RFC 7606 §7.11, RFC 4760 §3
            attr_type::MP_REACH_NLRI => {
                a.mp_next_hop =
                    parse_mp_reach(v, &mut p.mp_announced).map_err(|r| mp_error(t, raw, r))?;
            }
            // RFC 4760 §4
            attr_type::MP_UNREACH_NLRI => {
                let (afi, safi) =
                    parse_mp_unreach(v, &mut p.mp_withdrawn).map_err(|r| mp_error(t, raw, r))?;
                if v.len() == 3 {
                    p.eor = Some((afi, safi));
                }
            }
            // RFC 7606 §7.14
            attr_type::EXTENDED_COMMUNITIES if !v.is_empty() && v.len() % 8 == 0 => {
                a.ext_communities = v
                    .chunks_exact(8)
                    .map(|c| c.try_into().unwrap_or([0; 8]))
                    .collect();
            }
            attr_type::EXTENDED_COMMUNITIES => verdict.withdraw(t, "EXTENDED_COMMUNITIES length"),
            // RFC 6793 §6: a malformed AS4_PATH / AS4_AGGREGATOR is discarded.
            attr_type::AS4_PATH => match decode_as_path(v, true) {
                Some(path)
                    if !path.contains(0)
                        && path
                            .segments
                            .iter()
                            .all(|s| matches!(s, AsSegment::Sequence(_) | AsSegment::Set(_))) =>
                {
                    as4_path = Some(path)
                }
                _ => verdict.discard(t, "malformed AS4_PATH"),
            },
            attr_type::AS4_AGGREGATOR if v.len() == 8 && be32(v) != 0 => {
                as4_aggregator = Some((be32(v), ip4(&v[4..])));
            }
            attr_type::AS4_AGGREGATOR => verdict.discard(t, "malformed AS4_AGGREGATOR"),
            // RFC 8092 §6
            attr_type::LARGE_COMMUNITIES if !v.is_empty() && v.len() % 12 == 0 => {
                a.large_communities = v
                    .chunks_exact(12)
                    .map(|c| LargeCommunity {
                        global: be32(c),
                        local1: be32(&c[4..]),
                        local2: be32(&c[8..]),
                    })
                    .collect();
            }
            attr_type::LARGE_COMMUNITIES => verdict.withdraw(t, "LARGE_COMMUNITIES length"),
            _ if flags & attr_flags::OPTIONAL == 0 => {
                return Err(DecodeError::update(
                    update_subcode::UNRECOGNIZED_WELL_KNOWN,
                    raw.to_vec(),
                    DecodeErrorKind::UnrecognizedWellKnownAttribute(t),
                ));
            }
            _ => {
                // RFC 4271 §5: keep unrecognised optional attributes; mark
                // transitive ones Partial for pass-through.
                let mut f =
                    flags & (attr_flags::OPTIONAL | attr_flags::TRANSITIVE | attr_flags::PARTIAL);
                if f & attr_flags::TRANSITIVE != 0 {
                    f |= attr_flags::PARTIAL;
                }
                a.unknown.push(RawAttr {
                    flags: f,
                    type_code: t,
                    value: v.to_vec(),
                });
            }
        }
    }
    if count != 1 {
        p.eor = None;
    }
    if !ctx.four_octet_as {
        merge_as4(&mut p.attrs, as4_path, as4_aggregator);
    }
    Ok(p)
}

// AS_PATH value: a sequence of segments (RFC 4271 §4.3, RFC 6793 §3):
// +-----------------+-----------------+--------------------------------+
// | segment type(1) | segment len (1) | AS numbers (2 or 4 octets each) |
// +-----------------+-----------------+--------------------------------+

/// Decode an AS_PATH value; `None` if malformed per RFC 7606 §7.2.
pub(crate) fn decode_as_path(mut v: &[u8], four_octet: bool) -> Option<AsPath> {
    let w = if four_octet { 4 } else { 2 };
    let mut segments = Vec::new();
    while !v.is_empty() {
        if v.len() < 2 || v[1] == 0 {
            return None;
        }
        let n = v[1] as usize;
        let body = v.get(2..2 + n * w)?;
        let asns: Vec<u32> = if four_octet {
            body.chunks_exact(4).map(be32).collect()
        } else {
            body.chunks_exact(2)
                .map(|c| u16::from_be_bytes([c[0], c[1]]) as u32)
                .collect()
        };
        segments.push(match v[0] {
            seg_type::AS_SET => AsSegment::Set(asns),
            seg_type::AS_SEQUENCE => AsSegment::Sequence(asns),
            seg_type::AS_CONFED_SEQUENCE => AsSegment::ConfedSequence(asns),
            seg_type::AS_CONFED_SET => AsSegment::ConfedSet(asns),
            _ => return None,
        });
        v = &v[2 + n * w..];
    }
    Some(AsPath { segments })
}

/// Path length as counted by RFC 6793 §4.2.3 (RFC 4271 §9.1.2.2 rules).
fn as_count(p: &AsPath) -> usize {
    p.decision_len()
}

/// RFC 6793 §4.2.3: reconstruct the 4-octet path and aggregator from a
/// 2-octet speaker's attributes.
pub(crate) fn merge_as4(
    a: &mut PathAttrs,
    as4_path: Option<AsPath>,
    as4_agg: Option<(u32, Ipv4Addr)>,
) {
    if let Some((asn, _)) = a.aggregator {
        if asn != AS_TRANS as u32 {
            return;
        }
        if let Some(agg) = as4_agg {
            a.aggregator = Some(agg);
        }
    }
    let Some(as4) = as4_path else { return };
    let n = as_count(&a.as_path);
    let n4 = as_count(&as4);
    if n < n4 {
        return;
    }
    let mut need = n - n4;
    let mut out: Vec<AsSegment> = Vec::new();
    for seg in &a.as_path.segments {
        match seg {
            // Leading, or adjacent to a prepended segment: always kept.
            AsSegment::ConfedSequence(_) | AsSegment::ConfedSet(_) => out.push(seg.clone()),
            AsSegment::Sequence(v) => {
                if need == 0 {
                    break;
                }
                let take = need.min(v.len());
                out.push(AsSegment::Sequence(v[..take].to_vec()));
                need -= take;
                if take < v.len() {
                    break;
                }
            }
            AsSegment::Set(_) => {
                if need == 0 {
                    break;
                }
                out.push(seg.clone());
                need -= 1;
            }
        }
    }
    // Join the two SEQUENCEs meeting at the junction; keep the rest as sent.
    let mut rest = as4.segments.into_iter();
    match (out.last_mut(), rest.next()) {
        (Some(AsSegment::Sequence(prev)), Some(AsSegment::Sequence(next))) => prev.extend(next),
        (_, Some(seg)) => out.push(seg),
        (_, None) => {}
    }
    out.extend(rest);
    a.as_path = AsPath { segments: out };
}

// MP_REACH_NLRI value (RFC 4760 §3):
// +---------------------------------------------------------+
// | Address Family Identifier (2 octets)                    |
// +---------------------------------------------------------+
// | Subsequent Address Family Identifier (1 octet)          |
// +---------------------------------------------------------+
// | Length of Next Hop Network Address (1 octet)            |
// +---------------------------------------------------------+
// | Network Address of Next Hop (variable)                  |
// +---------------------------------------------------------+
// | Reserved (1 octet)                                      |
// +---------------------------------------------------------+
// | Network Layer Reachability Information (variable)       |
// +---------------------------------------------------------+

/// Known unicast family of an (AFI, SAFI) pair; other families are skipped.
fn unicast_afi(afi: u16, safi: u8) -> Option<Afi> {
    if safi == 1 {
        Afi::from_code(afi)
    } else {
        None
    }
}

fn ip6(v: &[u8]) -> Ipv6Addr {
    let mut b = [0u8; 16];
    b.copy_from_slice(&v[..16]);
    Ipv6Addr::from(b)
}

/// Parse MP_REACH_NLRI, appending unicast prefixes. Returns the next hop for
/// IPv4/IPv6 unicast, `None` for families that are ignored.
pub(crate) fn parse_mp_reach(
    v: &[u8],
    out: &mut Vec<Prefix>,
) -> Result<Option<MpNextHop>, &'static str> {
    if v.len() < 5 {
        return Err("MP_REACH_NLRI too short");
    }
    let afi = u16::from_be_bytes([v[0], v[1]]);
    let nhl = v[3] as usize;
    let Some(nh) = v.get(4..4 + nhl) else {
        return Err("next hop overruns MP_REACH_NLRI");
    };
    if v.len() < 5 + nhl {
        return Err("MP_REACH_NLRI has no reserved octet");
    }
    let Some(fam) = unicast_afi(afi, v[2]) else {
        return Ok(None);
    };
    // RFC 2545 §3 (16 or 32 octets for IPv6), RFC 8950 (IPv6 next hop for
    // IPv4 NLRI).
    let hop = match (fam, nhl) {
        (Afi::Ipv4, 4) => MpNextHop {
            global: IpAddr::V4(ip4(nh)),
            link_local: None,
        },
        (_, 16) => MpNextHop {
            global: IpAddr::V6(ip6(nh)),
            link_local: None,
        },
        (_, 32) => MpNextHop {
            global: IpAddr::V6(ip6(nh)),
            link_local: Some(ip6(&nh[16..])),
        },
        _ => return Err("next hop length inconsistent with the AFI"),
    };
    decode_prefixes(fam, &v[5 + nhl..], out)?;
    Ok(Some(hop))
}

// MP_UNREACH_NLRI value (RFC 4760 §4):
// +---------------------------------------------------------+
// | Address Family Identifier (2 octets)                    |
// +---------------------------------------------------------+
// | Subsequent Address Family Identifier (1 octet)          |
// +---------------------------------------------------------+
// | Withdrawn Routes (variable)                             |
// +---------------------------------------------------------+

/// Parse MP_UNREACH_NLRI, appending unicast prefixes; returns (AFI, SAFI).
pub(crate) fn parse_mp_unreach(v: &[u8], out: &mut Vec<Prefix>) -> Result<(u16, u8), &'static str> {
    if v.len() < 3 {
        return Err("MP_UNREACH_NLRI too short");
    }
    let afi = u16::from_be_bytes([v[0], v[1]]);
    if let Some(fam) = unicast_afi(afi, v[2]) {
        decode_prefixes(fam, &v[3..], out)?;
    }
    Ok((afi, v[2]))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seq(v: &[u32]) -> AsSegment {
        AsSegment::Sequence(v.to_vec())
    }

    #[test]
    fn as_path_two_and_four_octet() {
        let v2 = [2, 3, 0, 1, 0, 2, 0x5b, 0xa0, 1, 1, 0, 9];
        let p = decode_as_path(&v2, false).unwrap();
        assert_eq!(
            p.segments,
            vec![seq(&[1, 2, 23456]), AsSegment::Set(vec![9])]
        );
        let v4 = [3, 1, 0, 1, 0, 0];
        assert_eq!(
            decode_as_path(&v4, true).unwrap().segments,
            vec![AsSegment::ConfedSequence(vec![65536])]
        );
        assert!(decode_as_path(&[], true).unwrap().segments.is_empty());
    }

    #[test]
    fn as_path_malformations() {
        assert!(
            decode_as_path(&[2, 0], true).is_none(),
            "zero segment length"
        );
        assert!(
            decode_as_path(&[2, 2, 0, 0, 0, 1], true).is_none(),
            "overrun"
        );
        assert!(
            decode_as_path(&[2, 1, 0, 1, 0], false).is_none(),
            "single trailing octet"
        );
        assert!(
            decode_as_path(&[5, 1, 0, 1], false).is_none(),
            "unknown type"
        );
    }

    #[test]
    fn as4_merge_rfc6793() {
        let t = AS_TRANS as u32;
        let mut a = PathAttrs {
            as_path: AsPath {
                segments: vec![seq(&[100, t, 200, t])],
            },
            ..Default::default()
        };
        merge_as4(
            &mut a,
            Some(AsPath {
                segments: vec![seq(&[70000, 200, 80000])],
            }),
            None,
        );
        assert_eq!(a.as_path.segments, vec![seq(&[100, 70000, 200, 80000])]);

        // AS4_PATH longer than AS_PATH is ignored.
        let mut a = PathAttrs {
            as_path: AsPath {
                segments: vec![seq(&[t])],
            },
            ..Default::default()
        };
        merge_as4(
            &mut a,
            Some(AsPath {
                segments: vec![seq(&[1, 70000])],
            }),
            None,
        );
        assert_eq!(a.as_path.segments, vec![seq(&[t])]);

        // Only the junction is joined; AS4_PATH segment boundaries stay.
        let mut a = PathAttrs {
            as_path: AsPath {
                segments: vec![seq(&[1, t, t])],
            },
            ..Default::default()
        };
        merge_as4(
            &mut a,
            Some(AsPath {
                segments: vec![seq(&[70000]), seq(&[70001])],
            }),
            None,
        );
        assert_eq!(a.as_path.segments, vec![seq(&[1, 70000]), seq(&[70001])]);

        // Leading confederation segment is kept.
        let mut a = PathAttrs {
            as_path: AsPath {
                segments: vec![AsSegment::ConfedSequence(vec![65001]), seq(&[t])],
            },
            ..Default::default()
        };
        merge_as4(
            &mut a,
            Some(AsPath {
                segments: vec![seq(&[70000])],
            }),
            None,
        );
        assert_eq!(
            a.as_path.segments,
            vec![AsSegment::ConfedSequence(vec![65001]), seq(&[70000])]
        );
    }

    #[test]
    fn as4_aggregator_rules() {
        let ip = Ipv4Addr::new(10, 0, 0, 1);
        let t = AS_TRANS as u32;
        let mut a = PathAttrs {
            aggregator: Some((t, ip)),
            as_path: AsPath {
                segments: vec![seq(&[t])],
            },
            ..Default::default()
        };
        merge_as4(
            &mut a,
            Some(AsPath {
                segments: vec![seq(&[70000])],
            }),
            Some((70000, ip)),
        );
        assert_eq!(a.aggregator, Some((70000, ip)));
        assert_eq!(a.as_path.segments, vec![seq(&[70000])]);
        // AGGREGATOR not AS_TRANS: AS4_AGGREGATOR and AS4_PATH ignored.
        let mut a = PathAttrs {
            aggregator: Some((65000, ip)),
            as_path: AsPath {
                segments: vec![seq(&[t])],
            },
            ..Default::default()
        };
        merge_as4(
            &mut a,
            Some(AsPath {
                segments: vec![seq(&[70000])],
            }),
            Some((70000, ip)),
        );
        assert_eq!(a.aggregator, Some((65000, ip)));
        assert_eq!(a.as_path.segments, vec![seq(&[t])]);
    }

    #[test]
    fn mp_reach_next_hops() {
        let mut out = Vec::new();
        let mut v = vec![0, 2, 1, 32];
        v.extend_from_slice(&"2001:db8::1".parse::<Ipv6Addr>().unwrap().octets());
        v.extend_from_slice(&"fe80::1".parse::<Ipv6Addr>().unwrap().octets());
        v.extend_from_slice(&[0, 32, 0x20, 1, 0xd, 0xb8]);
        let nh = parse_mp_reach(&v, &mut out).unwrap().unwrap();
        assert_eq!(nh.global, "2001:db8::1".parse::<IpAddr>().unwrap());
        assert_eq!(nh.link_local, Some("fe80::1".parse().unwrap()));
        assert_eq!(out, vec!["2001:db8::/32".parse().unwrap()]);
        assert!(parse_mp_reach(&[0, 2, 1, 4, 1, 2, 3, 4, 0], &mut out).is_err());
        assert!(parse_mp_reach(&[0, 2, 1, 16, 1, 2], &mut out).is_err());
        // Unknown SAFI: skipped, no error, no prefixes.
        let n = out.len();
        assert_eq!(
            parse_mp_reach(&[0, 1, 128, 4, 1, 2, 3, 4, 0, 0xff, 0xff], &mut out).unwrap(),
            None
        );
        assert_eq!(out.len(), n);
    }
}
