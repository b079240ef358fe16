//! The FIB core without sockets: adoption, diff, ECMP, resolution,
//! answers.

use super::*;
use holdfast_linux::rtnl::codec::{
    messages, parse_route, KernelNexthop, NextHop, RTM_DELROUTE, RTM_NEWROUTE,
};

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

/// Runs every batch of at most `max` messages with the kernel accepting
/// all; `read` turns each batch into what the test compares.
fn drain_with<T>(c: &mut Core, now: Instant, max: usize, read: impl Fn(&[u8]) -> Vec<T>) -> Vec<T> {
    let mut all = Vec::new();
    let mut buf = Vec::new();
    let mut seq = 1;
    loop {
        let n = c.next_batch(now, &mut buf, seq, max);
        if n == 0 {
            return all;
        }
        all.extend(read(&buf));
        c.batch_done(now, seq, &[], true);
        seq += n as u32;
    }
}

/// Runs every batch (of two) with the kernel accepting all.
fn drain(c: &mut Core, now: Instant) -> Vec<Op> {
    drain_with(c, now, 2, ops)
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
    drain_with(c, now, 2, nh_ops)
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

/// (type, prefix, table, protocol, metric, next hops) of one route
/// message: the whole key, for the reconfiguration tests.
type KeyedOp = (u16, String, u32, u8, u32, usize);

/// Every batch, with the kernel accepting all, keyed.
fn drain_keyed(c: &mut Core, now: Instant, max: usize) -> Vec<KeyedOp> {
    drain_with(c, now, max, |buf| {
        messages(buf)
            .map(|m| {
                let r = parse_route(m.payload).unwrap();
                (
                    m.ty,
                    format!("{}/{}", r.dst, r.dst_len),
                    r.table,
                    r.protocol,
                    r.priority,
                    r.nexthops.len(),
                )
            })
            .collect()
    })
}

fn redump(c: &mut Core, kernel: &[KernelRoute]) {
    assert!(c.wants_dump());
    c.dump_begin();
    for r in kernel {
        c.dump_route(r);
    }
    c.dump_end();
}

fn ours_at(net: &str, gw: &str, table: u32, protocol: u8, metric: u32) -> KernelRoute {
    KernelRoute {
        table,
        protocol,
        priority: metric,
        ..via(net, 16, gw, 3)
    }
}

#[test]
fn new_metric_adds_every_route_before_deleting_the_old() {
    let now = Instant::now();
    let mut c = Core::new(cfg());
    c.routes(vec![
        fr("10.1.0.0/16", &["192.0.2.1"]),
        fr("10.2.0.0/16", &["192.0.2.1"]),
        fr("10.3.0.0/16", &["192.0.2.1"]),
    ]);
    start(&mut c, now, &[connected("192.0.2.0", 24, 3)]);
    assert_eq!(drain(&mut c, now).len(), 3);
    let r = c.reconfigure(FibConfig {
        metric: 20,
        ..cfg()
    });
    assert_eq!(
        r,
        Reconfigured {
            moved: true,
            rewrite: false,
            hold_cut: false
        }
    );
    assert!(!c.has_work(), "nothing is written before the table is read");
    let mut table = vec![connected("192.0.2.0", 24, 3)];
    for p in ["10.1.0.0", "10.2.0.0", "10.3.0.0"] {
        table.push(ours(p, 16, "192.0.2.1", 3, 32));
    }
    redump(&mut c, &table);
    // Two messages per batch: the adds fill the first batches, the
    // deletes of metric 32 come only after the last add.
    let got = drain_keyed(&mut c, now, 2);
    assert_eq!(got.len(), 6, "{got:?}");
    let (adds, dels) = got.split_at(3);
    assert!(adds
        .iter()
        .all(|o| o.0 == RTM_NEWROUTE && (o.2, o.3, o.4) == (100, 179, 20)));
    assert!(dels
        .iter()
        .all(|o| o.0 == RTM_DELROUTE && (o.2, o.3, o.4) == (100, 179, 32)));
    let mut a: Vec<&str> = adds.iter().map(|o| o.1.as_str()).collect();
    let mut d: Vec<&str> = dels.iter().map(|o| o.1.as_str()).collect();
    a.sort();
    d.sort();
    assert_eq!(a, d);
    assert_eq!(c.counts(now), (3, 0, 0, 0, 0));
    assert_eq!((c.counters.added, c.counters.deleted), (6, 3));
    // Read again: only the new metric is there, nothing to do.
    c.link_changed();
    let table: Vec<KernelRoute> = ["10.1.0.0", "10.2.0.0", "10.3.0.0"]
        .iter()
        .map(|p| ours(p, 16, "192.0.2.1", 3, 20))
        .chain([connected("192.0.2.0", 24, 3)])
        .collect();
    redump(&mut c, &table);
    assert_eq!(drain(&mut c, now), vec![]);
}

#[test]
fn new_table_and_protocol_move_the_routes_and_forget_the_old_key() {
    let now = Instant::now();
    let mut c = Core::new(cfg());
    c.routes(vec![
        fr("10.1.0.0/16", &["192.0.2.1"]),
        // Its next hop is inside our own 10.1.0.0/16: never resolved
        // through our routes, old key or new.
        fr("10.7.0.0/16", &["10.1.0.5"]),
    ]);
    start(&mut c, now, &[connected("192.0.2.0", 24, 3)]);
    assert_eq!(drain(&mut c, now).len(), 1);
    assert_eq!(c.own_protocols(), vec![179]);
    // Same table, new protocol: the old protocol's routes in our table are
    // not someone else's routes to resolve through.
    let r = c.reconfigure(FibConfig {
        protocol: 201,
        ..cfg()
    });
    assert!(r.moved && !r.rewrite);
    assert_eq!(c.own_protocols(), vec![201, 179]);
    let mut other = via("10.9.0.0", 16, "192.0.2.9", 3);
    other.table = 100;
    redump(
        &mut c,
        &[
            connected("192.0.2.0", 24, 3),
            ours_at("10.1.0.0", "192.0.2.1", 100, 179, 32),
            other.clone(),
        ],
    );
    // Same table and metric: the kernel's key is the same, the route is
    // replaced in place with the new protocol (see
    // a_new_protocol_alone_replaces_in_place).
    assert_eq!(
        drain_keyed(&mut c, now, 10),
        vec![(RTM_NEWROUTE, "10.1.0.0/16".into(), 100, 201, 32, 1)]
    );
    assert_eq!(c.view(now, 10)[1].state, "unresolved");
    assert_eq!(c.own_protocols(), vec![201], "retired key forgotten");
    // New table and protocol at once: table 101, protocol 202.
    c.reconfigure(FibConfig {
        table: 101,
        protocol: 202,
        ..cfg()
    });
    assert_eq!(c.own_protocols(), vec![202, 201]);
    redump(
        &mut c,
        &[
            connected("192.0.2.0", 24, 3),
            ours_at("10.1.0.0", "192.0.2.1", 100, 201, 32),
            other,
        ],
    );
    assert_eq!(
        drain_keyed(&mut c, now, 10),
        vec![
            (RTM_NEWROUTE, "10.1.0.0/16".into(), 101, 202, 32, 1),
            (RTM_DELROUTE, "10.1.0.0/16".into(), 100, 201, 32, 0),
        ]
    );
    assert_eq!(c.own_protocols(), vec![202]);
    // Moving back to a key used before: it is ours again, not retired.
    c.reconfigure(FibConfig {
        table: 101,
        protocol: 201,
        ..cfg()
    });
    c.reconfigure(FibConfig {
        table: 101,
        protocol: 202,
        ..cfg()
    });
    assert_eq!(c.own_protocols(), vec![202, 201]);
    redump(
        &mut c,
        &[
            connected("192.0.2.0", 24, 3),
            ours_at("10.1.0.0", "192.0.2.1", 101, 202, 32),
        ],
    );
    assert_eq!(drain(&mut c, now), vec![], "nothing moved in the end");
    assert_eq!(c.own_protocols(), vec![202]);
}

#[test]
fn new_ecmp_rewrites_only_what_differs() {
    let now = Instant::now();
    let mut c = Core::new(FibConfig { ecmp: 1, ..cfg() });
    let mut two = via("198.51.100.0", 24, "192.0.2.253", 3);
    two.nexthops.push(holdfast_linux::rtnl::codec::NextHop {
        gateway: Some(ip("192.0.2.254")),
        oif: 3,
        flags: 0,
    });
    c.routes(vec![
        fr("10.1.0.0/16", &["192.0.2.1"]),
        // One BGP next hop resolving through a kernel route with two
        // gateways: one of them with ecmp 1.
        fr("10.2.0.0/16", &["198.51.100.7"]),
        fr("10.3.0.0/16", &["192.0.2.1"]),
    ]);
    start(&mut c, now, &[connected("192.0.2.0", 24, 3), two]);
    let got = drain_keyed(&mut c, now, 10);
    assert!(got.iter().all(|o| o.5 == 1), "{got:?}");
    let r = c.reconfigure(FibConfig { ecmp: 2, ..cfg() });
    assert_eq!(
        r,
        Reconfigured {
            moved: false,
            rewrite: true,
            hold_cut: false
        }
    );
    // The RIB sends its entries again, now with up to two next hops.
    c.routes(vec![
        fr("10.1.0.0/16", &["192.0.2.1", "192.0.2.2"]),
        fr("10.2.0.0/16", &["198.51.100.7"]),
        fr("10.3.0.0/16", &["192.0.2.1"]),
    ]);
    let mut got = drain_keyed(&mut c, now, 10);
    got.sort();
    assert_eq!(
        got,
        vec![
            (RTM_NEWROUTE, "10.1.0.0/16".into(), 100, 179, 32, 2),
            (RTM_NEWROUTE, "10.2.0.0/16".into(), 100, 179, 32, 2),
        ],
        "10.3.0.0/16 is unchanged and not written"
    );
    assert_eq!(c.counters.replaced, 2);
    // And back to 1.
    c.reconfigure(FibConfig { ecmp: 1, ..cfg() });
    c.routes(vec![fr("10.1.0.0/16", &["192.0.2.1"])]);
    let got = drain_keyed(&mut c, now, 10);
    assert_eq!(got.len(), 2);
    assert!(got.iter().all(|o| o.5 == 1), "{got:?}");
}

#[test]
fn a_move_during_the_start_up_hold_keeps_the_old_copies_until_it_ends() {
    let now = Instant::now();
    let mut c = Core::new(cfg());
    c.activate(now, Duration::from_secs(30));
    redump(
        &mut c,
        &[
            connected("192.0.2.0", 24, 3),
            ours("10.4.0.0", 16, "192.0.2.1", 3, 32),
            ours("10.5.0.0", 16, "192.0.2.1", 3, 32),
        ],
    );
    c.routes(vec![fr("10.4.0.0/16", &["192.0.2.1"])]);
    assert_eq!(drain(&mut c, now), vec![]);
    let r = c.reconfigure(FibConfig {
        metric: 20,
        ..cfg()
    });
    assert!(r.moved && r.hold_cut);
    redump(
        &mut c,
        &[
            connected("192.0.2.0", 24, 3),
            ours("10.4.0.0", 16, "192.0.2.1", 3, 32),
            ours("10.5.0.0", 16, "192.0.2.1", 3, 32),
        ],
    );
    // The wanted prefix at the new metric now; 10.5 (not back yet) keeps
    // its old copy, and no old copy goes during the hold.
    assert_eq!(
        drain_keyed(&mut c, now, 10),
        vec![(RTM_NEWROUTE, "10.4.0.0/16".into(), 100, 179, 20, 1)]
    );
    assert!(!c.has_work());
    let later = now + Duration::from_secs(31);
    c.tick(later);
    let mut got = drain_keyed(&mut c, later, 10);
    got.sort();
    assert_eq!(
        got,
        vec![
            (RTM_DELROUTE, "10.4.0.0/16".into(), 100, 179, 32, 0),
            (RTM_DELROUTE, "10.5.0.0/16".into(), 100, 179, 32, 0),
        ]
    );
}

#[test]
fn a_reconfiguration_before_activation_applies_at_the_first_dump() {
    let now = Instant::now();
    let mut c = Core::new(cfg());
    c.routes(vec![fr("10.1.0.0/16", &["192.0.2.1"])]);
    c.reconfigure(FibConfig {
        table: 101,
        ..cfg()
    });
    assert!(!c.wants_dump(), "still held");
    start(
        &mut c,
        now,
        &[
            connected("192.0.2.0", 24, 3),
            ours_at("10.1.0.0", "192.0.2.1", 100, 179, 32),
        ],
    );
    assert_eq!(
        drain_keyed(&mut c, now, 10),
        vec![
            (RTM_NEWROUTE, "10.1.0.0/16".into(), 101, 179, 32, 1),
            (RTM_DELROUTE, "10.1.0.0/16".into(), 100, 179, 32, 0),
        ]
    );
}

/// (type, replace flag, prefix, protocol, metric) of each message.
fn drain_flags(c: &mut Core, now: Instant) -> Vec<(u16, bool, String, u8, u32)> {
    drain_with(c, now, 10, |buf| {
        messages(buf)
            .map(|m| {
                let r = parse_route(m.payload).unwrap();
                (
                    m.ty,
                    m.flags & holdfast_linux::rtnl::codec::NLM_F_REPLACE != 0,
                    format!("{}/{}", r.dst, r.dst_len),
                    r.protocol,
                    r.priority,
                )
            })
            .collect()
    })
}

#[test]
fn a_new_protocol_alone_replaces_in_place() {
    // The kernel's key has no protocol: at the same table and metric, an
    // add for the new protocol would collide with our old route (EEXIST).
    let now = Instant::now();
    let mut c = Core::new(cfg());
    c.routes(vec![
        fr("10.1.0.0/16", &["192.0.2.1"]),
        fr("10.2.0.0/16", &["192.0.2.1"]),
    ]);
    start(&mut c, now, &[connected("192.0.2.0", 24, 3)]);
    drain(&mut c, now);
    c.reconfigure(FibConfig {
        protocol: 201,
        ..cfg()
    });
    // The RIB no longer wants 10.2.0.0/16 by the time the table is read.
    c.routes(vec![fr("10.2.0.0/16", &[])]);
    redump(
        &mut c,
        &[
            connected("192.0.2.0", 24, 3),
            ours_at("10.1.0.0", "192.0.2.1", 100, 179, 32),
            ours_at("10.2.0.0", "192.0.2.1", 100, 179, 32),
        ],
    );
    let mut got = drain_flags(&mut c, now);
    got.sort();
    assert_eq!(
        got,
        vec![
            // Same content, new protocol: replaced in place, no delete.
            (RTM_NEWROUTE, true, "10.1.0.0/16".into(), 201, 32),
            // Not wanted: deleted with the protocol it carries.
            (RTM_DELROUTE, false, "10.2.0.0/16".into(), 179, 32),
        ]
    );
    assert_eq!(c.own_protocols(), vec![201], "nothing left of 179");
    assert_eq!(c.counts(now), (1, 0, 0, 0, 0));
    // Read again: ours, nothing to do.
    c.link_changed();
    redump(
        &mut c,
        &[
            connected("192.0.2.0", 24, 3),
            ours_at("10.1.0.0", "192.0.2.1", 100, 201, 32),
        ],
    );
    assert_eq!(drain(&mut c, now), vec![]);
}

#[test]
fn a_move_during_a_hold_that_keeps_nothing_does_not_wait() {
    // A fresh start with a hold but an empty table: nothing adopted, so
    // the old copies of a move go at once.
    let now = Instant::now();
    let mut c = Core::new(cfg());
    c.routes(vec![fr("10.1.0.0/16", &["192.0.2.1"])]);
    c.activate(now, Duration::from_secs(60));
    redump(&mut c, &[connected("192.0.2.0", 24, 3)]);
    assert_eq!(drain(&mut c, now).len(), 1);
    let r = c.reconfigure(FibConfig {
        metric: 20,
        ..cfg()
    });
    assert!(r.moved && !r.hold_cut);
    redump(
        &mut c,
        &[
            connected("192.0.2.0", 24, 3),
            ours("10.1.0.0", 16, "192.0.2.1", 3, 32),
        ],
    );
    assert_eq!(
        drain_keyed(&mut c, now, 10),
        vec![
            (RTM_NEWROUTE, "10.1.0.0/16".into(), 100, 179, 20, 1),
            (RTM_DELROUTE, "10.1.0.0/16".into(), 100, 179, 32, 0),
        ]
    );
}
