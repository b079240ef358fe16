//! The control plane end to end (issue 11): a failure found and taken over
//! by the controller through the host agents, with no lab orchestrator in
//! the loop; frr, the peer, sees nothing.
//!
//! ```text
//!                 bridge `lan` 198.18.0.0/24
//!   [ peer ]  .1   frr (AS 65001) --- BGP --- service .10 (holdfastd unit edge-1)
//!   [ redis ] .2   redis-server (the NSR store)
//!   [ a ]     .3   holdfast-agent --host a: starts edge-1 (primary)
//!   [ b ]     .4   holdfast-agent --host b: the backup host (each agent
//!                  probes what the leader's plan names: the other host at
//!                  its `--probe-addr` ADDR:7, and the unit it backs up)
//!   [ c1..c3 ] .31-.33  etcd members + holdfast-controller replicas (Attach on :50051)
//! ```
//!
//! The unit's placement (primary a, backup b, its configuration and
//! service address) is written to etcd with `etcdctl`, as an operator would.
//! Secure as `holdfast lab up` (issue 30): the controllers and the agents
//! over mutual TLS (`holdfast ctl certs init`), the unit's own Redis ACL
//! user.
//! Checked:
//! 1. one controller leads and both agents are attached to it (its status);
//!    frr's session with .10 is Established with the unit's routes;
//! 2. **application failure**: holdfastd on a is SIGKILLed. Agent a reports
//!    the exit, the leader records the failure (its status: unit, from a
//!    to b, why, detection time) and migrates it: fence on a (and the
//!    address removed there), `holdfastd --takeover` on b, the address
//!    added and announced on b. etcd then places edge-1 on b, backup a;
//! 3. frr never noticed: its session never left Established (its CLI
//!    every 100 ms: state, uptime never going back, established and
//!    dropped counters), it logged no NOTIFICATION, and it still holds the
//!    unit's 10 routes;
//! 4. **planned switchover** with the operator's CLI: `holdfast ctl units
//!    --json` shows edge-1 on b with backup a; `holdfast ctl switchover
//!    edge-1 --wait 30` moves it back to a (`holdfast nsr switchover` on b,
//!    `--takeover` on a, the address moved); the old process on b exits by
//!    itself; frr sees nothing (same checks);
//! 5. **host failure** of a (every process in its namespace SIGKILLed —
//!    agent and holdfastd — and its links down): a's lease expires in etcd
//!    (TTL 3 s) or the localizer gives its host verdict (b's agent probes a
//!    and edge-1 on the leader's probe plan; the leader's heartbeat of a
//!    misses), and the leader records a failed (`hosts/failed/a`, shown by
//!    `holdfast ctl hosts --json`) and takes edge-1 over on b; frr again sees
//!    nothing; `holdfast ctl reset a --wait 10` clears the mark and TRIPOD's
//!    placement gives edge-1 its backup on a again (`holdfast ctl units`);
//!    Then a comes back (its stale address removed, a new agent) and
//!    `holdfast ctl drain b --wait 30` moves edge-1 onto it by planned
//!    switchover; frr sees nothing;
//! 6. **negative control**: the same application failure (of the primary,
//!    now on a) with every controller stopped: nobody takes over, and frr
//!    drops the session within its hold time (9 s).

//!
//! A second test, `a_host_network_blip_is_no_failure_but_an_outage_is` (its
//! own lab, the same topology): a's bridge port down for 1 s causes no
//! migration (the unit keeps its pid, the agent does not fence, no
//! verdict), then down for good: a's agent fences its unit 1.5 s after its
//! last renewal, and the controller takes the unit over on b, recording a
//! failed, on whichever comes first: a's lease expiring (3 s) or the
//! localizer's host verdict (b's agent, on the leader's probe plan, misses
//! a and the unit, and the leader's heartbeat of a misses: the 3 s
//! confirmation); the port back
//! up, a's agent holds a new lease but a stays failed (no backup there)
//! until `holdfast ctl reset a`. frr sees nothing in either case.

use std::net::IpAddr;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use holdfast_lab::plane::{make_certs, store_user, tls_args, PlaneBins};
use holdfast_lab::{
    find_binary, hold_for, nsr_config, skip, skip_unless_ready, skip_unless_tools, wait_for_every,
    Etcd, Frr, Lab, NeighborSpec, NsrTopo, Peer, PeerKind, PeerSpec, PeerWatch, ProcId, Redis,
    RouteSpec, SessionState, Signal,
};
use serde_json::Value;

const PEER_AS: u32 = 65001;
const INSTANCE: &str = "edge-1";

struct Bins {
    agent: String,
    controller: String,
    ctl: String,
    holdfastd: String,
    holdfast: String,
}

fn bins() -> Option<Bins> {
    let f = |n: &str, env: &str| find_binary(n, env).map(|p| p.to_string_lossy().to_string());
    match (
        f("holdfast-agent", "HOLDFAST_AGENT_BIN"),
        f("holdfast-controller", "HOLDFAST_CONTROLLER_BIN"),
        f("holdfast-ctl", "HOLDFAST_CTL_BIN"),
        f("holdfastd", "HOLDFASTD"),
        f("holdfast", "HOLDFAST_BIN"),
    ) {
        (Ok(agent), Ok(controller), Ok(ctl), Ok(holdfastd), Ok(holdfast)) => Some(Bins {
            agent,
            controller,
            ctl,
            holdfastd,
            holdfast,
        }),
        (Err(e), _, _, _, _)
        | (_, Err(e), _, _, _)
        | (_, _, Err(e), _, _)
        | (_, _, _, Err(e), _)
        | (_, _, _, _, Err(e)) => {
            skip(&format!("{e}"));
            None
        }
    }
}

fn json_file(path: &PathBuf) -> Option<Value> {
    std::fs::read_to_string(path)
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok())
}

struct Plane {
    lab: Lab,
    topo: NsrTopo,
    etcd: Etcd,
    frr: Frr,
    controllers: Vec<(ProcId, PathBuf)>,
    agent_status: Vec<PathBuf>,
    /// Each agent's host, name and arguments (without the boot unit), to
    /// start it again.
    agents: Vec<(holdfast_lab::HostId, String, Vec<String>)>,
    /// Where `holdfast ctl` runs (a control host: it reaches etcd).
    ctl_host: holdfast_lab::HostId,
}

fn up(name: &str, b: &Bins) -> Plane {
    let mut lab = Lab::new(name).expect("lab");
    lab.capture_start().expect("pcap");
    let topo = NsrTopo::build(&mut lab).expect("topology");
    // Secure, as `holdfast lab up` (issue 30): Redis with the unit's own
    // ACL user, mutual TLS between the controllers and the agents.
    let redis =
        Redis::start_acl(&mut lab, topo.redis.id, IpAddr::V4(topo.redis.v4), 6379).expect("redis");
    let (store_user, store_pass) =
        store_user(&lab, &redis, &b.holdfast, &["unit", INSTANCE]).expect("store user");
    let plane_bins = PlaneBins::find().expect("binaries");
    let certs = lab.work_dir().join("certs");
    make_certs(
        &plane_bins,
        &certs,
        &["a".into(), "b".into()],
        &["c1".into(), "c2".into(), "c3".into()],
        &[],
    )
    .expect("certificates");
    let mut members = Vec::new();
    for (i, n) in ["c1", "c2", "c3"].iter().enumerate() {
        let h = topo
            .add_host(&mut lab, n, 31 + i as u8)
            .expect("control host");
        members.push((h.id, IpAddr::V4(h.v4)));
    }
    let etcd = Etcd::start(&mut lab, &members).expect("etcd");
    let eps = etcd.endpoints();
    let mut controllers = Vec::new();
    let mut grpc = Vec::new();
    for (i, (h, addr)) in members.iter().enumerate() {
        let status = lab.work_dir().join(format!("c{}.status.json", i + 1));
        let listen = format!("{addr}:50051");
        grpc.push(format!("http://{listen}"));
        let st = status.to_string_lossy().to_string();
        let name = format!("c{}", i + 1);
        let tls = tls_args(&certs, "controller", &name);
        let mut argv: Vec<&str> = vec![
            &b.controller,
            "--etcd",
            &eps,
            "--name",
            &name,
            "--listen",
            &listen,
            "--status-file",
            &st,
        ];
        argv.extend(tls.iter().map(String::as_str));
        let p = lab
            .spawn(
                *h,
                &format!("controller-{name}"),
                &argv,
                &[("HOLDFAST_LOG", "info")],
            )
            .expect("controller");
        controllers.push((p, status));
    }
    // The unit's configuration: frr as its one neighbour, NSR on the lab's Redis.
    let config = nsr_config(
        &topo,
        &redis.url(),
        INSTANCE,
        &[(IpAddr::V4(topo.peer.v4), PEER_AS)],
        &format!(
            "hold_time = 9\n[[network]]\nprefix = \"100.100.0.0/24\"\ncount = 10\n[nsr]\nstore_user = \"{store_user}\"\nstore_password_file = \"{}\"\n",
            store_pass.display()
        ),
    );
    let cfg_path = lab.work_dir().join("edge-1.toml");
    std::fs::write(&cfg_path, &config).expect("config");
    let placement = serde_json::json!({
        "schema": 1, "unit": "edge-1", "primary": "a", "backup": "b", "epoch": 0,
        "config": config, "addresses": [format!("{}/24", topo.service_v4)], "interface": "",
    });
    etcd.ctl(
        &mut lab,
        &[
            "put",
            "/holdfast/default/units/edge-1",
            &placement.to_string(),
        ],
    )
    .expect("etcdctl put the placement");
    // The primary starts with the service address on a.
    topo.add_service(&lab, topo.a.id)
        .expect("service address on a");
    let mut agent_status = Vec::new();
    let mut agents = Vec::new();
    for (host, boot) in [(&topo.a, true), (&topo.b, false)] {
        let hname = if boot { "a" } else { "b" };
        let dir = lab.work_dir().join(format!("agent-{hname}"));
        std::fs::create_dir_all(&dir).unwrap();
        let status = dir.join("status.json");
        let (st, wd) = (
            status.to_string_lossy().to_string(),
            dir.join("units").to_string_lossy().to_string(),
        );
        let mut args: Vec<String> = [
            b.agent.as_str(),
            "--host",
            hname,
            "--etcd",
            &eps,
            "--holdfastd",
            &b.holdfastd,
            "--work-dir",
            &wd,
            "--status-file",
            &st,
            "--interface",
            &host.ifname,
        ]
        .iter()
        .map(|a| a.to_string())
        .collect();
        for g in &grpc {
            args.extend(["--controller".to_string(), g.clone()]);
        }
        // The leader's probe plan names this host at its data address.
        args.extend(["--probe-addr".to_string(), format!("{}:7", host.v4)]);
        args.extend(tls_args(&certs, "agent", hname));
        agents.push((host.id, hname.to_string(), args.clone()));
        if boot {
            args.extend([
                "--unit".to_string(),
                format!("edge-1={}", cfg_path.display()),
            ]);
        }
        let argv: Vec<&str> = args.iter().map(String::as_str).collect();
        lab.spawn(
            host.id,
            &format!("agent-{hname}"),
            &argv,
            &[("RUST_LOG", "info")],
        )
        .expect("agent");
        agent_status.push(status);
    }
    let spec = PeerSpec::new(PEER_AS, "192.0.2.201".parse().unwrap())
        .neighbor(
            NeighborSpec::new(IpAddr::V4(topo.service_v4), 65000)
                .local(IpAddr::V4(topo.peer.v4))
                .hold_time(9)
                .families(true, false),
        )
        .route(RouteSpec::new("203.0.113.0/24"));
    let frr = Frr::start(&mut lab, topo.peer.id, &spec).expect("frr");
    let ctl_host = members[0].0;
    Plane {
        lab,
        topo,
        etcd,
        frr,
        controllers,
        agent_status,
        agents,
        ctl_host,
    }
}

/// The leader's status, once one leads with both agents attached.
fn leader_with_agents(p: &Plane) -> Value {
    wait_for_every(
        "a leader with both agents attached",
        Duration::from_secs(30),
        Duration::from_millis(100),
        || {
            Ok(p.controllers.iter().find_map(|(_, s)| {
                json_file(s).filter(|v| {
                    v["role"] == "leader" && v["agents"].as_array().is_some_and(|a| a.len() == 2)
                })
            }))
        },
    )
    .unwrap_or_else(|e| panic!("{e}"))
}

fn unit_pid(p: &Plane, agent: usize) -> Option<u64> {
    json_file(&p.agent_status[agent])
        .and_then(|s| s["units"].as_array().and_then(|u| u.first().cloned()))
        .and_then(|u| u[1].as_u64())
}

fn established(p: &Plane) {
    let svc = IpAddr::V4(p.topo.service_v4);
    wait_for_every(
        "frr: session with the unit Established, its 10 routes received",
        Duration::from_secs(60),
        Duration::from_millis(200),
        || {
            Ok(p.frr
                .sessions(&p.lab)?
                .into_iter()
                .find(|s| s.neighbor == svc)
                .filter(|s| {
                    s.state == SessionState::Established && s.prefixes_received == Some(10)
                }))
        },
    )
    .unwrap_or_else(|e| panic!("{e}"));
}

/// Waits until the unit on `a` has replicated its session (PROTECTED).
fn protected(p: &Plane) {
    let sock = p.lab.work_dir().join("agent-a/units/edge-1/holdfastd.sock");
    let cli = find_binary("holdfast", "HOLDFAST_BIN").expect("holdfast");
    wait_for_every(
        "edge-1 PROTECTED",
        Duration::from_secs(30),
        Duration::from_millis(100),
        || {
            let out = std::process::Command::new(&cli)
                .args(["--socket", &sock.to_string_lossy(), "--json", "show", "nsr"])
                .output()
                .map(|o| o.stdout)
                .unwrap_or_default();
            let v: Value = serde_json::from_slice(&out).unwrap_or(Value::Null);
            Ok((v["ok"]["nsr"]["protected"] == true).then_some(()))
        },
    )
    .unwrap_or_else(|e| panic!("{e}"));
}

/// frr's view while something happens: its CLI every 100 ms and its log.
struct FrrWatch {
    watch: PeerWatch,
    mark: holdfast_lab::LogMark,
}

impl FrrWatch {
    fn start(p: &Plane) -> FrrWatch {
        let svc = IpAddr::V4(p.topo.service_v4);
        let mark = p.frr.log_mark();
        let watch =
            PeerWatch::start_every(p.frr.session_probe(&p.lab), svc, Duration::from_millis(100));
        std::thread::sleep(Duration::from_millis(300));
        FrrWatch { watch, mark }
    }

    /// Two more seconds of watching, then: frr's session never left
    /// Established (state, uptime, counters), it logged no NOTIFICATION,
    /// and it holds the unit's routes.
    fn saw_nothing(self, p: &Plane, what: &str) {
        std::thread::sleep(Duration::from_secs(2));
        let report = self.watch.stop();
        println!("{what}{}", report.summary());
        report
            .assert_uninterrupted()
            .unwrap_or_else(|e| panic!("{what}frr noticed: {e}"));
        let notes = p.frr.notifications_since(&self.mark).expect("frr log");
        assert!(notes.is_empty(), "frr logged NOTIFICATIONs: {notes:?}");
        established(p);
    }
}

fn sigkill(pid: u64) -> nix::Result<()> {
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid as i32),
        nix::sys::signal::Signal::SIGKILL,
    )
}

/// Waits (the leader's status file is rewritten every 50 ms) until a
/// replica recorded a verdict moving edge-1 from `from` to `to` (and, with
/// `why`, saying so); returns every verdict.
/// Waits for the leader's verdict moving edge-1 `from` → `to`, its reason
/// containing one of `why` (any reason when empty).
fn wait_verdict(p: &Plane, from: &str, to: &str, why: &[&str]) -> Vec<Value> {
    wait_for_every(
        &format!("the leader's verdict: edge-1 from {from} to {to} ({why:?})"),
        Duration::from_secs(5),
        Duration::from_millis(20),
        || {
            let v = verdicts(p);
            Ok(v.iter()
                .any(|d| {
                    d[0] == "edge-1"
                        && d[1] == from
                        && d[2] == to
                        && (why.is_empty()
                            || why
                                .iter()
                                .any(|w| d[3].as_str().is_some_and(|t| t.contains(w))))
                })
                .then_some(v))
        },
    )
    .unwrap_or_else(|e| panic!("{e}"))
}

/// `holdfast ctl ARGS --json`, run on a control host (it reaches etcd).
fn ctl(p: &mut Plane, b: &Bins, args: &[&str]) -> Value {
    let eps = p.etcd.endpoints();
    let mut cmd = vec![b.ctl.as_str(), "--etcd", eps.as_str(), "--json"];
    cmd.extend_from_slice(args);
    let out = p
        .lab
        .exec_ok(p.ctl_host, &cmd)
        .unwrap_or_else(|e| panic!("holdfast ctl {args:?}: {e}"));
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("holdfast ctl {args:?}: {e}: {out}"))
}

/// A planned move of edge-1 from b onto a by `holdfast ctl REQUEST`: the
/// request is done, edge-1 runs on a, the old process (`old_pid`, on b)
/// exits by itself, and the placement is primary a, backup b. Returns the
/// new pid and how long it took.
fn planned_move_onto_a(p: &mut Plane, b: &Bins, request: &[&str], old_pid: u64) -> (u64, Duration) {
    let t0 = Instant::now();
    let done = ctl(p, b, request);
    assert_eq!(done["done"], true, "{request:?}: {done}");
    let pid = wait_for_every(
        &format!("{request:?}: edge-1 runs on a"),
        Duration::from_secs(10),
        Duration::from_millis(20),
        || Ok(unit_pid(p, 0).filter(|pid| *pid != old_pid)),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let took = t0.elapsed();
    wait_for_every(
        &format!("{request:?}: the old primary on b exits by itself"),
        Duration::from_secs(10),
        Duration::from_millis(20),
        || Ok((!std::path::Path::new(&format!("/proc/{old_pid}")).exists()).then_some(())),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let units = ctl(p, b, &["units"]);
    assert_eq!(
        (units[0]["primary"].as_str(), units[0]["backup"].as_str()),
        (Some("a"), Some("b")),
        "{request:?}: {units}"
    );
    (pid, took)
}

/// The verdicts every replica recorded.
fn verdicts(p: &Plane) -> Vec<Value> {
    p.controllers
        .iter()
        .filter_map(|(_, s)| json_file(s))
        .flat_map(|v| v["detected"].as_array().cloned().unwrap_or_default())
        .collect()
}

fn ready() -> Option<Bins> {
    if skip_unless_ready(&[PeerKind::Frr]) || skip_unless_tools(&["etcd", "etcdctl"]) {
        return None;
    }
    bins()
}

#[test]
fn the_controller_takes_over_an_application_failure_unseen_by_frr() {
    let Some(b) = ready() else { return };
    let mut p = up("control_plane_takeover", &b);
    established(&p);
    let lead = leader_with_agents(&p);
    println!("1. leader {} with agents {}", lead["name"], lead["agents"]);
    protected(&p);
    let svc = IpAddr::V4(p.topo.service_v4);
    let watch = FrrWatch::start(&p);

    // 2. Application failure.
    let pid = unit_pid(&p, 0).expect("edge-1 runs on a");
    let t0 = Instant::now();
    sigkill(pid).expect("SIGKILL holdfastd on a");
    let new_pid = wait_for_every(
        "the controller takes edge-1 over on b",
        Duration::from_secs(30),
        Duration::from_millis(20),
        || Ok(unit_pid(&p, 1)),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let placed = wait_for_every(
        "etcd places edge-1 on b",
        Duration::from_secs(30),
        Duration::from_millis(100),
        || {
            let out = p.etcd.ctl(
                &mut p.lab,
                &[
                    "get",
                    "/holdfast/default/units/edge-1",
                    "--print-value-only",
                ],
            )?;
            let v: Value = serde_json::from_str(out.trim()).unwrap_or(Value::Null);
            Ok((v["primary"] == "b" && v["backup"] == "a").then_some(v))
        },
    )
    .unwrap_or_else(|e| panic!("{e}"));
    println!(
        "2. holdfastd on b (pid {new_pid}) {:?} after the kill; placement epoch {}",
        t0.elapsed(),
        placed["epoch"]
    );
    let detected = wait_verdict(&p, "a", "b", &[]);
    println!("   the leader's verdicts: {detected:?}");
    assert!(
        p.topo.service_addrs_on(&p.lab, p.topo.b.id).unwrap().0,
        "address on b"
    );
    assert!(
        !p.topo.service_addrs_on(&p.lab, p.topo.a.id).unwrap().0,
        "address gone from a"
    );

    // 3. frr saw nothing.
    watch.saw_nothing(&p, "3. frr: ");

    // 4. Planned switchover with `holdfast ctl`.
    let units = ctl(&mut p, &b, &["units"]);
    assert_eq!(units[0]["primary"], "b", "{units}");
    assert_eq!(units[0]["backup"], "a", "{units}");
    let watch = FrrWatch::start(&p);
    let (on_a, took_sw) = planned_move_onto_a(
        &mut p,
        &b,
        &["switchover", "edge-1", "--wait", "30"],
        new_pid,
    );
    println!("4. holdfast ctl switchover: edge-1 on a (pid {on_a}) {took_sw:?} after the request; b's process exited");
    watch.saw_nothing(&p, "   frr: ");

    // 5. Host failure of a.
    let watch = FrrWatch::start(&p);
    let t_host = Instant::now();
    let ns_a = p.lab.netns(p.topo.a.id).to_string();
    for pid in holdfast_lab::netns_pids(&ns_a) {
        let _ = sigkill(u64::from(pid));
    }
    p.lab
        .set_host_links_up(p.topo.a.id, false)
        .expect("a's links down");
    let back_on_b = wait_for_every(
        "the controller takes edge-1 over on b after a's lease expires",
        Duration::from_secs(30),
        Duration::from_millis(20),
        || Ok(unit_pid(&p, 1).filter(|pid| *pid != new_pid)),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let took = t_host.elapsed();
    let failed = p
        .etcd
        .ctl(
            &mut p.lab,
            &[
                "get",
                "/holdfast/default/hosts/failed/a",
                "--print-value-only",
            ],
        )
        .expect("etcdctl get");
    // By its lease expiring, or by the localizer's host verdict (b's agent
    // probes a and the unit on the leader's plan), whichever came first.
    assert!(
        failed.contains("lease expired") || failed.contains("Host"),
        "a recorded failed: {failed}"
    );
    let detected = wait_verdict(&p, "a", "b", &["lease", "Host"]);
    println!(
        "5. host a failed: holdfastd on b (pid {back_on_b}) {took:?} after; verdicts {detected:?}"
    );
    watch.saw_nothing(&p, "   frr: ");
    let hosts = ctl(&mut p, &b, &["hosts"]);
    let a_row = hosts
        .as_array()
        .and_then(|r| r.iter().find(|h| h["host"] == "a"))
        .cloned();
    assert_eq!(
        a_row.as_ref().map(|r| r["failed"].clone()),
        Some(Value::Bool(true)),
        "{hosts}"
    );
    let done = ctl(&mut p, &b, &["reset", "a", "--wait", "10"]);
    assert_eq!(done["done"], true, "{done}");
    let hosts = ctl(&mut p, &b, &["hosts"]);
    let a_row = hosts
        .as_array()
        .and_then(|r| r.iter().find(|h| h["host"] == "a"))
        .cloned();
    assert_eq!(
        a_row.map(|r| r["failed"].clone()),
        Some(Value::Bool(false)),
        "{hosts}"
    );
    // While a was failed edge-1 had no backup (no other usable host);
    // after the reset TRIPOD's placement gives it a again.
    let units = ctl(&mut p, &b, &["units"]);
    assert_eq!(
        (units[0]["primary"].as_str(), units[0]["backup"].as_str()),
        (Some("b"), Some("a")),
        "{units}"
    );
    let b_row = hosts
        .as_array()
        .and_then(|r| r.iter().find(|h| h["host"] == "b"))
        .cloned();
    println!("   holdfast ctl hosts showed a failed; holdfast ctl reset a cleared it and re-placed edge-1's backup on a; b: {b_row:?}");

    // 5b. a comes back (what it left queued dropped, its stale service
    // address removed, a new agent) and b is drained onto it.
    let a = p.topo.a.id;
    p.topo
        .del_service(&p.lab, a)
        .expect("stale service address on a");
    p.lab
        .drop_queued(p.topo.bridge, a)
        .expect("drop a's queues");
    p.lab.set_host_links_up(a, true).expect("a's links up");
    let (host, name, args) = p.agents[0].clone();
    let argv: Vec<&str> = args.iter().map(String::as_str).collect();
    p.lab
        .spawn(
            host,
            &format!("{name}-again"),
            &argv,
            &[("RUST_LOG", "info")],
        )
        .expect("agent a again");
    leader_with_agents(&p);
    let watch = FrrWatch::start(&p);
    let (drained_to, took_drain) =
        planned_move_onto_a(&mut p, &b, &["drain", "b", "--wait", "30"], back_on_b);
    println!("5b. a back with a new agent; holdfast ctl drain b: edge-1 on a (pid {drained_to}) {took_drain:?} after the request");
    watch.saw_nothing(&p, "   frr: ");
    let new_pid = drained_to;

    // 6. Negative control: the same failure with no controller.
    for (proc, _) in &p.controllers {
        p.lab.kill(*proc, Signal::Term);
    }
    for (proc, _) in &p.controllers {
        let pr = *proc;
        wait_for_every(
            "controllers gone",
            Duration::from_secs(10),
            Duration::from_millis(20),
            || Ok((!p.lab.is_running(pr)).then_some(())),
        )
        .unwrap_or_else(|e| panic!("{e}"));
    }
    let t1 = Instant::now();
    sigkill(new_pid).expect("SIGKILL holdfastd on a");
    wait_for_every(
        "negative control: frr drops the session (hold time 9 s)",
        Duration::from_secs(20),
        Duration::from_millis(200),
        || {
            Ok(p.frr
                .sessions(&p.lab)?
                .into_iter()
                .find(|s| s.neighbor == svc)
                .filter(|s| s.state != SessionState::Established)
                .map(drop))
        },
    )
    .unwrap_or_else(|e| panic!("{e}"));
    println!(
        "6. negative control: no controller, frr dropped the session {:?} after the kill",
        t1.elapsed()
    );
    p.etcd.stop(&mut p.lab);
}

#[test]
fn a_host_network_blip_is_no_failure_but_an_outage_is() {
    let Some(b) = ready() else { return };
    let mut p = up("control_plane_blip", &b);
    established(&p);
    leader_with_agents(&p);
    protected(&p);
    let pid = unit_pid(&p, 0).expect("edge-1 on a");
    let watch = FrrWatch::start(&p);
    let (bridge, a) = (p.topo.bridge, p.topo.a.id);

    // A 1 s blip: nothing happens.
    p.lab
        .set_bridge_port_up(bridge, a, false)
        .expect("a's port down");
    std::thread::sleep(Duration::from_secs(1));
    p.lab
        .set_bridge_port_up(bridge, a, true)
        .expect("a's port up");
    hold_for(Duration::from_secs(5), || {});
    assert_eq!(
        unit_pid(&p, 0),
        Some(pid),
        "edge-1 still runs on a, same process"
    );
    let st = json_file(&p.agent_status[0]).expect("agent a status");
    assert!(
        st["self_fenced_at_ms"].is_null(),
        "a's agent did not fence: {st}"
    );
    assert!(verdicts(&p).is_empty(), "no verdict: {:?}", verdicts(&p));
    println!("1. 1 s blip of a's network: no fence, no verdict, edge-1 still pid {pid} on a");

    // Down for good.
    let t0 = Instant::now();
    p.lab
        .set_bridge_port_up(bridge, a, false)
        .expect("a's port down");
    let on_b = wait_for_every(
        "edge-1 taken over on b after a's lease expires",
        Duration::from_secs(30),
        Duration::from_millis(20),
        || Ok(unit_pid(&p, 1)),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let took = t0.elapsed();
    assert!(
        took >= Duration::from_millis(1500),
        "not before a's agent fenced: {took:?}"
    );
    // The lease expiry ("lease") or the localizer's host verdict ("Host").
    let v = wait_verdict(&p, "a", "b", &["lease", "Host"]);
    println!("2. a cut off: edge-1 on b (pid {on_b}) {took:?} after; verdicts {v:?}");
    // a's agent fenced its unit on its own (it cannot reach etcd).
    wait_for_every(
        "a's agent fenced edge-1",
        Duration::from_secs(5),
        Duration::from_millis(20),
        || {
            Ok(json_file(&p.agent_status[0])
                .filter(|s| s["self_fenced_at_ms"].is_u64())
                .map(drop))
        },
    )
    .unwrap_or_else(|e| panic!("{e}"));
    watch.saw_nothing(&p, "   frr: ");

    // Back up: what a queued while cut off is dropped first (as `holdfast lab
    // heal` does), then a's agent gets a new lease, but a stays failed.
    // The lease a held while cut off, read before its port comes up: its
    // agent renews within a round of it, before a read after it.
    let lease_before = json_file(&p.agent_status[0]).and_then(|s| s["lease"].as_i64());
    p.lab.drop_queued(bridge, a).expect("drop a's queues");
    p.lab
        .set_bridge_port_up(bridge, a, true)
        .expect("a's port up");
    wait_for_every(
        "a's agent holds a new lease",
        Duration::from_secs(30),
        Duration::from_millis(100),
        || {
            Ok(json_file(&p.agent_status[0])
                .and_then(|s| s["lease"].as_i64())
                .filter(|l| Some(*l) != lease_before)
                .map(drop))
        },
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let eps = p.etcd.endpoints();
    let units = p
        .lab
        .exec_ok(
            p.ctl_host,
            &[b.ctl.as_str(), "--etcd", eps.as_str(), "--json", "units"],
        )
        .expect("holdfast ctl units");
    let units: Value = serde_json::from_str(&units).expect("json");
    assert_eq!(units[0]["primary"], "b", "{units}");
    assert!(
        units[0]["backup"].is_null(),
        "a is failed, not reused: {units}"
    );
    println!("3. a back: new lease, still failed; edge-1 on b without a backup until reset");
    for (proc, _) in &p.controllers {
        p.lab.kill(*proc, Signal::Term);
    }
    p.etcd.stop(&mut p.lab);
}
