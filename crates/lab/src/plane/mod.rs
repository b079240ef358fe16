//! The control plane in the lab (issue 11): hosts whose units run in
//! containers, a host agent per host, the agent server's agent, a 3-member
//! etcd cluster with three `holdfast-controller` replicas, the Redis store
//! and a real frr peer with a session to every unit. The controller, not
//! the lab, finds and handles the failures the lab injects.
//!
//! ```text
//!                       bridge `lan` 198.18.0.0/24
//!   peer .1 (frr, AS 65001) -- BGP --> every unit's service address .10+i
//!   redis .2                   the NSR store
//!   hosts a .3, b .4, c .7 ... holdfast-agent each; per unit a container
//!                              (its own namespace on the bridge: .64+, .96+, ...)
//!   s .8                       the agent server's holdfast-agent (probes only)
//!   c1..c3 .31-.33             holdfast-controller replicas (they heartbeat units here)
//!
//!                       bridge `mgmt` 198.19.0.0/24 (same last octets)
//!   c1..c3                     etcd members + holdfast-controller replicas (:50051)
//!   a, b, c ..., s             the agents' etcd leases and Attach streams;
//!                              the host agents' failsafe service (:50052)
//! ```
//!
//! A unit's container on a host is a network namespace with its own port
//! on the bridge, as a container on a bridged network: the unit's service
//! address goes on its interface there when the unit runs on that host.
//! Failures act on exactly what they name: the unit's process, its
//! container (every process, then the namespace deleted), the container's
//! bridge port, the host (its processes and its containers', every link
//! down, the management network's too), the host's data network (its and
//! its containers' `lan` ports; the management network stays up, as
//! TENSOR's host-network failure).
//!
//! Its parts (the management network with etcd and the controllers, the
//! agents' command lines, placements, the status readers) are in `parts`,
//! shared with `holdfast lab`'s control plane (crates/labctl).
//!
//! Known issues: at most four unit hosts (`a`..`d`) with a fixed address
//! plan; the peers are frr (and bird2, gobgpd) with fixed ASes.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::error::{LabError, Result};
use crate::nsr::{nsr_config, NsrHost, NsrTopo};
use crate::peer::{Frr, NeighborSpec, Peer, PeerSpec, RouteSpec, SessionState};
use crate::{
    find_binary, wait_for_every, Etcd, HostId, Lab, ProcId, Redis, RedisCluster, Signal,
    StoreServers,
};

mod parts;
mod watch;

pub use watch::PlaneWatch;

pub use parts::{
    agent_unit_pid, controller_statuses, controller_verdicts, ctl_json, json_file, kill_all,
    kill_container_ns, make_certs, make_certs_etcd, mgmt_addr_of, operator_tls_args, placement_of,
    relink_host, show_nsr, store_user, tls_args, unit_record, verdict_is, wait_leader_in,
    wait_protected_at, AgentArgs, AgentOpts, ControlPlane, CONTROLLER_PORT, FAILSAFE_PORT,
    UNITS_PREFIX,
};

/// The peer's AS.
pub const PLANE_PEER_AS: u32 = 65001;

/// The control plane's binaries.
#[derive(Debug, Clone)]
pub struct PlaneBins {
    pub agent: String,
    pub controller: String,
    pub ctl: String,
    pub holdfastd: String,
    pub holdfast: String,
}

impl PlaneBins {
    /// The binaries, when the plane can run here with these peers and
    /// tools (`etcd`, `etcdctl` and `iptables` always); `None` after
    /// reporting why (a failure under `HOLDFAST_REQUIRE_LAB=1`).
    pub fn ready(peers: &[crate::PeerKind], tools: &[&str]) -> Option<PlaneBins> {
        let mut all = vec!["etcd", "etcdctl", "iptables"];
        all.extend_from_slice(tools);
        if crate::skip_unless_ready(peers) || crate::skip_unless_tools(&all) {
            return None;
        }
        match PlaneBins::find() {
            Ok(b) => Some(b),
            Err(e) => {
                crate::skip(&format!("{e}"));
                None
            }
        }
    }

    /// Finds them next to the test binary (or through their env variables).
    pub fn find() -> Result<PlaneBins> {
        let f = |n: &str, env: &str| find_binary(n, env).map(|p| p.to_string_lossy().to_string());
        Ok(PlaneBins {
            agent: f("holdfast-agent", "HOLDFAST_AGENT_BIN")?,
            controller: f("holdfast-controller", "HOLDFAST_CONTROLLER_BIN")?,
            ctl: f("holdfast-ctl", "HOLDFAST_CTL_BIN")?,
            holdfastd: f("holdfastd", "HOLDFASTD")?,
            holdfast: f("holdfast", "HOLDFAST_BIN")?,
        })
    }
}

/// A unit to place.
#[derive(Debug, Clone)]
pub struct PlaneUnitSpec {
    pub name: String,
    pub primary: String,
    pub backup: String,
    /// Routes it originates (`100.<100+i>.0.0/24` and up).
    pub routes: u32,
    /// Its application-failure policy (`migrate` or `restart_in_place`),
    /// if not the controller's.
    pub app_failure: Option<String>,
    /// Whom it peers with: `frr`, `bird`, `gobgp`, or `unit:NAME` (iBGP
    /// with that unit; `rr-client:NAME`: with that unit as a route
    /// reflector client of this one). Empty: frr, and bird2 and gobgpd
    /// with [`PlaneSpec::more_peers`].
    pub peers: Vec<String>,
}

impl PlaneUnitSpec {
    /// Whether it peers with the external peer `name`.
    fn peers_with(&self, name: &str, more_peers: bool) -> bool {
        if self.peers.is_empty() {
            name == "frr" || more_peers
        } else {
            self.peers.iter().any(|p| p == name)
        }
    }
}

/// What to build.
#[derive(Debug, Clone)]
pub struct PlaneSpec {
    /// The hosts that carry units (at most 4: `a`, `b`, `c`, `d`).
    pub hosts: Vec<String>,
    pub units: Vec<PlaneUnitSpec>,
    /// Extra arguments of every controller replica.
    pub controller_args: Vec<String>,
    /// bird2 (AS 65002, on `feed` .5) and gobgpd (AS 65003, on `g` .6) as
    /// peers of every unit too, beside frr.
    pub more_peers: bool,
    /// No IP SLA probes from the agents and the agent server (a negative
    /// control: the controller is then the only vantage point of a unit's
    /// network).
    pub no_probes: bool,
}

impl PlaneSpec {
    /// One unit, `u1` with 10 routes, primary on the first of `hosts` and
    /// backed up on the second; frr its only peer unless `more_peers`
    /// (bird2 and gobgpd too).
    pub fn one_unit(hosts: &[&str], more_peers: bool) -> PlaneSpec {
        PlaneSpec {
            hosts: hosts.iter().map(|h| h.to_string()).collect(),
            units: vec![PlaneUnitSpec {
                name: "u1".into(),
                primary: hosts[0].into(),
                backup: hosts[1].into(),
                routes: 10,
                app_failure: None,
                peers: vec![],
            }],
            controller_args: vec![],
            more_peers,
            no_probes: false,
        }
    }
}

/// What [`Plane::up_with`] adds to a [`PlaneSpec`]: what the NSR scenarios
/// need beyond the plane's standard units. Its default is the secure plane
/// (mutual TLS and Redis ACL users on, issue 30); [`PlaneExtras::insecure`]
/// is the plaintext one, for a lab that needs it on purpose.
#[derive(Debug, Clone)]
pub struct PlaneExtras {
    /// More holdfastd configuration per unit name, TOML appended to the
    /// unit's own (its top-level keys first): neighbours with TCP-MD5 or
    /// BFD and its authentication, `[nsr]` options (`compact_bytes`,
    /// `manage_address`), `[[bmp]]` stations ... With [`PlaneExtras::mtls`],
    /// `@CERTS@` in it stands for the certificate directory.
    pub unit_config: BTreeMap<String, String>,
    /// Units placed with `"preheated": true`: their backup host's agent
    /// runs a standby (`holdfastd --standby`) from the start.
    pub preheated: Vec<String>,
    /// More arguments of every host agent (e.g. `--hang-ms 0`: no hang
    /// detection, for a lab that stops a unit for seconds on purpose).
    pub agent_args: Vec<String>,
    /// Redis with ACL users (issue 30; on by default): the store's
    /// `default` user is the lab's administrator, and each unit has its own
    /// user (`hf-<unit>`, limited to its keys by `holdfast nsr acl unit`)
    /// and password file (`redis-acl/<unit>.pass` in the work dir), named
    /// in its `[nsr] store_user` and `store_password_file`.
    pub redis_acl: bool,
    /// Mutual TLS on the control plane's gRPC (issue 30): certificates
    /// made at start in `WORK/certs` ([`make_certs`]: the hosts, `s`,
    /// `c1`..`c3`, the units, the operator `admin`), given to every
    /// replica and agent ([`Plane::certs`]). On by default; without it
    /// the replicas and agents run with `--insecure`.
    pub mtls: bool,
    /// etcd with TLS, client certificates and per-role permissions (issue
    /// 30, item 3; implies [`PlaneExtras::mtls`]): a server certificate
    /// per member, `holdfast ctl etcd-auth init` as etcd's root before the
    /// replicas start, every replica, agent and `holdfast ctl` presenting
    /// its own certificate ([`ControlPlane::start_secure`]). On by
    /// default.
    pub etcd_auth: bool,
    /// The store on a Redis Cluster (issue 29): three masters and three
    /// replicas on the store's host, ports 7000-7005 ([`RedisCluster`]),
    /// `[nsr] store = "redis+cluster://..."`, ACL users (with
    /// [`PlaneExtras::redis_acl`]) on every node. Off by default.
    pub redis_cluster: bool,
}

impl Default for PlaneExtras {
    fn default() -> Self {
        PlaneExtras {
            unit_config: BTreeMap::new(),
            preheated: Vec::new(),
            agent_args: Vec::new(),
            redis_acl: true,
            mtls: true,
            etcd_auth: true,
            redis_cluster: false,
        }
    }
}

impl PlaneExtras {
    /// The plaintext plane: no certificates (`--insecure` replicas and
    /// agents), etcd over plain HTTP without authentication, Redis without
    /// ACL users.
    pub fn insecure() -> Self {
        PlaneExtras {
            redis_acl: false,
            mtls: false,
            etcd_auth: false,
            ..PlaneExtras::default()
        }
    }
}

/// A unit taken over after a failure ([`Plane::kill_and_take_over`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Moved {
    /// The host it runs on now.
    pub to: String,
    /// From the failure until the new host's agent ran it.
    pub running: Duration,
    /// From the failure until it was PROTECTED there.
    pub protected: Duration,
}

/// bird2's and gobgpd's AS in the plane.
pub const PLANE_BIRD_AS: u32 = 65002;
/// gobgpd's AS in the plane.
pub const PLANE_GOBGP_AS: u32 = 65003;

/// The /24s unit `unit` (its index in the plane's spec) originates: its
/// `[[network]]` starts at `100.(100 + unit).0.0/24` and holds `count`
/// consecutive /24s.
pub fn unit_networks(unit: usize, count: u32) -> impl Iterator<Item = holdfast_wire::Prefix4> {
    let first = u32::from(Ipv4Addr::new(100, 100 + unit as u8, 0, 0));
    (0..count)
        .filter_map(move |k| holdfast_wire::Prefix4::new(Ipv4Addr::from(first + (k << 8)), 24))
}

/// A host with its agent.
#[derive(Debug, Clone)]
pub struct PlaneHost {
    pub name: String,
    pub host: NsrHost,
    /// The agent's arguments (to start it again).
    pub args: Vec<String>,
    pub status: PathBuf,
    pub work_dir: PathBuf,
    pub agent: Option<ProcId>,
}

/// A unit and its containers.
#[derive(Debug, Clone)]
pub struct PlaneUnit {
    pub name: String,
    pub service: Ipv4Addr,
    pub routes: u32,
    /// Its container on each host.
    pub containers: BTreeMap<String, NsrHost>,
    /// Its store user and password file, with [`PlaneExtras::redis_acl`].
    pub store_user: Option<(String, PathBuf)>,
}

/// The running control plane.
pub struct Plane {
    pub lab: Lab,
    pub topo: NsrTopo,
    pub etcd: Etcd,
    pub frr: Frr,
    /// bird2 and gobgpd (with [`PlaneSpec::more_peers`]).
    pub others: Vec<Box<dyn Peer>>,
    /// The NSR store: one redis-server, or a Redis Cluster
    /// ([`PlaneExtras::redis_cluster`]).
    pub redis: StoreServers,
    pub bins: PlaneBins,
    /// Each replica and its status file.
    pub controllers: Vec<(ProcId, PathBuf)>,
    pub hosts: Vec<PlaneHost>,
    pub agent_server: PlaneHost,
    pub units: Vec<PlaneUnit>,
    /// Where `holdfast ctl` runs (it reaches etcd).
    pub ctl_host: HostId,
    /// The management bridge (etcd, the controllers, the agents' streams).
    pub mgmt: crate::BridgeId,
    /// Where each controller replica runs.
    pub controller_hosts: Vec<HostId>,
    /// Each replica's command line (to start it again).
    pub controller_argv: Vec<Vec<String>>,
    /// Some unit has its own list of peers ([`PlaneUnitSpec::peers`]).
    pub custom_peers: bool,
    /// The certificate directory with [`PlaneExtras::mtls`].
    pub certs: Option<PathBuf>,
}

const HOST_ADDR: [(&str, u8, u8); 4] = [("a", 3, 64), ("b", 4, 96), ("c", 7, 128), ("d", 9, 160)];

impl Plane {
    /// Builds the lab and starts everything, secure ([`PlaneExtras`]'s
    /// default); the units run on their primaries once the agents are up.
    pub fn up(name: &str, spec: &PlaneSpec, bins: PlaneBins) -> Result<Plane> {
        Plane::up_with(name, spec, bins, &PlaneExtras::default())
    }

    /// [`Plane::up`] with [`PlaneExtras`].
    pub fn up_with(
        name: &str,
        spec: &PlaneSpec,
        bins: PlaneBins,
        extras: &PlaneExtras,
    ) -> Result<Plane> {
        let mut lab = Lab::new(name)?;
        lab.capture_start()?;
        let topo = NsrTopo::build(&mut lab)?;
        topo.del_service(&lab, topo.a.id)?;
        let redis_addr = IpAddr::V4(topo.redis.v4);
        let redis = if extras.redis_cluster {
            StoreServers::Cluster(RedisCluster::start(
                &mut lab,
                topo.redis.id,
                redis_addr,
                7000,
                extras.redis_acl,
            )?)
        } else if extras.redis_acl {
            StoreServers::Single(Redis::start_acl(&mut lab, topo.redis.id, redis_addr, 6379)?)
        } else {
            StoreServers::Single(Redis::start(&mut lab, topo.redis.id, redis_addr, 6379)?)
        };
        let mut members = Vec::new();
        for (i, n) in ["c1", "c2", "c3"].iter().enumerate() {
            let h = topo.add_host(&mut lab, n, 31 + i as u8)?;
            members.push((h.id, h.v4));
        }
        // Hosts, and every unit's container on each of them.
        let mut host_nodes = BTreeMap::new();
        for h in &spec.hosts {
            let &(_, n, _) = HOST_ADDR
                .iter()
                .find(|(x, _, _)| x == h)
                .ok_or_else(|| LabError::Invalid(format!("plane host `{h}`: a, b, c or d")))?;
            let node = match h.as_str() {
                "a" => topo.a.clone(),
                "b" => topo.b.clone(),
                _ => topo.add_host(&mut lab, h, n)?,
            };
            host_nodes.insert(h.clone(), node);
        }
        let mut units = Vec::new();
        for (i, u) in spec.units.iter().enumerate() {
            let mut containers = BTreeMap::new();
            for h in &spec.hosts {
                let &(_, _, base) = HOST_ADDR.iter().find(|(x, _, _)| x == h).expect("host");
                let c = topo.add_host(
                    &mut lab,
                    &format!("{h}_{}", u.name.replace('-', "_")),
                    base + i as u8,
                )?;
                containers.insert(h.clone(), c);
            }
            let store_user = if extras.redis_acl {
                Some(store_user(
                    &lab,
                    &redis,
                    &bins.holdfast,
                    &["unit", &u.name],
                )?)
            } else {
                None
            };
            units.push(PlaneUnit {
                name: u.name.clone(),
                service: Ipv4Addr::new(198, 18, 0, 10 + i as u8),
                routes: u.routes,
                containers,
                store_user,
            });
        }
        let s_node = topo.add_host(&mut lab, "s", 8)?;
        // The management network: etcd, the controllers and the agents' streams.
        let others: Vec<(HostId, Ipv4Addr)> = host_nodes
            .values()
            .map(|n| (n.id, n.v4))
            .chain(std::iter::once((s_node.id, s_node.v4)))
            .collect();
        let certs = if extras.mtls || extras.etcd_auth {
            let dir = lab.work_dir().join("certs");
            let hosts: Vec<String> = spec.hosts.iter().cloned().chain(["s".into()]).collect();
            let ctrls: Vec<String> = (1..=members.len()).map(|i| format!("c{i}")).collect();
            let names: Vec<String> = units.iter().map(|u| u.name.clone()).collect();
            let etcd: Vec<(String, Ipv4Addr)> = if extras.etcd_auth {
                members
                    .iter()
                    .map(|(h, v4)| (lab.host_info(*h).name.clone(), mgmt_addr_of(*v4)))
                    .collect()
            } else {
                Vec::new()
            };
            make_certs_etcd(&bins, &dir, &hosts, &ctrls, &names, &etcd)?;
            Some(dir)
        } else {
            None
        };
        let cp = ControlPlane::start_secure(
            &mut lab,
            &bins,
            &members,
            &others,
            &spec.controller_args,
            certs.as_deref(),
            extras.etcd_auth,
        )?;
        // Placements in etcd, as an operator writes them.
        for (i, (u, s)) in units.iter().zip(&spec.units).enumerate() {
            let mut t = topo.clone();
            t.service_v4 = u.service;
            let first = unit_networks(i, 1)
                .next()
                .map_or_else(String::new, |p| p.to_string());
            let extra = format!(
                "hold_time = 9\n[[network]]\nprefix = \"{first}\"\ncount = {}\n",
                u.routes
            );
            let mut neighbors = Vec::new();
            for (name, addr, asn) in [
                ("frr", topo.peer.v4, PLANE_PEER_AS),
                ("bird", topo.feed.v4, PLANE_BIRD_AS),
                ("gobgp", Ipv4Addr::new(198, 18, 0, 6), PLANE_GOBGP_AS),
            ] {
                if s.peers_with(name, spec.more_peers) {
                    neighbors.push((IpAddr::V4(addr), asn));
                }
            }
            let mut extra = extra;
            for peer in &s.peers {
                let (client, other) = match peer.split_once(':') {
                    Some(("unit", n)) => (false, n),
                    Some(("rr-client", n)) => (true, n),
                    _ => continue,
                };
                let idx = spec
                    .units
                    .iter()
                    .position(|x| x.name == other)
                    .ok_or_else(|| LabError::Invalid(format!("{}: no unit {other}", u.name)))?;
                extra.push_str(&format!(
                    "\n[[neighbor]]\naddress = \"{}\"\nremote_asn = {}\nlocal_address = \"{}\"\nimport = \"all\"\nexport = \"all\"\nroute_reflector_client = {client}\n",
                    Ipv4Addr::new(198, 18, 0, 10 + idx as u8),
                    crate::NSR_LOCAL_AS,
                    u.service
                ));
            }
            if let Some(more) = extras.unit_config.get(&u.name) {
                extra.push_str("\n[global]\n");
                match &certs {
                    Some(d) => extra.push_str(&more.replace("@CERTS@", &d.to_string_lossy())),
                    None => extra.push_str(more),
                }
            }
            if let Some((user, file)) = &u.store_user {
                extra.push_str(&format!(
                    "\n[nsr]\nstore_user = \"{user}\"\nstore_password_file = \"{}\"\n",
                    file.display()
                ));
            }
            let config = nsr_config(&t, &redis.url(), &u.name, &neighbors, &extra);
            std::fs::write(lab.work_dir().join(format!("{}.toml", u.name)), &config)
                .map_err(|e| LabError::Invalid(format!("unit config: {e}")))?;
            let mut rec = unit_record(
                &u.name,
                &s.primary,
                &s.backup,
                &config,
                &[format!("{}/24", u.service)],
                s.app_failure.as_deref(),
            );
            if extras.preheated.contains(&u.name) {
                rec["preheated"] = Value::Bool(true);
            }
            cp.place(&mut lab, &rec)?;
            let c = &u.containers[&s.primary];
            lab.exec_ok(
                c.id,
                &[
                    "ip",
                    "addr",
                    "add",
                    &format!("{}/24", u.service),
                    "dev",
                    &c.ifname,
                ],
            )?;
        }
        // Probes: the leader's probe plan (each host's data address, port 7,
        // where a reset answers; each unit's service address); none at all
        // with `no_probes`.
        let mut hosts = Vec::new();
        for (h, node) in &host_nodes {
            let opts = AgentOpts {
                name: h.clone(),
                failsafe: Some(cp.mgmt_addr[&node.id]),
                probe_addr: Some(format!("{}:7", node.v4)),
                static_probes: spec.no_probes,
                containers: units
                    .iter()
                    .map(|u| {
                        let c = &u.containers[h];
                        (
                            u.name.clone(),
                            lab.netns(c.id).to_string(),
                            c.ifname.clone(),
                        )
                    })
                    .collect(),
                tls: certs.clone(),
                ..AgentOpts::default()
            };
            let mut boot = extras.agent_args.clone();
            for (u, s) in units.iter().zip(&spec.units) {
                if s.primary == *h {
                    let cfg = lab.work_dir().join(format!("{}.toml", u.name));
                    boot.extend([
                        "--unit".to_string(),
                        format!("{}={}", u.name, cfg.display()),
                    ]);
                }
            }
            let (p, a) = cp.spawn_agent(&mut lab, &bins, node.id, &opts, &boot)?;
            hosts.push(PlaneHost {
                name: h.clone(),
                host: node.clone(),
                args: a
                    .args
                    .into_iter()
                    .chain(extras.agent_args.clone())
                    .collect(),
                status: a.status,
                work_dir: a.work_dir,
                agent: Some(p),
            });
        }
        let server = AgentOpts {
            name: "s".into(),
            server: true,
            static_probes: spec.no_probes,
            tls: certs.clone(),
            ..AgentOpts::default()
        };
        let (p, a) = cp.spawn_agent(&mut lab, &bins, s_node.id, &server, &[])?;
        let agent_server = PlaneHost {
            name: "s".into(),
            host: s_node,
            args: a.args,
            status: a.status,
            work_dir: a.work_dir,
            agent: Some(p),
        };
        let mut peer = PeerSpec::new(PLANE_PEER_AS, "192.0.2.201".parse().expect("router id"))
            .route(RouteSpec::new("203.0.113.0/24"));
        for (u, s) in units.iter().zip(&spec.units) {
            if !s.peers_with("frr", spec.more_peers) {
                continue;
            }
            peer = peer.neighbor(
                NeighborSpec::new(IpAddr::V4(u.service), crate::NSR_LOCAL_AS)
                    .local(IpAddr::V4(topo.peer.v4))
                    .hold_time(9)
                    .families(true, false),
            );
        }
        let frr = Frr::start(&mut lab, topo.peer.id, &peer)?;
        let mut others: Vec<Box<dyn Peer>> = Vec::new();
        if spec.more_peers {
            let g = topo.add_host(&mut lab, "g", 6)?;
            for (asn, node, last, bird) in [
                (PLANE_BIRD_AS, topo.feed.clone(), 5u8, true),
                (PLANE_GOBGP_AS, g, 6, false),
            ] {
                let mut s = PeerSpec::new(asn, Ipv4Addr::new(192, 0, 2, 200 + last)).route(
                    RouteSpec::new(&format!("203.0.{}.0/24", 113 + u32::from(last))),
                );
                let name = if bird { "bird" } else { "gobgp" };
                for (u, us) in units.iter().zip(&spec.units) {
                    if !us.peers_with(name, spec.more_peers) {
                        continue;
                    }
                    s = s.neighbor(
                        NeighborSpec::new(IpAddr::V4(u.service), crate::NSR_LOCAL_AS)
                            .local(IpAddr::V4(node.v4))
                            .hold_time(9)
                            .families(true, false),
                    );
                }
                others.push(if bird {
                    Box::new(crate::Bird::start(&mut lab, node.id, &s)?)
                } else {
                    Box::new(crate::Gobgp::start(&mut lab, node.id, &s)?)
                });
            }
        }
        let ctl_host = members[0].0;
        Ok(Plane {
            lab,
            topo,
            etcd: cp.etcd,
            frr,
            others,
            redis,
            bins,
            controllers: cp.controllers,
            hosts,
            agent_server,
            units,
            ctl_host,
            mgmt: cp.mgmt,
            controller_hosts: cp.controller_hosts,
            controller_argv: cp.controller_argv,
            custom_peers: spec.units.iter().any(|u| !u.peers.is_empty()),
            certs,
        })
    }

    /// Starts a peer of kind `P` on a host `name` added to the bridge at
    /// `.n` (a peer under test beside the plane's own, e.g. with TCP-MD5 or
    /// BFD towards a unit configured through [`PlaneExtras`]).
    pub fn start_peer<P: Peer>(
        &mut self,
        name: &str,
        n: u8,
        spec: &PeerSpec,
    ) -> Result<(NsrHost, P)> {
        let h = self.topo.add_host(&mut self.lab, name, n)?;
        let p = P::start(&mut self.lab, h.id, spec)?;
        Ok((h, p))
    }

    /// What a `holdfast-bfd-relay` covering `instances` adds to its
    /// command line to reach the store: with Redis ACL users, its own
    /// read-only user (`hf-relay`, [`store_user`]) as `--store-user` and
    /// `--store-password-file`; nothing without.
    pub fn relay_store_args(&self, instances: &[&str]) -> Result<Vec<String>> {
        if !self.redis.acl() {
            return Ok(Vec::new());
        }
        let mut what = vec!["relay"];
        what.extend_from_slice(instances);
        let (user, file) = store_user(&self.lab, &self.redis, &self.bins.holdfast, &what)?;
        Ok(vec![
            "--store-user".into(),
            user,
            "--store-password-file".into(),
            file.to_string_lossy().into_owned(),
        ])
    }

    /// The host named `name`.
    pub fn host(&self, name: &str) -> &PlaneHost {
        self.hosts
            .iter()
            .find(|h| h.name == name)
            .unwrap_or_else(|| panic!("no plane host {name}"))
    }

    /// The unit named `name`.
    pub fn unit(&self, name: &str) -> &PlaneUnit {
        self.units
            .iter()
            .find(|u| u.name == name)
            .unwrap_or_else(|| panic!("no plane unit {name}"))
    }

    /// Every replica's status.
    pub fn statuses(&self) -> Vec<Value> {
        controller_statuses(&self.status_files())
    }

    /// The leader's status, once one leads with `agents` agents attached.
    pub fn wait_leader(&self, agents: usize, within: Duration) -> Result<Value> {
        wait_leader_in(&self.status_files(), agents, within)
    }

    /// Every verdict any replica recorded, oldest first per replica.
    pub fn verdicts(&self) -> Vec<Value> {
        controller_verdicts(&self.status_files())
    }

    /// The replicas' status files.
    fn status_files(&self) -> Vec<PathBuf> {
        self.controllers.iter().map(|(_, s)| s.clone()).collect()
    }

    /// `GET /metrics` of a process listening on 127.0.0.1:`port` in the
    /// namespace of `host` (controllers: 9180, agents: 9181).
    pub fn scrape(&self, host: HostId, port: u16) -> Result<String> {
        let ns = self.lab.netns(host).to_string();
        let got = holdfast_linux::netns::in_netns(&ns, move || -> std::io::Result<String> {
            use std::io::{Read, Write};
            let mut s = std::net::TcpStream::connect(("127.0.0.1", port))?;
            s.set_read_timeout(Some(Duration::from_secs(5)))?;
            s.write_all(b"GET /metrics HTTP/1.1\r\nHost: lab\r\nConnection: close\r\n\r\n")?;
            let mut body = String::new();
            s.read_to_string(&mut body)?;
            Ok(body)
        })
        .and_then(|r| r)
        .map_err(|e| LabError::Invalid(format!("scraping 127.0.0.1:{port} in {ns}: {e}")))?;
        Ok(got)
    }

    /// The leader's replica (its index in [`Plane::controllers`]).
    pub fn leader_index(&self) -> Option<usize> {
        self.controllers
            .iter()
            .position(|(_, s)| json_file(s).is_some_and(|v| v["role"] == "leader"))
    }

    /// SIGKILLs the `i`th controller replica.
    pub fn kill_controller(&mut self, i: usize) {
        let p = self.controllers[i].0;
        self.lab.kill(p, Signal::Kill);
    }

    /// Starts the `i`th controller replica again (after
    /// [`Plane::kill_controller`]).
    pub fn restart_controller(&mut self, i: usize) -> Result<()> {
        let argv: Vec<&str> = self.controller_argv[i].iter().map(String::as_str).collect();
        let name = format!("controller-c{}-again-{}", i + 1, self.lab.proc_count());
        let p = self.lab.spawn(
            self.controller_hosts[i],
            &name,
            &argv,
            &[("HOLDFAST_LOG", "info")],
        )?;
        self.controllers[i].0 = p;
        Ok(())
    }

    /// The host the `i`th controller replica runs on.
    pub fn controller_host(&self, i: usize) -> HostId {
        self.controller_hosts[i]
    }

    /// The pid of `unit` as `host`'s agent reports it.
    pub fn unit_pid(&self, unit: &str, host: &str) -> Option<u64> {
        agent_unit_pid(&self.host(host).status, unit)
    }

    /// `holdfast ctl ARGS --json` on a control host (as the operator
    /// `admin` when etcd checks client certificates).
    pub fn ctl(&self, args: &[&str]) -> Result<Value> {
        ctl_json(
            &self.lab,
            self.ctl_host,
            &self.bins.ctl,
            &self.etcd.endpoints(),
            self.etcd.certs().and(self.certs.as_deref()),
            args,
        )
    }

    /// `(primary, backup)` of `unit` per `holdfast ctl units`.
    pub fn placement(&self, unit: &str) -> Result<(String, Option<String>)> {
        placement_of(&self.ctl(&["units"])?, unit)
    }

    /// Every peer: every unit's session Established with its routes (and
    /// the one route of each other peer, which the units pass on).
    pub fn wait_established(&self, within: Duration) -> Result<()> {
        wait_for_every(
            "every peer: every unit's session Established with its routes",
            within,
            Duration::from_millis(200),
            || {
                for peer in self.peers() {
                    let s = peer.sessions(&self.lab)?;
                    let ok = self.units.iter().all(|u| {
                        let mine: Vec<_> = s
                            .iter()
                            .filter(|v| v.neighbor == IpAddr::V4(u.service))
                            .collect();
                        if self.custom_peers {
                            // Custom peerings: Established where configured.
                            return mine.iter().all(|v| v.state == SessionState::Established);
                        }
                        mine.iter().any(|v| {
                            v.state == SessionState::Established
                                && v.prefixes_received == Some(u.routes + self.others.len() as u32)
                        })
                    });
                    if !ok {
                        return Ok(None);
                    }
                }
                Ok(Some(()))
            },
        )
    }

    /// Waits until `unit` on `host` has replicated its session (PROTECTED).
    pub fn wait_protected(&self, unit: &str, host: &str, within: Duration) -> Result<()> {
        let sock = self.host(host).work_dir.join(unit).join("holdfastd.sock");
        wait_protected_at(
            &self.bins.holdfast,
            &sock,
            &format!("{unit} on {host}"),
            within,
        )
    }

    /// Waits until `unit` is placed on a host not in `from` and that host's
    /// agent runs it; returns the host.
    pub fn wait_moved_off(&self, unit: &str, from: &[&str], within: Duration) -> Result<String> {
        wait_for_every(
            &format!("{unit} taken over off {from:?}"),
            within,
            Duration::from_millis(20),
            || {
                let (primary, _) = self.placement(unit)?;
                Ok(
                    (!from.contains(&primary.as_str()) && self.unit_pid(unit, &primary).is_some())
                        .then_some(primary),
                )
            },
        )
    }

    /// Waits until `unit` runs on `host` with a pid other than `not`.
    pub fn wait_running(
        &self,
        unit: &str,
        host: &str,
        not: Option<u64>,
        within: Duration,
    ) -> Result<u64> {
        wait_for_every(
            &format!("{unit} running on {host}"),
            within,
            Duration::from_millis(20),
            || Ok(self.unit_pid(unit, host).filter(|p| Some(*p) != not)),
        )
    }

    /// Waits for a verdict whose finding is `kind` (`application`,
    /// `container`, `container_network`, `host`, `host_network`,
    /// `controller_cut_off`, ...) about `subject` (a unit or host name).
    pub fn wait_verdict(&self, kind: &str, subject: &str, within: Duration) -> Result<Value> {
        wait_for_every(
            &format!("a verdict {kind} about {subject}"),
            within,
            Duration::from_millis(20),
            || {
                Ok(self
                    .verdicts()
                    .into_iter()
                    .find(|v| verdict_is(v, kind, subject)))
            },
        )
    }

    /// SIGKILLs `unit`'s holdfastd on `host` (an application failure).
    pub fn kill_unit(&self, unit: &str, host: &str) -> Result<u64> {
        self.signal_unit(unit, host, Signal::Kill)
    }

    /// An application failure handled end to end: SIGKILLs `unit`'s
    /// holdfastd on `host`, waits until the controller has it running on
    /// another host and PROTECTED there, each within `within`.
    pub fn kill_and_take_over(&self, unit: &str, host: &str, within: Duration) -> Result<Moved> {
        let t = Instant::now();
        self.kill_unit(unit, host)?;
        let to = self.wait_moved_off(unit, &[host], within)?;
        let running = t.elapsed();
        self.wait_protected(unit, &to, within)?;
        Ok(Moved {
            to,
            running,
            protected: t.elapsed(),
        })
    }

    /// SIGSTOPs `unit`'s holdfastd on `host` (a hang, or a stall once it
    /// is sent SIGCONT).
    pub fn stop_unit(&self, unit: &str, host: &str) -> Result<u64> {
        self.signal_unit(unit, host, Signal::Stop)
    }

    fn signal_unit(&self, unit: &str, host: &str, sig: Signal) -> Result<u64> {
        let pid = self
            .unit_pid(unit, host)
            .ok_or_else(|| LabError::Invalid(format!("{unit} not running on {host}")))?;
        if !crate::send_signal(pid as u32, sig, false) {
            return Err(LabError::Invalid(format!(
                "{sig:?} to {unit} (pid {pid}) failed"
            )));
        }
        Ok(pid)
    }

    /// Every process of `unit`'s container on `host` SIGKILLed, then the
    /// container deleted (a container failure).
    pub fn kill_container(&mut self, unit: &str, host: &str) -> Result<Vec<u32>> {
        let c = self.unit(unit).containers[host].clone();
        kill_container_ns(self.lab.netns(c.id))
    }

    /// `unit`'s container on `host`: its bridge port down or up (a
    /// container-network failure).
    pub fn container_link(&self, unit: &str, host: &str, up: bool) -> Result<()> {
        let c = &self.unit(unit).containers[host];
        self.lab.set_bridge_port_up(self.topo.bridge, c.id, up)
    }

    /// `host`'s bridge ports, its containers' included, down or up (a host
    /// network failure, or a blip).
    pub fn host_links(&self, host: &str, up: bool) -> Result<()> {
        let h = self.host(host).host.id;
        self.lab.set_bridge_port_up(self.topo.bridge, h, up)?;
        for u in &self.units {
            self.lab
                .set_bridge_port_up(self.topo.bridge, u.containers[host].id, up)?;
        }
        Ok(())
    }

    /// A host failure: every process of `host` and of its containers
    /// SIGKILLed, every link down.
    pub fn fail_host(&mut self, host: &str) -> Result<Vec<u32>> {
        let h = self.host(host).host.id;
        let mut killed = kill_all(self.lab.netns(h));
        for u in &self.units {
            let c = u.containers[host].id;
            if std::path::Path::new(&format!("/run/netns/{}", self.lab.netns(c))).exists() {
                killed.extend(kill_all(self.lab.netns(c)));
                self.lab.set_host_links_up(c, false)?;
            }
        }
        self.lab.set_host_links_up(h, false)?;
        if let Some(i) = self.hosts.iter().position(|x| x.name == host) {
            self.hosts[i].agent = None;
        }
        Ok(killed)
    }

    /// 30% random loss both ways on `host`'s management traffic (iptables'
    /// `statistic` match in its namespace, for the `mgmt` bridge's
    /// 198.19.0.0/24), or its end.
    pub fn mgmt_loss(&self, host: &str, on: bool) -> Result<()> {
        let h = self.host(host).host.id;
        let op = if on { "-I" } else { "-D" };
        for (chain, dir) in [("INPUT", "-s"), ("OUTPUT", "-d")] {
            self.lab.exec_ok(
                h,
                &[
                    "iptables",
                    op,
                    chain,
                    dir,
                    "198.19.0.0/24",
                    "-m",
                    "statistic",
                    "--mode",
                    "random",
                    "--probability",
                    "0.3",
                    "-j",
                    "DROP",
                ],
            )?;
        }
        Ok(())
    }

    /// Every etcd member SIGSTOPped for `d`, then SIGCONT (a stalled etcd:
    /// its connections stay open, its answers stop).
    pub fn stall_etcd(&self, d: Duration) -> Result<()> {
        let all: Vec<usize> = (0..self.etcd.members().len()).collect();
        self.stall_etcd_members(&all, d)
    }

    /// The etcd members numbered `which` SIGSTOPped for `d`, then SIGCONT.
    pub fn stall_etcd_members(&self, which: &[usize], d: Duration) -> Result<()> {
        let pids: Vec<u32> = which
            .iter()
            .filter_map(|&i| self.etcd.members().get(i).map(|m| m.pid()))
            .collect();
        let mut failed = Vec::new();
        for &pid in &pids {
            if !crate::send_signal(pid, Signal::Stop, false) {
                failed.push(pid);
            }
        }
        std::thread::sleep(d);
        for &pid in &pids {
            if !crate::send_signal(pid, Signal::Cont, false) {
                failed.push(pid);
            }
        }
        if failed.is_empty() {
            Ok(())
        } else {
            Err(LabError::Invalid(format!(
                "signalling etcd members {failed:?} failed"
            )))
        }
    }

    /// Cuts (or restores) the gRPC streams between `host`'s agent and the
    /// controllers (their port 50051), leaving etcd and the data network
    /// alone: the controller is cut off from a healthy host.
    pub fn cut_from_controllers(&self, host: &str, cut: bool) -> Result<()> {
        let h = self.host(host).host.id;
        let op = if cut { "-I" } else { "-D" };
        for (chain, dir) in [("OUTPUT", "--dport"), ("INPUT", "--sport")] {
            self.lab.exec_ok(
                h,
                &[
                    "iptables", op, chain, "-p", "tcp", dir, "50051", "-j", "DROP",
                ],
            )?;
        }
        Ok(())
    }

    /// `unit`'s container on `host` re-created after a container failure
    /// (the same namespace name, interface and address), as a container
    /// runtime would.
    pub fn revive_container(&mut self, unit: &str, host: &str) -> Result<()> {
        let c = self.unit(unit).containers[host].id;
        self.lab.revive_host(c)
    }

    /// Brings `host` back after a host or host-network failure: no stale
    /// service address left in its containers, what they left queued
    /// dropped, every link up, an agent running (a new one after a host
    /// failure), and `holdfast ctl reset HOST`.
    pub fn heal_host(&mut self, host: &str) -> Result<()> {
        let h = self.host(host).host.id;
        let containers: Vec<(HostId, String, String)> = self
            .units
            .iter()
            .map(|u| {
                let c = &u.containers[host];
                (c.id, c.ifname.clone(), format!("{}/24", u.service))
            })
            .collect();
        relink_host(&self.lab, self.topo.bridge, h, &containers)?;
        if self.host(host).agent.is_none() {
            self.restart_agent(host)?;
        }
        let done = self.ctl(&["reset", host, "--wait", "20"])?;
        if done["done"] != true {
            return Err(LabError::Invalid(format!(
                "holdfast ctl reset {host}: {done}"
            )));
        }
        Ok(())
    }

    /// Starts `host`'s agent again (after a host failure: links up first,
    /// and what the bridge queued for it dropped).
    pub fn restart_agent(&mut self, host: &str) -> Result<()> {
        let i = self
            .hosts
            .iter()
            .position(|x| x.name == host)
            .ok_or_else(|| LabError::Invalid(format!("no plane host {host}")))?;
        let h = self.hosts[i].clone();
        let argv: Vec<&str> = h.args.iter().map(String::as_str).collect();
        let p = self.lab.spawn(
            h.host.id,
            &format!("agent-{host}-again-{}", self.lab.proc_count()),
            &argv,
            &[("RUST_LOG", "info")],
        )?;
        self.hosts[i].agent = Some(p);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::unit_networks;

    /// What holdfastd originates for `[[network]] prefix = first, count =
    /// N`: N consecutive /24s from the unit's first.
    #[test]
    fn a_units_networks_are_consecutive_24s_from_its_own_first() {
        let p: Vec<String> = unit_networks(0, 3).map(|p| p.to_string()).collect();
        assert_eq!(p, ["100.100.0.0/24", "100.100.1.0/24", "100.100.2.0/24"]);
        let q: Vec<String> = unit_networks(2, 1).map(|p| p.to_string()).collect();
        assert_eq!(q, ["100.102.0.0/24"]);
        assert_eq!(unit_networks(0, 300).count(), 300);
    }
}
