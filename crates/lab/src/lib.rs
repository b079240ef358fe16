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
//! * [`cleanup_stale`] removes namespaces left behind by crashed runs; a lab can be kept
//!   running between processes ([`Lab::keep`], [`Lab::adopt`]).
//! * [`pcap`] reads back what a peer received.
//! * [`nsr`]: the non-stop-routing topology ([`NsrTopo`]) and [`nsr_config`];
//!   [`Redis`] is the state store unit;
//!   [`PeerWatch`] samples a real peer's session in the background to show it never
//!   left Established during a failover.
//! * [`plane`]: the control plane in a lab (etcd, `holdfast-controller` replicas, a
//!   host agent per host, units in containers, real peers): every takeover in the lab,
//!   the NSR scenarios' and the benches' included, goes through it.
//! * [`Etcd`]: an etcd cluster (Debian's etcd 3.4), one member per host, read back
//!   with `etcdctl`; members killed and restarted by pid (the control plane's store).
//! * [`skip_unless_ready`] / [`skip`]: how a test that cannot run here says so — a
//!   failure with `HOLDFAST_REQUIRE_LAB=1` ([`REQUIRE_LAB_ENV`], set by `make test`),
//!   else a SKIP line on stderr.
//!
//! The `holdfast lab` command and `make demo` are built on this harness in
//! `holdfast-labctl`; the tests, the bench and the demo use it, production code does not.
//!
//! Environment: `HOLDFAST_LAB_DIR` (work dir parent, default `/tmp`),
//! `HOLDFAST_LAB_PCAP=0` (no captures), `HOLDFAST_LAB_KEEP=1` (keep work dir on success),
//! `HOLDFAST_REQUIRE_LAB=1` (a test that cannot run fails instead of skipping).
//! Work dir layout: `logs/` (stdout/stderr of every spawned process), `pcap/` (one file
//! per link / bridge), `peers/<host>-<kind>/` (generated configs, sockets, daemon logs).
//!
//! ```no_run
//! use std::time::Duration;
//! use holdfast_lab::{Bird, Frr, Lab, NeighborSpec, Peer, PeerSpec, RouteSpec};
//!
//! # fn main() -> holdfast_lab::Result<()> {
//! let mut lab = Lab::new("example")?;
//! let (a, b) = (lab.host("a")?, lab.host("b")?);
//! let link = lab.link_auto(a, b)?; // 198.18.1.1/24 <-> .2, fd00:0:0:1::1/64 <-> ::2
//! let v4 = lab.link_info(link).v4.expect("auto addresses");
//! let (ip_a, ip_b) = (v4.a.into(), v4.b.into());
//! let bird = Bird::start(&mut lab, a, &PeerSpec::new(65001, "192.0.2.1".parse().unwrap())
//!     .neighbor(NeighborSpec::new(ip_b, 65002).local(ip_a))
//!     .route(RouteSpec::new("203.0.113.0/24").med(7).community(65001, 1)))?;
//! let frr = Frr::start(&mut lab, b, &PeerSpec::new(65002, "192.0.2.2".parse().unwrap())
//!     .neighbor(NeighborSpec::new(ip_a, 65001).local(ip_b)))?;
//! frr.wait_established(&lab, ip_a, Duration::from_secs(30))?;
//! let route = frr.wait_route(&lab, ip_a, "203.0.113.0/24", Duration::from_secs(30), |r| {
//!     r.med == Some(7)
//! })?;
//! assert_eq!(route.communities, vec![(65001, 1)]);
//! # drop(bird);
//! # Ok(())
//! # }
//! ```
//!
//! A process killed with SIGKILL cannot run its teardown; call [`cleanup_stale`] (it only
//! touches namespaces whose owning process is gone, or kept labs whose state file is
//! gone) before or after such runs.
//!
//! # Known issues
//! * BIRD: an IPv6 channel over an IPv4 session (and vice versa) needs an explicit
//!   `next hop address`, which the generated config does not set; carry each family over
//!   its own transport. BIRD does not expose session counters, so established/dropped
//!   counts are derived from its log's state-change lines. BIRD logs the NOTIFICATIONs it
//!   receives and those it sends for errors, not the Cease it sends on an administrative
//!   `restart`/`disable`, so [`Peer::notifications_since`] cannot see those. `RouteSpec::next_hop` is set in
//!   the export filter and BIRD may still override it on eBGP.
//! * FRR always attaches a MED to routes it originates (0 when `RouteSpec::med` is
//!   `None`). Its advertised-routes JSON lacks communities; they are taken from the local
//!   best path of the same prefix.
//! * ExaBGP: needs `local_address` on every neighbour (passive neighbours listen there);
//!   `ttl_security` only works on active sessions (its listening socket answers with TTL
//!   64, so the harness rejects passive + TTL security); advertised routes are the
//!   harness's record of what it told ExaBGP to announce, not read from the daemon.
//! * GoBGP: the JSON exposes no session counters (GoBGP 3.10 omits `flops`, which only
//!   counts sessions dropped within 30 s anyway); established/dropped counts come from
//!   gobgpd's "Peer Up"/"Peer Down" log lines.
//! * Multi-family sessions (IPv4 and IPv6 unicast over one transport) are generated for
//!   all peers; the `interop_frr`/`interop_gobgp`/`interop_exabgp` tests cover IPv6 over
//!   an IPv4 transport (not BIRD, see above). ExaBGP's `next-hop self` would put a
//!   4-byte next hop on IPv6 routes there (a session reset, RFC 7606 §7.11), so the
//!   driver announces them with the IPv4-mapped IPv6 address of `local_address`.
//! * FRR as the passive side occasionally resets a session a few milliseconds after it
//!   reached Established (TCP close, no NOTIFICATION, seen once in ~20 runs); it
//!   re-establishes within a second. Assert counters as deltas, not absolute values.
//! * Peers send routes back to the neighbour they were learned from (no eBGP split
//!   horizon), so `prefixes_sent` counts include reflected routes.

mod cmd;
mod error;
mod etcd;
pub mod holdfast;
mod lab;
pub mod nsr;
pub mod pcap;
pub mod peer;
pub mod plane;
mod redis;
mod redis_cluster;
mod stale;
mod wait;
mod watch;

pub use cmd::{
    find_tool, is_root, link_state, require_tool, send_signal, Signal, DEFAULT_CMD_TIMEOUT,
};
pub use error::{io_ctx, parse_err, LabError, Result};
pub use etcd::{Etcd, EtcdMember, EtcdStatus, ETCD_CLIENT_PORT, ETCD_PEER_PORT};
pub use holdfast::{control_request, find_binary, ControlSocket, Holdfastd, StartOpts};
pub use lab::{
    AddrPair, BridgeId, BridgeInfo, BridgePort, HostId, HostInfo, IfAddr, KeptLab, KeptProc, Lab,
    LinkId, LinkInfo, ProcId,
};
pub use nsr::{nsr_config, NsrHost, NsrTopo, NSR_LOCAL_AS, NSR_V4_LEN, NSR_V6_LEN};
pub use peer::{
    adopt as adopt_peer, normalize_prefix, preflight, BfdAuthSpec, BfdTimers, BfdView, Bird,
    Exabgp, Frr, Gobgp, LogMark, NeighborSpec, Peer, PeerKind, PeerSpec, RouteSpec, RouteView,
    SessionProbe, SessionState, SessionView,
};
pub use redis::Redis;
pub use redis_cluster::{AclServers, RedisCluster, StoreServers};
pub use stale::{cleanup_stale, list_netns, netns_pids, run_id_of, stale_namespaces, NAME_PREFIX};
pub use wait::{hold_for, wait_for, wait_for_every, wait_ok, wait_until, DEFAULT_POLL_INTERVAL};
pub use watch::{PeerWatch, WatchReport, WATCH_INTERVAL, WATCH_MAX};

/// Why a lab test cannot run, in its SKIP line (followed by the precise reason).
pub const SKIP_REASON: &str = "needs root and bird/frr/gobgpd/exabgp";

/// With this environment variable set to `1`, a test that cannot run here fails
/// ([`skip`] panics) instead of skipping. `make test` sets it.
pub const REQUIRE_LAB_ENV: &str = "HOLDFAST_REQUIRE_LAB";

/// Whether [`REQUIRE_LAB_ENV`] is `1`.
pub fn lab_required() -> bool {
    std::env::var_os(REQUIRE_LAB_ENV).is_some_and(|v| v == "1")
}

/// For a test that cannot run here, because of `reason`: with
/// `HOLDFAST_REQUIRE_LAB=1` it panics with the reason (the test fails); otherwise it
/// prints `SKIP: <reason>` to stderr, and the test returns.
pub fn skip(reason: &str) {
    if lab_required() {
        panic!("{REQUIRE_LAB_ENV}=1 and this test cannot run here: {reason}");
    }
    eprintln!("SKIP: {reason}");
}

/// For tests: `false` when the environment can run labs with the given peers (root,
/// the base tools and the peers' tools); otherwise `true` after [`skip`] with
/// [`SKIP_REASON`] and why (a failure with `HOLDFAST_REQUIRE_LAB=1`).
pub fn skip_unless_ready(kinds: &[PeerKind]) -> bool {
    match preflight(kinds) {
        Ok(()) => false,
        Err(e) => {
            skip(&format!("{SKIP_REASON} ({e})"));
            true
        }
    }
}

/// For tests: `false` when every tool of `tools` is installed ([`find_tool`]);
/// otherwise `true` after [`skip`] naming the first missing one.
pub fn skip_unless_tools(tools: &[&str]) -> bool {
    match tools.iter().find(|t| find_tool(t).is_none()) {
        None => false,
        Some(t) => {
            skip(&format!("{SKIP_REASON} ({t} missing)"));
            true
        }
    }
}
