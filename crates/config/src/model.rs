//! The validated configuration model: `[global]`, `[[instance]]`,
//! `[[neighbor]]`, `[[network]]` and `[nsr]`.

use crate::bfd::BfdSettings;
use crate::values::{
    one_or_many, prefix_str, AfiSafi, CommunityValue, ExtCommunityValue, LargeCommunityValue,
    Md5Key, NsrStore, PolicyRef,
};
use holdfast_wire::{Prefix, Prefix4, Prefix6};
use serde::{Deserialize, Serialize};
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;

/// Name of the instance every neighbour and network belongs to unless
/// told otherwise.
pub const DEFAULT_INSTANCE: &str = "default";

pub(crate) fn default_instance() -> String {
    DEFAULT_INSTANCE.to_string()
}
fn default_listen() -> Vec<SocketAddr> {
    vec![
        SocketAddr::from(([0, 0, 0, 0], 179)),
        SocketAddr::from((std::net::Ipv6Addr::UNSPECIFIED, 179)),
    ]
}
fn default_hold_time() -> u16 {
    90
}
fn default_connect_retry() -> u16 {
    5
}
fn default_shards() -> usize {
    64
}
fn default_control_socket() -> PathBuf {
    PathBuf::from("/run/holdfast/holdfastd.sock")
}
fn default_true() -> bool {
    true
}
fn default_count() -> u32 {
    1
}
pub(crate) fn default_families() -> Vec<AfiSafi> {
    vec![AfiSafi::Ipv4Unicast, AfiSafi::Ipv6Unicast]
}
fn is_false(b: &bool) -> bool {
    !*b
}

/// Log output format of the daemon.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    #[default]
    Text,
    Json,
}

/// `[global]`: settings of the speaker and defaults for every session.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Global {
    pub asn: u32,
    pub router_id: Ipv4Addr,
    /// Addresses to accept BGP connections on; a string or a list.
    #[serde(default = "default_listen", deserialize_with = "one_or_many")]
    pub listen: Vec<SocketAddr>,
    #[serde(default = "default_hold_time")]
    pub hold_time: u16,
    /// Keepalive interval; `None` means a third of the negotiated hold time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub keepalive: Option<u16>,
    #[serde(default = "default_connect_retry")]
    pub connect_retry: u16,
    /// Worker threads for route processing; `None` means one per CPU core
    /// (see [`Global::effective_workers`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workers: Option<usize>,
    /// Threads that run the sessions' I/O, timers and peer cores; `None`
    /// means one per CPU core (see [`Global::effective_io_threads`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub io_threads: Option<usize>,
    #[serde(default = "default_shards")]
    pub shards: usize,
    #[serde(default = "default_control_socket")]
    pub control_socket: PathBuf,
    /// The group (a name or a number) that may use the control socket:
    /// it is then created 0660 and owned by this group; 0600 without.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub control_socket_group: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metrics_listen: Option<SocketAddr>,
    #[serde(default)]
    pub log_format: LogFormat,
    /// Restart time advertised in the Graceful Restart capability (RFC 4724);
    /// `None` means the capability is not advertised.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub graceful_restart_time: Option<u16>,
    /// Route-reflector cluster id (RFC 4456); defaults to the router id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_id: Option<Ipv4Addr>,
    #[serde(default)]
    pub always_compare_med: bool,
    /// The GoBGP gRPC API (`gobgp` client): listen address; off when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grpc_listen: Option<SocketAddr>,
    /// TLS for the gRPC API: certificate chain and private key (PEM).
    /// Both or neither; with them, plaintext clients are refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grpc_tls_cert: Option<PathBuf>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grpc_tls_key: Option<PathBuf>,
    /// Mutual TLS for the gRPC API: the CA (PEM) whose client
    /// certificates it requires; a client without one is refused. Needs
    /// `grpc_tls_cert` and `grpc_tls_key`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grpc_tls_ca: Option<PathBuf>,
    /// Serve the gRPC API on a non-loopback `grpc_listen` without client
    /// certificates (`grpc_tls_ca`): any client that reaches it may add
    /// routes and reset sessions. Refused without it; warned at start.
    #[serde(default, skip_serializing_if = "is_false")]
    pub grpc_insecure: bool,
}

impl Global {
    /// `workers`, or when unset one per CPU core but one, which is left to
    /// the I/O thread that runs sessions and timers (at least one worker).
    pub fn effective_workers(&self) -> usize {
        self.workers.unwrap_or_else(|| {
            std::thread::available_parallelism().map_or(1, |n| n.get().saturating_sub(1).max(1))
        })
    }
    /// `io_threads`, or when unset one per CPU core. With one, every
    /// session runs on a single-threaded runtime; with more, on a
    /// multi-threaded one whose threads take sessions' tasks as they
    /// become ready.
    pub fn effective_io_threads(&self) -> usize {
        self.io_threads
            .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
    }
    /// The cluster id used when reflecting (RFC 4456 §7).
    pub fn effective_cluster_id(&self) -> Ipv4Addr {
        self.cluster_id.unwrap_or(self.router_id)
    }
}

/// `[[instance]]`: a routing instance (its own RIB), optionally bound to a
/// Linux VRF device.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Instance {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vrf: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub router_id: Option<Ipv4Addr>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub asn: Option<u32>,
    /// `[kernel]` (default instance) or `kernel = { ... }`: install the
    /// Loc-RIB's best paths into a kernel routing table.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kernel: Option<Kernel>,
}

/// The rtnetlink protocol number of holdfastd's kernel routes (`ip route
/// ... proto 179`): BGP's port, unused by iproute2's list, BIRD (12) and
/// FRR (186 and up).
pub const DEFAULT_KERNEL_PROTOCOL: u8 = 179;

fn default_kernel_table() -> u32 {
    254
}
fn default_kernel_metric() -> u32 {
    32
}
fn default_kernel_ecmp() -> u16 {
    1
}
fn default_kernel_startup_hold() -> u32 {
    60
}
fn default_kernel_protocol() -> u8 {
    DEFAULT_KERNEL_PROTOCOL
}

/// The kernel FIB of one routing instance (docs/config.md, `[kernel]`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Kernel {
    /// Routing table id (254 = main).
    #[serde(default = "default_kernel_table")]
    pub table: u32,
    /// Route priority (`ip route ... metric`).
    #[serde(default = "default_kernel_metric")]
    pub metric: u32,
    /// Most next hops per route: 1 = the best path only, more = ECMP.
    #[serde(default = "default_kernel_ecmp")]
    pub ecmp: u16,
    /// rtnetlink protocol number our routes carry.
    #[serde(default = "default_kernel_protocol")]
    pub protocol: u8,
    /// Seconds after a start during which our routes found in the table
    /// and not (yet) wanted by the RIB are kept, while the sessions bring
    /// the routes back (a takeover has its tables and does not wait).
    #[serde(default = "default_kernel_startup_hold")]
    pub startup_hold: u32,
    /// Leave the routes in the table when holdfastd stops normally
    /// (BIRD's `persist`); by default a normal stop removes them.
    #[serde(default, skip_serializing_if = "is_false")]
    pub persist: bool,
}

impl Instance {
    pub(crate) fn default_instance() -> Self {
        Instance {
            name: default_instance(),
            vrf: None,
            router_id: None,
            asn: None,
            kernel: None,
        }
    }
    pub fn effective_asn(&self, g: &Global) -> u32 {
        self.asn.unwrap_or(g.asn)
    }
    pub fn effective_router_id(&self, g: &Global) -> Ipv4Addr {
        self.router_id.unwrap_or(g.router_id)
    }
}

/// Identity of a session across reloads.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct NeighborKey {
    pub instance: String,
    pub address: IpAddr,
}

impl fmt::Display for NeighborKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.instance, self.address)
    }
}

/// `[[neighbor]]`: one BGP session. Optional timers fall back to `[global]`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Neighbor {
    pub address: IpAddr,
    pub remote_asn: u32,
    /// Local AS for this session. After loading it is also set when the
    /// neighbour's instance overrides `asn`, so [`Neighbor::is_ebgp`] is exact.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub local_asn: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    pub instance: String,
    /// Import policy after RFC 8212 defaulting.
    pub import: PolicyRef,
    /// Export policy after RFC 8212 defaulting.
    pub export: PolicyRef,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hold_time: Option<u16>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub keepalive: Option<u16>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub connect_retry: Option<u16>,
    pub passive: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub local_address: Option<IpAddr>,
    /// Linux VRF device the session socket is bound to (`SO_BINDTODEVICE`);
    /// after loading it is inherited from the instance when unset.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub vrf: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub md5_password: Option<Md5Key>,
    /// GTSM (RFC 5082): the number of hops the peer may be away (1 = directly
    /// connected). `ttl_security = true` means 1.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ttl_security: Option<u8>,
    /// eBGP multihop: the TTL of outgoing packets.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub multihop: Option<u8>,
    pub families: Vec<AfiSafi>,
    #[serde(skip_serializing_if = "is_false")]
    pub route_reflector_client: bool,
    #[serde(skip_serializing_if = "is_false")]
    pub next_hop_self: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_prefix: Option<u32>,
    /// Seconds after which a session torn down by `max_prefix` restarts;
    /// `None` means it stays down until cleared by the operator.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_prefix_restart: Option<u32>,
    pub graceful_restart: bool,
    pub enabled: bool,
    /// BFD under this session, resolved against `[bfd]`; `None` = off.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bfd: Option<BfdSettings>,
}

impl Neighbor {
    pub fn key(&self) -> NeighborKey {
        NeighborKey {
            instance: self.instance.clone(),
            address: self.address,
        }
    }
    /// The local AS of this session.
    pub fn local_as(&self, g: &Global) -> u32 {
        self.local_asn.unwrap_or(g.asn)
    }
    pub fn is_ebgp(&self, g: &Global) -> bool {
        self.remote_asn != self.local_as(g)
    }
    /// Hold time proposed in our OPEN.
    pub fn effective_hold_time(&self, g: &Global) -> u16 {
        self.hold_time.unwrap_or(g.hold_time)
    }
    /// Keepalive interval to use once `negotiated_hold` is known: the
    /// configured value (capped below the hold time) or a third of it.
    pub fn effective_keepalive(&self, g: &Global, negotiated_hold: u16) -> u16 {
        if negotiated_hold == 0 {
            return 0;
        }
        match self.keepalive.or(g.keepalive) {
            Some(k) => k.min(negotiated_hold.saturating_sub(1)).max(1),
            None => (negotiated_hold / 3).max(1),
        }
    }
    pub fn effective_connect_retry(&self, g: &Global) -> u16 {
        self.connect_retry.unwrap_or(g.connect_retry)
    }
    /// Whether the Graceful Restart capability is advertised to this peer.
    pub fn advertise_graceful_restart(&self, g: &Global) -> bool {
        self.graceful_restart && g.graceful_restart_time.is_some()
    }
    pub fn has_family(&self, f: AfiSafi) -> bool {
        self.families.contains(&f)
    }
}

/// `[[network]]` / `[[instance.static]]`: locally originated routes.
/// With `count = N` it originates N consecutive prefixes of the same length
/// starting at `prefix` (10.0.0.0/24, 10.0.1.0/24, ...).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Network {
    #[serde(default = "default_instance")]
    pub instance: String,
    #[serde(with = "prefix_str")]
    pub prefix: Prefix,
    #[serde(default = "default_count")]
    pub count: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_hop: Option<IpAddr>,
    #[serde(
        default,
        deserialize_with = "one_or_many",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub communities: Vec<CommunityValue>,
    #[serde(
        default,
        deserialize_with = "one_or_many",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub large_communities: Vec<LargeCommunityValue>,
    #[serde(
        default,
        deserialize_with = "one_or_many",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub ext_communities: Vec<ExtCommunityValue>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub med: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub local_pref: Option<u32>,
}

impl Network {
    /// How many prefixes of this length exist from `prefix` to the end of
    /// the address space (the upper bound for `count`).
    pub(crate) fn room(&self) -> u128 {
        match self.prefix {
            Prefix::V4(p) if p.len == 0 => 1,
            Prefix::V4(p) => (1u128 << p.len) - u128::from(p.addr >> (32 - p.len)),
            Prefix::V6(p) if p.len == 0 => 1,
            Prefix::V6(p) if p.len == 128 => u128::MAX - p.addr + 1,
            Prefix::V6(p) => (1u128 << p.len) - (p.addr >> (128 - p.len)),
        }
    }

    /// The `count` prefixes this entry originates, in address order.
    pub fn prefixes(&self) -> impl Iterator<Item = Prefix> {
        let start = self.prefix;
        (0..u128::from(self.count.max(1))).map(move |i| match start {
            Prefix::V4(p) => {
                let step = if p.len == 0 { 0 } else { 1u32 << (32 - p.len) };
                let i = u32::try_from(i).unwrap_or(u32::MAX);
                Prefix::V4(Prefix4 {
                    addr: p.addr.wrapping_add(step.wrapping_mul(i)),
                    len: p.len,
                })
            }
            Prefix::V6(p) => {
                let step = if p.len == 0 {
                    0
                } else {
                    1u128 << (128 - p.len)
                };
                Prefix::V6(Prefix6 {
                    addr: p.addr.wrapping_add(step.wrapping_mul(i)),
                    len: p.len,
                })
            }
        })
    }
}

/// `[nsr]`: non-stop routing (docs/nsr.md).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Nsr {
    #[serde(default = "default_true")]
    pub enabled: bool,
    pub store: NsrStore,
    /// Name of this speaker in the store (shared by the active/standby pair).
    pub instance: String,
    #[serde(default)]
    pub manage_address: bool,
    /// Service address moved to the active speaker when `manage_address`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub address: Option<IpAddr>,
    /// Netfilter queue number of the ACK gate (iptables NFQUEUE target).
    #[serde(default = "default_nfqueue")]
    pub queue: u16,
    /// A session's replicated logs are compacted into a table snapshot
    /// once they exceed this many bytes (or twice the last snapshot).
    #[serde(default = "default_compact_bytes")]
    pub compact_bytes: u64,
    /// A compaction is only made when the session's routes set, replaced
    /// or removed since the last one number at least this many times the
    /// routes it holds (the log is mostly dead); 0: always.
    #[serde(default = "default_compact_ratio")]
    pub compact_ratio: f64,
    /// Replicas of the Redis master that must have every store write (and
    /// every claim of the instance) before it counts as done (`WAIT`); 0:
    /// the master's answer is enough.
    #[serde(default)]
    pub wait_replicas: u32,
    /// How long a write waits for those replicas (`WAIT`'s timeout), in
    /// milliseconds; fewer replicas in time is a failed write.
    #[serde(default = "default_wait_timeout_ms")]
    pub wait_timeout_ms: u64,
    /// The store's Redis ACL user (docs/security.md); `None`: the
    /// URL's, if any. Needs a password (`store_password_file`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub store_user: Option<String>,
    /// A file holding the store password (one line; not readable by
    /// others), read at start and at each connection; the password never
    /// enters the configuration, its output or the logs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub store_password_file: Option<std::path::PathBuf>,
}

impl Nsr {
    /// The store URL to connect to: `store` with `store_user` and the
    /// password of `store_password_file` (read now). Errors name the key.
    pub fn store_url(&self) -> Result<crate::NsrStore, crate::ConfigError> {
        let mut url = self.store.clone();
        if self.store_user.is_none() && self.store_password_file.is_none() {
            return Ok(url);
        }
        let password = match &self.store_password_file {
            Some(p) => Some(crate::load::read_password_file(
                "nsr.store_password_file",
                p,
            )?),
            None => None,
        };
        if let Some((username, pw)) = url.credentials_mut() {
            if self.store_user.is_some() {
                username.clone_from(&self.store_user);
            }
            if password.is_some() {
                *pw = password;
            }
        }
        Ok(url)
    }

    /// The store as logs and `show nsr` name it: the URL with its user
    /// and without its password (`***`).
    pub fn store_desc(&self) -> String {
        let mut url = self.store.clone();
        if let Some((username, password)) = url.credentials_mut() {
            if self.store_user.is_some() {
                username.clone_from(&self.store_user);
            }
            if self.store_password_file.is_some() {
                *password = Some("***".into());
            }
        }
        url.redacted()
    }
}

/// The longest `wait_timeout_ms`: below the 500 ms every store command
/// must answer in, with room for the round trip.
pub const MAX_WAIT_TIMEOUT_MS: u64 = 400;

fn default_wait_timeout_ms() -> u64 {
    250
}

fn default_compact_bytes() -> u64 {
    16 * 1024 * 1024
}

fn default_compact_ratio() -> f64 {
    2.0
}

fn default_nfqueue() -> u16 {
    1707
}

/// `[[mrt]]`: MRT files (RFC 6396) written by the daemon.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Mrt {
    /// `table`: a TABLE_DUMP_V2 dump of `table` every `interval_secs`;
    /// `updates`: a BGP4MP log of the UPDATEs received and the session
    /// state changes, a new file every `interval_secs` (0: one file).
    pub kind: MrtKind,
    /// Where to write: `%Y %m %d %H %M %S` (UTC) and `%s` (seconds since
    /// the epoch) take the time of the dump or of the file's start.
    pub file: String,
    #[serde(default)]
    pub interval_secs: u64,
    /// `table` only: `loc`, `in` or `out` (every neighbour's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub table: Option<MrtTable>,
    #[serde(default = "default_instance")]
    pub instance: String,
    /// `updates` only: whose messages (empty: every neighbour of the
    /// instance).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub neighbors: Vec<IpAddr>,
}

/// What an `[[mrt]]` writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum MrtKind {
    Table,
    Updates,
}

/// Which table an MRT dump holds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum MrtTable {
    #[default]
    Loc,
    In,
    Out,
}

/// `[[bmp]]`: a BMP collector (RFC 7854) this speaker connects to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Bmp {
    /// The collector's `address:port`.
    pub address: std::net::SocketAddr,
    /// Seconds between Statistics Reports (0: none).
    #[serde(default = "default_bmp_stats")]
    pub statistics_interval_secs: u64,
    /// Which tables are monitored.
    #[serde(default = "default_bmp_monitoring")]
    pub route_monitoring: Vec<BmpTable>,
    /// The first reconnection delay; doubled on each failure up to 30 s.
    #[serde(default = "default_bmp_retry")]
    pub retry_secs: u64,
    /// The sysName of the Initiation message (default: the router ID).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sys_name: Option<String>,
}

/// A table a BMP session monitors.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum BmpTable {
    /// Adj-RIB-In before import policy (RFC 7854), the UPDATEs as received.
    PrePolicy,
    /// Adj-RIB-In after import policy (L flag).
    PostPolicy,
    /// The Loc-RIB (RFC 9069, peer type 3).
    LocRib,
    /// Adj-RIB-Out (RFC 8671, O flag).
    AdjRibOut,
}

fn default_bmp_stats() -> u64 {
    60
}

fn default_bmp_monitoring() -> Vec<BmpTable> {
    vec![BmpTable::PrePolicy]
}

fn default_bmp_retry() -> u64 {
    1
}

/// `[[rpki]]`: an RPKI cache (RTR, RFC 8210 / RFC 6810) this speaker takes
/// its VRPs from. The timers are RFC 8210 §6's; a version 1 cache's End of
/// Data replaces them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Rpki {
    /// The cache's `address:port` (RTR over TCP, usually port 323 or 8282).
    pub address: std::net::SocketAddr,
    /// Lower is preferred (RFC 8210 §10): the most preferred reachable cache
    /// is used; the others only while it is not.
    #[serde(default = "default_rpki_preference")]
    pub preference: u8,
    /// Seconds between Serial Queries (1..=86400).
    #[serde(default = "default_rpki_refresh")]
    pub refresh_secs: u32,
    /// Longest wait before reconnecting after a failure (1..=7200); the
    /// first retry is after 1 s, doubling up to it.
    #[serde(default = "default_rpki_retry")]
    pub retry_secs: u32,
    /// Seconds the VRPs are kept without a successful update (600..=172800,
    /// more than refresh_secs and retry_secs).
    #[serde(default = "default_rpki_expire")]
    pub expire_secs: u32,
}

fn default_rpki_preference() -> u8 {
    100
}

fn default_rpki_refresh() -> u32 {
    3600
}

fn default_rpki_retry() -> u32 {
    600
}

fn default_rpki_expire() -> u32 {
    7200
}
