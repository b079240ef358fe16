//! Decode errors and the RFC 7606 error-handling actions.
//!
//! Error codes and subcodes are those of RFC 4271 §4.5 / §6, RFC 5492 §5
//! (Unsupported Capability) and RFC 7313 §5 (ROUTE-REFRESH Message Error).

use crate::types::Notification;

/// NOTIFICATION error codes (RFC 4271 §4.5, RFC 7313 §5).
pub mod error_code {
    pub const MESSAGE_HEADER: u8 = 1;
    pub const OPEN_MESSAGE: u8 = 2;
    pub const UPDATE_MESSAGE: u8 = 3;
    pub const HOLD_TIMER_EXPIRED: u8 = 4;
    pub const FSM: u8 = 5;
    pub const CEASE: u8 = 6;
    pub const ROUTE_REFRESH: u8 = 7;
}

/// Message Header Error subcodes (RFC 4271 §6.1).
pub mod header_subcode {
    pub const CONNECTION_NOT_SYNCHRONIZED: u8 = 1;
    pub const BAD_MESSAGE_LENGTH: u8 = 2;
    pub const BAD_MESSAGE_TYPE: u8 = 3;
}

/// OPEN Message Error subcodes (RFC 4271 §6.2, RFC 5492 §5).
pub mod open_subcode {
    pub const UNSPECIFIC: u8 = 0;
    pub const UNSUPPORTED_VERSION: u8 = 1;
    pub const BAD_PEER_AS: u8 = 2;
    pub const BAD_BGP_IDENTIFIER: u8 = 3;
    pub const UNSUPPORTED_OPTIONAL_PARAMETER: u8 = 4;
    pub const UNACCEPTABLE_HOLD_TIME: u8 = 6;
    pub const UNSUPPORTED_CAPABILITY: u8 = 7;
}

/// UPDATE Message Error subcodes (RFC 4271 §6.3).
pub mod update_subcode {
    pub const MALFORMED_ATTRIBUTE_LIST: u8 = 1;
    pub const UNRECOGNIZED_WELL_KNOWN: u8 = 2;
    pub const MISSING_WELL_KNOWN: u8 = 3;
    pub const ATTRIBUTE_FLAGS: u8 = 4;
    pub const ATTRIBUTE_LENGTH: u8 = 5;
    pub const INVALID_ORIGIN: u8 = 6;
    pub const INVALID_NEXT_HOP: u8 = 8;
    pub const OPTIONAL_ATTRIBUTE: u8 = 9;
    pub const INVALID_NETWORK_FIELD: u8 = 10;
    pub const MALFORMED_AS_PATH: u8 = 11;
}

/// Finite State Machine Error subcodes (RFC 6608).
pub mod fsm_subcode {
    pub const UNSPECIFIED: u8 = 0;
    pub const UNEXPECTED_IN_OPENSENT: u8 = 1;
    pub const UNEXPECTED_IN_OPENCONFIRM: u8 = 2;
    pub const UNEXPECTED_IN_ESTABLISHED: u8 = 3;
}

/// Cease subcodes (RFC 4486, RFC 8538).
pub mod cease_subcode {
    pub const MAX_PREFIXES: u8 = 1;
    pub const ADMINISTRATIVE_SHUTDOWN: u8 = 2;
    pub const PEER_DECONFIGURED: u8 = 3;
    pub const ADMINISTRATIVE_RESET: u8 = 4;
    pub const CONNECTION_REJECTED: u8 = 5;
    pub const OTHER_CONFIGURATION_CHANGE: u8 = 6;
    pub const CONNECTION_COLLISION_RESOLUTION: u8 = 7;
    pub const OUT_OF_RESOURCES: u8 = 8;
    pub const HARD_RESET: u8 = 9;
    /// RFC 9384: the session's BFD session went Down.
    pub const BFD_DOWN: u8 = 10;
}

/// ROUTE-REFRESH Message Error subcodes (RFC 7313 §5).
pub mod route_refresh_subcode {
    pub const INVALID_MESSAGE_LENGTH: u8 = 1;
}

/// How a receiver must react to an UPDATE (RFC 7606 §2), weakest first.
///
/// `decode_update` reports the first three through
/// [`crate::UpdateOutcome::action`]; a session reset is always an `Err`
/// whose [`DecodeError::action`] is `SessionReset`.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
pub enum Rfc7606Action {
    /// The UPDATE was well formed.
    None,
    /// One or more attributes were dropped; the rest of the UPDATE applies.
    AttributeDiscard,
    /// Every announced prefix must be handled as withdrawn.
    TreatAsWithdraw,
    /// The session must be reset with the error's NOTIFICATION.
    SessionReset,
}

/// What went wrong, in a form callers can match on.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeErrorKind {
    #[error("marker is not all ones")]
    ConnectionNotSynchronized,
    #[error("bad message length {0}")]
    BadMessageLength(u16),
    #[error("bad message type {0}")]
    BadMessageType(u8),
    #[error("unsupported BGP version {0}")]
    UnsupportedVersion(u8),
    #[error("bad BGP identifier")]
    BadBgpIdentifier,
    #[error("unacceptable hold time {0}")]
    UnacceptableHoldTime(u16),
    #[error("unsupported optional parameter {0}")]
    UnsupportedOptionalParameter(u8),
    #[error("malformed optional parameters: {0}")]
    MalformedOptionalParameters(&'static str),
    #[error("malformed attribute list: {0}")]
    MalformedAttributeList(&'static str),
    #[error("unrecognized well-known attribute {0}")]
    UnrecognizedWellKnownAttribute(u8),
    #[error("malformed attribute {type_code}: {reason}")]
    MalformedMpAttribute { type_code: u8, reason: &'static str },
    #[error("invalid network field: {0}")]
    InvalidNetworkField(&'static str),
    #[error("malformed NOTIFICATION")]
    MalformedNotification,
    #[error("ROUTE-REFRESH length {0} invalid")]
    BadRouteRefreshLength(u16),
    /// RFC 2918 §4 / RFC 7313 §5: the message must be ignored, not answered.
    #[error("ROUTE-REFRESH for unsupported AFI {afi} / subtype {subtype}, ignore it")]
    IgnorableRouteRefresh { afi: u16, subtype: u8 },
}

/// A decode failure carrying the NOTIFICATION to send (RFC 4271 §6).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{kind} (NOTIFICATION {code}/{subcode})")]
pub struct DecodeError {
    pub code: u8,
    pub subcode: u8,
    pub data: Vec<u8>,
    pub kind: DecodeErrorKind,
}

impl DecodeError {
    pub(crate) fn new(code: u8, subcode: u8, data: Vec<u8>, kind: DecodeErrorKind) -> Self {
        DecodeError {
            code,
            subcode,
            data,
            kind,
        }
    }

    pub(crate) fn bad_length(len: u16) -> Self {
        DecodeError::new(
            error_code::MESSAGE_HEADER,
            header_subcode::BAD_MESSAGE_LENGTH,
            len.to_be_bytes().to_vec(),
            DecodeErrorKind::BadMessageLength(len),
        )
    }

    pub(crate) fn update(subcode: u8, data: Vec<u8>, kind: DecodeErrorKind) -> Self {
        DecodeError::new(error_code::UPDATE_MESSAGE, subcode, data, kind)
    }

    pub(crate) fn open(subcode: u8, data: Vec<u8>, kind: DecodeErrorKind) -> Self {
        DecodeError::new(error_code::OPEN_MESSAGE, subcode, data, kind)
    }

    /// The NOTIFICATION to send before closing the session.
    pub fn to_notification(&self) -> Notification {
        Notification {
            code: self.code,
            subcode: self.subcode,
            data: self.data.clone(),
        }
    }

    /// Every decode error means "session reset" (RFC 7606 §2), except a
    /// ROUTE-REFRESH that must merely be ignored (see [`Self::is_ignorable`]).
    pub fn action(&self) -> Rfc7606Action {
        Rfc7606Action::SessionReset
    }

    /// True when the message must be silently ignored instead of resetting
    /// the session (RFC 2918 §4 unknown AFI/SAFI, RFC 7313 §5 unknown subtype).
    pub fn is_ignorable(&self) -> bool {
        matches!(self.kind, DecodeErrorKind::IgnorableRouteRefresh { .. })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn notification_from_error() {
        let e = DecodeError::bad_length(5000);
        let n = e.to_notification();
        assert_eq!((n.code, n.subcode, n.data), (1, 2, vec![0x13, 0x88]));
        assert_eq!(e.action(), Rfc7606Action::SessionReset);
        assert!(!e.is_ignorable());
        assert!(e.to_string().contains("5000"));
    }

    #[test]
    fn actions_are_ordered_by_strength() {
        assert!(Rfc7606Action::None < Rfc7606Action::AttributeDiscard);
        assert!(Rfc7606Action::AttributeDiscard < Rfc7606Action::TreatAsWithdraw);
        assert!(Rfc7606Action::TreatAsWithdraw < Rfc7606Action::SessionReset);
    }
}
