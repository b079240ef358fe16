//! RPKI metrics and the log lines that go with them (one call each, as
//! in `crate::obs`). The log lines keep the target they had when this file
//! was `rpki/metrics.rs` ([`TARGET`]), so log filters stay as they were.
//!
//! # Known issues
//! - None known.

use holdfast_rtr::Status;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

/// The `tracing` target of these log lines.
const TARGET: &str = "holdfast_speaker::rpki::metrics";

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CacheLabels {
    cache: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct VrpLabels {
    cache: String,
    family: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RouteLabels {
    instance: String,
    state: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct InstanceLabels {
    instance: String,
}

/// `holdfast_rpki_*`.
#[derive(Default)]
pub struct RpkiMetrics {
    cache_up: Family<CacheLabels, Gauge>,
    connects: Family<CacheLabels, Counter>,
    end_of_data: Family<CacheLabels, Counter>,
    errors: Family<CacheLabels, Counter>,
    vrps: Family<VrpLabels, Gauge>,
    serial: Family<CacheLabels, Gauge>,
    routes: Family<RouteLabels, Gauge>,
    revalidations: Family<InstanceLabels, Counter>,
    revalidation_seconds: Family<InstanceLabels, Counter<f64, AtomicU64>>,
}

fn cache(c: &str) -> CacheLabels {
    CacheLabels {
        cache: c.to_string(),
    }
}

impl RpkiMetrics {
    pub fn register(&self, r: &mut Registry) {
        r.register(
            "rpki_cache_up",
            "1 while an RTR session with the cache is open",
            self.cache_up.clone(),
        );
        r.register(
            "rpki_cache_connects",
            "RTR connections made to the cache",
            self.connects.clone(),
        );
        r.register(
            "rpki_end_of_data",
            "End of Data PDUs applied (VRP set updates) from the cache",
            self.end_of_data.clone(),
        );
        r.register(
            "rpki_errors",
            "RTR sessions ended by an error (Error Report sent or received, bad PDU)",
            self.errors.clone(),
        );
        r.register(
            "rpki_vrps",
            "VRPs held from the cache, by family",
            self.vrps.clone(),
        );
        r.register(
            "rpki_serial",
            "The cache's serial number last applied",
            self.serial.clone(),
        );
        r.register(
            "rpki_routes",
            "Received routes by RFC 6811 validation state",
            self.routes.clone(),
        );
        r.register(
            "rpki_revalidations",
            "VRP changes applied to the instance's routes",
            self.revalidations.clone(),
        );
        r.register(
            "rpki_revalidation_seconds",
            "Time spent re-importing the routes changed VRPs cover",
            self.revalidation_seconds.clone(),
        );
    }

    pub fn cache_connected(&self, c: &str) {
        tracing::info!(target: TARGET, cache = c, "RPKI cache connected");
        self.cache_up.get_or_create(&cache(c)).set(1);
        self.connects.get_or_create(&cache(c)).inc();
    }

    pub fn cache_down(&self, c: &str, reason: &str) {
        let was_up = self.cache_up.get_or_create(&cache(c)).set(0) == 1;
        if was_up {
            tracing::warn!(target: TARGET, cache = c, reason, "RPKI cache session ended");
        } else {
            tracing::debug!(target: TARGET, cache = c, reason, "RPKI cache unreachable");
        }
    }

    pub fn error(&self, c: &str, reason: &str) {
        tracing::warn!(target: TARGET, cache = c, reason, "RPKI: RTR error");
        self.errors.get_or_create(&cache(c)).inc();
    }

    pub fn end_of_data(
        &self,
        c: &str,
        st: &Status,
        added: usize,
        removed: usize,
        changed: usize,
        reset: bool,
    ) {
        tracing::info!(
            target: TARGET,
            cache = c,
            session = st.session,
            serial = st.serial,
            version = st.version,
            added,
            removed,
            changed,
            reset,
            vrps_v4 = st.vrps_v4,
            vrps_v6 = st.vrps_v6,
            "RPKI: VRPs updated"
        );
        self.end_of_data.get_or_create(&cache(c)).inc();
        for (family, n) in [("ipv4", st.vrps_v4), ("ipv6", st.vrps_v6)] {
            self.vrps
                .get_or_create(&VrpLabels {
                    cache: c.to_string(),
                    family: family.to_string(),
                })
                .set(n as i64);
        }
        if let Some(s) = st.serial {
            self.serial.get_or_create(&cache(c)).set(i64::from(s));
        }
    }

    /// A RIB thread applied a VRP change: its routes' states now.
    pub fn revalidated(
        &self,
        instance: &str,
        changed: usize,
        took: Duration,
        counts: holdfast_rib::RpkiCounts,
    ) {
        tracing::info!(
            target: TARGET,
            instance,
            changed_vrps = changed,
            ms = took.as_millis() as u64,
            valid = counts.valid,
            invalid = counts.invalid,
            not_found = counts.not_found,
            "RPKI: routes revalidated"
        );
        let l = InstanceLabels {
            instance: instance.to_string(),
        };
        self.revalidations.get_or_create(&l).inc();
        self.revalidation_seconds
            .get_or_create(&l)
            .inc_by(took.as_secs_f64());
        for (state, n) in [
            ("valid", counts.valid),
            ("invalid", counts.invalid),
            ("not-found", counts.not_found),
        ] {
            self.routes
                .get_or_create(&RouteLabels {
                    instance: instance.to_string(),
                    state: state.to_string(),
                })
                .set(n as i64);
        }
    }
}
