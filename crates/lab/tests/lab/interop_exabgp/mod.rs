//! holdfastd against a real ExaBGP 4.
//!
//! ```text
//!   [ h: holdfastd AS65000 ] 198.18.1.1    ===== link 1 ===== 198.18.1.2    [ p: exabgp AS65001 ]
//!                            fd00:0:0:1::1                    fd00:0:0:1::2
//!                            198.18.2.1    ===== link 2 ===== 198.18.2.2
//!                            fd00:0:0:2::1                    fd00:0:0:2::2
//!                            198.18.3.1    ===== link 3 ===== 198.18.3.2
//!                            fd00:0:0:3::1                    fd00:0:0:3::2
//!   s1 v4 link 1: holdfastd active,  exabgp passive   s2 v6 link 1: holdfastd passive, exabgp active
//!   s3 v4 link 2: holdfastd passive, exabgp active    s4 v6 link 2: holdfastd active,  exabgp passive
//!   s5 v4 link 3: holdfastd active, exabgp passive, IPv4 and IPv6 unicast over the IPv4 transport
//!   every ExaBGP neighbour has local_address set (passive ones listen there)
//! ```
//!
//! Checked (details in `common/interop.rs`), ExaBGP's view read from the JSON events its
//! API process records (parsed UPDATEs, state changes, NOTIFICATIONs):
//! * all five sessions Established on both sides, s5 with both families negotiated;
//! * holdfastd's `[[network]]` routes reach ExaBGP with AS path 65000, next hop, MED,
//!   communities, large communities; ExaBGP's routes (MED, communities, large
//!   communities) are in holdfastd's Adj-RIB-In;
//! * withdrawal both ways (API `withdraw route`; holdfastd reload removing a network);
//! * an export-policy reload withdraws / re-adds routes at ExaBGP without a session reset
//!   (uptime grows, up/down counters unchanged, no NOTIFICATION event).

use crate::common;

use holdfast_lab::{skip_unless_ready, Exabgp, Lab, Peer, PeerKind};

#[test]
fn interop_exabgp() {
    if skip_unless_ready(&[PeerKind::Exabgp]) {
        return;
    }
    let mut lab = Lab::new("interop_exabgp").expect("lab");
    let (h, p, mut sessions, extra) = common::topology(&mut lab, 3);
    // IPv4 and IPv6 unicast over one IPv4 transport: the ExaBGP driver announces the
    // IPv4-mapped address of its end as IPv6 next hop; holdfastd uses its global IPv6
    // address on the link.
    sessions.push(common::mapped_multi_family(extra[0]));
    let (hf, mut exa) = common::run(&mut lab, h, p, &sessions, |lab, host, spec| {
        Exabgp::start(lab, host, spec).expect("exabgp")
    });
    assert!(exa.notifications().is_empty(), "{:?}", exa.notifications());
    exa.stop(&mut lab);
    hf.stop(&mut lab);
    lab.teardown();
}
