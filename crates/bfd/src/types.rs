//! Plain data exchanged with the session machine: configuration, inputs,
//! outputs and the state a backup resumes from.

use crate::packet::{AuthError, AuthType, DecodeError, Diag, State};
use serde::{Deserialize, Serialize};
use thiserror::Error;

/// Monotonic time as a serde-able input (duration since an arbitrary epoch
/// chosen by the daemon).
pub type Time = std::time::Duration;

/// Slowest rate a session may advertise while not Up (RFC 5880 §6.8.3):
/// Desired Min TX is at least one second.
pub const SLOW_TX_US: u32 = 1_000_000;

/// Authentication of a session (RFC 5880 §6.7): one key.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuthConfig {
    pub auth_type: AuthType,
    pub key_id: u8,
    /// The password (1–16 octets) or the key (up to 16 octets for MD5, 20
    /// for SHA1).
    pub key: Vec<u8>,
}

/// Per-session settings (RFC 5880 §6.8.1 state variables the operator
/// chooses). Intervals are in microseconds, as on the wire.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionConfig {
    /// bfd.DesiredMinTxInterval while Up (advertised as at least one
    /// second while not Up).
    pub desired_min_tx_us: u32,
    /// bfd.RequiredMinRxInterval; zero asks the peer not to send.
    pub required_min_rx_us: u32,
    /// bfd.DetectMult, at least 1.
    pub detect_mult: u8,
    /// Passive role (§6.1): send nothing until the peer is heard.
    pub passive: bool,
    pub auth: Option<AuthConfig>,
}

impl Default for SessionConfig {
    /// 300 ms × 3, active, no authentication.
    fn default() -> Self {
        SessionConfig {
            desired_min_tx_us: 300_000,
            required_min_rx_us: 300_000,
            detect_mult: 3,
            passive: false,
            auth: None,
        }
    }
}

/// What the session is fed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Input {
    /// A control packet received for this session (the UDP payload). The
    /// daemon chooses the session by Your Discriminator, or by addresses
    /// when it is zero (§6.8.6); the session decodes, authenticates and
    /// checks the discriminator itself.
    Received(Vec<u8>),
    /// Fire every timer due at `now` (transmission, detection); deliver
    /// at [`crate::Session::next_deadline`]. Early or repeated calls are
    /// harmless.
    Timer,
    /// Take the session administratively down (§6.8.16).
    AdminDown,
    /// Let an administratively down session come up again.
    AdminUp,
    /// New settings. While Up, a change of Desired Min TX or Required Min
    /// RX starts a Poll Sequence (§6.8.3). Settings that fail
    /// [`SessionConfig::validate`] are refused with a warning.
    Configure(SessionConfig),
    /// The path to the peer is in place: a resumed session's source
    /// address has moved to this host ([`crate::Session::resume`]), and its
    /// detection timer runs from now. Harmless when it already runs.
    PathReady,
}

/// What the daemon carries out, in order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Output {
    /// Send this control packet (UDP payload) to the peer.
    Send(Vec<u8>),
    /// The session changed state; `diag` is the new bfd.LocalDiag.
    StateChanged { from: State, to: State, diag: Diag },
    /// A Poll Sequence ended with the peer's Final: the intervals it
    /// carried are in use.
    PollComplete,
    /// A received packet was discarded.
    Dropped(DropReason),
}

/// Why a received packet was discarded (RFC 5880 §6.8.6, §6.7).
#[derive(Debug, Clone, PartialEq, Eq, Error, Serialize, Deserialize)]
pub enum DropReason {
    #[error("{0}")]
    Decode(#[from] DecodeError),
    #[error("Your Discriminator {got} is not ours ({ours})")]
    YourDiscriminator { got: u32, ours: u32 },
    #[error("A bit set but no authentication configured")]
    UnexpectedAuth,
    #[error("authentication failed: {0}")]
    Auth(#[from] AuthError),
    #[error("sequence number {seq} outside the window after {last}")]
    Sequence { seq: u32, last: u32 },
    #[error("session is administratively down")]
    AdminDown,
}

/// The replicated state of a session (issue 10, non-stop BFD): what a
/// backup needs to resume it with [`crate::Session::resume`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResumeState {
    pub state: State,
    pub local_diag: Diag,
    pub local_discriminator: u32,
    pub remote_discriminator: u32,
    /// bfd.DesiredMinTxInterval and bfd.RequiredMinRxInterval as last
    /// advertised (after any Poll Sequence that completed).
    pub desired_min_tx_us: u32,
    pub required_min_rx_us: u32,
    /// The peer's last advertised values.
    pub remote_detect_mult: u8,
    pub remote_desired_min_tx_us: u32,
    pub remote_min_rx_us: u32,
    /// Next sequence number to send (bfd.XmitAuthSeq). The peer accepts
    /// a number from the last one it saw (keyed; one after it when
    /// meticulous) to 3 × Detect Mult past it (§6.7.3, §6.7.4). Keyed MD5
    /// and SHA1 advance it only when the packet's content changes, so a
    /// value replicated on change is exact; with the meticulous types it
    /// advances on every packet and must be replicated close enough to
    /// land in that window.
    pub xmit_auth_seq: u32,
    /// Last sequence number accepted (bfd.RcvAuthSeq), if known. `None`
    /// (bfd.AuthSeqKnown = 0) accepts the peer's next number whatever it
    /// is; a replicated value older than the peer's window makes the
    /// backup drop the peer's packets until twice the detection time.
    pub rcv_auth_seq: Option<u32>,
    /// bfd.DetectMult this session advertises (0 in records written before
    /// it was replicated: unknown).
    #[serde(default)]
    pub detect_mult: u8,
    /// The authentication the session sends with, without its key (so that
    /// a relay holding the key can send what the session sends).
    #[serde(default)]
    pub auth: Option<AuthRef>,
}

/// Which authentication a session uses: the type and key ID of its
/// [`AuthConfig`], never the key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuthRef {
    pub auth_type: AuthType,
    pub key_id: u8,
}
