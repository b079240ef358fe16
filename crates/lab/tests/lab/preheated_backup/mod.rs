//! A preheated backup under the control plane (issue 11, deliverable 4):
//! the leader keeps a standby holdfastd (`--standby`) following the store on
//! the unit's backup host, a takeover goes through it (`holdfast nsr
//! takeover`, no new process), and the new backup host gets a standby
//! after each migration; frr sees nothing.
//!
//! ```text
//!   the plane of `holdfast_lab::plane`: frr .1, redis .2, hosts a and b
//!   (a container of u1 on each), the agent server s, etcd members +
//!   controllers c1 c2 c3
//!
//!   u1: primary a, backup b, `"preheated": true` in its etcd placement
//! ```
//!
//! Checked:
//! 1. with `preheated` set in `units/u1` (etcdctl), agent b runs u1's
//!    standby (its status), and its `holdfast show nsr` says standby;
//! 2. u1 SIGKILLed on a: the controller migrates it to b, where the
//!    standby's own process (same pid) is now the primary, PROTECTED, and
//!    its log shows the takeover it was asked for; frr: no sample off
//!    Established, counters and uptime unbroken, no NOTIFICATION, routes
//!    held;
//! 3. a, now the backup host, gets a new standby of u1; u1 SIGKILLed on b
//!    moves back to a through it (same pid again); frr sees nothing;
//! 4. negative control: with `preheated` off and b's standby killed, no
//!    standby is started on b again, and a kill on a is taken over by a new
//!    process on b (`--takeover`).

use std::time::{Duration, Instant};

use holdfast_lab::plane::{Plane, PlaneBins, PlaneSpec};
use holdfast_lab::{hold_for, wait_for_every, PeerKind};
use serde_json::Value;

const LONG: Duration = Duration::from_secs(60);
const KEY: &str = "/holdfast/default/units/u1";

fn set_preheated(p: &mut Plane, on: bool) {
    let got = p
        .etcd
        .ctl(&mut p.lab, &["get", KEY, "--print-value-only"])
        .expect("etcdctl get");
    let mut rec: Value = serde_json::from_str(got.trim()).expect("unit record");
    rec["preheated"] = Value::Bool(on);
    p.etcd
        .ctl(&mut p.lab, &["put", KEY, &rec.to_string()])
        .expect("etcdctl put");
}

/// The pid of u1's process on `host` once one runs there.
fn wait_runs(p: &Plane, host: &str) -> u64 {
    wait_for_every(
        &format!("u1 runs on {host}"),
        LONG,
        Duration::from_millis(50),
        || Ok(p.unit_pid("u1", host)),
    )
    .unwrap_or_else(|e| panic!("{e}"))
}

fn nsr_role(p: &Plane, host: &str) -> Value {
    let sock = p.host(host).work_dir.join("u1").join("holdfastd.sock");
    let out = std::process::Command::new(&p.bins.holdfast)
        .args(["--socket", &sock.to_string_lossy(), "--json", "show", "nsr"])
        .output()
        .map(|o| o.stdout)
        .unwrap_or_default();
    let v: Value = serde_json::from_slice(&out).unwrap_or(Value::Null);
    v["ok"]["nsr"]["role"].clone()
}

/// Kills u1 on `from` and waits until it runs PROTECTED on `to`; returns
/// its pid there and how long it took.
fn fail_over(p: &Plane, from: &str, to: &str) -> (u64, Duration) {
    let t = Instant::now();
    p.kill_unit("u1", from).expect("kill u1");
    let moved = p
        .wait_moved_off("u1", &[from], LONG)
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(moved, to);
    p.wait_protected("u1", to, LONG)
        .unwrap_or_else(|e| panic!("{e}"));
    (p.unit_pid("u1", to).expect("u1 pid"), t.elapsed())
}

#[test]
fn a_preheated_standby_takes_over_and_follows_the_unit() {
    let Some(bins) = PlaneBins::ready(&[PeerKind::Frr], &[]) else {
        return;
    };
    let spec = PlaneSpec::one_unit(&["a", "b"], false);
    let mut p = Plane::up("preheated_backup", &spec, bins).expect("plane");
    p.wait_established(LONG).unwrap_or_else(|e| panic!("{e}"));
    p.wait_leader(3, LONG).unwrap_or_else(|e| panic!("{e}"));
    p.wait_protected("u1", "a", LONG)
        .unwrap_or_else(|e| panic!("{e}"));

    // 1. A standby on b.
    set_preheated(&mut p, true);
    let standby = wait_runs(&p, "b");
    wait_for_every(
        "b's u1 answers show nsr as a standby",
        LONG,
        Duration::from_millis(100),
        || Ok((nsr_role(&p, "b") == "standby").then_some(())),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    println!("1. u1's preheated standby runs on b (pid {standby})");

    // 2. Through the standby to b.
    let w = p.watch(true).expect("watch");
    let (pid, took) = fail_over(&p, "a", "b");
    assert_eq!(
        pid, standby,
        "the standby itself took over (no new process)"
    );
    let log = std::fs::read_to_string(p.host("b").work_dir.join("u1").join("holdfastd.log"))
        .unwrap_or_default();
    assert!(
        log.contains("standby: takeover requested"),
        "b's log:\n{log}"
    );
    let s = w
        .check(&p, Duration::from_secs(1))
        .unwrap_or_else(|e| panic!("{e}"));
    println!("2. u1 killed on a: the standby on b (pid {pid}) PROTECTED {took:?} after the kill; frr: {s}");

    // 3. A new standby on a, and back through it.
    let standby = wait_runs(&p, "a");
    let w = p.watch(true).expect("watch");
    let (pid, took) = fail_over(&p, "b", "a");
    assert_eq!(pid, standby, "a's standby took over");
    let s = w
        .check(&p, Duration::from_secs(1))
        .unwrap_or_else(|e| panic!("{e}"));
    println!("3. a new standby on a (pid {standby}); u1 killed on b: back on a through it, PROTECTED {took:?} after; frr: {s}");

    // 4. Negative control: preheated off, the standby on b killed.
    set_preheated(&mut p, false);
    let old = wait_runs(&p, "b");
    p.kill_unit("u1", "b").expect("kill b's standby");
    hold_for(Duration::from_secs(3), || {
        assert!(
            p.unit_pid("u1", "b").is_none_or(|x| x == old),
            "no standby is started on b with preheated off"
        );
    });
    assert!(p.unit_pid("u1", "b").is_none(), "the standby is gone");
    let (pid, took) = fail_over(&p, "a", "b");
    assert_ne!(pid, old);
    println!("4. negative control, preheated off: no standby on b; u1 killed on a taken over cold on b (a new process, pid {pid}) {took:?} after");
}
