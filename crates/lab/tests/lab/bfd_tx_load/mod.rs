//! A measurement, not a timed test (ignored by default; run it with
//! `cargo test --release -p holdfast-lab --test lab bfd_tx_load:: -- --ignored
//! --nocapture`): the intervals between holdfastd's BFD packets while it
//! learns a full table (issue 10: they must stay within RFC 5880 §6.8.7,
//! 75–100% of the negotiated interval).
//!
//! ```text
//!   injector AS65001                                   frr + bfdd AS65003
//!   [ t1 ] 198.18.1.2 --- veth --- 198.18.1.1 [ hf ] 198.18.2.1 --- veth --- 198.18.2.2 [ p ]
//!                                  holdfastd AS65000; BFD with frr at HOLDFAST_BFD_MS (100) x 3
//! ```
//!
//! Prints, before and after streaming HOLDFAST_LOAD_ROUTES (1,000,000)
//! routes of the HOLDFAST_LOAD_KIND workload (default `realistic`: many
//! distinct attribute sets, the slow case; `packed` is learned in about
//! 0.3 s) from the injector until they are all in the Loc-RIB: the negotiated TX interval and the p50, p99
//! and maximum gap between holdfastd's packets (`holdfast show bfd`,
//! measured by the BFD thread when each packet leaves), and frr's view
//! (status, uptime, session-down counter). It fails only if the load or
//! the lab does.

use crate::robust_common;

use holdfast_api::{BfdSessionInfo, Body, Request};
use holdfast_lab::{
    skip_unless_ready, wait_until, Frr, Holdfastd, NeighborSpec, Peer, PeerKind, PeerSpec,
};
use holdfast_tester::workload::{generate, prefix_count, Kind};
use robust_common::*;
use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;
use std::time::{Duration, Instant};

const T: Duration = Duration::from_secs(30);

fn env_num(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.replace('_', "").parse().ok())
        .unwrap_or(default)
}

fn show_bfd(hf: &Holdfastd) -> Vec<BfdSessionInfo> {
    match hf.request(&Request::ShowBfd) {
        Ok(Body::Bfd(v)) => v,
        other => panic!("show bfd: {other:?}"),
    }
}

fn report(what: &str, b: &BfdSessionInfo) {
    let ms = |us: u64| us as f64 / 1000.0;
    println!(
        "{what}: state {} negotiated TX {:.1} ms; gaps p50 {:.1} ms ({:.0}%), p99 {:.1} ms ({:.0}%), max {:.1} ms ({:.0}%); packets out {}",
        b.state,
        ms(b.tx_interval_us),
        ms(b.tx_gap_p50_us),
        100.0 * b.tx_gap_p50_us as f64 / b.tx_interval_us.max(1) as f64,
        ms(b.tx_gap_p99_us),
        100.0 * b.tx_gap_p99_us as f64 / b.tx_interval_us.max(1) as f64,
        ms(b.tx_gap_max_us),
        100.0 * b.tx_gap_max_us as f64 / b.tx_interval_us.max(1) as f64,
        b.packets_out
    );
}

#[test]
#[ignore = "a measurement: run with --ignored --nocapture"]
fn bfd_tx_interval_under_full_table_load() {
    if skip_unless_ready(&[PeerKind::Frr]) {
        return;
    }
    let n = env_num("HOLDFAST_LOAD_ROUTES", 1_000_000) as usize;
    let bfd_ms = env_num("HOLDFAST_BFD_MS", 100) as u32;
    let mut s = setup("bfd_tx_load", 1);
    let si = s.sides[0].clone();
    let p = s.lab.host("p").expect("host p");
    let l = s.lab.link_auto(s.hf, p).expect("link");
    let v4 = s.lab.link_info(l).v4.expect("v4");
    let (hf_ip, frr_ip): (IpAddr, IpAddr) = (v4.a.into(), v4.b.into());
    let cfg = format!(
        "{}{}[[neighbor]]\naddress = \"{frr_ip}\"\nremote_asn = 65003\nimport = \"all\"\nexport = \"none\"\n\
         [neighbor.bfd]\nmin_rx_ms = {bfd_ms}\nmin_tx_ms = {bfd_ms}\nmultiplier = 3\n",
        global_block(""),
        neighbor_block(&si, 65001, "")
    );
    let d = start_holdfastd(&mut s, &cfg);
    let spec = PeerSpec::new(65003, Ipv4Addr::new(192, 0, 2, 41))
        .neighbor(NeighborSpec::new(hf_ip, 65000).bfd(bfd_ms, bfd_ms, 3));
    let frr = Frr::start(&mut s.lab, p, &spec).expect("frr");
    let inj = Arc::new(connect(&si, &tester_cfg(65001, 1), T));
    d.wait_established(si.ip, T).expect("injector session");
    d.wait_established(frr_ip, Duration::from_secs(60))
        .expect("frr session");
    wait_until(
        "BFD Up at the configured interval",
        T,
        || Ok(show_bfd(&d)),
        |l| {
            l.first()
                .is_some_and(|b| b.state == "Up" && b.tx_interval_us == u64::from(bfd_ms) * 1000)
        },
    )
    .expect("BFD up");
    std::thread::sleep(Duration::from_secs(3));
    report("idle", &show_bfd(&d)[0]);

    let nh = match si.ip {
        IpAddr::V4(a) => a,
        _ => unreachable!(),
    };
    let kind: Kind = std::env::var("HOLDFAST_LOAD_KIND")
        .ok()
        .map(|k| k.parse().expect("HOLDFAST_LOAD_KIND"))
        .unwrap_or(Kind::Realistic);
    let w = generate(kind, n, 65001, nh);
    let n = prefix_count(&w);
    let mut bytes = Vec::new();
    holdfast_tester::encode_routes(&w, &inj.ctx, &mut bytes);
    drop(w);
    // Restart the gap statistics: a reset of the session's figures is a
    // state change, so read the baseline and compare after instead.
    let before = show_bfd(&d)[0].clone();
    let start = Instant::now();
    let sender = {
        let inj = inj.clone();
        std::thread::spawn(move || inj.send_stream(&bytes))
    };
    // Learned = in the Loc-RIB: the RIB thread and its workers are done.
    let summary = wait_until(
        "holdfastd's Loc-RIB holds every route",
        Duration::from_secs(300),
        || d.summary(),
        |s| s.loc_rib_routes.get("default").copied().unwrap_or(0) as usize >= n,
    )
    .expect("load");
    let took = start.elapsed();
    sender.join().expect("sender").expect("stream");
    let after = show_bfd(&d)[0].clone();
    println!(
        "bfd_tx_load: {} routes in the Loc-RIB after {:.2} s; {} BFD packets sent meanwhile",
        summary.loc_rib_routes["default"],
        took.as_secs_f64(),
        after.packets_out - before.packets_out
    );
    report(
        "after the load (gaps since BFD came up, the last 4096)",
        &after,
    );
    let v = frr.bfd_peers(&s.lab).expect("frr");
    println!("frr: {v}");
    let counters = frr.bfd_peer_counters(&s.lab).expect("frr counters");
    println!("frr counters: {counters}");
    drop(inj);
    let mut lab = s.lab;
    d.stop(&mut lab);
    lab.teardown();
}
