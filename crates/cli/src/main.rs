//! `holdfast`, the command-line interface to `holdfastd`.
//!
//! Talks to the daemon's control socket (newline-delimited JSON, types in
//! `holdfast-api`). Every command prints a table for people or, with
//! `--json`, the daemon's answer as JSON for tools.
//!
//! `holdfast lab ...` drives the lab (`holdfast_lab::command`): scenarios from
//! `lab/scenarios/` built in network namespaces, TENSOR's failures injected,
//! takeovers onto the backup. It needs root.
//!
//! `holdfast replay FILE` re-runs a neighbour's recorded inputs
//! (`holdfastd --record DIR`) through the peer core and reports the first
//! output that differs.
//!
//! `holdfast bench` runs `holdfast-bench` (the TENSOR evaluation side by side
//! with bird2, frr and gobgpd) from the directory of this executable.

use anyhow::{bail, Context};
use clap::{Parser, Subcommand};
use holdfast_api::{Body, NeighborInfo, NsrStatus, Request, Response, RibEntry, RibTable, Summary};
use holdfast_lab::command::{self as lab, FailureKind};
use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::time::Duration;

#[derive(Parser, Debug)]
#[command(name = "holdfast", version, about = "Control and inspect holdfastd")]
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
    /// and backup hosts, Redis, real peers), failures, takeovers. Needs root.
    Lab {
        /// The lab's state file [default: $HOLDFAST_LAB_DIR/holdfast-lab-state.json
        /// if HOLDFAST_LAB_DIR is set, else /run/holdfast-lab/state.json].
        #[arg(long, global = true, env = "HOLDFAST_LAB_STATE")]
        state: Option<PathBuf>,
        #[command(subcommand)]
        op: LabOp,
    },
}

#[derive(Subcommand, Debug)]
enum LabOp {
    /// Build a scenario and leave it running: SCENARIO is a name (`holdfast lab
    /// list`), a directory, or a scenario.toml.
    Up { scenario: String },
    /// Every unit: processes, holdfastd's summary and NSR state (control socket),
    /// each peer's sessions (the peer's own CLI), links, failures so far.
    Status,
    /// Inject a failure, then take over onto the backup host. KIND TARGET:
    /// `application UNIT` (SIGKILL holdfastd), `container UNIT` (SIGKILL every
    /// process of its namespace), `host HOST` (every unit on it, links down),
    /// `host-network HOST` (bridge port down, processes stay up).
    Fail {
        /// application | container | host | host-network
        kind: FailureKind,
        /// A holdfastd unit (application, container) or a host (host, host-network).
        target: String,
    },
    /// Bring a host back after a host or host-network failure (kills fenced old
    /// primaries there, removes a stale service address, links up).
    Heal { host: String },
    /// Tear the lab down, and remove what any crashed lab run left behind.
    Down,
    /// The shipped scenarios.
    List,
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
}

#[derive(Subcommand, Debug)]
enum Show {
    /// Sessions, their state and counters.
    Neighbors,
    /// One line per daemon: identity, sessions, table sizes.
    Summary,
    /// Non-stop routing: protection per session, replication lag, epoch, store latency.
    Nsr,
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
enum NeighborOp {
    /// Reset a session (Cease, Administrative Reset).
    Reset { address: String },
}

fn main() {
    let cli = Cli::parse();
    if let Err(e) = run(cli) {
        eprintln!("holdfast: {e:#}");
        std::process::exit(1);
    }
}

fn request(socket: &PathBuf, req: &Request) -> anyhow::Result<Response> {
    let mut s = UnixStream::connect(socket)
        .with_context(|| format!("connecting to {}", socket.display()))?;
    s.set_read_timeout(Some(Duration::from_secs(60)))?;
    let mut line = req.to_line();
    line.push('\n');
    s.write_all(line.as_bytes())?;
    let mut answer = String::new();
    BufReader::new(s)
        .read_line(&mut answer)
        .context("reading the answer")?;
    if answer.is_empty() {
        bail!("the daemon closed the connection without answering");
    }
    Response::from_line(&answer).context("decoding the answer")
}

/// `holdfast lab ...`: progress on stderr, the result on stdout (text, or JSON with
/// `--json`; a failure is then `{"error": "..."}` with exit status 1).
fn run_lab(state: Option<PathBuf>, op: &LabOp, json: bool) -> anyhow::Result<()> {
    let state = state.unwrap_or_else(lab::default_state_file);
    let mut progress = |line: &str| eprintln!("{line}");
    let out: anyhow::Result<(serde_json::Value, String)> = (|| {
        Ok(match op {
            LabOp::Up { scenario } => {
                let file = lab::find_scenario(scenario)?;
                let s = lab::up(&file, &state, &mut progress)?;
                (serde_json::to_value(&s)?, s.to_string())
            }
            LabOp::Status => {
                let s = lab::status(&state)?;
                (serde_json::to_value(&s)?, s.to_string())
            }
            LabOp::Fail { kind, target } => {
                let r = lab::fail(&state, *kind, target, &mut progress)?;
                (serde_json::to_value(&r)?, r.to_string())
            }
            LabOp::Heal { host } => {
                let r = lab::heal(&state, host)?;
                (serde_json::to_value(&r)?, r.to_string())
            }
            LabOp::Down => {
                let r = lab::down(&state)?;
                (serde_json::to_value(&r)?, r.to_string())
            }
            LabOp::List => {
                let list = lab::list_scenarios();
                let mut text = String::new();
                for (name, file, desc) in &list {
                    text.push_str(&format!(
                        "{name:<16} {desc}\n{:<16} {}\n",
                        "",
                        file.display()
                    ));
                }
                let v = list
                    .iter()
                    .map(|(name, file, desc)| {
                        serde_json::json!({ "name": name, "file": file, "description": desc })
                    })
                    .collect::<Vec<_>>();
                (serde_json::Value::Array(v), text)
            }
        })
    })();
    match out {
        Ok((v, text)) => {
            if json {
                println!("{}", serde_json::to_string_pretty(&v)?);
            } else {
                print!("{text}");
            }
            Ok(())
        }
        Err(e) if json => {
            println!(
                "{}",
                serde_json::to_string_pretty(&serde_json::json!({ "error": format!("{e:#}") }))?
            );
            std::process::exit(1);
        }
        Err(e) => Err(e),
    }
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

/// `holdfast replay FILE`: exit status 0 when every output was identical.
fn run_replay(file: &std::path::Path, json: bool) -> anyhow::Result<()> {
    let report = holdfast_speaker::replay(file)?;
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
        Cmd::Lab { state, op } => return run_lab(state.clone(), op, cli.json),
        Cmd::Bench { quick, out, extra } => return run_bench(*quick, out, extra, cli.json),
        Cmd::Replay { file } => return run_replay(file, cli.json),
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
        Cmd::Nsr {
            op: NsrOp::Switchover { timeout },
        } => Request::NsrSwitchover {
            timeout_secs: *timeout,
        },
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
    }
    Ok(())
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
        if n.protected {
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
    if let Some(t) = &n.takeover {
        println!(
            "takeover: {} sessions, {} routes; claim {} us, load {} us, address wait {} us, TCP restore {} us (max {} us/session), resumed at {} us, tables at {} us",
            t.sessions, t.routes, t.claim_us, t.load_us, t.address_wait_us, t.tcp_restore_us, t.tcp_restore_max_us, t.resumed_us, t.tables_us
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
            "{:<2} {:<20} {:<26} {:<26} {:>6} {:>6}  {} {}{}{}",
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
        );
    }
    println!("{} route(s)", routes.len());
}
