//! An etcd cluster as a lab unit (the control plane's store): Debian's
//! `etcd` (3.4) with one member per lab host, each listening on its host's
//! address (clients on `:2379`, peers on `:2380`), data on a tmpfs
//! (`/dev/shm/<run id>-etcd/<member>/`, removed at teardown; in the work dir's
//! `etcd/` if there is no `/dev/shm`): every member shares one disk with
//! everything else the machine does, and a member waiting on an fsync behind
//! someone else's I/O misses its heartbeats, which the control plane then
//! reads as an etcd outage. `--initial-cluster-token` unique per run
//! (`<run id>-etcd`). Read back with the real `etcdctl` from inside a host
//! ([`Etcd::ctl`], [`Etcd::leader`]). Members are killed by the pid the lab
//! started ([`Etcd::kill`]) and restarted on their data dir
//! ([`Etcd::restart`], which rejoins the cluster); the lab stops them at
//! teardown like every process it spawned.
//!
//! With a certificate directory ([`Etcd::start_tls`], issue 30: `holdfast
//! ctl certs init --etcd-members`), the client URLs are `https://` and
//! every member runs with `--client-cert-auth --trusted-ca-file ca.pem`
//! and its own `etcd-<host>.pem` (naming its address); the peer URLs stay
//! plain HTTP on the management network. The lab's own `etcdctl` then
//! presents etcd's root certificate (`etcd-root.pem`, `CN=root`), and
//! [`Etcd::ctl_as`] any other one, or none.

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::Value;

use crate::cmd::{require_tool, Signal};
use crate::error::{io_ctx, parse_err, LabError, Result};
use crate::lab::{HostId, Lab, ProcId};
use crate::wait::{wait_for, wait_for_every};

/// The client port of every member.
pub const ETCD_CLIENT_PORT: u16 = 2379;
/// The peer (raft) port of every member.
pub const ETCD_PEER_PORT: u16 = 2380;
/// How long a cluster gets to elect a leader after a (re)start.
const LEADER_TIMEOUT: Duration = Duration::from_secs(20);

/// One member of the cluster.
#[derive(Debug, Clone)]
pub struct EtcdMember {
    /// The lab host it runs in.
    pub host: HostId,
    /// `--name`: `etcd-<host name>`.
    pub name: String,
    /// The address it listens on (clients and peers).
    pub addr: IpAddr,
    /// Its lab host's name (its certificate is `etcd-<host>.pem`).
    host_name: String,
    /// `https` for clients (with a certificate directory), else `http`.
    tls: bool,
    proc: Option<ProcId>,
    pid: u32,
    starts: u32,
}

impl EtcdMember {
    /// `http://ADDR:2379` (`https://` with TLS; IPv6 in brackets).
    pub fn client_url(&self) -> String {
        url(self.tls, self.addr, ETCD_CLIENT_PORT)
    }

    fn peer_url(&self) -> String {
        url(false, self.addr, ETCD_PEER_PORT)
    }

    /// Pid of the current (or last) process of this member.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// Its current (or last) process, for its logs ([`Lab::proc_logs`]).
    pub fn proc_id(&self) -> Option<ProcId> {
        self.proc
    }

    /// How many times this member was started.
    pub fn starts(&self) -> u32 {
        self.starts
    }
}

fn url(tls: bool, addr: IpAddr, port: u16) -> String {
    let scheme = if tls { "https" } else { "http" };
    match addr {
        IpAddr::V4(a) => format!("{scheme}://{a}:{port}"),
        IpAddr::V6(a) => format!("{scheme}://[{a}]:{port}"),
    }
}

/// A running etcd cluster of the lab.
#[derive(Debug)]
pub struct Etcd {
    members: Vec<EtcdMember>,
    token: String,
    dir: PathBuf,
    /// The certificate directory (TLS and client certificates on).
    certs: Option<PathBuf>,
}

/// What `etcdctl endpoint status` says about one live member.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EtcdStatus {
    /// Index of the member in [`Etcd::members`].
    pub member: usize,
    /// Its raft member id.
    pub member_id: u64,
    /// The leader it knows (0: none).
    pub leader_id: u64,
    /// The store revision it reports.
    pub revision: i64,
    /// Its database file's size in bytes (`dbSize`).
    pub db_size: u64,
}

impl Etcd {
    /// Starts one member in each of `members` (a host and its address on a
    /// network shared by all of them, e.g. a lab bridge) as a new cluster and
    /// waits until the members agree on a leader.
    pub fn start(lab: &mut Lab, members: &[(HostId, IpAddr)]) -> Result<Etcd> {
        Etcd::start_tls(lab, members, None)
    }

    /// [`Etcd::start`]; with `certs` (a directory of `holdfast ctl certs
    /// init --etcd-members HOST=ADDR,...`), clients over TLS with a
    /// certificate from its CA.
    pub fn start_tls(
        lab: &mut Lab,
        members: &[(HostId, IpAddr)],
        certs: Option<&Path>,
    ) -> Result<Etcd> {
        require_tool("etcd")?;
        require_tool("etcdctl")?;
        if members.is_empty() {
            return Err(LabError::Invalid("an etcd cluster needs a member".into()));
        }
        let dir = match crate::stale::scratch_dir(lab.run_id(), "etcd")? {
            Some(dir) => dir,
            None => lab.work_dir().join("etcd"),
        };
        std::fs::create_dir_all(&dir).map_err(io_ctx(format!("creating {}", dir.display())))?;
        let mut etcd = Etcd {
            members: members
                .iter()
                .map(|&(host, addr)| EtcdMember {
                    host,
                    name: format!("etcd-{}", lab.host_info(host).name),
                    addr,
                    host_name: lab.host_info(host).name.clone(),
                    tls: certs.is_some(),
                    proc: None,
                    pid: 0,
                    starts: 0,
                })
                .collect(),
            token: format!("{}-etcd", lab.run_id()),
            dir,
            certs: certs.map(Path::to_path_buf),
        };
        for i in 0..etcd.members.len() {
            etcd.spawn(lab, i)?;
        }
        etcd.wait_leader(lab, LEADER_TIMEOUT)?;
        Ok(etcd)
    }

    /// The certificate directory, with TLS.
    pub fn certs(&self) -> Option<&Path> {
        self.certs.as_deref()
    }

    /// etcdctl's `--cacert`, `--cert` and `--key` for `ROLE-NAME`'s
    /// certificate (`stem`) of the certificate directory; `--cacert` only
    /// without a `stem`; nothing without TLS.
    fn tls_flags(&self, stem: Option<&str>) -> Vec<String> {
        let Some(d) = &self.certs else {
            return Vec::new();
        };
        let f = |n: String| d.join(n).to_string_lossy().to_string();
        let mut out = vec![format!("--cacert={}", f("ca.pem".into()))];
        if let Some(s) = stem {
            out.push(format!("--cert={}", f(format!("{s}.pem"))));
            out.push(format!("--key={}", f(format!("{s}-key.pem"))));
        }
        out
    }

    /// The members, in the order given to [`Etcd::start`].
    pub fn members(&self) -> &[EtcdMember] {
        &self.members
    }

    /// Every member's client URL, comma-separated (`--endpoints` of etcdctl
    /// and of `holdfast-controller --etcd`).
    pub fn endpoints(&self) -> String {
        self.members
            .iter()
            .map(EtcdMember::client_url)
            .collect::<Vec<_>>()
            .join(",")
    }

    fn initial_cluster(&self) -> String {
        self.members
            .iter()
            .map(|m| format!("{}={}", m.name, m.peer_url()))
            .collect::<Vec<_>>()
            .join(",")
    }

    fn spawn(&mut self, lab: &mut Lab, i: usize) -> Result<()> {
        let initial = self.initial_cluster();
        let m = &mut self.members[i];
        m.starts += 1;
        let data = self.dir.join(&m.name);
        let data = data.to_string_lossy().into_owned();
        let (client, peer) = (m.client_url(), m.peer_url());
        let proc_name = format!("{}-{}", m.name, m.starts);
        let tls: Vec<String> = match &self.certs {
            Some(d) => {
                let f = |n: String| d.join(n).to_string_lossy().to_string();
                vec![
                    "--client-cert-auth".into(),
                    format!("--trusted-ca-file={}", f("ca.pem".into())),
                    format!("--cert-file={}", f(format!("etcd-{}.pem", m.host_name))),
                    format!("--key-file={}", f(format!("etcd-{}-key.pem", m.host_name))),
                ]
            }
            None => Vec::new(),
        };
        let mut argv: Vec<&str> = vec![
            "etcd",
            "--name",
            &m.name,
            "--data-dir",
            &data,
            "--listen-client-urls",
            &client,
            "--advertise-client-urls",
            &client,
            "--listen-peer-urls",
            &peer,
            "--initial-advertise-peer-urls",
            &peer,
            "--initial-cluster",
            &initial,
            "--initial-cluster-state",
            "new",
            "--initial-cluster-token",
            &self.token,
            "--logger",
            "zap",
        ];
        argv.extend(tls.iter().map(String::as_str));
        let proc = lab.spawn(m.host, &proc_name, &argv, &[])?;
        m.proc = Some(proc);
        m.pid = lab.pid(proc);
        Ok(())
    }

    /// Whether member `i` runs.
    pub fn is_running(&self, lab: &mut Lab, i: usize) -> bool {
        self.members[i].proc.is_some_and(|p| lab.is_running(p))
    }

    /// The first running member (where etcdctl is run from), if any.
    fn live_host(&self, lab: &mut Lab) -> Option<HostId> {
        (0..self.members.len())
            .find(|&i| self.is_running(lab, i))
            .map(|i| self.members[i].host)
    }

    /// `etcdctl --endpoints=<running members> --command-timeout=2s ARGS...`
    /// inside the host of the first running member; returns stdout. (etcdctl
    /// 3.4 does not fail over from a dead endpoint within its timeout, so
    /// the endpoints of members the lab killed are left out.) With TLS, as
    /// etcd's root (`etcd-root.pem`).
    pub fn ctl(&self, lab: &mut Lab, args: &[&str]) -> Result<String> {
        let (host, cmd) = self.ctl_cmd(lab, Some("etcd-root"), args)?;
        let cmd: Vec<&str> = cmd.iter().map(String::as_str).collect();
        lab.exec_ok(host, &cmd)
    }

    /// `etcdctl put KEY` with the value on etcdctl's standard input (from a
    /// file in the lab's work directory), as etcd's root: a value of any
    /// size (a unit record with a thousand neighbours is past the kernel's
    /// 128 KiB limit on one argument).
    pub fn put(&self, lab: &mut Lab, key: &str, value: &str) -> Result<String> {
        let file = lab.work_dir().join(format!(
            "etcd-put-{}.value",
            key.trim_matches('/').replace('/', "_")
        ));
        std::fs::write(&file, value)
            .map_err(|e| LabError::Invalid(format!("writing {}: {e}", file.display())))?;
        let (host, cmd) = self.ctl_cmd(lab, Some("etcd-root"), &["put", key])?;
        let f = file.to_string_lossy().into_owned();
        let mut sh: Vec<&str> = vec!["sh", "-c", "f=$0; exec \"$@\" < \"$f\"", &f];
        sh.extend(cmd.iter().map(String::as_str));
        let out = lab.exec_ok(host, &sh);
        let _ = std::fs::remove_file(&file);
        out
    }

    /// [`Etcd::ctl`] with the certificate `stem` of the certificate
    /// directory (`agent-a`, `controller-c1`, ...), or none (`--cacert`
    /// only); its output whether it succeeded or not.
    pub fn ctl_as(
        &self,
        lab: &mut Lab,
        stem: Option<&str>,
        args: &[&str],
    ) -> Result<std::process::Output> {
        let (host, cmd) = self.ctl_cmd(lab, stem, args)?;
        let cmd: Vec<&str> = cmd.iter().map(String::as_str).collect();
        lab.exec(host, &cmd)
    }

    fn ctl_cmd(
        &self,
        lab: &mut Lab,
        stem: Option<&str>,
        args: &[&str],
    ) -> Result<(HostId, Vec<String>)> {
        let host = self
            .live_host(lab)
            .ok_or_else(|| LabError::Invalid("no etcd member runs".into()))?;
        let live: Vec<String> = (0..self.members.len())
            .filter(|&i| self.is_running(lab, i))
            .map(|i| self.members[i].client_url())
            .collect();
        let mut cmd = vec![
            "etcdctl".to_string(),
            format!("--endpoints={}", live.join(",")),
            "--command-timeout=2s".to_string(),
        ];
        cmd.extend(self.tls_flags(stem));
        cmd.extend(args.iter().map(|a| a.to_string()));
        Ok((host, cmd))
    }

    /// `etcdctl endpoint status -w json` of every running member (a member
    /// that does not answer is left out).
    pub fn status(&self, lab: &mut Lab) -> Result<Vec<EtcdStatus>> {
        let mut out = Vec::new();
        for i in 0..self.members.len() {
            if !self.is_running(lab, i) {
                continue;
            }
            let m = &self.members[i];
            let ep = format!("--endpoints={}", m.client_url());
            let tls = self.tls_flags(Some("etcd-root"));
            let mut cmd = vec![
                "etcdctl",
                &ep,
                "--command-timeout=1s",
                "endpoint",
                "status",
                "-w",
                "json",
            ];
            cmd.extend(tls.iter().map(String::as_str));
            let o = lab.exec(m.host, &cmd)?;
            if !o.status.success() {
                continue;
            }
            let text = String::from_utf8_lossy(&o.stdout);
            let v: Value = serde_json::from_str(&text)
                .map_err(|e| parse_err("etcdctl endpoint status", format!("{e}: {text}")))?;
            let Some(s) = v.get(0).and_then(|e| e.get("Status")) else {
                continue;
            };
            let num = |p: &str| s.pointer(p).and_then(Value::as_u64).unwrap_or(0);
            out.push(EtcdStatus {
                member: i,
                member_id: num("/header/member_id"),
                leader_id: num("/leader"),
                revision: s
                    .pointer("/header/revision")
                    .and_then(Value::as_i64)
                    .unwrap_or(0),
                db_size: num("/dbSize"),
            });
        }
        Ok(out)
    }

    /// The index of the etcd leader when a majority of all members answer
    /// and agree on one that is among them; `None` otherwise (no quorum).
    pub fn leader(&self, lab: &mut Lab) -> Result<Option<usize>> {
        let st = self.status(lab)?;
        let quorum = self.members.len() / 2 + 1;
        let Some(first) = st.first().map(|s| s.leader_id) else {
            return Ok(None);
        };
        if first == 0 || st.len() < quorum || st.iter().any(|s| s.leader_id != first) {
            return Ok(None);
        }
        Ok(st.iter().find(|s| s.member_id == first).map(|s| s.member))
    }

    /// Polls [`Etcd::leader`] until the cluster has a leader; returns its index.
    pub fn wait_leader(&self, lab: &mut Lab, timeout: Duration) -> Result<usize> {
        wait_for("the etcd cluster to elect a leader", timeout, || {
            let dead: Vec<&str> = (0..self.members.len())
                .filter(|&i| !self.is_running(lab, i))
                .map(|i| self.members[i].name.as_str())
                .collect();
            match self.leader(lab)? {
                Some(l) => Ok(Some(l)),
                None if dead.is_empty() => Ok(None),
                None => Err(LabError::Invalid(format!("members not running: {dead:?}"))),
            }
        })
    }

    /// SIGKILL member `i` by its pid and wait until the process is gone.
    pub fn kill(&mut self, lab: &mut Lab, i: usize) -> Result<()> {
        let Some(p) = self.members[i].proc else {
            return Ok(());
        };
        lab.kill(p, Signal::Kill);
        wait_for_every(
            &format!("etcd member {} (pid {}) to be gone", i, self.members[i].pid),
            Duration::from_secs(5),
            Duration::from_millis(10),
            || Ok((!lab.is_running(p)).then_some(())),
        )
    }

    /// Start member `i` again on its data dir (killing it first if it runs):
    /// it rejoins the cluster with its old identity. Does not wait for a
    /// leader (with quorum lost, the caller decides what to wait for).
    pub fn restart(&mut self, lab: &mut Lab, i: usize) -> Result<()> {
        if self.is_running(lab, i) {
            self.kill(lab, i)?;
        }
        self.spawn(lab, i)
    }

    /// Stop every member (SIGTERM, then SIGKILL).
    pub fn stop(&self, lab: &mut Lab) {
        for m in &self.members {
            if let Some(p) = m.proc {
                lab.stop_proc(p);
            }
        }
    }
}
