//! Placement churn of a failure (issue 29): how many units change primary
//! or backup when hosts fail, with TRIPOD's min-churn placement (what the
//! controller does: a failed host's units move to their backups, and only
//! the units that lost their primary or their backup get a new backup)
//! against the naive choice (every backup placed anew after the failure).
//!
//! Pure: computed from the fleet's placement with `holdfast_control`'s
//! model, the same placement code the controller runs.

use std::collections::BTreeMap;

use holdfast_control::{place, DesiredState, FailureKind, Host, HostId, HostState, Unit, UnitId};
use serde::{Deserialize, Serialize};

use crate::fleet::{rack_name, Fleet, SimUnit, CAPACITY};

/// Units moved by one failure, both ways.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Churn {
    /// Units whose primary was on a failed host (they must move).
    pub must_move: usize,
    /// Units whose primary or backup changed, TRIPOD (min-churn).
    pub tripod: usize,
    /// The same, every backup placed anew.
    pub naive: usize,
}

fn state(fleet: &Fleet, units: &[SimUnit], failed: &[String]) -> DesiredState {
    DesiredState::new(
        fleet.hosts.iter().enumerate().map(|(i, h)| {
            let mut host = Host::healthy(h.clone(), CAPACITY).in_domain(rack_name(&fleet.spec, i));
            if failed.contains(h) {
                host.state = HostState::Failed {
                    kind: FailureKind::Host,
                    since: 0,
                };
            }
            host
        }),
        units.iter().map(|u| {
            Unit::new(
                u.name.clone(),
                &HostId::new(u.primary.clone()),
                u.backup.clone().map(HostId::new).as_ref(),
            )
        }),
    )
}

/// After the takeovers: each failed host's unit runs on its backup and
/// has none; a unit whose backup failed has none either.
fn taken_over(units: &[SimUnit], failed: &[String]) -> Vec<SimUnit> {
    units
        .iter()
        .map(|u| {
            let mut u = u.clone();
            if failed.contains(&u.primary) {
                if let Some(b) = u.backup.take() {
                    u.primary = b;
                }
            } else if u.backup.as_ref().is_some_and(|b| failed.contains(b)) {
                u.backup = None;
            }
            u
        })
        .collect()
}

fn placed(fleet: &Fleet, units: &[SimUnit], failed: &[String]) -> BTreeMap<String, SimUnit> {
    let s = state(fleet, units, failed);
    let backups = place(&s).map(|p| p.backups).unwrap_or_default();
    units
        .iter()
        .map(|u| {
            let mut u = u.clone();
            u.backup = backups
                .get(&UnitId::new(u.name.clone()))
                .map(|h| h.0.clone());
            (u.name.clone(), u)
        })
        .collect()
}

fn changed(before: &[SimUnit], after: &BTreeMap<String, SimUnit>) -> usize {
    before
        .iter()
        .filter(|u| {
            after
                .get(&u.name)
                .is_none_or(|a| a.primary != u.primary || a.backup != u.backup)
        })
        .count()
}

/// The churn of `failed` failing together, from the placement `units`.
pub fn churn(fleet: &Fleet, units: &[SimUnit], failed: &[String]) -> Churn {
    let moved = taken_over(units, failed);
    let tripod = placed(fleet, &moved, failed);
    let cleared: Vec<SimUnit> = moved
        .iter()
        .map(|u| SimUnit {
            backup: None,
            ..u.clone()
        })
        .collect();
    let naive = placed(fleet, &cleared, failed);
    Churn {
        must_move: units.iter().filter(|u| failed.contains(&u.primary)).count(),
        tripod: changed(units, &tripod),
        naive: changed(units, &naive),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fleet::{FleetSpec, ProbeMode};

    #[test]
    fn tripod_moves_only_what_the_failure_touched_and_naive_more() {
        let f = Fleet::new(FleetSpec {
            hosts: 40,
            units: 400,
            rack: 10,
            probes: ProbeMode::Ring,
            fanout: 3,
        })
        .unwrap();
        let one = churn(&f, &f.units, &["h0005".to_string()]);
        assert_eq!(one.must_move, 10);
        let touched = f
            .units
            .iter()
            .filter(|u| u.primary == "h0005" || u.backup.as_deref() == Some("h0005"))
            .count();
        assert_eq!(one.tripod, touched, "{one:?}");
        assert!(one.naive > one.tripod, "{one:?}");
        let rack: Vec<String> = f.rack(1);
        let r = churn(&f, &f.units, &rack);
        assert_eq!(r.must_move, 100);
        assert!(r.naive > r.tripod, "{r:?}");
    }
}
