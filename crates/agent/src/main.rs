//! `holdfast-agent`: see the library's documentation.

use anyhow::{bail, Context, Result};
use clap::{CommandFactory, Parser};
use holdfast_agent::core::AgentConfig;
use holdfast_agent::hang::HangConfig;
use holdfast_agent::probe::{ProbeConfig, Target};
use holdfast_agent::shell::{self, ShellConfig};
use holdfast_agent::watchdog::WatchdogConfig;
use holdfast_control_api::tls::{Tls, TlsFiles};
use std::path::PathBuf;
use std::time::Duration;

#[derive(Parser, Debug)]
#[command(
    version = holdfast_version::VERSION,
    name = "holdfast-agent",
    about = "Holdfast host agent: runs, probes and fences the units on this host"
)]
struct Args {
    /// This host's name.
    #[arg(long)]
    host: String,
    /// The agent of the agent server (it probes every host and unit).
    #[arg(long)]
    agent_server: bool,
    /// etcd endpoints, comma-separated (`http://ADDR:2379,...`).
    #[arg(long, value_delimiter = ',', required = true)]
    etcd: Vec<String>,
    /// The cluster's name (etcd keys under `/holdfast/<cluster>/`).
    #[arg(long, default_value = "default")]
    cluster: String,
    /// Controller replicas (`http://ADDR:PORT`, repeatable).
    #[arg(long = "controller")]
    controllers: Vec<String>,
    /// The host's lease TTL; the lease is renewed every `--renew-ms` and
    /// the host's units fenced `--margin-ms` before it could expire.
    /// (A host-network blip shorter than `TTL − margin − 2 × renew` — 1.5 s
    /// with the defaults — fences nothing.)
    #[arg(long, default_value_t = 3000)]
    lease_ttl_ms: u64,
    #[arg(long, default_value_t = 250)]
    renew_ms: u64,
    #[arg(long, default_value_t = 1000)]
    margin_ms: u64,
    /// Leave a leader that sent nothing (its beats come every 100 ms) for
    /// this long, and attach to the one etcd names.
    #[arg(long, env = "HOLDFAST_LEADER_SILENCE_MS", default_value_t = 1000)]
    leader_silence_ms: u64,
    /// Heartbeat period on the controller stream.
    #[arg(long, default_value_t = 100)]
    heartbeat_ms: u64,
    /// IP SLA probe targets, `NAME=ADDR:PORT` (repeatable): what the agent
    /// probes until the leader sends its probe plan.
    #[arg(long = "probe")]
    probes: Vec<String>,
    /// Where the other agents probe this host, `ADDR:PORT` (its data
    /// network; a closed port answers with a reset), published in its
    /// `agents/` record: the leader's probe plans name it.
    #[arg(long)]
    probe_addr: Option<std::net::SocketAddr>,
    /// Keep the `--probe` targets: ignore the leader's probe plans.
    #[arg(long)]
    static_probes: bool,
    #[arg(long, default_value_t = 100)]
    probe_interval_ms: u64,
    /// A target that keeps answering is reported once per this many ms
    /// (under the controller's `--stale-after-ms`, 1 s by default); misses, the answer after
    /// one, and every outcome for 1 s after any miss go at once. The probe
    /// interval reports every outcome.
    #[arg(long, default_value_t = 500)]
    probe_report_ms: u64,
    /// Units to start at boot, `NAME=CONFIG` (a holdfastd configuration).
    #[arg(long = "unit")]
    units: Vec<String>,
    /// The holdfastd binary (default: next to this one).
    #[arg(long)]
    holdfastd: Option<PathBuf>,
    /// Per-unit directories (configs, logs, control sockets).
    #[arg(long, default_value = "/run/holdfast/agent")]
    work_dir: PathBuf,
    /// A JSON status file, rewritten as things change.
    #[arg(long)]
    status_file: Option<PathBuf>,
    /// The interface service addresses go on (when the controller names
    /// none).
    #[arg(long, default_value = "eth0")]
    interface: String,
    /// A unit's container on this host, `UNIT=NETNS[:IFNAME]` (repeatable):
    /// the unit runs in the network namespace NETNS and its service
    /// addresses go on IFNAME there (default `eth0`). When the namespace
    /// is gone after the unit exits, the agent reports a container failure.
    #[arg(long = "container")]
    containers: Vec<String>,
    /// Serve Prometheus metrics at `GET /metrics` on this address.
    #[arg(long)]
    metrics_listen: Option<std::net::SocketAddr>,
    /// Serve the other host agents' failsafe asks on this address (the
    /// management network; published in this host's etcd record). Without
    /// it, no other host's units survive an etcd outage: none of their
    /// failsafe rounds can be confirmed.
    #[arg(long)]
    failsafe_listen: Option<std::net::SocketAddr>,
    /// This host's failure domain (a rack, a power feed: hosts that may fail
    /// together), published in its etcd record: the controller places a
    /// unit's backup outside its primary's domain whenever one fits.
    #[arg(long)]
    failure_domain: Option<String>,
    /// Hang detection: each unit's holdfastd pings the agent (`sd_notify`
    /// `WATCHDOG=1`, `WATCHDOG_USEC` set to this) while its event loops
    /// make progress; a unit with no ping for this long whose process is
    /// stopped (or for 4 times this long, whatever its state) is fenced and
    /// reported hung. 0: off.
    #[arg(long, env = "HOLDFAST_AGENT_HANG_MS", default_value_t = 500)]
    hang_ms: u64,
    /// How long a unit may take to start serving (its first `READY=1` or
    /// ping) before it is judged hung: a `--takeover` or a standby loading
    /// its state sends nothing until it serves.
    #[arg(long, default_value_t = 30_000)]
    hang_start_ms: u64,
    /// This agent's certificate (PEM; `holdfast ctl certs init` makes
    /// `agent-HOST.pem`, which must name `--host`). With `--tls-key` and
    /// `--tls-ca`: the Attach stream and the failsafe rounds use mutual
    /// TLS, the failsafe service takes only agents with a certificate
    /// from the CA, and the agent presents it to `https://` etcd
    /// endpoints (etcd's user `agent:HOST`).
    #[arg(long)]
    tls_cert: Option<PathBuf>,
    /// The key of `--tls-cert` (PEM).
    #[arg(long)]
    tls_key: Option<PathBuf>,
    /// The CA of the controllers and the other agents (PEM).
    #[arg(long)]
    tls_ca: Option<PathBuf>,
    /// Plaintext gRPC (no `--tls-*`): the Attach stream and the failsafe
    /// service carry no identity. Logged as a warning at start; without
    /// it (or the `--tls-*` flags) the agent refuses to start.
    #[arg(long, conflicts_with_all = ["tls_cert", "tls_key", "tls_ca"])]
    insecure: bool,
}

fn pair(s: &str, what: &str) -> Result<(String, String)> {
    let Some((a, b)) = s.split_once('=') else {
        bail!("{what} `{s}`: expected NAME=VALUE");
    };
    Ok((a.to_string(), b.to_string()))
}

fn main() -> Result<()> {
    holdfast_docgen::intercept(Args::command);
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .init();
    let a = Args::parse();
    let watchdog = WatchdogConfig {
        ttl: Duration::from_millis(a.lease_ttl_ms),
        renew: Duration::from_millis(a.renew_ms),
        margin: Duration::from_millis(a.margin_ms),
    };
    // Fencing a unit takes well under 100 ms (SIGKILL through its pidfd).
    watchdog
        .validate(Duration::from_millis(100))
        .context("--lease-ttl-ms / --renew-ms / --margin-ms")?;
    let targets = a
        .probes
        .iter()
        .map(|p| {
            let (name, addr) = pair(p, "--probe")?;
            Ok(Target {
                name,
                addr: addr.parse().with_context(|| format!("--probe {p}"))?,
            })
        })
        .collect::<Result<Vec<_>>>()?;
    let units = a
        .units
        .iter()
        .map(|u| pair(u, "--unit").map(|(n, c)| (n, PathBuf::from(c))))
        .collect::<Result<Vec<_>>>()?;
    let holdfastd = match a.holdfastd {
        Some(p) => p,
        None => std::env::current_exe()?
            .parent()
            .map(|d| d.join("holdfastd"))
            .context("the directory of this executable")?,
    };
    let tls = match TlsFiles::from_flags(a.tls_cert, a.tls_key, a.tls_ca)? {
        Some(f) => Some(Tls::load(&f)?),
        None if a.insecure => {
            tracing::warn!(
                "--insecure: plaintext gRPC, the Attach stream and the failsafe service carry no identity (anyone on the management network may ask this agent's failsafe or act as a controller)"
            );
            None
        }
        None => bail!(
            "the agent needs --tls-cert, --tls-key and --tls-ca (`holdfast ctl certs init`, docs/security.md), or --insecure for plaintext gRPC"
        ),
    };
    let interval = Duration::from_millis(a.probe_interval_ms.max(10));
    let cfg = ShellConfig {
        core: AgentConfig {
            host: a.host,
            agent_server: a.agent_server,
            watchdog,
            heartbeat: Duration::from_millis(a.heartbeat_ms.max(10)),
            unix_origin_ms: 0,
            version: holdfast_version::VERSION.to_string(),
            probe_plans: !a.static_probes,
        },
        etcd: a.etcd,
        cluster: a.cluster,
        controllers: a.controllers,
        leader_silence: Duration::from_millis(a.leader_silence_ms.max(10)),
        probe: ProbeConfig {
            interval,
            timeout: interval,
            stall_slack: interval / 2,
            report_every: Duration::from_millis(a.probe_report_ms.max(1)).max(interval),
            ..ProbeConfig::default()
        },
        targets,
        units,
        holdfastd,
        work_dir: a.work_dir,
        status_file: a.status_file,
        interface: a.interface,
        containers: a
            .containers
            .iter()
            .map(|c| pair(c, "--container").map(|(u, s)| (u, shell::Container::parse(&s))))
            .collect::<Result<_>>()?,
        metrics_listen: a.metrics_listen,
        failsafe_listen: a.failsafe_listen,
        failure_domain: a.failure_domain,
        probe_addr: a.probe_addr,
        hang: (a.hang_ms > 0).then(|| {
            HangConfig::new(
                Duration::from_millis(a.hang_ms),
                Duration::from_millis(a.hang_start_ms.max(a.hang_ms)),
            )
        }),
        tls,
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(async {
        let stop = async {
            let mut term =
                tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
                    .expect("SIGTERM handler");
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = term.recv() => {}
            }
        };
        shell::run(cfg, stop).await
    })
}
