//! Routes originated at run time (`add_route` / `del_route`, the GoBGP
//! API's `AddPath` / `DeletePath`) and what the RIB thread originates:
//! the configuration's `[[network]]` routes overlaid by them (an added
//! route replaces a network's attributes for its prefix until deleted).
//!
//! # Known issues
//! - The next hop given is kept in the Loc-RIB (`gobgp global rib`
//!   shows it) but, as for `[[network]]`, the session's own address is
//!   sent to the peers (next hop self).
//! - Routes added at run time are not replicated under `[nsr]`: a backup
//!   that takes over does not have them and withdraws them from the
//!   peers (docs/nsr.md). They are not written back to the configuration
//!   either; they last as long as the process.

use super::{Daemon, Instance};
use crate::rib_thread::{BestBatch, RibCmd};
use holdfast_api::{Response, RouteSpec};
use holdfast_wire::{AsPath, AsSegment, MpNextHop, Origin, PathAttrs, Prefix};
use std::collections::BTreeMap;
use std::net::IpAddr;
use std::sync::Arc;
use tokio::sync::mpsc;

/// Batches of best-path changes a subscriber may have queued before it
/// is dropped as too slow.
const WATCH_QUEUE: usize = 1024;

/// Sends the RIB thread what changed between what it originates and
/// `networks` overlaid by `api_routes`.
pub(super) fn sync_originated(name: &str, inst: &mut Instance) {
    let mut wanted: BTreeMap<Prefix, Arc<PathAttrs>> = inst.networks.clone();
    for (p, a) in &inst.api_routes {
        wanted.insert(*p, Arc::clone(a));
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

    pub(super) fn add_route(&mut self, instance: Option<String>, route: RouteSpec) -> Response {
        let (prefix, attrs) = match route_attrs(&route) {
            Ok(x) => x,
            Err(e) => return Response::error(e),
        };
        let (name, inst) = match self.instance_mut(instance) {
            Ok(x) => x,
            Err(e) => return Response::error(e),
        };
        tracing::info!(instance = %name, %prefix, "route added over the API");
        inst.api_routes.insert(prefix, Arc::new(attrs));
        sync_originated(&name, inst);
        Response::message(format!("{prefix} originated in instance {name}"))
    }

    pub(super) fn del_route(&mut self, instance: Option<String>, prefix: String) -> Response {
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
        sync_originated(&name, inst);
        Response::message(format!("{prefix} withdrawn in instance {name}"))
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
}
