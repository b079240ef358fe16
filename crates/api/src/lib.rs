//! Holdfast control-socket protocol, shared by the daemon and the
//! `holdfast` CLI.
//!
//! Transport: a Unix stream socket carrying newline-delimited JSON, one
//! [`Request`] per line answered by one [`Response`] per line.
//!
//! ```text
//! -> {"cmd":"show_rib","table":"in","peer":"192.0.2.1","limit":10}
//! <- {"ok":{"rib":[{"prefix":"10.0.0.0/8","best":true,...}]}}
//! -> {"cmd":"neighbor_reset","address":"192.0.2.9"}
//! <- {"error":{"message":"no neighbour 192.0.2.9"}}
//! ```
//!
//! Display conventions follow RFC 1997 (communities as `ASN:value`),
//! RFC 8092 (large communities as `global:local1:local2`) and RFC 4360
//! (extended communities as 16 hex digits).
//!
//! [`client::request`] is the one client of the socket (the CLI, the host
//! agent and the lab use it).
//!
//! # Known issues
//! - No versioning of the protocol: daemon and CLI must come from the same
//!   build. Unknown fields are ignored, so adding fields is compatible.

#![forbid(unsafe_code)]

pub mod client;
pub mod schemas;

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

/// One control request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "cmd", rename_all = "snake_case")]
pub enum Request {
    ShowNeighbors,
    ShowSummary,
    ShowRib {
        /// Routing instance; `None` means the default one.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        instance: Option<String>,
        /// Exact prefix (`10.0.0.0/8`) or address for a longest match.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        prefix: Option<String>,
        /// Neighbour address; required for the `in` and `out` tables.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        peer: Option<String>,
        #[serde(default)]
        table: RibTable,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        limit: Option<usize>,
    },
    Reload,
    NeighborReset {
        address: String,
    },
    /// Non-stop routing state: protection, replication lag, epoch, store latency.
    ShowNsr,
    /// Planned handover: the primary stops taking new input, flushes its
    /// replication and exits once a backup has claimed the instance.
    NsrSwitchover {
        /// Seconds to wait for the backup before resuming normal service.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        timeout_secs: Option<u64>,
    },
    /// The BFD sessions (RFC 5880) under the BGP sessions.
    ShowBfd,
    /// RPKI origin validation: the RTR caches, the VRPs in force and the
    /// routes' validation states.
    ShowRpki,
    /// The kernel FIB of each instance with `[kernel]`: routes installed,
    /// pending, failed, next-hop resolution, counters.
    ShowFib {
        /// Only this routing instance.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        instance: Option<String>,
        /// Most routes listed per instance (the counts cover all).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        limit: Option<usize>,
    },
    /// A preheated standby (`holdfastd --standby`) takes the instance
    /// over now, as `holdfastd --takeover` would, with the tables it has
    /// built. Answered once the instance is claimed and the state loaded.
    NsrTakeover {
        /// Claim the store epoch at least at this value (the controller's
        /// fencing token).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        epoch: Option<u64>,
        /// Created once ready for the service address, as
        /// `--takeover-ready-file`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        ready_file: Option<String>,
    },
    /// An MRT TABLE_DUMP_V2 dump (RFC 6396) of one table, written by the
    /// daemon to `path` (an absolute path on its host) through `path.tmp`.
    DumpMrt {
        path: String,
        #[serde(default)]
        table: RibTable,
        /// Routing instance; `None` means the default one.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        instance: Option<String>,
        /// Only this neighbour's routes; the in and out tables hold every
        /// neighbour's when absent.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        peer: Option<String>,
    },
    /// Originates `route` into the instance's Loc-RIB at run time (the
    /// GoBGP API's `AddPath`), replacing a route added before for the same
    /// prefix; announced to the peers per their export policy. Not part
    /// of the configuration: gone when holdfastd stops.
    AddRoute {
        /// Routing instance; `None` means the default one.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        instance: Option<String>,
        route: RouteSpec,
    },
    /// Withdraws a route `AddRoute` originated (the GoBGP API's
    /// `DeletePath`); a `[[network]]` for the prefix, if any, is
    /// originated again.
    DelRoute {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        instance: Option<String>,
        prefix: String,
    },
}

/// A route to originate (`add_route`): the path attributes an operator
/// gives, as `[[network]]` does in the configuration.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct RouteSpec {
    /// `10.9.0.0/24`, `2001:db8::/48`.
    pub prefix: String,
    /// An IPv4 next hop for IPv4 prefixes (NEXT_HOP), IPv6 for IPv6 ones
    /// (MP_REACH_NLRI); `None`: the session's own address on export.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_hop: Option<String>,
    /// ORIGIN: 0 IGP, 1 EGP, 2 INCOMPLETE.
    pub origin: u8,
    /// AS_PATH as one AS_SEQUENCE (our AS is prepended on eBGP export).
    pub as_path: Vec<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub med: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub local_pref: Option<u32>,
    /// RFC 1997 communities as 32-bit values.
    pub communities: Vec<u32>,
    /// RFC 8092 large communities (global, local1, local2).
    pub large_communities: Vec<(u32, u32, u32)>,
    /// RFC 4360 extended communities.
    pub ext_communities: Vec<[u8; 8]>,
}

impl Request {
    /// The request as one JSON line, without the trailing newline.
    pub fn to_line(&self) -> String {
        to_line(self)
    }

    pub fn from_line(line: &str) -> Result<Self, serde_json::Error> {
        serde_json::from_str(line.trim_end())
    }
}

/// Which RIB `show_rib` reads.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RibTable {
    /// The Loc-RIB (best and other candidate paths).
    #[default]
    Loc,
    /// One neighbour's Adj-RIB-In.
    In,
    /// One neighbour's Adj-RIB-Out.
    Out,
}

impl RibTable {
    pub const fn as_str(self) -> &'static str {
        match self {
            RibTable::Loc => "loc",
            RibTable::In => "in",
            RibTable::Out => "out",
        }
    }
}

impl fmt::Display for RibTable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for RibTable {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "loc" => Ok(RibTable::Loc),
            "in" => Ok(RibTable::In),
            "out" => Ok(RibTable::Out),
            other => Err(format!("unknown table {other:?} (expected loc, in or out)")),
        }
    }
}

/// One control response: `{"ok": BODY}` or `{"error": {"message": ...}}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Response {
    Ok(Body),
    Error { message: String },
}

/// The payload of a successful response.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Body {
    Neighbors(Vec<NeighborInfo>),
    Summary(Summary),
    Rib(Vec<RibEntry>),
    /// Free-text outcome of `reload` and `neighbor_reset`.
    Message(String),
    Nsr(Box<NsrStatus>),
    Bfd(Vec<BfdSessionInfo>),
    Mrt(MrtDumpInfo),
    Fib(Vec<FibInfo>),
    Rpki(RpkiInfo),
}

/// `show rpki`: the RTR caches (`[[rpki]]`), the VRP set in force and
/// the received routes by RFC 6811 state.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RpkiInfo {
    pub caches: Vec<RpkiCacheInfo>,
    /// The VRPs routes are validated against (the active cache's, or the
    /// last ones held).
    pub vrps_v4: u64,
    pub vrps_v6: u64,
    /// Seconds since the VRPs in force last changed or were confirmed by
    /// an End of Data; `None`: never (every route is `not-found`).
    pub last_update_secs: Option<u64>,
    /// Per routing instance, its received routes (Adj-RIB-In, before
    /// import policy) by state.
    pub routes: Vec<RpkiRoutes>,
}

/// `show rpki`: one cache.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RpkiCacheInfo {
    pub address: String,
    pub preference: u8,
    /// `connected` (an RTR session is open), `connecting` or `down`.
    pub state: String,
    /// The VRPs in force come from this cache.
    pub active: bool,
    /// The RTR version in use (1: RFC 8210, 0: RFC 6810).
    pub version: u8,
    pub session_id: Option<u16>,
    pub serial: Option<u32>,
    pub vrps_v4: u64,
    pub vrps_v6: u64,
    pub refresh_secs: u32,
    pub retry_secs: u32,
    pub expire_secs: u32,
    /// Seconds since this cache's last End of Data.
    pub last_update_secs: Option<u64>,
    /// End of Data PDUs applied, Cache Resets and Error Reports (sent or
    /// received), connections made.
    pub updates: u64,
    pub cache_resets: u64,
    pub errors: u64,
    pub connects: u64,
    pub last_error: Option<String>,
}

/// `show rpki`: an instance's received routes by RFC 6811 state.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RpkiRoutes {
    pub instance: String,
    pub valid: u64,
    pub invalid: u64,
    pub not_found: u64,
}

/// `show fib`: one instance's kernel FIB.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FibInfo {
    pub instance: String,
    pub table: u32,
    pub metric: u32,
    /// The rtnetlink protocol number our routes carry.
    pub protocol: u8,
    pub ecmp: u32,
    pub persist: bool,
    /// `hold` (standby or takeover: nothing written yet), `syncing`
    /// (reading the table), `running`.
    pub phase: String,
    /// Prefixes the RIB wants in the kernel.
    pub routes_total: u64,
    /// Our routes in the kernel table.
    pub installed: u64,
    /// Waiting to be written.
    pub pending: u64,
    /// No next hop resolves through the kernel's routes: not installed.
    pub unresolved: u64,
    /// Refused by the kernel (retried every 10 s).
    pub failed: u64,
    /// Ours in the table, not wanted (kept for the start-up hold).
    pub stale: u64,
    /// Ours under a key a reload replaced (another metric, the previous
    /// table or protocol), deleted once the routes under the new key are
    /// written (after the start-up hold, if one runs).
    #[serde(default)]
    pub old_key: u64,
    pub counters: FibCounters,
    pub next_hops: Vec<FibNextHop>,
    /// The first routes by prefix, up to the request's limit.
    pub routes: Vec<FibRouteInfo>,
}

/// `show fib`: what the FIB thread did since it started.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FibCounters {
    pub added: u64,
    pub replaced: u64,
    pub deleted: u64,
    pub errors: u64,
    /// `sendmsg` calls carrying route messages.
    pub batches: u64,
    /// Table dumps (start, and reconciliations).
    pub dumps: u64,
    /// Our routes found in the table and kept as they were.
    pub adopted: u64,
    pub notifications: u64,
    /// Answers or notifications the kernel dropped (ENOBUFS), each
    /// followed by a dump.
    pub lost_answers: u64,
}

/// `show fib`: one BGP next hop and how it resolves.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FibNextHop {
    pub next_hop: String,
    /// The kernel route it resolves through, if any.
    pub via_route: Option<String>,
    /// What the kernel is given for it (`gateway dev interface`).
    pub resolved: Vec<String>,
}

/// `show fib`: one prefix.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FibRouteInfo {
    pub prefix: String,
    pub bgp_next_hops: Vec<String>,
    pub installed: Vec<String>,
    /// `installed`, `pending`, `unresolved`, `failed` or `stale`.
    pub state: String,
    pub error: Option<String>,
}

/// `dump mrt`: what was written.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MrtDumpInfo {
    pub path: String,
    pub instance: String,
    pub table: String,
    /// RIB records (one per prefix).
    pub prefixes: u64,
    /// RIB entries (one per route).
    pub routes: u64,
    pub bytes: u64,
    /// From the request to the file in place.
    pub millis: u64,
}

/// `show bfd`: one BFD session.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BfdSessionInfo {
    /// The BGP neighbour (`instance/address`).
    pub neighbor: String,
    pub peer: String,
    /// Source address and port of our packets, when bound.
    pub local: String,
    /// `single-hop` (RFC 5881) or `multihop` (RFC 5883).
    pub mode: String,
    pub local_discriminator: u32,
    pub remote_discriminator: u32,
    /// `AdminDown`, `Down`, `Init` or `Up`.
    pub state: String,
    pub remote_state: String,
    /// bfd.LocalDiag (RFC 5880 §4.1), as text.
    pub diag: String,
    /// The agreed intervals in use (µs): ours to send, the peer's to send.
    pub tx_interval_us: u64,
    pub rx_interval_us: u64,
    /// Detection time (µs), 0 when not known.
    pub detection_time_us: u64,
    /// Our and the peer's Detect Mult.
    pub multiplier: u8,
    pub remote_multiplier: u8,
    /// Seconds in the current state Up; 0 when not Up.
    pub uptime_secs: u64,
    pub packets_in: u64,
    pub packets_out: u64,
    pub packets_dropped: u64,
    pub state_changes: u64,
    /// Authentication type, `none` when off.
    pub auth: String,
    /// Longest gap between two of our packets while Up (µs): with
    /// `tx_interval_us`, what RFC 5880 §6.8.7 bounds (at most 100% of the
    /// interval, plus scheduling delay).
    #[serde(default)]
    pub tx_gap_max_us: u64,
    /// Median and 99th percentile of those gaps (µs), over the last 4096.
    #[serde(default)]
    pub tx_gap_p50_us: u64,
    #[serde(default)]
    pub tx_gap_p99_us: u64,
}

/// `show nsr`: the non-stop-routing state of the daemon.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NsrStatus {
    /// NSR configured (`[nsr]` present and enabled).
    pub enabled: bool,
    pub instance: String,
    /// `primary`, `takeover` (restoring), `fenced`, or `switchover`.
    pub role: String,
    /// The epoch this process writes with, and the store's last known one.
    pub epoch: u64,
    pub store_epoch: u64,
    /// The store is reachable and every session is replicated.
    pub protected: bool,
    pub store: String,
    /// Store write round trip (µs) over the recent window.
    pub store_latency_p50_us: u64,
    pub store_latency_p99_us: u64,
    /// Added ACK delay (µs): how long an ACK waited for replication.
    pub ack_delay_p50_us: u64,
    pub ack_delay_p99_us: u64,
    /// The added-ACK-delay histogram since start, its non-empty buckets
    /// as (index, count): the difference of two is the delay between them
    /// (`holdfast_linux::gate::delay_quantile`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ack_delay_buckets: Vec<(u32, u64)>,
    pub ack_packets_held: u64,
    pub ack_packets_clamped: u64,
    pub writes: u64,
    pub write_errors: u64,
    pub sessions: Vec<NsrSession>,
    /// Phases of the takeover that started this process, if it was one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub takeover: Option<TakeoverTimes>,
    /// A preheated standby (role `standby`): how far it follows the store.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub standby: Option<StandbyStatus>,
}

/// `show nsr` of a preheated standby: what it has read of the store.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StandbyStatus {
    /// Sessions followed (their tables are built).
    pub sessions: u64,
    /// Log chunks applied since the standby started (Adj-RIB-In + Adj-RIB-Out).
    pub chunks: u64,
    /// Times a session's tables were rebuilt from the start (first read,
    /// or its logs were replaced).
    pub restarts: u64,
    /// Polls of the store, and polls that failed.
    pub polls: u64,
    pub poll_errors: u64,
    /// The last poll found nothing new (and did not fail).
    pub caught_up: bool,
    /// Caught up, and each session's Adj-RIB-Out already compared with
    /// what its peer holds: a takeover now skips the comparison too.
    #[serde(default)]
    pub prepared: bool,
    /// Caught up, or the last poll (the read, and the RIB threads' applying
    /// of what it read) took no longer than a few polls: the standby trails
    /// the store by about a poll even while the tables keep changing. An
    /// upgrade's standby step waits for this (a build without it: for
    /// `caught_up`).
    #[serde(default)]
    pub following: bool,
    /// How long the last poll took (read and applied), ms.
    #[serde(default)]
    pub last_poll_ms: u64,
    /// The store's epoch at the last poll.
    pub store_epoch: u64,
    /// The last poll's error, if it failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
}

/// One replicated session.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NsrSession {
    pub key: String,
    pub peer: String,
    pub protected: bool,
    /// Replication operations queued and not yet confirmed by the store.
    pub lag_ops: u64,
    /// Age (µs) of the oldest unconfirmed operation; 0 when none.
    pub lag_us: u64,
    /// Highest receive sequence number confirmed (the ACK that may leave).
    pub rcv_confirmed: u32,
    /// Next send sequence number handed to the store.
    pub snd_next: u32,
    /// Bytes in the Adj-RIB-In and Adj-RIB-Out logs since the last snapshot.
    pub log_bytes: u64,
}

/// Phases of a takeover (TENSOR Table 1), in microseconds.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TakeoverTimes {
    pub sessions: u64,
    pub routes: u64,
    /// Claiming the epoch and guarding the namespace.
    pub claim_us: u64,
    /// Reading the store.
    pub load_us: u64,
    /// Waiting for the service address (orchestrator's part).
    pub address_wait_us: u64,
    /// TCP_REPAIR restore, all sessions.
    pub tcp_restore_us: u64,
    /// Per-session TCP restore, worst case.
    pub tcp_restore_max_us: u64,
    /// From start to the sessions resumed (first KEEPALIVE queued).
    pub resumed_us: u64,
    /// Until the tables are rebuilt and the Adj-RIB-Out diff is sent.
    pub tables_us: u64,
    /// Until the sessions' logs were read (they are read while the
    /// sessions resume; the tables are built from them). 0: not yet, or
    /// not reported (an older build).
    #[serde(default)]
    pub logs_us: u64,
    /// Sessions whose tables a preheated standby had built (0: a cold
    /// takeover).
    #[serde(default)]
    pub preheated: u64,
    /// Wall clock (µs since the Unix epoch) when the takeover began: a
    /// preheated standby's `nsr takeover`, or a cold `holdfastd --takeover`
    /// once its configuration was read (its process start-up comes before).
    /// 0: not reported (an older build).
    #[serde(default)]
    pub started_unix_us: u64,
}

impl Response {
    pub fn error(message: impl Into<String>) -> Self {
        Response::Error {
            message: message.into(),
        }
    }
    pub fn message(message: impl Into<String>) -> Self {
        Response::Ok(Body::Message(message.into()))
    }
    pub fn neighbors(list: Vec<NeighborInfo>) -> Self {
        Response::Ok(Body::Neighbors(list))
    }
    pub fn summary(s: Summary) -> Self {
        Response::Ok(Body::Summary(s))
    }
    pub fn rib(entries: Vec<RibEntry>) -> Self {
        Response::Ok(Body::Rib(entries))
    }
    pub fn nsr(s: NsrStatus) -> Self {
        Response::Ok(Body::Nsr(Box::new(s)))
    }
    pub fn bfd(list: Vec<BfdSessionInfo>) -> Self {
        Response::Ok(Body::Bfd(list))
    }
    pub fn mrt(info: MrtDumpInfo) -> Self {
        Response::Ok(Body::Mrt(info))
    }
    pub fn fib(list: Vec<FibInfo>) -> Self {
        Response::Ok(Body::Fib(list))
    }
    pub fn rpki(info: RpkiInfo) -> Self {
        Response::Ok(Body::Rpki(info))
    }

    /// `Ok(body)` or `Err(message)`.
    pub fn into_result(self) -> Result<Body, String> {
        match self {
            Response::Ok(b) => Ok(b),
            Response::Error { message } => Err(message),
        }
    }

    /// The response as one JSON line, without the trailing newline.
    pub fn to_line(&self) -> String {
        to_line(self)
    }

    pub fn from_line(line: &str) -> Result<Self, serde_json::Error> {
        serde_json::from_str(line.trim_end())
    }
}

fn to_line<T: Serialize>(v: &T) -> String {
    serde_json::to_string(v).unwrap_or_else(|e| {
        let err = Response::error(format!("cannot encode response: {e}"));
        serde_json::to_string(&err).unwrap_or_default()
    })
}

/// One neighbour, as shown by `show neighbors`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct NeighborInfo {
    pub instance: String,
    pub address: String,
    pub remote_as: u32,
    pub local_as: u32,
    /// FSM state name (`Idle` ... `Established`).
    pub state: String,
    /// Seconds since Established; `None` when not Established.
    pub uptime_secs: Option<u64>,
    /// The peer's BGP identifier once its OPEN was accepted.
    pub remote_id: Option<String>,
    /// Negotiated hold time (configured one when not negotiated).
    pub hold_time: u16,
    pub keepalive: u16,
    pub prefixes_received: u64,
    pub prefixes_accepted: u64,
    pub prefixes_advertised: u64,
    /// Messages received / sent, all types.
    pub msgs_in: u64,
    pub msgs_out: u64,
    pub established_count: u64,
    pub dropped_count: u64,
    pub last_error: Option<String>,
    /// Negotiated families, e.g. `ipv4-unicast`.
    pub families: Vec<String>,
}

/// Daemon-wide summary, as shown by `show summary`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Summary {
    pub router_id: String,
    pub asn: u32,
    pub instances: usize,
    pub neighbors_total: usize,
    pub neighbors_established: usize,
    /// Loc-RIB route count per routing instance.
    pub loc_rib_routes: BTreeMap<String, u64>,
    pub uptime_secs: u64,
    /// The daemon's build: package version and commit (`holdfast_version::VERSION`);
    /// empty from a daemon older than the field.
    pub version: String,
    /// Threads running the sessions (`[global] io_threads`, as started);
    /// 0 from a daemon older than the field.
    pub io_threads: usize,
}

/// One route, as shown by `show rib`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct RibEntry {
    pub prefix: String,
    /// Neighbour the route came from; `None` for locally originated routes.
    pub peer: Option<String>,
    pub best: bool,
    /// `igp`, `egp` or `incomplete`.
    pub origin: String,
    /// AS path in the usual text form: `65001 65002 {65003,65004}`.
    pub as_path: String,
    pub next_hop: Option<String>,
    pub med: Option<u32>,
    pub local_pref: Option<u32>,
    /// RFC 1997 communities, `65000:1`.
    pub communities: Vec<String>,
    /// RFC 8092 large communities, `1:2:3`.
    pub large_communities: Vec<String>,
    /// RFC 4360 extended communities, 16 lowercase hex digits.
    pub ext_communities: Vec<String>,
    /// With `[[rpki]]`: the route's RFC 6811 state as received (`valid`,
    /// `invalid`, `not-found`); absent for the Adj-RIB-Out and local routes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rpki: Option<String>,
}

/// RFC 1997 community as `ASN:value`.
pub fn format_community(c: u32) -> String {
    format!("{}:{}", c >> 16, c & 0xffff)
}

/// RFC 8092 large community as `global:local1:local2`.
pub fn format_large_community(global: u32, local1: u32, local2: u32) -> String {
    format!("{global}:{local1}:{local2}")
}

/// RFC 4360 extended community as 16 lowercase hex digits.
pub fn format_ext_community(c: &[u8; 8]) -> String {
    c.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn round_trip<T>(v: &T) -> T
    where
        T: Serialize + for<'de> Deserialize<'de>,
    {
        let s = serde_json::to_string(v).expect("serialise");
        assert!(!s.contains('\n'), "one line: {s}");
        serde_json::from_str(&s).expect("deserialise")
    }

    fn neighbor() -> NeighborInfo {
        NeighborInfo {
            instance: "default".into(),
            address: "192.0.2.1".into(),
            remote_as: 65002,
            local_as: 4_200_000_000,
            state: "Established".into(),
            uptime_secs: Some(42),
            remote_id: Some("10.0.0.2".into()),
            hold_time: 90,
            keepalive: 30,
            prefixes_received: 10,
            prefixes_accepted: 9,
            prefixes_advertised: 3,
            msgs_in: 100,
            msgs_out: 50,
            established_count: 2,
            dropped_count: 1,
            last_error: Some("hold timer expired".into()),
            families: vec!["ipv4-unicast".into(), "ipv6-unicast".into()],
        }
    }

    fn rib_entry() -> RibEntry {
        RibEntry {
            prefix: "2001:db8::/32".into(),
            peer: Some("192.0.2.1".into()),
            best: true,
            origin: "igp".into(),
            as_path: "65002 {65003,65004}".into(),
            next_hop: Some("2001:db8::1".into()),
            med: Some(10),
            local_pref: None,
            communities: vec![format_community(0xFDE8_0001)],
            large_communities: vec![format_large_community(1, 2, 3)],
            ext_communities: vec![format_ext_community(&[0, 2, 0xfd, 0xe8, 0, 0, 0, 1])],
            rpki: Some("valid".into()),
        }
    }

    #[test]
    fn requests_round_trip() {
        let reqs = vec![
            Request::ShowNeighbors,
            Request::ShowSummary,
            Request::ShowRib {
                instance: None,
                prefix: None,
                peer: None,
                table: RibTable::Loc,
                limit: None,
            },
            Request::ShowRib {
                instance: Some("blue".into()),
                prefix: Some("10.0.0.0/8".into()),
                peer: Some("192.0.2.1".into()),
                table: RibTable::Out,
                limit: Some(5),
            },
            Request::Reload,
            Request::NeighborReset {
                address: "192.0.2.1".into(),
            },
        ];
        for r in reqs {
            assert_eq!(round_trip(&r), r);
            assert_eq!(
                Request::from_line(&format!("{}\n", r.to_line())).expect("line"),
                r
            );
        }
    }

    #[test]
    fn request_wire_format() {
        assert_eq!(
            serde_json::to_value(Request::ShowNeighbors).expect("ser"),
            json!({"cmd": "show_neighbors"})
        );
        assert_eq!(
            serde_json::to_value(Request::NeighborReset {
                address: "::1".into()
            })
            .expect("ser"),
            json!({"cmd": "neighbor_reset", "address": "::1"})
        );
        let r: Request = serde_json::from_str(r#"{"cmd":"show_rib"}"#).expect("defaults");
        assert_eq!(
            r,
            Request::ShowRib {
                instance: None,
                prefix: None,
                peer: None,
                table: RibTable::Loc,
                limit: None
            }
        );
        let r: Request =
            serde_json::from_str(r#"{"cmd":"show_rib","table":"in","peer":"192.0.2.1","limit":3}"#)
                .expect("in");
        assert!(matches!(
            r,
            Request::ShowRib {
                table: RibTable::In,
                limit: Some(3),
                ..
            }
        ));
        assert!(Request::from_line(r#"{"cmd":"format_disk"}"#).is_err());
        assert!(Request::from_line(r#"{"cmd":"show_rib","table":"adj"}"#).is_err());
    }

    #[test]
    fn responses_round_trip() {
        let mut routes = BTreeMap::new();
        routes.insert("default".to_string(), 1_000_000u64);
        routes.insert("blue".to_string(), 7u64);
        let resps = vec![
            Response::neighbors(vec![neighbor(), NeighborInfo::default()]),
            Response::summary(Summary {
                router_id: "10.0.0.1".into(),
                asn: 65001,
                instances: 2,
                neighbors_total: 3,
                neighbors_established: 1,
                loc_rib_routes: routes,
                uptime_secs: 3600,
                version: "0.1.0 (v0.1.0-3-g1a2b3c4)".into(),
                io_threads: 2,
            }),
            Response::rib(vec![rib_entry(), RibEntry::default()]),
            Response::rib(vec![]),
            Response::message("reloaded"),
            Response::error("no neighbour 192.0.2.9"),
        ];
        for r in resps {
            assert_eq!(round_trip(&r), r);
            assert_eq!(Response::from_line(&r.to_line()).expect("line"), r);
        }
    }

    #[test]
    fn response_wire_format() {
        assert_eq!(
            serde_json::to_value(Response::error("boom")).expect("ser"),
            json!({"error": {"message": "boom"}})
        );
        assert_eq!(
            serde_json::to_value(Response::message("done")).expect("ser"),
            json!({"ok": {"message": "done"}})
        );
        let v = serde_json::to_value(Response::rib(vec![rib_entry()])).expect("ser");
        assert_eq!(v["ok"]["rib"][0]["communities"][0], "65000:1");
        assert_eq!(v["ok"]["rib"][0]["ext_communities"][0], "0002fde800000001");
        assert_eq!(Response::error("x").into_result(), Err("x".to_string()));
        assert_eq!(
            Response::message("y").into_result(),
            Ok(Body::Message("y".into()))
        );
    }

    #[test]
    fn missing_fields_default() {
        let n: NeighborInfo =
            serde_json::from_str(r#"{"address":"192.0.2.1","state":"Idle"}"#).expect("partial");
        assert_eq!(n.address, "192.0.2.1");
        assert_eq!(n.uptime_secs, None);
        assert!(n.families.is_empty());
    }

    #[test]
    fn rib_table_text() {
        for t in [RibTable::Loc, RibTable::In, RibTable::Out] {
            assert_eq!(t.to_string().parse::<RibTable>(), Ok(t));
            assert_eq!(serde_json::to_value(t).expect("ser"), json!(t.as_str()));
        }
        assert!("adj".parse::<RibTable>().is_err());
    }

    #[test]
    fn community_formats() {
        assert_eq!(format_community(0xFFFF_FF01), "65535:65281");
        assert_eq!(format_community(0x0000_0064), "0:100");
        assert_eq!(
            format_large_community(4_200_000_000, 0, 1),
            "4200000000:0:1"
        );
        assert_eq!(format_ext_community(&[0xff; 8]), "ffffffffffffffff");
    }
}
