//! Engine behaviour: RIB semantics, export rules, policy, packing, GR.
use crate::common;
use common::*;
use holdfast_rib::*;
use holdfast_wire::{well_known, AsSegment, Family, LargeCommunity, PathAttrs};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::Arc;

/// The Loc-RIB's size, as counted and as walked.
fn assert_loc_rib(e: &Engine, want: usize) {
    assert_eq!(e.loc_rib_len(), want, "counted");
    assert_eq!(e.loc_rib_len_walked(), want, "walked");
}

fn engine(peers: &[(u32, u32)]) -> Engine {
    let mut e = Engine::new(cfg(1));
    for &(id, asn) in peers {
        e.add_peer(peer(id, asn));
        e.peer_up(peer(id, asn));
    }
    e
}

#[test]
fn implicit_withdraw_and_unknown_withdraw() {
    let mut e = engine(&[(1, 65001), (2, 65002)]);
    e.apply(vec![(
        1,
        ann(&["10.0.0.0/24"], attrs(&[65001, 1], [192, 0, 2, 1])),
    )]);
    let out = e.apply(vec![(
        1,
        ann(&["10.0.0.0/24"], attrs(&[65001, 2], [192, 0, 2, 1])),
    )]);
    assert_eq!(e.adj_rib_in(1).len(), 1);
    assert_eq!(e.adj_rib_in(1)[0].1.as_path.first_as(), Some(65001));
    let a = announced(&out, 2);
    assert_eq!(a.len(), 1);
    assert_eq!(
        a[0].1.as_path.iter_asns().collect::<Vec<_>>(),
        vec![65000, 65001, 2]
    );
    let out = e.apply(vec![(1, wd(&["10.9.9.0/24"]))]);
    assert!(out.messages.is_empty());
    assert_loc_rib(&e, 1);
    let out = e.apply(vec![(1, wd(&["10.0.0.0/24"]))]);
    assert_eq!(withdrawn(&out, 2), vec![p("10.0.0.0/24")]);
    assert_loc_rib(&e, 0);
    assert_eq!(e.counts(2).advertised, 0);
}

#[test]
fn route_changes_count_what_a_log_holds_beyond_the_table() {
    let mut e = engine(&[(1, 65001), (2, 65002)]);
    let a = attrs(&[65001, 1], [192, 0, 2, 1]);
    let b = attrs(&[65001, 2], [192, 0, 2, 1]);
    // A fresh load: as many changes as routes, received by 1 and
    // advertised to 2.
    e.apply(vec![(1, ann(&["10.0.0.0/24", "10.0.1.0/24"], a.clone()))]);
    assert_eq!((e.route_changes(1), e.counts(1).received), (2, 2));
    assert_eq!((e.route_changes(2), e.counts(2).advertised), (2, 2));
    // Replaced, withdrawn, and a withdrawal of nothing (not counted), on
    // both sides.
    e.apply(vec![(1, ann(&["10.0.0.0/24"], b.clone()))]);
    e.apply(vec![(1, wd(&["10.0.1.0/24", "10.9.9.0/24"]))]);
    assert_eq!((e.route_changes(1), e.counts(1).received), (4, 1));
    assert_eq!((e.route_changes(2), e.counts(2).advertised), (4, 1));
    e.reset_route_changes(1);
    assert_eq!(e.route_changes(1), 0);
    e.reset_route_changes(2);
    assert_eq!(e.route_changes(2), 0);
    e.apply(vec![(1, ann(&["10.0.2.0/24"], a))]);
    assert_eq!(e.route_changes(1), 1);
    // A new session starts from 0.
    e.peer_up(peer(1, 65001));
    assert_eq!(e.route_changes(1), 0);
}

#[test]
fn adj_rib_in_groups_match_the_table() {
    let mut e = engine(&[(1, 65001), (2, 65002)]);
    let a = attrs(&[65001, 1], [192, 0, 2, 1]);
    let b = attrs(&[65001, 2], [192, 0, 2, 1]);
    e.apply(vec![
        (1, ann(&["10.0.2.0/24", "10.0.0.0/24"], a.clone())),
        (1, ann(&["10.0.1.0/24"], b.clone())),
        (1, ann(&["10.0.3.0/24"], a.clone())),
        (2, ann(&["10.0.9.0/24"], b.clone())),
    ]);
    let mut groups: Vec<(PathAttrs, Vec<Prefix>)> = Vec::new();
    e.visit_adj_rib_in_groups(1, |x, ps| groups.push((x.clone(), ps.to_vec())));
    // Each set once, its prefixes sorted; together exactly the Adj-RIB-In.
    assert_eq!(groups.len(), 2);
    let of = |x: &PathAttrs| {
        groups
            .iter()
            .find(|(g, _)| g == x)
            .map(|(_, ps)| ps.clone())
    };
    assert_eq!(
        of(&a),
        Some(vec![p("10.0.0.0/24"), p("10.0.2.0/24"), p("10.0.3.0/24")])
    );
    assert_eq!(of(&b), Some(vec![p("10.0.1.0/24")]));
    let mut flat: Vec<(Prefix, PathAttrs)> = groups
        .iter()
        .flat_map(|(x, ps)| ps.iter().map(move |q| (*q, x.clone())))
        .collect();
    flat.sort_by_key(|r| r.0);
    let table: Vec<(Prefix, PathAttrs)> = e
        .adj_rib_in(1)
        .into_iter()
        .map(|(q, x)| (q, PathAttrs::clone(&x)))
        .collect();
    assert_eq!(flat, table);
    let mut none = 0;
    e.visit_adj_rib_in_groups(3, |_, _| none += 1);
    assert_eq!(none, 0);
}

#[test]
fn adj_rib_out_groups_match_the_export() {
    let mut e = engine(&[(1, 65001), (2, 65002)]);
    let a = attrs(&[65001, 1], [192, 0, 2, 1]);
    let b = attrs(&[65001, 2], [192, 0, 2, 1]);
    e.apply(vec![
        (1, ann(&["10.0.2.0/24", "10.0.0.0/24"], a.clone())),
        (1, ann(&["10.0.1.0/24", "10.0.4.0/22"], b)),
        (1, ann(&["10.0.3.0/24"], a)),
        (
            1,
            ann(&["2001:db8::/48"], attrs(&[65001, 3], [192, 0, 2, 1])),
        ),
    ]);
    let mut groups: Vec<(PathAttrs, Vec<Prefix>)> = Vec::new();
    e.visit_adj_rib_out_groups(2, |x, ps| groups.push((x.clone(), ps.to_vec())));
    assert!(groups
        .iter()
        .all(|(_, ps)| ps.windows(2).all(|w| w[0] < w[1])));
    let mut flat: Vec<(Prefix, PathAttrs)> = groups
        .iter()
        .flat_map(|(x, ps)| ps.iter().map(move |q| (*q, x.clone())))
        .collect();
    flat.sort_by_key(|r| r.0);
    let table: Vec<(Prefix, PathAttrs)> = e
        .adj_rib_out(2)
        .into_iter()
        .map(|(q, x)| (q, PathAttrs::clone(&x)))
        .collect();
    assert_eq!(table.len(), e.counts(2).advertised as usize);
    assert_eq!(flat, table);
    // Nothing goes back to the source.
    let mut none = 0;
    e.visit_adj_rib_out_groups(1, |_, _| none += 1);
    assert_eq!(none, 0);
}

#[test]
fn as_loop_rejected_but_kept_pre_policy() {
    let mut e = engine(&[(1, 65001), (2, 65002)]);
    let out = e.apply(vec![(
        1,
        ann(
            &["10.0.0.0/24"],
            attrs(&[65001, LOCAL_AS, 7], [192, 0, 2, 1]),
        ),
    )]);
    assert!(out.messages.is_empty());
    assert_loc_rib(&e, 0);
    assert_eq!(e.adj_rib_in(1).len(), 1);
    let c = e.counts(1);
    assert_eq!((c.received, c.accepted), (1, 0));
    assert!(out
        .warnings
        .iter()
        .any(|(id, w)| *id == 1 && w.contains("AS loop")));
}

#[test]
fn rr_loop_detection() {
    let mut e = engine(&[(3, LOCAL_AS)]);
    let mut a = attrs(&[65001], [10, 0, 0, 3]);
    a.originator_id = Some(Ipv4Addr::new(10, 0, 0, 1));
    e.apply(vec![(3, ann(&["10.0.0.0/24"], a))]);
    let mut b = attrs(&[65001], [10, 0, 0, 3]);
    b.cluster_list = vec![Ipv4Addr::new(10, 0, 0, 1)];
    e.apply(vec![(3, ann(&["10.0.1.0/24"], b))]);
    assert_loc_rib(&e, 0);
    assert_eq!(e.counts(3).received, 2);
}

#[test]
fn ebgp_export_transforms() {
    let mut e = engine(&[(1, 65001), (2, 65002), (3, LOCAL_AS)]);
    let mut a = attrs(&[65001, 7], [192, 0, 2, 1]);
    a.med = Some(33);
    a.local_pref = Some(300);
    a.unknown = vec![
        holdfast_wire::RawAttr {
            flags: 0x80,
            type_code: 99,
            value: vec![1],
        },
        holdfast_wire::RawAttr {
            flags: 0xc0,
            type_code: 98,
            value: vec![2],
        },
    ];
    let out = e.apply(vec![(1, ann(&["10.0.0.0/24"], a))]);
    let to2 = announced(&out, 2);
    assert_eq!(to2.len(), 1);
    let x = &to2[0].1;
    assert_eq!(
        x.as_path.iter_asns().collect::<Vec<_>>(),
        vec![LOCAL_AS, 65001, 7]
    );
    assert_eq!(x.next_hop, Some(Ipv4Addr::new(192, 0, 2, 254)));
    assert_eq!(x.local_pref, None);
    assert_eq!(x.med, None);
    assert_eq!(
        x.unknown.iter().map(|u| u.type_code).collect::<Vec<_>>(),
        vec![98]
    );
    // iBGP: next hop kept, LOCAL_PREF set (eBGP-received LP ignored), MED kept.
    let to3 = announced(&out, 3);
    let y = &to3[0].1;
    assert_eq!(y.as_path.iter_asns().collect::<Vec<_>>(), vec![65001, 7]);
    assert_eq!(y.next_hop, Some(Ipv4Addr::new(192, 0, 2, 1)));
    assert_eq!(y.local_pref, Some(100));
    assert_eq!(y.med, Some(33));
    // Never back to the source.
    assert!(sent(&out, 1).is_empty());
}

#[test]
fn export_policy_med_survives_ebgp() {
    let mut e = engine(&[(1, 65001), (2, 65002)]);
    let pol = Policy {
        name: "med".into(),
        terms: vec![Term {
            name: "t".into(),
            matches: vec![],
            actions: vec![SetAction::Med(77)],
            verdict: Some(true),
        }],
        default_accept: false,
    };
    e.set_policies(2, PolicyRef::All, PolicyRef::Policy(Arc::new(pol)));
    let out = e.apply(vec![(
        1,
        ann(&["10.0.0.0/24"], attrs(&[65001], [192, 0, 2, 1])),
    )]);
    assert_eq!(announced(&out, 2)[0].1.med, Some(77));
}

#[test]
fn well_known_communities() {
    let mut e = engine(&[(1, 65001), (2, 65002), (3, LOCAL_AS)]);
    let mut a = attrs(&[65001], [192, 0, 2, 1]);
    a.communities = vec![well_known::NO_EXPORT];
    let mut b = attrs(&[65001, 2], [192, 0, 2, 1]);
    b.communities = vec![well_known::NO_ADVERTISE];
    let mut c = attrs(&[65001, 3], [192, 0, 2, 1]);
    c.communities = vec![well_known::NO_EXPORT_SUBCONFED];
    let out = e.apply(vec![
        (1, ann(&["10.0.0.0/24"], a)),
        (1, ann(&["10.0.1.0/24"], b)),
        (1, ann(&["10.0.2.0/24"], c)),
    ]);
    assert!(announced(&out, 2).is_empty());
    let to3: Vec<_> = announced(&out, 3).into_iter().map(|x| x.0).collect();
    assert_eq!(to3, vec![p("10.0.0.0/24"), p("10.0.2.0/24")]);
}

#[test]
fn route_reflection_rules() {
    // 3: client, 4: client, 5: non-client, 6: non-client.
    let mut e = Engine::new(cfg(1));
    for (id, client) in [(3, true), (4, true), (5, false), (6, false)] {
        let mut s = peer(id, LOCAL_AS);
        s.rr_client = client;
        e.add_peer(s.clone());
        e.peer_up(s);
    }
    // client -> everyone (clients and non-clients) but itself.
    let out = e.apply(vec![(
        3,
        ann(&["10.0.3.0/24"], attrs(&[65001], [10, 0, 0, 3])),
    )]);
    for id in [4, 5, 6] {
        let a = announced(&out, id);
        assert_eq!(a.len(), 1, "to {id}");
        assert_eq!(a[0].1.originator_id, Some(Ipv4Addr::new(1, 1, 1, 3)));
        assert_eq!(a[0].1.cluster_list, vec![Ipv4Addr::new(10, 0, 0, 1)]);
    }
    assert!(sent(&out, 3).is_empty());
    // non-client -> clients only.
    let out = e.apply(vec![(
        5,
        ann(&["10.0.5.0/24"], attrs(&[65001], [10, 0, 0, 5])),
    )]);
    assert_eq!(announced(&out, 3).len(), 1);
    assert_eq!(announced(&out, 4).len(), 1);
    assert!(announced(&out, 6).is_empty());
    // Existing ORIGINATOR_ID kept, cluster id prepended.
    let mut a = attrs(&[65001], [10, 0, 0, 4]);
    a.originator_id = Some(Ipv4Addr::new(4, 4, 4, 4));
    a.cluster_list = vec![Ipv4Addr::new(7, 7, 7, 7)];
    let out = e.apply(vec![(4, ann(&["10.0.4.0/24"], a))]);
    let x = &announced(&out, 5)[0].1;
    assert_eq!(x.originator_id, Some(Ipv4Addr::new(4, 4, 4, 4)));
    assert_eq!(
        x.cluster_list,
        vec![Ipv4Addr::new(10, 0, 0, 1), Ipv4Addr::new(7, 7, 7, 7)]
    );
}

#[test]
fn ibgp_not_reflected_without_clients() {
    let mut e = engine(&[(3, LOCAL_AS), (4, LOCAL_AS), (1, 65001)]);
    let out = e.apply(vec![(
        3,
        ann(&["10.0.0.0/24"], attrs(&[65009], [10, 0, 0, 3])),
    )]);
    assert!(announced(&out, 4).is_empty());
    let to1 = announced(&out, 1);
    assert_eq!(to1.len(), 1);
    assert_eq!(to1[0].1.originator_id, None);
}

fn plist(entries: Vec<(&str, Option<u8>, Option<u8>, bool)>) -> Arc<PrefixList> {
    Arc::new(PrefixList {
        name: "pl".into(),
        entries: entries
            .into_iter()
            .map(|(s, ge, le, permit)| PrefixListEntry {
                prefix: p(s),
                ge,
                le,
                permit,
            })
            .collect(),
    })
}

#[test]
fn prefix_list_ge_le() {
    let l = plist(vec![
        ("10.0.0.0/8", Some(16), Some(24), true),
        ("192.168.0.0/16", None, None, true),
    ]);
    assert!(l.permits(&p("10.1.0.0/16")));
    assert!(l.permits(&p("10.1.2.0/24")));
    assert!(!l.permits(&p("10.0.0.0/8")));
    assert!(!l.permits(&p("10.1.2.0/25")));
    assert!(l.permits(&p("192.168.0.0/16")));
    assert!(!l.permits(&p("192.168.1.0/24")));
    let deny_first = plist(vec![
        ("10.1.0.0/16", None, Some(32), false),
        ("10.0.0.0/8", None, Some(32), true),
    ]);
    assert!(!deny_first.permits(&p("10.1.5.0/24")));
    assert!(deny_first.permits(&p("10.2.5.0/24")));
    let only_le = plist(vec![("2001:db8::/32", None, Some(48), true)]);
    assert!(only_le.permits(&p("2001:db8:1::/48")));
    assert!(!only_le.permits(&p("2001:db8:1::/56")));
    assert!(!only_le.permits(&p("10.0.0.0/8")));
}

#[test]
fn policy_matches_and_actions() {
    let lc = LargeCommunity {
        global: 65000,
        local1: 1,
        local2: 2,
    };
    let pol = Policy {
        name: "imp".into(),
        terms: vec![
            Term {
                name: "drop-long".into(),
                matches: vec![Match::PathLenGe(4)],
                actions: vec![],
                verdict: Some(false),
            },
            Term {
                name: "regex".into(),
                matches: vec![Match::AsPathRegex(
                    regex::Regex::new("^65001 .* 65003$").unwrap(),
                )],
                actions: vec![
                    SetAction::LocalPref(250),
                    SetAction::AddCommunity(0xfde8_0001),
                ],
                verdict: None,
            },
            Term {
                name: "comm".into(),
                matches: vec![
                    Match::Community(0xfde8_0001),
                    Match::Not(Box::new(Match::LargeCommunity(lc))),
                ],
                actions: vec![
                    SetAction::AddLargeCommunity(lc),
                    SetAction::Prepend {
                        asn: None,
                        count: 2,
                    },
                ],
                verdict: Some(true),
            },
            Term {
                name: "large".into(),
                matches: vec![Match::LargeCommunity(lc)],
                actions: vec![SetAction::StripCommunities, SetAction::Med(5)],
                verdict: Some(true),
            },
            Term {
                name: "pl".into(),
                matches: vec![
                    Match::PrefixList(plist(vec![("10.0.0.0/8", None, Some(24), true)])),
                    Match::OriginAs(7),
                ],
                actions: vec![SetAction::RemoveCommunity(1)],
                verdict: Some(true),
            },
        ],
        default_accept: false,
    };
    let ctx = PolicyCtx {
        local_as: LOCAL_AS,
        ..PolicyCtx::default()
    };
    let eval = |path: &[u32], comms: Vec<u32>, large: Vec<LargeCommunity>, pfx: &str| {
        let mut a = attrs(path, [1, 1, 1, 1]);
        a.communities = comms;
        a.large_communities = large;
        match pol.evaluate(&p(pfx), &a, &ctx) {
            PolicyVerdict::Accept(x) => Some(x.into_owned()),
            PolicyVerdict::Reject => None,
        }
    };
    assert!(eval(&[1, 2, 3, 4], vec![], vec![], "10.0.0.0/24").is_none());
    let r = eval(&[65001, 2, 65003], vec![], vec![], "10.0.0.0/24").unwrap();
    assert_eq!(r.local_pref, Some(250));
    assert_eq!(r.communities, vec![0xfde8_0001]);
    assert_eq!(r.large_communities, vec![lc]);
    assert_eq!(
        r.as_path.iter_asns().collect::<Vec<_>>(),
        vec![LOCAL_AS, LOCAL_AS, 65001, 2, 65003]
    );
    let r = eval(&[65009], vec![0xfde8_0001, 9], vec![lc], "10.0.0.0/24").unwrap();
    assert!(r.communities.is_empty() && r.large_communities.is_empty());
    assert_eq!(r.med, Some(5));
    let r = eval(&[5, 7], vec![1, 2], vec![], "10.1.0.0/16").unwrap();
    assert_eq!(r.communities, vec![2]);
    assert!(eval(&[5, 7], vec![1], vec![], "10.1.0.0/25").is_none());
    assert!(eval(&[5, 8], vec![1], vec![], "10.1.0.0/16").is_none());
    let n = Match::NeighborAs(5);
    let pol2 = Policy {
        name: "n".into(),
        terms: vec![Term {
            name: "n".into(),
            matches: vec![
                n,
                Match::AsPathContains(8),
                Match::PathLenLe(2),
                Match::Family(holdfast_wire::Afi::Ipv4),
            ],
            actions: vec![],
            verdict: Some(true),
        }],
        default_accept: false,
    };
    let a = attrs(&[5, 8], [1, 1, 1, 1]);
    assert!(matches!(
        pol2.evaluate(&p("10.0.0.0/8"), &a, &ctx),
        PolicyVerdict::Accept(_)
    ));
    assert!(matches!(
        pol2.evaluate(&p("2001:db8::/32"), &a, &ctx),
        PolicyVerdict::Reject
    ));
    let mut x = attrs(&[5, 8], [1, 1, 1, 1]);
    x.ext_communities = vec![[0, 2, 0, 1, 0, 0, 0, 5]];
    let pol3 = Policy {
        name: "x".into(),
        terms: vec![Term {
            name: "x".into(),
            matches: vec![Match::ExtCommunity([0, 2, 0, 1, 0, 0, 0, 5])],
            actions: vec![],
            verdict: Some(true),
        }],
        default_accept: false,
    };
    assert!(matches!(
        pol3.evaluate(&p("10.0.0.0/8"), &x, &ctx),
        PolicyVerdict::Accept(_)
    ));
    assert!(matches!(
        pol3.evaluate(&p("10.0.0.0/8"), &a, &ctx),
        PolicyVerdict::Reject
    ));
}

#[test]
fn import_policy_applied_and_none_rejects() {
    let mut e = engine(&[(1, 65001), (2, 65002)]);
    let pol = Policy {
        name: "lp".into(),
        terms: vec![Term {
            name: "pl".into(),
            matches: vec![Match::PrefixList(plist(vec![(
                "10.0.0.0/8",
                None,
                Some(24),
                true,
            )]))],
            actions: vec![SetAction::LocalPref(222)],
            verdict: Some(true),
        }],
        default_accept: false,
    };
    e.set_policies(1, PolicyRef::Policy(Arc::new(pol)), PolicyRef::All);
    e.apply(vec![(
        1,
        ann(
            &["10.0.0.0/24", "10.0.0.0/25", "11.0.0.0/24"],
            attrs(&[65001], [192, 0, 2, 1]),
        ),
    )]);
    let l = e.loc_rib();
    assert_eq!(l.len(), 1);
    assert_eq!(l[0].2.local_pref, Some(222));
    assert_eq!(
        e.counts(1),
        PeerCounts {
            received: 3,
            accepted: 1,
            advertised: 0,
            stale: 0,
            policy_rejected: 2,
            duplicates: 0,
        }
    );
    e.set_policies(1, PolicyRef::None, PolicyRef::All);
    assert_loc_rib(&e, 0);
    assert_eq!(e.counts(1).received, 3);
}

/// The post-policy view (BMP's L flag): accepted routes with the policy's
/// attributes, a rejected one absent, and a policy change that rejects a
/// route seen as its withdrawal.
#[test]
fn post_policy_changes_are_watched() {
    let mut e = engine(&[(1, 65001), (2, 65002)]);
    let pol = Policy {
        name: "lp".into(),
        terms: vec![Term {
            name: "pl".into(),
            matches: vec![Match::PrefixList(plist(vec![(
                "10.0.0.0/8",
                None,
                Some(24),
                true,
            )]))],
            actions: vec![SetAction::LocalPref(222)],
            verdict: Some(true),
        }],
        default_accept: false,
    };
    e.set_policies(1, PolicyRef::Policy(Arc::new(pol)), PolicyRef::All);
    e.apply(vec![(
        1,
        ann(&["10.0.0.0/24"], attrs(&[65001], [192, 0, 2, 1])),
    )]);
    assert!(e.take_post_changes().is_empty(), "off by default");
    e.set_watch_post(true);
    e.apply(vec![(
        1,
        ann(
            &["10.0.1.0/24", "11.0.0.0/24"],
            attrs(&[65001], [192, 0, 2, 1]),
        ),
    )]);
    let c = e.take_post_changes();
    assert_eq!(c.len(), 1, "the rejected route is not in the view: {c:?}");
    assert_eq!((c[0].0, c[0].1), (1, p("10.0.1.0/24")));
    assert_eq!(c[0].2.as_ref().and_then(|a| a.local_pref), Some(222));
    let post = e.adj_rib_in_post(1);
    assert_eq!(
        post.iter().map(|r| r.0).collect::<Vec<_>>(),
        vec![p("10.0.0.0/24"), p("10.0.1.0/24")]
    );
    assert!(post.iter().all(|r| r.1.local_pref == Some(222)));
    assert_eq!(e.adj_rib_in(1).len(), 3, "pre-policy holds all three");
    // The same route again: nothing changes after the policy.
    e.apply(vec![(
        1,
        ann(&["10.0.1.0/24"], attrs(&[65001], [192, 0, 2, 1])),
    )]);
    assert!(e.take_post_changes().is_empty());
    // BMP statistics types 0 and 1: 11.0.0.0/24 rejected, 10.0.1.0/24
    // announced twice alike.
    assert_eq!(
        (e.counts(1).policy_rejected, e.counts(1).duplicates),
        (1, 1)
    );
    e.set_policies(1, PolicyRef::None, PolicyRef::All);
    let mut c = e.take_post_changes();
    c.sort_by_key(|x| x.1);
    assert_eq!(c.len(), 2, "{c:?}");
    assert!(c.iter().all(|x| x.2.is_none()), "rejected now: withdrawn");
    e.set_watch_post(false);
    e.set_policies(1, PolicyRef::All, PolicyRef::All);
    assert!(e.take_post_changes().is_empty(), "off again");
}

#[test]
fn a_peer_exporting_nothing_gets_nothing_until_its_export_opens() {
    let mut e = engine(&[(1, 65001), (2, 65002), (3, 65003)]);
    e.set_policies(3, PolicyRef::All, PolicyRef::None);
    let out = e.apply(vec![(
        1,
        ann(
            &["10.0.0.0/24", "10.0.1.0/24"],
            attrs(&[65001], [192, 0, 2, 1]),
        ),
    )]);
    assert_eq!(announced(&out, 2).len(), 2);
    assert!(sent(&out, 3).is_empty());
    assert!(e.adj_rib_out(3).is_empty());
    // Opened: the whole table; closed again: all of it withdrawn.
    let out = e.set_policies(3, PolicyRef::All, PolicyRef::All);
    assert_eq!(announced(&out, 3).len(), 2);
    let out = e.set_policies(3, PolicyRef::All, PolicyRef::None);
    let mut w = withdrawn(&out, 3);
    w.sort();
    assert_eq!(w, vec![p("10.0.0.0/24"), p("10.0.1.0/24")]);
    assert!(e.adj_rib_out(3).is_empty());
    let out = e.apply(vec![(1, wd(&["10.0.0.0/24"]))]);
    assert_eq!(withdrawn(&out, 2), vec![p("10.0.0.0/24")]);
    assert!(sent(&out, 3).is_empty());
}

#[test]
fn set_policies_sends_only_the_diff() {
    let mut e = engine(&[(1, 65001), (2, 65002)]);
    e.apply(vec![(
        1,
        ann(
            &["10.0.0.0/24", "10.0.1.0/24", "10.0.2.0/24"],
            attrs(&[65001], [192, 0, 2, 1]),
        ),
    )]);
    let deny1 = Policy {
        name: "deny1".into(),
        terms: vec![Term {
            name: "d".into(),
            matches: vec![Match::PrefixList(plist(vec![(
                "10.0.1.0/24",
                None,
                None,
                true,
            )]))],
            actions: vec![],
            verdict: Some(false),
        }],
        default_accept: true,
    };
    let out = e.set_policies(2, PolicyRef::All, PolicyRef::Policy(Arc::new(deny1)));
    assert_eq!(withdrawn(&out, 2), vec![p("10.0.1.0/24")]);
    assert!(announced(&out, 2).is_empty());
    let out = e.set_policies(2, PolicyRef::All, PolicyRef::All);
    assert!(withdrawn(&out, 2).is_empty());
    assert_eq!(
        announced(&out, 2)
            .into_iter()
            .map(|x| x.0)
            .collect::<Vec<_>>(),
        vec![p("10.0.1.0/24")]
    );
    // Import side: newly rejected prefix withdrawn from peer 2.
    let deny0 = Policy {
        name: "deny0".into(),
        terms: vec![Term {
            name: "d".into(),
            matches: vec![Match::PrefixList(plist(vec![(
                "10.0.0.0/24",
                None,
                None,
                true,
            )]))],
            actions: vec![],
            verdict: Some(false),
        }],
        default_accept: true,
    };
    let out = e.set_policies(1, PolicyRef::Policy(Arc::new(deny0)), PolicyRef::All);
    assert_eq!(withdrawn(&out, 2), vec![p("10.0.0.0/24")]);
    assert!(announced(&out, 2).is_empty());
    let out = e.set_policies(1, PolicyRef::All, PolicyRef::All);
    assert_eq!(
        announced(&out, 2)
            .into_iter()
            .map(|x| x.0)
            .collect::<Vec<_>>(),
        vec![p("10.0.0.0/24")]
    );
}

#[test]
fn identical_peers_share_one_arc_and_packing() {
    let mut e = engine(&[(1, 65001), (2, 65002), (3, 65002), (4, 65003)]);
    let out = e.apply(vec![
        (1, ann(&["10.0.0.0/24"], attrs(&[65001, 5], [192, 0, 2, 1]))),
        (
            1,
            ann(
                &["10.0.1.0/24", "10.0.2.0/24"],
                attrs(&[65001, 6], [192, 0, 2, 1]),
            ),
        ),
        (1, ann(&["10.0.3.0/24"], attrs(&[65001, 5], [192, 0, 2, 1]))),
    ]);
    let m: Vec<_> = out.messages.iter().filter(|(id, _)| *id != 1).collect();
    assert_eq!(m.len(), 3);
    assert!(
        arc_eq(&m[0].1, &m[1].1) && arc_eq(&m[1].1, &m[2].1),
        "same group and same changes share bytes"
    );
    // Two attribute sets -> two UPDATE messages, prefixes grouped by set.
    let u = sent(&out, 2);
    assert_eq!(u.len(), 2);
    let mut sizes: Vec<usize> = u.iter().map(|x| x.announced.len()).collect();
    sizes.sort();
    assert_eq!(sizes, vec![2, 2]);
}

#[test]
fn max_prefix_reset() {
    let mut e = Engine::new(cfg(1));
    let mut s = peer(1, 65001);
    s.max_prefix = Some(2);
    e.add_peer(s.clone());
    e.peer_up(s);
    e.add_peer(peer(2, 65002));
    e.peer_up(peer(2, 65002));
    let out = e.apply(vec![
        (
            1,
            ann(
                &["10.0.0.0/24", "10.0.1.0/24"],
                attrs(&[65001], [192, 0, 2, 1]),
            ),
        ),
        (1, ann(&["10.0.0.0/24"], attrs(&[65001, 9], [192, 0, 2, 1]))),
        (
            1,
            ann(
                &["10.0.2.0/24", "10.0.3.0/24"],
                attrs(&[65001], [192, 0, 2, 1]),
            ),
        ),
    ]);
    assert_eq!(out.resets.len(), 1);
    let (id, n) = &out.resets[0];
    assert_eq!(*id, 1);
    assert_eq!((n.code, n.subcode), (6, 1));
    assert_eq!(n.data, vec![0, 1, 1, 0, 0, 0, 2]);
    assert_eq!(e.counts(1).accepted, 2);
    assert_eq!(best(&e, "10.0.2.0/24"), None);
    // Re-announcing a counted prefix stays within the limit.
    let out = e.apply(vec![(
        1,
        ann(&["10.0.1.0/24"], attrs(&[65001, 3], [192, 0, 2, 1])),
    )]);
    assert!(out.resets.is_empty());
}

#[test]
fn graceful_restart_stale_eor_and_timeout() {
    let mut e = engine(&[(1, 65001), (2, 65002)]);
    e.apply(vec![(
        1,
        ann(
            &["10.0.0.0/24", "10.0.1.0/24", "10.0.2.0/24"],
            attrs(&[65001], [192, 0, 2, 1]),
        ),
    )]);
    e.apply(vec![(
        1,
        ann(&["2001:db8:1::/48"], {
            let mut a = attrs(&[65001], [192, 0, 2, 1]);
            a.next_hop = None;
            a.mp_next_hop = Some(v6nh("2001:db8::1"));
            a
        }),
    )]);
    let out = e.peer_down(1, true);
    assert!(out.messages.is_empty(), "stale routes stay advertised");
    assert_eq!(e.counts(1).stale, 4);
    assert_loc_rib(&e, 4);
    e.peer_up(peer(1, 65001));
    // Re-announced clears stale (same attributes: nothing sent to peer 2).
    let out = e.apply(vec![(
        1,
        ann(&["10.0.0.0/24"], attrs(&[65001], [192, 0, 2, 1])),
    )]);
    assert!(sent(&out, 2).is_empty());
    assert_eq!(e.counts(1).stale, 3);
    let out = e.apply(vec![(1, eor(Family::IPV4_UNICAST))]);
    assert_eq!(withdrawn(&out, 2), vec![p("10.0.1.0/24"), p("10.0.2.0/24")]);
    assert_eq!(e.counts(1).stale, 1);
    let out = e.stale_timeout(1);
    assert_eq!(withdrawn(&out, 2), vec![p("2001:db8:1::/48")]);
    assert_eq!(e.counts(1).stale, 0);
    assert_loc_rib(&e, 1);
}

#[test]
fn non_graceful_down_withdraws_and_up_sends_table_with_eor() {
    let mut e = engine(&[(1, 65001), (2, 65002)]);
    e.apply(vec![(
        1,
        ann(
            &["10.0.0.0/24", "10.0.1.0/24"],
            attrs(&[65001], [192, 0, 2, 1]),
        ),
    )]);
    let out = e.peer_up(peer(3, 65003));
    let u = sent(&out, 3);
    assert_eq!(u.iter().map(|x| x.announced.len()).sum::<usize>(), 2);
    assert_eq!(
        u.iter().filter_map(|x| x.end_of_rib).collect::<Vec<_>>(),
        vec![Family::IPV4_UNICAST, Family::IPV6_UNICAST]
    );
    let out = e.route_refresh(3, Family::IPV4_UNICAST);
    let u = sent(&out, 3);
    assert_eq!(u.iter().map(|x| x.announced.len()).sum::<usize>(), 2);
    assert_eq!(u.last().unwrap().end_of_rib, Some(Family::IPV4_UNICAST));
    let out = e.peer_down(1, false);
    assert_eq!(withdrawn(&out, 2).len(), 2);
    assert_eq!(withdrawn(&out, 3).len(), 2);
    assert_loc_rib(&e, 0);
    let out = e.remove_peer(1);
    assert!(out.messages.is_empty());
    assert_eq!(e.counts(1), PeerCounts::default());
}

#[test]
fn ipv6_routes_with_mp_next_hop() {
    let mut e = engine(&[(1, 65001), (2, 65002), (3, LOCAL_AS)]);
    let mut a = attrs(&[65001], [0, 0, 0, 0]);
    a.next_hop = None;
    a.mp_next_hop = Some(holdfast_wire::MpNextHop {
        global: IpAddr::V6("2001:db8::1".parse().unwrap()),
        link_local: Some("fe80::1".parse().unwrap()),
    });
    let u = ann(&["2001:db8:100::/48"], a);
    let bodies = raw(&u);
    let out = e.apply_raw(bodies.into_iter().map(|b| (1, b)).collect());
    let to2 = announced(&out, 2);
    assert_eq!(to2.len(), 1);
    assert_eq!(to2[0].0, p("2001:db8:100::/48"));
    let nh = to2[0].1.mp_next_hop.unwrap();
    assert_eq!(
        nh.global,
        IpAddr::V6("2001:db8::fe".parse::<Ipv6Addr>().unwrap())
    );
    assert_eq!(nh.link_local, Some("fe80::fe".parse().unwrap()));
    let to3 = announced(&out, 3);
    assert_eq!(
        to3[0].1.mp_next_hop.unwrap().global,
        IpAddr::V6("2001:db8::1".parse::<Ipv6Addr>().unwrap())
    );
    // A peer without the IPv6 family gets nothing.
    let mut s = peer(4, 65004);
    s.families = vec![Family::IPV4_UNICAST];
    let out = e.peer_up(s);
    assert!(announced(&out, 4).is_empty());
    let out = e.apply(vec![(1, wd(&["2001:db8:100::/48"]))]);
    assert_eq!(withdrawn(&out, 2), vec![p("2001:db8:100::/48")]);
    assert!(sent(&out, 4).is_empty());
}

#[test]
fn originated_routes_export_next_hop_self() {
    let mut e = engine(&[(2, 65002), (3, LOCAL_AS)]);
    let mut a = PathAttrs::default();
    a.as_path.segments = vec![AsSegment::Sequence(vec![1, 2])];
    let out = e.originate(vec![(p("203.0.113.0/24"), a)]);
    let x = &announced(&out, 2)[0].1;
    // The AS_PATH given is kept, ours prepended on eBGP.
    assert_eq!(
        x.as_path.iter_asns().collect::<Vec<_>>(),
        vec![LOCAL_AS, 1, 2]
    );
    assert_eq!(x.origin, Some(holdfast_wire::Origin::Igp));
    assert_eq!(x.next_hop, Some(Ipv4Addr::new(192, 0, 2, 254)));
    let y = &announced(&out, 3)[0].1;
    assert_eq!(y.next_hop, Some(Ipv4Addr::new(192, 0, 2, 254)));
    assert_eq!(y.local_pref, Some(100));
    assert_eq!(e.loc_rib()[0].1, LOCAL_PEER);
    let out = e.withdraw_originated(vec![p("203.0.113.0/24")]);
    assert_eq!(withdrawn(&out, 2), vec![p("203.0.113.0/24")]);
}

#[test]
fn best_path_changes_are_watched() {
    let mut e = engine(&[(1, 65001), (2, 65002)]);
    e.apply(vec![(
        1,
        ann(&["10.0.0.0/24"], attrs(&[65001], [192, 0, 2, 1])),
    )]);
    assert!(e.take_best_changes().is_empty(), "off by default");
    e.set_watch_best(true);
    e.apply(vec![(
        2,
        ann(&["10.0.1.0/24"], attrs(&[65002], [192, 0, 2, 2])),
    )]);
    let c = e.take_best_changes();
    assert_eq!(c.len(), 1);
    assert_eq!(c[0].0, p("10.0.1.0/24"));
    let (peer, a) = c[0].1.clone().expect("a best path");
    assert_eq!(peer, 2);
    assert_eq!(a.local_pref, Some(100));
    assert!(e.take_best_changes().is_empty(), "taken");
    let o = PathAttrs {
        origin: Some(holdfast_wire::Origin::Igp),
        ..PathAttrs::default()
    };
    e.originate(vec![(p("203.0.113.0/24"), o)]);
    e.apply(vec![(2, wd(&["10.0.1.0/24"]))]);
    let c = e.take_best_changes();
    assert_eq!(c.len(), 2);
    assert!(c
        .iter()
        .any(|(x, b)| *x == p("203.0.113.0/24") && b.as_ref().map(|b| b.0) == Some(LOCAL_PEER)));
    assert!(c.iter().any(|(x, b)| *x == p("10.0.1.0/24") && b.is_none()));
    e.set_watch_best(false);
    e.apply(vec![(
        2,
        ann(&["10.0.2.0/24"], attrs(&[65002], [192, 0, 2, 2])),
    )]);
    assert!(e.take_best_changes().is_empty(), "off again");
}

#[test]
fn raw_decode_error_resets_session() {
    let mut e = engine(&[(1, 65001)]);
    let out = e.apply_raw(vec![(1, vec![0, 0, 0, 9, 1])]);
    assert_eq!(out.resets.len(), 1);
    assert_eq!(out.resets[0].1.code, 3);
}

#[test]
fn adj_rib_out_and_queries() {
    let mut e = engine(&[(1, 65001), (2, 65002)]);
    e.apply(vec![(
        1,
        ann(
            &["10.0.0.0/24", "10.0.1.0/24"],
            attrs(&[65001], [192, 0, 2, 1]),
        ),
    )]);
    let out = e.adj_rib_out(2);
    assert_eq!(out.len(), 2);
    assert_eq!(
        out[0].1.as_path.iter_asns().collect::<Vec<_>>(),
        vec![LOCAL_AS, 65001]
    );
    assert!(e.adj_rib_out(1).is_empty());
    assert_eq!(e.counts(2).advertised, 2);
    assert_eq!(e.attr_sets(), 1);
    assert_eq!(e.lookup(&p("10.0.0.0/24")).len(), 1);
}

/// A mixed workload through apply_raw must give byte-identical output with
/// 1 and 2 threads.
#[test]
fn deterministic_across_thread_counts() {
    let run = |threads: usize| {
        let mut c = cfg(threads);
        c.shards = 16;
        let mut e = Engine::new(c);
        for (id, asn) in [
            (1, 65001),
            (2, 65002),
            (3, LOCAL_AS),
            (4, 65004),
            (5, 65005),
        ] {
            e.add_peer(peer(id, asn));
            e.peer_up(peer(id, asn));
        }
        let mut batch = Vec::new();
        for i in 0..3000u32 {
            let src = [1, 3, 4][(i % 3) as usize];
            let pfx = format!("10.{}.{}.0/24", (i / 7) % 256, i % 256);
            let mut a = attrs(&[65001 + i % 5, i % 11], [192, 0, 2, src as u8]);
            a.med = Some(i % 3);
            for b in raw(&ann(&[&pfx], a)) {
                batch.push((src, b));
            }
            if i % 17 == 0 {
                for b in raw(&wd(&[&format!(
                    "10.{}.{}.0/24",
                    (i / 5) % 256,
                    (i + 3) % 256
                )])) {
                    batch.push((1, b));
                }
            }
        }
        let mut all = Vec::new();
        let out = e.apply_raw(batch);
        all.extend(out.messages.iter().map(|(id, m)| (*id, m.to_vec())));
        let out = e.peer_down(4, false);
        all.extend(out.messages.iter().map(|(id, m)| (*id, m.to_vec())));
        let out = e.peer_up(peer(6, 65006));
        all.extend(out.messages.iter().map(|(id, m)| (*id, m.to_vec())));
        all
    };
    let a = run(1);
    let b = run(2);
    assert!(a.iter().map(|x| x.1.len()).sum::<usize>() > 10_000);
    assert_eq!(a, b);
    assert_eq!(a, run(2));
}

/// Large single-peer batch: exercises chunked parallel decode and parallel
/// encoding; output must not depend on the thread count.
#[test]
fn deterministic_large_single_peer() {
    let run = |threads: usize| {
        let mut c = cfg(threads);
        c.shards = 16;
        let mut e = Engine::new(c);
        for (id, asn) in [(1, 65001), (2, 65002), (3, 65003)] {
            e.add_peer(peer(id, asn));
            e.peer_up(peer(id, asn));
        }
        let mut batch = Vec::new();
        for set in 0..60u32 {
            let pfx: Vec<String> = (0..400u32)
                .map(|i| {
                    format!(
                        "{}.{}.{}.0/24",
                        20 + set / 8,
                        (set % 8) * 32 + i / 256,
                        i % 256
                    )
                })
                .collect();
            let refs: Vec<&str> = pfx.iter().map(|s| s.as_str()).collect();
            for b in raw(&ann(&refs, attrs(&[65001, 100 + set % 13], [192, 0, 2, 1]))) {
                batch.push((1, b));
            }
        }
        let out = e.apply_raw(batch);
        assert_eq!(e.counts(1).accepted, 24_000);
        assert_eq!(announced(&out, 2).len(), 24_000);
        out.messages
            .iter()
            .map(|(id, m)| (*id, m.to_vec()))
            .collect::<Vec<_>>()
    };
    assert_eq!(run(1), run(2));
}

/// RFC 7606: a bad ORIGIN value makes the codec treat the UPDATE as a
/// withdrawal; the engine applies it and reports a warning.
#[test]
fn rfc7606_treat_as_withdraw_applied() {
    let mut e = engine(&[(1, 65001), (2, 65002)]);
    e.apply(vec![(
        1,
        ann(&["10.0.0.0/24"], attrs(&[65001], [192, 0, 2, 1])),
    )]);
    assert_loc_rib(&e, 1);
    let mut body = raw(&ann(&["10.0.0.0/24"], attrs(&[65001, 5], [192, 0, 2, 1]))).remove(0);
    assert_eq!(&body[4..7], &[0x40, 1, 1], "ORIGIN is the first attribute");
    body[7] = 9;
    let out = e.apply_raw(vec![(1, body)]);
    assert!(out.resets.is_empty());
    assert!(out
        .warnings
        .iter()
        .any(|(id, w)| *id == 1 && w.contains("7606")));
    assert_eq!(withdrawn(&out, 2), vec![p("10.0.0.0/24")]);
    assert_loc_rib(&e, 0);
}

#[test]
fn engine_is_send() {
    fn send<T: Send>() {}
    send::<Engine>();
    send::<Output>();
}

/// Two peers of one update group: the source of a route must not receive
/// it, so their outputs differ and must not share bytes.
#[test]
fn update_group_member_that_is_the_source_is_excluded() {
    let mut e = engine(&[(2, 65002), (3, 65002)]);
    let out = e.apply(vec![(
        2,
        ann(&["10.0.0.0/24"], attrs(&[65002], [192, 0, 2, 2])),
    )]);
    assert!(sent(&out, 2).is_empty());
    assert_eq!(announced(&out, 3).len(), 1);
    // Route refresh re-sends the Adj-RIB-Out (+ End-of-RIB).
    let out = e.route_refresh(3, Family::IPV4_UNICAST);
    let u = sent(&out, 3);
    assert_eq!(u[0].announced, vec![p("10.0.0.0/24")]);
    assert_eq!(u.last().unwrap().end_of_rib, Some(Family::IPV4_UNICAST));
    assert_eq!(e.counts(2).advertised, 0);
    assert_eq!(e.counts(3).advertised, 1);
}

#[test]
fn loc_rib_count_follows_every_change() {
    // Random announcements (some looped, so rejected by import),
    // withdrawals and sessions going down and up, over 40 prefixes and
    // three peers: after each step the counted Loc-RIB size is the walked one.
    let mut e = engine(&[(1, 65001), (2, 65002), (3, 65003)]);
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = |n: u64| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x % n
    };
    let asns = [65001, 65002, 65003];
    for _ in 0..3000 {
        let peer = next(3) as u32 + 1;
        let prefix = format!("10.{}.{}.0/24", next(2), next(20));
        match next(10) {
            0..=4 => {
                let path: &[u32] = if next(4) == 0 {
                    &[asns[peer as usize - 1], LOCAL_AS]
                } else {
                    &[asns[peer as usize - 1], next(5) as u32 + 1]
                };
                e.apply(vec![(
                    peer,
                    ann(&[&prefix], attrs(path, [192, 0, 2, peer as u8])),
                )]);
            }
            5..=7 => {
                e.apply(vec![(peer, wd(&[&prefix]))]);
            }
            8 => {
                e.peer_down(peer, false);
                e.peer_up(common::peer(peer, asns[peer as usize - 1]));
            }
            _ => {
                e.peer_down(peer, true);
                e.peer_up(common::peer(peer, asns[peer as usize - 1]));
            }
        }
        assert_eq!(e.loc_rib_len(), e.loc_rib_len_walked());
    }
    assert!(e.loc_rib_len() > 0, "the walk ends with routes");
}
