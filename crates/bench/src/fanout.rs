//! Fig. 6(c): update packing. An injector sends 100 routes to the DUT, which
//! re-advertises them to P monitor sessions, all held by this one process.
//!
//! ```text
//!   injector (tester) ── veth ── DUT ── veth ── mon: P source addresses 10.64.x.y/16,
//!                                                one tester session each (AS 4250001000 + i)
//! ```
//!
//! Time = from just before the injector's first write until every monitor
//! holds all 100 routes (the latest of the monitors' last changes).

use crate::dut::{Dut, DutConfig, Neighbor, Running};
use crate::learn::INJ_AS;
use crate::util::{connect, connect_many, peak_rss_kb, wait_all_hold};
use anyhow::{bail, Context, Result};
use holdfast_lab::Lab;
use holdfast_tester::encode_routes;
use holdfast_tester::workload::{generate, prefix_count, Kind};
use std::fmt::Write as _;
use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Routes the injector sends.
pub const ROUTES: usize = 100;
/// The first monitor's AS (monitor i has `MON_AS_BASE + i`).
pub const MON_AS_BASE: u32 = 4_250_001_000;
/// The DUT's address towards the monitors.
const DUT_FAN: Ipv4Addr = Ipv4Addr::new(10, 64, 0, 1);

fn monitor_addr(i: usize) -> Ipv4Addr {
    Ipv4Addr::new(10, 64, 1 + (i / 250) as u8, 1 + (i % 250) as u8)
}

/// One completed run.
#[derive(Debug, Clone)]
pub struct FanoutRun {
    /// Seconds from the injector's first write until every monitor held all routes.
    pub secs: f64,
    /// Seconds to establish the P monitor sessions (setup, not measured time).
    pub setup_secs: f64,
    /// Peak RSS of the DUT (kB).
    pub rss_kb: u64,
}

/// One measurement of `dut` with `p` monitor sessions.
pub fn measure(dut: Dut, p: usize, timeout: Duration) -> Result<FanoutRun> {
    if p == 0 || p > 2000 {
        bail!("P must be 1..=2000");
    }
    let mut lab = Lab::new(&format!("bench-6c-{}", dut.key()))?;
    let inj_h = lab.host("inj")?;
    let dut_h = lab.host("dut")?;
    let mon_h = lab.host("mon")?;
    let l1 = lab.link_auto(inj_h, dut_h)?;
    let l2 = lab.link_auto(dut_h, mon_h)?;
    let (inj_ip, dut1) = {
        let x = lab.link_info(l1).v4.expect("link_auto assigns IPv4");
        (x.a, x.b)
    };
    let (dut_if, mon_if) = {
        let x = lab.link_info(l2);
        (x.if_a.clone(), x.if_b.clone())
    };
    lab.exec_ok(
        dut_h,
        &[
            "ip",
            "addr",
            "add",
            &format!("{DUT_FAN}/16"),
            "dev",
            &dut_if,
        ],
    )?;
    let batch = lab.work_dir().join("monitor-addrs.ip");
    let mut b = String::new();
    for i in 0..p {
        let _ = writeln!(b, "addr add {}/16 dev {mon_if}", monitor_addr(i));
    }
    std::fs::write(&batch, b).context("writing the ip batch")?;
    lab.exec_ok(mon_h, &["ip", "-batch", &batch.to_string_lossy()])?;

    let mut neighbors = vec![Neighbor {
        address: IpAddr::V4(inj_ip),
        asn: INJ_AS,
        export: false,
    }];
    neighbors.extend((0..p).map(|i| Neighbor {
        address: IpAddr::V4(monitor_addr(i)),
        asn: MON_AS_BASE + i as u32,
        export: true,
    }));
    let cfg = DutConfig {
        neighbors,
        ..DutConfig::default()
    };
    let running = Running::start(&mut lab, dut_h, dut, &cfg)?;
    let result = (|| -> Result<FanoutRun> {
        let mon_ns = lab.netns(mon_h).to_string();
        let setup = Instant::now();
        let monitors = connect_many(&mon_ns, DUT_FAN, p, monitor_addr, MON_AS_BASE)?;
        let setup_secs = setup.elapsed().as_secs_f64();
        let inj_ns = lab.netns(inj_h).to_string();
        let injector = Arc::new(connect(
            &inj_ns,
            IpAddr::V4(dut1),
            IpAddr::V4(inj_ip),
            INJ_AS,
            Ipv4Addr::new(192, 0, 2, 9),
        )?);
        let w = generate(Kind::Realistic, ROUTES, INJ_AS, inj_ip);
        let n = prefix_count(&w);
        let mut bytes = Vec::new();
        encode_routes(&w, &injector.ctx, &mut bytes);
        std::thread::sleep(Duration::from_millis(500));
        let t0 = Instant::now();
        injector.send_stream(&bytes)?;
        let held = wait_all_hold(&monitors, n, t0 + timeout, Duration::from_millis(1));
        let last = monitors
            .iter()
            .filter_map(|m| m.view(|v| v.last_change))
            .max();
        let rss_kb = peak_rss_kb(&running.pids(&lab));
        injector.abort();
        for m in &monitors {
            m.abort();
        }
        if held < p {
            bail!(
                "timeout (>{} s, {held} of {p} monitors hold all {n})",
                timeout.as_secs()
            );
        }
        let t1 = last.expect("routes were received");
        Ok(FanoutRun {
            secs: t1.saturating_duration_since(t0).as_secs_f64(),
            setup_secs,
            rss_kb,
        })
    })();
    running.stop(&mut lab);
    lab.teardown();
    result
}
