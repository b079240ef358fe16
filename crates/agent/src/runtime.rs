//! Where units run: the [`Runtime`] trait, and [`ProcessRuntime`].
//!
//! A unit is one holdfastd (or its backup) that the agent starts, watches
//! and fences. The agent does not care how it is contained: in the lab a
//! container is a network namespace, on a server it is a process or a
//! systemd unit. Every runtime watches its units' processes through a
//! pidfd and signals them through it, so a recycled PID is never hit.

use holdfast_linux::pidfd;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::os::fd::{AsFd, OwnedFd};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// What to run for a unit.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UnitSpec {
    /// The unit's name (unique on the host).
    pub name: String,
    /// The network namespace to run it in (the lab's container), if any.
    pub netns: Option<String>,
    pub program: PathBuf,
    pub args: Vec<String>,
    pub env: Vec<(String, String)>,
    /// Where its stdout and stderr go (appended), if anywhere.
    pub log: Option<PathBuf>,
}

/// How a unit's process ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Exit {
    pub unit: String,
    pub pid: u32,
    /// Exit status, or `None` when killed by a signal.
    pub code: Option<i32>,
    pub signal: Option<i32>,
    /// Whether the agent fenced it.
    pub fenced: bool,
    /// Whether its container went with it (set by the shell, which knows
    /// what a container is on this host).
    #[serde(default)]
    pub container_gone: bool,
}

/// Errors of a runtime.
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    #[error("unit {0} is already running")]
    Running(String),
    #[error("no unit {0}")]
    NoUnit(String),
    #[error("unit {unit}: {what}: {source}")]
    Io {
        unit: String,
        what: &'static str,
        source: std::io::Error,
    },
    #[error("unit {unit} (pid {pid}) still running {waited:?} after SIGKILL")]
    Unkillable {
        unit: String,
        pid: u32,
        waited: Duration,
    },
}

/// A place units run.
pub trait Runtime {
    /// Starts `spec`; returns its pid.
    fn start(&mut self, spec: &UnitSpec) -> Result<u32, RuntimeError>;
    /// Fences the unit: SIGKILL, and waits (up to `deadline`) until it is
    /// gone. A unit that already exited is fenced too.
    fn fence(&mut self, unit: &str, deadline: Duration) -> Result<Exit, RuntimeError>;
    /// Units whose process exited since the last call (fenced or not).
    fn exited(&mut self) -> Vec<Exit>;
    /// Running units and their pids.
    fn running(&self) -> Vec<(String, u32)>;
}

struct Proc {
    child: Child,
    pidfd: OwnedFd,
}

/// Units as child processes, each optionally in a network namespace
/// (`ip netns exec NS PROGRAM ...`, which execs, so the pid is the
/// program's).
#[derive(Default)]
pub struct ProcessRuntime {
    units: BTreeMap<String, Proc>,
}

impl ProcessRuntime {
    pub fn new() -> Self {
        ProcessRuntime::default()
    }

    fn reap(unit: &str, mut p: Proc, fenced: bool) -> Exit {
        let pid = p.child.id();
        let st = p.child.wait().ok();
        use std::os::unix::process::ExitStatusExt;
        Exit {
            unit: unit.to_string(),
            pid,
            code: st.and_then(|s| s.code()),
            signal: st.and_then(|s| s.signal()),
            fenced,
            container_gone: false,
        }
    }
}

impl Runtime for ProcessRuntime {
    fn start(&mut self, spec: &UnitSpec) -> Result<u32, RuntimeError> {
        if self.units.contains_key(&spec.name) {
            return Err(RuntimeError::Running(spec.name.clone()));
        }
        let io = |what, source| RuntimeError::Io {
            unit: spec.name.clone(),
            what,
            source,
        };
        let mut cmd = match &spec.netns {
            Some(ns) => {
                let mut c = Command::new("ip");
                c.args(["netns", "exec", ns]).arg(&spec.program);
                c
            }
            None => Command::new(&spec.program),
        };
        cmd.args(&spec.args).stdin(Stdio::null());
        for (k, v) in &spec.env {
            cmd.env(k, v);
        }
        match &spec.log {
            Some(path) => {
                let f = std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(path)
                    .map_err(|e| io("opening its log", e))?;
                let f2 = f.try_clone().map_err(|e| io("opening its log", e))?;
                cmd.stdout(f).stderr(f2);
            }
            None => {
                cmd.stdout(Stdio::null()).stderr(Stdio::null());
            }
        }
        let child = cmd.spawn().map_err(|e| io("starting", e))?;
        let pid = child.id();
        let pidfd = match pidfd::open(pid) {
            Ok(fd) => fd,
            Err(e) => {
                let mut child = child;
                let _ = child.kill();
                let _ = child.wait();
                return Err(io("opening its pidfd", e));
            }
        };
        tracing::info!(unit = %spec.name, pid, netns = ?spec.netns, "unit started");
        self.units.insert(spec.name.clone(), Proc { child, pidfd });
        Ok(pid)
    }

    fn fence(&mut self, unit: &str, deadline: Duration) -> Result<Exit, RuntimeError> {
        let p = self
            .units
            .remove(unit)
            .ok_or_else(|| RuntimeError::NoUnit(unit.to_string()))?;
        let pid = p.child.id();
        let t0 = Instant::now();
        if !pidfd::exited(p.pidfd.as_fd(), 0).unwrap_or(false) {
            // ESRCH: it exited between the check and the signal.
            let _ = pidfd::send_signal(p.pidfd.as_fd(), libc::SIGKILL);
            let ms = i32::try_from(deadline.as_millis()).unwrap_or(i32::MAX);
            let gone = pidfd::exited(p.pidfd.as_fd(), ms).map_err(|e| RuntimeError::Io {
                unit: unit.to_string(),
                what: "waiting for it to exit",
                source: e,
            })?;
            if !gone {
                self.units.insert(unit.to_string(), p);
                return Err(RuntimeError::Unkillable {
                    unit: unit.to_string(),
                    pid,
                    waited: t0.elapsed(),
                });
            }
        }
        let exit = Self::reap(unit, p, true);
        tracing::warn!(
            unit,
            pid,
            took_ms = t0.elapsed().as_millis() as u64,
            "unit fenced"
        );
        Ok(exit)
    }

    fn exited(&mut self) -> Vec<Exit> {
        let done: Vec<String> = self
            .units
            .iter()
            .filter(|(_, p)| pidfd::exited(p.pidfd.as_fd(), 0).unwrap_or(false))
            .map(|(n, _)| n.clone())
            .collect();
        done.into_iter()
            .filter_map(|n| self.units.remove(&n).map(|p| Self::reap(&n, p, false)))
            .collect()
    }

    fn running(&self) -> Vec<(String, u32)> {
        self.units
            .iter()
            .map(|(n, p)| (n.clone(), p.child.id()))
            .collect()
    }
}

impl Drop for ProcessRuntime {
    /// An agent that goes away takes its units with it: a unit must never
    /// outlive the agent that fences it.
    fn drop(&mut self) {
        let names: Vec<String> = self.units.keys().cloned().collect();
        for n in names {
            let _ = self.fence(&n, Duration::from_secs(5));
        }
    }
}
