//! `[bfd]` and a neighbour's `bfd`: BFD (RFC 5880) under a BGP session.
//!
//! The global `[bfd]` table holds the defaults; a neighbour enables BFD
//! with `bfd = true` (the defaults) or a `[neighbor.bfd]` table whose keys
//! override them and may add authentication. After loading, a neighbour
//! carries its resolved [`BfdSettings`].

use serde::de::{self, Deserializer, MapAccess, Visitor};
use serde::{Deserialize, Serialize};
use std::fmt;

fn default_interval_ms() -> u32 {
    300
}
fn default_multiplier() -> u8 {
    3
}
fn default_realtime_priority() -> u8 {
    10
}
pub(crate) fn default_key_id() -> u8 {
    1
}

/// Slowest interval accepted, in milliseconds (frr bfdd's limit).
pub const MAX_INTERVAL_MS: u32 = 60_000;

/// `[bfd]`: the defaults of every neighbour's BFD session.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BfdDefaults {
    /// Required Min RX Interval, milliseconds.
    #[serde(default = "default_interval_ms")]
    pub min_rx_ms: u32,
    /// Desired Min TX Interval, milliseconds.
    #[serde(default = "default_interval_ms")]
    pub min_tx_ms: u32,
    /// Detect Mult.
    #[serde(default = "default_multiplier")]
    pub multiplier: u8,
    /// RFC 5883 multihop (UDP 4784, no TTL check) instead of RFC 5881.
    #[serde(default)]
    pub multihop: bool,
    /// The BFD thread's `SCHED_FIFO` priority (1-99), so that CPU-bound
    /// work elsewhere on the host cannot delay a control packet; 0 keeps
    /// it at normal priority. Needs `CAP_SYS_NICE` (and, with real-time
    /// group scheduling, a cgroup with a real-time budget): when refused,
    /// holdfastd says so and BFD runs at normal priority.
    #[serde(default = "default_realtime_priority")]
    pub realtime_priority: u8,
}

impl Default for BfdDefaults {
    fn default() -> Self {
        BfdDefaults {
            min_rx_ms: default_interval_ms(),
            min_tx_ms: default_interval_ms(),
            multiplier: default_multiplier(),
            multihop: false,
            realtime_priority: default_realtime_priority(),
        }
    }
}

/// Authentication type of a BFD session (RFC 5880 §4.2–§4.4), spelled as
/// bird2 spells it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum BfdAuthType {
    Simple,
    KeyedMd5,
    MeticulousMd5,
    KeyedSha1,
    MeticulousSha1,
}

impl BfdAuthType {
    /// Longest password or key the type carries, in octets.
    pub fn max_key_len(self) -> usize {
        match self {
            BfdAuthType::KeyedSha1 | BfdAuthType::MeticulousSha1 => 20,
            _ => 16,
        }
    }
}

/// A BFD password or key; `Debug` redacts it.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct BfdPassword(pub String);

impl fmt::Debug for BfdPassword {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("BfdPassword(<redacted>)")
    }
}

/// One authentication key of a session.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct BfdAuth {
    #[serde(rename = "auth")]
    pub auth_type: BfdAuthType,
    pub key_id: u8,
    pub password: BfdPassword,
}

/// A neighbour's resolved BFD settings.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct BfdSettings {
    pub min_rx_ms: u32,
    pub min_tx_ms: u32,
    pub multiplier: u8,
    pub multihop: bool,
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    pub auth: Option<BfdAuth>,
}

impl BfdSettings {
    /// Whether going from `self` to `other` needs a new session (the
    /// transport changed) rather than new timers on the running one.
    pub fn needs_new_session(&self, other: &BfdSettings) -> bool {
        self.multihop != other.multihop || self.auth != other.auth
    }
}

/// `[neighbor.bfd]` as written: every key optional.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawNeighborBfd {
    pub min_rx_ms: Option<u32>,
    pub min_tx_ms: Option<u32>,
    pub multiplier: Option<u8>,
    pub multihop: Option<bool>,
    pub auth: Option<BfdAuthType>,
    pub key_id: Option<u8>,
    pub password: Option<BfdPassword>,
}

/// `bfd = true` (the defaults), `bfd = false` (off), or a table.
pub(crate) fn neighbor_bfd<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<Option<RawNeighborBfd>, D::Error> {
    struct V;
    impl<'de> Visitor<'de> for V {
        type Value = Option<RawNeighborBfd>;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a boolean or a table")
        }
        fn visit_bool<E: de::Error>(self, v: bool) -> Result<Self::Value, E> {
            Ok(v.then(RawNeighborBfd::default))
        }
        fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
            RawNeighborBfd::deserialize(de::value::MapAccessDeserializer::new(map)).map(Some)
        }
    }
    d.deserialize_any(V)
}
