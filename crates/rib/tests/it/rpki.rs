//! RFC 6811 validation in the engine: `Match::Rpki` in import policy and
//! revalidation of the covered routes when the VRP table changes.
use crate::common;
use common::*;
use holdfast_rib::*;
use std::sync::Arc;

/// Rejects invalid routes, sets LOCAL_PREF 200 on valid ones.
fn rov() -> PolicyRef {
    PolicyRef::Policy(Arc::new(Policy {
        name: "rov".into(),
        terms: vec![
            Term {
                name: "invalid".into(),
                matches: vec![Match::Rpki(vec![Validity::Invalid])],
                actions: vec![],
                verdict: Some(false),
            },
            Term {
                name: "valid".into(),
                matches: vec![Match::Rpki(vec![Validity::Valid])],
                actions: vec![SetAction::LocalPref(200)],
                verdict: Some(true),
            },
        ],
        default_accept: true,
    }))
}

fn vrp(s: &str, max_len: u8, asn: u32) -> Vrp {
    Vrp {
        prefix: p(s),
        max_len,
        asn,
    }
}

fn setup() -> Engine {
    let mut e = Engine::new(cfg(1));
    let mut a = peer(1, 65001);
    a.import = rov();
    e.add_peer(a.clone());
    e.peer_up(a);
    e.add_peer(peer(2, 65002));
    e.peer_up(peer(2, 65002));
    e
}

#[test]
fn import_policy_matches_the_state_and_revalidates() {
    let mut e = setup();
    let vrps = vec![vrp("10.1.0.0/16", 24, 65001), vrp("10.2.0.0/16", 16, 65009)];
    assert!(e
        .set_vrps(Arc::new(VrpTable::new(&vrps)), &vrps)
        .messages
        .is_empty());
    // valid, invalid (wrong origin), not-found.
    let out = e.apply(vec![(
        1,
        ann(
            &["10.1.1.0/24", "10.2.0.0/16", "10.3.0.0/16"],
            attrs(&[65001], [192, 0, 2, 1]),
        ),
    )]);
    let mut got: Vec<Prefix> = announced(&out, 2).into_iter().map(|r| r.0).collect();
    got.sort();
    assert_eq!(got, vec![p("10.1.1.0/24"), p("10.3.0.0/16")]);
    assert_eq!(
        e.rpki_counts(),
        RpkiCounts {
            valid: 1,
            invalid: 1,
            not_found: 1
        }
    );
    assert_eq!(
        e.route_validity(1, &p("10.2.0.0/16")),
        Some(Validity::Invalid)
    );
    let valid = e.lookup(&p("10.1.1.0/24"));
    assert_eq!(valid[0].1.local_pref, Some(200));
    // The cache now authorises AS 65001 for 10.2.0.0/16 and drops the VRP
    // of 10.1.0.0/16: the first becomes valid and is announced, the
    // second not-found (LOCAL_PREF back to none, which an eBGP peer does
    // not see: nothing sent for it).
    let added = vrp("10.2.0.0/16", 16, 65001);
    let removed = vrp("10.1.0.0/16", 24, 65001);
    let next = vec![vrp("10.2.0.0/16", 16, 65009), added];
    let out = e.set_vrps(Arc::new(VrpTable::new(&next)), &[added, removed]);
    let mut got: Vec<Prefix> = announced(&out, 2).into_iter().map(|r| r.0).collect();
    got.sort();
    assert_eq!(got, vec![p("10.2.0.0/16")]);
    assert!(withdrawn(&out, 2).is_empty());
    assert_eq!(e.lookup(&p("10.1.1.0/24"))[0].1.local_pref, Some(100));
    assert_eq!(e.lookup(&p("10.2.0.0/16"))[0].1.local_pref, Some(200));
    assert_eq!(
        e.rpki_counts(),
        RpkiCounts {
            valid: 1,
            invalid: 0,
            not_found: 2
        }
    );
    // An AS0 VRP makes 10.3.0.0/16 invalid: withdrawn from peer 2.
    let as0 = vrp("10.3.0.0/16", 24, 0);
    let mut last = next.clone();
    last.push(as0);
    let out = e.set_vrps(Arc::new(VrpTable::new(&last)), &[as0]);
    assert_eq!(withdrawn(&out, 2), vec![p("10.3.0.0/16")]);
    assert!(announced(&out, 2).is_empty());
}

#[test]
fn peers_without_rpki_policy_are_not_revalidated() {
    let mut e = Engine::new(cfg(1));
    e.add_peer(peer(1, 65001));
    e.peer_up(peer(1, 65001));
    e.add_peer(peer(2, 65002));
    e.peer_up(peer(2, 65002));
    e.apply(vec![(
        1,
        ann(&["10.2.0.0/16"], attrs(&[65001], [192, 0, 2, 1])),
    )]);
    let v = vec![vrp("10.2.0.0/16", 16, 1)];
    let out = e.set_vrps(Arc::new(VrpTable::new(&v)), &v);
    assert!(out.messages.is_empty());
    // The state is still reported.
    assert_eq!(
        e.route_validity(1, &p("10.2.0.0/16")),
        Some(Validity::Invalid)
    );
}

#[test]
fn origin_of_empty_and_set_paths() {
    let t = VrpTable::new(&[vrp("10.0.0.0/8", 8, 65000)]);
    let ctx = PolicyCtx {
        local_as: 65000,
        rpki: Some(&t),
        ..PolicyCtx::default()
    };
    let empty = attrs(&[], [1, 1, 1, 1]);
    assert_eq!(
        policy::validity(&p("10.0.0.0/8"), &empty, &ctx),
        Validity::Valid
    );
    let mut set = attrs(&[65001], [1, 1, 1, 1]);
    set.as_path
        .segments
        .push(holdfast_wire::AsSegment::Set(vec![65000]));
    assert_eq!(
        policy::validity(&p("10.0.0.0/8"), &set, &ctx),
        Validity::Invalid
    );
    let none = PolicyCtx::default();
    assert_eq!(
        policy::validity(&p("10.0.0.0/8"), &empty, &none),
        Validity::NotFound
    );
}

/// Revalidation cost on a large table: `cargo test --release -p
/// holdfast-rib --test it rpki:: -- --ignored --nocapture` (a measurement).
#[test]
#[ignore]
fn revalidation_time_on_a_large_table() {
    let n: u32 = std::env::var("HOLDFAST_RPKI_ROUTES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000_000);
    let mut e = Engine::new(cfg(1));
    let mut a = peer(1, 65001);
    a.import = rov();
    e.add_peer(a.clone());
    e.peer_up(a);
    e.add_peer(peer(2, 65002));
    e.peer_up(peer(2, 65002));
    // n /24s under 10.0.0.0/8 and up, one VRP per /16 (n / 256 of them),
    // authorising AS 65001 up to /24: every route valid.
    let p24 = |i: u32| {
        let x = 0x0a00_0000u32 + (i << 8);
        format!("{}.{}.{}.0/24", x >> 24, (x >> 16) & 0xff, (x >> 8) & 0xff)
    };
    let vrps: Vec<Vrp> = (0..n.div_ceil(256))
        .map(|j| {
            let x = 0x0a00_0000u32 + (j << 16);
            vrp(
                &format!("{}.{}.0.0/16", x >> 24, (x >> 16) & 0xff),
                24,
                65001,
            )
        })
        .collect();
    e.set_vrps(Arc::new(VrpTable::new(&vrps)), &vrps);
    let at = attrs(&[65001], [192, 0, 2, 1]);
    let t = std::time::Instant::now();
    for chunk in (0..n).collect::<Vec<_>>().chunks(1000) {
        let ps: Vec<String> = chunk.iter().map(|i| p24(*i)).collect();
        let refs: Vec<&str> = ps.iter().map(String::as_str).collect();
        e.apply(vec![(1, ann(&refs, at.clone()))]);
    }
    let load = t.elapsed();
    // Ten /16 VRPs change origin: 2,560 routes become invalid.
    let mut next = vrps.clone();
    let mut changed = Vec::new();
    for v in next.iter_mut().take(10) {
        changed.push(*v);
        v.asn = 65009;
        changed.push(*v);
    }
    let table = Arc::new(VrpTable::new(&next));
    let t = std::time::Instant::now();
    let out = e.set_vrps(table, &changed);
    let took = t.elapsed();
    let w = withdrawn(&out, 2).len();
    let t = std::time::Instant::now();
    let c = e.rpki_counts();
    let count = t.elapsed();
    // The same load without an rpki match, for the import overhead.
    let mut plain = Engine::new(cfg(1));
    plain.add_peer(peer(1, 65001));
    plain.peer_up(peer(1, 65001));
    plain.add_peer(peer(2, 65002));
    plain.peer_up(peer(2, 65002));
    let t = std::time::Instant::now();
    for chunk in (0..n).collect::<Vec<_>>().chunks(1000) {
        let ps: Vec<String> = chunk.iter().map(|i| p24(*i)).collect();
        let refs: Vec<&str> = ps.iter().map(String::as_str).collect();
        plain.apply(vec![(1, ann(&refs, at.clone()))]);
    }
    println!("the same load with import \"all\": {:?}", t.elapsed());
    println!(
        "{n} routes, {} VRPs: loaded in {load:?}; 20 VRPs changed -> {w} withdrawn in {took:?}; rpki_counts {c:?} in {count:?}",
        vrps.len()
    );
    assert_eq!(w, 2560.min(n as usize));
}
