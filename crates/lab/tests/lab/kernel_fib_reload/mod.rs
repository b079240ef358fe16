//! The kernel FIB follows a SIGHUP reload (issue 13, item 1's loose end):
//! `[kernel]` added, its metric, ecmp, table, protocol and persist changed,
//! and removed, each by rewriting holdfastd's file and sending SIGHUP.
//! Every route check reads the kernel with `ip route` / `ip monitor`.
//!
//! ```text
//!   [ r: holdfastd AS65000 ] 192.0.2.1 ── 192.0.2.2 [ b1: bird AS65001 ] announces 10.201.0.0/24, 10.202.0.0/24
//!                            192.0.3.1 ── 192.0.3.2 [ b2: bird AS65002 ] announces 10.202.0.0/24 (equal cost)
//!   table 100 (before the start): 10.250.0.0/24 proto static; ours (proto 179, metric 32):
//!   10.201.0.0/24 via 192.0.2.2 (a route left by an earlier run) and 10.249.0.0/24 (stale)
//!   table 101: 10.251.0.0/24 proto static
//! ```
//!
//! Checked, in order:
//! 1. started without `[kernel]`: the table is not touched;
//! 2. `[kernel]` added (table 100, metric 32, ecmp 1, startup_hold 60):
//!    10.201.0.0/24 adopted as it is, 10.202.0.0/24 added with one next
//!    hop, the stale 10.249.0.0/24 removed at once (no start-up hold on a
//!    reload: the tables are complete); `show fib` counts added 1, deleted
//!    1, replaced 0 (adopted 2: both found by the first read);
//! 3. metric 32 -> 20: both routes at metric 20, none of ours left at 32,
//!    and `ip monitor route` shows each prefix's metric-20 route added
//!    before its metric-32 one is deleted (no window without a route);
//! 4. ecmp 1 -> 2 (and startup_hold 60 -> 30): 10.202.0.0/24 becomes a
//!    multipath route via 192.0.2.2 and 192.0.3.2, 10.201.0.0/24 is not
//!    rewritten (`show fib`: one replace); the log says the start-up hold
//!    applies at the next start only;
//!    Then an `[[instance]]` "blue" with `kernel = { table = 102, protocol
//!    = 202 }` added: its FIB starts (running, table 102), the default's
//!    is untouched (same counters, not in the log line); removed again by
//!    the next step;
//! 5. protocol 179 -> 201 alone: the kernel's key (table, prefix, metric)
//!    has no protocol, so each route is replaced in place: both in table
//!    100 proto 201, none left at 179, `ip monitor route` shows them
//!    rewritten with proto 201 and no deletion, no error (an add would
//!    have collided: EEXIST);
//! 6. table 100 -> 101, persist on: both routes in table 101 proto 201,
//!    none of ours left in table 100;
//! 7. `[kernel]` removed with persist: the routes stay; `show fib` lists
//!    no FIB;
//! 8. added back (table 101, protocol 201, no persist): both adopted,
//!    nothing written;
//! 9. removed without persist: our routes are gone; the static routes of
//!    tables 100 and 101 stayed through every step.
//!
//! Every step also checks `holdfast show fib --json` (table, metric,
//! protocol, ecmp, persist) and the reload's one log line.

use std::time::Duration;

use holdfast_api::RibTable;
use holdfast_lab::{
    skip_unless_ready, wait_for, Bird, Holdfastd, HostId, Lab, NeighborSpec, Peer, PeerKind,
    PeerSpec, RouteSpec, Signal,
};

use crate::fib_common;
use fib_common::{ip, sh, v4};

const T: Duration = Duration::from_secs(30);

/// Routes of `proto` in `table`, one line per route (nexthops joined).
fn routes(lab: &Lab, r: HostId, table: u32, proto: &str) -> Vec<String> {
    let t = table.to_string();
    let out = sh(
        lab,
        r,
        &["ip", "-o", "route", "show", "table", &t, "proto", proto],
    );
    let mut v: Vec<String> = out
        .lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
        .collect();
    v.sort();
    v
}

fn has(lines: &[String], prefix: &str, parts: &[&str]) -> bool {
    lines
        .iter()
        .any(|l| l.starts_with(&format!("{prefix} ")) && parts.iter().all(|p| l.contains(p)))
}

/// `[kernel]` lines, or none.
fn config(kernel: Option<&str>) -> String {
    let kernel = kernel.map_or(String::new(), |k| format!("[kernel]\n{k}\n\n"));
    format!(
        r#"[global]
asn = 65000
router_id = "192.0.2.1"
connect_retry = 1
workers = 1
shards = 4

{kernel}[[neighbor]]
address = "192.0.2.2"
remote_asn = 65001
local_address = "192.0.2.1"
import = "all"
export = "none"
families = ["ipv4-unicast"]

[[neighbor]]
address = "192.0.3.2"
remote_asn = 65002
local_address = "192.0.3.1"
import = "all"
export = "none"
families = ["ipv4-unicast"]
"#
    )
}

fn bird_spec(asn: u32, rid: &str, hf: &str, prefixes: &[&str]) -> PeerSpec {
    let mut s = PeerSpec::new(asn, rid.parse().unwrap()).neighbor(
        NeighborSpec::new(ip(hf), 65000)
            .local(ip(rid))
            .families(true, false),
    );
    for p in prefixes {
        s = s.route(RouteSpec::new(p));
    }
    s
}

/// The default instance's FIB in `show fib --json`.
fn default_fib(hf: &Holdfastd, lab: &Lab) -> serde_json::Value {
    fibs(hf, lab)
        .into_iter()
        .find(|f| f["instance"] == "default")
        .expect("the default instance's FIB")
}

/// `show fib --json`'s list of FIBs.
fn fibs(hf: &Holdfastd, lab: &Lab) -> Vec<serde_json::Value> {
    let v = hf
        .cli_json(lab, &["show", "fib"])
        .expect("holdfast show fib --json");
    v["ok"]["fib"].as_array().cloned().unwrap_or_default()
}

/// Rewrites the file, sends SIGHUP and waits for the reload's log line
/// (the `n`th).
fn reload(hf: &Holdfastd, lab: &mut Lab, kernel: Option<&str>, n: usize) -> String {
    reload_text(hf, lab, &config(kernel), n)
}

/// [`reload`] with the whole file.
fn reload_text(hf: &Holdfastd, lab: &mut Lab, text: &str, n: usize) -> String {
    hf.reload(lab, text).expect("reload");
    wait_for("the reload's kernel FIB line", T, || {
        let log = hf.log_text(lab);
        let lines: Vec<String> = log
            .lines()
            .filter(|l| l.contains("kernel FIB reloaded"))
            .map(str::to_string)
            .collect();
        Ok(lines.get(n - 1).cloned())
    })
    .unwrap_or_else(|e| panic!("{e}\n{}", hf.log_text(lab)))
}

/// Waits until `show fib` reports these settings, running, nothing pending,
/// nothing left under an old key.
fn wait_fib(
    hf: &Holdfastd,
    lab: &Lab,
    (table, metric, protocol, ecmp, persist): (u32, u32, u32, u32, bool),
) -> serde_json::Value {
    wait_for("show fib with the new settings, written", T, || {
        let f = fibs(hf, lab);
        let Some(f) = f.iter().find(|f| f["instance"] == "default") else {
            return Ok(None);
        };
        Ok((f["table"] == table
            && f["metric"] == metric
            && f["protocol"] == protocol
            && f["ecmp"] == ecmp
            && f["persist"] == persist
            && f["phase"] == "running"
            && f["pending"] == 0
            && f["old_key"] == 0
            && f["installed"] == 2)
            .then(|| f.clone()))
    })
    .unwrap_or_else(|e| panic!("{e}: {:?}", fibs(hf, lab)))
}

#[test]
fn kernel_fib_follows_reloads() {
    if skip_unless_ready(&[PeerKind::Bird]) {
        return;
    }
    let mut lab = Lab::new("kernel_fib_reload").expect("lab");
    let r = lab.host("r").expect("host");
    let b1 = lab.host("b1").expect("host");
    let b2 = lab.host("b2").expect("host");
    lab.link(r, b1, v4([192, 0, 2, 1], [192, 0, 2, 2]), None)
        .expect("link");
    lab.link(r, b2, v4([192, 0, 3, 1], [192, 0, 3, 2]), None)
        .expect("link");
    for (table, prefix) in [("100", "10.250.0.0/24"), ("101", "10.251.0.0/24")] {
        sh(
            &lab,
            r,
            &[
                "ip",
                "route",
                "add",
                prefix,
                "via",
                "192.0.2.2",
                "table",
                table,
                "proto",
                "static",
            ],
        );
    }
    for prefix in ["10.201.0.0/24", "10.249.0.0/24"] {
        sh(
            &lab,
            r,
            &[
                "ip",
                "route",
                "add",
                prefix,
                "via",
                "192.0.2.2",
                "table",
                "100",
                "proto",
                "179",
                "metric",
                "32",
            ],
        );
    }
    let _bird1 = Bird::start(
        &mut lab,
        b1,
        &bird_spec(
            65001,
            "192.0.2.2",
            "192.0.2.1",
            &["10.201.0.0/24", "10.202.0.0/24"],
        ),
    )
    .expect("bird b1");
    let _bird2 = Bird::start(
        &mut lab,
        b2,
        &bird_spec(65002, "192.0.3.2", "192.0.3.1", &["10.202.0.0/24"]),
    )
    .expect("bird b2");
    let statics = |lab: &Lab| (routes(lab, r, 100, "static"), routes(lab, r, 101, "static"));
    let statics_before = statics(&lab);
    assert_eq!(statics_before.0.len(), 1);
    assert_eq!(statics_before.1.len(), 1);

    // 1. No [kernel]: the table is not touched.
    let hf = Holdfastd::start(&mut lab, r, "holdfastd", &config(None)).expect("holdfastd");
    hf.wait_established(ip("192.0.2.2"), T)
        .expect("b1 Established");
    hf.wait_established(ip("192.0.3.2"), T)
        .expect("b2 Established");
    wait_for(
        "both prefixes in the Loc-RIB, b2's path received",
        T,
        || {
            let mut loc: Vec<String> = hf
                .rib(RibTable::Loc, None)?
                .into_iter()
                .map(|e| e.prefix)
                .collect();
            loc.sort();
            loc.dedup();
            let b2 = hf.rib(RibTable::In, Some(ip("192.0.3.2")))?.len();
            Ok((loc == ["10.201.0.0/24", "10.202.0.0/24"] && b2 == 1).then_some(()))
        },
    )
    .expect("routes learned");
    let planted = routes(&lab, r, 100, "179");
    assert_eq!(planted.len(), 2, "{planted:?}");
    assert!(fibs(&hf, &lab).is_empty());

    // 2. [kernel] added: adopted, added, the stale one removed at once.
    let k1 = "table = 100\nmetric = 32\necmp = 1\nstartup_hold = 60";
    let line = reload(&hf, &mut lab, Some(k1), 1);
    assert!(
        line.contains("default: added (table 100 metric 32 ecmp 1 protocol 179)"),
        "{line}"
    );
    let f = wait_fib(&hf, &lab, (100, 32, 179, 1, false));
    wait_for("10.249.0.0/24 removed at once", T, || {
        let v = routes(&lab, r, 100, "179");
        Ok((v.len() == 2).then_some(v))
    })
    .map(|v| {
        assert!(
            has(&v, "10.201.0.0/24", &["via 192.0.2.2", "metric 32"]),
            "{v:?}"
        );
        assert!(has(&v, "10.202.0.0/24", &["via", "metric 32"]), "{v:?}");
        assert!(!has(&v, "10.202.0.0/24", &["nexthop"]), "ecmp 1: {v:?}");
    })
    .unwrap_or_else(|e| panic!("{e}: {:?}", routes(&lab, r, 100, "179")));
    let f = wait_for("the stale route's delete counted", T, || {
        let f = default_fib(&hf, &lab);
        Ok((f["counters"]["deleted"] == 1).then_some(f))
    })
    .unwrap_or_else(|e| panic!("{e}: {f}"));
    // `adopted` counts every route of ours the first read found (the
    // stale one too, removed right after), as at a start.
    assert_eq!(f["counters"]["adopted"], 2, "{f}");
    assert_eq!(f["counters"]["added"], 1, "{f}");
    assert_eq!(f["counters"]["replaced"], 0, "{f}");

    // 3. metric 32 -> 20: added at 20 before deleted at 32.
    let mon = lab.spawn_route_monitor(r, "ipmon").expect("ip monitor");
    let k2 = "table = 100\nmetric = 20\necmp = 1\nstartup_hold = 60";
    let line = reload(&hf, &mut lab, Some(k2), 2);
    assert!(line.contains("default: metric 32 -> 20"), "{line}");
    wait_fib(&hf, &lab, (100, 20, 179, 1, false));
    wait_for("our routes at metric 20 only", T, || {
        let v = routes(&lab, r, 100, "179");
        Ok((v.len() == 2 && v.iter().all(|l| l.contains("metric 20"))).then_some(()))
    })
    .unwrap_or_else(|e| panic!("{e}: {:?}", routes(&lab, r, 100, "179")));
    let seen = wait_for("ip monitor saw both deletes", T, || {
        let seen = std::fs::read_to_string(lab.proc_logs(mon).0).unwrap_or_default();
        let n = seen
            .lines()
            .filter(|l| l.starts_with("Deleted 10.20") && l.contains("metric 32"))
            .count();
        Ok((n == 2).then_some(seen))
    })
    .unwrap_or_else(|e| panic!("{e}"));
    lab.kill(mon, Signal::Term);
    for p in ["10.201.0.0/24", "10.202.0.0/24"] {
        let lines: Vec<&str> = seen.lines().collect();
        let added = lines
            .iter()
            .position(|l| l.starts_with(&format!("{p} ")) && l.contains("metric 20"));
        let deleted = lines
            .iter()
            .position(|l| l.starts_with(&format!("Deleted {p} ")) && l.contains("metric 32"));
        match (added, deleted) {
            (Some(a), Some(d)) if a < d => {}
            _ => panic!("{p}: metric 20 not added before metric 32 deleted:\n{seen}"),
        }
        assert!(
            !lines
                .iter()
                .any(|l| l.starts_with(&format!("Deleted {p} ")) && l.contains("metric 20")),
            "{seen}"
        );
    }

    // 4. ecmp 1 -> 2: the equal-cost prefix becomes multipath, the other
    // is not rewritten; startup_hold's change is said to wait.
    let replaced = default_fib(&hf, &lab)["counters"]["replaced"]
        .as_u64()
        .unwrap();
    let k3 = "table = 100\nmetric = 20\necmp = 2\nstartup_hold = 30";
    let line = reload(&hf, &mut lab, Some(k3), 3);
    assert!(line.contains("ecmp 1 -> 2"), "{line}");
    assert!(
        line.contains("startup_hold applies at the next start only"),
        "{line}"
    );
    wait_fib(&hf, &lab, (100, 20, 179, 2, false));
    wait_for("10.202.0.0/24 multipath", T, || {
        let v = routes(&lab, r, 100, "179");
        Ok(has(
            &v,
            "10.202.0.0/24",
            &[
                "metric 20",
                "nexthop via 192.0.2.2",
                "nexthop via 192.0.3.2",
            ],
        )
        .then_some(v))
    })
    .map(|v| {
        assert!(
            has(&v, "10.201.0.0/24", &["via 192.0.2.2", "metric 20"]),
            "{v:?}"
        )
    })
    .unwrap_or_else(|e| panic!("{e}: {:?}", routes(&lab, r, 100, "179")));
    let f = default_fib(&hf, &lab);
    assert_eq!(
        f["counters"]["replaced"].as_u64().unwrap() - replaced,
        1,
        "only the multipath prefix rewritten: {f}"
    );

    // 4b. An [[instance]] with `kernel = {...}` added on reload (a new
    // instance, its FIB started; no route of its own to install), then
    // removed with the next step; the default instance's FIB untouched.
    let blue = format!(
        "{}\n[[instance]]\nname = \"blue\"\nkernel = {{ table = 102, protocol = 202 }}\n",
        config(Some(k3))
    );
    let line = reload_text(&hf, &mut lab, &blue, 4);
    assert!(
        line.contains("blue: added (table 102 metric 32 ecmp 1 protocol 202)"),
        "{line}"
    );
    assert!(!line.contains("default:"), "{line}");
    wait_for("blue's FIB running", T, || {
        Ok(fibs(&hf, &lab)
            .into_iter()
            .find(|f| f["instance"] == "blue" && f["phase"] == "running" && f["table"] == 102))
    })
    .unwrap_or_else(|e| panic!("{e}: {:?}", fibs(&hf, &lab)));
    let now = default_fib(&hf, &lab);
    for k in ["added", "replaced", "deleted", "dumps"] {
        assert_eq!(now["counters"][k], f["counters"][k], "{k}: {now}");
    }

    // 5. protocol 179 -> 201 alone: the kernel's key (table, prefix,
    // metric) is the same, so each route is replaced in place: never
    // deleted.
    let mon = lab.spawn_route_monitor(r, "ipmon2").expect("ip monitor");
    let k4 = "table = 100\nprotocol = 201\nmetric = 20\necmp = 2";
    let line = reload(&hf, &mut lab, Some(k4), 5);
    assert!(line.contains("default: protocol 179 -> 201"), "{line}");
    assert!(line.contains("blue: removed"), "{line}");
    wait_fib(&hf, &lab, (100, 20, 201, 2, false));
    wait_for("our routes in table 100 proto 201 only", T, || {
        let new = routes(&lab, r, 100, "201");
        let old = routes(&lab, r, 100, "179");
        Ok((new.len() == 2 && old.is_empty()).then_some(()))
    })
    .unwrap_or_else(|e| {
        panic!(
            "{e}: 201 {:?} 179 {:?}",
            routes(&lab, r, 100, "201"),
            routes(&lab, r, 100, "179")
        )
    });
    // The monitor prints what it reads when it runs: its log is polled
    // (killed at once, it lost both lines once beside other labs).
    let rewritten = |seen: &str, p: &str| {
        seen.lines()
            .any(|l| l.starts_with(&format!("{p} ")) && l.contains("proto 201"))
    };
    wait_for("ip monitor saw both rewritten with proto 201", T, || {
        let seen = std::fs::read_to_string(lab.proc_logs(mon).0).unwrap_or_default();
        Ok(["10.201.0.0/24", "10.202.0.0/24"]
            .iter()
            .all(|p| rewritten(&seen, p))
            .then_some(()))
    })
    .unwrap_or_else(|e| {
        let seen = std::fs::read_to_string(lab.proc_logs(mon).0).unwrap_or_default();
        panic!("{e}:\n{seen}")
    });
    lab.kill(mon, Signal::Term);
    let seen = std::fs::read_to_string(lab.proc_logs(mon).0).unwrap_or_default();
    assert!(
        !seen.lines().any(|l| l.starts_with("Deleted 10.20")),
        "a route of ours deleted on a protocol change:\n{seen}"
    );
    let f = default_fib(&hf, &lab);
    assert_eq!(f["counters"]["errors"], 0, "no EEXIST: {f}");

    // 6. table 100 -> 101, persist on.
    let k4 = "table = 101\nprotocol = 201\nmetric = 20\necmp = 2\npersist = true";
    let line = reload(&hf, &mut lab, Some(k4), 6);
    assert!(line.contains("table 100 -> 101"), "{line}");
    wait_fib(&hf, &lab, (101, 20, 201, 2, true));
    wait_for("our routes in table 101 proto 201 only", T, || {
        let new = routes(&lab, r, 101, "201");
        let old = routes(&lab, r, 100, "201");
        Ok((new.len() == 2 && old.is_empty()).then_some(new))
    })
    .map(|v| {
        assert!(
            has(&v, "10.201.0.0/24", &["via 192.0.2.2", "metric 20"]),
            "{v:?}"
        );
        assert!(
            has(&v, "10.202.0.0/24", &["nexthop via 192.0.3.2"]),
            "{v:?}"
        );
    })
    .unwrap_or_else(|e| {
        panic!(
            "{e}: new {:?} old {:?}",
            routes(&lab, r, 101, "201"),
            routes(&lab, r, 100, "201")
        )
    });

    // 7. Removed with persist: left in the table.
    let left = routes(&lab, r, 101, "201");
    let line = reload(&hf, &mut lab, None, 7);
    assert!(
        line.contains("persist: our routes are left in the table"),
        "{line}"
    );
    wait_for("show fib lists no FIB", T, || {
        Ok(fibs(&hf, &lab).is_empty().then_some(()))
    })
    .expect("FIB stopped");
    assert_eq!(routes(&lab, r, 101, "201"), left, "persist: routes kept");

    // 8. Added back: adopted, nothing written.
    let k5 = "table = 101\nprotocol = 201\nmetric = 20\necmp = 2";
    reload(&hf, &mut lab, Some(k5), 8);
    let f = wait_fib(&hf, &lab, (101, 20, 201, 2, false));
    assert_eq!(f["counters"]["adopted"], 2, "{f}");
    for k in ["added", "replaced", "deleted"] {
        assert_eq!(f["counters"][k], 0, "{k}: {f}");
    }
    assert_eq!(routes(&lab, r, 101, "201"), left);

    // 9. Removed: our routes gone, the other protocols' routes kept.
    let line = reload(&hf, &mut lab, None, 9);
    assert!(
        line.contains("our routes are removed from the table"),
        "{line}"
    );
    wait_for("our routes removed", T, || {
        Ok(routes(&lab, r, 101, "201").is_empty().then_some(()))
    })
    .unwrap_or_else(|e| panic!("{e}: {:?}", routes(&lab, r, 101, "201")));
    assert!(fibs(&hf, &lab).is_empty());
    assert!(routes(&lab, r, 100, "179").is_empty());
    assert!(routes(&lab, r, 100, "201").is_empty());
    assert_eq!(
        statics(&lab),
        statics_before,
        "other protocols' routes kept"
    );
    hf.stop(&mut lab);
}
