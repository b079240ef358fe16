//! Local addresses for next hops: given the local end of a session, find the
//! interface it sits on and that interface's addresses of both families, so
//! that an IPv4-transport session can still carry IPv6 routes with a usable
//! next hop (and the reverse), and IPv6 next hops include the link-local
//! address (RFC 2545 §3).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// (IPv4, global IPv6, link-local IPv6) on the interface holding `local`.
pub fn local_addresses(local: IpAddr) -> (Option<Ipv4Addr>, Option<Ipv6Addr>, Option<Ipv6Addr>) {
    let Ok(addrs) = nix::ifaddrs::getifaddrs() else {
        return from_ip(local);
    };
    let addrs: Vec<(String, IpAddr)> = addrs
        .filter_map(|a| {
            let sa = a.address?;
            let ip = if let Some(v4) = sa.as_sockaddr_in() {
                IpAddr::V4(v4.ip())
            } else if let Some(v6) = sa.as_sockaddr_in6() {
                IpAddr::V6(v6.ip())
            } else {
                return None;
            };
            Some((a.interface_name, ip))
        })
        .collect();
    let Some(ifname) = addrs
        .iter()
        .find(|(_, ip)| *ip == local)
        .map(|(n, _)| n.clone())
    else {
        return from_ip(local);
    };
    let (mut v4, mut v6, mut ll) = from_ip(local);
    for (name, ip) in &addrs {
        if *name != ifname {
            continue;
        }
        match ip {
            IpAddr::V4(a) if v4.is_none() => v4 = Some(*a),
            IpAddr::V6(a) if is_link_local(a) && ll.is_none() => ll = Some(*a),
            IpAddr::V6(a) if !is_link_local(a) && v6.is_none() => v6 = Some(*a),
            _ => {}
        }
    }
    (v4, v6, ll)
}

fn from_ip(local: IpAddr) -> (Option<Ipv4Addr>, Option<Ipv6Addr>, Option<Ipv6Addr>) {
    match local {
        IpAddr::V4(a) => (Some(a), None, None),
        IpAddr::V6(a) => match a.to_ipv4_mapped() {
            Some(v4) => (Some(v4), None, None),
            None if is_link_local(&a) => (None, None, Some(a)),
            None => (None, Some(a), None),
        },
    }
}

fn is_link_local(a: &Ipv6Addr) -> bool {
    (a.segments()[0] & 0xffc0) == 0xfe80
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_has_its_own_address() {
        let (v4, _, _) = local_addresses(IpAddr::V4(Ipv4Addr::LOCALHOST));
        assert_eq!(v4, Some(Ipv4Addr::LOCALHOST));
    }

    #[test]
    fn link_local_is_recognised() {
        assert!(is_link_local(&"fe80::1".parse().unwrap()));
        assert!(!is_link_local(&"2001:db8::1".parse().unwrap()));
    }
}
