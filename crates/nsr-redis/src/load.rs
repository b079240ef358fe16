//! Reading an instance back: every session at one instant with its logs
//! from a position ([`holdfast_nsr::Store::load_since`], a standby's poll), or without
//! them ([`holdfast_nsr::Store::load_heads`]) and then the logs up to where they ended
//! ([`holdfast_nsr::Store::load_logs`], a takeover's two reads); the BFD records and
//! run-time routes beside them.

use super::{bulk, list, parse_epoch, RawHash, RedisStore};
use holdfast_nsr::batch;
use holdfast_nsr::{
    InstanceState, LogChunks, LogEnd, LogPos, LogRange, StoreError, StoredBfd, StoredOriginated,
    StoredSession,
};
use redis::Value;
use std::collections::HashMap;

/// How [`RedisStore::read_sessions`] reads the two logs.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Logs {
    /// Their chunks from the given position.
    Read,
    /// Only their lengths (`LLEN`): the sessions come with empty logs.
    Count,
}

/// `LRANGE` bounds for the chunks `from..end` (`1 0` for none: `-1` would
/// mean the last one).
fn lrange_bounds(from: usize, end: usize) -> (i64, i64) {
    if end > from {
        (from as i64, end as i64 - 1)
    } else {
        (1, 0)
    }
}

impl RedisStore {
    /// The sessions to read: every stored key, from `from`'s position or
    /// the start.
    fn wanted(
        &mut self,
        from: &HashMap<String, LogPos>,
    ) -> Result<Vec<(String, LogPos)>, StoreError> {
        Ok(self
            .session_keys()?
            .into_iter()
            .map(|k| {
                let pos = from.get(&k).copied().unwrap_or_default();
                (k, pos)
            })
            .collect())
    }

    /// `SMEMBERS`: the instance's session keys, sorted.
    fn session_keys(&mut self) -> Result<Vec<String>, StoreError> {
        let members: redis::RedisResult<Vec<Vec<u8>>> = redis::cmd("SMEMBERS")
            .arg(&self.sessions_key)
            .query(self.conn()?);
        let members = members.map_err(|e| self.fail(e))?;
        let mut keys = Vec::with_capacity(members.len());
        for m in members {
            match String::from_utf8(m) {
                Ok(k) => keys.push(k),
                Err(e) => {
                    return Err(self.corrupt(
                        &self.sessions_key,
                        format!("session key not UTF-8: {:?}", e.as_bytes()),
                    ))
                }
            }
        }
        keys.sort();
        Ok(keys)
    }

    /// One `MULTI`/`EXEC`: the epoch, and every session of `wanted` with
    /// its logs from the given position, or only their lengths (the
    /// version is not compared: the caller does). Each session comes with
    /// where its logs end. A session removed meanwhile is left out.
    fn read_sessions(
        &mut self,
        wanted: &[(String, LogPos)],
        logs: Logs,
    ) -> Result<(u64, Vec<(StoredSession, LogEnd)>), StoreError> {
        const PER_SESSION: usize = 9;
        let mut p = redis::pipe();
        p.atomic();
        p.cmd("GET").arg(&self.epoch_key);
        for (k, pos) in wanted {
            p.cmd("GET").arg(self.session_key(k, "rec"));
            p.cmd("GET").arg(self.session_key(k, "rcv"));
            p.cmd("GET").arg(self.session_key(k, "una"));
            for (suffix, from) in [("in", pos.adj_in), ("out", pos.adj_out)] {
                match logs {
                    Logs::Read => p
                        .cmd("LRANGE")
                        .arg(self.session_key(k, suffix))
                        .arg(from)
                        .arg(-1),
                    Logs::Count => p.cmd("LLEN").arg(self.session_key(k, suffix)),
                };
            }
            p.cmd("LRANGE")
                .arg(self.session_key(k, "tail"))
                .arg(0)
                .arg(-1);
            p.cmd("GET").arg(self.session_key(k, "part"));
            p.cmd("GET").arg(self.session_key(k, "ver"));
            p.cmd("GET").arg(self.session_key(k, "rr"));
        }
        let r: redis::RedisResult<Vec<Value>> = p.query(self.conn()?);
        let values = r.map_err(|e| self.fail(e))?;
        if values.len() != 1 + PER_SESSION * wanted.len() {
            return Err(StoreError::Unavailable(format!(
                "{}: load: {} replies for {} sessions",
                self.peer,
                values.len(),
                wanted.len()
            )));
        }
        let mut it = values.into_iter();
        let epoch = parse_epoch(&self.epoch_key, it.next().and_then(bulk))?;
        let mut sessions = Vec::with_capacity(wanted.len());
        for (key, pos) in wanted {
            let key = key.clone();
            let mut next = || it.next().unwrap_or(Value::Nil);
            let (rec, rcv, una) = (next(), next(), next());
            let (adj_in, adj_out, tail, part, ver) = (next(), next(), next(), next(), next());
            let refresh = bulk(next()).unwrap_or_default();
            let Some(rec) = bulk(rec) else {
                // Removed since SMEMBERS (or a dangling member).
                continue;
            };
            let record = batch::decode_record(&key, &rec)?;
            let rcv = bulk(rcv).ok_or_else(|| self.corrupt(&key, "rcv missing"))?;
            let una = bulk(una).ok_or_else(|| self.corrupt(&key, "una missing"))?;
            let (adj_in, adj_out, end) = match logs {
                Logs::Read => {
                    let adj_in =
                        list(adj_in).ok_or_else(|| self.corrupt(&key, "in: not a list"))?;
                    let adj_out =
                        list(adj_out).ok_or_else(|| self.corrupt(&key, "out: not a list"))?;
                    let end = LogEnd {
                        adj_in: pos.adj_in + adj_in.len(),
                        adj_out: pos.adj_out + adj_out.len(),
                    };
                    (adj_in, adj_out, end)
                }
                Logs::Count => {
                    let count = |v: Value, what: &str| match v {
                        Value::Int(n) => usize::try_from(n).map_err(|_| self.corrupt(&key, what)),
                        _ => Err(self.corrupt(&key, what)),
                    };
                    let end = LogEnd {
                        adj_in: count(adj_in, "in: no length")?,
                        adj_out: count(adj_out, "out: no length")?,
                    };
                    (Vec::new(), Vec::new(), end)
                }
            };
            let tail = list(tail).ok_or_else(|| self.corrupt(&key, "tail: not a list"))?;
            let version = parse_epoch(&key, bulk(ver))?;
            let send_tail = tail
                .into_iter()
                .map(|c| batch::decode_tail_chunk(&key, c))
                .collect::<Result<Vec<_>, _>>()?;
            sessions.push((
                StoredSession {
                    rcv: batch::decode_u32(&key, "rcv", &rcv)?,
                    partial: bulk(part).unwrap_or_default(),
                    snd_una: batch::decode_u32(&key, "una", &una)?,
                    key,
                    record,
                    adj_in,
                    adj_out,
                    send_tail,
                    refresh,
                    log: LogPos { version, ..*pos },
                },
                end,
            ));
        }
        Ok((epoch, sessions))
    }

    /// The BFD records and the run-time routes, sorted by key.
    fn read_apart(&mut self) -> Result<(Vec<StoredBfd>, Vec<StoredOriginated>), StoreError> {
        let r: redis::RedisResult<(RawHash, RawHash)> = redis::pipe()
            .cmd("HGETALL")
            .arg(&self.bfd_key)
            .cmd("HGETALL")
            .arg(&self.originated_key)
            .query(self.conn()?);
        let (mut raw, mut raw_originated) = r.map_err(|e| self.fail(e))?;
        raw.sort();
        raw_originated.sort();
        let bfd = batch::decode_apart(raw, |key, record| StoredBfd { key, record })?;
        let originated = batch::decode_apart(raw_originated, |key, record| StoredOriginated {
            key,
            record,
        })?;
        Ok((bfd, originated))
    }

    /// One `SMEMBERS`, one `MULTI`/`EXEC` reading every session from its
    /// position, and for the sessions whose logs changed version since,
    /// one more reading them whole.
    pub(crate) fn read_since(
        &mut self,
        from: &HashMap<String, LogPos>,
    ) -> Result<InstanceState, StoreError> {
        let wanted = self.wanted(from)?;
        let (epoch, read) = self.read_sessions(&wanted, Logs::Read)?;
        let mut sessions: Vec<StoredSession> = read.into_iter().map(|(s, _)| s).collect();
        // Logs replaced since the reader's position: read those whole.
        let again: Vec<(String, LogPos)> = sessions
            .iter()
            .filter(|s| s.log.version != from.get(&s.key).map_or(0, |p| p.version))
            .filter(|s| s.log.adj_in != 0 || s.log.adj_out != 0)
            .map(|s| (s.key.clone(), LogPos::default()))
            .collect();
        if !again.is_empty() {
            let (_, whole) = self.read_sessions(&again, Logs::Read)?;
            let mut whole: HashMap<String, StoredSession> =
                whole.into_iter().map(|(s, _)| (s.key.clone(), s)).collect();
            sessions.retain_mut(|s| {
                if !again.iter().any(|(k, _)| *k == s.key) {
                    return true;
                }
                match whole.remove(&s.key) {
                    Some(w) => {
                        *s = w;
                        true
                    }
                    // Removed in between.
                    None => false,
                }
            });
        }
        let (bfd, originated) = self.read_apart()?;
        Ok(InstanceState {
            epoch,
            sessions,
            bfd,
            originated,
        })
    }

    /// One `SMEMBERS` and one `MULTI`/`EXEC` that counts the logs' chunks
    /// (`LLEN`) instead of reading them.
    pub(crate) fn read_heads(
        &mut self,
        from: &HashMap<String, LogPos>,
    ) -> Result<(InstanceState, HashMap<String, LogEnd>), StoreError> {
        let wanted = self.wanted(from)?;
        let (epoch, read) = self.read_sessions(&wanted, Logs::Count)?;
        let mut sessions = Vec::with_capacity(read.len());
        let mut ends = HashMap::with_capacity(read.len());
        for (mut s, end) in read {
            let followed = from.get(&s.key).copied().unwrap_or_default();
            if followed.version != s.log.version
                || followed.adj_in > end.adj_in
                || followed.adj_out > end.adj_out
            {
                // Replaced since the reader's position: from the start.
                s.log = LogPos::start(s.log.version);
            }
            ends.insert(s.key.clone(), end);
            sessions.push(s);
        }
        let (bfd, originated) = self.read_apart()?;
        let state = InstanceState {
            epoch,
            sessions,
            bfd,
            originated,
        };
        Ok((state, ends))
    }

    /// One `MULTI`/`EXEC`: each range's version and chunks.
    pub(crate) fn read_logs(
        &mut self,
        ranges: &[LogRange],
    ) -> Result<Vec<Option<LogChunks>>, StoreError> {
        let mut p = redis::pipe();
        p.atomic();
        for r in ranges {
            p.cmd("GET").arg(self.session_key(&r.key, "ver"));
            let (first, last) = lrange_bounds(r.from.adj_in, r.end.adj_in);
            p.cmd("LRANGE")
                .arg(self.session_key(&r.key, "in"))
                .arg(first)
                .arg(last);
            let (first, last) = lrange_bounds(r.from.adj_out, r.end.adj_out);
            p.cmd("LRANGE")
                .arg(self.session_key(&r.key, "out"))
                .arg(first)
                .arg(last);
        }
        let r: redis::RedisResult<Vec<Value>> = p.query(self.conn()?);
        let values = r.map_err(|e| self.fail(e))?;
        if values.len() != 3 * ranges.len() {
            return Err(StoreError::Unavailable(format!(
                "{}: load logs: {} replies for {} sessions",
                self.peer,
                values.len(),
                ranges.len()
            )));
        }
        let mut it = values.into_iter();
        let mut out = Vec::with_capacity(ranges.len());
        for r in ranges {
            let mut next = || it.next().unwrap_or(Value::Nil);
            let (ver, adj_in, adj_out) = (next(), next(), next());
            let version = match bulk(ver) {
                Some(v) => Some(parse_epoch(&r.key, Some(v))?),
                None => None,
            };
            let adj_in = list(adj_in).ok_or_else(|| self.corrupt(&r.key, "in: not a list"))?;
            let adj_out = list(adj_out).ok_or_else(|| self.corrupt(&r.key, "out: not a list"))?;
            let whole = adj_in.len() == r.end.adj_in.saturating_sub(r.from.adj_in)
                && adj_out.len() == r.end.adj_out.saturating_sub(r.from.adj_out);
            out.push(
                (version == Some(r.from.version) && whole).then_some(LogChunks { adj_in, adj_out }),
            );
        }
        Ok(out)
    }
}
