//! Progress of a process's event loops (issue 25, hang detection): one
//! atomic stamp per loop, read by the process's watchdog pinger.
//!
//! Each loop registers once ([`Registry::register`], with a budget) and
//! gets a [`Stamp`]. It calls [`Stamp::idle`] before it blocks waiting for
//! input and [`Stamp::busy`] when it wakes with work: two relaxed atomic
//! stores and a monotonic clock read (vDSO, no system call) per work item.
//! A loop that cannot mark its waits (an async runtime, whose waiting is
//! inside the runtime) is stamped by a periodic task on that runtime
//! instead ([`Stamp::beat`]): a runtime that gets back to its scheduler
//! runs the task, one stuck in a work item does not.
//!
//! [`Registry::check`] says whether every loop is healthy: idle (blocked on
//! its input, which is no hang), or busy for less than its budget. A loop
//! busy longer is stuck, and the pinger withholds its ping. Budgets are
//! generous for work that is long by design (a RIB batch of a million
//! routes), so a busy unit is never declared hung; a stopped process (or
//! a whole stuck one) pings nothing at all, whatever the budgets.
//!
//! A loop whose every [`Stamp`] is dropped (its thread ended) leaves the
//! registry.
//!
//! # Known issues
//! - A loop busy in one item longer than its budget by design (a budget
//!   set too tight) withholds the pings: the budgets are the contract.
//! - Times are milliseconds since the registry's creation: a loop busy for
//!   less than a millisecond per item shows as stamped "now".

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::{Duration, Instant};

/// One loop's slot: `(ms since the origin + 1) << 1 | idle`, 0 before any
/// stamp.
#[derive(Debug)]
struct Slot {
    name: String,
    budget: Duration,
    state: AtomicU64,
}

/// A loop's handle on its slot.
#[derive(Debug, Clone)]
pub struct Stamp {
    slot: Arc<Slot>,
    origin: Instant,
}

impl Stamp {
    fn set(&self, idle: bool) {
        let ms = self.origin.elapsed().as_millis() as u64;
        self.slot
            .state
            .store(((ms + 1) << 1) | u64::from(idle), Ordering::Relaxed);
    }

    /// The loop is about to wait for input (healthy however long it waits).
    pub fn idle(&self) {
        self.set(true);
    }

    /// The loop woke with work (healthy for its budget).
    pub fn busy(&self) {
        self.set(false);
    }

    /// A periodic task on the loop's own runtime ran: the loop is busy but
    /// got back to its scheduler now.
    pub fn beat(&self) {
        self.set(false);
    }

    /// The loop's name.
    pub fn name(&self) -> &str {
        &self.slot.name
    }
}

/// A loop that has been busy for longer than its budget.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stuck {
    pub name: String,
    pub busy_for: Duration,
    pub budget: Duration,
}

/// The loops of one process.
#[derive(Debug)]
pub struct Registry {
    origin: Instant,
    loops: Mutex<Vec<Weak<Slot>>>,
}

impl Default for Registry {
    fn default() -> Self {
        Registry::new()
    }
}

impl Registry {
    pub fn new() -> Registry {
        Registry {
            origin: Instant::now(),
            loops: Mutex::new(Vec::new()),
        }
    }

    /// Registers a loop that may stay busy on one item for `budget`; it
    /// starts busy (stamped now).
    pub fn register(&self, name: &str, budget: Duration) -> Stamp {
        let slot = Arc::new(Slot {
            name: name.to_string(),
            budget,
            state: AtomicU64::new(0),
        });
        self.loops
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(Arc::downgrade(&slot));
        let s = Stamp {
            slot,
            origin: self.origin,
        };
        s.busy();
        s
    }

    /// The loops busy for longer than their budget at `now` (empty: every
    /// loop is healthy). Loops whose stamps are all dropped are forgotten.
    pub fn check(&self, now: Instant) -> Vec<Stuck> {
        let now_ms = now.saturating_duration_since(self.origin).as_millis() as u64;
        let mut loops = self.loops.lock().unwrap_or_else(|p| p.into_inner());
        loops.retain(|w| w.strong_count() > 0);
        loops
            .iter()
            .filter_map(Weak::upgrade)
            .filter_map(|s| {
                let v = s.state.load(Ordering::Relaxed);
                let idle = v & 1 == 1;
                let at = (v >> 1).saturating_sub(1);
                let busy_for = Duration::from_millis(now_ms.saturating_sub(at));
                (v != 0 && !idle && busy_for > s.budget).then(|| Stuck {
                    name: s.name.clone(),
                    busy_for,
                    budget: s.budget,
                })
            })
            .collect()
    }

    /// The names of the loops registered now.
    pub fn names(&self) -> Vec<String> {
        let loops = self.loops.lock().unwrap_or_else(|p| p.into_inner());
        loops
            .iter()
            .filter_map(Weak::upgrade)
            .map(|s| s.name.clone())
            .collect()
    }
}

/// The process's registry.
pub fn global() -> &'static Registry {
    static R: OnceLock<Registry> = OnceLock::new();
    R.get_or_init(Registry::new)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn idle_is_healthy_busy_past_the_budget_is_stuck() {
        let r = Registry::new();
        let t0 = r.origin;
        let rib = r.register("rib-default", 1000 * MS);
        let gate = r.register("ack-gate", 200 * MS);
        assert!(r.check(t0 + 100 * MS).is_empty());
        gate.idle();
        // Busy (since registration) for 1.5 s: the RIB thread is stuck.
        let stuck = r.check(t0 + 1500 * MS);
        assert_eq!(stuck.len(), 1);
        assert_eq!(stuck[0].name, "rib-default");
        assert!(stuck[0].busy_for >= 1400 * MS);
        // Idle however long: healthy.
        rib.idle();
        assert!(r.check(t0 + 3_600_000 * MS).is_empty());
        // A beat counts as progress.
        rib.beat();
        let at = Instant::now();
        assert!(r.check(at).is_empty());
        assert!(!r.check(at + 1200 * MS).is_empty());
        assert_eq!(rib.name(), "rib-default");
        // A loop whose stamps are gone leaves.
        drop(rib);
        assert_eq!(r.names(), vec!["ack-gate".to_string()]);
        assert!(r.check(at + 1200 * MS).is_empty());
    }
}
