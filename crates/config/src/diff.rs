//! Reload: what changed between two configurations, so that the daemon
//! touches only the sessions whose settings changed, and each routing
//! instance's kernel FIB only where its `[kernel]` changed
//! ([`KernelChange`]).

use crate::model::{Instance, Kernel, Neighbor, NeighborKey};
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
    /// An `[[instance]]` was added or removed, or its `vrf`, `router_id`
    /// or `asn` changed. A change of its `kernel` alone is not counted
    /// here but in `kernel_changed`.
    pub instances_changed: bool,
    /// Per routing instance whose `[kernel]` (or `kernel = {...}`)
    /// differs, sorted by instance name.
    pub kernel_changed: Vec<KernelChange>,
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

/// One routing instance's kernel FIB before and after a reload (`None`:
/// no `[kernel]`, or no such instance).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KernelChange {
    pub instance: String,
    pub old: Option<Kernel>,
    pub new: Option<Kernel>,
}

/// What a reload does to one instance's kernel FIB ([`KernelChange::action`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KernelAction {
    /// `[kernel]` added: the FIB starts, adopts our routes already in the
    /// table and installs the best paths at once (no start-up hold: the
    /// tables are complete).
    Start,
    /// `[kernel]` removed: the FIB stops; `withdraw` (the old `persist`
    /// was false): our routes are removed from the table first.
    Stop { withdraw: bool },
    /// Changed in place: the running FIB takes the new settings. `moved`:
    /// the table, protocol or metric changed, so every route is written
    /// under the new key and then removed under the old one. `rewrite`:
    /// `ecmp` changed, every entry is computed again and rewritten where
    /// it differs. Neither: only `persist` or `startup_hold`, which need
    /// no write.
    Update { moved: bool, rewrite: bool },
}

impl KernelChange {
    pub fn action(&self) -> Option<KernelAction> {
        match (&self.old, &self.new) {
            (None, None) => None,
            (None, Some(_)) => Some(KernelAction::Start),
            (Some(o), None) => Some(KernelAction::Stop {
                withdraw: !o.persist,
            }),
            (Some(o), Some(n)) if o == n => None,
            (Some(o), Some(n)) => Some(KernelAction::Update {
                moved: (o.table, o.protocol, o.metric) != (n.table, n.protocol, n.metric),
                rewrite: o.ecmp != n.ecmp,
            }),
        }
    }

    /// `startup_hold` changed on a FIB that keeps running: it applies
    /// only at the next start.
    pub fn startup_hold_deferred(&self) -> bool {
        matches!((&self.old, &self.new), (Some(o), Some(n)) if o.startup_hold != n.startup_hold)
    }

    /// One line for the reload's log: what changed and what is done.
    pub fn describe(&self) -> String {
        let keys = |k: &Kernel| {
            format!(
                "table {} metric {} ecmp {} protocol {}{}",
                k.table,
                k.metric,
                k.ecmp,
                k.protocol,
                if k.persist { " persist" } else { "" }
            )
        };
        match (&self.old, &self.new) {
            (None, None) => "unchanged".into(),
            (None, Some(n)) => format!(
                "added ({}): starting, adopting ours in the table, installing the best paths",
                keys(n)
            ),
            (Some(o), None) if o.persist => format!(
                "removed ({}): stopping; persist: our routes are left in the table",
                keys(o)
            ),
            (Some(o), None) => format!(
                "removed ({}): stopping; our routes are removed from the table",
                keys(o)
            ),
            (Some(o), Some(n)) => {
                let mut parts: Vec<String> = Vec::new();
                let mut field = |name: &str, a: String, b: String| {
                    if a != b {
                        parts.push(format!("{name} {a} -> {b}"));
                    }
                };
                field("table", o.table.to_string(), n.table.to_string());
                field("protocol", o.protocol.to_string(), n.protocol.to_string());
                field("metric", o.metric.to_string(), n.metric.to_string());
                field("ecmp", o.ecmp.to_string(), n.ecmp.to_string());
                field("persist", o.persist.to_string(), n.persist.to_string());
                field(
                    "startup_hold",
                    o.startup_hold.to_string(),
                    n.startup_hold.to_string(),
                );
                let mut what: Vec<&str> = Vec::new();
                if let Some(KernelAction::Update { moved, rewrite }) = self.action() {
                    if moved {
                        what.push("routes written under the new key, then removed under the old");
                    }
                    if rewrite {
                        what.push("every entry recomputed and rewritten where it differs");
                    }
                }
                if self.startup_hold_deferred() {
                    what.push("startup_hold applies at the next start only");
                }
                if what.is_empty() {
                    what.push("nothing to write");
                }
                format!("{}: {}", parts.join(", "), what.join("; "))
            }
        }
    }
}

/// Instances compared without their `kernel` (see [`KernelChange`]).
fn without_kernel(v: &[Instance]) -> Vec<Instance> {
    v.iter()
        .map(|i| Instance {
            kernel: None,
            ..i.clone()
        })
        .collect()
}

/// Every instance whose kernel FIB differs between `old` and `new`.
pub fn kernel_changes(old: &Config, new: &Config) -> Vec<KernelChange> {
    let names: BTreeSet<&str> = old
        .instances
        .iter()
        .chain(&new.instances)
        .map(|i| i.name.as_str())
        .collect();
    names
        .into_iter()
        .filter_map(|name| {
            let o = old.instance(name).and_then(|i| i.kernel.clone());
            let n = new.instance(name).and_then(|i| i.kernel.clone());
            (o != n).then(|| KernelChange {
                instance: name.to_string(),
                old: o,
                new: n,
            })
        })
        .collect()
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
        instances_changed: without_kernel(&old.instances) != without_kernel(&new.instances),
        kernel_changed: kernel_changes(old, new),
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
