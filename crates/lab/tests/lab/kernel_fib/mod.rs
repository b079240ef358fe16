//! The kernel FIB (`[kernel]`, issue 13 item 1): holdfastd installs its
//! best paths into a kernel table of its namespace over rtnetlink, and a
//! ping from `src` is forwarded through `r` by them. Every check reads the
//! kernel with `ip route` / `ip monitor`, not with holdfastd.
//!
//! ```text
//!   [ src ] 198.51.100.2 ── 198.51.100.1 [ r: holdfastd AS65000, [kernel] table 100 ] 192.0.2.1 ── 192.0.2.2 [ b1: bird AS65001 ]
//!   default via r                         ip rule: lookup 100                           192.0.3.1 ── 192.0.3.2 [ b2: bird AS65002 ]
//!                                         172.31.0.0/24 via 192.0.2.2 (static)
//!   b1 announces 10.201.0.0/24 (on its loopback: 10.201.0.1), 10.202.0.0/24 (10.202.0.1),
//!               10.203.0.0/24 with next hop 172.31.0.9 (not connected: recursive);
//!   b2 announces 10.202.0.0/24 (ECMP with b1's).
//! ```
//!
//! Checked:
//! * negative control: before holdfastd runs, the ping from `src` to
//!   10.201.0.1 fails;
//! * `ip route show table 100 proto 179`: 10.201.0.0/24 via 192.0.2.2
//!   metric 32; 10.202.0.0/24 with two nexthops (192.0.2.2 and 192.0.3.2);
//!   10.203.0.0/24 via 192.0.2.2 (resolved through the static route);
//!   then the ping succeeds;
//! * another protocol's route in table 100 (proto static) is untouched;
//!   a stale route of ours planted before the start is removed after
//!   `startup_hold`;
//! * the kernel route under the recursive next hop is replaced (via
//!   192.0.3.2): 10.203.0.0/24 follows it;
//! * `holdfast show fib --json`: installed, next-hop resolution;
//! * holdfastd killed (SIGKILL) leaves its routes; started again, it adopts
//!   them: `ip monitor route` sees no change of our prefixes while the
//!   sessions come back one after the other, and `show fib` counts them
//!   adopted, none added, replaced or deleted;
//! * a withdrawal by b1 removes 10.201.0.0/24 (and the ping fails again);
//! * a route with one gateway names a next-hop object of ours (`nhid`,
//!   `ip nexthop show protocol 179`), the ECMP route carries its gateways;
//! * a normal stop (SIGTERM, no `persist`) removes our routes and next-hop
//!   objects and leaves the static route.

use std::time::Duration;

use holdfast_lab::{
    send_signal, skip_unless_ready, skip_unless_tools, wait_for, Bird, Holdfastd, HostId, Lab,
    NeighborSpec, Peer, PeerKind, PeerSpec, RouteSpec, Signal,
};

use crate::fib_common;
use fib_common::{ip, sh, v4};

const T: Duration = Duration::from_secs(30);

/// Our routes in table 100, one line per route (nexthops joined).
fn ours(lab: &Lab, r: HostId) -> Vec<String> {
    let out = sh(
        lab,
        r,
        &["ip", "-o", "route", "show", "table", "100", "proto", "179"],
    );
    out.lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
        .collect()
}

fn route_of(lab: &Lab, r: HostId, prefix: &str) -> Option<String> {
    ours(lab, r)
        .into_iter()
        .find(|l| l.starts_with(&format!("{prefix} ")))
}

/// `ping` from `src` (iputils-ping; a missing tool fails the test).
fn ping(lab: &Lab, src: HostId, dst: &str) -> bool {
    lab.exec(src, &["ping", "-c", "1", "-W", "1", dst])
        .map(|o| o.status.success())
        .unwrap_or(false)
}

fn config(startup_hold: u32) -> String {
    format!(
        r#"[global]
asn = 65000
router_id = "192.0.2.1"
connect_retry = 1
workers = 1
shards = 4

[kernel]
table = 100
ecmp = 2
startup_hold = {startup_hold}

[[neighbor]]
address = "192.0.2.2"
remote_asn = 65001
local_address = "192.0.2.1"
import = "all"
export = "none"
families = ["ipv4-unicast"]

[[neighbor]]
address = "192.0.3.2"
remote_asn = 65002
local_address = "192.0.3.1"
import = "all"
export = "none"
families = ["ipv4-unicast"]
"#
    )
}

fn bird_spec(asn: u32, rid: &str, hf: &str, local: &str, routes: Vec<RouteSpec>) -> PeerSpec {
    let mut s = PeerSpec::new(asn, rid.parse().unwrap()).neighbor(
        NeighborSpec::new(ip(hf), 65000)
            .local(ip(local))
            .families(true, false),
    );
    for r in routes {
        s = s.route(r);
    }
    s
}

fn fib_json(hf: &Holdfastd, lab: &Lab) -> serde_json::Value {
    let v = hf
        .cli_json(lab, &["show", "fib"])
        .expect("holdfast show fib --json");
    v["ok"]["fib"][0].clone()
}

#[test]
fn kernel_fib_installs_adopts_and_forwards() {
    if skip_unless_ready(&[PeerKind::Bird]) || skip_unless_tools(&["ping"]) {
        return;
    }
    let mut lab = Lab::new("kernel_fib").expect("lab");
    let src = lab.host("src").expect("host");
    let r = lab.host("r").expect("host");
    let b1 = lab.host("b1").expect("host");
    let b2 = lab.host("b2").expect("host");
    lab.link(r, src, v4([198, 51, 100, 1], [198, 51, 100, 2]), None)
        .expect("link");
    lab.link(r, b1, v4([192, 0, 2, 1], [192, 0, 2, 2]), None)
        .expect("link");
    lab.link(r, b2, v4([192, 0, 3, 1], [192, 0, 3, 2]), None)
        .expect("link");
    sh(
        &lab,
        src,
        &["ip", "route", "add", "default", "via", "198.51.100.1"],
    );
    sh(&lab, r, &["sysctl", "-qw", "net.ipv4.ip_forward=1"]);
    sh(
        &lab,
        r,
        &["ip", "rule", "add", "lookup", "100", "pref", "100"],
    );
    sh(
        &lab,
        r,
        &["ip", "route", "add", "172.31.0.0/24", "via", "192.0.2.2"],
    );
    for (h, gw, addrs) in [
        (b1, "192.0.2.1", &["10.201.0.1/32", "10.202.0.1/32"][..]),
        (b2, "192.0.3.1", &["10.202.0.1/32"][..]),
    ] {
        for a in addrs {
            sh(&lab, h, &["ip", "addr", "add", a, "dev", "lo"]);
        }
        sh(&lab, h, &["ip", "link", "set", "lo", "up"]);
        sh(
            &lab,
            h,
            &["ip", "route", "add", "198.51.100.0/24", "via", gw],
        );
    }
    let routes1 = vec![
        RouteSpec::new("10.201.0.0/24"),
        RouteSpec::new("10.202.0.0/24"),
        RouteSpec::new("10.203.0.0/24").next_hop(ip("172.31.0.9")),
    ];
    let mut bird1 = Bird::start(
        &mut lab,
        b1,
        &bird_spec(65001, "192.0.2.2", "192.0.2.1", "192.0.2.2", routes1),
    )
    .expect("bird b1");
    let _bird2 = Bird::start(
        &mut lab,
        b2,
        &bird_spec(
            65002,
            "192.0.3.2",
            "192.0.3.1",
            "192.0.3.2",
            vec![RouteSpec::new("10.202.0.0/24")],
        ),
    )
    .expect("bird b2");

    // Negative control: nothing forwards to b1's address yet.
    assert!(
        !ping(&lab, src, "10.201.0.1"),
        "ping through r before any route is installed"
    );

    // Another protocol's route in our table, and a stale one of ours.
    sh(
        &lab,
        r,
        &[
            "ip",
            "route",
            "add",
            "10.250.0.0/24",
            "via",
            "192.0.2.2",
            "table",
            "100",
            "proto",
            "static",
        ],
    );
    sh(
        &lab,
        r,
        &[
            "ip",
            "route",
            "add",
            "10.249.0.0/24",
            "via",
            "192.0.2.2",
            "table",
            "100",
            "proto",
            "179",
            "metric",
            "32",
        ],
    );

    let hf = Holdfastd::start(&mut lab, r, "holdfastd", &config(3)).expect("holdfastd");
    hf.wait_established(ip("192.0.2.2"), T)
        .expect("b1 Established");
    hf.wait_established(ip("192.0.3.2"), T)
        .expect("b2 Established");
    wait_for("our routes in table 100", T, || {
        let p1 = route_of(&lab, r, "10.201.0.0/24");
        let p2 = route_of(&lab, r, "10.202.0.0/24");
        let p3 = route_of(&lab, r, "10.203.0.0/24");
        Ok(match (p1, p2, p3) {
            (Some(a), Some(b), Some(c)) if b.contains("192.0.2.2") && b.contains("192.0.3.2") => {
                Some((a, b, c))
            }
            _ => None,
        })
    })
    .map(|(a, b, c)| {
        assert!(
            a.contains("via 192.0.2.2") && a.contains("metric 32"),
            "{a}"
        );
        // One gateway: through a next-hop object of ours; ECMP: gateways.
        assert!(a.contains(" nhid "), "a next-hop object: {a}");
        assert!(!b.contains(" nhid "), "ECMP carries its gateways: {b}");
        assert!(
            b.contains("nexthop via 192.0.2.2") && b.contains("nexthop via 192.0.3.2"),
            "ECMP: {b}"
        );
        assert!(
            c.contains("via 192.0.2.2"),
            "recursive next hop through 172.31.0.0/24: {c}"
        );
    })
    .unwrap_or_else(|e| panic!("{e}: {:?}\n{}", ours(&lab, r), hf.log_text(&lab)));
    assert!(
        ping(&lab, src, "10.201.0.1"),
        "ping src -> r -> b1 over our route: {:?}",
        ours(&lab, r)
    );
    assert!(ping(&lab, src, "10.202.0.1"), "ping over the ECMP route");
    let statics = sh(
        &lab,
        r,
        &["ip", "route", "show", "table", "100", "proto", "static"],
    );
    assert!(
        statics.contains("10.250.0.0/24 via 192.0.2.2"),
        "the static route is untouched: {statics}"
    );
    wait_for("the stale route of ours removed after the hold", T, || {
        Ok(route_of(&lab, r, "10.249.0.0/24").is_none().then_some(()))
    })
    .expect("stale route");

    // Recursive next hop: the kernel route under it moves.
    sh(
        &lab,
        r,
        &[
            "ip",
            "route",
            "replace",
            "172.31.0.0/24",
            "via",
            "192.0.3.2",
        ],
    );
    wait_for("10.203.0.0/24 re-resolved via 192.0.3.2", T, || {
        Ok(route_of(&lab, r, "10.203.0.0/24")
            .filter(|l| l.contains("via 192.0.3.2"))
            .map(|_| ()))
    })
    .unwrap_or_else(|e| panic!("{e}: {:?}", ours(&lab, r)));
    let f = fib_json(&hf, &lab);
    assert_eq!(f["phase"], "running", "{f}");
    assert_eq!(f["installed"], 3, "{f}");
    let nh = f["next_hops"].as_array().expect("next_hops");
    let rec = nh
        .iter()
        .find(|n| n["next_hop"] == "172.31.0.9")
        .expect("172.31.0.9 listed");
    assert_eq!(rec["via_route"], "172.31.0.0/24", "{f}");

    // Killed: the routes stay. Started again: adopted, nothing rewritten.
    send_signal(hf.pid(&lab), Signal::Kill, true);
    wait_for("holdfastd gone", T, || Ok((!hf.is_alive()).then_some(()))).expect("killed");
    let before = ours(&lab, r);
    assert_eq!(
        before.len(),
        3,
        "routes left by the killed process: {before:?}"
    );
    let mon = lab.spawn_route_monitor(r, "ipmon").expect("ip monitor");
    let hf2 = Holdfastd::start(&mut lab, r, "holdfastd2", &config(6)).expect("holdfastd again");
    hf2.wait_established(ip("192.0.2.2"), T)
        .expect("b1 Established again");
    hf2.wait_established(ip("192.0.3.2"), T)
        .expect("b2 Established again");
    wait_for("the table adopted and the RIB complete", T, || {
        let f = fib_json(&hf2, &lab);
        Ok((f["phase"] == "running" && f["routes_total"] == 3 && f["pending"] == 0).then_some(f))
    })
    .map(|f| {
        assert_eq!(f["counters"]["adopted"], 3, "{f}");
        assert_eq!(f["counters"]["added"], 0, "{f}");
        assert_eq!(f["counters"]["replaced"], 0, "{f}");
        assert_eq!(f["counters"]["deleted"], 0, "{f}");
    })
    .expect("adoption");
    assert_eq!(ours(&lab, r), before, "the same routes after the restart");
    lab.kill(mon, Signal::Term);
    let seen = std::fs::read_to_string(lab.proc_logs(mon).0).unwrap_or_default();
    assert!(
        !seen.lines().any(|l| l.contains("10.20")),
        "ip monitor route saw our prefixes change across the restart:\n{seen}"
    );

    // A withdrawal removes the route (once the start-up hold, during which
    // the adopted routes stay exactly as they are, is over); forwarding to
    // it stops.
    bird1
        .withdraw(&lab, &["10.201.0.0/24".to_string()])
        .expect("withdraw");
    wait_for("10.201.0.0/24 removed", T, || {
        Ok(route_of(&lab, r, "10.201.0.0/24").is_none().then_some(()))
    })
    .expect("withdrawal");
    assert!(!ping(&lab, src, "10.201.0.1"), "no route, no forwarding");

    let objects = sh(&lab, r, &["ip", "nexthop", "show", "protocol", "179"]);
    assert!(objects.contains("via 192.0.2.2"), "{objects}");

    // A normal stop removes ours (routes and next-hop objects) and nothing
    // else.
    hf2.stop(&mut lab);
    assert_eq!(
        ours(&lab, r),
        Vec::<String>::new(),
        "routes left after a normal stop"
    );
    let objects = sh(&lab, r, &["ip", "nexthop", "show", "protocol", "179"]);
    assert_eq!(
        objects.trim(),
        "",
        "next-hop objects left after a normal stop"
    );
    let statics = sh(
        &lab,
        r,
        &["ip", "route", "show", "table", "100", "proto", "static"],
    );
    assert!(statics.contains("10.250.0.0/24"), "{statics}");
}
