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
use holdfast_bench::takeover::one_run;
use holdfast_tester::workload::Kind;
use std::fmt::Write as _;
use std::time::Duration;

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
            let s = one_run(n, kind, false, false, DEADLINE)?;
            println!(
                "{size} run {run} NSR off: learn {:.3} s",
                s.learn.as_secs_f64()
            );
            off.push(s.learn.as_secs_f64());
            let s = one_run(n, kind, true, run + 1 == args.runs, DEADLINE)?;
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
