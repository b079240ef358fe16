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
//!
//! # Known issues
//! - A snapshot is one buffer holding the whole encoded table, and it is
//!   copied again by the store's packer: tens of MB at a million routes.

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

/// Whether any chunk of a stored log holds an UPDATE (not only KEEPALIVEs,
/// say).
pub fn has_update(chunks: &[bytes::Bytes]) -> bool {
    chunks
        .iter()
        .any(|c| messages(c).any(|(ty, _)| ty == holdfast_wire::msg_type::UPDATE))
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
/// attribute set. Routes sharing one `Arc` are grouped by its address alone (the engine's
/// Adj-RIB-In shares one per attribute set); equal sets in distinct `Arc`s
/// are merged by value. Groups come in the order of their first prefix.
pub fn encode_table(routes: &[(Prefix, Arc<PathAttrs>)], ctx: &CodecCtx) -> Vec<u8> {
    let mut groups: Vec<(Arc<PathAttrs>, Vec<Prefix>, Vec<Prefix>)> = Vec::new();
    let mut index: HashMap<*const PathAttrs, usize, ahash::RandomState> = HashMap::default();
    let mut by_value: HashMap<&PathAttrs, usize, ahash::RandomState> = HashMap::default();
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
        encode_split(a, v4, v6, ctx, &mut out);
    }
    out
}

/// Appends the UPDATEs announcing `prefixes` (any mix of families, IPv4
/// first) with the attribute set `attrs` to `out`: one group of
/// [`encode_table`], for a table already grouped by set
/// (`Engine::visit_adj_rib_in_groups`).
pub fn encode_group(attrs: &PathAttrs, prefixes: &[Prefix], ctx: &CodecCtx, out: &mut Vec<u8>) {
    if prefixes.iter().all(|p| matches!(p, Prefix::V4(_))) {
        encode_split(attrs, prefixes, &[], ctx, out);
        return;
    }
    let (v4, v6): (Vec<Prefix>, Vec<Prefix>) =
        prefixes.iter().partition(|p| matches!(p, Prefix::V4(_)));
    encode_split(attrs, &v4, &v6, ctx, out);
}

fn encode_split(
    attrs: &PathAttrs,
    v4: &[Prefix],
    v6: &[Prefix],
    ctx: &CodecCtx,
    out: &mut Vec<u8>,
) {
    if !v4.is_empty() {
        let mut plain = attrs.clone();
        plain.mp_next_hop = None;
        let block = encode_attrs(&plain, ctx);
        pack_announce(&block, Afi::Ipv4, None, v4, out);
    }
    if !v6.is_empty() {
        let mut plain = attrs.clone();
        let nh = plain.mp_next_hop.take();
        plain.next_hop = None;
        let block = encode_attrs(&plain, ctx);
        pack_announce(&block, Afi::Ipv6, nh.as_ref(), v6, out);
    }
}

/// Replays logged messages into a table: what the peer holds from us (or
/// what we hold from it), sorted by prefix — `held` (sorted by prefix, as
/// this returns it; empty to replay a whole log) with the messages of
/// `chunks` applied after it. Non-UPDATE messages are skipped; the routes
/// of one message share one attribute set. The new events are sorted by
/// (prefix, order) and the last per prefix kept, which is several times
/// faster than a hash map at a million routes, then merged with `held` in
/// one pass. A preheated standby keeps what a peer holds from us this way
/// as the log grows.
pub fn replay_onto(
    held: Vec<(Prefix, Arc<PathAttrs>)>,
    chunks: &[bytes::Bytes],
    ctx: &CodecCtx,
) -> Vec<(Prefix, Arc<PathAttrs>)> {
    let mut events: Vec<(Prefix, u32, Option<Arc<PathAttrs>>)> = Vec::new();
    let mut order: u32 = 0;
    for chunk in chunks {
        for (ty, body) in messages(chunk) {
            if ty != msg_type::UPDATE {
                continue;
            }
            let Ok(o) = decode_update(body, ctx) else {
                continue;
            };
            order += 1;
            events.extend(o.update.withdrawn.iter().map(|p| (*p, order, None)));
            if let Some(a) = o.update.attrs {
                let a = Arc::new(a);
                events.extend(
                    o.update
                        .announced
                        .iter()
                        .map(|p| (*p, order, Some(a.clone()))),
                );
            }
        }
    }
    if events.is_empty() {
        return held;
    }
    events.sort_unstable_by_key(|(p, o, _)| (*p, *o));
    // The last event per prefix.
    let mut last: Vec<(Prefix, Option<Arc<PathAttrs>>)> = Vec::with_capacity(events.len());
    let mut it = events.into_iter().peekable();
    while let Some((p, _, a)) = it.next() {
        if it.peek().is_some_and(|(q, _, _)| *q == p) {
            continue;
        }
        last.push((p, a));
    }
    let mut t: Vec<(Prefix, Arc<PathAttrs>)> = Vec::with_capacity(held.len() + last.len());
    let mut old = held.into_iter().peekable();
    for (p, a) in last {
        while let Some(h) = old.next_if(|(q, _)| *q < p) {
            t.push(h);
        }
        old.next_if(|(q, _)| *q == p);
        if let Some(a) = a {
            t.push((p, a));
        }
    }
    t.extend(old);
    t
}

/// Prefixes on which `held` (sorted) and the engine's Adj-RIB-Out
/// fingerprints (sorted) disagree: present on one side only, or with
/// attributes whose fingerprint differs. `fingerprint` is asked once per
/// distinct attribute set of `held`.
pub fn differing(
    held: &[(Prefix, Arc<PathAttrs>)],
    wanted: &[(Prefix, u64)],
    fingerprint: impl Fn(Afi, &PathAttrs) -> Option<u64>,
) -> Vec<Prefix> {
    let mut memo: HashMap<(*const PathAttrs, bool), Option<u64>> = HashMap::new();
    let mut fp = |p: &Prefix, a: &Arc<PathAttrs>| {
        let v6 = matches!(p, Prefix::V6(_));
        *memo
            .entry((Arc::as_ptr(a), v6))
            .or_insert_with(|| fingerprint(if v6 { Afi::Ipv6 } else { Afi::Ipv4 }, a))
    };
    let mut out = Vec::new();
    let (mut i, mut j) = (0, 0);
    while i < held.len() || j < wanted.len() {
        match (held.get(i), wanted.get(j)) {
            (Some((hp, ha)), Some((wp, wf))) if hp == wp => {
                if fp(hp, ha) != Some(*wf) {
                    out.push(*hp);
                }
                i += 1;
                j += 1;
            }
            (Some((hp, _)), Some((wp, _))) if hp < wp => {
                out.push(*hp);
                i += 1;
            }
            (Some((hp, _)), None) => {
                out.push(*hp);
                i += 1;
            }
            (_, Some((wp, _))) => {
                out.push(*wp);
                j += 1;
            }
            (None, None) => break,
        }
    }
    out
}

/// The messages that bring a peer from `held` to `wanted`: announcements of
/// routes that are new or changed, withdrawals of routes no longer wanted.
/// Returns the encoded messages and (announced, withdrawn) counts. Both
/// tables are walked in prefix order (a merge, no hashing); `held` must be
/// sorted by prefix, as [`replay_onto`] returns it.
pub fn diff(
    held: &[(Prefix, Arc<PathAttrs>)],
    wanted: &[(Prefix, Arc<PathAttrs>)],
    ctx: &CodecCtx,
) -> (Vec<u8>, usize, usize) {
    let mut wanted_sorted;
    let wanted = if wanted.windows(2).all(|w| w[0].0 <= w[1].0) {
        wanted
    } else {
        wanted_sorted = wanted.to_vec();
        wanted_sorted.sort_by_key(|(p, _)| *p);
        &wanted_sorted[..]
    };
    let equal = |a: &Arc<PathAttrs>, b: &Arc<PathAttrs>| Arc::ptr_eq(a, b) || a == b;
    let mut announce: Vec<(Prefix, Arc<PathAttrs>)> = Vec::new();
    let mut withdraw: Vec<Prefix> = Vec::new();
    let (mut i, mut j) = (0, 0);
    while i < held.len() || j < wanted.len() {
        match (held.get(i), wanted.get(j)) {
            (Some((hp, ha)), Some((wp, wa))) if hp == wp => {
                if !equal(ha, wa) {
                    announce.push((*wp, wa.clone()));
                }
                i += 1;
                j += 1;
            }
            (Some((hp, _)), Some((wp, _))) if hp < wp => {
                withdraw.push(*hp);
                i += 1;
            }
            (Some((hp, _)), None) => {
                withdraw.push(*hp);
                i += 1;
            }
            (_, Some((wp, wa))) => {
                announce.push((*wp, wa.clone()));
                j += 1;
            }
            (None, None) => break,
        }
    }
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
            as_path: AsPath {
                segments: vec![AsSegment::Sequence(vec![65001, 65002])],
            },
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
    fn encode_group_matches_encode_table() {
        let ctx = CodecCtx {
            four_octet_as: true,
            ibgp: false,
        };
        // One set with both families (as an engine group can have).
        let mut both = PathAttrs::clone(&attrs(10, true));
        both.next_hop = Some(Ipv4Addr::new(192, 0, 2, 1));
        let both = Arc::new(both);
        let b = attrs(20, false);
        let table = vec![
            v4("10.0.0.0/24", &both),
            v4("10.0.1.0/24", &b),
            v4("10.0.2.0/24", &both),
            v4("2001:db8::/48", &both),
        ];
        let mut grouped = Vec::new();
        let prefixes = |x: &Arc<PathAttrs>| -> Vec<Prefix> {
            table
                .iter()
                .filter(|(_, y)| Arc::ptr_eq(x, y))
                .map(|(p, _)| *p)
                .collect()
        };
        encode_group(&both, &prefixes(&both), &ctx, &mut grouped);
        encode_group(&b, &prefixes(&b), &ctx, &mut grouped);
        let whole = encode_table(&table, &ctx);
        assert_eq!(grouped.len(), whole.len());
        let back = |enc: Vec<u8>| replay_onto(Vec::new(), &[bytes::Bytes::from(enc)], &ctx);
        let (x, y) = (back(grouped), back(whole));
        assert_eq!(x.len(), 4);
        for ((p, a), (q, c)) in x.iter().zip(&y) {
            assert_eq!((p, a.as_ref()), (q, c.as_ref()));
        }
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
        let back = replay_onto(Vec::new(), &[bytes::Bytes::from(enc)], &ctx);
        assert_eq!(back.len(), 4);
        let get = |t: &[(Prefix, Arc<PathAttrs>)], p: &Prefix| {
            t.iter().find(|(q, _)| q == p).map(|(_, a)| a.clone())
        };
        for (p, x) in &table {
            assert_eq!(get(&back, p).as_deref(), Some(x.as_ref()), "{p}");
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
        let mut after: HashMap<Prefix, Arc<PathAttrs>> = back.iter().cloned().collect();
        for (p, x) in replay_onto(Vec::new(), &[bytes::Bytes::from(msgs.clone())], &ctx) {
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
        // The same messages replayed onto the first table give the same.
        let onto = replay_onto(back.clone(), &[bytes::Bytes::from(msgs.clone())], &ctx);
        let mut sorted_after: Vec<(Prefix, Arc<PathAttrs>)> = after.clone().into_iter().collect();
        sorted_after.sort_by_key(|(p, _)| *p);
        assert_eq!(onto.len(), sorted_after.len());
        for ((p, a), (q, b)) in onto.iter().zip(&sorted_after) {
            assert_eq!((p, a.as_ref()), (q, b.as_ref()));
        }
        for (p, x) in &wanted {
            assert_eq!(after.get(p).map(|a| a.as_ref()), Some(x.as_ref()), "{p}");
        }
    }
}
