//! `holdfast-lab`: a synchronous test harness that builds BGP labs out of Linux network
//! namespaces and real routing daemons.
//!
//! * [`Lab`] creates hosts (namespaces named `hf<6 hex>-<host>`), veth links, bridges,
//!   runs commands and long-lived processes inside them, captures every link with
//!   `tcpdump`, and tears everything down on every exit path (explicit
//!   [`Lab::teardown`], `Drop`, unwinding). On failure the work directory (logs, pcaps,
//!   generated configs) is kept and its path printed.
//! * [`peer`] starts real peers — BIRD 2, FRR, GoBGP, ExaBGP — from a common
//!   [`PeerSpec`] and reads their view back with their own tools via the [`Peer`] trait.
//! * [`wait_for`] / [`wait_until`] poll with deadlines and report the last observation.
//! * [`cleanup_stale`] removes namespaces left behind by crashed runs.
//!
//! Environment: `HOLDFAST_LAB_DIR` (work dir parent, default `/tmp`),
//! `HOLDFAST_LAB_PCAP=0` (no captures), `HOLDFAST_LAB_KEEP=1` (keep work dir on success).
//!
//! # Known issues
//! * BIRD: an IPv6 channel over an IPv4 session (and vice versa) needs an explicit
//!   `next hop address`, which the generated config does not set; carry each family over
//!   its own transport. BIRD does not expose session counters, so established/dropped
//!   counts are derived from its log's state-change lines; `RouteSpec::next_hop` is set in
//!   the export filter and BIRD may still override it on eBGP.
//! * ExaBGP: needs `local_address` on every neighbour; its advertised routes are the
//!   harness's record of what it was told to announce, not read from the daemon.
//! * GoBGP: the JSON exposes no established counter (`established_count` is `None`);
//!   `dropped_count` comes from `flops`.
//! * FRR's advertised-routes JSON lacks communities; they are taken from the local best
//!   path of the same prefix.

mod cmd;
mod error;
mod lab;
pub mod peer;
mod stale;
mod wait;

pub use cmd::{find_tool, is_root, Signal, DEFAULT_CMD_TIMEOUT};
pub use error::{LabError, Result};
pub use lab::{
    AddrPair, BridgeId, BridgeInfo, BridgePort, HostId, HostInfo, IfAddr, Lab, LinkId, LinkInfo,
    ProcId,
};
pub use peer::{
    normalize_prefix, preflight, Bird, Exabgp, Frr, Gobgp, NeighborSpec, Peer, PeerKind, PeerSpec,
    RouteSpec, RouteView, SessionState, SessionView,
};
pub use stale::{cleanup_stale, list_netns, run_id_of, NAME_PREFIX};
pub use wait::{wait_for, wait_for_every, wait_until, DEFAULT_POLL_INTERVAL};

/// The line tests print when they cannot run here.
pub const SKIP_MESSAGE: &str = "SKIP: needs root and bird/frr/gobgpd/exabgp";

/// For tests: `true` (after printing [`SKIP_MESSAGE`] and the reason) when the
/// environment cannot run labs with the given peers.
pub fn skip_unless_ready(kinds: &[PeerKind]) -> bool {
    match preflight(kinds) {
        Ok(()) => false,
        Err(e) => {
            println!("{SKIP_MESSAGE} ({e})");
            true
        }
    }
}
