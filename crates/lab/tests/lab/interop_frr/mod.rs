//! holdfastd against a real FRR (bgpd), plus TCP-MD5.
//!
//! ```text
//!   [ h: holdfastd AS65000 ] 198.18.1.1    ===== link 1 ===== 198.18.1.2    [ p: frr AS65001 ]
//!                            fd00:0:0:1::1                    fd00:0:0:1::2
//!                            198.18.2.1    ===== link 2 ===== 198.18.2.2
//!                            fd00:0:0:2::1                    fd00:0:0:2::2
//!                            198.18.3.1    ===== link 3 ===== 198.18.3.2
//!                            fd00:0:0:3::1                    fd00:0:0:3::2
//!   s1 v4 link 1: holdfastd active,  frr passive      s2 v6 link 1: holdfastd passive, frr active
//!   s3 v4 link 2: holdfastd passive, frr active       s4 v6 link 2: holdfastd active,  frr passive
//!                            198.18.4.1    ===== link 4 ===== 198.18.4.2
//!                            fd00:0:0:4::1                    fd00:0:0:4::2
//!   s5 v4 link 3: holdfastd passive, frr active,  MD5 "hf-md5-ok" on both sides
//!   s6 v6 link 3: holdfastd passive, frr active,  MD5 "hf-md5-ok" on holdfastd, "hf-md5-WRONG" on frr
//!   s7 v6 link 4: holdfastd active,  frr passive, MD5 "hf-md5-ok" on both sides
//!   s8 v4 link 4: holdfastd active,  frr passive, MD5 "hf-md5-ok" on holdfastd, "hf-md5-WRONG" on frr
//!   s9 v4 link 5 (198.18.5.0/24, fd00:0:0:5::/64): holdfastd passive, frr active,
//!                 IPv4 and IPv6 unicast over the IPv4 transport
//! ```
//!
//! Checked (details in `common/interop.rs`), FRR's view read with `vtysh ... json`:
//! * s1-s4, the multi-family session s9 and the MD5 sessions s5 (holdfastd listening) and s7 (holdfastd connecting)
//!   Established on both sides; the whole scenario (routes, withdrawals, reloads) runs
//!   over them too;
//! * holdfastd's `[[network]]` routes reach FRR with AS path 65000, next hop, MED,
//!   communities, large communities; FRR's routes (MED, communities, large communities)
//!   are in holdfastd's Adj-RIB-In;
//! * withdrawal both ways (FRR `no network`; holdfastd reload removing a network);
//! * an export-policy reload withdraws / re-adds routes at FRR without a session reset
//!   (uptime grows, established/dropped counters unchanged, no NOTIFICATION in bgpd.log);
//! * s6 and s8 (mismatched MD5, each role of holdfastd) never reach Established on
//!   either side, and no message ever reaches holdfastd (msgs_in = 0): the kernel drops
//!   the badly signed segments. Checked after at least 10 s of connect attempts.

use crate::common;

use holdfast_lab::{skip_unless_ready, Frr, Lab, Peer, PeerKind, SessionState};
use std::time::{Duration, Instant};

#[test]
fn interop_frr() {
    if skip_unless_ready(&[PeerKind::Frr]) {
        return;
    }
    let mut lab = Lab::new("interop_frr").expect("lab");
    let (h, p, mut sessions, extra) = common::topology(&mut lab, 5);
    let md5 = |name: &str, addrs, hf_passive, peer_pw: &str| common::Sess {
        hf_md5: Some("hf-md5-ok".into()),
        peer_md5: Some(peer_pw.into()),
        expect_up: peer_pw == "hf-md5-ok",
        ..common::Sess::new(name, addrs, hf_passive)
    };
    let bad = [
        md5(
            "s6-v6-hf-passive-md5-mismatch",
            extra[0][1],
            true,
            "hf-md5-WRONG",
        ),
        md5(
            "s8-v4-hf-active-md5-mismatch",
            extra[1][0],
            false,
            "hf-md5-WRONG",
        ),
    ];
    sessions.push(md5("s5-v4-hf-passive-md5", extra[0][0], true, "hf-md5-ok"));
    sessions.push(md5("s7-v6-hf-active-md5", extra[1][1], false, "hf-md5-ok"));
    sessions.extend(bad.iter().cloned());
    // IPv4 and IPv6 unicast over one IPv4 transport: FRR uses its global IPv6 address
    // on the link as next hop, holdfastd its own.
    let [(hf4, p4), (hf6, p6)] = extra[2];
    sessions.push(
        common::Sess::new("s9-v4-hf-passive-multi-family", (hf4, p4), true).multi_family(hf6, p6),
    );
    let t0 = Instant::now();
    let (hf, mut frr) = common::run(&mut lab, h, p, &sessions, |lab, host, spec| {
        Frr::start(lab, host, spec).expect("frr")
    });

    // The mismatched-MD5 sessions: the connecting side has been retrying for the whole
    // scenario; give it at least 10 s in total, then they must still be down.
    let min = Duration::from_secs(10);
    if t0.elapsed() < min {
        std::thread::sleep(min - t0.elapsed());
    }
    for bad in &bad {
        let v = frr.session(&lab, bad.hf).expect("frr").expect("configured");
        assert_ne!(
            v.state,
            SessionState::Established,
            "{}: came up at FRR: {v:?}",
            bad.name
        );
        assert_eq!(v.established_count.unwrap_or(0), 0, "{}: {v:?}", bad.name);
        let n = hf.neighbor(bad.peer).expect("hf").expect("configured");
        assert_ne!(
            n.state, "Established",
            "{}: came up at holdfastd: {n:?}",
            bad.name
        );
        assert_eq!(
            (n.established_count, n.msgs_in),
            (0, 0),
            "{}: {n:?}",
            bad.name
        );
    }

    frr.stop(&mut lab);
    hf.stop(&mut lab);
    lab.teardown();
}
