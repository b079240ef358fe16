//! The etcd side: a client over several endpoints (one connection per
//! member, the next member tried when one fails or times out, every request
//! bounded), the lease and campaign operations of the election, and fenced
//! transactions: every write of a leader is a `Txn` whose compare requires
//! the leader key's `create_revision` to still be the leader's token, so a
//! deposed leader's writes fail in etcd whatever its clock says.
//!
//! Requests carry etcd's "require leader" flag: a member cut off from the
//! quorum refuses them at once instead of waiting.
//!
//! `https://` endpoints are reached over TLS with the client identity of
//! [`Store::with_tls`] (etcd's `--client-cert-auth`: the certificate's
//! common name is the etcd user, docs/security.md, *etcd*); `http://`
//! endpoints stay plaintext.

use std::collections::BTreeMap;
use std::future::Future;
use std::time::Duration;

use etcd_client::{
    Client, Compare, CompareOp, ConnectOptions, GetOptions, LeaseKeepAliveStream, LeaseKeeper,
    PutOptions, TlsOptions, Txn, TxnOp, TxnOpResponse,
};
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::fence::Token;
use crate::state::{Keys, LeaderRecord, Migration, MigrationState, UnitRecord, SCHEMA};

/// What went wrong talking to etcd.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// No endpoint answered (each tried once); the last failure.
    #[error("no etcd endpoint answered: {0}")]
    Unavailable(String),
    /// etcd refused the request itself (e.g. the lease is gone).
    #[error("etcd refused the request: {0}")]
    Rejected(String),
    /// A stored value is not the record expected.
    #[error("bad record at {key}: {detail}")]
    Record {
        /// The key.
        key: String,
        /// Why.
        detail: String,
    },
    /// No endpoint was given.
    #[error("no etcd endpoint given")]
    NoEndpoint,
}

/// What a fenced transaction did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Written, at this revision.
    Committed(i64),
    /// The leader key is not ours any more: nothing written.
    Fenced,
    /// The leader key is ours but another compare failed (e.g. the step was
    /// already recorded): nothing written.
    Precondition,
}

/// An etcd client over the cluster's endpoints.
pub struct Store {
    endpoints: Vec<String>,
    clients: Vec<Option<Client>>,
    cur: usize,
    timeout: Duration,
    keys: Keys,
    fenced: bool,
    /// The keep-alive stream of the last renewal that was answered in
    /// time: (endpoint, lease, its sender and its answers). The next
    /// renewal of that lease sends on it instead of opening a stream (a
    /// stream per renewal cost etcd and the agents most of an idle control
    /// plane's CPU). Dropped on any error or timeout, so an answer on it
    /// always belongs to the renewal just sent.
    keep_alive: Option<(usize, i64, LeaseKeeper, LeaseKeepAliveStream)>,
    /// The CA and client identity for `https://` endpoints.
    tls: Option<TlsOptions>,
    /// Every unit's record, by key, as of a revision ([`Store::units`]).
    units_cache: Option<(i64, BTreeMap<String, UnitRecord>)>,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store")
            .field("endpoints", &self.endpoints)
            .field("cur", &self.cur)
            .field("timeout", &self.timeout)
            .field("fenced", &self.fenced)
            .field("tls", &self.tls.is_some())
            .finish()
    }
}

/// How etcd-client reports the renewal of a lease etcd no longer has.
const LEASE_NOT_FOUND: &str = "lease not found";

/// The renewal's lease is gone (expired or revoked): a TTL of zero, not an
/// error (a kept stream gets a zero TTL from etcd for it; a new stream
/// gets this error from etcd-client).
fn lease_gone(e: &etcd_client::Error) -> bool {
    e.to_string().contains(LEASE_NOT_FOUND)
}

fn is_refusal(e: &etcd_client::Error) -> bool {
    if lease_gone(e) {
        return true;
    }
    match e {
        // A transport failure (a member down, its certificate not
        // trusted) is the endpoint's, whatever its message says.
        etcd_client::Error::GRpcStatus(s) if s.code() == tonic::Code::Unavailable => false,
        etcd_client::Error::GRpcStatus(s) => {
            let m = s.message();
            m.contains(LEASE_NOT_FOUND)
                || m.contains("invalid")
                || m.contains("too large")
                || m.contains("permission denied")
        }
        _ => false,
    }
}

impl Store {
    /// A store over `endpoints` (`http://ADDR:2379`), every request bounded
    /// by `timeout`. With `fenced` false every write is a plain put without
    /// compares — only for the lab's negative control (`--unfenced`).
    pub fn new(
        endpoints: Vec<String>,
        timeout: Duration,
        keys: Keys,
        fenced: bool,
    ) -> Result<Store, StoreError> {
        if endpoints.is_empty() {
            return Err(StoreError::NoEndpoint);
        }
        Ok(Store {
            clients: endpoints.iter().map(|_| None).collect(),
            endpoints,
            cur: 0,
            timeout,
            keys,
            fenced,
            keep_alive: None,
            tls: None,
            units_cache: None,
        })
    }

    /// The CA and client identity for `https://` endpoints (a client
    /// certificate whose common name is an etcd user); `None`: none.
    pub fn with_tls(mut self, tls: Option<TlsOptions>) -> Store {
        self.tls = tls;
        self
    }

    /// The key layout.
    pub fn keys(&self) -> &Keys {
        &self.keys
    }

    /// Whether writes are fenced.
    pub fn is_fenced(&self) -> bool {
        self.fenced
    }

    async fn client(&mut self, i: usize) -> Result<Client, String> {
        if let Some(c) = &self.clients[i] {
            return Ok(c.clone());
        }
        let mut opts = ConnectOptions::new()
            .with_connect_timeout(self.timeout)
            .with_timeout(self.timeout)
            .with_require_leader(true);
        let ep = self.endpoints[i].clone();
        if let Some(t) = self.tls.as_ref().filter(|_| ep.starts_with("https://")) {
            opts = opts.with_tls(t.clone());
        }
        match tokio::time::timeout(self.timeout, Client::connect([ep.as_str()], Some(opts))).await {
            Ok(Ok(c)) => {
                self.clients[i] = Some(c.clone());
                Ok(c)
            }
            Ok(Err(e)) => Err(format!("{ep}: {e}")),
            Err(_) => Err(format!("{ep}: connect timed out")),
        }
    }

    /// Runs `f` against the current endpoint, then each other one once,
    /// until one answers (also for the crate's other modules: the users
    /// and roles of [`crate::auth`]).
    pub(crate) async fn call<T, F, Fut>(&mut self, f: F) -> Result<T, StoreError>
    where
        F: FnMut(Client) -> Fut,
        Fut: Future<Output = Result<T, etcd_client::Error>>,
    {
        self.call_n(self.endpoints.len(), f).await
    }

    /// [`Store::call`] with at most `attempts` endpoints tried.
    async fn call_n<T, F, Fut>(&mut self, attempts: usize, mut f: F) -> Result<T, StoreError>
    where
        F: FnMut(Client) -> Fut,
        Fut: Future<Output = Result<T, etcd_client::Error>>,
    {
        let mut last = String::new();
        for _ in 0..attempts {
            let i = self.cur;
            match self.client(i).await {
                Ok(c) => match tokio::time::timeout(self.timeout, f(c)).await {
                    Ok(Ok(v)) => return Ok(v),
                    Ok(Err(e)) if is_refusal(&e) => {
                        return Err(StoreError::Rejected(e.to_string()))
                    }
                    Ok(Err(e)) => {
                        last = format!("{}: {e}", self.endpoints[i]);
                        self.clients[i] = None;
                    }
                    Err(_) => last = format!("{}: timed out", self.endpoints[i]),
                },
                Err(e) => last = e,
            }
            tracing::debug!(endpoint = %self.endpoints[i], error = %last, "etcd endpoint failed");
            self.cur = (i + 1) % self.endpoints.len();
        }
        Err(StoreError::Unavailable(last))
    }

    /// Grants a lease of `ttl` (rounded up to whole seconds, etcd's unit);
    /// returns its id and the TTL granted.
    pub async fn grant(&mut self, ttl: Duration) -> Result<(i64, Duration), StoreError> {
        let secs = ttl.as_millis().div_ceil(1000).max(1) as i64;
        let r = self
            .call(|mut c| async move { c.lease_grant(secs, None).await })
            .await?;
        Ok((r.id(), Duration::from_secs(r.ttl().max(0) as u64)))
    }

    /// Renews a lease once; returns the TTL left (zero: the lease is gone).
    /// On the open keep-alive stream of the lease when the last renewal
    /// through the current endpoint was answered in time, else on a new
    /// one (kept for the next renewal once answered).
    pub async fn renew(&mut self, lease: i64) -> Result<Duration, StoreError> {
        let mut attempts = self.endpoints.len();
        if let Some((i, l, mut keeper, mut stream)) = self.keep_alive.take() {
            if i == self.cur && l == lease {
                let exchange = async {
                    keeper.keep_alive().await?;
                    stream.message().await
                };
                let failed = match tokio::time::timeout(self.timeout, exchange).await {
                    Ok(Ok(Some(r))) => {
                        let ttl = r.ttl();
                        if ttl > 0 {
                            self.keep_alive = Some((i, l, keeper, stream));
                        }
                        return Ok(Duration::from_secs(ttl.max(0) as u64));
                    }
                    Ok(Ok(None)) => "the keep-alive stream ended".to_string(),
                    Ok(Err(e)) if lease_gone(&e) => return Ok(Duration::ZERO),
                    Ok(Err(e)) if is_refusal(&e) => {
                        return Err(StoreError::Rejected(e.to_string()))
                    }
                    Ok(Err(e)) => {
                        self.clients[i] = None;
                        e.to_string()
                    }
                    Err(_) => "timed out".to_string(),
                };
                // As `call` does after a failed attempt: the other
                // endpoints once each (none with a single endpoint: one
                // timeout per renewal, not two).
                let last = format!("{}: {failed}", self.endpoints[i]);
                tracing::debug!(endpoint = %self.endpoints[i], error = %last, "etcd endpoint failed");
                self.cur = (i + 1) % self.endpoints.len();
                if self.endpoints.len() == 1 {
                    return Err(StoreError::Unavailable(last));
                }
                attempts -= 1;
            }
        }
        let answer = self
            .call_n(attempts, |mut c| async move {
                let (mut keeper, mut stream) = c.lease_keep_alive(lease).await?;
                keeper.keep_alive().await?;
                match stream.message().await? {
                    Some(r) => Ok((r.ttl(), Some((keeper, stream)))),
                    None => Ok((0, None)),
                }
            })
            .await;
        let (ttl, kept) = match answer {
            Err(StoreError::Rejected(e)) if e.contains(LEASE_NOT_FOUND) => (0, None),
            other => other?,
        };
        if let Some((keeper, stream)) = kept.filter(|_| ttl > 0) {
            self.keep_alive = Some((self.cur, lease, keeper, stream));
        }
        Ok(Duration::from_secs(ttl.max(0) as u64))
    }

    /// Puts `value` at `key`, attached to `lease` (it goes when the lease
    /// expires or is revoked).
    pub async fn put_leased(
        &mut self,
        key: &str,
        value: &str,
        lease: i64,
    ) -> Result<(), StoreError> {
        let (key, value) = (key.to_string(), value.to_string());
        self.call(|mut c| {
            let (k, v) = (key.clone(), value.clone());
            async move { c.put(k, v, Some(PutOptions::new().with_lease(lease))).await }
        })
        .await
        .map(|_| ())
    }

    /// Puts `value` at `key`, unfenced: an operator's request for the
    /// leader (`holdfast ctl`), never desired state.
    pub async fn put_request(&mut self, key: &str, value: &str) -> Result<(), StoreError> {
        let (key, value) = (key.to_string(), value.to_string());
        self.call(|mut c| {
            let (k, v) = (key.clone(), value.clone());
            async move { c.put(k, v, None).await }
        })
        .await
        .map(|_| ())
    }

    /// Revokes a lease (its keys, the leader key among them, go with it).
    pub async fn revoke(&mut self, lease: i64) -> Result<(), StoreError> {
        self.call(|mut c| async move { c.lease_revoke(lease).await })
            .await
            .map(|_| ())
    }

    /// Creates the leader key with `lease` if it is absent. `Some(token)`
    /// (the revision it was created at) if we did; `None` if it exists.
    ///
    /// A serializable count of the key comes first, answered by the member
    /// alone: while a leader holds the key, every follower's campaign would
    /// fail, and a failed campaign transaction is still a raft proposal
    /// each follower made every `campaign_every` (two replicas: 6.6 a
    /// second, the whole write load of an idle plane). A member behind the
    /// leader only delays a campaign by one try; the transaction stays the
    /// only judge of who leads.
    pub async fn campaign(
        &mut self,
        name: &str,
        attach: Option<String>,
        lease: i64,
    ) -> Result<Option<Token>, StoreError> {
        let key = self.keys.leader();
        let held = self
            .call(|mut c| {
                let key = key.clone();
                let opts = GetOptions::new().with_serializable().with_count_only();
                async move { c.get(key, Some(opts)).await }
            })
            .await?;
        if held.count() > 0 {
            return Ok(None);
        }
        let value = to_json(&LeaderRecord {
            schema: SCHEMA,
            name: name.to_string(),
            lease,
            attach,
        });
        let r = self
            .call(|mut c| {
                let txn = Txn::new()
                    .when([Compare::create_revision(key.clone(), CompareOp::Equal, 0)])
                    .and_then([TxnOp::put(
                        key.clone(),
                        value.clone(),
                        Some(PutOptions::new().with_lease(lease)),
                    )]);
                async move { c.txn(txn).await }
            })
            .await?;
        Ok(r.succeeded()
            .then(|| Token(r.header().map_or(0, |h| h.revision()))))
    }

    /// The current leader: its record and token, if the key exists.
    pub async fn leader(&mut self) -> Result<Option<(LeaderRecord, Token)>, StoreError> {
        let key = self.keys.leader();
        Ok(self.get_kv(&key).await?.map(|(v, rev)| (v, Token(rev))))
    }

    /// Reads one record and its key's `create_revision` (linearizable).
    pub async fn get_kv<T: DeserializeOwned>(
        &mut self,
        key: &str,
    ) -> Result<Option<(T, i64)>, StoreError> {
        let k = key.to_string();
        let r = self
            .call(|mut c| {
                let k = k.clone();
                async move { c.get(k, None).await }
            })
            .await?;
        match r.kvs().first() {
            None => Ok(None),
            Some(kv) => Ok(Some((from_json(key, kv.value())?, kv.create_revision()))),
        }
    }

    /// Reads one record (linearizable).
    pub async fn get<T: DeserializeOwned>(&mut self, key: &str) -> Result<Option<T>, StoreError> {
        Ok(self.get_kv(key).await?.map(|(v, _)| v))
    }

    /// Every key under `prefix` with its value (empty with `keys_only`),
    /// read in pages of [`PAGE`] at the revision of the first
    /// (linearizable): one response for every unit of a large fleet would
    /// pass the gRPC client's 4 MiB message limit (10,000 unit records are
    /// about 7 MB, `holdfast-ctl-sim`).
    async fn range(
        &mut self,
        prefix: &str,
        keys_only: bool,
    ) -> Result<Vec<(Vec<u8>, Vec<u8>)>, StoreError> {
        Ok(self.range_at(prefix, keys_only).await?.1)
    }

    /// One `Get` from `key` with `options` (through [`Store::call`]).
    async fn get_with(
        &mut self,
        key: &[u8],
        options: GetOptions,
    ) -> Result<etcd_client::GetResponse, StoreError> {
        self.call(|mut c| {
            let (key, options) = (key.to_vec(), options.clone());
            async move { c.get(key, Some(options)).await }
        })
        .await
    }

    /// [`Store::range`], with the revision it was read at.
    async fn range_at(
        &mut self,
        prefix: &str,
        keys_only: bool,
    ) -> Result<(i64, Vec<(Vec<u8>, Vec<u8>)>), StoreError> {
        let end = prefix_end(prefix.as_bytes());
        let mut start = prefix.as_bytes().to_vec();
        let mut revision = 0i64;
        let mut out = Vec::new();
        loop {
            let mut o = GetOptions::new().with_range(end.clone()).with_limit(PAGE);
            if revision > 0 {
                o = o.with_revision(revision);
            }
            if keys_only {
                o = o.with_keys_only();
            }
            let r = self.get_with(&start, o).await?;
            if revision == 0 {
                revision = r.header().map_or(0, |h| h.revision());
            }
            for kv in r.kvs() {
                out.push((kv.key().to_vec(), kv.value().to_vec()));
            }
            match r.kvs().last() {
                Some(last) if r.more() => {
                    start = last.key().to_vec();
                    start.push(0);
                }
                _ => return Ok((revision, out)),
            }
        }
    }

    /// The keys (without the prefix) under `prefix` (linearizable).
    pub async fn list(&mut self, prefix: &str) -> Result<Vec<String>, StoreError> {
        Ok(self
            .range(prefix, true)
            .await?
            .into_iter()
            .filter_map(|(k, _)| String::from_utf8(k).ok())
            .filter_map(|k| k.strip_prefix(prefix).map(str::to_string))
            .collect())
    }

    /// The records under `prefix`, by key without the prefix
    /// (linearizable); a record that does not parse as `T` is skipped.
    pub async fn scan<T: DeserializeOwned>(
        &mut self,
        prefix: &str,
    ) -> Result<Vec<(String, T)>, StoreError> {
        Ok(self
            .range(prefix, false)
            .await?
            .into_iter()
            .filter_map(|(k, v)| {
                let k = String::from_utf8(k).ok()?.strip_prefix(prefix)?.to_string();
                match serde_json::from_slice(&v) {
                    Ok(v) => Some((k, v)),
                    Err(e) => {
                        tracing::warn!(key = %k, error = %e, "unreadable record skipped");
                        None
                    }
                }
            })
            .collect())
    }

    /// Every unit's placement (linearizable). The first call reads every
    /// record; later ones read only the records changed since the last
    /// (etcd's `min_mod_revision`, at most a page of them) and count the
    /// keys at the same revision, reading everything again only when the
    /// count shows a unit gone or more than a page changed. At 10,000 units
    /// a full read is about 7 MB, which the leader's localization would
    /// otherwise make three times a second (issue 29, `holdfast-ctl-sim`).
    pub async fn units(&mut self) -> Result<Vec<UnitRecord>, StoreError> {
        let p = format!("{}units/", self.keys.prefix());
        if let Some((since, _)) = &self.units_cache {
            let since = *since;
            let end = prefix_end(p.as_bytes());
            // At most a page: more changes than that are read again in
            // full, page by page.
            let o = GetOptions::new()
                .with_range(end.clone())
                .with_min_mod_revision(since + 1)
                .with_limit(PAGE);
            let changed = self.get_with(p.as_bytes(), o).await?;
            let rev = changed.header().map_or(0, |h| h.revision());
            let o = GetOptions::new()
                .with_range(end)
                .with_count_only()
                .with_revision(rev);
            let count = self.get_with(p.as_bytes(), o).await?.count();
            if let Some((at, cache)) = self.units_cache.as_mut().filter(|_| !changed.more()) {
                for kv in changed.kvs() {
                    let k = kv.key_str().unwrap_or_default();
                    if let Ok(u) = from_json::<UnitRecord>(k, kv.value()) {
                        cache.insert(k.to_string(), u);
                    }
                }
                if usize::try_from(count).is_ok_and(|n| n == cache.len()) && rev > 0 {
                    *at = rev;
                    return Ok(cache.values().cloned().collect());
                }
            }
        }
        let (rev, kvs) = self.range_at(&p, false).await?;
        let mut cache = BTreeMap::new();
        for (k, v) in kvs {
            let k = String::from_utf8_lossy(&k).to_string();
            match from_json::<UnitRecord>(&k, &v) {
                Ok(u) => {
                    cache.insert(k, u);
                }
                Err(e) => tracing::warn!(key = %k, error = %e, "unreadable record skipped"),
            }
        }
        let out = cache.values().cloned().collect();
        self.units_cache = Some((rev, cache));
        Ok(out)
    }

    /// Many reads in one round trip (per [`TXN_OPS`] of them): an etcd
    /// transaction without compares whose operations are range reads. For
    /// each request `(key, prefix)`, the keys found (without `key` when it
    /// is a prefix) with their values. A failover's migrations read their
    /// steps and their hosts' agents this way (issue 29: one read per
    /// migration made a 50-host rack's 205 migrations take seconds).
    pub async fn read_many(
        &mut self,
        requests: &[(String, bool)],
    ) -> Result<Vec<Vec<(String, Vec<u8>)>>, StoreError> {
        let mut out = Vec::with_capacity(requests.len());
        for chunk in requests.chunks(TXN_OPS) {
            let r = self
                .call(|mut c| {
                    let ops: Vec<TxnOp> = chunk
                        .iter()
                        .map(|(k, prefix)| {
                            let o = prefix
                                .then(|| GetOptions::new().with_range(prefix_end(k.as_bytes())));
                            TxnOp::get(k.clone(), o)
                        })
                        .collect();
                    let txn = Txn::new().and_then(ops);
                    async move { c.txn(txn).await }
                })
                .await?;
            let responses = r.op_responses();
            if responses.len() != chunk.len() {
                return Err(StoreError::Unavailable(format!(
                    "a transaction of {} reads answered {}",
                    chunk.len(),
                    responses.len()
                )));
            }
            for ((k, prefix), resp) in chunk.iter().zip(responses) {
                let TxnOpResponse::Get(g) = resp else {
                    return Err(StoreError::Unavailable(
                        "a read in a transaction answered no range".into(),
                    ));
                };
                out.push(
                    g.kvs()
                        .iter()
                        .filter_map(|kv| {
                            let key = String::from_utf8(kv.key().to_vec()).ok()?;
                            let key = if *prefix {
                                key.strip_prefix(k.as_str())?.to_string()
                            } else {
                                key
                            };
                            Some((key, kv.value().to_vec()))
                        })
                        .collect(),
                );
            }
        }
        Ok(out)
    }

    /// Every migration in flight, with the key it is under: each unit's
    /// (`migrations/<unit>`), and one written under the earlier layout
    /// (`migration`).
    pub async fn migrations_in_flight(&mut self) -> Result<Vec<(String, Migration)>, StoreError> {
        let keys = self.keys.clone();
        let mut out: Vec<(String, Migration)> = self
            .scan::<Migration>(&keys.migrations())
            .await?
            .into_iter()
            .map(|(unit, m)| (keys.migration_of(&unit), m))
            .collect();
        if let Some(m) = self.get::<Migration>(&keys.migration()).await? {
            out.push((keys.migration(), m));
        }
        out.retain(|(_, m)| m.state == MigrationState::Pending);
        Ok(out)
    }

    /// Writes `puts` (key, JSON value) atomically, if the leader key still
    /// has `token` as its `create_revision` and each key of `absent` does not
    /// exist (the compare-and-swap that records a step once). Unfenced
    /// (`--unfenced`), it writes them without any compare.
    pub async fn fenced_put(
        &mut self,
        token: Token,
        absent: &[String],
        puts: &[(String, String)],
    ) -> Result<Outcome, StoreError> {
        self.fenced_write(token, absent, puts, &[]).await
    }

    /// [`Store::fenced_put`] that also deletes `deletes`, in the same
    /// transaction.
    pub async fn fenced_write(
        &mut self,
        token: Token,
        absent: &[String],
        puts: &[(String, String)],
        deletes: &[String],
    ) -> Result<Outcome, StoreError> {
        let leader = self.keys.leader();
        let fenced = self.fenced;
        let r = self
            .call(|mut c| {
                let mut when = Vec::new();
                if fenced {
                    when.push(Compare::create_revision(
                        leader.clone(),
                        CompareOp::Equal,
                        token.0,
                    ));
                    when.extend(
                        absent
                            .iter()
                            .map(|k| Compare::create_revision(k.clone(), CompareOp::Equal, 0)),
                    );
                }
                let ops: Vec<TxnOp> = puts
                    .iter()
                    .map(|(k, v)| TxnOp::put(k.clone(), v.clone(), None))
                    .chain(deletes.iter().map(|k| TxnOp::delete(k.clone(), None)))
                    .collect();
                let txn = Txn::new()
                    .when(when)
                    .and_then(ops)
                    .or_else([TxnOp::get(leader.clone(), None)]);
                async move { c.txn(txn).await }
            })
            .await?;
        if r.succeeded() {
            return Ok(Outcome::Committed(r.header().map_or(0, |h| h.revision())));
        }
        let ours = r.op_responses().into_iter().any(|o| match o {
            TxnOpResponse::Get(g) => g
                .kvs()
                .first()
                .is_some_and(|kv| kv.create_revision() == token.0),
            _ => false,
        });
        Ok(if ours {
            Outcome::Precondition
        } else {
            Outcome::Fenced
        })
    }
}

/// Keys per page of a prefix read ([`Store::list`], [`Store::scan`]).
pub const PAGE: i64 = 500;

/// Operations per transaction of the store's batched reads and writes:
/// below etcd's default `--max-txn-ops` (128), with room for compares.
pub const TXN_OPS: usize = 100;

/// The end of the range of keys that start with `prefix` (etcd's rule:
/// the last byte that is not 0xff, plus one; all 0xff: to the end).
fn prefix_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    while let Some(b) = end.pop() {
        if b < 0xff {
            end.push(b + 1);
            return end;
        }
    }
    vec![0]
}

/// A record as JSON.
pub fn to_json<T: Serialize>(v: &T) -> String {
    serde_json::to_string(v).expect("records serialize")
}

fn from_json<T: DeserializeOwned>(key: &str, bytes: &[u8]) -> Result<T, StoreError> {
    serde_json::from_slice(bytes).map_err(|e| StoreError::Record {
        key: key.to_string(),
        detail: e.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::prefix_end;

    #[test]
    fn a_prefixs_range_ends_after_its_last_key() {
        assert_eq!(
            prefix_end(b"/holdfast/default/units/"),
            b"/holdfast/default/units0"
        );
        assert_eq!(prefix_end(b"a\xff"), b"b");
        assert_eq!(prefix_end(b"\xff\xff"), vec![0]);
    }
}
