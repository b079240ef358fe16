//! OPEN message (RFC 4271 §4.2, §6.2), capabilities (RFC 5492) and the
//! extended optional parameters length (RFC 9072).
//!
//! ```text
//!  0                   1                   2                   3
//!  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//! +-+-+-+-+-+-+-+-+
//! |    Version    |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |     My Autonomous System      |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |           Hold Time           |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |                         BGP Identifier                        |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! | Opt Parm Len  |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |             Optional Parameters (variable)                    |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! ```

use std::net::Ipv4Addr;

use crate::error::{open_subcode, DecodeError, DecodeErrorKind};
use crate::header::{begin_message, finish_header, HEADER_LEN};
use crate::types::{msg_type, Afi, Capability, Family, GracefulRestartCap, Open, Safi};

/// Optional parameter type carrying capabilities (RFC 5492 §4).
const PARAM_CAPABILITIES: u8 = 2;

/// Capability codes (IANA "Capability Codes").
pub mod cap_code {
    pub const MULTIPROTOCOL: u8 = 1;
    pub const ROUTE_REFRESH: u8 = 2;
    pub const EXTENDED_NEXT_HOP: u8 = 5;
    pub const GRACEFUL_RESTART: u8 = 64;
    pub const FOUR_OCTET_AS: u8 = 65;
    pub const ADD_PATH: u8 = 69;
    pub const ENHANCED_ROUTE_REFRESH: u8 = 70;
    pub const FQDN: u8 = 73;
}

fn malformed(what: &'static str) -> DecodeError {
    DecodeError::open(
        open_subcode::UNSPECIFIC,
        Vec::new(),
        DecodeErrorKind::MalformedOptionalParameters(what),
    )
}

/// Decode an OPEN body (after the 19-byte header).
pub fn decode_open(body: &[u8]) -> Result<Open, DecodeError> {
    if body.len() < 10 {
        return Err(DecodeError::bad_length((body.len() + HEADER_LEN) as u16));
    }
    let version = body[0];
    if version != 4 {
        return Err(DecodeError::open(
            open_subcode::UNSUPPORTED_VERSION,
            vec![0, 4],
            DecodeErrorKind::UnsupportedVersion(version),
        ));
    }
    let my_as = u16::from_be_bytes([body[1], body[2]]);
    let hold_time = u16::from_be_bytes([body[3], body[4]]);
    if hold_time == 1 || hold_time == 2 {
        return Err(DecodeError::open(
            open_subcode::UNACCEPTABLE_HOLD_TIME,
            Vec::new(),
            DecodeErrorKind::UnacceptableHoldTime(hold_time),
        ));
    }
    let bgp_id = Ipv4Addr::new(body[5], body[6], body[7], body[8]);
    if bgp_id.is_unspecified() {
        return Err(DecodeError::open(
            open_subcode::BAD_BGP_IDENTIFIER,
            Vec::new(),
            DecodeErrorKind::BadBgpIdentifier,
        ));
    }
    let mut capabilities = Vec::new();
    let opt_len = body[9] as usize;
    let rest = &body[10..];
    // RFC 9072 §2: Non-Ext OP Len 255 followed by Non-Ext OP Type 255.
    let extended = opt_len == 255 && rest.first() == Some(&255);
    let (params, len_size) = if extended {
        if rest.len() < 3 {
            return Err(malformed("truncated extended optional parameters length"));
        }
        let ext_len = u16::from_be_bytes([rest[1], rest[2]]) as usize;
        (
            rest[3..]
                .get(..ext_len)
                .ok_or_else(|| malformed("optional parameters overrun"))?,
            2,
        )
    } else {
        (
            rest.get(..opt_len)
                .ok_or_else(|| malformed("optional parameters overrun"))?,
            1,
        )
    };
    let consumed = if extended {
        3 + params.len()
    } else {
        params.len()
    };
    if consumed != rest.len() {
        return Err(malformed("trailing bytes after optional parameters"));
    }
    let mut i = 0;
    while i < params.len() {
        if params.len() - i < 1 + len_size {
            return Err(malformed("truncated optional parameter header"));
        }
        let ptype = params[i];
        let plen = if len_size == 2 {
            u16::from_be_bytes([params[i + 1], params[i + 2]]) as usize
        } else {
            params[i + 1] as usize
        };
        let start = i + 1 + len_size;
        let value = params
            .get(start..start + plen)
            .ok_or_else(|| malformed("optional parameter overrun"))?;
        if ptype != PARAM_CAPABILITIES {
            return Err(DecodeError::open(
                open_subcode::UNSUPPORTED_OPTIONAL_PARAMETER,
                Vec::new(),
                DecodeErrorKind::UnsupportedOptionalParameter(ptype),
            ));
        }
        decode_capabilities(value, &mut capabilities)?;
        i = start + plen;
    }
    Ok(Open {
        version,
        my_as,
        hold_time,
        bgp_id,
        capabilities,
    })
}

// Capability TLV (RFC 5492 §4):
// +------------------------------+
// | Capability Code (1 octet)    |
// +------------------------------+
// | Capability Length (1 octet)  |
// +------------------------------+
// | Capability Value (variable)  |
// ~                              ~
// +------------------------------+

fn decode_capabilities(mut v: &[u8], out: &mut Vec<Capability>) -> Result<(), DecodeError> {
    while !v.is_empty() {
        if v.len() < 2 {
            return Err(malformed("truncated capability header"));
        }
        let code = v[0];
        let len = v[1] as usize;
        let value = v
            .get(2..2 + len)
            .ok_or_else(|| malformed("capability overrun"))?;
        out.push(
            decode_capability(code, value).unwrap_or_else(|| Capability::Unknown {
                code,
                value: value.to_vec(),
            }),
        );
        v = &v[2 + len..];
    }
    Ok(())
}

fn family(afi: u16, safi: u16) -> Option<Family> {
    Some(Family {
        afi: Afi::from_code(afi)?,
        safi: Safi::from_code(u8::try_from(safi).ok()?),
    })
}

fn be16(b: &[u8]) -> u16 {
    u16::from_be_bytes([b[0], b[1]])
}

/// Interpret one capability; `None` keeps it as `Capability::Unknown`
/// (unknown code, or a value this codec cannot represent).
fn decode_capability(code: u8, v: &[u8]) -> Option<Capability> {
    use cap_code::*;
    Some(match code {
        // AFI(2) Res(1) SAFI(1)
        MULTIPROTOCOL if v.len() == 4 => Capability::Multiprotocol(family(be16(v), v[3] as u16)?),
        ROUTE_REFRESH if v.is_empty() => Capability::RouteRefresh,
        // (NLRI AFI(2), NLRI SAFI(2), Next Hop AFI(2))*
        EXTENDED_NEXT_HOP if v.len() % 6 == 0 => Capability::ExtendedNextHop(
            v.chunks_exact(6)
                .map(|c| {
                    Some((
                        family(be16(c), be16(&c[2..]))?,
                        Afi::from_code(be16(&c[4..]))?,
                    ))
                })
                .collect::<Option<_>>()?,
        ),
        // Restart Flags(4 bits) Restart Time(12 bits) (AFI(2) SAFI(1) Flags(1))*
        GRACEFUL_RESTART if v.len() >= 2 && (v.len() - 2) % 4 == 0 => {
            let hdr = be16(v);
            Capability::GracefulRestart(GracefulRestartCap {
                restart_state: hdr & 0x8000 != 0,
                notification: hdr & 0x4000 != 0,
                restart_time: hdr & 0x0fff,
                families: v[2..]
                    .chunks_exact(4)
                    .map(|c| Some((family(be16(c), c[2] as u16)?, c[3] & 0x80 != 0)))
                    .collect::<Option<_>>()?,
            })
        }
        FOUR_OCTET_AS if v.len() == 4 => {
            Capability::FourOctetAs(u32::from_be_bytes([v[0], v[1], v[2], v[3]]))
        }
        // (AFI(2) SAFI(1) Send/Receive(1))*
        ADD_PATH if v.len() % 4 == 0 => Capability::AddPath(
            v.chunks_exact(4)
                .map(|c| Some((family(be16(c), c[2] as u16)?, c[3])))
                .collect::<Option<_>>()?,
        ),
        ENHANCED_ROUTE_REFRESH if v.is_empty() => Capability::EnhancedRouteRefresh,
        // Hostname Len(1) Hostname Domain Len(1) Domain
        FQDN => {
            let hl = *v.first()? as usize;
            let hostname = v.get(1..1 + hl)?;
            let dl = *v.get(1 + hl)? as usize;
            let domain = v.get(2 + hl..2 + hl + dl)?;
            if v.len() != 2 + hl + dl {
                return None;
            }
            Capability::Fqdn {
                hostname: String::from_utf8(hostname.to_vec()).ok()?,
                domain: String::from_utf8(domain.to_vec()).ok()?,
            }
        }
        _ => return None,
    })
}

/// Longest prefix of `s` of at most `max` bytes ending on a char boundary.
fn cut_utf8(s: &str, max: usize) -> &[u8] {
    let mut end = s.len().min(max);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s.as_bytes()[..end]
}

/// Append one capability TLV. Values that cannot fit the 1-octet length are
/// cut to whole items.
fn encode_capability(c: &Capability, out: &mut Vec<u8>) {
    use cap_code::*;
    let start = out.len();
    out.extend_from_slice(&[0, 0]);
    let code = match c {
        Capability::Multiprotocol(f) => {
            out.extend_from_slice(&f.afi.code().to_be_bytes());
            out.extend_from_slice(&[0, f.safi.code()]);
            MULTIPROTOCOL
        }
        Capability::RouteRefresh => ROUTE_REFRESH,
        Capability::ExtendedNextHop(list) => {
            for (f, nh) in list.iter().take(42) {
                out.extend_from_slice(&f.afi.code().to_be_bytes());
                out.extend_from_slice(&(f.safi.code() as u16).to_be_bytes());
                out.extend_from_slice(&nh.code().to_be_bytes());
            }
            EXTENDED_NEXT_HOP
        }
        Capability::GracefulRestart(gr) => {
            let hdr = (gr.restart_state as u16) << 15
                | (gr.notification as u16) << 14
                | (gr.restart_time & 0x0fff);
            out.extend_from_slice(&hdr.to_be_bytes());
            for (f, fwd) in gr.families.iter().take(63) {
                out.extend_from_slice(&f.afi.code().to_be_bytes());
                out.extend_from_slice(&[f.safi.code(), if *fwd { 0x80 } else { 0 }]);
            }
            GRACEFUL_RESTART
        }
        Capability::FourOctetAs(asn) => {
            out.extend_from_slice(&asn.to_be_bytes());
            FOUR_OCTET_AS
        }
        Capability::AddPath(list) => {
            for (f, sr) in list.iter().take(63) {
                out.extend_from_slice(&f.afi.code().to_be_bytes());
                out.extend_from_slice(&[f.safi.code(), *sr]);
            }
            ADD_PATH
        }
        Capability::EnhancedRouteRefresh => ENHANCED_ROUTE_REFRESH,
        Capability::Fqdn { hostname, domain } => {
            let h = cut_utf8(hostname, 253);
            let d = cut_utf8(domain, 253 - h.len());
            out.push(h.len() as u8);
            out.extend_from_slice(h);
            out.push(d.len() as u8);
            out.extend_from_slice(d);
            FQDN
        }
        Capability::Unknown { code, value } => {
            out.extend_from_slice(&value[..value.len().min(255)]);
            *code
        }
    };
    out[start] = code;
    out[start + 1] = (out.len() - start - 2) as u8;
}

/// Append an OPEN message. Capabilities are packed into as few Capabilities
/// parameters as fit 255 octets each; if the parameters exceed 255 octets in
/// total (or one capability is longer than 253 octets of value), the RFC 9072
/// extended form is used with a single parameter.
pub fn encode_open(open: &Open, out: &mut Vec<u8>) {
    let s = begin_message(out, msg_type::OPEN);
    out.push(open.version);
    out.extend_from_slice(&open.my_as.to_be_bytes());
    out.extend_from_slice(&open.hold_time.to_be_bytes());
    out.extend_from_slice(&open.bgp_id.octets());
    let mut caps: Vec<Vec<u8>> = Vec::with_capacity(open.capabilities.len());
    for c in &open.capabilities {
        let mut v = Vec::new();
        encode_capability(c, &mut v);
        caps.push(v);
    }
    // Classic form: group capabilities into parameters of <= 255 octets.
    let mut params: Vec<Vec<u8>> = Vec::new();
    for c in &caps {
        match params.last_mut() {
            Some(p) if p.len() + c.len() <= 255 => p.extend_from_slice(c),
            _ => params.push(c.clone()),
        }
    }
    let classic_len: usize = params.iter().map(|p| 2 + p.len()).sum();
    // A capability TLV can be 257 octets, which only the RFC 9072 form holds.
    if classic_len <= 255 && params.iter().all(|p| p.len() <= 255) {
        out.push(classic_len as u8);
        for p in &params {
            out.extend_from_slice(&[PARAM_CAPABILITIES, p.len() as u8]);
            out.extend_from_slice(p);
        }
    } else {
        let all: Vec<u8> = caps.concat();
        out.extend_from_slice(&[255, 255]);
        out.extend_from_slice(&((3 + all.len()) as u16).to_be_bytes());
        out.push(PARAM_CAPABILITIES);
        out.extend_from_slice(&(all.len() as u16).to_be_bytes());
        out.extend_from_slice(&all);
    }
    finish_header(out, s);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{decode_message, CodecCtx, Message};

    pub(crate) fn every_capability() -> Vec<Capability> {
        vec![
            Capability::Multiprotocol(Family::IPV4_UNICAST),
            Capability::Multiprotocol(Family::IPV6_UNICAST),
            Capability::Multiprotocol(Family {
                afi: Afi::Ipv4,
                safi: Safi::Other(128),
            }),
            Capability::RouteRefresh,
            Capability::ExtendedNextHop(vec![(Family::IPV4_UNICAST, Afi::Ipv6)]),
            Capability::GracefulRestart(GracefulRestartCap {
                restart_state: true,
                notification: true,
                restart_time: 120,
                families: vec![(Family::IPV4_UNICAST, true), (Family::IPV6_UNICAST, false)],
            }),
            Capability::FourOctetAs(4_200_000_001),
            Capability::AddPath(vec![(Family::IPV6_UNICAST, 3)]),
            Capability::EnhancedRouteRefresh,
            Capability::Fqdn {
                hostname: "r1".into(),
                domain: "example.net".into(),
            },
            Capability::Unknown {
                code: 71,
                value: vec![1, 2, 3],
            },
            Capability::Unknown {
                code: 128,
                value: vec![],
            },
        ]
    }

    fn open(caps: Vec<Capability>) -> Open {
        Open {
            version: 4,
            my_as: 23456,
            hold_time: 90,
            bgp_id: Ipv4Addr::new(192, 0, 2, 1),
            capabilities: caps,
        }
    }

    #[test]
    fn round_trip_every_capability() {
        let o = open(every_capability());
        let mut v = Vec::new();
        encode_open(&o, &mut v);
        assert_eq!(
            decode_message(&v, &CodecCtx::default()).unwrap(),
            Message::Open(o.clone())
        );
        assert_eq!(o.asn(), 4_200_000_001);
    }

    #[test]
    fn round_trip_extended_optional_parameters() {
        let caps: Vec<Capability> = (0..40)
            .map(|i| Capability::Unknown {
                code: 200,
                value: vec![i; 10],
            })
            .collect();
        let o = open(caps);
        let mut v = Vec::new();
        encode_open(&o, &mut v);
        assert_eq!((v[28], v[29]), (255, 255), "RFC 9072 form used");
        assert_eq!(
            decode_message(&v, &CodecCtx::default()).unwrap(),
            Message::Open(o)
        );
    }

    #[test]
    fn several_capability_parameters() {
        // Two parameters (one cap each) as old Cisco/Junos send them.
        let body = [
            4, 0xfd, 0xe8, 0, 180, 10, 0, 0, 1, 16, 2, 6, 1, 4, 0, 1, 0, 1, 2, 6, 65, 4, 0, 0,
            0xfd, 0xe8,
        ];
        let o = decode_open(&body).unwrap();
        assert_eq!(
            o.capabilities,
            vec![
                Capability::Multiprotocol(Family::IPV4_UNICAST),
                Capability::FourOctetAs(65000)
            ]
        );
        assert_eq!(o.asn(), 65000);
    }

    #[test]
    fn malformed_capability_values_stay_unknown() {
        let body = [4, 0, 1, 0, 0, 1, 1, 1, 1, 8, 2, 6, 1, 3, 0, 1, 0, 2, 0];
        let o = decode_open(&body[..19]).unwrap_err();
        assert_eq!(o.code, 2);
        let body = [4, 0, 1, 0, 0, 1, 1, 1, 1, 7, 2, 5, 1, 3, 0, 1, 0];
        let o = decode_open(&body).unwrap();
        assert_eq!(
            o.capabilities,
            vec![Capability::Unknown {
                code: 1,
                value: vec![0, 1, 0]
            }]
        );
        assert_eq!(o.hold_time, 0);
    }

    #[test]
    fn open_errors() {
        let good = [4u8, 0, 1, 0, 90, 1, 1, 1, 1, 0];
        assert!(decode_open(&good).is_ok());
        let mut b = good;
        b[0] = 3;
        let e = decode_open(&b).unwrap_err();
        assert_eq!((e.code, e.subcode, e.data), (2, 1, vec![0, 4]));
        for ht in [1u8, 2] {
            let mut b = good;
            b[4] = ht;
            let e = decode_open(&b).unwrap_err();
            assert_eq!((e.code, e.subcode), (2, 6));
        }
        let mut b = good;
        b[5..9].copy_from_slice(&[0, 0, 0, 0]);
        assert_eq!(decode_open(&b).unwrap_err().subcode, 3);
        let e = decode_open(&[4, 0, 1, 0, 90, 1, 1, 1, 1, 2, 1, 0]).unwrap_err();
        assert_eq!((e.code, e.subcode), (2, 4));
        assert!(decode_open(&[4, 0, 1, 0, 90, 1, 1, 1, 1, 3, 2, 0]).is_err());
        assert!(decode_open(&[4, 0, 1, 0, 90, 1, 1, 1, 1, 0, 0]).is_err());
        assert!(decode_open(&[4, 0, 1]).is_err());
    }

    #[test]
    fn capability_longer_than_a_classic_parameter() {
        let o = open(vec![Capability::Unknown {
            code: 200,
            value: vec![1; 255],
        }]);
        let mut v = Vec::new();
        encode_open(&o, &mut v);
        assert_eq!(
            decode_message(&v, &CodecCtx::default()).unwrap(),
            Message::Open(o)
        );
    }

    #[test]
    fn oversized_strings_are_cut_to_valid_utf8() {
        let o = open(vec![Capability::Fqdn {
            hostname: "é".repeat(200),
            domain: "x".repeat(300),
        }]);
        let mut v = Vec::new();
        encode_open(&o, &mut v);
        let Message::Open(d) = decode_message(&v, &CodecCtx::default()).unwrap() else {
            panic!()
        };
        let Capability::Fqdn { hostname, domain } = &d.capabilities[0] else {
            panic!("{:?}", d.capabilities)
        };
        assert!(hostname.len() + domain.len() <= 253 && hostname.starts_with('é'));
    }
}
