//! The kernel FIB figure (issue 13 item 1): N routes from an injector,
//! installed by the DUT into a kernel table of its namespace; holdfastd
//! (`[kernel] table = 100`) against bird2 (its `kernel` protocol into
//! table 100), side by side in one run.
//!
//! The clock starts when the injector starts sending its pre-encoded
//! UPDATEs (packed workload, next hop = the injector, directly connected)
//! and stops at the route notification (`RTMGRP_IPV4_ROUTE`, read in the
//! DUT's namespace) that brings the table's count of the DUT's protocol to
//! N, confirmed by a dump of the table. If the kernel drops notifications
//! for the counter (ENOBUFS), it counts by dumps every 200 ms instead.
//!
//! # Known issues
//! - Only holdfastd and bird2 (frr's zebra is not driven by the lab).

use crate::dut::{Dut, DutConfig, Neighbor, Running};
use crate::learn::INJ_AS;
use crate::util::connect;
use anyhow::{bail, Result};
use holdfast_lab::Lab;
use holdfast_linux::rtnl::codec::{self, messages, parse_route, NLMSG_DONE, RTM_NEWROUTE};
use holdfast_linux::rtnl::{RtnlSocket, RTMGRP_IPV4_ROUTE};
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
    /// Whether the count came from notifications (else from dumps).
    pub by_notifications: bool,
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

/// Counts in the DUT's namespace until `n` routes are there; the instant
/// the count was reached.
fn count_until(
    n: usize,
    protocol: u8,
    limit: Duration,
    stop: Arc<AtomicBool>,
) -> Result<(Instant, bool)> {
    let mon = RtnlSocket::open(RTMGRP_IPV4_ROUTE, true)?;
    mon.set_buffers(512 << 20, 1 << 16);
    let dumper = RtnlSocket::open(0, false)?;
    dumper.set_buffers(32 << 20, 1 << 16);
    let mut buf = vec![0u8; 1 << 20];
    let mut seen = dump_count(&dumper, TABLE, protocol, &mut buf)?;
    let started = Instant::now();
    let mut lost = false;
    let mut last_dump = Instant::now();
    while started.elapsed() < limit && !stop.load(Ordering::Relaxed) {
        if lost {
            if last_dump.elapsed() >= Duration::from_millis(200) {
                last_dump = Instant::now();
                seen = dump_count(&dumper, TABLE, protocol, &mut buf)?;
                if seen >= n {
                    return Ok((Instant::now(), false));
                }
            }
            std::thread::sleep(Duration::from_millis(5));
            continue;
        }
        match mon.recv(&mut buf, false) {
            Ok(len) => {
                for m in messages(&buf[..len]) {
                    if m.ty != RTM_NEWROUTE {
                        continue;
                    }
                    if let Some(r) = parse_route(m.payload) {
                        if r.table == TABLE && r.protocol == protocol {
                            seen += 1;
                        }
                    }
                }
                if seen >= n {
                    let at = Instant::now();
                    // Replacements count twice in notifications: confirm.
                    if dump_count(&dumper, TABLE, protocol, &mut buf)? >= n {
                        return Ok((at, true));
                    }
                    lost = true;
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(1));
            }
            Err(e) if e.raw_os_error() == Some(libc::ENOBUFS) => lost = true,
            Err(e) => return Err(e.into()),
        }
    }
    bail!(
        "timeout (>{} s, {seen} routes in table {TABLE})",
        limit.as_secs()
    )
}

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
        inj.abort();
        if let Err(e) = sent {
            eprintln!("  note: injector send ended with: {e}");
        }
        if let Some(log) = running.hf_log(&lab) {
            for l in log.lines().filter(|l| {
                l.contains("NOTIFICATION")
                    || l.contains("session down")
                    || l.contains("Idle")
                    || l.contains("kernel FIB")
            }) {
                eprintln!("  holdfastd: {}", crate::util::strip_ansi(l));
            }
        }
        let (at, by_notifications) = got?.map_err(anyhow::Error::msg)?;
        Ok(FibRun {
            secs: at.saturating_duration_since(t0).as_secs_f64(),
            by_notifications,
        })
    })();
    running.stop(&mut lab);
    lab.teardown();
    result
}
