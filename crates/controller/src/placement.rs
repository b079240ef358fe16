//! The controller's placements through `holdfast-control`'s TRIPOD
//! placement: the desired state read from etcd ([`read_state`]) as the pure
//! model, the backups units get after their migrations ([`backups_after`]),
//! and those of units whose backup host failed ([`backups_off_failed`]).
//!
//! A host is any host that has an agent (`agents/<host>`), is named by a
//! placement, or is marked failed. Its failure domain is the one its
//! agent's record names (`holdfast-agent --failure-domain`). Its capacity is [`DEFAULT_CAPACITY`]
//! units unless `hosts/capacity/<host>` holds a number.

use std::collections::{BTreeMap, BTreeSet};

use holdfast_control::{
    place_partial, DesiredState, FailureKind, Host, HostId, HostState, Unit, UnitId,
};

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
    read_all(store).await.map(|(s, u, _)| (s, u))
}

/// [`read_state_and_units`] with the agents' records it read, by host.
pub async fn read_all(
    store: &mut Store,
) -> Result<(DesiredState, Vec<UnitRecord>, BTreeMap<String, AgentRecord>), StoreError> {
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
        .list(&keys.failed_hosts())
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
    Ok((state, units, records))
}

/// Runs a placement computation on the blocking pool: TRIPOD over 10,000
/// units takes 0.3-0.9 s of CPU, which on the worker's current-thread
/// runtime stalled every other task of it (the sensor's ticks, the
/// status). A panic in it is the caller's; a runtime shutting down never
/// resumes the caller.
pub async fn off_runtime<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    match tokio::task::spawn_blocking(f).await {
        Ok(v) => v,
        Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
        Err(_) => std::future::pending().await,
    }
}

/// A unit whose migration ended: the host it runs on now, and the one it
/// left.
#[derive(Debug, Clone, Copy)]
pub struct Moved<'a> {
    pub unit: &'a str,
    pub primary: &'a str,
    pub left: &'a str,
}

/// The backups of units that moved, decided together: the host a unit
/// left when that host is still usable (the two swap roles, no churn),
/// else TRIPOD's min-churn choice among the usable hosts with every moved
/// unit on its new primary, each seeing the others' placements (`None`
/// when none fits). One placement for a rack's finishes, not one each.
pub fn backups_after(
    state: &DesiredState,
    moved: &[Moved<'_>],
) -> BTreeMap<String, Option<String>> {
    let mut s = state.clone();
    let mut out = BTreeMap::new();
    for m in moved {
        let left = HostId::new(m.left);
        let swap = (s.is_usable(&left) && m.left != m.primary).then(|| m.left.to_string());
        if let Some(u) = s.units.get_mut(&UnitId::new(m.unit)) {
            u.primary = HostId::new(m.primary);
            u.backup = swap.as_deref().map(HostId::new);
        }
        out.insert(m.unit.to_string(), swap);
    }
    let (placed, _) = place_partial(&s);
    for (unit, backup) in out.iter_mut() {
        if backup.is_none() {
            *backup = placed.backups.get(&UnitId::new(unit)).map(|h| h.0.clone());
        }
    }
    out
}

/// The units whose backup host has failed while their primary has not,
/// with the backup each gets now: TRIPOD's placement for them alone
/// (every other backup stays where it is: min-churn; `None` when no
/// usable host fits). Empty, and no placement run, when there are none.
pub fn backups_off_failed(state: &DesiredState) -> BTreeMap<String, Option<String>> {
    let orphaned: Vec<&UnitId> = state
        .units
        .iter()
        .filter(|(_, u)| {
            u.backup.as_ref().is_some_and(|b| state.is_failed(b)) && !state.is_failed(&u.primary)
        })
        .map(|(id, _)| id)
        .collect();
    if orphaned.is_empty() {
        return BTreeMap::new();
    }
    let (placed, _) = place_partial(state);
    orphaned
        .into_iter()
        .map(|u| (u.0.clone(), placed.backups.get(u).map(|h| h.0.clone())))
        .collect()
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

    /// Hosts a to d, 4 units each, `failed` failed, with `units`.
    fn four_hosts(failed: &str, units: [Unit; 3]) -> DesiredState {
        let hosts = ["a", "b", "c", "d"].iter().map(|h| {
            let mut host = Host::healthy(*h, 4);
            if *h == failed {
                host.state = HostState::Failed {
                    kind: FailureKind::Host,
                    since: 0,
                };
            }
            host
        });
        DesiredState::new(hosts, units)
    }

    fn after(state: &DesiredState, moved: &[(&str, &str, &str)]) -> Vec<Option<String>> {
        let moved: Vec<Moved<'_>> = moved
            .iter()
            .map(|(unit, primary, left)| Moved {
                unit,
                primary,
                left,
            })
            .collect();
        let out = backups_after(state, &moved);
        moved.iter().map(|m| out[m.unit].clone()).collect()
    }

    #[test]
    fn a_usable_host_left_becomes_the_backup_a_failed_one_never() {
        // u1 moved a -> b on a process failure: a is still usable.
        assert_eq!(after(&state(&[]), &[("u1", "b", "a")]), [Some("a".into())]);
        // u1 moved a -> b because a failed: TRIPOD picks c (b is its
        // primary, a is failed).
        assert_eq!(
            after(&state(&["a"]), &[("u1", "b", "a")]),
            [Some("c".into())]
        );
        // No usable host but the primary: no backup.
        assert_eq!(after(&state(&["a", "c"]), &[("u1", "b", "a")]), [None]);
    }

    #[test]
    fn a_failed_hosts_backups_go_elsewhere_and_nothing_else_moves() {
        // a failed: u1 (primary b) backed up on a gets a usable backup;
        // u2 (primary c, backup b) keeps its own.
        let st = four_hosts(
            "a",
            [
                Unit::new("u1", &HostId::new("b"), Some(&HostId::new("a"))),
                Unit::new("u2", &HostId::new("c"), Some(&HostId::new("b"))),
                Unit::new("u3", &HostId::new("a"), Some(&HostId::new("d"))),
            ],
        );
        let got = backups_off_failed(&st);
        assert_eq!(got.keys().collect::<Vec<_>>(), ["u1"], "{got:?}");
        let b = got["u1"].as_deref().expect("a backup");
        assert!(b != "a" && b != "b", "{got:?}");
        // No failed host: nothing placed.
        assert!(backups_off_failed(&state(&[])).is_empty());
    }

    #[test]
    fn units_moved_together_each_get_a_usable_backup() {
        // Host d fails with two units, moved to their backups a and b: each
        // gets a backup that is neither its new primary nor the failed
        // host, from one placement.
        let st = four_hosts(
            "d",
            [
                Unit::new("x1", &HostId::new("d"), Some(&HostId::new("a"))),
                Unit::new("x2", &HostId::new("d"), Some(&HostId::new("b"))),
                Unit::new("y", &HostId::new("c"), Some(&HostId::new("a"))),
            ],
        );
        let got = after(&st, &[("x1", "a", "d"), ("x2", "b", "d")]);
        for (b, primary) in got.iter().zip(["a", "b"]) {
            let b = b.as_deref().expect("a backup");
            assert!(b != primary && b != "d", "{got:?}");
        }
        // And one whose host left is usable keeps it (a swap), beside them.
        let got = after(&st, &[("x1", "a", "d"), ("y", "a", "c")]);
        assert_eq!(got[1].as_deref(), Some("c"));
    }
}
