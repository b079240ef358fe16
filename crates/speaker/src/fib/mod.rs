//! The kernel FIB of one routing instance (`[kernel]`): its thread ("fib-
//! NAME") carries out what the pure [`core::Core`] decides, over two
//! `NETLINK_ROUTE` sockets (`holdfast_linux::rtnl`): one for the batched
//! writes and the dumps, one subscribed to route, link and address
//! notifications.
//!
//! The RIB thread hands it the forwarding entries that changed
//! (`holdfast_rib::Engine::take_fib`) through an unbounded channel and
//! never waits for it. Writes go in batches of up to [`BATCH`] messages in
//! one `sendmsg`; the kernel answers within the call, so the answers are
//! read at once (errors by sequence number, then the acknowledgement of
//! the batch's last message). Notifications are read between batches.
//!
//! Start-up and takeover: the thread holds (writes nothing, reads
//! nothing) until `FibCmd::Activate`, which the RIB thread forwards once
//! its tables are complete (a primary at once with `[kernel]`'s hold for
//! our routes left in the table; a takeover after the tables are rebuilt,
//! with no hold). Then it dumps the table, adopts ours, and writes only
//! the difference: a takeover on the same host writes nothing.
//!
//! Reload (SIGHUP): a `[kernel]` added starts a thread that is activated
//! at once with no hold (the tables are complete); one removed stops it
//! (`FibCmd::Stop`, our routes removed unless `persist`) without the
//! daemon waiting; a change is `FibCmd::Reconfigure`, which the core turns
//! into a new read of the table and writes under the new key
//! (`core::Core::reconfigure`). The notification filter follows the
//! protocols the core calls its own (a moved protocol's old routes too,
//! until they are gone).
//!
//! Metrics (`holdfast_fib_*`, crate::obs) come from the calls that log
//! each batch, dump and loss; the routes-by-state gauges are refreshed
//! every second when idle, every [`GAUGES_BUSY`] while writing (counting
//! walks every prefix).
//!
//! # Known issues
//! - A `[kernel]` removed and added back within one withdrawal (two
//!   reloads in quick succession): the new thread waits for the old one
//!   to finish (at most a minute), then reads the table.

pub mod core;

use std::io;
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use holdfast_api::{FibCounters, FibInfo, FibNextHop, FibRouteInfo};
use holdfast_linux::rtnl::codec::{
    self, messages, parse_route, AF_INET, AF_INET6, NLMSG_DONE, NLMSG_ERROR, RTM_DELADDR,
    RTM_DELLINK, RTM_DELROUTE, RTM_NEWADDR, RTM_NEWLINK, RTM_NEWNEXTHOP, RTM_NEWROUTE,
};
use holdfast_linux::rtnl::{RtnlSocket, GROUPS_FIB};

use self::core::Core;
use crate::msg::fib::{FibCmd, FibConfig, FibHandle};
use crate::obs::{FibRoutes, FibWrites, Metrics};

/// Route messages per `sendmsg` (about 80 bytes each).
const BATCH: usize = 4096;
/// How long the thread sleeps when idle before it reads notifications.
const IDLE: Duration = Duration::from_millis(20);
/// Dumps for a link or address change are at least this far apart.
const RESYNC_GAP: Duration = Duration::from_millis(200);
/// The routes-by-state gauges are refreshed this often when idle ...
const GAUGES_IDLE: Duration = Duration::from_secs(1);
/// ... and this often while routes are being written.
const GAUGES_BUSY: Duration = Duration::from_secs(10);

/// Starts the FIB thread of `instance`, holding until activated. With
/// `after` (the instance's previous FIB thread still removing its routes),
/// it first waits for that thread to end, at most a minute.
pub fn spawn(
    instance: String,
    cfg: FibConfig,
    persist: bool,
    metrics: Arc<Metrics>,
    after: Option<mpsc::Receiver<()>>,
) -> io::Result<FibHandle> {
    let write = RtnlSocket::open(0, false)?;
    write.set_buffers(32 << 20, 8 << 20);
    let monitor = RtnlSocket::open(GROUPS_FIB, true)?;
    monitor.set_buffers(64 << 20, 1 << 16);
    monitor.drop_routes_of_protocol(cfg.protocol)?;
    let filtered = vec![cfg.protocol];
    let (handle, rx) = FibHandle::channel();
    let stamp = crate::watchdog::register(&format!("fib-{instance}"), crate::watchdog::FIB_BUDGET);
    std::thread::Builder::new()
        .name(format!("fib-{instance}"))
        .spawn(move || {
            if let Some(rx) = after {
                stamp.idle();
                let _ = rx.recv_timeout(Duration::from_secs(60));
            }
            Shell {
                instance,
                core: Core::new(cfg),
                persist,
                write,
                monitor,
                rx,
                buf: vec![0u8; 1 << 20],
                out: Vec::with_capacity(BATCH * 96),
                seq: 1,
                last_dump: None,
                metrics,
                last_gauges: None,
                filtered,
                stamp,
            }
            .run()
        })?;
    Ok(handle)
}

struct Shell {
    instance: String,
    core: Core,
    persist: bool,
    write: RtnlSocket,
    monitor: RtnlSocket,
    rx: mpsc::Receiver<FibCmd>,
    buf: Vec<u8>,
    out: Vec<u8>,
    seq: u32,
    last_dump: Option<Instant>,
    metrics: Arc<Metrics>,
    last_gauges: Option<Instant>,
    /// The protocols the notification filter drops now.
    filtered: Vec<u8>,
    /// Progress for the process's watchdog (idle while waiting).
    stamp: holdfast_linux::progress::Stamp,
}

impl Shell {
    fn run(mut self) {
        tracing::info!(
            instance = %self.instance,
            table = self.core.config().table,
            protocol = self.core.config().protocol,
            "kernel FIB thread started (holding until the tables are complete)"
        );
        loop {
            let busy = self.core.has_work() || self.core.wants_dump();
            let cmd = if busy {
                self.rx
                    .try_recv()
                    .map_err(|e| e == mpsc::TryRecvError::Disconnected)
            } else {
                let now = Instant::now();
                let wait = self
                    .core
                    .next_wake()
                    .map_or(IDLE, |t| t.saturating_duration_since(now).min(IDLE));
                self.stamp.idle();
                let got = self
                    .rx
                    .recv_timeout(wait)
                    .map_err(|e| e == mpsc::RecvTimeoutError::Disconnected);
                self.stamp.busy();
                got
            };
            match cmd {
                Ok(c) => {
                    if !self.command(c) {
                        return;
                    }
                    // Take whatever else is queued before writing.
                    while let Ok(c) = self.rx.try_recv() {
                        if !self.command(c) {
                            return;
                        }
                    }
                }
                Err(true) => return,
                Err(false) => {}
            }
            self.read_notifications();
            self.core.tick(Instant::now());
            if self.core.wants_dump() {
                let due = !matches!(self.last_dump, Some(t) if t.elapsed() < RESYNC_GAP);
                if due {
                    self.dump();
                }
            }
            if self.core.has_work() {
                self.write_batch();
            }
            self.gauges();
        }
    }

    fn gauges(&mut self) {
        let gap = if self.core.has_work() {
            GAUGES_BUSY
        } else {
            GAUGES_IDLE
        };
        if matches!(self.last_gauges, Some(t) if t.elapsed() < gap) {
            return;
        }
        let now = Instant::now();
        self.last_gauges = Some(now);
        let (installed, pending, unresolved, failed, stale) = self.core.counts(now);
        self.metrics.fib_routes(
            &self.instance,
            FibRoutes {
                wanted: self.core.wanted() as u64,
                installed: installed as u64,
                pending: pending as u64,
                unresolved: unresolved as u64,
                failed: failed as u64,
                stale: stale as u64,
                old_key: self.core.old_key_routes() as u64,
            },
        );
    }

    /// Returns false when the thread must end.
    fn command(&mut self, c: FibCmd) -> bool {
        match c {
            FibCmd::Routes(r) => self.core.routes(r),
            FibCmd::Activate { hold } => {
                tracing::info!(
                    instance = %self.instance,
                    hold_secs = hold.as_secs(),
                    "kernel FIB: activated, reading the table"
                );
                self.core.activate(Instant::now(), hold)
            }
            FibCmd::Reconfigure { cfg, persist } => {
                let r = self.core.reconfigure(cfg);
                self.persist = persist;
                self.sync_filter();
                let c = self.core.config();
                tracing::info!(
                    instance = %self.instance,
                    table = c.table,
                    protocol = c.protocol,
                    metric = c.metric,
                    ecmp = c.ecmp,
                    persist,
                    moved = r.moved,
                    rewrite = r.rewrite,
                    "kernel FIB: reconfigured{}",
                    if r.hold_cut {
                        " (the start-up hold's routes are written under the new key now; their old copies stay until the hold ends)"
                    } else {
                        ""
                    }
                );
            }
            FibCmd::Show { limit, reply } => {
                let _ = reply.send(self.info(limit));
            }
            FibCmd::Stop { withdraw, done } => {
                if withdraw && !self.persist && self.core.phase() != core::Phase::Hold {
                    self.withdraw_all();
                }
                // No FIB any more: no routes by state.
                self.metrics
                    .fib_routes(&self.instance, FibRoutes::default());
                let _ = done.send(());
                return false;
            }
        }
        true
    }

    /// The notification filter drops the protocols the core calls its own
    /// (a moved protocol's old routes are being deleted by us too).
    fn sync_filter(&mut self) {
        let want = self.core.own_protocols();
        if want == self.filtered {
            return;
        }
        match self.monitor.drop_routes_of_protocols(&want) {
            Ok(()) => self.filtered = want,
            Err(e) => {
                tracing::warn!(instance = %self.instance, error = %e, "kernel FIB: notification filter not changed")
            }
        }
    }

    fn withdraw_all(&mut self) {
        let started = Instant::now();
        if self.core.wants_dump() {
            self.dump();
        }
        self.core.withdraw_all();
        let before = self.core.counters.deleted;
        while self.core.has_work() && started.elapsed() < Duration::from_secs(60) {
            self.write_batch();
            if self.core.wants_dump() {
                self.dump();
            }
        }
        tracing::info!(
            instance = %self.instance,
            removed = self.core.counters.deleted - before,
            ms = started.elapsed().as_millis() as u64,
            "kernel FIB: our routes removed (normal stop, no persist)"
        );
    }

    fn dump(&mut self) {
        let started = Instant::now();
        let adopted = self.core.counters.adopted;
        self.last_dump = Some(started);
        self.core.dump_begin();
        let mut ok = self.dump_nexthops();
        for family in [AF_INET, AF_INET6] {
            ok &= self.dump_family(family);
        }
        if !ok {
            // Retried at the next round; what was read is kept.
            tracing::warn!(instance = %self.instance, "kernel FIB: route dump failed");
            return;
        }
        self.core.dump_end();
        self.sync_filter();
        self.metrics.fib_dump(
            &self.instance,
            self.core.counters.adopted - adopted,
            started.elapsed(),
        );
        self.last_gauges = None;
    }

    /// Our next-hop objects (and which ids are taken), before the routes
    /// that name them. A kernel without next-hop objects answers with an
    /// error: routes are then written with their gateways.
    fn dump_nexthops(&mut self) -> bool {
        let seq = self.next_seq(1);
        self.out.clear();
        codec::encode_nexthop_dump(&mut self.out, seq);
        if let Err(e) = self.write.send(&self.out) {
            tracing::warn!(error = %e, "kernel FIB: next-hop dump request");
            return false;
        }
        loop {
            let n = match self.write.recv(&mut self.buf, true) {
                Ok(n) => n,
                Err(e) => {
                    tracing::warn!(error = %e, "kernel FIB: reading a next-hop dump");
                    return false;
                }
            };
            for m in messages(&self.buf[..n]) {
                if m.seq != seq {
                    continue;
                }
                match m.ty {
                    NLMSG_DONE => {
                        self.core.nexthops_dumped(true);
                        return true;
                    }
                    NLMSG_ERROR => {
                        let code = codec::error_code(m.payload).unwrap_or(0);
                        tracing::info!(
                            instance = %self.instance,
                            errno = code,
                            "kernel FIB: no next-hop objects here; routes carry their gateways"
                        );
                        self.core.nexthops_dumped(false);
                        return true;
                    }
                    RTM_NEWNEXTHOP => {
                        if let Some(h) = codec::parse_nexthop(m.payload) {
                            self.core.dump_nexthop(&h);
                        }
                    }
                    _ => {}
                }
            }
        }
    }

    fn dump_family(&mut self, family: u8) -> bool {
        let seq = self.next_seq(1);
        self.out.clear();
        codec::encode_dump(&mut self.out, seq, family);
        if let Err(e) = self.write.send(&self.out) {
            tracing::warn!(error = %e, "kernel FIB: dump request");
            return false;
        }
        loop {
            let n = match self.write.recv(&mut self.buf, true) {
                Ok(n) => n,
                Err(e) => {
                    tracing::warn!(error = %e, "kernel FIB: reading a dump");
                    return false;
                }
            };
            for m in messages(&self.buf[..n]) {
                if m.seq != seq {
                    continue;
                }
                match m.ty {
                    NLMSG_DONE => return true,
                    NLMSG_ERROR => return false,
                    RTM_NEWROUTE => {
                        if let Some(r) = parse_route(m.payload) {
                            self.core.dump_route(&r);
                        }
                    }
                    _ => {}
                }
            }
        }
    }

    fn next_seq(&mut self, n: usize) -> u32 {
        let s = self.seq;
        self.seq = self.seq.wrapping_add(n as u32).max(1);
        s
    }

    fn write_batch(&mut self) {
        let started = Instant::now();
        let before = self.core.counters;
        let seq = self.seq;
        let n = self
            .core
            .next_batch(Instant::now(), &mut self.out, seq, BATCH);
        if n == 0 {
            return;
        }
        self.next_seq(n);
        let last = seq.wrapping_add(n as u32 - 1);
        if let Err(e) = self.write.send(&self.out) {
            tracing::warn!(instance = %self.instance, error = %e, "kernel FIB: batch not sent");
            self.core.batch_unsent();
            std::thread::sleep(Duration::from_millis(10));
            return;
        }
        let mut errors: Vec<(u32, i32)> = Vec::new();
        let mut complete = false;
        while !complete {
            match self.write.recv(&mut self.buf, false) {
                Ok(len) => {
                    for m in messages(&self.buf[..len]) {
                        if m.ty != NLMSG_ERROR {
                            continue;
                        }
                        let code = codec::error_code(m.payload).unwrap_or(libc::EIO);
                        if code != 0 {
                            errors.push((m.seq, code));
                        }
                        if m.seq == last {
                            complete = true;
                        }
                    }
                }
                // Every answer is queued when `send` returns: nothing more
                // will come.
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) => {
                    tracing::warn!(instance = %self.instance, error = %e, "kernel FIB: answers lost");
                }
            }
        }
        for (s, code) in errors.iter().take(3) {
            tracing::debug!(instance = %self.instance, seq = s, errno = code, "kernel FIB: route refused");
        }
        self.core.batch_done(Instant::now(), seq, &errors, complete);
        self.sync_filter();
        let after = self.core.counters;
        self.metrics.fib_batch(
            &self.instance,
            n,
            FibWrites {
                added: after.added - before.added,
                replaced: after.replaced - before.replaced,
                deleted: after.deleted - before.deleted,
                nexthops_added: after.nexthops_added - before.nexthops_added,
                nexthops_deleted: after.nexthops_deleted - before.nexthops_deleted,
                errors: after.errors - before.errors,
                lost: !complete,
            },
            started.elapsed(),
        );
        self.read_notifications();
    }

    fn read_notifications(&mut self) {
        loop {
            let n = match self.monitor.recv(&mut self.buf, false) {
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.raw_os_error() == Some(libc::ENOBUFS) => {
                    self.metrics.fib_lost(&self.instance, "notifications");
                    self.core.notifications_lost();
                    continue;
                }
                Err(e) => {
                    tracing::warn!(error = %e, "kernel FIB: notifications");
                    return;
                }
            };
            for m in messages(&self.buf[..n]) {
                match m.ty {
                    RTM_NEWROUTE | RTM_DELROUTE => {
                        if let Some(r) = parse_route(m.payload) {
                            self.core.kernel_route(&r, m.ty == RTM_DELROUTE);
                        }
                    }
                    RTM_NEWLINK | RTM_DELLINK | RTM_NEWADDR | RTM_DELADDR => {
                        self.core.link_changed()
                    }
                    _ => {}
                }
            }
        }
    }

    fn info(&self, limit: usize) -> FibInfo {
        let now = Instant::now();
        let cfg = self.core.config();
        let (installed, pending, unresolved, failed, stale) = self.core.counts(now);
        let c = self.core.counters;
        let hop = |(gw, oif): &(std::net::IpAddr, u32)| {
            format!(
                "{gw} dev {}",
                holdfast_linux::device::ifname(*oif).unwrap_or_else(|| oif.to_string())
            )
        };
        FibInfo {
            instance: self.instance.clone(),
            table: cfg.table,
            metric: cfg.metric,
            protocol: cfg.protocol,
            ecmp: cfg.ecmp as u32,
            persist: self.persist,
            phase: self.core.phase().as_str().into(),
            routes_total: self.core.wanted() as u64,
            installed: installed as u64,
            pending: pending as u64,
            unresolved: unresolved as u64,
            failed: failed as u64,
            stale: stale as u64,
            old_key: self.core.old_key_routes() as u64,
            counters: FibCounters {
                added: c.added,
                replaced: c.replaced,
                deleted: c.deleted,
                errors: c.errors,
                batches: c.batches,
                dumps: c.dumps,
                adopted: c.adopted,
                notifications: c.notifications,
                lost_answers: c.lost_answers,
            },
            next_hops: self
                .core
                .next_hops()
                .into_iter()
                .map(|n| FibNextHop {
                    next_hop: n.next_hop.to_string(),
                    via_route: n.via_route,
                    resolved: n.resolved.iter().map(hop).collect(),
                })
                .collect(),
            routes: self
                .core
                .view(now, limit)
                .into_iter()
                .map(|r| FibRouteInfo {
                    prefix: r.prefix.to_string(),
                    bgp_next_hops: r.bgp_next_hops.iter().map(|a| a.to_string()).collect(),
                    installed: r.installed.iter().map(hop).collect(),
                    state: r.state.into(),
                    error: r.error.map(|e| io::Error::from_raw_os_error(e).to_string()),
                })
                .collect(),
        }
    }
}
