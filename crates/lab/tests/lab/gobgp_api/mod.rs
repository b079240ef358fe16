//! The GoBGP gRPC API of holdfastd, driven by the stock `gobgp` client
//! (Debian's gobgpd package), against a real FRR.
//!
//! ```text
//!   [ h: holdfastd AS65000 ] 198.18.1.1    ===== link 1 ===== 198.18.1.2    [ p: frr AS65001 ]
//!     grpc_listen            fd00:0:0:1::1                    fd00:0:0:1::2
//!     127.0.0.1:50051
//!   s1 v4: holdfastd active, frr passive      s2 v6: holdfastd passive, frr active
//!   (support/interop.rs: holdfastd's [[network]]s, frr's routes with MED and communities)
//!
//!   [ t: holdfastd AS65000, no neighbour ]  first without grpc_listen, then with TLS
//! ```
//!
//! Checked, each with `gobgp -u 127.0.0.1 -p 50051 …` run in `h`:
//! * `gobgp neighbor` / `gobgp neighbor ADDR` (text and `-j`): both sessions
//!   Established, peer AS 65001, router id, and the route and message
//!   counters equal to `holdfast show neighbors --json` (messages between
//!   two reads of it);
//! * `gobgp neighbor ADDR adj-in`: exactly the prefixes frr advertises
//!   (frr's own CLI), with AS path 65001 and frr's MED;
//!   `adj-out`: exactly the prefixes frr received from holdfastd;
//! * `gobgp global rib -a ipv4|ipv6`: the Loc-RIB of `holdfast show rib`,
//!   per family, with the best path flagged; `global rib PREFIX` and
//!   `global rib ADDRESS` (longest match) give that prefix;
//! * `gobgp global rib add 10.9.0.0/24 nexthop 192.0.2.1 community 65000:1
//!   med 10 aspath 65100 -a ipv4` (and an IPv6 route): frr receives each
//!   with AS path 65000 65100 (65000 for the IPv6 one), ORIGIN incomplete
//!   (gobgp's default), MED, community, next hop holdfastd's address; `del`: frr withdraws them; `gobgp monitor
//!   global rib --current` (started before) printed the table, then the
//!   add and the withdrawal;
//! * an RPC holdfastd does not serve (`gobgp neighbor add`) fails with
//!   Unimplemented naming the method;
//! * host `t`: without `grpc_listen` nothing listens on 50051 and the
//!   client fails; with `grpc_tls_cert`/`grpc_tls_key` (a self-signed
//!   certificate made here by `openssl`) `gobgp --tls --tls-ca-file` works
//!   and a plaintext client is refused.

use crate::common;

use std::collections::BTreeSet;
use std::net::IpAddr;
use std::time::Duration;

use holdfast_api::{NeighborInfo, RibTable};
use holdfast_lab::{
    skip_unless_ready, skip_unless_tools, wait_for, Frr, HostId, Lab, Peer, PeerKind,
};
use serde_json::Value;

const T: Duration = Duration::from_secs(30);
const GRPC: &str = "127.0.0.1:50051";

/// `gobgp -u 127.0.0.1 -p 50051 [extra] args…` in `host`: (success, stdout, stderr).
fn gobgp_with(lab: &Lab, host: HostId, extra: &[&str], args: &[&str]) -> (bool, String, String) {
    let mut cmd = vec!["gobgp", "-u", "127.0.0.1", "-p", "50051"];
    cmd.extend_from_slice(extra);
    cmd.extend_from_slice(args);
    let out = lab
        .exec_timeout(host, &cmd, Duration::from_secs(15))
        .expect("running gobgp");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn gobgp(lab: &Lab, host: HostId, args: &[&str]) -> String {
    let (ok, out, err) = gobgp_with(lab, host, &[], args);
    assert!(ok, "gobgp {}: {err}{out}", args.join(" "));
    out
}

fn gobgp_json(lab: &Lab, host: HostId, args: &[&str]) -> Value {
    let mut a = args.to_vec();
    a.push("-j");
    let out = gobgp(lab, host, &a);
    serde_json::from_str(out.trim()).unwrap_or_else(|e| panic!("gobgp {args:?} -j: {e}: {out}"))
}

/// The prefixes (keys) of a `gobgp … rib -j` answer.
fn json_prefixes(v: &Value) -> BTreeSet<String> {
    v.as_object()
        .map(|m| m.keys().cloned().collect())
        .unwrap_or_default()
}

fn neighbor_of(list: &[NeighborInfo], addr: IpAddr) -> NeighborInfo {
    list.iter()
        .find(|n| n.address == addr.to_string())
        .cloned()
        .expect("neighbour in show neighbors")
}

/// Checks one peer of `gobgp neighbor -j` against `show neighbors` read
/// before and after it.
fn check_peer(p: &Value, before: &NeighborInfo, after: &NeighborInfo) {
    let st = &p["state"];
    assert_eq!(st["session_state"], 6, "ESTABLISHED: {p}");
    assert_eq!(st["peer_asn"], u64::from(after.remote_as), "{p}");
    assert_eq!(st["router_id"].as_str(), after.remote_id.as_deref(), "{p}");
    let sum = |k: &str| -> u64 {
        p["afi_safis"]
            .as_array()
            .map(|a| a.iter().map(|x| x["state"][k].as_u64().unwrap_or(0)).sum())
            .unwrap_or(0)
    };
    assert_eq!(sum("received"), after.prefixes_received, "{p}");
    assert_eq!(sum("accepted"), after.prefixes_accepted, "{p}");
    assert_eq!(sum("advertised"), after.prefixes_advertised, "{p}");
    let rcvd = st["messages"]["received"]["total"].as_u64().unwrap_or(0);
    let sent = st["messages"]["sent"]["total"].as_u64().unwrap_or(0);
    assert!(
        (before.msgs_in..=after.msgs_in).contains(&rcvd),
        "messages received {rcvd} not within show neighbors' {}..={}",
        before.msgs_in,
        after.msgs_in
    );
    assert!(
        (before.msgs_out..=after.msgs_out).contains(&sent),
        "messages sent {sent} not within show neighbors' {}..={}",
        before.msgs_out,
        after.msgs_out
    );
}

#[test]
fn gobgp_client_against_holdfastd() {
    if skip_unless_ready(&[PeerKind::Frr]) || skip_unless_tools(&["gobgp", "openssl", "ss"]) {
        return;
    }
    let mut lab = Lab::new("gobgp_api").expect("lab");
    let h = lab.host("h").expect("host h");
    let p = lab.host("p").expect("host p");
    let l = lab.link_auto(h, p).expect("link");
    let info = lab.link_info(l).clone();
    let (v4, v6) = (info.v4.expect("v4"), info.v6.expect("v6"));
    let sessions = vec![
        common::Sess::new("s1-v4", (v4.a.into(), v4.b.into()), false),
        common::Sess::new("s2-v6", (v6.a.into(), v6.b.into()), true),
    ];
    let cfg = common::hf_config(&sessions, &common::networks(), "all").replacen(
        "[global]\n",
        &format!("[global]\ngrpc_listen = \"{GRPC}\"\n"),
        1,
    );
    let hf = holdfast_lab::Holdfastd::start(&mut lab, h, "holdfastd", &cfg).expect("holdfastd");
    let routes = common::peer_routes();
    let frr = Frr::start(&mut lab, p, &common::peer_spec(&sessions, &routes)).expect("frr");
    for s in &sessions {
        hf.wait_established(s.peer, T).expect("Established");
        wait_for(&format!("frr's routes from {}", s.peer), T, || {
            let theirs: BTreeSet<String> = frr
                .advertised_routes(&lab, s.hf)?
                .into_iter()
                .map(|r| r.prefix)
                .collect();
            let got: BTreeSet<String> = hf
                .rib(RibTable::In, Some(s.peer))?
                .into_iter()
                .map(|r| r.prefix)
                .collect();
            Ok((!theirs.is_empty() && got == theirs).then_some(()))
        })
        .expect("holdfastd holds frr's routes");
        wait_for(&format!("frr holds our networks on {}", s.name), T, || {
            let n = frr.received_routes(&lab, s.hf)?.len();
            Ok((n == 3).then_some(()))
        })
        .expect("frr holds holdfastd's networks");
    }

    // 1. gobgp neighbor, list and detail.
    let before = hf.neighbors().expect("show neighbors");
    let list = gobgp_json(&lab, h, &["neighbor"]);
    let after = hf.neighbors().expect("show neighbors");
    let list = list.as_array().expect("a list of peers").clone();
    assert_eq!(list.len(), sessions.len(), "{list:?}");
    for s in &sessions {
        let pj = list
            .iter()
            .find(|x| x["state"]["neighbor_address"] == s.peer.to_string())
            .unwrap_or_else(|| panic!("{} in gobgp neighbor: {list:?}", s.peer));
        check_peer(
            pj,
            &neighbor_of(&before, s.peer),
            &neighbor_of(&after, s.peer),
        );
    }
    let text = gobgp(&lab, h, &["neighbor"]);
    for s in &sessions {
        let line = text
            .lines()
            .find(|l| l.starts_with(&s.peer.to_string()))
            .unwrap_or_else(|| panic!("{} in gobgp neighbor:\n{text}", s.peer));
        assert!(line.contains("65001") && line.contains("Establ"), "{line}");
    }
    let detail = gobgp(&lab, h, &["neighbor", &sessions[0].peer.to_string()]);
    assert!(
        detail.contains(&format!(
            "BGP neighbor is {}, remote AS 65001",
            sessions[0].peer
        )) && detail.contains("BGP state = ESTABLISHED"),
        "{detail}"
    );
    eprintln!(
        "gobgp neighbor:\n{text}\ngobgp neighbor {}:\n{detail}",
        sessions[0].peer
    );

    // 2. adj-in is what frr advertised; adj-out is what frr received.
    for s in &sessions {
        let peer = s.peer.to_string();
        let adj_in = gobgp_json(&lab, h, &["neighbor", &peer, "adj-in"]);
        let sent: Vec<_> = frr.advertised_routes(&lab, s.hf).expect("frr advertised");
        let want: BTreeSet<String> = sent.iter().map(|r| r.prefix.clone()).collect();
        assert_eq!(json_prefixes(&adj_in), want, "adj-in of {peer}: {adj_in}");
        let text = gobgp(&lab, h, &["neighbor", &peer, "adj-in"]);
        for r in &sent {
            let line = text
                .lines()
                .find(|l| l.contains(&r.prefix))
                .unwrap_or_else(|| panic!("{} in adj-in:\n{text}", r.prefix));
            assert!(line.contains("65001"), "AS path 65001: {line}");
            if let Some(med) = r.med {
                assert!(line.contains(&format!("{{Med: {med}}}")), "MED: {line}");
            }
        }
        let adj_out = gobgp_json(&lab, h, &["neighbor", &peer, "adj-out"]);
        let got: BTreeSet<String> = frr
            .received_routes(&lab, s.hf)
            .expect("frr received")
            .into_iter()
            .map(|r| r.prefix)
            .collect();
        assert_eq!(json_prefixes(&adj_out), got, "adj-out of {peer}: {adj_out}");
    }

    // 3. The global RIB of each family is the Loc-RIB.
    let loc = hf.rib(RibTable::Loc, None).expect("show rib");
    for (fam, v6) in [("ipv4", false), ("ipv6", true)] {
        let rib = gobgp_json(&lab, h, &["global", "rib", "-a", fam]);
        let want: BTreeSet<String> = loc
            .iter()
            .filter(|r| r.prefix.contains(':') == v6)
            .map(|r| r.prefix.clone())
            .collect();
        assert!(!want.is_empty());
        assert_eq!(json_prefixes(&rib), want, "global rib -a {fam}: {rib}");
        for (prefix, paths) in rib.as_object().expect("map") {
            let best = paths
                .as_array()
                .map_or(0, |a| a.iter().filter(|x| x["best"] == true).count());
            assert_eq!(best, 1, "one best path for {prefix}: {paths}");
        }
    }
    let text = gobgp(&lab, h, &["global", "rib"]);
    assert!(text.contains("*> 10.10.0.0/24"), "{text}");
    // A prefix, and an address (its longest match).
    for q in ["10.10.0.0/24", "10.10.0.5"] {
        let one = gobgp_json(&lab, h, &["global", "rib", q]);
        assert_eq!(
            json_prefixes(&one),
            BTreeSet::from(["10.10.0.0/24".to_string()]),
            "gobgp global rib {q}: {one}"
        );
    }

    // 4. rib add / del, seen by frr and by a monitor.
    let mon = lab
        .spawn(
            h,
            "gobgp-monitor",
            &[
                "timeout",
                "60",
                "gobgp",
                "-u",
                "127.0.0.1",
                "-p",
                "50051",
                "monitor",
                "global",
                "rib",
                "--current",
            ],
            &[],
        )
        .expect("gobgp monitor");
    let mon_log = lab.proc_logs(mon).0.to_path_buf();
    // `--current`: the table first, printed once the monitor is subscribed.
    wait_for("the monitor prints the current table", T, || {
        let log = std::fs::read_to_string(&mon_log).unwrap_or_default();
        Ok(log.contains("[ROUTE] 10.10.0.0/24 ").then_some(()))
    })
    .expect("gobgp monitor global rib --current");
    let adds: [(&str, &[&str], usize); 2] = [
        (
            "10.9.0.0/24",
            &[
                "nexthop",
                "192.0.2.1",
                "community",
                "65000:1",
                "med",
                "10",
                "aspath",
                "65100",
                "-a",
                "ipv4",
            ],
            0,
        ),
        (
            "2001:db8:9::/48",
            &[
                "nexthop",
                "2001:db8::1",
                "community",
                "65000:2",
                "med",
                "20",
                "-a",
                "ipv6",
            ],
            1,
        ),
    ];
    for (prefix, args, si) in adds {
        let mut a = vec!["global", "rib", "add", prefix];
        a.extend_from_slice(args);
        gobgp(&lab, h, &a);
        let s = &sessions[si];
        let r = wait_for(&format!("frr receives {prefix}"), T, || {
            Ok(frr
                .received_routes(&lab, s.hf)?
                .into_iter()
                .find(|r| r.prefix == prefix))
        })
        .expect("frr receives the added route");
        let comm = if si == 0 { (65000, 1) } else { (65000, 2) };
        // gobgp's defaults: ORIGIN INCOMPLETE; the AS_PATH asked for, ours
        // prepended on this eBGP session (next hop self, as for [[network]]).
        let path = if si == 0 {
            vec![65000, 65100]
        } else {
            vec![65000]
        };
        assert_eq!(r.as_path, path, "{r:?}");
        assert_eq!(r.origin.as_deref(), Some("incomplete"), "{r:?}");
        assert_eq!(r.next_hop, Some(s.hf), "{r:?}");
        assert_eq!(r.communities, vec![comm], "{r:?}");
        assert_eq!(r.med, Some(if si == 0 { 10 } else { 20 }), "{r:?}");
        wait_for(&format!("monitor shows {prefix}"), T, || {
            let log = std::fs::read_to_string(&mon_log).unwrap_or_default();
            Ok(log.contains(&format!("[ROUTE] {prefix} ")).then_some(()))
        })
        .expect("the monitor prints the added route");
    }
    let rib = gobgp(&lab, h, &["global", "rib", "-a", "ipv4"]);
    assert!(
        rib.lines()
            .any(|l| l.contains("10.9.0.0/24") && l.contains("192.0.2.1") && l.contains("65000:1")),
        "{rib}"
    );
    for (prefix, fam, si) in [("10.9.0.0/24", "ipv4", 0), ("2001:db8:9::/48", "ipv6", 1)] {
        gobgp(&lab, h, &["global", "rib", "del", prefix, "-a", fam]);
        let s = &sessions[si];
        wait_for(&format!("frr withdraws {prefix}"), T, || {
            let gone = !frr
                .received_routes(&lab, s.hf)?
                .iter()
                .any(|r| r.prefix == prefix);
            Ok(gone.then_some(()))
        })
        .expect("frr withdraws the deleted route");
        wait_for(&format!("monitor shows {prefix} withdrawn"), T, || {
            let log = std::fs::read_to_string(&mon_log).unwrap_or_default();
            Ok(log.contains(&format!("[DELROUTE] {prefix} ")).then_some(()))
        })
        .expect("the monitor prints the withdrawal");
    }
    eprintln!(
        "gobgp monitor global rib:\n{}",
        std::fs::read_to_string(&mon_log).unwrap_or_default()
    );
    lab.stop_proc(mon);

    // 5. What holdfastd does not serve says so.
    let (ok, out, err) = gobgp_with(&lab, h, &[], &["neighbor", "add", "198.18.9.9", "as", "1"]);
    assert!(!ok, "neighbor add must fail: {out}");
    let said = format!("{out}{err}");
    assert!(
        said.contains("Unimplemented") && said.contains("AddPeer"),
        "UNIMPLEMENTED naming the method: {said}"
    );
    eprintln!("gobgp neighbor add: {}", said.trim());

    // 6. Host t: no grpc_listen, nothing listens; then TLS only.
    let t = lab.host("t").expect("host t");
    let plain = "[global]\nasn = 65000\nrouter_id = \"192.0.2.101\"\nlisten = \"127.0.0.1:179\"\n";
    let off = holdfast_lab::Holdfastd::start(&mut lab, t, "holdfastd-nogrpc", plain)
        .expect("holdfastd without grpc_listen");
    let listening = lab
        .exec_ok(t, &["ss", "-ltnH", "sport = :50051"])
        .expect("ss");
    assert!(listening.trim().is_empty(), "nothing on 50051: {listening}");
    let (ok, _, err) = gobgp_with(&lab, t, &[], &["neighbor"]);
    assert!(!ok, "no API without grpc_listen: {err}");
    off.stop(&mut lab);
    let dir = lab.work_dir().join("tls");
    std::fs::create_dir_all(&dir).expect("tls dir");
    let (cert, key) = (dir.join("cert.pem"), dir.join("key.pem"));
    let (cert_s, key_s) = (cert.to_string_lossy(), key.to_string_lossy());
    lab.exec_ok(
        t,
        &[
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-keyout",
            &key_s,
            "-out",
            &cert_s,
            "-days",
            "1",
            "-subj",
            "/CN=127.0.0.1",
            "-addext",
            "subjectAltName=IP:127.0.0.1",
        ],
    )
    .expect("openssl makes a self-signed certificate");
    let tls = format!(
        "{plain}grpc_listen = \"{GRPC}\"\ngrpc_tls_cert = \"{cert_s}\"\ngrpc_tls_key = \"{key_s}\"\n"
    );
    let _on = holdfast_lab::Holdfastd::start(&mut lab, t, "holdfastd-tls", &tls)
        .expect("holdfastd with TLS");
    let (ok, out, err) = gobgp_with(&lab, t, &["--tls", "--tls-ca-file", &cert_s], &["global"]);
    assert!(
        ok && out.contains("AS:        65000"),
        "gobgp over TLS: {err}{out}"
    );
    let (ok, out, err) = gobgp_with(&lab, t, &[], &["global"]);
    assert!(
        !ok,
        "a plaintext client is refused when TLS is on: {out}{err}"
    );
    eprintln!(
        "plaintext client against TLS: {}",
        format!("{out}{err}").trim()
    );
}
