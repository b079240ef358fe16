//! Takeover time against table size (and the NSR figures of
//! `holdfast-nsr-bench`): learning N routes with NSR on against off, the
//! added ACK delay, the store size per session at rest, and the takeover
//! phases (TENSOR Table 1) with N routes in the tables.
//!
//! NSR off: holdfastd alone in the lab. NSR on: the unit `bench` under the
//! control plane ([`crate::plane_unit`]); the takeover is the controller's
//! (SIGKILL of the unit on a, b's agent takes it over).
//!
//! ```text
//!   bridge lan 198.18.0.0/24
//!   [ peer ] .1 (NSR off) / [ p ] .20 (NSR on)   monitor tester (AS 65002): receives the N routes
//!   [ redis ] .2  redis-server (NSR on)
//!   [ a ] .3 / [ b ] .4   holdfastd (NSR on: the unit's containers on the hosts), service address .10
//!   [ feed ] .5   injector tester (AS 65001): sends N packed routes
//!   c1..c3        etcd + holdfast-controller (NSR on)
//! ```

use crate::plane_unit::{
    distinct_routes, show_nsr, wait_all_established, BenchPlane, ORIGINATED, UNIT,
};
use anyhow::{bail, Result};
use holdfast_lab::{nsr_config, Holdfastd, Lab, NsrTopo, StoreServers};
use holdfast_tester::workload::{generate, prefix_count, Kind};
use holdfast_tester::{encode_routes, netns::in_netns, Config, Peer as Tester};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::Path;
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
    /// The upgrade, if one was run ([`Backup::Upgrade`]).
    pub upgrade: Option<Upgrade>,
}

/// `holdfast ctl upgrade` of the unit with the N routes in its tables.
pub struct Upgrade {
    /// `holdfast ctl upgrade --wait`'s own time (its `seconds`).
    pub seconds: f64,
    /// When it saw the standby step done (`steps_done_at.standby`): the new
    /// build's standby started on the backup host and followed the store.
    pub standby_s: f64,
    /// The monitor kept every route and got no NOTIFICATION.
    pub routes_kept: bool,
}

/// A takeover's phases.
pub struct Takeover {
    /// The control plane's time: the kill → every session Established at
    /// the backup (the controller's detection and decision, the agent's
    /// start, the takeover itself).
    pub control_ms: f64,
    /// From the kill to the first message from the backup received by the
    /// monitor peer (the control plane's time included).
    pub peer_ms: f64,
    /// holdfastd's own account (`show nsr` takeover phases).
    pub holdfastd: serde_json::Value,
    /// The monitor kept every route and got no NOTIFICATION.
    pub routes_kept: bool,
}

impl Takeover {
    /// BGP resume: from the takeover command (the backup's start, or its
    /// `nsr takeover`) to its sessions resumed (first KEEPALIVE queued),
    /// holdfastd's own account (`resumed_us`), ms.
    pub fn resume_ms(&self) -> f64 {
        self.holdfastd["resumed_us"].as_u64().unwrap_or(0) as f64 / 1e3
    }
}

/// Waits until a standby has followed both sessions, its last poll found
/// nothing new (the primary is idle by then), and it has compared the
/// Adj-RIB-Outs (`prepared`).
fn wait_caught_up(sb: &Path, n: usize) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        // Its agent starts it once the placement is read: until then no
        // socket answers.
        let v = show_nsr(sb).unwrap_or_default();
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

/// `show nsr` once every session's replication is confirmed (no operation
/// waiting for the store), or as it stands after `within`.
pub(crate) fn nsr_at_rest(sock: &Path, within: Duration) -> Result<serde_json::Value> {
    let deadline = Instant::now() + within;
    loop {
        let v = show_nsr(sock)?;
        let idle = v["sessions"]
            .as_array()
            .is_some_and(|s| s.iter().all(|x| x["lag_ops"] == 0));
        if idle || Instant::now() > deadline {
            return Ok(v);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Bytes Redis holds per session key (MEMORY USAGE of every key), over
/// every master of a cluster.
fn store_bytes(lab: &Lab, servers: &StoreServers) -> Result<Vec<(String, u64)>> {
    let mut per: std::collections::BTreeMap<String, u64> = Default::default();
    for redis in servers.masters(lab)? {
        let keys = redis.cli(lab, &["--scan", "--pattern", "hf:*"])?;
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
    }
    Ok(per.into_iter().collect())
}

/// Which backup takes over at the end of a run (NSR on).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backup {
    /// No takeover.
    None,
    /// Cold: the agent starts `holdfastd --takeover` after the kill, which
    /// loads the store.
    Cold,
    /// Preheated: the placement says `"preheated": true`, so b's agent runs
    /// `holdfastd --standby` from before the routes are sent; after the
    /// kill the agent has it take over (`nsr takeover`).
    Preheated,
    /// No kill: once the preheated standby has followed the routes,
    /// `holdfast ctl upgrade` moves the unit to another copy of holdfastd
    /// (a new standby of it on b reads the whole store: the warm-up).
    Upgrade,
}

/// Streams `bytes` from `inj` and waits until `mon` holds `want` routes.
fn learn(
    inj: &Arc<Tester>,
    mon: &Tester,
    bytes: Vec<u8>,
    want: usize,
    deadline: Duration,
) -> Result<Duration> {
    let t0 = Instant::now();
    let sender = {
        let inj = inj.clone();
        std::thread::spawn(move || inj.send_stream(&bytes))
    };
    while mon.route_count() < want {
        if t0.elapsed() > deadline {
            bail!(
                "monitor holds {} of {want} after {deadline:?}",
                mon.route_count()
            );
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    let learn = t0.elapsed();
    sender
        .join()
        .map_err(|_| anyhow::anyhow!("sender panicked"))??;
    Ok(learn)
}

/// One run: N routes of `kind` learned with NSR on or off; with a `backup`
/// (NSR on), the primary is then killed and the control plane takes the
/// unit over.
pub fn one_run(
    n: usize,
    kind: Kind,
    nsr: bool,
    backup: Backup,
    deadline: Duration,
) -> Result<Sample> {
    if nsr {
        return one_run_on(n, kind, backup, deadline, false);
    }
    let mut lab = Lab::new("nsr_bench_off")?;
    let topo = NsrTopo::build(&mut lab)?;
    if std::env::var("HOLDFAST_LAB_KEEP").is_ok_and(|v| v == "1") {
        lab.capture_start()?;
    }
    let cfg = config(&topo, None);
    let hf = Holdfastd::start(&mut lab, topo.a.id, "hf0", &cfg)?;
    let svc = IpAddr::V4(topo.service_v4);
    let mon = tester(&lab, topo.peer.id, topo.peer.v4, svc, MON_AS)?;
    let inj = tester(&lab, topo.feed.id, topo.feed.v4, svc, INJ_AS)?;
    hf.wait_all_established(Duration::from_secs(30))?;
    let w = generate(kind, n, INJ_AS, topo.feed.v4);
    let n = prefix_count(&w);
    let mut bytes = Vec::new();
    encode_routes(&w, &inj.ctx, &mut bytes);
    drop(w);
    let learn = learn(&inj, &mon, bytes, n, deadline)?;
    drop(hf);
    Ok(Sample {
        learn,
        nsr: None,
        store_bytes: Vec::new(),
        takeover: None,
        upgrade: None,
    })
}

/// [`one_run`] with NSR on: the unit under the control plane
/// ([`BenchPlane`]), its store one redis-server or, with `cluster`, a
/// Redis Cluster of three masters and three replicas.
pub fn one_run_on(
    n: usize,
    kind: Kind,
    backup: Backup,
    deadline: Duration,
    cluster: bool,
) -> Result<Sample> {
    let feed = Ipv4Addr::new(198, 18, 0, 5);
    let bp = BenchPlane::up_on(
        if cluster {
            "nsr_bench_cluster"
        } else {
            "nsr_bench_on"
        },
        &[
            (feed, INJ_AS, "none"),
            (BenchPlane::mon_addr(), MON_AS, "all"),
        ],
        matches!(backup, Backup::Preheated | Backup::Upgrade),
        cluster,
    )?;
    let lab = &bp.plane.lab;
    let topo = &bp.plane.topo;
    let svc = IpAddr::V4(topo.service_v4);
    let mon = tester(lab, bp.mon.id, bp.mon.v4, svc, MON_AS)?;
    let inj = tester(lab, topo.feed.id, topo.feed.v4, svc, INJ_AS)?;
    let sock = bp.socket("a");
    wait_all_established(&sock, Duration::from_secs(60))?;
    let w = generate(kind, n, INJ_AS, topo.feed.v4);
    let n = prefix_count(&w);
    // The injected prefixes and the unit's own, each once (the realistic
    // mix holds some of the unit's).
    let want = distinct_routes(std::slice::from_ref(&w), ORIGINATED);
    let mut bytes = Vec::new();
    encode_routes(&w, &inj.ctx, &mut bytes);
    drop(w);
    let learn = learn(&inj, &mon, bytes, want, deadline)?;
    let mut sample = Sample {
        learn,
        nsr: Some(nsr_at_rest(&sock, Duration::from_secs(30))?),
        store_bytes: store_bytes(lab, &bp.plane.redis)?,
        takeover: None,
        upgrade: None,
    };
    if backup == Backup::None {
        return Ok(sample);
    }
    if matches!(backup, Backup::Preheated | Backup::Upgrade) {
        wait_caught_up(&bp.socket("b"), n)?;
    }
    if backup == Backup::Upgrade {
        sample.upgrade = Some(upgrade(&bp, &mon, want)?);
        return Ok(sample);
    }
    let (killed, control) = bp.kill_and_take_over("a", "b")?;
    let deadline = Instant::now() + Duration::from_secs(30);
    let first = loop {
        if let Some(t) = mon.view(|v| v.last_message).filter(|t| *t > killed) {
            break t;
        }
        if Instant::now() > deadline {
            bail!("the monitor heard nothing from the backup");
        }
        std::thread::sleep(Duration::from_millis(1));
    };
    // All state resumed: tables rebuilt (reported by holdfastd).
    let new = bp.socket("b");
    let deadline = Instant::now() + Duration::from_secs(60);
    let v = loop {
        let v = show_nsr(&new)?;
        if v["takeover"]["tables_us"].as_u64().unwrap_or(0) > 0 || Instant::now() > deadline {
            break v;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let kept = mon.view(|v| v.notifications.is_empty() && !v.closed) && mon.route_count() >= want;
    sample.takeover = Some(Takeover {
        control_ms: control.as_secs_f64() * 1e3,
        peer_ms: first.duration_since(killed).as_secs_f64() * 1e3,
        holdfastd: v["takeover"].clone(),
        routes_kept: kept,
    });
    Ok(sample)
}

/// `holdfast ctl upgrade UNIT --binary COPY --wait`: the unit moves to a
/// copy of the same holdfastd at another path (the agents tell builds
/// apart by path), through a new standby of it on b.
fn upgrade(bp: &BenchPlane, mon: &Tester, want: usize) -> Result<Upgrade> {
    let bin = bp
        .plane
        .lab
        .place_build(Path::new(&bp.plane.bins.holdfastd), "next")?
        .display()
        .to_string();
    let v = bp
        .plane
        .ctl(&["upgrade", UNIT, "--binary", &bin, "--wait", "600"])?;
    if v["done"] != true {
        bail!("holdfast ctl upgrade: {v}");
    }
    let kept = mon.view(|v| v.notifications.is_empty() && !v.closed) && mon.route_count() >= want;
    Ok(Upgrade {
        seconds: v["seconds"].as_f64().unwrap_or(f64::NAN),
        standby_s: v["steps_done_at"]["standby"].as_f64().unwrap_or(f64::NAN),
        routes_kept: kept,
    })
}
