//! Lab scenarios: the TOML files `holdfast lab up` builds a topology from
//! (`lab/scenarios/<name>/scenario.toml`; the format is described in
//! `lab/scenarios/README.md`).
//!
//! A scenario is the NSR topology of [`holdfast_lab::nsr`] made explicit: hosts on one bridge
//! (198.18.0.0/24, fd00::/64), a Redis state store on one host, BGP peers (frr, bird,
//! gobgp, exabgp; at most one per host), one holdfastd unit with a primary and a backup
//! host, and the service address that moves between them.
//!
//! ```toml
//! name = "nsr-basic"
//! service = { v4 = "198.18.0.10", v6 = "fd00::10" }
//! redis = { host = "redis" }
//!
//! [[host]]
//! name = "peer"
//! v4 = "198.18.0.1"
//! v6 = "fd00::1"
//! # ... redis, a, b
//!
//! [[peer]]
//! name = "frr"
//! kind = "frr"
//! host = "peer"
//! asn = 65001
//! routes = [{ prefix = "203.0.113.0/24" }, { prefix = "20.0.0.0/24", count = 10 }]
//!
//! [[holdfastd]]
//! name = "edge"
//! instance = "edge-1"
//! primary = "a"
//! backup = "b"
//! neighbors = ["frr"]
//! ```
//!
//! [`Scenario::parse`] rejects unknown keys and names the key of every error
//! (`peer[0].host: unknown host "x" (hosts: peer, redis, a, b)`).

use std::collections::BTreeSet;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::path::Path;

use serde::{Deserialize, Serialize};

use holdfast_lab::{
    io_ctx, nsr_config, LabError, NeighborSpec, NsrTopo, PeerKind, PeerSpec, Result, RouteSpec,
    NSR_LOCAL_AS, NSR_V4_LEN, NSR_V6_LEN,
};

/// File name of a scenario inside its directory.
pub const SCENARIO_FILE: &str = "scenario.toml";
/// The bridge subnet every host address must be in (IPv4; prefix length
/// [`NSR_V4_LEN`]).
pub const BRIDGE_V4: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 0);
/// The bridge subnet every host address must be in (IPv6; prefix length
/// [`NSR_V6_LEN`]).
pub const BRIDGE_V6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 0);
/// Most routes one route set may generate.
pub const MAX_ROUTE_COUNT: u32 = 1_000_000;

/// A lab scenario (one `scenario.toml`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    /// Scenario name (`[a-z0-9_-]`, 1..=32 chars).
    pub name: String,
    /// One line for `lab list` / `lab status`.
    #[serde(default)]
    pub description: String,
    /// The service address: the speaker's router id and session address, on the host
    /// of the current primary.
    pub service: Service,
    /// `[[host]]`: network namespaces, all on one bridge.
    #[serde(rename = "host")]
    pub hosts: Vec<HostSpec>,
    /// `[redis]`: the NSR state store.
    pub redis: RedisSpec,
    /// `[[peer]]`: real BGP daemons.
    #[serde(rename = "peer", default)]
    pub peers: Vec<PeerUnitSpec>,
    /// `[[holdfastd]]`: the speaker unit (exactly one).
    pub holdfastd: Vec<HoldfastdSpec>,
    /// `relay = { host = "relay" }`: `holdfast-bfd-relay` on that host, against the
    /// scenario's Redis and the unit's instance.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub relay: Option<RelaySpec>,
}

/// The BFD relay unit.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RelaySpec {
    /// Host it runs on: a host of its own on the bridge.
    pub host: String,
}

/// BFD under a peer's session (both ends: the peer's daemon and holdfastd).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BfdSpec {
    /// Desired min TX and required min RX interval, ms (10..=60000).
    pub interval_ms: u32,
    /// Detect multiplier (1..=255).
    pub multiplier: u8,
}

/// The service address pair.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Service {
    /// IPv4, in 198.18.0.0/24.
    pub v4: Ipv4Addr,
    /// IPv6, in fd00::/64.
    pub v6: Ipv6Addr,
}

/// One host (network namespace) on the bridge.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HostSpec {
    /// Host name (`[a-z0-9_]`, 1..=20 chars).
    pub name: String,
    /// Its IPv4 address on the bridge, in 198.18.0.0/24.
    pub v4: Ipv4Addr,
    /// Its IPv6 address on the bridge, in fd00::/64.
    pub v6: Ipv6Addr,
}

/// The Redis unit.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RedisSpec {
    /// Host it runs on (listening on the host's IPv4 address).
    pub host: String,
    /// TCP port.
    #[serde(default = "default_redis_port")]
    pub port: u16,
}

fn default_redis_port() -> u16 {
    6379
}

/// One BGP peer unit.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PeerUnitSpec {
    /// Unit name (`[a-z0-9_]`, 1..=20 chars), unique among all units.
    pub name: String,
    /// `frr`, `bird` (or `bird2`), `gobgp` (or `gobgpd`), `exabgp`.
    pub kind: String,
    /// Host it runs on (one peer per host: each listens on port 179).
    pub host: String,
    /// Its AS.
    pub asn: u32,
    /// BGP identifier (default: the host's IPv4 address).
    #[serde(default)]
    pub router_id: Option<Ipv4Addr>,
    /// Routes it originates.
    #[serde(default)]
    pub routes: Vec<RouteSet>,
    /// BFD under its session with holdfastd (frr: bfdd, bird2: `protocol bfd`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bfd: Option<BfdSpec>,
}

/// The holdfastd unit: a primary and a backup host sharing one NSR instance.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HoldfastdSpec {
    /// Unit name (`[a-z0-9_]`, 1..=16 chars), unique among all units; processes are
    /// named `<name>_<n>` (n = 0, 1, ... per start).
    pub name: String,
    /// `[nsr] instance`.
    pub instance: String,
    /// Local AS (default 65000).
    #[serde(default = "default_asn")]
    pub asn: u32,
    /// Host of the first primary (holds the service address at first).
    pub primary: String,
    /// Host the first takeover goes to (then the two swap roles).
    pub backup: String,
    /// Peer units it has a session with (over IPv4, service address to the peer host's
    /// address).
    pub neighbors: Vec<String>,
    /// Hold time proposed by holdfastd and by its peers (default: each daemon's own).
    #[serde(default)]
    pub hold_time: Option<u16>,
    /// Routes it originates (`[[network]]`).
    #[serde(default)]
    pub routes: Vec<RouteSet>,
    /// What it announces to its peers (default `"all"`).
    #[serde(default)]
    pub export: ExportSpec,
}

/// A holdfastd unit's export to its peers.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ExportSpec {
    /// Its own routes and every route it learned (`export = "all"`).
    #[default]
    All,
    /// Only the routes it originates (a policy accepting an empty AS path).
    Own,
}

/// Name of the export policy of [`ExportSpec::Own`].
const OWN_ROUTES_POLICY: &str = "own-routes";

fn default_asn() -> u32 {
    NSR_LOCAL_AS
}

/// Routes to originate: `prefix`, and with `count` > 1 that many consecutive prefixes
/// of the same length (`20.0.0.0/24`, `20.0.1.0/24`, ...).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RouteSet {
    /// First (or only) prefix, host bits zero.
    pub prefix: String,
    /// How many (1..=1,000,000).
    #[serde(default = "one")]
    pub count: u32,
}

fn one() -> u32 {
    1
}

fn bad(key: impl std::fmt::Display, msg: impl std::fmt::Display) -> LabError {
    LabError::Invalid(format!("{key}: {msg}"))
}

fn check_name(key: &str, name: &str, max: usize, dash: bool) -> Result<()> {
    let ok = !name.is_empty()
        && name.len() <= max
        && name.bytes().all(|b| {
            b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || (dash && b == b'-')
        });
    if ok {
        Ok(())
    } else {
        let chars = if dash { "[a-z0-9_-]" } else { "[a-z0-9_]" };
        Err(bad(
            key,
            format!("`{name}` must be 1..={max} chars of {chars}"),
        ))
    }
}

fn in_bridge_v4(a: Ipv4Addr) -> bool {
    let mask = u32::MAX << (32 - u32::from(NSR_V4_LEN));
    let host = u32::from(a) & !mask;
    u32::from(a) & mask == u32::from(BRIDGE_V4) && host != 0 && host != !mask
}

fn in_bridge_v6(a: Ipv6Addr) -> bool {
    let mask = u128::MAX << (128 - u32::from(NSR_V6_LEN));
    u128::from(a) & mask == u128::from(BRIDGE_V6) && u128::from(a) & !mask != 0
}

impl RouteSet {
    /// The prefixes of the set, in order.
    pub fn expand(&self) -> Result<Vec<String>> {
        let (addr, len) = self
            .prefix
            .split_once('/')
            .ok_or_else(|| bad("prefix", format!("`{}` has no length", self.prefix)))?;
        let addr: IpAddr = addr
            .trim()
            .parse()
            .map_err(|_| bad("prefix", format!("bad address in `{}`", self.prefix)))?;
        let len: u32 = len
            .trim()
            .parse()
            .map_err(|_| bad("prefix", format!("bad length in `{}`", self.prefix)))?;
        if self.count == 0 || self.count > MAX_ROUTE_COUNT {
            return Err(bad("count", format!("must be 1..={MAX_ROUTE_COUNT}")));
        }
        let count = u128::from(self.count);
        let (bits, start) = match addr {
            IpAddr::V4(a) => (32u32, u128::from(u32::from(a))),
            IpAddr::V6(a) => (128u32, u128::from(a)),
        };
        if len > bits {
            return Err(bad(
                "prefix",
                format!("length too long in `{}`", self.prefix),
            ));
        }
        // Addresses one prefix spans (`None`: the whole space, length 0).
        let step: Option<u128> = 1u128.checked_shl(bits - len).filter(|_| bits - len < 128);
        let host_bits = match step {
            Some(s) => start & (s - 1),
            None => start,
        };
        if host_bits != 0 {
            return Err(bad(
                "prefix",
                format!("`{}` has host bits set", self.prefix),
            ));
        }
        let space: u128 = if bits == 128 {
            u128::MAX
        } else {
            (1u128 << bits) - 1
        };
        // The last prefix's first address must still be in the address space.
        let room = step.map_or(0, |s| (space - start) / s);
        let step = step.unwrap_or(0);
        if count - 1 > room {
            return Err(bad(
                "count",
                format!(
                    "{} prefixes from `{}` run past the end of the address space",
                    self.count, self.prefix
                ),
            ));
        }
        Ok((0..count)
            .map(|i| {
                let a = start + i * step;
                match addr {
                    IpAddr::V4(_) => format!("{}/{len}", Ipv4Addr::from(a as u32)),
                    IpAddr::V6(_) => format!("{}/{len}", Ipv6Addr::from(a)),
                }
            })
            .collect())
    }
}

/// Parses a peer kind: `frr`, `bird`/`bird2`, `gobgp`/`gobgpd`, `exabgp`.
pub fn parse_peer_kind(s: &str) -> Option<PeerKind> {
    match s {
        "frr" => Some(PeerKind::Frr),
        "bird" | "bird2" => Some(PeerKind::Bird),
        "gobgp" | "gobgpd" => Some(PeerKind::Gobgp),
        "exabgp" => Some(PeerKind::Exabgp),
        _ => None,
    }
}

fn check_routes(key: &str, routes: &[RouteSet]) -> Result<()> {
    for (j, r) in routes.iter().enumerate() {
        r.expand().map_err(|e| match e {
            LabError::Invalid(m) => LabError::Invalid(format!("{key}[{j}].{m}")),
            e => e,
        })?;
    }
    Ok(())
}

impl Scenario {
    /// Parses and validates a scenario text.
    pub fn parse(text: &str) -> Result<Scenario> {
        let sc: Scenario = serde_path_to_error::deserialize(toml::Deserializer::new(text))
            .map_err(|e| {
                let path = e.path().to_string();
                let inner = e.into_inner();
                let msg = inner.message().trim_end().to_string();
                let at = inner
                    .span()
                    .map(|s| {
                        let before = &text[..s.start.min(text.len())];
                        format!(" (line {})", before.matches('\n').count() + 1)
                    })
                    .unwrap_or_default();
                if path == "." {
                    LabError::Invalid(format!("{msg}{at}"))
                } else {
                    bad(path, format!("{msg}{at}"))
                }
            })?;
        sc.validate()?;
        Ok(sc)
    }

    /// Reads, parses and validates a scenario file; errors start with its path.
    pub fn load(path: &Path) -> Result<Scenario> {
        let text = std::fs::read_to_string(path)
            .map_err(io_ctx(format!("reading scenario {}", path.display())))?;
        Scenario::parse(&text).map_err(|e| match e {
            LabError::Invalid(m) => LabError::Invalid(format!("{}: {m}", path.display())),
            e => e,
        })
    }

    /// Checks everything a lab needs; errors name the key.
    pub fn validate(&self) -> Result<()> {
        check_name("name", &self.name, 32, true)?;
        if !in_bridge_v4(self.service.v4) {
            return Err(bad(
                "service.v4",
                format!(
                    "{} is not a host address in {BRIDGE_V4}/{NSR_V4_LEN}",
                    self.service.v4
                ),
            ));
        }
        if !in_bridge_v6(self.service.v6) {
            return Err(bad(
                "service.v6",
                format!(
                    "{} is not a host address in {BRIDGE_V6}/{NSR_V6_LEN}",
                    self.service.v6
                ),
            ));
        }
        if self.hosts.is_empty() {
            return Err(bad("host", "at least one [[host]] is needed"));
        }
        let mut names = BTreeSet::new();
        let mut v4s = BTreeSet::from([IpAddr::V4(self.service.v4)]);
        let mut v6s = BTreeSet::from([IpAddr::V6(self.service.v6)]);
        for (i, h) in self.hosts.iter().enumerate() {
            check_name(&format!("host[{i}].name"), &h.name, 20, false)?;
            if !names.insert(h.name.as_str()) {
                return Err(bad(
                    format!("host[{i}].name"),
                    format!("host `{}` is defined twice", h.name),
                ));
            }
            if !in_bridge_v4(h.v4) {
                return Err(bad(
                    format!("host[{i}].v4"),
                    format!("{} is not a host address in {BRIDGE_V4}/{NSR_V4_LEN}", h.v4),
                ));
            }
            if !in_bridge_v6(h.v6) {
                return Err(bad(
                    format!("host[{i}].v6"),
                    format!("{} is not a host address in {BRIDGE_V6}/{NSR_V6_LEN}", h.v6),
                ));
            }
            if !v4s.insert(IpAddr::V4(h.v4)) {
                return Err(bad(
                    format!("host[{i}].v4"),
                    format!("{} is already used (by another host or the service)", h.v4),
                ));
            }
            if !v6s.insert(IpAddr::V6(h.v6)) {
                return Err(bad(
                    format!("host[{i}].v6"),
                    format!("{} is already used (by another host or the service)", h.v6),
                ));
            }
        }
        let host_list = self
            .hosts
            .iter()
            .map(|h| h.name.as_str())
            .collect::<Vec<_>>()
            .join(", ");
        let known = |key: String, name: &str| -> Result<()> {
            if names.contains(name) {
                Ok(())
            } else {
                Err(bad(
                    key,
                    format!("unknown host \"{name}\" (hosts: {host_list})"),
                ))
            }
        };
        known("redis.host".into(), &self.redis.host)?;
        if self.redis.port == 0 {
            return Err(bad("redis.port", "must be 1..=65535"));
        }
        let mut units = BTreeSet::from(["redis"]);
        let mut peer_hosts: Vec<(&str, &str)> = Vec::new();
        for (i, p) in self.peers.iter().enumerate() {
            check_name(&format!("peer[{i}].name"), &p.name, 20, false)?;
            if !units.insert(p.name.as_str()) {
                return Err(bad(
                    format!("peer[{i}].name"),
                    format!("unit name `{}` is already used", p.name),
                ));
            }
            if parse_peer_kind(&p.kind).is_none() {
                return Err(bad(
                    format!("peer[{i}].kind"),
                    format!("unknown kind \"{}\" (frr, bird, gobgp, exabgp)", p.kind),
                ));
            }
            known(format!("peer[{i}].host"), &p.host)?;
            if let Some((_, other)) = peer_hosts.iter().find(|(h, _)| *h == p.host) {
                return Err(bad(
                    format!("peer[{i}].host"),
                    format!(
                        "host `{}` already runs peer `{other}` (one BGP daemon per host: each listens on port 179)",
                        p.host
                    ),
                ));
            }
            peer_hosts.push((&p.host, &p.name));
            if p.asn == 0 {
                return Err(bad(format!("peer[{i}].asn"), "must be 1..=4294967295"));
            }
            if p.router_id.is_some_and(|r| r.is_unspecified()) {
                return Err(bad(format!("peer[{i}].router_id"), "must not be 0.0.0.0"));
            }
            check_routes(&format!("peer[{i}].routes"), &p.routes)?;
            if let Some(b) = p.bfd {
                if !(10..=60_000).contains(&b.interval_ms) {
                    return Err(bad(
                        format!("peer[{i}].bfd.interval_ms"),
                        "must be 10..=60000",
                    ));
                }
                if b.multiplier == 0 {
                    return Err(bad(format!("peer[{i}].bfd.multiplier"), "must be 1..=255"));
                }
                if !matches!(
                    parse_peer_kind(&p.kind),
                    Some(PeerKind::Frr | PeerKind::Bird)
                ) {
                    return Err(bad(
                        format!("peer[{i}].bfd"),
                        format!("kind \"{}\" runs no BFD in the lab (frr, bird)", p.kind),
                    ));
                }
            }
        }
        if let Some(r) = &self.relay {
            known("relay.host".into(), &r.host)?;
            if let Some((_, p)) = peer_hosts.iter().find(|(h, _)| *h == r.host) {
                return Err(bad(
                    "relay.host",
                    format!(
                        "host `{}` runs peer `{p}` (the relay needs a host of its own)",
                        r.host
                    ),
                ));
            }
            if r.host == self.redis.host
                || self
                    .holdfastd
                    .iter()
                    .any(|u| u.primary == r.host || u.backup == r.host)
            {
                return Err(bad(
                    "relay.host",
                    format!(
                        "host `{}` runs Redis or holdfastd (the relay needs a host of its own)",
                        r.host
                    ),
                ));
            }
            if !self.peers.iter().any(|p| p.bfd.is_some()) {
                return Err(bad("relay", "no peer has `bfd`: nothing to relay"));
            }
        }
        if self.holdfastd.len() != 1 {
            return Err(bad(
                "holdfastd",
                format!(
                    "exactly one [[holdfastd]] unit is supported (one service address), found {}",
                    self.holdfastd.len()
                ),
            ));
        }
        let mut neighbour_of = BTreeSet::new();
        for (i, u) in self.holdfastd.iter().enumerate() {
            let key = |k: &str| format!("holdfastd[{i}].{k}");
            check_name(&key("name"), &u.name, 16, false)?;
            if !units.insert(u.name.as_str()) {
                return Err(bad(
                    key("name"),
                    format!("unit name `{}` is already used", u.name),
                ));
            }
            if u.instance.is_empty()
                || u.instance.len() > 64
                || !u.instance.chars().all(|c| c.is_ascii_graphic())
            {
                return Err(bad(
                    key("instance"),
                    "must be 1..=64 printable characters without spaces",
                ));
            }
            if u.asn == 0 {
                return Err(bad(key("asn"), "must be 1..=4294967295"));
            }
            known(key("primary"), &u.primary)?;
            known(key("backup"), &u.backup)?;
            if u.primary == u.backup {
                return Err(bad(key("backup"), "must differ from `primary`"));
            }
            for (k, h) in [("primary", &u.primary), ("backup", &u.backup)] {
                if let Some((_, p)) = peer_hosts.iter().find(|(ph, _)| *ph == h.as_str()) {
                    return Err(bad(
                        key(k),
                        format!("host `{h}` runs peer `{p}` (one BGP daemon per host)"),
                    ));
                }
                if *h == self.redis.host {
                    return Err(bad(
                        key(k),
                        format!(
                            "host `{h}` runs the Redis store (a host failure would take the store with it)"
                        ),
                    ));
                }
            }
            if u.neighbors.is_empty() {
                return Err(bad(key("neighbors"), "at least one peer is needed"));
            }
            for (j, n) in u.neighbors.iter().enumerate() {
                if !self.peers.iter().any(|p| &p.name == n) {
                    return Err(bad(
                        format!("holdfastd[{i}].neighbors[{j}]"),
                        format!("unknown peer \"{n}\""),
                    ));
                }
                if !neighbour_of.insert(n.as_str()) {
                    return Err(bad(
                        format!("holdfastd[{i}].neighbors[{j}]"),
                        format!("peer \"{n}\" is listed twice"),
                    ));
                }
            }
            if let Some(h) = u.hold_time {
                if h != 0 && h < 3 {
                    return Err(bad(key("hold_time"), "must be 0 or 3..=65535"));
                }
            }
            check_routes(&key("routes"), &u.routes)?;
        }
        for (i, p) in self.peers.iter().enumerate() {
            if !neighbour_of.contains(p.name.as_str()) {
                return Err(bad(
                    format!("peer[{i}].name"),
                    format!("peer `{}` is not a neighbour of any holdfastd unit", p.name),
                ));
            }
        }
        Ok(())
    }

    /// The host named `name`.
    pub fn host(&self, name: &str) -> Option<&HostSpec> {
        self.hosts.iter().find(|h| h.name == name)
    }

    /// The peer unit named `name`.
    pub fn peer(&self, name: &str) -> Option<&PeerUnitSpec> {
        self.peers.iter().find(|p| p.name == name)
    }

    /// The holdfastd unit with `peer` among its neighbours.
    pub fn unit_of_peer(&self, peer: &str) -> Option<&HoldfastdSpec> {
        self.holdfastd
            .iter()
            .find(|u| u.neighbors.iter().any(|n| n == peer))
    }

    /// Every peer kind the scenario runs.
    pub fn peer_kinds(&self) -> Vec<PeerKind> {
        let mut v: Vec<PeerKind> = Vec::new();
        for k in self.peers.iter().filter_map(|p| parse_peer_kind(&p.kind)) {
            if !v.contains(&k) {
                v.push(k);
            }
        }
        v
    }

    /// The [`PeerSpec`] of a peer unit: router id (default: its host's address), a
    /// session (IPv4 unicast) from its host's address to the service address with the
    /// unit's AS and hold time, and its routes.
    pub fn peer_spec(&self, peer: &PeerUnitSpec) -> Result<PeerSpec> {
        let host = self
            .host(&peer.host)
            .ok_or_else(|| bad("peer.host", format!("unknown host \"{}\"", peer.host)))?;
        let unit = self
            .unit_of_peer(&peer.name)
            .ok_or_else(|| bad("peer", format!("`{}` has no holdfastd unit", peer.name)))?;
        let mut n = NeighborSpec::new(IpAddr::V4(self.service.v4), unit.asn)
            .local(IpAddr::V4(host.v4))
            .families(true, false);
        if let Some(h) = unit.hold_time {
            n = n.hold_time(h);
        }
        if let Some(b) = peer.bfd {
            n = n.bfd(b.interval_ms, b.interval_ms, b.multiplier);
        }
        let mut spec = PeerSpec::new(peer.asn, peer.router_id.unwrap_or(host.v4)).neighbor(n);
        for set in &peer.routes {
            for p in set.expand()? {
                spec = spec.route(RouteSpec::new(&p));
            }
        }
        Ok(spec)
    }

    /// How many peers run BFD with holdfastd.
    pub fn bfd_peer_count(&self) -> usize {
        self.peers.iter().filter(|p| p.bfd.is_some()).count()
    }

    /// How many routes a peer unit originates.
    pub fn peer_route_count(&self, peer: &PeerUnitSpec) -> u64 {
        peer.routes.iter().map(|r| u64::from(r.count)).sum()
    }

    /// How many routes a holdfastd unit originates.
    pub fn unit_route_count(&self, unit: &HoldfastdSpec) -> u64 {
        unit.routes.iter().map(|r| u64::from(r.count)).sum()
    }

    /// The holdfastd configuration of `unit` ([`nsr_config`]): its AS, the hold time, a
    /// neighbour per peer (peer host address, peer AS) and a `[[network]]` per route
    /// set; `[nsr]` with `store = redis_url` and the unit's instance.
    pub fn holdfastd_config(
        &self,
        unit: &HoldfastdSpec,
        topo: &NsrTopo,
        redis_url: &str,
    ) -> Result<String> {
        self.holdfastd_config_auth(unit, topo, redis_url, None)
    }

    /// [`Scenario::holdfastd_config`] with the unit's store user and
    /// password file (`[nsr] store_user`, `store_password_file`) when the
    /// store has ACL users.
    pub fn holdfastd_config_auth(
        &self,
        unit: &HoldfastdSpec,
        topo: &NsrTopo,
        redis_url: &str,
        store_user: Option<(&str, &std::path::Path)>,
    ) -> Result<String> {
        let mut extra = format!("asn = {}\n", unit.asn);
        if let Some(h) = unit.hold_time {
            extra.push_str(&format!("hold_time = {h}\n"));
        }
        let export = match unit.export {
            ExportSpec::All => "all",
            ExportSpec::Own => OWN_ROUTES_POLICY,
        };
        // The neighbours are written here (not by nsr_config) to carry the export.
        for n in &unit.neighbors {
            let p = self
                .peer(n)
                .ok_or_else(|| bad("holdfastd.neighbors", format!("unknown peer \"{n}\"")))?;
            let h = self
                .host(&p.host)
                .ok_or_else(|| bad("peer.host", format!("unknown host \"{}\"", p.host)))?;
            let addr = IpAddr::V4(h.v4);
            extra.push_str(&format!(
                "[[neighbor]]\naddress = \"{addr}\"\nremote_asn = {}\nlocal_address = \"{}\"\nimport = \"all\"\nexport = \"{export}\"\n",
                p.asn,
                topo.service_for(addr)
            ));
            if let Some(b) = p.bfd {
                extra.push_str(&format!(
                    "bfd = {{ min_rx_ms = {ms}, min_tx_ms = {ms}, multiplier = {} }}\n",
                    b.multiplier,
                    ms = b.interval_ms
                ));
            }
        }
        for r in &unit.routes {
            extra.push_str(&format!(
                "[[network]]\nprefix = \"{}\"\ncount = {}\n",
                r.prefix, r.count
            ));
        }
        if unit.export == ExportSpec::Own {
            extra.push_str(&format!(
                "[[policy]]\nname = \"{OWN_ROUTES_POLICY}\"\ndefault = \"reject\"\n\
                 [[policy.term]]\nname = \"originated\"\nmatch = {{ as_path = \"^$\" }}\naction = \"accept\"\n"
            ));
        }
        if let Some((user, file)) = store_user {
            extra.push_str(&format!(
                "[nsr]\nstore_user = \"{user}\"\nstore_password_file = \"{}\"\n",
                file.display()
            ));
        }
        Ok(nsr_config(topo, redis_url, &unit.instance, &[], &extra))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BASE: &str = r#"
name = "t"
service = { v4 = "198.18.0.10", v6 = "fd00::10" }
redis = { host = "redis" }

[[host]]
name = "peer"
v4 = "198.18.0.1"
v6 = "fd00::1"

[[host]]
name = "redis"
v4 = "198.18.0.2"
v6 = "fd00::2"

[[host]]
name = "a"
v4 = "198.18.0.3"
v6 = "fd00::3"

[[host]]
name = "b"
v4 = "198.18.0.4"
v6 = "fd00::4"

[[peer]]
name = "frr"
kind = "frr"
host = "peer"
asn = 65001
routes = [{ prefix = "203.0.113.0/24" }, { prefix = "20.0.0.0/24", count = 3 }]

[[holdfastd]]
name = "edge"
instance = "edge-1"
primary = "a"
backup = "b"
neighbors = ["frr"]
hold_time = 9
routes = [{ prefix = "100.100.0.0/24", count = 2 }]
"#;

    fn err(text: &str) -> String {
        Scenario::parse(text).unwrap_err().to_string()
    }

    #[test]
    fn parses_and_derives_specs() {
        let sc = Scenario::parse(BASE).unwrap();
        assert_eq!(sc.redis.port, 6379);
        assert_eq!(sc.holdfastd[0].asn, NSR_LOCAL_AS);
        let spec = sc.peer_spec(&sc.peers[0]).unwrap();
        assert_eq!(spec.router_id, Ipv4Addr::new(198, 18, 0, 1));
        let prefixes: Vec<&str> = spec.routes.iter().map(|r| r.prefix.as_str()).collect();
        assert_eq!(
            prefixes,
            [
                "203.0.113.0/24",
                "20.0.0.0/24",
                "20.0.1.0/24",
                "20.0.2.0/24"
            ]
        );
        let n = &spec.neighbors[0];
        assert_eq!(n.address, "198.18.0.10".parse::<IpAddr>().unwrap());
        assert_eq!(n.local_address, Some("198.18.0.1".parse().unwrap()));
        assert_eq!(
            (n.remote_as, n.hold_time, n.families),
            (65000, Some(9), (true, false))
        );
        assert_eq!(sc.peer_route_count(&sc.peers[0]), 4);
        assert_eq!(sc.unit_route_count(&sc.holdfastd[0]), 2);
    }

    #[test]
    fn export_own_announces_only_the_units_routes() {
        let sc =
            Scenario::parse(&BASE.replace("hold_time = 9\n", "hold_time = 9\nexport = \"own\"\n"))
                .unwrap();
        let unit = &sc.holdfastd[0];
        assert_eq!(unit.export, ExportSpec::Own);
        let c = sc
            .holdfastd_config(unit, &NsrTopo::unbuilt(), "redis://198.18.0.2:6379")
            .unwrap();
        assert!(c.contains("export = \"own-routes\""), "{c}");
        assert!(!c.contains("export = \"all\""), "{c}");
        assert!(
            c.contains("name = \"own-routes\"\ndefault = \"reject\""),
            "{c}"
        );
        assert!(c.contains("match = { as_path = \"^$\" }"), "{c}");
        let all = Scenario::parse(BASE).unwrap();
        assert_eq!(all.holdfastd[0].export, ExportSpec::All);
        assert!(
            err(&BASE.replace("hold_time = 9\n", "hold_time = 9\nexport = \"some\"\n"))
                .contains("export")
        );
    }

    #[test]
    fn errors_name_the_key() {
        let e = err(&BASE.replace("kind = \"frr\"", "kind = \"quagga\""));
        assert!(e.contains("peer[0].kind: unknown kind \"quagga\""), "{e}");
        let e = err(&BASE.replace("host = \"peer\"", "host = \"nowhere\""));
        assert!(e.contains("peer[0].host: unknown host \"nowhere\""), "{e}");
        let e = err(&BASE.replace("asn = 65001", "asn = 65001\ncolour = 1"));
        assert!(e.contains("peer[0]") && e.contains("colour"), "{e}");
        let e = err(&BASE.replace("v4 = \"198.18.0.3\"", "v4 = \"10.0.0.3\""));
        assert!(
            e.contains("host[2].v4: 10.0.0.3 is not a host address"),
            "{e}"
        );
        let e = err(&BASE.replace("backup = \"b\"", "backup = \"a\""));
        assert!(e.contains("holdfastd[0].backup: must differ"), "{e}");
        let e = err(&BASE.replace("backup = \"b\"", "backup = \"peer\""));
        assert!(
            e.contains("holdfastd[0].backup: host `peer` runs peer"),
            "{e}"
        );
        let e = err(&BASE.replace("neighbors = [\"frr\"]", "neighbors = [\"bird\"]"));
        assert!(
            e.contains("holdfastd[0].neighbors[0]: unknown peer \"bird\""),
            "{e}"
        );
        let e = err(&BASE.replace("count = 3", "count = 0"));
        assert!(e.contains("peer[0].routes[1].count"), "{e}");
        let e = err(&BASE.replace("20.0.0.0/24", "20.0.0.1/24"));
        assert!(
            e.contains("peer[0].routes[1].prefix: `20.0.0.1/24` has host bits"),
            "{e}"
        );
        let e = err(&BASE.replace("v4 = \"198.18.0.2\"", "v4 = \"198.18.0.10\""));
        assert!(e.contains("host[1].v4: 198.18.0.10 is already used"), "{e}");
        let e = err(&BASE.replace("hold_time = 9", "hold_time = \"9\""));
        assert!(e.contains("holdfastd[0].hold_time"), "{e}");
        let e = err(&BASE.replace("redis = { host = \"redis\" }", "redis = { host = \"a\" }"));
        assert!(
            e.contains("holdfastd[0].primary: host `a` runs the Redis store"),
            "{e}"
        );
    }

    #[test]
    fn bfd_and_relay_keys() {
        let with = BASE
            .replace(
                "count = 3 }]\n",
                "count = 3 }]\nbfd = { interval_ms = 100, multiplier = 3 }\n",
            )
            .replace(
                "redis = { host = \"redis\" }\n",
                "redis = { host = \"redis\" }\nrelay = { host = \"relay\" }\n\n[[host]]\nname = \"relay\"\nv4 = \"198.18.0.6\"\nv6 = \"fd00::6\"\n",
            );
        let sc = Scenario::parse(&with).unwrap();
        assert_eq!(sc.bfd_peer_count(), 1);
        let spec = sc.peer_spec(&sc.peers[0]).unwrap();
        let b = spec.neighbors[0].bfd.expect("bfd timers");
        assert_eq!((b.min_rx_ms, b.min_tx_ms, b.multiplier), (100, 100, 3));
        let c = sc
            .holdfastd_config(
                &sc.holdfastd[0],
                &NsrTopo::unbuilt(),
                "redis://198.18.0.2:6379",
            )
            .unwrap();
        assert!(
            c.contains("bfd = { min_rx_ms = 100, min_tx_ms = 100, multiplier = 3 }"),
            "{c}"
        );
        let e = err(&with.replace("interval_ms = 100", "interval_ms = 1"));
        assert!(
            e.contains("peer[0].bfd.interval_ms: must be 10..=60000"),
            "{e}"
        );
        let e = err(&with.replace("multiplier = 3 }", "multiplier = 3, echo = 1 }"));
        assert!(e.contains("peer[0].bfd") && e.contains("echo"), "{e}");
        let e = err(&with.replace("relay = { host = \"relay\" }", "relay = { host = \"a\" }"));
        assert!(
            e.contains("relay.host: host `a` runs Redis or holdfastd"),
            "{e}"
        );
        let e = err(&with.replace("relay = { host = \"relay\" }", "relay = { host = \"x\" }"));
        assert!(e.contains("relay.host: unknown host \"x\""), "{e}");
        let e = err(&with.replace("relay = { host = \"relay\" }", "relay = true"));
        assert!(e.contains("relay"), "{e}");
        let e = err(&with.replace("bfd = { interval_ms = 100, multiplier = 3 }\n", ""));
        assert!(e.contains("relay: no peer has `bfd`"), "{e}");
    }

    #[test]
    fn route_sets_expand_and_stop_at_the_end() {
        let set = |p: &str, c| RouteSet {
            prefix: p.into(),
            count: c,
        };
        assert_eq!(
            set("2001:db8::/48", 2).expand().unwrap(),
            ["2001:db8::/48", "2001:db8:1::/48"]
        );
        assert_eq!(set("255.255.255.0/24", 1).expand().unwrap().len(), 1);
        assert!(set("255.255.255.0/24", 2).expand().is_err());
        assert!(set("10.0.0.0/33", 1).expand().is_err());
        assert_eq!(set("0.0.0.0/0", 1).expand().unwrap(), ["0.0.0.0/0"]);
        assert_eq!(set("::/0", 1).expand().unwrap(), ["::/0"]);
        assert!(set("::/0", 2).expand().is_err());
        assert!(set("::1/0", 1).expand().is_err());
        assert_eq!(
            set("2001:db8::1/128", 2).expand().unwrap(),
            ["2001:db8::1/128", "2001:db8::2/128"]
        );
    }

    #[test]
    fn shipped_scenarios_are_valid() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../lab/scenarios");
        let mut seen = Vec::new();
        for e in std::fs::read_dir(&dir).unwrap() {
            let p = e.unwrap().path().join(SCENARIO_FILE);
            if p.exists() {
                let sc = Scenario::load(&p).unwrap();
                let text = std::fs::read_to_string(&p).unwrap();
                assert!(
                    text.starts_with('#') && text.contains("bridge"),
                    "{}: needs a header drawing the topology",
                    p.display()
                );
                seen.push(sc.name);
            }
        }
        seen.sort();
        assert!(seen.contains(&"demo".to_string()) && seen.contains(&"nsr-basic".to_string()));
    }
}
