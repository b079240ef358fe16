//! Kernel FIB output (`Engine::take_fib`, `Engine::fib_all`): best next
//! hop, the equal-cost set with `fib_ecmp` > 1, removals.
use crate::common;
use common::*;
use holdfast_rib::*;
use std::net::IpAddr;

fn engine(ecmp: usize) -> Engine {
    let mut c = cfg(1);
    c.fib_ecmp = ecmp;
    let mut e = Engine::new(c);
    for (id, asn) in [(1, 65001), (2, 65002), (3, 65001)] {
        e.add_peer(peer(id, asn));
        e.peer_up(peer(id, asn));
    }
    e
}

fn take(e: &mut Engine) -> Vec<(Prefix, Vec<IpAddr>)> {
    let mut v = Vec::new();
    e.take_fib(&mut v);
    v.into_iter()
        .map(|r| (r.prefix, r.nexthops.to_vec()))
        .collect()
}

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

#[test]
fn best_next_hop_then_removal() {
    let mut e = engine(1);
    e.apply(vec![(
        1,
        ann(&["10.0.0.0/24"], attrs(&[65001], [192, 0, 2, 1])),
    )]);
    assert_eq!(
        take(&mut e),
        vec![(p("10.0.0.0/24"), vec![ip("192.0.2.1")])]
    );
    assert_eq!(take(&mut e), vec![], "reported once");
    // A longer path from peer 2 changes nothing.
    e.apply(vec![(
        2,
        ann(&["10.0.0.0/24"], attrs(&[65002, 1], [192, 0, 2, 2])),
    )]);
    assert_eq!(take(&mut e), vec![]);
    e.apply(vec![(1, wd(&["10.0.0.0/24"]))]);
    assert_eq!(
        take(&mut e),
        vec![(p("10.0.0.0/24"), vec![ip("192.0.2.2")])]
    );
    e.apply(vec![(2, wd(&["10.0.0.0/24"]))]);
    assert_eq!(take(&mut e), vec![(p("10.0.0.0/24"), vec![])]);
}

#[test]
fn equal_cost_set() {
    let mut e = engine(4);
    e.apply(vec![
        (1, ann(&["10.0.0.0/24"], attrs(&[65001], [192, 0, 2, 1]))),
        (2, ann(&["10.0.0.0/24"], attrs(&[65002], [192, 0, 2, 2]))),
    ]);
    assert_eq!(
        take(&mut e),
        vec![(p("10.0.0.0/24"), vec![ip("192.0.2.1"), ip("192.0.2.2")])]
    );
    // A worse MED from the same AS as the best is not equal.
    let mut worse = attrs(&[65001], [192, 0, 2, 3]);
    worse.med = Some(10);
    e.apply(vec![(3, ann(&["10.0.0.0/24"], worse))]);
    assert_eq!(
        take(&mut e),
        vec![(p("10.0.0.0/24"), vec![ip("192.0.2.1"), ip("192.0.2.2")])]
    );
    // A longer AS path is not equal either; peer 2's withdrawal leaves one.
    e.apply(vec![(
        2,
        ann(&["10.0.0.0/24"], attrs(&[65002, 7], [192, 0, 2, 2])),
    )]);
    assert_eq!(
        take(&mut e),
        vec![(p("10.0.0.0/24"), vec![ip("192.0.2.1")])]
    );
    let mut all = Vec::new();
    e.fib_all(&mut all);
    assert_eq!(all.len(), 1);
    // ecmp = 1 with two equal paths: the best only.
    let mut e = engine(1);
    e.apply(vec![
        (1, ann(&["10.0.0.0/24"], attrs(&[65001], [192, 0, 2, 1]))),
        (2, ann(&["10.0.0.0/24"], attrs(&[65002], [192, 0, 2, 2]))),
    ]);
    assert_eq!(
        take(&mut e),
        vec![(p("10.0.0.0/24"), vec![ip("192.0.2.1")])]
    );
}

#[test]
fn off_by_default() {
    let mut e = engine(0);
    e.apply(vec![(
        1,
        ann(&["10.0.0.0/24"], attrs(&[65001], [192, 0, 2, 1])),
    )]);
    assert_eq!(take(&mut e), vec![]);
}

/// `[kernel]` changed on reload: `set_fib_ecmp` and `fib_all` give the
/// whole table under the new value; 0 turns the output off.
#[test]
fn ecmp_changed_at_run_time() {
    let mut e = engine(1);
    e.apply(vec![
        (1, ann(&["10.0.0.0/24"], attrs(&[65001], [192, 0, 2, 1]))),
        (2, ann(&["10.0.0.0/24"], attrs(&[65002], [192, 0, 2, 2]))),
        (1, ann(&["10.0.1.0/24"], attrs(&[65001], [192, 0, 2, 1]))),
    ]);
    take(&mut e);
    let all = |e: &mut Engine| {
        let mut v = Vec::new();
        e.fib_all(&mut v);
        let mut v: Vec<(Prefix, Vec<IpAddr>)> = v
            .into_iter()
            .map(|r| (r.prefix, r.nexthops.to_vec()))
            .collect();
        v.sort();
        v
    };
    e.set_fib_ecmp(2);
    assert_eq!(
        all(&mut e),
        vec![
            (p("10.0.0.0/24"), vec![ip("192.0.2.1"), ip("192.0.2.2")]),
            (p("10.0.1.0/24"), vec![ip("192.0.2.1")]),
        ]
    );
    // Later changes follow the new value.
    e.apply(vec![(2, wd(&["10.0.0.0/24"]))]);
    assert_eq!(
        take(&mut e),
        vec![(p("10.0.0.0/24"), vec![ip("192.0.2.1")])]
    );
    e.set_fib_ecmp(1);
    e.apply(vec![(
        2,
        ann(&["10.0.0.0/24"], attrs(&[65002], [192, 0, 2, 2])),
    )]);
    take(&mut e);
    assert_eq!(
        all(&mut e),
        vec![
            (p("10.0.0.0/24"), vec![ip("192.0.2.1")]),
            (p("10.0.1.0/24"), vec![ip("192.0.2.1")]),
        ]
    );
    // Off: nothing is marked or reported any more.
    e.apply(vec![(1, wd(&["10.0.1.0/24"]))]);
    e.set_fib_ecmp(0);
    assert_eq!(take(&mut e), vec![]);
    e.apply(vec![(1, wd(&["10.0.0.0/24"]))]);
    assert_eq!(take(&mut e), vec![]);
}
