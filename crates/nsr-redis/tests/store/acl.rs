//! Redis ACL users (`holdfast_nsr_redis::acl`): the whole suite again with
//! each instance's store connected as its own user, limited by the rules
//! `acl::unit_user` makes (so every command the store sends, and every one
//! its scripts call, is in them); then a user reaching for another
//! instance's keys (`NOPERM`, the negative control without users), and a
//! relay's read-only user.

use super::redis_only::{bfd_records, originated_records};
use super::{session, Env, RedisProc, TIMEOUT};
use holdfast_nsr::{Op, Store, StoreError, StoreUrl};
use holdfast_nsr_redis::acl::{self, AclSecret, AclUser};
use holdfast_nsr_redis::RedisStore;

/// A redis-server whose default user is the test's administrator, and
/// where each instance's handle is its own ACL user.
pub(super) struct AclEnv(pub(super) RedisProc);

impl AclEnv {
    pub(super) fn new() -> Self {
        AclEnv(RedisProc::start())
    }

    fn set_user(&self, u: &AclUser) {
        let mut c = self.0.raw();
        let mut cmd = redis::cmd("ACL");
        for a in &u.args()[1..] {
            cmd.arg(a);
        }
        let () = cmd.query(&mut c).expect("ACL SETUSER");
    }

    /// The unit user of `instance` (`hf-<instance>`, password
    /// `pw-<instance>`), created on the server.
    fn unit(&self, instance: &str) -> StoreUrl {
        let user = acl::default_user(instance);
        let pw = format!("pw-{instance}");
        self.set_user(&acl::unit_user(instance, &user, &AclSecret::Password(pw.clone())).unwrap());
        self.url_as(&user, &pw)
    }

    fn url_as(&self, user: &str, pw: &str) -> StoreUrl {
        let StoreUrl::Redis {
            tls,
            host,
            port,
            db,
            ..
        } = self.0.url()
        else {
            unreachable!()
        };
        StoreUrl::Redis {
            tls,
            host,
            port,
            db,
            username: Some(user.into()),
            password: Some(pw.into()),
        }
    }
}

impl Env for AclEnv {
    fn handle(&self, instance: &str) -> Box<dyn Store> {
        Box::new(RedisStore::connect(&self.unit(instance), instance, TIMEOUT).expect("connect"))
    }
    fn put_raw_record(&self, instance: &str, key: &str, json: &[u8]) {
        super::RedisEnv::put_raw_record_on(&self.0, instance, key, json);
    }
    fn put_raw_originated(&self, instance: &str, key: &str, json: &[u8]) {
        super::RedisEnv::put_raw_originated_on(&self.0, instance, key, json);
    }
}

#[test]
fn bfd_records_under_acl() {
    bfd_records(&AclEnv::new());
}

#[test]
fn originated_records_under_acl() {
    originated_records(&AclEnv::new());
}

fn noperm<T: std::fmt::Debug>(r: Result<T, StoreError>, what: &str) {
    match r {
        Err(StoreError::Unavailable(m)) if m.contains("NOPERM") => {}
        r => panic!("{what}: expected NOPERM, got {r:?}"),
    }
}

#[test]
fn a_unit_user_cannot_touch_another_units_keys() {
    let env = AclEnv::new();
    // u2 writes its records under its own user.
    let mut u2 = RedisStore::connect(&env.unit("u2"), "u2", TIMEOUT).unwrap();
    let e2 = u2.claim().unwrap();
    u2.write(e2, &[session("k", 1, 2)]).unwrap();
    // u1's credentials, pointed at u2's instance: every read and write refused.
    let u1_url = env.unit("u1");
    let mut s = RedisStore::connect(&u1_url, "u2", TIMEOUT).unwrap();
    noperm(s.load(), "load");
    noperm(s.epoch(), "epoch");
    noperm(s.claim(), "claim");
    noperm(s.claim_at_least(100), "claim_at_least");
    noperm(s.write(e2, &[Op::Remove { key: "k".into() }]), "write");
    // Raw commands too, and nothing keyspace-wide.
    let raw = s.with_connection(|c| {
        let g: redis::RedisResult<Option<String>> = redis::cmd("GET").arg("hf:{u2}:epoch").query(c);
        let k: redis::RedisResult<Vec<String>> = redis::cmd("KEYS").arg("*").query(c);
        let f: redis::RedisResult<()> = redis::cmd("FLUSHALL").query(c);
        Ok((g, k, f))
    });
    let (g, k, f) = raw.unwrap();
    for (what, code) in [
        ("GET", g.err().and_then(|e| e.code().map(str::to_string))),
        ("KEYS", k.err().and_then(|e| e.code().map(str::to_string))),
        (
            "FLUSHALL",
            f.err().and_then(|e| e.code().map(str::to_string)),
        ),
    ] {
        assert_eq!(code.as_deref(), Some("NOPERM"), "{what}");
    }
    // u2's records are intact, and u1 still works on its own.
    let st = u2.load().unwrap();
    assert_eq!((st.epoch, st.sessions.len()), (e2, 1));
    let mut u1 = RedisStore::connect(&u1_url, "u1", TIMEOUT).unwrap();
    let e1 = u1.claim().unwrap();
    u1.write(e1, &[session("k", 5, 6)]).unwrap();
    assert_eq!(u1.load().unwrap().sessions.len(), 1);
    // Negative control: the default user (no ACL) reads u2's records.
    let mut open = RedisStore::connect(&env.0.url(), "u2", TIMEOUT).unwrap();
    assert_eq!(open.load().unwrap().sessions.len(), 1);
}

#[test]
fn a_relay_user_reads_its_instances_only() {
    let env = AclEnv::new();
    for i in ["u1", "u2"] {
        let mut s = RedisStore::connect(&env.unit(i), i, TIMEOUT).unwrap();
        let e = s.claim().unwrap();
        s.write(e, &[session("k", 1, 2)]).unwrap();
    }
    let relay = acl::relay_user(&["u1"], "hf-relay", &AclSecret::Password("r".into())).unwrap();
    env.set_user(&relay);
    let url = env.url_as("hf-relay", "r");
    // The relay's reads (holdfast-bfd-relay's store.rs) on u1.
    let mut s = RedisStore::connect(&url, "u1", TIMEOUT).unwrap();
    let (epoch, bfd, members, vals) = s
        .with_connection(|c| {
            let (epoch, bfd, members): (Option<u64>, Vec<(String, String)>, Vec<String>) =
                redis::pipe()
                    .cmd("GET")
                    .arg("hf:{u1}:epoch")
                    .cmd("HGETALL")
                    .arg("hf:{u1}:bfd")
                    .cmd("SMEMBERS")
                    .arg("hf:{u1}:sessions")
                    .query(c)?;
            let vals: Vec<Option<String>> = redis::cmd("MGET")
                .arg(&["hf:{u1}:s:k:rcv", "hf:{u1}:s:k:una"])
                .query(c)?;
            Ok((epoch, bfd, members, vals))
        })
        .unwrap();
    assert_eq!(epoch, Some(1));
    assert!(bfd.is_empty());
    assert_eq!(members, ["k"]);
    assert_eq!(vals, [Some("2".to_string()), Some("1".to_string())]);
    // It may not write u1's keys, nor read u2's.
    noperm(s.claim(), "relay claim");
    noperm(s.write(1, &[Op::Remove { key: "k".into() }]), "relay write");
    let mut s2 = RedisStore::connect(&url, "u2", TIMEOUT).unwrap();
    noperm(s2.epoch(), "relay reading u2");
}
