//! Holdfast BFD: the RFC 5880 control packet codec and session machine.
//!
//! A pure library, in the style of `holdfast-fsm`: no I/O, no clocks, no
//! threads. Time is an input ([`Time`]); the daemon feeds [`Input`]s to
//! [`Session::handle`], delivers [`Input::Timer`] at
//! [`Session::next_deadline`], and carries out the returned [`Output`]s
//! (sending packets, telling BGP the session went down). Randomness (the
//! TX jitter, the first authentication sequence number) comes from a
//! deterministic generator seeded at construction and kept in the session,
//! so [`Session`] — serde-serialisable as a whole — replays exactly. Every
//! state change goes through one function, which emits
//! [`Output::StateChanged`] and a `tracing::info!` event with `from`, `to`
//! and `diag` fields. [`Session::resume`] restores a session from its
//! replicated [`ResumeState`] for non-stop BFD.
//!
//! # RFC sections covered
//! - RFC 5880 §4.1 (mandatory section), §4.2 (Simple Password), §4.3
//!   (Keyed and Meticulous Keyed MD5), §4.4 (Keyed and Meticulous Keyed
//!   SHA1): [`ControlPacket::decode`], [`ControlPacket::encode`], [`sign`],
//!   [`verify`].
//! - §6.8.6 reception checks: those of the codec (version, Length against
//!   the A bit and the payload, Detect Mult ≠ 0, M bit clear, My
//!   Discriminator ≠ 0, Your Discriminator zero only in Down or AdminDown)
//!   as [`DecodeError`]; those of the session (Your Discriminator ours,
//!   A bit against the configuration, authentication) as [`DropReason`];
//!   then the state table (the three-way handshake Down → Init → Up of
//!   §6.2) and the Poll/Final bits.
//! - §6.7.2–§6.7.4 authentication: password and digest checks, sequence
//!   numbers (meticulous: incremented on every packet; keyed: whenever the
//!   packet's content changes), receive windows, bfd.AuthSeqKnown cleared
//!   after twice the detection time without a packet.
//! - §6.8.1 state variables, §6.8.2 timer negotiation, §6.8.3 timer
//!   changes (Desired Min TX ≥ 1 s while not Up; a change while Up starts
//!   a Poll Sequence, a slower TX or faster RX applies when the Final
//!   arrives), §6.8.4 detection time (remote Detect Mult × the agreed
//!   interval), §6.8.7 transmission (jitter: 75–100% of the interval, 75–90%
//!   when Detect Mult is 1; Final answers at once; nothing periodic while
//!   the peer's Required Min RX is zero or, passive, before it is heard),
//!   §6.8.16 administrative control, §4.1 diagnostic codes.
//!
//! # Behaviour beyond or apart from RFC 5880
//! - A packet is sent at once on every state change and at the start of a
//!   Poll Sequence, as bird and frr do; the periodic timer restarts after it.
//! - An AdminDown session keeps sending AdminDown at the slow rate until
//!   the daemon drops it (§6.8.16 asks for at least a detection time).
//! - The sequence window of §6.7.3/§6.7.4 uses the received packet's
//!   Detect Mult.
//! - A change of Detect Mult applies at once, without a Poll.
//!
//! # Known issues
//! - No Echo function (Required Min Echo RX is always sent as zero and the
//!   peer's is ignored), no Demand mode (the D bit is never sent and the
//!   peer's is ignored), no multipoint (RFC 8562).
//! - One authentication key per session: no key rollover between key IDs.
//! - The C bit is always clear (this is a control-plane implementation).
//! - Resuming a session with meticulous authentication needs a replicated
//!   bfd.XmitAuthSeq within the peer's window (3 × Detect Mult packets);
//!   see [`ResumeState`].
//! - Session demultiplexing, UDP ports, TTL/hop-limit checks (RFC 5881,
//!   RFC 5883) and discriminator allocation are the daemon's.

#![forbid(unsafe_code)]

mod packet;
mod session;
mod types;

pub use packet::{
    sign, verify, Auth, AuthError, AuthType, ControlPacket, DecodeError, Diag, State,
    MANDATORY_LEN, MAX_PASSWORD_LEN, MD5_AUTH_LEN, MD5_KEY_LEN, SHA1_AUTH_LEN, SHA1_KEY_LEN,
    VERSION,
};
pub use session::{ConfigError, Session, SessionStats};
pub use types::{
    AuthConfig, AuthRef, DropReason, Input, Output, ResumeState, SessionConfig, Time, SLOW_TX_US,
};

#[cfg(test)]
mod tests;
