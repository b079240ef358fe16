//! What a holdfastd binary says of its NSR record schemas (`holdfastd
//! --schemas`), asked by an upgrade's standby step before anything starts
//! (`holdfast_api::schemas::upgrade_compatible`).
//!
//! # Known issues
//! - It runs on the agent's loop: a binary that does not answer holds the
//!   loop for up to [`SCHEMAS_WITHIN`] (2 s; a holdfastd answers in a few
//!   milliseconds).

use holdfast_api::schemas::{upgrade_compatible, BuildSchemas};
use std::time::{Duration, Instant};

/// How long `holdfastd --schemas` may take.
const SCHEMAS_WITHIN: Duration = Duration::from_secs(2);

/// `PROGRAM --schemas`, bounded by [`SCHEMAS_WITHIN`] (a build older than
/// the flag: `BuildSchemas::before_the_flag`).
pub fn build_schemas(program: &std::path::Path) -> Result<BuildSchemas, String> {
    let what = |e: &dyn std::fmt::Display| format!("{} --schemas: {e}", program.display());
    let mut child = std::process::Command::new(program)
        .arg("--schemas")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .map_err(|e| what(&e))?;
    let start = Instant::now();
    loop {
        match child.try_wait() {
            Ok(Some(status)) if status.success() => break,
            // A usage error: a build older than the flag.
            Ok(Some(status)) if status.code() == Some(2) => {
                return Ok(BuildSchemas::before_the_flag())
            }
            Ok(Some(status)) => return Err(what(&status)),
            Ok(None) if start.elapsed() > SCHEMAS_WITHIN => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(what(&format!("no answer within {SCHEMAS_WITHIN:?}")));
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(2)),
            Err(e) => return Err(what(&e)),
        }
    }
    let mut out = String::new();
    use std::io::Read as _;
    child
        .stdout
        .take()
        .map(|mut s| s.read_to_string(&mut out))
        .transpose()
        .map_err(|e| what(&e))?;
    serde_json::from_str(out.trim()).map_err(|e| what(&format!("unreadable answer {out:?}: {e}")))
}

/// Whether the unit may move from `old` to `new` and back.
pub fn compare_builds(old: &std::path::Path, new: &std::path::Path) -> Result<(), String> {
    upgrade_compatible(&build_schemas(old)?, &build_schemas(new)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt as _;

    /// A shell script standing in for a binary.
    fn script(dir: &std::path::Path, name: &str, body: &str) -> std::path::PathBuf {
        let p = dir.join(name);
        std::fs::write(&p, format!("#!/bin/sh\n{body}\n")).expect("write");
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        p
    }

    #[test]
    fn asks_a_binary_and_reads_old_builds_and_bad_answers_as_such() {
        let dir = std::env::temp_dir().join(format!("hf-schemas-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let one = script(
            &dir,
            "one",
            r#"echo '{"version":"0.1.0","nsr":{"writes":1,"reads":[1,1]}}'"#,
        );
        let two = script(
            &dir,
            "two",
            r#"echo '{"version":"0.3.0","nsr":{"writes":2,"reads":[1,2]}}'"#,
        );
        let old = script(
            &dir,
            "old",
            "echo \"error: unexpected argument '--schemas'\" >&2; exit 2",
        );
        let slow = script(&dir, "slow", "exec sleep 10");
        let junk = script(&dir, "junk", "echo not json");
        assert_eq!(build_schemas(&one).expect("one").nsr.writes, 1);
        assert_eq!(
            build_schemas(&old).expect("old"),
            BuildSchemas::before_the_flag()
        );
        let t = Instant::now();
        let e = build_schemas(&slow).expect_err("no answer");
        assert!(e.contains("no answer within"), "{e}");
        assert!(t.elapsed() < SCHEMAS_WITHIN + Duration::from_secs(1));
        assert!(build_schemas(&junk)
            .expect_err("junk")
            .contains("unreadable answer"));
        assert!(build_schemas(&dir.join("none")).is_err());
        assert_eq!(compare_builds(&old, &one), Ok(()));
        let e = compare_builds(&one, &two).expect_err("no rollback from schema 2");
        assert!(e.contains("writes schema 2"), "{e}");
        std::fs::remove_dir_all(&dir).expect("clean up");
    }
}
