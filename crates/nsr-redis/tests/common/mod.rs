//! Test helpers: a redis-server (and redis-sentinel) started by the test on
//! a loopback port, killed by PID when dropped; [`skip`] for a test that
//! cannot run here.

#![allow(dead_code)]

use holdfast_nsr::StoreUrl;
use nix::sys::signal::kill;
pub use nix::sys::signal::Signal;
use nix::unistd::Pid;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

pub const REDIS_SERVER: &str = "/usr/bin/redis-server";

/// The environment variable that turns a skip into a failure: with
/// `HOLDFAST_REQUIRE_LAB=1` every test must really run.
pub const REQUIRE_LAB: &str = "HOLDFAST_REQUIRE_LAB";

/// Call when a test cannot run here, then return from the test. With
/// `HOLDFAST_REQUIRE_LAB=1` this panics with `reason` (the test fails);
/// otherwise it prints the skip to stderr.
pub fn skip(reason: &str) {
    if std::env::var_os(REQUIRE_LAB).is_some_and(|v| v == "1") {
        panic!("{REQUIRE_LAB}=1 but this test cannot run: {reason}");
    }
    eprintln!("SKIPPED: {reason}");
}

static COUNTER: AtomicUsize = AtomicUsize::new(0);

/// A fresh scratch directory under the system temp dir.
pub fn scratch_dir(tag: &str) -> PathBuf {
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!("hf-nsr-{}-{tag}-{n}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("create scratch dir");
    dir
}

/// A loopback port that was free a moment ago.
pub fn free_port() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
    l.local_addr().expect("local addr").port()
}

/// One redis-server (or sentinel) process of this test.
pub struct RedisProc {
    child: Option<Child>,
    pub port: u16,
    pub dir: PathBuf,
    args: Vec<String>,
    own_dir: bool,
}

impl RedisProc {
    /// A redis-server without persistence on a free loopback port.
    pub fn start() -> RedisProc {
        Self::start_with(&[])
    }

    /// Same, with extra `redis-server` arguments.
    pub fn start_with(extra: &[&str]) -> RedisProc {
        let dir = scratch_dir("redis");
        for attempt in 0..10 {
            let port = free_port();
            let mut args: Vec<String> = vec![
                "--port".into(),
                port.to_string(),
                "--bind".into(),
                "127.0.0.1".into(),
                "--save".into(),
                "".into(),
                "--appendonly".into(),
                "no".into(),
                "--dir".into(),
                dir.display().to_string(),
                "--logfile".into(),
                dir.join("redis.log").display().to_string(),
            ];
            args.extend(extra.iter().map(|s| s.to_string()));
            let mut p = RedisProc {
                child: None,
                port,
                dir: dir.clone(),
                args,
                own_dir: true,
            };
            if p.spawn(None) {
                return p;
            }
            p.own_dir = false; // keep the dir for the next attempt
            eprintln!("redis-server on {port} did not start (attempt {attempt})");
        }
        panic!("could not start redis-server; see {}", dir.display());
    }

    /// A redis-sentinel monitoring `master_port` as `name`, quorum 1.
    pub fn start_sentinel(name: &str, master_port: u16) -> RedisProc {
        let dir = scratch_dir("sentinel");
        for _ in 0..10 {
            let port = free_port();
            let conf = dir.join("sentinel.conf");
            std::fs::write(
                &conf,
                format!(
                    "port {port}\nbind 127.0.0.1\ndir {dir}\nlogfile {log}\n\
                     sentinel monitor {name} 127.0.0.1 {master_port} 1\n\
                     sentinel down-after-milliseconds {name} 1000\n\
                     sentinel failover-timeout {name} 5000\n",
                    dir = dir.display(),
                    log = dir.join("sentinel.log").display(),
                ),
            )
            .expect("write sentinel.conf");
            let mut p = RedisProc {
                child: None,
                port,
                dir: dir.clone(),
                args: vec![conf.display().to_string(), "--sentinel".into()],
                own_dir: true,
            };
            if p.spawn(None) {
                return p;
            }
            p.own_dir = false;
        }
        panic!("could not start redis-sentinel; see {}", dir.display());
    }

    /// Starts the process with `self.args`, waiting until it answers PING.
    fn spawn(&mut self, deadline: Option<Duration>) -> bool {
        let child = Command::new(REDIS_SERVER)
            .args(&self.args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {REDIS_SERVER} (package redis-server): {e}"));
        self.child = Some(child);
        let until = Instant::now() + deadline.unwrap_or(Duration::from_secs(10));
        while Instant::now() < until {
            if let Some(c) = self.child.as_mut() {
                if let Ok(Some(_)) = c.try_wait() {
                    self.child = None;
                    return false;
                }
            }
            if ping(self.port) {
                return true;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        self.kill();
        false
    }

    pub fn pid(&self) -> i32 {
        self.child.as_ref().map(|c| c.id() as i32).unwrap_or(0)
    }

    /// SIGKILLs the process (by its PID) and reaps it.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Starts the process again on the same port and directory.
    pub fn restart(&mut self) {
        self.kill();
        let until = Instant::now() + Duration::from_secs(10);
        while Instant::now() < until {
            if self.spawn(Some(Duration::from_secs(5))) {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("could not restart redis on port {}", self.port);
    }

    /// Sends `sig` to the process (by its PID).
    pub fn signal(&self, sig: Signal) {
        let pid = self.pid();
        assert!(pid > 0, "no process");
        let r = kill(Pid::from_raw(pid), sig);
        assert_eq!(r, Ok(()), "kill({pid}, {sig})");
    }

    pub fn url(&self) -> StoreUrl {
        StoreUrl::Redis {
            tls: false,
            host: "127.0.0.1".into(),
            port: self.port,
            db: 0,
            username: None,
            password: None,
        }
    }

    pub fn log(&self) -> String {
        let mut s = String::new();
        for f in ["redis.log", "sentinel.log"] {
            if let Ok(t) = std::fs::read_to_string(self.dir.join(f)) {
                s.push_str(&t);
            }
        }
        s
    }

    /// A plain redis-rs connection, for inspection.
    pub fn raw(&self) -> redis::Connection {
        raw_conn(self.port)
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

impl Drop for RedisProc {
    fn drop(&mut self) {
        if let Some(c) = self.child.as_ref() {
            // A stopped process must be continued to die promptly.
            let _ = kill(Pid::from_raw(c.id() as i32), Signal::SIGCONT);
        }
        self.kill();
        if self.own_dir && !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

pub fn raw_conn(port: u16) -> redis::Connection {
    let c = redis::Client::open(format!("redis://127.0.0.1:{port}/")).expect("client");
    let c = c
        .get_connection_with_timeout(Duration::from_secs(2))
        .expect("connect");
    c.set_read_timeout(Some(Duration::from_secs(5))).ok();
    c
}

fn ping(port: u16) -> bool {
    let Ok(c) = redis::Client::open(format!("redis://127.0.0.1:{port}/")) else {
        return false;
    };
    let Ok(mut c) = c.get_connection_with_timeout(Duration::from_millis(200)) else {
        return false;
    };
    let _ = c.set_read_timeout(Some(Duration::from_millis(500)));
    // Any reply will do (NOAUTH from a server with a password).
    match redis::cmd("PING").query::<redis::Value>(&mut c) {
        Ok(_) => true,
        Err(e) => e.code().is_some(),
    }
}

pub const REDIS_CLI: &str = "/usr/bin/redis-cli";

/// A Redis Cluster of three masters with a replica each, on loopback
/// ports, made with `redis-cli --cluster create` (Debian's redis-tools), a
/// node timeout of 1 s. Its processes are killed when dropped.
pub struct Cluster {
    pub nodes: Vec<RedisProc>,
}

impl Cluster {
    pub fn start() -> Cluster {
        let nodes: Vec<RedisProc> = (0..6)
            .map(|_| {
                RedisProc::start_with(&[
                    "--cluster-enabled",
                    "yes",
                    "--cluster-config-file",
                    "nodes.conf",
                    "--cluster-node-timeout",
                    "1000",
                    // Any replica may be promoted, however stale its link.
                    "--cluster-replica-validity-factor",
                    "0",
                ])
            })
            .collect();
        let mut args: Vec<String> = vec!["--cluster".into(), "create".into()];
        args.extend(nodes.iter().map(|n| format!("127.0.0.1:{}", n.port)));
        args.extend([
            "--cluster-replicas".into(),
            "1".into(),
            "--cluster-yes".into(),
        ]);
        let out = Command::new(REDIS_CLI)
            .args(&args)
            .output()
            .unwrap_or_else(|e| panic!("{REDIS_CLI} (package redis-tools): {e}"));
        assert!(
            out.status.success(),
            "redis-cli --cluster create: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let c = Cluster { nodes };
        c.wait_ok(Duration::from_secs(20));
        c
    }

    /// Waits until every running node says `cluster_state:ok` and agrees on
    /// who serves every slot, and every replica's link to its master is up.
    pub fn wait_ok(&self, within: Duration) {
        let until = Instant::now() + within;
        let mut last = String::new();
        while Instant::now() < until {
            let views: Vec<String> = self
                .nodes
                .iter()
                .filter(|n| n.child.is_some())
                .map(|n| {
                    let mut c = n.raw();
                    let info: String = redis::cmd("CLUSTER")
                        .arg("INFO")
                        .query(&mut c)
                        .unwrap_or_default();
                    let repl: String = redis::cmd("INFO")
                        .arg("replication")
                        .query(&mut c)
                        .unwrap_or_default();
                    // A replica counts once its link to its master is up.
                    let linked =
                        !repl.contains("role:slave") || repl.contains("master_link_status:up");
                    let slots = self.masters_seen_by(n.port);
                    format!("{}|{slots:?}", info.contains("cluster_state:ok") && linked)
                })
                .collect();
            if views.iter().all(|v| v.starts_with("true|"))
                && views.windows(2).all(|w| w[0] == w[1])
            {
                return;
            }
            last = views.join("\n");
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("cluster not ok within {within:?}:\n{last}");
    }

    /// `(first slot, last slot, master port)` of each range, as node
    /// `port` sees them (`CLUSTER SLOTS`; empty when it does not answer).
    fn masters_seen_by(&self, port: u16) -> Vec<(i64, i64, u16)> {
        let Ok(v) = redis::cmd("CLUSTER")
            .arg("SLOTS")
            .query::<Vec<Vec<redis::Value>>>(&mut raw_conn(port))
        else {
            return Vec::new();
        };
        let int = |v: Option<&redis::Value>| match v {
            Some(redis::Value::Int(n)) => Some(*n),
            _ => None,
        };
        let mut out: Vec<(i64, i64, u16)> = v
            .iter()
            .filter_map(|r| {
                let redis::Value::Array(m) = r.get(2)? else {
                    return None;
                };
                let port = u16::try_from(int(m.get(1))?).ok()?;
                Some((int(r.first())?, int(r.get(1))?, port))
            })
            .collect();
        out.sort();
        out
    }

    /// The node process serving `key`'s slot as master now.
    pub fn master_of(&self, key: &str) -> &RedisProc {
        let slot = redis::cluster_routing::get_slot(key.as_bytes());
        let port = self.master_port_of_slot(slot);
        self.nodes
            .iter()
            .find(|n| n.port == port)
            .expect("master among the nodes")
    }

    pub fn master_index_of(&self, key: &str) -> usize {
        let port = self.master_of(key).port;
        self.nodes.iter().position(|n| n.port == port).unwrap()
    }

    fn master_port_of_slot(&self, slot: u16) -> u16 {
        let slot = i64::from(slot);
        self.nodes
            .iter()
            .filter(|n| n.child.is_some())
            .flat_map(|n| self.masters_seen_by(n.port))
            .find(|(first, last, _)| (*first..=*last).contains(&slot))
            .map(|(_, _, port)| port)
            .unwrap_or_else(|| panic!("no node serves slot {slot}"))
    }

    /// The URL with three of the nodes as seeds.
    pub fn url(&self) -> StoreUrl {
        StoreUrl::Cluster {
            tls: false,
            nodes: self.nodes[..3]
                .iter()
                .map(|n| ("127.0.0.1".to_string(), n.port))
                .collect(),
            username: None,
            password: None,
        }
    }
}
