//! Holdfast wire codec: BGP-4 messages (RFC 4271) and the extensions real
//! peers negotiate.
//!
//! The data model is in [`types`]; it is shared by every other crate. The
//! codec is pure (no I/O) and deterministic.
//!
//! RFCs covered:
//! - RFC 4271 BGP-4: header, OPEN, UPDATE, NOTIFICATION, KEEPALIVE, §6 errors.
//! - RFC 7606 revised UPDATE error handling (treat-as-withdraw,
//!   attribute-discard, session reset).
//! - RFC 5492 capabilities; RFC 9072 extended optional parameters length.
//! - RFC 4760 multiprotocol (MP_REACH_NLRI / MP_UNREACH_NLRI), RFC 2545 IPv6
//!   next hops, RFC 8950 extended next hop capability.
//! - RFC 6793 4-octet AS numbers (AS4_PATH / AS4_AGGREGATOR).
//! - RFC 4724 graceful restart capability and End-of-RIB; RFC 8538 N bit.
//! - RFC 2918 / RFC 7313 ROUTE-REFRESH and enhanced route refresh.
//! - RFC 1997 communities, RFC 4360 extended communities, RFC 8092 large
//!   communities, RFC 4456 ORIGINATOR_ID / CLUSTER_LIST, RFC 7911 ADD-PATH
//!   capability (capability only), draft-walton-bgp-hostname FQDN capability.
//!
//! UPDATEs produced by the packers put MP_REACH_NLRI / MP_UNREACH_NLRI first
//! and carry one kind of NLRI per message, as RFC 7606 §5.1 requires (BIRD
//! and FRR do the same); the other attributes are in ascending type order.
//!
//! # Known issues
//! - ADD-PATH NLRI (RFC 7911) is not decoded or encoded; only the capability
//!   is parsed. RFC 8654 extended messages are not supported.
//! - ORF entries (RFC 5291) in ROUTE-REFRESH are ignored.
//! - `pack_announce` writes nothing (returns 0) when the attribute block alone
//!   leaves no room for a prefix, or for IPv6 without a next hop.
//! - Only IPv4/IPv6 unicast NLRI are decoded; NLRI of other AFI/SAFIs in
//!   MP_REACH/MP_UNREACH are skipped without error.
//! - NEXT_HOP checks needing local state (own address, shared subnet for
//!   eBGP) are the caller's; 0.0.0.0, multicast and broadcast NEXT_HOPs with
//!   NLRI are treated as withdraw.
//! - `encode_attrs` emits LOCAL_PREF whenever set; stripping it towards
//!   external peers is the caller's policy.
//! - On 2-octet AS sessions, 4-octet ASes inside confederation segments go
//!   out as AS_TRANS (AS4_PATH carries no confederation segments, RFC 6793
//!   §3), so decode → encode → decode is exact only for 4-octet sessions.
//! - `DecodeError::action` is always `SessionReset`; ROUTE-REFRESH errors that
//!   must only be ignored are flagged by `DecodeError::is_ignorable`.
//! - `encode_update` of an `Update` with nothing in it writes an empty UPDATE,
//!   which is the IPv4 End-of-RIB marker.

pub mod types;
pub use types::*;

mod attrs;
pub mod bmp;
mod encode;
pub mod error;
mod header;
pub mod mrt;
mod nlri;
mod notification;
mod open;
mod update;

pub use encode::{
    encode_attrs, encode_end_of_rib, encode_message, encode_update, pack_announce, pack_withdraw,
};
pub use error::{DecodeError, DecodeErrorKind, Rfc7606Action};
pub use header::{decode_message, encode_keepalive, frame, HEADER_LEN, MAX_MESSAGE_LEN};
pub use nlri::{decode_prefixes, encode_prefix};
pub use notification::{
    decode_notification, decode_route_refresh, encode_notification, encode_route_refresh,
};
pub use open::{decode_open, encode_open};
pub use update::{decode_update, UpdateOutcome};

/// Per-session codec parameters, derived from the negotiated OPENs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub struct CodecCtx {
    /// Both sides sent the 4-octet AS capability (RFC 6793).
    pub four_octet_as: bool,
    /// The peer is internal (affects RFC 7606 handling of LOCAL_PREF).
    pub ibgp: bool,
}
