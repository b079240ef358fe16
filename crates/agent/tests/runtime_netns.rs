//! The process runtime and the probes in a network namespace of the test's
//! own (`hf-agent-<pid>`, deleted on every exit path):
//!
//! ```text
//!   [ hf-agent-<pid> ]  lo 127.0.0.1 (and nothing else: 198.18.0.0/15 unreachable)
//!     unit `u1`: sleep 30            -> fenced through its pidfd
//!     unit `u2`: sh -c 'exit 3'      -> reported exited with status 3, not fenced
//!     unit `u3`: a listener on :1790 -> probed from inside: answered;
//!                                       198.18.9.9:179 probed: lost (no route)
//! ```
//!
//! Checked: the unit runs inside the namespace (its /proc/PID/ns/net is the
//! namespace's), fencing kills exactly it and reports it fenced, a unit
//! that exits is reported once with its status, a second start of a
//! running unit is refused, dropping the runtime fences what is left, and
//! the probe shell tells an answer from a lost probe.

use holdfast_agent::probe::{tcp_probe, Probed};
use holdfast_agent::runtime::{ProcessRuntime, Runtime, UnitSpec};
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

struct Netns(String);

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.0]).status();
    }
}

fn root_or_skip() -> bool {
    let root = std::fs::read_to_string("/proc/self/status")
        .map(|s| {
            s.lines()
                .any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(1) == Some("0"))
        })
        .unwrap_or(false);
    if !root {
        assert!(
            std::env::var("HOLDFAST_REQUIRE_LAB").as_deref() != Ok("1"),
            "HOLDFAST_REQUIRE_LAB=1: this test needs root (network namespaces)"
        );
        eprintln!("SKIP: needs root");
    }
    root
}

fn spec(name: &str, ns: &str, program: &str, args: &[&str]) -> UnitSpec {
    UnitSpec {
        name: name.into(),
        netns: Some(ns.into()),
        program: PathBuf::from(program),
        args: args.iter().map(|s| s.to_string()).collect(),
        env: Vec::new(),
        log: None,
    }
}

fn netns_inode(path: &str) -> std::io::Result<u64> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(path).map(|m| m.ino())
}

/// Polls `f` every 10 ms until it returns Some, for at most `limit`.
fn poll<T>(limit: Duration, mut f: impl FnMut() -> Option<T>) -> Option<T> {
    let end = Instant::now() + limit;
    loop {
        if let Some(v) = f() {
            return Some(v);
        }
        if Instant::now() > end {
            return None;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn units_in_a_namespace_are_watched_and_fenced_by_pidfd() {
    if !root_or_skip() {
        return;
    }
    let ns = Netns(format!("hf-agent-{}", std::process::id()));
    assert!(Command::new("ip")
        .args(["netns", "add", &ns.0])
        .status()
        .unwrap()
        .success());
    assert!(Command::new("ip")
        .args(["-n", &ns.0, "link", "set", "lo", "up"])
        .status()
        .unwrap()
        .success());
    let mut rt = ProcessRuntime::new();
    let pid = rt
        .start(&spec("u1", &ns.0, "sleep", &["30"]))
        .expect("start u1");
    assert!(matches!(
        rt.start(&spec("u1", &ns.0, "sleep", &["30"])),
        Err(holdfast_agent::runtime::RuntimeError::Running(_))
    ));
    let want = netns_inode(&format!("/run/netns/{}", ns.0)).unwrap();
    let inside = poll(Duration::from_secs(5), || {
        netns_inode(&format!("/proc/{pid}/ns/net"))
            .ok()
            .filter(|i| *i == want)
    });
    assert_eq!(inside, Some(want), "u1 runs in the namespace");

    rt.start(&spec("u2", &ns.0, "sh", &["-c", "exit 3"]))
        .expect("start u2");
    let exited = poll(Duration::from_secs(5), || {
        let e = rt.exited();
        (!e.is_empty()).then_some(e)
    })
    .expect("u2 reported");
    assert_eq!(exited.len(), 1);
    assert_eq!(
        (exited[0].unit.as_str(), exited[0].code, exited[0].fenced),
        ("u2", Some(3), false)
    );
    assert!(rt.exited().is_empty(), "reported once");

    let e = rt.fence("u1", Duration::from_secs(5)).expect("fence u1");
    assert_eq!(
        (e.pid, e.signal, e.fenced),
        (pid, Some(libc_sigkill()), true)
    );
    assert!(!std::path::Path::new(&format!("/proc/{pid}")).exists());
    assert!(
        rt.fence("u1", Duration::from_secs(1)).is_err(),
        "no such unit now"
    );

    // Probes from inside the namespace: a listener answers, an address
    // with no route does not.
    let (ok, lost) = holdfast_linux::netns::in_netns(&ns.0, || {
        let l = std::net::TcpListener::bind("127.0.0.1:1790").unwrap();
        let ok = tcp_probe(l.local_addr().unwrap(), Duration::from_millis(200));
        let lost = tcp_probe(
            "198.18.9.9:179".parse().unwrap(),
            Duration::from_millis(200),
        );
        (ok, lost)
    })
    .expect("in the namespace");
    assert_eq!(ok, Probed::Connected, "a listening port answers");
    assert_eq!(lost, Probed::Lost, "an unreachable address does not");

    // Dropping the runtime fences what is left.
    let p3 = rt
        .start(&spec("u3", &ns.0, "sleep", &["30"]))
        .expect("start u3");
    drop(rt);
    assert!(
        !std::path::Path::new(&format!("/proc/{p3}")).exists(),
        "u3 fenced on drop"
    );
    drop(ns);
}

fn libc_sigkill() -> i32 {
    9
}
