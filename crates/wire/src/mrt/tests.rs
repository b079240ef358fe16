//! The MRT encoders read back by an independent parser, bgpkit-parser.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use bgpkit_parser::models::ElemType;
use bgpkit_parser::BgpkitParser;

use super::*;
use crate::{AsPath, AsSegment, MpNextHop, Origin};

fn attrs(path: &[u32], nh: IpAddr) -> PathAttrs {
    let mut a = PathAttrs {
        origin: Some(Origin::Igp),
        as_path: AsPath {
            segments: vec![AsSegment::Sequence(path.to_vec())],
        },
        med: Some(7),
        communities: vec![(65001 << 16) | 42],
        ..PathAttrs::default()
    };
    match nh {
        IpAddr::V4(v4) => a.next_hop = Some(v4),
        IpAddr::V6(_) => {
            a.mp_next_hop = Some(MpNextHop {
                global: nh,
                link_local: None,
            })
        }
    }
    a
}

fn elems(bytes: &[u8]) -> Vec<bgpkit_parser::BgpElem> {
    BgpkitParser::from_reader(bytes).into_iter().collect()
}

#[test]
fn a_table_dump_reads_back_with_its_peers_prefixes_and_paths() {
    let peers = [
        MrtPeer {
            bgp_id: Ipv4Addr::new(192, 0, 2, 1),
            address: "192.0.2.1".parse().unwrap(),
            asn: 65001,
        },
        MrtPeer {
            bgp_id: Ipv4Addr::new(192, 0, 2, 2),
            address: "2001:db8::2".parse().unwrap(),
            asn: 4_200_000_000,
        },
    ];
    let mut out = Vec::new();
    peer_index_table(
        1_700_000_000,
        Ipv4Addr::new(198, 51, 100, 1),
        "default",
        &peers,
        &mut out,
    );
    let a4 = attrs(&[65001, 64512], "192.0.2.1".parse().unwrap());
    let a6 = attrs(&[4_200_000_000, 64513], "2001:db8::2".parse().unwrap());
    rib_record(
        1_700_000_000,
        0,
        &"10.1.0.0/16".parse().unwrap(),
        &[MrtRibEntry {
            peer_index: 0,
            originated: 1_699_999_000,
            attrs: &a4,
        }],
        &mut out,
    );
    rib_record(
        1_700_000_000,
        1,
        &"2001:db8:100::/48".parse().unwrap(),
        &[MrtRibEntry {
            peer_index: 1,
            originated: 1_699_999_001,
            attrs: &a6,
        }],
        &mut out,
    );
    let got = elems(&out);
    assert_eq!(got.len(), 2, "{got:?}");
    let e4 = &got[0];
    assert_eq!(e4.elem_type, ElemType::ANNOUNCE);
    assert_eq!(e4.prefix.prefix.to_string(), "10.1.0.0/16");
    assert_eq!(e4.peer_ip, "192.0.2.1".parse::<IpAddr>().unwrap());
    assert_eq!(u32::from(e4.peer_asn), 65001);
    assert_eq!(e4.next_hop, Some("192.0.2.1".parse().unwrap()));
    assert_eq!(e4.med, Some(7));
    assert_eq!(e4.timestamp as u32, 1_699_999_000);
    assert_eq!(
        e4.as_path.as_ref().unwrap().to_u32_vec_opt(false),
        Some(vec![65001, 64512])
    );
    let e6 = &got[1];
    assert_eq!(e6.prefix.prefix.to_string(), "2001:db8:100::/48");
    assert_eq!(e6.peer_ip, "2001:db8::2".parse::<IpAddr>().unwrap());
    assert_eq!(u32::from(e6.peer_asn), 4_200_000_000);
    assert_eq!(e6.next_hop, Some("2001:db8::2".parse().unwrap()));
    assert_eq!(
        e6.as_path.as_ref().unwrap().to_u32_vec_opt(false),
        Some(vec![4_200_000_000, 64513])
    );
}

#[test]
fn a_bgp4mp_log_reads_back_as_announcements_and_withdrawals() {
    let session = MrtSession {
        peer_as: 65001,
        local_as: 65000,
        peer: "192.0.2.1".parse().unwrap(),
        local: "192.0.2.254".parse().unwrap(),
        four_octet_as: true,
    };
    let mut out = Vec::new();
    bgp4mp_state_change(
        1_700_000_000,
        5,
        &session,
        MrtState::OpenConfirm,
        MrtState::Established,
        &mut out,
    );
    let a = attrs(&[65001], "192.0.2.1".parse().unwrap());
    let update = crate::Update {
        announced: vec!["10.9.0.0/16".parse().unwrap()],
        attrs: Some(a),
        ..crate::Update::default()
    };
    let ctx = CodecCtx {
        four_octet_as: true,
        ibgp: false,
    };
    let mut msg = Vec::new();
    crate::encode_update(&update, &ctx, &mut msg);
    bgp4mp_message(
        1_700_000_001,
        250_000,
        &session,
        msg[18],
        &msg[19..],
        &mut out,
    );
    let withdraw = crate::Update {
        withdrawn: vec!["10.9.0.0/16".parse().unwrap()],
        ..crate::Update::default()
    };
    let mut msg = Vec::new();
    crate::encode_update(&withdraw, &ctx, &mut msg);
    bgp4mp_message(1_700_000_002, 0, &session, msg[18], &msg[19..], &mut out);

    let got = elems(&out);
    let kinds: Vec<(ElemType, String)> = got
        .iter()
        .map(|e| (e.elem_type, e.prefix.prefix.to_string()))
        .collect();
    assert_eq!(
        kinds,
        vec![
            (ElemType::ANNOUNCE, "10.9.0.0/16".to_string()),
            (ElemType::WITHDRAW, "10.9.0.0/16".to_string())
        ]
    );
    assert_eq!(got[0].peer_ip, session.peer);
    assert_eq!(u32::from(got[0].peer_asn), 65001);
    assert!((got[0].timestamp - 1_700_000_001.25).abs() < 1e-3);
    let records: Vec<_> = BgpkitParser::from_reader(&out[..])
        .into_record_iter()
        .collect();
    assert_eq!(records.len(), 3, "the state change is a record too");
}

#[test]
fn a_v6_session_with_a_v4_local_address_is_written_in_one_family() {
    let session = MrtSession {
        peer_as: 65001,
        local_as: 65000,
        peer: IpAddr::V6(Ipv6Addr::LOCALHOST),
        local: IpAddr::V4(Ipv4Addr::LOCALHOST),
        four_octet_as: true,
    };
    let mut out = Vec::new();
    bgp4mp_state_change(0, 0, &session, MrtState::Idle, MrtState::Connect, &mut out);
    // Header 12 + microseconds 4 + ASes 8 + ifindex 2 + AFI 2 + 2 x 16 + states 4.
    assert_eq!(out.len(), 12 + 4 + 8 + 2 + 2 + 32 + 4);
    assert_eq!(&out[26..28], &2u16.to_be_bytes(), "AFI IPv6");
}

#[test]
fn a_two_octet_session_logs_bgp4mp_message_with_its_own_as_path() {
    let session = MrtSession {
        peer_as: 65001,
        local_as: 4_200_000_000,
        peer: "192.0.2.1".parse().unwrap(),
        local: "192.0.2.254".parse().unwrap(),
        four_octet_as: false,
    };
    let update = crate::Update {
        announced: vec!["10.9.0.0/16".parse().unwrap()],
        attrs: Some(attrs(&[65001, 64999], "192.0.2.1".parse().unwrap())),
        ..crate::Update::default()
    };
    let ctx = CodecCtx {
        four_octet_as: false,
        ibgp: false,
    };
    let mut msg = Vec::new();
    crate::encode_update(&update, &ctx, &mut msg);
    let mut out = Vec::new();
    bgp4mp_message(1, 0, &session, msg[18], &msg[19..], &mut out);
    assert_eq!(&out[6..8], &BGP4MP_MESSAGE.to_be_bytes());
    assert_eq!(
        &out[18..20],
        &23456u16.to_be_bytes(),
        "local AS as AS_TRANS"
    );
    let got = elems(&out);
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!(
        got[0].as_path.as_ref().unwrap().to_u32_vec_opt(false),
        Some(vec![65001, 64999])
    );
}
