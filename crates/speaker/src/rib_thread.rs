//! The route-processing side of one routing instance.
//!
//! Each instance (VRF) owns a `holdfast_rib::Engine` on a thread of its own,
//! away from the I/O thread that runs sessions and timers, so that KEEPALIVEs
//! and hold timers never wait behind route processing (TENSOR §3.1.2 keeps
//! them on their own thread for the same reason). The engine parallelises
//! internally: per-peer decoding (PBTS) and per-shard decisions.
//!
//! The thread drains every command that is already queued and merges runs
//! of UPDATEs into one batch, so that work is amortised under load and a
//! lone UPDATE is still processed at once.
//!
//! With `[kernel]`, after each command it hands the instance's FIB thread
//! the forwarding entries that changed (`Engine::take_fib`). A reload's
//! FIB commands (`FibStart`, `FibReconfigure`, `FibStop`) come through it
//! too, so they are ordered with those entries.
//!
//! BMP: while a connected collector monitors the post-policy Adj-RIB-In or
//! the Loc-RIB (RFC 7854, RFC 9069), after each command it hands the BMP
//! hub the post-policy changes (`Engine::take_post_changes`) and the
//! best-path changes, never waiting (the hub drops into a full queue and
//! that collector starts again). Otherwise the engine notes nothing.
//!
//! For non-stop routing it rebuilds the tables of sessions taken over
//! (`RibCmd::Resume`: it first waits for their logs, read while the
//! sessions resume, `nsr::PendingLogs`; the commands behind it wait too)
//! and, in a preheated standby, builds them ahead of the takeover
//! (`RibCmd::Preheat`, `RibCmd::Prepare`).
//!
//! # Known issues
//! - A command is processed whole before the next: a takeover's
//!   `RibCmd::Resume` waits behind a standby's `RibCmd::Prepare` in
//!   progress (a quarter of a second at 1M routes). Likewise a session's
//!   `RibCmd::Snapshot` (log compaction) holds up UPDATEs while it is
//!   encoded: about 0.2 s for 1M routes received.
//! - The prepared comparison is dropped by any command that may change the
//!   tables, including ones that cannot change a preheated session's
//!   Adj-RIB-Out (a neighbour added without a stored session, say): the
//!   takeover then compares again.

use crate::msg::fib::{FibCmd, FibHandle};
use crate::msg::peer::PeerCmd;
use crate::msg::rib::{
    BestBatch, Mailboxes, Preheat, QueryResult, ResumePeer, ResumeReport, RibCmd, RibHandle,
    RibQuery, Snapshot, ToPeer,
};
use crate::obs::Metrics;
use crate::tables;
use holdfast_rib::{Engine, Output, PeerId};
use holdfast_wire::{PathAttrs, Prefix};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;
use tokio::sync::mpsc;

/// Most UPDATE bodies merged into one engine batch.
const MAX_BATCH_MSGS: usize = 4096;
/// Most UPDATE bytes merged into one engine batch: small enough that the
/// first routes go out while later ones are still arriving (a bulk load is
/// pipelined instead of processed as one block), large enough to amortise
/// the per-batch work and keep the worker pool busy.
const MAX_BATCH_BYTES: usize = 512 * 1024;

/// Whether a log whose session set, replaced or removed routes `changes`
/// times while holding `routes` now is worth compacting at `min_ratio`:
/// a log of fresh routes (about as many changes as routes) is not, since
/// the snapshot would be about as large as the log.
pub fn worth_compacting(changes: u64, routes: u64, min_ratio: f64) -> bool {
    changes as f64 >= min_ratio * routes as f64
}

/// Starts the RIB thread of instance `name`.
pub fn spawn(
    name: String,
    engine: Engine,
    mailboxes: Mailboxes,
    metrics: Arc<Metrics>,
    fib: Option<FibHandle>,
) -> RibHandle {
    let (handle, rx) = RibHandle::channel();
    let thread_name = format!("rib-{name}");
    let stamp = crate::watchdog::register(&thread_name, crate::watchdog::RIB_BUDGET);
    std::thread::Builder::new()
        .name(thread_name)
        .spawn(move || {
            RibThread {
                stamp,
                name,
                engine,
                rx,
                mailboxes,
                metrics,
                gens: HashMap::new(),
                preheated: HashMap::new(),
                prepared: None,
                watchers: Vec::new(),
                bmp: None,
                bmp_post: false,
                bmp_loc: false,
                fib,
                fib_buf: Vec::new(),
                held: std::collections::VecDeque::new(),
            }
            .run()
        })
        .expect("spawning the RIB thread");
    handle
}

struct RibThread {
    /// Progress for the process's watchdog (idle while waiting).
    stamp: holdfast_linux::progress::Stamp,
    name: String,
    engine: Engine,
    rx: mpsc::UnboundedReceiver<RibCmd>,
    mailboxes: Mailboxes,
    metrics: Arc<Metrics>,
    /// Current session generation per peer, stamped on outgoing messages so
    /// that output computed for an old session never reaches a new one.
    gens: HashMap<PeerId, u64>,
    /// Standby: sessions whose tables are built ahead of a takeover, with
    /// what each peer holds from us (its Adj-RIB-Out log replayed, sorted).
    preheated: HashMap<PeerId, Vec<(Prefix, Arc<PathAttrs>)>>,
    /// Standby: per preheated session, the prefixes on which its
    /// Adj-RIB-Out and what its peer holds differ, computed by
    /// `RibCmd::Prepare`; dropped by anything that may change the tables.
    prepared: Option<HashMap<PeerId, Vec<Prefix>>>,
    /// `RibCmd::WatchBest` subscribers; the engine notes best-path changes
    /// only while there is one.
    watchers: Vec<mpsc::Sender<Arc<BestBatch>>>,
    /// The BMP hub, once the daemon handed it over.
    bmp: Option<crate::msg::bmp::BmpHub>,
    /// The engine notes post-policy changes for BMP.
    bmp_post: bool,
    /// Best-path changes go to BMP (the engine notes them).
    bmp_loc: bool,
    /// The instance's kernel FIB, if `[kernel]`: it gets the forwarding
    /// entries each command changed (never waited for).
    fib: Option<FibHandle>,
    fib_buf: Vec<holdfast_rib::FibRoute>,
    /// Commands held by `RibCmd::RpkiAwait`, handled first once it ends.
    held: std::collections::VecDeque<RibCmd>,
}

impl RibThread {
    /// `RibCmd::RpkiAwait`: applies the first `Rpki` to arrive before
    /// `until`, holding every other command meanwhile (in order).
    fn await_rpki(&mut self, until: Instant) {
        if self.engine.vrps().is_some() {
            tracing::info!(
                instance = %self.name,
                waited_ms = 0u64,
                held = self.held.len(),
                "RPKI: VRPs received after the takeover (before the rebuild asked for them)"
            );
            return;
        }
        let started = Instant::now();
        loop {
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                tracing::warn!(
                    instance = %self.name,
                    held = self.held.len(),
                    "RPKI: no cache answered in time after the takeover: routes are validated without VRPs (not-found) until one does"
                );
                return;
            }
            match self.rx.try_recv() {
                Ok(cmd @ RibCmd::Rpki { .. }) => {
                    tracing::info!(
                        instance = %self.name,
                        waited_ms = started.elapsed().as_millis() as u64,
                        held = self.held.len(),
                        "RPKI: VRPs received after the takeover"
                    );
                    self.handle(cmd);
                    return;
                }
                Ok(cmd) => self.held.push_back(cmd),
                Err(mpsc::error::TryRecvError::Disconnected) => return,
                Err(mpsc::error::TryRecvError::Empty) => {
                    std::thread::sleep(left.min(std::time::Duration::from_millis(5)));
                }
            }
        }
    }

    fn run(mut self) {
        let mut pending: Option<RibCmd> = None;
        loop {
            let cmd = match pending.take() {
                Some(c) => c,
                None => match self.held.pop_front() {
                    Some(c) => c,
                    None => {
                        self.stamp.idle();
                        let next = self.rx.blocking_recv();
                        self.stamp.busy();
                        match next {
                            Some(c) => c,
                            None => return,
                        }
                    }
                },
            };
            match cmd {
                RibCmd::Updates { peer, bodies } => {
                    let mut bytes: usize = bodies.iter().map(Vec::len).sum();
                    let mut batch: Vec<(PeerId, Vec<u8>)> =
                        bodies.into_iter().map(|b| (peer, b)).collect();
                    while batch.len() < MAX_BATCH_MSGS && bytes < MAX_BATCH_BYTES {
                        let next = match self.held.pop_front() {
                            Some(c) => Ok(c),
                            None => self.rx.try_recv(),
                        };
                        match next {
                            Ok(RibCmd::Updates { peer, bodies }) => {
                                bytes += bodies.iter().map(Vec::len).sum::<usize>();
                                batch.extend(bodies.into_iter().map(|b| (peer, b)))
                            }
                            Ok(other) => {
                                pending = Some(other);
                                break;
                            }
                            Err(_) => break,
                        }
                    }
                    let n = batch.len();
                    let started = Instant::now();
                    if self.prepared.take().is_some() {
                        tracing::info!(
                            instance = %self.name,
                            "NSR: the comparison prepared while standby is dropped (UPDATEs applied)"
                        );
                    }
                    let out = self.engine.apply_raw(batch);
                    self.metrics
                        .rib_batch(&self.name, n, started.elapsed(), out.timing);
                    self.dispatch(out);
                }
                other => self.handle(other),
            }
            if self.bmp.is_some() {
                self.publish_bmp();
            }
            if !self.watchers.is_empty() || self.bmp_loc {
                self.publish_best();
            }
            self.flush_fib();
        }
    }

    /// Hands the FIB thread the forwarding entries that changed.
    fn flush_fib(&mut self) {
        let Some(fib) = &self.fib else { return };
        self.engine.take_fib(&mut self.fib_buf);
        if !self.fib_buf.is_empty() {
            fib.send(FibCmd::Routes(std::mem::take(&mut self.fib_buf)));
        }
    }

    /// Follows the BMP collectors' wishes (post-policy, Loc-RIB watching on
    /// or off) and hands the hub the post-policy changes of the last
    /// command.
    fn publish_bmp(&mut self) {
        let Some(hub) = &self.bmp else { return };
        let (post, loc) = (hub.wants_post_policy(), hub.wants_loc_rib());
        if post != self.bmp_post {
            self.bmp_post = post;
            self.engine.set_watch_post(post);
        }
        if loc != self.bmp_loc {
            self.bmp_loc = loc;
            // On from here; off once no gRPC subscriber needs it either.
            if loc || self.watchers.is_empty() {
                self.engine.set_watch_best(loc);
            }
        }
        if post {
            let changes = self.engine.take_post_changes();
            if !changes.is_empty() {
                hub.post_policy(&self.name, changes);
            }
        }
    }

    /// Offers the best-path changes of the last command to every
    /// subscriber and to BMP, never waiting: a full channel drops its
    /// subscriber.
    fn publish_best(&mut self) {
        let changes = self.engine.take_best_changes();
        if changes.is_empty() {
            return;
        }
        let engine = &self.engine;
        let batch: BestBatch = changes
            .into_iter()
            .map(|(p, b)| {
                let b = b.map(|(peer, a)| {
                    let from = (peer != holdfast_rib::LOCAL_PEER)
                        .then(|| engine.peer_address(peer))
                        .flatten();
                    (from, a)
                });
                (p, b)
            })
            .collect();
        let batch = Arc::new(batch);
        if let (true, Some(hub)) = (self.bmp_loc, &self.bmp) {
            hub.loc_rib(&self.name, &batch);
        }
        let name = &self.name;
        self.watchers.retain(|w| match w.try_send(batch.clone()) {
            Ok(()) => true,
            Err(mpsc::error::TrySendError::Full(_)) => {
                tracing::warn!(instance = %name, "best-path subscriber too slow: dropped (its stream ends)");
                false
            }
            Err(mpsc::error::TrySendError::Closed(_)) => {
                tracing::debug!(instance = %name, "best-path subscriber gone");
                false
            }
        });
        if self.watchers.is_empty() && !self.bmp_loc {
            self.engine.set_watch_best(false);
        }
    }

    fn handle(&mut self, cmd: RibCmd) {
        let unchanged = match &cmd {
            RibCmd::Query(..)
            | RibCmd::Snapshot { .. }
            | RibCmd::Resume { .. }
            | RibCmd::Prepare(_)
            | RibCmd::Applied(_)
            | RibCmd::WatchBest(_)
            | RibCmd::Bmp(_)
            | RibCmd::FibActivate { .. }
            | RibCmd::FibStart { .. }
            | RibCmd::FibReconfigure { .. }
            | RibCmd::FibStop { .. }
            | RibCmd::RpkiAwait { .. } => true,
            // Skipped below: the session is preheated.
            RibCmd::AddPeer(spec) => self.preheated.contains_key(&spec.id),
            // More of the logs of sessions already preheated, with no UPDATE
            // in them (the primary's KEEPALIVEs, say): nothing changes.
            RibCmd::Preheat(p) => self.continues_without_updates(p),
            _ => false,
        };
        if !unchanged && self.prepared.take().is_some() {
            // The tables may change: a comparison made before is stale.
            tracing::info!(
                instance = %self.name,
                command = cmd.name(),
                "NSR: the comparison prepared while standby is dropped (the tables may change)"
            );
        }
        let out = match cmd {
            RibCmd::AddPeer(spec) => {
                // A preheated session is in the engine already, up, with
                // its negotiated spec.
                if !self.preheated.contains_key(&spec.id) {
                    self.engine.add_peer(spec);
                }
                return;
            }
            RibCmd::RemovePeer(p) => {
                self.gens.remove(&p);
                self.engine.remove_peer(p)
            }
            RibCmd::PeerUp { spec, gen } => {
                self.gens.insert(spec.id, gen);
                self.engine.peer_up(spec)
            }
            RibCmd::PeerDown { peer, graceful } => self.engine.peer_down(peer, graceful),
            RibCmd::StaleTimeout(p) => self.engine.stale_timeout(p),
            RibCmd::Updates { .. } => unreachable!("batched in run()"),
            RibCmd::RouteRefresh { peer, family } => {
                let out = self.engine.route_refresh(peer, family);
                self.dispatch(out);
                let boxes = self.mailboxes.read().expect("mailboxes");
                if let (Some(tx), Some(gen)) = (boxes.get(&peer), self.gens.get(&peer)) {
                    let _ = tx.send(PeerCmd::Rib(ToPeer::Refreshed { gen: *gen }));
                }
                return;
            }
            RibCmd::SetPolicies {
                peer,
                import,
                export,
            } => self.engine.set_policies(peer, import, export),
            RibCmd::Originate(routes) => self.engine.originate(routes),
            RibCmd::WithdrawOriginated(p) => self.engine.withdraw_originated(p),
            RibCmd::Query(q, reply) => {
                let _ = reply.send(self.query(q));
                return;
            }
            RibCmd::Rpki { table, changed } => {
                let started = Instant::now();
                let out = self.engine.set_vrps(table, &changed);
                self.metrics.rpki.revalidated(
                    &self.name,
                    changed.len(),
                    started.elapsed(),
                    self.engine.rpki_counts(),
                );
                out
            }
            RibCmd::RpkiAwait { until } => {
                self.await_rpki(until);
                return;
            }
            RibCmd::Snapshot {
                peer,
                ctx,
                min_ratio,
                reply,
            } => {
                if let Some(r) = min_ratio {
                    let changes = self.engine.route_changes(peer);
                    let c = self.engine.counts(peer);
                    let routes = c.received + c.advertised;
                    if !worth_compacting(changes, routes, r) {
                        let _ = reply.send(Snapshot::NotWorth { changes, routes });
                        return;
                    }
                }
                self.engine.reset_route_changes(peer);
                let mut adj_in = Vec::new();
                self.engine.visit_adj_rib_in_groups(peer, |a, prefixes| {
                    tables::encode_group(a, prefixes, &ctx, &mut adj_in)
                });
                let mut adj_out = Vec::new();
                self.engine.visit_adj_rib_out_groups(peer, |a, prefixes| {
                    tables::encode_group(a, prefixes, &ctx, &mut adj_out)
                });
                let _ = reply.send(Snapshot::Tables(adj_in, adj_out));
                return;
            }
            RibCmd::Resume {
                mut peers,
                logs,
                reply,
            } => {
                if let Some(logs) = logs {
                    match logs.take(peers.iter().map(|p| p.key.as_str())) {
                        Ok(mut read) => {
                            for p in &mut peers {
                                let c = read.remove(&p.key).unwrap_or_default();
                                p.adj_in.extend(c.adj_in);
                                p.adj_out.extend(c.adj_out);
                            }
                        }
                        Err(e) => {
                            let _ = reply.send(Err(e));
                            return;
                        }
                    }
                }
                let report = self.resume(peers);
                let _ = reply.send(Ok(report));
                return;
            }
            RibCmd::Preheat(p) => {
                self.preheat(p);
                return;
            }
            RibCmd::Applied(done) => {
                let _ = done.send(());
                return;
            }
            RibCmd::Prepare(done) => {
                // Compared already, and nothing changed since.
                if self.prepared.is_none() {
                    self.prepare();
                }
                let _ = done.send(());
                return;
            }
            RibCmd::WatchBest(tx) => {
                // Changes noted before this subscriber came are not its.
                if self.watchers.is_empty() {
                    self.engine.set_watch_best(true);
                }
                self.watchers.push(tx);
                return;
            }
            RibCmd::Bmp(hub) => {
                self.bmp = Some(hub);
                return;
            }
            RibCmd::FibActivate { hold } => {
                self.flush_fib();
                if let Some(f) = &self.fib {
                    f.send(FibCmd::Activate { hold });
                }
                return;
            }
            RibCmd::FibStart { fib, ecmp } => {
                self.engine.set_fib_ecmp(ecmp);
                let mut all = Vec::new();
                self.engine.fib_all(&mut all);
                fib.send(FibCmd::Routes(all));
                fib.send(FibCmd::Activate {
                    hold: std::time::Duration::ZERO,
                });
                self.fib = Some(fib);
                return;
            }
            RibCmd::FibReconfigure { cfg, persist } => {
                // What the old settings computed goes first.
                self.flush_fib();
                let Some(f) = &self.fib else { return };
                let ecmp = cfg.ecmp;
                f.send(FibCmd::Reconfigure { cfg, persist });
                if ecmp != self.engine.fib_ecmp() {
                    self.engine.set_fib_ecmp(ecmp);
                    let mut all = Vec::new();
                    self.engine.fib_all(&mut all);
                    f.send(FibCmd::Routes(all));
                }
                return;
            }
            RibCmd::FibStop { withdraw, done } => {
                self.flush_fib();
                self.engine.set_fib_ecmp(0);
                match self.fib.take() {
                    Some(f) => f.send(FibCmd::Stop { withdraw, done }),
                    None => drop(done.send(())),
                }
                return;
            }
        };
        self.dispatch(out);
    }

    /// Takeover: the sessions are up again in the engine, their received
    /// routes applied, and the decision process run; output computed on
    /// the way is not sent (the peers already have it or something close).
    /// Then each peer gets exactly the difference between what it holds
    /// from us (the replayed Adj-RIB-Out log) and what we now advertise.
    ///
    /// A session a standby preheated (`preheated`) is up already and its
    /// logs continue what was applied; the tables of any other preheated
    /// session (a cold fallback, or a session no longer stored) are
    /// dropped first, as if never built.
    fn resume(&mut self, peers: Vec<ResumePeer>) -> ResumeReport {
        let started = Instant::now();
        let mut report = ResumeReport::default();
        let mut held_before: HashMap<PeerId, Vec<(Prefix, Arc<PathAttrs>)>> = HashMap::new();
        for p in &peers {
            if p.preheated {
                if let Some(h) = self.preheated.remove(&p.spec.id) {
                    held_before.insert(p.spec.id, h);
                }
            }
        }
        let stale: Vec<PeerId> = self.preheated.keys().copied().collect();
        // The comparison prepared while standby still holds if the tables
        // are exactly as they were: every session resumed is preheated, none
        // is dropped, and nothing after the standby's position is an UPDATE.
        let updates = tables::has_update;
        let had_prepared = self.prepared.is_some();
        let mut prepared = self.prepared.take().filter(|_| {
            stale.is_empty()
                && peers.iter().all(|p| {
                    held_before.contains_key(&p.spec.id)
                        && !updates(&p.adj_in)
                        && !updates(&p.adj_out)
                })
        });
        if had_prepared && prepared.is_none() {
            let why: Vec<String> = peers
                .iter()
                .filter_map(|p| {
                    let mut r = Vec::new();
                    if !held_before.contains_key(&p.spec.id) {
                        r.push("not preheated");
                    }
                    if updates(&p.adj_in) {
                        r.push("UPDATEs received after the standby's position");
                    }
                    if updates(&p.adj_out) {
                        r.push("UPDATEs sent after the standby's position");
                    }
                    (!r.is_empty()).then(|| format!("{}: {}", p.spec.address, r.join(", ")))
                })
                .collect();
            tracing::info!(
                instance = %self.name,
                stale = stale.len(),
                why = %why.join("; "),
                "NSR: the comparison prepared while standby no longer holds; comparing again"
            );
        }
        self.unpreheat(&stale);
        for p in &peers {
            self.gens.insert(p.spec.id, p.gen);
            if !held_before.contains_key(&p.spec.id) {
                drop(self.engine.peer_up(p.spec.clone()));
            }
        }
        self.apply_logs(&peers);
        let applied = started.elapsed();
        let mut out = Output::default();
        // The images of what each peer held, freed once the sessions run.
        let mut spent = Vec::with_capacity(peers.len());
        for p in &peers {
            let t = Instant::now();
            let before = held_before.remove(&p.spec.id).unwrap_or_default();
            let held = tables::replay_onto(before, &p.adj_out, &p.ctx);
            let replayed = t.elapsed();
            let id = p.spec.id;
            let engine = &self.engine;
            let cached = prepared.as_mut().and_then(|c| c.remove(&id));
            let from_standby = cached.is_some();
            let (changed, wanted_len) = match cached {
                Some(changed) => (changed, engine.counts(id).advertised as usize),
                None => {
                    let fingerprints = engine.adj_rib_out_fingerprints(id);
                    let changed = tables::differing(&held, &fingerprints, |afi, a| {
                        engine.out_fingerprint(id, afi, a)
                    });
                    (changed, fingerprints.len())
                }
            };
            let computed = t.elapsed();
            let held_len = held.len();
            let (msgs, ann, wd) = if changed.is_empty() {
                spent.push(held);
                (Vec::new(), 0, 0)
            } else {
                // Only the prefixes that differ are encoded from the full
                // export.
                let wanted: Vec<(Prefix, Arc<PathAttrs>)> = engine
                    .adj_rib_out(id)
                    .into_iter()
                    .filter(|(p, _)| changed.binary_search(p).is_ok())
                    .collect();
                let (held, rest): (Vec<_>, Vec<_>) = held
                    .into_iter()
                    .partition(|(p, _)| changed.binary_search(p).is_ok());
                spent.push(rest);
                tables::diff(&held, &wanted, &p.ctx)
            };
            report.announced += ann;
            report.withdrawn += wd;
            report.compared_while_standby += usize::from(from_standby);
            report.routes_in += self.engine.counts(p.spec.id).received as usize;
            tracing::info!(
                instance = %self.name,
                peer = %p.spec.address,
                held = held_len,
                wanted = wanted_len,
                announced = ann,
                withdrawn = wd,
                preheated = p.preheated,
                compared_while_standby = from_standby,
                applied_ms = applied.as_millis() as u64,
                replay_ms = replayed.as_millis() as u64,
                adj_out_ms = (computed - replayed).as_millis() as u64,
                diff_ms = (t.elapsed() - computed).as_millis() as u64,
                "NSR: tables rebuilt; sending the peer only the difference"
            );
            if !msgs.is_empty() {
                out.messages.push((p.spec.id, Arc::new(msgs)));
            }
        }
        self.dispatch(out);
        drop_when_idle(spent);
        report.micros = started.elapsed().as_micros() as u64;
        report
    }

    /// The UPDATEs of the sessions' Adj-RIB-In logs, applied in batches;
    /// the output is not sent (the peers have it, or the diff sends it).
    fn apply_logs(&mut self, peers: &[ResumePeer]) {
        let mut batch: Vec<(PeerId, Vec<u8>)> = Vec::new();
        let mut bytes = 0;
        for p in peers {
            for chunk in &p.adj_in {
                for (ty, body) in tables::messages(chunk) {
                    if ty != holdfast_wire::msg_type::UPDATE {
                        continue;
                    }
                    bytes += body.len();
                    batch.push((p.spec.id, body.to_vec()));
                    if batch.len() >= MAX_BATCH_MSGS || bytes >= MAX_BATCH_BYTES {
                        drop(self.engine.apply_raw(std::mem::take(&mut batch)));
                        bytes = 0;
                    }
                }
            }
        }
        if !batch.is_empty() {
            drop(self.engine.apply_raw(batch));
        }
    }

    /// Standby: the sessions' tables built (or continued) from their logs,
    /// as [`RibThread::resume`] would build them; nothing is sent (no
    /// session generation is set, so no output has a mailbox).
    fn preheat(&mut self, p: Preheat) {
        self.unpreheat(&p.gone);
        let mut logs = Vec::with_capacity(p.peers.len());
        for peer in p.peers {
            let id = peer.resume.spec.id;
            if peer.restart || !self.preheated.contains_key(&id) {
                self.unpreheat(&[id]);
                self.engine.add_peer(peer.configured);
                drop(self.engine.peer_up(peer.resume.spec.clone()));
                self.preheated.insert(id, Vec::new());
            }
            logs.push(peer.resume);
        }
        self.apply_logs(&logs);
        for r in &logs {
            if r.adj_out.is_empty() {
                continue;
            }
            if let Some(held) = self.preheated.get_mut(&r.spec.id) {
                *held = tables::replay_onto(std::mem::take(held), &r.adj_out, &r.ctx);
            }
        }
    }

    /// Whether `p` only continues the logs of sessions already preheated,
    /// with no UPDATE in them: it changes neither the tables nor what the
    /// peers hold, so a comparison prepared before still holds.
    fn continues_without_updates(&self, p: &Preheat) -> bool {
        p.gone.is_empty()
            && p.peers
                .iter()
                .all(|x| !x.restart && self.preheated.contains_key(&x.resume.spec.id) && !x.updates)
    }

    /// Standby: the comparison `resume` would make for every preheated
    /// session, made now (see `RibCmd::Prepare`).
    fn prepare(&mut self) {
        let started = Instant::now();
        let engine = &self.engine;
        let prepared: HashMap<PeerId, Vec<Prefix>> = self
            .preheated
            .iter()
            .map(|(id, held)| {
                let id = *id;
                let fingerprints = engine.adj_rib_out_fingerprints(id);
                let changed = tables::differing(held, &fingerprints, |afi, a| {
                    engine.out_fingerprint(id, afi, a)
                });
                (id, changed)
            })
            .collect();
        tracing::info!(
            instance = %self.name,
            sessions = prepared.len(),
            differing = prepared.values().map(Vec::len).sum::<usize>(),
            ms = started.elapsed().as_millis() as u64,
            "NSR standby: Adj-RIB-Out compared with what the peers hold"
        );
        self.prepared = Some(prepared);
    }

    /// Drops the preheated tables of `ids` (the sessions go down in the
    /// engine; the output is not sent).
    fn unpreheat(&mut self, ids: &[PeerId]) {
        for id in ids {
            if self.preheated.remove(id).is_some() {
                drop(self.engine.peer_down(*id, false));
            }
        }
    }

    fn query(&self, q: RibQuery) -> QueryResult {
        let tag = |peer: PeerId, v: Vec<(Prefix, Arc<PathAttrs>)>| {
            v.into_iter()
                .map(|(p, a)| (p, peer, a, false))
                .collect::<Vec<_>>()
        };
        match q {
            RibQuery::AdjIn(p) => QueryResult::Routes(tag(p, self.engine.adj_rib_in(p))),
            RibQuery::AdjInPost(p) => QueryResult::Routes(tag(p, self.engine.adj_rib_in_post(p))),
            RibQuery::AdjOut(p) => QueryResult::Routes(tag(p, self.engine.adj_rib_out(p))),
            RibQuery::Loc => QueryResult::Routes(
                self.engine
                    .loc_rib()
                    .into_iter()
                    .map(|(p, peer, a)| (p, peer, a, true))
                    .collect(),
            ),
            RibQuery::Lookup(prefix) => QueryResult::Routes(
                self.engine
                    .lookup(&prefix)
                    .into_iter()
                    .map(|(peer, a, best)| (prefix, peer, a, best))
                    .collect(),
            ),
            RibQuery::Counts => {
                let ids: Vec<PeerId> = self
                    .mailboxes
                    .read()
                    .expect("mailboxes")
                    .keys()
                    .copied()
                    .collect();
                let peers = ids
                    .into_iter()
                    .map(|p| (p, self.engine.counts(p)))
                    .collect();
                QueryResult::Counts {
                    loc_rib: self.engine.loc_rib_len(),
                    attr_sets: self.engine.attr_sets(),
                    peers,
                }
            }
            RibQuery::Rpki => QueryResult::Rpki(self.engine.rpki_counts()),
            RibQuery::Validity(routes) => QueryResult::Validity(
                routes
                    .iter()
                    .map(|(peer, p)| self.engine.route_validity(*peer, p))
                    .collect(),
            ),
        }
    }

    fn dispatch(&mut self, out: Output) {
        for (peer, text) in &out.warnings {
            tracing::warn!(instance = %self.name, peer, "{text}");
        }
        if out.messages.is_empty() && out.resets.is_empty() {
            return;
        }
        let boxes = self.mailboxes.read().expect("mailboxes");
        for (peer, bytes) in out.messages {
            if let (Some(tx), Some(gen)) = (boxes.get(&peer), self.gens.get(&peer)) {
                let _ = tx.send(PeerCmd::Rib(ToPeer::Send { gen: *gen, bytes }));
            }
        }
        for (peer, notification) in out.resets {
            if let (Some(tx), Some(gen)) = (boxes.get(&peer), self.gens.get(&peer)) {
                let _ = tx.send(PeerCmd::Rib(ToPeer::Reset {
                    gen: *gen,
                    notification,
                }));
            }
        }
    }
}

/// Frees the images of what the peers held on a thread of its own in
/// `SCHED_IDLE`, or here if they hold nothing or no thread can be started.
/// After a takeover they would otherwise hold a CPU while the sessions
/// resume (a million routes for a full-table peer, some 80 ms to free).
fn drop_when_idle(v: Vec<Vec<(Prefix, Arc<PathAttrs>)>>) {
    if v.iter().all(Vec::is_empty) {
        return;
    }
    let spawned = std::thread::Builder::new()
        .name("rib-free".into())
        .spawn(move || {
            if let Err(e) = holdfast_linux::sched::set_thread_idle() {
                tracing::debug!(error = %e, "freeing at normal priority");
            }
            drop(v);
        });
    if let Err(e) = spawned {
        tracing::warn!(error = %e, "no thread to free the held tables on: freeing them here");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use holdfast_rib::EngineConfig;
    use std::sync::RwLock;

    fn originate(rib: &RibHandle, prefix: &str) {
        let p: Prefix = prefix.parse().expect("prefix");
        rib.send(RibCmd::Originate(vec![(p, Arc::new(PathAttrs::default()))]));
    }

    /// A subscriber gets each command's best-path changes; one that does
    /// not read is dropped (its channel closed) instead of slowing the
    /// RIB thread.
    #[test]
    fn best_path_subscribers_and_a_slow_one_dropped() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("runtime");
        rt.block_on(async {
            let rib = spawn(
                "t".into(),
                Engine::new(EngineConfig::default()),
                Arc::new(RwLock::new(HashMap::new())),
                Arc::new(Metrics::new()),
                None,
            );
            let (tx, mut rx) = mpsc::channel(1);
            rib.send(RibCmd::WatchBest(tx));
            let (fast_tx, mut fast) = mpsc::channel(16);
            rib.send(RibCmd::WatchBest(fast_tx));
            originate(&rib, "10.9.0.0/24");
            originate(&rib, "10.9.1.0/24");
            rib.query(RibQuery::Counts).await.expect("answer");
            for want in ["10.9.0.0/24", "10.9.1.0/24"] {
                let b = fast.recv().await.expect("a batch");
                assert_eq!(b.len(), 1);
                assert_eq!(b[0].0.to_string(), want);
                assert!(matches!(&b[0].1, Some((None, _))), "ours: no neighbour");
            }
            let first = rx.recv().await.expect("the first batch");
            assert_eq!(first[0].0.to_string(), "10.9.0.0/24");
            assert!(
                rx.recv().await.is_none(),
                "dropped when its channel was full"
            );
            rib.send(RibCmd::WithdrawOriginated(vec!["10.9.0.0/24"
                .parse()
                .expect("prefix")]));
            let b = fast.recv().await.expect("the withdrawal");
            assert!(b[0].1.is_none(), "no best path any more");
        });
    }

    #[test]
    fn a_log_of_fresh_routes_is_not_worth_compacting() {
        // A bulk load: one change per route held.
        assert!(!worth_compacting(1_000_000, 1_000_000, 2.0));
        // Every route replaced once: half the log is dead.
        assert!(worth_compacting(2_000_000, 1_000_000, 2.0));
        // Everything withdrawn: nothing left to keep.
        assert!(worth_compacting(10, 0, 2.0));
        // 0: always.
        assert!(worth_compacting(0, 1_000_000, 0.0));
    }
}
