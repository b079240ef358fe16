//! Shared by the demo-based scenarios: the reduced demo run (1k routes in, 1k out, in
//! a temporary directory) and the checks that every takeover was invisible to every
//! peer, BFD included.
#![allow(dead_code)]

use holdfast_lab::list_netns;
use holdfast_labctl::command::FailureKind;
use holdfast_labctl::demo::{DemoOptions, DemoReport};
use std::path::PathBuf;

/// The shipped demo scenario with 1k routes in and 1k out, its lab's state file in a
/// fresh temporary directory named after `tag`.
pub fn reduced(tag: &str) -> (DemoOptions, PathBuf) {
    let dir = std::env::temp_dir().join(format!("hf-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let scenario =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../lab/scenarios/demo/scenario.toml");
    let mut opts = DemoOptions::new(scenario, dir.join("state.json"));
    opts.routes_in = Some(1000);
    opts.routes_out = Some(1000);
    (opts, dir)
}

/// Every kind of `kinds` ran, in order, was taken over onto the other host, and no
/// peer saw anything: no reset, NOTIFICATION, route withdrawn or re-learned, no BFD
/// Down, and each peer's BFD session sends at `bfd_ms` by its own CLI.
pub fn assert_invisible(report: &DemoReport, kinds: &[FailureKind], bfd_ms: u32) {
    let ran: Vec<FailureKind> = report.rows.iter().map(|r| r.kind).collect();
    assert_eq!(ran, kinds.to_vec());
    assert_eq!((report.routes_in, report.routes_out), (1000, 1000));
    for r in &report.rows {
        assert_ne!(
            r.from_host, r.to_host,
            "{}: taken over onto another host",
            r.kind
        );
        if r.kind == FailureKind::Switchover {
            assert!(
                r.fail.detected_ms.is_none(),
                "a switchover: nothing to detect"
            );
        } else {
            // Found by the controller: its verdict, with its own detection time.
            let verdict = r.fail.takeover.as_ref().and_then(|t| t.verdict.as_ref());
            assert!(verdict.is_some(), "{}: the controller's verdict", r.kind);
            assert!(r.fail.detected_ms.is_some(), "{}: detected", r.kind);
        }
        assert!(
            r.total_s > 0.0 && r.total_s < 10.0,
            "{}: total {}",
            r.kind,
            r.total_s
        );
        assert_eq!(r.peers.len(), 2);
        for p in &r.peers {
            assert_eq!(
                (p.resets, p.notifications, p.withdrawn, p.relearned),
                (0, 0, 0, 0),
                "{}: {} saw {:?}",
                r.kind,
                p.peer,
                p.evidence
            );
            assert_eq!(
                p.bfd_downs,
                Some(0),
                "{}: {} saw BFD Down: {:?}",
                r.kind,
                p.peer,
                p.evidence
            );
            assert_eq!(
                p.bfd_interval_ms,
                Some(bfd_ms),
                "{}: {}'s BFD session sends at {bfd_ms} ms",
                r.kind,
                p.peer
            );
            assert!(
                p.messages > 0,
                "{}: {} heard from the new primary",
                r.kind,
                p.peer
            );
        }
    }
    report.check().expect("the zero columns");
}

/// No namespace of the run is left.
pub fn assert_lab_gone(report: &DemoReport) {
    let left: Vec<String> = list_netns()
        .unwrap()
        .into_iter()
        .filter(|n| n.contains(&report.run_id))
        .collect();
    assert!(left.is_empty(), "namespaces left: {left:?}");
}
