//! `Store::renew` against a real etcd (one member on free loopback ports,
//! data under a temporary directory, stopped by PID when dropped):
//! - ten renewals of a lease open one keep-alive stream, not ten (etcd's
//!   own `grpc_server_started_total` for `LeaseKeepAlive`);
//! - with the member stopped (SIGSTOP) a renewal fails within the store's
//!   timeout, once, and after SIGCONT the next renewal opens a new stream
//!   and succeeds;
//! - a renewal of a revoked lease answers zero (gone), the first on the
//!   kept stream and the next on a new one;
//! - while a leader holds the leader key, a follower's campaigns fail and
//!   make no raft proposal (etcd's `etcd_server_proposals_committed_total`
//!   stays put over ten of them); once the key is gone, the next campaign
//!   wins.
//!
//! - `Store::units` read again sees every change, addition and deletion;
//! - a prefix read of more than a page and of more than the client's 4 MiB
//!   message limit comes back whole, in key order.
//!
//! Needs `etcd` (Debian's etcd-server); without it the test is skipped,
//! or fails under `HOLDFAST_REQUIRE_LAB=1`.

use holdfast_etcd::{Keys, Store};
use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

struct Etcd {
    child: Child,
    client: String,
    dir: std::path::PathBuf,
}

impl Drop for Etcd {
    fn drop(&mut self) {
        let pid = self.child.id().to_string();
        let _ = Command::new("kill").args(["-CONT", &pid]).status();
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free loopback port")
}

fn start_etcd() -> Option<Etcd> {
    if Command::new("etcd")
        .arg("--version")
        .stdout(Stdio::null())
        .status()
        .is_err()
    {
        let msg = "etcd not installed (Debian: etcd-server)";
        if std::env::var_os("HOLDFAST_REQUIRE_LAB").is_some_and(|v| v == "1") {
            panic!("{msg}");
        }
        eprintln!("skipped: {msg}");
        return None;
    }
    let (c, p) = (free_port(), free_port());
    let dir = std::env::temp_dir().join(format!("holdfast-etcd-test-{}-{c}", std::process::id()));
    let client = format!("http://127.0.0.1:{c}");
    let peer = format!("http://127.0.0.1:{p}");
    let child = Command::new("etcd")
        .args(["--name", "t", "--data-dir"])
        .arg(&dir)
        .args([
            "--listen-client-urls",
            &client,
            "--advertise-client-urls",
            &client,
        ])
        .args([
            "--listen-peer-urls",
            &peer,
            "--initial-advertise-peer-urls",
            &peer,
        ])
        .args(["--initial-cluster", &format!("t={peer}")])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("etcd starts");
    Some(Etcd { child, client, dir })
}

/// etcd's count of keep-alive streams opened, from its /metrics.
async fn streams_opened(client: &str) -> u64 {
    metric(client, |l| {
        l.starts_with("grpc_server_started_total") && l.contains("grpc_method=\"LeaseKeepAlive\"")
    })
    .await
}

/// etcd's count of raft proposals committed, from its /metrics.
async fn proposals_committed(client: &str) -> u64 {
    metric(client, |l| {
        l.starts_with("etcd_server_proposals_committed_total ")
    })
    .await
}

/// The value of the first line of etcd's /metrics that `pick` accepts.
async fn metric(client: &str, pick: impl Fn(&str) -> bool) -> u64 {
    let addr = client.trim_start_matches("http://");
    let text = tokio::task::spawn_blocking({
        let addr = addr.to_string();
        move || {
            use std::io::{Read, Write};
            let mut s = std::net::TcpStream::connect(&addr).expect("metrics");
            write!(s, "GET /metrics HTTP/1.0\r\nHost: {addr}\r\n\r\n").expect("request");
            let mut out = String::new();
            s.read_to_string(&mut out).expect("answer");
            out
        }
    })
    .await
    .expect("metrics read");
    text.lines()
        .find(|l| pick(l))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse::<f64>().ok())
        .map_or(0, |v| v as u64)
}

async fn store_up(client: &str) -> Store {
    let timeout = Duration::from_millis(800);
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let mut s =
            Store::new(vec![client.to_string()], timeout, Keys::new("t"), true).expect("a store");
        if s.grant(Duration::from_secs(5)).await.is_ok() {
            return s;
        }
        assert!(Instant::now() < deadline, "etcd at {client} did not answer");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn renewals_share_one_stream_and_a_stopped_member_fails_one_renewal() {
    let Some(etcd) = start_etcd() else { return };
    let mut store = store_up(&etcd.client).await;
    let (lease, _) = store.grant(Duration::from_secs(5)).await.expect("grant");
    let before = streams_opened(&etcd.client).await;
    for _ in 0..10 {
        let left = store.renew(lease).await.expect("renewed");
        assert!(left > Duration::ZERO);
    }
    let opened = streams_opened(&etcd.client).await - before;
    assert_eq!(opened, 1, "ten renewals opened {opened} keep-alive streams");

    // The member stopped: one renewal fails, within the store's timeout
    // (800 ms) and not twice that.
    let pid = etcd.child.id().to_string();
    let stopped = Command::new("kill")
        .args(["-STOP", &pid])
        .status()
        .expect("kill");
    assert!(stopped.success(), "kill -STOP {pid}");
    // The signal is delivered asynchronously: wait until it is stopped.
    let deadline = Instant::now() + Duration::from_secs(5);
    while std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| {
            s.rsplit(')')
                .next()
                .and_then(|r| r.split_whitespace().next())
                != Some("T")
        })
        .unwrap_or(true)
    {
        assert!(Instant::now() < deadline, "etcd {pid} not stopped");
        std::thread::sleep(Duration::from_millis(5));
    }
    let t = Instant::now();
    let r = store.renew(lease).await;
    let took = t.elapsed();
    Command::new("kill")
        .args(["-CONT", &pid])
        .status()
        .expect("kill");
    assert!(r.is_err(), "a stopped member renewed: {r:?}");
    assert!(
        took < Duration::from_millis(1500),
        "the failed renewal took {took:?}"
    );

    // Back: a new stream, and renewals go on.
    let before = streams_opened(&etcd.client).await;
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Ok(left) = store.renew(lease).await {
            assert!(left > Duration::ZERO);
            break;
        }
        assert!(Instant::now() < deadline, "no renewal after SIGCONT");
    }
    store.renew(lease).await.expect("renewed again");
    let opened = streams_opened(&etcd.client).await - before;
    assert_eq!(
        opened, 1,
        "after the stop: {opened} streams for two renewals"
    );

    // A revoked lease: zero left, on the kept stream as on a new one.
    store.revoke(lease).await.expect("revoke");
    for _ in 0..2 {
        assert_eq!(store.renew(lease).await.expect("an answer"), Duration::ZERO);
    }
}

#[tokio::test]
async fn a_campaign_against_a_held_leader_key_makes_no_proposal() {
    let Some(etcd) = start_etcd() else { return };
    let mut leader = store_up(&etcd.client).await;
    let mut follower = store_up(&etcd.client).await;
    let (l1, _) = leader.grant(Duration::from_secs(5)).await.expect("grant");
    let (l2, _) = follower.grant(Duration::from_secs(5)).await.expect("grant");
    let won = leader.campaign("c1", None, l1).await.expect("campaign");
    assert!(won.is_some(), "the first campaign did not win");

    let before = proposals_committed(&etcd.client).await;
    for _ in 0..10 {
        let r = follower.campaign("c2", None, l2).await.expect("campaign");
        assert_eq!(r, None, "a campaign won against a held leader key");
    }
    let made = proposals_committed(&etcd.client).await - before;
    assert_eq!(made, 0, "ten failed campaigns made {made} raft proposals");

    // The leader's lease revoked: its key goes, and the follower wins.
    leader.revoke(l1).await.expect("revoke");
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        if let Some(token) = follower.campaign("c2", None, l2).await.expect("campaign") {
            let (rec, t) = follower.leader().await.expect("read").expect("a leader");
            assert_eq!((rec.name.as_str(), t), ("c2", token));
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no campaign won after the revoke"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A prefix read larger than one page (and than the client's 4 MiB
/// message limit in one response) comes back whole, in key order.
#[tokio::test]
async fn a_prefix_larger_than_a_page_and_4_mib_is_read_whole() {
    let Some(etcd) = start_etcd() else {
        return;
    };
    let mut s = store_up(&etcd.client).await;
    let n = holdfast_etcd::store::PAGE as usize * 2 + 37;
    // About 5.3 MB in all: one response would be refused by the client.
    let big = "x".repeat(5_000);
    for i in 0..n {
        s.put_request(&format!("/t/many/{i:05}"), &format!("\"{big}\""))
            .await
            .expect("put");
    }
    s.put_request("/t/many0", "\"past the prefix\"")
        .await
        .expect("put");
    let keys = s.list("/t/many/").await.expect("list");
    assert_eq!(keys.len(), n);
    assert_eq!(keys.first().map(String::as_str), Some("00000"));
    assert!(keys.windows(2).all(|w| w[0] < w[1]));
    let records = s.scan::<String>("/t/many/").await.expect("scan");
    assert_eq!(records.len(), n);
    assert!(records.iter().all(|(_, v)| v.len() == big.len()));
}

/// `Store::units` after the first read: changes, additions and deletions
/// are all seen.
#[tokio::test]
async fn units_read_again_see_every_change_addition_and_deletion() {
    let Some(etcd) = start_etcd() else {
        return;
    };
    let mut s = store_up(&etcd.client).await;
    let rec = |unit: &str, primary: &str| {
        serde_json::json!({"schema": 1, "unit": unit, "primary": primary, "backup": null, "epoch": 0})
            .to_string()
    };
    let key = |u: &str| Keys::new("t").unit(u);
    for u in ["u1", "u2", "u3"] {
        s.put_request(&key(u), &rec(u, "a")).await.expect("put");
    }
    let names = |v: Vec<holdfast_etcd::UnitRecord>| -> Vec<(String, String)> {
        v.into_iter().map(|u| (u.unit, u.primary)).collect()
    };
    let first = names(s.units().await.expect("units"));
    assert_eq!(first.len(), 3);
    s.put_request(&key("u2"), &rec("u2", "b"))
        .await
        .expect("put");
    s.put_request(&key("u4"), &rec("u4", "c"))
        .await
        .expect("put");
    let second = names(s.units().await.expect("units"));
    assert_eq!(
        second,
        [("u1", "a"), ("u2", "b"), ("u3", "a"), ("u4", "c")]
            .map(|(u, p)| (u.to_string(), p.to_string()))
            .to_vec()
    );
    // More changes than a page since the last read: read in full again.
    let many = holdfast_etcd::store::PAGE as usize + 10;
    for i in 0..many {
        let u = format!("v{i:04}");
        s.put_request(&key(&u), &rec(&u, "d")).await.expect("put");
    }
    assert_eq!(s.units().await.expect("units").len(), 4 + many);
    let mut raw = etcd_client::Client::connect([etcd.client.as_str()], None)
        .await
        .expect("a client");
    // More deletions than a page, then one: each seen.
    for i in 0..many {
        let k = key(&format!("v{i:04}"));
        raw.delete(k, None).await.expect("delete");
    }
    assert_eq!(s.units().await.expect("units").len(), 4);
    raw.delete(key("u3"), None).await.expect("delete");
    let third = names(s.units().await.expect("units"));
    assert_eq!(
        third.iter().map(|(u, _)| u.as_str()).collect::<Vec<_>>(),
        ["u1", "u2", "u4"]
    );
}

/// `Store::read_many`: prefixes and single keys, more requests than one
/// transaction holds, each answered in order and apart from the others.
#[tokio::test]
async fn many_reads_in_few_transactions_answer_each_request() {
    let Some(etcd) = start_etcd() else {
        return;
    };
    let mut s = store_up(&etcd.client).await;
    let n = holdfast_etcd::store::TXN_OPS * 2 + 7;
    for i in 0..n {
        for step in ["fence", "takeover"].iter().take(1 + i % 2) {
            s.put_request(&format!("/t/steps/m{i:04}/{step}"), "\"x\"")
                .await
                .expect("put");
        }
    }
    // A key past each prefix must not be read with it.
    s.put_request("/t/steps/m00010", "\"past\"")
        .await
        .expect("put");
    let mut requests: Vec<(String, bool)> = (0..n)
        .map(|i| (format!("/t/steps/m{i:04}/"), true))
        .collect();
    requests.push(("/t/steps/m00010".into(), false));
    requests.push(("/t/steps/none".into(), false));
    let got = s.read_many(&requests).await.expect("read_many");
    assert_eq!(got.len(), n + 2);
    for (i, kvs) in got[..n].iter().enumerate() {
        let keys: Vec<&str> = kvs.iter().map(|(k, _)| k.as_str()).collect();
        let want: Vec<&str> = ["fence", "takeover"].into_iter().take(1 + i % 2).collect();
        assert_eq!(keys, want, "request {i}");
    }
    assert_eq!(
        got[n],
        vec![("/t/steps/m00010".to_string(), b"\"past\"".to_vec())]
    );
    assert!(got[n + 1].is_empty());
}
