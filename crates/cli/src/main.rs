//! `holdfast`, the command-line interface to `holdfastd`.
//!
//! Talks to the daemon's control socket (newline-delimited JSON, types and
//! client in `holdfast-api`). Every command prints a table for people or,
//! with `--json`, the daemon's answer as JSON for tools.
//!
//! `holdfast config check FILE` loads the file with `holdfast-config` as
//! holdfastd does (`holdfast_config::check`).
//!
//! `holdfast lab ...` runs `holdfast-lab` (package `holdfast-labctl`) from the
//! directory of this executable with the same arguments: scenarios from
//! `lab/scenarios/` built in network namespaces with the control plane (etcd,
//! controllers, host agents), TENSOR's failures injected and handled by the
//! controller. It needs root. The CLI itself depends on no lab or
//! test code.
//!
//! `holdfast replay FILE` re-runs a neighbour's recorded inputs
//! (`holdfastd --record DIR`) through the peer core and reports the first
//! output that differs.
//!
//! `holdfast bench` runs `holdfast-bench` (the TENSOR evaluation side by side
//! with bird2, frr and gobgpd) from the directory of this executable.

use anyhow::{bail, Context};
use clap::{CommandFactory, Parser, Subcommand};
use holdfast_api::{Body, NeighborInfo, NsrStatus, Request, Response, RibEntry, RibTable, Summary};
use std::path::{Path, PathBuf};
use std::time::Duration;

#[derive(Parser, Debug)]
#[command(name = "holdfast", version = holdfast_version::VERSION, about = "Control and inspect holdfastd")]
struct Cli {
    /// The daemon's control socket.
    #[arg(
        long,
        short = 's',
        global = true,
        default_value = "/run/holdfast/holdfastd.sock",
        env = "HOLDFAST_SOCKET"
    )]
    socket: PathBuf,
    /// Print the daemon's answer as JSON.
    #[arg(long, global = true)]
    json: bool,
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// Show state.
    Show {
        #[command(subcommand)]
        what: Show,
    },
    /// Configuration files.
    Config {
        #[command(subcommand)]
        op: ConfigOp,
    },
    /// Write a file from the daemon's state.
    Dump {
        #[command(subcommand)]
        what: Dump,
    },
    /// Reload the configuration file (like SIGHUP).
    Reload,
    /// Neighbour operations.
    Neighbor {
        #[command(subcommand)]
        op: NeighborOp,
    },
    /// Non-stop routing operations.
    Nsr {
        #[command(subcommand)]
        op: NsrOp,
    },
    /// Feed a recording (`holdfastd --record DIR`, one file per neighbour)
    /// through the peer core and report the first output that differs.
    Replay {
        /// A `<instance>_<address>.jsonl` file of the recording directory.
        file: PathBuf,
    },
    /// The TENSOR evaluation side by side with bird2, frr and gobgpd: runs the
    /// `holdfast-bench` next to this executable, which writes the Markdown report
    /// and its PNG plots. Needs root.
    Bench {
        /// Small sizes, 1 run, P up to 100, K up to 2: a check in a few minutes.
        #[arg(long)]
        quick: bool,
        /// Where the report goes (the plots go to `benchmarks/` next to it).
        #[arg(long, default_value = "docs/benchmarks.md")]
        out: PathBuf,
        /// Further `holdfast-bench` options (see `holdfast-bench --help`), after `--`.
        #[arg(last = true)]
        extra: Vec<String>,
    },
    /// The lab: a scenario of lab/scenarios/ in network namespaces (holdfastd primary
    /// and backup hosts, Redis, real peers, etcd, controllers, host agents), failures
    /// handled by the controller. Runs the
    /// `holdfast-lab` next to this executable with these arguments: `[--state FILE]
    /// up|status|fail|heal|down|list ...` (`holdfast lab --help`). Needs root.
    #[command(disable_help_flag = true)]
    Lab {
        /// `holdfast-lab`'s arguments.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// The control plane (docs/control-plane.md): `[--etcd URL,...] status |
    /// hosts | units | drain HOST | reset HOST | switchover UNIT`. Runs the
    /// `holdfast-ctl` next to this executable (`holdfast ctl --help`).
    #[command(disable_help_flag = true)]
    Ctl {
        /// `holdfast-ctl`'s arguments.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
}

#[derive(Subcommand, Debug)]
enum NsrOp {
    /// Planned handover to a backup (upgrade, maintenance): this daemon
    /// waits for `holdfastd --takeover` to claim the instance, then exits
    /// without disturbing any session.
    Switchover {
        /// Give up and stay primary after this many seconds.
        #[arg(long)]
        timeout: Option<u64>,
    },
    /// Tell a preheated standby (`holdfastd --standby`) to take the
    /// instance over now, as `holdfastd --takeover` would, with the tables
    /// it has built; answers once it has claimed the instance and loaded
    /// the state.
    Takeover {
        /// Claim the store epoch at least at this value (the controller's
        /// fencing token).
        #[arg(long)]
        epoch: Option<u64>,
        /// Created by the standby once ready for the service address.
        #[arg(long)]
        ready_file: Option<String>,
    },
    /// Print the Redis `ACL SETUSER` command of a unit's store user (its
    /// own keys only) or a BFD relay's (read-only), for `redis-cli` to run
    /// as an administrator (docs/security.md). Needs no daemon. The
    /// password goes as its SHA-256.
    Acl {
        #[command(subcommand)]
        who: AclFor,
    },
}

#[derive(Subcommand, Debug)]
enum AclFor {
    /// The user of unit INSTANCE (its primary, standby and backup).
    Unit {
        /// The unit's `[nsr] instance`.
        instance: String,
        /// The user name (default: `hf-INSTANCE`), the unit's `[nsr] store_user`.
        #[arg(long)]
        user: Option<String>,
        /// The unit's `[nsr] store_password_file`.
        #[arg(long)]
        password_file: PathBuf,
    },
    /// The user of a BFD relay covering INSTANCEs (none: every instance,
    /// with `SCAN` for the relay's discovery).
    Relay {
        instance: Vec<String>,
        #[arg(long, default_value = "hf-relay")]
        user: String,
        /// The relay's `--store-password-file`.
        #[arg(long)]
        password_file: PathBuf,
    },
}

#[derive(Subcommand, Debug)]
enum Show {
    /// Sessions, their state and counters.
    Neighbors,
    /// One line per daemon: identity, sessions, table sizes.
    Summary,
    /// Non-stop routing: protection per session, replication lag, epoch, store latency.
    Nsr,
    /// BFD sessions: discriminators, state, diagnostic, intervals, uptime, counters.
    Bfd,
    /// RPKI ([[rpki]]): the RTR caches, VRP counts, the routes valid, invalid and not-found.
    Rpki,
    /// The kernel FIB ([kernel]): routes installed, pending, failed, next-hop resolution, counters.
    Fib {
        /// Routing instance (all with [kernel] by default).
        #[arg(long)]
        instance: Option<String>,
        /// At most this many routes listed (default 100; the counts cover all).
        #[arg(long)]
        limit: Option<usize>,
    },
    /// Routes.
    Rib {
        /// loc (best paths and candidates), in (Adj-RIB-In, pre-policy), out (Adj-RIB-Out).
        #[arg(long, default_value = "loc")]
        table: RibTable,
        /// Routing instance.
        #[arg(long)]
        instance: Option<String>,
        /// Only routes from (loc, in) or to (out) this neighbour.
        #[arg(long)]
        peer: Option<String>,
        /// Only this prefix.
        #[arg(long)]
        prefix: Option<String>,
        /// At most this many routes.
        #[arg(long)]
        limit: Option<usize>,
    },
}

#[derive(Subcommand, Debug)]
enum ConfigOp {
    /// Check a configuration file as holdfastd would load it (start-up or
    /// reload), without a daemon: exit status 1 and the offending key on
    /// an error, the warnings otherwise.
    Check {
        /// The TOML file.
        file: PathBuf,
    },
}

#[derive(Subcommand, Debug)]
enum Dump {
    /// An MRT TABLE_DUMP_V2 file (RFC 6396) of one table, written by the
    /// daemon through FILE.tmp and a rename (bgpdump, bgpkit-parser and
    /// `gobgp mrt inject` read it).
    Mrt {
        /// Where the daemon writes it; a relative path is taken from the
        /// current directory.
        file: PathBuf,
        /// loc (best paths), in (Adj-RIB-In, pre-policy), out (Adj-RIB-Out).
        #[arg(long, default_value = "loc")]
        table: RibTable,
        /// Routing instance.
        #[arg(long)]
        instance: Option<String>,
        /// Only this neighbour's routes (in and out: every neighbour's
        /// when absent).
        #[arg(long)]
        peer: Option<String>,
    },
}

#[derive(Subcommand, Debug)]
enum NeighborOp {
    /// Reset a session (Cease, Administrative Reset).
    Reset { address: String },
}

fn main() {
    holdfast_linux::sigpipe::default_action();
    holdfast_docgen::intercept(Cli::command);
    let cli = Cli::parse();
    if let Err(e) = run(cli) {
        eprintln!("holdfast: {e:#}");
        std::process::exit(1);
    }
}

fn request(socket: &Path, req: &Request) -> anyhow::Result<Response> {
    Ok(holdfast_api::client::request(
        socket,
        req,
        Duration::from_secs(60),
    )?)
}

/// `holdfast lab ...`: replaces this process with the `holdfast-lab` next to this
/// executable, with the same arguments (and `--json` when it was given before `lab`),
/// so its output and exit status are the command's.
fn run_lab(args: &[String], json: bool) -> anyhow::Result<()> {
    exec_sibling("holdfast-lab", "holdfast-labctl", args, json)
}

/// Replaces this process with the `name` next to this executable (built by
/// `package`), with `args` (and `--json` first when it was given).
fn exec_sibling(name: &str, package: &str, args: &[String], json: bool) -> anyhow::Result<()> {
    use std::os::unix::process::CommandExt;
    let exe = std::env::current_exe().context("locating the holdfast executable")?;
    let sibling = exe
        .parent()
        .map(|d| d.join(name))
        .filter(|p| p.is_file())
        .with_context(|| {
            format!(
                "{name} is not next to {} (build it: cargo build --release -p {package})",
                exe.display()
            )
        })?;
    let mut cmd = std::process::Command::new(&sibling);
    if json && !args.iter().any(|a| a == "--json") {
        cmd.arg("--json");
    }
    cmd.args(args);
    let e = cmd.exec();
    Err(e).with_context(|| format!("running {}", sibling.display()))
}

/// `holdfast bench`: runs `holdfast-bench` from this executable's directory. With
/// `--json`, its progress goes to stderr and the results (JSON) to stdout.
fn run_bench(
    quick: bool,
    out: &std::path::Path,
    extra: &[String],
    json: bool,
) -> anyhow::Result<()> {
    let exe = std::env::current_exe().context("locating the holdfast executable")?;
    let bench = exe
        .parent()
        .map(|d| d.join("holdfast-bench"))
        .filter(|p| p.is_file())
        .with_context(|| {
            format!(
                "holdfast-bench is not next to {} (build it: cargo build --release -p holdfast-bench)",
                exe.display()
            )
        })?;
    let mut cmd = std::process::Command::new(&bench);
    cmd.arg("--out").arg(out);
    if quick {
        cmd.arg("--quick");
    }
    let json_file =
        std::env::temp_dir().join(format!("holdfast-bench-{}.json", std::process::id()));
    if json {
        cmd.arg("--json-out").arg(&json_file);
        let err = std::io::stderr();
        let fd = std::os::fd::AsFd::as_fd(&err)
            .try_clone_to_owned()
            .context("duplicating stderr")?;
        cmd.stdout(std::process::Stdio::from(fd));
    }
    cmd.args(extra);
    let status = cmd
        .status()
        .with_context(|| format!("running {}", bench.display()))?;
    if json {
        let text = std::fs::read_to_string(&json_file);
        let _ = std::fs::remove_file(&json_file);
        if let Ok(t) = text {
            println!("{t}");
        }
    }
    if !status.success() {
        bail!("{} failed: {status}", bench.display());
    }
    Ok(())
}

/// `holdfast nsr acl unit|relay ...`: prints the `ACL SETUSER` command.
fn run_acl(who: &AclFor, json: bool) -> anyhow::Result<()> {
    use holdfast_nsr::acl;
    let read = |p: &Path| {
        holdfast_config::read_password_file("--password-file", p)
            .map(acl::AclSecret::Password)
            .map_err(anyhow::Error::from)
    };
    let user = match who {
        AclFor::Unit {
            instance,
            user,
            password_file,
        } => {
            let name = user.clone().unwrap_or_else(|| acl::default_user(instance));
            acl::unit_user(instance, &name, &read(password_file)?)?
        }
        AclFor::Relay {
            instance,
            user,
            password_file,
        } => {
            let names: Vec<&str> = instance.iter().map(String::as_str).collect();
            acl::relay_user(&names, user, &read(password_file)?)?
        }
    };
    if json {
        println!(
            "{}",
            serde_json::json!({ "user": user.user, "args": user.args() })
        );
    } else {
        println!("{user}");
    }
    Ok(())
}

/// `holdfast config check FILE`.
fn run_config_check(file: &std::path::Path, json: bool) -> anyhow::Result<()> {
    match holdfast_config::check(file).map_err(anyhow::Error::from) {
        Ok(c) => {
            if json {
                let mut v = serde_json::to_value(&c)?;
                v["ok"] = true.into();
                println!("{}", serde_json::to_string_pretty(&v)?);
            } else {
                println!(
                    "{}: OK ({} instance(s), {} neighbour(s), {} policy(ies), {} network(s), NSR {}, {} MRT output(s))",
                    c.file.display(),
                    c.instances,
                    c.neighbors,
                    c.policies,
                    c.networks,
                    if c.nsr { "on" } else { "off" },
                    c.mrt
                );
                for w in &c.warnings {
                    println!("warning: {w}");
                }
            }
            Ok(())
        }
        Err(e) if json => {
            let v = serde_json::json!({
                "ok": false,
                "file": file,
                "error": format!("{e:#}"),
            });
            println!("{}", serde_json::to_string_pretty(&v)?);
            std::process::exit(1);
        }
        Err(e) => Err(e.context(format!("{} is not a valid configuration", file.display()))),
    }
}

/// `holdfast replay FILE`: exit status 0 when every output was identical.
fn run_replay(file: &std::path::Path, json: bool) -> anyhow::Result<()> {
    let report = holdfast_neighbor::replay(file)?;
    if json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        println!(
            "{} ({} {}): {} inputs replayed, {} outputs compared",
            report.path.display(),
            report.instance,
            report.peer,
            report.inputs,
            report.outputs
        );
    }
    match &report.divergence {
        None => {
            if !json {
                println!("identical");
            }
            Ok(())
        }
        Some(d) => {
            if !json {
                println!("first difference at line {}", d.line);
                println!("  input:    {}", serde_json::to_string(&d.input)?);
                println!("  recorded: {}", serde_json::to_string(&d.recorded)?);
                println!("  replayed: {}", serde_json::to_string(&d.replayed)?);
            }
            bail!("replay of {} differs at line {}", file.display(), d.line)
        }
    }
}

fn run(cli: Cli) -> anyhow::Result<()> {
    let req = match &cli.cmd {
        Cmd::Lab { args } => return run_lab(args, cli.json),
        Cmd::Ctl { args } => {
            return exec_sibling("holdfast-ctl", "holdfast-controller", args, cli.json)
        }
        Cmd::Bench { quick, out, extra } => return run_bench(*quick, out, extra, cli.json),
        Cmd::Replay { file } => return run_replay(file, cli.json),
        Cmd::Nsr {
            op: NsrOp::Acl { who },
        } => return run_acl(who, cli.json),
        Cmd::Config {
            op: ConfigOp::Check { file },
        } => return run_config_check(file, cli.json),
        Cmd::Show {
            what: Show::Neighbors,
        } => Request::ShowNeighbors,
        Cmd::Show {
            what: Show::Summary,
        } => Request::ShowSummary,
        Cmd::Show {
            what:
                Show::Rib {
                    table,
                    instance,
                    peer,
                    prefix,
                    limit,
                },
        } => Request::ShowRib {
            instance: instance.clone(),
            prefix: prefix.clone(),
            peer: peer.clone(),
            table: *table,
            limit: *limit,
        },
        Cmd::Show { what: Show::Nsr } => Request::ShowNsr,
        Cmd::Show { what: Show::Bfd } => Request::ShowBfd,
        Cmd::Show { what: Show::Rpki } => Request::ShowRpki,
        Cmd::Show {
            what: Show::Fib { instance, limit },
        } => Request::ShowFib {
            instance: instance.clone(),
            limit: *limit,
        },
        Cmd::Nsr {
            op: NsrOp::Switchover { timeout },
        } => Request::NsrSwitchover {
            timeout_secs: *timeout,
        },
        Cmd::Nsr {
            op: NsrOp::Takeover { epoch, ready_file },
        } => Request::NsrTakeover {
            epoch: *epoch,
            ready_file: ready_file.clone(),
        },
        Cmd::Dump {
            what:
                Dump::Mrt {
                    file,
                    table,
                    instance,
                    peer,
                },
        } => {
            let path = if file.is_absolute() {
                file.clone()
            } else {
                std::env::current_dir()
                    .context("the current directory")?
                    .join(file)
            };
            Request::DumpMrt {
                path: path.to_string_lossy().into_owned(),
                table: *table,
                instance: instance.clone(),
                peer: peer.clone(),
            }
        }
        Cmd::Reload => Request::Reload,
        Cmd::Neighbor {
            op: NeighborOp::Reset { address },
        } => Request::NeighborReset {
            address: address.clone(),
        },
    };
    let resp = request(&cli.socket, &req)?;
    if cli.json {
        println!("{}", serde_json::to_string_pretty(&resp)?);
        if let Response::Error { .. } = resp {
            std::process::exit(1);
        }
        return Ok(());
    }
    match resp.into_result().map_err(anyhow::Error::msg)? {
        Body::Neighbors(list) => print_neighbors(&list),
        Body::Summary(s) => print_summary(&s),
        Body::Rib(routes) => print_rib(&routes),
        Body::Message(m) => println!("{m}"),
        Body::Nsr(n) => print_nsr(&n),
        Body::Bfd(list) => print_bfd(&list),
        Body::Fib(list) => print_fib(&list),
        Body::Rpki(info) => print_rpki(&info),
        Body::Mrt(m) => println!(
            "{}: {} table of {}, {} prefixes, {} routes, {} bytes in {} ms",
            m.path, m.table, m.instance, m.prefixes, m.routes, m.bytes, m.millis
        ),
    }
    Ok(())
}

fn print_rpki(r: &holdfast_api::RpkiInfo) {
    println!(
        "VRPs in force: {} IPv4, {} IPv6; last update {}",
        r.vrps_v4,
        r.vrps_v6,
        r.last_update_secs
            .map_or("never".to_string(), |s| format!("{s} s ago"))
    );
    println!(
        "{:<28} {:>4} {:<11} {:>3} {:>7} {:>10} {:>8} {:>8} {:>8}",
        "cache", "pref", "state", "ver", "session", "serial", "v4", "v6", "updated"
    );
    for c in &r.caches {
        let opt = |v: Option<String>| v.unwrap_or_else(|| "-".into());
        println!(
            "{:<28} {:>4} {:<11} {:>3} {:>7} {:>10} {:>8} {:>8} {:>8}",
            format!("{}{}", c.address, if c.active { " *" } else { "" }),
            c.preference,
            c.state,
            c.version,
            opt(c.session_id.map(|s| s.to_string())),
            opt(c.serial.map(|s| s.to_string())),
            c.vrps_v4,
            c.vrps_v6,
            duration(c.last_update_secs)
        );
        if let Some(e) = &c.last_error {
            println!("  last error: {e}");
        }
    }
    println!(
        "{:<16} {:>10} {:>10} {:>10}",
        "instance", "valid", "invalid", "not-found"
    );
    for i in &r.routes {
        println!(
            "{:<16} {:>10} {:>10} {:>10}",
            i.instance, i.valid, i.invalid, i.not_found
        );
    }
}

fn duration(secs: Option<u64>) -> String {
    match secs {
        None => "-".into(),
        Some(s) if s < 3600 => format!("{:02}:{:02}", s / 60, s % 60),
        Some(s) if s < 86400 => format!("{:02}:{:02}:{:02}", s / 3600, (s / 60) % 60, s % 60),
        Some(s) => format!("{}d{:02}h", s / 86400, (s / 3600) % 24),
    }
}

fn print_neighbors(list: &[NeighborInfo]) {
    println!(
        "{:<10} {:<26} {:>10} {:<12} {:>9} {:>9} {:>9} {:>9} {:>6}",
        "instance", "neighbor", "AS", "state", "up", "received", "accepted", "adv", "flaps"
    );
    for n in list {
        println!(
            "{:<10} {:<26} {:>10} {:<12} {:>9} {:>9} {:>9} {:>9} {:>6}",
            n.instance,
            n.address,
            n.remote_as,
            n.state,
            duration(n.uptime_secs),
            n.prefixes_received,
            n.prefixes_accepted,
            n.prefixes_advertised,
            n.dropped_count
        );
        if let Some(e) = &n.last_error {
            println!("{:<10} {:<26} last error: {e}", "", "");
        }
    }
}

fn print_fib(list: &[holdfast_api::FibInfo]) {
    if list.is_empty() {
        println!("no kernel FIB (no [kernel] in the configuration)");
        return;
    }
    for f in list {
        let c = &f.counters;
        println!(
            "instance {}: table {} metric {} proto {} ecmp {}{} — {}",
            f.instance,
            f.table,
            f.metric,
            f.protocol,
            f.ecmp,
            if f.persist { " persist" } else { "" },
            f.phase
        );
        println!(
            "  routes {}: installed {}, pending {}, unresolved {}, failed {}, stale {}{}",
            f.routes_total,
            f.installed,
            f.pending,
            f.unresolved,
            f.failed,
            f.stale,
            if f.old_key > 0 {
                format!(", under the old key {}", f.old_key)
            } else {
                String::new()
            }
        );
        println!(
            "  added {}, replaced {}, deleted {}, errors {}, batches {}, dumps {}, adopted {}, notifications {}, lost answers {}",
            c.added, c.replaced, c.deleted, c.errors, c.batches, c.dumps, c.adopted, c.notifications, c.lost_answers
        );
        println!("  next hops:");
        for n in &f.next_hops {
            println!(
                "    {:<40} via {:<20} -> {}",
                n.next_hop,
                n.via_route.as_deref().unwrap_or("(unresolved)"),
                n.resolved.join(", ")
            );
        }
        println!(
            "  {:<44} {:<11} {:<40} installed",
            "prefix", "state", "bgp next hops"
        );
        for r in &f.routes {
            let state = match &r.error {
                Some(e) => format!("{} ({e})", r.state),
                None => r.state.clone(),
            };
            println!(
                "  {:<44} {:<11} {:<40} {}",
                r.prefix,
                state,
                r.bgp_next_hops.join(","),
                r.installed.join(", ")
            );
        }
    }
}

fn print_bfd(list: &[holdfast_api::BfdSessionInfo]) {
    if list.is_empty() {
        println!("no BFD sessions");
        return;
    }
    println!(
        "{:<28} {:<10} {:>10} {:>10} {:<6} {:<28} {:>8} {:>8} {:>9} {:>5} {:>9} {:>9} {:>9} {:>7}",
        "peer",
        "mode",
        "local-id",
        "remote-id",
        "state",
        "diag",
        "tx ms",
        "rx ms",
        "tx gap ms",
        "mult",
        "uptime",
        "pkts in",
        "pkts out",
        "changes"
    );
    for b in list {
        let up = (b.state == "Up").then_some(b.uptime_secs);
        println!(
            "{:<28} {:<10} {:>10} {:>10} {:<6} {:<28} {:>8} {:>8} {:>9} {:>5} {:>9} {:>9} {:>9} {:>7}",
            b.neighbor,
            b.mode,
            b.local_discriminator,
            b.remote_discriminator,
            b.state,
            b.diag,
            format!("{:.1}", b.tx_interval_us as f64 / 1000.0),
            format!("{:.1}", b.rx_interval_us as f64 / 1000.0),
            format!("{:.1}", b.tx_gap_max_us as f64 / 1000.0),
            format!("{}/{}", b.multiplier, b.remote_multiplier),
            duration(up),
            b.packets_in,
            b.packets_out,
            b.state_changes
        );
    }
}

fn print_nsr(n: &NsrStatus) {
    if !n.enabled {
        println!("non-stop routing is not enabled");
        return;
    }
    println!(
        "instance {}  role {}  epoch {} (store {})  {}",
        n.instance,
        n.role,
        n.epoch,
        n.store_epoch,
        if n.standby.is_some() {
            "STANDBY (claims nothing, serves no session)"
        } else if n.protected {
            "PROTECTED"
        } else {
            "UNPROTECTED"
        }
    );
    println!(
        "store {}  write p50 {} us p99 {} us  writes {}  errors {}",
        n.store, n.store_latency_p50_us, n.store_latency_p99_us, n.writes, n.write_errors
    );
    println!(
        "added ACK delay p50 {} us p99 {} us  (held {} packets, clamped {})",
        n.ack_delay_p50_us, n.ack_delay_p99_us, n.ack_packets_held, n.ack_packets_clamped
    );
    if let Some(sb) = &n.standby {
        println!(
            "standby: following {} sessions; {} log chunks applied, {} restarts; {} polls ({} failed); {}{}",
            sb.sessions,
            sb.chunks,
            sb.restarts,
            sb.polls,
            sb.poll_errors,
            match (sb.caught_up, sb.prepared) {
                (true, true) => "caught up, tables compared",
                (true, false) => "caught up",
                _ => "catching up",
            },
            sb.last_error.as_deref().map(|e| format!("; last error: {e}")).unwrap_or_default()
        );
    }
    if let Some(t) = &n.takeover {
        println!(
            "takeover: {} sessions ({} preheated), {} routes; claim {} us, load {} us, address wait {} us, TCP restore {} us (max {} us/session), resumed at {} us, logs read at {} us, tables at {} us",
            t.sessions, t.preheated, t.routes, t.claim_us, t.load_us, t.address_wait_us, t.tcp_restore_us, t.tcp_restore_max_us, t.resumed_us, t.logs_us, t.tables_us
        );
    }
    println!(
        "{:<32} {:<10} {:>8} {:>10} {:>12} {:>12} {:>12}",
        "session", "protected", "lag ops", "lag us", "rcv acked", "snd next", "log bytes"
    );
    for s in &n.sessions {
        println!(
            "{:<32} {:<10} {:>8} {:>10} {:>12} {:>12} {:>12}",
            s.key,
            if s.protected { "yes" } else { "NO" },
            s.lag_ops,
            s.lag_us,
            s.rcv_confirmed,
            s.snd_next,
            s.log_bytes
        );
    }
}

fn print_summary(s: &Summary) {
    println!(
        "router id {}, AS {}, up {}",
        s.router_id,
        s.asn,
        duration(Some(s.uptime_secs))
    );
    if !s.version.is_empty() {
        println!("holdfastd {}", s.version);
    }
    if s.io_threads > 0 {
        println!("I/O threads: {}", s.io_threads);
    }
    println!(
        "neighbours: {} established of {}",
        s.neighbors_established, s.neighbors_total
    );
    for (inst, n) in &s.loc_rib_routes {
        println!("instance {inst}: {n} prefixes in the Loc-RIB");
    }
}

fn print_rib(routes: &[RibEntry]) {
    println!(
        "{:<2} {:<20} {:<26} {:<26} {:>6} {:>6}  path",
        "", "prefix", "from", "next hop", "lpref", "med"
    );
    for r in routes {
        let opt = |v: Option<u32>| v.map(|x| x.to_string()).unwrap_or_else(|| "-".into());
        println!(
            "{:<2} {:<20} {:<26} {:<26} {:>6} {:>6}  {} {}{}{}{}",
            if r.best { "*>" } else { "*" },
            r.prefix,
            r.peer.as_deref().unwrap_or("local"),
            r.next_hop.as_deref().unwrap_or("-"),
            opt(r.local_pref),
            opt(r.med),
            r.as_path,
            r.origin,
            if r.communities.is_empty() {
                String::new()
            } else {
                format!("  c[{}]", r.communities.join(" "))
            },
            if r.large_communities.is_empty() {
                String::new()
            } else {
                format!("  lc[{}]", r.large_communities.join(" "))
            },
            r.rpki
                .as_deref()
                .map_or(String::new(), |s| format!("  rpki {s}")),
        );
    }
    println!("{} route(s)", routes.len());
}
