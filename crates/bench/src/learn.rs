//! Fig. 6(a): receive, learn and re-advertise N routes; and the worker-scaling
//! table (PBTS/DTS) of holdfastd.
//!
//! ```text
//!   injector (tester) ── veth ── DUT ── veth ── monitor (tester)
//!                                 └── veth ── redis (holdfastd NSR on only)
//! ```

use crate::dut::{Dut, DutConfig, Neighbor, Running};
use crate::util::{connect, cpu_secs, peak_rss_kb, strip_ansi};
use anyhow::{bail, Result};
use holdfast_lab::{HostId, Lab, Redis};
use holdfast_tester::encode_routes;
use holdfast_tester::workload::{prefix_count, Workload};
use std::net::{IpAddr, Ipv4Addr};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

/// The injectors' AS.
pub const INJ_AS: u32 = 4_250_000_001;
/// The monitor's AS.
pub const MON_AS: u32 = 4_250_000_002;

/// holdfastd's own account of a run, from its "RIB batch" debug lines.
#[derive(Debug, Clone, Default)]
pub struct RibStats {
    /// Batches the RIB thread worked on.
    pub batches: u64,
    /// UPDATE messages in them.
    pub msgs: u64,
    /// Time the RIB thread was busy (µs).
    pub busy_us: u64,
    /// Longest batch (µs).
    pub max_us: u64,
    /// NSR table snapshots written (log compactions and re-synchronisations).
    pub snapshots: u64,
}

/// Sums the `RIB batch` debug lines of a holdfastd log.
pub fn rib_stats(log: &str) -> RibStats {
    let mut s = RibStats::default();
    let field = |line: &str, key: &str| -> Option<u64> {
        let i = line.find(key)? + key.len();
        let rest = &line[i..];
        let end = rest
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(rest.len());
        rest[..end].parse().ok()
    };
    let log = strip_ansi(log);
    s.snapshots = log
        .lines()
        .filter(|l| l.contains("session tables snapshotted"))
        .count() as u64;
    for l in log.lines().filter(|l| l.contains("RIB batch")) {
        s.batches += 1;
        s.msgs += field(l, "msgs=").unwrap_or(0);
        let t = field(l, "took_us=").unwrap_or(0);
        s.busy_us += t;
        s.max_us = s.max_us.max(t);
    }
    s
}

/// One completed run.
#[derive(Debug, Clone)]
pub struct LearnRun {
    /// Seconds from the injectors' first write until the monitor held all routes.
    pub secs: f64,
    /// Peak RSS of the DUT's processes (kB).
    pub rss_kb: u64,
    /// CPU time of the DUT's processes from the injectors' first write
    /// until the monitor held all routes (s).
    pub cpu_secs: f64,
    /// holdfastd's RIB thread.
    pub rib: Option<RibStats>,
    /// Routes the DUT sent back to the injectors.
    pub reflected: usize,
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

/// `perf record` of the DUT's processes (with call graphs) while the routes
/// are learned, when `HOLDFAST_BENCH_PERF` names the output file (profiling
/// aid; each run overwrites it).
pub(crate) struct Perf(std::process::Child);

impl Perf {
    fn start(pids: &[u32]) -> Option<Perf> {
        let out = std::env::var("HOLDFAST_BENCH_PERF").ok()?;
        Perf::start_to(pids, &out)
    }

    /// `perf record` of `pids` into `out`; of every CPU when `pids` is
    /// empty.
    pub(crate) fn start_to(pids: &[u32], out: &str) -> Option<Perf> {
        let list: Vec<String> = pids.iter().map(u32::to_string).collect();
        let target = if list.is_empty() {
            vec!["-a".to_string()]
        } else {
            vec!["-p".to_string(), list.join(",")]
        };
        // `HOLDFAST_BENCH_PERF_CALL_GRAPH=dwarf` when frame pointers are missing.
        let graph = std::env::var("HOLDFAST_BENCH_PERF_CALL_GRAPH").unwrap_or_else(|_| "fp".into());
        // `HOLDFAST_BENCH_PERF_FREQ=999` samples less often than perf's default.
        let freq: Vec<String> = std::env::var("HOLDFAST_BENCH_PERF_FREQ")
            .map(|f| vec!["-F".to_string(), f])
            .unwrap_or_default();
        let child = std::process::Command::new("perf")
            .args(["record", "--call-graph", &graph, "-q", "-o", out])
            .args(&freq)
            .args(&target)
            .stdout(std::process::Stdio::null())
            .spawn();
        match child {
            Ok(c) => {
                // perf attaches asynchronously.
                std::thread::sleep(Duration::from_millis(300));
                Some(Perf(c))
            }
            Err(e) => {
                eprintln!("  note: perf record not started: {e}");
                None
            }
        }
    }

    pub(crate) fn stop(mut self) {
        let _ = std::process::Command::new("kill")
            .args(["-INT", &self.0.id().to_string()])
            .status();
        let _ = self.0.wait();
    }
}

/// holdfastd NSR on's store: a redis-server in a host of its own linked to
/// the DUT's; `None` for every other DUT.
pub(crate) fn redis_for(lab: &mut Lab, dut: Dut, dut_h: HostId) -> Result<Option<Redis>> {
    if dut != Dut::HoldfastdNsr {
        return Ok(None);
    }
    let r_h = lab.host("redis")?;
    let l3 = lab.link_auto(dut_h, r_h)?;
    let r_ip = lab.link_info(l3).v4.expect("link_auto assigns IPv4").b;
    Ok(Some(Redis::start(lab, r_h, IpAddr::V4(r_ip), 6379)?))
}

/// One measurement: `feeds.len()` injector peers (each with its workload) →
/// DUT → monitor. A run over `timeout` is an error starting with "timeout".
pub fn measure(
    dut: Dut,
    feeds: &[Workload],
    workers: Option<usize>,
    timeout: Duration,
) -> Result<LearnRun> {
    let n: usize = feeds.iter().map(prefix_count).sum();
    let mut lab = Lab::new(&format!("bench-6a-{}", dut.key()))?;
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
    let redis = redis_for(&mut lab, dut, dut_h)?;
    // Extra injector addresses on the same link (.11, .12, ...).
    let if_a = lab.link_info(l1).if_a.clone();
    let mut inj_ips = vec![inj0];
    for i in 1..feeds.len() {
        let o = inj0.octets();
        let ip = Ipv4Addr::new(o[0], o[1], o[2], 10 + i as u8);
        lab.exec_ok(
            inj_h,
            &["ip", "addr", "add", &format!("{ip}/24"), "dev", &if_a],
        )?;
        inj_ips.push(ip);
    }
    let feed_only = feeds.len() > 1;
    let mut neighbors: Vec<Neighbor> = inj_ips
        .iter()
        .map(|ip| Neighbor {
            address: IpAddr::V4(*ip),
            asn: INJ_AS,
            export: !feed_only,
        })
        .collect();
    neighbors.push(Neighbor {
        address: IpAddr::V4(mon_ip),
        asn: MON_AS,
        export: true,
    });
    let cfg = DutConfig {
        neighbors,
        workers,
        redis: redis.as_ref().map(Redis::url),
        ..DutConfig::default()
    };
    let running = Running::start(&mut lab, dut_h, dut, &cfg)?;
    let result = (|| -> Result<LearnRun> {
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
        // Let the DUT settle (initial End-of-RIB exchange etc.); NSR on: every
        // session replicated and the instance PROTECTED.
        std::thread::sleep(Duration::from_millis(500));
        if dut == Dut::HoldfastdNsr {
            running.wait_protected(&lab, Duration::from_secs(30))?;
        }

        let barrier = Arc::new(Barrier::new(injectors.len() + 1));
        let mut senders = Vec::new();
        for (p, s) in injectors.iter().zip(streams) {
            let (p, b) = (p.clone(), barrier.clone());
            senders.push(std::thread::spawn(move || {
                b.wait();
                p.send_stream(&s).map_err(|e| e.to_string())
            }));
        }
        let pids = running.pids(&lab);
        let perf = Perf::start(&pids);
        let cpu0 = cpu_secs(&pids);
        barrier.wait();
        let t0 = Instant::now();
        let _ = monitor.wait("all routes", timeout, |v| v.routes.len() >= n || v.closed);
        let (held, closed, t1) = monitor.view(|v| (v.routes.len(), v.closed, v.last_change));
        let cpu = cpu_secs(&pids) - cpu0;
        if let Some(p) = perf {
            p.stop();
        }
        let rss_kb = peak_rss_kb(&pids);
        let reflected: usize = injectors.iter().map(|p| p.route_count()).sum();
        for p in &injectors {
            p.abort();
        }
        monitor.abort();
        for s in senders {
            if let Ok(Err(e)) = s.join() {
                if held >= n {
                    eprintln!("  note: injector send ended with: {e}");
                }
            }
        }
        if held < n {
            if closed {
                bail!("the DUT closed the monitor session holding {held}/{n} routes");
            }
            bail!("timeout (>{} s, held {held})", timeout.as_secs());
        }
        let t1 = t1.expect("routes were received");
        Ok(LearnRun {
            secs: t1.saturating_duration_since(t0).as_secs_f64(),
            rss_kb,
            cpu_secs: cpu,
            rib: running.hf_log(&lab).map(|l| rib_stats(&l)),
            reflected,
        })
    })();
    running.stop(&mut lab);
    if let Some(r) = redis {
        r.stop(&mut lab);
    }
    lab.teardown();
    result
}

/// The other daemons' answer to a takeover: a restart. Time from starting
/// the DUT (as after a crash; no failure detection counted) through both
/// sessions established (the testers retry every 50 ms, as a peer's
/// connect-retry would, only faster) and the injector's N routes learned, to
/// the monitor holding all N again.
pub fn restart_recovery(dut: Dut, feed: &Workload, timeout: Duration) -> Result<f64> {
    let n = prefix_count(feed);
    let mut lab = Lab::new(&format!("bench-restart-{}", dut.key()))?;
    let inj_h = lab.host("inj")?;
    let dut_h = lab.host("dut")?;
    let mon_h = lab.host("mon")?;
    let l1 = lab.link_auto(inj_h, dut_h)?;
    let l2 = lab.link_auto(dut_h, mon_h)?;
    let (inj_ip, dut1) = {
        let p = lab.link_info(l1).v4.expect("link_auto assigns IPv4");
        (p.a, p.b)
    };
    let (dut2, mon_ip) = {
        let p = lab.link_info(l2).v4.expect("link_auto assigns IPv4");
        (p.a, p.b)
    };
    let cfg = DutConfig {
        neighbors: vec![
            Neighbor {
                address: IpAddr::V4(inj_ip),
                asn: INJ_AS,
                export: true,
            },
            Neighbor {
                address: IpAddr::V4(mon_ip),
                asn: MON_AS,
                export: true,
            },
        ],
        ..DutConfig::default()
    };
    let w = with_next_hop(feed, inj_ip);
    let t0 = Instant::now();
    let running = Running::start(&mut lab, dut_h, dut, &cfg)?;
    let result = (|| -> Result<f64> {
        let monitor = connect(
            lab.netns(mon_h),
            IpAddr::V4(dut2),
            IpAddr::V4(mon_ip),
            MON_AS,
            Ipv4Addr::new(192, 0, 2, 3),
        )?;
        let injector = connect(
            lab.netns(inj_h),
            IpAddr::V4(dut1),
            IpAddr::V4(inj_ip),
            INJ_AS,
            Ipv4Addr::new(192, 0, 2, 10),
        )?;
        let mut bytes = Vec::new();
        encode_routes(&w, &injector.ctx, &mut bytes);
        let injector = Arc::new(injector);
        let sender = {
            let i = injector.clone();
            std::thread::spawn(move || i.send_stream(&bytes).map_err(|e| e.to_string()))
        };
        let _ = monitor.wait("all routes", timeout, |v| v.routes.len() >= n || v.closed);
        let (held, t1) = monitor.view(|v| (v.routes.len(), v.last_change));
        injector.abort();
        monitor.abort();
        let _ = sender.join();
        if held < n {
            bail!("timeout (>{} s, held {held})", timeout.as_secs());
        }
        Ok(t1
            .expect("routes were received")
            .saturating_duration_since(t0)
            .as_secs_f64())
    })();
    running.stop(&mut lab);
    lab.teardown();
    result
}
