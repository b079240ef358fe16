//! A ROUTE-REFRESH the primary had replicated but not answered when it died
//! is answered by the backup, against FRR.
//!
//! ```text
//!                 bridge `lan` 198.18.0.0/24
//!   [ p ] .20     frr bgpd AS 65001 --- session under test --- service .10 (unit edge-1, AS 65000)
//!   [ redis ] .2  redis-server (the state store); the test's own RESP connection
//!                 to it (from the feed host) watches `s:default/198.18.0.20:rr`
//!   [ a ] .3      host agent; edge-1's primary: gets frr's ROUTE-REFRESH, is SIGKILLed before answering
//!   [ b ] .4      host agent; edge-1 taken over by the controller (`--takeover`): answers it
//!   c1..c3        etcd + holdfast-controller (the plane of `support/nsr_plane.rs`)
//!   [ feed ] .5   raw test peers; AS 65200 sends 150,000 routes through holdfastd to frr
//! ```
//!
//! How the primary dies "replicated but not answered": frr is told `clear
//! bgp ipv4 unicast 198.18.0.10 soft in` (a ROUTE-REFRESH for IPv4
//! unicast); the test subscribes to the keyspace notifications of the
//! session's pending-refresh key, and the moment the primary sets it pauses
//! the store's writes (`CLIENT PAUSE 3000 WRITE`:
//! the answer, 150,000 routes and an End-of-RIB, cannot be stored, so it is
//! never sent), SIGKILLs the primary with the controllers SIGSTOPped (so
//! nobody takes over while the store is paused), unpauses, and lets the
//! controllers go on: they take the unit over. If the answer was
//! stored before the pause (the key was already cleared) the round is
//! retried after a plain takeover (at most `ROUNDS`).
//!
//! Checks:
//! * after the kill the store still holds the request as pending (the
//!   primary died with it unanswered) and frr's `updatesRecv` from us did
//!   not move since the request;
//! * after the takeover the backup logs that it answers it, frr's
//!   `updatesRecv` grows by at least the table (≥ 2 UPDATEs: routes and
//!   End-of-RIB), and the new primary clears the pending key;
//! * frr's own CLI (sampled every 200 ms for the whole run) shows the
//!   session never left Established, no NOTIFICATION, nothing withdrawn; it
//!   holds exactly our Adj-RIB-Out; the capture holds no FIN or RST from
//!   the service address.
//!
//! Negative control (by hand, docs/notes/issue12-nsr-gaps.md): with the backup's
//! answering disabled, `updatesRecv` does not grow after the takeover (the
//! Adj-RIB-Out difference is empty) and the third check fails.

use crate::{nsr_common, nsr_plane};

use holdfast_lab::{wait_ok, Frr, PeerKind};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

const T: Duration = Duration::from_secs(60);
/// Rounds of refresh-and-kill until one kills the primary with the
/// request pending (the answer may be stored before the pause arrives).
const ROUNDS: u32 = 6;

/// A RESP value, as far as this test needs one.
#[derive(Debug)]
enum V {
    Line(String),
    Bulk(Option<Vec<u8>>),
    Array(Vec<V>),
}

fn read_value(c: &mut TcpStream) -> V {
    let mut line = Vec::new();
    let mut b = [0u8; 1];
    while !line.ends_with(b"\r\n") {
        c.read_exact(&mut b).expect("read from redis");
        line.push(b[0]);
    }
    let head = String::from_utf8_lossy(&line[..line.len() - 2]).to_string();
    let rest = &head[1..];
    match head.as_bytes().first() {
        Some(b'+') | Some(b':') => V::Line(rest.to_string()),
        Some(b'$') => {
            let n: i64 = rest.parse().expect("bulk length");
            if n < 0 {
                return V::Bulk(None);
            }
            let mut body = vec![0u8; n as usize + 2];
            c.read_exact(&mut body).expect("bulk body");
            body.truncate(n as usize);
            V::Bulk(Some(body))
        }
        Some(b'*') => {
            let n: i64 = rest.parse().expect("array length");
            V::Array((0..n.max(0)).map(|_| read_value(c)).collect())
        }
        _ => panic!("redis answered {head:?}"),
    }
}

fn send(c: &mut TcpStream, args: &[&str]) {
    let mut req = format!("*{}\r\n", args.len());
    for a in args {
        req.push_str(&format!("${}\r\n{a}\r\n", a.len()));
    }
    c.write_all(req.as_bytes()).expect("write to redis");
}

/// One request; its reply's bulk string (`None` for nil), or status line.
fn resp(c: &mut TcpStream, args: &[&str]) -> Option<Vec<u8>> {
    send(c, args);
    match read_value(c) {
        V::Bulk(b) => b,
        V::Line(l) => Some(l.into_bytes()),
        v => panic!("redis answered {v:?} to {args:?}"),
    }
}

/// A connection to the store from the lab (the feed host's namespace), as
/// its administrator when it has ACL users.
fn connect(r: &nsr_plane::Run<Frr>) -> TcpStream {
    let addr = r.store_addr();
    let mut c = holdfast_tester::netns::in_netns(&r.client_netns(), move || {
        TcpStream::connect_timeout(&addr, Duration::from_secs(5))
    })
    .expect("netns")
    .expect("connect to redis");
    c.set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    c.set_nodelay(true).expect("nodelay");
    if let Some(pw) = r.store_admin_password() {
        resp(&mut c, &["AUTH", &pw]);
    }
    c
}

fn updates_recv(r: &nsr_plane::Run<Frr>) -> u64 {
    let s = r
        .peer()
        .message_stats(&r.plane.lab, r.service_ip())
        .expect("frr messageStats");
    s["updatesRecv"]
        .as_u64()
        .unwrap_or_else(|| panic!("no updatesRecv in {s}"))
}

#[test]
fn backup_answers_a_pending_route_refresh() {
    let Some(mut r) = nsr_plane::Run::<Frr>::start(
        "nsr_refresh_frr",
        PeerKind::Frr,
        nsr_common::Options::default(),
    ) else {
        return;
    };
    let watch = r.watch();
    let since = std::time::SystemTime::now();
    // A table big enough that answering a refresh takes a while.
    r.outbound_routes("table", 150_000);
    let mut store = connect(&r);
    // Keyspace notifications: the moment the primary's script sets the
    // pending-refresh key, the subscriber hears it (no polling interval).
    resp(
        &mut store,
        &["CONFIG", "SET", "notify-keyspace-events", "K$"],
    );
    let rr_key = r.peer_session_key("rr");
    let mut caught = false;
    for round in 1..=ROUNDS {
        r.check(&format!("round {round}: before the refresh"));
        let before = updates_recv(&r);
        let mut sub = connect(&r);
        send(
            &mut sub,
            &["SUBSCRIBE", &format!("__keyspace@0__:{rr_key}")],
        );
        read_value(&mut sub);
        let t0 = Instant::now();
        r.peer()
            .soft_in(&r.plane.lab, r.service_ip())
            .expect("soft in");
        let seen = loop {
            match read_value(&mut sub) {
                V::Array(m) if matches!(m.last(), Some(V::Bulk(Some(e))) if e == b"set") => {
                    resp(&mut store, &["CLIENT", "PAUSE", "3000", "WRITE"]);
                    break true;
                }
                _ if t0.elapsed() > Duration::from_secs(10) => break false,
                _ => {}
            }
        };
        drop(sub);
        assert!(
            seen,
            "round {round}: the primary never stored frr's ROUTE-REFRESH as pending"
        );
        // The controllers stopped: the takeover waits until the store
        // writes again.
        r.kill_primary();
        wait_ok("the primary is gone", T, || {
            (!r.hf().is_alive())
                .then_some(())
                .ok_or("still there".to_string())
        })
        .unwrap_or_else(|e| panic!("{e}"));
        resp(&mut store, &["CLIENT", "UNPAUSE"]);
        let pending = resp(&mut store, &["GET", &rr_key]);
        let after_kill = updates_recv(&r);
        println!(
            "round {round}: request seen pending after {:?}; at the kill the store holds {:?} pending; frr updatesRecv {before} -> {after_kill}",
            t0.elapsed(),
            pending.as_ref().map(|p| p.len())
        );
        drop(r.resume_controllers_and_take_over(&format!("round {round}: takeover")));
        if pending.is_none() {
            println!("round {round}: the answer was stored before the pause; again");
            continue;
        }
        assert_eq!(pending.as_deref().map(<[u8]>::len), Some(23), "one request");
        assert_eq!(after_kill, before, "frr got UPDATEs from the dead primary");
        caught = true;
        let grown = wait_ok("frr receives the answer", Duration::from_secs(20), || {
            let n = updates_recv(&r);
            (n >= before + 2)
                .then_some(n)
                .ok_or(format!("updatesRecv {before} -> {n}"))
        })
        .unwrap_or_else(|e| panic!("{e}"));
        let log = r.hf().log_text();
        assert!(
            log.contains("answering the ROUTE-REFRESH request(s) the old primary had not answered"),
            "the backup did not say it answers the request"
        );
        println!("round {round}: after the takeover frr updatesRecv {before} -> {grown}");
        wait_ok("the new primary clears the pending request", T, || {
            resp(&mut store, &["GET", &rr_key])
                .map_or(Ok(()), |p| Err(format!("{} bytes pending", p.len())))
        })
        .unwrap_or_else(|e| panic!("{e}"));
        r.check(&format!("round {round}: answered by the backup"));
        break;
    }
    assert!(
        caught,
        "{ROUNDS} rounds and the primary never died with the request pending"
    );
    r.finish(watch, since);
}
