//! The simulated fleet: hosts in racks, units with a primary and a TRIPOD
//! backup, an agent server per segment, and who probes whom.
//!
//! Pure: the same [`FleetSpec`] always gives the same fleet.
//!
//! - Hosts `h0000`, `h0001`, ... in racks of [`FleetSpec::rack`] hosts
//!   (`r000`, ...); a rack is also a segment, with its agent server
//!   `as000`, ... (which does not fail with its rack: it is its own
//!   server).
//! - Units `u00000`, ... round-robin over the hosts as primaries, their
//!   backups placed by `holdfast_control::place` (TRIPOD's min-churn
//!   choice, outside the primary's rack: each agent names its rack as its
//!   failure domain), each with a service address `10.200.0.0/16 + i + 1`.
//! - The probe plan: [`ProbeMode::Ring`] (`holdfast_control::probe_plan`,
//!   computed by the harness), [`ProbeMode::Leader`] (the same plan,
//!   computed by the leader and pushed to each agent, as the real agents
//!   and `holdfast lab` run) or [`ProbeMode::Full`] (every agent every
//!   other host and unit: the lab before issue 29).

use std::collections::BTreeMap;
use std::net::Ipv4Addr;

use holdfast_control::{
    full_mesh, place, probe_plan, DesiredState, Host, HostId, PlanInput, ProbePlan, Target, Unit,
    UnitId,
};
use serde::{Deserialize, Serialize};

/// Units a host may carry in the simulation (primaries plus the backups
/// that land on it after any single failure): the controller's default.
pub const CAPACITY: u32 = 16;

/// Who probes whom.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
pub enum ProbeMode {
    /// A ring over the hosts across racks, units by their backup's agent,
    /// each rack by its agent server (issue 29).
    Ring,
    /// Every agent probes every other host and every unit.
    Full,
    /// The ring's plan, which each agent takes from the leader
    /// (`ProbeTargets` on its stream, `Hello.probe_plans`), as a real agent
    /// does: the leader computes and pushes it.
    Leader,
}

/// What to simulate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct FleetSpec {
    pub hosts: usize,
    pub units: usize,
    /// Hosts per rack (and per segment).
    pub rack: usize,
    pub probes: ProbeMode,
    /// Hosts each agent probes on the ring.
    pub fanout: usize,
}

/// One unit.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SimUnit {
    pub name: String,
    pub primary: String,
    pub backup: Option<String>,
    pub addr: Ipv4Addr,
}

/// The fleet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fleet {
    pub spec: FleetSpec,
    pub hosts: Vec<String>,
    pub units: Vec<SimUnit>,
    /// Agent servers: (name, the rack it serves).
    pub agent_servers: Vec<(String, String)>,
}

/// The service address of unit `i`.
pub fn unit_addr(i: usize) -> Ipv4Addr {
    let base = u32::from(Ipv4Addr::new(10, 200, 0, 0));
    Ipv4Addr::from(base + u32::try_from(i).unwrap_or(u32::MAX - base - 1) + 1)
}

/// The prefix every unit's address is in.
pub const UNIT_PREFIX: &str = "10.200.0.0/16";

/// At most this many units (the addresses of [`UNIT_PREFIX`]).
pub const MAX_UNITS: usize = 65_534;

/// `host`'s rack name.
pub fn rack_name(spec: &FleetSpec, host_index: usize) -> String {
    format!("r{:03}", host_index / spec.rack.max(1))
}

impl Fleet {
    /// Builds the fleet; `Err` when the units do not fit (capacity
    /// [`CAPACITY`] per host) or the spec is out of range.
    pub fn new(spec: FleetSpec) -> Result<Fleet, String> {
        if spec.hosts < 2 || spec.units == 0 || spec.units > MAX_UNITS {
            return Err(format!(
                "--hosts must be at least 2 and --units between 1 and {MAX_UNITS}"
            ));
        }
        let hosts: Vec<String> = (0..spec.hosts).map(|i| format!("h{i:04}")).collect();
        let model = DesiredState::new(
            hosts
                .iter()
                .enumerate()
                .map(|(i, h)| Host::healthy(h.clone(), CAPACITY).in_domain(rack_name(&spec, i))),
            (0..spec.units).map(|i| {
                Unit::new(
                    format!("u{i:05}"),
                    &HostId::new(hosts[i % spec.hosts].clone()),
                    None,
                )
            }),
        );
        let placed = place(&model).map_err(|e| e.to_string())?;
        let units = (0..spec.units)
            .map(|i| {
                let name = format!("u{i:05}");
                SimUnit {
                    backup: placed
                        .backups
                        .get(&UnitId::new(name.clone()))
                        .map(|h| h.0.clone()),
                    primary: hosts[i % spec.hosts].clone(),
                    name,
                    addr: unit_addr(i),
                }
            })
            .collect();
        let racks = spec.hosts.div_ceil(spec.rack.max(1));
        let agent_servers = (0..racks)
            .map(|r| (format!("as{r:03}"), format!("r{r:03}")))
            .collect();
        Ok(Fleet {
            spec,
            hosts,
            units,
            agent_servers,
        })
    }

    /// The rack of host `h` (by name).
    pub fn rack_of(&self, h: &str) -> Option<String> {
        match self.hosts.iter().position(|x| x == h) {
            Some(i) => Some(rack_name(&self.spec, i)),
            // An agent server's rack is the one it serves.
            None => self
                .agent_servers
                .iter()
                .find(|(a, _)| a == h)
                .map(|(_, r)| r.clone()),
        }
    }

    /// The hosts of rack `r` (an index).
    pub fn rack(&self, r: usize) -> Vec<String> {
        let n = self.spec.rack.max(1);
        self.hosts.iter().skip(r * n).take(n).cloned().collect()
    }

    /// The probe plan for the current placement (`units`: name, primary,
    /// backup), leaving out `failed` hosts.
    pub fn plan(&self, units: &[SimUnit], failed: &[String]) -> ProbePlan {
        let input = PlanInput {
            hosts: self
                .hosts
                .iter()
                .enumerate()
                .filter(|(_, h)| !failed.contains(h))
                .map(|(i, h)| (HostId::new(h.clone()), rack_name(&self.spec, i)))
                .collect(),
            units: units
                .iter()
                .map(|u| {
                    (
                        UnitId::new(u.name.clone()),
                        HostId::new(u.primary.clone()),
                        u.backup.clone().map(HostId::new),
                    )
                })
                .collect(),
            agent_servers: self
                .agent_servers
                .iter()
                .map(|(a, r)| (HostId::new(a.clone()), r.clone()))
                .collect(),
            fanout: self.spec.fanout,
        };
        match self.spec.probes {
            ProbeMode::Ring | ProbeMode::Leader => probe_plan(&input),
            ProbeMode::Full => full_mesh(&input),
        }
    }
}

/// A target's name on the wire (`host:NAME`, `unit:NAME`).
pub fn target_name(t: &Target) -> String {
    match t {
        Target::Host(h) => format!("host:{}", h.0),
        Target::Unit(u) => format!("unit:{}", u.0),
    }
}

/// Probes per second of every vantage point under `plan`, at `interval_ms`.
pub fn probe_rates(plan: &ProbePlan, interval_ms: u64) -> BTreeMap<String, f64> {
    let per_s = 1000.0 / interval_ms.max(1) as f64;
    plan.iter()
        .map(|(h, t)| (h.0.clone(), t.len() as f64 * per_s))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(hosts: usize, probes: ProbeMode) -> FleetSpec {
        FleetSpec {
            hosts,
            units: hosts * 10,
            rack: 50,
            probes,
            fanout: 3,
        }
    }

    #[test]
    fn ten_units_per_host_fit_with_a_backup_each_off_their_primary() {
        let f = Fleet::new(spec(100, ProbeMode::Ring)).unwrap();
        assert_eq!(f.units.len(), 1000);
        assert_eq!(f.agent_servers.len(), 2);
        for u in &f.units {
            let b = u.backup.as_ref().expect("a backup");
            assert_ne!(b, &u.primary);
            assert_ne!(f.rack_of(b), f.rack_of(&u.primary), "{u:?}: in its rack");
        }
        assert_eq!(f.units[0].addr, Ipv4Addr::new(10, 200, 0, 1));
        assert_eq!(f.units[999].addr, Ipv4Addr::new(10, 200, 3, 232));
        assert_eq!(f.rack(1).first().map(String::as_str), Some("h0050"));
        assert_eq!(f.rack_of("h0051").as_deref(), Some("r001"));
        assert_eq!(f.rack_of("as001").as_deref(), Some("r001"));
    }

    #[test]
    fn an_agents_probe_rate_is_flat_with_the_ring_and_grows_without() {
        let rate = |n: usize, m: ProbeMode| {
            let f = Fleet::new(spec(n, m)).unwrap();
            let plan = f.plan(&f.units, &[]);
            let r = probe_rates(&plan, 100);
            f.hosts.iter().map(|h| r[h]).fold(0.0, f64::max)
        };
        let (r10, r100) = (rate(10, ProbeMode::Ring), rate(100, ProbeMode::Ring));
        let r1000 = rate(1000, ProbeMode::Ring);
        assert!(
            r100 <= r10 * 1.2 && r1000 <= r10 * 1.2,
            "ring: {r10}, {r100}, then {r1000} probes/s"
        );
        let (f10, f100) = (rate(10, ProbeMode::Full), rate(100, ProbeMode::Full));
        assert!(f100 > f10 * 5.0, "full mesh: {f10} then {f100} probes/s");
    }

    #[test]
    fn a_failed_host_leaves_the_plan() {
        let f = Fleet::new(spec(10, ProbeMode::Ring)).unwrap();
        let plan = f.plan(&f.units, &["h0003".to_string()]);
        assert!(!plan.contains_key(&HostId::new("h0003")));
        assert!(plan
            .values()
            .all(|t| !t.contains(&Target::Host(HostId::new("h0003")))));
    }
}
