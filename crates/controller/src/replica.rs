//! The I/O shell of one controller replica: two tasks over two etcd
//! connections.
//!
//! * The **elector** feeds [`Elector`] with time and the answers of its
//!   store operations (grant, campaign, renew, revoke) and carries out what
//!   it asks, one operation at a time.
//! * The **worker** acts only while [`Elector::may_act`] gives a token. On
//!   a new token it advances the store epoch to it; then, in each pass, it
//!   takes the measurements, acts on every verdict they gave, and drives
//!   every migration in flight, one per unit, all at once (`migrate`,
//!   [`crate::state::next_step`]), the migrations it has just started
//!   included: each step is carried out through the agents (or, for a
//!   bookkeeping step, takes `step_time`) and is then committed with one
//!   fenced transaction that records the step (created once) and writes
//!   the agent's command carrying the token; the next step follows at once.
//!   A commit that finds the leader key no longer ours is reported to the
//!   elector, which demotes.
//! * The **reporter** writes the status file every tick.
//!
//! The worker does not look at the clock again between a step's work and
//! its commit: a paused leader that wakes up past its deadline still tries
//! to commit, and etcd's compare is what stops it.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;

use crate::elect::{Elector, Input, Op, Output, Role, Timing};
use crate::fence::Token;
use crate::hub::{AgentView, Hub, Observed};
use crate::metrics::{ControllerMetrics, FindingLabel, Reason};
use crate::sense::{Localization, SenseConfig, SharedTargets, VerdictView};
use crate::state::{
    EpochRecord, Keys, OperatorRequest, UnitRecord, MIGRATION_STEPS, RESTART_STEPS, SCHEMA,
    SWITCHOVER_STEPS, UPGRADE_STEPS,
};
use crate::store::{to_json, Outcome, Store, StoreError};
use holdfast_control::{AppPolicy, Finding, Verdict};

mod hosts;
mod migrate;
mod phases;
mod upgrade;
use hosts::HostWatch;
use migrate::{drive, standbys, start_migration, start_migrations, Plan};

/// How often the shell looks at the clock when nothing else is due.
const TICK: Duration = Duration::from_millis(50);
/// How often the leader checks that every preheated standby runs.
const STANDBYS_EVERY: Duration = Duration::from_secs(1);
/// How often an idle leader reads the operator requests and the
/// migrations in flight (two linearizable reads, each a ReadIndex round of
/// etcd's members: at every tick they were most of an idle control plane's
/// CPU). The leader writes every migration itself, so none appears
/// unseen meanwhile; an operator's `holdfast ctl` request waits up to this.
const IDLE_READS_EVERY: Duration = Duration::from_millis(250);

/// Measurements taken between two yields of the work loop.
const MEASUREMENTS_PER_SLICE: u64 = 1_000;

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
    /// Where the agents' `Attach` service listens (gRPC), if anywhere.
    pub listen: Option<std::net::SocketAddr>,
    /// How long a command to an agent may take.
    pub command_timeout: Duration,
    /// Failure localization: heartbeat period, thresholds, application
    /// failure policy.
    pub sense: SenseConfig,
    /// Where to serve the Prometheus metrics (`GET /metrics`), if anywhere.
    pub metrics_listen: Option<std::net::SocketAddr>,
    /// Mutual TLS on the `Attach` service (`--tls-cert`, `--tls-key`,
    /// `--tls-ca`); plaintext without.
    pub tls: Option<holdfast_control_api::tls::TlsFiles>,
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
    /// Agents attached to this replica (only while it leads).
    #[serde(default)]
    pub agents: Vec<AgentView>,
    /// Migrations this replica started on a failure it detected: `(unit,
    /// from, to, why, detected_after_ms)`.
    #[serde(default)]
    pub detected: Vec<(String, String, String, String, u64)>,
    /// The localizer's verdicts while this replica led (the last
    /// [`VERDICTS_KEPT`]; lost probes are only counted).
    #[serde(default)]
    pub verdicts: Vec<VerdictView>,
    /// Single lost probes (a note, no action).
    #[serde(default)]
    pub lost_probes: u64,
}

/// How many verdicts the status keeps.
pub const VERDICTS_KEPT: usize = 64;

/// How long an acting verdict waits for its unit's migration under way to
/// end before it is dropped (with a warning).
const ACTION_PATIENCE: Duration = Duration::from_secs(60);

fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

struct Shared {
    elector: Elector,
    status: Status,
    metrics: Arc<ControllerMetrics>,
}

fn metrics(s: &SharedRef) -> Arc<ControllerMetrics> {
    lock(s).metrics.clone()
}

/// The finding's name (as in the status file): `application`, `suspect`...
fn finding_name(f: &Finding) -> String {
    match serde_json::to_value(f) {
        Ok(serde_json::Value::Object(m)) => m.keys().next().cloned().unwrap_or_default(),
        Ok(serde_json::Value::String(s)) => s,
        _ => String::new(),
    }
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
            shared: Arc::new(Mutex::new(Shared {
                elector,
                status,
                metrics: Arc::new(ControllerMetrics::new()),
            })),
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
        .map(|s| s.with_tls(self.etcd_tls()))
    }

    /// The replica's certificate as etcd's client identity (for `https://`
    /// endpoints; etcd's user `controller:NAME`). `main` has read the
    /// files once: a failure here is a file changed since (the store then
    /// connects without, and etcd refuses it).
    fn etcd_tls(&self) -> Option<holdfast_etcd::TlsOptions> {
        let files = self.cfg.tls.as_ref()?;
        match holdfast_control_api::tls::Tls::load(files) {
            Ok(t) => Some(t.etcd_client()),
            Err(e) => {
                tracing::error!(error = %e, "etcd client certificate unreadable");
                None
            }
        }
    }

    /// Runs until `stop` resolves; then revokes the lease (a fast handover).
    pub async fn run(self, stop: impl std::future::Future<Output = ()>) -> Result<(), StoreError> {
        let (tx, rx) = mpsc::unbounded_channel();
        let mut elector_store = self.store()?;
        let worker_store = self.store()?;
        let acting = self.shared.clone();
        let (hub, events) = Hub::new(std::sync::Arc::new(move || {
            lock(&acting).elector.may_act(Instant::now())
        }));
        let hub = hub.require_certs(self.cfg.tls.is_some());
        // `main` has read the files once already: a failure here is a file
        // changed since, and leaves the service off (logged).
        let tls = self
            .cfg
            .tls
            .as_ref()
            .map(|f| holdfast_control_api::tls::Tls::load(f).map(|t| t.server()));
        let targets = SharedTargets::default();
        let sensor = tokio::spawn(crate::sense::sensor(
            hub.clone(),
            targets.clone(),
            self.cfg.sense,
        ));
        let server = self.cfg.listen.map(|addr| {
            let svc =
                holdfast_control_api::v1::controller_server::ControllerServer::new(hub.clone());
            tracing::info!(%addr, mtls = tls.is_some(), "Attach service listening");
            async move {
                let mut builder = tonic::transport::Server::builder();
                if let Some(t) = tls {
                    let t = match t {
                        Ok(t) => t,
                        Err(e) => {
                            tracing::error!(%addr, error = %e, "Attach service's TLS");
                            return;
                        }
                    };
                    builder = match builder.tls_config(t) {
                        Ok(b) => b,
                        Err(e) => {
                            tracing::error!(%addr, error = %e, "Attach service's TLS");
                            return;
                        }
                    };
                }
                if let Err(e) = builder.add_service(svc).serve(addr).await {
                    tracing::error!(%addr, error = %e, "Attach service stopped");
                }
            }
        });
        // The Attach streams and the leader's beats on them run on a thread
        // and runtime of their own: at 1,000 hosts their gRPC work is half
        // the leader's, and on the worker's runtime each etcd round trip of
        // a failover waited behind it (a failed host's migrations were
        // written 1.1 s after its mark, on a machine running slow).
        let beats = hub.clone().beats();
        let attach = on_own_thread("attach", move |stopped| async move {
            let serve = async move {
                match server {
                    Some(server) => server.await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                _ = async { tokio::join!(beats, serve) } => {}
                _ = stopped => {}
            }
        })?;
        let metrics_server = self.cfg.metrics_listen.map(|addr| {
            let m = metrics(&self.shared);
            tracing::info!(%addr, "metrics at /metrics");
            tokio::spawn(async move {
                if let Err(e) = crate::metrics::serve(addr, Arc::new(move || m.render())).await {
                    tracing::error!(%addr, error = %e, "metrics endpoint stopped");
                }
            })
        });
        let worker = tokio::spawn(work(
            self.shared.clone(),
            worker_store,
            self.cfg.clone(),
            tx,
            hub.clone(),
            events,
            targets,
        ));
        let reporter = self
            .cfg
            .status_file
            .clone()
            .map(|p| tokio::spawn(report(self.shared.clone(), p, hub.clone())));
        // The elector runs on its own thread and runtime, with its own etcd
        // connection: the Attach streams of a thousand agents and the
        // worker's passes must not delay a lease renewal (issue 29: at
        // 1,000 hosts the leader demoted itself for a renewal that waited
        // behind them). A stopped process (SIGSTOP) stops it all the same.
        let elector = {
            let shared = self.shared.clone();
            let cfg = self.cfg.clone();
            on_own_thread("elector", move |stopped| async move {
                tokio::select! {
                    () = elect(&shared, &mut elector_store, &cfg, rx) => {}
                    _ = stopped => {}
                }
                let lease = lock(&shared).elector.lease();
                if let Some(lease) = lease {
                    tracing::info!(lease, "stopping: revoking the lease");
                    let _ =
                        tokio::time::timeout(Duration::from_secs(1), elector_store.revoke(lease))
                            .await;
                }
            })?
        };
        stop.await;
        worker.abort();
        sensor.abort();
        if let Some(m) = metrics_server {
            m.abort();
        }
        if let Some(r) = reporter {
            r.abort();
        }
        for (stop, thread) in [elector, attach] {
            let _ = stop.send(());
            let _ = tokio::task::spawn_blocking(move || thread.join()).await;
        }
        Ok(())
    }
}

/// Runs the future `task` makes on a thread named `name` with a
/// current-thread runtime of its own. `task` is given the receiver of the
/// sender returned, which says stop (or is dropped).
fn on_own_thread<F>(
    name: &str,
    task: impl FnOnce(tokio::sync::oneshot::Receiver<()>) -> F + Send + 'static,
) -> Result<
    (
        tokio::sync::oneshot::Sender<()>,
        std::thread::JoinHandle<()>,
    ),
    StoreError,
>
where
    F: std::future::Future<Output = ()>,
{
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let thread = name.to_string();
    let handle = std::thread::Builder::new()
        .name(thread.clone())
        .spawn(move || {
            match tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            {
                Ok(rt) => rt.block_on(task(stopped)),
                Err(e) => tracing::error!(thread, error = %e, "a thread's runtime"),
            }
        })
        .map_err(|e| StoreError::Unavailable(format!("the {name} thread: {e}")))?;
    Ok((stop, handle))
}

/// The elector task: never returns.
async fn elect(
    shared: &SharedRef,
    store: &mut Store,
    cfg: &Config,
    mut fenced: mpsc::UnboundedReceiver<()>,
) {
    let mut inputs = vec![Input::Tick];
    loop {
        while let Some(input) = inputs.pop() {
            let outs = lock(shared).elector.handle(Instant::now(), input);
            for o in outs {
                if let Some(i) = carry_out(shared, store, cfg, o).await {
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
    cfg: &Config,
    o: Output,
) -> Option<Input> {
    let ttl = cfg.lease_ttl;
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
            let attach = cfg.listen.map(|a| a.to_string());
            Some(match store.campaign(&name, attach, lease).await {
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
            s.metrics.elections.inc();
            tracing::info!(%token, "elected leader");
            None
        }
        Output::Demoted(why) => {
            let mut s = lock(shared);
            s.status.demotions += 1;
            s.metrics.demotions.inc();
            tracing::warn!(?why, "demoted: no longer acting as leader");
            None
        }
    }
}

/// The status writer task: every tick, the role as the worker sees it
/// (`leader` only while [`Elector::may_act`]), handed to a thread of its
/// own that writes it atomically ([`holdfast_linux::statusfile`]: a file
/// write may wait seconds for the disk, and this runtime runs the sensor).
async fn report(shared: SharedRef, path: PathBuf, hub: Hub) {
    let out = match holdfast_linux::statusfile::StatusFile::start(path.clone()) {
        Ok(out) => out,
        Err(e) => {
            tracing::warn!(path = %path.display(), error = %e, "no status file: its writer did not start");
            return;
        }
    };
    loop {
        let agents = hub.agents();
        let status = {
            let mut s = lock(&shared);
            s.metrics.agents_attached.set(agents.len() as i64);
            s.status.agents = agents;
            let Shared {
                elector,
                status,
                metrics,
            } = &mut *s;
            status.token = elector.may_act(Instant::now());
            metrics.is_leader.set(i64::from(status.token.is_some()));
            status.role = match (status.token, elector.role()) {
                (Some(_), _) => "leader".into(),
                (None, Role::Leader(_)) => "leader-expired".into(),
                (None, Role::Follower) => "follower".into(),
            };
            status.lease = elector.lease();
            status.updated_unix_ms = unix_ms();
            status.clone()
        };
        out.publish(to_json(&status));
        tokio::time::sleep(TICK).await;
    }
}

fn set_phase(shared: &SharedRef, phase: &str) {
    lock(shared).status.phase = phase.to_string();
}

/// The worker task: acts while the elector says we may.
async fn work(
    shared: SharedRef,
    mut store: Store,
    cfg: Config,
    fenced: mpsc::UnboundedSender<()>,
    hub: Hub,
    mut events: mpsc::UnboundedReceiver<Observed>,
    targets: SharedTargets,
) {
    let mut epoch_written: Option<Token> = None;
    let mut hosts = HostWatch::default();
    let mut loc = Localization::new(cfg.sense, targets);
    let mut actions: VecDeque<(Verdict, Instant)> = VecDeque::new();
    let mut standbys_checked = Instant::now();
    // When the requests and migrations were last read and nothing was to do.
    let mut idle_read: Option<Instant> = None;
    loop {
        let token = lock(&shared).elector.may_act(Instant::now());
        let Some(token) = token else {
            idle_read = None;
            if epoch_written.take().is_some() {
                hub.close_all();
                loc.reset();
            }
            // Measurements taken while not leading are the next leader's.
            while events.try_recv().is_ok() {}
            hosts = HostWatch::default();
            actions.clear();
            set_phase(&shared, "idle");
            tokio::time::sleep(TICK).await;
            continue;
        };
        let res = if epoch_written != Some(token) {
            let res = advance_epoch(&mut store, &cfg, token).await;
            if let Ok(Outcome::Committed(_)) = res {
                epoch_written = Some(token);
                loc.elected(Instant::now());
            }
            res.map(Some)
        } else {
            let m = metrics(&shared);
            let mut ph = phases::Phases::start();
            let mut res = loc.sync(&mut store, &hub).await.map(|()| None);
            ph.end("sync");
            let mut busy = false;
            if res.is_ok() {
                // What was queued when the phase began, no more: while the
                // loop yields, the agents' reports keep coming, and a drain
                // until empty never reached the verdicts' actions at 1,000
                // hosts.
                let queued = events.len();
                let mut oldest: Option<Instant> = None;
                let (mut taken, mut dropped) = (0u64, 0u64);
                for _ in 0..queued {
                    let Ok(o) = events.try_recv() else { break };
                    // An answer the localizer would find stale is dropped
                    // unread: a loop that fell behind catches up at once
                    // (its queue grew to 920 MB at 1,000 hosts). Misses
                    // are kept: they make the verdicts.
                    if loc.outdated(&o, Instant::now()) {
                        dropped += 1;
                        continue;
                    }
                    oldest = Some(oldest.map_or(o.at, |t| t.min(o.at)));
                    taken += 1;
                    for v in loc.observe(o, &hub) {
                        busy = true;
                        note(&shared, &v, &mut actions);
                    }
                    // A backlog is worked through in slices: the Attach
                    // streams and the controller's beats run between them
                    // (a thousand agents leave a leader silent for 1 s).
                    if taken.is_multiple_of(MEASUREMENTS_PER_SLICE) {
                        tokio::task::yield_now().await;
                    }
                }
                ph.took(taken, dropped, oldest, &m);
                ph.end("measurements");
                for v in loc.poll() {
                    busy = true;
                    note(&shared, &v, &mut actions);
                }
                ph.end("poll");
                busy |= !actions.is_empty();
                res = act(&shared, &mut store, &cfg, token, &mut hosts, &mut actions).await;
                ph.end("act");
            }
            if matches!(res, Ok(None)) {
                let confirm = Duration::from_millis(cfg.sense.localize.host_confirm_ms);
                res = hosts
                    .check(&shared, &mut store, token, &loc, &hub, confirm)
                    .await;
                ph.end("hosts");
            }
            let quiet = !busy
                && matches!(res, Ok(None))
                && idle_read.is_some_and(|t| t.elapsed() < IDLE_READS_EVERY);
            if quiet {
                ph.finish(&m, hub.take_max_transit());
                tokio::time::sleep(TICK).await;
                continue;
            }
            if matches!(res, Ok(None)) {
                res = requests(&shared, &mut store, &cfg, token, &hub).await;
                ph.end("requests");
            }
            if matches!(res, Ok(None)) && standbys_checked.elapsed() >= STANDBYS_EVERY {
                standbys_checked = Instant::now();
                res = standbys(&mut store, &cfg, token, &hub).await.map(|()| None);
                ph.end("standbys");
            }
            let read = Instant::now();
            // Migrations started in this pass are driven in it too: their
            // first steps wait for no other pass (0.6-1.5 s at 1,000 hosts).
            let res = match res {
                Ok(None) => drive(&shared, &mut store, &cfg, token, &hub).await,
                Ok(Some(Outcome::Committed(rev))) => drive(&shared, &mut store, &cfg, token, &hub)
                    .await
                    .map(|o| o.or(Some(Outcome::Committed(rev)))),
                other => other,
            };
            ph.end("drive");
            // The backups the failed hosts held, placed anew once their
            // units' migrations have been driven.
            let res = match res {
                Ok(o @ (None | Some(Outcome::Committed(_)))) => hosts
                    .place_backups(&mut store, token)
                    .await
                    .map(|p| o.or(p)),
                other => other,
            };
            ph.end("backups");
            ph.finish(&m, hub.take_max_transit());
            idle_read =
                (matches!(res, Ok(None)) && lock(&shared).status.phase == "idle").then_some(read);
            res
        };
        match res {
            Ok(Some(Outcome::Fenced)) => {
                lock(&shared).status.fenced_rejections += 1;
                metrics(&shared).fenced_rejections.inc();
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

/// Carries out the first operator request (`holdfast ctl`), if any.
async fn requests(
    shared: &SharedRef,
    store: &mut Store,
    cfg: &Config,
    token: Token,
    hub: &Hub,
) -> Result<Option<Outcome>, StoreError> {
    let keys = store.keys().clone();
    let ids = store.list(&format!("{}requests/", keys.prefix())).await?;
    let Some(first) = ids.first() else {
        return Ok(None);
    };
    // An abort goes ahead of the rest: a host's upgrade stays pending
    // while it works.
    let abort = upgrade::first_abort(store, &ids).await?;
    let id = abort.as_ref().map_or(first, |(id, _)| id);
    let key = keys.request(id);
    let req: Option<OperatorRequest> = match store.get(&key).await {
        Ok(r) => r,
        Err(StoreError::Record { detail, .. }) => {
            tracing::warn!(request = %id, %detail, "unreadable operator request dropped");
            return store.fenced_write(token, &[], &[], &[key]).await.map(Some);
        }
        Err(e) => return Err(e),
    };
    let Some(req) = req else { return Ok(None) };
    tracing::info!(request = %id, ?req, "operator request");
    match req {
        OperatorRequest::Reset { host } => {
            // The host is usable again: units left without a backup (their
            // backup failed, or no host fitted) get one, by TRIPOD's
            // placement; nothing else moves.
            let mut desired = crate::placement::read_state(store).await?;
            if let Some(h) = desired
                .hosts
                .get_mut(&holdfast_control::HostId::new(host.clone()))
            {
                h.state = holdfast_control::HostState::Healthy;
            }
            let (placed, _) =
                crate::placement::off_runtime(move || holdfast_control::place_partial(&desired))
                    .await;
            let mut puts = Vec::new();
            for unit in &placed.changed {
                let Some(mut rec) = store.get::<UnitRecord>(&keys.unit(&unit.0)).await? else {
                    continue;
                };
                rec.backup = placed.backups.get(unit).map(|h| h.0.clone());
                rec.epoch = token;
                puts.push((keys.unit(&unit.0), to_json(&rec)));
            }
            store
                .fenced_write(token, &[], &puts, &[keys.failed_host(&host), key])
                .await
                .map(Some)
        }
        OperatorRequest::Switchover { unit } => {
            let why = "planned switchover (holdfast ctl)".to_string();
            let plan = Plan {
                unit: &unit,
                from: None,
                to: None,
                why: &why,
                steps: &SWITCHOVER_STEPS,
                done_request: Some(key.clone()),
                reason: Reason::Switchover,
                binary: None,
            };
            // `None`: not possible now (a migration under way): later.
            start_migration(shared, store, token, &plan, Instant::now()).await
        }
        OperatorRequest::Drain { host } => {
            let units: Vec<String> = store
                .units()
                .await?
                .into_iter()
                .filter(|u| u.primary == host)
                .map(|u| u.unit)
                .collect();
            let why = format!("drain of {host} (holdfast ctl)");
            let plans: Vec<Plan<'_>> = units
                .iter()
                .map(|unit| Plan {
                    unit,
                    from: Some(&host),
                    to: None,
                    why: &why,
                    steps: &SWITCHOVER_STEPS,
                    done_request: None,
                    reason: Reason::Drain,
                    binary: None,
                })
                .collect();
            if !plans.is_empty() {
                // Every unit at once (each at most one migration at a time).
                let now = Instant::now();
                let refs: Vec<(&Plan<'_>, Instant)> = plans.iter().map(|p| (p, now)).collect();
                return start_migrations(shared, store, token, &refs).await;
            }
            // Nothing left on the host: the drain is done.
            store.fenced_write(token, &[], &[], &[key]).await.map(Some)
        }
        OperatorRequest::Upgrade { unit, binary } => {
            if let Some(why) = crate::state::binary_path_error(&binary) {
                tracing::warn!(request = %id, %unit, why, "upgrade refused");
                return store.fenced_write(token, &[], &[], &[key]).await.map(Some);
            }
            let why = format!("upgrade to {binary} (holdfast ctl)");
            let plan = Plan {
                unit: &unit,
                from: None,
                to: None,
                why: &why,
                steps: &UPGRADE_STEPS,
                done_request: Some(key.clone()),
                reason: Reason::Upgrade,
                binary: Some(&binary),
            };
            // `None`: not possible now (a migration under way): later.
            start_migration(shared, store, token, &plan, Instant::now()).await
        }
        OperatorRequest::UpgradeHost { host, binary } => {
            if let Some(why) = crate::state::binary_path_error(&binary) {
                tracing::warn!(request = %id, %host, why, "upgrade refused");
                return store.fenced_write(token, &[], &[], &[key]).await.map(Some);
            }
            upgrade::upgrade_host(shared, store, token, &host, &binary, key).await
        }
        OperatorRequest::AbortUpgrade { unit } => {
            upgrade::abort_upgrade(store, cfg, token, hub, &unit, key).await
        }
        OperatorRequest::AbortUpgradeHost { host } => {
            upgrade::abort_upgrade_host(store, cfg, token, hub, &host, key).await
        }
    }
}

/// Records a verdict in the status and the log; queues it when it acts.
fn note(shared: &SharedRef, v: &Verdict, actions: &mut VecDeque<(Verdict, Instant)>) {
    let kind = v.finding.failure_kind();
    if let Finding::LostProbe { from, to, missed } = &v.finding {
        tracing::debug!(?from, ?to, missed, "a lost probe (no action)");
        lock(shared).status.lost_probes += 1;
        let finding = FindingLabel {
            finding: "lost_probe".into(),
        };
        metrics(shared).verdicts.get_or_create(&finding).inc();
        return;
    }
    let finding = FindingLabel {
        finding: finding_name(&v.finding),
    };
    metrics(shared).verdicts.get_or_create(&finding).inc();
    if kind.is_some() {
        metrics(shared)
            .detection_seconds
            .get_or_create(&finding)
            .observe(v.detection_ms() as f64 / 1000.0);
    }
    let vantages: Vec<String> = v.vantages().iter().map(|x| format!("{x:?}")).collect();
    if kind.is_some() {
        tracing::warn!(finding = ?v.finding, detection_ms = v.detection_ms(), ?vantages, "failure localized");
        actions.push_back((v.clone(), Instant::now()));
    } else {
        tracing::info!(finding = ?v.finding, detection_ms = v.detection_ms(), ?vantages, "localization note (no action)");
    }
    let mut s = lock(shared);
    s.status.verdicts.push(VerdictView {
        verdict: v.clone(),
        kind,
        detection_ms: v.detection_ms(),
        unix_ms: unix_ms(),
    });
    let n = s.status.verdicts.len();
    if n > VERDICTS_KEPT {
        s.status.verdicts.drain(..n - VERDICTS_KEPT);
    }
}

/// Acts on every queued verdict at once: a failed host is handed to
/// [`HostWatch`], which migrates its units; a unit's verdict starts its
/// migration (or restart in place), all of them in one
/// [`start_migrations`]. A verdict that cannot be acted on yet (its unit's
/// migration under way) stays queued for up to [`ACTION_PATIENCE`].
///
/// All at once because one verdict a pass (0.6-1.5 s at 1,000 hosts) left
/// a rack's 50 host verdicts to the lease expiry.
async fn act(
    shared: &SharedRef,
    store: &mut Store,
    cfg: &Config,
    token: Token,
    hosts: &mut HostWatch,
    actions: &mut VecDeque<(Verdict, Instant)>,
) -> Result<Option<Outcome>, StoreError> {
    if actions.is_empty() {
        return Ok(None);
    }
    // The units' own policies, read once, before any verdict leaves the
    // queue (a store error leaves every one queued).
    let policies = if actions.iter().any(|(v, _)| {
        matches!(
            v.finding,
            Finding::Application { .. } | Finding::Hung { .. }
        )
    }) {
        migrate::units_by_name(store).await?
    } else {
        BTreeMap::new()
    };
    let mut todo: Vec<UnitAction> = Vec::new();
    while let Some((v, queued)) = actions.pop_front() {
        let why = format!("{:?}", v.finding);
        let since = Instant::now()
            .checked_sub(Duration::from_millis(v.detection_ms()))
            .unwrap_or(queued);
        let (unit, host, restart) = match &v.finding {
            Finding::Host { host } | Finding::HostNetwork { host } => {
                hosts.fail(&host.0, since, why);
                continue;
            }
            Finding::Application { unit, host } | Finding::Hung { unit, host } => {
                let own = policies.get(&unit.0).and_then(|u| u.app_failure);
                let policy = own.unwrap_or(cfg.sense.localize.app_policy);
                (unit, host, policy == AppPolicy::RestartInPlace)
            }
            Finding::Container { unit, host } | Finding::ContainerNetwork { unit, host } => {
                (unit, host, false)
            }
            _ => continue,
        };
        todo.push(UnitAction {
            unit: unit.0.clone(),
            host: host.0.clone(),
            reason: finding_reason(&v.finding),
            verdict: (v, queued),
            why,
            restart,
            since,
        });
    }
    if todo.is_empty() {
        return Ok(None);
    }
    let res = start_for(shared, store, token, &todo).await;
    let (o, busy_before, started) = match res {
        Ok(r) => r,
        Err(e) => {
            // Every unit's verdict stays queued for the next pass.
            actions.extend(todo.into_iter().map(|a| a.verdict));
            return Err(e);
        }
    };
    if matches!(o, Some(Outcome::Fenced)) {
        return Ok(o);
    }
    for a in todo {
        let (v, queued) = a.verdict;
        if busy_before.contains(&a.unit) && queued.elapsed() <= ACTION_PATIENCE {
            // Its unit was moving already: the verdict waits for that.
            actions.push_back((v, queued));
        } else if busy_before.contains(&a.unit) || !started.contains(&a.unit) {
            tracing::warn!(finding = ?v.finding, "no migration for this verdict (the unit moved, or has no usable backup)");
        }
    }
    Ok(o)
}

/// The migrations of `todo`'s units, started at once: the outcome, and the
/// units moving before and those started.
async fn start_for(
    shared: &SharedRef,
    store: &mut Store,
    token: Token,
    todo: &[UnitAction],
) -> Result<(Option<Outcome>, BTreeSet<String>, BTreeSet<String>), StoreError> {
    let plans: Vec<(Plan<'_>, Instant)> = todo
        .iter()
        .map(|a| {
            let plan = Plan {
                unit: &a.unit,
                from: Some(&a.host),
                to: a.restart.then_some(a.host.as_str()),
                why: &a.why,
                steps: if a.restart {
                    &RESTART_STEPS
                } else {
                    &MIGRATION_STEPS
                },
                done_request: None,
                reason: a.reason.clone(),
                binary: None,
            };
            (plan, a.since)
        })
        .collect();
    let refs: Vec<(&Plan<'_>, Instant)> = plans.iter().map(|(p, t)| (p, *t)).collect();
    let done = migrate::start_migrations_of(shared, store, token, &refs).await?;
    Ok((done.outcome, done.moving, done.started))
}

/// A unit's verdict that [`act`] acts on.
struct UnitAction {
    unit: String,
    host: String,
    why: String,
    restart: bool,
    reason: Reason,
    /// When its failure began.
    since: Instant,
    /// Its queue entry, queued again while the unit is moving.
    verdict: (Verdict, Instant),
}

/// What a unit's verdict's migration counts as.
fn finding_reason(f: &Finding) -> Reason {
    match f {
        Finding::Container { .. } => Reason::Container,
        Finding::ContainerNetwork { .. } => Reason::ContainerNetwork,
        Finding::Hung { .. } => Reason::Hung,
        _ => Reason::Application,
    }
}
