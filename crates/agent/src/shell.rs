//! The agent's I/O shell: it feeds the [`AgentCore`] and carries out what
//! it answers. Three tasks feed one loop, so that nothing the network does
//! can delay a fence:
//!
//! - the **lease task** ([`crate::lease`]) grants and renews the host's
//!   etcd lease (and keeps `agents/<host>` attached to it) when the core
//!   asks, and reports each acknowledged renewal with the time its request
//!   was sent;
//! - the **attach task** ([`crate::attach`]) keeps one `Attach` stream
//!   open to the controller replica etcd names as leader, leaves it when
//!   the leader falls silent (`--leader-silence-ms`), sends the core's
//!   reports and hands the controller's commands to the loop;
//! - **probes** run as blocking TCP connects, one per probe, their outcome
//!   sent back to the loop;
//! - the **failsafe service** (`--failsafe-listen`) hands other agents'
//!   asks to the loop, and each failsafe round runs as a task of its own
//!   ([`crate::failsafe`]).
//!
//! The loop owns the core, the prober and the runtime, and hands a JSON
//! status to a thread of its own ([`holdfast_linux::statusfile`]) whenever
//! it changes: a file write can wait seconds for the disk's journal, and
//! the loop that renews the lease and fences must not.

use crate::core::{AgentConfig, AgentCore, AgentInput, AgentOutput, PRIMARY, STANDBY};
use crate::failsafe::{self, Peers};
use crate::hang::{self, HangConfig, HangWatch, Sockets};
use crate::lease;
use crate::probe::{self, ProbeConfig, Prober, Target};
use crate::runtime::{ProcessRuntime, Runtime, UnitSpec};
use crate::Time;
use holdfast_control_api::tls::{Role, Tls};
use holdfast_control_api::v1::{AgentReport, Command};
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use tokio::sync::mpsc;

/// How the agent runs.
#[derive(Debug, Clone)]
pub struct ShellConfig {
    pub core: AgentConfig,
    /// etcd endpoints (`http://ADDR:2379`).
    pub etcd: Vec<String>,
    pub cluster: String,
    /// Controller replicas (`http://ADDR:PORT`); none: no controller link.
    pub controllers: Vec<String>,
    /// How long the leader may be silent on the Attach stream before the
    /// agent leaves it (`--leader-silence-ms`).
    pub leader_silence: Duration,
    pub probe: ProbeConfig,
    pub targets: Vec<Target>,
    /// Units started at boot: (name, holdfastd configuration file).
    pub units: Vec<(String, PathBuf)>,
    /// The holdfastd binary.
    pub holdfastd: PathBuf,
    /// Per-unit directories (configs, logs, control sockets).
    pub work_dir: PathBuf,
    /// Where the status JSON is written, if anywhere.
    pub status_file: Option<PathBuf>,
    /// The interface service addresses go on when a command names none.
    pub interface: String,
    /// Units that run in a container of their own on this host (the lab's
    /// containers are network namespaces), by unit name.
    pub containers: BTreeMap<String, Container>,
    /// Where to serve the Prometheus metrics, if anywhere.
    pub metrics_listen: Option<std::net::SocketAddr>,
    /// Where to serve the other host agents' failsafe asks (on the
    /// management network); published in this host's `agents/` record.
    pub failsafe_listen: Option<std::net::SocketAddr>,
    /// This host's failure domain (`--failure-domain`), published in its
    /// `agents/` record.
    pub failure_domain: Option<String>,
    /// Where the other agents probe this host (`--probe-addr`), published
    /// in its `agents/` record.
    pub probe_addr: Option<std::net::SocketAddr>,
    /// Hang detection of the units (`--hang-ms`; `None`: off).
    pub hang: Option<HangConfig>,
    /// Mutual TLS (`--tls-cert`, `--tls-key`, `--tls-ca`): the Attach
    /// client, the failsafe service and its rounds. Plaintext without.
    pub tls: Option<holdfast_control_api::tls::Tls>,
}

/// A unit's container on this host.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Container {
    /// Its network namespace (`/run/netns/<netns>`).
    pub netns: String,
    /// The interface its service addresses go on, inside it.
    pub interface: String,
}

impl Container {
    /// Parses `NETNS[:IFNAME]` (the interface defaults to `eth0`).
    pub fn parse(s: &str) -> Container {
        let (netns, interface) = s.split_once(':').unwrap_or((s, "eth0"));
        Container {
            netns: netns.to_string(),
            interface: interface.to_string(),
        }
    }

    /// Whether it still exists (its namespace).
    pub fn exists(&self) -> bool {
        holdfast_linux::netns::netns_path(&self.netns).exists()
    }
}

/// What the status file holds.
#[derive(Debug, Clone, Default, Serialize)]
pub struct AgentStatus {
    pub host: String,
    /// The agent's build (`holdfast_version::VERSION`).
    pub version: String,
    pub lease: Option<i64>,
    /// Milliseconds since the agent started: the last acknowledged renewal's
    /// send time, and when the host's units were fenced by the watchdog.
    pub renewed_at_ms: Option<u64>,
    pub self_fenced_at_ms: Option<u64>,
    pub units: Vec<(String, u32)>,
    pub highest_token: u64,
    pub attached_to: Option<String>,
    pub probes_sent: u64,
    pub probes_lost: u64,
    /// Probes that missed across the agent's own stall: not reported.
    pub probes_discarded: u64,
    /// The targets it probes, and whether the leader's plan named them
    /// (else `--probe`).
    pub probe_targets: usize,
    pub probe_plan_from_leader: bool,
    /// The other host agents a failsafe round asks (`None`: not read yet).
    pub failsafe_peers: Option<Vec<String>>,
    /// The units are kept by a confirmed failsafe round (an etcd outage).
    pub in_failsafe: bool,
    /// The send time of the last confirmed round (ms since the start), and
    /// why the last refused one was refused.
    pub failsafe_confirmed_at_ms: Option<u64>,
    pub failsafe_refused: Option<String>,
    /// Units fenced because they hung: (unit, pid, ms without a ping).
    pub hung: Vec<(String, u32, u64)>,
    /// Per watched unit, the longest gap between two of its watchdog
    /// pings (ms): how late they got.
    pub ping_gap_max_ms: BTreeMap<String, u64>,
    /// How often the agent found its own loop stalled (hang windows
    /// restarted).
    pub hang_stalls: u64,
}

pub(crate) enum Event {
    LeaseGranted {
        id: i64,
        sent: Time,
    },
    LeaseRenewed {
        sent: Time,
    },
    LeaseFailed(String),
    /// The other host agents, read from etcd.
    Peers(Peers),
    /// Another agent's failsafe ask.
    FailsafeAsked(failsafe::Asked),
    /// A failsafe round sent at `sent` came back.
    FailsafeRound {
        sent: Time,
        result: Result<(), String>,
    },
    Attached(String),
    Detached(String),
    /// etcd names a leader with this token.
    LeaderToken(u64),
    Command(Command),
    Answered {
        target: usize,
        seq: u64,
        got: probe::Probed,
        /// When the probe's thread saw the outcome.
        at: Time,
    },
    /// A takeover's holdfastd is ready for the service address (or not).
    TakeoverReady {
        id: u64,
        result: Result<(), String>,
    },
}

/// How long a takeover may take to become ready for the service address.
const TAKEOVER_READY_WITHIN: Duration = Duration::from_secs(20);

fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// Runs the agent until `stop` resolves (then fences every unit it runs).
pub async fn run(
    cfg: ShellConfig,
    stop: impl std::future::Future<Output = ()>,
) -> anyhow::Result<()> {
    let t0 = Instant::now();
    let now = || t0.elapsed();
    let mut core_cfg = cfg.core.clone();
    core_cfg.unix_origin_ms = unix_ms();
    let mut core = AgentCore::new(core_cfg);
    let mut prober = Prober::new(&cfg.core.host, cfg.probe, cfg.targets.clone(), now());
    let metrics = std::sync::Arc::new(crate::metrics::AgentMetrics::new());
    if let Some(addr) = cfg.metrics_listen {
        let m = metrics.clone();
        tokio::spawn(async move {
            let render = std::sync::Arc::new(move || m.render());
            if let Err(e) = holdfast_etcd::metrics::serve(addr, render).await {
                tracing::error!(%addr, error = %e, "metrics endpoint stopped");
            }
        });
    }
    let mut status = AgentStatus {
        version: holdfast_version::VERSION.to_string(),
        host: cfg.core.host.clone(),
        probe_targets: cfg.targets.len(),
        ..AgentStatus::default()
    };
    let status_out = cfg
        .status_file
        .clone()
        .map(holdfast_linux::statusfile::StatusFile::start)
        .transpose()?;
    let mut last_status = String::new();
    let (ev_tx, mut ev_rx) = mpsc::unbounded_channel::<Event>();
    // `true`: a new lease is needed (after a self-fence).
    let (renew_tx, renew_rx) = mpsc::unbounded_channel::<bool>();
    let (report_tx, report_rx) = mpsc::unbounded_channel::<AgentReport>();
    tokio::spawn(lease::lease_task(
        lease::LeaseTask {
            etcd: cfg.etcd.clone(),
            cluster: cfg.cluster.clone(),
            host: cfg.core.host.clone(),
            agent_server: cfg.core.agent_server,
            ttl: cfg.core.watchdog.ttl,
            renew: cfg.core.watchdog.renew,
            failsafe: cfg.failsafe_listen.map(|a| a.to_string()),
            domain: cfg.failure_domain.clone(),
            probe_addr: cfg.probe_addr.map(|a| a.to_string()),
            etcd_tls: cfg.tls.as_ref().map(Tls::etcd_client),
            t0,
            solicited: metrics.neighbours_solicited.clone(),
        },
        renew_rx,
        ev_tx.clone(),
    ));
    if !cfg.controllers.is_empty() {
        tokio::spawn(crate::attach::attach_task(
            crate::attach::AttachTask {
                controllers: cfg.controllers.clone(),
                etcd: cfg.etcd.clone(),
                cluster: cfg.cluster.clone(),
                silence: cfg.leader_silence,
                tls: cfg.tls.as_ref().map(|t| t.client(Role::Controller)),
                etcd_tls: cfg.tls.as_ref().map(Tls::etcd_client),
            },
            report_rx,
            ev_tx.clone(),
        ));
    }
    let mut fs = FailsafeState::default();
    if let Some(addr) = cfg.failsafe_listen {
        let (tx, mut rx) = mpsc::unbounded_channel::<failsafe::Asked>();
        failsafe::serve(
            addr,
            cfg.core.host.clone(),
            tx,
            cfg.tls.as_ref().map(Tls::server),
        );
        let ev = ev_tx.clone();
        tokio::spawn(async move {
            while let Some(a) = rx.recv().await {
                if ev.send(Event::FailsafeAsked(a)).is_err() {
                    return;
                }
            }
        });
    }
    std::fs::create_dir_all(&cfg.work_dir)?;
    let mut units = Units {
        rt: ProcessRuntime::new(),
        hang: cfg.hang.map(HangWatch::new),
        sockets: Sockets::default(),
    };
    let rt = &mut units;
    let mut pending: Vec<AgentOutput> = Vec::new();
    for (name, config) in &cfg.units {
        let spec = unit_spec(&cfg, name, config, None, false, &cfg.holdfastd);
        let pid = rt.start(&cfg, &spec, now())?;
        pending.extend(core.handle(
            now(),
            AgentInput::UnitStarted {
                unit: name.clone(),
                pid,
                role: PRIMARY.into(),
                epoch: 0,
            },
        ));
    }
    tokio::pin!(stop);
    loop {
        // Carry out what the core said, feeding results back.
        while !pending.is_empty() {
            let outs = std::mem::take(&mut pending);
            let mut x = Ctx {
                cfg: &cfg,
                core: &mut core,
                rt: &mut *rt,
                status: &mut status,
                renew_tx: &renew_tx,
                report_tx: &report_tx,
                ev_tx: &ev_tx,
                metrics: &metrics,
                fs: &mut fs,
            };
            let mut plan = None;
            for o in outs {
                match o {
                    AgentOutput::ProbeTargets(t) => plan = Some(t),
                    o => pending.extend(carry_out(&mut x, o, now())),
                }
            }
            if let Some(t) = plan {
                new_plan(&mut prober, &mut status, t, now());
            }
        }
        for mut e in rt.rt.exited() {
            e.container_gone =
                !e.fenced && cfg.containers.get(&e.unit).is_some_and(|c| !c.exists());
            tracing::warn!(unit = %e.unit, pid = e.pid, code = ?e.code, signal = ?e.signal, container_gone = e.container_gone, "unit exited");
            pending.extend(core.handle(now(), AgentInput::UnitExited(e)));
        }
        for o in prober.handle(now(), probe::Input::Timer) {
            match o {
                probe::Output::Probe {
                    target,
                    seq,
                    addr,
                    timeout,
                } => {
                    status.probes_sent += 1;
                    metrics.probes_sent.inc();
                    let tx = ev_tx.clone();
                    tokio::task::spawn_blocking(move || {
                        let got = probe::tcp_probe(addr, timeout);
                        let at = t0.elapsed();
                        let _ = tx.send(Event::Answered {
                            target,
                            seq,
                            got,
                            at,
                        });
                    });
                }
                probe::Output::Measured(m) => {
                    status.probes_lost += u64::from(!m.ok);
                    if !m.ok {
                        metrics.probes_lost.inc();
                    }
                    pending.extend(core.handle(now(), AgentInput::Measured(m)));
                }
                probe::Output::Discarded { target, seq } => {
                    discarded(&mut status, &metrics, &target, seq);
                }
            }
        }
        for (unit, pid, silent) in rt.judge(now(), &mut status) {
            metrics.units_hung.inc();
            status
                .hung
                .push((unit.clone(), pid, silent.as_millis() as u64));
            pending.extend(core.handle(now(), AgentInput::UnitHung { unit, pid, silent }));
        }
        pending.extend(core.handle(now(), AgentInput::Tick));
        status.units = rt.rt.running();
        status.in_failsafe = core.in_failsafe();
        status.highest_token = core.highest_token();
        metrics.units_running.set(status.units.len() as i64);
        metrics
            .highest_token
            .set(i64::try_from(status.highest_token).unwrap_or(i64::MAX));
        metrics
            .attached
            .set(i64::from(status.attached_to.is_some()));

        // Written by a thread of its own (a stalled disk must not hold
        // the lease renewals up), and only when it changed.
        if let Some(out) = &status_out {
            if let Ok(text) = serde_json::to_string(&status) {
                if text != last_status {
                    out.publish(text.clone());
                    last_status = text;
                }
            }
        }
        if !pending.is_empty() {
            continue;
        }
        let wake = [core.next_deadline(), prober.next_deadline()]
            .into_iter()
            .flatten()
            .min()
            .unwrap_or(now() + Duration::from_millis(100));
        // Unit exits are polled through their pidfds at least every 20 ms.
        let sleep = wake.saturating_sub(now()).min(Duration::from_millis(20));
        tokio::select! {
            _ = &mut stop => break,
            _ = tokio::time::sleep(sleep) => {}
            Some(ev) = ev_rx.recv() => {
                let t = now();
                let input = match ev {
                    Event::LeaseGranted { id, sent } => {
                        status.lease = Some(id);
                        metrics.lease_grants.inc();
                        status.renewed_at_ms = Some(sent.as_millis() as u64);
                        Some(AgentInput::LeaseGranted { sent })
                    }
                    Event::LeaseRenewed { sent } => {
                        status.renewed_at_ms = Some(sent.as_millis() as u64);
                        Some(AgentInput::LeaseRenewed { sent })
                    }
                    Event::LeaseFailed(e) => {
                        tracing::warn!("etcd lease: {e}");
                        None
                    }
                    Event::Peers(p) => {
                        status.failsafe_peers = Some(p.keys().cloned().collect());
                        fs.peers = Some(p);
                        None
                    }
                    Event::FailsafeAsked(a) => {
                        fs.next_id += 1;
                        fs.replies.insert(fs.next_id, a.reply);
                        Some(AgentInput::FailsafeAsked {
                            id: fs.next_id,
                            from: a.from,
                            units: a.units,
                        })
                    }
                    Event::FailsafeRound { sent, result } => match result {
                        Ok(()) => {
                            metrics.failsafe_rounds_confirmed.inc();
                            if !core.in_failsafe() {
                                tracing::warn!("etcd unavailable, and every other host agent agrees: keeping this host's units (failsafe)");
                            }
                            status.failsafe_confirmed_at_ms = Some(sent.as_millis() as u64);
                            Some(AgentInput::FailsafeConfirmed { sent })
                        }
                        Err(why) => {
                            metrics.failsafe_rounds_refused.inc();
                            if status.failsafe_refused.as_deref() != Some(why.as_str()) {
                                tracing::warn!(%why, "failsafe round refused");
                            }
                            status.failsafe_refused = Some(why);
                            None
                        }
                    },
                    Event::Attached(to) => {
                        status.attached_to = Some(to);
                        Some(AgentInput::Connected)
                    }
                    Event::Detached(why) => {
                        tracing::info!("controller stream closed: {why}");
                        status.attached_to = None;
                        None
                    }
                    Event::Command(c) => Some(AgentInput::Command(c)),
                    Event::LeaderToken(t) => Some(AgentInput::LeaderToken(t)),
                    Event::TakeoverReady { id, result } => {
                        if let Err(e) = &result {
                            tracing::warn!(id, error = %e, "takeover not ready");
                        }
                        Some(AgentInput::TakeoverReady { id, result })
                    }
                    Event::Answered {
                        target,
                        seq,
                        got,
                        at,
                    } => {
                        let answer = match got {
                            probe::Probed::Refused => probe::Input::Refused { target, seq, at },
                            got => probe::Input::Answered {
                                target,
                                seq,
                                ok: got == probe::Probed::Connected,
                                at,
                            },
                        };
                        for o in prober.handle(t, answer) {
                            match o {
                                probe::Output::Measured(m) => {
                                    status.probes_lost += u64::from(!m.ok);
                                    if !m.ok {
                                        metrics.probes_lost.inc();
                                    }
                                    pending.extend(core.handle(t, AgentInput::Measured(m)));
                                }
                                probe::Output::Discarded { target, seq } => {
                                    discarded(&mut status, &metrics, &target, seq);
                                }
                                probe::Output::Probe { .. } => {}
                            }
                        }
                        None
                    }
                };
                if let Some(i) = input {
                    pending.extend(core.handle(t, i));
                }
            }
        }
    }
    drop(units);
    Ok(())
}

/// The units' runtime with their hang watch and notification sockets.
struct Units {
    rt: ProcessRuntime,
    hang: Option<HangWatch>,
    sockets: Sockets,
}

impl Units {
    /// Starts `spec`: with hang detection, its notification socket is
    /// bound first (`NOTIFY_SOCKET`) and its process watched.
    fn start(
        &mut self,
        cfg: &ShellConfig,
        spec: &UnitSpec,
        now: Time,
    ) -> Result<u32, crate::runtime::RuntimeError> {
        let mut spec = spec.clone();
        if let Some(h) = cfg.hang {
            if self.rt.running().iter().any(|(u, _)| *u == spec.name) {
                return Err(crate::runtime::RuntimeError::Running(spec.name));
            }
            let path = notify_socket(cfg, &spec.name);
            match self.sockets.bind(&spec.name, &path) {
                Ok(()) => {
                    spec.env
                        .push(("NOTIFY_SOCKET".into(), path.display().to_string()));
                    spec.env
                        .push(("WATCHDOG_USEC".into(), h.hang.as_micros().to_string()));
                }
                Err(e) => {
                    tracing::error!(unit = %spec.name, path = %path.display(), error = %e, "notification socket not bound: the unit runs without hang detection");
                }
            }
        }
        let pid = self.rt.start(&spec)?;
        if let Some(h) = &mut self.hang {
            h.handle(
                now,
                hang::Input::Started {
                    unit: spec.name.clone(),
                    pid,
                },
            );
        }
        Ok(pid)
    }

    /// Forgets units that are gone, reads every queued notification, then
    /// judges: the hung units (unit, pid, silent for).
    fn judge(&mut self, now: Time, status: &mut AgentStatus) -> Vec<(String, u32, Duration)> {
        let Some(h) = &mut self.hang else {
            return Vec::new();
        };
        let running: BTreeMap<String, u32> = self.rt.running().into_iter().collect();
        let gone: Vec<String> = h
            .watched()
            .filter(|(u, p)| running.get(*u) != Some(p))
            .map(|(u, _)| u.to_string())
            .collect();
        for unit in gone {
            self.sockets.close(&unit);
            h.handle(now, hang::Input::Gone { unit });
        }
        for m in self.sockets.drain(now, SystemTime::now()) {
            h.handle(now, m);
        }
        for (unit, pid) in h.overdue(now) {
            let stopped = hang::process_stopped(pid);
            h.handle(now, hang::Input::Stopped { unit, pid, stopped });
        }
        let hung = h
            .handle(now, hang::Input::Tick)
            .into_iter()
            .map(|o| match o {
                hang::Output::Hung {
                    unit, pid, silent, ..
                } => (unit, pid, silent),
            })
            .collect();
        status.ping_gap_max_ms = h
            .gaps()
            .into_iter()
            .map(|(u, g)| (u, g.as_millis() as u64))
            .collect();
        status.hang_stalls = h.stalls();
        hung
    }
}

/// The leader's probe plan: `targets` from now on (one that does not
/// parse is left out, logged).
fn new_plan(
    prober: &mut Prober,
    status: &mut AgentStatus,
    targets: Vec<(String, String)>,
    now: Time,
) {
    let targets: Vec<Target> = targets
        .into_iter()
        .filter_map(|(name, addr)| match addr.parse() {
            Ok(addr) => Some(Target { name, addr }),
            Err(e) => {
                tracing::warn!(target_name = %name, %addr, error = %e, "probe plan: an address that does not parse, left out");
                None
            }
        })
        .collect();
    let same = prober.targets().eq(targets.iter());
    status.probe_targets = targets.len();
    status.probe_plan_from_leader = true;
    if !same {
        tracing::info!(targets = targets.len(), "probe plan from the leader");
        prober.set_targets(targets, now);
    }
}

/// A probe discarded by the prober (the agent stalled while it was out).
fn discarded(
    status: &mut AgentStatus,
    metrics: &crate::metrics::AgentMetrics,
    target: &str,
    seq: u64,
) {
    status.probes_discarded += 1;
    metrics.probes_discarded.inc();
    tracing::info!(
        target,
        seq,
        "probe discarded: the agent stalled while it was out"
    );
}

/// The notification socket of a unit's process (`NOTIFY_SOCKET`).
fn notify_socket(cfg: &ShellConfig, unit: &str) -> PathBuf {
    cfg.work_dir.join(unit).join("notify.sock")
}

/// The holdfastd a unit runs: `binary` (an absolute path to an existing
/// file), or the agent's own `--holdfastd` when it is empty.
fn unit_program(cfg: &ShellConfig, binary: &str) -> Result<PathBuf, String> {
    if binary.is_empty() {
        return Ok(cfg.holdfastd.clone());
    }
    let p = PathBuf::from(binary);
    if !p.is_absolute() {
        return Err(format!("binary {binary:?}: not an absolute path"));
    }
    match std::fs::metadata(&p) {
        Ok(m) if m.is_file() => Ok(p),
        Ok(_) => Err(format!("binary {binary}: not a file")),
        Err(e) => Err(format!("binary {binary}: {e}")),
    }
}

/// Whether process `pid` runs `program` (`/proc/PID/exe`).
fn runs(pid: u32, program: &std::path::Path) -> bool {
    let exe = std::fs::read_link(format!("/proc/{pid}/exe"));
    let want = std::fs::canonicalize(program);
    matches!((exe, want), (Ok(a), Ok(b)) if a == b)
}

/// Whether the standby behind `sock` has followed the store (`show nsr`:
/// caught up, or following a stream of changes a poll behind); the error
/// says where it is.
fn standby_caught_up(sock: &std::path::Path, program: &std::path::Path) -> Result<(), String> {
    let answer = holdfast_api::client::request(
        sock,
        &holdfast_api::Request::ShowNsr,
        Duration::from_secs(2),
    )
    .map_err(|e| format!("standby of {} not answering yet: {e}", program.display()))?
    .into_result()?;
    let holdfast_api::Body::Nsr(n) = answer else {
        return Err("unexpected answer to show nsr".into());
    };
    match n.standby {
        Some(s) if s.caught_up || s.following => Ok(()),
        Some(s) => Err(format!(
            "standby of {} following the store: {} sessions, {} chunks applied, {} polls, the last {} ms{}",
            program.display(),
            s.sessions,
            s.chunks,
            s.polls,
            s.last_poll_ms,
            s.last_error
                .map(|e| format!(", last error: {e}"))
                .unwrap_or_default()
        )),
        None => Err(format!("the unit here is not a standby (role {})", n.role)),
    }
}

fn unit_spec(
    cfg: &ShellConfig,
    name: &str,
    config: &std::path::Path,
    takeover: Option<u64>,
    standby: bool,
    program: &std::path::Path,
) -> UnitSpec {
    let dir = cfg.work_dir.join(name);
    let _ = std::fs::create_dir_all(&dir);
    let mut args = vec![
        "--config".to_string(),
        config.display().to_string(),
        "--control-socket".to_string(),
        dir.join("holdfastd.sock").display().to_string(),
    ];
    if standby {
        args.push("--standby".into());
    } else if takeover.is_some() {
        args.push("--takeover".into());
        args.push("--takeover-ready-file".into());
        args.push(ready_file(cfg, name).display().to_string());
        if let Some(epoch) = takeover.filter(|e| *e > 0) {
            args.push("--takeover-epoch".into());
            args.push(epoch.to_string());
        }
    }
    UnitSpec {
        name: name.to_string(),
        netns: cfg.containers.get(name).map(|c| c.netns.clone()),
        program: program.to_path_buf(),
        args,
        env: vec![("RUST_LOG".into(), "info".into())],
        log: Some(dir.join("holdfastd.log")),
    }
}

/// The file a takeover's holdfastd creates once it is ready for the
/// service address (its guard is in place and its state loaded).
fn ready_file(cfg: &ShellConfig, unit: &str) -> PathBuf {
    cfg.work_dir.join(unit).join("takeover.ready")
}

/// Waits (without blocking the loop) until the takeover of `unit` (pid
/// `pid`) is ready for the service address, then reports the command done:
/// the address must not move before holdfastd guards its BGP ports, or a
/// peer's segment would meet no socket and be answered with a reset.
fn await_ready(path: PathBuf, pid: u32, id: u64, ev: mpsc::UnboundedSender<Event>) {
    tokio::spawn(async move {
        let start = Instant::now();
        let result = loop {
            if path.exists() {
                break Ok(());
            }
            if !std::path::Path::new(&format!("/proc/{pid}")).exists() {
                break Err(format!(
                    "holdfastd --takeover (pid {pid}) exited before it was ready"
                ));
            }
            if start.elapsed() > TAKEOVER_READY_WITHIN {
                break Err(format!(
                    "holdfastd --takeover (pid {pid}) not ready after {TAKEOVER_READY_WITHIN:?}"
                ));
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        };
        let _ = ev.send(Event::TakeoverReady { id, result });
    });
}

/// The loop's state that carrying out an output touches.
struct Ctx<'a> {
    cfg: &'a ShellConfig,
    core: &'a mut AgentCore,
    rt: &'a mut Units,
    status: &'a mut AgentStatus,
    renew_tx: &'a mpsc::UnboundedSender<bool>,
    report_tx: &'a mpsc::UnboundedSender<AgentReport>,
    ev_tx: &'a mpsc::UnboundedSender<Event>,
    metrics: &'a crate::metrics::AgentMetrics,
    fs: &'a mut FailsafeState,
}

/// The loop's side of the failsafe.
#[derive(Default)]
struct FailsafeState {
    /// The other host agents (`None` until etcd first answered).
    peers: Option<Peers>,
    /// Asks waiting for the core's answer, by the id given to the core.
    replies: BTreeMap<u64, tokio::sync::oneshot::Sender<(bool, u64)>>,
    next_id: u64,
}

fn carry_out(x: &mut Ctx<'_>, o: AgentOutput, now: Time) -> Vec<AgentOutput> {
    let Ctx {
        cfg,
        core,
        rt,
        status,
        renew_tx,
        report_tx,
        ev_tx,
        metrics,
        fs,
    } = x;
    match o {
        AgentOutput::Report(r) => {
            let _ = report_tx.send(r);
            Vec::new()
        }
        // The loop applies plans itself (it owns the prober).
        AgentOutput::ProbeTargets(_) => Vec::new(),
        AgentOutput::RenewLease => {
            let _ = renew_tx.send(core.fenced());
            core.handle(now, AgentInput::LeaseRenewalSent)
        }
        AgentOutput::Fence { id, unit } => {
            if id.is_none() {
                status.self_fenced_at_ms = Some(now.as_millis() as u64);
                metrics.self_fenced_units.inc();
            }
            let r = rt.rt.fence(&unit, Duration::from_secs(5));
            let mut out = Vec::new();
            let res = match r {
                Ok(exit) => {
                    out.extend(core.handle(now, AgentInput::UnitExited(exit)));
                    Ok(())
                }
                // Not running here (it exited, or a fence is repeated by a
                // new leader): fenced.
                Err(crate::runtime::RuntimeError::NoUnit(_)) => Ok(()),
                Err(e) => Err(e.to_string()),
            };
            if let Some(id) = id {
                out.extend(core.handle(now, AgentInput::Done { id, result: res }));
            }
            out
        }
        AgentOutput::FenceHung { unit } => match rt.rt.fence(&unit, Duration::from_secs(5)) {
            Ok(exit) => {
                tracing::warn!(%unit, pid = exit.pid, "hung unit fenced");
                core.handle(now, AgentInput::UnitExited(exit))
            }
            Err(e) => {
                tracing::warn!(%unit, error = %e, "fencing the hung unit");
                Vec::new()
            }
        },
        AgentOutput::Start {
            id,
            unit,
            config,
            standby,
            takeover,
            binary,
            caught_up,
            running_binary,
        } => {
            let program = match unit_program(cfg, &binary) {
                Ok(p) => p,
                Err(e) => return core.handle(now, AgentInput::Done { id, result: Err(e) }),
            };
            let mut out = Vec::new();
            let running = rt
                .rt
                .running()
                .into_iter()
                .find(|(u, _)| *u == unit)
                .map(|(_, pid)| pid);
            let ours = running.is_some_and(|pid| runs(pid, &program));
            // An upgrade: both builds must read what the other writes,
            // asked before anything starts.
            if caught_up && !ours {
                let checked = unit_program(cfg, &running_binary)
                    .and_then(|old| crate::schemas::compare_builds(&old, &program));
                if let Err(e) = checked {
                    tracing::warn!(%unit, binary = %program.display(), error = %e, "upgrade refused");
                    let result = Err(format!("{}{e}", holdfast_control_api::REFUSED));
                    return core.handle(now, AgentInput::Done { id, result });
                }
            }
            // A standby of another binary goes first: it serves no session.
            if standby && core.role(&unit) == Some(STANDBY) {
                if let Some(pid) = running.filter(|_| !ours) {
                    tracing::info!(%unit, pid, binary = %program.display(), "replacing the unit's standby with one of another binary");
                    if let Ok(exit) = rt.rt.fence(&unit, Duration::from_secs(5)) {
                        out.extend(core.handle(now, AgentInput::UnitExited(exit)));
                    }
                }
            }
            let dir = cfg.work_dir.join(&unit);
            let path = dir.join("holdfastd.toml");
            let ready = ready_file(cfg, &unit);
            let _ = std::fs::remove_file(&ready);
            let r = std::fs::create_dir_all(&dir)
                .and_then(|()| std::fs::write(&path, config))
                .map_err(|e| e.to_string())
                .and_then(|()| {
                    let spec = unit_spec(cfg, &unit, &path, takeover, standby, &program);
                    match rt.start(cfg, &spec, now) {
                        Ok(pid) => Ok(Some(pid)),
                        // A repeated command (a new leader carrying on): done.
                        Err(crate::runtime::RuntimeError::Running(_)) => Ok(None),
                        Err(e) => Err(e.to_string()),
                    }
                });
            let mut waiting = false;
            let res = r.map(|started| {
                let Some(pid) = started else { return };
                if takeover.is_some() {
                    await_ready(ready.clone(), pid, id, (*ev_tx).clone());
                    waiting = true;
                }
                out.extend(core.handle(
                    now,
                    AgentInput::UnitStarted {
                        unit,
                        pid,
                        role: if standby { STANDBY } else { PRIMARY }.into(),
                        epoch: takeover.unwrap_or(0),
                    },
                ));
            });
            // An upgrade's standby: done once it has followed the store
            // (the controller asks again until then).
            let res = match res {
                Ok(()) if caught_up => standby_caught_up(&dir.join("holdfastd.sock"), &program),
                other => other,
            };
            if !waiting {
                out.extend(core.handle(now, AgentInput::Done { id, result: res }));
            }
            out
        }
        AgentOutput::Address {
            id,
            unit,
            addresses,
            add,
            interface,
        } => {
            let res = match cfg.containers.get(&unit) {
                Some(c) => move_addresses(&addresses, add, &c.interface, Some(&c.netns)),
                None if interface.is_empty() => {
                    move_addresses(&addresses, add, &cfg.interface, None)
                }
                None => move_addresses(&addresses, add, &interface, None),
            };
            core.handle(now, AgentInput::Done { id, result: res })
        }
        AgentOutput::Switchover { id, unit } => {
            let sock = cfg.work_dir.join(&unit).join("holdfastd.sock");
            let res = control(
                &sock,
                &holdfast_api::Request::NsrSwitchover { timeout_secs: None },
            );
            core.handle(now, AgentInput::Done { id, result: res })
        }
        AgentOutput::Promote { id, unit, epoch } => {
            let sock = cfg.work_dir.join(&unit).join("holdfastd.sock");
            let ready = ready_file(cfg, &unit);
            let _ = std::fs::remove_file(&ready);
            let pid = rt
                .rt
                .running()
                .into_iter()
                .find(|(u, _)| *u == unit)
                .map(|(_, p)| p);
            let req = holdfast_api::Request::NsrTakeover {
                epoch: Some(epoch),
                ready_file: Some(ready.display().to_string()),
            };
            match (pid, control(&sock, &req)) {
                (Some(pid), Ok(())) => {
                    tracing::info!(%unit, pid, epoch, "takeover through the preheated standby");
                    await_ready(ready, pid, id, (*ev_tx).clone());
                    Vec::new()
                }
                (_, r) => {
                    // The standby cannot take over: it goes, so that the
                    // controller's retry starts a cold `--takeover`.
                    let why = r.err().unwrap_or_else(|| "the standby is gone".into());
                    tracing::warn!(%unit, error = %why, "standby takeover failed: fencing the standby");
                    let mut out = Vec::new();
                    if let Ok(exit) = rt.rt.fence(&unit, Duration::from_secs(5)) {
                        out.extend(core.handle(now, AgentInput::UnitExited(exit)));
                    }
                    out.extend(core.handle(
                        now,
                        AgentInput::Done {
                            id,
                            result: Err(format!("standby takeover: {why}")),
                        },
                    ));
                    out
                }
            }
        }
        AgentOutput::AskFailsafe { units } => {
            // Peers never read from etcd: nobody to ask, nothing confirmed.
            if let Some(peers) = fs.peers.clone() {
                let (me, ev) = (cfg.core.host.clone(), (*ev_tx).clone());
                let timeout = cfg.core.watchdog.renew;
                let tls = cfg.tls.as_ref().map(|t| t.client(Role::Agent));
                tokio::spawn(async move {
                    let result = failsafe::round(me, peers, units, timeout, tls).await;
                    let _ = ev.send(Event::FailsafeRound { sent: now, result });
                });
            }
            Vec::new()
        }
        AgentOutput::FailsafeAnswer { id, agree, promise } => {
            if let Some(reply) = fs.replies.remove(&id) {
                let _ = reply.send((agree, promise.as_millis() as u64));
            }
            Vec::new()
        }
    }
}

/// Adds (and announces) or deletes the service addresses on `interface`,
/// in the network namespace `netns` when given (a unit's container), over
/// rtnetlink: an add replaces an address that is there (an IPv6 one
/// without duplicate address detection, so that it can be announced at
/// once), a delete of an absent one does nothing.
fn move_addresses(
    addresses: &[String],
    add: bool,
    interface: &str,
    netns: Option<&str>,
) -> Result<(), String> {
    let mut parsed = Vec::with_capacity(addresses.len());
    for a in addresses {
        let (ip, len) = a.split_once('/').unwrap_or((a.as_str(), ""));
        let ip: std::net::IpAddr = ip.parse().map_err(|e| format!("{a}: {e}"))?;
        let full = if ip.is_ipv4() { 32 } else { 128 };
        let len: u8 = match len {
            "" => full,
            l => l
                .parse()
                .ok()
                .filter(|l| *l <= full)
                .ok_or_else(|| format!("{a}: bad prefix length"))?,
        };
        parsed.push((ip, len));
    }
    let ifname = interface.to_string();
    let apply = move || -> Result<(), String> {
        let index = holdfast_linux::device::ifindex(&ifname)
            .map_err(|e| format!("interface {ifname}: {e}"))?;
        for (ip, len) in parsed {
            holdfast_linux::rtnl::set_address(add, index, ip, len).map_err(|e| {
                let verb = if add { "adding" } else { "deleting" };
                format!("{verb} {ip}/{len} on {ifname}: {e}")
            })?;
            if add {
                holdfast_linux::announce_address(&ifname, ip)
                    .map_err(|e| format!("announcing {ip}: {e}"))?;
            }
        }
        Ok(())
    };
    match netns {
        Some(ns) => holdfast_linux::netns::in_netns(ns, apply)
            .map_err(|e| format!("network namespace {ns}: {e}"))
            .and_then(|r| r),
        None => apply(),
    }
}

/// One request to a unit's control socket (`nsr switchover`, `nsr
/// takeover`); an error answer is an error.
fn control(sock: &std::path::Path, req: &holdfast_api::Request) -> Result<(), String> {
    holdfast_api::client::request(sock, req, Duration::from_secs(10))
        .map_err(|e| e.to_string())?
        .into_result()
        .map(|_| ())
}
