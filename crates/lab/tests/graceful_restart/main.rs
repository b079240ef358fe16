//! Graceful restart helper mode (RFC 4724): a restarting peer keeps its
//! routes until its End-of-RIB.
//!
//! ```text
//!   tester A AS65001 (GR, 120 s)                         monitor AS65002
//!   [ t1 ] 198.18.1.2 --- veth --- 198.18.1.1 [ hf ] 198.18.2.1 --- veth --- 198.18.2.2 [ t2 ]
//!                                    holdfastd AS65000 (passive)
//!   tester C AS65003 (no GR)             | 198.18.3.1
//!   [ t3 ] 198.18.3.2 ------------ veth -+
//! ```
//!
//! Checks:
//! * A announces 10 prefixes, the monitor gets them; A drops TCP without a
//!   NOTIFICATION → holdfastd notices (session leaves Established) but keeps
//!   the 10 in its Loc-RIB and the monitor sees no withdrawal over a 3 s
//!   observation window;
//! * A reconnects with the R bit, re-announces 5 and sends End-of-RIB → the
//!   other 5 (stale) are withdrawn at the monitor and leave the Loc-RIB, the
//!   re-announced 5 stay; exactly 5 withdrawals were sent;
//! * negative: C (no GR capability) announces 5 and drops TCP → the monitor
//!   sees the 5 withdrawn.

#[path = "../robust_common/mod.rs"]
mod robust_common;

use robust_common::*;
use holdfast_api::RibTable;
use holdfast_lab::{skip_unless_ready, wait_until};
use std::collections::HashSet;
use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

const T: Duration = Duration::from_secs(20);

#[test]
fn graceful_restart_helper() {
    if skip_unless_ready(&[]) {
        return;
    }
    let mut s = setup("graceful_restart", 3);
    let (sa, sm, sc) = (s.sides[0].clone(), s.sides[1].clone(), s.sides[2].clone());
    let cfg = format!(
        "{}{}{}{}",
        global_block("graceful_restart_time = 120"),
        neighbor_block(&sa, 65001, ""),
        neighbor_block(&sm, 65002, ""),
        neighbor_block(&sc, 65003, "")
    );
    let d = start_holdfastd(&mut s, &cfg);
    let mon = connect(&sm, &tester_cfg(65002, 2), T);
    let mut ca = tester_cfg(65001, 1);
    ca.graceful_restart = Some(120);
    let a = connect(&sa, &ca, T);
    let pa = prefixes(Ipv4Addr::new(10, 1, 0, 0), 10);
    a.announce(&attrs(65001, sa.ip), &pa).unwrap();
    mon.wait("monitor has A's 10 prefixes", T, |v| pa.iter().all(|p| v.routes.contains_key(p))).unwrap();

    // A crashes.
    a.abort();
    drop(a);
    wait_until("holdfastd notices A's drop", T, || d.neighbor(sa.ip), |n| {
        n.as_ref().is_some_and(|n| n.state != "Established")
    })
    .unwrap();
    let until = Instant::now() + Duration::from_secs(3);
    while Instant::now() < until {
        let (w, have) = mon.view(|v| (v.withdrawn, pa.iter().filter(|p| v.routes.contains_key(p)).count()));
        assert_eq!((w, have), (0, 10), "monitor lost A's routes during A's graceful restart");
        let loc: HashSet<String> = rib_prefixes(&d, RibTable::Loc, None).into_iter().collect();
        assert!(pa.iter().all(|p| loc.contains(&p.to_string())), "Loc-RIB lost A's routes during the restart");
        std::thread::sleep(Duration::from_millis(200));
    }

    // A comes back, re-announces half, End-of-RIB.
    ca.restarting = true;
    let a = connect(&sa, &ca, T);
    a.announce(&attrs(65001, sa.ip), &pa[..5]).unwrap();
    a.end_of_rib(holdfast_wire::Family::IPV4_UNICAST).unwrap();
    mon.wait("monitor sees A's 5 stale routes withdrawn", T, |v| pa[5..].iter().all(|p| !v.routes.contains_key(p)))
        .unwrap();
    mon.view(|v| {
        assert!(pa[..5].iter().all(|p| v.routes.contains_key(p)), "re-announced routes lost at the monitor");
        assert_eq!(v.withdrawn, 5, "exactly the 5 stale routes are withdrawn");
    });
    let loc: HashSet<String> = rib_prefixes(&d, RibTable::Loc, None).into_iter().collect();
    assert!(pa[..5].iter().all(|p| loc.contains(&p.to_string())), "re-announced routes missing from Loc-RIB");
    assert!(pa[5..].iter().all(|p| !loc.contains(&p.to_string())), "stale routes left in Loc-RIB");

    // Negative: no GR capability → immediate withdrawal.
    let c = connect(&sc, &tester_cfg(65003, 3), T);
    let pc = prefixes(Ipv4Addr::new(10, 3, 0, 0), 5);
    c.announce(&attrs(65003, sc.ip), &pc).unwrap();
    mon.wait("monitor has C's 5 prefixes", T, |v| pc.iter().all(|p| v.routes.contains_key(p))).unwrap();
    c.abort();
    drop(c);
    mon.wait("monitor sees C's routes withdrawn after its drop", T, |v| pc.iter().all(|p| !v.routes.contains_key(p)))
        .unwrap();
    mon.view(|v| assert!(v.notifications.is_empty() && !v.closed, "monitor session disturbed"));
    drop(a);
    drop(mon);
    let mut lab = s.lab;
    d.stop(&mut lab);
    lab.teardown();
}
