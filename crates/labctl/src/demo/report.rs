//! Rendering a [`DemoReport`]: the zero-column check, TENSOR Table 1 next to what the
//! peers saw (terminal and Markdown), the JSON file and the PNG of the phases.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use holdfast_lab::{find_tool, LabError, Result, WatchReport};

use super::{DemoReport, PeerSeen};
use crate::command::FailureKind;

/// A peer's BFD Down count, `–` without BFD.
pub(super) fn bfd_cell(p: &PeerSeen) -> String {
    p.bfd_downs
        .map_or_else(|| "–".to_string(), |n| n.to_string())
}

/// TENSOR Table 1 (seconds): detection, initiate, TCP, BGP, total.
const TENSOR_TABLE1: [(FailureKind, [f64; 5]); 4] = [
    (FailureKind::Application, [0.01, 0.10, 1.09, 1.06, 2.26]),
    (FailureKind::Container, [0.31, 0.10, 1.19, 1.01, 2.61]),
    (FailureKind::Host, [3.30, 0.20, 4.50, 1.05, 9.05]),
    (FailureKind::HostNetwork, [3.30, 0.21, 4.45, 1.21, 9.17]),
];

impl DemoReport {
    /// Ok when every failure was recovered with zero resets, NOTIFICATIONs, withdrawn
    /// and re-learned routes at every peer, each peer's longest gap below the hold time,
    /// and the new primary holding every route; else an error listing what was seen.
    pub fn check(&self) -> Result<()> {
        let mut bad = Vec::new();
        let hold = f64::from(self.hold_time.unwrap_or(90));
        for r in &self.rows {
            if r.routes_after < self.routes_in + self.routes_out {
                bad.push(format!(
                    "{}: new primary holds {} of {} routes",
                    r.kind,
                    r.routes_after,
                    self.routes_in + self.routes_out
                ));
            }
            for p in &r.peers {
                if p.resets + p.notifications + p.withdrawn + p.relearned > 0 {
                    bad.push(format!(
                        "{}: {} saw {} reset(s), {} NOTIFICATION(s), {} withdrawn, {} re-learned: {}",
                        r.kind,
                        p.peer,
                        p.resets,
                        p.notifications,
                        p.withdrawn,
                        p.relearned,
                        p.evidence.join("; ")
                    ));
                }
                if let Some(n) = p.bfd_downs.filter(|n| *n > 0) {
                    bad.push(format!(
                        "{}: {} saw {n} BFD Down: {}",
                        r.kind,
                        p.peer,
                        p.evidence.join("; ")
                    ));
                }
                if p.longest_gap_s >= hold {
                    bad.push(format!(
                        "{}: {} heard nothing for {:.2} s (hold time {hold} s)",
                        r.kind, p.peer, p.longest_gap_s
                    ));
                }
                if p.samples < WatchReport::MIN_SAMPLES {
                    bad.push(format!(
                        "{}: only {} samples of {}'s session",
                        r.kind, p.samples, p.peer
                    ));
                }
            }
        }
        if bad.is_empty() {
            Ok(())
        } else {
            Err(LabError::Invalid(format!(
                "the peers noticed: {}",
                bad.join(" | ")
            )))
        }
    }

    /// Table 1 and the peer columns as a Markdown table (also what the terminal shows).
    pub fn table(&self) -> String {
        let names: Vec<&str> = self
            .rows
            .first()
            .map(|r| r.peers.iter().map(|p| p.peer.as_str()).collect())
            .unwrap_or_default();
        let who = names.join(" / ");
        let mut s = String::new();
        let _ = writeln!(
            s,
            "| failure | detection (s) | initiate NSR migration (s) | TCP recovery (s) | BGP recovery (s) | total (s) | TENSOR total (s) | resets ({who}) | NOTIFICATIONs ({who}) | routes withdrawn ({who}) | routes re-learned ({who}) | BFD Down ({who}) | longest gap, s ({who}) |"
        );
        s.push_str("|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
        for r in &self.rows {
            let tensor = TENSOR_TABLE1
                .iter()
                .find(|(k, _)| *k == r.kind)
                .map_or("–".into(), |(_, v)| format!("{:.2}", v[4]));
            let per = |f: &dyn Fn(&PeerSeen) -> String| {
                r.peers.iter().map(f).collect::<Vec<_>>().join(" / ")
            };
            let _ = writeln!(
                s,
                "| {} ({} → {}) | {:.3} | {:.3} | {:.3} | {:.3} | **{:.3}** | {tensor} | {} | {} | {} | {} | {} | {} |",
                r.kind,
                r.from_host,
                r.to_host,
                r.detection_s,
                r.initiate_s,
                r.tcp_s,
                r.bgp_s,
                r.total_s,
                per(&|p| p.resets.to_string()),
                per(&|p| p.notifications.to_string()),
                per(&|p| p.withdrawn.to_string()),
                per(&|p| p.relearned.to_string()),
                per(&bfd_cell),
                per(&|p| format!("{:.2}", p.longest_gap_s)),
            );
        }
        s
    }

    /// The Markdown report.
    pub fn markdown(&self, png: Option<&str>) -> String {
        let mut s = String::new();
        let when = self.started_unix_ms / 1000;
        let _ = writeln!(s, "# Demo: TENSOR Table 1, as the peers saw it\n");
        let _ = writeln!(
            s,
            "Generated by `make demo` (`holdfast-demo`), scenario `{}`, started at Unix time {when}, {:.0} s wall time, on {} core(s), kernel {}.\n",
            self.scenario,
            self.wall_s,
            std::thread::available_parallelism().map_or(0, usize::from),
            std::fs::read_to_string("/proc/sys/kernel/osrelease")
                .unwrap_or_default()
                .trim()
        );
        let _ = writeln!(
            s,
            "Peers: {}. holdfastd learns {} routes from them and announces {} to each; hold time {} s. Each failure kind is injected into the primary by the lab; the control plane (etcd, three `holdfast-controller` replicas, a `holdfast-agent` per host, the agent server's agent) detects and localizes it and moves the unit onto the other host through the agents.\n",
            self.peers.join(", "),
            self.routes_in,
            self.routes_out,
            self.hold_time.map_or("default".into(), |h| h.to_string())
        );
        s.push_str(&self.table());
        s.push('\n');
        if let Some(png) = png {
            let _ = writeln!(s, "![Table 1 phases per failure kind]({png})\n");
        }
        s.push_str("## Columns\n\n");
        s.push_str(
            "- **detection**: the controller's own detection and localization time: its verdict's `detection_ms`, from its first bad measurement (an agent's report of the unit's exit or its container gone, a missed heartbeat or probe, an agent's etcd lease expiring) to the verdict. A host or host-network failure takes the agents' 3 s etcd lease or the localization's 3 s confirmation. 0 for a planned switchover.\n\
             - **initiate NSR migration**: from the verdict (its time in the controller's status) until the agent on the new host started holdfastd `--takeover` (the process's start time), with the controller's fencing of the old primary and the agents' commands in between, plus holdfastd's claim of the store's epoch and the load of the replicated state.\n\
             - **TCP recovery**: the wait for the service address (moved by the agent, announced by gratuitous ARP) and holdfastd's TCP_REPAIR restore of every session.\n\
             - **BGP recovery**: the rest, until holdfastd's tables are rebuilt and its Adj-RIB-Out diff sent.\n\
             - **TENSOR total**: the paper's Table 1 total for the same kind (its peers, its hardware, its controller).\n\
             - Peer columns, per peer: session resets (the peer's CLI every 100 ms: state, counters, uptime; new TCP connections in a capture inside the peer's namespace), NOTIFICATIONs (its log and the capture), prefixes withdrawn / announced again in the UPDATEs it received since the failure, and the longest time between two BGP messages it received from the last one before the failure to the first one after recovery (KEEPALIVEs are every hold/3 s, so up to about that much is the normal rhythm), and BFD Down events of its BFD session with holdfastd by its own CLI before and after the failure (frr: `show bfd peers counters json` `session-down`, and `show bfd peers json` state and uptime going back; bird2: `show bfd sessions` state and \"Since\" changing; `–`: no BFD).\n\n",
        );
        if let Some(c) = &self.control {
            s.push_str("## Negative control\n\nAfter the failures every peer reset its own session (frr `clear bgp`, bird `restart`), measured the same way; these columns are what a reset looks like:\n\n");
            s.push_str("| peer | resets | NOTIFICATIONs | routes withdrawn | routes re-learned | BFD Down |\n|---|---|---|---|---|---|\n");
            for p in c {
                let _ = writeln!(
                    s,
                    "| {} | {} | {} | {} | {} | {} |",
                    p.peer,
                    p.resets,
                    p.notifications,
                    p.withdrawn,
                    p.relearned,
                    bfd_cell(p)
                );
            }
            s.push('\n');
        }
        s.push_str("## Per failure\n\n");
        for r in &self.rows {
            let _ = writeln!(s, "### {} failure of `{}`\n", r.kind, r.target);
            for l in &r.fail.injected {
                let _ = writeln!(s, "- injected: {l}");
            }
            if let Some(d) = &r.fail.detector {
                let _ = writeln!(s, "- detected by: {d}");
            }
            if let Some(t) = &r.fail.takeover {
                let o = &t.phases_ms;
                let _ = writeln!(
                    s,
                    "- takeover {} on {} → {} on {} by the controller (leader {}): from the injection, verdict {:.1} ms, new holdfastd started {:.1} ms, Established {:.1} ms, PROTECTED {:.1} ms; new backup {}",
                    t.old_process,
                    t.from_host,
                    t.new_process,
                    t.to_host,
                    t.leader.as_deref().unwrap_or("?"),
                    o.verdict,
                    o.started,
                    o.established,
                    o.protected,
                    if t.new_backup.is_empty() { "none" } else { &t.new_backup }
                );
                if let Some(h) = &t.holdfastd {
                    let _ = writeln!(
                        s,
                        "- holdfastd: {} sessions, {} routes; claim {:.1} ms, load {:.1} ms, TCP restore {:.3} ms, resumed at {:.1} ms, tables at {:.1} ms from its start",
                        h.sessions,
                        h.routes,
                        h.claim_us as f64 / 1e3,
                        h.load_us as f64 / 1e3,
                        h.tcp_restore_us as f64 / 1e3,
                        h.resumed_us as f64 / 1e3,
                        h.tables_us as f64 / 1e3
                    );
                }
            }
            let _ = writeln!(s, "- routes at the new primary: {}", r.routes_after);
            for p in &r.peers {
                let _ = writeln!(
                    s,
                    "- {} ({}): {} messages received after the failure, {} CLI samples, fewest prefixes held {}{}",
                    p.peer,
                    p.daemon,
                    p.messages,
                    p.samples,
                    p.min_prefixes.map_or("?".into(), |n| n.to_string()),
                    if p.evidence.is_empty() {
                        String::new()
                    } else {
                        format!("; {}", p.evidence.join("; "))
                    }
                );
            }
            s.push('\n');
        }
        s
    }

    /// Writes `demo.md`, `demo.json` and (with gnuplot) `demo.png` into `dir`.
    pub fn write(&self, dir: &Path) -> Result<Vec<PathBuf>> {
        let io = |e: std::io::Error| LabError::Invalid(format!("{}: {e}", dir.display()));
        std::fs::create_dir_all(dir).map_err(io)?;
        let mut files = Vec::new();
        let png = dir.join("demo.png");
        let have_png = self.plot(&png)?;
        if have_png {
            files.push(png);
        }
        let md = dir.join("demo.md");
        std::fs::write(&md, self.markdown(have_png.then_some("demo.png"))).map_err(io)?;
        files.push(md);
        let json = dir.join("demo.json");
        let text =
            serde_json::to_string_pretty(self).map_err(|e| LabError::Invalid(e.to_string()))?;
        std::fs::write(&json, text).map_err(io)?;
        files.push(json);
        Ok(files)
    }

    /// A stacked bar per failure kind (phases in ms) with gnuplot; `false` without it.
    fn plot(&self, png: &Path) -> Result<bool> {
        let Some(gnuplot) = find_tool("gnuplot") else {
            return Ok(false);
        };
        let mut data = String::new();
        for r in &self.rows {
            let _ = writeln!(
                data,
                "\"{}\" {:.3} {:.3} {:.3} {:.3}",
                r.kind,
                r.detection_s * 1e3,
                r.initiate_s * 1e3,
                r.tcp_s * 1e3,
                r.bgp_s * 1e3
            );
        }
        let script = format!(
            "set terminal pngcairo size 760,560 noenhanced\n\
             set output '{}'\n\
             set title 'Takeover phases per failure kind ({} routes in, {} out)'\n\
             set ylabel 'time (ms)'\n\
             set xlabel 'failure kind (TENSOR Table 1)'\n\
             set style data histograms\n\
             set style histogram rowstacked\n\
             set style fill solid 0.8 border -1\n\
             set boxwidth 0.6\n\
             set key below\n\
             set grid ytics\n\
             $d << EOD\n{data}EOD\n\
             plot $d using 2:xtic(1) title 'failure detection', '' using 3 title 'initiate NSR migration', '' using 4 title 'TCP recovery', '' using 5 title 'BGP application recovery'\n",
            png.display(),
            self.routes_in,
            self.routes_out
        );
        let gp = png.with_extension("gp");
        std::fs::write(&gp, &script)
            .map_err(|e| LabError::Invalid(format!("{}: {e}", gp.display())))?;
        let out = std::process::Command::new(gnuplot)
            .arg(&gp)
            .output()
            .map_err(|e| LabError::Invalid(format!("gnuplot: {e}")));
        let _ = std::fs::remove_file(&gp);
        let out = out?;
        if !out.status.success() {
            return Err(LabError::Invalid(format!(
                "gnuplot: {}",
                String::from_utf8_lossy(&out.stderr)
            )));
        }
        Ok(true)
    }
}
