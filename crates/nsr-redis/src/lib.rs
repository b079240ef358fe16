//! `holdfast-nsr-redis`: the Redis [`Store`], what TENSOR (§3.1)
//! replicates to, over the synchronous redis-rs client. The records, the
//! `Store` trait, the in-memory store and the store's address
//! ([`StoreUrl`]) are `holdfast-nsr`'s, which does no I/O.
//!
//! # Key layout
//!
//! Every key of an instance starts with `hf:{<instance>}:` — the braces make
//! the instance name a hash tag, so all of an instance's keys live in one
//! slot and one Lua script may touch them all. Under that prefix:
//!
//! | key | type | content |
//! |---|---|---|
//! | `epoch` | string (integer) | the instance epoch; missing = 0. `INCR` by [`Store::claim`] |
//! | `sessions` | set | the session keys `K` of stored sessions |
//! | `s:K:rec` | string | the [`SessionRecord`](holdfast_nsr::SessionRecord) as JSON; its `schema` field is the [`SCHEMA_VERSION`](holdfast_nsr::SCHEMA_VERSION) of the writer |
//! | `s:K:rcv` | string | replicated receive sequence, `u32` in decimal |
//! | `s:K:in` | list | Adj-RIB-In log: chunks of whole UPDATE messages, oldest first |
//! | `s:K:out` | list | Adj-RIB-Out log: chunks of whole messages, oldest first |
//! | `s:K:tail` | list | send tail: chunks `[seq_end: 4 bytes big-endian][bytes]`, oldest first |
//! | `s:K:una` | string | lower bound of the peer's acknowledgement, `u32` in decimal |
//! | `s:K:part` | string | received bytes just before `rcv` that are not yet a whole message |
//! | `s:K:rr` | string | ROUTE-REFRESH messages received and not answered yet ([`Op::Refresh`]), whole, oldest first; missing = none |
//! | `s:K:ver` | string (integer) | version of the session's `in` and `out` logs ([`holdfast_nsr::LogPos`]): drawn from `logver` whenever they are replaced (`S`, `P`) |
//! | `logver` | string (integer) | the counter log versions are drawn from; created at the server's time in microseconds, so that a store restarted without its data does not hand out a version again |
//! | `bfd` | hash | BFD records: field = key, value = [`holdfast_nsr::BfdRecord`] JSON (non-stop BFD) |
//! | `originated` | hash | run-time routes: field = routing instance, value = [`holdfast_nsr::OriginatedRecord`] JSON (the whole set; no field: none) |
//!
//! `K` may contain anything; the suffixes contain no `:`, so no two
//! sessions' keys collide.
//!
//! # Access control
//!
//! The store uses no Pub/Sub channel; every key it touches has the
//! instance's prefix, so a Redis ACL user limited to `hf:{<instance>}:*`
//! and the commands above serves one unit and nothing else: [`acl`] makes
//! its `ACL SETUSER` rules (and a BFD relay's, read-only;
//! `holdfast_nsr::acl`, re-exported). The user and
//! password come with the URL (`redis://user:password@host`), which
//! `holdfastd` builds from `[nsr] store_user` and `store_password_file`.
//!
//! # Writes
//!
//! [`Store::write`] is one round trip: a Lua script (`EVALSHA`; the script
//! is loaded on every connection, and `EVAL` is sent if the server answers
//! `NOSCRIPT`) that compares the `epoch` key with the writer's epoch —
//! answering the error `FENCED <current>` and writing nothing when they
//! differ — and then applies the operations in order. Redis runs a script
//! atomically, so a batch is applied whole and fenced as a whole. Every key
//! the script touches is passed in `KEYS` (`epoch`, `sessions`, `logver`,
//! then the nine keys of each session of the batch), the operations in `ARGV`
//! (binary-safe): `ARGV[1]` is the epoch, then per operation a head `<op
//! letter><session slot>` and its arguments: `S` name record rcv una; `R`
//! ack updates partial; `T` `[seq_end BE32][bytes]`; `A` snd_una; `P` adj_in
//! adj_out; `F` pending ROUTE-REFRESH messages (empty: none); `X` name. Consecutive appends of one session are merged in the
//! client first (`holdfast_nsr::batch`, shared with the in-memory store); the command is packed by hand, the
//! payloads copied once.
//!
//! A batch's BFD records ([`Op::Bfd`], [`Op::BfdRemove`]) and run-time
//! route sets ([`Op::Originated`]) are applied after its session steps by
//! a second, equally fenced script (`RECORDS_SCRIPT`): atomic on their
//! own, not together with the steps. A write is confirmed (and what waited
//! for it released) only once both calls succeeded.
//!
//! With [`RedisStore::set_wait_replicas`], a `WAIT` is pipelined after the
//! script, so a write returns once replicas have it (still one round trip
//! to the master).
//!
//! Writes may be pipelined ([`Store::send_write`], then
//! [`Store::recv_write`]): a write's calls are sent without waiting for
//! those of earlier writes, and their replies are read in order
//! (`pipeline.rs`). [`Store::write`] is one write sent and
//! read.
//!
//! A batch whose payload exceeds [`RedisStore::set_batch_limit`] (64 MiB
//! by default) is split into several script calls, each of them fenced and
//! atomic, but not the batch as a whole.
//!
//! # Timeouts and connections
//!
//! The timeout given to [`RedisStore::connect`] bounds the whole connection
//! set-up (TCP or TLS connect, `AUTH`, `SELECT`, `SCRIPT LOAD`, and the
//! Sentinel queries) and then every socket read and write, so an outage is
//! reported as [`StoreError::Unavailable`] after at most about that long,
//! never as a hang. After any I/O error or timeout the connection is
//! dropped (a late reply must never be read as the answer to the next
//! command) and the next call connects again, as does
//! [`Store::reconnect`]. The redis-rs handshake is configured to send
//! nothing (`disable-client-setinfo`): the client's own set-up commands
//! are sent after the socket timeouts are set.
//!
//! With [`StoreUrl::Sentinel`] the master is asked from the sentinels in
//! turn (`SENTINEL get-master-addr-by-name`, each step bounded), starting
//! with the one that answered last, and checked with `ROLE`. A `READONLY`,
//! `MASTERDOWN` or `LOADING` answer (the master was demoted) drops the
//! connection so that the next call resolves the master again.
//!
//! With [`StoreUrl::Cluster`] (`redis+cluster://`) the master of the
//! instance's slot is asked from the seed nodes (`CLUSTER SLOTS`), and
//! `MOVED`, `ASK`, `TRYAGAIN` and `CLUSTERDOWN` drop the connection so that
//! the next call finds it again: see `cluster.rs`. All of an instance's
//! keys share one hash tag, hence one slot and one master, so the scripts,
//! the reads and `WAIT` (that shard's replicas) work as on one server.
//!
//! # Known issues
//!
//! - A write that fails with `Unavailable` may or may not have been
//!   applied (e.g. the reply timed out; a server that was paused applies it
//!   when it resumes). The caller must re-synchronise the session (a
//!   `Session` op and a `Snapshot`) rather than resend the ops.
//! - Host names are resolved with the system resolver, which the timeout
//!   does not bound; use addresses where that matters.
//! - The timeout bounds each socket operation; a reply that trickles in
//!   slowly, or a script on a very large batch that runs longer than the
//!   timeout, is reported as `Unavailable` (and may have been applied).
//! - By default a write is acknowledged by the Redis master alone: after a
//!   Sentinel failover, writes not yet replicated are lost, and so may be
//!   the last `INCR` of the epoch (a freshly attached replica gets nothing
//!   until its first acknowledgement, up to a second). With
//!   [`RedisStore::set_wait_replicas`] (the speaker's `[nsr]
//!   wait_replicas`, `wait_timeout_ms`) each write also waits (`WAIT`,
//!   same round trip) for replicas, each claim too (a second round trip),
//!   and either fails as `Unavailable` when they do not acknowledge in
//!   time — also when no replica is left after a failover. `WAIT` is not
//!   a consensus: a write that failed this way is on the master (and
//!   perhaps on some replicas) anyway, and a failover may promote a
//!   replica that has it or not; the caller re-synchronises, as after any
//!   `Unavailable` write.
//! - The script answers `FENCED` whenever the stored epoch differs from the
//!   writer's, including when it is *lower* (the store lost the epoch:
//!   failover, restart without persistence). That is reported as
//!   [`StoreError::Fenced`] with `current < ours`; the writer stops, which
//!   is safe but not a takeover.
//! - Fencing is only as durable as the `epoch` key: a Redis restarted
//!   without persistence (RDB/AOF) starts again at epoch 0, after which a
//!   writer whose epoch matches the reset value is accepted again. Run the
//!   store with `appendonly yes` (and `appendfsync everysec` or `always`).
//! - [`Store::load`] fails as a whole on the first session it cannot read
//!   ([`StoreError::Schema`] or [`StoreError::Corrupt`]), rather than
//!   returning the others.
//! - A Redis Cluster's redirections fail the write that got them (not
//!   applied), rather than resend it (`cluster.rs`).
//! - `redis-sentinel://` URLs carry no credentials, database or TLS
//!   setting: sentinels and master must accept plain unauthenticated
//!   connections to database 0.
//! - TLS (`rediss://`) uses rustls with the system's root certificates,
//!   or those of `SSL_CERT_FILE` / `SSL_CERT_DIR` when set (that is where
//!   a private CA goes; tests/tls.rs uses a test CA that way). Client
//!   certificates (`tls-auth-clients yes`) are not supported.
//! - [`Store::load`] reads the set of sessions, then all of them in one
//!   `MULTI`/`EXEC`: a session added in between is missed, one removed in
//!   between is skipped. Load after [`Store::claim`] (the writers are then
//!   fenced) for an exact picture.

mod cluster;
mod load;

use bytes::Bytes;
use holdfast_nsr::batch::{self, Step};
use holdfast_nsr::{
    InstanceState, LogChunks, LogEnd, LogPos, LogRange, Op, Store, StoreError, StoreUrl,
};
use redis::{ConnectionAddr, ConnectionInfo, RedisConnectionInfo, Value};
use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::time::{Duration, Instant};

pub use holdfast_nsr::acl;
mod pipeline;

fn host_port(h: &str, p: u16) -> String {
    if h.contains(':') {
        format!("[{h}]:{p}")
    } else {
        format!("{h}:{p}")
    }
}

/// The script applying a batch; see the module documentation.
/// `claim_at_least`: the epoch becomes max(epoch + 1, ARGV[1]), atomically.
const CLAIM_AT_LEAST_SCRIPT: &str = r#"
local cur = tonumber(redis.call('GET', KEYS[1]) or '0')
local new = math.max(cur + 1, tonumber(ARGV[1]))
redis.call('SET', KEYS[1], new)
return new
"#;

const WRITE_SCRIPT: &str = r#"
local cur = redis.call('GET', KEYS[1])
if not cur then cur = '0' end
if cur ~= ARGV[1] then
  return redis.error_reply('FENCED ' .. cur)
end
local i = 2
local n = #ARGV
while i <= n do
  local h = ARGV[i]
  local op = string.byte(h, 1)
  local k = 3 + 9 * (tonumber(string.sub(h, 2)) - 1)
  if op == 82 then -- R: ack, updates, partial
    redis.call('SET', KEYS[k + 2], ARGV[i + 1])
    if #ARGV[i + 2] > 0 then redis.call('RPUSH', KEYS[k + 3], ARGV[i + 2]) end
    if #ARGV[i + 3] > 0 then
      redis.call('SET', KEYS[k + 7], ARGV[i + 3])
    else
      redis.call('DEL', KEYS[k + 7])
    end
    i = i + 4
  elseif op == 84 then -- T: [seq_end BE32][bytes]
    local c = ARGV[i + 1]
    redis.call('RPUSH', KEYS[k + 5], c)
    if #c > 4 then redis.call('RPUSH', KEYS[k + 4], string.sub(c, 5)) end
    i = i + 2
  elseif op == 65 then -- A: snd_una
    local una = tonumber(ARGV[i + 1])
    redis.call('SET', KEYS[k + 6], ARGV[i + 1])
    while true do
      local c = redis.call('LINDEX', KEYS[k + 5], 0)
      if (not c) or #c < 4 then break end
      local b1, b2, b3, b4 = string.byte(c, 1, 4)
      local e = ((b1 * 256 + b2) * 256 + b3) * 256 + b4
      if (una - e) % 4294967296 >= 2147483648 then break end
      redis.call('LPOP', KEYS[k + 5])
    end
    i = i + 2
  elseif op == 83 then -- S: name, record, rcv, una
    redis.call('DEL', KEYS[k + 1], KEYS[k + 2], KEYS[k + 3], KEYS[k + 4], KEYS[k + 5], KEYS[k + 6], KEYS[k + 7], KEYS[k + 9])
    redis.call('SET', KEYS[k + 1], ARGV[i + 2])
    redis.call('SET', KEYS[k + 2], ARGV[i + 3])
    redis.call('SET', KEYS[k + 6], ARGV[i + 4])
    if redis.call('EXISTS', KEYS[3]) == 0 then
      local t = redis.call('TIME')
      redis.call('SET', KEYS[3], t[1] .. string.format('%06d', tonumber(t[2])))
    end
    redis.call('SET', KEYS[k + 8], redis.call('INCR', KEYS[3]))
    redis.call('SADD', KEYS[2], ARGV[i + 1])
    i = i + 5
  elseif op == 80 then -- P: adj_in, adj_out
    redis.call('DEL', KEYS[k + 3], KEYS[k + 4])
    if #ARGV[i + 1] > 0 then redis.call('RPUSH', KEYS[k + 3], ARGV[i + 1]) end
    if #ARGV[i + 2] > 0 then redis.call('RPUSH', KEYS[k + 4], ARGV[i + 2]) end
    if redis.call('EXISTS', KEYS[3]) == 0 then
      local t = redis.call('TIME')
      redis.call('SET', KEYS[3], t[1] .. string.format('%06d', tonumber(t[2])))
    end
    redis.call('SET', KEYS[k + 8], redis.call('INCR', KEYS[3]))
    i = i + 3
  elseif op == 70 then -- F: pending ROUTE-REFRESH messages
    if #ARGV[i + 1] > 0 then
      redis.call('SET', KEYS[k + 9], ARGV[i + 1])
    else
      redis.call('DEL', KEYS[k + 9])
    end
    i = i + 2
  elseif op == 88 then -- X: name
    redis.call('DEL', KEYS[k + 1], KEYS[k + 2], KEYS[k + 3], KEYS[k + 4], KEYS[k + 5], KEYS[k + 6], KEYS[k + 7], KEYS[k + 8], KEYS[k + 9])
    redis.call('SREM', KEYS[2], ARGV[i + 1])
    i = i + 2
  else
    return redis.error_reply('ERR holdfast-nsr: bad op ' .. h)
  end
end
return i
"#;

/// The script applying a batch's records kept apart from the sessions:
/// fenced like [`WRITE_SCRIPT`], then `H key json` sets and `D key`
/// deletes fields of the `bfd` hash (`KEYS[2]`), `O key json` sets and
/// `N key` deletes fields of the `originated` hash (`KEYS[3]`).
const RECORDS_SCRIPT: &str = r#"
local cur = redis.call('GET', KEYS[1])
if not cur then cur = '0' end
if cur ~= ARGV[1] then
  return redis.error_reply('FENCED ' .. cur)
end
local i = 2
while i <= #ARGV do
  local op = ARGV[i]
  if op == 'H' then
    redis.call('HSET', KEYS[2], ARGV[i + 1], ARGV[i + 2])
    i = i + 3
  elseif op == 'D' then
    redis.call('HDEL', KEYS[2], ARGV[i + 1])
    i = i + 2
  elseif op == 'O' then
    redis.call('HSET', KEYS[3], ARGV[i + 1], ARGV[i + 2])
    i = i + 3
  elseif op == 'N' then
    redis.call('HDEL', KEYS[3], ARGV[i + 1])
    i = i + 2
  else
    return redis.error_reply('ERR holdfast-nsr: bad record op ' .. op)
  end
end
return i
"#;

/// Suffixes of a session's keys, in the order the script expects them.
const SESSION_SUFFIXES: [&str; 9] = [
    "rec", "rcv", "in", "out", "tail", "una", "part", "ver", "rr",
];

/// Room left before the packed arguments for the `EVALSHA` header.
const HEADER_ROOM: usize = 96;

/// Default payload limit of one script call.
pub const DEFAULT_BATCH_LIMIT: usize = 64 << 20;

/// A [`Store`] on a Redis server (directly or through Sentinel).
pub struct RedisStore {
    url: StoreUrl,
    instance: String,
    timeout: Duration,
    prefix: String,
    epoch_key: String,
    sessions_key: String,
    /// The counter of log versions.
    logver_key: String,
    /// The hash of BFD records (field: key, value: JSON).
    bfd_key: String,
    /// The hash of run-time route sets (field: instance, value: JSON).
    originated_key: String,
    script_sha: String,
    records_sha: String,
    batch_limit: usize,
    /// Replicas that must acknowledge each write (`WAIT`), 0 for none.
    wait_replicas: u32,
    /// `WAIT`'s timeout; `None`: half the store timeout.
    wait_timeout: Option<Duration>,
    conn: Option<redis::Connection>,
    /// Script calls sent on `conn` and not answered yet, oldest first
    /// (pipelined writes).
    in_flight: VecDeque<pipeline::Sent>,
    /// The sentinel or cluster seed to ask first (the last one that
    /// answered).
    sentinel_first: usize,
    /// The node a `MOVED` named, tried first by the next connection (Redis
    /// Cluster).
    moved_to: Option<(String, u16)>,
    /// Where the connection goes (for messages).
    peer: String,
}

impl fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisStore")
            .field("url", &self.url)
            .field("instance", &self.instance)
            .field("timeout", &self.timeout)
            .field("connected", &self.conn.as_ref().map(|_| &self.peer))
            .finish()
    }
}

fn unavailable(what: impl fmt::Display, e: impl fmt::Display) -> StoreError {
    StoreError::Unavailable(format!("{what}: {e}"))
}

/// A redis-rs error as the server said it (`READONLY You can't...`).
fn describe(e: &redis::RedisError) -> String {
    match (e.code(), e.detail()) {
        (Some(code), Some(detail)) => format!("{code} {detail}"),
        _ => e.to_string(),
    }
}

/// The message of an error, without the "store unavailable" prefix.
fn message(e: StoreError) -> String {
    match e {
        StoreError::Unavailable(m) => m,
        e => e.to_string(),
    }
}

/// Time left until `deadline`, or an error naming `what`.
fn remaining(deadline: Instant, what: &str) -> Result<Duration, StoreError> {
    let left = deadline.saturating_duration_since(Instant::now());
    if left < Duration::from_millis(1) {
        return Err(StoreError::Unavailable(format!("{what}: timed out")));
    }
    Ok(left)
}

/// Opens a plain or TLS connection with no handshake commands, bounded by
/// `deadline`, and leaves `timeout`-bounded socket timeouts in place.
fn open_socket(
    tls: bool,
    host: &str,
    port: u16,
    deadline: Instant,
) -> Result<redis::Connection, StoreError> {
    let peer = host_port(host, port);
    let addr = if tls {
        ConnectionAddr::TcpTls {
            host: host.to_string(),
            port,
            insecure: false,
            tls_params: None,
        }
    } else {
        ConnectionAddr::Tcp(host.to_string(), port)
    };
    let info = ConnectionInfo {
        addr,
        // db 0, no password, RESP2: redis-rs sends nothing on connect.
        redis: RedisConnectionInfo::default(),
    };
    let client = redis::Client::open(info).map_err(|e| unavailable(&peer, e))?;
    let conn = client
        .get_connection_with_timeout(remaining(deadline, &peer)?)
        .map_err(|e| unavailable(&peer, e))?;
    set_timeouts(&conn, remaining(deadline, &peer)?).map_err(|e| unavailable(&peer, e))?;
    Ok(conn)
}

fn set_timeouts(conn: &redis::Connection, t: Duration) -> redis::RedisResult<()> {
    conn.set_read_timeout(Some(t))?;
    conn.set_write_timeout(Some(t))
}

/// `host:port` or `[v6]:port` of a `MOVED` reply.
fn parse_node(addr: &str) -> Option<(String, u16)> {
    let (h, p) = addr.rsplit_once(':')?;
    let h = h.trim_start_matches('[').trim_end_matches(']');
    Some((h.to_string(), p.parse().ok()?))
}

/// Whether an error leaves the connection usable: a server's error reply
/// does, except those saying this server is no (usable) master, or not
/// the slot's (a Redis Cluster's redirections: see `cluster.rs`).
fn connection_survives(e: &redis::RedisError) -> bool {
    match e.code() {
        Some(
            "READONLY" | "MASTERDOWN" | "LOADING" | "MOVED" | "ASK" | "TRYAGAIN" | "CLUSTERDOWN",
        )
        | None => false,
        Some(_) => !e.is_io_error(),
    }
}

/// RESP packing of one command into a buffer.
struct Packer {
    buf: Vec<u8>,
    args: usize,
}

impl Packer {
    fn with_room(room: usize, capacity: usize) -> Self {
        let mut buf = Vec::with_capacity(room + capacity);
        buf.resize(room, 0);
        Packer { buf, args: 0 }
    }

    /// One argument made of `parts`.
    fn arg_parts(&mut self, parts: &[&[u8]]) {
        let len: usize = parts.iter().map(|p| p.len()).sum();
        self.buf.push(b'$');
        self.buf.extend_from_slice(len.to_string().as_bytes());
        self.buf.extend_from_slice(b"\r\n");
        for p in parts {
            self.buf.extend_from_slice(p);
        }
        self.buf.extend_from_slice(b"\r\n");
        self.args += 1;
    }

    fn arg(&mut self, a: &[u8]) {
        self.arg_parts(&[a]);
    }

    fn arg_num(&mut self, n: u64) {
        self.arg(n.to_string().as_bytes());
    }
}

/// A command header `*<n>` followed by `first` arguments, packed.
fn header(total_args: usize, first: &[&[u8]]) -> Vec<u8> {
    let mut p = Packer::with_room(0, 128);
    p.buf.push(b'*');
    p.buf.extend_from_slice(total_args.to_string().as_bytes());
    p.buf.extend_from_slice(b"\r\n");
    for a in first {
        p.arg(a);
    }
    p.buf
}

impl RedisStore {
    /// Connects to the store of `instance`. `timeout` bounds the connection
    /// set-up and, later, every socket read and write.
    pub fn connect(
        url: &StoreUrl,
        instance: &str,
        timeout: Duration,
    ) -> Result<RedisStore, StoreError> {
        if timeout.is_zero() {
            return Err(StoreError::Unavailable("timeout must not be zero".into()));
        }
        match url {
            StoreUrl::Sentinel { sentinels, .. } if sentinels.is_empty() => {
                return Err(StoreError::Unavailable("no sentinel given".into()));
            }
            StoreUrl::Cluster { nodes, .. } if nodes.is_empty() => {
                return Err(StoreError::Unavailable("no cluster node given".into()));
            }
            _ => {}
        }
        let prefix = acl::key_prefix(instance);
        let mut store = RedisStore {
            url: url.clone(),
            instance: instance.to_string(),
            timeout,
            epoch_key: format!("{prefix}epoch"),
            sessions_key: format!("{prefix}sessions"),
            logver_key: format!("{prefix}logver"),
            bfd_key: format!("{prefix}bfd"),
            originated_key: format!("{prefix}originated"),
            prefix,
            script_sha: redis::Script::new(WRITE_SCRIPT).get_hash().to_string(),
            records_sha: redis::Script::new(RECORDS_SCRIPT).get_hash().to_string(),
            batch_limit: DEFAULT_BATCH_LIMIT,
            wait_replicas: 0,
            wait_timeout: None,
            conn: None,
            in_flight: VecDeque::new(),
            sentinel_first: 0,
            moved_to: None,
            peer: url.redacted(),
        };
        store.open()?;
        Ok(store)
    }

    /// The servers holding keys: a cluster's masters (each a `redis://` or
    /// `rediss://` URL with the cluster URL's credentials), or `url`
    /// itself. Where a key scan must run, since a cluster node scans only
    /// its own keys.
    pub fn masters(url: &StoreUrl, timeout: Duration) -> Result<Vec<StoreUrl>, StoreError> {
        let Some(seeds) = cluster::Nodes::of(url) else {
            return Ok(vec![url.clone()]);
        };
        let masters = cluster::masters(&seeds, Instant::now() + timeout)?;
        Ok(masters
            .into_iter()
            .map(|(host, port)| StoreUrl::Redis {
                tls: seeds.tls,
                host,
                port,
                db: 0,
                username: seeds.username.map(str::to_string),
                password: seeds.password.map(str::to_string),
            })
            .collect())
    }

    /// The instance whose keys this store reads and writes.
    pub fn instance(&self) -> &str {
        &self.instance
    }

    /// The key prefix of the instance, `hf:{<instance>}:`.
    pub fn key_prefix(&self) -> &str {
        &self.prefix
    }

    /// Payload bytes above which a write is split into several script
    /// calls (each atomic and fenced). At least 1.
    pub fn set_batch_limit(&mut self, bytes: usize) {
        self.batch_limit = bytes.max(1);
    }

    /// Makes every write wait until `n` replicas have it (`WAIT n`, sent in
    /// the same round trip as the script, for at most
    /// [`set_wait_timeout`](Self::set_wait_timeout), by default half the
    /// timeout), and every claim too (one more round trip); a write or
    /// claim that fewer replicas acknowledge in time fails with
    /// [`StoreError::Unavailable`] (it is applied on the master: see the
    /// known issues). 0, the default, does not wait.
    pub fn set_wait_replicas(&mut self, n: u32) {
        self.wait_replicas = n;
    }

    /// How long a `WAIT` waits (at least 1 ms; keep it below the timeout
    /// given to [`connect`](Self::connect), which bounds its reply too).
    pub fn set_wait_timeout(&mut self, t: Duration) {
        self.wait_timeout = Some(t.max(Duration::from_millis(1)));
    }

    /// `WAIT`'s timeout in milliseconds.
    fn wait_ms(&self) -> u64 {
        self.wait_timeout
            .unwrap_or(self.timeout / 2)
            .as_millis()
            .max(1) as u64
    }

    /// The error for a `WAIT` that `acked` replicas answered in time.
    fn too_few_replicas(&self, what: &str, acked: impl fmt::Display) -> StoreError {
        StoreError::Unavailable(format!(
            "{}: {what} acknowledged by {acked} of {} replica(s) within {} ms (WAIT): not durable",
            self.peer,
            self.wait_replicas,
            self.wait_ms()
        ))
    }

    /// After a claim: `WAIT` for the replicas, if any are asked for.
    fn wait_claim(&mut self, epoch: u64) -> Result<u64, StoreError> {
        if self.wait_replicas == 0 {
            return Ok(epoch);
        }
        let ms = self.wait_ms();
        let r: redis::RedisResult<i64> = redis::cmd("WAIT")
            .arg(self.wait_replicas)
            .arg(ms)
            .query(self.conn()?);
        match r {
            Ok(n) if n >= i64::from(self.wait_replicas) => Ok(epoch),
            Ok(n) => Err(self.too_few_replicas(&format!("claim of epoch {epoch}"), n)),
            Err(e) => Err(self.fail(e)),
        }
    }

    /// Runs `f` on a raw redis-rs connection to the store (connecting if
    /// needed), e.g. to inspect keys in tests. Errors are not interpreted.
    pub fn with_connection<R>(
        &mut self,
        f: impl FnOnce(&mut redis::Connection) -> redis::RedisResult<R>,
    ) -> Result<R, StoreError> {
        let conn = self.conn()?;
        match f(conn) {
            Ok(r) => Ok(r),
            Err(e) => Err(self.fail(e)),
        }
    }

    fn session_key(&self, key: &str, suffix: &str) -> String {
        format!("{}s:{key}:{suffix}", self.prefix)
    }

    /// Opens the connection: resolves the master if needed, connects and
    /// runs the set-up commands, all within one timeout.
    fn open(&mut self) -> Result<(), StoreError> {
        self.conn = None;
        self.in_flight.clear();
        let deadline = Instant::now() + self.timeout;
        let (mut conn, peer) = match &self.url {
            StoreUrl::Redis {
                tls, host, port, ..
            } => (
                open_socket(*tls, host, *port, deadline)?,
                host_port(host, *port),
            ),
            StoreUrl::Sentinel { sentinels, master } => {
                let (conn, peer, first) =
                    open_via_sentinels(sentinels, master, self.sentinel_first, deadline)?;
                self.sentinel_first = first;
                (conn, peer)
            }
            url @ StoreUrl::Cluster { .. } => {
                let nodes = cluster::Nodes::of(url)
                    .ok_or_else(|| StoreError::Unavailable("not a cluster URL".into()))?;
                let (conn, peer, first) = cluster::open_master(
                    &nodes,
                    cluster::slot_of(&self.prefix),
                    self.moved_to.take().as_ref(),
                    self.sentinel_first,
                    deadline,
                )?;
                self.sentinel_first = first;
                (conn, peer)
            }
        };
        let mut setup = redis::pipe();
        if let StoreUrl::Redis {
            db,
            username,
            password,
            ..
        } = &self.url
        {
            if let Some(pw) = password {
                let auth = setup.cmd("AUTH");
                if let Some(user) = username {
                    auth.arg(user);
                }
                auth.arg(pw).ignore();
            }
            if *db != 0 {
                setup.cmd("SELECT").arg(*db).ignore();
            }
        }
        setup
            .cmd("CLIENT")
            .arg("SETNAME")
            .arg(format!("holdfast-nsr:{}", client_name_safe(&self.instance)))
            .ignore();
        setup.cmd("SCRIPT").arg("LOAD").arg(WRITE_SCRIPT).ignore();
        setup.cmd("SCRIPT").arg("LOAD").arg(RECORDS_SCRIPT).ignore();
        set_timeouts(&conn, remaining(deadline, &peer)?).map_err(|e| unavailable(&peer, e))?;
        setup
            .query::<()>(&mut conn)
            .map_err(|e| unavailable(&peer, describe(&e)))?;
        set_timeouts(&conn, self.timeout).map_err(|e| unavailable(&peer, e))?;
        self.conn = Some(conn);
        self.peer = peer;
        Ok(())
    }

    /// The connection, opened if there is none, for a call that waits for
    /// its answer (pipelined writes still in flight are abandoned first).
    fn conn(&mut self) -> Result<&mut redis::Connection, StoreError> {
        self.abandon();
        if self.conn.is_none() {
            self.open()?;
        }
        self.conn
            .as_mut()
            .ok_or_else(|| StoreError::Unavailable("not connected".into()))
    }

    /// Maps a failed command to an error, dropping the connection unless
    /// the failure was an ordinary error reply.
    fn fail(&mut self, e: redis::RedisError) -> StoreError {
        if e.code() == Some("MOVED") {
            self.moved_to = e.redirect_node().and_then(|(addr, _)| parse_node(addr));
        }
        if !connection_survives(&e) {
            self.conn = None;
            self.in_flight.clear();
        }
        unavailable(&self.peer, describe(&e))
    }

    /// Packs the arguments of the script call for `steps` (one group):
    /// `numkeys KEYS... ARGV...`, after [`HEADER_ROOM`] bytes left for the
    /// command header.
    fn pack(&self, epoch: u64, steps: &[Step<'_>]) -> Result<Packer, StoreError> {
        // Slots of the sessions, in order of appearance.
        let mut slots: HashMap<&str, usize> = HashMap::new();
        let mut order: Vec<&str> = Vec::new();
        let mut payload = 0usize;
        for s in steps {
            let key = s.key();
            if !slots.contains_key(key) {
                order.push(key);
                slots.insert(key, order.len());
            }
            payload += s.payload_len() + 48;
        }
        let mut p = Packer::with_room(
            HEADER_ROOM,
            payload + order.len() * SESSION_SUFFIXES.len() * 64,
        );
        p.arg_num(3 + (SESSION_SUFFIXES.len() * order.len()) as u64);
        p.arg(self.epoch_key.as_bytes());
        p.arg(self.sessions_key.as_bytes());
        p.arg(self.logver_key.as_bytes());
        for key in &order {
            for suffix in SESSION_SUFFIXES {
                p.arg(self.session_key(key, suffix).as_bytes());
            }
        }
        p.arg_num(epoch);
        for s in steps {
            let key = s.key();
            let slot = slots.get(key).copied().unwrap_or(0);
            let head = |c: char| format!("{c}{slot}");
            match s {
                Step::Session { record, .. } => {
                    let json = batch::encode_record(key, record)?;
                    p.arg(head('S').as_bytes());
                    p.arg(key.as_bytes());
                    p.arg(&json);
                    p.arg_num(record.rcv_seq.into());
                    p.arg_num(record.snd_seq.into());
                }
                Step::Received {
                    ack,
                    parts,
                    partial,
                    ..
                } => {
                    p.arg(head('R').as_bytes());
                    p.arg_num((*ack).into());
                    let parts: Vec<&[u8]> = parts.iter().map(|b| b.as_ref()).collect();
                    p.arg_parts(&parts);
                    p.arg(partial);
                }
                Step::Sent { seq_end, parts, .. } => {
                    p.arg(head('T').as_bytes());
                    let be = seq_end.to_be_bytes();
                    let mut all: Vec<&[u8]> = Vec::with_capacity(parts.len() + 1);
                    all.push(&be);
                    all.extend(parts.iter().map(|b| b.as_ref()));
                    p.arg_parts(&all);
                }
                Step::Acked { snd_una, .. } => {
                    p.arg(head('A').as_bytes());
                    p.arg_num((*snd_una).into());
                }
                Step::Snapshot {
                    adj_in, adj_out, ..
                } => {
                    p.arg(head('P').as_bytes());
                    p.arg(adj_in);
                    p.arg(adj_out);
                }
                Step::Refresh { pending, .. } => {
                    p.arg(head('F').as_bytes());
                    p.arg(pending);
                }
                Step::Remove { .. } => {
                    p.arg(head('X').as_bytes());
                    p.arg(key.as_bytes());
                }
            }
        }
        Ok(p)
    }

    /// The packed `WAIT` command, or nothing.
    fn wait_command(&self) -> Vec<u8> {
        if self.wait_replicas == 0 {
            return Vec::new();
        }
        let ms = self.wait_ms();
        let mut p = Packer::with_room(0, 64);
        p.buf.extend_from_slice(b"*3\r\n");
        p.arg(b"WAIT");
        p.arg_num(self.wait_replicas.into());
        p.arg_num(ms);
        p.buf
    }

    fn corrupt(&self, key: &str, reason: impl fmt::Display) -> StoreError {
        StoreError::Corrupt {
            key: key.to_string(),
            reason: reason.to_string(),
        }
    }
}

/// A client name may not contain spaces or newlines.
fn client_name_safe(s: &str) -> String {
    s.chars()
        .map(|c| if c.is_ascii_graphic() { c } else { '_' })
        .collect()
}

/// Asks the sentinels, in turn from `first`, for the master and connects
/// to it. Returns the connection, its address, and the index of the
/// sentinel that answered.
fn open_via_sentinels(
    sentinels: &[(String, u16)],
    master: &str,
    first: usize,
    deadline: Instant,
) -> Result<(redis::Connection, String, usize), StoreError> {
    let n = sentinels.len();
    let mut errors = Vec::new();
    for i in 0..n {
        let idx = (first + i) % n;
        let (host, port) = &sentinels[idx];
        let sentinel = host_port(host, *port);
        let attempt = || -> Result<(redis::Connection, String), String> {
            let mut s = open_socket(false, host, *port, deadline).map_err(message)?;
            let addr: Option<(String, u16)> = redis::cmd("SENTINEL")
                .arg("get-master-addr-by-name")
                .arg(master)
                .query(&mut s)
                .map_err(|e| e.to_string())?;
            drop(s);
            let (mhost, mport) = addr.ok_or_else(|| format!("does not know {master:?}"))?;
            let mpeer = host_port(&mhost, mport);
            let mut m = open_socket(false, &mhost, mport, deadline).map_err(message)?;
            let role: Vec<Value> = redis::cmd("ROLE")
                .query(&mut m)
                .map_err(|e| format!("master {mpeer}: ROLE: {e}"))?;
            match role.first() {
                Some(Value::BulkString(r)) if r == b"master" => Ok((m, mpeer)),
                Some(Value::SimpleString(r)) if r == "master" => Ok((m, mpeer)),
                _ => Err(format!("{mpeer} is not a master (yet)")),
            }
        };
        match attempt() {
            Ok((conn, peer)) => return Ok((conn, peer, idx)),
            Err(e) => errors.push(format!("sentinel {sentinel}: {e}")),
        }
        if Instant::now() >= deadline {
            break;
        }
    }
    Err(StoreError::Unavailable(format!(
        "no master {master:?} found: {}",
        errors.join("; ")
    )))
}

/// A hash as `HGETALL` answers it.
type RawHash = Vec<(String, Vec<u8>)>;

fn bulk(v: Value) -> Option<Bytes> {
    match v {
        Value::BulkString(b) => Some(Bytes::from(b)),
        Value::SimpleString(s) => Some(Bytes::from(s.into_bytes())),
        _ => None,
    }
}

fn list(v: Value) -> Option<Vec<Bytes>> {
    match v {
        Value::Array(items) => items.into_iter().map(bulk).collect(),
        Value::Nil => Some(Vec::new()),
        _ => None,
    }
}

fn parse_epoch(key: &str, v: Option<Bytes>) -> Result<u64, StoreError> {
    match v {
        None => Ok(0),
        Some(b) => std::str::from_utf8(&b)
            .ok()
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| StoreError::Corrupt {
                key: key.to_string(),
                reason: format!("not an epoch: {:?}", String::from_utf8_lossy(&b)),
            }),
    }
}

impl Store for RedisStore {
    fn write(&mut self, epoch: u64, ops: &[Op]) -> Result<(), StoreError> {
        self.abandon();
        self.send_calls(epoch, ops)?;
        self.recv_calls()
    }

    fn send_write(&mut self, epoch: u64, ops: &[Op]) -> Result<(), StoreError> {
        self.send_calls(epoch, ops)
    }

    fn recv_write(&mut self) -> Result<(), StoreError> {
        self.recv_calls()
    }

    fn claim(&mut self) -> Result<u64, StoreError> {
        let key = self.epoch_key.clone();
        let r: redis::RedisResult<u64> = redis::cmd("INCR").arg(&key).query(self.conn()?);
        let epoch = r.map_err(|e| match e.code() {
            Some("ERR") => self.corrupt(&key, e),
            _ => self.fail(e),
        })?;
        self.wait_claim(epoch)
    }

    fn claim_at_least(&mut self, min: u64) -> Result<u64, StoreError> {
        let key = self.epoch_key.clone();
        let r: redis::RedisResult<u64> = redis::Script::new(CLAIM_AT_LEAST_SCRIPT)
            .key(&key)
            .arg(min)
            .invoke(self.conn()?);
        let epoch = r.map_err(|e| match e.code() {
            Some("ERR") => self.corrupt(&key, e),
            _ => self.fail(e),
        })?;
        self.wait_claim(epoch)
    }

    fn epoch(&mut self) -> Result<u64, StoreError> {
        let key = self.epoch_key.clone();
        let r: redis::RedisResult<Value> = redis::cmd("GET").arg(&key).query(self.conn()?);
        let v = r.map_err(|e| self.fail(e))?;
        parse_epoch(&key, bulk(v))
    }

    fn load(&mut self) -> Result<InstanceState, StoreError> {
        self.load_since(&HashMap::new())
    }

    /// One `SMEMBERS`, one `MULTI`/`EXEC` reading every session from its
    /// position, and for the sessions whose logs changed version since,
    /// one more reading them whole ([`load`]).
    fn load_since(&mut self, from: &HashMap<String, LogPos>) -> Result<InstanceState, StoreError> {
        self.read_since(from)
    }

    /// One `SMEMBERS` and one `MULTI`/`EXEC` that counts the logs' chunks
    /// (`LLEN`) instead of reading them ([`load`]).
    fn load_heads(
        &mut self,
        from: &HashMap<String, LogPos>,
    ) -> Result<(InstanceState, HashMap<String, LogEnd>), StoreError> {
        self.read_heads(from)
    }

    /// One `MULTI`/`EXEC`: each range's version and chunks ([`load`]).
    fn load_logs(&mut self, ranges: &[LogRange]) -> Result<Vec<Option<LogChunks>>, StoreError> {
        self.read_logs(ranges)
    }

    fn reconnect(&mut self) -> Result<(), StoreError> {
        self.open()
    }
}
