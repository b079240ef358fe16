//! UDP datagrams with the TTL (hop limit) they arrived with: RFC 5881 §5
//! (BFD single-hop accepts only TTL 255) and RFC 5082 for UDP; and with
//! the time the kernel received them.
//!
//! [`enable_recv_ttl`] asks the kernel to attach the received TTL to each
//! datagram (`IP_RECVTTL` / `IPV6_RECVHOPLIMIT`) and its arrival time
//! (`SO_TIMESTAMPNS`); [`recv_with_ttl`] reads one datagram with
//! `recvmsg(2)` and returns it with its source address, that TTL and that
//! time. The arrival time is what a process that was stopped or starved
//! judges its peer's silence by: the datagrams that waited in the socket
//! while it did not run arrived on time.

use crate::sockopt;
use std::io;
use std::mem::{size_of, size_of_val};
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
use std::os::fd::{AsRawFd, BorrowedFd};

/// One datagram read by [`recv_with_ttl`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Datagram {
    /// Bytes written to the buffer (a longer datagram is truncated).
    pub len: usize,
    pub from: SocketAddr,
    /// The TTL or hop limit it arrived with, when the kernel attached it.
    pub ttl: Option<u8>,
    /// When the kernel received it (`SO_TIMESTAMPNS`, wall clock), when
    /// the kernel attached it.
    pub received: Option<std::time::SystemTime>,
}

/// Attach the received TTL (IPv4) or hop limit (IPv6) and the kernel's
/// receive time to every datagram.
pub fn enable_recv_ttl(fd: BorrowedFd<'_>, v6: bool) -> io::Result<()> {
    sockopt::set_int(fd, libc::SOL_SOCKET, libc::SO_TIMESTAMPNS, 1)?;
    if v6 {
        sockopt::set_int(fd, libc::IPPROTO_IPV6, libc::IPV6_RECVHOPLIMIT, 1)
    } else {
        sockopt::set_int(fd, libc::IPPROTO_IP, libc::IP_RECVTTL, 1)
    }
}

/// Reads one datagram without blocking (`MSG_DONTWAIT`: `WouldBlock` when
/// none is queued).
pub fn recv_with_ttl(fd: BorrowedFd<'_>, buf: &mut [u8]) -> io::Result<Datagram> {
    // SAFETY: sockaddr_storage is plain old data; all zeroes is a valid value.
    let mut addr: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    // Room for a few control messages, aligned for `cmsghdr`.
    let mut control = [0u64; 16];
    // SAFETY: msghdr is plain old data; all zeroes is a valid (empty) value.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_name = (&mut addr as *mut libc::sockaddr_storage).cast();
    msg.msg_namelen = size_of::<libc::sockaddr_storage>() as libc::socklen_t;
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = size_of_val(&control) as _;
    // SAFETY: `fd` is live for the borrow; every pointer in `msg` points to
    // a live local (`addr`, `iov` over `buf`, `control`) of the length
    // given beside it, and outlives the call.
    let n = unsafe { libc::recvmsg(fd.as_raw_fd(), &mut msg, libc::MSG_DONTWAIT) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    let mut ttl = None;
    let mut received = None;
    // SAFETY: `msg` was filled by recvmsg; CMSG_FIRSTHDR only reads its
    // control fields.
    let mut c = unsafe { libc::CMSG_FIRSTHDR(&msg) };
    while !c.is_null() {
        // SAFETY: a non-null header from CMSG_FIRSTHDR/CMSG_NXTHDR lies
        // inside `control`, which the kernel filled.
        let h = unsafe { &*c };
        let is_ttl = (h.cmsg_level == libc::IPPROTO_IP && h.cmsg_type == libc::IP_TTL)
            || (h.cmsg_level == libc::IPPROTO_IPV6 && h.cmsg_type == libc::IPV6_HOPLIMIT);
        if is_ttl && h.cmsg_len as usize >= size_of::<libc::cmsghdr>() + size_of::<libc::c_int>() {
            // SAFETY: the length check above guarantees a c_int of data
            // after the header; it may be unaligned, hence read_unaligned.
            let v: libc::c_int =
                unsafe { std::ptr::read_unaligned(libc::CMSG_DATA(c).cast::<libc::c_int>()) };
            ttl = u8::try_from(v).ok();
        }
        let is_ts = h.cmsg_level == libc::SOL_SOCKET && h.cmsg_type == libc::SCM_TIMESTAMPNS;
        if is_ts && h.cmsg_len as usize >= size_of::<libc::cmsghdr>() + size_of::<libc::timespec>()
        {
            // SAFETY: the length check above guarantees a timespec of data
            // after the header; it may be unaligned, hence read_unaligned.
            let ts: libc::timespec =
                unsafe { std::ptr::read_unaligned(libc::CMSG_DATA(c).cast::<libc::timespec>()) };
            received = u64::try_from(ts.tv_sec).ok().map(|s| {
                std::time::UNIX_EPOCH
                    + std::time::Duration::new(s, u32::try_from(ts.tv_nsec).unwrap_or(0))
            });
        }
        // SAFETY: `c` is a valid header of `msg`'s control buffer.
        c = unsafe { libc::CMSG_NXTHDR(&msg, c) };
    }
    let from = match i32::from(addr.ss_family) {
        libc::AF_INET => {
            // SAFETY: the family says the storage holds a sockaddr_in,
            // which is smaller than sockaddr_storage.
            let a: libc::sockaddr_in =
                unsafe { std::ptr::read((&addr as *const libc::sockaddr_storage).cast()) };
            SocketAddr::V4(SocketAddrV4::new(
                Ipv4Addr::from(u32::from_be(a.sin_addr.s_addr)),
                u16::from_be(a.sin_port),
            ))
        }
        libc::AF_INET6 => {
            // SAFETY: the family says the storage holds a sockaddr_in6,
            // which is smaller than sockaddr_storage.
            let a: libc::sockaddr_in6 =
                unsafe { std::ptr::read((&addr as *const libc::sockaddr_storage).cast()) };
            SocketAddr::V6(SocketAddrV6::new(
                Ipv6Addr::from(a.sin6_addr.s6_addr),
                u16::from_be(a.sin6_port),
                a.sin6_flowinfo,
                a.sin6_scope_id,
            ))
        }
        f => {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("datagram from address family {f}"),
            ))
        }
    };
    Ok(Datagram {
        len: usize::try_from(n).unwrap_or(0),
        from,
        ttl,
        received,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::UdpSocket;
    use std::os::fd::AsFd;

    #[test]
    fn loopback_datagram_carries_its_ttl() {
        for (bind, v6) in [("127.0.0.1:0", false), ("[::1]:0", true)] {
            let Ok(rx) = UdpSocket::bind(bind) else {
                continue;
            };
            enable_recv_ttl(rx.as_fd(), v6).unwrap();
            let tx = UdpSocket::bind(bind).unwrap();
            crate::ttl::set_ttl(tx.as_fd(), v6, 255).unwrap();
            tx.send_to(b"hello", rx.local_addr().unwrap()).unwrap();
            rx.set_nonblocking(false).unwrap();
            let mut buf = [0u8; 64];
            let mut got = None;
            for _ in 0..100 {
                match recv_with_ttl(rx.as_fd(), &mut buf) {
                    Ok(d) => {
                        got = Some(d);
                        break;
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                        std::thread::sleep(std::time::Duration::from_millis(5))
                    }
                    Err(e) => panic!("{e}"),
                }
            }
            let d = got.expect("datagram");
            assert_eq!(&buf[..d.len], b"hello");
            assert_eq!(d.from, tx.local_addr().unwrap());
            assert_eq!(d.ttl, Some(255), "{bind}");
        }
    }

    /// A datagram read long after it arrived carries its arrival time, not
    /// the time it was read (what a stopped process judges silence by).
    #[test]
    fn datagram_read_late_carries_its_arrival_time() {
        let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
        enable_recv_ttl(rx.as_fd(), false).unwrap();
        let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
        let mut buf = [0u8; 64];
        // The kernel turns receive timestamping on for the whole stack a
        // little after the first socket asks (a deferred static key): until
        // then a datagram is stamped when it is read. Wait for it, bounded.
        let delay = std::time::Duration::from_millis(50);
        for _ in 0..100 {
            tx.send_to(b"warm-up", rx.local_addr().unwrap()).unwrap();
            std::thread::sleep(delay);
            let d = recv_with_ttl(rx.as_fd(), &mut buf).expect("queued datagram");
            let at = d.received.expect("a kernel timestamp");
            let queued = std::time::SystemTime::now()
                .duration_since(at)
                .unwrap_or_default();
            if queued >= delay / 2 {
                break;
            }
        }
        let sent = std::time::SystemTime::now();
        tx.send_to(b"early", rx.local_addr().unwrap()).unwrap();
        std::thread::sleep(std::time::Duration::from_millis(300));
        let d = recv_with_ttl(rx.as_fd(), &mut buf).expect("queued datagram");
        let at = d.received.expect("a kernel timestamp");
        let read = std::time::SystemTime::now();
        let queued = read.duration_since(at).expect("arrived before it was read");
        assert!(
            queued >= std::time::Duration::from_millis(250),
            "arrival time {at:?} is the read time, not the arrival (sent {sent:?}, read {read:?})"
        );
        assert!(
            at.duration_since(sent).unwrap_or_default() < std::time::Duration::from_millis(100)
        );
    }
}
