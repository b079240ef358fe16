//! BMP export (the BGP Monitoring Protocol): the messages a monitored
//! router sends to a collector such as pmacct's `pmbmpd`.
//!
//! RFCs: 7854 (BMP v3: §4.1 common header, §4.2 per-peer header, §4.3
//! Initiation, §4.5 Termination, §4.6 Route Monitoring, §4.8 Statistics
//! Report, §4.9 Peer Down, §4.10 Peer Up), 9069 (the Loc-RIB instance
//! peer type 3 and its F flag), 8671 (the O flag: Adj-RIB-Out).
//!
//! The encoders append one whole message to a caller's buffer and never
//! fail. BGP messages inside BMP (OPENs, UPDATEs, NOTIFICATIONs) are passed
//! as bodies (without their 19-octet header) and written whole, with a
//! header, exactly as the session saw them.
//!
//! # Known issues
//! - No Route Mirroring (§4.7) and no information TLVs beyond sysName,
//!   sysDescr and a free string.

use std::net::{IpAddr, Ipv4Addr};

use crate::HEADER_LEN;

/// BMP version (RFC 7854 §4.1).
pub const VERSION: u8 = 3;

/// Message types (§4.1).
pub const ROUTE_MONITORING: u8 = 0;
pub const STATISTICS_REPORT: u8 = 1;
pub const PEER_DOWN: u8 = 2;
pub const PEER_UP: u8 = 3;
pub const INITIATION: u8 = 4;
pub const TERMINATION: u8 = 5;

/// Per-peer header flags (§4.2, RFC 8671 §3, RFC 9069 §4.2).
pub const FLAG_V: u8 = 0x80;
pub const FLAG_L: u8 = 0x40;
pub const FLAG_A: u8 = 0x20;
pub const FLAG_O: u8 = 0x10;
/// Loc-RIB instance peer: the table is filtered (RFC 9069 §4.2).
pub const FLAG_F: u8 = 0x80;

/// Peer types (§4.2, RFC 9069 §4.1).
pub const PEER_GLOBAL: u8 = 0;
pub const PEER_LOC_RIB: u8 = 3;

/// Initiation information TLVs (§4.4).
pub const INFO_STRING: u16 = 0;
pub const INFO_SYS_DESCR: u16 = 1;
pub const INFO_SYS_NAME: u16 = 2;
/// Peer Up Information TLV: VRF/Table Name (RFC 9069 §5.3, type 3).
pub const INFO_TABLE_NAME: u16 = 3;

/// Termination reasons (§4.5).
pub const TERM_ADMIN_CLOSE: u16 = 0;

/// Peer Down reasons (§4.9).
pub const DOWN_LOCAL_NOTIFICATION: u8 = 1;
pub const DOWN_LOCAL_NO_NOTIFICATION: u8 = 2;
pub const DOWN_REMOTE_NOTIFICATION: u8 = 3;
pub const DOWN_REMOTE_NO_NOTIFICATION: u8 = 4;
pub const DOWN_DECONFIGURED: u8 = 5;

/// Statistics types (§4.8) this speaker fills.
pub const STAT_REJECTED: u16 = 0;
pub const STAT_DUPLICATE_PREFIX: u16 = 1;
pub const STAT_ADJ_RIB_IN: u16 = 7;
pub const STAT_LOC_RIB: u16 = 8;
/// Routes in the Adj-RIBs-Out post-policy (RFC 8671 §4).
pub const STAT_ADJ_RIB_OUT_POST: u16 = 15;

/// The monitored peer as the per-peer header (§4.2) names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BmpPeer {
    pub peer_type: u8,
    /// V, L, A, O (or F for a Loc-RIB peer).
    pub flags: u8,
    /// Route distinguisher (0 for global peers; Loc-RIB: the VRF's, or 0).
    pub distinguisher: u64,
    pub address: IpAddr,
    pub asn: u32,
    pub bgp_id: Ipv4Addr,
    /// Seconds and microseconds of the event.
    pub secs: u32,
    pub micros: u32,
}

impl BmpPeer {
    /// The same peer with other flags.
    pub fn with_flags(mut self, flags: u8) -> Self {
        self.flags = flags;
        self
    }
}

/// Starts a message: common header with a length patched by [`finish`].
fn start(msg_type: u8, out: &mut Vec<u8>) -> usize {
    let at = out.len();
    out.push(VERSION);
    out.extend_from_slice(&[0; 4]);
    out.push(msg_type);
    at
}

fn finish(at: usize, out: &mut [u8]) {
    let len = (out.len() - at) as u32;
    out[at + 1..at + 5].copy_from_slice(&len.to_be_bytes());
}

fn per_peer(p: &BmpPeer, out: &mut Vec<u8>) {
    out.push(p.peer_type);
    if p.peer_type == PEER_LOC_RIB {
        out.push(p.flags);
    } else if p.address.is_ipv6() {
        out.push(p.flags | FLAG_V);
    } else {
        out.push(p.flags & !FLAG_V);
    }
    out.extend_from_slice(&p.distinguisher.to_be_bytes());
    address16(p.address, out);
    out.extend_from_slice(&p.asn.to_be_bytes());
    out.extend_from_slice(&p.bgp_id.octets());
    out.extend_from_slice(&p.secs.to_be_bytes());
    out.extend_from_slice(&p.micros.to_be_bytes());
}

/// A 16-octet address field: IPv4 in the last four octets.
fn address16(a: IpAddr, out: &mut Vec<u8>) {
    match a {
        IpAddr::V4(v4) => {
            out.extend_from_slice(&[0; 12]);
            out.extend_from_slice(&v4.octets());
        }
        IpAddr::V6(v6) => out.extend_from_slice(&v6.octets()),
    }
}

/// A whole BGP message (header and `body`).
fn bgp_message(msg_type: u8, body: &[u8], out: &mut Vec<u8>) {
    out.extend_from_slice(&[0xff; 16]);
    out.extend_from_slice(&((HEADER_LEN + body.len()) as u16).to_be_bytes());
    out.push(msg_type);
    out.extend_from_slice(body);
}

fn tlv(ty: u16, value: &[u8], out: &mut Vec<u8>) {
    out.extend_from_slice(&ty.to_be_bytes());
    out.extend_from_slice(&(value.len().min(u16::MAX as usize) as u16).to_be_bytes());
    out.extend_from_slice(&value[..value.len().min(u16::MAX as usize)]);
}

/// Initiation (§4.3) with sysName and sysDescr.
pub fn initiation(sys_name: &str, sys_descr: &str, out: &mut Vec<u8>) {
    let at = start(INITIATION, out);
    tlv(INFO_SYS_DESCR, sys_descr.as_bytes(), out);
    tlv(INFO_SYS_NAME, sys_name.as_bytes(), out);
    finish(at, out);
}

/// Termination (§4.5): a reason and a free string.
pub fn termination(reason: u16, text: &str, out: &mut Vec<u8>) {
    let at = start(TERMINATION, out);
    tlv(INFO_STRING, text.as_bytes(), out);
    tlv(1, &reason.to_be_bytes(), out);
    finish(at, out);
}

/// Peer Up (§4.10): the local end of the session and both OPENs as sent
/// (`sent_open`) and received (`received_open`), bodies only.
pub fn peer_up(
    p: &BmpPeer,
    local: IpAddr,
    local_port: u16,
    remote_port: u16,
    sent_open: &[u8],
    received_open: &[u8],
    out: &mut Vec<u8>,
) {
    let at = start(PEER_UP, out);
    per_peer(p, out);
    address16(local, out);
    out.extend_from_slice(&local_port.to_be_bytes());
    out.extend_from_slice(&remote_port.to_be_bytes());
    bgp_message(crate::msg_type::OPEN, sent_open, out);
    bgp_message(crate::msg_type::OPEN, received_open, out);
    finish(at, out);
}

/// Peer Up of a Loc-RIB instance peer (RFC 9069 §5.3): no local address
/// or ports, the fabricated `open` (a body) as both the sent and the
/// received OPEN, and the VRF/Table Name TLV (at most 255 octets).
pub fn loc_rib_peer_up(p: &BmpPeer, table_name: &str, open: &[u8], out: &mut Vec<u8>) {
    let at = start(PEER_UP, out);
    per_peer(p, out);
    address16(IpAddr::V4(Ipv4Addr::UNSPECIFIED), out);
    out.extend_from_slice(&[0; 4]);
    bgp_message(crate::msg_type::OPEN, open, out);
    bgp_message(crate::msg_type::OPEN, open, out);
    let mut name = table_name.as_bytes();
    while name.len() > 255 {
        // Cut at a character boundary.
        let mut end = 255;
        while !table_name.is_char_boundary(end) {
            end -= 1;
        }
        name = &name[..end];
    }
    tlv(INFO_TABLE_NAME, name, out);
    finish(at, out);
}

/// Peer Down (§4.9). `notification` (a body) goes with reasons 1 and 3;
/// reason 2 carries a 2-octet FSM event code (0: none).
pub fn peer_down(p: &BmpPeer, reason: u8, notification: Option<&[u8]>, out: &mut Vec<u8>) {
    let at = start(PEER_DOWN, out);
    per_peer(p, out);
    out.push(reason);
    match (reason, notification) {
        (DOWN_LOCAL_NOTIFICATION | DOWN_REMOTE_NOTIFICATION, Some(n)) => {
            bgp_message(crate::msg_type::NOTIFICATION, n, out)
        }
        (DOWN_LOCAL_NO_NOTIFICATION, _) => out.extend_from_slice(&0u16.to_be_bytes()),
        _ => {}
    }
    finish(at, out);
}

/// Route Monitoring (§4.6): one UPDATE (`body`, without its header).
pub fn route_monitoring(p: &BmpPeer, update: &[u8], out: &mut Vec<u8>) {
    let at = start(ROUTE_MONITORING, out);
    per_peer(p, out);
    bgp_message(crate::msg_type::UPDATE, update, out);
    finish(at, out);
}

/// Route Monitoring for each whole UPDATE in `messages` (framed BGP
/// messages, as the table encoders write them); other types are skipped.
pub fn route_monitoring_all(p: &BmpPeer, mut messages: &[u8], out: &mut Vec<u8>) {
    while let Ok(Some((ty, len))) = crate::frame(messages) {
        if ty == crate::msg_type::UPDATE {
            route_monitoring(p, &messages[HEADER_LEN..len], out);
        }
        messages = &messages[len..];
    }
}

/// A Statistics Report (§4.8): `(type, 64-bit gauge)` pairs for types 7
/// and 8 and `(type, 32-bit counter)` for the others (§4.8 sizes).
pub fn statistics(p: &BmpPeer, stats: &[(u16, u64)], out: &mut Vec<u8>) {
    let at = start(STATISTICS_REPORT, out);
    per_peer(p, out);
    out.extend_from_slice(&(stats.len() as u32).to_be_bytes());
    for &(ty, v) in stats {
        if matches!(ty, 7..=8 | 9..=10 | 14..=17) {
            tlv(ty, &v.to_be_bytes(), out);
        } else {
            tlv(ty, &(v.min(u64::from(u32::MAX)) as u32).to_be_bytes(), out);
        }
    }
    finish(at, out);
}

#[cfg(test)]
mod tests {
    use super::*;
    use bgpkit_parser::parser::bmp::messages::{BmpMessageBody, BmpMsgType, PeerDownReason};
    use bytes::Bytes;

    fn peer() -> BmpPeer {
        BmpPeer {
            peer_type: PEER_GLOBAL,
            flags: 0,
            distinguisher: 0,
            address: "192.0.2.2".parse().unwrap(),
            asn: 65001,
            bgp_id: Ipv4Addr::new(192, 0, 2, 2),
            secs: 1_700_000_000,
            micros: 5,
        }
    }

    fn parse(buf: &[u8]) -> bgpkit_parser::parser::bmp::messages::BmpMessage {
        let mut b = Bytes::copy_from_slice(buf);
        let m = bgpkit_parser::parser::bmp::parse_bmp_msg(&mut b).expect("parses");
        assert!(b.is_empty(), "the length covers the whole message");
        m
    }

    /// An OPEN body: version 4, AS 65001, hold 90, the ID, 4-octet AS cap.
    fn open_body() -> Vec<u8> {
        let mut o = vec![4, 0xfd, 0xe9, 0, 90, 192, 0, 2, 2];
        let caps = [2u8, 6, 65, 4, 0, 0, 0xfd, 0xe9];
        o.push(caps.len() as u8);
        o.extend_from_slice(&caps);
        o
    }

    #[test]
    fn initiation_and_termination_parse() {
        let mut buf = Vec::new();
        initiation("edge1", "holdfastd 0.1", &mut buf);
        let m = parse(&buf);
        assert_eq!(m.common_header.msg_type, BmpMsgType::InitiationMessage);
        let BmpMessageBody::InitiationMessage(i) = m.message_body else {
            panic!("not an initiation")
        };
        let infos: Vec<String> = i.tlvs.iter().map(|t| t.info.clone()).collect();
        assert_eq!(
            infos,
            vec!["holdfastd 0.1".to_string(), "edge1".to_string()]
        );
        buf.clear();
        termination(TERM_ADMIN_CLOSE, "shutdown", &mut buf);
        let m = parse(&buf);
        assert_eq!(m.common_header.msg_type, BmpMsgType::TerminationMessage);
    }

    #[test]
    fn peer_up_carries_both_opens() {
        let mut buf = Vec::new();
        peer_up(
            &peer(),
            "192.0.2.1".parse().unwrap(),
            179,
            40000,
            &open_body(),
            &open_body(),
            &mut buf,
        );
        let m = parse(&buf);
        let h = m.per_peer_header.expect("per-peer header");
        assert_eq!(h.peer_ip.to_string(), "192.0.2.2");
        assert_eq!(u32::from(h.peer_asn), 65001);
        let BmpMessageBody::PeerUpNotification(u) = m.message_body else {
            panic!("not a peer up")
        };
        assert_eq!(u.local_addr.to_string(), "192.0.2.1");
        assert_eq!((u.local_port, u.remote_port), (179, 40000));
    }

    #[test]
    fn route_monitoring_carries_the_update() {
        // 10.1.0.0/16 with ORIGIN IGP, AS_PATH 65001 (4-octet), NEXT_HOP.
        let attrs = [
            0x40, 1, 1, 0, // ORIGIN
            0x40, 2, 6, 2, 1, 0, 0, 0xfd, 0xe9, // AS_PATH
            0x40, 3, 4, 192, 0, 2, 2, // NEXT_HOP
        ];
        let mut body = vec![0, 0];
        body.extend_from_slice(&(attrs.len() as u16).to_be_bytes());
        body.extend_from_slice(&attrs);
        body.extend_from_slice(&[16, 10, 1]);
        let mut framed = Vec::new();
        bgp_message(crate::msg_type::UPDATE, &body, &mut framed);
        bgp_message(crate::msg_type::KEEPALIVE, &[], &mut framed);
        bgp_message(crate::msg_type::UPDATE, &body, &mut framed);
        let mut buf = Vec::new();
        route_monitoring_all(&peer().with_flags(FLAG_L), &framed, &mut buf);
        let first_len = u32::from_be_bytes(buf[1..5].try_into().unwrap()) as usize;
        assert_eq!(
            buf.len(),
            2 * first_len,
            "two messages, the KEEPALIVE skipped"
        );
        let m = parse(&buf[..first_len]);
        let h = m.per_peer_header.expect("per-peer header");
        let bgpkit_parser::parser::bmp::messages::PerPeerFlags::PeerFlags(f) = h.peer_flags else {
            panic!("global peer flags")
        };
        assert!(f.is_post_policy());
        let BmpMessageBody::RouteMonitoring(r) = m.message_body else {
            panic!("not route monitoring")
        };
        let bgpkit_parser::models::BgpMessage::Update(u) = r.bgp_message else {
            panic!("not an update")
        };
        assert_eq!(u.announced_prefixes[0].prefix.to_string(), "10.1.0.0/16");
    }

    #[test]
    fn peer_down_and_statistics_parse() {
        let mut buf = Vec::new();
        peer_down(&peer(), DOWN_REMOTE_NOTIFICATION, Some(&[6, 4]), &mut buf);
        let m = parse(&buf);
        let BmpMessageBody::PeerDownNotification(d) = m.message_body else {
            panic!("not a peer down")
        };
        assert_eq!(
            d.reason,
            PeerDownReason::RemoteSystemClosedNotificationPduFollows
        );
        buf.clear();
        statistics(
            &peer(),
            &[
                (STAT_REJECTED, 3),
                (STAT_ADJ_RIB_IN, 100),
                (STAT_LOC_RIB, 90),
            ],
            &mut buf,
        );
        let m = parse(&buf);
        let BmpMessageBody::StatsReport(s) = m.message_body else {
            panic!("not a statistics report")
        };
        assert_eq!(s.stats_count, 3);
    }

    #[test]
    fn a_loc_rib_peer_keeps_its_type() {
        let mut p = peer();
        p.peer_type = PEER_LOC_RIB;
        p.flags = FLAG_F;
        p.address = IpAddr::V4(Ipv4Addr::UNSPECIFIED);
        let mut buf = Vec::new();
        peer_down(&p, DOWN_DECONFIGURED, None, &mut buf);
        assert_eq!(buf[6], PEER_LOC_RIB);
        assert_eq!(buf[7], FLAG_F, "a Loc-RIB peer's F flag is not V");
    }

    #[test]
    fn a_loc_rib_peer_up_has_its_table_name() {
        let mut p = peer();
        p.peer_type = PEER_LOC_RIB;
        p.address = IpAddr::V4(Ipv4Addr::UNSPECIFIED);
        let mut buf = Vec::new();
        loc_rib_peer_up(&p, "default", &open_body(), &mut buf);
        let len = u32::from_be_bytes(buf[1..5].try_into().unwrap()) as usize;
        assert_eq!(len, buf.len());
        assert_eq!(buf[6], PEER_LOC_RIB);
        // The Information TLV ends the message: type 3, length 7.
        assert_eq!(&buf[len - 11..len - 7], &[0, 3, 0, 7]);
        assert_eq!(&buf[len - 7..], b"default");
        // Both OPENs follow 42 + 20 octets of headers and local fields.
        let open = &buf[6 + 42 + 20..];
        assert_eq!(open[18], crate::msg_type::OPEN);
    }
}
