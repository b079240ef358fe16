//! The peer task's non-stop-routing duties: write the session record at
//! Established, replicate every received and sent message, report the
//! peer's acknowledgements, write the ROUTE-REFRESH requests not answered
//! yet to the store, compact or re-synchronise the session's logs with a
//! table snapshot, and resume a session taken over from a failed primary.
//!
//! Received UPDATEs and KEEPALIVEs of an Established session are written
//! ahead of the framer (`replicate_ahead`, `read_ahead`: docs/nsr.md);
//! any other message, and what follows it in a read, after the core has
//! handled it (`replicate_received`).
//!
//! A ROUTE-REFRESH (RFC 2918) is pending from the moment the core hands it
//! to the RIB until the RIB's answer (the table and an End-of-RIB) has been
//! handed to the replicator: the RIB follows its `Send`s with
//! `ToPeer::Refreshed` (the core's `RibRefreshed`), and the replicator
//! stores operations in order, so whenever the store no longer holds a
//! request as pending it holds the answer's bytes. The pending list is the
//! core's; each change of it (`PeerOutput::RefreshPending`) is written
//! ([`Op::Refresh`]) before the bytes that carried the request are
//! confirmed (their ACK is held until then). At a takeover the stored
//! list goes to the core with the resume, which holds the RIB output until
//! the session's first KEEPALIVE and asks the RIB again for the requests
//! the old primary had not answered.
//!
//! # Known issues
//! - A request answered by the old primary whose clearing was not stored
//!   yet is answered again by the backup: the peer receives the table a
//!   second time (harmless: a refresh is idempotent).
//! - Only the request's family is kept; an enhanced route refresh (RFC
//!   7313) is answered as a plain one (the RIB sends no BoRR/EoRR).

use super::{now, PeerTask};
use crate::conn::{unix_ms, Conn, ConnRepl};
use crate::msg::rib::{RibCmd, Snapshot};
use crate::nsr::Then;
use crate::resume::Resumed;
use bytes::Bytes;
use holdfast_fsm::{State, Time};
use holdfast_neighbor::{PeerInput, Which};
use holdfast_nsr::{Op, SessionRecord, SCHEMA_VERSION};
use holdfast_wire::{
    decode_route_refresh, encode_route_refresh, msg_type, CodecCtx, Family, RouteRefresh,
};
use std::time::{Duration, Instant};
use tokio::sync::oneshot;

/// How often the peer's acknowledgement is written (it only trims the
/// send tail; a stale value is safe).
const ACKED_EVERY: Duration = Duration::from_millis(100);

/// A resumed connection's window probe is repeated after this long without
/// an ACK from the peer, then after twice as long each time, up to
/// [`REPROBES`] times. Linux answers an out-of-window segment at most once
/// every 500 ms per socket (`net.ipv4.tcp_invalid_ratelimit`): a repeat
/// sooner than that after an answer that was sent and lost would go
/// unanswered too.
const REPROBE_AFTER: Duration = Duration::from_millis(550);
const REPROBES: u32 = 4;

/// The window probes of a resumed connection until the peer answers one.
///
/// The restored socket holds the old primary's unacknowledged tail as sent
/// data, and its first RTT sample comes from the answer to its window
/// probe. If that answer is lost, the next ACK comes with the peer's next
/// message, seconds later: the socket waits 3 s (no sample) to retransmit,
/// and after that late sample its RTO is three times the wait. A tail
/// larger than the congestion window then holds back everything new, and
/// the peer's HoldTimer (which BIRD starts up to a quarter short) can
/// expire: CI, 2026-11-28, 8 s of silence after the guard dropped the
/// answer. The gate injects the repeated probes
/// ([`holdfast_linux::nfq::AckGate::probe`]): toggling repair mode on a live
/// socket would race the other tasks' reads and writes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Reprobe {
    pub due: Time,
    resumed: Time,
    sent: u32,
    /// The probe's sequence number: the restored socket's own probe's,
    /// before anything the peer has received.
    seq: u32,
}

impl Reprobe {
    pub(super) fn new(resumed: Time, seq: u32) -> Self {
        Reprobe {
            due: resumed + REPROBE_AFTER,
            resumed,
            sent: 0,
            seq,
        }
    }

    /// The timer fired at `now`: before the probe is due nothing changes
    /// (the task's timer also serves its other deadlines); once due, the
    /// peer's last ACK is read (`last_ack_ms`, from `TCP_INFO`) and
    /// [`Reprobe::step`] decides. Returns the schedule to keep and whether
    /// to probe now.
    pub(super) fn tick(
        self,
        now: Time,
        last_ack_ms: impl FnOnce() -> Option<u32>,
    ) -> (Option<Reprobe>, bool) {
        if now < self.due {
            return (Some(self), false);
        }
        let next = self.step(now, last_ack_ms());
        let probe = next.is_some();
        (next, probe)
    }

    /// At `now`, with the peer's last ACK `last_ack_ms` ago (from
    /// `TCP_INFO`): `None` once it answered (an ACK since the resume) or
    /// the probes are used up; otherwise probe again and keep the returned
    /// schedule.
    pub(super) fn step(&self, now: Time, last_ack_ms: Option<u32>) -> Option<Reprobe> {
        let since_resume = now.saturating_sub(self.resumed).as_millis();
        if last_ack_ms.is_some_and(|ms| u128::from(ms) < since_resume) || self.sent >= REPROBES {
            return None;
        }
        let sent = self.sent + 1;
        Some(Reprobe {
            due: now + REPROBE_AFTER * (1 << sent),
            sent,
            ..self.clone()
        })
    }
}

/// Writes bytes received on a replicated connection (`updates`: the whole
/// UPDATEs among them; `partial`: the start of a message after them, up to
/// `ack`), with their confirmation.
fn submit_received(r: &mut ConnRepl, updates: Vec<u8>, ack: u32, partial: Bytes) {
    if let Some((inb, _)) = r.during_snapshot.as_mut() {
        inb.extend_from_slice(&updates);
    }
    let then = Then::Confirm(r.ckey, ack);
    let Some(key) = r.replicating().map(str::to_string) else {
        r.nsr.submit("", None, 0, then);
        return;
    };
    r.log_bytes += updates.len() as u64;
    let snd = r.snd_next();
    let log = r.log_bytes;
    r.nsr.figures(&key, |f| {
        f.rcv_confirmed = ack;
        f.snd_next = snd;
        f.log_bytes = log;
    });
    let op = Op::Received {
        key: key.clone(),
        ack,
        updates: Bytes::from(updates),
        partial,
    };
    r.nsr.submit(&key, Some(op), r.synced_gen, then);
}

impl PeerTask {
    /// Session key in the store.
    pub(super) fn store_key(&self) -> String {
        format!("{}/{}", self.s.instance, self.s.address)
    }

    /// Whether the message the framer just took out of the main
    /// connection of a replicated session was not written ahead of it
    /// ([`Self::replicate_ahead`]): an UPDATE's raw bytes then go with the
    /// read's [`Self::replicate_received`].
    pub(super) fn beyond_ahead(&self) -> bool {
        self.main
            .as_ref()
            .and_then(|c| c.repl.as_ref())
            .is_some_and(|r| r.key.is_some() && r.consumed > r.ahead)
    }

    /// The main connection, while its session is written to the store.
    fn main_written(&mut self) -> Option<&mut Conn> {
        self.main
            .as_mut()
            .filter(|c| c.repl.as_ref().and_then(ConnRepl::replicating).is_some())
    }

    /// Before the framer: the whole UPDATEs and KEEPALIVEs read on the main
    /// connection of an Established session (and the start of a message
    /// after them) are replicated at once, so their ACK waits for the store
    /// alone, not for the core and the RIB to get through what was read
    /// before them (issue 27). Any other message, and what follows it, is
    /// replicated after the core has seen it ([`Self::replicate_received`]),
    /// as what it causes (a ROUTE-REFRESH's pending list) must be stored
    /// before its bytes are confirmed.
    pub(super) fn replicate_ahead(&mut self, w: Which) {
        if w != Which::Main || !self.core.takes_updates() {
            return;
        }
        let Some(conn) = self.main_written() else {
            return;
        };
        let Some(a) = conn.scan_ahead() else { return };
        if let Some(r) = conn.repl.as_mut() {
            submit_received(r, a.updates, a.ack, a.partial);
        }
    }

    /// Between the messages of one read: what the kernel received since is
    /// read and replicated ahead ([`Self::replicate_ahead`]), when that
    /// applies. Returns the bytes read.
    pub(super) fn read_ahead(&mut self, w: Which) -> usize {
        if w != Which::Main || !self.core.takes_updates() {
            return 0;
        }
        let Some(n) = self.main_written().map(Conn::read_ahead) else {
            return 0;
        };
        if n > 0 {
            self.replicate_ahead(w);
        }
        n
    }

    /// After a read: the bytes consumed are replicated (with the UPDATEs
    /// among them that [`Self::replicate_ahead`] did not) before their ACK
    /// may leave.
    pub(super) fn replicate_received(&mut self, w: Which, raw: Vec<u8>) {
        let compact_at = self.compact_at;
        let Some(conn) = self.conn(w) else {
            return;
        };
        let partial = Bytes::copy_from_slice(conn.unconsumed());
        let Some(r) = conn.repl.as_mut() else {
            return;
        };
        // Every byte read is replicated, the start of an unfinished message
        // too: a peer in loss recovery sends the rest only once this part
        // is acknowledged.
        let covered = r.consumed + partial.len() as u64;
        let ack = r.rcv_base.wrapping_add(covered as u32);
        let written_ahead = raw.is_empty() && covered == r.covered && r.replicating().is_some();
        if !written_ahead {
            r.covered = covered;
            submit_received(r, raw, ack, partial);
        }
        // What was written ahead of the framer counts here too, and a
        // taken-over session's logs once read.
        r.count_read_logs();
        let compact = r.replicating().is_some() && r.log_bytes > compact_at;
        if compact && self.snapshot.is_none() {
            self.start_snapshot(false);
        }
        if w == Which::Main {
            self.replicate_acked();
        }
    }

    /// Writes the current session's pending ROUTE-REFRESH requests (the
    /// core's `RefreshPending`).
    pub(super) fn replicate_refresh(&mut self, families: &[Family]) {
        let pending = encode_refreshes(families.iter().copied());
        let Some(r) = self.main.as_mut().and_then(|c| c.repl.as_mut()) else {
            return;
        };
        let Some(key) = r.replicating().map(str::to_string) else {
            return;
        };
        let op = Op::Refresh {
            key: key.clone(),
            pending,
        };
        r.nsr.submit(&key, Some(op), r.synced_gen, Then::Nothing);
    }

    /// Trims the main connection's unacknowledged bytes to the peer's ACK
    /// as the kernel knows it now.
    fn trim_unacked(&mut self) {
        let Some(conn) = self.main.as_mut() else {
            return;
        };
        let Some(una) = conn.snd_una() else { return };
        if let Some(r) = conn.repl.as_mut() {
            r.unacked.trim(Some(una));
        }
    }

    /// The record of the main connection, its sequence numbers where the
    /// store takes over: `snd_seq` at the oldest byte the peer may not have
    /// acknowledged (the bytes from there follow as a `Sent`, see
    /// [`crate::unacked::Unacked::op`]).
    fn record(&self) -> Option<SessionRecord> {
        let conn = self.main.as_ref()?;
        let r = conn.repl.as_ref()?;
        let (Some(open_sent), Some(open_received)) = (r.open_tx.clone(), r.open_rx.clone()) else {
            tracing::warn!("NSR: OPENs of this connection were not kept; session not replicated");
            return None;
        };
        Some(SessionRecord {
            schema: SCHEMA_VERSION,
            instance: self.s.instance.clone(),
            peer: self.s.address,
            local: conn.local,
            remote: conn.remote,
            outbound: conn.outbound,
            open_sent,
            open_received,
            tcp: r.tcp.clone(),
            snd_seq: r.unacked.base(r.snd_next()),
            rcv_seq: r.rcv_next(),
            established_unix_ms: unix_ms(),
        })
    }

    /// At Established: the session record (raw OPENs, TCP parameters,
    /// sequence numbers). Its tables start empty.
    pub(super) fn replicate_session(&mut self) {
        // A new session: the core forgot the requests of an earlier one
        // (the `Session` op clears the stored ones too).
        self.trim_unacked();
        let Some(record) = self.record() else { return };
        let key = self.store_key();
        let peer = self.s.address.to_string();
        let Some(r) = self.main.as_mut().and_then(|c| c.repl.as_mut()) else {
            return;
        };
        let gen = r.nsr.gen();
        r.key = Some(key.clone());
        r.synced_gen = gen;
        r.log_bytes = 0;
        r.logs_unread = None;
        self.compact_at = r.nsr.shared.compact_bytes;
        let (ack, snd) = (r.rcv_next(), r.snd_next());
        r.nsr.figures(&key, |f| {
            f.peer = peer;
            f.synced_gen = gen;
            f.rcv_confirmed = ack;
            f.snd_next = snd;
            f.log_bytes = 0;
        });
        let op = Op::Session {
            key: key.clone(),
            record,
        };
        r.nsr.submit(&key, Some(op), gen, Then::Nothing);
        if let Some(op) = r.unacked.op(&key) {
            r.nsr.submit(&key, Some(op), gen, Then::Nothing);
        }
    }

    /// Writes the peer's acknowledgement (a lower bound) now and then, so
    /// the store trims the send tail.
    /// Until the tail is empty, it is written again every `ACKED_EVERY`
    /// from the timer, so that a session at rest stores no send tail.
    pub(super) fn replicate_acked(&mut self) {
        self.acked_due = None;
        let Some(conn) = self.main.as_mut() else {
            return;
        };
        let Some(r) = conn.repl.as_ref() else { return };
        if r.replicating().is_none() {
            return;
        }
        if r.last_acked.elapsed() < ACKED_EVERY {
            self.acked_due = Some(now() + ACKED_EVERY);
            return;
        }
        let Some(una) = conn.snd_una() else { return };
        let Some(r) = conn.repl.as_mut() else { return };
        r.unacked.trim(Some(una));
        r.last_acked = Instant::now();
        let pending = una != r.snd_next();
        if let Some(key) = r.replicating().map(str::to_string) {
            let op = Op::Acked {
                key: key.clone(),
                snd_una: una,
            };
            r.nsr.submit(&key, Some(op), r.synced_gen, Then::Nothing);
        }
        if pending {
            self.acked_due = Some(now() + ACKED_EVERY);
        }
    }

    /// Asks the RIB thread for this session's tables. `resync`: after a
    /// store outage the session is written anew; otherwise the logs are only
    /// compacted.
    pub(super) fn start_snapshot(&mut self, resync: bool) {
        if let Some((_, r)) = self.snapshot.as_mut() {
            *r |= resync;
            return;
        }
        if !self.core.is_up() || self.core.state() != State::Established {
            return;
        }
        let Some(neg) = self.core.negotiated() else {
            return;
        };
        let ctx = CodecCtx {
            four_octet_as: neg.four_octet_as,
            ibgp: neg.remote_as == self.s.session.local_as,
        };
        let Some(r) = self.main.as_mut().and_then(|c| c.repl.as_mut()) else {
            return;
        };
        if r.key.is_none() {
            return;
        }
        let min_ratio = (!resync).then_some(r.nsr.shared.compact_ratio);
        let (tx, rx) = oneshot::channel();
        self.rib.send(RibCmd::Snapshot {
            peer: self.s.id,
            ctx,
            min_ratio,
            reply: tx,
        });
        r.during_snapshot = Some((Vec::new(), Vec::new()));
        self.snapshot = Some((rx, resync));
    }

    /// The RIB found the log not worth compacting (it holds few replaced
    /// routes): nothing is written, and the log is looked at again once it
    /// has doubled. A re-synchronisation asked for meanwhile takes its
    /// snapshot now.
    fn compaction_skipped(&mut self, resync: bool, changes: u64, routes: u64) {
        if let Some(r) = self.main.as_mut().and_then(|c| c.repl.as_mut()) {
            r.during_snapshot = None;
            self.compact_at = self.compact_at.max(2 * r.log_bytes);
            tracing::debug!(
                changes,
                routes,
                log_bytes = r.log_bytes,
                next_at = self.compact_at,
                "NSR: log not compacted: it holds few replaced routes"
            );
        }
        if resync {
            self.start_snapshot(true);
        }
    }

    /// The snapshot arrived: it replaces the session's logs, followed by
    /// what was received and sent while it was taken.
    pub(super) fn on_snapshot(&mut self, reply: Option<Snapshot>) {
        let Some((_, resync)) = self.snapshot.take() else {
            return;
        };
        let tables = match reply {
            Some(Snapshot::Tables(adj_in, adj_out)) => Some((adj_in, adj_out)),
            Some(Snapshot::NotWorth { changes, routes }) => {
                self.compaction_skipped(resync, changes, routes);
                return;
            }
            None => None,
        };
        if resync {
            self.trim_unacked();
        }
        let record = if resync { self.record() } else { None };
        let Some(conn) = self.main.as_mut() else {
            return;
        };
        let partial = Bytes::copy_from_slice(conn.unconsumed());
        let Some(r) = conn.repl.as_mut() else {
            return;
        };
        let (inb, outb) = r.during_snapshot.take().unwrap_or_default();
        let (Some((mut adj_in, mut adj_out)), Some(key)) = (tables, r.key.clone()) else {
            return;
        };
        adj_in.extend_from_slice(&inb);
        adj_out.extend_from_slice(&outb);
        let size = (adj_in.len() + adj_out.len()) as u64;
        let gen = if resync { r.nsr.gen() } else { r.synced_gen };
        if resync {
            let Some(record) = record else { return };
            r.nsr.submit(
                &key,
                Some(Op::Session {
                    key: key.clone(),
                    record,
                }),
                gen,
                Then::Nothing,
            );
            // What the peer has not acknowledged yet, written before the
            // outage or during it, becomes the send tail again (the
            // snapshot that follows replaces its copy in the Adj-RIB-Out
            // log).
            if let Some(op) = r.unacked.op(&key) {
                r.nsr.submit(&key, Some(op), gen, Then::Nothing);
            }
        }
        let op = Op::Snapshot {
            key: key.clone(),
            adj_in: Bytes::from(adj_in),
            adj_out: Bytes::from(adj_out),
        };
        r.nsr.submit(&key, Some(op), gen, Then::Nothing);
        if resync {
            // The record's sequence is at a message boundary; what follows
            // it in the receive buffer is replicated as well.
            r.covered = r.consumed + partial.len() as u64;
            let ack = r.rcv_next().wrapping_add(partial.len() as u32);
            let op = Op::Received {
                key: key.clone(),
                ack,
                updates: Bytes::new(),
                partial,
            };
            r.nsr.submit(&key, Some(op), gen, Then::Nothing);
        }
        r.synced_gen = gen;
        r.log_bytes = 0;
        r.logs_unread = None;
        r.nsr.figures(&key, |f| {
            f.synced_gen = gen;
            f.log_bytes = 0;
        });
        self.compact_at = r.nsr.shared.compact_bytes.max(2 * size);
        tracing::info!(
            resync,
            bytes = size,
            "NSR: session tables snapshotted into the store"
        );
        if resync {
            // Written anew, the session lost its pending requests.
            let pending = self.core.pending_refreshes();
            if !pending.is_empty() {
                self.replicate_refresh(&pending);
            }
        }
    }

    /// Takeover: the session continues on a connection rebuilt with
    /// TCP_REPAIR, in Established, without a new OPEN exchange. The core
    /// releases the RIB output it held meanwhile after its first KEEPALIVE,
    /// then asks the RIB for the requests the old primary had not answered.
    pub(super) fn resume(&mut self, r: Resumed) {
        let Resumed {
            stream,
            repl,
            outbound,
            local_open,
            remote_open,
            partial,
            refresh,
        } = r;
        let conn = Conn::with_repl(stream, outbound, Some(*repl)).and_then(|mut c| {
            c.prefill(&partial);
            // The restored socket is still in repair mode; leaving it
            // sends the window probe the peer answers (the takeover lifted
            // the guard before telling any session to resume; a lost answer
            // is probed again, `Reprobe`).
            c.window_probe().map(|()| c)
        });
        match conn {
            Ok(conn) => {
                self.pending = Some(conn);
                self.input(PeerInput::Resume {
                    local_open,
                    remote_open,
                    refresh: decode_refreshes(&refresh),
                });
                self.pending = None;
            }
            Err(e) => {
                tracing::error!(error = %e, "restored connection unusable; starting afresh");
                self.input(PeerInput::AbortResume);
            }
        }
    }

    /// Probes a resumed connection again, through the gate, while the peer
    /// has acknowledged nothing since the resume ([`Reprobe`]).
    pub(super) fn reprobe_due(&mut self) {
        let Some(r) = self.reprobe.take() else {
            return;
        };
        let (Some(conn), Some(nsr)) = (self.main.as_ref(), self.nsr.as_ref()) else {
            return;
        };
        let Some(ckey) = conn.repl.as_ref().map(|r| r.ckey) else {
            return;
        };
        let (next, probe) = r.tick(now(), || conn.last_ack_recv_ms());
        self.reprobe = next;
        if let Some(next) = self.reprobe.as_ref().filter(|_| probe) {
            tracing::info!(
                probes = next.sent,
                "NSR: no ACK from the peer since the resume; the gate probes again"
            );
            nsr.gate.probe(&ckey, next.seq);
        }
    }

    /// The core resumed the session on the restored connection.
    pub(super) fn resumed(&mut self) {
        // The restored send queue starts one byte below the stored
        // acknowledged point (nothing is trimmed or sent yet), and the
        // socket's own probe one below that.
        self.reprobe = self
            .main
            .as_ref()
            .and_then(|c| c.repl.as_ref())
            .map(|r| Reprobe::new(now(), r.unacked.base(r.snd_next()).wrapping_sub(2)));
        self.compact_at = self
            .nsr
            .as_ref()
            .map_or(u64::MAX, |n| n.shared.compact_bytes);
        let local = self.main.as_ref().map(|c| c.local);
        if let Ok(mut st) = self.status.lock() {
            st.established_at = Some(Instant::now());
            st.local = local;
        }
        tracing::info!("NSR: session resumed on the restored connection");
    }
}

/// Pending ROUTE-REFRESH requests as stored: whole messages (normal
/// requests, RFC 2918), oldest first.
pub(crate) fn encode_refreshes(families: impl Iterator<Item = Family>) -> Bytes {
    let mut buf = Vec::new();
    for family in families {
        encode_route_refresh(&RouteRefresh { family, subtype: 0 }, &mut buf);
    }
    Bytes::from(buf)
}

/// The families of stored ROUTE-REFRESH requests; anything else in the
/// buffer (or an unreadable request) is skipped with a warning.
pub(crate) fn decode_refreshes(buf: &[u8]) -> Vec<Family> {
    let mut out = Vec::new();
    for (ty, body) in crate::tables::messages(buf) {
        match (ty, decode_route_refresh(body)) {
            (msg_type::ROUTE_REFRESH, Ok(rr)) => out.push(rr.family),
            _ => tracing::warn!(
                msg_type = ty,
                "NSR: a stored pending ROUTE-REFRESH is unreadable; skipped"
            ),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reprobes_until_the_peer_answers_then_stops() {
        let ms = Duration::from_millis;
        let r = Reprobe::new(ms(1000), 48);
        assert_eq!(r.due, ms(1550));
        // The timer fires for another deadline first: the schedule stays,
        // and TCP_INFO is not read.
        let (kept, probe) = r.clone().tick(ms(1100), || unreachable!("not due"));
        assert_eq!((kept.as_ref(), probe), (Some(&r), false));
        // Due: probe, and keep the next schedule.
        let (next, probe) = r.clone().tick(ms(1550), || Some(5000));
        assert!(probe);
        assert_eq!(next.as_ref().map(|n| (n.sent, n.due)), Some((1, ms(2650))));
        // Due but answered: no probe, nothing kept.
        assert_eq!(r.clone().tick(ms(1550), || Some(100)), (None, false));
        // No ACK since the resume (the last one is older): probe again,
        // then wait twice as long each time.
        let r = r.step(ms(1550), Some(5000)).expect("again");
        assert_eq!((r.sent, r.due, r.seq), (1, ms(2650), 48));
        let r = r.step(ms(2650), None).expect("again");
        assert_eq!((r.sent, r.due), (2, ms(4850)));
        // An ACK 100 ms ago, after the resume: answered.
        assert_eq!(r.step(ms(4850), Some(100)), None);
        // Never answered: four more probes, then it stops.
        let mut r = Reprobe::new(ms(0), 48);
        for _ in 0..REPROBES {
            r = r.step(r.due, Some(60_000)).expect("again");
        }
        assert_eq!(r.step(r.due, Some(60_000)), None);
    }

    #[test]
    fn pending_refreshes_round_trip() {
        let families = [
            Family::IPV4_UNICAST,
            Family::IPV6_UNICAST,
            Family::IPV4_UNICAST,
        ];
        let buf = encode_refreshes(families.iter().copied());
        assert_eq!(buf.len(), 3 * 23, "three 23-byte ROUTE-REFRESH messages");
        assert_eq!(decode_refreshes(&buf), families.to_vec());
        assert!(decode_refreshes(&[]).is_empty());
        assert!(encode_refreshes(std::iter::empty()).is_empty());
    }

    #[test]
    fn a_stored_message_of_another_type_is_skipped() {
        let mut buf = Vec::new();
        holdfast_wire::encode_keepalive(&mut buf);
        buf.extend_from_slice(&encode_refreshes(std::iter::once(Family::IPV6_UNICAST)));
        assert_eq!(decode_refreshes(&buf), vec![Family::IPV6_UNICAST]);
    }
}
