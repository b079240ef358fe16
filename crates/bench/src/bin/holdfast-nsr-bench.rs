//! Non-stop-routing figures (docs/nsr.md): NSR overhead on learning N
//! routes (NSR on against off, same run, interleaved), the added ACK delay
//! under that load, the store size per session at rest, and the takeover
//! phases (TENSOR Table 1) with N routes in the tables.
//!
//! ```text
//!   bridge lan 198.18.0.0/24
//!   [ peer ] .1   monitor tester (AS 65002): receives the N routes from holdfastd
//!   [ redis ] .2  redis-server (NSR on)
//!   [ a ] .3 / [ b ] .4   holdfastd primary / backup, service address .10
//!   [ feed ] .5   injector tester (AS 65001): sends N packed routes
//! ```
//!
//! A benchmark, not a test: it prints a Markdown report. Every loop is
//! bounded (sizes × runs, and a deadline per wait).

use anyhow::{bail, Context, Result};
use clap::Parser;
use holdfast_lab::{
    nsr_config, Fence, Holdfastd, Lab, LabOrchestrator, NsrTopo, Orchestrator, Redis,
};
use holdfast_tester::workload::{generate, prefix_count, Kind};
use holdfast_tester::{encode_routes, netns::in_netns, Config, Peer as Tester};
use std::fmt::Write as _;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};

const INJ_AS: u32 = 65001;
const MON_AS: u32 = 65002;
const DEADLINE: Duration = Duration::from_secs(300);

#[derive(Parser, Debug)]
#[command(
    name = "holdfast-nsr-bench",
    about = "NSR overhead, ACK delay, store size and takeover phases"
)]
struct Args {
    /// Table sizes (k/M suffixes).
    #[arg(long, default_value = "10k,1M", value_delimiter = ',')]
    sizes: Vec<String>,
    /// Runs per mode and size (median reported).
    #[arg(long, default_value_t = 3)]
    runs: usize,
    /// Workload: packed or realistic.
    #[arg(long, default_value = "packed")]
    kind: String,
}

fn parse_size(s: &str) -> Result<usize> {
    let s = s.trim().to_ascii_lowercase();
    let (n, m) = match s.strip_suffix('m') {
        Some(n) => (n, 1_000_000),
        None => match s.strip_suffix('k') {
            Some(n) => (n, 1_000),
            None => (s.as_str(), 1),
        },
    };
    Ok(n.parse::<usize>().context("size")? * m)
}

fn tester(
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
    let extra = format!(
        "[[neighbor]]\naddress = \"{}\"\nremote_asn = {INJ_AS}\nlocal_address = \"{svc}\"\npassive = true\nimport = \"all\"\nexport = \"none\"\n\
         [[neighbor]]\naddress = \"{}\"\nremote_asn = {MON_AS}\nlocal_address = \"{svc}\"\npassive = true\nimport = \"all\"\nexport = \"all\"\n",
        topo.feed.v4,
        topo.peer.v4,
        svc = topo.service_v4
    );
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

struct Sample {
    learn: Duration,
    nsr: Option<serde_json::Value>,
    store_bytes: Vec<(String, u64)>,
    takeover: Option<Takeover>,
}

struct Takeover {
    orchestrator_ms: f64,
    /// From the takeover command (holdfastd --takeover started) to the
    /// first message from the backup received by the monitor peer.
    resume_ms: f64,
    holdfastd: serde_json::Value,
    routes_kept: bool,
}

fn show_nsr(hf: &Holdfastd, lab: &Lab) -> Result<serde_json::Value> {
    let v = hf.cli_json(lab, &["show", "nsr"])?;
    Ok(v.get("ok").and_then(|b| b.get("nsr")).cloned().unwrap_or(v))
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

fn one_run(n: usize, kind: Kind, nsr: bool, takeover: bool) -> Result<Sample> {
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
        if t0.elapsed() > DEADLINE {
            bail!(
                "monitor holds {} of {n} after {DEADLINE:?}",
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
        // At rest: every replication confirmed.
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let v = show_nsr(&hf, &lab)?;
            let idle = v["sessions"]
                .as_array()
                .is_some_and(|s| s.iter().all(|x| x["lag_ops"] == 0));
            if idle || Instant::now() > deadline {
                sample.nsr = Some(v);
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        sample.store_bytes = store_bytes(&lab, redis)?;
        if takeover {
            let mut orch = LabOrchestrator::new(&topo);
            let killed = Instant::now();
            let (new, times) = orch
                .takeover(&mut lab, &hf, topo.b.id, "hf1", &cfg, Fence::Kill)
                .map_err(|e| anyhow::anyhow!("takeover: {e}"))?;
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
    drop(hf);
    Ok(sample)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap_or(std::cmp::Ordering::Equal));
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}

fn main() -> Result<()> {
    let args = Args::parse();
    let kind: Kind = args.kind.parse().map_err(|e| anyhow::anyhow!("{e}"))?;
    let mut report = String::new();
    let _ = writeln!(
        report,
        "# NSR figures ({} workload, median of {} runs, `holdfast-nsr-bench --sizes {} --runs {} --kind {}`)\n",
        args.kind,
        args.runs,
        args.sizes.join(","),
        args.runs,
        args.kind
    );
    for size in &args.sizes {
        let n = parse_size(size)?;
        let (mut off, mut on) = (Vec::new(), Vec::new());
        let mut last_on = None;
        for run in 0..args.runs {
            let s = one_run(n, kind, false, false)?;
            println!(
                "{size} run {run} NSR off: learn {:.3} s",
                s.learn.as_secs_f64()
            );
            off.push(s.learn.as_secs_f64());
            let s = one_run(n, kind, true, run + 1 == args.runs)?;
            println!(
                "{size} run {run} NSR on: learn {:.3} s",
                s.learn.as_secs_f64()
            );
            on.push(s.learn.as_secs_f64());
            last_on = Some(s);
        }
        let (m_off, m_on) = (median(off.clone()), median(on.clone()));
        let _ = writeln!(report, "## {size} routes\n");
        let _ = writeln!(
            report,
            "| | NSR off | NSR on | ratio |\n|---|---|---|---|\n| learn and re-advertise (s), runs {off:.3?} / {on:.3?} | {m_off:.3} | {m_on:.3} | {:.2}× |\n",
            m_on / m_off
        );
        if let Some(s) = last_on {
            if let Some(v) = &s.nsr {
                let _ = writeln!(
                    report,
                    "Added ACK delay under that load: p50 {} µs, p99 {} µs ({} ACKs held, {} clamped); store write p50 {} µs, p99 {} µs over {} writes.\n",
                    v["ack_delay_p50_us"], v["ack_delay_p99_us"], v["ack_packets_held"], v["ack_packets_clamped"],
                    v["store_latency_p50_us"], v["store_latency_p99_us"], v["writes"]
                );
            }
            let _ = writeln!(
                report,
                "Store size at rest (Redis MEMORY USAGE):\n\n| session | bytes |\n|---|---|"
            );
            for (k, b) in &s.store_bytes {
                let _ = writeln!(report, "| {k} | {b} |");
            }
            let _ = writeln!(report);
            if let Some(t) = &s.takeover {
                let h = &t.holdfastd;
                let ms = |k: &str| h[k].as_u64().unwrap_or(0) as f64 / 1000.0;
                let _ = writeln!(
                    report,
                    "Takeover with {} routes in the tables (TENSOR Table 1 phases):\n\n| phase | ms |\n|---|---|\n| claim + guard | {:.1} |\n| loading state | {:.1} |\n| waiting for the address (orchestrator) | {:.1} |\n| TCP restore, all sessions ({} ) | {:.3} |\n| TCP restore, worst session | {:.3} |\n| session resumed (from process start) | {:.1} |\n| BGP resume: first message from the backup at the peer, from the takeover command | {:.1} |\n| all state resumed (tables rebuilt, diff sent; from process start) | {:.1} |\n| orchestrator total (kill → sessions Established at the backup) | {:.1} |\n\nThe peer kept every route and got no NOTIFICATION: {}.\n",
                    h["routes"],
                    ms("claim_us"),
                    ms("load_us"),
                    ms("address_wait_us"),
                    h["sessions"],
                    ms("tcp_restore_us"),
                    ms("tcp_restore_max_us"),
                    ms("resumed_us"),
                    t.resume_ms,
                    ms("tables_us"),
                    t.orchestrator_ms,
                    t.routes_kept
                );
            }
        }
    }
    println!("\n{report}");
    Ok(())
}
