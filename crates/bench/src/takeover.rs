//! Takeover time against table size (and the NSR figures of
//! `holdfast-nsr-bench`): learning N routes with NSR on against off, the
//! added ACK delay, the store size per session at rest, and the takeover
//! phases (TENSOR Table 1) with N routes in the tables.
//!
//! ```text
//!   bridge lan 198.18.0.0/24
//!   [ peer ] .1   monitor tester (AS 65002): receives the N routes from holdfastd
//!   [ redis ] .2  redis-server (NSR on)
//!   [ a ] .3 / [ b ] .4   holdfastd primary / backup, service address .10
//!   [ feed ] .5   injector tester (AS 65001): sends N packed routes
//! ```

use anyhow::{bail, Result};
use holdfast_lab::{
    nsr_config, Fence, Holdfastd, Lab, LabOrchestrator, NsrTopo, Orchestrator, Redis, StartOpts,
};
use holdfast_tester::workload::{generate, prefix_count, Kind};
use holdfast_tester::{encode_routes, netns::in_netns, Config, Peer as Tester};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The injector's AS.
pub const INJ_AS: u32 = 65001;
/// The monitor's AS.
pub const MON_AS: u32 = 65002;

/// A tester session from `local` (inside `host`'s namespace) to `to`,
/// retrying for up to 30 s while the speaker is not yet accepting.
pub(crate) fn tester(
    lab: &Lab,
    host: holdfast_lab::HostId,
    local: Ipv4Addr,
    to: IpAddr,
    asn: u32,
) -> Result<Arc<Tester>> {
    let ns = lab.netns(host).to_string();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let mut cfg = Config::new(asn, local);
        cfg.families = vec![holdfast_wire::Family::IPV4_UNICAST];
        cfg.hold_time = 90;
        let r = in_netns(&ns, move || {
            Tester::connect(
                SocketAddr::new(to, 179),
                Some(IpAddr::V4(local)),
                &cfg,
                Duration::from_secs(5),
            )
        })?;
        match r {
            Ok(p) => return Ok(Arc::new(p)),
            Err(e) if Instant::now() < deadline => {
                let _ = e;
                std::thread::sleep(Duration::from_millis(200));
            }
            Err(e) => bail!("tester {local} -> {to}: {e}"),
        }
    }
}

fn config(topo: &NsrTopo, redis: Option<&str>) -> String {
    config_with(
        topo,
        redis,
        &[
            (topo.feed.v4, INJ_AS, "none"),
            (topo.peer.v4, MON_AS, "all"),
        ],
    )
}

/// The bench's holdfastd configuration: one passive neighbour per
/// `(address, AS, export)` (import all), every session from the service
/// address; with `redis` its `[nsr]` table, without it none (NSR off).
pub(crate) fn config_with(
    topo: &NsrTopo,
    redis: Option<&str>,
    neighbors: &[(Ipv4Addr, u32, &str)],
) -> String {
    let mut extra = String::new();
    for (addr, asn, export) in neighbors {
        extra.push_str(&format!(
            "[[neighbor]]\naddress = \"{addr}\"\nremote_asn = {asn}\nlocal_address = \"{svc}\"\npassive = true\nimport = \"all\"\nexport = \"{export}\"\n",
            svc = topo.service_v4
        ));
    }
    let full = nsr_config(
        topo,
        redis.unwrap_or("redis://127.0.0.1:1"),
        "bench",
        &[],
        &extra,
    );
    match redis {
        Some(_) => full,
        None => {
            // NSR off: the same configuration without its [nsr] table.
            let mut out = String::new();
            let mut skip = false;
            for line in full.lines() {
                if line.trim_start().starts_with('[') {
                    skip = line.trim() == "[nsr]";
                }
                if !skip {
                    out.push_str(line);
                    out.push('\n');
                }
            }
            out
        }
    }
}

/// One run's figures.
pub struct Sample {
    /// Time to learn and re-advertise the N routes.
    pub learn: Duration,
    /// `show nsr` at rest (NSR on).
    pub nsr: Option<serde_json::Value>,
    /// Bytes Redis holds per session at rest (NSR on).
    pub store_bytes: Vec<(String, u64)>,
    /// The takeover, if one was run.
    pub takeover: Option<Takeover>,
}

/// A takeover's phases.
pub struct Takeover {
    /// Orchestrator total: kill → sessions Established at the backup.
    pub orchestrator_ms: f64,
    /// From the takeover command (holdfastd --takeover started) to the
    /// first message from the backup received by the monitor peer.
    pub resume_ms: f64,
    /// holdfastd's own account (`show nsr` takeover phases).
    pub holdfastd: serde_json::Value,
    /// The monitor kept every route and got no NOTIFICATION.
    pub routes_kept: bool,
}

/// Waits until a standby has followed both sessions, its last poll found
/// nothing new (the primary is idle by then), and it has compared the
/// Adj-RIB-Outs (`prepared`).
fn wait_caught_up(sb: &Holdfastd, lab: &Lab, n: usize) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let v = show_nsr(sb, lab)?;
        let s = &v["standby"];
        if s["sessions"].as_u64() == Some(2) && s["prepared"].as_bool() == Some(true) {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("the standby did not catch up with {n} routes: {s}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

pub(crate) fn show_nsr(hf: &Holdfastd, lab: &Lab) -> Result<serde_json::Value> {
    let v = hf.cli_json(lab, &["show", "nsr"])?;
    Ok(v.get("ok").and_then(|b| b.get("nsr")).cloned().unwrap_or(v))
}

/// `show nsr` once every session's replication is confirmed (no operation
/// waiting for the store), or as it stands after `within`.
pub(crate) fn nsr_at_rest(
    hf: &Holdfastd,
    lab: &Lab,
    within: Duration,
) -> Result<serde_json::Value> {
    let deadline = Instant::now() + within;
    loop {
        let v = show_nsr(hf, lab)?;
        let idle = v["sessions"]
            .as_array()
            .is_some_and(|s| s.iter().all(|x| x["lag_ops"] == 0));
        if idle || Instant::now() > deadline {
            return Ok(v);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Bytes Redis holds per session key (MEMORY USAGE of every key).
fn store_bytes(lab: &Lab, redis: &Redis) -> Result<Vec<(String, u64)>> {
    let keys = redis.cli(lab, &["--scan", "--pattern", "hf:*"])?;
    let mut per: std::collections::BTreeMap<String, u64> = Default::default();
    for k in keys.lines().filter(|l| !l.is_empty()) {
        let n: u64 = redis
            .cli(lab, &["MEMORY", "USAGE", k])?
            .trim()
            .parse()
            .unwrap_or(0);
        let session = match k.split_once(":s:") {
            Some((_, rest)) => rest.rsplit_once(':').map_or(rest, |(s, _)| s).to_string(),
            None => "(instance)".to_string(),
        };
        *per.entry(session).or_default() += n;
    }
    Ok(per.into_iter().collect())
}

/// Which backup takes over at the end of a run (NSR on).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backup {
    /// No takeover.
    None,
    /// Cold: `holdfastd --takeover` started after the kill loads the store.
    Cold,
    /// Preheated: `holdfastd --standby` started on b before the routes are
    /// sent follows the store; after the kill it is sent `nsr takeover`.
    Preheated,
}

/// The preheated standby of a run with a store (`Backup::Preheated`), on
/// host B; none otherwise (a cold backup starts at the takeover).
pub(crate) fn start_standby(
    lab: &mut Lab,
    topo: &NsrTopo,
    cfg: &str,
    store: bool,
    backup: Backup,
) -> Result<Option<Holdfastd>> {
    if !store || backup != Backup::Preheated {
        return Ok(None);
    }
    let opts = StartOpts {
        standby: true,
        ..StartOpts::default()
    };
    Ok(Some(Holdfastd::start_with(
        lab, topo.b.id, "hf1", cfg, &opts,
    )?))
}

/// One run: N routes of `kind` learned with NSR on or off; with a `backup`
/// (NSR on), the primary is then killed and the backup takes over.
pub fn one_run(
    n: usize,
    kind: Kind,
    nsr: bool,
    backup: Backup,
    deadline: Duration,
) -> Result<Sample> {
    let mut lab = Lab::new(if nsr { "nsr_bench_on" } else { "nsr_bench_off" })?;
    let topo = NsrTopo::build(&mut lab)?;
    if std::env::var("HOLDFAST_LAB_KEEP").is_ok_and(|v| v == "1") {
        lab.capture_start()?;
    }
    let redis = if nsr {
        Some(Redis::start(
            &mut lab,
            topo.redis.id,
            IpAddr::V4(topo.redis.v4),
            6379,
        )?)
    } else {
        None
    };
    let cfg = config(&topo, redis.as_ref().map(|r| r.url()).as_deref());
    let hf = Holdfastd::start(&mut lab, topo.a.id, "hf0", &cfg)?;
    let svc = IpAddr::V4(topo.service_v4);
    let mon = tester(&lab, topo.peer.id, topo.peer.v4, svc, MON_AS)?;
    let inj = tester(&lab, topo.feed.id, topo.feed.v4, svc, INJ_AS)?;
    hf.wait_all_established(Duration::from_secs(30))?;
    let mut standby = start_standby(&mut lab, &topo, &cfg, redis.is_some(), backup)?;
    let w = generate(kind, n, INJ_AS, topo.feed.v4);
    let n = prefix_count(&w);
    let mut bytes = Vec::new();
    encode_routes(&w, &inj.ctx, &mut bytes);
    drop(w);
    let t0 = Instant::now();
    let sender = {
        let inj = inj.clone();
        std::thread::spawn(move || inj.send_stream(&bytes))
    };
    while mon.route_count() < n {
        if t0.elapsed() > deadline {
            bail!(
                "monitor holds {} of {n} after {deadline:?}",
                mon.route_count()
            );
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    let learn = t0.elapsed();
    sender
        .join()
        .map_err(|_| anyhow::anyhow!("sender panicked"))??;
    let mut sample = Sample {
        learn,
        nsr: None,
        store_bytes: Vec::new(),
        takeover: None,
    };
    if let Some(redis) = &redis {
        sample.nsr = Some(nsr_at_rest(&hf, &lab, Duration::from_secs(30))?);
        sample.store_bytes = store_bytes(&lab, redis)?;
        if backup != Backup::None {
            let mut orch = LabOrchestrator::new(&topo);
            let (new, killed, times) = match standby.take() {
                Some(sb) => {
                    wait_caught_up(&sb, &lab, n)?;
                    let killed = Instant::now();
                    let (new, times) = orch
                        .takeover_standby(&mut lab, &hf, sb, Fence::Kill)
                        .map_err(|e| anyhow::anyhow!("standby takeover: {e}"))?;
                    (new, killed, times)
                }
                None => {
                    let killed = Instant::now();
                    let (new, times) = orch
                        .takeover(&mut lab, &hf, topo.b.id, "hf1", &cfg, Fence::Kill)
                        .map_err(|e| anyhow::anyhow!("takeover: {e}"))?;
                    (new, killed, times)
                }
            };
            let command = killed + times.fence;
            let deadline = Instant::now() + Duration::from_secs(30);
            let first = loop {
                if let Some(t) = mon.view(|v| v.last_message).filter(|t| *t > command) {
                    break t;
                }
                if Instant::now() > deadline {
                    bail!("the monitor heard nothing from the backup");
                }
                std::thread::sleep(Duration::from_millis(1));
            };
            // All state resumed: tables rebuilt (reported by holdfastd).
            let deadline = Instant::now() + Duration::from_secs(60);
            let v = loop {
                let v = show_nsr(&new, &lab)?;
                if v["takeover"]["tables_us"].as_u64().unwrap_or(0) > 0 || Instant::now() > deadline
                {
                    break v;
                }
                std::thread::sleep(Duration::from_millis(20));
            };
            let kept =
                mon.view(|v| v.notifications.is_empty() && !v.closed) && mon.route_count() >= n;
            sample.takeover = Some(Takeover {
                orchestrator_ms: times.total.as_secs_f64() * 1e3,
                resume_ms: first.duration_since(command).as_secs_f64() * 1e3,
                holdfastd: v["takeover"].clone(),
                routes_kept: kept,
            });
            drop(new);
        }
    }
    drop(standby);
    drop(hf);
    Ok(sample)
}
