//! A Redis server as a lab unit (the NSR state store): `redis-server` without
//! persistence (`--save '' --appendonly no`), bound to one address of a host, its log
//! in the work dir (`redis/<host>-<port>/redis.log`), checked with `redis-cli ping`
//! from inside the host; killed with SIGKILL and restarted on the same address/port to
//! test store failures; optionally a replica of another one ([`Redis::start_replica`]).
//!
//! With ACL users ([`Redis::start_acl`], issue 30; off unless asked for): the
//! server keeps its users in an ACL file in its directory (`users.acl`, saved
//! after each [`Redis::set_user`], so a restart keeps them), its `default`
//! user is the lab's administrator with a random password (`admin.pass`,
//! mode 600, used by [`Redis::cli`] through `REDISCLI_AUTH`), and each unit
//! gets its own user ([`Redis::set_user`], [`Redis::cli_as`]).
//!
//! Known issues: a replica of an ACL server ([`Redis::start_replica`]) does
//! not authenticate to its master.

use std::net::IpAddr;
use std::path::PathBuf;
use std::time::Duration;

use crate::cmd::{pid_alive, require_tool, Signal};
use crate::error::{io_ctx, LabError, Result};
use crate::lab::{HostId, Lab, ProcId};
use crate::wait::{wait_for, wait_for_every};

/// How long `redis-server` gets to answer `ping` after a (re)start.
const START_TIMEOUT: Duration = Duration::from_secs(10);

/// A running (or killed) redis-server.
#[derive(Debug)]
pub struct Redis {
    host: HostId,
    bind: IpAddr,
    port: u16,
    dir: PathBuf,
    proc: ProcId,
    pid: u32,
    starts: u32,
    /// Further `redis-server` arguments (a replica's `--replicaof`).
    extra: Vec<String>,
    /// The administrator's (`default` user's) password, with ACL users.
    admin: Option<String>,
}

/// 16 random bytes from the kernel, in hexadecimal: a lab password.
pub fn random_password() -> Result<String> {
    use std::io::Read as _;
    let mut b = [0u8; 16];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut b))
        .map_err(io_ctx("reading /dev/urandom"))?;
    Ok(b.iter().map(|x| format!("{x:02x}")).collect())
}

/// Writes `text` to `path`, readable by its owner only (a password file).
pub fn write_secret(path: &std::path::Path, text: &str) -> Result<()> {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let _ = std::fs::remove_file(path);
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .and_then(|mut f| f.write_all(text.as_bytes()))
        .map_err(io_ctx(format!("writing {}", path.display())))
}

impl Redis {
    /// Starts `redis-server` in `host`, listening on `bind:port`; returns once
    /// `redis-cli -h BIND -p PORT ping` answers `PONG` inside the host.
    pub fn start(lab: &mut Lab, host: HostId, bind: IpAddr, port: u16) -> Result<Redis> {
        Self::start_with(lab, host, bind, port, Vec::new(), None)
    }

    /// [`Redis::start`] with ACL users: the `default` user needs the
    /// administrator's password (made here, in `admin.pass`); units get
    /// theirs with [`Redis::set_user`].
    pub fn start_acl(lab: &mut Lab, host: HostId, bind: IpAddr, port: u16) -> Result<Redis> {
        Self::start_with(lab, host, bind, port, Vec::new(), Some(random_password()?))
    }

    /// [`Redis::start`] as a replica of `master` (`--replicaof`); returns once it
    /// answers `ping` (not necessarily in sync yet: see `INFO replication`).
    pub fn start_replica(
        lab: &mut Lab,
        host: HostId,
        bind: IpAddr,
        port: u16,
        master: &Redis,
    ) -> Result<Redis> {
        let extra = vec![
            "--replicaof".to_string(),
            master.bind.to_string(),
            master.port.to_string(),
        ];
        Self::start_with(lab, host, bind, port, extra, None)
    }

    /// Starts `redis-server` with `extra` arguments; with `admin`, ACL
    /// users, the `default` user's password being `admin`.
    pub(crate) fn start_with(
        lab: &mut Lab,
        host: HostId,
        bind: IpAddr,
        port: u16,
        mut extra: Vec<String>,
        admin: Option<String>,
    ) -> Result<Redis> {
        require_tool("redis-server")?;
        require_tool("redis-cli")?;
        let dir = lab
            .work_dir()
            .join("redis")
            .join(format!("{}-{port}", lab.host_info(host).name));
        std::fs::create_dir_all(&dir).map_err(io_ctx(format!("creating {}", dir.display())))?;
        if let Some(pw) = &admin {
            write_secret(&dir.join("admin.pass"), &format!("{pw}\n"))?;
            let file = dir.join("users.acl");
            write_secret(&file, &format!("user default on >{pw} ~* &* +@all\n"))?;
            extra.extend(["--aclfile".to_string(), file.to_string_lossy().into_owned()]);
        }
        let mut r = Redis {
            host,
            bind,
            port,
            dir,
            proc: ProcId(usize::MAX),
            pid: 0,
            starts: 0,
            extra,
            admin,
        };
        r.spawn(lab)?;
        Ok(r)
    }

    /// The server started earlier (by this or another process, see [`Lab::adopt`]) as
    /// process `proc` in `host` on `bind:port`, after `starts` starts.
    pub fn adopt(
        lab: &Lab,
        host: HostId,
        bind: IpAddr,
        port: u16,
        proc: ProcId,
        starts: u32,
    ) -> Redis {
        Redis {
            host,
            bind,
            port,
            dir: lab
                .work_dir()
                .join("redis")
                .join(format!("{}-{port}", lab.host_info(host).name)),
            proc,
            pid: lab.pid(proc),
            starts,
            extra: Vec::new(),
            admin: None,
        }
    }

    /// The lab process of the current server.
    pub fn proc(&self) -> ProcId {
        self.proc
    }

    /// How many times the server was started.
    pub fn starts(&self) -> u32 {
        self.starts
    }

    fn spawn(&mut self, lab: &mut Lab) -> Result<()> {
        self.starts += 1;
        let (bind, port) = (self.bind.to_string(), self.port.to_string());
        let dir = self.dir.to_string_lossy().into_owned();
        let log = self.log_path().to_string_lossy().into_owned();
        let name = format!("redis-{}-{}", lab.host_info(self.host).name, self.starts);
        let mut args: Vec<&str> = vec![
            "redis-server",
            "--bind",
            &bind,
            "--port",
            &port,
            "--save",
            "",
            "--appendonly",
            "no",
            "--protected-mode",
            "no",
            "--daemonize",
            "no",
            "--dir",
            &dir,
            "--logfile",
            &log,
        ];
        args.extend(self.extra.iter().map(String::as_str));
        self.proc = lab.spawn(self.host, &name, &args, &[])?;
        self.pid = lab.pid(self.proc);
        let pid = self.pid;
        wait_for(
            &format!("redis on {} to answer ping", self.addr_text()),
            START_TIMEOUT,
            || {
                if !pid_alive(pid) {
                    return Err(LabError::Invalid(format!(
                        "redis-server exited; log tail: {}",
                        std::fs::read_to_string(self.log_path()).unwrap_or_default()
                    )));
                }
                Ok(self.ping(lab).then_some(()))
            },
        )
    }

    fn addr_text(&self) -> String {
        match self.bind {
            IpAddr::V4(a) => format!("{a}:{}", self.port),
            IpAddr::V6(a) => format!("[{a}]:{}", self.port),
        }
    }

    /// `redis://ADDR:PORT` (IPv6 in brackets), the `[nsr] store` of holdfastd.
    pub fn url(&self) -> String {
        format!("redis://{}", self.addr_text())
    }

    /// The address it listens on.
    pub fn addr(&self) -> IpAddr {
        self.bind
    }

    /// The port it listens on.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The host it runs in.
    pub fn host(&self) -> HostId {
        self.host
    }

    /// Pid of the current redis-server process.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// Path of the server's log file.
    pub fn log_path(&self) -> PathBuf {
        self.dir.join("redis.log")
    }

    /// Whether `redis-cli ping` answers `PONG` (from inside the server's host).
    pub fn ping(&self, lab: &Lab) -> bool {
        self.cli(lab, &["ping"])
            .is_ok_and(|out| out.trim() == "PONG")
    }

    /// Runs `redis-cli -h ADDR -p PORT ARGS...` inside the server's host
    /// (as the administrator with ACL users); returns stdout.
    pub fn cli(&self, lab: &Lab, args: &[&str]) -> Result<String> {
        let (bind, port) = (self.bind.to_string(), self.port.to_string());
        let auth = self.admin.as_ref().map(|pw| format!("REDISCLI_AUTH={pw}"));
        let mut cmd = match &auth {
            Some(a) => vec!["env", a.as_str()],
            None => vec![],
        };
        cmd.extend(["redis-cli", "-h", bind.as_str(), "-p", port.as_str()]);
        cmd.extend_from_slice(args);
        lab.exec_ok(self.host, &cmd)
    }

    /// `redis-cli` as `user` with `password` (no user: none at all), from
    /// inside the server's host; returns stdout, where redis-cli writes an
    /// error reply too (`NOPERM ...`).
    pub fn cli_as(&self, lab: &Lab, user: Option<(&str, &str)>, args: &[&str]) -> Result<String> {
        let (bind, port) = (self.bind.to_string(), self.port.to_string());
        let mut cmd = vec!["redis-cli", "-h", bind.as_str(), "-p", port.as_str()];
        if let Some((u, pw)) = user {
            cmd.extend(["--user", u, "--pass", pw, "--no-auth-warning"]);
        }
        cmd.extend_from_slice(args);
        lab.exec_ok(self.host, &cmd)
    }

    /// Whether the server runs with ACL users ([`Redis::start_acl`]).
    pub fn acl(&self) -> bool {
        self.admin.is_some()
    }

    /// The administrator's (`default` user's) password with ACL users, for
    /// a test's own connection (`AUTH PASSWORD`); `None` without.
    pub fn admin_password(&self) -> Option<&str> {
        self.admin.as_deref()
    }

    /// Creates or replaces an ACL user: `args` is an `ACL SETUSER` command
    /// (`holdfast nsr acl`'s output, split at spaces), then saved to the ACL
    /// file so that a restart keeps it. Only with ACL users.
    pub fn set_user(&self, lab: &Lab, args: &[&str]) -> Result<()> {
        if self.admin.is_none() {
            return Err(LabError::Invalid(
                "ACL users on a redis-server started without them".into(),
            ));
        }
        for (cmd, what) in [(args, "ACL SETUSER"), (&["ACL", "SAVE"][..], "ACL SAVE")] {
            let out = self.cli(lab, cmd)?;
            if out.trim() != "OK" {
                return Err(LabError::Invalid(format!("{what}: {}", out.trim())));
            }
        }
        Ok(())
    }

    /// SIGKILL the server by pid and wait until the process is gone.
    pub fn kill(&mut self, lab: &mut Lab) -> Result<()> {
        lab.kill(self.proc, Signal::Kill);
        let p = self.proc;
        wait_for_every(
            &format!("redis-server pid {} to be gone", self.pid),
            Duration::from_secs(5),
            Duration::from_millis(10),
            || Ok((!lab.is_running(p)).then_some(())),
        )
    }

    /// Start the server again on the same address and port (kill it first if it runs);
    /// returns once it answers `ping`. Its data is gone (no persistence).
    pub fn restart(&mut self, lab: &mut Lab) -> Result<()> {
        if lab.is_running(self.proc) {
            self.kill(lab)?;
        }
        self.spawn(lab)
    }

    /// Stop the server (SIGTERM, then SIGKILL).
    pub fn stop(&self, lab: &mut Lab) {
        lab.stop_proc(self.proc);
    }
}
