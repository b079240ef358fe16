//! holdfastd against a real BIRD 2.
//!
//! ```text
//!   [ h: holdfastd AS65000 ] 198.18.1.1    ===== link 1 ===== 198.18.1.2    [ p: bird AS65001 ]
//!                            fd00:0:0:1::1                    fd00:0:0:1::2
//!                            198.18.2.1    ===== link 2 ===== 198.18.2.2
//!                            fd00:0:0:2::1                    fd00:0:0:2::2
//!   s1 v4 link 1: holdfastd active,  bird passive     s2 v6 link 1: holdfastd passive, bird active
//!   s3 v4 link 2: holdfastd passive, bird active      s4 v6 link 2: holdfastd active,  bird passive
//!   each session carries its transport's family only (BIRD: one family per transport)
//! ```
//!
//! Checked (details in `common/interop.rs`), BIRD's view read with `birdc`:
//! * all four sessions Established on both sides;
//! * holdfastd's `[[network]]` routes reach BIRD with AS path 65000, next hop, MED,
//!   communities, large communities; BIRD's routes (MED, communities, large communities)
//!   are in holdfastd's Adj-RIB-In;
//! * withdrawal both ways (birdc reconfigure without the routes; holdfastd reload
//!   removing a network);
//! * an export-policy reload withdraws / re-adds routes at BIRD without a session reset
//!   (uptime grows, state-change counters unchanged, no NOTIFICATION in BIRD's log).

use crate::common;

use holdfast_lab::{skip_unless_ready, Bird, Lab, Peer, PeerKind};

#[test]
fn interop_bird() {
    if skip_unless_ready(&[PeerKind::Bird]) {
        return;
    }
    let mut lab = Lab::new("interop_bird").expect("lab");
    let (h, p, sessions, _) = common::topology(&mut lab, 2);
    let (hf, mut bird) = common::run(&mut lab, h, p, &sessions, |lab, host, spec| {
        Bird::start(lab, host, spec).expect("bird")
    });
    bird.stop(&mut lab);
    hf.stop(&mut lab);
    lab.teardown();
}
