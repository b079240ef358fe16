//! The BMP hub: the handle through which the sessions (peer tasks) and the
//! RIB threads hand events to the connected BMP collectors (`bmp.rs`),
//! never waiting: each event goes to every interested collector's bounded
//! queue, and a full queue drops it and marks that collector.
//!
//! # Known issues
//! - None known beyond those of `bmp.rs`.

use super::rib::BestBatch;
use holdfast_config::{Bmp, BmpTable};
use holdfast_rib::{PeerId, PostChange};
use holdfast_wire::bmp::BmpPeer;
use holdfast_wire::CodecCtx;
use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, RwLock};
use tokio::sync::mpsc;

/// Events waiting for one collector's task, at most.
pub(crate) const QUEUE: usize = 65_536;

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
    pub(crate) fn peer(&self, flags: u8, at: (u32, u32)) -> BmpPeer {
        BmpPeer {
            peer_type: holdfast_wire::bmp::PEER_GLOBAL,
            flags,
            distinguisher: 0,
            address: self.address,
            asn: self.asn,
            bgp_id: self.bgp_id,
            secs: at.0,
            micros: at.1,
        }
    }

    pub(crate) fn key(&self) -> (String, IpAddr) {
        (self.instance.clone(), self.address)
    }
}

/// What a session hands the collectors.
pub enum Event {
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

    /// Events dropped so far because a collector's queue was full.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
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
    pub(crate) fn register(
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

    /// Removes a collector registered by [`BmpHub::register`].
    pub(crate) fn unregister(&self, id: u64) {
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

#[cfg(test)]
mod tests {
    use super::*;
    use holdfast_wire::Prefix;

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
        hub.peer_down(&s, holdfast_wire::bmp::DOWN_REMOTE_NO_NOTIFICATION, None);
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
}
