//! `holdfast-bfd-relay`: see the library's documentation.

use anyhow::{bail, Context, Result};
use clap::{CommandFactory, Parser};
use holdfast_bfd_relay::core::{Core, CoreConfig};
use holdfast_bfd_relay::{bench, shell, store};
use holdfast_nsr::StoreUrl;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

#[derive(Parser, Debug)]
#[command(
    version = holdfast_version::VERSION,
    name = "holdfast-bfd-relay",
    about = "Keeps protected units' BFD sessions Up through takeovers"
)]
struct Args {
    /// The NSR store (redis://…, rediss://…, redis-sentinel://… or
    /// redis+cluster://…).
    #[arg(long)]
    store: Option<StoreUrl>,
    /// The relay's Redis ACL user (`holdfast nsr acl relay`); needs
    /// `--store-password-file`.
    #[arg(long, requires = "store_password_file")]
    store_user: Option<String>,
    /// A file holding the store password on one line (not readable by
    /// others); never logged.
    #[arg(long)]
    store_password_file: Option<std::path::PathBuf>,
    /// Instances to cover (repeatable); all that have BFD records if none.
    #[arg(long = "instance")]
    instances: Vec<String>,
    /// How often each instance's store is read.
    #[arg(long, default_value_t = 100)]
    poll_ms: u64,
    /// How long an instance is covered after the last change in its store.
    #[arg(long, default_value_t = 10_000)]
    cover_ms: u64,
    /// Detect Mult advertised for records that do not carry the unit's own
    /// (written by an older holdfastd).
    #[arg(long, default_value_t = 3)]
    detect_mult: u8,
    /// Keys of authenticated sessions: a TOML file of `[[key]]` tables with
    /// `instance`, optional `peer` and `secret` (see the crate's `keys`).
    #[arg(long)]
    keys: Option<std::path::PathBuf>,
    /// SCHED_FIFO priority of the sending thread (1-99), so that CPU-bound
    /// work on the host cannot delay the packets that keep peers Up; 0
    /// keeps it at normal priority. Needs CAP_SYS_NICE.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u8).range(0..=99))]
    realtime_priority: u8,
    /// Bench mode: cover this many synthetic sessions on loopback and
    /// print a JSON report (run inside `unshare -n`).
    #[arg(long)]
    bench: Option<usize>,
    #[arg(long, default_value_t = 100)]
    bench_interval_ms: u64,
    #[arg(long, default_value_t = 10)]
    bench_seconds: u64,
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
    if let Some(n) = a.bench {
        let r = bench::run(
            n,
            Duration::from_millis(a.bench_interval_ms),
            a.bench_seconds,
        )?;
        println!("{}", serde_json::to_string(&r)?);
        return Ok(());
    }
    let Some(mut url) = a.store else {
        bail!("--store URL is required");
    };
    if let Some(p) = &a.store_password_file {
        let pw = holdfast_config::read_password_file("--store-password-file", p)?;
        match url.credentials_mut() {
            Some((username, password)) => {
                if a.store_user.is_some() {
                    username.clone_from(&a.store_user);
                }
                *password = Some(pw);
            }
            None => {
                bail!("--store-password-file: not supported with a redis-sentinel:// store")
            }
        }
    }
    if a.detect_mult == 0 {
        bail!("--detect-mult must be at least 1");
    }
    let keys = match &a.keys {
        Some(p) => holdfast_bfd_relay::keys::Keys::load(p)?,
        None => holdfast_bfd_relay::keys::Keys::default(),
    };
    let timeout = Duration::from_secs(1);
    let mut names = a.instances.clone();
    if names.is_empty() {
        // Bounded: 60 attempts a second apart.
        for i in 0..60 {
            match store::discover(&url, timeout) {
                Ok(n) if !n.is_empty() => {
                    names = n;
                    break;
                }
                Ok(_) => tracing::info!("no instance with BFD records yet"),
                Err(e) => tracing::warn!("store: {e}"),
            }
            if i == 59 {
                bail!("no instance found in {}", url.redacted());
            }
            std::thread::sleep(Duration::from_secs(1));
        }
    }
    let mut watched = Vec::new();
    for n in &names {
        // The store may not be up yet: retry, bounded.
        let mut last = None;
        for _ in 0..30 {
            match store::Watched::connect(&url, n, timeout) {
                Ok(w) => {
                    last = None;
                    watched.push(w);
                    break;
                }
                Err(e) => {
                    last = Some(e);
                    std::thread::sleep(Duration::from_secs(1));
                }
            }
        }
        if let Some(e) = last {
            return Err(e).with_context(|| format!("instance {n}"));
        }
    }
    tracing::info!(store = %url.redacted(), instances = ?names, poll_ms = a.poll_ms, cover_ms = a.cover_ms, keys = keys.len(), "BFD relay started");
    let core = Core::new(
        CoreConfig {
            detect_mult: a.detect_mult,
            keys,
            cover: Duration::from_millis(a.cover_ms),
            dest_port: None,
        },
        u64::from(std::process::id()) ^ 0x9e37_79b9_7f4a_7c15,
    );
    let stop = Arc::new(AtomicBool::new(false));
    shell::run(
        core,
        watched,
        Duration::from_millis(a.poll_ms.clamp(10, 10_000)),
        stop,
        a.realtime_priority,
    )?;
    Ok(())
}
