//! Holdfast wire codec: BGP-4 messages (RFC 4271) and the extensions real
//! peers negotiate.
//!
//! The data model is in [`types`]; it is shared by every other crate.
pub mod types;
pub use types::*;
