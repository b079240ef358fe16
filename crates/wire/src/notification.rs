//! NOTIFICATION (RFC 4271 §4.5) and ROUTE-REFRESH (RFC 2918 §3, RFC 7313 §3).

use crate::error::{error_code, route_refresh_subcode, DecodeError, DecodeErrorKind};
use crate::header::{begin_message, finish_header, HEADER_LEN, MAX_MESSAGE_LEN};
use crate::types::{msg_type, Afi, Family, Notification, RouteRefresh, Safi};

// NOTIFICATION body:
//  0                   1                   2                   3
//  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
// | Error code    | Error subcode |   Data (variable)             |
// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+

/// Decode a NOTIFICATION body (after the 19-byte header).
pub fn decode_notification(body: &[u8]) -> Result<Notification, DecodeError> {
    match body {
        [code, subcode, data @ ..] => Ok(Notification {
            code: *code,
            subcode: *subcode,
            data: data.to_vec(),
        }),
        _ => Err(DecodeError::new(
            error_code::MESSAGE_HEADER,
            crate::error::header_subcode::BAD_MESSAGE_LENGTH,
            ((body.len() + HEADER_LEN) as u16).to_be_bytes().to_vec(),
            DecodeErrorKind::MalformedNotification,
        )),
    }
}

/// Append a NOTIFICATION. Data beyond the 4096-byte message limit is cut.
pub fn encode_notification(n: &Notification, out: &mut Vec<u8>) {
    let s = begin_message(out, msg_type::NOTIFICATION);
    out.push(n.code);
    out.push(n.subcode);
    let room = MAX_MESSAGE_LEN - HEADER_LEN - 2;
    out.extend_from_slice(&n.data[..n.data.len().min(room)]);
    finish_header(out, s);
}

// ROUTE-REFRESH body:
//  0       7      15      23      31
// +-------+-------+-------+-------+
// |      AFI      | Subtyp|  SAFI |
// +-------+-------+-------+-------+

/// Decode a ROUTE-REFRESH body. An AFI other than IPv4/IPv6 or an unknown
/// subtype yields an error for which [`DecodeError::is_ignorable`] is true.
pub fn decode_route_refresh(body: &[u8]) -> Result<RouteRefresh, DecodeError> {
    let bad_len = || {
        let len = (body.len() + HEADER_LEN).min(u16::MAX as usize) as u16;
        DecodeError::new(
            error_code::ROUTE_REFRESH,
            route_refresh_subcode::INVALID_MESSAGE_LENGTH,
            body.to_vec(),
            DecodeErrorKind::BadRouteRefreshLength(len),
        )
    };
    if body.len() < 4 {
        return Err(bad_len());
    }
    let afi = u16::from_be_bytes([body[0], body[1]]);
    let subtype = body[2];
    // RFC 7313 §5: BoRR/EoRR must be exactly 4 octets; a normal request may
    // carry ORF entries (RFC 5291), which we ignore.
    if subtype != 0 && body.len() != 4 {
        return Err(bad_len());
    }
    let ignorable = || {
        DecodeError::new(
            error_code::ROUTE_REFRESH,
            0,
            Vec::new(),
            DecodeErrorKind::IgnorableRouteRefresh { afi, subtype },
        )
    };
    if subtype > 2 {
        return Err(ignorable());
    }
    let afi_v = Afi::from_code(afi).ok_or_else(ignorable)?;
    Ok(RouteRefresh {
        family: Family {
            afi: afi_v,
            safi: Safi::from_code(body[3]),
        },
        subtype,
    })
}

/// Append a ROUTE-REFRESH.
pub fn encode_route_refresh(r: &RouteRefresh, out: &mut Vec<u8>) {
    let s = begin_message(out, msg_type::ROUTE_REFRESH);
    out.extend_from_slice(&r.family.afi.code().to_be_bytes());
    out.push(r.subtype);
    out.push(r.family.safi.code());
    finish_header(out, s);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{decode_message, CodecCtx, Message};

    #[test]
    fn notification_round_trip() {
        let n = Notification {
            code: 6,
            subcode: 2,
            data: b"shutdown".to_vec(),
        };
        let mut v = Vec::new();
        encode_notification(&n, &mut v);
        assert_eq!(v.len(), 19 + 2 + 8);
        assert_eq!(
            decode_message(&v, &CodecCtx::default()).unwrap(),
            Message::Notification(n)
        );
    }

    #[test]
    fn notification_too_short() {
        assert!(decode_notification(&[6]).is_err());
    }

    #[test]
    fn oversized_notification_data_is_cut() {
        let n = Notification {
            code: 3,
            subcode: 1,
            data: vec![7; 5000],
        };
        let mut v = Vec::new();
        encode_notification(&n, &mut v);
        assert_eq!(v.len(), MAX_MESSAGE_LEN);
        assert!(crate::frame(&v).unwrap().is_some());
    }

    #[test]
    fn route_refresh_round_trip() {
        for (family, subtype) in [
            (Family::IPV4_UNICAST, 0),
            (Family::IPV6_UNICAST, 1),
            (Family::IPV6_UNICAST, 2),
        ] {
            let r = RouteRefresh { family, subtype };
            let mut v = Vec::new();
            encode_route_refresh(&r, &mut v);
            assert_eq!(v.len(), 23);
            assert_eq!(
                decode_message(&v, &CodecCtx::default()).unwrap(),
                Message::RouteRefresh(r)
            );
        }
    }

    #[test]
    fn route_refresh_errors() {
        let e = decode_route_refresh(&[0, 2, 1, 1, 0]).unwrap_err();
        assert_eq!((e.code, e.subcode), (7, 1));
        assert!(!e.is_ignorable());
        assert!(decode_route_refresh(&[0, 25, 0, 65])
            .unwrap_err()
            .is_ignorable());
        assert!(decode_route_refresh(&[0, 1, 3, 1])
            .unwrap_err()
            .is_ignorable());
        assert!(decode_route_refresh(&[0, 1, 0]).is_err());
        // ORF entries after a normal request are tolerated.
        assert_eq!(
            decode_route_refresh(&[0, 1, 0, 1, 1, 0, 0]).unwrap().family,
            Family::IPV4_UNICAST
        );
    }
}
