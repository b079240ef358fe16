//! `--version` names the package version and the commit built (`git describe`).

use std::process::Command;

#[test]
fn version_names_the_commit() {
    let out = Command::new(env!("CARGO_BIN_EXE_holdfast"))
        .arg("--version")
        .output()
        .unwrap();
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout).trim().to_string();
    assert_eq!(
        text,
        format!("holdfast {}", holdfast_version::VERSION),
        "what --version prints"
    );
    assert!(text.starts_with(&format!("holdfast {} (", env!("CARGO_PKG_VERSION"))));
    // The tree's own description (without "-dirty": the check runs against the
    // commit, as the build script saw it), unless the build was named from
    // outside (`HOLDFAST_DESCRIBE`).
    if option_env!("HOLDFAST_DESCRIBE").is_some_and(|d| !d.is_empty()) {
        return;
    }
    if let Ok(g) = Command::new("git")
        .args(["describe", "--tags", "--always"])
        .output()
    {
        if g.status.success() {
            let describe = String::from_utf8_lossy(&g.stdout).trim().to_string();
            assert!(
                text.contains(&format!("({describe}")),
                "{text:?} should name {describe:?}"
            );
        }
    }
}
