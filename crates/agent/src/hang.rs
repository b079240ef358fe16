//! Hang detection (issue 25): the agent is the watchdog of the units it
//! runs, as systemd is of a service with `WatchdogSec=`.
//!
//! Each unit's holdfastd is started with `NOTIFY_SOCKET` (a datagram
//! socket of its own, bound by the agent in the unit's directory) and
//! `WATCHDOG_USEC` (`--hang-ms`); it sends `READY=1` once serving and then
//! `WATCHDOG=1` several times per window, but only while every one of its
//! event loops makes progress (`holdfast_speaker`'s `watchdog`).
//!
//! [`HangWatch`] is the pure decision: `handle(now, input) -> outputs`.
//! - A unit that has sent anything (`READY=1` or a ping) is **hung** when
//!   nothing came from it for [`HangConfig::hang`] and the kernel shows its
//!   process stopped (`/proc/PID/stat` state `T`: SIGSTOP, a debugger), or
//!   for [`HangConfig::running`] (4 × `hang`) whatever the kernel shows: a
//!   process that is not stopped but silent may be starved or held in the
//!   kernel for a moment by a loaded host (the lab saw three units on two
//!   hosts silent for just over 500 ms at once, their agents on time), and
//!   a deadlock or a stuck loop is found a little later. Before its first
//!   message it has [`HangConfig::start`]: a process starting, a
//!   `--takeover` loading a million routes, a standby building its tables
//!   send nothing until they serve, and must not be judged by the pings'
//!   window. (A takeover that never becomes ready is also caught by the
//!   agent's own wait for its ready file.)
//! - Messages carry the kernel's receive time, and the shell reads every
//!   queued one before each [`Input::Tick`]: an agent that was itself
//!   stopped or starved finds the pings that came meanwhile, at their real
//!   times, and does not blame a unit for its own lateness.
//! - The agent's own stall (Lifeguard's local health): a tick that comes
//!   more than [`HangConfig::stall_slack`] (a fifth of the window) after
//!   the previous one means
//!   the agent did not run meanwhile; if the whole host froze, the units
//!   could not ping either, so every unit's window starts again at that
//!   tick.
//! - A message from another pid than the unit's process (an old process)
//!   is ignored; a unit is declared hung once ([`Output::Hung`]), and the
//!   agent fences it (SIGKILL through its pidfd: a stopped process dies
//!   without running again) and reports `HUNG` on the Attach stream.
//!
//! [`HangWatch::gaps`] keeps, per unit, the longest gap between two of its
//! messages since it became ready: how late the pings got under load.
//!
//! [`Sockets`] is the shell's part: the per-unit listeners.
//!
//! # Known issues
//! - A unit started by hand (outside the agent) has no socket and is not
//!   watched.
//! - The kernel time is the wall clock (`SO_TIMESTAMPNS`); a wall-clock
//!   step shifts the ages of the messages read in that round.

use crate::Time;
use holdfast_linux::notify::{Listener, Message};
use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, SystemTime};

/// Settings of a [`HangWatch`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HangConfig {
    /// No message for this long after the first: hung (`--hang-ms`).
    pub hang: Duration,
    /// Before the first message: how long a unit may take to serve
    /// (`--hang-start-ms`).
    pub start: Duration,
    /// A tick later than this after the previous one: the agent stalled.
    pub stall_slack: Duration,
    /// Silent this long: hung even when the kernel does not show the
    /// process stopped.
    pub running: Duration,
}

impl HangConfig {
    /// `hang`, with the start allowance and a slack of a fifth of the
    /// window (the agent's loop passes every 20 ms at most; a host that
    /// starves its processes for a fraction of the window stalls the agent
    /// too, and the windows restart).
    pub fn new(hang: Duration, start: Duration) -> HangConfig {
        HangConfig {
            hang,
            start,
            stall_slack: hang / 5,
            running: hang * 4,
        }
    }
}

/// What the watch is fed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Input {
    /// The unit's process `pid` started (a new one replaces the old).
    Started { unit: String, pid: u32 },
    /// A message from the unit's socket, received by the kernel at `at`.
    Message {
        unit: String,
        pid: Option<u32>,
        at: Time,
    },
    /// The kernel's view of a unit's process (asked for by
    /// [`HangWatch::overdue`]): stopped (state `T`) or not.
    Stopped {
        unit: String,
        pid: u32,
        stopped: bool,
    },
    /// The unit's process is gone (exited or fenced): no more watching.
    Gone { unit: String },
    /// Judge now (after reading every queued message).
    Tick,
}

/// What the shell carries out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Output {
    /// The unit is hung: fence it and report it.
    Hung {
        unit: String,
        pid: u32,
        /// Since its last message (or its start, when it sent none).
        silent: Duration,
        /// Whether it ever sent anything.
        served: bool,
    },
}

#[derive(Debug, Clone)]
struct Watched {
    pid: u32,
    /// Its start, or its last message.
    last: Time,
    served: bool,
    /// The window restarts here after an agent stall.
    from: Time,
    declared: bool,
    max_gap: Duration,
    /// The kernel showed it stopped since its last message.
    stopped: bool,
}

/// The pure hang decision (see the module docs).
#[derive(Debug)]
pub struct HangWatch {
    cfg: HangConfig,
    units: BTreeMap<String, Watched>,
    last_tick: Option<Time>,
    stalls: u64,
}

impl HangWatch {
    pub fn new(cfg: HangConfig) -> HangWatch {
        HangWatch {
            cfg,
            units: BTreeMap::new(),
            last_tick: None,
            stalls: 0,
        }
    }

    pub fn handle(&mut self, now: Time, input: Input) -> Vec<Output> {
        let mut out = Vec::new();
        match input {
            Input::Started { unit, pid } => {
                self.units.insert(
                    unit,
                    Watched {
                        pid,
                        last: now,
                        served: false,
                        from: now,
                        declared: false,
                        max_gap: Duration::ZERO,
                        stopped: false,
                    },
                );
            }
            Input::Message { unit, pid, at } => {
                if let Some(w) = self.units.get_mut(&unit) {
                    if pid.is_none_or(|p| p == w.pid) {
                        let at = at.min(now);
                        if at > w.last {
                            if w.served {
                                w.max_gap = w.max_gap.max(at - w.last);
                            }
                            w.last = at;
                            w.stopped = false;
                        }
                        w.served = true;
                    }
                }
            }
            Input::Stopped { unit, pid, stopped } => {
                if let Some(w) = self.units.get_mut(&unit).filter(|w| w.pid == pid) {
                    w.stopped = stopped;
                }
            }
            Input::Gone { unit } => {
                self.units.remove(&unit);
            }
            Input::Tick => self.tick(now, &mut out),
        }
        out
    }

    fn tick(&mut self, now: Time, out: &mut Vec<Output>) {
        let stalled = self
            .last_tick
            .is_some_and(|t| now.saturating_sub(t) > self.cfg.stall_slack);
        self.last_tick = Some(now);
        if stalled {
            self.stalls += 1;
        }
        for (unit, w) in &mut self.units {
            if stalled {
                w.from = now;
            }
            if w.declared {
                continue;
            }
            let limit = match (w.served, w.stopped) {
                (false, _) => self.cfg.start,
                (true, true) => self.cfg.hang,
                (true, false) => self.cfg.running,
            };
            let since = w.last.max(w.from);
            if now.saturating_sub(since) > limit {
                w.declared = true;
                out.push(Output::Hung {
                    unit: unit.clone(),
                    pid: w.pid,
                    silent: now.saturating_sub(w.last),
                    served: w.served,
                });
            }
        }
    }

    /// The served units silent for longer than the window at `now`: the
    /// shell tells their process state ([`Input::Stopped`]) before the
    /// next [`Input::Tick`].
    pub fn overdue(&self, now: Time) -> Vec<(String, u32)> {
        self.units
            .iter()
            .filter(|(_, w)| {
                w.served && !w.declared && now.saturating_sub(w.last.max(w.from)) > self.cfg.hang
            })
            .map(|(u, w)| (u.clone(), w.pid))
            .collect()
    }

    /// The units watched and their pids.
    pub fn watched(&self) -> impl Iterator<Item = (&str, u32)> {
        self.units.iter().map(|(u, w)| (u.as_str(), w.pid))
    }

    /// Per unit, the longest gap between two of its messages.
    pub fn gaps(&self) -> BTreeMap<String, Duration> {
        self.units
            .iter()
            .map(|(u, w)| (u.clone(), w.max_gap))
            .collect()
    }

    /// How many times the agent found itself stalled.
    pub fn stalls(&self) -> u64 {
        self.stalls
    }
}

/// Whether the kernel shows process `pid` stopped (`/proc/PID/stat` state
/// `T` or `t`); `false` when it cannot be read.
pub fn process_stopped(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            let rest = &s[s.rfind(')')? + 1..];
            rest.split_whitespace()
                .next()
                .map(|st| st == "T" || st == "t")
        })
        .unwrap_or(false)
}

/// The shell's per-unit notification sockets.
#[derive(Debug, Default)]
pub struct Sockets {
    by_unit: BTreeMap<String, Listener>,
}

impl Sockets {
    /// Binds the socket of `unit`'s next process at `path` (replacing the
    /// previous one: an old process reaches nobody).
    pub fn bind(&mut self, unit: &str, path: &Path) -> std::io::Result<()> {
        self.by_unit.remove(unit);
        let l = Listener::bind(path)?;
        self.by_unit.insert(unit.to_string(), l);
        Ok(())
    }

    /// Closes `unit`'s socket.
    pub fn close(&mut self, unit: &str) {
        self.by_unit.remove(unit);
    }

    /// Every queued message of every unit, each as an [`Input::Message`]
    /// at the agent's time (`now` is the agent's time at `wall`).
    pub fn drain(&self, now: Time, wall: SystemTime) -> Vec<Input> {
        let mut out = Vec::new();
        let mut msgs: Vec<Message> = Vec::new();
        for (unit, l) in &self.by_unit {
            msgs.clear();
            if let Err(e) = l.drain(&mut msgs, 1024) {
                tracing::warn!(%unit, error = %e, "reading the unit's notification socket");
            }
            for m in msgs.drain(..) {
                let age = wall.duration_since(m.at).unwrap_or_default();
                out.push(Input::Message {
                    unit: unit.clone(),
                    pid: m.pid,
                    at: now.saturating_sub(age),
                });
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    fn ms(x: u64) -> Duration {
        Duration::from_millis(x)
    }

    fn watch() -> HangWatch {
        HangWatch::new(HangConfig::new(500 * MS, 30_000 * MS))
    }

    /// `u1` (pid 10) started at time zero.
    fn start_u1(w: &mut HangWatch) {
        w.handle(
            Duration::ZERO,
            Input::Started {
                unit: "u1".into(),
                pid: 10,
            },
        );
    }

    fn ping(w: &mut HangWatch, at: u64) {
        w.handle(
            ms(at),
            Input::Message {
                unit: "u1".into(),
                pid: Some(10),
                at: ms(at),
            },
        );
    }

    /// One pass of the shell at `t`: the kernel's view (`stopped`) of every
    /// overdue unit, then the tick.
    fn tick(w: &mut HangWatch, t: u64, stopped: bool) -> Vec<Output> {
        for (unit, pid) in w.overdue(ms(t)) {
            w.handle(ms(t), Input::Stopped { unit, pid, stopped });
        }
        w.handle(ms(t), Input::Tick)
    }

    /// Passes every 20 ms from `from` to `to`, the kernel showing the
    /// process `stopped` or not; the first hung verdict.
    fn run(w: &mut HangWatch, from: u64, to: u64) -> Option<(u64, Output)> {
        run_as(w, from, to, true)
    }

    fn run_as(w: &mut HangWatch, from: u64, to: u64, stopped: bool) -> Option<(u64, Output)> {
        (from..=to)
            .step_by(20)
            .find_map(|t| tick(w, t, stopped).into_iter().next().map(|o| (t, o)))
    }

    #[test]
    fn a_unit_that_stops_pinging_is_hung_after_the_window_once() {
        let mut w = watch();
        start_u1(&mut w);
        // Pings every 125 ms until 1 s, then nothing (SIGSTOP).
        for t in (100..=1000).step_by(125) {
            ping(&mut w, t);
            assert!(w.handle(ms(t), Input::Tick).is_empty());
        }
        let (t, o) = run(&mut w, 1000, 3000).expect("hung");
        assert_eq!(t, 1480, "the first tick past 975 + 500 ms");
        assert_eq!(
            o,
            Output::Hung {
                unit: "u1".into(),
                pid: 10,
                silent: 505 * MS,
                served: true
            }
        );
        assert_eq!(run(&mut w, 1500, 5000), None, "declared once");
        assert_eq!(w.gaps()["u1"], 125 * MS);
    }

    #[test]
    fn a_silent_unit_the_kernel_shows_running_gets_four_windows() {
        let mut w = watch();
        start_u1(&mut w);
        ping(&mut w, 100);
        // Starved or held in the kernel, not stopped: 2 s of silence.
        assert_eq!(run_as(&mut w, 120, 2100, false), None);
        let (t, o) = run_as(&mut w, 2120, 3000, false).expect("hung");
        assert_eq!(t, 2120);
        assert!(matches!(o, Output::Hung { served: true, .. }));
        // Seen stopped once, then a ping: the next silence starts afresh
        // (not stopped).
        let mut w = watch();
        start_u1(&mut w);
        ping(&mut w, 100);
        w.handle(
            ms(700),
            Input::Stopped {
                unit: "u1".into(),
                pid: 9,
                stopped: true,
            },
        );
        assert_eq!(run_as(&mut w, 620, 700, false), None, "another pid's view");
        ping(&mut w, 710);
        assert_eq!(run_as(&mut w, 720, 2700, false), None);
        assert!(run_as(&mut w, 2720, 2720, false).is_some());
    }

    #[test]
    fn start_up_has_its_own_allowance() {
        let mut w = watch();
        start_u1(&mut w);
        // A takeover loading a million routes: silent for 20 s, then ready.
        assert_eq!(run(&mut w, 0, 20_000), None);
        ping(&mut w, 20_000);
        assert_eq!(run(&mut w, 20_000, 20_500), None);
        assert!(run(&mut w, 20_500, 21_000).is_some());
        // One that never serves: hung after the allowance.
        let mut w = watch();
        start_u1(&mut w);
        let (t, o) = run(&mut w, 0, 40_000).expect("hung");
        assert_eq!(t, 30_020);
        assert!(matches!(o, Output::Hung { served: false, .. }));
    }

    #[test]
    fn pings_read_late_count_at_their_kernel_time() {
        let mut w = HangWatch::new(HangConfig {
            stall_slack: 250 * MS,
            ..HangConfig::new(500 * MS, 30_000 * MS)
        });
        start_u1(&mut w);
        ping(&mut w, 100);
        w.handle(100 * MS, Input::Tick);
        // The agent's loop is slow (a tick every 200 ms, under the stall
        // slack of 250 ms); the unit pinged at 225, 350 and 475, read only
        // at 500: judged at their kernel times, no verdict.
        w.handle(300 * MS, Input::Tick);
        for at in [225, 350, 475] {
            w.handle(
                500 * MS,
                Input::Message {
                    unit: "u1".into(),
                    pid: Some(10),
                    at: ms(at),
                },
            );
        }
        assert!(w.handle(500 * MS, Input::Tick).is_empty());
        assert_eq!(run(&mut w, 520, 960), None);
        assert!(run(&mut w, 980, 980).is_some(), "silent since 475");
    }

    #[test]
    fn the_agents_own_stall_restarts_every_window() {
        let mut w = watch();
        start_u1(&mut w);
        ping(&mut w, 100);
        w.handle(100 * MS, Input::Tick);
        // The whole host froze for 5 s (the agent too): no verdict at the
        // first tick after it, the unit gets a full window from there.
        assert!(w.handle(5_100 * MS, Input::Tick).is_empty());
        assert_eq!(w.stalls(), 1);
        ping(&mut w, 5_150);
        assert_eq!(run(&mut w, 5_120, 5_640), None);
        // Silent after that ping: hung one window on.
        let (t, _) = run(&mut w, 5_660, 7_000).expect("hung");
        assert_eq!(t, 5_660);
    }

    #[test]
    fn other_pids_and_gone_units_are_ignored() {
        let mut w = watch();
        start_u1(&mut w);
        ping(&mut w, 100);
        // An old process's pings do not keep the new one alive.
        for t in (120..=1000).step_by(20) {
            w.handle(
                ms(t),
                Input::Message {
                    unit: "u1".into(),
                    pid: Some(9),
                    at: ms(t),
                },
            );
            let o = tick(&mut w, t, true);
            if t <= 600 {
                assert!(o.is_empty(), "{t}");
            } else if !o.is_empty() {
                assert_eq!(t, 620);
                break;
            }
        }
        // A fenced unit is no longer watched; a new process starts afresh.
        w.handle(MS * 1000, Input::Gone { unit: "u1".into() });
        assert_eq!(w.watched().count(), 0);
        w.handle(
            MS * 1000,
            Input::Started {
                unit: "u1".into(),
                pid: 11,
            },
        );
        assert_eq!(run(&mut w, 1000, 20_000), None);
        assert_eq!(w.watched().collect::<Vec<_>>(), vec![("u1", 11)]);
    }
}
