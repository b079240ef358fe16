//! The replicator thread: the I/O around [`ReplCore`].
//!
//! [`Replicator::run`] takes whatever is queued (up to [`MAX_BATCH_OPS`]
//! operations or [`MAX_BATCH_BYTES`] bytes) as one batch, and hands the
//! core a summary of it ([`BatchInfo`]). It then carries out the core's
//! decisions in order ([`Replicator::step`]): a [`ReplOutput::Write`] is
//! sent to the store without waiting (pipelined, at most [`WINDOW`] writes
//! in flight); a [`ReplOutput::Store`] is a store call whose result goes
//! straight back to the core; [`ReplOutput::Release`] confirms ACKs to the
//! gate, hands messages to the connections' writers, unregisters closed
//! connections and answers whoever waits for an op ([`Then::Notify`]), in
//! queue order, only after the writes that stored them;
//! the rest sets the gate's mode, bumps the sessions' re-synchronisation,
//! and publishes the state and figures in [`Shared`].
//!
//! With no write in flight the thread waits for the queue until the core's
//! next wake-up. With writes in flight it takes a new batch if one is
//! queued and the window has room, and otherwise waits for the oldest
//! write's outcome, which goes back to the core. Batches are small and
//! several are in flight, so a confirmation waits for the bytes queued
//! before it, not behind megabytes written in one call, and the store is
//! kept busy meanwhile. After every batch, outcome (or timeout) the core
//! gets a [`ReplInput::Tick`]; while it re-synchronises, the sessions'
//! progress.
//!
//! On [`ReplOutput::Fence`] the gate already drops every packet; the batch
//! in hand is dropped unreleased, [`Shared::fence`] is set and the thread
//! returns.
//!
//! # Known issues
//! - Waiting for a write's outcome blocks the thread: what is queued
//!   meanwhile waits for that outcome before it is sent, even when the
//!   window has room. A store that hangs is bounded by its own timeout
//!   (500 ms for Redis).

use super::core::{
    BatchInfo, Fence, GateCommand, Note, ReplCore, ReplInput, ReplOutput, ReplState, ReplStatus,
    StoreCall, StoreFailure, Why,
};
use super::{Item, Shared, Then};
use holdfast_linux::nfq::{AckGate, ConnKey, GateMode};
use holdfast_nsr::{Op, Store, StoreError};
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::Ordering;
use std::sync::mpsc as std_mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Most operations merged into one store write.
const MAX_BATCH_OPS: usize = 8192;
/// Most payload bytes merged into one store write (a batch holds at least
/// one item, whatever its size).
const MAX_BATCH_BYTES: usize = 256 * 1024;
/// Most writes in flight at once.
const WINDOW: usize = 4;

/// What the replicator does to the ACK gate (an [`AckGate`], or a fake in
/// tests).
pub(super) trait Gate: Send + Sync {
    fn confirm(&self, key: &ConnKey, ack: u32);
    fn unregister(&self, key: &ConnKey);
    fn set_mode(&self, mode: GateMode);
}

impl Gate for AckGate {
    fn confirm(&self, key: &ConnKey, ack: u32) {
        AckGate::confirm(self, key, ack);
    }
    fn unregister(&self, key: &ConnKey) {
        AckGate::unregister(self, key);
    }
    fn set_mode(&self, mode: GateMode) {
        AckGate::set_mode(self, mode);
    }
}

/// How the thread ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Ended {
    /// Every [`super::Nsr`] handle is gone.
    Closed,
    /// Another speaker owns the instance.
    Fenced(Fence),
}

pub(super) struct Replicator {
    core: ReplCore,
    store: Box<dyn Store>,
    rx: std_mpsc::Receiver<Item>,
    gate: Arc<dyn Gate>,
    shared: Arc<Shared>,
    /// Origin of the core's time.
    origin: Instant,
    /// The core's outputs, reused.
    out: Vec<ReplOutput>,
    /// Batches taken and not released yet, oldest first.
    unreleased: VecDeque<Vec<Item>>,
    /// When each write in flight was sent, oldest first.
    sent_at: VecDeque<Instant>,
    /// Progress for the process's watchdog: idle while waiting for work
    /// or for the store.
    stamp: holdfast_linux::progress::Stamp,
}

impl Replicator {
    pub(super) fn new(
        core: ReplCore,
        store: Box<dyn Store>,
        rx: std_mpsc::Receiver<Item>,
        gate: Arc<dyn Gate>,
        shared: Arc<Shared>,
    ) -> Replicator {
        Replicator {
            core,
            store,
            rx,
            gate,
            shared,
            origin: Instant::now(),
            out: Vec::new(),
            unreleased: VecDeque::new(),
            sent_at: VecDeque::new(),
            stamp: crate::watchdog::register("nsr-replicator", crate::watchdog::REPLICATOR_BUDGET),
        }
    }

    fn now(&self) -> Duration {
        self.origin.elapsed()
    }

    /// Sets the gate's mode (`hold`: drop everything) and publishes the
    /// first state.
    pub(super) fn start(&mut self, hold: bool) {
        self.step(ReplInput::Start { hold }, Vec::new());
    }

    /// The thread's loop, until the process is fenced or every handle is
    /// dropped.
    pub(super) fn run(mut self) -> Ended {
        loop {
            let in_flight = self.core.in_flight();
            let next = if in_flight == 0 {
                let wait = self
                    .core
                    .next_wake()
                    .map_or(Duration::MAX, |w| w.saturating_sub(self.now()));
                self.stamp.idle();
                let got = self.rx.recv_timeout(wait);
                self.stamp.busy();
                match got {
                    Ok(first) => Some(first),
                    Err(std_mpsc::RecvTimeoutError::Timeout) => None,
                    Err(std_mpsc::RecvTimeoutError::Disconnected) => return Ended::Closed,
                }
            } else if in_flight < WINDOW {
                self.rx.try_recv().ok()
            } else {
                None
            };
            let fenced = match next {
                Some(first) => {
                    let (batch, info) = self.collect(first);
                    self.step(ReplInput::Batch(info), batch)
                }
                None if in_flight > 0 => {
                    self.stamp.idle();
                    let r = self.store.recv_write();
                    self.stamp.busy();
                    let sent = self.sent_at.pop_front();
                    let input = match r {
                        Ok(()) => ReplInput::Written {
                            latency_us: sent.map_or(0, |t| t.elapsed().as_micros() as u64),
                        },
                        Err(e) => {
                            self.sent_at.clear();
                            ReplInput::WriteFailed(failure(e))
                        }
                    };
                    self.step(input, Vec::new())
                }
                None => None,
            };
            if let Some(f) = fenced {
                return Ended::Fenced(f);
            }
            if let Some(f) = self.step(ReplInput::Tick, Vec::new()) {
                return Ended::Fenced(f);
            }
            if self.core.state() == ReplState::Resynchronising {
                let lowest_gen = self.lowest_synced_gen();
                self.step(ReplInput::SessionsSynced { lowest_gen }, Vec::new());
            }
        }
    }

    /// `first` and whatever else is queued, within the batch limits.
    fn collect(&mut self, first: Item) -> (Vec<Item>, BatchInfo) {
        let mut info = BatchInfo::default();
        let mut bytes = 0;
        let mut batch = Vec::new();
        let mut next = Some(first);
        while let Some(i) = next.take() {
            bytes += i.op.as_ref().map_or(0, Op::payload_len);
            info.add(i.op.as_ref().map(|_| i.gen));
            batch.push(i);
            if batch.len() >= MAX_BATCH_OPS || bytes >= MAX_BATCH_BYTES {
                break;
            }
            next = self.rx.try_recv().ok();
        }
        (batch, info)
    }

    /// Feeds `input` to the core (with `batch`, for a
    /// [`ReplInput::Batch`]) and carries out its decisions, feeding each
    /// store call's result back, until the core asks for nothing more.
    /// Returns the fence if the core fenced.
    fn step(&mut self, input: ReplInput, batch: Vec<Item>) -> Option<Fence> {
        if matches!(input, ReplInput::Batch(_)) {
            self.unreleased.push_back(batch);
        }
        let mut out = std::mem::take(&mut self.out);
        let mut next = Some(input);
        let mut fenced = None;
        while let Some(input) = next.take() {
            let now = self.now();
            self.core.handle_into(now, input, &mut out);
            for o in out.drain(..) {
                match o {
                    ReplOutput::Write { epoch, gen, .. } => {
                        if let Some(failed) = self.send(epoch, gen) {
                            next = Some(failed);
                        }
                    }
                    ReplOutput::Release { batches } => {
                        for _ in 0..batches {
                            if let Some(b) = self.unreleased.pop_front() {
                                self.release(b);
                            }
                        }
                    }
                    ReplOutput::Store(call) => next = Some(self.call(call)),
                    ReplOutput::Gate(cmd) => self.gate.set_mode(gate_mode(cmd)),
                    ReplOutput::Resync { gen } => {
                        let _ = self.shared.resync.send(gen);
                    }
                    ReplOutput::Publish(st) => self.publish(st),
                    ReplOutput::WriteDone { latency_us } => {
                        self.shared.writes.fetch_add(1, Ordering::Relaxed);
                        if let Ok(mut l) = self.shared.latency.lock() {
                            l.push(latency_us);
                        }
                    }
                    ReplOutput::WriteError => {
                        self.shared.write_errors.fetch_add(1, Ordering::Relaxed);
                    }
                    ReplOutput::Transition { from, to, why } => log_transition(from, to, &why),
                    ReplOutput::Note(n) => log_note(&n),
                    ReplOutput::Fence(f) => fenced = Some(f),
                }
            }
        }
        self.out = out;
        if let Some(f) = fenced {
            // Nothing in hand may leave: the batches are dropped unreleased.
            self.unreleased.clear();
            self.shared.fence.send_replace(Some(f));
        }
        fenced
    }

    /// Sends the write of the newest batch's operations of `gen`; if the
    /// store refuses it, the failure for the core.
    fn send(&mut self, epoch: u64, gen: u64) -> Option<ReplInput> {
        let ops: Vec<Op> = self
            .unreleased
            .back()
            .into_iter()
            .flatten()
            .filter(|i| i.gen == gen)
            .filter_map(|i| i.op.clone())
            .collect();
        match self.store.send_write(epoch, &ops) {
            Ok(()) => {
                self.sent_at.push_back(Instant::now());
                None
            }
            Err(e) => {
                self.sent_at.clear();
                Some(ReplInput::WriteFailed(failure(e)))
            }
        }
    }

    fn call(&mut self, call: StoreCall) -> ReplInput {
        let r = match call {
            StoreCall::Reconnect => self.store.reconnect().map(|()| ReplInput::Reconnected),
            StoreCall::Claim => self.store.claim().map(|epoch| ReplInput::Claimed { epoch }),
            StoreCall::ReadEpoch => self
                .store
                .epoch()
                .map(|epoch| ReplInput::EpochRead { epoch }),
        };
        r.unwrap_or_else(|e| ReplInput::CallFailed(failure(e)))
    }

    /// Carries out what each item waited for, in order.
    fn release(&mut self, batch: Vec<Item>) {
        let mut done: HashMap<String, u64> = HashMap::new();
        for item in batch {
            if let Some(op) = &item.op {
                *done.entry(op.key().to_string()).or_default() += 1;
            }
            match item.then {
                Then::Nothing => {}
                Then::Confirm(key, ack) => self.gate.confirm(&key, ack),
                Then::Write(tx, bytes) => {
                    let _ = tx.send(bytes);
                }
                Then::Unregister(key) => self.gate.unregister(&key),
                Then::Notify(tx) => {
                    let _ = tx.send(());
                }
            }
        }
        if done.is_empty() {
            return;
        }
        if let Ok(mut s) = self.shared.sessions.lock() {
            for (k, n) in done {
                if let Some(f) = s.get_mut(&k) {
                    f.pending = f.pending.saturating_sub(n);
                    if f.pending == 0 {
                        f.oldest = None;
                    }
                }
            }
        }
    }

    fn publish(&self, st: ReplStatus) {
        let sh = &self.shared;
        sh.epoch.store(st.epoch, Ordering::SeqCst);
        sh.store_epoch.store(st.store_epoch, Ordering::SeqCst);
        sh.gen.store(st.gen, Ordering::SeqCst);
        sh.store_up.store(st.store_up(), Ordering::SeqCst);
        sh.protected
            .store(st.state == ReplState::Protected, Ordering::SeqCst);
        sh.fenced
            .store(st.state == ReplState::Fenced, Ordering::SeqCst);
    }

    /// The lowest generation any session is written at.
    fn lowest_synced_gen(&self) -> Option<u64> {
        self.shared
            .sessions
            .lock()
            .map(|s| s.values().map(|f| f.synced_gen).min())
            .unwrap_or(Some(0))
    }
}

fn failure(e: StoreError) -> StoreFailure {
    match e {
        StoreError::Fenced { current, ours } => StoreFailure::Fenced { current, ours },
        StoreError::Unavailable(m) => StoreFailure::Unavailable(m),
        other => StoreFailure::Other(other.to_string()),
    }
}

fn gate_mode(cmd: GateCommand) -> GateMode {
    match cmd {
        GateCommand::Protect => GateMode::Protected,
        GateCommand::Bypass => GateMode::Bypass,
        GateCommand::DropAll => GateMode::DropAll,
    }
}

fn log_transition(from: ReplState, to: ReplState, why: &Why) {
    match why {
        Why::WriteFailed(e) | Why::CheckFailed(e) => tracing::error!(
            error = %e,
            ?from,
            "state store lost: sessions stay up, UNPROTECTED until it returns"
        ),
        Why::StoreWentBack { current, ours } => tracing::error!(
            current,
            ours,
            ?from,
            "state store went back to an older epoch (lost its data): sessions stay up, UNPROTECTED until it is re-claimed"
        ),
        Why::StoreBack => {
            tracing::info!("state store reachable again: re-synchronising every session")
        }
        Why::AllSynced => tracing::info!("every session re-synchronised: PROTECTED again"),
        Why::Fenced(f) => tracing::error!(
            current = f.current,
            ours = f.ours,
            ?from,
            "FENCED: another speaker has taken over this instance; exiting without touching the sessions"
        ),
    }
    tracing::debug!(?from, ?to, "replicator state");
}

fn log_note(n: &Note) {
    match n {
        Note::StillUnavailable(e) => {
            tracing::debug!(error = %e, "state store still unavailable")
        }
        Note::Reclaiming { current, ours } => tracing::warn!(
            current,
            ours,
            "state store lost its data: re-claiming the instance"
        ),
    }
}

#[cfg(test)]
mod tests;
