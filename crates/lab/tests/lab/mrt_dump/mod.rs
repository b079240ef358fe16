//! MRT (RFC 6396) from holdfastd, read by `bgpdump` (Debian) and by
//! bgpkit-parser: `holdfast dump mrt`, a timed table dump and the updates
//! log, against a real BIRD 2.
//!
//! ```text
//!   [ h: holdfastd AS65000 ] 198.18.1.1    ===== link 1 ===== 198.18.1.2    [ p: bird AS65001 ]
//!                            fd00:0:0:1::1                    fd00:0:0:1::2
//!                            198.18.2.1    ===== link 2 ===== 198.18.2.2
//!                            fd00:0:0:2::1                    fd00:0:0:2::2
//!   four sessions (support/interop.rs): IPv4 and IPv6, holdfastd active and passive
//!   [[mrt]] kind = "updates" -> updates.mrt;  kind = "table", interval_secs = 1 -> rib.%s.mrt
//! ```
//!
//! Checked:
//! * `holdfast dump mrt FILE --table loc`: `bgpdump -m` lists exactly the
//!   routes of `holdfast show rib` (prefix, neighbour, AS path, next hop),
//!   with holdfastd itself (0.0.0.0, AS 65000) for its `[[network]]`s;
//!   bgpkit-parser reads the same routes;
//! * `--table in` (every neighbour's Adj-RIB-In) and `--table out --peer`:
//!   the same routes as `show rib --table in|out` for each neighbour;
//! * a bad request (unknown neighbour) is an error and writes nothing;
//! * the timer writes `rib.<seconds>.mrt` files that bgpdump reads in full;
//! * the updates log: every neighbour's announcements of BIRD's routes
//!   (`A`), the withdrawal BIRD sends later (`W`), and each session's
//!   move to Established (`STATE ... 6`), by bgpdump and bgpkit-parser.

use crate::common;

use std::collections::BTreeSet;
use std::net::IpAddr;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use bgpkit_parser::models::ElemType;
use bgpkit_parser::BgpkitParser;
use holdfast_api::RibTable;
use holdfast_lab::{
    skip_unless_ready, skip_unless_tools, wait_for, Bird, Holdfastd, Lab, Peer, PeerKind,
};

const T: Duration = Duration::from_secs(30);

/// One route as bgpdump -m prints it: (kind, neighbour, AS, prefix, AS path, next hop).
type Line = (String, String, String, String, String, String);

fn bgpdump(file: &Path) -> Vec<Line> {
    let out = Command::new("bgpdump")
        .arg("-m")
        .arg(file)
        .output()
        .expect("running bgpdump");
    assert!(
        out.status.success(),
        "bgpdump -m {}: {}",
        file.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| {
            let f: Vec<&str> = l.split('|').collect();
            let at = |i: usize| f.get(i).copied().unwrap_or("").to_string();
            (at(2), at(3), at(4), at(5), at(6), at(8))
        })
        .collect()
}

/// `(neighbour or 0.0.0.0, prefix, AS path, next hop)` of `show rib`.
fn rib_view(
    hf: &Holdfastd,
    table: RibTable,
    peer: Option<IpAddr>,
) -> BTreeSet<(String, String, String, String)> {
    hf.rib(table, peer)
        .expect("show rib")
        .into_iter()
        .map(|r| {
            let neighbour = match table {
                RibTable::Loc => r.peer.unwrap_or_else(|| "0.0.0.0".into()),
                _ => peer.map(|p| p.to_string()).unwrap_or_default(),
            };
            // Our own routes have no next hop of their own.
            let nh = if neighbour == "0.0.0.0" {
                String::new()
            } else {
                r.next_hop.unwrap_or_default()
            };
            (neighbour, r.prefix, r.as_path, nh)
        })
        .collect()
}

fn dump_view(lines: &[Line]) -> BTreeSet<(String, String, String, String)> {
    lines
        .iter()
        .filter(|l| l.0 == "B")
        .map(|l| {
            let nh = if l.1 == "0.0.0.0" {
                String::new()
            } else {
                l.5.clone()
            };
            (l.1.clone(), l.3.clone(), l.4.clone(), nh)
        })
        .collect()
}

fn dump(hf: &Holdfastd, lab: &Lab, file: &Path, args: &[&str]) -> serde_json::Value {
    let f = file.to_string_lossy().into_owned();
    let mut a = vec!["dump", "mrt", f.as_str()];
    a.extend_from_slice(args);
    let v = hf.cli_json(lab, &a).expect("holdfast dump mrt");
    assert!(v["ok"]["mrt"]["routes"].is_u64(), "{v}");
    v
}

#[test]
fn mrt_dumps_and_updates_log_read_by_bgpdump() {
    if skip_unless_ready(&[PeerKind::Bird]) || skip_unless_tools(&["bgpdump"]) {
        return;
    }
    let mut lab = Lab::new("mrt_dump").expect("lab");
    let (h, p, sessions, _) = common::topology(&mut lab, 2);
    let dir = lab.work_dir().join("mrt");
    std::fs::create_dir_all(&dir).expect("mrt dir");
    let updates = dir.join("updates.mrt");
    let mut cfg = common::hf_config(&sessions, &common::networks(), "all");
    cfg += &format!(
        "[[mrt]]\nkind = \"updates\"\nfile = \"{}\"\n\n[[mrt]]\nkind = \"table\"\nfile = \"{}/rib.%s.mrt\"\ninterval_secs = 1\n",
        updates.display(),
        dir.display()
    );
    let hf = Holdfastd::start(&mut lab, h, "holdfastd", &cfg).expect("holdfastd");
    let routes = common::peer_routes();
    let mut bird = Bird::start(&mut lab, p, &common::peer_spec(&sessions, &routes)).expect("bird");
    for s in &sessions {
        hf.wait_established(s.peer, T).expect("Established");
        let theirs = &routes
            .iter()
            .find(|r| r.is_v6() == s.peer.is_ipv6())
            .expect("a BIRD route of each family")
            .prefix;
        wait_for(
            &format!("holdfastd holds {theirs} from {}", s.peer),
            T,
            || {
                let rib = hf.rib(RibTable::In, Some(s.peer))?;
                Ok(rib.iter().any(|r| &r.prefix == theirs).then_some(()))
            },
        )
        .expect("BIRD's routes");
    }

    // 1. The Loc-RIB, on demand.
    let loc = dir.join("loc.mrt");
    let v = dump(&hf, &lab, &loc, &["--table", "loc"]);
    let want = rib_view(&hf, RibTable::Loc, None);
    let lines = bgpdump(&loc);
    assert_eq!(dump_view(&lines), want, "bgpdump -m {}", loc.display());
    assert_eq!(
        v["ok"]["mrt"]["routes"].as_u64(),
        Some(want.len() as u64),
        "{v}"
    );
    assert!(
        want.iter().any(|r| r.0 == "0.0.0.0") && want.iter().any(|r| r.0 != "0.0.0.0"),
        "the Loc-RIB holds our networks and BIRD's routes: {want:?}"
    );
    let own = lines
        .iter()
        .find(|l| l.1 == "0.0.0.0")
        .expect("a network of ours");
    assert_eq!(own.2, "65000", "our own routes name our AS: {own:?}");
    let parsed: BTreeSet<(String, String)> =
        BgpkitParser::from_reader(std::fs::File::open(&loc).unwrap())
            .into_iter()
            .map(|e| (e.peer_ip.to_string(), e.prefix.prefix.to_string()))
            .collect();
    let from_rib: BTreeSet<(String, String)> =
        want.iter().map(|r| (r.0.clone(), r.1.clone())).collect();
    assert_eq!(parsed, from_rib, "bgpkit-parser on {}", loc.display());

    // 2. Every neighbour's Adj-RIB-In, and one neighbour's Adj-RIB-Out.
    let adj_in = dir.join("in.mrt");
    dump(&hf, &lab, &adj_in, &["--table", "in"]);
    let mut want_in = BTreeSet::new();
    for s in &sessions {
        want_in.extend(rib_view(&hf, RibTable::In, Some(s.peer)));
    }
    assert_eq!(
        dump_view(&bgpdump(&adj_in)),
        want_in,
        "bgpdump -m {}",
        adj_in.display()
    );
    let s0 = sessions[0].peer;
    let adj_out = dir.join("out.mrt");
    dump(
        &hf,
        &lab,
        &adj_out,
        &["--table", "out", "--peer", &s0.to_string()],
    );
    let want_out = rib_view(&hf, RibTable::Out, Some(s0));
    assert!(
        !want_out.is_empty(),
        "holdfastd advertises its networks to {s0}"
    );
    assert_eq!(
        dump_view(&bgpdump(&adj_out)),
        want_out,
        "bgpdump -m {}",
        adj_out.display()
    );

    // 3. A bad request writes nothing.
    let bad = dir.join("bad.mrt");
    let err = hf.cli(
        &lab,
        &[
            "dump",
            "mrt",
            &bad.to_string_lossy(),
            "--table",
            "in",
            "--peer",
            "192.0.2.99",
        ],
    );
    assert!(
        err.is_err(),
        "an unknown neighbour must be refused: {err:?}"
    );
    assert!(!bad.exists(), "nothing written for a refused dump");

    // 4. The timer: its newest file holds the whole Loc-RIB.
    let loc_now = rib_view(&hf, RibTable::Loc, None);
    wait_for(
        "a timed dump rib.<seconds>.mrt of the whole Loc-RIB",
        T,
        || {
            let newest = std::fs::read_dir(&dir)
                .map(|d| {
                    d.filter_map(|e| e.ok().map(|e| e.path()))
                        .filter_map(|p| {
                            let n = p.file_name()?.to_string_lossy().into_owned();
                            let secs = n
                                .strip_prefix("rib.")?
                                .strip_suffix(".mrt")?
                                .parse::<u64>()
                                .ok()?;
                            Some((secs, p))
                        })
                        .max()
                })
                .ok()
                .flatten();
            Ok(newest.filter(|(_, p)| dump_view(&bgpdump(p)) == loc_now))
        },
    )
    .expect("timed dump");

    // 5. The updates log: BIRD withdraws its IPv4 route.
    let v4 = routes
        .iter()
        .find(|r| !r.is_v6())
        .expect("an IPv4 route")
        .prefix
        .clone();
    bird.withdraw(&lab, std::slice::from_ref(&v4))
        .expect("withdraw");
    let v4_sessions: Vec<String> = sessions
        .iter()
        .filter(|s| s.peer.is_ipv4())
        .map(|s| s.peer.to_string())
        .collect();
    let log = wait_for("the withdrawal in the updates log", T, || {
        let lines = bgpdump(&updates);
        let withdrawn: BTreeSet<&str> = lines
            .iter()
            .filter(|l| l.0 == "W" && l.3 == v4)
            .map(|l| l.1.as_str())
            .collect();
        Ok((withdrawn.len() == v4_sessions.len()).then_some(lines))
    })
    .expect("updates log");
    for s in &sessions {
        let peer = s.peer.to_string();
        assert!(
            log.iter()
                .any(|l| l.0 == "A" && l.1 == peer && l.2 == "65001"),
            "{peer}'s announcement is in the log: {log:?}"
        );
        assert!(
            log.iter()
                .any(|l| l.0 == "STATE" && l.1 == peer && l.4 == "6"),
            "{peer}'s move to Established is in the log: {log:?}"
        );
    }
    let elems: Vec<(ElemType, String)> =
        BgpkitParser::from_reader(std::fs::File::open(&updates).unwrap())
            .into_iter()
            .map(|e| (e.elem_type, e.prefix.prefix.to_string()))
            .collect();
    assert!(
        elems.contains(&(ElemType::WITHDRAW, v4.clone())),
        "bgpkit-parser: {elems:?}"
    );
    assert!(
        elems.contains(&(ElemType::ANNOUNCE, v4)),
        "bgpkit-parser: {elems:?}"
    );

    bird.stop(&mut lab);
    hf.stop(&mut lab);
    lab.teardown();
}
