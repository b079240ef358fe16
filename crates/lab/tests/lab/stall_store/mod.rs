//! The store stalls (issue 25, item 5): Redis SIGSTOPped (not killed: its
//! connections stay open and its answers just stop) for 3 s and for 15 s
//! while frr sends holdfastd a 100k-route burst.
//!
//! ```text
//!                 bridge `lan` 198.18.0.0/24
//!   [ p ] .20     frr: passes the feed's burst on to the unit (.10)
//!   [ redis ] .2  redis-server, SIGSTOPped mid-burst, then SIGCONT
//!   [ a ] .3      host agent; the unit edge-1 (NSR on) in its container, at .10
//!   [ b ] .4      host agent: the controller's takeover after the stalls
//!   c1..c3        etcd + holdfast-controller (support/nsr_plane.rs)
//!   [ feed ] .5   raw test peers (the burst into frr; routes out of us)
//! ```
//!
//! Checked after each stall: holdfastd is PROTECTED again within 2 s of
//! the store's return, by itself; frr's session never left Established
//! (sampled every 100 ms, uptime never reset), frr logged no
//! NOTIFICATION, and every route frr sent is in our Adj-RIB-In
//! (`nsr_plane`'s checks). Then a takeover (SIGKILL of the unit, the
//! controller has the backup restore the session from the store): the
//! same checks, so the store written anew after the stall is whole.

use crate::{nsr_common, nsr_plane};

use holdfast_lab::{Frr, PeerKind};
use std::time::Duration;

#[test]
fn frr_sees_nothing_when_the_store_stalls_mid_burst() {
    let Some(mut r) =
        nsr_plane::Run::<Frr>::start("stall_store", PeerKind::Frr, nsr_common::Options::default())
    else {
        return;
    };
    let watch = r.watch();
    r.check("before the stalls");
    let since = std::time::SystemTime::now();
    for d in [Duration::from_secs(3), Duration::from_secs(15)] {
        let back = r.store_stall(d);
        assert!(
            back <= Duration::from_secs(2),
            "store stalled {d:?}: PROTECTED again only {back:?} after its return"
        );
    }
    r.idle_kill();
    r.finish(watch, since);
}
