//! `holdfastd` as a lab unit: started in a host with a generated
//! configuration, read back over its control socket (the same JSON API the
//! `holdfast` CLI uses), reloaded with SIGHUP, stopped by PID.
//!
//! Binaries are found through `HOLDFASTD_BIN` / `HOLDFAST_BIN`, else in the
//! workspace's `target/release` or `target/debug` (whichever is newer).

use crate::cmd::Signal;
use crate::error::{io_ctx, parse_err, LabError, Result};
use crate::lab::{HostId, Lab, ProcId};
use crate::wait::wait_until;
use holdfast_api::{Body, NeighborInfo, Request, Response, RibEntry, RibTable, Summary};
use std::io::{BufRead, BufReader, Write};
use std::net::IpAddr;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Finds a workspace binary: `$ENV`, else the newest of target/{release,debug}/NAME.
pub fn find_binary(name: &str, env: &str) -> Result<PathBuf> {
    if let Ok(p) = std::env::var(env) {
        return Ok(PathBuf::from(p));
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

/// A running holdfastd.
pub struct Holdfastd {
    pub host: HostId,
    pub proc: ProcId,
    pub config_path: PathBuf,
    pub socket: PathBuf,
    pub name: String,
}

impl Holdfastd {
    /// Writes `config` (a TOML text without `control_socket`; one is added)
    /// and starts holdfastd in `host`; returns once the control socket answers.
    pub fn start(lab: &mut Lab, host: HostId, name: &str, config: &str) -> Result<Holdfastd> {
        let bin = find_binary("holdfastd", "HOLDFASTD_BIN")?;
        let dir = lab.work_dir().join(name);
        std::fs::create_dir_all(&dir).map_err(io_ctx(format!("creating {}", dir.display())))?;
        let socket = dir.join("holdfastd.sock");
        let config_path = dir.join("holdfast.toml");
        let d = Holdfastd {
            host,
            proc: ProcId(usize::MAX),
            config_path,
            socket,
            name: name.to_string(),
        };
        d.write_config(config)?;
        let args = [
            bin.to_string_lossy().into_owned(),
            "--config".into(),
            d.config_path.to_string_lossy().into_owned(),
        ];
        let argv: Vec<&str> = args.iter().map(String::as_str).collect();
        let proc = lab.spawn(
            host,
            name,
            &argv,
            &[("HOLDFAST_LOG", "info,holdfastd=debug")],
        )?;
        let d = Holdfastd { proc, ..d };
        wait_until(
            &format!("{name}: control socket to answer"),
            Duration::from_secs(20),
            || Ok(d.summary().ok()),
            |s| s.is_some(),
        )?;
        Ok(d)
    }

    fn write_config(&self, config: &str) -> Result<()> {
        let text = inject_control_socket(config, &self.socket);
        std::fs::write(&self.config_path, text)
            .map_err(io_ctx(format!("writing {}", self.config_path.display())))
    }

    /// One request over the control socket.
    pub fn request(&self, req: &Request) -> Result<Body> {
        let ctx = || format!("control socket {}", self.socket.display());
        let mut s = UnixStream::connect(&self.socket).map_err(io_ctx(ctx()))?;
        s.set_read_timeout(Some(Duration::from_secs(30)))
            .map_err(io_ctx(ctx()))?;
        let mut line = req.to_line();
        line.push('\n');
        s.write_all(line.as_bytes()).map_err(io_ctx(ctx()))?;
        let mut answer = String::new();
        BufReader::new(s)
            .read_line(&mut answer)
            .map_err(io_ctx(ctx()))?;
        let resp = Response::from_line(&answer)
            .map_err(|e| parse_err("holdfastd control answer", format!("{answer:?}: {e}")))?;
        resp.into_result()
            .map_err(|m| LabError::Invalid(format!("holdfastd refused the request: {m}")))
    }

    pub fn summary(&self) -> Result<Summary> {
        match self.request(&Request::ShowSummary)? {
            Body::Summary(s) => Ok(s),
            other => Err(parse_err(
                "holdfastd control answer",
                format!("unexpected {other:?}"),
            )),
        }
    }

    pub fn neighbors(&self) -> Result<Vec<NeighborInfo>> {
        match self.request(&Request::ShowNeighbors)? {
            Body::Neighbors(n) => Ok(n),
            other => Err(parse_err(
                "holdfastd control answer",
                format!("unexpected {other:?}"),
            )),
        }
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
