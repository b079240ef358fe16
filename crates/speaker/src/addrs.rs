//! Local addresses for next hops: given the local end of a session, find the
//! interface it sits on and that interface's addresses of both families, so
//! that an IPv4-transport session can still carry IPv6 routes with a usable
//! next hop (and the reverse), and IPv6 next hops include the link-local
//! address (RFC 2545 §3).

use std::cell::OnceCell;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// (IPv4, global IPv6, link-local IPv6) next-hop addresses.
pub type LocalAddrs = (Option<Ipv4Addr>, Option<Ipv6Addr>, Option<Ipv6Addr>);

/// The host's interface addresses, read at most once (one netlink dump,
/// on first use): a takeover resolves a thousand sessions' local
/// addresses from one reading instead of one each.
#[derive(Default)]
pub struct Interfaces(OnceCell<Vec<(String, IpAddr)>>);

impl Interfaces {
    /// Nothing read yet; the first [`Interfaces::local_addresses`] reads.
    pub fn new() -> Self {
        Self::default()
    }

    /// Fixed addresses (interface name, address).
    #[cfg(test)]
    pub fn from_list(list: Vec<(String, IpAddr)>) -> Self {
        Self(OnceCell::from(list))
    }

    fn list(&self) -> &[(String, IpAddr)] {
        self.0.get_or_init(|| {
            let Ok(addrs) = nix::ifaddrs::getifaddrs() else {
                return Vec::new();
            };
            addrs
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
                .collect()
        })
    }

    /// (IPv4, global IPv6, link-local IPv6) on the interface holding
    /// `local`; `local` alone when no interface holds it.
    pub fn local_addresses(&self, local: IpAddr) -> LocalAddrs {
        let addrs = self.list();
        let Some(ifname) = addrs.iter().find(|(_, ip)| *ip == local).map(|(n, _)| n) else {
            return from_ip(local);
        };
        let (mut v4, mut v6, mut ll) = from_ip(local);
        for (name, ip) in addrs {
            if name != ifname {
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
}

fn from_ip(local: IpAddr) -> LocalAddrs {
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
        let (v4, _, _) = Interfaces::new().local_addresses(IpAddr::V4(Ipv4Addr::LOCALHOST));
        assert_eq!(v4, Some(Ipv4Addr::LOCALHOST));
    }

    #[test]
    fn one_reading_serves_every_session_on_an_interface() {
        let ifs = Interfaces::from_list(vec![
            ("lo".into(), "127.0.0.1".parse().unwrap()),
            ("eth0".into(), "192.0.2.1".parse().unwrap()),
            ("eth0".into(), "fe80::1".parse().unwrap()),
            ("eth0".into(), "2001:db8::1".parse().unwrap()),
        ]);
        let want = (
            Some("192.0.2.1".parse().unwrap()),
            Some("2001:db8::1".parse().unwrap()),
            Some("fe80::1".parse().unwrap()),
        );
        assert_eq!(ifs.local_addresses("192.0.2.1".parse().unwrap()), want);
        assert_eq!(ifs.local_addresses("2001:db8::1".parse().unwrap()), want);
        // Not here (a service address that moves at the takeover): itself.
        assert_eq!(
            ifs.local_addresses("198.51.100.7".parse().unwrap()),
            (Some("198.51.100.7".parse().unwrap()), None, None)
        );
    }

    #[test]
    fn link_local_is_recognised() {
        assert!(is_link_local(&"fe80::1".parse().unwrap()));
        assert!(!is_link_local(&"2001:db8::1".parse().unwrap()));
    }
}
