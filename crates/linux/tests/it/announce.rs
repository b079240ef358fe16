//! Gratuitous ARP and unsolicited Neighbor Advertisement between two
//! network namespaces joined by a veth pair. Needs root.
//!
//! ```text
//!   ns hfr<pid>a                          ns hfr<pid>b
//!   hfr<pid>va 198.18.250.1/24  ------  hfr<pid>vb 198.18.250.2/24
//!              fd00:250::1/64                      fd00:250::2/64
//! ```
//!
//! `b` starts with neighbour entries for `a`'s addresses that point at a
//! wrong MAC; after `announce_address` in `a` they point at `a`'s real one
//! (with the IPv6 Router flag when `a` forwards). A tentative IPv6 address is
//! refused.
//!
//! `a_solicitation_…` (namespaces `hfr<pid>sa`, `hfr<pid>sb`, veths
//! `hfs<pid>va`, `hfs<pid>vb`, 198.18.251.0/24 and fd00:251::/64): datagrams `a` sends to `b` while the link is down
//! wait on `INCOMPLETE` entries; with the link back they still wait (the
//! negative control: `a` re-probes only every 10 s here), until
//! `solicit_next_hop` in `a` completes both entries and they arrive.

use crate::netns;

use holdfast_linux::{address_is_local, announce_address, solicit_next_hop};
use netns::Netns;
use std::net::{IpAddr, UdpSocket};
use std::time::{Duration, Instant};

const WRONG_MAC: &str = "02:00:00:00:00:99";

fn mac_of(ns: &Netns, dev: &str) -> String {
    let out = ns.ip(&["link", "show", dev]);
    let mut words = out.split_whitespace();
    words.find(|w| *w == "link/ether").expect("link/ether");
    words.next().expect("MAC").to_string()
}

/// Waits until `dev` is operationally up: the kernel processes carrier
/// changes asynchronously (linkwatch), and until then IPv6 drops what
/// arrives on the device ("no route").
fn wait_link_up(ns: &Netns, dev: &str) {
    let t = Instant::now();
    loop {
        let out = ns.ip(&["link", "show", dev]);
        if out.contains("state UP") && !out.contains("NO-CARRIER") {
            return;
        }
        assert!(t.elapsed() < Duration::from_secs(10), "{dev} not up: {out}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Waits up to 3 s for `b`'s entry for `addr` to contain every word of
/// `want`; returns the last `ip neigh` line seen.
fn wait_neigh(b: &Netns, dev: &str, addr: &str, want: &[&str]) -> String {
    let t = Instant::now();
    loop {
        let line = b.ip(&["neigh", "show", addr, "dev", dev]);
        if want
            .iter()
            .all(|w| line.split_whitespace().any(|x| x == *w))
        {
            return line;
        }
        if t.elapsed() > Duration::from_secs(3) {
            panic!("neighbour entry for {addr} is {line:?}, wanted {want:?}");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Namespaces `hfr<pid><tags.0>` and `…<tags.1>` joined by a veth pair
/// `<prefix><pid>va` / `…vb`, up, with 198.18.`net`.1/24 and fd00:`net`::1/64
/// on `va` and .2 / ::2 on `vb` (IPv6 without duplicate address detection).
fn linked(tags: (&str, &str), prefix: &str, net: &str) -> (Netns, Netns, String, String) {
    let a = Netns::new(tags.0);
    let b = Netns::new(tags.1);
    let pid = std::process::id();
    let (va, vb) = (format!("{prefix}{pid}va"), format!("{prefix}{pid}vb"));
    a.ip(&[
        "link", "add", &va, "type", "veth", "peer", "name", &vb, "netns", &b.name,
    ]);
    for (ns, dev, n) in [(&a, &va, "1"), (&b, &vb, "2")] {
        ns.ip(&["addr", "add", &format!("198.18.{net}.{n}/24"), "dev", dev]);
        ns.ip(&[
            "addr",
            "add",
            &format!("fd00:{net}::{n}/64"),
            "dev",
            dev,
            "nodad",
        ]);
        ns.ip(&["link", "set", dev, "up"]);
    }
    wait_link_up(&a, &va);
    wait_link_up(&b, &vb);
    (a, b, va, vb)
}

#[test]
fn announce_updates_the_neighbours_caches() {
    if !netns::root_or_skip() {
        return;
    }
    let (a, b, va, vb) = linked(("a", "b"), "hfr", "250");
    let mac = mac_of(&a, &va);
    for addr in ["198.18.250.1", "fd00:250::1", "fd00:250::3"] {
        b.ip(&[
            "neigh", "replace", addr, "lladdr", WRONG_MAC, "dev", &vb, "nud", "stale",
        ]);
    }
    // A third address still in duplicate address detection (tentative).
    a.ip(&["addr", "add", "fd00:250::3/64", "dev", &va]);

    let dev = va.clone();
    a.run(move || {
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        assert!(address_is_local(ip("198.18.250.1")));
        assert!(address_is_local(ip("fd00:250::1")));
        assert!(!address_is_local(ip("198.18.250.2")));
        assert!(!address_is_local(ip("fd00:250::2")));
        assert!(!address_is_local(ip("fd00:250::3")), "tentative");
        assert!(!address_is_local(ip("0.0.0.0")));
        announce_address(&dev, ip("198.18.250.1")).expect("gratuitous ARP");
        announce_address(&dev, ip("fd00:250::1")).expect("unsolicited NA");
        let e = announce_address(&dev, ip("fd00:250::3")).unwrap_err();
        assert_eq!(
            e.raw_os_error(),
            Some(libc::EADDRNOTAVAIL),
            "tentative: {e}"
        );
        assert!(announce_address("hfrnosuchdev", ip("198.18.250.1")).is_err());
    });
    for addr in ["198.18.250.1", "fd00:250::1"] {
        let line = wait_neigh(&b, &vb, addr, &[&mac]);
        assert!(!line.contains("router"), "{line}");
    }

    // A forwarding interface announces itself as a router (the R flag).
    a.exec(
        "sysctl",
        &["-qw", &format!("net.ipv6.conf.{va}.forwarding=1")],
    );
    let dev = va.clone();
    a.run(move || announce_address(&dev, "fd00:250::1".parse().unwrap()).unwrap());
    wait_neigh(&b, &vb, "fd00:250::1", &[&mac, "router"]);
}

/// Waits up to 3 s for `dev`'s carrier to be `up` or not.
fn wait_carrier(ns: &Netns, dev: &str, up: bool) {
    let t = Instant::now();
    loop {
        let out = ns.ip(&["link", "show", dev]);
        if out.contains("NO-CARRIER") != up {
            return;
        }
        assert!(t.elapsed() < Duration::from_secs(3), "{dev}: {out}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn a_solicitation_completes_what_a_link_outage_left_incomplete() {
    if !netns::root_or_skip() {
        return;
    }
    let (a, b, va, vb) = linked(("sa", "sb"), "hfs", "251");
    for fam in ["ipv4", "ipv6"] {
        a.exec(
            "sysctl",
            &[
                "-qw",
                &format!("net.{fam}.neigh.{va}.retrans_time_ms=10000"),
            ],
        );
    }
    let peers = ["198.18.251.2:7000", "[fd00:251::2]:7000"];
    let rx: Vec<UdpSocket> = peers
        .iter()
        .map(|p| {
            let p = p.to_string();
            b.run(move || UdpSocket::bind(p).expect("bind in b"))
        })
        .collect();

    // (b's IPv6 address stays while its link is down, like the far end
    // of a cable: `keep_addr_on_down`.)
    b.exec(
        "sysctl",
        &["-qw", &format!("net.ipv6.conf.{vb}.keep_addr_on_down=1")],
    );
    b.ip(&["link", "set", &vb, "down"]);
    wait_carrier(&a, &va, false);
    a.run(move || {
        let s4 = UdpSocket::bind("0.0.0.0:0").unwrap();
        s4.send_to(b"queued", peers[0]).expect("send while down");
        let s6 = UdpSocket::bind("[::]:0").unwrap();
        s6.send_to(b"queued", peers[1]).expect("send while down");
    });
    for addr in ["198.18.251.2", "fd00:251::2"] {
        wait_neigh(&a, &va, addr, &["INCOMPLETE"]);
    }
    b.ip(&["link", "set", &vb, "up"]);
    wait_link_up(&b, &vb);
    wait_carrier(&a, &va, true);

    // Negative control: the link is back, and nothing leaves.
    let mut buf = [0u8; 16];
    for s in &rx {
        s.set_read_timeout(Some(Duration::from_millis(500)))
            .unwrap();
        assert!(
            s.recv_from(&mut buf).is_err(),
            "arrived without a solicitation"
        );
    }
    for addr in ["198.18.251.2", "fd00:251::2"] {
        wait_neigh(&a, &va, addr, &["INCOMPLETE"]);
    }

    let solicited =
        a.run(|| ["198.18.251.2", "fd00:251::2"].map(|d| solicit_next_hop(d.parse().unwrap())));
    for (r, want) in solicited.iter().zip(["198.18.251.2", "fd00:251::2"]) {
        assert_eq!(
            r.as_ref().ok().map(|ip| ip.to_string()),
            Some(want.to_string()),
            "{r:?}"
        );
    }
    for (s, peer) in rx.iter().zip(peers) {
        s.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        let (n, from) = s.recv_from(&mut buf).unwrap_or_else(|e| {
            panic!(
                "the datagram to {peer}: {e}; a's neighbours: {}",
                a.ip(&["neigh"])
            )
        });
        assert_eq!(&buf[..n], b"queued", "from {from}");
    }
    for addr in ["198.18.251.2", "fd00:251::2"] {
        wait_neigh(&a, &va, addr, &["REACHABLE"]);
    }
}
