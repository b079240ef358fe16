//! `holdfast-controller`: one replica of the control plane. Campaigns for
//! leadership on an etcd lease and, while leader, drives the in-flight
//! migration of `/holdfast/<cluster>/migration` with fenced writes.
//!
//! ```text
//! holdfast-controller --etcd http://a:2379,http://b:2379,http://c:2379 --name c1 \
//!     [--cluster default] [--lease-ttl-ms 3000] [--step-ms 1000] [--status-file PATH]
//!     [--listen ADDR:PORT (--tls-cert PEM --tls-key PEM --tls-ca PEM | --insecure)]
//! ```
//!
//! With `--tls-*` the `Attach` service requires a client certificate from
//! the CA, and an agent's must name the host it attaches as
//! (docs/security.md). A replica that serves `Attach` (`--listen`) refuses
//! to start without them unless `--insecure` is given: then it is
//! plaintext, and a warning says so at start. The same certificate is the
//! replica's identity to etcd at `https://` endpoints (etcd's
//! `--client-cert-auth`: the user `controller:NAME`, role
//! `holdfast-controller`; the CA must also have issued etcd's member
//! certificates).
//!
//! Logs go to stderr (`HOLDFAST_LOG`, default `info`). SIGTERM or SIGINT
//! revokes the lease, so another replica takes over at once.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, Context};
use clap::{CommandFactory, Parser};
use holdfast_control::{AppPolicy, LocalizeConfig};
use holdfast_control_api::tls::TlsFiles;
use holdfast_controller::sense::SenseConfig;
use holdfast_controller::{Config, Replica};
use tokio::signal::unix::{signal, SignalKind};

/// One holdfast controller replica.
#[derive(Debug, Parser)]
#[command(name = "holdfast-controller", version = holdfast_version::VERSION)]
struct Args {
    /// etcd client URLs, comma-separated.
    #[arg(long, value_delimiter = ',', required = true)]
    etcd: Vec<String>,
    /// This replica's name (unique among the replicas).
    #[arg(long)]
    name: String,
    /// The controlled cluster: keys live under /holdfast/<cluster>/.
    #[arg(long, default_value = "default")]
    cluster: String,
    /// Lease TTL in ms (etcd rounds it up to whole seconds). The lease is
    /// renewed every TTL/3; the leader stops acting if it has not renewed
    /// within TTL − TTL/3 of the last renewal it sent.
    #[arg(long, default_value_t = 3000)]
    lease_ttl_ms: u64,
    /// The synthetic work time of one migration step, in ms.
    #[arg(long, default_value_t = 1000)]
    step_ms: u64,
    /// Write the replica's status as JSON to this file (replaced atomically
    /// about every 50 ms).
    #[arg(long)]
    status_file: Option<PathBuf>,
    /// Serve the agents' Attach stream (gRPC) on this address.
    #[arg(long)]
    listen: Option<std::net::SocketAddr>,
    /// How long a command to an agent may take, in ms.
    #[arg(long, default_value_t = 10_000)]
    command_timeout_ms: u64,
    /// The controller's heartbeat period (to hosts' agents and to units),
    /// in ms; the agents' probes should use the same.
    #[arg(long, default_value_t = 100)]
    probe_interval_ms: u64,
    /// Consecutive misses that make a path down.
    #[arg(long, default_value_t = 3)]
    misses: u32,
    /// The confirmation window of a host or host-network failure, in ms
    /// (TENSOR's extra 3 s).
    #[arg(long, default_value_t = 3000)]
    host_confirm_ms: u64,
    /// How long a path's last report counts as fresh, in ms: above the
    /// agents' `--probe-report-ms` (a target that keeps answering is
    /// reported that often). Raise both together for a large fleet
    /// (docs/control-plane.md, "Sizing").
    #[arg(long, default_value_t = 1000)]
    stale_after_ms: u64,
    /// On an application failure: `migrate` to the backup host, or
    /// `restart` in place (an NSR takeover on the same host).
    #[arg(long, value_enum, default_value_t = AppFailure::Migrate)]
    app_failure: AppFailure,
    /// The port of the controller's unit heartbeat (holdfastd's BGP port).
    #[arg(long, default_value_t = 179)]
    unit_port: u16,
    /// Serve Prometheus metrics at `GET /metrics` on this address.
    #[arg(long)]
    metrics_listen: Option<std::net::SocketAddr>,
    /// This replica's certificate (PEM; `holdfast ctl certs init` makes
    /// `controller-NAME.pem`). With `--tls-key` and `--tls-ca`, the
    /// `Attach` service takes only agents with a certificate from the CA,
    /// and the replica presents it to `https://` etcd endpoints.
    #[arg(long)]
    tls_cert: Option<PathBuf>,
    /// The key of `--tls-cert` (PEM).
    #[arg(long)]
    tls_key: Option<PathBuf>,
    /// The CA whose certificates the agents must present (PEM).
    #[arg(long)]
    tls_ca: Option<PathBuf>,
    /// Serve `Attach` in plaintext (no `--tls-*`): any client on the
    /// management network may attach as any host. Logged as a warning at
    /// start.
    #[arg(long, conflicts_with_all = ["tls_cert", "tls_key", "tls_ca"])]
    insecure: bool,
    /// Negative control for the lab only: write without the leader compare
    /// (and without the compare-and-swap of step records), as a controller
    /// trusting its lease alone would.
    #[arg(long, hide = true)]
    unfenced: bool,
}

/// What to do on an application failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum AppFailure {
    Migrate,
    Restart,
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> anyhow::Result<()> {
    holdfast_docgen::intercept(Args::command);
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("HOLDFAST_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .init();
    let a = Args::parse();
    if a.lease_ttl_ms < 1000 {
        bail!("--lease-ttl-ms must be at least 1000 (etcd leases are in seconds)");
    }
    let tls = TlsFiles::from_flags(a.tls_cert, a.tls_key, a.tls_ca)?;
    match &tls {
        Some(f) => {
            holdfast_control_api::tls::Tls::load(f)?;
        }
        None if a.listen.is_some() && a.insecure => tracing::warn!(
            "--insecure: the Attach service is plaintext, any client on the management network can attach as any host and report for its units"
        ),
        None if a.listen.is_some() => bail!(
            "--listen needs --tls-cert, --tls-key and --tls-ca (`holdfast ctl certs init`, docs/security.md), or --insecure for a plaintext Attach service"
        ),
        None => {}
    }
    let cfg = Config {
        endpoints: a.etcd,
        name: a.name,
        cluster: a.cluster,
        lease_ttl: Duration::from_millis(a.lease_ttl_ms),
        step_time: Duration::from_millis(a.step_ms),
        status_file: a.status_file,
        fenced: !a.unfenced,
        listen: a.listen,
        command_timeout: Duration::from_millis(a.command_timeout_ms),
        sense: SenseConfig {
            localize: LocalizeConfig {
                probe_interval_ms: a.probe_interval_ms.max(10),
                misses: a.misses.max(1),
                host_confirm_ms: a.host_confirm_ms,
                host_network_confirm_ms: a.host_confirm_ms,
                stale_after_ms: a.stale_after_ms.max(a.probe_interval_ms),
                app_policy: match a.app_failure {
                    AppFailure::Migrate => AppPolicy::Migrate,
                    AppFailure::Restart => AppPolicy::RestartInPlace,
                },
                ..LocalizeConfig::default()
            },
            unit_port: a.unit_port,
            ..SenseConfig::default()
        },
        metrics_listen: a.metrics_listen,
        tls,
    };
    tracing::info!(name = %cfg.name, cluster = %cfg.cluster, ttl = ?cfg.lease_ttl, fenced = cfg.fenced, "controller replica starting");
    let mut term = signal(SignalKind::terminate()).context("SIGTERM handler")?;
    let stop = async move {
        tokio::select! {
            _ = term.recv() => {}
            _ = tokio::signal::ctrl_c() => {}
        }
    };
    Replica::new(cfg).run(stop).await?;
    Ok(())
}
