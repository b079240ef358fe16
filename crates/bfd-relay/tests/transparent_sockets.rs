//! The relay's send sockets on addresses the host does not own, in a
//! network namespace of the test's own (`hf-relay-sock-<pid>`, loopback
//! only, deleted on every exit path):
//!
//! ```text
//!   [ hf-relay-sock-<pid> ]  lo: 127.0.0.1, ::1
//!     relay socket on 198.18.7.10:49200 / [fd00:7::10]:49201  (not on any interface)
//!        --BFD packet-->  receiver on 127.0.0.1:3784 / [::1]:3784
//! ```
//!
//! Checked, IPv4 and IPv6: the receiver sees the packet from exactly the
//! unit's address and port, with TTL / hop limit 255 (RFC 5881 §5).
//! Negative control: a plain socket cannot bind the unit's address.

use holdfast_bfd_relay::shell::open_socket;
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::AsFd;
use std::process::Command;
use std::time::Duration;

struct Netns(String);

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.0]).status();
    }
}

fn ready() -> bool {
    let root = nix::unistd::geteuid().is_root();
    if !root {
        assert!(
            std::env::var("HOLDFAST_REQUIRE_LAB").as_deref() != Ok("1"),
            "HOLDFAST_REQUIRE_LAB=1: this test needs root (network namespaces, IP_TRANSPARENT)"
        );
        eprintln!("SKIP: needs root");
    }
    root
}

fn one(from: SocketAddr, to: SocketAddr) -> (SocketAddr, Option<u8>, bool) {
    let rx = UdpSocket::bind(to).expect("receiver");
    rx.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    holdfast_linux::enable_recv_ttl(rx.as_fd(), to.is_ipv6()).expect("recv ttl");
    let plain_binds = UdpSocket::bind(from).is_ok();
    let tx = open_socket(from).expect("relay socket");
    tx.send_to(b"bfd", to).expect("send");
    let mut buf = [0u8; 64];
    let d = holdfast_linux::recv_with_ttl(rx.as_fd(), &mut buf).expect("receive");
    assert_eq!(&buf[..d.len], b"bfd");
    (d.from, d.ttl, plain_binds)
}

#[test]
fn relay_sockets_send_from_the_units_address_with_ttl_255() {
    if !ready() {
        return;
    }
    let ns = Netns(format!("hf-relay-sock-{}", std::process::id()));
    let st = Command::new("ip")
        .args(["netns", "add", &ns.0])
        .status()
        .unwrap();
    assert!(st.success(), "ip netns add {}", ns.0);
    let r = holdfast_linux::netns::in_netns(&ns.0, || {
        let st = Command::new("ip")
            .args(["link", "set", "lo", "up"])
            .status()
            .unwrap();
        assert!(st.success());
        [
            one(
                "198.18.7.10:49200".parse().unwrap(),
                "127.0.0.1:3784".parse().unwrap(),
            ),
            one(
                "[fd00:7::10]:49201".parse().unwrap(),
                "[::1]:3784".parse().unwrap(),
            ),
        ]
    })
    .expect("in the namespace");
    assert_eq!(
        (r[0].0, r[0].1),
        ("198.18.7.10:49200".parse().unwrap(), Some(255))
    );
    assert_eq!(
        (r[1].0, r[1].1),
        ("[fd00:7::10]:49201".parse().unwrap(), Some(255))
    );
    assert!(
        !r[0].2 && !r[1].2,
        "negative control: a plain socket cannot bind the unit's address"
    );
    drop(ns);
}
