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
//!   `heartbeat` interval, every probe measurement, every unit event and
//!   every command result.
//! - **The leader's token.** A leader's beat (`LeaderBeat`, no result)
//!   and the `leader` key read from etcd ([`AgentInput::LeaderToken`])
//!   raise the highest token accepted, so that a new leader's token is
//!   known as soon as the agent attaches to it (or reads etcd): a deposed
//!   leader that wakes up is refused from then on.

use crate::probe::Measurement;
use crate::runtime::Exit;
use crate::watchdog::{Action, Watchdog, WatchdogConfig};
use crate::Time;
use holdfast_control_api::v1::{
    agent_report, command, unit_event, AgentReport, Command, CommandResult, Heartbeat, Hello,
    UnitEvent, UnitStatus,
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
    heartbeat_seq: u64,
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
            heartbeat_seq: 0,
            next_heartbeat: Duration::ZERO,
            connected: false,
            exited: BTreeMap::new(),
            promised: BTreeMap::new(),
            promoting: BTreeMap::new(),
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
            AgentInput::Done { id, result: r } => {
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
                out.push(report(agent_report::Body::Measurement(
                    holdfast_control_api::v1::Measurement {
                        from: m.from,
                        target: m.target,
                        seq: m.seq,
                        sent_unix_ms: self.unix_ms(m.sent_at),
                        ok: m.ok,
                        rtt_us: m
                            .rtt
                            .map_or(0, |d| d.as_micros().min(u128::from(u32::MAX)) as u32),
                    },
                )));
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
            self.heartbeat_seq += 1;
            out.push(report(agent_report::Body::Heartbeat(Heartbeat {
                seq: self.heartbeat_seq,
                sent_unix_ms: self.unix_ms(now),
            })));
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
        }))
    }

    fn command(&mut self, c: Command, now: Time, out: &mut Vec<AgentOutput>) {
        if matches!(c.body, Some(command::Body::Beat(_))) {
            // A beat asks for nothing: it only tells the leader's token.
            match accept_token(c.token, self.highest_token) {
                Some(h) => self.highest_token = h,
                None => tracing::debug!(
                    token = c.token,
                    highest = self.highest_token,
                    "a deposed leader's beat"
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
        match body {
            command::Body::StartUnit(s) => out.push(AgentOutput::Start {
                id,
                unit: s.unit,
                config: s.config,
                standby: s.standby,
                takeover: None,
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
            command::Body::Beat(_) => {}
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
mod tests {
    use super::*;
    use holdfast_control_api::v1::{FenceUnit, LeaderBeat, StartUnit, Takeover};

    const MS: Duration = Duration::from_millis(1);

    /// How many reports in `o` match `is`.
    fn reports(o: &[AgentOutput], is: impl Fn(&agent_report::Body) -> bool) -> usize {
        o.iter()
            .filter(|x| matches!(x, AgentOutput::Report(AgentReport { body: Some(b) }) if is(b)))
            .count()
    }

    fn core() -> AgentCore {
        AgentCore::new(AgentConfig {
            host: "b".into(),
            agent_server: false,
            watchdog: WatchdogConfig::DEFAULT,
            heartbeat: 100 * MS,
            unix_origin_ms: 1_000_000,
            version: "test".into(),
        })
    }

    fn cmd(token: u64, id: u64, body: command::Body) -> AgentInput {
        AgentInput::Command(Command {
            token,
            id,
            body: Some(body),
        })
    }

    fn results(o: &[AgentOutput]) -> Vec<(u64, bool)> {
        o.iter()
            .filter_map(|o| match o {
                AgentOutput::Report(AgentReport {
                    body: Some(agent_report::Body::Result(r)),
                }) => Some((r.id, r.ok)),
                _ => None,
            })
            .collect()
    }

    fn fences(o: &[AgentOutput]) -> Vec<(Option<u64>, String)> {
        o.iter()
            .filter_map(|o| match o {
                AgentOutput::Fence { id, unit } => Some((*id, unit.clone())),
                _ => None,
            })
            .collect()
    }

    fn fence_unit(u: &str) -> command::Body {
        command::Body::FenceUnit(FenceUnit { unit: u.into() })
    }

    #[test]
    fn a_deposed_leader_cannot_act() {
        let mut c = core();
        c.handle(
            Duration::ZERO,
            AgentInput::LeaseGranted {
                sent: Duration::ZERO,
            },
        );
        // Leader with token 10 fences unit x.
        let o = c.handle(MS, cmd(10, 1, fence_unit("x")));
        assert_eq!(fences(&o), vec![(Some(1), "x".into())]);
        // A new leader (token 12) is seen.
        let o = c.handle(2 * MS, cmd(12, 1, fence_unit("y")));
        assert_eq!(fences(&o), vec![(Some(1), "y".into())]);
        // The old one's next command is refused and does nothing.
        let o = c.handle(3 * MS, cmd(10, 2, fence_unit("z")));
        assert!(fences(&o).is_empty());
        assert_eq!(results(&o), vec![(2, false)]);
        assert_eq!(c.highest_token(), 12);
        // Token 0 (none) is refused too.
        assert_eq!(
            results(&c.handle(4 * MS, cmd(0, 3, fence_unit("z")))),
            vec![(3, false)]
        );
    }

    #[test]
    fn the_watchdog_fences_every_unit_and_blocks_starts_until_a_new_lease() {
        let mut c = core();
        let o = c.handle(Duration::ZERO, AgentInput::Tick);
        assert!(o.contains(&AgentOutput::RenewLease), "no lease yet");
        c.handle(
            Duration::ZERO,
            AgentInput::LeaseGranted {
                sent: Duration::ZERO,
            },
        );
        for (u, pid) in [("edge-1", 10), ("edge-2", 11)] {
            c.handle(
                MS,
                AgentInput::UnitStarted {
                    unit: u.into(),
                    pid,
                    role: "primary".into(),
                    epoch: 3,
                },
            );
        }
        c.handle(500 * MS, AgentInput::LeaseRenewalSent);
        // etcd stops answering; at 1.5 s the lease (granted at 0, 3 s) is
        // within the 1.5 s margin: fence both units, once.
        assert!(fences(&c.handle(1499 * MS, AgentInput::Tick)).is_empty());
        let o = c.handle(1500 * MS, AgentInput::Tick);
        assert_eq!(
            fences(&o),
            vec![(None, "edge-1".into()), (None, "edge-2".into())]
        );
        assert!(c.fenced());
        assert!(fences(&c.handle(1600 * MS, AgentInput::Tick)).is_empty());
        // While fenced, nothing starts; fencing is still allowed.
        let start = command::Body::StartUnit(StartUnit {
            unit: "edge-1".into(),
            config: String::new(),
            standby: false,
        });
        let o = c.handle(1700 * MS, cmd(5, 1, start.clone()));
        assert_eq!(results(&o), vec![(1, false)]);
        let take = command::Body::Takeover(Takeover {
            unit: "edge-3".into(),
            config: String::new(),
            epoch: 4,
            primary_fenced: false,
        });
        assert_eq!(
            results(&c.handle(1701 * MS, cmd(5, 2, take))),
            vec![(2, false)]
        );
        assert_eq!(
            fences(&c.handle(1702 * MS, cmd(5, 3, fence_unit("edge-2")))).len(),
            1
        );
        // A new lease: starts are allowed again.
        c.handle(5000 * MS, AgentInput::LeaseGranted { sent: 5000 * MS });
        let o = c.handle(5001 * MS, cmd(5, 4, start));
        assert!(matches!(o[0], AgentOutput::Start { id: 4, .. }), "{o:?}");
    }

    #[test]
    fn hello_heartbeats_and_events() {
        let mut c = core();
        c.handle(
            Duration::ZERO,
            AgentInput::LeaseGranted {
                sent: Duration::ZERO,
            },
        );
        c.handle(
            MS,
            AgentInput::UnitStarted {
                unit: "edge-1".into(),
                pid: 10,
                role: "primary".into(),
                epoch: 3,
            },
        );
        c.handle(2 * MS, cmd(9, 1, fence_unit("nothing")));
        let o = c.handle(10 * MS, AgentInput::Connected);
        let AgentOutput::Report(AgentReport {
            body: Some(agent_report::Body::Hello(h)),
        }) = &o[0]
        else {
            panic!("{o:?}")
        };
        assert_eq!(
            (
                h.host.as_str(),
                h.units.len(),
                h.highest_token,
                h.schema,
                h.version.as_str()
            ),
            ("b", 1, 9, SCHEMA, "test")
        );
        // The running unit's state again, for a new leader.
        assert!(matches!(
            &o[1],
            AgentOutput::Report(AgentReport {
                body: Some(agent_report::Body::UnitEvent(UnitEvent {
                    kind: 1,
                    pid: 10,
                    ..
                }))
            })
        ));
        assert!(matches!(
            &o[2],
            AgentOutput::Report(AgentReport {
                body: Some(agent_report::Body::Heartbeat(Heartbeat {
                    seq: 1,
                    sent_unix_ms: 1_000_010
                }))
            })
        ));
        assert_eq!(c.next_deadline(), Some(110 * MS));
        let beats =
            |o: &[AgentOutput]| reports(o, |b| matches!(b, agent_report::Body::Heartbeat(_)));
        assert_eq!(beats(&c.handle(109 * MS, AgentInput::Tick)), 0);
        assert_eq!(beats(&c.handle(110 * MS, AgentInput::Tick)), 1);
        let o = c.handle(
            120 * MS,
            AgentInput::UnitExited(Exit {
                unit: "edge-1".into(),
                pid: 10,
                code: None,
                signal: Some(9),
                fenced: false,
                container_gone: false,
            }),
        );
        assert!(
            matches!(
                &o[0],
                AgentOutput::Report(AgentReport {
                    body: Some(agent_report::Body::UnitEvent(UnitEvent {
                        kind: 2,
                        code: -1,
                        signal: 9,
                        ..
                    }))
                })
            ),
            "{o:?}"
        );
        let o = c.handle(
            130 * MS,
            AgentInput::Measured(Measurement {
                from: "b".into(),
                target: "host:a".into(),
                seq: 4,
                sent_at: 125 * MS,
                ok: true,
                rtt: Some(Duration::from_micros(250)),
            }),
        );
        assert!(matches!(
            &o[0],
            AgentOutput::Report(AgentReport {
                body: Some(agent_report::Body::Measurement(m))
            }) if m.sent_unix_ms == 1_000_125 && m.rtt_us == 250 && m.ok
        ));
        assert_eq!(
            results(&c.handle(
                140 * MS,
                AgentInput::Done {
                    id: 1,
                    result: Ok(())
                }
            )),
            vec![(1, true)]
        );
    }

    #[test]
    fn a_hung_unit_is_fenced_then_reported_hung_until_fenced_by_command() {
        let mut c = core();
        c.handle(Duration::ZERO, AgentInput::Connected);
        c.handle(
            MS,
            AgentInput::UnitStarted {
                unit: "edge-1".into(),
                pid: 10,
                role: PRIMARY.into(),
                epoch: 1,
            },
        );
        let hung = |pid| AgentInput::UnitHung {
            unit: "edge-1".into(),
            pid,
            silent: 500 * MS,
        };
        // Another pid (an old process): nothing.
        assert!(!c
            .handle(2 * MS, hung(9))
            .iter()
            .any(|o| matches!(o, AgentOutput::FenceHung { .. })));
        let o = c.handle(3 * MS, hung(10));
        assert!(o.contains(&AgentOutput::FenceHung {
            unit: "edge-1".into()
        }));
        let gone = AgentInput::UnitExited(Exit {
            unit: "edge-1".into(),
            pid: 10,
            code: None,
            signal: Some(9),
            fenced: true,
            container_gone: false,
        });
        let kinds = |o: &[AgentOutput]| -> Vec<i32> {
            o.iter()
                .filter_map(|x| match x {
                    AgentOutput::Report(AgentReport {
                        body: Some(agent_report::Body::UnitEvent(e)),
                    }) => Some(e.kind),
                    _ => None,
                })
                .collect()
        };
        assert_eq!(
            kinds(&c.handle(4 * MS, gone.clone())),
            vec![unit_event::Kind::Hung as i32]
        );
        // A new leader's stream hears of it again, until a command fences it.
        assert_eq!(
            kinds(&c.handle(5 * MS, AgentInput::Connected)),
            vec![unit_event::Kind::Hung as i32]
        );
        c.handle(6 * MS, cmd(3, 1, fence_unit("edge-1")));
        assert!(kinds(&c.handle(7 * MS, AgentInput::Connected)).is_empty());
        // An ordinary fence afterwards is reported FENCED.
        c.handle(
            8 * MS,
            AgentInput::UnitStarted {
                unit: "edge-1".into(),
                pid: 10,
                role: PRIMARY.into(),
                epoch: 2,
            },
        );
        assert_eq!(
            kinds(&c.handle(9 * MS, gone)),
            vec![unit_event::Kind::Fenced as i32]
        );
    }

    #[test]
    fn a_beat_or_etcd_tells_the_new_leaders_token_and_the_old_one_is_refused() {
        let mut c = core();
        let beat = |token| {
            AgentInput::Command(Command {
                token,
                id: 0,
                body: Some(command::Body::Beat(LeaderBeat {})),
            })
        };
        // The old leader (token 5) ran a command; a beat asks for nothing.
        c.handle(MS, cmd(5, 1, fence_unit("x")));
        assert!(results(&c.handle(2 * MS, beat(5))).is_empty());
        // The new leader's first beat on its stream: token 9.
        assert!(results(&c.handle(3 * MS, beat(9))).is_empty());
        assert_eq!(c.highest_token(), 9);
        assert_eq!(
            results(&c.handle(4 * MS, cmd(5, 2, fence_unit("edge-1")))),
            vec![(2, false)]
        );
        // A deposed leader's beat changes nothing.
        assert!(results(&c.handle(5 * MS, beat(5))).is_empty());
        assert_eq!(c.highest_token(), 9);
        // etcd names a newer leader before its stream is open.
        c.handle(6 * MS, AgentInput::LeaderToken(12));
        assert_eq!(c.highest_token(), 12);
        c.handle(7 * MS, AgentInput::LeaderToken(11));
        assert_eq!(c.highest_token(), 12);
        assert_eq!(
            results(&c.handle(8 * MS, cmd(9, 3, fence_unit("edge-1")))),
            vec![(3, false)]
        );
    }

    #[test]
    fn an_exit_is_reported_again_on_a_new_stream_until_fenced_or_restarted() {
        let mut c = core();
        c.handle(Duration::ZERO, AgentInput::Connected);
        let exit = AgentInput::UnitExited(Exit {
            unit: "edge-1".into(),
            pid: 10,
            code: None,
            signal: Some(9),
            fenced: false,
            container_gone: false,
        });
        c.handle(MS, exit);
        let events =
            |o: &[AgentOutput]| reports(o, |b| matches!(b, agent_report::Body::UnitEvent(_)));
        // A new leader's stream hears of it again.
        assert_eq!(events(&c.handle(2 * MS, AgentInput::Connected)), 1);
        // Once the unit is fenced by a command, no more.
        let fence = Command {
            token: 5,
            id: 1,
            body: Some(command::Body::FenceUnit(FenceUnit {
                unit: "edge-1".into(),
            })),
        };
        c.handle(3 * MS, AgentInput::Command(fence));
        assert_eq!(events(&c.handle(4 * MS, AgentInput::Connected)), 0);
    }

    fn answers(o: &[AgentOutput]) -> Vec<(u64, bool)> {
        o.iter()
            .filter_map(|o| match o {
                AgentOutput::FailsafeAnswer { id, agree, .. } => Some((*id, *agree)),
                _ => None,
            })
            .collect()
    }

    fn asked(o: &[AgentOutput]) -> Option<Vec<String>> {
        o.iter().find_map(|o| match o {
            AgentOutput::AskFailsafe { units } => Some(units.clone()),
            _ => None,
        })
    }

    #[test]
    fn failsafe_keeps_units_through_an_etcd_outage_every_agent_agrees_to() {
        // `a` runs edge-1; etcd stops answering after the grant at 0.
        let mut a = core();
        a.handle(
            Duration::ZERO,
            AgentInput::LeaseGranted {
                sent: Duration::ZERO,
            },
        );
        a.handle(
            MS,
            AgentInput::UnitStarted {
                unit: "edge-1".into(),
                pid: 10,
                role: "primary".into(),
                epoch: 1,
            },
        );
        assert_eq!(asked(&a.handle(999 * MS, AgentInput::Tick)), None);
        let o = a.handle(1000 * MS, AgentInput::Tick);
        assert_eq!(asked(&o), Some(vec!["edge-1".to_string()]), "{o:?}");
        // `b`, asked: healthy (renewed at 900 ms) it disagrees and promises
        // nothing; late itself it agrees and then refuses to start edge-1
        // for one TTL, while other units start.
        let mut b = core();
        b.handle(900 * MS, AgentInput::LeaseGranted { sent: 900 * MS });
        let ask = |id| AgentInput::FailsafeAsked {
            id,
            from: "a".into(),
            units: vec!["edge-1".into()],
        };
        assert_eq!(answers(&b.handle(1000 * MS, ask(1))), vec![(1, false)]);
        let take = |u: &str| {
            command::Body::Takeover(Takeover {
                unit: u.into(),
                config: String::new(),
                epoch: 2,
                primary_fenced: false,
            })
        };
        assert!(matches!(
            b.handle(1001 * MS, cmd(3, 1, take("edge-1")))[0],
            AgentOutput::Start { .. }
        ));
        // Its own renewals late (none acknowledged since 900 ms), it agrees.
        assert_eq!(answers(&b.handle(1900 * MS, ask(2))), vec![(2, true)]);
        assert_eq!(
            results(&b.handle(1901 * MS, cmd(3, 2, take("edge-1")))),
            vec![(2, false)]
        );
        assert!(matches!(
            b.handle(1902 * MS, cmd(3, 3, take("edge-9")))[0],
            AgentOutput::Start { .. }
        ));
        // etcd answers `b` again; the promise still holds until 4.9 s.
        for t in [2000, 3000, 4000] {
            b.handle(t * MS, AgentInput::LeaseRenewed { sent: t * MS });
        }
        assert_eq!(
            results(&b.handle(4899 * MS, cmd(3, 4, take("edge-1")))),
            vec![(4, false)]
        );
        // A takeover whose old primary's agent acknowledged its fence: the
        // promise is moot.
        let fenced = command::Body::Takeover(Takeover {
            unit: "edge-1".into(),
            config: String::new(),
            epoch: 2,
            primary_fenced: true,
        });
        assert!(matches!(
            b.handle(4899 * MS, cmd(3, 9, fenced))[0],
            AgentOutput::Start { .. }
        ));
        assert!(matches!(
            b.handle(4900 * MS, cmd(3, 5, take("edge-1")))[0],
            AgentOutput::Start { .. }
        ));
        // Back at `a`: every agent agreed to the round sent at 1 s: edge-1 is
        // kept past 1.5 s (until 1 s + 3 s - 1.5 s), and rounds go on.
        a.handle(1010 * MS, AgentInput::FailsafeConfirmed { sent: 1000 * MS });
        assert!(a.in_failsafe());
        let o = a.handle(1500 * MS, AgentInput::Tick);
        assert!(fences(&o).is_empty(), "{o:?}");
        assert!(asked(&o).is_some());
        a.handle(1510 * MS, AgentInput::FailsafeConfirmed { sent: 1500 * MS });
        assert!(fences(&a.handle(2999 * MS, AgentInput::Tick)).is_empty());
        // The next rounds are refused: fenced at 1.5 s + 1.5 s.
        assert_eq!(fences(&a.handle(3000 * MS, AgentInput::Tick)).len(), 1);
        // etcd back: a new lease, renewals on time, no more rounds.
        a.handle(4000 * MS, AgentInput::LeaseGranted { sent: 4000 * MS });
        assert!(!a.in_failsafe());
        assert_eq!(asked(&a.handle(4100 * MS, AgentInput::Tick)), None);
    }

    #[test]
    fn a_takeover_goes_through_the_standby_running_here() {
        let mut c = core();
        c.handle(
            Duration::ZERO,
            AgentInput::LeaseGranted {
                sent: Duration::ZERO,
            },
        );
        let o = c.handle(
            MS,
            AgentInput::UnitStarted {
                unit: "edge-1".into(),
                pid: 42,
                role: STANDBY.into(),
                epoch: 0,
            },
        );
        assert!(
            matches!(&o[0], AgentOutput::Report(AgentReport { body: Some(agent_report::Body::UnitEvent(e)) }) if e.role == STANDBY),
            "{o:?}"
        );
        let take = |u: &str| {
            command::Body::Takeover(Takeover {
                unit: u.into(),
                config: String::new(),
                epoch: 9,
                primary_fenced: false,
            })
        };
        let o = c.handle(2 * MS, cmd(9, 1, take("edge-1")));
        assert_eq!(
            o[0],
            AgentOutput::Promote {
                id: 1,
                unit: "edge-1".into(),
                epoch: 9
            }
        );
        // Another unit without a standby here: a cold start.
        let o = c.handle(3 * MS, cmd(9, 2, take("edge-2")));
        assert!(
            matches!(
                o[0],
                AgentOutput::Start {
                    takeover: Some(9),
                    ..
                }
            ),
            "{o:?}"
        );
        // Ready: the standby is the primary now (its own pid, reported).
        let o = c.handle(
            4 * MS,
            AgentInput::Done {
                id: 1,
                result: Ok(()),
            },
        );
        assert!(
            matches!(&o[0], AgentOutput::Report(AgentReport { body: Some(agent_report::Body::UnitEvent(e)) })
                if e.pid == 42 && e.role == PRIMARY && e.kind == unit_event::Kind::Started as i32),
            "{o:?}"
        );
        assert_eq!(results(&o), vec![(1, true)]);
        // A second takeover of it here is no longer through a standby.
        let o = c.handle(5 * MS, cmd(9, 3, take("edge-1")));
        assert!(matches!(o[0], AgentOutput::Start { .. }), "{o:?}");
    }
}
