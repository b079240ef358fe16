//! IP SLA probes (TENSOR §3.3.2): every agent probes the units on its host
//! and the other hosts, the agent server probes every host and unit, and
//! each outcome goes to the controller as a [`Measurement`].
//!
//! [`Prober`] is the pure core: `handle(now, input) -> outputs`, with
//! [`Prober::next_deadline`]. It sends one probe per target every
//! interval (each target's first probe spread over the first interval, so
//! a thousand targets do not fire at once), counts a probe lost when no
//! answer came within the timeout, and reports every outcome once. A late
//! answer to a probe already counted lost is ignored.
//!
//! **The agent's own stall is not a lost probe** (Lifeguard's local
//! health, issue 25). The prober knows when it asked to be woken next
//! ([`Prober::next_deadline`]); an input that comes more than
//! [`ProbeConfig::stall_slack`] after that deadline means the agent itself
//! did not run (stopped, starved, or its loop blocked). A probe that
//! missed (no answer in time, an answer too late, or an error) and that
//! was sent before such a stall was noticed is **discarded**
//! ([`Output::Discarded`]), not reported: its timeout was not measured by
//! a timer that fired on time. An answer's round trip is taken from the
//! time the probe's own thread saw it ([`Input::Answered`]'s `at`), not
//! from when the loop got to it.
//!
//! Its timers are indexed: each target's next send, and each outstanding
//! probe by the time it was sent. A wake-up visits only what is due, and
//! the next deadline is the first of either (an agent server holds
//! thousands of targets; visiting every one at each wake-up, and again
//! for the deadline after each answer, was quadratic: issue 29).
//!
//! [`tcp_probe`] is the shell's probe: a TCP connect with a timeout. A
//! completed handshake or a reset both count as an answer (the target's
//! stack is up, whether or not the port listens); a timeout, "host
//! unreachable" or "network unreachable" does not.

use crate::Time;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::time::Duration;

/// What is probed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Target {
    /// The name the controller knows it by (`host:b`, `unit:edge-1`).
    pub name: String,
    pub addr: SocketAddr,
}

/// Settings of a [`Prober`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProbeConfig {
    /// One probe per target every `interval` (100 ms by default).
    pub interval: Duration,
    /// A probe unanswered after `timeout` is lost (the interval by default).
    pub timeout: Duration,
    /// An input this much later than the deadline the prober asked for:
    /// the agent stalled (half the timeout by default).
    #[serde(default = "default_stall_slack")]
    pub stall_slack: Duration,
    /// A target that keeps answering is reported once per `report_every`
    /// (500 ms by default, inside the localizer's 1 s freshness); a miss,
    /// the first answer after one, and every outcome of an alerted target
    /// ([`ProbeConfig::alert_for`]) are reported at once. The interval:
    /// every outcome, as before issue 29.
    #[serde(default = "default_report_every")]
    pub report_every: Duration,
    /// After a target misses, how long its every outcome is reported (1 s
    /// by default); after a unit misses, every host target's too: while a
    /// unit fails, the controller sees each probe of the hosts, as it
    /// needs to tell a host from its units (a container-network verdict
    /// waits for a host's answer after the unit's miss). Before, a miss
    /// alerted every target: a rack's failure had each agent server report
    /// all 5,500 probes a second of its segment.
    #[serde(default = "default_alert_for")]
    pub alert_for: Duration,
}

fn default_stall_slack() -> Duration {
    Duration::from_millis(50)
}

fn default_report_every() -> Duration {
    Duration::from_millis(500)
}

fn default_alert_for() -> Duration {
    Duration::from_secs(1)
}

impl Default for ProbeConfig {
    fn default() -> Self {
        ProbeConfig {
            interval: Duration::from_millis(100),
            timeout: Duration::from_millis(100),
            stall_slack: default_stall_slack(),
            report_every: default_report_every(),
            alert_for: default_alert_for(),
        }
    }
}

/// One probe's outcome, as the controller receives it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Measurement {
    /// The vantage point: the agent that probed.
    pub from: String,
    pub target: String,
    pub seq: u64,
    /// When the probe was sent (the prober's clock).
    pub sent_at: Time,
    /// Answered within the timeout.
    pub ok: bool,
    /// Answered with a reset: the target's stack is up but nothing listens
    /// on the port (for a unit: holdfastd is not running there).
    #[serde(default)]
    pub refused: bool,
    /// Round trip, when answered.
    pub rtt: Option<Duration>,
}

/// What the core is fed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Input {
    /// Fire what is due at `now`.
    Timer,
    /// The probe `seq` of target `target` was answered (`ok`) or failed
    /// (`!ok`: unreachable, or no answer within its timeout), as its
    /// thread saw at `at`.
    Answered {
        target: usize,
        seq: u64,
        ok: bool,
        at: Time,
    },
    /// The probe `seq` of target `target` was answered with a reset
    /// (nothing listens on the port), as its thread saw at `at`.
    Refused { target: usize, seq: u64, at: Time },
}

/// What the shell carries out, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Output {
    /// Send probe `seq` to target `target`; answer with
    /// [`Input::Answered`] before `timeout`.
    Probe {
        target: usize,
        seq: u64,
        addr: SocketAddr,
        timeout: Duration,
    },
    /// An outcome for the controller.
    Measured(Measurement),
    /// A probe that missed across the agent's own stall: no outcome.
    Discarded { target: String, seq: u64 },
}

#[derive(Debug)]
struct Slot {
    target: Target,
    next_send: Time,
    /// Outstanding probes: seq -> sent at.
    outstanding: BTreeMap<u64, Time>,
    /// The last outcome reported (answered, refused), and when.
    reported: Option<((bool, bool), Time)>,
    /// Every outcome of it is reported until then (it missed).
    alert_until: Option<Time>,
}

impl Slot {
    /// Target `i` of `n`, its first probe spread over the first interval
    /// from `now` (a thousand targets do not fire at once).
    fn new(target: Target, now: Time, cfg: &ProbeConfig, (i, n): (usize, usize)) -> Slot {
        let n = n.max(1) as u32;
        Slot {
            target,
            next_send: now + cfg.interval * i as u32 / n,
            outstanding: BTreeMap::new(),
            reported: None,
            alert_until: None,
        }
    }
}

/// The pure prober.
#[derive(Debug)]
pub struct Prober {
    from: String,
    cfg: ProbeConfig,
    slots: Vec<Slot>,
    /// The next probe's sequence number, unique over every target: an
    /// answer that comes back after a new plan moved its target to another
    /// index is still found by it.
    next_seq: u64,
    /// The deadline the prober last asked to be woken at.
    expected: Option<Time>,
    /// When the latest stall of the agent was noticed.
    stalled_at: Option<Time>,
    /// Every outcome of a host target is reported until then (a unit
    /// missed).
    hosts_alert_until: Option<Time>,
    /// Each slot's next send, by time (mirrors `Slot::next_send`).
    sends: BTreeSet<(Time, usize)>,
    /// Each outstanding probe (sent at, seq, slot), by when it was sent:
    /// a timer finds what is due without visiting every target (an agent
    /// server holds thousands; visiting each at every wake-up, and the
    /// deadline after every answer, was quadratic).
    expiries: BTreeSet<(Time, u64, usize)>,
}

impl Prober {
    /// Probes `targets` from the vantage point `from`, starting at `now`.
    pub fn new(from: &str, cfg: ProbeConfig, targets: Vec<Target>, now: Time) -> Prober {
        let n = targets.len();
        let slots = targets
            .into_iter()
            .enumerate()
            .map(|(i, target)| Slot::new(target, now, &cfg, (i, n)))
            .collect();
        let mut p = Prober {
            from: from.to_string(),
            cfg,
            slots,
            next_seq: 0,
            expected: None,
            stalled_at: None,
            hosts_alert_until: None,
            sends: BTreeSet::new(),
            expiries: BTreeSet::new(),
        };
        p.index();
        p
    }

    /// Rebuilds the send and expiry indexes from the slots.
    fn index(&mut self) {
        self.sends = self
            .slots
            .iter()
            .enumerate()
            .map(|(i, s)| (s.next_send, i))
            .collect();
        self.expiries = self
            .slots
            .iter()
            .enumerate()
            .flat_map(|(i, s)| s.outstanding.iter().map(move |(q, t)| (*t, *q, i)))
            .collect();
    }

    pub fn targets(&self) -> impl Iterator<Item = &Target> {
        self.slots.iter().map(|s| &s.target)
    }

    /// Target `i` (as [`Output::Probe`] numbers them).
    pub fn target(&self, i: usize) -> Option<&Target> {
        self.slots.get(i).map(|s| &s.target)
    }

    /// Probes `targets` from now on (a new probe plan): a target that stays
    /// keeps its rhythm, its outstanding probes and what was last reported
    /// of it; a new one starts within the next interval, spread as at the
    /// start. Outstanding probes of a target that goes are forgotten (their
    /// answers are ignored). An answer to a probe sent before the change
    /// is matched by its sequence number (unique over every target), so a
    /// target that stays but moved in the list still gets it.
    pub fn set_targets(&mut self, targets: Vec<Target>, now: Time) {
        let mut old: BTreeMap<String, Slot> = self
            .slots
            .drain(..)
            .map(|s| (s.target.name.clone(), s))
            .collect();
        let n = targets.len();
        self.slots = targets
            .into_iter()
            .enumerate()
            .map(|(i, target)| match old.remove(&target.name) {
                Some(mut s) => {
                    s.target = target;
                    s
                }
                None => Slot::new(target, now, &self.cfg, (i, n)),
            })
            .collect();
        self.index();
        self.expected = self.next_deadline();
    }

    pub fn handle(&mut self, now: Time, input: Input) -> Vec<Output> {
        let mut out = Vec::new();
        if self
            .expected
            .is_some_and(|d| now > d + self.cfg.stall_slack)
        {
            self.stalled_at = Some(now);
        }
        match input {
            Input::Timer => self.timer(now, &mut out),
            Input::Answered {
                target,
                seq,
                ok,
                at,
            } => self.answered(now, (target, seq), ok, false, at, &mut out),
            Input::Refused { target, seq, at } => {
                self.answered(now, (target, seq), true, true, at, &mut out)
            }
        }
        self.expected = self.next_deadline();
        out
    }

    fn answered(
        &mut self,
        now: Time,
        (target, seq): (usize, u64),
        ok: bool,
        refused: bool,
        at: Time,
        out: &mut Vec<Output>,
    ) {
        let stalled_at = self.stalled_at;
        // Its index, unless a new plan moved the target since the probe.
        let target = if self
            .slots
            .get(target)
            .is_some_and(|s| s.outstanding.contains_key(&seq))
        {
            Some(target)
        } else {
            self.slots
                .iter()
                .position(|s| s.outstanding.contains_key(&seq))
        };
        if let Some((i, s)) = target.and_then(|t| Some((t, self.slots.get_mut(t)?))) {
            if let Some(sent) = s.outstanding.remove(&seq) {
                self.expiries.remove(&(sent, seq, i));
                let rtt = at.min(now).saturating_sub(sent);
                let ok = ok && rtt <= self.cfg.timeout;
                let mut o = outcome(&self.from, s, seq, sent, ok.then_some(rtt), stalled_at);
                if let Output::Measured(m) = &mut o {
                    m.refused = ok && refused;
                }
                report(&self.cfg, &mut self.hosts_alert_until, s, now, o, out);
            }
        }
    }

    fn timer(&mut self, now: Time, out: &mut Vec<Output>) {
        // Probes lost: sent more than the timeout ago.
        while let Some(&(sent, seq, i)) = self.expiries.first() {
            if now.saturating_sub(sent) <= self.cfg.timeout {
                break;
            }
            self.expiries.pop_first();
            let Some(s) = self.slots.get_mut(i) else {
                continue;
            };
            s.outstanding.remove(&seq);
            let o = outcome(&self.from, s, seq, sent, None, self.stalled_at);
            report(&self.cfg, &mut self.hosts_alert_until, s, now, o, out);
        }
        // Probes due.
        while let Some(&(due, i)) = self.sends.first() {
            if due > now {
                break;
            }
            self.sends.pop_first();
            let Some(s) = self.slots.get_mut(i) else {
                continue;
            };
            let seq = self.next_seq;
            self.next_seq += 1;
            s.outstanding.insert(seq, now);
            self.expiries.insert((now, seq, i));
            // Keep the rhythm: the next send is one interval after the
            // scheduled one, or one after now when a wake-up came so late
            // that the scheduled one has passed too.
            let sched = s.next_send + self.cfg.interval;
            s.next_send = if sched <= now {
                now + self.cfg.interval
            } else {
                sched
            };
            self.sends.insert((s.next_send, i));
            out.push(Output::Probe {
                target: i,
                seq,
                addr: s.target.addr,
                timeout: self.cfg.timeout,
            });
        }
    }

    /// When [`Input::Timer`] is next due.
    pub fn next_deadline(&self) -> Option<Time> {
        let send = self.sends.first().map(|(t, _)| *t);
        let lost = self
            .expiries
            .first()
            .map(|(t, _, _)| *t + self.cfg.timeout + Duration::from_micros(1));
        match (send, lost) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }
}

/// Whether an outcome goes to the controller (see
/// [`ProbeConfig::report_every`]); a miss opens an alert on its target,
/// and a unit's miss on every host target too.
fn report(
    cfg: &ProbeConfig,
    hosts_alert_until: &mut Option<Time>,
    s: &mut Slot,
    now: Time,
    o: Output,
    out: &mut Vec<Output>,
) {
    let Output::Measured(m) = &o else {
        out.push(o);
        return;
    };
    let amiss = !m.ok || m.refused;
    let host = s.target.name.starts_with("host:");
    if amiss {
        s.alert_until = Some(now + cfg.alert_for);
        if !host {
            *hosts_alert_until = Some(now + cfg.alert_for);
        }
    }
    let alerted = s.alert_until.is_some_and(|t| now < t)
        || (host && hosts_alert_until.is_some_and(|t| now < t));
    let send = amiss
        || alerted
        || match s.reported {
            Some((last, at)) => {
                last != (m.ok, m.refused) || now.saturating_sub(at) >= cfg.report_every
            }
            None => true,
        };
    if send {
        s.reported = Some(((m.ok, m.refused), now));
        out.push(o);
    }
}

/// A probe's outcome: answered in `rtt`, or a miss — discarded when the
/// agent stalled after it was sent.
fn outcome(
    from: &str,
    s: &Slot,
    seq: u64,
    sent: Time,
    rtt: Option<Duration>,
    stalled_at: Option<Time>,
) -> Output {
    if rtt.is_none() && stalled_at.is_some_and(|t| t > sent) {
        return Output::Discarded {
            target: s.target.name.clone(),
            seq,
        };
    }
    Output::Measured(Measurement {
        from: from.to_string(),
        target: s.target.name.clone(),
        seq,
        sent_at: sent,
        ok: rtt.is_some(),
        refused: false,
        rtt,
    })
}

/// What one TCP probe got.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Probed {
    /// The handshake completed: something listens.
    Connected,
    /// A reset: the target's stack is up, nothing listens on the port.
    Refused,
    /// No answer within the timeout, or unreachable.
    Lost,
}

/// One TCP probe with a timeout.
pub fn tcp_probe(addr: SocketAddr, timeout: Duration) -> Probed {
    match std::net::TcpStream::connect_timeout(&addr, timeout) {
        Ok(_) => Probed::Connected,
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => Probed::Refused,
        Err(_) => Probed::Lost,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    fn targets(n: usize) -> Vec<Target> {
        (0..n)
            .map(|i| Target {
                name: format!("host:{i}"),
                addr: SocketAddr::from(([198, 18, 0, 1 + i as u8], 179)),
            })
            .collect()
    }

    fn probes(o: &[Output]) -> Vec<(usize, u64)> {
        o.iter()
            .filter_map(|o| match o {
                Output::Probe { target, seq, .. } => Some((*target, *seq)),
                Output::Measured(_) | Output::Discarded { .. } => None,
            })
            .collect()
    }

    fn measured(o: &[Output]) -> Vec<(String, u64, bool)> {
        o.iter()
            .filter_map(|o| match o {
                Output::Measured(m) => Some((m.target.clone(), m.seq, m.ok)),
                Output::Probe { .. } | Output::Discarded { .. } => None,
            })
            .collect()
    }

    #[test]
    fn one_probe_per_interval_spread_over_targets() {
        let mut p = Prober::new(
            "agent:a",
            ProbeConfig::default(),
            targets(4),
            Duration::ZERO,
        );
        let mut sent = Vec::new();
        let mut t = Duration::ZERO;
        while t < 1000 * MS {
            for (target, seq) in probes(&p.handle(t, Input::Timer)) {
                sent.push((t, target, seq));
                // Everything answers at once.
                p.handle(
                    t,
                    Input::Answered {
                        target,
                        seq,
                        ok: true,
                        at: t,
                    },
                );
            }
            t += MS;
        }
        assert_eq!(sent.len(), 40, "10 probes per target per second");
        // Spread: the four targets' first probes at 0, 25, 50, 75 ms.
        let firsts: Vec<Duration> = (0..4)
            .map(|i| sent.iter().find(|s| s.1 == i).unwrap().0)
            .collect();
        assert_eq!(firsts, vec![Duration::ZERO, 25 * MS, 50 * MS, 75 * MS]);
        assert_eq!(p.next_deadline(), Some(1000 * MS));
    }

    #[test]
    fn answered_lost_late_and_unreachable() {
        let cfg = ProbeConfig {
            interval: 100 * MS,
            timeout: 80 * MS,
            stall_slack: 40 * MS,
            report_every: 100 * MS,
            ..ProbeConfig::default()
        };
        let mut p = Prober::new("agent:a", cfg, targets(1), Duration::ZERO);
        assert_eq!(
            probes(&p.handle(Duration::ZERO, Input::Timer)),
            vec![(0, 0)]
        );
        // Answered after 10 ms.
        let o = p.handle(
            10 * MS,
            Input::Answered {
                target: 0,
                seq: 0,
                ok: true,
                at: 10 * MS,
            },
        );
        assert_eq!(measured(&o), vec![("host:0".into(), 0, true)]);
        let Output::Measured(m) = &o[0] else {
            unreachable!()
        };
        assert_eq!(m.rtt, Some(10 * MS));
        // Probe 1 at 100 ms is never answered: lost once its timeout passed.
        assert_eq!(probes(&p.handle(100 * MS, Input::Timer)), vec![(0, 1)]);
        assert!(measured(&p.handle(180 * MS, Input::Timer)).is_empty());
        assert_eq!(p.next_deadline(), Some(180 * MS + Duration::from_micros(1)));
        let o = p.handle(181 * MS, Input::Timer);
        assert_eq!(measured(&o), vec![("host:0".into(), 1, false)]);
        // Its late answer is ignored.
        assert!(p
            .handle(
                190 * MS,
                Input::Answered {
                    target: 0,
                    seq: 1,
                    ok: true,
                    at: 190 * MS,
                }
            )
            .is_empty());
        // Probe 2: unreachable at once.
        assert_eq!(probes(&p.handle(200 * MS, Input::Timer)), vec![(0, 2)]);
        let o = p.handle(
            201 * MS,
            Input::Answered {
                target: 0,
                seq: 2,
                ok: false,
                at: 201 * MS,
            },
        );
        assert_eq!(measured(&o), vec![("host:0".into(), 2, false)]);
        // An answer for an unknown target or probe is ignored.
        assert!(p
            .handle(
                202 * MS,
                Input::Answered {
                    target: 9,
                    seq: 0,
                    ok: true,
                    at: 202 * MS,
                }
            )
            .is_empty());
        let json = serde_json::to_string(&m).unwrap();
        assert_eq!(serde_json::from_str::<Measurement>(&json).unwrap(), *m);
    }

    /// A prober of one target with the default configuration, at time zero.
    fn one_target() -> Prober {
        Prober::new(
            "agent:a",
            ProbeConfig::default(),
            targets(1),
            Duration::ZERO,
        )
    }

    #[test]
    fn a_late_wake_up_sends_once_and_keeps_going() {
        let mut p = one_target();
        p.handle(Duration::ZERO, Input::Timer);
        // The shell was stalled for 350 ms: one probe now (not three), and
        // the earlier one, unanswered across the stall, is discarded, not
        // reported lost: its timeout was not timed by a timer on time.
        let o = p.handle(350 * MS, Input::Timer);
        assert_eq!(probes(&o), vec![(0, 1)]);
        assert!(measured(&o).is_empty());
        assert!(o.contains(&Output::Discarded {
            target: "host:0".into(),
            seq: 0
        }));
        assert_eq!(probes(&p.handle(449 * MS, Input::Timer)), vec![]);
        // Probes sent after the stall are judged as usual.
        assert_eq!(probes(&p.handle(450 * MS, Input::Timer)), vec![(0, 2)]);
        assert_eq!(
            measured(&p.handle(451 * MS, Input::Timer)),
            vec![("host:0".into(), 1, false)]
        );
    }

    #[test]
    fn an_answer_read_late_counts_at_the_time_its_thread_saw_it() {
        let mut p = one_target();
        p.handle(Duration::ZERO, Input::Timer);
        // Answered 3 ms after it was sent, but the loop (stopped) reads it
        // only at 900 ms: answered, round trip 3 ms.
        let o = p.handle(
            900 * MS,
            Input::Answered {
                target: 0,
                seq: 0,
                ok: true,
                at: 3 * MS,
            },
        );
        assert_eq!(measured(&o), vec![("host:0".into(), 0, true)]);
        assert!(matches!(&o[0], Output::Measured(m) if m.rtt == Some(3 * MS)));
        // A probe out across a stall whose answer came too late: discarded.
        p.handle(1000 * MS, Input::Timer);
        let o = p.handle(
            1700 * MS,
            Input::Answered {
                target: 0,
                seq: 1,
                ok: true,
                at: 1650 * MS,
            },
        );
        assert_eq!(
            o,
            vec![Output::Discarded {
                target: "host:0".into(),
                seq: 1
            }]
        );
        // On time again: a real timeout is a lost probe.
        let mut t = 1700;
        let mut lost = Vec::new();
        while t < 2300 {
            lost.extend(measured(&p.handle(t * MS, Input::Timer)));
            t += 10;
        }
        assert!(lost.iter().all(|m| !m.2) && lost.len() >= 4, "{lost:?}");
    }

    #[test]
    fn tcp_probe_tells_a_handshake_from_a_reset() {
        // A listening port and a closed one on loopback both answer: one
        // with a handshake, the other with a reset.
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        assert_eq!(
            tcp_probe(l.local_addr().unwrap(), 200 * MS),
            Probed::Connected
        );
        let closed = {
            let t = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            t.local_addr().unwrap()
        };
        assert_eq!(tcp_probe(closed, 200 * MS), Probed::Refused);
    }

    #[test]
    fn a_refused_probe_is_an_answer_that_is_reported_at_once_as_refused() {
        let mut p = Prober::new("a", ProbeConfig::default(), targets(1), Duration::ZERO);
        let mut t = Duration::ZERO;
        let mut seen = Vec::new();
        while t < 1000 * MS {
            let fired = p.handle(t, Input::Timer);
            for (target, seq) in probes(&fired) {
                let input = if t >= 600 * MS {
                    Input::Refused { target, seq, at: t }
                } else {
                    Input::Answered {
                        target,
                        seq,
                        ok: true,
                        at: t,
                    }
                };
                for o in p.handle(t, input) {
                    if let Output::Measured(m) = o {
                        seen.push((t, m.ok, m.refused));
                    }
                }
            }
            t += MS;
        }
        // Quiet at 0 and 500 ms; then every refusal, each one an answer.
        assert_eq!(
            seen[..2],
            [(Duration::ZERO, true, false), (500 * MS, true, false)]
        );
        let refused: Vec<_> = seen.iter().filter(|s| s.2).collect();
        assert_eq!(refused.len(), 4, "{seen:?}");
        assert!(refused.iter().all(|s| s.1));
    }

    #[test]
    fn answers_are_reported_twice_a_second_misses_and_what_follows_at_once() {
        let mut ts = targets(2);
        ts.push(Target {
            name: "unit:u".into(),
            addr: SocketAddr::from(([198, 18, 0, 50], 179)),
        });
        let mut p = Prober::new("a", ProbeConfig::default(), ts, Duration::ZERO);
        let mut seen: Vec<(Duration, String, bool)> = Vec::new();
        let mut t = Duration::ZERO;
        // host:1 stops answering from 2 s to 2.35 s, unit:u from 5 s to
        // 5.35 s.
        while t < 7000 * MS {
            let fired = p.handle(t, Input::Timer);
            seen.extend(measured(&fired).into_iter().map(|(n, _, ok)| (t, n, ok)));
            for (target, seq) in probes(&fired) {
                let down = (target == 1 && t >= 2000 * MS && t < 2350 * MS)
                    || (target == 2 && t >= 5000 * MS && t < 5350 * MS);
                if !down {
                    let o = p.handle(
                        t,
                        Input::Answered {
                            target,
                            seq,
                            ok: true,
                            at: t,
                        },
                    );
                    seen.extend(measured(&o).into_iter().map(|(n, _, ok)| (t, n, ok)));
                }
            }
            t += MS;
        }
        let of = |name: &str, from: u32, to: u32| {
            seen.iter()
                .filter(|(at, n, _)| n == name && *at >= from * MS && *at < to * MS)
                .count()
        };
        // Quiet: one report per target per 500 ms, not ten a second.
        for n in ["host:0", "host:1", "unit:u"] {
            assert_eq!(of(n, 0, 2000), 4, "{n}: {seen:?}");
        }
        // The misses, each reported.
        let misses = seen.iter().filter(|(_, _, ok)| !ok).count();
        assert!((6..=8).contains(&misses), "{misses} misses: {seen:?}");
        // A host's miss: its own every outcome for 1 s, not the others'.
        assert!(of("host:1", 2350, 3300) >= 9, "{seen:?}");
        assert!(of("host:0", 2200, 3000) <= 2, "{seen:?}");
        assert!(of("unit:u", 2200, 3000) <= 2, "{seen:?}");
        // A unit's miss: its own and every host's every outcome for 1 s.
        assert!(of("unit:u", 5350, 6300) >= 9, "{seen:?}");
        assert!(of("host:0", 5200, 6000) >= 7, "{seen:?}");
        assert!(of("host:1", 5200, 6000) >= 7, "{seen:?}");
        // Then quiet again.
        assert!(of("host:0", 6500, 7000) <= 2, "{seen:?}");
    }

    #[test]
    fn a_new_plan_keeps_the_targets_that_stay() {
        let mut p = Prober::new("a", ProbeConfig::default(), targets(3), Duration::ZERO);
        let first = probes(&p.handle(Duration::ZERO, Input::Timer));
        assert_eq!(first, vec![(0, 0)]);
        // host:1 and host:2 stay (host:2 now first), host:0 goes, host:9 comes.
        let mut next = targets(3).split_off(1);
        next.reverse();
        next.push(Target {
            name: "host:9".into(),
            addr: SocketAddr::from(([198, 18, 0, 99], 179)),
        });
        p.set_targets(next, 10 * MS);
        let names: Vec<String> = p.targets().map(|t| t.name.clone()).collect();
        assert_eq!(names, vec!["host:2", "host:1", "host:9"]);
        // The answer to host:0's probe is ignored: it is not probed any more.
        let o = p.handle(
            11 * MS,
            Input::Answered {
                target: 0,
                seq: 0,
                ok: true,
                at: 11 * MS,
            },
        );
        assert!(measured(&o).is_empty(), "{o:?}");
        // host:1 keeps its slot in the rhythm (100/3 ms), host:2 too (200/3 ms);
        // host:9 starts within the interval.
        let mut sent = Vec::new();
        let mut t = 11 * MS;
        while t < 120 * MS {
            for (target, seq) in probes(&p.handle(t, Input::Timer)) {
                sent.push((t, target, seq));
            }
            t += MS;
        }
        let at = |i: usize| sent.iter().find(|s| s.1 == i).map(|s| s.0);
        assert_eq!(at(1), Some(34 * MS), "{sent:?}");
        assert_eq!(at(0), Some(67 * MS), "{sent:?}");
        assert!(at(2).is_some_and(|t| t < 110 * MS), "{sent:?}");
    }

    #[test]
    fn an_answer_finds_its_target_after_a_plan_moved_it() {
        let mut p = Prober::new("a", ProbeConfig::default(), targets(2), Duration::ZERO);
        let mut sent = probes(&p.handle(Duration::ZERO, Input::Timer));
        sent.extend(probes(&p.handle(50 * MS, Input::Timer)));
        assert_eq!(sent, vec![(0, 0), (1, 1)]);
        // The plan swaps the two while host:1's probe is out.
        let mut next = targets(2);
        next.reverse();
        p.set_targets(next, 60 * MS);
        let o = p.handle(
            70 * MS,
            Input::Answered {
                target: 1,
                seq: 1,
                ok: true,
                at: 70 * MS,
            },
        );
        assert_eq!(measured(&o), vec![("host:1".into(), 1, true)]);
        // host:0's probe, answered under its old index, is host:0's too.
        let o = p.handle(
            71 * MS,
            Input::Answered {
                target: 0,
                seq: 0,
                ok: true,
                at: 71 * MS,
            },
        );
        assert_eq!(measured(&o), vec![("host:0".into(), 0, true)]);
    }

    /// The deadline as every target's state gives it (what the indexes
    /// replace).
    fn scanned_deadline(p: &Prober) -> Option<Time> {
        p.slots
            .iter()
            .flat_map(|s| {
                let lost = s
                    .outstanding
                    .values()
                    .map(|t| *t + p.cfg.timeout + Duration::from_micros(1));
                std::iter::once(s.next_send).chain(lost)
            })
            .min()
    }

    #[test]
    fn the_indexed_deadline_is_the_one_every_target_gives() {
        // A timeout shorter than the interval: lost probes' deadlines come
        // before the next sends.
        let cfg = ProbeConfig {
            timeout: 60 * MS,
            ..ProbeConfig::default()
        };
        let mut p = Prober::new("as", cfg, targets(200), Duration::ZERO);
        let mut sent = 0;
        let mut t = Duration::ZERO;
        let mut step = 0u64;
        while t < 2000 * MS {
            for (target, seq) in probes(&p.handle(t, Input::Timer)) {
                sent += 1;
                // Two in three answer, in a few ms; the rest are lost.
                if seq % 3 != 0 {
                    let at = t + MS * (seq % 7) as u32;
                    p.handle(
                        at,
                        Input::Answered {
                            target,
                            seq,
                            ok: true,
                            at,
                        },
                    );
                }
            }
            assert_eq!(p.next_deadline(), scanned_deadline(&p), "at {t:?}");
            if step == 500 {
                // A new plan halfway: half the targets go, others come.
                let mut next = targets(300);
                next.drain(..100);
                p.set_targets(next, t);
                assert_eq!(p.next_deadline(), scanned_deadline(&p));
            }
            step += 1;
            t = p.next_deadline().unwrap_or(t + MS).max(t + MS / 4);
        }
        assert!(
            sent > 2 * 10 * 200,
            "every target probed each interval: {sent}"
        );
    }
}
