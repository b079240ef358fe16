//! Differential test against an independent decoder, bgpkit-parser: decode
//! generated and captured UPDATEs with both and compare prefixes and the
//! attributes both model.

use crate::common::*;
use crate::roundtrip::rich_attrs;
use bgpkit_parser::models::{
    AsPathSegment, AsnLength, BgpMessage, Community, MetaCommunity, NextHopAddress,
};
use bgpkit_parser::parser::bgp::parse_bgp_message;
use holdfast_wire::*;
use std::net::{IpAddr, Ipv4Addr};

/// What both decoders can express, in comparable form.
#[derive(Debug, PartialEq)]
struct View {
    announced: Vec<String>,
    withdrawn: Vec<String>,
    origin: Option<u8>,
    as_path: Vec<(u8, Vec<u32>)>,
    next_hop: Option<IpAddr>,
    med: Option<u32>,
    local_pref: Option<u32>,
    atomic: bool,
    aggregator: Option<(u32, Ipv4Addr)>,
    communities: Vec<u32>,
    large: Vec<(u32, u32, u32)>,
    ext_count: usize,
}

fn sorted(mut v: Vec<String>) -> Vec<String> {
    v.sort();
    v
}

fn ours(msg: &[u8], ctx: &CodecCtx) -> View {
    let Message::Update(u) = decode_message(msg, ctx).unwrap() else {
        panic!("not an update")
    };
    let a = u.attrs.unwrap_or_default();
    View {
        announced: sorted(u.announced.iter().map(|p| p.to_string()).collect()),
        withdrawn: sorted(u.withdrawn.iter().map(|p| p.to_string()).collect()),
        origin: a.origin.map(|o| o as u8),
        as_path: a
            .as_path
            .segments
            .iter()
            .map(|s| match s {
                AsSegment::Set(v) => (1, v.clone()),
                AsSegment::Sequence(v) => (2, v.clone()),
                AsSegment::ConfedSequence(v) => (3, v.clone()),
                AsSegment::ConfedSet(v) => (4, v.clone()),
            })
            .collect(),
        next_hop: a
            .next_hop
            .map(IpAddr::V4)
            .or(a.mp_next_hop.map(|n| n.global)),
        med: a.med,
        local_pref: a.local_pref,
        atomic: a.atomic_aggregate,
        aggregator: a.aggregator,
        communities: a.communities.clone(),
        large: a
            .large_communities
            .iter()
            .map(|l| (l.global, l.local1, l.local2))
            .collect(),
        ext_count: a.ext_communities.len(),
    }
}

fn theirs(msg: &[u8], four: bool) -> View {
    let len = if four {
        AsnLength::Bits32
    } else {
        AsnLength::Bits16
    };
    let mut b = bytes::Bytes::copy_from_slice(msg);
    let BgpMessage::Update(u) = parse_bgp_message(&mut b, false, &len).unwrap() else {
        panic!("not an update")
    };
    let at = &u.attributes;
    let mut announced: Vec<String> = u
        .announced_prefixes
        .iter()
        .map(|p| p.prefix.to_string())
        .collect();
    let mut withdrawn: Vec<String> = u
        .withdrawn_prefixes
        .iter()
        .map(|p| p.prefix.to_string())
        .collect();
    let mut next_hop = at.next_hop();
    if let Some(n) = at.get_reachable_nlri() {
        announced.extend(n.prefixes.iter().map(|p| p.prefix.to_string()));
        next_hop = next_hop.or(match n.next_hop {
            Some(NextHopAddress::Ipv4(a)) => Some(IpAddr::V4(a)),
            Some(NextHopAddress::Ipv6(a)) | Some(NextHopAddress::Ipv6LinkLocal(a, _)) => {
                Some(IpAddr::V6(a))
            }
            _ => None,
        });
    }
    if let Some(n) = at.get_unreachable_nlri() {
        withdrawn.extend(n.prefixes.iter().map(|p| p.prefix.to_string()));
    }
    let present = |t: u8| at.iter().any(|v| u8::from(v.attr_type()) == t);
    let mut communities = Vec::new();
    let mut large = Vec::new();
    let mut ext_count = 0;
    for c in at.iter_communities() {
        match c {
            MetaCommunity::Plain(Community::NoExport) => communities.push(well_known::NO_EXPORT),
            MetaCommunity::Plain(Community::NoAdvertise) => {
                communities.push(well_known::NO_ADVERTISE)
            }
            MetaCommunity::Plain(Community::NoExportSubConfed) => {
                communities.push(well_known::NO_EXPORT_SUBCONFED)
            }
            MetaCommunity::Plain(Community::Custom(asn, v)) => {
                communities.push((asn.to_u32() << 16) | v as u32)
            }
            MetaCommunity::Large(l) => {
                large.push((l.global_admin, l.local_data[0], l.local_data[1]))
            }
            MetaCommunity::Extended(_) | MetaCommunity::Ipv6Extended(_) => ext_count += 1,
        }
    }
    View {
        announced: sorted(announced),
        withdrawn: sorted(withdrawn),
        origin: present(1).then(|| at.origin() as u8),
        as_path: at
            .effective_as_path()
            .map(|p| {
                p.segments
                    .iter()
                    .map(|s| match s {
                        AsPathSegment::AsSet(v) => (1, v.iter().map(|a| a.to_u32()).collect()),
                        AsPathSegment::AsSequence(v) => (2, v.iter().map(|a| a.to_u32()).collect()),
                        AsPathSegment::ConfedSequence(v) => {
                            (3, v.iter().map(|a| a.to_u32()).collect())
                        }
                        AsPathSegment::ConfedSet(v) => (4, v.iter().map(|a| a.to_u32()).collect()),
                    })
                    .collect()
            })
            .unwrap_or_default(),
        next_hop,
        med: at.multi_exit_discriminator(),
        local_pref: at.local_preference(),
        atomic: at.atomic_aggregate(),
        aggregator: at.aggregator().map(|(a, id)| (a.to_u32(), id)),
        communities,
        large,
        ext_count,
    }
}

fn generated(ctx: &CodecCtx) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let mut a = rich_attrs();
    a.unknown.clear();
    a.as_path.segments.truncate(1);
    let block = encode_attrs(&a, ctx);
    pack_announce(&block, Afi::Ipv4, None, &v4_24s(1500), &mut out);
    let mut prefixes: Vec<Prefix> = (0..=32u8)
        .map(|l| Prefix::V4(Prefix4::new(Ipv4Addr::new(203, 0, 113, 77), l).unwrap()))
        .collect();
    // No ::/0: bgpkit-parser treats an MP NLRI starting with a 0 octet as
    // ADD-PATH (its heuristic in parse_nlri_list) and misparses it.
    prefixes.extend(
        (1..=128u8)
            .map(|l| Prefix::V6(Prefix6::new("2001:db8:aaaa::1".parse().unwrap(), l).unwrap())),
    );
    pack_announce(&block, Afi::Ipv4, None, &prefixes, &mut out);
    let nh = MpNextHop {
        global: "2001:db8::1".parse().unwrap(),
        link_local: Some("fe80::1".parse().unwrap()),
    };
    a.next_hop = None;
    let block6 = encode_attrs(&a, ctx);
    pack_announce(&block6, Afi::Ipv6, Some(&nh), &prefixes, &mut out);
    pack_announce(&block6, Afi::Ipv6, Some(&nh), &v6_48s(900), &mut out);
    pack_withdraw(&prefixes, &mut out);
    pack_withdraw(&v4_24s(1200), &mut out);
    split(&out).into_iter().map(<[u8]>::to_vec).collect()
}

#[test]
fn matches_bgpkit_on_generated_updates() {
    for four in [true, false] {
        let ctx = CodecCtx {
            four_octet_as: four,
            ibgp: true,
        };
        let msgs = generated(&ctx);
        assert!(msgs.len() > 8);
        for m in &msgs {
            assert_eq!(ours(m, &ctx), theirs(m, four), "four={four}");
        }
    }
}

#[test]
fn matches_bgpkit_on_fixtures() {
    let mut n = 0;
    for (name, four, msgs) in fixtures() {
        let ctx = CodecCtx {
            four_octet_as: four,
            ibgp: false,
        };
        for m in msgs.iter().filter(|m| m[18] == 2) {
            assert_eq!(ours(m, &ctx), theirs(m, four), "{name}");
            n += 1;
        }
    }
    assert!(n >= 20, "{n}");
}
