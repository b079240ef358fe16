//! What the non-stop-routing scenarios share: the options of the unit
//! under test ([`Options`]: TCP-MD5, BFD and its authentication, compact
//! bytes, the import policy, stalls), the ASes of the peer and of the raw
//! test peers on the feed host, the feed's connection and bursts, the
//! checks of a run's end ([`stop_watch`], [`assert_no_fin_rst`]), and a
//! running unit's handle ([`Unit`]: its control socket, pid, log). The lab
//! they run in, and every takeover, is `nsr_plane` (support/nsr_plane.rs):
//! the lab's control plane, whose controller and agents take the unit over
//! as in production; [`failover_sequence`] is its whole failover sequence.
#![allow(dead_code)]

use holdfast_api::{Body, NeighborInfo, Request, RibEntry, RibTable};
use holdfast_lab::{
    control_request, find_binary, parse_err, wait_ok, ControlSocket, HostId, Lab, NsrTopo, Peer,
    PeerKind, PeerWatch,
};
use holdfast_tester::{netns::in_netns, Config as TesterConfig, Peer as Tester};
use holdfast_wire::{AsPath, AsSegment, Family, Origin, PathAttrs};
use std::collections::BTreeSet;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

pub const HF_AS: u32 = 65000;
pub const PEER_AS: u32 = 65001;
pub const FEED_IN_AS: u32 = 65100;
pub const FEED_OUT_AS: u32 = 65200;
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
    /// The unit is stopped for seconds on purpose (a stall, not a failure):
    /// the plane's agents run without hang detection (`--hang-ms 0`).
    pub stalls: bool,
    /// The store on a Redis Cluster (`redis+cluster://`, issue 29).
    pub redis_cluster: bool,
}

/// BFD authentication of [`Options::bfd_auth`].
#[derive(Debug, Clone, Copy)]
pub struct BfdAuth {
    pub bird: &'static str,
    pub holdfastd: &'static str,
    pub key_id: u8,
    pub password: &'static str,
}

pub(crate) fn tester(asn: u32, id: u8) -> TesterConfig {
    let mut c = TesterConfig::new(asn, Ipv4Addr::new(192, 0, 2, 100 + id));
    c.families = vec![Family::IPV4_UNICAST];
    c
}

/// Connects a raw test peer from the feed host, retrying until accepted.
pub(crate) fn connect_feed(
    lab: &Lab,
    topo: &NsrTopo,
    to: IpAddr,
    cfg: TesterConfig,
) -> Arc<Tester> {
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

/// The whole sequence for one kind of peer, through the control plane
/// (`nsr_plane`).
pub fn failover_sequence<P: Peer>(name: &str, kind: PeerKind, o: Options) {
    crate::nsr_plane::failover_sequence::<P>(name, kind, o);
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
    let mut filter =
        format!("tcp and src host {service} and (tcp[tcpflags] & (tcp-rst|tcp-fin) != 0)");
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

/// The running unit as its agent started it: its control socket, pid and log.
#[derive(Debug, Clone)]
pub struct Unit {
    /// The plane host whose agent runs it.
    pub host_name: String,
    /// Its container (the lab host whose namespace it runs in).
    pub host: HostId,
    pub pid: u64,
    pub socket: PathBuf,
    pub log: PathBuf,
}

impl Unit {
    pub fn request(&self, req: &Request) -> holdfast_lab::Result<Body> {
        control_request(&self.socket, req)
    }

    pub fn neighbors(&self) -> holdfast_lab::Result<Vec<NeighborInfo>> {
        ControlSocket(self.socket.clone()).neighbors()
    }

    pub fn neighbor(&self, addr: IpAddr) -> holdfast_lab::Result<Option<NeighborInfo>> {
        let a = addr.to_string();
        Ok(self.neighbors()?.into_iter().find(|n| n.address == a))
    }

    /// Routes of a table; `peer` is required for `In`/`Out`.
    pub fn rib(
        &self,
        table: RibTable,
        peer: Option<IpAddr>,
    ) -> holdfast_lab::Result<Vec<RibEntry>> {
        let req = Request::ShowRib {
            instance: None,
            prefix: None,
            peer: peer.map(|p| p.to_string()),
            table,
            limit: None,
        };
        match self.request(&req)? {
            Body::Rib(r) => Ok(r),
            other => Err(parse_err(
                "holdfastd control answer",
                format!("unexpected {other:?}"),
            )),
        }
    }

    /// `holdfast --socket SOCK ARGS...` in the unit's container.
    pub fn cli(&self, lab: &Lab, args: &[&str]) -> holdfast_lab::Result<String> {
        let bin = find_binary("holdfast", "HOLDFAST_BIN")?;
        let (bin, sock) = (
            bin.to_string_lossy().into_owned(),
            self.socket.to_string_lossy().into_owned(),
        );
        let mut cmd = vec![bin.as_str(), "--socket", sock.as_str()];
        cmd.extend_from_slice(args);
        lab.exec_ok(self.host, &cmd)
    }

    /// [`Unit::cli`] with `--json`, parsed.
    pub fn cli_json(&self, lab: &Lab, args: &[&str]) -> holdfast_lab::Result<serde_json::Value> {
        let mut a = args.to_vec();
        a.push("--json");
        let out = self.cli(lab, &a)?;
        serde_json::from_str(&out)
            .map_err(|e| parse_err(format!("holdfast {}", a.join(" ")), format!("{e}: {out}")))
    }

    /// `show nsr --json`'s `nsr` object.
    pub fn nsr(&self, lab: &Lab) -> Result<serde_json::Value, String> {
        let v = self
            .cli_json(lab, &["show", "nsr"])
            .map_err(|e| e.to_string())?;
        Ok(v.get("ok").and_then(|b| b.get("nsr")).cloned().unwrap_or(v))
    }

    /// Whether its process still exists (a SIGSTOPped one does).
    pub fn is_alive(&self) -> bool {
        std::fs::read_to_string(format!("/proc/{}/stat", self.pid))
            .map(|s| !s.contains(") Z "))
            .unwrap_or(false)
    }

    /// Its log, as its agent keeps it (the file is the unit's on that host).
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    pub fn wait_established(&self, addr: IpAddr, within: Duration) -> NeighborInfo {
        wait_ok(
            &format!(
                "the unit on {}: session with {addr} Established",
                self.host_name
            ),
            within,
            || match self.neighbor(addr) {
                Ok(Some(n)) if n.state == "Established" => Ok(n),
                Ok(n) => Err(format!("{n:?}")),
                Err(e) => Err(e.to_string()),
            },
        )
        .unwrap_or_else(|e| panic!("{e}"))
    }
}

/// `holdfast ... --json` against a unit, whoever started it (a plane's
/// agent: [`Unit`]; the lab itself: `Holdfastd`).
pub trait CliJson {
    fn cli_json(&self, lab: &Lab, args: &[&str]) -> holdfast_lab::Result<serde_json::Value>;
}

impl CliJson for Unit {
    fn cli_json(&self, lab: &Lab, args: &[&str]) -> holdfast_lab::Result<serde_json::Value> {
        Unit::cli_json(self, lab, args)
    }
}

impl CliJson for holdfast_lab::Holdfastd {
    fn cli_json(&self, lab: &Lab, args: &[&str]) -> holdfast_lab::Result<serde_json::Value> {
        holdfast_lab::Holdfastd::cli_json(self, lab, args)
    }
}
