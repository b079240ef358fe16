//! Failure localization (TENSOR §3.3.2 "inter-component measurements" and
//! §3.3.3 "failure location"): measurements in, verdicts out.
//!
//! [`Localizer::handle`] takes one [`Measurement`] at a time, stamped with
//! the time it was taken ([`Millis`]); [`Localizer::poll`] is called at
//! [`Localizer::next_deadline`] (the end of a host's confirmation window).
//! Both return [`Verdict`]s: a [`Finding`], the [`Evidence`] behind it, the
//! time of the first bad measurement and the time of the verdict. Only the
//! five failure kinds and a hung process act ([`Finding::acts`]); the rest
//! are notes.
//!
//! # Vantage points and measurements
//! - The controller's gRPC heartbeats ([`Measurement::Heartbeat`]) to each
//!   host's agent (over the management network) and to each unit's
//!   container (over the data network).
//! - The agent on a unit's host: the process state by pidfd
//!   ([`Measurement::Process`], immediate) and whether the unit's control
//!   socket answers ([`Measurement::ControlSocket`]).
//! - IP SLA probes ([`Measurement::Probe`]) from the agent server and from
//!   the agents on other hosts, to hosts and to units' addresses. A probe
//!   of a unit is a TCP handshake with its service port: it also tells
//!   whether holdfastd answers there ([`Measurement::Service`]; a reset
//!   reaches the host but misses the service), which stands in for the
//!   controller's own heartbeat to a unit that another host's agent checks
//!   ([`Localizer::service_checked`], issue 29).
//!
//! A probe path (vantage, target, channel) is *down* after
//! [`LocalizeConfig::misses`] consecutive misses, and counts only while
//! fresh (a report within [`LocalizeConfig::stale_after_ms`]).
//!
//! # Rules
//! Every acting verdict needs agreeing evidence from at least
//! [`LocalizeConfig::min_vantages`] distinct vantage points.
//! - **Application** (E1): the agent reports the process exited (pidfd), the
//!   controller's heartbeat to the unit or another agent's service probe
//!   confirms (`confirm_misses` misses), the host is not under suspicion.
//! - **Hung**: the agent reports the process hung (no watchdog ping for
//!   its `--hang-ms`; it killed the process through its pidfd before
//!   reporting), the controller's heartbeat to the unit or a service probe
//!   confirms (`confirm_misses` misses: the killed process's port refuses), the
//!   host is not under suspicion. Acted on as an application failure.
//! - **Container** (E2): the agent reports the container gone (every
//!   process, the namespace); the controller's heartbeat or an IP SLA probe
//!   to the unit confirms.
//! - **Container network** (E4): the process is not reported dead, the unit
//!   is down from at least two vantage points, and its host answered a
//!   probe after the unit stopped answering (and no path to the host is
//!   down): the host is reachable.
//! - **Host** (E3) and **host network** (E5): every fresh IP SLA path to the
//!   host and to its units is down, from at least two vantage points. With
//!   the controller's heartbeat to the host's agent stopped as well it is a
//!   host failure, otherwise a host-network one. Either way a
//!   [`Finding::Suspect`] note opens a confirmation window
//!   ([`LocalizeConfig::host_confirm_ms`],
//!   [`LocalizeConfig::host_network_confirm_ms`], 3 s each: TENSOR gives
//!   both the extra timer); the verdict comes only if every measurement
//!   still fails when it ends. A path that answers inside the window,
//!   with an answer taken after the suspicion's first bad measurement,
//!   cancels it ([`Finding::Recovered`]); a path still short of its
//!   misses, or an answer from before (taken late by a leader behind its
//!   reports), does not.
//! - Not failures: a probe that misses fewer than `misses` times and then
//!   answers gives [`Finding::LostProbe`]; the controller's heartbeat to a
//!   host's agent stopping while another vantage point still reaches the
//!   host (after the first missed heartbeat) gives
//!   [`Finding::ControllerCutOff`].
//!
//! A host with a verdict is failed: no verdict about it or its units until
//! [`Localizer::reset`] (`holdfast ctl reset HOST`), or until
//! [`Localizer::sync`] reads a desired state in which it is healthy again.
//! A unit gets one verdict per episode: the next needs the process running
//! again, every probe of it answering, or a move to another host.
//!
//! With 100 ms probes, `misses` 3 and `confirm_misses` 1, application and
//! container verdicts come within one probe interval of the pidfd report, container
//! network ones within 0.3 s of the first missed probe, host and host
//! network ones within 0.3 s plus the 3 s confirmation.
//!
//! # Cost
//! Paths are kept by target. A measurement re-evaluates only the host it
//! is about (or the unit's host) and that host's units, and only when it
//! changes its path's state or answers for a host one of whose units is
//! missing (a container-network verdict waits for that answer). An answer
//! after answers is no change even when the path had gone stale (a leader
//! that fell behind found each late refresh a change: 16 µs a measurement
//! at 1,000 hosts instead of 2.5 µs);
//! [`Localizer::poll`] re-evaluates everything, and the caller runs it
//! once per probe interval, so what time alone changes (a path going
//! stale, a window ending) is found within an interval (issue 29: before,
//! every measurement re-evaluated every host and unit, and 2,000
//! measurements a second from 10 hosts and 100 units kept the leader's
//! core busy, `holdfast-ctl-sim`).
//!
//! # Known issues
//! - A host whose management and data networks fail together is reported
//!   as a host failure, not a host-network one; the handling is the same.
//! - A partial partition (some vantage points reach the host, others do
//!   not) gives no verdict and no note.
//! - A hung process is found by its agent (the watchdog pings), not here:
//!   while it is frozen, the kernel completes every TCP handshake with it,
//!   so the heartbeats and probes answer; only the agent's report, and
//!   the refused heartbeat once the agent killed it, give the verdict.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::model::{DesiredState, FailureKind, HostId, Millis, UnitId};

mod measure;
mod verdict;
pub use measure::{Channel, Measurement, ProcessState, Target, Vantage};
pub use verdict::{Evidence, Finding, Observation, Verdict};

/// What to do with an application failure (issue 11: configurable).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AppPolicy {
    /// Restart holdfastd in its container (an NSR resume on the same host).
    RestartInPlace,
    /// Take over on the backup host.
    Migrate,
}

/// Thresholds of the localization.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct LocalizeConfig {
    /// How often every probe and heartbeat is sent (default 100 ms).
    pub probe_interval_ms: Millis,
    /// Consecutive misses that make a path down on its own (default 3).
    pub misses: u32,
    /// Consecutive misses that confirm an agent's pidfd report (default 1:
    /// the report is the process's own exit, the miss a second vantage
    /// point's agreement).
    pub confirm_misses: u32,
    /// Distinct vantage points whose evidence must agree (default 2).
    pub min_vantages: usize,
    /// Confirmation window for a host failure (default 3000 ms).
    pub host_confirm_ms: Millis,
    /// Confirmation window for a host-network failure (default 3000 ms).
    pub host_network_confirm_ms: Millis,
    /// A path with no report for longer than this is ignored (default
    /// 1000 ms).
    pub stale_after_ms: Millis,
    /// After a unit's process starts (a takeover, a restart) or the unit
    /// moves, or its host becomes reachable again after a blip, how long
    /// probes of it that miss are not a container-network failure (default
    /// 2000 ms): a takeover drops inbound BGP segments until its sockets are
    /// restored, and a unit comes back from a blip a little after its host.
    /// Process reports still count.
    #[serde(default = "default_settle_ms")]
    pub settle_ms: Millis,
    /// Restart in place or migrate on an application failure.
    pub app_policy: AppPolicy,
}

impl Default for LocalizeConfig {
    fn default() -> Self {
        Self {
            probe_interval_ms: 100,
            misses: 3,
            confirm_misses: 1,
            min_vantages: 2,
            host_confirm_ms: 3000,
            host_network_confirm_ms: 3000,
            settle_ms: 2000,
            stale_after_ms: 1000,
            app_policy: AppPolicy::RestartInPlace,
        }
    }
}

fn default_settle_ms() -> Millis {
    2000
}

impl LocalizeConfig {
    fn confirm_ms(&self, kind: FailureKind) -> Millis {
        match kind {
            FailureKind::HostNetwork => self.host_network_confirm_ms,
            _ => self.host_confirm_ms,
        }
    }
}

type PathKey = (Vantage, Target, Channel);

#[derive(Debug, Clone, Default)]
struct Path {
    misses: u32,
    first_miss: Millis,
    last_at: Millis,
    last_ok: Option<Millis>,
    /// When it last answered again after missing (the start of the
    /// current run of answers; `None` before any miss, or while missing).
    ok_since: Option<Millis>,
}

#[derive(Debug, Clone)]
struct Suspicion {
    kind: FailureKind,
    detected: Millis,
    first_bad: Millis,
}

/// The localization state machine (see the module docs).
#[derive(Debug, Clone)]
pub struct Localizer {
    cfg: LocalizeConfig,
    hosts: BTreeSet<HostId>,
    units: BTreeMap<UnitId, HostId>,
    failed: BTreeSet<HostId>,
    /// Each unit judged, by its host.
    units_of: BTreeMap<HostId, BTreeSet<UnitId>>,
    /// Every path, by its target (a measurement re-evaluates only what it
    /// is about).
    paths: BTreeMap<Target, BTreeMap<(Vantage, Channel), Path>>,
    process: BTreeMap<UnitId, (ProcessState, Millis)>,
    suspect: BTreeMap<HostId, Suspicion>,
    cut_off: BTreeSet<HostId>,
    fired: BTreeSet<UnitId>,
    /// Units whose probes do not count as a container-network failure
    /// until then.
    settle_until: BTreeMap<UnitId, Millis>,
    /// Whether [`Localizer::sync`] has read a topology yet.
    synced: bool,
    /// The latest time seen.
    now: Millis,
    /// Measurements that re-evaluated what they are about.
    evaluations: u64,
}

impl Localizer {
    /// A localizer with no topology; see [`Localizer::sync`].
    pub fn new(cfg: LocalizeConfig) -> Self {
        Self {
            cfg,
            hosts: BTreeSet::new(),
            units: BTreeMap::new(),
            failed: BTreeSet::new(),
            units_of: BTreeMap::new(),
            paths: BTreeMap::new(),
            process: BTreeMap::new(),
            suspect: BTreeMap::new(),
            cut_off: BTreeSet::new(),
            fired: BTreeSet::new(),
            settle_until: BTreeMap::new(),
            synced: false,
            now: 0,
            evaluations: 0,
        }
    }

    /// The units judged on `host` (as the last [`Localizer::sync`] read
    /// them, none migrating).
    pub fn units_on(&self, host: &HostId) -> impl Iterator<Item = &UnitId> {
        self.units_of.get(host).into_iter().flatten()
    }

    /// How many measurements re-evaluated their host and its units (the
    /// rest repeated a state and were left to the sweep).
    pub fn evaluations(&self) -> u64 {
        self.evaluations
    }

    /// Its configuration.
    pub fn config(&self) -> &LocalizeConfig {
        &self.cfg
    }

    /// Reads the topology from the desired state: every host, the failed
    /// ones, and each unit's primary host. Units with a migration in flight
    /// are not watched until it ends. A unit that moved starts afresh.
    pub fn sync(&mut self, state: &DesiredState) {
        self.hosts = state.hosts.keys().cloned().collect();
        let failed: BTreeSet<HostId> = state
            .hosts
            .values()
            .filter(|h| h.is_failed())
            .map(|h| h.name.clone())
            .collect();
        // A host reset by hand starts afresh: what was measured of it, and
        // by its agent, while it was failed says nothing now.
        let healed: Vec<HostId> = self.failed.difference(&failed).cloned().collect();
        for h in &healed {
            self.reset(h);
        }
        self.failed = failed;
        let units: BTreeMap<UnitId, HostId> = state
            .units
            .values()
            .filter(|u| !state.migrations.contains_key(&u.name))
            .map(|u| (u.name.clone(), u.primary.clone()))
            .collect();
        // A unit that moved, went (a migration began) or came back (its
        // migration ended) starts afresh: what was measured of it meanwhile
        // was of a unit in transit (its service address not yet moved), not
        // of the unit now placed. Only the first topology has no past.
        let mut moved: Vec<UnitId> = self
            .units
            .iter()
            .filter(|(u, h)| units.get(*u) != Some(*h))
            .map(|(u, _)| u.clone())
            .collect();
        if self.synced {
            moved.extend(
                units
                    .keys()
                    .filter(|u| !self.units.contains_key(*u))
                    .cloned(),
            );
        }
        self.synced = true;
        for u in moved {
            self.forget_unit(&u);
            self.settle_until.insert(u, self.now + self.cfg.settle_ms);
        }
        self.units_of = BTreeMap::new();
        for (u, h) in &units {
            self.units_of
                .entry(h.clone())
                .or_default()
                .insert(u.clone());
        }
        self.units = units;
        self.suspect.retain(|h, _| !self.failed.contains(h));
    }

    /// `holdfast ctl reset HOST`: the host may be judged (and used) again.
    /// Its old measurements are forgotten (also done by [`Localizer::sync`]
    /// when the host is no longer failed).
    pub fn reset(&mut self, host: &HostId) {
        self.failed.remove(host);
        self.suspect.remove(host);
        self.cut_off.remove(host);
        let agent = Vantage::Agent(host.clone());
        self.paths.remove(&Target::Host(host.clone()));
        for by in self.paths.values_mut() {
            by.retain(|(from, _), _| *from != agent);
        }
        let units: Vec<UnitId> = self
            .units
            .iter()
            .filter(|(_, h)| *h == host)
            .map(|(u, _)| u.clone())
            .collect();
        for u in units {
            self.forget_unit(&u);
        }
    }

    /// How many hosts and units it judges (what a [`Localizer::poll`]
    /// evaluates).
    pub fn targets(&self) -> usize {
        self.hosts.len() + self.units.len()
    }

    /// Whether a verdict failed the host (until reset).
    pub fn is_failed(&self, host: &HostId) -> bool {
        self.failed.contains(host)
    }

    /// Whether an agent other than the one on `unit`'s host (or the agent
    /// server) checks its service: a fresh [`Measurement::Service`] path.
    /// The controller's own heartbeat to it is then not needed.
    pub fn service_checked(&self, unit: &UnitId, now: Millis) -> bool {
        let home = self.units.get(unit).cloned().map(Vantage::Agent);
        self.paths
            .get(&Target::Unit(unit.clone()))
            .into_iter()
            .flatten()
            .any(|((from, ch), p)| {
                *ch == Channel::Service && Some(from) != home.as_ref() && self.fresh(now, p)
            })
    }

    /// Whether `unit`'s service is silent at `now`: it has a fresh check of
    /// its service (the controller's heartbeat, an agent's service probe)
    /// and every such check's last one missed.
    pub fn service_silent(&self, unit: &UnitId, now: Millis) -> bool {
        let mut checks = self
            .paths
            .get(&Target::Unit(unit.clone()))
            .into_iter()
            .flatten()
            .filter(|((_, ch), p)| {
                matches!(ch, Channel::Heartbeat | Channel::Service) && self.fresh(now, p)
            })
            .peekable();
        checks.peek().is_some() && checks.all(|(_, p)| p.misses > 0)
    }

    /// Whether the host is unreachable and its confirmation window open.
    pub fn is_suspect(&self, host: &HostId) -> bool {
        self.suspect.contains_key(host)
    }

    /// When [`Localizer::poll`] must be called next: the end of the
    /// earliest confirmation window.
    pub fn next_deadline(&self) -> Option<Millis> {
        self.suspect
            .values()
            .map(|s| s.detected + self.cfg.confirm_ms(s.kind))
            .min()
    }

    /// Re-evaluates every host and unit at `now` (confirmation windows
    /// that ended, paths gone stale): call it once per probe interval.
    pub fn poll(&mut self, now: Millis) -> Vec<Verdict> {
        self.now = self.now.max(now);
        let mut out = Vec::new();
        self.evaluate(now, &mut out);
        out
    }

    /// Takes one measurement, taken at `now`.
    pub fn handle(&mut self, now: Millis, m: Measurement) -> Vec<Verdict> {
        self.now = self.now.max(now);
        let mut out = Vec::new();
        let about = match &m {
            Measurement::Heartbeat { to, .. } | Measurement::Probe { to, .. } => match to {
                Target::Host(h) => Some(h.clone()),
                Target::Unit(u) => self.units.get(u).cloned(),
            },
            Measurement::ControlSocket { unit, .. }
            | Measurement::Process { unit, .. }
            | Measurement::Service { unit, .. } => self.units.get(unit).cloned(),
        };
        let host_answered = matches!(
            &m,
            Measurement::Probe {
                to: Target::Host(_),
                ok: true,
                ..
            } | Measurement::Heartbeat {
                to: Target::Host(_),
                ok: true
            }
        );
        let changed = match m {
            Measurement::Heartbeat { to, ok } => self.record(
                now,
                (Vantage::Controller, to, Channel::Heartbeat),
                ok,
                &mut out,
            ),
            Measurement::Probe { from, to, ok } => {
                self.record(now, (from, to, Channel::IpSla), ok, &mut out)
            }
            Measurement::Service {
                from,
                unit,
                answers,
            } => self.record(
                now,
                (from, Target::Unit(unit), Channel::Service),
                answers,
                &mut out,
            ),
            Measurement::ControlSocket { unit, answers } => match self.units.get(&unit).cloned() {
                Some(host) => {
                    let key = (
                        Vantage::Agent(host),
                        Target::Unit(unit),
                        Channel::ControlSocket,
                    );
                    self.record(now, key, answers, &mut out)
                }
                None => false,
            },
            Measurement::Process { unit, state } => {
                if self.units.contains_key(&unit) {
                    match self.process.get(&unit) {
                        Some((s, _)) if *s == state => {}
                        _ => {
                            self.process.insert(unit.clone(), (state, now));
                        }
                    }
                    if state == ProcessState::Running {
                        self.fired.remove(&unit);
                        self.settle_until
                            .insert(unit.clone(), now + self.cfg.settle_ms);
                    }
                }
                true
            }
        };
        // A result that repeats a fresh path's state changes no verdict:
        // what it is about is evaluated again at the next poll, which also
        // takes what only time changes (issue 29: at 1,000 hosts each of
        // 50,000 measurements a second re-evaluated a host and its ten
        // units, and a rack failure's alerts tripled them).
        if let (true, Some(h)) = (changed, &about) {
            self.evaluations += 1;
            self.evaluate_around(now, h, &mut out);
        } else if let (true, Some(h)) = (host_answered, &about) {
            // An answer of a host whose unit is missing: that unit is
            // evaluated at once, though the answer repeats. A
            // container-network verdict needs the host to answer after the
            // unit's latest miss, and the sweep, at a phase of its own, may
            // keep landing just after the next miss (with few vantage
            // points, seen in the lab with the probe plan).
            for u in self.missing_units_on(now, h) {
                self.evaluate_unit(now, &u, h, &mut out);
            }
        }
        out
    }

    /// The units on `host` (not failed, not suspected) with a fresh path
    /// down (as many misses as a verdict needs).
    fn missing_units_on(&self, now: Millis, host: &HostId) -> Vec<UnitId> {
        if self.failed.contains(host) || self.suspect.contains_key(host) {
            return Vec::new();
        }
        let Some(units) = self.units_of.get(host) else {
            return Vec::new();
        };
        units
            .iter()
            .filter(|u| {
                self.paths
                    .get(&Target::Unit((*u).clone()))
                    .is_some_and(|ps| {
                        ps.values()
                            .any(|p| p.misses >= self.cfg.misses && self.fresh(now, p))
                    })
            })
            .cloned()
            .collect()
    }

    fn forget_unit(&mut self, unit: &UnitId) {
        self.process.remove(unit);
        self.fired.remove(unit);
        self.paths.remove(&Target::Unit(unit.clone()));
    }

    /// Records one result on a path; whether it may change a verdict: not
    /// when the path was fresh and the result repeats its state (an answer
    /// after an answer, a miss once the path is down by every count).
    fn record(&mut self, now: Millis, key: PathKey, ok: bool, out: &mut Vec<Verdict>) -> bool {
        let misses = self.cfg.misses;
        let stale_after = self.cfg.stale_after_ms;
        let p = self
            .paths
            .entry(key.1.clone())
            .or_default()
            .entry((key.0.clone(), key.2))
            .or_default();
        // This result repeats its state: an answer after answers, or a
        // miss on a path already down by every count (and fresh until
        // now). An answer after answers that had gone stale changes
        // nothing a measurement must act on at once: the sweep
        // ([`Localizer::poll`]) finds what freshness changes, and a
        // confirmation window's end re-evaluates its host (a leader that
        // fell behind found every late refresh a change, and evaluated a
        // host and its units for each: issue 29).
        let down_by_all = misses.max(self.cfg.confirm_misses);
        let fresh_before =
            (p.misses > 0 || p.last_ok.is_some()) && now.saturating_sub(p.last_at) <= stale_after;
        let steady = if ok {
            p.misses == 0 && p.last_ok.is_some()
        } else {
            fresh_before && p.misses >= down_by_all
        };
        p.last_at = now;
        if ok {
            if (1..misses).contains(&p.misses) {
                out.push(Verdict {
                    finding: Finding::LostProbe {
                        from: key.0.clone(),
                        to: key.1.clone(),
                        missed: p.misses,
                    },
                    evidence: vec![Evidence {
                        from: key.0,
                        to: key.1,
                        what: Observation::Missed(key.2),
                        since: p.first_miss,
                        count: p.misses,
                    }],
                    first_bad: p.first_miss,
                    at: now,
                });
            }
            if p.misses > 0 {
                p.ok_since = Some(now);
            }
            p.misses = 0;
            p.last_ok = Some(now);
        } else {
            if p.misses == 0 {
                p.first_miss = now;
            }
            p.misses += 1;
            p.ok_since = None;
        }
        !steady
    }

    fn fresh(&self, now: Millis, p: &Path) -> bool {
        now.saturating_sub(p.last_at) <= self.cfg.stale_after_ms
    }

    fn missed(key: &PathKey, p: &Path) -> Evidence {
        Evidence {
            from: key.0.clone(),
            to: key.1.clone(),
            what: Observation::Missed(key.2),
            since: p.first_miss,
            count: p.misses,
        }
    }

    fn answered(key: &PathKey, at: Millis) -> Evidence {
        Evidence {
            from: key.0.clone(),
            to: key.1.clone(),
            what: Observation::Answered(key.2),
            since: at,
            count: 0,
        }
    }

    /// Fresh paths to `target` matching `f`, from vantage points on hosts
    /// that have not failed (a failed host's agent may still report, over
    /// a network that does not work).
    fn paths_to(
        &self,
        now: Millis,
        target: &Target,
        f: impl Fn(&Vantage, Channel) -> bool,
    ) -> Vec<(PathKey, Path)> {
        self.paths
            .get(target)
            .into_iter()
            .flatten()
            .filter(|((from, _), _)| !matches!(from, Vantage::Agent(h) if self.failed.contains(h)))
            .filter(|((from, ch), p)| f(from, *ch) && self.fresh(now, p))
            .map(|((from, ch), p)| ((from.clone(), target.clone(), *ch), p.clone()))
            .collect()
    }

    fn path(&self, key: &PathKey) -> Option<&Path> {
        self.paths.get(&key.1)?.get(&(key.0.clone(), key.2))
    }

    /// Re-evaluates `host` and its units only: what one measurement about
    /// the host or one of its units can change. The rest waits for
    /// [`Localizer::poll`].
    fn evaluate_around(&mut self, now: Millis, host: &HostId, out: &mut Vec<Verdict>) {
        if self.failed.contains(host) || !self.hosts.contains(host) {
            return;
        }
        self.evaluate_host(now, host, out);
        if self.suspect.contains_key(host) || self.failed.contains(host) {
            return;
        }
        let units: Vec<UnitId> = self
            .units_of
            .get(host)
            .map(|u| u.iter().cloned().collect())
            .unwrap_or_default();
        for u in &units {
            self.evaluate_unit(now, u, host, out);
        }
    }

    fn evaluate(&mut self, now: Millis, out: &mut Vec<Verdict>) {
        let hosts: Vec<HostId> = self
            .hosts
            .iter()
            .filter(|h| !self.failed.contains(*h))
            .cloned()
            .collect();
        for h in &hosts {
            self.evaluate_host(now, h, out);
        }
        let units: Vec<(UnitId, HostId)> = self
            .units
            .iter()
            .filter(|(_, h)| !self.failed.contains(*h) && !self.suspect.contains_key(*h))
            .map(|(u, h)| (u.clone(), h.clone()))
            .collect();
        for (u, h) in &units {
            self.evaluate_unit(now, u, h, out);
        }
    }

    fn evaluate_host(&mut self, now: Millis, host: &HostId, out: &mut Vec<Verdict>) {
        let misses = self.cfg.misses;
        let agent = Vantage::Agent(host.clone());
        let hb_key = (
            Vantage::Controller,
            Target::Host(host.clone()),
            Channel::Heartbeat,
        );
        let hb = self.path(&hb_key).filter(|p| self.fresh(now, p)).cloned();
        let hb_down = hb.as_ref().is_some_and(|p| p.misses >= misses);
        let probe = |from: &Vantage, ch: Channel| ch == Channel::IpSla && *from != agent;
        let mut reach = self.paths_to(now, &Target::Host(host.clone()), probe);
        for u in self.units_of.get(host).into_iter().flatten() {
            reach.extend(self.paths_to(now, &Target::Unit(u.clone()), probe));
        }
        let all_down = !reach.is_empty() && reach.iter().all(|(_, p)| p.misses >= misses);
        let mut evidence: Vec<Evidence> = Vec::new();
        let mut vantages: BTreeSet<Vantage> = BTreeSet::new();
        if all_down {
            for (k, p) in &reach {
                evidence.push(Self::missed(k, p));
                vantages.insert(k.0.clone());
            }
            if let Some(p) = hb.as_ref().filter(|_| hb_down) {
                evidence.push(Self::missed(&hb_key, p));
                vantages.insert(Vantage::Controller);
            }
        }
        let cut_off_evidence: Vec<Evidence> = match hb.as_ref().filter(|_| hb_down) {
            Some(hbp) => reach
                .iter()
                .filter(|(k, p)| {
                    matches!(k.1, Target::Host(_))
                        && p.misses == 0
                        && p.last_ok.is_some_and(|t| t > hbp.first_miss)
                })
                .map(|(k, p)| Self::answered(k, p.last_ok.unwrap_or(now)))
                .collect(),
            None => Vec::new(),
        };
        let confirmed = all_down && vantages.len() >= self.cfg.min_vantages;

        if !hb_down {
            self.cut_off.remove(host);
        } else if !cut_off_evidence.is_empty() && !self.cut_off.contains(host) {
            self.cut_off.insert(host.clone());
            let hbp = hb.clone().unwrap_or_default();
            let mut ev = vec![Self::missed(&hb_key, &hbp)];
            ev.extend(cut_off_evidence);
            out.push(Verdict {
                finding: Finding::ControllerCutOff { host: host.clone() },
                evidence: ev,
                first_bad: hbp.first_miss,
                at: now,
            });
        }

        let kind = if hb_down {
            FailureKind::Host
        } else {
            FailureKind::HostNetwork
        };
        match self.suspect.get_mut(host) {
            None if confirmed => {
                let first_bad = evidence.iter().map(|e| e.since).min().unwrap_or(now);
                self.suspect.insert(
                    host.clone(),
                    Suspicion {
                        kind,
                        detected: now,
                        first_bad,
                    },
                );
                out.push(Verdict {
                    finding: Finding::Suspect {
                        host: host.clone(),
                        kind,
                        confirm_at: now + self.cfg.confirm_ms(kind),
                    },
                    evidence,
                    first_bad,
                    at: now,
                });
            }
            None => {}
            Some(s) if confirmed => {
                s.kind = kind;
                if now >= s.detected + self.cfg.confirm_ms(kind) {
                    let first_bad = s.first_bad;
                    self.suspect.remove(host);
                    self.failed.insert(host.clone());
                    let finding = match kind {
                        FailureKind::Host => Finding::Host { host: host.clone() },
                        _ => Finding::HostNetwork { host: host.clone() },
                    };
                    out.push(Verdict {
                        finding,
                        evidence,
                        first_bad,
                        at: now,
                    });
                }
            }
            // Not confirmed, and nothing reached the host since its first
            // bad measurement: the paths still short of their misses, or
            // answers dated before it and taken late, do not withdraw the
            // suspicion (a leader behind its reports raised and withdrew
            // one four times before its verdict at 1,000 hosts).
            Some(s)
                if !reach.is_empty()
                    && !reach.iter().any(|(_, p)| {
                        p.misses == 0 && p.last_ok.is_some_and(|t| t > s.first_bad)
                    }) => {}
            Some(s) => {
                let first_bad = s.first_bad;
                self.suspect.remove(host);
                let evidence = reach
                    .iter()
                    .filter(|(_, p)| p.misses == 0)
                    .map(|(k, p)| Self::answered(k, p.last_ok.unwrap_or(now)))
                    .collect();
                out.push(Verdict {
                    finding: Finding::Recovered { host: host.clone() },
                    evidence,
                    first_bad,
                    at: now,
                });
            }
        }
    }

    fn evaluate_unit(&mut self, now: Millis, unit: &UnitId, host: &HostId, out: &mut Vec<Verdict>) {
        let cfg = self.cfg;
        let agent = Vantage::Agent(host.clone());
        let target = Target::Unit(unit.clone());
        let unit_paths = self.paths_to(now, &target, |from, ch| {
            *from != agent && ch != Channel::ControlSocket
        });
        let socket = self
            .path(&(agent.clone(), target.clone(), Channel::ControlSocket))
            .filter(|p| p.misses > 0 && self.fresh(now, p))
            .map(|p| Self::missed(&(agent.clone(), target.clone(), Channel::ControlSocket), p));
        let process = self.process.get(unit).copied();
        let dead = matches!(
            process,
            Some((
                ProcessState::Exited | ProcessState::ContainerGone | ProcessState::Hung,
                _
            ))
        );
        if self.fired.contains(unit) {
            if !dead && unit_paths.iter().all(|(_, p)| p.misses == 0) {
                self.fired.remove(unit);
            }
            return;
        }
        let finding_and_evidence = match process {
            Some((
                state @ (ProcessState::Exited | ProcessState::ContainerGone | ProcessState::Hung),
                since,
            )) => {
                let report = Evidence {
                    from: agent.clone(),
                    to: target.clone(),
                    what: match state {
                        ProcessState::Exited => Observation::ProcessExited,
                        ProcessState::Hung => Observation::Hung,
                        _ => Observation::ContainerGone,
                    },
                    since,
                    count: 0,
                };
                let mut evidence = vec![report];
                evidence.extend(
                    unit_paths
                        .iter()
                        .filter(|(k, p)| {
                            p.misses >= cfg.confirm_misses
                                && (matches!(k.2, Channel::Heartbeat | Channel::Service)
                                    || state == ProcessState::ContainerGone)
                        })
                        .map(|(k, p)| Self::missed(k, p)),
                );
                evidence.extend(socket);
                let finding = match state {
                    ProcessState::Exited => Finding::Application {
                        unit: unit.clone(),
                        host: host.clone(),
                    },
                    ProcessState::Hung => Finding::Hung {
                        unit: unit.clone(),
                        host: host.clone(),
                    },
                    _ => Finding::Container {
                        unit: unit.clone(),
                        host: host.clone(),
                    },
                };
                Some((finding, evidence))
            }
            _ => {
                let down: Vec<Evidence> = unit_paths
                    .iter()
                    .filter(|(_, p)| p.misses >= cfg.misses)
                    .map(|(k, p)| Self::missed(k, p))
                    .collect();
                let since = down.iter().map(|e| e.since).min().unwrap_or(now);
                let host_target = Target::Host(host.clone());
                let host_paths = self.paths_to(now, &host_target, |from, _| *from != agent);
                // The host must be answering now: every fresh path to it
                // answered its last probe, and one answered after the
                // unit's latest miss (not merely before a blip that reached
                // the unit's probes first).
                let host_down = host_paths.iter().any(|(_, p)| p.misses > 0);
                let confirmed = unit_paths
                    .iter()
                    .filter(|(_, p)| p.misses >= cfg.misses)
                    .map(|(_, p)| p.last_at)
                    .max()
                    .unwrap_or(now);
                let answered: Vec<Evidence> = host_paths
                    .iter()
                    .filter(|(_, p)| {
                        p.misses == 0 && p.last_ok.is_some_and(|t| t > since && t >= confirmed)
                    })
                    .map(|(k, p)| Self::answered(k, p.last_ok.unwrap_or(now)))
                    .collect();
                // A host that has just become reachable again (after a
                // blip) brings its units back a little later: they settle.
                let host_back = host_paths.iter().filter_map(|(_, p)| p.ok_since).max();
                let settling = self.settle_until.get(unit).is_some_and(|t| now < *t)
                    || host_back.is_some_and(|t| now < t + cfg.settle_ms);
                if down.is_empty() || host_down || answered.is_empty() || settling {
                    None
                } else {
                    let mut evidence = down;
                    evidence.extend(answered);
                    let finding = Finding::ContainerNetwork {
                        unit: unit.clone(),
                        host: host.clone(),
                    };
                    Some((finding, evidence))
                }
            }
        };
        let Some((finding, evidence)) = finding_and_evidence else {
            return;
        };
        let bad: Vec<&Evidence> = evidence
            .iter()
            .filter(|e| !matches!(e.what, Observation::Answered(_)))
            .collect();
        let vantages: BTreeSet<&Vantage> = bad.iter().map(|e| &e.from).collect();
        if vantages.len() < cfg.min_vantages {
            return;
        }
        let first_bad = bad.iter().map(|e| e.since).min().unwrap_or(now);
        self.fired.insert(unit.clone());
        out.push(Verdict {
            finding,
            evidence,
            first_bad,
            at: now,
        });
    }
}

#[cfg(test)]
#[path = "localize_tests.rs"]
mod tests;
