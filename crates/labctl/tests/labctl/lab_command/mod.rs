//! `holdfast lab` (`holdfast_labctl::command`): the shipped scenarios come up and go down
//! cleanly with their control plane, and each of TENSOR's four failure kinds does to the
//! namespaces what it says, is found by the controller (its verdict) and handled by it
//! (the unit moved through the agents), and the peers never notice. Every step goes
//! through the state file, as separate `holdfast lab` invocations would.
//!
//! ```text
//!   scenario `demo` (lab/scenarios/demo), bridge `lan` 198.18.0.0/24, fd00::/64
//!   [ frr ]   .1   frr (AS 65001)   --BGP-->  service .10 (holdfastd AS 65000)
//!   [ redis ] .2   redis-server, the NSR state store
//!   [ a ]     .3   holdfast-agent; container a_edge runs `edge` at first   } the service
//!   [ b ]     .4   holdfast-agent; container b_edge, the backup            } address .10
//!   [ bird ]  .5   bird2 (AS 65002) --BGP-->  service .10
//!   [ c1..c3 ]     etcd + holdfast-controller (bridge `mgmt` 198.19.0.0/24 with a, b, s)
//!   [ s ]          the agent server's agent (probes)
//!
//!   failures, each handled by the controller:
//!     application edge (on a) -> b,  container edge (on b) -> a,
//!     host a -> b,  heal a,  host-network b -> a,  heal b
//! ```
//!
//! Checks:
//! * `every_scenario_up_and_down`: each scenario in `lab/scenarios/` comes up with
//!   `up` (status healthy: every unit running, every peer's session Established by its
//!   own CLI, holdfastd PROTECTED, a controller leading), one namespace per host, per
//!   control-plane host and per container plus the two switches, every recorded pid
//!   alive; `down` leaves no namespace of the run (`ip netns list`), no process (every
//!   recorded pid gone), no state file, no work directory, no registry entry.
//! * `four_failures_and_takeovers` (scenario `demo`): after each `fail`, what the
//!   namespaces look like: application — the old holdfastd pid is gone, its container
//!   empty, the host's agent and links up; container — the container's processes gone;
//!   host — the host's processes (its agent too) gone, its interface and bridge port
//!   DOWN; host-network — the bridge port DOWN while the host's agent runs, and the old
//!   primary fenced (killed) by that agent on the controller's command. Each time the
//!   report carries the controller's verdict of the right kind, the new primary runs on
//!   the other host, the service address is in its container there, every holdfastd
//!   session is Established and PROTECTED, the state file names the new primary and
//!   host. Before the failures, holdfastd's `show summary` and each agent's record
//!   (`holdfast ctl hosts`) name the build under test (`holdfast_version::VERSION`).
//!   A failure with no backup to go to is refused before anything is done; `heal`
//!   brings links back and `holdfast ctl reset`s the host, which becomes the backup
//!   again. Throughout, a watch of each peer's own CLI (frr, bird) sees its session
//!   with the service address never leave Established (uptime never back, counters
//!   unchanged; watched one hold time past the last takeover), the routes it holds from
//!   us never drop, and no NOTIFICATION in either peer's log. Then `down` is clean.
//! * `down_after_a_crashed_up`: `holdfast lab up` (the binary) SIGKILLed in the middle
//!   of building leaves namespaces and daemons behind; `down` removes them all, and the
//!   run's work directory.

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use holdfast_lab::{
    find_binary, list_netns, run_id_of, skip, skip_unless_ready, skip_unless_tools, wait_ok,
    KeptProc, LogMark, PeerKind, PeerWatch, SKIP_REASON,
};
use holdfast_labctl::command::{self, FailureKind, LabState, OpenLab, Status};

fn scenarios_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../lab/scenarios")
}

fn ready() -> bool {
    if skip_unless_ready(&[PeerKind::Frr, PeerKind::Bird])
        || skip_unless_tools(&["redis-server", "redis-cli", "etcd", "etcdctl", "iptables"])
    {
        return false;
    }
    if let Err(e) = find_binary("holdfastd", "HOLDFASTD_BIN") {
        skip(&format!("{SKIP_REASON} ({e})"));
        return false;
    }
    true
}

/// A state file of this test; the guard runs `down` on every exit path.
struct Guard(PathBuf);

impl Guard {
    fn new(name: &str) -> Guard {
        let base = std::env::var_os("HOLDFAST_LAB_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from("/tmp"));
        let p = base.join(format!(
            "holdfast-lab-cmdtest-{}-{name}.json",
            std::process::id()
        ));
        let _ = std::fs::remove_file(&p);
        Guard(p)
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        if self.0.exists() {
            if let Err(e) = command::down(&self.0) {
                eprintln!("cleanup: lab down: {e}");
            }
        }
    }
}

fn progress(line: &str) {
    println!("{line}");
}

fn namespaces_of(run_id: &str) -> Vec<String> {
    list_netns()
        .expect("ip netns list")
        .into_iter()
        .filter(|n| run_id_of(n) == Some(run_id))
        .collect()
}

/// `/proc/PID/stat`: (state letter, start time).
fn proc_stat(pid: u32) -> Option<(char, u64)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = stat.rsplit_once(')')?.1;
    let mut it = rest.split_whitespace();
    let state = it.next()?.chars().next()?;
    Some((state, it.nth(18)?.parse().ok()?))
}

/// Whether a recorded process still exists (not a zombie, same start time).
fn alive(p: &KeptProc) -> bool {
    proc_stat(p.pid)
        .is_some_and(|(s, t)| s != 'Z' && s != 'X' && p.start_time.is_none_or(|st| st == t))
}

fn pid_alive(pid: u32) -> bool {
    proc_stat(pid).is_some_and(|(s, _)| s != 'Z' && s != 'X')
}

fn netns_pids(ns: &str) -> Vec<u32> {
    let out = Command::new("ip")
        .args(["netns", "pids", ns])
        .output()
        .expect("ip netns pids");
    assert!(out.status.success(), "ip netns pids {ns}: {out:?}");
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .filter_map(|p| p.parse().ok())
        .collect()
}

fn has_addr(ns: &str, ifname: &str, addr: IpAddr) -> bool {
    let out = Command::new("ip")
        .args(["-n", ns, "-o", "addr", "show", "dev", ifname])
        .output()
        .expect("ip addr");
    String::from_utf8_lossy(&out.stdout).contains(&format!(" {addr}/"))
}

/// (host's bridge interface, its namespace, switch-side interface, switch namespace).
fn port_of(st: &LabState, host: &str) -> (String, String, String, String) {
    let ns = st.netns(host).expect("host namespace").to_string();
    let (host_if, switch_if, switch_ns) = st.bridge_port(host).expect("bridge port");
    (host_if.into(), ns, switch_if.into(), switch_ns.into())
}

fn link_state(ns: &str, ifname: &str) -> String {
    command::link_state(ns, ifname).unwrap_or_else(|| "?".into())
}

/// The namespace and interface of the unit's container on `host`.
fn container_of(st: &LabState, host: &str) -> (String, String) {
    let c = st
        .plane
        .containers
        .iter()
        .find(|c| c.host == host)
        .expect("a container on the host");
    (
        st.netns(&c.name).expect("container namespace").to_string(),
        c.ifname.clone(),
    )
}

/// The controller's verdict of `finding` is in the report.
fn assert_verdict(r: &command::FailReport, finding: &str) {
    let t = r.takeover.as_ref().expect("a takeover");
    let v = t.verdict.as_ref().expect("the controller's verdict");
    assert!(
        v["finding"].get(finding).is_some(),
        "{}: verdict {v}, expected {finding}",
        r.kind
    );
    assert!(r.detected_ms.is_some(), "the controller's detection time");
}

/// Asserts what a healthy lab with the primary on `host` looks like.
fn assert_primary_on(state: &Path, host: &str, what: &str) -> Status {
    let st = LabState::load(state).expect("state");
    assert_eq!(st.service_host, host, "{what}: state's service host");
    assert_eq!(
        st.units[0].primary.host, host,
        "{what}: state's primary host"
    );
    let svc = IpAddr::V4(st.scenario.service.v4);
    let (ns, ifname) = container_of(&st, host);
    assert!(
        has_addr(&ns, &ifname, svc),
        "{what}: the service address is not in {host}'s container"
    );
    let status = wait_ok(
        &format!("{what}: lab healthy"),
        Duration::from_secs(30),
        || {
            let s = command::status(state).map_err(|e| e.to_string())?;
            if s.healthy {
                Ok(s)
            } else {
                Err(s.to_string())
            }
        },
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let primary = status
        .holdfastd
        .iter()
        .find(|u| u.role.as_deref() == Some("primary"))
        .expect("a primary");
    assert_eq!(primary.host, host, "{what}: status primary host");
    assert_eq!(primary.pids, vec![st.units[0].primary.pid]);
    assert!(
        pid_alive(st.units[0].primary.pid),
        "{what}: new primary alive"
    );
    // Peers that run BFD show it Up with the service address, by their own CLI.
    for p in &status.peers {
        let bfd_wanted = st
            .scenario
            .peer(&p.name)
            .is_some_and(|spec| spec.bfd.is_some());
        let b = &p.detail["service_bfd"];
        if bfd_wanted {
            assert_eq!(
                b["up"],
                serde_json::json!(true),
                "{what}: {}'s BFD: {b}",
                p.name
            );
        } else {
            assert!(b.is_null(), "{what}: {} has no BFD: {b}", p.name);
        }
    }
    status
}

#[test]
fn every_scenario_up_and_down() {
    if !ready() {
        return;
    }
    let mut names: Vec<String> = std::fs::read_dir(scenarios_dir())
        .expect("lab/scenarios")
        .flatten()
        .filter(|e| e.path().join("scenario.toml").is_file())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert!(names.len() >= 2, "scenarios: {names:?}");
    for name in names {
        let guard = Guard::new(&format!("up-{name}"));
        let file = scenarios_dir().join(&name).join("scenario.toml");
        let t = Instant::now();
        let status = command::up(&file, &guard.0, &mut progress)
            .unwrap_or_else(|e| panic!("{name}: up: {e}"));
        println!("{name}: up in {:?}\n{status}", t.elapsed());
        assert!(status.healthy, "{name}: not healthy:\n{status}");
        let st = LabState::load(&guard.0).expect("state");
        let run_id = st.lab.run_id.clone();
        let ns = namespaces_of(&run_id);
        assert_eq!(
            ns.len(),
            st.scenario.hosts.len() + 4 + st.plane.containers.len() + 2,
            "{name}: one namespace per host, per control-plane host (c1..c3, s) and per container, plus the two switches: {ns:?}"
        );
        assert!(status.control.leader.is_some(), "{name}: no leader");
        assert_eq!(status.control.agents.len(), 3, "{name}: agents on a, b, s");
        for p in &st.lab.procs {
            assert!(alive(p), "{name}: {} (pid {}) not running", p.name, p.pid);
        }
        assert_eq!(st.service_host, st.scenario.holdfastd[0].primary);
        let registry = Path::new("/run/holdfast-lab").join(&run_id);
        assert!(registry.exists(), "{name}: kept lab registered");
        // A second `up` on the same state file is refused.
        let again = command::up(&file, &guard.0, &mut progress);
        assert!(
            again
                .as_ref()
                .is_err_and(|e| e.to_string().contains("already up")),
            "{name}: second up: {:?}",
            again.map(|s| s.run_id)
        );
        // Status is read by a separate invocation: the same.
        let s2 = command::status(&guard.0).expect("status");
        assert!(s2.healthy && s2.run_id == run_id);
        let work_dir = st.lab.work_dir.clone();
        let down = command::down(&guard.0).expect("down");
        println!("{down}");
        assert_eq!(down.run_id.as_deref(), Some(run_id.as_str()));
        assert!(namespaces_of(&run_id).is_empty(), "{name}: namespaces left");
        for p in &st.lab.procs {
            assert!(!alive(p), "{name}: {} (pid {}) left running", p.name, p.pid);
        }
        assert!(!guard.0.exists(), "{name}: state file left");
        assert!(!work_dir.exists(), "{name}: work dir left");
        assert!(!registry.exists(), "{name}: registry entry left");
        // `down` again: nothing to do, still fine.
        let d2 = command::down(&guard.0).expect("second down");
        assert!(d2.run_id.is_none());
    }
}

#[test]
fn four_failures_and_takeovers() {
    if !ready() {
        return;
    }
    let t0 = Instant::now();
    let guard = Guard::new("fail");
    let state = guard.0.clone();
    let file = command::find_scenario(scenarios_dir().join("demo").to_str().unwrap())
        .expect("demo scenario");
    command::up(&file, &state, &mut progress).expect("up");
    let st0 = LabState::load(&state).expect("state");
    let svc = IpAddr::V4(st0.scenario.service.v4);
    // Watch each peer's session through its own CLI, from a lab opened from the state.
    let open = OpenLab::load(&state).expect("open");
    let marks: Vec<LogMark> = open.peers.iter().map(|(_, p)| p.log_mark()).collect();
    let watches: Vec<(String, PeerWatch)> = open
        .peers
        .iter()
        .map(|(n, p)| (n.clone(), PeerWatch::start(p.session_probe(&open.lab), svc)))
        .collect();
    assert_primary_on(&state, "a", "after up");

    // Each binary reports its build: holdfastd's summary, each agent's record as
    // `holdfast ctl hosts` shows it.
    let summary = open
        .holdfastd(&st0.units[0].primary)
        .and_then(|u| u.summary())
        .expect("show summary");
    assert_eq!(
        summary.version,
        holdfast_version::VERSION,
        "holdfastd's build"
    );
    // No `io_threads` in the unit's configuration: one I/O thread per core.
    assert_eq!(
        summary.io_threads,
        std::thread::available_parallelism().map_or(1, |n| n.get()),
        "holdfastd's I/O threads"
    );
    let hosts = open.plane.ctl(&open.lab, &["hosts"]).expect("ctl hosts");
    for h in ["a", "b"] {
        let row = hosts
            .as_array()
            .and_then(|r| r.iter().find(|r| r["host"] == h))
            .unwrap_or_else(|| panic!("no host {h} in {hosts}"));
        assert_eq!(
            row["agent_build"].as_str(),
            Some(holdfast_version::VERSION),
            "agent {h}'s build: {row}"
        );
    }

    // Nonsense is refused and changes nothing.
    let e = command::fail(&state, FailureKind::Application, "frr", &mut progress).unwrap_err();
    assert!(e.to_string().contains("needs a holdfastd unit"), "{e}");
    let e = command::fail(&state, FailureKind::Host, "nowhere", &mut progress).unwrap_err();
    assert!(e.to_string().contains("unknown host `nowhere`"), "{e}");

    // 1. application: SIGKILL holdfastd on a.
    let before = LabState::load(&state).expect("state");
    let old = before.units[0].primary.clone();
    let (_, ns_a, _, _) = port_of(&before, "a");
    let (cns_a, cif_a) = container_of(&before, "a");
    let r = command::fail(&state, FailureKind::Application, "edge", &mut progress)
        .expect("application failure");
    println!("{r}");
    assert_verdict(&r, "application");
    assert!(
        !pid_alive(old.pid),
        "application: old holdfastd still alive"
    );
    assert_eq!(r.killed_pids, vec![old.pid]);
    assert!(
        netns_pids(&cns_a).is_empty(),
        "application: a's container ran only holdfastd"
    );
    assert!(
        !netns_pids(&ns_a).is_empty(),
        "application: a's agent runs on"
    );
    let (if_a, _, sw_a, sw_ns) = port_of(&before, "a");
    assert_eq!(
        link_state(&ns_a, &if_a),
        "UP",
        "application: a's link stays up"
    );
    assert_eq!(link_state(&sw_ns, &sw_a), "UP");
    let t = r.takeover.as_ref().expect("a takeover");
    assert_eq!((t.from_host.as_str(), t.to_host.as_str()), ("a", "b"));
    assert!(t.holdfastd.is_some(), "holdfastd's takeover figures");
    assert!(
        !has_addr(&cns_a, &cif_a, svc),
        "application: address left in a's container"
    );
    assert_primary_on(&state, "b", "application");

    // 2. container: every process of the unit's namespace (b).
    let before = LabState::load(&state).expect("state");
    let old = before.units[0].primary.clone();
    let (if_b, ns_b, sw_b, _) = port_of(&before, "b");
    let (cns_b, cif_b) = container_of(&before, "b");
    assert!(netns_pids(&cns_b).contains(&old.pid));
    let r = command::fail(&state, FailureKind::Container, "edge", &mut progress)
        .expect("container failure");
    println!("{r}");
    assert_verdict(&r, "container");
    assert!(
        netns_pids(&cns_b).is_empty(),
        "container: processes left in b's container"
    );
    assert!(r.killed_pids.contains(&old.pid) && !pid_alive(old.pid));
    assert_eq!(
        link_state(&ns_b, &if_b),
        "UP",
        "container: b's link stays up"
    );
    assert_eq!(r.takeover.as_ref().map(|t| t.to_host.as_str()), Some("a"));
    assert_primary_on(&state, "a", "container");

    // 3. host: every unit on a, and a's links.
    let before = LabState::load(&state).expect("state");
    let old = before.units[0].primary.clone();
    let r = command::fail(&state, FailureKind::Host, "a", &mut progress).expect("host failure");
    println!("{r}");
    assert_verdict(&r, "host");
    assert!(netns_pids(&ns_a).is_empty(), "host: processes left in a");
    assert!(
        netns_pids(&cns_a).is_empty(),
        "host: processes left in a's container"
    );
    assert!(!pid_alive(old.pid));
    assert_eq!(link_state(&ns_a, &if_a), "DOWN", "host: a's interface");
    assert_eq!(link_state(&sw_ns, &sw_a), "DOWN", "host: a's bridge port");
    assert_eq!(r.takeover.as_ref().map(|t| t.to_host.as_str()), Some("b"));
    assert_primary_on(&state, "b", "host");
    let st = LabState::load(&state).expect("state");
    assert_eq!(st.failed("a"), Some(FailureKind::Host));
    // The backup host is down: a failure of the primary is refused before injection.
    let primary = st.units[0].primary.clone();
    let e = command::fail(&state, FailureKind::Application, "edge", &mut progress).unwrap_err();
    assert!(e.to_string().contains("backup host `a` is down"), "{e}");
    assert!(
        pid_alive(primary.pid),
        "a refused failure must not kill anything"
    );
    let e = command::fail(&state, FailureKind::HostNetwork, "a", &mut progress).unwrap_err();
    assert!(e.to_string().contains("already down"), "{e}");
    let h = command::heal(&state, "a").expect("heal a");
    println!("{h}");
    assert_eq!(link_state(&ns_a, &if_a), "UP", "heal: a's interface");
    assert_eq!(link_state(&sw_ns, &sw_a), "UP", "heal: a's bridge port");
    assert!(
        !has_addr(&cns_a, &cif_a, svc),
        "heal: stale service address in a's container"
    );
    assert_eq!(
        LabState::load(&state).expect("state").units[0].backup_host,
        "a",
        "heal: the controller places the backup on a again"
    );
    assert!(
        command::heal(&state, "a").is_err(),
        "a is not down any more"
    );

    // 4. host-network: b's and its containers' `lan` ports; b's agent stays up.
    let before = LabState::load(&state).expect("state");
    let old = before.units[0].primary.clone();
    let r = command::fail(&state, FailureKind::HostNetwork, "b", &mut progress)
        .expect("host-network failure");
    println!("{r}");
    assert_eq!(
        link_state(&sw_ns, &sw_b),
        "DOWN",
        "host-network: b's bridge port"
    );
    assert_verdict(&r, "host_network");
    assert_eq!(r.takeover.as_ref().map(|t| t.to_host.as_str()), Some("a"));
    assert!(
        !netns_pids(&ns_b).is_empty(),
        "host-network: b's agent runs on"
    );
    assert_primary_on(&state, "a", "host-network");
    // b's agent still reaches the controller over the management network: it
    // fences the cut-off old primary on the controller's command.
    wait_ok(
        "the cut-off old primary fenced by b's agent",
        Duration::from_secs(30),
        || {
            (!pid_alive(old.pid))
                .then_some(())
                .ok_or_else(|| "alive".to_string())
        },
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let h = command::heal(&state, "b").expect("heal b");
    println!("{h}");
    assert!(netns_pids(&cns_b).is_empty());
    assert_eq!(link_state(&sw_ns, &sw_b), "UP", "heal: b's bridge port");
    assert_eq!(link_state(&ns_b, &if_b), "UP", "heal: b's interface");
    assert!(
        !has_addr(&cns_b, &cif_b, svc),
        "heal: stale service address in b's container"
    );
    let status = assert_primary_on(&state, "a", "after healing b");
    assert!(status.holdfastd.len() == 1, "one holdfastd unit");
    assert_eq!(status.failures.len(), 4);

    // The peers never noticed: watched one hold time more, so a session whose
    // KEEPALIVEs stopped would have expired at the peer.
    let hold = st0.scenario.holdfastd[0].hold_time.unwrap_or(9);
    std::thread::sleep(Duration::from_secs(u64::from(hold) + 1));
    for ((name, w), ((_, peer), mark)) in watches.into_iter().zip(open.peers.iter().zip(&marks)) {
        let rep = w.stop();
        println!("{name}: {}", rep.summary());
        rep.assert_uninterrupted()
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(
            rep.prefixes_received_drops.is_empty(),
            "{name}: routes from us dropped: {:?}",
            rep.prefixes_received_drops
        );
        let notes = peer.notifications_since(mark).expect("peer log");
        assert!(notes.is_empty(), "{name} logged NOTIFICATIONs: {notes:?}");
    }
    drop(open);
    let st = LabState::load(&state).expect("state");
    command::down(&state).expect("down");
    assert!(namespaces_of(&st.lab.run_id).is_empty(), "namespaces left");
    for p in &st.lab.procs {
        assert!(!alive(p), "{} (pid {}) left running", p.name, p.pid);
    }
    println!("four failures and takeovers in {:?}", t0.elapsed());
}

#[test]
fn down_after_a_crashed_up() {
    if !ready() {
        return;
    }
    let Ok(cli) = find_binary("holdfast", "HOLDFAST_BIN") else {
        skip("no holdfast binary (cargo build --release --workspace --bins)");
        return;
    };
    let ok = Command::new(&cli)
        .args(["lab", "--help"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        skip(&format!(
            "{} has no `lab` command, or no holdfast-lab next to it (stale build)",
            cli.display()
        ));
        return;
    }
    let guard = Guard::new("crash");
    let existing: Vec<String> = list_netns().expect("netns");
    let mut child = Command::new(&cli)
        .args(["lab", "--state"])
        .arg(&guard.0)
        .args(["up"])
        .arg(scenarios_dir().join("nsr-basic"))
        .env(
            "HOLDFASTD_BIN",
            find_binary("holdfastd", "HOLDFASTD_BIN").unwrap(),
        )
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("holdfast lab up");
    // Once a's agent runs holdfastd in its container, the builder is killed in the
    // middle of its work.
    let deadline = Instant::now() + Duration::from_secs(60);
    let run_id = loop {
        let found = list_netns()
            .expect("netns")
            .into_iter()
            .filter(|n| !existing.contains(n) && n.contains("-a_"))
            .find(|n| {
                netns_pids(n).into_iter().any(|p| {
                    std::fs::read_to_string(format!("/proc/{p}/comm"))
                        .is_ok_and(|c| c.trim() == "holdfastd")
                })
            });
        if let Some(n) = found {
            break run_id_of(&n).expect("run id").to_string();
        }
        if Instant::now() > deadline || child.try_wait().expect("wait").is_some() {
            let _ = child.kill();
            let _ = child.wait();
            panic!("holdfast lab up never started holdfastd");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    child.kill().expect("SIGKILL holdfast lab up");
    child.wait().expect("reap");
    let left = namespaces_of(&run_id);
    let pids: Vec<u32> = left.iter().flat_map(|n| netns_pids(n)).collect();
    println!("crashed up left {left:?} with pids {pids:?}");
    assert!(!left.is_empty() && !pids.is_empty());
    assert!(!guard.0.exists(), "no state file before up finished");
    let d = command::down(&guard.0).expect("down");
    println!("{d}");
    assert!(d.stale_removed >= left.len(), "{d:?}");
    assert!(
        d.stale_work_dirs
            .iter()
            .any(|w| w.to_string_lossy().ends_with(&format!("-{run_id}"))),
        "the crashed run's work dir is removed: {d:?}"
    );
    assert!(namespaces_of(&run_id).is_empty(), "namespaces left");
    for pid in pids {
        assert!(!pid_alive(pid), "pid {pid} left running");
    }
}
