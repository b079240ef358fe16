//! Routes added over the GoBGP API survive takeovers: they are replicated
//! under `[nsr]`, so a backup originates them and withdraws nothing, against
//! FRR (the `nsr_plane` lab: the controller takes the unit over; every
//! holdfastd serves `grpc_listen = 127.0.0.1:50051` in its container).
//!
//! ```text
//!                 bridge `lan` 198.18.0.0/24
//!   [ p ] .20     frr bgpd AS 65001 --- session under test --- service .10 (unit edge-1, AS 65000)
//!   [ redis ] .2  redis-server (the state store)
//!   [ a ] .3      host agent; edge-1's primary; `gobgp global rib add` in its container
//!   [ b ] .4      host agent; edge-1 taken over (`--takeover`), later a standby
//!   [ feed ] .5   raw test peers (idle here)
//!   c1..c3        etcd + holdfast-controller (the plane of `support/nsr_plane.rs`)
//! ```
//!
//! 1. `gobgp global rib add 10.9.0.0/24 nexthop 192.0.2.1 med 10 community
//!    65000:1 -a ipv4` and `10.9.1.0/24` on the primary: frr holds both
//!    (its own CLI), MED 10 on the first.
//! 2. The primary is SIGKILLed and the controller has a cold backup
//!    (`holdfastd --takeover`) take over. frr still holds both routes; `gobgp global rib` on the
//!    new primary lists them; the common checks pass (frr holds exactly our
//!    Adj-RIB-Out, UPDATEs flow both ways, no NOTIFICATION).
//! 3. `gobgp global rib del 10.9.1.0/24` on the new primary: frr withdraws
//!    exactly that one and keeps 10.9.0.0/24.
//! 4. `gobgp global rib add 10.9.2.0/24` there, then a preheated standby
//!    (`"preheated": true` in the placement: the backup's agent runs
//!    `holdfastd --standby`) takes over from it
//!    (SIGKILL): frr still holds 10.9.0.0/24 and 10.9.2.0/24, and the
//!    newest primary lists them.
//! 5. The store is killed (it comes back empty) and `10.9.3.0/24` is added
//!    while it is down (frr gets it); the store comes back, the primary
//!    re-claims it and writes everything anew, then a cold takeover: frr
//!    still holds the three routes.
//!
//! Throughout, frr's session never left Established (frr's CLI sampled every
//! 200 ms: state, uptime, established/dropped counters) and the number of
//! routes it holds from us never went down except for the one delete (two
//! watches, before and after it); the bridge capture holds no UPDATE from
//! the service address that withdraws anything before the delete, and
//! exactly one withdrawn prefix after it; no FIN or RST left the service
//! address.
//!
//! Negative controls (docs/notes/nsr-api-routes.md): with the backup's
//! `adopt_stored_routes` disabled, step 2 fails: frr no longer holds the
//! two routes (the backup withdrew them); with the sets not written again
//! on re-synchronisation, step 5 fails: frr holds none of the three.

use crate::{nsr_common, nsr_plane};

use holdfast_lab::{skip_unless_tools, wait_ok, Frr, HostId, Lab, Peer, PeerKind};
use std::collections::BTreeSet;
use std::time::{Duration, Instant, SystemTime};

const T: Duration = Duration::from_secs(30);
const GRPC: &str = "127.0.0.1:50051";

/// `gobgp -u 127.0.0.1 -p 50051 args…` in `host`; its stdout, or a panic
/// with what it said.
fn gobgp(lab: &Lab, host: HostId, args: &[&str]) -> String {
    let mut cmd = vec!["gobgp", "-u", "127.0.0.1", "-p", "50051"];
    cmd.extend_from_slice(args);
    let t = Instant::now();
    let out = lab
        .exec_timeout(host, &cmd, Duration::from_secs(15))
        .expect("running gobgp");
    if args.get(2).is_some_and(|a| *a == "add" || *a == "del") {
        println!(
            "gobgp {}: {:?} (client start included)",
            args.join(" "),
            t.elapsed()
        );
    }
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    );
    assert!(
        out.status.success(),
        "gobgp {}: {stderr}{stdout}",
        args.join(" ")
    );
    stdout
}

/// The prefixes of `gobgp global rib -a ipv4 -j` on `host`.
fn global_rib(lab: &Lab, host: HostId) -> BTreeSet<String> {
    let out = gobgp(lab, host, &["global", "rib", "-a", "ipv4", "-j"]);
    let v: serde_json::Value = serde_json::from_str(out.trim())
        .unwrap_or_else(|e| panic!("gobgp global rib -j: {e}: {out}"));
    v.as_object()
        .map(|m| m.keys().cloned().collect())
        .unwrap_or_default()
}

/// The prefixes frr holds from us among `of`, by frr's own CLI.
fn held(r: &nsr_plane::Run<Frr>, of: &[&str]) -> Result<BTreeSet<String>, String> {
    let got = r
        .peer()
        .received_routes(&r.plane.lab, r.service_ip())
        .map_err(|e| e.to_string())?;
    Ok(got
        .into_iter()
        .map(|v| v.prefix)
        .filter(|p| of.contains(&p.as_str()))
        .collect())
}

fn wait_held(r: &nsr_plane::Run<Frr>, what: &str, of: &[&str], want: &[&str]) {
    let want: BTreeSet<String> = want.iter().map(|s| s.to_string()).collect();
    wait_ok(what, T, || {
        let h = held(r, of)?;
        (h == want)
            .then_some(())
            .ok_or(format!("frr holds {h:?}, want {want:?}"))
    })
    .unwrap_or_else(|e| panic!("{e}"));
}

/// Per capture file, the prefixes withdrawn by UPDATEs from the service
/// address to frr captured at or after `since` (and before `until`).
fn withdrawn(r: &nsr_plane::Run<Frr>, since: SystemTime, until: Option<SystemTime>) -> Vec<u32> {
    let secs = |t: SystemTime| {
        t.duration_since(SystemTime::UNIX_EPOCH)
            .map(|d| d.as_secs_f64())
            .unwrap_or(0.0)
    };
    let (from, to) = (secs(since), until.map_or(f64::MAX, secs));
    r.plane
        .lab
        .pcaps()
        .iter()
        .map(|p| {
            holdfast_lab::pcap::bgp_messages(p, r.service_ip(), r.peer_ip())
                .unwrap_or_else(|e| panic!("reading {}: {e}", p.display()))
                .into_iter()
                .filter(|m| m.kind == 2 && m.at >= from && m.at < to)
                .map(|m| m.withdrawn)
                .sum()
        })
        .collect()
}

#[test]
fn routes_added_over_the_api_survive_takeovers() {
    if skip_unless_tools(&["gobgp", "tcpdump"]) {
        return;
    }
    let t0 = Instant::now();
    let Some(mut r) = nsr_plane::Run::<Frr>::start_with(
        "nsr_api_routes",
        PeerKind::Frr,
        nsr_common::Options::default(),
        &format!("[global]\ngrpc_listen = \"{GRPC}\"\n"),
    ) else {
        return;
    };
    const ALL: [&str; 3] = ["10.9.0.0/24", "10.9.1.0/24", "10.9.2.0/24"];
    const ALL4: [&str; 4] = ["10.9.0.0/24", "10.9.1.0/24", "10.9.2.0/24", "10.9.3.0/24"];
    let since = SystemTime::now();
    let watch = r.watch();

    // 1. Two routes over the API on the primary.
    let a = r.hf().host;
    gobgp(
        &r.plane.lab,
        a,
        &[
            "global",
            "rib",
            "add",
            "10.9.0.0/24",
            "nexthop",
            "192.0.2.1",
            "med",
            "10",
            "community",
            "65000:1",
            "-a",
            "ipv4",
        ],
    );
    gobgp(
        &r.plane.lab,
        a,
        &["global", "rib", "add", "10.9.1.0/24", "-a", "ipv4"],
    );
    wait_held(
        &r,
        "frr holds the two routes added over the API",
        &ALL,
        &ALL[..2],
    );
    let n = r.nsr_status();
    println!(
        "primary's store writes: p50 {} us, p99 {} us",
        n["store_latency_p50_us"], n["store_latency_p99_us"]
    );
    let routes = r
        .peer()
        .received_routes(&r.plane.lab, r.service_ip())
        .expect("frr's routes");
    let first = routes
        .iter()
        .find(|v| v.prefix == "10.9.0.0/24")
        .expect("10.9.0.0/24 at frr");
    assert_eq!(first.med, Some(10), "{first:?}");
    assert_eq!(first.communities, vec![(65000, 1)], "{first:?}");

    // 2. SIGKILL, cold takeover.
    drop(r.kill_and_wait("SIGKILL, cold takeover"));
    wait_ok("the backup's tables are rebuilt", T, || {
        let n = r.nsr_status();
        (n["takeover"]["tables_us"].as_u64().unwrap_or(0) > 0)
            .then_some(())
            .ok_or(n.to_string())
    })
    .unwrap_or_else(|e| panic!("{e}"));
    let b = r.hf().host;
    assert_ne!(a, b, "the backup runs on the other host");
    // The common checks end with a fresh route through to frr: whatever
    // the backup sent before it has reached frr by then.
    r.check("after the cold takeover");
    assert_eq!(
        held(&r, &ALL).expect("frr"),
        ALL[..2].iter().map(|s| s.to_string()).collect(),
        "frr lost a route added over the API across the takeover"
    );
    let rib = global_rib(&r.plane.lab, b);
    for p in &ALL[..2] {
        assert!(
            rib.contains(*p),
            "gobgp global rib on the new primary lacks {p}: {rib:?}"
        );
    }
    nsr_common::stop_watch(watch, "up to the delete");
    let before_delete = SystemTime::now();
    let none = withdrawn(&r, since, Some(before_delete));
    assert!(
        none.iter().all(|n| *n == 0),
        "UPDATEs withdrawing prefixes reached frr before any delete: {none:?} per capture"
    );

    // 3. Delete one over the API on the new primary.
    gobgp(
        &r.plane.lab,
        b,
        &["global", "rib", "del", "10.9.1.0/24", "-a", "ipv4"],
    );
    wait_held(
        &r,
        "frr withdraws exactly the deleted route",
        &ALL,
        &["10.9.0.0/24"],
    );
    let one = wait_ok("the capture holds the withdrawal", T, || {
        let w = withdrawn(&r, before_delete, None);
        (w.iter().any(|n| *n > 0))
            .then_some(w.clone())
            .ok_or(format!("{w:?}"))
    })
    .unwrap_or_else(|e| panic!("{e}"));
    assert!(
        one.iter().all(|n| *n <= 1),
        "more than the deleted prefix withdrawn: {one:?} per capture"
    );
    let after_delete = SystemTime::now();
    let watch = r.watch();

    // 4. Another route, then a preheated standby takes over.
    gobgp(
        &r.plane.lab,
        b,
        &["global", "rib", "add", "10.9.2.0/24", "-a", "ipv4"],
    );
    wait_held(
        &r,
        "frr holds the route added on the new primary",
        &ALL,
        &["10.9.0.0/24", "10.9.2.0/24"],
    );
    let sb = r.start_standby();
    let (old, _) = r.standby_takeover("SIGKILL, preheated standby takes over", sb);
    drop(old);
    let c = r.hf().host;
    r.check("after the standby's takeover");
    assert_eq!(
        held(&r, &ALL).expect("frr"),
        ["10.9.0.0/24", "10.9.2.0/24"]
            .iter()
            .map(|s| s.to_string())
            .collect(),
        "frr lost a route added over the API across the standby's takeover"
    );
    let rib = global_rib(&r.plane.lab, c);
    for p in ["10.9.0.0/24", "10.9.2.0/24"] {
        assert!(
            rib.contains(p),
            "gobgp global rib after the standby's takeover lacks {p}: {rib:?}"
        );
    }
    assert!(!rib.contains("10.9.1.0/24"), "deleted route back: {rib:?}");

    // 5. The store is lost (killed, back empty); a route is added while it
    //    is down; once it is back and everything re-synchronised, a cold
    //    takeover.
    r.store_down();
    let d = r.hf().host;
    gobgp(
        &r.plane.lab,
        d,
        &["global", "rib", "add", "10.9.3.0/24", "-a", "ipv4"],
    );
    wait_held(
        &r,
        "frr holds the route added while the store was down",
        &ALL4,
        &["10.9.0.0/24", "10.9.2.0/24", "10.9.3.0/24"],
    );
    r.store_back();
    drop(r.kill_and_wait("SIGKILL after the store came back empty"));
    r.check("after the takeover that followed the store outage");
    assert_eq!(
        held(&r, &ALL4).expect("frr"),
        ["10.9.0.0/24", "10.9.2.0/24", "10.9.3.0/24"]
            .iter()
            .map(|s| s.to_string())
            .collect(),
        "frr lost a route added over the API across the store outage and takeover"
    );
    nsr_common::stop_watch(watch, "after the delete");
    let none = withdrawn(&r, after_delete, None);
    assert!(
        none.iter().all(|n| *n == 0),
        "UPDATEs withdrawing prefixes reached frr after the delete: {none:?} per capture"
    );
    r.assert_nothing_leaked(since);
    r.print_phases();
    println!("whole scenario: {:?}", t0.elapsed());
}
