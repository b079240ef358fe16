//! UPDATE encoding: path attributes (RFC 4271 §4.3, §5; RFC 6793 §4.2.2 for
//! 2-octet peers), message packing with NLRI / MP_REACH_NLRI /
//! MP_UNREACH_NLRI (RFC 4760) and End-of-RIB markers (RFC 4724 §2).
//!
//! Every UPDATE produced here follows RFC 7606 §5.1: MP_REACH_NLRI or
//! MP_UNREACH_NLRI, when present, is the very first path attribute, and a
//! message carries only one of: Withdrawn Routes, NLRI, MP_REACH_NLRI,
//! MP_UNREACH_NLRI. The remaining attributes are in ascending type order.

use std::net::{IpAddr, Ipv6Addr};

use crate::header::{begin_message, finish_header, HEADER_LEN, MAX_MESSAGE_LEN};
use crate::nlri::{encode_prefix, prefix_wire_len};
use crate::types::{
    attr_flags, attr_type, msg_type, Afi, AsPath, AsSegment, Family, Message, MpNextHop, PathAttrs,
    Prefix, RawAttr, AS_TRANS,
};
use crate::{encode_keepalive, encode_notification, encode_open, encode_route_refresh, CodecCtx};

use crate::attrs::seg_type;

/// Header of one attribute with a provisional 1-octet length; returns the
/// offset of the flags octet for [`end_attr`].
fn begin_attr(out: &mut Vec<u8>, flags: u8, t: u8) -> usize {
    let at = out.len();
    out.extend_from_slice(&[flags & !attr_flags::EXTENDED_LENGTH, t, 0]);
    at
}

/// Fix up the length; switches to the extended form when the value is
/// longer than 255 octets.
fn end_attr(out: &mut Vec<u8>, at: usize) {
    let len = out.len() - at - 3;
    if len > 255 {
        out[at] |= attr_flags::EXTENDED_LENGTH;
        out.insert(at + 2, 0);
        out[at + 2..at + 4].copy_from_slice(&(len as u16).to_be_bytes());
    } else {
        out[at + 2] = len as u8;
    }
}

fn put_attr(out: &mut Vec<u8>, flags: u8, t: u8, value: &[u8]) {
    let at = begin_attr(out, flags, t);
    out.extend_from_slice(value);
    end_attr(out, at);
}

// AS_PATH segment (RFC 4271 §4.3, RFC 6793 §3):
// +-----------------+-----------------+---------------------------------+
// | segment type(1) | segment len (1) | AS numbers (2 or 4 octets each) |
// +-----------------+-----------------+---------------------------------+

/// Append AS_PATH segments; long segments are split at 255 ASes, empty ones
/// dropped. 2-octet form maps ASes above 65535 to AS_TRANS.
fn put_as_path(out: &mut Vec<u8>, path: &AsPath, four: bool, skip_confed: bool) {
    for seg in &path.segments {
        let (t, v) = match seg {
            AsSegment::Set(v) => (seg_type::AS_SET, v),
            AsSegment::Sequence(v) => (seg_type::AS_SEQUENCE, v),
            AsSegment::ConfedSequence(v) => (seg_type::AS_CONFED_SEQUENCE, v),
            AsSegment::ConfedSet(v) => (seg_type::AS_CONFED_SET, v),
        };
        if skip_confed && t >= seg_type::AS_CONFED_SEQUENCE {
            continue;
        }
        for chunk in v.chunks(255) {
            out.push(t);
            out.push(chunk.len() as u8);
            for &asn in chunk {
                if four {
                    out.extend_from_slice(&asn.to_be_bytes());
                } else {
                    out.extend_from_slice(&u16::try_from(asn).unwrap_or(AS_TRANS).to_be_bytes());
                }
            }
        }
    }
}

fn needs_as4_path(path: &AsPath) -> bool {
    path.segments.iter().any(|s| match s {
        AsSegment::Set(v) | AsSegment::Sequence(v) => v.iter().any(|&a| a > u16::MAX as u32),
        _ => false,
    })
}

/// Appends unknown attributes with a type code below `upto`.
fn flush_unknown(out: &mut Vec<u8>, unknown: &[&RawAttr], next: &mut usize, upto: u16) {
    while let Some(r) = unknown.get(*next) {
        if r.type_code as u16 >= upto {
            break;
        }
        put_attr(out, r.flags, r.type_code, &r.value);
        *next += 1;
    }
}

/// Encode path attributes once for a peer (hot path).
///
/// MP_REACH_NLRI / MP_UNREACH_NLRI are never emitted (the packers add them;
/// `mp_next_hop` is ignored here). NEXT_HOP is emitted only if `next_hop` is
/// set, AS_PATH always. With `!ctx.four_octet_as` the 2-octet AS_PATH with
/// AS_TRANS plus AS4_PATH (and AS4_AGGREGATOR) are produced per RFC 6793.
/// LOCAL_PREF is emitted whenever set: stripping it for external peers is
/// the caller's policy. Attributes come out in ascending type-code order,
/// with the extended-length flag only when a value exceeds 255 octets.
pub fn encode_attrs(attrs: &PathAttrs, ctx: &CodecCtx) -> Vec<u8> {
    use attr_flags::{OPTIONAL as O, TRANSITIVE as T};
    use attr_type::*;
    let four = ctx.four_octet_as;
    let mut unknown: Vec<&RawAttr> = attrs
        .unknown
        .iter()
        .filter(|r| r.type_code != MP_REACH_NLRI && r.type_code != MP_UNREACH_NLRI)
        .collect();
    unknown.sort_by_key(|r| r.type_code);
    let mut next = 0;
    let mut out = Vec::with_capacity(
        64 + attrs.as_path.segments.iter().map(|_| 2).sum::<usize>()
            + attrs.as_path.iter_asns().count() * 8
            + attrs.communities.len() * 4
            + attrs.ext_communities.len() * 8
            + attrs.large_communities.len() * 12
            + attrs.cluster_list.len() * 4
            + attrs
                .unknown
                .iter()
                .map(|r| r.value.len() + 4)
                .sum::<usize>(),
    );
    let out = &mut out;
    let u = &unknown[..];

    flush_unknown(out, u, &mut next, ORIGIN as u16);
    if let Some(o) = attrs.origin {
        put_attr(out, T, ORIGIN, &[o as u8]);
    }
    flush_unknown(out, u, &mut next, AS_PATH as u16);
    let at = begin_attr(out, T, AS_PATH);
    put_as_path(out, &attrs.as_path, four, false);
    end_attr(out, at);
    flush_unknown(out, u, &mut next, NEXT_HOP as u16);
    if let Some(nh) = attrs.next_hop {
        put_attr(out, T, NEXT_HOP, &nh.octets());
    }
    flush_unknown(out, u, &mut next, MULTI_EXIT_DISC as u16);
    if let Some(med) = attrs.med {
        put_attr(out, O, MULTI_EXIT_DISC, &med.to_be_bytes());
    }
    flush_unknown(out, u, &mut next, LOCAL_PREF as u16);
    if let Some(lp) = attrs.local_pref {
        put_attr(out, T, LOCAL_PREF, &lp.to_be_bytes());
    }
    flush_unknown(out, u, &mut next, ATOMIC_AGGREGATE as u16);
    if attrs.atomic_aggregate {
        put_attr(out, T, ATOMIC_AGGREGATE, &[]);
    }
    flush_unknown(out, u, &mut next, AGGREGATOR as u16);
    if let Some((asn, ip)) = attrs.aggregator {
        let at = begin_attr(out, O | T, AGGREGATOR);
        if four {
            out.extend_from_slice(&asn.to_be_bytes());
        } else {
            out.extend_from_slice(&u16::try_from(asn).unwrap_or(AS_TRANS).to_be_bytes());
        }
        out.extend_from_slice(&ip.octets());
        end_attr(out, at);
    }
    flush_unknown(out, u, &mut next, COMMUNITIES as u16);
    if !attrs.communities.is_empty() {
        let at = begin_attr(out, O | T, COMMUNITIES);
        for c in &attrs.communities {
            out.extend_from_slice(&c.to_be_bytes());
        }
        end_attr(out, at);
    }
    flush_unknown(out, u, &mut next, ORIGINATOR_ID as u16);
    if let Some(id) = attrs.originator_id {
        put_attr(out, O, ORIGINATOR_ID, &id.octets());
    }
    flush_unknown(out, u, &mut next, CLUSTER_LIST as u16);
    if !attrs.cluster_list.is_empty() {
        let at = begin_attr(out, O, CLUSTER_LIST);
        for id in &attrs.cluster_list {
            out.extend_from_slice(&id.octets());
        }
        end_attr(out, at);
    }
    flush_unknown(out, u, &mut next, EXTENDED_COMMUNITIES as u16);
    if !attrs.ext_communities.is_empty() {
        let at = begin_attr(out, O | T, EXTENDED_COMMUNITIES);
        for c in &attrs.ext_communities {
            out.extend_from_slice(c);
        }
        end_attr(out, at);
    }
    flush_unknown(out, u, &mut next, AS4_PATH as u16);
    if !four && needs_as4_path(&attrs.as_path) {
        let at = begin_attr(out, O | T, AS4_PATH);
        put_as_path(out, &attrs.as_path, true, true);
        end_attr(out, at);
    }
    flush_unknown(out, u, &mut next, AS4_AGGREGATOR as u16);
    if let (false, Some((asn, ip))) = (four, attrs.aggregator) {
        if asn > u16::MAX as u32 {
            let at = begin_attr(out, O | T, AS4_AGGREGATOR);
            out.extend_from_slice(&asn.to_be_bytes());
            out.extend_from_slice(&ip.octets());
            end_attr(out, at);
        }
    }
    flush_unknown(out, u, &mut next, LARGE_COMMUNITIES as u16);
    if !attrs.large_communities.is_empty() {
        let at = begin_attr(out, O | T, LARGE_COMMUNITIES);
        for c in &attrs.large_communities {
            out.extend_from_slice(&c.global.to_be_bytes());
            out.extend_from_slice(&c.local1.to_be_bytes());
            out.extend_from_slice(&c.local2.to_be_bytes());
        }
        end_attr(out, at);
    }
    flush_unknown(out, u, &mut next, 256);
    std::mem::take(out)
}

/// Fixed part of an UPDATE: header, two length fields.
const UPDATE_FIXED: usize = HEADER_LEN + 4;
/// An MP attribute header with extended length.
const MP_ATTR_HDR: usize = 4;

/// Next hop octets for MP_REACH_NLRI (RFC 4760 §3, RFC 2545 §3).
fn nh_octets(afi: Afi, nh: &MpNextHop) -> ([u8; 32], usize) {
    let mut b = [0u8; 32];
    match (afi, nh.global) {
        (Afi::Ipv4, IpAddr::V4(a)) => {
            b[..4].copy_from_slice(&a.octets());
            (b, 4)
        }
        (_, g) => {
            let g = match g {
                IpAddr::V4(a) => a.to_ipv6_mapped(),
                IpAddr::V6(a) => a,
            };
            b[..16].copy_from_slice(&g.octets());
            match nh.link_local {
                Some(ll) => {
                    b[16..].copy_from_slice(&ll.octets());
                    (b, 32)
                }
                None => (b, 16),
            }
        }
    }
}

/// Splits the prefixes of `afi` into runs whose encoding fits `room`
/// octets; calls `emit(run, bytes)` for each run (runs may contain
/// prefixes of the other family, which writers skip). Stops early if a
/// prefix cannot fit at all. Returns the number of runs.
fn batches(
    prefixes: &[Prefix],
    afi: Afi,
    room: usize,
    mut emit: impl FnMut(&[Prefix], usize),
) -> usize {
    let mut i = 0;
    let mut n = 0;
    while i < prefixes.len() {
        let mut j = i;
        let mut bytes = 0;
        while j < prefixes.len() {
            let p = &prefixes[j];
            if p.afi() == afi {
                let l = prefix_wire_len(p);
                if bytes + l > room {
                    break;
                }
                bytes += l;
            }
            j += 1;
        }
        if bytes == 0 {
            break;
        }
        emit(&prefixes[i..j], bytes);
        n += 1;
        i = j;
    }
    n
}

fn put_prefixes(out: &mut Vec<u8>, run: &[Prefix], afi: Afi) {
    for p in run.iter().filter(|p| p.afi() == afi) {
        encode_prefix(p, out);
    }
}

fn put_mp_header(out: &mut Vec<u8>, t: u8, value_len: usize) {
    if value_len > 255 {
        out.extend_from_slice(&[attr_flags::OPTIONAL | attr_flags::EXTENDED_LENGTH, t]);
        out.extend_from_slice(&(value_len as u16).to_be_bytes());
    } else {
        out.extend_from_slice(&[attr_flags::OPTIONAL, t, value_len as u8]);
    }
}

// MP_REACH_NLRI value (RFC 4760 §3):
// +---------------------------------------------------------+
// | Address Family Identifier (2 octets)                    |
// | Subsequent Address Family Identifier (1 octet)          |
// | Length of Next Hop Network Address (1 octet)            |
// | Network Address of Next Hop (variable)                  |
// | Reserved (1 octet)                                      |
// | Network Layer Reachability Information (variable)       |
// +---------------------------------------------------------+

/// One announcing UPDATE: MP_REACH_NLRI first if `mp` is set, then the
/// attribute block, then the classic NLRI field if not.
fn write_announce(
    out: &mut Vec<u8>,
    block: &[u8],
    afi: Afi,
    mp: Option<([u8; 32], usize)>,
    run: &[Prefix],
    bytes: usize,
) {
    let s = begin_message(out, msg_type::UPDATE);
    out.extend_from_slice(&[0, 0]);
    let tal_at = out.len();
    out.extend_from_slice(&[0, 0]);
    if let Some((nh, nhl)) = mp {
        put_mp_header(out, attr_type::MP_REACH_NLRI, 5 + nhl + bytes);
        out.extend_from_slice(&afi.code().to_be_bytes());
        out.extend_from_slice(&[1, nhl as u8]);
        out.extend_from_slice(&nh[..nhl]);
        out.push(0);
        put_prefixes(out, run, afi);
    }
    out.extend_from_slice(block);
    let tal = (out.len() - tal_at - 2) as u16;
    out[tal_at..tal_at + 2].copy_from_slice(&tal.to_be_bytes());
    if mp.is_none() {
        put_prefixes(out, run, afi);
    }
    finish_header(out, s);
}

fn pack_inner(
    block: &[u8],
    afi: Afi,
    mp: Option<&MpNextHop>,
    prefixes: &[Prefix],
    out: &mut Vec<u8>,
) -> usize {
    let nh = mp.map(|nh| nh_octets(afi, nh));
    let overhead = UPDATE_FIXED + block.len() + nh.map_or(0, |(_, l)| MP_ATTR_HDR + 5 + l);
    let Some(room) = MAX_MESSAGE_LEN.checked_sub(overhead) else {
        return 0;
    };
    out.reserve(prefixes.len() * 4 + (prefixes.len() / 800 + 1) * overhead);
    batches(prefixes, afi, room, |run, bytes| {
        write_announce(out, block, afi, nh, run, bytes)
    })
}

/// Append as many complete UPDATE messages as needed (each <= 4096 bytes)
/// announcing the `prefixes` of `afi` (others are skipped) with the
/// pre-encoded attribute block from [`encode_attrs`].
///
/// IPv4 uses the classic NLRI field (the block must contain NEXT_HOP; `nh`
/// is ignored). IPv6 uses an MP_REACH_NLRI per message carrying `nh`
/// (global, plus link-local in the 32-octet form), placed first as RFC 7606
/// §5.1 requires. Returns the number of messages written: 0 for IPv6
/// without `nh`, or when the block leaves no room for a prefix.
pub fn pack_announce(
    attr_block: &[u8],
    afi: Afi,
    nh: Option<&MpNextHop>,
    prefixes: &[Prefix],
    out: &mut Vec<u8>,
) -> usize {
    match afi {
        Afi::Ipv4 => pack_inner(attr_block, afi, None, prefixes, out),
        Afi::Ipv6 => match nh {
            Some(nh) => pack_inner(attr_block, afi, Some(nh), prefixes, out),
            None => 0,
        },
    }
}

// MP_UNREACH_NLRI value (RFC 4760 §4):
// +---------------------------------------------------------+
// | Address Family Identifier (2 octets)                    |
// | Subsequent Address Family Identifier (1 octet)          |
// | Withdrawn Routes (variable)                             |
// +---------------------------------------------------------+

/// Withdrawals: IPv4 via the Withdrawn Routes field, IPv6 via
/// MP_UNREACH_NLRI; as many messages as needed. Returns the message count.
pub fn pack_withdraw(prefixes: &[Prefix], out: &mut Vec<u8>) -> usize {
    let v4 = batches(
        prefixes,
        Afi::Ipv4,
        MAX_MESSAGE_LEN - UPDATE_FIXED,
        |run, bytes| {
            let s = begin_message(out, msg_type::UPDATE);
            out.extend_from_slice(&(bytes as u16).to_be_bytes());
            put_prefixes(out, run, Afi::Ipv4);
            out.extend_from_slice(&[0, 0]);
            finish_header(out, s);
        },
    );
    let v6 = batches(
        prefixes,
        Afi::Ipv6,
        MAX_MESSAGE_LEN - UPDATE_FIXED - MP_ATTR_HDR - 3,
        |run, bytes| {
            let s = begin_message(out, msg_type::UPDATE);
            out.extend_from_slice(&[0, 0]);
            let hdr = if 3 + bytes > 255 { 4 } else { 3 };
            out.extend_from_slice(&((hdr + 3 + bytes) as u16).to_be_bytes());
            put_mp_header(out, attr_type::MP_UNREACH_NLRI, 3 + bytes);
            out.extend_from_slice(&Afi::Ipv6.code().to_be_bytes());
            out.push(1);
            put_prefixes(out, run, Afi::Ipv6);
            finish_header(out, s);
        },
    );
    v4 + v6
}

/// End-of-RIB marker (RFC 4724 §2): an empty UPDATE for IPv4 unicast, an
/// UPDATE with an empty MP_UNREACH_NLRI for other families.
pub fn encode_end_of_rib(family: Family, out: &mut Vec<u8>) {
    let s = begin_message(out, msg_type::UPDATE);
    if family == Family::IPV4_UNICAST {
        out.extend_from_slice(&[0, 0, 0, 0]);
    } else {
        out.extend_from_slice(&[
            0,
            0,
            0,
            6,
            attr_flags::OPTIONAL,
            attr_type::MP_UNREACH_NLRI,
            3,
        ]);
        out.extend_from_slice(&family.afi.code().to_be_bytes());
        out.push(family.safi.code());
    }
    finish_header(out, s);
}

/// Encode a decoded [`crate::Update`] as one or more messages (RFC 7606 §5.1
/// split: withdrawals first, then announcements per family). IPv4 prefixes
/// go in the NLRI field, or in MP_REACH_NLRI when only `mp_next_hop` is set;
/// IPv6 prefixes without `mp_next_hop` get `::` as next hop. Attributes
/// without any announcement are sent alone (with an MP_REACH_NLRI holding
/// only `mp_next_hop`, if set). An update with nothing in it becomes an empty
/// UPDATE, which is the IPv4 End-of-RIB marker. Returns the message count.
pub fn encode_update(u: &crate::Update, ctx: &CodecCtx, out: &mut Vec<u8>) -> usize {
    if let Some(f) = u.end_of_rib {
        encode_end_of_rib(f, out);
        return 1;
    }
    let mut n = pack_withdraw(&u.withdrawn, out);
    let has = |afi| u.announced.iter().any(|p| p.afi() == afi);
    let (v4, v6) = (has(Afi::Ipv4), has(Afi::Ipv6));
    let empty = PathAttrs::default();
    let (block, attrs) = match &u.attrs {
        Some(a) => (encode_attrs(a, ctx), a),
        None => (Vec::new(), &empty),
    };
    if v4 {
        let mp = if attrs.next_hop.is_none() {
            attrs.mp_next_hop.as_ref()
        } else {
            None
        };
        n += pack_inner(&block, Afi::Ipv4, mp, &u.announced, out);
    }
    if v6 {
        let unspec = MpNextHop {
            global: IpAddr::V6(Ipv6Addr::UNSPECIFIED),
            link_local: None,
        };
        n += pack_inner(
            &block,
            Afi::Ipv6,
            Some(attrs.mp_next_hop.as_ref().unwrap_or(&unspec)),
            &u.announced,
            out,
        );
    }
    if !v4 && !v6 && u.attrs.is_some() {
        let mp = attrs.mp_next_hop.map(|nh| {
            let afi = if nh.global.is_ipv4() {
                Afi::Ipv4
            } else {
                Afi::Ipv6
            };
            (afi, nh_octets(afi, &nh))
        });
        write_announce(
            out,
            &block,
            mp.map_or(Afi::Ipv4, |m| m.0),
            mp.map(|m| m.1),
            &[],
            0,
        );
        n += 1;
    }
    if n == 0 {
        encode_end_of_rib(Family::IPV4_UNICAST, out);
        n = 1;
    }
    n
}

/// Encode any message (for tests and tools); an UPDATE may become several
/// messages, see [`encode_update`].
pub fn encode_message(m: &Message, ctx: &CodecCtx, out: &mut Vec<u8>) {
    match m {
        Message::Open(o) => encode_open(o, out),
        Message::Update(u) => {
            encode_update(u, ctx, out);
        }
        Message::Notification(n) => encode_notification(n, out),
        Message::Keepalive => encode_keepalive(out),
        Message::RouteRefresh(r) => encode_route_refresh(r, out),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    #[test]
    fn attr_switches_to_extended_length() {
        let mut out = Vec::new();
        put_attr(&mut out, 0xd0, 8, &[7; 255]);
        assert_eq!(&out[..3], &[0xc0, 8, 255]);
        let mut out = Vec::new();
        put_attr(&mut out, 0xc0, 8, &[7; 256]);
        assert_eq!(&out[..4], &[0xd0, 8, 1, 0]);
        assert_eq!(out.len(), 260);
    }

    #[test]
    fn long_segments_split_and_as_trans() {
        let path = AsPath {
            segments: vec![
                AsSegment::Sequence((1..=300).collect()),
                AsSegment::Set(vec![70000]),
            ],
        };
        let mut out = Vec::new();
        put_as_path(&mut out, &path, false, false);
        assert_eq!(&out[..2], &[2, 255]);
        assert_eq!(&out[512..514], &[2, 45]);
        assert_eq!(&out[604..], &[1, 1, 0x5b, 0xa0]);
        assert!(needs_as4_path(&path));
        let confed = AsPath {
            segments: vec![AsSegment::ConfedSequence(vec![70000])],
        };
        assert!(!needs_as4_path(&confed));
        let mut out = Vec::new();
        put_as_path(&mut out, &confed, true, true);
        assert!(out.is_empty());
    }

    #[test]
    fn next_hop_forms() {
        let v4 = MpNextHop {
            global: IpAddr::V4(Ipv4Addr::new(192, 0, 2, 1)),
            link_local: None,
        };
        assert_eq!(nh_octets(Afi::Ipv4, &v4).1, 4);
        let (b, l) = nh_octets(Afi::Ipv6, &v4);
        assert_eq!((l, &b[10..16]), (16, &[0xff, 0xff, 192, 0, 2, 1][..]));
        let ll = MpNextHop {
            global: IpAddr::V6(Ipv6Addr::LOCALHOST),
            link_local: Some(Ipv6Addr::LOCALHOST),
        };
        assert_eq!(nh_octets(Afi::Ipv6, &ll).1, 32);
    }

    #[test]
    fn end_of_rib_bytes() {
        let mut out = Vec::new();
        encode_end_of_rib(Family::IPV6_UNICAST, &mut out);
        assert_eq!(&out[16..], &[0, 29, 2, 0, 0, 0, 6, 0x80, 15, 3, 0, 2, 1]);
        out.clear();
        encode_end_of_rib(Family::IPV4_UNICAST, &mut out);
        assert_eq!(&out[16..], &[0, 23, 2, 0, 0, 0, 0]);
    }

    #[test]
    fn oversized_attribute_block_writes_nothing() {
        let p = [Prefix::V4(crate::Prefix4 {
            addr: 0x0a00_0000,
            len: 8,
        })];
        let mut out = Vec::new();
        assert_eq!(pack_announce(&[0; 4072], Afi::Ipv4, None, &p, &mut out), 0);
        assert!(out.is_empty());
        assert_eq!(pack_announce(&[0; 4071], Afi::Ipv4, None, &p, &mut out), 1);
        assert_eq!(out.len(), MAX_MESSAGE_LEN);
        assert_eq!(pack_announce(&[], Afi::Ipv4, None, &[], &mut out), 0);
    }
}
