//! Many sessions into one daemon (issue 27): S injector sessions, each
//! sending R routes of its own, learned by the DUT (holdfastd NSR off and
//! on, bird2, frr) and re-advertised to one monitor.
//!
//! ```text
//!   inj: S source addresses 10.65.x.y/16,  ── veth ── DUT 10.65.0.1/16
//!        one tester session each (AS 4250100000 + i),   │  export none to the injectors
//!        R distinct prefixes each                       └─ veth ── mon (tester): every route
//! ```
//!
//! Every daemon exports nothing to the injectors (bird2 `export none`, frr
//! an outbound deny route-map, holdfastd `export = "none"`), so the DUT's
//! only output is the monitor's one copy of the table. Time = from just
//! before the injectors' first write until the monitor holds all S × R
//! routes (the monitor's last change); CPU = the DUT's processes over
//! that window (`schedstat`); peak RSS = their VmHWM at its end.
//!
//! The injectors' addresses share the DUT's connected /16 (as Fig. 6(c)'s
//! monitors do): bird2 and frr take eBGP neighbours on a connected network
//! without multihop settings; the DUT's ARP table holds S entries.

use crate::dut::{Dut, DutConfig, Neighbor, Running};
use crate::util::{connect, connect_many, cpu_secs, peak_rss_kb};
use anyhow::{anyhow, bail, Context, Result};
use holdfast_lab::{Lab, Redis};
use holdfast_tester::workload::{Kind, Workload};
use holdfast_tester::Peer as Tester;
use std::fmt::Write as _;
use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The first injector's AS (injector i has `INJ_AS_BASE + i`).
pub const INJ_AS_BASE: u32 = 4_250_100_000;
/// The monitor's AS.
const MON_AS: u32 = 4_250_099_999;
/// The DUT's address towards the injectors.
const DUT_FEED: Ipv4Addr = Ipv4Addr::new(10, 65, 0, 1);
/// Most sessions one run takes (the DUT's ARP table holds one entry each).
pub const MAX_SESSIONS: usize = 1000;

/// Injector `i`'s address.
pub fn injector_addr(i: usize) -> Ipv4Addr {
    Ipv4Addr::new(10, 65, 1 + (i / 250) as u8, 1 + (i % 250) as u8)
}

/// `sessions` workloads of `per` distinct prefixes each, of `kind`, each
/// with its injector's AS first in the path and its address as next hop.
pub fn feeds(kind: Kind, sessions: usize, per: usize) -> Vec<Workload> {
    crate::many::split_workload_for(kind, sessions, per, INJ_AS_BASE, injector_addr)
}

/// One run's figures.
#[derive(Debug, Clone)]
pub struct ManyLearn {
    /// Seconds from the first write until the monitor held every route.
    pub secs: f64,
    /// The DUT's CPU seconds over that window.
    pub cpu_secs: f64,
    /// The DUT's peak RSS (kB) at its end.
    pub rss_kb: u64,
    /// Seconds to establish the S sessions (set-up, not measured).
    pub setup_secs: f64,
}

/// One measurement of `dut` learning `sessions` × `per` routes of `kind`.
/// A run over `timeout` is an error starting with "timeout".
pub fn measure(
    dut: Dut,
    sessions: usize,
    per: usize,
    kind: Kind,
    timeout: Duration,
) -> Result<ManyLearn> {
    if sessions == 0 || sessions > MAX_SESSIONS {
        bail!("sessions must be 1..={MAX_SESSIONS}");
    }
    let work = feeds(kind, sessions, per);
    let total: usize = work
        .iter()
        .map(|w| w.iter().map(|(_, p)| p.len()).sum::<usize>())
        .sum();
    let mut lab = Lab::new(&format!("bench-many-{}", dut.key()))?;
    let inj_h = lab.host("inj")?;
    let dut_h = lab.host("dut")?;
    let mon_h = lab.host("mon")?;
    let l1 = lab.link_auto(inj_h, dut_h)?;
    let l2 = lab.link_auto(dut_h, mon_h)?;
    let (inj_if, dut_if) = {
        let x = lab.link_info(l1);
        (x.if_a.clone(), x.if_b.clone())
    };
    let (dut2, mon_ip) = {
        let p = lab.link_info(l2).v4.expect("link_auto assigns IPv4");
        (p.a, p.b)
    };
    lab.exec_ok(
        dut_h,
        &[
            "ip",
            "addr",
            "add",
            &format!("{DUT_FEED}/16"),
            "dev",
            &dut_if,
        ],
    )?;
    let batch = lab.work_dir().join("injector-addrs.ip");
    let mut b = String::new();
    for i in 0..sessions {
        let _ = writeln!(b, "addr add {}/16 dev {inj_if}", injector_addr(i));
    }
    std::fs::write(&batch, b).context("writing the ip batch")?;
    lab.exec_ok(inj_h, &["ip", "-batch", &batch.to_string_lossy()])?;
    let redis = crate::learn::redis_for(&mut lab, dut, dut_h)?;
    let mut neighbors: Vec<Neighbor> = (0..sessions)
        .map(|i| Neighbor {
            address: IpAddr::V4(injector_addr(i)),
            asn: INJ_AS_BASE + i as u32,
            export: false,
        })
        .collect();
    neighbors.push(Neighbor {
        address: IpAddr::V4(mon_ip),
        asn: MON_AS,
        export: true,
    });
    let cfg = DutConfig {
        neighbors,
        redis: redis.as_ref().map(Redis::url),
        ..DutConfig::default()
    };
    let running = Running::start(&mut lab, dut_h, dut, &cfg)?;
    let result = (|| -> Result<ManyLearn> {
        let inj_ns = lab.netns(inj_h).to_string();
        let mon_ns = lab.netns(mon_h).to_string();
        let monitor = connect(
            &mon_ns,
            IpAddr::V4(dut2),
            IpAddr::V4(mon_ip),
            MON_AS,
            mon_ip,
        )?;
        let setup = Instant::now();
        let mut injectors: Vec<Arc<Tester>> =
            connect_many(&inj_ns, DUT_FEED, sessions, injector_addr, INJ_AS_BASE)?
                .into_iter()
                .map(Arc::new)
                .collect();
        settle(&lab, &running, &inj_ns, &mut injectors)?;
        let setup_secs = setup.elapsed().as_secs_f64();
        // Every stream encoded before the clock starts.
        let streams = crate::many::encode_streams(&work, &injectors);
        drop(work);
        if dut == Dut::HoldfastdNsr {
            running.wait_protected(&lab, Duration::from_secs(60))?;
        }
        let pids = running.pids(&lab);
        let cpu0 = cpu_secs(&pids);
        let t0 = Instant::now();
        let senders = crate::many::spawn_senders(streams);
        let _ = monitor.wait("all routes", timeout, |v| {
            v.routes.len() >= total || v.closed
        });
        let (held, closed, t1) = monitor.view(|v| (v.routes.len(), v.closed, v.last_change));
        let cpu = cpu_secs(&pids) - cpu0;
        let rss_kb = peak_rss_kb(&pids);
        for s in senders {
            s.join().map_err(|_| anyhow!("sender panicked"))??;
        }
        for t in &injectors {
            t.abort();
        }
        monitor.abort();
        if held < total {
            if closed {
                bail!("the DUT closed the monitor session holding {held}/{total} routes");
            }
            bail!("timeout (>{} s, held {held} of {total})", timeout.as_secs());
        }
        let t1 = t1.expect("routes were received");
        Ok(ManyLearn {
            secs: t1.saturating_duration_since(t0).as_secs_f64(),
            cpu_secs: cpu,
            rss_kb,
            setup_secs,
        })
    })();
    running.stop(&mut lab);
    if let Some(r) = redis {
        r.stop(&mut lab);
    }
    lab.teardown();
    result
}

/// Waits (bounded) until the DUT itself counts every injector and the
/// monitor Established, reconnecting an injector whose session it closed:
/// frr, still applying a 1,000-neighbour configuration, can take a
/// passive session up and drop it at once ("No AFI/SAFI activated for
/// peer", the `activate` line not read yet).
fn settle(lab: &Lab, running: &Running, ns: &str, injectors: &mut [Arc<Tester>]) -> Result<()> {
    let want = injectors.len() + 1;
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        for (i, t) in injectors.iter_mut().enumerate() {
            if t.view(|v| v.closed) {
                let ip = injector_addr(i);
                println!(
                    "  note: the DUT closed injector {ip}'s session during set-up: reconnecting it"
                );
                *t = Arc::new(connect(
                    ns,
                    IpAddr::V4(DUT_FEED),
                    IpAddr::V4(ip),
                    INJ_AS_BASE + i as u32,
                    ip,
                )?);
            }
        }
        let have = running.established(lab)?;
        if have >= want && injectors.iter().all(|t| !t.view(|v| v.closed)) {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("the DUT counts {have} of {want} sessions Established after 120 s");
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_injector_gets_its_own_feed() {
        let f = feeds(Kind::Realistic, 7, 300);
        assert_eq!(f.len(), 7);
        for (i, w) in f.iter().enumerate() {
            assert_eq!(w.iter().map(|(_, p)| p.len()).sum::<usize>(), 300);
            assert!(w.iter().all(|(a, _)| a.next_hop == Some(injector_addr(i))));
        }
        assert_eq!(injector_addr(999), Ipv4Addr::new(10, 65, 4, 250));
    }
}
