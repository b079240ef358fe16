//! Maximum-prefix limit (RFC 4271 §6.7 / RFC 4486 Cease subcode 1).
//!
//! ```text
//!   tester AS65001                                   holdfastd AS65000
//!   [ t1 ] 198.18.1.2 ------------- veth ------------- 198.18.1.1 [ hf ]
//!                                       neighbor 198.18.1.2: max_prefix = 100, passive
//! ```
//!
//! Checks:
//! * 100 prefixes are accepted (the limit itself is allowed), session up;
//! * the 101st → the tester receives NOTIFICATION 6/1 whose data is
//!   AFI 1, SAFI 1, limit 100 (RFC 4486 §4), and the connection is closed.

use crate::robust_common;

use holdfast_lab::{skip_unless_ready, wait_until};
use robust_common::*;
use std::net::Ipv4Addr;
use std::time::Duration;

const T: Duration = Duration::from_secs(20);

#[test]
fn max_prefix_cease() {
    if skip_unless_ready(&[]) {
        return;
    }
    let mut s = setup("max_prefix", 1);
    let side = s.sides[0].clone();
    let cfg = format!(
        "{}{}",
        global_block(""),
        neighbor_block(&side, 65001, "max_prefix = 100")
    );
    let d = start_holdfastd(&mut s, &cfg);
    let t = connect(&side, &tester_cfg(65001, 1), T);
    let all = prefixes(Ipv4Addr::new(10, 0, 0, 0), 101);
    t.announce(&attrs(65001, side.ip), &all[..100]).unwrap();
    wait_until(
        "holdfastd has received 100 prefixes",
        T,
        || Ok(d.neighbor(side.ip)?.map(|n| (n.state, n.prefixes_received))),
        |n| n.as_ref().is_some_and(|(_, c)| *c == 100),
    )
    .unwrap();
    t.view(|v| {
        assert!(
            v.notifications.is_empty() && !v.closed,
            "reset at the limit: {:?}",
            v.notifications
        )
    });
    t.announce(&attrs(65001, side.ip), &all[100..]).unwrap();
    t.wait("NOTIFICATION and close after prefix 101", T, |v| {
        !v.notifications.is_empty() && v.closed
    })
    .unwrap();
    let n = t.view(|v| v.notifications[0].clone());
    assert_eq!(
        (n.code, n.subcode),
        (6, 1),
        "expected Cease/Maximum Number of Prefixes Reached, got {n:?}"
    );
    assert_eq!(
        n.data,
        vec![0, 1, 1, 0, 0, 0, 100],
        "data must be AFI 1, SAFI 1, limit 100"
    );
    let mut lab = s.lab;
    d.stop(&mut lab);
    lab.teardown();
}
