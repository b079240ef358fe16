//! What both stores share: turning a batch of [`Op`]s into the steps that
//! are applied (consecutive appends to one session merged), and reading a
//! stored [`SessionRecord`] back.
//!
//! Merging rules (ops of different sessions touch disjoint state, so they
//! commute; only the order of one session's ops matters):
//! - a `Received` is merged into the session's previous `Received` (even
//!   across that session's `Sent` and `Acked`, which touch other keys): the
//!   last `ack`, the updates concatenated — one Adj-RIB-In chunk;
//! - a `Sent` is merged into the session's previous `Sent` if no `Acked`
//!   came in between and its bytes start at that one's `seq_end`: one
//!   send-tail chunk and one Adj-RIB-Out chunk;
//! - an `Acked` at or after the session's previous `Acked` replaces it if
//!   no `Sent` came in between;
//! - `Session`, `Snapshot` and `Remove` are never merged and end every run
//!   of their session;
//! - `Refresh` touches only the session's pending ROUTE-REFRESH requests:
//!   it is never merged and ends no run (it commutes with the appends);
//! - `Bfd` and `BfdRemove` are no steps: they touch only the BFD records,
//!   which each store applies after the steps (last one per key wins,
//!   [`bfd_writes`]);
//! - `Originated` is no step either: it touches only the instances'
//!   run-time routes, applied with the BFD records ([`originated_writes`]).
//!
//! Both stores apply the same steps, so they store the same chunks. Public
//! for the Redis store's crate (`holdfast-nsr-redis`); nothing else uses it.
//!
//! Known issues: merged send-tail chunks are trimmed as a whole, i.e. a
//! merged chunk stays until all of it is acknowledged (`send_queue` skips
//! the acknowledged head, so what the backup restores is unchanged).

use crate::record::{Op, SessionRecord, SCHEMA_VERSION};
use crate::store::StoreError;
use bytes::Bytes;
use serde::Deserialize;
use std::collections::HashMap;

/// One step of a planned batch, borrowing from the ops.
#[derive(Debug)]
pub enum Step<'a> {
    Session {
        key: &'a str,
        record: &'a SessionRecord,
    },
    Received {
        key: &'a str,
        ack: u32,
        parts: Vec<&'a Bytes>,
        partial: &'a Bytes,
    },
    Sent {
        key: &'a str,
        seq_end: u32,
        parts: Vec<&'a Bytes>,
    },
    Acked {
        key: &'a str,
        snd_una: u32,
    },
    Snapshot {
        key: &'a str,
        adj_in: &'a Bytes,
        adj_out: &'a Bytes,
    },
    Refresh {
        key: &'a str,
        pending: &'a Bytes,
    },
    Remove {
        key: &'a str,
    },
}

impl<'a> Step<'a> {
    pub fn key(&self) -> &'a str {
        match self {
            Step::Session { key, .. }
            | Step::Received { key, .. }
            | Step::Sent { key, .. }
            | Step::Acked { key, .. }
            | Step::Snapshot { key, .. }
            | Step::Refresh { key, .. }
            | Step::Remove { key } => key,
        }
    }

    /// Payload bytes (for splitting very large batches).
    pub fn payload_len(&self) -> usize {
        match self {
            Step::Received { parts, .. } | Step::Sent { parts, .. } => {
                parts.iter().map(|b| b.len()).sum()
            }
            Step::Snapshot {
                adj_in, adj_out, ..
            } => adj_in.len() + adj_out.len(),
            Step::Session { record, .. } => {
                record.open_sent.len() + record.open_received.len() + 512
            }
            Step::Refresh { pending, .. } => pending.len() + 16,
            Step::Acked { .. } | Step::Remove { .. } => 16,
        }
    }
}

/// Total length of `parts`.
pub fn parts_len(parts: &[&Bytes]) -> usize {
    parts.iter().map(|b| b.len()).sum()
}

/// Concatenation of `parts` (no copy for a single part).
pub fn concat(parts: &[&Bytes]) -> Bytes {
    match parts {
        [] => Bytes::new(),
        [one] => (*one).clone(),
        _ => {
            let mut v = Vec::with_capacity(parts_len(parts));
            for p in parts {
                v.extend_from_slice(p);
            }
            Bytes::from(v)
        }
    }
}

/// `a` is at or after `b` in mod-2^32 sequence arithmetic.
pub fn seq_ge(a: u32, b: u32) -> bool {
    (a.wrapping_sub(b) as i32) >= 0
}

/// Where the last mergeable steps of one session are in the plan.
#[derive(Default, Clone, Copy)]
struct Open {
    received: Option<usize>,
    sent: Option<usize>,
    acked: Option<usize>,
}

/// Plans `ops`: same effect, appends of a session merged.
///
/// Within a session, `Received` touches `rcv` and the Adj-RIB-In log,
/// `Sent` the send tail and the Adj-RIB-Out log, `Acked` `una` and the send
/// tail: a `Received` commutes with `Sent` and `Acked`, so it merges into
/// the session's previous `Received` across them; `Sent` and `Acked` do not
/// commute with each other, so one ends the other's run. `Session`,
/// `Snapshot` and `Remove` end every run of their session.
pub fn plan(ops: &[Op]) -> Vec<Step<'_>> {
    let mut steps: Vec<Step<'_>> = Vec::with_capacity(ops.len());
    let mut open: HashMap<&str, Open> = HashMap::new();
    for op in ops {
        let key = op.key();
        let o = open.entry(key).or_default();
        let at = steps.len();
        match op {
            Op::Received {
                ack,
                updates,
                partial,
                ..
            } => {
                if let Some(Step::Received {
                    ack: a,
                    parts,
                    partial: pa,
                    ..
                }) = o.received.and_then(|i| steps.get_mut(i))
                {
                    *a = *ack;
                    *pa = partial;
                    if !updates.is_empty() {
                        parts.push(updates);
                    }
                    continue;
                }
                o.received = Some(at);
                steps.push(Step::Received {
                    key,
                    ack: *ack,
                    partial,
                    parts: if updates.is_empty() {
                        Vec::new()
                    } else {
                        vec![updates]
                    },
                });
            }
            Op::Sent { seq_end, bytes, .. } => {
                if let Some(Step::Sent {
                    seq_end: e, parts, ..
                }) = o.sent.and_then(|i| steps.get_mut(i))
                {
                    if seq_end.wrapping_sub(bytes.len() as u32) == *e {
                        *e = *seq_end;
                        if !bytes.is_empty() {
                            parts.push(bytes);
                        }
                        continue;
                    }
                }
                o.sent = Some(at);
                o.acked = None;
                steps.push(Step::Sent {
                    key,
                    seq_end: *seq_end,
                    parts: if bytes.is_empty() {
                        Vec::new()
                    } else {
                        vec![bytes]
                    },
                });
            }
            Op::Acked { snd_una, .. } => {
                if let Some(Step::Acked { snd_una: u, .. }) = o.acked.and_then(|i| steps.get_mut(i))
                {
                    if seq_ge(*snd_una, *u) {
                        *u = *snd_una;
                        continue;
                    }
                }
                o.acked = Some(at);
                o.sent = None;
                steps.push(Step::Acked {
                    key,
                    snd_una: *snd_una,
                });
            }
            Op::Session { record, .. } => {
                *o = Open::default();
                steps.push(Step::Session { key, record });
            }
            Op::Snapshot {
                adj_in, adj_out, ..
            } => {
                *o = Open::default();
                steps.push(Step::Snapshot {
                    key,
                    adj_in,
                    adj_out,
                });
            }
            Op::Refresh { pending, .. } => steps.push(Step::Refresh { key, pending }),
            Op::Remove { .. } => {
                *o = Open::default();
                steps.push(Step::Remove { key });
            }
            Op::Bfd { .. } | Op::BfdRemove { .. } | Op::Originated { .. } => {}
        }
    }
    steps
}

/// A record kept apart from the sessions (a BFD record, an instance's
/// run-time routes) to set (its JSON) or, `None`, to delete.
pub type RecordWrite<'a> = (&'a str, Option<Vec<u8>>);

/// What a batch leaves of records kept apart: per key, the last write, in
/// first-seen key order.
fn last_per_key<'a>(
    writes: impl Iterator<Item = Result<RecordWrite<'a>, StoreError>>,
) -> Result<Vec<RecordWrite<'a>>, StoreError> {
    let mut out: Vec<RecordWrite<'a>> = Vec::new();
    for w in writes {
        let (key, value) = w?;
        match out.iter_mut().find(|(k, _)| *k == key) {
            Some(slot) => slot.1 = value,
            None => out.push((key, value)),
        }
    }
    Ok(out)
}

fn encode_apart<T: serde::Serialize>(
    key: &str,
    record: &T,
    what: &str,
) -> Result<Vec<u8>, StoreError> {
    serde_json::to_vec(record).map_err(|e| StoreError::Corrupt {
        key: key.to_string(),
        reason: format!("cannot encode {what}: {e}"),
    })
}

/// The BFD records a batch leaves: per key, the last op's record (encoded)
/// or `None` (removed).
pub fn bfd_writes(ops: &[Op]) -> Result<Vec<RecordWrite<'_>>, StoreError> {
    last_per_key(ops.iter().filter_map(|op| match op {
        Op::Bfd { key, record } => {
            Some(encode_apart(key, record, "BFD record").map(|v| (key.as_str(), Some(v))))
        }
        Op::BfdRemove { key } => Some(Ok((key.as_str(), None))),
        _ => None,
    }))
}

/// The run-time route sets a batch leaves: per key, the last op's record
/// (encoded) or `None` (no routes: removed).
pub fn originated_writes(ops: &[Op]) -> Result<Vec<RecordWrite<'_>>, StoreError> {
    last_per_key(ops.iter().filter_map(|op| match op {
        Op::Originated { key, record } if record.routes.is_empty() => {
            Some(Ok((key.as_str(), None)))
        }
        Op::Originated { key, record } => {
            Some(encode_apart(key, record, "originated routes").map(|v| (key.as_str(), Some(v))))
        }
        _ => None,
    }))
}

/// Parses the stored records of one hash (field: key, value: JSON) into
/// `make(key, record)`, refusing a newer schema as [`decode_record`] does.
pub fn decode_apart<R, T, B>(
    entries: impl IntoIterator<Item = (String, B)>,
    make: impl Fn(String, R) -> T,
) -> Result<Vec<T>, StoreError>
where
    R: serde::de::DeserializeOwned,
    B: AsRef<[u8]>,
{
    entries
        .into_iter()
        .map(|(key, json)| {
            let record = decode_versioned(&key, json.as_ref())?;
            Ok(make(key, record))
        })
        .collect()
}

/// Serialises a record as stored (JSON).
pub fn encode_record(key: &str, record: &SessionRecord) -> Result<Vec<u8>, StoreError> {
    serde_json::to_vec(record).map_err(|e| StoreError::Corrupt {
        key: key.to_string(),
        reason: format!("cannot encode record: {e}"),
    })
}

/// Parses a stored record: the schema is checked before the rest, so a
/// record of a newer schema is reported as such even if its fields no
/// longer parse.
pub fn decode_record(key: &str, json: &[u8]) -> Result<SessionRecord, StoreError> {
    decode_versioned(key, json)
}

fn decode_versioned<T: serde::de::DeserializeOwned>(
    key: &str,
    json: &[u8],
) -> Result<T, StoreError> {
    #[derive(Deserialize)]
    struct Probe {
        schema: u32,
    }
    let corrupt = |reason: String| StoreError::Corrupt {
        key: key.to_string(),
        reason,
    };
    let probe: Probe =
        serde_json::from_slice(json).map_err(|e| corrupt(format!("record schema: {e}")))?;
    if probe.schema > SCHEMA_VERSION {
        return Err(StoreError::Schema {
            key: key.to_string(),
            found: probe.schema,
            supported: SCHEMA_VERSION,
        });
    }
    serde_json::from_slice(json).map_err(|e| corrupt(format!("record: {e}")))
}

/// Parses a decimal sequence number as stored.
pub fn decode_u32(key: &str, what: &str, raw: &[u8]) -> Result<u32, StoreError> {
    std::str::from_utf8(raw)
        .ok()
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| StoreError::Corrupt {
            key: key.to_string(),
            reason: format!("{what}: not a u32: {:?}", String::from_utf8_lossy(raw)),
        })
}

/// Splits a stored send-tail chunk `[seq_end BE32][bytes]`.
pub fn decode_tail_chunk(key: &str, raw: Bytes) -> Result<(u32, Bytes), StoreError> {
    if raw.len() < 4 {
        return Err(StoreError::Corrupt {
            key: key.to_string(),
            reason: format!("send-tail chunk of {} bytes", raw.len()),
        });
    }
    let end = u32::from_be_bytes([raw[0], raw[1], raw[2], raw[3]]);
    Ok((end, raw.slice(4..)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rcv(key: &str, ack: u32, b: &'static [u8]) -> Op {
        Op::Received {
            key: key.into(),
            ack,
            updates: Bytes::from_static(b),
            partial: Bytes::new(),
        }
    }
    fn sent(key: &str, seq_end: u32, b: &'static [u8]) -> Op {
        Op::Sent {
            key: key.into(),
            seq_end,
            bytes: Bytes::from_static(b),
        }
    }

    #[test]
    fn merges_per_session_across_other_sessions() {
        let ops = vec![
            rcv("a", 10, b"x"),
            rcv("b", 5, b"y"),
            rcv("a", 12, b"zz"),
            rcv("a", 12, b""),
            sent("a", 103, b"abc"),
            sent("a", 105, b"de"),
            sent("a", 200, b"f"), // not contiguous
            Op::Acked {
                key: "a".into(),
                snd_una: 100,
            },
            Op::Acked {
                key: "a".into(),
                snd_una: 103,
            },
            Op::Acked {
                key: "a".into(),
                snd_una: 101, // backwards: kept as a step
            },
        ];
        let steps = plan(&ops);
        assert_eq!(steps.len(), 6, "{steps:?}");
        match &steps[0] {
            Step::Received { ack, parts, .. } => {
                assert_eq!(*ack, 12);
                assert_eq!(concat(parts), Bytes::from_static(b"xzz"));
            }
            s => panic!("{s:?}"),
        }
        match &steps[2] {
            Step::Sent { seq_end, parts, .. } => {
                assert_eq!(*seq_end, 105);
                assert_eq!(concat(parts), Bytes::from_static(b"abcde"));
            }
            s => panic!("{s:?}"),
        }
        assert!(matches!(steps[4], Step::Acked { snd_una: 103, .. }));
        assert!(matches!(steps[5], Step::Acked { snd_una: 101, .. }));
    }

    #[test]
    fn received_merges_across_sent_and_acked() {
        let ops = vec![
            rcv("a", 1, b"x"),
            sent("a", 3, b"ab"),
            Op::Acked {
                key: "a".into(),
                snd_una: 1,
            },
            rcv("a", 2, b"y"),
            sent("a", 4, b"c"), // after an Acked: not merged
            Op::Acked {
                key: "a".into(),
                snd_una: 4,
            }, // after a Sent: not merged
            Op::Snapshot {
                key: "a".into(),
                adj_in: Bytes::new(),
                adj_out: Bytes::new(),
            },
            rcv("a", 3, b"z"), // after a Snapshot: not merged
        ];
        let steps = plan(&ops);
        assert_eq!(steps.len(), 7, "{steps:?}");
        match &steps[0] {
            Step::Received { ack, parts, .. } => {
                assert_eq!(*ack, 2);
                assert_eq!(concat(parts), Bytes::from_static(b"xy"));
            }
            s => panic!("{s:?}"),
        }
    }

    #[test]
    fn sent_merge_across_wrap() {
        let ops = vec![sent("a", 2, b"abcd"), sent("a", 5, b"efg")];
        let steps = plan(&ops);
        assert_eq!(steps.len(), 1);
        let ops = vec![sent("a", u32::MAX - 1, b"ab"), sent("a", 2, b"efgh")];
        let steps = plan(&ops);
        assert_eq!(steps.len(), 1);
        assert!(matches!(steps[0], Step::Sent { seq_end: 2, .. }));
    }

    #[test]
    fn record_schema_checked_first() {
        let e = decode_record("k", br#"{"schema": 99, "whatever": true}"#).unwrap_err();
        assert!(matches!(e, StoreError::Schema { found: 99, .. }), "{e}");
        let e = decode_record("k", br#"{"schema": 1}"#).unwrap_err();
        assert!(matches!(e, StoreError::Corrupt { .. }), "{e}");
        let e = decode_record("k", b"nope").unwrap_err();
        assert!(matches!(e, StoreError::Corrupt { .. }), "{e}");
    }
}
