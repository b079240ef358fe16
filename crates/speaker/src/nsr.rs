//! Non-stop routing on the primary: the replicator (TENSOR §3.1, TCPR §II).
//!
//! Every replication operation of every session passes through
//! [`Nsr::submit`] into one replicator thread, which batches whatever is
//! queued into one atomic, epoch-fenced store write (TENSOR Fig. 5(b):
//! batching cuts the per-record cost) and then, in order, carries out what
//! each operation was waiting for:
//! - a received message's ACK may leave: [`AckGate::confirm`];
//! - a message to the peer may be written: it is handed to the connection's
//!   writer only now ("replicate before send").
//!
//! If the store is unreachable the instance goes *unprotected*: the gate
//! lets every ACK through, writes are not delayed, sessions stay up. Once
//! the store answers again, every session re-synchronises (a fresh record
//! and a snapshot of its tables) and the instance is protected again
//! (TENSOR §4.1).
//!
//! If a write is refused because another speaker claimed the instance
//! (a newer epoch), this process is *fenced*: the gate drops every packet
//! and the process exits without a FIN or RST reaching any peer.
//!
//! Known issues:
//! - After a re-synchronisation, bytes written before it and not yet
//!   acknowledged by the peer are not in the store; a takeover within that
//!   round trip would restore a send queue with a gap.
//! - A fenced primary that cannot reach the store cannot learn that it is
//!   fenced: while frozen and cut off from the store it would, once thawed,
//!   behave as unprotected. Orchestrators must fence such a host (kill it or
//!   remove the service address) as docs/nsr.md says.

use holdfast_api::{NsrSession, NsrStatus, TakeoverTimes};
use holdfast_linux::nfq::{AckGate, ConnKey, GateMode};
use holdfast_nsr::{Op, Store, StoreError};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc as std_mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, watch};

/// Most operations merged into one store write.
const MAX_BATCH_OPS: usize = 8192;
/// Most payload bytes merged into one store write.
const MAX_BATCH_BYTES: usize = 8 * 1024 * 1024;
/// How often an unreachable store is retried.
const RETRY: Duration = Duration::from_millis(500);
/// How often an idle primary checks that it still owns the instance, so a
/// fenced one finds out without waiting for its next write.
const IDLE_CHECK: Duration = Duration::from_millis(250);
/// Exit status of a fenced process.
pub const EXIT_FENCED: i32 = 75;

/// What an operation waits for before it may take effect.
pub enum Then {
    Nothing,
    /// Received bytes are replicated up to this ACK number.
    Confirm(ConnKey, u32),
    /// Bytes to hand to a connection's writer.
    Write(mpsc::UnboundedSender<Arc<Vec<u8>>>, Arc<Vec<u8>>),
    /// The session closes on purpose: stop gating its packets.
    Unregister(ConnKey),
}

struct Item {
    /// `None`: nothing to store (session not replicated), only `then`.
    op: Option<Op>,
    /// Store generation the op was produced for; stale ones are not written.
    gen: u64,
    then: Then,
    at: Instant,
}

/// Per-session replication figures, for `show nsr` and metrics.
#[derive(Default, Clone)]
pub struct SessionFigures {
    pub peer: String,
    pub synced_gen: u64,
    pub pending: u64,
    pub oldest: Option<Instant>,
    pub rcv_confirmed: u32,
    pub snd_next: u32,
    pub log_bytes: u64,
}

/// Recent samples, for percentiles without unbounded memory.
#[derive(Default)]
pub struct Samples {
    ring: Vec<u64>,
    next: usize,
}

impl Samples {
    const CAP: usize = 4096;
    pub fn push(&mut self, v: u64) {
        if self.ring.len() < Self::CAP {
            self.ring.push(v);
        } else {
            self.ring[self.next] = v;
        }
        self.next = (self.next + 1) % Self::CAP;
    }
    pub fn percentile(&self, p: f64) -> u64 {
        if self.ring.is_empty() {
            return 0;
        }
        let mut v = self.ring.clone();
        v.sort_unstable();
        let i = ((v.len() - 1) as f64 * p).round() as usize;
        v[i]
    }
}

/// State shared by the replicator, the peer tasks and the control socket.
pub struct Shared {
    pub instance: String,
    pub store_desc: String,
    pub epoch: AtomicU64,
    pub store_epoch: AtomicU64,
    /// The store answers (writes are being made).
    pub store_up: AtomicBool,
    /// Store up and every session re-synchronised.
    pub protected: AtomicBool,
    pub fenced: AtomicBool,
    /// A planned switchover is under way.
    pub switching: AtomicBool,
    /// Bumped whenever the store was lost: a session whose `synced_gen` is
    /// older must re-synchronise before its operations are stored again.
    pub gen: AtomicU64,
    pub writes: AtomicU64,
    pub write_errors: AtomicU64,
    pub latency: Mutex<Samples>,
    pub sessions: Mutex<HashMap<String, SessionFigures>>,
    pub takeover: Mutex<Option<TakeoverTimes>>,
    /// Tells peer tasks to re-synchronise (value: the generation to reach).
    pub resync: watch::Sender<u64>,
    /// Log bytes after which a session's logs are compacted.
    pub compact_bytes: u64,
}

/// Handle held by the daemon and every peer task.
#[derive(Clone)]
pub struct Nsr {
    tx: std_mpsc::Sender<Item>,
    pub gate: Arc<AckGate>,
    pub shared: Arc<Shared>,
}

impl Nsr {
    /// Starts the replicator thread on `store`, writing with `epoch`.
    /// `store_up` says whether the store answered at start.
    pub fn start(
        store: Box<dyn Store>,
        epoch: u64,
        store_up: bool,
        gate: Arc<AckGate>,
        instance: String,
        store_desc: String,
        compact_bytes: u64,
    ) -> Nsr {
        let (tx, rx) = std_mpsc::channel();
        let (resync, _) = watch::channel(0);
        let shared = Arc::new(Shared {
            instance,
            store_desc,
            epoch: AtomicU64::new(epoch),
            store_epoch: AtomicU64::new(epoch),
            store_up: AtomicBool::new(store_up),
            protected: AtomicBool::new(store_up),
            fenced: AtomicBool::new(false),
            switching: AtomicBool::new(false),
            gen: AtomicU64::new(0),
            writes: AtomicU64::new(0),
            write_errors: AtomicU64::new(0),
            latency: Mutex::new(Samples::default()),
            sessions: Mutex::new(HashMap::new()),
            takeover: Mutex::new(None),
            resync,
            compact_bytes,
        });
        gate.set_mode(if store_up {
            GateMode::Protected
        } else {
            GateMode::Bypass
        });
        if !store_up {
            shared.gen.store(1, Ordering::SeqCst);
        }
        let r = Replicator {
            store,
            rx,
            gate: gate.clone(),
            shared: shared.clone(),
            last_try: Instant::now(),
        };
        std::thread::Builder::new()
            .name("nsr-replicator".into())
            .spawn(move || r.run())
            .expect("spawning the replicator thread");
        Nsr { tx, gate, shared }
    }

    /// Current store generation (see [`Shared::gen`]).
    pub fn gen(&self) -> u64 {
        self.shared.gen.load(Ordering::SeqCst)
    }

    /// Queues one operation (or, with `op: None`, only its consequence).
    pub fn submit(&self, key: &str, op: Option<Op>, gen: u64, then: Then) {
        if op.is_some() {
            if let Ok(mut s) = self.shared.sessions.lock() {
                if let Some(f) = s.get_mut(key) {
                    f.pending += 1;
                    f.oldest.get_or_insert_with(Instant::now);
                }
            }
        }
        let item = Item {
            op,
            gen,
            then,
            at: Instant::now(),
        };
        if let Err(e) = self.tx.send(item) {
            // The replicator only stops when the process is fenced; nothing
            // may leave then.
            drop(e);
        }
    }

    pub fn figures(&self, key: &str, f: impl FnOnce(&mut SessionFigures)) {
        if let Ok(mut s) = self.shared.sessions.lock() {
            f(s.entry(key.to_string()).or_default());
        }
    }

    pub fn forget(&self, key: &str) {
        if let Ok(mut s) = self.shared.sessions.lock() {
            s.remove(key);
        }
    }

    /// `show nsr`.
    pub fn status(&self, role: &str) -> NsrStatus {
        let sh = &self.shared;
        let gate = self.gate.stats();
        let (p50, p99) = sh
            .latency
            .lock()
            .map(|l| (l.percentile(0.5), l.percentile(0.99)))
            .unwrap_or_default();
        let gen = sh.gen.load(Ordering::SeqCst);
        let store_up = sh.store_up.load(Ordering::SeqCst);
        let mut sessions: Vec<NsrSession> = sh
            .sessions
            .lock()
            .map(|s| {
                s.iter()
                    .map(|(k, f)| NsrSession {
                        key: k.clone(),
                        peer: f.peer.clone(),
                        protected: store_up && f.synced_gen == gen,
                        lag_ops: f.pending,
                        lag_us: f.oldest.map_or(0, |t| t.elapsed().as_micros() as u64),
                        rcv_confirmed: f.rcv_confirmed,
                        snd_next: f.snd_next,
                        log_bytes: f.log_bytes,
                    })
                    .collect()
            })
            .unwrap_or_default();
        sessions.sort_by(|a, b| a.key.cmp(&b.key));
        let role = if sh.fenced.load(Ordering::SeqCst) {
            "fenced"
        } else if sh.switching.load(Ordering::SeqCst) {
            "switchover"
        } else {
            role
        };
        NsrStatus {
            enabled: true,
            instance: sh.instance.clone(),
            role: role.to_string(),
            epoch: sh.epoch.load(Ordering::SeqCst),
            store_epoch: sh.store_epoch.load(Ordering::SeqCst),
            protected: sh.protected.load(Ordering::SeqCst),
            store: sh.store_desc.clone(),
            store_latency_p50_us: p50,
            store_latency_p99_us: p99,
            ack_delay_p50_us: gate.delay_p50_us,
            ack_delay_p99_us: gate.delay_p99_us,
            ack_packets_held: gate.held,
            ack_packets_clamped: gate.clamped,
            writes: sh.writes.load(Ordering::SeqCst),
            write_errors: sh.write_errors.load(Ordering::SeqCst),
            sessions,
            takeover: sh.takeover.lock().ok().and_then(|t| t.clone()),
        }
    }
}

struct Replicator {
    store: Box<dyn Store>,
    rx: std_mpsc::Receiver<Item>,
    gate: Arc<AckGate>,
    shared: Arc<Shared>,
    last_try: Instant,
}

impl Replicator {
    fn run(mut self) {
        loop {
            let up = self.shared.store_up.load(Ordering::SeqCst);
            let first = match self.rx.recv_timeout(if up { IDLE_CHECK } else { RETRY }) {
                Ok(i) => Some(i),
                Err(std_mpsc::RecvTimeoutError::Timeout) => {
                    if up {
                        self.check_epoch();
                    }
                    None
                }
                Err(std_mpsc::RecvTimeoutError::Disconnected) => return,
            };
            let mut batch: Vec<Item> = first.into_iter().collect();
            let mut bytes = batch
                .iter()
                .map(|i| i.op.as_ref().map_or(0, Op::payload_len))
                .sum::<usize>();
            while batch.len() < MAX_BATCH_OPS && bytes < MAX_BATCH_BYTES {
                match self.rx.try_recv() {
                    Ok(i) => {
                        bytes += i.op.as_ref().map_or(0, Op::payload_len);
                        batch.push(i);
                    }
                    Err(_) => break,
                }
            }
            if self.shared.store_up.load(Ordering::SeqCst) {
                self.write(batch);
            } else {
                self.finish(batch);
                if self.last_try.elapsed() >= RETRY {
                    self.try_reconnect();
                }
            }
            self.check_protected();
        }
    }

    fn write(&mut self, batch: Vec<Item>) {
        let gen = self.shared.gen.load(Ordering::SeqCst);
        let ops: Vec<Op> = batch
            .iter()
            .filter(|i| i.gen == gen)
            .filter_map(|i| i.op.clone())
            .collect();
        if ops.is_empty() {
            self.finish(batch);
            return;
        }
        let epoch = self.shared.epoch.load(Ordering::SeqCst);
        let started = Instant::now();
        match self.store.write(epoch, &ops) {
            Ok(()) => {
                let us = started.elapsed().as_micros() as u64;
                self.shared.writes.fetch_add(1, Ordering::Relaxed);
                if let Ok(mut l) = self.shared.latency.lock() {
                    l.push(us);
                }
                self.finish(batch);
            }
            Err(StoreError::Fenced { current, ours }) if current >= ours => {
                self.fenced(current, ours)
            }
            Err(e @ StoreError::Fenced { .. }) => {
                // The store went back in time: it lost its data (a restart
                // without persistence). Re-claim and re-synchronise.
                self.lost(&e);
                self.finish(batch);
            }
            Err(e) => {
                self.lost(&e);
                self.finish(batch);
            }
        }
    }

    /// Carries out what each item waited for, in order.
    fn finish(&mut self, batch: Vec<Item>) {
        let mut done: HashMap<String, (u64, Option<Instant>)> = HashMap::new();
        for item in batch {
            if let Some(op) = &item.op {
                let e = done.entry(op.key().to_string()).or_insert((0, None));
                e.0 += 1;
                e.1 = Some(item.at);
            }
            match item.then {
                Then::Nothing => {}
                Then::Confirm(key, ack) => self.gate.confirm(&key, ack),
                Then::Write(tx, bytes) => {
                    let _ = tx.send(bytes);
                }
                Then::Unregister(key) => self.gate.unregister(&key),
            }
        }
        if done.is_empty() {
            return;
        }
        if let Ok(mut s) = self.shared.sessions.lock() {
            for (k, (n, _)) in done {
                if let Some(f) = s.get_mut(&k) {
                    f.pending = f.pending.saturating_sub(n);
                    if f.pending == 0 {
                        f.oldest = None;
                    }
                }
            }
        }
    }

    fn try_reconnect(&mut self) {
        self.last_try = Instant::now();
        if self.store.reconnect().is_err() {
            return;
        }
        let ours = self.shared.epoch.load(Ordering::SeqCst);
        let current = if ours == 0 {
            // Started while the store was down: claim the instance now.
            self.store.claim().inspect(|&e| {
                self.shared.epoch.store(e, Ordering::SeqCst);
            })
        } else {
            self.store.epoch()
        };
        let current = match current {
            Ok(c) => c,
            Err(e) => {
                tracing::debug!(error = %e, "state store still unavailable");
                return;
            }
        };
        let ours = self.shared.epoch.load(Ordering::SeqCst);
        let mut current = current;
        // A store restarted without persistence has lost the epoch (and
        // everything else): nobody claimed the instance after us, so we
        // claim it back up to our epoch and write everything anew.
        while current < ours {
            tracing::warn!(
                current,
                ours,
                "state store lost its data: re-claiming the instance"
            );
            match self.store.claim() {
                Ok(c) => current = c,
                Err(e) => {
                    tracing::debug!(error = %e, "state store still unavailable");
                    return;
                }
            }
        }
        self.shared.store_epoch.store(current, Ordering::SeqCst);
        if current != ours {
            self.fenced(current, ours);
        }
        // Operations produced before this point were not stored: every
        // session writes itself anew at the next generation.
        let gen = self.shared.gen.fetch_add(1, Ordering::SeqCst) + 1;
        tracing::info!(
            epoch = ours,
            "state store reachable again: re-synchronising every session"
        );
        self.shared.store_up.store(true, Ordering::SeqCst);
        let _ = self.shared.resync.send(gen);
    }

    /// The store stopped answering: sessions continue unprotected.
    fn lost(&mut self, e: &StoreError) {
        self.shared.write_errors.fetch_add(1, Ordering::Relaxed);
        tracing::error!(error = %e, "state store lost: sessions stay up, UNPROTECTED until it returns");
        self.shared.store_up.store(false, Ordering::SeqCst);
        self.shared.protected.store(false, Ordering::SeqCst);
        self.shared.gen.fetch_add(1, Ordering::SeqCst);
        self.gate.set_mode(GateMode::Bypass);
        self.last_try = Instant::now();
    }

    fn check_epoch(&mut self) {
        match self.store.epoch() {
            Ok(current) => {
                self.shared.store_epoch.store(current, Ordering::SeqCst);
                let ours = self.shared.epoch.load(Ordering::SeqCst);
                if current > ours {
                    self.fenced(current, ours);
                } else if current < ours {
                    self.lost(&StoreError::Fenced { current, ours });
                }
            }
            Err(e) => self.lost(&e),
        }
    }

    /// Protected again once the store is up and every session has
    /// re-synchronised at the current generation.
    fn check_protected(&mut self) {
        if self.shared.protected.load(Ordering::SeqCst)
            || !self.shared.store_up.load(Ordering::SeqCst)
        {
            return;
        }
        let gen = self.shared.gen.load(Ordering::SeqCst);
        let all = self
            .shared
            .sessions
            .lock()
            .map(|s| s.values().all(|f| f.synced_gen == gen))
            .unwrap_or(false);
        if all {
            self.gate.set_mode(GateMode::Protected);
            self.shared.protected.store(true, Ordering::SeqCst);
            tracing::info!("every session re-synchronised: PROTECTED again");
        }
    }

    /// Another speaker owns the instance. Nothing may leave this process
    /// again: the gate drops every packet (so neither the sessions' data nor
    /// the kernel's FIN/RST when we exit reaches a peer), then we exit.
    fn fenced(&mut self, current: u64, ours: u64) -> ! {
        self.gate.set_mode(GateMode::DropAll);
        self.shared.fenced.store(true, Ordering::SeqCst);
        self.shared.store_epoch.store(current, Ordering::SeqCst);
        tracing::error!(
            current,
            ours,
            "FENCED: another speaker has taken over this instance; exiting without touching the sessions"
        );
        // Give the log line a moment; the gate keeps dropping meanwhile.
        std::thread::sleep(Duration::from_millis(50));
        std::process::exit(EXIT_FENCED);
    }
}
