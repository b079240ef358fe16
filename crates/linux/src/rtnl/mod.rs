//! rtnetlink for the kernel FIB: a `NETLINK_ROUTE` socket (through `nix`,
//! no `unsafe`) and the route message codec ([`codec`]).
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
        let prog = [
            // nlmsg_type
            stmt((libc::BPF_LD | libc::BPF_H | libc::BPF_ABS) as u16, 4),
            jeq(ty(codec::RTM_NEWROUTE), 1, 0),
            jeq(ty(codec::RTM_DELROUTE), 0, 2),
            // rtm_protocol: 16-byte nlmsghdr, then family, dst_len,
            // src_len, tos, table, protocol.
            stmt((libc::BPF_LD | libc::BPF_B | libc::BPF_ABS) as u16, 21),
            jeq(protocol as u32, 1, 0),
            stmt((libc::BPF_RET | libc::BPF_K) as u16, u32::MAX),
            stmt((libc::BPF_RET | libc::BPF_K) as u16, 0),
        ];
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

impl AsFd for RtnlSocket {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}
