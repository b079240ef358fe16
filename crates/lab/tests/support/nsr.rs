//! The non-stop-routing failover sequence, run against one kind of real
//! peer (bird2, frr or gobgpd) by the `nsr_<peer>` scenarios; `nsr_bfd_frr`
//! uses its lab and takeovers with BFD under the session.
//!
//! ```text
//!                 bridge `lan` 198.18.0.0/24
//!   [ peer ] .1   real BGP daemon AS 65001 --- session under test --- service .10 (holdfastd AS 65000)
//!   [ redis ] .2  redis-server (the state store)
//!   [ a ] .3      holdfastd primary, then backup, then primary ...   } the service address .10
//!   [ b ] .4      holdfastd backup,  then primary ...               } moves with the role
//!   [ feed ] .5   raw test peers: AS 65100 -> peer (inbound burst), AS 65200 -> holdfastd (outbound burst)
//! ```
//!
//! One lab, one run of the peer daemon, many takeovers in a row
//! (A→B→A→B→…): SIGKILL while idle, SIGKILL in the middle of a 100k-route
//! inbound burst (feed → peer → holdfastd), SIGKILL in the middle of a
//! 100k-route outbound burst (feed → holdfastd → peer), a planned
//! switchover, a frozen primary (SIGSTOP, takeover, SIGCONT: it stays
//! fenced), and a Redis kill/restart (unprotected, protected again, then a
//! takeover; the feed's host drops our segments from the kill to the
//! takeover, so the sessions are written anew with bytes the feed has not
//! acknowledged, and the feed must get them from the new primary). After
//! each one:
//! * the peer's session never left Established: a watch samples the peer's
//!   own CLI every 200 ms for the whole run (state, uptime never going back,
//!   established/dropped counters unchanged);
//! * the peer logged no NOTIFICATION, and the feed peers got none;
//! * the number of routes the peer holds from us never went down (never
//!   withdrawn), and ends at exactly what we advertise;
//! * every route the peer advertises to us is in the new primary's
//!   Adj-RIB-In from it, and nothing else is;
//! * new UPDATEs flow both ways (a fresh route from the peer reaches
//!   holdfastd; a fresh route from the feed reaches the peer);
//! * at the end, the bridge capture holds no FIN or RST sent from the
//!   service address since the first failure: no dying primary leaked one.
#![allow(dead_code)]

use holdfast_api::RibTable;
use holdfast_lab::{
    skip_unless_ready, wait_for_every, wait_ok, Fence, Holdfastd, HostId, Lab, LabOrchestrator,
    LogMark, NeighborSpec, NsrTopo, Orchestrator, Peer, PeerKind, PeerSpec, PeerWatch, Redis,
    RouteSpec, Signal,
};
use holdfast_tester::workload::{generate, Kind};
use holdfast_tester::{encode_routes, netns::in_netns, Config as TesterConfig, Peer as Tester};
use holdfast_wire::{AsPath, AsSegment, Family, Origin, PathAttrs, Prefix, Prefix4};
use std::collections::BTreeSet;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};

pub const HF_AS: u32 = 65000;
pub const PEER_AS: u32 = 65001;
pub const FEED_IN_AS: u32 = 65100;
pub const FEED_OUT_AS: u32 = 65200;
const INSTANCE: &str = "edge-1";
pub(crate) const T: Duration = Duration::from_secs(90);
/// The outbound burst's prefixes are the inbound ones moved by this much
/// (1.0.0.0/24… becomes 33.0.0.0/24…), so the two never compete.
pub(crate) const OUT_OFFSET: u32 = 0x2000_0000;
/// How far each inbound burst after the first is moved (two /8s: a burst
/// of 100k /24s spans less than one).
pub(crate) const IN_BURST_OFFSET: u32 = 0x0200_0000;

/// Routes in each burst (HOLDFAST_NSR_BURST, default 100,000).
pub(crate) fn burst() -> usize {
    std::env::var("HOLDFAST_NSR_BURST")
        .ok()
        .and_then(|v| v.replace('_', "").parse().ok())
        .unwrap_or(100_000)
}

#[derive(Default)]
pub struct Options {
    /// TCP MD5 key on the session under test.
    pub md5: Option<&'static str>,
    /// `[nsr] compact_bytes`: small values make every burst compact the
    /// replicated logs into snapshots, so takeovers load snapshots (with
    /// `compact_ratio = 0`: compacted even when the burst is fresh routes).
    pub compact_bytes: Option<u64>,
    /// BFD under the session under test (non-stop BFD): the interval in
    /// ms (both ways, Detect Mult 3), `None` for no BFD.
    pub bfd: Option<u32>,
    /// BFD authentication under the session (bird2 peers): bird2's
    /// `authentication` kind, holdfastd's `auth`, key ID, password.
    pub bfd_auth: Option<BfdAuth>,
    /// holdfastd's import policy for the peer under test (default `all`).
    pub import: Option<&'static str>,
}

/// BFD authentication of [`Options::bfd_auth`].
#[derive(Debug, Clone, Copy)]
pub struct BfdAuth {
    pub bird: &'static str,
    pub holdfastd: &'static str,
    pub key_id: u8,
    pub password: &'static str,
}

pub struct Run<P: Peer> {
    pub lab: Lab,
    topo: NsrTopo,
    orch: LabOrchestrator,
    redis: Redis,
    peer: P,
    hf: Holdfastd,
    config: String,
    units: usize,
    feed_in: Arc<Tester>,
    feed_out: Arc<Tester>,
    mark: LogMark,
    fresh: u32,
    /// Inbound bursts sent so far.
    inbound_bursts: u32,
    /// (what, phase times) per takeover.
    pub phases: Vec<(String, holdfast_lab::TakeoverTimes, serde_json::Value)>,
    /// The BFD relay host, once added, and the running relay.
    relay: Option<(holdfast_lab::NsrHost, Option<holdfast_lab::ProcId>)>,
}

fn service(topo: &NsrTopo) -> IpAddr {
    IpAddr::V4(topo.service_v4)
}

fn hf_config(topo: &NsrTopo, redis: &str, o: &Options, more: &str) -> String {
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
    let extra = format!(
        "hold_time = 9\n\
         [[network]]\nprefix = \"100.100.0.0/24\"\ncount = 10\n\
         [[neighbor]]\naddress = \"{peer}\"\nremote_asn = {PEER_AS}\nlocal_address = \"{svc}\"\nimport = \"{import}\"\nexport = \"all\"\n{md5}\n\
         [[neighbor]]\naddress = \"{feed}\"\nremote_asn = {FEED_OUT_AS}\nlocal_address = \"{svc}\"\npassive = true\nimport = \"all\"\nexport = \"all\"\n",
        peer = topo.peer.v4,
        feed = topo.feed.v4,
        svc = topo.service_v4,
        import = o.import.unwrap_or("all"),
    );
    let extra = match o.compact_bytes {
        Some(n) => format!("{extra}[nsr]\ncompact_bytes = {n}\ncompact_ratio = 0\n"),
        None => extra,
    };
    let extra = format!("{extra}{more}");
    holdfast_lab::nsr_config(topo, redis, INSTANCE, &[], &extra)
}

fn peer_spec(topo: &NsrTopo, o: &Options) -> PeerSpec {
    let mut us = NeighborSpec::new(service(topo), HF_AS)
        .local(IpAddr::V4(topo.peer.v4))
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
    let feed = NeighborSpec::new(IpAddr::V4(topo.feed.v4), FEED_IN_AS)
        .local(IpAddr::V4(topo.peer.v4))
        .families(true, false)
        .passive();
    PeerSpec::new(PEER_AS, Ipv4Addr::new(192, 0, 2, 201))
        .neighbor(us)
        .neighbor(feed)
        .route(RouteSpec::new("203.0.113.0/24"))
}

pub(crate) fn tester(asn: u32, id: u8) -> TesterConfig {
    let mut c = TesterConfig::new(asn, Ipv4Addr::new(192, 0, 2, 100 + id));
    c.families = vec![Family::IPV4_UNICAST];
    c
}

/// Connects a raw test peer from the feed host, retrying until accepted.
pub(crate) fn connect_feed(lab: &Lab, topo: &NsrTopo, to: IpAddr, cfg: TesterConfig) -> Arc<Tester> {
    let ns = lab.netns(topo.feed.id).to_string();
    let local = IpAddr::V4(topo.feed.v4);
    let deadline = Instant::now() + T;
    loop {
        let c = cfg.clone();
        let r = in_netns(&ns, move || {
            Tester::connect(
                SocketAddr::new(to, 179),
                Some(local),
                &c,
                Duration::from_secs(5),
            )
        })
        .expect("netns");
        match r {
            Ok(p) => return Arc::new(p),
            Err(e) if Instant::now() < deadline => {
                println!("feed -> {to}: {e}; retrying");
                std::thread::sleep(Duration::from_millis(500));
            }
            Err(e) => panic!("feed -> {to}: {e}"),
        }
    }
}

pub(crate) fn one_hop(asn: u32, nh: Ipv4Addr) -> PathAttrs {
    PathAttrs {
        origin: Some(Origin::Igp),
        as_path: AsPath {
            segments: vec![AsSegment::Sequence(vec![asn])],
        },
        next_hop: Some(nh),
        ..Default::default()
    }
}

pub(crate) fn prefixes<I: IntoIterator<Item = String>>(v: I) -> BTreeSet<String> {
    v.into_iter().collect()
}

/// What differs between two prefix sets, briefly.
pub(crate) fn difference(want: &BTreeSet<String>, got: &BTreeSet<String>) -> String {
    let missing: Vec<&String> = want.difference(got).take(5).collect();
    let extra: Vec<&String> = got.difference(want).take(5).collect();
    format!(
        "want {} got {}; missing {} e.g. {missing:?}; extra {} e.g. {extra:?}",
        want.len(),
        got.len(),
        want.difference(got).count(),
        got.difference(want).count()
    )
}

impl<P: Peer> Run<P> {
    pub fn start(name: &str, kind: PeerKind, o: Options) -> Option<Run<P>> {
        Self::start_with(name, kind, o, |_| String::new())
    }

    /// [`Run::start`] with `more(topology)` appended to holdfastd's
    /// configuration (e.g. a `[[bmp]]` naming a lab host).
    pub fn start_with(
        name: &str,
        kind: PeerKind,
        o: Options,
        more: impl Fn(&NsrTopo) -> String,
    ) -> Option<Run<P>> {
        if skip_unless_ready(&[kind]) {
            return None;
        }
        let mut lab = Lab::new(name).expect("lab");
        lab.capture_start().expect("pcap");
        let topo = NsrTopo::build(&mut lab).expect("topology");
        let redis =
            Redis::start(&mut lab, topo.redis.id, IpAddr::V4(topo.redis.v4), 6379).expect("redis");
        let config = hf_config(&topo, &redis.url(), &o, &more(&topo));
        let hf = Holdfastd::start(&mut lab, topo.a.id, "hf0", &config).expect("holdfastd on a");
        let peer = P::start(&mut lab, topo.peer.id, &peer_spec(&topo, &o)).expect("peer");
        let mark = peer.log_mark();
        hf.wait_established(IpAddr::V4(topo.peer.v4), T)
            .expect("session with the peer");
        let feed_out = connect_feed(&lab, &topo, service(&topo), tester(FEED_OUT_AS, 2));
        let feed_in = connect_feed(&lab, &topo, IpAddr::V4(topo.peer.v4), tester(FEED_IN_AS, 1));
        hf.wait_established(IpAddr::V4(topo.feed.v4), T)
            .expect("session with the outbound feed");
        let orch = LabOrchestrator::new(&topo);
        let run = Run {
            lab,
            topo,
            orch,
            redis,
            peer,
            hf,
            config,
            units: 1,
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

    /// Starts `holdfast-bfd-relay` on the relay host (added to the bridge
    /// on first use) with the lab's Redis URL and our instance, and waits
    /// until it covers `sessions` BFD sessions (read from its log).
    pub fn start_relay(&mut self, sessions: usize) {
        self.start_relay_with(sessions, &[]);
    }

    /// [`Run::start_relay`] with extra arguments (e.g. `--cover-ms`).
    pub fn start_relay_with(&mut self, sessions: usize, extra: &[&str]) {
        if self.relay.is_none() {
            let h = self.topo.add_relay_host(&mut self.lab).expect("relay host");
            self.relay = Some((h, None));
        }
        let host = self.relay.as_ref().map(|r| r.0.id).expect("relay host");
        let bin = holdfast_lab::find_binary("holdfast-bfd-relay", "HOLDFAST_BFD_RELAY")
            .expect("holdfast-bfd-relay (cargo build --release -p holdfast-bfd-relay)");
        let url = self.redis.url();
        let bin = bin.to_string_lossy().to_string();
        let mut args = vec![
            bin.as_str(),
            "--store",
            &url,
            "--instance",
            INSTANCE,
            "--poll-ms",
            "100",
        ];
        args.extend_from_slice(extra);
        let p = self
            .lab
            .spawn(host, "bfd-relay", &args, &[("RUST_LOG", "info")])
            .expect("spawn the relay");
        if let Some(r) = self.relay.as_mut() {
            r.1 = Some(p);
        }
        let (_, err) = self.lab.proc_logs(p);
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
            self.lab.kill(p, Signal::Kill);
            wait_ok("the relay exits", T, || {
                (!self.lab.is_running(p))
                    .then_some(())
                    .ok_or("still running".to_string())
            })
            .unwrap_or_else(|e| panic!("{e}"));
        }
    }

    /// SIGSTOPs the primary for `d`, then SIGCONT: a stall, not a failure
    /// (nobody takes over).
    pub fn stall_primary(&mut self, d: Duration) {
        self.lab.kill(self.hf.proc, Signal::Stop);
        std::thread::sleep(d);
        self.lab.kill(self.hf.proc, Signal::Cont);
    }

    /// SIGKILLs the primary; nobody takes over.
    pub fn kill_primary(&mut self) {
        self.lab.kill(self.hf.proc, Signal::Kill);
    }

    /// SIGKILLs the primary and the relay at once (the same instant as far
    /// as the peer can tell); nobody takes over.
    pub fn kill_primary_and_relay(&mut self) {
        let p = self
            .relay
            .as_mut()
            .and_then(|r| r.1.take())
            .expect("relay running");
        self.lab.kill(self.hf.proc, Signal::Kill);
        self.lab.kill(p, Signal::Kill);
    }

    /// SIGKILLs the primary, lets `detection` pass (the orchestrator's
    /// failure detection, the experiment's parameter), then takes over with
    /// the lab orchestrator; no checks (the negative control expects the
    /// peer to drop BGP).
    pub fn kill_and_take_over(&mut self, what: &str, detection: Duration) {
        self.lab.kill(self.hf.proc, Signal::Kill);
        std::thread::sleep(detection);
        drop(self.takeover(what, Fence::Kill));
    }

    pub fn topo(&self) -> &NsrTopo {
        &self.topo
    }

    pub fn peer(&self) -> &P {
        &self.peer
    }

    /// The running holdfastd unit.
    pub fn hf(&self) -> &Holdfastd {
        &self.hf
    }

    pub fn watch(&self) -> PeerWatch {
        PeerWatch::start(self.peer.session_probe(&self.lab), service(&self.topo))
    }

    /// `show nsr --json` of the running unit.
    fn nsr(&self) -> serde_json::Value {
        let v = self
            .hf
            .cli_json(&self.lab, &["show", "nsr"])
            .expect("show nsr");
        v.get("ok").and_then(|b| b.get("nsr")).cloned().unwrap_or(v)
    }

    fn wait_protected(&self, what: &str) {
        wait_ok(&format!("{what}: holdfastd PROTECTED"), T, || {
            let n = self.nsr();
            (n["protected"] == true).then_some(()).ok_or(n.to_string())
        })
        .expect("protected");
    }

    fn other_host(&self) -> HostId {
        if self.hf.host == self.topo.a.id {
            self.topo.b.id
        } else {
            self.topo.a.id
        }
    }

    pub fn peer_ip(&self) -> IpAddr {
        IpAddr::V4(self.topo.peer.v4)
    }

    /// What the outbound feed (a BGP speaker holdfastd exports to) has
    /// received, every message counted.
    pub fn feed_out_view<R>(&self, f: impl FnOnce(&holdfast_tester::View) -> R) -> R {
        self.feed_out.view(f)
    }

    /// The peer announces `prefix` to us.
    pub fn peer_announces(&mut self, prefix: &str) {
        self.peer
            .announce(&self.lab, &[RouteSpec::new(prefix)])
            .expect("the peer announces");
    }

    /// Routes the peer holds from us, by the peer's own count, read with the
    /// watch's light query
    /// (gobgpd's per-neighbour query walks its whole RIB in its server loop).
    fn held_from_us(&self) -> u32 {
        (self.peer.session_probe(&self.lab))()
            .ok()
            .and_then(|v| v.into_iter().find(|s| s.neighbor == service(&self.topo)))
            .and_then(|s| s.prefixes_received)
            .unwrap_or(0)
    }

    /// From now on the units add and announce the service address
    /// themselves (`[nsr] manage_address = true` in the configuration): a
    /// takeover only removes it from the old host and waits for it.
    pub fn units_add_the_address(&mut self) {
        self.orch.unit_adds_address = true;
    }

    /// Takes over onto the other host with the given fence.
    pub fn takeover(&mut self, what: &str, fence: Fence) -> Holdfastd {
        let to = self.other_host();
        self.takeover_to(what, to, fence)
    }

    /// Takes over onto the primary's own host (its process died: restart
    /// in place, in the same network namespace) with the given fence.
    pub fn takeover_in_place(&mut self, what: &str, fence: Fence) -> Holdfastd {
        let to = self.hf.host;
        self.takeover_to(what, to, fence)
    }

    /// Starts another holdfastd (`name`) beside the primary, in its network
    /// namespace, with this run's configuration edited by `edit`; as a
    /// takeover when `takeover`. The start's result, as `Holdfastd::start_with`
    /// reports it (a process that exits before its control socket answers is
    /// an error carrying its log's tail).
    pub fn start_beside(
        &mut self,
        name: &str,
        edit: impl Fn(&str) -> String,
        takeover: bool,
    ) -> Result<Holdfastd, holdfast_lab::LabError> {
        let config = edit(&self.config);
        let mut opts = if takeover {
            holdfast_lab::StartOpts::takeover(self.lab.work_dir().join(name).join("takeover.ready"))
        } else {
            holdfast_lab::StartOpts::default()
        };
        // The error a refused start ends with, not a backtrace, is what
        // the log's tail in the start error shows.
        opts.env
            .push(("RUST_BACKTRACE".to_string(), "0".to_string()));
        Holdfastd::start_with(&mut self.lab, self.hf.host, name, &config, &opts)
    }

    /// The Holdfast iptables/ip6tables rules in the primary's network
    /// namespace (`-S` lines carrying a `holdfast:` comment).
    pub fn holdfast_rules(&self) -> Vec<String> {
        let mut out = Vec::new();
        for cmd in ["iptables", "ip6tables"] {
            let text = self
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

    /// The store's epoch of the run's instance (`GET`).
    pub fn store_epoch(&self) -> u64 {
        self.redis
            .cli(&self.lab, &["GET", &format!("hf:{{{INSTANCE}}}:epoch")])
            .expect("redis GET epoch")
            .trim()
            .parse()
            .unwrap_or(0)
    }

    /// The state store's address (`redis-server` in the lab).
    pub fn store_addr(&self) -> SocketAddr {
        SocketAddr::new(self.redis.addr(), self.redis.port())
    }

    /// A network namespace from which the store is reachable (the feed
    /// host's), for a test's own connection to it.
    pub fn client_netns(&self) -> String {
        self.lab.netns(self.topo.feed.id).to_string()
    }

    /// The service address (the session's local address on our side).
    pub fn service_ip(&self) -> IpAddr {
        service(&self.topo)
    }

    /// The store key prefix of a session with the peer, `hf:{INSTANCE}:s:default/PEER:`.
    pub fn peer_session_key(&self, suffix: &str) -> String {
        format!("hf:{{{INSTANCE}}}:s:default/{}:{suffix}", self.peer_ip())
    }

    /// `show nsr --json` of the running unit (public for scenarios).
    pub fn nsr_status(&self) -> serde_json::Value {
        self.nsr()
    }

    fn takeover_to(&mut self, what: &str, to: HostId, fence: Fence) -> Holdfastd {
        let name = format!("hf{}", self.units);
        self.units += 1;
        let t0 = Instant::now();
        let (new, times) = self
            .orch
            .takeover(&mut self.lab, &self.hf, to, &name, &self.config, fence)
            .unwrap_or_else(|e| panic!("{what}: takeover failed: {e}"));
        let old = std::mem::replace(&mut self.hf, new);
        let nsr = self.nsr();
        println!(
            "{what}: took over on {} in {:?}: {times:?}\n  holdfastd: {}",
            self.lab.host_info(to).name,
            t0.elapsed(),
            nsr["takeover"]
        );
        self.phases
            .push((what.to_string(), times, nsr["takeover"].clone()));
        old
    }

    /// Starts a preheated standby (`holdfastd --standby`) of the running unit
    /// on the other host, and waits until it follows every stored session.
    pub fn start_standby(&mut self) -> Holdfastd {
        let name = format!("hf{}", self.units);
        self.units += 1;
        let to = self.other_host();
        let opts = holdfast_lab::StartOpts {
            standby: true,
            ..holdfast_lab::StartOpts::default()
        };
        let sb = Holdfastd::start_with(&mut self.lab, to, &name, &self.config, &opts)
            .expect("holdfastd --standby");
        self.wait_standby_caught_up(&sb, 2);
        sb
    }

    /// `show nsr` of a standby: its `standby` object.
    pub fn standby_status(&self, sb: &Holdfastd) -> serde_json::Value {
        let v = sb.cli_json(&self.lab, &["show", "nsr"]).expect("show nsr");
        let v = v.get("ok").and_then(|b| b.get("nsr")).cloned().unwrap_or(v);
        assert_eq!(v["role"], "standby", "not a standby: {v}");
        v["standby"].clone()
    }

    /// Waits until the standby follows `sessions` sessions and its last poll
    /// found nothing new.
    pub fn wait_standby_caught_up(&self, sb: &Holdfastd, sessions: u64) -> serde_json::Value {
        wait_ok("the standby follows the store and caught up", T, || {
            let s = self.standby_status(sb);
            (s["sessions"].as_u64() == Some(sessions)
                && s["caught_up"] == true
                && s["prepared"] == true)
                .then_some(s.clone())
                .ok_or(s.to_string())
        })
        .unwrap_or_else(|e| panic!("{e}"))
    }

    /// SIGKILLs the primary and has the standby `sb` take over (`holdfast nsr
    /// takeover`, the address moved by the lab orchestrator). Returns the old unit
    /// and holdfastd's takeover figures.
    pub fn standby_takeover(
        &mut self,
        what: &str,
        sb: Holdfastd,
    ) -> (Holdfastd, serde_json::Value) {
        let t0 = Instant::now();
        let (new, times) = self
            .orch
            .takeover_standby(&mut self.lab, &self.hf, sb, Fence::Kill)
            .unwrap_or_else(|e| panic!("{what}: standby takeover failed: {e}"));
        let old = std::mem::replace(&mut self.hf, new);
        let nsr = wait_ok(&format!("{what}: tables rebuilt"), T, || {
            let n = self.nsr();
            (n["takeover"]["tables_us"].as_u64().unwrap_or(0) > 0)
                .then_some(n.clone())
                .ok_or(n.to_string())
        })
        .unwrap_or_else(|e| panic!("{e}"));
        println!(
            "{what}: the standby took over in {:?}: {times:?}\n  holdfastd: {}",
            t0.elapsed(),
            nsr["takeover"]
        );
        self.phases
            .push((what.to_string(), times, nsr["takeover"].clone()));
        (old, nsr["takeover"].clone())
    }

    /// Sends `n` routes from the outbound feed (through holdfastd to the peer) and
    /// waits until the peer holds them all.
    pub fn outbound_routes(&mut self, what: &str, n: usize) {
        let before = self.held_from_us();
        let mut w = generate(Kind::Packed, n, FEED_OUT_AS, self.topo.feed.v4);
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
        let (peer_ip, svc) = (self.peer_ip(), service(&self.topo));
        // Every route the peer advertises to us is in our Adj-RIB-In, and
        // nothing else is.
        wait_ok(
            &format!("{what}: Adj-RIB-In = what the peer sent"),
            T,
            || {
                let sent = prefixes(
                    self.peer
                        .advertised_routes(&self.lab, svc)
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
            .announce(&self.lab, &[RouteSpec::new(&from_peer)])
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
            .announce(&one_hop(FEED_OUT_AS, self.topo.feed.v4), &[to_peer])
            .expect("feed announces");
        wait_ok(&format!("{what}: a new route reaches the peer"), T, || {
            let n = self.held_from_us();
            (n > before).then_some(()).ok_or(format!("peer holds {n}"))
        })
        .unwrap_or_else(|e| panic!("{e}"));
        println!("{what}: checks passed");
    }

    /// Streams `burst()` routes from a feed; kills the primary once
    /// `progress()` reaches a tenth of them, and takes over.
    fn burst_and_kill(&mut self, what: &str, inbound: bool, progress: impl Fn(&Self) -> u64) {
        self.burst_and(what, inbound, progress, |r| {
            drop(r.takeover(what, Fence::Kill));
        });
    }

    /// Streams a 100k inbound burst; once a tenth is through, SIGSTOPs the
    /// store for `d`, then SIGCONT. Returns how long after the store's
    /// return the primary was PROTECTED again.
    pub fn store_stall(&mut self, d: Duration) -> Duration {
        let peer_ip = self.peer_ip();
        let what = format!("store stalled {d:?} during a 100k inbound burst");
        let mut back = Duration::ZERO;
        self.burst_and(
            &what,
            true,
            move |r| {
                r.hf.neighbor(peer_ip)
                    .ok()
                    .flatten()
                    .map_or(0, |n| n.prefixes_received)
            },
            |r| {
                let redis = r.redis.proc();
                r.lab.kill(redis, Signal::Stop);
                std::thread::sleep(d);
                r.lab.kill(redis, Signal::Cont);
                let t = std::time::Instant::now();
                r.wait_protected(&format!("{what}: the store back"));
                back = t.elapsed();
            },
        );
        println!("{what}: PROTECTED again {back:?} after the store's return");
        self.check(&what);
        back
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
        let mut w = generate(Kind::Packed, n, asn, self.topo.feed.v4);
        // Outbound routes apart from inbound ones; each inbound burst after
        // the first apart from the earlier ones (the same routes again
        // would change nothing the peer passes on).
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
                let p = progress(self) - start;
                Ok((p >= n as u64 / 10).then_some(p))
            },
        )
        .unwrap_or_else(|e| panic!("{e}"));
        println!("{what}: {at} of {n} through");
        act(self);
        sender.join().expect("sender").expect("burst sent");
    }

    pub fn idle_kill(&mut self) {
        drop(self.takeover("idle SIGKILL", Fence::Kill));
        self.check("idle SIGKILL");
    }

    pub fn inbound_burst(&mut self) {
        let peer_ip = self.peer_ip();
        self.burst_and_kill("SIGKILL during a 100k inbound burst", true, move |r| {
            r.hf.neighbor(peer_ip)
                .ok()
                .flatten()
                .map_or(0, |n| n.prefixes_received)
        });
        self.check("SIGKILL during a 100k inbound burst");
    }

    pub fn outbound_burst(&mut self) {
        self.burst_and_kill("SIGKILL during a 100k outbound burst", false, |r| {
            u64::from(r.held_from_us())
        });
        self.check("SIGKILL during a 100k outbound burst");
    }

    pub fn switchover(&mut self) {
        let out = self
            .hf
            .cli(&self.lab, &["nsr", "switchover", "--timeout", "60"])
            .expect("holdfast nsr switchover");
        println!("switchover: {}", out.trim());
        let old = self.takeover("planned switchover", Fence::None);
        wait_ok("switchover: the old process exits", T, || {
            (!old.is_alive())
                .then_some(())
                .ok_or("still running".to_string())
        })
        .unwrap_or_else(|e| panic!("{e}"));
        self.check("planned switchover");
    }

    pub fn frozen_primary(&mut self) {
        let old = self.takeover("frozen primary (SIGSTOP)", Fence::Stop);
        self.lab.kill(old.proc, Signal::Cont);
        wait_ok("thawed primary exits fenced", T, || {
            (!old.is_alive())
                .then_some(())
                .ok_or("still running".to_string())
        })
        .unwrap_or_else(|e| panic!("{e}"));
        let log = old.log_text(&self.lab);
        assert!(
            log.contains("FENCED"),
            "the thawed primary did not report itself fenced:\n{}",
            log.lines().rev().take(20).collect::<Vec<_>>().join("\n")
        );
        self.check("frozen primary (SIGSTOP)");
    }

    /// Kills the store (it comes back empty: no persistence) and waits
    /// until the primary says it is unprotected.
    pub fn store_down(&mut self) {
        self.redis.kill(&mut self.lab).expect("kill redis");
        wait_ok("store down: UNPROTECTED", T, || {
            let n = self.nsr();
            (n["protected"] == false).then_some(()).ok_or(n.to_string())
        })
        .unwrap_or_else(|e| panic!("{e}"));
    }

    /// Restarts the store killed by [`Run::store_down`] and waits until
    /// the primary is protected again (re-claimed, re-synchronised).
    pub fn store_back(&mut self) {
        self.redis.restart(&mut self.lab).expect("restart redis");
        self.wait_protected("redis back");
    }

    pub fn redis_outage(&mut self) {
        self.store_down();
        // Sessions stay up and routes flow while unprotected.
        self.check("redis down");
        // What holdfastd sends the outbound feed from here is not
        // acknowledged (its host drops our segments), so the sessions are
        // written anew with a send tail the peer has not acknowledged: the
        // takeover must restore it (else the feed's stream has a gap).
        self.drop_to_feed(true);
        let prefix = "198.51.100.250/32";
        self.peer_announces(prefix);
        let feed_ip = IpAddr::V4(self.topo.feed.v4);
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
        self.redis.restart(&mut self.lab).expect("restart redis");
        self.wait_protected("redis back");
        drop(self.takeover("takeover after the store came back", Fence::Kill));
        self.drop_to_feed(false);
        let p: Prefix = prefix.parse().expect("prefix");
        wait_ok(
            "takeover after the store came back: the feed gets the route sent unacknowledged",
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
        self.check("takeover after the store came back");
    }

    /// Drops (or stops dropping) on the feed's host every segment from the
    /// service address's BGP port.
    fn drop_to_feed(&self, on: bool) {
        let svc = service(&self.topo).to_string();
        let op = if on { "-I" } else { "-D" };
        self.lab
            .exec_ok(
                self.topo.feed.id,
                &[
                    "iptables", op, "INPUT", "-p", "tcp", "-s", &svc, "--sport", "179", "-j",
                    "DROP",
                ],
            )
            .expect("iptables on the feed host");
    }

    pub fn print_phases(&self) {
        println!("takeover phases (lab orchestrator wall clock; holdfastd's own figures in µs):");
        for (what, t, hf) in &self.phases {
            println!(
                "  {what:<45} fence {:>6.1} ms  ready {:>6.1} ms  address {:>6.1} ms  established {:>6.1} ms  total {:>7.1} ms | holdfastd: load {} us, tcp restore {} us (max {} us), resumed {} us, tables {} us",
                t.fence.as_secs_f64() * 1e3,
                t.ready.as_secs_f64() * 1e3,
                t.address.as_secs_f64() * 1e3,
                t.established.as_secs_f64() * 1e3,
                t.total.as_secs_f64() * 1e3,
                hf["load_us"], hf["tcp_restore_us"], hf["tcp_restore_max_us"], hf["resumed_us"], hf["tables_us"]
            );
        }
    }
}

/// The whole sequence for one kind of peer, through the control plane
/// (`nsr_plane`).
pub fn failover_sequence<P: Peer>(name: &str, kind: PeerKind, o: Options) {
    crate::nsr_plane::failover_sequence::<P>(name, kind, o);
}

/// The whole sequence with the lab orchestrator.
pub fn failover_sequence_lab<P: Peer>(name: &str, kind: PeerKind, o: Options) {
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

/// Stops the peer's watch: it saw no interruption and no route it held
/// from us withdrawn (`what`: the stretch it watched, for the messages).
pub fn stop_watch(watch: PeerWatch, what: &str) {
    let report = watch.stop();
    println!("{what}: peer watch: {}", report.summary());
    report
        .assert_uninterrupted()
        .unwrap_or_else(|e| panic!("{what}: the peer saw an interruption: {e}"));
    assert!(
        report.prefixes_received_drops.is_empty(),
        "{what}: routes the peer held from us were withdrawn: {:?}",
        report.prefixes_received_drops
    );
}

impl<P: Peer> Run<P> {
    /// The end of a run: the peer's watch saw no interruption and no route
    /// it held from us withdrawn, nothing leaked a FIN or RST since `since`;
    /// then the takeover phases are printed.
    pub fn finish(&self, watch: PeerWatch, since: std::time::SystemTime) {
        stop_watch(watch, "the run");
        self.assert_nothing_leaked(since);
        self.print_phases();
    }

    /// No FIN or RST from the service address ever reached the wire: dying
    /// primaries leaked nothing (TCPR's "Romeo and Juliet" RST, the
    /// spurious FIN), and no orphan socket was destroyed in the open.
    pub fn assert_nothing_leaked(&self, since: std::time::SystemTime) {
        assert_no_fin_rst(&self.lab, self.topo.service_v4, &[], since);
    }
}

/// No FIN or RST from `service` to any of `to` (the hosts of the BGP
/// sessions under test; empty: to anyone) in the lab's captures since
/// `since`: dying primaries leaked nothing (TCPR's "Romeo and Juliet" RST,
/// the spurious FIN), and no orphan socket was destroyed in the open.
pub fn assert_no_fin_rst(
    lab: &Lab,
    service: Ipv4Addr,
    to: &[Ipv4Addr],
    since: std::time::SystemTime,
) {
    let since = since
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0);
    let mut filter = format!(
        "tcp and src host {service} and (tcp[tcpflags] & (tcp-rst|tcp-fin) != 0)"
    );
    if !to.is_empty() {
        let hosts: Vec<String> = to.iter().map(|h| format!("dst host {h}")).collect();
        filter.push_str(&format!(" and ({})", hosts.join(" or ")));
    }
    for pcap in lab.pcaps() {
        let out = std::process::Command::new("tcpdump")
            .args(["-nn", "-tt", "-r"])
            .arg(pcap)
            .arg(&filter)
            .output()
            .expect("tcpdump -r");
        // From the first failure on (the sessions' own set-up may close
        // a colliding connection on purpose).
        let text: String = String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter(|l| {
                l.split_whitespace()
                    .next()
                    .and_then(|t| t.parse::<f64>().ok())
                    .is_some_and(|t| t >= since)
            })
            .map(|l| format!("{l}\n"))
            .collect();
        assert!(
            text.trim().is_empty(),
            "FIN/RST from the service address in {}:\n{text}",
            pcap.display()
        );
    }
}
