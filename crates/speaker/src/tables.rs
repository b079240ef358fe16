//! Replicated tables as BGP messages.
//!
//! The store keeps a session's Adj-RIB-In and Adj-RIB-Out as logs of whole
//! BGP messages: the UPDATEs received, and every message written. A
//! snapshot re-encodes a table with the same packer the speaker sends with,
//! so a backup rebuilds both tables with the decoder it already trusts.
//!
//! On takeover the backup compares what the peer holds from us (the
//! replayed Adj-RIB-Out log) with what its own decision process now wants
//! to advertise, and sends only the difference: no route the peer holds is
//! withdrawn or re-announced unless it really changed.

use holdfast_wire::{
    decode_update, encode_attrs, frame, msg_type, pack_announce, pack_withdraw, Afi, CodecCtx,
    PathAttrs, Prefix, HEADER_LEN,
};
use std::collections::HashMap;
use std::sync::Arc;

/// Appends one message (header and body) to `out`.
pub fn append_message(out: &mut Vec<u8>, ty: u8, body: &[u8]) {
    out.extend_from_slice(&[0xff; 16]);
    out.extend_from_slice(&((HEADER_LEN + body.len()) as u16).to_be_bytes());
    out.push(ty);
    out.extend_from_slice(body);
}

/// Every whole message in `buf`: (type, body). Stops at the first bad or
/// partial one.
pub fn messages(buf: &[u8]) -> impl Iterator<Item = (u8, &[u8])> {
    let mut rest = buf;
    std::iter::from_fn(move || match frame(rest) {
        Ok(Some((ty, len))) => {
            let body = &rest[HEADER_LEN..len];
            rest = &rest[len..];
            Some((ty, body))
        }
        _ => None,
    })
}

/// Encodes routes as UPDATE messages, one attribute block per distinct
/// attribute set.
pub fn encode_table(routes: &[(Prefix, Arc<PathAttrs>)], ctx: &CodecCtx) -> Vec<u8> {
    let mut groups: Vec<(Arc<PathAttrs>, Vec<Prefix>, Vec<Prefix>)> = Vec::new();
    let mut index: HashMap<*const PathAttrs, usize> = HashMap::new();
    let mut by_value: HashMap<&PathAttrs, usize> = HashMap::new();
    for (p, a) in routes {
        let gi = match index.get(&Arc::as_ptr(a)) {
            Some(&i) => i,
            None => {
                let i = match by_value.get(a.as_ref()) {
                    Some(&i) => i,
                    None => {
                        groups.push((a.clone(), Vec::new(), Vec::new()));
                        by_value.insert(a.as_ref(), groups.len() - 1);
                        groups.len() - 1
                    }
                };
                index.insert(Arc::as_ptr(a), i);
                i
            }
        };
        match p {
            Prefix::V4(_) => groups[gi].1.push(*p),
            Prefix::V6(_) => groups[gi].2.push(*p),
        }
    }
    let mut out = Vec::new();
    for (a, v4, v6) in &groups {
        let mut plain = PathAttrs::clone(a);
        let nh = plain.mp_next_hop.take();
        if !v4.is_empty() {
            let block = encode_attrs(&plain, ctx);
            pack_announce(&block, Afi::Ipv4, None, v4, &mut out);
        }
        if !v6.is_empty() {
            plain.next_hop = None;
            let block = encode_attrs(&plain, ctx);
            pack_announce(&block, Afi::Ipv6, nh.as_ref(), v6, &mut out);
        }
    }
    out
}

/// Replays logged messages into a table: what the peer holds from us (or
/// what we hold from it). Non-UPDATE messages are skipped.
pub fn replay(chunks: &[bytes::Bytes], ctx: &CodecCtx) -> HashMap<Prefix, PathAttrs> {
    let mut t = HashMap::new();
    for chunk in chunks {
        for (ty, body) in messages(chunk) {
            if ty != msg_type::UPDATE {
                continue;
            }
            let Ok(o) = decode_update(body, ctx) else {
                continue;
            };
            for p in &o.update.withdrawn {
                t.remove(p);
            }
            if let Some(a) = &o.update.attrs {
                for p in &o.update.announced {
                    t.insert(*p, a.clone());
                }
            }
        }
    }
    t
}

/// The messages that bring a peer from `held` to `wanted`: announcements of
/// routes that are new or changed, withdrawals of routes no longer wanted.
/// Returns the encoded messages and (announced, withdrawn) counts.
pub fn diff(
    held: &HashMap<Prefix, PathAttrs>,
    wanted: &[(Prefix, Arc<PathAttrs>)],
    ctx: &CodecCtx,
) -> (Vec<u8>, usize, usize) {
    let mut announce: Vec<(Prefix, Arc<PathAttrs>)> = Vec::new();
    let mut keep: std::collections::HashSet<Prefix> = std::collections::HashSet::new();
    for (p, a) in wanted {
        keep.insert(*p);
        if held.get(p) != Some(a.as_ref()) {
            announce.push((*p, a.clone()));
        }
    }
    let withdraw: Vec<Prefix> = held.keys().filter(|p| !keep.contains(p)).copied().collect();
    let mut out = encode_table(&announce, ctx);
    if !withdraw.is_empty() {
        pack_withdraw(&withdraw, &mut out);
    }
    (out, announce.len(), withdraw.len())
}

#[cfg(test)]
mod tests {
    use super::*;
    use holdfast_wire::{AsPath, AsSegment, MpNextHop, Origin};
    use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

    fn v4(a: &str, attrs: &Arc<PathAttrs>) -> (Prefix, Arc<PathAttrs>) {
        (a.parse().expect("prefix"), attrs.clone())
    }

    fn attrs(med: u32, v6: bool) -> Arc<PathAttrs> {
        let mut a = PathAttrs {
            origin: Some(Origin::Igp),
            as_path: Some(AsPath(vec![AsSegment::Sequence(vec![65001, 65002])])),
            med: Some(med),
            ..Default::default()
        };
        if v6 {
            a.mp_next_hop = Some(MpNextHop {
                global: IpAddr::V6(Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 1)),
                link_local: None,
            });
        } else {
            a.next_hop = Some(Ipv4Addr::new(192, 0, 2, 1));
        }
        Arc::new(a)
    }

    #[test]
    fn snapshot_round_trips_and_diff_is_minimal() {
        let ctx = CodecCtx {
            four_octet_as: true,
            ibgp: false,
        };
        let a = attrs(10, false);
        let b = attrs(20, false);
        let c = attrs(30, true);
        let table = vec![
            v4("10.0.0.0/24", &a),
            v4("10.0.1.0/24", &a),
            v4("10.0.2.0/24", &b),
            v4("2001:db8::/48", &c),
        ];
        let enc = encode_table(&table, &ctx);
        let back = replay(&[bytes::Bytes::from(enc)], &ctx);
        assert_eq!(back.len(), 4);
        for (p, x) in &table {
            assert_eq!(back.get(p), Some(x.as_ref()), "{p}");
        }
        // Same table: nothing to send.
        let (msgs, ann, wd) = diff(&back, &table, &ctx);
        assert_eq!((msgs.len(), ann, wd), (0, 0, 0));
        // One changed, one gone, one new.
        let wanted = vec![
            v4("10.0.0.0/24", &a),
            v4("10.0.1.0/24", &b),
            v4("2001:db8::/48", &c),
            v4("10.9.0.0/16", &a),
        ];
        let (msgs, ann, wd) = diff(&back, &wanted, &ctx);
        assert_eq!((ann, wd), (2, 1));
        let mut after = back.clone();
        for (p, x) in replay(&[bytes::Bytes::from(msgs.clone())], &ctx) {
            after.insert(p, x);
        }
        for (ty, body) in messages(&msgs) {
            assert_eq!(ty, msg_type::UPDATE);
            let o = decode_update(body, &ctx).expect("decodes");
            for p in o.update.withdrawn {
                after.remove(&p);
            }
        }
        assert_eq!(after.len(), wanted.len());
        for (p, x) in &wanted {
            assert_eq!(after.get(p), Some(x.as_ref()), "{p}");
        }
    }
}
