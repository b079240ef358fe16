//! A stall is not the peer's silence (issue 25, item 1): holdfastd
//! SIGSTOPped for 1 s and for 2 s, then SIGCONT, with nobody taking over.
//! The peer runs BFD at 100 ms × 3 (detection time 300 ms) under the
//! session; the BFD relay keeps the peer's session Up while holdfastd does
//! not run. On waking, holdfastd must read the peer's packets that waited
//! in its sockets, judged by when the kernel received them, before any
//! detection timer: before that fix it declared its own BFD sessions Down
//! and sent the peer Cease/BFD Down.
//!
//! ```text
//!                 bridge `lan` 198.18.0.0/24
//!   [ p ] .20     frr (bgpd + bfdd) or bird2, BFD 100 ms x 3 --- service .10
//!   [ redis ] .2  redis-server (the state store)
//!   [ a ] .3      host agent (`--hang-ms 0`: a stall is not a hang here);
//!                 edge-1 in its container (NSR on), SIGSTOPped 1 s, then 2 s
//!   [ b ] .4      host agent (the backup host: nobody takes over)
//!   [ feed ] .5   raw test peers
//!   [ relay ] .6  holdfast-bfd-relay (the unit's Up packets while it is stopped)
//!   c1..c3        etcd + holdfast-controller (support/nsr_plane.rs)
//! ```
//!
//! Checked for each stall, on the peer's own CLI: its BFD session stayed
//! Up (frr: the `session-down` counter unchanged and the uptime not reset;
//! bird2: the "Since" column unchanged), the BGP session never left
//! Established (sampled every 100 ms; uptime never reset), the peer logged
//! no NOTIFICATION and holds every route (`nsr_plane`'s checks); and the
//! same holdfastd process still runs.
//!
//! Negative control (run by hand, noted in docs/notes/issue25-stall.md):
//! `HOLDFASTD_BIN` pointing at a holdfastd built before the fix fails the
//! frr test with frr's BFD session counted down.

use crate::peer_bfd::{assert_bfd_stayed_up, bfd_up};
use crate::{nsr_common, nsr_plane};

use holdfast_lab::{hold_for, Bird, Frr, Peer, PeerKind, PeerWatch};
use std::time::{Duration, Instant};

const INTERVAL_MS: u32 = 100;

fn stalls_are_invisible<P: Peer>(name: &str, kind: PeerKind) {
    let Some(mut r) = nsr_plane::Run::<P>::start(
        name,
        kind,
        nsr_common::Options {
            bfd: Some(INTERVAL_MS),
            stalls: true,
            ..nsr_common::Options::default()
        },
    ) else {
        return;
    };
    let svc = r.service_ip();
    bfd_up(&r, "before any stall", svc);
    r.start_relay(1);
    // The relay covers the session before the first stall.
    hold_for(Duration::from_secs(1), || {});
    let pid = r.hf().pid;
    r.check("before any stall");
    for stall in [Duration::from_secs(1), Duration::from_secs(2)] {
        let what = format!("holdfastd stopped {stall:?}");
        let before = bfd_up(&r, &what, svc);
        let watch: PeerWatch = r.watch();
        let t = Instant::now();
        r.stall_primary(stall);
        // Ten detection times after the wake-up for anything to show.
        hold_for(Duration::from_secs(3), || {});
        assert_bfd_stayed_up(&r, &what, svc, &before);
        println!("{what}: checked {:?} after the stop", t.elapsed());
        nsr_common::stop_watch(watch, &format!("stall {stall:?}"));
        r.check(&format!("holdfastd stopped {stall:?}"));
        assert_eq!(
            r.plane.unit_pid(nsr_plane::UNIT, &r.hf().host_name),
            Some(pid),
            "the stalled holdfastd was replaced"
        );
    }
}

#[test]
fn frr_sees_nothing_when_holdfastd_stalls() {
    stalls_are_invisible::<Frr>("stall_bfd_frr", PeerKind::Frr);
}

#[test]
fn bird_sees_nothing_when_holdfastd_stalls() {
    stalls_are_invisible::<Bird>("stall_bfd_bird", PeerKind::Bird);
}
