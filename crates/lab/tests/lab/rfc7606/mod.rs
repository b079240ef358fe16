//! RFC 7606 revised UPDATE error handling, observed from outside holdfastd.
//!
//! ```text
//!   raw tester AS65001                              monitor tester AS65002
//!   [ t1 ] 198.18.1.2 ---- veth ---- 198.18.1.1 [ hf ] 198.18.2.1 ---- veth ---- 198.18.2.2 [ t2 ]
//!                                        holdfastd AS65000 (passive to both)
//! ```
//!
//! Checks (one test, one holdfastd; the raw tester reconnects after each reset):
//! * treat-as-withdraw: a prefix first announced cleanly, then re-sent with a
//!   malformed AS_PATH / ORIGIN value 5 / no ORIGIN (mandatory missing, NLRI
//!   present) / an attribute overrunning the attribute field, disappears from
//!   holdfastd's Adj-RIB-In and Loc-RIB and is withdrawn at the monitor, while
//!   the raw tester receives no NOTIFICATION and its session stays up;
//!   holdfastd's log records the treat-as-withdraw; likewise an IPv6 prefix
//!   carried in MP_REACH_NLRI and re-sent with ORIGIN 5 leaves both RIBs;
//! * attribute discard: ATOMIC_AGGREGATE of length 1 and AGGREGATOR of length 7
//!   → the route is installed and re-advertised to the monitor without that
//!   attribute (the other, valid one of the pair is kept); session up.
//! * session reset: bad NLRI prefix length → 3/10; malformed MP_REACH_NLRI
//!   (IPv6 prefix length 129) → 3/9; Total Path Attribute Length past the end
//!   of the message → 3/1; then the connection is closed by holdfastd.
//! * header errors: bad marker → 1/1; message length 4097 → 1/2 (data = the
//!   length), connection closed.

use crate::robust_common;

use holdfast_api::RibTable;
use holdfast_lab::{skip_unless_ready, wait_until};
use holdfast_tester::Peer;
use robust_common::*;
use std::net::Ipv4Addr;
use std::time::Duration;

const T: Duration = Duration::from_secs(20);
const RAW_AS: u32 = 65001;
const MON_AS: u32 = 65002;

fn update(withdrawn: &[u8], attrs: &[u8], nlri: &[u8]) -> Vec<u8> {
    let mut m = vec![0xff; 16];
    let len = 19 + 2 + withdrawn.len() + 2 + attrs.len() + nlri.len();
    m.extend_from_slice(&(len as u16).to_be_bytes());
    m.push(2);
    m.extend_from_slice(&(withdrawn.len() as u16).to_be_bytes());
    m.extend_from_slice(withdrawn);
    m.extend_from_slice(&(attrs.len() as u16).to_be_bytes());
    m.extend_from_slice(attrs);
    m.extend_from_slice(nlri);
    m
}

fn origin(v: u8) -> Vec<u8> {
    vec![0x40, 1, 1, v]
}
fn as_path(asns: &[u32]) -> Vec<u8> {
    let mut v = vec![0x40, 2, (2 + 4 * asns.len()) as u8, 2, asns.len() as u8];
    for a in asns {
        v.extend_from_slice(&a.to_be_bytes());
    }
    v
}
fn next_hop(ip: Ipv4Addr) -> Vec<u8> {
    let mut v = vec![0x40, 3, 4];
    v.extend_from_slice(&ip.octets());
    v
}
fn nlri24(o2: u8) -> Vec<u8> {
    vec![24, 203, 0, o2]
}
fn pfx(o2: u8) -> String {
    format!("203.0.{o2}.0/24")
}
fn cat(parts: &[Vec<u8>]) -> Vec<u8> {
    parts.concat()
}

struct Ctx<'a> {
    d: &'a holdfast_lab::Holdfastd,
    mon: &'a Peer,
    raw_ip: std::net::IpAddr,
}

impl Ctx<'_> {
    fn wait_present(&self, o2: u8, why: &str) {
        let p = p4(&pfx(o2));
        self.mon
            .wait(&format!("monitor receives {} ({why})", pfx(o2)), T, |v| {
                v.routes.contains_key(&p)
            })
            .unwrap();
        assert!(
            rib_prefixes(self.d, RibTable::Loc, None).contains(&pfx(o2)),
            "{} not in Loc-RIB ({why})",
            pfx(o2)
        );
        assert!(
            rib_prefixes(self.d, RibTable::In, Some(self.raw_ip)).contains(&pfx(o2)),
            "{} not in Adj-RIB-In ({why})",
            pfx(o2)
        );
    }
    fn wait_absent(&self, o2: u8, why: &str) {
        let p = p4(&pfx(o2));
        self.mon
            .wait(
                &format!("monitor sees {} withdrawn ({why})", pfx(o2)),
                T,
                |v| !v.routes.contains_key(&p),
            )
            .unwrap();
        wait_until(
            &format!("{} gone from Loc-RIB and Adj-RIB-In ({why})", pfx(o2)),
            T,
            || {
                Ok((
                    rib_prefixes(self.d, RibTable::Loc, None).contains(&pfx(o2)),
                    rib_prefixes(self.d, RibTable::In, Some(self.raw_ip)).contains(&pfx(o2)),
                ))
            },
            |(l, i)| !l && !i,
        )
        .unwrap();
    }
}

fn assert_up(raw: &Peer, d: &holdfast_lab::Holdfastd, side: &Side, why: &str) {
    raw.view(|v| {
        assert!(
            v.notifications.is_empty(),
            "{why}: raw tester got NOTIFICATION {:?}",
            v.notifications
        );
        assert!(!v.closed, "{why}: raw tester's session closed");
    });
    let n = d.neighbor(side.ip).unwrap().expect("neighbor");
    assert_eq!(n.state, "Established", "{why}: holdfastd's session state");
}

/// Sends `msg` on a fresh session and expects NOTIFICATION code/subcode and a close.
fn expect_reset(
    side: &Side,
    msg: &[u8],
    code: u8,
    subcode: u8,
    why: &str,
) -> holdfast_wire::Notification {
    let raw = connect(side, &tester_cfg(RAW_AS, 1), Duration::from_secs(30));
    raw.send_raw(msg).unwrap();
    raw.wait(
        &format!("{why}: NOTIFICATION {code}/{subcode} and close"),
        T,
        |v| !v.notifications.is_empty() && v.closed,
    )
    .unwrap();
    let n = raw.view(|v| v.notifications[0].clone());
    assert_eq!(
        (n.code, n.subcode),
        (code, subcode),
        "{why}: NOTIFICATION {n:?}"
    );
    n
}

#[test]
fn rfc7606_actions() {
    if skip_unless_ready(&[]) {
        return;
    }
    let mut s = setup("rfc7606", 2);
    let (rs, ms) = (s.sides[0].clone(), s.sides[1].clone());
    let cfg = format!(
        "{}{}{}",
        global_block(""),
        neighbor_block(&rs, RAW_AS, ""),
        neighbor_block(&ms, MON_AS, "")
    );
    let d = start_holdfastd(&mut s, &cfg);
    let mon = connect(&ms, &tester_cfg(MON_AS, 2), T);
    let mut raw_cfg = tester_cfg(RAW_AS, 1);
    raw_cfg.families.push(holdfast_wire::Family::IPV6_UNICAST);
    let raw = connect(&rs, &raw_cfg, T);
    d.wait_established(rs.ip, T).unwrap();
    let nh = match rs.ip {
        std::net::IpAddr::V4(a) => a,
        _ => unreachable!(),
    };
    let c = Ctx {
        d: &d,
        mon: &mon,
        raw_ip: rs.ip,
    };
    let good = |o2: u8| {
        update(
            &[],
            &cat(&[origin(0), as_path(&[RAW_AS]), next_hop(nh)]),
            &nlri24(o2),
        )
    };

    // --- treat-as-withdraw ---
    let cases: Vec<(u8, &str, Vec<u8>)> = vec![
        // AS_PATH segment claims 3 ASNs, carries 1.
        (
            1,
            "malformed AS_PATH",
            cat(&[
                origin(0),
                vec![0x40, 2, 6, 2, 3, 0, 0, 0xfd, 0xe9],
                next_hop(nh),
            ]),
        ),
        (
            2,
            "ORIGIN value 5",
            cat(&[origin(5), as_path(&[RAW_AS]), next_hop(nh)]),
        ),
        (
            3,
            "missing ORIGIN with NLRI",
            cat(&[as_path(&[RAW_AS]), next_hop(nh)]),
        ),
        // last attribute (a MED) claims 4 octets, 1 remains in the field.
        (
            4,
            "attribute overruns the attribute field",
            cat(&[
                origin(0),
                as_path(&[RAW_AS]),
                next_hop(nh),
                vec![0x80, 4, 4, 0],
            ]),
        ),
    ];
    for (o2, why, attrs) in &cases {
        raw.send_raw(&good(*o2)).unwrap();
        c.wait_present(*o2, why);
        raw.send_raw(&update(&[], attrs, &nlri24(*o2))).unwrap();
        c.wait_absent(*o2, why);
        assert_up(&raw, &d, &rs, why);
    }
    // The same for IPv6 carried in MP_REACH_NLRI: a treat-as-withdraw UPDATE
    // must withdraw the MP_REACH prefixes too (checked in holdfastd's RIBs).
    let mp_reach = |nlri: &[u8]| {
        let mut v = vec![0x80, 14, 0, 0, 2, 1, 16];
        v.extend_from_slice(
            &"fd00:0:0:1::2"
                .parse::<std::net::Ipv6Addr>()
                .unwrap()
                .octets(),
        );
        v.push(0);
        v.extend_from_slice(nlri);
        v[2] = (v.len() - 3) as u8;
        v
    };
    let v6 = [48u8, 0x20, 0x01, 0x0d, 0xb8, 0x00, 0x07];
    let v6s = "2001:db8:7::/48".to_string();
    let in_ribs = |want: bool| {
        wait_until(
            &format!("{v6s} present={want} in Loc-RIB and Adj-RIB-In"),
            T,
            || {
                Ok((
                    rib_prefixes(&d, RibTable::Loc, None).contains(&v6s),
                    rib_prefixes(&d, RibTable::In, Some(rs.ip)).contains(&v6s),
                ))
            },
            |(l, i)| *l == want && *i == want,
        )
        .unwrap();
    };
    raw.send_raw(&update(
        &[],
        &cat(&[origin(0), as_path(&[RAW_AS]), mp_reach(&v6)]),
        &[],
    ))
    .unwrap();
    in_ribs(true);
    raw.send_raw(&update(
        &[],
        &cat(&[origin(5), as_path(&[RAW_AS]), mp_reach(&v6)]),
        &[],
    ))
    .unwrap();
    in_ribs(false);
    assert_up(&raw, &d, &rs, "treat-as-withdraw of MP_REACH_NLRI prefixes");

    let log = d.log_text(&s.lab);
    assert!(
        log.contains("TreatAsWithdraw"),
        "holdfastd's log does not mention the treat-as-withdraw:\n{log}"
    );

    // --- attribute discard ---
    let agg_ok = {
        let mut v = vec![0xc0, 7, 8];
        v.extend_from_slice(&RAW_AS.to_be_bytes());
        v.extend_from_slice(&[192, 0, 2, 9]);
        v
    };
    let atomic_bad = vec![0x40, 6, 1, 0];
    let atomic_ok = vec![0x40, 6, 0];
    let agg_bad = vec![0xc0, 7, 7, 0, 0, 0xfd, 0xe9, 192, 0, 2];
    let base = cat(&[origin(0), as_path(&[RAW_AS]), next_hop(nh)]);
    raw.send_raw(&update(
        &[],
        &cat(&[base.clone(), atomic_bad, agg_ok]),
        &nlri24(10),
    ))
    .unwrap();
    raw.send_raw(&update(
        &[],
        &cat(&[base.clone(), atomic_ok, agg_bad]),
        &nlri24(11),
    ))
    .unwrap();
    c.wait_present(10, "ATOMIC_AGGREGATE length 1");
    c.wait_present(11, "AGGREGATOR length 7");
    mon.view(|v| {
        let a = v.route(&p4(&pfx(10))).unwrap();
        assert!(
            !a.atomic_aggregate,
            "ATOMIC_AGGREGATE of length 1 was not discarded: {a:?}"
        );
        assert_eq!(
            a.aggregator,
            Some((RAW_AS, Ipv4Addr::new(192, 0, 2, 9))),
            "valid AGGREGATOR lost: {a:?}"
        );
        let b = v.route(&p4(&pfx(11))).unwrap();
        assert_eq!(
            b.aggregator, None,
            "AGGREGATOR of length 7 was not discarded: {b:?}"
        );
        assert!(b.atomic_aggregate, "valid ATOMIC_AGGREGATE lost: {b:?}");
    });
    assert_up(&raw, &d, &rs, "attribute discard");
    assert!(
        d.log_text(&s.lab).contains("AttributeDiscard"),
        "log does not mention the attribute discard"
    );
    drop(raw);

    // --- session reset ---
    // NLRI prefix length 33.
    expect_reset(
        &rs,
        &update(&[], &base, &[33, 203, 0, 20, 0, 1]),
        3,
        10,
        "bad NLRI length",
    );
    // MP_REACH_NLRI IPv6 unicast, next hop 16 octets, prefix length 129.
    let mut mp = vec![0x80, 14, 0, 0, 2, 1, 16];
    mp.extend_from_slice(&[0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]);
    mp.push(0);
    mp.extend_from_slice(&[129, 0x20, 0x01, 0x0d, 0xb8]);
    mp[2] = (mp.len() - 3) as u8;
    expect_reset(
        &rs,
        &update(&[], &cat(&[origin(0), as_path(&[RAW_AS]), mp]), &[]),
        3,
        9,
        "malformed MP_REACH_NLRI",
    );
    // Total Path Attribute Length 40 with 23 octets of attributes and no NLRI.
    let mut m = update(&[], &base, &[]);
    m[21..23].copy_from_slice(&40u16.to_be_bytes());
    expect_reset(&rs, &m, 3, 1, "Total Path Attribute Length past the end");

    // --- header errors ---
    let mut bad_marker = good(30);
    bad_marker[3] = 0;
    expect_reset(&rs, &bad_marker, 1, 1, "bad marker");
    let mut bad_len = good(31);
    bad_len[16..18].copy_from_slice(&4097u16.to_be_bytes());
    let n = expect_reset(&rs, &bad_len, 1, 2, "bad length");
    assert_eq!(
        n.data,
        4097u16.to_be_bytes().to_vec(),
        "1/2 data must be the bad length"
    );

    // The monitor was never disturbed.
    mon.view(|v| {
        assert!(
            v.notifications.is_empty() && !v.closed,
            "monitor session disturbed"
        )
    });
    let mut lab = s.lab;
    drop(mon);
    d.stop(&mut lab);
    lab.teardown();
}
