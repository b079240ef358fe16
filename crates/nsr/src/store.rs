//! The state-store interface.

use crate::record::{InstanceState, LogPos, Op};
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
    /// Drops the connection and opens a new one.
    fn reconnect(&mut self) -> Result<(), StoreError>;
}
