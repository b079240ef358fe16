//! Sessions survive a full-table load with a 3 s hold time: KEEPALIVEs must
//! not wait on route processing (TENSOR §3.1.2).
//!
//! ```text
//!   injector AS65001                                                monitor AS65002
//!   [ t1 ] 198.18.1.2 --- veth --- 198.18.1.1 [ hf ] 198.18.2.1 --- veth --- 198.18.2.2 [ t2 ]
//!                             holdfastd AS65000, hold_time 3 on both sessions (passive)
//! ```
//!
//! Checks:
//! * hold time 3 is negotiated with both testers;
//! * the injector streams HOLDFAST_LOAD_ROUTES (default 1,000,000) routes of the
//!   packed workload; the monitor ends up holding all of them, and holdfastd
//!   reports that many prefixes received from the injector;
//! * during the whole run neither tester receives a NOTIFICATION or sees its
//!   connection closed, and holdfastd's sessions stay Established;
//! * the longest silence from holdfastd (max_gap) on both sessions stays below
//!   the 3 s hold time (what a real peer's hold timer would enforce); the
//!   monitor's max_gap and the load time are printed.
//!
//! HOLDFAST_LOAD_KIND=realistic switches to the realistic workload.
//! Bounded by HOLDFAST_LOAD_DEADLINE seconds (default 120 in release, 600 in dev).

use crate::robust_common;

use holdfast_lab::{skip_unless_ready, wait_until};
use holdfast_tester::workload::{generate, prefix_count, Kind};
use robust_common::*;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

const T: Duration = Duration::from_secs(20);

fn env_num(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.replace('_', "").parse().ok())
        .unwrap_or(default)
}

#[test]
fn hold_time_under_full_table_load() {
    if skip_unless_ready(&[]) {
        return;
    }
    let n = env_num("HOLDFAST_LOAD_ROUTES", 1_000_000) as usize;
    let deadline_s = env_num(
        "HOLDFAST_LOAD_DEADLINE",
        if cfg!(debug_assertions) { 600 } else { 120 },
    );
    let mut s = setup("hold_time_load", 2);
    let (si, sm) = (s.sides[0].clone(), s.sides[1].clone());
    let cfg = format!(
        "{}{}{}",
        global_block("hold_time = 3"),
        neighbor_block(&si, 65001, ""),
        neighbor_block(&sm, 65002, "")
    );
    let d = start_holdfastd(&mut s, &cfg);
    let mut ci = tester_cfg(65001, 1);
    ci.hold_time = 3;
    let mut cm = tester_cfg(65002, 2);
    cm.hold_time = 3;
    let mon = connect(&sm, &cm, T);
    let inj = Arc::new(connect(&si, &ci, T));
    for (side, who) in [(&si, "injector"), (&sm, "monitor")] {
        let info = d.wait_established(side.ip, T).unwrap();
        assert_eq!(info.hold_time, 3, "{who}: negotiated hold time");
    }
    let nh = match si.ip {
        IpAddr::V4(a) => a,
        _ => unreachable!(),
    };
    let kind: Kind = std::env::var("HOLDFAST_LOAD_KIND")
        .ok()
        .map(|k| k.parse().unwrap())
        .unwrap_or(Kind::Packed);
    let w = generate(kind, n, 65001, nh);
    let n = prefix_count(&w);
    let mut bytes = Vec::new();
    holdfast_tester::encode_routes(&w, &inj.ctx, &mut bytes);
    drop(w);
    println!("encoded {n} routes in {} bytes", bytes.len());

    let start = Instant::now();
    let sender = {
        let inj = inj.clone();
        std::thread::spawn(move || inj.send_stream(&bytes))
    };
    let deadline = start + Duration::from_secs(deadline_s);
    let check = |why: &str| {
        for (t, who) in [(&*inj, "injector"), (&mon, "monitor")] {
            t.view(|v| {
                assert!(
                    v.notifications.is_empty(),
                    "{why}: {who} got NOTIFICATION {:?}",
                    v.notifications
                );
                assert!(!v.closed, "{why}: {who}'s connection closed");
                assert!(
                    v.errors.is_empty(),
                    "{why}: {who} decode errors {:?}",
                    v.errors.first()
                );
            });
        }
    };
    let mut last_print = Instant::now();
    let (mut last_count, mut last_progress) = (0usize, Instant::now());
    loop {
        check("during the load");
        let have = mon.route_count();
        if have >= n {
            break;
        }
        if have != last_count {
            (last_count, last_progress) = (have, Instant::now());
        }
        if last_print.elapsed() > Duration::from_secs(10) {
            println!(
                "{:>6.1}s: monitor holds {have}/{n}",
                start.elapsed().as_secs_f64()
            );
            last_print = Instant::now();
        }
        // Stalled: the injector is done and nothing has moved for 20 s.
        if sender.is_finished() && last_progress.elapsed() > Duration::from_secs(20) {
            let info = d.neighbor(si.ip).ok().flatten();
            panic!(
                "stalled: monitor holds {have} of {n}; holdfastd about the injector: {info:?}\nlog tail:\n{}",
                d.log_text(&s.lab)
                    .lines()
                    .filter(|l| !l.contains("DEBUG"))
                    .rev()
                    .take(15)
                    .collect::<Vec<_>>()
                    .join("\n")
            );
        }
        assert!(
            Instant::now() < deadline,
            "monitor holds only {have} of {n} routes after {deadline_s} s"
        );
        let _ = mon.wait("progress", Duration::from_millis(500), |v| {
            v.routes.len() >= n || v.closed
        });
    }
    let elapsed = start.elapsed();
    sender
        .join()
        .expect("sender thread")
        .expect("injector stream");
    let info = wait_until(
        "holdfastd counts every prefix from the injector",
        Duration::from_secs(30),
        || d.neighbor(si.ip),
        |i| {
            i.as_ref()
                .is_some_and(|i| i.prefixes_received as usize == n)
        },
    )
    .unwrap()
    .unwrap();
    assert_eq!(info.state, "Established");
    assert_eq!(d.neighbor(sm.ip).unwrap().unwrap().state, "Established");
    // A few more keepalive periods after the load, then the final verdict.
    std::thread::sleep(Duration::from_secs(2));
    check("after the load");
    let (gap_m, gap_i) = (mon.view(|v| v.max_gap), inj.view(|v| v.max_gap));
    println!(
        "hold_time_load ({kind}): {n} routes in {:.2} s; max_gap monitor {} ms, injector {} ms",
        elapsed.as_secs_f64(),
        gap_m.as_millis(),
        gap_i.as_millis()
    );
    assert!(
        gap_m < Duration::from_secs(3),
        "monitor: holdfastd silent for {gap_m:?} (hold time 3 s)"
    );
    assert!(
        gap_i < Duration::from_secs(3),
        "injector: holdfastd silent for {gap_i:?} (hold time 3 s)"
    );
    drop(mon);
    drop(inj);
    let mut lab = s.lab;
    d.stop(&mut lab);
    lab.teardown();
}
