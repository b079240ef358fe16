//! Non-stop routing against BIRD 2: the failover sequence of `nsr_plane`
//! (topology and checks are drawn there), with `compact_bytes` at 256 KiB
//! so that the 100k-route bursts compact the replicated logs into table
//! snapshots and the takeovers after them load snapshots.

use crate::nsr_common;

use holdfast_lab::{Bird, PeerKind};

#[test]
fn bird_peer_never_notices_failovers() {
    nsr_common::failover_sequence::<Bird>(
        "nsr_bird",
        PeerKind::Bird,
        nsr_common::Options {
            md5: None,
            compact_bytes: Some(256 * 1024),
            bfd: None,
            bfd_auth: None,
            ..nsr_common::Options::default()
        },
    );
}
