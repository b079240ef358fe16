//! The leader's migrations: started one per unit at a time
//! ([`start_migration`]), driven all at once ([`drive`]).
//!
//! Each unit's migration lives under `migrations/<unit>`, so migrations of
//! different units (the units of a failed host, a drain) run side by side,
//! while a unit never has two. On every pass [`drive`] reads every
//! migration in flight and what each has recorded ([`next_step`]), reads
//! what each next step needs from etcd one after the other, sends the
//! agents' commands of all of them at once, and then commits each step
//! that was done with its own fenced transaction (the step record, created
//! once, and the command record). A finished migration writes the unit's
//! new placement; finishes are written one after the other, so each
//! placement sees the ones before it.
//!
//! # Known issues
//! - A migration written under the earlier layout (`migration`, one at a
//!   time) is carried on and finished where it is, but a replica of an
//!   older build does not see those under `migrations/`: upgrade every
//!   replica before a failure needs them.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use holdfast_control_api::v1::{command, FenceUnit, MoveAddress, StartUnit, Switchover, Takeover};

use super::{lock, metrics, set_phase, unix_ms, Config, SharedRef, TICK};
use crate::fence::Token;
use crate::hub::Hub;
use crate::metrics::{Reason, ReasonLabel};
use crate::state::{
    next_step, Command, Migration, MigrationState, Next, StepRecord, UnitRecord, MIGRATION_STEPS,
    SCHEMA, UPGRADE_STEPS,
};
use crate::store::{to_json, Outcome, Store, StoreError};

/// A migration to start.
pub(super) struct Plan<'a> {
    pub unit: &'a str,
    /// The host it must be leaving (`None`: wherever its primary is).
    pub from: Option<&'a str>,
    /// Where it goes (`None`: its backup host).
    pub to: Option<&'a str>,
    pub why: &'a str,
    pub steps: &'a [&'a str],
    /// An operator request deleted in the same transaction.
    pub done_request: Option<String>,
    /// What started it (metrics).
    pub reason: Reason,
    /// An upgrade: the binary the unit runs after it.
    pub binary: Option<&'a str>,
}

/// Whether `unit` has a migration in flight.
pub(super) async fn migrating(store: &mut Store, unit: &str) -> Result<bool, StoreError> {
    Ok(store
        .migrations_in_flight()
        .await?
        .iter()
        .any(|(_, m)| m.unit == unit))
}

/// Starts a migration of the unit to its backup unless the unit has one
/// under way (`None`: nothing written).
pub(super) async fn start_migration(
    shared: &SharedRef,
    store: &mut Store,
    token: Token,
    plan: &Plan<'_>,
    since: Instant,
) -> Result<Option<Outcome>, StoreError> {
    let keys = store.keys().clone();
    let Some(u) = store.get::<UnitRecord>(&keys.unit(plan.unit)).await? else {
        return Ok(None);
    };
    if plan.from.is_some_and(|f| f != u.primary) {
        return Ok(None);
    }
    let from = u.primary.clone();
    let to = match plan.to {
        Some(to) => to.to_string(),
        None => match u.backup.clone().filter(|b| *b != from) {
            Some(b) => b,
            None => return Ok(None),
        },
    };
    if migrating(store, plan.unit).await? {
        return Ok(None);
    }
    if store
        .get::<serde_json::Value>(&keys.failed_host(&to))
        .await?
        .is_some()
    {
        tracing::warn!(unit = plan.unit, %to, "the backup host has failed (never reused until reset): no migration");
        return Ok(None);
    }
    let id = format!("{}-{}-{}", plan.unit, token.0, unix_ms());
    let m = Migration {
        schema: SCHEMA,
        id,
        unit: plan.unit.to_string(),
        from: from.clone(),
        to: to.clone(),
        steps: plan.steps.iter().map(|s| (*s).to_string()).collect(),
        state: MigrationState::Pending,
        finished_by: None,
        binary: plan.binary.map(str::to_string),
        refused: None,
    };
    let deletes: Vec<String> = plan.done_request.iter().cloned().collect();
    let o = store
        .fenced_write(
            token,
            &[],
            &[(keys.migration_of(plan.unit), to_json(&m))],
            &deletes,
        )
        .await?;
    if let Outcome::Committed(rev) = o {
        metrics(shared)
            .migrations_started
            .get_or_create(&ReasonLabel {
                reason: plan.reason.clone(),
            })
            .inc();
        let after = since.elapsed().as_millis() as u64;
        tracing::warn!(unit = plan.unit, %from, %to, why = plan.why, detected_after_ms = after, rev, "migrating");
        lock(shared).status.detected.push((
            plan.unit.to_string(),
            from,
            to,
            plan.why.to_string(),
            after,
        ));
    }
    Ok(Some(o))
}

/// Starts the preheated standbys that should run and do not: a unit whose
/// placement asks for one (`preheated`) gets it on its backup host, once
/// that host's agent is attached and the unit has no migration in flight.
/// A takeover then goes through it (the agent sends `holdfast nsr
/// takeover`), and after the migration the new backup host gets one.
pub(super) async fn standbys(
    store: &mut Store,
    cfg: &Config,
    token: Token,
    hub: &Hub,
) -> Result<(), StoreError> {
    let keys = store.keys().clone();
    let moving: BTreeSet<String> = store
        .migrations_in_flight()
        .await?
        .into_iter()
        .map(|(_, m)| m.unit)
        .collect();
    for u in store.units().await? {
        let Some(backup) = u.backup.as_ref().filter(|_| u.preheated) else {
            continue;
        };
        if moving.contains(&u.unit)
            || !hub.attached(backup)
            || hub.runs(backup, &u.unit).is_some()
            || store
                .get::<serde_json::Value>(&keys.failed_host(backup))
                .await?
                .is_some()
        {
            continue;
        }
        let body = command::Body::StartUnit(StartUnit {
            unit: u.unit.clone(),
            config: u.config.clone(),
            standby: true,
            binary: u.binary.clone().unwrap_or_default(),
            ..Default::default()
        });
        match hub.command(backup, token, body, cfg.command_timeout).await {
            Ok(()) => tracing::info!(unit = %u.unit, host = %backup, "preheated standby started"),
            Err(e) => {
                tracing::warn!(unit = %u.unit, host = %backup, error = %e, "preheated standby not started")
            }
        }
    }
    Ok(())
}

/// What carrying out one step takes, read from etcd beforehand.
enum Work {
    /// Nothing: already true (a host whose lease expired fenced its units).
    Nothing,
    /// Bookkeeping that takes the configured step time.
    Wait(Duration),
    /// Cannot be done yet.
    NotYet(String),
    /// Commands to agents, in order: `(host, command, must succeed)`.
    Commands(Vec<(String, command::Body, bool)>),
}

/// Carries `work` out (what runs at once for every migration).
async fn perform(hub: Hub, token: Token, work: Work, t: Duration) -> Result<(), String> {
    match work {
        Work::Nothing => Ok(()),
        Work::Wait(d) => {
            tokio::time::sleep(d).await;
            Ok(())
        }
        Work::NotYet(why) => Err(why),
        Work::Commands(cmds) => {
            for (host, body, required) in cmds {
                match hub.command(&host, token, body, t).await {
                    Err(e) if required => return Err(e),
                    Err(e) => tracing::info!(%host, error = %e, "optional command not done"),
                    Ok(()) => {}
                }
            }
            Ok(())
        }
    }
}

/// What step `step` of `m` takes (see [`MIGRATION_STEPS`]).
async fn work_for(
    store: &mut Store,
    cfg: &Config,
    hub: &Hub,
    token: Token,
    m: &Migration,
    step: &str,
) -> Result<Work, StoreError> {
    if !MIGRATION_STEPS.contains(&step) && !UPGRADE_STEPS.contains(&step) {
        return Ok(Work::Wait(cfg.step_time));
    }
    let keys = store.keys().clone();
    let Some(u) = store.get::<UnitRecord>(&keys.unit(&m.unit)).await? else {
        return Ok(Work::NotYet(format!("no placement for unit {}", m.unit)));
    };
    let one = |host: &str, body| Work::Commands(vec![(host.to_string(), body, true)]);
    let address = |add| {
        command::Body::MoveAddress(MoveAddress {
            unit: m.unit.clone(),
            addresses: u.addresses.clone(),
            add,
            interface: u.interface.clone(),
        })
    };
    // The unit changes hosts: its service addresses move.
    let moves = m.steps.iter().any(|s| s == "address");
    // What the unit runs after this migration.
    let binary = m
        .binary
        .clone()
        .or_else(|| u.binary.clone())
        .unwrap_or_default();
    Ok(match step {
        // An upgrade: a standby of the new binary on the new host, caught
        // up with the store (the agent answers with its progress until
        // then, and this step is asked again).
        "standby" => one(
            &m.to,
            command::Body::StartUnit(StartUnit {
                unit: m.unit.clone(),
                config: u.config.clone(),
                standby: true,
                binary,
                caught_up: true,
                running_binary: u.binary.clone().unwrap_or_default(),
            }),
        ),
        "fence" => {
            if store
                .get::<serde_json::Value>(&keys.agent(&m.from))
                .await?
                .is_none()
            {
                // Its lease expired: the agent fenced its units before that.
                Work::Nothing
            } else if hub.attached(&m.from) {
                // Fenced, the old host gives up the service addresses at
                // once (when it can), so that the new one may add them as
                // soon as its holdfastd is ready.
                let mut cmds = vec![(
                    m.from.clone(),
                    command::Body::FenceUnit(FenceUnit {
                        unit: m.unit.clone(),
                    }),
                    true,
                )];
                if moves {
                    cmds.push((m.from.clone(), address(false), false));
                }
                Work::Commands(cmds)
            } else {
                Work::NotYet(format!(
                    "agent {} holds its lease but is not reachable: waiting for it to answer or for its lease to expire",
                    m.from
                ))
            }
        }
        "switchover" => one(
            &m.from,
            command::Body::Switchover(Switchover {
                unit: m.unit.clone(),
            }),
        ),
        "takeover" => {
            let mut primary_fenced = false;
            for before in ["fence", "switchover"] {
                let rec = store.get::<StepRecord>(&keys.step(&m.id, before)).await?;
                primary_fenced |= rec.is_some_and(|r| r.agent_confirmed);
            }
            one(
                &m.to,
                command::Body::Takeover(Takeover {
                    unit: m.unit.clone(),
                    config: u.config.clone(),
                    epoch: u64::try_from(token.0).unwrap_or(0),
                    primary_fenced,
                    // Added by the new host's agent once holdfastd is
                    // ready for them; the address step confirms.
                    addresses: if moves {
                        u.addresses.clone()
                    } else {
                        Vec::new()
                    },
                    interface: u.interface.clone(),
                    binary,
                }),
            )
        }
        _ => {
            // The old host gives up the service addresses first, when it can
            // be reached (an address already gone is fine).
            let mut cmds = Vec::new();
            if hub.attached(&m.from) {
                cmds.push((m.from.clone(), address(false), false));
            }
            cmds.push((m.to.clone(), address(true), true));
            Work::Commands(cmds)
        }
    })
}

/// One pass over every migration in flight: the next step of each carried
/// out at once and committed, and the finished ones written (`None`:
/// nothing to do, nothing written).
pub(super) async fn drive(
    shared: &SharedRef,
    store: &mut Store,
    cfg: &Config,
    token: Token,
    hub: &Hub,
) -> Result<Option<Outcome>, StoreError> {
    let keys = store.keys().clone();
    let mut steps = Vec::new();
    let mut finished = Vec::new();
    for (key, m) in store.migrations_in_flight().await? {
        let done: BTreeSet<String> = store.list(&keys.steps(&m.id)).await?.into_iter().collect();
        match next_step(Some(&m), &done) {
            Next::Step(step) => steps.push((key, m, step)),
            Next::Finish => finished.push((key, m)),
            Next::Idle => {}
        }
    }
    if steps.is_empty() && finished.is_empty() {
        set_phase(shared, "idle");
        tokio::time::sleep(TICK).await;
        return Ok(None);
    }
    if steps.is_empty() {
        set_phase(shared, "finishing");
    } else {
        let names: Vec<&str> = steps.iter().map(|(_, _, s)| s.as_str()).collect();
        set_phase(shared, &format!("step {}", names.join(", ")));
    }
    let mut running = Vec::new();
    for (key, m, step) in steps {
        tracing::info!(migration = %m.id, %step, %token, "carrying out step");
        let work = work_for(store, cfg, hub, token, &m, &step).await?;
        let confirmed = matches!(work, Work::Commands(_));
        let task = tokio::spawn(perform(hub.clone(), token, work, cfg.command_timeout));
        running.push((key, m, step, confirmed, task));
    }
    let mut last = None;
    let mut waiting = false;
    for (key, m, step, confirmed, task) in running {
        let done = task.await.unwrap_or_else(|e| Err(e.to_string()));
        if let Some(why) = done
            .as_ref()
            .err()
            .and_then(|e| e.strip_prefix(holdfast_control_api::REFUSED))
        {
            let o = refuse(store, token, &key, &m, &step, why).await?;
            if matches!(o, Outcome::Fenced) {
                return Ok(Some(o));
            }
            last = Some(o);
            continue;
        }
        if let Err(e) = done {
            tracing::warn!(migration = %m.id, %step, error = %e, "step not done yet; retrying");
            waiting = true;
            continue;
        }
        let o = commit_step(shared, store, cfg, token, &m, &step, confirmed).await?;
        if matches!(o, Outcome::Fenced) {
            return Ok(Some(o));
        }
        last = Some(o);
    }
    for (key, m) in finished {
        let o = finish(shared, store, token, &key, &m).await?;
        if matches!(o, Outcome::Fenced) {
            return Ok(Some(o));
        }
        last = Some(o);
    }
    if last.is_none() && waiting {
        tokio::time::sleep(TICK).await;
    }
    Ok(last)
}

/// Records a step done (created once) with the agent's command record.
async fn commit_step(
    shared: &SharedRef,
    store: &mut Store,
    cfg: &Config,
    token: Token,
    m: &Migration,
    step: &str,
    agent_confirmed: bool,
) -> Result<Outcome, StoreError> {
    let keys = store.keys().clone();
    let step_key = keys.step(&m.id, step);
    let rec = StepRecord {
        schema: SCHEMA,
        step: step.to_string(),
        token,
        by: cfg.name.clone(),
        agent_confirmed,
    };
    let cmd = Command {
        schema: SCHEMA,
        token,
        unit: m.unit.clone(),
        action: step.to_string(),
        migration: m.id.clone(),
    };
    let puts = [
        (step_key.clone(), to_json(&rec)),
        (keys.command(&m.to, &m.id, step, token), to_json(&cmd)),
    ];
    let o = store.fenced_put(token, &[step_key], &puts).await?;
    match o {
        Outcome::Committed(rev) => {
            lock(shared).status.steps_committed += 1;
            metrics(shared).steps_committed.inc();
            tracing::info!(migration = %m.id, %step, %token, rev, "step committed");
        }
        Outcome::Precondition => {
            tracing::info!(migration = %m.id, %step, "step already recorded");
        }
        Outcome::Fenced => {}
    }
    Ok(o)
}

/// A step an agent refused (it can never be done as asked): the migration
/// (under `key`) ends there, marked done with the reason, and the
/// placement stays as it is. Only an upgrade's `standby` step, before
/// anything moved, is refused.
async fn refuse(
    store: &mut Store,
    token: Token,
    key: &str,
    m: &Migration,
    step: &str,
    why: &str,
) -> Result<Outcome, StoreError> {
    let mut fin = m.clone();
    fin.state = MigrationState::Done;
    fin.finished_by = Some(token);
    fin.refused = Some(why.to_string());
    let o = store
        .fenced_put(token, &[], &[(key.to_string(), to_json(&fin))])
        .await?;
    if let Outcome::Committed(rev) = o {
        tracing::warn!(migration = %m.id, unit = %m.unit, %step, why, rev, "migration refused before anything moved: the unit stays as it is");
    }
    Ok(o)
}

/// Every step is recorded: the unit's new placement, and the migration
/// (under `key`) marked done.
async fn finish(
    shared: &SharedRef,
    store: &mut Store,
    token: Token,
    key: &str,
    m: &Migration,
) -> Result<Outcome, StoreError> {
    let keys = store.keys().clone();
    let before: Option<UnitRecord> = store.get(&keys.unit(&m.unit)).await?;
    let desired = crate::placement::read_state(store).await?;
    let backup = if m.to == m.from {
        // A restart in place: the backup stays.
        before.as_ref().and_then(|u| u.backup.clone())
    } else {
        crate::placement::backup_after(&desired, &m.unit, &m.to, &m.from)
    };
    let unit = UnitRecord {
        schema: SCHEMA,
        unit: m.unit.clone(),
        primary: m.to.clone(),
        backup,
        epoch: token,
        config: before
            .as_ref()
            .map(|u| u.config.clone())
            .unwrap_or_default(),
        addresses: before
            .as_ref()
            .map(|u| u.addresses.clone())
            .unwrap_or_default(),
        interface: before
            .as_ref()
            .map(|u| u.interface.clone())
            .unwrap_or_default(),
        preheated: before.as_ref().is_some_and(|u| u.preheated),
        binary: m
            .binary
            .clone()
            .or_else(|| before.as_ref().and_then(|u| u.binary.clone())),
        app_failure: before.and_then(|u| u.app_failure),
    };
    let mut fin = m.clone();
    fin.state = MigrationState::Done;
    fin.finished_by = Some(token);
    let puts = [
        (keys.unit(&m.unit), to_json(&unit)),
        (key.to_string(), to_json(&fin)),
    ];
    let o = store.fenced_put(token, &[], &puts).await?;
    if let Outcome::Committed(rev) = o {
        metrics(shared).migrations_finished.inc();
        tracing::info!(migration = %m.id, %token, rev, "migration done");
    }
    Ok(o)
}
