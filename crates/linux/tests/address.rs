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

mod netns;

use holdfast_linux::rtnl::{codec::IFA_F_NODAD, set_address};
use netns::Netns;
use std::net::IpAddr;

#[test]
fn addresses_are_added_replaced_and_deleted() {
    if !netns::root_or_skip() {
        return;
    }
    let ns = Netns::new("addr");
    let lo = ns.run(|| holdfast_linux::device::ifindex("lo")).expect("lo");
    let v4: IpAddr = "192.0.2.10".parse().unwrap();
    let v6: IpAddr = "2001:db8::10".parse().unwrap();
    for (addr, len, flags) in [(v4, 32u8, 0u32), (v6, 128, IFA_F_NODAD)] {
        let shown = |ns: &Netns| ns.ip(&["-o", "address", "show", "dev", "lo"]);
        let needle = format!(" {addr}/{len} ");
        assert!(!shown(&ns).contains(&needle));
        for _ in 0..2 {
            let r = ns.run(move || set_address(true, lo, addr, len, flags));
            assert!(r.expect("add"), "{addr}");
        }
        let out = shown(&ns);
        let line = out.lines().find(|l| l.contains(&needle));
        let line = line.unwrap_or_else(|| panic!("{addr} not added: {out}"));
        assert!(!line.contains("tentative"), "{line}");
        assert!(ns.run(move || holdfast_linux::address_is_local(addr)));
        let r = ns.run(move || set_address(false, lo, addr, len, 0));
        assert!(r.expect("delete"), "{addr} was there");
        assert!(!shown(&ns).contains(&needle), "{addr} still there");
        let r = ns.run(move || set_address(false, lo, addr, len, 0));
        assert!(!r.expect("delete of an absent address"), "{addr}");
    }
    let r = ns.run(move || set_address(true, 999_999, v4, 32, 0));
    assert!(r.is_err(), "an unknown interface: {r:?}");
}
