//! Pipelined writes of the Redis store ([`Store::send_write`],
//! [`Store::recv_write`]).
//!
//! A write is one or more script calls: its session steps (split at the
//! batch limit), then its BFD records and run-time route sets. [`RedisStore::send_calls`] packs
//! and sends them all at once, each followed by a `WAIT` if replicas are
//! asked for, and queues what it sent; [`RedisStore::recv_calls`] reads the
//! replies of the oldest write, in order. Redis runs the commands of one
//! connection in the order received, so writes apply in the order sent.
//!
//! The first error ends the pipeline: the calls still in flight are
//! abandoned and the connection is dropped, so that no late reply is ever
//! read as the answer to a later command.
//!
//! `NOSCRIPT` (the script cache was flushed) is answered by resending the
//! call with `EVAL` when nothing was sent after it; with other calls in
//! flight behind it (which would run before the resent one) the write fails
//! as `Unavailable` instead, and the caller re-synchronises.
//!
//! # Known issues
//! - A write's BFD records and run-time route sets are a second script
//!   call: atomic on their own, not together with the write's session
//!   steps (as before pipelining).

use super::{header, Packer, RedisStore, HEADER_ROOM, RECORDS_SCRIPT, WRITE_SCRIPT};
use holdfast_nsr::batch::{self, RecordWrite, Step};
use holdfast_nsr::{Op, StoreError};
use redis::Value;

/// A script call's reply, and its `WAIT`'s if one was sent.
type Replies = (redis::RedisResult<Value>, Option<redis::RedisResult<Value>>);

/// Which script a call runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Script {
    Write,
    Records,
}

impl Script {
    fn text(self) -> &'static str {
        match self {
            Script::Write => WRITE_SCRIPT,
            Script::Records => RECORDS_SCRIPT,
        }
    }
}

/// A script call sent and not answered yet.
pub(super) struct Sent {
    script: Script,
    /// `numkeys KEYS... ARGV...` after [`HEADER_ROOM`] bytes (kept for an
    /// `EVAL` resend).
    call: Packer,
    epoch: u64,
    /// A `WAIT` was sent after it.
    wait: bool,
    /// The last call of its write.
    last: bool,
}

impl RedisStore {
    /// Packs and sends every call of a write; on an error every call in
    /// flight is abandoned.
    pub(super) fn send_calls(&mut self, epoch: u64, ops: &[Op]) -> Result<(), StoreError> {
        let r = self.pack_calls(epoch, ops).and_then(|calls| {
            let n = calls.len();
            for (i, (script, call)) in calls.into_iter().enumerate() {
                let mut sent = Sent {
                    script,
                    call,
                    epoch,
                    wait: self.wait_replicas > 0,
                    last: i + 1 == n,
                };
                self.send(&mut sent)?;
                self.in_flight.push_back(sent);
            }
            Ok(())
        });
        if r.is_err() {
            self.abandon();
        }
        r
    }

    /// Reads the outcome of the oldest write in flight; on an error every
    /// call still in flight is abandoned.
    pub(super) fn recv_calls(&mut self) -> Result<(), StoreError> {
        loop {
            let Some(sent) = self.in_flight.pop_front() else {
                return Err(StoreError::Unavailable(format!(
                    "{}: no write in flight",
                    self.peer
                )));
            };
            let last = sent.last;
            if let Err(e) = self.recv(sent) {
                self.abandon();
                return Err(e);
            }
            if last {
                return Ok(());
            }
        }
    }

    /// Drops every call in flight, and with them the connection.
    pub(super) fn abandon(&mut self) {
        if !self.in_flight.is_empty() {
            self.in_flight.clear();
            self.conn = None;
        }
    }

    /// The calls of a write: its session steps, split at the batch limit
    /// (one empty call if there are none: it still checks the epoch), then
    /// its BFD records and run-time route sets.
    fn pack_calls(&self, epoch: u64, ops: &[Op]) -> Result<Vec<(Script, Packer)>, StoreError> {
        let bfd = batch::bfd_writes(ops)?;
        let originated = batch::originated_writes(ops)?;
        let steps = batch::plan(ops);
        let mut calls = Vec::new();
        if steps.is_empty() {
            calls.push((Script::Write, self.pack(epoch, &[])?));
        }
        let mut start = 0;
        while start < steps.len() {
            let end = split_end(&steps, start, self.batch_limit);
            calls.push((Script::Write, self.pack(epoch, &steps[start..end])?));
            start = end;
        }
        if !bfd.is_empty() || !originated.is_empty() {
            calls.push((Script::Records, self.pack_records(epoch, &bfd, &originated)));
        }
        Ok(calls)
    }

    /// The records script's arguments: `H key json` sets and `D key`
    /// deletes BFD records, `O key json` sets and `N key` deletes run-time
    /// route sets.
    fn pack_records(
        &self,
        epoch: u64,
        bfd: &[RecordWrite<'_>],
        originated: &[RecordWrite<'_>],
    ) -> Packer {
        let room: usize = bfd
            .iter()
            .chain(originated)
            .map(|(k, v)| k.len() + v.as_ref().map_or(0, Vec::len) + 32)
            .sum();
        let mut p = Packer::with_room(HEADER_ROOM, room + 160);
        p.arg_num(3);
        p.arg(self.epoch_key.as_bytes());
        p.arg(self.bfd_key.as_bytes());
        p.arg(self.originated_key.as_bytes());
        p.arg_num(epoch);
        let ops = bfd
            .iter()
            .map(|w| (w, (b"H", b"D")))
            .chain(originated.iter().map(|w| (w, (b"O", b"N"))));
        for ((key, value), (set, del)) in ops {
            match value {
                Some(v) => {
                    p.arg(set);
                    p.arg(key.as_bytes());
                    p.arg(v);
                }
                None => {
                    p.arg(del);
                    p.arg(key.as_bytes());
                }
            }
        }
        p
    }

    /// Sends `EVALSHA` with the call's arguments (the header written into
    /// the room left for it), and its `WAIT`.
    fn send(&mut self, sent: &mut Sent) -> Result<(), StoreError> {
        let sha = match sent.script {
            Script::Write => self.script_sha.clone(),
            Script::Records => self.records_sha.clone(),
        };
        let h = header(sent.call.args + 2, &[b"EVALSHA", sha.as_bytes()]);
        let start = HEADER_ROOM.checked_sub(h.len()).ok_or_else(|| {
            StoreError::Unavailable("internal: EVALSHA header does not fit".into())
        })?;
        sent.call.buf[start..HEADER_ROOM].copy_from_slice(&h);
        self.send_packed(&sent.call.buf[start..], sent.wait)
    }

    /// Sends `packed`, then the `WAIT` if `wait`, on the open connection
    /// (opened first if there is none and nothing is in flight).
    fn send_packed(&mut self, packed: &[u8], wait: bool) -> Result<(), StoreError> {
        if self.conn.is_none() {
            if !self.in_flight.is_empty() {
                return Err(StoreError::Unavailable("not connected".into()));
            }
            self.open()?;
        }
        let wait_cmd = if wait {
            self.wait_command()
        } else {
            Vec::new()
        };
        let Some(conn) = self.conn.as_mut() else {
            return Err(StoreError::Unavailable("not connected".into()));
        };
        let mut r = conn.send_packed_command(packed);
        if r.is_ok() && !wait_cmd.is_empty() {
            r = conn.send_packed_command(&wait_cmd);
        }
        r.map_err(|e| self.fail(e))
    }

    /// Reads one call's replies (and its `WAIT`'s), resending it with
    /// `EVAL` on `NOSCRIPT` if nothing is in flight behind it.
    fn recv(&mut self, sent: Sent) -> Result<(), StoreError> {
        let mut replies = self.replies(sent.wait)?;
        if matches!(&replies.0, Err(e) if e.code() == Some("NOSCRIPT")) {
            if !self.in_flight.is_empty() {
                return Err(StoreError::Unavailable(format!(
                    "{}: script not loaded (NOSCRIPT) with writes in flight behind it",
                    self.peer
                )));
            }
            let h = header(
                sent.call.args + 2,
                &[b"EVAL", sent.script.text().as_bytes()],
            );
            let mut buf = Vec::with_capacity(h.len() + sent.call.buf.len() - HEADER_ROOM);
            buf.extend_from_slice(&h);
            buf.extend_from_slice(&sent.call.buf[HEADER_ROOM..]);
            self.send_packed(&buf, sent.wait)?;
            replies = self.replies(sent.wait)?;
        }
        let (script, wait) = replies;
        match script {
            Ok(_) => {}
            Err(e) if e.code() == Some("FENCED") => {
                let current = e
                    .detail()
                    .and_then(|d| d.trim().parse().ok())
                    .ok_or_else(|| StoreError::Corrupt {
                        key: self.epoch_key.clone(),
                        reason: format!("bad fencing reply: {e}"),
                    })?;
                return Err(StoreError::Fenced {
                    current,
                    ours: sent.epoch,
                });
            }
            Err(e) => return Err(self.fail(e)),
        }
        match wait {
            None => Ok(()),
            Some(Ok(Value::Int(n))) if n >= i64::from(self.wait_replicas) => Ok(()),
            Some(Ok(Value::Int(n))) => Err(self.too_few_replicas("write", n)),
            Some(Ok(v)) => Err(self.too_few_replicas("write", format!("{v:?}"))),
            Some(Err(e)) => Err(self.fail(e)),
        }
    }

    /// A script's reply, and its `WAIT`'s if `wait`. The outer error is a
    /// failed exchange (the connection is dropped), the inner ones error
    /// replies.
    fn replies(&mut self, wait: bool) -> Result<Replies, StoreError> {
        let script = self.reply()?;
        let wait = if wait { Some(self.reply()?) } else { None };
        Ok((script, wait))
    }

    fn reply(&mut self) -> Result<redis::RedisResult<Value>, StoreError> {
        let Some(conn) = self.conn.as_mut() else {
            return Err(StoreError::Unavailable("not connected".into()));
        };
        match conn.recv_response() {
            Ok(v) => Ok(v.extract_error()),
            Err(e) if e.code().is_some() => Ok(Err(e)),
            Err(e) => Err(self.fail(e)),
        }
    }
}

/// The end of the call that starts at `start`: steps up to `limit` payload
/// bytes, and at least one.
fn split_end(steps: &[Step<'_>], start: usize, limit: usize) -> usize {
    let mut end = start;
    let mut size = 0usize;
    while end < steps.len() && (end == start || size + steps[end].payload_len() <= limit) {
        size += steps[end].payload_len();
        end += 1;
    }
    end
}
