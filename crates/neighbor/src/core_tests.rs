//! Unit tests of [`PeerCore`] without sockets: collisions in every order,
//! graceful restart with and without End-of-RIB, max-prefix restarts,
//! ROUTE-REFRESH, the NSR resume, a reload that changes the hold time, and
//! BFD Down / Up with its hold-down (RFC 5882, RFC 9384).

use super::*;
use holdfast_wire::{
    encode_notification, encode_open, encode_route_refresh, Capability, GracefulRestartCap,
    RouteRefresh, AS_TRANS, HEADER_LEN,
};
use std::net::Ipv4Addr;

const LOCAL_ID: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 5);

pub(crate) fn t(ms: u64) -> Time {
    Duration::from_millis(ms)
}

pub(crate) fn params() -> PeerParams {
    PeerParams {
        enabled: true,
        session: SessionConfig::new(65001, 65002, LOCAL_ID),
        graceful_restart: true,
        max_prefix_restart: None,
    }
}

pub(crate) fn peer_open(id: Ipv4Addr, hold: u16, gr: bool) -> Open {
    let mut capabilities = vec![
        Capability::Multiprotocol(Family::IPV4_UNICAST),
        Capability::RouteRefresh,
        Capability::FourOctetAs(65002),
    ];
    if gr {
        capabilities.push(Capability::GracefulRestart(GracefulRestartCap {
            restart_state: false,
            notification: false,
            restart_time: 120,
            families: vec![(Family::IPV4_UNICAST, true)],
        }));
    }
    Open {
        version: 4,
        my_as: u16::try_from(65002u32).unwrap_or(AS_TRANS),
        hold_time: hold,
        bgp_id: id,
        capabilities,
    }
}

pub(crate) fn body(mut msg: Vec<u8>) -> Vec<u8> {
    msg.drain(..HEADER_LEN);
    msg
}

pub(crate) fn open_msg(slot: Which, open: &Open) -> PeerInput {
    let mut b = Vec::new();
    encode_open(open, &mut b);
    PeerInput::Message {
        slot,
        msg_type: msg_type::OPEN,
        body: body(b),
    }
}

pub(crate) fn keepalive(slot: Which) -> PeerInput {
    PeerInput::Message {
        slot,
        msg_type: msg_type::KEEPALIVE,
        body: vec![],
    }
}

/// An UPDATE body (here: End-of-RIB for IPv4 unicast, the empty UPDATE).
fn update(slot: Which) -> PeerInput {
    PeerInput::Message {
        slot,
        msg_type: msg_type::UPDATE,
        body: vec![0, 0, 0, 0],
    }
}

/// RIB output of `n` framed KEEPALIVEs.
pub(crate) fn rib_bytes(n: usize) -> RibBytes {
    let mut b = Vec::new();
    for _ in 0..n {
        holdfast_wire::encode_keepalive(&mut b);
    }
    RibBytes(std::sync::Arc::new(b))
}

pub(crate) fn has(out: &[PeerOutput], pred: impl Fn(&PeerOutput) -> bool) -> bool {
    out.iter().any(pred)
}

fn sent_cease(out: &[PeerOutput], w: Which, subcode: u8) -> bool {
    has(out, |o| {
        matches!(o, PeerOutput::Send(s, Message::Notification(n))
            if *s == w && n.code == CEASE && n.subcode == subcode)
    })
}

fn up_gen(out: &[PeerOutput]) -> Option<u64> {
    out.iter().find_map(|o| match o {
        PeerOutput::PeerUp { gen, .. } => Some(*gen),
        _ => None,
    })
}

/// Outbound connection to Established at t = 0..2 ms.
pub(crate) fn established_core(p: PeerParams, gr: bool) -> PeerCore {
    let mut c = PeerCore::new(p);
    let out = c.handle(t(0), PeerInput::Start { resuming: false });
    assert_eq!(out.first(), Some(&PeerOutput::Connect), "{out:?}");
    let out = c.handle(t(1), PeerInput::Connected);
    assert_eq!(out.first(), Some(&PeerOutput::Attach(Which::Main)));
    assert!(has(&out, |o| matches!(
        o,
        PeerOutput::Send(Which::Main, Message::Open(_))
    )));
    c.handle(
        t(1),
        open_msg(Which::Main, &peer_open(Ipv4Addr::new(10, 0, 0, 9), 90, gr)),
    );
    let out = c.handle(t(2), keepalive(Which::Main));
    assert_eq!(up_gen(&out), Some(1), "{out:?}");
    assert_eq!(c.state(), State::Established);
    c
}

/// Main: outbound in OpenConfirm with the peer's OPEN; extra: an inbound
/// connection in OpenSent. Returns the core.
fn two_slots(remote_id: Ipv4Addr) -> PeerCore {
    let mut c = PeerCore::new(params());
    c.handle(t(0), PeerInput::Start { resuming: false });
    c.handle(t(1), PeerInput::Connected);
    let out = c.handle(t(2), PeerInput::Inbound);
    assert_eq!(
        out.first(),
        Some(&PeerOutput::Attach(Which::Extra)),
        "{out:?}"
    );
    assert!(c.has_extra());
    c.handle(
        t(3),
        open_msg(Which::Main, &peer_open(remote_id, 90, false)),
    );
    assert_eq!(c.state(), State::OpenConfirm);
    c
}

#[test]
fn collision_existing_outbound_wins_when_our_id_is_higher() {
    // Our id 10.0.0.5 > 10.0.0.1: the connection we opened (main) survives.
    let mut c = two_slots(Ipv4Addr::new(10, 0, 0, 1));
    let out = c.handle(
        t(4),
        open_msg(
            Which::Extra,
            &peer_open(Ipv4Addr::new(10, 0, 0, 1), 90, false),
        ),
    );
    assert!(
        sent_cease(&out, Which::Extra, CONNECTION_COLLISION_RESOLUTION),
        "{out:?}"
    );
    assert!(has(&out, |o| *o == PeerOutput::Close(Which::Extra)));
    assert!(!has(&out, |o| *o == PeerOutput::Promote));
    assert!(!c.has_extra());
    let out = c.handle(t(5), keepalive(Which::Main));
    assert_eq!(up_gen(&out), Some(1));
}

#[test]
fn collision_new_inbound_wins_when_their_id_is_higher() {
    // Their id 10.0.0.9 > ours: the connection they opened (extra) survives.
    let mut c = two_slots(Ipv4Addr::new(10, 0, 0, 9));
    let out = c.handle(
        t(4),
        open_msg(
            Which::Extra,
            &peer_open(Ipv4Addr::new(10, 0, 0, 9), 90, false),
        ),
    );
    assert!(
        sent_cease(&out, Which::Main, CONNECTION_COLLISION_RESOLUTION),
        "{out:?}"
    );
    let promote = out.iter().position(|o| *o == PeerOutput::Promote);
    let close = out
        .iter()
        .position(|o| *o == PeerOutput::Close(Which::Main));
    assert!(
        close.is_some() && promote.is_some() && close < promote,
        "{out:?}"
    );
    assert!(!c.has_extra());
    assert_eq!(c.state(), State::OpenConfirm);
    let out = c.handle(t(5), keepalive(Which::Main));
    assert_eq!(up_gen(&out), Some(1), "{out:?}");
}

#[test]
fn collision_extra_open_first_then_main() {
    // The inbound connection's OPEN arrives before the outbound one's: the
    // collision is resolved when the second OPEN completes the pair.
    let mut c = PeerCore::new(params());
    c.handle(t(0), PeerInput::Start { resuming: false });
    c.handle(t(1), PeerInput::Connected);
    c.handle(t(2), PeerInput::Inbound);
    let id = Ipv4Addr::new(10, 0, 0, 1);
    let out = c.handle(t(3), open_msg(Which::Extra, &peer_open(id, 90, false)));
    assert!(!has(&out, |o| matches!(o, PeerOutput::Close(_))), "{out:?}");
    assert!(c.has_extra());
    let out = c.handle(t(4), open_msg(Which::Main, &peer_open(id, 90, false)));
    assert!(sent_cease(
        &out,
        Which::Extra,
        CONNECTION_COLLISION_RESOLUTION
    ));
    assert!(!c.has_extra());
}

#[test]
fn collision_extra_reaches_established_first() {
    // The extra connection reaches Established while the main one is still
    // in OpenSent: the extra one takes over, the main one gets Cease/7.
    let mut c = PeerCore::new(params());
    c.handle(t(0), PeerInput::Start { resuming: false });
    c.handle(t(1), PeerInput::Connected);
    c.handle(t(2), PeerInput::Inbound);
    let id = Ipv4Addr::new(10, 0, 0, 9);
    c.handle(t(3), open_msg(Which::Extra, &peer_open(id, 90, false)));
    let out = c.handle(t(4), keepalive(Which::Extra));
    assert!(
        sent_cease(&out, Which::Main, CONNECTION_COLLISION_RESOLUTION),
        "{out:?}"
    );
    assert!(has(&out, |o| *o == PeerOutput::Promote));
    assert_eq!(up_gen(&out), Some(1));
    assert_eq!(c.state(), State::Established);
    assert!(!c.has_extra());
}

#[test]
fn collision_with_established_session_is_refused() {
    let mut c = established_core(params(), false);
    let out = c.handle(t(10), PeerInput::Inbound);
    assert_eq!(
        out,
        vec![PeerOutput::Refuse(Some(cease(
            CONNECTION_COLLISION_RESOLUTION
        )))]
    );
    assert_eq!(c.state(), State::Established);
}

#[test]
fn inbound_while_connecting_replaces_the_attempt() {
    let mut c = PeerCore::new(params());
    c.handle(t(0), PeerInput::Start { resuming: false });
    let out = c.handle(t(1), PeerInput::Inbound);
    assert_eq!(
        out.first(),
        Some(&PeerOutput::Close(Which::Main)),
        "{out:?}"
    );
    assert!(has(&out, |o| *o == PeerOutput::Attach(Which::Main)));
    // The outbound attempt finishing later is refused.
    assert_eq!(
        c.handle(t(2), PeerInput::Connected),
        vec![PeerOutput::Refuse(None)]
    );
}

#[test]
fn graceful_restart_with_end_of_rib() {
    let mut c = established_core(params(), true);
    // The peer restarts: a new connection while Established.
    let out = c.handle(t(1000), PeerInput::Inbound);
    assert!(
        has(&out, |o| *o == PeerOutput::PeerDown { graceful: true }),
        "{out:?}"
    );
    assert!(has(&out, |o| *o == PeerOutput::Attach(Which::Main)));
    c.handle(
        t(1001),
        open_msg(
            Which::Main,
            &peer_open(Ipv4Addr::new(10, 0, 0, 9), 90, true),
        ),
    );
    let out = c.handle(t(1002), keepalive(Which::Main));
    assert_eq!(up_gen(&out), Some(2));
    // Stale routes wait for End-of-RIB (the RIB clears them when the
    // empty UPDATE arrives) or the stale-path time.
    let out = c.handle(t(1003), update(Which::Main));
    assert_eq!(out, vec![PeerOutput::Update(vec![0, 0, 0, 0])]);
    // The restart timer (120 s) no longer applies once the peer is back.
    c.handle(t(1002) + Duration::from_secs(60), keepalive(Which::Main));
    let out = c.handle(t(1002) + Duration::from_secs(121), PeerInput::Timer);
    assert!(!has(&out, |o| *o == PeerOutput::StaleTimeout), "{out:?}");
}

#[test]
fn graceful_restart_without_end_of_rib_times_out() {
    let mut c = established_core(params(), true);
    c.handle(t(1000), PeerInput::Inbound);
    c.handle(
        t(1001),
        open_msg(
            Which::Main,
            &peer_open(Ipv4Addr::new(10, 0, 0, 9), 90, true),
        ),
    );
    c.handle(t(1002), keepalive(Which::Main));
    let due = t(1002) + STALE_PATH_TIME;
    // Keep the session alive up to the stale-path time: no flush before it.
    let mut now = t(1002);
    while now + Duration::from_secs(30) < due {
        now += Duration::from_secs(30);
        c.handle(now, keepalive(Which::Main));
        let out = c.handle(now, PeerInput::Timer);
        assert!(!has(&out, |o| *o == PeerOutput::StaleTimeout), "{out:?}");
    }
    c.handle(due, keepalive(Which::Main));
    let out = c.handle(due, PeerInput::Timer);
    assert!(has(&out, |o| *o == PeerOutput::StaleTimeout), "{out:?}");
}

#[test]
fn graceful_restart_peer_that_never_returns() {
    let mut c = established_core(params(), true);
    let out = c.handle(t(1000), PeerInput::Closed(Which::Main));
    assert!(has(&out, |o| *o == PeerOutput::PeerDown { graceful: true }));
    // Restart time 120 s from the peer's capability.
    let out = c.handle(t(1000) + Duration::from_secs(119), PeerInput::Timer);
    assert!(!has(&out, |o| *o == PeerOutput::StaleTimeout));
    let out = c.handle(t(1000) + Duration::from_secs(120), PeerInput::Timer);
    assert!(has(&out, |o| *o == PeerOutput::StaleTimeout), "{out:?}");
}

#[test]
fn no_graceful_restart_when_helper_is_off() {
    let p = PeerParams {
        graceful_restart: false,
        ..params()
    };
    let mut c = established_core(p, true);
    let out = c.handle(t(1000), PeerInput::Inbound);
    assert_eq!(
        out,
        vec![PeerOutput::Refuse(Some(cease(
            CONNECTION_COLLISION_RESOLUTION
        )))]
    );
    let out = c.handle(t(1001), PeerInput::Closed(Which::Main));
    assert!(has(&out, |o| *o == PeerOutput::PeerDown { graceful: false }));
}

fn max_prefix_cease() -> Notification {
    cease(MAX_PREFIXES)
}

#[test]
fn max_prefix_stays_down_until_reset() {
    let mut c = established_core(params(), false);
    let out = c.handle(
        t(10),
        PeerInput::RibReset {
            gen: 1,
            notification: max_prefix_cease(),
        },
    );
    assert!(sent_cease(&out, Which::Main, MAX_PREFIXES), "{out:?}");
    assert!(has(&out, |o| *o == PeerOutput::PeerDown { graceful: false }));
    assert_eq!(c.state(), State::Idle);
    // Nothing restarts it, however long we wait.
    let out = c.handle(t(3_600_000), PeerInput::Timer);
    assert!(!has(&out, |o| *o == PeerOutput::Connect), "{out:?}");
    assert_eq!(c.next_deadline(), None);
    // An operator reset does.
    let out = c.handle(t(3_600_001), PeerInput::AdminReset);
    assert_eq!(out.first(), Some(&PeerOutput::Connect), "{out:?}");
}

#[test]
fn max_prefix_restarts_after_the_configured_time() {
    let p = PeerParams {
        max_prefix_restart: Some(60),
        ..params()
    };
    let mut c = established_core(p, false);
    c.handle(
        t(10),
        PeerInput::RibReset {
            gen: 1,
            notification: max_prefix_cease(),
        },
    );
    assert_eq!(c.state(), State::Idle);
    assert_eq!(c.next_deadline(), Some(t(10) + Duration::from_secs(60)));
    let out = c.handle(t(10) + Duration::from_secs(59), PeerInput::Timer);
    assert!(!has(&out, |o| *o == PeerOutput::Connect));
    let out = c.handle(t(10) + Duration::from_secs(60), PeerInput::Timer);
    assert!(has(&out, |o| *o == PeerOutput::Connect), "{out:?}");
}

#[test]
fn rib_output_for_an_old_generation_is_dropped() {
    let mut c = established_core(params(), false);
    assert_eq!(
        c.handle(
            t(5),
            PeerInput::RibSend {
                gen: 1,
                bytes: rib_bytes(3)
            }
        ),
        vec![PeerOutput::WriteRib(rib_bytes(3))]
    );
    assert_eq!(c.stats().updates_out, 3);
    assert!(c
        .handle(
            t(6),
            PeerInput::RibSend {
                gen: 0,
                bytes: rib_bytes(3)
            }
        )
        .is_empty());
    let out = c.handle(
        t(7),
        PeerInput::RibReset {
            gen: 0,
            notification: max_prefix_cease(),
        },
    );
    assert!(out.is_empty());
    assert_eq!(c.state(), State::Established);
}

#[test]
fn route_refresh_goes_to_the_rib_only_when_established() {
    let rr = |subtype| {
        let mut b = Vec::new();
        encode_route_refresh(
            &RouteRefresh {
                family: Family::IPV4_UNICAST,
                subtype,
            },
            &mut b,
        );
        PeerInput::Message {
            slot: Which::Main,
            msg_type: msg_type::ROUTE_REFRESH,
            body: body(b),
        }
    };
    let mut c = established_core(params(), false);
    let out = c.handle(t(5), rr(0));
    assert_eq!(
        out,
        vec![
            PeerOutput::RouteRefresh(Family::IPV4_UNICAST),
            PeerOutput::RefreshPending(vec![Family::IPV4_UNICAST]),
        ]
    );
    // An enhanced-refresh marker (BoRR) is not a request.
    assert!(c.handle(t(6), rr(1)).is_empty());
    // A malformed one is ignored.
    let out = c.handle(
        t(7),
        PeerInput::Message {
            slot: Which::Main,
            msg_type: msg_type::ROUTE_REFRESH,
            body: vec![0],
        },
    );
    assert!(out.is_empty(), "{out:?}");
}

#[test]
fn updates_reach_the_rib_only_on_the_established_main_session() {
    let mut c = PeerCore::new(params());
    c.handle(t(0), PeerInput::Start { resuming: false });
    c.handle(t(1), PeerInput::Connected);
    // In OpenSent an UPDATE is an FSM error, never RIB input.
    assert!(!c.takes_updates());
    let out = c.handle(t(2), update(Which::Main));
    assert!(
        !has(&out, |o| matches!(o, PeerOutput::Update(_))),
        "{out:?}"
    );
    let mut c = established_core(params(), false);
    assert!(c.takes_updates());
    assert_eq!(
        c.handle(t(5), update(Which::Main)),
        vec![PeerOutput::Update(vec![0, 0, 0, 0])]
    );
    // UPDATEs and KEEPALIVEs keep it so (the shell replicates them before
    // the core sees them); a NOTIFICATION ends it.
    c.handle(t(6), keepalive(Which::Main));
    assert!(c.takes_updates());
    let mut b = Vec::new();
    encode_notification(&cease(ADMINISTRATIVE_RESET), &mut b);
    let msg = PeerInput::Message {
        slot: Which::Main,
        msg_type: msg_type::NOTIFICATION,
        body: body(b),
    };
    c.handle(t(7), msg);
    assert!(!c.takes_updates());
    assert!(
        !has(&c.handle(t(8), update(Which::Main)), |o| matches!(
            o,
            PeerOutput::Update(_)
        )),
        "an UPDATE after the session ended reached the RIB"
    );
}

#[test]
fn notification_from_the_peer_is_reported_and_ends_the_session() {
    let mut c = established_core(params(), false);
    let mut b = Vec::new();
    encode_notification(&cease(ADMINISTRATIVE_RESET), &mut b);
    let out = c.handle(
        t(5),
        PeerInput::Message {
            slot: Which::Main,
            msg_type: msg_type::NOTIFICATION,
            body: body(b),
        },
    );
    assert_eq!(
        out.first(),
        Some(&PeerOutput::NotificationReceived(cease(
            ADMINISTRATIVE_RESET
        )))
    );
    assert!(has(&out, |o| *o == PeerOutput::PeerDown { graceful: false }));
    assert_eq!(c.state(), State::Idle);
}

#[test]
fn resume_continues_established_without_open() {
    let mut c = PeerCore::new(params());
    assert!(c
        .handle(t(0), PeerInput::Start { resuming: true })
        .is_empty());
    assert!(c.resuming());
    let local = holdfast_fsm::open_for_config(&params().session);
    let remote = peer_open(Ipv4Addr::new(10, 0, 0, 9), 90, false);
    let out = c.handle(
        t(50),
        PeerInput::Resume {
            local_open: local,
            remote_open: remote,
            refresh: vec![],
        },
    );
    assert_eq!(
        out,
        vec![
            PeerOutput::Attach(Which::Main),
            PeerOutput::StateChanged {
                from: State::Idle,
                to: State::Established,
                reason: "resumed after takeover".into()
            },
            PeerOutput::Resumed,
            PeerOutput::Send(Which::Main, Message::Keepalive),
        ]
    );
    assert!(!c.resuming());
    assert!(c.is_up());
    assert_eq!(c.gen(), 1);
    assert_eq!(
        c.handle(
            t(51),
            PeerInput::RibSend {
                gen: 1,
                bytes: rib_bytes(1)
            }
        ),
        vec![PeerOutput::WriteRib(rib_bytes(1))]
    );
}

#[test]
fn resume_that_no_longer_negotiates_starts_afresh() {
    let mut c = PeerCore::new(params());
    c.handle(t(0), PeerInput::Start { resuming: true });
    let local = holdfast_fsm::open_for_config(&params().session);
    // The stored OPEN is from another AS than configured now.
    let mut remote = peer_open(Ipv4Addr::new(10, 0, 0, 9), 90, false);
    remote.capabilities = vec![Capability::FourOctetAs(65099)];
    remote.my_as = 65099;
    let out = c.handle(
        t(50),
        PeerInput::Resume {
            local_open: local,
            remote_open: remote,
            refresh: vec![],
        },
    );
    assert_eq!(out.first(), Some(&PeerOutput::Refuse(None)), "{out:?}");
    assert!(has(&out, |o| *o == PeerOutput::Connect));
    assert!(!c.is_up());
}

#[test]
fn abort_resume_starts_afresh() {
    let mut c = PeerCore::new(params());
    c.handle(t(0), PeerInput::Start { resuming: true });
    let out = c.handle(t(1), PeerInput::AbortResume);
    assert_eq!(out.first(), Some(&PeerOutput::Connect), "{out:?}");
}

#[test]
fn reload_that_changes_the_hold_time_resets_the_session() {
    let mut c = established_core(params(), false);
    let mut p = params();
    p.session.hold_time = 30;
    let out = c.handle(
        t(10),
        PeerInput::Reconfigure {
            params: p.clone(),
            transport_changed: false,
        },
    );
    assert!(
        sent_cease(&out, Which::Main, OTHER_CONFIGURATION_CHANGE),
        "{out:?}"
    );
    assert!(has(&out, |o| *o == PeerOutput::PeerDown { graceful: false }));
    assert_eq!(c.params(), &p);
    // The next session proposes the new hold time.
    let out = c.handle(t(10) + Duration::from_secs(5), PeerInput::Timer);
    assert!(has(&out, |o| *o == PeerOutput::Connect), "{out:?}");
    let out = c.handle(t(10) + Duration::from_secs(5), PeerInput::Connected);
    let open = out.iter().find_map(|o| match o {
        PeerOutput::Send(_, Message::Open(open)) => Some(open.hold_time),
        _ => None,
    });
    assert_eq!(open, Some(30));
}

#[test]
fn reload_without_session_changes_keeps_the_session() {
    let mut c = established_core(params(), false);
    let mut p = params();
    p.max_prefix_restart = Some(30);
    let out = c.handle(
        t(10),
        PeerInput::Reconfigure {
            params: p,
            transport_changed: false,
        },
    );
    assert!(out.is_empty(), "{out:?}");
    let out = c.handle(
        t(11),
        PeerInput::Reconfigure {
            params: params(),
            transport_changed: true,
        },
    );
    assert!(sent_cease(&out, Which::Main, OTHER_CONFIGURATION_CHANGE));
}

#[test]
fn disable_and_enable() {
    let mut c = established_core(params(), false);
    let mut p = params();
    p.enabled = false;
    let out = c.handle(
        t(10),
        PeerInput::Reconfigure {
            params: p,
            transport_changed: false,
        },
    );
    assert!(has(&out, |o| *o == PeerOutput::PeerDown { graceful: false }));
    assert_eq!(
        c.handle(t(11), PeerInput::Inbound),
        vec![PeerOutput::Refuse(None)]
    );
    let out = c.handle(
        t(12),
        PeerInput::Reconfigure {
            params: params(),
            transport_changed: false,
        },
    );
    assert_eq!(out.first(), Some(&PeerOutput::Connect));
}

#[test]
fn inputs_and_outputs_survive_serde() {
    let inputs = vec![
        PeerInput::Start { resuming: false },
        update(Which::Main),
        open_msg(Which::Extra, &peer_open(LOCAL_ID, 90, true)),
        PeerInput::Reconfigure {
            params: params(),
            transport_changed: true,
        },
    ];
    for i in inputs {
        let s = serde_json::to_string(&i).expect("serialize");
        let back: PeerInput = serde_json::from_str(&s).expect("deserialize");
        assert_eq!(back, i, "{s}");
    }
    let o = PeerOutput::Update(vec![0xde, 0xad]);
    let s = serde_json::to_string(&o).expect("serialize");
    assert_eq!(s, r#"{"Update":"dead"}"#);
}

#[test]
fn bfd_down_stops_the_session_with_cease_bfd_down_and_holds_it() {
    let mut c = established_core(params(), true);
    let out = c.handle(t(10), PeerInput::BfdDown);
    assert!(sent_cease(&out, Which::Main, BFD_DOWN), "{out:?}");
    assert!(
        has(&out, |o| *o == PeerOutput::PeerDown { graceful: false }),
        "{out:?}"
    );
    assert_eq!(c.state(), State::Idle);
    assert!(c.bfd_held());
    // Held down however long BFD stays down; a reset does not start it.
    assert_eq!(c.next_deadline(), None);
    let out = c.handle(t(3_600_000), PeerInput::Timer);
    assert!(!has(&out, |o| *o == PeerOutput::Connect), "{out:?}");
    let out = c.handle(t(3_600_001), PeerInput::AdminReset);
    assert!(!has(&out, |o| *o == PeerOutput::Connect), "{out:?}");
    // An inbound connection meanwhile is refused.
    let out = c.handle(t(3_600_002), PeerInput::Inbound);
    assert_eq!(out, vec![PeerOutput::Refuse(None)]);
}

#[test]
fn bfd_up_restarts_only_after_the_hold_down() {
    let mut c = established_core(params(), false);
    c.handle(t(10), PeerInput::BfdDown);
    let hold = Duration::from_secs(u64::from(params().session.connect_retry));
    let out = c.handle(t(1_000), PeerInput::BfdUp);
    assert!(!has(&out, |o| *o == PeerOutput::Connect), "{out:?}");
    assert_eq!(c.next_deadline(), Some(t(1_000) + hold));
    let out = c.handle(t(1_000) + hold - t(1), PeerInput::Timer);
    assert!(!has(&out, |o| *o == PeerOutput::Connect), "{out:?}");
    let out = c.handle(t(1_000) + hold, PeerInput::Timer);
    assert!(has(&out, |o| *o == PeerOutput::Connect), "{out:?}");
    assert!(!c.bfd_held());
}

#[test]
fn bfd_flapping_during_the_hold_down_keeps_the_session_down() {
    let mut c = established_core(params(), false);
    let hold = Duration::from_secs(u64::from(params().session.connect_retry));
    c.handle(t(10), PeerInput::BfdDown);
    c.handle(t(100), PeerInput::BfdUp);
    let out = c.handle(t(200), PeerInput::BfdDown);
    assert!(
        out.iter().all(|o| !matches!(o, PeerOutput::Send(..))),
        "{out:?}"
    );
    let out = c.handle(t(100) + hold, PeerInput::Timer);
    assert!(!has(&out, |o| *o == PeerOutput::Connect), "{out:?}");
    c.handle(t(5_000), PeerInput::BfdUp);
    let out = c.handle(t(5_000) + hold, PeerInput::Timer);
    assert!(has(&out, |o| *o == PeerOutput::Connect), "{out:?}");
}

#[test]
fn bfd_up_without_a_down_changes_nothing() {
    let mut c = established_core(params(), false);
    let before = c.next_deadline();
    let out = c.handle(t(10), PeerInput::BfdUp);
    assert!(out.is_empty(), "{out:?}");
    assert_eq!(c.next_deadline(), before);
    assert_eq!(c.state(), State::Established);
    // BFD Down while still connecting also stops the attempt.
    let mut c = PeerCore::new(params());
    c.handle(t(0), PeerInput::Start { resuming: false });
    c.handle(t(1), PeerInput::BfdDown);
    assert_eq!(c.state(), State::Idle);
    let out = c.handle(t(100_000), PeerInput::Timer);
    assert!(!has(&out, |o| *o == PeerOutput::Connect), "{out:?}");
}

/// A core resumed at 50 ms with a 9 s hold time (keepalive 3 s).
fn resumed_core() -> PeerCore {
    let mut c = PeerCore::new(params());
    c.handle(t(0), PeerInput::Start { resuming: true });
    let local = holdfast_fsm::open_for_config(&params().session);
    let remote = peer_open(Ipv4Addr::new(10, 0, 0, 9), 9, false);
    c.handle(
        t(50),
        PeerInput::Resume {
            local_open: local,
            remote_open: remote,
            refresh: vec![],
        },
    );
    c
}

fn hold_expired(out: &[PeerOutput]) -> bool {
    has(
        out,
        |o| matches!(o, PeerOutput::Send(_, Message::Notification(n)) if n.code == 4),
    )
}

#[test]
fn resume_grace_keeps_a_peer_whose_tcp_is_alive() {
    // The peer's KEEPALIVE went to the failed primary and waits in its
    // retransmission backoff; its TCP acknowledges our KEEPALIVEs.
    let mut c = resumed_core();
    let due = t(50 + 9_000);
    assert!(c.hold_grace_due(due));
    c.handle(due, PeerInput::TransportAlive { last_ack_ms: 250 });
    assert!(!c.hold_grace_due(due));
    assert!(!hold_expired(&c.handle(due, PeerInput::Timer)));
    assert_eq!(c.state(), State::Established);
    // Its retransmission arrives: the grace ends, the HoldTimer is RFC
    // 4271's again.
    c.handle(t(20_000), keepalive(Which::Main));
    assert!(!c.hold_grace_due(t(29_000)));
    c.handle(t(29_000), PeerInput::TransportAlive { last_ack_ms: 100 });
    assert!(hold_expired(&c.handle(t(29_000), PeerInput::Timer)));
}

#[test]
fn resume_grace_does_not_keep_a_silent_peer() {
    // Negative control: the peer's TCP has acknowledged nothing for longer
    // than a KeepaliveTime plus 1 s: the HoldTimer expires as usual.
    let mut c = resumed_core();
    let due = t(50 + 9_000);
    c.handle(due, PeerInput::TransportAlive { last_ack_ms: 4_001 });
    assert!(hold_expired(&c.handle(due, PeerInput::Timer)));
}

#[test]
fn resume_grace_ends_after_the_largest_retransmission_timeout() {
    let mut c = resumed_core();
    let mut at = 50;
    while at + 9_000 < 50 + RESUME_GRACE.as_millis() as u64 {
        at += 9_000;
        c.handle(t(at), PeerInput::TransportAlive { last_ack_ms: 10 });
        assert!(!hold_expired(&c.handle(t(at), PeerInput::Timer)), "{at}");
    }
    let due = t(at + 9_000);
    assert!(!c.hold_grace_due(due));
    c.handle(due, PeerInput::TransportAlive { last_ack_ms: 10 });
    assert!(hold_expired(&c.handle(due, PeerInput::Timer)));
}
