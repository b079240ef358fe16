//! The reduced demo (CI): `make demo`'s run with 1k routes in and 1k out, one takeover
//! of each kind (TENSOR Table 1's four failures and a planned switchover), and the zero
//! columns asserted.
//!
//! ```text
//!                      bridge `lan`: 198.18.0.0/24
//!   [ frr ]   .1  frr (AS 65001), 500 routes in ---+
//!   [ redis ] .2  the NSR state store             -+--- service .10 (moves a <-> b)
//!   [ a ]     .3  agent; holdfastd primary in a_edge, 1k routes out
//!   [ b ]     .4  agent; container b_edge, the backup
//!   [ bird ]  .5  bird2 (AS 65002), 500 routes in --+
//!   [ relay ] .6  holdfast-bfd-relay ----------------+
//!   [ c1..c3 ]    etcd + holdfast-controller; [ s ] the agent server's agent
//! ```
//!
//! The lab only injects the failures; the controller finds each (its verdict) and
//! moves the unit through the agents.
//!
//! BFD runs under both sessions at 100 ms x 3, with the relay on.
//!
//! Checked, per takeover (application, container, host, host-network, switchover):
//! * the failure was found by the controller (its verdict; a switchover needs none) and
//!   the unit moved onto the other host, and the new primary holds all 2k routes;
//! * each peer (frr, bird2) saw no session reset (its CLI every 100 ms, new TCP
//!   connections in a capture in its namespace), no NOTIFICATION (its log, the
//!   capture), no route withdrawn and none announced again (the UPDATEs it received),
//!   and no silence as long as the hold time;
//! * each peer saw no BFD Down (frr: `session-down` counter, state and uptime; bird2:
//!   `show bfd sessions` state and "Since"), and its session still sends at 100 ms;
//! * the Markdown and PNG reports are written;
//! * negative control: when each peer then resets its own session, the same columns
//!   show the reset and the routes sent again (so the zeros above are not vacuous);
//! * the lab is gone afterwards (no namespace of the run left).

use crate::takeovers;

use holdfast_lab::{skip_unless_ready, PeerKind};
use holdfast_labctl::command::FailureKind;
use holdfast_labctl::demo;

#[test]
fn reduced_demo_peers_see_nothing() {
    if skip_unless_ready(&[PeerKind::Bird, PeerKind::Frr]) {
        return;
    }
    let (mut opts, dir) = takeovers::reduced("demo-reduced");
    opts.kinds = FailureKind::EVERY.to_vec();
    opts.report_dir = Some(dir.join("reports"));
    opts.control = true;
    let report = demo::run(&opts, &mut |m| println!("{m}")).expect("demo run");
    print!("{}", report.table());
    takeovers::assert_invisible(&report, &FailureKind::EVERY, 100);

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

    takeovers::assert_lab_gone(&report);
    std::fs::remove_dir_all(&dir).unwrap();
}
