//! The store on a Redis Cluster (`redis+cluster://`, issue 29): the whole
//! suite again on a 3-master, 3-replica cluster started by each test, then
//! what only a cluster does: the instance's slot on one master, a
//! resharding of that slot followed (`MOVED`), a master killed and its
//! replica promoted with every acknowledged write kept, `WAIT` counting
//! the shard's replicas, and the masters listed for a key scan.

use super::*;
use common::Cluster;

/// A cluster where each instance's handle finds its slot's master.
pub(super) struct ClusterEnv(pub(super) Cluster);

impl ClusterEnv {
    pub(super) fn new() -> Self {
        ClusterEnv(Cluster::start())
    }

    fn store(&self, instance: &str) -> RedisStore {
        RedisStore::connect(&self.0.url(), instance, TIMEOUT).expect("connect")
    }
}

impl Env for ClusterEnv {
    fn handle(&self, instance: &str) -> Box<dyn Store> {
        Box::new(self.store(instance))
    }
    fn put_raw_record(&self, instance: &str, key: &str, json: &[u8]) {
        let node = self.0.master_of(&format!("hf:{{{instance}}}:"));
        RedisEnv::put_raw_record_on(node, instance, key, json);
    }
    fn put_raw_originated(&self, instance: &str, key: &str, json: &[u8]) {
        let node = self.0.master_of(&format!("hf:{{{instance}}}:"));
        RedisEnv::put_raw_originated_on(node, instance, key, json);
    }
}

fn keys_on(node: &RedisProc) -> Vec<String> {
    let mut k: Vec<String> = redis::cmd("KEYS").arg("*").query(&mut node.raw()).unwrap();
    k.sort();
    k
}

/// Writes `n` more received chunks to session `a` until one succeeds (each
/// failure re-synchronised as a unit would: the session written anew);
/// returns the failures.
fn write_until_ok(s: &mut RedisStore, e: u64, rcv: &mut u32, within: Duration) -> Vec<String> {
    let t0 = Instant::now();
    let mut errors = Vec::new();
    loop {
        match s.write(e, &[received("a", *rcv + 19, &msg(19, 9))]) {
            Ok(()) => {
                *rcv += 19;
                return errors;
            }
            Err(StoreError::Unavailable(m)) => errors.push(m),
            Err(err) => panic!("{err} after {errors:#?}"),
        }
        assert!(
            t0.elapsed() < within,
            "no write within {within:?}: {errors:#?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn cluster_keeps_an_instance_on_its_slot_s_master() {
    let env = ClusterEnv::new();
    let mut s = env.store("edge-1");
    let e = s.claim().unwrap();
    s.write(e, &[session("a", 0, 0), received("a", 19, &msg(19, 1))])
        .unwrap();
    let master = env.0.master_of("hf:{edge-1}:");
    // The server's own hashing agrees with redis-rs's.
    let slot: u16 = redis::cmd("CLUSTER")
        .arg("KEYSLOT")
        .arg("hf:{edge-1}:epoch")
        .query(&mut master.raw())
        .unwrap();
    assert_eq!(slot, redis::cluster_routing::get_slot(b"hf:{edge-1}:"));
    let keys = keys_on(master);
    assert!(keys.contains(&"hf:{edge-1}:epoch".to_string()), "{keys:?}");
    assert!(
        keys.iter().all(|k| k.starts_with("hf:{edge-1}:")),
        "{keys:?}"
    );
    // Elsewhere only on the master's replica (perhaps not all of them yet).
    let holders: Vec<u16> = env
        .0
        .nodes
        .iter()
        .filter(|n| n.port != master.port)
        .filter(|n| {
            let k = keys_on(n);
            assert!(k.iter().all(|x| keys.contains(x)), "{}: {k:?}", n.port);
            !k.is_empty()
        })
        .map(|n| n.port)
        .collect();
    assert!(holders.len() <= 1, "{holders:?}");
    // The masters, for a key scan.
    let masters = RedisStore::masters(&env.0.url(), TIMEOUT).unwrap();
    assert_eq!(masters.len(), 3, "{masters:?}");
    assert!(masters.iter().all(|m| matches!(m, StoreUrl::Redis { .. })));
    // A seed that is down is skipped; none reachable is Unavailable.
    let StoreUrl::Cluster { mut nodes, .. } = env.0.url() else {
        unreachable!()
    };
    nodes.insert(0, ("127.0.0.1".into(), common::free_port()));
    let url = StoreUrl::Cluster {
        tls: false,
        nodes: nodes.clone(),
        username: None,
        password: None,
    };
    let mut s2 = RedisStore::connect(&url, "edge-1", TIMEOUT).unwrap();
    assert_eq!(s2.epoch().unwrap(), e);
    let dead = StoreUrl::Cluster {
        tls: false,
        nodes: nodes[..1].to_vec(),
        username: None,
        password: None,
    };
    match RedisStore::connect(&dead, "edge-1", TIMEOUT) {
        Err(StoreError::Unavailable(m)) => assert!(m.contains("no master of slot"), "{m}"),
        r => panic!("expected Unavailable, got {r:?}"),
    }
}

/// Moves `slot` from the master at `from` to the one at `to`, as
/// `redis-cli --cluster reshard` does: IMPORTING, MIGRATING, the keys
/// migrated, then the slot given to `to` on every master.
fn move_slot(env: &ClusterEnv, slot: u16, from: u16, to: u16) {
    let id = |port: u16| -> String {
        redis::cmd("CLUSTER")
            .arg("MYID")
            .query(&mut common::raw_conn(port))
            .unwrap()
    };
    let (from_id, to_id) = (id(from), id(to));
    let setslot = |port: u16, how: &str, node: &str| {
        let () = redis::cmd("CLUSTER")
            .arg("SETSLOT")
            .arg(slot)
            .arg(how)
            .arg(node)
            .query(&mut common::raw_conn(port))
            .unwrap_or_else(|e| panic!("SETSLOT {slot} {how} on {port}: {e}"));
    };
    setslot(to, "IMPORTING", &from_id);
    setslot(from, "MIGRATING", &to_id);
    loop {
        let keys: Vec<String> = redis::cmd("CLUSTER")
            .arg("GETKEYSINSLOT")
            .arg(slot)
            .arg(100)
            .query(&mut common::raw_conn(from))
            .unwrap();
        if keys.is_empty() {
            break;
        }
        let mut m = redis::cmd("MIGRATE");
        m.arg("127.0.0.1")
            .arg(to)
            .arg("")
            .arg(0)
            .arg(5000)
            .arg("KEYS")
            .arg(&keys);
        let () = m.query(&mut common::raw_conn(from)).unwrap();
    }
    for n in env.0.nodes.iter() {
        let role: Vec<redis::Value> = redis::cmd("ROLE").query(&mut n.raw()).unwrap();
        if role.first() == Some(&redis::Value::BulkString(b"master".to_vec())) {
            setslot(n.port, "NODE", &to_id);
        }
    }
}

#[test]
fn cluster_follows_its_slot_to_a_new_master() {
    let env = ClusterEnv::new();
    let mut s = env.store("edge-1");
    let e = s.claim().unwrap();
    s.write(e, &[session("a", 0, 0), received("a", 19, &msg(19, 1))])
        .unwrap();
    let prefix = "hf:{edge-1}:";
    let from = env.0.master_of(prefix).port;
    let to = env
        .0
        .nodes
        .iter()
        .map(|n| n.port)
        .find(|p| {
            *p != from && {
                let role: Vec<redis::Value> =
                    redis::cmd("ROLE").query(&mut common::raw_conn(*p)).unwrap();
                role.first() == Some(&redis::Value::BulkString(b"master".to_vec()))
            }
        })
        .unwrap();
    move_slot(
        &env,
        redis::cluster_routing::get_slot(prefix.as_bytes()),
        from,
        to,
    );
    env.0.wait_ok(Duration::from_secs(10));
    // The store's connection still goes to the old master: MOVED, the
    // write not applied, and the next one goes to the new master.
    let mut rcv = 19;
    let errors = write_until_ok(&mut s, e, &mut rcv, Duration::from_secs(10));
    assert!(
        errors.iter().any(|m| m.contains("MOVED")),
        "no MOVED seen: {errors:?}"
    );
    assert_eq!(env.0.master_of(prefix).port, to);
    let on_to: Option<String> = redis::cmd("GET")
        .arg("hf:{edge-1}:s:a:rcv")
        .query(&mut common::raw_conn(to))
        .unwrap();
    assert_eq!(on_to.as_deref(), Some("38"));
    assert!(keys_on(env.0.nodes.iter().find(|n| n.port == from).unwrap()).is_empty());
    let a = find(&s.load().unwrap(), "a").clone();
    assert_eq!(concat(&a.adj_in), [msg(19, 1), msg(19, 9)].concat());
}

#[test]
fn cluster_failover_keeps_every_acknowledged_write() {
    let mut env = ClusterEnv::new();
    let prefix = "hf:{edge-1}:";
    let mut s = env.store("edge-1");
    // `WAIT 1`: that shard's replica.
    s.set_wait_replicas(1);
    s.set_wait_timeout(Duration::from_millis(400));
    let e = s.claim().unwrap();
    s.write(e, &[session("a", 0, 0)]).unwrap();
    let mut rcv = 0;
    let mut want = Vec::new();
    for i in 0..200u8 {
        s.write(e, &[received("a", rcv + 19, &msg(19, i))]).unwrap();
        rcv += 19;
        want.push(msg(19, i));
    }
    let dead = env.0.master_index_of(prefix);
    env.0.nodes[dead].kill();
    let t0 = Instant::now();
    // No replica is left to wait for until the dead node returns.
    s.set_wait_replicas(0);
    let errors = write_until_ok(&mut s, e, &mut rcv, Duration::from_secs(30));
    let promoted = t0.elapsed();
    want.push(msg(19, 9));
    eprintln!(
        "promoted and written after {promoted:?}; {} failed writes, first {:?}, last {:?}",
        errors.len(),
        errors.first(),
        errors.last()
    );
    // The store found the promoted replica; the other nodes learn of it
    // by gossip, one after another: wait until every live one agrees.
    env.0.wait_ok(Duration::from_secs(10));
    assert_ne!(env.0.master_of(prefix).port, env.0.nodes[dead].port);
    let a = find(&s.load().unwrap(), "a").clone();
    assert_eq!(a.rcv, rcv);
    assert_eq!(concat(&a.adj_in), want.concat());
    assert_eq!(s.epoch().unwrap(), e);
    // Waiting for a replica that is not there: Unavailable.
    s.set_wait_replicas(1);
    match s.write(e, &[received("a", rcv + 19, &msg(19, 10))]) {
        Err(StoreError::Unavailable(m)) => assert!(m.contains("of 1 replica(s) within"), "{m}"),
        r => panic!("expected Unavailable, got {r:?}"),
    }
    // The dead node back (its nodes.conf kept): a replica of the new
    // master, and writes are acknowledged by it again.
    env.0.nodes[dead].restart();
    env.0.wait_ok(Duration::from_secs(20));
    let t0 = Instant::now();
    loop {
        let session = [session("a", 0, 0), received("a", 19, &msg(19, 1))];
        if s.write(e, &session).is_ok() {
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "the returned node never acknowledged"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    // A replica serves reads of its master's keys after READONLY.
    let mut c = env.0.nodes[dead].raw();
    let () = redis::cmd("READONLY").query(&mut c).unwrap();
    let replica_rcv: Option<String> = redis::cmd("GET")
        .arg("hf:{edge-1}:s:a:rcv")
        .query(&mut c)
        .unwrap();
    assert_eq!(replica_rcv.as_deref(), Some("19"));
}
