//! The controller's placements through `holdfast-control`'s TRIPOD
//! placement: the desired state read from etcd ([`read_state`]) as the pure
//! model, and the backup a unit gets after a migration ([`backup_after`]).
//!
//! A host is any host that has an agent (`agents/<host>`), is named by a
//! placement, or is marked failed. Its failure domain is the one its
//! agent's record names (`holdfast-agent --failure-domain`). Its capacity is [`DEFAULT_CAPACITY`]
//! units unless `hosts/capacity/<host>` holds a number.

use std::collections::{BTreeMap, BTreeSet};

use holdfast_control::{place, DesiredState, FailureKind, Host, HostId, HostState, Unit, UnitId};

use crate::store::{Store, StoreError};
use crate::{AgentRecord, UnitRecord};

/// Units a host may carry (primaries plus the backups that land on it after
/// any single failure) when `hosts/capacity/<host>` does not say.
pub const DEFAULT_CAPACITY: u32 = 16;

/// The desired state in etcd as `holdfast-control`'s model.
pub async fn read_state(store: &mut Store) -> Result<DesiredState, StoreError> {
    Ok(read_state_and_units(store).await?.0)
}

/// [`read_state`] with the unit records it read (one read of them for a
/// caller that needs both).
pub async fn read_state_and_units(
    store: &mut Store,
) -> Result<(DesiredState, Vec<UnitRecord>), StoreError> {
    let keys = store.keys().clone();
    let p = keys.prefix().to_string();
    // Each agent's record: its host, and the failure domain it names
    // (`holdfast-agent --failure-domain`).
    let records: BTreeMap<String, AgentRecord> = store
        .scan::<AgentRecord>(&format!("{p}agents/"))
        .await?
        .into_iter()
        .collect();
    let agents: BTreeSet<String> = records.keys().cloned().collect();
    let failed: BTreeSet<String> = store
        .list(&format!("{p}hosts/failed/"))
        .await?
        .into_iter()
        .collect();
    let units = store.units().await?;
    let mut names: BTreeSet<String> = agents.union(&failed).cloned().collect();
    for u in &units {
        names.insert(u.primary.clone());
        names.extend(u.backup.clone());
    }
    // Every host's capacity in one read, not one per host.
    let capacities: BTreeMap<String, u32> = store
        .scan::<u32>(&format!("{p}hosts/capacity/"))
        .await?
        .into_iter()
        .collect();
    let mut hosts = Vec::new();
    for h in names {
        let capacity = capacities.get(&h).copied().unwrap_or(DEFAULT_CAPACITY);
        let state = if failed.contains(&h) {
            HostState::Failed {
                kind: FailureKind::Host,
                since: 0,
            }
        } else {
            HostState::Healthy
        };
        let domain = records.get(&h).and_then(|r| r.domain.clone());
        hosts.push(Host {
            name: HostId::new(h),
            capacity,
            state,
            domain,
        });
    }
    let model = units.iter().map(|u| {
        Unit::new(
            u.unit.clone(),
            &HostId::new(u.primary.clone()),
            u.backup.clone().map(HostId::new).as_ref(),
        )
    });
    let state = DesiredState::new(hosts, model);
    Ok((state, units))
}

/// The backup of `unit` once it runs on `primary`: the host it left when
/// that host is still usable (the two swap roles, no churn), else TRIPOD's
/// min-churn choice among the usable hosts (`None` when none fits).
pub fn backup_after(state: &DesiredState, unit: &str, primary: &str, left: &str) -> Option<String> {
    let left_id = HostId::new(left);
    if state.is_usable(&left_id) && left != primary {
        return Some(left.to_string());
    }
    let mut s = state.clone();
    let id = UnitId::new(unit);
    if let Some(u) = s.units.get_mut(&id) {
        u.primary = HostId::new(primary);
        u.backup = None;
    }
    let placed = place(&s).ok()?;
    placed.backups.get(&id).map(|h| h.0.clone())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state(failed: &[&str]) -> DesiredState {
        let hosts = ["a", "b", "c"].iter().map(|h| {
            let mut host = Host::healthy(*h, 4);
            if failed.contains(h) {
                host.state = HostState::Failed {
                    kind: FailureKind::Host,
                    since: 0,
                };
            }
            host
        });
        let units = [
            Unit::new("u1", &HostId::new("b"), Some(&HostId::new("a"))),
            Unit::new("u2", &HostId::new("c"), Some(&HostId::new("b"))),
        ];
        DesiredState::new(hosts, units)
    }

    #[test]
    fn a_usable_host_left_becomes_the_backup_a_failed_one_never() {
        // u1 moved a -> b on a process failure: a is still usable.
        assert_eq!(
            backup_after(&state(&[]), "u1", "b", "a").as_deref(),
            Some("a")
        );
        // u1 moved a -> b because a failed: TRIPOD picks c (b is its
        // primary, a is failed).
        assert_eq!(
            backup_after(&state(&["a"]), "u1", "b", "a").as_deref(),
            Some("c")
        );
        // No usable host but the primary: no backup.
        assert_eq!(backup_after(&state(&["a", "c"]), "u1", "b", "a"), None);
    }
}
