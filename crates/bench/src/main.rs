//! `holdfast-bench`: every figure of the TENSOR evaluation side by side with
//! bird2, frr and gobgpd (see the `holdfast_bench` library docs for what
//! each figure measures and the known issues).

use anyhow::{Context, Result};
use clap::Parser;
use holdfast_bench::dut::Dut;
use holdfast_bench::figures::{self, Plan};
use holdfast_bench::learn::{INJ_AS, MON_AS};
use holdfast_bench::report::Figure;
use holdfast_bench::util::{loadavg, machine, parse_size, parse_sizes, size_label};
use holdfast_bench::{dut::DUT_AS, fanout};
use holdfast_lab::{cleanup_stale, PeerKind};
use holdfast_tester::workload::Kind;
use serde_json::json;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

const FIGURES: &str = "6a,scaling,many,6b,6c,6d,5b,takeover";

#[derive(Parser, Debug)]
#[command(
    version = holdfast_version::VERSION,
    name = "holdfast-bench",
    about = "The TENSOR evaluation (Fig. 5(b), 6(a)-(d), takeover) side by side with bird2, frr and gobgpd"
)]
struct Args {
    /// Daemons under test, comma-separated: holdfastd,holdfastd-nsr,bird,frr,gobgp.
    #[arg(long, default_value = "holdfastd,holdfastd-nsr,bird,frr,gobgp")]
    daemons: String,
    /// Figures, comma-separated: 6a,scaling,many,6b,6c,6d,5b,takeover.
    #[arg(long, default_value = FIGURES)]
    figures: String,
    /// Fig. 6(a) route counts, comma-separated (k and M suffixes).
    #[arg(long, default_value = "10k,100k,500k,1M")]
    sizes: String,
    /// Fig. 6(a) workloads, comma-separated: packed,realistic,dfz.
    #[arg(long, default_value = "packed,realistic,dfz")]
    workloads: String,
    /// Fig. 6(b) route counts.
    #[arg(long, default_value = "10k,100k,1M")]
    origin_sizes: String,
    /// Fig. 6(c) peer counts.
    #[arg(long, default_value = "50,100,200,300,400,500,600,700")]
    peers: String,
    /// Fig. 6(d) unit counts.
    #[arg(long, default_value = "1,2,4,8,16")]
    units: String,
    /// Fig. 6(d) routes per unit.
    #[arg(long, default_value = "10k")]
    unit_routes: String,
    /// Fig. 6(d) steady window in seconds.
    #[arg(long, default_value_t = 3)]
    window: u64,
    /// Takeover table sizes.
    #[arg(long, default_value = "10k,100k,1M")]
    takeover_sizes: String,
    /// Fig. 5(b) record size in bytes (TENSOR: 4 KB values).
    #[arg(long, default_value_t = 4096)]
    store_size: usize,
    /// Fig. 5(b) largest batch (records per call; powers of two up to it).
    #[arg(long, default_value_t = 4096)]
    store_max_batch: usize,
    /// Fig. 5(b) minimum time per repetition series, in milliseconds.
    #[arg(long, default_value_t = 200)]
    store_min_time_ms: u64,
    /// Total routes of the scaling measurement (split over 8 peers).
    #[arg(long, default_value = "1M")]
    scaling_routes: String,
    /// Many sessions: injector sessions into one daemon (1..=1000).
    #[arg(long, default_value_t = 1000)]
    many_sessions: usize,
    /// Many sessions: routes each injector sends (k/M suffixes; a realistic mix).
    #[arg(long, default_value = "1k")]
    many_routes: String,
    /// Runs per cell (median reported).
    #[arg(long, default_value_t = 3)]
    runs: usize,
    /// Per-run time limit in seconds.
    #[arg(long, default_value_t = 300)]
    timeout: u64,
    /// A run slower than this many seconds is not repeated (the cell then has fewer runs).
    #[arg(long, default_value_t = 30)]
    slow: u64,
    /// Write the report (Markdown) to this file; the plots go to `benchmarks/` next to it.
    #[arg(long)]
    out: Option<PathBuf>,
    /// Write the results as JSON to this file (`-` for standard output, progress then on stderr).
    #[arg(long)]
    json_out: Option<PathBuf>,
    /// Small sizes, 1 run, P up to 100, K up to 2: a check in a few minutes.
    #[arg(long)]
    quick: bool,
    /// Skip the worker-scaling measurement.
    #[arg(long)]
    no_scaling: bool,
    /// The kernel FIB figure alone (issue 13): route counts to install
    /// into a kernel table, holdfastd against bird2's kernel protocol,
    /// side by side (`--runs` each; `--daemons` may leave one out); e.g.
    /// `--fib 1M`. The other figures are not run.
    #[arg(long)]
    fib: Option<String>,
    /// holdfastd alone: N routes installed, then `[kernel]`'s metric and
    /// protocol changed by SIGHUP; the time of each move and the fewest
    /// prefixes with a route seen during it (`--runs` each); e.g.
    /// `--fib-reload 100k,1M`.
    #[arg(long)]
    fib_reload: Option<String>,
}

/// The 1-minute load average (`/proc/loadavg`), printed with each run.
fn load1() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|s| s.split_whitespace().next().map(str::to_string))
        .unwrap_or_else(|| "?".into())
}

/// `--fib-reload`: each size, `runs` runs of holdfastd's two moves.
fn fib_reload_mode(sizes: &str, runs: usize, timeout: Duration) -> Result<()> {
    std::env::set_var("HOLDFAST_LAB_PCAP", "0");
    holdfast_lab::preflight(&[])?;
    cleanup_stale()?;
    for n in parse_sizes(sizes)? {
        for r in 0..runs.max(1) {
            let load = load1();
            match holdfast_bench::fib_reload::measure(n, timeout) {
                Ok(run) => {
                    for (what, m) in [
                        ("metric 32 -> 20", run.metric),
                        ("protocol 179 -> 201", run.protocol),
                    ] {
                        println!(
                            "fib-reload {} run {}: {what}: {:.2} s; fewest prefixes with a route in a sample: {} of {n} ({} samples; load {load} at the start)",
                            size_label(n),
                            r + 1,
                            m.secs,
                            m.min_prefixes,
                            m.samples
                        );
                    }
                }
                Err(e) => println!("fib-reload {} run {}: {e:#}", size_label(n), r + 1),
            }
        }
    }
    Ok(())
}

/// `--fib`: each size, `runs` rounds of one run per daemon (interleaved,
/// so a change of the machine's load hits both); a Markdown table with the
/// medians and the median of each round's ratio.
fn fib_mode(sizes: &str, daemons: &[Dut], runs: usize, timeout: Duration) -> Result<()> {
    std::env::set_var("HOLDFAST_LAB_PCAP", "0");
    holdfast_lab::preflight(&[PeerKind::Bird])?;
    cleanup_stale()?;
    let mut md = String::from(
        "| routes | holdfastd (s) | bird2 (s) | holdfastd ÷ bird2 (medians) | per round (median) |\n|---|---|---|---|---|\n",
    );
    let duts = [Dut::Holdfastd, Dut::Bird];
    for n in parse_sizes(sizes)? {
        let mut times: [Vec<f64>; 2] = [Vec::new(), Vec::new()];
        let mut ratios = Vec::new();
        for r in 0..runs.max(1) {
            let mut round = [None, None];
            for (i, d) in duts.iter().enumerate() {
                if !daemons.contains(d) {
                    continue;
                }
                let load = load1();
                match holdfast_bench::fib::measure(*d, n, timeout) {
                    Ok(run) => {
                        let cpu = match run.cpu {
                            Some((Some(fib), all)) => {
                                format!("; CPU: {all:.2} s, of which the FIB thread {fib:.2} s")
                            }
                            Some((None, all)) => format!("; CPU: {all:.2} s"),
                            None => String::new(),
                        };
                        println!(
                            "fib {} {} run {}: {:.2} s ({}; load {load} at the start{cpu})",
                            size_label(n),
                            d.name(),
                            r + 1,
                            run.secs,
                            if run.confirmed {
                                "confirmed by a dump"
                            } else {
                                "unconfirmed"
                            }
                        );
                        times[i].push(run.secs);
                        round[i] = Some(run.secs);
                    }
                    Err(e) => println!("fib {} {} run {}: {e:#}", size_label(n), d.name(), r + 1),
                }
            }
            if let [Some(a), Some(b)] = round {
                if b > 0.0 {
                    ratios.push(a / b);
                }
            }
        }
        let median = |v: &mut Vec<f64>| {
            v.sort_by(f64::total_cmp);
            v.get(v.len() / 2).copied()
        };
        let med: Vec<(Option<f64>, Vec<f64>)> =
            times.into_iter().map(|mut v| (median(&mut v), v)).collect();
        let cell = |m: &(Option<f64>, Vec<f64>)| match (m.0, m.1.first(), m.1.last()) {
            (Some(x), Some(lo), Some(hi)) => format!("{x:.2} ({lo:.2}–{hi:.2})"),
            _ => "failed".into(),
        };
        let ratio = match (med[0].0, med[1].0) {
            (Some(a), Some(b)) if b > 0.0 => format!("{:.2}", a / b),
            _ => "-".into(),
        };
        let rounds = match median(&mut ratios) {
            Some(m) => format!(
                "{m:.2} ({})",
                ratios
                    .iter()
                    .map(|x| format!("{x:.2}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            None => "-".into(),
        };
        let _ = writeln!(
            md,
            "| {} | {} | {} | {ratio} | {rounds} |",
            size_label(n),
            cell(&med[0]),
            cell(&med[1])
        );
    }
    println!("\nKernel FIB: time to install N routes into table {} (median of {} run(s), min–max)\n\n{md}", holdfast_bench::fib::TABLE, runs.max(1));
    Ok(())
}

fn apply_quick(a: &mut Args) {
    a.sizes = "10k,100k".into();
    a.origin_sizes = "10k,100k".into();
    a.peers = "50,100".into();
    a.units = "1,2".into();
    a.window = 2;
    a.takeover_sizes = "10k".into();
    a.store_max_batch = 64;
    a.store_min_time_ms = 50;
    a.scaling_routes = "100k".into();
    a.many_sessions = 100;
    a.runs = 1;
    a.timeout = a.timeout.min(120);
}

fn method(plan: &Plan, args: &Args) -> String {
    format!(
        "\n## Method\n\nEvery measurement builds a fresh lab: each host is its own network namespace, joined by veth pairs \
or a bridge; the daemon under test (DUT) is started in its host and the testers (`holdfast-tester` sessions, all \
held by this one process) establish eBGP sessions with it: DUT AS {DUT_AS}, injector AS {INJ_AS}, monitor AS \
{MON_AS} (Fig. 6(c): monitor i in AS {} + i), 4-octet ASNs that never occur in the workloads' AS paths. Routes \
are encoded into UPDATEs *before* the clock starts; a figure's time ends at the instant the last monitor's view \
last changed when it held every route. Peak RSS = `VmHWM` from `/proc/PID/status` of the DUT's processes and \
their children, summed (frr: bgpd + zebra). Each cell is the median of {} run(s), min–max in parentheses; \
\"holdfastd ÷ best other\" divides holdfastd's median by the lowest median among bird2, frr and gobgpd at the same \
x (below 1: holdfastd is faster or smaller). Per-run limit {} s: a run over it reports \"timeout\" and larger \
sizes of that daemon are skipped; a run slower than {} s (its measured time; in Fig. 6(b) and the restart lines \
its wall time, loading included) is not repeated (marked \"1 run\").\n\n\
DUT configuration: import and export everything on eBGP, no kernel FIB: holdfastd `import = \"all\"`, \
`export = \"all\"`, `passive = true`, `workers` at its default (one per core but one); holdfastd NSR on adds \
`[nsr] store = \"redis://…\"` with a redis-server in its own namespace linked to the DUT; bird2 `import all` / \
export filter accepting all, no kernel protocol; frr `bgpd -n` (no FIB install) with zebra, `no bgp \
ebgp-requires-policy`, `advertisement-interval 0`; gobgpd default (accept-all) policies, no zebra. No packet \
captures.\n\nWorkloads (`holdfast_tester::workload`, deterministic): **packed** = 500 consecutive /24s per \
attribute set (TENSOR's bulk load); **realistic** = full-table-like prefix lengths (≈60 % /24), AS paths of 2–6 \
hops, some MEDs and communities, ≈2.5 prefixes per attribute set (1–4); **dfz** = the same with 2–4 prefixes \
per attribute set (≈3, issue 12's third mix).\n",
        fanout::MON_AS_BASE,
        plan.runs,
        args.timeout,
        args.slow
    )
}

struct Report {
    header: String,
    sections: Vec<String>,
    figures: Vec<Figure>,
    scaling: Option<String>,
    many: Option<String>,
}

fn write_report(
    report: &Report,
    out: &Path,
    total: Option<Duration>,
    load_after: Option<&str>,
    runs: usize,
) -> Result<()> {
    let mut md = report.header.clone();
    for s in &report.sections {
        md.push_str(s);
    }
    if let Some(s) = &report.scaling {
        md.push_str(s);
    }
    if let Some(s) = &report.many {
        md.push_str(s);
    }
    md.push_str(&summary(&report.figures));
    md.push_str(&known_issues(&report.figures));
    if let Some(l) = load_after {
        let _ = writeln!(md, "\nLoad average at the end (1, 5, 15 min): {l}.");
    }
    match total {
        Some(t) => {
            let _ = writeln!(md, "\nTotal bench time: {:.0} s.", t.as_secs_f64());
        }
        None => md.push_str("\n(Partial: the bench is still running.)\n"),
    }
    let _ = runs;
    std::fs::write(out, md).with_context(|| format!("writing {}", out.display()))
}

fn summary(figs: &[Figure]) -> String {
    let mut t = String::from(
        "\n## Summary\n\nholdfastd ÷ the best other daemon at the largest size each figure measured (below 1: holdfastd \
is faster or smaller):\n\n| figure | x | holdfastd series | holdfastd ÷ best other |\n|---|---|---|---|\n",
    );
    for f in figs.iter().filter(|f| f.ratio) {
        for s in f.series.iter().filter(|s| s.holdfast) {
            let found = (0..f.xs.len())
                .rev()
                .find_map(|i| f.ratio_at(s, i).map(|r| (i, r)));
            let cell = match &found {
                Some((_, (r, n))) => format!("**{r:.2}×** ({n})"),
                None => "–".into(),
            };
            let x = found.map_or("–".to_string(), |(i, _)| f.x_names[i].clone());
            let _ = writeln!(t, "| {} | {} | {} | {} |", f.title, x, s.name, cell);
        }
    }
    t
}

fn known_issues(figs: &[Figure]) -> String {
    let mut t = String::from(
        "\n## Known issues\n\n\
- The testers run on the same cores as the DUT; on a 2-core machine the monitor's decoding counts in every daemon's time.\n\
- frr re-advertises every route back to the injector that sent it (the progress log shows \"sent back to the injector\"), which costs it output.\n\
- Fig. 6(b): each daemon loads its N routes its own way (configuration, `vtysh -f`, `gobgp mrt inject`); that loading is shown but not timed.\n\
- Fig. 6(d): one namespace per unit (bird2, frr and gobgpd as the lab starts them listen on port 179 of every address, so two cannot share a namespace); an idle unit's CPU is its timers and keepalives.\n\
- The takeover figure compares a takeover (sessions kept) with a restart (sessions reset); the restart's time leaves out failure detection, and the testers reconnect every 50 ms.\n\
- Fig. 5(b) talks to Redis over loopback on this machine (TENSOR: another host), so it has no network round trip.\n",
    );
    for f in figs {
        for s in &f.series {
            for (i, c) in s.cells.iter().enumerate() {
                if c.value.is_none() && !c.note.is_empty() && !c.note.starts_with('–') {
                    let _ = writeln!(
                        t,
                        "- {}: {} at {}: {}.",
                        f.title, s.name, f.x_names[i], c.note
                    );
                }
            }
        }
    }
    t
}

fn main() -> Result<()> {
    let mut args = Args::parse();
    if args.quick {
        apply_quick(&mut args);
    }
    if let Some(sizes) = &args.fib_reload {
        return fib_reload_mode(sizes, args.runs, Duration::from_secs(args.timeout));
    }
    if let Some(sizes) = &args.fib {
        let daemons = Dut::parse_list(&args.daemons)?;
        return fib_mode(
            sizes,
            &daemons,
            args.runs,
            Duration::from_secs(args.timeout),
        );
    }
    // No packet captures: they would distort the timing. Set before any lab exists.
    std::env::set_var("HOLDFAST_LAB_PCAP", "0");
    let daemons = Dut::parse_list(&args.daemons)?;
    let kinds: Vec<Kind> = args
        .workloads
        .split(',')
        .map(|s| s.trim().parse::<Kind>().map_err(anyhow::Error::msg))
        .collect::<Result<_>>()?;
    let wanted: Vec<String> = args
        .figures
        .split(',')
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .collect();
    for w in &wanted {
        if !FIGURES.split(',').any(|f| f == w) {
            anyhow::bail!("unknown figure {w:?} ({FIGURES})");
        }
    }
    let want = |f: &str| wanted.iter().any(|w| w == f);
    let started = Instant::now();
    let plan = Plan {
        daemons: daemons.clone(),
        runs: args.runs.max(1),
        timeout: Duration::from_secs(args.timeout),
        slow: args.slow as f64,
        sizes: parse_sizes(&args.sizes)?,
        kinds,
        origin_sizes: parse_sizes(&args.origin_sizes)?,
        peers: parse_sizes(&args.peers)?,
        units: parse_sizes(&args.units)?,
        unit_routes: parse_size(&args.unit_routes)?,
        window: Duration::from_secs(args.window.max(1)),
        takeover_sizes: parse_sizes(&args.takeover_sizes)?,
        store_size: args.store_size,
        store_max_batch: args.store_max_batch,
        store_min_time: Duration::from_millis(args.store_min_time_ms),
        scaling_routes: parse_size(&args.scaling_routes)?,
        many_sessions: args.many_sessions,
        many_routes: parse_size(&args.many_routes)?,
        started,
    };
    let need: Vec<PeerKind> = daemons.iter().filter_map(|d| d.peer_kind()).collect();
    holdfast_lab::preflight(&need)?;
    let hf_bin = holdfast_lab::find_binary("holdfastd", "HOLDFASTD_BIN")?;
    if !hf_bin.to_string_lossy().contains("/release/") {
        eprintln!(
            "warning: {} is not a release build (run `cargo build --release --bins`)",
            hf_bin.display()
        );
    }
    cleanup_stale()?;
    let load_before = loadavg();
    let machine = machine();
    let mut header = String::from(
        "# Benchmarks\n\nGenerated by `holdfast-bench` (`make bench`, `holdfast bench`); re-running it rewrites this file and the plots in `benchmarks/` beside it.\n\n",
    );
    // The program by its name (not the build directory it ran from), then its options.
    let argv: Vec<String> = std::env::args()
        .enumerate()
        .map(|(i, a)| match (i, std::path::Path::new(&a).file_name()) {
            (0, Some(n)) => n.to_string_lossy().into_owned(),
            _ => a,
        })
        .collect();
    let when = holdfast_bench::util::cmd_line("date", &["-u", "+%Y-%m-%d %H:%M UTC"]);
    let _ = writeln!(
        header,
        "Command: `{}` (started {when}).\n\n## Machine\n",
        argv.join(" ")
    );
    header.push_str("| | |\n|---|---|\n");
    for (k, v) in &machine {
        let _ = writeln!(header, "| {k} | {v} |");
        println!("{k}: {v}");
    }
    let _ = writeln!(
        header,
        "| load average at the start (1, 5, 15 min) | {load_before} |"
    );
    header.push_str(&method(&plan, &args));
    let mut report = Report {
        header,
        sections: Vec::new(),
        figures: Vec::new(),
        scaling: None,
        many: None,
    };
    let out_dir = args
        .out
        .as_ref()
        .and_then(|o| o.parent().map(Path::to_path_buf))
        .unwrap_or_else(|| PathBuf::from("."));
    let out_dir = if out_dir.as_os_str().is_empty() {
        PathBuf::from(".")
    } else {
        out_dir
    };
    let plot_dir = out_dir.join("benchmarks");
    let work = std::env::temp_dir().join(format!("holdfast-bench-{}", std::process::id()));
    let add = |report: &mut Report, mut figs: Vec<Figure>| {
        for f in &mut figs {
            // Plots only go with a report (`--out`).
            if args.out.is_some() {
                if let Err(e) = f.plot(&plot_dir, "benchmarks", &work) {
                    println!("plot {}: {e:#}", f.id);
                }
            }
            let md = f.markdown(plan.runs);
            println!("{md}");
            report.sections.push(md);
        }
        report.figures.extend(figs);
        if let Some(out) = &args.out {
            if let Err(e) = write_report(report, out, None, None, plan.runs) {
                println!("{e:#}");
            }
        }
    };
    if want("6a") {
        add(&mut report, figures::fig6a(&plan));
    }
    if want("scaling") && !args.no_scaling && daemons.contains(&Dut::Holdfastd) {
        let t = figures::scaling(&plan);
        println!("{t}");
        report.scaling = Some(t);
    }
    if want("many") {
        let t = figures::many_sessions(&plan);
        println!("{t}");
        report.many = Some(t);
        if let Some(out) = &args.out {
            if let Err(e) = write_report(&report, out, None, None, plan.runs) {
                println!("{e:#}");
            }
        }
    }
    if want("6b") {
        add(&mut report, vec![figures::fig6b(&plan)]);
    }
    if want("6c") {
        add(&mut report, vec![figures::fig6c(&plan)]);
    }
    if want("6d") {
        add(&mut report, figures::fig6d(&plan));
    }
    if want("5b") {
        add(&mut report, vec![figures::fig5b(&plan)]);
    }
    if want("takeover") {
        add(&mut report, vec![figures::takeover_fig(&plan)]);
    }
    let total = started.elapsed();
    let load_after = loadavg();
    if let Some(out) = &args.out {
        write_report(&report, out, Some(total), Some(&load_after), plan.runs)?;
        println!("wrote {}", out.display());
    }
    if let Some(j) = &args.json_out {
        let v = json!({
            "command": argv,
            "machine": machine.iter().map(|(k, v)| json!({ "key": k, "value": v })).collect::<Vec<_>>(),
            "load_before": load_before,
            "load_after": load_after,
            "runs": plan.runs,
            "total_secs": total.as_secs_f64(),
            "sizes": plan.sizes.iter().map(|n| size_label(*n)).collect::<Vec<_>>(),
            "figures": report.figures.iter().map(Figure::json).collect::<Vec<_>>(),
            "scaling_markdown": report.scaling,
            "many_sessions_markdown": report.many,
        });
        let text = serde_json::to_string_pretty(&v)?;
        if j.as_os_str() == "-" {
            println!("{text}");
        } else {
            std::fs::write(j, text).with_context(|| format!("writing {}", j.display()))?;
        }
    }
    let _ = std::fs::remove_dir_all(&work);
    Ok(())
}
