//! What build a Holdfast binary is.
//!
//! [`VERSION`] is the package version and the commit (`git describe --tags
//! --always --dirty` when the build started, e.g. `0.1.0 (v0.1.0-3-g1a2b3c4)`);
//! every binary's `--version` prints it, and holdfastd, the agents and the
//! controllers report it in their status, so an operator (and
//! `holdfast ctl upgrade`) can tell which build runs where.
//!
//! # Known issues
//! - "dirty" is judged when the description was last computed, at the last
//!   change of the checked-out commit: edits to the working tree since then
//!   do not change it (they would rebuild every binary on every edit).
//! - A new commit rebuilds every crate that depends on this one (the
//!   binaries' packages: about 3 minutes on 2 cores). A development loop
//!   that commits often can pin the description, `HOLDFAST_DESCRIBE=dev`
//!   (git is then neither asked nor watched).

/// The package version (the workspace's, from Cargo.toml).
pub const PACKAGE: &str = env!("CARGO_PKG_VERSION");

/// `git describe --tags --always --dirty` of the tree built, or
/// `$HOLDFAST_DESCRIBE` at build time, or "unknown".
pub const DESCRIBE: &str = env!("HOLDFAST_DESCRIBE");

/// `PACKAGE (DESCRIBE)`: what `--version` prints after the binary's name.
pub const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (",
    env!("HOLDFAST_DESCRIBE"),
    ")"
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn version_names_the_package_and_the_build() {
        assert!(VERSION.starts_with(PACKAGE));
        assert!(VERSION.contains(DESCRIBE));
        assert!(!DESCRIBE.is_empty());
    }
}
