//! The replicated records of one NSR instance.
//!
//! A session is stored as:
//! - its [`SessionRecord`]: the raw OPEN messages both ways (negotiated
//!   parameters are re-derived from them with a pure function on the
//!   backup), the TCP parameters needed by TCP_REPAIR, and the sequence
//!   numbers at the moment the record was written;
//! - `rcv`: the TCP sequence number up to which received bytes are
//!   replicated, i.e. the highest ACK the kernel may send;
//! - the Adj-RIB-In log: every UPDATE received, as raw BGP messages (a
//!   [`Op::Snapshot`] replaces it with a compacted encoding of the table);
//! - the Adj-RIB-Out log: every message written to the peer, likewise;
//! - the send tail: written bytes the peer may not have acknowledged yet,
//!   each chunk with the sequence number just after it, trimmed by
//!   [`Op::Acked`]. The backup refills the TCP send queue from it.
//!
//! A BFD session under a BGP session (non-stop BFD, issue 10) is stored
//! apart, as one [`BfdRecord`] per key, replaced whenever its state changes
//! ([`Op::Bfd`]) and removed with [`Op::BfdRemove`].
//!
//! The routes a routing instance originates at run time (added over the
//! GoBGP API or `holdfast add_route`) are stored apart too, as one
//! [`OriginatedRecord`] per instance holding the whole set, replaced on
//! every add and delete ([`Op::Originated`]; an empty set removes it).
//!
//! Records carry [`SCHEMA_VERSION`]; a reader refuses a newer major schema
//! and reads older ones (primary and backup may run different builds during
//! an upgrade).

use bytes::Bytes;
use serde::{Deserialize, Serialize};
use std::net::{IpAddr, SocketAddr};

/// Version of [`SessionRecord`] and of the key layout.
pub const SCHEMA_VERSION: u32 = 1;

/// TCP parameters of an established connection, as TCP_REPAIR restores them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TcpParams {
    pub mss: u16,
    pub snd_wscale: u8,
    pub rcv_wscale: u8,
    pub sack: bool,
    pub timestamps: bool,
    /// TCP timestamp clock value (TCP_TIMESTAMP) when captured...
    pub ts_val: u32,
    /// ...and the wall clock at that moment, in ms since the Unix epoch.
    pub ts_unix_ms: u64,
    pub snd_wnd: u32,
    pub rcv_wnd: u32,
}

/// One established session, written when it reaches Established (and when
/// it is re-synchronised after a store outage).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionRecord {
    pub schema: u32,
    /// Routing instance (VRF) name of the neighbour.
    pub instance: String,
    pub peer: IpAddr,
    pub local: SocketAddr,
    pub remote: SocketAddr,
    /// Whether we opened the connection.
    pub outbound: bool,
    /// OPEN message bodies (after the 19-byte header) as sent and received.
    pub open_sent: Vec<u8>,
    pub open_received: Vec<u8>,
    pub tcp: TcpParams,
    /// Sequence number of the next byte we would write, when recorded.
    pub snd_seq: u32,
    /// Sequence number up to which received bytes were consumed, when recorded.
    pub rcv_seq: u32,
    /// When the session reached Established, ms since the Unix epoch.
    pub established_unix_ms: u64,
}

/// One BFD session (RFC 5880) as a backup resumes it: where its packets
/// come from and go to, and the session machine's replicated state.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BfdRecord {
    pub schema: u32,
    /// Routing instance of the BGP neighbour.
    pub instance: String,
    pub peer: IpAddr,
    /// Source address and UDP port of our control packets (the port must
    /// stay the same across a takeover, RFC 5881 §4).
    pub local: SocketAddr,
    /// RFC 5883 multihop rather than RFC 5881 single-hop.
    pub multihop: bool,
    /// `holdfast_bfd::ResumeState` as JSON: both discriminators, the state,
    /// the intervals, the authentication sequence numbers. Opaque here.
    pub state: serde_json::Value,
}

/// One BFD session as loaded by a backup.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredBfd {
    pub key: String,
    pub record: BfdRecord,
}

/// The routes one routing instance originates at run time (added over the
/// GoBGP API or `holdfast add_route`, not the configuration's
/// `[[network]]`s): the whole set, as a backup puts it back before it
/// compares its Adj-RIB-Out with what the peers hold.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OriginatedRecord {
    pub schema: u32,
    /// Routing instance (VRF) name.
    pub instance: String,
    /// The routes, each a `holdfast_api::RouteSpec` as JSON (prefix,
    /// next hop, origin, AS path, MED, LOCAL_PREF, communities), in
    /// prefix order. Opaque here.
    pub routes: Vec<serde_json::Value>,
}

/// One instance's run-time routes as loaded by a backup.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredOriginated {
    pub key: String,
    pub record: OriginatedRecord,
}

/// One replication operation. A batch of them is applied atomically and in
/// order by [`Store::write`](crate::Store::write).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Op {
    /// A session (re)starts: replaces everything stored under `key`.
    Session { key: String, record: SessionRecord },
    /// Bytes received up to sequence `ack`; `updates` holds the complete
    /// UPDATE messages among them (headers included), appended to the
    /// Adj-RIB-In log; `partial` is the start of a message not yet whole
    /// (the bytes just before `ack`), which replaces the stored one. Every
    /// byte read is replicated, whole message or not, so its ACK may leave:
    /// a peer in loss recovery sends the rest of a message only once the
    /// first part is acknowledged.
    Received {
        key: String,
        ack: u32,
        updates: Bytes,
        partial: Bytes,
    },
    /// Bytes about to be written to the socket, ending just before
    /// sequence `seq_end`: appended to the send tail and to the
    /// Adj-RIB-Out log.
    Sent {
        key: String,
        seq_end: u32,
        bytes: Bytes,
    },
    /// The peer has acknowledged everything before `snd_una` (a lower
    /// bound): send-tail chunks ending at or before it are dropped.
    Acked { key: String, snd_una: u32 },
    /// Compacted tables: the Adj-RIB-In and Adj-RIB-Out logs are replaced
    /// by these encodings (whole UPDATE messages).
    Snapshot {
        key: String,
        adj_in: Bytes,
        adj_out: Bytes,
    },
    /// The ROUTE-REFRESH requests (RFC 2918) received on the session and
    /// not answered yet: whole messages, headers included, oldest first.
    /// Replaces the stored ones; empty: none is pending. A backup answers
    /// the stored ones after a takeover.
    Refresh { key: String, pending: Bytes },
    /// The session ended on purpose: forget it.
    Remove { key: String },
    /// A BFD session's state changed: replaces its record.
    Bfd { key: String, record: BfdRecord },
    /// A BFD session was removed on purpose: forget it.
    BfdRemove { key: String },
    /// An instance's run-time routes changed: the record replaces the
    /// stored set; a record without routes removes it.
    Originated {
        key: String,
        record: OriginatedRecord,
    },
}

impl Op {
    pub fn key(&self) -> &str {
        match self {
            Op::Session { key, .. }
            | Op::Received { key, .. }
            | Op::Sent { key, .. }
            | Op::Acked { key, .. }
            | Op::Snapshot { key, .. }
            | Op::Refresh { key, .. }
            | Op::Remove { key }
            | Op::Bfd { key, .. }
            | Op::BfdRemove { key }
            | Op::Originated { key, .. } => key,
        }
    }

    /// Payload bytes the op carries (for batching limits and metrics).
    pub fn payload_len(&self) -> usize {
        match self {
            Op::Received { updates, .. } => updates.len(),
            Op::Sent { bytes, .. } => bytes.len(),
            Op::Snapshot {
                adj_in, adj_out, ..
            } => adj_in.len() + adj_out.len(),
            Op::Session { .. } | Op::Bfd { .. } => 256,
            Op::Originated { record, .. } => 64 + 128 * record.routes.len(),
            Op::Refresh { pending, .. } => pending.len() + 8,
            Op::Acked { .. } | Op::Remove { .. } | Op::BfdRemove { .. } => 8,
        }
    }
}

/// One session as loaded by a backup.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredSession {
    pub key: String,
    pub record: SessionRecord,
    /// Replicated receive sequence (the ACK the restored socket starts at).
    pub rcv: u32,
    /// Bytes just before `rcv` that do not yet form a whole message: the
    /// restored connection's receive buffer starts with them.
    pub partial: Bytes,
    /// Adj-RIB-In log chunks, oldest first, each whole UPDATE messages.
    pub adj_in: Vec<Bytes>,
    /// Adj-RIB-Out log chunks, oldest first (whole messages of any type).
    pub adj_out: Vec<Bytes>,
    /// Lower bound of the peer's acknowledgement.
    pub snd_una: u32,
    /// Send-tail chunks, oldest first, each with the sequence after it.
    pub send_tail: Vec<(u32, Bytes)>,
    /// ROUTE-REFRESH messages received and not answered yet ([`Op::Refresh`]).
    pub refresh: Bytes,
    /// Where `adj_in` and `adj_out` start in the stored logs, and the logs'
    /// version (see [`LogPos`]).
    pub log: LogPos,
}

/// A position in a session's stored logs, for a reader that follows them
/// (a preheated standby): the logs' version and how many chunks of each
/// log come before.
///
/// The version changes whenever the logs are replaced rather than
/// appended to — the session is written anew ([`Op::Session`]) or
/// compacted ([`Op::Snapshot`]) — and is never reused within an instance
/// (it is drawn from one counter per instance). Chunks read at a position
/// of the same version continue what was read before; at another version
/// the logs must be read again from the start. Logs written before
/// versions existed have version 0.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct LogPos {
    pub version: u64,
    /// Index of the first Adj-RIB-In chunk.
    pub adj_in: usize,
    /// Index of the first Adj-RIB-Out chunk.
    pub adj_out: usize,
}

impl LogPos {
    /// The start of the logs of `version`.
    pub fn start(version: u64) -> LogPos {
        LogPos {
            version,
            adj_in: 0,
            adj_out: 0,
        }
    }
}

impl StoredSession {
    /// Sequence number of the next byte to write (after the last chunk).
    pub fn snd_nxt(&self) -> u32 {
        self.send_tail
            .last()
            .map(|(end, _)| *end)
            .unwrap_or_else(|| {
                // The later of the two in mod-2^32 sequence arithmetic.
                let (seq, una) = (self.record.snd_seq, self.snd_una);
                if (una.wrapping_sub(seq) as i32) > 0 {
                    una
                } else {
                    seq
                }
            })
    }

    /// The bytes from `snd_una` to [`snd_nxt`](Self::snd_nxt): what the
    /// restored send queue must hold. Returns `(start_seq, bytes)`.
    pub fn send_queue(&self) -> (u32, Vec<u8>) {
        let end = self.snd_nxt();
        let start = if self.send_tail.is_empty() {
            end
        } else {
            self.snd_una
        };
        let mut out = Vec::new();
        for (chunk_end, bytes) in &self.send_tail {
            let chunk_start = chunk_end.wrapping_sub(bytes.len() as u32);
            // Skip the part of the chunk before `start` (sequence arithmetic).
            let skip = start.wrapping_sub(chunk_start);
            if (skip as i32) <= 0 {
                out.extend_from_slice(bytes);
            } else if (skip as usize) < bytes.len() {
                out.extend_from_slice(&bytes[skip as usize..]);
            }
        }
        let start = end.wrapping_sub(out.len() as u32);
        (start, out)
    }

    /// Bytes this session occupies in the store (payloads and record).
    pub fn stored_bytes(&self) -> usize {
        self.adj_in.iter().map(Bytes::len).sum::<usize>()
            + self.adj_out.iter().map(Bytes::len).sum::<usize>()
            + self
                .send_tail
                .iter()
                .map(|(_, b)| b.len() + 4)
                .sum::<usize>()
            + self.record.open_sent.len()
            + self.record.open_received.len()
            + 256
    }
}

/// Everything stored for an instance.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct InstanceState {
    pub epoch: u64,
    pub sessions: Vec<StoredSession>,
    /// BFD sessions, sorted by key.
    pub bfd: Vec<StoredBfd>,
    /// Run-time routes per routing instance, sorted by key.
    pub originated: Vec<StoredOriginated>,
}

impl Op {
    /// Whether the op is a BFD record's (kept apart from the BGP session
    /// steps: see [`crate::batch`]).
    pub fn is_bfd(&self) -> bool {
        matches!(self, Op::Bfd { .. } | Op::BfdRemove { .. })
    }
}
