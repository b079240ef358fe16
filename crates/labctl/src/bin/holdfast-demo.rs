//! `holdfast-demo` (what `make demo` runs): the demo scenario through TENSOR's four
//! failure kinds, each recovered by a takeover the peers never see.
//!
//! ```text
//!                      bridge `lan`: 198.18.0.0/24
//!   [ frr ]   .1  frr (AS 65001), 50k routes in ---+
//!   [ redis ] .2  the NSR state store             -+--- service .10 (moves a <-> b)
//!   [ a ]     .3  holdfastd primary, 10k routes out-+
//!   [ b ]     .4  holdfastd backup                 -+
//!   [ bird ]  .5  bird2 (AS 65002), 50k routes in --+
//! ```
//!
//! It builds `lab/scenarios/demo` with `holdfast lab up`'s code, waits until all routes
//! are in place, injects application, container, host and host-network failures in
//! turn (each detected, fenced and taken over onto the other host; failed hosts healed
//! after), prints TENSOR Table 1 with what each peer saw next to it, writes
//! `lab/reports/demo.{md,png,json}`, tears everything down, and exits non-zero if any
//! peer saw a reset, a NOTIFICATION, a withdrawn or re-learned route, a BFD Down, or a
//! silence as long as the hold time. Progress goes to stderr, the table to stdout.
//!
//! `--cleanup` removes what a crashed earlier run left behind.

use anyhow::Context;
use clap::Parser;
use holdfast_lab::{cleanup_stale, PeerKind};
use holdfast_labctl::command::{self, FailureKind};
use holdfast_labctl::demo::{self, DemoOptions};
use std::path::PathBuf;

/// The state file of the demo's lab (only this program uses it).
const STATE: &str = "/run/holdfast-lab/demo-state.json";

#[derive(Parser, Debug)]
#[command(
    version = holdfast_version::VERSION,
    name = "holdfast-demo",
    about = "TENSOR's four failure kinds against frr and bird2 peers; Table 1 with what the peers saw"
)]
struct Args {
    /// Scenario name or file.
    #[arg(long, default_value = "demo")]
    scenario: String,
    /// Routes the peers send holdfastd in total (default: the scenario's).
    #[arg(long)]
    routes_in: Option<u32>,
    /// Routes holdfastd announces to each peer (default: the scenario's).
    #[arg(long)]
    routes_out: Option<u32>,
    /// Takeover kinds, in order (application, container, host, host-network,
    /// switchover).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "application,container,host,host-network"
    )]
    kinds: Vec<FailureKind>,
    /// BFD interval in ms (both ways, the scenario's Detect Mult) of every peer that
    /// runs BFD (default: the scenario's).
    #[arg(long)]
    bfd_ms: Option<u32>,
    /// Instead of one run: one per interval of this list (ms, longest first), every
    /// kind at each, and the shortest interval at which every kind stayed invisible.
    #[arg(long, value_delimiter = ',')]
    bfd_floor: Vec<u32>,
    /// Directory of the Markdown / PNG / JSON report.
    #[arg(long, default_value = "lab/reports")]
    reports: PathBuf,
    /// Write no report files.
    #[arg(long)]
    no_reports: bool,
    /// Print the report as JSON instead of the table.
    #[arg(long)]
    json: bool,
    /// Remove what a crashed earlier run left behind, and exit.
    #[arg(long)]
    cleanup: bool,
    /// A plaintext control plane: no certificates (`--insecure` controllers and
    /// agents), Redis without ACL users, as `holdfast lab up --insecure`. Warned
    /// at start. By default the certificates are made at up.
    #[arg(long)]
    insecure: bool,
    /// The demo lab's state file (another one lets a second demo run beside
    /// the first).
    #[arg(long, default_value = STATE)]
    state: PathBuf,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let state = args.state.clone();
    // A crashed earlier run: its lab goes first.
    let down = command::down(&state)?;
    let stale = cleanup_stale()?;
    if args.cleanup {
        println!("{down}removed {stale} other leftover namespace(s)");
        return Ok(());
    }
    holdfast_lab::preflight(&[PeerKind::Bird, PeerKind::Frr])?;
    let mut opts = DemoOptions::new(command::find_scenario(&args.scenario)?, state);
    opts.routes_in = args.routes_in;
    opts.routes_out = args.routes_out;
    opts.bfd_interval_ms = args.bfd_ms;
    opts.kinds = args.kinds;
    opts.report_dir = (!args.no_reports).then_some(args.reports);
    // With it, `lab up`'s first progress line is the warning.
    opts.insecure = args.insecure;
    if !args.bfd_floor.is_empty() {
        let floor = demo::bfd_floor(&opts, &args.bfd_floor, &mut |m| eprintln!("{m}"))?;
        if args.json {
            println!("{}", serde_json::to_string_pretty(&floor)?);
        } else {
            print!("{}", floor.table());
        }
        return Ok(());
    }
    let report = demo::run(&opts, &mut |m| eprintln!("{m}")).context("demo")?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        println!(
            "\nTENSOR Table 1 for this run ({} routes in, {} out; peers: {}):\n",
            report.routes_in,
            report.routes_out,
            report.peers.join(", ")
        );
        print!("{}", report.table());
        for f in &report.files {
            println!("wrote {}", f.display());
        }
        println!("{:.0} s in all", report.wall_s);
    }
    report.check().context("what the peers saw")?;
    if !args.json {
        println!(
            "no peer saw a reset, a NOTIFICATION, a route withdrawn or re-learned, or a BFD Down"
        );
    }
    Ok(())
}
