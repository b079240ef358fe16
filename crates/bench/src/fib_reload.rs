//! `--fib-reload N`: holdfastd's kernel FIB moved by a SIGHUP reload with N
//! routes installed (the FIB note, "`[kernel]` follows a SIGHUP reload").
//! N packed routes from an injector are installed into table 100 at
//! metric 32 (as `--fib` does); then two reloads, each timed from the
//! SIGHUP to the first dump that finds every route under the new key and
//! none under the old one:
//!
//! 1. `metric = 20`: every route added at 20, then ours at 32 deleted;
//! 2. `protocol = 201` (same table and metric: the same kernel key): every
//!    route replaced in place.
//!
//! A sampler dumps the table in the DUT's namespace as fast as it can
//! during each move and keeps the fewest distinct prefixes it saw with a
//! route of ours (either key): N means no sample found a prefix without a
//! route. A dump of 2N routes takes a while at 1M, so the samples are
//! coarse there.

use crate::dut::{holdfastd_config, Dut, DutConfig, Neighbor, Running};
use crate::fib::{count_until, TABLE};
use crate::learn::INJ_AS;
use crate::util::connect;
use anyhow::{bail, Context, Result};
use holdfast_lab::Lab;
use holdfast_linux::rtnl::codec::{self, messages, parse_route, NLMSG_DONE, RTM_NEWROUTE};
use holdfast_linux::rtnl::RtnlSocket;
use holdfast_tester::encode_routes;
use holdfast_tester::workload::{generate, Kind};
use std::collections::HashSet;
use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// One move.
#[derive(Debug, Clone, Copy)]
pub struct Move {
    /// From the SIGHUP to the first dump with every route under the new key
    /// and none under the old.
    pub secs: f64,
    /// Fewest distinct prefixes with a route of ours in one sample.
    pub min_prefixes: usize,
    pub samples: usize,
}

/// Both moves of one run.
#[derive(Debug, Clone, Copy)]
pub struct ReloadRun {
    pub metric: Move,
    pub protocol: Move,
}

/// (under the new key, under the old key, distinct prefixes with either).
fn sample(
    sock: &RtnlSocket,
    buf: &mut [u8],
    new: (u8, u32),
    old: (u8, u32),
) -> Result<(usize, usize, usize)> {
    let mut req = Vec::new();
    codec::encode_dump(&mut req, 1, codec::AF_INET);
    sock.send(&req)?;
    let (mut n_new, mut n_old) = (0, 0);
    let mut prefixes: HashSet<(IpAddr, u8)> = HashSet::new();
    loop {
        let len = sock.recv(buf, true)?;
        for m in messages(&buf[..len]) {
            if m.ty == NLMSG_DONE {
                return Ok((n_new, n_old, prefixes.len()));
            }
            if m.ty != RTM_NEWROUTE {
                continue;
            }
            let Some(r) = parse_route(m.payload) else {
                continue;
            };
            if r.table != TABLE {
                continue;
            }
            let key = (r.protocol, r.priority);
            if key == new {
                n_new += 1;
            } else if key == old {
                n_old += 1;
            } else {
                continue;
            }
            prefixes.insert((r.dst, r.dst_len));
        }
    }
}

/// Samples the table until every route is under `new` and none under
/// `old` (or `limit`); runs in the DUT's namespace.
fn watch(
    n: usize,
    new: (u8, u32),
    old: (u8, u32),
    limit: Duration,
    started: Arc<AtomicBool>,
) -> Result<(Instant, usize, usize)> {
    let sock = RtnlSocket::open(0, false)?;
    sock.set_buffers(32 << 20, 1 << 16);
    let mut buf = vec![0u8; 1 << 20];
    let t = Instant::now();
    let (mut min, mut samples) = (usize::MAX, 0);
    while !started.load(Ordering::Relaxed) && t.elapsed() < limit {
        std::thread::sleep(Duration::from_millis(1));
    }
    while t.elapsed() < limit {
        let (a, b, distinct) = sample(&sock, &mut buf, new, old)?;
        samples += 1;
        min = min.min(distinct);
        if a >= n && b == 0 {
            return Ok((Instant::now(), min, samples));
        }
    }
    bail!("timeout: the move did not finish in {} s", limit.as_secs())
}

/// One run: N routes installed, then the two moves.
pub fn measure(n: usize, timeout: Duration) -> Result<ReloadRun> {
    let mut lab = Lab::new("bench-fib-reload")?;
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
    let base = holdfastd_config(&cfg);
    let kernel = format!("[kernel]\ntable = {TABLE}\n");
    if !base.contains(&kernel) {
        bail!("holdfastd's bench configuration has no `{kernel}`");
    }
    let running = Running::start(&mut lab, dut_h, Dut::Holdfastd, &cfg)?;
    let result = (|| -> Result<ReloadRun> {
        let hf = running.holdfastd().context("holdfastd")?;
        let dut_ns = lab.netns(dut_h).to_string();
        let inj = connect(
            lab.netns(inj_h),
            IpAddr::V4(dut_ip),
            IpAddr::V4(inj_ip),
            INJ_AS,
            std::net::Ipv4Addr::new(192, 0, 2, 10),
        )?;
        let w = generate(Kind::Packed, n, INJ_AS, inj_ip);
        let mut stream = Vec::new();
        encode_routes(&w, &inj.ctx, &mut stream);
        let stop = Arc::new(AtomicBool::new(false));
        let ns = dut_ns.clone();
        let counter = std::thread::spawn(move || {
            holdfast_linux::netns::in_netns(&ns, move || {
                count_until(n, 179, timeout, stop).map_err(|e| e.to_string())
            })
        });
        inj.send_stream(&stream)?;
        counter
            .join()
            .map_err(|_| anyhow::anyhow!("counter thread panicked"))??
            .map_err(anyhow::Error::msg)?;
        let mut moves = Vec::new();
        for (extra, new, old) in [
            ("metric = 20\n", (179u8, 20u32), (179u8, 32u32)),
            ("metric = 20\nprotocol = 201\n", (201, 20), (179, 20)),
        ] {
            let text = base.replace(&kernel, &format!("{kernel}{extra}"));
            let go = Arc::new(AtomicBool::new(false));
            let go2 = go.clone();
            let ns = dut_ns.clone();
            let watcher = std::thread::spawn(move || {
                holdfast_linux::netns::in_netns(&ns, move || {
                    watch(n, new, old, timeout, go2).map_err(|e| e.to_string())
                })
            });
            let t0 = Instant::now();
            hf.reload(&mut lab, &text)?;
            go.store(true, Ordering::Relaxed);
            let (at, min, samples) = watcher
                .join()
                .map_err(|_| anyhow::anyhow!("watcher thread panicked"))??
                .map_err(anyhow::Error::msg)?;
            moves.push(Move {
                secs: at.saturating_duration_since(t0).as_secs_f64(),
                min_prefixes: min,
                samples,
            });
        }
        inj.abort();
        Ok(ReloadRun {
            metric: moves[0],
            protocol: moves[1],
        })
    })();
    running.stop(&mut lab);
    lab.teardown();
    result
}
