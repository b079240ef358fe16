//! The control plane of a `holdfast lab` scenario (issue 11): a management
//! bridge `mgmt` with a 3-member etcd cluster and three `holdfast-controller`
//! replicas (hosts `c1`, `c2`, `c3`), a `holdfast-agent` on each host of the
//! unit (its primary and backup hosts) with a container per unit (a
//! namespace of its own on `lan`, `HOST_UNIT`), and the agent server's agent
//! (host `s`). The unit's placement is written to etcd; the primary's agent
//! starts it, and from then on the controller, not the lab, finds failures
//! and moves the unit. Built from [`holdfast_lab::plane`]'s parts and kept
//! across invocations in the state file ([`PlaneRecord`]).
//!
//! Known issues: the control plane's hosts and containers take addresses
//! 198.18.0.31 and up on `lan` (the first free ones) and the same last
//! octet on `mgmt`; their names (`c1`..`c3`, `s`, `HOST_UNIT`) must not be
//! the scenario's.

use std::collections::BTreeSet;
use std::net::{IpAddr, Ipv4Addr};
use std::path::PathBuf;
use std::time::Duration;

use holdfast_lab::plane::{
    agent_unit_pid, controller_statuses, controller_verdicts, ctl_json, make_certs_etcd,
    mgmt_addr_of, placement_of, unit_record, AgentOpts, ControlPlane, PlaneBins,
};
use holdfast_lab::{wait_for_every, HostId, Lab, LabError, NsrTopo, Result, NSR_V4_LEN};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::scenario::{HoldfastdSpec, Scenario};

/// A holdfastd unit run by an agent, through its control socket.
pub use holdfast_lab::ControlSocket as UnitSocket;

/// Deadline for the control plane to come up (a leader with every agent
/// attached, the unit running).
const PLANE_UP: Duration = Duration::from_secs(60);

/// A controller replica.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ControllerRecord {
    /// `c1`, `c2`, `c3` (also its host).
    pub name: String,
    /// Lab process index.
    pub proc: usize,
    /// Its `--status-file`.
    pub status: PathBuf,
}

/// A host agent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AgentRecord {
    /// Its host.
    pub host: String,
    /// Lab process index of its current process (`None` after a host failure).
    pub proc: Option<usize>,
    /// Its command line (without the boot units), to start it again.
    pub args: Vec<String>,
    /// Its `--status-file`.
    pub status: PathBuf,
    /// Its units' work directories.
    pub work_dir: PathBuf,
    /// The agent server's agent (probes only).
    pub server: bool,
}

/// A unit's container on a host.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ContainerRecord {
    /// The unit.
    pub unit: String,
    /// The host it belongs to.
    pub host: String,
    /// Its lab host (namespace) name.
    pub name: String,
    /// Its interface on `lan`.
    pub ifname: String,
}

/// The control plane in the state file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlaneRecord {
    /// etcd's client URLs (on `mgmt`).
    pub endpoints: String,
    /// The replicas.
    pub controllers: Vec<ControllerRecord>,
    /// The agents (the agent server's last).
    pub agents: Vec<AgentRecord>,
    /// Every unit's container on each of its hosts.
    pub containers: Vec<ContainerRecord>,
    /// Where `holdfast ctl` runs (a host on `mgmt`).
    pub ctl_host: String,
    /// The certificates of the replicas' and agents' mutual TLS (`certs
    /// init` at `up`); `None`: plaintext (`lab up --insecure`).
    #[serde(default)]
    pub certs: Option<PathBuf>,
}

/// The last octets the scenario leaves free on `lan`, from 31 up.
fn free_octets(sc: &Scenario) -> impl Iterator<Item = u8> {
    let used: BTreeSet<u8> = sc
        .hosts
        .iter()
        .map(|h| h.v4.octets()[3])
        .chain(std::iter::once(sc.service.v4.octets()[3]))
        .collect();
    (31..=250).filter(move |n| !used.contains(n))
}

/// Builds the control plane of `sc` with `unit` (its configuration
/// `config`) on its primary, and returns once a leader has every agent
/// attached and the primary's agent runs the unit. With `tls`, the
/// certificates are made first (`holdfast ctl certs init` into the work
/// directory's `certs/`, the etcd members' too), etcd runs with TLS and
/// client certificates, its users and roles made by `holdfast ctl
/// etcd-auth init`, and every replica and agent runs with mutual TLS;
/// without, etcd is plain HTTP and they run `--insecure`.
pub fn start(
    lab: &mut Lab,
    sc: &Scenario,
    topo: &NsrTopo,
    unit: &HoldfastdSpec,
    config: &str,
    tls: bool,
    step: &mut dyn FnMut(&str),
) -> Result<PlaneRecord> {
    let bins = PlaneBins::find()?;
    let mut octets = free_octets(sc);
    let mut next = || {
        octets
            .next()
            .ok_or_else(|| LabError::Invalid("no free address left on `lan`".into()))
    };
    let add = |lab: &mut Lab, name: &str, n: u8| {
        if sc.host(name).is_some() {
            return Err(LabError::Invalid(format!(
                "host `{name}` is the control plane's: rename the scenario's"
            )));
        }
        topo.add_host(lab, name, n)
    };
    let mut members = Vec::new();
    for name in ["c1", "c2", "c3"] {
        let h = add(lab, name, next()?)?;
        members.push((h.id, h.v4));
    }
    let s_node = add(lab, "s", next()?)?;
    let unit_hosts = [unit.primary.clone(), unit.backup.clone()];
    let mut containers = Vec::new();
    let mut agent_hosts = Vec::new();
    for h in &unit_hosts {
        let spec = sc
            .host(h)
            .ok_or_else(|| LabError::Invalid(format!("no host `{h}`")))?;
        let id = lab
            .host_by_name(h)
            .ok_or_else(|| LabError::Invalid(format!("no host `{h}` in the lab")))?;
        agent_hosts.push((h.clone(), id, spec.v4));
        let name = format!("{h}_{}", unit.name);
        let c = add(lab, &name, next()?)?;
        containers.push(ContainerRecord {
            unit: unit.name.clone(),
            host: h.clone(),
            name,
            ifname: c.ifname,
        });
    }
    let others: Vec<(HostId, Ipv4Addr)> = agent_hosts
        .iter()
        .map(|(_, id, v4)| (*id, *v4))
        .chain(std::iter::once((s_node.id, s_node.v4)))
        .collect();
    let certs = if tls {
        let dir = lab.work_dir().join("certs");
        let hosts: Vec<String> = unit_hosts.iter().cloned().chain(["s".into()]).collect();
        let ctrls: Vec<String> = ["c1", "c2", "c3"].map(String::from).to_vec();
        let etcd: Vec<(String, Ipv4Addr)> = members
            .iter()
            .map(|(h, v4)| (lab.host_info(*h).name.clone(), mgmt_addr_of(*v4)))
            .collect();
        make_certs_etcd(
            &bins,
            &dir,
            &hosts,
            &ctrls,
            std::slice::from_ref(&unit.name),
            &etcd,
        )?;
        step(&format!(
            "certificates in {} (holdfast ctl certs init: CA, controllers c1..c3, agents {}, operator admin, unit {}, the etcd members)",
            dir.display(),
            hosts.join(", "),
            unit.name
        ));
        Some(dir)
    } else {
        None
    };
    let cp = ControlPlane::start_secure(lab, &bins, &members, &others, &[], certs.as_deref(), tls)?;
    step(&format!(
        "etcd ({}) and controllers c1, c2, c3 on the management network ({})",
        cp.etcd.endpoints(),
        if tls {
            "Attach over mutual TLS; etcd with client certificates and roles"
        } else {
            "plaintext Attach: --insecure"
        }
    ));
    let svc = format!("{}/{NSR_V4_LEN}", sc.service.v4);
    let rec = unit_record(
        &unit.name,
        &unit.primary,
        &unit.backup,
        config,
        std::slice::from_ref(&svc),
        None,
    );
    cp.place(lab, &rec)?;
    let first = &containers[0];
    let cid = lab
        .host_by_name(&first.name)
        .ok_or_else(|| LabError::Invalid(format!("no container `{}`", first.name)))?;
    lab.exec_ok(cid, &["ip", "addr", "add", &svc, "dev", &first.ifname])?;
    let cfg = lab.work_dir().join(format!("{}.toml", unit.name));
    std::fs::write(&cfg, config).map_err(|e| LabError::Invalid(format!("unit config: {e}")))?;
    // The agents probe what the leader's probe plan names: each host at its
    // data address (port 7, a reset answers), the unit at its service
    // address.
    let mut agents = Vec::new();
    for (h, id, v4) in &agent_hosts {
        let opts = AgentOpts {
            name: h.clone(),
            failsafe: Some(cp.mgmt_addr[id]),
            probe_addr: Some(format!("{v4}:7")),
            containers: containers
                .iter()
                .filter(|c| &c.host == h)
                .map(|c| {
                    let ns = lab
                        .host_by_name(&c.name)
                        .map(|x| lab.netns(x).to_string())
                        .unwrap_or_default();
                    (c.unit.clone(), ns, c.ifname.clone())
                })
                .collect(),
            tls: certs.clone(),
            ..AgentOpts::default()
        };
        let mut boot = Vec::new();
        if *h == unit.primary {
            boot.extend([
                "--unit".to_string(),
                format!("{}={}", unit.name, cfg.display()),
            ]);
        }
        let (p, a) = cp.spawn_agent(lab, &bins, *id, &opts, &boot)?;
        agents.push(AgentRecord {
            host: h.clone(),
            proc: Some(p.index()),
            args: a.args,
            status: a.status,
            work_dir: a.work_dir,
            server: false,
        });
    }
    let server = AgentOpts {
        name: "s".into(),
        server: true,
        tls: certs.clone(),
        ..AgentOpts::default()
    };
    let (p, a) = cp.spawn_agent(lab, &bins, s_node.id, &server, &[])?;
    agents.push(AgentRecord {
        host: "s".into(),
        proc: Some(p.index()),
        args: a.args,
        status: a.status,
        work_dir: a.work_dir,
        server: true,
    });
    let record = PlaneRecord {
        endpoints: cp.etcd.endpoints(),
        controllers: cp
            .controllers
            .iter()
            .enumerate()
            .map(|(i, (p, s))| ControllerRecord {
                name: format!("c{}", i + 1),
                proc: p.index(),
                status: s.clone(),
            })
            .collect(),
        agents,
        containers,
        ctl_host: "c1".into(),
        certs,
    };
    let plane = LabPlane { rec: record, bins };
    let leader = holdfast_lab::plane::wait_leader_in(
        &plane.status_files(),
        plane.rec.agents.len(),
        PLANE_UP,
    )?;
    let pid = plane.wait_running(&unit.name, &unit.primary, None, PLANE_UP)?;
    step(&format!(
        "controller leader {} with {} agents attached (a, b and the agent server s); the agent on {} runs {} (pid {pid}) in container {}",
        leader["name"].as_str().unwrap_or("?"),
        plane.rec.agents.len(),
        unit.primary,
        unit.name,
        plane.rec.containers[0].name,
    ));
    Ok(plane.rec)
}

/// The control plane of an open lab.
pub struct LabPlane {
    /// As recorded.
    pub rec: PlaneRecord,
    /// Its binaries.
    pub bins: PlaneBins,
}

impl LabPlane {
    /// The record's plane, with the binaries found again.
    pub fn open(rec: PlaneRecord) -> Result<LabPlane> {
        Ok(LabPlane {
            rec,
            bins: PlaneBins::find()?,
        })
    }

    /// The replicas' status files.
    pub fn status_files(&self) -> Vec<PathBuf> {
        self.rec
            .controllers
            .iter()
            .map(|c| c.status.clone())
            .collect()
    }

    /// Every replica's status.
    pub fn statuses(&self) -> Vec<Value> {
        controller_statuses(&self.status_files())
    }

    /// Every verdict the replicas recorded.
    pub fn verdicts(&self) -> Vec<Value> {
        controller_verdicts(&self.status_files())
    }

    /// The agent of `host`.
    pub fn agent(&self, host: &str) -> Result<&AgentRecord> {
        self.rec
            .agents
            .iter()
            .find(|a| a.host == host)
            .ok_or_else(|| LabError::Invalid(format!("no agent on host `{host}`")))
    }

    /// `unit`'s container on `host`.
    pub fn container(&self, unit: &str, host: &str) -> Result<&ContainerRecord> {
        self.rec
            .containers
            .iter()
            .find(|c| c.unit == unit && c.host == host)
            .ok_or_else(|| LabError::Invalid(format!("no container of `{unit}` on `{host}`")))
    }

    /// The control socket of `unit` run by `host`'s agent.
    pub fn socket(&self, unit: &str, host: &str) -> Result<PathBuf> {
        Ok(self.agent(host)?.work_dir.join(unit).join("holdfastd.sock"))
    }

    /// The pid of `unit` as `host`'s agent reports it.
    pub fn unit_pid(&self, unit: &str, host: &str) -> Option<u32> {
        let a = self.agent(host).ok()?;
        agent_unit_pid(&a.status, unit).and_then(|p| u32::try_from(p).ok())
    }

    /// Waits until `unit` runs on `host` with a pid other than `not`.
    pub fn wait_running(
        &self,
        unit: &str,
        host: &str,
        not: Option<u32>,
        within: Duration,
    ) -> Result<u32> {
        wait_for_every(
            &format!("{unit} running on {host}"),
            within,
            Duration::from_millis(20),
            || Ok(self.unit_pid(unit, host).filter(|p| Some(*p) != not)),
        )
    }

    /// `holdfast ctl --json ARGS` on the control host.
    pub fn ctl(&self, lab: &Lab, args: &[&str]) -> Result<Value> {
        let host = lab
            .host_by_name(&self.rec.ctl_host)
            .ok_or_else(|| LabError::Invalid(format!("no host `{}`", self.rec.ctl_host)))?;
        ctl_json(
            lab,
            host,
            &self.bins.ctl,
            &self.rec.endpoints,
            self.rec.certs.as_deref(),
            args,
        )
    }

    /// `(primary, backup)` of `unit` per `holdfast ctl units`.
    pub fn placement(&self, lab: &Lab, unit: &str) -> Result<(String, Option<String>)> {
        placement_of(&self.ctl(lab, &["units"])?, unit)
    }

    /// The leading replica's status, if one leads.
    pub fn leader(&self) -> Option<Value> {
        self.statuses().into_iter().find(|v| v["role"] == "leader")
    }
}

/// Whether `addr` is on `ifname` in the namespace `ns`.
pub fn has_addr(ns: &str, ifname: &str, addr: IpAddr) -> bool {
    std::process::Command::new("ip")
        .args(["-n", ns, "-o", "addr", "show", "dev", ifname])
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains(&format!(" {addr}/")))
}
