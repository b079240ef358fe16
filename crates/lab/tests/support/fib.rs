//! Shared helpers of the kernel FIB scenarios (kernel_fib, kernel_fib_reload):
//! link addresses, parsing, and commands run in a lab host.

use std::net::{IpAddr, Ipv4Addr};

use holdfast_lab::{AddrPair, HostId, Lab};

/// A /24 link: `a` on the first host, `b` on the second.
pub fn v4(a: [u8; 4], b: [u8; 4]) -> Option<AddrPair<Ipv4Addr>> {
    Some(AddrPair {
        a: Ipv4Addr::from(a),
        b: Ipv4Addr::from(b),
        prefix_len: 24,
    })
}

pub fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

/// Runs `cmd` in `host`; its stdout, or a panic naming the command.
pub fn sh(lab: &Lab, host: HostId, cmd: &[&str]) -> String {
    lab.exec_ok(host, cmd)
        .unwrap_or_else(|e| panic!("{}: {e}", cmd.join(" ")))
}
