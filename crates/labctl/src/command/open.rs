//! A kept lab opened again ([`OpenLab`]): what `status` reads back, and the failure
//! injection, detection and takeover of `fail`, and `heal`.

use std::net::{IpAddr, SocketAddr};
use std::path::Path;
use std::time::{Duration, Instant};

use holdfast_api::{NeighborInfo, Summary};
use holdfast_lab::{
    adopt_peer, link_state, list_netns, netns_pids, wait_for_every, Fence, Holdfastd, HostId, Lab,
    LabError, LabOrchestrator, NsrTopo, Orchestrator, Peer, ProcId, Redis, Result, SessionView,
    Signal,
};
use holdfast_orchestrate::Probe;
use serde_json::{json, Value};

use super::report::{
    FailReport, HealReport, HostStatus, PhaseMs, ServiceStatus, Status, TakeoverReport, UnitStatus,
};
use super::state::{ms, unix_ms, FailedHost, FailureKind, LabState, UnitProc};
use super::{
    kill_namespace, nsr_status, topo_of, wait_protected, DETECT_PORT, KILL_TIMEOUT,
    PROTECTED_TIMEOUT,
};
use crate::scenario::parse_peer_kind;

/// A kept lab opened again: the state, the adopted [`Lab`] (dropping it tears nothing
/// down), the topology, and the units read back with their drivers.
pub struct OpenLab {
    /// The state as loaded (and updated by [`super::fail`] / [`super::heal`]).
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
            let drv = adopt_peer(kind, &lab, host, &sc.peer_spec(p)?, &procs)?;
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

    /// Injects a failure and takes over when it hit the primary (see [`super::fail`]).
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
            FailureKind::Switchover => {
                let i = unit_idx.expect("a unit target");
                let u = self.state.units[i].primary.clone();
                let out = self
                    .holdfastd(&u)?
                    .cli(&self.lab, &["nsr", "switchover", "--timeout", "60"])?;
                report.injected.push(format!(
                    "holdfast nsr switchover on {} (pid {}): {}",
                    u.name,
                    u.pid,
                    out.trim()
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
        let mut orch = LabOrchestrator::new(&self.topo);
        for f in &self.state.failed_hosts {
            orch.set_reachable(self.host_id(&f.host)?, false);
        }
        if kind == FailureKind::Switchover {
            // Planned: nothing to detect.
            report.detected_ms = Some(0.0);
            report.detector = Some("planned (holdfast nsr switchover)".to_string());
        } else {
            self.detect(&mut orch, kind, &host, &old_hf, &mut report)?;
            step(&format!(
                "detected after {:.1} ms ({})",
                report.detected_ms.unwrap_or(0.0),
                report.detector.as_deref().unwrap_or("?")
            ));
        }
        // Take over onto the backup, through the orchestrator.
        let to = self.state.units[i].backup_host.clone();
        let to_id = self.host_id(&to)?;
        let fence = if matches!(kind, FailureKind::HostNetwork | FailureKind::Switchover) {
            // Cut off: the orchestrator cannot reach it; the store's epoch fences it.
            // Switchover: it exits by itself once the backup has claimed the instance.
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
            proc: new.proc.index(),
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
        if kind == FailureKind::Switchover {
            let p = old_hf.proc;
            wait_for_every(
                &format!(
                    "{} (pid {}) to exit after the switchover",
                    old.name, old.pid
                ),
                KILL_TIMEOUT,
                Duration::from_millis(10),
                || Ok((!self.lab.is_running(p)).then_some(())),
            )?;
            step(&format!("{} exited by itself", old.name));
        }
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

    /// Detects a failure of `kind` on `host` the way the controller would (the
    /// control socket for a unit, TCP probes from the store's host for a host) and
    /// records it in `report`.
    fn detect(
        &mut self,
        orch: &mut LabOrchestrator,
        kind: FailureKind,
        host: &str,
        old_hf: &Holdfastd,
        report: &mut FailReport,
    ) -> Result<()> {
        let probe = if kind.targets_host() {
            let watched = self
                .state
                .scenario
                .host(host)
                .map(|h| h.v4)
                .ok_or_else(|| LabError::Invalid(format!("lab state: no host `{host}`")))?;
            let from = self.host_id(&self.state.scenario.redis.host.clone())?;
            Probe::Tcp {
                from: self.lab.netns(from).to_string(),
                addr: SocketAddr::new(IpAddr::V4(watched), DETECT_PORT),
            }
        } else {
            Probe::ControlSocket(old_hf.socket.clone())
        };
        let found = orch
            .detect(&probe)
            .inspect_err(|_| self.state.history.push(report.clone()))?;
        report.detected_ms = Some(ms(found.after));
        report.detector = Some(format!("{} probes: {}", found.probes, probe.describe()));
        Ok(())
    }

    /// Brings a failed host back (see [`super::heal`]).
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
                // What the fenced processes sent while cut off (BFD Down packets, say)
                // waits in the host's neighbour queues and qdisc: dropped, so that it
                // does not reach the peers when the port comes up.
                let port = self.lab.drop_queued(self.topo.bridge, id)?;
                actions.push(format!(
                    "dropped what the cut-off processes left queued on {port} (neighbour queues, qdisc)"
                ));
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
