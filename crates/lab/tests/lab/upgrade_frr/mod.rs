//! `holdfast ctl upgrade`: the unit moves to another holdfastd binary and
//! back, against FRR, and FRR sees nothing.
//!
//! ```text
//!                 bridge `lan` 198.18.0.0/24
//!   [ p ] .20     frr bgpd AS 65001 --- session under test --- service .10 (unit edge-1, AS 65000)
//!   [ redis ] .2  redis-server (the state store)
//!   [ a ] .3      host agent: edge-1's primary, then a standby of the next binary
//!   [ b ] .4      host agent: a standby of the next binary, then edge-1's primary
//!   [ feed ] .5   raw test peers: AS 65100 -> frr, AS 65200 -> edge-1 (outbound routes)
//!   c1..c3        etcd + holdfast-controller (the plane of `support/nsr_plane.rs`)
//! ```
//!
//! The two binaries are copies of the tree's holdfastd at two paths in the
//! lab's work directory (`builds/one/holdfastd`, `builds/two/holdfastd`):
//! each process's `/proc/PID/exe` says which one it runs.
//!
//! Checks:
//! * `holdfast ctl upgrade edge-1 --binary builds/one/holdfastd --wait`:
//!   the unit moves to its backup host, its new primary runs that binary
//!   (and is the standby the agent started for the upgrade, now promoted),
//!   the old process exits, and `holdfast ctl units` names the binary;
//! * the same back to `builds/two/holdfastd` during a 100k-route inbound
//!   burst from frr (the rollback path: the old primary's host gets a
//!   standby of the binary asked for, which follows the burst; every route
//!   of the burst arrives);
//! * `holdfast ctl upgrade --host HOST --binary builds/one/holdfastd`: the
//!   host's unit moves the same way, and the command reports it;
//! * each time frr's own CLI (sampled every 200 ms for the whole run) shows
//!   the session never left Established, frr logged no NOTIFICATION, the
//!   routes it holds from us never went down, Adj-RIB-In and Adj-RIB-Out
//!   agree both ways, new UPDATEs flow both ways, and the capture holds no
//!   FIN or RST from the service address;
//! * negative control: an upgrade to a binary that does not exist never
//!   gets past its standby step (`holdfast ctl upgrade --wait` fails, the
//!   unit stays where and what it is), and `holdfast ctl upgrade --abort`
//!   drops it;
//! * a build whose NSR records the running one cannot read (a stand-in
//!   answering `holdfastd --schemas` with schema 2) is refused before
//!   anything moves, and the error names both builds and their schemas.

use crate::upgrade_common::{exe, upgrade};
use crate::{nsr_common, nsr_plane};

use holdfast_lab::{Frr, PeerKind};
use std::path::PathBuf;

const UNIT: &str = nsr_plane::UNIT;

#[test]
fn frr_never_notices_an_upgrade_and_its_rollback() {
    let Some(mut r) =
        nsr_plane::Run::<Frr>::start("upgrade_frr", PeerKind::Frr, nsr_common::Options::default())
    else {
        return;
    };
    let tree = PathBuf::from(&r.plane.bins.holdfastd);
    let builds = r.plane.lab.work_dir().join("builds");
    let one = r.plane.lab.place_build(&tree, "one").expect("builds/one");
    let two = r.plane.lab.place_build(&tree, "two").expect("builds/two");
    let watch = r.watch();
    let since = std::time::SystemTime::now();
    r.check("before the upgrade");
    upgrade(&mut r, &one, false);
    r.check("after the upgrade");
    r.during_inbound_burst("upgrade back during a 100k inbound burst", |r| {
        upgrade(r, &two, false);
    });
    r.check("after the upgrade back during a 100k inbound burst");
    upgrade(&mut r, &one, true);
    r.check("after the host's upgrade");
    r.finish(watch, since);

    // Negative control: a binary that is not there. The standby step
    // cannot be done, the unit stays, and the abort drops the upgrade.
    let host = r.hf().host_name.clone();
    let pid = r.hf().pid;
    let missing = builds.join("missing/holdfastd").display().to_string();
    let err = r
        .plane
        .ctl(&["upgrade", UNIT, "--binary", &missing, "--wait", "5"])
        .expect_err("an upgrade to a missing binary must not finish");
    println!("negative control, upgrade to {missing}: {err}");
    let status = r.plane.ctl(&["status"]).expect("holdfast ctl status");
    assert!(
        status.to_string().contains(&missing),
        "the upgrade should be in flight, stuck at its standby step: {status}"
    );
    let done = r
        .plane
        .ctl(&["upgrade", UNIT, "--abort", "--wait", "30"])
        .unwrap_or_else(|e| panic!("holdfast ctl upgrade --abort: {e}"));
    assert!(done["done"] == true, "holdfast ctl upgrade --abort: {done}");
    let status = r.plane.ctl(&["status"]).expect("holdfast ctl status");
    assert!(
        !status.to_string().contains(&missing),
        "the aborted upgrade is still in flight: {status}"
    );
    let (primary, _) = r.plane.placement(UNIT).expect("placement");
    assert_eq!(primary, host, "the aborted upgrade moved the unit");
    assert_eq!(
        exe(pid),
        one.canonicalize().expect("binary"),
        "the aborted upgrade changed the running binary"
    );
    r.check("after the aborted upgrade");

    // A build whose records the running one cannot read (a stand-in that
    // answers `--schemas` with schema 2): refused before anything moves,
    // with both builds' schemas named.
    let newer = builds.join("newer");
    std::fs::create_dir_all(&newer).expect("build directory");
    let fake = newer.join("holdfastd");
    std::fs::write(
        &fake,
        "#!/bin/sh\necho '{\"version\":\"9.9.9 (test)\",\"nsr\":{\"writes\":2,\"reads\":[1,2]}}'\n",
    )
    .expect("write the stand-in");
    std::fs::set_permissions(&fake, std::os::unix::fs::PermissionsExt::from_mode(0o755))
        .expect("chmod");
    let fake = fake.display().to_string();
    let err = r
        .plane
        .ctl(&["upgrade", UNIT, "--binary", &fake, "--wait", "30"])
        .expect_err("an upgrade the running build could not roll back from must be refused")
        .to_string();
    println!("schema refusal: {err}");
    assert!(
        err.contains("refused before anything moved")
            && err.contains("writes schema 2")
            && err.contains("9.9.9 (test)"),
        "the refusal must name the builds and their schemas: {err}"
    );
    let (primary, _) = r.plane.placement(UNIT).expect("placement");
    assert_eq!(primary, host, "the refused upgrade moved the unit");
    assert_eq!(
        exe(pid),
        one.canonicalize().expect("binary"),
        "the refused upgrade changed the running binary"
    );
    r.check("after the refused upgrade");
}
