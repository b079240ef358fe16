//! The daemon's side of RPKI (`crate::rpki`): the RTR task started from
//! `[[rpki]]` (again after a reload that changes it or the instances,
//! keeping the VRPs in force), `show rpki`, and the takeover's wait for
//! the cache.

use super::Daemon;
use crate::msg::rib::{QueryResult, RibCmd, RibQuery};
use crate::rpki::RpkiRuntime;
use holdfast_api::{RpkiInfo, RpkiRoutes};
use std::time::{Duration, Instant};

/// How long a backup taking over waits for a cache's first End of Data
/// before it rebuilds its tables without VRPs (docs/nsr.md, RPKI).
pub(super) const TAKEOVER_RPKI_WAIT: Duration = Duration::from_secs(30);

impl Daemon {
    /// Starts the RTR task of the running configuration; the VRPs of the
    /// previous one stay in force until a cache answers.
    pub(super) fn restart_rpki(&mut self) {
        let keep = self.rpki.stop();
        let ribs = self.instances.values().map(|i| i.rib.clone()).collect();
        self.rpki = RpkiRuntime::start(&self.cfg.rpki, ribs, self.metrics.clone(), keep);
    }

    /// Whether a takeover must wait for the cache before rebuilding the
    /// tables: caches are configured and some import policy matches on
    /// `rpki`.
    pub(super) fn rpki_await(&self) -> Option<Instant> {
        let used = self.cfg.neighbors.iter().any(|n| {
            n.import
                .name()
                .and_then(|p| self.cfg.policy(p))
                .is_some_and(|p| p.terms.iter().any(|t| !t.matches.rpki.is_empty()))
        });
        (used && self.rpki.enabled()).then(|| Instant::now() + TAKEOVER_RPKI_WAIT)
    }

    /// `show rpki`.
    pub(super) async fn show_rpki(&self) -> RpkiInfo {
        let mut info = self.rpki.info();
        let mut names: Vec<&String> = self.instances.keys().collect();
        names.sort();
        for n in names {
            if let Some(QueryResult::Rpki(c)) = self.instances[n].rib.query(RibQuery::Rpki).await {
                info.routes.push(RpkiRoutes {
                    instance: n.clone(),
                    valid: c.valid,
                    invalid: c.invalid,
                    not_found: c.not_found,
                });
            }
        }
        info
    }

    /// `show rib`: each route's RFC 6811 state as received, with
    /// `[[rpki]]` (none for the Adj-RIB-Out).
    pub(super) async fn rpki_states(
        &self,
        rib: &crate::msg::rib::RibHandle,
        table: holdfast_api::RibTable,
        routes: &[crate::msg::rib::RouteRow],
    ) -> Vec<Option<holdfast_rib::Validity>> {
        if !self.rpki.enabled() || table == holdfast_api::RibTable::Out {
            return Vec::new();
        }
        let q = routes.iter().map(|r| (r.1, r.0)).collect();
        match rib.query(RibQuery::Validity(q)).await {
            Some(QueryResult::Validity(v)) => v,
            _ => Vec::new(),
        }
    }

    /// Before a takeover's `RibCmd::Resume`: hold the RIB threads until
    /// the cache's VRPs arrive (bounded).
    pub(super) fn hold_for_rpki(&self, rib: &crate::msg::rib::RibHandle) {
        if let Some(until) = self.rpki_await() {
            rib.send(RibCmd::RpkiAwait { until });
        }
    }
}
