//! What a holdfastd build writes and reads (`holdfastd --schemas`), and
//! whether two builds can hand a unit's sessions to each other.
//!
//! An upgrade runs a standby of the new build beside the old primary, and
//! a rollback the other way round: each build must read the NSR records
//! the other writes (docs/nsr.md, "Versions and compatibility").
//! `holdfast ctl upgrade` has the backup host's agent ask both binaries
//! before anything moves, and refuses an upgrade that could not be rolled
//! back.

use serde::{Deserialize, Serialize};

/// The NSR record schemas of one build.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct NsrSchemas {
    /// The schema of every record it writes.
    pub writes: u32,
    /// The oldest and newest schema it reads.
    pub reads: (u32, u32),
}

impl NsrSchemas {
    fn reads(&self, schema: u32) -> bool {
        (self.reads.0..=self.reads.1).contains(&schema)
    }
}

/// `holdfastd --schemas`: the build and its schemas, as one JSON line.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BuildSchemas {
    /// `holdfast_version::VERSION`.
    pub version: String,
    pub nsr: NsrSchemas,
}

impl BuildSchemas {
    /// A build older than `--schemas` (it rejects the flag as a usage
    /// error): every such build wrote and read NSR record schema 1 only.
    pub fn before_the_flag() -> BuildSchemas {
        BuildSchemas {
            version: "a build older than --schemas".into(),
            nsr: NsrSchemas {
                writes: 1,
                reads: (1, 1),
            },
        }
    }
}

/// Whether the unit's sessions can move from `old` to `new` and back: each
/// reads what the other writes. The error names both builds and schemas.
pub fn upgrade_compatible(old: &BuildSchemas, new: &BuildSchemas) -> Result<(), String> {
    let mut why = Vec::new();
    if !new.nsr.reads(old.nsr.writes) {
        why.push(format!(
            "the new build ({}) reads NSR record schemas {}..={}, and the running build ({}) writes schema {}",
            new.version, new.nsr.reads.0, new.nsr.reads.1, old.version, old.nsr.writes
        ));
    }
    if !old.nsr.reads(new.nsr.writes) {
        why.push(format!(
            "the running build ({}) reads NSR record schemas {}..={}, and the new build ({}) writes schema {}: no rollback would be possible",
            old.version, old.nsr.reads.0, old.nsr.reads.1, new.version, new.nsr.writes
        ));
    }
    if why.is_empty() {
        Ok(())
    } else {
        Err(why.join("; "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn build(version: &str, writes: u32, reads: (u32, u32)) -> BuildSchemas {
        BuildSchemas {
            version: version.into(),
            nsr: NsrSchemas { writes, reads },
        }
    }

    #[test]
    fn builds_that_read_each_other_may_swap_and_others_may_not() {
        let one = build("0.1.0", 1, (1, 1));
        assert_eq!(upgrade_compatible(&one, &one), Ok(()));
        // A build that still writes 1 while it reads 2 too: both ways.
        let bridge = build("0.2.0", 1, (1, 2));
        assert_eq!(upgrade_compatible(&one, &bridge), Ok(()));
        assert_eq!(upgrade_compatible(&bridge, &one), Ok(()));
        // One that writes 2: the old build could not take it back.
        let two = build("0.3.0", 2, (1, 2));
        let e = upgrade_compatible(&one, &two).expect_err("no rollback");
        assert!(
            e.contains("writes schema 2") && e.contains("reads NSR record schemas 1..=1"),
            "{e}"
        );
        // And the rollback from it is refused the same way.
        let e = upgrade_compatible(&two, &one).expect_err("the old build cannot read 2");
        assert!(e.contains("0.1.0") && e.contains("0.3.0"), "{e}");
        // From a bridge build, 2 is fine both ways.
        assert_eq!(upgrade_compatible(&bridge, &two), Ok(()));
    }

    #[test]
    fn the_json_is_one_line_an_agent_can_read() {
        let b = build("0.1.0 (v0.1.0)", 1, (1, 1));
        let line = serde_json::to_string(&b).expect("json");
        assert_eq!(
            line,
            r#"{"version":"0.1.0 (v0.1.0)","nsr":{"writes":1,"reads":[1,1]}}"#
        );
        assert_eq!(
            serde_json::from_str::<BuildSchemas>(&line).expect("back"),
            b
        );
    }
}
