//! BFD (RFC 5880, RFC 5881 single-hop) between holdfastd and real frr bfdd and
//! bird2, over IPv4 and IPv6 transport, and BFD Down taking BGP down (RFC 5882).
//! Three tests: `bfd_with_frr_and_bird` (below), `bfd_authentication_with_bird`
//! and `bfd_multihop_with_frr` (their drawings and checks are on each).
//!
//! ```text
//!                        link 1 (198.18.1.0/24, fd00:0:0:1::/64)
//!   [ p: frr + bfdd AS65001 ] ============================ [ h: holdfastd AS65000 ]
//!                                                             ||  link 2 (198.18.2.0/24,
//!   [ b: bird2 AS65002 ] ========================================  fd00:0:0:2::/64)
//!   four BGP sessions (frr v4, frr v6, bird v4, bird v6), each with BFD at
//!   300 ms x 3 on both sides
//! ```
//!
//! Checked:
//! * every BGP session is Established and its BFD session Up in `holdfast show bfd`,
//!   in frr's `show bfd peers json` (status "up", remote-id = holdfastd's local
//!   discriminator) and in bird2's `birdc show bfd sessions` (state Up), IPv4 and IPv6;
//! * a reload that changes holdfastd's timers for the frr neighbours (TX 300 → 200 ms,
//!   RX 300 → 250 ms, multiplier 3 → 4) is renegotiated: frr shows the new remote
//!   intervals and multiplier; sampled every 100 ms meanwhile, frr's session never
//!   leaves "up", its session-down counter does not move and its uptime keeps growing;
//!   BGP stays Established;
//! * a real link failure (frr's interface set down in its own namespace): holdfastd
//!   declares both frr BFD sessions Down within the detection time (900 ms, plus the
//!   100 ms polling step), stops both BGP sessions (log: "BFD down", Cease/BFD Down),
//!   and keeps them down while BFD is down; bird2's sessions on the other link stay Up;
//! * the link back up: BFD comes Up again and BGP re-establishes after the hold-down.

use holdfast_api::{BfdSessionInfo, Body, Request};
use holdfast_lab::{
    skip_unless_ready, wait_until, Bird, Frr, Holdfastd, Lab, NeighborSpec, Peer, PeerKind,
    PeerSpec,
};
use std::net::{IpAddr, Ipv4Addr};
use std::thread::sleep;
use std::time::{Duration, Instant};

fn show_bfd(hf: &Holdfastd) -> Vec<BfdSessionInfo> {
    match hf.request(&Request::ShowBfd) {
        Ok(Body::Bfd(v)) => v,
        other => panic!("show bfd: {other:?}"),
    }
}

fn bfd_of(list: &[BfdSessionInfo], peer: IpAddr) -> Option<BfdSessionInfo> {
    list.iter().find(|b| b.peer == peer.to_string()).cloned()
}

fn frr_peer(v: &serde_json::Value, peer: IpAddr) -> Option<serde_json::Value> {
    v.as_array()?
        .iter()
        .find(|p| p["peer"].as_str() == Some(&peer.to_string()))
        .cloned()
}

fn config(frr: &[IpAddr], bird: &[IpAddr], frr_bfd: &str) -> String {
    let mut s = String::from(
        "[global]\nasn = 65000\nrouter_id = \"192.0.2.1\"\nconnect_retry = 2\n\n[bfd]\nmin_rx_ms = 300\nmin_tx_ms = 300\nmultiplier = 3\n",
    );
    for a in frr {
        s.push_str(&format!(
            "\n[[neighbor]]\naddress = \"{a}\"\nremote_asn = 65001\nimport = \"all\"\nexport = \"all\"\n{frr_bfd}\n"
        ));
    }
    for a in bird {
        s.push_str(&format!(
            "\n[[neighbor]]\naddress = \"{a}\"\nremote_asn = 65002\nimport = \"all\"\nexport = \"all\"\nbfd = true\n"
        ));
    }
    s
}

#[test]
fn bfd_with_frr_and_bird() {
    if skip_unless_ready(&[PeerKind::Frr, PeerKind::Bird]) {
        return;
    }
    let mut lab = Lab::new("bfd").expect("lab");
    let h = lab.host("h").expect("host h");
    let p = lab.host("p").expect("host p");
    let b = lab.host("b").expect("host b");
    let l1 = lab.link_auto(h, p).expect("link 1");
    let l2 = lab.link_auto(h, b).expect("link 2");
    let i1 = lab.link_info(l1).clone();
    let i2 = lab.link_info(l2).clone();
    let (v4a, v6a) = (i1.v4.expect("v4"), i1.v6.expect("v6"));
    let (v4b, v6b) = (i2.v4.expect("v4"), i2.v6.expect("v6"));
    let frr_addrs: Vec<IpAddr> = vec![v4a.b.into(), v6a.b.into()];
    let bird_addrs: Vec<IpAddr> = vec![v4b.b.into(), v6b.b.into()];
    let hf_frr: Vec<IpAddr> = vec![v4a.a.into(), v6a.a.into()];
    let hf_bird: Vec<IpAddr> = vec![v4b.a.into(), v6b.a.into()];

    let cfg = config(&frr_addrs, &bird_addrs, "bfd = true");
    let hf = Holdfastd::start(&mut lab, h, "holdfastd", &cfg).expect("holdfastd");
    let mut fspec = PeerSpec::new(65001, Ipv4Addr::new(192, 0, 2, 11));
    for a in &hf_frr {
        fspec = fspec.neighbor(NeighborSpec::new(*a, 65000).bfd(300, 300, 3));
    }
    let frr = Frr::start(&mut lab, p, &fspec).expect("frr");
    let mut bspec = PeerSpec::new(65002, Ipv4Addr::new(192, 0, 2, 12));
    for a in &hf_bird {
        bspec = bspec.neighbor(NeighborSpec::new(*a, 65000).bfd(300, 300, 3));
    }
    let bird = Bird::start(&mut lab, b, &bspec).expect("bird");

    // 1. Everything up, seen from all three sides.
    for a in frr_addrs.iter().chain(&bird_addrs) {
        hf.wait_established(*a, Duration::from_secs(60))
            .unwrap_or_else(|e| panic!("BGP with {a}: {e}"));
    }
    let list = wait_until(
        "holdfastd: four BFD sessions Up",
        Duration::from_secs(30),
        || Ok(show_bfd(&hf)),
        |l| l.len() == 4 && l.iter().all(|b| b.state == "Up"),
    )
    .expect("BFD up on holdfastd");
    eprintln!("holdfast show bfd: {list:#?}");
    for b in &list {
        // §6.8.7: at most the interval apart (plus scheduling slack).
        assert!(
            b.tx_gap_max_us <= b.tx_interval_us + 50_000,
            "TX gap {} µs over the {} µs interval: {b:?}",
            b.tx_gap_max_us,
            b.tx_interval_us
        );
    }
    for a in &frr_addrs {
        let ours = bfd_of(&list, *a).expect("session");
        assert_eq!(ours.mode, "single-hop");
        let theirs = wait_until(
            "frr: BFD peer up",
            Duration::from_secs(20),
            || frr.bfd_peers(&lab),
            |v| frr_peer(v, ours_local(&hf_frr, *a)).is_some_and(|p| p["status"] == "up"),
        )
        .expect("frr BFD up");
        let fp = frr_peer(&theirs, ours_local(&hf_frr, *a)).expect("frr peer");
        eprintln!("frr show bfd peers json ({a}): {fp}");
        assert_eq!(
            fp["remote-id"].as_u64(),
            Some(u64::from(ours.local_discriminator)),
            "frr's remote id is holdfastd's discriminator"
        );
        assert_eq!(
            fp["id"].as_u64(),
            Some(u64::from(ours.remote_discriminator))
        );
    }
    let sessions = wait_until(
        "bird2: BFD sessions Up",
        Duration::from_secs(20),
        || bird.bfd_sessions(&lab),
        |t| {
            hf_bird.iter().all(|a| {
                t.lines()
                    .any(|l| l.starts_with(&a.to_string()) && l.contains("Up"))
            })
        },
    )
    .expect("bird BFD up");
    eprintln!("birdc show bfd sessions:\n{sessions}");

    // 2. Reload with new timers for frr's neighbours: a Poll Sequence, no flap.
    let frr_v4_local = hf_frr[0];
    let before = frr_peer(&frr.bfd_peers(&lab).expect("frr"), frr_v4_local).expect("peer");
    let downs_before = frr_down_events(&frr, &lab, frr_v4_local);
    let new_cfg = config(
        &frr_addrs,
        &bird_addrs,
        "[neighbor.bfd]\nmin_tx_ms = 200\nmin_rx_ms = 250\nmultiplier = 4",
    );
    hf.reload(&mut lab, &new_cfg).expect("reload");
    let start = Instant::now();
    let mut renegotiated = false;
    let mut last_uptime = before["uptime"].as_u64().unwrap_or(0);
    while start.elapsed() < Duration::from_secs(10) {
        let v = frr.bfd_peers(&lab).expect("frr");
        for a in &hf_frr {
            let fp = frr_peer(&v, *a).expect("frr peer");
            assert_eq!(
                fp["status"], "up",
                "frr's BFD session left Up during the reload: {fp}"
            );
        }
        let fp = frr_peer(&v, frr_v4_local).expect("frr peer");
        let up = fp["uptime"].as_u64().unwrap_or(0);
        assert!(up >= last_uptime, "frr's BFD uptime went back: {fp}");
        last_uptime = up;
        if fp["remote-transmit-interval"].as_u64() == Some(200)
            && fp["remote-receive-interval"].as_u64() == Some(250)
            && fp["remote-detect-multiplier"].as_u64() == Some(4)
            && start.elapsed() > Duration::from_secs(3)
        {
            eprintln!("frr after the reload: {fp}");
            renegotiated = true;
            break;
        }
        sleep(Duration::from_millis(100));
    }
    assert!(renegotiated, "frr never showed the new intervals");
    assert_eq!(
        frr_down_events(&frr, &lab, frr_v4_local),
        downs_before,
        "frr counted a BFD session down during the reload"
    );
    let ours = bfd_of(&show_bfd(&hf), frr_addrs[0]).expect("session");
    assert_eq!(
        (ours.state.as_str(), ours.multiplier),
        ("Up", 4),
        "{ours:?}"
    );
    for a in frr_addrs.iter().chain(&bird_addrs) {
        let n = hf.neighbor(*a).expect("ctl").expect("neighbour");
        assert_eq!(n.state, "Established", "BGP dropped by the reload: {n:?}");
    }

    // 3. A real link failure on frr's side.
    let detect = Duration::from_micros(ours.detection_time_us);
    assert_eq!(detect, Duration::from_millis(900), "frr: 300 ms x 3");
    lab.exec_ok(p, &["ip", "link", "set", &i1.if_b, "down"])
        .expect("link down");
    let cut = Instant::now();
    let mut down_after = None;
    while cut.elapsed() < Duration::from_secs(5) {
        let l = show_bfd(&hf);
        if frr_addrs
            .iter()
            .all(|a| bfd_of(&l, *a).is_some_and(|b| b.state == "Down"))
        {
            down_after = Some(cut.elapsed());
            eprintln!("holdfast show bfd after the cut: {l:#?}");
            break;
        }
        sleep(Duration::from_millis(20));
    }
    let down_after = down_after.expect("holdfastd never declared BFD Down");
    eprintln!(
        "BFD Down {} ms after the link went down",
        down_after.as_millis()
    );
    assert!(
        down_after <= detect + Duration::from_millis(100),
        "BFD Down after {down_after:?}, detection time {detect:?}"
    );
    for a in &frr_addrs {
        wait_until(
            "BGP down after BFD Down",
            Duration::from_secs(3),
            || Ok(hf.neighbor(*a)?.expect("neighbour")),
            |n| n.state != "Established",
        )
        .expect("BGP down");
    }
    let log = hf.log_text(&lab);
    assert!(
        log.contains("BFD down: stopping the session"),
        "log: no BFD down"
    );
    let l = show_bfd(&hf);
    for a in &bird_addrs {
        assert_eq!(
            bfd_of(&l, *a).expect("bird").state,
            "Up",
            "bird's BFD affected"
        );
    }
    // Held down while BFD is down (connect retry is 2 s).
    sleep(Duration::from_secs(3));
    for a in &frr_addrs {
        let n = hf.neighbor(*a).expect("ctl").expect("neighbour");
        assert_eq!(
            n.state, "Idle",
            "BGP not held down while BFD is down: {n:?}"
        );
    }

    // 4. Link back: BFD Up, then BGP after the hold-down.
    lab.exec_ok(p, &["ip", "link", "set", &i1.if_b, "up"])
        .expect("link up");
    wait_until(
        "BFD Up again",
        Duration::from_secs(30),
        || Ok(show_bfd(&hf)),
        |l| {
            frr_addrs
                .iter()
                .all(|a| bfd_of(l, *a).is_some_and(|b| b.state == "Up"))
        },
    )
    .expect("BFD up again");
    for a in &frr_addrs {
        hf.wait_established(*a, Duration::from_secs(60))
            .unwrap_or_else(|e| panic!("BGP with {a} after the link came back: {e}"));
    }
    lab.teardown();
}

/// holdfastd's address on the link of frr's neighbour `frr_addr` (frr keys
/// its BFD peers by our address).
fn ours_local(hf_frr: &[IpAddr], frr_addr: IpAddr) -> IpAddr {
    *hf_frr
        .iter()
        .find(|a| a.is_ipv4() == frr_addr.is_ipv4())
        .expect("same family")
}

fn frr_down_events(frr: &Frr, lab: &Lab, peer: IpAddr) -> u64 {
    let v = frr.bfd_peer_counters(lab).expect("frr counters");
    frr_peer(&v, peer)
        .and_then(|p| p["session-down"].as_u64())
        .unwrap_or_else(|| panic!("frr counters without session-down for {peer}: {v}"))
}

/// Authentication against bird2 (RFC 5880 §6.7), one bird2 per key so that
/// each has its own `protocol bfd`:
///
/// ```text
///   [ b1: bird2 meticulous keyed SHA1, id 7 ] ==== link 1 ==== [ h: holdfastd ]
///   [ b2: bird2 simple password, id 1 ]       ==== link 2 ====
///   [ b3: bird2 keyed MD5 "right" ]           ==== link 3 ==== (holdfastd: "wrong")
/// ```
///
/// Checked: b1 and b2 come Up on both sides (`holdfast show bfd` shows the
/// auth type; `birdc show bfd sessions` shows Up); b3, whose key differs,
/// never comes Up on either side within 8 s, and holdfastd counts its
/// packets as dropped — BGP itself is up on all three (BFD does not gate the
/// first start).
#[test]
fn bfd_authentication_with_bird() {
    if skip_unless_ready(&[PeerKind::Bird]) {
        return;
    }
    let mut lab = Lab::new("bfdauth").expect("lab");
    let h = lab.host("h").expect("host h");
    let cases = [
        (
            "meticulous keyed sha1",
            "meticulous-sha1",
            7u8,
            "sha1-secret",
            "sha1-secret",
        ),
        ("simple", "simple", 1, "plain", "plain"),
        ("keyed md5", "keyed-md5", 1, "right", "wrong"),
    ];
    let mut cfg =
        String::from("[global]\nasn = 65000\nrouter_id = \"192.0.2.1\"\nconnect_retry = 2\n");
    let mut peers = Vec::new();
    for (i, (bird_kind, hf_kind, id, bird_pw, hf_pw)) in cases.iter().enumerate() {
        let host = lab.host(&format!("b{}", i + 1)).expect("host");
        let l = lab.link_auto(h, host).expect("link");
        let v4 = lab.link_info(l).v4.expect("v4");
        let (ours, theirs): (IpAddr, IpAddr) = (v4.a.into(), v4.b.into());
        cfg.push_str(&format!(
            "\n[[neighbor]]\naddress = \"{theirs}\"\nremote_asn = 65002\nimport = \"all\"\nexport = \"all\"\n\
             [neighbor.bfd]\nauth = \"{hf_kind}\"\nkey_id = {id}\npassword = \"{hf_pw}\"\n"
        ));
        let spec = PeerSpec::new(65002, Ipv4Addr::new(192, 0, 2, 20 + i as u8)).neighbor(
            NeighborSpec::new(ours, 65000)
                .bfd(300, 300, 3)
                .bfd_auth(bird_kind, *id, bird_pw),
        );
        peers.push((host, ours, theirs, spec));
    }
    let hf = Holdfastd::start(&mut lab, h, "holdfastd", &cfg).expect("holdfastd");
    let mut birds = Vec::new();
    for (host, ours, theirs, spec) in &peers {
        birds.push((
            Bird::start(&mut lab, *host, spec).expect("bird"),
            *ours,
            *theirs,
        ));
    }
    for (_, _, theirs) in &birds {
        hf.wait_established(*theirs, Duration::from_secs(60))
            .unwrap_or_else(|e| panic!("BGP with {theirs}: {e}"));
    }
    let good = [birds[0].2, birds[1].2];
    let list = wait_until(
        "holdfastd: authenticated BFD sessions Up",
        Duration::from_secs(30),
        || Ok(show_bfd(&hf)),
        |l| {
            good.iter()
                .all(|a| bfd_of(l, *a).is_some_and(|b| b.state == "Up"))
        },
    )
    .expect("authenticated BFD up");
    eprintln!("holdfast show bfd: {list:#?}");
    assert_eq!(
        bfd_of(&list, good[0]).expect("b1").auth,
        "Meticulous Keyed SHA1"
    );
    assert_eq!(bfd_of(&list, good[1]).expect("b2").auth, "Simple Password");
    for (bird, ours, _) in &birds[..2] {
        let t = wait_until(
            "bird2: BFD Up",
            Duration::from_secs(20),
            || bird.bfd_sessions(&lab),
            |t| {
                t.lines()
                    .any(|l| l.starts_with(&ours.to_string()) && l.contains("Up"))
            },
        )
        .expect("bird BFD up");
        eprintln!("birdc show bfd sessions:\n{t}");
    }
    let (bad_bird, bad_ours, bad_theirs) = &birds[2];
    let since = Instant::now();
    while since.elapsed() < Duration::from_secs(8) {
        let b = bfd_of(&show_bfd(&hf), *bad_theirs).expect("b3");
        assert_ne!(b.state, "Up", "BFD came up with a wrong key: {b:?}");
        let t = bad_bird.bfd_sessions(&lab).expect("birdc");
        assert!(
            !t.lines()
                .any(|l| l.starts_with(&bad_ours.to_string()) && l.contains("Up")),
            "bird2 accepted a wrong key:\n{t}"
        );
        sleep(Duration::from_millis(500));
    }
    let b = bfd_of(&show_bfd(&hf), *bad_theirs).expect("b3");
    assert!(
        b.packets_dropped > 0,
        "wrong-key packets not dropped: {b:?}"
    );
    eprintln!("wrong key: {b:?}");
    lab.teardown();
}

/// RFC 5883 multihop BFD with frr bfdd, over IPv4 and IPv6:
///
/// ```text
///   [ p: frr + bfdd, ebgp-multihop 2 ] ==== link ==== [ h: holdfastd, multihop = 2,
///                                                        bfd.multihop = true ]
/// ```
///
/// Checked: both BFD sessions come Up in multihop mode (UDP 4784) on both
/// sides: `holdfast show bfd` mode "multihop", frr `show bfd peers json`
/// `"multihop": true`, status "up", remote-id = holdfastd's discriminator.
#[test]
fn bfd_multihop_with_frr() {
    if skip_unless_ready(&[PeerKind::Frr]) {
        return;
    }
    let mut lab = Lab::new("bfdmh").expect("lab");
    let h = lab.host("h").expect("host h");
    let p = lab.host("p").expect("host p");
    let l = lab.link_auto(h, p).expect("link");
    let info = lab.link_info(l).clone();
    let (v4, v6) = (info.v4.expect("v4"), info.v6.expect("v6"));
    let pairs: [(IpAddr, IpAddr); 2] = [(v4.a.into(), v4.b.into()), (v6.a.into(), v6.b.into())];
    let mut cfg =
        String::from("[global]\nasn = 65000\nrouter_id = \"192.0.2.1\"\nconnect_retry = 2\n");
    let mut spec = PeerSpec::new(65001, Ipv4Addr::new(192, 0, 2, 31));
    for (ours, theirs) in pairs {
        cfg.push_str(&format!(
            "\n[[neighbor]]\naddress = \"{theirs}\"\nremote_asn = 65001\nimport = \"all\"\nexport = \"all\"\n\
             local_address = \"{ours}\"\nmultihop = 2\n[neighbor.bfd]\nmultihop = true\n"
        ));
        spec = spec.neighbor(
            NeighborSpec::new(ours, 65000)
                .local(theirs)
                .multihop(2)
                .bfd(300, 300, 3),
        );
    }
    let hf = Holdfastd::start(&mut lab, h, "holdfastd", &cfg).expect("holdfastd");
    let frr = Frr::start(&mut lab, p, &spec).expect("frr");
    for (_, theirs) in pairs {
        hf.wait_established(theirs, Duration::from_secs(60))
            .unwrap_or_else(|e| panic!("BGP with {theirs}: {e}"));
    }
    let list = wait_until(
        "holdfastd: multihop BFD sessions Up",
        Duration::from_secs(30),
        || Ok(show_bfd(&hf)),
        |l| l.len() == 2 && l.iter().all(|b| b.state == "Up" && b.mode == "multihop"),
    )
    .expect("multihop BFD up");
    eprintln!("holdfast show bfd: {list:#?}");
    for b in &list {
        assert!(
            b.tx_gap_max_us <= b.tx_interval_us + 50_000,
            "TX gap {} µs over the {} µs interval: {b:?}",
            b.tx_gap_max_us,
            b.tx_interval_us
        );
    }
    for (ours, theirs) in pairs {
        let mine = bfd_of(&list, theirs).expect("session");
        let v = wait_until(
            "frr: multihop BFD peer up",
            Duration::from_secs(20),
            || frr.bfd_peers(&lab),
            |v| frr_peer(v, ours).is_some_and(|p| p["status"] == "up"),
        )
        .expect("frr BFD up");
        let fp = frr_peer(&v, ours).expect("frr peer");
        eprintln!("frr show bfd peers json ({theirs}): {fp}");
        assert_eq!(fp["multihop"], serde_json::Value::Bool(true), "{fp}");
        assert_eq!(
            fp["remote-id"].as_u64(),
            Some(u64::from(mine.local_discriminator))
        );
    }
    lab.teardown();
}
