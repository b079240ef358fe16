//! Running external commands with bounded time, sending signals, finding tools.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use crate::error::{io_ctx, LabError, Result};

/// Default limit for short query commands (`ip`, `birdc`, `vtysh`, `gobgp`).
pub const DEFAULT_CMD_TIMEOUT: Duration = Duration::from_secs(20);

/// Signals the harness can deliver (sent with `kill -s NAME`, no `unsafe`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Signal {
    /// SIGTERM: polite stop.
    Term,
    /// SIGKILL: immediate stop.
    Kill,
    /// SIGINT.
    Int,
    /// SIGHUP (many daemons reload on it).
    Hup,
    /// SIGSTOP: freeze the process (e.g. to make a peer miss keepalives).
    Stop,
    /// SIGCONT: resume a stopped process.
    Cont,
    /// SIGUSR1.
    Usr1,
}

impl Signal {
    /// Name understood by `kill -s`.
    pub fn name(self) -> &'static str {
        match self {
            Signal::Term => "TERM",
            Signal::Kill => "KILL",
            Signal::Int => "INT",
            Signal::Hup => "HUP",
            Signal::Stop => "STOP",
            Signal::Cont => "CONT",
            Signal::Usr1 => "USR1",
        }
    }
}

/// Render an argv for error messages.
pub(crate) fn render(argv: &[String]) -> String {
    argv.join(" ")
}

/// Run `argv` to completion with a deadline; the child is killed when the deadline passes.
/// The exit status is not checked.
pub(crate) fn run_timeout(argv: &[String], timeout: Duration) -> Result<Output> {
    let (prog, args) = argv
        .split_first()
        .ok_or_else(|| LabError::Invalid("empty argv".into()))?;
    let mut child = Command::new(prog)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(io_ctx(format!("spawning `{}`", render(argv))))?;
    let out_reader = spawn_reader(child.stdout.take());
    let err_reader = spawn_reader(child.stderr.take());
    let status = match wait_child(&mut child, timeout) {
        Some(status) => status,
        None => {
            let _ = child.kill();
            let _ = wait_child(&mut child, Duration::from_secs(2));
            return Err(LabError::CommandTimeout {
                command: render(argv),
                timeout,
            });
        }
    };
    let stdout = out_reader.join().unwrap_or_default();
    let stderr = err_reader.join().unwrap_or_default();
    Ok(Output {
        status,
        stdout,
        stderr,
    })
}

/// Like [`run_timeout`] but fails on a non-zero exit status; returns stdout as text.
pub(crate) fn run_ok(argv: &[String], timeout: Duration) -> Result<String> {
    let out = run_timeout(argv, timeout)?;
    check_output(argv, &out)?;
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Run `cmd` inside the network namespace `netns` (`ip netns exec`), fail on a non-zero
/// exit, return stdout as text. Needs no [`crate::Lab`], so it can run on any thread
/// (session probes, watches).
pub(crate) fn ns_exec_ok(netns: &str, cmd: &[&str]) -> Result<String> {
    let mut full = argv(&["ip", "netns", "exec", netns]);
    full.extend(cmd.iter().map(|s| s.to_string()));
    run_ok(&full, DEFAULT_CMD_TIMEOUT)
}

/// Turn a non-zero exit status into [`LabError::CommandFailed`].
pub(crate) fn check_output(argv: &[String], out: &Output) -> Result<()> {
    if out.status.success() {
        return Ok(());
    }
    let stderr = String::from_utf8_lossy(&out.stderr);
    let text = if stderr.trim().is_empty() {
        String::from_utf8_lossy(&out.stdout).into_owned()
    } else {
        stderr.into_owned()
    };
    Err(LabError::CommandFailed {
        command: render(argv),
        status: out.status.to_string(),
        output: text.trim().to_string(),
    })
}

fn spawn_reader<R: Read + Send + 'static>(src: Option<R>) -> thread::JoinHandle<Vec<u8>> {
    thread::spawn(move || {
        let mut buf = Vec::new();
        if let Some(mut r) = src {
            let _ = r.read_to_end(&mut buf);
        }
        buf
    })
}

/// Poll `child` until it exits or `timeout` passes; returns the status if it exited.
pub(crate) fn wait_child(child: &mut Child, timeout: Duration) -> Option<std::process::ExitStatus> {
    let deadline = Instant::now() + timeout;
    let mut pause = Duration::from_millis(2);
    loop {
        match child.try_wait() {
            Ok(Some(status)) => return Some(status),
            Ok(None) => {}
            Err(_) => return None,
        }
        let now = Instant::now();
        if now >= deadline {
            return None;
        }
        thread::sleep(pause.min(deadline - now));
        pause = (pause * 2).min(Duration::from_millis(50));
    }
}

/// Send `sig` to a pid (or, with `group`, to the process group led by `pid`).
pub fn send_signal(pid: u32, sig: Signal, group: bool) -> bool {
    let target = if group {
        format!("-{pid}")
    } else {
        pid.to_string()
    };
    Command::new("kill")
        .args(["-s", sig.name(), "--", &target])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .map(|s| s.success())
        .unwrap_or(false)
}

/// Whether a pid currently exists (zombies count as gone).
pub(crate) fn pid_alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .is_some_and(|state| state != "Z" && state != "X"),
        Err(_) => false,
    }
}

/// Locate an executable by name in `$PATH` plus the sbin and FRR directories.
pub fn find_tool(name: &str) -> Option<PathBuf> {
    if name.contains('/') {
        let p = PathBuf::from(name);
        return is_executable(&p).then_some(p);
    }
    let path = std::env::var("PATH").unwrap_or_default();
    path.split(':')
        .filter(|d| !d.is_empty())
        .map(PathBuf::from)
        .chain(["/usr/sbin", "/sbin", "/usr/bin", "/bin", "/usr/lib/frr"].map(PathBuf::from))
        .map(|d| d.join(name))
        .find(|p| is_executable(p))
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// Like [`find_tool`] but returns [`LabError::MissingTool`].
pub fn require_tool(name: &str) -> Result<PathBuf> {
    find_tool(name).ok_or_else(|| LabError::MissingTool(name.to_string()))
}

/// Whether the current process has effective uid 0 (read from `/proc/self/status`).
pub fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .and_then(|l| l.split_whitespace().nth(2).map(|e| e == "0"))
        })
        .unwrap_or(false)
}

/// Operational state (`ip -o link`: `UP`, `DOWN`, `LOWERLAYERDOWN`, ...) of `ifname` in
/// namespace `ns`; `None` if it cannot be read.
pub fn link_state(ns: &str, ifname: &str) -> Option<String> {
    let out = run_ok(
        &argv(&["ip", "-n", ns, "-o", "link", "show", "dev", ifname]),
        DEFAULT_CMD_TIMEOUT,
    )
    .ok()?;
    out.split_whitespace()
        .skip_while(|w| *w != "state")
        .nth(1)
        .map(str::to_string)
}

/// Convert a slice of `&str` into owned argv.
pub(crate) fn argv(parts: &[&str]) -> Vec<String> {
    parts.iter().map(|s| s.to_string()).collect()
}
