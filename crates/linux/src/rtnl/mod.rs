//! rtnetlink for the kernel FIB: a `NETLINK_ROUTE` socket (through `nix`,
//! no `unsafe`) and the route message codec ([`codec`]); and interface
//! addresses ([`set_address`]), which the orchestration moves at a
//! takeover without running `ip`.
//!
//! The FIB writes many route messages per `sendmsg` (the kernel processes
//! them in order, within the call) and reads the answers afterwards;
//! notifications of route, link and address changes arrive on a second
//! socket bound to the multicast groups ([`GROUPS_FIB`]).
//!
//! # Known issues
//! - `NETLINK_GET_STRICT_CHK` is not used: dumps return every table, and
//!   the caller filters.

pub mod codec;

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};

use nix::errno::Errno;
use nix::sys::socket::{
    bind, recv, send, setsockopt, socket, sockopt, AddressFamily, MsgFlags, NetlinkAddr, SockFlag,
    SockProtocol, SockType,
};

/// `RTMGRP_LINK`: links appear, disappear, go up or down.
pub const RTMGRP_LINK: u32 = 0x1;
pub const RTMGRP_IPV4_IFADDR: u32 = 0x10;
pub const RTMGRP_IPV4_ROUTE: u32 = 0x40;
pub const RTMGRP_IPV6_IFADDR: u32 = 0x100;
pub const RTMGRP_IPV6_ROUTE: u32 = 0x400;
/// What the FIB follows: routes, links and addresses of both families.
pub const GROUPS_FIB: u32 =
    RTMGRP_LINK | RTMGRP_IPV4_IFADDR | RTMGRP_IPV4_ROUTE | RTMGRP_IPV6_IFADDR | RTMGRP_IPV6_ROUTE;

/// A `NETLINK_ROUTE` socket.
pub struct RtnlSocket {
    fd: OwnedFd,
}

impl RtnlSocket {
    /// Opens a socket bound to the multicast `groups` (0: none). With
    /// `nonblocking`, [`RtnlSocket::recv`] never waits.
    pub fn open(groups: u32, nonblocking: bool) -> io::Result<Self> {
        let mut flags = SockFlag::SOCK_CLOEXEC;
        if nonblocking {
            flags |= SockFlag::SOCK_NONBLOCK;
        }
        let fd = socket(
            AddressFamily::Netlink,
            SockType::Raw,
            flags,
            SockProtocol::NetlinkRoute,
        )?;
        bind(fd.as_raw_fd(), &NetlinkAddr::new(0, groups))?;
        Ok(RtnlSocket { fd })
    }

    /// Sets the receive and send buffers, beyond `rmem_max`/`wmem_max`
    /// when the process may (`CAP_NET_ADMIN`), else as far as allowed.
    pub fn set_buffers(&self, rcv: usize, snd: usize) {
        if setsockopt(&self.fd, sockopt::RcvBufForce, &rcv).is_err() {
            let _ = setsockopt(&self.fd, sockopt::RcvBuf, &rcv);
        }
        if setsockopt(&self.fd, sockopt::SndBufForce, &snd).is_err() {
            let _ = setsockopt(&self.fd, sockopt::SndBuf, &snd);
        }
    }

    /// A socket filter (classic BPF) that drops route notifications
    /// (`RTM_NEWROUTE`, `RTM_DELROUTE`) of `protocol` in the kernel: our own
    /// writes never reach the FIB's notification socket, so a million
    /// installs cannot overflow it.
    pub fn drop_routes_of_protocol(&self, protocol: u8) -> io::Result<()> {
        self.drop_routes_of_protocols(&[protocol])
    }

    /// The same for several protocols (1 to 32): while a reload moves our
    /// routes to a new protocol number, the old one's deletions are ours
    /// too. Attaching replaces the filter in place.
    pub fn drop_routes_of_protocols(&self, protocols: &[u8]) -> io::Result<()> {
        let prog = protocol_filter(protocols)?;
        socket2::SockRef::from(&self.fd).attach_filter(&prog)
    }

    /// Sends `buf` (one or more messages) to the kernel in one call.
    pub fn send(&self, buf: &[u8]) -> io::Result<()> {
        loop {
            match send(self.fd.as_raw_fd(), buf, MsgFlags::empty()) {
                Ok(_) => return Ok(()),
                Err(Errno::EINTR) => continue,
                Err(e) => return Err(e.into()),
            }
        }
    }

    /// Reads one datagram into `buf` (which must be large: 64 KiB or
    /// more). `wait` = false returns `WouldBlock` when nothing is queued.
    /// `ENOBUFS` means the kernel dropped messages for us.
    pub fn recv(&self, buf: &mut [u8], wait: bool) -> io::Result<usize> {
        let flags = if wait {
            MsgFlags::empty()
        } else {
            MsgFlags::MSG_DONTWAIT
        };
        loop {
            match recv(self.fd.as_raw_fd(), buf, flags) {
                Ok(n) => return Ok(n),
                Err(Errno::EINTR) => continue,
                Err(e) => return Err(e.into()),
            }
        }
    }
}

/// Sends one request (sequence number 1) on a new socket and returns the
/// first answer to it: (message type, payload).
fn exchange(req: &[u8]) -> io::Result<(u16, Vec<u8>)> {
    let sock = RtnlSocket::open(0, false)?;
    sock.send(req)?;
    let mut buf = vec![0u8; 8192];
    loop {
        let n = sock.recv(&mut buf, true)?;
        if let Some(m) = codec::messages(&buf[..n]).find(|m| m.seq == 1) {
            return Ok((m.ty, m.payload.to_vec()));
        }
    }
}

/// The kernel's `NLMSG_ERROR` answer as a result (0: success).
fn acknowledged(ty: u16, payload: &[u8]) -> io::Result<()> {
    match (ty, codec::error_code(payload)) {
        (codec::NLMSG_ERROR, Some(0)) => Ok(()),
        (codec::NLMSG_ERROR, Some(e)) => Err(io::Error::from_raw_os_error(e)),
        _ => Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("unexpected netlink answer (type {ty})"),
        )),
    }
}

/// Adds (`add`, replacing one that exists) or deletes `addr/prefix_len`
/// on interface `ifindex` of the calling thread's network namespace, and
/// waits for the kernel's answer. An IPv6 address is added without
/// duplicate address detection (`IFA_F_NODAD`): a service address moved at
/// a takeover must be usable and announced at once, not tentative for a
/// second. Deleting an address that is not there is `Ok(false)`;
/// otherwise `Ok(true)`.
pub fn set_address(
    add: bool,
    ifindex: u32,
    addr: std::net::IpAddr,
    prefix_len: u8,
) -> io::Result<bool> {
    let flags = if add && addr.is_ipv6() {
        codec::IFA_F_NODAD
    } else {
        0
    };
    let mut req = Vec::with_capacity(64);
    codec::encode_address(&mut req, 1, add, ifindex, addr, prefix_len, flags);
    let (ty, payload) = exchange(&req)?;
    match acknowledged(ty, &payload) {
        Ok(()) => Ok(true),
        Err(e) if !add && matches!(e.raw_os_error(), Some(libc::EADDRNOTAVAIL | libc::ENOENT)) => {
            Ok(false)
        }
        Err(e) => Err(e),
    }
}

/// The interface the kernel would send to `dst` over, in the calling
/// thread's network namespace (a route lookup, as `ip route get`).
pub fn route_oif(dst: std::net::IpAddr) -> io::Result<u32> {
    route_next_hop(dst).map(|(oif, _)| oif)
}

/// The interface and the on-link neighbour the kernel would send to `dst`
/// through (its gateway, or `dst` itself on a connected route), in the
/// calling thread's network namespace (a route lookup, as `ip route get`).
pub fn route_next_hop(dst: std::net::IpAddr) -> io::Result<(u32, std::net::IpAddr)> {
    let mut req = Vec::with_capacity(64);
    codec::encode_route_get(&mut req, 1, dst);
    let (ty, payload) = exchange(&req)?;
    if ty != codec::RTM_NEWROUTE {
        acknowledged(ty, &payload)?;
    }
    codec::parse_route(&payload)
        .and_then(|r| r.nexthops.first().copied())
        .filter(|nh| nh.oif != 0)
        .map(|nh| (nh.oif, nh.gateway.unwrap_or(dst)))
        .ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::NotFound,
                format!("no interface routes to {dst}"),
            )
        })
}

/// Adds `addr` as a host address (/32 or /128, see [`set_address`]) on
/// the interface the kernel routes it over; returns that interface's name.
pub fn add_routed_host_address(addr: std::net::IpAddr) -> io::Result<String> {
    let index = route_oif(addr)?;
    let dev = crate::device::ifname(index).ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::NotFound,
            format!("no name for interface {index}"),
        )
    })?;
    let len = if addr.is_ipv4() { 32 } else { 128 };
    set_address(true, index, addr, len)?;
    Ok(dev)
}

/// The classic BPF program of [`RtnlSocket::drop_routes_of_protocols`]:
/// route messages whose `rtm_protocol` is one of `protocols` are dropped,
/// everything else is kept whole.
fn protocol_filter(protocols: &[u8]) -> io::Result<Vec<libc::sock_filter>> {
    if protocols.is_empty() || protocols.len() > 32 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "1 to 32 protocols",
        ));
    }
    let n = protocols.len() as u8;
    // BPF loads are big-endian; netlink headers are native-endian.
    let ty = |t: u16| u16::from_be_bytes(t.to_ne_bytes()) as u32;
    let stmt = |code: u16, k: u32| libc::sock_filter {
        code,
        jt: 0,
        jf: 0,
        k,
    };
    let jeq = |k: u32, jt: u8, jf: u8| libc::sock_filter {
        code: (libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K) as u16,
        jt,
        jf,
        k,
    };
    let mut prog = vec![
        // nlmsg_type
        stmt((libc::BPF_LD | libc::BPF_H | libc::BPF_ABS) as u16, 4),
        jeq(ty(codec::RTM_NEWROUTE), 1, 0),
        // Not a route message: over the protocol load and tests, to keep.
        jeq(ty(codec::RTM_DELROUTE), 0, n + 1),
        // rtm_protocol: 16-byte nlmsghdr, then family, dst_len,
        // src_len, tos, table, protocol.
        stmt((libc::BPF_LD | libc::BPF_B | libc::BPF_ABS) as u16, 21),
    ];
    for (i, p) in protocols.iter().enumerate() {
        // A match jumps over the remaining tests and the keep, to drop.
        prog.push(jeq(*p as u32, n - i as u8, 0));
    }
    prog.push(stmt((libc::BPF_RET | libc::BPF_K) as u16, u32::MAX));
    prog.push(stmt((libc::BPF_RET | libc::BPF_K) as u16, 0));
    Ok(prog)
}

impl AsFd for RtnlSocket {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

#[cfg(test)]
mod filter_tests {
    use super::*;

    /// Runs the few classic BPF instructions the filter uses on `pkt`.
    fn run(prog: &[libc::sock_filter], pkt: &[u8]) -> u32 {
        let mut a: u32 = 0;
        let mut pc = 0;
        loop {
            let i = &prog[pc];
            let code = i.code as u32;
            match code {
                c if c == libc::BPF_LD | libc::BPF_H | libc::BPF_ABS => {
                    let k = i.k as usize;
                    a = u16::from_be_bytes([pkt[k], pkt[k + 1]]) as u32;
                }
                c if c == libc::BPF_LD | libc::BPF_B | libc::BPF_ABS => {
                    a = pkt[i.k as usize] as u32
                }
                c if c == libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K => {
                    pc += if a == i.k { i.jt } else { i.jf } as usize;
                }
                c if c == libc::BPF_RET | libc::BPF_K => return i.k,
                other => panic!("unexpected instruction {other:#x}"),
            }
            pc += 1;
        }
    }

    fn msg(ty: u16, protocol: u8) -> Vec<u8> {
        let mut m = vec![0u8; 28];
        m[4..6].copy_from_slice(&ty.to_ne_bytes());
        m[21] = protocol;
        m
    }

    #[test]
    fn drops_exactly_the_route_messages_of_the_protocols_given() {
        for protos in [vec![179u8], vec![201, 179], vec![5, 6, 7]] {
            let prog = protocol_filter(&protos).unwrap();
            for p in [2u8, 5, 6, 7, 12, 179, 186, 201, 255] {
                for ty in [codec::RTM_NEWROUTE, codec::RTM_DELROUTE] {
                    let keep = run(&prog, &msg(ty, p));
                    assert_eq!(
                        keep == 0,
                        protos.contains(&p),
                        "{protos:?} type {ty} proto {p}"
                    );
                }
                // Link and address messages are kept whatever byte 21 is.
                for ty in [codec::RTM_NEWLINK, codec::RTM_NEWADDR, codec::RTM_DELADDR] {
                    assert_ne!(run(&prog, &msg(ty, p)), 0);
                }
            }
        }
        assert!(protocol_filter(&[]).is_err());
    }
}
