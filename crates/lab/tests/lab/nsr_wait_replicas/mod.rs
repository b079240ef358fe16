//! `[nsr] wait_replicas` / `wait_timeout_ms`: every store write waits
//! (Redis `WAIT`) until a replica has it; a write no replica acknowledges in
//! time is a failed write.
//!
//! ```text
//!                 bridge `lan` 198.18.0.0/24
//!   [ redis ] .2    redis-server, the master (the `[nsr] store`)
//!   [ replica ] .7  redis-server --replicaof 198.18.0.2 6379
//!   [ a ] .3        holdfastd (hf0), service .10, wait_replicas = 1, wait_timeout_ms = 100
//!   [ feed ] .5     a raw test peer, AS 65200, sends routes to holdfastd
//!   ([ peer ] .1 and [ b ] .4 of the NSR topology are idle)
//! ```
//!
//! Checks:
//! * with the replica attached, holdfastd is PROTECTED, learns 1,000
//!   routes, and the replica holds the session: the same `rcv` and the same
//!   number of Adj-RIB-In log chunks as the master;
//! * the replica is SIGKILLed: the next write is not acknowledged by a
//!   replica within 100 ms, and holdfastd reports itself UNPROTECTED (`show
//!   nsr`: protected false, write errors counted; its log names the `WAIT`:
//!   "acknowledged by 0 of 1 replica(s) within 100 ms (WAIT)"), while the
//!   session stays up and routes still flow (no NOTIFICATION, connection
//!   open);
//! * the replica is restarted: holdfastd is PROTECTED again (every session
//!   re-written, now acknowledged), and the replica holds the session.
//!
//! Negative control (by hand, docs/notes/issue12-nsr-gaps.md): with `WAIT_REPLICAS = 0`
//! killing the replica changes nothing and the second check fails.

use holdfast_lab::{
    nsr_config, skip_unless_ready, skip_unless_tools, wait_ok, Holdfastd, Lab, NsrTopo, Redis,
};
use holdfast_tester::workload::{generate, Kind};
use holdfast_tester::{encode_routes, netns::in_netns, Config as TesterConfig, Peer as Tester};
use holdfast_wire::Family;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::{Duration, Instant};

const T: Duration = Duration::from_secs(60);
/// `[nsr] wait_replicas` of the run (the negative control sets 0).
const WAIT_REPLICAS: u32 = 1;
const FEED_AS: u32 = 65200;

fn replication(r: &Redis, lab: &Lab) -> String {
    r.cli(lab, &["INFO", "replication"]).unwrap_or_default()
}

fn session_state(r: &Redis, lab: &Lab, key: &str) -> (String, String) {
    let rcv = r
        .cli(lab, &["GET", &format!("hf:{{edge-1}}:s:{key}:rcv")])
        .unwrap_or_default();
    let chunks = r
        .cli(lab, &["LLEN", &format!("hf:{{edge-1}}:s:{key}:in")])
        .unwrap_or_default();
    (rcv.trim().to_string(), chunks.trim().to_string())
}

fn send_routes(feed: &Tester, n: usize, nh: Ipv4Addr) {
    let w = generate(Kind::Packed, n, FEED_AS, nh);
    let mut bytes = Vec::new();
    encode_routes(&w, &feed.ctx, &mut bytes);
    feed.send_stream(&bytes).expect("routes sent");
}

fn protected(hf: &Holdfastd) -> holdfast_api::NsrStatus {
    hf.control().nsr().expect("show nsr")
}

#[test]
fn store_writes_wait_for_a_replica() {
    if skip_unless_ready(&[]) || skip_unless_tools(&["redis-server", "redis-cli"]) {
        return;
    }
    let mut lab = Lab::new("nsr_wait_replicas").expect("lab");
    let topo = NsrTopo::build(&mut lab).expect("topology");
    let master =
        Redis::start(&mut lab, topo.redis.id, IpAddr::V4(topo.redis.v4), 6379).expect("master");
    let rhost = topo.add_host(&mut lab, "replica", 7).expect("replica host");
    let mut replica = Redis::start_replica(&mut lab, rhost.id, IpAddr::V4(rhost.v4), 6379, &master)
        .expect("replica");
    wait_ok("the replica is in sync", T, || {
        let m = replication(&master, &lab);
        let r = replication(&replica, &lab);
        (m.contains("connected_slaves:1") && r.contains("master_link_status:up"))
            .then_some(())
            .ok_or(format!("master: {m}\nreplica: {r}"))
    })
    .unwrap_or_else(|e| panic!("{e}"));

    let extra = format!(
        "hold_time = 9\n\
         [[neighbor]]\naddress = \"{feed}\"\nremote_asn = {FEED_AS}\nlocal_address = \"{svc}\"\npassive = true\nimport = \"all\"\nexport = \"all\"\n\
         [nsr]\nwait_replicas = {WAIT_REPLICAS}\nwait_timeout_ms = 100\n",
        feed = topo.feed.v4,
        svc = topo.service_v4,
    );
    let config = nsr_config(&topo, &master.url(), "edge-1", &[], &extra);
    let hf = Holdfastd::start(&mut lab, topo.a.id, "hf0", &config).expect("holdfastd");
    let mut tcfg = TesterConfig::new(FEED_AS, Ipv4Addr::new(192, 0, 2, 102));
    tcfg.families = vec![Family::IPV4_UNICAST];
    let ns = lab.netns(topo.feed.id).to_string();
    let (to, local) = (
        SocketAddr::new(IpAddr::V4(topo.service_v4), 179),
        IpAddr::V4(topo.feed.v4),
    );
    let deadline = Instant::now() + T;
    let feed = loop {
        let c = tcfg.clone();
        let r = in_netns(&ns, move || {
            Tester::connect(to, Some(local), &c, Duration::from_secs(5))
        })
        .expect("netns");
        match r {
            Ok(p) => break p,
            Err(e) if Instant::now() < deadline => {
                println!("feed -> {to}: {e}; retrying");
                std::thread::sleep(Duration::from_millis(200));
            }
            Err(e) => panic!("feed -> {to}: {e}"),
        }
    };
    let feed_ip = IpAddr::V4(topo.feed.v4);
    hf.wait_established(feed_ip, T)
        .expect("session with the feed");
    let key = format!("default/{feed_ip}");

    // 1. Protected; the replica has what the master has.
    wait_ok("PROTECTED with the replica", T, || {
        let n = protected(&hf);
        n.protected.then_some(()).ok_or(format!("{n:?}"))
    })
    .unwrap_or_else(|e| panic!("{e}"));
    send_routes(&feed, 1000, topo.feed.v4);
    wait_ok("holdfastd learns 1,000 routes", T, || {
        let n = hf
            .neighbor(feed_ip)
            .ok()
            .flatten()
            .map_or(0, |n| n.prefixes_received);
        (n == 1000).then_some(()).ok_or(format!("{n} routes"))
    })
    .unwrap_or_else(|e| panic!("{e}"));
    wait_ok(
        "the replica holds the session as the master does",
        T,
        || {
            let (m, r) = (
                session_state(&master, &lab, &key),
                session_state(&replica, &lab, &key),
            );
            (m == r && !m.0.is_empty() && m.1 != "0")
                .then_some(())
                .ok_or(format!("master {m:?}, replica {r:?}"))
        },
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let errors_before = protected(&hf).write_errors;
    println!(
        "with the replica: PROTECTED, session {key} on both: {:?}",
        session_state(&replica, &lab, &key)
    );

    // 2. No replica: the next write fails; sessions stay up.
    replica.kill(&mut lab).expect("kill the replica");
    let t0 = Instant::now();
    send_routes(&feed, 1000, topo.feed.v4);
    let n = wait_ok("UNPROTECTED once no replica acknowledges", T, || {
        let n = protected(&hf);
        (!n.protected).then_some(n.clone()).ok_or(format!("{n:?}"))
    })
    .unwrap_or_else(|e| panic!("{e}"));
    println!(
        "replica killed: UNPROTECTED after {:?}, write errors {} -> {}",
        t0.elapsed(),
        errors_before,
        n.write_errors
    );
    assert!(n.write_errors > errors_before, "{n:?}");
    let log = hf.log_text(&lab);
    assert!(
        log.contains("acknowledged by 0 of 1 replica(s) within 100 ms (WAIT)"),
        "holdfastd's log does not name the WAIT:\n{}",
        log.lines().rev().take(10).collect::<Vec<_>>().join("\n")
    );
    hf.wait_established(feed_ip, Duration::from_secs(1))
        .expect("the session stays up while unprotected");
    feed.view(|v| {
        assert!(
            v.notifications.is_empty(),
            "feed got NOTIFICATION {:?}",
            v.notifications
        );
        assert!(!v.closed, "the feed's connection closed");
    });

    // 3. The replica is back: protected again, and the replica has it.
    replica.restart(&mut lab).expect("restart the replica");
    let t1 = Instant::now();
    wait_ok("PROTECTED again with the replica back", T, || {
        let n = protected(&hf);
        n.protected.then_some(()).ok_or(format!("{n:?}"))
    })
    .unwrap_or_else(|e| panic!("{e}"));
    println!(
        "replica restarted: PROTECTED again after {:?}",
        t1.elapsed()
    );
    wait_ok("the restarted replica holds the session", T, || {
        let (m, r) = (
            session_state(&master, &lab, &key),
            session_state(&replica, &lab, &key),
        );
        (m == r && !r.0.is_empty())
            .then_some(())
            .ok_or(format!("master {m:?}, replica {r:?}"))
    })
    .unwrap_or_else(|e| panic!("{e}"));
    feed.view(|v| {
        assert!(
            v.notifications.is_empty(),
            "feed got NOTIFICATION {:?}",
            v.notifications
        );
        assert!(!v.closed, "the feed's connection closed");
    });
}
