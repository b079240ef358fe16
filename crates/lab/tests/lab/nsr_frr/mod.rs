//! Non-stop routing against FRRouting's bgpd, over a TCP-MD5-protected
//! session: the failover sequence of `nsr_plane` (topology and checks are
//! drawn there).

use crate::nsr_common;

use holdfast_lab::{Frr, PeerKind};

#[test]
fn frr_peer_never_notices_failovers() {
    nsr_common::failover_sequence::<Frr>(
        "nsr_frr",
        PeerKind::Frr,
        nsr_common::Options {
            md5: Some("nsr-md5-key"),
            compact_bytes: None,
            bfd: None,
            bfd_auth: None,
            ..nsr_common::Options::default()
        },
    );
}
