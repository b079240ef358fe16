//! MRT export (RFC 6396): TABLE_DUMP_V2 table dumps and BGP4MP message
//! logs, as read by `bgpdump`, bgpkit-parser and `gobgp mrt inject`.
//!
//! RFCs: 6396 (MRT: §2 common header, §3 extended timestamp, §4.3
//! TABLE_DUMP_V2 with PEER_INDEX_TABLE and RIB_IPV4/IPV6_UNICAST, §4.4
//! BGP4MP and BGP4MP_ET with BGP4MP_MESSAGE, BGP4MP_MESSAGE_AS4 and
//! BGP4MP_STATE_CHANGE_AS4),
//! 6793 (4-octet AS paths in every record), 4760 (the abbreviated
//! MP_REACH_NLRI of §4.3.4: next hop only).
//!
//! The encoders append to a caller's buffer and never fail: the caller
//! writes the buffer out. Attributes are encoded by [`encode_attrs`] with
//! 4-octet ASes, as RFC 6396 §4.3.4 asks.
//!
//! # Known issues
//! - Only unicast IPv4 and IPv6 (no RIB_GENERIC, no ADD-PATH subtypes of
//!   RFC 8050).
//! - A record is limited to 4 GiB by its length field; a prefix with more
//!   than 65535 entries is cut at 65535 (its entry count is 16 bits).

use std::net::{IpAddr, Ipv4Addr};

use crate::encode::encode_attrs;
use crate::nlri::encode_prefix;
use crate::{CodecCtx, PathAttrs, Prefix};

/// MRT types (RFC 6396 §4).
pub const TABLE_DUMP_V2: u16 = 13;
pub const BGP4MP: u16 = 16;
pub const BGP4MP_ET: u16 = 17;

/// TABLE_DUMP_V2 subtypes (§4.3).
pub const PEER_INDEX_TABLE: u16 = 1;
pub const RIB_IPV4_UNICAST: u16 = 2;
pub const RIB_IPV6_UNICAST: u16 = 4;

/// BGP4MP subtypes (§4.4).
pub const BGP4MP_MESSAGE: u16 = 1;
pub const BGP4MP_MESSAGE_AS4: u16 = 4;
pub const BGP4MP_STATE_CHANGE_AS4: u16 = 5;

/// AS_TRANS (RFC 6793), for a 4-octet AS in a 2-octet field.
const AS_TRANS: u16 = 23456;

/// BGP FSM states as numbered in BGP4MP_STATE_CHANGE (§4.4.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u16)]
pub enum MrtState {
    Idle = 1,
    Connect = 2,
    Active = 3,
    OpenSent = 4,
    OpenConfirm = 5,
    Established = 6,
}

/// One entry of a PEER_INDEX_TABLE.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MrtPeer {
    pub bgp_id: Ipv4Addr,
    pub address: IpAddr,
    pub asn: u32,
}

/// One route of a RIB record: the peer's index in the PEER_INDEX_TABLE,
/// when it was learned (seconds since the epoch) and its attributes.
#[derive(Debug, Clone, Copy)]
pub struct MrtRibEntry<'a> {
    pub peer_index: u16,
    pub originated: u32,
    pub attrs: &'a PathAttrs,
}

/// Appends a common header whose length [`finish`] fills in once the
/// record's body follows it; returns where the record starts.
fn begin(out: &mut Vec<u8>, secs: u32, kind: u16, subtype: u16) -> usize {
    let at = out.len();
    out.extend_from_slice(&secs.to_be_bytes());
    out.extend_from_slice(&kind.to_be_bytes());
    out.extend_from_slice(&subtype.to_be_bytes());
    out.extend_from_slice(&0u32.to_be_bytes());
    at
}

/// Sets the length of the record begun at `at` to what follows its header.
fn finish(out: &mut [u8], at: usize) {
    let len = (out.len() - at - 12) as u32;
    out[at + 8..at + 12].copy_from_slice(&len.to_be_bytes());
}

/// Begins a BGP4MP_ET record (§3: the common header's seconds, then
/// microseconds, counted in the length).
fn begin_et(out: &mut Vec<u8>, secs: u32, micros: u32, subtype: u16) -> usize {
    let at = begin(out, secs, BGP4MP_ET, subtype);
    out.extend_from_slice(&micros.to_be_bytes());
    at
}

/// A PEER_INDEX_TABLE record (§4.3.1). Peers are written with 4-octet
/// ASes; an IPv6 address sets the peer type's I bit. At most 65535 peers
/// are written.
pub fn peer_index_table(
    secs: u32,
    collector_id: Ipv4Addr,
    view: &str,
    peers: &[MrtPeer],
    out: &mut Vec<u8>,
) {
    let view = &view.as_bytes()[..view.len().min(u16::MAX as usize)];
    let peers = &peers[..peers.len().min(u16::MAX as usize)];
    let at = begin(out, secs, TABLE_DUMP_V2, PEER_INDEX_TABLE);
    let b = &mut *out;
    b.extend_from_slice(&collector_id.octets());
    b.extend_from_slice(&(view.len() as u16).to_be_bytes());
    b.extend_from_slice(view);
    b.extend_from_slice(&(peers.len() as u16).to_be_bytes());
    for p in peers {
        let v6 = p.address.is_ipv6();
        b.push(0b10 | u8::from(v6));
        b.extend_from_slice(&p.bgp_id.octets());
        match p.address {
            IpAddr::V4(a) => b.extend_from_slice(&a.octets()),
            IpAddr::V6(a) => b.extend_from_slice(&a.octets()),
        }
        b.extend_from_slice(&p.asn.to_be_bytes());
    }
    finish(out, at);
}

/// The abbreviated MP_REACH_NLRI of an IPv6 RIB entry (§4.3.4): next hop
/// length and next hop only.
fn abbreviated_mp_reach(attrs: &PathAttrs, out: &mut Vec<u8>) {
    let Some(nh) = attrs.mp_next_hop else {
        return;
    };
    let global = match nh.global {
        IpAddr::V6(a) => a,
        IpAddr::V4(a) => a.to_ipv6_mapped(),
    };
    let len: u8 = if nh.link_local.is_some() { 32 } else { 16 };
    out.extend_from_slice(&[0x80, 14, len + 1, len]);
    out.extend_from_slice(&global.octets());
    if let Some(ll) = nh.link_local {
        out.extend_from_slice(&ll.octets());
    }
}

/// A RIB_IPV4_UNICAST or RIB_IPV6_UNICAST record (§4.3.2) for `prefix`.
pub fn rib_record(
    secs: u32,
    sequence: u32,
    prefix: &Prefix,
    entries: &[MrtRibEntry<'_>],
    out: &mut Vec<u8>,
) {
    let ctx = CodecCtx {
        four_octet_as: true,
        ibgp: false,
    };
    let entries = &entries[..entries.len().min(u16::MAX as usize)];
    let v6 = matches!(prefix, Prefix::V6(_));
    let subtype = if v6 {
        RIB_IPV6_UNICAST
    } else {
        RIB_IPV4_UNICAST
    };
    let at = begin(out, secs, TABLE_DUMP_V2, subtype);
    let b = &mut *out;
    b.extend_from_slice(&sequence.to_be_bytes());
    encode_prefix(prefix, b);
    b.extend_from_slice(&(entries.len() as u16).to_be_bytes());
    for e in entries {
        b.extend_from_slice(&e.peer_index.to_be_bytes());
        b.extend_from_slice(&e.originated.to_be_bytes());
        let mut attrs = encode_attrs(e.attrs, &ctx);
        if v6 {
            abbreviated_mp_reach(e.attrs, &mut attrs);
        }
        let len = attrs.len().min(u16::MAX as usize);
        b.extend_from_slice(&(len as u16).to_be_bytes());
        b.extend_from_slice(&attrs[..len]);
    }
    finish(out, at);
}

/// The two ends of a session, as a BGP4MP record names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MrtSession {
    pub peer_as: u32,
    pub local_as: u32,
    pub peer: IpAddr,
    pub local: IpAddr,
    /// The session negotiated 4-octet ASes (RFC 6793): its messages'
    /// AS_PATHs are in that form. Without it, messages are written as
    /// BGP4MP_MESSAGE, whose readers take AS_PATHs as 2-octet.
    pub four_octet_as: bool,
}

impl MrtSession {
    /// The AS numbers, interface index (0) and addresses (§4.4.2). An
    /// IPv4 peer with an IPv6 local address is written as IPv4-mapped
    /// IPv6 on both ends (one address family per record).
    fn header(&self, b: &mut Vec<u8>, four_octet: bool) {
        if four_octet {
            b.extend_from_slice(&self.peer_as.to_be_bytes());
            b.extend_from_slice(&self.local_as.to_be_bytes());
        } else {
            let two = |a: u32| u16::try_from(a).unwrap_or(AS_TRANS).to_be_bytes();
            b.extend_from_slice(&two(self.peer_as));
            b.extend_from_slice(&two(self.local_as));
        }
        b.extend_from_slice(&0u16.to_be_bytes());
        match (self.peer, self.local) {
            (IpAddr::V4(p), IpAddr::V4(l)) => {
                b.extend_from_slice(&1u16.to_be_bytes());
                b.extend_from_slice(&p.octets());
                b.extend_from_slice(&l.octets());
            }
            (p, l) => {
                let six = |a: IpAddr| match a {
                    IpAddr::V4(a) => a.to_ipv6_mapped(),
                    IpAddr::V6(a) => a,
                };
                b.extend_from_slice(&2u16.to_be_bytes());
                b.extend_from_slice(&six(p).octets());
                b.extend_from_slice(&six(l).octets());
            }
        }
    }
}

/// A BGP4MP_ET record holding one whole BGP message, written from its type
/// and its body (without the 19-octet header, which is written here) as it
/// was received or sent: BGP4MP_MESSAGE_AS4
/// (§4.4.3) for a session with 4-octet ASes, BGP4MP_MESSAGE (§4.4.2,
/// ASes above 65535 written as AS_TRANS) for one without, so that readers
/// take the message's AS_PATH in the form it has.
pub fn bgp4mp_message(
    secs: u32,
    micros: u32,
    session: &MrtSession,
    msg_type: u8,
    body: &[u8],
    out: &mut Vec<u8>,
) {
    let subtype = if session.four_octet_as {
        BGP4MP_MESSAGE_AS4
    } else {
        BGP4MP_MESSAGE
    };
    out.reserve(16 + 44 + 19 + body.len());
    let at = begin_et(out, secs, micros, subtype);
    session.header(out, session.four_octet_as);
    out.extend_from_slice(&[0xff; 16]);
    out.extend_from_slice(&((19 + body.len()) as u16).to_be_bytes());
    out.push(msg_type);
    out.extend_from_slice(body);
    finish(out, at);
}

/// A BGP4MP_ET / BGP4MP_STATE_CHANGE_AS4 record (§4.4.4).
pub fn bgp4mp_state_change(
    secs: u32,
    micros: u32,
    session: &MrtSession,
    old: MrtState,
    new: MrtState,
    out: &mut Vec<u8>,
) {
    let at = begin_et(out, secs, micros, BGP4MP_STATE_CHANGE_AS4);
    session.header(out, true);
    out.extend_from_slice(&(old as u16).to_be_bytes());
    out.extend_from_slice(&(new as u16).to_be_bytes());
    finish(out, at);
}

#[cfg(test)]
mod tests;
