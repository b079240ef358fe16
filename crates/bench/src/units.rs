//! Fig. 6(d): memory and CPU per unit against the number of units on one host.
//!
//! ```text
//!   tester ── bridge ── unit 1 … unit K   (each unit: one DUT in its own namespace,
//!                                          like TENSOR's one container per unit)
//! ```
//!
//! Every unit has two sessions with the one tester process: a feed that sends
//! it `routes` packed routes and a monitor it re-advertises them to. Once
//! every monitor holds every route, the bench waits `SETTLE`, then samples
//! the units' processes over a steady window: RSS per unit = summed `VmRSS`
//! / K; CPU per unit = the threads' run time (`schedstat`) over the window /
//! window / K, in % of one core. The CPU time spent learning the routes (from the first
//! write until all held, per unit) is reported as well.

use crate::dut::{Dut, DutConfig, Neighbor, Running};
use crate::learn::{INJ_AS, MON_AS};
use crate::util::{connect, cpu_secs, rss_kb, wait_all_hold, with_descendants};
use anyhow::{bail, Result};
use holdfast_lab::{IfAddr, Lab};
use holdfast_tester::workload::{generate, prefix_count, Kind};
use holdfast_tester::{encode_routes, Peer as Tester};
use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Pause between the last route held and the steady window.
const SETTLE: Duration = Duration::from_secs(1);

fn unit_ip(i: usize) -> Ipv4Addr {
    Ipv4Addr::new(10, 65, 1, 1 + i as u8)
}
fn feed_ip(i: usize) -> Ipv4Addr {
    Ipv4Addr::new(10, 65, 2, 1 + i as u8)
}
fn mon_ip(i: usize) -> Ipv4Addr {
    Ipv4Addr::new(10, 65, 3, 1 + i as u8)
}

/// One completed run.
#[derive(Debug, Clone)]
pub struct UnitsRun {
    /// RSS per unit (MB) in the steady window.
    pub rss_mb: f64,
    /// CPU per unit in the steady window, % of one core.
    pub cpu_pct: f64,
    /// CPU seconds per unit spent learning and re-advertising the routes.
    pub load_cpu_s: f64,
}

/// One measurement: `k` units of `dut`, `routes` routes each, a steady window of `window`.
pub fn measure(
    dut: Dut,
    k: usize,
    routes: usize,
    window: Duration,
    timeout: Duration,
) -> Result<UnitsRun> {
    if k == 0 || k > 200 {
        bail!("K must be 1..=200");
    }
    if dut == Dut::HoldfastdNsr {
        bail!("6(d) measures holdfastd without NSR");
    }
    let mut lab = Lab::new(&format!("bench-6d-{}", dut.key()))?;
    let t_h = lab.host("tester")?;
    let mut unit_hosts = Vec::new();
    for i in 0..k {
        unit_hosts.push(lab.host(&format!("u{}", i + 1))?);
    }
    let mut tester_addrs = Vec::new();
    for i in 0..k {
        tester_addrs.push(IfAddr::new(feed_ip(i), 16));
        tester_addrs.push(IfAddr::new(mon_ip(i), 16));
    }
    let mut members = vec![(t_h, tester_addrs)];
    for (i, h) in unit_hosts.iter().enumerate() {
        members.push((*h, vec![IfAddr::new(unit_ip(i), 16)]));
    }
    lab.bridge("units", &members)?;
    let mut running: Vec<Running> = Vec::new();
    let result = (|| -> Result<UnitsRun> {
        for (i, h) in unit_hosts.iter().enumerate() {
            let cfg = DutConfig {
                neighbors: vec![
                    Neighbor {
                        address: IpAddr::V4(feed_ip(i)),
                        asn: INJ_AS,
                        export: false,
                    },
                    Neighbor {
                        address: IpAddr::V4(mon_ip(i)),
                        asn: MON_AS,
                        export: true,
                    },
                ],
                unit: format!("hf{}", i + 1),
                ..DutConfig::default()
            };
            running.push(Running::start(&mut lab, *h, dut, &cfg)?);
        }
        let ns = lab.netns(t_h).to_string();
        let mut monitors: Vec<Tester> = Vec::new();
        let mut feeds: Vec<Arc<Tester>> = Vec::new();
        for i in 0..k {
            let u = IpAddr::V4(unit_ip(i));
            monitors.push(connect(&ns, u, IpAddr::V4(mon_ip(i)), MON_AS, mon_ip(i))?);
            feeds.push(Arc::new(connect(
                &ns,
                u,
                IpAddr::V4(feed_ip(i)),
                INJ_AS,
                feed_ip(i),
            )?));
        }
        let w = generate(Kind::Packed, routes, INJ_AS, feed_ip(0));
        let n = prefix_count(&w);
        let streams: Vec<Vec<u8>> = feeds
            .iter()
            .enumerate()
            .map(|(i, f)| {
                let w: Vec<_> = w
                    .iter()
                    .map(|(a, p)| {
                        let mut a = a.clone();
                        a.next_hop = Some(feed_ip(i));
                        (a, p.clone())
                    })
                    .collect();
                let mut out = Vec::new();
                encode_routes(&w, &f.ctx, &mut out);
                out
            })
            .collect();
        let pids: Vec<u32> = with_descendants(
            &running
                .iter()
                .flat_map(|r| r.pids(&lab))
                .collect::<Vec<_>>(),
        );
        std::thread::sleep(Duration::from_millis(500));
        let cpu0 = cpu_secs(&pids);
        let t0 = Instant::now();
        let senders: Vec<_> = feeds
            .iter()
            .zip(streams)
            .map(|(f, s)| {
                let f = f.clone();
                std::thread::spawn(move || f.send_stream(&s).map_err(|e| e.to_string()))
            })
            .collect();
        let held = wait_all_hold(&monitors, n, t0 + timeout, Duration::from_millis(5));
        for s in senders {
            let _ = s.join();
        }
        if held < k {
            for m in monitors.iter().chain(feeds.iter().map(|f| f.as_ref())) {
                m.abort();
            }
            bail!(
                "timeout (>{} s, {held} of {k} units re-advertised all {n})",
                timeout.as_secs()
            );
        }
        let load_cpu = cpu_secs(&pids) - cpu0;
        std::thread::sleep(SETTLE);
        let c1 = cpu_secs(&pids);
        let w0 = Instant::now();
        std::thread::sleep(window);
        let c2 = cpu_secs(&pids);
        let secs = w0.elapsed().as_secs_f64();
        let rss = rss_kb(&pids) as f64 / 1024.0;
        for m in monitors.iter().chain(feeds.iter().map(|f| f.as_ref())) {
            m.abort();
        }
        Ok(UnitsRun {
            rss_mb: rss / k as f64,
            cpu_pct: (c2 - c1) / secs / k as f64 * 100.0,
            load_cpu_s: load_cpu / k as f64,
        })
    })();
    for r in running {
        r.stop(&mut lab);
    }
    lab.teardown();
    result
}
