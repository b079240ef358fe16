//! One test per RFC 7606 error class, asserting the exact action.

use crate::common::*;
use holdfast_wire::types::attr_type as t;
use holdfast_wire::*;

const EBGP: CodecCtx = CodecCtx {
    four_octet_as: true,
    ibgp: false,
};
const IBGP: CodecCtx = CodecCtx {
    four_octet_as: true,
    ibgp: true,
};
const WK: u8 = 0x40;
const OPT: u8 = 0x80;
const OPT_T: u8 = 0xc0;
const NLRI: [u8; 4] = [24, 10, 0, 0];

fn origin() -> Vec<u8> {
    attr(WK, t::ORIGIN, &[0])
}
fn as_path() -> Vec<u8> {
    attr(WK, t::AS_PATH, &[2, 1, 0, 0, 0xfd, 0xe9])
}
fn next_hop() -> Vec<u8> {
    attr(WK, t::NEXT_HOP, &[192, 0, 2, 1])
}
fn mandatory() -> Vec<u8> {
    [origin(), as_path(), next_hop()].concat()
}
fn mp_reach_v6() -> Vec<u8> {
    let mut v = vec![0, 2, 1, 16];
    v.extend_from_slice(
        &"2001:db8::1"
            .parse::<std::net::Ipv6Addr>()
            .unwrap()
            .octets(),
    );
    v.extend_from_slice(&[0, 32, 0x20, 0x01, 0x0d, 0xb8]);
    attr(OPT, t::MP_REACH_NLRI, &v)
}

fn run(ctx: &CodecCtx, extra: &[u8]) -> UpdateOutcome {
    let attrs = [mandatory(), extra.to_vec()].concat();
    decode_update(&update_body(&[], &attrs, &NLRI), ctx).unwrap()
}

fn assert_withdraw(o: &UpdateOutcome) {
    assert_eq!(o.action, Rfc7606Action::TreatAsWithdraw, "{o:?}");
    assert!(
        o.update.attrs.is_none() && o.update.announced.is_empty(),
        "{o:?}"
    );
    assert!(o.update.withdrawn.contains(&p("10.0.0.0/24")), "{o:?}");
    assert!(o.reason.is_some());
}

fn assert_discard(o: &UpdateOutcome, code: u8) {
    assert_eq!(o.action, Rfc7606Action::AttributeDiscard, "{o:?}");
    assert_eq!(o.discarded, vec![code]);
    assert_eq!(o.update.announced, vec![p("10.0.0.0/24")]);
    assert!(o.update.attrs.is_some());
}

fn assert_reset(r: Result<UpdateOutcome, DecodeError>, subcode: u8) -> DecodeError {
    let e = r.unwrap_err();
    assert_eq!((e.code, e.subcode), (3, subcode), "{e}");
    assert_eq!(e.action(), Rfc7606Action::SessionReset);
    e
}

#[test]
fn well_formed_is_none() {
    let o = run(&EBGP, &[]);
    assert_eq!(o.action, Rfc7606Action::None);
    assert!(o.discarded.is_empty() && o.reason.is_none());
}

#[test]
fn origin_malformed_withdraws() {
    let body = update_body(
        &[],
        &[attr(WK, t::ORIGIN, &[3]), as_path(), next_hop()].concat(),
        &NLRI,
    );
    assert_withdraw(&decode_update(&body, &EBGP).unwrap());
    let body = update_body(
        &[],
        &[attr(WK, t::ORIGIN, &[0, 0]), as_path(), next_hop()].concat(),
        &NLRI,
    );
    assert_withdraw(&decode_update(&body, &EBGP).unwrap());
}

#[test]
fn as_path_malformed_withdraws() {
    for bad in [
        &[2u8, 0][..],
        &[2, 2, 0, 0, 0, 1],
        &[9, 1, 0, 0, 0, 1],
        &[2, 1, 0, 0, 0, 1, 2],
        &[2, 1, 0, 0, 0, 0],
    ] {
        let body = update_body(
            &[],
            &[origin(), attr(WK, t::AS_PATH, bad), next_hop()].concat(),
            &NLRI,
        );
        assert_withdraw(&decode_update(&body, &EBGP).unwrap());
    }
}

#[test]
fn next_hop_malformed_withdraws() {
    let body = update_body(
        &[],
        &[origin(), as_path(), attr(WK, t::NEXT_HOP, &[1, 2, 3, 4, 5])].concat(),
        &NLRI,
    );
    assert_withdraw(&decode_update(&body, &EBGP).unwrap());
    let body = update_body(
        &[],
        &[origin(), as_path(), attr(WK, t::NEXT_HOP, &[0, 0, 0, 0])].concat(),
        &NLRI,
    );
    assert_withdraw(&decode_update(&body, &EBGP).unwrap());
}

#[test]
fn med_malformed_withdraws() {
    assert_withdraw(&run(&EBGP, &attr(OPT, t::MULTI_EXIT_DISC, &[0, 0, 1])));
}

#[test]
fn local_pref_ibgp_malformed_withdraws_ebgp_discards() {
    assert_withdraw(&run(&IBGP, &attr(WK, t::LOCAL_PREF, &[0, 0, 1])));
    let ok = run(&IBGP, &attr(WK, t::LOCAL_PREF, &[0, 0, 0, 200]));
    assert_eq!(ok.update.attrs.unwrap().local_pref, Some(200));
    let o = run(&EBGP, &attr(WK, t::LOCAL_PREF, &[0, 0, 0, 200]));
    assert_discard(&o, t::LOCAL_PREF);
    assert_eq!(o.update.attrs.unwrap().local_pref, None);
}

#[test]
fn atomic_aggregate_bad_length_discards() {
    let o = run(&EBGP, &attr(WK, t::ATOMIC_AGGREGATE, &[1]));
    assert_discard(&o, t::ATOMIC_AGGREGATE);
    assert!(!o.update.attrs.unwrap().atomic_aggregate);
}

#[test]
fn aggregator_bad_length_discards() {
    assert_discard(
        &run(&EBGP, &attr(OPT_T, t::AGGREGATOR, &[0, 1, 10, 0, 0, 1])),
        t::AGGREGATOR,
    );
    let two = CodecCtx {
        four_octet_as: false,
        ibgp: false,
    };
    let body = update_body(
        &[],
        &[
            origin(),
            attr(WK, t::AS_PATH, &[2, 1, 0xfd, 0xe9]),
            next_hop(),
            attr(OPT_T, t::AGGREGATOR, &[0; 8]),
        ]
        .concat(),
        &NLRI,
    );
    assert_discard(&decode_update(&body, &two).unwrap(), t::AGGREGATOR);
}

#[test]
fn communities_malformed_withdraw() {
    assert_withdraw(&run(&EBGP, &attr(OPT_T, t::COMMUNITIES, &[0, 0, 0, 1, 2])));
    assert_withdraw(&run(&EBGP, &attr(OPT_T, t::COMMUNITIES, &[])));
}

#[test]
fn large_communities_malformed_withdraw() {
    assert_withdraw(&run(&EBGP, &attr(OPT_T, t::LARGE_COMMUNITIES, &[0; 13])));
}

#[test]
fn ext_communities_malformed_withdraw() {
    assert_withdraw(&run(&EBGP, &attr(OPT_T, t::EXTENDED_COMMUNITIES, &[0; 9])));
}

#[test]
fn originator_id_malformed_withdraws() {
    assert_withdraw(&run(&IBGP, &attr(OPT, t::ORIGINATOR_ID, &[1, 2, 3])));
}

#[test]
fn cluster_list_malformed_withdraws() {
    assert_withdraw(&run(
        &IBGP,
        &attr(OPT, t::CLUSTER_LIST, &[1, 2, 3, 4, 5, 6]),
    ));
}

#[test]
fn duplicate_attribute_keeps_first() {
    let o = run(
        &EBGP,
        &[
            attr(OPT, t::MULTI_EXIT_DISC, &[0, 0, 0, 1]),
            attr(OPT, t::MULTI_EXIT_DISC, &[0, 0, 0, 2]),
        ]
        .concat(),
    );
    assert_discard(&o, t::MULTI_EXIT_DISC);
    assert_eq!(o.update.attrs.unwrap().med, Some(1));
}

#[test]
fn duplicate_mp_reach_resets() {
    let attrs = [origin(), as_path(), mp_reach_v6(), mp_reach_v6()].concat();
    assert_reset(decode_update(&update_body(&[], &attrs, &[]), &EBGP), 1);
}

#[test]
fn malformed_mp_reach_and_unreach_reset() {
    // IPv6 next hop of 5 octets.
    let bad = attr(OPT, t::MP_REACH_NLRI, &[0, 2, 1, 5, 1, 2, 3, 4, 5, 0]);
    let e = assert_reset(
        decode_update(
            &update_body(&[], &[origin(), as_path(), bad].concat(), &[]),
            &EBGP,
        ),
        9,
    );
    assert_eq!(e.data[1], t::MP_REACH_NLRI);
    // NLRI inside MP_REACH overruns.
    let bad = attr(OPT, t::MP_REACH_NLRI, &[0, 1, 1, 4, 1, 2, 3, 4, 0, 24, 10]);
    assert_reset(
        decode_update(
            &update_body(&[], &[origin(), as_path(), bad].concat(), &[]),
            &EBGP,
        ),
        9,
    );
    let bad = attr(OPT, t::MP_UNREACH_NLRI, &[0, 2]);
    assert_reset(decode_update(&update_body(&[], &bad, &[]), &EBGP), 9);
    // MP_REACH with wrong flags is also a reset.
    let mut bad = mp_reach_v6();
    bad[0] = OPT_T;
    assert_reset(
        decode_update(
            &update_body(&[], &[origin(), as_path(), bad].concat(), &[]),
            &EBGP,
        ),
        4,
    );
}

#[test]
fn unknown_mp_family_is_ignored() {
    let vpn = attr(
        OPT,
        t::MP_REACH_NLRI,
        &[
            0, 1, 128, 12, 0, 0, 0, 0, 0, 0, 0, 0, 10, 0, 0, 1, 0, 0xff, 0xff,
        ],
    );
    let o = decode_update(
        &update_body(&[], &[origin(), as_path(), vpn].concat(), &[]),
        &EBGP,
    )
    .unwrap();
    assert_eq!(o.action, Rfc7606Action::None);
    assert!(o.update.announced.is_empty());
    let l2 = attr(OPT, t::MP_UNREACH_NLRI, &[0, 25, 65, 1, 2, 3]);
    let o = decode_update(&update_body(&[], &l2, &[]), &EBGP).unwrap();
    assert!(o.update.withdrawn.is_empty() && o.update.end_of_rib.is_none());
}

#[test]
fn wrong_flags_withdraw_including_mp_prefixes() {
    let mut bad_origin = origin();
    bad_origin[0] = OPT_T;
    let attrs = [mp_reach_v6(), bad_origin, as_path()].concat();
    let o = decode_update(&update_body(&[], &attrs, &[]), &EBGP).unwrap();
    assert_eq!(o.action, Rfc7606Action::TreatAsWithdraw);
    assert_eq!(o.update.withdrawn, vec![p("2001:db8::/32")]);
    assert!(o.update.announced.is_empty() && o.update.attrs.is_none());
    // Optional attribute sent as well-known.
    assert_withdraw(&run(&EBGP, &attr(WK, t::COMMUNITIES, &[0, 0, 0, 1])));
}

#[test]
fn missing_well_known_withdraws() {
    for attrs in [
        [as_path(), next_hop()].concat(),
        [origin(), next_hop()].concat(),
        [origin(), as_path()].concat(),
    ] {
        assert_withdraw(&decode_update(&update_body(&[], &attrs, &NLRI), &EBGP).unwrap());
    }
    // MP-only announcement does not need NEXT_HOP (RFC 4760 §3).
    let o = decode_update(
        &update_body(&[], &[origin(), as_path(), mp_reach_v6()].concat(), &[]),
        &EBGP,
    )
    .unwrap();
    assert_eq!(o.action, Rfc7606Action::None);
    assert_eq!(o.update.announced, vec![p("2001:db8::/32")]);
    // No NLRI at all: nothing is mandatory.
    let o = decode_update(&update_body(&[24, 10, 0, 0], &[], &[]), &EBGP).unwrap();
    assert_eq!(
        (o.action, o.update.withdrawn.len()),
        (Rfc7606Action::None, 1)
    );
}

#[test]
fn nlri_syntax_errors_reset() {
    assert_reset(
        decode_update(&update_body(&[], &mandatory(), &[33, 1, 2, 3, 4, 5]), &EBGP),
        10,
    );
    assert_reset(
        decode_update(&update_body(&[], &mandatory(), &[24, 10, 0]), &EBGP),
        10,
    );
    assert_reset(decode_update(&update_body(&[24, 10], &[], &[]), &EBGP), 10);
}

#[test]
fn length_field_errors_reset() {
    // Withdrawn Routes Length beyond the message.
    assert_reset(decode_update(&[0, 9, 24, 10, 0, 0, 0, 0], &EBGP), 1);
    // Total Path Attribute Length beyond the message.
    let mut b = update_body(&[], &mandatory(), &[]);
    b[3] += 1;
    assert_reset(decode_update(&b, &EBGP), 1);
    assert_reset(decode_update(&[0, 0, 0], &EBGP), 1);
}

#[test]
fn attribute_overrun_withdraws_using_total_length() {
    // The last attribute claims 10 octets but only 4 are inside the Total
    // Path Attribute Length; the NLRI is found through that length.
    let mut attrs = mandatory();
    attrs.extend_from_slice(&[OPT_T, t::COMMUNITIES, 10, 0, 0, 0, 1]);
    let o = decode_update(&update_body(&[], &attrs, &NLRI), &EBGP).unwrap();
    assert_withdraw(&o);
    // Fewer than 3 octets left for an attribute header.
    let mut attrs = mandatory();
    attrs.extend_from_slice(&[OPT, 4]);
    assert_withdraw(&decode_update(&update_body(&[], &attrs, &NLRI), &EBGP).unwrap());
    // An overrunning MP_REACH_NLRI cannot be treated as withdraw.
    let mut attrs = mandatory();
    attrs.extend_from_slice(&[OPT, t::MP_REACH_NLRI, 40, 0, 2, 1]);
    assert_reset(decode_update(&update_body(&[], &attrs, &[]), &EBGP), 9);
}

#[test]
fn unrecognized_well_known_resets_optional_kept() {
    let bad = attr(WK, 99, &[1, 2]);
    let e = assert_reset(
        decode_update(
            &update_body(&[], &[mandatory(), bad.clone()].concat(), &NLRI),
            &EBGP,
        ),
        2,
    );
    assert_eq!(e.data, bad);
    let o = run(
        &EBGP,
        &[attr(OPT_T, 99, &[1, 2]), attr(OPT | 0x10, 100, &[3])].concat(),
    );
    assert_eq!(o.action, Rfc7606Action::None);
    let u = o.update.attrs.unwrap().unknown;
    assert_eq!(
        u[0],
        RawAttr {
            flags: 0xe0,
            type_code: 99,
            value: vec![1, 2]
        }
    );
    assert_eq!(
        u[1],
        RawAttr {
            flags: 0x80,
            type_code: 100,
            value: vec![3]
        }
    );
}

#[test]
fn as4_path_from_four_octet_peer_is_ignored() {
    let as4 = attr(OPT_T, t::AS4_PATH, &[2, 1, 0, 1, 0, 0]);
    let o = run(&EBGP, &as4);
    assert_eq!(o.action, Rfc7606Action::None);
    assert_eq!(
        o.update.attrs.unwrap().as_path.segments,
        vec![AsSegment::Sequence(vec![65001])]
    );
}

#[test]
fn malformed_as4_path_discarded_on_two_octet_session() {
    let two = CodecCtx {
        four_octet_as: false,
        ibgp: false,
    };
    let attrs = [
        origin(),
        attr(WK, t::AS_PATH, &[2, 1, 0x5b, 0xa0]),
        next_hop(),
        attr(OPT_T, t::AS4_PATH, &[2, 2, 0, 1]),
    ]
    .concat();
    let o = decode_update(&update_body(&[], &attrs, &NLRI), &two).unwrap();
    assert_discard(&o, t::AS4_PATH);
    assert_eq!(
        o.update.attrs.unwrap().as_path.segments,
        vec![AsSegment::Sequence(vec![AS_TRANS as u32])]
    );
}

#[test]
fn strongest_action_wins() {
    let extra = [
        attr(WK, t::ATOMIC_AGGREGATE, &[1]),
        attr(OPT, t::MULTI_EXIT_DISC, &[1]),
    ]
    .concat();
    let o = run(&EBGP, &extra);
    assert_withdraw(&o);
    assert_eq!(o.discarded, vec![t::ATOMIC_AGGREGATE]);
}

#[test]
fn as_zero_rfc7607() {
    let body = update_body(
        &[],
        &[
            origin(),
            attr(WK, t::AS_PATH, &[2, 1, 0, 0, 0, 0]),
            next_hop(),
        ]
        .concat(),
        &NLRI,
    );
    assert_withdraw(&decode_update(&body, &EBGP).unwrap());
    assert_discard(
        &run(
            &EBGP,
            &attr(OPT_T, t::AGGREGATOR, &[0, 0, 0, 0, 10, 0, 0, 1]),
        ),
        t::AGGREGATOR,
    );
}

#[test]
fn end_of_rib_detection() {
    let o = decode_update(&[0, 0, 0, 0], &EBGP).unwrap();
    assert_eq!(o.update.end_of_rib, Some(Family::IPV4_UNICAST));
    let eor6 = attr(OPT, t::MP_UNREACH_NLRI, &[0, 2, 1]);
    let o = decode_update(&update_body(&[], &eor6, &[]), &EBGP).unwrap();
    assert_eq!(o.update.end_of_rib, Some(Family::IPV6_UNICAST));
    assert!(o.update.attrs.is_none());
    // Not an EoR when anything else is present.
    let o = decode_update(
        &update_body(&[], &[eor6.clone(), origin()].concat(), &[]),
        &EBGP,
    )
    .unwrap();
    assert_eq!(o.update.end_of_rib, None);
    let o = decode_update(&update_body(&[24, 10, 0, 0], &eor6, &[]), &EBGP).unwrap();
    assert_eq!(o.update.end_of_rib, None);
}
