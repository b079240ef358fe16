//! `RedisStore::set_wait_replicas` / `set_wait_timeout` (the speaker's
//! `[nsr] wait_replicas`, `wait_timeout_ms`): writes and claims that no
//! replica acknowledges in time fail as `Unavailable`, within the `WAIT`
//! timeout; with a replica they succeed and the replica has them.

mod common;

use common::RedisProc;
use holdfast_nsr::{Op, Store, StoreError};
use holdfast_nsr_redis::RedisStore;
use std::time::{Duration, Instant};

const TIMEOUT: Duration = Duration::from_millis(500);

fn remove(key: &str) -> Op {
    Op::Remove { key: key.into() }
}

#[test]
fn without_a_replica_writes_and_claims_fail_in_time() {
    let master = RedisProc::start();
    let mut s = RedisStore::connect(&master.url(), "w", TIMEOUT).unwrap();
    let e = s.claim().unwrap();
    s.set_wait_replicas(1);
    s.set_wait_timeout(Duration::from_millis(50));
    let t0 = Instant::now();
    match s.write(e, &[remove("x")]) {
        Err(StoreError::Unavailable(m)) => assert!(
            m.contains("write acknowledged by 0 of 1 replica(s) within 50 ms (WAIT)"),
            "{m}"
        ),
        r => panic!("expected Unavailable, got {r:?}"),
    }
    match s.claim() {
        Err(StoreError::Unavailable(m)) => {
            assert!(m.contains(&format!("claim of epoch {}", e + 1)), "{m}")
        }
        r => panic!("expected Unavailable, got {r:?}"),
    }
    match s.claim_at_least(10) {
        Err(StoreError::Unavailable(m)) => assert!(m.contains("claim of epoch 10"), "{m}"),
        r => panic!("expected Unavailable, got {r:?}"),
    }
    assert!(
        t0.elapsed() < Duration::from_millis(400),
        "{:?}",
        t0.elapsed()
    );
    // Not waiting again: the store works as before (the claims were
    // applied on the master: a claim that failed may still count).
    s.set_wait_replicas(0);
    assert_eq!(s.epoch().unwrap(), 10);
    s.write(10, &[remove("x")]).unwrap();
}

#[test]
fn with_a_replica_writes_and_claims_succeed_and_are_replicated() {
    let master = RedisProc::start();
    let replica = RedisProc::start_with(&["--replicaof", "127.0.0.1", &master.port.to_string()]);
    let mut s = RedisStore::connect(&master.url(), "w", TIMEOUT).unwrap();
    s.set_wait_replicas(1);
    s.set_wait_timeout(Duration::from_millis(200));
    // The replica may need a moment to attach: retry the first claim.
    let until = Instant::now() + Duration::from_secs(20);
    let e = loop {
        match s.claim() {
            Ok(e) => break e,
            Err(StoreError::Unavailable(m)) if Instant::now() < until => {
                eprintln!("{m}");
                std::thread::sleep(Duration::from_millis(100));
            }
            r => panic!("{r:?}"),
        }
    };
    s.write(e, &[remove("x")]).unwrap();
    let on_replica: Option<u64> = redis::cmd("GET")
        .arg("hf:{w}:epoch")
        .query(&mut replica.raw())
        .unwrap();
    assert_eq!(
        on_replica,
        Some(e),
        "the acknowledged claim is on the replica"
    );
}
