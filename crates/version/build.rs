//! Sets `HOLDFAST_DESCRIBE` for the crate: `git describe --tags --always
//! --dirty` of the tree being built, or `$HOLDFAST_DESCRIBE` when it is set
//! (a build from a source package, without `.git`), else "unknown".
//! Re-runs when the checked-out commit moves (HEAD, its reflog, the branch
//! it names, the packed refs: those that exist) or a tag is made
//! (`refs/tags`), so a new commit or release tag builds a new description; changes to the working tree alone do not rebuild
//! everything that depends on this crate.
//! With `HOLDFAST_DESCRIBE` set, git is not asked and not watched.

use std::path::PathBuf;
use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
        .filter(|s| !s.is_empty())
}

fn main() {
    println!("cargo:rerun-if-env-changed=HOLDFAST_DESCRIBE");
    // Named from outside: nothing of git is watched, so commits do not
    // rebuild what depends on this crate.
    if let Some(named) = std::env::var("HOLDFAST_DESCRIBE")
        .ok()
        .filter(|s| !s.is_empty())
    {
        println!("cargo:rustc-env=HOLDFAST_DESCRIBE={named}");
        return;
    }
    let describe = git(&["describe", "--tags", "--always", "--dirty"])
        .unwrap_or_else(|| "unknown".to_string());
    if let Some(dir) = git(&["rev-parse", "--git-dir"]) {
        let dir = PathBuf::from(dir);
        let common = git(&["rev-parse", "--git-common-dir"]).map_or(dir.clone(), PathBuf::from);
        let mut watched = vec![
            dir.join("HEAD"),
            dir.join("logs").join("HEAD"),
            common.join("packed-refs"),
            // A release tag made on the commit already built: `git describe`
            // names it from then on (`make deb` at the tag, README).
            common.join("refs").join("tags"),
        ];
        if let Some(head) = git(&["symbolic-ref", "-q", "HEAD"]) {
            watched.push(common.join(head));
        }
        // Only files that exist: cargo counts a missing one as changed on
        // every build, which rebuilt this crate and everything above it each
        // time (a clone without packed-refs, a branch whose ref is packed).
        // HEAD's reflog, appended by every commit and checkout, covers a
        // branch whose loose ref appears only when it moves.
        for path in watched.iter().filter(|p| p.exists()) {
            println!("cargo:rerun-if-changed={}", path.display());
        }
    }
    println!("cargo:rustc-env=HOLDFAST_DESCRIBE={describe}");
}
