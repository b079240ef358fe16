//! Table-driven tests of the planner.

use super::*;
use crate::model::{Host, Unit};
use crate::placement::{failure_loads, place};

fn h(n: &str) -> HostId {
    HostId::new(n)
}

fn u(n: &str) -> UnitId {
    UnitId::new(n)
}

fn ctx(app_policy: AppPolicy) -> PlanContext {
    PlanContext {
        now: 5_000,
        revision: 77,
        app_policy,
    }
}

/// 4 hosts (capacities 9, 10, 11, 12), 16 units, 4 primaries each, backups
/// placed.
fn cluster() -> DesiredState {
    let caps = [("a", 9), ("b", 10), ("c", 11), ("d", 12)];
    let hosts = caps.iter().map(|(n, c)| Host::healthy(*n, *c));
    let units = (0..16).map(|i| Unit::new(format!("u{i:02}"), &h(caps[i % 4].0), None));
    let mut s = DesiredState::new(hosts, units);
    place(&s).expect("place").apply(&mut s);
    s
}

fn verdict(f: Finding) -> Input {
    Input::Verdict(f)
}

fn kinds(p: &Plan) -> Vec<&'static str> {
    p.steps
        .iter()
        .map(|s| match s.step {
            Step::MarkHostFailed { .. } => "mark-failed",
            Step::DrainHost { .. } => "drain",
            Step::ResetHost { .. } => "reset",
            Step::Fence { .. } => "fence",
            Step::StartTakeover { .. } => "takeover",
            Step::RestartInPlace { .. } => "restart",
            Step::MoveAddress { .. } => "move-address",
            Step::PlaceBackup { .. } => "place-backup",
        })
        .collect()
}

/// Every unit's fences come before its takeover or restart.
fn assert_fence_first(p: &Plan) {
    for unit in p.state.units.keys() {
        let of = |s: &Step| match s {
            Step::Fence { unit: x, .. }
            | Step::StartTakeover { unit: x, .. }
            | Step::RestartInPlace { unit: x, .. }
            | Step::MoveAddress { unit: x, .. }
            | Step::PlaceBackup { unit: x, .. } => x == unit,
            _ => false,
        };
        let mine: Vec<&Step> = p.steps.iter().map(|s| &s.step).filter(|s| of(s)).collect();
        let start = mine
            .iter()
            .position(|s| matches!(s, Step::StartTakeover { .. } | Step::RestartInPlace { .. }));
        if let Some(start) = start {
            assert!(matches!(mine[0], Step::Fence { .. }), "{unit}: {mine:?}");
            assert!(mine[..start]
                .iter()
                .all(|s| matches!(s, Step::Fence { .. })));
        }
    }
}

#[test]
fn unit_level_failures() {
    struct Row {
        name: &'static str,
        finding: Finding,
        policy: AppPolicy,
        steps: Vec<&'static str>,
        in_place: bool,
    }
    let s = cluster();
    let unit = u("u01");
    let host = s.units[&unit].primary.clone();
    let rows = [
        Row {
            name: "application, restart in place",
            finding: Finding::Application {
                unit: unit.clone(),
                host: host.clone(),
            },
            policy: AppPolicy::RestartInPlace,
            steps: vec!["fence", "restart"],
            in_place: true,
        },
        Row {
            name: "application, migrate",
            finding: Finding::Application {
                unit: unit.clone(),
                host: host.clone(),
            },
            policy: AppPolicy::Migrate,
            steps: vec!["fence", "takeover", "move-address", "place-backup"],
            in_place: false,
        },
        Row {
            name: "hung, restart in place (the application policy)",
            finding: Finding::Hung {
                unit: unit.clone(),
                host: host.clone(),
            },
            policy: AppPolicy::RestartInPlace,
            steps: vec!["fence", "restart"],
            in_place: true,
        },
        Row {
            name: "hung, migrate",
            finding: Finding::Hung {
                unit: unit.clone(),
                host: host.clone(),
            },
            policy: AppPolicy::Migrate,
            steps: vec!["fence", "takeover", "move-address", "place-backup"],
            in_place: false,
        },
        Row {
            name: "container",
            finding: Finding::Container {
                unit: unit.clone(),
                host: host.clone(),
            },
            policy: AppPolicy::RestartInPlace,
            steps: vec!["fence", "takeover", "move-address", "place-backup"],
            in_place: false,
        },
        Row {
            name: "container network",
            finding: Finding::ContainerNetwork {
                unit: unit.clone(),
                host: host.clone(),
            },
            policy: AppPolicy::RestartInPlace,
            steps: vec!["fence", "takeover", "move-address", "place-backup"],
            in_place: false,
        },
    ];
    for row in rows {
        let p = plan(&s, &verdict(row.finding), &ctx(row.policy)).expect(row.name);
        assert_eq!(kinds(&p), row.steps, "{}", row.name);
        assert_fence_first(&p);
        let before = &s.units[&unit];
        let after = &p.state.units[&unit];
        assert_eq!(after.epoch, before.epoch + 1, "{}", row.name);
        let m = &p.state.migrations[&unit];
        assert_eq!((m.from_epoch, m.to_epoch), (before.epoch, after.epoch));
        assert_eq!(m.started_at_revision, 77);
        if row.in_place {
            assert_eq!(after.primary, before.primary, "{}", row.name);
            assert_eq!(after.backup, before.backup, "{}", row.name);
        } else {
            assert_eq!(Some(&after.primary), before.backup.as_ref(), "{}", row.name);
            let b = after.backup.as_ref().expect("new backup");
            assert_ne!(b, &after.primary, "{}", row.name);
        }
        // Every other unit is untouched.
        for (name, x) in &s.units {
            if name != &unit {
                assert_eq!(&p.state.units[name], x, "{}: {name}", row.name);
            }
        }
    }
}

#[test]
fn notes_and_stale_verdicts_plan_nothing() {
    let s = cluster();
    let elsewhere = if s.units[&u("u00")].primary == h("a") {
        h("b")
    } else {
        h("a")
    };
    let inputs = [
        Finding::Suspect {
            host: h("a"),
            kind: FailureKind::Host,
            confirm_at: 1,
        },
        Finding::Recovered { host: h("a") },
        Finding::ControllerCutOff { host: h("a") },
        Finding::LostProbe {
            from: crate::localize::Vantage::AgentServer,
            to: crate::localize::Target::Host(h("a")),
            missed: 1,
        },
        // A verdict about a unit on a host it no longer runs on.
        Finding::Container {
            unit: u("u00"),
            host: elsewhere,
        },
    ];
    for f in inputs {
        let p = plan(&s, &verdict(f.clone()), &ctx(AppPolicy::Migrate)).expect("plan");
        assert!(p.steps.is_empty(), "{f:?}: {:?}", p.steps);
        assert_eq!(p.state, s, "{f:?}");
    }
}

#[test]
fn host_failure_moves_its_units_and_fails_the_host_until_reset() {
    for kind in [FailureKind::Host, FailureKind::HostNetwork] {
        let s = cluster();
        let dead = h("b");
        let f = match kind {
            FailureKind::Host => Finding::Host { host: dead.clone() },
            _ => Finding::HostNetwork { host: dead.clone() },
        };
        let p = plan(&s, &verdict(f.clone()), &ctx(AppPolicy::Migrate)).expect("plan");
        assert_eq!(
            p.steps[0].step,
            Step::MarkHostFailed {
                host: dead.clone(),
                kind
            }
        );
        assert_fence_first(&p);
        assert!(p.unplaced.is_empty());
        assert!(p.state.is_failed(&dead));
        for (name, before) in &s.units {
            let after = &p.state.units[name];
            assert_ne!(after.primary, dead, "{name}");
            assert_ne!(after.backup.as_ref(), Some(&dead), "{name}");
            if before.primary == dead {
                assert_eq!(Some(&after.primary), before.backup.as_ref(), "{name}");
                assert_eq!(after.epoch, before.epoch + 1);
            } else if before.backup.as_ref() != Some(&dead) {
                // Min-churn: an unrelated unit keeps its backup.
                assert_eq!(after, before, "{name}");
            }
        }
        // Nothing but fences goes to the dead host.
        for st in &p.steps {
            match &st.step {
                Step::StartTakeover { host, .. } | Step::PlaceBackup { host, .. } => {
                    assert_ne!(host, &dead)
                }
                Step::MoveAddress { to, .. } => assert_ne!(to, &dead),
                _ => {}
            }
        }
        for l in failure_loads(&p.state) {
            assert!(!l.overloaded(), "{l:?}");
        }
        // The same verdict again changes nothing.
        let again = plan(&p.state, &verdict(f), &ctx(AppPolicy::Migrate)).expect("plan");
        assert!(again.steps.is_empty());
        assert_eq!(again.state, p.state);

        // Another failure later: the failed host is still never chosen.
        let mut state = p.state.clone();
        for m in resume(&state) {
            complete(&mut state, m.progress.as_ref().expect("progress")).expect("complete");
        }
        assert!(state.migrations.is_empty());
        let c = plan(
            &state,
            &verdict(Finding::Host { host: h("c") }),
            &ctx(AppPolicy::Migrate),
        )
        .expect("plan");
        for x in c.state.units.values() {
            assert_ne!(x.primary, dead);
            assert_ne!(x.backup.as_ref(), Some(&dead));
        }
        // After the reset it may be used again.
        let r = plan(
            &c.state,
            &Input::Command(Command::Reset(dead.clone())),
            &ctx(AppPolicy::Migrate),
        )
        .expect("reset");
        assert_eq!(r.steps[0].step, Step::ResetHost { host: dead.clone() });
        assert!(r.state.is_usable(&dead));
        let mut grown = r.state.clone();
        grown
            .units
            .insert(u("new"), Unit::new("new", &h("a"), None));
        let placed = place(&grown).expect("place");
        assert_eq!(placed.changed, vec![u("new")]);
        assert_eq!(
            placed.backups[&u("new")],
            dead,
            "the emptiest host after the reset"
        );
    }
}

#[test]
fn drain_switches_over_every_unit_on_the_host() {
    let s = cluster();
    let host = h("c");
    let p = plan(
        &s,
        &Input::Command(Command::Drain(host.clone())),
        &ctx(AppPolicy::Migrate),
    )
    .expect("drain");
    assert_eq!(p.steps[0].step, Step::DrainHost { host: host.clone() });
    assert_fence_first(&p);
    let on_host = s.units_on(&host);
    assert_eq!(on_host.len(), 4);
    for unit in &on_host {
        let m = &p.state.migrations[unit];
        assert_eq!(m.reason, MigrationReason::Drain);
        assert_eq!(m.from, host);
        assert_eq!(Some(&m.to), s.units[unit].backup.as_ref());
        let takeovers = p
            .steps
            .iter()
            .filter(|st| matches!(&st.step, Step::StartTakeover { unit: x, .. } if x == unit))
            .count();
        assert_eq!(takeovers, 1, "{unit}");
    }
    assert_eq!(p.state.migrations.len(), on_host.len());
    for x in p.state.units.values() {
        assert_ne!(x.primary, host);
        assert_ne!(x.backup.as_ref(), Some(&host));
    }
    // Draining a failed host is refused (negative control of the state check).
    let mut failed = s.clone();
    if let Some(x) = failed.hosts.get_mut(&host) {
        x.state = HostState::Failed {
            kind: FailureKind::Host,
            since: 0,
        };
    }
    assert_eq!(
        plan(
            &failed,
            &Input::Command(Command::Drain(host.clone())),
            &ctx(AppPolicy::Migrate)
        ),
        Err(PlanError::HostFailed(host))
    );
}

#[test]
fn switchover_swaps_primary_and_backup() {
    let s = cluster();
    let unit = u("u05");
    let before = s.units[&unit].clone();
    let p = plan(
        &s,
        &Input::Command(Command::Switchover(unit.clone())),
        &ctx(AppPolicy::Migrate),
    )
    .expect("switchover");
    let after = &p.state.units[&unit];
    assert_eq!(Some(&after.primary), before.backup.as_ref());
    assert_eq!(after.backup.as_ref(), Some(&before.primary));
    assert_eq!(
        plan(
            &p.state,
            &Input::Command(Command::Switchover(unit.clone())),
            &ctx(AppPolicy::Migrate)
        ),
        Err(PlanError::Migrating(unit))
    );
    // A unit with nowhere to go is refused, naming it.
    let lone = DesiredState::new([Host::healthy("a", 1)], [Unit::new("x", &h("a"), None)]);
    assert_eq!(
        plan(
            &lone,
            &Input::Command(Command::Switchover(u("x"))),
            &ctx(AppPolicy::Migrate)
        ),
        Err(PlanError::NoTarget { unit: u("x") })
    );
}

#[test]
fn a_new_leader_resumes_an_in_flight_migration_exactly_once() {
    let s = cluster();
    let unit = u("u02");
    let host = s.units[&unit].primary.clone();
    let p = plan(
        &s,
        &verdict(Finding::Container {
            unit: unit.clone(),
            host,
        }),
        &ctx(AppPolicy::Migrate),
    )
    .expect("plan");
    let all = resume(&p.state);
    assert_eq!(
        all, p.steps,
        "a plan's steps are its migrations' remaining steps"
    );
    // The old leader did two steps (the second one twice) and died.
    let mut state = p.state.clone();
    let first = all[0].progress.clone().expect("progress");
    let second = all[1].progress.clone().expect("progress");
    assert_eq!(complete(&mut state, &first), Ok(true));
    assert_eq!(complete(&mut state, &second), Ok(true));
    let before = state.clone();
    assert_eq!(complete(&mut state, &second), Ok(false));
    assert_eq!(complete(&mut state, &first), Ok(false));
    assert_eq!(state, before, "completing a done step changes nothing");
    // Skipping a step is refused.
    let fourth = all[3].progress.clone().expect("progress");
    assert_eq!(
        complete(&mut state, &fourth),
        Err(PlanError::OutOfOrder {
            unit: unit.clone(),
            expected: 2,
            got: 3
        })
    );
    // The new leader reads the state back from etcd.
    let json = serde_json::to_string(&state).expect("encode");
    let mut read: DesiredState = serde_json::from_str(&json).expect("decode");
    let rest = resume(&read);
    assert_eq!(rest, all[2..].to_vec(), "the remaining steps, each once");
    for st in &rest {
        assert_eq!(
            complete(&mut read, st.progress.as_ref().expect("p")),
            Ok(true)
        );
    }
    assert!(read.migrations.is_empty());
    assert!(resume(&read).is_empty(), "nothing is done twice");
    for st in &rest {
        assert_eq!(
            complete(&mut read, st.progress.as_ref().expect("p")),
            Ok(false)
        );
    }
}

#[test]
fn a_host_failure_supersedes_a_migration_onto_it() {
    let s = cluster();
    let unit = u("u03");
    let old = s.units[&unit].clone();
    let p = plan(
        &s,
        &verdict(Finding::Container {
            unit: unit.clone(),
            host: old.primary.clone(),
        }),
        &ctx(AppPolicy::Migrate),
    )
    .expect("plan");
    let target = p.state.units[&unit].primary.clone();
    // The new host fails before the first fence was done.
    let q = plan(
        &p.state,
        &verdict(Finding::Host {
            host: target.clone(),
        }),
        &ctx(AppPolicy::Migrate),
    )
    .expect("plan");
    let m = &q.state.migrations[&unit];
    assert_eq!(
        (m.from.clone(), m.from_epoch, m.to_epoch),
        (target.clone(), old.epoch + 1, old.epoch + 2)
    );
    assert_eq!(
        m.also_fence,
        vec![FenceTarget {
            host: old.primary.clone(),
            epoch: old.epoch
        }]
    );
    let fences: Vec<&Step> = q
        .steps
        .iter()
        .map(|s| &s.step)
        .filter(|s| matches!(s, Step::Fence { unit: x, .. } if *x == unit))
        .collect();
    assert_eq!(
        fences.len(),
        2,
        "both earlier primaries are fenced: {fences:?}"
    );
    assert_fence_first(&q);
    // A step of the superseded migration no longer counts.
    let mut state = q.state.clone();
    let stale = p.steps[0].progress.clone().expect("progress");
    assert_eq!(complete(&mut state, &stale), Ok(false));
    assert_eq!(state, q.state);
}
