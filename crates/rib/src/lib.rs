//! Holdfast RIB: Adj-RIB-In, Loc-RIB, Adj-RIB-Out, policy and update
//! packing for one routing instance, as a pure, deterministic engine.
//!
//! The daemon feeds raw UPDATE bodies to [`Engine::apply_raw`] and writes the
//! returned, fully encoded messages to the peers. There is no I/O, no clock
//! and no randomness: the same calls in the same order produce byte-identical
//! output whatever the thread count.
//!
//! # Design
//! - Attributes are interned (hash-consed) in a compact stored form
//!   (`attrs::Attrs`: decision fields inline, AS_SEQUENCE and communities as
//!   boxed slices, rare attributes behind one box) shared through `Arc`; a
//!   route holds pointers only. Unused sets are swept when the intern table
//!   has doubled since the last sweep. Queries convert back to `PathAttrs`.
//! - The prefix space is split into `shards` (IPv4 by buckets of 256 sibling
//!   prefixes, so neighbouring /24s share a shard). Each shard holds, per
//!   prefix, every peer's path: the pre-policy Adj-RIB-In attributes and the
//!   post-policy Loc-RIB attributes (the same `Arc` when policy changed
//!   nothing), best path first, in a `SmallVec` with one inline slot. IPv4
//!   maps store one key byte per prefix (see `prefix_map`).
//! - Adj-RIB-Out stores, per peer and prefix, a 64-bit fingerprint of the
//!   encoded attributes last sent: enough to suppress duplicates and to send
//!   withdrawals only for advertised prefixes. [`Engine::adj_rib_out`]
//!   re-derives the attributes from the Loc-RIB (equal by construction after
//!   every call).
//! - `apply_raw` runs in three parallel phases: (1) decode + Adj-RIB-In +
//!   import policy per peer, a busy peer's messages split into ordered
//!   chunks (peers with max-prefix stay sequential); (2) Loc-RIB decision +
//!   export diff per shard, the export computed and its attribute block
//!   encoded once per update group and distinct (source, attribute set);
//!   (3) packing of prefixes behind those blocks per distinct change list,
//!   in parallel chunks. Peers of one update group with equal changes share
//!   one encoded `Arc<Vec<u8>>`.
//! - Determinism: work is always partitioned the same way (shards, chunk
//!   order) and results are concatenated in a fixed order; hash maps use
//!   fixed seeds and are never iterated to produce output without sorting.
//!
//! # RFCs covered
//! - RFC 4271 §9: decision process §9.1.2.2 (elimination steps in order,
//!   MED per neighbouring AS), implicit withdraw, AS loop detection, §9.1.3
//!   export, §9.2 update packing.
//! - RFC 4456 route reflection: §6 reflection rules, §8 ORIGINATOR_ID /
//!   CLUSTER_LIST, loop rejection, §9 cluster-list length tie-break.
//! - RFC 1997 communities (NO_EXPORT, NO_ADVERTISE, NO_EXPORT_SUBCONFED),
//!   RFC 4360 extended and RFC 8092 large community matching and setting.
//! - RFC 4724 graceful restart, helper side: stale marking, End-of-RIB sweep,
//!   restart-timer flush.
//! - RFC 4486 max-prefix Cease subcode 1 with AFI/SAFI/limit data.
//! - RFC 8212 default reject: the daemon passes `PolicyRef::None`.
//! - Kernel FIB output (`Engine::take_fib`): the best path's next hop and,
//!   with `fib_ecmp` > 1, those of the paths equal to it through every
//!   RFC 4271 §9.1.2.2 step before the BGP identifier (ECMP).
//! - RFC 7606: treat-as-withdraw and attribute-discard outcomes of the codec
//!   are applied and reported as warnings.
//!
//! # Known issues
//! - No IGP cost step (no IGP); no confederations (RFC 5065) or ADD-PATH.
//! - If a peer re-establishes with a new BGP identifier while its routes are
//!   kept (graceful restart) and re-announces identical attributes, reflected
//!   routes keep the old ORIGINATOR_ID until the path changes.
//! - The Adj-RIB-Out fingerprint is a 64-bit hash; a collision would
//!   suppress one update.
//! - Policies whose matches depend on the prefix (prefix lists, family) are
//!   evaluated per prefix without caching.
//! - An IPv6 route exported to an eBGP peer without `local_addr_v6` keeps
//!   the received next hop; one without any IPv6 next hop cannot be encoded
//!   and is recorded as advertised although nothing was sent.
//! - `apply_raw` processes at most 2048 UPDATEs as one unit; a bigger
//!   batch is split, so its output may hold several message blocks per peer
//!   (in order) and pack slightly less tightly.
//! - With glibc malloc, parallel runs with many distinct attribute sets lose
//!   much of their speedup to cross-thread frees (`malloc_consolidate`);
//!   the daemon binary should use a thread-caching allocator.
//! - Batches under 64 KiB of UPDATE bodies run on the calling thread: below
//!   that, waking the pool costs more than it saves.

mod attrs;
mod codec;
mod decision;
mod engine;
mod export;
mod intern;
pub mod policy;
mod prefix_map;
mod rib;

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::Arc;

pub use engine::{BestChange, Engine, PostChange, RpkiCounts};
pub use holdfast_rtr::{Validity, Vrp, VrpTable};
pub use holdfast_wire::{Family, Notification, PathAttrs, Prefix};
pub use policy::{
    as_path_string, Match, Policy, PolicyCtx, PolicyRef, PolicyVerdict, PrefixList,
    PrefixListEntry, SetAction, Term,
};
pub use smallvec;

/// Identifies a neighbour within an [`Engine`].
pub type PeerId = u32;

/// Peer id used for locally originated routes.
pub const LOCAL_PEER: PeerId = u32::MAX;

/// A configured neighbour and, once Established, its negotiated facts.
#[derive(Debug, Clone)]
pub struct PeerSpec {
    pub id: PeerId,
    pub address: IpAddr,
    pub remote_as: u32,
    pub local_as: u32,
    /// The remote BGP identifier (set at Established).
    pub router_id: Ipv4Addr,
    /// Our next hops on eBGP / next-hop-self.
    pub local_addr_v4: Option<Ipv4Addr>,
    pub local_addr_v6: Option<Ipv6Addr>,
    pub local_addr_v6_ll: Option<Ipv6Addr>,
    pub import: PolicyRef,
    pub export: PolicyRef,
    pub rr_client: bool,
    pub next_hop_self: bool,
    pub max_prefix: Option<u32>,
    /// Negotiated families.
    pub families: Vec<Family>,
    pub four_octet_as: bool,
}

impl PeerSpec {
    pub fn is_ebgp(&self) -> bool {
        self.remote_as != self.local_as
    }
}

/// Engine-wide configuration of one routing instance.
#[derive(Debug, Clone)]
pub struct EngineConfig {
    pub local_as: u32,
    pub router_id: Ipv4Addr,
    pub cluster_id: Option<Ipv4Addr>,
    pub shards: usize,
    /// Rayon pool size; 1 = fully sequential.
    pub threads: usize,
    pub always_compare_med: bool,
    /// LOCAL_PREF assumed when none is present (normally 100).
    pub default_local_pref: u32,
    /// Kernel FIB output ([`Engine::take_fib`]): 0 = none; otherwise the
    /// most next hops per prefix (1 = the best path only, more = ECMP).
    pub fib_ecmp: usize,
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            local_as: 0,
            router_id: Ipv4Addr::UNSPECIFIED,
            cluster_id: None,
            shards: 16,
            threads: 1,
            always_compare_med: false,
            default_local_pref: 100,
            fib_ecmp: 0,
        }
    }
}

/// The next hops of one prefix's forwarding entry (inline up to two).
pub type NextHops = smallvec::SmallVec<[IpAddr; 2]>;

/// One prefix's forwarding entry as the FIB should have it: the BGP next
/// hops to forward on, sorted and distinct; empty when the prefix has no
/// best path any more, or its best path is locally originated (not
/// installed).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FibRoute {
    pub prefix: Prefix,
    pub nexthops: NextHops,
}

/// What the daemon must do after an engine call.
#[derive(Debug, Clone, Default)]
pub struct Output {
    /// Encoded BGP messages (complete, with headers) to write to each peer,
    /// in order. Peers whose export result is identical share one Arc.
    pub messages: Vec<(PeerId, Arc<Vec<u8>>)>,
    /// Sessions that must be reset: max-prefix (Cease/1, RFC 4486) or a
    /// decode error's NOTIFICATION.
    pub resets: Vec<(PeerId, Notification)>,
    /// Non-fatal events worth logging, as (peer, text).
    pub warnings: Vec<(PeerId, String)>,
    /// Where `apply_raw` spent its time, for metrics only: it never
    /// influences results, which stay deterministic.
    pub timing: PhaseTiming,
}

/// Wall time of the phases of [`Engine::apply_raw`].
#[derive(Debug, Clone, Copy, Default)]
pub struct PhaseTiming {
    /// Decoding and Adj-RIB-In / import policy (per peer, in parallel).
    pub import: std::time::Duration,
    /// Loc-RIB decision, export and encoding (per shard, in parallel).
    pub decision: std::time::Duration,
}

impl Output {
    /// Appends another output (messages stay in call order).
    pub fn merge(&mut self, mut o: Output) {
        self.messages.append(&mut o.messages);
        self.resets.append(&mut o.resets);
        self.warnings.append(&mut o.warnings);
        self.timing.import += o.timing.import;
        self.timing.decision += o.timing.decision;
    }
}

/// Route counters of one peer.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PeerCounts {
    /// Prefixes in its Adj-RIB-In (pre-policy).
    pub received: u64,
    /// Prefixes accepted by import policy.
    pub accepted: u64,
    /// Prefixes in its Adj-RIB-Out.
    pub advertised: u64,
    /// Prefixes kept as stale (graceful restart).
    pub stale: u64,
    /// Counter: announced prefixes the import policy rejected (BMP
    /// statistics type 0; AS-path and cluster loops not included).
    pub policy_rejected: u64,
    /// Counter: announcements of a prefix with the very attributes the
    /// peer had announced it with already (BMP statistics type 1).
    pub duplicates: u64,
}
