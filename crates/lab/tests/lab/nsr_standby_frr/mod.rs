//! A preheated standby (`holdfastd --standby`) takes over from a killed
//! primary, against FRR.
//!
//! ```text
//!                 bridge `lan` 198.18.0.0/24
//!   [ p ] .20     frr bgpd AS 65001 --- session under test --- service .10 (unit edge-1, AS 65000)
//!   [ redis ] .2  redis-server (the state store)
//!   [ a ] .3      host agent: edge-1's primary in its container, SIGKILLed
//!   [ b ] .4      host agent: edge-1's standby (`holdfastd --standby`, started
//!                 once `"preheated": true` is in its placement), which the
//!                 controller has take over (`holdfast nsr takeover` by the agent)
//!   [ feed ] .5   raw test peers: AS 65100 -> frr, AS 65200 -> edge-1 (outbound routes)
//!   c1..c3        etcd + holdfast-controller (the plane of `support/nsr_plane.rs`)
//! ```
//!
//! Checks (topology and helpers of `support/nsr_plane.rs`):
//! * the standby follows both stored sessions (`show nsr`: role standby,
//!   2 sessions, caught up) and keeps following: a route frr announces and
//!   50,000 routes from the feed, all sent after the standby started, are
//!   applied by it (its applied log chunks grow) before the primary dies;
//!   with `compact_bytes` at its 64 KiB minimum those routes compact the
//!   replicated logs into snapshots (a new log version), and the standby
//!   reads the compacted sessions anew (its restarts grow);
//! * after SIGKILL of the primary the controller takes the unit over
//!   through the standby (its own process becomes the primary), and
//!   holdfastd reports both sessions taken over with their tables
//!   preheated;
//! * frr's own CLI (sampled every 200 ms for the whole run) shows the
//!   session never left Established, frr logged no NOTIFICATION, the routes
//!   it holds from us never went down (nothing withdrawn), and it holds
//!   exactly our Adj-RIB-Out, including the 50,000 routes;
//! * the new primary's Adj-RIB-In equals what frr advertises, including the
//!   route frr announced after the standby started; new UPDATEs flow both
//!   ways; the capture holds no FIN or RST from the service address;
//! * negative control: the new primary is SIGKILLed and nobody takes over
//!   (the controllers are SIGSTOPped):
//!   the same watch of frr's CLI reports the session leaving Established
//!   (within frr's 9 s hold time).

use crate::{nsr_common, nsr_plane};

use holdfast_api::RibTable;
use holdfast_lab::{Frr, PeerKind};
use std::time::Duration;

/// `[nsr] compact_bytes` (the smallest allowed): the routes sent while the
/// standby follows compact the logs, which it must then read anew.
const COMPACT: u64 = 65536;
/// Routes from the feed through holdfastd to frr while the standby follows.
const LATE_ROUTES: usize = 50_000;

#[test]
fn frr_never_notices_a_preheated_standby_taking_over() {
    let Some(mut r) = nsr_plane::Run::<Frr>::start(
        "nsr_standby_frr",
        PeerKind::Frr,
        nsr_common::Options {
            md5: None,
            compact_bytes: Some(COMPACT),
            bfd: None,
            bfd_auth: None,
            ..nsr_common::Options::default()
        },
    ) else {
        return;
    };
    let watch = r.watch();
    r.check("before the standby");
    let since = std::time::SystemTime::now();
    let sb = r.start_standby();
    let first = r.standby_status(&sb);
    println!("standby following: {first}");

    // Routes sent after the standby started: one from frr, 10,000 through
    // holdfastd to frr. The standby must apply them from the logs.
    let late = "198.51.100.200/32";
    r.peer_announces(late);
    r.outbound_routes("while the standby follows", LATE_ROUTES);
    let peer_ip = r.peer_ip();
    holdfast_lab::wait_ok(
        "the primary learned frr's late route",
        Duration::from_secs(60),
        || {
            let rib = r
                .hf()
                .rib(RibTable::In, Some(peer_ip))
                .map_err(|e| e.to_string())?;
            rib.iter()
                .any(|e| e.prefix == late)
                .then_some(())
                .ok_or(format!("{} routes", rib.len()))
        },
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let caught = r.wait_standby_caught_up(&sb, 2);
    println!("standby caught up: {caught}");
    let n = |v: &serde_json::Value, k: &str| v[k].as_u64().unwrap_or(0);
    assert!(
        n(&caught, "chunks") > n(&first, "chunks"),
        "the standby applied nothing sent after it started: {first} then {caught}"
    );
    assert!(
        n(&caught, "restarts") > n(&first, "restarts"),
        "the logs were compacted ({LATE_ROUTES} routes, compact_bytes {COMPACT}): the standby must have read them anew: {first} then {caught}"
    );

    // The takeover.
    let (_old, t) = r.standby_takeover("SIGKILL, preheated standby takes over", sb);
    assert_eq!(
        t["preheated"].as_u64(),
        Some(2),
        "both sessions must be taken over with preheated tables: {t}"
    );
    let rib = r
        .hf()
        .rib(RibTable::In, Some(peer_ip))
        .expect("show rib in");
    assert!(
        rib.iter().any(|e| e.prefix == late),
        "the route frr sent after the standby started is missing"
    );
    r.check("after the standby took over");
    r.finish(watch, since);

    // Negative control: nobody takes over; frr's hold timer (9 s) ends the
    // session, and the same watch sees it.
    let watch = r.watch();
    std::thread::sleep(Duration::from_millis(500));
    r.kill_primary();
    std::thread::sleep(Duration::from_secs(14));
    let report = watch.stop();
    println!("negative control, frr watch: {}", report.summary());
    assert!(
        report.assert_uninterrupted().is_err(),
        "negative control: frr's session should have left Established: {}",
        report.summary()
    );
}
