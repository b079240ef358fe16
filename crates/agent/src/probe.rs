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
//! [`tcp_probe`] is the shell's probe: a TCP connect with a timeout. A
//! completed handshake or a reset both count as an answer (the target's
//! stack is up, whether or not the port listens); a timeout, "host
//! unreachable" or "network unreachable" does not.

use crate::Time;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
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
}

fn default_stall_slack() -> Duration {
    Duration::from_millis(50)
}

impl Default for ProbeConfig {
    fn default() -> Self {
        ProbeConfig {
            interval: Duration::from_millis(100),
            timeout: Duration::from_millis(100),
            stall_slack: default_stall_slack(),
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
    next_seq: u64,
    /// Outstanding probes: seq -> sent at.
    outstanding: BTreeMap<u64, Time>,
}

/// The pure prober.
#[derive(Debug)]
pub struct Prober {
    from: String,
    cfg: ProbeConfig,
    slots: Vec<Slot>,
    /// The deadline the prober last asked to be woken at.
    expected: Option<Time>,
    /// When the latest stall of the agent was noticed.
    stalled_at: Option<Time>,
}

impl Prober {
    /// Probes `targets` from the vantage point `from`, starting at `now`.
    pub fn new(from: &str, cfg: ProbeConfig, targets: Vec<Target>, now: Time) -> Prober {
        let n = targets.len().max(1) as u32;
        let slots = targets
            .into_iter()
            .enumerate()
            .map(|(i, target)| Slot {
                target,
                next_send: now + cfg.interval * i as u32 / n,
                next_seq: 0,
                outstanding: BTreeMap::new(),
            })
            .collect();
        Prober {
            from: from.to_string(),
            cfg,
            slots,
            expected: None,
            stalled_at: None,
        }
    }

    pub fn targets(&self) -> impl Iterator<Item = &Target> {
        self.slots.iter().map(|s| &s.target)
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
            } => {
                let stalled_at = self.stalled_at;
                if let Some(s) = self.slots.get_mut(target) {
                    if let Some(sent) = s.outstanding.remove(&seq) {
                        let rtt = at.min(now).saturating_sub(sent);
                        let ok = ok && rtt <= self.cfg.timeout;
                        out.push(outcome(
                            &self.from,
                            s,
                            seq,
                            sent,
                            ok.then_some(rtt),
                            stalled_at,
                        ));
                    }
                }
            }
        }
        self.expected = self.next_deadline();
        out
    }

    fn timer(&mut self, now: Time, out: &mut Vec<Output>) {
        for (i, s) in self.slots.iter_mut().enumerate() {
            let lost: Vec<(u64, Time)> = s
                .outstanding
                .iter()
                .filter(|(_, sent)| now.saturating_sub(**sent) > self.cfg.timeout)
                .map(|(q, t)| (*q, *t))
                .collect();
            for (seq, sent) in lost {
                s.outstanding.remove(&seq);
                out.push(outcome(&self.from, s, seq, sent, None, self.stalled_at));
            }
            if now >= s.next_send {
                let seq = s.next_seq;
                s.next_seq += 1;
                s.outstanding.insert(seq, now);
                // Keep the rhythm: the next send is one interval after the
                // scheduled one, or one after now when a wake-up came so late
                // that the scheduled one has passed too.
                let sched = s.next_send + self.cfg.interval;
                s.next_send = if sched <= now {
                    now + self.cfg.interval
                } else {
                    sched
                };
                out.push(Output::Probe {
                    target: i,
                    seq,
                    addr: s.target.addr,
                    timeout: self.cfg.timeout,
                });
            }
        }
    }

    /// When [`Input::Timer`] is next due.
    pub fn next_deadline(&self) -> Option<Time> {
        self.slots
            .iter()
            .flat_map(|s| {
                let lost = s
                    .outstanding
                    .values()
                    .map(|t| *t + self.cfg.timeout + Duration::from_micros(1));
                std::iter::once(s.next_send).chain(lost)
            })
            .min()
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
        rtt,
    })
}

/// The outcome of one TCP probe: `Ok(true)` answered (connected or reset),
/// `Ok(false)` no answer within `timeout` or unreachable.
pub fn tcp_probe(addr: SocketAddr, timeout: Duration) -> bool {
    match std::net::TcpStream::connect_timeout(&addr, timeout) {
        Ok(_) => true,
        Err(e) => e.kind() == std::io::ErrorKind::ConnectionRefused,
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
    fn tcp_probe_counts_a_reset_as_an_answer() {
        // A listening port and a closed one on loopback both answer.
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        assert!(tcp_probe(l.local_addr().unwrap(), 200 * MS));
        let closed = {
            let t = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            t.local_addr().unwrap()
        };
        assert!(tcp_probe(closed, 200 * MS));
    }
}
