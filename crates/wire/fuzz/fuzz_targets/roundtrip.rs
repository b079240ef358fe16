//! decode → encode → decode gives the same message (4-octet AS sessions).
//! UPDATEs are compared after merging the messages `encode_update` splits
//! them into (RFC 7606 §5.1), as prefix multisets plus attributes.
#![no_main]
use holdfast_wire::*;
use libfuzzer_sys::fuzz_target;

fn norm(mut u: Update) -> Update {
    u.withdrawn.sort();
    u.announced.sort();
    u
}

fuzz_target!(|data: &[u8]| {
    let ctx = CodecCtx {
        four_octet_as: true,
        ibgp: true,
    };
    let Ok(first) = decode_message(data, &ctx) else {
        return;
    };
    let mut out = Vec::new();
    encode_message(&first, &ctx, &mut out);
    let mut again = Vec::new();
    let mut buf = &out[..];
    while let Some((_, len)) = frame(buf).expect("encoder output frames") {
        again.push(decode_message(&buf[..len], &ctx).expect("encoder output decodes"));
        buf = &buf[len..];
    }
    assert!(buf.is_empty());
    let Message::Update(u) = first else {
        assert_eq!(again, vec![first]);
        return;
    };
    let empty = u.withdrawn.is_empty() && u.announced.is_empty() && u.attrs.is_none();
    if u.end_of_rib.is_some() || empty {
        assert_eq!(again.len(), 1);
        return;
    }
    let mut merged = Update::default();
    for m in again {
        let Message::Update(x) = m else {
            panic!("not an update")
        };
        assert!(x.end_of_rib.is_none());
        merged.withdrawn.extend(x.withdrawn);
        merged.announced.extend(x.announced);
        if let Some(a) = x.attrs {
            match merged.attrs.as_mut() {
                // IPv4 NLRI-field messages carry no MP next hop; the rest
                // must agree.
                Some(prev) => {
                    let mut a2 = a.clone();
                    let mut p2 = prev.clone();
                    a2.mp_next_hop = None;
                    p2.mp_next_hop = None;
                    assert_eq!(p2, a2, "announcing messages carry the same attributes");
                    prev.mp_next_hop = prev.mp_next_hop.or(a.mp_next_hop);
                }
                None => merged.attrs = Some(a),
            }
        }
    }
    let has_v4 = u.announced.iter().any(|p| p.afi() == Afi::Ipv4);
    let has_v6 = u.announced.iter().any(|p| p.afi() == Afi::Ipv6);
    let mut want = norm(u);
    if let Some(a) = want.attrs.as_mut() {
        a.unknown.sort_by_key(|r| r.type_code);
        // IPv4 announcements with NEXT_HOP use the NLRI field, so an MP next
        // hop without IPv6 NLRI has nowhere to go (RFC 7606 §5.1).
        if has_v4 && !has_v6 && a.next_hop.is_some() {
            a.mp_next_hop = None;
        }
    }
    assert_eq!(norm(merged), want);
});
