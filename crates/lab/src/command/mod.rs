//! `holdfast lab`: a [`Scenario`] brought up, inspected, failed and torn down by
//! separate invocations, which share a state file.
//!
//! * [`up`] builds the scenario (namespaces on one bridge, Redis, holdfastd primary,
//!   peers), waits until every session is Established and the unit PROTECTED, keeps it
//!   running ([`Lab::keep`]) and writes a [`LabState`] (run id, namespaces, processes
//!   with their pids, addresses, which host holds the service address).
//! * [`status`] reads it back: every unit's processes (alive?), holdfastd's `show
//!   summary` / `show nsr` over its control socket, each peer's sessions through its own
//!   CLI, the hosts' links.
//! * [`fail`] injects one failure of TENSOR's Table 1 ([`FailureKind`]) and, when it hit
//!   the primary, takes over onto the backup through the [`Orchestrator`] trait
//!   ([`LabOrchestrator`] today, a controller later). The state then records the new
//!   primary and the host holding the service address.
//! * [`heal`] brings a failed host back (kills what a host-network failure left fenced
//!   on it, removes a stale service address, links up), so it can be the backup again.
//! * [`down`] tears the lab down from the state file and always runs
//!   [`cleanup_stale`], which removes what any crashed run left.
//!
//! The state file is `$HOLDFAST_LAB_STATE`, else `$HOLDFAST_LAB_DIR/holdfast-lab-state.json`
//! when `HOLDFAST_LAB_DIR` is set, else `/run/holdfast-lab/state.json`
//! ([`default_state_file`]). One lab per state file.

use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use holdfast_api::{Body, NeighborInfo, NsrStatus, Request, Summary};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use crate::cmd::{require_tool, send_signal, Signal};
use crate::detect::Probe;
use crate::error::{io_ctx, parse_err, LabError, Result};
use crate::holdfast::{find_binary, Holdfastd};
use crate::lab::{HostId, IfAddr, KeptLab, Lab, ProcId};
use crate::nsr::{Fence, LabOrchestrator, NsrHost, NsrTopo, Orchestrator, NSR_V4_LEN, NSR_V6_LEN};
use crate::peer::{self, Bird, Exabgp, Frr, Gobgp, Peer, PeerKind, PeerSpec, SessionView};
use crate::redis::Redis;
use crate::scenario::{parse_peer_kind, Scenario, SCENARIO_FILE};
use crate::stale::{cleanup_stale, list_netns, netns_pids, run_id_of};
use crate::wait::{wait_for_every, wait_ok};

/// Version of the state file format.
pub const STATE_VERSION: u32 = 1;
/// Name of the bridge every scenario host is on.
pub const BRIDGE_NAME: &str = "lan";
/// Deadline of each wait of [`up`] (sessions Established, routes exchanged, PROTECTED).
pub const UP_TIMEOUT: Duration = Duration::from_secs(90);
/// Deadline for the new primary to be PROTECTED after a takeover.
const PROTECTED_TIMEOUT: Duration = Duration::from_secs(30);
/// What the lab's name (and so its work directory, `holdfast-lab-lab_<scenario>-<run>`)
/// starts with.
const WORK_DIR_PREFIX: &str = "lab_";
/// Deadline for killed processes to be gone.
const KILL_TIMEOUT: Duration = Duration::from_secs(5);
/// The closed port the host probe connects to (the discard service; nothing listens).
const DETECT_PORT: u16 = 9;

/// The failure kinds of TENSOR's Table 1.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum FailureKind {
    /// The daemon: SIGKILL the unit's holdfastd process.
    Application,
    /// The container: SIGKILL every process in the unit's namespace.
    Container,
    /// The host: every process of every unit on the host, and its links down.
    Host,
    /// The host's network: its bridge port down; its processes stay up, cut off.
    HostNetwork,
}

impl FailureKind {
    /// All four, in Table 1's order.
    pub const ALL: [FailureKind; 4] = [
        FailureKind::Application,
        FailureKind::Container,
        FailureKind::Host,
        FailureKind::HostNetwork,
    ];

    /// `application`, `container`, `host`, `host-network`.
    pub fn name(self) -> &'static str {
        match self {
            FailureKind::Application => "application",
            FailureKind::Container => "container",
            FailureKind::Host => "host",
            FailureKind::HostNetwork => "host-network",
        }
    }

    /// Whether the target is a host (else a holdfastd unit).
    pub fn targets_host(self) -> bool {
        matches!(self, FailureKind::Host | FailureKind::HostNetwork)
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
        FailureKind::ALL
            .into_iter()
            .find(|k| k.name() == s || (s == "host_network" && *k == FailureKind::HostNetwork))
            .ok_or_else(|| {
                format!("unknown failure kind `{s}` (application, container, host, host-network)")
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

/// One holdfastd process of a unit.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UnitProc {
    /// Process name (`<unit>_<n>`; also its work directory).
    pub name: String,
    /// Host it runs on.
    pub host: String,
    /// Lab process index.
    pub proc: usize,
    /// Its pid.
    pub pid: u32,
}

/// A holdfastd unit: its current primary, its backup host, and old primaries left
/// alive (but fenced) by a host-network failure.
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
    /// Where the next takeover goes.
    pub backup_host: String,
    /// Old primaries cut off by a host-network failure: alive, fenced by the store's
    /// epoch; [`heal`] kills them before their host is reconnected.
    pub fenced: Vec<UnitProc>,
}

/// A host that [`fail`] took down and [`heal`] has not brought back.
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
    /// Namespaces, links, bridges, processes (for [`Lab::adopt`]).
    pub lab: KeptLab,
    /// The Redis unit.
    pub redis: RedisRecord,
    /// The peer units.
    pub peers: Vec<PeerRecord>,
    /// The holdfastd units.
    pub units: Vec<UnitRecord>,
    /// The host holding the service address.
    pub service_host: String,
    /// Hosts down after `host` / `host-network` failures.
    pub failed_hosts: Vec<FailedHost>,
    /// Every failure injected, in order.
    pub history: Vec<FailReport>,
    /// When `up` finished (ms since the Unix epoch).
    pub up_unix_ms: u64,
}

fn unix_ms() -> u64 {
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
                .find(|p| p.host.0 == idx)
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

/// The NSR topology of a built scenario: `a` = the unit's first primary host, `b` = its
/// first backup host, `redis` = the Redis host, `peer` = the host of its first
/// neighbour, `feed` = another host (or `peer`).
fn topo_of(lab: &Lab, sc: &Scenario) -> Result<NsrTopo> {
    let (bridge, info) = lab
        .bridges()
        .find(|(_, b)| b.name == BRIDGE_NAME)
        .ok_or_else(|| LabError::Invalid(format!("no bridge `{BRIDGE_NAME}` in the lab")))?;
    let nsr_host = |name: &str| -> Result<NsrHost> {
        let spec = sc
            .host(name)
            .ok_or_else(|| LabError::Invalid(format!("no host `{name}` in the scenario")))?;
        let id = lab
            .host_by_name(name)
            .ok_or_else(|| LabError::Invalid(format!("no host `{name}` in the lab")))?;
        let port = info
            .ports
            .iter()
            .find(|p| p.host == id)
            .ok_or_else(|| LabError::Invalid(format!("host `{name}` is not on the bridge")))?;
        Ok(NsrHost {
            id,
            ifname: port.host_if.clone(),
            v4: spec.v4,
            v6: spec.v6,
        })
    };
    let unit = sc
        .holdfastd
        .first()
        .ok_or_else(|| LabError::Invalid("the scenario has no holdfastd unit".into()))?;
    let peer_host = unit
        .neighbors
        .first()
        .and_then(|n| sc.peer(n))
        .map_or(unit.primary.as_str(), |p| p.host.as_str());
    let used = [
        unit.primary.as_str(),
        unit.backup.as_str(),
        sc.redis.host.as_str(),
        peer_host,
    ];
    let feed = sc
        .hosts
        .iter()
        .map(|h| h.name.as_str())
        .find(|h| !used.contains(h))
        .unwrap_or(peer_host);
    Ok(NsrTopo {
        bridge,
        peer: nsr_host(peer_host)?,
        redis: nsr_host(&sc.redis.host)?,
        a: nsr_host(&unit.primary)?,
        b: nsr_host(&unit.backup)?,
        feed: nsr_host(feed)?,
        service_v4: sc.service.v4,
        service_v6: sc.service.v6,
    })
}

fn start_peer(
    lab: &mut Lab,
    kind: PeerKind,
    host: HostId,
    spec: &PeerSpec,
) -> Result<Box<dyn Peer>> {
    Ok(match kind {
        PeerKind::Frr => Box::new(Frr::start(lab, host, spec)?),
        PeerKind::Bird => Box::new(Bird::start(lab, host, spec)?),
        PeerKind::Gobgp => Box::new(Gobgp::start(lab, host, spec)?),
        PeerKind::Exabgp => Box::new(Exabgp::start(lab, host, spec)?),
    })
}

/// `show nsr` of a unit.
pub fn nsr_status(hf: &Holdfastd) -> Result<NsrStatus> {
    match hf.request(&Request::ShowNsr)? {
        Body::Nsr(n) => Ok(*n),
        other => Err(parse_err(
            "holdfastd control answer",
            format!("unexpected {other:?}"),
        )),
    }
}

fn wait_protected(hf: &Holdfastd, timeout: Duration) -> Result<()> {
    wait_ok(
        &format!("{}: PROTECTED", hf.name),
        timeout,
        || match nsr_status(hf) {
            Ok(n) if n.protected => Ok(()),
            Ok(n) => Err(format!("role {}, epoch {}, unprotected", n.role, n.epoch)),
            Err(e) => Err(e.to_string()),
        },
    )
}

/// SIGKILLs every process in namespace `ns` (found with `ip netns pids`), by pid, until
/// none is left; returns the pids killed.
fn kill_namespace(ns: &str) -> Result<Vec<u32>> {
    let mut killed: Vec<u32> = Vec::new();
    let deadline = Instant::now() + KILL_TIMEOUT;
    loop {
        let pids = netns_pids(ns);
        if pids.is_empty() {
            return Ok(killed);
        }
        if Instant::now() >= deadline {
            return Err(LabError::Invalid(format!(
                "processes still in {ns} {KILL_TIMEOUT:?} after SIGKILL: {pids:?}"
            )));
        }
        for pid in pids {
            if !killed.contains(&pid) {
                killed.push(pid);
            }
            send_signal(pid, Signal::Kill, false);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Operational state (`ip -o link`: `UP`, `DOWN`, `LOWERLAYERDOWN`, ...) of `ifname` in
/// namespace `ns`; `None` if it cannot be read.
pub fn link_state(ns: &str, ifname: &str) -> Option<String> {
    let out = crate::cmd::run_ok(
        &crate::cmd::argv(&["ip", "-n", ns, "-o", "link", "show", "dev", ifname]),
        crate::cmd::DEFAULT_CMD_TIMEOUT,
    )
    .ok()?;
    out.split_whitespace()
        .skip_while(|w| *w != "state")
        .nth(1)
        .map(str::to_string)
}

/// A kept lab opened again: the state, the adopted [`Lab`] (dropping it tears nothing
/// down), the topology, and the units read back with their drivers.
pub struct OpenLab {
    /// The state as loaded (and updated by [`fail`] / [`heal`]).
    pub state: LabState,
    /// The adopted lab.
    pub lab: Lab,
    /// The NSR topology (for the orchestrator).
    pub topo: NsrTopo,
    /// The Redis unit.
    pub redis: Redis,
    /// The peer units: (name, driver).
    pub peers: Vec<(String, Box<dyn Peer>)>,
}

impl OpenLab {
    /// Loads the state file and opens the lab.
    pub fn load(state_file: &Path) -> Result<OpenLab> {
        OpenLab::open(LabState::load(state_file)?)
    }

    /// Opens the lab a state describes.
    pub fn open(state: LabState) -> Result<OpenLab> {
        let lab = Lab::adopt(state.lab.clone())?;
        let sc = &state.scenario;
        let topo = topo_of(&lab, sc)?;
        let proc = |i: usize| {
            lab.proc_id(i)
                .ok_or_else(|| LabError::Invalid(format!("lab state: no process #{i}")))
        };
        let redis_host = sc
            .host(&sc.redis.host)
            .ok_or_else(|| LabError::Invalid("lab state: no Redis host".into()))?;
        let redis = Redis::adopt(
            &lab,
            lab.host_by_name(&redis_host.name)
                .ok_or_else(|| LabError::Invalid("lab state: no Redis host".into()))?,
            IpAddr::V4(redis_host.v4),
            sc.redis.port,
            proc(state.redis.proc)?,
            state.redis.starts,
        );
        let mut peers = Vec::new();
        for rec in &state.peers {
            let p = sc
                .peer(&rec.name)
                .ok_or_else(|| LabError::Invalid(format!("lab state: no peer `{}`", rec.name)))?;
            let kind = parse_peer_kind(&p.kind)
                .ok_or_else(|| LabError::Invalid(format!("lab state: kind `{}`", p.kind)))?;
            let host = lab
                .host_by_name(&p.host)
                .ok_or_else(|| LabError::Invalid(format!("lab state: no host `{}`", p.host)))?;
            let procs = rec
                .procs
                .iter()
                .map(|i| proc(*i))
                .collect::<Result<Vec<ProcId>>>()?;
            let drv = peer::adopt(kind, &lab, host, &sc.peer_spec(p)?, &procs)?;
            peers.push((rec.name.clone(), drv));
        }
        Ok(OpenLab {
            state,
            lab,
            topo,
            redis,
            peers,
        })
    }

    /// Writes the state (with the lab's current processes) and keeps the lab.
    pub fn save(&mut self, state_file: &Path) -> Result<()> {
        self.state.lab = self.lab.kept_state();
        self.state.write(state_file)?;
        self.lab.keep(state_file)
    }

    /// The lab host named `name`.
    pub fn host_id(&self, name: &str) -> Result<HostId> {
        self.lab.host_by_name(name).ok_or_else(|| {
            LabError::Invalid(format!(
                "unknown host `{name}` (hosts: {})",
                self.state
                    .scenario
                    .hosts
                    .iter()
                    .map(|h| h.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ))
        })
    }

    /// The holdfastd process `u`.
    pub fn holdfastd(&self, u: &UnitProc) -> Result<Holdfastd> {
        let proc = self
            .lab
            .proc_id(u.proc)
            .ok_or_else(|| LabError::Invalid(format!("lab state: no process #{}", u.proc)))?;
        Ok(Holdfastd::adopt(
            &self.lab,
            self.host_id(&u.host)?,
            proc,
            &u.name,
        ))
    }

    fn running(&mut self, i: usize) -> bool {
        self.lab.proc_id(i).is_some_and(|p| self.lab.is_running(p))
    }

    /// What `lab status` shows.
    pub fn status(&mut self, state_file: &Path) -> Status {
        let st = self.state.clone();
        let sc = &st.scenario;
        let live = list_netns().unwrap_or_default();
        let bridge = self.lab.bridge_info(self.topo.bridge).clone();
        let mut hosts = Vec::new();
        for h in &sc.hosts {
            let (ns, port) = match self.lab.host_by_name(&h.name) {
                Some(id) => (
                    self.lab.netns(id).to_string(),
                    bridge.ports.iter().find(|p| p.host == id).cloned(),
                ),
                None => (String::new(), None),
            };
            let exists = live.contains(&ns);
            hosts.push(HostStatus {
                name: h.name.clone(),
                netns: ns.clone(),
                exists,
                v4: h.v4.into(),
                failed: st.failed(&h.name),
                link: port
                    .as_ref()
                    .filter(|_| exists)
                    .and_then(|p| link_state(&ns, &p.host_if)),
                bridge_port: port
                    .as_ref()
                    .and_then(|p| link_state(&bridge.netns, &p.switch_if)),
                pids: if exists { netns_pids(&ns) } else { Vec::new() },
            });
        }
        let netns_of = |h: &str| st.netns(h).unwrap_or_default().to_string();
        // Redis.
        let redis_running = self.running(st.redis.proc);
        let mut redis = UnitStatus {
            name: "redis".into(),
            kind: "redis".into(),
            role: None,
            host: sc.redis.host.clone(),
            netns: netns_of(&sc.redis.host),
            pids: vec![self.redis.pid()],
            running: redis_running,
            detail: json!({ "url": self.redis.url() }),
            error: None,
        };
        if redis_running {
            redis.detail["ping"] = json!(self.redis.ping(&self.lab));
        }
        // Peers.
        let service = IpAddr::V4(sc.service.v4);
        let mut peers = Vec::new();
        for (i, rec) in st.peers.iter().enumerate() {
            let spec = sc.peer(&rec.name);
            let running = rec.procs.iter().all(|p| self.running(*p));
            let host = spec.map(|p| p.host.clone()).unwrap_or_default();
            let mut u = UnitStatus {
                name: rec.name.clone(),
                kind: spec.map(|p| p.kind.clone()).unwrap_or_default(),
                role: None,
                netns: netns_of(&host),
                host,
                pids: rec.pids.clone(),
                running,
                detail: Value::Null,
                error: None,
            };
            if running {
                match self.peers[i].1.sessions(&self.lab) {
                    Ok(s) => {
                        u.detail = json!({
                            "sessions": s.iter().map(session_json).collect::<Vec<_>>(),
                            "service_session": s.iter().find(|v| v.neighbor == service).map(session_json),
                        })
                    }
                    Err(e) => u.error = Some(e.to_string()),
                }
            }
            peers.push(u);
        }
        // holdfastd units.
        let mut units = Vec::new();
        for rec in &st.units {
            let procs = std::iter::once(("primary", &rec.primary))
                .chain(rec.fenced.iter().map(|f| ("fenced", f)));
            for (role, p) in procs {
                let running = self.running(p.proc);
                let mut u = UnitStatus {
                    name: p.name.clone(),
                    kind: "holdfastd".into(),
                    role: Some(role.to_string()),
                    host: p.host.clone(),
                    netns: netns_of(&p.host),
                    pids: vec![p.pid],
                    running,
                    detail: json!({ "unit": rec.name, "backup_host": rec.backup_host }),
                    error: None,
                };
                if running {
                    match self.holdfastd(p).and_then(|hf| unit_detail(&hf)) {
                        Ok(d) => {
                            if let (Some(obj), Value::Object(more)) = (u.detail.as_object_mut(), d)
                            {
                                obj.extend(more);
                            }
                        }
                        Err(e) => u.error = Some(e.to_string()),
                    }
                }
                units.push(u);
            }
        }
        let mut on = Vec::new();
        for h in [&self.topo.a, &self.topo.b] {
            if let Ok((v4, v6)) = self.topo.service_addrs_on(&self.lab, h.id) {
                if v4 || v6 {
                    on.push(format!(
                        "{}{}",
                        self.lab.host_info(h.id).name,
                        if v4 && v6 { "" } else { " (partly)" }
                    ));
                }
            }
        }
        let mut s = Status {
            healthy: false,
            scenario: sc.name.clone(),
            scenario_file: st.scenario_file.clone(),
            run_id: st.lab.run_id.clone(),
            state_file: state_file.to_path_buf(),
            work_dir: st.lab.work_dir.clone(),
            service: ServiceStatus {
                v4: sc.service.v4.into(),
                v6: sc.service.v6.into(),
                host: st.service_host.clone(),
                on,
            },
            hosts,
            redis,
            peers,
            holdfastd: units,
            failures: st.history.clone(),
        };
        s.healthy = s.compute_healthy();
        s
    }

    /// Injects a failure and takes over when it hit the primary (see [`fail`]).
    pub fn fail(
        &mut self,
        kind: FailureKind,
        target: &str,
        progress: &mut dyn FnMut(&str),
    ) -> Result<FailReport> {
        let t0 = Instant::now();
        let mut step = |m: &str| progress(&format!("[{:>7.3}s] {m}", t0.elapsed().as_secs_f64()));
        // What is hit.
        let (host, unit_idx) = if kind.targets_host() {
            let h = self.host_id(target)?;
            let name = self.lab.host_info(h).name.clone();
            let unit = self.state.units.iter().position(|u| u.primary.host == name);
            (name, unit)
        } else {
            let i = self
                .state
                .units
                .iter()
                .position(|u| u.name == target || u.primary.name == target)
                .ok_or_else(|| {
                    LabError::Invalid(format!(
                        "`{kind}` needs a holdfastd unit, not `{target}` (units: {})",
                        self.state
                            .units
                            .iter()
                            .map(|u| u.name.as_str())
                            .collect::<Vec<_>>()
                            .join(", ")
                    ))
                })?;
            (self.state.units[i].primary.host.clone(), Some(i))
        };
        if let Some(k) = self.state.failed(&host) {
            return Err(LabError::Invalid(format!(
                "host `{host}` is already down ({k} failure): `holdfast lab heal {host}` first"
            )));
        }
        if let Some(i) = unit_idx {
            let u = self.state.units[i].clone();
            if let Some(k) = self.state.failed(&u.backup_host) {
                return Err(LabError::Invalid(format!(
                    "unit `{}` cannot take over: its backup host `{}` is down ({k} failure); `holdfast lab heal {}` first",
                    u.name, u.backup_host, u.backup_host
                )));
            }
            let p = u.primary.proc;
            if !self.running(p) {
                return Err(LabError::Invalid(format!(
                    "unit `{}`: holdfastd {} (pid {}) is not running",
                    u.name, u.primary.name, u.primary.pid
                )));
            }
        }
        let host_id = self.host_id(&host)?;
        let ns = self.lab.netns(host_id).to_string();
        let mut report = FailReport {
            kind,
            target: target.to_string(),
            host: host.clone(),
            at_unix_ms: unix_ms(),
            injected: Vec::new(),
            killed_pids: Vec::new(),
            inject_ms: 0.0,
            detected_ms: None,
            detector: None,
            takeover: None,
        };
        // Inject.
        match kind {
            FailureKind::Application => {
                let i = unit_idx.expect("a unit target");
                let u = self.state.units[i].primary.clone();
                let hf = self.holdfastd(&u)?;
                self.lab.kill(hf.proc, Signal::Kill);
                let p = hf.proc;
                wait_for_every(
                    &format!("{} (pid {}) to be gone after SIGKILL", u.name, u.pid),
                    KILL_TIMEOUT,
                    Duration::from_millis(5),
                    || Ok((!self.lab.is_running(p)).then_some(())),
                )?;
                report.killed_pids.push(u.pid);
                report.injected.push(format!(
                    "SIGKILL holdfastd {} (pid {}) on {host}",
                    u.name, u.pid
                ));
            }
            FailureKind::Container | FailureKind::Host => {
                let killed = kill_namespace(&ns)?;
                report.injected.push(format!(
                    "SIGKILL every process of namespace {ns} ({}): pids {killed:?}",
                    if kind == FailureKind::Host {
                        "every unit on the host"
                    } else {
                        "the unit's container"
                    }
                ));
                report.killed_pids = killed;
                if kind == FailureKind::Host {
                    self.state.failed_hosts.push(FailedHost {
                        host: host.clone(),
                        kind,
                    });
                    self.lab.set_host_links_up(host_id, false)?;
                    report
                        .injected
                        .push(format!("links of {host} down (both ends)"));
                }
            }
            FailureKind::HostNetwork => {
                self.state.failed_hosts.push(FailedHost {
                    host: host.clone(),
                    kind,
                });
                self.lab
                    .set_bridge_port_up(self.topo.bridge, host_id, false)?;
                report.injected.push(format!(
                    "bridge port of {host} down; its processes stay up, cut off"
                ));
            }
        }
        report.inject_ms = ms(t0.elapsed());
        for line in &report.injected {
            step(line);
        }
        let Some(i) = unit_idx else {
            step(&format!("no holdfastd primary on {host}: no takeover"));
            self.state.history.push(report.clone());
            return Ok(report);
        };
        let old = self.state.units[i].primary.clone();
        let old_hf = self.holdfastd(&old)?;
        // Detect it the way the controller would, then take over.
        let probe = if kind.targets_host() {
            let watched = self
                .state
                .scenario
                .host(&host)
                .map(|h| h.v4)
                .ok_or_else(|| LabError::Invalid(format!("lab state: no host `{host}`")))?;
            let from = self.host_id(&self.state.scenario.redis.host.clone())?;
            Probe::Tcp {
                netns: self.lab.netns(from).to_string(),
                addr: SocketAddr::new(IpAddr::V4(watched), DETECT_PORT),
            }
        } else {
            Probe::ControlSocket(old_hf.socket.clone())
        };
        let mut orch = LabOrchestrator::new(&self.topo);
        for f in &self.state.failed_hosts {
            orch.set_reachable(self.host_id(&f.host)?, false);
        }
        let found = orch
            .detect(&probe)
            .inspect_err(|_| self.state.history.push(report.clone()))?;
        report.detected_ms = Some(ms(found.after));
        report.detector = Some(probe.describe());
        step(&format!(
            "detected after {:.1} ms ({} probes: {})",
            ms(found.after),
            found.probes,
            probe.describe()
        ));
        // Take over onto the backup, through the orchestrator.
        let to = self.state.units[i].backup_host.clone();
        let to_id = self.host_id(&to)?;
        let fence = if kind == FailureKind::HostNetwork {
            // Cut off: the orchestrator cannot reach it; the store's epoch fences it.
            Fence::None
        } else {
            Fence::Kill
        };
        let unit = &mut self.state.units[i];
        let new_name = format!("{}_{}", unit.name, unit.generation);
        unit.generation += 1;
        let config = unit.config.clone();
        let unit_name = unit.name.clone();
        step(&format!(
            "takeover: {unit_name} from {} on {host} to {new_name} on {to} (fence {fence:?})",
            old.name
        ));
        let r = orch.takeover(&mut self.lab, &old_hf, to_id, &new_name, &config, fence);
        let (new, times) = match r {
            Ok(v) => v,
            Err(e) => {
                self.state.history.push(report);
                return Err(LabError::Invalid(format!(
                    "takeover onto {to} failed: {e}; orchestrator: {}",
                    orch.actions.join("; ")
                )));
            }
        };
        let new_proc = UnitProc {
            name: new_name.clone(),
            host: to.clone(),
            proc: new.proc.0,
            pid: new.os_pid,
        };
        let unit = &mut self.state.units[i];
        unit.primary = new_proc;
        unit.backup_host = old.host.clone();
        if kind == FailureKind::HostNetwork {
            unit.fenced.push(old.clone());
        }
        self.state.service_host = to.clone();
        step(&format!(
            "{new_name} (pid {}) has every session Established; service address on {to}",
            new.os_pid
        ));
        let tp = Instant::now();
        let protected = wait_protected(&new, PROTECTED_TIMEOUT);
        let protected_after_ms = ms(tp.elapsed());
        let holdfastd = nsr_status(&new).ok().and_then(|n| n.takeover);
        report.takeover = Some(TakeoverReport {
            unit: unit_name,
            from_host: host.clone(),
            to_host: to.clone(),
            old_process: old.name.clone(),
            old_pid: old.pid,
            new_process: new_name,
            new_pid: new.os_pid,
            fence: format!("{fence:?}"),
            orchestrator_ms: PhaseMs::from(times),
            protected_after_ms,
            holdfastd,
            actions: orch.actions.clone(),
        });
        self.state.history.push(report.clone());
        protected?;
        step(&format!("PROTECTED again after {protected_after_ms} ms"));
        Ok(report)
    }

    /// Brings a failed host back (see [`heal`]).
    pub fn heal(&mut self, host: &str) -> Result<HealReport> {
        let id = self.host_id(host)?;
        let Some(pos) = self.state.failed_hosts.iter().position(|f| f.host == host) else {
            return Err(LabError::Invalid(format!(
                "host `{host}` has not failed (down: {})",
                if self.state.failed_hosts.is_empty() {
                    "none".to_string()
                } else {
                    self.state
                        .failed_hosts
                        .iter()
                        .map(|f| format!("{} ({})", f.host, f.kind))
                        .collect::<Vec<_>>()
                        .join(", ")
                }
            )));
        };
        let kind = self.state.failed_hosts[pos].kind;
        let mut actions = Vec::new();
        // 1. Old primaries still alive there are fenced: kill them before reconnecting.
        for ui in 0..self.state.units.len() {
            let fenced: Vec<UnitProc> = self.state.units[ui]
                .fenced
                .iter()
                .filter(|f| f.host == host)
                .cloned()
                .collect();
            for f in fenced {
                let hf = self.holdfastd(&f)?;
                let was = self.lab.is_running(hf.proc);
                self.lab.kill(hf.proc, Signal::Kill);
                let p = hf.proc;
                wait_for_every(
                    &format!("{} (pid {}) to be gone", f.name, f.pid),
                    KILL_TIMEOUT,
                    Duration::from_millis(5),
                    || Ok((!self.lab.is_running(p)).then_some(())),
                )?;
                actions.push(if was {
                    format!("SIGKILL fenced holdfastd {} (pid {})", f.name, f.pid)
                } else {
                    format!("fenced holdfastd {} (pid {}) had exited", f.name, f.pid)
                });
                self.state.units[ui].fenced.retain(|x| x.proc != f.proc);
            }
        }
        // 2. A service address left there by an unreachable delete.
        if host != self.state.service_host && (id == self.topo.a.id || id == self.topo.b.id) {
            let (v4, v6) = self.topo.service_addrs_on(&self.lab, id)?;
            if v4 || v6 {
                self.topo.del_service(&self.lab, id)?;
                actions.push(format!("deleted the stale service address on {host}"));
            }
        }
        // 3. Links up.
        match kind {
            FailureKind::HostNetwork => {
                self.lab.set_bridge_port_up(self.topo.bridge, id, true)?;
                actions.push(format!("bridge port of {host} up"));
            }
            _ => {
                self.lab.set_host_links_up(id, true)?;
                actions.push(format!("links of {host} up"));
            }
        }
        self.state.failed_hosts.remove(pos);
        Ok(HealReport {
            host: host.to_string(),
            kind,
            actions,
        })
    }
}

fn session_json(s: &SessionView) -> Value {
    json!({
        "neighbor": s.neighbor,
        "state": s.raw_state,
        "established": s.is_established(),
        "uptime_secs": s.uptime_secs,
        "established_count": s.established_count,
        "dropped_count": s.dropped_count,
        "prefixes_received": s.prefixes_received,
        "prefixes_sent": s.prefixes_sent,
    })
}

fn unit_detail(hf: &Holdfastd) -> Result<Value> {
    let summary: Summary = hf.summary()?;
    let neighbors: Vec<NeighborInfo> = hf.neighbors()?;
    let nsr = nsr_status(hf)?;
    Ok(json!({
        "summary": summary,
        "neighbors": neighbors,
        "nsr": nsr,
    }))
}

/// `lab up`: builds the scenario in `scenario_file`, keeps it running and writes
/// `state_file`. Refuses when a lab of that state file is up. Progress lines go to
/// `progress`. On failure everything built is torn down (the work directory is kept and
/// its path printed).
pub fn up(
    scenario_file: &Path,
    state_file: &Path,
    progress: &mut dyn FnMut(&str),
) -> Result<Status> {
    let sc = Scenario::load(scenario_file)?;
    if state_file.exists() {
        match LabState::load(state_file) {
            Ok(st) if !st.live_namespaces()?.is_empty() => {
                return Err(LabError::Invalid(format!(
                "a lab is already up (scenario `{}`, run {}, state {}): `holdfast lab down` first",
                st.scenario.name,
                st.lab.run_id,
                state_file.display()
            )))
            }
            Ok(_) => {
                // Its namespaces are gone (a reboot): forget it.
                let _ = std::fs::remove_file(state_file);
            }
            Err(e) => {
                return Err(LabError::Invalid(format!(
                    "{e}; `holdfast lab down` removes it"
                )))
            }
        }
    }
    peer::preflight(&sc.peer_kinds())?;
    for tool in ["redis-server", "redis-cli"] {
        require_tool(tool)?;
    }
    find_binary("holdfastd", "HOLDFASTD_BIN")?;
    let removed = cleanup_stale()?;
    let t0 = Instant::now();
    let mut step = |m: &str| progress(&format!("[{:>6.2}s] {m}", t0.elapsed().as_secs_f64()));
    if removed > 0 {
        step(&format!(
            "removed {removed} namespace(s) left by crashed runs"
        ));
    }
    let mut lab = Lab::new(&format!("{WORK_DIR_PREFIX}{}", sc.name))?;
    let abs = std::path::absolute(scenario_file).unwrap_or_else(|_| scenario_file.into());
    let state = match build(&mut lab, &sc, &abs, &mut step) {
        Ok(s) => s,
        Err(e) => {
            lab.fail(&e.to_string());
            return Err(e);
        }
    };
    state.write(state_file)?;
    if let Err(e) = lab.keep(state_file) {
        let _ = std::fs::remove_file(state_file);
        return Err(e);
    }
    drop(lab);
    step(&format!("up; state in {}", state_file.display()));
    status(state_file)
}

fn build(
    lab: &mut Lab,
    sc: &Scenario,
    scenario_file: &Path,
    step: &mut dyn FnMut(&str),
) -> Result<LabState> {
    let mut members = Vec::new();
    for h in &sc.hosts {
        let id = lab.host(&h.name)?;
        members.push((
            id,
            vec![IfAddr::new(h.v4, NSR_V4_LEN), IfAddr::new(h.v6, NSR_V6_LEN)],
        ));
    }
    lab.bridge(BRIDGE_NAME, &members)?;
    let topo = topo_of(lab, sc)?;
    topo.add_service(lab, topo.a.id)?;
    let unit = &sc.holdfastd[0];
    step(&format!(
        "{} hosts on bridge `{BRIDGE_NAME}` (run {}); service address {} / {} on {}",
        sc.hosts.len(),
        lab.run_id(),
        sc.service.v4,
        sc.service.v6,
        unit.primary
    ));
    let redis_host = sc
        .host(&sc.redis.host)
        .ok_or_else(|| LabError::Invalid("no Redis host".into()))?;
    let redis = Redis::start(lab, topo.redis.id, IpAddr::V4(redis_host.v4), sc.redis.port)?;
    step(&format!(
        "redis on {} ({}), pid {}",
        sc.redis.host,
        redis.url(),
        redis.pid()
    ));
    let config = sc.holdfastd_config(unit, &topo, &redis.url())?;
    let name = format!("{}_0", unit.name);
    let hf = Holdfastd::start(lab, topo.a.id, &name, &config)?;
    step(&format!(
        "holdfastd {name} (instance {}) on {}, pid {}",
        unit.instance, unit.primary, hf.os_pid
    ));
    let mut peers = Vec::new();
    let mut records = Vec::new();
    for p in &sc.peers {
        let kind = parse_peer_kind(&p.kind)
            .ok_or_else(|| LabError::Invalid(format!("peer kind `{}`", p.kind)))?;
        let host = lab
            .host_by_name(&p.host)
            .ok_or_else(|| LabError::Invalid(format!("no host `{}`", p.host)))?;
        let before = lab.proc_count();
        let drv = start_peer(lab, kind, host, &sc.peer_spec(p)?)?;
        let procs: Vec<usize> = (before..lab.proc_count()).collect();
        let pids = procs
            .iter()
            .filter_map(|i| lab.proc_id(*i).map(|id| lab.pid(id)))
            .collect::<Vec<u32>>();
        step(&format!(
            "{} `{}` (AS {}) on {}, pid {:?}, {} route(s)",
            kind,
            p.name,
            p.asn,
            p.host,
            pids,
            sc.peer_route_count(p)
        ));
        records.push(PeerRecord {
            name: p.name.clone(),
            procs,
            pids,
        });
        peers.push((p, drv));
    }
    let service = IpAddr::V4(sc.service.v4);
    hf.wait_all_established(UP_TIMEOUT)?;
    for (_, drv) in &peers {
        drv.wait_established(lab, service, UP_TIMEOUT)?;
    }
    step("every session Established (holdfastd and each peer's own CLI)");
    wait_protected(&hf, UP_TIMEOUT)?;
    // Routes both ways.
    let ours = sc.unit_route_count(unit);
    wait_ok("routes exchanged", UP_TIMEOUT, || {
        let ns = hf.neighbors().map_err(|e| e.to_string())?;
        for (p, drv) in &peers {
            let h = sc
                .host(&p.host)
                .map(|h| h.v4.to_string())
                .unwrap_or_default();
            let want = sc.peer_route_count(p);
            let got = ns
                .iter()
                .find(|n| n.address == h)
                .map_or(0, |n| n.prefixes_received);
            if got < want {
                return Err(format!(
                    "holdfastd has {got} of {want} routes from {}",
                    p.name
                ));
            }
            let held = drv
                .session(lab, service)
                .map_err(|e| e.to_string())?
                .and_then(|s| s.prefixes_received)
                .unwrap_or(0);
            if u64::from(held) < ours {
                return Err(format!("{} holds {held} of our {ours} routes", p.name));
            }
        }
        Ok(())
    })?;
    step("routes exchanged both ways; holdfastd PROTECTED");
    Ok(LabState {
        version: STATE_VERSION,
        scenario_file: scenario_file.to_path_buf(),
        scenario: sc.clone(),
        lab: lab.kept_state(),
        redis: RedisRecord {
            proc: redis.proc().0,
            starts: redis.starts(),
        },
        peers: records,
        units: vec![UnitRecord {
            name: unit.name.clone(),
            config,
            generation: 1,
            primary: UnitProc {
                name,
                host: unit.primary.clone(),
                proc: hf.proc.0,
                pid: hf.os_pid,
            },
            backup_host: unit.backup.clone(),
            fenced: Vec::new(),
        }],
        service_host: unit.primary.clone(),
        failed_hosts: Vec::new(),
        history: Vec::new(),
        up_unix_ms: unix_ms(),
    })
}

/// `lab status`: the state file read back against what runs.
pub fn status(state_file: &Path) -> Result<Status> {
    let mut open = OpenLab::load(state_file)?;
    Ok(open.status(state_file))
}

/// `lab fail KIND TARGET`: injects the failure (TARGET is a holdfastd unit for
/// `application` / `container`, a host for `host` / `host-network`) and, when the
/// unit's primary was hit, takes over onto its backup host through the
/// [`Orchestrator`]; the state then records the new primary and the service address's
/// host. The state is written even when the takeover fails.
pub fn fail(
    state_file: &Path,
    kind: FailureKind,
    target: &str,
    progress: &mut dyn FnMut(&str),
) -> Result<FailReport> {
    let mut open = OpenLab::load(state_file)?;
    let r = open.fail(kind, target, progress);
    let saved = open.save(state_file);
    let report = r?;
    saved?;
    Ok(report)
}

/// `lab heal HOST`: brings a host back after a `host` or `host-network` failure: kills
/// the fenced old primaries still alive on it, deletes a stale service address there,
/// and sets its links (or bridge port) up, so it can be the backup of the next takeover.
/// Units that died with the host are not restarted.
pub fn heal(state_file: &Path, host: &str) -> Result<HealReport> {
    let mut open = OpenLab::load(state_file)?;
    let r = open.heal(host);
    let saved = open.save(state_file);
    let report = r?;
    saved?;
    Ok(report)
}

/// `lab down`: tears down the lab of `state_file` (every process of its namespaces,
/// the namespaces, its work directory unless `HOLDFAST_LAB_KEEP=1`), removes the state
/// file, and always runs [`cleanup_stale`] (what crashed runs of any lab left; the work
/// directories of crashed `lab up` runs go too). Fails if a namespace of the run is
/// still there afterwards.
pub fn down(state_file: &Path) -> Result<DownReport> {
    let mut report = DownReport::default();
    if state_file.exists() {
        match LabState::load(state_file) {
            Ok(st) => {
                report.run_id = Some(st.lab.run_id.clone());
                report.scenario = Some(st.scenario.name.clone());
                report.namespaces = st.live_namespaces()?;
                report.pids = st
                    .lab
                    .procs
                    .iter()
                    .map(|p| p.pid)
                    .chain(report.namespaces.iter().flat_map(|n| netns_pids(n)))
                    .collect();
                report.pids.sort_unstable();
                report.pids.dedup();
                Lab::adopt(st.lab)?.teardown();
            }
            Err(e) => report
                .notes
                .push(format!("unreadable state file removed ({e})")),
        }
        std::fs::remove_file(state_file)
            .map_err(io_ctx(format!("removing {}", state_file.display())))?;
    } else {
        report
            .notes
            .push(format!("no state file {}", state_file.display()));
    }
    // Runs of `lab up` that crashed: their work directories go too (those of crashed
    // tests stay, for their logs).
    let mut crashed: Vec<String> = crate::stale::stale_namespaces()?
        .iter()
        .filter_map(|n| run_id_of(n).map(str::to_string))
        .collect();
    crashed.dedup();
    report.stale_removed = cleanup_stale()?;
    let base = std::env::var_os("HOLDFAST_LAB_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/tmp"));
    if let Ok(entries) = std::fs::read_dir(&base) {
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            let ours = name.starts_with(&format!("holdfast-lab-{WORK_DIR_PREFIX}"))
                && crashed.iter().any(|id| name.ends_with(&format!("-{id}")));
            if ours && std::fs::remove_dir_all(e.path()).is_ok() {
                report.stale_work_dirs.push(e.path());
            }
        }
    }
    if let Some(id) = &report.run_id {
        let left: Vec<String> = list_netns()?
            .into_iter()
            .filter(|n| run_id_of(n) == Some(id.as_str()))
            .collect();
        if !left.is_empty() {
            return Err(LabError::Invalid(format!(
                "namespaces left after teardown: {left:?}"
            )));
        }
    }
    Ok(report)
}

mod report;
pub use report::{
    DownReport, FailReport, HealReport, HostStatus, PhaseMs, ServiceStatus, Status, TakeoverReport,
    UnitStatus,
};
