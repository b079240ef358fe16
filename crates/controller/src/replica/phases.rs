//! Where the leader's work loop spends its time (issue 29): each
//! iteration's phases go to `holdfast_controller_loop_phase_seconds{phase}`,
//! the wait of the oldest measurement it takes to `_measurement_lag_seconds`
//! (those it drops as stale to `_measurements_dropped_total`), and
//! the longest wait of an agent's heartbeat in its stream to
//! `_report_transit_seconds`; an iteration slower than [`SLOW`], or a
//! heartbeat that waited that long, is logged with every phase's share,
//! from the same call.

use std::time::{Duration, Instant};

use crate::metrics::{ControllerMetrics, PhaseLabel};

/// An iteration this slow is logged.
pub(super) const SLOW: Duration = Duration::from_millis(500);

/// One iteration's phases, in the order they ran.
pub(super) struct Phases {
    started: Instant,
    mark: Instant,
    spent: Vec<(&'static str, Duration)>,
    /// Measurements the iteration took, those it dropped as stale, and
    /// the longest any of those it took waited.
    pub measurements: u64,
    pub dropped: u64,
    pub max_lag: Duration,
}

impl Phases {
    pub fn start() -> Phases {
        let now = Instant::now();
        Phases {
            started: now,
            mark: now,
            spent: Vec::new(),
            measurements: 0,
            dropped: 0,
            max_lag: Duration::ZERO,
        }
    }

    /// The phase `name` ended now.
    pub fn end(&mut self, name: &'static str) {
        let now = Instant::now();
        self.spent.push((name, now.duration_since(self.mark)));
        self.mark = now;
    }

    /// `n` measurements were taken and `dropped` dropped as stale, the
    /// oldest taken dated `oldest`. Once per pass, not per measurement.
    pub fn took(&mut self, n: u64, dropped: u64, oldest: Option<Instant>, m: &ControllerMetrics) {
        self.measurements += n;
        self.dropped += dropped;
        m.measurements.inc_by(n);
        m.measurements_dropped.inc_by(dropped);
        if let Some(at) = oldest {
            let lag = at.elapsed();
            self.max_lag = self.max_lag.max(lag);
            m.measurement_lag_seconds.observe(lag.as_secs_f64());
        }
    }

    /// Records the iteration, and logs it when it was slow or when a
    /// report waited longer than [`SLOW`] in its stream (`transit`: the
    /// longest since the last iteration, [`crate::hub::Hub::take_max_transit`]).
    pub fn finish(self, m: &ControllerMetrics, transit: Duration) {
        m.report_transit_seconds.observe(transit.as_secs_f64());
        for (phase, d) in &self.spent {
            m.loop_phase_seconds
                .get_or_create(&PhaseLabel { phase })
                .observe(d.as_secs_f64());
        }
        let total = self.started.elapsed();
        if total >= SLOW || transit >= SLOW {
            let phases = self
                .spent
                .iter()
                .map(|(p, d)| format!("{p} {} ms", d.as_millis()))
                .collect::<Vec<_>>()
                .join(", ");
            tracing::info!(
                total_ms = total.as_millis() as u64,
                measurements = self.measurements,
                dropped = self.dropped,
                max_lag_ms = self.max_lag.as_millis() as u64,
                transit_ms = transit.as_millis() as u64,
                %phases,
                "slow work loop iteration"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn phases_are_recorded_in_the_histograms() {
        let m = ControllerMetrics::new();
        let mut p = Phases::start();
        p.end("sync");
        p.took(1, 2, Some(Instant::now()), &m);
        p.end("measurements");
        assert_eq!(p.measurements, 1);
        p.finish(&m, Duration::ZERO);
        let text = m.render();
        assert!(
            text.contains("holdfast_controller_loop_phase_seconds_count{phase=\"sync\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("holdfast_controller_measurements_total 1"),
            "{text}"
        );
        assert!(
            text.contains("holdfast_controller_measurements_dropped_total 2"),
            "{text}"
        );
    }
}
