use super::*;

fn entry() -> RibEntry {
    RibEntry {
        prefix: "10.9.0.0/24".into(),
        peer: Some("192.0.2.2".into()),
        best: true,
        origin: "i".into(),
        as_path: "65001 65002 {65003 65004}".into(),
        next_hop: Some("192.0.2.2".into()),
        med: Some(7),
        local_pref: Some(100),
        communities: vec!["65000:1".into()],
        large_communities: vec!["1:2:3".into()],
        ext_communities: vec!["0002fde800000001".into()],
        rpki: None,
    }
}

#[test]
fn any_type_urls_are_gobgps() {
    let a = pack("OriginAttribute", &OriginAttribute { origin: 2 });
    assert_eq!(a.type_url, "type.googleapis.com/apipb.OriginAttribute");
    assert_eq!(any_name(&a), "OriginAttribute");
}

#[test]
fn as_path_text_to_segments() {
    let s = as_segments("65001 65002 {65003 65004} 65005");
    assert_eq!(s.len(), 3);
    assert_eq!(s[0].numbers, vec![65001, 65002]);
    assert_eq!(s[0].r#type, as_segment::Type::AsSequence as i32);
    assert_eq!(s[1].numbers, vec![65003, 65004]);
    assert_eq!(s[1].r#type, as_segment::Type::AsSet as i32);
    assert_eq!(s[2].numbers, vec![65005]);
    assert!(as_segments("").is_empty());
    assert_eq!(as_segments("{1,2}")[0].numbers, vec![1, 2]);
}

#[test]
fn rib_entry_to_path_and_back() {
    let p = path(&entry(), 1000, 65000).expect("path");
    assert!(p.best);
    assert_eq!(p.family, Some(ipv4_unicast()));
    assert_eq!(p.neighbor_ip, "192.0.2.2");
    let names: Vec<&str> = p.pattrs.iter().map(any_name).collect();
    assert_eq!(
        names,
        vec![
            "OriginAttribute",
            "AsPathAttribute",
            "NextHopAttribute",
            "MultiExitDiscAttribute",
            "LocalPrefAttribute",
            "CommunitiesAttribute",
            "UnknownAttribute",
            "LargeCommunitiesAttribute"
        ]
    );
    // An AS_SET cannot be originated; the rest goes back as it came.
    let mut e = entry();
    e.as_path = "65001 65002".into();
    let r = route_spec(&path(&e, 0, 65000).expect("path")).expect("spec");
    assert_eq!(r.prefix, "10.9.0.0/24");
    assert_eq!(r.next_hop.as_deref(), Some("192.0.2.2"));
    assert_eq!(r.origin, 0);
    assert_eq!(r.as_path, vec![65001, 65002]);
    assert_eq!(r.med, Some(7));
    assert_eq!(r.local_pref, Some(100));
    assert_eq!(r.communities, vec![65000 << 16 | 1]);
    assert_eq!(r.large_communities, vec![(1, 2, 3)]);
    assert_eq!(r.ext_communities, vec![[0, 2, 0xfd, 0xe8, 0, 0, 0, 1]]);
    assert!(matches!(
        route_spec(&path(&entry(), 0, 65000).expect("path")),
        Err(ConvError::UnsupportedAttribute(_))
    ));
}

#[test]
fn ipv6_route_uses_mp_reach() {
    let mut e = entry();
    e.prefix = "2001:db8:9::/48".into();
    e.next_hop = Some("2001:db8::1".into());
    e.as_path = String::new();
    let p = path(&e, 0, 65000).expect("path");
    assert_eq!(p.family, Some(ipv6_unicast()));
    let mp = p
        .pattrs
        .iter()
        .find(|a| any_name(a) == "MpReachNLRIAttribute")
        .expect("mp_reach");
    let mp: MpReachNlriAttribute = unpack(mp, "MpReachNLRIAttribute").expect("decode");
    assert_eq!(mp.next_hops, vec!["2001:db8::1".to_string()]);
    assert_eq!(mp.nlris.len(), 1);
    let r = route_spec(&p).expect("spec");
    assert_eq!(r.prefix, "2001:db8:9::/48");
    assert_eq!(r.next_hop.as_deref(), Some("2001:db8::1"));
}

#[test]
fn bad_paths_are_refused() {
    assert_eq!(route_spec(&Path::default()), Err(ConvError::NoNlri));
    let mut p = path(&entry(), 0, 1).expect("path");
    p.nlri = Some(pack("EVPNIPPrefixRoute", &OriginAttribute::default()));
    assert!(matches!(route_spec(&p), Err(ConvError::UnsupportedNlri(_))));
    let mut p = path(&entry(), 0, 1).expect("path");
    p.family = Some(ipv6_unicast());
    assert!(matches!(
        route_spec(&p),
        Err(ConvError::UnsupportedFamily { .. })
    ));
    let mut p = Path {
        nlri: path(&entry(), 0, 1).expect("path").nlri,
        ..Path::default()
    };
    p.pattrs.push(pack(
        "NextHopAttribute",
        &NextHopAttribute {
            next_hop: "2001:db8::1".into(),
        },
    ));
    assert!(matches!(route_spec(&p), Err(ConvError::BadNextHop(_))));
}

#[test]
fn destinations_group_by_prefix_best_first() {
    let mut a = entry();
    a.best = false;
    let b = entry();
    let mut c = entry();
    c.prefix = "10.9.1.0/24".into();
    let d = destinations(&[a, b, c], 0, 65000).expect("dests");
    assert_eq!(d.len(), 2);
    assert_eq!(d[0].paths.len(), 2);
    assert!(d[0].paths[0].best);
    assert!(!d[0].paths[1].best);
}

#[test]
fn neighbor_to_peer() {
    let n = NeighborInfo {
        instance: "default".into(),
        address: "192.0.2.2".into(),
        remote_as: 65001,
        local_as: 65000,
        state: "Established".into(),
        uptime_secs: Some(10),
        remote_id: Some("10.0.0.2".into()),
        hold_time: 90,
        keepalive: 30,
        prefixes_received: 5,
        prefixes_accepted: 4,
        prefixes_advertised: 3,
        msgs_in: 20,
        msgs_out: 21,
        families: vec!["ipv4-unicast".into(), "ipv6-unicast".into()],
        ..NeighborInfo::default()
    };
    let p = peer(&n, 1000);
    let s = p.state.as_ref().expect("state");
    assert_eq!(
        s.session_state,
        peer_state::SessionState::Established as i32
    );
    assert_eq!(s.peer_asn, 65001);
    assert_eq!(s.router_id, "10.0.0.2");
    let m = s.messages.as_ref().expect("messages");
    assert_eq!(m.received.as_ref().map(|x| x.total), Some(20));
    assert_eq!(m.sent.as_ref().map(|x| x.total), Some(21));
    let t = p
        .timers
        .as_ref()
        .and_then(|t| t.state.as_ref())
        .expect("timers");
    assert_eq!(t.uptime.as_ref().map(|u| u.seconds), Some(990));
    assert_eq!(t.negotiated_hold_time, 90);
    assert_eq!(p.afi_safis.len(), 2);
    let total: u64 = p
        .afi_safis
        .iter()
        .map(|a| a.state.as_ref().map_or(0, |s| s.received))
        .sum();
    assert_eq!(total, 5);
    assert!(p.route_reflector.is_some() && p.route_server.is_some());
    assert!(p.conf.as_ref().is_some_and(|c| c.vrf.is_empty()));
}

#[test]
fn families_filter_prefixes() {
    assert!(in_family("10.0.0.0/8", None));
    assert!(in_family("10.0.0.0/8", Some(&ipv4_unicast())));
    assert!(!in_family("10.0.0.0/8", Some(&ipv6_unicast())));
    assert!(in_family("2001:db8::/32", Some(&ipv6_unicast())));
}

#[test]
fn longest_match_cover() {
    let a: IpAddr = "10.10.0.5".parse().expect("ip");
    assert_eq!(covers("10.10.0.0/24", &a), Some(24));
    assert_eq!(covers("10.0.0.0/8", &a), Some(8));
    assert_eq!(covers("0.0.0.0/0", &a), Some(0));
    assert_eq!(covers("10.10.1.0/24", &a), None);
    assert_eq!(covers("::/0", &a), None);
    let b: IpAddr = "2001:db8::1".parse().expect("ip");
    assert_eq!(covers("2001:db8::/32", &b), Some(32));
    assert_eq!(covers("2001:db9::/32", &b), None);
}
