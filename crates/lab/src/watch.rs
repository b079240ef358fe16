//! [`PeerWatch`]: a background sampler of one session as a real peer sees it, so a test
//! can show that the session NEVER left Established while it drove a failover on the
//! test thread.
//!
//! ```no_run
//! # use holdfast_lab::*;
//! # fn f(lab: &mut Lab, frr: &Frr, service: std::net::IpAddr) -> Result<()> {
//! let watch = PeerWatch::start(frr.session_probe(lab), service);
//! // ... kill the primary, take over on the backup ...
//! let report = watch.stop();
//! report.assert_uninterrupted()?;
//! # Ok(())
//! # }
//! ```

use std::fmt::Write as _;
use std::net::IpAddr;
use std::sync::mpsc::{self, RecvTimeoutError, Sender};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::error::{LabError, Result};
use crate::peer::{SessionProbe, SessionView};

/// Default time between the starts of two samples.
pub const WATCH_INTERVAL: Duration = Duration::from_millis(200);
/// A watch stops sampling by itself after this long (bounded loops); the report says so.
pub const WATCH_MAX: Duration = Duration::from_secs(900);
/// Uptime may look this much smaller than expected (tools round to whole seconds, BIRD
/// and GoBGP report a start time in seconds that the harness subtracts from its clock).
const UPTIME_JITTER_SECS: f64 = 1.0;

/// What a [`PeerWatch`] saw. Times are offsets from the start of the watch.
#[derive(Debug, Clone)]
pub struct WatchReport {
    /// The watched session (the peer's neighbour address).
    pub neighbor: IpAddr,
    /// Number of samples taken (including failed probes).
    pub samples: usize,
    /// How long the watch ran.
    pub duration: Duration,
    /// Longest time between the starts of two consecutive samples.
    pub max_gap: Duration,
    /// The first successful view of the session (`None`: never seen).
    pub first: Option<SessionView>,
    /// The last successful view of the session.
    pub last: Option<SessionView>,
    /// Samples where the session was not Established, or the probe failed, or the
    /// session was missing: (offset, the tool's state text or the error).
    pub non_established_samples: Vec<(Duration, String)>,
    /// Changes of the established counter between consecutive views: (offset, before, after).
    pub established_count_changes: Vec<(Duration, u32, u32)>,
    /// Changes of the dropped counter between consecutive views: (offset, before, after).
    pub dropped_count_changes: Vec<(Duration, u32, u32)>,
    /// Uptime smaller than the previous Established view's uptime plus the time between
    /// them, by more than 1 s of rounding: (offset, previous uptime, uptime) in seconds.
    pub uptime_regressions: Vec<(Duration, u64, u64)>,
    /// Smallest prefixes-received count seen (Established samples only).
    pub min_prefixes_received: Option<u32>,
    /// Largest prefixes-received count seen (Established samples only).
    pub max_prefixes_received: Option<u32>,
    /// Decreases of the prefixes-received count between consecutive
    /// Established views: (offset, before, after). Routes the peer held
    /// were withdrawn (or the session was reset).
    pub prefixes_received_drops: Vec<(Duration, u32, u32)>,
    /// Whether the watch hit [`WATCH_MAX`] and stopped sampling by itself.
    pub timed_out: bool,
}

impl WatchReport {
    /// Fewest samples [`WatchReport::assert_uninterrupted`] accepts as evidence.
    pub const MIN_SAMPLES: usize = 5;

    /// Whether the report shows no interruption at all (see
    /// [`WatchReport::assert_uninterrupted`]).
    pub fn is_uninterrupted(&self) -> bool {
        self.problems().is_empty()
    }

    /// Ok when the session was seen at least [`WatchReport::MIN_SAMPLES`] times, every
    /// sample was Established, the established/dropped counters never changed and the
    /// uptime never went backwards (1 s of rounding allowed); else an error that says
    /// what was seen.
    pub fn assert_uninterrupted(&self) -> Result<()> {
        let problems = self.problems();
        if problems.is_empty() {
            return Ok(());
        }
        Err(LabError::Invalid(format!(
            "session with {} was interrupted during the watch: {}; {}",
            self.neighbor,
            problems.join("; "),
            self.summary()
        )))
    }

    /// One line: samples, duration, first and last view.
    pub fn summary(&self) -> String {
        let view = |v: &Option<SessionView>| match v {
            Some(v) => format!(
                "{} up {:?}s est {:?} drop {:?} rx {:?}",
                v.raw_state,
                v.uptime_secs,
                v.established_count,
                v.dropped_count,
                v.prefixes_received
            ),
            None => "never seen".into(),
        };
        format!(
            "{} samples over {:.1} s (max gap {} ms); first: {}; last: {}",
            self.samples,
            self.duration.as_secs_f64(),
            self.max_gap.as_millis(),
            view(&self.first),
            view(&self.last)
        )
    }

    fn problems(&self) -> Vec<String> {
        let mut p = Vec::new();
        if self.samples < Self::MIN_SAMPLES {
            p.push(format!(
                "only {} samples (need {})",
                self.samples,
                Self::MIN_SAMPLES
            ));
        }
        if self.first.is_none() {
            p.push("the session was never seen".into());
        }
        if !self.non_established_samples.is_empty() {
            let mut s = format!(
                "{} samples not Established:",
                self.non_established_samples.len()
            );
            for (at, what) in self.non_established_samples.iter().take(8) {
                let _ = write!(s, " [{} ms: {what}]", at.as_millis());
            }
            p.push(s);
        }
        let changes = |name: &str, v: &[(Duration, u32, u32)]| {
            let list: Vec<String> = v
                .iter()
                .map(|(at, a, b)| format!("{a}->{b} at {} ms", at.as_millis()))
                .collect();
            format!("{name} counter changed: {}", list.join(", "))
        };
        if !self.established_count_changes.is_empty() {
            p.push(changes("established", &self.established_count_changes));
        }
        if !self.dropped_count_changes.is_empty() {
            p.push(changes("dropped", &self.dropped_count_changes));
        }
        if !self.uptime_regressions.is_empty() {
            let list: Vec<String> = self
                .uptime_regressions
                .iter()
                .map(|(at, a, b)| format!("{a} s -> {b} s at {} ms", at.as_millis()))
                .collect();
            p.push(format!("uptime went back: {}", list.join(", ")));
        }
        if self.timed_out {
            p.push(format!("the watch stopped itself after {WATCH_MAX:?}"));
        }
        p
    }
}

/// Samples one session through a [`SessionProbe`] every [`WATCH_INTERVAL`] on a
/// background thread until [`PeerWatch::stop`] (or [`WATCH_MAX`]). Dropping it stops it.
pub struct PeerWatch {
    stop: Option<Sender<()>>,
    handle: Option<JoinHandle<WatchReport>>,
}

impl std::fmt::Debug for PeerWatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PeerWatch")
            .field("running", &self.handle.is_some())
            .finish()
    }
}

impl PeerWatch {
    /// Start sampling the session with `neighbor` (from [`crate::Peer::session_probe`]).
    /// The first sample is taken at once.
    pub fn start(probe: SessionProbe, neighbor: IpAddr) -> PeerWatch {
        Self::start_every(probe, neighbor, WATCH_INTERVAL)
    }

    /// [`PeerWatch::start`] with another interval.
    pub fn start_every(probe: SessionProbe, neighbor: IpAddr, interval: Duration) -> PeerWatch {
        let (tx, rx) = mpsc::channel::<()>();
        let handle = std::thread::Builder::new()
            .name(format!("peerwatch-{neighbor}"))
            .spawn(move || {
                let mut acc = Acc::new(neighbor);
                let start = Instant::now();
                loop {
                    let t = Instant::now();
                    let got = probe();
                    acc.add(start, t, Instant::now(), got);
                    if start.elapsed() >= WATCH_MAX {
                        acc.report.timed_out = true;
                        break;
                    }
                    let next = interval.saturating_sub(t.elapsed());
                    match rx.recv_timeout(next) {
                        Err(RecvTimeoutError::Timeout) => {}
                        Ok(()) | Err(RecvTimeoutError::Disconnected) => break,
                    }
                }
                acc.report.duration = start.elapsed();
                acc.report
            })
            .expect("spawning the watch thread");
        PeerWatch {
            stop: Some(tx),
            handle: Some(handle),
        }
    }

    /// Stop sampling (after the sample in progress, if any) and return what was seen.
    pub fn stop(mut self) -> WatchReport {
        self.finish()
    }

    fn finish(&mut self) -> WatchReport {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        let h = self.handle.take().expect("watch already stopped");
        match h.join() {
            Ok(r) => r,
            Err(e) => std::panic::resume_unwind(e),
        }
    }
}

impl Drop for PeerWatch {
    fn drop(&mut self) {
        if self.handle.is_some() {
            if let Some(tx) = self.stop.take() {
                let _ = tx.send(());
            }
            if let Some(h) = self.handle.take() {
                let _ = h.join();
            }
        }
    }
}

/// The accumulating state of a watch.
struct Acc {
    report: WatchReport,
    /// Start and end of the previous sample's probe.
    prev_at: Option<Instant>,
    /// Previous successful view and the end of its probe.
    prev: Option<(SessionView, Instant)>,
}

impl Acc {
    fn new(neighbor: IpAddr) -> Self {
        Acc {
            report: WatchReport {
                neighbor,
                samples: 0,
                duration: Duration::ZERO,
                max_gap: Duration::ZERO,
                first: None,
                last: None,
                non_established_samples: Vec::new(),
                established_count_changes: Vec::new(),
                dropped_count_changes: Vec::new(),
                uptime_regressions: Vec::new(),
                min_prefixes_received: None,
                max_prefixes_received: None,
                prefixes_received_drops: Vec::new(),
                timed_out: false,
            },
            prev_at: None,
            prev: None,
        }
    }

    /// One sample: probe started at `t`, answered at `done`.
    fn add(&mut self, start: Instant, t: Instant, done: Instant, got: Result<Vec<SessionView>>) {
        let r = &mut self.report;
        let at = t.duration_since(start);
        r.samples += 1;
        if let Some(p) = self.prev_at {
            r.max_gap = r.max_gap.max(t.duration_since(p));
        }
        self.prev_at = Some(t);
        let view = match got {
            Err(e) => {
                r.non_established_samples
                    .push((at, format!("probe failed: {e}")));
                return;
            }
            Ok(views) => match views.into_iter().find(|v| v.neighbor == r.neighbor) {
                Some(v) => v,
                None => {
                    r.non_established_samples
                        .push((at, "session not listed".into()));
                    return;
                }
            },
        };
        if !view.is_established() {
            r.non_established_samples
                .push((at, format!("state {}", view.raw_state)));
        } else if let Some(n) = view.prefixes_received {
            r.min_prefixes_received = Some(r.min_prefixes_received.map_or(n, |m| m.min(n)));
            r.max_prefixes_received = Some(r.max_prefixes_received.map_or(n, |m| m.max(n)));
        }
        if let Some((prev, prev_done)) = &self.prev {
            if let (Some(a), Some(b)) = (prev.prefixes_received, view.prefixes_received) {
                if b < a && view.is_established() {
                    r.prefixes_received_drops.push((at, a, b));
                }
            }
            if let (Some(a), Some(b)) = (prev.established_count, view.established_count) {
                if a != b {
                    r.established_count_changes.push((at, a, b));
                }
            }
            if let (Some(a), Some(b)) = (prev.dropped_count, view.dropped_count) {
                if a != b {
                    r.dropped_count_changes.push((at, a, b));
                }
            }
            if let (Some(a), Some(b)) = (prev.uptime_secs, view.uptime_secs) {
                // The true uptime grew by at least the time from the end of the previous
                // probe to the start of this one; each reading is rounded down by < 1 s.
                let grown = t.saturating_duration_since(*prev_done).as_secs_f64();
                if (b as f64) + 1.0 + UPTIME_JITTER_SECS < a as f64 + grown {
                    r.uptime_regressions.push((at, a, b));
                }
            }
        }
        if r.first.is_none() {
            r.first = Some(view.clone());
        }
        r.last = Some(view.clone());
        // Uptime is compared between Established views only; counters between any.
        if view.is_established() || self.prev.is_none() {
            self.prev = Some((view, done));
        } else if let Some((p, _)) = &mut self.prev {
            p.established_count = view.established_count;
            p.dropped_count = view.dropped_count;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn view(state: &str, up: u64, est: u32, drop: u32) -> SessionView {
        let mut v = SessionView::new("192.0.2.1".parse().unwrap(), state);
        v.uptime_secs = v.is_established().then_some(up);
        v.established_count = Some(est);
        v.dropped_count = Some(drop);
        v.prefixes_received = Some(3);
        v
    }

    fn run(views: &[(u64, SessionView)]) -> WatchReport {
        let mut acc = Acc::new("192.0.2.1".parse().unwrap());
        let start = Instant::now();
        for (ms, v) in views {
            let t = start + Duration::from_millis(*ms);
            acc.add(start, t, t + Duration::from_millis(20), Ok(vec![v.clone()]));
        }
        acc.report
    }

    #[test]
    fn steady_session_is_uninterrupted() {
        let views: Vec<(u64, SessionView)> = (0..10)
            .map(|i| (i * 500, view("Established", 10 + i / 2, 1, 0)))
            .collect();
        let r = run(&views);
        r.assert_uninterrupted().unwrap();
        assert_eq!((r.min_prefixes_received, r.samples), (Some(3), 10));
    }

    #[test]
    fn reset_is_reported() {
        let r = run(&[
            (0, view("Established", 10, 1, 0)),
            (200, view("Established", 10, 1, 0)),
            (400, view("Active", 0, 1, 1)),
            (600, view("Established", 0, 2, 1)),
            (800, view("Established", 0, 2, 1)),
        ]);
        let e = r.assert_uninterrupted().unwrap_err().to_string();
        assert!(e.contains("not Established") && e.contains("Active"), "{e}");
        assert_eq!(r.dropped_count_changes.len(), 1);
        assert_eq!(r.established_count_changes.len(), 1);
        assert_eq!(r.uptime_regressions.len(), 1, "{r:?}");
    }

    #[test]
    fn fast_reset_between_samples_is_caught_by_uptime_and_counters() {
        let r = run(&[
            (0, view("Established", 10, 1, 0)),
            (200, view("Established", 10, 1, 0)),
            (5000, view("Established", 1, 1, 0)),
            (5200, view("Established", 1, 1, 0)),
            (5400, view("Established", 1, 1, 0)),
        ]);
        assert_eq!(r.uptime_regressions.len(), 1, "{r:?}");
        assert!(r.assert_uninterrupted().is_err());
    }

    #[test]
    fn too_few_samples_fail() {
        let r = run(&[(0, view("Established", 10, 1, 0))]);
        assert!(r.assert_uninterrupted().is_err());
    }
}
