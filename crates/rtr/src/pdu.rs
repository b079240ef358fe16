//! RTR PDUs (RFC 8210 §5, RFC 6810 §5): a pure codec.
//!
//! [`decode`] takes the start of a byte stream and returns the first whole
//! PDU and its length, `Ok(None)` when more bytes are needed; [`Pdu::encode`]
//! appends a PDU. Router Key PDUs (type 9, RFC 8210 §5.10) and ASPA PDUs
//! (type 11, draft-ietf-sidrops-8210bis) are decoded as [`Pdu::Other`] and
//! skipped: this router validates origins only.

use std::net::{Ipv4Addr, Ipv6Addr};

/// The largest PDU accepted (an Error Report carries a PDU and a text).
pub const MAX_PDU: u32 = 65_536;

/// PDU type codes.
pub mod kind {
    pub const SERIAL_NOTIFY: u8 = 0;
    pub const SERIAL_QUERY: u8 = 1;
    pub const RESET_QUERY: u8 = 2;
    pub const CACHE_RESPONSE: u8 = 3;
    pub const IPV4_PREFIX: u8 = 4;
    pub const IPV6_PREFIX: u8 = 6;
    pub const END_OF_DATA: u8 = 7;
    pub const CACHE_RESET: u8 = 8;
    pub const ROUTER_KEY: u8 = 9;
    pub const ERROR_REPORT: u8 = 10;
}

/// Error Report codes (RFC 8210 §12).
pub mod error_code {
    pub const CORRUPT_DATA: u16 = 0;
    pub const INTERNAL_ERROR: u16 = 1;
    pub const NO_DATA_AVAILABLE: u16 = 2;
    pub const INVALID_REQUEST: u16 = 3;
    pub const UNSUPPORTED_VERSION: u16 = 4;
    pub const UNSUPPORTED_PDU: u16 = 5;
    pub const WITHDRAWAL_OF_UNKNOWN: u16 = 6;
    pub const DUPLICATE_ANNOUNCEMENT: u16 = 7;
    pub const UNEXPECTED_VERSION: u16 = 8;
}

/// The name of an Error Report code.
pub fn error_name(code: u16) -> &'static str {
    match code {
        0 => "Corrupt Data",
        1 => "Internal Error",
        2 => "No Data Available",
        3 => "Invalid Request",
        4 => "Unsupported Protocol Version",
        5 => "Unsupported PDU Type",
        6 => "Withdrawal of Unknown Record",
        7 => "Duplicate Announcement Received",
        8 => "Unexpected Protocol Version",
        _ => "unknown error",
    }
}

/// The timers of a version 1 End of Data (RFC 8210 §6), in seconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timers {
    pub refresh: u32,
    pub retry: u32,
    pub expire: u32,
}

/// An IPv4 or IPv6 Prefix PDU's payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PrefixPdu<A> {
    /// Flags bit 0: announcement (true) or withdrawal.
    pub announce: bool,
    pub addr: A,
    pub len: u8,
    pub max_len: u8,
    pub asn: u32,
}

/// One RTR PDU.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Pdu {
    SerialNotify {
        session: u16,
        serial: u32,
    },
    SerialQuery {
        session: u16,
        serial: u32,
    },
    ResetQuery,
    CacheResponse {
        session: u16,
    },
    Ipv4Prefix(PrefixPdu<Ipv4Addr>),
    Ipv6Prefix(PrefixPdu<Ipv6Addr>),
    /// `timers` is `None` in version 0.
    EndOfData {
        session: u16,
        serial: u32,
        timers: Option<Timers>,
    },
    CacheReset,
    ErrorReport {
        code: u16,
        pdu: Vec<u8>,
        text: String,
    },
    /// A PDU this router does not use (Router Key, ASPA): skipped.
    Other {
        kind: u8,
    },
}

/// Why bytes are not a valid PDU; each maps to an Error Report code.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PduError {
    #[error("unsupported protocol version {0}")]
    Version(u8),
    #[error("unsupported PDU type {0}")]
    Kind(u8),
    #[error("PDU type {kind} with bad length {len}")]
    Length { kind: u8, len: u32 },
    #[error("corrupt PDU: {0}")]
    Corrupt(&'static str),
}

impl PduError {
    /// The Error Report code this error is reported with.
    pub fn code(&self) -> u16 {
        match self {
            PduError::Version(_) => error_code::UNSUPPORTED_VERSION,
            PduError::Kind(_) => error_code::UNSUPPORTED_PDU,
            PduError::Length { .. } | PduError::Corrupt(_) => error_code::CORRUPT_DATA,
        }
    }
}

fn be16(b: &[u8]) -> u16 {
    u16::from_be_bytes([b[0], b[1]])
}

fn be32(b: &[u8]) -> u32 {
    u32::from_be_bytes([b[0], b[1], b[2], b[3]])
}

/// The first whole PDU of `buf` with its version and length in bytes;
/// `Ok(None)` if `buf` does not hold one yet.
pub fn decode(buf: &[u8]) -> Result<Option<(u8, Pdu, usize)>, PduError> {
    if buf.len() < 8 {
        return Ok(None);
    }
    let version = buf[0];
    let kind = buf[1];
    let hword = be16(&buf[2..4]);
    let len = be32(&buf[4..8]);
    if version > 2 {
        return Err(PduError::Version(version));
    }
    if !(8..=MAX_PDU).contains(&len) {
        return Err(PduError::Length { kind, len });
    }
    let len_us = len as usize;
    if buf.len() < len_us {
        return Ok(None);
    }
    let b = &buf[8..len_us];
    let need = |n: u32| {
        if len == n {
            Ok(())
        } else {
            Err(PduError::Length { kind, len })
        }
    };
    let pdu = match kind {
        kind::SERIAL_NOTIFY | kind::SERIAL_QUERY => {
            need(12)?;
            let serial = be32(b);
            if kind == kind::SERIAL_NOTIFY {
                Pdu::SerialNotify {
                    session: hword,
                    serial,
                }
            } else {
                Pdu::SerialQuery {
                    session: hword,
                    serial,
                }
            }
        }
        kind::RESET_QUERY => {
            need(8)?;
            Pdu::ResetQuery
        }
        kind::CACHE_RESPONSE => {
            need(8)?;
            Pdu::CacheResponse { session: hword }
        }
        kind::CACHE_RESET => {
            need(8)?;
            Pdu::CacheReset
        }
        kind::IPV4_PREFIX => {
            need(20)?;
            let p = PrefixPdu {
                announce: b[0] & 1 == 1,
                len: b[1],
                max_len: b[2],
                addr: Ipv4Addr::new(b[4], b[5], b[6], b[7]),
                asn: be32(&b[8..12]),
            };
            if p.len > 32 || p.max_len > 32 || p.max_len < p.len {
                return Err(PduError::Corrupt("IPv4 prefix or max length out of range"));
            }
            Pdu::Ipv4Prefix(p)
        }
        kind::IPV6_PREFIX => {
            need(32)?;
            let mut a = [0u8; 16];
            a.copy_from_slice(&b[4..20]);
            let p = PrefixPdu {
                announce: b[0] & 1 == 1,
                len: b[1],
                max_len: b[2],
                addr: Ipv6Addr::from(a),
                asn: be32(&b[20..24]),
            };
            if p.len > 128 || p.max_len > 128 || p.max_len < p.len {
                return Err(PduError::Corrupt("IPv6 prefix or max length out of range"));
            }
            Pdu::Ipv6Prefix(p)
        }
        kind::END_OF_DATA => {
            if version == 0 {
                need(12)?;
                Pdu::EndOfData {
                    session: hword,
                    serial: be32(b),
                    timers: None,
                }
            } else {
                need(24)?;
                Pdu::EndOfData {
                    session: hword,
                    serial: be32(b),
                    timers: Some(Timers {
                        refresh: be32(&b[4..]),
                        retry: be32(&b[8..]),
                        expire: be32(&b[12..]),
                    }),
                }
            }
        }
        kind::ERROR_REPORT => {
            if b.len() < 8 {
                return Err(PduError::Length { kind, len });
            }
            let plen = be32(b) as usize;
            if b.len() < 8 + plen {
                return Err(PduError::Corrupt("Error Report PDU length"));
            }
            let pdu = b[4..4 + plen].to_vec();
            let tlen = be32(&b[4 + plen..]) as usize;
            if b.len() != 8 + plen + tlen {
                return Err(PduError::Corrupt("Error Report text length"));
            }
            let text = String::from_utf8_lossy(&b[8 + plen..]).into_owned();
            Pdu::ErrorReport {
                code: hword,
                pdu,
                text,
            }
        }
        kind::ROUTER_KEY | 11 if version >= 1 => Pdu::Other { kind },
        k => return Err(PduError::Kind(k)),
    };
    Ok(Some((version, pdu, len_us)))
}

fn header(out: &mut Vec<u8>, version: u8, kind: u8, hword: u16, len: u32) {
    out.push(version);
    out.push(kind);
    out.extend_from_slice(&hword.to_be_bytes());
    out.extend_from_slice(&len.to_be_bytes());
}

impl Pdu {
    /// Appends the PDU in protocol `version` (0 or 1) to `out`.
    pub fn encode(&self, version: u8, out: &mut Vec<u8>) {
        match self {
            Pdu::SerialNotify { session, serial } | Pdu::SerialQuery { session, serial } => {
                let k = if matches!(self, Pdu::SerialNotify { .. }) {
                    kind::SERIAL_NOTIFY
                } else {
                    kind::SERIAL_QUERY
                };
                header(out, version, k, *session, 12);
                out.extend_from_slice(&serial.to_be_bytes());
            }
            Pdu::ResetQuery => header(out, version, kind::RESET_QUERY, 0, 8),
            Pdu::CacheResponse { session } => {
                header(out, version, kind::CACHE_RESPONSE, *session, 8)
            }
            Pdu::CacheReset => header(out, version, kind::CACHE_RESET, 0, 8),
            Pdu::Ipv4Prefix(p) => {
                header(out, version, kind::IPV4_PREFIX, 0, 20);
                out.extend_from_slice(&[p.announce as u8, p.len, p.max_len, 0]);
                out.extend_from_slice(&p.addr.octets());
                out.extend_from_slice(&p.asn.to_be_bytes());
            }
            Pdu::Ipv6Prefix(p) => {
                header(out, version, kind::IPV6_PREFIX, 0, 32);
                out.extend_from_slice(&[p.announce as u8, p.len, p.max_len, 0]);
                out.extend_from_slice(&p.addr.octets());
                out.extend_from_slice(&p.asn.to_be_bytes());
            }
            Pdu::EndOfData {
                session,
                serial,
                timers,
            } => match (version, timers) {
                (1.., Some(t)) => {
                    header(out, version, kind::END_OF_DATA, *session, 24);
                    out.extend_from_slice(&serial.to_be_bytes());
                    out.extend_from_slice(&t.refresh.to_be_bytes());
                    out.extend_from_slice(&t.retry.to_be_bytes());
                    out.extend_from_slice(&t.expire.to_be_bytes());
                }
                _ => {
                    header(out, version, kind::END_OF_DATA, *session, 12);
                    out.extend_from_slice(&serial.to_be_bytes());
                }
            },
            Pdu::ErrorReport { code, pdu, text } => {
                let len = 16 + pdu.len() + text.len();
                header(out, version, kind::ERROR_REPORT, *code, len as u32);
                out.extend_from_slice(&(pdu.len() as u32).to_be_bytes());
                out.extend_from_slice(pdu);
                out.extend_from_slice(&(text.len() as u32).to_be_bytes());
                out.extend_from_slice(text.as_bytes());
            }
            Pdu::Other { .. } => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn roundtrip(v: u8, p: Pdu) {
        let mut b = Vec::new();
        p.encode(v, &mut b);
        let (ver, q, n) = decode(&b).unwrap().unwrap();
        assert_eq!((ver, &q, n), (v, &p, b.len()));
        for cut in 0..b.len() {
            assert_eq!(decode(&b[..cut]).unwrap(), None, "cut at {cut}");
        }
    }

    #[test]
    fn every_pdu_round_trips() {
        for v in [0, 1] {
            roundtrip(
                v,
                Pdu::SerialNotify {
                    session: 7,
                    serial: 9,
                },
            );
            roundtrip(
                v,
                Pdu::SerialQuery {
                    session: 7,
                    serial: u32::MAX,
                },
            );
            roundtrip(v, Pdu::ResetQuery);
            roundtrip(v, Pdu::CacheResponse { session: 0xbeef });
            roundtrip(v, Pdu::CacheReset);
            roundtrip(
                v,
                Pdu::Ipv4Prefix(PrefixPdu {
                    announce: true,
                    addr: Ipv4Addr::new(192, 0, 2, 0),
                    len: 24,
                    max_len: 24,
                    asn: 65001,
                }),
            );
            roundtrip(
                v,
                Pdu::Ipv6Prefix(PrefixPdu {
                    announce: false,
                    addr: "2001:db8::".parse().unwrap(),
                    len: 32,
                    max_len: 48,
                    asn: 4_200_000_000,
                }),
            );
            roundtrip(
                v,
                Pdu::ErrorReport {
                    code: 4,
                    pdu: vec![1, 2, 0, 0, 0, 0, 0, 8],
                    text: "no".into(),
                },
            );
        }
        roundtrip(
            0,
            Pdu::EndOfData {
                session: 1,
                serial: 2,
                timers: None,
            },
        );
        roundtrip(
            1,
            Pdu::EndOfData {
                session: 1,
                serial: 2,
                timers: Some(Timers {
                    refresh: 3600,
                    retry: 600,
                    expire: 7200,
                }),
            },
        );
    }

    /// Byte fixtures written from the RFC 8210 §5 diagrams.
    #[test]
    fn rfc_8210_byte_fixtures() {
        let mut b = Vec::new();
        Pdu::ResetQuery.encode(1, &mut b);
        assert_eq!(b, [1, 2, 0, 0, 0, 0, 0, 8]);
        b.clear();
        Pdu::SerialQuery {
            session: 0x1234,
            serial: 0x0102_0304,
        }
        .encode(1, &mut b);
        assert_eq!(b, [1, 1, 0x12, 0x34, 0, 0, 0, 12, 1, 2, 3, 4]);
        // IPv4 Prefix: announce 10.0.0.0/8-24 AS 65000 (0xfde8).
        let v4 = [
            1, 4, 0, 0, 0, 0, 0, 20, 1, 8, 24, 0, 10, 0, 0, 0, 0, 0, 0xfd, 0xe8,
        ];
        let (_, p, n) = decode(&v4).unwrap().unwrap();
        assert_eq!(n, 20);
        assert_eq!(
            p,
            Pdu::Ipv4Prefix(PrefixPdu {
                announce: true,
                addr: Ipv4Addr::new(10, 0, 0, 0),
                len: 8,
                max_len: 24,
                asn: 65000
            })
        );
        // Version 1 End of Data: session 5, serial 6, 3600/600/7200.
        let eod = [
            1, 7, 0, 5, 0, 0, 0, 24, 0, 0, 0, 6, 0, 0, 0x0e, 0x10, 0, 0, 0x02, 0x58, 0, 0, 0x1c,
            0x20,
        ];
        assert_eq!(
            decode(&eod).unwrap().unwrap().1,
            Pdu::EndOfData {
                session: 5,
                serial: 6,
                timers: Some(Timers {
                    refresh: 3600,
                    retry: 600,
                    expire: 7200
                })
            }
        );
        // Version 0 End of Data has no timers.
        let eod0 = [0, 7, 0, 5, 0, 0, 0, 12, 0, 0, 0, 6];
        assert_eq!(
            decode(&eod0).unwrap().unwrap(),
            (
                0,
                Pdu::EndOfData {
                    session: 5,
                    serial: 6,
                    timers: None
                },
                12
            )
        );
    }

    #[test]
    fn malformed_pdus_are_rejected() {
        assert_eq!(decode(&[3, 2, 0, 0, 0, 0, 0, 8]), Err(PduError::Version(3)));
        assert_eq!(decode(&[1, 5, 0, 0, 0, 0, 0, 8]), Err(PduError::Kind(5)));
        assert!(matches!(
            decode(&[1, 2, 0, 0, 0, 0, 0, 12, 0, 0, 0, 0]),
            Err(PduError::Length { .. })
        ));
        assert!(matches!(
            decode(&[1, 2, 0, 0, 0, 0, 0, 4]),
            Err(PduError::Length { .. })
        ));
        // Max length below the prefix length.
        let bad = [
            1, 4, 0, 0, 0, 0, 0, 20, 1, 24, 16, 0, 10, 0, 0, 0, 0, 0, 0, 1,
        ];
        assert!(matches!(decode(&bad), Err(PduError::Corrupt(_))));
        // Router Key (v1) is skipped, not an error.
        let mut rk = vec![1, 9, 0, 0, 0, 0, 0, 40];
        rk.extend_from_slice(&[0; 32]);
        assert_eq!(decode(&rk).unwrap().unwrap().1, Pdu::Other { kind: 9 });
        assert_eq!(PduError::Version(3).code(), error_code::UNSUPPORTED_VERSION);
    }
}
