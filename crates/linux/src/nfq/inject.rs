//! The raw-socket injector of the ACK gate: sends the pure ACKs that
//! [`crate::gate`] synthesises, complete IP packets built from the
//! connection's own headers, through `IPPROTO_RAW` sockets, leaving by the
//! interface the kernel's packets of that connection used.
//!
//! Standards: raw(7) and ipv6(7) raw sockets (`IPPROTO_RAW` implies
//! `IP_HDRINCL`: the IPv4 header is ours; an IPv6 raw socket of protocol
//! `IPPROTO_RAW` takes the whole IPv6 packet as well), ip(7) `IP_PKTINFO`
//! and RFC 3542 `IPV6_PKTINFO` ancillary data to choose the outgoing
//! interface. What is sent is a TCPR-style (§II-C) acknowledgement of
//! replicated bytes (TENSOR §3.1).
//!
//! # Known issues
//!
//! - Without `CAP_NET_RAW` no socket opens and the gate synthesises
//!   nothing: data whose ACK rode only on clamped segments is then
//!   acknowledged by the next kernel ACK or by the peer's retransmission.
//! - A send error is not retried: a lost synthesised ACK is recovered like
//!   any lost ACK (the kernel's next one, or the peer's retransmission).
//! - An injected packet goes through the `OUTPUT` chain like any other, so
//!   it comes back through the gate's own queue (where it passes). While it
//!   waits there for the gate thread's verdict it still counts against
//!   the raw socket's send buffer, so the sends never block: a blocking
//!   send with the buffer full waited for verdicts only the blocked thread
//!   could give (at 1,000 sessions a burst of synthesised ACKs filled the
//!   default 208 KiB, the gate thread stopped for good, and the watchdog
//!   fenced the unit after its 2 s budget: 2 of 3 runs of
//!   `holdfast-nsr-bench --sessions 1000`, 2026-11-29). The buffer is
//!   [`SNDBUF`]; an ACK that finds it full is dropped (see above).

use super::cvt_size;
use crate::sockopt;
use std::io;
use std::mem::size_of;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};

/// One raw socket per address family (`IPPROTO_RAW`: the packet is sent
/// with the IP header we built). A family whose socket could not be opened
/// (no `CAP_NET_RAW`) refuses with `Unsupported`.
pub(super) struct Injector {
    v4: Option<OwnedFd>,
    v6: Option<OwnedFd>,
}

/// The injector sockets' send buffer: room for about 5,000 ACKs waiting
/// in the gate's queue (a queued packet's truesize is under 1 KiB).
pub(super) const SNDBUF: libc::c_int = 4 << 20;

fn raw_socket(domain: libc::c_int) -> Option<OwnedFd> {
    // SAFETY: plain socket(2) call; the result is checked.
    let raw = unsafe {
        libc::socket(
            domain,
            libc::SOCK_RAW | libc::SOCK_CLOEXEC | libc::SOCK_NONBLOCK,
            libc::IPPROTO_RAW,
        )
    };
    // SAFETY: a fresh descriptor that nothing else owns.
    let fd = (raw >= 0).then(|| unsafe { OwnedFd::from_raw_fd(raw) })?;
    let b = fd.as_fd();
    if sockopt::set_int(b, libc::SOL_SOCKET, libc::SO_SNDBUFFORCE, SNDBUF).is_err() {
        let _ = sockopt::set_int(b, libc::SOL_SOCKET, libc::SO_SNDBUF, SNDBUF);
    }
    Some(fd)
}

#[repr(C)]
struct Cmsg4 {
    hdr: libc::cmsghdr,
    info: libc::in_pktinfo,
}

#[repr(C)]
struct Cmsg6 {
    hdr: libc::cmsghdr,
    info: libc::in6_pktinfo,
}

impl Injector {
    /// Opens what it can; see [`Injector::usable`].
    pub(super) fn open() -> Injector {
        Injector {
            v4: raw_socket(libc::AF_INET),
            v6: raw_socket(libc::AF_INET6),
        }
    }

    /// Whether at least one family can send (otherwise the gate never
    /// synthesises ACKs).
    pub(super) fn usable(&self) -> bool {
        self.v4.is_some() || self.v6.is_some()
    }

    /// Sends a complete IP packet (header included) to `dst`, leaving by
    /// interface `oif` if it is not 0.
    pub(super) fn send(&self, pkt: &[u8], dst: SocketAddr, oif: u32) -> io::Result<()> {
        let r = self.send_with(pkt, dst, oif);
        match r {
            Err(e) if oif != 0 && e.raw_os_error() == Some(libc::EINVAL) => {
                self.send_with(pkt, dst, 0)
            }
            r => r,
        }
    }

    fn send_with(&self, pkt: &[u8], dst: SocketAddr, oif: u32) -> io::Result<()> {
        let mut iov = libc::iovec {
            iov_base: pkt.as_ptr() as *mut libc::c_void,
            iov_len: pkt.len(),
        };
        // SAFETY: all-zero is valid for these plain C structs.
        let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        let fd;
        // Both kept alive until sendmsg returns.
        let mut sin: libc::sockaddr_in;
        let mut sin6: libc::sockaddr_in6;
        let mut c4: Cmsg4;
        let mut c6: Cmsg6;
        match dst.ip() {
            IpAddr::V4(ip) => {
                fd = self.v4.as_ref().ok_or(io::ErrorKind::Unsupported)?;
                // SAFETY: all-zero is a valid `sockaddr_in`.
                sin = unsafe { std::mem::zeroed() };
                sin.sin_family = libc::AF_INET as libc::sa_family_t;
                sin.sin_addr.s_addr = u32::from_ne_bytes(ip.octets());
                msg.msg_name = (&mut sin as *mut libc::sockaddr_in).cast();
                msg.msg_namelen = size_of::<libc::sockaddr_in>() as libc::socklen_t;
                if oif != 0 {
                    // SAFETY: all-zero is valid for `cmsghdr` + `in_pktinfo`.
                    c4 = unsafe { std::mem::zeroed() };
                    c4.hdr.cmsg_len =
                        std::mem::offset_of!(Cmsg4, info) + size_of::<libc::in_pktinfo>();
                    c4.hdr.cmsg_level = libc::IPPROTO_IP;
                    c4.hdr.cmsg_type = libc::IP_PKTINFO;
                    c4.info.ipi_ifindex = oif as libc::c_int;
                    msg.msg_control = (&mut c4 as *mut Cmsg4).cast();
                    msg.msg_controllen = size_of::<Cmsg4>() as _;
                }
            }
            IpAddr::V6(ip) => {
                fd = self.v6.as_ref().ok_or(io::ErrorKind::Unsupported)?;
                // SAFETY: all-zero is a valid `sockaddr_in6` (port 0: the
                // protocol is the socket's, IPPROTO_RAW).
                sin6 = unsafe { std::mem::zeroed() };
                sin6.sin6_family = libc::AF_INET6 as libc::sa_family_t;
                sin6.sin6_addr.s6_addr = ip.octets();
                msg.msg_name = (&mut sin6 as *mut libc::sockaddr_in6).cast();
                msg.msg_namelen = size_of::<libc::sockaddr_in6>() as libc::socklen_t;
                if oif != 0 {
                    // SAFETY: all-zero is valid for `cmsghdr` + `in6_pktinfo`.
                    c6 = unsafe { std::mem::zeroed() };
                    c6.hdr.cmsg_len =
                        std::mem::offset_of!(Cmsg6, info) + size_of::<libc::in6_pktinfo>();
                    c6.hdr.cmsg_level = libc::IPPROTO_IPV6;
                    c6.hdr.cmsg_type = libc::IPV6_PKTINFO;
                    c6.info.ipi6_ifindex = oif;
                    msg.msg_control = (&mut c6 as *mut Cmsg6).cast();
                    msg.msg_controllen = size_of::<Cmsg6>() as _;
                }
            }
        }
        loop {
            // The socket is non-blocking: a full send buffer is `EAGAIN`.
            // SAFETY: `msg` points to a live iovec over `pkt`, a socket
            // address and optional control data that outlive the call; the
            // kernel only reads them.
            let rc = unsafe { libc::sendmsg(fd.as_raw_fd(), &msg, 0) };
            match cvt_size(rc) {
                Ok(_) => return Ok(()),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
        }
    }
}
