//! Routing instances and a Linux VRF in one holdfastd.
//!
//! ```text
//!   tester A AS65001 (instance default)              tester B AS65002 (instance blue)
//!   [ t1 ] 198.18.1.2 --- veth --- 198.18.1.1 [ hf ] 198.18.2.1 --- veth --- 198.18.2.2 [ t2 ]
//!                                               |  (hf side of link 2 enslaved
//!                                       vrf-blue (table 10)  to vrf-blue)
//!   default: [[network]] 10.100.0.0/24, neighbour A passive
//!   blue:    vrf = "vrf-blue", [[instance.static]] 10.200.0.0/24, neighbour B active
//! ```
//!
//! Checks:
//! * (kernels without VRF support: the instance is bound to the link device
//!   itself instead, and only the socket binding is checked.)
//! * B's session comes up through the VRF: holdfastd connects out to B, whose
//!   address is only routable in table 10 (the connected route moved there),
//!   so only a socket bound to vrf-blue reaches it; `ip vrf` confirms the link
//!   is enslaved and the default table has no route to B; `ss` shows the
//!   session socket bound to the VRF (ADDR%vrf-blue) and a VRF listener;
//! * A receives 10.100.0.0/24 and never B's 10.2.0.0/24 nor 10.200.0.0/24;
//!   B receives 10.200.0.0/24 and never A's 10.1.0.0/24 nor 10.100.0.0/24;
//! * holdfastd's Loc-RIB of `default` has A's and default's prefixes only, and
//!   that of `blue` has B's and blue's only.

use crate::robust_common;

use holdfast_api::{Body, Request, RibTable};
use holdfast_lab::skip_unless_ready;
use holdfast_tester::Peer;
use robust_common::*;
use std::collections::BTreeSet;
use std::net::{SocketAddr, TcpListener};
use std::time::Duration;

const T: Duration = Duration::from_secs(20);

fn loc(d: &holdfast_lab::Holdfastd, instance: &str) -> BTreeSet<String> {
    let req = Request::ShowRib {
        instance: Some(instance.into()),
        prefix: None,
        peer: None,
        table: RibTable::Loc,
        limit: None,
    };
    match d.request(&req).unwrap() {
        Body::Rib(r) => r.into_iter().map(|e| e.prefix).collect(),
        other => panic!("unexpected {other:?}"),
    }
}

#[test]
fn instances_and_vrf() {
    if skip_unless_ready(&[]) {
        return;
    }
    let mut s = setup("instances_vrf", 2);
    let (sa, sb) = (s.sides[0].clone(), s.sides[1].clone());
    // The VRF; kernels without CONFIG_NET_VRF (e.g. some VM kernels) cannot
    // create it: then the instance's sockets are bound to the link device
    // itself (the same SO_BINDTODEVICE path) and the table checks are skipped.
    let vrf_ok = s
        .lab
        .exec(
            s.hf,
            &[
                "ip", "link", "add", "vrf-blue", "type", "vrf", "table", "10",
            ],
        )
        .map(|o| o.status.success())
        .unwrap_or(false);
    let dev = if vrf_ok {
        for cmd in [
            vec!["ip", "link", "set", "vrf-blue", "up"],
            vec!["ip", "link", "set", sb.if_hf.as_str(), "master", "vrf-blue"],
            vec!["ip", "link", "set", sb.if_hf.as_str(), "up"],
        ] {
            s.lab
                .exec_ok(s.hf, &cmd)
                .unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
        }
        let main_route = s
            .lab
            .exec_ok(s.hf, &["ip", "-4", "route", "show", "table", "main"])
            .unwrap();
        assert!(
            !main_route.contains("198.18.2."),
            "B still routable in the main table:\n{main_route}"
        );
        let vrf_route = s
            .lab
            .exec_ok(s.hf, &["ip", "-4", "route", "show", "vrf", "vrf-blue"])
            .unwrap();
        assert!(
            vrf_route.contains("198.18.2."),
            "B not routable in vrf-blue:\n{vrf_route}"
        );
        "vrf-blue".to_string()
    } else {
        println!(
            "instances_vrf: kernel has no VRF support; binding instance blue to {} instead",
            sb.if_hf
        );
        sb.if_hf.clone()
    };

    let cfg = format!(
        "{}[[instance]]\nname = \"blue\"\nvrf = \"{dev}\"\n\n[[instance.static]]\nprefix = \"10.200.0.0/24\"\n\n\
         [[network]]\nprefix = \"10.100.0.0/24\"\n\n{}\
         [[neighbor]]\naddress = \"{}\"\nremote_asn = 65002\ninstance = \"blue\"\nimport = \"all\"\nexport = \"all\"\nconnect_retry = 1\n",
        global_block(""),
        neighbor_block(&sa, 65001, ""),
        sb.ip,
        dev = dev
    );
    let d = start_holdfastd(&mut s, &cfg);
    let a = connect(&sa, &tester_cfg(65001, 1), T);
    let (ns, ip) = (sb.netns.clone(), sb.ip);
    let b = holdfast_tester::netns::in_netns(&ns, move || {
        let l = TcpListener::bind(SocketAddr::new(ip, 179)).unwrap();
        Peer::accept(&l, &tester_cfg(65002, 2), Duration::from_secs(30))
    })
    .unwrap()
    .expect("holdfastd connects to B through vrf-blue");
    d.wait_established(sb.ip, T).unwrap();
    let nb = d.neighbor(sb.ip).unwrap().unwrap();
    assert_eq!(nb.instance, "blue");
    // The session's socket is bound to the device: ss shows ADDR%DEV.
    let ss = s
        .lab
        .exec_ok(
            s.hf,
            &[
                "ss",
                "-Htn",
                "state",
                "established",
                "dst",
                &sb.ip.to_string(),
            ],
        )
        .unwrap();
    assert!(
        ss.contains(&format!("%{dev}:")),
        "B's connection is not bound to {dev}:\n{ss}"
    );
    // A listener of the VRF next to the unbound one (only possible with a
    // real l3mdev: the kernel keys bind buckets by VRF, not by plain device).
    if vrf_ok {
        let ss = s
            .lab
            .exec_ok(s.hf, &["ss", "-Htln", "sport", "= :179"])
            .unwrap();
        assert!(
            ss.contains(&format!("%{dev}:179")),
            "no listener bound to {dev}:\n{ss}"
        );
    }

    a.announce(&attrs(65001, sa.ip), &[p4("10.1.0.0/24")])
        .unwrap();
    b.announce(&attrs(65002, sb.ip), &[p4("10.2.0.0/24")])
        .unwrap();
    a.wait("A receives default's network", T, |v| {
        v.routes.contains_key(&p4("10.100.0.0/24"))
    })
    .unwrap();
    b.wait("B receives blue's static", T, |v| {
        v.routes.contains_key(&p4("10.200.0.0/24"))
    })
    .unwrap();
    holdfast_lab::wait_until(
        "both Loc-RIBs have their peer's route",
        T,
        || Ok((loc(&d, "default"), loc(&d, "blue"))),
        |(x, y)| x.contains("10.1.0.0/24") && y.contains("10.2.0.0/24"),
    )
    .unwrap();
    // Give a leak the chance to show: one more export round on both sessions.
    std::thread::sleep(Duration::from_secs(1));
    let want = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<BTreeSet<_>>();
    assert_eq!(
        loc(&d, "default"),
        want(&["10.1.0.0/24", "10.100.0.0/24"]),
        "Loc-RIB of default"
    );
    assert_eq!(
        loc(&d, "blue"),
        want(&["10.2.0.0/24", "10.200.0.0/24"]),
        "Loc-RIB of blue"
    );
    a.view(|v| {
        let got: BTreeSet<String> = v.routes.keys().map(|p| p.to_string()).collect();
        assert!(
            !got.contains("10.2.0.0/24") && !got.contains("10.200.0.0/24"),
            "blue leaked into default: {got:?}"
        );
    });
    b.view(|v| {
        let got: BTreeSet<String> = v.routes.keys().map(|p| p.to_string()).collect();
        assert!(
            !got.contains("10.1.0.0/24") && !got.contains("10.100.0.0/24"),
            "default leaked into blue: {got:?}"
        );
    });
    for (p, who) in [(&a, "A"), (&b, "B")] {
        p.view(|v| {
            assert!(
                v.notifications.is_empty() && !v.closed,
                "{who}'s session disturbed"
            )
        });
    }
    drop(a);
    drop(b);
    let mut lab = s.lab;
    d.stop(&mut lab);
    lab.teardown();
}
