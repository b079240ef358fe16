//! Helpers shared by the integration tests.

use holdfast_wire::*;
use std::path::Path;

pub fn unhex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

/// Every fixture: (file name, 4-octet session?, messages).
pub fn fixtures() -> Vec<(String, bool, Vec<Vec<u8>>)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
    let mut out = Vec::new();
    for e in std::fs::read_dir(&dir).unwrap() {
        let p = e.unwrap().path();
        if p.extension().and_then(|e| e.to_str()) != Some("hex") {
            continue;
        }
        let name = p.file_name().unwrap().to_str().unwrap().to_string();
        let msgs = std::fs::read_to_string(&p)
            .unwrap()
            .lines()
            .map(unhex)
            .collect();
        out.push((name.clone(), name.contains("4oct"), msgs));
    }
    out.sort();
    assert!(out.len() >= 6, "fixtures missing");
    out
}

/// Split a byte stream into messages with `frame`.
pub fn split(mut buf: &[u8]) -> Vec<&[u8]> {
    let mut v = Vec::new();
    while let Some((_, len)) = frame(buf).unwrap() {
        v.push(&buf[..len]);
        buf = &buf[len..];
    }
    assert!(buf.is_empty(), "trailing bytes");
    v
}

/// Decode every UPDATE in a stream and merge them.
pub fn decode_stream(buf: &[u8], ctx: &CodecCtx) -> Vec<Update> {
    split(buf)
        .into_iter()
        .map(|m| {
            assert!(m.len() <= MAX_MESSAGE_LEN);
            match decode_message(m, ctx).unwrap() {
                Message::Update(u) => u,
                other => panic!("not an update: {other:?}"),
            }
        })
        .collect()
}

/// UPDATE body from its three fields.
pub fn update_body(withdrawn: &[u8], attrs: &[u8], nlri: &[u8]) -> Vec<u8> {
    let mut b = Vec::new();
    b.extend_from_slice(&(withdrawn.len() as u16).to_be_bytes());
    b.extend_from_slice(withdrawn);
    b.extend_from_slice(&(attrs.len() as u16).to_be_bytes());
    b.extend_from_slice(attrs);
    b.extend_from_slice(nlri);
    b
}

/// One path attribute TLV (extended length when needed).
pub fn attr(flags: u8, t: u8, v: &[u8]) -> Vec<u8> {
    let mut a = vec![flags, t];
    if flags & 0x10 != 0 {
        a.extend_from_slice(&(v.len() as u16).to_be_bytes());
    } else {
        a.push(v.len() as u8);
    }
    a.extend_from_slice(v);
    a
}

pub fn p(s: &str) -> Prefix {
    s.parse().unwrap()
}

/// `n` distinct IPv4 /24s starting at 1.0.0.0.
pub fn v4_24s(n: usize) -> Vec<Prefix> {
    (0..n as u32)
        .map(|i| {
            Prefix::V4(Prefix4 {
                addr: (1 << 24) + (i << 8),
                len: 24,
            })
        })
        .collect()
}

/// `n` distinct IPv6 /48s under 2001:db8::/32.
pub fn v6_48s(n: usize) -> Vec<Prefix> {
    (0..n as u128)
        .map(|i| {
            Prefix::V6(Prefix6 {
                addr: (0x2001_0db8u128 << 96) | (i << 80),
                len: 48,
            })
        })
        .collect()
}
