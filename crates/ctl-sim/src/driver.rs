//! The harness's driver: the lab (a 3-member etcd with a
//! `holdfast-controller` replica on each member, and a namespace for the
//! simulated agents), the steady state measured, the failures injected one
//! after the other, and the figures.
//!
//! ```text
//!            bridge `mgmt` 198.19.0.0/24
//!   c1 .31, c2 .32, c3 .33   etcd member + holdfast-controller (:50051)
//!   sim .40                  holdfast-ctl-sim agents: every host agent and
//!                            agent server; every unit address 10.200.0.0/16
//!                            (a local route; the replicas route it via .40)
//! ```
//!
//! Measured:
//! - steady state, over [`Config::window`]: etcd writes per second (the
//!   revision's growth) and its database size, the leader's CPU (cores,
//!   from `/proc/PID/stat`) and RSS, what the agents sent per second, and
//!   any verdict (there should be none);
//! - `host`: one host made to fail (silent agent, lapsed lease, every probe
//!   of it and its units missing): from the injection to the controller's
//!   verdict, and to each of its units' `Takeover` command;
//! - `rack`: a rack's hosts ([`crate::fleet::FleetSpec::rack`]) at once,
//!   the same figures;
//! - `leader`: SIGKILL of the leading replica: until another leads and
//!   until every live agent has attached to it;
//! - `etcd`: SIGKILL of etcd's leader member: until etcd has a leader again,
//!   and whether any host was taken for failed or the controller's leader
//!   changed; the member is then started again.

use std::collections::{BTreeMap, BTreeSet};
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use holdfast_lab::plane::{controller_statuses, ControlPlane, PlaneBins};
use holdfast_lab::{HostId, Lab, ProcId, Signal};
use serde_json::Value;

use crate::agents::{unix_ms, Event};
use crate::churn::churn;
use crate::fleet::{Fleet, SimUnit, UNIT_PREFIX};
use crate::report::{Failure, Report, Steady, Takeover};

/// The unit port the controllers heartbeat (holdfastd's BGP port).
const UNIT_PORT: &str = "179";

/// What to run.
#[derive(Debug, Clone)]
pub struct Config {
    pub fleet: Fleet,
    /// The steady-state window.
    pub window: Duration,
    /// Failures, in order: `host`, `rack`, `leader`, `etcd`.
    pub inject: Vec<String>,
    /// How long a failure's handling may take before it is reported as not
    /// done.
    pub patience: Duration,
    /// Where the binaries are (this one's for the agents).
    pub self_exe: PathBuf,
    /// The simulated agents' lease renewal period (a real agent's
    /// `--renew-ms`).
    pub renew_ms: u64,
    /// The simulated agents' report period of a target that keeps
    /// answering, in ms.
    pub report_ms: u64,
    /// The controllers' `--stale-after-ms`.
    pub stale_after_ms: u64,
    /// Bridges captured with tcpdump.
    pub pcap: bool,
}

/// The lab and its parts.
struct Sim {
    lab: Lab,
    cp: ControlPlane,
    sim: HostId,
    events: PathBuf,
    control: PathBuf,
    /// Events read so far.
    seen: Vec<Event>,
    read: usize,
}

impl Sim {
    /// New events since the last read.
    fn poll(&mut self) -> &[Event] {
        let text = std::fs::read_to_string(&self.events).unwrap_or_default();
        let start = self.seen.len();
        if text.len() > self.read {
            let chunk = &text[self.read..];
            let complete = chunk.rfind('\n').map_or(0, |i| i + 1);
            for line in chunk[..complete].lines() {
                if let Ok(e) = serde_json::from_str::<Event>(line) {
                    self.seen.push(e);
                }
            }
            self.read += complete;
        }
        &self.seen[start..]
    }

    fn send(&self, line: &str) -> anyhow::Result<()> {
        use std::io::Write;
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .create(true)
            .open(&self.control)?;
        writeln!(f, "{line}")?;
        Ok(())
    }

    fn statuses(&self) -> Vec<Value> {
        controller_statuses(&self.cp.status_files())
    }

    /// The leading replica: its index and status (a status file not
    /// updated for a second is a dead replica's).
    fn leader(&self) -> Option<(usize, Value)> {
        let now = unix_ms();
        self.statuses().into_iter().find_map(|s| {
            let i = s["name"]
                .as_str()?
                .strip_prefix('c')?
                .parse::<usize>()
                .ok()?;
            let fresh = s["updated_unix_ms"]
                .as_u64()
                .is_some_and(|t| now.saturating_sub(t) < 1000);
            (s["role"] == "leader" && fresh).then_some((i - 1, s))
        })
    }

    fn placement(&self, ctl: &str) -> anyhow::Result<Vec<SimUnit>> {
        let eps = self.cp.etcd.endpoints();
        let out = self.lab.exec_ok_timeout(
            self.sim,
            &[ctl, "--etcd", &eps, "--json", "units"],
            Duration::from_secs(120),
        )?;
        let v: Value = serde_json::from_str(&out).context("holdfast ctl units")?;
        let rows = v.as_array().cloned().unwrap_or_default();
        Ok(rows
            .iter()
            .filter_map(|r| {
                Some(SimUnit {
                    name: r["unit"].as_str()?.to_string(),
                    primary: r["primary"].as_str()?.to_string(),
                    backup: r["backup"].as_str().map(str::to_string),
                    addr: Ipv4Addr::UNSPECIFIED,
                })
            })
            .collect())
    }
}

/// Reads a process's CPU time (user + system) in seconds, and its RSS in
/// bytes.
fn proc_usage(pid: u32) -> Option<(f64, u64)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &stat[stat.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks: f64 = f.get(11)?.parse::<f64>().ok()? + f.get(12)?.parse::<f64>().ok()?;
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let rss_kb: u64 = status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()?;
    Some((ticks / 100.0, rss_kb * 1024))
}

/// Runs the harness; the lab is torn down on every exit path.
pub fn run(cfg: &Config) -> anyhow::Result<Report> {
    let bins = PlaneBins::find()?;
    let mut lab = Lab::new("ctl-sim")?;
    if !cfg.pcap {
        lab.without_captures();
    }
    let c: Vec<HostId> = (1..=3)
        .map(|i| lab.host(&format!("c{i}")))
        .collect::<Result<_, _>>()?;
    let sim = lab.host("sim")?;
    let members: Vec<(HostId, Ipv4Addr)> = c
        .iter()
        .enumerate()
        .map(|(i, h)| (*h, Ipv4Addr::new(198, 18, 0, 31 + i as u8)))
        .collect();
    let others = [(sim, Ipv4Addr::new(198, 18, 0, 40))];
    let args: Vec<String> = vec![
        "--unit-port".into(),
        UNIT_PORT.into(),
        "--stale-after-ms".into(),
        cfg.stale_after_ms.to_string(),
    ];
    let cp = ControlPlane::start(&mut lab, &bins, &members, &others, &args)?;
    lab.exec_ok(
        sim,
        &["ip", "route", "add", "local", UNIT_PREFIX, "dev", "lo"],
    )?;
    for h in &c {
        lab.exec_ok(
            *h,
            &["ip", "route", "add", UNIT_PREFIX, "via", "198.19.0.40"],
        )?;
    }
    let events = lab.work_dir().join("events.jsonl");
    let control = lab.work_dir().join("control");
    std::fs::write(&control, "")?;
    let spec = cfg.fleet.spec;
    let exe = cfg.self_exe.to_string_lossy().to_string();
    let argv: Vec<String> = vec![
        exe,
        "agents".into(),
        "--hosts".into(),
        spec.hosts.to_string(),
        "--units".into(),
        spec.units.to_string(),
        "--rack".into(),
        spec.rack.to_string(),
        "--probes".into(),
        format!("{:?}", spec.probes).to_lowercase(),
        "--fanout".into(),
        spec.fanout.to_string(),
        "--etcd".into(),
        cp.etcd.endpoints(),
        "--controllers".into(),
        cp.grpc.join(","),
        "--events".into(),
        events.to_string_lossy().to_string(),
        "--control".into(),
        control.to_string_lossy().to_string(),
        "--unit-port".into(),
        UNIT_PORT.into(),
        "--renew-ms".into(),
        cfg.renew_ms.to_string(),
        "--report-ms".into(),
        cfg.report_ms.to_string(),
    ];
    let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
    let agents = lab.spawn(sim, "agents", &argv, &[("HOLDFAST_LOG", "warn")])?;
    let mut s = Sim {
        lab,
        cp,
        sim,
        events,
        control,
        seen: Vec::new(),
        read: 0,
    };
    let r = drive(&mut s, cfg, &bins, agents);
    let _ = s.send("quit");
    if r.is_err() {
        s.lab.fail("holdfast-ctl-sim failed");
    }
    s.cp.etcd.stop(&mut s.lab);
    s.lab.teardown();
    r
}

fn wait<T>(
    what: &str,
    within: Duration,
    mut f: impl FnMut() -> anyhow::Result<Option<T>>,
) -> anyhow::Result<T> {
    let end = Instant::now() + within;
    loop {
        if let Some(v) = f()? {
            return Ok(v);
        }
        if Instant::now() > end {
            bail!("{what}: not within {within:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn drive(s: &mut Sim, cfg: &Config, bins: &PlaneBins, agents: ProcId) -> anyhow::Result<Report> {
    let setup = Instant::now();
    let ready_within = Duration::from_secs(60 + cfg.fleet.units.len() as u64 / 50);
    wait("every agent attached", ready_within, || {
        if !s.lab.is_running(agents) {
            let (_, err) = s.lab.proc_logs(agents);
            let tail = std::fs::read_to_string(err).unwrap_or_default();
            bail!("the agents process exited: {}", tail.trim());
        }
        Ok(s.poll().iter().find_map(|e| match e {
            Event::Ready { t, .. } => Some(*t),
            _ => None,
        }))
    })?;
    eprintln!(
        "holdfast-ctl-sim: {} hosts, {} units attached in {:.1} s",
        cfg.fleet.spec.hosts,
        cfg.fleet.spec.units,
        setup.elapsed().as_secs_f64()
    );
    let steady = measure_steady(s, cfg)?;
    let mut failures = Vec::new();
    let mut down: Vec<String> = Vec::new();
    for what in &cfg.inject {
        let f = match what.as_str() {
            "host" => {
                let host = cfg.fleet.hosts[1].clone();
                inject_hosts(s, cfg, bins, "host", vec![host], &mut down)?
            }
            "rack" => {
                let rack = cfg
                    .fleet
                    .rack(cfg.fleet.hosts.len().div_ceil(cfg.fleet.spec.rack) - 1);
                let hosts: Vec<String> = rack.into_iter().filter(|h| !down.contains(h)).collect();
                inject_hosts(s, cfg, bins, "rack", hosts, &mut down)?
            }
            "leader" => kill_leader(s, cfg, down.len())?,
            "etcd" => kill_etcd(s, cfg)?,
            other => bail!("--inject {other}: host, rack, leader or etcd"),
        };
        eprintln!("holdfast-ctl-sim: {}", serde_json::to_string(&f)?);
        failures.push(f);
    }
    Ok(Report {
        spec: cfg.fleet.spec,
        agents: cfg.fleet.hosts.len() + cfg.fleet.agent_servers.len(),
        steady,
        failures,
    })
}

fn etcd_revision_and_size(s: &mut Sim) -> (i64, u64) {
    let st = s.cp.etcd.status(&mut s.lab).unwrap_or_default();
    let rev = st.iter().map(|x| x.revision).max().unwrap_or(0);
    let size = st.iter().map(|x| x.db_size).max().unwrap_or(0);
    (rev, size)
}

fn verdicts_since(s: &Sim, t0: u64) -> Vec<Value> {
    let mut out: Vec<Value> = Vec::new();
    let mut seen = BTreeSet::new();
    for st in s.statuses() {
        for v in st["verdicts"].as_array().cloned().unwrap_or_default() {
            let at = v["unix_ms"].as_u64().unwrap_or(0);
            let key = format!("{}{}", v["finding"], at);
            if at >= t0 && seen.insert(key) {
                out.push(v);
            }
        }
    }
    out
}

fn measure_steady(s: &mut Sim, cfg: &Config) -> anyhow::Result<Steady> {
    // Settle first: the attach storm and the first syncs are not the
    // steady state.
    std::thread::sleep(Duration::from_secs(5));
    let (li, _) = s.leader().context("no leader")?;
    let pid = s.lab.pid(s.cp.controllers[li].0);
    let t0 = unix_ms();
    let (rev0, _) = etcd_revision_and_size(s);
    let (cpu0, _) = proc_usage(pid).context("the leader's /proc")?;
    let start = Instant::now();
    s.poll();
    let first_event = s.seen.len();
    std::thread::sleep(cfg.window);
    let secs = start.elapsed().as_secs_f64();
    let (cpu1, rss) = proc_usage(pid).context("the leader's /proc")?;
    let (rev1, db) = etcd_revision_and_size(s);
    s.poll();
    let mut sent = (0u64, 0u64, 0u64, 0u64, 0u64);
    // What the agents' probers hold (with `--probes leader`, the leader's
    // plan as pushed).
    let mut held = (0usize, 0usize);
    for e in &s.seen[first_event..] {
        if let Event::Stats {
            heartbeats,
            measurements,
            discarded,
            renewals,
            renewal_failures,
            targets_host,
            targets_server,
            ..
        } = e
        {
            held = (held.0.max(*targets_host), held.1.max(*targets_server));
            sent.0 += heartbeats;
            sent.1 += measurements;
            sent.2 += renewals;
            sent.3 += renewal_failures;
            sent.4 += discarded;
        }
    }
    let verdicts = verdicts_since(s, t0);
    let plan = cfg.fleet.plan(&cfg.fleet.units, &[]);
    let per_host: Vec<usize> = cfg
        .fleet
        .hosts
        .iter()
        .map(|h| {
            plan.get(&holdfast_control::HostId::new(h.clone()))
                .map_or(0, Vec::len)
        })
        .collect();
    let per_server: Vec<usize> = cfg
        .fleet
        .agent_servers
        .iter()
        .map(|(a, _)| {
            plan.get(&holdfast_control::HostId::new(a.clone()))
                .map_or(0, Vec::len)
        })
        .collect();
    Ok(Steady {
        seconds: secs,
        etcd_writes_per_s: (rev1 - rev0).max(0) as f64 / secs,
        etcd_db_bytes: db,
        leader_cpu_cores: (cpu1 - cpu0) / secs,
        leader_rss_bytes: rss,
        heartbeats_per_s: sent.0 as f64 / secs,
        measurements_per_s: sent.1 as f64 / secs,
        discarded_per_s: sent.4 as f64 / secs,
        renewals_per_s: sent.2 as f64 / secs,
        renewal_failures: sent.3,
        probes_per_host_per_s: per_host.iter().copied().max().unwrap_or(0) as f64 * 10.0,
        probes_per_agent_server_per_s: per_server.iter().copied().max().unwrap_or(0) as f64 * 10.0,
        held_per_host_per_s: held.0 as f64 * 10.0,
        held_per_agent_server_per_s: held.1 as f64 * 10.0,
        verdicts: verdicts.len(),
    })
}

fn inject_hosts(
    s: &mut Sim,
    cfg: &Config,
    bins: &PlaneBins,
    kind: &str,
    hosts: Vec<String>,
    down: &mut Vec<String>,
) -> anyhow::Result<Failure> {
    let before = s.placement(&bins.ctl)?;
    let failed = down_with(down, &hosts);
    let theirs: BTreeSet<String> = before
        .iter()
        .filter(|u| hosts.contains(&u.primary))
        .map(|u| u.name.clone())
        .collect();
    s.poll();
    let mark = s.seen.len();
    s.send(&format!("down {}", hosts.join(" ")))?;
    let t_inject = wait("the injection", Duration::from_secs(5), || {
        Ok(s.poll().iter().find_map(|e| match e {
            Event::Down { t, .. } => Some(*t),
            _ => None,
        }))
    })?;
    let deadline = Instant::now() + cfg.patience;
    let mut takeovers: BTreeMap<String, u64> = BTreeMap::new();
    let mut verdicts: BTreeMap<String, u64> = BTreeMap::new();
    while Instant::now() < deadline
        && (takeovers.len() < theirs.len() || verdicts.len() < hosts.len())
    {
        s.poll();
        for e in &s.seen[mark..] {
            if let Event::Command { t, kind, unit, .. } = e {
                if kind == "takeover" && theirs.contains(unit) {
                    takeovers.entry(unit.clone()).or_insert(*t);
                }
            }
        }
        for v in verdicts_since(s, t_inject) {
            let f = &v["finding"];
            for k in ["host", "host_network"] {
                if let Some(h) = f[k]["host"].as_str() {
                    if hosts.iter().any(|x| x == h) {
                        verdicts
                            .entry(h.to_string())
                            .or_insert(v["unix_ms"].as_u64().unwrap_or(0));
                    }
                }
            }
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    down.extend(hosts.iter().cloned());
    // Let the placement settle (backups replaced) before reading it.
    std::thread::sleep(Duration::from_secs(3));
    let after = s.placement(&bins.ctl)?;
    let moved = before
        .iter()
        .filter(|u| {
            after
                .iter()
                .find(|a| a.name == u.name)
                .is_none_or(|a| a.primary != u.primary || a.backup != u.backup)
        })
        .count();
    // What TRIPOD and the naive choice would move, computed once the
    // failure is handled: a placement over every unit takes this process a
    // core for seconds at 10,000 units, which the controllers it measures
    // need on a machine of two.
    let expected = churn(&cfg.fleet, &before, &failed);
    let first_verdict = verdicts.values().copied().min();
    let last_verdict = verdicts.values().copied().max();
    let last_takeover = takeovers.values().copied().max();
    Ok(Failure {
        kind: kind.into(),
        hosts: hosts.len(),
        units: theirs.len(),
        verdicts: verdicts.len(),
        to_first_verdict_ms: first_verdict.map(|v| v.saturating_sub(t_inject)),
        to_last_verdict_ms: last_verdict.map(|v| v.saturating_sub(t_inject)),
        takeovers: Takeover {
            commanded: takeovers.len(),
            to_last_ms: last_takeover.map(|t| t.saturating_sub(t_inject)),
            after_last_verdict_ms: match (last_takeover, last_verdict) {
                (Some(t), Some(v)) => Some(t as i64 - v as i64),
                _ => None,
            },
        },
        moved,
        churn: Some(expected),
        ..Failure::default()
    })
}

fn down_with(down: &[String], hosts: &[String]) -> Vec<String> {
    down.iter().chain(hosts).cloned().collect()
}

fn kill_leader(s: &mut Sim, cfg: &Config, down: usize) -> anyhow::Result<Failure> {
    let (li, st) = s.leader().context("no leader")?;
    let token = st["token"].as_i64().unwrap_or(0);
    let live = cfg.fleet.hosts.len() + cfg.fleet.agent_servers.len() - down;
    s.poll();
    let mark = s.seen.len();
    let p = s.cp.controllers[li].0;
    let t0 = unix_ms();
    s.lab.kill(p, Signal::Kill);
    let elected = wait("a new leader", cfg.patience, || {
        Ok(s.leader()
            .filter(|(i, v)| *i != li && v["token"].as_i64().unwrap_or(0) > token)
            .map(|_| unix_ms()))
    });
    let mut attached: BTreeMap<String, u64> = BTreeMap::new();
    let deadline = Instant::now() + cfg.patience;
    let new_leader = s.leader().map(|(i, _)| i);
    while Instant::now() < deadline && attached.len() < live {
        s.poll();
        for e in &s.seen[mark..] {
            if let Event::Attached { t, host, url } = e {
                if new_leader.is_some_and(|i| url == &s.cp.grpc[i]) {
                    attached.entry(host.clone()).or_insert(*t);
                }
            }
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    restart_controller(s, li)?;
    Ok(Failure {
        kind: "leader".into(),
        to_new_leader_ms: elected.ok().map(|t| t.saturating_sub(t0)),
        agents_attached: Some(attached.len()),
        agents_live: Some(live),
        to_all_attached_ms: (attached.len() >= live)
            .then(|| attached.values().max().map(|t| t.saturating_sub(t0)))
            .flatten(),
        ..Failure::default()
    })
}

fn restart_controller(s: &mut Sim, i: usize) -> anyhow::Result<()> {
    let argv = s.cp.controller_argv[i].clone();
    let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
    let h = s.cp.controller_hosts[i];
    let p = s.lab.spawn(
        h,
        &format!("controller-c{}-again", i + 1),
        &argv,
        &[("HOLDFAST_LOG", "info")],
    )?;
    s.cp.controllers[i].0 = p;
    Ok(())
}

fn kill_etcd(s: &mut Sim, cfg: &Config) -> anyhow::Result<Failure> {
    let member =
        s.cp.etcd
            .leader(&mut s.lab)?
            .context("etcd has no leader")?;
    let before = s
        .leader()
        .map(|(i, v)| (i, v["token"].as_i64().unwrap_or(0)));
    let t0 = unix_ms();
    s.cp.etcd.kill(&mut s.lab, member)?;
    let back = s.cp.etcd.wait_leader(&mut s.lab, cfg.patience);
    let t_back = unix_ms();
    // Watch what it costs for a while: hosts taken for failed, a change of
    // the controllers' leader.
    std::thread::sleep(Duration::from_secs(8));
    let verdicts = verdicts_since(s, t0)
        .into_iter()
        .filter(|v| v["kind"].is_string())
        .count();
    let after = s
        .leader()
        .map(|(i, v)| (i, v["token"].as_i64().unwrap_or(0)));
    s.cp.etcd.restart(&mut s.lab, member)?;
    Ok(Failure {
        kind: "etcd".into(),
        to_new_leader_ms: back.ok().map(|_| t_back.saturating_sub(t0)),
        verdicts,
        leader_changed: Some(before != after),
        ..Failure::default()
    })
}

/// Where the report goes.
pub fn write_report(path: &Path, r: &Report) -> anyhow::Result<()> {
    std::fs::write(path, serde_json::to_string_pretty(r)?)?;
    Ok(())
}
