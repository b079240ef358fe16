//! The replicator thread against the in-memory store and a recording gate:
//! what reaches the gate and the writers, in which order, through an
//! outage, a store that loses its data, and a fence.
//!
//! # Known issues
//! - These run the real thread with the real timers (250 ms epoch checks,
//!   500 ms retries), so each takes up to a few seconds.

use super::*;
use holdfast_nsr::{InstanceState, MemoryStore};
use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::Mutex;
use std::thread::JoinHandle;
use tokio::sync::mpsc;

const KEY: &str = "default/192.0.2.2";

/// Everything the store and the gate saw, in order.
type Log = Arc<Mutex<Vec<String>>>;

fn push(log: &Log, s: String) {
    log.lock().expect("log").push(s);
}

struct RecordingGate(Log);

impl Gate for RecordingGate {
    fn confirm(&self, _key: &ConnKey, ack: u32) {
        push(&self.0, format!("confirm {ack}"));
    }
    fn unregister(&self, _key: &ConnKey) {
        push(&self.0, "unregister".into());
    }
    fn set_mode(&self, mode: GateMode) {
        push(&self.0, format!("mode {mode:?}"));
    }
}

/// A memory store that can be swapped for an empty one (Redis restarted
/// without persistence), logging every successful write. With `pipe`, it
/// pipelines: a write sent is applied when its outcome is read, which
/// waits while `pipe.paused` is set.
#[derive(Clone)]
struct SwapStore {
    inner: Arc<Mutex<MemoryStore>>,
    log: Log,
    pipe: Option<Arc<Pipe>>,
}

#[derive(Default)]
struct Pipe {
    sent: Mutex<VecDeque<(u64, Vec<Op>)>>,
    paused: std::sync::atomic::AtomicBool,
    /// Most writes seen in flight at once.
    most: std::sync::atomic::AtomicUsize,
}

impl SwapStore {
    fn with<R>(&self, f: impl FnOnce(&mut MemoryStore) -> R) -> R {
        f(&mut self.inner.lock().expect("store"))
    }
}

impl Store for SwapStore {
    fn send_write(&mut self, epoch: u64, ops: &[Op]) -> Result<(), StoreError> {
        let Some(pipe) = &self.pipe else {
            return self.write(epoch, ops);
        };
        let mut sent = pipe.sent.lock().expect("pipe");
        sent.push_back((epoch, ops.to_vec()));
        pipe.most.fetch_max(sent.len(), Ordering::SeqCst);
        Ok(())
    }
    fn recv_write(&mut self) -> Result<(), StoreError> {
        let Some(pipe) = self.pipe.clone() else {
            return Ok(());
        };
        let t = Instant::now();
        while pipe.paused.load(Ordering::SeqCst) && t.elapsed() < Duration::from_secs(5) {
            std::thread::sleep(Duration::from_millis(1));
        }
        let next = pipe.sent.lock().expect("pipe").pop_front();
        let (epoch, ops) = next.expect("a write in flight");
        self.write(epoch, &ops)
    }
    fn write(&mut self, epoch: u64, ops: &[Op]) -> Result<(), StoreError> {
        let r = self.with(|s| s.write(epoch, ops));
        if r.is_ok() {
            let kinds: Vec<&str> = ops.iter().map(op_name).collect();
            push(&self.log, format!("write {}", kinds.join(",")));
        }
        r
    }
    fn claim(&mut self) -> Result<u64, StoreError> {
        self.with(|s| s.claim())
    }
    fn epoch(&mut self) -> Result<u64, StoreError> {
        self.with(|s| s.epoch())
    }
    fn load(&mut self) -> Result<InstanceState, StoreError> {
        self.with(|s| s.load())
    }
    fn reconnect(&mut self) -> Result<(), StoreError> {
        self.with(|s| s.reconnect())
    }
}

fn op_name(op: &Op) -> &'static str {
    match op {
        Op::Session { .. } => "session",
        Op::Received { .. } => "received",
        Op::Sent { .. } => "sent",
        Op::Acked { .. } => "acked",
        Op::Snapshot { .. } => "snapshot",
        Op::Refresh { .. } => "refresh",
        Op::Remove { .. } => "remove",
        Op::Bfd { .. } => "bfd",
        Op::BfdRemove { .. } => "bfd-remove",
        Op::Originated { .. } => "originated",
    }
}

fn ckey() -> ConnKey {
    let a: SocketAddr = "192.0.2.1:179".parse().expect("addr");
    let b: SocketAddr = "192.0.2.2:40000".parse().expect("addr");
    ConnKey::new(a, b)
}

fn acked(snd_una: u32) -> Op {
    Op::Acked {
        key: KEY.into(),
        snd_una,
    }
}

struct Fixture {
    tx: std_mpsc::Sender<Item>,
    shared: Arc<Shared>,
    store: SwapStore,
    log: Log,
    thread: JoinHandle<Ended>,
    /// A peer task's subscription to re-synchronisation requests.
    resync: tokio::sync::watch::Receiver<u64>,
}

impl Fixture {
    /// A replicator at the epoch it claimed in a fresh store.
    fn start() -> Fixture {
        Fixture::start_with(None)
    }

    /// [`Fixture::start`], the store pipelining through `pipe` if given.
    fn start_with(pipe: Option<Arc<Pipe>>) -> Fixture {
        let log: Log = Arc::default();
        let mut mem = MemoryStore::new("edge");
        let epoch = mem.claim().expect("claim");
        let store = SwapStore {
            inner: Arc::new(Mutex::new(mem)),
            log: log.clone(),
            pipe,
        };
        let shared = Arc::new(Shared::new(
            "edge".into(),
            "memory".into(),
            epoch,
            true,
            1 << 24,
        ));
        shared
            .sessions
            .lock()
            .expect("sessions")
            .insert(KEY.into(), Default::default());
        let (tx, rx) = std_mpsc::channel();
        let mut r = Replicator::new(
            ReplCore::new(epoch, true),
            Box::new(store.clone()),
            rx,
            Arc::new(RecordingGate(log.clone())),
            shared.clone(),
        );
        let resync = shared.resync.subscribe();
        r.start(false);
        let thread = std::thread::spawn(move || r.run());
        Fixture {
            tx,
            shared,
            store,
            log,
            thread,
            resync,
        }
    }

    fn gen(&self) -> u64 {
        self.shared.gen.load(Ordering::SeqCst)
    }

    fn submit(&self, op: Option<Op>, then: Then) {
        let gen = self.gen();
        self.tx
            .send(Item { op, gen, then })
            .expect("replicator alive");
    }

    fn log(&self) -> Vec<String> {
        self.log.lock().expect("log").clone()
    }

    fn wait(&self, what: &str, cond: impl Fn(&Fixture) -> bool) {
        let t = Instant::now();
        while !cond(self) {
            assert!(
                t.elapsed() < Duration::from_secs(5),
                "{what}: log {:?}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    fn wait_logged(&self, entry: &str) {
        self.wait(entry, |f| f.log().iter().any(|e| e == entry));
    }

    fn protected(&self) -> bool {
        self.shared.protected.load(Ordering::SeqCst)
    }

    fn store_up(&self) -> bool {
        self.shared.store_up.load(Ordering::SeqCst)
    }

    /// The peer task's side of a re-synchronisation: the session is
    /// written anew at the generation asked for.
    fn resync_session(&self) {
        let gen = *self.resync.borrow();
        assert_eq!(gen, self.gen());
        self.shared
            .sessions
            .lock()
            .expect("sessions")
            .get_mut(KEY)
            .expect("session")
            .synced_gen = gen;
        self.submit(Some(acked(1)), Then::Nothing);
    }
}

#[test]
fn ack_and_message_leave_only_after_the_store_has_them() {
    let f = Fixture::start();
    let (wtx, mut wrx) = mpsc::unbounded_channel();
    f.submit(Some(acked(10)), Then::Confirm(ckey(), 1000));
    f.submit(
        Some(acked(11)),
        Then::Write(wtx, Arc::new(b"update".to_vec())),
    );
    f.submit(None, Then::Unregister(ckey()));
    f.wait_logged("unregister");
    let log = f.log();
    let write = log
        .iter()
        .position(|e| e.starts_with("write"))
        .expect("write");
    let confirm = log
        .iter()
        .position(|e| e == "confirm 1000")
        .expect("confirm");
    assert!(write < confirm, "{log:?}");
    assert_eq!(log[0], "mode Protected");
    assert_eq!(wrx.try_recv().expect("written").as_slice(), b"update");
    assert!(f.shared.writes.load(Ordering::SeqCst) >= 1);
}

/// A received chunk larger than a batch may hold: one batch each.
fn big_received(ack: u32) -> Op {
    Op::Received {
        key: KEY.into(),
        ack,
        updates: bytes::Bytes::from(vec![0u8; MAX_BATCH_BYTES + 1]),
        partial: bytes::Bytes::new(),
    }
}

#[test]
fn pipelined_writes_release_in_queue_order_within_the_window() {
    let pipe = Arc::new(Pipe::default());
    pipe.paused.store(true, Ordering::SeqCst);
    let f = Fixture::start_with(Some(pipe.clone()));
    let (wtx, mut wrx) = mpsc::unbounded_channel();
    // While the first write's outcome is held back, ten more queue up;
    // one of them has nothing to store, only a message to send.
    f.submit(Some(big_received(1)), Then::Confirm(ckey(), 1));
    f.wait("first write sent", |_| {
        pipe.sent.lock().expect("pipe").len() == 1
    });
    for ack in 2..=10 {
        f.submit(Some(big_received(ack)), Then::Confirm(ckey(), ack));
        if ack == 5 {
            f.submit(None, Then::Write(wtx.clone(), Arc::new(b"m".to_vec())));
        }
    }
    assert!(f.log().iter().all(|e| !e.starts_with("confirm")));
    pipe.paused.store(false, Ordering::SeqCst);
    f.wait_logged("confirm 10");
    let confirms: Vec<String> = f
        .log()
        .into_iter()
        .filter(|e| e.starts_with("confirm"))
        .collect();
    let want: Vec<String> = (1..=10).map(|a| format!("confirm {a}")).collect();
    assert_eq!(confirms, want);
    // Each confirmation came after the write of its bytes.
    let log = f.log();
    for (i, e) in log
        .iter()
        .enumerate()
        .filter(|(_, e)| e.starts_with("confirm"))
    {
        let writes = log[..i].iter().filter(|w| w.starts_with("write")).count();
        let ack: usize = e["confirm ".len()..].parse().expect("ack");
        assert!(
            writes >= ack,
            "confirm {ack} after {writes} writes: {log:?}"
        );
    }
    assert_eq!(wrx.try_recv().expect("message").as_slice(), b"m");
    let most = pipe.most.load(Ordering::SeqCst);
    assert!(
        (2..=WINDOW).contains(&most),
        "writes in flight at most {most}"
    );
}

#[test]
fn outage_goes_unprotected_then_resynchronises_and_protects_again() {
    let f = Fixture::start();
    f.store.with(|s| s.set_available(false));
    f.submit(Some(acked(1)), Then::Confirm(ckey(), 7));
    f.wait("unprotected", |f| !f.store_up());
    // Sessions stay up: the ACK is released although nothing was written.
    f.wait_logged("confirm 7");
    assert!(f.log().contains(&"mode Bypass".to_string()));
    assert!(!f.protected());
    assert_eq!(f.gen(), 1);
    assert_eq!(f.shared.write_errors.load(Ordering::SeqCst), 1);
    // While down, items are released at once and nothing is written.
    f.submit(Some(acked(2)), Then::Confirm(ckey(), 8));
    f.wait_logged("confirm 8");
    f.store.with(|s| s.set_available(true));
    f.wait("store back", |f| f.store_up());
    assert_eq!(f.gen(), 2);
    assert!(!f.protected(), "protected before the session caught up");
    f.resync_session();
    f.wait("protected again", |f| f.protected());
    let log = f.log();
    assert_eq!(log.last().map(String::as_str), Some("mode Protected"));
    assert_eq!(log.iter().filter(|e| e.starts_with("write")).count(), 1);
}

#[test]
fn store_that_lost_its_data_is_reclaimed_and_resynchronised() {
    let f = Fixture::start();
    let epoch = f.shared.epoch.load(Ordering::SeqCst);
    f.submit(Some(acked(1)), Then::Nothing);
    f.wait_logged("write acked");
    // Redis restarted empty: epoch 0, no sessions.
    f.store.with(|s| *s = MemoryStore::new("edge"));
    f.submit(Some(acked(2)), Then::Confirm(ckey(), 9));
    f.wait("unprotected", |f| !f.store_up());
    f.wait_logged("confirm 9");
    f.wait("re-claimed", |f| f.store_up());
    assert_eq!(f.store.with(|s| s.epoch()).expect("epoch"), epoch);
    assert_eq!(f.shared.epoch.load(Ordering::SeqCst), epoch);
    assert!(!f.shared.fenced.load(Ordering::SeqCst));
    f.resync_session();
    f.wait("protected again", |f| f.protected());
    f.wait("written anew", |f| {
        f.log().iter().filter(|e| *e == "write acked").count() == 2
    });
}

#[test]
fn write_refused_by_a_newer_epoch_fences_and_releases_nothing() {
    let f = Fixture::start();
    f.store.with(|s| s.claim()).expect("another speaker claims");
    let (wtx, mut wrx) = mpsc::unbounded_channel();
    f.submit(Some(acked(1)), Then::Confirm(ckey(), 5));
    // The thread may already have been fenced by the first write and gone:
    // then this one is refused, which releases nothing either.
    let gen = f.gen();
    let _ = f.tx.send(Item {
        op: Some(acked(2)),
        gen,
        then: Then::Write(wtx, Arc::new(b"x".to_vec())),
    });
    let ended = f.thread.join().expect("thread");
    let epoch = f.shared.epoch.load(Ordering::SeqCst);
    assert_eq!(
        ended,
        Ended::Fenced(Fence {
            current: epoch + 1,
            ours: epoch
        })
    );
    let log = f.log.lock().expect("log").clone();
    assert_eq!(log.last().map(String::as_str), Some("mode DropAll"));
    assert!(!log.iter().any(|e| e.starts_with("confirm")), "{log:?}");
    assert!(wrx.try_recv().is_err());
    assert!(f.shared.fenced.load(Ordering::SeqCst));
    assert_eq!(
        *f.shared.fence.borrow(),
        Some(Fence {
            current: epoch + 1,
            ours: epoch
        })
    );
    // Later submissions go nowhere.
    assert!(f
        .tx
        .send(Item {
            op: None,
            gen: 0,
            then: Then::Nothing
        })
        .is_err());
}

#[test]
fn idle_primary_learns_it_is_fenced_within_250_ms() {
    let f = Fixture::start();
    let t = Instant::now();
    f.store.with(|s| s.claim()).expect("another speaker claims");
    let ended = f.thread.join().expect("thread");
    assert!(matches!(ended, Ended::Fenced(_)));
    // 250 ms plus one store round trip; the margin is for a loaded machine.
    assert!(
        t.elapsed() < Duration::from_millis(1000),
        "{:?}",
        t.elapsed()
    );
    assert_eq!(
        f.log.lock().expect("log").last().map(String::as_str),
        Some("mode DropAll")
    );
}

#[test]
fn thread_ends_when_every_handle_is_gone() {
    let f = Fixture::start();
    drop(f.tx);
    assert_eq!(f.thread.join().expect("thread"), Ended::Closed);
}

#[test]
fn run_time_routes_are_stored_before_the_waiter_hears_and_the_update_leaves() {
    let f = Fixture::start();
    let (ntx, nrx) = tokio::sync::oneshot::channel();
    let (wtx, mut wrx) = mpsc::unbounded_channel();
    let record = holdfast_nsr::OriginatedRecord {
        schema: holdfast_nsr::SCHEMA_VERSION,
        instance: "default".into(),
        routes: vec![serde_json::json!({ "prefix": "10.9.0.0/24" })],
    };
    f.submit(
        Some(Op::Originated {
            key: "default".into(),
            record: record.clone(),
        }),
        Then::Notify(ntx),
    );
    f.submit(
        Some(acked(11)),
        Then::Write(wtx, Arc::new(b"update".to_vec())),
    );
    let nrx = std::cell::RefCell::new(nrx);
    f.wait("the waiter told (not dropped)", |_| {
        nrx.borrow_mut().try_recv().is_ok()
    });
    let state = f.store.with(|s| s.load()).expect("load");
    assert_eq!(state.originated.len(), 1);
    assert_eq!(state.originated[0].record, record);
    f.wait("update handed to the writer", |_| !wrx.is_empty());
    assert_eq!(wrx.try_recv().expect("written").as_slice(), b"update");
    let log = f.log();
    assert!(
        log.iter()
            .any(|e| e.starts_with("write") && e.contains("originated")),
        "{log:?}"
    );
}
