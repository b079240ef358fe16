//! What the upgrade scenarios share (`upgrade_frr`, `upgrade_releases`):
//! `holdfast ctl upgrade` of the
//! unit or of its host with the checks that it landed, and the previous
//! release's build (`scripts/prev-build.sh`).

use crate::nsr_plane::{Run, UNIT};

use holdfast_lab::Peer;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// `/proc/PID/exe`.
pub fn exe(pid: u64) -> PathBuf {
    std::fs::read_link(format!("/proc/{pid}/exe")).expect("the unit's process")
}

/// `BINARY --version`, first line.
pub fn version(binary: &Path) -> String {
    let out = std::process::Command::new(binary)
        .arg("--version")
        .output()
        .unwrap_or_else(|e| panic!("{} --version: {e}", binary.display()));
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .next()
        .unwrap_or_default()
        .to_string()
}

/// The previous release's holdfastd, built by `scripts/prev-build.sh`
/// (`make test` runs it): `$HOLDFAST_PREV_HOLDFASTD`, else the workspace's
/// `target/prev/holdfastd`. `None` (a failure under
/// `HOLDFAST_REQUIRE_LAB=1`) when it is not there.
pub fn prev_release() -> Option<PathBuf> {
    let path = std::env::var_os("HOLDFAST_PREV_HOLDFASTD")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/prev/holdfastd")
        });
    if path.is_file() {
        return Some(path);
    }
    holdfast_lab::skip(&format!(
        "no build of the previous release at {} (bash scripts/prev-build.sh builds it)",
        path.display()
    ));
    None
}

/// `holdfast ctl upgrade` of the unit (`host`: of its primary's host) to
/// `binary`, waited for; the unit's new primary runs it, the old process
/// exits, and `holdfast ctl units` names it. Returns how long the command
/// took.
pub fn upgrade<P: Peer>(r: &mut Run<P>, binary: &Path, host: bool) -> Duration {
    let bin = binary.display().to_string();
    let on = r.hf().host_name.clone();
    let (what, target) = match host {
        true => (
            format!("upgrade of host {on} to {bin}"),
            ["--host", on.as_str()],
        ),
        false => (format!("upgrade to {bin}"), [UNIT, ""]),
    };
    let mut took = Duration::ZERO;
    let old = r.take_over(&what, |r| {
        let mut args: Vec<&str> = vec!["upgrade"];
        args.extend(target.iter().filter(|a| !a.is_empty()));
        args.extend(["--binary", &bin, "--wait", "120"]);
        let t0 = Instant::now();
        let done = r
            .plane
            .ctl(&args)
            .unwrap_or_else(|e| panic!("holdfast ctl upgrade: {e}"));
        took = t0.elapsed();
        assert!(done["done"] == true, "holdfast ctl upgrade: {done}");
        println!("{what}: {done} ({took:?})");
    });
    holdfast_lab::wait_ok(
        &format!("{what}: the old process exits"),
        Duration::from_secs(30),
        || {
            (!old.is_alive())
                .then_some(())
                .ok_or("still running".to_string())
        },
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let pid = r.hf().pid;
    assert_eq!(
        exe(pid),
        binary.canonicalize().expect("binary"),
        "{what}: the new primary (pid {pid}) runs another binary"
    );
    let units = r.plane.ctl(&["units"]).expect("holdfast ctl units");
    let u = units
        .as_array()
        .and_then(|a| a.iter().find(|u| u["unit"] == UNIT))
        .unwrap_or_else(|| panic!("no {UNIT} in {units}"));
    assert_eq!(u["binary"], bin, "{what}: the placement's binary");
    took
}
