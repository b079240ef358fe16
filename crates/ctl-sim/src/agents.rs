//! The simulated agents: every host agent and agent server of a
//! [`Fleet`] in one process (`holdfast-ctl-sim agents`, run by the driver
//! in its own lab namespace), each speaking the real protocol to the real
//! controllers and etcd:
//!
//! - **its etcd lease**: granted with the agent's TTL, `agents/<host>` (or
//!   `agent-servers/<name>`) attached to it with the record a real agent
//!   writes, renewed every `--renew-ms` through its own client;
//! - **its `Attach` stream** to the replica the `leader` key names (read by
//!   one task for all of them every 100 ms; a real agent reads it itself),
//!   attached again after a failure with the real agent's jittered
//!   backoff: the Hello with the units it runs, a `Heartbeat` every probe interval, and
//!   the `Measurement`s of the agent's own prober
//!   (`holdfast_agent::probe::Prober`, the real core, with its reporting
//!   rule) over the targets of its plan, carried in the heartbeats as a
//!   real agent's are (`holdfast_agent::outbox::Outbox`), each probe answered or not as the
//!   simulated fleet says; every command is answered `ok` (a `Takeover`
//!   makes the unit its own, with its `STARTED` event), and a stream
//!   silent for a second is left;
//! - **its units' service addresses**: one listener on the unit port of
//!   every address in [`crate::fleet::UNIT_PREFIX`] (a `local` route), so
//!   the controller's own TCP heartbeat to each unit is answered by the
//!   kernel, as a live holdfastd's would be.
//!
//! Failures are injected through the control file (`down HOST...`): from
//! then on those agents send nothing, renew nothing and answer nothing,
//! every probe of them and of the units they run misses, and their units'
//! addresses drop packets (iptables) until a takeover moves each unit to a
//! live host. What happens is written to the events file, one JSON object
//! per line with `t` in Unix milliseconds ([`Event`]).
//!
//! The placement the plan is made from is re-read from etcd every
//! [`PLACEMENT_EVERY`].
//!
//! The agents start 50 at a time every 100 ms, as a fleet boots.
//!
//! # Known issues
//! - A down host's Attach stream stays open but silent (its TCP would time
//!   out much later), as a frozen or cut-off host's does.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use holdfast_control_api::v1::controller_client::ControllerClient;
use holdfast_control_api::v1::{
    agent_report, command, unit_event, AgentReport, CommandResult, Hello, Measurement, UnitEvent,
    UnitStatus,
};
use holdfast_etcd::{AgentRecord, Keys, Store, UnitRecord};
use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;

use holdfast_agent::attach::Backoff;
use holdfast_agent::outbox::Outbox;
use holdfast_agent::probe::{
    Input as ProbeInput, Output as ProbeOutput, ProbeConfig, Prober, Target,
};

use crate::fleet::{target_name, Fleet, ProbeMode, SimUnit};

/// How often the placement is re-read from etcd.
pub const PLACEMENT_EVERY: Duration = Duration::from_secs(1);
/// A stream on which nothing arrived for this long is left.
const SILENCE: Duration = Duration::from_secs(1);
/// How long a connect and then the Attach call may take.
const ATTACH_WITHIN: Duration = Duration::from_millis(500);

/// What the agents process reports.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "ev", rename_all = "snake_case")]
pub enum Event {
    /// Every agent has attached once and the placement is written.
    Ready { t: u64, agents: usize, units: usize },
    /// An agent attached to a replica.
    Attached { t: u64, host: String, url: String },
    /// An agent's stream ended.
    Detached { t: u64, host: String, why: String },
    /// A command arrived (beats are not reported).
    Command {
        t: u64,
        host: String,
        kind: String,
        unit: String,
        token: u64,
    },
    /// Hosts made to fail.
    Down { t: u64, hosts: Vec<String> },
    /// Once a second: what the agents sent in it.
    Stats {
        t: u64,
        heartbeats: u64,
        measurements: u64,
        /// Probe misses the agents' probers discarded because the
        /// simulated agent itself ran late (the harness is short of CPU).
        #[serde(default)]
        discarded: u64,
        renewals: u64,
        renewal_failures: u64,
        attached: usize,
        /// Probe plans the agents received from the leader.
        #[serde(default)]
        plans: u64,
        /// The most targets a host agent's, and an agent server's, prober
        /// has now.
        #[serde(default)]
        targets_host: usize,
        #[serde(default)]
        targets_server: usize,
    },
}

/// Unix milliseconds now.
pub fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// Settings of the agents process.
#[derive(Debug, Clone)]
pub struct AgentsConfig {
    pub etcd: Vec<String>,
    pub controllers: Vec<String>,
    pub events: PathBuf,
    pub control: PathBuf,
    pub interval: Duration,
    pub renew: Duration,
    /// How often a target that keeps answering is reported
    /// ([`ProbeConfig::report_every`]).
    pub report_every: Duration,
    pub ttl: Duration,
    pub unit_port: u16,
    pub cluster: String,
}

#[derive(Default)]
struct Counters {
    heartbeats: AtomicU64,
    measurements: AtomicU64,
    discarded: AtomicU64,
    renewals: AtomicU64,
    renewal_failures: AtomicU64,
    plans: AtomicU64,
}

/// What every agent task shares.
struct World {
    fleet: Fleet,
    /// The current placement, by unit.
    units: BTreeMap<String, SimUnit>,
    /// Hosts made to fail.
    down: BTreeSet<String>,
    /// Units whose address drops packets.
    blocked: BTreeSet<String>,
    /// Per vantage point: its targets' wire names.
    plan: BTreeMap<String, Vec<String>>,
    /// Bumped at each new plan.
    plan_version: u64,
    /// Hosts attached now.
    attached: BTreeSet<String>,
    /// Each agent's prober's targets now.
    targets: BTreeMap<String, usize>,
    /// The leader's Attach URL, as etcd names it (read by one task for
    /// every agent: a real agent reads it itself).
    leader: Option<String>,
    /// Addresses to let through again, applied in batches.
    unblock: mpsc::UnboundedSender<std::net::Ipv4Addr>,
}

impl World {
    fn replan(&mut self) {
        let units: Vec<SimUnit> = self.units.values().cloned().collect();
        self.plan = self
            .fleet
            .plan(&units, &[])
            .into_iter()
            .map(|(h, t)| (h.0, t.iter().map(target_name).collect()))
            .collect();
        self.plan_version += 1;
    }

    /// Whether a probe of `target` (`host:X`, `unit:U`) answers.
    fn answers(&self, target: &str) -> bool {
        match target.split_once(':') {
            Some(("host", h)) => !self.down.contains(h),
            Some(("unit", u)) => self
                .units
                .get(u)
                .is_some_and(|x| !self.down.contains(&x.primary) && !self.blocked.contains(u)),
            _ => false,
        }
    }
}

type Shared = Arc<Mutex<World>>;

fn lock(w: &Shared) -> std::sync::MutexGuard<'_, World> {
    w.lock().unwrap_or_else(|p| p.into_inner())
}

/// The most targets an agent's prober has now, among the agent servers'
/// (`server`) or the host agents'.
fn max_targets(world: &Shared, server: bool) -> usize {
    let w = lock(world);
    w.targets
        .iter()
        .filter(|(h, _)| w.fleet.agent_servers.iter().any(|(a, _)| a == *h) == server)
        .map(|(_, n)| *n)
        .max()
        .unwrap_or(0)
}

/// The events file.
#[derive(Clone)]
struct Log(Arc<Mutex<std::fs::File>>);

impl Log {
    fn write(&self, e: &Event) {
        if let Ok(line) = serde_json::to_string(e) {
            let mut f = self.0.lock().unwrap_or_else(|p| p.into_inner());
            let _ = writeln!(f, "{line}");
        }
    }
}

/// A unit's holdfastd configuration, as an operator would place it (about
/// the size of a real one: the record's size counts in etcd).
pub fn unit_config(u: &SimUnit, index: usize) -> String {
    let mut c = format!(
        "[global]\nasn = {asn}\nrouter_id = \"{addr}\"\nlisten = \"{addr}:179\"\n\n[nsr]\nstore = \"redis://198.18.0.2:6379\"\ninstance = \"{name}\"\n",
        asn = 64512 + (index % 1000),
        addr = u.addr,
        name = u.name,
    );
    for k in 0..4 {
        c.push_str(&format!(
            "\n[[neighbor]]\naddress = \"198.18.{}.{}\"\nremote_asn = {}\nimport = \"all\"\nexport = \"all\"\n",
            1 + k,
            1 + index % 250,
            65001 + k
        ));
    }
    c
}

/// Runs the fleet's agents until the control file says `quit`.
pub async fn run(fleet: Fleet, cfg: AgentsConfig) -> anyhow::Result<()> {
    let file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&cfg.events)?;
    let log = Log(Arc::new(Mutex::new(file)));
    let keys = Keys::new(&cfg.cluster);
    listen_units(cfg.unit_port).await?;
    write_placement(&fleet, &cfg, &keys).await?;
    let (unblock_tx, unblock_rx) = mpsc::unbounded_channel();
    tokio::spawn(unblocker(unblock_rx, cfg.unit_port));
    let mut world = World {
        units: fleet
            .units
            .iter()
            .map(|u| (u.name.clone(), u.clone()))
            .collect(),
        fleet: fleet.clone(),
        down: BTreeSet::new(),
        blocked: BTreeSet::new(),
        plan: BTreeMap::new(),
        plan_version: 0,
        attached: BTreeSet::new(),
        targets: BTreeMap::new(),
        leader: None,
        unblock: unblock_tx,
    };
    world.replan();
    let world: Shared = Arc::new(Mutex::new(world));
    let counters = Arc::new(Counters::default());
    let mut names: Vec<(String, bool)> = fleet.hosts.iter().map(|h| (h.clone(), false)).collect();
    names.extend(fleet.agent_servers.iter().map(|(a, _)| (a.clone(), true)));
    let total = names.len();
    for (i, (name, server)) in names.into_iter().enumerate() {
        // A fleet boots over a few seconds, not in one instant: 50 agents
        // every 100 ms (a thousand in 2 s).
        if i > 0 && i % 50 == 0 {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let a = Agent {
            name,
            server,
            leader_plans: fleet.spec.probes == ProbeMode::Leader,
            pid: 10_000 + u32::try_from(i).unwrap_or(0),
            world: world.clone(),
            log: log.clone(),
            counters: counters.clone(),
            cfg: cfg.clone(),
            keys: keys.clone(),
        };
        tokio::spawn(a.run());
    }
    tokio::spawn(placement_task(world.clone(), cfg.clone(), keys.clone()));
    tokio::spawn(leader_task(world.clone(), cfg.clone(), keys.clone()));
    let ready_at = Instant::now() + Duration::from_secs(120);
    loop {
        if lock(&world).attached.len() == total {
            log.write(&Event::Ready {
                t: unix_ms(),
                agents: total,
                units: fleet.units.len(),
            });
            break;
        }
        if Instant::now() > ready_at {
            anyhow::bail!(
                "only {} of {total} agents attached within 120 s",
                lock(&world).attached.len()
            );
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    control_loop(world, log, counters, cfg).await
}

/// Every unit address answers on `port`: a `local` route for the whole
/// prefix (added by the driver) and one listener that takes and drops
/// each connection.
async fn listen_units(port: u16) -> anyhow::Result<()> {
    let l = tokio::net::TcpListener::bind(("0.0.0.0", port)).await?;
    tokio::spawn(async move {
        loop {
            if let Ok((s, _)) = l.accept().await {
                drop(s);
            }
        }
    });
    Ok(())
}

/// Writes every unit's record (as `holdfast ctl` or an operator would).
async fn write_placement(fleet: &Fleet, cfg: &AgentsConfig, keys: &Keys) -> anyhow::Result<()> {
    let chunks: Vec<Vec<(usize, SimUnit)>> = fleet
        .units
        .iter()
        .cloned()
        .enumerate()
        .collect::<Vec<_>>()
        .chunks(fleet.units.len().div_ceil(8).max(1))
        .map(<[_]>::to_vec)
        .collect();
    let mut tasks = Vec::new();
    for chunk in chunks {
        let mut store = Store::new(cfg.etcd.clone(), Duration::from_secs(5), keys.clone(), true)?;
        let keys = keys.clone();
        tasks.push(tokio::spawn(async move {
            for (i, u) in chunk {
                let rec = UnitRecord {
                    schema: holdfast_etcd::SCHEMA,
                    unit: u.name.clone(),
                    primary: u.primary.clone(),
                    backup: u.backup.clone(),
                    epoch: holdfast_etcd::Token(0),
                    config: unit_config(&u, i),
                    addresses: vec![format!("{}/32", u.addr)],
                    interface: "lo".into(),
                    app_failure: None,
                    preheated: false,
                    binary: None,
                };
                store
                    .put_request(&keys.unit(&u.name), &serde_json::to_string(&rec)?)
                    .await?;
            }
            anyhow::Ok(())
        }));
    }
    for t in tasks {
        t.await??;
    }
    Ok(())
}

/// Reads which replica leads every 100 ms, for every agent.
async fn leader_task(world: Shared, cfg: AgentsConfig, keys: Keys) {
    let Ok(mut store) = Store::new(cfg.etcd.clone(), Duration::from_millis(300), keys, true) else {
        return;
    };
    loop {
        if let Ok(l) = store.leader().await {
            let url = l.and_then(|(rec, _)| rec.attach).and_then(|a| {
                cfg.controllers
                    .iter()
                    .find(|u| u.trim_end_matches('/').ends_with(&a))
                    .cloned()
            });
            lock(&world).leader = url;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Re-reads the placement every [`PLACEMENT_EVERY`] and replans.
async fn placement_task(world: Shared, cfg: AgentsConfig, keys: Keys) {
    let Ok(mut store) = Store::new(cfg.etcd.clone(), Duration::from_secs(2), keys, true) else {
        return;
    };
    loop {
        tokio::time::sleep(PLACEMENT_EVERY).await;
        let Ok(units) = store.units().await else {
            continue;
        };
        let mut w = lock(&world);
        let mut changed = false;
        for r in units {
            if let Some(u) = w.units.get_mut(&r.unit) {
                if u.primary != r.primary || u.backup != r.backup {
                    u.primary = r.primary;
                    u.backup = r.backup;
                    changed = true;
                }
            }
        }
        if changed {
            w.replan();
        }
    }
}

/// Reads the control file's new lines: `down HOST...`, `quit`; writes the
/// stats once a second.
async fn control_loop(
    world: Shared,
    log: Log,
    counters: Arc<Counters>,
    cfg: AgentsConfig,
) -> anyhow::Result<()> {
    let mut read = 0usize;
    let mut last_stats = Instant::now();
    loop {
        tokio::time::sleep(Duration::from_millis(10)).await;
        let text = std::fs::read_to_string(&cfg.control).unwrap_or_default();
        if text.len() > read {
            let new = text[read..].to_string();
            let complete = new.rfind('\n').map_or(0, |i| i + 1);
            read += complete;
            for line in new[..complete].lines() {
                let mut w = line.split_whitespace();
                match w.next() {
                    Some("down") => {
                        let hosts: Vec<String> = w.map(str::to_string).collect();
                        down(&world, &hosts, cfg.unit_port)?;
                        log.write(&Event::Down {
                            t: unix_ms(),
                            hosts,
                        });
                    }
                    Some("quit") => return Ok(()),
                    _ => {}
                }
            }
        }
        if last_stats.elapsed() >= Duration::from_secs(1) {
            last_stats = Instant::now();
            let take = |c: &AtomicU64| c.swap(0, Ordering::Relaxed);
            // Each read takes the world's lock (not re-entrant) on its own.
            let attached = lock(&world).attached.len();
            let (targets_host, targets_server) =
                (max_targets(&world, false), max_targets(&world, true));
            log.write(&Event::Stats {
                t: unix_ms(),
                heartbeats: take(&counters.heartbeats),
                measurements: take(&counters.measurements),
                discarded: take(&counters.discarded),
                renewals: take(&counters.renewals),
                renewal_failures: take(&counters.renewal_failures),
                attached,
                plans: take(&counters.plans),
                targets_host,
                targets_server,
            });
        }
    }
}

/// Makes `hosts` fail: their agents go silent, their units' addresses drop
/// packets.
fn down(world: &Shared, hosts: &[String], port: u16) -> anyhow::Result<()> {
    let mut w = lock(world);
    w.down.extend(hosts.iter().cloned());
    let units: Vec<(String, std::net::Ipv4Addr)> = w
        .units
        .values()
        .filter(|u| hosts.contains(&u.primary))
        .map(|u| (u.name.clone(), u.addr))
        .collect();
    let mut rules = String::from("*filter\n");
    for (name, addr) in &units {
        rules.push_str(&format!(
            "-I INPUT -d {addr}/32 -p tcp --dport {port} -j DROP\n"
        ));
        w.blocked.insert(name.clone());
    }
    rules.push_str("COMMIT\n");
    drop(w);
    iptables_restore(&rules)
}

/// A unit taken over on a live host answers again.
fn unblock(world: &Shared, unit: &str) {
    let mut w = lock(world);
    if w.blocked.remove(unit) {
        if let Some(addr) = w.units.get(unit).map(|u| u.addr) {
            let _ = w.unblock.send(addr);
        }
    }
}

/// Lets the addresses through again, every one queued in one
/// `iptables-restore`.
async fn unblocker(mut rx: mpsc::UnboundedReceiver<std::net::Ipv4Addr>, port: u16) {
    while let Some(first) = rx.recv().await {
        let mut rules = String::from("*filter\n");
        let mut next = Some(first);
        while let Some(addr) = next {
            rules.push_str(&format!(
                "-D INPUT -d {addr}/32 -p tcp --dport {port} -j DROP\n"
            ));
            next = rx.try_recv().ok();
        }
        rules.push_str("COMMIT\n");
        let _ = tokio::task::spawn_blocking(move || iptables_restore(&rules)).await;
    }
}

fn iptables_restore(rules: &str) -> anyhow::Result<()> {
    let mut child = std::process::Command::new("iptables-restore")
        .args(["-w", "--noflush"])
        .stdin(std::process::Stdio::piped())
        .spawn()?;
    if let Some(mut stdin) = child.stdin.take() {
        stdin.write_all(rules.as_bytes())?;
    }
    let st = child.wait()?;
    anyhow::ensure!(st.success(), "iptables-restore: {st}");
    Ok(())
}

/// One simulated agent.
struct Agent {
    name: String,
    server: bool,
    /// It takes its plan from the leader (`--probes leader`).
    leader_plans: bool,
    pid: u32,
    world: Shared,
    log: Log,
    counters: Arc<Counters>,
    cfg: AgentsConfig,
    keys: Keys,
}

impl Agent {
    fn is_down(&self) -> bool {
        lock(&self.world).down.contains(&self.name)
    }

    async fn run(self) {
        let me = Arc::new(self);
        tokio::spawn(me.clone().lease());
        me.attach().await;
    }

    /// Grants the lease, keeps the agent's key on it, renews it.
    async fn lease(self: Arc<Self>) {
        let Ok(mut store) = Store::new(
            self.cfg.etcd.clone(),
            self.cfg.renew,
            self.keys.clone(),
            true,
        ) else {
            return;
        };
        let key = if self.server {
            self.keys.agent_server(&self.name)
        } else {
            self.keys.agent(&self.name)
        };
        // Taken before the record: the world's lock is not re-entrant.
        let domain = lock(&self.world).fleet.rack_of(&self.name);
        let value = holdfast_etcd::store::to_json(&AgentRecord {
            schema: holdfast_etcd::SCHEMA,
            host: self.name.clone(),
            failsafe: None,
            version: holdfast_version::VERSION.to_string(),
            domain,
            // The leader's plans name it (the simulated probes answer by
            // the target's name: the address is never dialled).
            probe_addr: (!self.server && self.leader_plans).then(|| {
                let i: u32 = self.name.trim_start_matches('h').parse().unwrap_or(0);
                format!("10.201.{}.{}:7", (i >> 8) & 0xff, i & 0xff)
            }),
        });
        let mut lease: Option<i64> = None;
        let mut tick = tokio::time::interval(self.cfg.renew);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            if self.is_down() {
                return;
            }
            let ok = match lease {
                None => match store.grant(self.cfg.ttl).await {
                    Ok((id, _)) => {
                        let put = store.put_leased(&key, &value, id).await.is_ok();
                        lease = put.then_some(id);
                        put
                    }
                    Err(_) => false,
                },
                Some(id) => match store.renew(id).await {
                    Ok(left) if left > Duration::ZERO => true,
                    Ok(_) => {
                        lease = None;
                        false
                    }
                    Err(_) => false,
                },
            };
            let c = if ok {
                &self.counters.renewals
            } else {
                &self.counters.renewal_failures
            };
            c.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// The units this agent runs as primary.
    fn my_units(&self) -> Vec<UnitStatus> {
        lock(&self.world)
            .units
            .values()
            .filter(|u| u.primary == self.name)
            .map(|u| UnitStatus {
                unit: u.name.clone(),
                pid: self.pid,
                role: "primary".into(),
                epoch: 0,
            })
            .collect()
    }

    /// Keeps one Attach stream open to the leader etcd names.
    async fn attach(self: Arc<Self>) {
        let mut highest = 0u64;
        let mut next = 0usize;
        let mut backoff = Backoff::default();
        loop {
            if self.is_down() {
                // A failed host sends nothing ever again.
                std::future::pending::<()>().await;
            }
            let named = lock(&self.world).leader.clone();
            let url = named.unwrap_or_else(|| {
                next += 1;
                self.cfg.controllers[next % self.cfg.controllers.len()].clone()
            });
            backoff.towards(&url);
            let mut attached = false;
            let why = match self.stream(&url, &mut highest, &mut attached).await {
                Ok(why) | Err(why) => why,
            };
            lock(&self.world).attached.remove(&self.name);
            self.log.write(&Event::Detached {
                t: unix_ms(),
                host: self.name.clone(),
                why,
            });
            // As the real agent: back off with jitter after a failed attach.
            if attached {
                backoff.reset();
                tokio::time::sleep(Backoff::FIRST).await;
            } else {
                tokio::time::sleep(backoff.failed(fastrand::f64())).await;
            }
        }
    }

    /// One stream, until it ends; `Ok`/`Err`: why.
    async fn stream(
        &self,
        url: &str,
        highest: &mut u64,
        attached: &mut bool,
    ) -> Result<String, String> {
        let endpoint = tonic::transport::Endpoint::from_shared(url.to_string())
            .map_err(|e| e.to_string())?
            .connect_timeout(ATTACH_WITHIN);
        let channel = tokio::time::timeout(ATTACH_WITHIN, endpoint.connect())
            .await
            .map_err(|_| format!("{url}: connect timed out"))?
            .map_err(|e| format!("{url}: {e}"))?;
        let mut client = ControllerClient::new(channel);
        let (tx, rx) = mpsc::unbounded_channel::<AgentReport>();
        let report = |b: agent_report::Body| AgentReport { body: Some(b) };
        let _ = tx.send(report(agent_report::Body::Hello(Hello {
            host: self.name.clone(),
            agent_server: self.server,
            units: if self.server {
                Vec::new()
            } else {
                self.my_units()
            },
            highest_token: *highest,
            schema: holdfast_control_api::SCHEMA,
            version: holdfast_version::VERSION.to_string(),
            reports_refused: true,
            probe_plans: self.leader_plans,
        })));
        let outbound = tokio_stream::wrappers::UnboundedReceiverStream::new(rx);
        let mut inbound = tokio::time::timeout(ATTACH_WITHIN, client.attach(outbound))
            .await
            .map_err(|_| format!("{url}: no answer to Attach"))?
            .map_err(|s| format!("{url}: {}", s.message()))?
            .into_inner();
        *attached = true;
        lock(&self.world).attached.insert(self.name.clone());
        self.log.write(&Event::Attached {
            t: unix_ms(),
            host: self.name.clone(),
            url: url.to_string(),
        });
        // The prober runs four times per probe interval (its targets are
        // spread over the interval), heartbeats once.
        let mut tick = tokio::time::interval(self.cfg.interval / 4);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
        let t0 = Instant::now();
        let mut prober: Option<(u64, Prober)> = None;
        // The leader's plan (with `--probes leader`): its version, targets.
        let mut from_leader: (u64, Vec<String>) = (0, Vec::new());
        // Outcomes ride in the heartbeats once the leader's beat says it
        // takes them there, as a real agent's do.
        let mut outbox = Outbox::default();
        let mut next_beat = Instant::now();
        let mut heard = Instant::now();
        loop {
            tokio::select! {
                m = inbound.message() => match m {
                    Ok(Some(c)) => {
                        heard = Instant::now();
                        if self.is_down() {
                            continue;
                        }
                        *highest = (*highest).max(c.token);
                        if let Some(command::Body::Beat(b)) = &c.body {
                            for r in outbox.beat(b.takes_measurements) {
                                tx.send(report(r)).map_err(|_| "closed".to_string())?;
                            }
                        }
                        if let Some(command::Body::ProbeTargets(p)) = &c.body {
                            from_leader.0 += 1;
                            from_leader.1 = p.targets.iter().map(|t| t.name.clone()).collect();
                            self.counters.plans.fetch_add(1, Ordering::Relaxed);
                        }
                        for r in self.command(&c) {
                            tx.send(report(r)).map_err(|_| "closed".to_string())?;
                        }
                    }
                    Ok(None) => return Ok(format!("{url}: closed")),
                    Err(s) => return Err(format!("{url}: {}", s.message())),
                },
                _ = tick.tick() => {
                    if self.is_down() {
                        continue;
                    }
                    if heard.elapsed() >= SILENCE {
                        return Ok(format!("{url}: silent for {SILENCE:?}"));
                    }
                    if Instant::now() >= next_beat {
                        next_beat += self.cfg.interval;
                        let _ = tx.send(report(outbox.heartbeat(unix_ms())));
                        self.counters.heartbeats.fetch_add(1, Ordering::Relaxed);
                    }
                    let leader = self.leader_plans.then_some(&from_leader);
                    for m in self.probe(&mut prober, leader, t0.elapsed()) {
                        if let Some(r) = outbox.measured(m, unix_ms()) {
                            let _ = tx.send(report(r));
                        }
                    }
                }
            }
        }
    }

    /// One round of the agent's prober at `now`: its plan's probes (the
    /// harness's, or `leader`'s: version and targets) sent and answered (or
    /// not) as the fleet says; the outcomes it reports.
    fn probe(
        &self,
        prober: &mut Option<(u64, Prober)>,
        leader: Option<&(u64, Vec<String>)>,
        now: Duration,
    ) -> Vec<Measurement> {
        let mut w = lock(&self.world);
        let version = leader.map_or(w.plan_version, |(v, _)| *v);
        // The targets are read only when the plan changed (an agent server
        // holds 5,500 of them, and this runs 40 times a second).
        if !matches!(prober, Some((v, _)) if *v == version) {
            let names: &[String] = match leader {
                Some((_, t)) => t,
                None => w.plan.get(&self.name).map_or(&[], Vec::as_slice),
            };
            let targets: Vec<Target> = names
                .iter()
                .map(|t| Target {
                    name: t.clone(),
                    addr: std::net::SocketAddr::from(([0, 0, 0, 0], 0)),
                })
                .collect();
            let n = targets.len();
            match prober {
                Some((v, p)) => {
                    p.set_targets(targets, now);
                    *v = version;
                }
                None => {
                    let cfg = ProbeConfig {
                        interval: self.cfg.interval,
                        timeout: self.cfg.interval,
                        stall_slack: self.cfg.interval / 2,
                        report_every: self.cfg.report_every.max(self.cfg.interval),
                        ..ProbeConfig::default()
                    };
                    *prober = Some((version, Prober::new(&self.name, cfg, targets, now)));
                }
            }
            w.targets.insert(self.name.clone(), n);
        }
        let Some((_, p)) = prober.as_mut() else {
            return Vec::new();
        };
        let mut outputs = p.handle(now, ProbeInput::Timer);
        let mut i = 0;
        while i < outputs.len() {
            if let ProbeOutput::Probe { target, seq, .. } = outputs[i] {
                if p.target(target).is_some_and(|t| w.answers(&t.name)) {
                    let answered = ProbeInput::Answered {
                        target,
                        seq,
                        ok: true,
                        at: now,
                    };
                    outputs.extend(p.handle(now, answered));
                }
            }
            i += 1;
        }
        let discarded = outputs
            .iter()
            .filter(|o| matches!(o, ProbeOutput::Discarded { .. }))
            .count();
        self.counters
            .discarded
            .fetch_add(discarded as u64, Ordering::Relaxed);
        let out: Vec<Measurement> = outputs
            .into_iter()
            .filter_map(|o| match o {
                ProbeOutput::Measured(m) => Some(Measurement {
                    from: m.from,
                    target: m.target,
                    seq: m.seq,
                    sent_unix_ms: unix_ms(),
                    ok: m.ok,
                    refused: m.refused,
                    rtt_us: m
                        .rtt
                        .map_or(0, |r| u32::try_from(r.as_micros()).unwrap_or(u32::MAX)),
                    waited_ms: 0,
                }),
                _ => None,
            })
            .collect();
        self.counters
            .measurements
            .fetch_add(out.len() as u64, Ordering::Relaxed);
        out
    }

    /// Carries out a command: logs it, and answers (nothing for a beat).
    fn command(&self, c: &holdfast_control_api::v1::Command) -> Vec<agent_report::Body> {
        let (kind, unit) = match &c.body {
            // No plan comes: the simulated agents run their own plan
            // (`Hello.probe_plans` is false).
            Some(command::Body::Beat(_) | command::Body::ProbeTargets(_)) | None => {
                return Vec::new()
            }
            Some(command::Body::StartUnit(s)) => ("start_unit", s.unit.clone()),
            Some(command::Body::FenceUnit(f)) => ("fence_unit", f.unit.clone()),
            Some(command::Body::MoveAddress(m)) => ("move_address", m.unit.clone()),
            Some(command::Body::Takeover(t)) => ("takeover", t.unit.clone()),
            Some(command::Body::Switchover(s)) => ("switchover", s.unit.clone()),
        };
        self.log.write(&Event::Command {
            t: unix_ms(),
            host: self.name.clone(),
            kind: kind.into(),
            unit: unit.clone(),
            token: c.token,
        });
        let mut event = None;
        match &c.body {
            Some(command::Body::Takeover(_)) => {
                {
                    let mut w = lock(&self.world);
                    if let Some(u) = w.units.get_mut(&unit) {
                        u.primary = self.name.clone();
                    }
                }
                unblock(&self.world, &unit);
                event = Some(UnitEvent {
                    unit: unit.clone(),
                    pid: self.pid,
                    kind: unit_event::Kind::Started as i32,
                    code: 0,
                    signal: 0,
                    role: "primary".into(),
                });
            }
            Some(command::Body::MoveAddress(m)) if m.add => {
                unblock(&self.world, &unit);
            }
            _ => {}
        }
        // A takeover's unit event goes before its result, as a real
        // agent's does (the process starts, then the step is done).
        let mut out: Vec<agent_report::Body> = event
            .into_iter()
            .map(agent_report::Body::UnitEvent)
            .collect();
        out.push(agent_report::Body::Result(CommandResult {
            id: c.id,
            ok: true,
            error: String::new(),
        }));
        out
    }
}
