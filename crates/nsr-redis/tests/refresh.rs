//! Pending ROUTE-REFRESH requests (`Op::Refresh`, key `s:K:rr`): stored,
//! replaced, cleared, dropped when the session is written anew or removed,
//! the same in `MemoryStore` and in a real redis-server.

mod common;

use bytes::Bytes;
use common::RedisProc;
use holdfast_nsr::{
    MemoryStore, Op, SessionRecord, Store, StoredSession, TcpParams, SCHEMA_VERSION,
};
use holdfast_nsr_redis::RedisStore;
use std::time::Duration;

fn record() -> SessionRecord {
    SessionRecord {
        schema: SCHEMA_VERSION,
        instance: "default".into(),
        peer: "192.0.2.1".parse().unwrap(),
        local: "192.0.2.2:179".parse().unwrap(),
        remote: "192.0.2.1:30001".parse().unwrap(),
        outbound: false,
        open_sent: vec![4, 0xfd, 0xe8, 0, 90, 10, 0, 0, 2, 0],
        open_received: vec![4, 0xfd, 0xe9, 0, 90, 10, 0, 0, 1, 0],
        tcp: TcpParams {
            mss: 1460,
            snd_wscale: 7,
            rcv_wscale: 7,
            sack: true,
            timestamps: true,
            ts_val: 1,
            ts_unix_ms: 1_700_000_000_000,
            snd_wnd: 65535,
            rcv_wnd: 65535,
        },
        snd_seq: 0,
        rcv_seq: 0,
        established_unix_ms: 1_700_000_000_000,
    }
}

/// A ROUTE-REFRESH message for AFI `afi`, SAFI 1 (23 bytes).
fn rr(afi: u8) -> Vec<u8> {
    let mut m = vec![0xffu8; 16];
    m.extend_from_slice(&[0, 23, 5, 0, afi, 0, 1]);
    m
}

fn refresh(key: &str, pending: &[u8]) -> Op {
    Op::Refresh {
        key: key.into(),
        pending: Bytes::copy_from_slice(pending),
    }
}

fn session(key: &str) -> Op {
    Op::Session {
        key: key.into(),
        record: record(),
    }
}

fn received(key: &str, ack: u32) -> Op {
    Op::Received {
        key: key.into(),
        ack,
        updates: Bytes::new(),
        partial: Bytes::new(),
    }
}

fn load(s: &mut dyn Store, key: &str) -> Option<StoredSession> {
    s.load()
        .expect("load")
        .sessions
        .into_iter()
        .find(|x| x.key == key)
}

fn pending_requests_are_stored_and_cleared(s: &mut dyn Store) {
    let e = s.claim().unwrap();
    s.write(e, &[session("a"), session("b")]).unwrap();
    assert!(load(s, "a").unwrap().refresh.is_empty(), "none at first");
    // The request is written before the bytes that carried it are
    // confirmed (same batch here, as the peer task submits them).
    let two = [rr(1), rr(2)].concat();
    s.write(e, &[refresh("a", &rr(1)), received("a", 23)])
        .unwrap();
    assert_eq!(load(s, "a").unwrap().refresh, rr(1));
    assert!(load(s, "b").unwrap().refresh.is_empty(), "per session");
    s.write(e, &[refresh("a", &two)]).unwrap();
    assert_eq!(load(s, "a").unwrap().refresh, two);
    // Answered one by one.
    s.write(e, &[refresh("a", &rr(2))]).unwrap();
    assert_eq!(load(s, "a").unwrap().refresh, rr(2));
    s.write(e, &[refresh("a", &[])]).unwrap();
    assert!(load(s, "a").unwrap().refresh.is_empty());
    // Several in one batch: the last one holds.
    s.write(e, &[refresh("b", &rr(1)), refresh("b", &two)])
        .unwrap();
    assert_eq!(load(s, "b").unwrap().refresh, two);
    // Written anew (a new session, or a re-synchronisation): none pending.
    s.write(e, &[session("b")]).unwrap();
    assert!(load(s, "b").unwrap().refresh.is_empty());
    // Removed: gone with the session, and a new one starts clean.
    s.write(e, &[refresh("b", &rr(1))]).unwrap();
    s.write(e, &[Op::Remove { key: "b".into() }]).unwrap();
    assert!(load(s, "b").is_none());
    s.write(e, &[session("b")]).unwrap();
    assert!(load(s, "b").unwrap().refresh.is_empty());
    // A fenced writer changes nothing.
    s.write(e, &[refresh("a", &rr(1))]).unwrap();
    let other = s.claim().unwrap();
    assert!(s.write(e, &[refresh("a", &[])]).is_err());
    assert_eq!(load(s, "a").unwrap().refresh, rr(1));
    s.write(other, &[refresh("a", &[])]).unwrap();
    assert!(load(s, "a").unwrap().refresh.is_empty());
}

#[test]
fn memory_store_keeps_pending_refreshes() {
    let mut s = MemoryStore::new("rr");
    pending_requests_are_stored_and_cleared(&mut s);
}

#[test]
fn redis_store_keeps_pending_refreshes() {
    let redis = RedisProc::start();
    let mut s = RedisStore::connect(&redis.url(), "rr", Duration::from_millis(500)).unwrap();
    pending_requests_are_stored_and_cleared(&mut s);
    // The key of the layout, as documented.
    let e = s.epoch().unwrap();
    s.write(e, &[refresh("a", &rr(2))]).unwrap();
    let raw: Vec<u8> = redis::cmd("GET")
        .arg("hf:{rr}:s:a:rr")
        .query(&mut redis.raw())
        .unwrap();
    assert_eq!(raw, rr(2));
}
