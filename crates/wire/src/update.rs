//! UPDATE decoding (RFC 4271 §4.3, §6.3) with RFC 7606 revised error
//! handling, RFC 4760 multiprotocol NLRI and RFC 4724 End-of-RIB detection.
//!
//! ```text
//! +-----------------------------------------------------+
//! |   Withdrawn Routes Length (2 octets)                |
//! +-----------------------------------------------------+
//! |   Withdrawn Routes (variable)                       |
//! +-----------------------------------------------------+
//! |   Total Path Attribute Length (2 octets)            |
//! +-----------------------------------------------------+
//! |   Path Attributes (variable)                        |
//! +-----------------------------------------------------+
//! |   Network Layer Reachability Information (variable) |
//! +-----------------------------------------------------+
//! ```

use crate::attrs::{parse_attrs, Verdict};
use crate::error::{update_subcode, DecodeError, DecodeErrorKind, Rfc7606Action};
use crate::nlri::decode_prefixes;
use crate::types::{attr_type, Afi, Family, Safi, Update};
use crate::CodecCtx;

/// A decoded UPDATE and the RFC 7606 action the receiver must take.
///
/// On `TreatAsWithdraw`, every announced prefix (including MP_REACH_NLRI
/// ones) has already been moved into `update.withdrawn` and `update.attrs`
/// is `None`, so callers just apply the update.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UpdateOutcome {
    pub update: Update,
    pub action: Rfc7606Action,
    /// Type codes of attributes that were discarded.
    pub discarded: Vec<u8>,
    /// Human-readable cause of `action`, for logging.
    pub reason: Option<String>,
}

fn malformed_list(what: &'static str) -> DecodeError {
    DecodeError::update(
        update_subcode::MALFORMED_ATTRIBUTE_LIST,
        Vec::new(),
        DecodeErrorKind::MalformedAttributeList(what),
    )
}

fn invalid_network(what: &'static str) -> DecodeError {
    DecodeError::update(
        update_subcode::INVALID_NETWORK_FIELD,
        Vec::new(),
        DecodeErrorKind::InvalidNetworkField(what),
    )
}

/// Decode an UPDATE body (after the 19-byte header). `Err` means session
/// reset; every other RFC 7606 outcome is reported in the `Ok` value.
pub fn decode_update(body: &[u8], ctx: &CodecCtx) -> Result<UpdateOutcome, DecodeError> {
    if body.len() < 4 {
        return Err(malformed_list("UPDATE shorter than its length fields"));
    }
    let wlen = u16::from_be_bytes([body[0], body[1]]) as usize;
    if 4 + wlen > body.len() {
        return Err(malformed_list(
            "Withdrawn Routes Length exceeds the message",
        ));
    }
    let withdrawn_field = &body[2..2 + wlen];
    let tal = u16::from_be_bytes([body[2 + wlen], body[3 + wlen]]) as usize;
    let attr_start = 4 + wlen;
    if attr_start + tal > body.len() {
        return Err(malformed_list(
            "Total Path Attribute Length exceeds the message",
        ));
    }
    let attr_block = &body[attr_start..attr_start + tal];
    let nlri_field = &body[attr_start + tal..];

    let mut update = Update::default();
    // RFC 7606 §3.f / §5.3: syntax errors in either NLRI field reset.
    decode_prefixes(Afi::Ipv4, withdrawn_field, &mut update.withdrawn).map_err(invalid_network)?;
    let mut verdict = Verdict::default();
    let mut parsed = parse_attrs(attr_block, ctx, &mut verdict)?;
    decode_prefixes(Afi::Ipv4, nlri_field, &mut update.announced).map_err(invalid_network)?;

    // RFC 4724 §2: End-of-RIB markers.
    if body.len() == 4 {
        update.end_of_rib = Some(Family::IPV4_UNICAST);
        return Ok(UpdateOutcome {
            update,
            action: Rfc7606Action::None,
            discarded: Vec::new(),
            reason: None,
        });
    }
    if let (Some((afi, safi)), true, true) = (parsed.eor, wlen == 0, nlri_field.is_empty()) {
        if let Some(afi) = Afi::from_code(afi) {
            update.end_of_rib = Some(Family {
                afi,
                safi: Safi::from_code(safi),
            });
            return Ok(UpdateOutcome {
                update,
                action: Rfc7606Action::None,
                discarded: Vec::new(),
                reason: None,
            });
        }
    }

    let classic_nlri = !update.announced.is_empty();
    let mp_nlri = !parsed.mp_announced.is_empty();
    update.withdrawn.append(&mut parsed.mp_withdrawn);
    update.announced.append(&mut parsed.mp_announced);

    // RFC 7606 §5.2 (missing well-known mandatory attributes; NEXT_HOP is
    // only needed for the classic NLRI field per RFC 4760 §3), and
    // RFC 4271 §6.3 semantic NEXT_HOP check ("route SHOULD be ignored").
    if classic_nlri || mp_nlri {
        if parsed.attrs.origin.is_none() {
            verdict.withdraw(attr_type::ORIGIN, "missing well-known attribute ORIGIN");
        }
        if !parsed.has_as_path {
            verdict.withdraw(attr_type::AS_PATH, "missing well-known attribute AS_PATH");
        }
        if classic_nlri && !parsed.has_next_hop {
            verdict.withdraw(attr_type::NEXT_HOP, "missing well-known attribute NEXT_HOP");
        }
        if classic_nlri && parsed.martian_next_hop {
            verdict.withdraw(
                attr_type::NEXT_HOP,
                "NEXT_HOP is not a unicast host address",
            );
        }
    }

    let action = verdict.action();
    if action == Rfc7606Action::TreatAsWithdraw {
        update.withdrawn.append(&mut update.announced);
        update.attrs = None;
    } else if parsed.any_path_attr {
        update.attrs = Some(parsed.attrs);
    }
    Ok(UpdateOutcome {
        update,
        action,
        discarded: verdict.discarded,
        reason: verdict.reason,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::{Prefix, Prefix4};

    const CTX: CodecCtx = CodecCtx {
        four_octet_as: true,
        ibgp: false,
    };

    fn v4(a: [u8; 4], len: u8) -> Prefix {
        Prefix::V4(Prefix4 {
            addr: u32::from_be_bytes(a),
            len,
        })
    }

    #[test]
    fn classic_update_fields() {
        let body = [
            0, 3, 16, 10, 1, // withdrawn 10.1.0.0/16
            0, 20, // attrs
            0x40, 1, 1, 2, // ORIGIN incomplete
            0x40, 2, 6, 2, 1, 0, 0, 0xfd, 0xe9, // AS_PATH 65001
            0x40, 3, 4, 192, 0, 2, 1, // NEXT_HOP
            24, 198, 51, 100, // NLRI
        ];
        let o = decode_update(&body, &CTX).unwrap();
        assert_eq!(o.action, Rfc7606Action::None);
        assert_eq!(o.update.withdrawn, vec![v4([10, 1, 0, 0], 16)]);
        assert_eq!(o.update.announced, vec![v4([198, 51, 100, 0], 24)]);
        let a = o.update.attrs.unwrap();
        assert_eq!(a.as_path.first_as(), Some(65001));
        assert_eq!(a.next_hop, Some(std::net::Ipv4Addr::new(192, 0, 2, 1)));
    }

    #[test]
    fn pure_withdrawal_has_no_attrs() {
        let o = decode_update(&[0, 2, 8, 10, 0, 0], &CTX).unwrap();
        assert_eq!(o.update.withdrawn, vec![v4([10, 0, 0, 0], 8)]);
        assert!(o.update.attrs.is_none() && o.update.end_of_rib.is_none());
        // MP_UNREACH only: still no attributes, and not an End-of-RIB.
        let o = decode_update(&[0, 0, 0, 6, 0x80, 15, 3, 0, 1, 1, 0, 0, 0], &CTX);
        assert!(o.is_ok());
        let o = decode_update(&[0, 0, 0, 7, 0x80, 15, 4, 0, 2, 1, 0], &CTX).unwrap();
        assert_eq!(o.update.withdrawn.len(), 1);
        assert!(o.update.attrs.is_none() && o.update.end_of_rib.is_none());
    }

    #[test]
    fn treat_as_withdraw_moves_everything() {
        // ORIGIN missing, classic NLRI and IPv4 MP_REACH NLRI.
        let body = [
            0, 0, 0, 24, //
            0x80, 14, 11, 0, 1, 1, 4, 192, 0, 2, 1, 0, 8, 11, // MP_REACH 11.0.0.0/8
            0x40, 2, 0, // empty AS_PATH
            0x40, 3, 4, 192, 0, 2, 1, // NEXT_HOP
            8, 12,
        ];
        let o = decode_update(&body, &CTX).unwrap();
        assert_eq!(o.action, Rfc7606Action::TreatAsWithdraw);
        assert_eq!(
            o.update.withdrawn,
            vec![v4([12, 0, 0, 0], 8), v4([11, 0, 0, 0], 8)]
        );
        assert!(o.update.announced.is_empty() && o.update.attrs.is_none());
        assert!(o.reason.unwrap().contains("ORIGIN"));
    }
}
