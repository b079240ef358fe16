//! The benches' NSR unit under the control plane: the takeover benches
//! (`takeover`, `many`) run holdfastd NSR on as a unit of the lab's control
//! plane ([`holdfast_lab::plane`]: etcd, three `holdfast-controller`
//! replicas, a host agent on a and b, the unit in a container on each), so
//! a takeover is the production one: the bench SIGKILLs the unit and the
//! controller has b's agent take it over (a cold `holdfastd --takeover`, or
//! the standby the agent keeps for a `"preheated": true` placement).
//!
//! ```text
//!   bridge lan 198.18.0.0/24
//!   [ redis ] .2  redis-server            [ feed ] .5   injector tester(s)
//!   [ a ] .3 / [ b ] .4  host agents; unit `bench` (service .10) in a container on each
//!   [ p ] .20     monitor tester          c1..c3  etcd + controllers (and the `mgmt` bridge)
//! ```
//!
//! Known issues: the control plane's time is read from the lab (the kill
//! to every session Established on b, polled every 2 ms over the new
//! unit's control socket); the unit also originates the plane's 10 routes
//! (`100.100.0.0/24` …), which the monitor counts on top of the bench's.

use anyhow::{bail, Context, Result};
use holdfast_lab::plane::{unit_networks, Plane, PlaneBins, PlaneExtras, PlaneSpec};
use holdfast_lab::{ControlSocket, NsrHost};
use holdfast_tester::workload::Workload;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The unit's name (and its NSR instance).
pub const UNIT: &str = "bench";
/// Routes the plane has the unit originate (`[[network]]`).
pub const ORIGINATED: usize = 10;
/// Routes the monitor ends up with: the injected prefixes and the
/// `originated` ones of the plane's only unit, each once (the realistic
/// mix can hold an originated prefix too).
pub fn distinct_routes(work: &[Workload], originated: usize) -> usize {
    let mut all: std::collections::HashSet<holdfast_wire::Prefix> = work
        .iter()
        .flat_map(|w| w.iter().flat_map(|(_, p)| p.iter().copied()))
        .collect();
    all.extend(unit_networks(0, originated as u32).map(holdfast_wire::Prefix::V4));
    all.len()
}

/// The monitor host's last octet.
const MON_OCTET: u8 = 20;

/// The plane with the bench's unit.
pub struct BenchPlane {
    pub plane: Plane,
    /// The monitor tester's host.
    pub mon: NsrHost,
}

/// The unit's neighbours: one passive neighbour per `(address, AS,
/// export)` (import all), every session from the service address.
pub fn neighbors_toml(svc: Ipv4Addr, neighbors: &[(Ipv4Addr, u32, &str)]) -> String {
    let mut extra = String::new();
    for (addr, asn, export) in neighbors {
        extra.push_str(&format!(
            "[[neighbor]]\naddress = \"{addr}\"\nremote_asn = {asn}\nlocal_address = \"{svc}\"\npassive = true\nimport = \"all\"\nexport = \"{export}\"\n"
        ));
    }
    extra
}

impl BenchPlane {
    /// The monitor's address.
    pub fn mon_addr() -> Ipv4Addr {
        Ipv4Addr::new(198, 18, 0, MON_OCTET)
    }

    /// Starts the plane (named `name`) with the unit on a (backup b),
    /// `neighbors` its sessions (see [`neighbors_toml`]); with `preheated`
    /// b's agent runs its standby from the start.
    pub fn up(
        name: &str,
        neighbors: &[(Ipv4Addr, u32, &str)],
        preheated: bool,
    ) -> Result<BenchPlane> {
        Self::up_with_global(name, neighbors, preheated, "")
    }

    /// [`BenchPlane::up`] with `global` (key lines, e.g. `io_threads = 2`)
    /// added to the unit's `[global]` table.
    pub fn up_with_global(
        name: &str,
        neighbors: &[(Ipv4Addr, u32, &str)],
        preheated: bool,
        global: &str,
    ) -> Result<BenchPlane> {
        Self::up_full(name, neighbors, preheated, global, false)
    }

    /// [`BenchPlane::up`] with the store on a Redis Cluster (three masters,
    /// three replicas: `PlaneExtras::redis_cluster`) when `cluster`.
    pub fn up_on(
        name: &str,
        neighbors: &[(Ipv4Addr, u32, &str)],
        preheated: bool,
        cluster: bool,
    ) -> Result<BenchPlane> {
        Self::up_full(name, neighbors, preheated, "", cluster)
    }

    fn up_full(
        name: &str,
        neighbors: &[(Ipv4Addr, u32, &str)],
        preheated: bool,
        global: &str,
        cluster: bool,
    ) -> Result<BenchPlane> {
        let bins = PlaneBins::find().context("the control plane's binaries")?;
        let mut spec = PlaneSpec::one_unit(&["a", "b"], false);
        spec.units[0].name = UNIT.into();
        spec.units[0].routes = ORIGINATED as u32;
        spec.units[0].app_failure = Some("migrate".into());
        spec.units[0].peers = vec!["none".into()];
        // No IP SLA probes: the bench kills the process (its agent sees
        // that through the pidfd), and the probes' load would be measured
        // with holdfastd's.
        spec.no_probes = true;
        let svc = Ipv4Addr::new(198, 18, 0, 10);
        let mut extras = PlaneExtras::default();
        extras.unit_config.insert(
            UNIT.into(),
            format!("{global}{}", neighbors_toml(svc, neighbors)),
        );
        if preheated {
            extras.preheated.push(UNIT.into());
        }
        extras.redis_cluster = cluster;
        let mut plane = Plane::up_with(name, &spec, bins, &extras)?;
        let mon = plane.topo.add_host(&mut plane.lab, "p", MON_OCTET)?;
        plane.wait_leader(3, Duration::from_secs(60))?;
        Ok(BenchPlane { plane, mon })
    }

    /// The unit's control socket on `host`.
    pub fn socket(&self, host: &str) -> PathBuf {
        self.plane
            .host(host)
            .work_dir
            .join(UNIT)
            .join("holdfastd.sock")
    }

    /// The unit's pid on `host`, once its agent runs it.
    pub fn pid(&self, host: &str) -> Result<u32> {
        let p = self
            .plane
            .wait_running(UNIT, host, None, Duration::from_secs(60))?;
        Ok(p as u32)
    }

    /// SIGKILLs the unit on `from` (an application failure); the controller
    /// takes it over on `to`. Returns when that was (the kill) and how long
    /// until every session of the unit on `to` was Established.
    pub fn kill_and_take_over(&self, from: &str, to: &str) -> Result<(Instant, Duration)> {
        let killed = self.kill(from)?;
        let control = self.wait_taken_over(to, killed)?;
        Ok((killed, control))
    }

    /// SIGKILLs the unit on `from`; returns when.
    pub fn kill(&self, from: &str) -> Result<Instant> {
        let killed = Instant::now();
        self.plane.kill_unit(UNIT, from)?;
        Ok(killed)
    }

    /// After [`BenchPlane::kill`]: waits until the unit on `to` has every
    /// session Established and is no standby, then until the placement
    /// names `to`. Returns the time from `killed` to the first.
    ///
    /// Each poll asks for every neighbour's state (a thousand at the most):
    /// a caller timing the resume at the peers waits for them first, so
    /// that the polls do not compete with the takeover for the CPUs.
    pub fn wait_taken_over(&self, to: &str, killed: Instant) -> Result<Duration> {
        let sock = ControlSocket(self.socket(to));
        let deadline = killed + Duration::from_secs(60);
        loop {
            if sock.all_established()
                && sock
                    .nsr()
                    .is_ok_and(|n| serde_json::to_value(&n).is_ok_and(|v| v["role"] != "standby"))
            {
                break;
            }
            if Instant::now() > deadline {
                bail!("{UNIT}: no takeover on {to} within 60 s of the kill");
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        let control = killed.elapsed();
        // The migration's last steps (the address confirmed, the placement
        // written) may follow the sessions' resume.
        holdfast_lab::wait_for_every(
            &format!("{UNIT} placed on {to} after the takeover"),
            Duration::from_secs(10),
            Duration::from_millis(20),
            || Ok((self.plane.placement(UNIT)?.0 == to).then_some(())),
        )?;
        Ok(control)
    }
}

/// `show nsr` of the unit whose control socket is `sock`, as JSON (the
/// CLI's `--json` `nsr` object).
pub fn show_nsr(sock: &Path) -> Result<serde_json::Value> {
    let n = ControlSocket(sock.to_path_buf()).nsr()?;
    Ok(serde_json::to_value(n)?)
}

/// Waits until every session of the unit at `sock` is Established.
pub fn wait_all_established(sock: &Path, within: Duration) -> Result<()> {
    let s = ControlSocket(sock.to_path_buf());
    let deadline = Instant::now() + within;
    while !s.all_established() {
        if Instant::now() > deadline {
            bail!("{}: not every session Established", sock.display());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Ok(())
}
