//! Runs every figure's measurements and turns them into [`Figure`]s.

use crate::dut::Dut;
use crate::learn::{self, INJ_AS};
use crate::report::{num, Figure, Scale, Series};
use crate::util::{repeat, size_label, Cell, Slow};
use crate::{fanout, originate, store, takeover, units};
use anyhow::Result;
use holdfast_tester::workload::{generate, Kind, Workload};
use std::fmt::Write as _;
use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

/// What to measure, and how often.
#[derive(Debug, Clone)]
pub struct Plan {
    /// Daemons under test.
    pub daemons: Vec<Dut>,
    /// Runs per cell.
    pub runs: usize,
    /// Per-run limit.
    pub timeout: Duration,
    /// A run slower than this (s) is not repeated.
    pub slow: f64,
    /// 6(a) sizes.
    pub sizes: Vec<usize>,
    /// 6(a) workloads.
    pub kinds: Vec<Kind>,
    /// 6(b) sizes.
    pub origin_sizes: Vec<usize>,
    /// 6(c) peer counts.
    pub peers: Vec<usize>,
    /// 6(d) unit counts.
    pub units: Vec<usize>,
    /// 6(d) routes per unit.
    pub unit_routes: usize,
    /// 6(d) steady window.
    pub window: Duration,
    /// Takeover table sizes.
    pub takeover_sizes: Vec<usize>,
    /// 5(b) record size (bytes).
    pub store_size: usize,
    /// 5(b) largest batch.
    pub store_max_batch: usize,
    /// 5(b) minimum time per repetition series.
    pub store_min_time: Duration,
    /// Scaling: total routes.
    pub scaling_routes: usize,
    /// Many sessions: injector sessions.
    pub many_sessions: usize,
    /// Many sessions: routes per injector.
    pub many_routes: usize,
    /// When the bench started (for the progress lines).
    pub started: Instant,
}

fn size_axis(sizes: &[usize]) -> (Vec<f64>, Vec<String>) {
    (
        sizes.iter().map(|n| *n as f64).collect(),
        sizes.iter().map(|n| size_label(*n)).collect(),
    )
}

/// Fig. 6(a), one figure per workload.
pub fn fig6a(plan: &Plan) -> Vec<Figure> {
    let mut figs = Vec::new();
    for kind in &plan.kinds {
        let mut series: Vec<Series> = plan
            .daemons
            .iter()
            .map(|d| Series {
                name: d.name().into(),
                holdfast: d.is_holdfast(),
                cells: Vec::new(),
            })
            .collect();
        let mut notes = Vec::new();
        let mut given_up: Vec<Option<String>> = vec![None; plan.daemons.len()];
        for &n in &plan.sizes {
            let w = generate(*kind, n, INJ_AS, Ipv4Addr::new(198, 18, 1, 1));
            for (di, &d) in plan.daemons.iter().enumerate() {
                if let Some(why) = &given_up[di] {
                    series[di].cells.push(Cell::skipped(why));
                    continue;
                }
                let label = format!("6(a) {kind} {} {}", size_label(n), d.name());
                let mut rib_lines = Vec::new();
                let cells = repeat(
                    plan.runs,
                    Slow::Value(plan.slow),
                    &label,
                    plan.started,
                    2,
                    |r| {
                        let run = learn::measure(d, std::slice::from_ref(&w), None, plan.timeout)?;
                        if run.reflected > 0 {
                            println!("  (sent back to the injector: {} routes)", run.reflected);
                        }
                        if let Some(rib) = &run.rib {
                            rib_lines.push(format!(
                            "{} {kind} {} run {}: {:.3} s end to end, {:.2} s CPU, peak RSS {} MB; RIB thread: {} batches, {} UPDATEs, busy {:.3} s (longest batch {:.1} ms); NSR snapshots: {}",
                            d.name(),
                            size_label(n),
                            r + 1,
                            run.secs,
                            run.cpu_secs,
                            run.rss_kb / 1024,
                            rib.batches,
                            rib.msgs,
                            rib.busy_us as f64 / 1e6,
                            rib.max_us as f64 / 1e3,
                            rib.snapshots
                        ));
                            println!("  {}", rib_lines.last().map_or("", String::as_str));
                        }
                        Ok(vec![run.secs, run.rss_kb as f64 / 1024.0])
                    },
                );
                notes.extend(rib_lines);
                let mut c = cells[0].clone();
                c.extra = vec![cells[1].median().map_or("–".into(), |m| format!("{m:.0}"))];
                if c.value.is_none() {
                    given_up[di] = Some(format!(
                        "skipped ({} at {})",
                        if c.note.starts_with("timeout") {
                            "timed out"
                        } else {
                            "failed"
                        },
                        size_label(n)
                    ));
                }
                series[di].cells.push(c);
            }
        }
        let (xs, x_names) = size_axis(&plan.sizes);
        if !notes.is_empty() {
            notes.insert(
                0,
                "holdfastd's RIB thread per run (from its `RIB batch` debug log lines):".into(),
            );
        }
        figs.push(Figure {
            id: format!("fig6a-{kind}"),
            title: format!("Fig. 6(a), {kind} workload: receive, learn and re-advertise N routes"),
            what: "Seconds from the injector's first write until the monitor holds all N routes \
                   (end to end: parse, decide, export, encode, send); peak RSS of the DUT. \
                   holdfastd NSR on replicates both sessions to Redis and is PROTECTED before the clock starts."
                .into(),
            x_label: "routes N".into(),
            y_label: "time (s)".into(),
            series_label: "daemon".into(),
            xs,
            x_names,
            x_scale: Scale::Log10,
            y_scale: Scale::Log10,
            series,
            extra_headers: vec!["peak RSS (MB)".into()],
            ratio: true,
            notes,
            png: None,
        });
    }
    figs
}

/// The worker-scaling table (Markdown) of holdfastd.
pub fn scaling(plan: &Plan) -> String {
    let per = plan.scaling_routes / 8;
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
        let name = format!("scaling {label} workers={workers}");
        let cells = repeat(plan.runs, Slow::Never, &name, plan.started, 3, |_| {
            let run = learn::measure(Dut::Holdfastd, f, Some(workers), plan.timeout)?;
            let busy = run.rib.as_ref().map_or(0.0, |s| s.busy_us as f64 / 1e6);
            Ok(vec![run.secs, run.rss_kb as f64 / 1024.0, busy])
        });
        rows.push((label, workers, cells));
    }
    let mut t = format!(
        "\n## Scaling (PBTS/DTS)\n\nholdfastd learning {} packed routes (distinct prefixes per peer) from 8 injector peers ({} each) or from 1 peer, \
with `workers = 1` and `workers = 2`; time until the monitor holds all of them. With 8 peers the injectors are \
feed-only (`export = \"none\"` towards them) so that the DUT's only output is the monitor's 1 copy of the table, as in the \
single-peer case. Speedup = workers=1 time / workers=2 time for the same peers.\n\n| peers | workers | time (s) | peak RSS (MB) | RIB busy (s) | speedup vs workers=1 |\n|---|---|---|---|---|---|\n",
        size_label(per * 8),
        size_label(per)
    );
    for (label, workers, cells) in &rows {
        let base = rows
            .iter()
            .find(|(l, w, _)| l == label && *w == 1)
            .and_then(|(_, _, c)| c[0].median());
        let sp = match (base, cells[0].median()) {
            (Some(a), Some(b)) if *workers != 1 && b > 0.0 => format!("{:.2}×", a / b),
            _ => "–".into(),
        };
        let _ = writeln!(
            t,
            "| {label} | {workers} | {} | {} | {} | {sp} |",
            crate::report::fmt_cell(&cells[0], plan.runs),
            cells[1].median().map_or("–".into(), |m| format!("{m:.0}")),
            cells[2].median().map_or("–".into(), num),
        );
    }
    t
}

/// Many sessions into one daemon (issue 27): every daemon under test but
/// gobgpd learns `many_sessions` × `many_routes` realistic routes, one
/// distinct share per session, and re-advertises them to one monitor
/// ([`crate::many_learn`]); the Markdown table with each daemon's time
/// against bird2's and frr's.
pub fn many_sessions(plan: &Plan) -> String {
    let (s, per) = (plan.many_sessions, plan.many_routes);
    let mut rows: Vec<(Dut, Vec<Cell>)> = Vec::new();
    for &dut in plan.daemons.iter().filter(|d| **d != Dut::Gobgp) {
        let name = format!("many sessions {} {s}x{}", dut.name(), size_label(per));
        let cells = repeat(plan.runs, Slow::Never, &name, plan.started, 4, |_| {
            let r = crate::many_learn::measure(dut, s, per, Kind::Realistic, plan.timeout)?;
            Ok(vec![
                r.secs,
                r.cpu_secs,
                r.rss_kb as f64 / 1024.0,
                r.setup_secs,
            ])
        });
        rows.push((dut, cells));
    }
    let median = |d: Dut| {
        rows.iter()
            .find(|(x, _)| *x == d)
            .and_then(|(_, c)| c[0].median())
    };
    let ratio = |a: Option<f64>, b: Option<f64>| match (a, b) {
        (Some(a), Some(b)) if b > 0.0 => format!("{:.2}×", a / b),
        _ => "–".into(),
    };
    let mut t = format!(
        "\n## Many sessions (issue 27)\n\n{s} injector sessions × {} routes each ({} in all, a realistic mix; distinct prefixes per session, \
each session's AS first in its paths) into one daemon, re-advertised to one monitor; the daemons export nothing to the injectors \
(holdfastd `export = \"none\"`, bird2 `export none`, frr an outbound deny route-map). Time: from just before the injectors' first write \
until the monitor holds every route. CPU: the daemon's processes (`schedstat`) over that window; peak RSS: their VmHWM at its end. \
Set-up (establishing the {s} sessions) is not timed. gobgpd is not measured here (the lab writes no per-neighbour export policy for it).\n\n\
| daemon | time (s) | CPU (s) | peak RSS (MB) | set-up (s) | time ÷ bird2's | time ÷ frr's |\n|---|---|---|---|---|---|---|\n",
        size_label(per),
        size_label(s * per)
    );
    for (dut, cells) in &rows {
        let m = cells[0].median();
        let _ = writeln!(
            t,
            "| {} | {} | {} | {} | {} | {} | {} |",
            dut.name(),
            crate::report::fmt_cell(&cells[0], plan.runs),
            cells[1].median().map_or("–".into(), num),
            cells[2].median().map_or("–".into(), |x| format!("{x:.0}")),
            cells[3].median().map_or("–".into(), num),
            ratio(m, median(Dut::Bird)),
            ratio(m, median(Dut::Frr)),
        );
    }
    t
}

/// One series per daemon under test (NSR off): for every x, `runs` runs of `measure`
/// (`values` numbers each). The first number is the cell, the others go to its extra
/// columns through `extra` (medians: `format`). A daemon without a result at one x is
/// skipped at the larger ones.
#[allow(clippy::too_many_arguments)]
fn sweep<X: Copy>(
    plan: &Plan,
    xs: &[X],
    x_text: impl Fn(X) -> String,
    tag: &str,
    slow: Slow,
    values: usize,
    measure: impl Fn(Dut, X) -> Result<Vec<f64>>,
    extra: &[fn(f64) -> String],
) -> Vec<Series> {
    let daemons: Vec<Dut> = plan
        .daemons
        .iter()
        .copied()
        .filter(|d| *d != Dut::HoldfastdNsr)
        .collect();
    let mut series: Vec<Series> = daemons
        .iter()
        .map(|d| Series {
            name: d.name().into(),
            holdfast: d.is_holdfast(),
            cells: Vec::new(),
        })
        .collect();
    let mut given_up: Vec<Option<String>> = vec![None; daemons.len()];
    for &x in xs {
        for (di, &d) in daemons.iter().enumerate() {
            if let Some(why) = &given_up[di] {
                series[di].cells.push(Cell::skipped(why));
                continue;
            }
            let label = format!("{tag} {} {}", x_text(x), d.name());
            let cells = repeat(plan.runs, slow, &label, plan.started, values, |_| {
                measure(d, x)
            });
            let mut c = cells[0].clone();
            c.extra = cells[1..]
                .iter()
                .zip(extra)
                .map(|(cell, f)| cell.median().map_or("–".into(), f))
                .collect();
            if c.value.is_none() {
                given_up[di] = Some(format!("skipped (no result at {})", x_text(x)));
            }
            series[di].cells.push(c);
        }
    }
    series
}

fn mb(m: f64) -> String {
    format!("{m:.0}")
}

/// Fig. 6(b).
pub fn fig6b(plan: &Plan) -> Figure {
    let series = sweep(
        plan,
        &plan.origin_sizes,
        size_label,
        "6(b)",
        Slow::Wall(plan.slow),
        4,
        |d, n| {
            let r = originate::measure(d, n, plan.timeout)?;
            Ok(vec![
                r.secs,
                r.first_secs,
                r.load_secs,
                r.rss_kb as f64 / 1024.0,
            ])
        },
        &[num, num, mb],
    );
    let (xs, x_names) = size_axis(&plan.origin_sizes);
    Figure {
        id: "fig6b".into(),
        title: "Fig. 6(b): generate and send N routes to one peer".into(),
        what: "The DUT originates N consecutive /24s (holdfastd `[[network]] count = N`; bird2 a static protocol; \
frr `network` statements loaded with `vtysh -f`; gobgpd `gobgp mrt inject global` of an MRT TABLE_DUMP_V2 file, followed by 5,000 repeated entries because the client exits before its last paths reach gobgpd) and \
the bench waits until the DUT's own table holds all N (`show summary`, `birdc show route count`, \
`show bgp ipv4 unicast summary json`, `gobgp global rib summary`) and has run for at least 3 s (bird2 learns its interfaces at its device protocol's first scan); only then does the monitor connect. \
Time = from the monitor's connect (TCP SYN, OPEN exchange) until it holds all N. \
\"DUT start → own table full\" is the loading time before that (configuration parse, injection), not part of the time."
            .into(),
        x_label: "routes N".into(),
        y_label: "time (s)".into(),
        series_label: "daemon".into(),
        xs,
        x_names,
        x_scale: Scale::Log10,
        y_scale: Scale::Log10,
        series,
        extra_headers: vec![
            "first UPDATE after (s)".into(),
            "DUT start → own table full (s)".into(),
            "peak RSS (MB)".into(),
        ],
        ratio: true,
        notes: Vec::new(),
        png: None,
    }
}

/// Fig. 6(c).
pub fn fig6c(plan: &Plan) -> Figure {
    let series = sweep(
        plan,
        &plan.peers,
        |p| format!("P = {p}"),
        "6(c)",
        Slow::Value(plan.slow),
        3,
        |d, p| {
            let r = fanout::measure(d, p, plan.timeout)?;
            Ok(vec![r.secs, r.setup_secs, r.rss_kb as f64 / 1024.0])
        },
        &[num, mb],
    );
    Figure {
        id: "fig6c".into(),
        title: "Fig. 6(c): send 100 routes to each of P peers (update packing)".into(),
        what: format!(
            "An injector sends {} routes (realistic workload: ≈40 UPDATEs) to the DUT, which re-advertises them \
to P monitor sessions in P different ASes, all held by this one tester process from P source addresses of one \
namespace; every DUT is configured with P + 1 passive neighbours. Time = from just before the injector's first \
write until every monitor holds all routes. \"Session setup\" is the time to establish the P sessions (not part \
of the time).",
            fanout::ROUTES
        ),
        x_label: "peers P".into(),
        y_label: "time (s)".into(),
        series_label: "daemon".into(),
        xs: plan.peers.iter().map(|p| *p as f64).collect(),
        x_names: plan.peers.iter().map(|p| p.to_string()).collect(),
        x_scale: Scale::Linear,
        y_scale: Scale::Log10,
        series,
        extra_headers: vec!["session setup (s)".into(), "peak RSS (MB)".into()],
        ratio: true,
        notes: Vec::new(),
        png: None,
    }
}

/// Fig. 6(d): memory per unit and CPU per unit.
pub fn fig6d(plan: &Plan) -> Vec<Figure> {
    let daemons: Vec<Dut> = plan
        .daemons
        .iter()
        .copied()
        .filter(|d| *d != Dut::HoldfastdNsr)
        .collect();
    let mut mem: Vec<Series> = Vec::new();
    let mut cpu: Vec<Series> = Vec::new();
    for &d in &daemons {
        let (mut mc, mut cc) = (Vec::new(), Vec::new());
        let mut given_up: Option<String> = None;
        for &k in &plan.units {
            if let Some(why) = &given_up {
                mc.push(Cell::skipped(why));
                cc.push(Cell::skipped(why));
                continue;
            }
            let label = format!("6(d) K={k} {}", d.name());
            let cells = repeat(plan.runs, Slow::Never, &label, plan.started, 3, |_| {
                let r = units::measure(d, k, plan.unit_routes, plan.window, plan.timeout)?;
                Ok(vec![r.rss_mb, r.load_cpu_s, r.cpu_pct])
            });
            let mut c2 = cells[1].clone();
            c2.extra = vec![cells[2].median().map_or("–".into(), num)];
            if cells[0].value.is_none() {
                given_up = Some(format!("skipped (no result at K = {k})"));
            }
            mc.push(cells[0].clone());
            cc.push(c2);
        }
        mem.push(Series {
            name: d.name().into(),
            holdfast: d.is_holdfast(),
            cells: mc,
        });
        cpu.push(Series {
            name: d.name().into(),
            holdfast: d.is_holdfast(),
            cells: cc,
        });
    }
    let xs: Vec<f64> = plan.units.iter().map(|k| *k as f64).collect();
    let x_names: Vec<String> = plan.units.iter().map(|k| k.to_string()).collect();
    let what = format!(
        "K units of one daemon on this host, each in its own network namespace (TENSOR: one container per unit), \
each with a feed session that sends it {} packed routes and a monitor session it re-advertises them to, all \
held by one tester process. After every monitor holds every route and 1 s of rest, the units' processes are \
sampled over a {} s steady window.",
        size_label(plan.unit_routes),
        plan.window.as_secs_f64()
    );
    vec![
        Figure {
            id: "fig6d-memory".into(),
            title: "Fig. 6(d), memory: RSS per unit against units on one host".into(),
            what: format!("{what} RSS per unit = summed `VmRSS` of all units' processes / K."),
            x_label: "units K".into(),
            y_label: "RSS per unit (MB)".into(),
            series_label: "daemon".into(),
            xs: xs.clone(),
            x_names: x_names.clone(),
            x_scale: Scale::Log2,
            y_scale: Scale::Linear,
            series: mem,
            extra_headers: Vec::new(),
            ratio: true,
            notes: Vec::new(),
            png: None,
        },
        Figure {
            id: "fig6d-cpu".into(),
            title: "Fig. 6(d), CPU: CPU per unit against units on one host".into(),
            what: format!(
                "{what} CPU per unit = the run time of every thread of the units' processes \
(`/proc/PID/task/TID/schedstat`, nanoseconds) / K: while learning (from the first write until every monitor held \
every route; the plotted value and the ratio) and at rest (over the steady window, in % of one core; every \
daemon is near idle there, so it is shown but not compared)."
            ),
            x_label: "units K".into(),
            y_label: "CPU per unit while learning (s)".into(),
            series_label: "daemon".into(),
            xs,
            x_names,
            x_scale: Scale::Log2,
            y_scale: Scale::Linear,
            series: cpu,
            extra_headers: vec!["CPU per unit at rest (% of one core)".into()],
            ratio: true,
            notes: Vec::new(),
            png: None,
        },
    ]
}

/// Fig. 5(b).
pub fn fig5b(plan: &Plan) -> Figure {
    let batches = store::batches(plan.store_max_batch);
    let rows = store::run(
        plan.store_size,
        &batches,
        plan.runs,
        plan.store_min_time,
        plan.started,
    );
    let mut notes = vec![
        "No other daemon has a state store, so this figure has no ratio. TENSOR (§4.1, a Redis server on \
another host, 4 KB values) reports about 1 ms to write one record and under 0.5 ms to read one, under 1 ms \
to read about 70 records, under 2 ms to write 10 and about 500 ms to write 10k."
            .to_string(),
    ];
    let series: Vec<Series> = match rows {
        Ok(rows) => store::SERIES
            .iter()
            .enumerate()
            .map(|(k, name)| Series {
                name: (*name).into(),
                holdfast: false,
                cells: rows.iter().map(|r| r[k].clone()).collect(),
            })
            .collect(),
        Err(e) => {
            println!("5(b): {e:#}");
            notes.push(format!("The measurement failed: {e:#}"));
            Vec::new()
        }
    };
    Figure {
        id: "fig5b".into(),
        title: "Fig. 5(b): store write and read time against batch size".into(),
        what: format!(
            "holdfastd's Redis store (`holdfast_nsr_redis::RedisStore`, the code the replicator and a takeover use) \
against a redis-server (no persistence) in a lab namespace, over its loopback; records of {} bytes. \
Time per call of one `write` of B `Received` records (spread over B sessions, or all of one session, merged \
into one append) and of one `load` of B sessions of one record or of one session of B records. Each run is \
the median over ≥ 5 repetitions and ≥ {} ms; median (min–max) over the runs.",
            plan.store_size,
            plan.store_min_time.as_millis()
        ),
        x_label: "records per call B".into(),
        y_label: "time per call (ms)".into(),
        series_label: "operation".into(),
        xs: batches.iter().map(|b| *b as f64).collect(),
        x_names: batches.iter().map(|b| b.to_string()).collect(),
        x_scale: Scale::Log2,
        y_scale: Scale::Log10,
        series,
        extra_headers: vec!["µs per record (median)".into()],
        ratio: false,
        notes,
        png: None,
    }
}

/// Takeover time against table size, with the other daemons' (and
/// holdfastd without NSR's) restart recovery at the same N.
pub fn takeover_fig(plan: &Plan) -> Figure {
    let mut resume = Vec::new();
    let mut tables = Vec::new();
    let others: Vec<Dut> = plan
        .daemons
        .iter()
        .copied()
        .filter(|d| *d != Dut::HoldfastdNsr)
        .collect();
    let mut restart: Vec<Vec<Cell>> = vec![Vec::new(); others.len()];
    let mut given_up: Vec<Option<String>> = vec![None; others.len()];
    for &n in &plan.takeover_sizes {
        let label = format!("takeover {}", size_label(n));
        let cells = repeat(plan.runs, Slow::Never, &label, plan.started, 4, |_| {
            let s = takeover::one_run(n, Kind::Packed, true, takeover::Backup::Cold, plan.timeout)?;
            let t = s
                .takeover
                .ok_or_else(|| anyhow::anyhow!("no takeover measured"))?;
            let tables_ms = t.holdfastd["tables_us"].as_u64().unwrap_or(0) as f64 / 1e3;
            Ok(vec![
                t.resume_ms(),
                tables_ms,
                t.control_ms,
                if t.routes_kept { 1.0 } else { 0.0 },
            ])
        });
        let kept = match cells[3].value {
            Some((_, lo, _)) if lo >= 1.0 => "yes, every run".to_string(),
            Some(_) => "**no** (a run lost routes or got a NOTIFICATION)".to_string(),
            None => "–".to_string(),
        };
        let orch = cells[2].median().map_or("–".into(), num);
        let mut a = cells[0].clone();
        a.extra = vec![orch.clone(), kept.clone()];
        let mut b = cells[1].clone();
        b.extra = vec![orch, kept];
        resume.push(a);
        tables.push(b);
        let w = generate(Kind::Packed, n, INJ_AS, Ipv4Addr::new(198, 18, 1, 1));
        for (di, &d) in others.iter().enumerate() {
            if let Some(why) = &given_up[di] {
                restart[di].push(Cell::skipped(why));
                continue;
            }
            let label = format!("restart {} {}", size_label(n), d.name());
            let c = repeat(
                plan.runs,
                Slow::Wall(plan.slow),
                &label,
                plan.started,
                1,
                |_| Ok(vec![learn::restart_recovery(d, &w, plan.timeout)? * 1e3]),
            );
            let mut c = c[0].clone();
            c.extra = vec!["–".into(), "no: the sessions are reset".into()];
            if c.value.is_none() {
                given_up[di] = Some(format!("skipped (no result at {})", size_label(n)));
            }
            restart[di].push(c);
        }
    }
    let mut series = vec![
        Series {
            name: "holdfastd NSR: BGP resume after takeover".into(),
            holdfast: true,
            cells: resume,
        },
        Series {
            name: "holdfastd NSR: all state resumed".into(),
            holdfast: true,
            cells: tables,
        },
    ];
    for (d, cells) in others.iter().zip(restart) {
        series.push(Series {
            name: format!("{}: restart to full table", d.name()),
            // holdfastd without NSR is a reference line, not an "other daemon".
            holdfast: d.is_holdfast(),
            cells,
        });
    }
    Figure {
        id: "takeover".into(),
        title: "Takeover time against table size".into(),
        what: "holdfastd NSR on learns N packed routes from an injector and re-advertises them to a monitor \
(NSR topology of `holdfast-nsr-bench`: one bridge, Redis on its own host, primary on host a, backup on b); \
the unit runs under the lab's control plane (etcd, three controllers, an agent on a and b, the unit in a \
container on each); once replication is idle the unit is SIGKILLed and the controller has b's agent start \
`holdfastd --takeover` and move the service address. **BGP resume** = from the backup's start until its \
sessions resumed (first KEEPALIVE queued; holdfastd's own account, `show nsr`); **all state resumed** = from the backup's process start until its tables are rebuilt \
and the difference sent (holdfastd's own account, `show nsr`). The peer's session never goes down. \
The other daemons (and holdfastd without NSR) have no takeover: after a failure they restart and their \
sessions are reset. Their line is **restart to full table**: from starting the daemon (failure detection not \
counted), through both sessions re-established (the testers retry every 50 ms) and the N routes learned \
again, until the monitor holds all N again (6(a) topology)."
            .into(),
        x_label: "routes N".into(),
        y_label: "time (ms)".into(),
        series_label: "daemon".into(),
        xs: plan.takeover_sizes.iter().map(|n| *n as f64).collect(),
        x_names: plan.takeover_sizes.iter().map(|n| size_label(*n)).collect(),
        x_scale: Scale::Log10,
        y_scale: Scale::Log10,
        series,
        extra_headers: vec![
            "control plane total, kill → Established (ms)".into(),
            "peer kept its session and every route".into(),
        ],
        ratio: true,
        notes: Vec::new(),
        png: None,
    }
}
