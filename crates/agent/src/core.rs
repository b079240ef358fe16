//! The agent's pure core: `AgentCore::handle(now, input) -> outputs`.
//!
//! It decides everything the agent does; the shell carries it out (the
//! runtime, the address moves, the Attach stream, the etcd lease):
//!
//! - **Fencing tokens.** Every controller command carries its leader's
//!   token. A command with a token older than the highest accepted is
//!   refused (`CommandResult.ok = false`, "stale fencing token") and has
//!   no effect: a deposed leader cannot act
//!   ([`holdfast_control_api::accept_token`]).
//! - **The lease watchdog** ([`crate::watchdog`]): when the etcd lease
//!   may expire before a renewal could land, the core fences every unit
//!   on the host and refuses commands that start units until a new lease
//!   is granted. The controller migrates the units only after the lease
//!   has expired in etcd, by which time they are gone.
//! - **Failsafe** (an etcd outage): while renewals are late the core asks
//!   every other host agent, once per renewal period, whether it cannot
//!   renew either; a round every one of them agreed to keeps the units (see
//!   [`crate::watchdog`]). Asked by another agent, the core agrees when its
//!   own renewals are late, and then starts none of that agent's units for
//!   one lease TTL.
//! - **Reports.** A `Hello` on every new Attach stream (the host, its
//!   units, the highest token), then each running unit's state again (a
//!   `STARTED` event) and each exit not yet dealt with, a heartbeat every
//!   `heartbeat` interval, every probe measurement (in the heartbeats, to
//!   a leader that takes them there: [`crate::outbox`]), every unit event
//!   and every command result.
//! - **The leader's token.** A leader's beat (`LeaderBeat`, no result)
//!   and the `leader` key read from etcd ([`AgentInput::LeaderToken`])
//!   raise the highest token accepted, so that a new leader's token is
//!   known as soon as the agent attaches to it (or reads etcd): a deposed
//!   leader that wakes up is refused from then on.

use crate::outbox::Outbox;
use crate::probe::Measurement;
use crate::runtime::Exit;
use crate::watchdog::{Action, Watchdog, WatchdogConfig};
use crate::Time;
use holdfast_control_api::v1::{
    agent_report, command, unit_event, AgentReport, Command, CommandResult, Hello, UnitEvent,
    UnitStatus,
};
use holdfast_control_api::{accept_token, SCHEMA};
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

/// Settings of the core.
#[derive(Debug, Clone)]
pub struct AgentConfig {
    /// This host's name.
    pub host: String,
    /// The agent server's agent rather than a host's.
    pub agent_server: bool,
    pub watchdog: WatchdogConfig,
    /// Heartbeat period on the Attach stream.
    pub heartbeat: Duration,
    /// Unix time (ms) of the core's time origin, for the reports' clocks.
    pub unix_origin_ms: u64,
    /// This agent's build, sent in every Hello (`holdfast_version::VERSION`).
    pub version: String,
    /// It takes its probe targets from the leader (`Hello.probe_plans`;
    /// off with `--static-probes`).
    pub probe_plans: bool,
}

/// What the core is fed.
#[derive(Debug, Clone, PartialEq)]
pub enum AgentInput {
    /// A new Attach stream is open.
    Connected,
    /// A command from the controller.
    Command(Command),
    /// The shell finished command `id`.
    Done { id: u64, result: Result<(), String> },
    /// The holdfastd of takeover command `id` is ready for its service
    /// addresses (or failed to get there).
    TakeoverReady { id: u64, result: Result<(), String> },
    /// A probe outcome.
    Measured(Measurement),
    /// A unit's process started.
    UnitStarted {
        unit: String,
        pid: u32,
        role: String,
        epoch: u64,
    },
    /// A unit's process exited (or was fenced).
    UnitExited(Exit),
    /// A unit's process made no progress for the hang window
    /// ([`crate::hang`]): fence it, and report it hung once it is gone.
    UnitHung {
        unit: String,
        pid: u32,
        silent: Duration,
    },
    /// A lease renewal (or grant) sent at `sent` was acknowledged.
    LeaseRenewed { sent: Time },
    /// A renewal request is being sent now.
    LeaseRenewalSent,
    /// A new lease after a self-fence.
    LeaseGranted { sent: Time },
    /// Another host's agent asks whether this one cannot renew its lease
    /// either (`id`: the shell's, for the answer).
    FailsafeAsked {
        id: u64,
        from: String,
        units: Vec<String>,
    },
    /// Every other host agent agreed to the failsafe round sent at `sent`.
    FailsafeConfirmed { sent: Time },
    /// etcd names a leader with this fencing token (the `leader` key's
    /// create revision).
    LeaderToken(u64),
    /// Time passed.
    Tick,
}

/// What the shell carries out, in order.
#[derive(Debug, Clone, PartialEq)]
pub enum AgentOutput {
    /// Send on the Attach stream.
    Report(AgentReport),
    /// Start a unit's holdfastd (`takeover`: `--takeover` at that epoch).
    Start {
        id: u64,
        unit: String,
        config: String,
        standby: bool,
        takeover: Option<u64>,
        /// The binary to run (empty: the agent's `--holdfastd`).
        binary: String,
        /// A standby: done once it has followed the store.
        caught_up: bool,
        /// With `caught_up` (an upgrade): the binary the unit runs now,
        /// whose schemas the new one's must match.
        running_binary: String,
    },
    /// Fence a unit (`id`: the command, `None` for a self-fence).
    Fence { id: Option<u64>, unit: String },
    /// Fence a hung unit (its exit is then reported `HUNG`).
    FenceHung { unit: String },
    /// Add (or delete) and announce a unit's service addresses.
    Address {
        id: u64,
        unit: String,
        addresses: Vec<String>,
        add: bool,
        interface: String,
    },
    /// Ask a unit's primary for a planned switchover.
    Switchover { id: u64, unit: String },
    /// Have the unit's preheated standby on this host take over at `epoch`
    /// (`holdfast nsr takeover`); done once it is ready for the service
    /// address.
    Promote { id: u64, unit: String, epoch: u64 },
    /// Probe these targets from now on, `(name, ADDR:PORT)` (the
    /// leader's probe plan, `ProbeTargets`).
    ProbeTargets(Vec<(String, String)>),
    /// Renew the etcd lease now.
    RenewLease,
    /// Ask every other host agent for a failsafe round (this host's units).
    AskFailsafe { units: Vec<String> },
    /// The answer to [`AgentInput::FailsafeAsked`] `id`.
    FailsafeAnswer {
        id: u64,
        agree: bool,
        promise: Duration,
    },
}

/// A unit's service addresses to add once its takeover is ready.
#[derive(Debug, Clone)]
struct AddressMove {
    unit: String,
    addresses: Vec<String>,
    interface: String,
}

#[derive(Debug, Clone)]
struct Unit {
    pid: u32,
    role: String,
    epoch: u64,
}

/// The agent's pure core.
#[derive(Debug)]
pub struct AgentCore {
    cfg: AgentConfig,
    watchdog: Watchdog,
    highest_token: u64,
    units: BTreeMap<String, Unit>,
    /// Probe outcomes waiting for the next heartbeat ([`crate::outbox`]).
    outbox: Outbox,
    next_heartbeat: Time,
    connected: bool,
    /// Units whose process exited by itself and has not been started again
    /// nor fenced: their exit is reported again on every new stream (a
    /// new leader must hear of a failure its predecessor saw and died on).
    exited: BTreeMap<String, AgentOutput>,
    /// Other hosts' units this agent promised not to start, until when.
    promised: BTreeMap<String, Time>,
    /// Takeovers through a standby under way: command id -> unit.
    promoting: BTreeMap<u64, String>,
    /// Takeovers that add their unit's service addresses once ready:
    /// command id -> the move.
    announcing: BTreeMap<u64, AddressMove>,
    /// Takeovers whose addresses are being added: a failure to add them
    /// does not fail the takeover (the controller's address step adds
    /// them again).
    announced: BTreeSet<u64>,
    /// Units being fenced because they hung.
    hung: BTreeSet<String>,
}

/// A unit's role on this host: its primary, or its preheated standby.
pub const PRIMARY: &str = "primary";
pub const STANDBY: &str = "backup";

fn report(body: agent_report::Body) -> AgentOutput {
    AgentOutput::Report(AgentReport { body: Some(body) })
}

fn result(id: u64, r: Result<(), String>) -> AgentOutput {
    let (ok, error) = match r {
        Ok(()) => (true, String::new()),
        Err(e) => (false, e),
    };
    report(agent_report::Body::Result(CommandResult { id, ok, error }))
}

impl AgentCore {
    pub fn new(cfg: AgentConfig) -> AgentCore {
        AgentCore {
            watchdog: Watchdog::new(cfg.watchdog),
            cfg,
            highest_token: 0,
            units: BTreeMap::new(),
            outbox: Outbox::default(),
            next_heartbeat: Duration::ZERO,
            connected: false,
            exited: BTreeMap::new(),
            promised: BTreeMap::new(),
            promoting: BTreeMap::new(),
            announcing: BTreeMap::new(),
            announced: BTreeSet::new(),
            hung: BTreeSet::new(),
        }
    }

    /// Whether the host's units are kept by a confirmed failsafe round (an
    /// etcd outage) rather than by the lease.
    pub fn in_failsafe(&self) -> bool {
        self.watchdog.in_failsafe()
    }

    /// The highest fencing token accepted so far.
    pub fn highest_token(&self) -> u64 {
        self.highest_token
    }

    /// Whether the watchdog fenced the host's units.
    pub fn fenced(&self) -> bool {
        self.watchdog.fenced()
    }

    fn unix_ms(&self, now: Time) -> u64 {
        self.cfg.unix_origin_ms + now.as_millis() as u64
    }

    pub fn handle(&mut self, now: Time, input: AgentInput) -> Vec<AgentOutput> {
        let mut out = Vec::new();
        match input {
            AgentInput::Connected => {
                self.connected = true;
                self.outbox.connected();
                out.push(self.hello());
                // A new leader learns each unit's state from this stream.
                for (n, u) in &self.units {
                    out.push(unit_event(
                        n,
                        u.pid,
                        unit_event::Kind::Started,
                        (None, None),
                        &u.role,
                    ));
                }
                out.extend(self.exited.values().cloned());
                self.next_heartbeat = now;
            }
            AgentInput::Command(c) => self.command(c, now, &mut out),
            AgentInput::TakeoverReady { id, result: r } => match (self.announcing.remove(&id), r) {
                // Ready: the addresses now, and the command is done once
                // they are here (the shell reports `Done` for it).
                (Some(m), Ok(())) => {
                    self.announced.insert(id);
                    out.push(AgentOutput::Address {
                        id,
                        unit: m.unit,
                        addresses: m.addresses,
                        add: true,
                        interface: m.interface,
                    });
                }
                (_, r) => out.extend(self.handle(now, AgentInput::Done { id, result: r })),
            },
            AgentInput::Done { id, result: r } => {
                self.announcing.remove(&id);
                let announced = self.announced.remove(&id);
                let r = match r {
                    Err(e) if announced => {
                        tracing::warn!(id, error = %e, "takeover ready, its service addresses not added: the address step adds them");
                        Ok(())
                    }
                    r => r,
                };
                if let Some(unit) = self.promoting.remove(&id) {
                    if r.is_ok() {
                        if let Some(u) = self.units.get_mut(&unit) {
                            u.role = PRIMARY.into();
                            out.push(unit_event(
                                &unit,
                                u.pid,
                                unit_event::Kind::Started,
                                (None, None),
                                PRIMARY,
                            ));
                        }
                    }
                }
                out.push(result(id, r));
            }
            AgentInput::Measured(m) => {
                let m = holdfast_control_api::v1::Measurement {
                    from: m.from,
                    target: m.target,
                    seq: m.seq,
                    sent_unix_ms: self.unix_ms(m.sent_at),
                    ok: m.ok,
                    refused: m.refused,
                    rtt_us: m
                        .rtt
                        .map_or(0, |d| d.as_micros().min(u128::from(u32::MAX)) as u32),
                    waited_ms: 0,
                };
                let unix_ms = self.unix_ms(now);
                out.extend(self.outbox.measured(m, unix_ms).map(report));
            }
            AgentInput::UnitStarted {
                unit,
                pid,
                role,
                epoch,
            } => {
                self.exited.remove(&unit);
                self.hung.remove(&unit);
                out.push(unit_event(
                    &unit,
                    pid,
                    unit_event::Kind::Started,
                    (None, None),
                    &role,
                ));
                self.units.insert(unit, Unit { pid, role, epoch });
            }
            AgentInput::UnitExited(e) => {
                let role = self
                    .units
                    .remove(&e.unit)
                    .map_or_else(|| PRIMARY.to_string(), |u| u.role);
                let hung = e.fenced && self.hung.remove(&e.unit);
                let kind = match (e.fenced, e.container_gone) {
                    (true, _) if hung => unit_event::Kind::Hung,
                    (true, _) => unit_event::Kind::Fenced,
                    (false, true) => unit_event::Kind::ContainerGone,
                    (false, false) => unit_event::Kind::Exited,
                };
                let ev = unit_event(&e.unit, e.pid, kind, (e.code, e.signal), &role);
                if (e.fenced && !hung) || role == STANDBY {
                    self.exited.remove(&e.unit);
                } else {
                    self.exited.insert(e.unit.clone(), ev.clone());
                }
                out.push(ev);
            }
            AgentInput::UnitHung { unit, pid, silent } => {
                if self.units.get(&unit).is_some_and(|u| u.pid == pid) {
                    tracing::error!(
                        %unit,
                        pid,
                        silent_ms = silent.as_millis() as u64,
                        "unit hung (no watchdog ping): fencing it"
                    );
                    self.hung.insert(unit.clone());
                    out.push(AgentOutput::FenceHung { unit });
                }
            }
            AgentInput::LeaseRenewed { sent } => self.watchdog.renewed(sent),
            AgentInput::LeaseRenewalSent => self.watchdog.sending(now),
            AgentInput::LeaseGranted { sent } => {
                self.watchdog.reset();
                self.watchdog.sending(sent);
                self.watchdog.renewed(sent);
            }
            AgentInput::FailsafeAsked { id, from, units } => {
                let agree = self.watchdog.behind(now);
                let promise = self.cfg.watchdog.ttl;
                if agree {
                    for u in units {
                        let until = self.promised.entry(u).or_insert(now);
                        *until = (*until).max(now + promise);
                    }
                }
                tracing::info!(from = %from, agree, "failsafe round asked");
                out.push(AgentOutput::FailsafeAnswer { id, agree, promise });
            }
            AgentInput::FailsafeConfirmed { sent } => self.watchdog.confirmed(sent),
            AgentInput::LeaderToken(t) => {
                if let Some(h) = accept_token(t, self.highest_token) {
                    self.highest_token = h;
                }
            }
            AgentInput::Tick => {}
        }
        self.timers(now, &mut out);
        out
    }

    fn timers(&mut self, now: Time, out: &mut Vec<AgentOutput>) {
        self.promised.retain(|_, until| *until > now);
        if self.watchdog.ask_due(now) {
            self.watchdog.asking(now);
            if !self.units.is_empty() {
                out.push(AgentOutput::AskFailsafe {
                    units: self.units.keys().cloned().collect(),
                });
            }
        }
        match self.watchdog.check(now) {
            Action::Hold => {}
            Action::Renew => out.push(AgentOutput::RenewLease),
            Action::Fence => {
                tracing::error!(
                    host = %self.cfg.host,
                    units = self.units.len(),
                    "etcd lease not renewed in time: fencing every unit on this host"
                );
                for unit in self.units.keys() {
                    out.push(AgentOutput::Fence {
                        id: None,
                        unit: unit.clone(),
                    });
                }
            }
        }
        if self.connected && now >= self.next_heartbeat {
            let unix_ms = self.unix_ms(now);
            out.push(report(self.outbox.heartbeat(unix_ms)));
            self.next_heartbeat = now + self.cfg.heartbeat;
        }
    }

    /// When the core next needs a [`AgentInput::Tick`].
    pub fn next_deadline(&self) -> Option<Time> {
        let hb = self.connected.then_some(self.next_heartbeat);
        match (hb, self.watchdog.next_deadline()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// The role of the unit's process here, if one runs.
    pub fn role(&self, unit: &str) -> Option<&str> {
        self.units.get(unit).map(|u| u.role.as_str())
    }

    fn hello(&self) -> AgentOutput {
        report(agent_report::Body::Hello(Hello {
            host: self.cfg.host.clone(),
            agent_server: self.cfg.agent_server,
            units: self
                .units
                .iter()
                .map(|(n, u)| UnitStatus {
                    unit: n.clone(),
                    pid: u.pid,
                    role: u.role.clone(),
                    epoch: u.epoch,
                })
                .collect(),
            highest_token: self.highest_token,
            schema: SCHEMA,
            version: self.cfg.version.clone(),
            reports_refused: true,
            probe_plans: self.cfg.probe_plans,
        }))
    }

    fn command(&mut self, c: Command, now: Time, out: &mut Vec<AgentOutput>) {
        if let Some(command::Body::Beat(_) | command::Body::ProbeTargets(_)) = &c.body {
            // A beat and a probe plan ask for no result: a beat only tells
            // the leader's token; a plan is taken from a leader whose token
            // is accepted, unless `--static-probes`.
            match accept_token(c.token, self.highest_token) {
                Some(h) => {
                    self.highest_token = h;
                    match c.body {
                        Some(command::Body::ProbeTargets(p)) if self.cfg.probe_plans => {
                            out.push(AgentOutput::ProbeTargets(
                                p.targets.into_iter().map(|t| (t.name, t.addr)).collect(),
                            ));
                        }
                        Some(command::Body::Beat(b)) => {
                            out.extend(
                                self.outbox
                                    .beat(b.takes_measurements)
                                    .into_iter()
                                    .map(report),
                            );
                        }
                        _ => {}
                    }
                }
                None => tracing::debug!(
                    token = c.token,
                    highest = self.highest_token,
                    "a deposed leader's beat or probe plan"
                ),
            }
            return;
        }
        let Some(highest) = accept_token(c.token, self.highest_token) else {
            tracing::warn!(
                token = c.token,
                highest = self.highest_token,
                id = c.id,
                "command refused: stale fencing token"
            );
            out.push(result(
                c.id,
                Err(format!(
                    "stale fencing token {} (highest accepted {})",
                    c.token, self.highest_token
                )),
            ));
            return;
        };
        self.highest_token = highest;
        let id = c.id;
        let Some(body) = c.body else {
            out.push(result(id, Err("empty command".into())));
            return;
        };
        let starts = matches!(
            body,
            command::Body::StartUnit(_) | command::Body::Takeover(_)
        );
        if starts && self.watchdog.fenced() {
            out.push(result(
                id,
                Err(
                    "this host fenced its units (lease lost): no unit starts until a new lease"
                        .into(),
                ),
            ));
            return;
        }
        let unit = match &body {
            command::Body::StartUnit(s) => Some(&s.unit),
            command::Body::Takeover(t) => Some(&t.unit),
            _ => None,
        };
        if let command::Body::Takeover(t) = &body {
            // Its old primary's agent fenced it: no host runs it on the
            // strength of this host's failsafe promise any more.
            if t.primary_fenced && self.promised.remove(&t.unit).is_some() {
                tracing::info!(unit = %t.unit, "failsafe promise for this unit dropped: its old primary's agent fenced it");
            }
        }
        if let Some(until) = unit
            .and_then(|u| self.promised.get(u))
            .filter(|t| **t > now)
        {
            out.push(result(
                id,
                Err(format!(
                    "failsafe: promised its host not to start this unit for {:?} more",
                    until.saturating_sub(now)
                )),
            ));
            return;
        }
        if let command::Body::Takeover(t) = &body {
            if !t.addresses.is_empty() {
                self.announcing.insert(
                    id,
                    AddressMove {
                        unit: t.unit.clone(),
                        addresses: t.addresses.clone(),
                        interface: t.interface.clone(),
                    },
                );
            }
        }
        match body {
            command::Body::StartUnit(s) => out.push(AgentOutput::Start {
                id,
                unit: s.unit,
                config: s.config,
                standby: s.standby,
                takeover: None,
                binary: s.binary,
                caught_up: s.caught_up && s.standby,
                running_binary: s.running_binary,
            }),
            command::Body::Takeover(t) => {
                if self.units.get(&t.unit).is_some_and(|u| u.role == STANDBY) {
                    self.promoting.insert(id, t.unit.clone());
                    out.push(AgentOutput::Promote {
                        id,
                        unit: t.unit,
                        epoch: t.epoch,
                    });
                } else {
                    out.push(AgentOutput::Start {
                        id,
                        unit: t.unit,
                        config: t.config,
                        standby: false,
                        takeover: Some(t.epoch),
                        binary: t.binary,
                        caught_up: false,
                        running_binary: String::new(),
                    });
                }
            }
            command::Body::FenceUnit(f) => {
                self.exited.remove(&f.unit);
                out.push(AgentOutput::Fence {
                    id: Some(id),
                    unit: f.unit,
                });
            }
            command::Body::MoveAddress(m) => out.push(AgentOutput::Address {
                id,
                unit: m.unit,
                addresses: m.addresses,
                add: m.add,
                interface: m.interface,
            }),
            command::Body::Switchover(s) => out.push(AgentOutput::Switchover { id, unit: s.unit }),
            // Taken above.
            command::Body::Beat(_) | command::Body::ProbeTargets(_) => {}
        }
    }
}

fn unit_event(
    unit: &str,
    pid: u32,
    kind: unit_event::Kind,
    (code, signal): (Option<i32>, Option<i32>),
    role: &str,
) -> AgentOutput {
    report(agent_report::Body::UnitEvent(UnitEvent {
        unit: unit.to_string(),
        pid,
        kind: kind as i32,
        code: code.unwrap_or(-1),
        signal: signal.unwrap_or(0),
        role: role.to_string(),
    }))
}

#[cfg(test)]
#[path = "core_tests.rs"]
mod tests;
