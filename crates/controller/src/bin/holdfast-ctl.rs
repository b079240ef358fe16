//! `holdfast-ctl` (what `holdfast ctl ...` runs): the operator's view of
//! the control plane, read from etcd, and requests to its leader.
//!
//! ```text
//! holdfast ctl [--etcd URL,...] [--cluster NAME] [--json] status
//! holdfast ctl ... hosts | units
//! holdfast ctl ... drain HOST | reset HOST | switchover UNIT  [--wait SECS]
//! holdfast ctl ... upgrade UNIT|--host HOST --binary PATH | upgrade UNIT|--host HOST --abort  [--wait SECS]
//! holdfast ctl certs init DIR --hosts a,b,s --controllers c1,c2,c3
//!     [--operators admin] [--units u1,u2] [--san ROLE:NAME=IP|DNS ...]
//!     [--etcd-members NAME=IP,...] [--days 365] [--new-ca]
//! holdfast ctl [--etcd https://...] --tls-cert etcd-root.pem ... etcd-auth init
//!     --hosts a,b,s --controllers c1,c2,c3 [--operators admin]
//! ```
//!
//! `certs init` makes a CA (or keeps the one in DIR) and a certificate and
//! key per controller, host agent, operator and unit
//! (`holdfast_control_api::certs`; names and rotation in docs/security.md),
//! and with `--etcd-members` one server certificate per etcd member and
//! etcd's `root` one. It needs no etcd.
//!
//! `etcd-auth init` makes etcd's users and roles (`holdfast_etcd::auth`)
//! and enables authentication; idempotent (with the root certificate once
//! authentication is on).
//!
//! With `https://` endpoints, `--tls-cert`, `--tls-key` and `--tls-ca`
//! are the client certificate etcd checks (an operator's, or etcd's root
//! for `etcd-auth init`).
//!
//! `drain`, `reset`, `switchover` and `upgrade` write a request under
//! `/holdfast/<cluster>/requests/` that the leading replica carries out and
//! deletes in one fenced transaction; `--wait` waits until it is done (and,
//! for a switchover or drain, until no migration is in flight).

use std::collections::BTreeMap;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{bail, Context, Result};
use clap::{CommandFactory, Parser, Subcommand};
use holdfast_control_api::certs::CertPlan;
use holdfast_control_api::tls::Identity;
use holdfast_controller::state::OperatorRequest;
use holdfast_controller::{Keys, Migration, Store, UnitRecord};
use serde_json::{json, Value};

#[derive(Debug, Parser)]
#[command(
    name = "holdfast-ctl",
    version = holdfast_version::VERSION,
    about = "The control plane: status, hosts, units, drain, reset, switchover"
)]
struct Args {
    /// etcd client URLs, comma-separated.
    #[arg(
        long,
        value_delimiter = ',',
        env = "HOLDFAST_ETCD",
        default_value = "http://127.0.0.1:2379"
    )]
    etcd: Vec<String>,
    /// The cluster (keys under /holdfast/<cluster>/).
    #[arg(long, default_value = "default")]
    cluster: String,
    /// This client's certificate (PEM) for `https://` etcd endpoints: etcd
    /// takes its common name as the user (`operator:NAME`, or `root`).
    #[arg(long, env = "HOLDFAST_TLS_CERT")]
    tls_cert: Option<std::path::PathBuf>,
    /// Its key (PEM).
    #[arg(long, env = "HOLDFAST_TLS_KEY")]
    tls_key: Option<std::path::PathBuf>,
    /// The CA that issued etcd's member certificates (PEM).
    #[arg(long, env = "HOLDFAST_TLS_CA")]
    tls_ca: Option<std::path::PathBuf>,
    /// Print JSON.
    #[arg(long, global = true)]
    json: bool,
    #[command(subcommand)]
    op: Op,
}

#[derive(Debug, Subcommand)]
enum Op {
    /// The leader, the store epoch, the agents, failed hosts, the
    /// migrations in flight and pending requests.
    Status,
    /// Every host: its agent, whether it failed, the units it carries as
    /// primary and as backup.
    Hosts,
    /// Every unit's placement: primary, backup, epoch, service addresses.
    Units,
    /// Move every unit off HOST by planned switchover.
    Drain {
        host: String,
        #[arg(long)]
        wait: Option<u64>,
    },
    /// Let a failed HOST be used again.
    Reset {
        host: String,
        #[arg(long)]
        wait: Option<u64>,
    },
    /// Planned switchover of UNIT to its backup host.
    Switchover {
        unit: String,
        #[arg(long)]
        wait: Option<u64>,
    },
    /// Move UNIT to another holdfastd binary without its peers noticing:
    /// a preheated standby of BINARY on the backup host follows the store,
    /// the unit switches over to it, and the old host gets a standby of
    /// BINARY too. The same command with the old binary rolls back.
    /// `--abort`: stop an upgrade of UNIT before its switchover. `--host
    /// HOST` instead of UNIT: every unit whose primary is HOST, one at a
    /// time (each moves to its backup host).
    Upgrade {
        #[arg(required_unless_present = "host", conflicts_with = "host")]
        unit: Option<String>,
        #[arg(long)]
        host: Option<String>,
        /// The holdfastd to run: an absolute path that exists on every host
        /// (a versioned path, such as the Debian package's).
        #[arg(long, required_unless_present = "abort", conflicts_with = "abort")]
        binary: Option<String>,
        #[arg(long)]
        abort: bool,
        #[arg(long)]
        wait: Option<u64>,
    },
    /// Certificates for the control plane's mutual TLS.
    Certs {
        #[command(subcommand)]
        op: CertsOp,
    },
    /// etcd's users and roles for the control plane.
    EtcdAuth {
        #[command(subcommand)]
        op: EtcdAuthOp,
    },
}

#[derive(Debug, Subcommand)]
enum EtcdAuthOp {
    /// Roles `holdfast-controller`, `holdfast-operator` and one
    /// `holdfast-agent-HOST` per host, users named as the certificates'
    /// common names (`controller:c1`, `agent:a`, `operator:admin`, and
    /// `root`), then `auth enable`. Idempotent; once authentication is on,
    /// run it with etcd's root certificate.
    Init {
        #[command(flatten)]
        who: Roster,
    },
}

/// The control plane's members, by name (`certs init`: a certificate each;
/// `etcd-auth init`: an etcd user each).
#[derive(Debug, clap::Args)]
struct Roster {
    /// The hosts: an agent each (the agent server's among them).
    #[arg(long, value_delimiter = ',')]
    hosts: Vec<String>,
    /// The controller replicas.
    #[arg(long, value_delimiter = ',')]
    controllers: Vec<String>,
    /// Operators (`holdfast ctl`, GoBGP API clients).
    #[arg(long, value_delimiter = ',', default_value = "admin")]
    operators: Vec<String>,
}

#[derive(Debug, Subcommand)]
enum CertsOp {
    /// A CA (kept if DIR has one) and a certificate per controller, host
    /// agent, operator and unit: `ROLE-NAME.pem` and `ROLE-NAME-key.pem`,
    /// subject `CN=ROLE:NAME`, names `NAME.ROLE.holdfast` and
    /// `ROLE.holdfast`.
    Init {
        /// Where to write them (made 0700 if it does not exist).
        dir: std::path::PathBuf,
        #[command(flatten)]
        who: Roster,
        /// Units (their holdfastd's GoBGP API).
        #[arg(long, value_delimiter = ',')]
        units: Vec<String>,
        /// An extra name for one certificate, `ROLE:NAME=VALUE` (an IP
        /// address or a DNS name; repeatable), e.g. a unit's GoBGP API
        /// address for clients that check it.
        #[arg(long = "san")]
        sans: Vec<String>,
        /// etcd members, `NAME=ADDR` (comma-separated): a server
        /// certificate each, `etcd-NAME.pem` naming ADDR (the address of
        /// its client URL), and etcd's administrator's, `etcd-root.pem`
        /// (`CN=root`).
        #[arg(long = "etcd-members", value_delimiter = ',')]
        etcd_members: Vec<String>,
        /// Validity of the certificates, in days (the CA's: 10 years).
        #[arg(long, default_value_t = 365)]
        days: u64,
        /// Make a new CA even if DIR has one (every certificate must then
        /// be issued again).
        #[arg(long)]
        new_ca: bool,
    },
}

/// `ROLE:NAME=VALUE`.
fn parse_san(s: &str) -> Result<(Identity, String)> {
    let (id, value) = s
        .split_once('=')
        .with_context(|| format!("--san {s}: expected ROLE:NAME=VALUE"))?;
    let id = Identity::from_cn(id).with_context(|| format!("--san {s}"))?;
    Ok((id, value.to_string()))
}

fn certs(op: &CertsOp) -> Result<(Value, String)> {
    let CertsOp::Init {
        dir,
        who: Roster {
            hosts,
            controllers,
            operators,
        },
        units,
        sans,
        etcd_members,
        days,
        new_ca,
    } = op;
    let etcd = etcd_members
        .iter()
        .map(|m| {
            m.split_once('=')
                .map(|(n, a)| (n.to_string(), a.to_string()))
                .with_context(|| format!("--etcd-members {m}: expected NAME=ADDR"))
        })
        .collect::<Result<Vec<_>>>()?;
    let plan = CertPlan {
        controllers: controllers.clone(),
        hosts: hosts.clone(),
        operators: operators.clone(),
        units: units.clone(),
        sans: sans.iter().map(|s| parse_san(s)).collect::<Result<_>>()?,
        etcd,
        days: *days,
        new_ca: *new_ca,
    };
    let r = holdfast_control_api::certs::init(dir, &plan)?;
    let rows: Vec<Value> = r
        .issued
        .iter()
        .map(|i| {
            json!({"role": i.identity.role.as_str(), "name": i.identity.name,
                   "subject": format!("CN={}", i.identity.common_name()),
                   "names": i.names, "cert": i.files.cert, "key": i.files.key})
        })
        .collect();
    let etcd_rows: Vec<Value> = r
        .etcd
        .iter()
        .map(|e| {
            json!({"subject": format!("CN={}", e.common_name), "names": e.names,
                   "cert": e.files.cert, "key": e.files.key})
        })
        .collect();
    let j = json!({
        "dir": dir, "ca": r.ca, "ca_key": r.ca_key, "ca_kept": r.ca_kept,
        "days": days, "certificates": rows, "etcd": etcd_rows,
    });
    let mut t = format!(
        "CA: {} ({})\n",
        r.ca.display(),
        if r.ca_kept { "kept" } else { "new" }
    );
    for i in &r.issued {
        t.push_str(&format!(
            "{:<28} CN={:<24} {}\n",
            i.files.cert.display(),
            i.identity.common_name(),
            i.names.join(",")
        ));
    }
    for e in &r.etcd {
        t.push_str(&format!(
            "{:<28} CN={:<24} {}\n",
            e.files.cert.display(),
            e.common_name,
            e.names.join(",")
        ));
    }
    Ok((j, t))
}

async fn etcd_auth(store: &mut Store, keys: &Keys, op: &EtcdAuthOp) -> Result<(Value, String)> {
    let EtcdAuthOp::Init {
        who: Roster {
            hosts,
            controllers,
            operators,
        },
    } = op;
    let plan = holdfast_etcd::auth::plan(keys, controllers, hosts, operators);
    let done = holdfast_etcd::auth::apply(store, &plan)
        .await
        .context("setting up etcd's users and roles")?;
    let roles: Vec<Value> = plan
        .roles
        .iter()
        .map(|r| {
            let grants: Vec<Value> = r
                .grants
                .iter()
                .map(|g| json!({"key": g.key, "prefix": g.prefix, "access": g.access.as_str()}))
                .collect();
            json!({"role": r.name, "permissions": grants})
        })
        .collect();
    let users: Vec<Value> = plan
        .users
        .iter()
        .map(|u| json!({"user": u.name, "roles": u.roles}))
        .collect();
    let j = json!({"roles": roles, "users": users, "changes": done.changes, "auth": "enabled"});
    let mut t = String::new();
    for c in &done.changes {
        t.push_str(&format!("{c}\n"));
    }
    if done.changes.is_empty() {
        t.push_str("users and roles already as planned\n");
    }
    t.push_str("auth enabled\n");
    Ok((j, t))
}

struct View {
    leader: Option<(String, i64)>,
    epoch: Option<Value>,
    /// The attached agents by host, each with its build from its
    /// `agents/HOST` record (empty from an agent older than the field).
    agents: BTreeMap<String, String>,
    failed: Vec<String>,
    units: Vec<UnitRecord>,
    /// In flight, one per unit at most.
    migrations: Vec<Migration>,
    requests: Vec<String>,
}

async fn read(store: &mut Store, keys: &Keys) -> Result<View> {
    let p = keys.prefix().to_string();
    let leader = store
        .leader()
        .await?
        .map(|(rec, token)| (rec.name, token.0));
    let epoch = store.get::<Value>(&keys.epoch()).await?;
    let agents = store
        .scan::<Value>(&format!("{p}agents/"))
        .await?
        .into_iter()
        .map(|(host, r)| (host, r["version"].as_str().unwrap_or("").to_string()))
        .collect();
    let failed = store.list(&store.keys().failed_hosts()).await?;
    let units = store.units().await?;
    let migrations = store
        .migrations_in_flight()
        .await?
        .into_iter()
        .map(|(_, m)| m)
        .collect();
    let requests = store.list(&format!("{p}requests/")).await?;
    Ok(View {
        leader,
        epoch,
        agents,
        failed,
        units,
        migrations,
        requests,
    })
}

fn unit_json(u: &UnitRecord) -> Value {
    json!({
        "unit": u.unit, "primary": u.primary, "backup": u.backup,
        "epoch": u.epoch.0, "addresses": u.addresses, "binary": u.binary,
    })
}

fn status(v: &View) -> (Value, String) {
    let m: Vec<Value> = v
        .migrations
        .iter()
        .map(|m| {
            json!({"id": m.id, "unit": m.unit, "from": m.from, "to": m.to,
                   "steps": m.steps, "state": m.state, "binary": m.binary,
                   "refused": m.refused})
        })
        .collect();
    let j = json!({
        "leader": v.leader.as_ref().map(|(n, t)| json!({"name": n, "token": t})),
        "epoch": v.epoch,
        "agents": v.agents.keys().collect::<Vec<_>>(),
        "agent_builds": v.agents,
        "failed_hosts": v.failed,
        "units": v.units.len(),
        "migrations": m,
        "pending_requests": v.requests,
    });
    let mut t = String::new();
    t.push_str(&match &v.leader {
        Some((n, tok)) => format!("leader: {n} (fencing token {tok})\n"),
        None => "leader: none (no replica may act)\n".into(),
    });
    t.push_str(&format!(
        "agents: {}\n",
        if v.agents.is_empty() {
            "none".into()
        } else {
            v.agents.keys().cloned().collect::<Vec<_>>().join(", ")
        }
    ));
    t.push_str(&format!(
        "failed hosts: {}\n",
        if v.failed.is_empty() {
            "none".into()
        } else {
            v.failed.join(", ")
        }
    ));
    t.push_str(&format!("units: {}\n", v.units.len()));
    if v.migrations.is_empty() {
        t.push_str("migrations in flight: none\n");
    }
    for m in &v.migrations {
        t.push_str(&format!(
            "migration in flight: {} {} -> {} ({})\n",
            m.unit,
            m.from,
            m.to,
            m.steps.join(", ")
        ));
    }
    if !v.requests.is_empty() {
        t.push_str(&format!("pending requests: {}\n", v.requests.join(", ")));
    }
    (j, t)
}

fn hosts(v: &View, loads: &[holdfast_control::HostLoad]) -> (Value, String) {
    let mut names: BTreeMap<String, (Vec<String>, Vec<String>)> = BTreeMap::new();
    for h in v.agents.keys().chain(&v.failed) {
        names.entry(h.clone()).or_default();
    }
    for u in &v.units {
        names
            .entry(u.primary.clone())
            .or_default()
            .0
            .push(u.unit.clone());
        if let Some(b) = &u.backup {
            names.entry(b.clone()).or_default().1.push(u.unit.clone());
        }
    }
    let load_of = |h: &str| loads.iter().find(|l| l.host.0 == h);
    let rows: Vec<Value> = names
        .iter()
        .map(|(h, (p, b))| {
            let l = load_of(h);
            json!({"host": h, "agent": v.agents.contains_key(h), "failed": v.failed.contains(h),
                   "agent_build": v.agents.get(h),
                   "primaries": p, "backups": b,
                   "capacity": l.map(|l| l.capacity), "load": l.map(|l| l.load),
                   "worst_after_one_failure": l.map(holdfast_control::HostLoad::worst)})
        })
        .collect();
    let mut t = format!(
        "{:<12} {:<6} {:<7} {:<10} {:<24} {:<24} {}\n",
        "HOST", "AGENT", "FAILED", "LOAD", "PRIMARY OF", "BACKUP OF", "AGENT BUILD"
    );
    for (h, (p, b)) in &names {
        let load = load_of(h).map_or("-".to_string(), |l| {
            format!("{}/{}/{}", l.load, l.worst(), l.capacity)
        });
        t.push_str(&format!(
            "{:<12} {:<6} {:<7} {:<10} {:<24} {:<24} {}\n",
            h,
            if v.agents.contains_key(h) { "up" } else { "-" },
            if v.failed.contains(h) { "yes" } else { "no" },
            load,
            p.join(","),
            b.join(","),
            v.agents
                .get(h)
                .filter(|b| !b.is_empty())
                .map_or("-", String::as_str)
        ));
    }
    t.push_str(
        "LOAD: units now / after the worst single host failure (TRIPOD placement) / capacity\n",
    );
    (json!(rows), t)
}

fn units(v: &View) -> (Value, String) {
    let mut t = format!(
        "{:<16} {:<10} {:<10} {:<6} {:<32} {}\n",
        "UNIT", "PRIMARY", "BACKUP", "EPOCH", "ADDRESSES", "BINARY"
    );
    for u in &v.units {
        t.push_str(&format!(
            "{:<16} {:<10} {:<10} {:<6} {:<32} {}\n",
            u.unit,
            u.primary,
            u.backup.as_deref().unwrap_or("-"),
            u.epoch.0,
            u.addresses.join(","),
            u.binary.as_deref().unwrap_or("(the agents' own)")
        ));
    }
    (json!(v.units.iter().map(unit_json).collect::<Vec<_>>()), t)
}

async fn request(
    store: &mut Store,
    keys: &Keys,
    req: &OperatorRequest,
    wait: Option<u64>,
) -> Result<(Value, String)> {
    request_timed(store, keys, req, wait, None)
        .await
        .map(|(j, t, _)| (j, t))
}

/// The steps of `unit`'s next migration seen done, each with the seconds
/// from the request to the first poll that found it.
type StepTimes = Vec<(String, f64)>;

/// [`request`], and with `--wait` and `unit`: when each step of the unit's
/// migration (one started after the request) was first seen done, polled
/// every 50 ms.
async fn request_timed(
    store: &mut Store,
    keys: &Keys,
    req: &OperatorRequest,
    wait: Option<u64>,
    unit: Option<&str>,
) -> Result<(Value, String, StepTimes)> {
    let earlier = match unit {
        Some(u) => store
            .get::<Migration>(&keys.migration_of(u))
            .await?
            .map(|m| m.id),
        None => None,
    };
    let ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis());
    let id = format!("{ms:015}-{}", std::process::id());
    let key = keys.request(&id);
    store
        .put_request(&key, &serde_json::to_string(req)?)
        .await
        .context("writing the request")?;
    let Some(secs) = wait else {
        return Ok((
            json!({"request": id, "done": false}),
            format!("requested ({id})\n"),
            Vec::new(),
        ));
    };
    let started = Instant::now();
    let end = started + Duration::from_secs(secs);
    let mut steps: StepTimes = Vec::new();
    loop {
        let pending = store.get::<Value>(&key).await?.is_some();
        let migrating = !store.migrations_in_flight().await?.is_empty();
        if let Some(u) = unit {
            let m = store.get::<Migration>(&keys.migration_of(u)).await?;
            if let Some(m) = m.filter(|m| Some(&m.id) != earlier.as_ref()) {
                let done = store.list(&keys.steps(&m.id)).await?;
                for step in m.steps.iter().filter(|s| done.contains(s)) {
                    if !steps.iter().any(|(s, _)| s == step) {
                        steps.push((step.clone(), started.elapsed().as_secs_f64()));
                    }
                }
            }
        }
        if !pending && !migrating {
            return Ok((
                json!({"request": id, "done": true}),
                format!("done ({id})\n"),
                steps,
            ));
        }
        if Instant::now() > end {
            bail!("request {id} not done after {secs} s (pending: {pending}, migration in flight: {migrating})");
        }
        let poll = if unit.is_some() { 50 } else { 100 };
        tokio::time::sleep(Duration::from_millis(poll)).await;
    }
}

/// `upgrade UNIT --binary PATH`: the request, and with `--wait` the
/// outcome: done only if the placement then names the binary.
async fn upgrade(
    store: &mut Store,
    keys: &Keys,
    unit: &str,
    binary: &str,
    wait: Option<u64>,
) -> Result<(Value, String)> {
    if let Some(why) = holdfast_controller::state::binary_path_error(binary) {
        bail!("--binary: {why}");
    }
    let Some(before) = store.get::<UnitRecord>(&keys.unit(unit)).await? else {
        bail!("no unit {unit:?}");
    };
    if before.backup.is_none() {
        bail!("unit {unit:?} has no backup host to start the new binary on");
    }
    let req = OperatorRequest::Upgrade {
        unit: unit.to_string(),
        binary: binary.to_string(),
    };
    let started = Instant::now();
    let (j, t, steps) = request_timed(store, keys, &req, wait, Some(unit)).await?;
    if wait.is_none() {
        return Ok((j, t));
    }
    let after = store.get::<UnitRecord>(&keys.unit(unit)).await?;
    let seen: serde_json::Map<String, Value> =
        steps.iter().map(|(s, at)| (s.clone(), json!(at))).collect();
    let seen_text: Vec<String> = steps
        .iter()
        .map(|(s, at)| format!("{s} {at:.2} s"))
        .collect();
    match after {
        Some(u) if u.binary.as_deref() == Some(binary) => Ok((
            json!({"request": j["request"], "done": true, "unit": unit, "primary": u.primary,
                   "backup": u.backup, "binary": binary, "from_primary": before.primary,
                   "seconds": started.elapsed().as_secs_f64(), "steps_done_at": seen}),
            format!(
                "{unit} runs {binary} on {} (was on {}), in {:.1} s (steps done at: {})\n",
                u.primary,
                before.primary,
                started.elapsed().as_secs_f64(),
                seen_text.join(", ")
            ),
        )),
        _ => {
            let m = store.get::<Migration>(&keys.migration_of(unit)).await?;
            match m.and_then(|m| m.refused.filter(|_| m.binary.as_deref() == Some(binary))) {
                Some(why) => bail!("the upgrade of {unit} to {binary} was refused before anything moved: {why}"),
                None => bail!("the upgrade of {unit} to {binary} did not happen: aborted, or refused by the leader (see its log)"),
            }
        }
    }
}

/// `upgrade --host HOST --binary PATH`: the request, and with `--wait`
/// where each unit that was on HOST ended up; done only if every one of
/// them runs PATH.
async fn upgrade_host(
    store: &mut Store,
    keys: &Keys,
    host: &str,
    binary: &str,
    wait: Option<u64>,
) -> Result<(Value, String)> {
    if let Some(why) = holdfast_controller::state::binary_path_error(binary) {
        bail!("--binary: {why}");
    }
    let on_host: Vec<String> = read(store, keys)
        .await?
        .units
        .into_iter()
        .filter(|u| u.primary == host)
        .map(|u| u.unit)
        .collect();
    let req = OperatorRequest::UpgradeHost {
        host: host.to_string(),
        binary: binary.to_string(),
    };
    let started = Instant::now();
    let (j, t) = request(store, keys, &req, wait).await?;
    if wait.is_none() {
        return Ok((j, t));
    }
    let mut units = Vec::new();
    let mut text = String::new();
    let mut behind = Vec::new();
    for unit in &on_host {
        let u = store.get::<UnitRecord>(&keys.unit(unit)).await?;
        let (primary, runs) = u.map_or((None, None), |u| (Some(u.primary), u.binary));
        if runs.as_deref() != Some(binary) {
            behind.push(unit.clone());
        }
        text.push_str(&format!(
            "{unit}: on {}, runs {}\n",
            primary.as_deref().unwrap_or("-"),
            runs.as_deref().unwrap_or("(the agents' own)")
        ));
        units.push(json!({"unit": unit, "primary": primary, "binary": runs}));
    }
    if !behind.is_empty() {
        bail!(
            "host {host}: {} of {} unit(s) not on {binary}: {} (refused, aborted, or without a backup host; see the leading controller's log)\n{text}",
            behind.len(),
            on_host.len(),
            behind.join(", ")
        );
    }
    text.push_str(&format!(
        "host {host}: {} unit(s) on {binary} in {:.1} s\n",
        on_host.len(),
        started.elapsed().as_secs_f64()
    ));
    Ok((
        json!({"request": j["request"], "done": true, "host": host, "binary": binary,
               "units": units, "seconds": started.elapsed().as_secs_f64()}),
        text,
    ))
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    holdfast_docgen::intercept(Args::command);
    let a = Args::parse();
    let json_out = a.json;
    if let Err(e) = run(a).await {
        if json_out {
            println!("{}", json!({"error": format!("{e:#}")}));
        } else {
            eprintln!("holdfast ctl: {e:#}");
        }
        std::process::exit(1);
    }
}

async fn run(a: Args) -> Result<()> {
    let keys = Keys::new(&a.cluster);
    let tls = holdfast_control_api::tls::TlsFiles::from_flags(
        a.tls_cert.clone(),
        a.tls_key.clone(),
        a.tls_ca.clone(),
    )?
    .map(|f| holdfast_control_api::tls::Tls::load(&f))
    .transpose()?;
    // `etcd-auth init` is one bounded call of a few requests per host.
    let bound = if matches!(a.op, Op::EtcdAuth { .. }) {
        Duration::from_secs(30)
    } else {
        Duration::from_secs(2)
    };
    let mut store = Store::new(a.etcd.clone(), bound, keys.clone(), true)?.with_tls(
        tls.as_ref()
            .map(holdfast_control_api::tls::Tls::etcd_client),
    );
    let (j, t) = match &a.op {
        Op::Status => status(&read(&mut store, &keys).await?),
        Op::Hosts => {
            let v = read(&mut store, &keys).await?;
            let desired = holdfast_controller::placement::read_state(&mut store).await?;
            hosts(&v, &holdfast_control::failure_loads(&desired))
        }
        Op::Units => units(&read(&mut store, &keys).await?),
        Op::Drain { host, wait } => {
            request(
                &mut store,
                &keys,
                &OperatorRequest::Drain { host: host.clone() },
                *wait,
            )
            .await?
        }
        Op::Reset { host, wait } => {
            request(
                &mut store,
                &keys,
                &OperatorRequest::Reset { host: host.clone() },
                *wait,
            )
            .await?
        }
        Op::Switchover { unit, wait } => {
            request(
                &mut store,
                &keys,
                &OperatorRequest::Switchover { unit: unit.clone() },
                *wait,
            )
            .await?
        }
        Op::Upgrade {
            unit: Some(unit),
            binary: Some(binary),
            abort: false,
            wait,
            ..
        } => upgrade(&mut store, &keys, unit, binary, *wait).await?,
        Op::Upgrade {
            host: Some(host),
            binary: Some(binary),
            abort: false,
            wait,
            ..
        } => upgrade_host(&mut store, &keys, host, binary, *wait).await?,
        Op::Upgrade {
            unit, host, wait, ..
        } => {
            let req = match (unit, host) {
                (Some(unit), _) => OperatorRequest::AbortUpgrade { unit: unit.clone() },
                (None, Some(host)) => OperatorRequest::AbortUpgradeHost { host: host.clone() },
                (None, None) => bail!("upgrade: name a UNIT or --host HOST"),
            };
            request(&mut store, &keys, &req, *wait).await?
        }
        // Needs no etcd (the store above connects on first use only).
        Op::Certs { op } => certs(op)?,
        Op::EtcdAuth { op } => etcd_auth(&mut store, &keys, op).await?,
    };
    print(a.json, (j, t))
}

fn print(json_out: bool, (j, t): (Value, String)) -> Result<()> {
    if json_out {
        println!("{}", serde_json::to_string_pretty(&j)?);
    } else {
        print!("{t}");
    }
    Ok(())
}
