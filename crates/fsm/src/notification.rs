//! NOTIFICATION error codes and subcodes (RFC 4271 §4.5, RFC 4486,
//! RFC 6608, RFC 8538) and constructors for the ones the FSM sends.

use holdfast_wire::Notification;

pub use holdfast_wire::error::cease_subcode as cease;
pub use holdfast_wire::error::error_code::{
    CEASE, FSM as FSM_ERROR, HOLD_TIMER_EXPIRED, MESSAGE_HEADER as MESSAGE_HEADER_ERROR,
    OPEN_MESSAGE as OPEN_MESSAGE_ERROR, UPDATE_MESSAGE as UPDATE_MESSAGE_ERROR,
};
pub use holdfast_wire::error::fsm_subcode as fsm;
pub use holdfast_wire::error::open_subcode as open;

/// A NOTIFICATION with no data.
pub fn new(code: u8, subcode: u8) -> Notification {
    Notification {
        code,
        subcode,
        data: Vec::new(),
    }
}

/// Cease with the given subcode.
pub fn cease(subcode: u8) -> Notification {
    new(CEASE, subcode)
}

/// RFC 8538 Cease/Hard Reset: never triggers graceful restart.
pub fn is_hard_reset(n: &Notification) -> bool {
    n.code == CEASE && n.subcode == cease::HARD_RESET
}

/// Human-readable "Code/Subcode" text for logs and the CLI.
pub fn describe(n: &Notification) -> String {
    let code = match n.code {
        MESSAGE_HEADER_ERROR => "Message Header Error",
        OPEN_MESSAGE_ERROR => "OPEN Message Error",
        UPDATE_MESSAGE_ERROR => "UPDATE Message Error",
        HOLD_TIMER_EXPIRED => "Hold Timer Expired",
        FSM_ERROR => "Finite State Machine Error",
        CEASE => "Cease",
        _ => return format!("Unknown error {}/{}", n.code, n.subcode),
    };
    let sub = match (n.code, n.subcode) {
        (MESSAGE_HEADER_ERROR, 1) => "Connection Not Synchronized",
        (MESSAGE_HEADER_ERROR, 2) => "Bad Message Length",
        (MESSAGE_HEADER_ERROR, 3) => "Bad Message Type",
        (OPEN_MESSAGE_ERROR, open::UNSUPPORTED_VERSION) => "Unsupported Version Number",
        (OPEN_MESSAGE_ERROR, open::BAD_PEER_AS) => "Bad Peer AS",
        (OPEN_MESSAGE_ERROR, open::BAD_BGP_IDENTIFIER) => "Bad BGP Identifier",
        (OPEN_MESSAGE_ERROR, open::UNSUPPORTED_OPTIONAL_PARAMETER) => {
            "Unsupported Optional Parameter"
        }
        (OPEN_MESSAGE_ERROR, open::UNACCEPTABLE_HOLD_TIME) => "Unacceptable Hold Time",
        (OPEN_MESSAGE_ERROR, open::UNSUPPORTED_CAPABILITY) => "Unsupported Capability",
        (UPDATE_MESSAGE_ERROR, 1) => "Malformed Attribute List",
        (UPDATE_MESSAGE_ERROR, 2) => "Unrecognized Well-known Attribute",
        (UPDATE_MESSAGE_ERROR, 3) => "Missing Well-known Attribute",
        (UPDATE_MESSAGE_ERROR, 4) => "Attribute Flags Error",
        (UPDATE_MESSAGE_ERROR, 5) => "Attribute Length Error",
        (UPDATE_MESSAGE_ERROR, 6) => "Invalid ORIGIN Attribute",
        (UPDATE_MESSAGE_ERROR, 8) => "Invalid NEXT_HOP Attribute",
        (UPDATE_MESSAGE_ERROR, 9) => "Optional Attribute Error",
        (UPDATE_MESSAGE_ERROR, 10) => "Invalid Network Field",
        (UPDATE_MESSAGE_ERROR, 11) => "Malformed AS_PATH",
        (FSM_ERROR, fsm::UNEXPECTED_IN_OPENSENT) => "Unexpected Message in OpenSent",
        (FSM_ERROR, fsm::UNEXPECTED_IN_OPENCONFIRM) => "Unexpected Message in OpenConfirm",
        (FSM_ERROR, fsm::UNEXPECTED_IN_ESTABLISHED) => "Unexpected Message in Established",
        (CEASE, cease::MAX_PREFIXES) => "Maximum Number of Prefixes Reached",
        (CEASE, cease::ADMINISTRATIVE_SHUTDOWN) => "Administrative Shutdown",
        (CEASE, cease::PEER_DECONFIGURED) => "Peer De-configured",
        (CEASE, cease::ADMINISTRATIVE_RESET) => "Administrative Reset",
        (CEASE, cease::CONNECTION_REJECTED) => "Connection Rejected",
        (CEASE, cease::OTHER_CONFIGURATION_CHANGE) => "Other Configuration Change",
        (CEASE, cease::CONNECTION_COLLISION_RESOLUTION) => "Connection Collision Resolution",
        (CEASE, cease::OUT_OF_RESOURCES) => "Out of Resources",
        (CEASE, cease::HARD_RESET) => "Hard Reset",
        (_, 0) => return code.to_string(),
        _ => return format!("{code}/subcode {}", n.subcode),
    };
    format!("{code}/{sub}")
}
