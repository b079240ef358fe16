use crate::*;
use std::num::NonZeroU32;
use std::time::Duration;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn packet() -> ControlPacket {
    ControlPacket {
        diag: Diag::None,
        state: State::Up,
        poll: false,
        final_: false,
        control_plane_independent: false,
        demand: false,
        detect_mult: 3,
        my_discriminator: 0x1111_1111,
        your_discriminator: 0x2222_2222,
        desired_min_tx_us: 100_000,
        required_min_rx_us: 100_000,
        required_min_echo_rx_us: 0,
        auth: None,
    }
}

// ---------------------------------------------------------------- codec

#[test]
fn mandatory_section_layout() {
    let p = ControlPacket {
        diag: Diag::AdministrativelyDown,
        state: State::Init,
        poll: true,
        control_plane_independent: true,
        ..packet()
    };
    let b = p.encode();
    assert_eq!(
        b,
        [
            0x27, 0xa8, 3, 24, 0x11, 0x11, 0x11, 0x11, 0x22, 0x22, 0x22, 0x22, 0, 1, 0x86, 0xa0, 0,
            1, 0x86, 0xa0, 0, 0, 0, 0
        ]
    );
    assert_eq!(ControlPacket::decode(&b), Ok(p));
}

#[test]
fn decode_checks_name_the_failed_check() {
    let good = packet().encode();
    let with = |f: &dyn Fn(&mut Vec<u8>)| {
        let mut b = good.clone();
        f(&mut b);
        ControlPacket::decode(&b)
    };
    assert_eq!(with(&|b| b.truncate(23)), Err(DecodeError::TooShort(23)));
    assert_eq!(with(&|b| b[0] = 0x40), Err(DecodeError::Version(2)));
    assert_eq!(
        with(&|b| b[3] = 20),
        Err(DecodeError::LengthTooSmall {
            length: 20,
            min: 24,
            auth: false
        })
    );
    assert_eq!(
        with(&|b| {
            b[1] |= 0x04;
            b[3] = 25;
            b.push(0);
        }),
        Err(DecodeError::LengthTooSmall {
            length: 25,
            min: 26,
            auth: true
        })
    );
    assert_eq!(
        with(&|b| b[3] = 30),
        Err(DecodeError::LengthExceedsPayload {
            length: 30,
            received: 24
        })
    );
    assert_eq!(with(&|b| b[2] = 0), Err(DecodeError::ZeroDetectMult));
    assert_eq!(with(&|b| b[1] |= 1), Err(DecodeError::Multipoint));
    assert_eq!(
        with(&|b| b[4..8].fill(0)),
        Err(DecodeError::ZeroMyDiscriminator)
    );
    assert_eq!(
        with(&|b| b[8..12].fill(0)),
        Err(DecodeError::ZeroYourDiscriminator(State::Up))
    );
    for down in [0x00, 0x40] {
        assert!(with(&|b| {
            b[1] = down;
            b[8..12].fill(0)
        })
        .is_ok());
    }
    // Trailing octets after Length are ignored.
    assert_eq!(with(&|b| b.extend([1, 2, 3])), Ok(packet()));
}

#[test]
fn authentication_sections() {
    let mut b = packet().encode();
    b[1] |= 0x04;
    b[3] = 28;
    b.extend([9, 4, 1, 0]);
    assert_eq!(
        ControlPacket::decode(&b),
        Err(DecodeError::UnknownAuthType(9))
    );
    b[24] = 2;
    assert_eq!(
        ControlPacket::decode(&b),
        Err(DecodeError::AuthLen {
            auth_type: AuthType::KeyedMd5,
            auth_len: 4
        })
    );
    b[24] = 1;
    b[25] = 3;
    assert!(matches!(
        ControlPacket::decode(&b),
        Err(DecodeError::AuthLen { .. })
    ));
    b[25] = 5;
    assert_eq!(
        ControlPacket::decode(&b),
        Err(DecodeError::AuthLenMismatch {
            auth_len: 5,
            length: 28
        })
    );
    b[25] = 4;
    let p = ControlPacket::decode(&b).unwrap();
    assert_eq!(
        p.auth,
        Some(Auth::SimplePassword {
            key_id: 1,
            password: vec![0]
        })
    );
    assert_eq!(p.encode(), b);
}

/// The Reserved octet of a keyed section is ignored on receipt (but
/// covered by the digest) and sent as zero (RFC 5880 §4.3, §4.4).
#[test]
fn keyed_reserved_octet() {
    let p = ControlPacket {
        auth: Some(Auth::unsigned(AuthType::KeyedMd5, 1, 5, b"k")),
        ..packet()
    };
    let mut b = p.encode();
    assert_eq!(b[27], 0);
    b[27] = 0x5a;
    sign(&mut b, b"k").unwrap();
    let back = verify(&b, AuthType::KeyedMd5, 1, b"k").unwrap();
    assert_eq!(back.auth.as_ref().unwrap().seq(), Some(5));
    assert_eq!(back.encode()[27], 0);
}

#[test]
fn keyed_round_trips_sign_and_verify() {
    for t in [
        AuthType::SimplePassword,
        AuthType::KeyedMd5,
        AuthType::MeticulousKeyedMd5,
        AuthType::KeyedSha1,
        AuthType::MeticulousKeyedSha1,
    ] {
        let key = b"secret";
        let p = ControlPacket {
            auth: Some(Auth::unsigned(t, 3, 0xdead_beef, key)),
            ..packet()
        };
        let b = p.encode_signed(key).unwrap();
        assert_eq!(b.len(), p.wire_len());
        assert_eq!(b[3] as usize, b.len());
        let back = verify(&b, t, 3, key).unwrap();
        assert_eq!(back.auth.as_ref().unwrap().auth_type(), t);
        assert_eq!(
            back.auth.as_ref().unwrap().seq(),
            t.is_keyed().then_some(0xdead_beef)
        );
        assert_eq!(back.encode(), b);
        assert!(verify(&b, t, 3, b"secreT").is_err());
        let other = if t == AuthType::KeyedSha1 {
            AuthType::KeyedMd5
        } else {
            AuthType::KeyedSha1
        };
        assert!(matches!(
            verify(&b, other, 3, key),
            Err(AuthError::WrongType { .. })
        ));
    }
    let long = [1u8; 21];
    let p = ControlPacket {
        auth: Some(Auth::unsigned(AuthType::KeyedSha1, 1, 1, &long)),
        ..packet()
    };
    assert!(matches!(
        p.encode_signed(&long),
        Err(AuthError::KeyTooLong { len: 21, .. })
    ));
    assert_eq!(
        verify(&packet().encode(), AuthType::KeyedMd5, 1, b"k"),
        Err(AuthError::Missing)
    );
}

/// Round trips over packets built from a deterministic generator.
#[test]
fn generated_round_trips() {
    let mut x: u64 = 0x1234_5678;
    let mut next = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    for _ in 0..2000 {
        let r = next();
        let state = State::from_code(r as u8);
        let auth = match (r >> 8) % 4 {
            0 => None,
            1 => Some(Auth::SimplePassword {
                key_id: (r >> 16) as u8,
                password: vec![b'p'; 1 + (r >> 24) as usize % 16],
            }),
            2 => Some(Auth::Md5 {
                meticulous: r & 1 << 40 != 0,
                key_id: (r >> 16) as u8,
                seq: (r >> 20) as u32,
                digest: [(r >> 32) as u8; 16],
            }),
            _ => Some(Auth::Sha1 {
                meticulous: r & 1 << 40 != 0,
                key_id: (r >> 16) as u8,
                seq: (r >> 20) as u32,
                digest: [(r >> 32) as u8; 20],
            }),
        };
        let p = ControlPacket {
            diag: Diag::from_code((r >> 41) as u8),
            state,
            poll: r & 1 << 46 != 0,
            final_: r & 1 << 47 != 0,
            control_plane_independent: r & 1 << 48 != 0,
            demand: r & 1 << 49 != 0,
            detect_mult: 1 + (r >> 50) as u8 % 255,
            my_discriminator: 1 + next() as u32 % 0xffff_fff0,
            your_discriminator: next() as u32 | 1,
            desired_min_tx_us: next() as u32,
            required_min_rx_us: next() as u32,
            required_min_echo_rx_us: next() as u32,
            auth,
        };
        let b = p.encode();
        assert_eq!(ControlPacket::decode(&b), Ok(p), "{b:02x?}");
    }
}

#[test]
fn serde_round_trip_of_packets_and_errors() {
    let p = ControlPacket {
        auth: Some(Auth::unsigned(AuthType::MeticulousKeyedSha1, 1, 2, b"k")),
        diag: Diag::Reserved(20),
        ..packet()
    };
    let j = serde_json::to_string(&p).unwrap();
    assert_eq!(serde_json::from_str::<ControlPacket>(&j).unwrap(), p);
    let e = DropReason::Decode(DecodeError::ZeroYourDiscriminator(State::Init));
    let j = serde_json::to_string(&e).unwrap();
    assert_eq!(serde_json::from_str::<DropReason>(&j).unwrap(), e);
    assert_eq!(e.to_string(), "Your Discriminator is zero in state Init");
}

// ---------------------------------------------------------------- session

fn cfg(tx_ms: u32, rx_ms: u32, mult: u8) -> SessionConfig {
    SessionConfig {
        desired_min_tx_us: tx_ms * 1000,
        required_min_rx_us: rx_ms * 1000,
        detect_mult: mult,
        passive: false,
        auth: None,
    }
}

fn disc(n: u32) -> NonZeroU32 {
    NonZeroU32::new(n).unwrap()
}

fn sent(out: &[Output]) -> Vec<ControlPacket> {
    out.iter()
        .filter_map(|o| match o {
            Output::Send(b) => Some(ControlPacket::decode(b).expect("we send valid packets")),
            _ => None,
        })
        .collect()
}

fn changes(out: &[Output]) -> Vec<(State, State, Diag)> {
    out.iter()
        .filter_map(|o| match o {
            Output::StateChanged { from, to, diag } => Some((*from, *to, *diag)),
            _ => None,
        })
        .collect()
}

/// Two sessions on a link with no delay. `link[0]` carries a → b,
/// `link[1]` b → a.
struct Pair {
    a: Session,
    b: Session,
    now: Duration,
    link: [bool; 2],
    /// Every output with its time and side (0 = a, 1 = b).
    log: Vec<(Duration, usize, Output)>,
}

impl Pair {
    fn new(ca: SessionConfig, cb: SessionConfig) -> Pair {
        let now = Duration::from_secs(100);
        Pair {
            a: Session::new(ca, disc(0xa), 1, now).unwrap(),
            b: Session::new(cb, disc(0xb), 2, now).unwrap(),
            now,
            link: [true, true],
            log: Vec::new(),
        }
    }

    fn side(&mut self, i: usize) -> &mut Session {
        if i == 0 {
            &mut self.a
        } else {
            &mut self.b
        }
    }

    /// Feed `input` to side `i` now and deliver what it sends, recursively.
    fn input(&mut self, i: usize, input: Input) {
        let mut queue = vec![(i, input)];
        while let Some((i, input)) = queue.pop() {
            let now = self.now;
            let out = self.side(i).handle(now, input);
            for o in out {
                if let Output::Send(b) = &o {
                    if self.link[i] {
                        queue.insert(0, (1 - i, Input::Received(b.clone())));
                    }
                }
                self.log.push((now, i, o));
            }
        }
    }

    /// Run the timers until `until`.
    fn run_until(&mut self, until: Duration) {
        loop {
            let next = [self.a.next_deadline(), self.b.next_deadline()];
            let Some((i, t)) = next
                .iter()
                .enumerate()
                .filter_map(|(i, t)| t.map(|t| (i, t)))
                .min_by_key(|(_, t)| *t)
            else {
                break;
            };
            if t > until {
                break;
            }
            self.now = t.max(self.now);
            self.input(i, Input::Timer);
        }
        self.now = until;
    }

    fn run_for(&mut self, d: Duration) {
        self.run_until(self.now + d);
    }

    fn outputs(&self, side: usize, since: Duration) -> Vec<Output> {
        self.log
            .iter()
            .filter(|(t, s, _)| *s == side && *t >= since)
            .map(|(_, _, o)| o.clone())
            .collect()
    }

    /// Times of the packets side `i` sent since `since`.
    fn send_times(&self, side: usize, since: Duration) -> Vec<Duration> {
        self.log
            .iter()
            .filter(|(t, s, o)| *s == side && *t >= since && matches!(o, Output::Send(_)))
            .map(|(t, _, _)| *t)
            .collect()
    }
}

fn up_pair(ca: SessionConfig, cb: SessionConfig) -> Pair {
    let mut p = Pair::new(ca, cb);
    p.run_for(Duration::from_secs(5));
    assert_eq!((p.a.state(), p.b.state()), (State::Up, State::Up));
    assert!(!p.a.polling() && !p.b.polling());
    p
}

#[test]
fn three_way_handshake() {
    let mut p = Pair::new(cfg(100, 100, 3), cfg(100, 100, 3));
    let t0 = p.now;
    p.run_for(Duration::from_secs(3));
    let a = changes(&p.outputs(0, t0));
    let b = changes(&p.outputs(1, t0));
    // a sends first (Down, Your Discriminator 0); b goes Init; a sees Init
    // and goes Up; b sees Up and goes Up.
    assert_eq!(a, vec![(State::Down, State::Up, Diag::None)]);
    assert_eq!(
        b,
        vec![
            (State::Down, State::Init, Diag::None),
            (State::Init, State::Up, Diag::None)
        ]
    );
    assert_eq!(p.a.remote_discriminator(), 0xb);
    assert_eq!(p.b.remote_discriminator(), 0xa);
    // Going Up lowered Desired Min TX from 1 s to 100 ms: a Poll, ended
    // by the peer's Final.
    assert!(p.outputs(0, t0).contains(&Output::PollComplete));
    assert_eq!(p.a.tx_interval(), Some(ms(100)));
    assert_eq!(p.a.detection_time(), Some(ms(300)));
}

#[test]
fn slow_transmission_while_not_up() {
    let mut p = Pair::new(cfg(50, 50, 3), cfg(50, 50, 3));
    p.link = [false, false];
    let t0 = p.now;
    p.run_for(Duration::from_secs(10));
    let times = p.send_times(0, t0);
    assert!(times.len() >= 10 && times.len() <= 14, "{}", times.len());
    for w in times.windows(2) {
        let d = w[1] - w[0];
        assert!(d >= ms(750) && d <= ms(1000), "{d:?}");
    }
    for pkt in sent(&p.outputs(0, t0)) {
        assert_eq!((pkt.state, pkt.desired_min_tx_us), (State::Down, 1_000_000));
        assert_eq!(pkt.required_min_rx_us, 50_000);
    }
}

#[test]
fn jitter_is_within_bounds_and_deterministic() {
    for (mult, lo, hi) in [(3u8, 75, 100), (1, 75, 90)] {
        let mut p = up_pair(cfg(100, 100, mult), cfg(100, 100, mult));
        let t0 = p.now;
        p.run_for(Duration::from_secs(20));
        let times = p.send_times(0, t0);
        let gaps: Vec<Duration> = times.windows(2).map(|w| w[1] - w[0]).collect();
        assert!(gaps.len() > 150);
        for d in &gaps {
            assert!(*d >= ms(lo) && *d <= ms(hi), "mult {mult}: {d:?}");
        }
        let min = gaps.iter().min().unwrap();
        let max = gaps.iter().max().unwrap();
        assert!(*min < ms(lo + 3) && *max > ms(hi - 3), "{min:?} {max:?}");
        let mut again = up_pair(cfg(100, 100, mult), cfg(100, 100, mult));
        again.run_for(Duration::from_secs(20));
        assert_eq!(again.send_times(0, t0), times, "same seed, same schedule");
        assert_eq!(again.a, p.a);
    }
}

#[test]
fn detection_time_expiry() {
    // a asks for 200 ms, b sends at 100 ms with multiplier 4: a detects
    // after 4 × max(200, 100) = 800 ms.
    let mut p = up_pair(cfg(100, 200, 3), cfg(100, 100, 4));
    assert_eq!(p.a.detection_time(), Some(ms(800)));
    assert_eq!(p.b.detection_time(), Some(ms(300)));
    p.link[1] = false;
    let cut = p.now;
    let last_rx = p.send_times(1, Duration::ZERO).last().copied().unwrap();
    p.run_for(Duration::from_secs(2));
    let down: Vec<_> = p
        .log
        .iter()
        .filter(|(t, s, o)| *t >= cut && *s == 0 && matches!(o, Output::StateChanged { .. }))
        .collect();
    assert_eq!(down.len(), 1);
    assert_eq!(down[0].0, last_rx + ms(800));
    assert_eq!(
        down[0].2,
        Output::StateChanged {
            from: State::Up,
            to: State::Down,
            diag: Diag::ControlDetectionTimeExpired
        }
    );
    // b hears a's Down and follows with Neighbor Signaled Session Down.
    assert_eq!(
        changes(&p.outputs(1, cut))[0],
        (State::Up, State::Down, Diag::NeighborSignaledSessionDown)
    );
    assert_eq!(p.a.local_diag(), Diag::ControlDetectionTimeExpired);
    // a back at the slow rate, advertising 1 s.
    let last = sent(&p.outputs(0, cut)).pop().unwrap();
    assert_eq!(
        (last.desired_min_tx_us, last.diag),
        (1_000_000, Diag::ControlDetectionTimeExpired)
    );
    // Link back: up again, diagnostic cleared.
    p.link[1] = true;
    p.run_for(Duration::from_secs(5));
    assert_eq!((p.a.state(), p.b.state()), (State::Up, State::Up));
    assert_eq!(p.a.local_diag(), Diag::None);
}

#[test]
fn admin_down_both_ways() {
    let mut p = up_pair(cfg(100, 100, 3), cfg(100, 100, 3));
    let t0 = p.now;
    p.input(0, Input::AdminDown);
    assert_eq!(
        changes(&p.outputs(0, t0)),
        vec![(State::Up, State::AdminDown, Diag::AdministrativelyDown)]
    );
    assert_eq!(
        changes(&p.outputs(1, t0)),
        vec![(State::Up, State::Down, Diag::NeighborSignaledSessionDown)]
    );
    p.run_for(Duration::from_secs(5));
    // a stays AdminDown, keeps telling b at the slow rate; b stays Down.
    assert_eq!((p.a.state(), p.b.state()), (State::AdminDown, State::Down));
    let from_a = sent(&p.outputs(0, t0));
    assert!(from_a.len() >= 5);
    assert!(from_a
        .iter()
        .all(|k| k.state == State::AdminDown && k.diag == Diag::AdministrativelyDown));
    p.input(0, Input::AdminDown);
    let t1 = p.now;
    p.input(0, Input::AdminUp);
    p.run_for(Duration::from_secs(5));
    assert_eq!((p.a.state(), p.b.state()), (State::Up, State::Up));
    assert_eq!(
        changes(&p.outputs(0, t1))[0],
        (State::AdminDown, State::Down, Diag::None)
    );
    // The other way: b goes AdminDown, a sees it.
    let t2 = p.now;
    p.input(1, Input::AdminDown);
    assert_eq!(
        changes(&p.outputs(0, t2)),
        vec![(State::Up, State::Down, Diag::NeighborSignaledSessionDown)]
    );
}

#[test]
fn poll_sequence_for_slower_tx_applies_after_final() {
    let mut p = up_pair(cfg(100, 100, 3), cfg(100, 100, 3));
    p.link[1] = false; // hold b's Final back
    let t0 = p.now;
    p.input(0, Input::Configure(cfg(300, 100, 3)));
    let first = sent(&p.outputs(0, t0));
    assert_eq!(first.len(), 1);
    assert!(first[0].poll && !first[0].final_);
    assert_eq!(first[0].desired_min_tx_us, 300_000);
    assert!(p.a.polling());
    // An increase waits for the Final: a keeps sending at 100 ms, with P.
    assert_eq!(p.a.tx_interval(), Some(ms(100)));
    assert_eq!(
        p.b.detection_time(),
        Some(ms(900)),
        "b applies a's new TX at once"
    );
    p.run_for(ms(250));
    let polls = sent(&p.outputs(0, t0));
    assert!(polls.len() >= 3 && polls.iter().all(|k| k.poll));
    // b answered every Poll with a Final (not delivered).
    assert!(sent(&p.outputs(1, t0)).iter().any(|k| k.final_ && !k.poll));
    p.link[1] = true;
    let t1 = p.now;
    p.run_for(ms(400));
    assert!(p.outputs(0, t1).contains(&Output::PollComplete));
    assert!(!p.a.polling());
    assert_eq!(p.a.tx_interval(), Some(ms(300)));
    let t2 = p.now;
    p.run_for(Duration::from_secs(3));
    assert!(sent(&p.outputs(0, t2)).iter().all(|k| !k.poll));
    assert!(changes(&p.outputs(0, t0)).is_empty() && changes(&p.outputs(1, t0)).is_empty());
}

#[test]
fn poll_sequence_for_faster_rx_keeps_old_detection_time() {
    let mut p = up_pair(cfg(100, 300, 3), cfg(100, 100, 3));
    assert_eq!(p.a.detection_time(), Some(ms(900)));
    p.link[1] = false;
    p.input(0, Input::Configure(cfg(100, 100, 3)));
    assert!(p.a.polling());
    // Until the Final, a's detection time still uses the old Required Min RX.
    assert_eq!(p.a.detection_time(), Some(ms(900)));
    assert_eq!(p.a.advertised_intervals(), (100_000, 100_000));
    p.link[1] = true;
    p.run_for(ms(300));
    assert!(!p.a.polling());
    assert_eq!(p.a.detection_time(), Some(ms(300)));
    // b now sends faster: its interval follows a's Required Min RX.
    assert_eq!(p.b.tx_interval(), Some(ms(100)));
}

#[test]
fn change_during_poll_starts_another_after_it() {
    let mut p = up_pair(cfg(100, 100, 3), cfg(100, 100, 3));
    p.link[1] = false;
    p.input(0, Input::Configure(cfg(200, 100, 3)));
    p.input(0, Input::Configure(cfg(400, 100, 3)));
    assert_eq!(p.a.advertised_intervals().0, 200_000);
    p.link[1] = true;
    let t0 = p.now;
    p.run_for(Duration::from_secs(2));
    let completes = p
        .outputs(0, t0)
        .iter()
        .filter(|o| **o == Output::PollComplete)
        .count();
    assert_eq!(completes, 2);
    assert_eq!(p.a.tx_interval(), Some(ms(400)));
    assert!(!p.a.polling());
}

#[test]
fn no_poll_for_unchanged_intervals_or_outside_up() {
    let mut p = up_pair(cfg(100, 100, 3), cfg(100, 100, 3));
    let t0 = p.now;
    p.input(0, Input::Configure(cfg(100, 100, 5)));
    assert!(!p.a.polling());
    p.input(0, Input::AdminDown);
    p.input(0, Input::Configure(cfg(200, 200, 3)));
    assert!(!p.a.polling());
    assert!(sent(&p.outputs(0, t0)).iter().all(|k| !k.poll));
    // An invalid configuration is refused.
    p.input(0, Input::Configure(cfg(0, 100, 3)));
    assert_eq!(p.a.config().desired_min_tx_us, 200_000);
}

#[test]
fn passive_waits_and_zero_min_rx_silences() {
    let mut cb = cfg(100, 100, 3);
    cb.passive = true;
    let mut p = Pair::new(cfg(100, 100, 3), cb);
    assert_eq!(p.b.next_deadline(), None);
    p.link[0] = false;
    let t0 = p.now;
    p.run_for(Duration::from_secs(3));
    assert!(p.send_times(1, t0).is_empty());
    p.link[0] = true;
    p.run_for(Duration::from_secs(3));
    assert_eq!((p.a.state(), p.b.state()), (State::Up, State::Up));
    // b asks for no packets: a stops periodic transmission.
    p.input(
        1,
        Input::Configure(SessionConfig {
            required_min_rx_us: 0,
            ..p.b.config().clone()
        }),
    );
    p.run_for(Duration::from_secs(1));
    let t1 = p.now;
    p.run_for(Duration::from_secs(1));
    assert!(p.send_times(0, t1).is_empty());
    assert_eq!(p.a.tx_interval(), None);
}

#[test]
fn drops_name_their_reason() {
    let mut p = up_pair(cfg(100, 100, 3), cfg(100, 100, 3));
    let now = p.now;
    let mut wrong = packet();
    wrong.your_discriminator = 0x77;
    let out = p.a.handle(now, Input::Received(wrong.encode()));
    assert_eq!(
        out,
        vec![Output::Dropped(DropReason::YourDiscriminator {
            got: 0x77,
            ours: 0xa
        })]
    );
    let out = p.a.handle(now, Input::Received(vec![0x20; 10]));
    assert_eq!(
        out,
        vec![Output::Dropped(DropReason::Decode(DecodeError::TooShort(
            10
        )))]
    );
    let signed = ControlPacket {
        your_discriminator: 0xa,
        auth: Some(Auth::unsigned(AuthType::KeyedSha1, 1, 1, b"k")),
        ..packet()
    };
    let out =
        p.a.handle(now, Input::Received(signed.encode_signed(b"k").unwrap()));
    assert_eq!(out, vec![Output::Dropped(DropReason::UnexpectedAuth)]);
    assert_eq!(p.a.stats().packets_dropped, 3);
    assert_eq!(p.a.state(), State::Up);
}

fn auth_cfg(t: AuthType) -> SessionConfig {
    SessionConfig {
        auth: Some(AuthConfig {
            auth_type: t,
            key_id: 9,
            key: b"s3cret".to_vec(),
        }),
        ..cfg(100, 100, 3)
    }
}

fn seqs(out: &[Output]) -> Vec<u32> {
    sent(out)
        .iter()
        .map(|k| k.auth.as_ref().unwrap().seq().unwrap())
        .collect()
}

#[test]
fn meticulous_sequence_numbers_and_replay() {
    for t in [AuthType::MeticulousKeyedMd5, AuthType::MeticulousKeyedSha1] {
        let mut p = up_pair(auth_cfg(t), auth_cfg(t));
        let t0 = p.now;
        p.run_for(Duration::from_secs(2));
        let s = seqs(&p.outputs(0, t0));
        assert!(s.len() > 15);
        for w in s.windows(2) {
            assert_eq!(w[1], w[0].wrapping_add(1), "{t}: every packet");
        }
        // Replaying a's last packet to b is refused.
        let last = p
            .outputs(0, t0)
            .into_iter()
            .filter_map(|o| match o {
                Output::Send(b) => Some(b),
                _ => None,
            })
            .next_back()
            .unwrap();
        let now = p.now;
        let out = p.b.handle(now, Input::Received(last));
        assert!(
            matches!(out[..], [Output::Dropped(DropReason::Sequence { .. })]),
            "{t}: {out:?}"
        );
        assert_eq!(p.b.state(), State::Up);
    }
}

#[test]
fn keyed_sequence_numbers_change_with_content_and_window() {
    for t in [AuthType::KeyedMd5, AuthType::KeyedSha1] {
        let mut p = up_pair(auth_cfg(t), auth_cfg(t));
        let t0 = p.now;
        p.run_for(Duration::from_secs(2));
        let s = seqs(&p.outputs(0, t0));
        assert!(
            s.windows(2).all(|w| w[0] == w[1]),
            "{t}: steady state, same number"
        );
        // A Poll changes the content: the number advances.
        let t1 = p.now;
        p.input(
            0,
            Input::Configure(SessionConfig {
                desired_min_tx_us: 150_000,
                ..auth_cfg(t)
            }),
        );
        p.run_for(ms(500));
        let s1 = seqs(&p.outputs(0, t1));
        assert!(s1[0] == s[s.len() - 1].wrapping_add(1), "{t}: {s:?} {s1:?}");
        assert_eq!(p.a.state(), State::Up);
        // Replay of the same number is accepted for keyed (window starts at
        // the last number), a jump past 3 × Detect Mult is not.
        let now = p.now;
        let seq = *s1.last().unwrap();
        let forged = |n: u32| {
            ControlPacket {
                my_discriminator: 0xa,
                your_discriminator: 0xb,
                auth: Some(Auth::unsigned(t, 9, n, b"s3cret")),
                ..packet()
            }
            .encode_signed(b"s3cret")
            .unwrap()
        };
        assert!(!p
            .b
            .handle(now, Input::Received(forged(seq)))
            .iter()
            .any(|o| matches!(o, Output::Dropped(_))));
        let out =
            p.b.handle(now, Input::Received(forged(seq.wrapping_add(10))));
        assert!(
            matches!(out[..], [Output::Dropped(DropReason::Sequence { .. })]),
            "{out:?}"
        );
        // A wrong key is an authentication failure.
        let mut bad = forged(seq);
        let n = bad.len();
        bad[n - 1] ^= 0xff;
        let out = p.b.handle(now, Input::Received(bad));
        assert_eq!(
            out,
            vec![Output::Dropped(DropReason::Auth(AuthError::BadDigest))]
        );
    }
}

#[test]
fn auth_sequence_forgotten_after_twice_detection_time() {
    let t = AuthType::MeticulousKeyedSha1;
    let mut p = up_pair(auth_cfg(t), auth_cfg(t));
    p.link = [false, false];
    let seq = p.a.resume_state().xmit_auth_seq;
    p.run_for(Duration::from_secs(20));
    // Both Down; a's sequence went past b's window (3 × 3) meanwhile, but
    // b forgot the last number after twice its detection time.
    assert!(p.a.resume_state().xmit_auth_seq.wrapping_sub(seq) > 9);
    p.link = [true, true];
    p.run_for(Duration::from_secs(5));
    assert_eq!((p.a.state(), p.b.state()), (State::Up, State::Up));
}

#[test]
fn simple_password_session() {
    let t = AuthType::SimplePassword;
    let mut p = up_pair(auth_cfg(t), auth_cfg(t));
    let now = p.now;
    let pkt = sent(&p.outputs(0, Duration::ZERO)).pop().unwrap();
    assert_eq!(
        pkt.auth,
        Some(Auth::SimplePassword {
            key_id: 9,
            password: b"s3cret".to_vec()
        })
    );
    let mut other = auth_cfg(t);
    other.auth.as_mut().unwrap().key = b"other".to_vec();
    p.b.handle(now, Input::Configure(other));
    p.run_for(Duration::from_secs(2));
    assert_eq!(p.b.state(), State::Down);
    assert!(p
        .outputs(1, now)
        .contains(&Output::Dropped(DropReason::Auth(AuthError::BadPassword))));
}

#[test]
fn config_validation() {
    let bad = |c: SessionConfig| Session::new(c, disc(1), 0, Duration::ZERO).unwrap_err();
    assert_eq!(bad(cfg(100, 100, 0)), ConfigError::ZeroDetectMult);
    assert_eq!(bad(cfg(0, 100, 3)), ConfigError::ZeroDesiredMinTx);
    let mut c = auth_cfg(AuthType::SimplePassword);
    c.auth.as_mut().unwrap().key = vec![];
    assert_eq!(bad(c), ConfigError::PasswordLen(0));
    let mut c = auth_cfg(AuthType::KeyedMd5);
    c.auth.as_mut().unwrap().key = vec![1; 17];
    assert_eq!(bad(c), ConfigError::KeyTooLong { len: 17, max: 16 });
    let mut c = auth_cfg(AuthType::KeyedSha1);
    c.auth.as_mut().unwrap().key = vec![1; 20];
    assert!(Session::new(c, disc(1), 0, Duration::ZERO).is_ok());
}

/// Non-stop BFD: a backup resumes a's session from its replicated state.
/// The peer sees the same discriminators, state Up, the same intervals, no
/// Poll, and never leaves Up.
#[test]
fn resume_keeps_the_peer_up_without_a_poll() {
    for t in [
        None,
        Some(AuthType::MeticulousKeyedSha1),
        Some(AuthType::KeyedMd5),
    ] {
        let c = t.map_or(cfg(100, 100, 3), auth_cfg);
        let mut p = up_pair(c.clone(), c.clone());
        let mut rs = p.a.resume_state();
        assert_eq!(rs.state, State::Up);
        // The store holds a sequence number ahead of what was sent.
        rs.xmit_auth_seq = rs.xmit_auth_seq.wrapping_add(3);
        // The primary dies; 150 ms later (< 300 ms detection) the backup
        // takes over.
        p.link[0] = false;
        p.run_for(ms(150));
        let json = serde_json::to_string(&rs).unwrap();
        let rs: ResumeState = serde_json::from_str(&json).unwrap();
        let (backup, first) = Session::resume(c.clone(), rs, 99, p.now).unwrap();
        let pkts = sent(&first);
        assert_eq!(pkts.len(), 1);
        let k = &pkts[0];
        assert_eq!((k.state, k.poll, k.final_), (State::Up, false, false));
        assert_eq!((k.my_discriminator, k.your_discriminator), (0xa, 0xb));
        assert_eq!(
            (k.desired_min_tx_us, k.required_min_rx_us),
            (100_000, 100_000)
        );
        assert!(!backup.polling());
        p.a = backup;
        p.link[0] = true;
        let t0 = p.now;
        let Output::Send(bytes) = &first[0] else {
            unreachable!()
        };
        p.input(1, Input::Received(bytes.clone()));
        p.run_for(Duration::from_secs(5));
        assert!(changes(&p.outputs(1, t0)).is_empty(), "{t:?}: peer left Up");
        assert!(changes(&p.outputs(0, t0)).is_empty(), "{t:?}");
        assert!(
            !p.outputs(1, t0)
                .iter()
                .any(|o| matches!(o, Output::Dropped(_))),
            "{t:?}"
        );
        assert!(sent(&p.outputs(0, t0)).iter().all(|k| !k.poll), "{t:?}");
        assert_eq!((p.a.state(), p.b.state()), (State::Up, State::Up));
    }
}

/// A snapshot two seconds old: with meticulous SHA1 the peer's numbers
/// have moved past the replicated bfd.RcvAuthSeq, so the backup resumes
/// with it unknown; its own next number comes from the primary's live
/// counter (what the store must keep close).
#[test]
fn resume_from_a_stale_snapshot_with_meticulous_auth() {
    let c = auth_cfg(AuthType::MeticulousKeyedSha1);
    let mut p = up_pair(c.clone(), c.clone());
    let old = p.a.resume_state();
    p.run_for(Duration::from_secs(2));
    let live_seq = p.a.resume_state().xmit_auth_seq;
    p.link[0] = false;
    p.run_for(ms(100));
    let t0 = p.now;
    // The stale bfd.RcvAuthSeq would make the backup drop b's packets.
    let (mut stale, _) = Session::resume(c.clone(), old.clone(), 7, t0).unwrap();
    let b_last = p
        .outputs(1, Duration::ZERO)
        .into_iter()
        .filter_map(|o| match o {
            Output::Send(b) => Some(b),
            _ => None,
        })
        .next_back()
        .unwrap();
    assert!(matches!(
        stale.handle(t0, Input::Received(b_last))[..],
        [Output::Dropped(DropReason::Sequence { .. })]
    ));
    let rs = ResumeState {
        xmit_auth_seq: live_seq.wrapping_add(1),
        rcv_auth_seq: None,
        ..old
    };
    let (backup, first) = Session::resume(c, rs, 7, t0).unwrap();
    p.a = backup;
    p.link[0] = true;
    let Output::Send(bytes) = &first[0] else {
        unreachable!()
    };
    p.input(1, Input::Received(bytes.clone()));
    p.run_for(Duration::from_secs(3));
    assert!(changes(&p.outputs(0, t0)).is_empty() && changes(&p.outputs(1, t0)).is_empty());
    assert!(!p
        .outputs(0, t0)
        .iter()
        .chain(p.outputs(1, t0).iter())
        .any(|o| matches!(o, Output::Dropped(_))));
}

#[test]
fn resume_checks_and_whole_state_serde() {
    let rs = ResumeState {
        state: State::Up,
        local_diag: Diag::None,
        local_discriminator: 5,
        remote_discriminator: 0,
        desired_min_tx_us: 100_000,
        required_min_rx_us: 100_000,
        remote_detect_mult: 3,
        remote_desired_min_tx_us: 100_000,
        remote_min_rx_us: 100_000,
        xmit_auth_seq: 0,
        rcv_auth_seq: None,
        detect_mult: 3,
        auth: None,
    };
    assert_eq!(
        Session::resume(cfg(100, 100, 3), rs.clone(), 0, Duration::ZERO).unwrap_err(),
        ConfigError::ZeroRemoteDiscriminator(State::Up)
    );
    let zero = ResumeState {
        local_discriminator: 0,
        ..rs.clone()
    };
    assert_eq!(
        Session::resume(cfg(100, 100, 3), zero, 0, Duration::ZERO).unwrap_err(),
        ConfigError::ZeroLocalDiscriminator
    );
    // A snapshot of the whole session replays exactly.
    let mut p = up_pair(
        auth_cfg(AuthType::MeticulousKeyedMd5),
        auth_cfg(AuthType::MeticulousKeyedMd5),
    );
    let json = serde_json::to_string(&p.a).unwrap();
    let mut copy: Session = serde_json::from_str(&json).unwrap();
    assert_eq!(copy, p.a);
    let now = p.now + Duration::from_secs(1);
    assert_eq!(
        copy.handle(now, Input::Timer),
        p.a.handle(now, Input::Timer)
    );
    assert_eq!(copy, p.a);
    p.run_for(ms(10));
}

/// A resumed session does not time the peer before its path is in place
/// (the service address moves after the takeover is ready, possibly after
/// more than a detection time): seen in the lab, a backup at 100 ms x 3
/// declared the peer down while the address was still moving. From
/// `PathReady` (or the peer's first packet) detection runs as usual.
#[test]
fn a_resumed_session_times_the_peer_only_once_its_path_is_ready() {
    let c = cfg(100, 100, 3);
    let p = up_pair(c.clone(), c.clone());
    let rs = p.a.resume_state();
    let t0 = p.now;

    // No packet for 2 s while the address moves: still Up.
    let (mut s, _) = Session::resume(c.clone(), rs.clone(), 7, t0).unwrap();
    let mut out = Vec::new();
    let mut now = t0;
    while now < t0 + ms(2000) {
        now += ms(10);
        out.extend(s.handle(now, Input::Timer));
    }
    assert!(changes(&out).is_empty(), "{:?}", changes(&out));
    assert_eq!(s.state(), State::Up);

    // The path is ready; the peer stays silent: Down after 300 ms.
    let ready = now;
    out.extend(s.handle(ready, Input::PathReady));
    while s.state() == State::Up && now < ready + ms(1000) {
        now += ms(10);
        out.extend(s.handle(now, Input::Timer));
    }
    assert_eq!(
        changes(&out),
        [(State::Up, State::Down, Diag::ControlDetectionTimeExpired)]
    );
    let took = now - ready;
    assert!(took >= ms(300) && took <= ms(310), "{took:?}");

    // PathReady again, or on a session already timing, changes nothing.
    let (mut s, _) = Session::resume(c.clone(), rs, 7, t0).unwrap();
    assert!(s.handle(t0, Input::PathReady).is_empty());
    let d = s.next_deadline();
    assert!(s.handle(t0 + ms(50), Input::PathReady).is_empty());
    assert_eq!(s.next_deadline(), d);
}
