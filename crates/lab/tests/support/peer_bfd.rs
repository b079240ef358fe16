//! The peer's BFD session with the unit as the peer's own CLI reports
//! it, read before and after something the peer must not notice (a
//! stall, an upgrade): still Up, and by the peer's own record never down
//! in between (frr's `session-down` counter and uptime, bird2's "Since").

use crate::nsr_plane::Run;

use holdfast_lab::{BfdView, Peer};
use std::net::IpAddr;
use std::time::{Duration, Instant};

/// The peer's BFD session with the unit, by the peer's own CLI, read at
/// `at`.
#[derive(Debug, Clone)]
pub struct BfdSeen {
    pub at: Instant,
    pub view: BfdView,
}

/// The peer's BFD session with `svc` once it is Up.
pub fn bfd_up<P: Peer>(r: &Run<P>, what: &str, svc: IpAddr) -> BfdSeen {
    let view = holdfast_lab::wait_ok(
        &format!("{what}: the peer's BFD session Up"),
        Duration::from_secs(60),
        || match r.peer().bfd_session(&r.plane.lab, svc) {
            Ok(Some(v)) if v.up => Ok(v),
            Ok(v) => Err(format!("{v:?}")),
            Err(e) => Err(e.to_string()),
        },
    )
    .unwrap_or_else(|e| panic!("{e}"));
    BfdSeen {
        at: Instant::now(),
        view,
    }
}

/// The peer's BFD session never left Up between `before` and now, by its
/// own record: Up now, frr's `session-down` counter unchanged and its
/// uptime grown by the time between (less two seconds of rounding), bird2's
/// "Since" (the last state change) unchanged.
pub fn assert_bfd_stayed_up<P: Peer>(r: &Run<P>, what: &str, svc: IpAddr, before: &BfdSeen) {
    let now = bfd_up(r, what, svc);
    let (b, n) = (&before.view, &now.view);
    assert_eq!(
        b.session_downs, n.session_downs,
        "{what}: the peer counted its BFD session down: {b:?} -> {n:?}"
    );
    assert_eq!(
        b.since, n.since,
        "{what}: the peer's BFD session changed state: {b:?} -> {n:?}"
    );
    if let (Some(u0), Some(u1)) = (b.uptime_secs, n.uptime_secs) {
        let elapsed = (now.at - before.at).as_secs();
        // Whole seconds at both ends, and each read somewhere inside a CLI
        // call: up to two seconds of rounding.
        assert!(
            u1 + 2 >= u0 + elapsed,
            "{what}: the peer's BFD uptime went from {u0} s to {u1} s in {elapsed} s: it restarted"
        );
    }
    println!("{what}: the peer's BFD session stayed Up ({b:?} -> {n:?})");
}
