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
