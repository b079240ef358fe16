//! Real BGP peers (bird2, FRR, GoBGP, ExaBGP) behind one [`Peer`] trait.

mod bird;
mod exabgp;
mod frr;
mod gobgp;

use std::fmt;
use std::io::{Read, Seek, SeekFrom};
use std::net::{IpAddr, Ipv4Addr};
use std::path::{Path, PathBuf};
use std::time::Duration;

pub use bird::Bird;
pub use exabgp::Exabgp;
pub use frr::Frr;
pub use gobgp::Gobgp;

use crate::cmd::find_tool;
use crate::error::{io_ctx, parse_err, LabError, Result};
use crate::lab::{HostId, Lab};
use crate::wait::{wait_for, wait_until};

/// Which implementation a peer is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PeerKind {
    /// BIRD 2 (`bird`, `birdc`).
    Bird,
    /// FRRouting (`zebra`, `bgpd`, `vtysh`).
    Frr,
    /// GoBGP (`gobgpd`, `gobgp`).
    Gobgp,
    /// ExaBGP 4 (`exabgp`, driven through a python API helper).
    Exabgp,
}

impl PeerKind {
    /// All kinds.
    pub const ALL: [PeerKind; 4] = [
        PeerKind::Bird,
        PeerKind::Frr,
        PeerKind::Gobgp,
        PeerKind::Exabgp,
    ];

    /// Executables this kind needs.
    pub fn tools(self) -> &'static [&'static str] {
        match self {
            PeerKind::Bird => &["bird", "birdc"],
            PeerKind::Frr => &["/usr/lib/frr/zebra", "/usr/lib/frr/bgpd", "vtysh", "chown"],
            PeerKind::Gobgp => &["gobgpd", "gobgp"],
            PeerKind::Exabgp => &["exabgp", "python3"],
        }
    }

    /// Short lowercase name.
    pub fn name(self) -> &'static str {
        match self {
            PeerKind::Bird => "bird",
            PeerKind::Frr => "frr",
            PeerKind::Gobgp => "gobgp",
            PeerKind::Exabgp => "exabgp",
        }
    }
}

impl fmt::Display for PeerKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Check that the process is root and every tool of `kinds` (plus the lab's base tools)
/// is installed. Tests call it through [`crate::skip_unless_ready`].
pub fn preflight(kinds: &[PeerKind]) -> Result<()> {
    if !crate::cmd::is_root() {
        return Err(LabError::NotRoot);
    }
    let base: &[&str] = &["ip", "kill", "sysctl", "tcpdump"];
    let peer = kinds.iter().flat_map(|k| k.tools().iter());
    for tool in base.iter().chain(peer) {
        if find_tool(tool).is_none() {
            return Err(LabError::MissingTool(tool.to_string()));
        }
    }
    Ok(())
}

/// What a peer is configured with at start.
#[derive(Debug, Clone)]
pub struct PeerSpec {
    /// Local AS number.
    pub local_as: u32,
    /// BGP identifier.
    pub router_id: Ipv4Addr,
    /// Sessions.
    pub neighbors: Vec<NeighborSpec>,
    /// Routes to originate from the start.
    pub routes: Vec<RouteSpec>,
    /// bird2 only: a `kernel` protocol exporting every IPv4 route into this
    /// kernel table (the FIB benchmark); None: the FIB is left alone.
    pub kernel_table: Option<u32>,
}

impl PeerSpec {
    /// A spec without neighbours or routes.
    pub fn new(local_as: u32, router_id: Ipv4Addr) -> Self {
        PeerSpec {
            local_as,
            router_id,
            neighbors: Vec::new(),
            routes: Vec::new(),
            kernel_table: None,
        }
    }

    /// bird2: install the routes into kernel table `table` (see the field).
    pub fn kernel_table(mut self, table: u32) -> Self {
        self.kernel_table = Some(table);
        self
    }

    /// Add a neighbour.
    pub fn neighbor(mut self, n: NeighborSpec) -> Self {
        self.neighbors.push(n);
        self
    }

    /// Add a route to originate.
    pub fn route(mut self, r: RouteSpec) -> Self {
        self.routes.push(r);
        self
    }
}

/// One BGP session.
#[derive(Debug, Clone)]
pub struct NeighborSpec {
    /// Remote address (transport).
    pub address: IpAddr,
    /// Remote AS.
    pub remote_as: u32,
    /// Local address to bind (required by ExaBGP; optional elsewhere).
    pub local_address: Option<IpAddr>,
    /// Never initiate the TCP connection.
    pub passive: bool,
    /// Proposed hold time in seconds (keepalive = hold / 3).
    pub hold_time: Option<u16>,
    /// TCP MD5 signature password.
    pub md5: Option<String>,
    /// Address families: (IPv4 unicast, IPv6 unicast).
    pub families: (bool, bool),
    /// Advertise the graceful-restart capability.
    pub graceful_restart: bool,
    /// eBGP multihop TTL.
    pub multihop: Option<u8>,
    /// GTSM (RFC 5082): send with TTL 255 and accept only TTL 255 (directly connected).
    pub ttl_security: bool,
    /// BFD (RFC 5880/5881) under the session; `None` (the default) runs none.
    pub bfd: Option<BfdTimers>,
    /// BFD authentication (bird2 only).
    pub bfd_auth: Option<BfdAuthSpec>,
    /// Advertise routes to this neighbour (bird2 and frr; `false`: export
    /// none, as a benchmark's feed-only injectors need).
    pub export: bool,
}

/// BFD authentication as bird2 writes it (RFC 5880 §6.7).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BfdAuthSpec {
    /// bird2's `authentication` value: `simple`, `keyed md5`,
    /// `meticulous keyed md5`, `keyed sha1` or `meticulous keyed sha1`.
    pub kind: String,
    pub key_id: u8,
    pub password: String,
}

/// A peer's BFD timers: frr runs `bfdd` with a profile of these, bird2 a
/// `protocol bfd` with them on every interface.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BfdTimers {
    pub min_rx_ms: u32,
    pub min_tx_ms: u32,
    pub multiplier: u8,
}

impl NeighborSpec {
    /// A neighbour carrying the unicast family of its transport address.
    pub fn new(address: IpAddr, remote_as: u32) -> Self {
        NeighborSpec {
            address,
            remote_as,
            local_address: None,
            passive: false,
            hold_time: None,
            md5: None,
            families: (address.is_ipv4(), address.is_ipv6()),
            graceful_restart: false,
            multihop: None,
            ttl_security: false,
            bfd: None,
            bfd_auth: None,
            export: true,
        }
    }

    /// Authenticate BFD (bird2's `authentication` syntax for `kind`).
    pub fn bfd_auth(mut self, kind: &str, key_id: u8, password: &str) -> Self {
        self.bfd_auth = Some(BfdAuthSpec {
            kind: kind.to_string(),
            key_id,
            password: password.to_string(),
        });
        self
    }

    /// Run BFD under the session with these timers.
    pub fn bfd(mut self, min_rx_ms: u32, min_tx_ms: u32, multiplier: u8) -> Self {
        self.bfd = Some(BfdTimers {
            min_rx_ms,
            min_tx_ms,
            multiplier,
        });
        self
    }

    /// Set the local address.
    pub fn local(mut self, addr: IpAddr) -> Self {
        self.local_address = Some(addr);
        self
    }

    /// Make the session passive.
    pub fn passive(mut self) -> Self {
        self.passive = true;
        self
    }

    /// Advertise nothing to this neighbour (bird2 and frr).
    pub fn no_export(mut self) -> Self {
        self.export = false;
        self
    }

    /// Set the hold time.
    pub fn hold_time(mut self, secs: u16) -> Self {
        self.hold_time = Some(secs);
        self
    }

    /// Set the TCP MD5 password.
    pub fn md5(mut self, password: &str) -> Self {
        self.md5 = Some(password.to_string());
        self
    }

    /// Set the families (IPv4 unicast, IPv6 unicast).
    pub fn families(mut self, v4: bool, v6: bool) -> Self {
        self.families = (v4, v6);
        self
    }

    /// Enable or disable graceful restart.
    pub fn graceful_restart(mut self, on: bool) -> Self {
        self.graceful_restart = on;
        self
    }

    /// Set eBGP multihop TTL.
    pub fn multihop(mut self, ttl: u8) -> Self {
        self.multihop = Some(ttl);
        self
    }

    /// Enable GTSM / TTL security.
    pub fn ttl_security(mut self) -> Self {
        self.ttl_security = true;
        self
    }

    /// Keepalive interval derived from the hold time.
    pub(crate) fn keepalive(&self) -> Option<u16> {
        self.hold_time.map(|h| (h / 3).max(1))
    }
}

/// A route to originate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RouteSpec {
    /// Prefix, e.g. `203.0.113.0/24` or `2001:db8:1::/48`.
    pub prefix: String,
    /// Explicit next hop (default: the peer's own address).
    pub next_hop: Option<IpAddr>,
    /// Standard communities.
    pub communities: Vec<(u16, u16)>,
    /// Large communities.
    pub large_communities: Vec<(u32, u32, u32)>,
    /// MULTI_EXIT_DISC.
    pub med: Option<u32>,
    /// AS numbers prepended to the path (before the peer's own AS on eBGP).
    pub as_path: Vec<u32>,
}

impl RouteSpec {
    /// A bare route.
    pub fn new(prefix: &str) -> Self {
        RouteSpec {
            prefix: prefix.to_string(),
            next_hop: None,
            communities: Vec::new(),
            large_communities: Vec::new(),
            med: None,
            as_path: Vec::new(),
        }
    }

    /// Add a community.
    pub fn community(mut self, asn: u16, value: u16) -> Self {
        self.communities.push((asn, value));
        self
    }

    /// Add a large community.
    pub fn large_community(mut self, a: u32, b: u32, c: u32) -> Self {
        self.large_communities.push((a, b, c));
        self
    }

    /// Set the MED.
    pub fn med(mut self, med: u32) -> Self {
        self.med = Some(med);
        self
    }

    /// Set the next hop.
    pub fn next_hop(mut self, nh: IpAddr) -> Self {
        self.next_hop = Some(nh);
        self
    }

    /// Set the prepended AS path.
    pub fn as_path(mut self, path: &[u32]) -> Self {
        self.as_path = path.to_vec();
        self
    }

    /// Whether the prefix is IPv6.
    pub fn is_v6(&self) -> bool {
        self.prefix.contains(':')
    }
}

/// Normalised BGP FSM state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SessionState {
    /// Idle (or administratively down).
    Idle,
    /// Connect.
    Connect,
    /// Active.
    Active,
    /// OpenSent.
    OpenSent,
    /// OpenConfirm.
    OpenConfirm,
    /// Established.
    Established,
    /// The tool reported something else.
    Unknown,
}

impl SessionState {
    /// Map a tool's state word (case-insensitive) to a state.
    pub fn parse(s: &str) -> Self {
        match s.trim().to_ascii_lowercase().as_str() {
            "idle" | "down" | "passive" => SessionState::Idle,
            "connect" => SessionState::Connect,
            "active" => SessionState::Active,
            "opensent" => SessionState::OpenSent,
            "openconfirm" => SessionState::OpenConfirm,
            "established" | "up" => SessionState::Established,
            _ => SessionState::Unknown,
        }
    }
}

/// A BFD session as the peer's own tool reports it (frr `show bfd peers json` and
/// `show bfd peers counters json`, bird2 `show bfd sessions`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BfdView {
    /// Whether it is Up.
    pub up: bool,
    /// The state as the tool spells it (`up`, `Up`, `down`, `Init`, ...).
    pub state: String,
    /// frr's `session-down` counter.
    pub session_downs: Option<u64>,
    /// frr's uptime of the session, seconds.
    pub uptime_secs: Option<u64>,
    /// bird2's "Since" column: when the session last changed state.
    pub since: Option<String>,
    /// The interval the peer sends at, ms, as it reports it (frr: the larger of its
    /// `transmit-interval` and the remote's `remote-receive-interval`; bird2: the
    /// "Interval" column).
    pub tx_interval_ms: Option<u32>,
}

/// One session as the peer's own tool reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionView {
    /// Remote address.
    pub neighbor: IpAddr,
    /// Remote AS as configured/reported.
    pub remote_as: Option<u32>,
    /// Normalised state.
    pub state: SessionState,
    /// The tool's own state text.
    pub raw_state: String,
    /// Seconds since the session was established (only when Established).
    pub uptime_secs: Option<u64>,
    /// Times the session reached Established, when the tool exposes it.
    pub established_count: Option<u32>,
    /// Times an established session was dropped, when the tool exposes it.
    pub dropped_count: Option<u32>,
    /// Prefixes received (accepted) over the session.
    pub prefixes_received: Option<u32>,
    /// Prefixes advertised over the session.
    pub prefixes_sent: Option<u32>,
    /// Whether the remote side advertised the graceful-restart capability in its OPEN
    /// (known while Established).
    pub peer_graceful_restart: Option<bool>,
}

impl SessionView {
    /// Whether the session is Established.
    pub fn is_established(&self) -> bool {
        self.state == SessionState::Established
    }

    pub(crate) fn new(neighbor: IpAddr, raw_state: &str) -> Self {
        SessionView {
            neighbor,
            remote_as: None,
            state: SessionState::parse(raw_state),
            raw_state: raw_state.to_string(),
            uptime_secs: None,
            established_count: None,
            dropped_count: None,
            prefixes_received: None,
            prefixes_sent: None,
            peer_graceful_restart: None,
        }
    }
}

/// One route as the peer's own tool reports it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RouteView {
    /// Normalised prefix (`addr/len`, canonical address text).
    pub prefix: String,
    /// BGP next hop (global one for IPv6).
    pub next_hop: Option<IpAddr>,
    /// AS path, flattened (sets included in order).
    pub as_path: Vec<u32>,
    /// MED.
    pub med: Option<u32>,
    /// LOCAL_PREF.
    pub local_pref: Option<u32>,
    /// Standard communities, sorted.
    pub communities: Vec<(u16, u16)>,
    /// Large communities, sorted.
    pub large_communities: Vec<(u32, u32, u32)>,
    /// ORIGIN as text (`igp`, `egp`, `incomplete`) when known.
    pub origin: Option<String>,
}

impl RouteView {
    pub(crate) fn sort_attrs(&mut self) {
        self.communities.sort_unstable();
        self.communities.dedup();
        self.large_communities.sort_unstable();
        self.large_communities.dedup();
    }
}

/// Canonical `addr/len` text for a prefix (lower-case, compressed IPv6).
pub fn normalize_prefix(prefix: &str) -> Result<String> {
    let (addr, len) = prefix
        .trim()
        .split_once('/')
        .ok_or_else(|| parse_err("prefix", format!("`{prefix}` has no length")))?;
    let addr: IpAddr = addr
        .parse()
        .map_err(|_| parse_err("prefix", format!("bad address in `{prefix}`")))?;
    let len: u8 = len
        .parse()
        .map_err(|_| parse_err("prefix", format!("bad length in `{prefix}`")))?;
    let max = if addr.is_ipv4() { 32 } else { 128 };
    if len > max {
        return Err(parse_err(
            "prefix",
            format!("length too long in `{prefix}`"),
        ));
    }
    Ok(format!("{addr}/{len}"))
}

pub(crate) fn parse_community(s: &str) -> Option<(u16, u16)> {
    let (a, b) = s.trim().split_once(':')?;
    Some((a.parse().ok()?, b.parse().ok()?))
}

pub(crate) fn parse_large_community(s: &str) -> Option<(u32, u32, u32)> {
    let mut it = s.trim().split(':');
    let v = (
        it.next()?.parse().ok()?,
        it.next()?.parse().ok()?,
        it.next()?.parse().ok()?,
    );
    it.next().is_none().then_some(v)
}

fn find_route(routes: Vec<RouteView>, prefix: &str) -> Option<RouteView> {
    routes.into_iter().find(|r| r.prefix == prefix)
}

/// A `Send` closure that reads a peer's sessions like [`Peer::sessions`], without a
/// [`Lab`]: it only holds the namespace name, tool paths and the peer's neighbour list,
/// so it can run on a background thread (see [`crate::PeerWatch`]).
pub type SessionProbe = Box<dyn Fn() -> Result<Vec<SessionView>> + Send>;

/// A position in a peer's log files (one offset per file), taken with
/// [`Peer::log_mark`]; [`LogMark::default`] is the beginning of every file.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LogMark(Vec<(PathBuf, u64)>);

impl LogMark {
    /// The beginning of every log.
    pub fn start() -> Self {
        LogMark::default()
    }

    /// Current sizes of `files` (0 for one that does not exist yet).
    pub fn of_files(files: &[PathBuf]) -> Self {
        LogMark(
            files
                .iter()
                .map(|f| (f.clone(), std::fs::metadata(f).map_or(0, |m| m.len())))
                .collect(),
        )
    }

    /// Offset recorded for `file` (0 when the mark does not know it).
    pub fn offset(&self, file: &Path) -> u64 {
        self.0
            .iter()
            .find(|(f, _)| f == file)
            .map_or(0, |(_, o)| *o)
    }
}

/// Text appended to `file` since `offset` (the whole file if it shrank, e.g. rotated).
fn read_from(file: &Path, offset: u64) -> Result<String> {
    let mut f = match std::fs::File::open(file) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(String::new()),
        Err(e) => return Err(io_ctx(format!("opening {}", file.display()))(e)),
    };
    let len = f
        .metadata()
        .map_err(io_ctx(format!("stat {}", file.display())))?
        .len();
    let start = if offset <= len { offset } else { 0 };
    f.seek(SeekFrom::Start(start))
        .map_err(io_ctx(format!("seeking {}", file.display())))?;
    let mut buf = Vec::new();
    f.read_to_end(&mut buf)
        .map_err(io_ctx(format!("reading {}", file.display())))?;
    Ok(String::from_utf8_lossy(&buf).into_owned())
}

/// What every driver does before starting its daemon: check its tools are
/// installed, create its directory in the work dir, and normalise the
/// prefixes of the routes it will originate.
pub(crate) fn prepare(
    lab: &Lab,
    host: HostId,
    kind: PeerKind,
    spec: &PeerSpec,
) -> Result<(PathBuf, PeerSpec)> {
    for t in kind.tools() {
        crate::cmd::require_tool(t)?;
    }
    if matches!(kind, PeerKind::Gobgp | PeerKind::Exabgp) {
        if let Some(n) = spec.neighbors.iter().find(|n| !n.export) {
            return Err(LabError::Invalid(format!(
                "{}: neighbour {}: export none is written for bird2 and frr only",
                kind.name(),
                n.address
            )));
        }
    }
    let dir = lab.peer_dir(host, kind.name())?;
    let mut spec = spec.clone();
    for r in &mut spec.routes {
        r.prefix = normalize_prefix(&r.prefix)?;
    }
    Ok((dir, spec))
}

/// A peer of `kind` started earlier (by this or another process, see
/// [`crate::Lab::adopt`]) with `spec` in `host`, as the lab processes `procs` (those
/// [`Peer::start`] spawned, in order): the driver reads it back with its own tools and
/// stops it like one it started.
pub fn adopt(
    kind: PeerKind,
    lab: &Lab,
    host: HostId,
    spec: &PeerSpec,
    procs: &[crate::lab::ProcId],
) -> Result<Box<dyn Peer>> {
    Ok(match kind {
        PeerKind::Bird => Box::new(Bird::adopt(lab, host, spec, procs)?),
        PeerKind::Frr => Box::new(Frr::adopt(lab, host, spec, procs)?),
        PeerKind::Gobgp => Box::new(Gobgp::adopt(lab, host, spec, procs)?),
        PeerKind::Exabgp => Box::new(Exabgp::adopt(lab, host, spec, procs)?),
    })
}

/// A running BGP implementation inside a lab host, read back with its own tools.
pub trait Peer {
    /// Which implementation this is.
    fn kind(&self) -> PeerKind;

    /// Host the peer runs in.
    fn host(&self) -> HostId;

    /// Generate the configuration in the work dir and start the daemon(s); returns once
    /// the control interface answers (sessions may still be coming up).
    fn start(lab: &mut Lab, host: HostId, spec: &PeerSpec) -> Result<Self>
    where
        Self: Sized;

    /// Every configured session.
    fn sessions(&self, lab: &Lab) -> Result<Vec<SessionView>>;

    /// The BFD session with `neighbor` by the peer's own CLI; `None` when the peer
    /// has none (no BFD configured, or a driver without BFD).
    fn bfd_session(&self, _lab: &Lab, _neighbor: IpAddr) -> Result<Option<BfdView>> {
        Ok(None)
    }

    /// Routes received from `neighbor` (IPv4 and IPv6 unicast, as configured).
    fn received_routes(&self, lab: &Lab, neighbor: IpAddr) -> Result<Vec<RouteView>>;

    /// Routes advertised to `neighbor`, as far as the tool can tell.
    fn advertised_routes(&self, lab: &Lab, neighbor: IpAddr) -> Result<Vec<RouteView>>;

    /// Originate more routes at runtime (replacing same-prefix routes).
    fn announce(&mut self, lab: &Lab, routes: &[RouteSpec]) -> Result<()>;

    /// Stop originating the given prefixes.
    fn withdraw(&mut self, lab: &Lab, prefixes: &[String]) -> Result<()>;

    /// The peer's log (what tests grep for NOTIFICATIONs and errors).
    fn log_text(&self) -> Result<String>;

    /// Stop the daemon(s).
    fn stop(&mut self, lab: &mut Lab);

    /// A probe reading the same view as [`Peer::sessions`] that can be moved to another
    /// thread (used by [`crate::PeerWatch`] to sample a session while the test thread
    /// drives a failover).
    fn session_probe(&self, lab: &Lab) -> SessionProbe;

    /// The files [`Peer::log_text`] is made of, for [`Peer::log_mark`].
    fn log_files(&self) -> Vec<PathBuf>;

    /// Substrings of a log line that mean a NOTIFICATION was sent or received:
    /// bird `Received: ` / `Error: `, FRR `%NOTIFICATION`, gobgpd `notification` (any
    /// case), ExaBGP a `"type": "notification"` API event.
    fn notification_markers(&self) -> &'static [&'static str];

    /// The current end of the peer's logs, for [`Peer::notifications_since`].
    fn log_mark(&self) -> LogMark {
        LogMark::of_files(&self.log_files())
    }

    /// Everything the daemon's logs gained after `mark`.
    fn log_since(&self, mark: &LogMark) -> Result<String> {
        let mut out = String::new();
        for f in self.log_files() {
            out.push_str(&read_from(&f, mark.offset(&f))?);
        }
        Ok(out)
    }

    /// Log lines written after `mark` that show a NOTIFICATION sent or received (see
    /// [`Peer::notification_markers`]); `&LogMark::start()` searches the whole logs.
    fn notifications_since(&self, mark: &LogMark) -> Result<Vec<String>> {
        let markers = self.notification_markers();
        let mut out = Vec::new();
        for f in self.log_files() {
            let text = read_from(&f, mark.offset(&f))?;
            out.extend(
                text.lines()
                    .filter(|l| markers.iter().any(|m| l.contains(m)))
                    .map(str::to_string),
            );
        }
        Ok(out)
    }

    /// Reset the session with `neighbor` from this side (a NOTIFICATION Cease and a new
    /// session): FRR `clear bgp`, BIRD `restart`, GoBGP `neighbor reset`. ExaBGP: not
    /// supported.
    fn reset_session(&self, lab: &Lab, neighbor: IpAddr) -> Result<()> {
        let _ = (lab, neighbor);
        Err(LabError::Invalid(format!(
            "{}: reset_session is not supported",
            self.kind()
        )))
    }

    /// Process ids of the running daemon(s) (for resource accounting, e.g. peak RSS
    /// from `/proc/PID/status`); empty once stopped.
    fn pids(&self, lab: &Lab) -> Vec<u32> {
        let _ = lab;
        Vec::new()
    }

    /// The session with `neighbor`, if configured.
    fn session(&self, lab: &Lab, neighbor: IpAddr) -> Result<Option<SessionView>> {
        Ok(self
            .sessions(lab)?
            .into_iter()
            .find(|s| s.neighbor == neighbor))
    }

    /// Wait until the session with `neighbor` is Established.
    fn wait_established(
        &self,
        lab: &Lab,
        neighbor: IpAddr,
        timeout: Duration,
    ) -> Result<SessionView> {
        let desc = format!("{} session with {neighbor} to be Established", self.kind());
        wait_until(
            &desc,
            timeout,
            || self.session(lab, neighbor),
            |s| s.as_ref().is_some_and(SessionView::is_established),
        )
        .map(|s| s.expect("predicate guarantees Some"))
    }

    /// Wait until the session with `neighbor` exists and `pred` accepts it.
    fn wait_until_session(
        &self,
        lab: &Lab,
        neighbor: IpAddr,
        timeout: Duration,
        mut pred: impl FnMut(&SessionView) -> bool,
    ) -> Result<SessionView>
    where
        Self: Sized,
    {
        let desc = format!(
            "{} session with {neighbor} to match the condition",
            self.kind()
        );
        wait_until(
            &desc,
            timeout,
            || self.session(lab, neighbor),
            |s| s.as_ref().is_some_and(&mut pred),
        )
        .map(|s| s.expect("predicate guarantees Some"))
    }

    /// Wait until `prefix` is received from `neighbor` and `pred` accepts it.
    fn wait_route(
        &self,
        lab: &Lab,
        neighbor: IpAddr,
        prefix: &str,
        timeout: Duration,
        mut pred: impl FnMut(&RouteView) -> bool,
    ) -> Result<RouteView>
    where
        Self: Sized,
    {
        let prefix = normalize_prefix(prefix)?;
        let desc = format!("{} to receive {prefix} from {neighbor}", self.kind());
        let mut last = None;
        wait_for(&desc, timeout, || {
            let r = find_route(self.received_routes(lab, neighbor)?, &prefix);
            last = r.clone();
            Ok(r.filter(|r| pred(r)))
        })
        .map_err(|e| match (e, last) {
            (LabError::WaitTimeout { desc, elapsed, .. }, last) => LabError::WaitTimeout {
                desc,
                elapsed,
                last: format!("{last:?}"),
            },
            (e, _) => e,
        })
    }

    /// Wait until `prefix` is no longer received from `neighbor`.
    fn wait_no_route(
        &self,
        lab: &Lab,
        neighbor: IpAddr,
        prefix: &str,
        timeout: Duration,
    ) -> Result<()> {
        let prefix = normalize_prefix(prefix)?;
        let desc = format!("{} to lose {prefix} from {neighbor}", self.kind());
        wait_until(
            &desc,
            timeout,
            || Ok(find_route(self.received_routes(lab, neighbor)?, &prefix)),
            Option::is_none,
        )
        .map(drop)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalizes_prefixes() {
        assert_eq!(
            normalize_prefix("2001:DB8:0::/48").unwrap(),
            "2001:db8::/48"
        );
        assert_eq!(normalize_prefix(" 192.0.2.0/24").unwrap(), "192.0.2.0/24");
        assert!(normalize_prefix("192.0.2.0").is_err());
        assert!(normalize_prefix("192.0.2.0/33").is_err());
    }

    #[test]
    fn parses_communities_and_states() {
        assert_eq!(parse_community("65001:7"), Some((65001, 7)));
        assert_eq!(parse_community("noExport"), None);
        assert_eq!(parse_large_community("1:2:3"), Some((1, 2, 3)));
        assert_eq!(parse_large_community("1:2:3:4"), None);
        assert_eq!(
            SessionState::parse("Established"),
            SessionState::Established
        );
        assert_eq!(SessionState::parse("OpenSent"), SessionState::OpenSent);
        assert_eq!(SessionState::parse("weird"), SessionState::Unknown);
    }
}
