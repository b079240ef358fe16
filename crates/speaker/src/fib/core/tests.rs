//! The FIB core without sockets: adoption, diff, ECMP, resolution,
//! answers.

use super::*;
use holdfast_linux::rtnl::codec::{messages, parse_route, NextHop, RTM_DELROUTE, RTM_NEWROUTE};

fn cfg() -> FibConfig {
    FibConfig {
        table: 100,
        metric: 32,
        ecmp: 4,
        protocol: 179,
    }
}

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

fn fr(p: &str, nhs: &[&str]) -> FibRoute {
    FibRoute {
        prefix: p.parse().unwrap(),
        nexthops: nhs.iter().map(|s| ip(s)).collect(),
    }
}

/// A connected route (main table, proto kernel, scope link).
fn connected(net: &str, len: u8, oif: u32) -> KernelRoute {
    KernelRoute {
        dst: ip(net),
        dst_len: len,
        table: 254,
        protocol: 2,
        scope: 253,
        kind: RTN_UNICAST,
        priority: 0,
        nexthops: vec![NextHop {
            gateway: None,
            oif,
            flags: 0,
        }],
        nh_id: None,
    }
}

fn via(net: &str, len: u8, gw: &str, oif: u32) -> KernelRoute {
    KernelRoute {
        dst: ip(net),
        dst_len: len,
        table: 254,
        protocol: 4,
        scope: 0,
        kind: RTN_UNICAST,
        priority: 0,
        nexthops: vec![NextHop {
            gateway: Some(ip(gw)),
            oif,
            flags: 0,
        }],
        nh_id: None,
    }
}

fn ours(net: &str, len: u8, gw: &str, oif: u32, metric: u32) -> KernelRoute {
    KernelRoute {
        table: 100,
        protocol: 179,
        priority: metric,
        ..via(net, len, gw, oif)
    }
}

/// (type, prefix, next hops) of one route message.
type Op = (u16, String, Vec<(Option<IpAddr>, u32)>);

/// Every message of a batch.
fn ops(buf: &[u8]) -> Vec<Op> {
    messages(buf)
        .map(|m| {
            let r = parse_route(m.payload).unwrap();
            (
                m.ty,
                format!("{}/{}", r.dst, r.dst_len),
                r.nexthops.iter().map(|n| (n.gateway, n.oif)).collect(),
            )
        })
        .collect()
}

/// Runs every batch with the kernel accepting all.
fn drain(c: &mut Core, now: Instant) -> Vec<Op> {
    let mut all = Vec::new();
    let mut buf = Vec::new();
    let mut seq = 1;
    loop {
        let n = c.next_batch(now, &mut buf, seq, 2);
        if n == 0 {
            return all;
        }
        all.extend(ops(&buf));
        c.batch_done(now, seq, &[], true);
        seq += n as u32;
    }
}

fn start(c: &mut Core, now: Instant, kernel: &[KernelRoute]) {
    c.activate(now, Duration::ZERO);
    assert!(c.wants_dump());
    c.dump_begin();
    for r in kernel {
        c.dump_route(r);
    }
    c.dump_end();
}

#[test]
fn hold_writes_nothing_then_installs_resolved() {
    let now = Instant::now();
    let mut c = Core::new(cfg());
    c.routes(vec![fr("10.1.0.0/16", &["192.0.2.1"])]);
    let mut buf = Vec::new();
    assert_eq!(
        c.next_batch(now, &mut buf, 1, 10),
        0,
        "hold: nothing written"
    );
    assert!(!c.wants_dump());
    start(&mut c, now, &[connected("192.0.2.0", 24, 3)]);
    assert_eq!(
        drain(&mut c, now),
        vec![(
            RTM_NEWROUTE,
            "10.1.0.0/16".into(),
            vec![(Some(ip("192.0.2.1")), 3)]
        )]
    );
    assert_eq!(c.counts(now), (1, 0, 0, 0, 0));
    // Withdrawn by the RIB: deleted.
    c.routes(vec![fr("10.1.0.0/16", &[])]);
    assert_eq!(
        drain(&mut c, now),
        vec![(RTM_DELROUTE, "10.1.0.0/16".into(), vec![])]
    );
    assert_eq!(c.counts(now), (0, 0, 0, 0, 0));
}

#[test]
fn adoption_changes_only_the_difference() {
    let now = Instant::now();
    let mut c = Core::new(cfg());
    c.routes(vec![
        fr("10.1.0.0/16", &["192.0.2.1"]),
        fr("10.2.0.0/16", &["192.0.2.1"]),
        fr("10.3.0.0/16", &["192.0.2.2"]),
    ]);
    let mut foreign_same_prefix = via("10.9.0.0", 16, "192.0.2.9", 3);
    foreign_same_prefix.table = 100;
    start(
        &mut c,
        now,
        &[
            connected("192.0.2.0", 24, 3),
            // Ours and right: kept. Ours with an old next hop: replaced.
            ours("10.1.0.0", 16, "192.0.2.1", 3, 32),
            ours("10.3.0.0", 16, "192.0.2.1", 3, 32),
            // Ours and stale, ours at another metric: removed.
            ours("10.4.0.0", 16, "192.0.2.1", 3, 32),
            ours("10.5.0.0", 16, "192.0.2.1", 3, 50),
            // Another protocol's route in our table: left alone.
            foreign_same_prefix,
        ],
    );
    assert_eq!(c.counters.adopted, 3);
    let mut got = drain(&mut c, now);
    got.sort();
    assert_eq!(
        got,
        vec![
            (
                RTM_NEWROUTE,
                "10.2.0.0/16".into(),
                vec![(Some(ip("192.0.2.1")), 3)]
            ),
            (
                RTM_NEWROUTE,
                "10.3.0.0/16".into(),
                vec![(Some(ip("192.0.2.2")), 3)]
            ),
            (RTM_DELROUTE, "10.4.0.0/16".into(), vec![]),
            (RTM_DELROUTE, "10.5.0.0/16".into(), vec![]),
        ]
    );
    // A second dump of the same table changes nothing.
    c.link_changed();
    assert!(c.wants_dump());
    c.dump_begin();
    for r in [
        connected("192.0.2.0", 24, 3),
        ours("10.1.0.0", 16, "192.0.2.1", 3, 32),
        ours("10.2.0.0", 16, "192.0.2.1", 3, 32),
        ours("10.3.0.0", 16, "192.0.2.2", 3, 32),
    ] {
        c.dump_route(&r);
    }
    c.dump_end();
    assert_eq!(drain(&mut c, now), vec![]);
}

#[test]
fn stale_routes_kept_for_the_hold() {
    let now = Instant::now();
    let mut c = Core::new(cfg());
    c.activate(now, Duration::from_secs(30));
    c.dump_begin();
    c.dump_route(&connected("192.0.2.0", 24, 3));
    c.dump_route(&ours("10.4.0.0", 16, "192.0.2.1", 3, 32));
    c.dump_route(&ours("10.5.0.0", 16, "192.0.2.1", 3, 32));
    c.dump_end();
    assert_eq!(drain(&mut c, now), vec![], "kept during the hold");
    // The RIB brings one back unchanged: nothing to do either; the other
    // with another next hop first: frozen until the hold ends. A new
    // prefix is written at once.
    c.routes(vec![
        fr("10.4.0.0/16", &["192.0.2.1"]),
        fr("10.5.0.0/16", &["192.0.2.2"]),
        fr("10.6.0.0/16", &["192.0.2.2"]),
    ]);
    assert_eq!(
        drain(&mut c, now),
        vec![(
            RTM_NEWROUTE,
            "10.6.0.0/16".into(),
            vec![(Some(ip("192.0.2.2")), 3)]
        )]
    );
    c.routes(vec![fr("10.4.0.0/16", &[])]);
    assert_eq!(drain(&mut c, now), vec![]);
    let later = now + Duration::from_secs(31);
    c.tick(later);
    let mut got = drain(&mut c, later);
    got.sort();
    assert_eq!(
        got,
        vec![
            (
                RTM_NEWROUTE,
                "10.5.0.0/16".into(),
                vec![(Some(ip("192.0.2.2")), 3)]
            ),
            (RTM_DELROUTE, "10.4.0.0/16".into(), vec![]),
        ]
    );
}

#[test]
fn ecmp_and_recursive_resolution_follow_the_kernel() {
    let now = Instant::now();
    let mut c = Core::new(cfg());
    c.routes(vec![
        fr("10.1.0.0/16", &["192.0.2.1", "192.0.2.2"]),
        // Not connected: through the kernel's route to 198.51.100.0/24.
        fr("10.7.0.0/16", &["198.51.100.7"]),
    ]);
    start(
        &mut c,
        now,
        &[
            connected("192.0.2.0", 24, 3),
            via("198.51.100.0", 24, "192.0.2.254", 3),
        ],
    );
    let mut got = drain(&mut c, now);
    got.sort();
    assert_eq!(
        got,
        vec![
            (
                RTM_NEWROUTE,
                "10.1.0.0/16".into(),
                vec![(Some(ip("192.0.2.1")), 3), (Some(ip("192.0.2.2")), 3)]
            ),
            (
                RTM_NEWROUTE,
                "10.7.0.0/16".into(),
                vec![(Some(ip("192.0.2.254")), 3)]
            ),
        ]
    );
    // The kernel route under the next hop moves: re-resolved, replaced.
    c.kernel_route(&via("198.51.100.0", 25, "192.0.2.253", 4), false);
    c.kernel_route(&via("198.51.100.0", 24, "192.0.2.254", 3), true);
    assert_eq!(
        drain(&mut c, now),
        vec![(
            RTM_NEWROUTE,
            "10.7.0.0/16".into(),
            vec![(Some(ip("192.0.2.253")), 4)]
        )]
    );
    let nh = c.next_hops();
    let v = nh
        .iter()
        .find(|n| n.next_hop == ip("198.51.100.7"))
        .unwrap();
    assert_eq!(v.via_route.as_deref(), Some("198.51.100.0/25"));
    // Gone: unresolved, removed from the kernel.
    c.kernel_route(&via("198.51.100.0", 25, "192.0.2.253", 4), true);
    assert_eq!(
        drain(&mut c, now),
        vec![(RTM_DELROUTE, "10.7.0.0/16".into(), vec![])]
    );
    assert_eq!(c.counts(now), (1, 0, 1, 0, 0));
    assert_eq!(c.view(now, 10)[1].state, "unresolved");
    // Our own routes' notifications change nothing.
    c.kernel_route(&ours("10.1.0.0", 16, "192.0.2.1", 3, 32), true);
    assert_eq!(drain(&mut c, now), vec![]);
}

#[test]
fn errors_by_sequence_number_and_lost_answers() {
    let now = Instant::now();
    let mut c = Core::new(cfg());
    c.routes(vec![
        fr("10.1.0.0/16", &["192.0.2.1"]),
        fr("10.2.0.0/16", &["192.0.2.1"]),
    ]);
    start(&mut c, now, &[connected("192.0.2.0", 24, 3)]);
    let mut buf = Vec::new();
    assert_eq!(c.next_batch(now, &mut buf, 100, 10), 2);
    let msgs: Vec<_> = messages(&buf).collect();
    assert_eq!(msgs[0].flags & NLM_F_ACK, 0);
    assert_ne!(msgs[1].flags & NLM_F_ACK, 0, "the last asks for an ack");
    let failed = parse_route(msgs[0].payload).unwrap();
    c.batch_done(now, 100, &[(100, libc::EEXIST)], true);
    assert_eq!(c.counts(now), (1, 0, 0, 1, 0));
    let v = c.view(now, 10);
    let f = v
        .iter()
        .find(|r| format!("{}/{}", failed.dst, failed.dst_len) == r.prefix.to_string())
        .unwrap();
    assert_eq!((f.state, f.error), ("failed", Some(libc::EEXIST)));
    // Retried later, and then accepted.
    assert_eq!(drain(&mut c, now), vec![]);
    c.tick(now + RETRY);
    assert_eq!(drain(&mut c, now + RETRY).len(), 1);
    assert_eq!(c.counts(now), (2, 0, 0, 0, 0));
    // A batch whose final ack never came: the table is dumped again.
    c.routes(vec![fr("10.3.0.0/16", &["192.0.2.1"])]);
    assert_eq!(c.next_batch(now, &mut buf, 200, 10), 1);
    c.batch_done(now, 200, &[], false);
    assert!(c.wants_dump());
    assert!(!c.has_work());
}

#[test]
fn withdraw_all_removes_ours() {
    let now = Instant::now();
    let mut c = Core::new(cfg());
    c.routes(vec![fr("10.1.0.0/16", &["192.0.2.1"])]);
    start(&mut c, now, &[connected("192.0.2.0", 24, 3)]);
    drain(&mut c, now);
    c.withdraw_all();
    assert_eq!(
        drain(&mut c, now),
        vec![(RTM_DELROUTE, "10.1.0.0/16".into(), vec![])]
    );
    assert_eq!(c.counts(now), (0, 0, 0, 0, 0));
}

/// (type, prefix or next-hop id, next-hop object named, gateways) of every
/// message of a batch, next-hop objects included.
type NhOp = (u16, String, Option<u32>, Vec<(Option<IpAddr>, u32)>);

fn nh_ops(buf: &[u8]) -> Vec<NhOp> {
    messages(buf)
        .map(|m| match m.ty {
            codec::RTM_NEWNEXTHOP | codec::RTM_DELNEXTHOP => {
                let n = codec::parse_nexthop(m.payload).unwrap();
                let gw = n
                    .gateway
                    .map(|g| vec![(Some(g), n.oif)])
                    .unwrap_or_default();
                (m.ty, n.id.to_string(), None, gw)
            }
            _ => {
                let r = parse_route(m.payload).unwrap();
                (
                    m.ty,
                    format!("{}/{}", r.dst, r.dst_len),
                    r.nh_id,
                    r.nexthops.iter().map(|n| (n.gateway, n.oif)).collect(),
                )
            }
        })
        .collect()
}

fn nh_drain(c: &mut Core, now: Instant) -> Vec<NhOp> {
    let mut all = Vec::new();
    let mut buf = Vec::new();
    let mut seq = 1;
    loop {
        let n = c.next_batch(now, &mut buf, seq, 2);
        if n == 0 {
            return all;
        }
        all.extend(nh_ops(&buf));
        c.batch_done(now, seq, &[], true);
        seq += n as u32;
    }
}

/// Starts with a kernel that has next-hop objects (`objects` of anyone's).
fn start_nh(c: &mut Core, now: Instant, objects: &[KernelNexthop], kernel: &[KernelRoute]) {
    c.activate(now, Duration::ZERO);
    c.dump_begin();
    for n in objects {
        c.dump_nexthop(n);
    }
    c.nexthops_dumped(true);
    for r in kernel {
        c.dump_route(r);
    }
    c.dump_end();
}

fn object(id: u32, protocol: u8, gw: &str, oif: u32) -> KernelNexthop {
    KernelNexthop {
        id,
        family: codec::AF_INET,
        protocol,
        gateway: Some(ip(gw)),
        oif,
        special: false,
    }
}

#[test]
fn nexthop_objects_created_once_shared_and_collected() {
    let now = Instant::now();
    let mut c = Core::new(cfg());
    c.routes(vec![
        fr("10.1.0.0/16", &["192.0.2.1"]),
        fr("10.2.0.0/16", &["192.0.2.1"]),
        fr("10.3.0.0/16", &["192.0.2.9"]),
    ]);
    // Someone else's object holds our first id: it is skipped.
    start_nh(
        &mut c,
        now,
        &[object(NH_BASE, 4, "192.0.2.7", 3)],
        &[connected("192.0.2.0", 24, 3)],
    );
    let (a, b) = (NH_BASE + 1, NH_BASE + 2);
    let gw = |g: &str| vec![(Some(ip(g)), 3)];
    assert_eq!(
        nh_drain(&mut c, now),
        vec![
            (codec::RTM_NEWNEXTHOP, a.to_string(), None, gw("192.0.2.1")),
            (RTM_NEWROUTE, "10.1.0.0/16".into(), Some(a), vec![]),
            (RTM_NEWROUTE, "10.2.0.0/16".into(), Some(a), vec![]),
            (codec::RTM_NEWNEXTHOP, b.to_string(), None, gw("192.0.2.9")),
            (RTM_NEWROUTE, "10.3.0.0/16".into(), Some(b), vec![]),
        ]
    );
    assert_eq!(c.counters.nexthops_added, 2);
    assert_eq!(c.counts(now), (3, 0, 0, 0, 0));
    // 10.3 withdrawn: its object goes at the next collection, not before.
    c.routes(vec![fr("10.3.0.0/16", &[])]);
    assert_eq!(
        nh_drain(&mut c, now),
        vec![(RTM_DELROUTE, "10.3.0.0/16".into(), None, vec![])]
    );
    c.tick(now);
    assert_eq!(nh_drain(&mut c, now), vec![]);
    c.tick(now + NH_GC);
    assert_eq!(
        nh_drain(&mut c, now + NH_GC),
        vec![(codec::RTM_DELNEXTHOP, b.to_string(), None, vec![])]
    );
    // A normal stop: the routes, then the object.
    c.withdraw_all();
    let out = nh_drain(&mut c, now + NH_GC);
    assert_eq!(out.len(), 3, "{out:?}");
    assert_eq!(out[2], (codec::RTM_DELNEXTHOP, a.to_string(), None, vec![]));
    assert_eq!(c.counters.nexthops_deleted, 2);
}

#[test]
fn nexthop_objects_adopted_refused_or_absent() {
    let now = Instant::now();
    // Adopted: our object and a route naming it (compat mode off: no
    // gateway in the route) are exactly what the RIB wants.
    let mut c = Core::new(cfg());
    c.routes(vec![fr("10.1.0.0/16", &["192.0.2.1"])]);
    let mut r = ours("10.1.0.0", 16, "192.0.2.1", 3, 32);
    r.nexthops.clear();
    r.nh_id = Some(77);
    start_nh(
        &mut c,
        now,
        &[object(77, 179, "192.0.2.1", 3)],
        &[connected("192.0.2.0", 24, 3), r],
    );
    assert_eq!(nh_drain(&mut c, now), vec![], "nothing rewritten");
    // A new route shares the adopted object.
    c.routes(vec![fr("10.2.0.0/16", &["192.0.2.1"])]);
    assert_eq!(
        nh_drain(&mut c, now),
        vec![(RTM_NEWROUTE, "10.2.0.0/16".into(), Some(77), vec![])]
    );
    // Still used: never collected.
    c.tick(now);
    c.tick(now + NH_GC);
    assert_eq!(nh_drain(&mut c, now + NH_GC), vec![]);

    // Refused (say, EINVAL): the route is written again at once, with its
    // gateway.
    let mut c = Core::new(cfg());
    c.routes(vec![fr("10.1.0.0/16", &["192.0.2.1"])]);
    start_nh(&mut c, now, &[], &[connected("192.0.2.0", 24, 3)]);
    let mut buf = Vec::new();
    assert_eq!(c.next_batch(now, &mut buf, 10, 10), 2);
    c.batch_done(now, 10, &[(10, libc::EINVAL), (11, libc::EINVAL)], true);
    assert_eq!(
        nh_drain(&mut c, now),
        vec![(
            RTM_NEWROUTE,
            "10.1.0.0/16".into(),
            None,
            vec![(Some(ip("192.0.2.1")), 3)]
        )]
    );
    assert_eq!(c.counts(now), (1, 0, 0, 0, 0));

    // A kernel without next-hop objects: gateways.
    let mut c = Core::new(cfg());
    c.routes(vec![fr("10.1.0.0/16", &["192.0.2.1"])]);
    c.activate(now, Duration::ZERO);
    c.dump_begin();
    c.nexthops_dumped(false);
    c.dump_route(&connected("192.0.2.0", 24, 3));
    c.dump_end();
    assert_eq!(
        nh_drain(&mut c, now),
        vec![(
            RTM_NEWROUTE,
            "10.1.0.0/16".into(),
            None,
            vec![(Some(ip("192.0.2.1")), 3)]
        )]
    );
}

#[test]
fn large_rounds_go_out_in_bit_reversed_order() {
    let now = Instant::now();
    let mut c = Core::new(cfg());
    let n = 1000u32;
    let routes: Vec<FibRoute> = (0..n)
        .map(|i| {
            let a = std::net::Ipv4Addr::from(0x0b00_0000 + (i << 8));
            fr(&format!("{a}/24"), &["192.0.2.1"])
        })
        .collect();
    c.routes(routes);
    start(&mut c, now, &[connected("192.0.2.0", 24, 3)]);
    let out = drain(&mut c, now);
    assert_eq!(out.len(), n as usize);
    // The median first, then the quartiles, ...
    let rank = |p: &str| -> u32 {
        let a: std::net::Ipv4Addr = p.trim_end_matches("/24").parse().unwrap();
        (u32::from(a) - 0x0b00_0000) >> 8
    };
    let first: Vec<u32> = out[..4].iter().map(|o| rank(&o.1)).collect();
    assert_eq!(first, vec![0, 512, 256, 768]);
    let mut all: Vec<u32> = out.iter().map(|o| rank(&o.1)).collect();
    all.sort_unstable();
    assert_eq!(all, (0..n).collect::<Vec<_>>(), "each once");
}
