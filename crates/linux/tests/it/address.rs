//! Interface addresses over rtnetlink ([`holdfast_linux::rtnl::set_address`])
//! in a network namespace of its own, checked with `ip address show`. Needs
//! root.
//!
//! ```text
//!   ns hfr<pid>addr:  lo  +/- 192.0.2.10/32, 2001:db8::10/128 (nodad)
//! ```
//!
//! Checked: an add appears (the IPv6 one not tentative), a second add
//! replaces it without error, a delete removes it, and a delete of an
//! absent address answers `Ok(false)`; an unknown interface is an error.

use crate::netns;

use holdfast_linux::rtnl::set_address;
use netns::Netns;
use std::net::IpAddr;

#[test]
fn addresses_are_added_replaced_and_deleted() {
    if !netns::root_or_skip() {
        return;
    }
    let ns = Netns::new("addr");
    let lo = ns
        .run(|| holdfast_linux::device::ifindex("lo"))
        .expect("lo");
    let v4: IpAddr = "192.0.2.10".parse().unwrap();
    let v6: IpAddr = "2001:db8::10".parse().unwrap();
    for (addr, len) in [(v4, 32u8), (v6, 128)] {
        let shown = |ns: &Netns| ns.ip(&["-o", "address", "show", "dev", "lo"]);
        let needle = format!(" {addr}/{len} ");
        assert!(!shown(&ns).contains(&needle));
        for _ in 0..2 {
            let r = ns.run(move || set_address(true, lo, addr, len));
            assert!(r.expect("add"), "{addr}");
        }
        let out = shown(&ns);
        let line = out.lines().find(|l| l.contains(&needle));
        let line = line.unwrap_or_else(|| panic!("{addr} not added: {out}"));
        assert!(!line.contains("tentative"), "{line}");
        assert!(ns.run(move || holdfast_linux::address_is_local(addr)));
        let r = ns.run(move || set_address(false, lo, addr, len));
        assert!(r.expect("delete"), "{addr} was there");
        assert!(!shown(&ns).contains(&needle), "{addr} still there");
        let r = ns.run(move || set_address(false, lo, addr, len));
        assert!(!r.expect("delete of an absent address"), "{addr}");
    }
    let r = ns.run(move || set_address(true, 999_999, v4, 32));
    assert!(r.is_err(), "an unknown interface: {r:?}");
}

/// `add_routed_host_address` puts the address on the interface that routes
/// to it, the IPv6 one usable at once: on a veth whose link is up, an
/// address added with duplicate address detection would stay tentative
/// for a second.
#[test]
fn a_routed_host_address_lands_on_its_interface_usable_at_once() {
    if !netns::root_or_skip() {
        return;
    }
    let ns = Netns::new("raddr");
    let (va, vb) = (
        format!("hfr{}ra", std::process::id()),
        format!("hfr{}rb", std::process::id()),
    );
    ns.ip(&["link", "add", &va, "type", "veth", "peer", "name", &vb]);
    ns.ip(&["address", "add", "198.18.251.1/24", "dev", &va]);
    ns.ip(&["address", "add", "fd00:251::1/64", "dev", &va, "nodad"]);
    ns.ip(&["link", "set", &va, "up"]);
    ns.ip(&["link", "set", &vb, "up"]);
    for addr in ["198.18.251.10", "fd00:251::10"] {
        let ip: IpAddr = addr.parse().unwrap();
        let dev = ns
            .run(move || holdfast_linux::rtnl::add_routed_host_address(ip))
            .unwrap_or_else(|e| panic!("{addr}: {e}"));
        assert_eq!(dev, va, "{addr}");
        let out = ns.ip(&["-o", "address", "show", "dev", &va]);
        let len = if ip.is_ipv4() { 32 } else { 128 };
        let line = out
            .lines()
            .find(|l| l.contains(&format!(" {addr}/{len} ")))
            .unwrap_or_else(|| panic!("{addr} not on {va}: {out}"));
        assert!(!line.contains("tentative"), "{line}");
    }
    let none: IpAddr = "203.0.113.1".parse().unwrap();
    let r = ns.run(move || holdfast_linux::rtnl::add_routed_host_address(none));
    assert!(r.is_err(), "no route, yet: {r:?}");
}
