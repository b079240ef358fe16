//! The state file of `holdfast lab` ([`LabState`]: what `up` built, with every process
//! and its pid, which host holds the service address, what failed) and where the
//! scenarios are found ([`find_scenario`], [`list_scenarios`]).

use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use holdfast_lab::{io_ctx, list_netns, parse_err, run_id_of, KeptLab, LabError, Result};
use serde::{Deserialize, Serialize};

use super::report::FailReport;
use crate::scenario::{Scenario, SCENARIO_FILE};

/// Version of the state file format.
pub const STATE_VERSION: u32 = 2;

/// The failure kinds of TENSOR's Table 1, and the planned switchover: every way a
/// unit's primary is moved by the controller.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum FailureKind {
    /// The daemon: SIGKILL the unit's holdfastd process.
    Application,
    /// The container: SIGKILL every process in the unit's container, which is deleted.
    Container,
    /// The host: every process of the host and its containers (its agent too), and
    /// every link down (the management network's too).
    Host,
    /// The host's network: its and its containers' `lan` ports down; its processes
    /// stay up, the management network too.
    HostNetwork,
    /// Not a failure: a planned switchover (`holdfast ctl switchover UNIT`).
    Switchover,
}

impl FailureKind {
    /// The four failures, in Table 1's order.
    pub const ALL: [FailureKind; 4] = [
        FailureKind::Application,
        FailureKind::Container,
        FailureKind::Host,
        FailureKind::HostNetwork,
    ];

    /// Every takeover kind: the four failures and the planned switchover.
    pub const EVERY: [FailureKind; 5] = [
        FailureKind::Application,
        FailureKind::Container,
        FailureKind::Host,
        FailureKind::HostNetwork,
        FailureKind::Switchover,
    ];

    /// `application`, `container`, `host`, `host-network`, `switchover`.
    pub fn name(self) -> &'static str {
        match self {
            FailureKind::Application => "application",
            FailureKind::Container => "container",
            FailureKind::Host => "host",
            FailureKind::HostNetwork => "host-network",
            FailureKind::Switchover => "switchover",
        }
    }

    /// Whether the target is a host (else a holdfastd unit).
    pub fn targets_host(self) -> bool {
        matches!(self, FailureKind::Host | FailureKind::HostNetwork)
    }

    /// The controller's finding for it (`None`: the switchover, nothing to find).
    pub fn finding(self) -> Option<&'static str> {
        match self {
            FailureKind::Application => Some("application"),
            FailureKind::Container => Some("container"),
            FailureKind::Host => Some("host"),
            FailureKind::HostNetwork => Some("host_network"),
            FailureKind::Switchover => None,
        }
    }
}

impl fmt::Display for FailureKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for FailureKind {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        FailureKind::EVERY
            .into_iter()
            .find(|k| k.name() == s || (s == "host_network" && *k == FailureKind::HostNetwork))
            .ok_or_else(|| {
                format!(
                    "unknown failure kind `{s}` (application, container, host, host-network, switchover)"
                )
            })
    }
}

/// The Redis unit's processes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RedisRecord {
    /// Lab process index.
    pub proc: usize,
    /// How many times it was started.
    pub starts: u32,
}

/// A peer unit's processes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PeerRecord {
    /// Unit name (as in the scenario).
    pub name: String,
    /// Lab process indexes (in the order the driver started them).
    pub procs: Vec<usize>,
    /// Their pids.
    pub pids: Vec<u32>,
}

/// One holdfastd process of a unit, run by its host's agent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UnitProc {
    /// Process name (`<unit>_<n>`: the n-th start).
    pub name: String,
    /// Host it runs on (in the unit's container there).
    pub host: String,
    /// Its pid (as the agent reports it).
    pub pid: u32,
}

/// A holdfastd unit: its current primary and its backup host, as the controller
/// placed them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UnitRecord {
    /// Unit name (as in the scenario).
    pub name: String,
    /// The configuration every process of the unit runs with.
    pub config: String,
    /// Processes started so far (the next one is `<unit>_<generation>`).
    pub generation: u32,
    /// The primary.
    pub primary: UnitProc,
    /// Where the next takeover goes (the controller's placement; empty: none).
    pub backup_host: String,
}

/// A host that [`super::fail`] took down and [`super::heal`] has not brought back
/// (nor `holdfast ctl reset`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FailedHost {
    /// Host name.
    pub host: String,
    /// How it failed.
    pub kind: FailureKind,
}

/// The state file: everything later invocations need.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct LabState {
    /// [`STATE_VERSION`].
    pub version: u32,
    /// The scenario file it was built from.
    pub scenario_file: PathBuf,
    /// The scenario, as it was when built.
    pub scenario: Scenario,
    /// Namespaces, links, bridges, processes (for [`holdfast_lab::Lab::adopt`]).
    pub lab: KeptLab,
    /// The Redis unit.
    pub redis: RedisRecord,
    /// The peer units.
    pub peers: Vec<PeerRecord>,
    /// The holdfastd units.
    pub units: Vec<UnitRecord>,
    /// The control plane: etcd, the controllers, the agents, the containers.
    pub plane: super::plane::PlaneRecord,
    /// The host holding the service address.
    pub service_host: String,
    /// Hosts down after `host` / `host-network` failures.
    pub failed_hosts: Vec<FailedHost>,
    /// Every failure injected, in order.
    pub history: Vec<FailReport>,
    /// When `up` finished (ms since the Unix epoch).
    pub up_unix_ms: u64,
}

pub(super) fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

pub(crate) fn ms(d: Duration) -> f64 {
    (d.as_secs_f64() * 10_000.0).round() / 10.0
}

impl LabState {
    /// Reads a state file.
    pub fn load(path: &Path) -> Result<LabState> {
        let text = match std::fs::read_to_string(path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(LabError::Invalid(format!(
                    "no lab is up (no state file {}): `holdfast lab up SCENARIO` first",
                    path.display()
                )))
            }
            Err(e) => return Err(io_ctx(format!("reading lab state {}", path.display()))(e)),
        };
        let st: LabState = serde_json::from_str(&text)
            .map_err(|e| parse_err(format!("lab state {}", path.display()), e.to_string()))?;
        if st.version != STATE_VERSION {
            return Err(LabError::Invalid(format!(
                "lab state {} has version {}, this build reads {STATE_VERSION}",
                path.display(),
                st.version
            )));
        }
        Ok(st)
    }

    /// Writes the state file atomically (a temporary file renamed over it).
    pub fn write(&self, path: &Path) -> Result<()> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(io_ctx(format!("creating {}", dir.display())))?;
        }
        let text = serde_json::to_string_pretty(self)
            .map_err(|e| LabError::Invalid(format!("serialising the lab state: {e}")))?;
        let tmp = path.with_extension("json.tmp");
        std::fs::write(&tmp, text).map_err(io_ctx(format!("writing {}", tmp.display())))?;
        std::fs::rename(&tmp, path).map_err(io_ctx(format!("renaming {}", tmp.display())))
    }

    /// Namespaces of this run that exist now.
    pub fn live_namespaces(&self) -> Result<Vec<String>> {
        Ok(list_netns()?
            .into_iter()
            .filter(|n| run_id_of(n) == Some(self.lab.run_id.as_str()))
            .collect())
    }

    /// The namespace of host `name`.
    pub fn netns(&self, host: &str) -> Option<&str> {
        self.lab
            .hosts
            .iter()
            .find(|h| h.name == host)
            .map(|h| h.netns.as_str())
    }

    /// The bridge port of host `name`: (its interface, the switch-side interface, the
    /// switch namespace).
    pub fn bridge_port(&self, name: &str) -> Option<(&str, &str, &str)> {
        let idx = self.lab.hosts.iter().position(|h| h.name == name)?;
        self.lab.bridges.iter().find_map(|b| {
            b.ports
                .iter()
                .find(|p| p.host.index() == idx)
                .map(|p| (p.host_if.as_str(), p.switch_if.as_str(), b.netns.as_str()))
        })
    }

    /// The unit named `name`.
    pub fn unit(&self, name: &str) -> Option<&UnitRecord> {
        self.units.iter().find(|u| u.name == name)
    }

    /// How host `name` failed, if it is down.
    pub fn failed(&self, host: &str) -> Option<FailureKind> {
        self.failed_hosts
            .iter()
            .find(|f| f.host == host)
            .map(|f| f.kind)
    }
}

/// The state file to use: `$HOLDFAST_LAB_STATE`, else
/// `$HOLDFAST_LAB_DIR/holdfast-lab-state.json`, else `/run/holdfast-lab/state.json`.
pub fn default_state_file() -> PathBuf {
    if let Some(p) = std::env::var_os("HOLDFAST_LAB_STATE") {
        return PathBuf::from(p);
    }
    if let Some(d) = std::env::var_os("HOLDFAST_LAB_DIR") {
        return PathBuf::from(d).join("holdfast-lab-state.json");
    }
    PathBuf::from("/run/holdfast-lab/state.json")
}

/// Directories searched for `<name>/scenario.toml`: `$HOLDFAST_LAB_SCENARIOS`,
/// `./lab/scenarios`, `lab/scenarios` of the workspace the running binary was built in
/// (`<exe>/../../../lab/scenarios`), and the one this crate was built from.
pub fn scenario_dirs() -> Vec<PathBuf> {
    let mut v = Vec::new();
    if let Some(p) = std::env::var_os("HOLDFAST_LAB_SCENARIOS") {
        v.push(PathBuf::from(p));
    }
    v.push(PathBuf::from("lab/scenarios"));
    if let Some(root) = std::env::current_exe()
        .ok()
        .and_then(|e| e.parent()?.parent()?.parent().map(Path::to_path_buf))
    {
        v.push(root.join("lab/scenarios"));
    }
    v.push(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../lab/scenarios"));
    v.retain(|d| d.is_dir());
    v
}

/// The scenario file for `arg`: a `scenario.toml` path, a directory holding one, or the
/// name of a directory in [`scenario_dirs`].
pub fn find_scenario(arg: &str) -> Result<PathBuf> {
    let p = Path::new(arg);
    if p.is_file() {
        return Ok(p.to_path_buf());
    }
    if p.join(SCENARIO_FILE).is_file() {
        return Ok(p.join(SCENARIO_FILE));
    }
    let dirs = scenario_dirs();
    for d in &dirs {
        let f = d.join(arg).join(SCENARIO_FILE);
        if f.is_file() {
            return Ok(f);
        }
    }
    let names: Vec<String> = list_scenarios().into_iter().map(|s| s.0).collect();
    Err(LabError::Invalid(format!(
        "no scenario `{arg}` (searched {}; known: {})",
        dirs.iter()
            .map(|d| d.display().to_string())
            .collect::<Vec<_>>()
            .join(", "),
        names.join(", ")
    )))
}

/// The shipped scenarios: (directory name, file, description or the parse error).
pub fn list_scenarios() -> Vec<(String, PathBuf, String)> {
    let mut out: Vec<(String, PathBuf, String)> = Vec::new();
    for d in scenario_dirs() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        let mut found: Vec<(String, PathBuf, String)> = entries
            .flatten()
            .map(|e| e.path().join(SCENARIO_FILE))
            .filter(|f| f.is_file())
            .filter_map(|f| {
                let name = f.parent()?.file_name()?.to_string_lossy().into_owned();
                let desc = match Scenario::load(&f) {
                    Ok(s) => s.description,
                    Err(e) => format!("INVALID: {e}"),
                };
                Some((name, f, desc))
            })
            .collect();
        found.sort();
        for f in found {
            if !out.iter().any(|o| o.0 == f.0) {
                out.push(f);
            }
        }
    }
    out
}
