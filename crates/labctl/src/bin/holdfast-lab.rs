//! `holdfast-lab`, what `holdfast lab ...` runs (the `holdfast` CLI finds it next to
//! its own executable and passes its arguments through): a scenario of
//! `lab/scenarios/` built in network namespaces, TENSOR's failures injected,
//! takeovers onto the backup ([`holdfast_labctl::command`]). It needs root.
//!
//! Progress goes to stderr, the result to stdout: text, or JSON with `--json` (a
//! failure is then `{"error": "..."}` with exit status 1).

use clap::{Parser, Subcommand};
use holdfast_labctl::command::{self as lab, FailureKind};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};

#[derive(Parser, Debug)]
#[command(
    name = "holdfast lab",
    bin_name = "holdfast lab",
    version = holdfast_version::VERSION,
    about = "The lab: a scenario of lab/scenarios/ in network namespaces (holdfastd primary \
             and backup hosts, Redis, real peers), failures, takeovers. Needs root."
)]
struct Args {
    /// The lab's state file [default: $HOLDFAST_LAB_DIR/holdfast-lab-state.json
    /// if HOLDFAST_LAB_DIR is set, else /run/holdfast-lab/state.json].
    #[arg(long, global = true, env = "HOLDFAST_LAB_STATE")]
    state: Option<PathBuf>,
    /// Print the result as JSON.
    #[arg(long, global = true)]
    json: bool,
    #[command(subcommand)]
    op: LabOp,
}

#[derive(Subcommand, Debug)]
enum LabOp {
    /// Build a scenario and leave it running: SCENARIO is a name (`holdfast lab
    /// list`), a directory, or a scenario.toml. Certificates are made at up
    /// (mutual TLS between the controllers and the agents) and Redis runs with
    /// ACL users.
    Up {
        scenario: String,
        /// Plaintext: no certificates (the controllers and agents run
        /// `--insecure`), Redis without ACL users. Warned at start.
        #[arg(long)]
        insecure: bool,
    },
    /// Every unit: processes, holdfastd's summary and NSR state (control socket),
    /// each peer's sessions (the peer's own CLI), links, the controllers (which
    /// leads) and the agents, failures so far.
    Status,
    /// Inject a failure; the controller finds it and moves the unit; waits for its
    /// verdict and the unit PROTECTED on its new host. KIND TARGET: `application
    /// UNIT` (SIGKILL holdfastd), `container UNIT` (SIGKILL every process of its
    /// container, which is deleted), `host HOST` (every process of the host and its
    /// containers, links down), `host-network HOST` (its `lan` ports down, processes
    /// stay up), or a planned `switchover UNIT` (`holdfast ctl switchover`).
    Fail {
        /// application | container | host | host-network | switchover
        kind: FailureKind,
        /// A holdfastd unit (application, container, switchover) or a host (host,
        /// host-network).
        target: String,
    },
    /// Bring a host back after a host or host-network failure (removes a stale
    /// service address and the packets its containers left queued, links up, its
    /// agent started again, `holdfast ctl reset HOST`).
    Heal { host: String },
    /// Randomized failures on the control-plane lab (three hosts with
    /// containers, the agent server, three controllers on etcd; frr, bird2
    /// and gobgpd peers), each found and handled by the controller, checked
    /// on the peers; one line per iteration, then a summary. Builds its own
    /// lab and removes it (kept, with captures, when something failed).
    Chaos {
        /// How many failures.
        #[arg(long, default_value_t = 20)]
        iterations: u32,
        /// The seed of the random choices (the same seed, the same run).
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// Draw only these kinds (comma-separated; default: every kind).
        #[arg(long, value_enum, value_delimiter = ',')]
        kinds: Vec<holdfast_labctl::chaos::ChaosKind>,
        /// A plaintext control plane (`--insecure` controllers and agents, Redis
        /// without ACL users), as `lab up --insecure`. Warned at start.
        #[arg(long)]
        insecure: bool,
    },
    /// Tear the lab down, and remove what any crashed lab run left behind.
    Down,
    /// The shipped scenarios.
    List,
}

/// A flag set by SIGINT or SIGTERM (watched from a thread of its own), so
/// that a long run stops between iterations and removes its lab.
fn interrupt_flag() -> &'static AtomicBool {
    static STOP: AtomicBool = AtomicBool::new(false);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build();
    if let Ok(rt) = rt {
        std::thread::spawn(move || {
            rt.block_on(async {
                use tokio::signal::unix::{signal, SignalKind};
                let (Ok(mut int), Ok(mut term)) = (
                    signal(SignalKind::interrupt()),
                    signal(SignalKind::terminate()),
                ) else {
                    return;
                };
                loop {
                    tokio::select! {
                        _ = int.recv() => {}
                        _ = term.recv() => {}
                    }
                    eprintln!("holdfast: interrupted: stopping after this iteration, then removing the lab");
                    STOP.store(true, Ordering::Relaxed);
                }
            });
        });
    }
    &STOP
}

fn main() {
    let args = Args::parse();
    if let Err(e) = run_lab(args.state, &args.op, args.json) {
        eprintln!("holdfast: {e:#}");
        std::process::exit(1);
    }
}

/// Runs one operation; the result on stdout (text, or JSON with `--json`; a failure is
/// then `{"error": "..."}` with exit status 1).
fn run_lab(state: Option<PathBuf>, op: &LabOp, json: bool) -> anyhow::Result<()> {
    let state = state.unwrap_or_else(lab::default_state_file);
    let mut progress = |line: &str| eprintln!("{line}");
    let out: anyhow::Result<(serde_json::Value, String)> = (|| {
        Ok(match op {
            LabOp::Up { scenario, insecure } => {
                let file = lab::find_scenario(scenario)?;
                let opts = lab::UpOptions {
                    insecure: *insecure,
                };
                let s = lab::up_with(&file, &state, &opts, &mut progress)?;
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
            LabOp::Chaos {
                iterations,
                seed,
                kinds,
                insecure,
            } => {
                let stop = interrupt_flag();
                if *insecure {
                    eprintln!("{}", lab::INSECURE_WARNING);
                }
                let (summary, its) = holdfast_labctl::chaos::run_with(
                    *iterations,
                    *seed,
                    kinds,
                    *insecure,
                    Some(stop),
                    |it| eprintln!("{it}"),
                )?;
                let v = serde_json::json!({ "summary": summary, "iterations": its });
                let text = format!("{summary}\n");
                if summary.failed > 0 || !summary.two_senders.is_empty() {
                    if json {
                        println!("{}", serde_json::to_string_pretty(&v)?);
                    } else {
                        print!("{text}");
                    }
                    anyhow::bail!("chaos found a problem (see above)");
                }
                (v, text)
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
