//! Network namespaces: running code inside one.
//!
//! A socket belongs to the namespace it was created in, whatever thread
//! later uses it; so a socket for another namespace is created on a
//! short-lived thread that first joins that namespace with `setns(2)`, and
//! is then used from anywhere. The lab, the tester, the orchestration and
//! the tests all go through [`in_netns`].

use std::fs::File;
use std::path::{Path, PathBuf};

/// The file of a named network namespace (`/run/netns/<name>`), or `name`
/// itself when it is a path.
pub fn netns_path(name: &str) -> PathBuf {
    if name.contains('/') {
        Path::new(name).to_path_buf()
    } else {
        Path::new("/run/netns").join(name)
    }
}

/// Runs `f` on a new thread that has joined the network namespace `name`
/// (see [`netns_path`]) and returns its result. A panic in `f` is re-raised
/// here with its payload.
pub fn in_netns<T: Send + 'static>(
    name: &str,
    f: impl FnOnce() -> T + Send + 'static,
) -> std::io::Result<T> {
    let ns = File::open(netns_path(name))?;
    let h = std::thread::spawn(move || -> std::io::Result<T> {
        nix::sched::setns(&ns, nix::sched::CloneFlags::CLONE_NEWNET)
            .map_err(std::io::Error::from)?;
        Ok(f())
    });
    match h.join() {
        Ok(r) => r,
        Err(p) => std::panic::resume_unwind(p),
    }
}
