//! Two real builds hand the sessions to each other (issue 28 item 4): the
//! previous release's holdfastd (`scripts/prev-build.sh`: the last tag
//! before HEAD, exported with `git archive` and built in a target
//! directory of its own; `make test` builds it) and the tree's. One lab per
//! kind of peer: frr and bird2 with BFD at 100 ms x 3 under the session and
//! the relay covering it, gobgpd without (it has no BFD).
//!
//! ```text
//!                 bridge `lan` 198.18.0.0/24
//!   [ p ] .20     frr / bird2 / gobgpd, AS 65001 --- session (+ BFD 100 ms x 3) --- service .10 (unit edge-1)
//!   [ redis ] .2  redis-server (the state store)
//!   [ a ] .3, [ b ] .4  host agents; edge-1 on one, a standby of the next build on the other
//!   [ feed ] .5   raw test peers: AS 65100 -> the peer (inbound burst), AS 65200 -> edge-1
//!   [ relay ] .6  holdfast-bfd-relay (frr, bird2)
//!   c1..c3        etcd + holdfast-controller (the plane of `support/nsr_plane.rs`)
//!   builds/old/holdfastd  the previous release    builds/new/holdfastd  the tree's
//! ```
//!
//! In order, each with `holdfast ctl upgrade edge-1 --binary ... --wait`:
//! 1. the unit (started on the tree's build) onto the old build, idle;
//! 2. old -> new during a 100k-route inbound burst (feed -> peer -> unit);
//! 3. new -> old during another 100k-route inbound burst.
//!
//! Checked after each (`nsr_plane`'s checks, as the other NSR tests): the
//! new primary runs the build asked for (`/proc/PID/exe`) and the placement
//! names it; the peer's session never left Established (its CLI sampled
//! every 200 ms for the whole run, uptime never going back); it logged no
//! NOTIFICATION; the routes it holds from us never went down (no
//! withdrawal, nothing re-learned); every route of the bursts is in the
//! new primary's Adj-RIB-In, nothing else; new UPDATEs flow both ways; the
//! capture holds no FIN or RST from the service address. With BFD: the
//! peer's BFD session is Up at the end and never left Up by its own record
//! (frr: `session-down` unchanged, uptime grown by the run's length; bird2:
//! "Since" unchanged). The two builds' `--version` differ.
//!
//! `scripts/upgrade-soak.sh N` runs the scenario N times (the bar: 10 of
//! 10). Its negative controls are `upgrade_frr`'s (an upgrade that cannot
//! happen, a schema refused) and the BFD relay tests' (the same peers'
//! BFD goes Down without the relay).

use crate::nsr_common::Options;
use crate::peer_bfd::{assert_bfd_stayed_up, bfd_up};
use crate::upgrade_common::{prev_release, upgrade};
use crate::{nsr_plane, upgrade_common};

use holdfast_lab::{Bird, Frr, Gobgp, Peer, PeerKind};
use std::path::Path;

fn old_new_old<P: Peer>(name: &str, kind: PeerKind, bfd: bool) {
    let Some(prev) = prev_release() else {
        return;
    };
    let o = Options {
        bfd: bfd.then_some(100),
        ..Options::default()
    };
    let Some(mut r) = nsr_plane::Run::<P>::start(name, kind, o) else {
        return;
    };
    if bfd {
        r.start_relay(1);
    }
    let lab = &r.plane.lab;
    let old = lab.place_build(&prev, "old").expect("builds/old");
    let new = lab
        .place_build(Path::new(&r.plane.bins.holdfastd), "new")
        .expect("builds/new");
    let (v_old, v_new) = (upgrade_common::version(&old), upgrade_common::version(&new));
    println!("old build: {v_old}\nnew build: {v_new}");
    assert_ne!(v_old, v_new, "the two builds must be two releases");
    let svc = r.service_ip();
    let bfd0 = bfd.then(|| bfd_up(&r, "before the upgrades", svc));
    let watch = r.watch();
    let since = std::time::SystemTime::now();
    r.check("before the upgrades");
    let mut took = Vec::new();
    took.push(("new -> old, idle", upgrade(&mut r, &old, false)));
    r.check("on the old build");
    let what = "old -> new during a 100k inbound burst";
    r.during_inbound_burst(what, |r| took.push((what, upgrade(r, &new, false))));
    r.check(what);
    let what = "new -> old during a 100k inbound burst";
    r.during_inbound_burst(what, |r| took.push((what, upgrade(r, &old, false))));
    r.check(what);
    if let Some(b) = &bfd0 {
        assert_bfd_stayed_up(&r, "after old -> new -> old", svc, b);
    }
    r.finish(watch, since);
    for (what, t) in &took {
        println!("upgrade figures: {what}: holdfast ctl upgrade --wait took {t:?}");
    }
}

#[test]
fn frr_with_bfd_sees_nothing_of_old_new_old() {
    old_new_old::<Frr>("upgrade_releases_frr", PeerKind::Frr, true);
}

#[test]
fn bird_with_bfd_sees_nothing_of_old_new_old() {
    old_new_old::<Bird>("upgrade_releases_bird", PeerKind::Bird, true);
}

#[test]
fn gobgp_sees_nothing_of_old_new_old() {
    old_new_old::<Gobgp>("upgrade_releases_gobgp", PeerKind::Gobgp, false);
}
