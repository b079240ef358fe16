//! RPKI origin validation (RFC 6811) fed by RTR caches (RFC 8210, RFC
//! 6810): one task on the daemon's runtime talks to the `[[rpki]]` caches
//! through the pure `holdfast_rtr::Client` and hands every routing
//! instance's RIB thread the VRP table when it changes
//! (`RibCmd::Rpki`), with the VRPs added and removed so that only the
//! routes they cover are imported again (no session is touched).
//!
//! Caches are used in preference order (RFC 8210 §10): the task connects
//! to the most preferred one it can reach; when a session ends it starts
//! again from the most preferred. A cache is given 10 s to accept a
//! connection; failed rounds are retried after 1 s, doubling up to the
//! largest `retry_secs`. The VRPs in force stay until another End of Data
//! replaces them or the active cache's data expires (RFC 8210 §6); a
//! reload that changes `[[rpki]]` keeps them for the new task.
//!
//! # Known issues
//! - While connected to a less preferred cache, the task does not probe
//!   the more preferred ones: it returns to them when that session ends.
//! - Plain TCP only (no SSH or TLS transport).

use crate::msg::rib::{RibCmd, RibHandle};
use crate::obs::Metrics;
use holdfast_api::{RpkiCacheInfo, RpkiInfo};
use holdfast_config::Rpki;
use holdfast_rtr::{Client, ClientConfig, Input, Output, Status, Vrp, VrpTable};
use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Longest wait for a cache to accept a connection.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// One cache as `show rpki` reports it.
#[derive(Debug, Clone)]
struct CacheState {
    cfg: Rpki,
    state: &'static str,
    status: Option<Status>,
    connects: u64,
    last_error: Option<String>,
}

/// The VRPs in force, handed to every RIB thread.
#[derive(Debug, Clone, Default)]
pub struct Published {
    pub set: BTreeSet<Vrp>,
    pub table: Arc<VrpTable>,
    /// When the set was last changed or confirmed by an End of Data.
    pub at: Option<Instant>,
}

#[derive(Debug, Default)]
struct Shared {
    caches: Vec<CacheState>,
    active: Option<usize>,
    published: Published,
}

/// The RTR task of the running configuration.
#[derive(Default)]
pub struct RpkiRuntime {
    shared: Arc<Mutex<Shared>>,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl RpkiRuntime {
    /// Starts the task for `caches` (nothing without any), feeding
    /// `ribs`. `keep` is the previous task's VRP set: it stays in force
    /// (and is handed to the RIB threads at once) until a cache answers.
    pub fn start(
        caches: &[Rpki],
        ribs: Vec<RibHandle>,
        metrics: Arc<Metrics>,
        keep: Published,
    ) -> RpkiRuntime {
        let mut sorted = caches.to_vec();
        sorted.sort_by_key(|c| c.preference);
        let shared = Arc::new(Mutex::new(Shared {
            caches: sorted
                .iter()
                .map(|c| CacheState {
                    cfg: c.clone(),
                    state: "connecting",
                    status: None,
                    connects: 0,
                    last_error: None,
                })
                .collect(),
            active: None,
            published: keep.clone(),
        }));
        if sorted.is_empty() {
            return RpkiRuntime { shared, task: None };
        }
        if keep.at.is_some() {
            let all: Vec<Vrp> = keep.set.iter().copied().collect();
            send_all(&ribs, &keep.table, all);
        }
        let task = tokio::spawn(run(sorted, ribs, metrics, shared.clone()));
        RpkiRuntime {
            shared,
            task: Some(task),
        }
    }

    /// Whether caches are configured.
    pub fn enabled(&self) -> bool {
        self.task.is_some()
    }

    /// Ends the task; returns the VRPs in force for the next one.
    pub fn stop(&mut self) -> Published {
        if let Some(t) = self.task.take() {
            t.abort();
        }
        self.shared.lock().expect("rpki state").published.clone()
    }

    /// `show rpki` without the route counts (the daemon adds them).
    pub fn info(&self) -> RpkiInfo {
        let s = self.shared.lock().expect("rpki state");
        let now = Instant::now();
        let ago = |t: Option<Instant>| t.map(|t| now.saturating_duration_since(t).as_secs());
        let (v4, v6) = s.published.table.counts();
        RpkiInfo {
            caches: s
                .caches
                .iter()
                .enumerate()
                .map(|(i, c)| {
                    let st = c.status.as_ref();
                    let t = st.map(|s| s.timers);
                    RpkiCacheInfo {
                        address: c.cfg.address.to_string(),
                        preference: c.cfg.preference,
                        state: c.state.to_string(),
                        active: s.active == Some(i),
                        version: st.map_or(holdfast_rtr::client::MAX_VERSION, |s| s.version),
                        session_id: st.and_then(|s| s.session),
                        serial: st.and_then(|s| s.serial),
                        vrps_v4: st.map_or(0, |s| s.vrps_v4 as u64),
                        vrps_v6: st.map_or(0, |s| s.vrps_v6 as u64),
                        refresh_secs: t.map_or(c.cfg.refresh_secs, |t| t.refresh),
                        retry_secs: t.map_or(c.cfg.retry_secs, |t| t.retry),
                        expire_secs: t.map_or(c.cfg.expire_secs, |t| t.expire),
                        last_update_secs: ago(st.and_then(|s| s.last_update)),
                        updates: st.map_or(0, |s| s.updates),
                        cache_resets: st.map_or(0, |s| s.resets),
                        errors: st.map_or(0, |s| s.errors),
                        connects: c.connects,
                        last_error: c.last_error.clone(),
                    }
                })
                .collect(),
            vrps_v4: v4 as u64,
            vrps_v6: v6 as u64,
            last_update_secs: ago(s.published.at),
            routes: Vec::new(),
        }
    }
}

fn send_all(ribs: &[RibHandle], table: &Arc<VrpTable>, changed: Vec<Vrp>) {
    let changed = Arc::new(changed);
    for r in ribs {
        r.send(RibCmd::Rpki {
            table: table.clone(),
            changed: changed.clone(),
        });
    }
}

fn client_config(c: &Rpki) -> ClientConfig {
    ClientConfig {
        refresh: Duration::from_secs(c.refresh_secs as u64),
        retry: Duration::from_secs(c.retry_secs as u64),
        expire: Duration::from_secs(c.expire_secs as u64),
    }
}

/// The task: connect in preference order, run a session, start again.
async fn run(
    caches: Vec<Rpki>,
    ribs: Vec<RibHandle>,
    metrics: Arc<Metrics>,
    shared: Arc<Mutex<Shared>>,
) {
    let mut clients: Vec<Client> = caches
        .iter()
        .map(|c| Client::new(client_config(c)))
        .collect();
    let max_retry =
        Duration::from_secs(caches.iter().map(|c| c.retry_secs).max().unwrap_or(1) as u64);
    let mut backoff = Duration::from_secs(1);
    let task = Task {
        ribs,
        metrics,
        shared,
    };
    loop {
        let mut pause = None;
        for (i, c) in caches.iter().enumerate() {
            task.set_state(i, "connecting", None);
            let addr = c.address.to_string();
            match tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(c.address)).await {
                Ok(Ok(stream)) => {
                    let _ = stream.set_nodelay(true);
                    task.metrics.rpki.cache_connected(&addr);
                    {
                        let mut s = task.shared.lock().expect("rpki state");
                        s.caches[i].connects += 1;
                        s.caches[i].state = "connected";
                    }
                    let (reason, after) = task.session(i, &mut clients[i], stream).await;
                    task.metrics.rpki.cache_down(&addr, &reason);
                    task.set_state(i, "down", Some(reason));
                    task.status(i, &clients[i]);
                    backoff = Duration::from_secs(1);
                    pause = Some(after.max(Duration::from_millis(100)).min(max_retry));
                    break;
                }
                Ok(Err(e)) => {
                    let reason = format!("connect: {e}");
                    task.metrics.rpki.cache_down(&addr, &reason);
                    task.set_state(i, "down", Some(reason));
                }
                Err(_) => {
                    let reason = "connect: timed out".to_string();
                    task.metrics.rpki.cache_down(&addr, &reason);
                    task.set_state(i, "down", Some(reason));
                }
            }
        }
        let wait = match pause {
            Some(p) => p,
            None => {
                let w = backoff;
                backoff = (backoff * 2).min(max_retry);
                w
            }
        };
        tokio::time::sleep(wait).await;
        // The data of the cache in force may expire meanwhile.
        let active = task.shared.lock().expect("rpki state").active;
        if let Some(a) = active {
            let outs = clients[a].handle(Instant::now(), Input::Tick);
            task.outputs(a, &clients[a], outs);
        }
    }
}

struct Task {
    ribs: Vec<RibHandle>,
    metrics: Arc<Metrics>,
    shared: Arc<Mutex<Shared>>,
}

impl Task {
    fn set_state(&self, i: usize, state: &'static str, error: Option<String>) {
        let mut s = self.shared.lock().expect("rpki state");
        s.caches[i].state = state;
        if error.is_some() {
            s.caches[i].last_error = error;
        }
    }

    fn status(&self, i: usize, client: &Client) {
        self.shared.lock().expect("rpki state").caches[i].status = Some(client.status());
    }

    /// One RTR session on `stream`: until it ends, with the reason and
    /// the delay before the next connection.
    async fn session(
        &self,
        i: usize,
        client: &mut Client,
        stream: TcpStream,
    ) -> (String, Duration) {
        let (mut rd, mut wr) = stream.into_split();
        let mut buf = vec![0u8; 64 * 1024];
        let mut outs = client.handle(Instant::now(), Input::Connected);
        loop {
            for o in std::mem::take(&mut outs) {
                match o {
                    Output::Send(b) => {
                        if let Err(e) = wr.write_all(&b).await {
                            client.handle(Instant::now(), Input::Closed);
                            return (format!("write: {e}"), Duration::from_secs(1));
                        }
                    }
                    Output::Close { reason, after } => {
                        self.metrics.rpki.error(
                            &self.shared.lock().expect("rpki state").caches[i]
                                .cfg
                                .address
                                .to_string(),
                            &reason,
                        );
                        return (reason, after);
                    }
                    other => self.outputs(i, client, vec![other]),
                }
            }
            self.status(i, client);
            let deadline = client
                .next_deadline()
                .unwrap_or_else(|| Instant::now() + Duration::from_secs(3600));
            tokio::select! {
                r = rd.read(&mut buf) => match r {
                    Ok(0) => {
                        client.handle(Instant::now(), Input::Closed);
                        return ("closed by the cache".into(), Duration::from_secs(1));
                    }
                    Err(e) => {
                        client.handle(Instant::now(), Input::Closed);
                        return (format!("read: {e}"), Duration::from_secs(1));
                    }
                    Ok(n) => outs = client.handle(Instant::now(), Input::Received(buf[..n].to_vec())),
                },
                _ = tokio::time::sleep_until(deadline.into()) => {
                    outs = client.handle(Instant::now(), Input::Tick);
                }
            }
        }
    }

    /// Updates and warnings of cache `i`'s client.
    fn outputs(&self, i: usize, client: &Client, outs: Vec<Output>) {
        for o in outs {
            match o {
                Output::Update(u) => {
                    let mut s = self.shared.lock().expect("rpki state");
                    let addr = s.caches[i].cfg.address.to_string();
                    let st = client.status();
                    let changed: Vec<Vrp> = s
                        .published
                        .set
                        .symmetric_difference(client.vrps())
                        .copied()
                        .collect();
                    let table = if changed.is_empty() && s.published.at.is_some() {
                        s.published.table.clone()
                    } else {
                        Arc::new(VrpTable::new(client.vrps()))
                    };
                    self.metrics.rpki.end_of_data(
                        &addr,
                        &st,
                        u.added.len(),
                        u.removed.len(),
                        changed.len(),
                        u.reset,
                    );
                    s.published = Published {
                        set: client.vrps().clone(),
                        table: table.clone(),
                        at: Some(Instant::now()),
                    };
                    s.active = Some(i);
                    s.caches[i].status = Some(st);
                    drop(s);
                    send_all(&self.ribs, &table, changed);
                }
                Output::Warn(w) => {
                    let addr = self.shared.lock().expect("rpki state").caches[i]
                        .cfg
                        .address
                        .to_string();
                    tracing::warn!(cache = %addr, "RPKI: {w}");
                }
                Output::Send(_) | Output::Close { .. } => {}
            }
        }
    }
}
