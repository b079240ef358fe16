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
//!
//! `bird_restart` (same shape, bird with `graceful restart on` in t1 instead
//! of tester A, no C): bird originates 4 prefixes; bird is killed with SIGKILL
//! (by PID) → holdfastd keeps the 4 and the monitor sees no withdrawal for
//! 3 s; bird is started again originating only 2 of them → after its
//! End-of-RIB the other 2 are withdrawn at the monitor and the 2 stay
//! (exactly 2 withdrawals: the kept ones never flap).

use crate::robust_common;

use holdfast_api::RibTable;
use holdfast_lab::{
    hold_for, skip_unless_ready, wait_until, Bird, NeighborSpec, Peer as _, PeerKind, PeerSpec,
    RouteSpec,
};
use robust_common::*;
use std::collections::HashSet;
use std::net::Ipv4Addr;
use std::time::Duration;

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
    mon.wait("monitor has A's 10 prefixes", T, |v| {
        pa.iter().all(|p| v.routes.contains_key(p))
    })
    .unwrap();

    // A crashes.
    a.abort();
    drop(a);
    wait_until(
        "holdfastd notices A's drop",
        T,
        || d.neighbor(sa.ip),
        |n| n.as_ref().is_some_and(|n| n.state != "Established"),
    )
    .unwrap();
    hold_for(Duration::from_secs(3), || {
        let (w, have) = mon.view(|v| {
            (
                v.withdrawn,
                pa.iter().filter(|p| v.routes.contains_key(p)).count(),
            )
        });
        assert_eq!(
            (w, have),
            (0, 10),
            "monitor lost A's routes during A's graceful restart"
        );
        let loc: HashSet<String> = rib_prefixes(&d, RibTable::Loc, None).into_iter().collect();
        assert!(
            pa.iter().all(|p| loc.contains(&p.to_string())),
            "Loc-RIB lost A's routes during the restart"
        );
    });

    // A comes back, re-announces half, End-of-RIB.
    ca.restarting = true;
    let a = connect(&sa, &ca, T);
    a.announce(&attrs(65001, sa.ip), &pa[..5]).unwrap();
    a.end_of_rib(holdfast_wire::Family::IPV4_UNICAST).unwrap();
    mon.wait("monitor sees A's 5 stale routes withdrawn", T, |v| {
        pa[5..].iter().all(|p| !v.routes.contains_key(p))
    })
    .unwrap();
    mon.view(|v| {
        assert!(
            pa[..5].iter().all(|p| v.routes.contains_key(p)),
            "re-announced routes lost at the monitor"
        );
        assert_eq!(v.withdrawn, 5, "exactly the 5 stale routes are withdrawn");
    });
    let loc: HashSet<String> = rib_prefixes(&d, RibTable::Loc, None).into_iter().collect();
    assert!(
        pa[..5].iter().all(|p| loc.contains(&p.to_string())),
        "re-announced routes missing from Loc-RIB"
    );
    assert!(
        pa[5..].iter().all(|p| !loc.contains(&p.to_string())),
        "stale routes left in Loc-RIB"
    );

    // Negative: no GR capability → immediate withdrawal.
    let c = connect(&sc, &tester_cfg(65003, 3), T);
    let pc = prefixes(Ipv4Addr::new(10, 3, 0, 0), 5);
    c.announce(&attrs(65003, sc.ip), &pc).unwrap();
    mon.wait("monitor has C's 5 prefixes", T, |v| {
        pc.iter().all(|p| v.routes.contains_key(p))
    })
    .unwrap();
    c.abort();
    drop(c);
    mon.wait("monitor sees C's routes withdrawn after its drop", T, |v| {
        pc.iter().all(|p| !v.routes.contains_key(p))
    })
    .unwrap();
    mon.view(|v| {
        assert!(
            v.notifications.is_empty() && !v.closed,
            "monitor session disturbed"
        )
    });
    drop(a);
    drop(mon);
    let mut lab = s.lab;
    d.stop(&mut lab);
    lab.teardown();
}

#[test]
fn bird_restart() {
    if skip_unless_ready(&[PeerKind::Bird]) {
        return;
    }
    let mut s = setup("graceful_restart_bird", 2);
    let (sb, sm) = (s.sides[0].clone(), s.sides[1].clone());
    let cfg = format!(
        "{}{}{}",
        global_block("graceful_restart_time = 120"),
        neighbor_block(&sb, 65001, ""),
        neighbor_block(&sm, 65002, "")
    );
    let d = start_holdfastd(&mut s, &cfg);
    let mon = connect(&sm, &tester_cfg(65002, 2), T);
    let all = [
        "10.50.0.0/24",
        "10.50.1.0/24",
        "10.50.2.0/24",
        "10.50.3.0/24",
    ];
    let spec = |n: usize| {
        let mut p = PeerSpec::new(65001, Ipv4Addr::new(192, 0, 2, 50)).neighbor(
            NeighborSpec::new(sb.hf_ip, HF_AS)
                .local(sb.ip)
                .graceful_restart(true)
                .families(true, false),
        );
        for r in &all[..n] {
            p = p.route(RouteSpec::new(r));
        }
        p
    };
    let bird = Bird::start(&mut s.lab, sb.host, &spec(4)).unwrap();
    let pa: Vec<_> = all.iter().map(|p| p4(p)).collect();
    mon.wait("monitor has bird's 4 prefixes", T, |v| {
        pa.iter().all(|p| v.routes.contains_key(p))
    })
    .unwrap();
    let info = d.neighbor(sb.ip).unwrap().unwrap();
    assert_eq!(info.state, "Established");

    let pid = bird.pids(&s.lab)[0];
    let st = std::process::Command::new("kill")
        .args(["-KILL", &pid.to_string()])
        .status()
        .unwrap();
    assert!(st.success(), "kill -KILL {pid}");
    drop(bird);
    wait_until(
        "holdfastd notices bird's death",
        T,
        || d.neighbor(sb.ip),
        |n| n.as_ref().is_some_and(|n| n.state != "Established"),
    )
    .unwrap();
    hold_for(Duration::from_secs(3), || {
        let (w, have) = mon.view(|v| {
            (
                v.withdrawn,
                pa.iter().filter(|p| v.routes.contains_key(p)).count(),
            )
        });
        assert_eq!(
            (w, have),
            (0, 4),
            "monitor lost bird's routes while bird restarts"
        );
    });
    let bird = Bird::start(&mut s.lab, sb.host, &spec(2)).unwrap();
    d.wait_established(sb.ip, T).unwrap();
    mon.wait("monitor sees bird's 2 dropped prefixes withdrawn", T, |v| {
        pa[2..].iter().all(|p| !v.routes.contains_key(p))
    })
    .unwrap();
    mon.view(|v| {
        assert!(
            pa[..2].iter().all(|p| v.routes.contains_key(p)),
            "re-announced routes missing at the monitor"
        );
        assert_eq!(
            v.withdrawn, 2,
            "only the 2 dropped prefixes are withdrawn (no flap of the kept ones)"
        );
        assert!(
            v.notifications.is_empty() && !v.closed,
            "monitor session disturbed"
        );
    });
    drop(bird);
    drop(mon);
    let mut lab = s.lab;
    d.stop(&mut lab);
    lab.teardown();
}
