//! The leader's probe plans (issue 29): who probes whom, pushed to the
//! agents on their `Attach` streams (`ProbeTargets`).
//!
//! [`Planner::update`] turns what the leader's sync read from etcd (the
//! hosts that are not failed, with their failure domain as the segment;
//! each unit's primary, backup and first service address; the agent
//! servers with theirs; each host's `--probe-addr` from its `agents/`
//! record) into the plan's [`Inputs`], given only when they changed, and
//! [`plans`] turns those into `holdfast_control::probe_plan`'s targets
//! with their addresses. The hub
//! ([`crate::hub::Hub::set_probe_plans`]) sends each agent that takes plans
//! (`Hello.probe_plans`) its own list when the stream opens and whenever it
//! changes.
//!
//! - A host's address is the last one its record named in this leader's
//!   term: a host whose lease (and record) went away is still probed where
//!   it was, so its probers see it fail rather than stop looking.
//! - A host that never named one (an agent without `--probe-addr`, or older
//!   than the field) is left out of every list and logged whenever the
//!   plan is computed: nobody probes it but the leader's heartbeat on its
//!   stream.
//! - A unit is probed on its first service address at the controller's
//!   unit port (holdfastd's BGP port), as the controller's own heartbeat.
//!
//! - The inputs are looked at once per [`PLAN_EVERY`] at most, and a
//!   hash over them tells a change (at 1,000 hosts and 10,000 units:
//!   about 1 ms; building the inputs takes 11 ms and the plan 27 ms more,
//!   only when they changed, the plan on a blocking thread:
//!   [`crate::sense`]). Computing them at every sync (300 ms) on the
//!   leader's loop made its sync phase 240–810 ms long in
//!   `holdfast-ctl-sim --hosts 1000 --probes leader`.
//! - A host without a probe address is logged at each computation.
//!
//! # Known issues
//! - The whole plan is recomputed when any input changes; each agent still
//!   gets a message only when its own list changed.

use std::collections::BTreeMap;

use holdfast_control::{DesiredState, HostId, PlanInput, Target, UnitId, DEFAULT_FANOUT};
use holdfast_control_api::v1::ProbeTarget;

use crate::sense::service_addr;
use crate::{AgentRecord, UnitRecord};

/// The shortest time between two computations of the plan.
pub const PLAN_EVERY: std::time::Duration = std::time::Duration::from_secs(1);

/// Every vantage point's targets, by host.
pub type Plans = BTreeMap<String, Vec<ProbeTarget>>;

/// What the plans are made from.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Inputs {
    plan: PlanInput,
    hosts: BTreeMap<String, String>,
    units: BTreeMap<String, String>,
}

/// Tells when the plans' inputs changed, remembering the hosts' addresses
/// over the term.
#[derive(Debug, Default)]
pub struct Planner {
    /// Each host's probe address, as its record last named it.
    addrs: BTreeMap<String, String>,
    /// A hash of the inputs last given.
    last: Option<u64>,
    /// When the inputs were last looked at.
    checked: Option<std::time::Instant>,
}

impl Planner {
    /// Whether [`Planner::update`] would look at the inputs now.
    pub fn due(&self) -> bool {
        self.checked.is_none_or(|t| t.elapsed() >= PLAN_EVERY)
    }

    /// The inputs when they differ from the last ones given, looked at
    /// once per [`PLAN_EVERY`] at most (`None`: the same, or not yet).
    /// `agents` and `servers` are the `agents/` and `agent-servers/`
    /// records; `port` is the units' probed port. A hash over what the
    /// plan depends on tells a change (about 1 ms at 10,000 units, where
    /// building the inputs takes ten times that); [`plans`] computes them.
    pub fn update(
        &mut self,
        state: &DesiredState,
        units: &[UnitRecord],
        agents: &BTreeMap<String, AgentRecord>,
        servers: &BTreeMap<String, AgentRecord>,
        port: u16,
    ) -> Option<Inputs> {
        if !self.due() {
            return None;
        }
        self.checked = Some(std::time::Instant::now());
        for (h, r) in agents {
            if let Some(a) = &r.probe_addr {
                if self.addrs.get(h) != Some(a) {
                    self.addrs.insert(h.clone(), a.clone());
                }
            }
        }
        let hash = fingerprint(state, units, servers, &self.addrs, port);
        if self.last == Some(hash) {
            return None;
        }
        self.last = Some(hash);
        let hosts: Vec<(HostId, String)> = state
            .hosts
            .values()
            .filter(|h| !h.is_failed())
            .map(|h| (h.name.clone(), h.domain.clone().unwrap_or_default()))
            .collect();
        let plan = PlanInput {
            units: units
                .iter()
                .map(|u| {
                    (
                        UnitId::new(u.unit.clone()),
                        HostId::new(u.primary.clone()),
                        u.backup.clone().map(HostId::new),
                    )
                })
                .collect(),
            agent_servers: servers
                .iter()
                .map(|(h, r)| (HostId::new(h.clone()), r.domain.clone().unwrap_or_default()))
                .collect(),
            fanout: DEFAULT_FANOUT,
            hosts,
        };
        Some(Inputs {
            hosts: plan
                .hosts
                .iter()
                .filter_map(|(h, _)| self.addrs.get(&h.0).map(|a| (h.0.clone(), a.clone())))
                .collect(),
            units: units
                .iter()
                .filter_map(|u| service_addr(u, port).map(|a| (u.unit.clone(), a.to_string())))
                .collect(),
            plan,
        })
    }
}

/// A hash of everything the plans depend on.
fn fingerprint(
    state: &DesiredState,
    units: &[UnitRecord],
    servers: &BTreeMap<String, AgentRecord>,
    addrs: &BTreeMap<String, String>,
    port: u16,
) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    port.hash(&mut h);
    for host in state.hosts.values().filter(|x| !x.is_failed()) {
        (&host.name.0, &host.domain).hash(&mut h);
    }
    for u in units {
        (&u.unit, &u.primary, &u.backup, u.addresses.first()).hash(&mut h);
    }
    for (s, r) in servers {
        (s, &r.domain).hash(&mut h);
    }
    addrs.hash(&mut h);
    h.finish()
}

/// Every vantage point's targets with their addresses (about 30 ms at
/// 1,000 hosts and 10,000 units: the caller runs it off its loop). A host
/// without a probe address is in no list, and logged.
pub fn plans(inputs: &Inputs) -> Plans {
    for (h, _) in &inputs.plan.hosts {
        if !inputs.hosts.contains_key(&h.0) {
            tracing::warn!(host = %h, "no probe address for this host (`holdfast-agent --probe-addr`): no agent's probe plan names it");
        }
    }
    holdfast_control::probe_plan(&inputs.plan)
        .into_iter()
        .map(|(v, targets)| {
            let targets = targets
                .iter()
                .filter_map(|t| {
                    let (name, addr) = match t {
                        Target::Host(h) => (format!("host:{h}"), inputs.hosts.get(&h.0)),
                        Target::Unit(u) => (format!("unit:{u}"), inputs.units.get(&u.0)),
                    };
                    addr.map(|a| ProbeTarget {
                        name,
                        addr: a.clone(),
                    })
                })
                .collect();
            (v.0, targets)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use holdfast_control::{Host, HostState, Unit};

    fn record(unit: &str, primary: &str, backup: &str, addr: &str) -> UnitRecord {
        UnitRecord {
            schema: crate::SCHEMA,
            unit: unit.into(),
            primary: primary.into(),
            backup: Some(backup.into()),
            epoch: crate::Token(1),
            config: String::new(),
            addresses: vec![addr.into()],
            interface: String::new(),
            app_failure: None,
            preheated: false,
            binary: None,
        }
    }

    fn agent(host: &str, addr: Option<&str>) -> (String, AgentRecord) {
        (
            host.into(),
            AgentRecord {
                schema: crate::SCHEMA,
                host: host.into(),
                failsafe: None,
                version: String::new(),
                domain: None,
                probe_addr: addr.map(str::to_string),
            },
        )
    }

    fn state(hosts: &[&str], failed: &[&str], units: &[UnitRecord]) -> DesiredState {
        DesiredState::new(
            hosts.iter().map(|h| Host {
                name: HostId::new(*h),
                capacity: 16,
                state: if failed.contains(h) {
                    HostState::Failed {
                        kind: holdfast_control::FailureKind::Host,
                        since: 0,
                    }
                } else {
                    HostState::Healthy
                },
                domain: None,
            }),
            units.iter().map(|u| {
                Unit::new(
                    u.unit.clone(),
                    &HostId::new(u.primary.clone()),
                    u.backup.clone().map(HostId::new).as_ref(),
                )
            }),
        )
    }

    fn names(p: &Plans, host: &str) -> Vec<String> {
        p[host]
            .iter()
            .map(|t| format!("{}={}", t.name, t.addr))
            .collect()
    }

    #[test]
    fn plans_carry_addresses_and_come_only_when_they_change() {
        let units = vec![
            record("u1", "a", "b", "198.18.0.10/24"),
            record("u2", "b", "c", "198.18.0.11/24"),
        ];
        let agents: BTreeMap<_, _> = [
            agent("a", Some("198.18.0.3:7")),
            agent("b", Some("198.18.0.4:7")),
            agent("c", Some("198.18.0.7:7")),
        ]
        .into_iter()
        .collect();
        let servers: BTreeMap<_, _> = [agent("s", None)].into_iter().collect();
        let st = state(&["a", "b", "c"], &[], &units);
        let mut p = Planner::default();
        let got = plans(
            &p.update(&st, &units, &agents, &servers, 179)
                .expect("a first plan"),
        );
        assert_eq!(
            names(&got, "b"),
            [
                "host:a=198.18.0.3:7",
                "host:c=198.18.0.7:7",
                "unit:u1=198.18.0.10:179"
            ]
        );
        assert_eq!(
            names(&got, "s"),
            [
                "host:a=198.18.0.3:7",
                "host:b=198.18.0.4:7",
                "host:c=198.18.0.7:7",
                "unit:u1=198.18.0.10:179",
                "unit:u2=198.18.0.11:179"
            ]
        );
        // A change within PLAN_EVERY waits for it.
        let st_c = state(&["a", "b", "c"], &["c"], &units);
        assert!(p.update(&st_c, &units, &agents, &servers, 179).is_none());
        p.checked = None;
        assert!(
            p.update(&st, &units, &agents, &servers, 179).is_none(),
            "unchanged"
        );
        // c's record goes (its lease lapsed): still probed where it was.
        let fewer: BTreeMap<_, _> = agents
            .iter()
            .filter(|(h, _)| *h != "c")
            .map(|(h, r)| (h.clone(), r.clone()))
            .collect();
        p.checked = None;
        assert!(p.update(&st, &units, &fewer, &servers, 179).is_none());
        p.checked = None;
        // c is marked failed: out of the ring, its units' probes stay.
        let st = st_c;
        let got = plans(
            &p.update(&st, &units, &fewer, &servers, 179)
                .expect("c failed"),
        );
        assert_eq!(
            names(&got, "b"),
            ["host:a=198.18.0.3:7", "unit:u1=198.18.0.10:179"]
        );
        assert!(!got.contains_key("c"));
    }

    #[test]
    fn a_host_without_a_probe_address_is_in_no_list() {
        let units = vec![record("u1", "a", "b", "198.18.0.10/24")];
        let agents: BTreeMap<_, _> = [agent("a", None), agent("b", Some("198.18.0.4:7"))]
            .into_iter()
            .collect();
        let st = state(&["a", "b"], &[], &units);
        let got = plans(
            &Planner::default()
                .update(&st, &units, &agents, &BTreeMap::new(), 179)
                .expect("a plan"),
        );
        assert_eq!(names(&got, "b"), ["unit:u1=198.18.0.10:179"]);
        assert_eq!(names(&got, "a"), ["host:b=198.18.0.4:7"]);
    }
}
