//! The replicator's state machine, pure: no I/O, no clocks, no threads.
//!
//! [`ReplCore::handle`] takes the time (a [`Duration`] since an origin the
//! caller picks) and one [`ReplInput`] — a batch taken from the queue, a
//! timer tick, the result of a store call, the sessions' progress — and
//! returns the [`ReplOutput`]s the replicator thread carries out in order:
//! write the batch, release what it waited for, call the store, set the ACK
//! gate's mode, tell the sessions to re-synchronise, publish the state, and
//! fence.
//!
//! # Pipelined writes
//! Writes are pipelined: a batch's write is sent at once, without waiting
//! for the writes before it, and their results come back in the order the
//! writes were sent. Batches are released strictly in queue order, each
//! once its own write and every batch before it are done (a batch with
//! nothing to write waits behind the writes in flight), so an ACK is never
//! confirmed nor a message sent before everything queued before it is
//! stored. How many writes may be in flight is the caller's choice (it
//! stops taking batches while its window is full). The first write that
//! fails ends the pipeline: the store abandons the writes after it (their
//! outcome is unknown, as for any `Unavailable` write), the generation is
//! bumped, and every batch in hand is released unprotected.
//!
//! # States
//! - [`ReplState::Protected`]: the store answers and every session is
//!   written at the current generation. Batches are written; the gate holds
//!   ACKs until the store has the bytes.
//! - [`ReplState::Unprotected`]: a write or an epoch check failed (or the
//!   store was down at start). The generation was bumped, so nothing queued
//!   before is written; batches are released at once and the gate lets
//!   every ACK through. The store is retried every [`RETRY`]: reconnect,
//!   then read the epoch (or claim the instance if we never had an epoch).
//!   A store whose epoch went back (it lost its data) is claimed up to our
//!   epoch again, one `claim` at a time.
//! - [`ReplState::Resynchronising`]: the store answers again; the sessions
//!   were told to write themselves anew at the new generation (record and
//!   table snapshot). Writes at that generation are made; the gate still
//!   lets every ACK through. Once every session has caught up
//!   ([`ReplInput::SessionsSynced`]) the core is protected again.
//! - [`ReplState::Fenced`]: a newer epoch owns the instance. The gate drops
//!   every packet, nothing queued is released, and [`ReplOutput::Fence`]
//!   asks the thread to stop; the process then exits. Terminal: every later
//!   input is ignored.
//!
//! While protected or re-synchronising, the epoch is read whenever
//! [`IDLE_CHECK`] passed without a store answer proving it (an idle primary
//! learns it is fenced within that time).
//!
//! # Contract with the caller
//! After [`ReplOutput::Store`], the next input must be that call's result
//! ([`ReplInput::Reconnected`] / [`ReplInput::Claimed`] /
//! [`ReplInput::EpochRead`] / [`ReplInput::CallFailed`]); store calls are
//! only asked for while no write is in flight. After [`ReplOutput::Write`]
//! other batches and ticks may come before the write's result
//! ([`ReplInput::Written`] / [`ReplInput::WriteFailed`]); results come in
//! the order the writes were asked for, and after a failed write no result
//! of a later one comes. A result nobody asked for is ignored. A batch is
//! written at most once and released exactly once, unless the core fences,
//! in which case it is never released.
//!
//! # Known issues
//! - A frozen primary cut off from the store cannot learn that it is
//!   fenced: it goes unprotected instead (docs/nsr.md, Known issues).
//! - A store whose epoch went back is detected at the next write or epoch
//!   check, then re-claimed at the next retry, [`RETRY`] later: the
//!   instance is unprotected meanwhile although the store answers.

use serde::{Deserialize, Serialize};
use std::collections::VecDeque;
use std::time::Duration;

/// How often an unreachable store is retried.
pub const RETRY: Duration = Duration::from_millis(500);
/// How long the store may go without proving our epoch (a write or an
/// epoch read) before the epoch is read, so a fenced primary finds out.
pub const IDLE_CHECK: Duration = Duration::from_millis(250);

/// The replicator's state (see the module documentation).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum ReplState {
    Protected,
    Resynchronising,
    Unprotected,
    Fenced,
}

/// What the ACK gate should do with our sessions' packets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum GateCommand {
    /// Hold or clamp ACKs beyond what is confirmed.
    Protect,
    /// Let every packet through (the store is not keeping up).
    Bypass,
    /// Drop every packet (fenced).
    DropAll,
}

/// A store call the core asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum StoreCall {
    /// Drop the connection and open a new one.
    Reconnect,
    /// Increment the instance's epoch; answer [`ReplInput::Claimed`].
    Claim,
    /// Read the instance's epoch; answer [`ReplInput::EpochRead`].
    ReadEpoch,
}

/// Why a store call failed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum StoreFailure {
    /// The write was refused: the instance's epoch is `current`.
    Fenced { current: u64, ours: u64 },
    /// The store cannot be reached or did not answer in time.
    Unavailable(String),
    /// Any other error (corrupt or unreadable data).
    Other(String),
}

impl std::fmt::Display for StoreFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StoreFailure::Fenced { current, ours } => {
                write!(f, "fenced: instance epoch is {current}, ours is {ours}")
            }
            StoreFailure::Unavailable(m) => write!(f, "store unavailable: {m}"),
            StoreFailure::Other(m) => f.write_str(m),
        }
    }
}

/// Another speaker owns the instance: its epoch is `current`, ours `ours`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Fence {
    pub current: u64,
    pub ours: u64,
}

/// What the core needs to know about a batch: how many operations it holds
/// at each generation (items without an operation only wait for release).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BatchInfo {
    pub items: usize,
    /// `(generation, operations)`, one entry per generation present.
    pub ops_by_gen: Vec<(u64, usize)>,
}

impl BatchInfo {
    /// Counts one item, with an operation produced at `gen` if `Some`.
    pub fn add(&mut self, op_gen: Option<u64>) {
        self.items += 1;
        let Some(gen) = op_gen else { return };
        match self.ops_by_gen.iter_mut().find(|(g, _)| *g == gen) {
            Some((_, n)) => *n += 1,
            None => self.ops_by_gen.push((gen, 1)),
        }
    }

    /// Operations produced at `gen`.
    pub fn ops_at(&self, gen: u64) -> usize {
        self.ops_by_gen
            .iter()
            .find(|(g, _)| *g == gen)
            .map_or(0, |(_, n)| *n)
    }
}

/// An input of the core.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum ReplInput {
    /// Once, before anything else: the gate's mode and the first status.
    /// `hold`: the gate drops everything until the caller opens it (a
    /// takeover, until its sockets are rebuilt).
    Start { hold: bool },
    /// Items taken from the queue (their operations stay with the caller).
    Batch(BatchInfo),
    /// Time passed (after every batch, and when [`ReplCore::next_wake`] is
    /// reached).
    Tick,
    /// The write asked for succeeded, in `latency_us`.
    Written { latency_us: u64 },
    /// The write asked for failed.
    WriteFailed(StoreFailure),
    /// [`StoreCall::Reconnect`] succeeded.
    Reconnected,
    /// [`StoreCall::Claim`] succeeded: the instance's epoch is now `epoch`.
    Claimed { epoch: u64 },
    /// [`StoreCall::ReadEpoch`] succeeded.
    EpochRead { epoch: u64 },
    /// A [`StoreCall`] failed.
    CallFailed(StoreFailure),
    /// While re-synchronising: the lowest generation any session is written
    /// at (`None`: no session).
    SessionsSynced { lowest_gen: Option<u64> },
}

/// What the published figures show.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReplStatus {
    pub state: ReplState,
    /// The epoch we write with (0: never claimed).
    pub epoch: u64,
    /// The store's epoch, as last seen.
    pub store_epoch: u64,
    /// The store generation: operations produced at an older one are not
    /// written (the store lost them, or never had them).
    pub gen: u64,
}

impl ReplStatus {
    /// The store answers (writes are made).
    pub fn store_up(&self) -> bool {
        matches!(
            self.state,
            ReplState::Protected | ReplState::Resynchronising
        )
    }
}

/// Why the state changed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Why {
    /// A write failed.
    WriteFailed(StoreFailure),
    /// The idle epoch check failed.
    CheckFailed(StoreFailure),
    /// The store's epoch is older than ours: it lost its data.
    StoreWentBack { current: u64, ours: u64 },
    /// The store answers again, at our epoch.
    StoreBack,
    /// Every session is written at the current generation.
    AllSynced,
    /// A newer epoch owns the instance.
    Fenced(Fence),
}

/// Events worth a log line that change no state.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Note {
    /// The store still cannot be used; retried in [`RETRY`].
    StillUnavailable(StoreFailure),
    /// The store came back with an older epoch: claiming up to ours.
    Reclaiming { current: u64, ours: u64 },
}

/// A decision of the core, carried out in order by the caller.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum ReplOutput {
    /// Send the write, fenced by `epoch`, of the batch's `ops` operations
    /// produced at `gen` (the others are stale and skipped), without
    /// waiting for the writes in flight before it.
    Write { epoch: u64, gen: u64, ops: usize },
    /// Carry out what every item of the `batches` oldest unreleased
    /// batches waited for, in order.
    Release { batches: usize },
    /// Call the store.
    Store(StoreCall),
    /// Set the ACK gate's mode.
    Gate(GateCommand),
    /// Tell every session to write itself anew at `gen`.
    Resync { gen: u64 },
    /// Publish the state and figures.
    Publish(ReplStatus),
    /// Count a successful write and its latency.
    WriteDone { latency_us: u64 },
    /// Count a failed write (or epoch check).
    WriteError,
    /// The state changed.
    Transition {
        from: ReplState,
        to: ReplState,
        why: Why,
    },
    /// Log only.
    Note(Note),
    /// Stop: another speaker owns the instance. Nothing queued may be
    /// released; the process exits with [`crate::daemon::EXIT_FENCED`].
    Fence(Fence),
}

/// The store call the core waits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
enum Pending {
    Reconnect,
    Claim,
    /// Reading the epoch: as the idle check, or after a reconnect.
    ReadEpoch {
        check: bool,
    },
}

/// The replicator's state machine.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReplCore {
    state: ReplState,
    epoch: u64,
    store_epoch: u64,
    gen: u64,
    pending: Option<Pending>,
    /// The batches taken and not released yet, oldest first: `true` while
    /// the batch's write is in flight.
    unreleased: VecDeque<bool>,
    /// Last time the store proved our epoch (or we came up).
    last_contact: Duration,
    /// Last reconnection attempt (or the loss of the store).
    last_try: Duration,
}

impl ReplCore {
    /// A core writing with `epoch`; `store_up` says whether the store
    /// answered at start (if not, `epoch` is 0 and is claimed once it does).
    pub fn new(epoch: u64, store_up: bool) -> ReplCore {
        ReplCore {
            state: if store_up {
                ReplState::Protected
            } else {
                ReplState::Unprotected
            },
            epoch,
            store_epoch: epoch,
            // Sessions that come up during a start-up outage sync at 1;
            // the store's return bumps it to 2 and re-synchronises them.
            gen: u64::from(!store_up),
            pending: None,
            unreleased: VecDeque::new(),
            last_contact: Duration::ZERO,
            last_try: Duration::ZERO,
        }
    }

    pub fn state(&self) -> ReplState {
        self.state
    }

    pub fn status(&self) -> ReplStatus {
        ReplStatus {
            state: self.state,
            epoch: self.epoch,
            store_epoch: self.store_epoch,
            gen: self.gen,
        }
    }

    /// When the next [`ReplInput::Tick`] is due (`None`: fenced, never).
    pub fn next_wake(&self) -> Option<Duration> {
        match self.state {
            ReplState::Protected | ReplState::Resynchronising => {
                Some(self.last_contact + IDLE_CHECK)
            }
            ReplState::Unprotected => Some(self.last_try + RETRY),
            ReplState::Fenced => None,
        }
    }

    pub fn handle(&mut self, now: Duration, input: ReplInput) -> Vec<ReplOutput> {
        let mut out = Vec::new();
        self.handle_into(now, input, &mut out);
        out
    }

    /// [`ReplCore::handle`], appending to `out` (no allocation once `out`
    /// has grown).
    pub fn handle_into(&mut self, now: Duration, input: ReplInput, out: &mut Vec<ReplOutput>) {
        if self.state == ReplState::Fenced {
            return;
        }
        match input {
            ReplInput::Start { hold } => {
                self.last_contact = now;
                self.last_try = now;
                out.push(ReplOutput::Publish(self.status()));
                out.push(ReplOutput::Gate(if hold {
                    GateCommand::DropAll
                } else if self.state == ReplState::Protected {
                    GateCommand::Protect
                } else {
                    GateCommand::Bypass
                }));
            }
            ReplInput::Batch(info) => self.on_batch(&info, out),
            ReplInput::Tick => self.on_tick(now, out),
            ReplInput::Written { latency_us } => {
                if self.unreleased.front() == Some(&true) {
                    self.last_contact = now;
                    out.push(ReplOutput::WriteDone { latency_us });
                    self.unreleased[0] = false;
                    self.release_ready(out);
                }
            }
            ReplInput::WriteFailed(f) => {
                if self.unreleased.front() != Some(&true) {
                    return;
                }
                match f {
                    StoreFailure::Fenced { current, ours } if current >= ours => {
                        self.fence(current, out);
                        return;
                    }
                    StoreFailure::Fenced { current, ours } => {
                        self.lost(now, Why::StoreWentBack { current, ours }, out)
                    }
                    other => self.lost(now, Why::WriteFailed(other), out),
                }
                // The writes after it are abandoned: everything in hand
                // goes, unprotected.
                out.push(ReplOutput::Release {
                    batches: self.unreleased.len(),
                });
                self.unreleased.clear();
            }
            ReplInput::Reconnected => {
                if self.take(Pending::Reconnect) {
                    if self.epoch == 0 {
                        // Started while the store was down: claim now.
                        self.call(Pending::Claim, StoreCall::Claim, out);
                    } else {
                        self.call(
                            Pending::ReadEpoch { check: false },
                            StoreCall::ReadEpoch,
                            out,
                        );
                    }
                }
            }
            ReplInput::Claimed { epoch } => {
                if self.take(Pending::Claim) {
                    if self.epoch == 0 {
                        self.epoch = epoch;
                    }
                    self.reconnected_at(now, epoch, out);
                }
            }
            ReplInput::EpochRead { epoch } => match self.pending {
                Some(Pending::ReadEpoch { check: true }) => {
                    self.pending = None;
                    self.checked(now, epoch, out);
                }
                Some(Pending::ReadEpoch { check: false }) => {
                    self.pending = None;
                    self.reconnected_at(now, epoch, out);
                }
                _ => {}
            },
            ReplInput::CallFailed(f) => match self.pending.take() {
                Some(Pending::ReadEpoch { check: true }) => {
                    self.lost(now, Why::CheckFailed(f), out)
                }
                Some(Pending::Reconnect | Pending::Claim | Pending::ReadEpoch { check: false }) => {
                    out.push(ReplOutput::Note(Note::StillUnavailable(f)))
                }
                other => self.pending = other,
            },
            ReplInput::SessionsSynced { lowest_gen } => {
                if self.state == ReplState::Resynchronising
                    && lowest_gen.is_none_or(|g| g >= self.gen)
                {
                    out.push(ReplOutput::Gate(GateCommand::Protect));
                    self.transition(ReplState::Protected, Why::AllSynced, out);
                }
            }
        }
    }

    fn on_batch(&mut self, info: &BatchInfo, out: &mut Vec<ReplOutput>) {
        let ops = self.ops_to_write(info);
        self.unreleased.push_back(ops > 0);
        if ops > 0 {
            out.push(ReplOutput::Write {
                epoch: self.epoch,
                gen: self.gen,
                ops,
            });
        } else {
            self.release_ready(out);
        }
    }

    /// Writes in flight.
    pub fn in_flight(&self) -> usize {
        self.unreleased.iter().filter(|w| **w).count()
    }

    /// Releases the oldest batches whose writes are done, up to the first
    /// one still in flight.
    fn release_ready(&mut self, out: &mut Vec<ReplOutput>) {
        let batches = self
            .unreleased
            .iter()
            .position(|w| *w)
            .unwrap_or(self.unreleased.len());
        if batches > 0 {
            self.unreleased.drain(..batches);
            out.push(ReplOutput::Release { batches });
        }
    }

    /// Operations of `info` that are written: those at the current
    /// generation, while the store answers.
    fn ops_to_write(&self, info: &BatchInfo) -> usize {
        match self.state {
            ReplState::Protected | ReplState::Resynchronising => info.ops_at(self.gen),
            ReplState::Unprotected | ReplState::Fenced => 0,
        }
    }

    fn on_tick(&mut self, now: Duration, out: &mut Vec<ReplOutput>) {
        if self.pending.is_some() || !self.unreleased.is_empty() {
            // A store call or a write is on its way: it proves the epoch
            // (or fails) by itself.
            return;
        }
        match self.state {
            ReplState::Protected | ReplState::Resynchronising => {
                if now >= self.last_contact + IDLE_CHECK {
                    self.call(
                        Pending::ReadEpoch { check: true },
                        StoreCall::ReadEpoch,
                        out,
                    );
                }
            }
            ReplState::Unprotected => {
                if now >= self.last_try + RETRY {
                    self.last_try = now;
                    self.call(Pending::Reconnect, StoreCall::Reconnect, out);
                }
            }
            ReplState::Fenced => {}
        }
    }

    /// The idle check read `current`.
    fn checked(&mut self, now: Duration, current: u64, out: &mut Vec<ReplOutput>) {
        let ours = self.epoch;
        if current > ours {
            self.fence(current, out);
        } else if current < ours {
            self.store_epoch = current;
            self.lost(now, Why::StoreWentBack { current, ours }, out);
        } else {
            self.last_contact = now;
            if self.store_epoch != current {
                self.store_epoch = current;
                out.push(ReplOutput::Publish(self.status()));
            }
        }
    }

    /// After a reconnection the store's epoch is `current`.
    fn reconnected_at(&mut self, now: Duration, current: u64, out: &mut Vec<ReplOutput>) {
        let ours = self.epoch;
        if current < ours {
            // Restarted without its data: nobody claimed the instance after
            // us, so claim it back up to our epoch and write everything anew.
            out.push(ReplOutput::Note(Note::Reclaiming { current, ours }));
            self.call(Pending::Claim, StoreCall::Claim, out);
            return;
        }
        if current > ours {
            self.fence(current, out);
            return;
        }
        // Operations produced before now were not stored: every session
        // writes itself anew at the next generation.
        self.store_epoch = current;
        self.gen += 1;
        self.last_contact = now;
        self.transition(ReplState::Resynchronising, Why::StoreBack, out);
        out.push(ReplOutput::Resync { gen: self.gen });
    }

    /// The store stopped answering (or lost its data): sessions continue
    /// unprotected, and nothing produced so far is written.
    fn lost(&mut self, now: Duration, why: Why, out: &mut Vec<ReplOutput>) {
        self.gen += 1;
        self.last_try = now;
        out.push(ReplOutput::WriteError);
        self.transition(ReplState::Unprotected, why, out);
        out.push(ReplOutput::Gate(GateCommand::Bypass));
    }

    /// Another speaker owns the instance: the gate drops everything first.
    fn fence(&mut self, current: u64, out: &mut Vec<ReplOutput>) {
        let f = Fence {
            current,
            ours: self.epoch,
        };
        self.store_epoch = current;
        self.pending = None;
        // Nothing in hand is ever released.
        self.unreleased.clear();
        out.push(ReplOutput::Gate(GateCommand::DropAll));
        self.transition(ReplState::Fenced, Why::Fenced(f), out);
        out.push(ReplOutput::Fence(f));
    }

    fn transition(&mut self, to: ReplState, why: Why, out: &mut Vec<ReplOutput>) {
        let from = self.state;
        self.state = to;
        out.push(ReplOutput::Transition { from, to, why });
        out.push(ReplOutput::Publish(self.status()));
    }

    fn call(&mut self, pending: Pending, call: StoreCall, out: &mut Vec<ReplOutput>) {
        self.pending = Some(pending);
        out.push(ReplOutput::Store(call));
    }

    /// Clears `want` if it is what the core waits for.
    fn take(&mut self, want: Pending) -> bool {
        if self.pending == Some(want) {
            self.pending = None;
            true
        } else {
            false
        }
    }
}

#[cfg(test)]
mod tests;
