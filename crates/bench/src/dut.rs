//! The daemons under test: holdfastd (NSR on or off), bird2, frr and gobgpd,
//! started in a lab host with a list of passive eBGP neighbours, optionally
//! originating N consecutive /24s, and read back with their own tools.

use crate::mrt;
use anyhow::{bail, Context, Result};
use holdfast_lab::{
    Bird, Frr, Gobgp, Holdfastd, HostId, Lab, NeighborSpec, Peer, PeerKind, PeerSpec, RouteSpec,
};
use std::fmt::Write as _;
use std::net::{IpAddr, Ipv4Addr};
use std::time::{Duration, Instant};

/// The DUT's AS; the testers' ASes differ (eBGP everywhere).
pub const DUT_AS: u32 = 4_250_000_000;
/// The DUT's BGP identifier.
pub const DUT_ID: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 100);
/// First prefix the DUT originates (Fig. 6(b)): 32.0.0.0/24, 32.0.1.0/24, …
pub const ORIGIN_BASE: Ipv4Addr = Ipv4Addr::new(32, 0, 0, 0);

/// A daemon under test.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Dut {
    /// holdfastd without `[nsr]`.
    Holdfastd,
    /// holdfastd replicating every session to Redis (`[nsr]`).
    HoldfastdNsr,
    /// BIRD 2.
    Bird,
    /// FRR (zebra + bgpd -n).
    Frr,
    /// GoBGP.
    Gobgp,
}

impl Dut {
    /// Parses a `--daemons` entry.
    pub fn parse(s: &str) -> Result<Dut> {
        Ok(match s.trim() {
            "holdfastd" | "holdfast" => Dut::Holdfastd,
            "holdfastd-nsr" | "nsr" => Dut::HoldfastdNsr,
            "bird" | "bird2" => Dut::Bird,
            "frr" | "bgpd" => Dut::Frr,
            "gobgp" | "gobgpd" => Dut::Gobgp,
            o => bail!("unknown daemon {o:?} (holdfastd, holdfastd-nsr, bird, frr, gobgp)"),
        })
    }

    /// Parses a comma-separated `--daemons` list.
    pub fn parse_list(s: &str) -> Result<Vec<Dut>> {
        let mut v: Vec<Dut> = s
            .split(',')
            .filter(|x| !x.trim().is_empty())
            .map(Dut::parse)
            .collect::<Result<_>>()?;
        v.sort();
        v.dedup();
        Ok(v)
    }

    /// The name in tables and plots.
    pub fn name(self) -> &'static str {
        match self {
            Dut::HoldfastdNsr => "holdfastd NSR on",
            Dut::Holdfastd => "holdfastd",
            Dut::Bird => "bird2",
            Dut::Frr => "frr",
            Dut::Gobgp => "gobgpd",
        }
    }

    /// A short name for lab and file names.
    pub fn key(self) -> &'static str {
        match self {
            Dut::HoldfastdNsr => "hfnsr",
            Dut::Holdfastd => "hf",
            Dut::Bird => "bird",
            Dut::Frr => "frr",
            Dut::Gobgp => "gobgp",
        }
    }

    /// holdfastd in either mode.
    pub fn is_holdfast(self) -> bool {
        matches!(self, Dut::Holdfastd | Dut::HoldfastdNsr)
    }

    /// The lab peer kind of the other daemons.
    pub fn peer_kind(self) -> Option<PeerKind> {
        match self {
            Dut::Bird => Some(PeerKind::Bird),
            Dut::Frr => Some(PeerKind::Frr),
            Dut::Gobgp => Some(PeerKind::Gobgp),
            Dut::Holdfastd | Dut::HoldfastdNsr => None,
        }
    }
}

/// One passive neighbour of the DUT.
#[derive(Debug, Clone)]
pub struct Neighbor {
    /// The tester's address.
    pub address: IpAddr,
    /// The tester's AS.
    pub asn: u32,
    /// Whether the DUT exports to it (holdfastd, bird2 and frr; gobgpd
    /// exports all).
    pub export: bool,
}

/// What to start.
#[derive(Debug, Clone, Default)]
pub struct DutConfig {
    /// Passive neighbours.
    pub neighbors: Vec<Neighbor>,
    /// holdfastd `workers` (default: holdfastd's own).
    pub workers: Option<usize>,
    /// Originate this many consecutive /24s from [`ORIGIN_BASE`].
    pub originate: usize,
    /// Next hop of originated routes where the daemon needs one (gobgpd's MRT entries).
    pub next_hop: Option<Ipv4Addr>,
    /// The Redis URL of holdfastd NSR on.
    pub redis: Option<String>,
    /// holdfastd unit name (several units in one lab need distinct names).
    pub unit: String,
    /// Install the routes into this kernel table (holdfastd `[kernel]`,
    /// bird2's `kernel` protocol); None: no FIB.
    pub kernel_table: Option<u32>,
}

/// A started DUT.
pub enum Running {
    /// holdfastd.
    Hf(Holdfastd),
    /// A lab peer (bird2, frr, gobgpd).
    Peer(Box<dyn Peer>),
}

/// The `n`-th originated /24.
pub fn origin_prefix(i: usize) -> Ipv4Addr {
    Ipv4Addr::from(u32::from(ORIGIN_BASE) + ((i as u32) << 8))
}

/// holdfastd's configuration file for `cfg`.
pub fn holdfastd_config(cfg: &DutConfig) -> String {
    let mut c =
        format!("[global]\nasn = {DUT_AS}\nrouter_id = \"{DUT_ID}\"\nlisten = \"0.0.0.0:179\"\n");
    if let Some(w) = cfg.workers {
        let _ = writeln!(c, "workers = {w}");
    }
    if let Some(url) = &cfg.redis {
        let _ = write!(c, "\n[nsr]\nstore = \"{url}\"\ninstance = \"bench\"\n");
    }
    if let Some(t) = cfg.kernel_table {
        let _ = write!(c, "\n[kernel]\ntable = {t}\n");
    }
    if cfg.originate > 0 {
        let _ = write!(
            c,
            "\n[[network]]\nprefix = \"{ORIGIN_BASE}/24\"\ncount = {}\n",
            cfg.originate
        );
    }
    for n in &cfg.neighbors {
        let _ = write!(
            c,
            "\n[[neighbor]]\naddress = \"{}\"\nremote_asn = {}\nimport = \"all\"\nexport = \"{}\"\npassive = true\n",
            n.address,
            n.asn,
            if n.export { "all" } else { "none" }
        );
    }
    c
}

impl Running {
    /// Starts `dut` in `host`. Routes to originate are loaded before this
    /// returns: holdfastd and bird2 from their configuration, frr with
    /// `network` statements through `vtysh -f`, gobgpd with `gobgp mrt inject`.
    pub fn start(lab: &mut Lab, host: HostId, dut: Dut, cfg: &DutConfig) -> Result<Running> {
        if dut.is_holdfast() {
            let mut cfg = cfg.clone();
            if dut == Dut::Holdfastd {
                cfg.redis = None;
            } else if cfg.redis.is_none() {
                bail!("holdfastd NSR on needs a Redis store");
            }
            let name = if cfg.unit.is_empty() {
                "holdfastd".to_string()
            } else {
                cfg.unit.clone()
            };
            return Ok(Running::Hf(Holdfastd::start(
                lab,
                host,
                &name,
                &holdfastd_config(&cfg),
            )?));
        }
        let mut spec = PeerSpec::new(DUT_AS, DUT_ID);
        if let Some(t) = cfg.kernel_table {
            if dut != Dut::Bird {
                bail!("a kernel FIB in the benchmark: holdfastd and bird2 only");
            }
            spec = spec.kernel_table(t);
        }
        for n in &cfg.neighbors {
            let mut ns = NeighborSpec::new(n.address, n.asn).passive();
            // bird2 and frr export nothing where holdfastd would not (feed-only
            // injectors); gobgpd exports all (the lab writes no per-neighbour
            // policy for it).
            if !n.export && dut != Dut::Gobgp {
                ns = ns.no_export();
            }
            spec = spec.neighbor(ns);
        }
        Ok(match dut {
            Dut::Bird => {
                for i in 0..cfg.originate {
                    spec = spec.route(RouteSpec::new(&format!("{}/24", origin_prefix(i))));
                }
                Running::Peer(Box::new(Bird::start(lab, host, &spec)?))
            }
            Dut::Frr => {
                let p = Frr::start(lab, host, &spec)?;
                if cfg.originate > 0 {
                    frr_networks(lab, host, cfg.originate)?;
                }
                Running::Peer(Box::new(p))
            }
            Dut::Gobgp => {
                let p = Gobgp::start(lab, host, &spec)?;
                if cfg.originate > 0 {
                    let file = lab.peer_dir(host, "gobgp")?.join("originate.mrt");
                    let nh = cfg.next_hop.unwrap_or(DUT_ID);
                    mrt::write_table(&file, cfg.originate, nh)?;
                    let f = file.to_string_lossy().into_owned();
                    let out = lab.exec_timeout(
                        host,
                        &["gobgp", "mrt", "inject", "global", &f],
                        Duration::from_secs(600),
                    )?;
                    if !out.status.success() {
                        bail!(
                            "gobgp mrt inject: {}",
                            String::from_utf8_lossy(&out.stderr).trim()
                        );
                    }
                }
                Running::Peer(Box::new(p))
            }
            Dut::Holdfastd | Dut::HoldfastdNsr => unreachable!("handled above"),
        })
    }

    /// The DUT's processes.
    pub fn pids(&self, lab: &Lab) -> Vec<u32> {
        match self {
            Running::Hf(h) => vec![h.pid(lab)],
            Running::Peer(p) => p.pids(lab),
        }
    }

    /// holdfastd's log (empty for the others).
    pub fn hf_log(&self, lab: &Lab) -> Option<String> {
        match self {
            Running::Hf(h) => Some(h.log_text(lab)),
            Running::Peer(_) => None,
        }
    }

    /// holdfastd itself.
    pub fn holdfastd(&self) -> Option<&Holdfastd> {
        match self {
            Running::Hf(h) => Some(h),
            Running::Peer(_) => None,
        }
    }

    /// Stops the DUT.
    pub fn stop(self, lab: &mut Lab) {
        match self {
            Running::Hf(h) => h.stop(lab),
            Running::Peer(mut p) => p.stop(lab),
        }
    }

    /// IPv4 routes in the DUT's own table (best paths or destinations), by its own tool.
    pub fn table_count(&self, lab: &Lab, host: HostId) -> Result<u64> {
        match self {
            Running::Hf(h) => Ok(h.summary()?.loc_rib_routes.values().sum()),
            Running::Peer(p) => match p.kind() {
                PeerKind::Bird => {
                    let sock = lab.peer_dir(host, "bird")?.join("bird.ctl");
                    let s = sock.to_string_lossy().into_owned();
                    let out = lab.exec_ok(host, &["birdc", "-s", &s, "show", "route", "count"])?;
                    // "N of N routes for N networks in table master4"
                    out.lines()
                        .find(|l| l.contains("routes for"))
                        .and_then(|l| l.split_whitespace().next())
                        .and_then(|n| n.parse().ok())
                        .with_context(|| format!("birdc show route count: {out}"))
                }
                PeerKind::Frr => {
                    let dir = lab.peer_dir(host, "frr")?;
                    let d = dir.to_string_lossy().into_owned();
                    let out = lab.exec_ok(
                        host,
                        &[
                            "vtysh",
                            "--vty_socket",
                            &d,
                            "-d",
                            "bgpd",
                            "-c",
                            "show bgp ipv4 unicast summary json",
                        ],
                    )?;
                    let v: serde_json::Value =
                        serde_json::from_str(&out).context("frr summary json")?;
                    Ok(v["ipv4Unicast"]["ribCount"]
                        .as_u64()
                        .or_else(|| v["ribCount"].as_u64())
                        .unwrap_or(0))
                }
                PeerKind::Gobgp => {
                    let out =
                        lab.exec_ok(host, &["gobgp", "global", "rib", "summary", "-a", "ipv4"])?;
                    // "Table ipv4-unicast\nDestination: N, Path: N"
                    out.split("Destination:")
                        .nth(1)
                        .and_then(|r| r.split(',').next())
                        .and_then(|n| n.trim().parse().ok())
                        .with_context(|| format!("gobgp global rib summary: {out}"))
                }
                PeerKind::Exabgp => bail!("not a DUT"),
            },
        }
    }

    /// Waits (bounded) until the DUT's own table holds at least `n` routes.
    pub fn wait_table(&self, lab: &Lab, host: HostId, n: usize, limit: Duration) -> Result<()> {
        let deadline = Instant::now() + limit;
        let mut last = 0;
        while Instant::now() < deadline {
            match self.table_count(lab, host) {
                Ok(c) if c as usize >= n => return Ok(()),
                Ok(c) => last = c,
                Err(_) => {}
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        bail!("timeout: the DUT's own table holds {last} of {n} routes after {limit:?}")
    }

    /// Sessions the DUT itself reports Established (holdfastd's `show
    /// summary`, the others' own CLI).
    pub fn established(&self, lab: &Lab) -> Result<usize> {
        Ok(match self {
            Running::Hf(h) => h.summary()?.neighbors_established,
            Running::Peer(p) => p
                .sessions(lab)?
                .iter()
                .filter(|s| s.state == holdfast_lab::SessionState::Established)
                .count(),
        })
    }

    /// Waits (bounded) until holdfastd NSR on reports itself PROTECTED with
    /// every session replicated and no replication lag (call it for
    /// [`Dut::HoldfastdNsr`] only).
    pub fn wait_protected(&self, lab: &Lab, limit: Duration) -> Result<()> {
        let Running::Hf(h) = self else {
            return Ok(());
        };
        let deadline = Instant::now() + limit;
        let mut last = serde_json::Value::Null;
        while Instant::now() < deadline {
            let v = h.cli_json(lab, &["show", "nsr"])?;
            let v = v.get("ok").and_then(|b| b.get("nsr")).cloned().unwrap_or(v);
            let sessions = v["sessions"].as_array().cloned().unwrap_or_default();
            if v["protected"] == true
                && !sessions.is_empty()
                && sessions
                    .iter()
                    .all(|s| s["protected"] == true && s["lag_ops"] == 0)
            {
                return Ok(());
            }
            last = v;
            std::thread::sleep(Duration::from_millis(50));
        }
        bail!("holdfastd NSR on did not become PROTECTED within {limit:?}: {last}")
    }
}

/// Loads `n` `network` statements into frr's bgpd with `vtysh -f`.
fn frr_networks(lab: &Lab, host: HostId, n: usize) -> Result<()> {
    let dir = lab.peer_dir(host, "frr")?;
    let file = dir.join("networks.conf");
    let mut s = String::with_capacity(n * 28 + 64);
    let _ = writeln!(s, "router bgp {DUT_AS}\n address-family ipv4 unicast");
    for i in 0..n {
        let _ = writeln!(s, "  network {}/24", origin_prefix(i));
    }
    s.push_str(" exit-address-family\n");
    std::fs::write(&file, s).with_context(|| format!("writing {}", file.display()))?;
    let d = dir.to_string_lossy().into_owned();
    let f = file.to_string_lossy().into_owned();
    let out = lab.exec_timeout(
        host,
        &["vtysh", "--vty_socket", &d, "-d", "bgpd", "-f", &f],
        Duration::from_secs(600),
    )?;
    if !out.status.success() {
        bail!(
            "vtysh -f networks: {}{}",
            String::from_utf8_lossy(&out.stdout).trim(),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}
