//! The Debian package (`make deb`), installed for real into a fresh root and
//! started as its unit says.
//!
//! ```text
//!   mount namespace: overlay( lower = /, upper = empty tmpfs ) --chroot--> fresh root
//!     (own /run, /tmp; /proc, /sys, /dev bound)     dpkg -i holdfast_*.deb
//!   network namespace: lo only
//!     [ holdfastd: ExecStart of holdfastd@example.service ] -- /run/holdfast/holdfastd.sock --> holdfast show summary
//!                                                      \-- 127.0.0.1:9179/metrics
//!     [ etcd ] <-- [ holdfast-controller: ExecStart of holdfast-controller.service ] -- 127.0.0.1:9180/metrics
//! ```
//!
//! In `deb_package`, no systemd runs (it is not PID 1 on this machine): the units are
//! checked by `systemd-analyze verify` and scored by `systemd-analyze
//! security`, and the daemon runs as the unit's ExecStart line with the
//! parts of the unit's sandbox that can be applied by hand (below); the
//! syscall filter, RestrictAddressFamilies and the Protect* settings of
//! /proc, /sys and /dev are not exercised.
//!
//! Checked:
//! * the package's file list (`dpkg-deb -c`): the six binaries in /usr/bin,
//!   the four units, a man page per binary and per subcommand of `holdfast`,
//!   bash, zsh and fish completions per binary, the example configuration,
//!   the /etc/default files, the Grafana dashboard; `Depends` names iptables,
//!   iproute2 and procps; no lab, bench or test binary;
//! * `dpkg -i` in the fresh root; `dpkg -L` lists the same files;
//! * `systemd-analyze verify` of every installed unit (an instance for the
//!   template) passes: commands exist, man pages named in Documentation=
//!   exist, directives parse;
//! * `holdfast config check` accepts the shipped example configuration;
//! * holdfastd started by the unit's ExecStart answers `holdfast show
//!   summary` and `--json` (AS and router id of the example) on the
//!   default control socket; the unit's ExecReload (config check, SIGHUP)
//!   keeps it answering; SIGTERM ends it with status 0;
//! * it runs with what of the unit's sandbox can be applied without systemd:
//!   its CapabilityBoundingSet (CapBnd and CapEff exactly NET_ADMIN, NET_RAW,
//!   NET_BIND_SERVICE, SYS_NICE), NoNewPrivileges, ProtectSystem=strict (a read-only
//!   root and /run but for its RuntimeDirectory, StateDirectory and
//!   LogsDirectory), its Environment; the controller as an unused uid with
//!   no capability (DynamicUser=yes, an empty CapabilityBoundingSet);
//! * every metric a panel of the Grafana dashboard queries exists in the
//!   live /metrics of that holdfastd or of the installed controller (run
//!   with etcd);
//! * `man -w` finds every binary's page, `man holdfast-show-summary`
//!   renders, the bash completion loads;
//! * an upgrade (the package repacked as a newer version, `dpkg -i` while a
//!   holdfastd of the first runs): the running holdfastd keeps answering
//!   (nothing restarted), both builds are kept at
//!   `/usr/lib/holdfast/VERSION/holdfastd` and answer `--schemas`, and
//!   postinst prints the `holdfast ctl upgrade --host` command to move the
//!   units to the new build and back;
//! * `dpkg -r` removes the binaries (the kept builds too) and keeps the
//!   configuration.
//!
//! `deb_package_systemd` (boot.sh) runs the package under a real systemd:
//!
//! ```text
//!   systemd-nspawn --boot --volatile=overlay --private-network  (a minimal Debian, lo only)
//!     systemd (PID 1) -- holdfastd@example.service, holdfastd@nsr.service, holdfast-bfd-relay.service
//!     redis-server (the host's, in the container's network namespace)
//! ```
//!
//! Checked: `dpkg -i`; holdfastd@example started by systemd with the whole
//! sandbox (CapBnd, NoNewPrivs, Seccomp in /proc) listens on 179 and
//! answers `holdfast show summary`; `systemctl reload` succeeds and the
//! daemon reloads; a SIGKILL is restarted; an NSR instance, PROTECTED
//! with its NFQUEUE rules, fenced by a newer store epoch exits 75 and is not
//! restarted; the BFD relay runs as a dynamic user.

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::SystemTime;

use holdfast_lab::skip;

const BINARIES: [&str; 6] = [
    "holdfastd",
    "holdfast",
    "holdfast-ctl",
    "holdfast-agent",
    "holdfast-controller",
    "holdfast-bfd-relay",
];
const UNITS: [&str; 4] = [
    "holdfastd@.service",
    "holdfast-agent.service",
    "holdfast-controller.service",
    "holdfast-bfd-relay.service",
];

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .unwrap()
}

fn mtime(p: &Path) -> Option<SystemTime> {
    fs::metadata(p).and_then(|m| m.modified()).ok()
}

/// The newest target/debian/holdfast_*.deb; `make deb` first when there is
/// none, holdfastd was rebuilt after it, or `dpkg-deb` cannot read it (a
/// package left half-written by an interrupted run).
fn package() -> PathBuf {
    let root = root();
    let newest = || {
        fs::read_dir(root.join("target/debian"))
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.path())
            .filter(|p| {
                let n = p.file_name().unwrap().to_string_lossy();
                n.starts_with("holdfast_") && n.ends_with(".deb")
            })
            .max_by_key(|p| mtime(p))
    };
    let unreadable = |deb: &Path| {
        Command::new("dpkg-deb")
            .arg("--info")
            .arg(deb)
            .output()
            .map_or(true, |o| !o.status.success())
    };
    let stale = match (newest(), mtime(&root.join("target/release/holdfastd"))) {
        (Some(deb), _) if unreadable(&deb) => true,
        (Some(deb), Some(bin)) => mtime(&deb) < Some(bin),
        (Some(_), None) => false,
        (None, _) => true,
    };
    if stale {
        // Without the variables cargo (or scripts/run-tests.py) set for this
        // test: a build script that watches one (ring's watches
        // CARGO_MANIFEST_DIR) would otherwise be run again, and everything
        // above it recompiled, here and in the next `make build`.
        let mut make = Command::new("make");
        for (k, _) in std::env::vars_os() {
            let k = k.to_string_lossy();
            if k.starts_with("CARGO_")
                && !matches!(&*k, "CARGO_HOME" | "CARGO_TARGET_DIR" | "CARGO_BUILD_JOBS")
            {
                make.env_remove(&*k);
            }
        }
        let st = make
            .arg("-C")
            .arg(&root)
            .arg("deb")
            .status()
            .expect("running make deb");
        assert!(st.success(), "make deb failed: {st}");
    }
    newest().expect("make deb wrote no target/debian/holdfast_*.deb")
}

fn dpkg_deb(args: &[&str], deb: &Path) -> String {
    let out = Command::new("dpkg-deb")
        .args(args)
        .arg(deb)
        .output()
        .expect("dpkg-deb");
    assert!(
        out.status.success(),
        "dpkg-deb {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The files the package must carry (paths without the leading `/`).
fn expected_files() -> Vec<String> {
    let mut v = Vec::new();
    for b in BINARIES {
        v.push(format!("usr/bin/{b}"));
        v.push(format!("usr/share/man/man1/{b}.1.gz"));
        v.push(format!("usr/share/bash-completion/completions/{b}"));
        v.push(format!("usr/share/zsh/vendor-completions/_{b}"));
        v.push(format!("usr/share/fish/vendor_completions.d/{b}.fish"));
    }
    for u in UNITS {
        v.push(format!("lib/systemd/system/{u}"));
    }
    for sub in [
        "show",
        "show-summary",
        "show-neighbors",
        "config-check",
        "reload",
        "nsr",
    ] {
        v.push(format!("usr/share/man/man1/holdfast-{sub}.1.gz"));
    }
    for d in [
        "holdfast-agent",
        "holdfast-controller",
        "holdfast-bfd-relay",
    ] {
        v.push(format!("etc/default/{d}"));
    }
    v.push("etc/holdfast/example.toml".into());
    v.push("usr/share/holdfast/grafana/holdfast.json".into());
    v.push("usr/share/doc/holdfast/config.md".into());
    v
}

/// Metric names the dashboard's queries use.
fn dashboard_metrics() -> BTreeSet<String> {
    let text = fs::read_to_string(root().join("packaging/grafana/holdfast.json")).unwrap();
    let dash: serde_json::Value = serde_json::from_str(&text).expect("dashboard JSON");
    let mut exprs = Vec::new();
    fn walk(v: &serde_json::Value, out: &mut Vec<String>) {
        match v {
            serde_json::Value::Object(m) => {
                for (k, v) in m {
                    if k == "expr" {
                        out.push(v.as_str().unwrap_or_default().to_string());
                    } else {
                        walk(v, out);
                    }
                }
            }
            serde_json::Value::Array(a) => a.iter().for_each(|v| walk(v, out)),
            _ => {}
        }
    }
    walk(&dash, &mut exprs);
    assert!(
        exprs.len() >= 10,
        "the dashboard has {} queries",
        exprs.len()
    );
    let mut names = BTreeSet::new();
    for e in &exprs {
        let b = e.as_bytes();
        let mut i = 0;
        while let Some(p) = e[i..].find("holdfast_") {
            let s = i + p;
            let mut j = s;
            while j < b.len() && (b[j].is_ascii_alphanumeric() || b[j] == b'_') {
                j += 1;
            }
            if s == 0 || !(b[s - 1].is_ascii_alphanumeric() || b[s - 1] == b'_') {
                names.insert(e[s..j].to_string());
            }
            i = j;
        }
    }
    names
}

/// Sample names in a Prometheus text exposition (the HTTP head skipped),
/// and `# TYPE` names with the suffixes their samples take.
fn exposed(text: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for l in text.lines() {
        if let Some(rest) = l.strip_prefix("# TYPE ") {
            let mut f = rest.split_whitespace();
            let (Some(n), Some(kind)) = (f.next(), f.next()) else {
                continue;
            };
            let suffixes: &[&str] = match kind {
                "counter" => &["_total"],
                "histogram" => &["_bucket", "_sum", "_count"],
                "gauge" | "info" | "unknown" => &[""],
                _ => &[""],
            };
            for s in suffixes {
                names.insert(format!("{n}{s}"));
            }
        } else if l.starts_with("holdfast_") {
            let end = l.find(['{', ' ']).unwrap_or(l.len());
            names.insert(l[..end].to_string());
        }
    }
    names
}

#[test]
fn deb_package() {
    if !nix::unistd::Uid::effective().is_root() {
        skip("deb_package needs root (mount and network namespaces, dpkg in a fresh root)");
        return;
    }
    for tool in ["dpkg-deb", "unshare", "systemd-analyze", "etcd"] {
        if holdfast_lab::find_tool(tool).is_none() {
            skip(&format!("deb_package needs {tool}"));
            return;
        }
    }
    let deb = package();
    eprintln!(
        "package: {} ({} bytes)",
        deb.display(),
        fs::metadata(&deb).unwrap().len()
    );

    // The file list.
    let listing = dpkg_deb(&["-c"], &deb);
    let files: BTreeSet<String> = listing
        .lines()
        .filter_map(|l| l.split_whitespace().nth(5))
        .map(|p| p.trim_start_matches("./").to_string())
        .collect();
    for f in expected_files() {
        assert!(
            files.contains(&f),
            "the package lacks {f}; it has:\n{listing}"
        );
    }
    for f in &files {
        if let Some(b) = f.strip_prefix("usr/bin/").filter(|b| !b.is_empty()) {
            assert!(
                BINARIES.contains(&b),
                "the package ships {f}, not a shipped binary"
            );
        }
    }
    let depends = dpkg_deb(&["-f"], &deb);
    let depends = depends
        .lines()
        .find(|l| l.starts_with("Depends:"))
        .unwrap_or("")
        .to_string();
    for d in ["iptables", "iproute2", "procps", "libc6"] {
        assert!(depends.contains(d), "Depends lacks {d}: {depends}");
    }

    // Installed and started in the fresh root.
    let out = std::env::temp_dir().join(format!("holdfast-deb-test-{}", std::process::id()));
    let _ = fs::remove_dir_all(&out);
    let script = root().join("crates/lab/tests/lab/deb_package/install.sh");
    let st = Command::new("unshare")
        .args(["--mount", "--net", "--propagation", "private", "bash"])
        .arg(&script)
        .arg(&deb)
        .arg(&out)
        .status()
        .expect("unshare");
    let read = |f: &str| fs::read_to_string(out.join(f)).unwrap_or_default();
    let log = read("install.log");
    assert!(st.success(), "install.sh failed ({st}):\n{log}");
    assert_eq!(read("finished").trim(), "done", "{log}");
    eprintln!("{}", read("timings.txt"));
    eprintln!("systemd-analyze security:\n{}", read("security.txt"));

    assert!(
        read("dpkg-status.txt").starts_with("install ok installed"),
        "{}",
        read("dpkg-install.txt")
    );
    let installed: BTreeSet<String> = read("dpkg-files.txt")
        .lines()
        .map(|l| l.trim_start_matches('/').to_string())
        .collect();
    for f in expected_files() {
        assert!(installed.contains(&f), "dpkg -L lacks {f}");
    }
    assert_eq!(
        read("verify.rc").trim(),
        "0",
        "systemd-analyze verify:\n{}",
        read("verify.txt")
    );
    assert!(
        read("verify.txt").trim().is_empty(),
        "systemd-analyze verify said:\n{}",
        read("verify.txt")
    );
    assert!(
        read("config-check.txt").contains(": OK"),
        "{}",
        read("config-check.txt")
    );
    assert_eq!(
        read("execstart.txt").trim(),
        "/usr/bin/holdfastd --config /etc/holdfast/example.toml"
    );

    // The daemon, through the installed CLI.
    let hf_log = read("holdfastd.log");
    assert!(
        read("summary.txt").contains("65000"),
        "show summary: {}\nholdfastd:\n{hf_log}",
        read("summary.txt")
    );
    let summary: serde_json::Value =
        serde_json::from_str(&read("summary.json")).unwrap_or_else(|e| {
            panic!(
                "show summary --json: {e}: {}\nholdfastd:\n{hf_log}",
                read("summary.json")
            )
        });
    let text = summary.to_string();
    assert!(
        text.contains("65000") && text.contains("192.0.2.1"),
        "summary: {text}"
    );
    let neighbors = read("neighbors.json");
    assert!(neighbors.contains("192.0.2.2"), "neighbors: {neighbors}");
    let reload = read("reload.txt");
    assert!(reload.contains(": OK"), "ExecReload: {reload}");
    assert!(
        serde_json::from_str::<serde_json::Value>(&read("summary-after-reload.json")).is_ok(),
        "holdfastd does not answer after the reload:\n{hf_log}"
    );
    assert_eq!(
        read("holdfastd.rc").trim(),
        "0",
        "holdfastd's exit on SIGTERM:\n{hf_log}"
    );
    // It listened on port 179 (v4 and v6) with the unit's capabilities and
    // nothing more, on a read-only root.
    let listening = read("listening.txt");
    assert!(
        listening.contains("0.0.0.0:179") && listening.contains("[::]:179"),
        "ss -ltn: {listening}\nholdfastd:\n{hf_log}"
    );
    assert_eq!(
        read("bounding-set.txt").trim(),
        "-all,+net_admin,+net_raw,+net_bind_service,+sys_nice"
    );
    assert!(
        !hf_log.contains('\u{1b}'),
        "colour escapes in the log:\n{hf_log}"
    );
    let status = read("holdfastd-status.txt");
    // CAP_NET_BIND_SERVICE 10, CAP_NET_ADMIN 12, CAP_NET_RAW 13, CAP_SYS_NICE 23.
    assert!(status.contains("CapBnd:\t0000000000803400"), "{status}");
    assert!(status.contains("CapEff:\t0000000000803400"), "{status}");
    assert!(status.contains("NoNewPrivs:\t1"), "{status}");
    assert!(
        read("ro-root.txt").contains("Read-only file system"),
        "{}",
        read("ro-root.txt")
    );

    // The dashboard's metrics, live.
    let hf_metrics = read("metrics-holdfastd.txt");
    let ctl_metrics = read("metrics-controller.txt");
    assert!(
        hf_metrics.contains("holdfast_session_state"),
        "holdfastd /metrics:\n{hf_metrics}"
    );
    assert!(
        ctl_metrics.contains("holdfast_controller_is_leader 1"),
        "controller /metrics:\n{ctl_metrics}\ncontroller:\n{}",
        read("controller.log")
    );
    let live: BTreeSet<String> = exposed(&hf_metrics)
        .union(&exposed(&ctl_metrics))
        .cloned()
        .collect();
    let wanted = dashboard_metrics();
    let missing: Vec<&String> = wanted.iter().filter(|m| !live.contains(*m)).collect();
    assert!(
        missing.is_empty(),
        "dashboard metrics missing from the live /metrics: {missing:?}\nlive: {live:?}"
    );
    eprintln!("{} dashboard metrics, all live", wanted.len());

    // Documentation as a user meets it.
    let man = read("man-w.txt");
    for b in BINARIES {
        assert!(
            man.contains(&format!("/usr/share/man/man1/{b}.1.gz")),
            "man -w {b}: {man}"
        );
    }
    assert!(
        read("man-show-summary.txt").contains("--json"),
        "{}",
        read("man-show-summary.txt")
    );
    assert!(
        read("bash-complete.txt").contains("holdfast"),
        "{}",
        read("bash-complete.txt")
    );

    // An upgrade beside the running build.
    let versions = read("versions.txt");
    let (ver, next) = versions
        .trim()
        .split_once(' ')
        .unwrap_or_else(|| panic!("versions: {versions:?}"));
    let upgraded = read("dpkg-upgrade.txt");
    assert!(
        upgraded.contains(&format!(
            "holdfast ctl upgrade --host HOST --binary /usr/lib/holdfast/{next}/holdfastd"
        )) && upgraded.contains(&format!("/usr/lib/holdfast/{ver}/holdfastd")),
        "postinst must say how to move the units to the new build and back: {upgraded}"
    );
    assert_eq!(
        read("upgrade-running.txt").trim(),
        "alive",
        "the running holdfastd must survive the package's upgrade untouched: {upgraded}"
    );
    let kept = read("kept.txt");
    assert!(
        kept.lines().any(|l| l == ver) && kept.lines().any(|l| l == next),
        "both builds kept under /usr/lib/holdfast: {kept}"
    );
    for v in [ver, next] {
        let s = read(&format!("schemas-{v}.txt"));
        let b: holdfast_api::schemas::BuildSchemas = serde_json::from_str(s.trim())
            .unwrap_or_else(|e| panic!("/usr/lib/holdfast/{v}/holdfastd --schemas: {e}: {s}"));
        assert!(
            (b.nsr.reads.0..=b.nsr.reads.1).contains(&b.nsr.writes),
            "a build reads what it writes: {s}"
        );
    }

    // Removal.
    assert_eq!(
        read("after-remove-builds.txt").trim(),
        "gone",
        "dpkg -r must remove the kept builds"
    );
    let after = read("after-remove.txt");
    assert!(
        after.contains("/usr/bin/holdfastd") && after.contains("No such file"),
        "{after}"
    );
    assert!(!after.contains("example.toml: No such file"), "{after}");
    let _ = fs::remove_dir_all(&out);
}

/// The minimal Debian tree scripts/install-deps.sh builds for the boot test.
const NSPAWN_TREE: &str = "/var/cache/holdfast-test/nspawn-root";

/// The package under a real systemd: a minimal Debian booted with
/// systemd-nspawn (its changes on a tmpfs), `dpkg -i`, the units started by
/// systemd with all their sandboxing (boot.sh).
#[test]
fn deb_package_systemd() {
    if !nix::unistd::Uid::effective().is_root() {
        skip("deb_package_systemd needs root (systemd-nspawn)");
        return;
    }
    for tool in ["systemd-nspawn", "nsenter", "redis-server", "redis-cli"] {
        if holdfast_lab::find_tool(tool).is_none() {
            skip(&format!("deb_package_systemd needs {tool}"));
            return;
        }
    }
    if !Path::new(NSPAWN_TREE).join("lib/systemd/systemd").exists() {
        skip(&format!(
            "no Debian tree at {NSPAWN_TREE} (scripts/install-deps.sh)"
        ));
        return;
    }
    let deb = package();
    let out = std::env::temp_dir().join(format!("holdfast-deb-boot-{}", std::process::id()));
    let _ = fs::remove_dir_all(&out);
    let st = Command::new("bash")
        .arg(root().join("crates/lab/tests/lab/deb_package/boot.sh"))
        .arg(NSPAWN_TREE)
        .arg(&deb)
        .arg(&out)
        .status()
        .expect("bash boot.sh");
    let read = |f: &str| fs::read_to_string(out.join(f)).unwrap_or_default();
    let journal = read("journal.txt");
    assert!(
        st.success(),
        "boot.sh failed ({st}):\n{}\n{journal}",
        read("boot.log")
    );
    assert_eq!(read("finished").trim(), "done", "{}", read("boot.log"));
    eprintln!("{}", read("timings.txt"));
    eprintln!(
        "systemd-analyze security (online):\n{}",
        read("security.txt")
    );

    let state = read("system-state.txt");
    assert!(
        matches!(state.trim(), "running" | "degraded"),
        "system: {state}"
    );
    // Started by systemd, sandboxed as the unit says, answering the CLI.
    let summary = read("summary.json");
    assert!(
        summary.contains("\"asn\": 65000") && summary.contains("192.0.2.1"),
        "show summary --json: {summary}\n{journal}"
    );
    assert!(
        read("summary.txt").contains("AS 65000"),
        "{}",
        read("summary.txt")
    );
    let listening = read("listening.txt");
    assert!(
        listening.contains("0.0.0.0:179") && listening.contains("[::]:179"),
        "ss -ltn: {listening}\n{journal}"
    );
    let status = read("example-status.txt");
    assert!(status.contains("CapBnd:\t0000000000803400"), "{status}");
    assert!(status.contains("NoNewPrivs:\t1"), "{status}");
    assert!(
        status.contains("Seccomp:\t2"),
        "no syscall filter: {status}"
    );
    // systemctl reload runs ExecReload (config check, SIGHUP) and succeeds.
    assert_eq!(
        read("reload.rc").trim(),
        "0",
        "systemctl reload: {}\n{journal}",
        read("reload.txt")
    );
    assert!(journal.contains("configuration reloaded"), "{journal}");
    // A SIGKILLed holdfastd is restarted.
    let after = read("after-kill.txt");
    assert!(
        after.contains("NRestarts=1") && after.contains("SubState=running"),
        "{after}"
    );
    assert!(
        read("summary-after-kill.json").contains("192.0.2.1"),
        "{after}"
    );
    // A fenced one (exit 75) is not.
    assert!(
        read("nsr.json").contains("\"protected\": true"),
        "show nsr: {}\n{journal}",
        read("nsr.json")
    );
    assert!(
        read("iptables.txt").contains("NFQUEUE"),
        "the gate's rules under the sandbox: {}",
        read("iptables.txt")
    );
    let fenced = read("fenced.txt");
    assert!(
        fenced.contains("ExecMainStatus=75")
            && fenced.contains("ActiveState=failed")
            && fenced.contains("NRestarts=0"),
        "fenced: {fenced}\n{journal}"
    );
    assert!(journal.contains("FENCED"), "{journal}");
    // The relay runs as a dynamic user with CAP_NET_ADMIN.
    let relay = read("relay.txt");
    assert!(
        relay.contains("ActiveState=active") && relay.contains("NRestarts=0"),
        "{relay}\n{journal}"
    );
    let _ = fs::remove_dir_all(&out);
}
