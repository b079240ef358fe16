//! Redis with ACL users (issue 30, item 4): two units on one store, each
//! with its own Redis user limited to its own keys; one unit's credentials
//! cannot read or write the other's records, and a unit under its user
//! still replicates and is taken over with nothing seen by its peer.
//!
//! ```text
//!                 bridge `lan` 198.18.0.0/24
//!   [ peer ]  .1   frr (AS 65001) --- BGP --- u1 (.10) and u2 (.11)
//!   [ redis ] .2   redis-server with an ACL file: `default` = the lab's
//!                  administrator (a random password), hf-u1 and hf-u2 made
//!                  by `holdfast nsr acl unit` (keys hf:{u1}:* / hf:{u2}:*)
//!   [ a ]     .3   host agent; u1 primary, u2 backup
//!   [ b ]     .4   host agent; u2 primary, u1 backup
//!   c1..c3 .31-.33 etcd members + holdfast-controller replicas
//! ```
//!
//! Each unit's configuration names its user and a password file
//! (`[nsr] store_user`, `store_password_file`; `holdfast_lab::plane`'s
//! `PlaneExtras::redis_acl`). Checked:
//! 1. both units PROTECTED, their store connections authenticated as their
//!    own users (`CLIENT LIST`: `name=holdfast-nsr:u1 ... user=hf-u1`), and
//!    `show nsr` names the store with the user and `***`, never the
//!    password;
//! 2. **u1's user on u2's records**: `GET`, `SMEMBERS`, `HGETALL`,
//!    `LRANGE` of u2's keys, and the writes `SET`, `DEL`, `EVAL` on them,
//!    all answered `NOPERM`; so are `KEYS`, `FLUSHALL`, `CONFIG` and `ACL`;
//!    u2's user on u1's records likewise; each user reads its own records;
//!    u2's epoch and sessions are unchanged after the attempts;
//! 3. **positive control**: u1's holdfastd is SIGKILLed; the controller
//!    takes it over on b, where the backup restores the sessions from the
//!    store under hf-u1 (its connection seen as hf-u1 from b's container)
//!    and is PROTECTED again; frr saw nothing (`PlaneWatch`: never left
//!    Established, no NOTIFICATION, the same routes);
//! 4. the password is in no file of the lab's work directory but its own
//!    password file and the Redis ACL files (the logs, the unit configs,
//!    the agents' files; the packet captures are not searched: the lab's
//!    Redis is plain TCP, where `AUTH` is in clear);
//! 5. **negative control**: the `default` user opened again as in every
//!    other lab (`nopass`): a client without credentials reads u2's
//!    records; u1's user is still refused them.

use std::path::Path;
use std::time::Duration;

use holdfast_lab::plane::{
    show_nsr, Moved, Plane, PlaneBins, PlaneExtras, PlaneSpec, PlaneUnitSpec,
};
use holdfast_lab::PeerKind;

const LONG: Duration = Duration::from_secs(30);

fn unit(name: &str, primary: &str, backup: &str) -> PlaneUnitSpec {
    PlaneUnitSpec {
        name: name.into(),
        primary: primary.into(),
        backup: backup.into(),
        routes: 5,
        app_failure: Some("migrate".into()),
        peers: vec![],
    }
}

/// A unit's store user and password.
fn creds(p: &Plane, u: &str) -> (String, String) {
    let (user, file) = p.unit(u).store_user.clone().expect("redis_acl");
    let pw = std::fs::read_to_string(&file).expect("password file");
    (user, pw.trim().to_string())
}

/// `redis-cli` as `who` (None: no credentials); stdout, error replies too.
fn as_user(p: &Plane, who: Option<&(String, String)>, args: &[&str]) -> String {
    let who = who.map(|(u, pw)| (u.as_str(), pw.as_str()));
    p.redis
        .single()
        .cli_as(&p.lab, who, args)
        .unwrap_or_else(|e| panic!("redis-cli {args:?}: {e}"))
        .trim()
        .to_string()
}

fn assert_noperm(p: &Plane, who: &(String, String), args: &[&str]) {
    let out = as_user(p, Some(who), args);
    assert!(
        out.starts_with("NOPERM"),
        "{} {args:?}: expected NOPERM, got {out:?}",
        who.0
    );
}

/// `CLIENT LIST`'s `user=` of the store connection of unit `u`
/// (`name=holdfast-nsr:u`), with its address.
fn store_clients(p: &Plane, u: &str) -> Vec<(String, String)> {
    let list = p
        .redis
        .single()
        .cli(&p.lab, &["CLIENT", "LIST"])
        .expect("CLIENT LIST");
    let name = format!("name=holdfast-nsr:{u}");
    list.lines()
        .filter(|l| l.split(' ').any(|f| f == name))
        .map(|l| {
            let field = |k: &str| {
                l.split(' ')
                    .find_map(|f| f.strip_prefix(k))
                    .unwrap_or_default()
                    .to_string()
            };
            (field("user="), field("addr="))
        })
        .collect()
}

/// Files under `dir` (not the packet captures) holding `needle`.
fn files_with(dir: &Path, needle: &str, out: &mut Vec<String>, depth: u32) {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return;
    };
    for e in rd.flatten() {
        let path = e.path();
        let Ok(ft) = e.file_type() else { continue };
        if ft.is_dir() && depth < 8 {
            files_with(&path, needle, out, depth + 1);
        } else if ft.is_file()
            && !path
                .extension()
                .is_some_and(|x| x == "pcap" || x == "pcapng")
            && std::fs::read(&path)
                .is_ok_and(|b| b.windows(needle.len()).any(|w| w == needle.as_bytes()))
        {
            out.push(path.display().to_string());
        }
    }
}

#[test]
fn a_units_redis_user_cannot_read_another_units_records() {
    let Some(bins) = PlaneBins::ready(&[PeerKind::Frr], &["redis-cli"]) else {
        return;
    };
    let spec = PlaneSpec {
        hosts: vec!["a".into(), "b".into()],
        units: vec![unit("u1", "a", "b"), unit("u2", "b", "a")],
        controller_args: vec![],
        more_peers: false,
        no_probes: false,
    };
    let extras = PlaneExtras {
        redis_acl: true,
        ..PlaneExtras::default()
    };
    let p = Plane::up_with("redis_acl", &spec, bins, &extras).expect("plane");
    p.wait_established(Duration::from_secs(60))
        .unwrap_or_else(|e| panic!("{e}"));
    p.wait_leader(3, LONG).unwrap_or_else(|e| panic!("{e}"));
    for (u, h) in [("u1", "a"), ("u2", "b")] {
        p.wait_protected(u, h, LONG)
            .unwrap_or_else(|e| panic!("{e}"));
    }
    let (u1, u2) = (creds(&p, "u1"), creds(&p, "u2"));

    // 1. Each unit replicates as its own user; show nsr hides the password.
    for (u, h, c) in [("u1", "a", &u1), ("u2", "b", &u2)] {
        let clients = store_clients(&p, u);
        assert!(
            !clients.is_empty() && clients.iter().all(|(user, _)| *user == c.0),
            "{u}'s store connections: {clients:?}"
        );
        let sock = p.host(h).work_dir.join(u).join("holdfastd.sock");
        let n = show_nsr(&p.bins.holdfast, &sock);
        let store = n["ok"]["nsr"]["store"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        assert!(
            store.contains(&format!("{}:***@", c.0)) && !n.to_string().contains(&c.1),
            "{u}: show nsr: {n}"
        );
        println!(
            "1. {u} PROTECTED on {h}, its store connections as {clients:?}; show nsr: {store}"
        );
    }
    let admin_get = |k: &str| {
        p.redis
            .single()
            .cli(&p.lab, &["GET", k])
            .expect("GET")
            .trim()
            .to_string()
    };
    let u2_epoch = admin_get("hf:{u2}:epoch");
    let u2_sessions = p
        .redis
        .single()
        .cli(&p.lab, &["SMEMBERS", "hf:{u2}:sessions"])
        .expect("SMEMBERS");
    assert!(!u2_epoch.is_empty() && !u2_sessions.trim().is_empty());

    // 2. One unit's user on the other's records.
    let session = u2_sessions.lines().next().unwrap_or_default().to_string();
    let u2_in = format!("hf:{{u2}}:s:{session}:in");
    let script = "return redis.call('GET', KEYS[1])";
    for args in [
        &["GET", "hf:{u2}:epoch"][..],
        &["SMEMBERS", "hf:{u2}:sessions"],
        &["HGETALL", "hf:{u2}:bfd"],
        &["LRANGE", &u2_in, "0", "-1"],
        &["SET", "hf:{u2}:epoch", "999"],
        &["DEL", "hf:{u2}:sessions"],
        &["EVAL", script, "1", "hf:{u2}:epoch"],
        &["KEYS", "*"],
        &["FLUSHALL"],
        &["CONFIG", "GET", "requirepass"],
        &["ACL", "LIST"],
    ] {
        assert_noperm(&p, &u1, args);
    }
    assert_noperm(&p, &u2, &["GET", "hf:{u1}:epoch"]);
    assert_noperm(&p, &u2, &["SET", "hf:{u1}:epoch", "999"]);
    assert_eq!(
        as_user(&p, Some(&u1), &["GET", "hf:{u1}:epoch"]),
        admin_get("hf:{u1}:epoch")
    );
    assert_eq!(as_user(&p, Some(&u2), &["GET", "hf:{u2}:epoch"]), u2_epoch);
    assert_eq!(admin_get("hf:{u2}:epoch"), u2_epoch);
    assert_eq!(
        p.redis
            .single()
            .cli(&p.lab, &["SMEMBERS", "hf:{u2}:sessions"])
            .expect("SMEMBERS"),
        u2_sessions
    );
    println!("2. hf-u1 on u2's records (reads, writes, EVAL) and keyspace-wide commands: NOPERM; hf-u2 on u1's: NOPERM; u2's records unchanged");

    // 3. Positive control: a takeover of u1 under its user.
    let (
        Moved {
            to,
            running: moved,
            protected,
        },
        seen,
    ) = p
        .take_over_unseen("u1", "a", LONG, Duration::from_secs(2))
        .unwrap_or_else(|e| panic!("u1's takeover: {e}"));
    // From u1's container on the new host (its own or the service address).
    let from = [
        p.unit("u1").containers[&to].v4.to_string(),
        p.unit("u1").service.to_string(),
    ];
    let clients = store_clients(&p, "u1");
    assert!(
        !clients.is_empty()
            && clients.iter().all(|(user, _)| *user == u1.0)
            && clients
                .iter()
                .any(|(_, addr)| from.iter().any(|a| addr.starts_with(&format!("{a}:")))),
        "u1's store connections after the takeover (from {from:?}): {clients:?}"
    );
    let sock = p.host(&to).work_dir.join("u1").join("holdfastd.sock");
    let n = show_nsr(&p.bins.holdfast, &sock);
    let figures = &n["ok"]["nsr"]["takeover"];
    println!(
        "3. u1 taken over a -> {to} under {}: moved in {moved:?}, PROTECTED in {protected:?}; holdfastd: {figures}; frr: {seen}",
        u1.0
    );

    // 4. No password in the lab's files but where it belongs.
    for (u, c) in [("u1", &u1), ("u2", &u2)] {
        let mut found = Vec::new();
        files_with(p.lab.work_dir(), &c.1, &mut found, 0);
        found.retain(|f| !f.ends_with(&format!("redis-acl/{u}.pass")));
        assert!(found.is_empty(), "{u}'s password found in {found:?}");
    }
    println!("4. the units' passwords are in their password files only (pcaps not searched)");

    // 5. Negative control: an open default user reads u2's records.
    let out = p
        .redis
        .single()
        .cli(&p.lab, &["ACL", "SETUSER", "default", "nopass"])
        .expect("ACL SETUSER default nopass");
    assert_eq!(out.trim(), "OK");
    assert_eq!(as_user(&p, None, &["GET", "hf:{u2}:epoch"]), u2_epoch);
    assert_eq!(
        as_user(&p, None, &["SMEMBERS", "hf:{u2}:sessions"]),
        u2_sessions.trim()
    );
    assert_noperm(&p, &u1, &["GET", "hf:{u2}:epoch"]);
    println!("5. negative control: with no credentials (default user nopass) u2's records are read; hf-u1 still NOPERM");
}
