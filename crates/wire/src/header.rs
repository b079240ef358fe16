//! Message header framing (RFC 4271 §4.1, §6.1) and whole-message decode.
//!
//! ```text
//!  0                   1                   2                   3
//!  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |                                                               |
//! +                                                               +
//! |                                                               |
//! +                                                               +
//! |                           Marker                              |
//! +                                                               +
//! |                                                               |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |          Length               |      Type     |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! ```

use crate::error::{error_code, header_subcode, DecodeError, DecodeErrorKind};
use crate::types::{msg_type, Message};
use crate::{decode_notification, decode_open, decode_route_refresh, decode_update, CodecCtx};

/// Length of the fixed message header.
pub const HEADER_LEN: usize = 19;
/// Largest BGP message without RFC 8654 extended messages.
pub const MAX_MESSAGE_LEN: usize = 4096;

/// Smallest legal total length per message type (RFC 4271 §4.2-§4.5,
/// RFC 2918 §3).
fn min_len(t: u8) -> Option<usize> {
    match t {
        msg_type::OPEN => Some(29),
        msg_type::UPDATE => Some(23),
        msg_type::NOTIFICATION => Some(21),
        msg_type::KEEPALIVE => Some(19),
        msg_type::ROUTE_REFRESH => Some(23),
        _ => None,
    }
}

/// Frame the next message: checks marker (all 0xff), length 19..=4096 and
/// per-type minimums (KEEPALIVE must be exactly 19).
///
/// `Ok(None)` if `buf` does not yet hold a whole message;
/// `Ok(Some((msg_type, total_len)))` otherwise.
pub fn frame(buf: &[u8]) -> Result<Option<(u8, usize)>, DecodeError> {
    let marker_seen = buf.len().min(16);
    if buf[..marker_seen].iter().any(|&b| b != 0xff) {
        return Err(DecodeError::new(
            error_code::MESSAGE_HEADER,
            header_subcode::CONNECTION_NOT_SYNCHRONIZED,
            Vec::new(),
            DecodeErrorKind::ConnectionNotSynchronized,
        ));
    }
    if buf.len() < HEADER_LEN {
        return Ok(None);
    }
    let len = u16::from_be_bytes([buf[16], buf[17]]);
    let t = buf[18];
    let total = len as usize;
    if !(HEADER_LEN..=MAX_MESSAGE_LEN).contains(&total) {
        return Err(DecodeError::bad_length(len));
    }
    let Some(min) = min_len(t) else {
        return Err(DecodeError::new(
            error_code::MESSAGE_HEADER,
            header_subcode::BAD_MESSAGE_TYPE,
            vec![t],
            DecodeErrorKind::BadMessageType(t),
        ));
    };
    if total < min || (t == msg_type::KEEPALIVE && total != HEADER_LEN) {
        return Err(DecodeError::bad_length(len));
    }
    if buf.len() < total {
        return Ok(None);
    }
    Ok(Some((t, total)))
}

/// Decode a whole message (header included). `msg` must hold exactly one
/// message.
pub fn decode_message(msg: &[u8], ctx: &CodecCtx) -> Result<Message, DecodeError> {
    let (t, total) = match frame(msg)? {
        Some(f) => f,
        None => {
            return Err(DecodeError::bad_length(
                msg.len().min(u16::MAX as usize) as u16
            ))
        }
    };
    if total != msg.len() {
        return Err(DecodeError::bad_length(total as u16));
    }
    let body = &msg[HEADER_LEN..];
    Ok(match t {
        msg_type::OPEN => Message::Open(decode_open(body)?),
        msg_type::UPDATE => Message::Update(decode_update(body, ctx)?.update),
        msg_type::NOTIFICATION => Message::Notification(decode_notification(body)?),
        msg_type::KEEPALIVE => Message::Keepalive,
        _ => Message::RouteRefresh(decode_route_refresh(body)?),
    })
}

/// Append a header with a placeholder length; returns the message start
/// offset for [`finish_header`].
pub(crate) fn begin_message(out: &mut Vec<u8>, t: u8) -> usize {
    let start = out.len();
    out.extend_from_slice(&[0xff; 16]);
    out.extend_from_slice(&[0, 0, t]);
    start
}

/// Patch the length field of the message started at `start`.
pub(crate) fn finish_header(out: &mut [u8], start: usize) {
    let len = (out.len() - start) as u16;
    out[start + 16..start + 18].copy_from_slice(&len.to_be_bytes());
}

/// KEEPALIVE: a bare header (RFC 4271 §4.4).
pub fn encode_keepalive(out: &mut Vec<u8>) {
    let s = begin_message(out, msg_type::KEEPALIVE);
    finish_header(out, s);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hdr(len: u16, t: u8) -> Vec<u8> {
        let mut v = vec![0xff; 16];
        v.extend_from_slice(&len.to_be_bytes());
        v.push(t);
        v
    }

    #[test]
    fn keepalive_frames() {
        let mut v = Vec::new();
        encode_keepalive(&mut v);
        assert_eq!(v, hdr(19, 4));
        assert_eq!(frame(&v).unwrap(), Some((4, 19)));
        assert_eq!(
            decode_message(&v, &CodecCtx::default()).unwrap(),
            Message::Keepalive
        );
    }

    #[test]
    fn partial_buffers_wait() {
        let v = hdr(23, 2);
        assert_eq!(frame(&v[..10]).unwrap(), None);
        assert_eq!(frame(&v).unwrap(), None);
        assert_eq!(frame(&[]).unwrap(), None);
    }

    #[test]
    fn bad_marker() {
        let mut v = hdr(19, 4);
        v[3] = 0;
        let e = frame(&v).unwrap_err();
        assert_eq!((e.code, e.subcode), (1, 1));
        assert!(frame(&v[..5]).is_err(), "marker checked on partial input");
    }

    #[test]
    fn bad_lengths() {
        for (len, t) in [
            (18u16, 4u8),
            (4097, 2),
            (20, 4),
            (28, 1),
            (22, 2),
            (20, 3),
            (22, 5),
        ] {
            let e = frame(&hdr(len, t)).unwrap_err();
            assert_eq!(
                (e.code, e.subcode, e.data.clone()),
                (1, 2, len.to_be_bytes().to_vec()),
                "{len} {t}"
            );
        }
    }

    #[test]
    fn bad_type() {
        let e = frame(&hdr(19, 9)).unwrap_err();
        assert_eq!((e.code, e.subcode, e.data), (1, 3, vec![9]));
    }

    #[test]
    fn decode_message_requires_exact_length() {
        let mut v = hdr(19, 4);
        v.push(0);
        assert!(decode_message(&v, &CodecCtx::default()).is_err());
        assert!(decode_message(&v[..10], &CodecCtx::default()).is_err());
    }
}
