//! The joint unit (issue 11, TENSOR §3.2.4): two units, each serving one
//! peer AS, share global best-path information through a joint unit over
//! iBGP; all three are NSR-protected, and a takeover of any of them changes
//! nothing that either external peer or the other units can see.
//!
//! ```text
//!   frr (AS 65001) .1 --eBGP-- edge_a .10 --iBGP--+
//!                                                 joint .12 (route reflector)
//!   bird2 (AS 65002) .5 --eBGP-- edge_b .11 --iBGP-+
//!
//!   units in containers on hosts a, b, c (`holdfast_lab::plane`):
//!   edge_a a->b, edge_b b->c, joint c->a; controllers on etcd, agents
//! ```
//!
//! Checked:
//! 1. frr and bird2 Established with their unit; edge_a and edge_b
//!    Established with joint; frr learns bird2's route and bird2 frr's
//!    (through the joint unit);
//! 2. **global best path**: 198.51.100.0/24 is announced by frr (path
//!    65001) and by bird2 (prepended: 65002 65002 65002); bird2 receives
//!    from edge_b the globally best path, frr's (AS path 65000 65001), not
//!    its own;
//! 3. for each unit in turn (edge_a, edge_b, joint): its holdfastd is
//!    SIGKILLed, the controller localizes the application failure and
//!    migrates the unit; frr and bird2 see nothing (counters, uptime,
//!    routes, log), and the other units' iBGP sessions with it (their own
//!    `holdfast show neighbors`) never dropped: same established count,
//!    uptime never back; the routes still flow both ways;
//! 4. **negative control**: the controllers stopped, joint's holdfastd
//!    killed: edge_a and edge_b see their iBGP session with joint drop.

use std::net::IpAddr;
use std::time::{Duration, Instant};

use holdfast_lab::plane::{Plane, PlaneBins, PlaneSpec, PlaneUnitSpec};
use holdfast_lab::{Peer, PeerKind, RouteSpec, Signal};
use serde_json::Value;

const LONG: Duration = Duration::from_secs(30);

fn ready() -> Option<PlaneBins> {
    PlaneBins::ready(&[PeerKind::Frr, PeerKind::Bird, PeerKind::Gobgp], &[])
}

fn unit(name: &str, primary: &str, backup: &str, peers: &[&str]) -> PlaneUnitSpec {
    PlaneUnitSpec {
        name: name.into(),
        primary: primary.into(),
        backup: backup.into(),
        routes: 5,
        app_failure: None,
        peers: peers.iter().map(|s| s.to_string()).collect(),
    }
}

/// A unit's sessions as it shows them (`holdfast show neighbors --json`):
/// `(address, established_count, uptime)`.
fn neighbors(p: &Plane, unit: &str) -> Vec<(String, u64, u64)> {
    let (host, _) = p.placement(unit).expect("placement");
    let sock = p.host(&host).work_dir.join(unit).join("holdfastd.sock");
    let out = std::process::Command::new(&p.bins.holdfast)
        .args([
            "--socket",
            &sock.to_string_lossy(),
            "--json",
            "show",
            "neighbors",
        ])
        .output()
        .expect("holdfast show neighbors");
    let v: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
    let list = v["ok"]["neighbors"]
        .as_array()
        .or_else(|| v["ok"].as_array())
        .cloned()
        .unwrap_or_default();
    list.iter()
        .map(|n| {
            (
                n["address"].as_str().unwrap_or_default().to_string(),
                n["established_count"].as_u64().unwrap_or(0),
                n["uptime_secs"].as_u64().unwrap_or(0),
            )
        })
        .collect()
}

/// The iBGP sessions the other units hold with `unit`'s address.
fn ibgp_with(p: &Plane, unit: &str, others: &[&str]) -> Vec<(String, u64, u64)> {
    let addr = p.unit(unit).service.to_string();
    others
        .iter()
        .flat_map(|o| {
            neighbors(p, o)
                .into_iter()
                .filter(|(a, _, _)| *a == addr)
                .map(move |(_, e, u)| (o.to_string(), e, u))
        })
        .collect()
}

/// bird2's and frr's routes for `prefix` from their unit.
fn route_path(p: &Plane, bird: bool, prefix: &str) -> Option<Vec<u32>> {
    let (peer, unit): (&dyn holdfast_lab::Peer, &str) = if bird {
        (p.others[0].as_ref(), "edge_b")
    } else {
        (&p.frr, "edge_a")
    };
    let n = IpAddr::V4(p.unit(unit).service);
    peer.received_routes(&p.lab, n)
        .ok()?
        .into_iter()
        .find(|r| r.prefix == prefix)
        .map(|r| r.as_path)
}

fn wait_path(p: &Plane, bird: bool, prefix: &str, path: &[u32]) {
    holdfast_lab::wait_for_every(
        &format!(
            "{} holds {prefix} with path {path:?}",
            if bird { "bird" } else { "frr" }
        ),
        LONG,
        Duration::from_millis(200),
        || Ok((route_path(p, bird, prefix).as_deref() == Some(path)).then_some(())),
    )
    .unwrap_or_else(|e| panic!("{e}"));
}

#[test]
fn a_joint_unit_shares_best_paths_and_every_takeover_is_unseen() {
    let Some(bins) = ready() else { return };
    let spec = PlaneSpec {
        hosts: vec!["a".into(), "b".into(), "c".into()],
        units: vec![
            unit("edge_a", "a", "b", &["frr", "unit:joint"]),
            unit("edge_b", "b", "c", &["bird", "unit:joint"]),
            unit("joint", "c", "a", &["rr-client:edge_a", "rr-client:edge_b"]),
        ],
        controller_args: vec![],
        more_peers: true,
        no_probes: false,
    };
    let mut p = Plane::up("joint_unit", &spec, bins).expect("plane");
    p.wait_established(Duration::from_secs(60))
        .unwrap_or_else(|e| panic!("{e}"));
    p.wait_leader(4, LONG).unwrap_or_else(|e| panic!("{e}"));
    for (u, h) in [("edge_a", "a"), ("edge_b", "b"), ("joint", "c")] {
        p.wait_protected(u, h, LONG)
            .unwrap_or_else(|e| panic!("{e}"));
    }
    // 1. Routes flow through the joint unit.
    wait_path(&p, false, "203.0.118.0/24", &[65000, 65002]);
    wait_path(&p, true, "203.0.113.0/24", &[65000, 65001]);
    println!("1. frr learns bird2's route and bird2 frr's, through joint");

    // 2. Global best path.
    p.frr
        .announce(&p.lab, &[RouteSpec::new("198.51.100.0/24")])
        .expect("frr announces");
    let mut both = RouteSpec::new("198.51.100.0/24");
    both.as_path = vec![65002, 65002];
    p.others[0]
        .announce(&p.lab, &[both])
        .expect("bird announces");
    wait_path(&p, true, "198.51.100.0/24", &[65000, 65001]);
    println!("2. bird2 receives 198.51.100.0/24 with frr's path (65000 65001): the global best");

    // 3. A takeover of each unit.
    let all = ["edge_a", "edge_b", "joint"];
    for u in all {
        let (host, _) = p.placement(u).expect("placement");
        let others: Vec<&str> = all.iter().copied().filter(|x| *x != u).collect();
        let before = ibgp_with(&p, u, &others);
        let w = p.watch(false).expect("watch");
        let t = Instant::now();
        p.kill_unit(u, &host).expect("kill");
        p.wait_verdict("application", u, LONG)
            .unwrap_or_else(|e| panic!("{e}"));
        let to = p
            .wait_moved_off(u, &[host.as_str()], LONG)
            .unwrap_or_else(|e| panic!("{e}"));
        p.wait_protected(u, &to, LONG)
            .unwrap_or_else(|e| panic!("{e}"));
        let took = t.elapsed();
        let s = w
            .check(&p, Duration::from_secs(2))
            .unwrap_or_else(|e| panic!("{u}: {e}"));
        let after = ibgp_with(&p, u, &others);
        assert_eq!(before.len(), after.len(), "{u}: {before:?} -> {after:?}");
        for ((o, e0, up0), (_, e1, up1)) in before.iter().zip(&after) {
            assert_eq!(e0, e1, "{o}'s iBGP session with {u} was re-established");
            assert!(
                up1 + 1 >= *up0,
                "{o}'s iBGP uptime with {u} went back: {up0} -> {up1}"
            );
        }
        wait_path(&p, true, "198.51.100.0/24", &[65000, 65001]);
        wait_path(&p, false, "203.0.118.0/24", &[65000, 65002]);
        println!("3. {u}: {host} -> {to} in {took:?}; peers: {s}; other units' iBGP: {after:?}");
    }

    // 4. Negative control: no controller, joint killed.
    for i in 0..p.controllers.len() {
        let proc = p.controllers[i].0;
        p.lab.kill(proc, Signal::Kill);
    }
    let (host, _) = p.placement("joint").expect("placement");
    let before = ibgp_with(&p, "joint", &["edge_a", "edge_b"]);
    p.kill_unit("joint", &host).expect("kill joint");
    holdfast_lab::wait_for_every(
        "edge_a and edge_b see their iBGP session with joint drop",
        Duration::from_secs(20),
        Duration::from_millis(200),
        || {
            let now = ibgp_with(&p, "joint", &["edge_a", "edge_b"]);
            Ok((now.len() == before.len()
                && now
                    .iter()
                    .zip(&before)
                    .all(|((_, e1, up1), (_, e0, up0))| e1 != e0 || *up1 < *up0))
            .then_some(()))
        },
    )
    .unwrap_or_else(|e| panic!("{e}"));
    println!("4. negative control: with no controller, edge_a and edge_b saw their session with joint drop");
}
