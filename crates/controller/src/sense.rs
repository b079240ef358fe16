//! The leader's failure localization (TENSOR §3.3.2 "inter-component
//! measurements", §3.3.3 "failure location"): the I/O shell around the pure
//! [`holdfast_control::Localizer`].
//!
//! Three vantage points feed it:
//! - **the controller** ([`sensor`], only while the replica may act): every
//!   probe interval (100 ms by default) a heartbeat per host — whether its
//!   agent's Attach stream delivered a heartbeat within 2.5 intervals — and
//!   per unit a TCP handshake with holdfastd on the unit's service address
//!   (its BGP port). A completed handshake answers; a reset (nothing
//!   listens: the process is gone) or a timeout misses. A unit whose
//!   service an agent of another host (or the agent server) checks — its
//!   probes tell a reset from a handshake (`Hello.reports_refused`):
//!   [`holdfast_control::Measurement::Service`] — gets no handshake from
//!   the controller (re-read at each sync): at 1,000 units they were 10,000
//!   a second, most of the leader's core (issue 29, `holdfast-ctl-sim`);
//! - **the agents** on the hosts: their units' process states (pidfd, and
//!   whether the container went with the process), counted only from the
//!   unit's primary host, and their IP SLA probes of the other hosts and
//!   units ([`crate::hub`]);
//! - **the agent server**'s agent: IP SLA probes of every host and unit.
//!
//! [`Localization`] re-reads the topology from etcd every
//! [`SYNC_EVERY`] (hosts, failed hosts, each unit's primary; a unit with a
//! migration under way is not judged), feeds every measurement to the
//! localizer with the time it arrived, and polls it for the ends of host
//! confirmation windows. The worker acts on the verdicts that act and
//! records every verdict in the replica's status.
//!
//! The controller's own measurements are its own clock's: a replica that
//! was stopped or starved (SIGSTOP, a long scheduling delay) would count
//! its own stall as misses (agents' heartbeats that wait in its sockets, a
//! connect timeout that fired late). So the [`sensor`] discards what it
//! measured across a late tick: a unit heartbeat whose connect took more
//! than 1.5 intervals, or that was under way when a tick came late, and
//! the host heartbeats for three intervals after a late tick.
//!
//! A new leader knows no unit's process state until the unit's agent has
//! attached and re-reported it. For [`SenseConfig::grace`] after the
//! election, a measurement of a unit whose primary host's agent has not
//! attached yet is dropped: an exited unit would otherwise get a
//! container-network verdict from the other vantage points' probes, the
//! exit report arriving a moment later (seen in `holdfast lab chaos
//! --kinds leader-freeze`, the agents attaching to the new leader one
//! after the other).
//!
//! # Known issues
//! - A new leader starts with no measurements: for a host, the first
//!   verdict needs fresh misses after the election (the lease expiry, which
//!   etcd keeps across leaders, still applies).
//! - The controller's unit heartbeat is a TCP handshake with holdfastd's BGP
//!   port, not a gRPC call: holdfastd has no gRPC service of its own.
//! - At most [`UNIT_HEARTBEATS_PER_TICK`] unit heartbeats start per
//!   interval: beyond that many units whose service no agent checks, each
//!   unit's heartbeat comes less often, and an application failure's
//!   confirmation by the controller alone takes longer in proportion.
//! - Beyond [`SWEEP_TARGETS`] hosts and units, the sweep that finds what
//!   time alone changes runs less often than once per probe interval
//!   (every 600 ms at 1,000 hosts and 10,000 units): a verdict that waits
//!   on a path going stale, or on an answer that repeats, comes up to that
//!   much later.

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use holdfast_control::{
    HostId, LocalizeConfig, Localizer, Measurement, Millis, Target, UnitId, Verdict,
};
use serde::{Deserialize, Serialize};

use crate::hub::{Hub, Observed};
use crate::state::{AgentRecord, UnitRecord};
use crate::store::{Store, StoreError};

/// How often the topology is re-read from etcd.
pub const SYNC_EVERY: Duration = Duration::from_millis(300);

/// The most unit heartbeats (TCP handshakes) the controller starts per
/// probe interval; more units than that are taken in turn. After an
/// election no agent's service probe has arrived yet, so every unit is a
/// target: at 10,000 units that was 100,000 handshakes a second, which
/// kept a thousand agents from attaching to the new leader (issue 29,
/// `holdfast-ctl-sim`).
pub const UNIT_HEARTBEATS_PER_TICK: usize = 256;

/// How often a host whose agent's heartbeats keep coming is reported
/// answering (inside the localizer's freshness, 1 s by default; a third of
/// it when it is shorter).
pub const HEARTBEAT_REFRESH: Duration = Duration::from_millis(300);

/// The hosts and units a sweep of the localizer takes per probe interval
/// ([`Localization::poll`]).
pub const SWEEP_TARGETS: usize = 2_000;

/// Settings of the localization.
#[derive(Debug, Clone, Copy)]
pub struct SenseConfig {
    /// The localizer's thresholds (its `probe_interval_ms` is the
    /// controller's heartbeat period too).
    pub localize: LocalizeConfig,
    /// The port of the controller's unit heartbeat (holdfastd's BGP port).
    pub unit_port: u16,
    /// After an election, how long to wait for the agents to attach before
    /// host heartbeats count.
    pub grace: Duration,
}

impl Default for SenseConfig {
    fn default() -> Self {
        SenseConfig {
            localize: LocalizeConfig::default(),
            unit_port: 179,
            grace: Duration::from_secs(2),
        }
    }
}

impl SenseConfig {
    fn interval(&self) -> Duration {
        Duration::from_millis(self.localize.probe_interval_ms.max(10))
    }
}

/// What the controller measures itself (shared by the worker, which keeps
/// it current, and the [`sensor`]).
#[derive(Debug, Clone, Default)]
pub struct Targets {
    /// Hosts that are not failed.
    pub hosts: Vec<String>,
    /// Units (not migrating) whose service no agent checks, and their
    /// service address.
    pub units: Vec<(String, SocketAddr)>,
}

/// Shared [`Targets`].
pub type SharedTargets = Arc<Mutex<Targets>>;

fn lock(t: &SharedTargets) -> std::sync::MutexGuard<'_, Targets> {
    t.lock().unwrap_or_else(|p| p.into_inner())
}

/// The controller's own heartbeats, while the replica may act; never
/// returns.
pub async fn sensor(hub: Hub, targets: SharedTargets, cfg: SenseConfig) {
    let tx = hub.observer();
    let interval = cfg.interval();
    let mut tick = tokio::time::interval(interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    let mut leading_since: Option<Instant> = None;
    let mut last_tick = Instant::now();
    // Bumped at each late tick: a unit heartbeat under way across it is
    // dropped.
    let stalls = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let mut quiet_until = Instant::now();
    // Where the next tick's unit heartbeats start in the target list.
    let mut cursor = 0usize;
    // A third of the localizer's freshness at most.
    let refresh = HEARTBEAT_REFRESH
        .min(Duration::from_millis(cfg.localize.stale_after_ms / 3))
        .max(interval);
    // Each host's last heartbeat measurement sent: answered, and when.
    let mut sent: BTreeMap<String, (bool, Instant)> = BTreeMap::new();
    loop {
        tick.tick().await;
        let now = Instant::now();
        if now.duration_since(last_tick) > interval * 2 {
            stalls.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            quiet_until = now + interval * 3;
            tracing::info!(
                late_ms = (now.duration_since(last_tick) - interval).as_millis() as u64,
                "the sensor's tick came late (this replica stalled): its measurements across it are dropped"
            );
        }
        last_tick = now;
        if hub.may_act().is_none() {
            leading_since = None;
            sent.clear();
            continue;
        }
        let since = *leading_since.get_or_insert_with(Instant::now);
        let t = lock(&targets).clone();
        if since.elapsed() >= cfg.grace && now >= quiet_until {
            for h in &t.hosts {
                let ok = hub
                    .heartbeat_age(h)
                    .is_some_and(|age| age <= interval * 5 / 2);
                // A miss every tick (misses count up); an answer when it
                // changes, else every `refresh` (1,000 hosts' answers were
                // 10,000 measurements a second).
                let last = sent.get(h).copied();
                if ok
                    && last.is_some_and(|(was_ok, at): (bool, Instant)| {
                        was_ok && now.duration_since(at) < refresh
                    })
                {
                    continue;
                }
                sent.insert(h.clone(), (ok, now));
                let _ = tx.send(Observed {
                    at: Instant::now(),
                    what: Measurement::Heartbeat {
                        to: Target::Host(HostId::new(h.clone())),
                        ok,
                    },
                    host: None,
                });
            }
        }
        let n = t.units.len();
        let take = n.min(UNIT_HEARTBEATS_PER_TICK);
        cursor = if n == 0 { 0 } else { cursor % n };
        let batch: Vec<(String, SocketAddr)> = t
            .units
            .into_iter()
            .cycle()
            .skip(cursor)
            .take(take)
            .collect();
        cursor += take;
        for (unit, addr) in batch {
            let tx = tx.clone();
            let stalls = stalls.clone();
            let gen = stalls.load(std::sync::atomic::Ordering::SeqCst);
            tokio::spawn(async move {
                let started = Instant::now();
                let ok = matches!(
                    tokio::time::timeout(interval, tokio::net::TcpStream::connect(addr)).await,
                    Ok(Ok(_))
                );
                if started.elapsed() > interval * 3 / 2
                    || stalls.load(std::sync::atomic::Ordering::SeqCst) != gen
                {
                    return;
                }
                let _ = tx.send(Observed {
                    at: Instant::now(),
                    what: Measurement::Heartbeat {
                        to: Target::Unit(UnitId::new(unit)),
                        ok,
                    },
                    host: None,
                });
            });
        }
    }
}

/// A verdict as the status file shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VerdictView {
    /// The verdict, with its evidence.
    #[serde(flatten)]
    pub verdict: Verdict,
    /// One of TENSOR's five kinds or `hung` (the controller acts), or a
    /// note.
    pub kind: Option<holdfast_control::FailureKind>,
    /// From the first bad measurement to the verdict.
    pub detection_ms: u64,
    /// Wall-clock time of the verdict, ms since the Unix epoch.
    pub unix_ms: u64,
}

/// The localizer and what it needs from etcd.
pub struct Localization {
    cfg: SenseConfig,
    loc: Localizer,
    t0: Instant,
    synced: Option<Instant>,
    /// Each judged unit's primary host.
    primaries: BTreeMap<String, String>,
    targets: SharedTargets,
    /// When this replica was elected (its store epoch written).
    elected: Option<Instant>,
    /// Each unit's last controller heartbeat: answered, and when.
    unit_heartbeats: BTreeMap<String, (bool, Instant)>,
    /// When every host and unit was last evaluated.
    evaluated: Option<Instant>,
    /// The agents' probe plans of this term.
    planner: crate::probes::Planner,
}

impl Localization {
    /// A localization with no topology yet.
    pub fn new(cfg: SenseConfig, targets: SharedTargets) -> Localization {
        Localization {
            cfg,
            loc: Localizer::new(cfg.localize),
            t0: Instant::now(),
            synced: None,
            primaries: BTreeMap::new(),
            targets,
            elected: None,
            unit_heartbeats: BTreeMap::new(),
            evaluated: None,
            planner: crate::probes::Planner::default(),
        }
    }

    /// Forgets everything (the replica stopped leading).
    pub fn reset(&mut self) {
        *self = Localization::new(self.cfg, self.targets.clone());
        *lock(&self.targets) = Targets::default();
    }

    fn ms(&self, at: Instant) -> Millis {
        at.saturating_duration_since(self.t0).as_millis() as Millis
    }

    /// Re-reads the topology when [`SYNC_EVERY`] has passed, and gives the
    /// hub new probe plans when they changed ([`crate::probes`]).
    pub async fn sync(&mut self, store: &mut Store, hub: &Hub) -> Result<(), StoreError> {
        if self.synced.is_some_and(|t| t.elapsed() < SYNC_EVERY) {
            return Ok(());
        }
        let (mut state, records, agents) = crate::placement::read_all(store).await?;
        if hub.wants_plans() && self.planner.due() {
            let prefix = format!("{}agent-servers/", store.keys().prefix());
            let servers: BTreeMap<String, AgentRecord> =
                store.scan(&prefix).await?.into_iter().collect();
            let port = self.cfg.unit_port;
            if let (Some(inputs), Some(token)) = (
                self.planner
                    .update(&state, &records, &agents, &servers, port),
                hub.may_act(),
            ) {
                // The plan itself off the loop (27 ms at 10,000 units).
                let hub = hub.clone();
                tokio::task::spawn_blocking(move || {
                    hub.set_probe_plans(token, crate::probes::plans(&inputs));
                });
            }
        }
        let migrating: Vec<String> = store
            .migrations_in_flight()
            .await?
            .into_iter()
            .map(|(_, m)| m.unit)
            .collect();
        for m in &migrating {
            state.units.remove(&UnitId::new(m.clone()));
        }
        self.loc.sync(&state);
        let now = self.ms(Instant::now());
        self.primaries = records
            .iter()
            .filter(|r| !migrating.contains(&r.unit))
            .map(|r| (r.unit.clone(), r.primary.clone()))
            .collect();
        let port = self.cfg.unit_port;
        *lock(&self.targets) = Targets {
            hosts: state
                .hosts
                .values()
                .filter(|h| !h.is_failed())
                .map(|h| h.name.0.clone())
                .collect(),
            // A unit whose service another host's agent (or the agent
            // server) checks gets no heartbeat from the controller: at
            // 1,000 units those were 10,000 handshakes a second.
            units: records
                .iter()
                .filter(|r| !migrating.contains(&r.unit))
                .filter(|r| !self.loc.service_checked(&UnitId::new(r.unit.clone()), now))
                .filter_map(|r| service_addr(r, port).map(|a| (r.unit.clone(), a)))
                .collect(),
        };
        self.synced = Some(Instant::now());
        Ok(())
    }

    /// This replica was elected at `at`.
    pub fn elected(&mut self, at: Instant) {
        self.elected = Some(at);
    }

    /// Takes one measurement (`hub`: which agents are attached).
    pub fn observe(&mut self, o: Observed, hub: &Hub) -> Vec<Verdict> {
        let unit = match &o.what {
            Measurement::Probe {
                to: Target::Unit(u),
                ..
            }
            | Measurement::Heartbeat {
                to: Target::Unit(u),
                ..
            }
            | Measurement::Service { unit: u, .. } => Some(u),
            _ => None,
        };
        if let Measurement::Heartbeat {
            to: Target::Unit(u),
            ok,
        } = &o.what
        {
            self.unit_heartbeats.insert(u.0.clone(), (*ok, o.at));
        }
        let early = self
            .elected
            .is_some_and(|t| o.at.saturating_duration_since(t) < self.cfg.grace);
        if let (true, Some(u)) = (early, unit) {
            if self.primaries.get(&u.0).is_some_and(|h| !hub.attached(h)) {
                return Vec::new();
            }
        }
        if let (Measurement::Process { unit, .. }, Some(host)) = (&o.what, &o.host) {
            if self.primaries.get(&unit.0) != Some(host) {
                return Vec::new();
            }
        }
        let now = self.ms(o.at);
        self.loc.handle(now, o.what)
    }

    /// Whether an answer (of a probe, a service check or a heartbeat) is
    /// too old to count when it is taken at `now`: older than the
    /// localizer's freshness, its path would be stale. A miss always
    /// counts (a path is down after consecutive misses, each dated when
    /// it was taken), and so does a process state.
    pub fn outdated(&self, o: &Observed, now: Instant) -> bool {
        let answer = matches!(
            o.what,
            Measurement::Probe { ok: true, .. }
                | Measurement::Heartbeat { ok: true, .. }
                | Measurement::Service { answers: true, .. }
        );
        answer
            && now.saturating_duration_since(o.at)
                > Duration::from_millis(self.cfg.localize.stale_after_ms)
    }

    /// Whether `unit`'s service is silent: the controller's own heartbeat
    /// to it (its last one, within the last second, missed), or else every
    /// fresh service probe of it by the agents missed.
    pub fn unit_silent(&self, unit: &str) -> bool {
        match self
            .unit_heartbeats
            .get(unit)
            .filter(|(_, at)| at.elapsed() < Duration::from_secs(1))
        {
            Some((ok, _)) => !ok,
            None => self
                .loc
                .service_silent(&UnitId::new(unit), self.ms(Instant::now())),
        }
    }

    /// The units whose primary is `host`, as last read (none migrating).
    pub fn units_on(&self, host: &str) -> Vec<String> {
        self.loc
            .units_on(&HostId::new(host))
            .map(|u| u.0.clone())
            .collect()
    }

    /// Whether the localizer has `host` under suspicion (its verdict is
    /// coming).
    pub fn suspects(&self, host: &str) -> bool {
        self.loc.is_suspect(&HostId::new(host))
    }

    /// How often every host and unit is evaluated: once per probe interval
    /// up to [`SWEEP_TARGETS`] of them, and proportionally less often
    /// beyond (at 1,000 hosts and 10,000 units a sweep took 25–60 ms, and
    /// once per 100 ms it took half the leader's core).
    fn sweep_every(&self) -> Duration {
        let n = self.loc.targets().div_ceil(SWEEP_TARGETS).max(1);
        self.cfg.interval() * u32::try_from(n).unwrap_or(u32::MAX)
    }

    /// Confirmation windows that ended, and every host and unit once per
    /// [`Localization::sweep_every`]: a measurement re-evaluates only what
    /// changes a path's state, so what time alone changes (a path going
    /// stale) and what repeats a state are found here.
    pub fn poll(&mut self) -> Vec<Verdict> {
        let at = Instant::now();
        let now = self.ms(at);
        let due = self
            .evaluated
            .is_none_or(|t| at.saturating_duration_since(t) >= self.sweep_every());
        if due || self.loc.next_deadline().is_some_and(|d| d <= now) {
            self.evaluated = Some(at);
            self.loc.poll(now)
        } else {
            Vec::new()
        }
    }
}

/// The first service address of a unit, with `port`.
pub(crate) fn service_addr(r: &UnitRecord, port: u16) -> Option<SocketAddr> {
    let a = r.addresses.first()?;
    let ip: IpAddr = a.split('/').next()?.parse().ok()?;
    Some(SocketAddr::new(ip, port))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_units_heartbeat_goes_to_its_first_service_address() {
        let mut r = UnitRecord {
            schema: 1,
            unit: "edge-1".into(),
            primary: "a".into(),
            backup: None,
            epoch: crate::Token(1),
            config: String::new(),
            addresses: vec!["198.18.0.10/24".into(), "2001:db8::10/64".into()],
            interface: String::new(),
            app_failure: None,
            preheated: false,
            binary: None,
        };
        assert_eq!(
            service_addr(&r, 179),
            Some("198.18.0.10:179".parse().unwrap())
        );
        r.addresses = vec!["2001:db8::10".into()];
        assert_eq!(
            service_addr(&r, 179),
            Some("[2001:db8::10]:179".parse().unwrap())
        );
        r.addresses.clear();
        assert_eq!(service_addr(&r, 179), None);
    }
}
