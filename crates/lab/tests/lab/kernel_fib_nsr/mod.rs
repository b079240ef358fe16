//! The kernel FIB across non-stop-routing takeovers (issue 13, item 1):
//! after a takeover on the same host nothing is removed and reinstalled;
//! on a new host the table is reconciled. Every check reads the kernel
//! with `ip route` / `ip monitor` and forwards a ping, not with holdfastd.
//!
//! ```text
//!                 bridge `lan` 198.18.0.0/24 (support/nsr_plane.rs's plane)
//!   [ p ] .20     bird2 AS 65001: 203.0.113.0/24, 203.0.114.0/24, 203.0.115.0/24
//!                 (203.0.113.1 on its loopback)
//!   [ redis ] .2  redis-server (the state store)
//!   [ a ] .3      host agent; edge-1's container a_edge_1 (.64): hf0 `[kernel]
//!                 table = 100` (ip rule: lookup 100, forwarding on), SIGKILLed, and
//!                 the controller restarts it in place (hf1, the same container);
//!                 hf1 SIGKILLed,
//!   [ b ] .4      host agent; container b_edge_1 (.96): hf2 takes over here (its
//!                 table 100 holds a stale route of ours, a wrong version of a
//!                 wanted one, and a static route)
//!   [ feed ] .5   pings 203.0.113.1 through a_edge_1 (then b_edge_1)
//!   c1..c3        etcd + holdfast-controller
//! ```
//!
//! Checked:
//! * a: `ip route show table 100 proto 179` holds the peer's three prefixes
//!   via 198.18.0.20; the ping from feed through a reaches the peer;
//! * same host (SIGKILL hf0 with `app_failure = "restart_in_place"` in the
//!   placement: the controller has a's agent start hf1 `--takeover` in the
//!   same container): an
//!   `ip monitor route` started before the kill and read after shows none of
//!   our prefixes deleted or added, the table is unchanged (the routes name
//!   a next-hop object of ours, `nhid`, and keep its id), hf1's `show fib`
//!   counts 3 adopted and nothing added, replaced or deleted, and a ping
//!   (100, every 50 ms, started before the kill, ending after the takeover) lost
//!   no packet; bird's session never left Established (support/nsr_plane.rs's
//!   checks);
//! * new host (SIGKILL hf1, the controller has b's agent start hf2
//!   `--takeover`): negative control first,
//!   the ping through b fails before the takeover; after it b's table 100
//!   holds exactly the three wanted routes of ours (the stale one removed,
//!   the wrong one replaced) and the static route; `show fib` counts them;
//!   the ping through b reaches the peer;
//! * the same figures in each unit's Prometheus /metrics
//!   (`holdfast_fib_adopted_total`, `holdfast_fib_writes_total{op}`,
//!   `holdfast_fib_routes{state="installed"}`, `holdfast_fib_dumps_total`).

use crate::{nsr_common, nsr_plane};

use std::time::Duration;

use holdfast_lab::{skip_unless_tools, wait_for, Bird, HostId, Lab, PeerKind, Signal};

const T: Duration = Duration::from_secs(30);
const PREFIXES: [&str; 3] = ["203.0.113.0/24", "203.0.114.0/24", "203.0.115.0/24"];

fn sh(lab: &Lab, host: HostId, cmd: &[&str]) -> String {
    lab.exec_ok(host, cmd)
        .unwrap_or_else(|e| panic!("{}: {e}", cmd.join(" ")))
}

/// Routes of `proto` in table 100, one line per route, without the
/// interface (its name differs between hosts) and the next-hop object's id
/// (see [`raw_table`]).
fn table(lab: &Lab, h: HostId, proto: &str) -> Vec<String> {
    raw_table(lab, h, proto)
        .iter()
        .map(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            let mut keep = Vec::new();
            let mut i = 0;
            while i < w.len() {
                if w[i] == "dev" || w[i] == "nhid" {
                    i += 2;
                    continue;
                }
                keep.push(w[i]);
                i += 1;
            }
            keep.join(" ")
        })
        .collect()
}

/// `ip -o route show table 100 proto PROTO` as the kernel prints it, sorted.
fn raw_table(lab: &Lab, h: HostId, proto: &str) -> Vec<String> {
    let out = sh(
        lab,
        h,
        &["ip", "-o", "route", "show", "table", "100", "proto", proto],
    );
    let mut v: Vec<String> = out.lines().map(|l| l.trim().to_string()).collect();
    v.sort();
    v
}

/// What table 100 must hold of ours: each prefix via the peer (`via`),
/// metric 32.
fn wanted(via: &str) -> Vec<String> {
    let mut v: Vec<String> = PREFIXES
        .iter()
        .map(|p| format!("{p} via {via} metric 32"))
        .collect();
    v.sort();
    v
}

/// A host of the topology as a router with our table: forwarding, `ip rule`
/// for table 100, no redirects (feed must keep sending through it).
fn make_router(lab: &Lab, h: HostId, ifname: &str) {
    sh(lab, h, &["sysctl", "-qw", "net.ipv4.ip_forward=1"]);
    for k in ["all", "default", ifname] {
        sh(
            lab,
            h,
            &[
                "sysctl",
                "-qw",
                &format!("net.ipv4.conf.{k}.send_redirects=0"),
            ],
        );
    }
    sh(
        lab,
        h,
        &["ip", "rule", "add", "lookup", "100", "pref", "100"],
    );
}

fn ping_once(lab: &Lab, from: HostId) -> bool {
    lab.exec(from, &["ping", "-c", "1", "-W", "1", "203.0.113.1"])
        .map(|o| o.status.success())
        .unwrap_or(false)
}

fn route_feed_via(lab: &Lab, feed: HostId, via: &str) {
    sh(
        lab,
        feed,
        &["ip", "route", "replace", "203.0.113.0/24", "via", via],
    );
}

/// One sample of the unit's /metrics (on 127.0.0.1:9179 in its namespace):
/// the value of the line naming `name` and every label in `labels`.
fn metric(lab: &Lab, h: HostId, name: &str, labels: &[&str]) -> Option<f64> {
    use std::io::{Read, Write};
    let text = holdfast_linux::netns::in_netns(lab.netns(h), || {
        let mut c = std::net::TcpStream::connect("127.0.0.1:9179")?;
        c.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")?;
        let mut s = String::new();
        c.read_to_string(&mut s)?;
        Ok::<_, std::io::Error>(s)
    })
    .ok()?
    .ok()?;
    text.lines()
        .find(|l| l.starts_with(&format!("{name}{{")) && labels.iter().all(|x| l.contains(x)))
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
}

fn wait_metric(lab: &Lab, h: HostId, name: &str, labels: &[&str], want: f64) {
    wait_for(&format!("{name}{labels:?} = {want}"), T, || {
        Ok((metric(lab, h, name, labels) == Some(want)).then_some(()))
    })
    .unwrap_or_else(|e| panic!("{e}: got {:?}", metric(lab, h, name, labels)));
}

fn fib(hf: &nsr_plane::Unit, lab: &Lab) -> serde_json::Value {
    hf.cli_json(lab, &["show", "fib"]).expect("show fib")["ok"]["fib"][0].clone()
}

/// Waits until the unit's FIB runs with `n` routes written.
fn wait_fib(hf: &nsr_plane::Unit, lab: &Lab, n: usize, what: &str) -> serde_json::Value {
    wait_for(what, T, || {
        let f = fib(hf, lab);
        Ok((f["phase"] == "running" && f["installed"] == n && f["pending"] == 0).then_some(f))
    })
    .unwrap_or_else(|e| panic!("{e}: {}", fib(hf, lab)))
}

#[test]
fn kernel_fib_survives_takeovers() {
    if skip_unless_tools(&["ping"]) {
        return;
    }
    let Some(mut r) = nsr_plane::Run::<Bird>::start_with(
        "kernel_fib_nsr",
        PeerKind::Bird,
        nsr_common::Options::default(),
        "[global]\nmetrics_listen = \"127.0.0.1:9179\"\n\
         [kernel]\ntable = 100\nstartup_hold = 2\n",
    ) else {
        return;
    };
    let topo = r.topo().clone();
    // The unit's containers on a and b: where it runs, and its table.
    let (ca, cb) = (r.container("a"), r.container("b"));
    let (a, b, feed, peer) = (ca.id, cb.id, topo.feed.id, r.peer_host().id);
    let via = r.peer_ip().to_string();
    make_router(&r.plane.lab, a, &ca.ifname);
    make_router(&r.plane.lab, b, &cb.ifname);
    for k in ["all", "default", topo.feed.ifname.as_str()] {
        sh(
            &r.plane.lab,
            feed,
            &[
                "sysctl",
                "-qw",
                &format!("net.ipv4.conf.{k}.accept_redirects=0"),
            ],
        );
    }
    sh(&r.plane.lab, peer, &["ip", "link", "set", "lo", "up"]);
    sh(
        &r.plane.lab,
        peer,
        &["ip", "addr", "add", "203.0.113.1/32", "dev", "lo"],
    );
    for p in &PREFIXES[1..] {
        r.peer_announces(p);
    }

    // Installed on a; the ping goes through a.
    wait_for("our three routes in a's table 100", T, || {
        Ok((table(&r.plane.lab, a, "179") == wanted(&via)).then_some(()))
    })
    .unwrap_or_else(|e| panic!("{e}: {:?}", table(&r.plane.lab, a, "179")));
    wait_fib(r.hf(), &r.plane.lab, 3, "hf0's FIB");
    route_feed_via(&r.plane.lab, feed, &ca.v4.to_string());
    assert!(ping_once(&r.plane.lab, feed), "ping feed -> a -> peer");
    // Written with a next-hop object of ours (`nhid`), which the
    // takeover must keep as well.
    let before = raw_table(&r.plane.lab, a, "179");
    assert!(
        before.iter().all(|l| l.contains(" nhid ")),
        "routes without a next-hop object: {before:?}"
    );

    // (a) Same host: kill, take over in place. Nothing is rewritten and
    // forwarding never stops.
    let mon = r
        .plane
        .lab
        .spawn_route_monitor(a, "ipmon")
        .expect("ip monitor");
    let pinger = r
        .plane
        .lab
        .spawn(
            feed,
            "pinger",
            &["ping", "-c", "100", "-i", "0.05", "-W", "1", "203.0.113.1"],
            &[],
        )
        .expect("ping");
    // The kill comes once pings are going through (the first reply).
    wait_for("the pinger's first reply", T, || {
        let out = std::fs::read_to_string(r.plane.lab.proc_logs(pinger).0).unwrap_or_default();
        Ok(out.contains("bytes from").then_some(()))
    })
    .expect("pings through a before the kill");
    drop(r.take_over_in_place("SIGKILL, takeover on the same host"));
    let f = wait_fib(
        r.hf(),
        &r.plane.lab,
        3,
        "hf1's FIB after the takeover in place",
    );
    println!("same host: show fib counters {}", f["counters"]);
    assert_eq!(
        raw_table(&r.plane.lab, a, "179"),
        before,
        "a's table after the takeover (routes and next-hop ids)"
    );
    wait_for("the pinger done", T, || {
        Ok((!r.plane.lab.is_running(pinger)).then_some(()))
    })
    .expect("ping ends");
    let pinged = std::fs::read_to_string(r.plane.lab.proc_logs(pinger).0).unwrap_or_default();
    println!(
        "ping across the takeover: {}",
        pinged.lines().rev().nth(1).unwrap_or("")
    );
    assert!(
        pinged.contains("100 packets transmitted, 100 received"),
        "ping through a across the takeover lost packets:\n{pinged}"
    );
    r.plane.lab.kill(mon, Signal::Term);
    let seen = std::fs::read_to_string(r.plane.lab.proc_logs(mon).0).unwrap_or_default();
    assert!(
        !seen.lines().any(|l| l.contains("203.0.11")),
        "ip monitor route saw our routes change across the takeover:\n{seen}"
    );
    assert_eq!(f["counters"]["adopted"], 3, "{f}");
    for k in ["added", "replaced", "deleted", "errors"] {
        assert_eq!(f["counters"][k], 0, "{k}: {f}");
    }
    let inst = "instance=\"default\"";
    wait_metric(&r.plane.lab, a, "holdfast_fib_adopted_total", &[inst], 3.0);
    wait_metric(
        &r.plane.lab,
        a,
        "holdfast_fib_routes",
        &[inst, "state=\"installed\""],
        3.0,
    );
    wait_metric(&r.plane.lab, a, "holdfast_fib_dumps_total", &[inst], 1.0);
    assert_eq!(
        metric(&r.plane.lab, a, "holdfast_fib_writes_total", &[inst]),
        None,
        "writes after the takeover in place"
    );
    // The NSR checks (they send a fresh route each way: two more routes).
    r.check("takeover on the same host");
    wait_fib(r.hf(), &r.plane.lab, 5, "hf1's FIB with the fresh routes");
    let on_a = table(&r.plane.lab, a, "179");
    assert_eq!(on_a.len(), 5, "a's table after the fresh routes: {on_a:?}");

    // (b) New host: b's table 100 holds a stale route of ours, a wrong
    // version of a wanted one, and another protocol's route.
    for (p, via, proto) in [
        ("203.0.119.0/24", "198.18.0.1", "179"),
        ("203.0.114.0/24", "198.18.0.2", "179"),
        ("203.0.118.0/24", "198.18.0.1", "static"),
    ] {
        sh(
            &r.plane.lab,
            b,
            &[
                "ip", "route", "add", p, "via", via, "table", "100", "proto", proto, "metric", "32",
            ],
        );
    }
    route_feed_via(&r.plane.lab, feed, &cb.v4.to_string());
    assert!(
        !ping_once(&r.plane.lab, feed),
        "negative control: the ping through b works before the takeover"
    );
    drop(r.kill_and_wait("SIGKILL, takeover onto b"));
    let f = wait_fib(r.hf(), &r.plane.lab, on_a.len(), "hf2's FIB on b");
    println!("new host: show fib counters {}", f["counters"]);
    wait_for("b's table reconciled", T, || {
        Ok((table(&r.plane.lab, b, "179") == on_a).then_some(()))
    })
    .unwrap_or_else(|e| panic!("{e}: {:?} {f}", table(&r.plane.lab, b, "179")));
    assert_eq!(
        table(&r.plane.lab, b, "static"),
        vec!["203.0.118.0/24 via 198.18.0.1 metric 32".to_string()],
        "another protocol's route on b"
    );
    let c = &f["counters"];
    assert_eq!(c["added"], on_a.len() - 1, "{f}");
    assert_eq!(c["replaced"], 1, "{f}");
    assert_eq!(c["deleted"], 1, "{f}");
    for (op, n) in [
        ("added", c["added"].as_u64()),
        ("replaced", Some(1)),
        ("deleted", Some(1)),
    ] {
        let l = format!("op=\"{op}\"");
        wait_metric(
            &r.plane.lab,
            b,
            "holdfast_fib_writes_total",
            &[inst, &l],
            n.unwrap_or(0) as f64,
        );
    }
    assert!(ping_once(&r.plane.lab, feed), "ping feed -> b -> peer");
    r.check("takeover onto a new host");
}
