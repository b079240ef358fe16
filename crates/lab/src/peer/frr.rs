//! FRR 8.4: `zebra` + `bgpd -n` (no FIB install) per host, all sockets, pid files and logs
//! in the peer's work dir (`--vty_socket`, `-z`, `-i`), run as the `frr` user so the
//! `frrvty` group check passes; queried with `vtysh --vty_socket DIR -d bgpd`.
//! Neighbours start administratively shut down and are enabled once bgpd has registered
//! with zebra: a connection accepted before bgpd knows the interfaces is reset with a
//! NOTIFICATION ("nexthop_set failed").

use std::collections::HashMap;
use std::fmt::Write as _;
use std::net::IpAddr;
use std::path::PathBuf;
use std::time::Duration;

use serde_json::Value;

use super::{
    normalize_prefix, parse_community, parse_large_community, BfdView, NeighborSpec, Peer,
    PeerKind, PeerSpec, RouteSpec, RouteView, SessionProbe, SessionView,
};
use crate::cmd::{argv, ns_exec_ok, run_ok, DEFAULT_CMD_TIMEOUT};
use crate::error::{io_ctx, parse_err, LabError, Result};
use crate::lab::{HostId, Lab, ProcId};
use crate::wait::wait_for;

const ZEBRA: &str = "/usr/lib/frr/zebra";
const BGPD: &str = "/usr/lib/frr/bgpd";
const BFDD: &str = "/usr/lib/frr/bfdd";
/// How long [`Frr::bfd_once_established`] waits for the sessions.
const BFD_AFTER_ESTABLISHED: Duration = Duration::from_secs(300);

/// An FRR instance (zebra + bgpd).
#[derive(Debug)]
pub struct Frr {
    host: HostId,
    vty: Vty,
    procs: Vec<ProcId>,
    spec: PeerSpec,
}

/// How to reach the daemons' vty sockets: what `vtysh` needs, nothing from the lab, so
/// a [`SessionProbe`] can carry it to another thread.
#[derive(Debug, Clone)]
struct Vty {
    netns: String,
    dir: PathBuf,
}

impl Vty {
    fn run(&self, daemon: &str, cmds: &[String]) -> Result<String> {
        let sock = self.dir.to_string_lossy().into_owned();
        let mut cmd: Vec<&str> = vec!["vtysh", "--vty_socket", &sock, "-d", daemon];
        for c in cmds {
            cmd.push("-c");
            cmd.push(c);
        }
        let out = ns_exec_ok(&self.netns, &cmd)?;
        if let Some(bad) = out.lines().find(|l| l.starts_with('%')) {
            return Err(LabError::CommandFailed {
                command: format!("vtysh {}", cmds.join(" ; ")),
                status: "error".into(),
                output: bad.to_string(),
            });
        }
        Ok(out)
    }

    fn json(&self, cmd: &str) -> Result<Value> {
        let out = self.run("bgpd", &[cmd.to_string()])?;
        serde_json::from_str(&out).map_err(|e| parse_err(format!("vtysh `{cmd}`"), e.to_string()))
    }

    /// Every configured session, from `show bgp neighbors json`.
    fn sessions(&self, neighbors: &[NeighborSpec]) -> Result<Vec<SessionView>> {
        let v = self.json("show bgp neighbors json")?;
        Ok(neighbors
            .iter()
            .map(|n| session_view(n.address, v.get(n.address.to_string())))
            .collect())
    }
}

/// One neighbour of `show bgp neighbors json` (`None`: not listed, i.e. Idle).
fn session_view(address: IpAddr, j: Option<&Value>) -> SessionView {
    let Some(j) = j else {
        return SessionView::new(address, "Idle");
    };
    let num = |k: &str| j.get(k).and_then(Value::as_u64);
    let state = j
        .get("bgpState")
        .and_then(Value::as_str)
        .unwrap_or("Unknown");
    let mut s = SessionView::new(address, state);
    s.remote_as = num("remoteAs").and_then(|x| u32::try_from(x).ok());
    if s.is_established() {
        s.uptime_secs = num("bgpTimerUpMsec").map(|ms| ms / 1000);
        // FRR 8.4 uses `gracefulRestart` for "advertisedAndReceived" and
        // `gracefulRestartCapability` for "advertised" / "received".
        let caps = j.get("neighborCapabilities");
        s.peer_graceful_restart = Some(
            ["gracefulRestart", "gracefulRestartCapability"]
                .iter()
                .filter_map(|k| caps.and_then(|c| c.get(*k)).and_then(Value::as_str))
                .any(|c| c.to_ascii_lowercase().contains("received")),
        );
    }
    s.established_count = num("connectionsEstablished").and_then(|x| u32::try_from(x).ok());
    s.dropped_count = num("connectionsDropped").and_then(|x| u32::try_from(x).ok());
    if let Some(afs) = j.get("addressFamilyInfo").and_then(Value::as_object) {
        let sum = |k: &str| -> u32 {
            afs.values()
                .filter_map(|a| a.get(k).and_then(Value::as_u64))
                .map(|x| u32::try_from(x).unwrap_or(u32::MAX))
                .sum()
        };
        s.prefixes_received = Some(sum("acceptedPrefixCounter"));
        s.prefixes_sent = Some(sum("sentPrefixCounter"));
    }
    s
}

fn rmap_name(prefix: &str) -> String {
    format!("HF-RM-{}", prefix.replace(['/', ':', '.'], "_"))
}

fn afi(prefix_is_v6: bool) -> &'static str {
    if prefix_is_v6 {
        "ipv6"
    } else {
        "ipv4"
    }
}

/// Route-map lines (`set ...`) originating a route with its attributes.
fn rmap_sets(r: &RouteSpec) -> Vec<String> {
    let mut v = Vec::new();
    if let Some(m) = r.med {
        v.push(format!("set metric {m}"));
    }
    if !r.communities.is_empty() {
        let c: Vec<String> = r
            .communities
            .iter()
            .map(|(a, b)| format!("{a}:{b}"))
            .collect();
        v.push(format!("set community {}", c.join(" ")));
    }
    if !r.large_communities.is_empty() {
        let c: Vec<String> = r
            .large_communities
            .iter()
            .map(|(a, b, c)| format!("{a}:{b}:{c}"))
            .collect();
        v.push(format!("set large-community {}", c.join(" ")));
    }
    if !r.as_path.is_empty() {
        let p: Vec<String> = r.as_path.iter().map(u32::to_string).collect();
        v.push(format!("set as-path prepend {}", p.join(" ")));
    }
    match r.next_hop {
        Some(IpAddr::V4(nh)) => v.push(format!("set ip next-hop {nh}")),
        Some(IpAddr::V6(nh)) => v.push(format!("set ipv6 next-hop global {nh}")),
        None => {}
    }
    v
}

fn neighbor_lines(n: &NeighborSpec) -> Vec<String> {
    let a = n.address;
    let mut v = vec![
        format!("neighbor {a} remote-as {}", n.remote_as),
        format!("neighbor {a} timers connect 1"),
        format!("neighbor {a} advertisement-interval 0"),
    ];
    if let (Some(h), Some(k)) = (n.hold_time, n.keepalive()) {
        v.push(format!("neighbor {a} timers {k} {h}"));
    }
    if let Some(pw) = &n.md5 {
        v.push(format!("neighbor {a} password {pw}"));
    }
    if n.passive {
        v.push(format!("neighbor {a} passive"));
    }
    if let Some(l) = n.local_address {
        v.push(format!("neighbor {a} update-source {l}"));
    }
    if let Some(ttl) = n.multihop {
        v.push(format!("neighbor {a} ebgp-multihop {ttl}"));
    }
    if n.ttl_security {
        v.push(format!("neighbor {a} ttl-security hops 1"));
    }
    v.push(if n.graceful_restart {
        format!("neighbor {a} graceful-restart")
    } else {
        format!("neighbor {a} graceful-restart-disable")
    });
    // Started shut down; `start` enables it once bgpd has zebra's interface list, else an
    // early incoming connection fails with "nexthop_set failed" and a NOTIFICATION.
    v.push(format!("neighbor {a} shutdown"));
    v
}

/// The bfdd profile of a neighbour's timers.
fn bfd_profile(n: &NeighborSpec) -> String {
    n.bfd.map_or_else(String::new, |b| {
        format!("hf-{}-{}-{}", b.min_rx_ms, b.min_tx_ms, b.multiplier)
    })
}

/// bfdd's configuration: one profile per distinct set of neighbour timers.
fn bfdd_config(spec: &PeerSpec, log: &str) -> String {
    let mut s = format!(
        "log file {log} debugging
debug bfd peer
debug bfd network
!
bfd
"
    );
    let mut seen = Vec::new();
    for n in &spec.neighbors {
        let Some(b) = n.bfd else { continue };
        if seen.contains(&b) {
            continue;
        }
        seen.push(b);
        let _ = writeln!(
            s,
            " profile {}
  receive-interval {}
  transmit-interval {}
  detect-multiplier {}
 !",
            bfd_profile(n),
            b.min_rx_ms,
            b.min_tx_ms,
            b.multiplier
        );
    }
    s.push_str(
        "!
",
    );
    s
}

impl Frr {
    /// BFD under each neighbour's session, configured once that session is
    /// Established (a thread, bounded to [`BFD_AFTER_ESTABLISHED`]).
    ///
    /// bgpd 8.4 registers a neighbour's BFD session as soon as it is
    /// configured, without the source address and interface it learns when
    /// the connection comes up, and then registers it anew with them: bfdd
    /// replaces the first session, which is Up with the neighbour by then,
    /// and the replaced session's last packets say Down. The neighbour (any
    /// BFD speaker, holdfastd as well as another frr) then takes BGP down
    /// once at start (FRRouting/frr issue 17337, "BGP peering with BFD is
    /// established twice"). Configured after the session is up, bgpd
    /// registers once, with everything known.
    fn bfd_once_established(&self) {
        let todo: Vec<(IpAddr, String)> = self
            .spec
            .neighbors
            .iter()
            .filter(|n| n.bfd.is_some())
            .map(|n| (n.address, bfd_profile(n)))
            .collect();
        if todo.is_empty() {
            return;
        }
        let vty = self.vty.clone();
        let local_as = self.spec.local_as;
        std::thread::spawn(move || {
            let end = std::time::Instant::now() + BFD_AFTER_ESTABLISHED;
            let mut todo = todo;
            while !todo.is_empty() && std::time::Instant::now() < end {
                todo.retain(|(addr, profile)| {
                    let up = vty
                        .json(&format!("show bgp neighbors {addr} json"))
                        .ok()
                        .and_then(|v| {
                            v.get(addr.to_string())
                                .and_then(|n| n.get("bgpState"))
                                .and_then(Value::as_str)
                                .map(|s| s == "Established")
                        })
                        .unwrap_or(false);
                    let configured = up
                        && vty
                            .run(
                                "bgpd",
                                &[
                                    "configure terminal".to_string(),
                                    format!("router bgp {local_as}"),
                                    format!("neighbor {addr} bfd profile {profile}"),
                                ],
                            )
                            .is_ok();
                    !configured
                });
                std::thread::sleep(Duration::from_millis(50));
            }
        });
    }

    /// `show bfd peers json` from bfdd (`[]` when bfdd does not run).
    pub fn bfd_peers(&self, _lab: &Lab) -> Result<Value> {
        if !self.spec.neighbors.iter().any(|n| n.bfd.is_some()) {
            return Ok(Value::Array(Vec::new()));
        }
        let out = self.vty.run("bfdd", &["show bfd peers json".to_string()])?;
        serde_json::from_str(&out)
            .map_err(|e| parse_err("vtysh `show bfd peers json`", e.to_string()))
    }

    /// `show bfd peers json`, callable from another thread (a watcher).
    pub fn bfd_probe(&self) -> Box<dyn Fn() -> Result<Value> + Send> {
        let vty = self.vty.clone();
        Box::new(move || {
            let out = vty.run("bfdd", &["show bfd peers json".to_string()])?;
            serde_json::from_str(&out)
                .map_err(|e| parse_err("vtysh `show bfd peers json`", e.to_string()))
        })
    }

    /// `clear bgp ipv4 unicast NEIGHBOR soft in`: asks the neighbour to
    /// send its routes again (a ROUTE-REFRESH, RFC 2918, when it
    /// advertised the capability).
    pub fn soft_in(&self, _lab: &Lab, neighbor: IpAddr) -> Result<()> {
        let afi = if neighbor.is_ipv6() { "ipv6" } else { "ipv4" };
        self.vty
            .run(
                "bgpd",
                &[format!("clear bgp {afi} unicast {neighbor} soft in")],
            )
            .map(drop)
    }

    /// The `messageStats` object of `show bgp neighbors NEIGHBOR json`
    /// (`updatesRecv`, `routeRefreshSent`, …).
    pub fn message_stats(&self, _lab: &Lab, neighbor: IpAddr) -> Result<Value> {
        let v = self
            .vty
            .json(&format!("show bgp neighbors {neighbor} json"))?;
        v.get(neighbor.to_string())
            .and_then(|n| n.get("messageStats"))
            .cloned()
            .ok_or_else(|| {
                parse_err(
                    "vtysh `show bgp neighbors json`",
                    format!("no messageStats for {neighbor}: {v}"),
                )
            })
    }

    /// `show bfd peers counters json` from bfdd.
    pub fn bfd_peer_counters(&self, _lab: &Lab) -> Result<Value> {
        let out = self
            .vty
            .run("bfdd", &["show bfd peers counters json".to_string()])?;
        serde_json::from_str(&out)
            .map_err(|e| parse_err("vtysh `show bfd peers counters json`", e.to_string()))
    }

    /// The daemons started earlier by [`Peer::start`] with `spec` in `host` as `procs`
    /// (see [`crate::peer::adopt`]).
    pub(super) fn adopt(
        lab: &Lab,
        host: HostId,
        spec: &PeerSpec,
        procs: &[ProcId],
    ) -> Result<Self> {
        let (dir, spec) = super::prepare(lab, host, PeerKind::Frr, spec)?;
        Ok(Frr {
            host,
            vty: Vty {
                netns: lab.netns(host).to_string(),
                dir,
            },
            procs: procs.to_vec(),
            spec,
        })
    }

    fn path(&self, file: &str) -> String {
        self.vty.dir.join(file).to_string_lossy().into_owned()
    }

    fn bgpd_config(&self, host_name: &str) -> String {
        let spec = &self.spec;
        let mut s = String::new();
        let _ = writeln!(s, "frr defaults traditional\nhostname {host_name}");
        let _ = writeln!(s, "log file {} debugging", self.path("bgpd.log"));
        s.push_str("log timestamp precision 3\ndebug bgp neighbor-events\n!\n");
        for r in spec.routes.iter().filter(|r| !rmap_sets(r).is_empty()) {
            let _ = writeln!(s, "route-map {} permit 10", rmap_name(&r.prefix));
            for l in rmap_sets(r) {
                let _ = writeln!(s, " {l}");
            }
            s.push_str("!\n");
        }
        if spec.neighbors.iter().any(|n| !n.export) {
            s.push_str("route-map HF-EXPORT-NONE deny 10\n!\n");
        }
        let _ = writeln!(s, "router bgp {}", spec.local_as);
        let _ = writeln!(s, " bgp router-id {}", spec.router_id);
        s.push_str(" bgp log-neighbor-changes\n no bgp ebgp-requires-policy\n");
        s.push_str(" no bgp default ipv4-unicast\n no bgp network import-check\n");
        for n in &spec.neighbors {
            for l in neighbor_lines(n) {
                let _ = writeln!(s, " {l}");
            }
        }
        for v6 in [false, true] {
            let _ = writeln!(s, " address-family {} unicast", afi(v6));
            for n in &spec.neighbors {
                let on = if v6 { n.families.1 } else { n.families.0 };
                if on {
                    let _ = writeln!(s, "  neighbor {} activate", n.address);
                    if !n.export {
                        let _ =
                            writeln!(s, "  neighbor {} route-map HF-EXPORT-NONE out", n.address);
                    }
                }
            }
            for r in spec.routes.iter().filter(|r| r.is_v6() == v6) {
                // A route-map per route only where it sets something: frr loads
                // 100k bare `network` lines in seconds, not with a route-map each.
                if rmap_sets(r).is_empty() {
                    let _ = writeln!(s, "  network {}", r.prefix);
                } else {
                    let _ = writeln!(
                        s,
                        "  network {} route-map {}",
                        r.prefix,
                        rmap_name(&r.prefix)
                    );
                }
            }
            s.push_str(" exit-address-family\n");
        }
        s.push_str("!\n");
        s
    }

    fn vtysh(&self, lab: &Lab, cmds: &[String]) -> Result<String> {
        self.vtysh_daemon(lab, "bgpd", cmds)
    }

    /// Something another thread can announce plain IPv4 prefixes with (one
    /// vtysh call: a burst of UPDATEs), while the test thread injects a
    /// failure. The peer's spec does not learn of them.
    pub fn burst(&self) -> impl Fn(&[String]) -> Result<()> + Send + 'static {
        let vty = self.vty.clone();
        let local_as = self.spec.local_as;
        move |prefixes: &[String]| {
            let mut cmds = vec![
                "configure terminal".to_string(),
                format!("router bgp {local_as}"),
                "address-family ipv4 unicast".to_string(),
            ];
            cmds.extend(prefixes.iter().map(|p| format!("network {p}")));
            vty.run("bgpd", &cmds).map(drop)
        }
    }

    fn vtysh_daemon(&self, _lab: &Lab, daemon: &str, cmds: &[String]) -> Result<String> {
        self.vty.run(daemon, cmds)
    }

    fn vtysh_json(&self, _lab: &Lab, cmd: &str) -> Result<Value> {
        self.vty.json(cmd)
    }

    fn neighbor(&self, neighbor: IpAddr) -> Result<&NeighborSpec> {
        self.spec
            .neighbors
            .iter()
            .find(|n| n.address == neighbor)
            .ok_or_else(|| LabError::Invalid(format!("frr has no neighbor {neighbor}")))
    }

    /// Every path of the local BGP table (`show bgp <afi> unicast json detail`), keyed by
    /// the peer it came from (`0.0.0.0` for local ones), with its best-path flag.
    fn table(&self, lab: &Lab, v6: bool) -> Result<Vec<(String, bool, RouteView)>> {
        let v = self.vtysh_json(lab, &format!("show bgp {} unicast json detail", afi(v6)))?;
        let mut out = Vec::new();
        let Some(routes) = v.get("routes").and_then(Value::as_object) else {
            return Ok(out);
        };
        for (prefix, entries) in routes {
            let prefix = normalize_prefix(prefix)?;
            for p in entries.as_array().into_iter().flatten() {
                if p.get("aspath").is_none() && p.get("nexthops").is_none() {
                    continue;
                }
                let peer = p
                    .pointer("/peer/peerId")
                    .and_then(Value::as_str)
                    .unwrap_or("0.0.0.0")
                    .to_string();
                let best = p
                    .pointer("/bestpath/overall")
                    .and_then(Value::as_bool)
                    .unwrap_or(false);
                out.push((peer, best, path_view(&prefix, p)));
            }
        }
        Ok(out)
    }
}

fn path_view(prefix: &str, p: &Value) -> RouteView {
    let u32_of = |k: &str| {
        p.get(k)
            .and_then(Value::as_u64)
            .and_then(|x| u32::try_from(x).ok())
    };
    let list = |ptr: &str| -> Vec<String> {
        p.pointer(ptr)
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(|x| x.as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default()
    };
    let as_path = p
        .pointer("/aspath/segments")
        .and_then(Value::as_array)
        .map(|segs| {
            segs.iter()
                .flat_map(|s| {
                    s.get("list")
                        .and_then(Value::as_array)
                        .cloned()
                        .unwrap_or_default()
                })
                .filter_map(|x| x.as_u64().and_then(|x| u32::try_from(x).ok()))
                .collect()
        })
        .unwrap_or_default();
    let next_hop = p
        .get("nexthops")
        .and_then(Value::as_array)
        .and_then(|nhs| {
            nhs.iter()
                .find(|n| n.get("scope").and_then(Value::as_str) != Some("link-local"))
                .or_else(|| nhs.first())
        })
        .and_then(|n| n.get("ip").and_then(Value::as_str))
        .and_then(|s| s.parse::<IpAddr>().ok())
        .filter(|ip| !ip.is_unspecified());
    let mut r = RouteView {
        prefix: prefix.to_string(),
        next_hop,
        as_path,
        med: u32_of("metric"),
        local_pref: u32_of("locPrf").or_else(|| u32_of("localpref")),
        communities: list("/community/list")
            .iter()
            .filter_map(|c| parse_community(c))
            .collect(),
        large_communities: list("/largeCommunity/list")
            .iter()
            .filter_map(|c| parse_large_community(c))
            .collect(),
        origin: p
            .get("origin")
            .and_then(Value::as_str)
            .map(str::to_ascii_lowercase),
    };
    r.sort_attrs();
    r
}

impl Peer for Frr {
    fn kind(&self) -> PeerKind {
        PeerKind::Frr
    }

    fn host(&self) -> HostId {
        self.host
    }

    fn start(lab: &mut Lab, host: HostId, spec: &PeerSpec) -> Result<Self> {
        let (dir, spec) = super::prepare(lab, host, PeerKind::Frr, spec)?;
        let mut frr = Frr {
            host,
            vty: Vty {
                netns: lab.netns(host).to_string(),
                dir: dir.clone(),
            },
            procs: Vec::new(),
            spec,
        };
        let host_name = lab.host_info(host).name.clone();
        let write = |file: &str, text: String| {
            std::fs::write(dir.join(file), text).map_err(io_ctx(format!("writing {file}")))
        };
        write("zebra.conf", format!("hostname {host_name}\n"))?;
        write("bgpd.conf", frr.bgpd_config(&host_name))?;
        let dir_s = dir.to_string_lossy().into_owned();
        run_ok(
            &argv(&["chown", "-R", "frr:frr", &dir_s]),
            DEFAULT_CMD_TIMEOUT,
        )?;
        let (zconf, zpid, zlog, zserv) = (
            frr.path("zebra.conf"),
            frr.path("zebra.pid"),
            format!("file:{}", frr.path("zebra.log")),
            frr.path("zserv.api"),
        );
        let zebra = lab.spawn(
            host,
            &format!("zebra-{host_name}"),
            &[
                ZEBRA,
                "-u",
                "frr",
                "-g",
                "frr",
                "-i",
                &zpid,
                "-z",
                &zserv,
                "--vty_socket",
                &dir_s,
                "-f",
                &zconf,
                "--log",
                &zlog,
            ],
            &[],
        )?;
        frr.procs.push(zebra);
        let zserv_path = PathBuf::from(&zserv);
        wait_for("zebra zserv socket", Duration::from_secs(10), || {
            Ok(zserv_path.exists().then_some(()))
        })?;
        if frr.spec.neighbors.iter().any(|n| n.bfd.is_some()) {
            write("bfdd.conf", bfdd_config(&frr.spec, &frr.path("bfdd.log")))?;
            run_ok(
                &argv(&["chown", "-R", "frr:frr", &dir_s]),
                DEFAULT_CMD_TIMEOUT,
            )?;
            let (fconf, fpid) = (frr.path("bfdd.conf"), frr.path("bfdd.pid"));
            let bfdd = lab.spawn(
                host,
                &format!("bfdd-{host_name}"),
                &[
                    BFDD,
                    "-u",
                    "frr",
                    "-g",
                    "frr",
                    "-i",
                    &fpid,
                    "-z",
                    &zserv,
                    "--vty_socket",
                    &dir_s,
                    "-f",
                    &fconf,
                ],
                &[],
            )?;
            frr.procs.push(bfdd);
            wait_for("bfdd vty", Duration::from_secs(10), || {
                Ok(frr.vty.run("bfdd", &["show bfd peers".to_string()]).ok())
            })?;
        }
        let (bconf, bpid) = (frr.path("bgpd.conf"), frr.path("bgpd.pid"));
        let bgpd = lab.spawn(
            host,
            &format!("bgpd-{host_name}"),
            &[
                BGPD,
                "-u",
                "frr",
                "-g",
                "frr",
                "-n",
                "-i",
                &bpid,
                "-z",
                &zserv,
                "--vty_socket",
                &dir_s,
                "-f",
                &bconf,
            ],
            &[],
        )?;
        frr.procs.push(bgpd);
        wait_for("bgpd vty", Duration::from_secs(10), || {
            Ok(frr
                .vtysh(lab, &["show running-config".to_string()])
                .ok()
                .filter(|o| o.contains("router bgp")))
        })?;
        wait_for(
            "bgpd registered with zebra",
            Duration::from_secs(10),
            || {
                Ok(frr
                    .vtysh_daemon(lab, "zebra", &["show zebra client summary".to_string()])
                    .ok()
                    .filter(|o| o.lines().any(|l| l.starts_with("bgp "))))
            },
        )?;
        let mut cmds = vec![
            "configure terminal".to_string(),
            format!("router bgp {}", frr.spec.local_as),
        ];
        cmds.extend(
            frr.spec
                .neighbors
                .iter()
                .map(|n| format!("no neighbor {} shutdown", n.address)),
        );
        frr.vtysh(lab, &cmds)?;
        frr.bfd_once_established();
        Ok(frr)
    }

    fn bfd_session(&self, lab: &Lab, neighbor: IpAddr) -> Result<Option<BfdView>> {
        let addr = neighbor.to_string();
        let find = |v: &Value| {
            v.as_array()
                .and_then(|a| a.iter().find(|p| p["peer"].as_str() == Some(addr.as_str())))
                .cloned()
        };
        let Some(p) = find(&self.bfd_peers(lab)?) else {
            return Ok(None);
        };
        let counters = find(&self.bfd_peer_counters(lab)?);
        let state = p["status"].as_str().unwrap_or("?").to_string();
        Ok(Some(BfdView {
            up: state == "up",
            state,
            session_downs: counters.and_then(|c| c["session-down"].as_u64()),
            uptime_secs: p["uptime"].as_u64(),
            since: None,
            tx_interval_ms: p["transmit-interval"]
                .as_u64()
                .zip(p["remote-receive-interval"].as_u64())
                .and_then(|(a, b)| u32::try_from(a.max(b)).ok()),
        }))
    }

    fn sessions(&self, _lab: &Lab) -> Result<Vec<SessionView>> {
        self.vty.sessions(&self.spec.neighbors)
    }

    fn session_probe(&self, _lab: &Lab) -> SessionProbe {
        let (vty, neighbors) = (self.vty.clone(), self.spec.neighbors.clone());
        Box::new(move || vty.sessions(&neighbors))
    }

    fn reset_session(&self, lab: &Lab, neighbor: IpAddr) -> Result<()> {
        self.neighbor(neighbor)?;
        self.vtysh(lab, &[format!("clear bgp {neighbor}")])
            .map(drop)
    }

    fn received_routes(&self, lab: &Lab, neighbor: IpAddr) -> Result<Vec<RouteView>> {
        let n = self.neighbor(neighbor)?;
        let key = neighbor.to_string();
        let mut routes = Vec::new();
        for (on, v6) in [(n.families.0, false), (n.families.1, true)] {
            if on {
                routes.extend(
                    self.table(lab, v6)?
                        .into_iter()
                        .filter(|(peer, _, _)| *peer == key)
                        .map(|(_, _, r)| r),
                );
            }
        }
        Ok(routes)
    }

    fn advertised_routes(&self, lab: &Lab, neighbor: IpAddr) -> Result<Vec<RouteView>> {
        let n = self.neighbor(neighbor)?;
        let mut routes = Vec::new();
        for (on, v6) in [(n.families.0, false), (n.families.1, true)] {
            if !on {
                continue;
            }
            let best: HashMap<String, RouteView> = self
                .table(lab, v6)?
                .into_iter()
                .filter(|(_, best, _)| *best)
                .map(|(_, _, r)| (r.prefix.clone(), r))
                .collect();
            let cmd = format!(
                "show bgp {} unicast neighbors {neighbor} advertised-routes json",
                afi(v6)
            );
            let v = self.vtysh_json(lab, &cmd)?;
            let Some(adv) = v.get("advertisedRoutes").and_then(Value::as_object) else {
                continue;
            };
            for (prefix, e) in adv {
                let prefix = normalize_prefix(prefix)?;
                let mut r = best.get(&prefix).cloned().unwrap_or_default();
                r.prefix = prefix;
                r.next_hop = e
                    .get("nextHop")
                    .and_then(Value::as_str)
                    .and_then(|s| s.parse::<IpAddr>().ok())
                    .filter(|ip| !ip.is_unspecified());
                r.med = e
                    .get("metric")
                    .and_then(Value::as_u64)
                    .and_then(|x| u32::try_from(x).ok());
                routes.push(r);
            }
        }
        Ok(routes)
    }

    fn announce(&mut self, lab: &Lab, routes: &[RouteSpec]) -> Result<()> {
        let mut cmds = vec!["configure terminal".to_string()];
        for r in routes {
            let mut r = r.clone();
            r.prefix = normalize_prefix(&r.prefix)?;
            let rm = rmap_name(&r.prefix);
            if self.spec.routes.iter().any(|x| x.prefix == r.prefix) {
                cmds.push(format!("no route-map {rm}"));
            }
            cmds.push(format!("route-map {rm} permit 10"));
            cmds.extend(rmap_sets(&r));
            cmds.push("exit".into());
            cmds.push(format!("router bgp {}", self.spec.local_as));
            cmds.push(format!("address-family {} unicast", afi(r.is_v6())));
            cmds.push(format!("network {} route-map {rm}", r.prefix));
            cmds.push("exit-address-family".into());
            cmds.push("exit".into());
            self.spec.routes.retain(|x| x.prefix != r.prefix);
            self.spec.routes.push(r);
        }
        self.vtysh(lab, &cmds).map(drop)
    }

    fn withdraw(&mut self, lab: &Lab, prefixes: &[String]) -> Result<()> {
        let mut cmds = vec![
            "configure terminal".to_string(),
            format!("router bgp {}", self.spec.local_as),
        ];
        for p in prefixes {
            let p = normalize_prefix(p)?;
            cmds.push(format!("address-family {} unicast", afi(p.contains(':'))));
            cmds.push(format!("no network {p}"));
            cmds.push("exit-address-family".into());
            self.spec.routes.retain(|x| x.prefix != p);
        }
        self.vtysh(lab, &cmds).map(drop)
    }

    fn log_text(&self) -> Result<String> {
        let path = self.vty.dir.join("bgpd.log");
        std::fs::read_to_string(&path).map_err(io_ctx(format!("reading {}", path.display())))
    }

    fn log_files(&self) -> Vec<PathBuf> {
        vec![self.vty.dir.join("bgpd.log")]
    }

    fn notification_markers(&self) -> &'static [&'static str] {
        // bgpd: "%NOTIFICATION: sent to neighbor ..." / "%NOTIFICATION: received from ...".
        &["%NOTIFICATION"]
    }

    fn pids(&self, lab: &Lab) -> Vec<u32> {
        self.procs.iter().map(|p| lab.pid(*p)).collect()
    }

    fn stop(&mut self, lab: &mut Lab) {
        for p in self.procs.drain(..).rev() {
            lab.stop_proc(p);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_detail_path() {
        let p: Value = serde_json::from_str(r#"{"aspath":{"string":"65001 64512","segments":[{"type":"as-sequence","list":[65001,64512]}],"length":2},"origin":"IGP","metric":7,"community":{"list":["65001:1","noExport"]},"largeCommunity":{"list":["65001:2:3"]},"nexthops":[{"ip":"fd00:0:0:1::1","scope":"global"},{"ip":"fe80::1","scope":"link-local","used":true}],"peer":{"peerId":"fd00:0:0:1::1"}}"#).unwrap();
        let r = path_view("2001:db8:1::/48", &p);
        assert_eq!(r.as_path, vec![65001, 64512]);
        assert_eq!(r.next_hop, Some("fd00:0:0:1::1".parse().unwrap()));
        assert_eq!(r.communities, vec![(65001, 1)]);
        assert_eq!(r.large_communities, vec![(65001, 2, 3)]);
        assert_eq!((r.med, r.origin.as_deref()), (Some(7), Some("igp")));
    }

    #[test]
    fn route_map_sets_cover_all_attributes() {
        let r = RouteSpec::new("2001:db8::/32")
            .med(1)
            .community(1, 2)
            .large_community(1, 2, 3)
            .as_path(&[64512, 64513])
            .next_hop("2001:db8::1".parse().unwrap());
        let sets = rmap_sets(&r);
        assert_eq!(
            sets,
            vec![
                "set metric 1",
                "set community 1:2",
                "set large-community 1:2:3",
                "set as-path prepend 64512 64513",
                "set ipv6 next-hop global 2001:db8::1",
            ]
        );
    }
}
