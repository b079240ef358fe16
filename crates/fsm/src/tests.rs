//! Unit tests driving [`Session`] with explicit times.

use crate::notification::{self, cease};
use crate::*;
use holdfast_wire::{
    Afi, Capability, Family, GracefulRestartCap, Notification, Open, Safi, AS_TRANS,
};
use std::net::Ipv4Addr;
use std::time::Duration;

const LOCAL_ID: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 1);
const REMOTE_ID: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 2);

fn t(s: u64) -> Time {
    Duration::from_secs(s)
}

fn cfg() -> SessionConfig {
    SessionConfig::new(65001, 65002, LOCAL_ID)
}

fn peer_open(asn: u32, hold: u16) -> Open {
    Open {
        version: 4,
        my_as: u16::try_from(asn).unwrap_or(AS_TRANS),
        hold_time: hold,
        bgp_id: REMOTE_ID,
        capabilities: vec![
            Capability::Multiprotocol(Family::IPV4_UNICAST),
            Capability::RouteRefresh,
            Capability::FourOctetAs(asn),
        ],
    }
}

fn has(actions: &[Action], pred: impl Fn(&Action) -> bool) -> bool {
    actions.iter().any(pred)
}

fn sent_notification(actions: &[Action]) -> Option<(u8, u8)> {
    actions.iter().find_map(|a| match a {
        Action::SendNotification(n) => Some((n.code, n.subcode)),
        _ => None,
    })
}

fn session_down(actions: &[Action]) -> Option<bool> {
    actions.iter().find_map(|a| match a {
        Action::SessionDown { graceful, .. } => Some(*graceful),
        _ => None,
    })
}

/// Drive a session to Established at t=0..2 with the given peer OPEN.
fn established_with(c: SessionConfig, open: Open) -> Session {
    let mut s = Session::new(c);
    s.handle(t(0), Event::ManualStart);
    s.handle(t(0), Event::TcpCrAcked);
    s.handle(t(1), Event::BgpOpen(open));
    let a = s.handle(t(2), Event::KeepAliveMsg);
    assert!(has(&a, |a| matches!(a, Action::Established(_))), "{a:?}");
    assert_eq!(s.state(), State::Established);
    s
}

fn established() -> Session {
    established_with(cfg(), peer_open(65002, 90))
}

#[test]
fn active_handshake_to_established() {
    let mut s = Session::new(cfg());
    assert_eq!(s.state(), State::Idle);
    assert_eq!(s.next_deadline(), None);

    let a = s.handle(t(0), Event::ManualStart);
    assert_eq!(a[0], Action::Connect);
    assert!(has(&a, |a| matches!(
        a,
        Action::StateChanged {
            from: State::Idle,
            to: State::Connect,
            ..
        }
    )));
    assert_eq!(s.state(), State::Connect);
    assert_eq!(s.timer(Timer::ConnectRetry), Some(t(5)));

    let a = s.handle(t(1), Event::TcpCrAcked);
    assert_eq!(a[0], Action::SendOpen(s.local_open()));
    assert_eq!(s.state(), State::OpenSent);
    assert_eq!(s.timer(Timer::Hold), Some(t(1) + OPEN_HOLD_TIME));
    assert_eq!(s.timer(Timer::ConnectRetry), None);

    let a = s.handle(t(2), Event::BgpOpen(peer_open(65002, 30)));
    assert_eq!(a[0], Action::SendKeepalive);
    assert_eq!(s.state(), State::OpenConfirm);
    let n = s.negotiated().expect("negotiated in OpenConfirm");
    assert_eq!((n.hold_time, n.keepalive), (30, 10));
    assert_eq!(s.timer(Timer::Hold), Some(t(32)));
    assert_eq!(s.timer(Timer::Keepalive), Some(t(12)));

    let a = s.handle(t(3), Event::KeepAliveMsg);
    assert_eq!(s.state(), State::Established);
    assert_eq!(s.established_at(), Some(t(3)));
    assert!(has(
        &a,
        |a| matches!(a, Action::Established(n) if n.remote_id == REMOTE_ID)
    ));
    assert_eq!(s.timer(Timer::Hold), Some(t(33)));

    let st = s.stats();
    assert_eq!(
        (
            st.opens_out,
            st.opens_in,
            st.keepalives_out,
            st.keepalives_in
        ),
        (1, 1, 1, 1)
    );
    assert_eq!(st.established_count, 1);
}

#[test]
fn passive_handshake_to_established() {
    let mut c = cfg();
    c.passive = true;
    let mut s = Session::new(c);
    let a = s.handle(t(0), Event::ManualStart);
    assert!(!has(&a, |a| matches!(a, Action::Connect)));
    assert_eq!(s.state(), State::Active);
    assert_eq!(
        s.next_deadline(),
        None,
        "passive waits without a connect-retry timer"
    );
    assert!(s.poll(t(1000)).is_empty());

    let a = s.handle(t(1000), Event::TcpConnectionConfirmed);
    assert!(has(&a, |a| matches!(a, Action::SendOpen(_))));
    assert_eq!(s.state(), State::OpenSent);
    s.handle(t(1001), Event::BgpOpen(peer_open(65002, 90)));
    s.handle(t(1001), Event::KeepAliveMsg);
    assert_eq!(s.state(), State::Established);

    let a = s.handle(t(1002), Event::TcpConnectionFails);
    assert_eq!(s.state(), State::Idle);
    assert_eq!(session_down(&a), Some(false));
    s.poll(t(1007));
    assert_eq!(s.state(), State::Active, "automatic restart stays passive");
}

#[test]
fn connect_retry_and_connection_failure() {
    let mut s = Session::new(cfg());
    s.handle(t(0), Event::ManualStart);
    let a = s.poll(t(5));
    assert_eq!(a, vec![Action::CloseConnection, Action::Connect]);
    assert_eq!(s.state(), State::Connect);
    assert_eq!(s.timer(Timer::ConnectRetry), Some(t(10)));

    let a = s.handle(t(6), Event::TcpConnectionFails);
    assert_eq!(s.state(), State::Active);
    assert!(has(&a, |a| matches!(
        a,
        Action::StateChanged {
            to: State::Active,
            ..
        }
    )));
    assert_eq!(s.timer(Timer::ConnectRetry), Some(t(11)));
    let a = s.poll(t(11));
    assert_eq!(a[0], Action::Connect);
    assert_eq!(s.state(), State::Connect);

    s.handle(t(12), Event::TcpCrAcked);
    let a = s.handle(t(13), Event::TcpConnectionFails);
    assert_eq!(a[0], Action::CloseConnection);
    assert_eq!(s.state(), State::Active);
    assert_eq!(s.timer(Timer::Hold), None);
    assert_eq!(s.timer(Timer::ConnectRetry), Some(t(18)));
}

#[test]
fn hold_timer_expiry_sends_4_0() {
    let mut s = established();
    assert_eq!(s.next_deadline(), Some(t(31)), "keepalive first");
    s.handle(t(50), Event::UpdateMsg);
    assert_eq!(s.timer(Timer::Hold), Some(t(140)));
    let a = s.poll(t(139));
    assert!(!has(&a, |a| matches!(a, Action::SendNotification(_))));
    assert_eq!(s.state(), State::Established);
    let a = s.poll(t(140));
    assert_eq!(sent_notification(&a), Some((4, 0)));
    assert!(has(&a, |a| matches!(a, Action::CloseConnection)));
    assert_eq!(session_down(&a), Some(false));
    assert_eq!(s.state(), State::Idle);
    assert_eq!(s.stats().dropped_count, 1);
    assert_eq!(
        s.stats().last_notification_sent,
        Some(notification::new(4, 0))
    );
    assert_eq!(s.established_at(), None);
    assert!(s.negotiated().is_none());
}

#[test]
fn hold_timer_in_open_sent() {
    let mut s = Session::new(cfg());
    s.handle(t(0), Event::ManualStart);
    s.handle(t(1), Event::TcpCrAcked);
    let a = s.poll(t(240));
    assert!(a.is_empty());
    let a = s.poll(t(241));
    assert_eq!(sent_notification(&a), Some((4, 0)));
    assert_eq!(session_down(&a), None, "never Established: no SessionDown");
    assert_eq!(s.state(), State::Idle);
}

#[test]
fn keepalives_over_ten_minutes() {
    let mut s = established();
    let before = s.stats().keepalives_out;
    let mut sent = 0;
    for sec in 3..=602 {
        // The peer keeps us alive every 30 s.
        if sec % 30 == 0 {
            s.handle(t(sec), Event::KeepAliveMsg);
        }
        for a in s.poll(t(sec)) {
            match a {
                Action::SendKeepalive => sent += 1,
                other => panic!("unexpected {other:?} at {sec}"),
            }
        }
    }
    // Keepalive every 30 s from t=1 (OpenConfirm): 31, 61, ..., 601.
    assert_eq!(sent, 20);
    assert_eq!(s.stats().keepalives_out - before, 20);
    assert_eq!(s.state(), State::Established);
}

#[test]
fn update_sent_restarts_keepalive_timer() {
    let mut s = established();
    assert_eq!(s.timer(Timer::Keepalive), Some(t(31)));
    s.handle(t(20), Event::UpdatesSent(1));
    assert_eq!(s.timer(Timer::Keepalive), Some(t(50)));
    assert!(s.poll(t(31)).is_empty());
    assert_eq!(s.stats().updates_out, 1);
}

#[test]
fn configured_keepalive_is_capped_at_a_third() {
    let mut c = cfg();
    c.keepalive_time = Some(10);
    let s = established_with(c.clone(), peer_open(65002, 90));
    assert_eq!(s.negotiated().map(|n| n.keepalive), Some(10));
    c.keepalive_time = Some(60);
    let s = established_with(c, peer_open(65002, 90));
    assert_eq!(s.negotiated().map(|n| n.keepalive), Some(30));
}

#[test]
fn nsr_sessions_keep_the_peer_fresh_every_ninth_of_the_hold_time() {
    let mut c = cfg();
    c.nsr = true;
    let s = established_with(c.clone(), peer_open(65002, 9));
    assert_eq!(s.negotiated().map(|n| n.keepalive), Some(1));
    let s = established_with(c.clone(), peer_open(65002, 90));
    assert_eq!(s.negotiated().map(|n| n.keepalive), Some(10));
    let s = established_with(c.clone(), peer_open(65002, 3));
    assert_eq!(
        s.negotiated().map(|n| n.keepalive),
        Some(1),
        "never below 1 s"
    );
    c.keepalive_time = Some(20);
    let s = established_with(c, peer_open(65002, 90));
    assert_eq!(
        s.negotiated().map(|n| n.keepalive),
        Some(20),
        "a configured interval wins"
    );
    assert_eq!(crate::keepalive_for(90, None, false), 30);
    assert_eq!(crate::keepalive_for(0, None, true), 0);
}

#[test]
fn hold_time_zero_means_no_keepalives() {
    let mut s = established_with(cfg(), peer_open(65002, 0));
    let n = s.negotiated().cloned().expect("negotiated");
    assert_eq!((n.hold_time, n.keepalive), (0, 0));
    assert_eq!(s.next_deadline(), None);
    for sec in 3..=3600 {
        assert!(s.poll(t(sec)).is_empty());
    }
    assert_eq!(s.state(), State::Established);
    assert_eq!(
        s.stats().keepalives_out,
        1,
        "only the one answering the OPEN"
    );
}

#[test]
fn manual_stop_sends_cease_6_2_and_stays_down() {
    let mut s = established();
    let a = s.handle(t(10), Event::ManualStop);
    assert_eq!(sent_notification(&a), Some((6, 2)));
    assert_eq!(a[1], Action::CloseConnection);
    assert_eq!(session_down(&a), Some(false));
    assert_eq!(s.state(), State::Idle);
    assert_eq!(s.next_deadline(), None);
    assert!(s.poll(t(10_000)).is_empty());
    assert_eq!(s.stats().last_error, None);

    // ManualStop while connecting: no NOTIFICATION (no BGP connection yet).
    let mut s = Session::new(cfg());
    s.handle(t(0), Event::ManualStart);
    let a = s.handle(t(1), Event::ManualStop);
    assert_eq!(sent_notification(&a), None);
    assert_eq!(a[0], Action::CloseConnection);
    assert_eq!(s.state(), State::Idle);
    assert_eq!(s.next_deadline(), None);
}

#[test]
fn stop_with_notification_restarts_after_idle_hold() {
    let mut s = established();
    let n = notification::cease(cease::MAX_PREFIXES);
    let a = s.handle(t(10), Event::Stop(n.clone()));
    assert_eq!(a[0], Action::SendNotification(n));
    assert_eq!(s.state(), State::Idle);
    assert_eq!(s.timer(Timer::IdleHold), Some(t(15)));
    assert!(s
        .stats()
        .last_error
        .as_deref()
        .is_some_and(|e| e.contains("Maximum Number of Prefixes")));
    assert!(s.poll(t(14)).is_empty());
    let a = s.poll(t(15));
    assert_eq!(a[0], Action::Connect);
    assert_eq!(s.state(), State::Connect);

    // ManualStop after Stop keeps it down.
    let mut s = established();
    s.handle(t(10), Event::Stop(notification::cease(cease::MAX_PREFIXES)));
    s.handle(t(11), Event::ManualStop);
    assert_eq!(s.next_deadline(), None);
    assert_eq!(s.state(), State::Idle);
}

#[test]
fn unexpected_messages_are_fsm_errors() {
    let mut s = Session::new(cfg());
    s.handle(t(0), Event::ManualStart);
    s.handle(t(0), Event::TcpCrAcked);
    let a = s.handle(t(1), Event::KeepAliveMsg);
    assert_eq!(sent_notification(&a), Some((5, 1)));
    assert_eq!(s.state(), State::Idle);

    let mut s = Session::new(cfg());
    s.handle(t(0), Event::ManualStart);
    s.handle(t(0), Event::TcpCrAcked);
    s.handle(t(1), Event::BgpOpen(peer_open(65002, 90)));
    let a = s.handle(t(2), Event::UpdateMsg);
    assert_eq!(sent_notification(&a), Some((5, 2)));
    assert_eq!(s.state(), State::Idle);

    let mut s = established();
    let a = s.handle(t(3), Event::BgpOpen(peer_open(65002, 90)));
    assert_eq!(sent_notification(&a), Some((5, 3)));
    assert_eq!(session_down(&a), Some(false));

    let mut s = Session::new(cfg());
    s.handle(t(0), Event::ManualStart);
    let a = s.handle(t(1), Event::KeepAliveMsg);
    assert_eq!(sent_notification(&a), None, "no BGP connection in Connect");
    assert_eq!(s.state(), State::Idle);
}

#[test]
fn open_errors_and_message_errors() {
    let mut s = Session::new(cfg());
    s.handle(t(0), Event::ManualStart);
    s.handle(t(0), Event::TcpCrAcked);
    let a = s.handle(t(1), Event::BgpOpen(peer_open(65099, 90)));
    assert_eq!(sent_notification(&a), Some((2, 2)));
    assert!(has(&a, |a| matches!(a, Action::CloseConnection)));
    assert_eq!(s.state(), State::Idle);
    assert_eq!(s.timer(Timer::IdleHold), Some(t(6)));

    let mut s = Session::new(cfg());
    s.handle(t(0), Event::ManualStart);
    s.handle(t(0), Event::TcpCrAcked);
    let a = s.handle(t(1), Event::BgpOpenMsgErr(notification::new(2, 4)));
    assert_eq!(sent_notification(&a), Some((2, 4)));

    let mut s = established();
    let a = s.handle(t(5), Event::UpdateMsgErr(notification::new(3, 1)));
    assert_eq!(sent_notification(&a), Some((3, 1)));
    assert_eq!(s.stats().updates_in, 1);

    let mut s = established();
    let a = s.handle(t(5), Event::BgpHeaderErr(notification::new(1, 2)));
    assert_eq!(sent_notification(&a), Some((1, 2)));
}

#[test]
fn notification_received_tears_down() {
    let mut s = established();
    let n = notification::cease(cease::ADMINISTRATIVE_RESET);
    let a = s.handle(t(5), Event::NotifMsg(n.clone()));
    assert_eq!(sent_notification(&a), None);
    assert_eq!(a[0], Action::CloseConnection);
    assert_eq!(session_down(&a), Some(false));
    assert_eq!(s.stats().last_notification_received, Some(n));
    assert_eq!(s.stats().notifications_in, 1);
    assert_eq!(s.timer(Timer::IdleHold), Some(t(10)));
}

fn gr_peer_open(n_bit: bool) -> Open {
    let mut o = peer_open(65002, 90);
    o.capabilities
        .push(Capability::GracefulRestart(GracefulRestartCap {
            restart_state: false,
            notification: n_bit,
            restart_time: 120,
            families: vec![(Family::IPV4_UNICAST, true)],
        }));
    o
}

#[test]
fn graceful_restart_helper() {
    let mut s = established_with(cfg(), gr_peer_open(false));
    let a = s.handle(t(5), Event::TcpConnectionFails);
    assert_eq!(session_down(&a), Some(true));

    let mut s = established_with(cfg(), gr_peer_open(false));
    let a = s.poll(t(200));
    assert_eq!(sent_notification(&a), Some((4, 0)));
    assert_eq!(session_down(&a), Some(true));

    let mut s = established_with(cfg(), gr_peer_open(true));
    let a = s.handle(
        t(5),
        Event::NotifMsg(notification::cease(cease::ADMINISTRATIVE_RESET)),
    );
    assert_eq!(session_down(&a), Some(false), "we do not set the N bit");

    let mut s = established_with(cfg(), peer_open(65002, 90));
    let a = s.handle(t(5), Event::TcpConnectionFails);
    assert_eq!(session_down(&a), Some(false), "peer did not advertise GR");
}

#[test]
fn notification_gr_with_n_bit_on_both_sides() {
    let mut c = cfg();
    c.graceful_restart = Some(120);
    let mut local = open_for_config(&c);
    for cap in &mut local.capabilities {
        if let Capability::GracefulRestart(g) = cap {
            g.notification = true;
        }
    }
    let neg = negotiate(&local, &gr_peer_open(true), &c).expect("ok");
    assert!(neg.notification_gr());
    let neg = negotiate(&local, &gr_peer_open(false), &c).expect("ok");
    assert!(!neg.notification_gr());
}

#[test]
fn automatic_restart_after_idle_hold() {
    let mut s = established();
    s.handle(t(10), Event::TcpConnectionFails);
    assert_eq!(s.state(), State::Idle);
    assert_eq!(s.next_deadline(), Some(t(15)));
    let a = s.poll(t(15));
    assert_eq!(a[0], Action::Connect);
    assert_eq!(s.state(), State::Connect);
    s.handle(t(16), Event::TcpCrAcked);
    s.handle(t(17), Event::BgpOpen(peer_open(65002, 90)));
    let a = s.handle(t(18), Event::KeepAliveMsg);
    assert!(has(&a, |a| matches!(a, Action::Established(_))));
    assert_eq!(s.stats().established_count, 2);
    assert_eq!(s.stats().dropped_count, 1);
    assert_eq!(s.established_at(), Some(t(18)));
}

#[test]
fn stale_timer_events_are_ignored() {
    let mut s = established_with(cfg(), peer_open(65002, 0));
    assert!(s.handle(t(5), Event::HoldTimerExpires).is_empty());
    assert!(s.handle(t(5), Event::KeepaliveTimerExpires).is_empty());
    assert_eq!(s.state(), State::Established);
    let mut s = Session::new(cfg());
    assert!(s.handle(t(5), Event::IdleHoldTimerExpires).is_empty());
    assert_eq!(s.state(), State::Idle);
}

#[test]
fn connection_in_idle_is_refused() {
    let mut s = Session::new(cfg());
    assert_eq!(
        s.handle(t(0), Event::TcpConnectionConfirmed),
        vec![Action::CloseConnection]
    );
    assert_eq!(s.state(), State::Idle);
}

#[test]
fn local_open_contents() {
    let mut c = SessionConfig::new(4_200_000_000, 65002, LOCAL_ID);
    c.families = vec![Family::IPV4_UNICAST, Family::IPV6_UNICAST];
    c.graceful_restart = Some(120);
    c.hold_time = 180;
    let o = Session::new(c).local_open();
    assert_eq!(o.version, 4);
    assert_eq!(o.my_as, AS_TRANS);
    assert_eq!(o.asn(), 4_200_000_000);
    assert_eq!(o.hold_time, 180);
    assert_eq!(o.bgp_id, LOCAL_ID);
    assert!(o
        .capabilities
        .contains(&Capability::Multiprotocol(Family::IPV4_UNICAST)));
    assert!(o
        .capabilities
        .contains(&Capability::Multiprotocol(Family::IPV6_UNICAST)));
    assert!(o.capabilities.contains(&Capability::RouteRefresh));
    assert!(o
        .capabilities
        .contains(&Capability::FourOctetAs(4_200_000_000)));
    assert!(o
        .capabilities
        .iter()
        .any(|c| matches!(c, Capability::GracefulRestart(g) if g.restart_time == 120)));

    let o = Session::new(cfg()).local_open();
    assert_eq!(o.my_as, 65001);
    assert!(!o
        .capabilities
        .iter()
        .any(|c| matches!(c, Capability::GracefulRestart(_))));
}

#[test]
fn negotiate_as_checks() {
    let c = cfg();
    let local = open_for_config(&c);
    let err = negotiate(&local, &peer_open(65003, 90), &c).unwrap_err();
    assert_eq!((err.code, err.subcode), (2, 2));

    // 4-octet AS through the capability with AS_TRANS in my_as.
    let mut c4 = cfg();
    c4.remote_as = 4_200_000_000;
    let neg = negotiate(&local, &peer_open(4_200_000_000, 90), &c4).expect("4-octet AS");
    assert_eq!(neg.remote_as, 4_200_000_000);
    assert!(neg.four_octet_as);

    // A 2-octet-only peer cannot be a 4-octet AS.
    let mut old = peer_open(4_200_000_000, 90);
    old.capabilities
        .retain(|c| !matches!(c, Capability::FourOctetAs(_)));
    let err = negotiate(&local, &old, &c4).unwrap_err();
    assert_eq!((err.code, err.subcode), (2, 2));
    let mut old2 = peer_open(65002, 90);
    old2.capabilities
        .retain(|c| !matches!(c, Capability::FourOctetAs(_)));
    assert!(
        !negotiate(&local, &old2, &c)
            .expect("2-octet peer")
            .four_octet_as
    );

    // AS 0 (RFC 7607).
    let mut c0 = cfg();
    c0.remote_as = 0;
    assert_eq!(
        negotiate(&local, &peer_open(0, 90), &c0)
            .unwrap_err()
            .subcode,
        2
    );
}

#[test]
fn negotiate_identifier_version_and_hold() {
    let c = cfg();
    let local = open_for_config(&c);
    let mut o = peer_open(65002, 90);
    o.bgp_id = Ipv4Addr::UNSPECIFIED;
    assert_eq!(
        negotiate(&local, &o, &c).unwrap_err(),
        notification::new(2, 3)
    );

    // Same identifier: fine on eBGP (RFC 6286), rejected on iBGP.
    let mut o = peer_open(65002, 90);
    o.bgp_id = LOCAL_ID;
    assert!(negotiate(&local, &o, &c).is_ok());
    let ci = SessionConfig::new(65001, 65001, LOCAL_ID);
    let mut o = peer_open(65001, 90);
    o.bgp_id = LOCAL_ID;
    assert_eq!(
        negotiate(&open_for_config(&ci), &o, &ci)
            .unwrap_err()
            .subcode,
        3
    );

    let mut o = peer_open(65002, 90);
    o.version = 3;
    let err = negotiate(&local, &o, &c).unwrap_err();
    assert_eq!(
        (err.code, err.subcode, err.data.as_slice()),
        (2, 1, &[0u8, 4][..])
    );

    for h in [1, 2] {
        assert_eq!(
            negotiate(&local, &peer_open(65002, h), &c).unwrap_err(),
            notification::new(2, 6)
        );
    }
    let neg = negotiate(&local, &peer_open(65002, 3), &c).expect("hold 3");
    assert_eq!((neg.hold_time, neg.keepalive), (3, 1));
    let neg = negotiate(&local, &peer_open(65002, 300), &c).expect("hold 300");
    assert_eq!((neg.hold_time, neg.keepalive), (90, 30));
}

#[test]
fn negotiate_families_and_capabilities() {
    let mut c = cfg();
    c.families = vec![Family::IPV4_UNICAST, Family::IPV6_UNICAST];
    let local = open_for_config(&c);

    let mut o = peer_open(65002, 90);
    o.capabilities = vec![
        Capability::Multiprotocol(Family::IPV6_UNICAST),
        Capability::Multiprotocol(Family {
            afi: Afi::Ipv4,
            safi: Safi::Multicast,
        }),
        Capability::FourOctetAs(65002),
        Capability::EnhancedRouteRefresh,
    ];
    let neg = negotiate(&local, &o, &c).expect("ok");
    assert_eq!(neg.families, vec![Family::IPV6_UNICAST]);
    assert!(!neg.route_refresh);
    assert!(!neg.enhanced_route_refresh, "we do not advertise it");
    assert_eq!(neg.peer_graceful_restart, None);
    assert_eq!(neg.remote_open, o);
    assert_eq!(neg.local_open, local);

    let mut o = peer_open(65002, 90);
    o.capabilities = vec![Capability::FourOctetAs(65002)];
    let neg = negotiate(&local, &o, &c).expect("no MP");
    assert_eq!(
        neg.families,
        vec![Family::IPV4_UNICAST],
        "no MP capability means IPv4 unicast"
    );

    let c6 = SessionConfig {
        families: vec![Family::IPV6_UNICAST],
        ..cfg()
    };
    let neg = negotiate(&open_for_config(&c6), &o, &c6).expect("disjoint");
    assert!(neg.families.is_empty());

    let neg = negotiate(&local, &gr_peer_open(false), &c).expect("gr");
    assert_eq!(neg.peer_graceful_restart.map(|g| g.restart_time), Some(120));
    assert!(neg.route_refresh);
}

#[test]
fn collision_resolution() {
    let low = Ipv4Addr::new(1, 1, 1, 1);
    let high = Ipv4Addr::new(2, 2, 2, 2);
    // We have the higher id: keep the connection we initiated.
    assert_eq!(
        resolve_collision(high, low, true),
        CollisionWinner::Existing
    );
    assert_eq!(resolve_collision(high, low, false), CollisionWinner::New);
    // The peer has the higher id: keep the connection it initiated.
    assert_eq!(resolve_collision(low, high, true), CollisionWinner::New);
    assert_eq!(
        resolve_collision(low, high, false),
        CollisionWinner::Existing
    );
    // Compared as unsigned integers, not lexically.
    assert_eq!(
        resolve_collision(Ipv4Addr::new(10, 0, 0, 9), Ipv4Addr::new(9, 0, 0, 10), true),
        CollisionWinner::Existing
    );
    // Equal ids: RFC 6286 AS tie-break.
    assert_eq!(resolve_collision(low, low, true), CollisionWinner::Existing);
    assert_eq!(
        resolve_collision_with_as(low, 65001, low, 65002, true),
        CollisionWinner::New
    );
    assert_eq!(
        resolve_collision_with_as(low, 65002, low, 65001, true),
        CollisionWinner::Existing
    );
    assert_eq!(
        resolve_collision_with_as(high, 1, low, 2, true),
        CollisionWinner::Existing
    );
}

#[test]
fn update_config_reset_rules() {
    let mut s = established();
    let base = cfg();
    assert!(!s.update_config(base.clone()));
    assert!(!s.update_config(SessionConfig {
        connect_retry: 30,
        ..base.clone()
    }));
    assert!(!s.update_config(SessionConfig {
        idle_hold_time: 60,
        ..base.clone()
    }));
    assert!(!s.update_config(SessionConfig {
        keepalive_time: Some(5),
        ..base.clone()
    }));
    assert!(!s.update_config(SessionConfig {
        route_refresh: false,
        ..base.clone()
    }));
    s.update_config(base.clone());
    let changes = [
        SessionConfig {
            hold_time: 30,
            ..base.clone()
        },
        SessionConfig {
            local_as: 1,
            ..base.clone()
        },
        SessionConfig {
            remote_as: 2,
            ..base.clone()
        },
        SessionConfig {
            families: vec![Family::IPV6_UNICAST],
            ..base.clone()
        },
        SessionConfig {
            passive: true,
            ..base.clone()
        },
        SessionConfig {
            graceful_restart: Some(120),
            ..base.clone()
        },
    ];
    for c in changes {
        let mut s = established();
        assert!(s.update_config(c.clone()), "{c:?}");
        assert_eq!(s.config(), &c);
        assert_eq!(
            s.state(),
            State::Established,
            "update_config never acts by itself"
        );
    }
    let mut idle = Session::new(base.clone());
    assert!(!idle.update_config(SessionConfig {
        hold_time: 30,
        ..base.clone()
    }));
    let mut connecting = Session::new(base.clone());
    connecting.handle(t(0), Event::ManualStart);
    assert!(!connecting.update_config(SessionConfig {
        hold_time: 30,
        ..base.clone()
    }));
    assert!(connecting.update_config(SessionConfig {
        passive: true,
        ..base
    }));
}

#[test]
fn counters() {
    let mut s = established();
    s.handle(t(3), Event::UpdateMsg);
    s.handle(t(3), Event::UpdateMsg);
    s.handle(t(4), Event::RouteRefreshMsg);
    s.handle(t(4), Event::RouteRefreshSent);
    s.handle(t(4), Event::UpdatesSent(1));
    let st = s.stats();
    assert_eq!(
        (
            st.updates_in,
            st.route_refresh_in,
            st.route_refresh_out,
            st.updates_out
        ),
        (2, 1, 1, 1)
    );
    assert_eq!(st.messages_in(), 1 + 1 + 2 + 1);
    assert_eq!(st.messages_out(), 1 + 1 + 1 + 1);
    let json = serde_json::to_string(st).expect("serialise");
    let back: SessionStats = serde_json::from_str(&json).expect("deserialise");
    assert_eq!(&back, st);
}

#[test]
fn route_refresh_does_not_restart_hold_timer() {
    let mut s = established();
    let hold = s.timer(Timer::Hold);
    s.handle(t(50), Event::RouteRefreshMsg);
    assert_eq!(s.timer(Timer::Hold), hold);
}

#[test]
fn session_snapshot_round_trips() {
    let mut s = established();
    let json = serde_json::to_string(&s).expect("serialise");
    let mut back: Session = serde_json::from_str(&json).expect("deserialise");
    assert_eq!(back, s);
    assert_eq!(back.poll(t(31)), s.poll(t(31)));
    let ev = Event::BgpOpen(peer_open(65002, 90));
    let ev_back: Event =
        serde_json::from_str(&serde_json::to_string(&ev).expect("ser")).expect("de");
    assert_eq!(ev_back, ev);
}

#[test]
fn every_state_change_is_reported() {
    let mut s = Session::new(cfg());
    let mut state = s.state();
    let events = [
        Event::ManualStart,
        Event::TcpConnectionFails,
        Event::ConnectRetryTimerExpires,
        Event::TcpCrAcked,
        Event::BgpOpen(peer_open(65002, 90)),
        Event::KeepAliveMsg,
        Event::NotifMsg(notification::cease(cease::ADMINISTRATIVE_RESET)),
        Event::IdleHoldTimerExpires,
    ];
    for (i, ev) in events.into_iter().enumerate() {
        let actions = s.handle(t(i as u64 * 10), ev);
        for a in &actions {
            if let Action::StateChanged { from, to, .. } = a {
                assert_eq!(*from, state);
                state = *to;
            }
        }
        assert_eq!(state, s.state());
    }
    assert_eq!(s.state(), State::Connect);
}

struct XorShift(u64);

impl XorShift {
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

fn random_event(r: &mut XorShift) -> Event {
    let n = Notification {
        code: 1 + r.below(6) as u8,
        subcode: r.below(10) as u8,
        data: vec![],
    };
    match r.below(22) {
        0 => Event::ManualStart,
        1 => Event::ManualStop,
        2 => Event::AutomaticStart,
        3 => Event::ConnectRetryTimerExpires,
        4 => Event::HoldTimerExpires,
        5 => Event::KeepaliveTimerExpires,
        6 => Event::IdleHoldTimerExpires,
        7 => Event::TcpCrAcked,
        8 => Event::TcpConnectionConfirmed,
        9 => Event::TcpConnectionFails,
        10 | 11 => {
            let asn = if r.below(5) == 0 { 65003 } else { 65002 };
            let hold = [0, 1, 3, 9, 90][r.below(5) as usize];
            let mut o = if r.below(2) == 0 {
                gr_peer_open(r.below(2) == 0)
            } else {
                peer_open(asn, hold)
            };
            o.hold_time = hold;
            Event::BgpOpen(o)
        }
        12 => Event::BgpHeaderErr(n),
        13 => Event::BgpOpenMsgErr(n),
        14 => Event::NotifMsg(n),
        15 | 16 => Event::KeepAliveMsg,
        17 => Event::UpdateMsg,
        18 => Event::UpdateMsgErr(n),
        19 => Event::RouteRefreshMsg,
        20 => Event::Stop(n),
        _ => Event::UpdatesSent(1),
    }
}

/// The event that moves a healthy session forward from `st`.
fn progress_event(st: State) -> Event {
    match st {
        State::Idle => Event::ManualStart,
        State::Connect | State::Active => Event::TcpConnectionConfirmed,
        State::OpenSent => Event::BgpOpen(peer_open(65002, 90)),
        State::OpenConfirm | State::Established => Event::KeepAliveMsg,
    }
}

fn check_invariants(s: &Session, polled_at: Option<Time>, ctx: &str) {
    let st = s.state();
    let neg = s.negotiated();
    assert_eq!(
        neg.is_some(),
        matches!(st, State::OpenConfirm | State::Established),
        "{ctx}"
    );
    assert_eq!(
        s.established_at().is_some(),
        st == State::Established,
        "{ctx}"
    );
    let cr = s.timer(Timer::ConnectRetry).is_some();
    let hold = s.timer(Timer::Hold).is_some();
    let ka = s.timer(Timer::Keepalive).is_some();
    let idle = s.timer(Timer::IdleHold).is_some();
    assert!(!idle || st == State::Idle, "{ctx}");
    match st {
        State::Idle => assert!(!cr && !hold && !ka, "{ctx}"),
        State::Connect => assert!(cr && !hold && !ka, "{ctx}"),
        State::Active => assert!(cr != s.config().passive && !hold && !ka, "{ctx}"),
        State::OpenSent => assert!(!cr && hold && !ka, "{ctx}"),
        State::OpenConfirm | State::Established => {
            let n = neg.expect("negotiated");
            assert!(!cr, "{ctx}");
            assert_eq!(hold, n.hold_time > 0, "{ctx}");
            assert_eq!(ka, n.keepalive > 0, "{ctx}");
            assert!(n.hold_time == 0 || n.hold_time >= 3, "{ctx}");
        }
    }
    if let (Some(d), Some(now)) = (s.next_deadline(), polled_at) {
        assert!(d > now, "{ctx}: deadline {d:?} not after poll at {now:?}");
    }
    let stats = s.stats();
    assert!(stats.dropped_count <= stats.established_count, "{ctx}");
    assert!(
        stats.established_count - stats.dropped_count == u64::from(st == State::Established),
        "{ctx}"
    );
}

#[test]
fn random_event_sequences_keep_invariants() {
    let mut reached = 0;
    for seed in 1..=200u64 {
        let mut r = XorShift(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
        let mut c = cfg();
        c.passive = r.below(4) == 0;
        c.graceful_restart = (r.below(2) == 0).then_some(120);
        c.idle_hold_time = r.below(3) as u16;
        let mut s = Session::new(c);
        let mut now = t(0);
        for step in 0..400 {
            now += Duration::from_millis(r.below(40_000));
            let ctx = format!("seed {seed} step {step}");
            let before = s.state();
            let poll = r.below(3) == 0;
            let ev = if r.below(2) == 0 {
                progress_event(s.state())
            } else {
                random_event(&mut r)
            };
            let actions = if poll { s.poll(now) } else { s.handle(now, ev) };
            let mut state = before;
            let mut downs = 0;
            for a in &actions {
                match a {
                    Action::StateChanged { from, to, .. } => {
                        assert_eq!(*from, state, "{ctx}");
                        assert_ne!(from, to, "{ctx}");
                        state = *to;
                    }
                    Action::SessionDown { .. } => downs += 1,
                    Action::Established(_) => assert_eq!(state, State::Established, "{ctx}"),
                    _ => {}
                }
            }
            assert!(downs <= 1, "{ctx}");
            assert_eq!(state, s.state(), "{ctx}");
            check_invariants(&s, poll.then_some(now), &ctx);
        }
        reached += s.stats().established_count;
    }
    assert!(
        reached > 1000,
        "random walks reached Established only {reached} times"
    );
}

#[test]
fn resume_rederives_the_session_from_the_two_opens() {
    // What a primary negotiated...
    let primary = established();
    let neg = primary.negotiated().cloned().expect("negotiated");
    // ...a backup re-derives from the two replicated OPENs alone.
    let (mut s, a) = Session::resume(
        cfg(),
        neg.local_open.clone(),
        neg.remote_open.clone(),
        t(100),
    )
    .expect("resumes");
    assert_eq!(a, vec![Action::SendKeepalive], "a KEEPALIVE at once");
    assert_eq!(s.state(), State::Established);
    assert_eq!(s.negotiated(), Some(&neg));
    assert_eq!(s.timer(Timer::Hold), Some(t(190)));
    assert_eq!(s.timer(Timer::Keepalive), Some(t(130)));
    // It then behaves like any Established session.
    s.handle(t(120), Event::KeepAliveMsg);
    assert_eq!(s.timer(Timer::Hold), Some(t(210)));
    let a = s.poll(t(210));
    assert_eq!(
        sent_notification(&a),
        Some((notification::HOLD_TIMER_EXPIRED, 0))
    );
    // OPENs that no longer negotiate under the running configuration are
    // refused with the NOTIFICATION they would have caused.
    let other = SessionConfig::new(65001, 65099, LOCAL_ID);
    let err =
        Session::resume(other, neg.local_open, neg.remote_open, t(0)).expect_err("peer AS changed");
    assert_eq!(err.code, notification::OPEN_MESSAGE_ERROR);
}
