//! Every takeover kind at BFD 50 ms x 3 (issue 10): the reduced demo with frr's bfdd
//! and bird2's BFD at 50 ms both ways (detection time 150 ms, shorter than every
//! takeover here), the relay covering the unit's sessions from the store.
//!
//! ```text
//!                      bridge `lan`: 198.18.0.0/24
//!   [ frr ]   .1  frr (AS 65001), bfdd 50 ms x 3 ---+
//!   [ redis ] .2  the NSR state store              -+--- service .10 (moves a <-> b)
//!   [ a ]     .3  agent; holdfastd primary in a_edge, 1k routes out
//!   [ b ]     .4  agent; container b_edge, the backup
//!   [ bird ]  .5  bird2 (AS 65002), BFD 50 ms x 3  -+
//!   [ relay ] .6  holdfast-bfd-relay ---------------+
//!   [ c1..c3 ]    etcd + holdfast-controller; [ s ] the agent server's agent
//! ```
//!
//! The controller finds every failure and moves the unit; a host or host-network
//! failure takes it about 3.4 s (the agents' 3 s etcd lease, the localization's
//! confirmation), 23 BFD detection times at 50 ms x 3, which the relay covers.
//!
//! Checked:
//! * `every_kind_at_50ms`: application, container, host, host-network and a planned
//!   switchover in turn, each taken over onto the other host: each peer saw no reset,
//!   NOTIFICATION, route withdrawn or re-learned (its CLI every 100 ms, a capture in
//!   its namespace, its log) and no BFD Down (frr: `session-down` counter, state,
//!   uptime; bird2: state and "Since"), and its BFD session sends at 50 ms by its own
//!   CLI (frr `show bfd peers json`, bird2 `show bfd sessions`);
//! * `negative_control_without_the_relay`: the same lab without the relay, one host
//!   failure: both peers see their BFD session go Down and drop BGP (reset columns
//!   non-zero). This shows the first test can fail.
//! * Both: the lab is gone afterwards.

use crate::takeovers;

use holdfast_lab::{skip_unless_ready, PeerKind};
use holdfast_labctl::command::FailureKind;
use holdfast_labctl::demo;

const BFD_MS: u32 = 50;

#[test]
fn every_kind_at_50ms() {
    if skip_unless_ready(&[PeerKind::Bird, PeerKind::Frr]) {
        return;
    }
    let (mut opts, dir) = takeovers::reduced("bfd50");
    opts.kinds = FailureKind::EVERY.to_vec();
    opts.bfd_interval_ms = Some(BFD_MS);
    let report = demo::run(&opts, &mut |m| println!("{m}")).expect("demo run");
    print!("{}", report.table());
    takeovers::assert_invisible(&report, &FailureKind::EVERY, BFD_MS);
    takeovers::assert_lab_gone(&report);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn negative_control_without_the_relay() {
    if skip_unless_ready(&[PeerKind::Bird, PeerKind::Frr]) {
        return;
    }
    let (mut opts, dir) = takeovers::reduced("bfd50-norelay");
    opts.kinds = vec![FailureKind::Host];
    opts.bfd_interval_ms = Some(BFD_MS);
    opts.relay = false;
    let report = demo::run(&opts, &mut |m| println!("{m}")).expect("demo run");
    print!("{}", report.table());
    assert_eq!(report.rows.len(), 1);
    for p in &report.rows[0].peers {
        assert!(
            p.bfd_downs.is_some_and(|n| n >= 1),
            "{}: BFD went Down without the relay: {:?}",
            p.peer,
            p.evidence
        );
        assert!(
            p.resets >= 1,
            "{}: dropped BGP with BFD: {:?}",
            p.peer,
            p.evidence
        );
    }
    assert!(report.check().is_err(), "the zero-column check fails");
    takeovers::assert_lab_gone(&report);
    std::fs::remove_dir_all(&dir).unwrap();
}
