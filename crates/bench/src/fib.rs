//! The kernel FIB figure (issue 13 item 1): N routes from an injector,
//! installed by the DUT into a kernel table of its namespace; holdfastd
//! (`[kernel] table = 100`) against bird2 (its `kernel` protocol into
//! table 100), side by side in one run.
//!
//! The clock starts when the injector starts sending its pre-encoded
//! UPDATEs (packed workload, next hop = the injector, directly connected)
//! and stops at the first look at the table (every 50 ms, the kernel's own
//! count of the table's prefixes in `fib_triestat`, read in the DUT's
//! namespace) that finds N, confirmed by a dump counting the routes of the
//! DUT's protocol. Neither adds a message per route (a notification
//! listener would, and under load it fell behind both daemons).
//!
//! Each run also reports the CPU seconds of the DUT's processes (and of
//! holdfastd's `fib-*` thread) when the count is reached: on a shared
//! machine the wall time follows the share of the cores the DUT gets, the
//! CPU seconds much less.
//!
//! # Known issues
//! - Only holdfastd and bird2 (frr's zebra is not driven by the lab).

use crate::dut::{Dut, DutConfig, Neighbor, Running};
use crate::learn::INJ_AS;
use crate::util::connect;
use anyhow::{bail, Result};
use holdfast_lab::Lab;
use holdfast_linux::rtnl::codec::{self, messages, parse_route, NLMSG_DONE, RTM_NEWROUTE};
use holdfast_linux::rtnl::RtnlSocket;
use holdfast_tester::encode_routes;
use holdfast_tester::workload::{generate, Kind};
use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The kernel table the DUTs install into.
pub const TABLE: u32 = 100;

/// The rtnetlink protocol number of each DUT's routes.
pub fn protocol(dut: Dut) -> u8 {
    match dut {
        Dut::Bird => 12,
        _ => holdfast_config::DEFAULT_KERNEL_PROTOCOL,
    }
}

/// One run.
#[derive(Debug, Clone, Copy)]
pub struct FibRun {
    /// From the first UPDATE sent to the N-th route in the kernel.
    pub secs: f64,
    /// Whether a dump confirmed the count.
    pub confirmed: bool,
    /// CPU seconds (user + system) when the count was reached: holdfastd's
    /// FIB thread (the kernel's insertion work is its system time: it runs
    /// inside `sendmsg`), and every process of the DUT's namespace (the
    /// daemon; bird2 does everything in one thread).
    pub cpu: Option<(Option<f64>, f64)>,
}

/// CPU seconds (utime + stime) of `/proc/PID[/task/TID]/stat`.
fn cpu_secs(stat: &str) -> Option<f64> {
    let s = std::fs::read_to_string(stat).ok()?;
    // Fields after the command (which may hold spaces) in parentheses.
    let rest = &s[s.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks: f64 = f.get(11)?.parse::<f64>().ok()? + f.get(12)?.parse::<f64>().ok()?;
    Some(ticks / 100.0)
}

/// CPU seconds of the processes of network namespace `ns` (`ip netns
/// pids`), and of the thread among them named `fib-*` (holdfastd's FIB).
fn namespace_cpu(ns: &str) -> Option<(Option<f64>, f64)> {
    let out = std::process::Command::new("ip")
        .args(["netns", "pids", ns])
        .output()
        .ok()?;
    let (mut fib, mut total) = (None, 0.0);
    for pid in String::from_utf8_lossy(&out.stdout).split_whitespace() {
        total += cpu_secs(&format!("/proc/{pid}/stat")).unwrap_or(0.0);
        let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
            continue;
        };
        for t in tasks.flatten() {
            let dir = t.path();
            let comm = std::fs::read_to_string(dir.join("comm")).unwrap_or_default();
            if comm.starts_with("fib-") {
                fib = cpu_secs(&dir.join("stat").to_string_lossy());
            }
        }
    }
    Some((fib, total))
}

/// Our count of `protocol`'s routes in `table` by a dump (in the current
/// network namespace).
fn dump_count(sock: &RtnlSocket, table: u32, protocol: u8, buf: &mut [u8]) -> Result<usize> {
    let mut req = Vec::new();
    codec::encode_dump(&mut req, 1, codec::AF_INET);
    sock.send(&req)?;
    let mut n = 0;
    loop {
        let len = sock.recv(buf, true)?;
        for m in messages(&buf[..len]) {
            if m.ty == NLMSG_DONE {
                return Ok(n);
            }
            if m.ty == RTM_NEWROUTE {
                if let Some(r) = parse_route(m.payload) {
                    n += (r.table == table && r.protocol == protocol) as usize;
                }
            }
        }
    }
}

/// Prefixes in kernel table `table` of the calling thread's namespace, from
/// `/proc/thread-self/net/fib_triestat` (the kernel walks its trie: a few
/// milliseconds at 1M, and no message per route).
fn trie_prefixes(table: u32) -> Result<usize> {
    let text = std::fs::read_to_string("/proc/thread-self/net/fib_triestat")?;
    let head = format!("Id {table}:");
    let mut inside = false;
    for l in text.lines() {
        if l.starts_with("Id ") || l.starts_with("Main:") || l.starts_with("Local:") {
            inside = l.trim() == head;
            continue;
        }
        if inside {
            if let Some(v) = l.trim().strip_prefix("Prefixes:") {
                return Ok(v.trim().parse()?);
            }
        }
    }
    Ok(0)
}

/// Polls the DUT's table every [`POLL`] until it holds `n` prefixes;
/// returns the instant of the first poll that saw them, once a dump
/// confirms that `n` routes of `protocol` are there.
pub(crate) fn count_until(
    n: usize,
    protocol: u8,
    limit: Duration,
    stop: Arc<AtomicBool>,
) -> Result<(Instant, bool)> {
    let dumper = RtnlSocket::open(0, false)?;
    dumper.set_buffers(32 << 20, 1 << 16);
    let mut buf = vec![0u8; 1 << 20];
    let started = Instant::now();
    let mut seen = 0;
    while started.elapsed() < limit && !stop.load(Ordering::Relaxed) {
        seen = trie_prefixes(TABLE)?;
        if seen >= n {
            let at = Instant::now();
            let ours = dump_count(&dumper, TABLE, protocol, &mut buf)?;
            if ours >= n {
                return Ok((at, true));
            }
            bail!("table {TABLE} holds {seen} prefixes but {ours} of protocol {protocol}");
        }
        std::thread::sleep(POLL);
    }
    bail!(
        "timeout (>{} s, {seen} routes in table {TABLE})",
        limit.as_secs()
    )
}

/// How often the table is looked at.
const POLL: Duration = Duration::from_millis(50);

/// One measurement of `dut` installing `n` routes.
pub fn measure(dut: Dut, n: usize, timeout: Duration) -> Result<FibRun> {
    if !matches!(dut, Dut::Holdfastd | Dut::Bird) {
        bail!("the FIB figure runs holdfastd and bird2 only");
    }
    let mut lab = Lab::new(&format!("bench-fib-{}", dut.key()))?;
    let inj_h = lab.host("inj")?;
    let dut_h = lab.host("dut")?;
    let l1 = lab.link_auto(inj_h, dut_h)?;
    let (inj_ip, dut_ip) = {
        let p = lab.link_info(l1).v4.expect("link_auto assigns IPv4");
        (p.a, p.b)
    };
    let cfg = DutConfig {
        neighbors: vec![Neighbor {
            address: IpAddr::V4(inj_ip),
            asn: INJ_AS,
            export: false,
        }],
        kernel_table: Some(TABLE),
        ..DutConfig::default()
    };
    let running = Running::start(&mut lab, dut_h, dut, &cfg)?;
    let result = (|| -> Result<FibRun> {
        let inj_ns = lab.netns(inj_h).to_string();
        let dut_ns = lab.netns(dut_h).to_string();
        let inj = connect(
            &inj_ns,
            IpAddr::V4(dut_ip),
            IpAddr::V4(inj_ip),
            INJ_AS,
            std::net::Ipv4Addr::new(192, 0, 2, 10),
        )?;
        let w = generate(Kind::Packed, n, INJ_AS, inj_ip);
        let mut stream = Vec::new();
        encode_routes(&w, &inj.ctx, &mut stream);
        std::thread::sleep(Duration::from_millis(500));
        let stop = Arc::new(AtomicBool::new(false));
        let proto = protocol(dut);
        let stop2 = stop.clone();
        let counter = std::thread::spawn(move || {
            holdfast_linux::netns::in_netns(&dut_ns, move || {
                count_until(n, proto, timeout, stop2).map_err(|e| e.to_string())
            })
        });
        // The counter reads the table before the clock starts.
        std::thread::sleep(Duration::from_millis(300));
        let t0 = Instant::now();
        let sent = inj.send_stream(&stream);
        let got = counter
            .join()
            .map_err(|_| anyhow::anyhow!("counter thread panicked"))?;
        stop.store(true, Ordering::Relaxed);
        let cpu = namespace_cpu(lab.netns(dut_h));
        inj.abort();
        if let Err(e) = sent {
            eprintln!("  note: injector send ended with: {e}");
        }
        let (at, confirmed) = got?.map_err(anyhow::Error::msg)?;
        Ok(FibRun {
            secs: at.saturating_duration_since(t0).as_secs_f64(),
            confirmed,
            cpu,
        })
    })();
    running.stop(&mut lab);
    lab.teardown();
    result
}
