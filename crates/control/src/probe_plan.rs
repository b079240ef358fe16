//! Who probes whom (issue 29): a probe plan whose load per vantage point
//! does not grow with the fleet.
//!
//! Every host's agent and every segment's agent server are vantage points
//! (TENSOR §3.3.2). Probing every host and every unit from every agent
//! grows with hosts × (hosts + units); [`probe_plan`] bounds it:
//!
//! - **Hosts on a ring.** Each agent probes the next `fanout` hosts on a
//!   ring (default 3, at most hosts − 1). The ring takes one host of each
//!   segment in turn (the first of every segment, then the second, ...),
//!   so a host's probers sit in other segments whenever there are more
//!   than `fanout` segments: a whole segment (a rack) that fails together
//!   still has live vantage points on every one of its hosts.
//! - **Units by their backup host's agent.** The agent that would take a
//!   unit over probes it (it has the most at stake); a unit without a
//!   backup, or whose backup is its primary, is probed by the first agent
//!   on the ring after its primary.
//! - **Every host and unit of a segment by the segment's agent server**
//!   (its second vantage point): an agent server's load grows with its
//!   segment, not with the fleet. A unit whose segment has no agent
//!   server gets the next agent on the ring after its primary that is
//!   neither its primary nor its backup instead, when there is one (a lab
//!   of three hosts without an agent server keeps two vantage points on
//!   every unit).
//!
//! So each host has `fanout` agents plus its segment's agent server as
//! vantage points, and each unit two (its backup's agent and the agent
//! server): the localizer's two-vantage-point rule holds for every failure
//! kind (docs/control-plane.md). An agent probes `fanout` hosts plus the
//! units it backs up (about the units per host), whatever the fleet's size.
//!
//! The plan is a pure function of the hosts (with their segment), the
//! units (primary, backup) and the agent servers; a host that has failed
//! is simply left out by the caller.
//!
//! # Known issues
//! - A segment with no agent server gets no second vantage point on its
//!   hosts beyond the ring, and on its units only where a third host
//!   exists: the caller should run one agent server per segment.

use std::collections::{BTreeMap, BTreeSet};

use crate::localize::Target;
use crate::model::{HostId, UnitId};

/// Hosts each agent probes on the ring by default.
pub const DEFAULT_FANOUT: usize = 3;

/// What the plan is made from.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PlanInput {
    /// Hosts that run units (not failed), with their segment.
    pub hosts: Vec<(HostId, String)>,
    /// Units: (unit, primary, backup).
    pub units: Vec<(UnitId, HostId, Option<HostId>)>,
    /// Agent servers, with the segment each serves.
    pub agent_servers: Vec<(HostId, String)>,
    /// Hosts each agent probes on the ring.
    pub fanout: usize,
}

/// The targets of every vantage point (agents and agent servers), each
/// list sorted.
pub type ProbePlan = BTreeMap<HostId, Vec<Target>>;

/// The ring: one host of each segment in turn, segments and hosts in name
/// order.
pub fn ring(hosts: &[(HostId, String)]) -> Vec<HostId> {
    let mut by_segment: BTreeMap<&str, Vec<&HostId>> = BTreeMap::new();
    for (h, s) in hosts {
        by_segment.entry(s.as_str()).or_default().push(h);
    }
    for v in by_segment.values_mut() {
        v.sort();
        v.dedup();
    }
    let depth = by_segment.values().map(Vec::len).max().unwrap_or(0);
    let mut out = Vec::with_capacity(hosts.len());
    for i in 0..depth {
        for v in by_segment.values() {
            if let Some(h) = v.get(i) {
                out.push((*h).clone());
            }
        }
    }
    out
}

/// Every vantage point's targets (see the module docs).
pub fn probe_plan(input: &PlanInput) -> ProbePlan {
    let ring = ring(&input.hosts);
    let n = ring.len();
    let fanout = input.fanout.min(n.saturating_sub(1));
    let pos: BTreeMap<&HostId, usize> = ring.iter().enumerate().map(|(i, h)| (h, i)).collect();
    let mut plan: BTreeMap<HostId, BTreeSet<Target>> = BTreeMap::new();
    for (i, h) in ring.iter().enumerate() {
        let mine = plan.entry(h.clone()).or_default();
        for k in 1..=fanout {
            mine.insert(Target::Host(ring[(i + k) % n].clone()));
        }
    }
    let segment: BTreeMap<&HostId, &str> =
        input.hosts.iter().map(|(h, s)| (h, s.as_str())).collect();
    let mut servers: BTreeMap<&str, Vec<&HostId>> = BTreeMap::new();
    for (a, s) in &input.agent_servers {
        servers.entry(s.as_str()).or_default().push(a);
        plan.entry(a.clone()).or_default();
    }
    for (h, s) in &input.hosts {
        for a in servers.get(s.as_str()).into_iter().flatten() {
            if let Some(t) = plan.get_mut(*a) {
                t.insert(Target::Host(h.clone()));
            }
        }
    }
    for (u, primary, backup) in &input.units {
        let Some(&p) = pos.get(primary) else {
            continue;
        };
        let prober = match backup {
            Some(b) if b != primary && pos.contains_key(b) => Some(b.clone()),
            _ if n > 1 => Some(ring[(p + 1) % n].clone()),
            _ => None,
        };
        if let Some(b) = &prober {
            plan.entry(b.clone())
                .or_default()
                .insert(Target::Unit(u.clone()));
        }
        let seg = segment.get(primary).copied().unwrap_or_default();
        let served = servers.get(seg).is_some_and(|s| !s.is_empty());
        for a in servers.get(seg).into_iter().flatten() {
            if let Some(t) = plan.get_mut(*a) {
                t.insert(Target::Unit(u.clone()));
            }
        }
        if !served {
            let second = (1..n)
                .map(|k| &ring[(p + k) % n])
                .find(|h| *h != primary && Some(*h) != prober.as_ref());
            if let Some(h) = second {
                plan.entry(h.clone())
                    .or_default()
                    .insert(Target::Unit(u.clone()));
            }
        }
    }
    plan.into_iter()
        .map(|(h, t)| (h, t.into_iter().collect()))
        .collect()
}

/// Every vantage point's targets when each agent probes every other host
/// and every unit and each agent server probes everything: the plan before
/// issue 29, for comparison.
pub fn full_mesh(input: &PlanInput) -> ProbePlan {
    let all_hosts: Vec<&HostId> = input.hosts.iter().map(|(h, _)| h).collect();
    let mut plan = ProbePlan::new();
    for v in all_hosts
        .iter()
        .copied()
        .chain(input.agent_servers.iter().map(|(a, _)| a))
    {
        let mut t: Vec<Target> = all_hosts
            .iter()
            .filter(|h| **h != v)
            .map(|h| Target::Host((*h).clone()))
            .collect();
        t.extend(input.units.iter().map(|(u, _, _)| Target::Unit(u.clone())));
        t.sort();
        plan.insert(v.clone(), t);
    }
    plan
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `hosts` hosts in segments of `per_segment`, 10 units each with the
    /// backup on the next host, an agent server per segment.
    fn fleet(hosts: usize, per_segment: usize) -> PlanInput {
        let name = |i: usize| HostId::new(format!("h{i:04}"));
        let seg = |i: usize| format!("s{:03}", i / per_segment);
        let mut input = PlanInput {
            hosts: (0..hosts).map(|i| (name(i), seg(i))).collect(),
            fanout: DEFAULT_FANOUT,
            ..PlanInput::default()
        };
        for i in 0..hosts * 10 {
            let p = i % hosts;
            input.units.push((
                UnitId::new(format!("u{i:05}")),
                name(p),
                Some(name((p + 1) % hosts)),
            ));
        }
        for s in 0..hosts.div_ceil(per_segment) {
            input
                .agent_servers
                .push((HostId::new(format!("as{s:03}")), format!("s{s:03}")));
        }
        input
    }

    fn probers(plan: &ProbePlan, t: &Target) -> Vec<HostId> {
        plan.iter()
            .filter(|(_, ts)| ts.contains(t))
            .map(|(h, _)| h.clone())
            .collect()
    }

    #[test]
    fn an_agents_probes_do_not_grow_with_the_fleet() {
        for n in [10, 100, 1000] {
            let input = fleet(n, 50);
            let plan = probe_plan(&input);
            let max_agent = input
                .hosts
                .iter()
                .map(|(h, _)| plan[h].len())
                .max()
                .unwrap();
            assert_eq!(max_agent, 3 + 10, "{n} hosts: 3 hosts and 10 units");
            let max_server = input
                .agent_servers
                .iter()
                .map(|(a, _)| plan[a].len())
                .max()
                .unwrap();
            assert!(max_server <= 50 * 11, "{n} hosts: a segment's worth");
        }
        // Negative control: the full mesh grows with the fleet.
        let small = full_mesh(&fleet(10, 50));
        let large = full_mesh(&fleet(100, 50));
        let h = HostId::new("h0000");
        assert_eq!(small[&h].len(), 9 + 100);
        assert_eq!(large[&h].len(), 99 + 1000);
    }

    #[test]
    fn every_host_has_fanout_agents_and_its_agent_server_and_every_unit_two() {
        let input = fleet(200, 50);
        let plan = probe_plan(&input);
        for (h, s) in &input.hosts {
            let by = probers(&plan, &Target::Host(h.clone()));
            assert_eq!(by.len(), 4, "{h}: {by:?}");
            assert!(!by.contains(h), "{h} probes itself");
            let server = HostId::new(format!("as{}", &s[1..]));
            assert!(by.contains(&server), "{h}: {by:?}");
        }
        for (u, p, b) in &input.units {
            let by = probers(&plan, &Target::Unit(u.clone()));
            assert_eq!(by.len(), 2, "{u}: {by:?}");
            assert!(by.contains(b.as_ref().unwrap()));
            assert!(!by.contains(p), "{u}'s primary probes it");
        }
    }

    #[test]
    fn a_host_is_probed_from_other_segments_so_a_rack_failure_leaves_vantage_points() {
        let input = fleet(1000, 50);
        let plan = probe_plan(&input);
        let seg: BTreeMap<&HostId, &String> = input.hosts.iter().map(|(h, s)| (h, s)).collect();
        for (h, s) in &input.hosts {
            for a in probers(&plan, &Target::Host(h.clone())) {
                if let Some(sa) = seg.get(&a) {
                    assert_ne!(*sa, s, "{h} probed by {a} of its own segment");
                }
            }
        }
        // Negative control: a ring in name order probes within the rack.
        let mut by_name = input.clone();
        for (_, s) in &mut by_name.hosts {
            *s = "one".into();
        }
        let plan = probe_plan(&by_name);
        let h = HostId::new("h0001");
        assert!(plan[&HostId::new("h0000")].contains(&Target::Host(h)));
    }

    #[test]
    fn small_fleets_and_units_without_a_backup() {
        let one = PlanInput {
            hosts: vec![(HostId::new("a"), "s".into())],
            units: vec![(UnitId::new("u"), HostId::new("a"), None)],
            agent_servers: vec![],
            fanout: 3,
        };
        let plan = probe_plan(&one);
        assert!(plan[&HostId::new("a")].is_empty());
        let two = PlanInput {
            hosts: vec![
                (HostId::new("a"), "s".into()),
                (HostId::new("b"), "s".into()),
            ],
            units: vec![(UnitId::new("u"), HostId::new("a"), Some(HostId::new("a")))],
            agent_servers: vec![],
            fanout: 3,
        };
        let plan = probe_plan(&two);
        assert_eq!(
            plan[&HostId::new("b")],
            vec![
                Target::Host(HostId::new("a")),
                Target::Unit(UnitId::new("u"))
            ]
        );
        assert_eq!(
            plan[&HostId::new("a")],
            vec![Target::Host(HostId::new("b"))]
        );
    }

    #[test]
    fn without_an_agent_server_a_unit_gets_a_third_hosts_agent() {
        let h = |s: &str| HostId::new(s);
        let u = |s: &str| Target::Unit(UnitId::new(s));
        let mut three = PlanInput {
            hosts: ["a", "b", "c"]
                .iter()
                .map(|n| (h(n), String::new()))
                .collect(),
            units: vec![
                (UnitId::new("u1"), h("a"), Some(h("b"))),
                (UnitId::new("u2"), h("b"), Some(h("c"))),
                (UnitId::new("u3"), h("c"), Some(h("a"))),
            ],
            agent_servers: vec![],
            fanout: 3,
        };
        let plan = probe_plan(&three);
        for (unit, primary, backup) in &three.units {
            let by = probers(&plan, &Target::Unit(unit.clone()));
            assert_eq!(by.len(), 2, "{unit}: {by:?}");
            assert!(by.contains(backup.as_ref().unwrap()) && !by.contains(primary));
        }
        assert!(plan[&h("c")].contains(&u("u1")));
        // With an agent server in the segment, it is the second.
        three.agent_servers.push((h("s"), String::new()));
        let plan = probe_plan(&three);
        assert_eq!(
            probers(&plan, &u("u1")),
            vec![h("b"), h("s")],
            "the backup and the agent server"
        );
        // Two hosts: no third.
        let two = PlanInput {
            hosts: vec![(h("a"), String::new()), (h("b"), String::new())],
            units: vec![(UnitId::new("u1"), h("a"), Some(h("b")))],
            agent_servers: vec![],
            fanout: 3,
        };
        assert_eq!(probers(&probe_plan(&two), &u("u1")), vec![h("b")]);
    }
}
