//! holdfastd's side of hang detection (issue 25): `sd_notify` readiness and
//! the watchdog pings, sent only while every event loop makes progress.
//!
//! Every event loop reports progress into the process's registry
//! ([`holdfast_linux::progress`]): the RIB threads, the replicator, the
//! ACK gate and the FIB threads mark each wait and each work item; the I/O
//! thread and the BFD thread (async runtimes) are stamped by a task on
//! their own runtime ([`beat`]) every [`BEAT_EVERY`], which runs only when
//! the runtime gets back to its scheduler.
//!
//! The pinger thread ([`start`], only when `NOTIFY_SOCKET` is set) sends
//! `WATCHDOG=1` every quarter of `WATCHDOG_USEC` — systemd's, or the host
//! agent's, which runs each unit with a socket of its own — but only once
//! [`ready`] sent `READY=1` and only while [`Registry::check`] finds no loop
//! busy past its budget. A healthy pinger never hides a stuck worker: a
//! worker stuck in one item withholds the ping, and a stopped process (or
//! a starved one) sends nothing at all, so its supervisor judges it by the
//! pings' absence.
//!
//! Budgets ([`IO_BUDGET`], ...) are how long one work item may keep its
//! loop away from its input: generous for work that is long by design (a
//! RIB batch, the table rebuild of a takeover, a FIB dump), so that a busy
//! unit is never declared hung.
//!
//! # Known issues
//! - Before `READY=1` nothing pings: start-up (the state load of a
//!   `--takeover`, a standby's first table build) is covered by the
//!   supervisor's start allowance, not by the pings.
//! - Withheld pings are logged, not counted in a metric.
//!
//! [`Registry::check`]: holdfast_linux::progress::Registry::check

use holdfast_linux::notify::{watchdog_interval, Notifier};
use holdfast_linux::progress::{self, Stamp};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// How often [`beat`] stamps an async runtime.
pub const BEAT_EVERY: Duration = Duration::from_millis(50);
/// The I/O thread: a poll of one task.
pub const IO_BUDGET: Duration = Duration::from_secs(2);
/// The BFD thread: one packet or timer.
pub const BFD_BUDGET: Duration = Duration::from_secs(2);
/// A RIB thread: one batch of UPDATEs, a takeover's table rebuild, a
/// standby's preheat of a million routes.
pub const RIB_BUDGET: Duration = Duration::from_secs(60);
/// The replicator: one batch (its waits for the store are idle).
pub const REPLICATOR_BUDGET: Duration = Duration::from_secs(10);
/// A FIB thread: one batch of route writes or a kernel dump.
pub const FIB_BUDGET: Duration = Duration::from_secs(60);

struct Pinger {
    notifier: Notifier,
    ready: AtomicBool,
}

fn pinger() -> &'static OnceLock<Option<Pinger>> {
    static P: OnceLock<Option<Pinger>> = OnceLock::new();
    &P
}

/// Reads `NOTIFY_SOCKET` and `WATCHDOG_USEC` and, when both are set,
/// starts the pinger thread. Without `NOTIFY_SOCKET` nothing is sent.
pub fn start() {
    let p = match Notifier::from_env() {
        Ok(n) => n.map(|notifier| Pinger {
            notifier,
            ready: AtomicBool::new(false),
        }),
        Err(e) => {
            tracing::warn!(error = %e, "NOTIFY_SOCKET unusable: no readiness or watchdog notifications");
            None
        }
    };
    if pinger().set(p).is_err() {
        return;
    }
    let Some(period) = watchdog_interval() else {
        return;
    };
    // Several pings per window: a ping lost to a full socket queue or a
    // short delay never costs the window.
    let every = (period / 4).clamp(Duration::from_millis(10), Duration::from_secs(5));
    tracing::info!(
        watchdog_ms = period.as_millis() as u64,
        every_ms = every.as_millis() as u64,
        "watchdog: pinging the supervisor while every event loop makes progress"
    );
    let spawned = std::thread::Builder::new()
        .name("watchdog".into())
        .spawn(move || ping_loop(every));
    if let Err(e) = spawned {
        tracing::error!(error = %e, "watchdog thread not started: the supervisor will find no pings");
    }
}

fn ping_loop(every: Duration) {
    let Some(Some(p)) = pinger().get() else {
        return;
    };
    let mut withheld: Vec<String> = Vec::new();
    loop {
        std::thread::sleep(every);
        if !p.ready.load(Ordering::Relaxed) {
            continue;
        }
        let stuck = progress::global().check(Instant::now());
        let names: Vec<String> = stuck.iter().map(|s| s.name.clone()).collect();
        if stuck.is_empty() {
            if !withheld.is_empty() {
                tracing::info!(was = ?withheld, "watchdog: every event loop makes progress again");
                withheld.clear();
            }
            let _ = p.notifier.notify("WATCHDOG=1");
        } else if names != withheld {
            for s in &stuck {
                tracing::error!(
                    event_loop = %s.name,
                    busy_ms = s.busy_for.as_millis() as u64,
                    budget_ms = s.budget.as_millis() as u64,
                    "watchdog: an event loop is stuck in one work item: pings withheld"
                );
            }
            withheld = names;
        }
    }
}

/// Serving: sends `READY=1` (once) and lets the pings begin.
pub fn ready(what: &str) {
    if let Some(Some(p)) = pinger().get() {
        if !p.ready.swap(true, Ordering::Relaxed) {
            let _ = p.notifier.notify(&format!("READY=1\nSTATUS={what}"));
            tracing::info!(status = what, "watchdog: READY=1 sent");
        }
    }
}

/// Registers an event loop with the process's progress registry.
pub fn register(name: &str, budget: Duration) -> Stamp {
    progress::global().register(name, budget)
}

/// Stamps the calling async runtime's loop `name` every [`BEAT_EVERY`],
/// from a task on that runtime; call from inside it.
pub fn beat(name: &str, budget: Duration) {
    let stamp = register(name, budget);
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(BEAT_EVERY);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            stamp.beat();
        }
    });
}
