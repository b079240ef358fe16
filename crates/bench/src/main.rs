//! `holdfast-bench` (what `make bench` runs): TENSOR Fig. 6(a) side by side.
//!
//! ```text
//!   injector (tester, AS 4250000001) ── veth ── DUT (AS 4250000000) ── veth ── monitor (tester, AS 4250000002)
//! ```
//!
//! Each host is its own lab namespace. For every workload (packed, realistic),
//! size N and daemon under test (holdfastd, bird2, frr, gobgpd), a fresh lab
//! is built, the monitor and the injector establish their sessions with the
//! DUT, the injector streams N pre-encoded IPv4 routes, and the bench times
//! from just before the injector's first write to the instant the monitor's
//! view last changed when it held all N routes. Peak RSS is VmHWM from
//! `/proc/PID/status` of the DUT's processes (and their children), summed,
//! read before the DUT is stopped. Each cell is the median of `--runs`
//! runs with the min–max spread; a run that exceeds `--timeout` reports
//! "timeout" (and larger sizes of that daemon and workload are skipped).
//!
//! Scaling: holdfastd learning 8 injector peers × 125k distinct packed
//! routes with `workers = 1` and `workers = 2`, and 1 peer × 1M for
//! reference.
//!
//! ASNs are 4-octet values outside every AS the workloads put in AS paths,
//! so no route is dropped by AS-path loop detection.

use anyhow::{bail, Context, Result};
use clap::Parser;
use holdfast_lab::{
    cleanup_stale, Bird, Frr, Gobgp, Holdfastd, HostId, Lab, NeighborSpec, Peer, PeerKind, PeerSpec,
};
use holdfast_tester::workload::{generate, prefix_count, Kind, Workload};
use holdfast_tester::{encode_routes, netns::in_netns, Config, Peer as Tester};
use std::fmt::Write as _;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

const DUT_AS: u32 = 4_250_000_000;
const INJ_AS: u32 = 4_250_000_001;
const MON_AS: u32 = 4_250_000_002;
const SETUP: Duration = Duration::from_secs(60);

#[derive(Parser, Debug)]
#[command(
    name = "holdfast-bench",
    about = "TENSOR Fig. 6(a) side by side with bird2, frr and gobgpd, plus worker scaling"
)]
struct Args {
    /// Daemons under test, comma-separated: holdfastd,bird,frr,gobgp.
    #[arg(long, default_value = "holdfastd,bird,frr,gobgp")]
    daemons: String,
    /// Route counts, comma-separated (k and M suffixes).
    #[arg(long, default_value = "10k,100k,500k,1M")]
    sizes: String,
    /// Workloads, comma-separated: packed,realistic.
    #[arg(long, default_value = "packed,realistic")]
    workloads: String,
    /// Runs per cell (median reported).
    #[arg(long, default_value_t = 3)]
    runs: usize,
    /// Per-run time limit in seconds (from the first UPDATE).
    #[arg(long, default_value_t = 300)]
    timeout: u64,
    /// Write the report (Markdown) to this file.
    #[arg(long)]
    out: Option<PathBuf>,
    /// 10k and 100k routes, 1 run.
    #[arg(long)]
    quick: bool,
    /// Skip the worker-scaling measurement.
    #[arg(long)]
    no_scaling: bool,
    /// A run slower than this many seconds is not repeated (the cell then has fewer runs).
    #[arg(long, default_value_t = 60)]
    slow: u64,
    /// Only the worker-scaling measurement.
    #[arg(long)]
    scaling_only: bool,
    /// Total routes of the scaling measurement (split over 8 peers).
    #[arg(long, default_value = "1M")]
    scaling_routes: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Dut {
    Holdfastd,
    Bird,
    Frr,
    Gobgp,
}

impl Dut {
    fn parse(s: &str) -> Result<Dut> {
        Ok(match s.trim() {
            "holdfastd" | "holdfast" => Dut::Holdfastd,
            "bird" | "bird2" => Dut::Bird,
            "frr" | "bgpd" => Dut::Frr,
            "gobgp" | "gobgpd" => Dut::Gobgp,
            o => bail!("unknown daemon {o:?} (holdfastd, bird, frr, gobgp)"),
        })
    }
    fn name(self) -> &'static str {
        match self {
            Dut::Holdfastd => "holdfastd",
            Dut::Bird => "bird2",
            Dut::Frr => "frr",
            Dut::Gobgp => "gobgpd",
        }
    }
}

fn parse_size(s: &str) -> Result<usize> {
    let s = s.trim();
    let (num, mul) = match s.chars().last() {
        Some('k' | 'K') => (&s[..s.len() - 1], 1_000),
        Some('m' | 'M') => (&s[..s.len() - 1], 1_000_000),
        _ => (s, 1),
    };
    Ok(num
        .parse::<usize>()
        .with_context(|| format!("size {s:?}"))?
        * mul)
}

fn size_label(n: usize) -> String {
    if n.is_multiple_of(1_000_000) {
        format!("{}M", n / 1_000_000)
    } else if n.is_multiple_of(1_000) {
        format!("{}k", n / 1_000)
    } else {
        n.to_string()
    }
}

/// One run's outcome.
#[derive(Debug, Clone)]
enum Outcome {
    Done { secs: f64, rss_kb: u64 },
    Timeout { held: usize, rss_kb: u64 },
    Failed(String),
}

/// holdfastd's own account of a run, from its "RIB batch" debug lines.
#[derive(Debug, Clone, Default)]
struct RibStats {
    batches: u64,
    msgs: u64,
    busy_us: u64,
    max_us: u64,
}

fn rib_stats(log: &str) -> RibStats {
    let mut s = RibStats::default();
    let field = |line: &str, key: &str| -> Option<u64> {
        let i = line.find(key)? + key.len();
        let rest = &line[i..];
        let end = rest
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(rest.len());
        rest[..end].parse().ok()
    };
    for l in strip_ansi(log).lines().filter(|l| l.contains("RIB batch")) {
        s.batches += 1;
        s.msgs += field(l, "msgs=").unwrap_or(0);
        let t = field(l, "took_us=").unwrap_or(0);
        s.busy_us += t;
        s.max_us = s.max_us.max(t);
    }
    s
}

/// Removes ANSI colour sequences (`ESC [ ... letter`) from a log.
fn strip_ansi(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut it = s.chars().peekable();
    while let Some(c) = it.next() {
        if c == '\u{1b}' && it.peek() == Some(&'[') {
            for d in it.by_ref() {
                if d.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// Peak RSS (VmHWM, kB) of `pids` and all their descendants, summed.
fn peak_rss_kb(pids: &[u32]) -> u64 {
    let mut all: Vec<u32> = pids.to_vec();
    // Descendants: a few passes over /proc (bounded).
    for _ in 0..4 {
        let mut added = false;
        if let Ok(rd) = std::fs::read_dir("/proc") {
            for e in rd.flatten() {
                let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
                    continue;
                };
                if all.contains(&pid) {
                    continue;
                }
                let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
                    continue;
                };
                let Some(rp) = stat.rfind(')') else { continue };
                let ppid = stat[rp + 2..]
                    .split_whitespace()
                    .nth(1)
                    .and_then(|x| x.parse::<u32>().ok());
                if ppid.is_some_and(|pp| all.contains(&pp)) {
                    all.push(pid);
                    added = true;
                }
            }
        }
        if !added {
            break;
        }
    }
    all.iter()
        .filter_map(|pid| std::fs::read_to_string(format!("/proc/{pid}/status")).ok())
        .filter_map(|st| {
            st.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse::<u64>().ok())
        })
        .sum()
}

enum Running {
    Hf(Holdfastd),
    Peer(Box<dyn Peer>),
}

impl Running {
    fn pids(&self, lab: &Lab) -> Vec<u32> {
        match self {
            Running::Hf(h) => vec![h.pid(lab)],
            Running::Peer(p) => p.pids(lab),
        }
    }
}

/// holdfastd's configuration; with `feed_only`, nothing is exported to the injectors.
fn holdfastd_config(
    injectors: &[IpAddr],
    monitor: IpAddr,
    workers: Option<usize>,
    feed_only: bool,
) -> String {
    let mut c = format!(
        "[global]\nasn = {DUT_AS}\nrouter_id = \"192.0.2.100\"\nlisten = \"0.0.0.0:179\"\n"
    );
    if let Some(w) = workers {
        let _ = writeln!(c, "workers = {w}");
    }
    for (ip, asn, export) in injectors
        .iter()
        .map(|i| (*i, INJ_AS, if feed_only { "none" } else { "all" }))
        .chain([(monitor, MON_AS, "all")])
    {
        let _ = write!(
            c,
            "\n[[neighbor]]\naddress = \"{ip}\"\nremote_asn = {asn}\nimport = \"all\"\nexport = \"{export}\"\npassive = true\n"
        );
    }
    c
}

fn start_dut(
    lab: &mut Lab,
    host: HostId,
    dut: Dut,
    injectors: &[IpAddr],
    monitor: IpAddr,
    workers: Option<usize>,
) -> Result<Running> {
    if dut == Dut::Holdfastd {
        let cfg = holdfastd_config(injectors, monitor, workers, injectors.len() > 1);
        return Ok(Running::Hf(Holdfastd::start(lab, host, "holdfastd", &cfg)?));
    }
    let mut spec = PeerSpec::new(DUT_AS, Ipv4Addr::new(192, 0, 2, 100));
    for ip in injectors {
        spec = spec.neighbor(NeighborSpec::new(*ip, INJ_AS).passive());
    }
    spec = spec.neighbor(NeighborSpec::new(monitor, MON_AS).passive());
    Ok(match dut {
        Dut::Bird => Running::Peer(Box::new(Bird::start(lab, host, &spec)?)),
        Dut::Frr => Running::Peer(Box::new(Frr::start(lab, host, &spec)?)),
        Dut::Gobgp => Running::Peer(Box::new(Gobgp::start(lab, host, &spec)?)),
        Dut::Holdfastd => unreachable!(),
    })
}

/// Connects a tester session from `local` (inside `netns`) to the DUT, retrying
/// while the DUT is not yet accepting (bounded: `SETUP`).
fn connect(netns: &str, dut: IpAddr, local: IpAddr, asn: u32, id: Ipv4Addr) -> Result<Tester> {
    let deadline = Instant::now() + SETUP;
    let mut last = String::new();
    for _ in 0..600 {
        if Instant::now() > deadline {
            break;
        }
        let mut cfg = Config::new(asn, id);
        cfg.families = vec![holdfast_wire::Family::IPV4_UNICAST];
        cfg.hold_time = 240;
        let r = in_netns(netns, move || {
            Tester::connect(
                SocketAddr::new(dut, 179),
                Some(local),
                &cfg,
                Duration::from_secs(10),
            )
        })?;
        match r {
            Ok(p) => return Ok(p),
            Err(e) => last = e.to_string(),
        }
        std::thread::sleep(Duration::from_millis(250));
    }
    bail!("tester {local} could not establish with {dut}: {last}")
}

fn with_next_hop(w: &Workload, nh: Ipv4Addr) -> Workload {
    w.iter()
        .map(|(a, p)| {
            let mut a = a.clone();
            a.next_hop = Some(nh);
            (a, p.clone())
        })
        .collect()
}

struct RunResult {
    outcome: Outcome,
    rib: Option<RibStats>,
    /// Routes the DUT sent back to the injectors (summed over them).
    reflected: usize,
}

/// One measurement: `feeds.len()` injector peers (each with its workload) → DUT → monitor.
fn measure(
    dut: Dut,
    feeds: &[Workload],
    workers: Option<usize>,
    timeout: Duration,
) -> Result<RunResult> {
    let n: usize = feeds.iter().map(prefix_count).sum();
    let mut lab = Lab::new(&format!("bench-{}", dut.name()))?;
    let inj_h = lab.host("inj")?;
    let dut_h = lab.host("dut")?;
    let mon_h = lab.host("mon")?;
    let l1 = lab.link_auto(inj_h, dut_h)?;
    let l2 = lab.link_auto(dut_h, mon_h)?;
    let (inj0, dut1) = {
        let p = lab.link_info(l1).v4.expect("link_auto assigns IPv4");
        (p.a, p.b)
    };
    let (dut2, mon_ip) = {
        let p = lab.link_info(l2).v4.expect("link_auto assigns IPv4");
        (p.a, p.b)
    };
    // Extra injector addresses on the same link (198.18.1.11, .12, ...).
    let if_a = lab.link_info(l1).if_a.clone();
    let mut inj_ips = vec![inj0];
    for i in 1..feeds.len() {
        let ip = Ipv4Addr::new(
            inj0.octets()[0],
            inj0.octets()[1],
            inj0.octets()[2],
            10 + i as u8,
        );
        lab.exec_ok(
            inj_h,
            &["ip", "addr", "add", &format!("{ip}/24"), "dev", &if_a],
        )?;
        inj_ips.push(ip);
    }
    let inj_addrs: Vec<IpAddr> = inj_ips.iter().map(|i| IpAddr::V4(*i)).collect();
    let running = start_dut(
        &mut lab,
        dut_h,
        dut,
        &inj_addrs,
        IpAddr::V4(mon_ip),
        workers,
    )?;
    let inj_ns = lab.netns(inj_h).to_string();
    let mon_ns = lab.netns(mon_h).to_string();

    let monitor = connect(
        &mon_ns,
        IpAddr::V4(dut2),
        IpAddr::V4(mon_ip),
        MON_AS,
        Ipv4Addr::new(192, 0, 2, 3),
    )?;
    let mut injectors = Vec::new();
    for (i, ip) in inj_ips.iter().enumerate() {
        injectors.push(Arc::new(connect(
            &inj_ns,
            IpAddr::V4(dut1),
            IpAddr::V4(*ip),
            INJ_AS,
            Ipv4Addr::new(192, 0, 2, 10 + i as u8),
        )?));
    }
    // Pre-encode every stream before the clock starts.
    let streams: Vec<Vec<u8>> = feeds
        .iter()
        .zip(&injectors)
        .zip(&inj_ips)
        .map(|((w, p), nh)| {
            let mut out = Vec::new();
            encode_routes(&with_next_hop(w, *nh), &p.ctx, &mut out);
            out
        })
        .collect();
    // Let the DUT settle (initial End-of-RIB exchange etc.).
    std::thread::sleep(Duration::from_millis(500));

    let barrier = Arc::new(Barrier::new(injectors.len() + 1));
    let mut senders = Vec::new();
    for (p, s) in injectors.iter().zip(streams) {
        let (p, b) = (p.clone(), barrier.clone());
        senders.push(std::thread::spawn(move || {
            b.wait();
            p.send_stream(&s).map_err(|e| e.to_string())
        }));
    }
    barrier.wait();
    let t0 = Instant::now();
    let _ = monitor.wait("all routes", timeout, |v| v.routes.len() >= n || v.closed);
    let (held, closed, t1) = monitor.view(|v| (v.routes.len(), v.closed, v.last_change));
    let rss_kb = peak_rss_kb(&running.pids(&lab));
    let reflected: usize = injectors.iter().map(|p| p.route_count()).sum();
    let outcome = if held >= n {
        let t1 = t1.expect("routes were received");
        Outcome::Done {
            secs: t1.saturating_duration_since(t0).as_secs_f64(),
            rss_kb,
        }
    } else if closed {
        Outcome::Failed(format!(
            "DUT closed the monitor session holding {held}/{n} routes"
        ))
    } else {
        Outcome::Timeout { held, rss_kb }
    };
    for p in &injectors {
        p.abort();
    }
    monitor.abort();
    for s in senders {
        if let Ok(Err(e)) = s.join() {
            if matches!(outcome, Outcome::Done { .. }) {
                eprintln!("  note: injector send ended with: {e}");
            }
        }
    }
    let rib = match &running {
        Running::Hf(h) => Some(rib_stats(&h.log_text(&lab))),
        Running::Peer(_) => None,
    };
    drop(injectors);
    drop(monitor);
    match running {
        Running::Hf(h) => h.stop(&mut lab),
        Running::Peer(mut p) => p.stop(&mut lab),
    }
    lab.teardown();
    Ok(RunResult {
        outcome,
        rib,
        reflected,
    })
}

/// Median, min and max of a slice (sorted copy).
fn stats(v: &[f64]) -> (f64, f64, f64) {
    let mut s = v.to_vec();
    s.sort_by(|a, b| a.partial_cmp(b).expect("no NaN"));
    let med = if s.len() % 2 == 1 {
        s[s.len() / 2]
    } else {
        (s[s.len() / 2 - 1] + s[s.len() / 2]) / 2.0
    };
    (med, s[0], s[s.len() - 1])
}

#[derive(Debug, Clone)]
struct Cell {
    /// Median seconds, min, max — when every run completed.
    time: Option<(f64, f64, f64)>,
    /// Median peak RSS in MB.
    rss_mb: Option<f64>,
    note: String,
}

fn summarize(runs: &[RunResult], timeout: u64) -> Cell {
    let secs: Vec<f64> = runs
        .iter()
        .filter_map(|r| {
            if let Outcome::Done { secs, .. } = r.outcome {
                Some(secs)
            } else {
                None
            }
        })
        .collect();
    let rss: Vec<f64> = runs
        .iter()
        .filter_map(|r| match r.outcome {
            Outcome::Done { rss_kb, .. } | Outcome::Timeout { rss_kb, .. } => {
                Some(rss_kb as f64 / 1024.0)
            }
            Outcome::Failed(_) => None,
        })
        .collect();
    let rss_mb = (!rss.is_empty()).then(|| stats(&rss).0);
    if secs.len() == runs.len() && !runs.is_empty() {
        let note = if runs.len() == 1 {
            " (1 run)".to_string()
        } else {
            String::new()
        };
        return Cell {
            time: Some(stats(&secs)),
            rss_mb,
            note,
        };
    }
    let note = runs
        .iter()
        .find_map(|r| match &r.outcome {
            Outcome::Timeout { held, .. } => Some(format!("timeout (>{timeout} s, held {held})")),
            Outcome::Failed(e) => Some(format!("failed: {e}")),
            Outcome::Done { .. } => None,
        })
        .unwrap_or_default();
    Cell {
        time: None,
        rss_mb,
        note,
    }
}

fn fmt_time(c: &Cell) -> String {
    match c.time {
        Some((m, lo, hi)) if (hi - lo) > 0.0005 => format!("{m:.3} ({lo:.3}–{hi:.3}){}", c.note),
        Some((m, _, _)) => format!("{m:.3}{}", c.note),
        None => c.note.clone(),
    }
}

fn fmt_rss(c: &Cell) -> String {
    c.rss_mb.map_or("–".into(), |m| format!("{m:.0}"))
}

fn cmd_line(cmd: &str, args: &[&str]) -> String {
    std::process::Command::new(cmd)
        .args(args)
        .output()
        .map(|o| {
            let s = if o.stdout.is_empty() {
                o.stderr
            } else {
                o.stdout
            };
            String::from_utf8_lossy(&s)
                .lines()
                .next()
                .unwrap_or("")
                .trim()
                .to_string()
        })
        .unwrap_or_else(|_| "?".into())
}

fn machine() -> Vec<(String, String)> {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|c| {
            c.lines()
                .find(|l| l.starts_with("model name"))
                .map(|l| l.split(':').nth(1).unwrap_or("").trim().to_string())
        })
        .unwrap_or_else(|| "?".into());
    let mem = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| {
            m.lines().next().map(|l| {
                l.split_whitespace()
                    .nth(1)
                    .unwrap_or("0")
                    .parse::<u64>()
                    .unwrap_or(0)
            })
        })
        .unwrap_or(0);
    let hf = holdfast_lab::find_binary("holdfastd", "HOLDFASTD_BIN")
        .map(|p| cmd_line(&p.to_string_lossy(), &["--version"]))
        .unwrap_or_else(|_| "?".into());
    let rev = cmd_line(
        "git",
        &[
            "-C",
            env!("CARGO_MANIFEST_DIR"),
            "describe",
            "--always",
            "--dirty",
        ],
    );
    vec![
        (
            "CPU".into(),
            format!("{cpu}, {} cores (nproc)", cmd_line("nproc", &[])),
        ),
        (
            "memory".into(),
            format!("{:.1} GB", mem as f64 / 1024.0 / 1024.0),
        ),
        ("kernel".into(), cmd_line("uname", &["-sr"])),
        (
            "holdfastd".into(),
            format!("{hf} (release build, git {rev})"),
        ),
        ("bird2".into(), cmd_line("bird", &["--version"])),
        ("frr".into(), cmd_line("/usr/lib/frr/bgpd", &["--version"])),
        ("gobgpd".into(), cmd_line("gobgpd", &["--version"])),
    ]
}

fn main() -> Result<()> {
    let mut args = Args::parse();
    if args.quick {
        args.sizes = "10k,100k".into();
        args.runs = 1;
    }
    // No packet captures: they would distort the timing. Set before any lab exists.
    std::env::set_var("HOLDFAST_LAB_PCAP", "0");
    let daemons: Vec<Dut> = args
        .daemons
        .split(',')
        .filter(|s| !s.trim().is_empty())
        .map(Dut::parse)
        .collect::<Result<_>>()?;
    let sizes: Vec<usize> = args
        .sizes
        .split(',')
        .map(parse_size)
        .collect::<Result<_>>()?;
    let kinds: Vec<Kind> = args
        .workloads
        .split(',')
        .map(|s| s.trim().parse::<Kind>().map_err(anyhow::Error::msg))
        .collect::<Result<_>>()?;
    let runs = args.runs.max(1);
    let timeout = Duration::from_secs(args.timeout);
    let mut need: Vec<PeerKind> = Vec::new();
    for d in &daemons {
        match d {
            Dut::Bird => need.push(PeerKind::Bird),
            Dut::Frr => need.push(PeerKind::Frr),
            Dut::Gobgp => need.push(PeerKind::Gobgp),
            Dut::Holdfastd => {}
        }
    }
    holdfast_lab::preflight(&need)?;
    let hf_bin = holdfast_lab::find_binary("holdfastd", "HOLDFASTD_BIN")?;
    if !hf_bin.to_string_lossy().contains("/release/") {
        eprintln!(
            "warning: {} is not a release build (run `cargo build --release --bins`)",
            hf_bin.display()
        );
    }
    cleanup_stale()?;
    let started = Instant::now();
    let machine = machine();
    let mut md = String::new();
    md.push_str("# Benchmarks\n\nGenerated by `holdfast-bench` (`make bench`); re-running it rewrites this file.\n\n");
    let argv: Vec<String> = std::env::args().collect();
    let _ = writeln!(md, "Command: `{}`\n\n## Machine\n", argv.join(" "));
    md.push_str("| | |\n|---|---|\n");
    for (k, v) in &machine {
        let _ = writeln!(md, "| {k} | {v} |");
        println!("{k}: {v}");
    }
    let _ = writeln!(
        md,
        "\n## Method\n\nTENSOR Fig. 6(a): injector → daemon under test (DUT) → monitor, each in its own network \
namespace, joined by veth pairs. The injector and the monitor are `holdfast-tester` sessions (eBGP; DUT AS {DUT_AS}, \
injector AS {INJ_AS}, monitor AS {MON_AS}, 4-octet ASNs that never occur in the workloads' AS paths). For every cell a \
fresh lab is built and the DUT started; the monitor, then the injector, establish; the injector's N IPv4 routes are \
encoded into UPDATEs *before* the clock starts. Time = from just before the injector's first write to the instant \
the monitor's view last changed when it held all N routes (end-to-end: parse, decide, export, encode, send). \
Peak RSS = `VmHWM` from `/proc/PID/status` of the DUT's processes and their children, summed, read after the \
monitor holds all routes (frr: bgpd + zebra). Median of {runs} run(s), min–max in parentheses; \
ratio = daemon / holdfastd (time, RSS). Per-run limit {} s: a run over it reports \"timeout\" and larger sizes of that \
daemon and workload are skipped; a run slower than {} s is not repeated (marked \"1 run\").\n\nDUT configuration: import and export everything on eBGP, no kernel FIB: holdfastd \
`import = \"all\"`, `export = \"all\"`, `passive = true`, `workers` left at its default; bird2 `import all` / export filter \
accepting all, no kernel protocol; frr `bgpd -n` (no FIB install) with zebra, `no bgp ebgp-requires-policy`, \
`advertisement-interval 0`; gobgpd default (accept-all) policies, no zebra. No packet captures.\n\nWorkloads \
(`holdfast_tester::workload`, deterministic): **packed** = 500 consecutive /24s per attribute set (TENSOR's bulk \
load); **realistic** = full-table-like prefix lengths (≈60 % /24), AS paths of 2–6 hops, some MEDs and \
communities, ≈2.5 prefixes per attribute set.\n",
        args.timeout, args.slow
    );

    let mut summary_tables = String::new();
    if !args.scaling_only {
        for kind in &kinds {
            let mut cells: Vec<Vec<Option<Cell>>> = vec![vec![None; daemons.len()]; sizes.len()];
            let mut rib_notes: Vec<String> = Vec::new();
            let mut given_up = vec![false; daemons.len()];
            for (si, &n) in sizes.iter().enumerate() {
                let w = generate(*kind, n, INJ_AS, Ipv4Addr::new(198, 18, 1, 1));
                for (di, &d) in daemons.iter().enumerate() {
                    if given_up[di] {
                        continue;
                    }
                    let mut rs = Vec::new();
                    for r in 0..runs {
                        let res = measure(d, std::slice::from_ref(&w), None, timeout)
                            .unwrap_or_else(|e| RunResult {
                                outcome: Outcome::Failed(format!("{e:#}")),
                                rib: None,
                                reflected: 0,
                            });
                        println!(
                            "[{:>7.1}s] {kind} {} {} run {}: {:?} (sent back to injector: {})",
                            started.elapsed().as_secs_f64(),
                            size_label(n),
                            d.name(),
                            r + 1,
                            res.outcome,
                            res.reflected
                        );
                        if let (Some(rib), Outcome::Done { secs, .. }) = (&res.rib, &res.outcome) {
                            rib_notes.push(format!(
                                "{kind} {} run {}: {secs:.3} s end to end; RIB thread: {} batches, {} UPDATEs, busy {:.3} s (longest batch {:.1} ms)",
                                size_label(n),
                                r + 1,
                                rib.batches,
                                rib.msgs,
                                rib.busy_us as f64 / 1e6,
                                rib.max_us as f64 / 1e3
                            ));
                        }
                        let stop = match res.outcome {
                            Outcome::Done { secs, .. } => secs > args.slow as f64 && r + 1 < runs,
                            _ => true,
                        };
                        rs.push(res);
                        if stop {
                            if matches!(rs.last().map(|r| &r.outcome), Some(Outcome::Done { .. })) {
                                println!("  (slower than --slow {} s: not repeated)", args.slow);
                            }
                            break;
                        }
                    }
                    let c = summarize(&rs, args.timeout);
                    if c.time.is_none() {
                        given_up[di] = true;
                    }
                    cells[si][di] = Some(c);
                }
            }
            let mut t = format!("\n## Workload: {kind}\n\nSeconds until the monitor holds all N routes: median (min–max); peak RSS in MB; ratio to holdfastd (time / RSS).\n\n| N | daemon | time (s) | peak RSS (MB) | × holdfastd time | × holdfastd RSS |\n|---|---|---|---|---|---|\n");
            let hf_idx = daemons.iter().position(|d| *d == Dut::Holdfastd);
            for (si, &n) in sizes.iter().enumerate() {
                let hf = hf_idx.and_then(|i| cells[si][i].clone());
                for (di, d) in daemons.iter().enumerate() {
                    let Some(c) = &cells[si][di] else {
                        let _ = writeln!(
                            t,
                            "| {} | {} | skipped (timed out at a smaller N) | – | – | – |",
                            size_label(n),
                            d.name()
                        );
                        continue;
                    };
                    let rt = match (c.time, hf.as_ref().and_then(|h| h.time)) {
                        (Some((a, _, _)), Some((b, _, _))) if b > 0.0 => format!("{:.2}", a / b),
                        _ => "–".into(),
                    };
                    let rr = match (c.rss_mb, hf.as_ref().and_then(|h| h.rss_mb)) {
                        (Some(a), Some(b)) if b > 0.0 && c.time.is_some() => {
                            format!("{:.2}", a / b)
                        }
                        _ => "–".into(),
                    };
                    let _ = writeln!(
                        t,
                        "| {} | {} | {} | {} | {rt} | {rr} |",
                        size_label(n),
                        d.name(),
                        fmt_time(c),
                        fmt_rss(c)
                    );
                }
            }
            if !rib_notes.is_empty() {
                t.push_str(
                    "\nholdfastd's RIB thread per run (from its `RIB batch` debug log lines):\n\n",
                );
                for l in &rib_notes {
                    let _ = writeln!(t, "- {l}");
                }
            }
            println!("{t}");
            summary_tables.push_str(&t);
        }
    }

    if !args.no_scaling && daemons.contains(&Dut::Holdfastd) {
        let total = parse_size(&args.scaling_routes)?;
        let per = total / 8;
        let w = generate(Kind::Packed, per * 8, INJ_AS, Ipv4Addr::new(198, 18, 1, 1));
        // Split into 8 feeds of distinct prefixes (whole attribute sets; 500 per set).
        let mut feeds: Vec<Workload> = vec![Vec::new(); 8];
        let mut counts = [0usize; 8];
        let mut k = 0;
        for (a, p) in w {
            if counts[k] >= per && k < 7 {
                k += 1;
            }
            counts[k] += p.len();
            feeds[k].push((a, p));
        }
        let one = vec![feeds.concat()];
        let configs: [(&str, usize, &[Workload]); 4] = [
            ("8 peers", 1, &feeds),
            ("8 peers", 2, &feeds),
            ("1 peer", 1, &one),
            ("1 peer", 2, &one),
        ];
        let mut rows = Vec::new();
        for (label, workers, f) in configs {
            let mut rs = Vec::new();
            for r in 0..runs {
                let res = measure(Dut::Holdfastd, f, Some(workers), timeout).unwrap_or_else(|e| {
                    RunResult {
                        outcome: Outcome::Failed(format!("{e:#}")),
                        rib: None,
                        reflected: 0,
                    }
                });
                println!(
                    "[{:>7.1}s] scaling {label} workers={workers} run {}: {:?} {:?}",
                    started.elapsed().as_secs_f64(),
                    r + 1,
                    res.outcome,
                    res.rib
                );
                let stop = !matches!(res.outcome, Outcome::Done { .. });
                rs.push(res);
                if stop {
                    break;
                }
            }
            let busy: Vec<f64> = rs
                .iter()
                .filter_map(|r| r.rib.as_ref().map(|s| s.busy_us as f64 / 1e6))
                .collect();
            rows.push((
                label,
                workers,
                summarize(&rs, args.timeout),
                (!busy.is_empty()).then(|| stats(&busy).0),
            ));
        }
        let mut t = format!(
            "\n## Scaling (PBTS/DTS)\n\nholdfastd learning {} packed routes (distinct prefixes per peer) from 8 injector peers ({} each) or from 1 peer, \
with `workers = 1` and `workers = 2`; time until the monitor holds all of them. With 8 peers the injectors are \
feed-only (`export = \"none\"` towards them) so that the DUT's only output is the monitor's 1 copy of the table, as in the \
single-peer case. Speedup = workers=1 time / workers=2 time \
for the same peers.\n\n| peers | workers | time (s) | peak RSS (MB) | RIB busy (s) | speedup vs workers=1 |\n|---|---|---|---|---|---|\n",
            size_label(per * 8),
            size_label(per)
        );
        for (label, workers, c, busy) in &rows {
            let base = rows
                .iter()
                .find(|(l, w, _, _)| l == label && *w == 1)
                .and_then(|(_, _, c, _)| c.time);
            let sp = match (base, c.time) {
                (Some((a, _, _)), Some((b, _, _))) if *workers != 1 && b > 0.0 => {
                    format!("{:.2}×", a / b)
                }
                _ => "–".into(),
            };
            let _ = writeln!(
                t,
                "| {label} | {workers} | {} | {} | {} | {sp} |",
                fmt_time(c),
                fmt_rss(c),
                busy.map_or("–".into(), |b| format!("{b:.3}"))
            );
        }
        println!("{t}");
        summary_tables.push_str(&t);
    }
    md.push_str(&summary_tables);
    let _ = writeln!(
        md,
        "\nTotal bench time: {:.0} s.",
        started.elapsed().as_secs_f64()
    );
    if let Some(out) = &args.out {
        std::fs::write(out, &md).with_context(|| format!("writing {}", out.display()))?;
        println!("wrote {}", out.display());
    }
    Ok(())
}
