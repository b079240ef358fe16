//! Reload: what changed between two configurations, so that the daemon
//! touches only the sessions whose settings changed.

use crate::model::{Neighbor, NeighborKey};
use crate::values::PolicyRef;
use crate::Config;
use std::collections::{BTreeMap, BTreeSet};

/// The result of [`diff`]. Every list is sorted and a key appears in at most
/// one of them: a reset re-runs import and export anyway, so a neighbour in
/// `reset_required` is not repeated in `policy_changed`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ConfigDiff {
    pub added: Vec<NeighborKey>,
    pub removed: Vec<NeighborKey>,
    /// The session must be torn down and re-established: something carried
    /// in OPEN or in the transport changed (ASNs, router id, hold time,
    /// families, graceful restart, MD5 key, passive, local address, VRF,
    /// TTL handling), or the neighbour was enabled or disabled.
    pub reset_required: Vec<NeighborKey>,
    /// Import or export must be re-evaluated (route refresh / re-export):
    /// the policy name changed, the referenced policy or one of its prefix
    /// lists changed, or `next_hop_self` / `route_reflector_client` changed.
    pub policy_changed: Vec<NeighborKey>,
    /// Settings that need no session action (description, keepalive,
    /// connect retry, max prefix) changed; apply them in place.
    pub settings_changed: Vec<NeighborKey>,
    /// The neighbour's BFD settings changed (enabled, disabled, new timers,
    /// transport or key). Independent of the lists above: a key may also
    /// be in one of them. A BFD change alone never resets BGP; new timers
    /// reach a running BFD session as a Poll Sequence (RFC 5880 §6.8.3).
    pub bfd_changed: Vec<NeighborKey>,
    pub global_changed: bool,
    pub instances_changed: bool,
    pub networks_changed: bool,
    /// `[[mrt]]` changed: the MRT timers and logs start afresh.
    pub mrt_changed: bool,
    /// `[[bmp]]` changed: the BMP sessions start afresh.
    pub bmp_changed: bool,
    /// `[[rpki]]` changed: the RTR client starts afresh with the new caches.
    pub rpki_changed: bool,
    /// Names of `[[policy]]` definitions added, removed or changed (directly
    /// or through a prefix list they use).
    pub policies_changed: Vec<String>,
}

impl ConfigDiff {
    pub fn is_empty(&self) -> bool {
        *self == ConfigDiff::default()
    }
}

/// Fields whose change requires a session reset, resolved against global
/// and instance defaults so that a change of the default counts too.
fn session_identity(n: &Neighbor, c: &Config) -> impl PartialEq {
    let g = &c.global;
    let inst = c.instance(&n.instance);
    (
        (
            n.address,
            n.remote_asn,
            n.local_as(g),
            inst.map(|i| i.effective_router_id(g)),
        ),
        (
            n.effective_hold_time(g),
            n.families.clone(),
            n.advertise_graceful_restart(g)
                .then_some(g.graceful_restart_time),
        ),
        (
            n.md5_password.clone(),
            n.passive,
            n.local_address,
            n.vrf.clone(),
            n.ttl_security,
            n.multihop,
        ),
        n.enabled,
    )
}

/// Equal apart from BFD settings, which [`ConfigDiff::bfd_changed`] covers.
fn same_but_bfd(a: &Neighbor, b: &Neighbor) -> bool {
    a.bfd == b.bfd && a == b
        || Neighbor {
            bfd: None,
            ..a.clone()
        } == Neighbor {
            bfd: None,
            ..b.clone()
        }
}

fn policy_fingerprint<'a>(p: &'a PolicyRef, changed: &BTreeSet<String>) -> (&'a PolicyRef, bool) {
    (p, p.name().is_some_and(|n| changed.contains(n)))
}

/// Policies whose definition, or one of whose prefix lists, differs.
fn changed_policies(old: &Config, new: &Config) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let names: BTreeSet<&str> = old
        .policies
        .iter()
        .chain(&new.policies)
        .map(|p| p.name.as_str())
        .collect();
    for name in names {
        let changed = match (old.policy(name), new.policy(name)) {
            (Some(a), Some(b)) => {
                a != b
                    || b.prefix_lists()
                        .any(|l| old.prefix_list(l) != new.prefix_list(l))
            }
            _ => true,
        };
        if changed {
            out.insert(name.to_string());
        }
    }
    out
}

/// Compares `old` with `new` for a reload.
pub fn diff(old: &Config, new: &Config) -> ConfigDiff {
    let changed = changed_policies(old, new);
    let olds: BTreeMap<NeighborKey, &Neighbor> =
        old.neighbors.iter().map(|n| (n.key(), n)).collect();
    let news: BTreeMap<NeighborKey, &Neighbor> =
        new.neighbors.iter().map(|n| (n.key(), n)).collect();
    let mut d = ConfigDiff {
        global_changed: old.global != new.global,
        mrt_changed: old.mrt != new.mrt,
        bmp_changed: old.bmp != new.bmp,
        rpki_changed: old.rpki != new.rpki,
        instances_changed: old.instances != new.instances,
        networks_changed: old.networks != new.networks,
        policies_changed: changed.iter().cloned().collect(),
        ..ConfigDiff::default()
    };
    for (key, o) in &olds {
        let Some(n) = news.get(key) else {
            d.removed.push(key.clone());
            continue;
        };
        let empty = BTreeSet::new();
        if session_identity(o, old) != session_identity(n, new) {
            d.reset_required.push(key.clone());
        } else if policy_fingerprint(&o.import, &empty) != policy_fingerprint(&n.import, &changed)
            || policy_fingerprint(&o.export, &empty) != policy_fingerprint(&n.export, &changed)
            || o.next_hop_self != n.next_hop_self
            || o.route_reflector_client != n.route_reflector_client
            || (o.route_reflector_client
                && old.global.effective_cluster_id() != new.global.effective_cluster_id())
        {
            d.policy_changed.push(key.clone());
        } else if !same_but_bfd(o, n) {
            d.settings_changed.push(key.clone());
        }
        if o.bfd != n.bfd {
            d.bfd_changed.push(key.clone());
        }
    }
    d.added = news
        .keys()
        .filter(|k| !olds.contains_key(*k))
        .cloned()
        .collect();
    d
}
