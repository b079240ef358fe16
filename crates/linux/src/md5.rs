//! RFC 2385 TCP MD5 Signature Option via Linux `TCP_MD5SIG`.
//!
//! On a listening socket, one key is installed per peer address; accepted
//! connections inherit it. On a connecting socket the key must be set
//! before `connect`.

use crate::sockopt;
use std::io;
use std::mem::size_of;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::BorrowedFd;

/// `TCP_MD5SIG_MAXKEYLEN`.
pub const TCP_MD5_MAX_KEY_LEN: usize = 80;

/// `struct tcp_md5sig` from `<linux/tcp.h>`.
#[repr(C)]
#[derive(Clone, Copy)]
struct TcpMd5Sig {
    addr: libc::sockaddr_storage,
    flags: u8,
    prefixlen: u8,
    keylen: u16,
    ifindex: libc::c_int,
    key: [u8; TCP_MD5_MAX_KEY_LEN],
}

/// Encodes `ip` as the socket address the kernel expects for a socket of
/// family `domain` (IPv4 peers of an IPv6 socket become v4-mapped).
fn peer_storage(domain: libc::c_int, ip: IpAddr) -> libc::sockaddr_storage {
    // SAFETY: `sockaddr_storage` is plain old data; all-zero is valid.
    let mut ss: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let v6 = match (domain, ip) {
        (libc::AF_INET6, IpAddr::V4(v4)) => Some(v4.to_ipv6_mapped()),
        (_, IpAddr::V6(v6)) => Some(v6),
        (_, IpAddr::V4(_)) => None,
    };
    match (v6, ip) {
        (Some(v6), _) => {
            let sin6 = libc::sockaddr_in6 {
                sin6_family: libc::AF_INET6 as libc::sa_family_t,
                sin6_port: 0,
                sin6_flowinfo: 0,
                sin6_addr: libc::in6_addr {
                    s6_addr: v6.octets(),
                },
                sin6_scope_id: 0,
            };
            // SAFETY: `sockaddr_storage` is larger than and suitably aligned
            // for `sockaddr_in6`; we write one value at its start.
            unsafe { std::ptr::write((&mut ss as *mut libc::sockaddr_storage).cast(), sin6) };
        }
        (None, IpAddr::V4(v4)) => {
            let sin = libc::sockaddr_in {
                sin_family: libc::AF_INET as libc::sa_family_t,
                sin_port: 0,
                sin_addr: libc::in_addr {
                    s_addr: u32::from_ne_bytes(v4.octets()),
                },
                sin_zero: [0; 8],
            };
            // SAFETY: as above, for `sockaddr_in`.
            unsafe { std::ptr::write((&mut ss as *mut libc::sockaddr_storage).cast(), sin) };
        }
        (None, IpAddr::V6(_)) => unreachable!("IPv6 peers always take the first arm"),
    }
    ss
}

/// Installs (`Some(key)`) or removes (`None`) the RFC 2385 key for `peer`
/// (its port is ignored) on a listening or not-yet-connected TCP socket,
/// IPv4 or IPv6. Keys longer than 80 bytes are rejected with `InvalidInput`;
/// an empty key removes like `None`. Removing a key that is not installed
/// succeeds.
pub fn set_tcp_md5(fd: BorrowedFd<'_>, peer: SocketAddr, key: Option<&[u8]>) -> io::Result<()> {
    let key = key.unwrap_or_default();
    if key.len() > TCP_MD5_MAX_KEY_LEN {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "TCP MD5 key longer than 80 bytes",
        ));
    }
    let remove = key.is_empty();
    let domain = sockopt::domain(fd)?;
    let mut sig = TcpMd5Sig {
        addr: peer_storage(domain, peer.ip()),
        flags: 0,
        prefixlen: 0,
        keylen: key.len() as u16,
        ifindex: 0,
        key: [0; TCP_MD5_MAX_KEY_LEN],
    };
    sig.key[..key.len()].copy_from_slice(key);
    debug_assert_eq!(size_of::<TcpMd5Sig>(), 216);
    match sockopt::set(fd, libc::IPPROTO_TCP, libc::TCP_MD5SIG, &sig) {
        Err(e) if remove && e.raw_os_error() == Some(libc::ENOENT) => Ok(()),
        r => r,
    }
}
