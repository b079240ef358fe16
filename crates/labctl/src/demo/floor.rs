//! The BFD floor: the shortest BFD interval at which every takeover kind stays
//! invisible to the peers (`holdfast-demo --bfd-floor 100,50,30,20,10`).
//!
//! [`bfd_floor`] runs the demo once per interval, longest first, with every peer's BFD
//! at that interval (both ways, the scenario's Detect Mult) and the relay on, and
//! records per takeover kind what each peer saw. An interval is invisible when every
//! peer saw zero resets, NOTIFICATIONs, routes withdrawn or re-learned and BFD Down
//! events in every kind, and reported the interval itself as what its BFD session
//! sends at (so a peer that silently negotiated something slower does not count).
//! A run that fails (a takeover that did not complete, say) is recorded with its error
//! and is not invisible.

use std::fmt::Write as _;

use serde::Serialize;

use holdfast_lab::Result;

use super::{run, DemoOptions, DemoReport};

/// One interval of the sweep.
#[derive(Debug, Clone, Serialize)]
pub struct FloorRow {
    /// The BFD interval, ms.
    pub interval_ms: u32,
    /// Whether every kind was invisible to every peer.
    pub invisible: bool,
    /// Per kind, per peer: `kind peer: resets/NOTIFICATIONs/withdrawn/re-learned/BFD
    /// Down @ interval the peer reported`, for what was not clean.
    pub seen: Vec<String>,
    /// Takeover totals (s) per kind, in order.
    pub totals_s: Vec<(String, f64)>,
    /// The run's error, when it did not complete.
    pub error: Option<String>,
}

/// The whole sweep.
#[derive(Debug, Clone, Serialize)]
pub struct FloorReport {
    /// Routes in and out of each run.
    pub routes: (u64, u64),
    /// The kinds taken over at each interval, in order.
    pub kinds: Vec<String>,
    /// One row per interval, in the order run.
    pub rows: Vec<FloorRow>,
    /// The shortest interval at which every kind was invisible, and every longer one
    /// of the sweep was too.
    pub floor_ms: Option<u32>,
}

/// What one run at `interval_ms` showed.
fn row_of(interval_ms: u32, r: &DemoReport) -> FloorRow {
    let mut seen = Vec::new();
    for row in &r.rows {
        for p in &row.peers {
            let clean = p.resets + p.notifications + p.withdrawn + p.relearned == 0
                && p.bfd_downs == Some(0)
                && p.bfd_interval_ms == Some(interval_ms);
            if !clean {
                seen.push(format!(
                    "{} {}: {}/{}/{}/{}/{} BFD Down @ {} ms",
                    row.kind,
                    p.peer,
                    p.resets,
                    p.notifications,
                    p.withdrawn,
                    p.relearned,
                    p.bfd_downs.map_or("?".into(), |n| n.to_string()),
                    p.bfd_interval_ms.map_or("?".into(), |n| n.to_string()),
                ));
            }
        }
    }
    FloorRow {
        interval_ms,
        invisible: seen.is_empty(),
        seen,
        totals_s: r
            .rows
            .iter()
            .map(|row| (row.kind.to_string(), row.total_s))
            .collect(),
        error: None,
    }
}

/// Runs `base` once per interval of `intervals_ms` (longest first) and reports the
/// floor (see the module doc). `progress` gets every run's lines.
pub fn bfd_floor(
    base: &DemoOptions,
    intervals_ms: &[u32],
    progress: &mut dyn FnMut(&str),
) -> Result<FloorReport> {
    let mut sorted = intervals_ms.to_vec();
    sorted.sort_unstable_by(|a, b| b.cmp(a));
    sorted.dedup();
    let mut rows = Vec::new();
    let mut routes = (0, 0);
    for ms in sorted {
        let mut opts = base.clone();
        opts.bfd_interval_ms = Some(ms);
        opts.report_dir = None;
        opts.control = false;
        opts.relay = true;
        progress(&format!("══ BFD {ms} ms ══"));
        let row = match run(&opts, progress) {
            Ok(r) => {
                routes = (r.routes_in, r.routes_out);
                row_of(ms, &r)
            }
            Err(e) => FloorRow {
                interval_ms: ms,
                invisible: false,
                seen: Vec::new(),
                totals_s: Vec::new(),
                error: Some(e.to_string()),
            },
        };
        progress(&format!(
            "══ BFD {ms} ms: {} ══",
            if row.invisible {
                "every kind invisible".to_string()
            } else {
                format!(
                    "seen: {}",
                    row.error.clone().unwrap_or_else(|| row.seen.join("; "))
                )
            }
        ));
        rows.push(row);
    }
    let floor_ms = rows
        .iter()
        .take_while(|r| r.invisible)
        .last()
        .map(|r| r.interval_ms);
    Ok(FloorReport {
        routes,
        kinds: base.kinds.iter().map(ToString::to_string).collect(),
        rows,
        floor_ms,
    })
}

impl FloorReport {
    /// The sweep as a Markdown table and the floor.
    pub fn table(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(
            s,
            "| BFD interval (ms, x3) | every kind invisible | takeover totals, s ({}) | what a peer saw |",
            self.kinds.join(", ")
        );
        s.push_str("|---|---|---|---|\n");
        for r in &self.rows {
            let totals = r
                .totals_s
                .iter()
                .map(|(_, t)| format!("{t:.3}"))
                .collect::<Vec<_>>()
                .join(" / ");
            let seen = r.error.clone().unwrap_or_else(|| r.seen.join("; "));
            let _ = writeln!(
                s,
                "| {} | {} | {} | {} |",
                r.interval_ms,
                if r.invisible { "yes" } else { "no" },
                if totals.is_empty() {
                    "–".into()
                } else {
                    totals
                },
                if seen.is_empty() {
                    "nothing".into()
                } else {
                    seen
                }
            );
        }
        let _ = writeln!(
            s,
            "\nShortest interval at which every kind stayed invisible: {}",
            self.floor_ms
                .map_or("none of those tried".to_string(), |ms| format!(
                    "{ms} ms x 3"
                ))
        );
        s
    }
}
