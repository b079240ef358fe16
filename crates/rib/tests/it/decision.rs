//! RFC 4271 §9.1.2.2 decision process, one test per tie-break step.
use crate::common;
use common::*;
use holdfast_rib::*;
use holdfast_wire::{Origin, PathAttrs};
use std::net::{IpAddr, Ipv4Addr};

/// Engine with eBGP peers 1, 2 (AS 65001/65002), iBGP peers 3, 4, and
/// an eBGP receiver 9.
fn setup() -> Engine {
    let mut e = Engine::new(cfg(1));
    for (id, asn) in [
        (1, 65001),
        (2, 65002),
        (3, LOCAL_AS),
        (4, LOCAL_AS),
        (5, 65001),
        (9, 65009),
    ] {
        e.add_peer(peer(id, asn));
        e.peer_up(peer(id, asn));
    }
    e
}

fn announce(e: &mut Engine, id: u32, a: PathAttrs) {
    e.apply(vec![(id, ann(&["10.0.0.0/24"], a))]);
}

#[test]
fn highest_local_pref_wins() {
    let mut e = setup();
    let mut a = attrs(&[], [10, 0, 3, 1]);
    a.local_pref = Some(200);
    let mut b = attrs(&[], [10, 0, 4, 1]);
    b.local_pref = Some(150);
    announce(&mut e, 4, b);
    announce(&mut e, 3, a);
    assert_eq!(best(&e, "10.0.0.0/24"), Some(3));
    // eBGP routes get the default 100 and lose to 150.
    announce(&mut e, 1, attrs(&[65001], [192, 0, 2, 1]));
    assert_eq!(best(&e, "10.0.0.0/24"), Some(3));
}

#[test]
fn shortest_as_path_wins() {
    let mut e = setup();
    announce(&mut e, 1, attrs(&[65001, 1, 2], [192, 0, 2, 1]));
    announce(&mut e, 2, attrs(&[65002, 2], [192, 0, 2, 2]));
    assert_eq!(best(&e, "10.0.0.0/24"), Some(2));
}

#[test]
fn lowest_origin_wins() {
    let mut e = setup();
    let mut a = attrs(&[65001, 7], [192, 0, 2, 1]);
    a.origin = Some(Origin::Incomplete);
    let mut b = attrs(&[65002, 7], [192, 0, 2, 2]);
    b.origin = Some(Origin::Egp);
    announce(&mut e, 1, a);
    announce(&mut e, 2, b);
    assert_eq!(best(&e, "10.0.0.0/24"), Some(2));
}

#[test]
fn lowest_med_same_neighbour_as_only() {
    let mut e = setup();
    // Same neighbour AS 65001 (peers 1 and 5): MED compared.
    let mut a = attrs(&[65001, 7], [192, 0, 2, 1]);
    a.med = Some(50);
    let mut b = attrs(&[65001, 7], [192, 0, 2, 5]);
    b.med = Some(10);
    announce(&mut e, 1, a.clone());
    announce(&mut e, 5, b);
    assert_eq!(best(&e, "10.0.0.0/24"), Some(5));
    // Different neighbour AS: MED ignored, falls to router id (1 < 2).
    let mut e = setup();
    let mut c = attrs(&[65002, 7], [192, 0, 2, 2]);
    c.med = Some(0);
    announce(&mut e, 1, a);
    announce(&mut e, 2, c);
    assert_eq!(best(&e, "10.0.0.0/24"), Some(1));
}

#[test]
fn missing_med_is_zero() {
    let mut e = setup();
    let mut a = attrs(&[65001, 7], [192, 0, 2, 1]);
    a.med = Some(5);
    announce(&mut e, 1, a);
    announce(&mut e, 5, attrs(&[65001, 7], [192, 0, 2, 5]));
    assert_eq!(best(&e, "10.0.0.0/24"), Some(5));
}

/// RFC 4271 §9.1.2.2 (c): MED only compares routes from the same
/// neighbouring AS, which makes pairwise comparison intransitive.
/// A: AS 65001, MED 100, id .30; B: AS 65002, MED 150, id .20;
/// C: AS 65001, MED 200, id .10. Elimination: C loses to A on MED, then B
/// beats A on router id, so B is best. A pairwise walk A,B,C would end with C
/// (B vs C compares router ids: .10 < .20). Every arrival order must give B.
#[test]
fn med_non_transitivity_rfc4271() {
    let mk = |id: u32, asn: u32, rid: u8| {
        let mut s = peer(id, asn);
        s.router_id = Ipv4Addr::new(1, 1, 1, rid);
        s
    };
    let mut a = attrs(&[65001, 7], [192, 0, 2, 1]);
    a.med = Some(100);
    let mut b = attrs(&[65002, 7], [192, 0, 2, 2]);
    b.med = Some(150);
    let mut c = attrs(&[65001, 7], [192, 0, 2, 5]);
    c.med = Some(200);
    for order in [
        [1u32, 2, 5],
        [5, 1, 2],
        [2, 5, 1],
        [1, 5, 2],
        [5, 2, 1],
        [2, 1, 5],
    ] {
        let mut e = Engine::new(cfg(1));
        for s in [mk(1, 65001, 30), mk(2, 65002, 20), mk(5, 65001, 10)] {
            e.add_peer(s.clone());
            e.peer_up(s);
        }
        for id in order {
            let x = match id {
                1 => a.clone(),
                2 => b.clone(),
                _ => c.clone(),
            };
            announce(&mut e, id, x);
        }
        assert_eq!(best(&e, "10.0.0.0/24"), Some(2), "order {order:?}");
    }
    // always-compare-med: MED compared across ASes, lowest (A, 100) wins
    // despite the higher router id.
    let mut c2 = cfg(1);
    c2.always_compare_med = true;
    let mut e = Engine::new(c2);
    for s in [mk(1, 65001, 30), mk(2, 65002, 20), mk(5, 65001, 10)] {
        e.add_peer(s.clone());
        e.peer_up(s);
    }
    announce(&mut e, 1, a);
    announce(&mut e, 5, c);
    announce(&mut e, 2, b);
    assert_eq!(best(&e, "10.0.0.0/24"), Some(1));
}

#[test]
fn ebgp_over_ibgp() {
    let mut e = setup();
    announce(&mut e, 3, attrs(&[65001, 7], [192, 0, 2, 1]));
    announce(&mut e, 1, attrs(&[65001, 7], [192, 0, 2, 1]));
    assert_eq!(best(&e, "10.0.0.0/24"), Some(1));
}

#[test]
fn shorter_cluster_list_wins() {
    let mut e = setup();
    let mut a = attrs(&[65001], [10, 0, 0, 3]);
    a.cluster_list = vec![Ipv4Addr::new(9, 9, 9, 9), Ipv4Addr::new(8, 8, 8, 8)];
    a.originator_id = Some(Ipv4Addr::new(2, 2, 2, 2));
    let mut b = attrs(&[65001], [10, 0, 0, 4]);
    b.cluster_list = vec![Ipv4Addr::new(9, 9, 9, 9)];
    b.originator_id = Some(Ipv4Addr::new(3, 3, 3, 3));
    announce(&mut e, 3, a);
    announce(&mut e, 4, b);
    assert_eq!(best(&e, "10.0.0.0/24"), Some(4));
}

#[test]
fn lowest_router_id_and_originator_id_substitutes() {
    let mut e = setup();
    announce(&mut e, 3, attrs(&[65001], [10, 0, 0, 3]));
    announce(&mut e, 4, attrs(&[65001], [10, 0, 0, 4]));
    assert_eq!(best(&e, "10.0.0.0/24"), Some(3));
    // Peer 3's route now carries ORIGINATOR_ID 9.9.9.9 > 1.1.1.4.
    let mut a = attrs(&[65001], [10, 0, 0, 3]);
    a.originator_id = Some(Ipv4Addr::new(9, 9, 9, 9));
    announce(&mut e, 3, a);
    assert_eq!(best(&e, "10.0.0.0/24"), Some(4));
}

#[test]
fn lowest_peer_address_breaks_equal_router_ids() {
    let mut e = Engine::new(cfg(1));
    let mut s1 = peer(1, 65001);
    s1.address = IpAddr::V4(Ipv4Addr::new(192, 0, 2, 50));
    s1.router_id = Ipv4Addr::new(7, 7, 7, 7);
    let mut s2 = peer(2, 65001);
    s2.address = IpAddr::V4(Ipv4Addr::new(192, 0, 2, 40));
    s2.router_id = Ipv4Addr::new(7, 7, 7, 7);
    for s in [s1, s2] {
        e.add_peer(s.clone());
        e.peer_up(s);
    }
    announce(&mut e, 1, attrs(&[65001], [192, 0, 2, 50]));
    announce(&mut e, 2, attrs(&[65001], [192, 0, 2, 40]));
    assert_eq!(best(&e, "10.0.0.0/24"), Some(2));
}

#[test]
fn local_routes_beat_learned() {
    let mut e = setup();
    let mut a = attrs(&[], [10, 0, 3, 1]);
    a.local_pref = Some(1000);
    announce(&mut e, 3, a);
    e.originate(vec![(p("10.0.0.0/24"), PathAttrs::default())]);
    assert_eq!(best(&e, "10.0.0.0/24"), Some(LOCAL_PEER));
    e.withdraw_originated(vec![p("10.0.0.0/24")]);
    assert_eq!(best(&e, "10.0.0.0/24"), Some(3));
}
