//! Non-stop routing against BIRD 2: the failover sequence of `nsr_common`
//! (topology and checks are drawn there).

#[path = "../nsr_common/mod.rs"]
mod nsr_common;

use holdfast_lab::{Bird, PeerKind};

#[test]
fn bird_peer_never_notices_failovers() {
    nsr_common::failover_sequence::<Bird>(
        "nsr_bird",
        PeerKind::Bird,
        nsr_common::Options { md5: None },
    );
}
