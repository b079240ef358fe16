//! Network namespaces for the integration tests: created with `ip`, entered
//! by a thread with `setns(2)`, deleted when the guard drops (also when a
//! test panics); [`skip`] for a test that cannot run here.

#![allow(dead_code)]

use std::process::{Command, Output};

/// Whether the tests can create namespaces (root).
pub fn is_root() -> bool {
    nix::unistd::geteuid().is_root()
}

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

/// Whether the test can run as root; if not, [`skip`]s it (the caller
/// returns on `false`).
pub fn root_or_skip() -> bool {
    if !is_root() {
        skip("needs root (network namespaces, NFQUEUE, TCP_REPAIR, raw sockets)");
    }
    is_root()
}

/// A network namespace named `hfr<pid><tag>` with `lo` up; deleted on drop.
pub struct Netns {
    pub name: String,
}

impl Netns {
    pub fn new(tag: &str) -> Netns {
        let name = format!("hfr{}{tag}", std::process::id());
        // A leftover from a crashed run of the same pid is unlikely but harmless to remove.
        let _ = Command::new("ip").args(["netns", "del", &name]).output();
        run("ip", &["netns", "add", &name]);
        let ns = Netns { name };
        ns.ip(&["link", "set", "lo", "up"]);
        ns
    }

    /// `ip -n <name> <args>`, which must succeed.
    pub fn ip(&self, args: &[&str]) -> String {
        let mut all = vec!["-n", &self.name];
        all.extend_from_slice(args);
        String::from_utf8_lossy(&run("ip", &all).stdout).into_owned()
    }

    /// `ip netns exec <name> <cmd> <args>`, which must succeed.
    pub fn exec(&self, cmd: &str, args: &[&str]) -> String {
        exec_in(&self.name, cmd, args)
    }

    /// Runs `f` on a thread inside the namespace; a panic in `f` is
    /// re-raised here with its message.
    pub fn run<T: Send + 'static>(&self, f: impl FnOnce() -> T + Send + 'static) -> T {
        holdfast_linux::netns::in_netns(&self.name, f).expect("enter the namespace")
    }
}

impl Drop for Netns {
    /// Retries: `ip netns` operations of concurrent processes can make one
    /// fail transiently.
    fn drop(&mut self) {
        let path = format!("/run/netns/{}", self.name);
        for _ in 0..10 {
            let _ = Command::new("ip")
                .args(["netns", "del", &self.name])
                .output();
            if !std::path::Path::new(&path).exists() {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        eprintln!("warning: could not delete network namespace {}", self.name);
    }
}

/// `ip netns exec <ns> <cmd> <args>`, which must succeed.
pub fn exec_in(ns: &str, cmd: &str, args: &[&str]) -> String {
    let mut all = vec!["netns", "exec", ns, cmd];
    all.extend_from_slice(args);
    String::from_utf8_lossy(&run("ip", &all).stdout).into_owned()
}

fn run(cmd: &str, args: &[&str]) -> Output {
    let out = Command::new(cmd)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("{cmd} {args:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd} {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}
