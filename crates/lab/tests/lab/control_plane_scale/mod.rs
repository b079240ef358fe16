//! The control plane at scale (issue 11): a host carrying 16 units fails,
//! a host carrying 8 units is drained, and two hosts fail at once; frr,
//! the peer of every unit, sees nothing.
//!
//! ```text
//!   the plane of `holdfast_lab::plane`: frr .1, redis .2, hosts a b c,
//!   the agent server s, three controllers on etcd (management bridge)
//!
//!   mass_migration: 16 units, primary a, backups alternating b and c
//!   two_hosts: u1 on a and u2 on b, both backed up on c
//! ```
//!
//! `a_host_with_16_units_fails_and_a_host_with_8_is_drained`:
//! 1. every unit PROTECTED, frr Established with all 16, 10 routes each;
//! 2. **host failure** of a (every process killed, links down): a `host`
//!    verdict for a; every unit resumed on its backup (its agent runs it and
//!    it is PROTECTED there): the time until the last one resumed is the
//!    mass-migration figure; frr: no session's counters, uptime or routes
//!    changed, no NOTIFICATION;
//! 3. **drain** of b (8 units): `holdfast ctl drain b --wait 120` moves
//!    each by planned switchover to c; none is left on b; frr saw nothing;
//! 4. **upgrade** of c (all 16 units now) to a copy of holdfastd at another
//!    path: `holdfast ctl upgrade --host c --binary PATH --wait 300` moves
//!    the units one at a time, each through a standby of PATH on b; every
//!    unit's placement names PATH; frr saw nothing; the time a unit takes
//!    is printed.
//!
//! `two_hosts_fail_at_once`: a and b fail in the same instant: two `host`
//! verdicts, u1 and u2 both resume on c, frr saw nothing.

use std::time::{Duration, Instant};

use holdfast_lab::plane::{Plane, PlaneBins, PlaneSpec, PlaneUnitSpec};
use holdfast_lab::PeerKind;

fn ready() -> Option<PlaneBins> {
    PlaneBins::ready(&[PeerKind::Frr], &[])
}

fn unit(name: String, primary: &str, backup: &str) -> PlaneUnitSpec {
    PlaneUnitSpec {
        name,
        primary: primary.into(),
        backup: backup.into(),
        routes: 10,
        app_failure: None,
        peers: vec![],
    }
}

const LONG: Duration = Duration::from_secs(60);

fn hosts() -> Vec<String> {
    vec!["a".into(), "b".into(), "c".into()]
}

/// Waits until every unit in `units` runs off `from` and is PROTECTED
/// there; returns where each went.
fn wait_all_moved(p: &Plane, units: &[String], from: &[&str]) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for u in units {
        let to = p
            .wait_moved_off(u, from, LONG)
            .unwrap_or_else(|e| panic!("{e}"));
        p.wait_protected(u, &to, LONG)
            .unwrap_or_else(|e| panic!("{e}"));
        out.push((u.clone(), to));
    }
    out
}

#[test]
fn a_host_with_16_units_fails_and_a_host_with_8_is_drained() {
    let Some(bins) = ready() else { return };
    let names: Vec<String> = (1..=16).map(|i| format!("m{i}")).collect();
    let spec = PlaneSpec {
        hosts: hosts(),
        units: names
            .iter()
            .enumerate()
            .map(|(i, n)| unit(n.clone(), "a", if i % 2 == 0 { "b" } else { "c" }))
            .collect(),
        controller_args: vec![],
        more_peers: false,
        no_probes: false,
    };
    let mut p = Plane::up("control_plane_scale", &spec, bins).expect("plane");
    p.wait_established(Duration::from_secs(120))
        .unwrap_or_else(|e| panic!("{e}"));
    p.wait_leader(4, LONG).unwrap_or_else(|e| panic!("{e}"));
    for u in &names {
        p.wait_protected(u, "a", LONG)
            .unwrap_or_else(|e| panic!("{e}"));
    }
    println!("1. 16 units on a PROTECTED; frr Established with each");

    // 2. Host failure of a.
    let w = p.watch(false).expect("watch");
    let t = Instant::now();
    p.fail_host("a").expect("fail a");
    let v = p
        .wait_verdict("host", "a", LONG)
        .unwrap_or_else(|e| panic!("{e}"));
    let detected = t.elapsed();
    let moved = wait_all_moved(&p, &names, &["a"]);
    let all = t.elapsed();
    let on_b: Vec<String> = moved
        .iter()
        .filter(|(_, h)| h == "b")
        .map(|(u, _)| u.clone())
        .collect();
    println!(
        "2. host a failed: verdict after {detected:?} ({} ms from the first bad measurement); all 16 resumed and PROTECTED {all:?} after the failure; {} on b, {} on c",
        v["detection_ms"],
        on_b.len(),
        16 - on_b.len()
    );
    assert_eq!(on_b.len(), 8, "TRIPOD's placement spread them: {moved:?}");
    let s = w
        .check(&p, Duration::from_secs(2))
        .unwrap_or_else(|e| panic!("2: {e}"));
    println!("   frr: {s}");

    // 3. Drain b (8 units) by planned switchover.
    let w = p.watch(false).expect("watch");
    let t = Instant::now();
    let done = p
        .ctl(&["drain", "b", "--wait", "120"])
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(done["done"], true, "{done}");
    let moved = wait_all_moved(&p, &on_b, &["b"]);
    println!(
        "3. holdfast ctl drain b: 8 units moved in {:?}: {moved:?}",
        t.elapsed()
    );
    assert!(moved.iter().all(|(_, h)| h == "c"), "{moved:?}");
    let s = w
        .check(&p, Duration::from_secs(2))
        .unwrap_or_else(|e| panic!("3: {e}"));
    println!("   frr: {s}");

    // 4. Upgrade of c (all 16 units) to another binary, one unit at a time.
    let bin = p
        .lab
        .place_build(std::path::Path::new(&p.bins.holdfastd), "next")
        .expect("builds/next")
        .display()
        .to_string();
    let w = p.watch(false).expect("watch");
    let t = Instant::now();
    let done = p
        .ctl(&["upgrade", "--host", "c", "--binary", &bin, "--wait", "300"])
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(done["done"], true, "{done}");
    let took = t.elapsed();
    let moved = wait_all_moved(&p, &names, &["c"]);
    println!(
        "4. holdfast ctl upgrade --host c: {} units on {bin} in {took:?} ({:?} a unit): {moved:?}",
        names.len(),
        took / names.len() as u32
    );
    let units = p.ctl(&["units"]).expect("holdfast ctl units");
    for u in &names {
        let rec = units
            .as_array()
            .and_then(|a| a.iter().find(|r| r["unit"] == *u))
            .unwrap_or_else(|| panic!("no {u} in {units}"));
        assert_eq!(rec["binary"], bin, "{u}: {rec}");
    }
    let s = w
        .check(&p, Duration::from_secs(2))
        .unwrap_or_else(|e| panic!("4: {e}"));
    println!("   frr: {s}");
}

#[test]
fn two_hosts_fail_at_once() {
    let Some(bins) = ready() else { return };
    let spec = PlaneSpec {
        hosts: hosts(),
        units: vec![unit("u1".into(), "a", "c"), unit("u2".into(), "b", "c")],
        controller_args: vec![],
        more_peers: false,
        no_probes: false,
    };
    let mut p = Plane::up("control_plane_two", &spec, bins).expect("plane");
    p.wait_established(LONG).unwrap_or_else(|e| panic!("{e}"));
    p.wait_leader(4, LONG).unwrap_or_else(|e| panic!("{e}"));
    p.wait_protected("u1", "a", LONG)
        .unwrap_or_else(|e| panic!("{e}"));
    p.wait_protected("u2", "b", LONG)
        .unwrap_or_else(|e| panic!("{e}"));
    let w = p.watch(true).expect("watch");
    let t = Instant::now();
    p.fail_host("a").expect("fail a");
    p.fail_host("b").expect("fail b");
    for h in ["a", "b"] {
        let v = p
            .wait_verdict("host", h, LONG)
            .unwrap_or_else(|e| panic!("{e}"));
        println!("   verdict host {h}: {} ms", v["detection_ms"]);
    }
    let moved = wait_all_moved(&p, &["u1".to_string(), "u2".to_string()], &["a", "b"]);
    assert!(moved.iter().all(|(_, h)| h == "c"), "{moved:?}");
    println!(
        "a and b failed together: u1 and u2 resumed on c {:?} after",
        t.elapsed()
    );
    let s = w
        .check(&p, Duration::from_secs(2))
        .unwrap_or_else(|e| panic!("{e}"));
    println!("   frr: {s}");
}
