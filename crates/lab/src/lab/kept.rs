//! A lab that outlives the process that built it (`holdfast lab up`, then
//! `holdfast lab fail` / `down` from other processes): the state written by
//! [`Lab::kept_state`], [`Lab::keep`], and [`Lab::adopt`] reading it back.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::{proc_start_time, BridgeInfo, HostInfo, Lab, LinkInfo, ProcEntry};
use crate::cmd::pid_alive;
use crate::error::{LabError, Result};
use crate::stale;

/// One process of a [`KeptLab`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeptProc {
    /// Log name (`logs/<name>.stdout|.stderr`).
    pub name: String,
    /// Process id (also its process group id).
    pub pid: u32,
    /// Its start time in clock ticks since boot (`/proc/PID/stat` field 22), if known.
    pub start_time: Option<u64>,
    /// Path of its stdout log.
    pub stdout: PathBuf,
    /// Path of its stderr log.
    pub stderr: PathBuf,
    /// Whether it is a packet capture (stopped after the daemons).
    pub capture: bool,
}

/// Everything a [`Lab`] needs to be torn down (or driven further) by another process:
/// what [`Lab::kept_state`] writes and [`Lab::adopt`] reads. Serialisable (JSON).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct KeptLab {
    /// Run id (`hf` + 6 hex digits), prefix of every namespace.
    pub run_id: String,
    /// Name given to [`Lab::new`].
    pub test_name: String,
    /// Work directory (logs, pcaps, configs).
    pub work_dir: PathBuf,
    /// Hosts, in creation order ([`HostId`] = index).
    pub hosts: Vec<HostInfo>,
    /// Links ([`LinkId`] = index).
    pub links: Vec<LinkInfo>,
    /// Bridges ([`BridgeId`] = index).
    pub bridges: Vec<BridgeInfo>,
    /// Processes ([`ProcId`] = index).
    pub procs: Vec<KeptProc>,
    /// Captured (namespace, interface) pairs.
    pub captured: Vec<(String, String)>,
    /// Pcap files.
    pub pcaps: Vec<PathBuf>,
    /// Whether every new link gets a capture.
    pub pcap_enabled: bool,
}

impl Lab {
    /// What another process needs to drive or tear down this lab (see [`Lab::adopt`]).
    pub fn kept_state(&self) -> KeptLab {
        KeptLab {
            run_id: self.run_id.clone(),
            test_name: self.test_name.clone(),
            work_dir: self.work_dir.clone(),
            hosts: self.hosts.clone(),
            links: self.links.clone(),
            bridges: self.bridges.clone(),
            procs: self
                .procs
                .iter()
                .map(|p| KeptProc {
                    name: p.name.clone(),
                    pid: p.pid,
                    start_time: p.start_time,
                    stdout: p.stdout.clone(),
                    stderr: p.stderr.clone(),
                    capture: p.capture,
                })
                .collect(),
            captured: self.captured.clone(),
            pcaps: self.pcaps.clone(),
            pcap_enabled: self.pcap_enabled,
        }
    }

    /// Keep the lab running after this `Lab` is dropped (or this process exits): disarms
    /// the teardown of `Drop` and registers the run as kept by `state_file`, so
    /// [`crate::cleanup_stale`] leaves its namespaces alone for as long as that file
    /// exists and names the run. Write [`Lab::kept_state`] into `state_file` first.
    /// [`Lab::teardown`] still tears it down when called explicitly.
    pub fn keep(&mut self, state_file: &Path) -> Result<()> {
        stale::register_kept(&self.run_id, state_file)?;
        self.kept = true;
        Ok(())
    }

    /// Whether dropping this `Lab` leaves it running ([`Lab::keep`], [`Lab::adopt`]).
    pub fn is_kept(&self) -> bool {
        self.kept
    }

    /// A `Lab` for a kept lab started by another process (or earlier by this one): hosts,
    /// links, bridges and processes as `state` describes them. Its processes are not this
    /// process's children: they are watched and signalled by pid (never one whose start
    /// time differs from the recorded one). The result is kept: dropping it tears
    /// nothing down; [`Lab::teardown`] does (every process of its namespaces, the
    /// namespaces, the registry entry and, unless failed, the work directory).
    pub fn adopt(state: KeptLab) -> Result<Lab> {
        if !crate::cmd::is_root() {
            return Err(LabError::NotRoot);
        }
        if crate::stale::run_id_of(&format!("{}-", state.run_id)) != Some(state.run_id.as_str()) {
            return Err(LabError::Invalid(format!(
                "`{}` is not a lab run id",
                state.run_id
            )));
        }
        Ok(Lab {
            run_id: state.run_id,
            test_name: state.test_name,
            work_dir: state.work_dir,
            hosts: state.hosts,
            links: state.links,
            bridges: state.bridges,
            procs: state
                .procs
                .into_iter()
                .map(|p| ProcEntry {
                    name: p.name,
                    child: None,
                    pid: p.pid,
                    start_time: p.start_time,
                    stdout: p.stdout,
                    stderr: p.stderr,
                    capture: p.capture,
                    exit: None,
                })
                .collect(),
            captured: state.captured,
            pcaps: state.pcaps,
            pcap_enabled: state.pcap_enabled,
            failed: false,
            torn_down: false,
            kept: true,
        })
    }
}

/// Whether an adopted process (not necessarily a child) is alive: reaps it first if it is
/// a zombie child of this process, then checks the pid exists, is no zombie, and has the
/// recorded start time.
pub(super) fn adopted_alive(pid: u32, start_time: Option<u64>) -> bool {
    use nix::sys::wait::{waitpid, WaitPidFlag};
    if let Ok(raw) = i32::try_from(pid) {
        // ECHILD (not our child) and "still alive" are both fine here.
        let _ = waitpid(nix::unistd::Pid::from_raw(raw), Some(WaitPidFlag::WNOHANG));
    }
    pid_alive(pid) && (start_time.is_none() || proc_start_time(pid) == start_time)
}
