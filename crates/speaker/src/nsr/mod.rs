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
//! The module is split in two:
//! - [`core`]: the replicator's state machine (protected, unprotected,
//!   re-synchronising, fenced), pure — inputs in, decisions out;
//! - [`shell`]: the thread, which reads the queue, calls the store, feeds
//!   the results to the core and carries out its decisions on the gate,
//!   the queued items and the figures in [`Shared`].
//!
//! If the store is unreachable the instance goes *unprotected*: the gate
//! lets every ACK through, writes are not delayed, sessions stay up. Once
//! the store answers again, every session re-synchronises (a fresh record
//! and a snapshot of its tables) and the instance is protected again
//! (TENSOR §4.1).
//!
//! If a write is refused because another speaker claimed the instance
//! (a newer epoch), this process is *fenced*: the gate drops every packet,
//! the thread stops, and [`Nsr::fenced`] resolves; the daemon returns
//! [`crate::daemon::Exit::Fenced`] and `holdfastd` exits with status 75
//! without a FIN or RST reaching any peer.
//!
//! # Known issues
//! - After a re-synchronisation, bytes written before it and not yet
//!   acknowledged by the peer are not in the store; a takeover within that
//!   round trip would restore a send queue with a gap.
//! - A fenced primary that cannot reach the store cannot learn that it is
//!   fenced: while frozen and cut off from the store it would, once thawed,
//!   behave as unprotected. Orchestrators must fence such a host (kill it or
//!   remove the service address) as docs/nsr.md says.
//! - Between the fence and the exit, the daemon's loop finishes the request
//!   it is serving; the gate drops every packet meanwhile.

pub mod core;
mod logs;
mod shell;

pub use self::core::Fence;
use self::core::ReplCore;
pub use self::logs::PendingLogs;
use holdfast_api::{NsrSession, NsrStatus, TakeoverTimes};
use holdfast_linux::nfq::{AckGate, ConnKey};
use holdfast_nsr::{Op, Store};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc as std_mpsc;
use std::sync::{Arc, Mutex};
use std::time::Instant;
use tokio::sync::{mpsc, watch};

/// What an operation waits for before it may take effect.
pub enum Then {
    Nothing,
    /// Received bytes are replicated up to this ACK number.
    Confirm(ConnKey, u32),
    /// Bytes to hand to a connection's writer.
    Write(mpsc::UnboundedSender<Arc<Vec<u8>>>, Arc<Vec<u8>>),
    /// The session closes on purpose: stop gating its packets.
    Unregister(ConnKey),
    /// Tell whoever waits (a control request): the op is stored, or the
    /// instance is unprotected and it was released without being stored
    /// (see [`Shared::protected`]). Dropped unsent if the process is
    /// fenced.
    Notify(tokio::sync::oneshot::Sender<()>),
}

/// One queued operation and what it waits for.
struct Item {
    /// `None`: nothing to store (session not replicated), only `then`.
    op: Option<Op>,
    /// Store generation the op was produced for; stale ones are not written.
    gen: u64,
    then: Then,
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
    /// `[nsr] compact_ratio`: a compaction is made only when the session's
    /// route changes since the last one reach this many times its routes.
    pub compact_ratio: f64,
    /// Set once, when the process is fenced.
    pub fence: watch::Sender<Option<Fence>>,
    /// The network namespace's NSR lock, released when the last handle
    /// goes (`resume::NETNS_LOCK`).
    netns_lock: Option<holdfast_linux::nslock::NetnsLock>,
}

impl Shared {
    fn new(
        instance: String,
        store_desc: String,
        epoch: u64,
        store_up: bool,
        compact_bytes: u64,
    ) -> Shared {
        let (resync, _) = watch::channel(0);
        let (fence, _) = watch::channel(None);
        Shared {
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
            compact_ratio: 0.0,
            fence,
            netns_lock: None,
        }
    }
}

/// What the replicator starts from.
pub struct Start {
    /// The epoch we claimed (0: the store did not answer).
    pub epoch: u64,
    /// Whether the store answered at start.
    pub store_up: bool,
    /// Keep the gate dropping every packet until the caller sets its mode
    /// (a takeover, until its sockets are rebuilt).
    pub hold: bool,
    pub instance: String,
    /// The store's address, without credentials.
    pub store_desc: String,
    /// Log bytes after which a session's logs are compacted.
    pub compact_bytes: u64,
    /// See [`Shared::compact_ratio`].
    pub compact_ratio: f64,
    /// The network namespace's NSR lock, held as long as this instance
    /// (`resume::NETNS_LOCK`).
    pub netns_lock: Option<holdfast_linux::nslock::NetnsLock>,
}

/// Handle held by the daemon and every peer task.
#[derive(Clone)]
pub struct Nsr {
    tx: std_mpsc::Sender<Item>,
    pub gate: Arc<AckGate>,
    pub shared: Arc<Shared>,
}

impl Nsr {
    /// Starts the replicator thread on `store`, gating with `gate`.
    pub fn start(store: Box<dyn Store>, gate: Arc<AckGate>, start: Start) -> Nsr {
        let Start {
            epoch,
            store_up,
            hold,
            instance,
            store_desc,
            compact_bytes,
            compact_ratio,
            netns_lock,
        } = start;
        let (tx, rx) = std_mpsc::channel();
        let mut shared = Shared::new(instance, store_desc, epoch, store_up, compact_bytes);
        shared.netns_lock = netns_lock;
        shared.compact_ratio = compact_ratio;
        let shared = Arc::new(shared);
        let mut r = shell::Replicator::new(
            ReplCore::new(epoch, store_up),
            store,
            rx,
            gate.clone(),
            shared.clone(),
        );
        // The gate's mode and the published state are set before anyone
        // can submit.
        r.start(hold);
        std::thread::Builder::new()
            .name("nsr-replicator".into())
            .spawn(move || {
                if let shell::Ended::Fenced(f) = r.run() {
                    tracing::debug!(
                        current = f.current,
                        ours = f.ours,
                        "replicator stopped: fenced"
                    );
                }
            })
            .expect("spawning the replicator thread");
        Nsr { tx, gate, shared }
    }

    /// Resolves once the process is fenced (never otherwise). The gate
    /// already drops every packet by then; the caller should exit.
    pub async fn fenced(&self) -> Fence {
        let mut rx = self.shared.fence.subscribe();
        loop {
            if let Some(f) = *rx.borrow_and_update() {
                return f;
            }
            if rx.changed().await.is_err() {
                return std::future::pending().await;
            }
        }
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
        let item = Item { op, gen, then };
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
            ack_delay_buckets: gate.delay_buckets,
            ack_packets_held: gate.held,
            ack_packets_clamped: gate.clamped,
            writes: sh.writes.load(Ordering::SeqCst),
            write_errors: sh.write_errors.load(Ordering::SeqCst),
            sessions,
            takeover: sh.takeover.lock().ok().and_then(|t| t.clone()),
            standby: None,
        }
    }
}
