//! What `holdfast lab` commands report: the serde types behind `--json` and their
//! text form.

use std::fmt::{self, Write as _};
use std::net::IpAddr;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use super::state::FailureKind;

/// A takeover's phases in milliseconds, from the end of the injection (the lab's
/// clock), and the controller's own detection time.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct PhaseMs {
    /// The controller's own detection and localization time (its verdict's
    /// `detection_ms`: from its first bad measurement to the verdict); 0 for a
    /// switchover.
    pub detection: f64,
    /// Until the controller recorded its verdict (0 for a switchover).
    pub verdict: f64,
    /// Until the new holdfastd process started (its `/proc` start time).
    pub started: f64,
    /// Until the lab saw every session Established at the new primary.
    pub established: f64,
    /// Until the new primary was PROTECTED.
    pub protected: f64,
}

/// A takeover by the controller.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TakeoverReport {
    /// The unit.
    pub unit: String,
    /// Host of the old primary.
    pub from_host: String,
    /// Host of the new primary (holds the service address now).
    pub to_host: String,
    /// The old primary.
    pub old_process: String,
    /// Its pid.
    pub old_pid: u32,
    /// The new primary.
    pub new_process: String,
    /// Its pid.
    pub new_pid: u32,
    /// The controller's verdict, as its status file shows it (`None` for a
    /// switchover).
    pub verdict: Option<Value>,
    /// The leading replica.
    pub leader: Option<String>,
    /// The phases.
    pub phases_ms: PhaseMs,
    /// holdfastd's own phases (`show nsr --json`, `takeover`).
    pub holdfastd: Option<holdfast_api::TakeoverTimes>,
    /// The new backup host the controller placed (empty: none).
    pub new_backup: String,
}

/// What `lab fail` did.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FailReport {
    /// The kind.
    pub kind: FailureKind,
    /// The target as given.
    pub target: String,
    /// The host hit.
    pub host: String,
    /// When (ms since the Unix epoch).
    pub at_unix_ms: u64,
    /// What was done, one line each.
    pub injected: Vec<String>,
    /// Pids SIGKILLed.
    pub killed_pids: Vec<u32>,
    /// How long the injection took.
    pub inject_ms: f64,
    /// The controller's own detection and localization time (its verdict's
    /// `detection_ms`).
    #[serde(default)]
    pub detected_ms: Option<f64>,
    /// The controller's finding and its vantage points.
    #[serde(default)]
    pub detector: Option<String>,
    /// The takeover, when the failure hit a primary.
    pub takeover: Option<TakeoverReport>,
}

/// What `lab heal` did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HealReport {
    /// The host.
    pub host: String,
    /// How it had failed.
    pub kind: FailureKind,
    /// What was done, one line each.
    pub actions: Vec<String>,
}

/// What `lab down` did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DownReport {
    /// The run torn down, if there was a state file.
    pub run_id: Option<String>,
    /// Its scenario.
    pub scenario: Option<String>,
    /// Its namespaces that existed.
    pub namespaces: Vec<String>,
    /// Pids it had (recorded, and found in its namespaces).
    pub pids: Vec<u32>,
    /// Namespaces of crashed runs removed by [`holdfast_lab::cleanup_stale`].
    pub stale_removed: usize,
    /// Work directories of crashed `lab up` runs removed.
    pub stale_work_dirs: Vec<PathBuf>,
    /// Remarks.
    pub notes: Vec<String>,
}

/// The service address.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ServiceStatus {
    /// IPv4.
    pub v4: IpAddr,
    /// IPv6.
    pub v6: IpAddr,
    /// The host the state says holds it.
    pub host: String,
    /// Speaker hosts where `ip addr` shows it.
    pub on: Vec<String>,
}

/// One host.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct HostStatus {
    /// Name.
    pub name: String,
    /// Namespace.
    pub netns: String,
    /// Whether the namespace exists.
    pub exists: bool,
    /// Its IPv4 address.
    pub v4: IpAddr,
    /// Failed and not healed.
    pub failed: Option<FailureKind>,
    /// Operational state of its bridge interface.
    pub link: Option<String>,
    /// Operational state of the switch side of its bridge port.
    pub bridge_port: Option<String>,
    /// Processes in its namespace.
    pub pids: Vec<u32>,
}

/// One unit (or holdfastd process).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct UnitStatus {
    /// Name (holdfastd: the process name `<unit>_<n>`).
    pub name: String,
    /// `redis`, `holdfastd`, or the peer kind.
    pub kind: String,
    /// holdfastd: `primary` or `fenced`.
    pub role: Option<String>,
    /// Host.
    pub host: String,
    /// Its namespace.
    pub netns: String,
    /// Recorded pids.
    pub pids: Vec<u32>,
    /// Whether every recorded process is alive.
    pub running: bool,
    /// redis: url, ping; peers: sessions (their own CLI); holdfastd: summary, neighbors,
    /// nsr (control socket).
    pub detail: Value,
    /// Why the detail is missing.
    pub error: Option<String>,
}

/// The control plane's state.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ControlStatus {
    /// etcd's client URLs.
    pub etcd: String,
    /// The leading replica.
    pub leader: Option<String>,
    /// Each replica: name, role, pid, running.
    pub replicas: Vec<Value>,
    /// Each agent: host, pid, running, attached to the leader, its units.
    pub agents: Vec<Value>,
    /// `holdfast ctl units` (the placements).
    pub units: Value,
    /// The controller's last verdicts.
    pub verdicts: Vec<Value>,
}

/// What `lab status` shows.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Status {
    /// Every unit runs, every peer's session with the service address is Established
    /// (by its own CLI), the primary is PROTECTED with every session Established.
    pub healthy: bool,
    /// Scenario name.
    pub scenario: String,
    /// Its file.
    pub scenario_file: PathBuf,
    /// Run id.
    pub run_id: String,
    /// The state file.
    pub state_file: PathBuf,
    /// Work directory (logs, pcaps, configs).
    pub work_dir: PathBuf,
    /// The service address.
    pub service: ServiceStatus,
    /// Hosts.
    pub hosts: Vec<HostStatus>,
    /// The Redis unit.
    pub redis: UnitStatus,
    /// Peer units.
    pub peers: Vec<UnitStatus>,
    /// holdfastd processes (the primary).
    pub holdfastd: Vec<UnitStatus>,
    /// The control plane: the replicas, the leader, the agents.
    pub control: ControlStatus,
    /// Failures injected so far.
    pub failures: Vec<FailReport>,
}

impl Status {
    pub(super) fn compute_healthy(&self) -> bool {
        let peers_ok = self
            .peers
            .iter()
            .all(|p| p.running && p.detail["service_session"]["established"] == json!(true));
        let primary_ok = self
            .holdfastd
            .iter()
            .filter(|u| u.role.as_deref() == Some("primary"))
            .all(|u| {
                u.running
                    && u.detail["nsr"]["protected"] == json!(true)
                    && u.detail["neighbors"]
                        .as_array()
                        .is_some_and(|ns| ns.iter().all(|n| n["state"] == "Established"))
            });
        let agents_ok = self
            .control
            .agents
            .iter()
            .all(|a| a["running"] == json!(true) || a["failed"] == json!(true));
        self.redis.running && peers_ok && primary_ok && self.control.leader.is_some() && agents_ok
    }
}

fn opt<T: fmt::Display>(v: &Option<T>) -> String {
    v.as_ref().map_or("-".into(), |x| x.to_string())
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "lab `{}` (run {}): {}",
            self.scenario,
            self.run_id,
            if self.healthy { "healthy" } else { "DEGRADED" }
        )?;
        writeln!(
            f,
            "  state {}  work dir {}",
            self.state_file.display(),
            self.work_dir.display()
        )?;
        writeln!(
            f,
            "  service address {} / {} on {} (ip addr: {})",
            self.service.v4,
            self.service.v6,
            self.service.host,
            if self.service.on.is_empty() {
                "nowhere".into()
            } else {
                self.service.on.join(", ")
            }
        )?;
        writeln!(f, "hosts:")?;
        for h in &self.hosts {
            writeln!(
                f,
                "  {:<10} {:<15} {:<20} link {:<14} bridge port {:<6} {} process(es){}{}",
                h.name,
                h.v4,
                h.netns,
                opt(&h.link),
                opt(&h.bridge_port),
                h.pids.len(),
                if h.exists { "" } else { "  NAMESPACE MISSING" },
                h.failed
                    .map(|k| format!("  FAILED ({k})"))
                    .unwrap_or_default()
            )?;
        }
        writeln!(f, "units:")?;
        let units = std::iter::once(&self.redis)
            .chain(&self.peers)
            .chain(&self.holdfastd);
        for u in units {
            let kind = match &u.role {
                Some(r) => format!("{} ({r})", u.kind),
                None => u.kind.clone(),
            };
            writeln!(
                f,
                "  {:<10} {:<20} on {:<8} pid {:<14} {}",
                u.name,
                kind,
                u.host,
                u.pids
                    .iter()
                    .map(u32::to_string)
                    .collect::<Vec<_>>()
                    .join(","),
                if u.running { "running" } else { "NOT RUNNING" }
            )?;
            if let Some(e) = &u.error {
                writeln!(f, "      error: {e}")?;
            }
            let d = &u.detail;
            match u.kind.as_str() {
                "redis" => {
                    writeln!(
                        f,
                        "      {} ping {}",
                        d["url"].as_str().unwrap_or("-"),
                        d["ping"]
                    )?;
                }
                "holdfastd" => {
                    if let Some(s) = d.get("summary") {
                        writeln!(
                            f,
                            "      summary: router id {} AS {}, {} of {} sessions Established, Loc-RIB {}",
                            s["router_id"].as_str().unwrap_or("-"),
                            s["asn"],
                            s["neighbors_established"],
                            s["neighbors_total"],
                            s["loc_rib_routes"]
                        )?;
                    }
                    for n in d["neighbors"].as_array().into_iter().flatten() {
                        writeln!(
                            f,
                            "      neighbor {:<16} AS {:<6} {:<12} rx {} tx {}",
                            n["address"].as_str().unwrap_or("-"),
                            n["remote_as"],
                            n["state"].as_str().unwrap_or("-"),
                            n["prefixes_received"],
                            n["prefixes_advertised"]
                        )?;
                    }
                    if let Some(n) = d.get("nsr") {
                        writeln!(
                            f,
                            "      nsr: instance {} role {} epoch {} (store {}) {}",
                            n["instance"].as_str().unwrap_or("-"),
                            n["role"].as_str().unwrap_or("-"),
                            n["epoch"],
                            n["store_epoch"],
                            if n["protected"] == json!(true) {
                                "PROTECTED"
                            } else {
                                "UNPROTECTED"
                            }
                        )?;
                        if let Some(t) = n.get("takeover").filter(|t| !t.is_null()) {
                            writeln!(f, "      nsr takeover: {t}")?;
                        }
                    }
                }
                _ => {
                    for s in d["sessions"].as_array().into_iter().flatten() {
                        writeln!(
                            f,
                            "      session {:<16} {:<12} up {}s rx {} tx {} (peer's own CLI)",
                            s["neighbor"].as_str().unwrap_or("-"),
                            s["state"].as_str().unwrap_or("-"),
                            s["uptime_secs"],
                            s["prefixes_received"],
                            s["prefixes_sent"]
                        )?;
                    }
                    let b = &d["service_bfd"];
                    if !b.is_null() {
                        writeln!(
                            f,
                            "      BFD with the service address: {} at {} ms (peer's own CLI)",
                            b["state"].as_str().unwrap_or("-"),
                            b["tx_interval_ms"]
                        )?;
                    }
                }
            }
        }
        let c = &self.control;
        writeln!(
            f,
            "control plane: etcd {}, leader {}",
            c.etcd,
            c.leader.as_deref().unwrap_or("NONE")
        )?;
        for r in &c.replicas {
            writeln!(
                f,
                "  controller {:<4} {:<15} pid {:<8} {}",
                r["name"].as_str().unwrap_or("-"),
                r["role"].as_str().unwrap_or("-"),
                r["pid"],
                if r["running"] == json!(true) {
                    "running"
                } else {
                    "NOT RUNNING"
                }
            )?;
        }
        for a in &c.agents {
            writeln!(
                f,
                "  agent on {:<4} pid {:<8} {:<11} {} units {}",
                a["host"].as_str().unwrap_or("-"),
                a["pid"],
                if a["running"] == json!(true) {
                    "running"
                } else {
                    "NOT RUNNING"
                },
                if a["attached"] == json!(true) {
                    "attached"
                } else {
                    "not attached"
                },
                a["units"]
            )?;
        }
        writeln!(f, "  placements: {}", c.units)?;
        if !self.failures.is_empty() {
            writeln!(f, "failures:")?;
            for r in &self.failures {
                let t = r
                    .takeover
                    .as_ref()
                    .map(|t| {
                        format!(
                            "takeover {} -> {}: verdict after {} ms, PROTECTED after {} ms",
                            t.from_host, t.to_host, t.phases_ms.verdict, t.phases_ms.protected
                        )
                    })
                    .unwrap_or_else(|| "no takeover".into());
                writeln!(f, "  {:<13} {:<8} {t}", r.kind.name(), r.target)?;
            }
        }
        Ok(())
    }
}

impl fmt::Display for FailReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "{} failure of `{}` (host {}), injected in {} ms:",
            self.kind, self.target, self.host, self.inject_ms
        )?;
        for l in &self.injected {
            writeln!(f, "  {l}")?;
        }
        if let (Some(d), Some(p)) = (self.detected_ms, &self.detector) {
            writeln!(
                f,
                "detected in {d:.1} ms (the controller's own figure): {p}"
            )?;
        }
        let Some(t) = &self.takeover else {
            return writeln!(f, "no holdfastd primary was hit: no takeover");
        };
        writeln!(
            f,
            "takeover of `{}` by the controller (leader {}): {} (pid {}) on {} -> {} (pid {}) on {}; new backup {}",
            t.unit,
            t.leader.as_deref().unwrap_or("?"),
            t.old_process,
            t.old_pid,
            t.from_host,
            t.new_process,
            t.new_pid,
            t.to_host,
            if t.new_backup.is_empty() { "none" } else { &t.new_backup }
        )?;
        let p = &t.phases_ms;
        writeln!(
            f,
            "  controller's detection {} ms; from the injection: verdict {} ms, new holdfastd started {} ms, Established {} ms, PROTECTED {} ms",
            p.detection, p.verdict, p.started, p.established, p.protected
        )?;
        match &t.holdfastd {
            Some(h) => writeln!(
                f,
                "  holdfastd: {} session(s), {} route(s); claim {} us, load {} us, address wait {} us, TCP restore {} us (max {} us/session), resumed at {} us, tables at {} us",
                h.sessions,
                h.routes,
                h.claim_us,
                h.load_us,
                h.address_wait_us,
                h.tcp_restore_us,
                h.tcp_restore_max_us,
                h.resumed_us,
                h.tables_us
            )?,
            None => writeln!(f, "  holdfastd: no takeover figures")?,
        }
        writeln!(f, "service address now on {}", t.to_host)
    }
}

impl fmt::Display for HealReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "healed {} (after a {} failure):", self.host, self.kind)?;
        for a in &self.actions {
            writeln!(f, "  {a}")?;
        }
        Ok(())
    }
}

impl fmt::Display for DownReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut s = String::new();
        match (&self.run_id, &self.scenario) {
            (Some(id), Some(sc)) => {
                let _ = writeln!(
                    s,
                    "lab `{sc}` (run {id}) torn down: {} namespace(s), {} process(es)",
                    self.namespaces.len(),
                    self.pids.len()
                );
            }
            _ => s.push_str("no lab was up\n"),
        }
        let _ = writeln!(
            s,
            "stale cleanup: {} namespace(s) and {} work dir(s) of crashed runs removed",
            self.stale_removed,
            self.stale_work_dirs.len()
        );
        for n in &self.notes {
            let _ = writeln!(s, "note: {n}");
        }
        f.write_str(&s)
    }
}
