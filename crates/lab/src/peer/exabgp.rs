//! ExaBGP 4.2: one `exabgp` per host with a python API helper (`api.py`, generated).
//! The helper forwards lines appended to `commands.txt` to ExaBGP (announce/withdraw at
//! runtime) and appends every JSON message ExaBGP sends it (state changes, OPENs,
//! parsed UPDATEs, NOTIFICATIONs) to `events.jsonl`, from which sessions and received
//! routes are reconstructed.

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::io::Write as _;
use std::net::IpAddr;
use std::path::PathBuf;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::Value;

use super::{
    normalize_prefix, NeighborSpec, Peer, PeerKind, PeerSpec, RouteSpec, RouteView, SessionProbe,
    SessionView,
};
use crate::error::{io_ctx, LabError, Result};
use crate::lab::{HostId, Lab, ProcId};
use crate::wait::wait_for;

const HELPER: &str = r#"import os, sys, threading, time
cmd_path, ev_path = sys.argv[1], sys.argv[2]
def reader():
    with open(ev_path, 'a', buffering=1) as ev:
        for line in sys.stdin:
            ev.write(line)
    os._exit(0)
open(ev_path, 'a').close()
threading.Thread(target=reader, daemon=True).start()
pos = 0
while True:
    try:
        with open(cmd_path, 'rb') as f:
            f.seek(pos)
            while True:
                line = f.readline()
                if not line.endswith(b'\n'):
                    break
                pos += len(line)
                sys.stdout.write(line.decode())
                sys.stdout.flush()
    except FileNotFoundError:
        pass
    time.sleep(0.05)
"#;

/// An ExaBGP instance.
#[derive(Debug)]
pub struct Exabgp {
    host: HostId,
    commands: PathBuf,
    events: PathBuf,
    log: PathBuf,
    proc: Option<ProcId>,
    spec: PeerSpec,
}

#[derive(Debug, Default)]
struct NeighborState {
    state: String,
    up_since: Option<f64>,
    ups: u32,
    downs: u32,
    peer_gr: Option<bool>,
    rib: BTreeMap<String, RouteView>,
}

/// The AS path ExaBGP must be told to send: it sends an explicit `as-path` verbatim, so
/// on eBGP the local AS is put in front to match the other peers' behaviour.
fn wire_as_path(n: &NeighborSpec, r: &RouteSpec, local_as: u32) -> Vec<u32> {
    let mut path = Vec::with_capacity(r.as_path.len() + 1);
    if !r.as_path.is_empty() && n.remote_as != local_as {
        path.push(local_as);
    }
    path.extend(&r.as_path);
    path
}

fn announce_line(n: &NeighborSpec, r: &RouteSpec, local_as: u32) -> String {
    let mut s = format!(
        "neighbor {} announce route {} next-hop ",
        n.address, r.prefix
    );
    match (r.next_hop, n.local_address) {
        (Some(nh), _) => {
            let _ = write!(s, "{nh}");
        }
        // `self` on an IPv4 transport gives an IPv6 route a 4-byte next hop, which
        // receivers must treat as a session reset (RFC 7606 §7.11); use the IPv4-mapped
        // address instead.
        (None, Some(IpAddr::V4(l))) if r.is_v6() => {
            let _ = write!(s, "{}", l.to_ipv6_mapped());
        }
        (None, _) => s.push_str("self"),
    }
    s.push_str(" origin igp");
    if let Some(m) = r.med {
        let _ = write!(s, " med {m}");
    }
    if !r.communities.is_empty() {
        let c: Vec<String> = r
            .communities
            .iter()
            .map(|(a, b)| format!("{a}:{b}"))
            .collect();
        let _ = write!(s, " community [ {} ]", c.join(" "));
    }
    if !r.large_communities.is_empty() {
        let c: Vec<String> = r
            .large_communities
            .iter()
            .map(|(a, b, c)| format!("{a}:{b}:{c}"))
            .collect();
        let _ = write!(s, " large-community [ {} ]", c.join(" "));
    }
    let path = wire_as_path(n, r, local_as);
    if !path.is_empty() {
        let p: Vec<String> = path.iter().map(u32::to_string).collect();
        let _ = write!(s, " as-path [ {} ]", p.join(" "));
    }
    s
}

fn carries(n: &NeighborSpec, r: &RouteSpec) -> bool {
    if r.is_v6() {
        n.families.1
    } else {
        n.families.0
    }
}

fn neighbor_conf(n: &NeighborSpec, spec: &PeerSpec) -> Result<String> {
    let local = n.local_address.ok_or_else(|| {
        LabError::Invalid(format!("exabgp neighbor {} needs local_address", n.address))
    })?;
    if n.ttl_security && n.passive {
        return Err(LabError::Invalid(format!(
            "exabgp neighbor {}: ttl_security needs an active session (its listening socket \
             answers with TTL 64)",
            n.address
        )));
    }
    let mut s = format!("neighbor {} {{\n", n.address);
    let _ = writeln!(
        s,
        "  router-id {};\n  local-address {local};",
        spec.router_id
    );
    let _ = writeln!(
        s,
        "  local-as {};\n  peer-as {};",
        spec.local_as, n.remote_as
    );
    if let Some(h) = n.hold_time {
        let _ = writeln!(s, "  hold-time {h};");
    }
    if let Some(pw) = &n.md5 {
        let _ = writeln!(s, "  md5-password \"{}\";", pw.replace('"', ""));
    }
    if n.passive {
        s.push_str("  passive true;\n");
    }
    if n.ttl_security {
        s.push_str("  outgoing-ttl 255;\n  incoming-ttl 255;\n");
    } else if let Some(ttl) = n.multihop {
        let _ = writeln!(s, "  outgoing-ttl {ttl};");
    }
    if n.graceful_restart {
        s.push_str("  capability { graceful-restart 30; }\n");
    }
    s.push_str("  family {");
    if n.families.0 {
        s.push_str(" ipv4 unicast;");
    }
    if n.families.1 {
        s.push_str(" ipv6 unicast;");
    }
    s.push_str(" }\n");
    s.push_str("  api { processes [ hfapi ]; neighbor-changes; receive { parsed; update; notification; open; } }\n}\n");
    Ok(s)
}

fn u32_of(v: &Value) -> Option<u32> {
    v.as_u64().and_then(|x| u32::try_from(x).ok())
}

fn attrs_view(attr: Option<&Value>) -> RouteView {
    let mut r = RouteView::default();
    let Some(a) = attr else { return r };
    r.origin = a.get("origin").and_then(Value::as_str).map(str::to_string);
    r.as_path = a
        .get("as-path")
        .map(|p| {
            let mut out = Vec::new();
            flatten_asns(p, &mut out);
            out
        })
        .unwrap_or_default();
    r.med = a.get("med").and_then(u32_of);
    r.local_pref = a.get("local-preference").and_then(u32_of);
    r.communities = a
        .get("community")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|c| {
            let c = c.as_array()?;
            Some((
                u16::try_from(c.first()?.as_u64()?).ok()?,
                u16::try_from(c.get(1)?.as_u64()?).ok()?,
            ))
        })
        .collect();
    r.large_communities = a
        .get("large-community")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|c| {
            let c = c.as_array()?;
            Some((u32_of(c.first()?)?, u32_of(c.get(1)?)?, u32_of(c.get(2)?)?))
        })
        .collect();
    r.sort_attrs();
    r
}

fn flatten_asns(v: &Value, out: &mut Vec<u32>) {
    match v {
        Value::Array(a) => a.iter().for_each(|x| flatten_asns(x, out)),
        Value::Object(o) => o.values().for_each(|x| flatten_asns(x, out)),
        other => out.extend(u32_of(other)),
    }
}

fn nlri_text(v: &Value) -> Option<&str> {
    v.as_str().or_else(|| v.get("nlri").and_then(Value::as_str))
}

/// Replay the event stream into per-neighbour state.
fn replay(events: &str) -> HashMap<IpAddr, NeighborState> {
    let mut map: HashMap<IpAddr, NeighborState> = HashMap::new();
    for line in events.lines().filter(|l| l.starts_with('{')) {
        let Ok(ev) = serde_json::from_str::<Value>(line) else {
            continue;
        };
        let Some(peer) = ev
            .pointer("/neighbor/address/peer")
            .and_then(Value::as_str)
            .and_then(|s| s.parse::<IpAddr>().ok())
        else {
            continue;
        };
        let st = map.entry(peer).or_default();
        match ev.get("type").and_then(Value::as_str) {
            Some("state") => {
                let s = ev
                    .pointer("/neighbor/state")
                    .and_then(Value::as_str)
                    .unwrap_or("");
                st.state = s.to_string();
                match s {
                    "up" => {
                        st.ups += 1;
                        st.up_since = ev.get("time").and_then(Value::as_f64);
                    }
                    "down" => {
                        if st.up_since.take().is_some() {
                            st.downs += 1;
                        }
                        st.rib.clear();
                    }
                    _ => {}
                }
            }
            Some("open")
                if ev.pointer("/neighbor/direction").and_then(Value::as_str) == Some("receive") =>
            {
                let caps = ev
                    .pointer("/neighbor/open/capabilities")
                    .and_then(Value::as_object);
                st.peer_gr = Some(caps.into_iter().flatten().any(|(_, c)| {
                    c.get("name").and_then(Value::as_str) == Some("graceful restart")
                }));
            }
            Some("update") => {
                let Some(u) = ev.pointer("/neighbor/message/update") else {
                    continue;
                };
                for fams in u
                    .get("withdraw")
                    .and_then(Value::as_object)
                    .into_iter()
                    .flatten()
                    .map(|(_, v)| v)
                {
                    for n in fams.as_array().into_iter().flatten().filter_map(nlri_text) {
                        if let Ok(p) = normalize_prefix(n) {
                            st.rib.remove(&p);
                        }
                    }
                }
                let base = attrs_view(u.get("attribute"));
                // ExaBGP 4.0 lists a 32-byte IPv6 next hop (global + link-local) as two
                // next-hop keys with the same NLRI; keep the global one.
                let mut global_nh = std::collections::HashSet::new();
                for (_, by_nh) in u
                    .get("announce")
                    .and_then(Value::as_object)
                    .into_iter()
                    .flatten()
                {
                    for (nh, nlris) in by_nh.as_object().into_iter().flatten() {
                        for n in nlris.as_array().into_iter().flatten().filter_map(nlri_text) {
                            let Ok(p) = normalize_prefix(n) else { continue };
                            let next_hop: Option<IpAddr> = nh.parse().ok();
                            let link_local = matches!(next_hop, Some(IpAddr::V6(a)) if a.segments()[0] & 0xffc0 == 0xfe80);
                            if link_local && global_nh.contains(&p) {
                                continue;
                            }
                            if !link_local {
                                global_nh.insert(p.clone());
                            }
                            let mut r = base.clone();
                            r.prefix = p.clone();
                            r.next_hop = next_hop;
                            st.rib.insert(p, r);
                        }
                    }
                }
            }
            _ => {}
        }
    }
    map
}

/// Every configured session, reconstructed from the API events (`events.jsonl`).
fn sessions_of(events: &str, spec: &PeerSpec) -> Vec<SessionView> {
    let map = replay(events);
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64());
    spec.neighbors
        .iter()
        .map(|n| {
            let Some(st) = map.get(&n.address) else {
                let mut v = SessionView::new(n.address, "idle");
                v.remote_as = Some(n.remote_as);
                return v;
            };
            let raw = match st.state.as_str() {
                "up" => "established",
                "connected" => "opensent",
                "" | "down" => "idle",
                other => other,
            };
            let mut v = SessionView::new(n.address, raw);
            v.raw_state = st.state.clone();
            v.remote_as = Some(n.remote_as);
            v.uptime_secs = st.up_since.map(|t| (now - t).max(0.0) as u64);
            v.established_count = Some(st.ups);
            v.dropped_count = Some(st.downs);
            v.prefixes_received = Some(st.rib.len() as u32);
            if v.is_established() {
                v.peer_graceful_restart = st.peer_gr;
                v.prefixes_sent = Some(spec.routes.iter().filter(|r| carries(n, r)).count() as u32);
            }
            v
        })
        .collect()
}

impl Exabgp {
    /// The daemon started earlier by [`Peer::start`] with `spec` in `host` as `procs`
    /// (see [`crate::peer::adopt`]).
    pub(super) fn adopt(
        lab: &Lab,
        host: HostId,
        spec: &PeerSpec,
        procs: &[ProcId],
    ) -> Result<Self> {
        let (dir, spec) = super::prepare(lab, host, PeerKind::Exabgp, spec)?;
        Ok(Exabgp {
            host,
            commands: dir.join("commands.txt"),
            events: dir.join("events.jsonl"),
            log: dir.join("exabgp.log"),
            proc: procs.first().copied(),
            spec,
        })
    }

    fn send(&self, lines: &[String]) -> Result<()> {
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .create(true)
            .open(&self.commands)
            .map_err(io_ctx("opening exabgp command file"))?;
        let mut text = String::new();
        for l in lines {
            text.push_str(l);
            text.push('\n');
        }
        f.write_all(text.as_bytes())
            .map_err(io_ctx("writing exabgp command file"))
    }

    fn events_text(&self) -> String {
        std::fs::read_to_string(&self.events).unwrap_or_default()
    }

    /// Raw NOTIFICATION events (JSON lines) received so far.
    pub fn notifications(&self) -> Vec<String> {
        self.events_text()
            .lines()
            .filter(|l| l.contains("\"type\": \"notification\""))
            .map(str::to_string)
            .collect()
    }

    fn neighbor(&self, neighbor: IpAddr) -> Result<&NeighborSpec> {
        self.spec
            .neighbors
            .iter()
            .find(|n| n.address == neighbor)
            .ok_or_else(|| LabError::Invalid(format!("exabgp has no neighbor {neighbor}")))
    }
}

impl Peer for Exabgp {
    fn kind(&self) -> PeerKind {
        PeerKind::Exabgp
    }

    fn host(&self) -> HostId {
        self.host
    }

    fn start(lab: &mut Lab, host: HostId, spec: &PeerSpec) -> Result<Self> {
        let (dir, spec) = super::prepare(lab, host, PeerKind::Exabgp, spec)?;
        let ex = Exabgp {
            host,
            commands: dir.join("commands.txt"),
            events: dir.join("events.jsonl"),
            log: dir.join("exabgp.log"),
            proc: None,
            spec,
        };
        let helper = dir.join("api.py");
        std::fs::write(&helper, HELPER).map_err(io_ctx("writing api.py"))?;
        let mut conf = format!(
            "process hfapi {{\n  run /usr/bin/env python3 {} {} {};\n  encoder json;\n}}\n",
            helper.display(),
            ex.commands.display(),
            ex.events.display()
        );
        for n in &ex.spec.neighbors {
            conf.push_str(&neighbor_conf(n, &ex.spec)?);
        }
        let conf_path = dir.join("exabgp.conf");
        std::fs::write(&conf_path, conf).map_err(io_ctx("writing exabgp.conf"))?;
        std::fs::write(&ex.commands, "").map_err(io_ctx("creating exabgp command file"))?;
        let initial: Vec<String> = ex
            .spec
            .neighbors
            .iter()
            .flat_map(|n| {
                ex.spec
                    .routes
                    .iter()
                    .filter(|r| carries(n, r))
                    .map(|r| announce_line(n, r, ex.spec.local_as))
            })
            .collect();
        ex.send(&initial)?;
        let binds: Vec<String> = ex
            .spec
            .neighbors
            .iter()
            .filter(|n| n.passive)
            .filter_map(|n| n.local_address.map(|a| a.to_string()))
            .collect();
        let log_s = ex.log.to_string_lossy().into_owned();
        let bind_s = binds.join(" ");
        let mut env = vec![
            ("exabgp.daemon.user", "root"),
            ("exabgp.daemon.daemonize", "false"),
            ("exabgp.daemon.drop", "false"),
            ("exabgp.log.destination", log_s.as_str()),
            ("exabgp.log.level", "INFO"),
            ("exabgp.api.cli", "false"),
        ];
        if !binds.is_empty() {
            env.push(("exabgp.tcp.bind", bind_s.as_str()));
            env.push(("exabgp.tcp.port", "179"));
        }
        let conf_s = conf_path.to_string_lossy().into_owned();
        let name = format!("exabgp-{}", lab.host_info(host).name);
        let proc = lab.spawn(host, &name, &["exabgp", &conf_s], &env)?;
        let mut ex = ex;
        ex.proc = Some(proc);
        wait_for("exabgp API helper", Duration::from_secs(20), || {
            Ok(ex.events.exists().then_some(()))
        })?;
        Ok(ex)
    }

    fn sessions(&self, _lab: &Lab) -> Result<Vec<SessionView>> {
        Ok(sessions_of(&self.events_text(), &self.spec))
    }

    /// The probe replays the events file; its `prefixes_sent` counts the routes announced
    /// when the probe was made.
    fn session_probe(&self, _lab: &Lab) -> SessionProbe {
        let (events, spec) = (self.events.clone(), self.spec.clone());
        Box::new(move || {
            let text = std::fs::read_to_string(&events).unwrap_or_default();
            Ok(sessions_of(&text, &spec))
        })
    }

    fn received_routes(&self, _lab: &Lab, neighbor: IpAddr) -> Result<Vec<RouteView>> {
        self.neighbor(neighbor)?;
        let mut map = replay(&self.events_text());
        Ok(map
            .remove(&neighbor)
            .map(|s| s.rib.into_values().collect())
            .unwrap_or_default())
    }

    /// ExaBGP cannot report its Adj-RIB-Out here; this returns the routes the harness told
    /// it to announce to `neighbor` (AS path as put on the wire when explicit).
    fn advertised_routes(&self, _lab: &Lab, neighbor: IpAddr) -> Result<Vec<RouteView>> {
        let n = self.neighbor(neighbor)?;
        Ok(self
            .spec
            .routes
            .iter()
            .filter(|r| carries(n, r))
            .map(|r| {
                let mut v = RouteView {
                    prefix: r.prefix.clone(),
                    next_hop: r.next_hop.or(n.local_address),
                    as_path: wire_as_path(n, r, self.spec.local_as),
                    med: r.med,
                    local_pref: None,
                    communities: r.communities.clone(),
                    large_communities: r.large_communities.clone(),
                    origin: Some("igp".into()),
                };
                v.sort_attrs();
                v
            })
            .collect())
    }

    fn announce(&mut self, _lab: &Lab, routes: &[RouteSpec]) -> Result<()> {
        let mut lines = Vec::new();
        for r in routes {
            let mut r = r.clone();
            r.prefix = normalize_prefix(&r.prefix)?;
            for n in self.spec.neighbors.iter().filter(|n| carries(n, &r)) {
                lines.push(announce_line(n, &r, self.spec.local_as));
            }
            self.spec.routes.retain(|x| x.prefix != r.prefix);
            self.spec.routes.push(r);
        }
        self.send(&lines)
    }

    fn withdraw(&mut self, _lab: &Lab, prefixes: &[String]) -> Result<()> {
        let mut lines = Vec::new();
        for p in prefixes {
            let p = normalize_prefix(p)?;
            if let Some(r) = self.spec.routes.iter().find(|r| r.prefix == p) {
                for n in self.spec.neighbors.iter().filter(|n| carries(n, r)) {
                    lines.push(format!("neighbor {} withdraw route {p}", n.address));
                }
            }
            self.spec.routes.retain(|x| x.prefix != p);
        }
        self.send(&lines)
    }

    fn log_text(&self) -> Result<String> {
        let mut text = std::fs::read_to_string(&self.log).unwrap_or_default();
        text.push_str(&self.events_text());
        Ok(text)
    }

    fn log_files(&self) -> Vec<PathBuf> {
        vec![self.log.clone(), self.events.clone()]
    }

    fn notification_markers(&self) -> &'static [&'static str] {
        &["\"type\": \"notification\""]
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

    const EVENTS: &str = r#"{ "type": "state", "time": 1.0, "neighbor": { "address": { "local": "198.18.1.2", "peer": "198.18.1.1" }, "state": "up" } }
done
{ "type": "update", "neighbor": { "address": { "local": "198.18.1.2", "peer": "198.18.1.1" }, "message": { "update": { "attribute": { "origin": "igp", "as-path": [ 65001, 64512 ], "med": 3, "community": [ [ 65001, 7 ] ], "large-community": [ [ 65001, 5, 6 ] ] }, "announce": { "ipv4 unicast": { "198.18.1.1": [ { "nlri": "198.51.100.0/24" }, { "nlri": "192.0.2.0/25" } ] } } } } } }
{ "type": "update", "neighbor": { "address": { "local": "198.18.1.2", "peer": "198.18.1.1" }, "message": { "update": { "withdraw": { "ipv4 unicast": [ { "nlri": "192.0.2.0/25" } ] } } } } }
"#;

    #[test]
    fn replays_state_and_updates() {
        let peer: IpAddr = "198.18.1.1".parse().unwrap();
        let map = replay(EVENTS);
        let st = &map[&peer];
        assert_eq!((st.state.as_str(), st.ups, st.downs), ("up", 1, 0));
        assert_eq!(st.rib.len(), 1);
        let r = &st.rib["198.51.100.0/24"];
        assert_eq!(r.as_path, vec![65001, 64512]);
        assert_eq!(r.next_hop, Some(peer));
        assert_eq!((r.med, r.communities.clone()), (Some(3), vec![(65001, 7)]));

        let down = format!(
            "{EVENTS}{}\n",
            r#"{ "type": "state", "neighbor": { "address": { "peer": "198.18.1.1" }, "state": "down" } }"#
        );
        let st = &replay(&down)[&peer];
        assert_eq!((st.downs, st.rib.len()), (1, 0));
    }

    #[test]
    fn ipv6_global_next_hop_wins_over_link_local() {
        // As ExaBGP 4.0.1 prints a 32-byte next hop: both addresses as keys.
        let ev = r#"{ "type": "update", "neighbor": { "address": { "local": "fd00:0:0:1::2", "peer": "fd00:0:0:1::1" }, "message": { "update": { "attribute": { "origin": "igp", "as-path": [ 65000 ] }, "announce": { "ipv6 unicast": { "fe80::1": [ { "nlri": "2001:db8:a0::/48" } ], "2001:db8:ffff::1": [ { "nlri": "2001:db8:a0::/48" } ] } } } } } }"#;
        let peer: IpAddr = "fd00:0:0:1::1".parse().unwrap();
        let r = &replay(ev)[&peer].rib["2001:db8:a0::/48"];
        assert_eq!(r.next_hop, Some("2001:db8:ffff::1".parse().unwrap()));
    }

    #[test]
    fn prepends_local_as_to_explicit_paths_on_ebgp() {
        let n = NeighborSpec::new("198.18.1.1".parse().unwrap(), 65001);
        let r = RouteSpec::new("203.0.113.0/24")
            .as_path(&[64512])
            .med(5)
            .community(1, 2);
        let line = announce_line(&n, &r, 65002);
        assert!(line.contains("as-path [ 65002 64512 ]"), "{line}");
        assert!(line.starts_with("neighbor 198.18.1.1 announce route 203.0.113.0/24 next-hop self"));
        assert!(announce_line(&n, &RouteSpec::new("203.0.113.0/24"), 65002)
            .find("as-path")
            .is_none());
    }

    #[test]
    fn ipv6_route_over_ipv4_transport_gets_a_mapped_next_hop() {
        let n = NeighborSpec::new("198.18.1.1".parse().unwrap(), 65001)
            .local("198.18.1.2".parse().unwrap())
            .families(true, true);
        let line = announce_line(&n, &RouteSpec::new("2001:db8::/32"), 65002);
        assert!(line.contains("next-hop ::ffff:198.18.1.2 "), "{line}");
        let line = announce_line(&n, &RouteSpec::new("203.0.113.0/24"), 65002);
        assert!(line.contains("next-hop self "), "{line}");
    }
}
