//! The Redis-only part of the store suite: outages, key layout, large
//! batches, pipelines, authentication, Sentinel, non-stop BFD records and
//! the routes added at run time.

use super::*;

#[test]
fn redis_key_layout() {
    let env = RedisEnv::new();
    let mut s = env.store("vrf-1");
    assert_eq!(s.key_prefix(), "hf:{vrf-1}:");
    let e = s.claim().unwrap();
    s.write(
        e,
        &[
            session("10.0.0.1", 1000, 2000),
            received("10.0.0.1", 2019, &msg(19, 1)),
            sent("10.0.0.1", 1023, &msg(23, 2)),
        ],
    )
    .unwrap();
    let mut c = env.0.raw();
    let p = "hf:{vrf-1}:s:10.0.0.1:";
    let mut keys: Vec<String> = redis::cmd("KEYS").arg("*").query(&mut c).unwrap();
    keys.sort();
    let mut want: Vec<String> = ["epoch", "logver", "sessions"]
        .iter()
        .map(|k| format!("hf:{{vrf-1}}:{k}"))
        .chain(
            ["in", "out", "rcv", "rec", "tail", "una", "ver"]
                .iter()
                .map(|k| format!("{p}{k}")),
        )
        .collect();
    want.sort();
    assert_eq!(keys, want);
    let get = |c: &mut redis::Connection, k: &str| -> Vec<u8> {
        redis::cmd("GET").arg(k).query(c).unwrap()
    };
    assert_eq!(get(&mut c, "hf:{vrf-1}:epoch"), b"1");
    assert_eq!(get(&mut c, &format!("{p}rcv")), b"2019");
    assert_eq!(get(&mut c, &format!("{p}una")), b"1000");
    let rec: serde_json::Value = serde_json::from_slice(&get(&mut c, &format!("{p}rec"))).unwrap();
    assert_eq!(rec["schema"], SCHEMA_VERSION);
    let tail: Vec<Vec<u8>> = redis::cmd("LRANGE")
        .arg(format!("{p}tail"))
        .arg(0)
        .arg(-1)
        .query(&mut c)
        .unwrap();
    let mut chunk = 1023u32.to_be_bytes().to_vec();
    chunk.extend_from_slice(&msg(23, 2));
    assert_eq!(tail, vec![chunk]);
    let members: Vec<String> = redis::cmd("SMEMBERS")
        .arg("hf:{vrf-1}:sessions")
        .query(&mut c)
        .unwrap();
    assert_eq!(members, ["10.0.0.1"]);
}

#[test]
fn redis_script_reloaded_after_flush() {
    let env = RedisEnv::new();
    let mut s = env.store("noscript");
    let e = s.claim().unwrap();
    s.write(e, &[session("a", 0, 0)]).unwrap();
    let _: () = redis::cmd("SCRIPT")
        .arg("FLUSH")
        .query(&mut env.0.raw())
        .unwrap();
    // EVALSHA fails with NOSCRIPT; EVAL is sent instead (and caches it).
    s.write(e, &[received("a", 19, &msg(19, 1))]).unwrap();
    s.write(e, &[received("a", 38, &msg(19, 1))]).unwrap();
    assert_eq!(find(&s.load().unwrap(), "a").rcv, 38);
    // Fencing through the EVAL path too.
    let _: () = redis::cmd("SCRIPT")
        .arg("FLUSH")
        .query(&mut env.0.raw())
        .unwrap();
    assert!(matches!(
        s.write(e + 5, &[remove("a")]),
        Err(StoreError::Fenced {
            current: 1,
            ours: 6
        })
    ));
}

#[test]
fn redis_pipeline_ends_at_the_first_error() {
    let env = RedisEnv::new();
    let mut s = env.store("pipe");
    let e = s.claim().unwrap();
    s.write(e, &[session("a", 0, 0)]).unwrap();
    // The middle write is fenced (a wrong epoch): the one before it is
    // stored, the pipeline ends there, and nothing more is read of it.
    s.send_write(e, &[received("a", 23, &msg(23, 1))]).unwrap();
    s.send_write(e + 5, &[received("a", 46, &msg(23, 2))])
        .unwrap();
    s.send_write(e, &[received("a", 69, &msg(23, 3))]).unwrap();
    s.recv_write().unwrap();
    assert!(matches!(
        s.recv_write(),
        Err(StoreError::Fenced { current, ours }) if current == e && ours == e + 5
    ));
    assert!(matches!(s.recv_write(), Err(StoreError::Unavailable(_))));
    // A new connection: the first write is there, the fenced one is not.
    let a = find(&s.load().unwrap(), "a").clone();
    assert!(a.rcv == 23 || a.rcv == 69, "rcv {}", a.rcv);
    assert_eq!(a.adj_in[0], Bytes::from(msg(23, 1)));
    assert!(!a.adj_in.contains(&Bytes::from(msg(23, 2))));

    // A call that waits for its answer abandons the writes in flight.
    s.write(e, &[session("a", 0, 0)]).unwrap();
    s.send_write(e, &[received("a", 23, &msg(23, 4))]).unwrap();
    assert_eq!(s.epoch().unwrap(), e);
    assert!(matches!(s.recv_write(), Err(StoreError::Unavailable(_))));

    // NOSCRIPT with a write in flight behind it: the write fails (the one
    // behind would run before a resent one), and the next write, on a new
    // connection that loads the script again, succeeds.
    s.write(e, &[session("a", 0, 0)]).unwrap();
    let _: () = redis::cmd("SCRIPT")
        .arg("FLUSH")
        .query(&mut env.0.raw())
        .unwrap();
    s.send_write(e, &[received("a", 23, &msg(23, 5))]).unwrap();
    s.send_write(e, &[received("a", 46, &msg(23, 6))]).unwrap();
    match s.recv_write() {
        Err(StoreError::Unavailable(m)) => assert!(m.contains("NOSCRIPT"), "{m}"),
        other => panic!("expected NOSCRIPT as Unavailable, got {other:?}"),
    }
    assert!(matches!(s.recv_write(), Err(StoreError::Unavailable(_))));
    s.write(e, &[session("a", 0, 0), received("a", 23, &msg(23, 7))])
        .unwrap();
    let a = find(&s.load().unwrap(), "a").clone();
    assert_eq!((a.rcv, a.adj_in), (23, vec![Bytes::from(msg(23, 7))]));
}

#[test]
fn redis_large_batches_split_and_fenced() {
    let env = RedisEnv::new();
    let mut s = env.store("split");
    let e = s.claim().unwrap();
    s.set_batch_limit(100);
    // 50 sessions of one update each: 100 steps, each over the limit.
    let mut ops = vec![];
    for i in 0..50u32 {
        let k = format!("s{i:02}");
        ops.push(session(&k, 0, 0));
        ops.push(received(&k, 40, &msg(40, i as u8)));
    }
    s.write(e, &ops).unwrap();
    let st = s.load().unwrap();
    assert_eq!(st.sessions.len(), 50);
    for (i, x) in st.sessions.iter().enumerate() {
        assert_eq!(x.key, format!("s{i:02}"));
        assert_eq!(x.adj_in, vec![Bytes::from(msg(40, i as u8))]);
    }
    // A big payload in one call (default limit): 16 MiB.
    s.set_batch_limit(holdfast_nsr_redis::DEFAULT_BATCH_LIMIT);
    let big = vec![0x5au8; 16 << 20];
    s.write(e, &[snapshot("s00", &big, &big)]).unwrap();
    let a = find(&s.load().unwrap(), "s00").clone();
    assert_eq!(a.adj_in[0].len(), big.len());
    // Every part of a split batch is fenced.
    s.set_batch_limit(100);
    let mut other = env.store("split");
    other.claim().unwrap();
    assert!(matches!(s.write(e, &ops), Err(StoreError::Fenced { .. })));
}

#[test]
fn redis_outage_killed_then_restarted() {
    let mut env = RedisEnv::new();
    let mut s = env.store("outage");
    let e = s.claim().unwrap();
    s.write(e, &[session("a", 0, 0)]).unwrap();
    env.0.kill();
    for _ in 0..2 {
        let t0 = Instant::now();
        let r = s.write(e, &[received("a", 19, &msg(19, 1))]);
        let took = t0.elapsed();
        assert!(matches!(r, Err(StoreError::Unavailable(_))), "{r:?}");
        assert!(took < Duration::from_secs(2), "took {took:?}");
    }
    assert!(matches!(s.load(), Err(StoreError::Unavailable(_))));
    assert!(matches!(s.reconnect(), Err(StoreError::Unavailable(_))));
    env.0.restart();
    s.reconnect().unwrap();
    // No persistence in this test server: the state (and epoch) is gone.
    assert_eq!(s.epoch().unwrap(), 0);
    s.write(0, &[session("a", 0, 0), received("a", 19, &msg(19, 1))])
        .unwrap();
    assert_eq!(find(&s.load().unwrap(), "a").rcv, 19);

    // Without an explicit reconnect, the next call connects again.
    env.0.kill();
    assert!(matches!(s.epoch(), Err(StoreError::Unavailable(_))));
    env.0.restart();
    s.write(0, &[session("b", 0, 0)]).unwrap();
}

#[test]
fn redis_outage_hung_server_times_out() {
    let env = RedisEnv::new();
    let mut s = env.store("hang");
    let e = s.claim().unwrap();
    s.write(e, &[session("a", 0, 0)]).unwrap();
    env.0.signal(Signal::SIGSTOP);
    let t0 = Instant::now();
    let r = s.write(e, &[received("a", 19, &msg(19, 1))]);
    let took = t0.elapsed();
    assert!(matches!(r, Err(StoreError::Unavailable(_))), "{r:?}");
    assert!(took < Duration::from_secs(2), "write took {took:?}");
    assert!(took >= TIMEOUT / 2, "{took:?}");
    // Connecting to a hung server: TCP accepts, nothing answers.
    let t0 = Instant::now();
    let r = RedisStore::connect(&env.0.url(), "hang", TIMEOUT);
    assert!(matches!(r, Err(StoreError::Unavailable(_))), "{r:?}");
    assert!(t0.elapsed() < Duration::from_secs(2), "{:?}", t0.elapsed());
    let t0 = Instant::now();
    assert!(matches!(s.load(), Err(StoreError::Unavailable(_))));
    assert!(t0.elapsed() < Duration::from_secs(2));
    env.0.signal(Signal::SIGCONT);
    s.reconnect().unwrap();
    s.write(e, &[received("a", 38, &msg(19, 2))]).unwrap();
    let a = find(&s.load().unwrap(), "a").clone();
    assert_eq!(a.rcv, 38);
    // The write that timed out may or may not have been applied by the
    // resumed server (the known issue of an ambiguous outcome).
    assert!(a.adj_in.len() == 1 || a.adj_in.len() == 2, "{:?}", a.adj_in);
}

#[test]
fn redis_connect_refused_is_quick() {
    let port = common::free_port();
    let url = StoreUrl::Redis {
        tls: false,
        host: "127.0.0.1".into(),
        port,
        db: 0,
        username: None,
        password: None,
    };
    let t0 = Instant::now();
    let r = RedisStore::connect(&url, "x", TIMEOUT);
    assert!(matches!(r, Err(StoreError::Unavailable(_))), "{r:?}");
    assert!(t0.elapsed() < Duration::from_secs(2));
}

#[test]
fn redis_auth_and_db() {
    let server = RedisProc::start_with(&["--requirepass", "s3cret"]);
    let url = |password: Option<&str>, db: u32| StoreUrl::Redis {
        tls: false,
        host: "127.0.0.1".into(),
        port: server.port,
        db,
        username: password.map(|_| "default".to_string()),
        password: password.map(str::to_string),
    };
    let r = RedisStore::connect(&url(None, 0), "auth", TIMEOUT);
    assert!(matches!(r, Err(StoreError::Unavailable(_))), "{r:?}");
    let r = RedisStore::connect(&url(Some("wrong"), 0), "auth", TIMEOUT);
    assert!(matches!(r, Err(StoreError::Unavailable(_))), "{r:?}");
    // The password is not in messages.
    let shown = format!(
        "{:?} {}",
        url(Some("s3cret"), 3),
        url(Some("s3cret"), 3).redacted()
    );
    assert!(!shown.contains("s3cret"), "{shown}");
    let mut s = RedisStore::connect(&url(Some("s3cret"), 3), "auth", TIMEOUT).unwrap();
    let e = s.claim().unwrap();
    s.write(e, &[session("a", 0, 0)]).unwrap();
    assert_eq!(s.load().unwrap().sessions.len(), 1);
    // It went to database 3.
    let mut c = redis::Client::open(format!("redis://:s3cret@127.0.0.1:{}/3", server.port))
        .unwrap()
        .get_connection()
        .unwrap();
    let n: u64 = redis::cmd("DBSIZE").query(&mut c).unwrap();
    assert_eq!(n, 7, "epoch, sessions, logver, rec, rcv, una, ver");
    // A reconnect authenticates again.
    s.reconnect().unwrap();
    assert_eq!(s.epoch().unwrap(), e);
}

#[test]
fn redis_sentinel_resolves_master_and_follows_failover() {
    let mut master = RedisProc::start_with(&["--repl-diskless-sync-delay", "0"]);
    let replica = RedisProc::start();
    let _: () = redis::cmd("REPLICAOF")
        .arg("127.0.0.1")
        .arg(master.port)
        .query(&mut replica.raw())
        .unwrap();
    // The replica streaming before the sentinel starts, so that the
    // sentinel's first INFO of the master lists it (it polls every 10 s).
    // After the initial sync the master streams to a replica only from
    // its first ACK (up to a second later): wait for the sync, then for a
    // key written after it.
    let until = Instant::now() + Duration::from_secs(20);
    loop {
        let info: String = redis::cmd("INFO")
            .arg("replication")
            .query(&mut replica.raw())
            .unwrap();
        if info.contains("master_link_status:up") {
            break;
        }
        assert!(Instant::now() < until, "replica not in sync: {info}");
        std::thread::sleep(Duration::from_millis(20));
    }
    let _: () = redis::cmd("SET")
        .arg("probe")
        .arg("after-sync")
        .query(&mut master.raw())
        .unwrap();
    loop {
        let probe: Option<String> = redis::cmd("GET")
            .arg("probe")
            .query(&mut replica.raw())
            .unwrap();
        if probe.as_deref() == Some("after-sync") {
            break;
        }
        assert!(Instant::now() < until, "replica not streaming");
        std::thread::sleep(Duration::from_millis(20));
    }
    let sentinel = RedisProc::start_sentinel("hfmaster", master.port);
    let dead = common::free_port();
    let url = StoreUrl::Sentinel {
        // A dead sentinel first: skipped.
        sentinels: vec![
            ("127.0.0.1".into(), dead),
            ("127.0.0.1".into(), sentinel.port),
        ],
        master: "hfmaster".into(),
    };
    let mut s = RedisStore::connect(&url, "sent", Duration::from_secs(1)).unwrap();
    // Writes return once the replica has them.
    s.set_wait_replicas(1);
    let e = s.claim().unwrap();
    s.write(e, &[session("a", 0, 0), received("a", 19, &msg(19, 1))])
        .unwrap();
    let on_replica: Option<String> = redis::cmd("GET")
        .arg("hf:{sent}:s:a:rcv")
        .query(&mut replica.raw())
        .unwrap();
    assert_eq!(on_replica.as_deref(), Some("19"));
    // An unknown master name is Unavailable.
    let bad = StoreUrl::Sentinel {
        sentinels: vec![("127.0.0.1".into(), sentinel.port)],
        master: "nope".into(),
    };
    assert!(matches!(
        RedisStore::connect(&bad, "sent", TIMEOUT),
        Err(StoreError::Unavailable(_))
    ));
    // The sentinel must know the replica to promote it.
    let until = Instant::now() + Duration::from_secs(20);
    loop {
        let replicas: Vec<Vec<(String, String)>> = redis::cmd("SENTINEL")
            .arg("replicas")
            .arg("hfmaster")
            .query(&mut sentinel.raw())
            .unwrap_or_default();
        let ok = replicas.iter().any(|r| {
            r.iter()
                .any(|(k, v)| k == "master-link-status" && v == "ok")
        });
        if ok {
            break;
        }
        assert!(
            Instant::now() < until,
            "replica not seen by the sentinel:\n{}",
            sentinel.log()
        );
        std::thread::sleep(Duration::from_millis(100));
    }

    // The master dies: the sentinel sees it down after 1 s and promotes
    // the replica; meanwhile writes fail (refused, then "not a master"
    // until the promotion shows), then go to the new master, which has no
    // replica to wait for.
    master.kill();
    s.set_wait_replicas(0);
    let t0 = Instant::now();
    let mut errors = vec![];
    loop {
        match s.write(e, &[received("a", 38, &msg(19, 2))]) {
            Ok(()) => break,
            Err(StoreError::Unavailable(m)) => errors.push(m),
            Err(err) => panic!("{err} after {errors:#?}"),
        }
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "no failover: {errors:#?}\n{}",
            sentinel.log()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    eprintln!(
        "failover took {:?}; {} failed writes, first {:?}, last {:?}",
        t0.elapsed(),
        errors.len(),
        errors.first(),
        errors.last()
    );
    let role: Vec<redis::Value> = redis::cmd("ROLE").query(&mut replica.raw()).unwrap();
    assert_eq!(role[0], redis::Value::BulkString(b"master".to_vec()));
    let a = find(&s.load().unwrap(), "a").clone();
    assert_eq!(a.rcv, 38);
    assert_eq!(concat(&a.adj_in), [msg(19, 1), msg(19, 2)].concat());
    assert_eq!(s.epoch().unwrap(), e);
    // Waiting for a replica that is not there: Unavailable, in time.
    s.set_wait_replicas(1);
    let t0 = Instant::now();
    match s.write(e, &[received("a", 57, &msg(19, 3))]) {
        Err(StoreError::Unavailable(m)) => assert!(m.contains("of 1 replica(s) within"), "{m}"),
        r => panic!("expected Unavailable, got {r:?}"),
    }
    assert!(t0.elapsed() < Duration::from_secs(2));
    drop(sentinel);
}

#[test]
fn redis_readonly_drops_connection() {
    let a = RedisProc::start();
    let b = RedisProc::start();
    let mut s = RedisStore::connect(&a.url(), "ro", TIMEOUT).unwrap();
    s.write(0, &[session("x", 0, 0)]).unwrap();
    let clients = |p: &RedisProc| -> usize {
        let list: String = redis::cmd("CLIENT")
            .arg("LIST")
            .query(&mut p.raw())
            .unwrap();
        list.lines()
            .filter(|l| l.contains("name=holdfast-nsr:ro "))
            .count()
    };
    assert_eq!(clients(&a), 1);
    // `a` is demoted under the store (without Sentinel's client kill).
    let _: () = redis::cmd("REPLICAOF")
        .arg("127.0.0.1")
        .arg(b.port)
        .query(&mut a.raw())
        .unwrap();
    match s.write(0, &[received("x", 1, b"u")]) {
        Err(StoreError::Unavailable(m)) => assert!(m.contains("READONLY"), "{m}"),
        r => panic!("expected Unavailable, got {r:?}"),
    }
    // The connection was dropped, so that a Sentinel store would look
    // for the master again.
    let until = Instant::now() + Duration::from_secs(2);
    while clients(&a) != 0 {
        assert!(Instant::now() < until, "connection kept");
        std::thread::sleep(Duration::from_millis(10));
    }
    // Reads still work on a replica (connecting again).
    assert_eq!(s.epoch().unwrap(), 0);
}

// ------------------------------------------------------ non-stop BFD

fn bfd_record(port: u16, state: &str) -> holdfast_nsr::BfdRecord {
    holdfast_nsr::BfdRecord {
        schema: SCHEMA_VERSION,
        instance: "default".into(),
        peer: "192.0.2.1".parse().unwrap(),
        local: format!("192.0.2.2:{port}").parse().unwrap(),
        multihop: false,
        state: serde_json::json!({ "state": state, "local_discriminator": 7 }),
    }
}

pub(super) fn bfd_records(env: &dyn Env) {
    let mut s = env.handle("bfd");
    let e = s.claim().unwrap();
    s.write(
        e,
        &[
            Op::Bfd {
                key: "default_192.0.2.1".into(),
                record: bfd_record(49152, "Down"),
            },
            Op::Bfd {
                key: "default_192.0.2.9".into(),
                record: bfd_record(49153, "Up"),
            },
            Op::Bfd {
                key: "default_192.0.2.1".into(),
                record: bfd_record(49152, "Up"),
            },
        ],
    )
    .unwrap();
    let st = s.load().unwrap();
    assert!(st.sessions.is_empty(), "BFD records are no BGP sessions");
    let keys: Vec<&str> = st.bfd.iter().map(|b| b.key.as_str()).collect();
    assert_eq!(keys, ["default_192.0.2.1", "default_192.0.2.9"]);
    assert_eq!(st.bfd[0].record, bfd_record(49152, "Up"), "last write wins");
    s.write(
        e,
        &[Op::BfdRemove {
            key: "default_192.0.2.9".into(),
        }],
    )
    .unwrap();
    assert_eq!(s.load().unwrap().bfd.len(), 1);
    // A fenced writer changes nothing.
    let mut backup = env.handle("bfd");
    let e2 = backup.claim().unwrap();
    let r = s.write(
        e,
        &[Op::Bfd {
            key: "default_192.0.2.1".into(),
            record: bfd_record(50000, "Down"),
        }],
    );
    assert!(matches!(r, Err(StoreError::Fenced { .. })), "{r:?}");
    let st = backup.load().unwrap();
    assert_eq!(st.bfd[0].record, bfd_record(49152, "Up"));
    // Records of a newer schema are refused.
    let mut newer = bfd_record(49152, "Up");
    newer.schema = SCHEMA_VERSION + 1;
    backup
        .write(
            e2,
            &[Op::Bfd {
                key: "default_192.0.2.1".into(),
                record: newer,
            }],
        )
        .unwrap();
    let r = backup.load();
    assert!(
        matches!(r, Err(StoreError::Schema { ref key, .. }) if key == "default_192.0.2.1"),
        "{r:?}"
    );
}

mod bfd_on_memory {
    #[test]
    fn bfd_records() {
        super::bfd_records(&super::MemEnv::new())
    }
}

mod bfd_on_redis {
    #[test]
    fn bfd_records() {
        super::bfd_records(&super::RedisEnv::new())
    }
}

// ------------------------------------------ routes added at run time

fn originated(instance: &str, prefixes: &[&str]) -> Op {
    Op::Originated {
        key: instance.into(),
        record: holdfast_nsr::OriginatedRecord {
            schema: SCHEMA_VERSION,
            instance: instance.into(),
            routes: prefixes
                .iter()
                .map(|p| serde_json::json!({ "prefix": p, "origin": 0, "as_path": [65001] }))
                .collect(),
        },
    }
}

fn prefixes(st: &holdfast_nsr::InstanceState, key: &str) -> Vec<String> {
    st.originated
        .iter()
        .find(|o| o.key == key)
        .map(|o| {
            o.record
                .routes
                .iter()
                .map(|r| r["prefix"].as_str().unwrap_or_default().to_string())
                .collect()
        })
        .unwrap_or_default()
}

pub(super) fn originated_records(env: &dyn Env) {
    let mut s = env.handle("orig");
    let e = s.claim().unwrap();
    // In one batch with session steps and BFD records: the last set of
    // each instance wins.
    s.write(
        e,
        &[
            originated("default", &["10.9.0.0/24"]),
            session("a", 1, 2),
            originated("blue", &["10.8.0.0/24"]),
            Op::Bfd {
                key: "default_192.0.2.1".into(),
                record: bfd_record(49152, "Up"),
            },
            originated("default", &["10.9.0.0/24", "10.9.1.0/24"]),
        ],
    )
    .unwrap();
    let st = s.load().unwrap();
    let keys: Vec<&str> = st.originated.iter().map(|o| o.key.as_str()).collect();
    assert_eq!(keys, ["blue", "default"], "sorted by key");
    assert_eq!(prefixes(&st, "default"), ["10.9.0.0/24", "10.9.1.0/24"]);
    assert_eq!(st.sessions.len(), 1);
    assert_eq!(st.bfd.len(), 1);
    assert_eq!(
        st.originated[1].record.routes[0]["as_path"],
        serde_json::json!([65001]),
        "the routes come back as written"
    );
    // load_since reads them whole, whatever the positions.
    let st = s.load_since(&HashMap::new()).unwrap();
    assert_eq!(prefixes(&st, "blue"), ["10.8.0.0/24"]);
    // An empty set removes the instance's record.
    s.write(e, &[originated("blue", &[])]).unwrap();
    let st = s.load().unwrap();
    assert_eq!(st.originated.len(), 1);
    assert_eq!(prefixes(&st, "blue"), Vec::<String>::new());
    // A fenced writer changes nothing.
    let mut backup = env.handle("orig");
    let e2 = backup.claim().unwrap();
    let r = s.write(e, &[originated("default", &[])]);
    assert!(matches!(r, Err(StoreError::Fenced { .. })), "{r:?}");
    assert_eq!(
        prefixes(&backup.load().unwrap(), "default"),
        ["10.9.0.0/24", "10.9.1.0/24"]
    );
    // A set of a newer schema is refused.
    let mut newer = originated("default", &["10.9.0.0/24"]);
    if let Op::Originated { record, .. } = &mut newer {
        record.schema = SCHEMA_VERSION + 1;
    }
    backup.write(e2, &[newer]).unwrap();
    let r = backup.load();
    assert!(
        matches!(r, Err(StoreError::Schema { ref key, found, .. }) if key == "default" && found == SCHEMA_VERSION + 1),
        "{r:?}"
    );
    // Also one that no longer parses as ours.
    let raw = format!(
        r#"{{"schema": {}, "instance": "default", "routes": "elsewhere"}}"#,
        SCHEMA_VERSION + 1
    );
    env.put_raw_originated("orig", "default", raw.as_bytes());
    let r = backup.load();
    assert!(
        matches!(r, Err(StoreError::Schema { ref key, .. }) if key == "default"),
        "{r:?}"
    );
    env.put_raw_originated("orig", "default", b"{not json");
    let r = backup.load();
    assert!(
        matches!(r, Err(StoreError::Corrupt { ref key, .. }) if key == "default"),
        "{r:?}"
    );
}

mod originated_on_memory {
    #[test]
    fn originated_records() {
        super::originated_records(&super::MemEnv::new())
    }
}

mod originated_on_redis {
    #[test]
    fn originated_records() {
        super::originated_records(&super::RedisEnv::new())
    }
}
