//! The agents' `Attach` streams (`holdfast.control.v1`), served by every
//! replica and accepted only by the one that may act as leader.
//!
//! Each attached agent has a [`Link`]: the sender of its command stream,
//! its Hello, its last heartbeat, and the commands waiting for their
//! results. [`Hub::command`] sends a command carrying the leader's token
//! and waits (bounded) for the agent's `CommandResult`. What the agents
//! measure (their IP SLA probes, and their units' process states from the
//! unit events) goes to the leader's localization ([`crate::sense`])
//! through the receiver [`Hub::new`] returns, as `holdfast_control`
//! measurements stamped on arrival. The leader's beat says it takes probe
//! outcomes in the agents' heartbeats (`LeaderBeat.takes_measurements`,
//! issue 29); each of those is dated its `waited_ms` before its
//! heartbeat's arrival, by its agent's own clock. When the replica stops leading, every stream is closed so
//! the agents attach to the new leader.
//!
//! While the replica may act, every stream carries its beat
//! ([`BEAT`], a `LeaderBeat` command with the token, the first at once;
//! [`Hub::beats`], one timer for every stream):
//! an agent that hears nothing for its `--leader-silence-ms` leaves (a
//! frozen leader's TCP connections stay open, its beats stop), and an
//! agent learns the new leader's token the moment its stream opens.
//!
//! With mutual TLS ([`Hub::require_certs`], issue 30) a stream's Hello
//! must name the host its client certificate names
//! ([`holdfast_control_api::tls::check_claim`]): an agent certificate for
//! `a` cannot attach as `b`, so nor report for `b`'s units. A refused
//! attempt is logged (warn, "attach refused") with the certificate's name
//! and the host claimed, and the stream ends with `PERMISSION_DENIED`.

use std::collections::{BTreeMap, HashMap};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use holdfast_control::{HostId, Measurement, ProcessState, Target, UnitId, Vantage};
use holdfast_control_api::tls::{check_claim, Peer, Role};
use holdfast_control_api::v1::controller_server::Controller;
use holdfast_control_api::v1::{
    self, agent_report, command, unit_event, AgentReport, Command, ProbeTarget, ProbeTargets,
};
use tokio::sync::{mpsc, oneshot};
use tokio_stream::Stream;
use tonic::{Request, Response, Status, Streaming};

use crate::fence::Token;

/// An agent whose last heartbeat is older than this is not reachable (it
/// sends one every 100 ms by default).
pub const LIVE: Duration = Duration::from_secs(1);

/// How often the leader beats on every stream.
pub const BEAT: Duration = Duration::from_millis(100);

type CommandStream = Pin<Box<dyn Stream<Item = Result<Command, Status>> + Send>>;

/// One attached agent.
struct Link {
    /// Distinguishes this stream from a later one of the same host.
    session: u64,
    tx: mpsc::UnboundedSender<Result<Command, Status>>,
    agent_server: bool,
    last_heartbeat: Instant,
    pending: HashMap<u64, oneshot::Sender<Result<(), String>>>,
    /// The units its agent runs, by name: their role (`primary`, or
    /// `backup` for a preheated standby).
    units: BTreeMap<String, String>,
    /// Its probes report `refused` (`Hello.reports_refused`).
    reports_refused: bool,
    /// It takes the leader's probe plan (`Hello.probe_plans`), and the
    /// list last sent to it.
    probe_plans: bool,
    plan_sent: Option<Vec<ProbeTarget>>,
}

/// A measurement, as the localization sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Observed {
    /// When it arrived (or, for the controller's own, when it was sent).
    pub at: Instant,
    pub what: Measurement,
    /// For a process state: the host whose agent reported it (it counts
    /// only from the unit's primary host).
    pub host: Option<String>,
}

/// Parses an agent's target name: `host:NAME` or `unit:NAME`.
pub fn parse_target(name: &str) -> Option<Target> {
    match name.split_once(':') {
        Some(("host", h)) if !h.is_empty() => Some(Target::Host(HostId::new(h))),
        Some(("unit", u)) if !u.is_empty() => Some(Target::Unit(UnitId::new(u))),
        _ => None,
    }
}

#[derive(Default)]
struct Inner {
    links: BTreeMap<String, Link>,
    /// This term's probe plans ([`crate::probes`]).
    plans: Option<crate::probes::Plans>,
    next_session: u64,
    next_id: u64,
}

/// The registry of attached agents (shared by the service and the worker).
#[derive(Clone)]
pub struct Hub {
    inner: Arc<Mutex<Inner>>,
    may_act: Arc<dyn Fn() -> Option<Token> + Send + Sync>,
    observed: mpsc::UnboundedSender<Observed>,
    /// Whether the server requires client certificates (then each Hello
    /// is checked against its certificate).
    tls: bool,
    /// The longest transit of a heartbeat (the agent's send time to its
    /// arrival, by the two hosts' clocks) since [`Hub::take_max_transit`],
    /// in ms.
    max_transit_ms: Arc<std::sync::atomic::AtomicU64>,
}

/// The role a preheated standby reports.
pub const STANDBY_ROLE: &str = "backup";
/// The role a unit's primary process reports.
pub const PRIMARY_ROLE: &str = "primary";

fn lock(m: &Mutex<Inner>) -> std::sync::MutexGuard<'_, Inner> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// What an attached agent looks like from the controller (status file).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct AgentView {
    pub host: String,
    pub agent_server: bool,
    /// Milliseconds since its last heartbeat.
    pub heartbeat_age_ms: u64,
}

impl Hub {
    /// A hub that accepts streams while `may_act` gives a token; the
    /// agents' measurements go to the returned receiver.
    pub fn new(
        may_act: Arc<dyn Fn() -> Option<Token> + Send + Sync>,
    ) -> (Hub, mpsc::UnboundedReceiver<Observed>) {
        let (observed, rx) = mpsc::unbounded_channel();
        (
            Hub {
                inner: Arc::new(Mutex::new(Inner::default())),
                may_act,
                observed,
                tls: false,
                max_transit_ms: Arc::default(),
            },
            rx,
        )
    }

    /// The hub of a server that requires client certificates: a Hello
    /// must name the host of its stream's certificate.
    pub fn require_certs(mut self, on: bool) -> Hub {
        self.tls = on;
        self
    }

    /// The fencing token while this replica may act as leader.
    pub fn may_act(&self) -> Option<Token> {
        (self.may_act)()
    }

    /// The longest transit of an agent's heartbeat since the last call: a
    /// leader that cannot keep up with its agents' reports finds them
    /// waiting in its streams, where the measurements' arrival times do not
    /// show it. (A measurement's time is its probe's, up to a report
    /// period earlier.)
    pub fn take_max_transit(&self) -> Duration {
        Duration::from_millis(
            self.max_transit_ms
                .swap(0, std::sync::atomic::Ordering::Relaxed),
        )
    }

    fn transit(&self, sent_unix_ms: u64) {
        if sent_unix_ms == 0 {
            return;
        }
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        self.max_transit_ms.fetch_max(
            now.saturating_sub(sent_unix_ms),
            std::sync::atomic::Ordering::Relaxed,
        );
    }

    /// A sender for measurements the replica takes itself.
    pub fn observer(&self) -> mpsc::UnboundedSender<Observed> {
        self.observed.clone()
    }

    /// How long since `host`'s agent's last heartbeat, if it is attached.
    pub fn heartbeat_age(&self, host: &str) -> Option<Duration> {
        lock(&self.inner)
            .links
            .get(host)
            .map(|l| l.last_heartbeat.elapsed())
    }

    /// The attached agents.
    pub fn agents(&self) -> Vec<AgentView> {
        let now = Instant::now();
        lock(&self.inner)
            .links
            .iter()
            .map(|(h, l)| AgentView {
                host: h.clone(),
                agent_server: l.agent_server,
                heartbeat_age_ms: now.duration_since(l.last_heartbeat).as_millis() as u64,
            })
            .collect()
    }

    /// Whether `host`'s agent is attached and heard from within
    /// [`LIVE`] (a stream cut off by the network stays open until TCP gives
    /// up; its heartbeats stop at once).
    pub fn attached(&self, host: &str) -> bool {
        lock(&self.inner)
            .links
            .get(host)
            .is_some_and(|l| l.last_heartbeat.elapsed() < LIVE)
    }

    /// The role of `unit` on `host`'s agent, if it runs there (as its
    /// agent last reported).
    pub fn runs(&self, host: &str, unit: &str) -> Option<String> {
        lock(&self.inner)
            .links
            .get(host)
            .and_then(|l| l.units.get(unit).cloned())
    }

    /// Whether an attached agent takes probe plans (`Hello.probe_plans`).
    pub fn wants_plans(&self) -> bool {
        lock(&self.inner).links.values().any(|l| l.probe_plans)
    }

    /// This term's probe plans from now on (computed while leading with
    /// `token`: ignored once that term is over): each agent that takes
    /// plans gets its list when it differs from the one it was last sent.
    pub fn set_probe_plans(&self, token: Token, plans: crate::probes::Plans) {
        if self.may_act() != Some(token) {
            return;
        }
        let mut g = lock(&self.inner);
        g.plans = Some(plans);
        let hosts: Vec<String> = g.links.keys().cloned().collect();
        for h in hosts {
            self.send_plan(&mut g, &h, None);
        }
    }

    /// Sends `host`'s plan on its stream (`session`: only that one) if it
    /// takes plans and its list changed.
    fn send_plan(&self, g: &mut Inner, host: &str, session: Option<u64>) {
        let Some(token) = self.may_act() else {
            return;
        };
        let Some(targets) = g.plans.as_ref().and_then(|p| p.get(host)) else {
            return;
        };
        let Some(l) = g
            .links
            .get_mut(host)
            .filter(|l| l.probe_plans && session.is_none_or(|s| s == l.session))
        else {
            return;
        };
        if l.plan_sent.as_ref() == Some(targets) {
            return;
        }
        let c = Command {
            token: u64::try_from(token.0).unwrap_or(0),
            id: 0,
            body: Some(command::Body::ProbeTargets(ProbeTargets {
                targets: targets.clone(),
            })),
        };
        if l.tx.send(Ok(c)).is_ok() {
            tracing::debug!(host, targets = targets.len(), "probe plan sent");
            l.plan_sent = Some(targets.clone());
        }
    }

    /// Closes every stream (the replica no longer leads).
    pub fn close_all(&self) {
        let mut g = lock(&self.inner);
        g.plans = None;
        for (_, l) in std::mem::take(&mut g.links) {
            let _ =
                l.tx.send(Err(Status::failed_precondition("no longer the leader")));
        }
    }

    /// Sends `body` to `host`'s agent with `token`, and waits up to
    /// `timeout` for its result.
    pub async fn command(
        &self,
        host: &str,
        token: Token,
        body: command::Body,
        timeout: Duration,
    ) -> Result<(), String> {
        let (tx, rx) = oneshot::channel();
        {
            let mut g = lock(&self.inner);
            g.next_id += 1;
            let id = g.next_id;
            let Some(l) = g.links.get_mut(host) else {
                return Err(format!("agent {host} is not attached"));
            };
            l.pending.insert(id, tx);
            let c = Command {
                token: u64::try_from(token.0).unwrap_or(0),
                id,
                body: Some(body),
            };
            if l.tx.send(Ok(c)).is_err() {
                return Err(format!("agent {host}'s stream is closed"));
            }
        }
        match tokio::time::timeout(timeout, rx).await {
            Ok(Ok(r)) => r,
            Ok(Err(_)) => Err(format!("agent {host} went away")),
            Err(_) => Err(format!("agent {host} did not answer in {timeout:?}")),
        }
    }

    fn report(&self, host: &str, session: u64, r: AgentReport) {
        let mut g = lock(&self.inner);
        let Some(l) = g.links.get_mut(host).filter(|l| l.session == session) else {
            return;
        };
        match r.body {
            Some(agent_report::Body::Heartbeat(b)) => {
                let now = Instant::now();
                l.last_heartbeat = now;
                self.transit(b.sent_unix_ms);
                // Each dated when it came to its agent, by the agent's
                // own clock (no two hosts' clocks compared).
                for m in b.measurements {
                    let waited = Duration::from_millis(u64::from(m.waited_ms));
                    let at = now.checked_sub(waited).unwrap_or(now);
                    self.measured(l, host, m, at);
                }
            }
            Some(agent_report::Body::Result(res)) => {
                if let Some(tx) = l.pending.remove(&res.id) {
                    let _ = tx.send(if res.ok { Ok(()) } else { Err(res.error) });
                }
            }
            Some(agent_report::Body::UnitEvent(e)) => {
                if matches!(
                    unit_event::Kind::try_from(e.kind),
                    Ok(unit_event::Kind::Started)
                ) {
                    l.units.insert(e.unit.clone(), e.role.clone());
                } else {
                    l.units.remove(&e.unit);
                }
                let state = match unit_event::Kind::try_from(e.kind) {
                    Ok(unit_event::Kind::Started) => Some(ProcessState::Running),
                    Ok(unit_event::Kind::Exited) => Some(ProcessState::Exited),
                    Ok(unit_event::Kind::ContainerGone) => Some(ProcessState::ContainerGone),
                    // No watchdog ping: the agent killed it (issue 25).
                    Ok(unit_event::Kind::Hung) => Some(ProcessState::Hung),
                    // Fenced on purpose (a migration, or the agent's
                    // watchdog, which the lease expiry reports).
                    _ => None,
                };
                tracing::info!(host, unit = %e.unit, pid = e.pid, kind = e.kind, code = e.code, signal = e.signal, role = %e.role, "unit event");
                // A preheated standby's events are not the unit's.
                if let Some(state) = state.filter(|_| e.role != STANDBY_ROLE) {
                    let _ = self.observed.send(Observed {
                        at: Instant::now(),
                        what: Measurement::Process {
                            unit: UnitId::new(e.unit),
                            state,
                        },
                        host: Some(host.to_string()),
                    });
                }
            }
            Some(agent_report::Body::Measurement(m)) => self.measured(l, host, m, Instant::now()),
            Some(agent_report::Body::Hello(_)) | None => {}
        }
    }

    /// One probe outcome of `host`'s agent, dated `at`.
    fn measured(&self, l: &Link, host: &str, m: v1::Measurement, at: Instant) {
        let from = if l.agent_server {
            Vantage::AgentServer
        } else {
            Vantage::Agent(HostId::new(host))
        };
        let Some(to) = parse_target(&m.target) else {
            return;
        };
        // A probe of a unit from an agent that tells a reset from a
        // handshake also checks holdfastd's service there.
        if let (Target::Unit(unit), true) = (&to, l.reports_refused) {
            let _ = self.observed.send(Observed {
                at,
                what: Measurement::Service {
                    from: from.clone(),
                    unit: unit.clone(),
                    answers: m.ok && !m.refused,
                },
                host: None,
            });
        }
        let _ = self.observed.send(Observed {
            at,
            what: Measurement::Probe { from, to, ok: m.ok },
            host: None,
        });
    }

    /// The leader's beat, while the replica may act.
    fn beat_command(&self) -> Option<Command> {
        let token = self.may_act()?;
        Some(Command {
            token: u64::try_from(token.0).unwrap_or(0),
            id: 0,
            body: Some(command::Body::Beat(holdfast_control_api::v1::LeaderBeat {
                takes_measurements: true,
            })),
        })
    }

    /// One beat on every stream, now, while the replica may act.
    fn beat_all(&self) {
        let Some(c) = self.beat_command() else {
            return;
        };
        for l in lock(&self.inner).links.values() {
            let _ = l.tx.send(Ok(c.clone()));
        }
    }

    /// The leader's beat on every stream every [`BEAT`] (one timer for all
    /// of them: a task per stream was a thousand timers at a thousand
    /// agents, issue 29); never returns.
    pub async fn beats(self) {
        let mut tick = tokio::time::interval(BEAT);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
        loop {
            tick.tick().await;
            self.beat_all();
        }
    }

    /// The first beat on a new stream, at once: it tells the agent the
    /// leader's token.
    fn beat(&self, host: &str, session: u64) {
        let Some(c) = self.beat_command() else {
            return;
        };
        let g = lock(&self.inner);
        if let Some(l) = g.links.get(host).filter(|l| l.session == session) {
            let _ = l.tx.send(Ok(c));
        }
    }

    fn detach(&self, host: &str, session: u64) {
        let mut g = lock(&self.inner);
        if g.links.get(host).is_some_and(|l| l.session == session) {
            g.links.remove(host);
            tracing::info!(host, "agent detached");
        }
    }
}

#[tonic::async_trait]
impl Controller for Hub {
    type AttachStream = CommandStream;

    async fn attach(
        &self,
        request: Request<Streaming<AgentReport>>,
    ) -> Result<Response<Self::AttachStream>, Status> {
        if (self.may_act)().is_none() {
            return Err(Status::failed_precondition("not the leader"));
        }
        let peer = Peer::of(&request, self.tls);
        let mut inbound = request.into_inner();
        let (tx, rx) = mpsc::unbounded_channel();
        let hub = self.clone();
        // The response (the command stream) goes back at once: the agent
        // sends its Hello once its stream is open.
        tokio::spawn(async move {
            let first = tokio::time::timeout(Duration::from_secs(5), inbound.message()).await;
            let hello = match first {
                Ok(Ok(Some(AgentReport {
                    body: Some(agent_report::Body::Hello(h)),
                }))) => h,
                Ok(Ok(_)) => {
                    let _ = tx.send(Err(Status::invalid_argument(
                        "the first report must be a Hello",
                    )));
                    return;
                }
                Ok(Err(e)) => {
                    let _ = tx.send(Err(e));
                    return;
                }
                Err(_) => {
                    let _ = tx.send(Err(Status::deadline_exceeded("no Hello")));
                    return;
                }
            };
            if hello.schema > holdfast_control_api::SCHEMA {
                let _ = tx.send(Err(Status::failed_precondition(format!(
                    "agent speaks schema {}, this controller {}",
                    hello.schema,
                    holdfast_control_api::SCHEMA
                ))));
                return;
            }
            if let Err(r) = check_claim(&peer, Role::Agent, &hello.host) {
                tracing::warn!(cert = %peer, claimed = %hello.host, error = %r, "attach refused");
                let _ = tx.send(Err(Status::permission_denied(r.to_string())));
                return;
            }
            let host = hello.host.clone();
            let session = {
                let mut g = lock(&hub.inner);
                g.next_session += 1;
                let session = g.next_session;
                if let Some(old) = g.links.insert(
                    host.clone(),
                    Link {
                        session,
                        tx,
                        agent_server: hello.agent_server,
                        last_heartbeat: Instant::now(),
                        pending: HashMap::new(),
                        units: hello
                            .units
                            .iter()
                            .map(|u| (u.unit.clone(), u.role.clone()))
                            .collect(),
                        reports_refused: hello.reports_refused,
                        probe_plans: hello.probe_plans,
                        plan_sent: None,
                    },
                ) {
                    let _ = old
                        .tx
                        .send(Err(Status::aborted("a newer stream of this agent")));
                }
                session
            };
            hub.beat(&host, session);
            hub.send_plan(&mut lock(&hub.inner), &host, Some(session));
            tracing::info!(
                host,
                cert = %peer,
                units = hello.units.len(),
                highest_token = hello.highest_token,
                version = %hello.version,
                "agent attached"
            );
            while let Ok(Some(r)) = inbound.message().await {
                hub.report(&host, session, r);
            }
            hub.detach(&host, session);
        });
        let out = tokio_stream::wrappers::UnboundedReceiverStream::new(rx);
        Ok(Response::new(Box::pin(out)))
    }
}

#[cfg(test)]
#[path = "hub_tests.rs"]
mod tests;
