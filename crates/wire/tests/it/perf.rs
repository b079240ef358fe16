//! Sanity run (not timed): 1M /24s packed into UPDATEs and decoded back.

use crate::common::*;
use holdfast_wire::*;
use std::net::Ipv4Addr;

#[test]
fn one_million_prefixes() {
    let prefixes = v4_24s(1_000_000);
    let attrs = PathAttrs {
        origin: Some(Origin::Igp),
        as_path: AsPath {
            segments: vec![AsSegment::Sequence(vec![65001, 65002])],
        },
        next_hop: Some(Ipv4Addr::new(192, 0, 2, 1)),
        ..Default::default()
    };
    let ctx = CodecCtx {
        four_octet_as: true,
        ibgp: false,
    };
    let block = encode_attrs(&attrs, &ctx);
    let mut stream = Vec::new();
    let n = pack_announce(&block, Afi::Ipv4, None, &prefixes, &mut stream);
    assert_eq!(n, 1_000_000usize.div_ceil((4096 - 23 - block.len()) / 4));
    let mut buf = &stream[..];
    let (mut msgs, mut count, mut last) = (0, 0usize, None);
    while let Some((t, len)) = frame(buf).unwrap() {
        assert_eq!(t, 2);
        let o = decode_update(&buf[HEADER_LEN..len], &ctx).unwrap();
        count += o.update.announced.len();
        last = o.update.announced.last().copied();
        msgs += 1;
        buf = &buf[len..];
    }
    assert!(buf.is_empty());
    assert_eq!((msgs, count), (n, 1_000_000));
    assert_eq!(last, prefixes.last().copied());
}
