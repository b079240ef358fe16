//! `holdfast lab chaos` in `make test`: 20 randomized failures (seed 11)
//! on the control-plane lab, each found and handled by the controller and
//! checked on frr, bird2 and gobgpd (see `holdfast_labctl::chaos` for the
//! topology and every check). The 1000-iteration run is a command, not a
//! test: `holdfast lab chaos --iterations 1000 --seed S`.
//!
//! ```text
//!   frr .1, bird2 .5, gobgpd .6 -- BGP --> units u1 (a), u2 (b), u3 (c)
//!   hosts a b c (a container per unit each), agent server s,
//!   controllers c1..c3 on etcd (management bridge), Redis .2
//! ```
//!
//! Checked: every iteration passes (its verdict, the moved units PROTECTED
//! again, every peer's counters, uptime, routes and log unchanged), and the
//! capture shows no connection sent from two containers at once.

use holdfast_lab::{skip_unless_ready, skip_unless_tools, PeerKind};

#[test]
fn twenty_random_failures_are_handled_unseen_by_the_peers() {
    if skip_unless_ready(&[PeerKind::Frr, PeerKind::Bird, PeerKind::Gobgp])
        || skip_unless_tools(&["etcd", "etcdctl", "iptables", "tcpdump"])
    {
        return;
    }
    let (summary, its) = holdfast_labctl::chaos::run(20, 11, &[], None, |it| println!("{it}"))
        .unwrap_or_else(|e| panic!("{e}"));
    println!("{summary}");
    assert_eq!(summary.failed, 0, "{its:#?}");
    assert_eq!(summary.iterations, 20);
    assert!(summary.two_senders.is_empty(), "{:?}", summary.two_senders);
}
