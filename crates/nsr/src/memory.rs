//! An in-memory [`Store`] for tests, with the semantics of the Redis one.
//!
//! A [`MemoryStore`] is a handle on a shared state (an `Arc<Mutex<..>>`)
//! and names one instance: clones are handles on the same state, so a test
//! can give one to a "primary" and another to a "backup" and see fencing,
//! and [`MemoryStore::for_instance`] opens another instance of the same
//! state. The state is laid out as the Redis keys are (see
//! `holdfast-nsr-redis`): a record (JSON, parsed on load
//! exactly as from Redis), `rcv` and `una`, three lists, and the set of
//! sessions; the BFD records and the run-time route sets by key; the same batch planning ([`Op`] merging) is applied, so both
//! stores keep the same chunks.
//!
//! [`MemoryStore::set_available`] simulates an outage: every call then
//! returns [`StoreError::Unavailable`], as a store that cannot be reached.
//!
//! Known issues:
//! - Nothing is persisted; a poisoned mutex (a panic while it was held) is
//!   recovered, as a test would want, not reported.
//! - [`Store::load`] returns sessions sorted by key; the Redis store does
//!   too, but do not rely on that order elsewhere.

use crate::batch::{self, Step};
use crate::record::{InstanceState, LogPos, Op, StoredBfd, StoredOriginated, StoredSession};
use crate::store::{Store, StoreError};
use bytes::Bytes;
use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};

/// Keys of one session, as in Redis: any of them may be missing.
#[derive(Debug, Default, Clone)]
struct MemSession {
    rec: Option<Bytes>,
    rcv: Option<u32>,
    adj_in: Vec<Bytes>,
    adj_out: Vec<Bytes>,
    /// `(seq_end, bytes)`, oldest first.
    tail: VecDeque<(u32, Bytes)>,
    una: Option<u32>,
    partial: Bytes,
    /// Pending ROUTE-REFRESH messages ([`Op::Refresh`]).
    refresh: Bytes,
    /// The logs' version ([`crate::LogPos`]).
    ver: u64,
}

#[derive(Debug, Default)]
struct Instance {
    epoch: u64,
    sessions: BTreeSet<String>,
    data: BTreeMap<String, MemSession>,
    /// BFD records (JSON), as the Redis `bfd` hash.
    bfd: BTreeMap<String, Bytes>,
    /// Run-time route sets (JSON), as the Redis `originated` hash.
    originated: BTreeMap<String, Bytes>,
    /// The counter log versions are drawn from (`logver`).
    logver: u64,
}

#[derive(Debug, Default)]
struct Shared {
    available: bool,
    instances: HashMap<String, Instance>,
}

/// A handle on an in-memory store, for one instance. Clones share it.
#[derive(Debug, Clone)]
pub struct MemoryStore {
    shared: Arc<Mutex<Shared>>,
    instance: String,
}

impl MemoryStore {
    /// A new, empty store, and a handle on `instance` in it.
    pub fn new(instance: impl Into<String>) -> Self {
        MemoryStore {
            shared: Arc::new(Mutex::new(Shared {
                available: true,
                instances: HashMap::new(),
            })),
            instance: instance.into(),
        }
    }

    /// A handle on another instance of the same store.
    pub fn for_instance(&self, instance: impl Into<String>) -> Self {
        MemoryStore {
            shared: Arc::clone(&self.shared),
            instance: instance.into(),
        }
    }

    /// The instance this handle writes.
    pub fn instance(&self) -> &str {
        &self.instance
    }

    /// Simulates an outage (`false`) or its end (`true`), for every handle.
    pub fn set_available(&self, available: bool) {
        self.lock().available = available;
    }

    /// Stores `json` as the record of session `key` without any check and
    /// adds it to the sessions (what a different build might have written);
    /// `rcv` and `una` are set to 0 if missing.
    pub fn put_raw_record(&self, key: &str, json: &[u8]) {
        let mut g = self.lock();
        let inst = g.instances.entry(self.instance.clone()).or_default();
        let s = inst.data.entry(key.to_string()).or_default();
        s.rec = Some(Bytes::copy_from_slice(json));
        s.rcv.get_or_insert(0);
        s.una.get_or_insert(0);
        inst.sessions.insert(key.to_string());
    }

    /// Stores `json` as the BFD record of `key` without any check.
    pub fn put_raw_bfd(&self, key: &str, json: &[u8]) {
        let mut g = self.lock();
        let inst = g.instances.entry(self.instance.clone()).or_default();
        inst.bfd
            .insert(key.to_string(), Bytes::copy_from_slice(json));
    }

    /// Stores `json` as the run-time routes of `key` without any check.
    pub fn put_raw_originated(&self, key: &str, json: &[u8]) {
        let mut g = self.lock();
        let inst = g.instances.entry(self.instance.clone()).or_default();
        inst.originated
            .insert(key.to_string(), Bytes::copy_from_slice(json));
    }

    fn lock(&self) -> MutexGuard<'_, Shared> {
        self.shared.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Locks the state, failing if "unavailable".
    fn instance_mut<R>(
        &self,
        f: impl FnOnce(&mut Instance) -> Result<R, StoreError>,
    ) -> Result<R, StoreError> {
        let mut g = self.lock();
        if !g.available {
            return Err(StoreError::Unavailable(
                "memory store: simulated outage".into(),
            ));
        }
        let inst = g.instances.entry(self.instance.clone()).or_default();
        f(inst)
    }
}

/// Sets or deletes the fields of a hash of records kept apart, as the
/// records script does in Redis.
fn apply_apart(map: &mut BTreeMap<String, Bytes>, writes: Vec<batch::RecordWrite<'_>>) {
    for (key, value) in writes {
        match value {
            Some(v) => map.insert(key.to_string(), Bytes::from(v)),
            None => map.remove(key),
        };
    }
}

fn apply(inst: &mut Instance, step: &Step<'_>) -> Result<(), StoreError> {
    let key = step.key();
    match step {
        Step::Session { record, .. } => {
            let rec = batch::encode_record(key, record)?;
            inst.logver += 1;
            inst.data.insert(
                key.to_string(),
                MemSession {
                    rec: Some(Bytes::from(rec)),
                    rcv: Some(record.rcv_seq),
                    una: Some(record.snd_seq),
                    ver: inst.logver,
                    ..MemSession::default()
                },
            );
            inst.sessions.insert(key.to_string());
        }
        Step::Received {
            ack,
            parts,
            partial,
            ..
        } => {
            let s = inst.data.entry(key.to_string()).or_default();
            s.rcv = Some(*ack);
            s.partial = (*partial).clone();
            if batch::parts_len(parts) > 0 {
                s.adj_in.push(batch::concat(parts));
            }
        }
        Step::Sent { seq_end, parts, .. } => {
            let s = inst.data.entry(key.to_string()).or_default();
            let bytes = batch::concat(parts);
            s.tail.push_back((*seq_end, bytes.clone()));
            if !bytes.is_empty() {
                s.adj_out.push(bytes);
            }
        }
        Step::Acked { snd_una, .. } => {
            let s = inst.data.entry(key.to_string()).or_default();
            s.una = Some(*snd_una);
            while s
                .tail
                .front()
                .is_some_and(|(end, _)| batch::seq_ge(*snd_una, *end))
            {
                s.tail.pop_front();
            }
        }
        Step::Snapshot {
            adj_in, adj_out, ..
        } => {
            inst.logver += 1;
            let s = inst.data.entry(key.to_string()).or_default();
            s.ver = inst.logver;
            s.adj_in.clear();
            s.adj_out.clear();
            if !adj_in.is_empty() {
                s.adj_in.push((*adj_in).clone());
            }
            if !adj_out.is_empty() {
                s.adj_out.push((*adj_out).clone());
            }
        }
        Step::Refresh { pending, .. } => {
            let s = inst.data.entry(key.to_string()).or_default();
            s.refresh = (*pending).clone();
        }
        Step::Remove { .. } => {
            inst.data.remove(key);
            inst.sessions.remove(key);
        }
    }
    Ok(())
}

impl Store for MemoryStore {
    fn write(&mut self, epoch: u64, ops: &[Op]) -> Result<(), StoreError> {
        let steps = batch::plan(ops);
        self.instance_mut(|inst| {
            if inst.epoch != epoch {
                return Err(StoreError::Fenced {
                    current: inst.epoch,
                    ours: epoch,
                });
            }
            // Encode every record first so that a failure applies nothing.
            for step in &steps {
                if let Step::Session { key, record } = step {
                    batch::encode_record(key, record)?;
                }
            }
            let bfd = batch::bfd_writes(ops)?;
            let originated = batch::originated_writes(ops)?;
            for step in &steps {
                apply(inst, step)?;
            }
            apply_apart(&mut inst.originated, originated);
            apply_apart(&mut inst.bfd, bfd);
            Ok(())
        })
    }

    fn claim(&mut self) -> Result<u64, StoreError> {
        self.instance_mut(|inst| {
            inst.epoch += 1;
            Ok(inst.epoch)
        })
    }

    fn claim_at_least(&mut self, min: u64) -> Result<u64, StoreError> {
        self.instance_mut(|inst| {
            inst.epoch = (inst.epoch + 1).max(min);
            Ok(inst.epoch)
        })
    }

    fn epoch(&mut self) -> Result<u64, StoreError> {
        self.instance_mut(|inst| Ok(inst.epoch))
    }

    fn load(&mut self) -> Result<InstanceState, StoreError> {
        self.instance_mut(|inst| {
            let mut sessions = Vec::with_capacity(inst.sessions.len());
            for key in &inst.sessions {
                let Some(s) = inst.data.get(key) else {
                    continue;
                };
                let Some(rec) = &s.rec else {
                    continue;
                };
                let record = batch::decode_record(key, rec)?;
                let missing = |what: &str| StoreError::Corrupt {
                    key: key.clone(),
                    reason: format!("{what} missing"),
                };
                sessions.push(StoredSession {
                    key: key.clone(),
                    record,
                    rcv: s.rcv.ok_or_else(|| missing("rcv"))?,
                    partial: s.partial.clone(),
                    adj_in: s.adj_in.clone(),
                    adj_out: s.adj_out.clone(),
                    snd_una: s.una.ok_or_else(|| missing("una"))?,
                    send_tail: s.tail.iter().cloned().collect(),
                    refresh: s.refresh.clone(),
                    log: LogPos::start(s.ver),
                });
            }
            let bfd = batch::decode_apart(
                inst.bfd.iter().map(|(k, v)| (k.clone(), v)),
                |key, record| StoredBfd { key, record },
            )?;
            let originated = batch::decode_apart(
                inst.originated.iter().map(|(k, v)| (k.clone(), v)),
                |key, record| StoredOriginated { key, record },
            )?;
            Ok(InstanceState {
                epoch: inst.epoch,
                sessions,
                bfd,
                originated,
            })
        })
    }

    fn reconnect(&mut self) -> Result<(), StoreError> {
        self.instance_mut(|_| Ok(()))
    }
}
