//! Real messages captured from BIRD, FRR, ExaBGP and GoBGP (see
//! tests/fixtures/README.md).

use crate::common::*;
use holdfast_wire::*;
use std::net::{IpAddr, Ipv4Addr};

fn decode_all(name: &str) -> (bool, Vec<Message>) {
    let (_, four, msgs) = fixtures().into_iter().find(|f| f.0 == name).unwrap();
    let ctx = CodecCtx {
        four_octet_as: four,
        ibgp: false,
    };
    let out = msgs
        .iter()
        .map(|m| {
            assert_eq!(frame(m).unwrap(), Some((m[18], m.len())), "{name}");
            if m[18] == 2 {
                let o = decode_update(&m[19..], &ctx).unwrap();
                assert_eq!(o.action, Rfc7606Action::None, "{name}: {o:?}");
            }
            decode_message(m, &ctx).unwrap_or_else(|e| panic!("{name}: {e}"))
        })
        .collect();
    (four, out)
}

fn updates(msgs: &[Message]) -> Vec<&Update> {
    msgs.iter()
        .filter_map(|m| {
            if let Message::Update(u) = m {
                Some(u)
            } else {
                None
            }
        })
        .collect()
}

fn eors(msgs: &[Message]) -> Vec<Family> {
    updates(msgs).iter().filter_map(|u| u.end_of_rib).collect()
}

#[test]
fn every_fixture_decodes_and_reencodes() {
    for (name, four, msgs) in fixtures() {
        let ctx = CodecCtx {
            four_octet_as: four,
            ibgp: false,
        };
        for m in &msgs {
            let d = decode_message(m, &ctx).unwrap();
            let mut out = Vec::new();
            encode_message(&d, &ctx, &mut out);
            let again: Vec<Message> = split(&out)
                .into_iter()
                .map(|b| decode_message(b, &ctx).unwrap())
                .collect();
            assert_eq!(again, vec![d], "{name}");
        }
    }
}

#[test]
fn bird_open_and_updates() {
    let (_, msgs) = decode_all("bird-4oct.hex");
    let Message::Open(o) = &msgs[0] else { panic!() };
    assert_eq!(
        (o.asn(), o.hold_time, o.bgp_id),
        (65002, 240, Ipv4Addr::new(10, 0, 0, 2))
    );
    assert!(o
        .capabilities
        .contains(&Capability::Multiprotocol(Family::IPV6_UNICAST)));
    assert!(o
        .capabilities
        .iter()
        .any(|c| matches!(c, Capability::GracefulRestart(g) if g.restart_time == 120)));
    let u = updates(&msgs);
    let a = u[0].attrs.as_ref().unwrap();
    assert_eq!(
        a.as_path.segments,
        vec![AsSegment::Sequence(vec![65002, 4_200_000_001])]
    );
    assert_eq!(a.med, Some(50));
    assert_eq!(a.communities, vec![(65002 << 16) | 100]);
    assert_eq!(
        a.large_communities,
        vec![LargeCommunity {
            global: 4_200_000_001,
            local1: 1,
            local2: 2
        }]
    );
    let mut ann = u[0].announced.clone();
    ann.sort();
    assert_eq!(
        ann,
        vec![
            p("10.0.0.0/8"),
            p("192.0.2.0/24"),
            p("198.51.100.128/25"),
            p("203.0.113.0/24")
        ]
    );
    assert_eq!(
        eors(&msgs),
        vec![Family::IPV4_UNICAST, Family::IPV6_UNICAST]
    );
    let v6 = u
        .iter()
        .find(|u| u.announced.iter().any(|p| p.afi() == Afi::Ipv6))
        .unwrap();
    assert_eq!(
        v6.attrs.as_ref().unwrap().mp_next_hop.unwrap().global,
        "fd00::2".parse::<IpAddr>().unwrap()
    );
}

#[test]
fn two_octet_sessions_merge_as4_path() {
    for name in ["bird-2oct.hex", "exabgp-2oct.hex"] {
        let (four, msgs) = decode_all(name);
        assert!(!four);
        let a = updates(&msgs)[0].attrs.clone().unwrap();
        assert!(a.as_path.contains(4_200_000_001), "{name}: {:?}", a.as_path);
        assert!(!a.as_path.contains(AS_TRANS as u32), "{name}");
    }
    let (_, msgs) = decode_all("exabgp-2oct.hex");
    let a = updates(&msgs)[0].attrs.clone().unwrap();
    assert_eq!(
        a.aggregator,
        Some((4_200_000_002, Ipv4Addr::new(10, 9, 9, 9)))
    );
    // The same bytes seen raw (no AS4 merge) carry AS_TRANS.
    let (_, _, raw) = fixtures()
        .into_iter()
        .find(|f| f.0 == "exabgp-2oct.hex")
        .unwrap();
    let m = raw.iter().find(|m| m[18] == 2).unwrap();
    let o = decode_update(
        &m[19..],
        &CodecCtx {
            four_octet_as: false,
            ibgp: false,
        },
    )
    .unwrap();
    assert_eq!(
        o.update.attrs.unwrap().as_path.segments,
        vec![AsSegment::Sequence(vec![65004, 4_200_000_001])]
    );
}

#[test]
fn exabgp_all_attributes() {
    let (_, msgs) = decode_all("exabgp-4oct.hex");
    let a = updates(&msgs)[0].attrs.clone().unwrap();
    assert_eq!(a.origin, Some(Origin::Egp));
    assert!(a.atomic_aggregate);
    assert_eq!(
        a.communities,
        vec![(65004 << 16) | 1, well_known::NO_EXPORT]
    );
    assert_eq!(a.ext_communities, vec![[0, 2, 0xfd, 0xec, 0, 0, 0, 1]]);
    assert_eq!(
        eors(&msgs),
        vec![Family::IPV4_UNICAST, Family::IPV6_UNICAST]
    );
}

#[test]
fn frr_open_capabilities() {
    let (_, msgs) = decode_all("frr-4oct.hex");
    let Message::Open(o) = &msgs[0] else { panic!() };
    assert!(o.capabilities.contains(&Capability::Fqdn {
        hostname: "frrcap".into(),
        domain: String::new()
    }));
    assert!(o
        .capabilities
        .iter()
        .any(|c| matches!(c, Capability::AddPath(v) if v.len() == 2)));
    assert!(o
        .capabilities
        .iter()
        .any(|c| matches!(c, Capability::GracefulRestart(g) if g.restart_state && g.notification)));
    let u = updates(&msgs);
    assert_eq!(u.iter().map(|u| u.announced.len()).sum::<usize>(), 5);
}

#[test]
fn gobgp_as_set_and_extended_next_hop_cap() {
    let (_, msgs) = decode_all("gobgp-4oct.hex");
    let Message::Open(o) = &msgs[0] else { panic!() };
    assert!(o.capabilities.contains(&Capability::ExtendedNextHop(vec![(
        Family::IPV4_UNICAST,
        Afi::Ipv6
    )])));
    let u = updates(&msgs);
    let set = u
        .iter()
        .find(|u| u.announced == vec![p("203.0.113.0/24")])
        .unwrap();
    assert_eq!(
        set.attrs.as_ref().unwrap().as_path.segments,
        vec![
            AsSegment::Sequence(vec![65005, 4_200_000_001]),
            AsSegment::Set(vec![100, 200])
        ]
    );
}
