//! The RIB thread's side of the messages: what the I/O thread, the
//! daemon, RPKI, BMP and the standby send it ([`RibCmd`], through a
//! [`RibHandle`]), what it answers, and what it sends a peer task
//! ([`ToPeer`], through the [`Mailboxes`]).
//!
//! # Known issues
//! - None known.

use super::fib::{FibConfig, FibHandle};
use holdfast_rib::{PeerId, PeerSpec, PolicyRef};
use holdfast_wire::{CodecCtx, Family, Notification, PathAttrs, Prefix};
use std::collections::HashMap;
use std::sync::{Arc, RwLock};
use std::time::Instant;
use tokio::sync::{mpsc, oneshot};

/// Commands from the I/O side.
pub enum RibCmd {
    AddPeer(PeerSpec),
    RemovePeer(PeerId),
    PeerUp {
        spec: PeerSpec,
        gen: u64,
    },
    PeerDown {
        peer: PeerId,
        graceful: bool,
    },
    StaleTimeout(PeerId),
    Updates {
        peer: PeerId,
        bodies: Vec<Vec<u8>>,
    },
    RouteRefresh {
        peer: PeerId,
        family: Family,
    },
    SetPolicies {
        peer: PeerId,
        import: PolicyRef,
        export: PolicyRef,
    },
    Originate(Vec<(Prefix, Arc<PathAttrs>)>),
    WithdrawOriginated(Vec<Prefix>),
    Query(RibQuery, oneshot::Sender<QueryResult>),
    /// NSR: the peer's Adj-RIB-In and Adj-RIB-Out encoded as UPDATEs;
    /// with `min_ratio` (a log compaction), only if the peer's routes set,
    /// replaced or removed since its last snapshot number at least
    /// `min_ratio` times the routes it holds (`rib_thread::worth_compacting`).
    Snapshot {
        peer: PeerId,
        ctx: CodecCtx,
        min_ratio: Option<f64>,
        reply: oneshot::Sender<Snapshot>,
    },
    /// NSR takeover: rebuild the tables of sessions taken over and send
    /// each peer only what differs from what it already holds.
    /// With `logs`, the peers' logs are still being read: the RIB thread
    /// waits for them first, and every command behind this one waits with
    /// it. The error says why the logs cannot be read (nothing is rebuilt).
    Resume {
        peers: Vec<ResumePeer>,
        logs: Option<crate::nsr::PendingLogs>,
        reply: oneshot::Sender<Result<ResumeReport, String>>,
    },
    /// NSR standby: build the tables of stored sessions ahead of a
    /// takeover, from the logs as they grow (nothing is sent to anyone).
    Preheat(Preheat),
    /// NSR standby, caught up with the store: compare each preheated
    /// session's Adj-RIB-Out with what its peer holds now, so that a
    /// takeover before anything else changes the tables needs no
    /// comparison. Answered when done.
    Prepare(oneshot::Sender<()>),
    /// Answered once every command sent before it is applied: a barrier
    /// (a standby's poll waits on it, so the RIB never falls behind by
    /// more than one poll's work).
    Applied(oneshot::Sender<()>),
    /// Subscribes to the instance's best-path changes (the GoBGP API's
    /// `WatchEvent`): each command's changes are offered to the channel
    /// without waiting; a subscriber whose channel is full is dropped.
    WatchBest(mpsc::Sender<Arc<BestBatch>>),
    /// The BMP hub: post-policy and Loc-RIB changes go to it while a
    /// collector monitors them.
    Bmp(super::bmp::BmpHub),
    /// The tables are complete (a primary's start, or a takeover once
    /// `Resume` is done): the kernel FIB may write (see `fib`).
    FibActivate {
        hold: std::time::Duration,
    },
    /// A reload added `[kernel]`: the engine reports forwarding entries
    /// (at most `ecmp` next hops) to this new FIB thread, which gets the
    /// whole table and is activated at once with no hold.
    FibStart {
        fib: FibHandle,
        ecmp: usize,
    },
    /// A reload changed `[kernel]`: the FIB thread takes `cfg`; with a new
    /// `ecmp` the engine computes every entry again and hands them over
    /// after it (the core rewrites what differs).
    FibReconfigure {
        cfg: FibConfig,
        persist: bool,
    },
    /// A reload removed `[kernel]`: the engine stops reporting, the FIB
    /// thread stops (`withdraw`: our routes removed first) and says so on
    /// `done`.
    FibStop {
        withdraw: bool,
        done: std::sync::mpsc::Sender<()>,
    },
    /// RPKI: the VRP table now in force and the VRPs added or removed
    /// since the previous one (their prefixes' routes are revalidated).
    Rpki {
        table: Arc<holdfast_rib::VrpTable>,
        changed: Arc<Vec<holdfast_rib::Vrp>>,
    },
    /// NSR takeover with `[[rpki]]`: hold every later command until the
    /// first `Rpki` (or `until`), so that the tables are rebuilt with the
    /// cache's VRPs and nothing is sent before (docs/nsr.md, RPKI).
    RpkiAwait {
        until: Instant,
    },
}

/// The answer to [`RibCmd::Snapshot`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Snapshot {
    /// The Adj-RIB-In and the Adj-RIB-Out, encoded as UPDATEs.
    Tables(Vec<u8>, Vec<u8>),
    /// Not taken: since the last snapshot the peer's routes were set,
    /// replaced or removed `changes` times, and it holds `routes`; a
    /// snapshot would not make its log much smaller.
    NotWorth { changes: u64, routes: u64 },
}

/// Best-path changes: per prefix its new best path (the neighbour it came
/// from, `None` for a route we originate) or `None` when it has none.
pub type BestBatch = Vec<(Prefix, Option<(Option<std::net::IpAddr>, Arc<PathAttrs>)>)>;

/// What a preheated standby read from the store since its last poll.
#[derive(Default)]
pub struct Preheat {
    /// Sessions whose tables go on from where they were, or (`restart`)
    /// start again.
    pub peers: Vec<PreheatPeer>,
    /// Sessions no longer stored: their tables are dropped.
    pub gone: Vec<PeerId>,
}

/// One session followed by a standby.
pub struct PreheatPeer {
    /// The neighbour as configured (what `AddPeer` would give the engine).
    pub configured: PeerSpec,
    /// The session as the stored OPENs negotiate it, as for a takeover.
    pub resume: ResumePeer,
    /// The logs were replaced (or this is the first read): the session's
    /// tables are rebuilt from `resume`'s logs alone.
    pub restart: bool,
    /// `resume`'s new log chunks hold an UPDATE (not only KEEPALIVEs):
    /// the tables, and a comparison prepared before, may change.
    pub updates: bool,
}

/// One session taken over, as the RIB thread needs it.
pub struct ResumePeer {
    /// The session's key in the store.
    pub key: String,
    pub spec: PeerSpec,
    pub gen: u64,
    pub ctx: CodecCtx,
    /// Adj-RIB-In log (whole UPDATE messages).
    pub adj_in: Vec<bytes::Bytes>,
    /// Adj-RIB-Out log (every message written to the peer).
    pub adj_out: Vec<bytes::Bytes>,
    /// A preheated standby already built this session's tables from the
    /// logs before `adj_in` and `adj_out`, which continue them.
    pub preheated: bool,
}

impl ResumePeer {
    /// A session taken over whose logs come with the takeover's
    /// `RibCmd::Resume` (`nsr::PendingLogs`): none here yet.
    pub fn logs_to_come(key: String, spec: PeerSpec, ctx: CodecCtx, preheated: bool) -> ResumePeer {
        ResumePeer {
            key,
            spec,
            gen: 1,
            ctx,
            adj_in: Vec::new(),
            adj_out: Vec::new(),
            preheated,
        }
    }
}

/// What rebuilding the tables took.
#[derive(Debug, Default, Clone)]
pub struct ResumeReport {
    pub routes_in: usize,
    pub announced: usize,
    pub withdrawn: usize,
    pub micros: u64,
    /// Sessions whose Adj-RIB-Out comparison a standby had made before
    /// (`RibCmd::Prepare`), so the takeover did not compare again.
    pub compared_while_standby: usize,
}

impl RibCmd {
    /// The command's name, for logs.
    pub fn name(&self) -> &'static str {
        match self {
            RibCmd::AddPeer { .. } => "AddPeer",
            RibCmd::RemovePeer { .. } => "RemovePeer",
            RibCmd::PeerUp { .. } => "PeerUp",
            RibCmd::PeerDown { .. } => "PeerDown",
            RibCmd::StaleTimeout { .. } => "StaleTimeout",
            RibCmd::Updates { .. } => "Updates",
            RibCmd::RouteRefresh { .. } => "RouteRefresh",
            RibCmd::SetPolicies { .. } => "SetPolicies",
            RibCmd::Originate { .. } => "Originate",
            RibCmd::WithdrawOriginated { .. } => "WithdrawOriginated",
            RibCmd::Query { .. } => "Query",
            RibCmd::Snapshot { .. } => "Snapshot",
            RibCmd::Resume { .. } => "Resume",
            RibCmd::Preheat { .. } => "Preheat",
            RibCmd::Prepare { .. } => "Prepare",
            RibCmd::Applied { .. } => "Applied",
            RibCmd::WatchBest { .. } => "WatchBest",
            RibCmd::Bmp { .. } => "Bmp",
            RibCmd::FibActivate { .. } => "FibActivate",
            RibCmd::FibStart { .. } => "FibStart",
            RibCmd::FibReconfigure { .. } => "FibReconfigure",
            RibCmd::FibStop { .. } => "FibStop",
            RibCmd::Rpki { .. } => "Rpki",
            RibCmd::RpkiAwait { .. } => "RpkiAwait",
        }
    }
}

/// Read-only questions for the CLI and metrics.
pub enum RibQuery {
    AdjIn(PeerId),
    /// The Adj-RIB-In after import policy (accepted routes only).
    AdjInPost(PeerId),
    AdjOut(PeerId),
    Loc,
    Lookup(Prefix),
    Counts,
    /// Received routes by RFC 6811 state.
    Rpki,
    /// The RFC 6811 state of each (peer, prefix) route as received.
    Validity(Vec<(PeerId, Prefix)>),
}

/// One route of a `QueryResult::Routes`: prefix, source peer, attributes,
/// best.
pub type RouteRow = (Prefix, PeerId, Arc<PathAttrs>, bool);

pub enum QueryResult {
    Routes(Vec<RouteRow>),
    Counts {
        loc_rib: usize,
        attr_sets: usize,
        peers: HashMap<PeerId, holdfast_rib::PeerCounts>,
    },
    Rpki(holdfast_rib::RpkiCounts),
    Validity(Vec<Option<holdfast_rib::Validity>>),
}

/// What the RIB thread sends back to a peer task.
pub enum ToPeer {
    /// Encoded messages for the session generation `gen`.
    Send { gen: u64, bytes: Arc<Vec<u8>> },
    /// The session must be reset with this NOTIFICATION.
    Reset {
        gen: u64,
        notification: Notification,
    },
    /// The answer to the oldest ROUTE-REFRESH of session `gen` was sent
    /// (in the `Send`s before this): it is no longer pending.
    Refreshed { gen: u64 },
}

/// Peer task mailboxes, by engine peer id.
pub type Mailboxes = Arc<RwLock<HashMap<PeerId, mpsc::UnboundedSender<super::peer::PeerCmd>>>>;

/// The sending side of a RIB thread's queue: cheap to clone.
#[derive(Clone)]
pub struct RibHandle {
    tx: mpsc::UnboundedSender<RibCmd>,
}

impl RibHandle {
    /// A new queue: the handle, and the receiving side for the RIB thread.
    pub fn channel() -> (RibHandle, mpsc::UnboundedReceiver<RibCmd>) {
        let (tx, rx) = mpsc::unbounded_channel();
        (RibHandle { tx }, rx)
    }

    pub fn send(&self, cmd: RibCmd) {
        // The RIB thread lives as long as the process; a send can only fail
        // during shutdown, when there is nothing left to do with the command.
        let _ = self.tx.send(cmd);
    }

    pub async fn query(&self, q: RibQuery) -> Option<QueryResult> {
        let (tx, rx) = oneshot::channel();
        self.send(RibCmd::Query(q, tx));
        rx.await.ok()
    }
}
