//! Shared pieces: sizes, statistics over runs, process accounting from
//! `/proc`, tester sessions inside lab namespaces, and the machine description.

use anyhow::{bail, Context, Result};
use holdfast_tester::{netns::in_netns, Config, Peer as Tester};
use std::borrow::Borrow;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::{Duration, Instant};

/// How long a DUT may take to accept the testers' sessions.
pub const SETUP: Duration = Duration::from_secs(60);

/// Parses `10k`, `1M`, `700`.
pub fn parse_size(s: &str) -> Result<usize> {
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

/// Parses a comma-separated list of sizes.
pub fn parse_sizes(s: &str) -> Result<Vec<usize>> {
    s.split(',')
        .filter(|x| !x.trim().is_empty())
        .map(parse_size)
        .collect()
}

/// `10000` → `10k`, `1000000` → `1M`.
pub fn size_label(n: usize) -> String {
    if n >= 1_000_000 && n.is_multiple_of(1_000_000) {
        format!("{}M", n / 1_000_000)
    } else if n >= 1_000 && n.is_multiple_of(1_000) {
        format!("{}k", n / 1_000)
    } else {
        n.to_string()
    }
}

/// Median, min and max of a non-empty slice.
pub fn stats(v: &[f64]) -> (f64, f64, f64) {
    let mut s = v.to_vec();
    s.sort_by(|a, b| a.partial_cmp(b).unwrap_or(std::cmp::Ordering::Equal));
    let med = if s.len() % 2 == 1 {
        s[s.len() / 2]
    } else {
        (s[s.len() / 2 - 1] + s[s.len() / 2]) / 2.0
    };
    (med, s[0], s[s.len() - 1])
}

/// One figure cell: what its runs measured.
#[derive(Debug, Clone, Default)]
pub struct Cell {
    /// Median, min, max of the measured value, when every run completed.
    pub value: Option<(f64, f64, f64)>,
    /// Runs behind `value`.
    pub runs: usize,
    /// Why there is no value (timeout, failure, skipped), or empty.
    pub note: String,
    /// Further columns of the figure's table (already formatted).
    pub extra: Vec<String>,
}

impl Cell {
    /// A cell from the values of runs that all completed, or from the first
    /// problem if one did not.
    pub fn from_runs(values: &[f64], problem: Option<String>) -> Cell {
        match problem {
            Some(note) => Cell {
                value: None,
                runs: values.len(),
                note,
                extra: Vec::new(),
            },
            None if values.is_empty() => Cell {
                note: "no run".into(),
                ..Cell::default()
            },
            None => Cell {
                value: Some(stats(values)),
                runs: values.len(),
                note: String::new(),
                extra: Vec::new(),
            },
        }
    }

    /// A cell that was not measured, with the reason.
    pub fn skipped(why: &str) -> Cell {
        Cell {
            note: why.to_string(),
            ..Cell::default()
        }
    }

    /// The median, if measured.
    pub fn median(&self) -> Option<f64> {
        self.value.map(|v| v.0)
    }
}

/// When a run counts as slow (and is not repeated).
#[derive(Debug, Clone, Copy)]
pub enum Slow {
    /// Every run is repeated.
    Never,
    /// The run's first value (seconds) exceeds this.
    Value(f64),
    /// The run's wall time, setup included, exceeds this many seconds.
    Wall(f64),
}

/// Runs `one` up to `runs` times; each run measures `m` values. Stops
/// after a failure, and after a slow run (that cell then has fewer runs).
/// Returns one cell per value.
pub fn repeat(
    runs: usize,
    slow: Slow,
    label: &str,
    started: Instant,
    m: usize,
    mut one: impl FnMut(usize) -> Result<Vec<f64>>,
) -> Vec<Cell> {
    let mut values: Vec<Vec<f64>> = vec![Vec::new(); m];
    let mut problem = None;
    for r in 0..runs.max(1) {
        let wall = Instant::now();
        match one(r) {
            Ok(v) => {
                let shown: Vec<String> = v.iter().map(|x| format!("{x:.4}")).collect();
                println!(
                    "[{:>7.1}s] {label} run {}: {}",
                    started.elapsed().as_secs_f64(),
                    r + 1,
                    shown.join(" ")
                );
                for (k, x) in v.iter().take(m).enumerate() {
                    values[k].push(*x);
                }
                let is_slow = match slow {
                    Slow::Never => false,
                    Slow::Value(s) => v.first().is_some_and(|x| *x > s),
                    Slow::Wall(s) => wall.elapsed().as_secs_f64() > s,
                };
                if is_slow && r + 1 < runs {
                    println!("  (slower than --slow: not repeated)");
                    break;
                }
            }
            Err(e) => {
                let msg = format!("{e:#}");
                println!(
                    "[{:>7.1}s] {label} run {}: {msg}",
                    started.elapsed().as_secs_f64(),
                    r + 1
                );
                problem = Some(short_problem(&msg));
                break;
            }
        }
    }
    values
        .iter()
        .map(|v| Cell::from_runs(v, problem.clone()))
        .collect()
}

/// A measurement's error turned into a table note: "timeout …" stays as is,
/// anything else becomes "failed: …" (first line, shortened).
pub fn short_problem(msg: &str) -> String {
    let first = msg.lines().next().unwrap_or("").trim();
    let cut: String = first.chars().take(140).collect();
    if cut.starts_with("timeout") {
        cut
    } else {
        format!("failed: {cut}")
    }
}

/// Every pid among `pids` and their descendants (a few passes over `/proc`).
pub fn with_descendants(pids: &[u32]) -> Vec<u32> {
    let mut all: Vec<u32> = pids.to_vec();
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
    all
}

fn status_kb(pid: u32, key: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|st| {
            st.lines()
                .find(|l| l.starts_with(key))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse::<u64>().ok())
        })
        .unwrap_or(0)
}

/// Peak RSS (VmHWM, kB) of `pids` and all their descendants, summed.
pub fn peak_rss_kb(pids: &[u32]) -> u64 {
    with_descendants(pids)
        .iter()
        .map(|p| status_kb(*p, "VmHWM:"))
        .sum()
}

/// Current RSS (VmRSS, kB) of `pids` (no descendants added), summed.
pub fn rss_kb(pids: &[u32]) -> u64 {
    pids.iter().map(|p| status_kb(*p, "VmRSS:")).sum()
}

/// CPU time of `pids` (every thread), summed, in seconds: the run time of
/// each task from `/proc/PID/task/TID/schedstat` (nanoseconds), or, where
/// that is missing, utime + stime from `/proc/PID/stat` (10 ms ticks).
pub fn cpu_secs(pids: &[u32]) -> f64 {
    pids.iter().map(|p| task_cpu_secs(*p)).sum()
}

/// A task's time on a CPU (ns), the first field of its `schedstat`.
fn run_ns(task: &std::path::Path) -> Option<u64> {
    std::fs::read_to_string(task.join("schedstat"))
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

fn task_cpu_secs(pid: u32) -> f64 {
    let mut ns = 0u64;
    let mut found = false;
    if let Ok(rd) = std::fs::read_dir(format!("/proc/{pid}/task")) {
        for v in rd.flatten().filter_map(|e| run_ns(&e.path())) {
            ns += v;
            found = true;
        }
    }
    if found {
        return ns as f64 / 1e9;
    }
    // Clock ticks (USER_HZ): 100 on Linux.
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|stat| {
            let rp = stat.rfind(')')?;
            let f: Vec<&str> = stat[rp + 2..].split_whitespace().collect();
            // After the command: state(0) ppid(1) ... utime(11) stime(12).
            let u: f64 = f.get(11)?.parse().ok()?;
            let s: f64 = f.get(12)?.parse().ok()?;
            Some((u + s) / 100.0)
        })
        .unwrap_or(0.0)
}

/// CPU seconds of each thread of `pid` (`schedstat`), summed per thread
/// name (`comm`): where a process's time goes.
pub fn thread_cpu(pid: u32) -> std::collections::BTreeMap<String, f64> {
    let mut by_name = std::collections::BTreeMap::new();
    let Ok(rd) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return by_name;
    };
    for e in rd.flatten() {
        let comm = std::fs::read_to_string(e.path().join("comm")).unwrap_or_default();
        if let Some(ns) = run_ns(&e.path()) {
            *by_name.entry(comm.trim().to_string()).or_insert(0.0) += ns as f64 / 1e9;
        }
    }
    by_name
}

/// `after` less `before` ([`thread_cpu`]), largest first, threads that
/// took under 10 ms left out.
pub fn thread_cpu_since(
    after: &std::collections::BTreeMap<String, f64>,
    before: &std::collections::BTreeMap<String, f64>,
) -> Vec<(String, f64)> {
    let mut d: Vec<(String, f64)> = after
        .iter()
        .map(|(k, v)| (k.clone(), v - before.get(k).copied().unwrap_or(0.0)))
        .filter(|(_, v)| *v >= 0.01)
        .collect();
    d.sort_by(|a, b| b.1.total_cmp(&a.1));
    d
}

/// The host's idle CPU seconds so far, every core summed (`/proc/stat`:
/// idle and iowait, in USER_HZ ticks of 10 ms).
pub fn host_idle_secs() -> f64 {
    std::fs::read_to_string("/proc/stat")
        .ok()
        .and_then(|s| {
            let f: Vec<f64> = s
                .lines()
                .next()?
                .split_whitespace()
                .skip(1)
                .filter_map(|x| x.parse().ok())
                .collect();
            Some((f.get(3)? + f.get(4)?) / 100.0)
        })
        .unwrap_or(0.0)
}

/// Connects a tester session from `local` (inside `netns`) to `dut`, retrying
/// every 50 ms while the DUT is not yet accepting (bounded: `SETUP`). Returns the session
/// and the instant its successful attempt started.
pub fn connect_timed(
    netns: &str,
    dut: IpAddr,
    local: IpAddr,
    asn: u32,
    id: Ipv4Addr,
) -> Result<(Tester, Instant)> {
    let deadline = Instant::now() + SETUP;
    let mut last = String::new();
    for _ in 0..1200 {
        if Instant::now() > deadline {
            break;
        }
        let mut cfg = Config::new(asn, id);
        cfg.families = vec![holdfast_wire::Family::IPV4_UNICAST];
        cfg.hold_time = 240;
        let t0 = Instant::now();
        let r = in_netns(netns, move || {
            Tester::connect(
                SocketAddr::new(dut, 179),
                Some(local),
                &cfg,
                Duration::from_secs(10),
            )
        })?;
        match r {
            Ok(p) => return Ok((p, t0)),
            Err(e) => last = e.to_string(),
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    bail!("tester {local} could not establish with {dut}: {last}")
}

/// [`connect_timed`] without the instant.
pub fn connect(netns: &str, dut: IpAddr, local: IpAddr, asn: u32, id: Ipv4Addr) -> Result<Tester> {
    connect_timed(netns, dut, local, asn, id).map(|(p, _)| p)
}

/// `n` tester sessions from `netns` to `dut`, session `i` from `addr(i)` in
/// AS `as_base + i`, established from four threads (each a quarter of
/// them, bounded by the set-up time each); in session order. On an error
/// the sessions already up are aborted.
pub fn connect_many(
    netns: &str,
    dut: Ipv4Addr,
    n: usize,
    addr: fn(usize) -> Ipv4Addr,
    as_base: u32,
) -> Result<Vec<Tester>> {
    const THREADS: usize = 4;
    let handles: Vec<_> = (0..THREADS)
        .map(|t| {
            let ns = netns.to_string();
            std::thread::spawn(move || -> Result<Vec<(usize, Tester)>> {
                let mut v = Vec::new();
                for i in (t..n).step_by(THREADS) {
                    let ip = addr(i);
                    let peer =
                        connect(&ns, IpAddr::V4(dut), IpAddr::V4(ip), as_base + i as u32, ip)?;
                    v.push((i, peer));
                }
                Ok(v)
            })
        })
        .collect();
    let mut all: Vec<(usize, Tester)> = Vec::with_capacity(n);
    let mut first_err = None;
    for h in handles {
        match h
            .join()
            .map_err(|_| anyhow::anyhow!("connect thread panicked"))?
        {
            Ok(v) => all.extend(v),
            Err(e) => {
                first_err.get_or_insert(e);
            }
        }
    }
    if let Some(e) = first_err {
        for (_, t) in &all {
            t.abort();
        }
        return Err(e);
    }
    all.sort_by_key(|(i, _)| *i);
    Ok(all.into_iter().map(|(_, t)| t).collect())
}

/// Removes ANSI colour sequences (`ESC [ ... letter`) from a log.
pub fn strip_ansi(s: &str) -> String {
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

/// The first line a command prints (stdout, else stderr), or `?`.
pub fn cmd_line(cmd: &str, args: &[&str]) -> String {
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

/// The 1-, 5- and 15-minute load averages.
pub fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "?".into())
}

/// CPU, memory, kernel and every daemon's version.
pub fn machine() -> Vec<(String, String)> {
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
        (
            "redis-server".into(),
            cmd_line("redis-server", &["--version"]),
        ),
        ("gnuplot".into(), cmd_line("gnuplot", &["--version"])),
    ]
}

/// Polls every `poll` until each monitor holds `n` routes or has closed, or `deadline`
/// passes; returns how many hold all `n`.
pub fn wait_all_hold<M: Borrow<Tester>>(
    monitors: &[M],
    n: usize,
    deadline: Instant,
    poll: Duration,
) -> usize {
    let monitors = || monitors.iter().map(Borrow::borrow);
    let held = || {
        monitors()
            .filter(|m: &&Tester| m.route_count() >= n)
            .count()
    };
    while Instant::now() < deadline {
        if monitors().all(|m: &Tester| m.route_count() >= n || m.is_closed()) {
            break;
        }
        std::thread::sleep(poll);
    }
    held()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_round_trip() {
        assert_eq!(parse_size("10k").unwrap(), 10_000);
        assert_eq!(parse_size("1M").unwrap(), 1_000_000);
        assert_eq!(parse_size("700").unwrap(), 700);
        assert_eq!(size_label(500_000), "500k");
        assert_eq!(size_label(700), "700");
        assert_eq!(size_label(2_000_000), "2M");
    }

    #[test]
    fn thread_cpu_counts_this_process_by_thread_name() {
        let before = thread_cpu(std::process::id());
        let t = Instant::now();
        let mut x = 0u64;
        while t.elapsed() < Duration::from_millis(50) {
            x = std::hint::black_box(x.wrapping_add(1));
        }
        let d = thread_cpu_since(&thread_cpu(std::process::id()), &before);
        let me = std::thread::current()
            .name()
            .unwrap_or_default()
            .to_string();
        // The kernel's comm is at most 15 bytes of the name.
        let comm: String = me.chars().take(15).collect();
        let mine = d.iter().find(|(n, _)| *n == comm).map(|(_, s)| *s);
        assert!(mine.is_some_and(|s| s >= 0.03), "{comm}: {d:?}");
        assert!(d.windows(2).all(|w| w[0].1 >= w[1].1), "{d:?}");
        assert!(host_idle_secs() > 0.0);
    }

    #[test]
    fn median_of_even_and_odd() {
        assert_eq!(stats(&[3.0, 1.0, 2.0]), (2.0, 1.0, 3.0));
        assert_eq!(stats(&[4.0, 1.0, 2.0, 3.0]), (2.5, 1.0, 4.0));
    }
}
