//! The BFD relay (issue 10 item 4, TENSOR §3.3.2): frr runs BFD at
//! 100 ms x 3 (detection time 300 ms, about a takeover's length) under the
//! session NSR protects; `holdfast-bfd-relay` runs on a relay host on the
//! same bridge, reading the lab's Redis.
//!
//! ```text
//!                 bridge `lan` 198.18.0.0/24
//!   [ p ] .20     frr (bgpd + bfdd, BFD 100 ms x 3) --- service .10 (unit edge-1)
//!   [ redis ] .2  redis-server (the state store)
//!   [ a ] .3, [ b ] .4  host agents; edge-1 in its container on a, then b, ...
//!   [ feed ] .5   raw test peers
//!   [ relay ] .6  holdfast-bfd-relay --store redis://198.18.0.2:6379 --instance edge-1
//!                 (sends the unit's Up packets from .10:<its source port>)
//!   c1..c3        etcd + holdfast-controller (the control plane of `nsr_plane`)
//! ```
//!
//! One lab, in order:
//! 1. **Takeover with the relay**: SIGKILL of the primary, the
//!    controller's takeover. frr's BFD session never leaves "up" (`show
//!    bfd peers json` sampled every ≤50 ms by a watcher thread, same `id`
//!    and `remote-id`, uptime never going back), its `session-down` counter
//!    is unchanged, `nsr_plane`'s checks pass (no NOTIFICATION, routes,
//!    new UPDATEs both ways), and BGP never left Established (peer watch).
//!    1b. The same with a slow control plane: SIGKILL with every controller
//!    replica SIGSTOPped for 500 ms, so the takeover starts after it (the unit is silent for 500 ms plus the takeover,
//!    more than twice frr's detection time): the same checks.
//! 2. **The relay killed in normal operation**: nothing changes at frr for
//!    ten detection times (BFD up, same ids, counters unchanged, BGP
//!    Established).
//! 3. **Negative control**: the slow takeover of 1b with the relay stopped:
//!    frr's BFD goes down (its `session-down` counter grows) and frr drops
//!    the BGP session (the peer watch sees it). This shows 1b can fail. (A
//!    plain takeover, ~150–180 ms here, is shorter than frr's 300 ms
//!    detection time, so it does not make a negative control.)
//! 4. **Relay and primary killed together** (after BFD and BGP are back and
//!    a new relay covers the session): nobody takes over (the controllers
//!    are SIGSTOPped); frr's BFD goes
//!    down within its detection time (asserted: within 300 ms plus the
//!    sampling period and vtysh's latency).
//!
//! A second test, `relay_lets_go_of_a_unit_nobody_takes_over` (its own
//! lab): the relay runs with `--cover-ms 5000`, the primary is SIGKILLed
//! and nobody takes over (the controllers are SIGSTOPped). The relay keeps frr's BFD up until the instance
//! has been silent in the store for 5 s, then stops: frr's BFD goes down
//! between 1.5 s and 6.5 s after the kill (the last keepalive written
//! 0–3 s before it, plus 5 s, plus 300 ms), not within its detection time.

use crate::{nsr_common, nsr_plane};

use holdfast_lab::{hold_for, wait_until, Frr, Peer, PeerKind, PeerWatch, SessionState};
use serde_json::Value;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const INTERVAL_MS: u32 = 100;
const DETECT: Duration = Duration::from_millis(300);
/// The largest gap between two of the watcher's samples that still sees
/// a Down (which lasts at least a second, RFC 5880 §6.8.3).
const MAX_GAP: Duration = Duration::from_millis(1000);
/// How long the controllers are stopped in 1b and 3 (a slow control
/// plane: the takeover starts only after it).
const SLOW_PLANE: Duration = Duration::from_millis(500);

/// frr's one BFD peer (the service address).
fn frr_peer(v: &Value) -> Option<Value> {
    v.as_array()?.first().cloned()
}

/// One sample of frr's `show bfd peers json`.
#[derive(Debug, Clone)]
struct Sample {
    at: Instant,
    status: String,
    id: u64,
    remote_id: u64,
    uptime: u64,
}

/// Samples frr's BFD peer every 40 ms (plus vtysh's own time) in a thread.
struct BfdWatcher {
    stop: Arc<AtomicBool>,
    samples: Arc<Mutex<Vec<Sample>>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl BfdWatcher {
    fn start(probe: Box<dyn Fn() -> holdfast_lab::Result<Value> + Send>) -> BfdWatcher {
        let stop = Arc::new(AtomicBool::new(false));
        let samples = Arc::new(Mutex::new(Vec::new()));
        let (s2, v2) = (stop.clone(), samples.clone());
        let thread = std::thread::spawn(move || {
            // Bounded: at most 20 minutes of samples.
            let end = Instant::now() + Duration::from_secs(1200);
            while !s2.load(Ordering::Relaxed) && Instant::now() < end {
                let at = Instant::now();
                let s = match probe().map(|v| frr_peer(&v)) {
                    Ok(Some(p)) => Sample {
                        at,
                        status: p["status"].as_str().unwrap_or("?").to_string(),
                        id: p["id"].as_u64().unwrap_or(0),
                        remote_id: p["remote-id"].as_u64().unwrap_or(0),
                        uptime: p["uptime"].as_u64().unwrap_or(0),
                    },
                    Ok(None) => Sample {
                        at,
                        status: "missing".into(),
                        id: 0,
                        remote_id: 0,
                        uptime: 0,
                    },
                    Err(e) => Sample {
                        at,
                        status: format!("vtysh: {e}"),
                        id: 0,
                        remote_id: 0,
                        uptime: 0,
                    },
                };
                v2.lock().expect("samples").push(s);
                std::thread::sleep(Duration::from_millis(40));
            }
        });
        BfdWatcher {
            stop,
            samples,
            thread: Some(thread),
        }
    }

    fn since(&self, t: Instant) -> Vec<Sample> {
        self.samples
            .lock()
            .expect("samples")
            .iter()
            .filter(|s| s.at >= t)
            .cloned()
            .collect()
    }

    /// Every sample from `t` on is "up" with the same ids as `first`, the
    /// uptime never going back; returns (samples, largest gap between two).
    fn assert_up_since(
        &self,
        what: &str,
        t: Instant,
        id: u64,
        remote_id: u64,
    ) -> (usize, Duration) {
        let v = self.since(t);
        let mut bad = Vec::new();
        let mut last_up = 0;
        let mut gap = Duration::ZERO;
        for w in v.windows(2) {
            gap = gap.max(w[1].at - w[0].at);
        }
        for s in &v {
            if s.status != "up" || s.id != id || s.remote_id != remote_id || s.uptime < last_up {
                bad.push(format!("+{:?}: {s:?}", s.at - t));
            }
            last_up = s.uptime;
        }
        assert!(
            bad.is_empty(),
            "{what}: frr's BFD session left Up or changed: {bad:#?}"
        );
        (v.len(), gap)
    }
}

impl Drop for BfdWatcher {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn session_downs(r: &nsr_plane::Run<Frr>) -> u64 {
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
}

fn wait_bfd_up(r: &nsr_plane::Run<Frr>, what: &str) -> Value {
    let v = wait_until(
        &format!("{what}: frr BFD up"),
        Duration::from_secs(60),
        || r.peer().bfd_peers(&r.plane.lab),
        |v| frr_peer(v).is_some_and(|p| p["status"] == "up"),
    )
    .map(|v| frr_peer(&v).expect("peer"))
    .unwrap_or_else(|e| panic!("{e}"));
    println!("{what}: frr: {v}");
    v
}

#[test]
fn frr_bfd_100ms_stays_up_through_takeovers_with_the_relay() {
    let Some(mut r) = nsr_plane::Run::<Frr>::start(
        "nsr_bfd_relay_frr",
        PeerKind::Frr,
        nsr_common::Options {
            md5: None,
            compact_bytes: None,
            bfd: Some(INTERVAL_MS),
            bfd_auth: None,
            ..nsr_common::Options::default()
        },
    ) else {
        return;
    };
    let before = wait_bfd_up(&r, "start");
    let (id, remote_id) = (
        before["id"].as_u64().expect("id"),
        before["remote-id"].as_u64().expect("remote-id"),
    );
    assert_eq!(
        before["transmit-interval"].as_u64(),
        Some(u64::from(INTERVAL_MS)),
        "frr runs at 100 ms: {before}"
    );
    r.start_relay(1);
    let downs = session_downs(&r);
    let bfd = BfdWatcher::start(r.peer().bfd_probe());
    let watch = r.watch();
    r.check("before any failure");

    // 1. Takeover with the relay.
    let t1 = Instant::now();
    r.idle_kill();
    hold_for(DETECT * 10, || {});
    let (n, gap) = bfd.assert_up_since("takeover with the relay", t1, id, remote_id);
    // The watcher sleeps 40 ms between vtysh calls, which take 10–100 ms
    // on this busy VM, and up to ~400 ms with the control plane's etcd,
    // controllers and agents beside frr. Any gap below a second is fine: a
    // session that went Down stays down for at least a second (it comes
    // back through Down/Init at the slow rate, RFC 5880 §6.8.3), and the
    // session-down counter is checked as well.
    assert!(gap < MAX_GAP, "sampling gap {gap:?}");
    assert_eq!(session_downs(&r), downs, "frr counted a BFD session down");
    println!(
        "1. takeover with the relay: frr BFD up in all {n} samples (largest gap {gap:?}), session-down {downs} unchanged, took {:?}",
        t1.elapsed()
    );

    // 1b. The same with a slow control plane: the primary is dead for
    // SLOW_PLANE before the takeover starts (more than twice frr's
    // detection time, with the takeover's own time).
    let t1b = Instant::now();
    r.kill_and_take_over(
        "SIGKILL, controllers stopped 500 ms, takeover (relay running)",
        SLOW_PLANE,
    );
    r.check("slow takeover with the relay");
    hold_for(DETECT * 10, || {});
    let (n, gap) = bfd.assert_up_since("slow takeover with the relay", t1b, id, remote_id);
    assert_eq!(session_downs(&r), downs, "frr counted a BFD session down");
    println!(
        "1b. takeover after {SLOW_PLANE:?} of silence, with the relay: frr BFD up in all {n} samples (largest gap {gap:?}), session-down unchanged"
    );

    // 2. The relay killed in normal operation.
    let t2 = Instant::now();
    r.kill_relay();
    hold_for(DETECT * 10, || {});
    let (n, gap) = bfd.assert_up_since("relay killed", t2, id, remote_id);
    assert_eq!(session_downs(&r), downs, "frr counted a BFD session down");
    println!("2. relay killed in normal operation: frr BFD up in all {n} samples (largest gap {gap:?}), session-down unchanged");
    nsr_common::stop_watch(watch, "1, 2");
    let after = frr_peer(&r.peer().bfd_peers(&r.plane.lab).expect("frr")).expect("peer");
    println!("frr after 1 and 2: {after}");

    // 3. Negative control: the same takeover without the relay.
    let watch = PeerWatch::start_every(
        r.peer().session_probe(&r.plane.lab),
        "198.18.0.10".parse().expect("service"),
        Duration::from_millis(100),
    );
    let svc: std::net::IpAddr = "198.18.0.10".parse().expect("service");
    let drops_before = r
        .peer()
        .sessions(&r.plane.lab)
        .ok()
        .and_then(|v| v.into_iter().find(|s| s.neighbor == svc))
        .and_then(|s| s.dropped_count);
    let t3 = Instant::now();
    r.kill_and_take_over(
        "negative control: SIGKILL, controllers stopped 500 ms, takeover (no relay)",
        SLOW_PLANE,
    );
    let down = wait_until(
        "negative control: frr counts a BFD session down",
        Duration::from_secs(10),
        || Ok(session_downs(&r)),
        |n| *n > downs,
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let first_down = wait_until(
        "negative control: the watcher sees frr's BFD leave up",
        Duration::from_secs(10),
        || Ok(bfd.since(t3)),
        |v| v.iter().any(|s| s.status != "up"),
    )
    .ok()
    .and_then(|v| v.into_iter().find(|s| s.status != "up"))
    .map(|s| s.at - t3);
    // frr drops the BGP session (RFC 5882): not Established, or its dropped
    // counter moved (the takeover may have re-established it already).
    let dropped = wait_until(
        "negative control: frr drops BGP",
        Duration::from_secs(10),
        || r.peer().sessions(&r.plane.lab),
        |v| {
            v.iter().find(|s| s.neighbor == svc).is_none_or(|s| {
                s.state != SessionState::Established || s.dropped_count > drops_before
            })
        },
    )
    .map(|v| v.into_iter().find(|s| s.neighbor == svc))
    .unwrap_or_else(|e| panic!("{e}"));
    println!("3. negative control: frr's BGP session: {dropped:?}");
    let report = watch.stop();
    println!(
        "3. negative control: frr's session-down {downs} -> {down}; first non-up sample +{first_down:?}; peer watch: {}",
        report.summary()
    );
    assert!(first_down.is_some(), "no sample saw frr's BFD leave up");
    assert!(
        report.assert_uninterrupted().is_err(),
        "negative control: frr kept BGP Established without the relay"
    );

    // 4. Relay and primary killed together (after everything is back).
    r.hf()
        .wait_established(r.peer_ip(), Duration::from_secs(90));
    let back = wait_bfd_up(&r, "back after the negative control");
    let downs = session_downs(&r);
    r.start_relay(1);
    // Covered and steady for a few detection times.
    let t4 = Instant::now();
    hold_for(DETECT * 5, || {});
    bfd.assert_up_since(
        "relay restarted",
        t4,
        back["id"].as_u64().unwrap_or(0),
        back["remote-id"].as_u64().unwrap_or(0),
    );
    let t5 = Instant::now();
    r.kill_primary_and_relay();
    wait_until(
        "relay and primary killed: frr counts a BFD session down",
        Duration::from_secs(10),
        || Ok(session_downs(&r)),
        |n| *n > downs,
    )
    .unwrap_or_else(|e| panic!("{e}"));
    // The watcher's first sample off Up (it samples while we read the
    // counter: wait for it).
    let v = wait_until(
        "relay and primary killed: the watcher sees frr's BFD leave up",
        Duration::from_secs(10),
        || Ok(bfd.since(t5)),
        |v| v.iter().any(|s| s.status != "up"),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let last_up = v
        .iter()
        .filter(|s| s.status == "up")
        .map(|s| s.at - t5)
        .max();
    let first_down = v
        .iter()
        .find(|s| s.status != "up")
        .map(|s| s.at - t5)
        .expect("a non-up sample");
    println!(
        "4. relay and primary killed together: last up sample +{last_up:?}, first down sample +{first_down:?} (detection time {DETECT:?})"
    );
    // Detection time, plus one sampling period and vtysh's latency.
    assert!(
        first_down <= DETECT + Duration::from_millis(250),
        "frr noticed only after {first_down:?}"
    );
    drop(bfd);
    r.print_phases();
}

#[test]
fn relay_lets_go_of_a_unit_nobody_takes_over() {
    let Some(mut r) = nsr_plane::Run::<Frr>::start(
        "nsr_bfd_relay_cover",
        PeerKind::Frr,
        nsr_common::Options {
            md5: None,
            compact_bytes: None,
            bfd: Some(INTERVAL_MS),
            bfd_auth: None,
            ..nsr_common::Options::default()
        },
    ) else {
        return;
    };
    let before = wait_bfd_up(&r, "start");
    r.start_relay_with(1, &["--cover-ms", "5000"]);
    let downs = session_downs(&r);
    let bfd = BfdWatcher::start(r.peer().bfd_probe());
    let t0 = Instant::now();
    hold_for(DETECT * 5, || {});
    bfd.assert_up_since(
        "relay running",
        t0,
        before["id"].as_u64().unwrap_or(0),
        before["remote-id"].as_u64().unwrap_or(0),
    );
    let t = Instant::now();
    r.kill_primary();
    let v = wait_until(
        "nobody took over: frr's BFD leaves up once the relay lets go",
        Duration::from_secs(20),
        || Ok(bfd.since(t)),
        |v| v.iter().any(|s| s.status != "up"),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let down = v
        .iter()
        .find(|s| s.status != "up")
        .map(|s| s.at - t)
        .expect("down");
    let last_up = v
        .iter()
        .filter(|s| s.status == "up")
        .map(|s| s.at - t)
        .max();
    println!(
        "unit killed, nobody takes over, relay --cover-ms 5000: frr's BFD up until +{last_up:?}, first down sample +{down:?}; session-down {downs} -> {}",
        session_downs(&r)
    );
    assert!(
        down >= Duration::from_millis(1500),
        "the relay did not keep the session up past the detection time: {down:?}"
    );
    assert!(
        down <= Duration::from_millis(6500),
        "the relay kept a dead unit's session up too long: {down:?}"
    );
    assert!(session_downs(&r) > downs);
}
