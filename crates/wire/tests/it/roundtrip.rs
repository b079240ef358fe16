//! Encode → decode == original, for every message type and the packers.

use crate::common::*;
use holdfast_wire::*;
use std::net::{IpAddr, Ipv4Addr};

const CTX4: CodecCtx = CodecCtx {
    four_octet_as: true,
    ibgp: true,
};
const CTX2: CodecCtx = CodecCtx {
    four_octet_as: false,
    ibgp: true,
};

pub fn rich_attrs() -> PathAttrs {
    PathAttrs {
        origin: Some(Origin::Incomplete),
        as_path: AsPath {
            segments: vec![
                AsSegment::Sequence(vec![65001, 4_200_000_001, 23456, 7]),
                AsSegment::Set(vec![64512, 4_200_000_002]),
            ],
        },
        next_hop: Some(Ipv4Addr::new(192, 0, 2, 1)),
        mp_next_hop: None,
        med: Some(77),
        local_pref: Some(300),
        atomic_aggregate: true,
        aggregator: Some((4_200_000_003, Ipv4Addr::new(10, 1, 1, 1))),
        communities: vec![(65001 << 16) | 5, well_known::NO_EXPORT],
        ext_communities: vec![[0, 2, 0xfd, 0xe9, 0, 0, 0, 9]],
        large_communities: vec![LargeCommunity {
            global: 4_200_000_001,
            local1: 7,
            local2: 8,
        }],
        originator_id: Some(Ipv4Addr::new(10, 0, 0, 9)),
        cluster_list: vec![Ipv4Addr::new(10, 0, 0, 1), Ipv4Addr::new(10, 0, 0, 2)],
        unknown: vec![
            RawAttr {
                flags: 0xe0,
                type_code: 35,
                value: vec![0, 0, 0xfd, 0xe9],
            },
            RawAttr {
                flags: 0x80,
                type_code: 11,
                value: vec![1],
            },
        ],
    }
}

fn nh6() -> MpNextHop {
    MpNextHop {
        global: IpAddr::V6("2001:db8::1".parse().unwrap()),
        link_local: Some("fe80::1".parse().unwrap()),
    }
}

fn merged(us: &[Update]) -> (Vec<Prefix>, Vec<Prefix>) {
    let a = us
        .iter()
        .flat_map(|u| u.announced.iter().copied())
        .collect();
    let w = us
        .iter()
        .flat_map(|u| u.withdrawn.iter().copied())
        .collect();
    (a, w)
}

#[test]
fn attrs_round_trip_both_as_widths() {
    for ctx in [CTX4, CTX2] {
        let a = rich_attrs();
        let block = encode_attrs(&a, &ctx);
        let mut out = Vec::new();
        assert_eq!(
            pack_announce(&block, Afi::Ipv4, None, &[p("10.0.0.0/8")], &mut out),
            1
        );
        let o = decode_update(&out[19..], &ctx).unwrap();
        assert_eq!(o.action, Rfc7606Action::None, "{ctx:?}");
        let mut want = a.clone();
        // Unknown attributes come back in type order.
        want.unknown.sort_by_key(|r| r.type_code);
        assert_eq!(o.update.attrs.unwrap(), want, "{ctx:?}");
    }
}

#[test]
fn two_octet_encoding_uses_as_trans_and_as4_attrs() {
    let block = encode_attrs(&rich_attrs(), &CTX2);
    let types: Vec<u8> = {
        let mut v = Vec::new();
        let mut i = 0;
        while i < block.len() {
            let ext = block[i] & 0x10 != 0;
            let len = if ext {
                u16::from_be_bytes([block[i + 2], block[i + 3]]) as usize
            } else {
                block[i + 2] as usize
            };
            v.push(block[i + 1]);
            i += if ext { 4 } else { 3 } + len;
        }
        v
    };
    assert_eq!(
        types,
        vec![1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 16, 17, 18, 32, 35],
        "ascending type order"
    );
    // AS_PATH: SEQUENCE of 4 two-octet ASes, the 4-octet one as AS_TRANS.
    assert_eq!(
        &block[4..23],
        &[
            0x40, 2, 16, 2, 4, 0xfd, 0xe9, 0x5b, 0xa0, 0x5b, 0xa0, 0, 7, 1, 2, 0xfc, 0x00, 0x5b,
            0xa0
        ]
    );
}

#[test]
fn extended_length_only_when_needed() {
    let mut a = PathAttrs {
        origin: Some(Origin::Igp),
        ..Default::default()
    };
    a.communities = (0..63).collect();
    let block = encode_attrs(&a, &CTX4);
    assert_eq!(block[7..10], [0xc0, 8, 252]);
    a.communities = (0..64).collect();
    let block = encode_attrs(&a, &CTX4);
    assert_eq!(block[7..11], [0xd0, 8, 1, 0]);
    let mut out = Vec::new();
    pack_announce(
        &block,
        Afi::Ipv6,
        Some(&nh6()),
        &[p("2001:db8::/32")],
        &mut out,
    );
    assert_eq!(
        decode_update(&out[19..], &CTX4)
            .unwrap()
            .update
            .attrs
            .unwrap()
            .communities
            .len(),
        64
    );
}

#[test]
fn pack_v4_many_messages() {
    let prefixes = v4_24s(5000);
    let block = encode_attrs(&rich_attrs(), &CTX4);
    let mut out = Vec::new();
    let n = pack_announce(&block, Afi::Ipv4, None, &prefixes, &mut out);
    let us = decode_stream(&out, &CTX4);
    assert_eq!(us.len(), n);
    assert!((5..=6).contains(&n), "{n}");
    let (a, w) = merged(&us);
    assert_eq!(a, prefixes);
    assert!(w.is_empty());
    assert!(us.iter().all(|u| u.attrs.as_ref().unwrap().med == Some(77)));
}

#[test]
fn pack_v6_mp_reach_first() {
    let prefixes = v6_48s(3000);
    let mut attrs = rich_attrs();
    attrs.next_hop = None;
    let block = encode_attrs(&attrs, &CTX4);
    let mut out = Vec::new();
    let n = pack_announce(&block, Afi::Ipv6, Some(&nh6()), &prefixes, &mut out);
    let msgs = split(&out);
    assert_eq!(msgs.len(), n);
    for m in &msgs {
        assert_eq!(m[23] & 0xbf, 0x90, "MP_REACH_NLRI first, extended length");
        assert_eq!(m[24], 14);
    }
    let us = decode_stream(&out, &CTX4);
    let (a, _) = merged(&us);
    assert_eq!(a, prefixes);
    let got = us[0].attrs.as_ref().unwrap();
    assert_eq!(got.mp_next_hop, Some(nh6()));
    assert!(pack_announce(&block, Afi::Ipv6, None, &prefixes, &mut Vec::new()) == 0);
}

#[test]
fn pack_skips_other_family_and_small_mp_uses_short_length() {
    let mixed = vec![p("10.0.0.0/8"), p("2001:db8::/32"), p("10.1.0.0/16")];
    let mut out = Vec::new();
    let block = encode_attrs(
        &PathAttrs {
            origin: Some(Origin::Igp),
            ..Default::default()
        },
        &CTX4,
    );
    pack_announce(&block, Afi::Ipv6, Some(&nh6()), &mixed, &mut out);
    assert_eq!(out[23], 0x80, "short MP_REACH header for a small value");
    let us = decode_stream(&out, &CTX4);
    assert_eq!(us[0].announced, vec![p("2001:db8::/32")]);
}

#[test]
fn withdraw_both_families() {
    let mut prefixes = v4_24s(2500);
    prefixes.extend(v6_48s(2500));
    let mut out = Vec::new();
    let n = pack_withdraw(&prefixes, &mut out);
    let us = decode_stream(&out, &CTX4);
    assert_eq!(us.len(), n);
    let (a, w) = merged(&us);
    assert!(a.is_empty());
    assert_eq!(w, prefixes);
    assert!(us
        .iter()
        .all(|u| u.attrs.is_none() && u.end_of_rib.is_none()));
}

#[test]
fn end_of_rib_every_family() {
    for f in [
        Family::IPV4_UNICAST,
        Family::IPV6_UNICAST,
        Family {
            afi: Afi::Ipv4,
            safi: Safi::Multicast,
        },
        Family {
            afi: Afi::Ipv6,
            safi: Safi::Other(128),
        },
    ] {
        let mut out = Vec::new();
        encode_end_of_rib(f, &mut out);
        let us = decode_stream(&out, &CTX4);
        assert_eq!(
            us,
            vec![Update {
                end_of_rib: Some(f),
                ..Default::default()
            }]
        );
    }
}

#[test]
fn encode_update_mixed() {
    let mut attrs = rich_attrs();
    attrs.mp_next_hop = Some(nh6());
    let u = Update {
        withdrawn: vec![p("192.0.2.0/24"), p("2001:db8:ffff::/48")],
        attrs: Some(attrs.clone()),
        announced: vec![p("10.0.0.0/8"), p("2001:db8:1::/48")],
        end_of_rib: None,
    };
    let mut out = Vec::new();
    let n = encode_update(&u, &CTX4, &mut out);
    assert_eq!(n, 4, "RFC 7606 §5.1: one kind of NLRI per message");
    let us = decode_stream(&out, &CTX4);
    let (a, w) = merged(&us);
    assert_eq!((a, w), (u.announced.clone(), u.withdrawn.clone()));
    let mut want = attrs;
    want.unknown.sort_by_key(|r| r.type_code);
    assert_eq!(us[3].attrs.as_ref().unwrap(), &want);
}

#[test]
fn open_every_capability_both_forms() {
    let caps = vec![
        Capability::Multiprotocol(Family::IPV4_UNICAST),
        Capability::Multiprotocol(Family::IPV6_UNICAST),
        Capability::RouteRefresh,
        Capability::ExtendedNextHop(vec![(Family::IPV4_UNICAST, Afi::Ipv6)]),
        Capability::GracefulRestart(GracefulRestartCap {
            restart_state: false,
            notification: true,
            restart_time: 4095,
            families: vec![(Family::IPV6_UNICAST, true)],
        }),
        Capability::FourOctetAs(65_536),
        Capability::AddPath(vec![(Family::IPV4_UNICAST, 1)]),
        Capability::EnhancedRouteRefresh,
        Capability::Fqdn {
            hostname: "holdfast".into(),
            domain: "lab".into(),
        },
        Capability::Unknown {
            code: 250,
            value: vec![9; 40],
        },
    ];
    for extra in [0usize, 30] {
        let mut caps = caps.clone();
        caps.extend((0..extra).map(|i| Capability::Unknown {
            code: 251,
            value: vec![i as u8; 8],
        }));
        let o = Open {
            version: 4,
            my_as: AS_TRANS,
            hold_time: 3,
            bgp_id: Ipv4Addr::new(1, 2, 3, 4),
            capabilities: caps,
        };
        let mut out = Vec::new();
        encode_open(&o, &mut out);
        assert_eq!(
            decode_message(&out, &CTX4).unwrap(),
            Message::Open(o.clone())
        );
        assert_eq!(o.asn(), 65_536);
    }
}

#[test]
fn notification_and_route_refresh() {
    let ctx = CodecCtx::default();
    let msgs = [
        Message::Notification(Notification {
            code: 2,
            subcode: 2,
            data: vec![0xfd, 0xe8],
        }),
        Message::Notification(Notification {
            code: 4,
            subcode: 0,
            data: vec![],
        }),
        Message::RouteRefresh(RouteRefresh {
            family: Family::IPV6_UNICAST,
            subtype: 0,
        }),
        Message::RouteRefresh(RouteRefresh {
            family: Family::IPV4_UNICAST,
            subtype: 2,
        }),
        Message::Keepalive,
    ];
    for m in msgs {
        let mut out = Vec::new();
        encode_message(&m, &ctx, &mut out);
        assert_eq!(decode_message(&out, &ctx).unwrap(), m);
    }
    let e = DecodeError {
        code: 6,
        subcode: 4,
        data: vec![],
        kind: DecodeErrorKind::MalformedNotification,
    };
    let mut out = Vec::new();
    encode_notification(&e.to_notification(), &mut out);
    assert_eq!(out.len(), 21);
    assert_eq!(
        decode_message(&out, &ctx).unwrap(),
        Message::Notification(Notification {
            code: 6,
            subcode: 4,
            data: vec![]
        })
    );
}
