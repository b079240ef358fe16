//! The control plane's parts, for any lab that wants one: the management
//! network with a 3-member etcd cluster and a `holdfast-controller` replica
//! on each member ([`ControlPlane::start`]), a host agent's command line
//! ([`ControlPlane::agent_args`]), a unit's placement written to etcd as an
//! operator would ([`unit_record`], [`ControlPlane::place`]), and what the
//! controllers and agents say through their status files
//! ([`controller_statuses`], [`agent_unit_pid`], [`ctl_json`]).
//! [`super::Plane`] is built from them, and so is `holdfast lab`'s
//! control plane (crates/labctl), which keeps them across invocations.
//!
//! Known issues: the management network is IPv4 only (198.19.0.0/24, the
//! same last octet as each host's data address), so hosts must have
//! distinct last octets.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr};
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::Value;

use crate::error::{LabError, Result};
use crate::{wait_for_every, AclServers, BridgeId, Etcd, HostId, Lab, ProcId};

use super::PlaneBins;

/// Where each controller replica serves the agents' `Attach` streams.
pub const CONTROLLER_PORT: u16 = 50051;
/// Where each host agent serves the failsafe, on the management network.
pub const FAILSAFE_PORT: u16 = 50052;
/// The etcd key prefix of the units' placements.
pub const UNITS_PREFIX: &str = "/holdfast/default/units/";

/// The management network, etcd and the controller replicas.
#[derive(Debug)]
pub struct ControlPlane {
    pub etcd: Etcd,
    /// Each replica and its status file.
    pub controllers: Vec<(ProcId, PathBuf)>,
    /// Where each replica runs.
    pub controller_hosts: Vec<HostId>,
    /// Each replica's command line (to start it again).
    pub controller_argv: Vec<Vec<String>>,
    /// The replicas' gRPC URLs (the agents' `--controller`).
    pub grpc: Vec<String>,
    /// The management bridge.
    pub mgmt: BridgeId,
    /// Every host's address on the management network.
    pub mgmt_addr: HashMap<HostId, Ipv4Addr>,
    /// The certificate directory when the plane runs with mutual TLS
    /// ([`make_certs`]); plaintext without.
    pub certs: Option<PathBuf>,
    /// etcd runs with TLS, client certificates and authentication
    /// ([`ControlPlane::start_secure`]).
    pub etcd_auth: bool,
}

/// What a host agent is given.
#[derive(Debug, Clone, Default)]
pub struct AgentOpts {
    /// Its host name (`--host`).
    pub name: String,
    /// The agent server's agent (probes only).
    pub server: bool,
    /// Its failsafe service on the management network (host agents).
    pub failsafe: Option<Ipv4Addr>,
    /// IP SLA probes: (target, `ADDR:PORT`), probed until the leader sends
    /// the agent its probe plan.
    pub probes: Vec<(String, String)>,
    /// Where the other agents probe this host (`--probe-addr`).
    pub probe_addr: Option<String>,
    /// Only the `probes`: the leader's plans ignored (`--static-probes`).
    pub static_probes: bool,
    /// Its containers: (unit, namespace, interface).
    pub containers: Vec<(String, String, String)>,
    /// Mutual TLS: the certificate directory ([`make_certs`]); the agent
    /// gets `agent-NAME.pem` and its key, and `ca.pem`. `None`: the agent
    /// runs with `--insecure`.
    pub tls: Option<PathBuf>,
}

/// `--tls-cert`, `--tls-key` and `--tls-ca` for `ROLE-NAME`'s files in the
/// certificate directory `dir`.
pub fn tls_args(dir: &Path, role: &str, name: &str) -> Vec<String> {
    let f = |s: &str| dir.join(s).to_string_lossy().to_string();
    vec![
        "--tls-cert".into(),
        f(&format!("{role}-{name}.pem")),
        "--tls-key".into(),
        f(&format!("{role}-{name}-key.pem")),
        "--tls-ca".into(),
        f("ca.pem"),
    ]
}

/// `holdfast ctl certs init DIR` (the operator's one command) for
/// `hosts`, `controllers` and `units`, and the operator `admin`; each
/// unit's certificate also names 127.0.0.1 (its GoBGP API in its
/// container, for clients that check the address).
pub fn make_certs(
    bins: &PlaneBins,
    dir: &Path,
    hosts: &[String],
    controllers: &[String],
    units: &[String],
) -> Result<()> {
    make_certs_etcd(bins, dir, hosts, controllers, units, &[])
}

/// [`make_certs`], with a server certificate per etcd member (`HOST`,
/// its address on the management network: `--etcd-members`) and etcd's
/// root one.
pub fn make_certs_etcd(
    bins: &PlaneBins,
    dir: &Path,
    hosts: &[String],
    controllers: &[String],
    units: &[String],
    etcd: &[(String, Ipv4Addr)],
) -> Result<()> {
    let d = dir.to_string_lossy().to_string();
    let (h, c, u) = (hosts.join(","), controllers.join(","), units.join(","));
    let mut argv: Vec<String> = vec![
        bins.ctl.clone(),
        "--json".into(),
        "certs".into(),
        "init".into(),
        d,
        "--hosts".into(),
        h,
        "--controllers".into(),
        c,
        "--operators".into(),
        "admin".into(),
        "--days".into(),
        "2".into(),
    ];
    if !units.is_empty() {
        argv.extend(["--units".to_string(), u]);
    }
    for n in units {
        argv.extend(["--san".to_string(), format!("unit:{n}=127.0.0.1")]);
    }
    if !etcd.is_empty() {
        let m: Vec<String> = etcd.iter().map(|(n, a)| format!("{n}={a}")).collect();
        argv.extend(["--etcd-members".to_string(), m.join(",")]);
    }
    crate::cmd::run_ok(&argv, crate::DEFAULT_CMD_TIMEOUT)?;
    Ok(())
}

/// The address of a host (by its data address `v4`) on the management
/// network 198.19.0.0/24: the same last octet.
pub fn mgmt_addr_of(v4: Ipv4Addr) -> Ipv4Addr {
    Ipv4Addr::new(198, 19, 0, v4.octets()[3])
}

/// `holdfast ctl`'s `--tls-cert`, `--tls-key` and `--tls-ca` as the
/// operator `admin` when etcd runs with client certificates (`certs`),
/// else nothing.
pub fn operator_tls_args(certs: Option<&Path>) -> Vec<String> {
    certs.map_or_else(Vec::new, |d| tls_args(d, "operator", "admin"))
}

/// Makes a store user on `redis` (started with ACL users; on every node of
/// a cluster) as an operator
/// would: a random password in `redis-acl/NAME.pass` of the lab's work
/// directory (mode 600), and `holdfast nsr acl WHAT --password-file FILE`
/// for its `ACL SETUSER`. `what` is `["unit", INSTANCE]` (user
/// `hf-INSTANCE`, file `INSTANCE.pass`) or `["relay", INSTANCE...]` (user
/// `hf-relay`, file `relay.pass`). Returns the user and the file.
pub fn store_user(
    lab: &Lab,
    redis: &impl AclServers,
    holdfast: &str,
    what: &[&str],
) -> Result<(String, PathBuf)> {
    let (user, stem) = match what {
        ["unit", name] => (format!("hf-{name}"), (*name).to_string()),
        ["relay", ..] => ("hf-relay".to_string(), "relay".to_string()),
        _ => {
            return Err(LabError::Invalid(format!(
                "store user {what:?}: unit NAME or relay INSTANCE..."
            )))
        }
    };
    let dir = lab.work_dir().join("redis-acl");
    std::fs::create_dir_all(&dir)
        .map_err(|e| LabError::Invalid(format!("{}: {e}", dir.display())))?;
    let file = dir.join(format!("{stem}.pass"));
    crate::redis::write_secret(&file, &format!("{}\n", crate::redis::random_password()?))?;
    let out = std::process::Command::new(holdfast)
        .args(["nsr", "acl"])
        .args(what)
        .arg("--password-file")
        .arg(&file)
        .output()
        .map_err(|e| LabError::Invalid(format!("{holdfast}: {e}")))?;
    if !out.status.success() {
        return Err(LabError::Invalid(format!(
            "holdfast nsr acl {}: {}",
            what.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    let line = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let args: Vec<&str> = line.split(' ').collect();
    redis.set_acl_user(lab, &args)?;
    Ok((user, file))
}

/// A host agent's command line and files.
#[derive(Debug, Clone)]
pub struct AgentArgs {
    pub args: Vec<String>,
    /// Its `--status-file`.
    pub status: PathBuf,
    /// Its units' work directories (`UNIT/holdfastd.sock` in each).
    pub work_dir: PathBuf,
}

impl ControlPlane {
    /// Joins `members` and `others` (hosts with their data address) to a
    /// management bridge at 198.19.0.0/24 (the same last octet), starts an
    /// etcd member and a controller replica (`c1`, `c2`, ...) on each of
    /// `members`, with `controller_args` added to each replica's.
    pub fn start(
        lab: &mut Lab,
        bins: &PlaneBins,
        members: &[(HostId, Ipv4Addr)],
        others: &[(HostId, Ipv4Addr)],
        controller_args: &[String],
    ) -> Result<ControlPlane> {
        ControlPlane::start_secure(lab, bins, members, others, controller_args, None, false)
    }

    /// [`ControlPlane::start`], with mutual TLS on the replicas' `Attach`
    /// service when `certs` (a [`make_certs`] directory) is given; with
    /// `etcd_auth` too (`certs` then from [`make_certs_etcd`] for the
    /// members), etcd with TLS and client certificates, its users and
    /// roles made by `holdfast ctl etcd-auth init` (as etcd's root, for
    /// the hosts of `others` and the replicas) and authentication on
    /// before any replica starts.
    pub fn start_secure(
        lab: &mut Lab,
        bins: &PlaneBins,
        members: &[(HostId, Ipv4Addr)],
        others: &[(HostId, Ipv4Addr)],
        controller_args: &[String],
        certs: Option<&Path>,
        etcd_auth: bool,
    ) -> Result<ControlPlane> {
        if etcd_auth && certs.is_none() {
            return Err(LabError::Invalid(
                "etcd authentication needs the certificates".into(),
            ));
        }
        let mut mgmt_members = Vec::new();
        let mut mgmt_addr = HashMap::new();
        for (id, v4) in members.iter().chain(others) {
            let m = mgmt_addr_of(*v4);
            mgmt_members.push((*id, vec![crate::IfAddr::new(m, 24)]));
            mgmt_addr.insert(*id, m);
        }
        let mgmt = lab.bridge("mgmt", &mgmt_members)?;
        let on_mgmt: Vec<(HostId, IpAddr)> = members
            .iter()
            .map(|(id, _)| (*id, IpAddr::V4(mgmt_addr[id])))
            .collect();
        let etcd = Etcd::start_tls(lab, &on_mgmt, certs.filter(|_| etcd_auth))?;
        let eps = etcd.endpoints();
        if let (true, Some(d)) = (etcd_auth, certs) {
            let names = |hs: &[(HostId, Ipv4Addr)]| -> String {
                hs.iter()
                    .map(|(h, _)| lab.host_info(*h).name.clone())
                    .collect::<Vec<_>>()
                    .join(",")
            };
            let hosts = names(others);
            let ctrls: Vec<String> = (1..=members.len()).map(|i| format!("c{i}")).collect();
            let mut argv: Vec<String> = vec![bins.ctl.clone(), "--etcd".into(), eps.clone()];
            argv.extend(tls_args(d, "etcd", "root"));
            argv.extend([
                "--json".to_string(),
                "etcd-auth".into(),
                "init".into(),
                "--hosts".into(),
                hosts,
                "--controllers".into(),
                ctrls.join(","),
                "--operators".into(),
                "admin".into(),
            ]);
            let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
            lab.exec_ok(members[0].0, &argv)?;
        }
        let mut controllers = Vec::new();
        let mut controller_argv = Vec::new();
        let mut grpc = Vec::new();
        for (i, (h, addr)) in on_mgmt.iter().enumerate() {
            let status = lab.work_dir().join(format!("c{}.status.json", i + 1));
            let listen = format!("{addr}:{CONTROLLER_PORT}");
            grpc.push(format!("http://{listen}"));
            let st = status.to_string_lossy().to_string();
            let cname = format!("c{}", i + 1);
            let mut argv: Vec<&str> = vec![
                &bins.controller,
                "--etcd",
                &eps,
                "--name",
                &cname,
                "--listen",
                &listen,
                "--status-file",
                &st,
                "--metrics-listen",
                "127.0.0.1:9180",
            ];
            argv.extend(controller_args.iter().map(String::as_str));
            let tls = certs.map_or_else(
                || vec!["--insecure".to_string()],
                |d| tls_args(d, "controller", &cname),
            );
            argv.extend(tls.iter().map(String::as_str));
            let p = lab.spawn(
                *h,
                &format!("controller-{cname}"),
                &argv,
                &[("HOLDFAST_LOG", "info")],
            )?;
            controllers.push((p, status));
            controller_argv.push(argv.iter().map(|s| s.to_string()).collect::<Vec<_>>());
        }
        Ok(ControlPlane {
            etcd,
            controllers,
            controller_hosts: on_mgmt.iter().map(|(h, _)| *h).collect(),
            controller_argv,
            grpc,
            mgmt,
            mgmt_addr,
            certs: certs.map(Path::to_path_buf),
            etcd_auth,
        })
    }

    /// Starts the agent `o` on `host` (`RUST_LOG=info`), with `boot` (its
    /// `--unit` arguments) added to its command line; returns the process
    /// and the command line without `boot` (to start it again).
    pub fn spawn_agent(
        &self,
        lab: &mut Lab,
        bins: &PlaneBins,
        host: HostId,
        o: &AgentOpts,
        boot: &[String],
    ) -> Result<(ProcId, AgentArgs)> {
        let a = self.agent_args(lab, bins, o);
        let argv: Vec<&str> = a.args.iter().chain(boot).map(String::as_str).collect();
        let p = lab.spawn(
            host,
            &format!("agent-{}", o.name),
            &argv,
            &[("RUST_LOG", "info")],
        )?;
        Ok((p, a))
    }

    /// A host agent's command line (its files under the lab's work
    /// directory, `agent-NAME/`).
    pub fn agent_args(&self, lab: &Lab, bins: &PlaneBins, o: &AgentOpts) -> AgentArgs {
        let dir = lab.work_dir().join(format!("agent-{}", o.name));
        let _ = std::fs::create_dir_all(&dir);
        let status = dir.join("status.json");
        let work_dir = dir.join("units");
        let mut args: Vec<String> = vec![
            bins.agent.clone(),
            "--host".into(),
            o.name.clone(),
            "--etcd".into(),
            self.etcd.endpoints(),
            "--holdfastd".into(),
            bins.holdfastd.clone(),
            "--work-dir".into(),
            work_dir.to_string_lossy().to_string(),
            "--status-file".into(),
            status.to_string_lossy().to_string(),
            "--metrics-listen".into(),
            "127.0.0.1:9181".into(),
        ];
        if o.server {
            args.push("--agent-server".into());
        }
        for g in &self.grpc {
            args.extend(["--controller".to_string(), g.clone()]);
        }
        for (t, addr) in &o.probes {
            if *t != format!("host:{}", o.name) {
                args.extend(["--probe".to_string(), format!("{t}={addr}")]);
            }
        }
        if let Some(a) = &o.probe_addr {
            args.extend(["--probe-addr".to_string(), a.clone()]);
        }
        if o.static_probes {
            args.push("--static-probes".into());
        }
        if let Some(a) = o.failsafe {
            // The other host agents ask this one in an etcd outage.
            args.extend([
                "--failsafe-listen".to_string(),
                format!("{a}:{FAILSAFE_PORT}"),
            ]);
        }
        for (unit, ns, ifname) in &o.containers {
            args.extend(["--container".to_string(), format!("{unit}={ns}:{ifname}")]);
        }
        match &o.tls {
            Some(d) => args.extend(tls_args(d, "agent", &o.name)),
            None => args.push("--insecure".into()),
        }
        AgentArgs {
            args,
            status,
            work_dir,
        }
    }

    /// Writes a unit's placement ([`unit_record`]) to etcd.
    pub fn place(&self, lab: &mut Lab, rec: &Value) -> Result<()> {
        let unit = rec["unit"]
            .as_str()
            .ok_or_else(|| LabError::Invalid(format!("a unit record without a unit: {rec}")))?;
        self.etcd
            .put(lab, &format!("{UNITS_PREFIX}{unit}"), &rec.to_string())?;
        Ok(())
    }

    /// The replicas' status files.
    pub fn status_files(&self) -> Vec<PathBuf> {
        self.controllers.iter().map(|(_, s)| s.clone()).collect()
    }
}

/// A unit's placement record, as an operator writes it: `config` run on
/// `primary`, taken over on `backup`, with `addresses` (`ADDR/LEN`) moving
/// with it; `app_failure` its application-failure policy if not the
/// controller's.
pub fn unit_record(
    unit: &str,
    primary: &str,
    backup: &str,
    config: &str,
    addresses: &[String],
    app_failure: Option<&str>,
) -> Value {
    let mut rec = serde_json::json!({
        "schema": 1, "unit": unit, "primary": primary, "backup": backup,
        "epoch": 0, "config": config, "addresses": addresses,
        "interface": "",
    });
    if let Some(p) = app_failure {
        rec["app_failure"] = Value::String(p.to_string());
    }
    rec
}

/// A JSON file (a status file), if it exists and parses.
pub fn json_file(path: &Path) -> Option<Value> {
    std::fs::read_to_string(path)
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok())
}

/// Every readable controller status of `files`.
pub fn controller_statuses(files: &[PathBuf]) -> Vec<Value> {
    files.iter().filter_map(|f| json_file(f)).collect()
}

/// Every verdict the replicas of `files` recorded, oldest first per replica.
pub fn controller_verdicts(files: &[PathBuf]) -> Vec<Value> {
    controller_statuses(files)
        .into_iter()
        .flat_map(|v| v["verdicts"].as_array().cloned().unwrap_or_default())
        .collect()
}

/// The leader's status among `files`, once one leads with `agents` agents
/// attached.
pub fn wait_leader_in(files: &[PathBuf], agents: usize, within: Duration) -> Result<Value> {
    wait_for_every(
        &format!("a leader with {agents} agents attached"),
        within,
        Duration::from_millis(100),
        || {
            Ok(controller_statuses(files).into_iter().find(|v| {
                v["role"] == "leader" && v["agents"].as_array().is_some_and(|a| a.len() == agents)
            }))
        },
    )
}

/// The pid of `unit` as the agent whose status file is `status` reports it.
pub fn agent_unit_pid(status: &Path, unit: &str) -> Option<u64> {
    json_file(status).and_then(|s| {
        s["units"]
            .as_array()
            .and_then(|us| us.iter().find(|u| u[0] == unit).and_then(|u| u[1].as_u64()))
    })
}

/// `holdfast ctl --etcd ENDPOINTS --json ARGS` in `host`'s namespace, as
/// the operator `admin` ([`operator_tls_args`]) when etcd checks client
/// certificates (`certs`: their directory).
pub fn ctl_json(
    lab: &Lab,
    host: HostId,
    ctl: &str,
    endpoints: &str,
    certs: Option<&Path>,
    args: &[&str],
) -> Result<Value> {
    let tls = operator_tls_args(certs);
    let mut cmd = vec![ctl, "--etcd", endpoints, "--json"];
    cmd.extend(tls.iter().map(String::as_str));
    cmd.extend_from_slice(args);
    let out = lab.exec_ok(host, &cmd)?;
    serde_json::from_str(&out)
        .map_err(|e| LabError::Invalid(format!("holdfast ctl {args:?}: {e}: {out}")))
}

/// `(primary, backup)` of `unit` in `holdfast ctl units --json` output.
pub fn placement_of(units: &Value, unit: &str) -> Result<(String, Option<String>)> {
    let row = units
        .as_array()
        .and_then(|r| r.iter().find(|u| u["unit"] == unit))
        .cloned()
        .ok_or_else(|| LabError::Invalid(format!("{unit} not in holdfast ctl units: {units}")))?;
    Ok((
        row["primary"].as_str().unwrap_or_default().to_string(),
        row["backup"].as_str().map(str::to_string),
    ))
}

/// `holdfast --socket SOCKET --json show nsr`'s answer (`Null` if none).
pub fn show_nsr(holdfast: &str, socket: &Path) -> Value {
    let out = std::process::Command::new(holdfast)
        .args([
            "--socket",
            &socket.to_string_lossy(),
            "--json",
            "show",
            "nsr",
        ])
        .output()
        .map(|o| o.stdout)
        .unwrap_or_default();
    serde_json::from_slice(&out).unwrap_or(Value::Null)
}

/// Waits until the holdfastd of `socket` has replicated its sessions
/// (PROTECTED); `what` names it.
pub fn wait_protected_at(
    holdfast: &str,
    socket: &Path,
    what: &str,
    within: Duration,
) -> Result<()> {
    wait_for_every(
        &format!("{what} PROTECTED"),
        within,
        Duration::from_millis(100),
        || Ok((show_nsr(holdfast, socket)["ok"]["nsr"]["protected"] == true).then_some(())),
    )
}

/// Whether a verdict (as the controller's status shows it) is a `kind`
/// finding about `subject`.
pub fn verdict_is(v: &Value, kind: &str, subject: &str) -> bool {
    let Some(f) = v["finding"].as_object() else {
        return false;
    };
    f.get(kind)
        .is_some_and(|body| body["unit"] == subject || body["host"] == subject)
}

/// SIGKILLs every process of the namespace `ns`; returns their pids.
pub fn kill_all(ns: &str) -> Vec<u32> {
    let pids = crate::netns_pids(ns);
    for pid in &pids {
        let _ = crate::send_signal(*pid, crate::Signal::Kill, false);
    }
    pids
}

/// A container failure: the namespace `ns` deleted first (so that its
/// agent finds it gone when it sees the unit exit), then every process it
/// held SIGKILLed; returns their pids.
pub fn kill_container_ns(ns: &str) -> Result<Vec<u32>> {
    let pids = crate::netns_pids(ns);
    crate::cmd::run_ok(
        &crate::cmd::argv(&["ip", "netns", "del", ns]),
        crate::DEFAULT_CMD_TIMEOUT,
    )?;
    for pid in &pids {
        let _ = crate::send_signal(*pid, crate::Signal::Kill, false);
    }
    Ok(pids)
}

/// A host's data links back after a host or host-network failure: in each
/// of its `containers` (host, interface, service address `ADDR/LEN`) that
/// exists, no stale service address, what it left queued on `bridge`
/// dropped, links up; then the host's own.
pub fn relink_host(
    lab: &Lab,
    bridge: BridgeId,
    host: HostId,
    containers: &[(HostId, String, String)],
) -> Result<()> {
    for (c, ifname, svc) in containers {
        if !Path::new(&format!("/run/netns/{}", lab.netns(*c))).exists() {
            continue;
        }
        let _ = lab.exec(*c, &["ip", "addr", "del", svc, "dev", ifname]);
        lab.drop_queued(bridge, *c)?;
        lab.set_host_links_up(*c, true)?;
    }
    lab.drop_queued(bridge, host)?;
    lab.set_host_links_up(host, true)
}
