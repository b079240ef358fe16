//! `holdfast-ctl-sim`: the control plane's scale harness (see the
//! library's docs). `holdfast-ctl-sim agents ...` is the simulated agents'
//! process, started by the harness in its lab namespace.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use clap::{Parser, Subcommand};
use holdfast_ctl_sim::agents::{self, AgentsConfig};
use holdfast_ctl_sim::driver::{self, Config};
use holdfast_ctl_sim::fleet::{Fleet, FleetSpec, ProbeMode};

/// The fleet.
#[derive(Debug, Clone, clap::Args)]
struct FleetArgs {
    /// Hosts (each with a host agent).
    #[arg(long, default_value_t = 10)]
    hosts: usize,
    /// Units (placed round-robin, backups by TRIPOD).
    #[arg(long, default_value_t = 100)]
    units: usize,
    /// Hosts per rack (a rack is a segment with its own agent server).
    #[arg(long, default_value_t = 50)]
    rack: usize,
    /// Who probes whom.
    #[arg(long, value_enum, default_value_t = ProbeMode::Ring)]
    probes: ProbeMode,
    /// Hosts each agent probes on the ring.
    #[arg(long, default_value_t = holdfast_control::DEFAULT_FANOUT)]
    fanout: usize,
}

impl FleetArgs {
    fn fleet(&self) -> anyhow::Result<Fleet> {
        Fleet::new(FleetSpec {
            hosts: self.hosts,
            units: self.units,
            rack: self.rack.max(1),
            probes: self.probes,
            fanout: self.fanout,
        })
        .map_err(anyhow::Error::msg)
    }
}

/// The control plane's scale harness: real controllers and etcd, simulated
/// agents.
#[derive(Debug, Parser)]
#[command(name = "holdfast-ctl-sim", version = holdfast_version::VERSION)]
struct Args {
    #[command(subcommand)]
    cmd: Option<Cmd>,
    #[command(flatten)]
    fleet: FleetArgs,
    /// Failures to inject, in order: host, rack, leader, etcd.
    #[arg(long, value_delimiter = ',', default_value = "host,rack,leader,etcd")]
    inject: Vec<String>,
    /// The steady-state window, in seconds.
    #[arg(long, default_value_t = 10)]
    window_s: u64,
    /// How long each failure's handling may take, in seconds.
    #[arg(long, default_value_t = 60)]
    patience_s: u64,
    /// The simulated agents' etcd lease renewal period, in ms (a real
    /// agent's `--renew-ms`).
    #[arg(long, default_value_t = 250)]
    renew_ms: u64,
    /// How often the simulated agents report a target that keeps
    /// answering, in ms (a real agent's `--probe-report-ms`).
    #[arg(long, default_value_t = 500)]
    report_ms: u64,
    /// The controllers' `--stale-after-ms` (above `--report-ms`).
    #[arg(long, default_value_t = 1000)]
    stale_after_ms: u64,
    /// Capture every bridge with tcpdump, as a lab test does (off: a
    /// capture on the management bridge costs every packet a copy, and its
    /// tcpdump a share of the cores measured).
    #[arg(long)]
    pcap: bool,
    /// Print the report as JSON.
    #[arg(long)]
    json: bool,
    /// Also write the JSON report here.
    #[arg(long)]
    out: Option<PathBuf>,
}

#[derive(Debug, Subcommand)]
enum Cmd {
    /// The simulated agents (run by the harness in its lab namespace).
    Agents {
        #[command(flatten)]
        fleet: FleetArgs,
        #[arg(long, value_delimiter = ',', required = true)]
        etcd: Vec<String>,
        #[arg(long, value_delimiter = ',', required = true)]
        controllers: Vec<String>,
        #[arg(long)]
        events: PathBuf,
        #[arg(long)]
        control: PathBuf,
        #[arg(long, default_value_t = 179)]
        unit_port: u16,
        #[arg(long, default_value_t = 100)]
        interval_ms: u64,
        #[arg(long, default_value_t = 250)]
        renew_ms: u64,
        #[arg(long, default_value_t = 500)]
        report_ms: u64,
        #[arg(long, default_value_t = 3000)]
        ttl_ms: u64,
    },
}

fn main() -> anyhow::Result<()> {
    let a = Args::parse();
    match a.cmd {
        Some(Cmd::Agents {
            fleet,
            etcd,
            controllers,
            events,
            control,
            unit_port,
            interval_ms,
            renew_ms,
            report_ms,
            ttl_ms,
        }) => {
            let fleet = fleet.fleet()?;
            let cfg = AgentsConfig {
                etcd,
                controllers,
                events,
                control,
                interval: Duration::from_millis(interval_ms.max(10)),
                renew: Duration::from_millis(renew_ms.max(10)),
                report_every: Duration::from_millis(report_ms.max(1)),
                ttl: Duration::from_millis(ttl_ms.max(1000)),
                unit_port,
                cluster: "default".into(),
            };
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()?;
            rt.block_on(agents::run(fleet, cfg))
        }
        None => {
            let cfg = Config {
                fleet: a.fleet.fleet()?,
                window: Duration::from_secs(a.window_s.max(1)),
                inject: a.inject.into_iter().filter(|s| !s.is_empty()).collect(),
                patience: Duration::from_secs(a.patience_s.max(5)),
                self_exe: std::env::current_exe().context("this binary's path")?,
                renew_ms: a.renew_ms,
                report_ms: a.report_ms,
                stale_after_ms: a.stale_after_ms,
                pcap: a.pcap,
            };
            let r = driver::run(&cfg)?;
            if let Some(p) = &a.out {
                driver::write_report(p, &r)?;
            }
            if a.json {
                println!("{}", serde_json::to_string_pretty(&r)?);
            } else {
                print!("{}", r.table());
            }
            Ok(())
        }
    }
}
