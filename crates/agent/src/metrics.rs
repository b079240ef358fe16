//! The host agent's Prometheus metrics (`holdfast-agent --metrics-listen`),
//! served by `holdfast_etcd::metrics::serve`. The shell bumps each one
//! where it records the same fact in its status file.

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

/// The agent's metrics, registered under `holdfast_agent_`.
pub struct AgentMetrics {
    registry: Registry,
    pub probes_sent: Counter,
    pub probes_lost: Counter,
    pub probes_discarded: Counter,
    pub units_hung: Counter,
    pub lease_grants: Counter,
    pub self_fenced_units: Counter,
    pub failsafe_rounds_confirmed: Counter,
    pub failsafe_rounds_refused: Counter,
    pub neighbours_solicited: Counter,
    pub units_running: Gauge,
    pub highest_token: Gauge,
    pub attached: Gauge,
}

impl Default for AgentMetrics {
    fn default() -> Self {
        Self::new()
    }
}

impl AgentMetrics {
    pub fn new() -> AgentMetrics {
        let mut registry = Registry::with_prefix("holdfast_agent");
        let m = AgentMetrics {
            registry: Registry::default(),
            probes_sent: Counter::default(),
            probes_lost: Counter::default(),
            probes_discarded: Counter::default(),
            units_hung: Counter::default(),
            lease_grants: Counter::default(),
            self_fenced_units: Counter::default(),
            failsafe_rounds_confirmed: Counter::default(),
            failsafe_rounds_refused: Counter::default(),
            neighbours_solicited: Counter::default(),
            units_running: Gauge::default(),
            highest_token: Gauge::default(),
            attached: Gauge::default(),
        };
        registry.register("probes_sent", "IP SLA probes sent", m.probes_sent.clone());
        registry.register(
            "probes_lost",
            "IP SLA probes lost (no answer in time)",
            m.probes_lost.clone(),
        );
        registry.register(
            "probes_discarded",
            "IP SLA probes whose outcome was discarded: the agent itself stalled while they were out",
            m.probes_discarded.clone(),
        );
        registry.register(
            "units_hung",
            "Units fenced because they sent no watchdog ping for --hang-ms",
            m.units_hung.clone(),
        );
        registry.register(
            "lease_grants",
            "etcd leases granted to this host",
            m.lease_grants.clone(),
        );
        registry.register(
            "self_fenced_units",
            "Units the lease watchdog fenced (the host lost its etcd lease)",
            m.self_fenced_units.clone(),
        );
        registry.register(
            "failsafe_rounds_confirmed",
            "Failsafe rounds every other host agent agreed to (an etcd outage: the units are kept)",
            m.failsafe_rounds_confirmed.clone(),
        );
        registry.register(
            "failsafe_rounds_refused",
            "Failsafe rounds some host agent refused or did not answer",
            m.failsafe_rounds_refused.clone(),
        );
        registry.register(
            "neighbours_solicited",
            "ARP requests / Neighbor Solicitations sent for the etcd members' next hops while lease renewals failed",
            m.neighbours_solicited.clone(),
        );
        registry.register(
            "units_running",
            "Units running on this host",
            m.units_running.clone(),
        );
        registry.register(
            "highest_token",
            "The highest fencing token accepted from a controller",
            m.highest_token.clone(),
        );
        registry.register(
            "attached",
            "1 while attached to the leading controller",
            m.attached.clone(),
        );
        AgentMetrics { registry, ..m }
    }

    /// The text exposition.
    pub fn render(&self) -> String {
        let mut out = String::new();
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }
}
