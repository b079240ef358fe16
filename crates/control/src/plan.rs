//! The planner: from the desired state and a verdict or an operator
//! command to the steps to carry out and the new desired state.
//!
//! [`plan`] is pure. The controller writes [`Plan::state`] to etcd (one
//! compare-and-swap), then carries out [`Plan::steps`] in order, and after
//! each step of a migration writes [`complete`]'s result. The new desired
//! state already names every target: a unit that takes over has its new
//! primary, its epoch advanced by one and its new backup written at once,
//! and a [`Migration`] record counts the steps done towards it. So a new
//! leader calls [`resume`] on the state it reads and gets the remaining
//! steps of every migration, each exactly once; [`complete`] is idempotent
//! (a step completed twice, or a step of a superseded migration, changes
//! nothing).
//!
//! Never two primaries: a migration's steps start with [`Step::Fence`] of
//! the old primary at its epoch (and of every earlier primary of a
//! migration it superseded whose fence was not done); only then
//! [`Step::StartTakeover`] (or [`Step::RestartInPlace`]) at the next epoch.
//! For a host failure the host is marked failed first
//! ([`Step::MarkHostFailed`]); its units' fences are then carried out by
//! the epoch (the store refuses the old epoch) and by the agent fencing its
//! own units when it loses the controller.
//!
//! What each input does:
//! - application failure, and a hung process (its agent killed it): the
//!   same policy — [`AppPolicy::RestartInPlace`] restarts the unit on its
//!   host (a migration from the host to itself, at the next epoch);
//!   [`AppPolicy::Migrate`] takes over on the backup;
//! - container and container-network failures: take over on the backup
//!   (the fence kills the old container);
//! - host and host-network failures: the host is failed (never reused until
//!   [`Command::Reset`]), every unit on it takes over on its backup, and
//!   every unit whose backup was on it gets a new one;
//! - [`Command::Drain`]: the host drains (no new primary or backup), every
//!   unit on it switches over to its backup (planned), backups on it move;
//! - [`Command::Reset`]: a failed or draining host is healthy again; no
//!   unit moves (min-churn), new placements may use it;
//! - [`Command::Switchover`]: one unit switches over to its backup, and
//!   its old host becomes its backup if it is healthy.
//!
//! After every input the backups are re-placed with
//! [`crate::placement::place_partial`] (min-churn: only the backups that
//! must change do).
//!
//! # Known issues
//! - Steps outside a migration ([`Step::MarkHostFailed`],
//!   [`Step::DrainHost`], [`Step::ResetHost`], [`Step::PlaceBackup`] of a
//!   unit that does not move) have no progress record: their effect is
//!   already in the desired state, and the agents reconcile from it (a
//!   preheated standby is started where the state says).
//! - A unit whose backup is unusable and for which no host has room is left
//!   where it is and listed in [`Plan::unplaced`]; it is down until a host
//!   is added or reset.
//! - Units with a migration in flight are not re-planned on a unit-level
//!   verdict (the localizer does not watch them); a host-level failure of
//!   their new host supersedes the migration.

use serde::{Deserialize, Serialize};

use crate::localize::{AppPolicy, Finding};
use crate::model::{
    BackupMode, DesiredState, FailureKind, FenceTarget, HostId, HostState, Migration,
    MigrationReason, Millis, UnitId,
};
use crate::placement::{failure_loads, place_partial, PlacementError};

/// An operator command (`holdfast ctl …`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Command {
    /// Empty a host by planned switchovers.
    Drain(HostId),
    /// A failed or draining host may be used again.
    Reset(HostId),
    /// Switch one unit over to its backup.
    Switchover(UnitId),
}

/// What the planner reacts to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Input {
    /// A localization verdict (notes plan nothing).
    Verdict(Finding),
    /// An operator command.
    Command(Command),
}

/// What the planner needs besides the state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PlanContext {
    /// Now (recorded as the time a host failed).
    pub now: Millis,
    /// The etcd revision the state was read at (recorded in migrations).
    pub revision: u64,
    /// What to do with an application failure.
    pub app_policy: AppPolicy,
}

/// One thing for the controller to do.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Step {
    /// Isolate a failed host (cordon it; it runs nothing until reset).
    MarkHostFailed {
        /// The host.
        host: HostId,
        /// The verdict.
        kind: FailureKind,
    },
    /// Cordon a draining host.
    DrainHost {
        /// The host.
        host: HostId,
    },
    /// Uncordon a reset host.
    ResetHost {
        /// The host.
        host: HostId,
    },
    /// Stop every instance of the unit on `host` at `epoch` or below (kill
    /// or freeze its container; the store refuses the epoch once the
    /// takeover claims the next).
    Fence {
        /// The unit.
        unit: UnitId,
        /// Where the old primary runs.
        host: HostId,
        /// Its epoch.
        epoch: u64,
    },
    /// Start `holdfastd --takeover` for the unit on `host` at `epoch` (a
    /// cold backup's container is created first).
    StartTakeover {
        /// The unit.
        unit: UnitId,
        /// The new primary's host.
        host: HostId,
        /// The new epoch.
        epoch: u64,
        /// Whether a standby already runs there.
        mode: BackupMode,
    },
    /// Restart holdfastd in the unit's container on its host, resuming from
    /// the store at `epoch`.
    RestartInPlace {
        /// The unit.
        unit: UnitId,
        /// Its host.
        host: HostId,
        /// The new epoch.
        epoch: u64,
    },
    /// Move the unit's service address and announce it.
    MoveAddress {
        /// The unit.
        unit: UnitId,
        /// The old host.
        from: HostId,
        /// The new host.
        to: HostId,
    },
    /// Prepare the unit's backup on `host` (for a preheated one, start the
    /// standby; for a cold one, nothing but the record).
    PlaceBackup {
        /// The unit.
        unit: UnitId,
        /// The backup host.
        host: HostId,
        /// Cold or preheated.
        mode: BackupMode,
    },
}

/// Which migration step a [`PlannedStep`] is, for [`complete`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Progress {
    /// The unit.
    pub unit: UnitId,
    /// The migration's epoch (tells it apart from a superseding one).
    pub to_epoch: u64,
    /// The step's index in [`migration_steps`].
    pub index: u32,
}

/// A step, and its place in a migration if it belongs to one.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlannedStep {
    /// What to do.
    pub step: Step,
    /// What to pass to [`complete`] once done (`None`: nothing to record).
    pub progress: Option<Progress>,
}

/// The planner's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// The steps, in order.
    pub steps: Vec<PlannedStep>,
    /// The new desired state.
    pub state: DesiredState,
    /// Units left without a new primary or backup (no host fits).
    pub unplaced: Vec<UnitId>,
}

/// An input the planner refuses.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlanError {
    /// The input names a host the state does not have.
    #[error("unknown host {0}")]
    UnknownHost(HostId),
    /// The input names a unit the state does not have.
    #[error("unknown unit {0}")]
    UnknownUnit(UnitId),
    /// A switchover needs a usable target.
    #[error("unit {unit} has no usable host to switch over to")]
    NoTarget {
        /// The unit.
        unit: UnitId,
    },
    /// A switchover of a unit already moving.
    #[error("unit {0} has a migration in flight")]
    Migrating(UnitId),
    /// A failed host cannot be drained (reset it first).
    #[error("host {0} has failed; reset it first")]
    HostFailed(HostId),
    /// [`complete`] was given a step beyond the next one.
    #[error("unit {unit}: step {got} completed before step {expected}")]
    OutOfOrder {
        /// The unit.
        unit: UnitId,
        /// The next step to complete.
        expected: u32,
        /// The step given.
        got: u32,
    },
}

/// The steps of a migration, in order; [`Migration::step`] of them are
/// done.
pub fn migration_steps(m: &Migration) -> Vec<Step> {
    let mut steps = vec![Step::Fence {
        unit: m.unit.clone(),
        host: m.from.clone(),
        epoch: m.from_epoch,
    }];
    steps.extend(m.also_fence.iter().map(|f| Step::Fence {
        unit: m.unit.clone(),
        host: f.host.clone(),
        epoch: f.epoch,
    }));
    if m.from == m.to {
        steps.push(Step::RestartInPlace {
            unit: m.unit.clone(),
            host: m.to.clone(),
            epoch: m.to_epoch,
        });
    } else {
        steps.push(Step::StartTakeover {
            unit: m.unit.clone(),
            host: m.to.clone(),
            epoch: m.to_epoch,
            mode: m.backup_mode,
        });
        steps.push(Step::MoveAddress {
            unit: m.unit.clone(),
            from: m.from.clone(),
            to: m.to.clone(),
        });
    }
    if let Some(b) = &m.new_backup {
        steps.push(Step::PlaceBackup {
            unit: m.unit.clone(),
            host: b.clone(),
            mode: m.backup_mode,
        });
    }
    steps
}

fn remaining(m: &Migration) -> impl Iterator<Item = PlannedStep> + '_ {
    migration_steps(m)
        .into_iter()
        .enumerate()
        .skip(m.step as usize)
        .map(|(i, step)| PlannedStep {
            step,
            progress: Some(Progress {
                unit: m.unit.clone(),
                to_epoch: m.to_epoch,
                index: u32::try_from(i).unwrap_or(u32::MAX),
            }),
        })
}

/// The steps left of every migration in flight, each once: what a new
/// leader carries on with.
pub fn resume(state: &DesiredState) -> Vec<PlannedStep> {
    state.migrations.values().flat_map(remaining).collect()
}

/// Records a migration step as done. Idempotent: `Ok(false)` (nothing
/// changed) for a step already done, a finished migration, or one
/// superseded since. The last step removes the migration.
pub fn complete(state: &mut DesiredState, p: &Progress) -> Result<bool, PlanError> {
    let Some(m) = state.migrations.get_mut(&p.unit) else {
        return Ok(false);
    };
    if m.to_epoch != p.to_epoch || p.index < m.step {
        return Ok(false);
    }
    if p.index > m.step {
        return Err(PlanError::OutOfOrder {
            unit: p.unit.clone(),
            expected: m.step,
            got: p.index,
        });
    }
    m.step += 1;
    if m.step as usize >= migration_steps(m).len() {
        state.migrations.remove(&p.unit);
    }
    Ok(true)
}

/// Plans the reaction to `input` (see the module docs).
pub fn plan(state: &DesiredState, input: &Input, ctx: &PlanContext) -> Result<Plan, PlanError> {
    let mut p = Planner {
        s: state.clone(),
        steps: Vec::new(),
        moved: Vec::new(),
        unplaced: Vec::new(),
        ctx: *ctx,
    };
    match input {
        Input::Verdict(f) => p.verdict(f)?,
        Input::Command(c) => p.command(c)?,
    }
    Ok(p.finish(state))
}

struct Planner {
    s: DesiredState,
    steps: Vec<PlannedStep>,
    moved: Vec<UnitId>,
    unplaced: Vec<UnitId>,
    ctx: PlanContext,
}

impl Planner {
    fn host_step(&mut self, step: Step) {
        self.steps.push(PlannedStep {
            step,
            progress: None,
        });
    }

    fn known_host(&self, host: &HostId) -> Result<(), PlanError> {
        if self.s.hosts.contains_key(host) {
            Ok(())
        } else {
            Err(PlanError::UnknownHost(host.clone()))
        }
    }

    fn verdict(&mut self, f: &Finding) -> Result<(), PlanError> {
        let Some(kind) = f.failure_kind() else {
            return Ok(());
        };
        match f {
            Finding::Host { host } | Finding::HostNetwork { host } => {
                self.known_host(host)?;
                if self.s.is_failed(host) {
                    return Ok(());
                }
                if let Some(h) = self.s.hosts.get_mut(host) {
                    h.state = HostState::Failed {
                        kind,
                        since: self.ctx.now,
                    };
                }
                self.host_step(Step::MarkHostFailed {
                    host: host.clone(),
                    kind,
                });
                for unit in self.s.units_on(host) {
                    self.migrate(&unit, MigrationReason::Failure(kind), false);
                }
            }
            Finding::Application { unit, host }
            | Finding::Hung { unit, host }
            | Finding::Container { unit, host }
            | Finding::ContainerNetwork { unit, host } => {
                let u = self
                    .s
                    .units
                    .get(unit)
                    .ok_or_else(|| PlanError::UnknownUnit(unit.clone()))?;
                let stale = &u.primary != host
                    || self.s.is_failed(host)
                    || self.s.migrations.contains_key(unit);
                if stale {
                    return Ok(());
                }
                let in_place = matches!(kind, FailureKind::Application | FailureKind::Hung)
                    && self.ctx.app_policy == AppPolicy::RestartInPlace;
                self.migrate(unit, MigrationReason::Failure(kind), in_place);
            }
            _ => {}
        }
        Ok(())
    }

    fn command(&mut self, c: &Command) -> Result<(), PlanError> {
        match c {
            Command::Drain(host) => {
                self.known_host(host)?;
                if self.s.is_failed(host) {
                    return Err(PlanError::HostFailed(host.clone()));
                }
                if let Some(h) = self.s.hosts.get_mut(host) {
                    h.state = HostState::Draining;
                }
                self.host_step(Step::DrainHost { host: host.clone() });
                for unit in self.s.units_on(host) {
                    if !self.s.migrations.contains_key(&unit) {
                        self.migrate(&unit, MigrationReason::Drain, false);
                    }
                }
            }
            Command::Reset(host) => {
                self.known_host(host)?;
                let h = self.s.hosts.get_mut(host);
                if let Some(h) = h.filter(|h| h.state != HostState::Healthy) {
                    h.state = HostState::Healthy;
                    self.host_step(Step::ResetHost { host: host.clone() });
                }
            }
            Command::Switchover(unit) => {
                let u = self
                    .s
                    .units
                    .get(unit)
                    .ok_or_else(|| PlanError::UnknownUnit(unit.clone()))?;
                if self.s.migrations.contains_key(unit) {
                    return Err(PlanError::Migrating(unit.clone()));
                }
                let old = u.primary.clone();
                if !self.migrate(unit, MigrationReason::Switchover, false) {
                    return Err(PlanError::NoTarget { unit: unit.clone() });
                }
                if self.s.is_usable(&old) {
                    if let Some(u) = self.s.units.get_mut(unit) {
                        u.backup = Some(old);
                    }
                }
            }
        }
        Ok(())
    }

    /// The host to take over on: the backup if usable, else the usable host
    /// with the most room left.
    fn target(&self, unit: &UnitId) -> Option<HostId> {
        let u = self.s.units.get(unit)?;
        if let Some(b) = u
            .backup
            .as_ref()
            .filter(|b| **b != u.primary && self.s.is_usable(b))
        {
            return Some(b.clone());
        }
        failure_loads(&self.s)
            .into_iter()
            .filter(|l| l.host != u.primary && self.s.is_usable(&l.host))
            .filter(|l| l.capacity.saturating_sub(l.load) >= u.weight)
            .max_by(|a, b| {
                let room = |l: &crate::placement::HostLoad| l.capacity - l.load;
                room(a).cmp(&room(b)).then_with(|| b.host.cmp(&a.host))
            })
            .map(|l| l.host)
    }

    /// Starts a migration of `unit` (to itself when `in_place`); `false`
    /// when no host can take it.
    fn migrate(&mut self, unit: &UnitId, reason: MigrationReason, in_place: bool) -> bool {
        let Some(u) = self.s.units.get(unit) else {
            return false;
        };
        let from = u.primary.clone();
        let to = if in_place {
            Some(from.clone())
        } else {
            self.target(unit)
        };
        let Some(to) = to else {
            self.unplaced.push(unit.clone());
            return false;
        };
        let also_fence = match self.s.migrations.remove(unit) {
            Some(old) => {
                let mut targets = vec![FenceTarget {
                    host: old.from.clone(),
                    epoch: old.from_epoch,
                }];
                targets.extend(old.also_fence.iter().cloned());
                targets.into_iter().skip(old.step as usize).collect()
            }
            None => Vec::new(),
        };
        let Some(u) = self.s.units.get_mut(unit) else {
            return false;
        };
        let from_epoch = u.epoch;
        u.epoch += 1;
        if !in_place {
            u.primary = to.clone();
            u.backup = None;
        }
        let m = Migration {
            unit: unit.clone(),
            from,
            to,
            reason,
            started_at_revision: self.ctx.revision,
            step: 0,
            from_epoch,
            to_epoch: u.epoch,
            also_fence,
            new_backup: None,
            backup_mode: u.backup_mode,
        };
        self.s.migrations.insert(unit.clone(), m);
        self.moved.push(unit.clone());
        true
    }

    fn finish(mut self, before: &DesiredState) -> Plan {
        let (placement, errors) = place_partial(&self.s);
        placement.apply(&mut self.s);
        for e in errors {
            if let PlacementError::NoHostFits { unit, .. } = e {
                if let Some(u) = self.s.units.get_mut(&unit) {
                    u.backup = None;
                }
                self.unplaced.push(unit);
            }
        }
        for unit in &self.moved {
            let backup = self.s.units.get(unit).and_then(|u| u.backup.clone());
            let was = before.units.get(unit).and_then(|u| u.backup.clone());
            if let Some(m) = self.s.migrations.get_mut(unit) {
                let unchanged = m.from == m.to && backup == was;
                m.new_backup = if unchanged { None } else { backup };
            }
        }
        let mut steps = std::mem::take(&mut self.steps);
        for unit in &self.moved {
            if let Some(m) = self.s.migrations.get(unit) {
                steps.extend(remaining(m));
            }
        }
        for (name, u) in &self.s.units {
            let was = before.units.get(name).and_then(|u| u.backup.as_ref());
            if self.moved.contains(name) || u.backup.as_ref() == was {
                continue;
            }
            if let Some(b) = &u.backup {
                steps.push(PlannedStep {
                    step: Step::PlaceBackup {
                        unit: name.clone(),
                        host: b.clone(),
                        mode: u.backup_mode,
                    },
                    progress: None,
                });
            }
        }
        self.unplaced.sort();
        self.unplaced.dedup();
        Plan {
            steps,
            state: self.s,
            unplaced: self.unplaced,
        }
    }
}

#[cfg(test)]
#[path = "plan_tests.rs"]
mod tests;
