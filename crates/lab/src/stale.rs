//! Run identifiers, the owner registry and removal of namespaces left by crashed runs.

use std::io::Read;
use std::path::PathBuf;
use std::thread;
use std::time::{Duration, Instant};

use crate::cmd::{argv, pid_alive, run_ok, send_signal, Signal, DEFAULT_CMD_TIMEOUT};
use crate::error::{io_ctx, Result};

/// Every namespace the harness creates starts with this, followed by 6 hex digits and `-`.
pub const NAME_PREFIX: &str = "hf";

/// Directory holding one file per live run (`<run id>` containing the owner pid), so
/// [`cleanup_stale`] never touches namespaces of runs whose owner is still alive.
pub(crate) const REGISTRY_DIR: &str = "/run/holdfast-lab";

/// Generate a fresh run id: `hf` + 6 random hex digits.
pub(crate) fn new_run_id() -> Result<String> {
    let mut bytes = [0u8; 3];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut bytes))
        .map_err(io_ctx("reading /dev/urandom"))?;
    Ok(format!(
        "{NAME_PREFIX}{:02x}{:02x}{:02x}",
        bytes[0], bytes[1], bytes[2]
    ))
}

/// If `name` looks like `hf<6 hex>-...`, return the run id part.
pub fn run_id_of(name: &str) -> Option<&str> {
    let rest = name.strip_prefix(NAME_PREFIX)?;
    let hex = rest.get(..6)?;
    let ok = hex
        .bytes()
        .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
        && rest.as_bytes().get(6) == Some(&b'-');
    ok.then(|| &name[..NAME_PREFIX.len() + 6])
}

pub(crate) fn registry_path(run_id: &str) -> PathBuf {
    PathBuf::from(REGISTRY_DIR).join(run_id)
}

/// Record that this process owns `run_id`.
pub(crate) fn register(run_id: &str) -> Result<()> {
    std::fs::create_dir_all(REGISTRY_DIR).map_err(io_ctx("creating lab registry"))?;
    std::fs::write(registry_path(run_id), std::process::id().to_string())
        .map_err(io_ctx("writing lab registry entry"))
}

/// Prefix of a registry entry for a kept lab (`Lab::keep`): `kept <state file>`.
const KEPT_PREFIX: &str = "kept ";

/// Record that `run_id` is kept by `state_file`: it counts as alive for as long as that
/// file exists and names the run, whatever process created it.
pub(crate) fn register_kept(run_id: &str, state_file: &std::path::Path) -> Result<()> {
    let abs = std::path::absolute(state_file)
        .map_err(io_ctx(format!("resolving {}", state_file.display())))?;
    std::fs::create_dir_all(REGISTRY_DIR).map_err(io_ctx("creating lab registry"))?;
    std::fs::write(
        registry_path(run_id),
        format!("{KEPT_PREFIX}{}", abs.display()),
    )
    .map_err(io_ctx("writing lab registry entry"))
}

pub(crate) fn unregister(run_id: &str) {
    let _ = std::fs::remove_file(registry_path(run_id));
}

fn owner_alive(run_id: &str) -> bool {
    let Ok(entry) = std::fs::read_to_string(registry_path(run_id)) else {
        return false;
    };
    if let Some(state_file) = entry.strip_prefix(KEPT_PREFIX) {
        // A kept lab lives as long as its state file exists and still names it.
        return std::fs::read_to_string(state_file.trim())
            .is_ok_and(|text| text.contains(&format!("\"{run_id}\"")));
    }
    entry.trim().parse::<u32>().ok().is_some_and(pid_alive)
}

/// Where a run keeps data that must not wait on the disk: a tmpfs. The lab's etcd
/// members live there, since on a shared disk their fsyncs queue behind whatever else
/// writes or reads it (a build, a large copy) for seconds, long enough for host agents'
/// leases to run out and their units to be fenced.
const SCRATCH_ROOT: &str = "/dev/shm";

/// `/dev/shm/<run id>-<what>`, created; removed at the run's teardown and by
/// [`cleanup_stale`] once the run's owner is gone. `None` when there is no `/dev/shm`.
pub(crate) fn scratch_dir(run_id: &str, what: &str) -> Result<Option<PathBuf>> {
    if !std::path::Path::new(SCRATCH_ROOT).is_dir() {
        return Ok(None);
    }
    let dir = PathBuf::from(SCRATCH_ROOT).join(format!("{run_id}-{what}"));
    std::fs::create_dir_all(&dir).map_err(io_ctx(format!("creating {}", dir.display())))?;
    Ok(Some(dir))
}

/// Removes every scratch directory of `run_id` ([`scratch_dir`]).
pub(crate) fn remove_scratch(run_id: &str) {
    let Ok(entries) = std::fs::read_dir(SCRATCH_ROOT) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if run_id_of(&name) == Some(run_id) {
            let _ = std::fs::remove_dir_all(e.path());
        }
    }
}

/// Run ids with a scratch directory whose owner is gone.
fn stale_scratch() -> Vec<String> {
    let Ok(entries) = std::fs::read_dir(SCRATCH_ROOT) else {
        return Vec::new();
    };
    let mut ids: Vec<String> = entries
        .flatten()
        .filter_map(|e| run_id_of(&e.file_name().to_string_lossy()).map(str::to_string))
        .filter(|id| !owner_alive(id))
        .collect();
    ids.sort();
    ids.dedup();
    ids
}

/// Whether a registry directory entry is a run id (other files there are left alone).
fn is_run_id(name: &str) -> bool {
    run_id_of(&format!("{name}-")) == Some(name)
}

/// Names of all network namespaces (`ip netns list`).
pub fn list_netns() -> Result<Vec<String>> {
    let out = run_ok(&argv(&["ip", "netns", "list"]), DEFAULT_CMD_TIMEOUT)?;
    Ok(out
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .map(str::to_string)
        .collect())
}

/// Pids of processes living in namespace `ns`.
pub fn netns_pids(ns: &str) -> Vec<u32> {
    run_ok(&argv(&["ip", "netns", "pids", ns]), DEFAULT_CMD_TIMEOUT)
        .map(|s| {
            s.split_whitespace()
                .filter_map(|p| p.parse().ok())
                .collect()
        })
        .unwrap_or_default()
}

/// Kill every process in the given namespaces (TERM, bounded wait, KILL) and delete them.
pub(crate) fn destroy_namespaces(names: &[String]) {
    let mut pids: Vec<u32> = names.iter().flat_map(|n| netns_pids(n)).collect();
    for &pid in &pids {
        send_signal(pid, Signal::Term, false);
    }
    let deadline = Instant::now() + Duration::from_secs(3);
    while !pids.is_empty() && Instant::now() < deadline {
        pids.retain(|&p| pid_alive(p));
        thread::sleep(Duration::from_millis(20));
    }
    for &pid in &pids {
        send_signal(pid, Signal::Kill, false);
    }
    for name in names {
        let _ = run_ok(&argv(&["ip", "netns", "del", name]), DEFAULT_CMD_TIMEOUT);
    }
}

/// Namespaces [`cleanup_stale`] would remove now (their owner is gone).
pub fn stale_namespaces() -> Result<Vec<String>> {
    Ok(list_netns()?
        .into_iter()
        .filter(|n| run_id_of(n).is_some_and(|id| !owner_alive(id)))
        .collect())
}

/// Remove everything left by earlier crashed runs: namespaces named `hf<6 hex>-...` whose
/// owning process is gone, killing the processes inside them first, their scratch
/// directories, and registry entries of dead owners. Namespaces of live labs (in this or
/// another process) are left alone; so are those of kept labs (`Lab::keep`) whose state
/// file still exists and names them. Work directories are not touched. Returns how many
/// namespaces were removed.
pub fn cleanup_stale() -> Result<usize> {
    let stale = stale_namespaces()?;
    destroy_namespaces(&stale);
    let mut ids: Vec<String> = stale
        .iter()
        .filter_map(|n| run_id_of(n).map(str::to_string))
        .chain(stale_scratch())
        .collect();
    ids.sort();
    ids.dedup();
    for id in &ids {
        remove_scratch(id);
        unregister(id);
    }
    if let Ok(entries) = std::fs::read_dir(REGISTRY_DIR) {
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if is_run_id(&name) && !owner_alive(&name) {
                unregister(&name);
            }
        }
    }
    let remaining = list_netns()?;
    Ok(stale.iter().filter(|n| !remaining.contains(n)).count())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recognises_only_harness_names() {
        assert_eq!(run_id_of("hf0a1b2c-r1"), Some("hf0a1b2c"));
        assert_eq!(run_id_of("hf0a1b2c-sw-lan"), Some("hf0a1b2c"));
        assert_eq!(run_id_of("hfwire-23228"), None);
        assert_eq!(run_id_of("hf0A1b2c-r1"), None);
        assert_eq!(run_id_of("hf0a1b2cr1"), None);
        assert_eq!(run_id_of("hf0a1"), None);
        let id = new_run_id().unwrap();
        assert_eq!(run_id_of(&format!("{id}-x")), Some(id.as_str()));
        assert!(is_run_id(&id));
        assert!(!is_run_id("state.json"));
        assert!(!is_run_id(&format!("{id}x")));
    }

    #[test]
    fn scratch_dirs_go_with_their_run_only() {
        let (id, other) = (new_run_id().unwrap(), new_run_id().unwrap());
        let Some(dir) = scratch_dir(&id, "etcd").unwrap() else {
            return; // no /dev/shm here
        };
        std::fs::write(dir.join("member"), b"x").unwrap();
        let kept = scratch_dir(&other, "etcd").unwrap().unwrap();
        assert!(dir.starts_with(SCRATCH_ROOT) && dir.ends_with(format!("{id}-etcd")));
        // Neither run has a live owner.
        assert!(stale_scratch().contains(&id) && stale_scratch().contains(&other));
        remove_scratch(&id);
        assert!(!dir.exists(), "{}", dir.display());
        assert!(kept.exists(), "another run's scratch directory was removed");
        remove_scratch(&other);
        assert!(!kept.exists());
    }
}
