//! A takeover's second read of the store: the sessions' Adj-RIB-In and
//! Adj-RIB-Out logs, read on a thread of their own while the sessions
//! resume.
//!
//! The first read ([`Store::load_heads`]) gives everything a session needs
//! to resume (its record, sequence numbers, send tail) and where each log
//! ends. The sessions resume at once; this thread reads the logs up to
//! those ends ([`Store::load_logs`]) meanwhile. The RIB thread waits for
//! them at the takeover's `RibCmd::Resume` ([`PendingLogs::take`]), and
//! every command behind it in its queue (a resumed peer's new UPDATEs, a
//! compaction's snapshot) waits with it: the tables are built from the old
//! logs first, then from what came after, in order.
//!
//! What the new primary writes meanwhile goes after the ends, so the two
//! reads see the logs at one instant. A log replaced meanwhile (a session
//! written anew after a reset) comes back empty: its `PeerDown` is queued
//! behind the resume.
//!
//! # Known issues
//! - A store that does not answer (the reader retries as the takeover's
//!   first read does) fails the takeover after the sessions resumed: the
//!   daemon exits, the gate's rules drop its FIN and RST, and another
//!   takeover starts from the same stored state.

use holdfast_nsr::{LogChunks, LogRange, StoreError};
use std::collections::HashMap;
use std::sync::{Arc, Condvar, Mutex};
use std::time::Instant;

/// The logs being read, shared by the RIB threads (which take them) and
/// the resumed sessions (which learn their size, for compaction).
#[derive(Clone)]
pub struct PendingLogs {
    inner: Arc<Inner>,
}

struct Inner {
    state: Mutex<State>,
    ready: Condvar,
}

enum State {
    Reading,
    Read {
        chunks: HashMap<String, LogChunks>,
        /// Bytes of each session's logs (kept after its chunks are taken).
        bytes: HashMap<String, u64>,
        /// From the takeover's start to the logs read.
        since_start_us: u64,
    },
    Failed(String),
}

impl PendingLogs {
    /// Starts reading `ranges` with `read` (`Store::load_logs`, with the
    /// caller's retries) on a thread `nsr-logs`. `started`: the
    /// takeover's start, for the figures.
    pub fn start(
        ranges: Vec<LogRange>,
        started: Instant,
        read: impl FnOnce(&[LogRange]) -> Result<Vec<Option<LogChunks>>, StoreError> + Send + 'static,
    ) -> std::io::Result<PendingLogs> {
        let logs = PendingLogs::new(State::Reading);
        let out = logs.clone();
        std::thread::Builder::new()
            .name("nsr-logs".into())
            .spawn(move || {
                let t = Instant::now();
                let state = match read(&ranges) {
                    Ok(found) => read_state(&ranges, found, started),
                    Err(e) => State::Failed(e.to_string()),
                };
                match &state {
                    State::Read {
                        bytes,
                        since_start_us,
                        ..
                    } => tracing::info!(
                        sessions = ranges.len(),
                        bytes = bytes.values().sum::<u64>(),
                        logs_ms = t.elapsed().as_millis() as u64,
                        since_start_ms = since_start_us / 1000,
                        "takeover: logs loaded"
                    ),
                    State::Failed(e) => {
                        tracing::error!(error = %e, "takeover: the stored logs cannot be read")
                    }
                    State::Reading => {}
                }
                logs.set(state);
            })?;
        Ok(out)
    }

    /// Logs read already (a test's, or a takeover with nothing stored).
    pub fn read(chunks: HashMap<String, LogChunks>) -> PendingLogs {
        let bytes = chunks.iter().map(|(k, c)| (k.clone(), size(c))).collect();
        PendingLogs::new(State::Read {
            chunks,
            bytes,
            since_start_us: 0,
        })
    }

    fn new(state: State) -> PendingLogs {
        PendingLogs {
            inner: Arc::new(Inner {
                state: Mutex::new(state),
                ready: Condvar::new(),
            }),
        }
    }

    fn set(&self, state: State) {
        let mut s = self.inner.state.lock().unwrap_or_else(|p| p.into_inner());
        *s = state;
        self.inner.ready.notify_all();
    }

    /// Waits until the logs are read, then takes the chunks of `keys`
    /// (a session missing from the answer has empty logs). The error
    /// says why they cannot be read.
    pub fn take<'a>(
        &self,
        keys: impl Iterator<Item = &'a str>,
    ) -> Result<HashMap<String, LogChunks>, String> {
        let mut s = self.inner.state.lock().unwrap_or_else(|p| p.into_inner());
        while matches!(*s, State::Reading) {
            s = self.inner.ready.wait(s).unwrap_or_else(|p| p.into_inner());
        }
        match &mut *s {
            State::Read { chunks, .. } => Ok(keys.filter_map(|k| chunks.remove_entry(k)).collect()),
            State::Failed(e) => Err(e.clone()),
            State::Reading => Err("still reading".into()),
        }
    }

    /// The size of a session's stored logs once read (`None` before).
    pub fn bytes(&self, key: &str) -> Option<u64> {
        match &*self.inner.state.lock().unwrap_or_else(|p| p.into_inner()) {
            State::Read { bytes, .. } => Some(bytes.get(key).copied().unwrap_or(0)),
            _ => None,
        }
    }

    /// From the takeover's start to the logs read (`None` before).
    pub fn since_start_us(&self) -> Option<u64> {
        match &*self.inner.state.lock().unwrap_or_else(|p| p.into_inner()) {
            State::Read { since_start_us, .. } => Some(*since_start_us),
            _ => None,
        }
    }
}

/// The answer of [`Store::load_logs`] by session key. A session whose logs
/// were replaced since the first read is logged and left out.
fn read_state(ranges: &[LogRange], found: Vec<Option<LogChunks>>, started: Instant) -> State {
    let mut chunks = HashMap::with_capacity(ranges.len());
    let mut bytes = HashMap::with_capacity(ranges.len());
    for (r, c) in ranges.iter().zip(found) {
        match c {
            Some(c) => {
                bytes.insert(r.key.clone(), size(&c));
                chunks.insert(r.key.clone(), c);
            }
            None => tracing::warn!(
                key = %r.key,
                "takeover: the session's logs were replaced after it resumed (written anew after a reset): its old tables are not rebuilt"
            ),
        }
    }
    State::Read {
        chunks,
        bytes,
        since_start_us: started.elapsed().as_micros() as u64,
    }
}

fn size(c: &LogChunks) -> u64 {
    c.adj_in
        .iter()
        .chain(&c.adj_out)
        .map(|b| b.len() as u64)
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use holdfast_nsr::{LogEnd, LogPos, MemoryStore, Op, Store};

    fn chunks(adj_in: &'static [u8]) -> LogChunks {
        LogChunks {
            adj_in: vec![Bytes::from_static(adj_in)],
            adj_out: Vec::new(),
        }
    }

    #[test]
    fn take_waits_for_the_read_and_hands_each_session_out_once() {
        let logs = PendingLogs::new(State::Reading);
        assert_eq!(logs.bytes("a"), None);
        let setter = logs.clone();
        let t = std::thread::spawn(move || {
            std::thread::sleep(std::time::Duration::from_millis(20));
            setter.set(State::Read {
                chunks: HashMap::from([("a".into(), chunks(b"abc")), ("b".into(), chunks(b"de"))]),
                bytes: HashMap::from([("a".into(), 3), ("b".into(), 2)]),
                since_start_us: 7,
            });
        });
        let got = logs.take(["a", "c"].into_iter()).expect("read");
        t.join().expect("setter");
        assert_eq!(got.len(), 1);
        assert_eq!(got["a"], chunks(b"abc"));
        assert!(logs.take(["a"].into_iter()).expect("read").is_empty());
        assert_eq!(logs.bytes("a"), Some(3), "the size stays");
        assert_eq!(logs.bytes("z"), Some(0));
        assert_eq!(logs.since_start_us(), Some(7));
    }

    #[test]
    fn a_failed_read_is_an_error_for_every_taker() {
        let logs = PendingLogs::new(State::Failed("fenced".into()));
        assert_eq!(logs.take(["a"].into_iter()), Err("fenced".to_string()));
        assert_eq!(logs.bytes("a"), None);
    }

    #[test]
    fn reads_the_ranges_from_the_store_on_its_own_thread() {
        let mut store = MemoryStore::new("t");
        let e = store.claim().expect("claim");
        let rec = crate::test_fixtures::session_record((Vec::new(), Vec::new()), (100, 200));
        store
            .write(
                e,
                &[
                    Op::Session {
                        key: "a".into(),
                        record: rec,
                    },
                    Op::Received {
                        key: "a".into(),
                        ack: 205,
                        updates: Bytes::from_static(b"first"),
                        partial: Bytes::new(),
                    },
                ],
            )
            .expect("write");
        let (state, ends) = store.load_heads(&HashMap::new()).expect("heads");
        let ranges: Vec<LogRange> = state
            .sessions
            .iter()
            .map(|s| LogRange {
                key: s.key.clone(),
                from: s.log,
                end: ends[&s.key],
            })
            .collect();
        assert_eq!(
            ranges[0].end,
            LogEnd {
                adj_in: 1,
                adj_out: 0
            }
        );
        assert_eq!(ranges[0].from, LogPos::start(ranges[0].from.version));
        let logs = PendingLogs::start(ranges, Instant::now(), move |r| store.load_logs(r))
            .expect("thread");
        let got = logs.take(["a"].into_iter()).expect("read");
        assert_eq!(got["a"], chunks(b"first"));
        assert_eq!(logs.bytes("a"), Some(5));
    }
}
