//! `lab fail` and `lab heal` on an [`OpenLab`]: the lab only injects the failure;
//! the controller finds it (its verdict, with its own detection time) and moves the
//! unit through the agents, and the lab waits for the unit to run PROTECTED on its
//! new host and reports what it measured.
//!
//! Known issues: the phases after the verdict are the lab's view (the controller's
//! status file polled every 20 ms, the new process's `/proc` start time at 10 ms
//! resolution, holdfastd's control socket polled every 10 ms); the controller's
//! migration steps carry no times of their own. A container failure's container is
//! re-created (empty) right after the unit runs elsewhere, as a container runtime
//! would.

use std::time::{Duration, Instant};

use holdfast_lab::plane::{kill_all, kill_container_ns, relink_host, verdict_is};
use holdfast_lab::{wait_for_every, HostId, LabError, Result};
use serde_json::Value;

use super::open::OpenLab;
use super::plane::UnitSocket;
use super::report::{FailReport, HealReport, PhaseMs, TakeoverReport};
use super::state::{ms, unix_ms, FailedHost, FailureKind, UnitProc};
use super::{KILL_TIMEOUT, PROTECTED_TIMEOUT};

/// Deadline for the controller's verdict (a host failure takes the agents' 3 s
/// lease and the localization's confirmation).
const VERDICT_TIMEOUT: Duration = Duration::from_secs(30);
/// Deadline for the unit to run on its new host after the verdict.
const MOVE_TIMEOUT: Duration = Duration::from_secs(60);
/// Deadline for every session to be Established at the new primary.
const ESTABLISHED_TIMEOUT: Duration = Duration::from_secs(30);

/// Whether `pid` is alive (not a zombie).
fn pid_alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            s.rsplit_once(')')
                .and_then(|(_, r)| r.split_whitespace().next().map(str::to_string))
        })
        .is_some_and(|st| st != "Z" && st != "X")
}

/// When `pid` started, in ms since the Unix epoch (`/proc/PID/stat`'s start time
/// against `/proc/uptime`: 10 ms resolution).
fn start_unix_ms(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let ticks: u64 = stat
        .rsplit_once(')')?
        .1
        .split_whitespace()
        .nth(19)?
        .parse()
        .ok()?;
    let uptime: f64 = std::fs::read_to_string("/proc/uptime")
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()?;
    let boot_ms = unix_ms().checked_sub((uptime * 1000.0) as u64)?;
    Some(boot_ms + ticks * 10)
}

fn since(t: u64, from: u64) -> f64 {
    t.saturating_sub(from) as f64
}

impl OpenLab {
    /// What a failure of `kind` on `target` hits: (host, the unit whose primary runs
    /// there). Refuses what cannot be injected, before anything is done.
    fn target(&self, kind: FailureKind, target: &str) -> Result<(String, Option<usize>)> {
        let (host, unit_idx) = if kind.targets_host() {
            let h = self.host_id(target)?;
            let name = self.lab.host_info(h).name.clone();
            if !self
                .state
                .plane
                .agents
                .iter()
                .any(|a| a.host == name && !a.server)
            {
                return Err(LabError::Invalid(format!(
                    "`{kind}` needs a host with a host agent, not `{target}` (hosts: {})",
                    self.state
                        .plane
                        .agents
                        .iter()
                        .filter(|a| !a.server)
                        .map(|a| a.host.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                )));
            }
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
            let u = &self.state.units[i];
            // No backup placed: the other host of the unit is down.
            let down = self
                .state
                .failed_hosts
                .iter()
                .find(|f| f.host == u.backup_host || u.backup_host.is_empty());
            if let Some(f) = down {
                return Err(LabError::Invalid(format!(
                    "unit `{}` cannot take over: its backup host `{}` is down ({} failure); `holdfast lab heal {}` first",
                    u.name, f.host, f.kind, f.host
                )));
            }
            if !pid_alive(u.primary.pid) {
                return Err(LabError::Invalid(format!(
                    "unit `{}`: holdfastd {} (pid {}) is not running",
                    u.name, u.primary.name, u.primary.pid
                )));
            }
        }
        Ok((host, unit_idx))
    }

    /// The containers of every unit on `host`: (lab host, interface, service
    /// address `ADDR/LEN`).
    fn containers_on(&self, host: &str) -> Result<Vec<(HostId, String, String)>> {
        let svc = format!(
            "{}/{}",
            self.state.scenario.service.v4,
            holdfast_lab::NSR_V4_LEN
        );
        self.state
            .plane
            .containers
            .iter()
            .filter(|c| c.host == host)
            .map(|c| Ok((self.host_id(&c.name)?, c.ifname.clone(), svc.clone())))
            .collect()
    }

    /// Injects a failure, then waits for the controller's verdict and for the unit
    /// to run PROTECTED on its new host (see [`super::fail`]).
    pub fn fail(
        &mut self,
        kind: FailureKind,
        target: &str,
        progress: &mut dyn FnMut(&str),
    ) -> Result<FailReport> {
        let t0 = Instant::now();
        let mut step = |m: &str| progress(&format!("[{:>7.3}s] {m}", t0.elapsed().as_secs_f64()));
        let (host, unit_idx) = self.target(kind, target)?;
        let host_id = self.host_id(&host)?;
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
        let started = unix_ms();
        let containers = self.containers_on(&host)?;
        match kind {
            FailureKind::Application => {
                let u = self.state.units[unit_idx.expect("a unit target")]
                    .primary
                    .clone();
                if !holdfast_lab::send_signal(u.pid, holdfast_lab::Signal::Kill, false) {
                    return Err(LabError::Invalid(format!("SIGKILL pid {} failed", u.pid)));
                }
                wait_for_every(
                    &format!("{} (pid {}) to be gone after SIGKILL", u.name, u.pid),
                    KILL_TIMEOUT,
                    Duration::from_millis(5),
                    || Ok((!pid_alive(u.pid)).then_some(())),
                )?;
                report.killed_pids.push(u.pid);
                report.injected.push(format!(
                    "SIGKILL holdfastd {} (pid {}) in its container on {host}",
                    u.name, u.pid
                ));
            }
            FailureKind::Container => {
                let unit = self.state.units[unit_idx.expect("a unit target")]
                    .name
                    .clone();
                let (c, _) = self.container(&unit, &host)?;
                let ns = self.lab.netns(c).to_string();
                let killed = kill_container_ns(&ns)?;
                report.injected.push(format!(
                    "container {ns} of `{unit}` on {host} deleted, every process in it SIGKILLed: pids {killed:?}"
                ));
                report.killed_pids = killed;
            }
            FailureKind::Host => {
                let mut killed = kill_all(self.lab.netns(host_id));
                for (c, _, _) in &containers {
                    killed.extend(kill_all(self.lab.netns(*c)));
                    self.lab.set_host_links_up(*c, false)?;
                }
                self.lab.set_host_links_up(host_id, false)?;
                if let Some(a) = self.state.plane.agents.iter_mut().find(|a| a.host == host) {
                    a.proc = None;
                }
                self.plane.rec = self.state.plane.clone();
                report.injected.push(format!(
                    "SIGKILL every process of {host} and its containers (its agent too): pids {killed:?}"
                ));
                report.injected.push(format!(
                    "every link of {host} and its containers down (lan and mgmt)"
                ));
                report.killed_pids = killed;
            }
            FailureKind::HostNetwork => {
                self.lab
                    .set_bridge_port_up(self.topo.bridge, host_id, false)?;
                for (c, _, _) in &containers {
                    self.lab.set_bridge_port_up(self.topo.bridge, *c, false)?;
                }
                report.injected.push(format!(
                    "`lan` ports of {host} and its containers down; its processes and its management link stay up"
                ));
            }
            FailureKind::Switchover => {
                let unit = self.state.units[unit_idx.expect("a unit target")]
                    .name
                    .clone();
                let out = self.plane.ctl(&self.lab, &["switchover", &unit])?;
                report
                    .injected
                    .push(format!("holdfast ctl switchover {unit}: {out}"));
            }
        }
        if kind.targets_host() {
            self.state.failed_hosts.push(FailedHost {
                host: host.clone(),
                kind,
            });
        }
        // A switchover is a request the controller carries out at once: its phases
        // count from the request.
        let injected = if kind == FailureKind::Switchover {
            started
        } else {
            unix_ms()
        };
        report.inject_ms = ms(t0.elapsed());
        for line in &report.injected {
            step(line);
        }
        let Some(i) = unit_idx else {
            step(&format!("no holdfastd primary on {host}: no takeover"));
            self.state.history.push(report.clone());
            return Ok(report);
        };
        let r = self.await_takeover(kind, &host, i, (started, injected), &mut report, &mut step);
        if kind == FailureKind::Container {
            // The container runtime re-creates it, empty, for later placements.
            let unit = self.state.units[i].name.clone();
            let (c, _) = self.container(&unit, &host)?;
            self.lab.revive_host(c)?;
            step(&format!(
                "container of `{unit}` on {host} re-created (empty)"
            ));
        }
        self.state.history.push(report.clone());
        r?;
        Ok(report)
    }

    /// After the injection: the controller's verdict, the unit on its new host,
    /// Established, PROTECTED.
    /// `at`: when the injection started and ended (ms since the Unix epoch).
    fn await_takeover(
        &mut self,
        kind: FailureKind,
        host: &str,
        i: usize,
        at: (u64, u64),
        report: &mut FailReport,
        step: &mut dyn FnMut(&str),
    ) -> Result<()> {
        let (started, injected) = at;
        let unit = self.state.units[i].name.clone();
        let old = self.state.units[i].primary.clone();
        let mut verdict: Option<Value> = None;
        if let Some(finding) = kind.finding() {
            let subject = if kind.targets_host() { host } else { &unit };
            let v = wait_for_every(
                &format!("the controller's verdict {finding} about {subject}"),
                VERDICT_TIMEOUT,
                Duration::from_millis(20),
                || {
                    Ok(self.plane.verdicts().into_iter().find(|v| {
                        verdict_is(v, finding, subject)
                            && v["unix_ms"].as_u64().unwrap_or(0) >= started
                    }))
                },
            )?;
            report.detected_ms = v["detection_ms"].as_f64();
            report.detector = Some(format!(
                "the controller's verdict {}",
                serde_json::to_string(&v["finding"]).unwrap_or_default()
            ));
            step(&format!(
                "controller's verdict {finding} about {subject}: detection {} ms (its own), recorded {} ms after the injection",
                v["detection_ms"],
                since(v["unix_ms"].as_u64().unwrap_or(0), injected)
            ));
            verdict = Some(v);
        }
        let to = wait_for_every(
            &format!("{unit} moved off {host} and running"),
            MOVE_TIMEOUT,
            Duration::from_millis(20),
            || {
                let (primary, _) = self.plane.placement(&self.lab, &unit)?;
                Ok(
                    (primary != host && self.plane.unit_pid(&unit, &primary).is_some())
                        .then_some(primary),
                )
            },
        )?;
        let pid = self.plane.wait_running(&unit, &to, None, MOVE_TIMEOUT)?;
        let new_start = start_unix_ms(pid).unwrap_or(injected);
        let sock = UnitSocket(self.plane.socket(&unit, &to)?);
        wait_for_every(
            &format!("{unit} on {to}: every session Established"),
            ESTABLISHED_TIMEOUT,
            Duration::from_millis(10),
            || Ok(sock.all_established().then_some(())),
        )?;
        let established = unix_ms();
        let new_name = format!("{unit}_{}", self.state.units[i].generation);
        step(&format!(
            "{new_name} (pid {pid}) on {to}, started by its agent: every session Established"
        ));
        wait_for_every(
            &format!("{unit} on {to} PROTECTED"),
            PROTECTED_TIMEOUT,
            Duration::from_millis(50),
            || Ok(sock.nsr().is_ok_and(|n| n.protected).then_some(())),
        )?;
        let protected = unix_ms();
        step(&format!(
            "PROTECTED {} ms after the injection",
            since(protected, injected)
        ));
        let (_, backup) = self.plane.placement(&self.lab, &unit)?;
        let holdfastd = sock.nsr().ok().and_then(|n| n.takeover);
        let v_at = verdict
            .as_ref()
            .and_then(|v| v["unix_ms"].as_u64())
            .unwrap_or(injected);
        report.takeover = Some(TakeoverReport {
            unit: unit.clone(),
            from_host: host.to_string(),
            to_host: to.clone(),
            old_process: old.name.clone(),
            old_pid: old.pid,
            new_process: new_name.clone(),
            new_pid: pid,
            verdict,
            leader: self
                .plane
                .leader()
                .and_then(|l| l["name"].as_str().map(str::to_string)),
            phases_ms: PhaseMs {
                detection: report.detected_ms.unwrap_or(0.0),
                verdict: since(v_at, injected),
                started: since(new_start, injected),
                established: since(established, injected),
                protected: since(protected, injected),
            },
            holdfastd,
            new_backup: backup.clone().unwrap_or_default(),
        });
        let u = &mut self.state.units[i];
        u.generation += 1;
        u.primary = UnitProc {
            name: new_name,
            host: to.clone(),
            pid,
        };
        u.backup_host = backup.unwrap_or_default();
        self.state.service_host = to;
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
        // What a host-network failure left running there was fenced by its agent
        // (the controller's command over the management network); a unit still
        // running there now is an error. After a host failure its agent is gone
        // and its status file stale.
        let agent_alive = self
            .state
            .plane
            .agents
            .iter()
            .any(|a| a.host == host && a.proc.is_some());
        for u in &self.state.units {
            if agent_alive && u.primary.host != host {
                if let Some(pid) = self.plane.unit_pid(&u.name, host) {
                    return Err(LabError::Invalid(format!(
                        "{host}'s agent still runs `{}` (pid {pid}), moved to {}",
                        u.name, u.primary.host
                    )));
                }
            }
        }
        let containers = self.containers_on(host)?;
        relink_host(&self.lab, self.topo.bridge, id, &containers)?;
        actions.push(format!(
            "no stale service address in {host}'s containers, what they left queued dropped, every link of {host} and its containers up"
        ));
        let ai = self
            .state
            .plane
            .agents
            .iter()
            .position(|a| a.host == host)
            .ok_or_else(|| LabError::Invalid(format!("no agent on `{host}`")))?;
        if self.state.plane.agents[ai].proc.is_none() {
            let args = self.state.plane.agents[ai].args.clone();
            let _ = std::fs::remove_file(&self.state.plane.agents[ai].status);
            let argv: Vec<&str> = args.iter().map(String::as_str).collect();
            let name = format!("agent-{host}-again-{}", self.lab.proc_count());
            let p = self.lab.spawn(id, &name, &argv, &[("RUST_LOG", "info")])?;
            let pid = self.lab.pid(p);
            self.state.plane.agents[ai].proc = Some(p.index());
            self.plane.rec = self.state.plane.clone();
            actions.push(format!("agent on {host} started again (pid {pid})"));
        }
        let done = self
            .plane
            .ctl(&self.lab, &["reset", host, "--wait", "20"])?;
        if done["done"] != true {
            return Err(LabError::Invalid(format!(
                "holdfast ctl reset {host}: {done}"
            )));
        }
        actions.push(format!("holdfast ctl reset {host}: usable again"));
        for u in 0..self.state.units.len() {
            let name = self.state.units[u].name.clone();
            let (_, backup) = self.plane.placement(&self.lab, &name)?;
            let b = backup.unwrap_or_default();
            actions.push(format!(
                "`{name}`'s backup: {}",
                if b.is_empty() { "none" } else { &b }
            ));
            self.state.units[u].backup_host = b;
        }
        self.state.failed_hosts.remove(pos);
        Ok(HealReport {
            host: host.to_string(),
            kind,
            actions,
        })
    }
}
