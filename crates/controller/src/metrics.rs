//! Prometheus metrics of the controller replica ([`ControllerMetrics`]),
//! in the text exposition format at `GET /metrics` ([`serve`], from
//! `holdfast-etcd`, which serves the host agent's too).
//!
//! The controller's counters are bumped by the same calls that log the
//! events (election, demotion, a refused fenced write, a committed step, a
//! migration started and finished, a verdict); its gauges (leading, agents
//! attached, failed hosts) are set by the status writer every tick.

pub use holdfast_etcd::metrics::serve;
use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

/// What started a migration.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelValue)]
pub enum Reason {
    Application,
    Hung,
    Container,
    ContainerNetwork,
    Host,
    HostNetwork,
    LeaseExpired,
    Switchover,
    Drain,
    Upgrade,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReasonLabel {
    pub reason: Reason,
}

/// A phase of the leader's work loop.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PhaseLabel {
    /// `sync`, `measurements`, `poll`, `act`, `hosts`, `requests`,
    /// `standbys` or `drive`.
    pub phase: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct FindingLabel {
    /// The verdict's finding (`application`, ..., `suspect`,
    /// `controller_cut_off`, `lost_probe`).
    pub finding: String,
}

/// The controller replica's metrics.
pub struct ControllerMetrics {
    registry: Registry,
    pub is_leader: Gauge,
    pub elections: Counter,
    pub demotions: Counter,
    pub fenced_rejections: Counter,
    pub steps_committed: Counter,
    pub migrations_started: Family<ReasonLabel, Counter>,
    pub migrations_finished: Counter,
    pub verdicts: Family<FindingLabel, Counter>,
    pub detection_seconds: Family<FindingLabel, Histogram>,
    pub agents_attached: Gauge,
    pub loop_phase_seconds: Family<PhaseLabel, Histogram>,
    pub measurements: Counter,
    pub measurements_dropped: Counter,
    pub measurement_lag_seconds: Histogram,
    pub report_transit_seconds: Histogram,
}

impl Default for ControllerMetrics {
    fn default() -> Self {
        Self::new()
    }
}

impl ControllerMetrics {
    /// Every metric, registered under `holdfast_controller_`.
    pub fn new() -> ControllerMetrics {
        let mut registry = Registry::with_prefix("holdfast_controller");
        let m = ControllerMetrics {
            registry: Registry::default(),
            is_leader: Gauge::default(),
            elections: Counter::default(),
            demotions: Counter::default(),
            fenced_rejections: Counter::default(),
            steps_committed: Counter::default(),
            migrations_started: Family::default(),
            migrations_finished: Counter::default(),
            verdicts: Family::default(),
            detection_seconds: Family::new_with_constructor(|| {
                Histogram::new(exponential_buckets(0.05, 2.0, 10))
            }),
            agents_attached: Gauge::default(),
            loop_phase_seconds: Family::new_with_constructor(|| {
                Histogram::new(exponential_buckets(0.001, 4.0, 9))
            }),
            measurements: Counter::default(),
            measurements_dropped: Counter::default(),
            measurement_lag_seconds: Histogram::new(exponential_buckets(0.001, 4.0, 9)),
            report_transit_seconds: Histogram::new(exponential_buckets(0.001, 4.0, 9)),
        };
        registry.register(
            "is_leader",
            "1 while this replica may act as leader",
            m.is_leader.clone(),
        );
        registry.register("elections", "Times elected", m.elections.clone());
        registry.register("demotions", "Times demoted", m.demotions.clone());
        registry.register(
            "fenced_rejections",
            "Fenced writes etcd refused (the leader key was not ours)",
            m.fenced_rejections.clone(),
        );
        registry.register(
            "steps_committed",
            "Migration steps committed",
            m.steps_committed.clone(),
        );
        registry.register(
            "migrations_started",
            "Migrations started, by what started them",
            m.migrations_started.clone(),
        );
        registry.register(
            "migrations_finished",
            "Migrations finished (the placement rewritten)",
            m.migrations_finished.clone(),
        );
        registry.register(
            "verdicts",
            "The localizer's verdicts and notes, by finding",
            m.verdicts.clone(),
        );
        registry.register(
            "detection_seconds",
            "From a failure's first bad measurement to its verdict",
            m.detection_seconds.clone(),
        );
        registry.register(
            "agents_attached",
            "Agents attached to this replica",
            m.agents_attached.clone(),
        );
        registry.register(
            "loop_phase_seconds",
            "The leader's work loop: time in each phase of an iteration",
            m.loop_phase_seconds.clone(),
        );
        registry.register(
            "measurements",
            "Measurements the localizer took",
            m.measurements.clone(),
        );
        registry.register(
            "measurements_dropped",
            "Probe outcomes dropped unread: stale (older than --stale-after-ms) when the work loop got to them",
            m.measurements_dropped.clone(),
        );
        registry.register(
            "measurement_lag_seconds",
            "Each work loop pass: from the arrival of the oldest measurement it took to the localizer taking it",
            m.measurement_lag_seconds.clone(),
        );
        registry.register(
            "report_transit_seconds",
            "Each work loop iteration: the longest any agent's heartbeat took from its agent's send time to its arrival (both hosts' clocks)",
            m.report_transit_seconds.clone(),
        );
        ControllerMetrics { registry, ..m }
    }

    /// The text exposition.
    pub fn render(&self) -> String {
        let mut out = String::new();
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_show_in_the_exposition() {
        let m = ControllerMetrics::new();
        m.elections.inc();
        m.migrations_started
            .get_or_create(&ReasonLabel {
                reason: Reason::ContainerNetwork,
            })
            .inc();
        m.detection_seconds
            .get_or_create(&FindingLabel {
                finding: "host".into(),
            })
            .observe(3.3);
        let text = m.render();
        assert!(
            text.contains("holdfast_controller_elections_total 1"),
            "{text}"
        );
        assert!(
            text.contains(
                "holdfast_controller_migrations_started_total{reason=\"ContainerNetwork\"} 1"
            ),
            "{text}"
        );
        assert!(
            text.contains("holdfast_controller_detection_seconds_count{finding=\"host\"} 1"),
            "{text}"
        );
    }
}
