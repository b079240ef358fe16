//! The I/O shell of one controller replica: two tasks over two etcd
//! connections.
//!
//! * The **elector** feeds [`Elector`] with time and the answers of its
//!   store operations (grant, campaign, renew, revoke) and carries out what
//!   it asks, one operation at a time.
//! * The **worker** acts only while [`Elector::may_act`] gives a token. On
//!   a new token it advances the store epoch to it; then it drives the
//!   in-flight migration ([`next_step`]): each step takes `step_time` (the
//!   synthetic work of an agent) and is then committed with one fenced
//!   transaction that records the step (created once) and writes the
//!   agent's command carrying the token. A commit that finds the leader key
//!   no longer ours is reported to the elector, which demotes.
//! * The **reporter** writes the status file every tick.
//!
//! The worker does not look at the clock again between a step's work and
//! its commit: a paused leader that wakes up past its deadline still tries
//! to commit, and etcd's compare is what stops it.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;

use crate::elect::{Elector, Input, Op, Output, Role, Timing};
use crate::fence::Token;
use crate::state::{
    next_step, Command, EpochRecord, Keys, Migration, MigrationState, Next, StepRecord, UnitRecord,
    SCHEMA,
};
use crate::store::{to_json, Outcome, Store, StoreError};

/// How often the shell looks at the clock when nothing else is due.
const TICK: Duration = Duration::from_millis(50);

/// A replica's configuration.
#[derive(Debug, Clone)]
pub struct Config {
    /// etcd client URLs.
    pub endpoints: Vec<String>,
    /// This replica's name (unique among replicas).
    pub name: String,
    /// The controlled cluster (`/holdfast/<cluster>/`).
    pub cluster: String,
    /// The lease TTL.
    pub lease_ttl: Duration,
    /// The synthetic work time of one migration step.
    pub step_time: Duration,
    /// Where to write the status JSON (atomically, every tick).
    pub status_file: Option<PathBuf>,
    /// Fenced writes (false only for the lab's negative control).
    pub fenced: bool,
}

/// What a replica reports in its status file.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Status {
    /// [`SCHEMA`].
    pub schema: u32,
    /// The replica's name.
    pub name: String,
    /// `leader` (may act), `leader-expired` (holds the role but is past
    /// its deadline, about to demote) or `follower`.
    pub role: String,
    /// The token while it may act.
    pub token: Option<Token>,
    /// The lease held.
    pub lease: Option<i64>,
    /// Times elected.
    pub elections: u64,
    /// Times demoted.
    pub demotions: u64,
    /// Steps this replica committed.
    pub steps_committed: u64,
    /// Fenced writes etcd refused (the leader key was not ours).
    pub fenced_rejections: u64,
    /// What the worker is doing.
    pub phase: String,
    /// Whether writes are fenced.
    pub fenced: bool,
    /// Wall-clock time of this status, ms since the Unix epoch.
    pub updated_unix_ms: u64,
}

fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

struct Shared {
    elector: Elector,
    status: Status,
}

type SharedRef = Arc<Mutex<Shared>>;

fn lock(s: &SharedRef) -> std::sync::MutexGuard<'_, Shared> {
    s.lock().unwrap_or_else(|p| p.into_inner())
}

/// A running replica.
pub struct Replica {
    cfg: Config,
    shared: SharedRef,
}

impl Replica {
    /// A replica as a follower without a lease.
    pub fn new(cfg: Config) -> Replica {
        let status = Status {
            schema: SCHEMA,
            name: cfg.name.clone(),
            role: "follower".into(),
            phase: "idle".into(),
            fenced: cfg.fenced,
            ..Status::default()
        };
        let elector = Elector::new(Timing::from_ttl(cfg.lease_ttl));
        Replica {
            shared: Arc::new(Mutex::new(Shared { elector, status })),
            cfg,
        }
    }

    /// The current status.
    pub fn status(&self) -> Status {
        lock(&self.shared).status.clone()
    }

    fn store(&self) -> Result<Store, StoreError> {
        let timing = Timing::from_ttl(self.cfg.lease_ttl);
        Store::new(
            self.cfg.endpoints.clone(),
            timing.renew_every,
            Keys::new(&self.cfg.cluster),
            self.cfg.fenced,
        )
    }

    /// Runs until `stop` resolves; then revokes the lease (a fast handover).
    pub async fn run(self, stop: impl std::future::Future<Output = ()>) -> Result<(), StoreError> {
        let (tx, rx) = mpsc::unbounded_channel();
        let mut elector_store = self.store()?;
        let worker_store = self.store()?;
        let worker = tokio::spawn(work(
            self.shared.clone(),
            worker_store,
            self.cfg.clone(),
            tx,
        ));
        let reporter = self
            .cfg
            .status_file
            .clone()
            .map(|p| tokio::spawn(report(self.shared.clone(), p)));
        tokio::select! {
            () = elect(&self.shared, &mut elector_store, &self.cfg, rx) => {}
            () = stop => {}
        }
        worker.abort();
        if let Some(r) = reporter {
            r.abort();
        }
        let lease = lock(&self.shared).elector.lease();
        if let Some(lease) = lease {
            tracing::info!(lease, "stopping: revoking the lease");
            let _ = tokio::time::timeout(Duration::from_secs(1), elector_store.revoke(lease)).await;
        }
        Ok(())
    }
}

/// The elector task: never returns.
async fn elect(
    shared: &SharedRef,
    store: &mut Store,
    cfg: &Config,
    mut fenced: mpsc::UnboundedReceiver<()>,
) {
    let ttl = cfg.lease_ttl;
    let mut inputs = vec![Input::Tick];
    loop {
        while let Some(input) = inputs.pop() {
            let outs = lock(shared).elector.handle(Instant::now(), input);
            for o in outs {
                if let Some(i) = carry_out(shared, store, ttl, o).await {
                    inputs.push(i);
                }
            }
        }
        let wake = lock(shared).elector.next_wake();
        let now = Instant::now();
        let sleep = wake.map_or(TICK, |w| w.saturating_duration_since(now).min(TICK));
        tokio::select! {
            () = tokio::time::sleep(sleep) => inputs.push(Input::Tick),
            Some(()) = fenced.recv() => inputs.push(Input::Fenced),
        }
    }
}

/// Carries out one output of the elector; returns the input it yields.
async fn carry_out(
    shared: &SharedRef,
    store: &mut Store,
    ttl: Duration,
    o: Output,
) -> Option<Input> {
    let sent = Instant::now();
    match o {
        Output::Grant => Some(match store.grant(ttl).await {
            Ok((lease, ttl)) => {
                tracing::debug!(lease, ?ttl, "lease granted");
                Input::Granted { lease, sent, ttl }
            }
            Err(e) => {
                tracing::debug!(error = %e, "lease grant failed");
                Input::Failed(Op::Grant)
            }
        }),
        Output::Campaign { lease } => {
            let name = lock(shared).status.name.clone();
            Some(match store.campaign(&name, lease).await {
                Ok(won) => Input::Campaigned { won },
                Err(StoreError::Rejected(e)) => {
                    tracing::info!(lease, error = %e, "campaign refused: lease gone");
                    Input::Renewed {
                        sent,
                        ttl_left: Duration::ZERO,
                    }
                }
                Err(e) => {
                    tracing::debug!(error = %e, "campaign failed");
                    Input::Failed(Op::Campaign)
                }
            })
        }
        Output::Renew { lease } => Some(match store.renew(lease).await {
            Ok(ttl_left) => Input::Renewed { sent, ttl_left },
            Err(e) => {
                tracing::warn!(lease, error = %e, "lease renewal failed");
                Input::Failed(Op::Renew)
            }
        }),
        Output::Revoke { lease } => {
            let bound = ttl / 3;
            if let Ok(Err(e)) = tokio::time::timeout(bound, store.revoke(lease)).await {
                tracing::debug!(lease, error = %e, "revoke failed (the lease expires anyway)");
            }
            None
        }
        Output::Elected(token) => {
            let mut s = lock(shared);
            s.status.elections += 1;
            tracing::info!(%token, "elected leader");
            None
        }
        Output::Demoted(why) => {
            let mut s = lock(shared);
            s.status.demotions += 1;
            tracing::warn!(?why, "demoted: no longer acting as leader");
            None
        }
    }
}

/// The status writer task: every tick, the role as the worker sees it
/// (`leader` only while [`Elector::may_act`]), written atomically.
async fn report(shared: SharedRef, path: PathBuf) {
    loop {
        let status = {
            let mut s = lock(&shared);
            let Shared { elector, status } = &mut *s;
            status.token = elector.may_act(Instant::now());
            status.role = match (status.token, elector.role()) {
                (Some(_), _) => "leader".into(),
                (None, Role::Leader(_)) => "leader-expired".into(),
                (None, Role::Follower) => "follower".into(),
            };
            status.lease = elector.lease();
            status.updated_unix_ms = unix_ms();
            status.clone()
        };
        write_status(&path, &status);
        tokio::time::sleep(TICK).await;
    }
}

fn write_status(path: &PathBuf, status: &Status) {
    let tmp = path.with_extension("tmp");
    let text = to_json(status);
    if let Err(e) = std::fs::write(&tmp, text).and_then(|()| std::fs::rename(&tmp, path)) {
        tracing::debug!(path = %path.display(), error = %e, "status file not written");
    }
}

fn set_phase(shared: &SharedRef, phase: &str) {
    lock(shared).status.phase = phase.to_string();
}

/// The worker task: acts while the elector says we may.
async fn work(shared: SharedRef, mut store: Store, cfg: Config, fenced: mpsc::UnboundedSender<()>) {
    let mut epoch_written: Option<Token> = None;
    loop {
        let token = lock(&shared).elector.may_act(Instant::now());
        let Some(token) = token else {
            epoch_written = None;
            set_phase(&shared, "idle");
            tokio::time::sleep(TICK).await;
            continue;
        };
        let res = if epoch_written != Some(token) {
            let res = advance_epoch(&mut store, &cfg, token).await;
            if let Ok(Outcome::Committed(_)) = res {
                epoch_written = Some(token);
            }
            res.map(Some)
        } else {
            drive(&shared, &mut store, &cfg, token).await
        };
        match res {
            Ok(Some(Outcome::Fenced)) => {
                lock(&shared).status.fenced_rejections += 1;
                tracing::warn!(%token, "fenced write refused by etcd: the leader key is not ours");
                let _ = fenced.send(());
                tokio::time::sleep(TICK).await;
            }
            Ok(_) => {}
            Err(e) => {
                tracing::warn!(error = %e, "store error; retrying");
                tokio::time::sleep(TICK).await;
            }
        }
    }
}

/// On election: the store epoch advances to our token.
async fn advance_epoch(
    store: &mut Store,
    cfg: &Config,
    token: Token,
) -> Result<Outcome, StoreError> {
    let key = store.keys().epoch();
    let rec = EpochRecord {
        schema: SCHEMA,
        epoch: token,
        leader: cfg.name.clone(),
    };
    let o = store
        .fenced_put(token, &[], &[(key, to_json(&rec))])
        .await?;
    if let Outcome::Committed(rev) = o {
        tracing::info!(%token, rev, "store epoch advanced");
    }
    Ok(o)
}

/// One step of the in-flight migration, if there is one (`None`: nothing
/// to do, nothing written).
async fn drive(
    shared: &SharedRef,
    store: &mut Store,
    cfg: &Config,
    token: Token,
) -> Result<Option<Outcome>, StoreError> {
    let keys = store.keys().clone();
    let m: Option<Migration> = store.get(&keys.migration()).await?;
    let done: BTreeSet<String> = match &m {
        Some(m) => store.list(&keys.steps(&m.id)).await?.into_iter().collect(),
        None => BTreeSet::new(),
    };
    let next = next_step(m.as_ref(), &done);
    let (m, next) = match (m, next) {
        (Some(m), next) if next != Next::Idle => (m, next),
        _ => {
            set_phase(shared, "idle");
            tokio::time::sleep(TICK).await;
            return Ok(None);
        }
    };
    match next {
        Next::Idle => Ok(None),
        Next::Step(step) => {
            set_phase(shared, &format!("step {step}"));
            tracing::info!(migration = %m.id, %step, %token, "carrying out step");
            tokio::time::sleep(cfg.step_time).await;
            let step_key = keys.step(&m.id, &step);
            let rec = StepRecord {
                schema: SCHEMA,
                step: step.clone(),
                token,
                by: cfg.name.clone(),
            };
            let cmd = Command {
                schema: SCHEMA,
                token,
                unit: m.unit.clone(),
                action: step.clone(),
                migration: m.id.clone(),
            };
            let puts = [
                (step_key.clone(), to_json(&rec)),
                (keys.command(&m.to, &m.id, &step, token), to_json(&cmd)),
            ];
            let o = store.fenced_put(token, &[step_key], &puts).await?;
            match o {
                Outcome::Committed(rev) => {
                    lock(shared).status.steps_committed += 1;
                    tracing::info!(migration = %m.id, %step, %token, rev, "step committed");
                }
                Outcome::Precondition => {
                    tracing::info!(migration = %m.id, %step, "step already recorded");
                }
                Outcome::Fenced => {}
            }
            Ok(Some(o))
        }
        Next::Finish => {
            set_phase(shared, "finishing");
            let unit = UnitRecord {
                schema: SCHEMA,
                unit: m.unit.clone(),
                primary: m.to.clone(),
                backup: Some(m.from.clone()),
                epoch: token,
            };
            let mut fin = m.clone();
            fin.state = MigrationState::Done;
            fin.finished_by = Some(token);
            let puts = [
                (keys.unit(&m.unit), to_json(&unit)),
                (keys.migration(), to_json(&fin)),
            ];
            let o = store.fenced_put(token, &[], &puts).await?;
            if let Outcome::Committed(rev) = o {
                tracing::info!(migration = %m.id, %token, rev, "migration done");
            }
            Ok(Some(o))
        }
    }
}
