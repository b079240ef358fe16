//! BMP (RFC 7854, RFC 8671 Adj-RIB-Out, RFC 9069 Loc-RIB) from holdfastd
//! to a real collector:
//! pmacct's `pmbmpd` (Debian), its messages read from its own JSON log
//! (`bmp_daemon_msglog_file`), against a real BIRD 2 peer.
//!
//! ```text
//!   [ h: holdfastd AS65000 ] 198.18.x.1 ===== link ===== 198.18.x.2 [ p: bird AS65001 ]
//!        |  one IPv4 session, holdfastd active                        [   pmbmpd :1790  ]
//!        +-- BMP over the same link: [[bmp]] address = "198.18.x.2:1790",
//!            statistics_interval_secs = 1, route_monitoring = all four tables
//!        import policy `bmp-in` on BIRD's session: 100.64.1.0/24 rejected,
//!        every other route LOCAL_PREF 250 and community 65000:4242
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
//! * Route Monitoring, post-policy Adj-RIB-In (`is_post` 1, not `is_out`):
//!   BIRD's prefix with the policy's LOCAL_PREF and community (dump and
//!   live), while its pre-policy copy has neither; the prefix the policy
//!   rejects is in the pre-policy view only;
//! * Loc-RIB (RFC 9069: `is_loc` 1, the Loc-RIB instance peer's own Peer
//!   Up, peer type 3): BIRD's accepted routes as best paths, and our own
//!   networks; not the rejected prefix;
//! * Route Monitoring of the Adj-RIB-Out (`is_out` 1, post-policy):
//!   holdfastd's own networks as sent to BIRD;
//! * Statistics Reports (`stats`) with the Adj-RIB-In count (type 7) = the
//!   routes BIRD sent (the rejected one included: pre-policy), type 0 = the
//!   one prefix the import policy rejected, and type 1 (duplicates);
//! * Peer Down (`peer_down`) with reason 1 (local NOTIFICATION) after
//!   `holdfast neighbor reset`, then a new Peer Up when the session returns;
//! * Termination (`bmp_term`) when holdfastd stops.
//!
//! `bmp_across_a_takeover`: the NSR lab of `support/nsr_plane.rs` (bridge, BIRD
//! peer, Redis, the unit on `a` then `b` behind the service address, the
//! controller taking it over),
//! pmbmpd on the Redis host. holdfastd is SIGKILLed and taken over (BIRD
//! sees nothing: `Run::check`); in pmbmpd's log (docs/nsr.md, "What a BMP
//! collector sees of a takeover"):
//! * a second Initiation (the backup's BMP session);
//! * a second Peer Up for BIRD's session, and the backup's table dump
//!   (BIRD's route pre-policy and post-policy, our networks in its
//!   Adj-RIB-Out), a second Loc-RIB Peer Up and the Loc-RIB dump;
//! * no Peer Down for BIRD's session at any time.

use crate::common;
use crate::{nsr_common, nsr_plane};

use std::path::Path;
use std::time::Duration;

use holdfast_lab::{
    skip_unless_ready, skip_unless_tools, wait_for, Bird, Holdfastd, Lab, Peer, PeerKind, RouteSpec,
};
use serde_json::Value;

const T: Duration = Duration::from_secs(30);

/// The prefix `bmp-in` rejects.
const REJECTED: &str = "100.64.1.0/24";

/// The import policy of BIRD's session: one prefix rejected, every other
/// route tagged (LOCAL_PREF 250, community 65000:4242).
const IMPORT_POLICY: &str = "[[policy]]\nname = \"bmp-in\"\ndefault = \"accept\"\n[[policy.term]]\nname = \"drop\"\nmatch = { prefix = \"100.64.1.0/24\" }\naction = \"reject\"\n[[policy.term]]\nname = \"tag\"\naction = \"accept\"\nset = { local_pref = 250, add_community = \"65000:4242\" }\n";

/// A route as `bmp-in` left it: LOCAL_PREF 250 and community 65000:4242.
fn tagged(v: &Value) -> bool {
    v["local_pref"] == 250
        && v["comms"]
            .as_str()
            .is_some_and(|c| c.contains("65000:4242"))
}

/// A message about the Loc-RIB instance peer (RFC 9069, peer type 3), as
/// pmbmpd logs it.
fn is_loc(v: &Value) -> bool {
    v["is_loc"] == 1 || v["peer_type"] == 3
}

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
    let mut cfg = common::hf_config(std::slice::from_ref(&sess), &common::networks(), "all")
        .replacen("import = \"all\"", "import = \"bmp-in\"", 1);
    cfg += IMPORT_POLICY;
    cfg += &format!(
        "[[bmp]]\naddress = \"{collector}\"\nstatistics_interval_secs = 1\nroute_monitoring = [\"pre-policy\", \"post-policy\", \"loc-rib\", \"adj-rib-out\"]\nsys_name = \"edge-h\"\n"
    );
    let hf = Holdfastd::start(&mut lab, h, "holdfastd", &cfg).expect("holdfastd");
    let routes = vec![
        RouteSpec::new("203.0.113.0/24").med(7),
        RouteSpec::new(REJECTED),
    ];
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
    assert!(!tagged(&rm), "pre-policy: as BIRD sent it: {rm}");
    wait_entry(&file, "the rejected route, pre-policy", pre(REJECTED));

    // 2b. Route Monitoring, post-policy: the policy's attributes.
    let post = |prefix: &'static str| {
        move |v: &Value| {
            v["bmp_msg_type"] == "route_monitor"
                && v["peer_ip"] == peer.to_string()
                && v["ip_prefix"] == prefix
                && v["is_post"] == 1
                && v["is_out"] != 1
                && v["is_loc"] != 1
        }
    };
    let rm = wait_entry(
        &file,
        "BIRD's route, post-policy (dump)",
        post("203.0.113.0/24"),
    );
    assert!(
        tagged(&rm),
        "post-policy: LOCAL_PREF and community set: {rm}"
    );
    eprintln!("post-policy route_monitor: {rm}");

    // 2c. The Loc-RIB (RFC 9069): its Peer Up, BIRD's route as best path.
    let loc_up = wait_entry(&file, "the Loc-RIB instance's Peer Up", |v| {
        v["bmp_msg_type"] == "peer_up" && is_loc(v)
    });
    eprintln!("Loc-RIB peer_up: {loc_up}");
    let loc = |prefix: &'static str| {
        move |v: &Value| {
            v["bmp_msg_type"] == "route_monitor" && is_loc(v) && v["ip_prefix"] == prefix
        }
    };
    let rm = wait_entry(&file, "BIRD's route in the Loc-RIB", loc("203.0.113.0/24"));
    assert!(tagged(&rm), "the Loc-RIB holds the post-policy path: {rm}");
    eprintln!("Loc-RIB route_monitor: {rm}");
    wait_entry(&file, "our network in the Loc-RIB", loc(common::NET_A[0]));

    bird.announce(&lab, &[RouteSpec::new("198.51.100.0/24")])
        .expect("announce");
    wait_entry(
        &file,
        "BIRD's new route, pre-policy (live)",
        pre("198.51.100.0/24"),
    );
    let rm = wait_entry(
        &file,
        "BIRD's new route, post-policy (live)",
        post("198.51.100.0/24"),
    );
    assert!(tagged(&rm), "{rm}");
    wait_entry(
        &file,
        "BIRD's new route in the Loc-RIB (live)",
        loc("198.51.100.0/24"),
    );
    // The rejected route: pre-policy only (its pre-policy copy came
    // before BIRD's later route, so it would be logged by now).
    let all = log(&file);
    let leaked: Vec<&Value> = all
        .iter()
        .filter(|v| v["ip_prefix"] == REJECTED && (v["is_post"] == 1 || is_loc(v)))
        .collect();
    assert!(
        leaked.is_empty(),
        "the rejected prefix reached the post-policy view or the Loc-RIB: {leaked:?}"
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

    // 4. Statistics: type 7 (Adj-RIB-In routes) = BIRD's three routes.
    wait_entry(
        &file,
        "a Statistics Report: 3 routes in the Adj-RIB-In",
        |v| {
            v["bmp_msg_type"] == "stats"
                && v["peer_ip"] == peer.to_string()
                && v["counter_type"] == 7
                && v["counter_value"] == 3
        },
    );

    // 4b. Statistics type 0: the prefix the import policy rejected; type
    // 1 (duplicate announcements) is reported too (BIRD sends none).
    let st = wait_entry(&file, "a Statistics Report: 1 prefix rejected", |v| {
        v["bmp_msg_type"] == "stats"
            && v["peer_ip"] == peer.to_string()
            && v["counter_type"] == 0
            && v["counter_value"] == 1
    });
    eprintln!("stats type 0: {st}");
    let st = wait_entry(&file, "a Statistics Report: duplicate announcements", |v| {
        v["bmp_msg_type"] == "stats" && v["peer_ip"] == peer.to_string() && v["counter_type"] == 1
    });
    eprintln!("stats type 1: {st}");

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
    let Some(mut run) = nsr_plane::Run::<Bird>::start_with(
        "bmp_takeover",
        PeerKind::Bird,
        nsr_common::Options::default(),
        &format!(
            "[[bmp]]\naddress = \"{}:1790\"\nstatistics_interval_secs = 0\nroute_monitoring = [\"pre-policy\", \"post-policy\", \"loc-rib\", \"adj-rib-out\"]\n",
            nsr_plane::STORE_HOST
        ),
    ) else {
        return;
    };
    let (host, ip) = (run.topo().redis.id, run.topo().redis.v4);
    let peer = run.peer_ip().to_string();
    let file = start_pmbmpd(&mut run.plane.lab, host, ip);
    let is_up = |v: &Value| v["bmp_msg_type"] == "peer_up" && v["peer_ip"] == peer;
    wait_entry(&file, "the primary's Peer Up for BIRD", is_up);
    wait_entry(&file, "the primary's dump of our networks", |v| {
        v["bmp_msg_type"] == "route_monitor" && v["peer_ip"] == peer && v["is_out"] == 1
    });
    let is_post = |v: &Value| {
        v["bmp_msg_type"] == "route_monitor"
            && v["peer_ip"] == peer
            && v["is_post"] == 1
            && v["is_out"] != 1
            && !is_loc(v)
    };
    let is_loc_up = |v: &Value| v["bmp_msg_type"] == "peer_up" && is_loc(v);
    let is_loc_rm = |v: &Value| v["bmp_msg_type"] == "route_monitor" && is_loc(v);
    wait_entry(&file, "the primary's post-policy dump", is_post);
    wait_entry(&file, "the primary's Loc-RIB dump", is_loc_rm);
    let before = log(&file);
    let inits = of(&before, "init").len();
    let ups = before.iter().filter(|v| is_up(v)).count();
    let outs = before
        .iter()
        .filter(|v| v["bmp_msg_type"] == "route_monitor" && v["is_out"] == 1)
        .count();
    let posts = before.iter().filter(|v| is_post(v)).count();
    let loc_ups = before.iter().filter(|v| is_loc_up(v)).count();
    let locs = before.iter().filter(|v| is_loc_rm(v)).count();

    run.idle_kill();

    wait_for("the backup's Initiation, Peer Ups and dumps", T, || {
        let now = log(&file);
        let done = of(&now, "init").len() > inits
            && now.iter().filter(|v| is_up(v)).count() > ups
            && now
                .iter()
                .filter(|v| v["bmp_msg_type"] == "route_monitor" && v["is_out"] == 1)
                .count()
                > outs
            && now.iter().filter(|v| is_post(v)).count() > posts
            && now.iter().filter(|v| is_loc_up(v)).count() > loc_ups
            && now.iter().filter(|v| is_loc_rm(v)).count() > locs;
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
    run.plane.lab.teardown();
}
