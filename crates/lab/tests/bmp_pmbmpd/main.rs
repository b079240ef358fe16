//! BMP (RFC 7854, RFC 8671 Adj-RIB-Out) from holdfastd to a real collector:
//! pmacct's `pmbmpd` (Debian), its messages read from its own JSON log
//! (`bmp_daemon_msglog_file`), against a real BIRD 2 peer.
//!
//! ```text
//!   [ h: holdfastd AS65000 ] 198.18.x.1 ===== link ===== 198.18.x.2 [ p: bird AS65001 ]
//!        |  one IPv4 session, holdfastd active                        [   pmbmpd :1790  ]
//!        +-- BMP over the same link: [[bmp]] address = "198.18.x.2:1790",
//!            statistics_interval_secs = 1, route_monitoring = ["pre-policy", "adj-rib-out"]
//! ```
//!
//! Checked, in pmbmpd's log:
//! * Initiation (`bmp_init`) with holdfastd's sysName;
//! * Peer Up (`peer_up`) for BIRD's session, with both OPENs decoded
//!   (BIRD's BGP ID and ours);
//! * Route Monitoring, pre-policy (`is_post` 0, not `is_out`): BIRD's
//!   prefix with AS path 65001, from the table dump (pmbmpd started after
//!   the session was up would see only that) and an announcement BIRD makes
//!   afterwards, live;
//! * Route Monitoring of the Adj-RIB-Out (`is_out` 1, post-policy):
//!   holdfastd's own networks as sent to BIRD;
//! * Statistics Reports (`stats`) with the Adj-RIB-In count (type 7) = the
//!   routes BIRD sent;
//! * Peer Down (`peer_down`) with reason 1 (local NOTIFICATION) after
//!   `holdfast neighbor reset`, then a new Peer Up when the session returns;
//! * Termination (`bmp_term`) when holdfastd stops.
//!
//! `bmp_across_a_takeover`: the NSR lab of `support/nsr.rs` (bridge, BIRD
//! peer, Redis, holdfastd on `a` then `b` behind the service address),
//! pmbmpd on the Redis host. holdfastd is SIGKILLed and taken over (BIRD
//! sees nothing: `Run::check`); in pmbmpd's log (docs/nsr.md, "What a BMP
//! collector sees of a takeover"):
//! * a second Initiation (the backup's BMP session);
//! * a second Peer Up for BIRD's session, and the backup's table dump
//!   (BIRD's route pre-policy, our networks in its Adj-RIB-Out);
//! * no Peer Down for BIRD's session at any time.

#[path = "../support/interop.rs"]
mod common;
#[path = "../support/nsr.rs"]
mod nsr_common;

use std::path::Path;
use std::time::Duration;

use holdfast_lab::{
    skip_unless_ready, skip_unless_tools, wait_for, Bird, Holdfastd, Lab, Peer, PeerKind, RouteSpec,
};
use serde_json::Value;

const T: Duration = Duration::from_secs(30);

/// Every JSON object of pmbmpd's log.
fn log(file: &Path) -> Vec<Value> {
    std::fs::read_to_string(file)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

fn of<'a>(log: &'a [Value], ty: &str) -> Vec<&'a Value> {
    log.iter().filter(|v| v["bmp_msg_type"] == ty).collect()
}

/// pmbmpd's configuration: listen on `ip:1790`, log every message as JSON
/// to `file`.
fn start_pmbmpd(
    lab: &mut Lab,
    host: holdfast_lab::HostId,
    ip: std::net::Ipv4Addr,
) -> std::path::PathBuf {
    let dir = lab.work_dir().join("pmbmpd");
    std::fs::create_dir_all(&dir).expect("pmbmpd dir");
    let file = dir.join("bmp.json");
    let conf = dir.join("pmbmpd.conf");
    std::fs::write(
        &conf,
        format!(
            "bmp_daemon_ip: {ip}\nbmp_daemon_port: 1790\nbmp_daemon_msglog_file: {}\nbmp_daemon_msglog_output: json\n",
            file.display()
        ),
    )
    .expect("pmbmpd.conf");
    lab.spawn(
        host,
        "pmbmpd",
        &["pmbmpd", "-f", &conf.to_string_lossy()],
        &[],
    )
    .expect("pmbmpd");
    file
}

/// Waits until the log holds an entry that `f` accepts; returns it.
fn wait_entry(file: &Path, what: &str, f: impl Fn(&Value) -> bool) -> Value {
    wait_for(what, T, || Ok(log(file).into_iter().find(|v| f(v)))).unwrap_or_else(|e| {
        panic!(
            "{e}\npmbmpd's log:\n{}",
            std::fs::read_to_string(file).unwrap_or_default()
        )
    })
}

#[test]
fn bmp_to_pmbmpd() {
    if skip_unless_ready(&[PeerKind::Bird]) || skip_unless_tools(&["pmbmpd"]) {
        return;
    }
    let mut lab = Lab::new("bmp_pmbmpd").expect("lab");
    let h = lab.host("h").expect("host h");
    let p = lab.host("p").expect("host p");
    let l = lab.link_auto(h, p).expect("link");
    let v4 = lab.link_info(l).v4.expect("IPv4 on the link");
    let sess = common::Sess::new("s1-v4", (v4.a.into(), v4.b.into()), false);
    let peer = sess.peer;
    let collector = format!("{}:1790", v4.b);

    // The BGP session first, then the collector: the table dump must
    // carry what was learned before pmbmpd was there.
    let mut cfg = common::hf_config(std::slice::from_ref(&sess), &common::networks(), "all");
    cfg += &format!(
        "[[bmp]]\naddress = \"{collector}\"\nstatistics_interval_secs = 1\nroute_monitoring = [\"pre-policy\", \"adj-rib-out\"]\nsys_name = \"edge-h\"\n"
    );
    let hf = Holdfastd::start(&mut lab, h, "holdfastd", &cfg).expect("holdfastd");
    let routes = vec![RouteSpec::new("203.0.113.0/24").med(7)];
    let mut bird = Bird::start(
        &mut lab,
        p,
        &common::peer_spec(std::slice::from_ref(&sess), &routes),
    )
    .expect("bird");
    hf.wait_established(peer, T).expect("Established");
    wait_for("holdfastd holds 203.0.113.0/24", T, || {
        let rib = hf.rib(holdfast_api::RibTable::In, Some(peer))?;
        Ok(rib
            .iter()
            .any(|r| r.prefix == "203.0.113.0/24")
            .then_some(()))
    })
    .expect("BIRD's route");

    let file = start_pmbmpd(&mut lab, p, v4.b);

    // 1. Initiation and Peer Up with both OPENs.
    let init = wait_entry(&file, "a BMP Initiation", |v| v["bmp_msg_type"] == "init");
    assert!(init.to_string().contains("edge-h"), "sysName: {init}");
    let up = wait_entry(&file, "a Peer Up for BIRD", |v| {
        v["bmp_msg_type"] == "peer_up" && v["peer_ip"] == peer.to_string()
    });
    assert_eq!(up["peer_asn"], 65001, "{up}");
    assert_eq!(up["bgp_id"], "192.0.2.200", "BIRD's OPEN: {up}");
    assert_eq!(up["local_ip"], v4.a.to_string(), "{up}");

    // 2. Route Monitoring, pre-policy: the dump, then a live announcement.
    let pre = |prefix: &'static str| {
        move |v: &Value| {
            v["bmp_msg_type"] == "route_monitor"
                && v["peer_ip"] == peer.to_string()
                && v["ip_prefix"] == prefix
                && v["is_post"] != 1
                && v["is_out"] != 1
        }
    };
    let rm = wait_entry(
        &file,
        "BIRD's route, pre-policy (dump)",
        pre("203.0.113.0/24"),
    );
    assert_eq!(rm["as_path"], "65001", "{rm}");
    bird.announce(&lab, &[RouteSpec::new("198.51.100.0/24")])
        .expect("announce");
    wait_entry(
        &file,
        "BIRD's new route, pre-policy (live)",
        pre("198.51.100.0/24"),
    );

    // 3. The Adj-RIB-Out: our networks as sent to BIRD.
    let out = wait_entry(&file, "our network in BIRD's Adj-RIB-Out", |v| {
        v["bmp_msg_type"] == "route_monitor"
            && v["peer_ip"] == peer.to_string()
            && v["ip_prefix"] == common::NET_A[0]
            && v["is_out"] == 1
    });
    assert_eq!(out["as_path"], "65000", "{out}");
    eprintln!("Adj-RIB-Out route_monitor: {out}");

    // 4. Statistics: type 7 (Adj-RIB-In routes) = BIRD's two routes.
    wait_entry(
        &file,
        "a Statistics Report: 2 routes in the Adj-RIB-In",
        |v| {
            v["bmp_msg_type"] == "stats"
                && v["peer_ip"] == peer.to_string()
                && v["counter_type"] == 7
                && v["counter_value"] == 2
        },
    );

    // 5. Peer Down on a reset, with our NOTIFICATION; then Peer Up again.
    let ups_before = of(&log(&file), "peer_up").len();
    hf.cli(&lab, &["neighbor", "reset", &peer.to_string()])
        .expect("holdfast neighbor reset");
    let down = wait_entry(&file, "a Peer Down for BIRD", |v| {
        v["bmp_msg_type"] == "peer_down" && v["peer_ip"] == peer.to_string()
    });
    assert_eq!(down["reason_type"], 1, "local NOTIFICATION: {down}");
    hf.wait_established(peer, T).expect("Established again");
    wait_for("a second Peer Up", T, || {
        Ok((of(&log(&file), "peer_up").len() > ups_before).then_some(()))
    })
    .expect("Peer Up after the reset");

    // 6. Termination when holdfastd stops.
    hf.stop(&mut lab);
    wait_entry(&file, "a BMP Termination", |v| v["bmp_msg_type"] == "term");
    let all = log(&file);
    let mut counts = std::collections::BTreeMap::new();
    for v in &all {
        *counts.entry(v["bmp_msg_type"].to_string()).or_insert(0) += 1;
    }
    eprintln!("pmbmpd logged {} messages: {counts:?}", all.len());
    for ty in [
        "init",
        "peer_up",
        "route_monitor",
        "stats",
        "peer_down",
        "term",
    ] {
        if let Some(v) = of(&all, ty).first() {
            eprintln!("{ty}: {v}");
        }
    }

    bird.stop(&mut lab);
    lab.teardown();
}

#[test]
fn bmp_across_a_takeover() {
    if skip_unless_tools(&["pmbmpd"]) {
        return;
    }
    let Some(mut run) = nsr_common::Run::<Bird>::start_with(
        "bmp_takeover",
        PeerKind::Bird,
        nsr_common::Options::default(),
        |t| {
            format!(
                "[[bmp]]\naddress = \"{}:1790\"\nstatistics_interval_secs = 0\nroute_monitoring = [\"pre-policy\", \"adj-rib-out\"]\n",
                t.redis.v4
            )
        },
    ) else {
        return;
    };
    let (host, ip) = (run.topo().redis.id, run.topo().redis.v4);
    let peer = run.peer_ip().to_string();
    let file = start_pmbmpd(&mut run.lab, host, ip);
    let is_up = |v: &Value| v["bmp_msg_type"] == "peer_up" && v["peer_ip"] == peer;
    wait_entry(&file, "the primary's Peer Up for BIRD", is_up);
    wait_entry(&file, "the primary's dump of our networks", |v| {
        v["bmp_msg_type"] == "route_monitor" && v["peer_ip"] == peer && v["is_out"] == 1
    });
    let before = log(&file);
    let inits = of(&before, "init").len();
    let ups = before.iter().filter(|v| is_up(v)).count();
    let outs = before
        .iter()
        .filter(|v| v["bmp_msg_type"] == "route_monitor" && v["is_out"] == 1)
        .count();

    run.idle_kill();

    wait_for("the backup's Initiation, Peer Up and dump", T, || {
        let now = log(&file);
        let done = of(&now, "init").len() > inits
            && now.iter().filter(|v| is_up(v)).count() > ups
            && now
                .iter()
                .filter(|v| v["bmp_msg_type"] == "route_monitor" && v["is_out"] == 1)
                .count()
                > outs;
        Ok(done.then_some(()))
    })
    .unwrap_or_else(|e| {
        panic!(
            "{e}\npmbmpd's log:\n{}",
            std::fs::read_to_string(&file).unwrap_or_default()
        )
    });
    let after = log(&file);
    let downs: Vec<&Value> = of(&after, "peer_down");
    assert!(
        downs.iter().all(|v| v["peer_ip"] != peer),
        "the collector was told BIRD's session went down: {downs:?}"
    );
    let mut counts = std::collections::BTreeMap::new();
    for v in &after {
        *counts.entry(v["bmp_msg_type"].to_string()).or_insert(0) += 1;
    }
    eprintln!("pmbmpd across the takeover: {counts:?}");
    for v in of(&after, "init") {
        eprintln!("init: {v}");
    }
    run.lab.teardown();
}
