//! Running tester code inside a network namespace created by the lab.
//!
//! A socket belongs to the namespace it was created in, whatever thread
//! later uses it; so a tester session is set up on a short-lived thread that
//! first joins the namespace with `setns(2)`, and is then used from anywhere.

use std::fs::File;
use std::path::Path;

/// Runs `f` on a new thread that has joined the network namespace at
/// `/run/netns/<name>` (or at `name` if it is a path), and returns its result.
pub fn in_netns<T: Send + 'static>(
    name: &str,
    f: impl FnOnce() -> T + Send + 'static,
) -> std::io::Result<T> {
    let path = if name.contains('/') {
        Path::new(name).to_path_buf()
    } else {
        Path::new("/run/netns").join(name)
    };
    let ns = File::open(&path)?;
    std::thread::spawn(move || -> std::io::Result<T> {
        nix::sched::setns(&ns, nix::sched::CloneFlags::CLONE_NEWNET)
            .map_err(std::io::Error::from)?;
        Ok(f())
    })
    .join()
    .map_err(|_| std::io::Error::other("namespace thread panicked"))?
}
