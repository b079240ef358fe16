//! Real peers peering with each other, to validate every reader of the harness.
//!
//! ```text
//!  bird_frr:
//!      [ b: bird AS65001 ] 198.18.1.1 ===== 198.18.1.2 [ f: frr AS65002 ]
//!                          fd00:0:0:1::1    fd00:0:0:1::2
//!      session 1: IPv4 transport, IPv4 unicast, TCP-MD5, graceful restart on, BIRD side
//!                 passive
//!      session 2: IPv6 transport, IPv6 unicast, FRR side passive, GR off, TTL security
//!
//!  gobgp_exabgp:
//!      [ g: gobgpd AS65011 ] 198.18.1.1 ===== 198.18.1.2 [ x: exabgp AS65012 ]
//!                            fd00:0:0:1::1    fd00:0:0:1::2
//!      session 1: IPv4 transport, IPv4 unicast, TCP-MD5, graceful restart on, hold 9,
//!                 ExaBGP side passive (listens)
//!      session 2: IPv6 transport, IPv6 unicast, GoBGP side passive, TTL security
//! ```
//!
//! Every session has exactly one passive side, so no connection collision (and its Cease
//! NOTIFICATION) can happen.
//!
//! Checked, for each pair and in both directions:
//! * sessions reach Established as reported by each tool (state, remote AS, uptime,
//!   counters where exposed, prefix counts, whether the peer advertised graceful restart
//!   — on for the IPv4 sessions, off for the IPv6 ones);
//! * originated IPv4 and IPv6 routes arrive with next hop, AS path (own AS + prepends),
//!   MED, communities and large communities as read back with the receiver's tool;
//! * advertised-routes readers list the originated routes;
//! * routes announced at runtime arrive, withdrawn ones disappear;
//! * no NOTIFICATION was exchanged; pcaps of the link contain the BGP traffic;
//! * bird_frr only: link down drops the IPv4 session (dropped counters +1), link up
//!   re-establishes it (established counters +1) and routes come back.
//!
//! Counters are checked as deltas / consistency (dropped = established - 1), not absolute
//! values, because a real peer may legitimately reset a session right after start.

use std::net::IpAddr;
use std::time::Duration;

use holdfast_lab::{
    skip_unless_ready, Bird, Exabgp, Frr, Gobgp, Lab, NeighborSpec, Peer, PeerKind, PeerSpec,
    RouteSpec, RouteView, SessionView,
};

const SESSION_TIMEOUT: Duration = Duration::from_secs(60);
const ROUTE_TIMEOUT: Duration = Duration::from_secs(30);

/// Whether `got` carries the attributes of `spec` as sent by `origin_as` over eBGP.
fn matches(got: &RouteView, spec: &RouteSpec, origin_as: u32, next_hop: IpAddr) -> bool {
    let mut path = vec![origin_as];
    path.extend(&spec.as_path);
    let mut comms = spec.communities.clone();
    comms.sort_unstable();
    let mut large = spec.large_communities.clone();
    large.sort_unstable();
    got.next_hop == Some(next_hop)
        && got.as_path == path
        && got.med == spec.med
        && got.communities == comms
        && got.large_communities == large
}

fn expect_route<P: Peer>(
    lab: &Lab,
    peer: &P,
    from: IpAddr,
    spec: &RouteSpec,
    origin_as: u32,
    next_hop: IpAddr,
) {
    peer.wait_route(lab, from, &spec.prefix, ROUTE_TIMEOUT, |r| {
        matches(r, spec, origin_as, next_hop)
    })
    .unwrap_or_else(|e| panic!("{}: {e}", peer.kind()));
}

/// While Established, every drop was followed by a re-establishment.
fn assert_consistent_counters(s: &SessionView) {
    let up = s.established_count.expect("established counter");
    let down = s.dropped_count.expect("dropped counter");
    assert!(up >= 1 && down + 1 == up, "{s:?}");
}

/// (established, dropped) counters of a session.
fn counters(s: &SessionView) -> (u32, u32) {
    (
        s.established_count.expect("established counter"),
        s.dropped_count.expect("dropped counter"),
    )
}

fn assert_no_notifications<P: Peer>(peer: &P, needle: &str) {
    let log = peer.log_text().expect("log");
    assert!(
        !log.contains(needle),
        "{} log mentions a NOTIFICATION ({needle})",
        peer.kind()
    );
}

/// With captures on (default; `HOLDFAST_LAB_PCAP=0` turns them off) the link's pcap
/// must hold the BGP exchange.
fn assert_pcap_has_traffic(lab: &Lab) {
    let Some(pcap) = lab.pcaps().first() else {
        return;
    };
    let len = std::fs::metadata(pcap).map(|m| m.len()).unwrap_or(0);
    assert!(len > 500, "pcap {} too small ({len} bytes)", pcap.display());
}

#[test]
fn bird_frr() {
    if skip_unless_ready(&[PeerKind::Bird, PeerKind::Frr]) {
        return;
    }
    let mut lab = Lab::new("bird_frr").expect("lab");
    let b = lab.host("b").expect("host b");
    let f = lab.host("f").expect("host f");
    let link = lab.link_auto(b, f).expect("link");
    let info = lab.link_info(link).clone();
    let (v4, v6) = (info.v4.unwrap(), info.v6.unwrap());
    let (b4, f4, b6, f6): (IpAddr, IpAddr, IpAddr, IpAddr) =
        (v4.a.into(), v4.b.into(), v6.a.into(), v6.b.into());

    let bird_v4 = RouteSpec::new("203.0.113.0/24")
        .med(7)
        .community(65001, 1)
        .large_community(65001, 2, 3)
        .as_path(&[64601]);
    let bird_v6 = RouteSpec::new("2001:db8:1::/48")
        .med(8)
        .community(65001, 6)
        .large_community(65001, 6, 6);
    let frr_v4 = RouteSpec::new("198.51.100.0/24")
        .med(9)
        .community(65002, 1)
        .community(65002, 2)
        .large_community(65002, 1, 1)
        .as_path(&[64602]);
    let frr_v6 = RouteSpec::new("2001:db8:2::/48")
        .med(10)
        .community(65002, 7)
        .large_community(65002, 7, 7);

    let bird_spec = PeerSpec::new(65001, "192.0.2.1".parse().unwrap())
        .neighbor(
            NeighborSpec::new(f4, 65002)
                .local(b4)
                .md5("hf-secret")
                .graceful_restart(true)
                .passive(),
        )
        .neighbor(NeighborSpec::new(f6, 65002).local(b6).ttl_security())
        .route(bird_v4.clone())
        .route(bird_v6.clone());
    let frr_spec = PeerSpec::new(65002, "192.0.2.2".parse().unwrap())
        .neighbor(
            NeighborSpec::new(b4, 65001)
                .local(f4)
                .md5("hf-secret")
                .graceful_restart(true),
        )
        .neighbor(
            NeighborSpec::new(b6, 65001)
                .local(f6)
                .passive()
                .ttl_security(),
        )
        .route(frr_v4.clone())
        .route(frr_v6.clone());
    let mut bird = Bird::start(&mut lab, b, &bird_spec).expect("bird");
    let mut frr = Frr::start(&mut lab, f, &frr_spec).expect("frr");

    for (n, gr) in [(f4, true), (f6, false)] {
        let s = bird
            .wait_established(&lab, n, SESSION_TIMEOUT)
            .expect("bird session");
        assert_eq!(s.remote_as, Some(65002));
        assert!(s.uptime_secs.is_some());
        assert_eq!(s.peer_graceful_restart, Some(gr), "{s:?}");
    }
    for (n, gr) in [(b4, true), (b6, false)] {
        let s = frr
            .wait_established(&lab, n, SESSION_TIMEOUT)
            .expect("frr session");
        assert_eq!(s.remote_as, Some(65001));
        assert_eq!(s.peer_graceful_restart, Some(gr), "{s:?}");
        assert_consistent_counters(&s);
    }

    expect_route(&lab, &frr, b4, &bird_v4, 65001, b4);
    expect_route(&lab, &frr, b6, &bird_v6, 65001, b6);
    expect_route(&lab, &bird, f4, &frr_v4, 65002, f4);
    expect_route(&lab, &bird, f6, &frr_v6, 65002, f6);

    // Sent = own route + the peer's route reflected back (no eBGP split horizon).
    frr.wait_until_session(&lab, b4, ROUTE_TIMEOUT, |s| {
        (s.prefixes_received, s.prefixes_sent) == (Some(1), Some(2))
    })
    .expect("frr prefix counters");
    let s = bird
        .wait_until_session(&lab, f4, ROUTE_TIMEOUT, |s| {
            (s.prefixes_received, s.prefixes_sent) == (Some(1), Some(1))
        })
        .expect("bird prefix counters");
    assert_consistent_counters(&s);
    let bird_before = counters(&s);

    let adv = frr.advertised_routes(&lab, b4).expect("frr adj-out");
    let own = adv
        .iter()
        .find(|r| r.prefix == frr_v4.prefix)
        .expect("frr advertises its route");
    assert_eq!((own.med, own.communities.len()), (Some(9), 2), "{own:?}");
    let adv = bird.advertised_routes(&lab, f6).expect("bird export");
    let own = adv
        .iter()
        .find(|r| r.prefix == bird_v6.prefix)
        .expect("bird exports its route");
    assert_eq!(own.med, Some(8), "{own:?}");

    let extra_b = RouteSpec::new("192.0.2.128/25").community(65001, 99).med(1);
    let extra_f = RouteSpec::new("2001:db8:22::/48")
        .med(4)
        .large_community(65002, 9, 9);
    bird.announce(&lab, std::slice::from_ref(&extra_b))
        .expect("bird announce");
    frr.announce(&lab, std::slice::from_ref(&extra_f))
        .expect("frr announce");
    expect_route(&lab, &frr, b4, &extra_b, 65001, b4);
    expect_route(&lab, &bird, f6, &extra_f, 65002, f6);

    bird.withdraw(&lab, std::slice::from_ref(&bird_v4.prefix))
        .expect("bird withdraw");
    frr.withdraw(&lab, std::slice::from_ref(&frr_v6.prefix))
        .expect("frr withdraw");
    frr.wait_no_route(&lab, b4, &bird_v4.prefix, ROUTE_TIMEOUT)
        .expect("withdrawn at frr");
    bird.wait_no_route(&lab, f6, &frr_v6.prefix, ROUTE_TIMEOUT)
        .expect("withdrawn at bird");
    assert!(frr
        .received_routes(&lab, b4)
        .unwrap()
        .iter()
        .any(|r| r.prefix == extra_b.prefix));

    let s = bird.session(&lab, f4).unwrap().unwrap();
    assert!(
        s.is_established() && counters(&s) == bird_before,
        "reconfigure kept session: {s:?}"
    );
    assert_no_notifications(&frr, "NOTIFICATION: received");
    assert_no_notifications(&bird, "Received: ");
    assert_pcap_has_traffic(&lab);

    let (frr_up, frr_down) = counters(&frr.session(&lab, b4).unwrap().unwrap());
    lab.set_link_up(link, false).expect("link down");
    let down = frr
        .wait_until_session(&lab, b4, SESSION_TIMEOUT, |s| !s.is_established())
        .expect("frr notices the link loss");
    assert_eq!(counters(&down), (frr_up, frr_down + 1), "{down:?}");
    lab.set_link_up(link, true).expect("link up");
    let s = frr
        .wait_established(&lab, b4, SESSION_TIMEOUT)
        .expect("frr re-established");
    assert_eq!(counters(&s), (frr_up + 1, frr_down + 1), "{s:?}");
    let s = bird
        .wait_established(&lab, f4, SESSION_TIMEOUT)
        .expect("bird re-established");
    let (bird_up, bird_down) = bird_before;
    assert_eq!(counters(&s), (bird_up + 1, bird_down + 1), "{s:?}");
    expect_route(&lab, &bird, f4, &frr_v4, 65002, f4);

    bird.stop(&mut lab);
    frr.stop(&mut lab);
    lab.teardown();
}

#[test]
fn gobgp_exabgp() {
    if skip_unless_ready(&[PeerKind::Gobgp, PeerKind::Exabgp]) {
        return;
    }
    let mut lab = Lab::new("gobgp_exabgp").expect("lab");
    let g = lab.host("g").expect("host g");
    let x = lab.host("x").expect("host x");
    let link = lab.link_auto(g, x).expect("link");
    let info = lab.link_info(link).clone();
    let (v4, v6) = (info.v4.unwrap(), info.v6.unwrap());
    let (g4, x4, g6, x6): (IpAddr, IpAddr, IpAddr, IpAddr) =
        (v4.a.into(), v4.b.into(), v6.a.into(), v6.b.into());

    let gobgp_v4 = RouteSpec::new("198.51.100.0/24")
        .med(9)
        .community(65011, 1)
        .large_community(65011, 5, 6)
        .as_path(&[64611, 64612]);
    let gobgp_v6 = RouteSpec::new("2001:db8:11::/48")
        .med(3)
        .community(65011, 7)
        .large_community(65011, 7, 7);
    let exa_v4 = RouteSpec::new("203.0.113.0/24")
        .med(5)
        .community(65012, 1)
        .community(65012, 2)
        .large_community(65012, 1, 2);
    let exa_v6 = RouteSpec::new("2001:db8:12::/48")
        .med(6)
        .community(65012, 6)
        .large_community(65012, 6, 6)
        .as_path(&[64621]);

    let gobgp_spec = PeerSpec::new(65011, "192.0.2.11".parse().unwrap())
        .neighbor(
            NeighborSpec::new(x4, 65012)
                .local(g4)
                .md5("hf-secret")
                .graceful_restart(true)
                .hold_time(9),
        )
        .neighbor(
            NeighborSpec::new(x6, 65012)
                .local(g6)
                .passive()
                .ttl_security(),
        )
        .route(gobgp_v4.clone())
        .route(gobgp_v6.clone());
    let exa_spec = PeerSpec::new(65012, "192.0.2.12".parse().unwrap())
        .neighbor(
            NeighborSpec::new(g4, 65011)
                .local(x4)
                .md5("hf-secret")
                .graceful_restart(true)
                .hold_time(9)
                .passive(),
        )
        .neighbor(NeighborSpec::new(g6, 65011).local(x6).ttl_security())
        .route(exa_v4.clone())
        .route(exa_v6.clone());
    let mut gobgp = Gobgp::start(&mut lab, g, &gobgp_spec).expect("gobgp");
    let mut exa = Exabgp::start(&mut lab, x, &exa_spec).expect("exabgp");

    for (n, gr) in [(x4, true), (x6, false)] {
        let s = gobgp
            .wait_established(&lab, n, SESSION_TIMEOUT)
            .expect("gobgp session");
        assert_eq!(s.remote_as, Some(65012));
        assert!(s.uptime_secs.is_some());
        assert_eq!(s.peer_graceful_restart, Some(gr), "{s:?}");
    }
    for (n, gr) in [(g4, true), (g6, false)] {
        let s = exa
            .wait_established(&lab, n, SESSION_TIMEOUT)
            .expect("exabgp session");
        assert_eq!(s.peer_graceful_restart, Some(gr), "{s:?}");
        assert_consistent_counters(&s);
    }

    expect_route(&lab, &exa, g4, &gobgp_v4, 65011, g4);
    expect_route(&lab, &exa, g6, &gobgp_v6, 65011, g6);
    expect_route(&lab, &gobgp, x4, &exa_v4, 65012, x4);
    expect_route(&lab, &gobgp, x6, &exa_v6, 65012, x6);

    // Sent = own route + the peer's route reflected back (no eBGP split horizon).
    gobgp
        .wait_until_session(&lab, x4, ROUTE_TIMEOUT, |s| {
            (s.prefixes_received, s.prefixes_sent) == (Some(1), Some(2))
        })
        .expect("gobgp prefix counters");
    let adv = gobgp.advertised_routes(&lab, x6).expect("gobgp adj-out");
    let own = adv
        .iter()
        .find(|r| r.prefix == gobgp_v6.prefix)
        .expect("gobgp advertises");
    assert_eq!(
        (own.med, own.communities.clone()),
        (Some(3), vec![(65011, 7)]),
        "{own:?}"
    );
    let adv = exa.advertised_routes(&lab, g4).expect("exabgp advertised");
    assert_eq!(adv.len(), 1, "{adv:?}");

    let extra_g = RouteSpec::new("192.0.2.128/25").community(65011, 99).med(1);
    let extra_x = RouteSpec::new("2001:db8:22::/48").large_community(65012, 9, 9);
    gobgp
        .announce(&lab, std::slice::from_ref(&extra_g))
        .expect("gobgp announce");
    exa.announce(&lab, std::slice::from_ref(&extra_x))
        .expect("exabgp announce");
    expect_route(&lab, &exa, g4, &extra_g, 65011, g4);
    expect_route(&lab, &gobgp, x6, &extra_x, 65012, x6);

    gobgp
        .withdraw(&lab, std::slice::from_ref(&gobgp_v4.prefix))
        .expect("gobgp withdraw");
    exa.withdraw(&lab, std::slice::from_ref(&exa_v6.prefix))
        .expect("exabgp withdraw");
    exa.wait_no_route(&lab, g4, &gobgp_v4.prefix, ROUTE_TIMEOUT)
        .expect("withdrawn at exabgp");
    gobgp
        .wait_no_route(&lab, x6, &exa_v6.prefix, ROUTE_TIMEOUT)
        .expect("withdrawn at gobgp");

    assert!(exa.notifications().is_empty(), "{:?}", exa.notifications());
    assert_no_notifications(&gobgp, "notification");
    assert_pcap_has_traffic(&lab);
    gobgp.stop(&mut lab);
    exa.stop(&mut lab);
    lab.teardown();
}
