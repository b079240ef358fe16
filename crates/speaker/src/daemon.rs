//! The daemon task: owns the configuration, the routing instances, the peer
//! tasks and the listeners; applies configuration (at start and on SIGHUP,
//! touching only what changed) and answers control and metrics requests.
//!
//! [`run`] returns how the daemon ended ([`Exit`]); the binary turns that
//! into the process's exit status. A fenced process ([`Exit::Fenced`]) and
//! a failed takeover ([`Exit::TakeoverFailed`]) must exit at once, without
//! running destructors: dropping the runtime would close the sessions'
//! sockets, and their FIN must never reach a peer.
//!
//! # Known issues
//! - The fence (and a failed takeover) is noticed between two requests: a
//!   request being served (say `show rib` on a large table) finishes first.
//!   The ACK gate drops every packet meanwhile.

mod api_routes;
mod bmp;
mod fib;
mod mrt;
mod rpki;
mod standby;
mod takeover;

use crate::bfd::{Bfd, BfdCmd};
use crate::control::{self, DaemonReq};
use crate::convert::{self, Compiled};
use crate::msg::peer::{PeerCmd, PeerSettings};
use crate::msg::rib::ResumePeer;
use crate::msg::rib::{Mailboxes, QueryResult, RibCmd, RibHandle, RibQuery};
use crate::nsr::{Fence, Nsr};
use crate::obs::{InstanceLabels, Metrics, PeerLabels};
use crate::peer::{self, SharedStatus};
use crate::resume::{self, Takeover};
use crate::rib_thread;
use crate::socket;
use anyhow::Context;
use holdfast_api::{NeighborInfo, Request, Response, RibEntry, RibTable, Summary};
use holdfast_config::{Config, Neighbor, NeighborKey};
use holdfast_rib::PeerId;
use holdfast_wire::{PathAttrs, Prefix};
use std::collections::{BTreeMap, HashMap};
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};
use tokio::net::TcpListener;
use tokio::signal::unix::{signal, SignalKind};
use tokio::sync::mpsc;

/// Accepting sockets are routed to peer tasks by (VRF, remote address).
type Lookup = Arc<RwLock<HashMap<(Option<String>, IpAddr), mpsc::UnboundedSender<PeerCmd>>>>;

struct Instance {
    rib: RibHandle,
    mailboxes: Mailboxes,
    /// What the RIB thread originates: `networks` overlaid by `api_routes`.
    originated: BTreeMap<Prefix, Arc<PathAttrs>>,
    /// `[[network]]` routes of the configuration.
    networks: BTreeMap<Prefix, Arc<PathAttrs>>,
    /// Routes added at run time (`add_route`, the GoBGP API's `AddPath`).
    api_routes: BTreeMap<Prefix, api_routes::ApiRoute>,
    /// The kernel FIB thread, with `[kernel]`.
    fib: Option<crate::msg::fib::FibHandle>,
    /// A FIB thread stopped by a reload, until it has removed our routes:
    /// a FIB started again for the instance waits for it.
    fib_retiring: Option<std::sync::mpsc::Receiver<()>>,
}

struct PeerEntry {
    id: PeerId,
    tx: mpsc::UnboundedSender<PeerCmd>,
    status: SharedStatus,
    neighbor: Neighbor,
    vrf: Option<String>,
}

struct ListenerEntry {
    listener: Arc<TcpListener>,
    task: tokio::task::JoinHandle<()>,
    md5: HashMap<IpAddr, String>,
}

struct Daemon {
    path: PathBuf,
    cfg: Config,
    workers: Option<usize>,
    control_override: Option<PathBuf>,
    instances: HashMap<String, Instance>,
    peers: HashMap<NeighborKey, PeerEntry>,
    listeners: HashMap<(Option<String>, SocketAddr), ListenerEntry>,
    lookup: Lookup,
    metrics: Arc<Metrics>,
    next_id: PeerId,
    /// Standby: the engine ids its preheated sessions were given, taken
    /// by `add_peer` for the same neighbours.
    preassigned: HashMap<NeighborKey, PeerId>,
    started: Instant,
    nsr: Option<Nsr>,
    /// While taking over: the stored sessions, and for each neighbour that
    /// has one, what is needed to hand it its restored connection.
    takeover: Option<Takeover>,
    resume_peers: HashMap<String, Vec<ResumePeer>>,
    resume_targets: Vec<ResumeTarget>,
    /// `holdfastd --record DIR`: every peer's inputs are recorded there.
    record: Option<PathBuf>,
    /// Where a takeover's background task reports its failure.
    takeover_failed: mpsc::UnboundedSender<anyhow::Error>,
    /// The BFD thread, started for the first neighbour with `bfd`.
    bfd: Option<Bfd>,
    /// The daemon's own request queue (for its timers).
    self_tx: control::DaemonTx,
    /// `[[mrt]]`: dump timers and updates logs.
    mrt: mrt::MrtRuntime,
    /// `[[bmp]]`: the sessions' hub and the collectors' tasks.
    bmp_hub: crate::msg::bmp::BmpHub,
    bmp: crate::bmp::BmpRuntime,
    /// `[[rpki]]`: the RTR task and the VRPs in force.
    rpki: crate::rpki::RpkiRuntime,
}

struct ResumeTarget {
    instance: String,
    address: IpAddr,
    id: PeerId,
    sock: crate::socket::SockOpts,
    tx: mpsc::UnboundedSender<PeerCmd>,
}

/// Exit status of a fenced process.
pub const EXIT_FENCED: i32 = 75;

/// How the daemon ended.
#[derive(Debug)]
pub enum Exit {
    /// SIGTERM or SIGINT: every peer was sent a Cease, the NSR rules were
    /// removed.
    Stopped,
    /// Another speaker owns the NSR instance. The gate drops every packet;
    /// exit at once with [`EXIT_FENCED`].
    Fenced(Fence),
    /// A takeover could not complete after the sessions' sockets were
    /// being rebuilt; exit at once with status 1.
    TakeoverFailed(anyhow::Error),
}

impl Exit {
    /// The process's exit status.
    pub fn code(&self) -> i32 {
        match self {
            Exit::Stopped => 0,
            Exit::Fenced(_) => EXIT_FENCED,
            Exit::TakeoverFailed(_) => 1,
        }
    }
}

/// `--takeover`: start as the backup of the `[nsr]` instance.
pub struct TakeoverOpts {
    pub ready_file: Option<PathBuf>,
    /// The store epoch to claim at least (the controller's fencing token).
    pub epoch: u64,
}

/// How the daemon starts.
pub enum Start {
    /// A primary (or without NSR, a plain speaker).
    Primary,
    /// `--takeover`: the backup taking the `[nsr]` instance over now.
    Takeover(TakeoverOpts),
    /// `--standby`: a preheated backup; it follows the store and takes
    /// over on `holdfast nsr takeover` (docs/nsr.md).
    Standby,
}

pub async fn run(
    path: PathBuf,
    cfg: Config,
    workers: Option<usize>,
    control_override: Option<PathBuf>,
    start: Start,
    record: Option<PathBuf>,
) -> anyhow::Result<Exit> {
    // The control socket's safety first: nothing starts if it cannot be
    // served safely (issue 30).
    control::check_socket_dir(&cfg.global.control_socket)?;
    let control_group = cfg
        .global
        .control_socket_group
        .as_deref()
        .map(control::resolve_group)
        .transpose()?;
    crate::watchdog::start();
    crate::watchdog::beat("io", crate::watchdog::IO_BUDGET);
    let metrics = Arc::new(Metrics::new());
    let (tx, mut rx) = mpsc::unbounded_channel();
    let (takeover_failed, mut failed_rx) = mpsc::unbounded_channel();
    let mut hup = signal(SignalKind::hangup())?;
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    let mut d = Daemon {
        path,
        cfg: cfg.clone(),
        workers,
        control_override,
        instances: HashMap::new(),
        peers: HashMap::new(),
        listeners: HashMap::new(),
        lookup: Arc::new(RwLock::new(HashMap::new())),
        metrics,
        next_id: 1,
        preassigned: HashMap::new(),
        started: Instant::now(),
        nsr: None,
        takeover: None,
        resume_peers: HashMap::new(),
        resume_targets: Vec::new(),
        record,
        takeover_failed,
        bfd: None,
        self_tx: tx.clone(),
        mrt: mrt::MrtRuntime::default(),
        bmp_hub: crate::msg::bmp::BmpHub::default(),
        bmp: crate::bmp::BmpRuntime::default(),
        rpki: crate::rpki::RpkiRuntime::default(),
    };
    let control_path = d.cfg.global.control_socket.clone();
    let serve = |tx| {
        control::serve_control(&control_path, control_group, tx)
            .with_context(|| format!("control socket {}", control_path.display()))
    };
    let nsr_on = cfg.nsr.as_ref().is_some_and(|n| n.enabled);
    let standby = matches!(start, Start::Standby);
    let primary = matches!(start, Start::Primary);
    match start {
        Start::Takeover(opts) => {
            let t = Takeover::begin(&cfg, opts.ready_file.clone(), opts.epoch, None)?;
            d.nsr = Some(t.nsr.clone());
            d.takeover = Some(t);
        }
        Start::Primary if nsr_on => d.nsr = Some(resume::start_primary(&cfg)?),
        Start::Primary => {}
        Start::Standby => {
            serve(tx.clone())?;
            let Some(trigger) = d
                .standby(&cfg, &mut rx, [&mut hup, &mut term, &mut int])
                .await?
            else {
                let _ = std::fs::remove_file(&control_path);
                return Ok(Exit::Stopped);
            };
            let opts = &trigger.opts;
            match Takeover::begin(
                &cfg,
                opts.ready_file.clone(),
                opts.epoch,
                Some(&trigger.positions),
            ) {
                Ok(t) => {
                    let _ = trigger.reply.send(Response::message(format!(
                        "taking over instance {:?} at epoch {}: {} session(s) loaded, {} with their tables preheated",
                        t.nsr.shared.instance,
                        t.nsr.shared.epoch.load(std::sync::atomic::Ordering::SeqCst),
                        t.sessions.len(),
                        t.preheated.len()
                    )));
                    d.nsr = Some(t.nsr.clone());
                    d.takeover = Some(t);
                }
                Err(e) => {
                    let _ = trigger
                        .reply
                        .send(Response::error(format!("takeover failed: {e}")));
                    return Err(e.into());
                }
            }
        }
    }
    let fenced = fenced(d.nsr.clone());
    tokio::pin!(fenced);
    let mut resync = d.nsr.as_ref().map(|n| n.shared.resync.subscribe());
    d.apply(cfg, true)?;
    d.restart_mrt();
    d.restart_bmp();
    d.restart_rpki();
    if d.takeover.is_some() {
        d.complete_takeover()?;
        // After each instance's `Resume` (the same queue): the tables are
        // complete, our routes in the kernel are adopted as they are.
        d.activate_fib(false);
    } else {
        d.activate_fib(true);
    }
    if !standby {
        serve(tx.clone())?;
    }
    if let Some(addr) = d.cfg.global.metrics_listen {
        control::serve_metrics(addr, tx.clone())
            .await
            .with_context(|| format!("metrics listener {addr}"))?;
    }
    crate::grpc::start(&d.cfg.global, tx.clone()).await?;
    tracing::info!(
        asn = d.cfg.global.asn,
        router_id = %d.cfg.global.router_id,
        neighbors = d.peers.len(),
        "holdfastd running"
    );
    crate::watchdog::ready("running");
    if primary {
        release_start_up_pages();
    }
    loop {
        tokio::select! {
            f = &mut fenced => return Ok(Exit::Fenced(f)),
            Some(e) = failed_rx.recv() => return Ok(Exit::TakeoverFailed(e)),
            Some(req) = rx.recv() => d.on_request(req).await,
            Ok(()) = resynced(resync.as_mut()) => d.replicate_all_api_routes(),
            _ = hup.recv() => {
                if let Err(e) = d.reload() {
                    tracing::error!("reload failed, keeping the running configuration: {e:#}");
                }
            }
            _ = term.recv() => break,
            _ = int.recv() => break,
        }
    }
    d.shutdown().await;
    Ok(Exit::Stopped)
}

/// Start-up is over: the pages of its code and read-only data leave the
/// resident set; whatever runs again maps them back from the page cache
/// (`holdfast_linux::resident`, docs/notes/issue12-small-units.md). Not
/// after a takeover or as a standby, whose code is about to run or
/// running: only a primary, before its first session.
fn release_start_up_pages() {
    match holdfast_linux::resident::release_clean_code() {
        Ok(r) => tracing::debug!(
            mappings = r.mappings,
            kib = r.bytes / 1024,
            "start-up pages released"
        ),
        Err(e) => tracing::warn!("releasing the start-up pages: {e}"),
    }
}

/// Resolves when the sessions are told to re-synchronise (the store
/// answers again); never without NSR.
async fn resynced(rx: Option<&mut tokio::sync::watch::Receiver<u64>>) -> Result<(), ()> {
    match rx {
        Some(rx) => rx.changed().await.map_err(|_| ()),
        None => std::future::pending().await,
    }
}

/// Resolves when the NSR replicator is fenced; never without NSR.
async fn fenced(nsr: Option<Nsr>) -> Fence {
    match nsr {
        Some(n) => n.fenced().await,
        None => std::future::pending().await,
    }
}

impl Daemon {
    fn reload(&mut self) -> anyhow::Result<String> {
        let (mut cfg, warnings) = holdfast_config::load(&self.path)?;
        if let Some(w) = self.workers {
            cfg.global.workers = Some(w);
        }
        if let Some(p) = &self.control_override {
            cfg.global.control_socket = p.clone();
        }
        for w in &warnings {
            tracing::warn!("config: {w}");
        }
        let summary = self.apply(cfg, false)?;
        tracing::info!("configuration reloaded: {summary}");
        Ok(summary)
    }

    /// Brings the running state to `cfg`. At start everything is new; on a
    /// reload only neighbours, policies, listeners and networks that changed
    /// are touched.
    fn apply(&mut self, cfg: Config, initial: bool) -> anyhow::Result<String> {
        let compiled = convert::compile(&cfg).context("compiling policies")?;
        let diff = holdfast_config::diff(&self.cfg, &cfg);
        if !initial && diff.global_changed {
            tracing::warn!(
                "[global] changed: asn, router_id and listen take effect for new sessions only"
            );
            if self.cfg.global.effective_io_threads() != cfg.global.effective_io_threads() {
                tracing::warn!(
                    "[global] io_threads changed: it takes effect at the next start (a takeover or a restart)"
                );
            }
        }
        self.ensure_instances(&cfg, initial);
        if initial {
            self.adopt_stored_routes();
        }
        let kernel = if initial {
            String::new()
        } else {
            self.sync_kernel(&diff.kernel_changed)
        };
        let mut added = 0;
        let mut changed = 0;
        let mut removed = 0;
        let wanted: HashMap<NeighborKey, &Neighbor> =
            cfg.neighbors.iter().map(|n| (n.key(), n)).collect();
        let gone: Vec<NeighborKey> = self
            .peers
            .keys()
            .filter(|k| !wanted.contains_key(*k))
            .cloned()
            .collect();
        for key in gone {
            self.remove_peer(&key);
            removed += 1;
        }
        for n in &cfg.neighbors {
            let key = n.key();
            match self.peers.get(&key) {
                None => {
                    self.add_peer(&cfg, &compiled, n)?;
                    added += 1;
                }
                Some(entry) => {
                    if diff.bfd_changed.contains(&key) {
                        let (old, tx) = (entry.neighbor.bfd.clone(), entry.tx.clone());
                        self.bfd_changed(old.as_ref(), n, tx)?;
                    }
                    let Some(entry) = self.peers.get(&key) else {
                        continue;
                    };
                    let policy_changed = diff.policy_changed.contains(&key);
                    let settings_changed = entry.neighbor != *n || diff.global_changed;
                    if policy_changed || settings_changed {
                        let settings = convert::peer_settings(&cfg, &compiled, n, entry.id)?;
                        if policy_changed {
                            self.instance(&settings.instance)?
                                .rib
                                .send(RibCmd::SetPolicies {
                                    peer: entry.id,
                                    import: settings.spec.import.clone(),
                                    export: settings.spec.export.clone(),
                                });
                        }
                        let _ = entry.tx.send(PeerCmd::Reconfigure(Box::new(settings)));
                        if let Some(e) = self.peers.get_mut(&key) {
                            e.neighbor = n.clone();
                        }
                        changed += 1;
                    }
                }
            }
        }
        self.sync_listeners(&cfg)?;
        self.sync_networks(&cfg, &compiled)?;
        // After the neighbours: a BFD thread started above got the old
        // value.
        if self.cfg.bfd.realtime_priority != cfg.bfd.realtime_priority {
            if let Some(b) = &self.bfd {
                b.send(BfdCmd::Realtime(cfg.bfd.realtime_priority));
            }
        }
        self.cfg = cfg;
        if diff.mrt_changed && !initial {
            self.restart_mrt();
        }
        if (diff.bmp_changed || diff.instances_changed) && !initial {
            self.restart_bmp();
        }
        if (diff.rpki_changed || diff.instances_changed) && !initial {
            self.restart_rpki();
        }
        let mut summary =
            format!("{added} neighbour(s) added, {changed} changed, {removed} removed");
        if !kernel.is_empty() {
            summary.push_str("; kernel FIB changed: ");
            summary.push_str(&kernel);
        }
        Ok(summary)
    }

    /// A RIB thread for every routing instance of `cfg` that has none;
    /// with `with_fib` (at start) its kernel FIB thread too. On a reload
    /// the FIB of a new instance is started by `sync_kernel` like any
    /// `[kernel]` added.
    fn ensure_instances(&mut self, cfg: &Config, with_fib: bool) {
        for inst in &cfg.instances {
            if !self.instances.contains_key(&inst.name) {
                let mut engine_cfg = convert::engine_config(cfg, inst);
                if !with_fib {
                    engine_cfg.fib_ecmp = 0;
                }
                let engine = holdfast_rib::Engine::new(engine_cfg);
                let mailboxes: Mailboxes = Arc::new(RwLock::new(HashMap::new()));
                let fib = inst
                    .kernel
                    .as_ref()
                    .filter(|_| with_fib)
                    .and_then(|k| self.spawn_fib(&inst.name, k, None));
                let rib = rib_thread::spawn(
                    inst.name.clone(),
                    engine,
                    mailboxes.clone(),
                    self.metrics.clone(),
                    fib.clone(),
                );
                self.instances.insert(
                    inst.name.clone(),
                    Instance {
                        rib,
                        mailboxes,
                        originated: BTreeMap::new(),
                        networks: BTreeMap::new(),
                        api_routes: BTreeMap::new(),
                        fib,
                        fib_retiring: None,
                    },
                );
            }
        }
    }

    /// The engine id of a new neighbour: the one a standby gave it, or
    /// the next.
    fn new_peer_id(&mut self, key: &NeighborKey) -> PeerId {
        if let Some(id) = self.preassigned.remove(key) {
            return id;
        }
        let id = self.next_id;
        self.next_id += 1;
        id
    }

    /// The BFD thread, started on first use.
    fn bfd(&mut self) -> anyhow::Result<&Bfd> {
        if self.bfd.is_none() {
            let nsr = self.nsr.clone();
            let priority = self.cfg.bfd.realtime_priority;
            self.bfd =
                Some(Bfd::start(self.metrics.clone(), nsr, priority).context("starting BFD")?);
        }
        self.bfd.as_ref().context("BFD")
    }

    /// A neighbour's BFD settings changed on reload: start, stop, replace
    /// (new mode or key) or reconfigure (new timers: a Poll Sequence, no
    /// flap) its BFD session. BGP is not reset.
    fn bfd_changed(
        &mut self,
        old: Option<&holdfast_config::BfdSettings>,
        n: &Neighbor,
        peer: mpsc::UnboundedSender<PeerCmd>,
    ) -> anyhow::Result<()> {
        let key = n.key();
        match (old, &n.bfd) {
            (None, None) => {}
            (Some(_), None) => self.bfd()?.send(BfdCmd::Remove { key }),
            (Some(o), Some(b)) if !o.needs_new_session(b) => {
                self.bfd()?.send(BfdCmd::Configure {
                    key,
                    session: convert::bfd_session(b),
                });
            }
            (_, Some(b)) => {
                let spec = convert::bfd_spec(n, b);
                self.bfd()?.send(BfdCmd::Add {
                    key,
                    spec,
                    peer,
                    resume: None,
                });
            }
        }
        if let Some(e) = self.peers.get_mut(&n.key()) {
            e.neighbor.bfd = n.bfd.clone();
        }
        Ok(())
    }

    fn instance(&self, name: &str) -> anyhow::Result<&Instance> {
        self.instances
            .get(name)
            .with_context(|| format!("unknown instance {name:?}"))
    }

    fn add_peer(&mut self, cfg: &Config, compiled: &Compiled, n: &Neighbor) -> anyhow::Result<()> {
        let id = self.new_peer_id(&n.key());
        let settings: PeerSettings = convert::peer_settings(cfg, compiled, n, id)?;
        let inst = self.instance(&settings.instance)?;
        inst.rib.send(RibCmd::AddPeer(settings.spec.clone()));
        let rib = inst.rib.clone();
        let mailboxes = inst.mailboxes.clone();
        let vrf = settings.sock.vrf.clone();
        let address = settings.address;
        let resuming = self.plan_resume(&settings);
        let sock = settings.sock.clone();
        let instance = settings.instance.clone();
        let (tx, status) = peer::spawn(
            settings,
            rib,
            self.metrics.clone(),
            self.nsr.clone(),
            resuming,
            self.record.as_deref(),
        );
        if let Some(log) = self.mrt.log_for(&n.instance, n.address) {
            let _ = tx.send(PeerCmd::Mrt(Some(log)));
        }
        self.bmp_attach(&tx);
        if resuming {
            self.resume_targets.push(ResumeTarget {
                instance,
                address,
                id,
                sock,
                tx: tx.clone(),
            });
        }
        if let Some(b) = &n.bfd {
            let spec = convert::bfd_spec(n, b);
            let resume = self
                .takeover
                .as_mut()
                .and_then(|t| t.bfd.remove(&n.key().to_string()))
                .map(Box::new);
            self.bfd()?.send(BfdCmd::Add {
                key: n.key(),
                spec,
                peer: tx.clone(),
                resume,
            });
        }
        mailboxes.write().expect("mailboxes").insert(id, tx.clone());
        self.lookup
            .write()
            .expect("lookup")
            .insert((vrf.clone(), address), tx.clone());
        self.peers.insert(
            n.key(),
            PeerEntry {
                id,
                tx,
                status,
                neighbor: n.clone(),
                vrf,
            },
        );
        Ok(())
    }

    fn remove_peer(&mut self, key: &NeighborKey) {
        let Some(entry) = self.peers.remove(key) else {
            return;
        };
        let _ = entry.tx.send(PeerCmd::Shutdown);
        if entry.neighbor.bfd.is_some() {
            if let Some(b) = &self.bfd {
                b.send(BfdCmd::Remove { key: key.clone() });
            }
        }
        if let Some(inst) = self.instances.get(&entry.neighbor.instance) {
            inst.mailboxes.write().expect("mailboxes").remove(&entry.id);
            inst.rib.send(RibCmd::RemovePeer(entry.id));
        }
        self.lookup
            .write()
            .expect("lookup")
            .remove(&(entry.vrf, entry.neighbor.address));
    }

    /// One listener per configured listen address and VRF in use, with the
    /// MD5 keys of the neighbours that can reach it.
    fn sync_listeners(&mut self, cfg: &Config) -> anyhow::Result<()> {
        let mut vrfs: Vec<Option<String>> = vec![None];
        for e in self.peers.values() {
            if !vrfs.contains(&e.vrf) {
                vrfs.push(e.vrf.clone());
            }
        }
        let mut wanted = Vec::new();
        for vrf in &vrfs {
            for addr in &cfg.global.listen {
                wanted.push((vrf.clone(), *addr));
            }
        }
        self.listeners.retain(|k, l| {
            let keep = wanted.contains(k);
            if !keep {
                l.task.abort();
            }
            keep
        });
        for key in wanted {
            if self.listeners.contains_key(&key) {
                continue;
            }
            let listener = match socket::listen(key.1, key.0.as_deref()) {
                Ok(l) => Arc::new(l),
                Err(e) => {
                    tracing::error!(addr = %key.1, vrf = ?key.0, "cannot listen: {e}");
                    continue;
                }
            };
            tracing::info!(addr = %key.1, vrf = ?key.0, "listening");
            let task = tokio::spawn(accept_loop(
                listener.clone(),
                key.0.clone(),
                self.lookup.clone(),
            ));
            self.listeners.insert(
                key,
                ListenerEntry {
                    listener,
                    task,
                    md5: HashMap::new(),
                },
            );
        }
        for ((vrf, addr), l) in self.listeners.iter_mut() {
            let mut want: HashMap<IpAddr, String> = HashMap::new();
            for e in self.peers.values() {
                if &e.vrf == vrf && e.neighbor.address.is_ipv4() == addr.is_ipv4() {
                    if let Some(key) = &e.neighbor.md5_password {
                        want.insert(e.neighbor.address, key.0.clone());
                    }
                }
            }
            let stale: Vec<IpAddr> = l
                .md5
                .keys()
                .filter(|ip| !want.contains_key(ip))
                .copied()
                .collect();
            for ip in stale {
                if let Err(e) = socket::listener_md5(&l.listener, ip, None) {
                    tracing::warn!(peer = %ip, "removing MD5 key: {e}");
                }
                l.md5.remove(&ip);
            }
            for (ip, key) in want {
                if l.md5.get(&ip) != Some(&key) {
                    socket::listener_md5(&l.listener, ip, Some(&key))
                        .with_context(|| format!("MD5 key for {ip} on listener {addr}"))?;
                    l.md5.insert(ip, key);
                }
            }
        }
        Ok(())
    }

    fn sync_networks(&mut self, cfg: &Config, compiled: &Compiled) -> anyhow::Result<()> {
        for (name, inst) in self.instances.iter_mut() {
            inst.networks = compiled.networks.get(name).cloned().unwrap_or_default();
            api_routes::sync_originated(name, inst);
        }
        let _ = cfg;
        Ok(())
    }

    /// Lets each instance's kernel FIB write once its RIB thread has
    /// handled what is queued (see `RibCmd::FibActivate`); on a fresh start
    /// (`start`) our routes the RIB does not want yet are kept for
    /// `startup_hold`.
    fn activate_fib(&self, start: bool) {
        for inst in &self.cfg.instances {
            let (Some(k), Some(i)) = (&inst.kernel, self.instances.get(&inst.name)) else {
                continue;
            };
            let hold = if start {
                Duration::from_secs(k.startup_hold as u64)
            } else {
                Duration::ZERO
            };
            i.rib.send(RibCmd::FibActivate { hold });
        }
    }

    async fn shutdown(&mut self) {
        // A normal stop removes our kernel routes (unless `persist`), as
        // BIRD's kernel protocol does; a fenced or killed process never
        // gets here and leaves them to its backup.
        for (name, inst) in self.instances.iter_mut() {
            inst.stop_fib(name, Duration::from_secs(60));
        }
        tracing::info!("shutting down: sending Cease to every peer");
        let keys: Vec<NeighborKey> = self.peers.keys().cloned().collect();
        for k in keys {
            self.remove_peer(&k);
        }
        // Give the writer tasks a bounded moment to put the Cease on the wire.
        tokio::time::sleep(Duration::from_millis(200)).await;
        self.bmp.stop().await;
        self.rpki.stop();
        if let (Some(n), Some(nsr)) = (&self.cfg.nsr, &self.nsr) {
            // A deliberate stop: let everything through, then take the
            // rules away (without a gate bound they would drop it all).
            nsr.gate.set_mode(holdfast_linux::nfq::GateMode::Bypass);
            if let Err(e) = holdfast_linux::rules::remove_all(&resume::tag(&n.instance)) {
                tracing::warn!(error = %e, "removing the NSR packet rules");
            }
        }
        let _ = std::fs::remove_file(&self.cfg.global.control_socket);
    }

    async fn on_request(&mut self, req: DaemonReq) {
        match req {
            DaemonReq::Control(r, reply) => {
                let resp = self.control(r).await;
                let _ = reply.send(resp);
            }
            DaemonReq::Metrics(reply) => {
                self.refresh_gauges().await;
                let _ = reply.send(self.metrics.encode());
            }
            DaemonReq::WatchBest(reply) => {
                let _ = reply.send(self.watch_best());
            }
        }
    }

    async fn counts(
        &self,
    ) -> HashMap<String, (usize, usize, HashMap<PeerId, holdfast_rib::PeerCounts>)> {
        let mut out = HashMap::new();
        for (name, inst) in &self.instances {
            if let Some(QueryResult::Counts {
                loc_rib,
                attr_sets,
                peers,
            }) = inst.rib.query(RibQuery::Counts).await
            {
                out.insert(name.clone(), (loc_rib, attr_sets, peers));
            }
        }
        out
    }

    async fn refresh_gauges(&self) {
        if let Some(n) = &self.nsr {
            self.metrics.nsr(&n.status("primary"));
        }
        let counts = self.counts().await;
        for (name, (loc, attrs, peers)) in &counts {
            let l = InstanceLabels {
                instance: name.clone(),
            };
            self.metrics
                .loc_rib_routes
                .get_or_create(&l)
                .set(*loc as i64);
            self.metrics.attr_sets.get_or_create(&l).set(*attrs as i64);
            for e in self.peers.values().filter(|e| &e.neighbor.instance == name) {
                if let Some(c) = peers.get(&e.id) {
                    let pl = PeerLabels {
                        instance: name.clone(),
                        peer: e.neighbor.address.to_string(),
                    };
                    self.metrics
                        .prefixes_received
                        .get_or_create(&pl)
                        .set(c.received as i64);
                    self.metrics
                        .prefixes_accepted
                        .get_or_create(&pl)
                        .set(c.accepted as i64);
                    self.metrics
                        .prefixes_advertised
                        .get_or_create(&pl)
                        .set(c.advertised as i64);
                }
            }
        }
    }

    async fn control(&mut self, req: Request) -> Response {
        match req {
            Request::ShowNeighbors => {
                let counts = self.counts().await;
                let mut list: Vec<NeighborInfo> = self
                    .peers
                    .values()
                    .map(|e| {
                        let c = counts
                            .get(&e.neighbor.instance)
                            .and_then(|(_, _, p)| p.get(&e.id))
                            .cloned();
                        convert::neighbor_info(&self.cfg, e.id, &e.neighbor, &e.status, c)
                    })
                    .collect();
                list.sort_by(|a, b| (&a.instance, &a.address).cmp(&(&b.instance, &b.address)));
                Response::neighbors(list)
            }
            Request::ShowSummary => {
                let counts = self.counts().await;
                let established = self
                    .peers
                    .values()
                    .filter(|e| {
                        e.status
                            .lock()
                            .map(|s| s.state == holdfast_fsm::State::Established)
                            .unwrap_or(false)
                    })
                    .count();
                Response::summary(Summary {
                    router_id: self.cfg.global.router_id.to_string(),
                    asn: self.cfg.global.asn,
                    instances: self.instances.len(),
                    neighbors_total: self.peers.len(),
                    neighbors_established: established,
                    loc_rib_routes: counts
                        .iter()
                        .map(|(k, v)| (k.clone(), v.0 as u64))
                        .collect(),
                    uptime_secs: self.started.elapsed().as_secs(),
                    version: holdfast_version::VERSION.to_string(),
                    io_threads: tokio::runtime::Handle::current().metrics().num_workers(),
                })
            }
            Request::ShowRib {
                instance,
                prefix,
                peer,
                table,
                limit,
            } => match self.show_rib(instance, prefix, peer, table, limit).await {
                Ok(v) => Response::rib(v),
                Err(e) => Response::error(format!("{e:#}")),
            },
            Request::Reload => match self.reload() {
                Ok(s) => Response::message(s),
                Err(e) => {
                    Response::error(format!("reload failed, running configuration kept: {e:#}"))
                }
            },
            Request::ShowNsr => Response::nsr(self.nsr_status()),
            Request::ShowFib { instance, limit } => {
                let mut names: Vec<&String> = self.instances.keys().collect();
                names.sort();
                if let Some(want) = &instance {
                    if !self.instances.contains_key(want) {
                        return Response::error(format!("no instance {want:?}"));
                    }
                    names.retain(|n| *n == want);
                }
                let mut out = Vec::new();
                for n in names {
                    if let Some(f) = &self.instances[n].fib {
                        if let Some(info) = f.show(limit.unwrap_or(100)).await {
                            out.push(info);
                        }
                    }
                }
                Response::fib(out)
            }
            Request::ShowRpki => Response::rpki(self.show_rpki().await),
            Request::ShowBfd => match &self.bfd {
                Some(b) => Response::bfd(b.show().await),
                None => Response::bfd(Vec::new()),
            },
            Request::NsrSwitchover { timeout_secs } => self.switchover(timeout_secs),
            Request::NsrTakeover { .. } => Response::error(
                "this holdfastd is not a standby (`holdfastd --standby`): nothing to take over",
            ),
            Request::DumpMrt {
                path,
                table,
                instance,
                peer,
            } => match self.dump_mrt(path, table, instance, peer).await {
                Ok(info) => Response::mrt(info),
                Err(e) => Response::error(format!("{e:#}")),
            },
            Request::AddRoute { instance, route } => self.add_route(instance, route).await,
            Request::DelRoute { instance, prefix } => self.del_route(instance, prefix).await,
            Request::NeighborReset { address } => {
                let Ok(ip) = address.parse::<IpAddr>() else {
                    return Response::error(format!("{address}: not an IP address"));
                };
                let mut n = 0;
                for e in self.peers.values().filter(|e| e.neighbor.address == ip) {
                    let _ = e.tx.send(PeerCmd::AdminReset);
                    n += 1;
                }
                if n == 0 {
                    Response::error(format!("no neighbour {ip}"))
                } else {
                    Response::message(format!("reset {n} session(s)"))
                }
            }
        }
    }

    async fn show_rib(
        &self,
        instance: Option<String>,
        prefix: Option<String>,
        peer: Option<String>,
        table: RibTable,
        limit: Option<usize>,
    ) -> anyhow::Result<Vec<RibEntry>> {
        let inst_name = instance.unwrap_or_else(|| "default".to_string());
        let inst = self.instance(&inst_name)?;
        let peer_entry = match &peer {
            None => None,
            Some(p) => {
                let ip: IpAddr = p
                    .parse()
                    .with_context(|| format!("{p}: not an IP address"))?;
                Some(
                    self.peers
                        .values()
                        .find(|e| e.neighbor.instance == inst_name && e.neighbor.address == ip)
                        .with_context(|| format!("no neighbour {ip} in instance {inst_name}"))?,
                )
            }
        };
        let prefix: Option<Prefix> = match prefix {
            None => None,
            Some(p) => Some(p.parse().map_err(|e: String| anyhow::anyhow!(e))?),
        };
        let q = match (&table, peer_entry, prefix) {
            (RibTable::In, Some(e), _) => RibQuery::AdjIn(e.id),
            (RibTable::Out, Some(e), _) => RibQuery::AdjOut(e.id),
            (RibTable::In | RibTable::Out, None, _) => {
                anyhow::bail!("--peer is required for the in and out tables")
            }
            (RibTable::Loc, _, Some(p)) => RibQuery::Lookup(p),
            (RibTable::Loc, _, None) => RibQuery::Loc,
        };
        let Some(QueryResult::Routes(mut routes)) = inst.rib.query(q).await else {
            anyhow::bail!("RIB thread did not answer");
        };
        if let Some(p) = prefix {
            routes.retain(|r| r.0 == p);
        }
        if let (RibTable::Loc, Some(e)) = (&table, peer_entry) {
            routes.retain(|r| r.1 == e.id);
        }
        routes.sort_by_key(|r| r.0);
        if let Some(l) = limit {
            routes.truncate(l);
        }
        let names: HashMap<PeerId, String> = self
            .peers
            .values()
            .map(|e| (e.id, e.neighbor.address.to_string()))
            .collect();
        let states = self.rpki_states(&inst.rib, table, &routes).await;
        Ok(routes
            .into_iter()
            .enumerate()
            .map(|(i, (p, peer, a, best))| {
                let mut e = convert::rib_entry(p, names.get(&peer), &a, best);
                e.rpki = states.get(i).copied().flatten().map(|v| v.to_string());
                e
            })
            .collect())
    }
}

/// How often a refused connection is logged per address: the control
/// plane's heartbeat connects to the BGP port every 100 ms.
const REFUSED_LOG_EVERY: Duration = Duration::from_secs(60);

async fn accept_loop(listener: Arc<TcpListener>, vrf: Option<String>, lookup: Lookup) {
    let mut refused: std::collections::HashMap<IpAddr, (Option<std::time::Instant>, u64)> =
        std::collections::HashMap::new();
    loop {
        let (stream, remote) = match listener.accept().await {
            Ok(x) => x,
            Err(e) => {
                tracing::warn!("accept: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let ip = match remote.ip() {
            IpAddr::V6(v6) => v6
                .to_ipv4_mapped()
                .map(IpAddr::V4)
                .unwrap_or(IpAddr::V6(v6)),
            v4 => v4,
        };
        let tx = lookup
            .read()
            .expect("lookup")
            .get(&(vrf.clone(), ip))
            .cloned();
        match tx {
            Some(tx) => {
                let _ = tx.send(PeerCmd::Inbound(stream));
            }
            None => {
                let now = std::time::Instant::now();
                let e = refused.entry(ip).or_insert((None, 0));
                e.1 += 1;
                if e.0
                    .is_none_or(|t| now.duration_since(t) >= REFUSED_LOG_EVERY)
                {
                    tracing::info!(%remote, refused = e.1, "connection from an unconfigured address refused (logged once a minute per address)");
                    *e = (Some(now), 0);
                }
                if refused.len() > 4096 {
                    refused.retain(|_, (t, _)| {
                        t.is_some_and(|t| now.duration_since(t) < REFUSED_LOG_EVERY)
                    });
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exit_status_of_each_ending() {
        assert_eq!(Exit::Stopped.code(), 0);
        let f = Fence {
            current: 8,
            ours: 7,
        };
        assert_eq!(Exit::Fenced(f).code(), 75);
        assert_eq!(
            Exit::TakeoverFailed(anyhow::anyhow!("address never appeared")).code(),
            1
        );
    }
}
