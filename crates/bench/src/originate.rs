//! Fig. 6(b): the DUT generates N routes and sends them to one peer.
//!
//! ```text
//!   DUT (originates N /24s) ── veth ── monitor (tester)
//! ```
//!
//! The DUT is started with its N routes (holdfastd `[[network]] count = N`,
//! bird2 a static protocol, frr `network` statements through `vtysh -f`,
//! gobgpd `gobgp mrt inject global` of an MRT table) and the bench waits
//! until its own table holds all N, and at least 3 s after its start; only
//! then does the monitor connect. Time =
//! from the monitor's connect (TCP SYN, then OPEN exchange) to the instant its
//! view last changed when it held all N routes.

use crate::dut::{Dut, DutConfig, Neighbor, Running};
use crate::learn::MON_AS;
use crate::util::{connect_timed, peak_rss_kb};
use anyhow::{bail, Result};
use holdfast_lab::Lab;
use std::net::{IpAddr, Ipv4Addr};
use std::time::{Duration, Instant};

/// How long a DUT has been running at least before the monitor connects.
const SETTLE: Duration = Duration::from_secs(3);

/// One completed run.
#[derive(Debug, Clone)]
pub struct OriginRun {
    /// Seconds from the monitor's connect until it held all N routes.
    pub secs: f64,
    /// Seconds from starting the DUT until its own table held all N.
    pub load_secs: f64,
    /// Seconds from the monitor's connect until its first UPDATE.
    pub first_secs: f64,
    /// Peak RSS of the DUT (kB).
    pub rss_kb: u64,
}

/// One measurement of `dut` originating `n` routes.
pub fn measure(dut: Dut, n: usize, timeout: Duration) -> Result<OriginRun> {
    let mut lab = Lab::new(&format!("bench-6b-{}", dut.key()))?;
    let dut_h = lab.host("dut")?;
    let mon_h = lab.host("mon")?;
    let l = lab.link_auto(dut_h, mon_h)?;
    let (dut_ip, mon_ip) = {
        let p = lab.link_info(l).v4.expect("link_auto assigns IPv4");
        (p.a, p.b)
    };
    let cfg = DutConfig {
        neighbors: vec![Neighbor {
            address: IpAddr::V4(mon_ip),
            asn: MON_AS,
            export: true,
        }],
        originate: n,
        next_hop: Some(dut_ip),
        ..DutConfig::default()
    };
    let started = Instant::now();
    let running = Running::start(&mut lab, dut_h, dut, &cfg)?;
    let result = (|| -> Result<OriginRun> {
        running.wait_table(&lab, dut_h, n, timeout)?;
        let load_secs = started.elapsed().as_secs_f64();
        // Every DUT has been up for at least SETTLE (bird2 resolves its
        // neighbours' interfaces at the device protocol's first scan).
        if let Some(rest) = SETTLE.checked_sub(started.elapsed()) {
            std::thread::sleep(rest);
        }
        let mon_ns = lab.netns(mon_h).to_string();
        let (monitor, t0) = connect_timed(
            &mon_ns,
            IpAddr::V4(dut_ip),
            IpAddr::V4(mon_ip),
            MON_AS,
            Ipv4Addr::new(192, 0, 2, 3),
        )?;
        let _ = monitor.wait("all routes", timeout, |v| v.routes.len() >= n || v.closed);
        let (held, closed, t1, first) =
            monitor.view(|v| (v.routes.len(), v.closed, v.last_change, v.first_update));
        let first_secs = first.map_or(0.0, |f| f.saturating_duration_since(t0).as_secs_f64());
        let rss_kb = peak_rss_kb(&running.pids(&lab));
        monitor.abort();
        if held < n {
            if closed {
                bail!("the DUT closed the monitor session holding {held}/{n} routes");
            }
            bail!("timeout (>{} s, held {held})", timeout.as_secs());
        }
        let t1 = t1.expect("routes were received");
        Ok(OriginRun {
            secs: t1.saturating_duration_since(t0).as_secs_f64(),
            load_secs,
            first_secs,
            rss_kb,
        })
    })();
    running.stop(&mut lab);
    lab.teardown();
    result
}
