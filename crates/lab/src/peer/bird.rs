//! BIRD 2: `bird -f` per host, queried with `birdc`; routes originated by static
//! protocols whose attributes are set in the BGP export filter (BIRD only sends a MED
//! to eBGP peers when the export filter sets it).

use std::fmt::Write as _;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::{
    normalize_prefix, BfdView, NeighborSpec, Peer, PeerKind, PeerSpec, RouteSpec, RouteView,
    SessionProbe, SessionView,
};
use crate::cmd::ns_exec_ok;
use crate::error::{io_ctx, LabError, Result};
use crate::lab::{HostId, Lab, ProcId};
use crate::wait::wait_for;

/// A BIRD 2 instance.
#[derive(Debug)]
pub struct Bird {
    host: HostId,
    conf: PathBuf,
    sock: String,
    log: PathBuf,
    proc: Option<ProcId>,
    spec: PeerSpec,
}

fn proto_name(i: usize) -> String {
    format!("hf_n{i}")
}

fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

fn quote(s: &str) -> String {
    format!("\"{}\"", s.replace('\\', "\\\\").replace('"', "\\\""))
}

fn route_attrs(r: &RouteSpec) -> String {
    let mut body = String::new();
    if let Some(m) = r.med {
        let _ = write!(body, " bgp_med = {m};");
    }
    for (a, b) in &r.communities {
        let _ = write!(body, " bgp_community.add(({a},{b}));");
    }
    for (a, b, c) in &r.large_communities {
        let _ = write!(body, " bgp_large_community.add(({a},{b},{c}));");
    }
    for asn in r.as_path.iter().rev() {
        let _ = write!(body, " bgp_path.prepend({asn});");
    }
    if let Some(nh) = r.next_hop {
        let _ = write!(body, " bgp_next_hop = {nh};");
    }
    body
}

fn neighbor_block(i: usize, n: &NeighborSpec, local_as: u32) -> String {
    let mut s = format!("protocol bgp {} {{\n", proto_name(i));
    match n.local_address {
        Some(a) => {
            let _ = writeln!(s, "  local {a} as {local_as};");
        }
        None => {
            let _ = writeln!(s, "  local as {local_as};");
        }
    }
    let _ = writeln!(s, "  neighbor {} as {};", n.address, n.remote_as);
    s.push_str("  connect delay time 1;\n  connect retry time 2;\n  error wait time 1, 5;\n");
    if let (Some(h), Some(k)) = (n.hold_time, n.keepalive()) {
        let _ = writeln!(s, "  hold time {h};\n  keepalive time {k};");
    }
    if n.passive {
        s.push_str("  passive on;\n");
    }
    if let Some(pw) = &n.md5 {
        let _ = writeln!(s, "  password {};", quote(pw));
    }
    let _ = writeln!(
        s,
        "  graceful restart {};",
        if n.graceful_restart { "on" } else { "off" }
    );
    if let Some(ttl) = n.multihop {
        let _ = writeln!(s, "  multihop {ttl};");
    }
    if n.ttl_security {
        s.push_str("  ttl security on;\n");
    }
    if n.bfd.is_some() {
        s.push_str("  bfd on;\n");
    }
    let export = if n.export {
        "export filter hf_export"
    } else {
        "export none"
    };
    if n.families.0 {
        let _ = writeln!(s, "  ipv4 {{ import all; {export}; }};");
    }
    if n.families.1 {
        let _ = writeln!(s, "  ipv6 {{ import all; {export}; }};");
    }
    s.push_str("}\n");
    s
}

/// The row of `neighbor` in `birdc show bfd sessions` (IP address, interface, state,
/// since, interval, timeout).
fn bfd_row(table: &str, neighbor: IpAddr) -> Option<BfdView> {
    let addr = neighbor.to_string();
    table.lines().find_map(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        (f.first() == Some(&addr.as_str()) && f.len() >= 4).then(|| BfdView {
            up: f[2] == "Up",
            state: f[2].to_string(),
            session_downs: None,
            uptime_secs: None,
            since: Some(f[3].to_string()),
            tx_interval_ms: f
                .get(4)
                .and_then(|v| v.parse::<f64>().ok())
                .map(|secs| (secs * 1000.0).round() as u32),
        })
    })
}

impl Bird {
    /// The daemon started earlier by [`Peer::start`] with `spec` in `host` as `procs`
    /// (see [`crate::peer::adopt`]).
    pub(super) fn adopt(
        lab: &Lab,
        host: HostId,
        spec: &PeerSpec,
        procs: &[ProcId],
    ) -> Result<Self> {
        let (dir, spec) = super::prepare(lab, host, PeerKind::Bird, spec)?;
        Ok(Bird {
            host,
            conf: dir.join("bird.conf"),
            sock: dir.join("bird.ctl").to_string_lossy().into_owned(),
            log: dir.join("bird.log"),
            proc: procs.first().copied(),
            spec,
        })
    }

    fn config(&self) -> String {
        let spec = &self.spec;
        let mut s = String::new();
        let _ = writeln!(s, "log {} all;", quote(&self.log.to_string_lossy()));
        let _ = writeln!(s, "router id {};", spec.router_id);
        s.push_str("timeformat protocol \"%s\";\n");
        s.push_str("debug protocols { states, events };\n");
        s.push_str("protocol device { scan time 2; }\n");
        if let Some(t) = spec.kernel_table {
            let _ = writeln!(
                s,
                "protocol kernel hf_kernel4 {{\n  ipv4 {{ import none; export all; }};\n  kernel table {t};\n}}"
            );
        }
        // bird2 2.0 sets BFD timers per interface: those of the first
        // neighbour with BFD.
        if let Some(n) = spec.neighbors.iter().find(|n| n.bfd.is_some()) {
            let b = n.bfd.unwrap_or(super::BfdTimers {
                min_rx_ms: 300,
                min_tx_ms: 300,
                multiplier: 3,
            });
            let auth = n.bfd_auth.as_ref().map_or_else(String::new, |a| {
                format!(
                    " authentication {}; password {} {{ id {}; }};",
                    a.kind,
                    quote(&a.password),
                    a.key_id
                )
            });
            let _ = writeln!(
                s,
                "protocol bfd hf_bfd {{\n  interface \"*\" {{ min rx interval {} ms; min tx interval {} ms; multiplier {};{auth} }};\n}}",
                b.min_rx_ms, b.min_tx_ms, b.multiplier
            );
        }
        for (name, v6) in [("hf_static4", false), ("hf_static6", true)] {
            let _ = writeln!(
                s,
                "protocol static {name} {{\n  {};",
                if v6 { "ipv6" } else { "ipv4" }
            );
            for r in spec.routes.iter().filter(|r| r.is_v6() == v6) {
                let _ = writeln!(s, "  route {} unreachable;", r.prefix);
            }
            s.push_str("}\n");
        }
        s.push_str("function hf_attrs() {\n");
        for r in &spec.routes {
            let body = route_attrs(r);
            if !body.is_empty() {
                let _ = writeln!(s, "  if net = {} then {{{body} }}", r.prefix);
            }
        }
        s.push_str("}\n");
        s.push_str(
            "filter hf_export {\n  if proto = \"hf_static4\" || proto = \"hf_static6\" then hf_attrs();\n  accept;\n}\n",
        );
        for (i, n) in spec.neighbors.iter().enumerate() {
            s.push_str(&neighbor_block(i, n, spec.local_as));
        }
        s
    }

    fn write_config(&self) -> Result<()> {
        std::fs::write(&self.conf, self.config())
            .map_err(io_ctx(format!("writing {}", self.conf.display())))
    }

    fn birdc(&self, lab: &Lab, args: &[&str]) -> Result<String> {
        let mut cmd = vec!["birdc", "-s", &self.sock];
        cmd.extend_from_slice(args);
        lab.exec_ok(self.host, &cmd)
    }

    /// `birdc reload in <proto>`: BIRD asks the neighbour to send its routes
    /// again with a ROUTE-REFRESH (RFC 2918), the neighbour having announced
    /// the capability.
    /// `birdc show bfd sessions` (the raw table).
    pub fn bfd_sessions(&self, lab: &Lab) -> Result<String> {
        self.birdc(lab, &["show", "bfd", "sessions"])
    }

    /// `birdc show bfd sessions`, callable from another thread (a watcher).
    pub fn bfd_probe(&self, lab: &Lab) -> Box<dyn Fn() -> Result<String> + Send> {
        let netns = lab.netns(self.host).to_string();
        let sock = self.sock.clone();
        Box::new(move || ns_exec_ok(&netns, &["birdc", "-s", &sock, "show", "bfd", "sessions"]))
    }

    pub fn request_refresh(&self, lab: &Lab, neighbor: IpAddr) -> Result<()> {
        let p = proto_name(self.neighbor_index(neighbor)?);
        let out = self.birdc(lab, &["reload", "in", &p])?;
        if out.contains("reloading") || out.contains("Reload") {
            Ok(())
        } else {
            Err(LabError::CommandFailed {
                command: format!("birdc reload in {p}"),
                status: "rejected".into(),
                output: out,
            })
        }
    }

    fn reconfigure(&self, lab: &Lab) -> Result<()> {
        self.write_config()?;
        let out = self.birdc(lab, &["configure"])?;
        if out.contains("Reconfigured") || out.contains("Reconfiguration in progress") {
            Ok(())
        } else {
            Err(LabError::CommandFailed {
                command: "birdc configure".into(),
                status: "rejected".into(),
                output: out,
            })
        }
    }

    fn neighbor_index(&self, neighbor: IpAddr) -> Result<usize> {
        self.spec
            .neighbors
            .iter()
            .position(|n| n.address == neighbor)
            .ok_or_else(|| LabError::Invalid(format!("bird has no neighbor {neighbor}")))
    }

    /// Count (established, dropped) transitions of `proto` from the log's state lines.
    fn transitions(log: &str, proto: &str) -> (u32, u32) {
        let needle = format!("{proto}: State changed to ");
        let (mut up, mut dropped, mut is_up) = (0, 0, false);
        for line in log.lines() {
            let Some(idx) = line.find(&needle) else {
                continue;
            };
            let state = line[idx + needle.len()..].trim();
            if state == "up" {
                up += 1;
                is_up = true;
            } else if is_up {
                dropped += 1;
                is_up = false;
            }
        }
        (up, dropped)
    }
}

/// Every session of a BIRD with control socket `sock` in `netns`: `birdc show protocols
/// all`, with counters from the log. Needs no lab (see [`Peer::session_probe`]).
fn query_sessions(
    netns: &str,
    sock: &str,
    log: &Path,
    spec: &PeerSpec,
) -> Result<Vec<SessionView>> {
    let out = ns_exec_ok(netns, &["birdc", "-s", sock, "show", "protocols", "all"])?;
    let log = std::fs::read_to_string(log).unwrap_or_default();
    Ok(parse_protocols(&out, spec, &log))
}

/// Parse `birdc show protocols all` output into per-protocol views.
fn parse_protocols(out: &str, spec: &PeerSpec, log: &str) -> Vec<SessionView> {
    let mut views = Vec::new();
    let mut current: Option<(usize, SessionView)> = None;
    let mut in_neighbor_caps = false;
    let finish = |cur: Option<(usize, SessionView)>, views: &mut Vec<SessionView>| {
        if let Some((_, v)) = cur {
            views.push(v);
        }
    };
    for line in out.lines() {
        if line.starts_with("BIRD ") || line.starts_with("Name ") || line.trim().is_empty() {
            continue;
        }
        if !line.starts_with(char::is_whitespace) {
            finish(current.take(), &mut views);
            in_neighbor_caps = false;
            let cols: Vec<&str> = line.split_whitespace().collect();
            let Some(idx) = cols
                .first()
                .and_then(|n| n.strip_prefix("hf_n"))
                .and_then(|i| i.parse::<usize>().ok())
                .filter(|&i| i < spec.neighbors.len())
            else {
                continue;
            };
            let info = cols
                .get(5)
                .copied()
                .unwrap_or(cols.get(3).copied().unwrap_or(""));
            let mut v = SessionView::new(spec.neighbors[idx].address, info);
            v.remote_as = Some(spec.neighbors[idx].remote_as);
            if v.is_established() {
                v.uptime_secs = cols
                    .get(4)
                    .and_then(|s| s.parse::<u64>().ok())
                    .map(|since| now_secs().saturating_sub(since));
            }
            let (up, dropped) = Bird::transitions(log, &proto_name(idx));
            v.established_count = Some(up);
            v.dropped_count = Some(dropped);
            current = Some((idx, v));
            continue;
        }
        let Some((_, v)) = current.as_mut() else {
            continue;
        };
        let t = line.trim();
        if t == "Neighbor capabilities" {
            in_neighbor_caps = true;
            v.peer_graceful_restart = Some(false);
            continue;
        }
        if in_neighbor_caps {
            let indent = line.len() - line.trim_start().len();
            if indent > 4 {
                if t == "Graceful restart" {
                    v.peer_graceful_restart = Some(true);
                }
                continue;
            }
            in_neighbor_caps = false;
        }
        if let Some(rest) = t.strip_prefix("BGP state:") {
            v.raw_state = rest.trim().to_string();
            v.state = super::SessionState::parse(rest);
        } else if let Some(rest) = t.strip_prefix("Neighbor AS:") {
            v.remote_as = rest.trim().parse().ok().or(v.remote_as);
        } else if let Some(rest) = t.strip_prefix("Routes:") {
            let num = |word: &str| -> u32 {
                rest.split(',')
                    .find(|p| p.contains(word))
                    .and_then(|p| p.split_whitespace().next())
                    .and_then(|n| n.parse().ok())
                    .unwrap_or(0)
            };
            v.prefixes_received = Some(v.prefixes_received.unwrap_or(0) + num("imported"));
            v.prefixes_sent = Some(v.prefixes_sent.unwrap_or(0) + num("exported"));
        }
    }
    finish(current, &mut views);
    views
}

fn parse_numbers(s: &str) -> Vec<u32> {
    s.split(|c: char| !c.is_ascii_digit())
        .filter(|t| !t.is_empty())
        .filter_map(|t| t.parse().ok())
        .collect()
}

/// Parse `birdc show route ... all` output.
pub(crate) fn parse_routes(out: &str) -> Vec<RouteView> {
    let mut routes: Vec<RouteView> = Vec::new();
    let mut last_prefix = String::new();
    for line in out.lines() {
        if line.starts_with("BIRD ") || line.starts_with("Table ") || line.trim().is_empty() {
            continue;
        }
        if line.starts_with('\t') {
            let Some(r) = routes.last_mut() else { continue };
            let t = line.trim();
            let Some((key, val)) = t.split_once(':') else {
                continue;
            };
            let val = val.trim();
            match key {
                "BGP.origin" => r.origin = Some(val.to_ascii_lowercase()),
                "BGP.as_path" => r.as_path = parse_numbers(val),
                "BGP.next_hop" => {
                    r.next_hop = val.split_whitespace().next().and_then(|a| a.parse().ok())
                }
                "BGP.med" => r.med = val.parse().ok(),
                "BGP.local_pref" => r.local_pref = val.parse().ok(),
                "BGP.community" => {
                    r.communities = val
                        .split(')')
                        .filter_map(|c| {
                            let n = parse_numbers(c);
                            match n[..] {
                                [a, b] => Some((u16::try_from(a).ok()?, u16::try_from(b).ok()?)),
                                _ => None,
                            }
                        })
                        .collect()
                }
                "BGP.large_community" => {
                    r.large_communities = val
                        .split(')')
                        .filter_map(|c| match parse_numbers(c)[..] {
                            [a, b, c] => Some((a, b, c)),
                            _ => None,
                        })
                        .collect()
                }
                _ => {}
            }
            if r.next_hop.is_none() {
                if let Some(rest) = t.strip_prefix("via ") {
                    r.next_hop = rest.split_whitespace().next().and_then(|a| a.parse().ok());
                }
            }
            continue;
        }
        let first = line.split_whitespace().next().unwrap_or("");
        let prefix = if line.starts_with(char::is_whitespace) {
            last_prefix.clone()
        } else {
            match normalize_prefix(first) {
                Ok(p) => p,
                Err(_) => continue,
            }
        };
        last_prefix = prefix.clone();
        routes.push(RouteView {
            prefix,
            ..RouteView::default()
        });
    }
    for r in &mut routes {
        r.sort_attrs();
    }
    routes
}

impl Peer for Bird {
    fn kind(&self) -> PeerKind {
        PeerKind::Bird
    }

    fn host(&self) -> HostId {
        self.host
    }

    fn start(lab: &mut Lab, host: HostId, spec: &PeerSpec) -> Result<Self> {
        let (dir, spec) = super::prepare(lab, host, PeerKind::Bird, spec)?;
        let mut bird = Bird {
            host,
            conf: dir.join("bird.conf"),
            sock: dir.join("bird.ctl").to_string_lossy().into_owned(),
            log: dir.join("bird.log"),
            proc: None,
            spec,
        };
        bird.write_config()?;
        let conf = bird.conf.to_string_lossy().into_owned();
        let pidf = dir.join("bird.pid").to_string_lossy().into_owned();
        let name = format!("bird-{}", lab.host_info(host).name);
        bird.proc = Some(lab.spawn(
            host,
            &name,
            &["bird", "-f", "-c", &conf, "-s", &bird.sock, "-P", &pidf],
            &[],
        )?);
        wait_for("bird control socket", Duration::from_secs(10), || {
            Ok(bird
                .birdc(lab, &["show", "status"])
                .ok()
                .filter(|o| o.contains("Daemon is up")))
        })?;
        Ok(bird)
    }

    fn bfd_session(&self, lab: &Lab, neighbor: IpAddr) -> Result<Option<BfdView>> {
        if !self.spec.neighbors.iter().any(|n| n.bfd.is_some()) {
            return Ok(None);
        }
        Ok(bfd_row(&self.bfd_sessions(lab)?, neighbor))
    }

    fn sessions(&self, lab: &Lab) -> Result<Vec<SessionView>> {
        query_sessions(lab.netns(self.host), &self.sock, &self.log, &self.spec)
    }

    fn session_probe(&self, lab: &Lab) -> SessionProbe {
        let netns = lab.netns(self.host).to_string();
        let (sock, log) = (self.sock.clone(), self.log.clone());
        let spec = PeerSpec {
            routes: Vec::new(),
            ..self.spec.clone()
        };
        Box::new(move || query_sessions(&netns, &sock, &log, &spec))
    }

    fn reset_session(&self, lab: &Lab, neighbor: IpAddr) -> Result<()> {
        let p = proto_name(self.neighbor_index(neighbor)?);
        let out = self.birdc(lab, &["restart", &p])?;
        if out.contains("restarted") {
            Ok(())
        } else {
            Err(LabError::CommandFailed {
                command: format!("birdc restart {p}"),
                status: "rejected".into(),
                output: out,
            })
        }
    }

    fn received_routes(&self, lab: &Lab, neighbor: IpAddr) -> Result<Vec<RouteView>> {
        let p = proto_name(self.neighbor_index(neighbor)?);
        let out = self.birdc(lab, &["show", "route", "all", "protocol", &p])?;
        Ok(parse_routes(&out))
    }

    fn advertised_routes(&self, lab: &Lab, neighbor: IpAddr) -> Result<Vec<RouteView>> {
        let idx = self.neighbor_index(neighbor)?;
        let p = proto_name(idx);
        let n = &self.spec.neighbors[idx];
        let mut routes = Vec::new();
        for (on, table) in [(n.families.0, "master4"), (n.families.1, "master6")] {
            if on {
                let out =
                    self.birdc(lab, &["show", "route", "table", table, "export", &p, "all"])?;
                routes.extend(parse_routes(&out));
            }
        }
        Ok(routes)
    }

    fn announce(&mut self, lab: &Lab, routes: &[RouteSpec]) -> Result<()> {
        for r in routes {
            let mut r = r.clone();
            r.prefix = normalize_prefix(&r.prefix)?;
            self.spec.routes.retain(|x| x.prefix != r.prefix);
            self.spec.routes.push(r);
        }
        self.reconfigure(lab)
    }

    fn withdraw(&mut self, lab: &Lab, prefixes: &[String]) -> Result<()> {
        let norm: Vec<String> = prefixes
            .iter()
            .map(|p| normalize_prefix(p))
            .collect::<Result<_>>()?;
        self.spec.routes.retain(|r| !norm.contains(&r.prefix));
        self.reconfigure(lab)
    }

    fn log_text(&self) -> Result<String> {
        std::fs::read_to_string(&self.log)
            .map_err(io_ctx(format!("reading {}", self.log.display())))
    }

    fn log_files(&self) -> Vec<PathBuf> {
        vec![self.log.clone()]
    }

    fn notification_markers(&self) -> &'static [&'static str] {
        // "<proto>: Received: <reason>" for a received NOTIFICATION, "<proto>: Error:
        // <reason>" for one it sends.
        &["Received: ", "Error: "]
    }

    fn pids(&self, lab: &Lab) -> Vec<u32> {
        self.proc.iter().map(|p| lab.pid(*p)).collect()
    }

    fn stop(&mut self, lab: &mut Lab) {
        if let Some(p) = self.proc.take() {
            lab.stop_proc(p);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ROUTES: &str = "BIRD 2.0.12 ready.
Table master4:
198.51.100.0/24      unicast [hf_n0 03:00:29.303] * (100) [AS64602i]
\tvia 198.18.1.2 on hfaaaaaal1a
\tType: BGP univ
\tBGP.origin: IGP
\tBGP.as_path: 65002 64602
\tBGP.next_hop: 198.18.1.2
\tBGP.med: 9
\tBGP.local_pref: 100
\tBGP.community: (65002,2) (65002,1)
\tBGP.large_community: (65002, 1, 1)
                     unicast [hf_n1 03:00:30.000] (100) [AS65002i]
\tvia 198.18.2.2 on hfaaaaaal2a
\tBGP.as_path: 65002
\tBGP.next_hop: 198.18.2.2

Table master6:
2001:db8:2::/48      unicast [hf_n1 03:00:28.926] * (100) [AS65002i]
\tvia fd00:0:0:1::2 on hfaaaaaal1a
\tBGP.next_hop: fd00:0:0:1::2 fe80::543c:71ff:feb9:8e0a
";

    #[test]
    fn parses_routes_with_attributes_and_continuations() {
        let r = parse_routes(ROUTES);
        assert_eq!(r.len(), 3);
        assert_eq!(r[0].prefix, "198.51.100.0/24");
        assert_eq!(r[0].as_path, vec![65002, 64602]);
        assert_eq!(r[0].communities, vec![(65002, 1), (65002, 2)]);
        assert_eq!(r[0].large_communities, vec![(65002, 1, 1)]);
        assert_eq!((r[0].med, r[0].local_pref), (Some(9), Some(100)));
        assert_eq!(r[1].prefix, "198.51.100.0/24");
        assert_eq!(r[1].next_hop, Some("198.18.2.2".parse().unwrap()));
        assert_eq!(r[2].next_hop, Some("fd00:0:0:1::2".parse().unwrap()));
    }

    #[test]
    fn a_neighbour_without_export_gets_export_none() {
        let n = NeighborSpec::new("198.18.1.2".parse().unwrap(), 65002);
        let on = neighbor_block(0, &n, 65001);
        assert!(
            on.contains("ipv4 { import all; export filter hf_export; };"),
            "{on}"
        );
        let off = neighbor_block(0, &n.no_export(), 65001);
        assert!(off.contains("ipv4 { import all; export none; };"), "{off}");
    }

    #[test]
    fn parses_protocols_and_log_transitions() {
        let spec = PeerSpec::new(65001, "192.0.2.1".parse().unwrap())
            .neighbor(NeighborSpec::new("198.18.1.2".parse().unwrap(), 65002));
        let out = "BIRD 2.0.12 ready.
Name       Proto      Table      State  Since         Info
device1    Device     ---        up     1795316389
hf_n0      BGP        ---        up     1795316389    Established
  BGP state:          Established
    Neighbor AS:      65002
    Neighbor capabilities
      Multiprotocol
        AF announced: ipv4
      Graceful restart
      4-octet AS numbers
    Session:          external AS4
  Channel ipv4
    Routes:         3 imported, 2 exported, 3 preferred
";
        let log = "x <TRACE> hf_n0: State changed to up\nx <TRACE> hf_n0: State changed to stop\n\
                   x <TRACE> hf_n0: State changed to down\nx <TRACE> hf_n0: State changed to up\n";
        let v = parse_protocols(out, &spec, log);
        assert_eq!(v.len(), 1);
        assert!(v[0].is_established());
        assert_eq!(v[0].remote_as, Some(65002));
        assert_eq!(
            (v[0].prefixes_received, v[0].prefixes_sent),
            (Some(3), Some(2))
        );
        assert_eq!(
            (v[0].established_count, v[0].dropped_count),
            (Some(2), Some(1))
        );
        assert!(v[0].uptime_secs.is_some());
        assert_eq!(v[0].peer_graceful_restart, Some(true));
    }
}
