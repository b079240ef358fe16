//! holdfastd against a real GoBGP (gobgpd).
//!
//! ```text
//!   [ h: holdfastd AS65000 ] 198.18.1.1    ===== link 1 ===== 198.18.1.2    [ p: gobgpd AS65001 ]
//!                            fd00:0:0:1::1                    fd00:0:0:1::2
//!                            198.18.2.1    ===== link 2 ===== 198.18.2.2
//!                            fd00:0:0:2::1                    fd00:0:0:2::2
//!                            198.18.3.1    ===== link 3 ===== 198.18.3.2
//!                            fd00:0:0:3::1                    fd00:0:0:3::2
//!   s1 v4 link 1: holdfastd active,  gobgpd passive   s2 v6 link 1: holdfastd passive, gobgpd active
//!   s3 v4 link 2: holdfastd passive, gobgpd active    s4 v6 link 2: holdfastd active,  gobgpd passive
//!   s5 v4 link 3: holdfastd active, gobgpd passive, IPv4 and IPv6 unicast over the IPv4 transport
//! ```
//!
//! Checked (details in `common/interop.rs`), GoBGP's view read with the `gobgp` CLI:
//! * all five sessions Established on both sides, s5 with both families negotiated;
//! * holdfastd's `[[network]]` routes reach gobgpd with AS path 65000, next hop, MED,
//!   communities, large communities; gobgpd's routes (MED, communities, large
//!   communities) are in holdfastd's Adj-RIB-In;
//! * withdrawal both ways (`gobgp global rib del`; holdfastd reload removing a network);
//! * an export-policy reload withdraws / re-adds routes at gobgpd without a session reset
//!   (uptime grows, `flops` unchanged, no notification in gobgpd's log).

use crate::common;

use holdfast_lab::{skip_unless_ready, Gobgp, Lab, Peer, PeerKind};

#[test]
fn interop_gobgp() {
    if skip_unless_ready(&[PeerKind::Gobgp]) {
        return;
    }
    let mut lab = Lab::new("interop_gobgp").expect("lab");
    let (h, p, mut sessions, extra) = common::topology(&mut lab, 3);
    // IPv4 and IPv6 unicast over one IPv4 transport: GoBGP uses the IPv4-mapped
    // address of its end as IPv6 next hop; holdfastd uses its global IPv6 address on the link.
    sessions.push(common::mapped_multi_family(extra[0]));
    let (hf, mut gobgp) = common::run(&mut lab, h, p, &sessions, |lab, host, spec| {
        Gobgp::start(lab, host, spec).expect("gobgp")
    });
    gobgp.stop(&mut lab);
    hf.stop(&mut lab);
    lab.teardown();
}
