//! Binding sockets to Linux VRF (l3mdev) or other network devices.

use crate::sockopt;
use std::ffi::CString;
use std::io;
use std::os::fd::BorrowedFd;

/// `IFNAMSIZ` including the terminating NUL.
const IFNAMSIZ: usize = 16;

fn c_ifname(ifname: &str) -> io::Result<CString> {
    if ifname.len() >= IFNAMSIZ {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "interface name longer than 15 bytes",
        ));
    }
    CString::new(ifname)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "interface name contains NUL"))
}

/// `SO_BINDTODEVICE`: restricts the socket to `ifname` (for a VRF device,
/// to that VRF's routing table). An empty name removes the binding. Fails
/// with `ENODEV` if no such device exists. Needs `CAP_NET_RAW`.
pub fn bind_to_device(fd: BorrowedFd<'_>, ifname: &str) -> io::Result<()> {
    let name = c_ifname(ifname)?;
    sockopt::set_bytes(
        fd,
        libc::SOL_SOCKET,
        libc::SO_BINDTODEVICE,
        name.as_bytes_with_nul(),
    )
}

/// The device the socket is bound to, or `None`.
pub fn bound_device(fd: BorrowedFd<'_>) -> io::Result<Option<String>> {
    let (buf, len) = sockopt::get::<[u8; IFNAMSIZ]>(fd, libc::SOL_SOCKET, libc::SO_BINDTODEVICE)?;
    let raw = &buf[..len.min(IFNAMSIZ)];
    let end = raw.iter().position(|b| *b == 0).unwrap_or(raw.len());
    Ok((end > 0).then(|| String::from_utf8_lossy(&raw[..end]).into_owned()))
}

/// `if_nametoindex(3)`: the interface index of `ifname`.
pub fn ifindex(ifname: &str) -> io::Result<u32> {
    let name = c_ifname(ifname)?;
    // SAFETY: `name` is a valid NUL-terminated string for the call.
    let idx = unsafe { libc::if_nametoindex(name.as_ptr()) };
    if idx == 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(idx)
    }
}

/// `IP_TRANSPARENT` and `IP_FREEBIND` (`IPV6_TRANSPARENT` and
/// `IPV6_FREEBIND` on an IPv6 socket): the socket may bind to and send from
/// an address this host does not own, such as a unit's service address on
/// the BFD relay's host. Needs `CAP_NET_ADMIN`.
pub fn set_transparent(fd: BorrowedFd<'_>, v6: bool) -> io::Result<()> {
    let (level, transparent, freebind) = if v6 {
        (
            libc::IPPROTO_IPV6,
            libc::IPV6_TRANSPARENT,
            libc::IPV6_FREEBIND,
        )
    } else {
        (libc::IPPROTO_IP, libc::IP_TRANSPARENT, libc::IP_FREEBIND)
    };
    sockopt::set_int(fd, level, transparent, 1)?;
    sockopt::set_int(fd, level, freebind, 1)
}

/// The name of interface `index`, if it exists (in this network namespace).
pub fn ifname(index: u32) -> Option<String> {
    nix::net::if_::if_indextoname(index)
        .ok()
        .and_then(|c| c.into_string().ok())
}
