use crate::bench::synthetic;
use crate::core::{up_packet, Core, CoreConfig, Input, Output, Snapshot, StopReason};
use holdfast_bfd::{ControlPacket, ResumeState, State};
use std::net::SocketAddr;
use std::time::Duration;

const MS: Duration = Duration::from_millis(1);

fn peer() -> SocketAddr {
    "198.18.0.1:0".parse().unwrap()
}

fn snap(epoch: u64, records: Vec<(String, String)>, live: &str) -> Input {
    Input::Snapshot(Snapshot {
        instance: "edge-1".into(),
        epoch,
        records,
        liveness: vec![live.to_string()],
    })
}

fn core() -> Core {
    Core::new(
        CoreConfig {
            cover: Duration::from_secs(10),
            ..CoreConfig::default()
        },
        7,
    )
}

fn sends(o: &[Output]) -> Vec<(SocketAddr, SocketAddr, ControlPacket)> {
    o.iter()
        .filter_map(|o| match o {
            Output::Send { from, to, payload } => {
                Some((*from, *to, ControlPacket::decode(payload).unwrap()))
            }
            _ => None,
        })
        .collect()
}

fn stops(o: &[Output]) -> Vec<StopReason> {
    o.iter()
        .filter_map(|o| match o {
            Output::Stopped { reason, .. } => Some(*reason),
            _ => None,
        })
        .collect()
}

/// Drives timers from `from` to `to` in 1 ms steps; returns send times.
fn drive(c: &mut Core, from: Duration, to: Duration) -> (Vec<Duration>, Vec<Output>) {
    let mut times = Vec::new();
    let mut all = Vec::new();
    let mut t = from;
    while t <= to {
        let o = c.handle(t, Input::Timer);
        for _ in sends(&o) {
            times.push(t);
        }
        all.extend(o);
        t += MS;
    }
    (times, all)
}

fn with_state(i: usize, f: impl FnOnce(&mut serde_json::Value)) -> (String, String) {
    let (k, j) = synthetic(i, 100_000, peer());
    let mut v: serde_json::Value = serde_json::from_str(&j).unwrap();
    f(&mut v["state"]);
    (k, v.to_string())
}

#[test]
fn up_record_is_sent_at_once_then_periodically_with_jitter() {
    let mut c = core();
    let o = c.handle(
        Duration::ZERO,
        snap(1, vec![synthetic(0, 100_000, peer())], "1"),
    );
    assert!(o.iter().any(|o| matches!(o, Output::Started { .. })));
    let (times, all) = drive(&mut c, Duration::ZERO, Duration::from_secs(2));
    let s = sends(&all);
    let (from, to, p) = &s[0];
    assert_eq!(*from, "127.0.0.1:20000".parse().unwrap());
    assert_eq!(*to, "198.18.0.1:3784".parse().unwrap());
    assert_eq!(p.state, State::Up);
    assert_eq!((p.my_discriminator, p.your_discriminator), (1000, 5000));
    assert_eq!(
        (p.desired_min_tx_us, p.required_min_rx_us),
        (100_000, 100_000)
    );
    assert_eq!(p.detect_mult, 3);
    assert!(!p.poll && !p.final_ && p.auth.is_none());
    assert_eq!(times[0], Duration::ZERO, "first packet at once");
    for w in times.windows(2) {
        let d = w[1] - w[0];
        assert!(d >= 75 * MS && d <= 101 * MS, "interval {d:?}");
    }
    assert!(times.len() >= 20 && times.len() <= 28, "{}", times.len());
}

#[test]
fn multihop_goes_to_4784_and_interval_is_the_larger() {
    let mut c = core();
    let (k, j) = synthetic(0, 100_000, peer());
    let mut v: serde_json::Value = serde_json::from_str(&j).unwrap();
    v["multihop"] = true.into();
    v["state"]["remote_min_rx_us"] = 300_000.into();
    c.handle(Duration::ZERO, snap(1, vec![(k, v.to_string())], "1"));
    let (times, all) = drive(&mut c, Duration::ZERO, Duration::from_secs(3));
    assert_eq!(sends(&all)[0].1.port(), 4784);
    for w in times.windows(2) {
        let d = w[1] - w[0];
        assert!(d >= 225 * MS && d <= 301 * MS, "interval {d:?}");
    }
}

#[test]
fn not_up_removed_and_unusable_records_are_not_sent_and_ipv6_is() {
    let mut c = core();
    let down = with_state(1, |s| s["state"] = "Down".into());
    let bad = ("bad".to_string(), "{".to_string());
    let v6 = {
        let (k, j) = synthetic(2, 100_000, peer());
        let mut v: serde_json::Value = serde_json::from_str(&j).unwrap();
        v["local"] = "[2001:db8::1]:49152".into();
        v["peer"] = "2001:db8::2".into();
        (k, v.to_string())
    };
    let newer = {
        let (k, j) = synthetic(3, 100_000, peer());
        let mut v: serde_json::Value = serde_json::from_str(&j).unwrap();
        v["schema"] = 99.into();
        (k, v.to_string())
    };
    let up = synthetic(0, 100_000, peer());
    c.handle(
        Duration::ZERO,
        snap(1, vec![up.clone(), down, bad, v6, newer], "1"),
    );
    let (_, all) = drive(&mut c, Duration::ZERO, 500 * MS);
    let sent = sends(&all);
    assert!(sent
        .iter()
        .all(|s| [1000, 1002].contains(&s.2.my_discriminator)));
    let v6: Vec<_> = sent
        .iter()
        .filter(|s| s.2.my_discriminator == 1002)
        .collect();
    assert!(!v6.is_empty(), "IPv6 sessions are covered too");
    assert!(v6
        .iter()
        .all(|s| s.0 == "[2001:db8::1]:49152".parse().unwrap()
            && s.1 == "[2001:db8::2]:3784".parse().unwrap()));
    assert_eq!(c.stats().sessions, 2);
    // The session goes Down at the unit: the relay stops.
    let down0 = with_state(0, |s| s["state"] = "Down".into());
    let o = c.handle(500 * MS, snap(1, vec![down0], "2"));
    assert_eq!(stops(&o), vec![StopReason::NotUp, StopReason::Removed]);
    let (t, _) = drive(&mut c, 500 * MS, 1000 * MS);
    assert!(t.is_empty());
    // Up again, then removed.
    c.handle(1000 * MS, snap(1, vec![up], "3"));
    let o = c.handle(1100 * MS, snap(1, vec![], "4"));
    assert_eq!(stops(&o), vec![StopReason::Removed]);
    let (t, _) = drive(&mut c, 1100 * MS, 1500 * MS);
    assert!(t.is_empty());
}

#[test]
fn a_silent_instance_stops_being_covered_and_comes_back_when_it_moves() {
    let mut c = core();
    let up = synthetic(0, 100_000, peer());
    c.handle(Duration::ZERO, snap(1, vec![up.clone()], "a"));
    // The store keeps answering, but nothing moves for the cover time.
    let mut t = Duration::ZERO;
    let mut stopped_at = None;
    while t < Duration::from_secs(12) {
        t += 100 * MS;
        let o = c.handle(t, snap(1, vec![up.clone()], "a"));
        let mut o2 = c.handle(t, Input::Timer);
        o2.extend(o);
        if stops(&o2) == vec![StopReason::Silent] {
            stopped_at = Some(t);
        }
    }
    assert_eq!(stopped_at, Some(Duration::from_secs(10)));
    let (times, _) = drive(&mut c, t, t + Duration::from_secs(1));
    assert!(times.is_empty());
    // A takeover (new epoch) brings it back at once.
    let o = c.handle(t + Duration::from_secs(1), snap(2, vec![up], "a"));
    assert!(o.iter().any(|o| matches!(o, Output::Started { .. })));
}

/// The relay itself stopped for longer than the cover time (SIGSTOP, a
/// starved host): on waking its timer fires before the next read of the
/// store; that is not the unit's silence, and it keeps covering.
#[test]
fn a_relay_that_was_stopped_does_not_take_its_stall_for_silence() {
    let mut c = core();
    let up = synthetic(0, 100_000, peer());
    c.handle(Duration::ZERO, snap(1, vec![up.clone()], "a"));
    let woke = Duration::from_secs(12);
    let o = c.handle(woke, Input::Timer);
    assert!(stops(&o).is_empty(), "stopped covering on waking: {o:?}");
    assert!(
        o.iter().any(|o| matches!(o, Output::Send { .. })),
        "sends at once on waking: {o:?}"
    );
    // The next read finds the unit alive (its sequences moved).
    let o = c.handle(woke + 100 * MS, snap(1, vec![up], "b"));
    assert!(stops(&o).is_empty());
    assert_eq!(c.stats().sessions, 1);
}

#[test]
fn liveness_changes_keep_it_covered_and_store_errors_do_not_extend_it() {
    let mut c = core();
    let up = synthetic(0, 100_000, peer());
    for i in 0..150u64 {
        // A keepalive every 3 s moves the sequences.
        let live = (i / 30).to_string();
        let o = c.handle(MS * 100 * i as u32, snap(1, vec![up.clone()], &live));
        assert!(stops(&o).is_empty(), "stopped at {i}");
    }
    assert_eq!(c.stats().sessions, 1);
    // The store goes away: the cover runs out 10 s after the last change.
    let last_change = Duration::from_secs(12);
    let mut t = 15 * Duration::from_secs(1);
    let mut stopped = None;
    while t < Duration::from_secs(30) {
        let o = c.handle(
            t,
            Input::StoreError {
                instance: "edge-1".into(),
            },
        );
        if !stops(&o).is_empty() {
            stopped = Some(t);
            break;
        }
        t += 100 * MS;
    }
    let stopped = stopped.expect("stopped");
    assert!(stopped >= last_change + Duration::from_secs(10));
    assert!(stopped <= last_change + Duration::from_secs(10) + 100 * MS);
}

#[test]
fn a_takeover_that_moves_the_source_port_restarts_the_session() {
    let mut c = core();
    let up = synthetic(0, 100_000, peer());
    c.handle(Duration::ZERO, snap(1, vec![up], "a"));
    let moved = {
        let (k, j) = synthetic(0, 100_000, peer());
        let mut v: serde_json::Value = serde_json::from_str(&j).unwrap();
        v["local"] = "127.0.0.1:49999".into();
        (k, v.to_string())
    };
    let o = c.handle(50 * MS, snap(2, vec![moved], "a"));
    assert_eq!(stops(&o), vec![StopReason::Removed]);
    let (_, all) = drive(&mut c, 50 * MS, 300 * MS);
    let s = sends(&all);
    assert!(!s.is_empty());
    assert!(s.iter().all(|s| s.0.port() == 49999));
}

#[test]
fn forget_stops_everything_and_many_sessions_share_the_heap() {
    let mut c = core();
    let recs: Vec<_> = (0..1000).map(|i| synthetic(i, 50_000, peer())).collect();
    c.handle(Duration::ZERO, snap(1, recs, "a"));
    let (times, _) = drive(&mut c, Duration::ZERO, Duration::from_secs(1));
    // 1000 sessions at 50 ms (37.5–50 ms with jitter): 20–27 each.
    assert!(
        times.len() >= 20_000 && times.len() <= 27_000,
        "{}",
        times.len()
    );
    let o = c.handle(
        Duration::from_secs(1),
        Input::Forget {
            instance: "edge-1".into(),
        },
    );
    assert_eq!(stops(&o).len(), 1000);
    assert_eq!(c.next_deadline(), None);
}

#[test]
fn up_packet_mirrors_the_resume_state() {
    let rs: ResumeState = serde_json::from_value(
        serde_json::from_str::<serde_json::Value>(&synthetic(4, 300_000, peer()).1).unwrap()
            ["state"]
            .clone(),
    )
    .unwrap();
    let p = up_packet(&rs, 5);
    assert_eq!(p.detect_mult, 3, "the unit's own Detect Mult");
    let older = ResumeState {
        detect_mult: 0,
        ..rs.clone()
    };
    assert_eq!(up_packet(&older, 5).detect_mult, 5, "records without one");
    assert_eq!(p.my_discriminator, 1004);
    assert_eq!(p.your_discriminator, 5004);
    assert_eq!(ControlPacket::decode(&p.encode()).unwrap(), p);
}

/// Two real sessions brought Up with `auth` (1 ms steps for `secs`); the
/// last packet `a` sent and `a` itself.
fn authenticated_pair(
    auth: holdfast_bfd::AuthConfig,
    secs: u64,
) -> (holdfast_bfd::Session, Vec<u8>) {
    use holdfast_bfd::{Input as BIn, Output as BOut, Session, SessionConfig};
    use std::num::NonZeroU32;
    let cfg = SessionConfig {
        desired_min_tx_us: 100_000,
        required_min_rx_us: 100_000,
        detect_mult: 3,
        passive: false,
        auth: Some(auth),
    };
    let mut s = [
        Session::new(
            cfg.clone(),
            NonZeroU32::new(0xa).unwrap(),
            1,
            Duration::ZERO,
        )
        .unwrap(),
        Session::new(cfg, NonZeroU32::new(0xb).unwrap(), 2, Duration::ZERO).unwrap(),
    ];
    let mut last_a = Vec::new();
    let mut t = Duration::ZERO;
    while t <= Duration::from_secs(secs) {
        for i in 0..2 {
            let mut pending = s[i].handle(t, BIn::Timer);
            while !pending.is_empty() {
                let mut next = Vec::new();
                for o in pending {
                    if let BOut::Send(b) = o {
                        if i == 0 {
                            last_a.clone_from(&b);
                        }
                        next.extend(s[1 - i].handle(t, BIn::Received(b)));
                    }
                }
                // Replies of the other side (a Final, say) go back.
                pending = Vec::new();
                for o in next {
                    if let BOut::Send(b) = o {
                        pending.extend(s[i].handle(t, BIn::Received(b)));
                    }
                }
            }
        }
        t += MS;
    }
    let [a, _] = s;
    assert_eq!(a.state(), State::Up);
    (a, last_a)
}

#[test]
fn keyed_sessions_are_relayed_byte_for_byte() {
    use crate::core::{payload, AuthGap};
    use holdfast_bfd::{AuthConfig, AuthType};
    for t in [
        AuthType::SimplePassword,
        AuthType::KeyedMd5,
        AuthType::KeyedSha1,
    ] {
        let auth = AuthConfig {
            auth_type: t,
            key_id: 4,
            key: b"s3cret".to_vec(),
        };
        let (a, last) = authenticated_pair(auth, 3);
        let rs = a.resume_state();
        assert_eq!(rs.auth.map(|x| (x.auth_type, x.key_id)), Some((t, 4)));
        assert_eq!(rs.detect_mult, 3);
        let mine = payload(&rs, 7, Some(b"s3cret")).unwrap();
        assert_eq!(mine, last, "{t:?}: the relay's packet is the unit's own");
        assert!(holdfast_bfd::verify(&mine, t, 4, b"s3cret").is_ok());
        assert_eq!(payload(&rs, 7, None), Err(AuthGap::NoKey), "{t:?}");
    }
    let auth = AuthConfig {
        auth_type: AuthType::MeticulousKeyedSha1,
        key_id: 4,
        key: b"s3cret".to_vec(),
    };
    let (a, _) = authenticated_pair(auth, 2);
    assert_eq!(
        payload(&a.resume_state(), 3, Some(b"s3cret")),
        Err(AuthGap::Meticulous)
    );
}

#[test]
fn authenticated_records_without_a_key_are_not_covered() {
    use holdfast_bfd::{AuthRef, AuthType};
    let (key, json) = synthetic(1, 100_000, peer());
    let mut v: serde_json::Value = serde_json::from_str(&json).unwrap();
    v["state"]["auth"] = serde_json::to_value(AuthRef {
        auth_type: AuthType::KeyedSha1,
        key_id: 1,
    })
    .unwrap();
    let rec = v.to_string();
    // No key: nothing sent.
    let mut c = core();
    c.handle(
        Duration::ZERO,
        snap(1, vec![(key.clone(), rec.clone())], "a"),
    );
    assert_eq!(sends(&c.handle(Duration::ZERO, Input::Timer)).len(), 0);
    // With the instance's key: covered, signed with it.
    let mut keys = crate::keys::Keys::default();
    keys.insert("edge-1", None, b"k".to_vec());
    let mut c = Core::new(
        CoreConfig {
            keys,
            ..CoreConfig::default()
        },
        7,
    );
    c.handle(Duration::ZERO, snap(1, vec![(key, rec)], "a"));
    let o = c.handle(Duration::ZERO, Input::Timer);
    let Some(Output::Send { payload, .. }) = o.iter().find(|o| matches!(o, Output::Send { .. }))
    else {
        panic!("{o:?}")
    };
    assert!(holdfast_bfd::verify(payload, AuthType::KeyedSha1, 1, b"k").is_ok());
    assert!(holdfast_bfd::verify(payload, AuthType::KeyedSha1, 1, b"x").is_err());
}
