//! `holdfast lab`: a [`Scenario`] brought up, inspected, failed and torn down by
//! separate invocations, which share a state file.
//!
//! * [`up`] builds the scenario (namespaces on one bridge, Redis, the peers) with its
//!   control plane (`plane`: etcd, three `holdfast-controller` replicas, a
//!   `holdfast-agent` on the unit's primary and backup hosts with a container per unit,
//!   the agent server's agent), writes the unit's placement to etcd so that the
//!   primary's agent starts it, waits until every session is Established and the unit
//!   PROTECTED, keeps it running ([`Lab::keep`]) and writes a [`LabState`] (run id,
//!   namespaces, processes with their pids, the control plane, which host runs the
//!   unit).
//!   Secure by default (issue 30): the certificates are made at up (`holdfast ctl
//!   certs init`) for mutual TLS between the controllers and the agents, and Redis runs
//!   with ACL users (the unit's and the relay's own); [`up_with`] with
//!   [`UpOptions::insecure`] (`lab up --insecure`) is plaintext, with a warning.
//! * [`status`] reads it back: every unit's processes (alive?), holdfastd's `show
//!   summary` / `show nsr` over its control socket, each peer's sessions through its own
//!   CLI, the hosts' links, the controllers (which leads) and the agents.
//! * [`fail`] injects one failure of TENSOR's Table 1 ([`FailureKind`]) and nothing
//!   else: the controller finds it and moves the unit through the agents; `fail` waits
//!   for the controller's verdict and for the unit to run PROTECTED on its new host, and
//!   reports the controller's own detection time and the migration's phases. The state
//!   then records the new primary and its host.
//! * [`heal`] brings a failed host back (links up, its agent started again after a host
//!   failure, `holdfast ctl reset HOST`), so the controller may place a backup there.
//! * [`down`] tears the lab down from the state file and always runs
//!   [`cleanup_stale`], which removes what any crashed run left.
//!
//! The state file is `$HOLDFAST_LAB_STATE`, else `$HOLDFAST_LAB_DIR/holdfast-lab-state.json`
//! when `HOLDFAST_LAB_DIR` is set, else `/run/holdfast-lab/state.json`
//! ([`default_state_file`]). One lab per state file.
//!
//! Split by concern: [`LabState`] and the scenario search in `state`, [`OpenLab`] and
//! status in `open`, failure injection and heal in `fail`, the control plane in
//! `plane`, the reports in `report`.
//!
//! Known issues: the scenario's one holdfastd unit is the only one placed; its
//! primary and backup hosts are its agents' hosts, so after a host failure the unit has
//! no backup until `heal` (the controller places none on a failed host).

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use holdfast_lab::{
    cleanup_stale, find_binary, io_ctx, list_netns, netns_pids, preflight, require_tool, run_id_of,
    stale_namespaces, wait_ok, Bird, Exabgp, Frr, Gobgp, HostId, IfAddr, Lab, LabError, NsrHost,
    NsrTopo, Peer, PeerKind, PeerSpec, Redis, Result, NSR_V4_LEN, NSR_V6_LEN,
};

use crate::scenario::{parse_peer_kind, Scenario};
use holdfast_lab::plane::store_user;
use state::unix_ms;

mod fail;
mod open;
mod plane;
mod report;
mod state;

pub use holdfast_lab::link_state;
pub use open::OpenLab;
pub use plane::{
    has_addr, AgentRecord, ContainerRecord, ControllerRecord, LabPlane, PlaneRecord, UnitSocket,
};
pub use report::{
    ControlStatus, DownReport, FailReport, HealReport, HostStatus, PhaseMs, ServiceStatus, Status,
    TakeoverReport, UnitStatus,
};
pub use state::{
    default_state_file, find_scenario, list_scenarios, scenario_dirs, FailedHost, FailureKind,
    LabState, PeerRecord, RedisRecord, UnitProc, UnitRecord, STATE_VERSION,
};

/// Name of the bridge every scenario host is on.
pub const BRIDGE_NAME: &str = "lan";
/// Deadline of each wait of [`up`] (sessions Established, routes exchanged, PROTECTED).
pub const UP_TIMEOUT: Duration = Duration::from_secs(90);
/// Deadline for the new primary to be PROTECTED after a takeover.
const PROTECTED_TIMEOUT: Duration = Duration::from_secs(30);
/// What the lab's name (and so its work directory, `holdfast-lab-lab_<scenario>-<run>`)
/// starts with.
const WORK_DIR_PREFIX: &str = "lab_";
/// Deadline for killed processes to be gone.
const KILL_TIMEOUT: Duration = Duration::from_secs(5);

/// The NSR topology of a built scenario: `a` = the unit's first primary host, `b` = its
/// first backup host, `redis` = the Redis host, `peer` = the host of its first
/// neighbour, `feed` = another host (or `peer`).
fn topo_of(lab: &Lab, sc: &Scenario) -> Result<NsrTopo> {
    let (bridge, info) = lab
        .bridges()
        .find(|(_, b)| b.name == BRIDGE_NAME)
        .ok_or_else(|| LabError::Invalid(format!("no bridge `{BRIDGE_NAME}` in the lab")))?;
    let nsr_host = |name: &str| -> Result<NsrHost> {
        let spec = sc
            .host(name)
            .ok_or_else(|| LabError::Invalid(format!("no host `{name}` in the scenario")))?;
        let id = lab
            .host_by_name(name)
            .ok_or_else(|| LabError::Invalid(format!("no host `{name}` in the lab")))?;
        let port = info
            .ports
            .iter()
            .find(|p| p.host == id)
            .ok_or_else(|| LabError::Invalid(format!("host `{name}` is not on the bridge")))?;
        Ok(NsrHost {
            id,
            ifname: port.host_if.clone(),
            v4: spec.v4,
            v6: spec.v6,
        })
    };
    let unit = sc
        .holdfastd
        .first()
        .ok_or_else(|| LabError::Invalid("the scenario has no holdfastd unit".into()))?;
    let peer_host = unit
        .neighbors
        .first()
        .and_then(|n| sc.peer(n))
        .map_or(unit.primary.as_str(), |p| p.host.as_str());
    let used = [
        unit.primary.as_str(),
        unit.backup.as_str(),
        sc.redis.host.as_str(),
        peer_host,
    ];
    let feed = sc
        .hosts
        .iter()
        .map(|h| h.name.as_str())
        .find(|h| !used.contains(h))
        .unwrap_or(peer_host);
    Ok(NsrTopo {
        bridge,
        peer: nsr_host(peer_host)?,
        redis: nsr_host(&sc.redis.host)?,
        a: nsr_host(&unit.primary)?,
        b: nsr_host(&unit.backup)?,
        feed: nsr_host(feed)?,
        service_v4: sc.service.v4,
        service_v6: sc.service.v6,
    })
}

fn start_peer(
    lab: &mut Lab,
    kind: PeerKind,
    host: HostId,
    spec: &PeerSpec,
) -> Result<Box<dyn Peer>> {
    Ok(match kind {
        PeerKind::Frr => Box::new(Frr::start(lab, host, spec)?),
        PeerKind::Bird => Box::new(Bird::start(lab, host, spec)?),
        PeerKind::Gobgp => Box::new(Gobgp::start(lab, host, spec)?),
        PeerKind::Exabgp => Box::new(Exabgp::start(lab, host, spec)?),
    })
}

/// How [`up_with`] builds the lab.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct UpOptions {
    /// Plaintext (`lab up --insecure`): no certificates, the replicas and agents
    /// `--insecure`, Redis without ACL users. A warning says so at start.
    pub insecure: bool,
}

/// What `lab up --insecure` warns.
pub const INSECURE_WARNING: &str = "warning: --insecure: the controllers' Attach and the agents' failsafe are plaintext gRPC (no client identity), etcd takes any client over plain HTTP (no authentication) and Redis takes any client (no ACL users)";

/// `lab up`: builds the scenario in `scenario_file`, keeps it running and writes
/// `state_file`, secure ([`up_with`] with the default [`UpOptions`]).
pub fn up(
    scenario_file: &Path,
    state_file: &Path,
    progress: &mut dyn FnMut(&str),
) -> Result<Status> {
    up_with(scenario_file, state_file, &UpOptions::default(), progress)
}

/// `lab up`: builds the scenario in `scenario_file`, keeps it running and writes
/// `state_file`. Refuses when a lab of that state file is up. Progress lines go to
/// `progress`. On failure everything built is torn down (the work directory is kept and
/// its path printed). Secure unless `opts.insecure`: certificates made at up (mutual
/// TLS between the controllers and the agents), Redis with an ACL user for the unit
/// (and the relay).
pub fn up_with(
    scenario_file: &Path,
    state_file: &Path,
    opts: &UpOptions,
    progress: &mut dyn FnMut(&str),
) -> Result<Status> {
    let sc = Scenario::load(scenario_file)?;
    if state_file.exists() {
        match LabState::load(state_file) {
            Ok(st) if !st.live_namespaces()?.is_empty() => {
                return Err(LabError::Invalid(format!(
                "a lab is already up (scenario `{}`, run {}, state {}): `holdfast lab down` first",
                st.scenario.name,
                st.lab.run_id,
                state_file.display()
            )))
            }
            Ok(_) => {
                // Its namespaces are gone (a reboot): forget it.
                let _ = std::fs::remove_file(state_file);
            }
            Err(e) => {
                return Err(LabError::Invalid(format!(
                    "{e}; `holdfast lab down` removes it"
                )))
            }
        }
    }
    preflight(&sc.peer_kinds())?;
    for tool in ["redis-server", "redis-cli"] {
        require_tool(tool)?;
    }
    find_binary("holdfastd", "HOLDFASTD_BIN")?;
    for tool in ["etcd", "etcdctl", "iptables"] {
        require_tool(tool)?;
    }
    let removed = cleanup_stale()?;
    let t0 = Instant::now();
    let mut step = |m: &str| progress(&format!("[{:>6.2}s] {m}", t0.elapsed().as_secs_f64()));
    if opts.insecure {
        step(INSECURE_WARNING);
    }
    if removed > 0 {
        step(&format!(
            "removed {removed} namespace(s) left by crashed runs"
        ));
    }
    let mut lab = Lab::new(&format!("{WORK_DIR_PREFIX}{}", sc.name))?;
    let abs = std::path::absolute(scenario_file).unwrap_or_else(|_| scenario_file.into());
    let state = match build(&mut lab, &sc, &abs, !opts.insecure, &mut step) {
        Ok(s) => s,
        Err(e) => {
            lab.fail(&e.to_string());
            return Err(e);
        }
    };
    state.write(state_file)?;
    if let Err(e) = lab.keep(state_file) {
        let _ = std::fs::remove_file(state_file);
        return Err(e);
    }
    drop(lab);
    step(&format!("up; state in {}", state_file.display()));
    status(state_file)
}

fn build(
    lab: &mut Lab,
    sc: &Scenario,
    scenario_file: &Path,
    secure: bool,
    step: &mut dyn FnMut(&str),
) -> Result<LabState> {
    let mut members = Vec::new();
    for h in &sc.hosts {
        let id = lab.host(&h.name)?;
        members.push((
            id,
            vec![IfAddr::new(h.v4, NSR_V4_LEN), IfAddr::new(h.v6, NSR_V6_LEN)],
        ));
    }
    lab.bridge(BRIDGE_NAME, &members)?;
    let topo = topo_of(lab, sc)?;
    let unit = &sc.holdfastd[0];
    step(&format!(
        "{} hosts on bridge `{BRIDGE_NAME}` (run {})",
        sc.hosts.len(),
        lab.run_id(),
    ));
    let redis_host = sc
        .host(&sc.redis.host)
        .ok_or_else(|| LabError::Invalid("no Redis host".into()))?;
    let bind = IpAddr::V4(redis_host.v4);
    let redis = if secure {
        Redis::start_acl(lab, topo.redis.id, bind, sc.redis.port)?
    } else {
        Redis::start(lab, topo.redis.id, bind, sc.redis.port)?
    };
    step(&format!(
        "redis on {} ({}), pid {}{}",
        sc.redis.host,
        redis.url(),
        redis.pid(),
        if secure { ", with ACL users" } else { "" }
    ));
    let holdfast = find_binary("holdfast", "HOLDFAST_BIN")?
        .to_string_lossy()
        .into_owned();
    let unit_user = if secure {
        let (user, file) = store_user(lab, &redis, &holdfast, &["unit", &unit.instance])?;
        step(&format!(
            "store user {user} for {} (keys of its instance only; password file {})",
            unit.name,
            file.display()
        ));
        Some((user, file))
    } else {
        None
    };
    let config = sc.holdfastd_config_auth(
        unit,
        &topo,
        &redis.url(),
        unit_user.as_ref().map(|(u, f)| (u.as_str(), f.as_path())),
    )?;
    let plane = plane::start(lab, sc, &topo, unit, &config, secure, step)?;
    let name = format!("{}_0", unit.name);
    let pid = plane
        .agents
        .iter()
        .find(|a| a.host == unit.primary)
        .and_then(|a| holdfast_lab::plane::agent_unit_pid(&a.status, &unit.name))
        .and_then(|p| u32::try_from(p).ok())
        .ok_or_else(|| LabError::Invalid(format!("{} not running", unit.name)))?;
    let socket = plane
        .agents
        .iter()
        .find(|a| a.host == unit.primary)
        .map(|a| a.work_dir.join(&unit.name).join("holdfastd.sock"))
        .unwrap_or_default();
    let hf = UnitSocket(socket);
    step(&format!(
        "holdfastd {name} (instance {}) in its container on {}, pid {pid}; service address {} there",
        unit.instance, unit.primary, sc.service.v4
    ));
    let mut peers = Vec::new();
    let mut records = Vec::new();
    for p in &sc.peers {
        let kind = parse_peer_kind(&p.kind)
            .ok_or_else(|| LabError::Invalid(format!("peer kind `{}`", p.kind)))?;
        let host = lab
            .host_by_name(&p.host)
            .ok_or_else(|| LabError::Invalid(format!("no host `{}`", p.host)))?;
        let before = lab.proc_count();
        let drv = start_peer(lab, kind, host, &sc.peer_spec(p)?)?;
        let procs: Vec<usize> = (before..lab.proc_count()).collect();
        let pids = procs
            .iter()
            .filter_map(|i| lab.proc_id(*i).map(|id| lab.pid(id)))
            .collect::<Vec<u32>>();
        step(&format!(
            "{} `{}` (AS {}) on {}, pid {:?}, {} route(s)",
            kind,
            p.name,
            p.asn,
            p.host,
            pids,
            sc.peer_route_count(p)
        ));
        records.push(PeerRecord {
            name: p.name.clone(),
            procs,
            pids,
        });
        peers.push((p, drv));
    }
    let service = IpAddr::V4(sc.service.v4);
    wait_ok(
        &format!("{name}: every session Established"),
        UP_TIMEOUT,
        || {
            hf.all_established().then_some(()).ok_or_else(|| {
                format!(
                    "{:?}",
                    hf.neighbors()
                        .map(|n| n.into_iter().map(|x| x.state).collect::<Vec<_>>())
                )
            })
        },
    )?;
    for (_, drv) in &peers {
        drv.wait_established(lab, service, UP_TIMEOUT)?;
    }
    step("every session Established (holdfastd and each peer's own CLI)");
    wait_ok(&format!("{name}: PROTECTED"), UP_TIMEOUT, || {
        match hf.nsr() {
            Ok(n) if n.protected => Ok(()),
            Ok(n) => Err(format!("role {}, epoch {}, unprotected", n.role, n.epoch)),
            Err(e) => Err(e.to_string()),
        }
    })?;
    // Routes both ways.
    let ours = sc.unit_route_count(unit);
    wait_ok("routes exchanged", UP_TIMEOUT, || {
        let ns = hf.neighbors().map_err(|e| e.to_string())?;
        for (p, drv) in &peers {
            let h = sc
                .host(&p.host)
                .map(|h| h.v4.to_string())
                .unwrap_or_default();
            let want = sc.peer_route_count(p);
            let got = ns
                .iter()
                .find(|n| n.address == h)
                .map_or(0, |n| n.prefixes_received);
            if got < want {
                return Err(format!(
                    "holdfastd has {got} of {want} routes from {}",
                    p.name
                ));
            }
            let held = drv
                .session(lab, service)
                .map_err(|e| e.to_string())?
                .and_then(|s| s.prefixes_received)
                .unwrap_or(0);
            if u64::from(held) < ours {
                return Err(format!("{} holds {held} of our {ours} routes", p.name));
            }
        }
        Ok(())
    })?;
    step("routes exchanged both ways; holdfastd PROTECTED");
    for (p, drv) in peers.iter().filter(|(p, _)| p.bfd.is_some()) {
        wait_ok(&format!("{}: BFD Up", p.name), UP_TIMEOUT, || {
            match drv.bfd_session(lab, service).map_err(|e| e.to_string())? {
                Some(b) if b.up => Ok(()),
                other => Err(format!("BFD {other:?}")),
            }
        })?;
    }
    if sc.bfd_peer_count() > 0 {
        step(&format!(
            "BFD Up at {} peer(s) (their own CLI)",
            sc.bfd_peer_count()
        ));
    }
    if let Some(r) = &sc.relay {
        let auth = if secure {
            let (user, file) = store_user(lab, &redis, &holdfast, &["relay", &unit.instance])?;
            vec![
                "--store-user".to_string(),
                user,
                "--store-password-file".to_string(),
                file.to_string_lossy().into_owned(),
            ]
        } else {
            Vec::new()
        };
        start_relay(lab, sc, &r.host, &redis.url(), &unit.instance, &auth)?;
        step(&format!(
            "holdfast-bfd-relay on {} covers the {} BFD session(s)",
            r.host,
            sc.bfd_peer_count()
        ));
    }
    Ok(LabState {
        version: STATE_VERSION,
        scenario_file: scenario_file.to_path_buf(),
        scenario: sc.clone(),
        lab: lab.kept_state(),
        redis: RedisRecord {
            proc: redis.proc().index(),
            starts: redis.starts(),
        },
        peers: records,
        units: vec![UnitRecord {
            name: unit.name.clone(),
            config,
            generation: 1,
            primary: UnitProc {
                name,
                host: unit.primary.clone(),
                pid,
            },
            backup_host: unit.backup.clone(),
        }],
        plane,
        service_host: unit.primary.clone(),
        failed_hosts: Vec::new(),
        history: Vec::new(),
        up_unix_ms: unix_ms(),
    })
}

/// Starts `holdfast-bfd-relay` on `host` against the store and waits until its log
/// says it covers every BFD session of the scenario.
fn start_relay(
    lab: &mut Lab,
    sc: &Scenario,
    host: &str,
    url: &str,
    instance: &str,
    auth: &[String],
) -> Result<()> {
    let bin = find_binary("holdfast-bfd-relay", "HOLDFAST_BFD_RELAY")?;
    let bin = bin.to_string_lossy().to_string();
    let id = lab
        .host_by_name(host)
        .ok_or_else(|| LabError::Invalid(format!("no host `{host}`")))?;
    let mut args = vec![
        bin.as_str(),
        "--store",
        url,
        "--instance",
        instance,
        "--poll-ms",
        "100",
    ];
    args.extend(auth.iter().map(String::as_str));
    let p = lab.spawn(id, "bfd-relay", &args, &[("RUST_LOG", "info")])?;
    let err = lab.proc_logs(p).1.to_path_buf();
    let want = sc.bfd_peer_count();
    wait_ok("the relay covers the BFD sessions", UP_TIMEOUT, || {
        let log = std::fs::read_to_string(&err).unwrap_or_default();
        let n = log.matches("covering BFD session").count();
        (n >= want).then_some(()).ok_or(format!(
            "{n} of {want} covered; log: {}",
            log.lines().rev().take(5).collect::<Vec<_>>().join(" | ")
        ))
    })
}

/// `lab status`: the state file read back against what runs.
pub fn status(state_file: &Path) -> Result<Status> {
    let mut open = OpenLab::load(state_file)?;
    Ok(open.status(state_file))
}

/// `lab fail KIND TARGET`: injects the failure (TARGET is a holdfastd unit for
/// `application` / `container` / `switchover`, a host for `host` / `host-network`;
/// `switchover` is the planned one, `holdfast ctl switchover`) and nothing else; when
/// the unit's primary was hit, waits for the controller's verdict and for the unit to
/// run PROTECTED on the host the controller moved it to; the state then records the
/// new primary and its host. The state is written even when the wait fails.
pub fn fail(
    state_file: &Path,
    kind: FailureKind,
    target: &str,
    progress: &mut dyn FnMut(&str),
) -> Result<FailReport> {
    let mut open = OpenLab::load(state_file)?;
    let r = open.fail(kind, target, progress);
    let saved = open.save(state_file);
    let report = r?;
    saved?;
    Ok(report)
}

/// `lab heal HOST`: brings a host back after a `host` or `host-network` failure:
/// deletes a stale service address in its containers, drops the packets they left
/// queued (neighbour queues, qdisc: a late BFD Down would reach the peers), sets every
/// link up, starts its agent again after a host failure, and runs `holdfast ctl reset
/// HOST` (a failed host is not reused until reset), after which the controller may
/// place the unit's backup there.
pub fn heal(state_file: &Path, host: &str) -> Result<HealReport> {
    let mut open = OpenLab::load(state_file)?;
    let r = open.heal(host);
    let saved = open.save(state_file);
    let report = r?;
    saved?;
    Ok(report)
}

/// `lab down`: tears down the lab of `state_file` (every process of its namespaces,
/// the namespaces, its work directory unless `HOLDFAST_LAB_KEEP=1`), removes the state
/// file, and always runs [`cleanup_stale`] (what crashed runs of any lab left; the work
/// directories of crashed `lab up` runs go too). Fails if a namespace of the run is
/// still there afterwards.
pub fn down(state_file: &Path) -> Result<DownReport> {
    let mut report = DownReport::default();
    if state_file.exists() {
        match LabState::load(state_file) {
            Ok(st) => {
                report.run_id = Some(st.lab.run_id.clone());
                report.scenario = Some(st.scenario.name.clone());
                report.namespaces = st.live_namespaces()?;
                report.pids = st
                    .lab
                    .procs
                    .iter()
                    .map(|p| p.pid)
                    .chain(report.namespaces.iter().flat_map(|n| netns_pids(n)))
                    .collect();
                report.pids.sort_unstable();
                report.pids.dedup();
                Lab::adopt(st.lab)?.teardown();
            }
            Err(e) => report
                .notes
                .push(format!("unreadable state file removed ({e})")),
        }
        std::fs::remove_file(state_file)
            .map_err(io_ctx(format!("removing {}", state_file.display())))?;
    } else {
        report
            .notes
            .push(format!("no state file {}", state_file.display()));
    }
    // Runs of `lab up` that crashed: their work directories go too (those of crashed
    // tests stay, for their logs).
    let mut crashed: Vec<String> = stale_namespaces()?
        .iter()
        .filter_map(|n| run_id_of(n).map(str::to_string))
        .collect();
    crashed.dedup();
    report.stale_removed = cleanup_stale()?;
    let base = std::env::var_os("HOLDFAST_LAB_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/tmp"));
    if let Ok(entries) = std::fs::read_dir(&base) {
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            let ours = name.starts_with(&format!("holdfast-lab-{WORK_DIR_PREFIX}"))
                && crashed.iter().any(|id| name.ends_with(&format!("-{id}")));
            if ours && std::fs::remove_dir_all(e.path()).is_ok() {
                report.stale_work_dirs.push(e.path());
            }
        }
    }
    if let Some(id) = &report.run_id {
        let left: Vec<String> = list_netns()?
            .into_iter()
            .filter(|n| run_id_of(n) == Some(id.as_str()))
            .collect();
        if !left.is_empty() {
            return Err(LabError::Invalid(format!(
                "namespaces left after teardown: {left:?}"
            )));
        }
    }
    Ok(report)
}
