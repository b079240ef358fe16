//! `holdfast-neighbor`: everything a BGP neighbour decides, with no I/O and
//! no Tokio, and the recording and replay of those decisions.
//!
//! - [`core`]: the pure [`PeerCore`], `handle(now, PeerInput) ->
//!   Vec<PeerOutput>`, which owns a neighbour's two FSM slots (RFC 4271
//!   §6.8 collisions, RFC 4724 restarts, RFC 4486 max-prefix, RFC 5882 BFD,
//!   RFC 2918 ROUTE-REFRESH and its pending requests, the NSR resume and
//!   the RIB output held until it). `holdfastd`'s peer task
//!   (holdfast-speaker's `peer.rs`) is its I/O shell.
//! - [`record`]: `holdfastd --record DIR` writes each neighbour's inputs and
//!   outputs as JSON lines; [`replay`] (`holdfast replay FILE`) feeds them
//!   through a fresh core and reports the first output that differs.
//!
//! # Known issues
//! - None known beyond those of each module.

#![forbid(unsafe_code)]

pub mod core;
pub mod record;

pub use crate::core::{Message, PeerCore, PeerInput, PeerOutput, PeerParams, RibBytes, Which};
pub use crate::record::{replay, Recorder, ReplayReport, RECORD_SCHEMA};
