//! Routes originated at run time (`add_route` / `del_route`, the GoBGP
//! API's `AddPath` / `DeletePath`) and what the RIB thread originates:
//! the configuration's `[[network]]` routes overlaid by them (an added
//! route replaces a network's attributes for its prefix until deleted).
//!
//! # Non-stop routing
//! Under `[nsr]` each routing instance's run-time routes are replicated as
//! one [`OriginatedRecord`] (key: the instance's name) holding every route
//! as the [`RouteSpec`] it was added with; the whole set is rewritten on
//! every add and delete (`holdfast_nsr::Op::Originated`). The record is
//! submitted to the replicator *before* the change goes to the RIB thread,
//! so it is queued ahead of the UPDATE bytes announcing or withdrawing the
//! route, which are replicated (and written to the peer) only after it: a
//! peer never holds a run-time route the store does not have. The reply
//! waits until the replicator has released the record: with the store up
//! it is stored, so an acknowledged add or delete survives a takeover;
//! with the instance unprotected the reply says it is not stored yet.
//! Every instance's set is written again whenever the sessions
//! re-synchronise (the store answers again). A takeover — cold or from a
//! preheated standby — puts the stored sets back into the instances
//! ([`Daemon::adopt_stored_routes`]) before it originates and resumes the
//! sessions, so its Adj-RIB-Out comparison finds them advertised and sends
//! nothing for them; the new primary lists them and deletes them as the
//! old one did. A primary that starts afresh forgets them
//! (`resume::claim_and_forget`).
//!
//! # Known issues
//! - The next hop given is kept in the Loc-RIB (`gobgp global rib`
//!   shows it) but, as for `[[network]]`, the session's own address is
//!   sent to the peers (next hop self).
//! - Routes added at run time are not written back to the configuration;
//!   without `[nsr]` they last as long as the process.
//! - Each add or delete rewrites the instance's whole set: 109 bytes of
//!   JSON per route given without attributes, 156 with a next hop, one
//!   AS, a MED and one community, so 10,000 routes make a 1.6 MB record
//!   per change. Adds over the API are meant to be
//!   occasional; bulk origination belongs in `[[network]]`.
//! - Each add or delete waits for one store write (a round trip, well
//!   under a millisecond on a LAN) while the daemon's request loop waits
//!   with it; at most [`STORE_WAIT`] before the reply says it was not
//!   confirmed (the change is applied here either way).
//! - A standby does not follow the sets while it waits: it reads them at
//!   the takeover (they are small), so the routes are originated in its
//!   tables then, not preheated.
//! - After a store outage the replicator declares the instance protected
//!   once every BGP session has re-synchronised; the sets are rewritten at
//!   the same time, but that is not waited for.

use super::{Daemon, Instance};
use crate::msg::rib::{BestBatch, RibCmd};
use crate::nsr::{Nsr, Then};
use holdfast_api::{Response, RouteSpec};
use holdfast_nsr::{Op, OriginatedRecord, SCHEMA_VERSION};
use holdfast_wire::{AsPath, AsSegment, MpNextHop, Origin, PathAttrs, Prefix};
use std::collections::BTreeMap;
use std::net::IpAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, oneshot};

/// How long an add or delete waits for the store to confirm it.
const STORE_WAIT: Duration = Duration::from_secs(10);

/// A route added at run time: as it was given (what is replicated) and
/// the attributes the RIB originates.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct ApiRoute {
    pub spec: RouteSpec,
    pub attrs: Arc<PathAttrs>,
}

/// Batches of best-path changes a subscriber may have queued before it
/// is dropped as too slow.
const WATCH_QUEUE: usize = 1024;

/// Sends the RIB thread what changed between what it originates and
/// `networks` overlaid by `api_routes`.
pub(super) fn sync_originated(name: &str, inst: &mut Instance) {
    let mut wanted: BTreeMap<Prefix, Arc<PathAttrs>> = inst.networks.clone();
    for (p, r) in &inst.api_routes {
        wanted.insert(*p, Arc::clone(&r.attrs));
    }
    let withdraw: Vec<Prefix> = inst
        .originated
        .keys()
        .filter(|p| !wanted.contains_key(*p))
        .copied()
        .collect();
    let announce: Vec<(Prefix, Arc<PathAttrs>)> = wanted
        .iter()
        .filter(|(p, a)| inst.originated.get(*p).is_none_or(|o| **o != ***a))
        .map(|(p, a)| (*p, Arc::clone(a)))
        .collect();
    if !withdraw.is_empty() {
        tracing::info!(instance = %name, routes = withdraw.len(), "withdrawing originated routes");
        inst.rib.send(RibCmd::WithdrawOriginated(withdraw));
    }
    if !announce.is_empty() {
        tracing::info!(instance = %name, routes = announce.len(), "originating routes");
        inst.rib.send(RibCmd::Originate(announce));
    }
    inst.originated = wanted;
}

/// The path attributes of a route to originate, as `[[network]]` builds
/// them: checked so that the RIB never sees a next hop of the wrong
/// family.
pub(crate) fn route_attrs(r: &RouteSpec) -> Result<(Prefix, PathAttrs), String> {
    let prefix: Prefix = r.prefix.parse().map_err(|e: String| e)?;
    let mut a = PathAttrs {
        origin: Some(match r.origin {
            0 => Origin::Igp,
            1 => Origin::Egp,
            _ => Origin::Incomplete,
        }),
        as_path: AsPath::default(),
        ..PathAttrs::default()
    };
    if !r.as_path.is_empty() {
        a.as_path.segments = vec![AsSegment::Sequence(r.as_path.clone())];
    }
    if let Some(nh) = &r.next_hop {
        let ip: IpAddr = nh
            .parse()
            .map_err(|_| format!("next hop {nh:?}: not an IP address"))?;
        match (ip, matches!(prefix, Prefix::V4(_))) {
            (IpAddr::V4(v4), true) => a.next_hop = Some(v4),
            (IpAddr::V6(_), false) => {
                a.mp_next_hop = Some(MpNextHop {
                    global: ip,
                    link_local: None,
                })
            }
            _ => return Err(format!("next hop {ip} is not of {prefix}'s family")),
        }
    }
    a.med = r.med;
    a.local_pref = r.local_pref;
    a.communities = r.communities.clone();
    a.large_communities = r
        .large_communities
        .iter()
        .map(|&(global, local1, local2)| holdfast_wire::LargeCommunity {
            global,
            local1,
            local2,
        })
        .collect();
    a.ext_communities = r.ext_communities.clone();
    Ok((prefix, a))
}

/// The replicated record of an instance's run-time routes (in prefix
/// order; no routes: the stored record is removed).
pub(crate) fn originated_record(
    instance: &str,
    routes: &BTreeMap<Prefix, ApiRoute>,
) -> OriginatedRecord {
    OriginatedRecord {
        schema: SCHEMA_VERSION,
        instance: instance.to_string(),
        routes: routes
            .values()
            .filter_map(|r| serde_json::to_value(&r.spec).ok())
            .collect(),
    }
}

/// Queues instance `name`'s run-time routes (the whole set; none: the
/// stored set is removed) for the store.
fn submit_record(nsr: &Nsr, name: &str, routes: &BTreeMap<Prefix, ApiRoute>, then: Then) {
    let op = Op::Originated {
        key: name.to_string(),
        record: originated_record(name, routes),
    };
    nsr.submit(name, Some(op), nsr.gen(), then);
}

/// The routes of a stored record, and a message for each one that cannot
/// be read back (it is left out).
pub(crate) fn routes_from_record(
    record: &OriginatedRecord,
) -> (BTreeMap<Prefix, ApiRoute>, Vec<String>) {
    let mut routes = BTreeMap::new();
    let mut errors = Vec::new();
    for v in &record.routes {
        let spec: RouteSpec = match serde_json::from_value(v.clone()) {
            Ok(s) => s,
            Err(e) => {
                errors.push(format!("{v}: {e}"));
                continue;
            }
        };
        match route_attrs(&spec) {
            Ok((prefix, attrs)) => {
                routes.insert(
                    prefix,
                    ApiRoute {
                        spec,
                        attrs: Arc::new(attrs),
                    },
                );
            }
            Err(e) => errors.push(format!("{}: {e}", spec.prefix)),
        }
    }
    (routes, errors)
}

impl Daemon {
    fn instance_mut(
        &mut self,
        instance: Option<String>,
    ) -> Result<(String, &mut Instance), String> {
        let name = instance.unwrap_or_else(|| "default".to_string());
        match self.instances.get_mut(&name) {
            Some(i) => Ok((name, i)),
            None => Err(format!("unknown instance {name:?}")),
        }
    }

    pub(super) async fn add_route(
        &mut self,
        instance: Option<String>,
        route: RouteSpec,
    ) -> Response {
        let (prefix, attrs) = match route_attrs(&route) {
            Ok(x) => x,
            Err(e) => return Response::error(e),
        };
        let (name, inst) = match self.instance_mut(instance) {
            Ok(x) => x,
            Err(e) => return Response::error(e),
        };
        tracing::info!(instance = %name, %prefix, "route added over the API");
        inst.api_routes.insert(
            prefix,
            ApiRoute {
                spec: route,
                attrs: Arc::new(attrs),
            },
        );
        self.api_routes_changed(&name, format!("{prefix} originated in instance {name}"))
            .await
    }

    pub(super) async fn del_route(&mut self, instance: Option<String>, prefix: String) -> Response {
        let prefix: Prefix = match prefix.parse() {
            Ok(p) => p,
            Err(e) => return Response::error(e),
        };
        let (name, inst) = match self.instance_mut(instance) {
            Ok(x) => x,
            Err(e) => return Response::error(e),
        };
        if inst.api_routes.remove(&prefix).is_none() {
            return Response::error(format!(
                "{prefix} was not added over the API in instance {name}"
            ));
        }
        tracing::info!(instance = %name, %prefix, "route deleted over the API");
        self.api_routes_changed(&name, format!("{prefix} withdrawn in instance {name}"))
            .await
    }

    /// After an add or delete in instance `name`: the set replicated before
    /// the RIB thread hears of the change (module docs), then the reply
    /// (`done`) once the store has it.
    async fn api_routes_changed(&mut self, name: &str, done: String) -> Response {
        let stored = self.replicate_api_routes(name, true);
        if let Some(inst) = self.instances.get_mut(name) {
            sync_originated(name, inst);
        }
        match self.stored(stored).await {
            Ok(note) => Response::message(format!("{done}{note}")),
            Err(e) => Response::error(format!("{done}, but {e}")),
        }
    }

    /// Under `[nsr]`: submits instance `name`'s run-time routes (the whole
    /// set) to the replicator. With `wait`, the receiver resolves once the
    /// replicator has released the record (stored, or unprotected).
    fn replicate_api_routes(&self, name: &str, wait: bool) -> Option<oneshot::Receiver<()>> {
        let nsr = self.nsr.as_ref()?;
        let inst = self.instances.get(name)?;
        let (then, rx) = if wait {
            let (tx, rx) = oneshot::channel();
            (Then::Notify(tx), Some(rx))
        } else {
            (Then::Nothing, None)
        };
        submit_record(nsr, name, &inst.api_routes, then);
        rx
    }

    /// Every instance's run-time routes written again (after the store
    /// came back: the sessions re-synchronise).
    pub(super) fn replicate_all_api_routes(&self) {
        let mut names: Vec<&String> = self.instances.keys().collect();
        names.sort();
        for name in names {
            self.replicate_api_routes(name, false);
        }
        tracing::debug!("routes added over the API written again to the state store");
    }

    /// Waits for a record submitted by [`Self::replicate_api_routes`]:
    /// what the reply adds (nothing when it is stored), or why it is not
    /// confirmed.
    async fn stored(&self, rx: Option<oneshot::Receiver<()>>) -> Result<&'static str, String> {
        let (Some(rx), Some(nsr)) = (rx, &self.nsr) else {
            return Ok("");
        };
        match tokio::time::timeout(STORE_WAIT, rx).await {
            Ok(Ok(())) if nsr.shared.store_up.load(Ordering::SeqCst) => Ok(""),
            Ok(Ok(())) => {
                Ok(" (NSR unprotected: not in the state store yet; written when it answers again)")
            }
            Ok(Err(_)) => Err("this process is fenced: the change is not stored".into()),
            Err(_) => Err(format!(
                "the state store did not confirm it within {} s",
                STORE_WAIT.as_secs()
            )),
        }
    }

    /// Takeover: the stored run-time routes put back into their
    /// instances (before they originate anything and before the sessions
    /// resume). A set whose instance is no longer configured is forgotten.
    pub(super) fn adopt_stored_routes(&mut self) {
        let Some(t) = self.takeover.as_mut() else {
            return;
        };
        let stored = std::mem::take(&mut t.originated);
        for (name, record) in stored {
            let Some(inst) = self.instances.get_mut(&name) else {
                tracing::warn!(instance = %name, routes = record.routes.len(), "takeover: stored routes added over the API belong to an instance the configuration no longer has: forgotten");
                if let Some(nsr) = &self.nsr {
                    submit_record(nsr, &name, &BTreeMap::new(), Then::Nothing);
                }
                continue;
            };
            let (routes, errors) = routes_from_record(&record);
            for e in errors {
                tracing::error!(instance = %name, route = %e, "takeover: a stored route added over the API cannot be read: left out");
            }
            tracing::info!(instance = %name, routes = routes.len(), "takeover: routes added over the API restored");
            inst.api_routes = routes;
        }
    }

    /// A new subscriber to the default instance's best-path changes.
    pub(super) fn watch_best(&self) -> Result<mpsc::Receiver<Arc<BestBatch>>, String> {
        let inst = self
            .instances
            .get("default")
            .ok_or_else(|| "no default instance".to_string())?;
        let (tx, rx) = mpsc::channel(WATCH_QUEUE);
        inst.rib.send(RibCmd::WatchBest(tx));
        Ok(rx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn route_attrs_from_a_spec() {
        let r = RouteSpec {
            prefix: "10.9.0.0/24".into(),
            next_hop: Some("192.0.2.1".into()),
            origin: 2,
            as_path: vec![65100],
            med: Some(5),
            communities: vec![65000 << 16 | 1],
            large_communities: vec![(1, 2, 3)],
            ..RouteSpec::default()
        };
        let (p, a) = route_attrs(&r).expect("attrs");
        assert_eq!(p.to_string(), "10.9.0.0/24");
        assert_eq!(a.next_hop, Some("192.0.2.1".parse().expect("ip")));
        assert_eq!(a.origin, Some(Origin::Incomplete));
        assert_eq!(a.as_path.segments, vec![AsSegment::Sequence(vec![65100])]);
        let v6 = RouteSpec {
            prefix: "2001:db8:9::/48".into(),
            next_hop: Some("2001:db8::1".into()),
            ..RouteSpec::default()
        };
        let (_, a) = route_attrs(&v6).expect("v6");
        assert!(a.mp_next_hop.is_some() && a.next_hop.is_none());
        let wrong = RouteSpec {
            prefix: "10.9.0.0/24".into(),
            next_hop: Some("2001:db8::1".into()),
            ..RouteSpec::default()
        };
        assert!(route_attrs(&wrong).is_err());
        let bad = RouteSpec {
            prefix: "10.9.0.0/33".into(),
            ..RouteSpec::default()
        };
        assert!(route_attrs(&bad).is_err());
    }

    fn api_route(spec: RouteSpec) -> (Prefix, ApiRoute) {
        let (p, a) = route_attrs(&spec).expect("attrs");
        (
            p,
            ApiRoute {
                spec,
                attrs: Arc::new(a),
            },
        )
    }

    #[test]
    fn record_round_trip() {
        let routes: BTreeMap<Prefix, ApiRoute> = [
            RouteSpec {
                prefix: "10.9.1.0/24".into(),
                next_hop: Some("192.0.2.1".into()),
                as_path: vec![65100, 65101],
                med: Some(5),
                local_pref: Some(200),
                communities: vec![65000 << 16 | 1],
                large_communities: vec![(1, 2, 3)],
                ext_communities: vec![[0, 2, 0, 1, 0, 0, 0, 7]],
                ..RouteSpec::default()
            },
            RouteSpec {
                prefix: "10.9.0.0/24".into(),
                origin: 1,
                ..RouteSpec::default()
            },
            RouteSpec {
                prefix: "2001:db8:9::/48".into(),
                next_hop: Some("2001:db8::1".into()),
                ..RouteSpec::default()
            },
        ]
        .into_iter()
        .map(api_route)
        .collect();
        let rec = originated_record("blue", &routes);
        assert_eq!(rec.schema, SCHEMA_VERSION);
        assert_eq!(rec.instance, "blue");
        let prefixes: Vec<&str> = rec
            .routes
            .iter()
            .filter_map(|r| r["prefix"].as_str())
            .collect();
        assert_eq!(
            prefixes,
            ["10.9.0.0/24", "10.9.1.0/24", "2001:db8:9::/48"],
            "prefix order"
        );
        // Through the stored JSON, as a backup reads it.
        let json = serde_json::to_vec(&rec).expect("encode");
        let back: OriginatedRecord = serde_json::from_slice(&json).expect("decode");
        let (restored, errors) = routes_from_record(&back);
        assert!(errors.is_empty(), "{errors:?}");
        assert_eq!(restored, routes, "same specs, same attributes");
        assert!(originated_record("blue", &BTreeMap::new())
            .routes
            .is_empty());
    }

    /// The sizes docs/nsr.md gives (Known issues) for a stored route.
    #[test]
    fn stored_route_sizes() {
        let bare = RouteSpec {
            prefix: "10.9.0.0/24".into(),
            ..RouteSpec::default()
        };
        let full = RouteSpec {
            prefix: "10.9.0.0/24".into(),
            next_hop: Some("192.0.2.1".into()),
            origin: 2,
            as_path: vec![65100],
            med: Some(10),
            communities: vec![65000 << 16 | 1],
            ..RouteSpec::default()
        };
        let len = |r: &RouteSpec| serde_json::to_vec(r).expect("json").len();
        assert_eq!((len(&bare), len(&full)), (109, 156));
    }

    #[test]
    fn unreadable_stored_routes_are_left_out() {
        let rec = OriginatedRecord {
            schema: SCHEMA_VERSION,
            instance: "default".into(),
            routes: vec![
                serde_json::json!({ "prefix": "10.9.0.0/24" }),
                serde_json::json!({ "prefix": "10.9.0.0/33" }),
                serde_json::json!({ "prefix": 7 }),
                serde_json::json!({ "prefix": "10.9.2.0/24", "future_field": true }),
            ],
        };
        let (routes, errors) = routes_from_record(&rec);
        let got: Vec<String> = routes.keys().map(|p| p.to_string()).collect();
        assert_eq!(got, ["10.9.0.0/24", "10.9.2.0/24"]);
        assert_eq!(errors.len(), 2, "{errors:?}");
    }
}
