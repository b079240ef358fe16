//! `holdfastd`, the Holdfast BGP speaker: argument parsing and start-up.
//! The daemon itself is the `holdfast_speaker` library; how it ended
//! ([`daemon::Exit`]) becomes the exit status: 0 when stopped, 75
//! ([`daemon::EXIT_FENCED`]) when fenced by another speaker, 1 on an error.
//!
//! # Known issues
//! - None known.

use holdfast_speaker::daemon;

use anyhow::Context;

/// A thread-caching allocator: route processing allocates on one worker and
/// frees on another, where glibc's malloc contends. Its purge delay is set
/// first thing in `main`.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;
use clap::{CommandFactory, Parser};
use std::path::PathBuf;

/// The Holdfast BGP speaker.
#[derive(Parser, Debug)]
#[command(name = "holdfastd", version = holdfast_version::VERSION, about)]
struct Args {
    /// Configuration file (TOML).
    #[arg(long, short = 'c', required_unless_present = "schemas")]
    config: Option<PathBuf>,
    /// Print this build's version and the NSR record schemas it writes and
    /// reads (one JSON line), and exit: `holdfast ctl upgrade` has the
    /// agents compare two builds with it (docs/nsr.md).
    #[arg(long)]
    schemas: bool,
    /// Route-processing worker threads (overrides `global.workers`).
    #[arg(long)]
    workers: Option<usize>,
    /// Control socket path (overrides `global.control_socket`).
    #[arg(long)]
    control_socket: Option<PathBuf>,
    /// Validate the configuration and exit.
    #[arg(long)]
    check: bool,
    /// Start as the backup taking over the `[nsr]` instance: guard the
    /// namespace, load the replicated state, wait for the service address,
    /// restore every session with TCP_REPAIR and resume (docs/nsr.md).
    #[arg(long)]
    takeover: bool,
    /// With --takeover: create this file once ready for the service address.
    #[arg(long, requires = "takeover")]
    takeover_ready_file: Option<PathBuf>,
    /// With --takeover: claim the NSR store epoch at least at this value
    /// (the controller passes its fencing token, so the store epoch
    /// advances with it).
    #[arg(long, requires = "takeover", default_value_t = 0)]
    takeover_epoch: u64,
    /// Start as a preheated standby of the `[nsr]` instance: follow the
    /// state store and build the tables of every stored session, without
    /// claiming the instance or touching any session; `holdfast nsr
    /// takeover` then takes over as --takeover does, without the table
    /// build (docs/nsr.md).
    #[arg(long, conflicts_with = "takeover")]
    standby: bool,
    /// Record every peer's inputs and the core's outputs as JSON lines, one
    /// file per neighbour in this directory (`holdfast replay FILE` replays
    /// one).
    #[arg(long, value_name = "DIR")]
    record: Option<PathBuf>,
}

fn main() -> anyhow::Result<()> {
    holdfast_docgen::intercept(Args::command);
    let args = Args::parse();
    if args.schemas {
        let b = holdfast_api::schemas::BuildSchemas {
            version: holdfast_version::VERSION.to_string(),
            nsr: holdfast_api::schemas::NsrSchemas {
                writes: holdfast_nsr::SCHEMA_VERSION,
                reads: (1, holdfast_nsr::SCHEMA_VERSION),
            },
        };
        println!("{}", serde_json::to_string(&b)?);
        return Ok(());
    }
    let config = args.config.clone().context("--config is needed")?;
    // Freed buffers go back to the kernel within 10 ms rather than mimalloc
    // v3's 1 s (see `holdfast_linux::allocator`), unless the operator chose;
    // a backup switches once its takeover is done (`resume`).
    if !args.takeover && !args.standby {
        holdfast_linux::allocator::use_short_purge_delay();
    }
    let (mut cfg, warnings) =
        holdfast_config::load(&config).with_context(|| format!("loading {}", config.display()))?;
    if let Some(w) = args.workers {
        cfg.global.workers = Some(w);
    }
    if let Some(p) = &args.control_socket {
        cfg.global.control_socket = p.clone();
    }
    init_tracing(&cfg);
    for w in &warnings {
        tracing::warn!("config: {w}");
    }
    // The store's password file (`[nsr] store_password_file`): readable
    // and well-formed now, rather than at the first connection.
    if let Some(n) = cfg.nsr.as_ref().filter(|n| n.enabled) {
        n.store_url()
            .with_context(|| format!("loading {}", config.display()))?;
    }
    if args.check {
        println!("configuration OK: {} neighbour(s)", cfg.neighbors.len());
        return Ok(());
    }
    let rt = io_runtime(cfg.global.effective_io_threads()).context("starting the I/O runtime")?;
    let start = if args.takeover {
        daemon::Start::Takeover(daemon::TakeoverOpts {
            ready_file: args.takeover_ready_file.clone(),
            epoch: args.takeover_epoch,
        })
    } else if args.standby {
        daemon::Start::Standby
    } else {
        daemon::Start::Primary
    };
    let exit = rt.block_on(daemon::run(
        config,
        cfg,
        args.workers,
        args.control_socket,
        start,
        args.record,
    ))?;
    match exit {
        daemon::Exit::Stopped => Ok(()),
        // Fenced, or a takeover that failed half-way: exit now, without
        // dropping the runtime (its sockets' FIN must not reach a peer; the
        // gate drops every packet until the process is gone, and the kernel
        // after).
        daemon::Exit::Fenced(_) | daemon::Exit::TakeoverFailed(_) => {
            std::process::exit(exit.code())
        }
    }
}

/// The runtime of the sessions (`[global] io_threads`): one thread runs
/// them all, as before the key existed, or a multi-threaded runtime whose
/// threads take each session's ready work.
fn io_runtime(threads: usize) -> std::io::Result<tokio::runtime::Runtime> {
    tracing::info!(io_threads = threads, "starting the I/O runtime");
    if threads <= 1 {
        return tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .thread_name("holdfast-io")
            .build();
    }
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads)
        .enable_all()
        .thread_name("holdfast-io")
        .build()
}

fn init_tracing(cfg: &holdfast_config::Config) {
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_from_env("HOLDFAST_LOG").unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    if cfg.global.log_format == holdfast_config::LogFormat::Json {
        builder.json().init();
    } else {
        builder.init();
    }
}
