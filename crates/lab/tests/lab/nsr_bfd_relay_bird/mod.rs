//! The BFD relay with bird2: bird runs BFD at 100 ms x 3 (detection time
//! 300 ms) under the session NSR protects; `holdfast-bfd-relay` runs on a
//! relay host on the same bridge (the topology of `nsr_bfd_relay_frr`,
//! drawn there, with bird2 as the peer).
//!
//! Checked:
//! 1. **Slow takeover with the relay**: SIGKILL of the primary with the
//!    controllers SIGSTOPped for 500 ms, then the controller's takeover (the unit is silent for more
//!    than twice bird's detection time): bird's BFD session never leaves
//!    Up (`birdc show bfd sessions` sampled every ≤50 ms, its "Since"
//!    unchanged), `nsr_plane`'s checks pass, BGP never left Established.
//! 2. **The relay killed in normal operation**: bird's BFD stays Up, its
//!    "Since" unchanged, for ten detection times.
//! 3. **Negative control**: the slow takeover of 1 without the relay: bird's
//!    BFD leaves Up and bird drops the BGP session.
//!
//! A second test, `bird_keyed_sha1_bfd_stays_up_through_a_slow_takeover`
//! (its own lab): BFD with keyed SHA1 authentication (bird2's
//! `authentication keyed sha1`), the relay given the key in `--keys`:
//! 1. the slow takeover with the relay: bird's BFD never leaves Up (same
//!    "Since"), BGP never left Established, `nsr_plane`'s checks pass;
//! 2. **negative control**: a relay given the wrong key (its packets carry
//!    the right sequence number but a wrong digest): the same slow takeover
//!    makes bird's BFD leave Up and bird drop BGP — bird checks what the
//!    relay sends.

use crate::{nsr_common, nsr_plane};

use holdfast_lab::{hold_for, wait_until, Bird, LogMark, Peer, PeerKind, PeerWatch};
use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const DETECT: Duration = Duration::from_millis(300);
/// How long the controllers are stopped (a slow control plane: the
/// takeover starts only after it).
const SLOW_PLANE: Duration = Duration::from_millis(500);
const SERVICE: &str = "198.18.0.10";

/// (state, since) of the service address's row, if any.
fn row(table: &str) -> Option<(String, String)> {
    table.lines().find_map(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        (f.first() == Some(&SERVICE) && f.len() >= 4).then(|| (f[2].to_string(), f[3].to_string()))
    })
}

type Samples = Arc<Mutex<Vec<(Instant, Option<(String, String)>)>>>;

fn watch_bfd(
    probe: Box<dyn Fn() -> holdfast_lab::Result<String> + Send>,
    stop: Arc<AtomicBool>,
) -> (Samples, std::thread::JoinHandle<()>) {
    let samples: Samples = Arc::new(Mutex::new(Vec::new()));
    let s2 = samples.clone();
    let t = std::thread::spawn(move || {
        let end = Instant::now() + Duration::from_secs(600);
        while !stop.load(Ordering::Relaxed) && Instant::now() < end {
            let at = Instant::now();
            let r = probe().ok().and_then(|t| row(&t));
            s2.lock().expect("samples").push((at, r));
            std::thread::sleep(Duration::from_millis(40));
        }
    });
    (samples, t)
}

fn since(s: &Samples, t: Instant) -> Vec<(Instant, Option<(String, String)>)> {
    s.lock()
        .expect("samples")
        .iter()
        .filter(|x| x.0 >= t)
        .cloned()
        .collect()
}

/// The watcher's first sample off Up since `t` (a bounded wait: it may not
/// have sampled since bird went Down), then the watcher stopped.
fn stop_at_first_off_up(
    samples: &Samples,
    t: Instant,
    up: &(String, String),
    stop: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<()>,
) -> Option<(Duration, Option<(String, String)>)> {
    let _ = wait_until(
        "the watcher sees bird's BFD leave Up",
        Duration::from_secs(10),
        || Ok(since(samples, t)),
        |v| v.iter().any(|x| x.1.as_ref() != Some(up)),
    );
    stop.store(true, Ordering::Relaxed);
    thread.join().expect("watcher");
    since(samples, t)
        .into_iter()
        .find(|x| x.1.as_ref() != Some(up))
        .map(|x| (x.0 - t, x.1))
}

fn assert_up(what: &str, s: &Samples, t: Instant, want: &(String, String)) -> (usize, Duration) {
    let v = since(s, t);
    let bad: Vec<String> = v
        .iter()
        .filter(|x| x.1.as_ref() != Some(want))
        .map(|x| format!("+{:?}: {:?}", x.0 - t, x.1))
        .collect();
    let gap = v
        .windows(2)
        .map(|w| w[1].0 - w[0].0)
        .max()
        .unwrap_or_default();
    assert!(
        bad.is_empty(),
        "{what}: bird's BFD session left Up: {bad:#?}"
    );
    (v.len(), gap)
}

#[test]
fn bird_bfd_100ms_stays_up_through_a_slow_takeover_with_the_relay() {
    let Some(mut r) = nsr_plane::Run::<Bird>::start(
        "nsr_bfd_relay_bird",
        PeerKind::Bird,
        nsr_common::Options {
            md5: None,
            compact_bytes: None,
            bfd: Some(100),
            bfd_auth: None,
            ..nsr_common::Options::default()
        },
    ) else {
        return;
    };
    let table = wait_until(
        "bird: BFD Up",
        Duration::from_secs(60),
        || r.peer().bfd_sessions(&r.plane.lab),
        |t| row(t).is_some_and(|(s, _)| s == "Up"),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    println!("bird before:\n{table}");
    let up = row(&table).expect("row");
    r.start_relay(1);
    let stop = Arc::new(AtomicBool::new(false));
    let (samples, thread) = watch_bfd(r.peer().bfd_probe(&r.plane.lab), stop.clone());
    let watch = r.watch();
    r.check("before any failure");

    // 1. Slow takeover with the relay.
    let t1 = Instant::now();
    r.kill_and_take_over(
        "SIGKILL, controllers stopped 500 ms, takeover (relay running)",
        SLOW_PLANE,
    );
    r.check("slow takeover with the relay");
    hold_for(DETECT * 10, || {});
    let (n, gap) = assert_up("slow takeover with the relay", &samples, t1, &up);
    println!("1. slow takeover with the relay: bird BFD Up (since {}) in all {n} samples, largest gap {gap:?}", up.1);

    // 2. The relay killed in normal operation.
    let t2 = Instant::now();
    r.kill_relay();
    hold_for(DETECT * 10, || {});
    let (n, gap) = assert_up("relay killed", &samples, t2, &up);
    println!("2. relay killed: bird BFD Up in all {n} samples, largest gap {gap:?}");
    nsr_common::stop_watch(watch, "1, 2");

    // 3. Negative control.
    let svc: IpAddr = SERVICE.parse().expect("service");
    let watch = PeerWatch::start_every(
        r.peer().session_probe(&r.plane.lab),
        svc,
        Duration::from_millis(100),
    );
    let t3 = Instant::now();
    let mark = r.peer().log_mark();
    r.kill_and_take_over(
        "negative control: SIGKILL, controllers stopped 500 ms, takeover (no relay)",
        SLOW_PLANE,
    );
    let dropped = bird_dropped_bgp_for_bfd(&r, &mark, "negative control");
    let report = watch.stop();
    let first_not_up = stop_at_first_off_up(&samples, t3, &up, stop, thread);
    println!(
        "3. negative control: first sample off Up {first_not_up:?}; bird's log: {dropped:?}; peer watch: {}",
        report.summary()
    );
    assert!(first_not_up.is_some(), "bird's BFD never left Up");
    assert!(
        report.assert_uninterrupted().is_err(),
        "negative control: bird kept BGP Established without the relay"
    );
    r.print_phases();
}

/// Waits (bounded) until bird's log, since `mark`, shows its BFD session
/// with holdfastd going down and the BGP session closing for it; returns
/// those lines. (The log, not a CLI poll: the takeover may re-establish a
/// session before a poll would run.)
fn bird_dropped_bgp_for_bfd(r: &nsr_plane::Run<Bird>, mark: &LogMark, what: &str) -> Vec<String> {
    let log = wait_until(
        &format!("{what}: bird drops BGP because BFD went down (its log)"),
        Duration::from_secs(10),
        || r.peer().log_since(mark),
        |t| t.contains("BFD session down") && t.contains("BGP session closed"),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    log.lines()
        .filter(|l| l.contains("BFD session down") || l.contains("BGP session closed"))
        .map(str::to_string)
        .collect()
}

/// Starts the relay with `secret` as the key of every session of the
/// instance (a keys file in the lab's work directory).
fn start_keyed_relay(r: &mut nsr_plane::Run<Bird>, secret: &str) {
    let path = r
        .plane
        .lab
        .work_dir()
        .join(format!("relay-keys-{secret}.toml"));
    std::fs::write(
        &path,
        format!("[[key]]\ninstance = \"edge-1\"\nsecret = \"{secret}\"\n"),
    )
    .expect("keys file");
    let path = path.to_string_lossy().to_string();
    r.start_relay_with(1, &["--keys", &path]);
}

#[test]
fn bird_keyed_sha1_bfd_stays_up_through_a_slow_takeover() {
    const KEY: &str = "relay-sha1-key";
    let Some(mut r) = nsr_plane::Run::<Bird>::start(
        "nsr_bfd_relay_bird_auth",
        PeerKind::Bird,
        nsr_common::Options {
            md5: None,
            compact_bytes: None,
            bfd: Some(100),
            bfd_auth: Some(nsr_common::BfdAuth {
                bird: "keyed sha1",
                holdfastd: "keyed-sha1",
                key_id: 3,
                password: KEY,
            }),
            ..nsr_common::Options::default()
        },
    ) else {
        return;
    };
    let table = wait_until(
        "bird: authenticated BFD Up",
        Duration::from_secs(60),
        || r.peer().bfd_sessions(&r.plane.lab),
        |t| row(t).is_some_and(|(s, _)| s == "Up"),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let up = row(&table).expect("row");
    start_keyed_relay(&mut r, KEY);
    let stop = Arc::new(AtomicBool::new(false));
    let (samples, thread) = watch_bfd(r.peer().bfd_probe(&r.plane.lab), stop.clone());
    let watch = r.watch();
    r.check("keyed SHA1: before any failure");

    // 1. Slow takeover with the keyed relay.
    let t1 = Instant::now();
    r.kill_and_take_over(
        "keyed SHA1: SIGKILL, controllers stopped 500 ms, takeover (relay with the key)",
        SLOW_PLANE,
    );
    r.check("keyed SHA1: slow takeover with the relay");
    hold_for(DETECT * 10, || {});
    let (n, gap) = assert_up(
        "keyed SHA1: slow takeover with the relay",
        &samples,
        t1,
        &up,
    );
    println!("1. keyed SHA1, slow takeover with the relay: bird BFD Up (since {}) in all {n} samples, largest gap {gap:?}", up.1);
    let report = watch.stop();
    report
        .assert_uninterrupted()
        .unwrap_or_else(|e| panic!("the peer saw an interruption: {e}"));

    // 2. Negative control: the relay with the wrong key.
    r.kill_relay();
    start_keyed_relay(&mut r, "not-the-key");
    let svc: IpAddr = SERVICE.parse().expect("service");
    let watch = PeerWatch::start_every(
        r.peer().session_probe(&r.plane.lab),
        svc,
        Duration::from_millis(100),
    );
    let t2 = Instant::now();
    let mark = r.peer().log_mark();
    r.kill_and_take_over(
        "keyed SHA1 negative control: SIGKILL, 500 ms, takeover (relay with a wrong key)",
        SLOW_PLANE,
    );
    let dropped = bird_dropped_bgp_for_bfd(&r, &mark, "keyed SHA1 negative control");
    let log = r.peer().log_since(&mark).unwrap_or_default();
    assert!(
        log.contains("Authentication failed"),
        "bird logs the relay's packets failing authentication"
    );
    let report = watch.stop();
    let first_not_up = stop_at_first_off_up(&samples, t2, &up, stop, thread);
    println!("2. keyed SHA1 negative control (wrong key): first sample off Up {first_not_up:?}; bird's log: {dropped:?}; peer watch: {}", report.summary());
    assert!(first_not_up.is_some(), "bird's BFD never left Up");
    assert!(
        report.assert_uninterrupted().is_err(),
        "negative control: bird kept BGP Established with a relay it cannot verify"
    );
    r.kill_relay();
}
