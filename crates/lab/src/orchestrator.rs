//! The lab's [`Orchestrator`]: [`LabOrchestrator`] takes a holdfastd unit of an
//! [`NsrTopo`] over onto the other speaker host, following the contract of
//! `holdfast-orchestrate` (detect, fence, start the backup with `--takeover`, move the
//! service address, wait for every session). Its TCP probes run in a host's network
//! namespace ([`holdfast_linux::netns::in_netns`]); the ready file of a new unit is
//! `<work dir>/<name>/takeover.ready`.
//!
//! Only the NSR lab tests that drive a takeover step by step use it (`nsr_frr`,
//! `nsr_bird`, `nsr_gobgp`, `nsr_bfd_*`, `nsr_lab_self`): `holdfast lab` and `make demo`
//! run the real control plane ([`crate::plane`]), whose controller detects the failure
//! and migrates the unit through the host agents.
//!
//! # Known issues
//! * A test double of the controller: its detection is a lab probe, not the controller's
//!   localization, and its phase times are not Table 1's.
//! * A host it is told is unreachable ([`LabOrchestrator::set_reachable`]) keeps the
//!   service address: after a move both hosts hold it until a reachable move cleans it
//!   up, as a real controller would leave it.

use std::time::{Duration, Instant};

use holdfast_orchestrate::{
    detect, run_takeover, Connect, Detection, Fence, Orchestrator, Probe, TakeoverDeadlines,
    TakeoverTimes,
};

use crate::cmd::{pid_alive, Signal};
use crate::error::{LabError, Result};
use crate::holdfast::{Holdfastd, StartOpts};
use crate::lab::{HostId, Lab};
use crate::nsr::NsrTopo;
use crate::wait::wait_for_every;

/// How long [`LabOrchestrator::unit_adds_address`] waits for the unit to
/// add the service address.
const ADDRESS_BY_UNIT: Duration = Duration::from_secs(10);

/// The lab's orchestrator: fences by signal, moves the service addresses of an
/// [`NsrTopo`] over rtnetlink and announces them with
/// `holdfast_linux::announce_address` inside the new host's namespace.
#[derive(Debug, Clone)]
pub struct LabOrchestrator {
    /// The topology whose service addresses it moves.
    pub topo: NsrTopo,
    /// Deadlines of [`Orchestrator::takeover`].
    pub deadlines: TakeoverDeadlines,
    /// Hosts the orchestrator pretends it cannot reach (e.g. after a host-network
    /// failure): it leaves their addresses alone.
    pub unreachable: Vec<HostId>,
    /// What it did, one line per action, with the time since it was created.
    pub actions: Vec<String>,
    /// The units add and announce the IPv4 service address themselves
    /// (`[nsr] manage_address = true`): a takeover's address step removes
    /// it from the old host and waits until it is on the new one.
    pub unit_adds_address: bool,
    created: Instant,
}

impl LabOrchestrator {
    /// An orchestrator for `topo` with default deadlines.
    pub fn new(topo: &NsrTopo) -> Self {
        LabOrchestrator {
            topo: topo.clone(),
            deadlines: TakeoverDeadlines::default(),
            unreachable: Vec::new(),
            actions: Vec::new(),
            unit_adds_address: false,
            created: Instant::now(),
        }
    }

    /// Treat `host` as unreachable (or reachable again) for address deletion.
    pub fn set_reachable(&mut self, host: HostId, reachable: bool) {
        self.unreachable.retain(|h| *h != host);
        if !reachable {
            self.unreachable.push(host);
        }
    }

    fn note(&mut self, what: String) {
        let t = self.created.elapsed().as_secs_f64();
        self.actions.push(format!("[{t:>7.3}s] {what}"));
    }
}

impl Orchestrator for LabOrchestrator {
    type Env = Lab;
    type Unit = Holdfastd;
    type Host = HostId;
    type Error = LabError;

    /// The probes of `holdfast_orchestrate::detect`, TCP ones sent from the namespace
    /// named in the probe.
    fn detect(&mut self, probe: &Probe) -> Result<Detection> {
        let site = |ns: &str, connect: Connect| holdfast_linux::netns::in_netns(ns, connect);
        Ok(detect(probe, &site)?)
    }

    fn fence(
        &mut self,
        lab: &mut Lab,
        old: &Holdfastd,
        how: Fence,
        deadline: Duration,
    ) -> Result<()> {
        let pid = old.os_pid;
        match how {
            Fence::None => {
                self.note(format!("fence {}: none", old.name));
                Ok(())
            }
            Fence::Kill => {
                lab.kill(old.proc, Signal::Kill);
                let p = old.proc;
                wait_for_every(
                    &format!("{} (pid {pid}) to be gone after SIGKILL", old.name),
                    deadline,
                    Duration::from_millis(5),
                    || Ok((!lab.is_running(p) && !pid_alive(pid)).then_some(())),
                )?;
                self.note(format!("fence {}: SIGKILL pid {pid}, gone", old.name));
                Ok(())
            }
            Fence::Stop => {
                lab.kill(old.proc, Signal::Stop);
                wait_for_every(
                    &format!("{} (pid {pid}) to be stopped", old.name),
                    deadline,
                    Duration::from_millis(5),
                    || Ok(proc_state(pid).is_some_and(|s| s == 'T').then_some(())),
                )?;
                self.note(format!("fence {}: SIGSTOP pid {pid}", old.name));
                Ok(())
            }
        }
    }

    fn move_address(&mut self, lab: &mut Lab, to: HostId) -> Result<()> {
        let topo = self.topo.clone();
        let to_host = topo.host(to)?.clone();
        let from = topo.other(to);
        if from != to && !self.unreachable.contains(&from) {
            match topo.del_service(lab, from) {
                Ok(()) => self.note(format!("address: deleted on {}", lab.host_info(from).name)),
                // Unreachable after a host failure is fine: the new host takes over.
                Err(e) => self.note(format!(
                    "address: delete on {} failed ({e})",
                    lab.host_info(from).name
                )),
            }
        }
        if self.unit_adds_address {
            wait_for_every(
                "the unit adding the service address",
                ADDRESS_BY_UNIT,
                Duration::from_millis(2),
                || Ok(topo.service_addrs_on(lab, to)?.0.then_some(())),
            )?;
            self.note(format!(
                "address: added by the unit on {}",
                lab.host_info(to).name
            ));
            return Ok(());
        }
        topo.add_service(lab, to)?;
        self.note(format!("address: added on {}", lab.host_info(to).name));
        let netns = lab.netns(to).to_string();
        for addr in topo.service_addrs() {
            let ifname = to_host.ifname.clone();
            holdfast_linux::netns::in_netns(&netns, move || {
                holdfast_linux::announce_address(&ifname, addr)
            })
            .and_then(|r| r)
            .map_err(|e| LabError::Io {
                context: format!("announcing {addr} on {} in {netns}", to_host.ifname),
                source: e,
            })?;
            self.note(format!("address: announced {addr}"));
        }
        Ok(())
    }

    /// The ready file is `<work dir>/<name>/takeover.ready`.
    fn start_takeover(
        &mut self,
        lab: &mut Lab,
        host: HostId,
        name: &str,
        config: &str,
        ready: Duration,
    ) -> Result<Holdfastd> {
        let ready_file = lab.work_dir().join(name).join("takeover.ready");
        let new = Holdfastd::start_with(lab, host, name, config, &StartOpts::takeover(ready_file))?;
        new.wait_ready_file(ready)?;
        Ok(new)
    }

    fn wait_established(
        &mut self,
        _lab: &mut Lab,
        unit: &Holdfastd,
        deadline: Duration,
    ) -> Result<()> {
        unit.wait_all_established(deadline).map(drop)
    }

    /// [`run_takeover`] with [`LabOrchestrator::deadlines`], noted in
    /// [`LabOrchestrator::actions`].
    fn takeover(
        &mut self,
        lab: &mut Lab,
        old: &Holdfastd,
        new_host: HostId,
        name: &str,
        config: &str,
        fence: Fence,
    ) -> Result<(Holdfastd, TakeoverTimes)> {
        let deadlines = self.deadlines;
        let r = run_takeover(self, lab, old, new_host, name, config, fence, &deadlines);
        match &r {
            Ok((_, t)) => self.note(format!("takeover by {name}: {t:?}")),
            Err(e) => self.note(format!("takeover by {name} failed: {e}")),
        }
        r
    }
}

impl LabOrchestrator {
    /// [`Orchestrator::takeover`] by a preheated standby already running on
    /// `standby.host` (`holdfastd --standby`): [`holdfast_orchestrate::run_takeover`]
    /// with starting the backup replaced by sending the standby `holdfast nsr
    /// takeover` (its ready file is `<work dir>/<name>/takeover.ready`) and waiting for
    /// the ready file. Returns the unit that took over (the standby) and the times.
    pub fn takeover_standby(
        &mut self,
        lab: &mut Lab,
        old: &Holdfastd,
        standby: Holdfastd,
        fence: Fence,
    ) -> Result<(Holdfastd, TakeoverTimes)> {
        let deadlines = self.deadlines;
        let (host, name) = (standby.host, standby.name.clone());
        let mut via = ViaStandby {
            orch: self,
            standby: Some(standby),
        };
        run_takeover(&mut via, lab, old, host, &name, "", fence, &deadlines)
    }
}

/// The lab orchestrator whose "start the backup" is a standby's takeover.
struct ViaStandby<'a> {
    orch: &'a mut LabOrchestrator,
    standby: Option<Holdfastd>,
}

impl Orchestrator for ViaStandby<'_> {
    type Env = Lab;
    type Unit = Holdfastd;
    type Host = HostId;
    type Error = LabError;

    fn fence(
        &mut self,
        lab: &mut Lab,
        old: &Holdfastd,
        how: Fence,
        deadline: Duration,
    ) -> Result<()> {
        self.orch.fence(lab, old, how, deadline)
    }

    /// Sends the standby `nsr takeover`; its configuration is the one it started with.
    fn start_takeover(
        &mut self,
        lab: &mut Lab,
        _host: HostId,
        name: &str,
        _config: &str,
        ready: Duration,
    ) -> Result<Holdfastd> {
        let mut sb = self
            .standby
            .take()
            .ok_or_else(|| LabError::Invalid(format!("{name}: the standby was used already")))?;
        let ready_file = lab.work_dir().join(name).join("takeover.ready");
        let answer = sb.standby_takeover(ready_file, None)?;
        self.orch.note(format!("standby {name}: {answer}"));
        sb.wait_ready_file(ready)?;
        Ok(sb)
    }

    fn move_address(&mut self, lab: &mut Lab, to: HostId) -> Result<()> {
        self.orch.move_address(lab, to)
    }

    fn wait_established(
        &mut self,
        lab: &mut Lab,
        unit: &Holdfastd,
        deadline: Duration,
    ) -> Result<()> {
        self.orch.wait_established(lab, unit, deadline)
    }
}

/// The state letter of a process (`/proc/PID/stat`), if it exists.
fn proc_state(pid: u32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit_once(')')?
        .1
        .split_whitespace()
        .next()?
        .chars()
        .next()
}
