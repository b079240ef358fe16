//! `holdfast lab chaos --iterations N --seed S` (issue 11): randomized
//! failures recovered by the control plane (the controller and the host
//! agents of `holdfast_lab::plane`, not the lab) and checked on the peers.
//!
//! The plane: hosts a, b, c with a container per unit on each, the agent
//! server, three controllers on a 3-member etcd, Redis, and three units
//! (u1 on a, u2 on b, u3 on c), each with sessions to frr (AS 65001),
//! bird2 (AS 65002) and gobgpd (AS 65003).
//!
//! Each iteration, from the seed: a kind (application, container,
//! container network, host, host network, planned switchover, a 1 s
//! host-network blip, the controllers cut off from a healthy host, the
//! leader killed mid-migration, and the gray failures of issue 25: the
//! leader SIGSTOPped for 6 s with the unit killed 0.3 s into it
//! (`leader-freeze`), every etcd member SIGSTOPped for 5 s (`etcd-stall`),
//! 30% random loss on a host's management link for 10 s (`mgmt-loss`),
//! a unit's holdfastd SIGSTOPped for 15 s (`hang`: its agent fences it,
//! verdict `hung`, migrated; the stopped process is gone when woken) or
//! for 1–2 s and woken (`stall`: resumed, or taken over as hung), Redis
//! SIGSTOPped for 3 s or 15 s (`store-stall`: nothing moves, every unit
//! PROTECTED again within 2 s of the store's return)), a
//! target unit or host, whether frr sends a burst of UPDATEs first (the
//! units take them in and send them on to bird2 and gobgpd: inbound and
//! outbound bursts), and a delay of 0–300 ms between the burst and the
//! failure, so that the failure lands mid-burst and often mid-message.
//! The iteration then waits for the controller's verdict and for every
//! moved unit to be PROTECTED on its new host, and checks every peer's own
//! view: no session left Established (established and dropped counters,
//! uptime), no NOTIFICATION, every route held (and the burst's routes
//! arrived, exactly once; a burst that frr's TCP still retransmits, its
//! timer backed off by losses in earlier iterations, is waited for and
//! reported LATE, see `holdfast_lab::plane::PlaneWatch`). Then it heals what it broke (a re-created
//! container, links up, `holdfast ctl reset`). A blip, a cut-off, an etcd
//! stall and a lossy management link must cause no failure verdict, no
//! migration (every unit keeps its process) and no host recorded failed;
//! the summary counts the iterations that did (needless migrations, hosts
//! recorded failed). After a `leader-freeze` the woken leader must not
//! act: the unit runs on its new host only.
//!
//! A capture of the BGP sessions (`tcp port 179` between the service
//! addresses and the peers) is checked at the end: for every connection,
//! once a takeover's first packet left from the new container's MAC, no
//! packet from the old one followed within 2 s (two holdfastd processes
//! never both sent to a peer).
//!
//! # Known issues
//! - Migrations are carried out one at a time, so a host failure's units
//!   resume one after the other.
//! - A peer's bytes lost in a takeover arrive at its next retransmission.
//!   When failures follow each other within seconds, every retransmission
//!   may be lost in turn and the peer's timer backs off (13 s seen: seed
//!   2032, iteration 472, after a host failure, a host-network failure and
//!   a switchover of the same unit within 14 s). Nothing on our side makes
//!   a backed-off Linux sender retransmit sooner, short of an ICMP
//!   unreachable (RFC 6069), which a peer with `IP_RECVERR` would turn
//!   into a session error.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use holdfast_lab::plane::{verdict_is, Plane, PlaneBins, PlaneExtras, PlaneSpec, PlaneUnitSpec};
use holdfast_lab::{LabError, Result, Signal};
use serde::Serialize;

/// What one iteration did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, clap::ValueEnum)]
pub enum ChaosKind {
    Application,
    Container,
    ContainerNetwork,
    Host,
    HostNetwork,
    Switchover,
    Blip,
    ControllerCutOff,
    /// An application failure, then the leading controller SIGKILLed
    /// 0–300 ms later (mid-migration): the next leader finishes it once.
    LeaderKill,
    /// The leading controller SIGSTOPped for 6 s, the unit SIGKILLed 0.3 s
    /// into it: the agents leave the silent leader, the next one migrates
    /// the unit; the old one, woken, acts on nothing.
    LeaderFreeze,
    /// Every etcd member SIGSTOPped for 5 s: nothing moves, no host fails.
    EtcdStall,
    /// 30% random loss both ways on a host's management link for 10 s:
    /// nothing moves, no host fails.
    MgmtLoss,
    /// The unit's holdfastd SIGSTOPped for 15 s: its agent declares it
    /// hung, fences it, and the controller migrates it (verdict `hung`);
    /// the frozen process never runs again.
    Hang,
    /// The unit's holdfastd SIGSTOPped for 1–2 s, then SIGCONT: resumed, or
    /// taken over as hung; the peers see nothing either way.
    Stall,
    /// Redis SIGSTOPped for 3 s or 15 s, then SIGCONT: nothing moves, and
    /// every unit is PROTECTED again within 2 s of the store's return.
    StoreStall,
}

impl ChaosKind {
    /// Every kind, the default choice of `--kinds`.
    pub const ALL: [ChaosKind; 15] = [
        ChaosKind::Application,
        ChaosKind::Container,
        ChaosKind::ContainerNetwork,
        ChaosKind::Host,
        ChaosKind::HostNetwork,
        ChaosKind::Switchover,
        ChaosKind::Blip,
        ChaosKind::ControllerCutOff,
        ChaosKind::LeaderKill,
        ChaosKind::LeaderFreeze,
        ChaosKind::EtcdStall,
        ChaosKind::MgmtLoss,
        ChaosKind::Hang,
        ChaosKind::Stall,
        ChaosKind::StoreStall,
    ];

    /// The verdict it should get (`None`: none, nothing moves).
    fn verdict(&self) -> Option<&'static str> {
        match self {
            ChaosKind::Application | ChaosKind::LeaderKill | ChaosKind::LeaderFreeze => {
                Some("application")
            }
            ChaosKind::Container => Some("container"),
            ChaosKind::ContainerNetwork => Some("container_network"),
            ChaosKind::Host => Some("host"),
            ChaosKind::HostNetwork => Some("host_network"),
            ChaosKind::Hang => Some("hung"),
            _ => None,
        }
    }

    fn on_host(&self) -> bool {
        matches!(
            self,
            ChaosKind::Host
                | ChaosKind::HostNetwork
                | ChaosKind::Blip
                | ChaosKind::ControllerCutOff
                | ChaosKind::MgmtLoss
        )
    }
}

/// One iteration's line.
#[derive(Debug, Clone, Serialize)]
pub struct Iteration {
    pub n: u32,
    pub kind: ChaosKind,
    pub target: String,
    /// UPDATEs frr sent just before (0: no burst), and the delay to the
    /// failure.
    pub burst: u32,
    pub delay_ms: u64,
    /// From the failure to the controller's verdict, when one was due.
    pub detection_ms: Option<u64>,
    /// From the failure until every moved unit was PROTECTED again.
    pub resumed_ms: Option<u64>,
    /// `(unit, from, to)`.
    pub moved: Vec<(String, String, String)>,
    /// The burst's routes came late because frr's retransmissions of them
    /// were lost in a row and its timer backed off (what the check saw).
    pub late: Option<String>,
    /// `None`: the peers saw nothing.
    pub error: Option<String>,
}

/// The run's summary.
#[derive(Debug, Clone, Serialize)]
pub struct Summary {
    pub seed: u64,
    pub iterations: u32,
    pub passed: u32,
    pub failed: u32,
    pub by_kind: BTreeMap<String, u32>,
    pub session_resets: u32,
    pub notifications: u32,
    pub routes_withdrawn_or_relearned: u32,
    /// Iterations whose routes waited in a peer's retransmission backoff.
    pub late_by_peer_backoff: u32,
    /// Connections where two containers sent within 2 s of each other.
    pub two_senders: Vec<String>,
    /// Iterations that should have moved nothing and moved a unit, or
    /// recorded a host failed.
    pub needless_migrations: u32,
    pub failed_hosts: u32,
    pub max_detection_ms: BTreeMap<String, u64>,
    pub max_resumed_ms: BTreeMap<String, u64>,
    pub work_dir: PathBuf,
    pub seconds: u64,
}

fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// The capture of the BGP sessions (stopped on drop).
struct Capture {
    child: Child,
    file: PathBuf,
}

impl Drop for Capture {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn capture(p: &Plane) -> Result<Capture> {
    let br = p.lab.bridge_info(p.topo.bridge);
    let file = p.lab.work_dir().join("chaos-bgp.pcap");
    let filter = "tcp port 179 and (host 198.18.0.1 or host 198.18.0.5 or host 198.18.0.6)";
    let child = Command::new("ip")
        .args([
            "netns",
            "exec",
            &br.netns,
            "tcpdump",
            "-U",
            "-i",
            &br.bridge_if,
            "-w",
        ])
        .arg(&file)
        .arg(filter)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| LabError::Invalid(format!("tcpdump: {e}")))?;
    Ok(Capture { child, file })
}

/// Connections on which the old and the new sender interleaved: a MAC
/// sending again within 2 s after another took over the connection.
pub fn two_senders(pcap: &Path) -> Result<Vec<String>> {
    let out = Command::new("tcpdump")
        .args(["-e", "-nn", "-tt", "-r"])
        .arg(pcap)
        .output()
        .map_err(|e| LabError::Invalid(format!("tcpdump -r: {e}")))?;
    let text = String::from_utf8_lossy(&out.stdout);
    // Per connection (as sent from the service address): the last MAC, the
    // one before it, and when it changed.
    let mut flows: BTreeMap<String, (String, String, f64)> = BTreeMap::new();
    let mut bad = Vec::new();
    for line in text.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        // 1700000000.123456 SRCMAC > DSTMAC, ethertype IPv4 (0x0800), length N: SRC > DST: ...
        let (Some(t), Some(mac)) = (f.first().and_then(|t| t.parse::<f64>().ok()), f.get(1)) else {
            continue;
        };
        let Some(i) = f
            .iter()
            .position(|x| x.ends_with(':') && x.contains("length"))
            .or_else(|| f.iter().position(|x| *x == "length"))
        else {
            continue;
        };
        let (Some(src), Some(dst)) = (f.get(i + 2), f.get(i + 4)) else {
            continue;
        };
        if !src.ends_with(".179") {
            continue;
        }
        let key = format!("{src} > {}", dst.trim_end_matches(':'));
        match flows.get_mut(&key) {
            None => {
                flows.insert(key, (mac.to_string(), String::new(), 0.0));
            }
            Some((last, prev, at)) if last != mac => {
                if prev == mac && t - *at < 2.0 {
                    bad.push(format!(
                        "{key}: {mac} sent again {:.3} s after {last} took over",
                        t - *at
                    ));
                }
                *prev = std::mem::replace(last, mac.to_string());
                *at = t;
            }
            Some(_) => {}
        }
    }
    Ok(bad)
}

fn plane_spec() -> PlaneSpec {
    let unit = |n: &str, p: &str, b: &str| PlaneUnitSpec {
        name: n.into(),
        primary: p.into(),
        backup: b.into(),
        routes: 10,
        app_failure: None,
        peers: vec![],
    };
    PlaneSpec {
        hosts: vec!["a".into(), "b".into(), "c".into()],
        units: vec![
            unit("u1", "a", "b"),
            unit("u2", "b", "c"),
            unit("u3", "c", "a"),
        ],
        controller_args: vec![],
        more_peers: true,
        no_probes: false,
    }
}

const LONG: Duration = Duration::from_secs(30);

/// Where each unit runs now: `(unit, host)`, once each is PROTECTED there.
fn settled(p: &Plane) -> Result<Vec<(String, String)>> {
    let mut out = Vec::new();
    for u in p.units.clone() {
        let host = holdfast_lab::wait_for_every(
            &format!("{} running where it is placed", u.name),
            LONG,
            Duration::from_millis(50),
            || {
                let (primary, _) = p.placement(&u.name)?;
                Ok(p.unit_pid(&u.name, &primary).map(|_| primary))
            },
        )?;
        p.wait_protected(&u.name, &host, LONG)?;
        out.push((u.name.clone(), host));
    }
    Ok(out)
}

/// Runs the chaos, each iteration's kind drawn from `kinds` (every kind
/// when empty); `line` gets one line per iteration. Once `stop` is set (an
/// interrupt), no further iteration starts: the summary covers those done
/// and the lab is removed as at the end of a run.
pub fn run(
    iterations: u32,
    seed: u64,
    kinds: &[ChaosKind],
    stop: Option<&AtomicBool>,
    line: impl FnMut(&Iteration),
) -> Result<(Summary, Vec<Iteration>)> {
    run_with(iterations, seed, kinds, false, stop, line)
}

/// [`run`] on a secure plane (mutual TLS, Redis ACL users: [`PlaneExtras`]'s
/// default), or a plaintext one with `insecure`.
pub fn run_with(
    iterations: u32,
    seed: u64,
    kinds: &[ChaosKind],
    insecure: bool,
    stop: Option<&AtomicBool>,
    mut line: impl FnMut(&Iteration),
) -> Result<(Summary, Vec<Iteration>)> {
    let kinds = if kinds.is_empty() {
        &ChaosKind::ALL[..]
    } else {
        kinds
    };
    let started = Instant::now();
    let bins = PlaneBins::find()?;
    let extras = if insecure {
        PlaneExtras::insecure()
    } else {
        PlaneExtras::default()
    };
    let mut p = Plane::up_with("chaos", &plane_spec(), bins, &extras)?;
    p.wait_established(Duration::from_secs(90))?;
    p.wait_leader(4, Duration::from_secs(60))?;
    let cap = capture(&p)?;
    let mut rng = fastrand::Rng::with_seed(seed);
    let mut all = Vec::new();
    let mut burst_no = 0u32;
    for n in 1..=iterations {
        if stop.is_some_and(|s| s.load(Ordering::Relaxed)) {
            eprintln!("holdfast: chaos interrupted after {} iterations", n - 1);
            break;
        }
        let it = iteration(&mut p, &mut rng, kinds, n, &mut burst_no);
        line(&it);
        let failed = it.error.is_some();
        all.push(it);
        if failed {
            p.lab.fail("a chaos iteration failed");
            break;
        }
    }
    std::thread::sleep(Duration::from_millis(500));
    let file = cap.file.clone();
    drop(cap);
    let two = two_senders(&file)?;
    let mut by_kind = BTreeMap::new();
    let mut max_det = BTreeMap::new();
    let mut max_res = BTreeMap::new();
    for it in &all {
        let k = format!("{:?}", it.kind);
        *by_kind.entry(k.clone()).or_insert(0) += 1;
        if let Some(d) = it.detection_ms {
            let e = max_det.entry(k.clone()).or_insert(0);
            *e = (*e).max(d);
        }
        if let Some(r) = it.resumed_ms {
            let e = max_res.entry(k).or_insert(0);
            *e = (*e).max(r);
        }
    }
    let errors: Vec<&String> = all.iter().filter_map(|i| i.error.as_ref()).collect();
    let count = |w: &str| errors.iter().filter(|e| e.contains(w)).count() as u32;
    let summary = Summary {
        seed,
        iterations: all.len() as u32,
        passed: all.iter().filter(|i| i.error.is_none()).count() as u32,
        failed: errors.len() as u32,
        by_kind,
        session_resets: count("noticed"),
        notifications: count("NOTIFICATION"),
        routes_withdrawn_or_relearned: count("routes from"),
        late_by_peer_backoff: all.iter().filter(|i| i.late.is_some()).count() as u32,
        two_senders: two,
        needless_migrations: count("moved units") + count("gave failure verdicts"),
        failed_hosts: count("recorded failed"),
        max_detection_ms: max_det,
        max_resumed_ms: max_res,
        work_dir: p.lab.work_dir().to_path_buf(),
        seconds: started.elapsed().as_secs(),
    };
    if summary.failed > 0 || !summary.two_senders.is_empty() {
        p.lab.fail("chaos found a problem");
    }
    Ok((summary, all))
}

fn iteration(
    p: &mut Plane,
    rng: &mut fastrand::Rng,
    kinds: &[ChaosKind],
    n: u32,
    burst_no: &mut u32,
) -> Iteration {
    let kind = kinds[rng.usize(..kinds.len())].clone();
    let burst = if rng.bool() { 20 } else { 0 };
    let delay_ms = rng.u64(0..=300);
    let mut it = Iteration {
        n,
        kind: kind.clone(),
        target: String::new(),
        burst,
        delay_ms,
        detection_ms: None,
        resumed_ms: None,
        moved: Vec::new(),
        late: None,
        error: None,
    };
    if let Err(e) = run_one(p, rng, &mut it, burst_no) {
        it.error = Some(e.to_string());
    }
    it
}

fn run_one(
    p: &mut Plane,
    rng: &mut fastrand::Rng,
    it: &mut Iteration,
    burst_no: &mut u32,
) -> Result<()> {
    let before = settled(p)?;
    p.wait_leader(4, LONG)?;
    let units_on = |h: &str| -> Vec<String> {
        before
            .iter()
            .filter(|(_, x)| x == h)
            .map(|(u, _)| u.clone())
            .collect()
    };
    let pids: Vec<Option<u64>> = before.iter().map(|(u, h)| p.unit_pid(u, h)).collect();
    let (unit, host) = if it.kind.on_host() {
        let hosts: Vec<String> = ["a", "b", "c"]
            .iter()
            .map(|h| h.to_string())
            .filter(|h| !units_on(h).is_empty())
            .collect();
        let h = hosts[rng.usize(..hosts.len())].clone();
        (None, h)
    } else {
        let (u, h) = before[rng.usize(..before.len())].clone();
        (Some(u), h)
    };
    it.target = unit.clone().unwrap_or_else(|| host.clone());
    if it.kind == ChaosKind::EtcdStall {
        it.target = "etcd".into();
    }
    if it.kind == ChaosKind::StoreStall {
        it.target = "redis".into();
    }
    let affected: Vec<String> = match &unit {
        Some(u) => vec![u.clone()],
        None => units_on(&host),
    };
    let watch = p.watch(false)?;
    if it.burst > 0 {
        *burst_no += 1;
        let k = *burst_no;
        let prefixes: Vec<String> = (1..=it.burst)
            .map(|i| format!("10.{}.{}.{i}/32", 100 + k / 250, k % 250))
            .collect();
        let send = p.frr.burst();
        std::thread::spawn(move || {
            let _ = send(&prefixes);
        });
    }
    std::thread::sleep(Duration::from_millis(it.delay_ms));
    let t0 = Instant::now();
    let since = unix_ms();
    let mut killed_controller = None;
    let mut frozen = None;
    // The unit process a Hang or Stall stopped, and whether it was taken
    // over (then it must be gone: it never sends again).
    let mut stopped_unit = None;
    match it.kind {
        ChaosKind::Hang => {
            let pid = p.stop_unit(&it.target, &host)?;
            stopped_unit = Some(pid);
        }
        ChaosKind::Stall => {
            let pid = p.stop_unit(&it.target, &host)?;
            std::thread::sleep(Duration::from_millis(rng.u64(1000..=2000)));
            holdfast_lab::send_signal(pid as u32, Signal::Cont, false);
            stopped_unit = Some(pid);
        }
        ChaosKind::StoreStall => {
            let redis = p.redis.single().proc();
            let secs = if rng.bool() { 3 } else { 15 };
            p.lab.kill(redis, Signal::Stop);
            std::thread::sleep(Duration::from_secs(secs));
            p.lab.kill(redis, Signal::Cont);
            let back = Instant::now();
            for (u, h) in &before {
                p.wait_protected(u, h, LONG)?;
            }
            let took = back.elapsed();
            if took > Duration::from_secs(2) {
                return Err(LabError::Invalid(format!(
                    "store stalled {secs} s: every unit PROTECTED again only {took:?} after its return"
                )));
            }
        }
        ChaosKind::LeaderFreeze => {
            let leader = p
                .leader_index()
                .ok_or_else(|| LabError::Invalid("no leader".into()))?;
            p.lab.kill(p.controllers[leader].0, Signal::Stop);
            frozen = Some((leader, Instant::now()));
            std::thread::sleep(Duration::from_millis(300));
            p.kill_unit(&it.target, &host)?;
        }
        ChaosKind::EtcdStall => p.stall_etcd(Duration::from_secs(5))?,
        ChaosKind::MgmtLoss => {
            p.mgmt_loss(&host, true)?;
            std::thread::sleep(Duration::from_secs(10));
            p.mgmt_loss(&host, false)?;
        }
        ChaosKind::Application => {
            p.kill_unit(&it.target, &host)?;
        }
        ChaosKind::LeaderKill => {
            let leader = p
                .leader_index()
                .ok_or_else(|| LabError::Invalid("no leader".into()))?;
            p.kill_unit(&it.target, &host)?;
            std::thread::sleep(Duration::from_millis(rng.u64(0..=300)));
            p.kill_controller(leader);
            killed_controller = Some(leader);
        }
        ChaosKind::Container => {
            p.kill_container(&it.target, &host)?;
        }
        ChaosKind::ContainerNetwork => p.container_link(&it.target, &host, false)?,
        ChaosKind::Host => {
            p.fail_host(&host)?;
        }
        ChaosKind::HostNetwork => p.host_links(&host, false)?,
        ChaosKind::Switchover => {
            let done = p.ctl(&["switchover", &it.target, "--wait", "30"])?;
            if done["done"] != true {
                return Err(LabError::Invalid(format!("switchover: {done}")));
            }
        }
        ChaosKind::Blip => {
            p.host_links(&host, false)?;
            std::thread::sleep(Duration::from_secs(1));
            p.host_links(&host, true)?;
        }
        ChaosKind::ControllerCutOff => {
            p.cut_from_controllers(&host, true)?;
            std::thread::sleep(Duration::from_secs(2));
            p.cut_from_controllers(&host, false)?;
        }
    }
    if let Some(v) = it.kind.verdict() {
        let subject = if it.kind.on_host() { &host } else { &it.target };
        // A leader killed right after its verdict may die before its status
        // file shows it; the next leader then finishes the migration it
        // wrote without a verdict of its own (the unit is migrating): the
        // unit leaving its host is the evidence then.
        let leader_killed = it.kind == ChaosKind::LeaderKill;
        let found = holdfast_lab::wait_for_every(
            &format!("a verdict {v} about {subject}"),
            LONG,
            Duration::from_millis(20),
            || {
                let v = p.verdicts().into_iter().find(|x| {
                    verdict_is(x, v, subject) && x["unix_ms"].as_u64().unwrap_or(0) >= since
                });
                if v.is_some() {
                    return Ok(Some(v));
                }
                let gone = leader_killed && p.placement(subject)?.0 != host;
                Ok(gone.then_some(None))
            },
        )?;
        // From the failure's injection (the verdict's own figure counts from
        // its first bad measurement).
        it.detection_ms = found
            .and_then(|f| f["unix_ms"].as_u64())
            .map(|t| t.saturating_sub(since));
    }
    if it.kind == ChaosKind::Stall {
        // Resumed (no verdict, the same process) or taken over as hung.
        std::thread::sleep(Duration::from_secs(1));
        let hung = p.verdicts().into_iter().any(|x| {
            verdict_is(&x, "hung", &it.target) && x["unix_ms"].as_u64().unwrap_or(0) >= since
        });
        if hung {
            let to = p.wait_moved_off(&it.target, &[host.as_str()], LONG)?;
            p.wait_protected(&it.target, &to, LONG)?;
            it.moved.push((it.target.clone(), host.clone(), to));
            it.resumed_ms = Some(t0.elapsed().as_millis() as u64);
        }
    }
    if let Some(pid) = stopped_unit {
        // A Hang's process is woken only now: taken over, it must be gone.
        holdfast_lab::send_signal(pid as u32, Signal::Cont, false);
        if !it.moved.is_empty() || it.kind == ChaosKind::Hang {
            holdfast_lab::wait_for_every(
                &format!("the stopped holdfastd (pid {pid}) gone after its takeover"),
                LONG,
                Duration::from_millis(20),
                || Ok((!std::path::Path::new(&format!("/proc/{pid}")).exists()).then_some(())),
            )?;
        }
    }
    let moves = (it.kind.verdict().is_some() || it.kind == ChaosKind::Switchover)
        && it.kind != ChaosKind::Stall;
    if moves {
        for u in &affected {
            let to = p.wait_moved_off(u, &[host.as_str()], LONG)?;
            p.wait_protected(u, &to, LONG)?;
            it.moved.push((u.clone(), host.clone(), to));
        }
        it.resumed_ms = Some(t0.elapsed().as_millis() as u64);
    } else if it.moved.is_empty() {
        if matches!(it.kind, ChaosKind::EtcdStall | ChaosKind::MgmtLoss) {
            // A new leader, and time for what it would do to show (the
            // controllers' grace for an agent whose lease expired).
            p.wait_leader(4, LONG)?;
            std::thread::sleep(Duration::from_secs(4));
        }
        std::thread::sleep(Duration::from_secs(3));
        let failed = p.ctl(&["status"])?["failed_hosts"].clone();
        if failed.as_array().is_some_and(|a| !a.is_empty()) {
            return Err(LabError::Invalid(format!(
                "{:?} of {host}: hosts recorded failed: {failed}",
                it.kind
            )));
        }
        let acting: Vec<serde_json::Value> = p
            .verdicts()
            .into_iter()
            .filter(|x| x["unix_ms"].as_u64().unwrap_or(0) >= since && !x["kind"].is_null())
            .collect();
        if !acting.is_empty() {
            return Err(LabError::Invalid(format!(
                "{:?} of {host} gave failure verdicts: {acting:?}",
                it.kind
            )));
        }
        let now = settled(p)?;
        let pids_now: Vec<Option<u64>> = now.iter().map(|(u, h)| p.unit_pid(u, h)).collect();
        if now != before || pids_now != pids {
            return Err(LabError::Invalid(format!(
                "{:?} of {host} moved units: {before:?} {pids:?} -> {now:?} {pids_now:?}",
                it.kind
            )));
        }
    }
    if let Some((i, stopped)) = frozen {
        // The old leader wakes 6 s after its stop, and must act on nothing.
        std::thread::sleep(Duration::from_secs(6).saturating_sub(stopped.elapsed()));
        p.lab.kill(p.controllers[i].0, Signal::Cont);
        std::thread::sleep(Duration::from_secs(2));
    }
    if matches!(it.kind, ChaosKind::LeaderKill | ChaosKind::LeaderFreeze) {
        // Exactly once: the unit runs on its new host only.
        for h in ["a", "b", "c"] {
            let (primary, _) = p.placement(&it.target)?;
            if h != primary && p.unit_pid(&it.target, h).is_some() {
                return Err(LabError::Invalid(format!(
                    "{} runs on {h} too (placed on {primary})",
                    it.target
                )));
            }
        }
    }
    if let Some(i) = killed_controller {
        p.restart_controller(i)?;
    }
    let added = [0, it.burst, it.burst];
    let seen = watch.check_grown(p, Duration::from_millis(500), &added)?;
    it.late = seen
        .split("; ")
        .find(|s| s.starts_with("LATE:"))
        .map(str::to_string);
    // Heal what the failure broke.
    match it.kind {
        ChaosKind::Container => p.revive_container(&it.target, &host)?,
        ChaosKind::ContainerNetwork => p.container_link(&it.target, &host, true)?,
        ChaosKind::Host | ChaosKind::HostNetwork => p.heal_host(&host)?,
        _ => {}
    }
    Ok(())
}

impl std::fmt::Display for Iteration {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{:>4} {:<16} {:<3} burst {:>2} +{:>3} ms",
            self.n,
            format!("{:?}", self.kind),
            self.target,
            self.burst,
            self.delay_ms
        )?;
        if let Some(d) = self.detection_ms {
            write!(f, "  verdict {d} ms")?;
        }
        if let Some(r) = self.resumed_ms {
            write!(f, "  resumed {r} ms")?;
        }
        for (u, a, b) in &self.moved {
            write!(f, "  {u} {a}->{b}")?;
        }
        if let Some(l) = &self.late {
            write!(f, "  {l}")?;
        }
        match &self.error {
            None => write!(f, "  ok"),
            Some(e) => write!(f, "  FAILED: {e}"),
        }
    }
}

impl std::fmt::Display for Summary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(
            f,
            "chaos seed {}: {} iterations in {} s, {} passed, {} failed",
            self.seed, self.iterations, self.seconds, self.passed, self.failed
        )?;
        writeln!(f, "  by kind: {:?}", self.by_kind)?;
        writeln!(
            f,
            "  session resets {}, NOTIFICATIONs {}, routes withdrawn or re-learned {}, two senders {}, late by a peer's retransmission backoff {}, needless migrations {}, hosts recorded failed {}",
            self.session_resets,
            self.notifications,
            self.routes_withdrawn_or_relearned,
            self.two_senders.len(),
            self.late_by_peer_backoff,
            self.needless_migrations,
            self.failed_hosts
        )?;
        writeln!(f, "  max detection ms: {:?}", self.max_detection_ms)?;
        writeln!(f, "  max resumed ms: {:?}", self.max_resumed_ms)?;
        write!(f, "  work dir: {}", self.work_dir.display())
    }
}
