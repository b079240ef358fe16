//! A kept lab opened again ([`OpenLab`]) and what `status` reads back; `fail` and
//! `heal` are in `fail`.

use std::net::IpAddr;
use std::path::Path;

use holdfast_api::{NeighborInfo, Summary};
use holdfast_lab::{
    adopt_peer, link_state, list_netns, netns_pids, HostId, Lab, LabError, NsrTopo, Peer, ProcId,
    Redis, Result, SessionView,
};
use serde_json::{json, Value};

use super::plane::{has_addr, LabPlane, UnitSocket};
use super::report::{ControlStatus, HostStatus, ServiceStatus, Status, UnitStatus};
use super::state::{LabState, UnitProc};
use super::topo_of;
use crate::scenario::parse_peer_kind;

/// A kept lab opened again: the state, the adopted [`Lab`] (dropping it tears nothing
/// down), the topology, and the units read back with their drivers.
pub struct OpenLab {
    /// The state as loaded (and updated by [`super::fail`] / [`super::heal`]).
    pub state: LabState,
    /// The adopted lab.
    pub lab: Lab,
    /// The NSR topology (hosts, the bridge `lan`).
    pub topo: NsrTopo,
    /// The Redis unit.
    pub redis: Redis,
    /// The peer units: (name, driver).
    pub peers: Vec<(String, Box<dyn Peer>)>,
    /// The control plane.
    pub plane: LabPlane,
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
            let drv = adopt_peer(kind, &lab, host, &sc.peer_spec(p)?, &procs)?;
            peers.push((rec.name.clone(), drv));
        }
        let plane = LabPlane::open(state.plane.clone())?;
        Ok(OpenLab {
            state,
            lab,
            topo,
            redis,
            peers,
            plane,
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

    /// The control socket of the holdfastd process `u`.
    pub fn holdfastd(&self, u: &UnitProc) -> Result<UnitSocket> {
        let unit = self
            .state
            .units
            .iter()
            .find(|r| r.primary.name == u.name)
            .map_or_else(|| u.name.clone(), |r| r.name.clone());
        Ok(UnitSocket(self.plane.socket(&unit, &u.host)?))
    }

    /// The container namespace and interface of `unit` on `host`.
    pub fn container(&self, unit: &str, host: &str) -> Result<(HostId, String)> {
        let c = self.plane.container(unit, host)?;
        Ok((self.host_id(&c.name)?, c.ifname.clone()))
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
                        // The peer's BFD session with the service address, by its own
                        // CLI (null without BFD).
                        let bfd = self.peers[i]
                            .1
                            .bfd_session(&self.lab, service)
                            .ok()
                            .flatten();
                        u.detail = json!({
                            "sessions": s.iter().map(session_json).collect::<Vec<_>>(),
                            "service_session": s.iter().find(|v| v.neighbor == service).map(session_json),
                            "service_bfd": bfd.map(|b| json!({
                                "state": b.state,
                                "up": b.up,
                                "tx_interval_ms": b.tx_interval_ms,
                                "session_downs": b.session_downs,
                                "uptime_secs": b.uptime_secs,
                                "since": b.since,
                            })),
                        })
                    }
                    Err(e) => u.error = Some(e.to_string()),
                }
            }
            peers.push(u);
        }
        // holdfastd units, run by the agents.
        let mut units = Vec::new();
        let mut on = Vec::new();
        for rec in &st.units {
            let p = &rec.primary;
            let pid = self.plane.unit_pid(&rec.name, &p.host);
            let mut u = UnitStatus {
                name: p.name.clone(),
                kind: "holdfastd".into(),
                role: Some("primary".to_string()),
                host: p.host.clone(),
                netns: self
                    .plane
                    .container(&rec.name, &p.host)
                    .map(|c| netns_of(&c.name))
                    .unwrap_or_default(),
                pids: vec![pid.unwrap_or(p.pid)],
                running: pid == Some(p.pid),
                detail: json!({ "unit": rec.name, "backup_host": rec.backup_host }),
                error: None,
            };
            if u.running {
                match self.holdfastd(p).and_then(|hf| unit_detail(&hf)) {
                    Ok(d) => {
                        if let (Some(obj), Value::Object(more)) = (u.detail.as_object_mut(), d) {
                            obj.extend(more);
                        }
                    }
                    Err(e) => u.error = Some(e.to_string()),
                }
            }
            units.push(u);
            for c in st.plane.containers.iter().filter(|c| c.unit == rec.name) {
                if has_addr(&netns_of(&c.name), &c.ifname, IpAddr::V4(sc.service.v4)) {
                    on.push(format!("{} ({})", c.host, c.name));
                }
            }
        }
        let control = self.control_status();
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
            control,
            failures: st.history.clone(),
        };
        s.healthy = s.compute_healthy();
        s
    }

    /// The replicas, the leader, the agents, the placements.
    fn control_status(&mut self) -> ControlStatus {
        let statuses = self.plane.statuses();
        let leader = statuses
            .iter()
            .find(|v| v["role"] == "leader")
            .and_then(|v| v["name"].as_str().map(str::to_string));
        let attached: Vec<String> = statuses
            .iter()
            .find(|v| v["role"] == "leader")
            .and_then(|v| v["agents"].as_array().cloned())
            .unwrap_or_default()
            .iter()
            .map(|a| {
                a["host"]
                    .as_str()
                    .map_or_else(|| a.to_string(), str::to_string)
            })
            .collect();
        let mut replicas = Vec::new();
        for c in self.plane.rec.controllers.clone() {
            let status = statuses.iter().find(|v| v["name"] == c.name.as_str());
            let pid = self.lab.proc_id(c.proc).map(|p| self.lab.pid(p));
            replicas.push(json!({
                "name": c.name,
                "role": status.map(|v| v["role"].clone()),
                "pid": pid,
                "running": self.running(c.proc),
            }));
        }
        let mut agents = Vec::new();
        for a in self.plane.rec.agents.clone() {
            let running = a.proc.is_some_and(|p| self.running(p));
            let pid = a
                .proc
                .and_then(|p| self.lab.proc_id(p))
                .map(|p| self.lab.pid(p));
            let units = holdfast_lab::plane::json_file(&a.status)
                .map(|v| v["units"].clone())
                .unwrap_or(Value::Null);
            agents.push(json!({
                "host": a.host,
                "server": a.server,
                "pid": pid,
                "running": running,
                "failed": self.state.failed(&a.host).is_some(),
                "attached": attached.contains(&a.host),
                "units": units,
            }));
        }
        ControlStatus {
            etcd: self.plane.rec.endpoints.clone(),
            leader,
            replicas,
            agents,
            units: self.plane.ctl(&self.lab, &["units"]).unwrap_or(Value::Null),
            verdicts: statuses
                .iter()
                .flat_map(|v| v["verdicts"].as_array().cloned().unwrap_or_default())
                .collect(),
        }
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

fn unit_detail(hf: &UnitSocket) -> Result<Value> {
    let summary: Summary = hf.summary()?;
    let neighbors: Vec<NeighborInfo> = hf.neighbors()?;
    let nsr = hf.nsr()?;
    Ok(json!({
        "summary": summary,
        "neighbors": neighbors,
        "nsr": nsr,
    }))
}
