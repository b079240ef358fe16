//! BMP (the BGP Monitoring Protocol) to collectors such as pmacct's
//! `pmbmpd`: one task per `[[bmp]]` on the daemon's runtime, fed by the
//! sessions through a [`BmpHub`]. Messages are encoded by
//! `holdfast_wire::bmp`.
//!
//! RFCs: 7854 (Initiation, Peer Up with both OPENs, Route Monitoring of the
//! pre-policy Adj-RIB-In as received and of the post-policy Adj-RIB-In
//! (the L flag), End-of-RIB after a table dump, Statistics Reports types
//! 0, 1, 7 and 8, Peer Down with the NOTIFICATION and the §4.9 reason,
//! Termination), 8671 (Adj-RIB-Out post-policy: the O and L flags;
//! Statistics type 15), 9069 (Loc-RIB: peer type 3, its Peer Up with the
//! VRF/Table Name TLV, Route Monitoring of each best-path change).
//!
//! Post-policy and Loc-RIB changes come from the RIB threads: while a
//! connected collector monitors them, each RIB thread notes them (the
//! engine's post-policy and best-path watching, off otherwise) and hands
//! them to the hub after each command, never waiting (`BmpHub::post_policy`,
//! `BmpHub::loc_rib`).
//!
//! A session never waits for a collector: it hands each event to every
//! connected collector's bounded queue, and a full queue drops the event
//! and marks the collector. A marked collector has lost part of the
//! stream: its task closes the connection and starts again (Initiation,
//! a Peer Up per established session, the tables as UPDATEs, End-of-RIB),
//! so the collector's view is never silently wrong.
//!
//! A table dump is sent on connect for every established session, and
//! for a session resumed by an NSR takeover; a session that comes up
//! while the collector is connected gets a Peer Up only, its routes
//! following as its UPDATEs arrive (they carry the peer's own End-of-RIB).
//!
//! On connect the task registers with the hub and takes the list of
//! established sessions in one step, so every later Peer Up, Peer Down and
//! UPDATE reaches it through its queue; the tables are read from the RIB
//! thread after that (an UPDATE may then be sent twice: harmless to a
//! collector, which applies it again).
//!
//! # Known issues
//! - Every instance's Loc-RIB peer has distinguisher 0 (the configuration
//!   has no route distinguisher per instance): collectors tell them apart
//!   by the VRF/Table Name of their Peer Up only.
//! - A post-policy change made by the RIB thread for a session that has
//!   just gone down and come up again (its old routes withdrawn after the
//!   new Peer Up) reaches the collector as withdrawals of routes the new
//!   session does not hold yet: harmless, but not exact.
//! - An UPDATE received just before a collector connects may reach the
//!   RIB thread after the table dump was read: the collector then misses
//!   it until the next UPDATE for those prefixes (the window is one read
//!   of the session's socket).

use crate::rib_thread::{BestBatch, QueryResult, RibHandle, RibQuery};
use crate::tables::encode_table;
use holdfast_config::{Bmp, BmpTable};
use holdfast_rib::{PeerId, PostChange};
use holdfast_wire::bmp::{self as wire, BmpPeer};
use holdfast_wire::{CodecCtx, PathAttrs, Prefix, Update};
use std::collections::{HashMap, HashSet};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, watch};

/// Events waiting for one collector's task, at most.
const QUEUE: usize = 65_536;

/// An established session as BMP describes it.
#[derive(Debug)]
pub struct SessionInfo {
    pub instance: String,
    pub peer_id: PeerId,
    pub address: IpAddr,
    pub asn: u32,
    pub bgp_id: Ipv4Addr,
    pub local: SocketAddr,
    pub remote_port: u16,
    /// OPEN bodies as sent and as received.
    pub open_sent: Vec<u8>,
    pub open_received: Vec<u8>,
    /// How its UPDATEs are encoded.
    pub ctx: CodecCtx,
    /// IPv6 unicast was negotiated (an IPv6 End-of-RIB follows the dump).
    pub ipv6: bool,
    /// When it came up.
    pub up_at: (u32, u32),
    /// Resumed by an NSR takeover: its tables exist already, and no
    /// UPDATE stream will carry them to the collectors.
    pub resumed: bool,
}

impl SessionInfo {
    fn peer(&self, flags: u8, at: (u32, u32)) -> BmpPeer {
        BmpPeer {
            peer_type: wire::PEER_GLOBAL,
            flags,
            distinguisher: 0,
            address: self.address,
            asn: self.asn,
            bgp_id: self.bgp_id,
            secs: at.0,
            micros: at.1,
        }
    }

    fn key(&self) -> (String, IpAddr) {
        (self.instance.clone(), self.address)
    }
}

/// What a session hands the collectors.
enum Event {
    Up(Arc<SessionInfo>),
    Down {
        session: Arc<SessionInfo>,
        reason: u8,
        notification: Option<Vec<u8>>,
        at: (u32, u32),
    },
    /// One UPDATE body as received.
    Received {
        session: Arc<SessionInfo>,
        body: Arc<[u8]>,
        at: (u32, u32),
    },
    /// Framed messages written to the peer (Adj-RIB-Out).
    Sent {
        session: Arc<SessionInfo>,
        bytes: Arc<Vec<u8>>,
        at: (u32, u32),
    },
    /// Post-policy Adj-RIB-In changes of an instance's peers.
    PostPolicy {
        instance: Arc<str>,
        changes: Arc<Vec<PostChange>>,
        at: (u32, u32),
    },
    /// Best-path changes of an instance (its Loc-RIB).
    LocRib {
        instance: Arc<str>,
        changes: Arc<BestBatch>,
        at: (u32, u32),
    },
}

/// An instance as its Loc-RIB peer (RFC 9069) names it, and its RIB.
#[derive(Clone)]
pub struct BmpInstance {
    pub rib: RibHandle,
    pub asn: u32,
    pub router_id: Ipv4Addr,
}

struct Sink {
    id: u64,
    tx: mpsc::Sender<Event>,
    /// Set when an event could not be queued.
    lost: Arc<AtomicBool>,
    pre_policy: bool,
    post_policy: bool,
    loc_rib: bool,
    adj_out: bool,
}

#[derive(Default)]
struct HubInner {
    up: HashMap<(String, IpAddr), Arc<SessionInfo>>,
    sinks: Vec<Sink>,
    next: u64,
}

/// The sessions' side of BMP: cheap to clone, never blocks.
#[derive(Clone, Default)]
pub struct BmpHub {
    inner: Arc<RwLock<HubInner>>,
    /// Events dropped because a collector's queue was full.
    dropped: Arc<AtomicU64>,
    /// Connected collectors monitoring the post-policy Adj-RIB-In, and
    /// the Loc-RIB: read by the RIB threads after each command.
    post_sinks: Arc<AtomicUsize>,
    loc_sinks: Arc<AtomicUsize>,
}

impl BmpHub {
    fn each(&self, want: impl Fn(&Sink) -> bool, mut make: impl FnMut() -> Event) {
        let Ok(inner) = self.inner.read() else { return };
        for s in inner.sinks.iter().filter(|s| want(s)) {
            if s.tx.try_send(make()).is_err() {
                s.lost.store(true, Ordering::Relaxed);
                self.dropped.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// Whether any collector is connected (cheap: checked per UPDATE).
    pub fn active(&self) -> bool {
        self.inner.read().is_ok_and(|i| !i.sinks.is_empty())
    }

    /// A session reached Established.
    pub fn peer_up(&self, s: Arc<SessionInfo>) {
        if let Ok(mut inner) = self.inner.write() {
            inner.up.insert(s.key(), s.clone());
        }
        self.each(|_| true, || Event::Up(s.clone()));
    }

    /// A session left Established: `reason` per RFC 7854 §4.9,
    /// `notification` the body of the NOTIFICATION that ended it.
    pub fn peer_down(&self, s: &Arc<SessionInfo>, reason: u8, notification: Option<Vec<u8>>) {
        if let Ok(mut inner) = self.inner.write() {
            inner.up.remove(&s.key());
        }
        let at = crate::mrt::now();
        self.each(
            |_| true,
            || Event::Down {
                session: s.clone(),
                reason,
                notification: notification.clone(),
                at,
            },
        );
    }

    /// An UPDATE received (body without its header).
    pub fn received(&self, s: &Arc<SessionInfo>, body: &[u8]) {
        let at = crate::mrt::now();
        let body: Arc<[u8]> = Arc::from(body);
        self.each(
            |k| k.pre_policy,
            || Event::Received {
                session: s.clone(),
                body: body.clone(),
                at,
            },
        );
    }

    /// Whether a connected collector monitors the post-policy
    /// Adj-RIB-In (one atomic load: checked by the RIB threads after each
    /// command).
    pub fn wants_post_policy(&self) -> bool {
        self.post_sinks.load(Ordering::Relaxed) > 0
    }

    /// Whether a connected collector monitors the Loc-RIB.
    pub fn wants_loc_rib(&self) -> bool {
        self.loc_sinks.load(Ordering::Relaxed) > 0
    }

    /// Post-policy changes of `instance`'s peers (from its RIB thread).
    pub fn post_policy(&self, instance: &str, changes: Vec<PostChange>) {
        let at = crate::mrt::now();
        let instance: Arc<str> = Arc::from(instance);
        let changes = Arc::new(changes);
        self.each(
            |k| k.post_policy,
            || Event::PostPolicy {
                instance: instance.clone(),
                changes: changes.clone(),
                at,
            },
        );
    }

    /// Best-path changes of `instance` (from its RIB thread).
    pub fn loc_rib(&self, instance: &str, changes: &Arc<BestBatch>) {
        let at = crate::mrt::now();
        let instance: Arc<str> = Arc::from(instance);
        self.each(
            |k| k.loc_rib,
            || Event::LocRib {
                instance: instance.clone(),
                changes: changes.clone(),
                at,
            },
        );
    }

    /// Messages written to the peer from its Adj-RIB-Out.
    pub fn sent(&self, s: &Arc<SessionInfo>, bytes: &Arc<Vec<u8>>) {
        let at = crate::mrt::now();
        self.each(
            |k| k.adj_out,
            || Event::Sent {
                session: s.clone(),
                bytes: bytes.clone(),
                at,
            },
        );
    }

    /// Registers a collector; returns its queue and the sessions up now.
    fn register(
        &self,
        b: &Bmp,
    ) -> (
        u64,
        mpsc::Receiver<Event>,
        Arc<AtomicBool>,
        Vec<Arc<SessionInfo>>,
    ) {
        let (tx, rx) = mpsc::channel(QUEUE);
        let lost = Arc::new(AtomicBool::new(false));
        let mut inner = self.inner.write().expect("BMP hub");
        inner.next += 1;
        let id = inner.next;
        let post_policy = b.route_monitoring.contains(&BmpTable::PostPolicy);
        let loc_rib = b.route_monitoring.contains(&BmpTable::LocRib);
        if post_policy {
            self.post_sinks.fetch_add(1, Ordering::Relaxed);
        }
        if loc_rib {
            self.loc_sinks.fetch_add(1, Ordering::Relaxed);
        }
        inner.sinks.push(Sink {
            id,
            tx,
            lost: lost.clone(),
            pre_policy: b.route_monitoring.contains(&BmpTable::PrePolicy),
            post_policy,
            loc_rib,
            adj_out: b.route_monitoring.contains(&BmpTable::AdjRibOut),
        });
        let mut up: Vec<_> = inner.up.values().cloned().collect();
        up.sort_by_key(|s| s.key());
        (id, rx, lost, up)
    }

    fn unregister(&self, id: u64) {
        if let Ok(mut inner) = self.inner.write() {
            if let Some(s) = inner.sinks.iter().find(|s| s.id == id) {
                if s.post_policy {
                    self.post_sinks.fetch_sub(1, Ordering::Relaxed);
                }
                if s.loc_rib {
                    self.loc_sinks.fetch_sub(1, Ordering::Relaxed);
                }
            }
            inner.sinks.retain(|s| s.id != id);
        }
    }
}

/// The running BMP sessions of the configuration.
#[derive(Default)]
pub struct BmpRuntime {
    stop: Option<watch::Sender<bool>>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl BmpRuntime {
    /// One task per `[[bmp]]`; `ribs` are the instances, by name.
    pub fn start(
        collectors: &[Bmp],
        hub: &BmpHub,
        ribs: HashMap<String, BmpInstance>,
        router_id: Ipv4Addr,
    ) -> Self {
        if collectors.is_empty() {
            return BmpRuntime::default();
        }
        let (stop, stop_rx) = watch::channel(false);
        let ribs = Arc::new(ribs);
        let tasks = collectors
            .iter()
            .map(|b| {
                let c = Collector {
                    cfg: b.clone(),
                    hub: hub.clone(),
                    ribs: ribs.clone(),
                    sys_name: b.sys_name.clone().unwrap_or_else(|| router_id.to_string()),
                    stop: stop_rx.clone(),
                };
                tokio::spawn(c.run())
            })
            .collect();
        BmpRuntime {
            stop: Some(stop),
            tasks,
        }
    }

    /// Sends each connected collector a Termination and ends the tasks
    /// (waiting at most a second for them).
    pub async fn stop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(true);
        }
        for t in self.tasks.drain(..) {
            let abort = t.abort_handle();
            if tokio::time::timeout(Duration::from_secs(1), t)
                .await
                .is_err()
            {
                abort.abort();
            }
        }
    }
}

impl Drop for BmpRuntime {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

struct Collector {
    cfg: Bmp,
    hub: BmpHub,
    ribs: Arc<HashMap<String, BmpInstance>>,
    sys_name: String,
    stop: watch::Receiver<bool>,
}

/// How one connection to a collector ended.
enum Ended {
    Stopped,
    Lost(String),
}

impl Collector {
    async fn run(mut self) {
        let addr = self.cfg.address;
        let first = Duration::from_secs(self.cfg.retry_secs.max(1));
        let mut backoff = first;
        loop {
            if *self.stop.borrow() {
                return;
            }
            let conn = tokio::time::timeout(Duration::from_secs(5), TcpStream::connect(addr)).await;
            match conn {
                Ok(Ok(stream)) => {
                    tracing::info!(collector = %addr, "BMP session up");
                    let started = std::time::Instant::now();
                    let ended = self.session(stream).await;
                    // A collector that drops the session at once (it
                    // cannot read us) is not retried at once.
                    if started.elapsed() >= Duration::from_secs(30) {
                        backoff = first;
                    }
                    match ended {
                        Ended::Stopped => return,
                        Ended::Lost(why) => {
                            tracing::warn!(collector = %addr, "BMP session down: {why}")
                        }
                    }
                }
                Ok(Err(e)) => tracing::debug!(collector = %addr, error = %e, "BMP connect failed"),
                Err(_) => tracing::debug!(collector = %addr, "BMP connect timed out"),
            }
            tokio::select! {
                _ = tokio::time::sleep(backoff) => {}
                _ = self.stop.changed() => return,
            }
            backoff = (backoff * 2).min(Duration::from_secs(30));
        }
    }

    async fn session(&mut self, stream: TcpStream) -> Ended {
        let _ = stream.set_nodelay(true);
        let (mut rd, mut wr) = stream.into_split();
        let (id, mut rx, lost, up) = self.hub.register(&self.cfg);
        let ended = self.serve(&mut rd, &mut wr, &mut rx, &lost, up).await;
        self.hub.unregister(id);
        if let Ended::Stopped = ended {
            let mut buf = Vec::new();
            wire::termination(
                wire::TERM_ADMIN_CLOSE,
                "holdfastd is shutting down",
                &mut buf,
            );
            let _ = tokio::time::timeout(Duration::from_millis(500), wr.write_all(&buf)).await;
            let _ = wr.shutdown().await;
        }
        ended
    }

    async fn serve(
        &mut self,
        rd: &mut tokio::net::tcp::OwnedReadHalf,
        wr: &mut tokio::net::tcp::OwnedWriteHalf,
        rx: &mut mpsc::Receiver<Event>,
        lost: &AtomicBool,
        up: Vec<Arc<SessionInfo>>,
    ) -> Ended {
        let mut buf = Vec::with_capacity(1 << 16);
        let descr = format!(
            "holdfastd {} (Holdfast BGP speaker)",
            env!("CARGO_PKG_VERSION")
        );
        wire::initiation(&self.sys_name, &descr, &mut buf);
        if let Err(e) = wr.write_all(&buf).await {
            return Ended::Lost(e.to_string());
        }
        let mut sessions: HashMap<(String, IpAddr), Arc<SessionInfo>> = HashMap::new();
        for s in up {
            buf.clear();
            self.dump(&s, &mut buf).await;
            if let Err(e) = wr.write_all(&buf).await {
                return Ended::Lost(e.to_string());
            }
            sessions.insert(s.key(), s);
        }
        if self.cfg.route_monitoring.contains(&BmpTable::LocRib) {
            let mut names: Vec<&String> = self.ribs.keys().collect();
            names.sort();
            for name in names {
                buf.clear();
                self.loc_rib_dump(name, &mut buf).await;
                if let Err(e) = wr.write_all(&buf).await {
                    return Ended::Lost(e.to_string());
                }
            }
        }
        let every = Duration::from_secs(self.cfg.statistics_interval_secs.max(1));
        let mut stats = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
        let mut scratch = [0u8; 512];
        loop {
            buf.clear();
            tokio::select! {
                ev = rx.recv() => {
                    let Some(ev) = ev else { return Ended::Stopped };
                    self.encode(ev, &mut sessions, &mut buf).await;
                    while buf.len() < (1 << 20) {
                        match rx.try_recv() {
                            Ok(ev) => self.encode(ev, &mut sessions, &mut buf).await,
                            Err(_) => break,
                        }
                    }
                }
                _ = stats.tick(), if self.cfg.statistics_interval_secs > 0 => {
                    self.statistics(&sessions, &mut buf).await;
                }
                r = rd.read(&mut scratch) => match r {
                    Ok(0) => return Ended::Lost("closed by the collector".into()),
                    Err(e) => return Ended::Lost(e.to_string()),
                    Ok(_) => {}
                },
                _ = self.stop.changed() => return Ended::Stopped,
            }
            if let Err(e) = wr.write_all(&buf).await {
                return Ended::Lost(e.to_string());
            }
            if lost.load(Ordering::Relaxed) {
                return Ended::Lost(format!(
                    "events dropped (queue full, {} in all): starting again",
                    self.hub.dropped.load(Ordering::Relaxed)
                ));
            }
        }
    }

    async fn encode(
        &self,
        ev: Event,
        sessions: &mut HashMap<(String, IpAddr), Arc<SessionInfo>>,
        buf: &mut Vec<u8>,
    ) {
        match ev {
            // A new session's routes follow as Route Monitoring from its
            // first UPDATE (queued after this event); a resumed one's
            // tables are dumped, as on connect.
            Event::Up(s) if !s.resumed => {
                self.peer_up(&s, buf);
                sessions.insert(s.key(), s);
            }
            Event::Up(s) => {
                self.dump(&s, buf).await;
                sessions.insert(s.key(), s);
            }
            Event::Down {
                session,
                reason,
                notification,
                at,
            } => {
                sessions.remove(&session.key());
                wire::peer_down(&session.peer(0, at), reason, notification.as_deref(), buf);
            }
            Event::Received { session, body, at } => {
                wire::route_monitoring(&session.peer(0, at), &body, buf);
            }
            Event::Sent { session, bytes, at } => {
                let p = session.peer(wire::FLAG_O | wire::FLAG_L, at);
                wire::route_monitoring_all(&p, &bytes, buf);
            }
            Event::PostPolicy {
                instance,
                changes,
                at,
            } => {
                // Per peer of a session the collector knows (changes for a
                // session gone down, such as its routes withdrawn after the
                // Peer Down, are not for it), the last change per prefix.
                let mut by_peer: HashMap<PeerId, Vec<RouteChange>> = HashMap::new();
                for (peer, prefix, a) in changes.iter() {
                    by_peer.entry(*peer).or_default().push((*prefix, a.clone()));
                }
                for s in sessions.values() {
                    if *s.instance != *instance {
                        continue;
                    }
                    let Some(list) = by_peer.get(&s.peer_id) else {
                        continue;
                    };
                    let p = s.peer(wire::FLAG_L, at);
                    wire::route_monitoring_all(&p, &encode_changes(list, &s.ctx), buf);
                }
            }
            Event::LocRib {
                instance,
                changes,
                at,
            } => {
                let Some(inst) = self.ribs.get(&*instance) else {
                    return;
                };
                let list: Vec<RouteChange> = changes
                    .iter()
                    .map(|(p, b)| (*p, b.as_ref().map(|(_, a)| a.clone())))
                    .collect();
                let p = loc_rib_peer(inst, at);
                wire::route_monitoring_all(&p, &encode_changes(&list, &LOC_RIB_CTX), buf);
            }
        }
    }

    /// The Loc-RIB instance peer's Peer Up (RFC 9069 §5.3), the instance's
    /// best paths and End-of-RIB for IPv4 and IPv6.
    async fn loc_rib_dump(&self, name: &str, buf: &mut Vec<u8>) {
        let Some(inst) = self.ribs.get(name) else {
            return;
        };
        let now = crate::mrt::now();
        let p = loc_rib_peer(inst, now);
        wire::loc_rib_peer_up(&p, name, &loc_rib_open(inst), buf);
        let Some(QueryResult::Routes(routes)) = inst.rib.query(RibQuery::Loc).await else {
            return;
        };
        let routes: Vec<_> = routes.into_iter().map(|r| (r.0, r.2)).collect();
        wire::route_monitoring_all(&p, &encode_table(&routes, &LOC_RIB_CTX), buf);
        wire::route_monitoring(&p, &[0, 0, 0, 0], buf);
        wire::route_monitoring(&p, &[0, 0, 0, 6, 0x80, 15, 3, 0, 2, 1], buf);
    }

    fn peer_up(&self, s: &SessionInfo, buf: &mut Vec<u8>) {
        wire::peer_up(
            &s.peer(0, s.up_at),
            s.local.ip(),
            s.local.port(),
            s.remote_port,
            &s.open_sent,
            &s.open_received,
            buf,
        );
    }

    /// Peer Up, then the session's monitored tables and End-of-RIB.
    async fn dump(&self, s: &SessionInfo, buf: &mut Vec<u8>) {
        self.peer_up(s, buf);
        let Some(rib) = self.ribs.get(&s.instance).map(|i| &i.rib) else {
            return;
        };
        let now = crate::mrt::now();
        let mut tables = Vec::new();
        if self.cfg.route_monitoring.contains(&BmpTable::PrePolicy) {
            tables.push((RibQuery::AdjIn(s.peer_id), 0));
        }
        if self.cfg.route_monitoring.contains(&BmpTable::PostPolicy) {
            tables.push((RibQuery::AdjInPost(s.peer_id), wire::FLAG_L));
        }
        if self.cfg.route_monitoring.contains(&BmpTable::AdjRibOut) {
            tables.push((RibQuery::AdjOut(s.peer_id), wire::FLAG_O | wire::FLAG_L));
        }
        for (q, flags) in tables {
            let Some(QueryResult::Routes(routes)) = rib.query(q).await else {
                continue;
            };
            let routes: Vec<_> = routes.into_iter().map(|r| (r.0, r.2)).collect();
            let p = s.peer(flags, now);
            wire::route_monitoring_all(&p, &encode_table(&routes, &s.ctx), buf);
            wire::route_monitoring(&p, &[0, 0, 0, 0], buf);
            if s.ipv6 {
                // MP_UNREACH_NLRI for IPv6 unicast with no prefixes.
                wire::route_monitoring(&p, &[0, 0, 0, 6, 0x80, 15, 3, 0, 2, 1], buf);
            }
        }
    }

    /// A Statistics Report per session: prefixes its import policy
    /// rejected (type 0) and duplicate announcements (type 1), both
    /// counted since the neighbour was configured; routes in its
    /// Adj-RIB-In (type 7), in the Loc-RIB (type 8) and, with Adj-RIB-Out
    /// monitoring, in its Adj-RIB-Out (type 15). With Loc-RIB monitoring,
    /// one per instance for its Loc-RIB peer (type 8).
    async fn statistics(
        &self,
        sessions: &HashMap<(String, IpAddr), Arc<SessionInfo>>,
        buf: &mut Vec<u8>,
    ) {
        let now = crate::mrt::now();
        let mut by_instance: HashMap<&str, Vec<&Arc<SessionInfo>>> = HashMap::new();
        for s in sessions.values() {
            by_instance.entry(&s.instance).or_default().push(s);
        }
        let out = self.cfg.route_monitoring.contains(&BmpTable::AdjRibOut);
        let loc = self.cfg.route_monitoring.contains(&BmpTable::LocRib);
        if loc {
            for name in self.ribs.keys() {
                by_instance.entry(name).or_default();
            }
        }
        let mut names: Vec<&str> = by_instance.keys().copied().collect();
        names.sort();
        for inst_name in names {
            let list = &by_instance[inst_name];
            let Some(inst) = self.ribs.get(inst_name) else {
                continue;
            };
            let Some(QueryResult::Counts { loc_rib, peers, .. }) =
                inst.rib.query(RibQuery::Counts).await
            else {
                continue;
            };
            if loc {
                // RFC 9069 §5.2: the Loc-RIB peer's own report, type 8.
                let p = loc_rib_peer(inst, now);
                wire::statistics(&p, &[(wire::STAT_LOC_RIB, loc_rib as u64)], buf);
            }
            for s in list {
                let c = peers.get(&s.peer_id).cloned().unwrap_or_default();
                let mut stats = vec![
                    (wire::STAT_REJECTED, c.policy_rejected),
                    (wire::STAT_DUPLICATE_PREFIX, c.duplicates),
                    (wire::STAT_ADJ_RIB_IN, c.received),
                    (wire::STAT_LOC_RIB, loc_rib as u64),
                ];
                if out {
                    stats.push((wire::STAT_ADJ_RIB_OUT_POST, c.advertised));
                }
                wire::statistics(&s.peer(0, now), &stats, buf);
            }
        }
    }
}

/// How Loc-RIB routes are encoded: 4-octet AS numbers, and LOCAL_PREF
/// kept (it is part of the best path).
const LOC_RIB_CTX: CodecCtx = CodecCtx {
    four_octet_as: true,
    ibgp: true,
};

/// An instance's Loc-RIB peer (RFC 9069 §4.1): peer type 3, no address,
/// the instance's own AS and router ID.
fn loc_rib_peer(inst: &BmpInstance, at: (u32, u32)) -> BmpPeer {
    BmpPeer {
        peer_type: wire::PEER_LOC_RIB,
        flags: 0,
        distinguisher: 0,
        address: IpAddr::V4(Ipv4Addr::UNSPECIFIED),
        asn: inst.asn,
        bgp_id: inst.router_id,
        secs: at.0,
        micros: at.1,
    }
}

/// The fabricated OPEN of a Loc-RIB Peer Up (RFC 9069 §5.3): the
/// instance's AS and router ID, with the capabilities its routes are
/// encoded with (IPv4 and IPv6 unicast, 4-octet AS numbers).
fn loc_rib_open(inst: &BmpInstance) -> Vec<u8> {
    use holdfast_wire::{Capability, Family, Open};
    let open = Open {
        version: 4,
        my_as: u16::try_from(inst.asn).unwrap_or(23456),
        hold_time: 0,
        bgp_id: inst.router_id,
        capabilities: vec![
            Capability::Multiprotocol(Family::IPV4_UNICAST),
            Capability::Multiprotocol(Family::IPV6_UNICAST),
            Capability::FourOctetAs(inst.asn),
        ],
    };
    let mut b = Vec::new();
    holdfast_wire::encode_open(&open, &mut b);
    b[holdfast_wire::HEADER_LEN..].to_vec()
}

/// A prefix and its new attributes, or `None`: withdrawn.
type RouteChange = (Prefix, Option<Arc<PathAttrs>>);

/// Route changes (the last per prefix wins) as UPDATEs: the withdrawals,
/// then the announcements grouped by attribute set.
fn encode_changes(list: &[RouteChange], ctx: &CodecCtx) -> Vec<u8> {
    let mut seen = HashSet::new();
    let mut withdrawn = Vec::new();
    let mut announced = Vec::new();
    for (p, a) in list.iter().rev() {
        if !seen.insert(*p) {
            continue;
        }
        match a {
            Some(a) => announced.push((*p, a.clone())),
            None => withdrawn.push(*p),
        }
    }
    withdrawn.reverse();
    announced.reverse();
    let mut out = Vec::new();
    if !withdrawn.is_empty() {
        let u = Update {
            withdrawn,
            ..Update::default()
        };
        holdfast_wire::encode_update(&u, ctx, &mut out);
    }
    out.extend_from_slice(&encode_table(&announced, ctx));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn session() -> Arc<SessionInfo> {
        Arc::new(SessionInfo {
            instance: "default".into(),
            peer_id: 7,
            address: "192.0.2.2".parse().unwrap(),
            asn: 65001,
            bgp_id: Ipv4Addr::new(192, 0, 2, 2),
            local: "192.0.2.1:179".parse().unwrap(),
            remote_port: 40000,
            open_sent: vec![4],
            open_received: vec![4],
            ctx: CodecCtx {
                four_octet_as: true,
                ibgp: false,
            },
            ipv6: false,
            up_at: (1, 0),
            resumed: false,
        })
    }

    fn collector(tables: &[BmpTable]) -> Bmp {
        Bmp {
            address: "192.0.2.9:1790".parse().unwrap(),
            statistics_interval_secs: 0,
            route_monitoring: tables.to_vec(),
            retry_secs: 1,
            sys_name: None,
        }
    }

    #[test]
    fn events_reach_the_collectors_that_want_them_and_a_full_queue_marks_one() {
        let hub = BmpHub::default();
        let s = session();
        hub.peer_up(s.clone());
        assert!(!hub.active(), "no collector yet");
        let (pre_id, mut pre, pre_lost, up) = hub.register(&collector(&[BmpTable::PrePolicy]));
        assert_eq!(up.len(), 1, "the established session is handed over");
        let (_, mut out, _, _) = hub.register(&collector(&[BmpTable::AdjRibOut]));
        assert!(hub.active());
        hub.received(&s, &[0, 0, 0, 0]);
        hub.sent(&s, &Arc::new(vec![0xff; 23]));
        assert!(matches!(pre.try_recv(), Ok(Event::Received { .. })));
        assert!(pre.try_recv().is_err(), "the Adj-RIB-Out is not for it");
        assert!(matches!(out.try_recv(), Ok(Event::Sent { .. })));
        assert!(out.try_recv().is_err(), "pre-policy is not for it");
        for _ in 0..=QUEUE {
            hub.received(&s, &[0, 0, 0, 0]);
        }
        assert!(pre_lost.load(Ordering::Relaxed), "a full queue marks it");
        assert_eq!(hub.dropped.load(Ordering::Relaxed), 1);
        hub.peer_down(&s, wire::DOWN_REMOTE_NO_NOTIFICATION, None);
        hub.unregister(pre_id);
        let (_, _, _, up) = hub.register(&collector(&[BmpTable::PrePolicy]));
        assert!(up.is_empty(), "a session that went down is not handed over");
    }

    /// The RIB threads' taps are on exactly while a collector monitoring
    /// them is connected, and their changes reach only those collectors.
    #[test]
    fn post_policy_and_loc_rib_reach_the_collectors_that_monitor_them() {
        let hub = BmpHub::default();
        assert!(!hub.wants_post_policy() && !hub.wants_loc_rib());
        let (post_id, mut post, _, _) = hub.register(&collector(&[BmpTable::PostPolicy]));
        let (loc_id, mut loc, _, _) = hub.register(&collector(&[BmpTable::LocRib]));
        assert!(hub.wants_post_policy() && hub.wants_loc_rib());
        let p: Prefix = "10.0.0.0/24".parse().unwrap();
        hub.post_policy("default", vec![(7, p, None)]);
        hub.loc_rib("default", &Arc::new(vec![(p, None)]));
        assert!(matches!(post.try_recv(), Ok(Event::PostPolicy { .. })));
        assert!(post.try_recv().is_err(), "the Loc-RIB is not for it");
        assert!(matches!(loc.try_recv(), Ok(Event::LocRib { .. })));
        assert!(loc.try_recv().is_err(), "post-policy is not for it");
        hub.unregister(post_id);
        assert!(!hub.wants_post_policy() && hub.wants_loc_rib());
        hub.unregister(loc_id);
        assert!(!hub.wants_loc_rib());
    }

    /// Changes become withdrawals first, then announcements per attribute
    /// set; the last change of a prefix wins.
    #[test]
    fn changes_encode_last_one_wins() {
        let ctx = CodecCtx {
            four_octet_as: true,
            ibgp: false,
        };
        let a = Arc::new(PathAttrs {
            origin: Some(holdfast_wire::Origin::Igp),
            as_path: holdfast_wire::AsPath {
                segments: vec![holdfast_wire::AsSegment::Sequence(vec![65001])],
            },
            next_hop: Some(Ipv4Addr::new(192, 0, 2, 2)),
            ..PathAttrs::default()
        });
        let p1: Prefix = "10.0.0.0/24".parse().unwrap();
        let p2: Prefix = "10.0.1.0/24".parse().unwrap();
        let list = vec![(p1, Some(a.clone())), (p2, Some(a.clone())), (p1, None)];
        let bytes = encode_changes(&list, &ctx);
        let mut withdrawn = Vec::new();
        let mut announced = Vec::new();
        for (ty, body) in crate::tables::messages(&bytes) {
            assert_eq!(ty, holdfast_wire::msg_type::UPDATE);
            let u = holdfast_wire::decode_update(body, &ctx)
                .expect("decodes")
                .update;
            withdrawn.extend(u.withdrawn);
            announced.extend(u.announced);
        }
        assert_eq!((withdrawn, announced), (vec![p1], vec![p2]));
    }
}
