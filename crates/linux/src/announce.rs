//! Announcing that an address moved to this host, so that neighbours on the
//! link update their ARP / neighbour caches at once instead of sending to the
//! old host's MAC address until their entry times out; and soliciting a
//! neighbour now, so that a link that comes back is used at once instead of
//! when the kernel's next resolution attempt comes due.
//!
//! | family | standard | Linux API |
//! |---|---|---|
//! | IPv4 | gratuitous ARP request (RFC 5227 §3 "ARP Announcement", RFC 826) | `socket(AF_PACKET, SOCK_RAW)`, `bind(struct sockaddr_ll)`, `getsockname` for the MAC, `sendto` the broadcast Ethernet frame |
//! | IPv6 | unsolicited Neighbor Advertisement (RFC 4861 §7.2.6) | `socket(AF_INET6, SOCK_RAW, IPPROTO_ICMPV6)` (the kernel fills in the checksum), `SO_BINDTODEVICE`, `IPV6_MULTICAST_IF`, `IPV6_MULTICAST_HOPS` = 255 |
//! | IPv4 | ARP request for a next hop (RFC 826) | as the gratuitous ARP; the next hop from `RTM_GETROUTE`, the source from `connect(2)` + `getsockname(2)` of a UDP socket |
//! | IPv6 | Neighbor Solicitation to the solicited-node address (RFC 4861 §7.2.2, RFC 4291 §2.7.1) | as the NA |
//! | both | whether an address is local | `bind(2)` of a UDP socket without `IP_FREEBIND` |
//!
//! Announcements and solicitations need `CAP_NET_RAW`.
//!
//! Why solicit by hand ([`solicit_next_hop`]): while a link is down, the
//! kernel's entry for a neighbour it sends to stays `INCOMPLETE` (the
//! packets queued on it) and is probed again every `retrans_time_ms` (1 s
//! by default); when the link comes back, the queued packets wait for the
//! next probe, up to a second. The neighbour's answer to a solicitation of
//! our own completes the entry (Linux takes an ARP reply or a solicited NA
//! for an entry it has), and the queued packets leave at once.
//!
//! Known issues:
//! - One announcement is sent per call; a lost frame is not repeated (RFC
//!   5227 sends two, two seconds apart: call again if that matters).
//! - Only Ethernet-like interfaces (6-byte hardware addresses) are
//!   supported; others fail with `Unsupported`.
//! - Receivers update an existing entry but create none: Linux ignores a
//!   gratuitous ARP for an unknown address unless `arp_accept` is set, and
//!   an unsolicited NA for one unless `accept_untracked_na` is set. That is
//!   what is wanted: only neighbours that talk to the address care.
//! - The NA's Router flag follows the interface's IPv6 `forwarding` sysctl,
//!   as the kernel's own unsolicited NAs do (a cleared flag would make a
//!   neighbour drop us as its default router).
//! - [`address_is_local`] says `true` for any address when
//!   `net.ipv4.ip_nonlocal_bind` / `net.ipv6.ip_nonlocal_bind` is set, and
//!   `false` for IPv6 link-local addresses (they need a scope) and for
//!   addresses still in duplicate address detection.

use socket2::{Domain, Protocol, Socket, Type};
use std::io;
use std::mem::{size_of, zeroed};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV6, UdpSocket};
use std::os::fd::{AsFd, AsRawFd};

/// `ETH_P_IP`, the ARP protocol type for IPv4 (<linux/if_ether.h>).
const ETH_P_IP: u16 = 0x0800;
/// ICMPv6 type of a Neighbor Advertisement (RFC 4861 §4.4).
const ND_NEIGHBOR_ADVERT: u8 = 136;
/// NA flags in the first byte after the checksum: Router, Solicited, Override.
const ND_NA_FLAG_ROUTER: u8 = 0x80;
const ND_NA_FLAG_OVERRIDE: u8 = 0x20;
/// ND option "Target Link-Layer Address" (RFC 4861 §4.6.1).
const ND_OPT_TARGET_LINKADDR: u8 = 2;
/// ICMPv6 type of a Neighbor Solicitation (RFC 4861 §4.3).
const ND_NEIGHBOR_SOLICIT: u8 = 135;
/// ND option "Source Link-Layer Address" (RFC 4861 §4.6.1).
const ND_OPT_SOURCE_LINKADDR: u8 = 1;

/// IPv4: broadcasts a gratuitous ARP request (sender = target = `addr`, from
/// the interface's MAC) via an `AF_PACKET` socket on `ifname`.
/// IPv6: sends an unsolicited Neighbor Advertisement (Override flag set,
/// target = `addr`, target link-layer option) to ff02::1 with hop limit 255
/// from `addr` via an ICMPv6 raw socket bound to the interface. Fails with
/// `EADDRNOTAVAIL` if the IPv6 `addr` is not configured or still tentative
/// (RFC 4862 §5.4 forbids advertising a tentative address): add a taken-over
/// address with `nodad`. An IPv4 `addr` is not checked.
pub fn announce_address(ifname: &str, addr: IpAddr) -> io::Result<()> {
    let ifindex = crate::device::ifindex(ifname)?;
    match addr {
        IpAddr::V4(v4) => gratuitous_arp(ifindex, v4),
        IpAddr::V6(v6) => unsolicited_na(ifname, ifindex, v6),
    }
}

/// Whether `addr` is configured locally (usable as a source): binds a UDP
/// socket to `addr:0` without `IP_FREEBIND`.
pub fn address_is_local(addr: IpAddr) -> bool {
    if addr.is_unspecified() || addr.is_multicast() {
        return false;
    }
    UdpSocket::bind(SocketAddr::new(addr, 0)).is_ok()
}

fn sockaddr_ll(ifindex: u32, protocol: u16) -> io::Result<libc::sockaddr_ll> {
    // SAFETY: `sockaddr_ll` is plain old data; all-zero is valid.
    let mut sll: libc::sockaddr_ll = unsafe { zeroed() };
    sll.sll_family = libc::AF_PACKET as libc::c_ushort;
    sll.sll_protocol = protocol.to_be();
    sll.sll_ifindex =
        libc::c_int::try_from(ifindex).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    Ok(sll)
}

fn ll_len() -> libc::socklen_t {
    size_of::<libc::sockaddr_ll>() as libc::socklen_t
}

/// An `AF_PACKET` socket bound to `ifindex` (protocol 0: it receives
/// nothing) and the interface's 6-byte hardware address.
fn packet_socket(ifindex: u32) -> io::Result<(Socket, [u8; 6])> {
    let sock = Socket::new(Domain::PACKET, Type::RAW, None)?;
    let fd = sock.as_raw_fd();
    let mut sll = sockaddr_ll(ifindex, 0)?;
    // SAFETY: `fd` is live (owned by `sock`); `sll` is a valid `sockaddr_ll`
    // of the length passed, only read by the kernel.
    let rc = unsafe { libc::bind(fd, (&sll as *const libc::sockaddr_ll).cast(), ll_len()) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    let mut len = ll_len();
    // SAFETY: `fd` is live; the kernel writes at most `len` bytes into `sll`,
    // which is writable for that many, and updates `len`.
    let rc =
        unsafe { libc::getsockname(fd, (&mut sll as *mut libc::sockaddr_ll).cast(), &mut len) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    if sll.sll_hatype != libc::ARPHRD_ETHER || usize::from(sll.sll_halen) != 6 {
        return Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "interface has no Ethernet hardware address",
        ));
    }
    let mut mac = [0u8; 6];
    mac.copy_from_slice(&sll.sll_addr[..6]);
    Ok((sock, mac))
}

/// The interface's hardware address (read from a bound `AF_PACKET` socket,
/// which sees the calling thread's network namespace, unlike `/sys`).
fn hw_addr(ifindex: u32) -> io::Result<[u8; 6]> {
    packet_socket(ifindex).map(|(_, mac)| mac)
}

/// Ethernet broadcast frame with an ARP request announcing `ip` at `mac`.
fn garp_frame(mac: [u8; 6], ip: Ipv4Addr) -> Vec<u8> {
    arp_request_frame(mac, ip, ip)
}

/// Ethernet broadcast frame with an ARP request from `sender` at `mac` for
/// `target`.
fn arp_request_frame(mac: [u8; 6], sender: Ipv4Addr, target: Ipv4Addr) -> Vec<u8> {
    let mut f = Vec::with_capacity(42);
    f.extend_from_slice(&[0xff; 6]);
    f.extend_from_slice(&mac);
    f.extend_from_slice(&(libc::ETH_P_ARP as u16).to_be_bytes());
    f.extend_from_slice(&libc::ARPHRD_ETHER.to_be_bytes());
    f.extend_from_slice(&ETH_P_IP.to_be_bytes());
    f.extend_from_slice(&[6, 4]);
    f.extend_from_slice(&libc::ARPOP_REQUEST.to_be_bytes());
    f.extend_from_slice(&mac);
    f.extend_from_slice(&sender.octets());
    f.extend_from_slice(&[0; 6]);
    f.extend_from_slice(&target.octets());
    f
}

fn gratuitous_arp(ifindex: u32, ip: Ipv4Addr) -> io::Result<()> {
    let (sock, mac) = packet_socket(ifindex)?;
    broadcast(&sock, ifindex, &garp_frame(mac, ip))
}

fn broadcast(sock: &Socket, ifindex: u32, frame: &[u8]) -> io::Result<()> {
    let mut to = sockaddr_ll(ifindex, libc::ETH_P_ARP as u16)?;
    to.sll_halen = 6;
    to.sll_addr[..6].copy_from_slice(&[0xff; 6]);
    send_ll(sock.as_raw_fd(), frame, &to)
}

/// Solicits the neighbour the kernel would send `dst` through (its gateway,
/// or `dst` on a connected route) from the interface and source address it
/// would use: an ARP request (IPv4) or a Neighbor Solicitation with our
/// link-layer address (IPv6). Returns the neighbour solicited. The answer
/// goes to the kernel, which completes (or refreshes) its entry; the
/// solicitation also gives the neighbour our own address, so its entry for
/// us, failed while the link was down, is restored too.
pub fn solicit_next_hop(dst: IpAddr) -> io::Result<IpAddr> {
    let (ifindex, next_hop) = crate::rtnl::route_next_hop(dst)?;
    let src = source_for(dst)?;
    match (src, next_hop) {
        (IpAddr::V4(src), IpAddr::V4(nh)) => {
            let (sock, mac) = packet_socket(ifindex)?;
            broadcast(&sock, ifindex, &arp_request_frame(mac, src, nh))?;
        }
        (IpAddr::V6(src), IpAddr::V6(nh)) => neighbor_solicitation(ifindex, src, nh)?,
        _ => {
            return Err(io::Error::new(
                io::ErrorKind::Unsupported,
                format!("{dst} is routed through a next hop of the other family"),
            ))
        }
    }
    Ok(next_hop)
}

/// The source address the kernel picks for `dst` (a connected UDP socket's
/// local address; nothing is sent).
fn source_for(dst: IpAddr) -> io::Result<IpAddr> {
    let any: IpAddr = match dst {
        IpAddr::V4(_) => Ipv4Addr::UNSPECIFIED.into(),
        IpAddr::V6(_) => Ipv6Addr::UNSPECIFIED.into(),
    };
    let s = UdpSocket::bind(SocketAddr::new(any, 0))?;
    s.connect(SocketAddr::new(dst, 9))?;
    Ok(s.local_addr()?.ip())
}

/// RFC 4291 §2.7.1: ff02::1:ffXX:XXXX, the target's low 24 bits.
fn solicited_node(target: Ipv6Addr) -> Ipv6Addr {
    let o = target.octets();
    Ipv6Addr::from([
        0xff, 0x02, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0xff, o[13], o[14], o[15],
    ])
}

/// ICMPv6 Neighbor Solicitation for `target` with our `mac` (checksum left
/// 0 for the kernel).
fn ns_message(target: Ipv6Addr, mac: [u8; 6]) -> Vec<u8> {
    let mut m = Vec::with_capacity(32);
    m.extend_from_slice(&[ND_NEIGHBOR_SOLICIT, 0, 0, 0, 0, 0, 0, 0]);
    m.extend_from_slice(&target.octets());
    m.extend_from_slice(&[ND_OPT_SOURCE_LINKADDR, 1]);
    m.extend_from_slice(&mac);
    m
}

fn neighbor_solicitation(ifindex: u32, src: Ipv6Addr, target: Ipv6Addr) -> io::Result<()> {
    let ifname = crate::device::ifname(ifindex).ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::NotFound,
            format!("no name for interface {ifindex}"),
        )
    })?;
    let sock = nd_socket(&ifname, ifindex, src)?;
    let msg = ns_message(target, hw_addr(ifindex)?);
    let to = SocketAddrV6::new(solicited_node(target), 0, 0, ifindex);
    let n = sock.send_to(&msg, &to.into())?;
    if n != msg.len() {
        return Err(io::Error::from(io::ErrorKind::WriteZero));
    }
    Ok(())
}

/// An ICMPv6 raw socket on `ifname` from `src`, hop limit 255 (RFC 4861
/// §7.1.1 and §7.1.2: receivers drop ND messages with any other).
fn nd_socket(ifname: &str, ifindex: u32, src: Ipv6Addr) -> io::Result<Socket> {
    let sock = Socket::new(Domain::IPV6, Type::RAW, Some(Protocol::ICMPV6))?;
    crate::device::bind_to_device(sock.as_fd(), ifname)?;
    sock.set_multicast_if_v6(ifindex)?;
    sock.set_multicast_hops_v6(255)?;
    sock.set_unicast_hops_v6(255)?;
    sock.set_multicast_loop_v6(false)?;
    let scope = if is_unicast_link_local(&src) {
        ifindex
    } else {
        0
    };
    sock.bind(&SocketAddrV6::new(src, 0, 0, scope).into())?;
    Ok(sock)
}

fn send_ll(fd: libc::c_int, frame: &[u8], to: &libc::sockaddr_ll) -> io::Result<()> {
    // SAFETY: `fd` is a live socket owned by the caller; `frame` is a valid
    // slice and `to` a valid `sockaddr_ll`, both only read by the kernel.
    let n = unsafe {
        libc::sendto(
            fd,
            frame.as_ptr().cast(),
            frame.len(),
            0,
            (to as *const libc::sockaddr_ll).cast(),
            ll_len(),
        )
    };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    if n as usize != frame.len() {
        return Err(io::Error::from(io::ErrorKind::WriteZero));
    }
    Ok(())
}

/// ICMPv6 Neighbor Advertisement for `target` at `mac` (checksum left 0 for
/// the kernel).
fn na_message(target: Ipv6Addr, mac: [u8; 6], router: bool) -> Vec<u8> {
    let flags = ND_NA_FLAG_OVERRIDE | if router { ND_NA_FLAG_ROUTER } else { 0 };
    let mut m = Vec::with_capacity(32);
    m.extend_from_slice(&[ND_NEIGHBOR_ADVERT, 0, 0, 0, flags, 0, 0, 0]);
    m.extend_from_slice(&target.octets());
    m.extend_from_slice(&[ND_OPT_TARGET_LINKADDR, 1]);
    m.extend_from_slice(&mac);
    m
}

fn is_unicast_link_local(a: &Ipv6Addr) -> bool {
    a.segments()[0] & 0xffc0 == 0xfe80
}

/// The interface's `net.ipv6.conf.<ifname>.forwarding` in the calling
/// thread's network namespace (`/proc/sys/net` follows the reader's).
fn ipv6_forwarding(ifname: &str) -> bool {
    std::fs::read_to_string(format!("/proc/sys/net/ipv6/conf/{ifname}/forwarding"))
        .map(|s| s.trim() != "0")
        .unwrap_or(false)
}

fn unsolicited_na(ifname: &str, ifindex: u32, addr: Ipv6Addr) -> io::Result<()> {
    let mac = hw_addr(ifindex)?;
    let sock = nd_socket(ifname, ifindex, addr)?;
    let msg = na_message(addr, mac, ipv6_forwarding(ifname));
    let all_nodes = SocketAddrV6::new(Ipv6Addr::new(0xff02, 0, 0, 0, 0, 0, 0, 1), 0, 0, ifindex);
    let n = sock.send_to(&msg, &all_nodes.into())?;
    if n != msg.len() {
        return Err(io::Error::from(io::ErrorKind::WriteZero));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn garp_layout() {
        let mac = [2, 0, 0, 0, 0, 1];
        let f = garp_frame(mac, Ipv4Addr::new(192, 0, 2, 1));
        assert_eq!(f.len(), 42);
        assert_eq!(&f[0..6], &[0xff; 6]);
        assert_eq!(&f[6..12], &mac);
        assert_eq!(&f[12..14], &[0x08, 0x06]);
        assert_eq!(&f[14..22], &[0, 1, 0x08, 0, 6, 4, 0, 1]);
        assert_eq!(&f[22..28], &mac);
        assert_eq!(&f[28..32], &[192, 0, 2, 1]);
        assert_eq!(&f[32..38], &[0; 6]);
        assert_eq!(&f[38..42], &[192, 0, 2, 1]);
    }

    #[test]
    fn na_layout() {
        let mac = [2, 0, 0, 0, 0, 1];
        let t: Ipv6Addr = "2001:db8::1".parse().unwrap();
        let m = na_message(t, mac, false);
        assert_eq!(m.len(), 32);
        assert_eq!(&m[0..8], &[136, 0, 0, 0, 0x20, 0, 0, 0]);
        assert_eq!(&m[8..24], &t.octets());
        assert_eq!(&m[24..32], &[2, 1, 2, 0, 0, 0, 0, 1]);
        assert_eq!(na_message(t, mac, true)[4], 0xa0);
    }

    #[test]
    fn arp_request_layout() {
        let mac = [2, 0, 0, 0, 0, 1];
        let f = arp_request_frame(
            mac,
            Ipv4Addr::new(192, 0, 2, 1),
            Ipv4Addr::new(192, 0, 2, 9),
        );
        assert_eq!(f.len(), 42);
        assert_eq!(&f[20..22], &[0, 1], "request");
        assert_eq!(&f[22..28], &mac);
        assert_eq!(&f[28..32], &[192, 0, 2, 1], "sender");
        assert_eq!(&f[32..38], &[0; 6]);
        assert_eq!(&f[38..42], &[192, 0, 2, 9], "target");
    }

    #[test]
    fn ns_layout() {
        let mac = [2, 0, 0, 0, 0, 1];
        let t: Ipv6Addr = "2001:db8::12:3456".parse().unwrap();
        let m = ns_message(t, mac);
        assert_eq!(m.len(), 32);
        assert_eq!(&m[0..8], &[135, 0, 0, 0, 0, 0, 0, 0]);
        assert_eq!(&m[8..24], &t.octets());
        assert_eq!(&m[24..32], &[1, 1, 2, 0, 0, 0, 0, 1]);
        assert_eq!(
            solicited_node(t),
            "ff02::1:ff12:3456".parse::<Ipv6Addr>().unwrap()
        );
    }

    #[test]
    fn link_local() {
        assert!(is_unicast_link_local(&"fe80::1".parse().unwrap()));
        assert!(!is_unicast_link_local(&"fd00::1".parse().unwrap()));
    }

    #[test]
    fn local_addresses() {
        assert!(address_is_local("127.0.0.1".parse().unwrap()));
        assert!(!address_is_local("0.0.0.0".parse().unwrap()));
        assert!(!address_is_local("192.0.2.254".parse().unwrap()));
    }
}
