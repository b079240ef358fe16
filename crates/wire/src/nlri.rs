//! Prefix encoding shared by the NLRI, Withdrawn Routes and MP_(UN)REACH
//! fields (RFC 4271 §4.3, RFC 4760 §5).
//!
//! ```text
//! +---------------------------+
//! |   Length (1 octet)        |
//! +---------------------------+
//! |   Prefix (variable)       |
//! +---------------------------+
//! ```
//!
//! The prefix field holds `ceil(Length / 8)` octets; trailing bits are
//! irrelevant and are cleared on decode.

use crate::types::{Afi, Prefix, Prefix4, Prefix6};

/// Decode a run of prefixes of `afi`, appending to `out`. Errors (length
/// beyond the address size, or running past the end of `buf`) are
/// syntax errors of RFC 7606 §5.3.
pub fn decode_prefixes(afi: Afi, buf: &[u8], out: &mut Vec<Prefix>) -> Result<(), &'static str> {
    match afi {
        Afi::Ipv4 => decode_v4(buf, out),
        Afi::Ipv6 => decode_v6(buf, out),
    }
}

fn decode_v4(buf: &[u8], out: &mut Vec<Prefix>) -> Result<(), &'static str> {
    out.reserve(buf.len() / 4 + 1);
    let mut i = 0;
    while i < buf.len() {
        let len = buf[i];
        if len > 32 {
            return Err("IPv4 prefix length > 32");
        }
        let n = (len as usize).div_ceil(8);
        let end = i + 1 + n;
        let Some(bytes) = buf.get(i + 1..end) else {
            return Err("prefix runs past the end of the field");
        };
        let mut raw = [0u8; 4];
        raw[..n].copy_from_slice(bytes);
        let mask = if len == 0 { 0 } else { u32::MAX << (32 - len) };
        out.push(Prefix::V4(Prefix4 {
            addr: u32::from_be_bytes(raw) & mask,
            len,
        }));
        i = end;
    }
    Ok(())
}

fn decode_v6(buf: &[u8], out: &mut Vec<Prefix>) -> Result<(), &'static str> {
    out.reserve(buf.len() / 6 + 1);
    let mut i = 0;
    while i < buf.len() {
        let len = buf[i];
        if len > 128 {
            return Err("IPv6 prefix length > 128");
        }
        let n = (len as usize).div_ceil(8);
        let end = i + 1 + n;
        let Some(bytes) = buf.get(i + 1..end) else {
            return Err("prefix runs past the end of the field");
        };
        let mut raw = [0u8; 16];
        raw[..n].copy_from_slice(bytes);
        let mask = if len == 0 {
            0
        } else {
            u128::MAX << (128 - len)
        };
        out.push(Prefix::V6(Prefix6 {
            addr: u128::from_be_bytes(raw) & mask,
            len,
        }));
        i = end;
    }
    Ok(())
}

/// Encoded size of one prefix.
pub(crate) fn prefix_wire_len(p: &Prefix) -> usize {
    1 + (p.len() as usize).div_ceil(8)
}

/// Append one prefix in NLRI form.
pub fn encode_prefix(p: &Prefix, out: &mut Vec<u8>) {
    match p {
        Prefix::V4(p) => {
            let len = p.len.min(32);
            out.push(len);
            out.extend_from_slice(&p.addr.to_be_bytes()[..(len as usize).div_ceil(8)]);
        }
        Prefix::V6(p) => {
            let len = p.len.min(128);
            out.push(len);
            out.extend_from_slice(&p.addr.to_be_bytes()[..(len as usize).div_ceil(8)]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> Prefix {
        s.parse().unwrap()
    }

    #[test]
    fn v4_round_trip_all_lengths() {
        let mut buf = Vec::new();
        let mut want = Vec::new();
        for len in 0..=32u8 {
            let pf = Prefix4::new("203.0.113.255".parse().unwrap(), len).unwrap();
            want.push(Prefix::V4(pf));
            encode_prefix(&Prefix::V4(pf), &mut buf);
        }
        let mut got = Vec::new();
        decode_prefixes(Afi::Ipv4, &buf, &mut got).unwrap();
        assert_eq!(got, want);
    }

    #[test]
    fn v6_round_trip_all_lengths() {
        let mut buf = Vec::new();
        let mut want = Vec::new();
        for len in 0..=128u8 {
            let pf = Prefix6::new("2001:db8:ffff::1:ffff".parse().unwrap(), len).unwrap();
            want.push(Prefix::V6(pf));
            encode_prefix(&Prefix::V6(pf), &mut buf);
        }
        let mut got = Vec::new();
        decode_prefixes(Afi::Ipv6, &buf, &mut got).unwrap();
        assert_eq!(got, want);
    }

    #[test]
    fn known_bytes() {
        let mut out = Vec::new();
        encode_prefix(&p("10.1.0.0/16"), &mut out);
        encode_prefix(&p("0.0.0.0/0"), &mut out);
        encode_prefix(&p("192.0.2.128/25"), &mut out);
        assert_eq!(out, [16, 10, 1, 0, 25, 192, 0, 2, 128]);
        assert_eq!(prefix_wire_len(&p("192.0.2.128/25")), 5);
    }

    #[test]
    fn host_bits_are_cleared() {
        let mut got = Vec::new();
        decode_prefixes(Afi::Ipv4, &[20, 10, 1, 0xff], &mut got).unwrap();
        assert_eq!(got, vec![p("10.1.240.0/20")]);
    }

    #[test]
    fn syntax_errors() {
        let mut got = Vec::new();
        assert!(decode_prefixes(Afi::Ipv4, &[33, 1, 2, 3, 4, 5], &mut got).is_err());
        assert!(decode_prefixes(Afi::Ipv4, &[24, 1, 2], &mut got).is_err());
        assert!(decode_prefixes(Afi::Ipv6, &[129], &mut got).is_err());
        assert!(decode_prefixes(Afi::Ipv6, &[64, 0x20, 1], &mut got).is_err());
    }
}
