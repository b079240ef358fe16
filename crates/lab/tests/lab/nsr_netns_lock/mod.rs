//! One holdfastd with `[nsr]` per network namespace: a second one refuses
//! to start and names the first; a takeover in place after a crash, and a
//! preheated standby alone in its namespace, still work.
//!
//! ```text
//!                 bridge `lan` 198.18.0.0/24
//!   [ p ] .20     frr bgpd AS 65001 --- session under test --- service .10 (unit edge-1, AS 65000)
//!   [ redis ] .2  redis-server (the state store)
//!   [ a ] .3      host agent; in edge-1's container: hf0, the primary (NFQUEUE 1707);
//!                 beside it (started by the test), refused: hf-edge-2 (instance
//!                 edge-2, NFQUEUE 1708) and hf-beside (--takeover of edge-1 itself);
//!                 then hf0 is SIGKILLed and the controller restarts edge-1 in place
//!                 (`app_failure = "restart_in_place"` in its placement): hf1
//!                 (--takeover) in the same container
//!   [ b ] .4      host agent: hf2, the standby (`"preheated": true`), alone in its
//!                 container; hf1 is SIGKILLed and the controller has hf2 take over
//!   [ feed ] .5   raw test peers; c1..c3 etcd + controllers (support/nsr_plane.rs)
//! ```
//!
//! Checks:
//! * a second primary of another instance in hf0's namespace exits before
//!   its control socket answers, with an error naming hf0's pid, its
//!   instance "edge-1", its NFQUEUE and its rules (`holdfast:hf-edge-1`);
//! * a second `--takeover` of edge-1 itself in hf0's namespace is refused
//!   the same way, *before* it installs its guard or claims the instance:
//!   the store's epoch is unchanged, hf0 stays PROTECTED and unfenced, and
//!   the namespace's Holdfast rules are exactly hf0's, before and after;
//! * SIGKILL of hf0 and `--takeover` in the same namespace (the dead
//!   process's rules still in place): it starts, resumes the sessions, and
//!   the rules are again exactly one set for edge-1;
//! * a standby alone on `b` follows and takes over from hf1;
//! * frr's own CLI (sampled every 200 ms for the whole run) shows the
//!   session never left Established, no NOTIFICATION, nothing withdrawn;
//!   the capture holds no FIN or RST from the service address.
//!
//! Negative control (run by hand, docs/notes/issue12-nsr-gaps.md): with the lock taken
//! under a per-process name (so it never conflicts), the second primary
//! starts beside hf0 and the first check fails.

use crate::{nsr_common, nsr_plane};

use holdfast_lab::{Frr, PeerKind};

#[test]
fn one_nsr_speaker_per_namespace() {
    let Some(mut r) = nsr_plane::Run::<Frr>::start(
        "nsr_netns_lock",
        PeerKind::Frr,
        nsr_common::Options::default(),
    ) else {
        return;
    };
    let watch = r.watch();
    let since = std::time::SystemTime::now();
    let hf0_pid = r.hf().pid;
    let rules = r.holdfast_rules();
    assert!(
        !rules.is_empty() && rules.iter().all(|l| l.contains("holdfast:hf-edge-1")),
        "hf0's rules: {rules:?}"
    );
    let epoch = r.store_epoch();

    // Another instance beside hf0.
    let err = match r.start_beside(
        "hf-edge-2",
        |c| {
            c.replace(
                "instance = \"edge-1\"",
                "instance = \"edge-2\"\nqueue = 1708",
            )
        },
        false,
    ) {
        Ok(d) => panic!(
            "a second NSR speaker started beside hf0 (pid {}); rules now: {:?}",
            d.os_pid,
            r.holdfast_rules()
        ),
        Err(e) => e.to_string(),
    };
    println!("edge-2 beside hf0: {err}");
    for want in [
        "another holdfastd runs non-stop routing in this network namespace".to_string(),
        format!("pid {hf0_pid}"),
        "instance \"edge-1\"".to_string(),
        "NFQUEUE 1707".to_string(),
        "holdfast:hf-edge-1 (NFQUEUE 1707)".to_string(),
    ] {
        assert!(err.contains(&want), "the refusal lacks {want:?}: {err}");
    }
    assert_eq!(
        r.holdfast_rules(),
        rules,
        "the refused speaker changed the rules"
    );

    // A takeover of edge-1 itself beside the live hf0.
    let err = match r.start_beside("hf-beside", |c| c.to_string(), true) {
        Ok(d) => panic!("a takeover started beside the live hf0 (pid {})", d.os_pid),
        Err(e) => e.to_string(),
    };
    println!("takeover beside hf0: {err}");
    assert!(
        err.contains("another holdfastd runs non-stop routing")
            && err.contains(&format!("pid {hf0_pid}")),
        "{err}"
    );
    assert_eq!(
        r.holdfast_rules(),
        rules,
        "the refused takeover left rules (its guard?)"
    );
    assert_eq!(
        r.store_epoch(),
        epoch,
        "the refused takeover claimed the instance"
    );
    let n = r.nsr_status();
    assert!(
        n["protected"] == true && n["role"] == "primary",
        "hf0 after the refusals: {n}"
    );
    r.check("after two refused starts beside hf0");

    // hf0 dies; its rules stay (they drop its FIN); a takeover in place.
    drop(r.take_over_in_place("SIGKILL, takeover in the same namespace"));
    r.check("takeover in place");
    let after = r.holdfast_rules();
    assert_eq!(
        after.len(),
        rules.len(),
        "rules after the takeover in place: {after:?}"
    );
    assert!(
        after.iter().all(|l| l.contains("holdfast:hf-edge-1")),
        "{after:?}"
    );

    // A standby alone in its namespace still works.
    let sb = r.start_standby();
    let (_old, t) = r.standby_takeover("SIGKILL, standby takeover", sb);
    assert_eq!(t["preheated"].as_u64(), Some(2), "{t}");
    r.check("standby takeover");

    r.finish(watch, since);
}
