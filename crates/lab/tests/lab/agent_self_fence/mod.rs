//! A host agent that loses its etcd lease fences its own units before the
//! lease can expire (issue 11; Patroni's watchdog), when another host
//! agent still renews (so etcd works and the controller may move them).
//!
//! ```text
//!   host e1     host e2     host e3     host h                   host g
//!   etcd-e1     etcd-e2     etcd-e3     holdfast-agent --host h  holdfast-agent --host g
//!   192.0.2.1   192.0.2.2   192.0.2.3   .4, unit u1: a real      .5, no units
//!        \___________|___________|______  holdfastd  ____________/
//!                  bridge "agt" (own namespace); both agents serve
//!                  the failsafe on :50052
//! ```
//!
//! Lease TTL 3 s, renewed every 500 ms, fence margin 1.5 s. Checked:
//! 1. the agent holds a lease: `etcdctl get /holdfast/default/agents/h`
//!    shows its key, attached to a lease `etcdctl lease timetolive` knows;
//!    the unit's holdfastd runs (its control socket answers `holdfast
//!    show summary`); h knows g as its failsafe peer;
//! 2. **negative control**: with etcd healthy for 4 s (longer than the
//!    TTL), the unit keeps running and renewals keep being acknowledged;
//! 3. h cut off from etcd (its packets to port 2379 dropped) while g
//!    renews: g refuses h's failsafe rounds ("g renews its lease"), and
//!    the agent fences the unit (its process is gone) before the lease
//!    could expire: the time from the send of the last acknowledged
//!    renewal to the fence is at most TTL − margin plus one loop tick, so
//!    below the TTL;
//! 4. etcd reachable again: the agent is granted a new lease and its key
//!    is back in etcd, and the unit stays fenced (a fenced unit is the
//!    controller's to place again).
//!
//! (With quorum lost, every agent cannot renew and the units are kept:
//! `etcd_quorum_loss`.)

use std::net::IpAddr;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use holdfast_lab::plane::{make_certs, tls_args, PlaneBins};
use holdfast_lab::{
    find_binary, hold_for, skip, skip_unless_ready, skip_unless_tools, wait_for_every, Etcd,
    HostId, IfAddr, Lab,
};
use serde_json::Value;

const TTL_MS: u64 = 3000;
const MARGIN_MS: u64 = 1500;

fn status(path: &PathBuf) -> Option<Value> {
    std::fs::read_to_string(path)
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok())
}

/// Starts `holdfast-agent --host NAME` on `host` (lease TTL 3 s, renewals
/// every 500 ms, margin 1.5 s, the failsafe served on `listen`), with `unit`
/// to start at boot; its directory is `agent-NAME` in the work directory.
fn spawn_agent(
    lab: &mut Lab,
    (host, name, listen): (HostId, &str, &str),
    eps: &str,
    (agent, holdfastd): &(String, String),
    certs: &std::path::Path,
    unit: Option<&str>,
) -> holdfast_lab::ProcId {
    let dir = lab.work_dir().join(format!("agent-{name}"));
    let (wd, st) = (
        dir.join("units").display().to_string(),
        dir.join("status.json").display().to_string(),
    );
    let (ttl, margin) = (TTL_MS.to_string(), MARGIN_MS.to_string());
    let mut argv: Vec<&str> = vec![
        agent,
        "--host",
        name,
        "--etcd",
        eps,
        "--holdfastd",
        holdfastd,
        "--work-dir",
        &wd,
        "--status-file",
        &st,
        "--lease-ttl-ms",
        &ttl,
        "--renew-ms",
        "500",
        "--margin-ms",
        &margin,
        "--failsafe-listen",
        listen,
    ];
    let tls = tls_args(certs, "agent", name);
    argv.extend(tls.iter().map(String::as_str));
    if let Some(u) = unit {
        argv.extend(["--unit", u]);
    }
    lab.spawn(
        host,
        &format!("agent-{name}"),
        &argv,
        &[("RUST_LOG", "info")],
    )
    .expect("agent")
}

fn pid_alive(pid: u64) -> bool {
    std::path::Path::new(&format!("/proc/{pid}")).exists()
}

#[test]
fn an_agent_cut_off_from_etcd_fences_its_units_first() {
    if skip_unless_ready(&[]) || skip_unless_tools(&["etcd", "etcdctl"]) {
        return;
    }
    let (agent_bin, hf_bin) = match (
        find_binary("holdfast-agent", "HOLDFAST_AGENT_BIN"),
        find_binary("holdfastd", "HOLDFASTD"),
    ) {
        (Ok(a), Ok(h)) => (a, h),
        (Err(e), _) | (_, Err(e)) => {
            skip(&format!("{e}"));
            return;
        }
    };
    let plane_bins = match PlaneBins::find() {
        Ok(b) => b,
        Err(e) => {
            skip(&format!("{e}"));
            return;
        }
    };
    let mut lab = Lab::new("agent_self_fence").expect("lab");
    let mut hosts: Vec<HostId> = Vec::new();
    let mut members = Vec::new();
    let mut ports = Vec::new();
    for (i, name) in ["e1", "e2", "e3", "h", "g"].iter().enumerate() {
        let h = lab.host(name).expect("host");
        let a: IpAddr = [192, 0, 2, i as u8 + 1].into();
        if i < 3 {
            members.push((h, a));
        }
        ports.push((h, vec![IfAddr::new(a, 24)]));
        hosts.push(h);
    }
    lab.bridge("agt", &ports).expect("bridge");
    let etcd = Etcd::start(&mut lab, &members).expect("etcd cluster");
    // The agents' failsafe over mutual TLS, as by default (issue 30).
    let certs = lab.work_dir().join("certs");
    make_certs(
        &plane_bins,
        &certs,
        &["h".into(), "g".into()],
        &["c1".into()],
        &[],
    )
    .expect("certificates");

    // The unit: a holdfastd with no neighbours.
    let work = lab.work_dir().join("agent-h");
    std::fs::create_dir_all(&work).unwrap();
    let unit_cfg = work.join("u1.toml");
    std::fs::write(
        &unit_cfg,
        "[global]\nasn = 65000\nrouter_id = \"192.0.2.4\"\n",
    )
    .unwrap();
    let status_file = work.join("status.json");
    let eps = etcd.endpoints();
    let unit = format!("u1={}", unit_cfg.display());
    let bins = (
        agent_bin.to_string_lossy().to_string(),
        hf_bin.to_string_lossy().to_string(),
    );
    let agent = spawn_agent(
        &mut lab,
        (hosts[3], "h", "192.0.2.4:50052"),
        &eps,
        &bins,
        &certs,
        Some(&unit),
    );
    spawn_agent(
        &mut lab,
        (hosts[4], "g", "192.0.2.5:50052"),
        &eps,
        &bins,
        &certs,
        None,
    );

    // 1. A lease, the key in etcd, the unit running.
    let s = wait_for_every(
        "the agent holds a lease and runs u1",
        Duration::from_secs(20),
        Duration::from_millis(50),
        || {
            Ok(status(&status_file).filter(|s| {
                s["lease"].is_i64()
                    && s["units"].as_array().is_some_and(|u| u.len() == 1)
                    && s["failsafe_peers"] == serde_json::json!(["g"])
            }))
        },
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let lease = s["lease"].as_i64().unwrap();
    let pid = s["units"][0][1].as_u64().expect("unit pid");
    assert!(pid_alive(pid));
    let got = etcd
        .ctl(
            &mut lab,
            &["get", "/holdfast/default/agents/h", "-w", "json"],
        )
        .expect("etcdctl get");
    let v: Value = serde_json::from_str(&got).expect("etcdctl json");
    assert_eq!(
        v["kvs"][0]["lease"].as_i64(),
        Some(lease),
        "the agent's key is on its lease: {got}"
    );
    let ttl = etcd
        .ctl(&mut lab, &["lease", "timetolive", &format!("{lease:x}")])
        .expect("etcdctl lease timetolive");
    assert!(ttl.contains("remaining"), "{ttl}");
    let sock = work.join("units/u1/holdfastd.sock");
    wait_for_every(
        "u1's control socket answers",
        Duration::from_secs(10),
        Duration::from_millis(50),
        || {
            Ok(std::os::unix::net::UnixStream::connect(&sock)
                .ok()
                .map(drop))
        },
    )
    .unwrap_or_else(|e| panic!("{e}"));
    println!("1. lease {lease:x}, u1 pid {pid}; etcdctl: {}", ttl.trim());

    // 2. Negative control: longer than the TTL with etcd healthy.
    let before = status(&status_file).unwrap()["renewed_at_ms"]
        .as_u64()
        .unwrap();
    hold_for(Duration::from_millis(TTL_MS + 1000), || {});
    let s = status(&status_file).unwrap();
    assert!(pid_alive(pid), "u1 runs while the lease is renewed");
    assert!(s["self_fenced_at_ms"].is_null(), "{s}");
    let after = s["renewed_at_ms"].as_u64().unwrap();
    assert!(
        after > before + 3000,
        "renewals acknowledged: {before} -> {after}"
    );
    println!(
        "2. negative control: 4 s with etcd healthy, u1 alive, renewed at {before} -> {after} ms"
    );

    // 3. h cut off from etcd; g still renews.
    let cut = ["OUTPUT", "-p", "tcp", "--dport", "2379", "-j", "DROP"];
    let t0 = Instant::now();
    lab.exec_ok(hosts[3], &[&["iptables", "-I"], &cut[..]].concat())
        .expect("cut h off from etcd");
    let fenced = wait_for_every(
        "the agent fences u1",
        Duration::from_secs(10),
        Duration::from_millis(10),
        || Ok((!pid_alive(pid)).then(Instant::now)),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let s = wait_for_every(
        "the status shows the self-fence",
        Duration::from_secs(5),
        Duration::from_millis(20),
        || Ok(status(&status_file).filter(|s| s["self_fenced_at_ms"].is_u64())),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let renewed = s["renewed_at_ms"].as_u64().unwrap();
    let at = s["self_fenced_at_ms"].as_u64().unwrap();
    let gap = at - renewed;
    println!(
        "3. h cut off from etcd: u1 fenced {:?} after the cut, {gap} ms after the last acknowledged renewal was sent (TTL {TTL_MS} ms, margin {MARGIN_MS} ms); failsafe refused: {}",
        fenced - t0,
        s["failsafe_refused"]
    );
    assert_eq!(
        s["failsafe_refused"], "g renews its lease",
        "g refused h's failsafe rounds: {s}"
    );
    assert!(
        gap <= TTL_MS - MARGIN_MS + 50,
        "fenced {gap} ms after the last renewal: later than TTL - margin"
    );
    assert!(gap < TTL_MS, "fenced before the lease could expire");
    let log = std::fs::read_to_string(lab.proc_logs(agent).1).unwrap_or_default();
    assert!(log.contains("fencing every unit"), "agent log:\n{log}");

    // 4. etcd reachable again: a new lease, the key back, u1 still fenced.
    lab.exec_ok(hosts[3], &[&["iptables", "-D"], &cut[..]].concat())
        .expect("h reaches etcd again");
    let s = wait_for_every(
        "a new lease",
        Duration::from_secs(30),
        Duration::from_millis(100),
        || Ok(status(&status_file).filter(|s| s["lease"].as_i64().is_some_and(|l| l != lease))),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let new = s["lease"].as_i64().unwrap();
    let got = etcd
        .ctl(
            &mut lab,
            &["get", "/holdfast/default/agents/h", "-w", "json"],
        )
        .expect("etcdctl get");
    let v: Value = serde_json::from_str(&got).expect("json");
    assert_eq!(v["kvs"][0]["lease"].as_i64(), Some(new), "{got}");
    assert!(
        s["units"].as_array().is_some_and(Vec::is_empty),
        "u1 stays fenced: {s}"
    );
    println!("4. etcd reachable again: new lease {new:x}, key back, u1 stays fenced");
    etcd.stop(&mut lab);
}
