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
//! bounded (sizes × runs, and a deadline per wait). The measurement itself
//! is `holdfast_bench::takeover`, which `holdfast-bench` also runs for its
//! takeover-time figure.

use anyhow::{Context, Result};
use clap::Parser;
use holdfast_bench::takeover::{one_run, one_run_on, Backup, Sample};
use holdfast_tester::workload::Kind;
use std::fmt::Write as _;
use std::time::Duration;

use holdfast_bench::many;

const DEADLINE: Duration = Duration::from_secs(300);

#[derive(Parser, Debug)]
#[command(
    version = holdfast_version::VERSION,
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
    /// Workload: packed, realistic or dfz.
    #[arg(long, default_value = "packed")]
    kind: String,
    /// Many sessions in one unit instead of the sizes: this many injector
    /// sessions (1..=1000), each sending --routes-per-session routes of
    /// its own, re-advertised to one monitor.
    #[arg(long)]
    sessions: Option<usize>,
    /// Routes each injector session sends (with --sessions; k/M suffixes).
    #[arg(long, default_value = "1k")]
    routes_per_session: String,
    /// With --sessions: holdfastd's `[global] io_threads` settings to run
    /// side by side in every run (e.g. `1,2`; `default` leaves the key
    /// unset: one per core).
    #[arg(long, default_value = "default", value_delimiter = ',')]
    io_threads: Vec<String>,
    /// Instead of the NSR off/on and takeover runs: `holdfast ctl upgrade`
    /// of the unit with each size's routes in its tables, once its
    /// preheated standby has followed them (the new build's standby warm-up
    /// and the whole upgrade's time).
    #[arg(long)]
    upgrade: bool,
    /// Also run NSR on with the store on a Redis Cluster (three masters,
    /// three replicas, in the store's namespace), beside the single
    /// redis-server, in every run: learning time, ACK delay and store
    /// writes, and a cold takeover from the cluster.
    #[arg(long)]
    cluster: bool,
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

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap_or(std::cmp::Ordering::Equal));
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}

/// One takeover's figures, in milliseconds.
struct Takeover {
    resume_ms: f64,
    all_ms: f64,
    load_ms: f64,
    claim_ms: f64,
    control_ms: f64,
    peer_ms: f64,
    sessions: u64,
    preheated: u64,
    routes: u64,
    kept: bool,
}

impl Takeover {
    /// The figures of the takeover `s` measured (taken out of it).
    fn taken(s: &mut Sample) -> Result<Takeover> {
        s.takeover
            .take()
            .map(|t| Takeover::of(&t))
            .ok_or_else(|| anyhow::anyhow!("no takeover measured"))
    }

    fn of(t: &holdfast_bench::takeover::Takeover) -> Takeover {
        let h = &t.holdfastd;
        let ms = |k: &str| h[k].as_u64().unwrap_or(0) as f64 / 1000.0;
        Takeover {
            resume_ms: t.resume_ms(),
            all_ms: ms("tables_us"),
            load_ms: ms("load_us"),
            claim_ms: ms("claim_us"),
            control_ms: t.control_ms,
            peer_ms: t.peer_ms,
            sessions: h["sessions"].as_u64().unwrap_or(0),
            preheated: h["preheated"].as_u64().unwrap_or(0),
            routes: h["routes"].as_u64().unwrap_or(0),
            kept: t.routes_kept,
        }
    }
}

/// ACK delay and store size of the last NSR-on run.
fn store_figures(report: &mut String, s: &Sample) {
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
}

/// Cold against preheated takeovers of the same run: medians and every run.
fn takeover_table(report: &mut String, size: &str, all: &[(Backup, Takeover)]) {
    let _ = writeln!(
        report,
        "Takeover with {size} routes through the control plane (SIGKILL of the unit on a; the controller has b's agent take it over; cold: `holdfastd --takeover` started after the kill; preheated: the agent's `holdfastd --standby` following the store since before the routes were sent, then `nsr takeover`). Median, and every run:\n\n| | cold | preheated |\n|---|---|---|"
    );
    let of = |b: Backup| -> Vec<&Takeover> {
        all.iter()
            .filter(|(x, _)| *x == b)
            .map(|(_, t)| t)
            .collect()
    };
    let (cold, pre) = (of(Backup::Cold), of(Backup::Preheated));
    let row = |report: &mut String, name: &str, f: &dyn Fn(&Takeover) -> f64| {
        let c: Vec<f64> = cold.iter().map(|t| f(t)).collect();
        let p: Vec<f64> = pre.iter().map(|t| f(t)).collect();
        let _ = writeln!(
            report,
            "| {name} | **{:.1}** ({c:.1?}) | **{:.1}** ({p:.1?}) |",
            median(c.clone()),
            median(p.clone())
        );
    };
    row(report, "claim + guard (ms)", &|t| t.claim_ms);
    row(report, "loading state (ms)", &|t| t.load_ms);
    row(
        report,
        "BGP resume: sessions resumed, from the takeover command (ms, holdfastd's own)",
        &|t| t.resume_ms,
    );
    row(report, "all state resumed: tables rebuilt, Adj-RIB-Out compared, difference sent, from the takeover command (ms)", &|t| t.all_ms);
    row(
        report,
        "first message at the peer, from the kill (ms; the control plane's time included)",
        &|t| t.peer_ms,
    );
    row(
        report,
        "control plane total: kill → sessions Established at the backup (ms)",
        &|t| t.control_ms,
    );
    let info = |v: &[&Takeover]| {
        v.iter()
            .map(|t| {
                format!(
                    "{}/{} preheated, {} routes, kept {}",
                    t.preheated, t.sessions, t.routes, t.kept
                )
            })
            .collect::<Vec<_>>()
            .join("; ")
    };
    let _ = writeln!(
        report,
        "\nSessions: cold {}; preheated {}.\n",
        info(&cold),
        info(&pre)
    );
}

/// `--cluster`: the single redis-server against the Redis Cluster, same
/// runs.
fn cluster_table(
    report: &mut String,
    size: &str,
    m_single: f64,
    single: &[f64],
    cluster: &[(Sample, Takeover)],
    single_last: Option<&Sample>,
) {
    let learn: Vec<f64> = cluster.iter().map(|(s, _)| s.learn.as_secs_f64()).collect();
    let m = median(learn.clone());
    let _ = writeln!(
        report,
        "The store on a Redis Cluster (3 masters, 3 replicas, `redis+cluster://`) against one redis-server, {size} routes, NSR on, same runs:\n\n\
         | | one redis-server | Redis Cluster | ratio |\n|---|---|---|---|\n\
         | learn and re-advertise (s), runs {single:.3?} / {learn:.3?} | {m_single:.3} | {m:.3} | **{:.2}×** |",
        m / m_single
    );
    let v = |s: Option<&Sample>, k: &str| {
        s.and_then(|s| s.nsr.as_ref())
            .map_or("-".to_string(), |v| v[k].to_string())
    };
    let last = cluster.last().map(|(s, _)| s);
    for (name, k) in [
        ("ACK delay p50 (µs, last run)", "ack_delay_p50_us"),
        ("ACK delay p99 (µs, last run)", "ack_delay_p99_us"),
        ("store write p50 (µs, last run)", "store_latency_p50_us"),
        ("store write p99 (µs, last run)", "store_latency_p99_us"),
    ] {
        let _ = writeln!(
            report,
            "| {name} | {} | {} | |",
            v(single_last, k),
            v(last, k)
        );
    }
    let resume: Vec<f64> = cluster.iter().map(|(_, t)| t.resume_ms).collect();
    let all: Vec<f64> = cluster.iter().map(|(_, t)| t.all_ms).collect();
    let kept = cluster.iter().all(|(_, t)| t.kept);
    let _ = writeln!(
        report,
        "\nCold takeover from the cluster: BGP resume {resume:.1?} ms, all state resumed {all:.1?} ms, routes kept: {kept}.\n"
    );
}

/// `--upgrade`: per size, `holdfast ctl upgrade` after the routes are in.
fn upgrade_figures(report: &mut String, args: &Args, kind: Kind) -> Result<()> {
    let _ = writeln!(
        report,
        "## `holdfast ctl upgrade` with the routes in the tables\n\n\
         The unit's preheated standby has followed the routes; the upgrade starts a standby of \
         the new build on b (it reads the whole store: the warm-up), switches over to it, then \
         brings a back as the new build's standby. Seconds from the request, every run.\n\n\
         | routes | standby step done (warm-up) | upgrade done | switchover and the rest | routes kept |\n\
         |---|---|---|---|---|"
    );
    for size in &args.sizes {
        let n = parse_size(size)?;
        let (mut warm, mut all, mut kept) = (Vec::new(), Vec::new(), true);
        for run in 0..args.runs {
            let s = one_run(n, kind, true, Backup::Upgrade, DEADLINE)?;
            let u = s
                .upgrade
                .ok_or_else(|| anyhow::anyhow!("no upgrade measured"))?;
            println!(
                "{size} run {run} upgrade: learn {:.3} s; standby step done at {:.2} s, upgrade done in {:.2} s, routes kept: {}",
                s.learn.as_secs_f64(),
                u.standby_s,
                u.seconds,
                u.routes_kept
            );
            warm.push(u.standby_s);
            all.push(u.seconds);
            kept &= u.routes_kept;
        }
        let rest: Vec<f64> = all.iter().zip(&warm).map(|(a, w)| a - w).collect();
        let _ = writeln!(
            report,
            "| {size} | {warm:.2?} | {all:.2?} | {rest:.2?} | {kept} |"
        );
    }
    Ok(())
}

fn main() -> Result<()> {
    let args = Args::parse();
    let kind: Kind = args.kind.parse().map_err(|e| anyhow::anyhow!("{e}"))?;
    if let Some(sessions) = args.sessions {
        let per = parse_size(&args.routes_per_session)?;
        let io = args
            .io_threads
            .iter()
            .map(|t| match t.as_str() {
                "default" => Ok(None),
                n => n
                    .parse::<usize>()
                    .ok()
                    .filter(|n| (1..=1024).contains(n))
                    .map(Some)
                    .ok_or_else(|| {
                        anyhow::anyhow!("--io-threads: {t:?} is not 1..=1024 or default")
                    }),
            })
            .collect::<Result<Vec<_>>>()?;
        let report = many::bench(sessions, per, args.runs, kind, &io, DEADLINE)?;
        println!("\n{report}");
        return Ok(());
    }
    let mut report = String::new();
    let _ = writeln!(
        report,
        "# NSR figures ({} workload, median of {} runs, `holdfast-nsr-bench --sizes {} --runs {} --kind {}{}`)\n",
        args.kind,
        args.runs,
        args.sizes.join(","),
        args.runs,
        args.kind,
        match (args.upgrade, args.cluster) {
            (true, _) => " --upgrade",
            (false, true) => " --cluster",
            (false, false) => "",
        }
    );
    if args.upgrade {
        upgrade_figures(&mut report, &args, kind)?;
        println!("\n{report}");
        return Ok(());
    }
    for size in &args.sizes {
        let n = parse_size(size)?;
        let (mut off, mut on) = (Vec::new(), Vec::new());
        let mut last_on = None;
        let mut takeovers: Vec<(Backup, Takeover)> = Vec::new();
        let mut cluster: Vec<(Sample, Takeover)> = Vec::new();
        for run in 0..args.runs {
            let s = one_run(n, kind, false, Backup::None, DEADLINE)?;
            println!(
                "{size} run {run} NSR off: learn {:.3} s",
                s.learn.as_secs_f64()
            );
            off.push(s.learn.as_secs_f64());
            for backup in [Backup::Cold, Backup::Preheated] {
                let mut s = one_run(n, kind, true, backup, DEADLINE)?;
                let t = Takeover::taken(&mut s)?;
                println!(
                    "{size} run {run} NSR on, {backup:?} backup: learn {:.3} s; takeover: BGP resume {:.1} ms, all state resumed {:.1} ms (load {:.1} ms, {} of {} sessions preheated, routes kept: {})",
                    s.learn.as_secs_f64(),
                    t.resume_ms,
                    t.all_ms,
                    t.load_ms,
                    t.preheated,
                    t.sessions,
                    t.kept
                );
                takeovers.push((backup, t));
                if backup == Backup::Cold {
                    on.push(s.learn.as_secs_f64());
                    last_on = Some(s);
                }
            }
            if args.cluster {
                let mut s = one_run_on(n, kind, Backup::Cold, DEADLINE, true)?;
                let t = Takeover::taken(&mut s)?;
                println!(
                    "{size} run {run} NSR on, Redis Cluster store, cold backup: learn {:.3} s; takeover: BGP resume {:.1} ms, all state resumed {:.1} ms (load {:.1} ms, routes kept: {})",
                    s.learn.as_secs_f64(),
                    t.resume_ms,
                    t.all_ms,
                    t.load_ms,
                    t.kept
                );
                cluster.push((s, t));
            }
        }
        let (m_off, m_on) = (median(off.clone()), median(on.clone()));
        let _ = writeln!(report, "## {size} routes\n");
        let _ = writeln!(
            report,
            "| | NSR off | NSR on | ratio |\n|---|---|---|---|\n| learn and re-advertise (s), runs {off:.3?} / {on:.3?} | {m_off:.3} | {m_on:.3} | {:.2}× |\n",
            m_on / m_off
        );
        if let Some(s) = &last_on {
            store_figures(&mut report, s);
        }
        takeover_table(&mut report, size, &takeovers);
        if !cluster.is_empty() {
            cluster_table(&mut report, size, m_on, &on, &cluster, last_on.as_ref());
        }
    }
    println!("\n{report}");
    Ok(())
}
