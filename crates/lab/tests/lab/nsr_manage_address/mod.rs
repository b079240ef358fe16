//! `[nsr] manage_address = true`: the backup adds and announces the
//! service address itself (over rtnetlink, on the interface that routes to
//! it), against FRR.
//!
//! ```text
//!                 bridge `lan` 198.18.0.0/24
//!   [ peer ] .1   frr bgpd AS 65001 --- session under test --- service .10 (holdfastd AS 65000)
//!   [ redis ] .2  redis-server (the state store)
//!   [ a ] .3      holdfastd primary (hf0), SIGKILLed; the orchestrator removes .10 from a
//!   [ b ] .4      holdfastd --takeover (hf1): adds 198.18.0.10/32 and announces it
//!   [ feed ] .5   raw test peers: AS 65100 -> frr, AS 65200 -> holdfastd (outbound routes)
//! ```
//!
//! Checks (topology and helpers of `support/nsr.rs`):
//! * after SIGKILL of the primary, `holdfastd --takeover` on b adds the
//!   service address there itself (the orchestrator only removes it from a
//!   and waits): `ip address` on b shows it as a /32, and holdfastd logged
//!   it added and announced;
//! * frr's own CLI (sampled every 200 ms for the whole run) shows the
//!   session never left Established, no NOTIFICATION, nothing withdrawn;
//!   new UPDATEs flow both ways after the takeover; the capture holds no FIN
//!   or RST from the service address.
//!
//! Negative control (run by hand, docs/notes/issue12-nsr-performance.md):
//! without `manage_address` in the configuration nobody adds the address
//! and the takeover fails waiting for it.

use crate::nsr_common;

use holdfast_lab::{Fence, Frr, PeerKind};

#[test]
fn the_backup_adds_the_service_address_itself() {
    let manage = std::env::var_os("HOLDFAST_TEST_NO_MANAGE_ADDRESS").is_none();
    let Some(mut r) = nsr_common::Run::<Frr>::start_with(
        "nsr_manage_address",
        PeerKind::Frr,
        nsr_common::Options::default(),
        |_| {
            if manage {
                "[nsr]\nmanage_address = true\n".into()
            } else {
                String::new()
            }
        },
    ) else {
        return;
    };
    r.units_add_the_address();
    let watch = r.watch();
    let since = std::time::SystemTime::now();
    r.outbound_routes("before the takeover", 1000);
    let old = r.takeover("SIGKILL, the backup adds the address", Fence::Kill);
    drop(old);
    let svc = r.service_ip();
    let b = r.hf().host;
    let shown = r
        .lab
        .exec_ok(b, &["ip", "-o", "address", "show"])
        .expect("ip address on b");
    assert!(
        shown.contains(&format!(" {svc}/32 ")),
        "the service address is not on b as the unit's /32: {shown}"
    );
    assert!(
        r.hf()
            .log_text(&r.lab)
            .contains("takeover: service address added and announced"),
        "holdfastd did not log adding the address"
    );
    r.check("after the takeover");
    r.finish(watch, since);
}
