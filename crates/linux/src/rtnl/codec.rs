//! rtnetlink route messages (`RTM_NEWROUTE`, `RTM_DELROUTE`,
//! `RTM_GETROUTE`) encoded by hand for the kernel FIB's batched writes,
//! and the parsing of the kernel's answers, dumps and notifications.
//! Pure: no socket. The encoding is checked against
//! `netlink-packet-route`'s parser in the tests.
//!
//! Layout (`linux/netlink.h`, `linux/rtnetlink.h`): a 16-byte `nlmsghdr`
//! (native endian), a 12-byte `rtmsg`, then attributes (`rtattr`: length,
//! type, payload padded to 4 bytes). Multipath next hops are `rtnexthop`s
//! (8 bytes each, followed by their own attributes) inside `RTA_MULTIPATH`.
//! Next-hop objects (`RTM_NEWNEXTHOP`, `RTM_DELNEXTHOP`, `RTM_GETNEXTHOP`;
//! `linux/nexthop.h`): an 8-byte `nhmsg`, then `NHA_*` attributes; a route
//! names one with `RTA_NH_ID`. Interface addresses (`RTM_NEWADDR`,
//! `RTM_DELADDR`; `linux/if_addr.h`): an 8-byte `ifaddrmsg`, then `IFA_*`
//! attributes.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

pub const NLMSG_NOOP: u16 = 1;
pub const NLMSG_ERROR: u16 = 2;
pub const NLMSG_DONE: u16 = 3;
pub const RTM_NEWLINK: u16 = 16;
pub const RTM_DELLINK: u16 = 17;
pub const RTM_NEWADDR: u16 = 20;
pub const RTM_DELADDR: u16 = 21;
pub const RTM_NEWROUTE: u16 = 24;
pub const RTM_DELROUTE: u16 = 25;
pub const RTM_GETROUTE: u16 = 26;
pub const RTM_NEWNEXTHOP: u16 = 104;
pub const RTM_DELNEXTHOP: u16 = 105;
pub const RTM_GETNEXTHOP: u16 = 106;

pub const NLM_F_REQUEST: u16 = 1;
pub const NLM_F_MULTI: u16 = 2;
pub const NLM_F_ACK: u16 = 4;
pub const NLM_F_DUMP: u16 = 0x300;
pub const NLM_F_REPLACE: u16 = 0x100;
pub const NLM_F_EXCL: u16 = 0x200;
pub const NLM_F_CREATE: u16 = 0x400;

const RTA_DST: u16 = 1;
const RTA_NH_ID: u16 = 30;
const NHA_ID: u16 = 1;
const NHA_GROUP: u16 = 2;
const NHA_BLACKHOLE: u16 = 4;
const NHA_OIF: u16 = 5;
const NHA_GATEWAY: u16 = 6;
const RTA_OIF: u16 = 4;
const RTA_GATEWAY: u16 = 5;
const RTA_PRIORITY: u16 = 6;
const RTA_MULTIPATH: u16 = 9;
const RTA_TABLE: u16 = 15;

pub const RTN_UNICAST: u8 = 1;
pub const RT_SCOPE_UNIVERSE: u8 = 0;
pub const RT_SCOPE_LINK: u8 = 253;
/// `rtm_table` for tables above 255 (the id is in `RTA_TABLE`).
const RT_TABLE_COMPAT: u8 = 252;
/// The kernel marks a next hop whose link is down.
pub const RTNH_F_DEAD: u8 = 1;
pub const RTNH_F_LINKDOWN: u8 = 16;

pub const AF_INET: u8 = 2;
pub const AF_INET6: u8 = 10;

/// One netlink message of a received buffer.
#[derive(Debug, Clone, Copy)]
pub struct Msg<'a> {
    pub ty: u16,
    pub flags: u16,
    pub seq: u32,
    pub payload: &'a [u8],
}

/// The netlink messages in `buf`, in order; stops at a malformed header.
pub fn messages(buf: &[u8]) -> impl Iterator<Item = Msg<'_>> {
    let mut off = 0usize;
    std::iter::from_fn(move || {
        let h = buf.get(off..off + 16)?;
        let len = u32::from_ne_bytes(h[0..4].try_into().ok()?) as usize;
        if len < 16 || off + len > buf.len() {
            return None;
        }
        let m = Msg {
            ty: u16::from_ne_bytes([h[4], h[5]]),
            flags: u16::from_ne_bytes([h[6], h[7]]),
            seq: u32::from_ne_bytes(h[8..12].try_into().ok()?),
            payload: &buf[off + 16..off + len],
        };
        off += (len + 3) & !3;
        Some(m)
    })
}

/// The error code of an `NLMSG_ERROR` payload: 0 is an acknowledgement,
/// otherwise a positive errno.
pub fn error_code(payload: &[u8]) -> Option<i32> {
    let e = i32::from_ne_bytes(payload.get(0..4)?.try_into().ok()?);
    Some(-e)
}

/// A route as the kernel reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KernelRoute {
    pub dst: IpAddr,
    pub dst_len: u8,
    pub table: u32,
    pub protocol: u8,
    pub scope: u8,
    /// `rtm_type` (`RTN_UNICAST` = 1, blackhole, unreachable, local...).
    pub kind: u8,
    pub priority: u32,
    pub nexthops: Vec<NextHop>,
    /// The next-hop object the route uses (`RTA_NH_ID`), if any. The
    /// kernel also reports its next hops in `nexthops` unless
    /// `net.ipv4.nexthop_compat_mode` is 0.
    pub nh_id: Option<u32>,
}

/// A next-hop object as the kernel reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KernelNexthop {
    pub id: u32,
    pub family: u8,
    pub protocol: u8,
    pub gateway: Option<IpAddr>,
    pub oif: u32,
    /// A group or a blackhole (not a plain gateway).
    pub special: bool,
}

/// One next hop of a kernel route.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct NextHop {
    /// None: the destination is on the link (a connected route).
    pub gateway: Option<IpAddr>,
    pub oif: u32,
    /// `RTNH_F_*`.
    pub flags: u8,
}

impl NextHop {
    /// Usable for forwarding: not dead, link not down.
    pub fn usable(&self) -> bool {
        self.flags & (RTNH_F_DEAD | RTNH_F_LINKDOWN) == 0
    }
}

fn attrs(mut b: &[u8]) -> impl Iterator<Item = (u16, &[u8])> {
    std::iter::from_fn(move || {
        if b.len() < 4 {
            return None;
        }
        let len = u16::from_ne_bytes([b[0], b[1]]) as usize;
        let ty = u16::from_ne_bytes([b[2], b[3]]) & 0x3fff;
        if len < 4 || len > b.len() {
            return None;
        }
        let v = &b[4..len];
        b = &b[((len + 3) & !3).min(b.len())..];
        Some((ty, v))
    })
}

fn addr(family: u8, v: &[u8]) -> Option<IpAddr> {
    match (family, v.len()) {
        (AF_INET, 4) => Some(IpAddr::V4(Ipv4Addr::from(<[u8; 4]>::try_from(v).ok()?))),
        (AF_INET6, 16) => Some(IpAddr::V6(Ipv6Addr::from(<[u8; 16]>::try_from(v).ok()?))),
        _ => None,
    }
}

fn u32_of(v: &[u8]) -> Option<u32> {
    Some(u32::from_ne_bytes(v.get(0..4)?.try_into().ok()?))
}

/// Parses an `RTM_NEWROUTE` / `RTM_DELROUTE` payload (IPv4 and IPv6 only).
pub fn parse_route(p: &[u8]) -> Option<KernelRoute> {
    let h = p.get(0..12)?;
    let family = h[0];
    if family != AF_INET && family != AF_INET6 {
        return None;
    }
    let mut r = KernelRoute {
        dst: match family {
            AF_INET => IpAddr::V4(Ipv4Addr::UNSPECIFIED),
            _ => IpAddr::V6(Ipv6Addr::UNSPECIFIED),
        },
        dst_len: h[1],
        table: h[4] as u32,
        protocol: h[5],
        scope: h[6],
        kind: h[7],
        priority: 0,
        nexthops: Vec::new(),
        nh_id: None,
    };
    let mut single = NextHop {
        gateway: None,
        oif: 0,
        flags: (u32::from_ne_bytes(h[8..12].try_into().ok()?) & 0xff) as u8,
    };
    let mut has_single = false;
    for (ty, v) in attrs(&p[12..]) {
        match ty {
            RTA_DST => r.dst = addr(family, v)?,
            RTA_TABLE => r.table = u32_of(v)?,
            RTA_PRIORITY => r.priority = u32_of(v)?,
            RTA_NH_ID => r.nh_id = Some(u32_of(v)?),
            RTA_OIF => {
                single.oif = u32_of(v)?;
                has_single = true;
            }
            RTA_GATEWAY => {
                single.gateway = addr(family, v);
                has_single = true;
            }
            RTA_MULTIPATH => {
                let mut m = v;
                while m.len() >= 8 {
                    let len = u16::from_ne_bytes([m[0], m[1]]) as usize;
                    if len < 8 || len > m.len() {
                        break;
                    }
                    let mut nh = NextHop {
                        gateway: None,
                        oif: u32::from_ne_bytes(m[4..8].try_into().ok()?),
                        flags: m[2],
                    };
                    for (t, a) in attrs(&m[8..len]) {
                        if t == RTA_GATEWAY {
                            nh.gateway = addr(family, a);
                        }
                    }
                    r.nexthops.push(nh);
                    m = &m[((len + 3) & !3).min(m.len())..];
                }
            }
            _ => {}
        }
    }
    if has_single && r.nexthops.is_empty() {
        r.nexthops.push(single);
    }
    Some(r)
}

/// Identity of one of our routes in the kernel: (table, destination,
/// priority), with our protocol number.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RouteKey {
    pub dst: IpAddr,
    pub dst_len: u8,
    pub table: u32,
    pub protocol: u8,
    pub priority: u32,
}

/// What a route message asks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RouteOp {
    /// Create; fails with EEXIST if a route with the same key exists
    /// (whoever's it is).
    Add,
    /// Replace our route with the same key (or create it).
    Replace,
    Delete,
}

const IFA_ADDRESS: u16 = 1;
const IFA_LOCAL: u16 = 2;
const IFA_FLAGS: u16 = 8;
/// No duplicate address detection (IPv6): usable at once.
pub const IFA_F_NODAD: u32 = 0x02;

/// Appends an acknowledged interface address request: `add` creates or
/// replaces `addr/prefix_len` on interface `ifindex` (`RTM_NEWADDR` with
/// `NLM_F_CREATE | NLM_F_REPLACE`, as `ip address replace`), otherwise it
/// is deleted (`RTM_DELADDR`). `IFA_LOCAL` and `IFA_ADDRESS` are both
/// `addr`, as `ip` sends them; `flags` are `IFA_F_*` (e.g.
/// [`IFA_F_NODAD`]).
pub fn encode_address(
    buf: &mut Vec<u8>,
    seq: u32,
    add: bool,
    ifindex: u32,
    addr: IpAddr,
    prefix_len: u8,
    flags: u32,
) {
    let (ty, nl_flags) = if add {
        (
            RTM_NEWADDR,
            NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE | NLM_F_REPLACE,
        )
    } else {
        (RTM_DELADDR, NLM_F_REQUEST | NLM_F_ACK)
    };
    let start = header(buf, ty, nl_flags, seq);
    let family = if addr.is_ipv4() { AF_INET } else { AF_INET6 };
    // ifaddrmsg: family, prefix length, flags (the low 8 bits), scope.
    buf.extend_from_slice(&[family, prefix_len, (flags & 0xff) as u8, RT_SCOPE_UNIVERSE]);
    buf.extend_from_slice(&ifindex.to_ne_bytes());
    let mut a = [0u8; 16];
    let n = ip_bytes(&addr, &mut a);
    attr(buf, IFA_LOCAL, &a[..n]);
    attr(buf, IFA_ADDRESS, &a[..n]);
    if add && flags != 0 {
        attr(buf, IFA_FLAGS, &flags.to_ne_bytes());
    }
    finish(buf, start);
}

/// Appends a route lookup for one destination (`RTM_GETROUTE` with
/// `RTA_DST`, as `ip route get ADDR`): the kernel answers with the route
/// it would use, as one `RTM_NEWROUTE` (its output interface in
/// `RTA_OIF`).
pub fn encode_route_get(buf: &mut Vec<u8>, seq: u32, dst: IpAddr) {
    let start = header(buf, RTM_GETROUTE, NLM_F_REQUEST, seq);
    let (family, len) = if dst.is_ipv4() {
        (AF_INET, 32)
    } else {
        (AF_INET6, 128)
    };
    // rtmsg: family, dst_len, src_len, tos, table, protocol, scope, type;
    // flags.
    buf.extend_from_slice(&[family, len, 0, 0, 0, 0, 0, 0]);
    buf.extend_from_slice(&0u32.to_ne_bytes());
    let mut a = [0u8; 16];
    let n = ip_bytes(&dst, &mut a);
    attr(buf, RTA_DST, &a[..n]);
    finish(buf, start);
}

fn header(buf: &mut Vec<u8>, ty: u16, flags: u16, seq: u32) -> usize {
    let start = buf.len();
    buf.extend_from_slice(&0u32.to_ne_bytes());
    buf.extend_from_slice(&ty.to_ne_bytes());
    buf.extend_from_slice(&flags.to_ne_bytes());
    buf.extend_from_slice(&seq.to_ne_bytes());
    buf.extend_from_slice(&0u32.to_ne_bytes());
    start
}

fn finish(buf: &mut [u8], start: usize) {
    let len = (buf.len() - start) as u32;
    buf[start..start + 4].copy_from_slice(&len.to_ne_bytes());
}

fn attr(buf: &mut Vec<u8>, ty: u16, v: &[u8]) {
    buf.extend_from_slice(&((4 + v.len()) as u16).to_ne_bytes());
    buf.extend_from_slice(&ty.to_ne_bytes());
    buf.extend_from_slice(v);
    buf.resize((buf.len() + 3) & !3, 0);
}

fn ip_bytes(a: &IpAddr, out: &mut [u8; 16]) -> usize {
    match a {
        IpAddr::V4(a) => {
            out[..4].copy_from_slice(&a.octets());
            4
        }
        IpAddr::V6(a) => {
            out.copy_from_slice(&a.octets());
            16
        }
    }
}

/// Appends one route request to `buf`. `nexthops` are (gateway, output
/// interface) pairs of the route's family, one (plain attributes) or
/// several (`RTA_MULTIPATH`); ignored for a delete, which matches any
/// next hops of our route with this key. `ack` asks the kernel to
/// acknowledge success too (errors are always reported).
pub fn encode_route(
    buf: &mut Vec<u8>,
    seq: u32,
    ack: bool,
    op: RouteOp,
    key: &RouteKey,
    nexthops: &[(IpAddr, u32)],
) {
    let start = route_head(buf, seq, ack, op, key);
    if op == RouteOp::Delete {
        finish(buf, start);
        return;
    }
    let mut a = [0u8; 16];
    match nexthops {
        [] => {}
        [(gw, oif)] => {
            let n = ip_bytes(gw, &mut a);
            attr(buf, RTA_GATEWAY, &a[..n]);
            attr(buf, RTA_OIF, &oif.to_ne_bytes());
        }
        many => {
            let mp = buf.len();
            buf.extend_from_slice(&0u16.to_ne_bytes());
            buf.extend_from_slice(&RTA_MULTIPATH.to_ne_bytes());
            for (gw, oif) in many {
                let n = ip_bytes(gw, &mut a);
                let len = (8 + 4 + n) as u16;
                buf.extend_from_slice(&len.to_ne_bytes());
                buf.push(0); // rtnh_flags
                buf.push(0); // rtnh_hops
                buf.extend_from_slice(&oif.to_ne_bytes());
                attr(buf, RTA_GATEWAY, &a[..n]);
            }
            let len = (buf.len() - mp) as u16;
            buf[mp..mp + 2].copy_from_slice(&len.to_ne_bytes());
        }
    }
    finish(buf, start);
}

/// The header, `rtmsg` and key attributes of a route request; returns
/// where the message starts.
fn route_head(buf: &mut Vec<u8>, seq: u32, ack: bool, op: RouteOp, key: &RouteKey) -> usize {
    let (ty, mut flags) = match op {
        RouteOp::Add => (RTM_NEWROUTE, NLM_F_REQUEST | NLM_F_CREATE | NLM_F_EXCL),
        RouteOp::Replace => (RTM_NEWROUTE, NLM_F_REQUEST | NLM_F_CREATE | NLM_F_REPLACE),
        RouteOp::Delete => (RTM_DELROUTE, NLM_F_REQUEST),
    };
    if ack {
        flags |= NLM_F_ACK;
    }
    let start = header(buf, ty, flags, seq);
    let family = match key.dst {
        IpAddr::V4(_) => AF_INET,
        IpAddr::V6(_) => AF_INET6,
    };
    buf.extend_from_slice(&[
        family,
        key.dst_len,
        0,
        0,
        u8::try_from(key.table).unwrap_or(RT_TABLE_COMPAT),
        key.protocol,
        RT_SCOPE_UNIVERSE,
        RTN_UNICAST,
    ]);
    buf.extend_from_slice(&0u32.to_ne_bytes());
    let mut a = [0u8; 16];
    attr(buf, RTA_TABLE, &key.table.to_ne_bytes());
    let n = ip_bytes(&key.dst, &mut a);
    attr(buf, RTA_DST, &a[..n]);
    attr(buf, RTA_PRIORITY, &key.priority.to_ne_bytes());
    start
}

/// Appends a route request naming next-hop object `id` (add or replace;
/// a delete needs no next hop: use [`encode_route`]).
pub fn encode_route_nh(buf: &mut Vec<u8>, seq: u32, op: RouteOp, key: &RouteKey, id: u32) {
    let start = route_head(buf, seq, false, op, key);
    if op != RouteOp::Delete {
        attr(buf, RTA_NH_ID, &id.to_ne_bytes());
    }
    finish(buf, start);
}

/// Appends a request creating next-hop object `id` (`NLM_F_EXCL`: fails
/// with EEXIST if the id is taken): a gateway on an interface, owned by
/// `protocol`.
pub fn encode_nexthop_add(
    buf: &mut Vec<u8>,
    seq: u32,
    id: u32,
    protocol: u8,
    gateway: &IpAddr,
    oif: u32,
) {
    let start = header(
        buf,
        RTM_NEWNEXTHOP,
        NLM_F_REQUEST | NLM_F_CREATE | NLM_F_EXCL,
        seq,
    );
    let family = match gateway {
        IpAddr::V4(_) => AF_INET,
        IpAddr::V6(_) => AF_INET6,
    };
    buf.extend_from_slice(&[family, 0, protocol, 0]);
    buf.extend_from_slice(&0u32.to_ne_bytes());
    attr(buf, NHA_ID, &id.to_ne_bytes());
    attr(buf, NHA_OIF, &oif.to_ne_bytes());
    let mut a = [0u8; 16];
    let n = ip_bytes(gateway, &mut a);
    attr(buf, NHA_GATEWAY, &a[..n]);
    finish(buf, start);
}

/// Appends a request deleting next-hop object `id` (the kernel deletes
/// the routes that use it too).
pub fn encode_nexthop_delete(buf: &mut Vec<u8>, seq: u32, id: u32) {
    let start = header(buf, RTM_DELNEXTHOP, NLM_F_REQUEST, seq);
    buf.extend_from_slice(&[0u8; 8]);
    attr(buf, NHA_ID, &id.to_ne_bytes());
    finish(buf, start);
}

/// Appends a dump request for every next-hop object.
pub fn encode_nexthop_dump(buf: &mut Vec<u8>, seq: u32) {
    let start = header(buf, RTM_GETNEXTHOP, NLM_F_REQUEST | NLM_F_DUMP, seq);
    buf.extend_from_slice(&[0u8; 8]);
    finish(buf, start);
}

/// Parses an `RTM_NEWNEXTHOP` payload.
pub fn parse_nexthop(p: &[u8]) -> Option<KernelNexthop> {
    let h = p.get(0..8)?;
    let family = h[0];
    let mut n = KernelNexthop {
        id: 0,
        family,
        protocol: h[2],
        gateway: None,
        oif: 0,
        special: false,
    };
    for (ty, v) in attrs(&p[8..]) {
        match ty {
            NHA_ID => n.id = u32_of(v)?,
            NHA_OIF => n.oif = u32_of(v)?,
            NHA_GATEWAY => n.gateway = addr(family, v),
            NHA_GROUP | NHA_BLACKHOLE => n.special = true,
            _ => {}
        }
    }
    (n.id != 0).then_some(n)
}

pub fn encode_dump(buf: &mut Vec<u8>, seq: u32, family: u8) {
    let start = header(buf, RTM_GETROUTE, NLM_F_REQUEST | NLM_F_DUMP, seq);
    buf.extend_from_slice(&[family, 0, 0, 0, 0, 0, 0, 0]);
    buf.extend_from_slice(&0u32.to_ne_bytes());
    finish(buf, start);
}

#[cfg(test)]
mod tests {
    use super::*;
    use netlink_packet_core::{NetlinkMessage, NetlinkPayload};
    use netlink_packet_route::route::{RouteAttribute, RouteMessage};
    use netlink_packet_route::RouteNetlinkMessage;

    fn parsed(buf: &[u8]) -> NetlinkMessage<RouteNetlinkMessage> {
        NetlinkMessage::<RouteNetlinkMessage>::deserialize(buf)
            .expect("netlink-packet-route parses it")
    }

    fn route_of(m: NetlinkMessage<RouteNetlinkMessage>) -> RouteMessage {
        match m.payload {
            NetlinkPayload::InnerMessage(RouteNetlinkMessage::NewRoute(r))
            | NetlinkPayload::InnerMessage(RouteNetlinkMessage::DelRoute(r)) => r,
            other => panic!("not a route message: {other:?}"),
        }
    }

    #[test]
    fn route_get_matches_netlink_packet_route() {
        for dst in ["192.0.2.10", "2001:db8::10"] {
            let ip: IpAddr = dst.parse().unwrap();
            let mut buf = Vec::new();
            encode_route_get(&mut buf, 3, ip);
            let m = parsed(&buf);
            assert_eq!(m.header.length as usize, buf.len());
            let r = match m.payload {
                NetlinkPayload::InnerMessage(RouteNetlinkMessage::GetRoute(r)) => r,
                other => panic!("not a route lookup: {other:?}"),
            };
            assert_eq!(
                r.header.destination_prefix_length,
                if ip.is_ipv4() { 32 } else { 128 }
            );
            let want = match ip {
                IpAddr::V4(a) => {
                    RouteAttribute::Destination(netlink_packet_route::route::RouteAddress::Inet(a))
                }
                IpAddr::V6(a) => {
                    RouteAttribute::Destination(netlink_packet_route::route::RouteAddress::Inet6(a))
                }
            };
            assert_eq!(r.attributes, vec![want], "{dst}");
        }
    }

    #[test]
    fn address_requests_match_netlink_packet_route() {
        use netlink_packet_route::address::{AddressAttribute, AddressFlags};
        for (add, addr, len, flags) in [
            (true, "192.0.2.10", 32u8, 0u32),
            (true, "2001:db8::10", 128, IFA_F_NODAD),
            (false, "192.0.2.10", 32, 0),
        ] {
            let ip: IpAddr = addr.parse().unwrap();
            let mut buf = Vec::new();
            encode_address(&mut buf, 7, add, 42, ip, len, flags);
            let m = parsed(&buf);
            assert_eq!(m.header.length as usize, buf.len());
            assert_eq!(m.header.sequence_number, 7);
            let want = if add { RTM_NEWADDR } else { RTM_DELADDR };
            assert_eq!(m.header.message_type, want);
            let a = match m.payload {
                NetlinkPayload::InnerMessage(RouteNetlinkMessage::NewAddress(a))
                | NetlinkPayload::InnerMessage(RouteNetlinkMessage::DelAddress(a)) => a,
                other => panic!("not an address message: {other:?}"),
            };
            assert_eq!(a.header.index, 42);
            assert_eq!(a.header.prefix_len, len);
            assert!(a.attributes.contains(&AddressAttribute::Local(ip)));
            assert!(a.attributes.contains(&AddressAttribute::Address(ip)));
            let nodad = a.attributes.iter().any(
                |x| matches!(x, AddressAttribute::Flags(f) if f.contains(AddressFlags::Nodad)),
            );
            assert_eq!(nodad, flags & IFA_F_NODAD != 0, "{addr}");
        }
    }

    fn key(dst: &str, len: u8, table: u32) -> RouteKey {
        RouteKey {
            dst: dst.parse().unwrap(),
            dst_len: len,
            table,
            protocol: 179,
            priority: 32,
        }
    }

    #[test]
    fn route_naming_a_nexthop_object_matches_netlink_packet_route() {
        let mut buf = Vec::new();
        let k = key("10.1.0.0", 16, 100);
        encode_route_nh(&mut buf, 9, RouteOp::Replace, &k, 0x7b00_0001);
        let m = parsed(&buf);
        assert_eq!(m.header.length as usize, buf.len());
        assert_eq!(m.header.flags, NLM_F_REQUEST | NLM_F_CREATE | NLM_F_REPLACE);
        let r = route_of(m);
        assert!(r.attributes.contains(&RouteAttribute::NhId(0x7b00_0001)));
        assert!(!r
            .attributes
            .iter()
            .any(|x| matches!(x, RouteAttribute::Gateway(_) | RouteAttribute::Oif(_))));
        let mine = parse_route(messages(&buf).next().unwrap().payload).unwrap();
        assert_eq!(mine.nh_id, Some(0x7b00_0001));
        assert!(mine.nexthops.is_empty());
    }

    #[test]
    fn nexthop_objects_encode_and_parse() {
        // `ip nexthop add id 5 via 192.0.2.1 dev <3> proto 179`, as iproute2
        // 6.x sends it (nhmsg: family, scope 0, protocol, reserved, flags).
        let mut buf = Vec::new();
        encode_nexthop_add(&mut buf, 4, 5, 179, &"192.0.2.1".parse().unwrap(), 3);
        let m = messages(&buf).next().unwrap();
        assert_eq!(m.ty, RTM_NEWNEXTHOP);
        assert_eq!(m.flags, NLM_F_REQUEST | NLM_F_CREATE | NLM_F_EXCL);
        assert_eq!(m.payload[..8], [AF_INET, 0, 179, 0, 0, 0, 0, 0], "nhmsg");
        let n = parse_nexthop(m.payload).unwrap();
        assert_eq!(
            n,
            KernelNexthop {
                id: 5,
                family: AF_INET,
                protocol: 179,
                gateway: Some("192.0.2.1".parse().unwrap()),
                oif: 3,
                special: false,
            }
        );
        let mut del = Vec::new();
        encode_nexthop_delete(&mut del, 5, 5);
        let m = messages(&del).next().unwrap();
        assert_eq!((m.ty, m.flags), (RTM_DELNEXTHOP, NLM_F_REQUEST));
        assert_eq!(parse_nexthop(m.payload).map(|n| n.id), Some(5));
        let mut dump = Vec::new();
        encode_nexthop_dump(&mut dump, 6);
        let m = messages(&dump).next().unwrap();
        assert_eq!(
            (m.ty, m.flags),
            (RTM_GETNEXTHOP, NLM_F_REQUEST | NLM_F_DUMP)
        );
        // No id: not a next-hop object we can use.
        assert_eq!(parse_nexthop(&[AF_INET, 0, 179, 0, 0, 0, 0, 0]), None);
    }

    #[test]
    fn single_next_hop_matches_netlink_packet_route() {
        let mut buf = Vec::new();
        let k = key("10.1.0.0", 16, 100);
        encode_route(
            &mut buf,
            7,
            false,
            RouteOp::Add,
            &k,
            &[("192.0.2.1".parse().unwrap(), 3)],
        );
        let m = parsed(&buf);
        assert_eq!(m.header.sequence_number, 7);
        assert_eq!(m.header.length as usize, buf.len());
        assert_eq!(m.header.flags, NLM_F_REQUEST | NLM_F_CREATE | NLM_F_EXCL);
        let r = route_of(m);
        assert_eq!(r.header.destination_prefix_length, 16);
        assert_eq!(u8::from(r.header.protocol), 179);
        assert_eq!(r.header.table, 100);
        let a = &r.attributes;
        assert!(a.contains(&RouteAttribute::Table(100)));
        assert!(a.contains(&RouteAttribute::Priority(32)));
        assert!(a.contains(&RouteAttribute::Oif(3)));
        assert!(a.iter().any(
            |x| matches!(x, RouteAttribute::Destination(d) if format!("{d:?}").contains("10.1.0.0"))
        ));
        assert!(a.iter().any(
            |x| matches!(x, RouteAttribute::Gateway(g) if format!("{g:?}").contains("192.0.2.1"))
        ));
        // And our own parser reads what we wrote.
        let mine = parse_route(messages(&buf).next().unwrap().payload).unwrap();
        assert_eq!(mine.dst, k.dst);
        assert_eq!((mine.table, mine.protocol, mine.priority), (100, 179, 32));
        assert_eq!(
            mine.nexthops,
            vec![NextHop {
                gateway: Some("192.0.2.1".parse().unwrap()),
                oif: 3,
                flags: 0
            }]
        );
    }

    #[test]
    fn multipath_v6_and_big_table_match_netlink_packet_route() {
        let mut buf = Vec::new();
        let k = key("2001:db8:1::", 48, 1000);
        let nhs = [
            ("fe80::1".parse().unwrap(), 2),
            ("2001:db8::2".parse().unwrap(), 5),
        ];
        encode_route(&mut buf, 9, true, RouteOp::Replace, &k, &nhs);
        let m = parsed(&buf);
        assert_eq!(
            m.header.flags,
            NLM_F_REQUEST | NLM_F_CREATE | NLM_F_REPLACE | NLM_F_ACK
        );
        let r = route_of(m);
        assert_eq!(r.header.table, RT_TABLE_COMPAT);
        assert!(r.attributes.contains(&RouteAttribute::Table(1000)));
        let mp = r
            .attributes
            .iter()
            .find_map(|a| match a {
                RouteAttribute::MultiPath(v) => Some(v.clone()),
                _ => None,
            })
            .expect("RTA_MULTIPATH");
        assert_eq!(mp.len(), 2);
        assert_eq!((mp[0].interface_index, mp[1].interface_index), (2, 5));
        assert!(format!("{:?}", mp[1].attributes).contains("2001:db8::2"));
        let mine = parse_route(messages(&buf).next().unwrap().payload).unwrap();
        assert_eq!(mine.nexthops.len(), 2);
        assert_eq!(mine.nexthops[0].gateway, Some("fe80::1".parse().unwrap()));
        assert_eq!(mine.table, 1000);
    }

    #[test]
    fn delete_and_dump_and_a_batch() {
        let mut buf = Vec::new();
        encode_route(
            &mut buf,
            1,
            false,
            RouteOp::Delete,
            &key("10.0.0.0", 8, 254),
            &[],
        );
        encode_route(
            &mut buf,
            2,
            false,
            RouteOp::Add,
            &key("10.0.0.0", 24, 254),
            &[("192.0.2.1".parse().unwrap(), 1)],
        );
        encode_dump(&mut buf, 3, AF_INET);
        let all: Vec<Msg<'_>> = messages(&buf).collect();
        assert_eq!(all.len(), 3);
        assert_eq!((all[0].ty, all[0].seq), (RTM_DELROUTE, 1));
        let mut off = 0;
        for m in &all {
            let len = 16 + m.payload.len();
            let p = parsed(&buf[off..off + len]);
            assert_eq!(p.header.sequence_number, m.seq);
            off += len;
        }
        let r = route_of(parsed(&buf[..16 + all[0].payload.len()]));
        assert_eq!(r.header.table, 254);
        assert!(r.attributes.contains(&RouteAttribute::Priority(32)));
        assert!(!r
            .attributes
            .iter()
            .any(|a| matches!(a, RouteAttribute::Gateway(_))));
        assert_eq!(all[2].ty, RTM_GETROUTE);
        assert_eq!(all[2].flags, NLM_F_REQUEST | NLM_F_DUMP);
    }

    #[test]
    fn error_payloads() {
        let mut p = (-17i32).to_ne_bytes().to_vec();
        p.extend_from_slice(&[0; 16]);
        assert_eq!(error_code(&p), Some(17));
        assert_eq!(error_code(&0i32.to_ne_bytes()), Some(0));
    }
}
