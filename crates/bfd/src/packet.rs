//! The BFD Control packet (RFC 5880 §4): decode with the reception checks of
//! §6.8.6 that need no session, encode, and the digests of §6.7.

use md5::{Digest as _, Md5};
use serde::{Deserialize, Serialize};
use sha1::Sha1;
use std::fmt;
use thiserror::Error;

/// The protocol version this codec speaks (RFC 5880 §4.1).
pub const VERSION: u8 = 1;
/// Length of the mandatory section.
pub const MANDATORY_LEN: usize = 24;
/// Longest simple password (RFC 5880 §4.2).
pub const MAX_PASSWORD_LEN: usize = 16;
/// Length of a Keyed MD5 authentication section (RFC 5880 §4.3).
pub const MD5_AUTH_LEN: usize = 24;
/// Length of a Keyed SHA1 authentication section (RFC 5880 §4.4).
pub const SHA1_AUTH_LEN: usize = 28;
/// Longest Keyed MD5 key; shorter keys are padded with zeros.
pub const MD5_KEY_LEN: usize = 16;
/// Longest Keyed SHA1 key; shorter keys are padded with zeros.
pub const SHA1_KEY_LEN: usize = 20;

const FLAG_P: u8 = 0x20;
const FLAG_F: u8 = 0x10;
const FLAG_C: u8 = 0x08;
const FLAG_A: u8 = 0x04;
const FLAG_D: u8 = 0x02;
const FLAG_M: u8 = 0x01;

/// Session state (RFC 5880 §4.1, field Sta).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum State {
    AdminDown,
    Down,
    Init,
    Up,
}

impl State {
    pub const fn code(self) -> u8 {
        match self {
            State::AdminDown => 0,
            State::Down => 1,
            State::Init => 2,
            State::Up => 3,
        }
    }

    /// The state of a two-bit code.
    pub const fn from_code(code: u8) -> State {
        match code & 3 {
            0 => State::AdminDown,
            1 => State::Down,
            2 => State::Init,
            _ => State::Up,
        }
    }

    pub const fn as_str(self) -> &'static str {
        match self {
            State::AdminDown => "AdminDown",
            State::Down => "Down",
            State::Init => "Init",
            State::Up => "Up",
        }
    }
}

impl fmt::Display for State {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Diagnostic code (RFC 5880 §4.1, field Diag): why the sender's session
/// last changed state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Diag {
    None,
    ControlDetectionTimeExpired,
    EchoFunctionFailed,
    NeighborSignaledSessionDown,
    ForwardingPlaneReset,
    PathDown,
    ConcatenatedPathDown,
    AdministrativelyDown,
    ReverseConcatenatedPathDown,
    /// A reserved value (9–31), kept so that decoding and encoding round-trip.
    Reserved(u8),
}

impl Diag {
    pub const fn code(self) -> u8 {
        match self {
            Diag::None => 0,
            Diag::ControlDetectionTimeExpired => 1,
            Diag::EchoFunctionFailed => 2,
            Diag::NeighborSignaledSessionDown => 3,
            Diag::ForwardingPlaneReset => 4,
            Diag::PathDown => 5,
            Diag::ConcatenatedPathDown => 6,
            Diag::AdministrativelyDown => 7,
            Diag::ReverseConcatenatedPathDown => 8,
            Diag::Reserved(c) => c & 0x1f,
        }
    }

    /// The diagnostic of a five-bit code.
    pub const fn from_code(code: u8) -> Diag {
        match code & 0x1f {
            0 => Diag::None,
            1 => Diag::ControlDetectionTimeExpired,
            2 => Diag::EchoFunctionFailed,
            3 => Diag::NeighborSignaledSessionDown,
            4 => Diag::ForwardingPlaneReset,
            5 => Diag::PathDown,
            6 => Diag::ConcatenatedPathDown,
            7 => Diag::AdministrativelyDown,
            8 => Diag::ReverseConcatenatedPathDown,
            c => Diag::Reserved(c),
        }
    }

    pub const fn as_str(self) -> &'static str {
        match self {
            Diag::None => "No Diagnostic",
            Diag::ControlDetectionTimeExpired => "Control Detection Time Expired",
            Diag::EchoFunctionFailed => "Echo Function Failed",
            Diag::NeighborSignaledSessionDown => "Neighbor Signaled Session Down",
            Diag::ForwardingPlaneReset => "Forwarding Plane Reset",
            Diag::PathDown => "Path Down",
            Diag::ConcatenatedPathDown => "Concatenated Path Down",
            Diag::AdministrativelyDown => "Administratively Down",
            Diag::ReverseConcatenatedPathDown => "Reverse Concatenated Path Down",
            Diag::Reserved(_) => "Reserved",
        }
    }
}

impl fmt::Display for Diag {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.as_str(), self.code())
    }
}

/// Authentication type (RFC 5880 §4.1, field Auth Type).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum AuthType {
    SimplePassword,
    KeyedMd5,
    MeticulousKeyedMd5,
    KeyedSha1,
    MeticulousKeyedSha1,
}

impl AuthType {
    pub const fn code(self) -> u8 {
        match self {
            AuthType::SimplePassword => 1,
            AuthType::KeyedMd5 => 2,
            AuthType::MeticulousKeyedMd5 => 3,
            AuthType::KeyedSha1 => 4,
            AuthType::MeticulousKeyedSha1 => 5,
        }
    }

    pub const fn from_code(code: u8) -> Option<AuthType> {
        match code {
            1 => Some(AuthType::SimplePassword),
            2 => Some(AuthType::KeyedMd5),
            3 => Some(AuthType::MeticulousKeyedMd5),
            4 => Some(AuthType::KeyedSha1),
            5 => Some(AuthType::MeticulousKeyedSha1),
            _ => None,
        }
    }

    /// True for the meticulous variants (sequence number on every packet).
    pub const fn is_meticulous(self) -> bool {
        matches!(
            self,
            AuthType::MeticulousKeyedMd5 | AuthType::MeticulousKeyedSha1
        )
    }

    /// True for the types carrying a sequence number and a digest.
    pub const fn is_keyed(self) -> bool {
        !matches!(self, AuthType::SimplePassword)
    }

    /// Longest key (or password) this type takes.
    pub const fn max_key_len(self) -> usize {
        match self {
            AuthType::SimplePassword => MAX_PASSWORD_LEN,
            AuthType::KeyedMd5 | AuthType::MeticulousKeyedMd5 => MD5_KEY_LEN,
            AuthType::KeyedSha1 | AuthType::MeticulousKeyedSha1 => SHA1_KEY_LEN,
        }
    }

    pub const fn as_str(self) -> &'static str {
        match self {
            AuthType::SimplePassword => "Simple Password",
            AuthType::KeyedMd5 => "Keyed MD5",
            AuthType::MeticulousKeyedMd5 => "Meticulous Keyed MD5",
            AuthType::KeyedSha1 => "Keyed SHA1",
            AuthType::MeticulousKeyedSha1 => "Meticulous Keyed SHA1",
        }
    }
}

impl fmt::Display for AuthType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The authentication section (RFC 5880 §4.2–§4.4).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Auth {
    /// §4.2: the password in clear, 1 to 16 octets.
    SimplePassword { key_id: u8, password: Vec<u8> },
    /// §4.3: Keyed MD5 or Meticulous Keyed MD5.
    Md5 {
        meticulous: bool,
        key_id: u8,
        seq: u32,
        digest: [u8; 16],
    },
    /// §4.4: Keyed SHA1 or Meticulous Keyed SHA1.
    Sha1 {
        meticulous: bool,
        key_id: u8,
        seq: u32,
        digest: [u8; 20],
    },
}

impl Auth {
    pub fn auth_type(&self) -> AuthType {
        match self {
            Auth::SimplePassword { .. } => AuthType::SimplePassword,
            Auth::Md5 { meticulous, .. } => {
                if *meticulous {
                    AuthType::MeticulousKeyedMd5
                } else {
                    AuthType::KeyedMd5
                }
            }
            Auth::Sha1 { meticulous, .. } => {
                if *meticulous {
                    AuthType::MeticulousKeyedSha1
                } else {
                    AuthType::KeyedSha1
                }
            }
        }
    }

    pub fn key_id(&self) -> u8 {
        match self {
            Auth::SimplePassword { key_id, .. }
            | Auth::Md5 { key_id, .. }
            | Auth::Sha1 { key_id, .. } => *key_id,
        }
    }

    /// The sequence number of the keyed types.
    pub fn seq(&self) -> Option<u32> {
        match self {
            Auth::SimplePassword { .. } => None,
            Auth::Md5 { seq, .. } | Auth::Sha1 { seq, .. } => Some(*seq),
        }
    }

    /// An unsigned section of `auth_type` (zero digest, or `key` as the
    /// password), to be filled in by [`sign`] after encoding.
    pub fn unsigned(auth_type: AuthType, key_id: u8, seq: u32, key: &[u8]) -> Auth {
        let meticulous = auth_type.is_meticulous();
        match auth_type {
            AuthType::SimplePassword => Auth::SimplePassword {
                key_id,
                password: key.to_vec(),
            },
            AuthType::KeyedMd5 | AuthType::MeticulousKeyedMd5 => Auth::Md5 {
                meticulous,
                key_id,
                seq,
                digest: [0; 16],
            },
            AuthType::KeyedSha1 | AuthType::MeticulousKeyedSha1 => Auth::Sha1 {
                meticulous,
                key_id,
                seq,
                digest: [0; 20],
            },
        }
    }

    /// Length on the wire, Auth Type and Auth Len included.
    pub fn wire_len(&self) -> usize {
        match self {
            Auth::SimplePassword { password, .. } => 3 + password.len(),
            Auth::Md5 { .. } => MD5_AUTH_LEN,
            Auth::Sha1 { .. } => SHA1_AUTH_LEN,
        }
    }
}

/// A BFD Control packet (RFC 5880 §4.1). Intervals are in microseconds, as
/// on the wire. The version is always [`VERSION`] and the Multipoint bit
/// always clear: the decoder rejects anything else.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ControlPacket {
    pub diag: Diag,
    pub state: State,
    pub poll: bool,
    pub final_: bool,
    pub control_plane_independent: bool,
    pub demand: bool,
    pub detect_mult: u8,
    pub my_discriminator: u32,
    pub your_discriminator: u32,
    pub desired_min_tx_us: u32,
    pub required_min_rx_us: u32,
    pub required_min_echo_rx_us: u32,
    /// Present exactly when the A bit is set.
    pub auth: Option<Auth>,
}

/// Why a received packet was discarded by the codec: the checks of RFC 5880
/// §6.8.6 that need no session state, and the format of the authentication
/// section (§4.2–§4.4).
#[derive(Debug, Clone, PartialEq, Eq, Error, Serialize, Deserialize)]
pub enum DecodeError {
    #[error("{0} octets received; a control packet has at least 24")]
    TooShort(usize),
    #[error("version {0}; only version 1 is supported")]
    Version(u8),
    #[error("Length field {length} is below {min}, the minimum with the A bit {}", if *auth { "set" } else { "clear" })]
    LengthTooSmall { length: u8, min: u8, auth: bool },
    #[error("Length field {length} exceeds the {received} octets received")]
    LengthExceedsPayload { length: u8, received: usize },
    #[error("Detect Mult is zero")]
    ZeroDetectMult,
    #[error("Multipoint (M) bit is set")]
    Multipoint,
    #[error("My Discriminator is zero")]
    ZeroMyDiscriminator,
    #[error("Your Discriminator is zero in state {0}")]
    ZeroYourDiscriminator(State),
    #[error("unknown Auth Type {0}")]
    UnknownAuthType(u8),
    #[error("Auth Len {auth_len} is invalid for {auth_type}")]
    AuthLen { auth_type: AuthType, auth_len: u8 },
    #[error(
        "authentication section ({auth_len} octets) does not fill the packet ({length} octets)"
    )]
    AuthLenMismatch { auth_len: u8, length: u8 },
}

/// Why an authentication section was not accepted (RFC 5880 §6.7).
#[derive(Debug, Clone, PartialEq, Eq, Error, Serialize, Deserialize)]
pub enum AuthError {
    #[error("packet has no authentication section")]
    Missing,
    #[error("packet does not decode: {0}")]
    Decode(#[from] DecodeError),
    #[error("Auth Type is {got}, expected {expected}")]
    WrongType { got: AuthType, expected: AuthType },
    #[error("Auth Key ID is {got}, expected {expected}")]
    WrongKeyId { got: u8, expected: u8 },
    #[error("password does not match")]
    BadPassword,
    #[error("digest does not verify")]
    BadDigest,
    #[error("key of {len} octets is too long for {auth_type}")]
    KeyTooLong { auth_type: AuthType, len: usize },
}

impl ControlPacket {
    /// Decode a control packet (the UDP payload) with the reception checks
    /// of RFC 5880 §6.8.6 that belong to the codec: version, Length against
    /// the A bit and the payload, Detect Mult, M bit, My Discriminator, Your
    /// Discriminator zero only in Down or AdminDown; then the format of the
    /// authentication section. Octets after Length are ignored. The digest
    /// is not verified here: see [`verify`].
    pub fn decode(buf: &[u8]) -> Result<ControlPacket, DecodeError> {
        if buf.len() < MANDATORY_LEN {
            return Err(DecodeError::TooShort(buf.len()));
        }
        let version = buf[0] >> 5;
        if version != VERSION {
            return Err(DecodeError::Version(version));
        }
        let flags = buf[1];
        let auth_present = flags & FLAG_A != 0;
        let length = buf[3];
        let min = if auth_present { 26 } else { 24 };
        if length < min {
            return Err(DecodeError::LengthTooSmall {
                length,
                min,
                auth: auth_present,
            });
        }
        if usize::from(length) > buf.len() {
            return Err(DecodeError::LengthExceedsPayload {
                length,
                received: buf.len(),
            });
        }
        let detect_mult = buf[2];
        if detect_mult == 0 {
            return Err(DecodeError::ZeroDetectMult);
        }
        if flags & FLAG_M != 0 {
            return Err(DecodeError::Multipoint);
        }
        let word = |i: usize| u32::from_be_bytes([buf[i], buf[i + 1], buf[i + 2], buf[i + 3]]);
        let my_discriminator = word(4);
        if my_discriminator == 0 {
            return Err(DecodeError::ZeroMyDiscriminator);
        }
        let state = State::from_code(flags >> 6);
        let your_discriminator = word(8);
        if your_discriminator == 0 && !matches!(state, State::Down | State::AdminDown) {
            return Err(DecodeError::ZeroYourDiscriminator(state));
        }
        let auth = if auth_present {
            Some(decode_auth(
                &buf[MANDATORY_LEN..usize::from(length)],
                length,
            )?)
        } else {
            None
        };
        Ok(ControlPacket {
            diag: Diag::from_code(buf[0]),
            state,
            poll: flags & FLAG_P != 0,
            final_: flags & FLAG_F != 0,
            control_plane_independent: flags & FLAG_C != 0,
            demand: flags & FLAG_D != 0,
            detect_mult,
            my_discriminator,
            your_discriminator,
            desired_min_tx_us: word(12),
            required_min_rx_us: word(16),
            required_min_echo_rx_us: word(20),
            auth,
        })
    }

    /// Length of the encoded packet.
    pub fn wire_len(&self) -> usize {
        MANDATORY_LEN + self.auth.as_ref().map_or(0, Auth::wire_len)
    }

    /// Append the encoded packet to `out`, the digest as it is in
    /// [`Auth`]; [`sign`] computes it afterwards. A password longer than 16
    /// octets is cut to 16.
    pub fn encode_into(&self, out: &mut Vec<u8>) {
        let mut flags = self.state.code() << 6;
        for (set, bit) in [
            (self.poll, FLAG_P),
            (self.final_, FLAG_F),
            (self.control_plane_independent, FLAG_C),
            (self.auth.is_some(), FLAG_A),
            (self.demand, FLAG_D),
        ] {
            if set {
                flags |= bit;
            }
        }
        let auth = self.auth.as_ref().map(|a| match a {
            Auth::SimplePassword { key_id, password } => Auth::SimplePassword {
                key_id: *key_id,
                password: password[..password.len().min(MAX_PASSWORD_LEN)].to_vec(),
            },
            other => other.clone(),
        });
        let len = MANDATORY_LEN + auth.as_ref().map_or(0, Auth::wire_len);
        out.reserve(len);
        out.extend_from_slice(&[
            (VERSION << 5) | self.diag.code(),
            flags,
            self.detect_mult,
            len as u8,
        ]);
        for w in [
            self.my_discriminator,
            self.your_discriminator,
            self.desired_min_tx_us,
            self.required_min_rx_us,
            self.required_min_echo_rx_us,
        ] {
            out.extend_from_slice(&w.to_be_bytes());
        }
        if let Some(auth) = auth {
            let wire_len = auth.wire_len() as u8;
            out.extend_from_slice(&[auth.auth_type().code(), wire_len, auth.key_id()]);
            match auth {
                Auth::SimplePassword { password, .. } => out.extend_from_slice(&password),
                Auth::Md5 { seq, digest, .. } => {
                    out.push(0);
                    out.extend_from_slice(&seq.to_be_bytes());
                    out.extend_from_slice(&digest);
                }
                Auth::Sha1 { seq, digest, .. } => {
                    out.push(0);
                    out.extend_from_slice(&seq.to_be_bytes());
                    out.extend_from_slice(&digest);
                }
            }
        }
    }

    /// The encoded packet, the digest as it is in [`Auth`].
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.wire_len());
        self.encode_into(&mut out);
        out
    }

    /// The encoded packet with its digest computed with `key` (Keyed MD5
    /// and SHA1); other packets are encoded as they are.
    pub fn encode_signed(&self, key: &[u8]) -> Result<Vec<u8>, AuthError> {
        let mut out = self.encode();
        sign(&mut out, key)?;
        Ok(out)
    }
}

fn decode_auth(sec: &[u8], length: u8) -> Result<Auth, DecodeError> {
    let code = sec[0];
    let auth_len = sec[1];
    let auth_type = AuthType::from_code(code).ok_or(DecodeError::UnknownAuthType(code))?;
    let valid = match auth_type {
        AuthType::SimplePassword => (4..=3 + MAX_PASSWORD_LEN).contains(&usize::from(auth_len)),
        AuthType::KeyedMd5 | AuthType::MeticulousKeyedMd5 => usize::from(auth_len) == MD5_AUTH_LEN,
        AuthType::KeyedSha1 | AuthType::MeticulousKeyedSha1 => {
            usize::from(auth_len) == SHA1_AUTH_LEN
        }
    };
    if !valid {
        return Err(DecodeError::AuthLen {
            auth_type,
            auth_len,
        });
    }
    if usize::from(auth_len) != sec.len() {
        return Err(DecodeError::AuthLenMismatch { auth_len, length });
    }
    let key_id = sec[2];
    let meticulous = auth_type.is_meticulous();
    let seq = || u32::from_be_bytes([sec[4], sec[5], sec[6], sec[7]]);
    Ok(match auth_type {
        AuthType::SimplePassword => Auth::SimplePassword {
            key_id,
            password: sec[3..].to_vec(),
        },
        AuthType::KeyedMd5 | AuthType::MeticulousKeyedMd5 => {
            let mut digest = [0; 16];
            digest.copy_from_slice(&sec[8..24]);
            Auth::Md5 {
                meticulous,
                key_id,
                seq: seq(),
                digest,
            }
        }
        AuthType::KeyedSha1 | AuthType::MeticulousKeyedSha1 => {
            let mut digest = [0; 20];
            digest.copy_from_slice(&sec[8..28]);
            Auth::Sha1 {
                meticulous,
                key_id,
                seq: seq(),
                digest,
            }
        }
    })
}

/// The digest of an encoded packet with Keyed MD5 or SHA1 authentication
/// (RFC 5880 §6.7.3, §6.7.4): the hash over the whole packet with the key,
/// padded with zeros, in place of the digest field.
fn compute_digest(buf: &[u8], auth_type: AuthType, key: &[u8]) -> Result<Vec<u8>, AuthError> {
    let max = auth_type.max_key_len();
    if key.len() > max {
        return Err(AuthError::KeyTooLong {
            auth_type,
            len: key.len(),
        });
    }
    let at = MANDATORY_LEN + 8;
    let mut data = buf.to_vec();
    data[at..at + max].fill(0);
    data[at..at + key.len()].copy_from_slice(key);
    Ok(match auth_type {
        AuthType::KeyedMd5 | AuthType::MeticulousKeyedMd5 => Md5::digest(&data).to_vec(),
        _ => Sha1::digest(&data).to_vec(),
    })
}

/// Compute and write the digest of an encoded packet with Keyed MD5 or
/// SHA1 authentication (the digest field's content is ignored). Packets
/// without authentication or with a simple password are left as they are.
/// Only the authentication section's type and length are checked, so a
/// session can sign whatever it encodes.
pub fn sign(buf: &mut [u8], key: &[u8]) -> Result<(), AuthError> {
    if buf.len() < MANDATORY_LEN + 2 || buf[1] & FLAG_A == 0 {
        return Ok(());
    }
    let code = buf[MANDATORY_LEN];
    let auth_type = AuthType::from_code(code).ok_or(DecodeError::UnknownAuthType(code))?;
    if !auth_type.is_keyed() {
        return Ok(());
    }
    let auth_len = buf[MANDATORY_LEN + 1];
    let need = match auth_type {
        AuthType::KeyedMd5 | AuthType::MeticulousKeyedMd5 => MD5_AUTH_LEN,
        _ => SHA1_AUTH_LEN,
    };
    let len = usize::from(buf[3]);
    if usize::from(auth_len) != need || len != MANDATORY_LEN + need || buf.len() < len {
        return Err(DecodeError::AuthLen {
            auth_type,
            auth_len,
        }
        .into());
    }
    let digest = compute_digest(&buf[..len], auth_type, key)?;
    let at = MANDATORY_LEN + 8;
    buf[at..at + digest.len()].copy_from_slice(&digest);
    Ok(())
}

/// Check the authentication section of a received packet against the
/// expected type, key ID and key (RFC 5880 §6.7.2–§6.7.4): the password
/// for Simple Password, the digest for the keyed types. Sequence numbers
/// are the session's to check. Returns the decoded packet.
pub fn verify(
    buf: &[u8],
    auth_type: AuthType,
    key_id: u8,
    key: &[u8],
) -> Result<ControlPacket, AuthError> {
    let pkt = ControlPacket::decode(buf)?;
    let auth = pkt.auth.as_ref().ok_or(AuthError::Missing)?;
    if auth.auth_type() != auth_type {
        return Err(AuthError::WrongType {
            got: auth.auth_type(),
            expected: auth_type,
        });
    }
    if auth.key_id() != key_id {
        return Err(AuthError::WrongKeyId {
            got: auth.key_id(),
            expected: key_id,
        });
    }
    let ok = match auth {
        Auth::SimplePassword { password, .. } => {
            if password.as_slice() != key {
                return Err(AuthError::BadPassword);
            }
            true
        }
        Auth::Md5 { digest, .. } => {
            compute_digest(&buf[..usize::from(buf[3])], auth_type, key)? == digest.as_slice()
        }
        Auth::Sha1 { digest, .. } => {
            compute_digest(&buf[..usize::from(buf[3])], auth_type, key)? == digest.as_slice()
        }
    };
    if ok {
        Ok(pkt)
    } else {
        Err(AuthError::BadDigest)
    }
}
