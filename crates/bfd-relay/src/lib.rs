//! Holdfast BFD relay: keeps the BFD sessions of NSR-protected units Up at
//! their peers while a unit is being taken over (TENSOR §3.3.2, the BFD
//! "agent server"; issue 10 item 4).
//!
//! `holdfast-bfd-relay --store URL [--instance NAME]...` runs on an agent
//! host on the peers' L2 segment. It reads every watched instance's BFD
//! records from the NSR store (the `bfd` hash that holdfastd writes with
//! `holdfast_nsr::Op::Bfd`, read with `holdfast_nsr_redis::RedisStore`) every
//! `--poll-ms` (100 ms by default), and for each record in state Up sends
//! the unit's own Up control packet — the unit's source address and port,
//! its discriminators and advertised intervals — to the peer, continuously,
//! at the session's transmission interval with the jitter of RFC 5880
//! §6.8.7. The peer sees the relay's packets as duplicates of the unit's
//! while the unit lives, and as the unit's while it is being taken over,
//! so its detection timer never lapses. See docs/nsr.md, "BFD relay".
//!
//! # Structure
//! - [`core`]: the pure core, `Core::handle(now, input) -> outputs`: store
//!   snapshots and timers in, packets to send and start/stop events out.
//! - [`store`]: one pipelined read of an instance (epoch, BFD hash, the BGP
//!   sessions' replicated sequences as a liveness signal).
//! - [`shell`]: sockets (`IP_TRANSPARENT` + `IP_FREEBIND`, bound to the
//!   unit's address and port, TTL 255) and the poll/send loop.
//! - [`bench`]: `--bench`, sessions one core sustains.
//!
//! # RFCs
//! - RFC 5880 §4.1 (the packet; built with `holdfast_bfd::ControlPacket`),
//!   §6.8.7 (transmission interval and jitter: 75–100% of the larger of
//!   Desired Min TX and the peer's Required Min RX; 75–90% at Detect
//!   Mult 1).
//! - RFC 5881 §4–§5 (UDP 3784, the session's source port kept, TTL 255),
//!   RFC 5883 (multihop, UDP 4784).
//! - RFC 5882 §3.2 is why: a peer tears BGP down when BFD goes Down.
//!
//! # Authentication
//! The record names the session's authentication type and key ID
//! (`holdfast_bfd::AuthRef`), never its key; `--keys FILE` ([`keys`]) gives
//! the relay the keys. With the simple password and keyed MD5/SHA1 the
//! relay's packet is byte for byte the unit's: the unit advances
//! bfd.XmitAuthSeq only when its packet's content changes and replicates
//! every change, and the relay signs with that number.
//!
//! # When the relay stops covering a session
//! - its record is removed (`Op::BfdRemove`), or its state is not Up (the
//!   unit saw the peer go Down and replicated it): at the next poll;
//! - the instance is silent in the store for `--cover-ms` (10 s by
//!   default): its epoch, BFD records and its BGP sessions' replicated
//!   receive/acknowledge sequences (which move with every keepalive) have
//!   not changed, so the unit is gone and nobody took it over. The peer
//!   then sees BFD Down one detection time later. `--cover-ms` must exceed
//!   the BGP keepalive interval.
//!
//! # Known issues
//! - Meticulous keyed MD5/SHA1 sessions are not covered: their sequence
//!   number grows with every packet, so a relay sending alongside the unit
//!   would race it (the peer would drop one sender's packets, and the
//!   unit's once the relay's numbers run ahead). Such sessions need a relay
//!   that sends only while the unit is silent. They are logged and skipped
//!   (`StopReason::Auth`), as are authenticated sessions with no key in
//!   `--keys`.
//! - A Poll Sequence of the unit is not mirrored; the relay's packets carry
//!   the intervals of the last replicated state.
//! - The relay reads the store's key layout (`epoch`, `bfd`, `sessions`,
//!   `s:K:rcv`, `s:K:una`) directly, through `RedisStore::with_connection`.
//! - Total failure of a unit that is not taken over shows at the peer only
//!   after `--cover-ms` plus its detection time, not its detection time.

pub mod bench;
pub mod core;
pub mod keys;
pub mod shell;
pub mod store;

use thiserror::Error;

/// Errors of the relay.
#[derive(Debug, Error)]
pub enum RelayError {
    #[error("store: {0}")]
    Store(#[from] holdfast_nsr::StoreError),
    #[error("record JSON: {0}")]
    Json(#[from] serde_json::Error),
    #[error("record schema {0} is newer than this build reads")]
    Schema(u32),
    #[error("keys file: {0}")]
    Keys(String),
    #[error("socket on {0}: {1}")]
    Socket(std::net::SocketAddr, std::io::Error),
    #[error("thread: {0}")]
    Thread(std::io::Error),
}

#[cfg(test)]
mod tests;
