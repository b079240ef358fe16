//! The leader's migrations: started one per unit at a time
//! ([`start_migration`]) or a failed host's all at once
//! ([`start_migrations`]), driven all at once ([`drive`]).
//!
//! Each unit's migration lives under `migrations/<unit>`, so migrations of
//! different units (the units of a failed host, a drain) run side by side,
//! while a unit never has two. On every pass [`drive`] reads every
//! migration in flight and what each has recorded ([`next_step`]), reads
//! what the next steps need from etcd at once (the steps of every
//! migration in one transaction of range reads per hundred, the
//! placements from the store's incremental cache, the agents of the hosts
//! being fenced), sends the agents' commands of all of them at once, and
//! then commits the steps that were done, forty per fenced transaction
//! (each step record created once, with its command record). The steps
//! after the ones recorded follow at once, back to back, for up to
//! [`BACK_TO_BACK`] (what was recorded is known without reading it back).
//! The migrations that finished write their units' new placements, decided
//! in one TRIPOD placement in which each sees the others, fifty per
//! transaction.
//!
//! Batched because a 20-host rack's failure at 100 hosts (205 units,
//! `holdfast-ctl-sim`) had its last takeover commanded 3.6–10.4 s after
//! the verdicts when each migration was started, read and committed with
//! its own round trips (about fifteen per unit); and each finish read the
//! whole placement state and placed every unit again.
//!
//! # Known issues
//! - A migration written under the earlier layout (`migration`, one at a
//!   time) is carried on and finished where it is, but a replica of an
//!   older build does not see those under `migrations/`: upgrade every
//!   replica before a failure needs them.

use std::collections::{BTreeMap, BTreeSet};
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

/// Steps recorded per transaction: two puts and one compare each, below
/// etcd's 128 operations.
const STEPS_PER_TXN: usize = 40;

/// Migrations started per transaction (a put each, and a delete with an
/// operator's request).
const MIGRATIONS_PER_TXN: usize = 50;

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

/// Every unit's placement record, by unit name.
pub(super) async fn units_by_name(
    store: &mut Store,
) -> Result<BTreeMap<String, UnitRecord>, StoreError> {
    Ok(store
        .units()
        .await?
        .into_iter()
        .map(|u| (u.unit.clone(), u))
        .collect())
}

/// The units with a migration in flight.
async fn moving_units(store: &mut Store) -> Result<BTreeSet<String>, StoreError> {
    Ok(store
        .migrations_in_flight()
        .await?
        .into_iter()
        .map(|(_, m)| m.unit)
        .collect())
}

/// The hosts recorded failed (one read).
async fn failed_hosts(store: &mut Store) -> Result<BTreeSet<String>, StoreError> {
    let prefix = store.keys().failed_hosts();
    Ok(store.list(&prefix).await?.into_iter().collect())
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
    start_migrations(shared, store, token, &[(plan, since)]).await
}

/// [`start_migration`] for many units at once (the failed hosts'), each
/// with when its failure began: what they need read once (the
/// placements, the migrations in flight, the failed hosts among their
/// destinations), and [`MIGRATIONS_PER_TXN`] migrations written per fenced
/// transaction. The last outcome, `Fenced` at once, `None` when nothing
/// was written.
pub(super) async fn start_migrations(
    shared: &SharedRef,
    store: &mut Store,
    token: Token,
    plans: &[(&Plan<'_>, Instant)],
) -> Result<Option<Outcome>, StoreError> {
    Ok(start_migrations_of(shared, store, token, plans)
        .await?
        .outcome)
}

/// What [`start_migrations_of`] did.
pub(super) struct Started {
    /// The last outcome, as [`start_migrations`] gives it.
    pub outcome: Option<Outcome>,
    /// The units that had a migration in flight before.
    pub moving: BTreeSet<String>,
    /// The units whose migration it wrote.
    pub started: BTreeSet<String>,
}

/// [`start_migrations`], saying which units were moving already and which
/// it started (a verdict waits for the first and is done with the second).
pub(super) async fn start_migrations_of(
    shared: &SharedRef,
    store: &mut Store,
    token: Token,
    plans: &[(&Plan<'_>, Instant)],
) -> Result<Started, StoreError> {
    let keys = store.keys().clone();
    let units: BTreeMap<String, UnitRecord> = units_by_name(store).await?;
    let moving = moving_units(store).await?;
    // One read of the failed hosts (a read per destination was most of a
    // rack's 1.6 s between its verdicts and its migrations).
    let failed = failed_hosts(store).await?;
    let mut todo: Vec<(&Plan<'_>, Instant, Migration)> = Vec::new();
    for &(plan, since) in plans {
        let Some(u) = units.get(plan.unit) else {
            continue;
        };
        if plan.from.is_some_and(|f| f != u.primary) || moving.contains(plan.unit) {
            continue;
        }
        if todo.iter().any(|(p, _, _)| p.unit == plan.unit) {
            continue;
        }
        let from = u.primary.clone();
        let to = match plan.to {
            Some(to) => to.to_string(),
            None => match u.backup.clone().filter(|b| *b != from) {
                Some(b) => b,
                None => continue,
            },
        };
        if failed.contains(&to) {
            tracing::warn!(unit = plan.unit, %to, "the backup host has failed (never reused until reset): no migration");
            continue;
        }
        let m = Migration {
            schema: SCHEMA,
            id: format!("{}-{}-{}", plan.unit, token.0, unix_ms()),
            unit: plan.unit.to_string(),
            from,
            to,
            steps: plan.steps.iter().map(|s| (*s).to_string()).collect(),
            state: MigrationState::Pending,
            finished_by: None,
            binary: plan.binary.map(str::to_string),
            refused: None,
        };
        todo.push((plan, since, m));
    }
    let mut last = None;
    let mut started = BTreeSet::new();
    for chunk in todo.chunks(MIGRATIONS_PER_TXN) {
        let puts: Vec<(String, String)> = chunk
            .iter()
            .map(|(p, _, m)| (keys.migration_of(p.unit), to_json(m)))
            .collect();
        let deletes: Vec<String> = chunk
            .iter()
            .filter_map(|(p, _, _)| p.done_request.clone())
            .collect();
        let o = store.fenced_write(token, &[], &puts, &deletes).await?;
        if let Outcome::Committed(rev) = o {
            for (plan, since, m) in chunk {
                started.insert(plan.unit.to_string());
                let after = since.elapsed().as_millis() as u64;
                metrics(shared)
                    .migrations_started
                    .get_or_create(&ReasonLabel {
                        reason: plan.reason.clone(),
                    })
                    .inc();
                tracing::warn!(unit = plan.unit, from = %m.from, to = %m.to, why = plan.why, detected_after_ms = after, rev, "migrating");
                lock(shared).status.detected.push((
                    plan.unit.to_string(),
                    m.from.clone(),
                    m.to.clone(),
                    plan.why.to_string(),
                    after,
                ));
            }
        }
        last = Some(o);
        if matches!(o, Outcome::Fenced) {
            break;
        }
    }
    Ok(Started {
        outcome: last,
        moving,
        started,
    })
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
    let moving = moving_units(store).await?;
    let failed = failed_hosts(store).await?;
    for u in store.units().await? {
        let Some(backup) = u.backup.as_ref().filter(|_| u.preheated) else {
            continue;
        };
        if moving.contains(&u.unit)
            || !hub.attached(backup)
            || hub.runs(backup, &u.unit).is_some()
            || failed.contains(backup)
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

/// What a pass's steps need from etcd, read at once ([`Ready::read`]).
struct Ready {
    units: BTreeMap<String, UnitRecord>,
    /// Hosts whose agent holds its lease (`agents/<host>` exists), among
    /// the hosts the steps fence.
    agents: BTreeSet<String>,
}

impl Ready {
    async fn read(
        store: &mut Store,
        steps: &[(String, Migration, String)],
    ) -> Result<Ready, StoreError> {
        let keys = store.keys().clone();
        let units = units_by_name(store).await?;
        let fenced: BTreeSet<&str> = steps
            .iter()
            .filter(|(_, _, step)| step == "fence")
            .map(|(_, m, _)| m.from.as_str())
            .collect();
        let requests: Vec<(String, bool)> = fenced.iter().map(|h| (keys.agent(h), false)).collect();
        let found = store.read_many(&requests).await?;
        let agents = fenced
            .into_iter()
            .zip(found)
            .filter(|(_, kvs)| !kvs.is_empty())
            .map(|(h, _)| h.to_string())
            .collect();
        Ok(Ready { units, agents })
    }
}

/// What step `step` of `m` takes (see [`MIGRATION_STEPS`]); `recorded`:
/// the steps it has done, with their records.
fn work_for(
    ready: &Ready,
    cfg: &Config,
    hub: &Hub,
    token: Token,
    m: &Migration,
    step: &str,
    recorded: &BTreeMap<String, Option<StepRecord>>,
) -> Work {
    if !MIGRATION_STEPS.contains(&step) && !UPGRADE_STEPS.contains(&step) {
        return Work::Wait(cfg.step_time);
    }
    let Some(u) = ready.units.get(&m.unit) else {
        return Work::NotYet(format!("no placement for unit {}", m.unit));
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
    match step {
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
            if !ready.agents.contains(&m.from) {
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
            let primary_fenced = ["fence", "switchover"].iter().any(|before| {
                recorded
                    .get(*before)
                    .is_some_and(|r| r.as_ref().is_some_and(|r| r.agent_confirmed))
            });
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
    }
}

/// One pass over every migration in flight: the next step of each carried
/// out at once and committed, then the step after it, back to back, for
/// as long as steps are recorded (at most [`BACK_TO_BACK`]); then the
/// finished ones written (`None`: nothing to do, nothing written).
///
/// Back to back because each step waited for the next pass of the work
/// loop, which takes 0.6–1.5 s at 1,000 hosts (`holdfast-ctl-sim`): a
/// failed host's takeovers were commanded 2.8–4.2 s after its verdict,
/// two passes after its fences.
pub(super) async fn drive(
    shared: &SharedRef,
    store: &mut Store,
    cfg: &Config,
    token: Token,
    hub: &Hub,
) -> Result<Option<Outcome>, StoreError> {
    let keys = store.keys().clone();
    let flight = store.migrations_in_flight().await?;
    // Every migration's recorded steps in one round trip (per hundred).
    let requests: Vec<(String, bool)> = flight
        .iter()
        .map(|(_, m)| (keys.steps(&m.id), true))
        .collect();
    let recorded_all = store.read_many(&requests).await?;
    let mut steps = Vec::new();
    let mut recorded: BTreeMap<String, BTreeMap<String, Option<StepRecord>>> = BTreeMap::new();
    let mut finished = Vec::new();
    for ((key, m), kvs) in flight.into_iter().zip(recorded_all) {
        let done: BTreeMap<String, Option<StepRecord>> = kvs
            .into_iter()
            .map(|(step, v)| {
                let rec = serde_json::from_slice(&v).ok();
                (step, rec)
            })
            .collect();
        let names: BTreeSet<String> = done.keys().cloned().collect();
        match next_step(Some(&m), &names) {
            Next::Step(step) => {
                recorded.insert(m.id.clone(), done);
                steps.push((key, m, step));
            }
            Next::Finish => finished.push((key, m)),
            Next::Idle => {}
        }
    }
    if steps.is_empty() && finished.is_empty() {
        set_phase(shared, "idle");
        tokio::time::sleep(TICK).await;
        return Ok(None);
    }
    let began = Instant::now();
    let mut last = None;
    let mut waiting = false;
    while !steps.is_empty() {
        let names: BTreeSet<&str> = steps.iter().map(|(_, _, s)| s.as_str()).collect();
        let names: Vec<&str> = names.into_iter().collect();
        set_phase(
            shared,
            &format!("step {} ({} migrations)", names.join(", "), steps.len()),
        );
        let round = carry_out(shared, store, cfg, token, hub, steps, &recorded).await?;
        if let Some(o) = round.outcome {
            if matches!(o, Outcome::Fenced) {
                return Ok(Some(o));
            }
            last = Some(o);
        }
        waiting |= round.waiting;
        steps = advance(&mut recorded, round.recorded, &mut finished);
        if began.elapsed() >= BACK_TO_BACK {
            break;
        }
    }
    if !finished.is_empty() {
        set_phase(shared, "finishing");
    }
    if let Some(o) = finish_all(shared, store, token, &finished).await? {
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

/// The step after each one just recorded (`done`), at once: what was
/// recorded goes into `recorded` without being read back; a migration with
/// no step left goes to `finished`.
fn advance(
    recorded: &mut BTreeMap<String, BTreeMap<String, Option<StepRecord>>>,
    done: Vec<(String, Migration, String, Option<StepRecord>)>,
    finished: &mut Vec<(String, Migration)>,
) -> Vec<Due> {
    let mut steps = Vec::new();
    for (key, m, step, rec) in done {
        let names = recorded.entry(m.id.clone()).or_default();
        names.insert(step, rec);
        let names: BTreeSet<String> = names.keys().cloned().collect();
        match next_step(Some(&m), &names) {
            Next::Step(step) => steps.push((key, m, step)),
            Next::Finish => finished.push((key, m)),
            Next::Idle => {}
        }
    }
    steps
}

/// How long [`drive`] carries steps back to back before the work loop
/// takes the measurements again (a migration's steps after that wait for
/// its next pass).
const BACK_TO_BACK: Duration = Duration::from_secs(2);

/// A step to carry out: its migration's key, the migration, the step.
type Due = (String, Migration, String);

/// What one round of [`carry_out`] did.
struct Round {
    /// The last outcome of its writes (`Fenced` at once).
    outcome: Option<Outcome>,
    /// The steps now recorded, with the record when this leader wrote it
    /// (`None`: found recorded already).
    recorded: Vec<(String, Migration, String, Option<StepRecord>)>,
    /// A step could not be done yet.
    waiting: bool,
}

/// Carries out `steps` at once (a task each) and commits the ones done.
async fn carry_out(
    shared: &SharedRef,
    store: &mut Store,
    cfg: &Config,
    token: Token,
    hub: &Hub,
    steps: Vec<Due>,
    recorded: &BTreeMap<String, BTreeMap<String, Option<StepRecord>>>,
) -> Result<Round, StoreError> {
    let ready = Ready::read(store, &steps).await?;
    let none = BTreeMap::new();
    let mut running = Vec::new();
    for (key, m, step) in steps {
        tracing::info!(migration = %m.id, %step, %token, "carrying out step");
        let done = recorded.get(&m.id).unwrap_or(&none);
        let work = work_for(&ready, cfg, hub, token, &m, &step, done);
        let confirmed = matches!(work, Work::Commands(_));
        let task = tokio::spawn(perform(hub.clone(), token, work, cfg.command_timeout));
        running.push((key, m, step, confirmed, task));
    }
    let mut round = Round {
        outcome: None,
        recorded: Vec::new(),
        waiting: false,
    };
    let mut done_steps = Vec::new();
    for (key, m, step, confirmed, task) in running {
        let done = task.await.unwrap_or_else(|e| Err(e.to_string()));
        if let Some(why) = done
            .as_ref()
            .err()
            .and_then(|e| e.strip_prefix(holdfast_control_api::REFUSED))
        {
            let o = refuse(store, token, &key, &m, &step, why).await?;
            round.outcome = Some(o);
            if matches!(o, Outcome::Fenced) {
                return Ok(round);
            }
            continue;
        }
        if let Err(e) = done {
            tracing::warn!(migration = %m.id, %step, error = %e, "step not done yet; retrying");
            round.waiting = true;
            continue;
        }
        done_steps.push((key, m, step, confirmed));
    }
    commit_steps(shared, store, cfg, token, done_steps, &mut round).await?;
    Ok(round)
}

/// Steps done in this pass to record: [`STEPS_PER_TXN`] of them per
/// fenced transaction (each step created once); a transaction whose step
/// was recorded already is done again one step at a time. What is
/// recorded goes to `round`.
async fn commit_steps(
    shared: &SharedRef,
    store: &mut Store,
    cfg: &Config,
    token: Token,
    done: Vec<(String, Migration, String, bool)>,
    round: &mut Round,
) -> Result<(), StoreError> {
    let keys = store.keys().clone();
    let mut done = done.into_iter().peekable();
    while done.peek().is_some() {
        let chunk: Vec<_> = done.by_ref().take(STEPS_PER_TXN).collect();
        let mut absent = Vec::new();
        let mut puts = Vec::new();
        for (_, m, step, confirmed) in &chunk {
            let (step_key, recs) = step_records(&keys, cfg, token, m, step, *confirmed);
            absent.push(step_key);
            puts.extend(recs);
        }
        let o = store.fenced_put(token, &absent, &puts).await?;
        round.outcome = Some(o);
        match o {
            Outcome::Committed(rev) => {
                lock(shared).status.steps_committed += chunk.len() as u64;
                metrics(shared).steps_committed.inc_by(chunk.len() as u64);
                for (key, m, step, confirmed) in chunk {
                    tracing::info!(migration = %m.id, %step, %token, rev, "step committed");
                    let rec = step_record(cfg, token, &step, confirmed);
                    round.recorded.push((key, m, step, Some(rec)));
                }
            }
            Outcome::Fenced => return Ok(()),
            Outcome::Precondition => {
                for (key, m, step, confirmed) in chunk {
                    let o = commit_step(shared, store, cfg, token, &m, &step, confirmed).await?;
                    round.outcome = Some(o);
                    match o {
                        Outcome::Fenced => return Ok(()),
                        Outcome::Committed(_) => {
                            let rec = step_record(cfg, token, &step, confirmed);
                            round.recorded.push((key, m, step, Some(rec)));
                        }
                        Outcome::Precondition => round.recorded.push((key, m, step, None)),
                    }
                }
            }
        }
    }
    Ok(())
}

/// The record of `step`, carried out by this leader.
fn step_record(cfg: &Config, token: Token, step: &str, agent_confirmed: bool) -> StepRecord {
    StepRecord {
        schema: SCHEMA,
        step: step.to_string(),
        token,
        by: cfg.name.clone(),
        agent_confirmed,
    }
}

/// The records of a step done: its step key, and the puts (the step
/// record and the agent's command record).
fn step_records(
    keys: &crate::state::Keys,
    cfg: &Config,
    token: Token,
    m: &Migration,
    step: &str,
    agent_confirmed: bool,
) -> (String, [(String, String); 2]) {
    let step_key = keys.step(&m.id, step);
    let rec = step_record(cfg, token, step, agent_confirmed);
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
    (step_key, puts)
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
    let (step_key, puts) = step_records(&keys, cfg, token, m, step, agent_confirmed);
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

/// Every step of `finished` is recorded: each unit's new placement, and
/// its migration (under its key) marked done. One read of the placement
/// state and one TRIPOD placement for all of them
/// ([`crate::placement::backups_after`]; a restart in place keeps its
/// backup), then [`MIGRATIONS_PER_TXN`] finishes per fenced transaction.
/// The last outcome (`None`: nothing finished).
async fn finish_all(
    shared: &SharedRef,
    store: &mut Store,
    token: Token,
    finished: &[(String, Migration)],
) -> Result<Option<Outcome>, StoreError> {
    if finished.is_empty() {
        return Ok(None);
    }
    let keys = store.keys().clone();
    let (desired, records) = crate::placement::read_state_and_units(store).await?;
    let records: BTreeMap<String, UnitRecord> =
        records.into_iter().map(|u| (u.unit.clone(), u)).collect();
    // A restart in place keeps its backup; the others are decided together.
    let moved: Vec<(String, String, String)> = finished
        .iter()
        .filter(|(_, m)| m.to != m.from)
        .map(|(_, m)| (m.unit.clone(), m.to.clone(), m.from.clone()))
        .collect();
    let placed = crate::placement::off_runtime(move || {
        let moved: Vec<crate::placement::Moved<'_>> = moved
            .iter()
            .map(|(unit, primary, left)| crate::placement::Moved {
                unit,
                primary,
                left,
            })
            .collect();
        crate::placement::backups_after(&desired, &moved)
    })
    .await;
    let mut last = None;
    for chunk in finished.chunks(MIGRATIONS_PER_TXN) {
        let mut puts = Vec::new();
        for (key, m) in chunk {
            let before = records.get(&m.unit);
            let backup = if m.to == m.from {
                before.and_then(|u| u.backup.clone())
            } else {
                placed.get(&m.unit).cloned().flatten()
            };
            let unit = UnitRecord {
                schema: SCHEMA,
                unit: m.unit.clone(),
                primary: m.to.clone(),
                backup,
                epoch: token,
                config: before.map(|u| u.config.clone()).unwrap_or_default(),
                addresses: before.map(|u| u.addresses.clone()).unwrap_or_default(),
                interface: before.map(|u| u.interface.clone()).unwrap_or_default(),
                preheated: before.is_some_and(|u| u.preheated),
                binary: m
                    .binary
                    .clone()
                    .or_else(|| before.and_then(|u| u.binary.clone())),
                app_failure: before.and_then(|u| u.app_failure),
            };
            let mut fin = m.clone();
            fin.state = MigrationState::Done;
            fin.finished_by = Some(token);
            puts.push((keys.unit(&m.unit), to_json(&unit)));
            puts.push((key.clone(), to_json(&fin)));
        }
        let o = store.fenced_put(token, &[], &puts).await?;
        if let Outcome::Committed(rev) = o {
            metrics(shared)
                .migrations_finished
                .inc_by(chunk.len() as u64);
            for (_, m) in chunk {
                tracing::info!(migration = %m.id, %token, rev, "migration done");
            }
        }
        if matches!(o, Outcome::Fenced) {
            return Ok(Some(o));
        }
        last = Some(o);
    }
    Ok(last)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::MigrationState;

    fn migration(id: &str) -> Migration {
        Migration {
            schema: SCHEMA,
            id: id.into(),
            unit: format!("u-{id}"),
            from: "a".into(),
            to: "b".into(),
            steps: MIGRATION_STEPS.iter().map(|s| (*s).to_string()).collect(),
            state: MigrationState::Pending,
            finished_by: None,
            binary: None,
            refused: None,
        }
    }

    fn record(step: &str, agent_confirmed: bool) -> StepRecord {
        StepRecord {
            schema: SCHEMA,
            step: step.into(),
            token: Token(7),
            by: "c1".into(),
            agent_confirmed,
        }
    }

    #[test]
    fn the_step_after_one_recorded_follows_at_once_until_the_migration_finishes() {
        let (m1, m2) = (migration("m1"), migration("m2"));
        let mut recorded = BTreeMap::new();
        let mut finished = Vec::new();
        // Both fenced: m1 by its agent, m2 found recorded already.
        let done = vec![
            (
                "k1".into(),
                m1.clone(),
                "fence".into(),
                Some(record("fence", true)),
            ),
            ("k2".into(), m2.clone(), "fence".into(), None),
        ];
        let next = advance(&mut recorded, done, &mut finished);
        let names: Vec<(&str, &str)> = next
            .iter()
            .map(|(_, m, s)| (m.id.as_str(), s.as_str()))
            .collect();
        assert_eq!(names, [("m1", "takeover"), ("m2", "takeover")]);
        assert!(finished.is_empty());
        // What the takeover reads of the fence: confirmed only where this
        // leader wrote it so.
        assert!(recorded["m1"]["fence"]
            .as_ref()
            .is_some_and(|r| r.agent_confirmed));
        assert!(recorded["m2"]["fence"].is_none());
        // m1's takeover and address recorded: it finishes; m2 goes on.
        let done = vec![(
            "k1".into(),
            m1.clone(),
            "takeover".into(),
            Some(record("takeover", true)),
        )];
        let next = advance(&mut recorded, done, &mut finished);
        assert_eq!(next.len(), 1);
        assert_eq!(next[0].2, "address");
        let done = vec![(
            "k1".into(),
            m1,
            "address".into(),
            Some(record("address", true)),
        )];
        assert!(advance(&mut recorded, done, &mut finished).is_empty());
        assert_eq!(finished.len(), 1);
        assert_eq!(finished[0].0, "k1");
    }
}
