//! Unit tests of the core's ROUTE-REFRESH queue (RFC 2918, pending until
//! the RIB's answer is replicated) and of the RIB output held while an NSR
//! resume is awaited.

use super::tests::{
    body, established_core, has, keepalive, open_msg, params, peer_open, rib_bytes, t,
};
use super::*;
use holdfast_wire::{encode_route_refresh, RouteRefresh};
use std::net::Ipv4Addr;

/// A ROUTE-REFRESH request (subtype 0) for `family`.
pub(crate) fn refresh_msg(family: Family) -> PeerInput {
    let mut b = Vec::new();
    encode_route_refresh(&RouteRefresh { family, subtype: 0 }, &mut b);
    PeerInput::Message {
        slot: Which::Main,
        msg_type: msg_type::ROUTE_REFRESH,
        body: body(b),
    }
}

const V4: Family = Family::IPV4_UNICAST;
const V6: Family = Family::IPV6_UNICAST;

#[test]
fn a_refresh_is_pending_until_the_rib_answered_it() {
    let mut c = established_core(params(), false);
    assert_eq!(
        c.handle(t(5), refresh_msg(V4)),
        vec![
            PeerOutput::RouteRefresh(V4),
            PeerOutput::RefreshPending(vec![V4])
        ]
    );
    assert_eq!(
        c.handle(t(6), refresh_msg(V6)),
        vec![
            PeerOutput::RouteRefresh(V6),
            PeerOutput::RefreshPending(vec![V4, V6])
        ]
    );
    // Other inputs in between leave the requests pending.
    c.handle(t(7), keepalive(Which::Main));
    let out = c.handle(
        t(8),
        PeerInput::RibSend {
            gen: 1,
            bytes: rib_bytes(2),
        },
    );
    assert_eq!(out, vec![PeerOutput::WriteRib(rib_bytes(2))]);
    assert_eq!(c.pending_refreshes(), vec![V4, V6]);
    // An answer for another session generation is not theirs.
    assert!(c
        .handle(t(9), PeerInput::RibRefreshed { gen: 0 })
        .is_empty());
    assert_eq!(
        c.handle(t(10), PeerInput::RibRefreshed { gen: 1 }),
        vec![PeerOutput::RefreshPending(vec![V6])]
    );
    assert_eq!(
        c.handle(t(11), PeerInput::RibRefreshed { gen: 1 }),
        vec![PeerOutput::RefreshPending(vec![])]
    );
    assert!(c
        .handle(t(12), PeerInput::RibRefreshed { gen: 1 })
        .is_empty());
}

#[test]
fn a_new_session_forgets_the_pending_refreshes() {
    let mut c = established_core(params(), false);
    c.handle(t(5), refresh_msg(V4));
    c.handle(t(6), PeerInput::Closed(Which::Main));
    assert!(!c.is_up());
    // Still pending while no new session is up.
    assert_eq!(c.pending_refreshes(), vec![V4]);
    let out = c.handle(t(7), PeerInput::Inbound);
    assert!(
        has(&out, |o| *o == PeerOutput::Attach(Which::Main)),
        "{out:?}"
    );
    c.handle(
        t(8),
        open_msg(
            Which::Main,
            &peer_open(Ipv4Addr::new(10, 0, 0, 9), 90, false),
        ),
    );
    let out = c.handle(t(9), keepalive(Which::Main));
    assert!(
        has(&out, |o| matches!(o, PeerOutput::PeerUp { gen: 2, .. })),
        "{out:?}"
    );
    assert!(c.pending_refreshes().is_empty());
    assert!(c
        .handle(t(10), PeerInput::RibRefreshed { gen: 1 })
        .is_empty());
    assert!(c
        .handle(t(11), PeerInput::RibRefreshed { gen: 2 })
        .is_empty());
}

#[test]
fn a_refresh_is_not_a_request_before_established() {
    let mut c = PeerCore::new(params());
    c.handle(t(0), PeerInput::Start { resuming: false });
    c.handle(t(1), PeerInput::Connected);
    let out = c.handle(t(2), refresh_msg(V4));
    assert!(
        !has(&out, |o| matches!(
            o,
            PeerOutput::RouteRefresh(_) | PeerOutput::RefreshPending(_)
        )),
        "{out:?}"
    );
    assert!(c.pending_refreshes().is_empty());
}

/// The inputs of a takeover: the RIB's output of the resumed session
/// arrives before the restored connection does.
pub(crate) fn resume_with_held_output(c: &mut PeerCore, refresh: Vec<Family>) -> Vec<PeerOutput> {
    assert!(c
        .handle(t(0), PeerInput::Start { resuming: true })
        .is_empty());
    for (ms, input) in [
        (
            10,
            PeerInput::RibSend {
                gen: 1,
                bytes: rib_bytes(2),
            },
        ),
        (11, PeerInput::RibRefreshed { gen: 1 }),
        (
            12,
            PeerInput::RibSend {
                gen: 1,
                bytes: rib_bytes(1),
            },
        ),
    ] {
        assert!(c.handle(t(ms), input).is_empty(), "held");
    }
    assert_eq!(c.held().len(), 3);
    let local = holdfast_fsm::open_for_config(&params().session);
    let remote = peer_open(Ipv4Addr::new(10, 0, 0, 9), 90, false);
    c.handle(
        t(50),
        PeerInput::Resume {
            local_open: local,
            remote_open: remote,
            refresh,
        },
    )
}

#[test]
fn resume_releases_held_output_after_its_keepalive_then_re_asks_the_rib() {
    let mut c = PeerCore::new(params());
    let out = resume_with_held_output(&mut c, vec![V6, V4]);
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
            PeerOutput::WriteRib(rib_bytes(2)),
            PeerOutput::WriteRib(rib_bytes(1)),
            PeerOutput::RouteRefresh(V6),
            PeerOutput::RouteRefresh(V4),
            PeerOutput::RefreshPending(vec![V6, V4]),
        ]
    );
    assert!(c.held().is_empty());
    assert_eq!(c.stats().updates_out, 3);
    // The RIB answers the re-asked requests, oldest first.
    assert_eq!(
        c.handle(t(60), PeerInput::RibRefreshed { gen: 1 }),
        vec![PeerOutput::RefreshPending(vec![V4])]
    );
}

#[test]
fn abort_resume_drops_the_held_output_and_the_stored_requests() {
    let mut c = PeerCore::new(params());
    c.handle(t(0), PeerInput::Start { resuming: true });
    c.handle(
        t(1),
        PeerInput::RibSend {
            gen: 1,
            bytes: rib_bytes(1),
        },
    );
    let out = c.handle(t(2), PeerInput::AbortResume);
    assert_eq!(out.first(), Some(&PeerOutput::Connect), "{out:?}");
    assert!(
        !has(&out, |o| matches!(o, PeerOutput::WriteRib(_))),
        "{out:?}"
    );
    assert!(c.held().is_empty());
    assert!(c.pending_refreshes().is_empty());
}

#[test]
fn a_resume_that_no_longer_negotiates_writes_nothing_held() {
    let mut c = PeerCore::new(params());
    c.handle(t(0), PeerInput::Start { resuming: true });
    c.handle(
        t(1),
        PeerInput::RibSend {
            gen: 1,
            bytes: rib_bytes(1),
        },
    );
    let local = holdfast_fsm::open_for_config(&params().session);
    let mut remote = peer_open(Ipv4Addr::new(10, 0, 0, 9), 90, false);
    remote.capabilities = vec![holdfast_wire::Capability::FourOctetAs(65099)];
    remote.my_as = 65099;
    let out = c.handle(
        t(50),
        PeerInput::Resume {
            local_open: local,
            remote_open: remote,
            refresh: vec![V4],
        },
    );
    assert_eq!(out.first(), Some(&PeerOutput::Refuse(None)), "{out:?}");
    assert!(
        !has(&out, |o| matches!(
            o,
            PeerOutput::WriteRib(_) | PeerOutput::RouteRefresh(_) | PeerOutput::RefreshPending(_)
        )),
        "{out:?}"
    );
    assert!(c.held().is_empty());
}

#[test]
fn rib_output_counts_its_messages() {
    assert_eq!(count_messages(&[]), 0);
    assert_eq!(count_messages(&rib_bytes(3).0), 3);
    // A truncated message is not counted.
    let b = rib_bytes(2);
    assert_eq!(count_messages(&b.0[..30]), 1);
}
