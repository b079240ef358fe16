//! GoBGP 3: `gobgpd` with a generated TOML config, gRPC API on the namespace's own
//! loopback (127.0.0.1:50051 is unique per namespace); queried with `gobgp ... -j`.

use std::fmt::Write as _;
use std::net::IpAddr;
use std::path::PathBuf;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::Value;

use super::{
    normalize_prefix, NeighborSpec, Peer, PeerKind, PeerSpec, RouteSpec, RouteView, SessionProbe,
    SessionView,
};
use crate::cmd::ns_exec_ok;
use crate::error::{io_ctx, parse_err, LabError, Result};
use crate::lab::{HostId, Lab, ProcId};
use crate::wait::wait_for;

const API_HOST: &str = "127.0.0.1";
const API_PORT: &str = "50051";

/// A GoBGP instance.
#[derive(Debug)]
pub struct Gobgp {
    host: HostId,
    logs: Vec<PathBuf>,
    proc: Option<ProcId>,
    spec: PeerSpec,
}

fn family(v6: bool) -> &'static str {
    if v6 {
        "ipv6"
    } else {
        "ipv4"
    }
}

fn toml_str(s: &str) -> String {
    format!("\"{}\"", s.replace('\\', "\\\\").replace('"', "\\\""))
}

fn neighbor_toml(n: &NeighborSpec) -> String {
    let mut s = String::from("[[neighbors]]\n  [neighbors.config]\n");
    let _ = writeln!(
        s,
        "    neighbor-address = \"{}\"\n    peer-as = {}",
        n.address, n.remote_as
    );
    if let Some(pw) = &n.md5 {
        let _ = writeln!(s, "    auth-password = {}", toml_str(pw));
    }
    s.push_str("  [neighbors.timers.config]\n    connect-retry = 1\n");
    if let (Some(h), Some(k)) = (n.hold_time, n.keepalive()) {
        let _ = writeln!(s, "    hold-time = {h}\n    keepalive-interval = {k}");
    }
    s.push_str("  [neighbors.transport.config]\n");
    if let Some(l) = n.local_address {
        let _ = writeln!(s, "    local-address = \"{l}\"");
    }
    let _ = writeln!(s, "    passive-mode = {}", n.passive);
    if let Some(ttl) = n.multihop {
        let _ = writeln!(
            s,
            "  [neighbors.ebgp-multihop.config]\n    enabled = true\n    multihop-ttl = {ttl}"
        );
    }
    if n.ttl_security {
        s.push_str("  [neighbors.ttl-security.config]\n    enabled = true\n    ttl-min = 255\n");
    }
    if n.graceful_restart {
        s.push_str(
            "  [neighbors.graceful-restart.config]\n    enabled = true\n    restart-time = 30\n",
        );
    }
    for (on, name) in [
        (n.families.0, "ipv4-unicast"),
        (n.families.1, "ipv6-unicast"),
    ] {
        if on {
            let _ = writeln!(s, "  [[neighbors.afi-safis]]\n    [neighbors.afi-safis.config]\n      afi-safi-name = \"{name}\"");
            if n.graceful_restart {
                s.push_str(
                    "    [neighbors.afi-safis.mp-graceful-restart.config]\n      enabled = true\n",
                );
            }
        }
    }
    s
}

fn origin_text(v: u64) -> &'static str {
    match v {
        0 => "igp",
        1 => "egp",
        _ => "incomplete",
    }
}

/// Parse one path of `gobgp ... -j` output.
fn path_view(prefix: &str, path: &Value) -> RouteView {
    let mut r = RouteView {
        prefix: prefix.to_string(),
        ..RouteView::default()
    };
    let as_u32 = |v: &Value| v.as_u64().and_then(|x| u32::try_from(x).ok());
    for a in path
        .get("attrs")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        match a.get("type").and_then(Value::as_u64) {
            Some(1) => {
                r.origin = a
                    .get("value")
                    .and_then(Value::as_u64)
                    .map(|v| origin_text(v).to_string())
            }
            Some(2) => {
                r.as_path = a
                    .get("as_paths")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                    .flat_map(|seg| {
                        seg.get("asns")
                            .and_then(Value::as_array)
                            .cloned()
                            .unwrap_or_default()
                    })
                    .filter_map(|x| as_u32(&x))
                    .collect()
            }
            Some(3) | Some(14) if r.next_hop.is_none() => {
                r.next_hop = a
                    .get("nexthop")
                    .and_then(Value::as_str)
                    .and_then(|s| s.parse::<IpAddr>().ok())
                    .filter(|ip| !ip.is_unspecified());
            }
            Some(4) => r.med = a.get("metric").and_then(as_u32),
            Some(5) => r.local_pref = a.get("value").and_then(as_u32),
            Some(8) => {
                r.communities = a
                    .get("communities")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                    .filter_map(as_u32)
                    .map(|c| ((c >> 16) as u16, (c & 0xffff) as u16))
                    .collect()
            }
            Some(32) => {
                r.large_communities = a
                    .get("value")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                    .filter_map(|l| {
                        Some((
                            l.get("ASN").and_then(as_u32)?,
                            l.get("LocalData1").and_then(as_u32)?,
                            l.get("LocalData2").and_then(as_u32)?,
                        ))
                    })
                    .collect()
            }
            _ => {}
        }
    }
    r.sort_attrs();
    r
}

/// Parse a `{prefix: [path, ...]}` table; empty/non-JSON output means "no routes".
fn parse_table(out: &str, what: &str) -> Result<Vec<RouteView>> {
    let t = out.trim();
    if !t.starts_with('{') {
        return Ok(Vec::new());
    }
    let v: Value = serde_json::from_str(t).map_err(|e| parse_err(what, e.to_string()))?;
    let mut routes = Vec::new();
    for (prefix, paths) in v.as_object().into_iter().flatten() {
        let prefix = normalize_prefix(prefix)?;
        for p in paths.as_array().into_iter().flatten() {
            routes.push(path_view(&prefix, p));
        }
    }
    Ok(routes)
}

fn state_text(v: Option<&Value>) -> String {
    match v {
        Some(Value::Number(n)) => match n.as_u64() {
            Some(1) => "Idle",
            Some(2) => "Connect",
            Some(3) => "Active",
            Some(4) => "OpenSent",
            Some(5) => "OpenConfirm",
            Some(6) => "Established",
            _ => "Unknown",
        }
        .to_string(),
        Some(Value::String(s)) => s.trim_start_matches("SESSION_STATE_").to_string(),
        _ => "Idle".to_string(),
    }
}

impl Gobgp {
    /// The daemon started earlier by [`Peer::start`] with `spec` in `host` as `procs`
    /// (see [`crate::peer::adopt`]).
    pub(super) fn adopt(
        lab: &Lab,
        host: HostId,
        spec: &PeerSpec,
        procs: &[ProcId],
    ) -> Result<Self> {
        let (_, spec) = super::prepare(lab, host, PeerKind::Gobgp, spec)?;
        let proc = procs.first().copied();
        let logs = proc
            .map(|p| {
                let (out, err) = lab.proc_logs(p);
                vec![out.to_path_buf(), err.to_path_buf()]
            })
            .unwrap_or_default();
        Ok(Gobgp {
            host,
            logs,
            proc,
            spec,
        })
    }

    fn gobgp(&self, lab: &Lab, args: &[&str]) -> Result<String> {
        let mut cmd = vec!["gobgp", "-u", API_HOST, "-p", API_PORT];
        cmd.extend_from_slice(args);
        lab.exec_ok(self.host, &cmd)
    }

    fn add_route(&self, lab: &Lab, r: &RouteSpec) -> Result<()> {
        let mut args: Vec<String> = [
            "global",
            "rib",
            "add",
            "-a",
            family(r.is_v6()),
            &r.prefix,
            "origin",
            "igp",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        if let Some(nh) = r.next_hop {
            args.extend(["nexthop".into(), nh.to_string()]);
        }
        if let Some(m) = r.med {
            args.extend(["med".into(), m.to_string()]);
        }
        if !r.communities.is_empty() {
            let c: Vec<String> = r
                .communities
                .iter()
                .map(|(a, b)| format!("{a}:{b}"))
                .collect();
            args.extend(["community".into(), c.join(",")]);
        }
        if !r.large_communities.is_empty() {
            let c: Vec<String> = r
                .large_communities
                .iter()
                .map(|(a, b, c)| format!("{a}:{b}:{c}"))
                .collect();
            args.extend(["large-community".into(), c.join(",")]);
        }
        if !r.as_path.is_empty() {
            let p: Vec<String> = r.as_path.iter().map(u32::to_string).collect();
            args.extend(["aspath".into(), p.join(" ")]);
        }
        let refs: Vec<&str> = args.iter().map(String::as_str).collect();
        self.gobgp(lab, &refs).map(drop)
    }

    fn neighbor(&self, neighbor: IpAddr) -> Result<&NeighborSpec> {
        self.spec
            .neighbors
            .iter()
            .find(|n| n.address == neighbor)
            .ok_or_else(|| LabError::Invalid(format!("gobgp has no neighbor {neighbor}")))
    }

    fn adj(&self, lab: &Lab, neighbor: IpAddr, which: &str) -> Result<Vec<RouteView>> {
        let n = self.neighbor(neighbor)?;
        let addr = neighbor.to_string();
        let mut routes = Vec::new();
        for (on, v6) in [(n.families.0, false), (n.families.1, true)] {
            if on {
                let mut cmd = vec!["gobgp", "-u", API_HOST, "-p", API_PORT];
                cmd.extend(["neighbor", &addr, which, "-a", family(v6), "-j"]);
                let out = lab.exec_ok_timeout(self.host, &cmd, TABLE_TIMEOUT)?;
                routes.extend(parse_table(&out, &format!("gobgp {which}"))?);
            }
        }
        Ok(routes)
    }
}

/// How long one listing of a whole table may take (`adj-in` / `adj-out -j`
/// of 100k routes): the gobgp CLI needs seconds for it on a quiet machine,
/// and several times that while other scenarios load the cores.
const TABLE_TIMEOUT: Duration = Duration::from_secs(60);

/// (established, dropped) transitions of the session with `addr`, from gobgpd's log
/// (`level=info msg="Peer Up" Key=198.18.1.1 ...`).
fn peer_transitions(log: &str, addr: &str) -> (u32, u32) {
    let key = format!("Key={addr} ");
    let (mut up, mut down) = (0, 0);
    for l in log.lines().filter(|l| l.contains(&key)) {
        if l.contains("msg=\"Peer Up\"") {
            up += 1;
        } else if l.contains("msg=\"Peer Down\"") {
            down += 1;
        }
    }
    (up, down)
}

/// Every session of the gobgpd in `netns`, with counters from its logs. Needs no lab
/// (see [`Peer::session_probe`]).
///
/// `advertised`: one `gobgp neighbor ADDR -j` per neighbour, the query that fills in
/// `prefixes_sent`. gobgpd computes that count by running its export policy over its
/// whole RIB in its server loop (6.7 s at 200k routes under load), so the watch, which
/// polls every 200 ms, would starve gobgpd of the time it needs to take in routes.
/// Otherwise one `gobgp neighbor -j`, the listing without advertised counts.
fn query_sessions(
    netns: &str,
    logs: &[PathBuf],
    neighbors: &[NeighborSpec],
    advertised: bool,
) -> Result<Vec<SessionView>> {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let log: String = logs
        .iter()
        .map(|p| std::fs::read_to_string(p).unwrap_or_default())
        .collect();
    let listing: Vec<Value> = if advertised {
        Vec::new()
    } else {
        let out = ns_exec_ok(
            netns,
            &["gobgp", "-u", API_HOST, "-p", API_PORT, "neighbor", "-j"],
        )
        .unwrap_or_default();
        serde_json::from_str(out.trim()).unwrap_or_default()
    };
    let mut views = Vec::new();
    for n in neighbors {
        let addr = n.address.to_string();
        let j: Option<Value> = if advertised {
            let out = ns_exec_ok(
                netns,
                &[
                    "gobgp", "-u", API_HOST, "-p", API_PORT, "neighbor", &addr, "-j",
                ],
            )
            .unwrap_or_default();
            serde_json::from_str(out.trim()).ok()
        } else {
            listing
                .iter()
                .find(|p| {
                    p.pointer("/state/neighbor_address").and_then(Value::as_str)
                        == Some(addr.as_str())
                })
                .cloned()
        };
        let Some(j) = j.filter(Value::is_object) else {
            views.push(SessionView::new(n.address, "Idle"));
            continue;
        };
        let mut s = SessionView::new(n.address, &state_text(j.pointer("/state/session_state")));
        s.remote_as = j
            .pointer("/conf/peer_asn")
            .and_then(Value::as_u64)
            .and_then(|x| u32::try_from(x).ok());
        if s.is_established() {
            s.uptime_secs = j
                .pointer("/timers/state/uptime/seconds")
                .and_then(Value::as_u64)
                .map(|t| now.saturating_sub(t));
            s.peer_graceful_restart = Some(
                j.pointer("/state/remote_cap")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                    .filter_map(|c| c.get("type_url").and_then(Value::as_str))
                    .any(|t| t.ends_with("GracefulRestartCapability")),
            );
        }
        // GoBGP 3's JSON has no session counters (`flops` is absent, and only counts
        // short-lived sessions anyway): count gobgpd's "Peer Up" / "Peer Down" log lines.
        let (up, down) = peer_transitions(&log, &addr);
        s.established_count = Some(up);
        s.dropped_count = Some(down);
        let sum = |k: &str| -> u32 {
            j.get("afi_safis")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(|a| a.pointer(&format!("/state/{k}")).and_then(Value::as_u64))
                .map(|x| u32::try_from(x).unwrap_or(u32::MAX))
                .sum()
        };
        s.prefixes_received = Some(sum("accepted"));
        s.prefixes_sent = advertised.then(|| sum("advertised"));
        views.push(s);
    }
    Ok(views)
}

impl Peer for Gobgp {
    fn kind(&self) -> PeerKind {
        PeerKind::Gobgp
    }

    fn host(&self) -> HostId {
        self.host
    }

    fn start(lab: &mut Lab, host: HostId, spec: &PeerSpec) -> Result<Self> {
        let (dir, spec) = super::prepare(lab, host, PeerKind::Gobgp, spec)?;
        let mut conf = format!(
            "[global.config]\n  as = {}\n  router-id = \"{}\"\n  port = 179\n",
            spec.local_as, spec.router_id
        );
        for n in &spec.neighbors {
            conf.push_str(&neighbor_toml(n));
        }
        let conf_path = dir.join("gobgpd.toml");
        std::fs::write(&conf_path, conf).map_err(io_ctx("writing gobgpd.toml"))?;
        let conf_s = conf_path.to_string_lossy().into_owned();
        let api = format!("--api-hosts={API_HOST}:{API_PORT}");
        let name = format!("gobgpd-{}", lab.host_info(host).name);
        let proc = lab.spawn(
            host,
            &name,
            &["gobgpd", "-f", &conf_s, "-t", "toml", "-p", &api],
            &[],
        )?;
        let (out, err) = lab.proc_logs(proc);
        let mut g = Gobgp {
            host,
            logs: vec![out.to_path_buf(), err.to_path_buf()],
            proc: Some(proc),
            spec,
        };
        wait_for("gobgpd API", Duration::from_secs(10), || {
            Ok(g.gobgp(lab, &["global", "-j"]).ok())
        })?;
        let routes = std::mem::take(&mut g.spec.routes);
        g.announce(lab, &routes)?;
        Ok(g)
    }

    fn sessions(&self, lab: &Lab) -> Result<Vec<SessionView>> {
        query_sessions(lab.netns(self.host), &self.logs, &self.spec.neighbors, true)
    }

    fn session_probe(&self, lab: &Lab) -> SessionProbe {
        let netns = lab.netns(self.host).to_string();
        let (logs, neighbors) = (self.logs.clone(), self.spec.neighbors.clone());
        Box::new(move || query_sessions(&netns, &logs, &neighbors, false))
    }

    fn reset_session(&self, lab: &Lab, neighbor: IpAddr) -> Result<()> {
        self.neighbor(neighbor)?;
        self.gobgp(lab, &["neighbor", &neighbor.to_string(), "reset"])
            .map(drop)
    }

    fn received_routes(&self, lab: &Lab, neighbor: IpAddr) -> Result<Vec<RouteView>> {
        self.adj(lab, neighbor, "adj-in")
    }

    fn advertised_routes(&self, lab: &Lab, neighbor: IpAddr) -> Result<Vec<RouteView>> {
        self.adj(lab, neighbor, "adj-out")
    }

    fn announce(&mut self, lab: &Lab, routes: &[RouteSpec]) -> Result<()> {
        for r in routes {
            let mut r = r.clone();
            r.prefix = normalize_prefix(&r.prefix)?;
            if self.spec.routes.iter().any(|x| x.prefix == r.prefix) {
                self.gobgp(
                    lab,
                    &["global", "rib", "del", "-a", family(r.is_v6()), &r.prefix],
                )?;
            }
            self.add_route(lab, &r)?;
            self.spec.routes.retain(|x| x.prefix != r.prefix);
            self.spec.routes.push(r);
        }
        Ok(())
    }

    fn withdraw(&mut self, lab: &Lab, prefixes: &[String]) -> Result<()> {
        for p in prefixes {
            let p = normalize_prefix(p)?;
            self.gobgp(
                lab,
                &["global", "rib", "del", "-a", family(p.contains(':')), &p],
            )?;
            self.spec.routes.retain(|x| x.prefix != p);
        }
        Ok(())
    }

    fn log_text(&self) -> Result<String> {
        let mut text = String::new();
        for p in &self.logs {
            text.push_str(
                &std::fs::read_to_string(p).map_err(io_ctx(format!("reading {}", p.display())))?,
            );
        }
        Ok(text)
    }

    fn log_files(&self) -> Vec<PathBuf> {
        self.logs.clone()
    }

    fn notification_markers(&self) -> &'static [&'static str] {
        &["notification", "Notification", "NOTIFICATION"]
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

    #[test]
    fn parses_adj_rib_paths() {
        let out = r#"{"2001:db8:8::/48":[{"nlri":{"prefix":"2001:db8:8::/48"},"attrs":[{"type":1,"value":0},{"type":2,"as_paths":[{"segment_type":2,"num":2,"asns":[65001,64512]}]},{"type":4,"metric":3},{"type":8,"communities":[4259905543]},{"type":32,"value":[{"ASN":65001,"LocalData1":5,"LocalData2":6}]},{"type":14,"nexthop":"fd00:0:0:1::1","afi":2,"safi":1}]}]}"#;
        let r = parse_table(out, "test").unwrap();
        assert_eq!(r.len(), 1);
        assert_eq!(r[0].as_path, vec![65001, 64512]);
        assert_eq!(r[0].communities, vec![(65001, 7)]);
        assert_eq!(r[0].large_communities, vec![(65001, 5, 6)]);
        assert_eq!(r[0].next_hop, Some("fd00:0:0:1::1".parse().unwrap()));
        assert_eq!((r[0].med, r[0].origin.as_deref()), (Some(3), Some("igp")));
        assert!(parse_table("Network not in table\n", "test")
            .unwrap()
            .is_empty());
    }

    #[test]
    fn maps_numeric_and_text_states() {
        assert_eq!(state_text(Some(&serde_json::json!(6))), "Established");
        assert_eq!(
            state_text(Some(&serde_json::json!("SESSION_STATE_ACTIVE"))),
            "ACTIVE"
        );
    }

    #[test]
    fn counts_transitions_from_the_log() {
        let log = "time=\"t\" level=info msg=\"Peer Up\" Key=198.18.1.1 State=BGP_FSM_OPENCONFIRM Topic=Peer\n\
                   time=\"t\" level=info msg=\"Peer Down\" Key=198.18.1.1 Reason=\"x\" State=BGP_FSM_ESTABLISHED Topic=Peer\n\
                   time=\"t\" level=info msg=\"Peer Up\" Key=198.18.1.11 State=BGP_FSM_OPENCONFIRM Topic=Peer\n\
                   time=\"t\" level=info msg=\"Peer Up\" Key=198.18.1.1 State=BGP_FSM_OPENCONFIRM Topic=Peer\n";
        assert_eq!(peer_transitions(log, "198.18.1.1"), (2, 1));
        assert_eq!(peer_transitions(log, "198.18.1.11"), (1, 0));
    }
}
