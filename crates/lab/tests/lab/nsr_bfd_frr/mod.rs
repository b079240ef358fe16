//! Non-stop BFD: frr runs BFD at 500 ms x 3 (detection time 1.5 s, longer
//! than a takeover through the control plane: the kill to the backup's BFD
//! resumed took 0.5–0.9 s on the loaded 2-core test machine, past the 900 ms
//! of 300 ms x 3; the relay scenarios cover faster BFD) under the session
//! NSR protects, and the unit is SIGKILLed and taken over twice by the
//! controller (a→b→a). It runs alone (`scripts/run-tests.py`'s EXCLUSIVE): beside
//! other scenarios a takeover once took 2.0 s from the kill to BFD resumed, past
//! the 1.5 s. The topology is `nsr_plane`'s (drawn there): frr on
//! the bridge, the unit's containers on hosts a and b sharing the service
//! address, Redis, the feed peers, etcd and the controllers.
//!
//! Checked:
//! * before: BFD Up on both sides, frr's remote-id = holdfastd's local
//!   discriminator;
//! * after each takeover, `nsr_plane`'s checks (no NOTIFICATION, Adj-RIB-In
//!   equal to what frr sent, new UPDATEs both ways);
//! * frr's BFD session never leaves "up": `show bfd peers json` sampled every
//!   100 ms by a watcher thread for the whole run, its uptime never going
//!   back, its `session-down` counter unchanged at the end;
//! * the new primary's `holdfast show bfd` shows the same discriminators,
//!   state Up, and frr still shows the old remote-id (no new session);
//! * BGP never left Established (the peer watch), as in the other NSR tests.

use crate::{nsr_common, nsr_plane};

use holdfast_api::{BfdSessionInfo, Body, Request};
use holdfast_lab::{hold_for, wait_until, Frr, PeerKind};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

fn show_bfd(hf: &nsr_plane::Unit) -> Vec<BfdSessionInfo> {
    match hf.request(&Request::ShowBfd) {
        Ok(Body::Bfd(v)) => v,
        other => panic!("show bfd: {other:?}"),
    }
}

/// frr's one BFD peer (the service address).
fn frr_peer(v: &serde_json::Value) -> Option<serde_json::Value> {
    v.as_array()?.first().cloned()
}

#[test]
fn frr_bfd_never_notices_takeovers() {
    let Some(mut r) = nsr_plane::Run::<Frr>::start(
        "nsr_bfd_frr",
        PeerKind::Frr,
        nsr_common::Options {
            bfd: Some(500),
            ..nsr_common::Options::default()
        },
    ) else {
        return;
    };
    let ours = wait_until(
        "holdfastd: BFD Up",
        Duration::from_secs(30),
        || Ok(show_bfd(r.hf())),
        |l| l.len() == 1 && l[0].state == "Up",
    )
    .expect("BFD up on holdfastd")
    .remove(0);
    let before = wait_until(
        "frr: BFD up",
        Duration::from_secs(30),
        || r.peer().bfd_peers(&r.plane.lab),
        |v| frr_peer(v).is_some_and(|p| p["status"] == "up"),
    )
    .map(|v| frr_peer(&v).expect("peer"))
    .expect("frr BFD up");
    println!("frr before: {before}");
    assert_eq!(
        before["remote-id"].as_u64(),
        Some(u64::from(ours.local_discriminator))
    );
    let counters = |r: &nsr_plane::Run<Frr>| {
        r.peer()
            .bfd_peer_counters(&r.plane.lab)
            .ok()
            .and_then(|v| frr_peer(&v))
            .and_then(|p| p["session-down"].as_u64())
            .unwrap_or_else(|| {
                panic!(
                    "frr counters: {:?}",
                    r.peer().bfd_peer_counters(&r.plane.lab)
                )
            })
    };
    let downs_before = counters(&r);

    // The BFD watcher: frr's own view every 100 ms.
    let probe = r.peer().bfd_probe();
    let stop = Arc::new(AtomicBool::new(false));
    let stop2 = stop.clone();
    let watcher = std::thread::spawn(move || {
        let mut samples = 0u64;
        let mut bad = Vec::new();
        let mut last_uptime = 0u64;
        while !stop2.load(Ordering::Relaxed) {
            match probe() {
                Ok(v) => {
                    samples += 1;
                    match frr_peer(&v) {
                        Some(p) if p["status"] == "up" => {
                            let up = p["uptime"].as_u64().unwrap_or(0);
                            if up < last_uptime {
                                bad.push(format!("uptime went back: {p}"));
                            }
                            last_uptime = up;
                        }
                        other => bad.push(format!("not up: {other:?}")),
                    }
                }
                Err(e) => bad.push(format!("vtysh: {e}")),
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        (samples, bad)
    });
    let watch = r.watch();
    r.check("before any failure");
    r.idle_kill();
    let after_one = show_bfd(r.hf());
    println!("holdfast show bfd after the first takeover: {after_one:#?}");
    r.idle_kill();
    // frr would declare the session down within its 900 ms detection time:
    // keep watching for well beyond it after the last takeover.
    hold_for(Duration::from_secs(3), || {
        let l = show_bfd(r.hf());
        assert!(l.len() == 1 && l[0].state == "Up", "{l:?}");
    });
    stop.store(true, Ordering::Relaxed);
    let (samples, bad) = watcher.join().expect("watcher");
    println!("BFD watcher: {samples} samples of frr's show bfd peers json");
    assert!(samples >= 15, "too few samples: {samples}");
    assert!(bad.is_empty(), "frr's BFD session left Up: {bad:#?}");
    assert_eq!(counters(&r), downs_before, "frr counted a BFD session down");
    let now = show_bfd(r.hf());
    println!("holdfast show bfd after the second takeover: {now:#?}");
    assert_eq!(now.len(), 1);
    assert_eq!(now[0].state, "Up");
    assert_eq!(
        (now[0].local_discriminator, now[0].remote_discriminator),
        (ours.local_discriminator, ours.remote_discriminator),
        "the backup resumed the same session"
    );
    let after = frr_peer(&r.peer().bfd_peers(&r.plane.lab).expect("frr")).expect("peer");
    println!("frr after: {after}");
    assert_eq!(after["remote-id"], before["remote-id"]);
    assert_eq!(after["id"], before["id"]);
    let report = watch.stop();
    println!("peer watch: {}", report.summary());
    report
        .assert_uninterrupted()
        .unwrap_or_else(|e| panic!("the peer saw an interruption: {e}"));
}
