//! One behavioural suite run against `MemoryStore`, against a real
//! redis-server started by each test, as an ACL user, and on a Redis
//! Cluster; then Redis-only tests (outages, key layout, large batches,
//! authentication, Sentinel, the cluster's redirections and failover).

mod acl;
mod cluster;
#[path = "../common/mod.rs"]
mod common;
mod redis_only;

use bytes::Bytes;
use common::{RedisProc, Signal};
use holdfast_nsr::{
    InstanceState, LogEnd, LogPos, LogRange, MemoryStore, Op, SessionRecord, Store, StoreError,
    StoreUrl, StoredSession, TcpParams, SCHEMA_VERSION,
};
use holdfast_nsr_redis::RedisStore;
use redis::ConnectionLike as _;
use std::collections::HashMap;
use std::time::{Duration, Instant};

const TIMEOUT: Duration = Duration::from_millis(500);

// ---------------------------------------------------------------- helpers

fn record(key: &str, snd_seq: u32, rcv_seq: u32) -> SessionRecord {
    SessionRecord {
        schema: SCHEMA_VERSION,
        instance: "default".into(),
        peer: "192.0.2.1".parse().unwrap(),
        local: "192.0.2.2:179".parse().unwrap(),
        remote: format!("192.0.2.1:{}", 30000 + key.len()).parse().unwrap(),
        outbound: false,
        open_sent: vec![4, 0xfd, 0xe8, 0, 90, 10, 0, 0, 2, 0],
        open_received: vec![4, 0xfd, 0xe9, 0, 90, 10, 0, 0, 1, 0],
        tcp: TcpParams {
            mss: 1460,
            snd_wscale: 7,
            rcv_wscale: 7,
            sack: true,
            timestamps: true,
            ts_val: 123_456,
            ts_unix_ms: 1_700_000_000_000,
            snd_wnd: 65535,
            rcv_wnd: 65535,
        },
        snd_seq,
        rcv_seq,
        established_unix_ms: 1_700_000_000_000,
    }
}

fn session(key: &str, snd_seq: u32, rcv_seq: u32) -> Op {
    Op::Session {
        key: key.into(),
        record: record(key, snd_seq, rcv_seq),
    }
}

fn received(key: &str, ack: u32, updates: &[u8]) -> Op {
    Op::Received {
        key: key.into(),
        ack,
        updates: Bytes::copy_from_slice(updates),
        partial: bytes::Bytes::new(),
    }
}

fn sent(key: &str, seq_end: u32, bytes: &[u8]) -> Op {
    Op::Sent {
        key: key.into(),
        seq_end,
        bytes: Bytes::copy_from_slice(bytes),
    }
}

fn acked(key: &str, snd_una: u32) -> Op {
    Op::Acked {
        key: key.into(),
        snd_una,
    }
}

fn snapshot(key: &str, adj_in: &[u8], adj_out: &[u8]) -> Op {
    Op::Snapshot {
        key: key.into(),
        adj_in: Bytes::copy_from_slice(adj_in),
        adj_out: Bytes::copy_from_slice(adj_out),
    }
}

fn remove(key: &str) -> Op {
    Op::Remove { key: key.into() }
}

/// A fake BGP message of `len` bytes, filled with `tag`.
fn msg(len: usize, tag: u8) -> Vec<u8> {
    let mut m = vec![0xffu8; 16];
    m.extend_from_slice(&(len as u16).to_be_bytes());
    m.push(2);
    m.resize(len.max(19), tag);
    m
}

fn concat(chunks: &[Bytes]) -> Vec<u8> {
    chunks.iter().flat_map(|b| b.iter().copied()).collect()
}

fn find<'a>(state: &'a InstanceState, key: &str) -> &'a StoredSession {
    state
        .sessions
        .iter()
        .find(|s| s.key == key)
        .unwrap_or_else(|| panic!("session {key} not loaded: {state:?}"))
}

/// A backend on which the suite runs: hands out store handles on one
/// shared state.
trait Env {
    fn handle(&self, instance: &str) -> Box<dyn Store>;
    /// Stores raw record JSON for `key` (as another build would).
    fn put_raw_record(&self, instance: &str, key: &str, json: &[u8]);
    /// Stores raw JSON as the run-time routes of `key`.
    fn put_raw_originated(&self, instance: &str, key: &str, json: &[u8]);
}

struct MemEnv(MemoryStore);

impl MemEnv {
    fn new() -> Self {
        MemEnv(MemoryStore::new("unused"))
    }
}

impl Env for MemEnv {
    fn handle(&self, instance: &str) -> Box<dyn Store> {
        Box::new(self.0.for_instance(instance))
    }
    fn put_raw_record(&self, instance: &str, key: &str, json: &[u8]) {
        self.0.for_instance(instance).put_raw_record(key, json);
    }
    fn put_raw_originated(&self, instance: &str, key: &str, json: &[u8]) {
        self.0.for_instance(instance).put_raw_originated(key, json);
    }
}

struct RedisEnv(RedisProc);

impl RedisEnv {
    fn new() -> Self {
        RedisEnv(RedisProc::start())
    }
    fn store(&self, instance: &str) -> RedisStore {
        RedisStore::connect(&self.0.url(), instance, TIMEOUT).expect("connect")
    }
}

impl Env for RedisEnv {
    fn handle(&self, instance: &str) -> Box<dyn Store> {
        Box::new(self.store(instance))
    }
    fn put_raw_record(&self, instance: &str, key: &str, json: &[u8]) {
        RedisEnv::put_raw_record_on(&self.0, instance, key, json);
    }
    fn put_raw_originated(&self, instance: &str, key: &str, json: &[u8]) {
        RedisEnv::put_raw_originated_on(&self.0, instance, key, json);
    }
}

impl RedisEnv {
    fn put_raw_record_on(server: &RedisProc, instance: &str, key: &str, json: &[u8]) {
        let mut c = server.raw();
        let p = format!("hf:{{{instance}}}:");
        let _: () = redis::pipe()
            .cmd("SET")
            .arg(format!("{p}s:{key}:rec"))
            .arg(json)
            .ignore()
            .cmd("SET")
            .arg(format!("{p}s:{key}:rcv"))
            .arg("1")
            .ignore()
            .cmd("SET")
            .arg(format!("{p}s:{key}:una"))
            .arg("1")
            .ignore()
            .cmd("SADD")
            .arg(format!("{p}sessions"))
            .arg(key)
            .ignore()
            .query(&mut c)
            .expect("raw write");
    }
    fn put_raw_originated_on(server: &RedisProc, instance: &str, key: &str, json: &[u8]) {
        let mut c = server.raw();
        let _: () = redis::cmd("HSET")
            .arg(format!("hf:{{{instance}}}:originated"))
            .arg(key)
            .arg(json)
            .query(&mut c)
            .expect("raw write");
    }
}

// ------------------------------------------------------------- the suite

fn lifecycle(env: &dyn Env) {
    let mut s = env.handle("lifecycle");
    assert_eq!(s.epoch().unwrap(), 0);
    assert_eq!(s.load().unwrap(), InstanceState::default());
    // Writes before any claim use epoch 0 (a missing epoch is 0).
    s.write(0, &[session("a", 100, 200)]).unwrap();
    let e = s.claim().unwrap();
    assert_eq!(e, 1);
    assert_eq!(s.epoch().unwrap(), 1);
    s.write(e, &[]).unwrap();

    let st = s.load().unwrap();
    assert_eq!(st.epoch, 1);
    assert_eq!(st.sessions.len(), 1);
    let a = &st.sessions[0];
    assert_eq!(a.key, "a");
    assert_eq!(a.record, record("a", 100, 200));
    assert_eq!(a.rcv, 200);
    assert_eq!(a.snd_una, 100);
    assert!(a.adj_in.is_empty() && a.adj_out.is_empty() && a.send_tail.is_empty());
    assert_eq!(a.snd_nxt(), 100);
    assert_eq!(a.send_queue(), (100, vec![]));

    // Data, then a second session, then "a" restarts: replaced whole.
    s.write(
        e,
        &[
            received("a", 223, &msg(23, 1)),
            sent("a", 119, &msg(19, 2)),
            session("b", 5, 6),
        ],
    )
    .unwrap();
    let st = s.load().unwrap();
    assert_eq!(st.sessions.len(), 2);
    assert_eq!(find(&st, "a").adj_in.len(), 1);
    s.write(e, &[session("a", 7000, 8000)]).unwrap();
    let st = s.load().unwrap();
    let keys: Vec<&str> = st.sessions.iter().map(|s| s.key.as_str()).collect();
    assert_eq!(keys, ["a", "b"]);
    let a = find(&st, "a");
    assert_eq!(a.record.snd_seq, 7000);
    assert_eq!((a.rcv, a.snd_una), (8000, 7000));
    assert!(a.adj_in.is_empty() && a.adj_out.is_empty() && a.send_tail.is_empty());

    // A second handle sees the same.
    let mut other = env.handle("lifecycle");
    assert_eq!(other.load().unwrap(), st);
    s.reconnect().unwrap();
    assert_eq!(s.load().unwrap(), st);
}

fn received_sent_acked(env: &dyn Env) {
    let mut s = env.handle("rsa");
    let e = s.claim().unwrap();
    let (m1, m2, m3) = (msg(19, 1), msg(31, 2), msg(45, 3));
    s.write(e, &[session("p", 1000, 5000)]).unwrap();
    // Received: logs updates, moves rcv; empty updates only move rcv.
    s.write(e, &[received("p", 5019, &m1)]).unwrap();
    s.write(e, &[received("p", 5050, &[])]).unwrap();
    s.write(e, &[received("p", 5081, &m2)]).unwrap();
    // Sent, in separate writes: separate chunks.
    s.write(e, &[sent("p", 1019, &m1)]).unwrap();
    s.write(e, &[sent("p", 1050, &m2)]).unwrap();
    s.write(e, &[sent("p", 1095, &m3)]).unwrap();
    let st = s.load().unwrap();
    let p = find(&st, "p");
    assert_eq!(p.rcv, 5081);
    assert_eq!(
        p.adj_in,
        vec![Bytes::from(m1.clone()), Bytes::from(m2.clone())]
    );
    assert_eq!(
        p.adj_out,
        vec![
            Bytes::from(m1.clone()),
            Bytes::from(m2.clone()),
            Bytes::from(m3.clone())
        ]
    );
    assert_eq!(p.send_tail.len(), 3);
    assert_eq!(p.snd_una, 1000);
    assert_eq!(p.snd_nxt(), 1095);
    let all: Vec<u8> = [&m1[..], &m2, &m3].concat();
    assert_eq!(p.send_queue(), (1000, all.clone()));

    // Partly acknowledged first chunk: it stays, the queue starts inside it.
    s.write(e, &[acked("p", 1010)]).unwrap();
    let p = find(&s.load().unwrap(), "p").clone();
    assert_eq!(p.snd_una, 1010);
    assert_eq!(p.send_tail.len(), 3);
    assert_eq!(p.send_queue(), (1010, all[10..].to_vec()));
    // Exactly at the end of the first chunk: dropped.
    s.write(e, &[acked("p", 1019)]).unwrap();
    let p = find(&s.load().unwrap(), "p").clone();
    assert_eq!(p.send_tail.len(), 2);
    assert_eq!(p.send_queue(), (1019, all[19..].to_vec()));
    // Into the third.
    s.write(e, &[acked("p", 1060)]).unwrap();
    let p = find(&s.load().unwrap(), "p").clone();
    assert_eq!(p.send_tail.len(), 1);
    assert_eq!(p.send_queue(), (1060, all[60..].to_vec()));
    // Everything.
    s.write(e, &[acked("p", 1095)]).unwrap();
    let p = find(&s.load().unwrap(), "p").clone();
    assert!(p.send_tail.is_empty());
    assert_eq!(p.snd_nxt(), 1095);
    assert_eq!(p.send_queue(), (1095, vec![]));
    // The logs are not trimmed by acknowledgements.
    assert_eq!(p.adj_out.len(), 3);
}

fn wraparound(env: &dyn Env) {
    let mut s = env.handle("wrap");
    let e = s.claim().unwrap();
    let start = u32::MAX - 29; // 30 bytes before 2^32
    s.write(e, &[session("w", start, u32::MAX - 5)]).unwrap();
    let (m1, m2, m3) = (msg(20, 1), msg(20, 2), msg(20, 3));
    let e1 = start.wrapping_add(20); // 2^32 - 10
    let e2 = e1.wrapping_add(20); // 10: crosses the wrap
    let e3 = e2.wrapping_add(20); // 30
    assert!(e2 < e1);
    s.write(e, &[sent("w", e1, &m1)]).unwrap();
    s.write(e, &[sent("w", e2, &m2)]).unwrap();
    s.write(e, &[sent("w", e3, &m3)]).unwrap();
    // Received across the wrap too.
    s.write(e, &[received("w", 14, &msg(20, 9))]).unwrap();
    let all: Vec<u8> = [&m1[..], &m2, &m3].concat();
    let w = find(&s.load().unwrap(), "w").clone();
    assert_eq!(w.rcv, 14);
    assert_eq!(w.snd_nxt(), e3);
    assert_eq!(w.send_queue(), (start, all.clone()));

    // An acknowledgement numerically below the chunk ends (after the
    // wrap) still drops the first chunk, which ends before it.
    let una = e1.wrapping_add(5); // 2^32 - 5
    s.write(e, &[acked("w", una)]).unwrap();
    let w = find(&s.load().unwrap(), "w").clone();
    assert_eq!(w.send_tail.len(), 2);
    assert_eq!(w.send_queue(), (una, all[25..].to_vec()));
    let una = 3u32; // past the wrap, inside the second chunk
    s.write(e, &[acked("w", una)]).unwrap();
    let w = find(&s.load().unwrap(), "w").clone();
    assert_eq!(w.send_tail.len(), 2);
    assert_eq!(w.send_queue(), (3, all[33..].to_vec()));
    s.write(e, &[acked("w", e2)]).unwrap();
    let w = find(&s.load().unwrap(), "w").clone();
    assert_eq!(w.send_tail.len(), 1);
    assert_eq!(w.send_queue(), (e2, m3.clone()));
    s.write(e, &[acked("w", e3)]).unwrap();
    let w = find(&s.load().unwrap(), "w").clone();
    assert!(w.send_tail.is_empty());
    // snd_nxt with an empty tail: the later of snd_seq and snd_una in
    // sequence arithmetic (30 is after 2^32 - 30).
    assert_eq!(w.snd_nxt(), e3);
    assert_eq!(w.send_queue(), (e3, vec![]));
}

fn batches_merge(env: &dyn Env) {
    let mut s = env.handle("merge");
    let e = s.claim().unwrap();
    let ms: Vec<Vec<u8>> = (0..6).map(|i| msg(19 + i, i as u8)).collect();
    // One batch, two sessions interleaved.
    let mut seq_a = 10u32;
    let mut seq_b = 20u32;
    let mut ops = vec![session("a", seq_a, 0), session("b", seq_b, 0)];
    let mut ack = 0u32;
    for m in &ms {
        seq_a += m.len() as u32;
        seq_b += m.len() as u32;
        ack += m.len() as u32;
        ops.push(received("a", ack, m));
        ops.push(sent("b", seq_b, m));
        ops.push(sent("a", seq_a, m));
    }
    ops.push(acked("a", 10 + 19));
    ops.push(acked("a", 10 + 19 + 20)); // merged with the previous
    s.write(e, &ops).unwrap();
    let st = s.load().unwrap();
    let all = ms.concat();
    let a = find(&st, "a");
    assert_eq!(a.rcv, ack);
    assert_eq!(concat(&a.adj_in), all);
    assert_eq!(concat(&a.adj_out), all);
    assert_eq!(a.snd_una, 49);
    assert_eq!(a.send_queue(), (49, all[39..].to_vec()));
    let b = find(&st, "b");
    assert_eq!(concat(&b.adj_out), all);
    assert_eq!(b.send_queue(), (20, all.clone()));
    // Merged: one chunk per log.
    assert_eq!(
        (a.adj_in.len(), a.adj_out.len(), b.send_tail.len()),
        (1, 1, 1)
    );

    // A non-contiguous Sent is not merged, and keeps its own seq_end.
    s.write(
        e,
        &[
            sent("b", seq_b + 100, &ms[0]),
            sent("b", seq_b + 200, &ms[1]),
        ],
    )
    .unwrap();
    let b = find(&s.load().unwrap(), "b").clone();
    assert_eq!(b.send_tail.len(), 3);
    assert_eq!(b.snd_nxt(), seq_b + 200);
    // A Remove between two ops of a session is kept in order.
    s.write(
        e,
        &[
            received("a", 1, b"x"),
            remove("a"),
            session("a", 1, 2),
            received("a", 3, b"y"),
        ],
    )
    .unwrap();
    let a = find(&s.load().unwrap(), "a").clone();
    assert_eq!(a.adj_in, vec![Bytes::from_static(b"y")]);
    assert_eq!(a.rcv, 3);
}

fn snapshot_replaces(env: &dyn Env) {
    let mut s = env.handle("snap");
    let e = s.claim().unwrap();
    s.write(
        e,
        &[
            session("s", 0, 0),
            received("s", 19, &msg(19, 1)),
            sent("s", 19, &msg(19, 2)),
        ],
    )
    .unwrap();
    s.write(e, &[received("s", 38, &msg(19, 3))]).unwrap();
    s.write(e, &[snapshot("s", &msg(40, 7), &msg(50, 8))])
        .unwrap();
    let x = find(&s.load().unwrap(), "s").clone();
    assert_eq!(x.adj_in, vec![Bytes::from(msg(40, 7))]);
    assert_eq!(x.adj_out, vec![Bytes::from(msg(50, 8))]);
    // The send tail is untouched by a snapshot.
    assert_eq!(x.send_queue(), (0, msg(19, 2)));
    assert_eq!(x.rcv, 38);
    // Appends after a snapshot go after it.
    s.write(e, &[received("s", 57, &msg(19, 4))]).unwrap();
    let x = find(&s.load().unwrap(), "s").clone();
    assert_eq!(x.adj_in.len(), 2);
    // Empty snapshots empty the logs.
    s.write(e, &[snapshot("s", &[], &[])]).unwrap();
    let x = find(&s.load().unwrap(), "s").clone();
    assert!(x.adj_in.is_empty() && x.adj_out.is_empty());
    assert_eq!(x.send_tail.len(), 1);
}

fn remove_forgets(env: &dyn Env) {
    let mut s = env.handle("rm");
    let e = s.claim().unwrap();
    s.write(
        e,
        &[
            session("x", 0, 0),
            session("y", 0, 0),
            received("x", 19, &msg(19, 1)),
            sent("x", 19, &msg(19, 1)),
        ],
    )
    .unwrap();
    s.write(e, &[remove("x")]).unwrap();
    let st = s.load().unwrap();
    assert_eq!(st.sessions.len(), 1);
    assert_eq!(st.sessions[0].key, "y");
    // Removing an unknown session is harmless; re-creating starts clean.
    s.write(e, &[remove("nope")]).unwrap();
    s.write(e, &[session("x", 5, 6)]).unwrap();
    let x = find(&s.load().unwrap(), "x").clone();
    assert!(x.adj_in.is_empty() && x.adj_out.is_empty() && x.send_tail.is_empty());
    assert_eq!((x.rcv, x.snd_una), (6, 5));
}

fn fencing(env: &dyn Env) {
    let mut primary = env.handle("fence");
    let mut backup = env.handle("fence");
    let e1 = primary.claim().unwrap();
    primary
        .write(e1, &[session("f", 0, 0), received("f", 19, &msg(19, 1))])
        .unwrap();
    let before = primary.load().unwrap();
    let e2 = backup.claim().unwrap();
    assert_eq!(e2, e1 + 1);
    let err = primary
        .write(
            e1,
            &[
                received("f", 38, &msg(19, 2)),
                session("g", 0, 0),
                remove("f"),
            ],
        )
        .unwrap_err();
    match err {
        StoreError::Fenced { current, ours } => assert_eq!((current, ours), (e2, e1)),
        e => panic!("expected Fenced, got {e:?}"),
    }
    let after = backup.load().unwrap();
    assert_eq!(after.epoch, e2);
    assert_eq!(
        after.sessions, before.sessions,
        "a fenced write changed nothing"
    );
    // An empty write checks the epoch too.
    assert!(matches!(
        primary.write(e1, &[]),
        Err(StoreError::Fenced { .. })
    ));
    backup.write(e2, &[]).unwrap();
    // Older and future epochs are refused too.
    assert!(matches!(
        primary.write(0, &[remove("f")]),
        Err(StoreError::Fenced { current, ours: 0 }) if current == e2
    ));
    assert!(matches!(
        primary.write(e2 + 1, &[remove("f")]),
        Err(StoreError::Fenced { .. })
    ));
    // The new owner writes; the old one sees the new epoch.
    backup.write(e2, &[received("f", 38, &msg(19, 2))]).unwrap();
    // A takeover ordered by the controller claims at least its token; a
    // token already passed still moves the epoch on by one.
    let mut third = env.handle("fence");
    let e3 = third.claim_at_least(e2 + 100).unwrap();
    assert_eq!(e3, e2 + 100);
    let e4 = third.claim_at_least(5).unwrap();
    assert_eq!(e4, e3 + 1);
    assert!(matches!(
        backup.write(e2, &[]),
        Err(StoreError::Fenced { .. })
    ));
    let mut backup = third;
    let e2 = e4;
    assert_eq!(primary.epoch().unwrap(), e2);
    let f = find(&primary.load().unwrap(), "f").clone();
    assert_eq!(f.rcv, 38);
    assert_eq!(f.adj_in.len(), 2);
    // Another instance is not fenced by this one.
    let mut other = env.handle("fence-other");
    assert_eq!(other.epoch().unwrap(), 0);
    other.write(0, &[session("f", 1, 1)]).unwrap();
    assert_eq!(backup.load().unwrap().sessions.len(), 1);
    assert_eq!(other.load().unwrap().sessions[0].record.snd_seq, 1);
}

fn schema(env: &dyn Env) {
    let mut s = env.handle("schema");
    let e = s.claim().unwrap();
    // Through the normal write path.
    let mut newer = record("n", 0, 0);
    newer.schema = SCHEMA_VERSION + 1;
    s.write(
        e,
        &[Op::Session {
            key: "n".into(),
            record: newer,
        }],
    )
    .unwrap();
    match s.load() {
        Err(StoreError::Schema {
            key,
            found,
            supported,
        }) => {
            assert_eq!(key, "n");
            assert_eq!((found, supported), (SCHEMA_VERSION + 1, SCHEMA_VERSION));
        }
        r => panic!("expected Schema, got {r:?}"),
    }
    s.write(e, &[remove("n")]).unwrap();
    assert!(s.load().unwrap().sessions.is_empty());

    // Raw: a newer build's record that does not even parse as ours.
    let raw = format!(
        r#"{{"schema": {}, "instance": "default", "something_new": [1, 2]}}"#,
        SCHEMA_VERSION + 1
    );
    env.put_raw_record("schema", "raw", raw.as_bytes());
    assert!(matches!(
        s.load(),
        Err(StoreError::Schema { ref key, found, .. }) if key == "raw" && found == SCHEMA_VERSION + 1
    ));
    // Garbage is Corrupt.
    env.put_raw_record("schema", "raw", b"{not json");
    assert!(matches!(s.load(), Err(StoreError::Corrupt { ref key, .. }) if key == "raw"));
    // An older schema with our fields loads.
    let mut old = record("raw", 0, 0);
    old.schema = 0;
    env.put_raw_record("schema", "raw", &serde_json::to_vec(&old).unwrap());
    let st = s.load().unwrap();
    assert_eq!(st.sessions[0].record.schema, 0);
}

/// A tiny deterministic generator (no dependency).
struct Lcg(u64);
impl Lcg {
    fn next(&mut self) -> u32 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (self.0 >> 33) as u32
    }
    fn below(&mut self, n: u32) -> u32 {
        self.next() % n
    }
}

/// Random batches, applied to `env`; returns the final state.
fn random_ops(env: &dyn Env, seed: u64) -> InstanceState {
    random_ops_pipelined(env, seed, 1)
}

/// [`random_ops`] with up to `window` writes in flight
/// ([`Store::send_write`], [`Store::recv_write`]).
fn random_ops_pipelined(env: &dyn Env, seed: u64, window: usize) -> InstanceState {
    let mut s = env.handle(&format!("random-{window}"));
    let e = s.claim().unwrap();
    let mut rng = Lcg(seed);
    let keys = ["a", "b", "c:d", "{e}"];
    let mut snd: [u32; 4] = [u32::MAX - 300, 0, 1 << 31, 77];
    let mut una = snd;
    let mut rcv: [u32; 4] = [5, u32::MAX - 100, 0, 9];
    let mut ops = vec![];
    for (i, k) in keys.iter().enumerate() {
        ops.push(session(k, snd[i], rcv[i]));
    }
    s.write(e, &ops).unwrap();
    let mut in_flight = 0;
    for _round in 0..60 {
        let mut ops = vec![];
        for _ in 0..rng.below(8) + 1 {
            let i = rng.below(4) as usize;
            let k = keys[i];
            match rng.below(20) {
                0..=5 => {
                    let m = msg(19 + rng.below(60) as usize, rng.next() as u8);
                    rcv[i] = rcv[i].wrapping_add(m.len() as u32);
                    ops.push(received(k, rcv[i], &m));
                }
                6 => {
                    rcv[i] = rcv[i].wrapping_add(19);
                    ops.push(received(k, rcv[i], &[]));
                }
                7..=12 => {
                    let m = msg(19 + rng.below(60) as usize, rng.next() as u8);
                    snd[i] = snd[i].wrapping_add(m.len() as u32);
                    ops.push(sent(k, snd[i], &m));
                }
                13..=16 => {
                    let outstanding = snd[i].wrapping_sub(una[i]);
                    una[i] = una[i].wrapping_add(rng.below(outstanding + 1));
                    ops.push(acked(k, una[i]));
                }
                17 => ops.push(snapshot(k, &msg(40, 1), &[])),
                18 => {
                    una[i] = snd[i];
                    ops.push(session(k, snd[i], rcv[i]));
                }
                _ => {
                    ops.push(remove(k));
                    una[i] = snd[i];
                    ops.push(session(k, snd[i], rcv[i]));
                }
            }
        }
        if window == 1 {
            s.write(e, &ops).unwrap();
            continue;
        }
        if in_flight == window {
            s.recv_write().unwrap();
            in_flight -= 1;
        }
        s.send_write(e, &ops).unwrap();
        in_flight += 1;
    }
    for _ in 0..in_flight {
        s.recv_write().unwrap();
    }
    let st = s.load().unwrap();
    // The restored send queue is always exactly [una, snd).
    for (i, k) in keys.iter().enumerate() {
        let x = find(&st, k);
        let (start, bytes) = x.send_queue();
        assert_eq!(start, una[i], "{k}");
        assert_eq!(start.wrapping_add(bytes.len() as u32), snd[i], "{k}");
        assert_eq!(x.rcv, rcv[i]);
    }
    st
}

fn random(env: &dyn Env) {
    random_ops(env, 1);
}

/// The same random batches, pipelined four deep, store the same state as
/// written one at a time.
fn pipelined(env: &dyn Env) {
    let unversioned = |mut st: InstanceState| {
        for s in &mut st.sessions {
            s.log.version = 0;
        }
        st
    };
    let one = unversioned(random_ops(env, 3));
    let four = unversioned(random_ops_pipelined(env, 3, 4));
    assert_eq!(one, four);
}

/// A reader following the logs (a preheated standby): only chunks after its
/// position come back while the logs keep their version; a compaction or a
/// session written anew changes the version and the logs come back whole.
fn follow_from_positions(env: &dyn Env) {
    let mut s = env.handle("follow");
    let e = s.claim().unwrap();
    s.write(
        e,
        &[
            session("a", 100, 200),
            received("a", 300, &msg(40, 1)),
            sent("a", 150, &msg(50, 2)),
        ],
    )
    .unwrap();
    let st = s.load_since(&HashMap::new()).unwrap();
    let a = find(&st, "a");
    let v = a.log.version;
    assert!(v > 0, "a version is set: {:?}", a.log);
    assert_eq!((a.log.adj_in, a.log.adj_out), (0, 0));
    assert_eq!((a.adj_in.len(), a.adj_out.len()), (1, 1));
    let pos = |version, adj_in, adj_out| {
        HashMap::from([(
            "a".to_string(),
            LogPos {
                version,
                adj_in,
                adj_out,
            },
        )])
    };
    // Nothing new.
    let st = s.load_since(&pos(v, 1, 1)).unwrap();
    let a = find(&st, "a");
    assert_eq!(a.log, pos(v, 1, 1)["a"]);
    assert!(a.adj_in.is_empty() && a.adj_out.is_empty());
    assert_eq!(a.rcv, 300, "everything but the logs is read whole");
    // Appended: only the new chunk.
    s.write(e, &[received("a", 400, &msg(30, 3))]).unwrap();
    let st = s.load_since(&pos(v, 1, 1)).unwrap();
    let a = find(&st, "a");
    assert_eq!(a.log, pos(v, 1, 1)["a"]);
    assert_eq!(concat(&a.adj_in), msg(30, 3));
    assert!(a.adj_out.is_empty());
    // Compacted: a new version, the logs whole.
    s.write(e, &[snapshot("a", &msg(60, 4), &msg(70, 5))])
        .unwrap();
    let st = s.load_since(&pos(v, 2, 1)).unwrap();
    let a = find(&st, "a");
    let v2 = a.log.version;
    assert_ne!(v2, v);
    assert_eq!((a.log.adj_in, a.log.adj_out), (0, 0));
    assert_eq!(concat(&a.adj_in), msg(60, 4));
    assert_eq!(concat(&a.adj_out), msg(70, 5));
    // Removed and written anew: yet another version, never one seen before.
    s.write(e, &[remove("a")]).unwrap();
    s.write(e, &[session("a", 1, 2)]).unwrap();
    let st = s.load_since(&pos(v2, 1, 1)).unwrap();
    let a = find(&st, "a");
    assert!(a.log.version != v && a.log.version != v2, "{:?}", a.log);
    assert_eq!((a.log.adj_in, a.log.adj_out), (0, 0));
    assert!(a.adj_in.is_empty() && a.adj_out.is_empty());
}

/// A takeover's two reads: the sessions without their logs (with where
/// the logs end), then the logs up to those ends, whatever was appended in
/// between; a log replaced in between, or a session gone, comes back as
/// `None`.
fn two_step_load(env: &dyn Env) {
    let mut s = env.handle("twostep");
    let e = s.claim().unwrap();
    s.write(
        e,
        &[
            session("a", 100, 200),
            received("a", 300, &msg(40, 1)),
            sent("a", 150, &msg(50, 2)),
            session("b", 100, 200),
            session("c", 100, 200),
            received("c", 300, &msg(20, 6)),
        ],
    )
    .unwrap();
    let (st, ends) = s.load_heads(&HashMap::new()).unwrap();
    let a = find(&st, "a");
    let v = a.log.version;
    assert_eq!(a.log, LogPos::start(v));
    assert!(a.adj_in.is_empty() && a.adj_out.is_empty());
    assert_eq!(a.rcv, 300, "everything but the logs is read");
    assert_eq!(
        ends["a"],
        LogEnd {
            adj_in: 1,
            adj_out: 1
        }
    );
    assert_eq!(ends["b"], LogEnd::default());
    let range = |key: &str, st: &InstanceState| LogRange {
        key: key.into(),
        from: find(st, key).log,
        end: ends[key],
    };
    let ranges = [range("a", &st), range("b", &st), range("c", &st)];
    // Appended after the first read: not in the second.
    s.write(
        e,
        &[
            received("a", 400, &msg(30, 3)),
            received("b", 400, &msg(30, 7)),
        ],
    )
    .unwrap();
    // Replaced after the first read: not read at all.
    s.write(e, &[snapshot("c", &msg(60, 4), &msg(70, 5))])
        .unwrap();
    let logs = s.load_logs(&ranges).unwrap();
    let a = logs[0].as_ref().expect("a's logs");
    assert_eq!(concat(&a.adj_in), msg(40, 1));
    assert_eq!(concat(&a.adj_out), msg(50, 2));
    let b = logs[1].as_ref().expect("b's logs");
    assert!(b.adj_in.is_empty() && b.adj_out.is_empty(), "{b:?}");
    assert_eq!(logs[2], None, "c was compacted in between");
    // A standby's position: only what follows it is counted and read.
    let from = HashMap::from([(
        "a".to_string(),
        LogPos {
            version: v,
            adj_in: 1,
            adj_out: 1,
        },
    )]);
    let (st, ends) = s.load_heads(&from).unwrap();
    assert_eq!(find(&st, "a").log, from["a"]);
    assert_eq!(
        ends["a"],
        LogEnd {
            adj_in: 2,
            adj_out: 1
        }
    );
    let logs = s
        .load_logs(&[LogRange {
            key: "a".into(),
            from: from["a"],
            end: ends["a"],
        }])
        .unwrap();
    let a = logs[0].as_ref().expect("a's logs");
    assert_eq!(concat(&a.adj_in), msg(30, 3));
    assert!(a.adj_out.is_empty());
    // A position of a version replaced since: from the start.
    let from = HashMap::from([(
        "c".to_string(),
        LogPos {
            version: v,
            adj_in: 1,
            adj_out: 0,
        },
    )]);
    let (st, ends) = s.load_heads(&from).unwrap();
    let c = find(&st, "c");
    assert_ne!(c.log.version, v);
    assert_eq!((c.log.adj_in, c.log.adj_out), (0, 0));
    assert_eq!(
        ends["c"],
        LogEnd {
            adj_in: 1,
            adj_out: 1
        }
    );
    // Gone in between.
    s.write(e, &[remove("a")]).unwrap();
    let logs = s.load_logs(&ranges[..1]).unwrap();
    assert_eq!(logs, vec![None]);
}

macro_rules! suite {
    ($($name:ident),* $(,)?) => {
        mod on_memory {
            $( #[test] fn $name() { super::$name(&super::MemEnv::new()) } )*
        }
        mod on_redis {
            $( #[test] fn $name() { super::$name(&super::RedisEnv::new()) } )*
        }
        mod on_redis_acl {
            $( #[test] fn $name() { super::$name(&super::acl::AclEnv::new()) } )*
        }
        mod on_redis_cluster {
            $( #[test] fn $name() { super::$name(&super::cluster::ClusterEnv::new()) } )*
        }
    };
}

suite!(
    lifecycle,
    received_sent_acked,
    wraparound,
    batches_merge,
    snapshot_replaces,
    remove_forgets,
    fencing,
    schema,
    random,
    pipelined,
    follow_from_positions,
    two_step_load,
);

// ------------------------------------------------- both backends agree

#[test]
fn memory_and_redis_store_the_same() {
    let redis = RedisEnv::new();
    for seed in [7, 8, 9] {
        // Log versions are drawn from different counters (Redis starts at
        // its clock); everything else must be equal.
        let unversioned = |mut st: InstanceState| {
            for s in &mut st.sessions {
                s.log.version = 0;
            }
            st
        };
        let m = unversioned(random_ops(&MemEnv::new(), seed));
        let r = unversioned(random_ops(&redis, seed));
        assert_eq!(m, r, "seed {seed}");
        redis.0.raw().req_command(&redis::cmd("FLUSHALL")).unwrap();
    }
}

#[test]
fn stores_are_send() {
    fn send<T: Send>() {}
    send::<RedisStore>();
    send::<MemoryStore>();
}

#[test]
fn memory_outage_is_unavailable() {
    let env = MemEnv::new();
    let mut s = env.handle("x");
    env.0.set_available(false);
    assert!(matches!(s.claim(), Err(StoreError::Unavailable(_))));
    assert!(matches!(s.reconnect(), Err(StoreError::Unavailable(_))));
    env.0.set_available(true);
    s.reconnect().unwrap();
    assert_eq!(s.claim().unwrap(), 1);
}
