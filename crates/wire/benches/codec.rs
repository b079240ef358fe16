//! Decode / encode throughput for 1M IPv4 /24 prefixes packed in UPDATEs.

use criterion::{black_box, criterion_group, criterion_main, Criterion, Throughput};
use holdfast_wire::*;
use std::net::Ipv4Addr;

fn setup() -> (Vec<Prefix>, Vec<u8>, CodecCtx) {
    let prefixes: Vec<Prefix> = (0..1_000_000u32)
        .map(|i| {
            Prefix::V4(Prefix4 {
                addr: (1 << 24) + (i << 8),
                len: 24,
            })
        })
        .collect();
    let attrs = PathAttrs {
        origin: Some(Origin::Igp),
        as_path: AsPath {
            segments: vec![AsSegment::Sequence(vec![65001, 65002, 4_200_000_001])],
        },
        next_hop: Some(Ipv4Addr::new(192, 0, 2, 1)),
        communities: vec![(65001 << 16) | 1],
        ..Default::default()
    };
    let ctx = CodecCtx {
        four_octet_as: true,
        ibgp: false,
    };
    (prefixes, encode_attrs(&attrs, &ctx), ctx)
}

fn bench(c: &mut Criterion) {
    let (prefixes, block, ctx) = setup();
    let mut stream = Vec::new();
    pack_announce(&block, Afi::Ipv4, None, &prefixes, &mut stream);
    let mut g = c.benchmark_group("1M_v4_24");
    g.throughput(Throughput::Elements(prefixes.len() as u64));
    g.sample_size(20);
    g.bench_function("decode", |b| {
        b.iter(|| {
            let mut buf = &stream[..];
            let mut n = 0;
            while let Some((_, len)) = frame(buf).unwrap() {
                n += decode_update(&buf[HEADER_LEN..len], &ctx)
                    .unwrap()
                    .update
                    .announced
                    .len();
                buf = &buf[len..];
            }
            black_box(n)
        })
    });
    g.bench_function("encode", |b| {
        let mut out = Vec::with_capacity(stream.len());
        b.iter(|| {
            out.clear();
            black_box(pack_announce(&block, Afi::Ipv4, None, &prefixes, &mut out))
        })
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
