//! The non-stop-routing failover sequence through the control plane: the
//! lab injects a failure (SIGKILL, SIGSTOP, a Redis kill) or asks for a
//! planned switchover (`holdfast ctl switchover`), and the controllers and
//! the host agents take the unit over, as in production; the sequence
//! then waits until the controller has moved the unit and checks what the
//! peer saw. Run against one kind of real peer (bird2, frr or gobgpd) by
//! the `nsr_<peer>` scenarios.
//!
//! ```text
//!                 bridge `lan` 198.18.0.0/24
//!   [ p ] .20     the peer under test, AS 65001 --- session under test --- service .10 (unit edge-1)
//!   [ redis ] .2  redis-server (the state store)
//!   [ a ] .3      host agent; edge-1's container a_edge_1 .64  } the service address .10
//!   [ b ] .4      host agent; edge-1's container b_edge_1 .96  } moves with the unit
//!   [ feed ] .5   raw test peers: AS 65100 -> peer (inbound burst), AS 65200 -> edge-1 (outbound burst)
//!   [ s ] .8      the agent server's agent (probes)
//!   c1..c3 .31-.33 etcd members + holdfast-controller replicas (and the `mgmt` bridge)
//!   (the plane's own frr on .1 has no session here)
//! ```
//!
//! One lab, one run of the peer daemon, many takeovers in a row
//! (a→b→a→b→…): SIGKILL while idle, SIGKILL in the middle of a 100k-route
//! inbound burst (feed → peer → unit), SIGKILL in the middle of a
//! 100k-route outbound burst (feed → unit → peer), a planned switchover
//! (`holdfast ctl switchover`), a frozen primary (SIGSTOP: its agent finds
//! it hung and kills it, the controller takes it over; the SIGCONT finds
//! nobody), and a Redis kill/restart (unprotected, protected again, then a
//! SIGKILL and takeover; the feed's host drops our segments from the kill
//! to the takeover, so the sessions are written anew with bytes the feed
//! has not acknowledged, and the feed must get them from the new primary).
//! After each one:
//! * the peer's session never left Established: a watch samples the peer's
//!   own CLI every 200 ms for the whole run (state, uptime never going back,
//!   established/dropped counters unchanged);
//! * the peer logged no NOTIFICATION, and the feed peers got none;
//! * the number of routes the peer holds from us never went down (never
//!   withdrawn), and ends at exactly what we advertise;
//! * every route the peer advertises to us is in the new primary's
//!   Adj-RIB-In from it, and nothing else is;
//! * new UPDATEs flow both ways (a fresh route from the peer reaches the
//!   unit; a fresh route from the feed reaches the peer);
//! * at the end, the bridge capture holds no FIN or RST sent from the
//!   service address to the peer or the feed since the first failure: no
//!   dying primary leaked one (the agents' and controllers' TCP probes of
//!   the service address, opened and closed on purpose, are not counted).
//!
//! Known issues: one unit (`edge-1`, primary on a, backup on b); the
//! phase times are the control plane's wall clock seen from the lab (from
//! the injection to the agent running the unit elsewhere, and to the
//! session Established there) beside holdfastd's own figures.
#![allow(dead_code)]

use crate::nsr_common::{
    burst, connect_feed, difference, one_hop, prefixes, stop_watch, tester, Options, FEED_IN_AS,
    FEED_OUT_AS, HF_AS, IN_BURST_OFFSET, OUT_OFFSET, PEER_AS, T,
};
use holdfast_api::RibTable;
use holdfast_lab::plane::{Plane, PlaneBins, PlaneExtras, PlaneSpec};
use holdfast_lab::{
    find_binary, wait_for_every, wait_ok, LogMark, NeighborSpec, NsrHost, Peer, PeerKind, PeerSpec,
    PeerWatch, ProcId, RouteSpec, Signal,
};
use holdfast_tester::workload::{generate, Kind};
use holdfast_tester::{encode_routes, Peer as Tester};
use holdfast_wire::{Prefix, Prefix4};
use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The unit under test (its NSR instance has the same name).
pub const UNIT: &str = "edge-1";
/// The store's host (redis-server; other servers the unit reaches, such as
/// a BMP station or an RPKI cache, may run there too).
pub const STORE_HOST: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 2);
/// The peer under test's host and address (`.20`).
const PEER_OCTET: u8 = 20;

fn peer_v4() -> Ipv4Addr {
    Ipv4Addr::new(198, 18, 0, PEER_OCTET)
}

pub use crate::nsr_common::{CliJson, Unit};

/// One takeover's figures: the control plane's wall clock seen from the
/// lab, and holdfastd's own (`show nsr`'s `takeover`).
#[derive(Debug, Clone)]
pub struct Phase {
    pub what: String,
    pub from: String,
    pub to: String,
    /// From the injection (or the switchover request) until the agent on
    /// the new host runs the unit.
    pub moved: Duration,
    /// ... until the session with the peer is Established on it.
    pub established: Duration,
    pub holdfastd: serde_json::Value,
}

pub struct Run<P: Peer> {
    pub plane: Plane,
    peer: P,
    peer_host: NsrHost,
    hf: Unit,
    feed_in: Arc<Tester>,
    feed_out: Arc<Tester>,
    mark: LogMark,
    fresh: u32,
    /// Inbound bursts sent so far.
    inbound_bursts: u32,
    pub phases: Vec<Phase>,
    /// The BFD relay host, once added, and the running relay.
    relay: Option<(NsrHost, Option<ProcId>)>,
}

/// The unit's configuration beyond the plane's (its neighbours, the
/// options of the scenario, `more`).
fn unit_config(svc: Ipv4Addr, feed: Ipv4Addr, o: &Options, more: &str) -> String {
    let md5 = o
        .md5
        .map(|k| format!("md5_password = \"{k}\"\n"))
        .unwrap_or_default();
    let md5 = match o.bfd {
        Some(ms) => {
            let auth = o.bfd_auth.map_or_else(String::new, |a| {
                format!(
                    ", auth = \"{}\", key_id = {}, password = \"{}\"",
                    a.holdfastd, a.key_id, a.password
                )
            });
            format!("{md5}bfd = {{ min_rx_ms = {ms}, min_tx_ms = {ms}, multiplier = 3{auth} }}\n")
        }
        None => md5,
    };
    let mut c = format!(
        "hold_time = 9\n\
         [[neighbor]]\naddress = \"{peer}\"\nremote_asn = {PEER_AS}\nlocal_address = \"{svc}\"\nimport = \"{import}\"\nexport = \"all\"\n{md5}\n\
         [[neighbor]]\naddress = \"{feed}\"\nremote_asn = {FEED_OUT_AS}\nlocal_address = \"{svc}\"\npassive = true\nimport = \"all\"\nexport = \"all\"\n",
        peer = peer_v4(),
        import = o.import.unwrap_or("all"),
    );
    if let Some(n) = o.compact_bytes {
        c.push_str(&format!("[nsr]\ncompact_bytes = {n}\ncompact_ratio = 0\n"));
    }
    c.push_str(more);
    c
}

fn peer_spec(svc: Ipv4Addr, feed: Ipv4Addr, o: &Options) -> PeerSpec {
    let mut us = NeighborSpec::new(IpAddr::V4(svc), HF_AS)
        .local(IpAddr::V4(peer_v4()))
        .hold_time(9)
        .families(true, false);
    if let Some(k) = o.md5 {
        us = us.md5(k);
    }
    if let Some(ms) = o.bfd {
        us = us.bfd(ms, ms, 3);
    }
    if let Some(a) = o.bfd_auth {
        us = us.bfd_auth(a.bird, a.key_id, a.password);
    }
    let feed = NeighborSpec::new(IpAddr::V4(feed), FEED_IN_AS)
        .local(IpAddr::V4(peer_v4()))
        .families(true, false)
        .passive();
    PeerSpec::new(PEER_AS, Ipv4Addr::new(192, 0, 2, 201))
        .neighbor(us)
        .neighbor(feed)
        .route(RouteSpec::new("203.0.113.0/24"))
}

impl<P: Peer> Run<P> {
    pub fn start(name: &str, kind: PeerKind, o: Options) -> Option<Run<P>> {
        Self::start_with(name, kind, o, "")
    }

    /// [`Run::start`] with `more` appended to the unit's configuration
    /// (e.g. a `[[bmp]]` naming a lab host: the hosts' addresses are fixed,
    /// 198.18.0.N).
    pub fn start_with(name: &str, kind: PeerKind, o: Options, more: &str) -> Option<Run<P>> {
        let bins = PlaneBins::ready(&[PeerKind::Frr, kind], &[])?;
        let mut spec = PlaneSpec::one_unit(&["a", "b"], false);
        spec.units[0].name = UNIT.into();
        spec.units[0].app_failure = Some("migrate".into());
        // Its peers are its own (configured below), none of the plane's.
        spec.units[0].peers = vec!["none".into()];
        // The topology's addresses are fixed: what `more` names is known
        // before the lab exists.
        let svc = Ipv4Addr::new(198, 18, 0, 10);
        let feed = Ipv4Addr::new(198, 18, 0, 5);
        let mut extras = PlaneExtras::default();
        extras
            .unit_config
            .insert(UNIT.into(), unit_config(svc, feed, &o, more));
        if o.stalls {
            extras.agent_args = vec!["--hang-ms".into(), "0".into()];
        }
        extras.redis_cluster = o.redis_cluster;
        let mut plane = Plane::up_with(name, &spec, bins, &extras).expect("plane");
        let (peer_host, peer) = plane
            .start_peer::<P>("p", PEER_OCTET, &peer_spec(svc, feed, &o))
            .expect("the peer under test");
        plane.wait_leader(3, T).unwrap_or_else(|e| panic!("{e}"));
        // Where the placement says it runs (a, unless its agent has
        // already fenced it and the controller moved it).
        let host = plane
            .wait_moved_off(UNIT, &[], T)
            .unwrap_or_else(|e| panic!("{e}"));
        let hf = unit_on(&plane, &host);
        hf.wait_established(IpAddr::V4(peer_v4()), T);
        // What the peer logs from here on counts. Both sides connect at
        // start, and a collision then is resolved with a Cease (6/7) on one
        // of the two connections before the other is Established: RFC 4271
        // 6.8, not something a failure made the peer see.
        let mark = peer.log_mark();
        let feed_out = connect_feed(
            &plane.lab,
            &plane.topo,
            IpAddr::V4(svc),
            tester(FEED_OUT_AS, 2),
        );
        let feed_in = connect_feed(
            &plane.lab,
            &plane.topo,
            IpAddr::V4(peer_v4()),
            tester(FEED_IN_AS, 1),
        );
        hf.wait_established(IpAddr::V4(feed), T);
        let run = Run {
            plane,
            peer,
            peer_host,
            hf,
            feed_in,
            feed_out,
            mark,
            fresh: 0,
            inbound_bursts: 0,
            phases: Vec::new(),
            relay: None,
        };
        run.wait_protected("start");
        Some(run)
    }

    pub fn topo(&self) -> &holdfast_lab::NsrTopo {
        &self.plane.topo
    }

    pub fn peer(&self) -> &P {
        &self.peer
    }

    /// The peer under test's host.
    pub fn peer_host(&self) -> &NsrHost {
        &self.peer_host
    }

    /// The unit's container on plane host `host` (`a`, `b`).
    pub fn container(&self, host: &str) -> NsrHost {
        self.plane.unit(UNIT).containers[host].clone()
    }

    /// The running unit.
    pub fn hf(&self) -> &Unit {
        &self.hf
    }

    pub fn service_ip(&self) -> IpAddr {
        IpAddr::V4(self.plane.topo.service_v4)
    }

    /// The new unit's `show nsr` once it reports its takeover's figures
    /// (its tables rebuilt).
    fn takeover_figures(&self, what: &str) -> serde_json::Value {
        wait_ok(&format!("{what}: holdfastd's takeover figures"), T, || {
            let n = self.hf.nsr(&self.plane.lab)?;
            (n["takeover"]["tables_us"].as_u64().unwrap_or(0) > 0)
                .then_some(n.clone())
                .ok_or(n.to_string())
        })
        .unwrap_or_else(|e| panic!("{e}"))
    }

    pub fn peer_ip(&self) -> IpAddr {
        IpAddr::V4(peer_v4())
    }

    pub fn watch(&self) -> PeerWatch {
        PeerWatch::start(self.peer.session_probe(&self.plane.lab), self.service_ip())
    }

    /// `show nsr --json` of the running unit.
    pub fn nsr_status(&self) -> serde_json::Value {
        self.hf
            .nsr(&self.plane.lab)
            .unwrap_or_else(|e| panic!("show nsr: {e}"))
    }

    pub fn wait_protected(&self, what: &str) {
        wait_ok(&format!("{what}: {UNIT} PROTECTED"), T, || {
            let n = self.hf.nsr(&self.plane.lab)?;
            (n["protected"] == true).then_some(()).ok_or(n.to_string())
        })
        .unwrap_or_else(|e| panic!("{e}"));
    }

    /// The peer announces `prefix` to us.
    pub fn peer_announces(&mut self, prefix: &str) {
        self.peer
            .announce(&self.plane.lab, &[RouteSpec::new(prefix)])
            .expect("the peer announces");
    }

    /// What the outbound feed has received, every message counted.
    pub fn feed_out_view<R>(&self, f: impl FnOnce(&holdfast_tester::View) -> R) -> R {
        self.feed_out.view(f)
    }

    /// Routes the peer holds from us, by the peer's own count, read with
    /// the watch's light query.
    fn held_from_us(&self) -> u32 {
        let svc = self.service_ip();
        (self.peer.session_probe(&self.plane.lab))()
            .ok()
            .and_then(|v| v.into_iter().find(|s| s.neighbor == svc))
            .and_then(|s| s.prefixes_received)
            .unwrap_or(0)
    }

    /// Injects a failure (or asks for a planned move) with `inject`, then
    /// waits until the controller has moved the unit off its host, the
    /// agent there runs it and its session with the peer is Established.
    /// Returns the old unit.
    pub fn take_over(&mut self, what: &str, inject: impl FnOnce(&mut Self)) -> Unit {
        let from = self.hf.host_name.clone();
        let t0 = Instant::now();
        inject(self);
        let to = self
            .plane
            .wait_moved_off(UNIT, &[from.as_str()], T)
            .unwrap_or_else(|e| panic!("{what}: {e}"));
        let moved = t0.elapsed();
        let new = unit_on(&self.plane, &to);
        new.wait_established(self.peer_ip(), T);
        let established = t0.elapsed();
        let old = std::mem::replace(&mut self.hf, new);
        let nsr = self.takeover_figures(what);
        println!(
            "{what}: the controller moved {UNIT} {from} -> {to} (pid {}) in {moved:?}, Established {established:?}\n  holdfastd: {}",
            self.hf.pid, nsr["takeover"]
        );
        self.phases.push(Phase {
            what: what.to_string(),
            from,
            to,
            moved,
            established,
            holdfastd: nsr["takeover"].clone(),
        });
        old
    }

    /// Starts `holdfast-bfd-relay` on the relay host (added to the bridge
    /// on first use, `.6`) with the lab's Redis URL and the unit's
    /// instance, and waits until it covers `sessions` BFD sessions (read
    /// from its log).
    pub fn start_relay(&mut self, sessions: usize) {
        self.start_relay_with(sessions, &[]);
    }

    /// [`Run::start_relay`] with extra arguments (e.g. `--cover-ms`).
    pub fn start_relay_with(&mut self, sessions: usize, extra: &[&str]) {
        if self.relay.is_none() {
            let h = self
                .plane
                .topo
                .add_relay_host(&mut self.plane.lab)
                .expect("relay host");
            self.relay = Some((h, None));
        }
        let host = self.relay.as_ref().map(|r| r.0.id).expect("relay host");
        let bin = find_binary("holdfast-bfd-relay", "HOLDFAST_BFD_RELAY")
            .expect("holdfast-bfd-relay (cargo build --release -p holdfast-bfd-relay)");
        let url = self.plane.redis.url();
        let bin = bin.to_string_lossy().to_string();
        let auth = self
            .plane
            .relay_store_args(&[UNIT])
            .expect("the relay's store user");
        let mut args = vec![
            bin.as_str(),
            "--store",
            &url,
            "--instance",
            UNIT,
            "--poll-ms",
            "100",
        ];
        args.extend(auth.iter().map(String::as_str));
        args.extend_from_slice(extra);
        let p = self
            .plane
            .lab
            .spawn(host, "bfd-relay", &args, &[("RUST_LOG", "info")])
            .expect("spawn the relay");
        if let Some(r) = self.relay.as_mut() {
            r.1 = Some(p);
        }
        let (_, err) = self.plane.lab.proc_logs(p);
        let err = err.to_path_buf();
        wait_ok("the relay covers the BFD sessions", T, || {
            let log = std::fs::read_to_string(&err).unwrap_or_default();
            let n = log.matches("covering BFD session").count();
            (n >= sessions).then_some(()).ok_or(format!(
                "{n} covered; log: {}",
                log.lines().rev().take(5).collect::<Vec<_>>().join(" | ")
            ))
        })
        .unwrap_or_else(|e| panic!("{e}"));
    }

    /// SIGKILLs the relay (if running).
    pub fn kill_relay(&mut self) {
        if let Some(p) = self.relay.as_mut().and_then(|r| r.1.take()) {
            self.plane.lab.kill(p, Signal::Kill);
            wait_ok("the relay exits", T, || {
                (!self.plane.lab.is_running(p))
                    .then_some(())
                    .ok_or("still running".to_string())
            })
            .unwrap_or_else(|e| panic!("{e}"));
        }
    }

    /// SIGSTOPs (or SIGCONTs) every controller replica: a control plane
    /// that does not act (nobody takes over while they are stopped; what
    /// the agents report waits in their streams).
    pub fn stop_controllers(&mut self, stop: bool) {
        let sig = if stop { Signal::Stop } else { Signal::Cont };
        for (p, _) in self.plane.controllers.clone() {
            self.plane.lab.kill(p, sig);
        }
    }

    /// SIGKILLs the unit with the controllers stopped for `delay` (a slow
    /// control plane: the unit is silent for `delay` plus the takeover),
    /// then waits for the controller's takeover; no checks (a negative
    /// control expects the peer to drop BGP).
    pub fn kill_and_take_over(&mut self, what: &str, delay: Duration) {
        self.take_over(what, |r| {
            r.stop_controllers(true);
            r.kill_unit();
            std::thread::sleep(delay);
            r.stop_controllers(false);
        });
    }

    /// SIGKILLs the unit with the controllers stopped: nobody takes over
    /// (for the rest of the run).
    pub fn kill_primary(&mut self) {
        self.stop_controllers(true);
        self.kill_unit();
    }

    /// SIGKILLs the unit and the relay at once (the same instant as far as
    /// the peer can tell), the controllers stopped: nobody takes over.
    pub fn kill_primary_and_relay(&mut self) {
        let p = self
            .relay
            .as_mut()
            .and_then(|r| r.1.take())
            .expect("relay running");
        self.stop_controllers(true);
        self.kill_unit();
        self.plane.lab.kill(p, Signal::Kill);
    }

    /// Sets `"preheated": true` in the unit's placement (as an operator
    /// would, with etcdctl): the backup host's agent starts a standby
    /// (`holdfastd --standby`) following the store. Returns it once it
    /// follows every stored session.
    pub fn start_standby(&mut self) -> Unit {
        self.set_placement("preheated", true.into());
        let (_, backup) = self.plane.placement(UNIT).expect("placement");
        let backup = backup.expect("a backup host");
        let sb = unit_on(&self.plane, &backup);
        self.wait_standby_caught_up(&sb, 2);
        sb
    }

    /// `show nsr` of a standby: its `standby` object.
    pub fn standby_status(&self, sb: &Unit) -> serde_json::Value {
        let v = sb.nsr(&self.plane.lab).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(v["role"], "standby", "not a standby: {v}");
        v["standby"].clone()
    }

    /// Waits until the standby follows `sessions` sessions and its last poll
    /// found nothing new.
    pub fn wait_standby_caught_up(&self, sb: &Unit, sessions: u64) -> serde_json::Value {
        wait_ok("the standby follows the store and caught up", T, || {
            let v = sb.nsr(&self.plane.lab)?;
            let s = &v["standby"];
            (v["role"] == "standby"
                && s["sessions"].as_u64() == Some(sessions)
                && s["caught_up"] == true
                && s["prepared"] == true)
                .then_some(s.clone())
                .ok_or(v.to_string())
        })
        .unwrap_or_else(|e| panic!("{e}"))
    }

    /// SIGKILLs the primary; the controller takes the unit over through the
    /// standby `sb` (its own process becomes the primary). Returns the old
    /// unit and holdfastd's takeover figures.
    pub fn standby_takeover(&mut self, what: &str, sb: Unit) -> (Unit, serde_json::Value) {
        let old = self.take_over(what, |r| r.kill_unit());
        assert_eq!(
            (self.hf.host_name.as_str(), self.hf.pid),
            (sb.host_name.as_str(), sb.pid),
            "{what}: not the standby's own process"
        );
        let t = self
            .phases
            .last()
            .map(|p| p.holdfastd.clone())
            .unwrap_or_default();
        (old, t)
    }

    /// Sends `n` routes from the outbound feed (through the unit to the
    /// peer) and waits until the peer holds them all.
    pub fn outbound_routes(&mut self, what: &str, n: usize) {
        let before = self.held_from_us();
        let mut w = generate(Kind::Packed, n, FEED_OUT_AS, self.plane.topo.feed.v4);
        for (_, ps) in &mut w {
            for p in ps.iter_mut() {
                if let Prefix::V4(p4) = p {
                    p4.addr += OUT_OFFSET;
                }
            }
        }
        let mut bytes = Vec::new();
        encode_routes(&w, &self.feed_out.ctx, &mut bytes);
        self.feed_out
            .send_stream(&bytes)
            .expect("outbound routes sent");
        wait_ok(
            &format!("{what}: the peer holds {n} more routes"),
            T,
            || {
                let h = self.held_from_us();
                (h as usize >= before as usize + n)
                    .then_some(())
                    .ok_or(format!("peer holds {h}, had {before}"))
            },
        )
        .unwrap_or_else(|e| panic!("{e}"));
    }

    /// After [`Run::kill_primary`] (the controllers stopped): lets the
    /// controllers go on, and waits for their takeover.
    pub fn resume_controllers_and_take_over(&mut self, what: &str) -> Unit {
        self.take_over(what, |r| r.stop_controllers(false))
    }

    /// The state store's address (`redis-server` in the lab).
    pub fn store_addr(&self) -> std::net::SocketAddr {
        std::net::SocketAddr::new(
            self.plane.redis.single().addr(),
            self.plane.redis.single().port(),
        )
    }

    /// The store administrator's password when the store has ACL users
    /// (the plane's default), for a test's own connection (`AUTH`).
    pub fn store_admin_password(&self) -> Option<String> {
        self.plane
            .redis
            .single()
            .admin_password()
            .map(str::to_string)
    }

    /// A network namespace from which the store is reachable (the feed
    /// host's), for a test's own connection to it.
    pub fn client_netns(&self) -> String {
        self.plane.lab.netns(self.plane.topo.feed.id).to_string()
    }

    /// The store key of a session with the peer, `hf:{UNIT}:s:default/PEER:suffix`.
    pub fn peer_session_key(&self, suffix: &str) -> String {
        format!("hf:{{{UNIT}}}:s:default/{}:{suffix}", self.peer_ip())
    }

    /// The store's epoch of the unit's instance (`GET`).
    pub fn store_epoch(&self) -> u64 {
        let key = format!("hf:{{{UNIT}}}:epoch");
        self.plane
            .redis
            .server_of(&self.plane.lab, &key)
            .and_then(|r| r.cli(&self.plane.lab, &["GET", &key]))
            .expect("redis GET epoch")
            .trim()
            .parse()
            .unwrap_or(0)
    }

    /// Rewrites one field of the unit's placement in etcd (as an operator
    /// would, with etcdctl).
    fn set_placement(&mut self, field: &str, value: serde_json::Value) {
        let key = format!("{}{UNIT}", holdfast_lab::plane::UNITS_PREFIX);
        let got = self
            .plane
            .etcd
            .ctl(&mut self.plane.lab, &["get", &key, "--print-value-only"])
            .expect("etcdctl get");
        let mut rec: serde_json::Value = serde_json::from_str(got.trim()).expect("unit record");
        rec[field] = value;
        self.plane
            .etcd
            .ctl(&mut self.plane.lab, &["put", &key, &rec.to_string()])
            .expect("etcdctl put");
    }

    /// SIGKILLs the unit with its placement's application-failure policy
    /// set to `restart_in_place`: the controller takes it over on its own
    /// host, in the same container (the policy goes back to `migrate`
    /// after). Returns the old unit.
    pub fn take_over_in_place(&mut self, what: &str) -> Unit {
        self.set_placement("app_failure", "restart_in_place".into());
        let host = self.hf.host_name.clone();
        let old_pid = self.hf.pid;
        let t0 = Instant::now();
        self.kill_unit();
        let pid = self
            .plane
            .wait_running(UNIT, &host, Some(old_pid), T)
            .unwrap_or_else(|e| panic!("{what}: {e}"));
        let moved = t0.elapsed();
        let mut new = unit_on(&self.plane, &host);
        new.pid = pid;
        new.wait_established(self.peer_ip(), T);
        let established = t0.elapsed();
        let old = std::mem::replace(&mut self.hf, new);
        let nsr = self.takeover_figures(what);
        println!(
            "{what}: the controller restarted {UNIT} in place on {host} (pid {pid}) in {moved:?}, Established {established:?}\n  holdfastd: {}",
            nsr["takeover"]
        );
        self.phases.push(Phase {
            what: what.to_string(),
            from: host.clone(),
            to: host,
            moved,
            established,
            holdfastd: nsr["takeover"].clone(),
        });
        self.set_placement("app_failure", "migrate".into());
        old
    }

    /// Starts another holdfastd (`name`) beside the unit, in its container,
    /// with the unit's configuration edited by `edit`; as a takeover when
    /// `takeover`. The start's result, as `Holdfastd::start_with` reports it
    /// (a process that exits before its control socket answers is an error
    /// carrying its log's tail).
    pub fn start_beside(
        &mut self,
        name: &str,
        edit: impl Fn(&str) -> String,
        takeover: bool,
    ) -> Result<holdfast_lab::Holdfastd, holdfast_lab::LabError> {
        let config =
            std::fs::read_to_string(self.plane.lab.work_dir().join(format!("{UNIT}.toml")))
                .expect("the unit's configuration");
        let config = edit(&config);
        let mut opts = if takeover {
            holdfast_lab::StartOpts::takeover(
                self.plane.lab.work_dir().join(name).join("takeover.ready"),
            )
        } else {
            holdfast_lab::StartOpts::default()
        };
        // The error a refused start ends with, not a backtrace, is what
        // the log's tail in the start error shows.
        opts.env
            .push(("RUST_BACKTRACE".to_string(), "0".to_string()));
        holdfast_lab::Holdfastd::start_with(&mut self.plane.lab, self.hf.host, name, &config, &opts)
    }

    /// The Holdfast iptables/ip6tables rules in the unit's container
    /// (`-S` lines carrying a `holdfast:` comment).
    pub fn holdfast_rules(&self) -> Vec<String> {
        let mut out = Vec::new();
        for cmd in ["iptables", "ip6tables"] {
            let text = self
                .plane
                .lab
                .exec_ok(self.hf.host, &[cmd, "-w", "-S"])
                .expect("iptables -S");
            out.extend(
                text.lines()
                    .filter(|l| l.contains("holdfast:"))
                    .map(|l| format!("{cmd} {l}")),
            );
        }
        out
    }

    /// SIGSTOPs the unit for `d`, then SIGCONT: a stall, not a failure
    /// (nobody takes over: its TCP handshakes still complete, and with
    /// [`Options::stalls`] its agent does not judge it hung).
    pub fn stall_primary(&mut self, d: Duration) {
        let pid = self
            .plane
            .stop_unit(UNIT, &self.hf.host_name)
            .unwrap_or_else(|e| panic!("{e}"));
        std::thread::sleep(d);
        assert!(
            holdfast_lab::send_signal(pid as u32, Signal::Cont, false),
            "SIGCONT {pid}"
        );
    }

    /// SIGKILLs the running unit (an application failure the controller
    /// handles).
    pub fn kill_unit(&mut self) {
        self.plane
            .kill_unit(UNIT, &self.hf.host_name)
            .unwrap_or_else(|e| panic!("{e}"));
    }

    /// Everything the scenario promises, after a takeover.
    pub fn check(&mut self, what: &str) {
        for (t, who) in [
            (&self.feed_in, "feed->peer"),
            (&self.feed_out, "feed->holdfastd"),
        ] {
            t.view(|v| {
                assert!(
                    v.notifications.is_empty(),
                    "{what}: {who} got NOTIFICATION {:?}",
                    v.notifications
                );
                assert!(!v.closed, "{what}: {who}'s connection closed");
            });
        }
        let notes = self.peer.notifications_since(&self.mark).expect("peer log");
        assert!(
            notes.is_empty(),
            "{what}: the peer logged NOTIFICATIONs: {notes:?}"
        );
        let (peer_ip, svc) = (self.peer_ip(), self.service_ip());
        // Every route the peer advertises to us is in our Adj-RIB-In, and
        // nothing else is.
        wait_ok(
            &format!("{what}: Adj-RIB-In = what the peer sent"),
            T,
            || {
                let sent = prefixes(
                    self.peer
                        .advertised_routes(&self.plane.lab, svc)
                        .map_err(|e| e.to_string())?
                        .into_iter()
                        .map(|r| r.prefix),
                );
                let got = prefixes(
                    self.hf
                        .rib(RibTable::In, Some(peer_ip))
                        .map_err(|e| e.to_string())?
                        .into_iter()
                        .map(|r| r.prefix),
                );
                (sent == got)
                    .then_some(())
                    .ok_or_else(|| difference(&sent, &got))
            },
        )
        .unwrap_or_else(|e| panic!("{e}"));
        // The peer holds exactly what we advertise.
        wait_ok(
            &format!("{what}: the peer holds our Adj-RIB-Out"),
            T,
            || {
                let out = self
                    .hf
                    .rib(RibTable::Out, Some(peer_ip))
                    .map_err(|e| e.to_string())?
                    .len() as u32;
                let held = self.held_from_us();
                (out == held && out > 0)
                    .then_some(())
                    .ok_or(format!("advertised {out}, peer holds {held}"))
            },
        )
        .unwrap_or_else(|e| panic!("{e}"));
        // New UPDATEs both ways.
        self.fresh += 1;
        let from_peer = format!("198.51.100.{}/32", self.fresh);
        self.peer
            .announce(&self.plane.lab, &[RouteSpec::new(&from_peer)])
            .expect("peer announces");
        wait_ok(&format!("{what}: a new route from the peer"), T, || {
            let r = self
                .hf
                .rib(RibTable::In, Some(peer_ip))
                .map_err(|e| e.to_string())?;
            r.iter()
                .any(|e| e.prefix == from_peer)
                .then_some(())
                .ok_or(format!("{} routes, not {from_peer}", r.len()))
        })
        .unwrap_or_else(|e| panic!("{e}"));
        let before = self.held_from_us();
        let to_peer = Prefix::V4(Prefix4 {
            addr: u32::from(Ipv4Addr::new(100, 64, self.fresh as u8, 0)),
            len: 24,
        });
        self.feed_out
            .announce(&one_hop(FEED_OUT_AS, self.plane.topo.feed.v4), &[to_peer])
            .expect("feed announces");
        wait_ok(&format!("{what}: a new route reaches the peer"), T, || {
            let n = self.held_from_us();
            (n > before).then_some(()).ok_or(format!("peer holds {n}"))
        })
        .unwrap_or_else(|e| panic!("{e}"));
        println!("{what}: checks passed");
    }

    /// Streams `burst()` routes from a feed; once `progress()` reaches a
    /// tenth of them, does `act` while the rest streams.
    fn burst_and(
        &mut self,
        what: &str,
        inbound: bool,
        progress: impl Fn(&Self) -> u64,
        act: impl FnOnce(&mut Self),
    ) {
        let n = burst();
        let (t, asn) = if inbound {
            (self.feed_in.clone(), FEED_IN_AS)
        } else {
            (self.feed_out.clone(), FEED_OUT_AS)
        };
        let mut w = generate(Kind::Packed, n, asn, self.plane.topo.feed.v4);
        // Outbound routes apart from inbound ones; each inbound burst after
        // the first apart from the earlier ones.
        let offset = if inbound {
            self.inbound_bursts * IN_BURST_OFFSET
        } else {
            OUT_OFFSET
        };
        if inbound {
            self.inbound_bursts += 1;
        }
        for (_, ps) in &mut w {
            for p in ps.iter_mut() {
                if let Prefix::V4(p4) = p {
                    p4.addr += offset;
                }
            }
        }
        let mut bytes = Vec::new();
        encode_routes(&w, &t.ctx, &mut bytes);
        let start = progress(self);
        let sender = std::thread::spawn(move || t.send_stream(&bytes));
        let at = wait_for_every(
            &format!("{what}: burst under way"),
            T,
            Duration::from_millis(5),
            || {
                let p = progress(self).saturating_sub(start);
                Ok((p >= n as u64 / 10).then_some(p))
            },
        )
        .unwrap_or_else(|e| panic!("{e}"));
        println!("{what}: {at} of {n} through");
        act(self);
        sender.join().expect("sender").expect("burst sent");
    }

    /// Streams a burst; kills the unit once a tenth is through; the
    /// controller takes it over.
    fn burst_and_kill(&mut self, what: &str, inbound: bool, progress: impl Fn(&Self) -> u64) {
        self.burst_and(what, inbound, progress, |r| {
            r.take_over(what, |r| r.kill_unit());
        });
    }

    /// Streams a 100k inbound burst; once a tenth is through, SIGSTOPs the
    /// store for `d`, then SIGCONT. Returns how long after the store's
    /// return the unit was PROTECTED again.
    pub fn store_stall(&mut self, d: Duration) -> Duration {
        let what = format!("store stalled {d:?} during a 100k inbound burst");
        let mut back = Duration::ZERO;
        self.during_inbound_burst(&what, |r| {
            let redis = r.plane.redis.single().proc();
            r.plane.lab.kill(redis, Signal::Stop);
            std::thread::sleep(d);
            r.plane.lab.kill(redis, Signal::Cont);
            let t = Instant::now();
            r.wait_protected(&format!("{what}: the store back"));
            back = t.elapsed();
        });
        println!("{what}: PROTECTED again {back:?} after the store's return");
        self.check(&what);
        back
    }

    /// SIGKILLs the unit and waits for the controller's takeover; returns
    /// the old unit.
    pub fn kill_and_wait(&mut self, what: &str) -> Unit {
        self.take_over(what, |r| r.kill_unit())
    }

    pub fn idle_kill(&mut self) {
        self.take_over("idle SIGKILL", |r| r.kill_unit());
        self.check("idle SIGKILL");
    }

    pub fn inbound_burst(&mut self) {
        let what = "SIGKILL during a 100k inbound burst";
        self.during_inbound_burst(what, |r| {
            r.take_over(what, |r| r.kill_unit());
        });
        self.check(what);
    }

    /// Streams a 100k inbound burst (the feed through the peer to the
    /// unit); once a tenth is through, does `act` while the rest streams.
    pub fn during_inbound_burst(&mut self, what: &str, act: impl FnOnce(&mut Self)) {
        let peer_ip = self.peer_ip();
        self.burst_and(
            what,
            true,
            move |r| {
                r.hf.neighbor(peer_ip)
                    .ok()
                    .flatten()
                    .map_or(0, |n| n.prefixes_received)
            },
            act,
        );
    }

    pub fn outbound_burst(&mut self) {
        self.burst_and_kill("SIGKILL during a 100k outbound burst", false, |r| {
            u64::from(r.held_from_us())
        });
        self.check("SIGKILL during a 100k outbound burst");
    }

    /// `holdfast ctl switchover`: the controller hands the unit over to
    /// its backup; the old process exits.
    pub fn switchover(&mut self) {
        let old = self.take_over("planned switchover", |r| {
            let done = r
                .plane
                .ctl(&["switchover", UNIT, "--wait", "30"])
                .unwrap_or_else(|e| panic!("holdfast ctl switchover: {e}"));
            assert!(done["done"] == true, "holdfast ctl switchover: {done}");
        });
        wait_ok("switchover: the old process exits", T, || {
            (!old.is_alive())
                .then_some(())
                .ok_or("still running".to_string())
        })
        .unwrap_or_else(|e| panic!("{e}"));
        self.check("planned switchover");
    }

    /// SIGSTOPs the unit: its agent finds it hung and kills it, the
    /// controller takes it over; the SIGCONT then finds nobody, so the
    /// frozen primary never sends again.
    pub fn frozen_primary(&mut self) {
        let what = "frozen primary (SIGSTOP)";
        let old = self.take_over(what, |r| {
            r.plane
                .stop_unit(UNIT, &r.hf.host_name)
                .unwrap_or_else(|e| panic!("{e}"));
        });
        // The SIGCONT finds nobody (it may have gone already).
        let _ = holdfast_lab::send_signal(old.pid as u32, Signal::Cont, false);
        wait_ok(&format!("{what}: the frozen process is gone"), T, || {
            (!old.is_alive())
                .then_some(())
                .ok_or(format!("pid {} still exists", old.pid))
        })
        .unwrap_or_else(|e| panic!("{e}"));
        self.check(what);
    }

    /// Kills the store (it comes back empty: no persistence) and waits
    /// until the unit says it is unprotected.
    pub fn store_down(&mut self) {
        self.plane
            .redis
            .single_mut()
            .kill(&mut self.plane.lab)
            .expect("kill redis");
        wait_ok("store down: UNPROTECTED", T, || {
            let n = self.nsr_status();
            (n["protected"] == false).then_some(()).ok_or(n.to_string())
        })
        .unwrap_or_else(|e| panic!("{e}"));
    }

    /// Restarts the store killed by [`Run::store_down`] and waits until
    /// the unit is protected again (re-claimed, re-synchronised).
    pub fn store_back(&mut self) {
        self.plane
            .redis
            .single_mut()
            .restart(&mut self.plane.lab)
            .expect("restart redis");
        self.wait_protected("redis back");
    }

    pub fn redis_outage(&mut self) {
        self.store_down();
        // Sessions stay up and routes flow while unprotected.
        self.check("redis down");
        // What the unit sends the outbound feed from here is not
        // acknowledged (its host drops our segments), so the sessions are
        // written anew with a send tail the peer has not acknowledged: the
        // takeover must restore it (else the feed's stream has a gap).
        self.drop_to_feed(true);
        let prefix = "198.51.100.250/32";
        self.peer_announces(prefix);
        let feed_ip = IpAddr::V4(self.plane.topo.feed.v4);
        wait_ok(
            "store down: the new route in our Adj-RIB-Out to the feed",
            T,
            || {
                let out = self
                    .hf
                    .rib(RibTable::Out, Some(feed_ip))
                    .map_err(|e| e.to_string())?;
                out.iter()
                    .any(|r| r.prefix == prefix)
                    .then_some(())
                    .ok_or(format!("{} routes, not {prefix}", out.len()))
            },
        )
        .unwrap_or_else(|e| panic!("{e}"));
        self.store_back();
        let what = "takeover after the store came back";
        self.take_over(what, |r| r.kill_unit());
        self.drop_to_feed(false);
        let p: Prefix = prefix.parse().expect("prefix");
        wait_ok(
            &format!("{what}: the feed gets the route sent unacknowledged"),
            T,
            || {
                self.feed_out
                    .view(|v| v.route(&p).is_some())
                    .then_some(())
                    .ok_or(format!(
                        "the feed holds {} routes",
                        self.feed_out.route_count()
                    ))
            },
        )
        .unwrap_or_else(|e| panic!("{e}"));
        self.check(what);
    }

    /// Drops (or stops dropping) on the feed's host every segment from the
    /// service address's BGP port.
    fn drop_to_feed(&self, on: bool) {
        let svc = self.service_ip().to_string();
        let op = if on { "-I" } else { "-D" };
        self.plane
            .lab
            .exec_ok(
                self.plane.topo.feed.id,
                &[
                    "iptables", op, "INPUT", "-p", "tcp", "-s", &svc, "--sport", "179", "-j",
                    "DROP",
                ],
            )
            .expect("iptables on the feed host");
    }

    pub fn print_phases(&self) {
        println!(
            "takeovers through the control plane (the lab's wall clock from the injection; holdfastd's own figures in µs):"
        );
        for p in &self.phases {
            let h = &p.holdfastd;
            println!(
                "  {:<45} {} -> {}  moved by the controller {:>7.1} ms  Established {:>7.1} ms | holdfastd: claim {} us, load {} us, tcp restore {} us (max {} us), resumed {} us, logs {} us, tables {} us",
                p.what,
                p.from,
                p.to,
                p.moved.as_secs_f64() * 1e3,
                p.established.as_secs_f64() * 1e3,
                h["claim_us"], h["load_us"], h["tcp_restore_us"], h["tcp_restore_max_us"], h["resumed_us"], h["logs_us"], h["tables_us"]
            );
        }
    }

    /// The end of a run: the peer's watch saw no interruption and no route
    /// it held from us withdrawn, nothing leaked a FIN or RST since `since`;
    /// then the takeover phases are printed.
    pub fn finish(&self, watch: PeerWatch, since: std::time::SystemTime) {
        stop_watch(watch, "the run");
        self.assert_nothing_leaked(since);
        self.print_phases();
    }

    /// No FIN or RST from the service address to the peer or the feed ever
    /// reached the wire: dying primaries leaked nothing, and no orphan
    /// socket was destroyed in the open. (The agents' and the controllers'
    /// TCP probes of the service address are opened and closed on purpose:
    /// not counted.)
    pub fn assert_nothing_leaked(&self, since: std::time::SystemTime) {
        crate::nsr_common::assert_no_fin_rst(
            &self.plane.lab,
            self.plane.topo.service_v4,
            &[peer_v4(), self.plane.topo.feed.v4],
            since,
        );
    }
}

/// The unit as `host`'s agent runs it (its pid from the agent's status).
pub fn unit_on(plane: &Plane, host: &str) -> Unit {
    let pid = plane
        .wait_running(UNIT, host, None, T)
        .unwrap_or_else(|e| panic!("{e}"));
    let dir = plane.host(host).work_dir.join(UNIT);
    Unit {
        host_name: host.to_string(),
        host: plane.unit(UNIT).containers[host].id,
        pid,
        socket: dir.join("holdfastd.sock"),
        log: dir.join("holdfastd.log"),
    }
}

/// The whole sequence for one kind of peer.
pub fn failover_sequence<P: Peer>(name: &str, kind: PeerKind, o: Options) {
    let Some(mut r) = Run::<P>::start(name, kind, o) else {
        return;
    };
    let watch = r.watch();
    r.check("before any failure");
    let since = std::time::SystemTime::now();
    r.idle_kill();
    r.inbound_burst();
    r.outbound_burst();
    r.switchover();
    r.frozen_primary();
    r.redis_outage();
    r.finish(watch, since);
}
