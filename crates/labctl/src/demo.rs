//! `make demo`: a holdfastd unit with real peers survives TENSOR's four failure kinds,
//! and the peers never notice.
//!
//! [`run`] builds a scenario with [`crate::command::up`] (by default
//! `lab/scenarios/demo`: an frr and a bird2 peer sending 100k routes in, holdfastd
//! announcing 10k out) with its control plane (etcd, three `holdfast-controller`
//! replicas, the host agents, the agent server's agent), captures inside each peer's
//! namespace, waits until every route is where it belongs, then injects each failure
//! kind of TENSOR Table 1 in turn with [`OpenLab::fail`] (the lab injects; the
//! controller finds the failure and moves the unit through the agents), heals failed
//! hosts (`holdfast ctl reset` included), and tears the lab down on every exit path.
//!
//! For every failure it reports TENSOR Table 1's phases:
//!
//! | column | what it covers |
//! |---|---|
//! | failure detection | the controller's own detection and localization time: its verdict's `detection_ms` (first bad measurement → verdict) |
//! | initiate NSR migration | the verdict → the new holdfastd's start on the other host (the controller fencing the old primary and commanding the agents), then its claim of the store's epoch and the load of the replicated state (holdfastd's `show nsr` figures) |
//! | TCP recovery | the wait for the service address (moved by the agent) and the TCP_REPAIR restore holdfastd reports |
//! | BGP application recovery | the rest until holdfastd's tables are rebuilt |
//!
//! and, next to them, what each peer saw, from the peer's own side:
//!
//! | column | source |
//! |---|---|
//! | session resets | the peer's CLI sampled every 100 ms ([`holdfast_lab::PeerWatch`]: state, established/dropped counters, uptime), and new TCP connections in the peer's capture |
//! | NOTIFICATIONs | the peer's log since the failure, and NOTIFICATION messages in its capture |
//! | routes withdrawn / re-learned | prefixes withdrawn / announced in the UPDATEs the peer received from the service address since the failure ([`holdfast_lab::pcap`]), and drops of its received-prefix count |
//! | longest gap | the longest time between two BGP messages (KEEPALIVE or UPDATE) the peer received, from the last one before the failure to the first one after recovery |
//! | BFD Down | the peer's BFD session with holdfastd read from its own CLI when the failure starts and after recovery: frr's `session-down` counter (`show bfd peers counters json`), its state and uptime going back (`show bfd peers json`); bird2's state and "Since" (`show bfd sessions`); `–` for a peer without BFD |
//!
//! [`DemoReport::check`] asserts the zero columns, BFD Down included (and a gap below
//! the hold time).
//!
//! Known issues: a host or host-network failure takes about 3.3–3.7 s to detect (the
//! agents' 3 s etcd lease, the localization's 3 s confirmation): BGP's 9 s hold time and
//! the BFD relay (its `--cover-ms` 10 s) cover it. The verdict's time and the new
//! process's start come from two clocks of the same machine (the controller's status,
//! `/proc`), with `/proc`'s 10 ms resolution; the detection column does not include the
//! time from the failure to the controller's first bad measurement.

use std::fmt::Write as _;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde::Serialize;

use holdfast_lab::pcap::{bgp_messages, BgpRecord};
use holdfast_lab::{wait_ok, BfdView, LabError, LogMark, PeerWatch, Result, WatchReport};

use crate::command::{self, FailReport, FailureKind, OpenLab};
use crate::scenario::{RouteSet, Scenario};

mod floor;
mod report;

pub use floor::{bfd_floor, FloorReport, FloorRow};
use report::bfd_cell;

/// Deadline for routes to converge after `up` and after each takeover.
const CONVERGE: Duration = Duration::from_secs(120);
/// Peer-side sampling interval during a failure.
const WATCH_EVERY: Duration = Duration::from_millis(100);
/// Watching goes on this long after the first post-recovery message.
const SETTLE: Duration = Duration::from_millis(1500);

/// What [`run`] does.
#[derive(Debug, Clone)]
pub struct DemoOptions {
    /// The scenario file.
    pub scenario: PathBuf,
    /// The lab's state file (the lab is torn down at the end).
    pub state_file: PathBuf,
    /// Where the Markdown, PNG and JSON reports go (`None`: not written).
    pub report_dir: Option<PathBuf>,
    /// Routes the peers send holdfastd, in total, split evenly over the peers (`None`:
    /// as the scenario says).
    pub routes_in: Option<u32>,
    /// Routes holdfastd originates (`None`: as the scenario says).
    pub routes_out: Option<u32>,
    /// The failures, in order (each kind once by default).
    pub kinds: Vec<FailureKind>,
    /// BFD interval (ms, both ways) of every peer that runs BFD (`None`: as the
    /// scenario says).
    pub bfd_interval_ms: Option<u32>,
    /// Run the scenario's BFD relay (`false`: without it, a negative control for BFD).
    pub relay: bool,
    /// After the failures, a negative control: every peer resets its session (its own
    /// `clear`/`restart`), measured like a failure. Its columns must not be zero.
    pub control: bool,
    /// A plaintext control plane and store (`holdfast-demo --insecure`, as `lab up
    /// --insecure`); secure by default.
    pub insecure: bool,
}

impl DemoOptions {
    /// The shipped demo scenario with the four kinds, reports into `lab/reports/`.
    pub fn new(scenario: PathBuf, state_file: PathBuf) -> Self {
        DemoOptions {
            scenario,
            state_file,
            report_dir: None,
            routes_in: None,
            routes_out: None,
            bfd_interval_ms: None,
            relay: true,
            insecure: false,
            kinds: vec![
                FailureKind::Application,
                FailureKind::Container,
                FailureKind::Host,
                FailureKind::HostNetwork,
            ],
            control: false,
        }
    }
}

/// What one peer saw during one failure.
#[derive(Debug, Clone, Serialize)]
pub struct PeerSeen {
    /// Peer unit name.
    pub peer: String,
    /// Its daemon (`frr`, `bird2`, ...).
    pub daemon: String,
    /// Session resets (see the module doc).
    pub resets: u32,
    /// NOTIFICATIONs sent or received.
    pub notifications: u32,
    /// Prefixes withdrawn from it.
    pub withdrawn: u32,
    /// Prefixes announced to it again.
    pub relearned: u32,
    /// Longest time between two messages it received, seconds.
    pub longest_gap_s: f64,
    /// Messages it received from the failure until the end of the watch.
    pub messages: u32,
    /// Fewest prefixes it held from holdfastd during the failure (its own CLI).
    pub min_prefixes: Option<u32>,
    /// Its CLI samples during the failure.
    pub samples: usize,
    /// BFD Down events of its BFD session with holdfastd, by its own CLI before and
    /// after (frr: the `session-down` counter, and the uptime going back or the state
    /// not up; bird2: the state not Up or "Since" changed); `None` without BFD.
    pub bfd_downs: Option<u32>,
    /// The interval the peer's BFD session sends at afterwards, ms, by its own CLI.
    pub bfd_interval_ms: Option<u32>,
    /// What made any column non-zero.
    pub evidence: Vec<String>,
}

/// One failure and its recovery.
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    /// The kind.
    pub kind: FailureKind,
    /// `lab fail` target.
    pub target: String,
    /// The old primary's host.
    pub from_host: String,
    /// The new primary's host.
    pub to_host: String,
    /// Table 1 phases, seconds.
    pub detection_s: f64,
    /// Fence, start the backup, claim, load.
    pub initiate_s: f64,
    /// Address move and TCP_REPAIR.
    pub tcp_s: f64,
    /// Until Established and tables rebuilt.
    pub bgp_s: f64,
    /// Sum of the four.
    pub total_s: f64,
    /// Routes in the new primary's Loc-RIB after recovery.
    pub routes_after: u64,
    /// What each peer saw.
    pub peers: Vec<PeerSeen>,
    /// `lab fail`'s own report.
    pub fail: FailReport,
}

/// The whole run.
#[derive(Debug, Clone, Serialize)]
pub struct DemoReport {
    /// Scenario name.
    pub scenario: String,
    /// The lab's run id (its namespaces are `hf<run id>-<host>`).
    pub run_id: String,
    /// Start, ms since the Unix epoch.
    pub started_unix_ms: u64,
    /// Wall time of the run, seconds.
    pub wall_s: f64,
    /// Routes the peers send holdfastd.
    pub routes_in: u64,
    /// Routes holdfastd announces to each peer.
    pub routes_out: u64,
    /// Hold time of the sessions, seconds.
    pub hold_time: Option<u16>,
    /// `name (daemon, AS n)` per peer.
    pub peers: Vec<String>,
    /// One row per failure.
    pub rows: Vec<Row>,
    /// The negative control ([`DemoOptions::control`]): what each peer saw when it reset
    /// its own session.
    pub control: Option<Vec<PeerSeen>>,
    /// Report files written.
    pub files: Vec<PathBuf>,
}

fn unix_s() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// Sets the total of `sets` to `n` (one set from the first prefix; empty stays empty).
fn resize(sets: &mut Vec<RouteSet>, n: u32) {
    if let Some(first) = sets.first().cloned() {
        *sets = vec![RouteSet {
            prefix: first.prefix,
            count: n.max(1),
        }];
    }
}

/// The scenario with the route counts of `opts` applied.
fn scenario_for(opts: &DemoOptions) -> Result<Scenario> {
    let mut sc = Scenario::load(&opts.scenario)?;
    if let Some(n) = opts.routes_in {
        let senders = sc.peers.iter().filter(|p| !p.routes.is_empty()).count() as u32;
        let share = n / senders.max(1);
        for p in &mut sc.peers {
            resize(&mut p.routes, share);
        }
    }
    if let Some(n) = opts.routes_out {
        for u in &mut sc.holdfastd {
            resize(&mut u.routes, n);
        }
    }
    if !opts.relay {
        sc.relay = None;
    }
    if let Some(ms) = opts.bfd_interval_ms {
        for b in sc.peers.iter_mut().filter_map(|p| p.bfd.as_mut()) {
            b.interval_ms = ms;
        }
    }
    sc.validate()?;
    Ok(sc)
}

/// Runs the demo (see the module doc). `progress` gets one line per step.
pub fn run(opts: &DemoOptions, progress: &mut dyn FnMut(&str)) -> Result<DemoReport> {
    let sc = scenario_for(opts)?;
    if sc.holdfastd.len() != 1 {
        return Err(LabError::Invalid(format!(
            "the demo needs exactly one holdfastd unit ({} in {})",
            sc.holdfastd.len(),
            opts.scenario.display()
        )));
    }
    // `up` reads a file: the scenario with the demo's counts, beside the state file.
    let dir = opts
        .state_file
        .parent()
        .map_or_else(|| PathBuf::from("."), Path::to_path_buf);
    std::fs::create_dir_all(&dir).map_err(|e| LabError::Invalid(format!("{e}")))?;
    let sc_file = dir.join(format!("{}-demo-scenario.toml", sc.name));
    let text = toml::to_string(&sc).map_err(|e| LabError::Invalid(format!("{e}")))?;
    std::fs::write(&sc_file, text).map_err(|e| LabError::Invalid(format!("{e}")))?;
    let t0 = Instant::now();
    let started_unix_ms = (unix_s() * 1000.0) as u64;
    let mut say = |m: &str| progress(&format!("[{:>6.1}s] {m}", t0.elapsed().as_secs_f64()));
    say(&format!(
        "building scenario `{}`: {} peer(s), {} routes in, {} out",
        sc.name,
        sc.peers.len(),
        sc.peers.iter().map(|p| sc.peer_route_count(p)).sum::<u64>(),
        sc.unit_route_count(&sc.holdfastd[0])
    ));
    let up = command::UpOptions {
        insecure: opts.insecure,
    };
    command::up_with(&sc_file, &opts.state_file, &up, &mut |m| {
        say(&format!("  up {m}"))
    })?;
    let r = drive(opts, &sc, &mut say);
    if let Err(e) = &r {
        say(&format!("failed: {e}"));
        keep_captures(opts, &mut say);
    }
    let down = command::down(&opts.state_file);
    let _ = std::fs::remove_file(&sc_file);
    let mut report = r?;
    down?;
    report.started_unix_ms = started_unix_ms;
    report.wall_s = t0.elapsed().as_secs_f64();
    say("lab down: no namespace, process or address left");
    if let Some(dir) = &opts.report_dir {
        report.files = report.write(dir)?;
    }
    Ok(report)
}

/// Copies the captures of a failed run next to the state file before `down` removes
/// the work directory.
fn keep_captures(opts: &DemoOptions, say: &mut dyn FnMut(&str)) {
    let Ok(open) = OpenLab::load(&opts.state_file) else {
        return;
    };
    let Some(parent) = opts.state_file.parent() else {
        return;
    };
    let dest = parent.join(format!("demo-failed-{}", open.state.lab.run_id));
    if std::fs::create_dir_all(&dest).is_err() {
        return;
    }
    for p in open.lab.pcaps() {
        if let Some(name) = p.file_name() {
            let _ = std::fs::copy(p, dest.join(name));
        }
    }
    say(&format!(
        "captures of the failed run kept in {}",
        dest.display()
    ));
}

struct PeerTap {
    name: String,
    daemon: String,
    addr: IpAddr,
    pcap: PathBuf,
}

fn drive(opts: &DemoOptions, sc: &Scenario, say: &mut dyn FnMut(&str)) -> Result<DemoReport> {
    let mut open = OpenLab::load(&opts.state_file)?;
    let service = IpAddr::V4(sc.service.v4);
    let unit = sc.holdfastd[0].clone();
    let routes_in: u64 = sc.peers.iter().map(|p| sc.peer_route_count(p)).sum();
    let routes_out = sc.unit_route_count(&unit);
    // What each peer receives, captured inside its own namespace.
    let mut taps = Vec::new();
    for p in &sc.peers {
        let host = open.host_id(&p.host)?;
        let files = open.lab.capture_host(host)?;
        let h = sc
            .host(&p.host)
            .ok_or_else(|| LabError::Invalid(format!("no host `{}`", p.host)))?;
        taps.push(PeerTap {
            name: p.name.clone(),
            daemon: p.kind.clone(),
            addr: IpAddr::V4(h.v4),
            pcap: files
                .into_iter()
                .next()
                .ok_or_else(|| LabError::Invalid(format!("host `{}` has no port", p.host)))?,
        });
    }
    open.save(&opts.state_file)?;
    say(&format!(
        "capturing what the peers receive: {}",
        taps.iter()
            .map(|t| t.pcap.display().to_string())
            .collect::<Vec<_>>()
            .join(", ")
    ));
    converge(&open, routes_in, routes_out, say)?;
    // A baseline: every capture has joined its stream (a message seen) before the first
    // failure, so gaps and new connections are measured against it.
    let hold = unit.hold_time.unwrap_or(90);
    for tap in &taps {
        wait_ok(
            &format!("a message to {} in its capture", tap.name),
            Duration::from_secs(u64::from(hold) + 2),
            || {
                let n = bgp_messages(&tap.pcap, service, tap.addr)
                    .map_err(|e| e.to_string())?
                    .len();
                (n > 0).then_some(()).ok_or_else(|| "none yet".to_string())
            },
        )?;
    }
    let mut rows = Vec::new();
    let n = opts.kinds.len();
    for (i, kind) in opts.kinds.iter().enumerate() {
        let primary_host = open.state.units[0].primary.host.clone();
        let target = if kind.targets_host() {
            primary_host
        } else {
            unit.name.clone()
        };
        say(&format!(
            "── {}/{n}: {kind} failure of `{target}` ──",
            i + 1
        ));
        let row = one_failure(&mut open, *kind, &target, service, &taps, say)?;
        say(&format!(
            "   Table 1: detection {:.3} s, initiate {:.3} s, TCP {:.3} s, BGP {:.3} s, total {:.3} s",
            row.detection_s, row.initiate_s, row.tcp_s, row.bgp_s, row.total_s
        ));
        for p in &row.peers {
            say(&format!(
                "   {} saw: {} reset(s), {} NOTIFICATION(s), {} withdrawn, {} re-learned, {} BFD Down, longest gap {:.2} s ({} samples)",
                p.peer, p.resets, p.notifications, p.withdrawn, p.relearned, bfd_cell(p), p.longest_gap_s, p.samples
            ));
        }
        open.save(&opts.state_file)?;
        if kind.targets_host() {
            let h = open.heal(&row.from_host)?;
            open.save(&opts.state_file)?;
            say(&format!(
                "   healed host {}: {}",
                h.host,
                h.actions.join("; ")
            ));
        }
        rows.push(row);
    }
    let control = if opts.control {
        say("── control: every peer resets its session; the columns must see it ──");
        let seen = control_reset(&mut open, service, &taps)?;
        for p in &seen {
            say(&format!(
                "   {} saw: {} reset(s), {} NOTIFICATION(s), {} withdrawn, {} re-learned, {} BFD Down",
                p.peer, p.resets, p.notifications, p.withdrawn, p.relearned, bfd_cell(p)
            ));
        }
        Some(seen)
    } else {
        None
    };
    Ok(DemoReport {
        scenario: sc.name.clone(),
        run_id: open.state.lab.run_id.clone(),
        started_unix_ms: 0,
        wall_s: 0.0,
        routes_in,
        routes_out,
        hold_time: unit.hold_time,
        peers: sc
            .peers
            .iter()
            .map(|p| format!("{} ({}, AS {})", p.name, p.kind, p.asn))
            .collect(),
        rows,
        control,
        files: Vec::new(),
    })
}

/// The negative control: each peer resets its session with holdfastd; measured like a
/// failure, until every peer holds holdfastd's routes again.
fn control_reset(open: &mut OpenLab, service: IpAddr, taps: &[PeerTap]) -> Result<Vec<PeerSeen>> {
    let obs = Observation::start(open, service);
    let mut r = Ok(());
    for (_, p) in &open.peers {
        r = r.and(p.reset_session(&open.lab, service));
    }
    let routes_out = open
        .state
        .scenario
        .unit_route_count(&open.state.scenario.holdfastd[0]);
    let r = r.and_then(|()| {
        wait_ok(
            "every peer to hold holdfastd's routes again",
            CONVERGE,
            || {
                for (name, p) in &open.peers {
                    let v = p.session(&open.lab, service).map_err(|e| e.to_string())?;
                    let got = v
                        .filter(|v| v.is_established())
                        .and_then(|v| v.prefixes_received)
                        .unwrap_or(0);
                    if u64::from(got) < routes_out {
                        return Err(format!("{name}: {got}/{routes_out}"));
                    }
                }
                Ok(())
            },
        )
    });
    std::thread::sleep(SETTLE);
    let seen = obs.finish(open, taps);
    r?;
    seen
}

/// What the peers see while something happens to their sessions: a log mark and a
/// [`PeerWatch`] per peer, and the time it began.
struct Observation {
    service: IpAddr,
    marks: Vec<LogMark>,
    watches: Vec<PeerWatch>,
    bfd: Vec<Option<BfdView>>,
    t_start: f64,
}

/// BFD Down events between two readings of a peer's BFD session, and what showed them.
fn bfd_downs(before: Option<&BfdView>, after: Option<&BfdView>) -> (Option<u32>, Option<String>) {
    let (Some(b), after) = (before, after) else {
        return (None, None);
    };
    let Some(a) = after else {
        return (Some(1), Some(format!("BFD session gone (was {})", b.state)));
    };
    let counted = match (b.session_downs, a.session_downs) {
        (Some(x), Some(y)) => u32::try_from(y.saturating_sub(x)).unwrap_or(u32::MAX),
        _ => 0,
    };
    let uptime_back = matches!((b.uptime_secs, a.uptime_secs), (Some(x), Some(y)) if y < x);
    let since_moved = b.since.is_some() && a.since != b.since;
    let downs = counted.max(u32::from(!a.up || uptime_back || since_moved));
    let what = (downs > 0).then(|| {
        format!(
            "BFD: state {} -> {}, session-down {:?} -> {:?}, uptime {:?} -> {:?} s, since {:?} -> {:?}",
            b.state, a.state, b.session_downs, a.session_downs, b.uptime_secs, a.uptime_secs, b.since, a.since
        )
    });
    (Some(downs), what)
}

impl Observation {
    /// Starts watching every peer's session with the service address; returns after a
    /// few samples, so the watches have a baseline.
    fn start(open: &OpenLab, service: IpAddr) -> Observation {
        let marks = open.peers.iter().map(|(_, p)| p.log_mark()).collect();
        let watches = open
            .peers
            .iter()
            .map(|(_, p)| PeerWatch::start_every(p.session_probe(&open.lab), service, WATCH_EVERY))
            .collect();
        std::thread::sleep(WATCH_EVERY * 3);
        let bfd = open
            .peers
            .iter()
            .map(|(_, p)| p.bfd_session(&open.lab, service).ok().flatten())
            .collect();
        Observation {
            service,
            marks,
            watches,
            bfd,
            t_start: unix_s(),
        }
    }

    /// Stops the watches and reads each peer's log and capture since the start.
    fn finish(self, open: &OpenLab, taps: &[PeerTap]) -> Result<Vec<PeerSeen>> {
        let reports: Vec<WatchReport> = self.watches.into_iter().map(PeerWatch::stop).collect();
        let t_end = unix_s();
        let mut out = Vec::new();
        for ((((name, p), mark), watch), bfd) in open
            .peers
            .iter()
            .zip(&self.marks)
            .zip(&reports)
            .zip(&self.bfd)
        {
            let tap = taps
                .iter()
                .find(|t| &t.name == name)
                .ok_or_else(|| LabError::Invalid(format!("no capture of peer `{name}`")))?;
            let notes = p.notifications_since(mark)?;
            let msgs = bgp_messages(&tap.pcap, self.service, tap.addr)?;
            let mut seen = peer_seen(tap, watch, &notes, &msgs, self.t_start, t_end);
            let after = p.bfd_session(&open.lab, self.service)?;
            let (downs, what) = bfd_downs(bfd.as_ref(), after.as_ref());
            seen.bfd_downs = downs;
            seen.bfd_interval_ms = after.as_ref().and_then(|a| a.tx_interval_ms);
            seen.evidence.extend(what);
            if seen.resets > 0 || seen.bfd_downs.unwrap_or(0) > 0 {
                seen.evidence
                    .extend(wire_story(&tap.pcap, tap.addr, self.t_start, t_end));
            }
            out.push(seen);
        }
        Ok(out)
    }
}

/// BFD and ARP as the peer's capture shows them around the first BFD packet it sent in
/// state Down or Init (its session went down), for a failed run's evidence: which
/// sender's packets (by MAC) stopped reaching it, and when.
fn wire_story(pcap: &Path, peer: IpAddr, t_start: f64, t_end: f64) -> Vec<String> {
    let at = |l: &str| l.split_whitespace().next()?.parse::<f64>().ok();
    let lines =
        holdfast_lab::pcap::tcpdump_lines(pcap, "udp port 3784 or arp", t_start - 0.6, t_end)
            .unwrap_or_default();
    let from_peer = format!(": {peer}.");
    let first_down = lines
        .iter()
        .filter(|l| l.contains(&from_peer) && at(l).is_some_and(|x| x >= t_start))
        .find(|l| l.contains("State Down") || l.contains("State Init"))
        .and_then(|l| at(l));
    let Some(t) = first_down else {
        return vec![format!(
            "wire: no BFD packet in state Down or Init from {peer} in its capture"
        )];
    };
    let window: Vec<&String> = lines
        .iter()
        .filter(|l| at(l).is_some_and(|x| x >= t - 0.6 && x <= t + 0.1))
        .collect();
    let mut out = vec![format!(
        "wire: {peer} first sent BFD Down/Init at unix {t:.6}; BFD and ARP from 0.6 s before ({} packets):",
        window.len()
    )];
    out.extend(window.into_iter().take(60).map(|l| format!("wire: {l}")));
    out
}

/// Waits until the primary holds every route and every peer every route of holdfastd,
/// printing the counts as they grow.
fn converge(
    open: &OpenLab,
    routes_in: u64,
    routes_out: u64,
    say: &mut dyn FnMut(&str),
) -> Result<u64> {
    let hf = open.holdfastd(&open.state.units[0].primary)?;
    let service = IpAddr::V4(open.state.scenario.service.v4);
    let want = routes_in + routes_out;
    let mut last_print = Instant::now() - Duration::from_secs(10);
    let mut last = String::new();
    let loc = wait_ok("routes everywhere", CONVERGE, || {
        let s = hf.summary().map_err(|e| e.to_string())?;
        let loc: u64 = s.loc_rib_routes.values().sum();
        let mut line = format!("holdfastd Loc-RIB {loc}/{want}");
        let mut peers_done = true;
        for (name, p) in &open.peers {
            let got = p
                .session(&open.lab, service)
                .ok()
                .flatten()
                .and_then(|v| v.prefixes_received)
                .unwrap_or(0);
            peers_done &= u64::from(got) >= routes_out;
            let _ = write!(line, ", {name} {got}/{routes_out}");
        }
        last.clone_from(&line);
        if last_print.elapsed() >= Duration::from_secs(1) {
            last_print = Instant::now();
            say(&format!("   routes: {line}"));
        }
        if loc >= want && peers_done {
            Ok(loc)
        } else {
            Err(line)
        }
    })?;
    say(&format!("   converged: {last}"));
    Ok(loc)
}

fn one_failure(
    open: &mut OpenLab,
    kind: FailureKind,
    target: &str,
    service: IpAddr,
    taps: &[PeerTap],
    say: &mut dyn FnMut(&str),
) -> Result<Row> {
    let obs = Observation::start(open, service);
    // On an error the watches stop as `obs` drops.
    let fail = open.fail(kind, target, &mut |m| say(&format!("   {m}")))?;
    let t = fail
        .takeover
        .clone()
        .ok_or_else(|| LabError::Invalid(format!("{kind} of `{target}` caused no takeover")))?;
    let t_recovered = unix_s();
    // The peers must hear from the new primary before the watch ends.
    let hold = open.state.scenario.holdfastd[0].hold_time.unwrap_or(90);
    for tap in taps {
        wait_ok(
            &format!("{} to receive a message after the takeover", tap.name),
            Duration::from_secs(u64::from(hold) + 2),
            || {
                let msgs = bgp_messages(&tap.pcap, service, tap.addr).map_err(|e| e.to_string())?;
                msgs.iter()
                    .any(|m| m.at > t_recovered)
                    .then_some(())
                    .ok_or_else(|| format!("{} messages, none after recovery", msgs.len()))
            },
        )?;
    }
    std::thread::sleep(SETTLE);
    let peers = obs.finish(open, taps)?;
    let new = open.holdfastd(&open.state.units[0].primary)?;
    let routes_after: u64 = new.summary()?.loc_rib_routes.values().sum();
    let o = &t.phases_ms;
    let us = |x: u64| x as f64 / 1e3;
    let (claim_load, tcp, tables) = t.holdfastd.as_ref().map_or((0.0, 0.0, 0.0), |h| {
        (
            us(h.claim_us + h.load_us),
            us(h.address_wait_us + h.tcp_restore_us),
            us(h.tables_us),
        )
    });
    let detection = o.detection;
    // The verdict until the new process started (the controller's fencing and
    // commands, the agent's start), then its claim and load.
    let initiate = (o.started - o.verdict).max(0.0) + claim_load;
    let bgp = (tables - claim_load - tcp).max(0.0);
    Ok(Row {
        kind,
        target: target.to_string(),
        from_host: t.from_host.clone(),
        to_host: t.to_host.clone(),
        detection_s: detection / 1e3,
        initiate_s: initiate / 1e3,
        tcp_s: tcp / 1e3,
        bgp_s: bgp / 1e3,
        total_s: (detection + initiate + tcp + bgp) / 1e3,
        routes_after,
        peers,
        fail,
    })
}

fn peer_seen(
    tap: &PeerTap,
    watch: &WatchReport,
    notes: &[String],
    msgs: &[BgpRecord],
    t_fail: f64,
    t_end: f64,
) -> PeerSeen {
    let mut evidence = Vec::new();
    let before: Vec<&BgpRecord> = msgs.iter().filter(|m| m.at < t_fail).collect();
    let during: Vec<&BgpRecord> = msgs
        .iter()
        .filter(|m| m.at >= t_fail && m.at <= t_end)
        .collect();
    let withdrawn_wire: u32 = during.iter().map(|m| m.withdrawn).sum();
    let relearned: u32 = during.iter().map(|m| m.announced).sum();
    let dropped: u32 = watch
        .prefixes_received_drops
        .iter()
        .map(|(_, a, b)| a.saturating_sub(*b))
        .sum();
    if withdrawn_wire > 0 {
        evidence.push(format!("{withdrawn_wire} prefixes withdrawn on the wire"));
    }
    if relearned > 0 {
        evidence.push(format!("{relearned} prefixes announced again on the wire"));
    }
    if dropped > 0 {
        evidence.push(format!(
            "received-prefix count dropped: {:?}",
            watch.prefixes_received_drops
        ));
    }
    // Resets: the peer's counters and uptime, its state samples, new connections.
    let ports_before: Vec<u16> = before.iter().map(|m| m.src_port).collect();
    let new_conns = during
        .iter()
        .map(|m| m.src_port)
        .filter(|p| !ports_before.contains(p))
        .collect::<std::collections::BTreeSet<u16>>()
        .len() as u32;
    let est_changes: u32 = watch
        .established_count_changes
        .iter()
        .map(|(_, a, b)| b.saturating_sub(*a))
        .sum();
    let down_samples = u32::from(!watch.non_established_samples.is_empty());
    let resets = [
        new_conns,
        est_changes,
        watch.uptime_regressions.len() as u32,
        down_samples,
    ]
    .into_iter()
    .max()
    .unwrap_or(0);
    if new_conns > 0 {
        evidence.push(format!(
            "{new_conns} new TCP connection(s) in the capture (source ports {:?} after the failure, {:?} before)",
            during.iter().map(|m| m.src_port).collect::<std::collections::BTreeSet<_>>(),
            ports_before.iter().collect::<std::collections::BTreeSet<_>>()
        ));
    }
    if est_changes > 0 || !watch.uptime_regressions.is_empty() {
        evidence.push(format!(
            "established count changes {:?}, uptime regressions {:?}",
            watch.established_count_changes, watch.uptime_regressions
        ));
    }
    if let Some((at, what)) = watch.non_established_samples.first() {
        evidence.push(format!(
            "{} sample(s) not Established, first at {at:?} (≈ unix {:.3}): {what}",
            watch.non_established_samples.len(),
            t_fail + at.as_secs_f64()
        ));
    }
    let wire_notes = during.iter().filter(|m| m.kind == 3).count() as u32;
    let notifications = (notes.len() as u32).max(wire_notes);
    for n in notes.iter().take(3) {
        evidence.push(format!("log: {n}"));
    }
    // Longest silence: from the last message before the failure through the first after.
    let mut times: Vec<f64> = before.last().map(|m| m.at).into_iter().collect();
    times.extend(during.iter().map(|m| m.at));
    let longest_gap_s = times
        .windows(2)
        .map(|w| w[1] - w[0])
        .fold(0.0_f64, f64::max);
    PeerSeen {
        peer: tap.name.clone(),
        daemon: tap.daemon.clone(),
        resets,
        notifications,
        withdrawn: withdrawn_wire.max(dropped),
        relearned,
        longest_gap_s,
        messages: during.len() as u32,
        min_prefixes: watch.min_prefixes_received,
        samples: watch.samples,
        bfd_downs: None,
        bfd_interval_ms: None,
        evidence,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(at: f64, kind: u8, announced: u32, withdrawn: u32, src_port: u16) -> BgpRecord {
        BgpRecord {
            at,
            kind,
            announced,
            withdrawn,
            src_port,
        }
    }

    fn watch() -> WatchReport {
        WatchReport {
            neighbor: "198.18.0.10".parse().unwrap(),
            samples: 30,
            duration: Duration::from_secs(3),
            max_gap: Duration::from_millis(100),
            first: None,
            last: None,
            non_established_samples: Vec::new(),
            established_count_changes: Vec::new(),
            dropped_count_changes: Vec::new(),
            uptime_regressions: Vec::new(),
            min_prefixes_received: Some(10),
            max_prefixes_received: Some(10),
            prefixes_received_drops: Vec::new(),
            timed_out: false,
        }
    }

    fn tap() -> PeerTap {
        PeerTap {
            name: "frr".into(),
            daemon: "frr".into(),
            addr: "198.18.0.1".parse().unwrap(),
            pcap: PathBuf::new(),
        }
    }

    #[test]
    fn an_unnoticed_takeover_has_zero_columns_and_the_keepalive_gap() {
        let msgs = [
            rec(7.0, 4, 0, 0, 179),
            rec(10.0, 4, 0, 0, 179),
            rec(13.0, 4, 0, 0, 179),
        ];
        let p = peer_seen(&tap(), &watch(), &[], &msgs, 9.0, 14.0);
        assert_eq!(
            (p.resets, p.notifications, p.withdrawn, p.relearned),
            (0, 0, 0, 0)
        );
        assert_eq!(p.longest_gap_s, 3.0);
        assert_eq!(p.messages, 2);
        assert!(p.evidence.is_empty());
    }

    #[test]
    fn bfd_downs_from_the_peers_cli() {
        let frr = |up: bool, downs: u64, uptime: u64| BfdView {
            up,
            state: if up { "up" } else { "down" }.into(),
            session_downs: Some(downs),
            uptime_secs: Some(uptime),
            since: None,
            tx_interval_ms: Some(100),
        };
        let bird = |state: &str, since: &str| BfdView {
            up: state == "Up",
            state: state.into(),
            session_downs: None,
            uptime_secs: None,
            since: Some(since.into()),
            tx_interval_ms: Some(100),
        };
        assert_eq!(bfd_downs(None, None), (None, None));
        assert_eq!(
            bfd_downs(Some(&frr(true, 1, 40)), Some(&frr(true, 1, 44))).0,
            Some(0)
        );
        assert_eq!(
            bfd_downs(Some(&frr(true, 1, 40)), Some(&frr(true, 3, 2))).0,
            Some(2)
        );
        assert_eq!(
            bfd_downs(Some(&frr(true, 1, 40)), Some(&frr(true, 1, 2))).0,
            Some(1)
        );
        assert_eq!(
            bfd_downs(Some(&frr(true, 1, 40)), Some(&frr(false, 1, 0))).0,
            Some(1)
        );
        let up = bird("Up", "19:55:01.123");
        assert_eq!(bfd_downs(Some(&up), Some(&up.clone())), (Some(0), None));
        let (n, what) = bfd_downs(Some(&up), Some(&bird("Up", "19:55:09.456")));
        assert_eq!(n, Some(1));
        assert!(what.unwrap().contains("since"));
        assert_eq!(bfd_downs(Some(&up), None).0, Some(1));
    }

    #[test]
    fn a_reset_shows_in_every_column() {
        // Old connection (port 179) NOTIFICATION'd, a new one (port 40000) sends the
        // routes again; the CLI saw the count drop and the session leave Established.
        let msgs = [
            rec(7.0, 4, 0, 0, 179),
            rec(9.5, 3, 0, 0, 179),
            rec(14.0, 1, 0, 0, 40000),
            rec(14.1, 2, 10, 0, 40000),
        ];
        let mut w = watch();
        w.prefixes_received_drops = vec![(Duration::from_secs(1), 10, 0)];
        w.non_established_samples = vec![(Duration::from_secs(1), "Active".into())];
        w.established_count_changes = vec![(Duration::from_secs(2), 1, 2)];
        let notes = vec![
            "%NOTIFICATION: sent to neighbor 198.18.0.10 6/4 (Cease/Administrative Reset)"
                .to_string(),
        ];
        let p = peer_seen(&tap(), &w, &notes, &msgs, 9.0, 15.0);
        assert_eq!(p.resets, 1);
        assert_eq!(p.notifications, 1);
        assert_eq!(p.withdrawn, 10);
        assert_eq!(p.relearned, 10);
        assert!((p.longest_gap_s - 4.5).abs() < 1e-9);
        assert!(p.evidence.len() >= 4, "{:?}", p.evidence);
    }
}
