//! Non-stop routing against GoBGP: the failover sequence of `nsr_plane`
//! (topology and checks are drawn there).

use crate::nsr_common;

use holdfast_lab::{Gobgp, PeerKind};

#[test]
fn gobgp_peer_never_notices_failovers() {
    nsr_common::failover_sequence::<Gobgp>(
        "nsr_gobgp",
        PeerKind::Gobgp,
        nsr_common::Options::default(),
    );
}
