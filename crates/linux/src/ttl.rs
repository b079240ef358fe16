//! TTL handling: RFC 5082 GTSM and eBGP multihop.

use crate::sockopt;
use std::io;
use std::os::fd::BorrowedFd;

fn ttl_opt(v6: bool) -> (libc::c_int, libc::c_int) {
    if v6 {
        (libc::IPPROTO_IPV6, libc::IPV6_UNICAST_HOPS)
    } else {
        (libc::IPPROTO_IP, libc::IP_TTL)
    }
}

fn min_ttl_opt(v6: bool) -> (libc::c_int, libc::c_int) {
    if v6 {
        (libc::IPPROTO_IPV6, libc::IPV6_MINHOPCOUNT)
    } else {
        (libc::IPPROTO_IP, libc::IP_MINTTL)
    }
}

/// Sets the TTL (hop limit) of outgoing packets, e.g. for eBGP multihop.
/// On an IPv6 socket the IPv4 TTL is set too, best effort, for IPv4-mapped
/// peers.
pub fn set_ttl(fd: BorrowedFd<'_>, v6: bool, ttl: u8) -> io::Result<()> {
    if ttl == 0 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "TTL must be 1..=255",
        ));
    }
    let (level, name) = ttl_opt(v6);
    sockopt::set_int(fd, level, name, ttl.into())?;
    if v6 {
        let _ = sockopt::set_int(fd, libc::IPPROTO_IP, libc::IP_TTL, ttl.into());
    }
    Ok(())
}

/// RFC 5082 GTSM for a peer at most `hops` hops away (1 = directly
/// connected): sends with TTL 255 and drops received segments whose TTL is
/// below `256 - hops`. `hops = 0` disables the check (minimum TTL 0).
pub fn set_gtsm(fd: BorrowedFd<'_>, family_v6: bool, hops: u8) -> io::Result<()> {
    let min = if hops == 0 {
        0
    } else {
        256 - libc::c_int::from(hops)
    };
    set_ttl(fd, family_v6, 255)?;
    let (level, name) = min_ttl_opt(family_v6);
    sockopt::set_int(fd, level, name, min)?;
    if family_v6 {
        let _ = sockopt::set_int(fd, libc::IPPROTO_IP, libc::IP_MINTTL, min);
    }
    Ok(())
}

/// The TTL (hop limit) of outgoing packets.
pub fn ttl(fd: BorrowedFd<'_>, v6: bool) -> io::Result<u8> {
    let (level, name) = ttl_opt(v6);
    let v = sockopt::get_int(fd, level, name)?;
    Ok(u8::try_from(v).unwrap_or(u8::MAX))
}

/// The minimum accepted TTL (`IP_MINTTL` / `IPV6_MINHOPCOUNT`).
pub fn min_ttl(fd: BorrowedFd<'_>, v6: bool) -> io::Result<u8> {
    let (level, name) = min_ttl_opt(v6);
    let v = sockopt::get_int(fd, level, name)?;
    Ok(u8::try_from(v).unwrap_or(u8::MAX))
}
