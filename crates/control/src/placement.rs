//! Backup placement: TRIPOD §V's min-churn predictive replica placement,
//! for one backup per unit (k = 1).
//!
//! TRIPOD places a replica where the work will land when a server fails
//! (the "prediction function" b(c, e)), minimising the worst load any one
//! server receives over the failure scenarios (its φ, Equation 1), and
//! never moves a replica that is already placed (Equation 5: the placed
//! connections are the fixed term S_j). Here a unit's work lands on its
//! backup, so the prediction is the backup itself:
//!
//! - the *base load* of a host is the weight of its primaries plus that of
//!   the preheated standbys it keeps (those run all the time);
//! - when host `f` fails, host `h` also carries every unit whose primary is
//!   on `f` and whose cold backup is on `h` ([`after_failure`]);
//! - a placement is feasible when, for every host `f` that may fail, every
//!   other host's load stays within its capacity.
//!
//! A host may name its failure domain (a rack): a backup goes outside its
//! primary's domain whenever a host there fits, so a whole rack failing
//! leaves every unit of it a backup elsewhere.
//!
//! [`place`] keeps every valid backup (min-churn: a backup moves only when
//! its own host or its primary's host fails, or it was never placed) and
//! places the rest one by one, heaviest first, each on the healthy host
//! whose own worst-case load (over every single failure, as a share of its
//! capacity) stays lowest. Adding a unit's backup to a host changes only
//! that host's numbers, so each choice minimises the cluster's worst case
//! given the choices before it. [`failure_loads`] reports, per host, the
//! load after each other host's failure, for `holdfast ctl units`.
//!
//! # Known issues
//! - Greedy, not TRIPOD's relaxed LP with rounding: it can refuse
//!   ([`PlacementError::NoHostFits`]) a set of units an exact solver would
//!   place, when the units already placed leave capacity fragmented.
//! - Only single host failures are planned for (k = 1): the loads after a
//!   whole domain fails are not checked against capacity (backups are
//!   only kept out of their primary's domain). After a failure the
//!   surviving hosts are replanned as units are re-placed.
//! - A kept backup is not moved when a capacity shrinks; the overload shows
//!   in [`failure_loads`] but nothing rebalances it.
//! - Units whose primary host has failed keep their backup untouched (it is
//!   their takeover target) and take no part in the load until the planner
//!   has moved them.

use std::collections::BTreeMap;

use crate::model::{BackupMode, DesiredState, HostId, UnitId};

/// No backup could be placed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlacementError {
    /// Every healthy host other than the primary's would be over capacity
    /// after some single failure.
    #[error("no host fits a backup of unit {unit} (weight {weight}, primary on {primary})")]
    NoHostFits {
        /// The unit.
        unit: UnitId,
        /// Its primary host.
        primary: HostId,
        /// Its weight.
        weight: u32,
    },
    /// The unit names a host the state does not have.
    #[error("unit {unit} has its primary on unknown host {host}")]
    UnknownHost {
        /// The unit.
        unit: UnitId,
        /// The host it names.
        host: HostId,
    },
}

/// The result of [`place`]: every placeable unit's backup, and which ones
/// changed.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Placement {
    /// The backup of every unit whose primary host has not failed.
    pub backups: BTreeMap<UnitId, HostId>,
    /// Units whose backup is new or moved, by name.
    pub changed: Vec<UnitId>,
}

impl Placement {
    /// Writes the backups into `state`.
    pub fn apply(&self, state: &mut DesiredState) {
        for (unit, host) in &self.backups {
            if let Some(u) = state.units.get_mut(unit) {
                u.backup = Some(host.clone());
            }
        }
    }
}

/// One host's load now and after each other host's failure.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostLoad {
    /// The host.
    pub host: HostId,
    /// Its capacity.
    pub capacity: u32,
    /// Its primaries plus its preheated standbys.
    pub load: u32,
    /// Its load after each other host's failure, by the failed host.
    pub after: BTreeMap<HostId, u32>,
}

impl HostLoad {
    /// The largest of its loads, now or after any single failure.
    pub fn worst(&self) -> u32 {
        self.after.values().copied().fold(self.load, u32::max)
    }

    /// Whether some single failure would take it over capacity.
    pub fn overloaded(&self) -> bool {
        self.worst() > self.capacity
    }
}

/// Loads: base load per host, the weight that moves from `f` to `h`, and
/// per host the most that any one failure moves onto it (so a host's worst
/// case is one lookup, not one per host that may fail: at 1,000 hosts the
/// difference between milliseconds and minutes for a rack's units).
#[derive(Debug, Default)]
struct Loads {
    base: BTreeMap<HostId, u64>,
    /// From `f`, to `h`.
    moved: BTreeMap<HostId, BTreeMap<HostId, u64>>,
    /// Per `h`: the largest `moved(f, h)` over every `f`.
    max_in: BTreeMap<HostId, u64>,
    /// Per `h`: the weight of every backup it keeps (cold or preheated).
    hosted: BTreeMap<HostId, u64>,
}

impl Loads {
    fn add(&mut self, primary: &HostId, backup: &HostId, mode: BackupMode, weight: u32) {
        self.add_primary(primary, weight);
        self.add_backup(primary, backup, mode, weight);
    }

    fn add_backup(&mut self, primary: &HostId, backup: &HostId, mode: BackupMode, weight: u32) {
        let w = u64::from(weight);
        *self.hosted.entry(backup.clone()).or_default() += w;
        match mode {
            BackupMode::Preheated => *self.base.entry(backup.clone()).or_default() += w,
            BackupMode::Cold => {
                let m = self
                    .moved
                    .entry(primary.clone())
                    .or_default()
                    .entry(backup.clone())
                    .or_default();
                *m += w;
                let v = *m;
                let max = self.max_in.entry(backup.clone()).or_default();
                *max = (*max).max(v);
            }
        }
    }

    fn add_primary(&mut self, primary: &HostId, weight: u32) {
        *self.base.entry(primary.clone()).or_default() += u64::from(weight);
    }

    fn base(&self, h: &HostId) -> u64 {
        self.base.get(h).copied().unwrap_or(0)
    }

    fn moved(&self, f: &HostId, h: &HostId) -> u64 {
        self.moved
            .get(f)
            .and_then(|m| m.get(h))
            .copied()
            .unwrap_or(0)
    }

    /// `h`'s worst load over "no failure" and every single failure of a
    /// live host, with `extra_base` added to its base and `extra.1` added
    /// to what `extra.0` moves onto it. (Nothing moves from `h` onto
    /// itself: a backup is never on its primary's host.)
    fn worst(&self, h: &HostId, extra_base: u64, extra: (&HostId, u64)) -> u64 {
        let base = self.base(h) + extra_base;
        let max_in = self.max_in.get(h).copied().unwrap_or(0);
        base + max_in.max(self.moved(extra.0, h) + extra.1)
    }
}

/// Hosts that may fail and carry primaries (healthy or draining).
fn live_hosts(state: &DesiredState) -> Vec<HostId> {
    state
        .hosts
        .values()
        .filter(|h| !h.is_failed())
        .map(|h| h.name.clone())
        .collect()
}

/// Whether `unit`'s current backup may stay: it exists, differs from the
/// primary, and its host is healthy.
fn valid_backup(state: &DesiredState, primary: &HostId, backup: Option<&HostId>) -> bool {
    backup.is_some_and(|b| b != primary && state.is_usable(b))
}

/// How a candidate backup host ranks, lowest first: in the primary's
/// failure domain, worst-case load share, load moved from the primary,
/// base load share, backups kept share.
type Choice = (bool, u64, u64, u64, u64);

/// Places the backup of every unit that needs one (see the module docs),
/// keeping every valid one. Fails on the first unit that fits nowhere.
pub fn place(state: &DesiredState) -> Result<Placement, PlacementError> {
    let (placement, mut errors) = place_partial(state);
    if errors.is_empty() {
        Ok(placement)
    } else {
        Err(errors.swap_remove(0))
    }
}

/// [`place`], going on past the units that fit nowhere: they are left out
/// of [`Placement::backups`] and reported, in placement order.
pub fn place_partial(state: &DesiredState) -> (Placement, Vec<PlacementError>) {
    let mut errors = Vec::new();
    let mut loads = Loads::default();
    let mut out = Placement::default();
    let mut todo = Vec::new();
    for u in state.units.values() {
        let Some(primary) = state.hosts.get(&u.primary) else {
            errors.push(PlacementError::UnknownHost {
                unit: u.name.clone(),
                host: u.primary.clone(),
            });
            continue;
        };
        if primary.is_failed() {
            continue;
        }
        match u.backup.as_ref() {
            Some(b) if valid_backup(state, &u.primary, Some(b)) => {
                loads.add(&u.primary, b, u.backup_mode, u.weight);
                out.backups.insert(u.name.clone(), b.clone());
            }
            _ => {
                loads.add_primary(&u.primary, u.weight);
                todo.push(u);
            }
        }
    }
    todo.sort_by(|a, b| b.weight.cmp(&a.weight).then_with(|| a.name.cmp(&b.name)));
    for u in todo {
        let w = u64::from(u.weight);
        let (extra_base, extra_moved) = match u.backup_mode {
            BackupMode::Preheated => (w, 0),
            BackupMode::Cold => (0, w),
        };
        let mut best: Option<(Choice, &HostId)> = None;
        let domain = state.hosts.get(&u.primary).and_then(|h| h.domain.as_ref());
        for h in state.hosts.values() {
            if !h.is_usable() || h.name == u.primary || h.capacity == 0 {
                continue;
            }
            let cap = u64::from(h.capacity);
            let worst = loads.worst(&h.name, extra_base, (&u.primary, extra_moved));
            if worst > cap {
                continue;
            }
            let spread = loads.moved(&u.primary, &h.name) + extra_moved;
            let base = loads.base(&h.name) + extra_base;
            // Shares of capacity, scaled so that integer comparison orders
            // them; among equals, the host that keeps the fewest backups
            // (else every tie lands on the first host by name: its agent
            // probes every unit it backs up, issue 29).
            let hosted = loads.hosted.get(&h.name).copied().unwrap_or(0);
            // A host of the primary's failure domain only when no other
            // fits: a rack that fails takes both otherwise.
            let same_domain = domain.is_some() && h.domain.as_ref() == domain;
            let key = (
                same_domain,
                worst * 1_000_000 / cap,
                spread,
                base * 1_000_000 / cap,
                hosted * 1_000_000 / cap,
            );
            let better = match &best {
                None => true,
                Some((k, _)) => key < *k,
            };
            if better {
                best = Some((key, &h.name));
            }
        }
        let Some((_, host)) = best else {
            errors.push(PlacementError::NoHostFits {
                unit: u.name.clone(),
                primary: u.primary.clone(),
                weight: u.weight,
            });
            continue;
        };
        loads.add_backup(&u.primary, host, u.backup_mode, u.weight);
        out.backups.insert(u.name.clone(), host.clone());
        out.changed.push(u.name.clone());
    }
    out.changed.sort();
    (out, errors)
}

/// What each live host carries after `failed` fails, by host: its base load
/// plus the cold backups that land on it.
pub fn after_failure(state: &DesiredState, failed: &HostId) -> BTreeMap<HostId, u32> {
    let loads = state_loads(state);
    live_hosts(state)
        .into_iter()
        .filter(|h| h != failed)
        .map(|h| {
            let l = loads.base(&h) + loads.moved(failed, &h);
            (h, saturate(l))
        })
        .collect()
}

/// Per live host: its capacity, its load now, and its load after each
/// other live host's failure (for `holdfast ctl units`).
pub fn failure_loads(state: &DesiredState) -> Vec<HostLoad> {
    let loads = state_loads(state);
    let hosts = live_hosts(state);
    hosts
        .iter()
        .filter_map(|h| state.hosts.get(h))
        .map(|host| HostLoad {
            host: host.name.clone(),
            capacity: host.capacity,
            load: saturate(loads.base(&host.name)),
            after: hosts
                .iter()
                .filter(|f| **f != host.name)
                .map(|f| {
                    let l = loads.base(&host.name) + loads.moved(f, &host.name);
                    (f.clone(), saturate(l))
                })
                .collect(),
        })
        .collect()
}

fn state_loads(state: &DesiredState) -> Loads {
    let mut loads = Loads::default();
    for u in state.units.values() {
        if state.is_failed(&u.primary) {
            continue;
        }
        match u.backup.as_ref() {
            Some(b) if b != &u.primary && !state.is_failed(b) => {
                loads.add(&u.primary, b, u.backup_mode, u.weight)
            }
            _ => loads.add_primary(&u.primary, u.weight),
        }
    }
    loads
}

fn saturate(v: u64) -> u32 {
    u32::try_from(v).unwrap_or(u32::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{FailureKind, Host, HostState, Unit};

    #[test]
    fn a_backup_goes_outside_its_primarys_failure_domain_when_one_fits() {
        let hosts = (0..6)
            .map(|i| Host::healthy(format!("h{i}"), 8).in_domain(if i < 3 { "r0" } else { "r1" }));
        let units =
            (0..12).map(|i| Unit::new(format!("u{i:02}"), &h(&format!("h{}", i % 6)), None));
        let s = DesiredState::new(hosts, units);
        let p = place(&s).unwrap();
        for (unit, b) in &p.backups {
            let primary = &s.units[unit].primary;
            let dom = |x: &HostId| s.hosts[x].domain.clone();
            assert_ne!(dom(primary), dom(b), "{unit} on {primary} backed up on {b}");
        }
        // Negative control: without domains, some land in the same rack.
        let plain = DesiredState::new(
            (0..6).map(|i| Host::healthy(format!("h{i}"), 8)),
            (0..12).map(|i| Unit::new(format!("u{i:02}"), &h(&format!("h{}", i % 6)), None)),
        );
        let p = place(&plain).unwrap();
        let rack = |x: &HostId| x.0[1..].parse::<u32>().unwrap() / 3;
        assert!(p
            .backups
            .iter()
            .any(|(u, b)| rack(&plain.units[u].primary) == rack(b)));
    }

    #[test]
    fn a_hosts_worst_case_by_lookup_is_the_worst_over_every_failure() {
        // A fleet of 12 hosts with 60 cold backups spread unevenly, checked
        // against the definition: the largest load over every failure.
        let hosts: Vec<HostId> = (0..12).map(|i| h(&format!("h{i:02}"))).collect();
        let mut loads = Loads::default();
        let mut x = 7u64;
        for _ in 0..60 {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let p = &hosts[(x >> 33) as usize % 12];
            let b = &hosts[((x >> 40) as usize % 11 + 1 + (x >> 33) as usize % 12) % 12];
            loads.add(p, b, BackupMode::Cold, 1 + (x >> 50) as u32 % 3);
        }
        for hh in &hosts {
            for p in &hosts {
                for extra in [0, 2] {
                    let brute = hosts
                        .iter()
                        .filter(|f| *f != hh)
                        .map(|f| {
                            let add = if f == p { extra } else { 0 };
                            loads.base(hh) + 1 + loads.moved(f, hh) + add
                        })
                        .fold(loads.base(hh) + 1, u64::max);
                    if p != hh {
                        assert_eq!(loads.worst(hh, 1, (p, extra)), brute, "{hh} {p} {extra}");
                    }
                }
            }
        }
    }

    fn h(n: &str) -> HostId {
        HostId::new(n)
    }

    /// 4 hosts of capacities 9, 10, 11, 12 and 16 units, 4 primaries each,
    /// no backups yet.
    fn cluster() -> DesiredState {
        let caps = [("a", 9), ("b", 10), ("c", 11), ("d", 12)];
        let hosts = caps.iter().map(|(n, c)| Host::healthy(*n, *c));
        let units = (0..16).map(|i| Unit::new(format!("u{i:02}"), &h(caps[i % 4].0), None));
        DesiredState::new(hosts, units)
    }

    fn assert_survives_any_failure(s: &DesiredState) {
        for l in failure_loads(s) {
            assert!(!l.overloaded(), "{l:?}");
        }
        for f in s.hosts.keys() {
            for (host, load) in after_failure(s, f) {
                assert!(
                    load <= s.hosts[&host].capacity,
                    "{f} fails: {host} carries {load}"
                );
            }
        }
    }

    fn placed(s: &DesiredState) -> DesiredState {
        let mut s = s.clone();
        place(&s).expect("place").apply(&mut s);
        s
    }

    #[test]
    fn sixteen_units_on_four_hosts_survive_any_single_failure() {
        let s = placed(&cluster());
        for u in s.units.values() {
            let b = u.backup.as_ref().expect("backup");
            assert_ne!(b, &u.primary, "{}", u.name);
        }
        assert_survives_any_failure(&s);
        // The four units of each host spread over the three others.
        for f in s.hosts.keys() {
            let moved = after_failure(&s, f);
            let most = moved.values().max().copied().unwrap_or(0);
            let least = moved.values().min().copied().unwrap_or(0);
            assert!(most - least <= 3, "{f}: {moved:?}");
        }
    }

    #[test]
    fn preheated_standbys_count_all_the_time() {
        let mut s = cluster();
        for u in s.units.values_mut() {
            u.backup_mode = BackupMode::Preheated;
        }
        let s = placed(&s);
        assert_survives_any_failure(&s);
        let loads = failure_loads(&s);
        let total: u32 = loads.iter().map(|l| l.load).sum();
        assert_eq!(total, 32, "16 primaries and 16 standbys");
    }

    #[test]
    fn refuses_naming_the_unit_when_no_host_fits() {
        let a = h("a");
        let s = DesiredState::new(
            [Host::healthy("a", 2), Host::healthy("b", 1)],
            [Unit::new("u1", &a, None), Unit::new("u2", &a, None)],
        );
        // b carries u1 when a fails; u2 no longer fits (negative control:
        // with capacity 2 on b both fit).
        assert_eq!(
            place(&s),
            Err(PlacementError::NoHostFits {
                unit: UnitId::new("u2"),
                primary: a.clone(),
                weight: 1
            })
        );
        let mut roomy = s.clone();
        if let Some(b) = roomy.hosts.get_mut(&h("b")) {
            b.capacity = 2;
        }
        assert_eq!(place(&roomy).map(|p| p.changed.len()), Ok(2));
    }

    #[test]
    fn never_chooses_failed_or_draining_hosts() {
        let mut s = cluster();
        if let Some(x) = s.hosts.get_mut(&h("c")) {
            x.state = HostState::Failed {
                kind: FailureKind::Host,
                since: 0,
            };
        }
        if let Some(x) = s.hosts.get_mut(&h("d")) {
            x.state = HostState::Draining;
        }
        s.units
            .retain(|_, u| u.primary == h("a") || u.primary == h("b"));
        for u in s.units.values_mut() {
            u.weight = 1;
        }
        let p = place(&s).expect("place");
        for (unit, b) in &p.backups {
            assert!(b == &h("a") || b == &h("b"), "{unit} on {b}");
        }
    }

    #[test]
    fn min_churn_adding_a_host_moves_nothing() {
        let s = placed(&cluster());
        let mut bigger = s.clone();
        bigger.hosts.insert(h("e"), Host::healthy("e", 20));
        let p = place(&bigger).expect("place");
        assert!(p.changed.is_empty(), "{:?}", p.changed);
        for u in s.units.values() {
            assert_eq!(p.backups.get(&u.name), u.backup.as_ref());
        }
        // A new unit goes to the roomy new host.
        bigger
            .units
            .insert(UnitId::new("new"), Unit::new("new", &h("a"), None));
        let p = place(&bigger).expect("place");
        assert_eq!(p.changed, vec![UnitId::new("new")]);
        assert_eq!(p.backups[&UnitId::new("new")], h("e"));
    }

    #[test]
    fn min_churn_a_failure_replaces_only_the_backups_it_touched() {
        let s = placed(&cluster());
        let mut after = s.clone();
        let dead = h("d");
        if let Some(x) = after.hosts.get_mut(&dead) {
            x.state = HostState::Failed {
                kind: FailureKind::Host,
                since: 0,
            };
        }
        // Units of d take over on their backups (what the planner does).
        for u in after.units.values_mut() {
            if u.primary == dead {
                u.primary = u.backup.take().expect("backup");
            }
        }
        let p = place(&after).expect("place");
        for u in s.units.values() {
            let touched = u.primary == dead || u.backup.as_ref() == Some(&dead);
            assert_eq!(p.changed.contains(&u.name), touched, "{}", u.name);
            if !touched {
                assert_eq!(p.backups.get(&u.name), u.backup.as_ref(), "{}", u.name);
            }
        }
        p.apply(&mut after);
        assert_survives_any_failure(&after);
    }

    #[test]
    fn failed_primary_keeps_its_backup_and_no_load() {
        let mut s = placed(&cluster());
        let a = h("a");
        if let Some(x) = s.hosts.get_mut(&a) {
            x.state = HostState::Failed {
                kind: FailureKind::HostNetwork,
                since: 0,
            };
        }
        let p = place(&s).expect("place");
        for u in s.units.values().filter(|u| u.primary == a) {
            assert!(!p.backups.contains_key(&u.name));
        }
        assert!(failure_loads(&s).iter().all(|l| l.host != a));
    }
}
