//! etcd down under a running site (issue 11): one member down changes
//! nothing; with quorum lost no controller can migrate anything, and the
//! host agents keep every running unit (the failsafe: each agent that
//! cannot renew its lease asks every other host agent, and keeps its units
//! only while every one of them cannot renew either and promises not to
//! start them); frr, the peer of every unit, sees nothing.
//!
//! ```text
//!   the plane of `holdfast_lab::plane`: frr .1, redis .2, hosts a b c
//!   (agents with --failsafe-listen on the management bridge, :50052),
//!   the agent server s, etcd members + controllers c1 c2 c3
//!
//!   u1: primary a, backup b        u2: primary b, backup c
//! ```
//!
//! Checked:
//! 1. both units PROTECTED, frr Established with both; each host agent
//!    knows the other two as its failsafe peers (its status file);
//! 2. **one etcd member down** (a follower) for two lease TTLs: every
//!    agent keeps renewing (never in failsafe), the units keep their pids;
//! 3. **quorum lost** (two members down) for 10 s, three lease TTLs: a and
//!    b go into failsafe (their rounds confirmed by the other two agents),
//!    no agent fences anything (no self-fence, the units keep their pids),
//!    no controller leads; frr: every 200 ms sample Established, counters,
//!    uptime and routes unchanged, no NOTIFICATION;
//! 4. **quorum back**: every agent renews again (out of failsafe), a
//!    leader with every agent attached, the units still where and as they
//!    were (same pids, `holdfast ctl units` unchanged), no failure verdict;
//!    then an application failure of u1 is migrated to b as usual (the
//!    plane works again); frr saw nothing through all of it;
//! 5. **negative control**: quorum lost again with c's agent gone. b runs
//!    u1 and u2 and cannot hear from c, so no round of its is confirmed:
//!    it fences both units at the usual deadline (its status: the
//!    self-fence, the refusal naming c), the units' processes are gone.

use std::time::{Duration, Instant};

use holdfast_lab::plane::{verdict_is, Plane, PlaneBins, PlaneSpec, PlaneUnitSpec};
use holdfast_lab::{hold_for, wait_for_every, PeerKind, Signal};
use serde_json::Value;

const LONG: Duration = Duration::from_secs(60);
/// The agents' lease TTL (the plane's default).
const TTL: Duration = Duration::from_secs(3);

fn unit(name: &str, primary: &str, backup: &str) -> PlaneUnitSpec {
    PlaneUnitSpec {
        name: name.into(),
        primary: primary.into(),
        backup: backup.into(),
        routes: 10,
        app_failure: None,
        peers: vec![],
    }
}

fn agent(p: &Plane, host: &str) -> Value {
    std::fs::read_to_string(&p.host(host).status)
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok())
        .unwrap_or(Value::Null)
}

/// The pids of u1 (on a) and u2 (on b), both running.
fn pids(p: &Plane) -> (u64, u64) {
    (
        p.unit_pid("u1", "a").expect("u1 runs on a"),
        p.unit_pid("u2", "b").expect("u2 runs on b"),
    )
}

const FAILURES: [&str; 6] = [
    "application",
    "container",
    "container_network",
    "host",
    "host_network",
    "hung",
];

fn failure_verdicts(p: &Plane) -> Vec<Value> {
    p.verdicts()
        .into_iter()
        .filter(|v| {
            FAILURES.iter().any(|k| {
                ["a", "b", "c", "u1", "u2"]
                    .iter()
                    .any(|s| verdict_is(v, k, s))
            })
        })
        .collect()
}

#[test]
fn etcd_quorum_lost_leaves_every_running_unit_alone() {
    let Some(bins) = PlaneBins::ready(&[PeerKind::Frr], &[]) else {
        return;
    };
    let spec = PlaneSpec {
        hosts: vec!["a".into(), "b".into(), "c".into()],
        units: vec![unit("u1", "a", "b"), unit("u2", "b", "c")],
        controller_args: vec![],
        more_peers: false,
        no_probes: false,
    };
    let mut p = Plane::up("etcd_quorum_loss", &spec, bins).expect("plane");
    p.wait_established(LONG).unwrap_or_else(|e| panic!("{e}"));
    p.wait_leader(4, LONG).unwrap_or_else(|e| panic!("{e}"));
    p.wait_protected("u1", "a", LONG)
        .unwrap_or_else(|e| panic!("{e}"));
    p.wait_protected("u2", "b", LONG)
        .unwrap_or_else(|e| panic!("{e}"));
    for (h, others) in [("a", ["b", "c"]), ("b", ["a", "c"]), ("c", ["a", "b"])] {
        wait_for_every(
            &format!("{h}'s agent knows its failsafe peers {others:?}"),
            LONG,
            Duration::from_millis(100),
            || Ok((agent(&p, h)["failsafe_peers"] == serde_json::json!(others)).then_some(())),
        )
        .unwrap_or_else(|e| panic!("{e}"));
    }
    let (u1, u2) = pids(&p);
    println!("1. u1 on a (pid {u1}), u2 on b (pid {u2}) PROTECTED; every agent knows its peers");

    // 2. One member down: a follower. (The leader's loss stalls every
    // renewal for an election timeout, and every agent rides it out in
    // failsafe, as in step 3.)
    let w = p.watch(true).expect("watch");
    let leader = p.etcd.leader(&mut p.lab).expect("etcd status");
    let down = (0..3)
        .rev()
        .find(|&i| Some(i) != leader)
        .expect("a follower");
    p.etcd.kill(&mut p.lab, down).expect("kill a follower");
    hold_for(2 * TTL, || {
        for h in ["a", "b", "c"] {
            let s = agent(&p, h);
            assert_eq!(s["in_failsafe"], false, "{h}: {s}");
            assert!(s["self_fenced_at_ms"].is_null(), "{h}: {s}");
        }
    });
    assert_eq!(pids(&p), (u1, u2), "one member down moves nothing");
    p.etcd
        .restart(&mut p.lab, down)
        .expect("restart the follower");
    println!("2. one etcd member down for 6 s: renewals go on, nothing moved");

    // 3. Quorum lost.
    let verdicts_before = failure_verdicts(&p).len();
    let t = Instant::now();
    p.etcd.kill(&mut p.lab, 0).expect("kill member 1");
    p.etcd.kill(&mut p.lab, 1).expect("kill member 2");
    for h in ["a", "b"] {
        wait_for_every(
            &format!("{h} in failsafe"),
            Duration::from_secs(10),
            Duration::from_millis(20),
            || Ok((agent(&p, h)["in_failsafe"] == true).then_some(())),
        )
        .unwrap_or_else(|e| panic!("{e}"));
    }
    println!(
        "3. quorum lost: a and b in failsafe {:?} after the kill",
        t.elapsed()
    );
    hold_for(Duration::from_secs(10), || {
        for h in ["a", "b", "c"] {
            let s = agent(&p, h);
            assert!(s["self_fenced_at_ms"].is_null(), "{h} fenced: {s}");
        }
    });
    assert_eq!(pids(&p), (u1, u2), "every unit untouched");
    assert!(
        p.statuses().iter().all(|s| s["role"] != "leader"),
        "no controller leads without quorum: {:?}",
        p.statuses()
    );
    let confirmed: Vec<String> = ["a", "b"]
        .iter()
        .map(|h| {
            format!(
                "{h}: confirmed at {} ms",
                agent(&p, h)["failsafe_confirmed_at_ms"]
            )
        })
        .collect();
    println!(
        "   held {:?}: no agent fenced, u1 and u2 same pids, no leader ({})",
        t.elapsed(),
        confirmed.join(", ")
    );

    // 4. Quorum back.
    let t = Instant::now();
    p.etcd.restart(&mut p.lab, 0).expect("restart member 1");
    p.etcd.restart(&mut p.lab, 1).expect("restart member 2");
    for h in ["a", "b"] {
        wait_for_every(
            &format!("{h} renews again"),
            LONG,
            Duration::from_millis(50),
            || Ok((agent(&p, h)["in_failsafe"] == false).then_some(())),
        )
        .unwrap_or_else(|e| panic!("{e}"));
    }
    let renewing = t.elapsed();
    p.wait_leader(4, LONG).unwrap_or_else(|e| panic!("{e}"));
    println!(
        "4. quorum back: agents renew {renewing:?}, a leader with 4 agents {:?} after the restart",
        t.elapsed()
    );
    // Long enough for any migration a new leader would start to show.
    hold_for(2 * TTL, || {});
    assert_eq!(pids(&p), (u1, u2), "still untouched with quorum back");
    for (u, h) in [("u1", "a"), ("u2", "b")] {
        let (primary, _) = p.placement(u).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(primary, h, "{u} placed where it ran");
    }
    let new = failure_verdicts(&p);
    assert_eq!(new.len(), verdicts_before, "no failure verdict: {new:?}");
    let s = w
        .check(&p, Duration::from_secs(1))
        .unwrap_or_else(|e| panic!("{e}"));
    println!("   units, placements unchanged, no failure verdict; frr: {s}");

    // The plane works again: an application failure is migrated.
    let (moved, s) = p
        .take_over_unseen("u1", "a", LONG, Duration::from_secs(1))
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(moved.to, "b");
    println!("   then u1 killed on a: migrated to b; frr: {s}");

    // 5. Negative control: c's agent gone, then quorum lost.
    let c = p.hosts.iter().position(|h| h.name == "c").expect("host c");
    let proc = p.hosts[c].agent.take().expect("c's agent");
    p.lab.kill(proc, Signal::Kill);
    let on_b = (
        p.unit_pid("u1", "b").expect("u1 on b"),
        p.unit_pid("u2", "b").expect("u2 on b"),
    );
    let t = Instant::now();
    p.etcd.kill(&mut p.lab, 0).expect("kill member 1");
    p.etcd.kill(&mut p.lab, 1).expect("kill member 2");
    let s = wait_for_every(
        "b fences u1 and u2",
        Duration::from_secs(10),
        Duration::from_millis(20),
        || {
            let s = agent(&p, "b");
            Ok((s["self_fenced_at_ms"].is_u64()
                && s["units"].as_array().is_some_and(Vec::is_empty))
            .then_some(s))
        },
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let gap = s["self_fenced_at_ms"].as_u64().unwrap() - s["renewed_at_ms"].as_u64().unwrap();
    println!(
        "5. negative control: c's agent gone, quorum lost: b fenced u1 and u2 {:?} after the kill, {gap} ms after its last renewal ({})",
        t.elapsed(),
        s["failsafe_refused"]
    );
    assert!(
        s["failsafe_refused"]
            .as_str()
            .is_some_and(|r| r.starts_with("c")),
        "the refusal names c: {s}"
    );
    assert!(
        gap < TTL.as_millis() as u64,
        "fenced before the lease could expire"
    );
    for pid in [on_b.0, on_b.1] {
        assert!(
            !std::path::Path::new(&format!("/proc/{pid}")).exists(),
            "pid {pid} fenced"
        );
    }
}
