//! RPKI origin validation for holdfastd: the RPKI to Router protocol and
//! the VRP table, pure and without I/O.
//!
//! - [`pdu`]: the RTR PDU codec, RFC 8210 (version 1) and RFC 6810
//!   (version 0).
//! - [`client`]: the router side of RTR as a pure core
//!   (`Client::handle(now, input) -> outputs`): Reset and Serial Query,
//!   Cache Response, IPv4/IPv6 Prefix, End of Data with the version 1
//!   timers, Cache Reset, Serial Notify, Error Report, version fallback
//!   (RFC 8210 §7), refresh and expire (RFC 8210 §6).
//! - [`vrp`]: VRPs and RFC 6811 origin validation (`valid`, `invalid`,
//!   `not-found`).
//!
//! # Known issues
//! - Router Key (RFC 8210 §5.10) and ASPA PDUs are skipped: no BGPsec or
//!   ASPA validation.
//! - Transport is plain TCP (RFC 8210 §9.1 allows it on a trusted
//!   network); no SSH or TLS transport.

pub mod client;
pub mod pdu;
pub mod vrp;

pub use client::{Client, ClientConfig, Input, Output, Status, VrpUpdate};
pub use pdu::{Pdu, PduError, Timers};
pub use vrp::{changed_prefixes, Validity, Vrp, VrpTable};
