//! The state-store interface.

use crate::record::{InstanceState, LogPos, Op, StoredSession};
use bytes::Bytes;
use std::collections::HashMap;
use thiserror::Error;

#[derive(Debug, Error)]
pub enum StoreError {
    /// Another speaker claimed the instance: our epoch is stale. Nothing we
    /// write is accepted any more, ever.
    #[error("fenced: instance epoch is {current}, ours is {ours}")]
    Fenced { current: u64, ours: u64 },
    /// The store cannot be reached or did not answer in time.
    #[error("store unavailable: {0}")]
    Unavailable(String),
    /// Stored data that cannot be read.
    #[error("corrupt record {key}: {reason}")]
    Corrupt { key: String, reason: String },
    /// A record written by a newer, incompatible build.
    #[error("record {key} has schema {found}; this build reads up to {supported}")]
    Schema {
        key: String,
        found: u32,
        supported: u32,
    },
}

/// A replicated state store for one NSR instance.
pub trait Store: Send {
    /// Applies `ops` atomically and in order, provided `epoch` is still the
    /// instance's epoch; otherwise returns [`StoreError::Fenced`] and
    /// applies nothing.
    fn write(&mut self, epoch: u64, ops: &[Op]) -> Result<(), StoreError>;
    /// Sends a write like [`Store::write`] without waiting for its
    /// outcome, which [`Store::recv_write`] reads later (pipelining).
    /// Writes are applied in the order sent. The first error, from either
    /// call, ends the pipeline: the writes still in flight are abandoned
    /// (their outcome is unknown, as for an `Unavailable` write) and no
    /// outcome of theirs is read. No other call may be made while writes
    /// are in flight (a store abandons them if one is). The default writes
    /// at once, so its errors come from here.
    fn send_write(&mut self, epoch: u64, ops: &[Op]) -> Result<(), StoreError> {
        self.write(epoch, ops)
    }
    /// The outcome of the oldest write sent by [`Store::send_write`] and
    /// not read yet. The default has nothing left to wait for.
    fn recv_write(&mut self) -> Result<(), StoreError> {
        Ok(())
    }
    /// Takes the instance over: atomically increments its epoch and returns
    /// the new value. From then on writes with an older epoch are refused.
    fn claim(&mut self) -> Result<u64, StoreError>;
    /// [`Store::claim`], with the new epoch at least `min` (the controller's
    /// fencing token: the store epoch advances with it).
    fn claim_at_least(&mut self, min: u64) -> Result<u64, StoreError> {
        let e = self.claim()?;
        if e >= min {
            return Ok(e);
        }
        Err(StoreError::Unavailable(format!(
            "this store cannot raise the epoch to {min} (claimed {e})"
        )))
    }
    /// The instance's current epoch (0 if never claimed).
    fn epoch(&mut self) -> Result<u64, StoreError>;
    /// Reads every stored session of the instance.
    fn load(&mut self) -> Result<InstanceState, StoreError>;
    /// [`Store::load`] for a reader that already holds the logs up to
    /// `from` (by session key): a session whose logs are still at that
    /// version comes with only the chunks after the position (its
    /// [`StoredSession::log`](crate::StoredSession::log) is `from`'s);
    /// any other session comes whole (its `log` starts at 0). Everything
    /// but the two logs is always read whole. The default reads
    /// everything and drops what the reader has.
    fn load_since(&mut self, from: &HashMap<String, LogPos>) -> Result<InstanceState, StoreError> {
        let mut state = self.load()?;
        for s in &mut state.sessions {
            let Some(pos) = from.get(&s.key) else {
                continue;
            };
            if pos.version == s.log.version
                && pos.adj_in <= s.adj_in.len()
                && pos.adj_out <= s.adj_out.len()
            {
                s.adj_in.drain(..pos.adj_in);
                s.adj_out.drain(..pos.adj_out);
                s.log = *pos;
            }
        }
        Ok(state)
    }
    /// The first of a takeover's two reads (the second is
    /// [`Store::load_logs`]): [`Store::load_since`] without the two logs'
    /// chunks, so the sessions can resume before their tables are read.
    /// Each session's `adj_in` and `adj_out` are empty, its `log` is where
    /// its chunks start (`from`'s position if the version is still the
    /// same, else the start), and the returned map gives, by session key,
    /// where each log ended at the same instant. Everything is read at one
    /// instant, as by `load_since`.
    fn load_heads(
        &mut self,
        from: &HashMap<String, LogPos>,
    ) -> Result<(InstanceState, HashMap<String, LogEnd>), StoreError> {
        let mut state = self.load_since(from)?;
        let mut ends = HashMap::with_capacity(state.sessions.len());
        for s in &mut state.sessions {
            ends.insert(s.key.clone(), LogEnd::after(s));
            s.adj_in = Vec::new();
            s.adj_out = Vec::new();
        }
        Ok((state, ends))
    }
    /// The second read of a takeover: each range's chunks (Adj-RIB-In,
    /// Adj-RIB-Out), in the order asked. `None` for a session that is gone
    /// or whose logs are no longer of the range's version (written anew or
    /// compacted since). Logs only grow within a version, so the chunks
    /// read are those that were there at [`Store::load_heads`].
    fn load_logs(&mut self, ranges: &[LogRange]) -> Result<Vec<Option<LogChunks>>, StoreError> {
        let from: HashMap<String, LogPos> =
            ranges.iter().map(|r| (r.key.clone(), r.from)).collect();
        let state = self.load_since(&from)?;
        let by_key: HashMap<&str, &StoredSession> =
            state.sessions.iter().map(|s| (s.key.as_str(), s)).collect();
        Ok(ranges
            .iter()
            .map(|r| {
                let s = by_key.get(r.key.as_str())?;
                if s.log != r.from {
                    return None;
                }
                let adj_in = s.adj_in.get(..r.end.adj_in.checked_sub(r.from.adj_in)?)?;
                let adj_out = s
                    .adj_out
                    .get(..r.end.adj_out.checked_sub(r.from.adj_out)?)?;
                Some(LogChunks {
                    adj_in: adj_in.to_vec(),
                    adj_out: adj_out.to_vec(),
                })
            })
            .collect())
    }
    /// Drops the connection and opens a new one.
    fn reconnect(&mut self) -> Result<(), StoreError>;
}

/// Where a session's two logs ended when [`Store::load_heads`] read it:
/// how many chunks each held, counted from the start of its version.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LogEnd {
    pub adj_in: usize,
    pub adj_out: usize,
}

impl LogEnd {
    /// The end of what `s` holds (its chunks from `s.log` on).
    pub fn after(s: &StoredSession) -> LogEnd {
        LogEnd {
            adj_in: s.log.adj_in + s.adj_in.len(),
            adj_out: s.log.adj_out + s.adj_out.len(),
        }
    }
}

/// A session's log chunks for [`Store::load_logs`]: from `from` (its
/// version and first chunks) to `end`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogRange {
    pub key: String,
    pub from: LogPos,
    pub end: LogEnd,
}

/// One session's log chunks read by [`Store::load_logs`], oldest first.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LogChunks {
    /// Adj-RIB-In: whole UPDATE messages.
    pub adj_in: Vec<Bytes>,
    /// Adj-RIB-Out: whole messages of any type.
    pub adj_out: Vec<Bytes>,
}
