//! `holdfastd` as a lab unit: started in a host with a generated
//! configuration, read back over its control socket (the same JSON API the
//! `holdfast` CLI uses), reloaded with SIGHUP, stopped by PID.
//!
//! Binaries are found through `HOLDFASTD_BIN` / `HOLDFAST_BIN`, else in the
//! workspace's `target/release` or `target/debug` (whichever is newer).

use crate::cmd::{pid_alive, Signal};
use crate::error::{io_ctx, parse_err, LabError, Result};
use crate::lab::{HostId, Lab, ProcId};
use crate::wait::{wait_until, DEFAULT_POLL_INTERVAL};
use holdfast_api::{Body, NeighborInfo, NsrStatus, Request, RibEntry, RibTable, Summary};
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The log filter a lab holdfastd runs with unless told otherwise: the
/// binary's debug lines, and the `RIB batch` and session-state debug lines
/// of the speaker's metrics module (`obs`), which the bench sums up.
pub const DEFAULT_LOG: &str = "info,holdfastd=debug,holdfast_speaker::obs=debug";

/// Finds a workspace binary: `$ENV`, else NAME next to the running executable (e.g.
/// `holdfastd` next to `holdfast` for `holdfast lab`), else the newest of
/// target/{release,debug}/NAME.
pub fn find_binary(name: &str, env: &str) -> Result<PathBuf> {
    if let Ok(p) = std::env::var(env) {
        return Ok(PathBuf::from(p));
    }
    if let Some(p) = std::env::current_exe()
        .ok()
        .and_then(|e| e.parent().map(|d| d.join(name)))
        .filter(|p| p.is_file())
    {
        return Ok(p);
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let target = std::env::var("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|_| root.join("target"));
    let mut best: Option<(std::time::SystemTime, PathBuf)> = None;
    for profile in ["release", "debug"] {
        let p = target.join(profile).join(name);
        if let Ok(m) = std::fs::metadata(&p).and_then(|m| m.modified()) {
            if best.as_ref().is_none_or(|(t, _)| m > *t) {
                best = Some((m, p));
            }
        }
    }
    best.map(|(_, p)| p)
        .ok_or_else(|| LabError::MissingTool(format!("{name} (build it, or set {env})")))
}

/// How to start holdfastd, beyond host, name and configuration.
#[derive(Debug, Clone, Default)]
pub struct StartOpts {
    /// Start as the backup taking over the `[nsr]` instance of the configuration
    /// (`--takeover`): the control socket answers before any session is restored.
    pub takeover: bool,
    /// Start as a preheated standby (`--standby`): it follows the store until
    /// [`Holdfastd::standby_takeover`].
    pub standby: bool,
    /// `--takeover-ready-file PATH`: created by holdfastd once its state is loaded and it
    /// waits for the service address (see [`Holdfastd::wait_ready_file`]).
    pub ready_file: Option<PathBuf>,
    /// Extra environment (after the default [`DEFAULT_LOG`] in `HOLDFAST_LOG`, which
    /// an entry here overrides).
    pub env: Vec<(String, String)>,
    /// Further command-line arguments (e.g. `--record DIR`).
    pub args: Vec<String>,
}

impl StartOpts {
    /// Options for a takeover with a ready file.
    pub fn takeover(ready_file: PathBuf) -> Self {
        StartOpts {
            takeover: true,
            standby: false,
            ready_file: Some(ready_file),
            env: Vec::new(),
            args: Vec::new(),
        }
    }
}

/// A running holdfastd.
pub struct Holdfastd {
    pub host: HostId,
    pub proc: ProcId,
    pub config_path: PathBuf,
    pub socket: PathBuf,
    pub name: String,
    /// The `--takeover-ready-file`, if any.
    pub ready_file: Option<PathBuf>,
    /// Process id (holdfastd itself: `ip netns exec` execs it).
    pub os_pid: u32,
    stderr: PathBuf,
}

impl Holdfastd {
    /// Writes `config` (a TOML text without `control_socket`; one is added)
    /// and starts holdfastd in `host`; returns once the control socket answers.
    pub fn start(lab: &mut Lab, host: HostId, name: &str, config: &str) -> Result<Holdfastd> {
        Self::start_with(lab, host, name, config, &StartOpts::default())
    }

    /// [`Holdfastd::start`] with options (takeover, ready file, environment). Returns
    /// once the control socket answers (any answer, even a refusal, counts: a unit
    /// taking over answers before its sessions are restored). Fails early, with the
    /// log's tail, if the process exits first.
    pub fn start_with(
        lab: &mut Lab,
        host: HostId,
        name: &str,
        config: &str,
        opts: &StartOpts,
    ) -> Result<Holdfastd> {
        let bin = find_binary("holdfastd", "HOLDFASTD_BIN")?;
        let dir = lab.work_dir().join(name);
        std::fs::create_dir_all(&dir).map_err(io_ctx(format!("creating {}", dir.display())))?;
        let socket = dir.join("holdfastd.sock");
        let config_path = dir.join("holdfast.toml");
        if let Some(f) = &opts.ready_file {
            match std::fs::remove_file(f) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(io_ctx(format!("removing {}", f.display()))(e)),
            }
        }
        let mut d = Holdfastd {
            host,
            proc: ProcId(usize::MAX),
            config_path,
            socket,
            name: name.to_string(),
            ready_file: opts.ready_file.clone(),
            os_pid: 0,
            stderr: PathBuf::new(),
        };
        d.write_config(config)?;
        let mut args = vec![
            bin.to_string_lossy().into_owned(),
            "--config".into(),
            d.config_path.to_string_lossy().into_owned(),
        ];
        if opts.takeover {
            args.push("--takeover".into());
        }
        if opts.standby {
            args.push("--standby".into());
        }
        if let Some(f) = &opts.ready_file {
            args.push("--takeover-ready-file".into());
            args.push(f.to_string_lossy().into_owned());
        }
        args.extend(opts.args.iter().cloned());
        let argv: Vec<&str> = args.iter().map(String::as_str).collect();
        let mut env: Vec<(&str, &str)> = vec![("HOLDFAST_LOG", DEFAULT_LOG)];
        env.extend(opts.env.iter().map(|(k, v)| (k.as_str(), v.as_str())));
        d.proc = lab.spawn(host, name, &argv, &env)?;
        d.os_pid = lab.pid(d.proc);
        d.stderr = lab.proc_logs(d.proc).1.to_path_buf();
        d.wait_alive(
            "control socket to answer",
            "before its control socket answered",
            Duration::from_secs(20),
            Duration::from_millis(5),
            // `show nsr` answers from the daemon task alone: a takeover
            // still rebuilding its tables answers at once.
            || match d.request(&Request::ShowNsr) {
                Ok(_) | Err(LabError::Invalid(_)) => Ok(()),
                Err(e) => Err(e.to_string()),
            },
        )?;
        Ok(d)
    }

    /// The unit `name` started earlier (by this or another process, see
    /// [`Lab::adopt`]) as process `proc` in `host`: paths as [`Holdfastd::start_with`]
    /// made them (`<work dir>/<name>/`).
    pub fn adopt(lab: &Lab, host: HostId, proc: ProcId, name: &str) -> Holdfastd {
        let dir = lab.work_dir().join(name);
        Holdfastd {
            host,
            proc,
            config_path: dir.join("holdfast.toml"),
            socket: dir.join("holdfastd.sock"),
            name: name.to_string(),
            ready_file: None,
            os_pid: lab.pid(proc),
            stderr: lab.proc_logs(proc).1.to_path_buf(),
        }
    }

    /// Polls `f` until it returns `Ok`; fails at once (with the log's tail) when the
    /// process is gone, or after `timeout` with `f`'s last error.
    fn wait_alive<T>(
        &self,
        desc: &str,
        when: &str,
        timeout: Duration,
        interval: Duration,
        mut f: impl FnMut() -> std::result::Result<T, String>,
    ) -> Result<T> {
        let start = Instant::now();
        loop {
            let last = match f() {
                Ok(v) => return Ok(v),
                Err(last) => last,
            };
            if !pid_alive(self.os_pid) {
                return Err(self.exited_error(when));
            }
            if start.elapsed() >= timeout {
                return Err(LabError::WaitTimeout {
                    desc: format!("{}: {desc}", self.name),
                    elapsed: start.elapsed(),
                    last,
                });
            }
            std::thread::sleep(interval);
        }
    }

    /// The error for a daemon that exited, with the tail of its log.
    fn exited_error(&self, when: &str) -> LabError {
        LabError::Invalid(format!(
            "{}: holdfastd (pid {}) exited {when}; log tail:\n{}",
            self.name,
            self.os_pid,
            tail(
                &std::fs::read_to_string(&self.stderr).unwrap_or_default(),
                20
            )
        ))
    }

    /// Wait until the `--takeover-ready-file` exists; fails early if the process exits.
    pub fn wait_ready_file(&self, timeout: Duration) -> Result<()> {
        let f = self.ready_file.as_ref().ok_or_else(|| {
            LabError::Invalid(format!("{}: started without a ready file", self.name))
        })?;
        self.wait_alive(
            &format!("ready file {}", f.display()),
            "before creating its ready file",
            timeout,
            Duration::from_millis(2),
            || {
                if f.exists() {
                    Ok(())
                } else {
                    Err("absent".to_string())
                }
            },
        )
    }

    /// Whether the process still exists (a SIGSTOPped one does; zombies do not).
    pub fn is_alive(&self) -> bool {
        pid_alive(self.os_pid)
    }

    /// Runs the `holdfast` CLI (`$HOLDFAST_BIN`, else the workspace's build) inside this
    /// unit's host against its control socket: `holdfast --socket SOCK ARGS...`; fails
    /// on a non-zero exit, returns stdout. E.g. `cli(lab, &["nsr", "switchover"])`.
    pub fn cli(&self, lab: &Lab, args: &[&str]) -> Result<String> {
        let bin = find_binary("holdfast", "HOLDFAST_BIN")?;
        let (bin, sock) = (
            bin.to_string_lossy().into_owned(),
            self.socket.to_string_lossy().into_owned(),
        );
        let mut cmd = vec![bin.as_str(), "--socket", sock.as_str()];
        cmd.extend_from_slice(args);
        lab.exec_ok(self.host, &cmd)
    }

    /// [`Holdfastd::cli`] with `--json`, parsed: e.g. `cli_json(lab, &["show", "nsr"])`.
    pub fn cli_json(&self, lab: &Lab, args: &[&str]) -> Result<serde_json::Value> {
        let mut a = args.to_vec();
        a.push("--json");
        let out = self.cli(lab, &a)?;
        serde_json::from_str(&out)
            .map_err(|e| parse_err(format!("holdfast {}", a.join(" ")), format!("{e}: {out}")))
    }

    fn write_config(&self, config: &str) -> Result<()> {
        let text = inject_control_socket(config, &self.socket);
        std::fs::write(&self.config_path, text)
            .map_err(io_ctx(format!("writing {}", self.config_path.display())))
    }

    /// A standby started with [`StartOpts::standby`] takes over now (`holdfast nsr
    /// takeover`): answered once it has claimed the instance and loaded the state; it
    /// creates `ready_file` (kept as [`Holdfastd::ready_file`]) when ready for the
    /// service address. Returns holdfastd's message.
    pub fn standby_takeover(&mut self, ready_file: PathBuf, epoch: Option<u64>) -> Result<String> {
        if let Err(e) = std::fs::remove_file(&ready_file) {
            if e.kind() != std::io::ErrorKind::NotFound {
                return Err(io_ctx(format!("removing {}", ready_file.display()))(e));
            }
        }
        let body = self.request(&Request::NsrTakeover {
            epoch,
            ready_file: Some(ready_file.to_string_lossy().into_owned()),
        })?;
        self.ready_file = Some(ready_file);
        match body {
            Body::Message(m) => Ok(m),
            other => Err(LabError::Invalid(format!(
                "{}: unexpected answer to nsr takeover: {other:?}",
                self.name
            ))),
        }
    }

    /// One request over the control socket.
    pub fn request(&self, req: &Request) -> Result<Body> {
        control_request(&self.socket, req)
    }

    pub fn summary(&self) -> Result<Summary> {
        self.control().summary()
    }

    pub fn neighbors(&self) -> Result<Vec<NeighborInfo>> {
        self.control().neighbors()
    }

    /// Its control socket.
    pub fn control(&self) -> ControlSocket {
        ControlSocket(self.socket.clone())
    }

    pub fn neighbor(&self, addr: IpAddr) -> Result<Option<NeighborInfo>> {
        let a = addr.to_string();
        Ok(self.neighbors()?.into_iter().find(|n| n.address == a))
    }

    /// Routes of a table; `peer` is required for `In`/`Out`.
    pub fn rib(&self, table: RibTable, peer: Option<IpAddr>) -> Result<Vec<RibEntry>> {
        let req = Request::ShowRib {
            instance: None,
            prefix: None,
            peer: peer.map(|p| p.to_string()),
            table,
            limit: None,
        };
        match self.request(&req)? {
            Body::Rib(r) => Ok(r),
            other => Err(parse_err(
                "holdfastd control answer",
                format!("unexpected {other:?}"),
            )),
        }
    }

    /// Wait until every configured session (at least one) is Established.
    pub fn wait_all_established(&self, timeout: Duration) -> Result<Vec<NeighborInfo>> {
        self.wait_alive(
            "every session Established",
            "before every session was Established",
            timeout,
            DEFAULT_POLL_INTERVAL,
            || match self.neighbors() {
                Ok(ns) if !ns.is_empty() && ns.iter().all(|n| n.state == "Established") => Ok(ns),
                Ok(ns) => Err(format!("{ns:?}")),
                Err(e) => Err(format!("error: {e}")),
            },
        )
    }

    pub fn wait_established(&self, addr: IpAddr, timeout: Duration) -> Result<NeighborInfo> {
        wait_until(
            &format!("{}: session with {addr} Established", self.name),
            timeout,
            || self.neighbor(addr),
            |n| n.as_ref().is_some_and(|n| n.state == "Established"),
        )
        .map(|n| n.expect("predicate guarantees Some"))
    }

    /// Rewrites the configuration and sends SIGHUP.
    pub fn reload(&self, lab: &mut Lab, config: &str) -> Result<()> {
        self.write_config(config)?;
        lab.kill(self.proc, Signal::Hup);
        Ok(())
    }

    pub fn pid(&self, lab: &Lab) -> u32 {
        lab.pid(self.proc)
    }

    /// The daemon's log (stderr).
    pub fn log_text(&self, lab: &Lab) -> String {
        std::fs::read_to_string(lab.proc_logs(self.proc).1).unwrap_or_default()
    }

    pub fn stop(&self, lab: &mut Lab) {
        lab.stop_proc(self.proc);
    }
}

/// The last `n` lines of `text`.
fn tail(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// Puts `control_socket = PATH` into the `[global]` table of `config`.
fn inject_control_socket(config: &str, socket: &Path) -> String {
    let line = format!("control_socket = \"{}\"", socket.display());
    let mut out = String::with_capacity(config.len() + line.len() + 1);
    let mut done = false;
    for l in config.lines() {
        if l.trim_start().starts_with("control_socket") {
            continue;
        }
        out.push_str(l);
        out.push('\n');
        if !done && l.trim() == "[global]" {
            out.push_str(&line);
            out.push('\n');
            done = true;
        }
    }
    out
}

/// A holdfastd control socket: a unit's, whoever started it (a host agent, say).
#[derive(Debug, Clone)]
pub struct ControlSocket(pub PathBuf);

impl ControlSocket {
    fn unexpected(other: Body) -> LabError {
        parse_err("holdfastd control answer", format!("unexpected {other:?}"))
    }

    /// `show summary`.
    pub fn summary(&self) -> Result<Summary> {
        match control_request(&self.0, &Request::ShowSummary)? {
            Body::Summary(s) => Ok(s),
            other => Err(Self::unexpected(other)),
        }
    }

    /// `show neighbors`.
    pub fn neighbors(&self) -> Result<Vec<NeighborInfo>> {
        match control_request(&self.0, &Request::ShowNeighbors)? {
            Body::Neighbors(n) => Ok(n),
            other => Err(Self::unexpected(other)),
        }
    }

    /// `show nsr`.
    pub fn nsr(&self) -> Result<NsrStatus> {
        match control_request(&self.0, &Request::ShowNsr)? {
            Body::Nsr(n) => Ok(*n),
            other => Err(Self::unexpected(other)),
        }
    }

    /// Whether it has sessions and every one is Established.
    pub fn all_established(&self) -> bool {
        self.neighbors()
            .is_ok_and(|ns| !ns.is_empty() && ns.iter().all(|n| n.state == "Established"))
    }
}

/// One request over the holdfastd control socket `socket` (a unit the lab
/// did not start itself, such as one a host agent runs).
pub fn control_request(socket: &Path, req: &Request) -> Result<Body> {
    use holdfast_api::client::{self, ClientError};
    let resp = client::request(socket, req, Duration::from_secs(30)).map_err(|e| match e {
        ClientError::Connect { error, .. } | ClientError::Io { error, .. } => {
            io_ctx(format!("control socket {}", socket.display()))(error)
        }
        other => parse_err("holdfastd control answer", other.to_string()),
    })?;
    resp.into_result()
        .map_err(|m| LabError::Invalid(format!("holdfastd refused the request: {m}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_socket_goes_into_global() {
        let c =
            "[global]\nasn = 1\ncontrol_socket = \"/x\"\n[[neighbor]]\naddress = \"192.0.2.1\"\n";
        let out = inject_control_socket(c, Path::new("/tmp/s.sock"));
        assert!(out.starts_with("[global]\ncontrol_socket = \"/tmp/s.sock\"\nasn = 1\n"));
        assert!(!out.contains("\"/x\""));
    }
}
