//! GTSM (RFC 5082) between holdfastd and a real FRR.
//!
//! ```text
//!   [ h: holdfastd AS65000 ] 198.18.1.1 ===== link 1 ===== 198.18.1.2 [ p: frr AS65001 ]
//!                            198.18.2.1 ===== link 2 ===== 198.18.2.2
//!   g1 link 1: ttl_security = 1 on holdfastd, `ttl-security hops 1` on frr, holdfastd active
//!   g2 link 2: ttl_security = 1 on holdfastd only, holdfastd active; frr sends its
//!              eBGP default TTL of 1
//! ```
//!
//! Checked:
//! * g1 comes up on both sides: frr's GTSM accepts only TTL 255, so holdfastd must
//!   send 255, and holdfastd accepts frr's 255.
//! * g2 never comes up on either side, and holdfastd never receives a BGP message
//!   from it: frr's TTL-1 segments are below holdfastd's minimum TTL of 255 and the
//!   kernel drops them. Checked after at least 8 s of connect attempts.

use holdfast_lab::{
    hold_for, skip_unless_ready, Frr, Holdfastd, Lab, NeighborSpec, Peer, PeerKind, PeerSpec,
};
use std::net::{IpAddr, Ipv4Addr};
use std::time::{Duration, Instant};

#[test]
fn gtsm_with_frr() {
    if skip_unless_ready(&[PeerKind::Frr]) {
        return;
    }
    let mut lab = Lab::new("gtsm").expect("lab");
    let h = lab.host("h").expect("host h");
    let p = lab.host("p").expect("host p");
    let mut pairs: Vec<(IpAddr, IpAddr)> = Vec::new();
    for _ in 0..2 {
        let l = lab.link_auto(h, p).expect("link");
        let v4 = lab.link_info(l).v4.expect("IPv4 on the link");
        pairs.push((v4.a.into(), v4.b.into()));
    }
    let (hf1, frr1) = pairs[0];
    let (hf2, frr2) = pairs[1];
    let config = format!(
        r#"[global]
asn = 65000
router_id = "{hf1}"
connect_retry = 2

[[neighbor]]
address = "{frr1}"
remote_asn = 65001
import = "all"
export = "all"
ttl_security = 1

[[neighbor]]
address = "{frr2}"
remote_asn = 65001
import = "all"
export = "all"
ttl_security = 1
"#
    );
    let hf = Holdfastd::start(&mut lab, h, "holdfastd", &config).expect("holdfastd");
    let spec = PeerSpec::new(65001, Ipv4Addr::new(192, 0, 2, 77))
        .neighbor(NeighborSpec::new(hf1, 65000).passive().ttl_security())
        .neighbor(NeighborSpec::new(hf2, 65000).passive());
    let frr = Frr::start(&mut lab, p, &spec).expect("frr");
    let started = Instant::now();

    hf.wait_established(frr1, Duration::from_secs(60))
        .expect("g1 up on holdfastd");
    frr.wait_established(&lab, hf1, Duration::from_secs(30))
        .expect("g1 up on frr");

    hold_for(
        (started + Duration::from_secs(8)).saturating_duration_since(Instant::now()),
        || {
            let n = hf
                .neighbor(frr2)
                .expect("control socket")
                .expect("g2 configured");
            assert_ne!(
                n.state, "Established",
                "g2 came up although frr sends TTL 1: {n:?}"
            );
            assert_eq!(
                n.msgs_in, 0,
                "a message from a TTL-1 peer got through GTSM: {n:?}"
            );
            let s = frr.session(&lab, hf2).expect("vtysh").expect("g2 on frr");
            assert!(!s.is_established(), "frr reports g2 Established: {s:?}");
        },
    );
    let n = hf
        .neighbor(frr1)
        .expect("control socket")
        .expect("g1 configured");
    assert_eq!(n.state, "Established", "g1 dropped: {n:?}");
    lab.teardown();
}
