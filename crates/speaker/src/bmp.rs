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

use crate::msg::bmp::{BmpHub, Event, SessionInfo};
use crate::msg::rib::{QueryResult, RibHandle, RibQuery};
use crate::tables::encode_table;
use holdfast_config::{Bmp, BmpTable};
use holdfast_rib::PeerId;
use holdfast_wire::bmp::{self as wire, BmpPeer};
use holdfast_wire::{CodecCtx, PathAttrs, Prefix, Update};
use std::collections::{HashMap, HashSet};
use std::net::{IpAddr, Ipv4Addr};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, watch};

/// An instance as its Loc-RIB peer (RFC 9069) names it, and its RIB.
#[derive(Clone)]
pub struct BmpInstance {
    pub rib: RibHandle,
    pub asn: u32,
    pub router_id: Ipv4Addr,
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
                    self.hub.dropped()
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
