//! `[nsr] manage_address = true`: the backup adds and announces the
//! service address itself (over rtnetlink, on the interface that routes to
//! it), against FRR.
//!
//! ```text
//!                 bridge `lan` 198.18.0.0/24
//!   [ p ] .20     frr bgpd AS 65001 --- session under test --- service .10 (unit edge-1, AS 65000)
//!   [ redis ] .2  redis-server (the state store)
//!   [ a ] .3      host agent; edge-1's primary (hf0) in its container, SIGKILLed
//!   [ b ] .4      host agent; the controller's takeover (hf1, `--takeover`): adds
//!                 198.18.0.10/32 in its container and announces it
//!   [ feed ] .5   raw test peers: AS 65100 -> frr, AS 65200 -> edge-1 (outbound routes)
//!   c1..c3        etcd + holdfast-controller (support/nsr_plane.rs)
//! ```
//!
//! Checks (topology and helpers of `support/nsr_plane.rs`):
//! * after SIGKILL of the primary, `holdfastd --takeover` on b adds the
//!   service address there itself, before b's agent would (its /24): `ip
//!   address` in b's container shows it as a /32, and holdfastd logged it
//!   added and announced;
//! * frr's own CLI (sampled every 200 ms for the whole run) shows the
//!   session never left Established, no NOTIFICATION, nothing withdrawn;
//!   new UPDATEs flow both ways after the takeover; the capture holds no FIN
//!   or RST from the service address.
//!
//! Negative control (run by hand, `HOLDFAST_TEST_NO_MANAGE_ADDRESS=1`):
//! without `manage_address` only b's agent adds the address (its /24), and
//! the /32 check fails.

use crate::{nsr_common, nsr_plane};

use holdfast_lab::{Frr, PeerKind};

#[test]
fn the_backup_adds_the_service_address_itself() {
    let manage = std::env::var_os("HOLDFAST_TEST_NO_MANAGE_ADDRESS").is_none();
    let Some(mut r) = nsr_plane::Run::<Frr>::start_with(
        "nsr_manage_address",
        PeerKind::Frr,
        nsr_common::Options::default(),
        if manage {
            "[nsr]\nmanage_address = true\n"
        } else {
            ""
        },
    ) else {
        return;
    };
    let watch = r.watch();
    let since = std::time::SystemTime::now();
    r.outbound_routes("before the takeover", 1000);
    drop(r.kill_and_wait("SIGKILL, the backup adds the address"));
    let svc = r.service_ip();
    let b = r.hf().host;
    let shown = r
        .plane
        .lab
        .exec_ok(b, &["ip", "-o", "address", "show"])
        .expect("ip address on b");
    assert!(
        shown.contains(&format!(" {svc}/32 ")),
        "the service address is not on b as the unit's /32: {shown}"
    );
    assert!(
        r.hf()
            .log_text()
            .contains("takeover: service address added and announced"),
        "holdfastd did not log adding the address"
    );
    r.check("after the takeover");
    r.finish(watch, since);
}
