//! Desired state in etcd: the key layout under `/holdfast/<cluster>/` and
//! the JSON records stored there (each with a `schema` version), plus the
//! pure decision of what a leader does next with an in-flight migration.
//!
//! These are the controller's own minimal types; the planner's desired-state
//! types (units, placement) can replace [`Migration`] and [`UnitRecord`]
//! behind the same [`Keys`] layout and [`next_step`] contract.
//!
//! | key | value |
//! |---|---|
//! | `leader` | [`LeaderRecord`], attached to the leader's lease |
//! | `epoch` | [`EpochRecord`]: the store epoch, the latest leader's token |
//! | `units/<unit>` | [`UnitRecord`]: primary, backup, epoch |
//! | `agents/<host>` | [`AgentRecord`]: a host agent's presence, attached to its lease |
//! | `agent-servers/<host>` | [`AgentRecord`]: the agent server's agent, attached to its lease |
//! | `hosts/failed/<host>` | a failed host (never reused until reset by hand) |
//! | `requests/<id>` | [`OperatorRequest`]: `holdfast ctl switchover`, `drain`, `reset`, for the leader |
//! | `migrations/<unit>` | [`Migration`]: the unit's migration, in flight or the last done; migrations of different units run at once |
//! | `migration` | [`Migration`]: a migration written by an earlier layout (or by hand); carried on and finished there |
//! | `steps/<migration>/<step>` | [`StepRecord`]: a completed step, created once |
//! | `commands/<agent>/<migration>/<step>/<token>` | [`Command`] to an agent |

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

use crate::fence::Token;

/// The version of every record's layout.
pub const SCHEMA: u32 = 1;

/// The keys of one controlled cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Keys {
    prefix: String,
}

impl Keys {
    /// Keys under `/holdfast/<cluster>/`.
    pub fn new(cluster: &str) -> Keys {
        Keys {
            prefix: format!("/holdfast/{cluster}/"),
        }
    }

    /// `/holdfast/<cluster>/`.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The leader key.
    pub fn leader(&self) -> String {
        format!("{}leader", self.prefix)
    }

    /// The store epoch.
    pub fn epoch(&self) -> String {
        format!("{}epoch", self.prefix)
    }

    /// A unit's placement.
    pub fn unit(&self, unit: &str) -> String {
        format!("{}units/{unit}", self.prefix)
    }

    /// A host agent's presence, attached to the agent's lease: the key goes
    /// when the lease expires.
    pub fn agent(&self, host: &str) -> String {
        format!("{}agents/{host}", self.prefix)
    }

    /// The agent server's presence (it carries no units, so it is not a
    /// host), attached to its lease.
    pub fn agent_server(&self, host: &str) -> String {
        format!("{}agent-servers/{host}", self.prefix)
    }

    /// An operator's request to the leader (`holdfast ctl`).
    pub fn request(&self, id: &str) -> String {
        format!("{}requests/{id}", self.prefix)
    }

    /// A failed host.
    pub fn failed_host(&self, host: &str) -> String {
        format!("{}{host}", self.failed_hosts())
    }

    /// The prefix of every failed host's key.
    pub fn failed_hosts(&self) -> String {
        format!("{}hosts/failed/", self.prefix)
    }

    /// A migration under the earlier layout (one at a time): still carried
    /// on and finished where it was written.
    pub fn migration(&self) -> String {
        format!("{}migration", self.prefix)
    }

    /// The prefix of every unit's migration.
    pub fn migrations(&self) -> String {
        format!("{}migrations/", self.prefix)
    }

    /// `unit`'s migration (in flight, or the last one done).
    pub fn migration_of(&self, unit: &str) -> String {
        format!("{}{unit}", self.migrations())
    }

    /// The prefix of a migration's completed steps.
    pub fn steps(&self, migration: &str) -> String {
        format!("{}steps/{migration}/", self.prefix)
    }

    /// One completed step.
    pub fn step(&self, migration: &str, step: &str) -> String {
        format!("{}{step}", self.steps(migration))
    }

    /// A command to `agent` for one step, written by the leader with `token`.
    pub fn command(&self, agent: &str, migration: &str, step: &str, token: Token) -> String {
        format!("{}commands/{agent}/{migration}/{step}/{token}", self.prefix)
    }
}

/// The leader key's value.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaderRecord {
    /// [`SCHEMA`].
    pub schema: u32,
    /// The replica's `--name`.
    pub name: String,
    /// Its lease id.
    pub lease: i64,
    /// Where it serves the agents' `Attach` streams (`--listen`), so that
    /// an agent leaving a silent leader finds the new one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attach: Option<String>,
}

/// A host agent's `agents/<host>` record (the agent server's
/// `agent-servers/<host>`), attached to its lease: written by the agent,
/// read by the other agents (the failsafe) and by the controller (the
/// host's failure domain).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AgentRecord {
    /// [`SCHEMA`].
    #[serde(default)]
    pub schema: u32,
    /// The host.
    pub host: String,
    /// Where its failsafe service listens (`--failsafe-listen`).
    #[serde(default)]
    pub failsafe: Option<String>,
    /// Its build (`holdfast_version::VERSION`).
    #[serde(default)]
    pub version: String,
    /// Its failure domain (`--failure-domain`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub domain: Option<String>,
    /// Where the other agents probe this host, `ADDR:PORT`
    /// (`--probe-addr`): the leader's probe plans name it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub probe_addr: Option<String>,
}

/// The store epoch: advanced to each new leader's token on election.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EpochRecord {
    /// [`SCHEMA`].
    pub schema: u32,
    /// The epoch (the token of the leader that wrote it).
    pub epoch: Token,
    /// That leader's name.
    pub leader: String,
}

/// A unit's placement.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UnitRecord {
    /// [`SCHEMA`].
    pub schema: u32,
    /// The unit.
    pub unit: String,
    /// The host running it.
    pub primary: String,
    /// The host it would be taken over on.
    pub backup: Option<String>,
    /// The token of the leader that wrote this placement.
    pub epoch: Token,
    /// The unit's holdfastd configuration (TOML), sent with a takeover.
    #[serde(default)]
    pub config: String,
    /// Its service addresses (`ADDR/LEN`), moved with the primary.
    #[serde(default)]
    pub addresses: Vec<String>,
    /// The interface the service addresses go on at every host.
    #[serde(default)]
    pub interface: String,
    /// What an application failure of this unit gets (`migrate` or
    /// `restart_in_place`); absent: the controller's `--app-failure`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub app_failure: Option<holdfast_control::AppPolicy>,
    /// A preheated standby follows the store on the backup host (the
    /// leader starts it there); a takeover then goes through it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub preheated: bool,
    /// The holdfastd binary the unit runs, an absolute path on every host
    /// (`holdfast ctl upgrade`); absent: each agent's own `--holdfastd`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub binary: Option<String>,
}

/// What an operator asks of the leader (`holdfast ctl`); the leader carries
/// it out and deletes it, in one fenced transaction.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum OperatorRequest {
    /// A planned switchover of a unit to its backup host.
    Switchover { unit: String },
    /// Every unit off a host, by planned switchover, one at a time.
    Drain { host: String },
    /// A failed host may be used again.
    Reset { host: String },
    /// The unit moved to another holdfastd binary without its peers
    /// noticing ([`UPGRADE_STEPS`]); the same for a rollback.
    Upgrade { unit: String, binary: String },
    /// The unit's upgrade stopped before its switchover: the migration is
    /// dropped and the unit stays where and what it is.
    AbortUpgrade { unit: String },
    /// Every unit whose primary is `host` upgraded as by
    /// [`OperatorRequest::Upgrade`], one at a time (each moves to its
    /// backup host).
    UpgradeHost { host: String, binary: String },
    /// A host's upgrade stopped: no further unit starts, and the one under
    /// way is aborted as by [`OperatorRequest::AbortUpgrade`].
    AbortUpgradeHost { host: String },
}

/// The steps of a planned switchover: `switchover` (`holdfast nsr
/// switchover` on the old primary, which exits once the new one has claimed
/// the instance), then `takeover` and `address` as for a failure.
pub const SWITCHOVER_STEPS: [&str; 3] = ["switchover", "takeover", "address"];

/// Why `binary` cannot name an upgrade's holdfastd (`None`: it can): it
/// must be an absolute path, the same on every host.
pub fn binary_path_error(binary: &str) -> Option<String> {
    (!binary.starts_with('/'))
        .then(|| format!("binary {binary:?}: an absolute path is needed (the same on every host)"))
}

/// The steps of an upgrade (`holdfast ctl upgrade`): `standby` (a
/// preheated standby of the new binary on the backup host, replacing one
/// of another binary, done once it has followed the store), then a planned
/// switchover to it. The placement then names the new binary, and the old
/// primary's host, now the backup, gets a standby of it.
pub const UPGRADE_STEPS: [&str; 4] = ["standby", "switchover", "takeover", "address"];

/// The steps of a migration the controller carries out through the agents
/// (any other step name is bookkeeping that takes `step_time`):
/// `fence` (the old primary, on `from`: `FenceUnit`; a host whose agent's
/// lease has expired has fenced its units itself), `takeover` (`holdfastd
/// --takeover` on `to` at the leader's epoch) and `address` (the service
/// addresses added and announced on `to`).
pub const MIGRATION_STEPS: [&str; 3] = ["fence", "takeover", "address"];

/// The steps of a restart in place after an application failure (the
/// configured policy): the dead process fenced, and `holdfastd --takeover`
/// on the same host (the service addresses stay).
pub const RESTART_STEPS: [&str; 2] = ["fence", "takeover"];

/// Where a migration is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MigrationState {
    /// Asked for or under way.
    Pending,
    /// Every step done and the placement written.
    Done,
}

/// A migration of a unit from one host to another, in named steps carried
/// out in order, each exactly once.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Migration {
    /// [`SCHEMA`].
    pub schema: u32,
    /// Unique id (the step and command keys are under it).
    pub id: String,
    /// The unit moved.
    pub unit: String,
    /// Its host before.
    pub from: String,
    /// Its host after; the agent the commands go to.
    pub to: String,
    /// The steps, in order.
    pub steps: Vec<String>,
    /// Where it is.
    pub state: MigrationState,
    /// The token of the leader that finished it.
    #[serde(default)]
    pub finished_by: Option<Token>,
    /// An upgrade: the holdfastd binary the unit runs after it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub binary: Option<String>,
    /// Ended by an agent's refusal (the reason) before anything moved; the
    /// placement was left as it was.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refused: Option<String>,
}

/// A completed step, created once (compare-and-swap on its absence).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StepRecord {
    /// [`SCHEMA`].
    pub schema: u32,
    /// The step.
    pub step: String,
    /// The token of the leader that carried it out.
    pub token: Token,
    /// That leader's name.
    pub by: String,
    /// Carried out by commands every agent acknowledged (a fence step: the
    /// old primary's agent fenced the unit itself; not a host whose lease
    /// expired).
    #[serde(default)]
    pub agent_confirmed: bool,
}

/// A command to an agent. The agent carries it out only if
/// `holdfast_control_api::accept_token(token, highest_seen)` accepts it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Command {
    /// [`SCHEMA`].
    pub schema: u32,
    /// The fencing token of the leader that wrote it.
    pub token: Token,
    /// The unit.
    pub unit: String,
    /// What to do (the step's name).
    pub action: String,
    /// The migration it belongs to.
    pub migration: String,
}

/// What a leader does next with a migration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Next {
    /// Nothing to do.
    Idle,
    /// Carry out this step.
    Step(String),
    /// Every step is recorded: write the placement and mark it done.
    Finish,
}

/// The next thing to do given the migration (if any) and the steps already
/// recorded in etcd. Pure: a new leader calls it with what it read on
/// election and carries on where its predecessor stopped.
pub fn next_step(m: Option<&Migration>, done: &BTreeSet<String>) -> Next {
    let Some(m) = m.filter(|m| m.state == MigrationState::Pending) else {
        return Next::Idle;
    };
    match m.steps.iter().find(|s| !done.contains(*s)) {
        Some(s) => Next::Step(s.clone()),
        None => Next::Finish,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mig(state: MigrationState) -> Migration {
        Migration {
            schema: SCHEMA,
            id: "m1".into(),
            unit: "u1".into(),
            from: "a".into(),
            to: "b".into(),
            steps: vec!["fence".into(), "copy".into(), "takeover".into()],
            state,
            finished_by: None,
            binary: None,
            refused: None,
        }
    }

    #[test]
    fn steps_go_in_order_and_resume_after_the_last_recorded() {
        let m = mig(MigrationState::Pending);
        let mut done = BTreeSet::new();
        assert_eq!(next_step(Some(&m), &done), Next::Step("fence".into()));
        done.insert("fence".to_string());
        assert_eq!(next_step(Some(&m), &done), Next::Step("copy".into()));
        done.insert("copy".to_string());
        done.insert("takeover".to_string());
        assert_eq!(next_step(Some(&m), &done), Next::Finish);
    }

    #[test]
    fn nothing_to_do_without_a_pending_migration() {
        assert_eq!(next_step(None, &BTreeSet::new()), Next::Idle);
        let m = mig(MigrationState::Done);
        assert_eq!(next_step(Some(&m), &BTreeSet::new()), Next::Idle);
    }

    #[test]
    fn records_round_trip_with_their_schema() {
        let m = mig(MigrationState::Pending);
        let text = serde_json::to_string(&m).unwrap();
        assert!(text.contains("\"schema\":1"));
        assert!(text.contains("\"state\":\"pending\""));
        assert_eq!(serde_json::from_str::<Migration>(&text).unwrap(), m);
        let k = Keys::new("c1");
        assert_eq!(k.leader(), "/holdfast/c1/leader");
        assert_eq!(
            k.command("b", "m1", "copy", Token(12)),
            "/holdfast/c1/commands/b/m1/copy/12"
        );
        assert_eq!(k.step("m1", "copy"), "/holdfast/c1/steps/m1/copy");
    }
}
