//! The preheated standby (`holdfastd --standby`): follows the store of the
//! `[nsr]` instance and builds the tables of every stored session ahead of
//! a takeover, so that the takeover skips the table build (TENSOR §3's
//! preheated backup against the cold one).
//!
//! [`FollowCore`] is pure: given what a poll read from the store
//! ([`Store::load_since`] from the positions it holds), it decides, per
//! routing instance, which sessions' tables continue with the new log
//! chunks, which start again (first read, or logs replaced: written anew
//! or compacted — their version changed), and which sessions are gone; it
//! keeps the positions and the figures of `show nsr`. The thread
//! ([`Follower`]) only polls the store, hands the result to the core, and
//! sends each instance's [`Preheat`] to its RIB thread; once a poll finds
//! nothing new after a change (KEEPALIVEs alone are nothing new), it asks
//! the RIB threads to compare each session's Adj-RIB-Out with what its
//! peer holds (`RibCmd::Prepare`), so that a takeover while the tables are
//! unchanged skips that comparison too. Each poll waits until the RIB
//! threads have applied the one before; a poll that took no longer than
//! [`FOLLOWING_WITHIN`] leaves it `following` (`show nsr`), caught up or
//! not: what an upgrade's standby step waits for, so that a unit whose
//! tables never stop changing can still be upgraded.
//!
//! A standby never writes to the store, never claims the instance, and
//! has no session, gate, guard or address: the RIB threads' output has no
//! mailbox while no session generation is set, so nothing reaches a peer.
//!
//! # Known issues
//! - Polling: every [`POLL`] the standby reads the set of sessions and,
//!   per session, its small keys and the log chunks past its position
//!   (one `SMEMBERS` and one `MULTI`/`EXEC`; nothing else when idle). It
//!   is up to one poll behind; the takeover reads the rest.
//! - The comparison of `RibCmd::Prepare` costs about as much as a
//!   takeover's (a quarter of a second at 1M routes) and is made again
//!   after every quiet-after-change poll (the follower waits for it before
//!   polling again); a primary whose tables change just under every 100 ms
//!   keeps it from being ready, and a takeover requested while it runs
//!   waits for it (no worse than making it then).
//! - The send tail is read on every poll and dropped (it is read again at
//!   takeover); under a bulk load it can be a few MiB per poll.
//! - A session whose neighbour is not configured, or whose stored OPENs no
//!   longer negotiate, is not followed; a takeover then restores it cold
//!   (or forgets it), as `--takeover` does.

use crate::addrs::Interfaces;
use crate::msg::peer::PeerSettings;
use crate::msg::rib::{Preheat, PreheatPeer, ResumePeer, RibCmd, RibHandle};
use crate::peer::resume_spec;
use crate::tables;
use holdfast_api::StandbyStatus;
use holdfast_nsr::{InstanceState, LogPos, Store, StoreError};
use holdfast_rib::PeerId;
use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{mpsc, Arc, Mutex};
use std::time::Duration;

/// How often the standby reads the store.
pub const POLL: Duration = Duration::from_millis(100);

/// A poll (read and applied) no longer than this leaves the standby
/// `following` the store even when it found changes.
pub const FOLLOWING_WITHIN: Duration = Duration::from_millis(300);

/// A neighbour the standby may follow a stored session for.
pub struct Target {
    pub settings: PeerSettings,
}

/// The pure part of the follower.
pub struct FollowCore {
    /// By (routing instance, peer address).
    targets: HashMap<(String, IpAddr), Target>,
    /// Positions in the stored logs, by session key.
    positions: HashMap<String, LogPos>,
    /// Session key → (routing instance, engine peer id).
    followed: HashMap<String, (String, PeerId)>,
    pub status: StandbyStatus,
}

impl FollowCore {
    pub fn new(targets: HashMap<(String, IpAddr), Target>) -> FollowCore {
        FollowCore {
            targets,
            positions: HashMap::new(),
            followed: HashMap::new(),
            status: StandbyStatus::default(),
        }
    }

    /// Where the standby is in the stored logs (what the next poll reads
    /// from).
    pub fn positions(&self) -> &HashMap<String, LogPos> {
        &self.positions
    }

    /// The positions of the sessions whose tables are built (what a
    /// takeover loads from); any other session is read whole then.
    pub fn followed_positions(&self) -> HashMap<String, LogPos> {
        self.positions
            .iter()
            .filter(|(k, _)| self.followed.contains_key(*k))
            .map(|(k, p)| (k.clone(), *p))
            .collect()
    }

    /// A failed poll: nothing changes but the figures.
    pub fn failed(&mut self, e: &StoreError) {
        self.status.polls += 1;
        self.status.poll_errors += 1;
        self.status.caught_up = false;
        self.status.following = false;
        self.status.last_error = Some(e.to_string());
    }

    /// After a poll's work was applied by the RIB threads: how long the
    /// poll took from the start of its read. The standby is `following`
    /// when it is caught up, or when the poll took at most
    /// [`FOLLOWING_WITHIN`] (a stream of changes it keeps up with).
    pub fn poll_took(&mut self, took: Duration) {
        self.status.last_poll_ms = u64::try_from(took.as_millis()).unwrap_or(u64::MAX);
        self.status.following = self.status.caught_up || took <= FOLLOWING_WITHIN;
    }

    /// What a poll read (from [`FollowCore::positions`]): the work of each
    /// routing instance's RIB thread. `ifs`: the host's addresses, for the
    /// next hops of sessions read for the first time.
    pub fn handle(&mut self, state: InstanceState, ifs: &Interfaces) -> Vec<(String, Preheat)> {
        let mut work: HashMap<String, Preheat> = HashMap::new();
        let mut changed = false;
        let mut present = std::collections::HashSet::new();
        for s in state.sessions {
            present.insert(s.key.clone());
            let continues = self.positions.get(&s.key) == Some(&s.log);
            if continues && s.adj_in.is_empty() && s.adj_out.is_empty() {
                continue;
            }
            let pos = LogPos {
                version: s.log.version,
                adj_in: s.log.adj_in + s.adj_in.len(),
                adj_out: s.log.adj_out + s.adj_out.len(),
            };
            let target = (s.record.instance.clone(), s.record.peer);
            let spec = match self.targets.get(&target) {
                Some(t) => resume_spec(&t.settings, &s.record, ifs).map(|r| (t, r)),
                None => {
                    if !continues {
                        tracing::warn!(key = %s.key, "standby: a stored session has no neighbour in the configuration: not followed");
                    }
                    None
                }
            };
            let Some((t, (spec, ctx))) = spec else {
                // Not followed (a takeover rebuilds it cold, or forgets
                // it). Its position is remembered so that it is reported
                // once and not read whole at every poll; tables built for
                // it before are dropped.
                self.positions.insert(s.key.clone(), pos);
                if let Some((inst, id)) = self.followed.remove(&s.key) {
                    work.entry(inst).or_default().gone.push(id);
                    changed = true;
                }
                continue;
            };
            // Only the live tail of a session already followed, with no
            // UPDATE in it (the primary's KEEPALIVEs): the tables stay as
            // they are, and the standby is as caught up as before. With a
            // thousand sessions some KEEPALIVE is logged at every poll.
            let updates = tables::has_update(&s.adj_in) || tables::has_update(&s.adj_out);
            if !continues || updates {
                changed = true;
            }
            self.status.chunks += (s.adj_in.len() + s.adj_out.len()) as u64;
            if !continues {
                self.status.restarts += 1;
                tracing::info!(key = %s.key, version = s.log.version, "standby: following the session's logs from the start");
            }
            self.positions.insert(s.key.clone(), pos);
            self.followed
                .insert(s.key.clone(), (target.0.clone(), spec.id));
            work.entry(target.0.clone())
                .or_default()
                .peers
                .push(PreheatPeer {
                    configured: t.settings.spec.clone(),
                    resume: ResumePeer {
                        key: s.key.clone(),
                        spec,
                        gen: 1,
                        ctx,
                        adj_in: s.adj_in,
                        adj_out: s.adj_out,
                        preheated: false,
                    },
                    restart: !continues,
                    updates,
                });
        }
        let gone: Vec<String> = self
            .positions
            .keys()
            .filter(|k| !present.contains(*k))
            .cloned()
            .collect();
        for k in gone {
            self.positions.remove(&k);
            if let Some((inst, id)) = self.followed.remove(&k) {
                tracing::info!(key = %k, "standby: the session is no longer stored: its tables are dropped");
                work.entry(inst).or_default().gone.push(id);
                changed = true;
            }
        }
        self.status.polls += 1;
        self.status.sessions = self.followed.len() as u64;
        self.status.store_epoch = state.epoch;
        self.status.caught_up = !changed;
        self.status.last_error = None;
        work.into_iter().collect()
    }
}

/// The follower thread.
pub struct Follower {
    stop: mpsc::Sender<()>,
    thread: Option<std::thread::JoinHandle<HashMap<String, LogPos>>>,
    pub status: Arc<Mutex<StandbyStatus>>,
}

impl Follower {
    /// Starts following `store` for `core`'s targets; each instance's work
    /// goes to its RIB thread in `ribs`.
    pub fn start(
        mut store: Box<dyn Store>,
        mut core: FollowCore,
        ribs: HashMap<String, RibHandle>,
    ) -> std::io::Result<Follower> {
        let (stop, stopped) = mpsc::channel::<()>();
        let status = Arc::new(Mutex::new(StandbyStatus::default()));
        let shared = status.clone();
        let thread = std::thread::Builder::new()
            .name("nsr-standby".into())
            .spawn(move || {
                let mut last_error: Option<String> = None;
                // Whether the RIB threads compared the tables since they
                // last changed.
                let mut prepared = false;
                loop {
                    let started = std::time::Instant::now();
                    match store.load_since(core.positions()) {
                        Ok(state) => {
                            if last_error.take().is_some() {
                                tracing::info!("standby: the state store answers again");
                            }
                            let mut sent = Vec::new();
                            for (inst, work) in core.handle(state, &Interfaces::new()) {
                                if let Some(rib) = ribs.get(&inst) {
                                    rib.send(RibCmd::Preheat(work));
                                    sent.push(rib);
                                    prepared = false;
                                }
                            }
                            // The poll is done once the RIB threads have
                            // applied its work.
                            let applied: Vec<_> = sent
                                .into_iter()
                                .map(|rib| {
                                    let (tx, rx) = tokio::sync::oneshot::channel();
                                    rib.send(RibCmd::Applied(tx));
                                    rx
                                })
                                .collect();
                            for rx in applied {
                                let _ = rx.blocking_recv();
                            }
                            core.poll_took(started.elapsed());
                            if !core.status.caught_up {
                                prepared = false;
                            }
                            if core.status.caught_up && !prepared {
                                let waits: Vec<_> = ribs
                                    .values()
                                    .map(|rib| {
                                        let (tx, rx) = tokio::sync::oneshot::channel();
                                        rib.send(RibCmd::Prepare(tx));
                                        rx
                                    })
                                    .collect();
                                // The RIB threads answer once compared (or
                                // never, if one has ended: then not ready).
                                prepared = waits.into_iter().all(|rx| rx.blocking_recv().is_ok());
                            }
                            core.status.prepared = prepared && core.status.caught_up;
                        }
                        Err(e) => {
                            let text = e.to_string();
                            if last_error.as_deref() != Some(text.as_str()) {
                                tracing::warn!(error = %text, "standby: reading the state store failed; retrying");
                            }
                            last_error = Some(text);
                            core.failed(&e);
                        }
                    }
                    if let Ok(mut s) = shared.lock() {
                        *s = core.status.clone();
                    }
                    match stopped.recv_timeout(POLL) {
                        Err(mpsc::RecvTimeoutError::Timeout) => continue,
                        _ => return core.followed_positions(),
                    }
                }
            })?;
        Ok(Follower {
            stop,
            thread: Some(thread),
            status,
        })
    }

    /// Stops following (after the poll in progress, whose work is already
    /// queued to the RIB threads) and returns the positions reached.
    pub fn stop(mut self) -> HashMap<String, LogPos> {
        let _ = self.stop.send(());
        self.thread
            .take()
            .and_then(|t| t.join().ok())
            .unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use holdfast_nsr::{MemoryStore, Op};
    use holdfast_wire::{encode_open, Open};

    const KEY: &str = "default/192.0.2.1";

    fn core() -> FollowCore {
        let (cfg, _) = holdfast_config::parse(
            "[global]\nasn = 65000\nrouter_id = \"192.0.2.2\"\n\
             [[neighbor]]\naddress = \"192.0.2.1\"\nremote_asn = 65001\nimport = \"all\"\nexport = \"all\"\n",
        )
        .expect("configuration");
        let compiled = crate::convert::compile(&cfg).expect("policies");
        let settings =
            crate::convert::peer_settings(&cfg, &compiled, &cfg.neighbors[0], 1).expect("settings");
        let targets = HashMap::from([(
            (settings.instance.clone(), settings.address),
            Target { settings },
        )]);
        FollowCore::new(targets)
    }

    fn open_body(asn: u16, id: [u8; 4]) -> Vec<u8> {
        let mut m = Vec::new();
        encode_open(
            &Open {
                version: 4,
                my_as: asn,
                hold_time: 90,
                bgp_id: id.into(),
                capabilities: Vec::new(),
            },
            &mut m,
        );
        m.split_off(holdfast_wire::HEADER_LEN)
    }

    fn session() -> Op {
        Op::Session {
            key: KEY.into(),
            record: crate::test_fixtures::session_record(
                (
                    open_body(65000, [192, 0, 2, 2]),
                    open_body(65001, [192, 0, 2, 1]),
                ),
                (1000, 2000),
            ),
        }
    }

    fn received(ack: u32, bytes: &[u8]) -> Op {
        Op::Received {
            key: KEY.into(),
            ack,
            updates: Bytes::copy_from_slice(bytes),
            partial: Bytes::new(),
        }
    }

    /// One poll, as the follower thread makes it.
    fn poll(core: &mut FollowCore, store: &mut MemoryStore) -> Vec<(String, Preheat)> {
        let state = store.load_since(core.positions()).expect("load");
        core.handle(state, &Interfaces::new())
    }

    fn only(work: Vec<(String, Preheat)>) -> Preheat {
        let mut work = work.into_iter();
        let (inst, p) = work.next().expect("work for one instance");
        assert_eq!(inst, "default");
        assert!(work.next().is_none());
        p
    }

    #[test]
    fn a_quick_poll_that_found_changes_still_counts_as_following() {
        let mut core = FollowCore::new(HashMap::new());
        core.status.caught_up = false;
        core.poll_took(Duration::from_millis(40));
        assert!(core.status.following, "a stream it keeps up with");
        assert_eq!(core.status.last_poll_ms, 40);
        core.poll_took(FOLLOWING_WITHIN + Duration::from_millis(1));
        assert!(
            !core.status.following,
            "a poll longer than FOLLOWING_WITHIN"
        );
        core.status.caught_up = true;
        core.poll_took(Duration::from_secs(5));
        assert!(core.status.following, "caught up is following");
        core.failed(&StoreError::Unavailable("down".into()));
        assert!(!core.status.following, "a failed poll");
    }

    #[test]
    fn follows_appends_restarts_on_compaction_and_drops_removed_sessions() {
        let mut store = MemoryStore::new("edge-1");
        let epoch = store.claim().expect("claim");
        store
            .write(epoch, &[session(), received(2010, b"first")])
            .expect("write");
        let mut core = core();
        // First read: the session's tables start from its whole log.
        let p = only(poll(&mut core, &mut store));
        assert_eq!(p.peers.len(), 1);
        let first = &p.peers[0];
        assert!(first.restart);
        assert_eq!(first.resume.spec.id, 1);
        assert_eq!(first.resume.adj_in, vec![Bytes::from_static(b"first")]);
        assert!(!core.status.caught_up);
        // Nothing new: no work, caught up.
        assert!(poll(&mut core, &mut store).is_empty());
        assert!(core.status.caught_up);
        assert_eq!(core.status.sessions, 1);
        // The primary's KEEPALIVEs logged: handed on, but nothing new.
        let keepalive = Bytes::from_static(&[
            0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
            0xff, 0xff, 0, 19, 4,
        ]);
        store
            .write(
                epoch,
                &[Op::Sent {
                    key: KEY.into(),
                    seq_end: 1019,
                    bytes: keepalive.clone(),
                }],
            )
            .expect("write");
        let p = only(poll(&mut core, &mut store));
        assert_eq!(p.peers[0].resume.adj_out, vec![keepalive]);
        assert!(core.status.caught_up, "KEEPALIVEs alone leave it caught up");
        // Appended: only the new chunk, continuing.
        store
            .write(epoch, &[received(2020, b"second")])
            .expect("write");
        let p = only(poll(&mut core, &mut store));
        assert!(!p.peers[0].restart);
        assert_eq!(
            p.peers[0].resume.adj_in,
            vec![Bytes::from_static(b"second")]
        );
        let at = core.followed_positions()[KEY];
        assert_eq!((at.adj_in, at.adj_out), (2, 1));
        // Compacted: a new version, the tables rebuilt from the snapshot.
        store
            .write(
                epoch,
                &[Op::Snapshot {
                    key: KEY.into(),
                    adj_in: Bytes::from_static(b"snapshot"),
                    adj_out: Bytes::new(),
                }],
            )
            .expect("write");
        let p = only(poll(&mut core, &mut store));
        assert!(p.peers[0].restart);
        assert_eq!(
            p.peers[0].resume.adj_in,
            vec![Bytes::from_static(b"snapshot")]
        );
        assert_ne!(core.followed_positions()[KEY].version, at.version);
        assert_eq!(core.status.restarts, 2);
        // Removed: its tables are dropped, nothing left to take over.
        store
            .write(epoch, &[Op::Remove { key: KEY.into() }])
            .expect("write");
        let p = only(poll(&mut core, &mut store));
        assert!(p.peers.is_empty());
        assert_eq!(p.gone, vec![1]);
        assert!(core.followed_positions().is_empty());
        assert_eq!(core.status.sessions, 0);
    }

    /// A RIB thread for the test configuration's instance.
    fn rib() -> RibHandle {
        let (cfg, _) = holdfast_config::parse("[global]\nasn = 65000\nrouter_id = \"192.0.2.2\"\n")
            .expect("configuration");
        let engine =
            holdfast_rib::Engine::new(crate::convert::engine_config(&cfg, &cfg.instances[0]));
        crate::rib_thread::spawn(
            "default".into(),
            engine,
            Arc::new(std::sync::RwLock::new(HashMap::new())),
            Arc::new(crate::obs::Metrics::new()),
            None,
        )
    }

    /// An UPDATE announcing `announce` (and withdrawing `withdraw`).
    fn update(announce: &[&str], withdraw: &[&str]) -> Vec<u8> {
        let attrs = Arc::new(holdfast_wire::PathAttrs {
            origin: Some(holdfast_wire::Origin::Igp),
            as_path: holdfast_wire::AsPath {
                segments: vec![holdfast_wire::AsSegment::Sequence(vec![65001])],
            },
            next_hop: Some("192.0.2.1".parse().expect("addr")),
            ..Default::default()
        });
        let routes: Vec<_> = announce
            .iter()
            .map(|p| (p.parse().expect("prefix"), attrs.clone()))
            .collect();
        let ctx = holdfast_wire::CodecCtx {
            four_octet_as: false,
            ibgp: false,
        };
        let mut out = crate::tables::encode_table(&routes, &ctx);
        let gone: Vec<holdfast_wire::Prefix> = withdraw
            .iter()
            .map(|p| p.parse().expect("prefix"))
            .collect();
        if !gone.is_empty() {
            holdfast_wire::pack_withdraw(&gone, &mut out);
        }
        out
    }

    fn adj_in(rib: &RibHandle) -> Vec<String> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("runtime");
        let Some(crate::msg::rib::QueryResult::Routes(r)) =
            rt.block_on(rib.query(crate::msg::rib::RibQuery::AdjIn(1)))
        else {
            panic!("no answer");
        };
        let mut v: Vec<String> = r.into_iter().map(|(p, ..)| p.to_string()).collect();
        v.sort();
        v
    }

    /// The takeover's side, as `Takeover::begin` and the daemon do it: load
    /// the sessions from the standby's positions without their logs, read
    /// the logs on their own thread, resume every session (preheated where
    /// its logs continue), wait for the tables.
    fn take_over(core: &FollowCore, store: &mut MemoryStore, rib: &RibHandle) -> usize {
        take_over_report(core, store, rib).0
    }

    /// [`take_over`], with the RIB thread's report.
    fn take_over_report(
        core: &FollowCore,
        store: &mut MemoryStore,
        rib: &RibHandle,
    ) -> (usize, crate::msg::rib::ResumeReport) {
        let from = core.followed_positions();
        let (state, ends) = store.load_heads(&from).expect("load");
        let preheated = crate::resume::continued(&from, &state.sessions);
        let ranges = state
            .sessions
            .iter()
            .map(|s| holdfast_nsr::LogRange {
                key: s.key.clone(),
                from: s.log,
                end: ends[&s.key],
            })
            .collect();
        let mut reader = store.clone();
        let logs = crate::nsr::PendingLogs::start(ranges, std::time::Instant::now(), move |r| {
            reader.load_logs(r)
        })
        .expect("thread");
        let t = &core.targets[&("default".to_string(), "192.0.2.1".parse().expect("addr"))];
        let peers = state
            .sessions
            .iter()
            .map(|s| {
                assert!(s.adj_in.is_empty() && s.adj_out.is_empty(), "read later");
                let (spec, ctx) =
                    resume_spec(&t.settings, &s.record, &Interfaces::new()).expect("negotiates");
                ResumePeer::logs_to_come(s.key.clone(), spec, ctx, preheated.contains(&s.key))
            })
            .collect();
        let (tx, rx) = tokio::sync::oneshot::channel();
        rib.send(RibCmd::Resume {
            peers,
            logs: Some(logs),
            reply: tx,
        });
        let report = rx.blocking_recv().expect("resumed").expect("logs read");
        (preheated.len(), report)
    }

    /// The standby's comparison, as the follower asks for it once caught up.
    fn prepare(rib: &RibHandle) {
        let (tx, rx) = tokio::sync::oneshot::channel();
        rib.send(RibCmd::Prepare(tx));
        rx.blocking_recv().expect("compared");
    }

    /// A KEEPALIVE, as a log holds it.
    const KEEPALIVE: [u8; 19] = [
        0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
        0xff, 0, 19, 4,
    ];

    /// Polls and hands the work to the RIB thread, as the follower does.
    fn follow(core: &mut FollowCore, store: &mut MemoryStore, rib: &RibHandle) {
        for (_, work) in poll(core, store) {
            rib.send(RibCmd::Preheat(work));
        }
    }

    /// A claimed store with the session and its first UPDATE (two routes).
    fn first_update() -> (MemoryStore, u64) {
        let mut store = MemoryStore::new("edge-1");
        let epoch = store.claim().expect("claim");
        let first = update(&["10.0.0.0/24", "10.0.1.0/24"], &[]);
        store
            .write(epoch, &[session(), received(2100, &first)])
            .expect("write");
        (store, epoch)
    }

    fn preheated_rib() -> (FollowCore, MemoryStore, RibHandle, u64) {
        let (mut store, epoch) = first_update();
        let (mut core, rib) = (core(), rib());
        follow(&mut core, &mut store, &rib);
        assert_eq!(adj_in(&rib), ["10.0.0.0/24", "10.0.1.0/24"]);
        let second = update(&["10.0.2.0/24"], &["10.0.0.0/24"]);
        store
            .write(epoch, &[received(2200, &second)])
            .expect("write");
        follow(&mut core, &mut store, &rib);
        assert_eq!(adj_in(&rib), ["10.0.1.0/24", "10.0.2.0/24"]);
        (core, store, rib, epoch)
    }

    #[test]
    fn a_takeover_applies_only_what_the_standby_had_not_read() {
        let (core, mut store, rib, epoch) = preheated_rib();
        let late = update(&["10.0.3.0/24"], &[]);
        store.write(epoch, &[received(2300, &late)]).expect("write");
        assert_eq!(take_over(&core, &mut store, &rib), 1);
        assert_eq!(adj_in(&rib), ["10.0.1.0/24", "10.0.2.0/24", "10.0.3.0/24"]);
    }

    #[test]
    fn keepalives_after_the_comparison_keep_it_and_an_update_drops_it() {
        // KEEPALIVEs read after the standby compared (its last poll, with
        // no comparison after it): the takeover uses the comparison made
        // while standby.
        let (mut core, mut store, rib, epoch) = preheated_rib();
        prepare(&rib);
        store
            .write(epoch, &[received(2300, &KEEPALIVE)])
            .expect("write");
        follow(&mut core, &mut store, &rib);
        let (preheated, report) = take_over_report(&core, &mut store, &rib);
        assert_eq!((preheated, report.compared_while_standby), (1, 1));
        // The negative control: an UPDATE read after the comparison drops
        // it, and the takeover compares again.
        let (mut core, mut store, rib, epoch) = preheated_rib();
        prepare(&rib);
        let late = update(&["10.0.3.0/24"], &[]);
        store.write(epoch, &[received(2300, &late)]).expect("write");
        follow(&mut core, &mut store, &rib);
        let (preheated, report) = take_over_report(&core, &mut store, &rib);
        assert_eq!((preheated, report.compared_while_standby), (1, 0));
        assert_eq!(adj_in(&rib), ["10.0.1.0/24", "10.0.2.0/24", "10.0.3.0/24"]);
    }

    #[test]
    fn a_session_compacted_after_the_last_poll_is_rebuilt_cold() {
        let (core, mut store, rib, epoch) = preheated_rib();
        // Compacted (and appended to) after the standby's last poll: the
        // preheated tables must be dropped, not continued.
        let snapshot = update(&["10.9.0.0/24"], &[]);
        let after = update(&["10.9.1.0/24"], &[]);
        store
            .write(
                epoch,
                &[Op::Snapshot {
                    key: KEY.into(),
                    adj_in: Bytes::from(snapshot),
                    adj_out: Bytes::new(),
                }],
            )
            .expect("write");
        store
            .write(epoch, &[received(2400, &after)])
            .expect("write");
        assert_eq!(take_over(&core, &mut store, &rib), 0);
        assert_eq!(adj_in(&rib), ["10.9.0.0/24", "10.9.1.0/24"]);
    }

    /// A cold takeover whose logs are read while the session already runs:
    /// an UPDATE the resumed session receives meanwhile (a withdrawal of a
    /// route in the log) waits behind the takeover's `Resume` and applies
    /// after the log, not before it.
    #[test]
    fn updates_received_while_the_logs_are_read_apply_after_them() {
        let (mut store, epoch) = first_update();
        let core = core();
        let rib = rib();
        let (state, ends) = store.load_heads(&HashMap::new()).expect("load");
        let s = &state.sessions[0];
        let ranges = vec![holdfast_nsr::LogRange {
            key: s.key.clone(),
            from: s.log,
            end: ends[&s.key],
        }];
        // The reader waits until the test lets it read.
        let (go, wait) = std::sync::mpsc::channel::<()>();
        let mut reader = store.clone();
        let logs = crate::nsr::PendingLogs::start(ranges, std::time::Instant::now(), move |r| {
            wait.recv().expect("go");
            reader.load_logs(r)
        })
        .expect("thread");
        let t = &core.targets[&("default".to_string(), "192.0.2.1".parse().expect("addr"))];
        let (spec, ctx) =
            resume_spec(&t.settings, &s.record, &Interfaces::new()).expect("negotiates");
        let id = spec.id;
        rib.send(RibCmd::AddPeer(t.settings.spec.clone()));
        let (tx, rx) = tokio::sync::oneshot::channel();
        rib.send(RibCmd::Resume {
            peers: vec![ResumePeer::logs_to_come(s.key.clone(), spec, ctx, false)],
            logs: Some(logs),
            reply: tx,
        });
        // The resumed session's first UPDATE, received and stored after
        // the log's end.
        let withdraw = update(&[], &["10.0.0.0/24"]);
        store
            .write(epoch, &[received(2200, &withdraw)])
            .expect("write");
        let bodies = crate::tables::messages(&withdraw)
            .map(|(_, body)| body.to_vec())
            .collect();
        rib.send(RibCmd::Updates { peer: id, bodies });
        go.send(()).expect("reader");
        rx.blocking_recv().expect("resumed").expect("logs read");
        assert_eq!(adj_in(&rib), ["10.0.1.0/24"]);
    }
}
