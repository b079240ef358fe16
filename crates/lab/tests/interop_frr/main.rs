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
//!   s5 v4 link 3: holdfastd passive, frr active, MD5 "hf-md5-ok" on both sides
//!   s6 v6 link 3: holdfastd passive, frr active, MD5 "hf-md5-ok" on holdfastd,
//!                 "hf-md5-WRONG" on frr
//! ```
//!
//! Checked (details in `common/interop.rs`), FRR's view read with `vtysh ... json`:
//! * s1-s4 and the MD5 session s5 Established on both sides; routes flow over s5 too;
//! * holdfastd's `[[network]]` routes reach FRR with AS path 65000, next hop, MED,
//!   communities, large communities; FRR's routes (MED, communities, large communities)
//!   are in holdfastd's Adj-RIB-In;
//! * withdrawal both ways (FRR `no network`; holdfastd reload removing a network);
//! * an export-policy reload withdraws / re-adds routes at FRR without a session reset
//!   (uptime grows, established/dropped counters unchanged, no NOTIFICATION in bgpd.log);
//! * s6 (mismatched MD5) never reaches Established on either side, and never gets as
//!   far as an OPEN on holdfastd (msgs_in = 0): the kernel drops the unsigned/badly
//!   signed segments.

#[path = "../common/interop.rs"]
mod common;

use holdfast_lab::{skip_unless_ready, Frr, Lab, Peer, PeerKind, SessionState};
use std::time::{Duration, Instant};

#[test]
fn interop_frr() {
    if skip_unless_ready(&[PeerKind::Frr]) {
        return;
    }
    let mut lab = Lab::new("interop_frr").expect("lab");
    let (h, p, mut sessions, extra) = common::topology(&mut lab, 3);
    let [(hf4, frr4), (hf6, frr6)] = extra[0];
    let base = sessions[0].clone();
    sessions.push(common::Sess {
        name: "s5-v4-md5".into(),
        hf: hf4,
        peer: frr4,
        hf_passive: true,
        hf_md5: Some("hf-md5-ok".into()),
        peer_md5: Some("hf-md5-ok".into()),
        ..base.clone()
    });
    let bad = common::Sess {
        name: "s6-v6-md5-mismatch".into(),
        hf: hf6,
        peer: frr6,
        hf_passive: true,
        hf_md5: Some("hf-md5-ok".into()),
        peer_md5: Some("hf-md5-WRONG".into()),
        expect_up: false,
    };
    sessions.push(bad.clone());
    let t0 = Instant::now();
    let (hf, mut frr) = common::run(
        &mut lab,
        h,
        p,
        &sessions,
        |lab, host, spec| Frr::start(lab, host, spec).expect("frr"),
        &["%NOTIFICATION"],
    );

    // The mismatched-MD5 session: FRR has been trying to connect (connect retry) for the
    // whole scenario; give it at least 10 s in total, then it must still be down.
    let min = Duration::from_secs(10);
    if t0.elapsed() < min {
        std::thread::sleep(min - t0.elapsed());
    }
    let v = frr.session(&lab, bad.hf).expect("frr").expect("configured");
    assert_ne!(v.state, SessionState::Established, "MD5 mismatch came up at FRR: {v:?}");
    assert_eq!(v.established_count.unwrap_or(0), 0, "{v:?}");
    let n = hf.neighbor(bad.peer).expect("hf").expect("configured");
    assert_ne!(n.state, "Established", "MD5 mismatch came up at holdfastd: {n:?}");
    assert_eq!((n.established_count, n.msgs_in), (0, 0), "{n:?}");

    frr.stop(&mut lab);
    hf.stop(&mut lab);
    lab.teardown();
}
