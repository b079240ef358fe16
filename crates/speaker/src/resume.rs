//! Setting up non-stop routing, and taking over from a failed primary.
//!
//! Start-up ([`bring_up`], both roles), in this order and nowhere else:
//! 0. take this network namespace's NSR lock ([`NETNS_LOCK`], an abstract
//!    Unix socket: one per network namespace, released by the kernel when
//!    its holder dies). The gate's rules cover every BGP port of the
//!    namespace, so a second speaker here would take the first one's
//!    packets (or lose its own): it refuses to start with
//!    [`StartError::Conflict`], naming the holder (pid, command line,
//!    instance, queue) and the Holdfast rules in the namespace. Rules left
//!    by a dead process do not block anyone: the lock is free, a takeover
//!    of the same instance re-uses them (they keep dropping the dead
//!    process's FIN and RST until its own are in place), and another
//!    instance's leftovers are logged and left alone (they may still be
//!    keeping a dead primary's FIN from a peer another host is taking
//!    over);
//! 1. the ACK gate: bind the NFQUEUE (`AckGate::start`) and set its first
//!    mode (a takeover drops everything until its sockets are rebuilt);
//! 2. in one `iptables-restore` transaction per family, from one listing
//!    of the filter table taken with the lock held
//!    (`holdfast_linux::rules::install`): send every outgoing packet of
//!    our sessions to the gate (no bypass: if this process dies, the kernel
//!    drops our sessions' packets, FIN and RST included) and, takeover
//!    only, the guard — inbound segments of our sessions (from the
//!    configured neighbours; everyone else, such as the host agents'
//!    probes, still reaches the port) are dropped, so the kernel never
//!    answers a peer's segment with a RST before its socket exists;
//! 3. claim the instance (bump its epoch): an old primary is fenced from
//!    here on;
//! 4. a primary forgets what an earlier owner left; a takeover loads every
//!    stored session (without its logs: where they end), BFD record and
//!    set of routes added over the API, starts reading the logs on a
//!    thread of their own ([`PendingLogs`]; a preheated standby's
//!    takeover: only the log chunks after the positions it followed, for
//!    the sessions whose logs kept their version — [`continued`]), and
//!    destroys leftover sockets of a dead process on this host (their RST
//!    goes to the gate, which drops it);
//! 5. start the replicator ([`Nsr::start`]).
//!
//! A primary whose store does not answer at steps 3–4 starts unprotected;
//! a takeover fails.
//!
//! Takeover ([`Takeover`]) then continues, in the order docs/nsr.md sets
//! out:
//! 6. with `manage_address` add the service address and announce it;
//!    announce readiness (log line, `--takeover-ready-file`);
//! 7. wait until the sessions' local addresses are here;
//! 8. open the gate, rebuild every socket with TCP_REPAIR at the stored
//!    sequence numbers, with the unacknowledged send tail in its send queue;
//! 9. lift the guard and resume the sessions in Established.
//!
//! # Known issues
//! - Steps 6–9 still report errors with `anyhow`; start-up errors are
//!   [`StartError`].
//! - Until step 8 opens the gate, a store failure during a takeover sets
//!   the gate to let packets through (the replicator goes unprotected);
//!   the guard still drops every inbound segment and no session socket
//!   exists yet.

use crate::conn::{unix_ms, ConnRepl};
use crate::nsr::{Nsr, PendingLogs};
use crate::socket::SockOpts;
use crate::unacked::Unacked;
use anyhow::{bail, Context};
use bytes::Bytes;
use holdfast_api::TakeoverTimes;
use holdfast_config::Config;
use holdfast_linux::announce::{address_is_local, announce_address};
use holdfast_linux::nfq::{AckGate, ConnKey, GateMode};
use holdfast_linux::repair::{self, Restore, TcpRepairState};
use holdfast_linux::rules;
use holdfast_nsr::{
    InstanceState, LogChunks, LogEnd, LogPos, LogRange, Op, Store, StoreError, StoreUrl,
    StoredSession,
};
use holdfast_nsr_redis::RedisStore;
use holdfast_wire::Open;
use std::collections::HashMap;
use std::collections::HashSet;
use std::io;
use std::net::IpAddr;
use std::path::PathBuf;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use tokio::net::TcpStream;

/// Every store command must answer within this, or the store counts as
/// unavailable (sessions then continue unprotected).
const STORE_TIMEOUT: Duration = Duration::from_millis(500);
/// Added to the carried-over TCP timestamp clock.
const TS_MARGIN_MS: u64 = 100;
/// How long a takeover waits for the service address.
const ADDRESS_WAIT: Duration = Duration::from_secs(60);

/// A session's connection rebuilt on the backup, for its peer task.
pub struct Resumed {
    pub stream: TcpStream,
    pub repl: Box<ConnRepl>,
    pub outbound: bool,
    pub local_open: Open,
    pub remote_open: Open,
    /// Start of a message the old primary had begun to receive.
    pub partial: bytes::Bytes,
    /// ROUTE-REFRESH messages the old primary received and had not
    /// answered: the resumed session answers them.
    pub refresh: bytes::Bytes,
}

/// A Redis store that may be unreachable at start: it connects on demand.
pub(crate) struct LazyStore {
    /// `[nsr]`: the store URL, with `store_user` and the password of
    /// `store_password_file` read again at each connection (a rotated
    /// password is picked up without a restart).
    nsr: holdfast_config::Nsr,
    instance: String,
    /// `[nsr] wait_replicas` and `wait_timeout_ms`: each write and claim
    /// waits for them (`WAIT`); fewer in time is a failed write.
    wait_replicas: u32,
    wait_timeout: Duration,
    inner: Option<RedisStore>,
}

impl LazyStore {
    /// The store of `[nsr]`, not connected yet.
    pub(crate) fn new(n: &holdfast_config::Nsr) -> LazyStore {
        LazyStore {
            nsr: n.clone(),
            instance: n.instance.clone(),
            wait_replicas: n.wait_replicas,
            wait_timeout: Duration::from_millis(n.wait_timeout_ms),
            inner: None,
        }
    }

    fn get(&mut self) -> Result<&mut RedisStore, StoreError> {
        if self.inner.is_none() {
            let url: StoreUrl = self
                .nsr
                .store_url()
                .map_err(|e| StoreError::Unavailable(e.to_string()))?;
            let mut store = RedisStore::connect(&url, &self.instance, STORE_TIMEOUT)?;
            store.set_wait_replicas(self.wait_replicas);
            store.set_wait_timeout(self.wait_timeout);
            self.inner = Some(store);
        }
        self.inner
            .as_mut()
            .ok_or_else(|| StoreError::Unavailable("not connected".into()))
    }

    fn call<T>(
        &mut self,
        f: impl FnOnce(&mut RedisStore) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        let r = f(self.get()?);
        if matches!(r, Err(StoreError::Unavailable(_))) {
            self.inner = None;
        }
        r
    }
}

impl Store for LazyStore {
    fn write(&mut self, epoch: u64, ops: &[Op]) -> Result<(), StoreError> {
        self.call(|s| s.write(epoch, ops))
    }
    fn send_write(&mut self, epoch: u64, ops: &[Op]) -> Result<(), StoreError> {
        self.call(|s| s.send_write(epoch, ops))
    }
    fn recv_write(&mut self) -> Result<(), StoreError> {
        match self.inner.as_mut() {
            Some(s) => {
                let r = s.recv_write();
                if matches!(r, Err(StoreError::Unavailable(_))) {
                    self.inner = None;
                }
                r
            }
            None => Err(StoreError::Unavailable("not connected".into())),
        }
    }
    fn claim(&mut self) -> Result<u64, StoreError> {
        self.call(|s| s.claim())
    }
    fn claim_at_least(&mut self, min: u64) -> Result<u64, StoreError> {
        self.call(|s| s.claim_at_least(min))
    }
    fn epoch(&mut self) -> Result<u64, StoreError> {
        self.call(|s| s.epoch())
    }
    fn load(&mut self) -> Result<InstanceState, StoreError> {
        self.call(|s| s.load())
    }
    fn load_since(&mut self, from: &HashMap<String, LogPos>) -> Result<InstanceState, StoreError> {
        self.call(|s| s.load_since(from))
    }
    fn load_heads(
        &mut self,
        from: &HashMap<String, LogPos>,
    ) -> Result<(InstanceState, HashMap<String, LogEnd>), StoreError> {
        self.call(|s| s.load_heads(from))
    }
    fn load_logs(&mut self, ranges: &[LogRange]) -> Result<Vec<Option<LogChunks>>, StoreError> {
        self.call(|s| s.load_logs(ranges))
    }
    fn reconnect(&mut self) -> Result<(), StoreError> {
        self.inner = None;
        self.get().map(|_| ())
    }
}

/// TCP ports of our sessions: the listeners' and the neighbours'.
fn ports(cfg: &Config) -> Vec<u16> {
    let mut p: Vec<u16> = cfg.global.listen.iter().map(|a| a.port()).collect();
    p.push(179);
    p.sort_unstable();
    p.dedup();
    p
}

/// The abstract Unix socket name of the per-network-namespace NSR lock.
pub const NETNS_LOCK: &str = "holdfast-nsr";

/// The iptables tag of this instance's rules.
pub fn tag(instance: &str) -> String {
    format!("hf-{instance}")
}

/// Why non-stop routing could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("[nsr] is not configured (or not enabled)")]
    NotConfigured,
    #[error("another holdfastd runs non-stop routing in this network namespace ({holder}); the ACK gate's iptables rules cover every BGP port of a namespace, so only one holdfastd with [nsr] may run in it. Holdfast rules here: {rules}")]
    Conflict {
        holder: holdfast_linux::nslock::Holder,
        rules: String,
    },
    #[error("taking this network namespace's NSR lock (@{NETNS_LOCK}): {0}")]
    Lock(io::Error),
    #[error("installing the takeover guard and the ACK gate rules ({tag}): {source}")]
    Guard { tag: String, source: io::Error },
    #[error("binding NFQUEUE {queue}: {source}{bound}")]
    Queue {
        queue: u16,
        source: io::Error,
        /// Who has the queue already, if anyone (see [`queue_binder`]).
        bound: String,
    },
    #[error("installing the ACK gate rules ({tag}): {source}")]
    GateRules { tag: String, source: io::Error },
    #[error("claiming the instance in the state store: {0}")]
    Claim(StoreError),
    #[error("loading the instance's state: {0}")]
    Load(StoreError),
}

/// How this process starts non-stop routing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    Primary,
    Takeover,
}

/// What [`bring_up`] leaves.
struct Started {
    nsr: Nsr,
    /// Takeover: the stored sessions.
    sessions: Vec<StoredSession>,
    /// Takeover: the stored BFD sessions.
    bfd: Vec<holdfast_nsr::StoredBfd>,
    /// Takeover: the stored run-time routes per routing instance.
    originated: Vec<holdfast_nsr::StoredOriginated>,
    /// Takeover: the sessions' logs, being read.
    logs: Option<PendingLogs>,
    claim_us: u64,
    load_us: u64,
    /// Takeover from a standby: the sessions whose logs continue what the
    /// standby followed (their `adj_in`/`adj_out` hold only what is new).
    preheated: HashSet<String>,
}

/// Steps 1–5 of the module documentation, for either role.
/// `min_epoch`: a takeover's epoch is at least this (the controller's
/// fencing token; 0: just the next one). `followed`: a preheated standby's
/// positions in the stored logs; only what follows them is loaded.
fn bring_up(
    cfg: &Config,
    role: Role,
    min_epoch: u64,
    followed: Option<&HashMap<String, LogPos>>,
) -> Result<Started, StartError> {
    let started = Instant::now();
    let n = match &cfg.nsr {
        Some(n) if n.enabled => n,
        _ => return Err(StartError::NotConfigured),
    };
    let tag = tag(&n.instance);
    let ports = ports(cfg);
    // 0. One speaker with NSR per network namespace. The filter table is
    // listed once the lock is held, for the rules of steps 1–2.
    let (lock, listed) = take_netns_lock(NETNS_LOCK, n, &tag, &ports, role)?;
    // 1. The gate, in its first mode before any packet reaches it.
    let gate = AckGate::start(n.queue).map_err(|source| StartError::Queue {
        queue: n.queue,
        source,
        bound: queue_binder(n.queue).unwrap_or_default(),
    })?;
    let hold = role == Role::Takeover;
    if hold {
        gate.set_mode(GateMode::DropAll);
    }
    // 2. The gate's rules and (a takeover) the guard, in one transaction
    // per family.
    let locals = guard_locals(cfg);
    let guard = (role == Role::Takeover).then_some(locals.as_slice());
    listed
        .and_then(|l| rules::install(&tag, n.queue, &ports, guard, &l))
        .map_err(|source| match guard {
            Some(_) => StartError::Guard {
                tag: tag.clone(),
                source,
            },
            None => StartError::GateRules {
                tag: tag.clone(),
                source,
            },
        })?;
    // 3.–4. Claim; then forget (primary) or load (takeover).
    let mut store = LazyStore::new(n);
    let mut preheated = HashSet::new();
    let mut sessions = Vec::new();
    let mut bfd = Vec::new();
    let mut originated = Vec::new();
    let mut logs = None;
    let (mut claim_us, mut load_us) = (0, 0);
    let (epoch, store_up) = match role {
        Role::Primary => match claim_and_forget(&mut store) {
            Ok(e) => {
                tracing::info!(instance = %n.instance, epoch = e, "NSR: instance claimed; sessions are protected");
                (e, true)
            }
            Err(e) => {
                tracing::error!(instance = %n.instance, error = %e, "NSR: state store unavailable at start: running UNPROTECTED until it answers");
                (0, false)
            }
        },
        Role::Takeover => {
            let epoch = patiently("claim", || store.claim_at_least(min_epoch))
                .map_err(StartError::Claim)?;
            claim_us = started.elapsed().as_micros() as u64;
            tracing::info!(instance = %n.instance, epoch, "takeover: instance claimed; the old primary is fenced");
            let t = Instant::now();
            let none = HashMap::new();
            let (state, ends) = patiently("load", || store.load_heads(followed.unwrap_or(&none)))
                .map_err(StartError::Load)?;
            if let Some(from) = followed {
                preheated = continued(from, &state.sessions);
            }
            (sessions, bfd, originated) = (state.sessions, state.bfd, state.originated);
            load_us = t.elapsed().as_micros() as u64;
            let ranges = sessions
                .iter()
                .map(|s| LogRange {
                    key: s.key.clone(),
                    from: s.log,
                    end: ends.get(&s.key).copied().unwrap_or_default(),
                })
                .collect();
            let mut reader = LazyStore::new(n);
            logs = Some(
                PendingLogs::start(ranges, started, move |r| {
                    patiently("load logs", || reader.load_logs(r))
                })
                .map_err(|e| StartError::Load(StoreError::Unavailable(e.to_string())))?,
            );
            tracing::info!(
                sessions = sessions.len(),
                bfd_sessions = bfd.len(),
                api_routes = originated
                    .iter()
                    .map(|o| o.record.routes.len())
                    .sum::<usize>(),
                load_ms = load_us / 1000,
                "takeover: state loaded"
            );
            // Sockets of a process that died on this host may still hold
            // our connections (orphans in FIN-WAIT, say) and our port.
            // They are destroyed now, while the gate drops everything, so
            // their RST never leaves. One `ss` lists every connection
            // (one per session took 1.6 s with 500 sessions).
            let present = tcp_connections();
            for s in &sessions {
                let (l, r) = (s.record.local, s.record.remote);
                let here = match &present {
                    Some(c) => c.contains(&(canonical_sa(l), canonical_sa(r))),
                    None => has_socket(l, r),
                };
                if here {
                    kill_stale_socket(l, r);
                }
            }
            (epoch, true)
        }
    };
    // 5. The replicator.
    let nsr = Nsr::start(
        Box::new(store),
        gate,
        crate::nsr::Start {
            epoch,
            store_up,
            hold,
            instance: n.instance.clone(),
            store_desc: n.store_desc(),
            compact_bytes: n.compact_bytes,
            compact_ratio: n.compact_ratio,
            netns_lock: Some(lock),
        },
    );
    Ok(Started {
        nsr,
        sessions,
        bfd,
        originated,
        logs,
        claim_us,
        load_us,
        preheated,
    })
}

/// Step 0: takes the namespace's NSR lock (`name`: [`NETNS_LOCK`]), or
/// names who holds it. With the lock held, every Holdfast rule here is a
/// dead process's: ours are re-used (replaced by steps 1–2), others are
/// logged. Returns the lock and the filter table as listed with it held.
fn take_netns_lock(
    name: &str,
    n: &holdfast_config::Nsr,
    tag: &str,
    ports: &[u16],
    role: Role,
) -> Result<
    (
        holdfast_linux::nslock::NetnsLock,
        io::Result<rules::Listing>,
    ),
    StartError,
> {
    use holdfast_linux::nslock::NetnsLock;
    let me = format!(
        "holdfastd {role:?}, instance {:?}, NFQUEUE {}, ports {ports:?}, rules tagged holdfast:{tag}",
        n.instance, n.queue
    );
    match NetnsLock::acquire(name, &me).map_err(StartError::Lock)? {
        Ok(lock) => {
            let listed = rules::Listing::read();
            let found = listed.as_ref().map(rules::Listing::holdfast);
            for line in found.iter().flatten() {
                match rules::holdfast_tag(line) {
                    Some(t) if t == tag => tracing::info!(
                        rule = %line,
                        "NSR: a rule of this instance left by a process that is gone: re-used"
                    ),
                    _ => tracing::warn!(
                        rule = %line,
                        "NSR: a Holdfast rule of another instance, left by a process that is gone: left in place (remove it by hand once nobody takes that instance over)"
                    ),
                }
            }
            Ok((lock, listed))
        }
        Err(holder) => Err(StartError::Conflict {
            holder,
            rules: describe_rules(rules::list_any()),
        }),
    }
}

/// The Holdfast rules of this namespace in short: `TAG (NFQUEUE N)`.
fn describe_rules(found: io::Result<Vec<String>>) -> String {
    let lines = match found {
        Ok(l) => l,
        Err(e) => return format!("(cannot list them: {e})"),
    };
    let mut tags: Vec<String> = Vec::new();
    for line in &lines {
        let Some(t) = rules::holdfast_tag(line) else {
            continue;
        };
        let what = match rules::queue_num(line) {
            Some(q) => format!("holdfast:{t} (NFQUEUE {q})"),
            None => format!("holdfast:{t}"),
        };
        if !tags.contains(&what) {
            tags.push(what);
        }
    }
    if tags.is_empty() {
        "none".into()
    } else {
        format!("{} ({} rules)", tags.join(", "), lines.len())
    }
}

/// Who has NFQUEUE `queue` bound in this namespace, from
/// `/proc/thread-self/net/netfilter/nfnetlink_queue` (queue, netlink port
/// id, ...): `; queue N is bound by netlink port P (pid P: CMDLINE)`.
fn queue_binder(queue: u16) -> Option<String> {
    let text = std::fs::read_to_string("/proc/thread-self/net/netfilter/nfnetlink_queue").ok()?;
    let portid = text.lines().find_map(|l| {
        let mut w = l.split_whitespace();
        (w.next()?.parse::<u16>().ok()? == queue).then(|| w.next().map(str::to_string))?
    })?;
    let cmd = std::fs::read(format!("/proc/{portid}/cmdline"))
        .ok()
        .map(|raw| {
            raw.split(|b| *b == 0)
                .filter(|w| !w.is_empty())
                .map(|w| String::from_utf8_lossy(w).into_owned())
                .collect::<Vec<_>>()
                .join(" ")
        })
        .filter(|c| !c.is_empty());
    Some(match cmd {
        Some(c) => format!("; queue {queue} is bound by netlink port {portid} (pid {portid}: {c})"),
        None => format!("; queue {queue} is bound by netlink port {portid}"),
    })
}

/// The sessions whose stored logs continue where a standby left them
/// (same version, read from its position). Every other session was read
/// whole and is rebuilt cold; each is logged with the reason.
pub(crate) fn continued(
    from: &HashMap<String, LogPos>,
    sessions: &[StoredSession],
) -> HashSet<String> {
    let mut out = HashSet::new();
    for s in sessions {
        match from.get(&s.key) {
            Some(pos) if *pos == s.log => {
                out.insert(s.key.clone());
            }
            Some(pos) => tracing::warn!(
                key = %s.key,
                followed_version = pos.version,
                stored_version = s.log.version,
                "takeover: the session's logs were replaced since the standby read them (written anew or compacted): its tables are rebuilt cold"
            ),
            None => tracing::warn!(
                key = %s.key,
                "takeover: the standby had not followed this session: its tables are rebuilt cold"
            ),
        }
    }
    for k in from
        .keys()
        .filter(|k| !sessions.iter().any(|s| &s.key == *k))
    {
        tracing::info!(key = %k, "takeover: a session the standby followed is no longer stored: its tables are dropped");
    }
    out
}

/// How long a takeover retries a store that does not answer (a new host's
/// first packets may wait for ARP, or the store may be failing over).
const TAKEOVER_STORE_PATIENCE: Duration = Duration::from_secs(5);

/// Runs `f` until it succeeds, fails with anything but
/// [`StoreError::Unavailable`], or [`TAKEOVER_STORE_PATIENCE`] has passed.
fn patiently<T>(what: &str, mut f: impl FnMut() -> Result<T, StoreError>) -> Result<T, StoreError> {
    let start = Instant::now();
    loop {
        match f() {
            Err(StoreError::Unavailable(e)) if start.elapsed() < TAKEOVER_STORE_PATIENCE => {
                tracing::warn!(what, error = %e, "takeover: the state store does not answer; retrying");
                std::thread::sleep(Duration::from_millis(50));
            }
            r => return r,
        }
    }
}

/// A primary's steps 3–4: claim the instance and remove every session (BGP
/// and BFD) and every set of run-time routes an earlier owner left.
/// Returns the epoch.
fn claim_and_forget(store: &mut LazyStore) -> Result<u64, StoreError> {
    let epoch = store.claim()?;
    let state = store.load()?;
    let ops: Vec<Op> = state
        .sessions
        .into_iter()
        .map(|s| Op::Remove { key: s.key })
        .chain(state.bfd.into_iter().map(|b| Op::BfdRemove { key: b.key }))
        .chain(state.originated.into_iter().map(|o| Op::Originated {
            key: o.key,
            record: holdfast_nsr::OriginatedRecord {
                routes: Vec::new(),
                ..o.record
            },
        }))
        .collect();
    if !ops.is_empty() {
        store.write(epoch, &ops)?;
    }
    Ok(epoch)
}

/// NSR for a primary started normally. A store that does not answer is
/// not fatal: the speaker runs unprotected until it does.
pub fn start_primary(cfg: &Config) -> Result<Nsr, StartError> {
    bring_up(cfg, Role::Primary, 0, None).map(|s| s.nsr)
}

/// A takeover in progress.
pub struct Takeover {
    pub nsr: Nsr,
    pub started: Instant,
    pub times: TakeoverTimes,
    /// Stored sessions by (instance, peer address).
    pub sessions: HashMap<(String, IpAddr), StoredSession>,
    /// Stored BFD sessions by key (`instance/address`), taken by the
    /// daemon as it adds each neighbour's BFD session.
    pub bfd: HashMap<String, holdfast_nsr::BfdRecord>,
    /// Stored run-time routes by routing instance, taken by the daemon
    /// before it originates anything (`Daemon::adopt_stored_routes`).
    pub originated: HashMap<String, holdfast_nsr::OriginatedRecord>,
    pub ready_file: Option<PathBuf>,
    /// Sessions whose tables a standby built already (keys).
    pub preheated: HashSet<String>,
    /// The stored sessions' logs, read while the sessions resume; the RIB
    /// threads take them at `RibCmd::Resume`.
    pub logs: PendingLogs,
    /// The host's addresses, read once for every resumed session's next
    /// hops (one reading each took 30 µs: 30 ms of a 1,000-session
    /// takeover).
    pub interfaces: crate::addrs::Interfaces,
    tag: String,
    /// The local addresses the guard was installed for (`rules::install`).
    guard_locals: Vec<IpAddr>,
    manage_address: Option<IpAddr>,
    /// When the gate opened (the sockets' rebuild started), for the log.
    opened: Option<Instant>,
}

/// The local addresses a takeover's guard covers (`rules::install`), each
/// in its family: every neighbour's `local_address`, else `[nsr] address`;
/// none (every destination) when a neighbour has neither. Those installing
/// the guard and those lifting it name the same.
fn guard_locals(cfg: &Config) -> Vec<IpAddr> {
    let service = cfg.nsr.as_ref().and_then(|n| n.address);
    let mut locals = Vec::with_capacity(2);
    for nb in &cfg.neighbors {
        match nb.local_address.or(service) {
            Some(a) => locals.push(canonical(a)),
            None => return Vec::new(),
        }
    }
    locals.sort();
    locals.dedup();
    locals
}

impl Takeover {
    /// Steps 1–5 as a takeover; the gate drops everything until
    /// [`Takeover::open_gate`]. `followed`: the positions of a preheated
    /// standby in the stored logs (only what follows is loaded).
    pub fn begin(
        cfg: &Config,
        ready_file: Option<PathBuf>,
        min_epoch: u64,
        followed: Option<&HashMap<String, LogPos>>,
    ) -> Result<Takeover, StartError> {
        let started = Instant::now();
        let started_unix_us = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_micros() as u64);
        let up = bring_up(cfg, Role::Takeover, min_epoch, followed)?;
        let n = cfg.nsr.as_ref().ok_or(StartError::NotConfigured)?;
        let mut sessions = HashMap::new();
        for s in up.sessions {
            sessions.insert((s.record.instance.clone(), s.record.peer), s);
        }
        let bfd: HashMap<String, holdfast_nsr::BfdRecord> =
            up.bfd.into_iter().map(|b| (b.key, b.record)).collect();
        let originated = up
            .originated
            .into_iter()
            .map(|o| (o.key, o.record))
            .collect();
        let times = TakeoverTimes {
            sessions: sessions.len() as u64,
            claim_us: up.claim_us,
            load_us: up.load_us,
            preheated: up.preheated.len() as u64,
            started_unix_us,
            ..Default::default()
        };
        Ok(Takeover {
            nsr: up.nsr,
            started,
            times,
            sessions,
            bfd,
            originated,
            ready_file,
            preheated: up.preheated,
            logs: up.logs.unwrap_or_else(|| PendingLogs::read(HashMap::new())),
            interfaces: crate::addrs::Interfaces::new(),
            tag: tag(&n.instance),
            guard_locals: guard_locals(cfg),
            manage_address: if n.manage_address { n.address } else { None },
            opened: None,
        })
    }

    /// Step 6: with `manage_address`, add the service address; then tell
    /// the orchestrator we are ready for the address. (In that order: the
    /// agent adds the addresses the controller names once the ready file
    /// appears, and the unit's own /32 is to be there first.)
    pub fn announce_ready(&self) -> anyhow::Result<()> {
        if let Some(addr) = self.manage_address {
            add_address(addr)?;
        }
        tracing::info!(
            sessions = self.sessions.len(),
            "takeover: READY for the service address"
        );
        if let Some(p) = &self.ready_file {
            std::fs::write(p, format!("{}\n", std::process::id()))
                .with_context(|| format!("writing {}", p.display()))?;
        }
        Ok(())
    }

    /// Step 7: wait until every session's local address is configured here.
    pub async fn wait_for_addresses(&mut self) -> anyhow::Result<()> {
        let t = Instant::now();
        let mut wanted: Vec<IpAddr> = self
            .sessions
            .values()
            .map(|s| canonical(s.record.local.ip()))
            .collect();
        wanted.sort();
        wanted.dedup();
        loop {
            let missing: Vec<IpAddr> = wanted
                .iter()
                .copied()
                .filter(|a| !address_is_local(*a))
                .collect();
            if missing.is_empty() {
                break;
            }
            if t.elapsed() > ADDRESS_WAIT {
                bail!("takeover: service address(es) {missing:?} never appeared");
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        self.times.address_wait_us = t.elapsed().as_micros() as u64;
        Ok(())
    }

    /// Step 8 for one session: the socket, rebuilt.
    pub fn restore(&mut self, s: &StoredSession, sock: &SockOpts) -> anyhow::Result<Resumed> {
        let rec = &s.record;
        let t = Instant::now();
        let (snd_una, queue) = s.send_queue();
        let st = TcpRepairState {
            local: rec.local,
            remote: rec.remote,
            snd_seq: s.snd_nxt(),
            rcv_seq: s.rcv,
            outq: queue.len() as u32,
            mss: rec.tcp.mss,
            snd_wscale: rec.tcp.snd_wscale,
            rcv_wscale: rec.tcp.rcv_wscale,
            sack: rec.tcp.sack,
            timestamps: rec.tcp.timestamps,
            ts_val: rec.tcp.ts_val,
            snd_wnd: rec.tcp.snd_wnd,
            rcv_wnd: rec.tcp.rcv_wnd,
        };
        // The old socket's timestamp clock, carried over by wall time (with
        // a margin for clock differences between hosts): never below what
        // the peer last saw, or PAWS would discard our segments.
        let elapsed = unix_ms().saturating_sub(rec.tcp.ts_unix_ms) + TS_MARGIN_MS;
        let ts_val = st.ts_val_after(Duration::from_millis(elapsed));
        let ckey = ConnKey {
            local: rec.local,
            remote: rec.remote,
        };
        self.nsr.gate.register(ckey, s.rcv, rec.tcp.rcv_wscale);
        let restore = Restore {
            state: &st,
            snd_una,
            send_queue: &queue,
            rcv_nxt: s.rcv,
            ts_val,
            md5_key: sock.md5.as_deref().map(str::as_bytes),
            bind_device: sock.vrf.as_deref(),
        };
        // Leftover sockets of a dead process on this host were destroyed
        // in `bring_up`, before the gate opened.
        let std_stream = repair::restore_in_repair(&restore)
            .with_context(|| format!("TCP_REPAIR restore of {}", rec.peer))?;
        let us = t.elapsed().as_micros() as u64;
        self.times.tcp_restore_us += us;
        self.times.tcp_restore_max_us = self.times.tcp_restore_max_us.max(us);
        std_stream.set_nonblocking(true)?;
        let stream = TcpStream::from_std(std_stream)?;
        crate::socket::accepted(&stream, sock)?;
        let local_open = holdfast_wire::decode_open(&rec.open_sent)
            .map_err(|e| anyhow::anyhow!("stored OPEN sent: {e}"))?;
        let remote_open = holdfast_wire::decode_open(&rec.open_received)
            .map_err(|e| anyhow::anyhow!("stored OPEN received: {e}"))?;
        let gen = self.nsr.gen();
        // The logs' size comes later (`ConnRepl::logs_unread`).
        let log_bytes = s.stored_bytes() as u64;
        let snd_next = s.snd_nxt();
        self.nsr.figures(&s.key, |f| {
            f.peer = rec.peer.to_string();
            f.synced_gen = gen;
            f.rcv_confirmed = s.rcv;
            f.snd_next = snd_next;
            f.log_bytes = log_bytes;
        });
        let repl = ConnRepl {
            nsr: self.nsr.clone(),
            ckey,
            tcp: rec.tcp.clone(),
            rcv_base: s.rcv.wrapping_sub(s.partial.len() as u32),
            consumed: 0,
            ahead: 0,
            covered: s.partial.len() as u64,
            snd_base: snd_next,
            queued: 0,
            key: Some(s.key.clone()),
            synced_gen: gen,
            open_tx: Some(rec.open_sent.clone()),
            open_rx: Some(rec.open_received.clone()),
            during_snapshot: None,
            log_bytes,
            logs_unread: Some(self.logs.clone()),
            last_acked: Instant::now(),
            unacked: Unacked::restored(snd_next, Bytes::from(queue)),
        };
        Ok(Resumed {
            stream,
            repl: Box::new(repl),
            outbound: rec.outbound,
            local_open,
            remote_open,
            partial: s.partial.clone(),
            refresh: s.refresh.clone(),
        })
    }

    /// Step 8, first: the gate lets our sessions' packets through again
    /// (the restored sockets' window probes must reach the peers).
    pub fn open_gate(&mut self) {
        self.nsr.gate.set_mode(GateMode::Protected);
        self.opened = Some(Instant::now());
    }

    /// Step 9: lift the guard (a `RETURN` heads its chain; the rules go
    /// in [`Takeover::remove_guard`], once the sessions run).
    pub fn finish(&mut self) -> anyhow::Result<()> {
        let sockets_us = self.opened.map_or(0, |t| t.elapsed().as_micros() as u64);
        let t = Instant::now();
        rules::lift_guard(&self.tag, &self.guard_locals).context("lifting the takeover guard")?;
        let guard_lift_us = t.elapsed().as_micros() as u64;
        self.times.resumed_us = self.started.elapsed().as_micros() as u64;
        tracing::info!(
            sessions = self.times.sessions,
            claim_us = self.times.claim_us,
            load_us = self.times.load_us,
            address_wait_us = self.times.address_wait_us,
            tcp_restore_us = self.times.tcp_restore_us,
            sockets_us,
            guard_lift_us,
            resumed_us = self.times.resumed_us,
            "takeover: sessions RESUMED"
        );
        short_purge_delay_later();
        if let Ok(mut t) = self.nsr.shared.takeover.lock() {
            // The RIB threads may already have reported the tables.
            let (routes, tables_us) = t.as_ref().map_or((0, 0), |x| (x.routes, x.tables_us));
            *t = Some(TakeoverTimes {
                routes,
                tables_us,
                logs_us: self.logs.since_start_us().unwrap_or(0),
                ..self.times.clone()
            });
        }
        Ok(())
    }

    /// After [`Takeover::finish`], once every session was told to resume:
    /// the lifted guard's rules removed, off the sessions' path (deleting
    /// rules waits for the kernel). A failure is logged: the lifted guard
    /// drops nothing, and the next install removes it.
    pub fn remove_guard(&self) {
        let (tag, locals) = (self.tag.clone(), self.guard_locals.clone());
        tokio::task::spawn_blocking(move || {
            if let Err(e) = rules::remove_guard(&tag, &locals) {
                tracing::warn!(error = %e, "removing the lifted takeover guard");
            }
        });
    }
}

/// v4-mapped IPv6 addresses as IPv4.
fn canonical(a: IpAddr) -> IpAddr {
    match a {
        IpAddr::V6(v6) => v6
            .to_ipv4_mapped()
            .map(IpAddr::V4)
            .unwrap_or(IpAddr::V6(v6)),
        v4 => v4,
    }
}

/// `manage_address`: add the service address on the interface that routes
/// towards it, then announce it (gratuitous ARP / unsolicited NA).
fn add_address(addr: IpAddr) -> anyhow::Result<()> {
    if address_is_local(addr) {
        return Ok(());
    }
    let dev = holdfast_linux::rtnl::add_routed_host_address(addr)
        .with_context(|| format!("adding {addr} on the interface that routes to it"))?;
    announce_address(&dev, addr).with_context(|| format!("announcing {addr} on {dev}"))?;
    tracing::info!(%addr, %dev, "takeover: service address added and announced");
    Ok(())
}

fn ss_filter(local: std::net::SocketAddr, remote: std::net::SocketAddr) -> String {
    format!(
        "src {} sport = :{} dst {} dport = :{}",
        canonical(local.ip()),
        local.port(),
        canonical(remote.ip()),
        remote.port()
    )
}

/// A socket address with a v4-mapped IPv6 address as IPv4.
fn canonical_sa(a: std::net::SocketAddr) -> std::net::SocketAddr {
    std::net::SocketAddr::new(canonical(a.ip()), a.port())
}

/// Every TCP connection in this network namespace as (local, remote),
/// canonical, from one `ss -H -tan`; `None` if `ss` failed.
fn tcp_connections() -> Option<HashSet<(std::net::SocketAddr, std::net::SocketAddr)>> {
    let o = std::process::Command::new("ss")
        .args(["-H", "-tan"])
        .output()
        .ok()?;
    if !o.status.success() {
        return None;
    }
    Some(
        String::from_utf8_lossy(&o.stdout)
            .lines()
            .filter_map(parse_ss_line)
            .collect(),
    )
}

/// (local, remote) of one `ss -H -tan` line (`STATE RECV-Q SEND-Q LOCAL
/// PEER`); `None` for listeners (`*` ports) and anything unparsable.
fn parse_ss_line(line: &str) -> Option<(std::net::SocketAddr, std::net::SocketAddr)> {
    let f: Vec<&str> = line.split_whitespace().collect();
    Some((parse_ss_addr(f.get(3)?)?, parse_ss_addr(f.get(4)?)?))
}

/// `1.2.3.4:179`, `[2001:db8::1]:179`, `[::ffff:1.2.3.4]:179`, with an
/// optional `%dev` after the address.
fn parse_ss_addr(s: &str) -> Option<std::net::SocketAddr> {
    let (host, port) = s.rsplit_once(':')?;
    let host = host.strip_prefix('[').unwrap_or(host);
    let host = host.strip_suffix(']').unwrap_or(host);
    let host = host.split('%').next()?;
    let host = host.strip_suffix(']').unwrap_or(host);
    let ip: IpAddr = host.parse().ok()?;
    Some(std::net::SocketAddr::new(canonical(ip), port.parse().ok()?))
}

/// Whether a socket of this connection exists here (`ss -tan FILTER`).
fn has_socket(local: std::net::SocketAddr, remote: std::net::SocketAddr) -> bool {
    let filter = ss_filter(local, remote);
    let args: Vec<&str> = ["-H", "-tan"]
        .into_iter()
        .chain(filter.split_whitespace())
        .collect();
    std::process::Command::new("ss")
        .args(&args)
        .output()
        .map(|o| !String::from_utf8_lossy(&o.stdout).trim().is_empty())
        .unwrap_or(false)
}

/// Destroys a leftover socket of the same connection (`ss -K`).
fn kill_stale_socket(local: std::net::SocketAddr, remote: std::net::SocketAddr) {
    let filter = ss_filter(local, remote);
    let args: Vec<&str> = std::iter::once("-K")
        .chain(filter.split_whitespace())
        .collect();
    match std::process::Command::new("ss").args(&args).output() {
        Ok(o) => tracing::info!(
            filter,
            out = %String::from_utf8_lossy(&o.stdout),
            "takeover: destroyed a leftover socket of a dead process"
        ),
        Err(e) => tracing::warn!(error = %e, "ss -K failed"),
    }
}

/// How long after its sessions resumed a backup keeps the allocator's long
/// purge delay: past the table rebuild (a cold takeover of 1M routes
/// rebuilds in about 2.5 s here). See `holdfast_linux::allocator`.
const SHORT_PURGE_AFTER: Duration = Duration::from_secs(10);

/// Switches the allocator to its short purge delay [`SHORT_PURGE_AFTER`]
/// from now (at once outside a runtime).
fn short_purge_delay_later() {
    match tokio::runtime::Handle::try_current() {
        Ok(h) => {
            h.spawn(async {
                tokio::time::sleep(SHORT_PURGE_AFTER).await;
                holdfast_linux::allocator::use_short_purge_delay();
            });
        }
        Err(_) => {
            holdfast_linux::allocator::use_short_purge_delay();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ss_lines_parse_to_canonical_pairs() {
        let sa = |s: &str| s.parse::<std::net::SocketAddr>().unwrap();
        assert_eq!(
            parse_ss_line("ESTAB 0      0      198.18.0.10:179 100.64.0.1:40001"),
            Some((sa("198.18.0.10:179"), sa("100.64.0.1:40001")))
        );
        assert_eq!(
            parse_ss_line("FIN-WAIT-1 0 5 [::ffff:198.18.0.10]:179 [::ffff:198.18.0.1]:5000"),
            Some((sa("198.18.0.10:179"), sa("198.18.0.1:5000")))
        );
        assert_eq!(
            parse_ss_line("ESTAB 0 0 [fd00::10]:179 [fd00::1]:5000"),
            Some((sa("[fd00::10]:179"), sa("[fd00::1]:5000")))
        );
        assert_eq!(
            parse_ss_line("ESTAB 0 0 10.0.0.1%vrf-red:179 10.0.0.2:5000"),
            Some((sa("10.0.0.1:179"), sa("10.0.0.2:5000")))
        );
        assert_eq!(parse_ss_line("LISTEN 0 128 0.0.0.0:179 0.0.0.0:*"), None);
        assert_eq!(parse_ss_line("LISTEN 0 128 [::]:179 [::]:*"), None);
    }
    fn stored(key: &str, log: LogPos) -> StoredSession {
        StoredSession {
            key: key.into(),
            record: crate::test_fixtures::session_record((Vec::new(), Vec::new()), (1, 1)),
            rcv: 1,
            partial: bytes::Bytes::new(),
            adj_in: Vec::new(),
            adj_out: Vec::new(),
            snd_una: 1,
            send_tail: Vec::new(),
            refresh: bytes::Bytes::new(),
            log,
        }
    }

    #[test]
    fn the_refusal_names_every_tag_and_queue_once() {
        let lines = vec![
            r#"iptables -A OUTPUT -p tcp -m tcp --sport 179 -m comment --comment "holdfast:hf-edge-1" -j NFQUEUE --queue-num 1707"#.to_string(),
            "iptables -A OUTPUT -p tcp -m tcp --dport 179 -m comment --comment holdfast:hf-edge-1 -j NFQUEUE --queue-num 1707".to_string(),
            "iptables -A INPUT -p tcp -m tcp --dport 179 -m comment --comment holdfast:hf-edge-1 -j DROP".to_string(),
        ];
        assert_eq!(
            describe_rules(Ok(lines)),
            "holdfast:hf-edge-1 (NFQUEUE 1707), holdfast:hf-edge-1 (3 rules)"
        );
        assert_eq!(describe_rules(Ok(Vec::new())), "none");
        assert!(describe_rules(Err(io::Error::other("no iptables"))).contains("no iptables"));
    }

    #[test]
    fn a_second_speaker_in_the_namespace_is_refused_naming_the_first() {
        let (cfg, _) = holdfast_config::parse(
            "[global]\nasn = 65000\nrouter_id = \"192.0.2.1\"\n[nsr]\nstore = \"redis://127.0.0.1:1\"\ninstance = \"unit-a\"\nqueue = 4242\n",
        )
        .expect("config");
        let n = cfg.nsr.as_ref().expect("nsr");
        // A name of this test's own, so that a holdfastd or another test
        // run in the same namespace does not interfere.
        let name = format!("holdfast-test-resume-{}", std::process::id());
        let first = take_netns_lock(&name, n, "hf-unit-a", &[179], Role::Primary).expect("free");
        let second =
            take_netns_lock(&name, n, "hf-unit-a", &[179], Role::Takeover).expect_err("refused");
        let text = second.to_string();
        assert!(
            text.contains("another holdfastd runs non-stop routing"),
            "{text}"
        );
        assert!(
            text.contains(&format!("pid {}", std::process::id())),
            "{text}"
        );
        assert!(text.contains("instance \"unit-a\", NFQUEUE 4242"), "{text}");
        drop(first);
        let again = take_netns_lock(&name, n, "hf-unit-a", &[179], Role::Takeover);
        assert!(again.is_ok(), "released when dropped");
    }

    #[test]
    fn only_sessions_read_from_the_standby_position_are_preheated() {
        let at = |version, adj_in, adj_out| LogPos {
            version,
            adj_in,
            adj_out,
        };
        let followed: HashMap<String, LogPos> = [
            ("same".to_string(), at(7, 3, 4)),
            ("compacted".to_string(), at(8, 5, 5)),
            ("gone".to_string(), at(9, 1, 1)),
        ]
        .into_iter()
        .collect();
        let sessions = vec![
            stored("same", at(7, 3, 4)),
            // Logs replaced: read whole from a new version.
            stored("compacted", at(12, 0, 0)),
            // Never followed.
            stored("new", at(13, 0, 0)),
        ];
        let got = continued(&followed, &sessions);
        assert_eq!(got, HashSet::from(["same".to_string()]));
    }
}
