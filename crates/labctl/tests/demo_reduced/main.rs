//! The reduced demo (CI): `make demo`'s run with 1k routes in and 1k out, one failure
//! of each kind of TENSOR Table 1, and the zero columns asserted.
//!
//! ```text
//!                      bridge `lan`: 198.18.0.0/24
//!   [ frr ]   .1  frr (AS 65001), 500 routes in ---+
//!   [ redis ] .2  the NSR state store             -+--- service .10 (moves a <-> b)
//!   [ a ]     .3  holdfastd primary, 1k routes out -+
//!   [ b ]     .4  holdfastd backup                 -+
//!   [ bird ]  .5  bird2 (AS 65002), 500 routes in --+
//!   [ relay ] .6  holdfast-bfd-relay ----------------+
//! ```
//!
//! BFD runs under both sessions at 100 ms x 3, with the relay on.
//!
//! Checked, per failure (application, container, host, host-network):
//! * the failure was detected and taken over onto the other host, and the new primary
//!   holds all 2k routes;
//! * each peer (frr, bird2) saw no session reset (its CLI every 100 ms, new TCP
//!   connections in a capture in its namespace), no NOTIFICATION (its log, the
//!   capture), no route withdrawn and none announced again (the UPDATEs it received),
//!   and no silence as long as the hold time;
//! * each peer saw no BFD Down (frr: `session-down` counter, state and uptime; bird2:
//!   `show bfd sessions` state and "Since");
//! * the Markdown and PNG reports are written;
//! * negative control: when each peer then resets its own session, the same columns
//!   show the reset and the routes sent again (so the zeros above are not vacuous);
//! * the lab is gone afterwards (no namespace of the run left).

use holdfast_lab::{list_netns, skip_unless_ready, PeerKind};
use holdfast_labctl::command::FailureKind;
use holdfast_labctl::demo::{self, DemoOptions};
use std::path::PathBuf;

#[test]
fn reduced_demo_peers_see_nothing() {
    if skip_unless_ready(&[PeerKind::Bird, PeerKind::Frr]) {
        return;
    }
    let dir = std::env::temp_dir().join(format!("hf-demo-reduced-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let scenario =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../lab/scenarios/demo/scenario.toml");
    let mut opts = DemoOptions::new(scenario, dir.join("state.json"));
    opts.routes_in = Some(1000);
    opts.routes_out = Some(1000);
    opts.report_dir = Some(dir.join("reports"));
    opts.control = true;
    let report = demo::run(&opts, &mut |m| println!("{m}")).expect("demo run");
    print!("{}", report.table());

    let kinds: Vec<FailureKind> = report.rows.iter().map(|r| r.kind).collect();
    assert_eq!(kinds, FailureKind::ALL.to_vec());
    assert_eq!((report.routes_in, report.routes_out), (1000, 1000));
    for r in &report.rows {
        assert_ne!(
            r.from_host, r.to_host,
            "{}: taken over onto another host",
            r.kind
        );
        assert!(r.fail.detected_ms.is_some(), "{}: detected", r.kind);
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
            assert!(
                p.messages > 0,
                "{}: {} heard from the new primary",
                r.kind,
                p.peer
            );
        }
    }
    report.check().expect("the zero columns");

    let control = report.control.as_ref().expect("negative control ran");
    for p in control {
        assert!(
            p.resets >= 1,
            "control: {} reset shows: {:?}",
            p.peer,
            p.evidence
        );
        assert!(
            p.relearned >= 1000,
            "control: {} got holdfastd's 1k routes again: {} ({:?})",
            p.peer,
            p.relearned,
            p.evidence
        );
    }
    let frr = control.iter().find(|p| p.peer == "frr").unwrap();
    assert!(
        frr.notifications >= 1,
        "frr logs the Cease it sends: {:?}",
        frr.evidence
    );

    for f in ["demo.md", "demo.png", "demo.json"] {
        let p = dir.join("reports").join(f);
        assert!(
            std::fs::metadata(&p).map(|m| m.len() > 0).unwrap_or(false),
            "{}",
            p.display()
        );
    }
    let md = std::fs::read_to_string(dir.join("reports/demo.md")).unwrap();
    assert!(md.contains("| host-network (") && md.contains("Negative control"));
    assert!(md.contains("| BFD Down (frr / bird) |"), "{md}");

    let left: Vec<String> = list_netns()
        .unwrap()
        .into_iter()
        .filter(|n| n.contains(&report.run_id))
        .collect();
    assert!(left.is_empty(), "namespaces left: {left:?}");
    std::fs::remove_dir_all(&dir).unwrap();
}
