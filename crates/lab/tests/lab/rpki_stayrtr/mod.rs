//! RPKI origin validation (RFC 6811) with a real RTR cache: Debian's
//! `stayrtr` serving a local VRP JSON file to holdfastd over RTR (RFC 8210),
//! a real BIRD 2 announcing routes and a real FRR receiving holdfastd's
//! exports.
//!
//! ```text
//!   [ p1: bird AS65001 ] 198.18.1.2 ==== link 1 ==== 198.18.1.1 [ h: holdfastd AS65000 ] 198.18.2.1 ==== link 2 ==== 198.18.2.2 [ p2: frr AS65002 ]
//!     announces 10.1.1.0/24, 10.2.0.0/16, 10.3.0.0/16          [    stayrtr 198.18.1.1:8282 ]
//!                                                               [    -cache vrps.json -refresh 1 ]
//!   VRPs: 10.1.0.0/16-24 AS65001 (10.1.1.0/24 valid), 10.2.0.0/16-16 AS65009
//!   (10.2.0.0/16 invalid), nothing for 10.3.0.0/16 (not-found);
//!   holdfastd imports from BIRD with policy "rov": rpki = "invalid" -> reject.
//! ```
//!
//! Checked:
//! * FRR (vtysh) receives the valid and the not-found prefix, not the
//!   invalid one; `holdfast show rpki --json`: the cache connected (RTR
//!   version 1, a session ID), 2 IPv4 VRPs, 1 invalid route; `holdfast show
//!   rib --table in --json`: BIRD's routes valid, invalid, not-found;
//! * the VRP file is rewritten so that AS65001 may originate 10.2.0.0/16;
//!   stayrtr re-reads it and sends a Serial Notify; FRR then receives
//!   10.2.0.0/16, `show rib` has it valid, and `show rpki` reports a
//!   higher serial, no invalid route, one RTR connection;
//! * no session was reset: BIRD's and FRR's sessions (their own CLIs) and
//!   holdfastd's keep their established counters and uptimes.
//!
//! `rpki_across_a_takeover`: the NSR lab of `support/nsr_plane.rs` (bridge, BIRD
//! peer, Redis, the unit on `a` then `b` behind the service address (the
//! controller taking it over), an
//! outbound feed that records every UPDATE holdfastd sends), stayrtr on the
//! Redis host, BIRD's routes imported with the "rov" policy. BIRD
//! announces 10.1.1.0/24 (valid) and 10.2.0.0/16 (invalid, rejected).
//! holdfastd is SIGKILLed and taken over (`Run::check`: no NOTIFICATION,
//! the tables as before). Checked (docs/nsr.md, RPKI):
//! * the backup waited for the cache before rebuilding its tables (its log)
//!   and reports the cache connected and 1 invalid route;
//! * the outbound feed never received 10.2.0.0/16 and no withdrawal at
//!   all across the takeover: the routes kept their state.

use std::net::{IpAddr, Ipv4Addr};
use std::path::Path;
use std::time::{Duration, Instant};

use holdfast_lab::{
    skip_unless_ready, skip_unless_tools, wait_for, Bird, Frr, Holdfastd, Lab, NeighborSpec, Peer,
    PeerKind, PeerSpec, RouteSpec,
};
use serde_json::Value;

const T: Duration = Duration::from_secs(30);

fn vrp_file(path: &Path, as_of_10_2: u32) {
    let json = format!(
        r#"{{"metadata":{{"buildtime":"2026-11-27T00:00:00Z"}},"roas":[
{{"prefix":"10.1.0.0/16","maxLength":24,"asn":"AS65001","ta":"lab"}},
{{"prefix":"10.2.0.0/16","maxLength":16,"asn":"AS{as_of_10_2}","ta":"lab"}}]}}"#
    );
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, json).expect("VRP file");
    std::fs::rename(&tmp, path).expect("VRP file in place");
}

fn frr_prefixes(frr: &Frr, lab: &Lab, hf: IpAddr) -> Vec<String> {
    let mut v: Vec<String> = frr
        .received_routes(lab, hf)
        .unwrap_or_default()
        .into_iter()
        .map(|r| r.prefix)
        .collect();
    v.sort();
    v
}

/// BIRD's routes in holdfastd's Adj-RIB-In with their RPKI state
/// (`show rib --table in --json`).
fn states(hf: &impl nsr_plane::CliJson, lab: &Lab, bird: IpAddr) -> Vec<(String, String)> {
    let v = hf
        .cli_json(
            lab,
            &["show", "rib", "--table", "in", "--peer", &bird.to_string()],
        )
        .expect("holdfast show rib --json");
    let mut out: Vec<(String, String)> = v["ok"]["rib"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|r| {
                    (
                        r["prefix"].as_str().unwrap_or_default().to_string(),
                        r["rpki"].as_str().unwrap_or("none").to_string(),
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    out.sort();
    out
}

fn pairs(v: &[(&str, &str)]) -> Vec<(String, String)> {
    v.iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect()
}

fn rpki(hf: &impl nsr_plane::CliJson, lab: &Lab) -> Value {
    hf.cli_json(lab, &["show", "rpki"])
        .expect("holdfast show rpki --json")["ok"]["rpki"]
        .clone()
}

use crate::{nsr_common, nsr_plane};

/// `[[rpki]]` (the cache on the Redis host) and the "rov" policy.
fn rpki_config(cache: &str) -> String {
    format!(
        "[[rpki]]\naddress = \"{cache}\"\nretry_secs = 1\n\n[[policy]]\nname = \"rov\"\ndefault = \"accept\"\n[[policy.term]]\nname = \"drop-invalid\"\nmatch = {{ rpki = \"invalid\" }}\naction = \"reject\"\n"
    )
}

fn start_stayrtr(lab: &mut Lab, host: holdfast_lab::HostId, ip: Ipv4Addr) -> std::path::PathBuf {
    let dir = lab.work_dir().join("stayrtr");
    std::fs::create_dir_all(&dir).expect("stayrtr dir");
    let vrps = dir.join("vrps.json");
    vrp_file(&vrps, 65009);
    lab.spawn(
        host,
        "stayrtr",
        &[
            "stayrtr",
            "-bind",
            &format!("{ip}:8282"),
            "-cache",
            &vrps.to_string_lossy(),
            "-refresh",
            "1",
            "-checktime=false",
            "-metrics.addr",
            &format!("{ip}:9847"),
        ],
        &[],
    )
    .expect("stayrtr");
    vrps
}

#[test]
fn rpki_across_a_takeover() {
    if skip_unless_tools(&["stayrtr"]) {
        return;
    }
    let Some(mut run) = nsr_plane::Run::<Bird>::start_with(
        "rpki_takeover",
        PeerKind::Bird,
        nsr_common::Options {
            import: Some("rov"),
            ..Default::default()
        },
        &rpki_config(&format!("{}:8282", nsr_plane::STORE_HOST)),
    ) else {
        return;
    };
    let (host, ip) = (run.topo().redis.id, run.topo().redis.v4);
    start_stayrtr(&mut run.plane.lab, host, ip);
    let peer = run.peer_ip();
    wait_for("the primary holds the cache's VRPs", T, || {
        let r = rpki(run.hf(), &run.plane.lab);
        Ok((r["caches"][0]["state"] == "connected" && r["vrps_v4"] == 2).then_some(()))
    })
    .unwrap_or_else(|e| panic!("{e}: {}", rpki(run.hf(), &run.plane.lab)));
    run.peer_announces("10.1.1.0/24");
    run.peer_announces("10.2.0.0/16");
    let p = |s: &str| s.parse::<holdfast_wire::Prefix>().expect("prefix");
    wait_for("the feed holds 10.1.1.0/24 (valid)", T, || {
        Ok(run
            .feed_out_view(|v| v.routes.contains_key(&p("10.1.1.0/24")))
            .then_some(()))
    })
    .expect("valid route exported");
    let want = pairs(&[
        ("10.1.1.0/24", "valid"),
        ("10.2.0.0/16", "invalid"),
        ("203.0.113.0/24", "not-found"),
    ]);
    wait_for("the primary's states", T, || {
        Ok((states(run.hf(), &run.plane.lab, peer) == want).then_some(()))
    })
    .unwrap_or_else(|e| panic!("{e}: {:?}", states(run.hf(), &run.plane.lab, peer)));
    let (announced, withdrawn) = run.feed_out_view(|v| {
        assert!(
            !v.routes.contains_key(&p("10.2.0.0/16")),
            "invalid route exported"
        );
        (v.announced, v.withdrawn)
    });

    run.idle_kill();

    wait_for("the backup holds the cache's VRPs", T, || {
        let r = rpki(run.hf(), &run.plane.lab);
        Ok((r["caches"][0]["state"] == "connected" && r["routes"][0]["invalid"] == 1).then_some(r))
    })
    .unwrap_or_else(|e| panic!("{e}: {}", rpki(run.hf(), &run.plane.lab)));
    // `check` has the peer send fresh routes too: compare BIRD's three.
    let mut kept = states(run.hf(), &run.plane.lab, peer);
    kept.retain(|r| want.iter().any(|w| w.0 == r.0));
    assert_eq!(kept, want, "the backup's states");
    // A barrier instead of a pause: a fresh valid route from the peer,
    // exported after the backup's rebuild on the same session, reaches the
    // feed only after anything the rebuild sent.
    run.peer_announces("10.1.9.0/24");
    wait_for(
        "the feed holds a fresh route sent after the takeover",
        T,
        || {
            Ok(run
                .feed_out_view(|v| v.routes.contains_key(&p("10.1.9.0/24")))
                .then_some(()))
        },
    )
    .expect("fresh route exported by the backup");
    run.feed_out_view(|v| {
        assert!(
            !v.routes.contains_key(&p("10.2.0.0/16")),
            "the backup exported the invalid route"
        );
        assert!(
            v.routes.contains_key(&p("10.1.1.0/24")),
            "the valid route is gone"
        );
        assert_eq!(
            v.withdrawn, withdrawn,
            "the feed saw withdrawals across the takeover ({} announcements before, {} after)",
            announced, v.announced
        );
        eprintln!(
            "feed across the takeover: announced {} -> {}, withdrawn {} -> {}",
            announced, v.announced, withdrawn, v.withdrawn
        );
    });
    let log = run.hf().log_text();
    let waited = log
        .lines()
        .find(|l| l.contains("RPKI: VRPs received after the takeover"))
        .unwrap_or_else(|| panic!("the backup did not wait for the cache:\n{log}"));
    eprintln!("backup: {waited}");
    run.check("after the cache answered the backup");
    run.plane.lab.teardown();
}

#[test]
fn rpki_with_stayrtr() {
    if skip_unless_ready(&[PeerKind::Bird, PeerKind::Frr]) || skip_unless_tools(&["stayrtr"]) {
        return;
    }
    let mut lab = Lab::new("rpki_stayrtr").expect("lab");
    let h = lab.host("h").expect("host h");
    let p1 = lab.host("p1").expect("host p1");
    let p2 = lab.host("p2").expect("host p2");
    let l1 = lab.link_auto(h, p1).expect("link 1");
    let l2 = lab.link_auto(h, p2).expect("link 2");
    let a1 = lab.link_info(l1).v4.expect("IPv4 on link 1");
    let a2 = lab.link_info(l2).v4.expect("IPv4 on link 2");
    let (hf1, bird_ip): (IpAddr, IpAddr) = (a1.a.into(), a1.b.into());
    let (hf2, frr_ip): (IpAddr, IpAddr) = (a2.a.into(), a2.b.into());

    // The cache, in holdfastd's namespace, on its link-1 address.
    let vrps = start_stayrtr(&mut lab, h, a1.a);
    let cache = format!("{}:8282", a1.a);

    let config = format!(
        r#"[global]
asn = 65000
router_id = "192.0.2.1"
connect_retry = 1

[[rpki]]
address = "{cache}"
retry_secs = 1
refresh_secs = 60
expire_secs = 600

[[policy]]
name = "rov"
default = "accept"
[[policy.term]]
name = "drop-invalid"
match = {{ rpki = "invalid" }}
action = "reject"

[[neighbor]]
address = "{bird_ip}"
remote_asn = 65001
import = "rov"
export = "none"

[[neighbor]]
address = "{frr_ip}"
remote_asn = 65002
import = "none"
export = "all"
"#
    );
    let hf = Holdfastd::start(&mut lab, h, "holdfastd", &config).expect("holdfastd");
    let routes = ["10.1.1.0/24", "10.2.0.0/16", "10.3.0.0/16"];
    let bird_spec = PeerSpec::new(65001, Ipv4Addr::new(192, 0, 2, 11))
        .neighbor(NeighborSpec::new(hf1, 65000).passive())
        .route(RouteSpec::new(routes[0]))
        .route(RouteSpec::new(routes[1]))
        .route(RouteSpec::new(routes[2]));
    let bird = Bird::start(&mut lab, p1, &bird_spec).expect("bird");
    let frr_spec = PeerSpec::new(65002, Ipv4Addr::new(192, 0, 2, 22))
        .neighbor(NeighborSpec::new(hf2, 65000).passive());
    let frr = Frr::start(&mut lab, p2, &frr_spec).expect("frr");
    hf.wait_established(bird_ip, T).expect("BIRD Established");
    hf.wait_established(frr_ip, T).expect("FRR Established");

    // 1. The invalid route is not exported; the other two are.
    let want = vec!["10.1.1.0/24".to_string(), "10.3.0.0/16".to_string()];
    wait_for("FRR holds the valid and not-found routes", T, || {
        let got = frr_prefixes(&frr, &lab, hf2);
        Ok((got == want).then_some(()))
    })
    .unwrap_or_else(|e| panic!("{e}: FRR has {:?}", frr_prefixes(&frr, &lab, hf2)));
    assert_eq!(
        states(&hf, &lab, bird_ip),
        pairs(&[
            ("10.1.1.0/24", "valid"),
            ("10.2.0.0/16", "invalid"),
            ("10.3.0.0/16", "not-found")
        ]),
        "show rib --table in: BIRD's routes and their states"
    );
    // FRR sends holdfastd's exports back (AS loop, rejected): they are
    // received routes too, so the counts hold at least BIRD's.
    let before = rpki(&hf, &lab);
    let c = &before["routes"][0];
    assert_eq!(c["invalid"], 1, "{before}");
    assert!(
        c["valid"].as_u64() >= Some(1) && c["not_found"].as_u64() >= Some(1),
        "{before}"
    );
    let c0 = &before["caches"][0];
    assert_eq!(c0["state"], "connected", "{before}");
    assert_eq!(c0["version"], 1, "{before}");
    assert!(c0["session_id"].is_u64(), "{before}");
    assert_eq!(before["vrps_v4"], 2, "{before}");
    eprintln!("show rpki --json before: {before}");
    // Still not exported a moment later (the state is not a transient).
    assert_eq!(frr_prefixes(&frr, &lab, hf2), want);

    let bird_before = bird
        .session(&lab, hf1)
        .expect("birdc")
        .expect("BIRD's session");
    let frr_before = frr
        .session(&lab, hf2)
        .expect("vtysh")
        .expect("FRR's session");
    let hf_before = (
        hf.neighbor(bird_ip)
            .expect("control")
            .expect("BIRD on holdfastd"),
        hf.neighbor(frr_ip)
            .expect("control")
            .expect("FRR on holdfastd"),
    );
    let serial_before = c0["serial"].as_u64().unwrap_or(0);

    // 2. The cache changes: AS65001 may now originate 10.2.0.0/16.
    let changed = Instant::now();
    vrp_file(&vrps, 65001);
    let all: Vec<String> = routes.iter().map(|s| s.to_string()).collect();
    wait_for("FRR receives 10.2.0.0/16, now valid", T, || {
        Ok((frr_prefixes(&frr, &lab, hf2) == all).then_some(()))
    })
    .unwrap_or_else(|e| {
        panic!(
            "{e}: FRR has {:?}; show rpki: {}",
            frr_prefixes(&frr, &lab, hf2),
            rpki(&hf, &lab)
        )
    });
    let took = changed.elapsed();
    let after = rpki(&hf, &lab);
    eprintln!(
        "VRP file rewritten -> 10.2.0.0/16 at FRR: {} ms; show rpki --json after: {after}",
        took.as_millis()
    );
    assert_eq!(
        states(&hf, &lab, bird_ip),
        pairs(&[
            ("10.1.1.0/24", "valid"),
            ("10.2.0.0/16", "valid"),
            ("10.3.0.0/16", "not-found")
        ]),
        "show rib --table in after the change"
    );
    let c = &after["routes"][0];
    assert_eq!(c["invalid"], 0, "{after}");
    assert!(c["valid"].as_u64() >= Some(2), "{after}");
    assert!(
        after["caches"][0]["serial"].as_u64().unwrap_or(0) > serial_before,
        "the serial moved on: {after}"
    );
    assert_eq!(
        after["caches"][0]["connects"], 1,
        "one RTR connection: {after}"
    );

    // 3. No session was reset, seen by each side.
    let bird_after = bird
        .session(&lab, hf1)
        .expect("birdc")
        .expect("BIRD's session");
    let frr_after = frr
        .session(&lab, hf2)
        .expect("vtysh")
        .expect("FRR's session");
    assert!(bird_after.is_established() && frr_after.is_established());
    assert_eq!(
        (bird_after.established_count, bird_after.dropped_count),
        (bird_before.established_count, bird_before.dropped_count),
        "BIRD: {bird_before:?} -> {bird_after:?}"
    );
    assert_eq!(
        (frr_after.established_count, frr_after.dropped_count),
        (frr_before.established_count, frr_before.dropped_count),
        "FRR: {frr_before:?} -> {frr_after:?}"
    );
    if let (Some(a), Some(b)) = (bird_before.uptime_secs, bird_after.uptime_secs) {
        assert!(b >= a, "BIRD's session uptime went back: {a} -> {b}");
    }
    if let (Some(a), Some(b)) = (frr_before.uptime_secs, frr_after.uptime_secs) {
        assert!(b >= a, "FRR's session uptime went back: {a} -> {b}");
    }
    for (was, addr) in [(&hf_before.0, bird_ip), (&hf_before.1, frr_ip)] {
        let now = hf.neighbor(addr).expect("control").expect("configured");
        assert_eq!(
            (now.established_count, now.dropped_count),
            (was.established_count, was.dropped_count),
            "holdfastd's session with {addr}"
        );
    }
    eprintln!(
        "sessions kept: BIRD {:?}/{:?} established/dropped, FRR {:?}/{:?}",
        bird_after.established_count,
        bird_after.dropped_count,
        frr_after.established_count,
        frr_after.dropped_count
    );
    lab.teardown();
}
