//! The codec against control packets captured from bird2 2.0.12 and frr
//! bfdd 8.4.4 (`fixtures/capture.sh`): every fixture decodes to the values
//! its daemon was configured with, re-encodes to the same octets, and its
//! password or digest verifies with the configured key. A session fed the
//! captured packets comes up with them.

use holdfast_bfd::*;
use std::num::NonZeroU32;
use std::path::PathBuf;
use std::time::Duration;

const KEY: &[u8] = b"holdfast-bfd-key";
const KEY_ID: u8 = 7;

struct Fixture {
    name: String,
    source: String,
    auth: String,
    state: State,
    diag: u8,
    bytes: Vec<u8>,
}

fn dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

/// `<source>_<auth>_<state>[_diag<N>].bin`, auth possibly `meticulous_md5`.
fn fixtures() -> Vec<Fixture> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir()).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().map_or(true, |e| e != "bin") {
            continue;
        }
        let name = path.file_stem().unwrap().to_string_lossy().into_owned();
        let mut parts: Vec<&str> = name.split('_').collect();
        let diag = match parts.last().and_then(|p| p.strip_prefix("diag")) {
            Some(n) => {
                let n = n.parse().unwrap();
                parts.pop();
                n
            }
            None => 0,
        };
        let state = match parts.pop().unwrap() {
            "admindown" => State::AdminDown,
            "down" => State::Down,
            "init" => State::Init,
            "up" => State::Up,
            other => panic!("{name}: unknown state {other}"),
        };
        let source = parts.remove(0).to_string();
        out.push(Fixture {
            source,
            auth: parts.join("_"),
            state,
            diag,
            bytes: std::fs::read(&path).unwrap(),
            name,
        });
    }
    out.sort_by(|a, b| a.name.cmp(&b.name));
    out
}

fn auth_type(name: &str) -> Option<AuthType> {
    match name {
        "none" => None,
        "simple" => Some(AuthType::SimplePassword),
        "md5" => Some(AuthType::KeyedMd5),
        "meticulous_md5" => Some(AuthType::MeticulousKeyedMd5),
        "sha1" => Some(AuthType::KeyedSha1),
        "meticulous_sha1" => Some(AuthType::MeticulousKeyedSha1),
        other => panic!("unknown auth {other}"),
    }
}

#[test]
fn every_fixture_decodes_to_its_configuration() {
    let all = fixtures();
    assert!(all.len() >= 30, "only {} fixtures", all.len());
    for f in &all {
        let p = ControlPacket::decode(&f.bytes).unwrap_or_else(|e| panic!("{}: {e}", f.name));
        let n = &f.name;
        assert_eq!(f.bytes[0] >> 5, 1, "{n}: version");
        assert_eq!(p.state, f.state, "{n}");
        assert_eq!(p.diag.code(), f.diag, "{n}");
        assert_ne!(p.my_discriminator, 0, "{n}");
        if matches!(f.state, State::Init | State::Up) {
            assert_ne!(p.your_discriminator, 0, "{n}");
        }
        assert!(!(p.poll && p.final_), "{n}: P and F together");
        assert!(!p.demand && !p.control_plane_independent, "{n}");
        if f.source == "frr" {
            // transmit-interval 250, receive-interval 300, detect-multiplier 4;
            // frr advertises 1 s both ways until Up.
            assert_eq!(p.detect_mult, 4, "{n}");
            let want = if f.state == State::Init {
                (1_000_000, 1_000_000)
            } else {
                (250_000, 300_000)
            };
            assert_eq!((p.desired_min_tx_us, p.required_min_rx_us), want, "{n}");
            assert_eq!(p.required_min_echo_rx_us, 50_000, "{n}");
        } else {
            // bird: interval 200 ms, multiplier 3; idle tx interval 1 s.
            assert_eq!(p.detect_mult, 3, "{n}");
            let tx = if f.state == State::Up {
                200_000
            } else {
                1_000_000
            };
            assert_eq!(p.desired_min_tx_us, tx, "{n}");
            assert_eq!(p.required_min_rx_us, 200_000, "{n}");
            assert_eq!(p.required_min_echo_rx_us, 0, "{n}");
        }
        assert_eq!(p.encode(), f.bytes, "{n}: re-encoding");
        assert_eq!(p.wire_len(), f.bytes.len(), "{n}");
        match (auth_type(&f.auth), &p.auth) {
            (None, None) => {}
            (Some(t), Some(a)) => {
                assert_eq!(a.auth_type(), t, "{n}");
                assert_eq!(a.key_id(), KEY_ID, "{n}");
                assert_eq!(verify(&f.bytes, t, KEY_ID, KEY), Ok(p.clone()), "{n}");
            }
            (want, got) => panic!("{n}: auth {want:?}, decoded {got:?}"),
        }
    }
}

#[test]
fn captured_digests_are_reproduced_and_tampering_is_caught() {
    for f in fixtures() {
        let Some(t) = auth_type(&f.auth) else {
            continue;
        };
        let n = &f.name;
        let p = ControlPacket::decode(&f.bytes).unwrap();
        if let Some(Auth::SimplePassword { password, .. }) = &p.auth {
            assert_eq!(password, KEY, "{n}");
        }
        if t.is_keyed() {
            let a = p.auth.as_ref().unwrap();
            let unsigned = ControlPacket {
                auth: Some(Auth::unsigned(t, KEY_ID, a.seq().unwrap(), KEY)),
                ..p.clone()
            };
            assert_eq!(
                unsigned.encode_signed(KEY).unwrap(),
                f.bytes,
                "{n}: signing"
            );
        }
        let wrong = verify(&f.bytes, t, KEY_ID, b"not-the-key");
        let expect = if t.is_keyed() {
            AuthError::BadDigest
        } else {
            AuthError::BadPassword
        };
        assert_eq!(wrong, Err(expect.clone()), "{n}");
        assert!(matches!(
            verify(&f.bytes, t, KEY_ID + 1, KEY),
            Err(AuthError::WrongKeyId { got: 7, .. })
        ));
        // Flip one bit of Desired Min TX: the digest no longer verifies.
        let mut tampered = f.bytes.clone();
        tampered[12] ^= 1;
        if t.is_keyed() {
            assert_eq!(verify(&tampered, t, KEY_ID, KEY), Err(expect), "{n}");
        }
    }
}

#[test]
fn pairs_agree_on_discriminators_and_sequence_numbers_advance() {
    let all = fixtures();
    let find = |name: &str| {
        let f = all.iter().find(|f| f.name == name).unwrap();
        ControlPacket::decode(&f.bytes).unwrap()
    };
    for auth in ["simple", "md5", "meticulous_md5", "sha1", "meticulous_sha1"] {
        let a = find(&format!("bird_{auth}_up"));
        let b = find(&format!("birdpeer_{auth}_up"));
        assert_eq!(a.your_discriminator, b.my_discriminator, "{auth}");
        assert_eq!(b.your_discriminator, a.my_discriminator, "{auth}");
        if auth != "simple" {
            let down = find(&format!("bird_{auth}_down"));
            let seq = |p: &ControlPacket| p.auth.as_ref().unwrap().seq().unwrap();
            let ahead = seq(&a).wrapping_sub(seq(&down));
            assert!((1..100).contains(&ahead), "{auth}: {ahead}");
        }
    }
    let bird = find("bird_none_up");
    let frr = find("frr_none_up");
    assert_eq!(bird.your_discriminator, frr.my_discriminator);
    assert_eq!(frr.your_discriminator, bird.my_discriminator);
}

/// A session that takes birdpeer's place: bird's captured Down and Up
/// packets bring it Down → Init → Up, and it answers bird's Poll.
#[test]
fn session_comes_up_with_captured_bird_packets() {
    let all = fixtures();
    let bytes = |name: &str| all.iter().find(|f| f.name == name).unwrap().bytes.clone();
    for auth in [
        "none",
        "simple",
        "md5",
        "meticulous_md5",
        "sha1",
        "meticulous_sha1",
    ] {
        let up = bytes(&format!("bird_{auth}_up"));
        let ours = ControlPacket::decode(&up).unwrap().your_discriminator;
        let cfg = SessionConfig {
            desired_min_tx_us: 200_000,
            required_min_rx_us: 200_000,
            detect_mult: 3,
            passive: false,
            auth: auth_type(auth).map(|auth_type| AuthConfig {
                auth_type,
                key_id: KEY_ID,
                key: KEY.to_vec(),
            }),
        };
        let t0 = Duration::from_secs(10);
        let mut s = Session::new(cfg, NonZeroU32::new(ours).unwrap(), 1, t0).unwrap();
        let out = s.handle(t0, Input::Received(bytes(&format!("bird_{auth}_down"))));
        assert!(
            out.contains(&Output::StateChanged {
                from: State::Down,
                to: State::Init,
                diag: Diag::None
            }),
            "{auth}: {out:?}"
        );
        let t1 = t0 + Duration::from_millis(500);
        let out = s.handle(t1, Input::Received(up.clone()));
        assert_eq!(s.state(), State::Up, "{auth}: {out:?}");
        let sent: Vec<ControlPacket> = out
            .iter()
            .filter_map(|o| match o {
                Output::Send(b) => Some(ControlPacket::decode(b).unwrap()),
                _ => None,
            })
            .collect();
        let bird = ControlPacket::decode(&up).unwrap();
        assert_eq!(sent.len(), 1, "{auth}: {out:?}");
        assert_eq!(sent[0].final_, bird.poll, "{auth}");
        assert_eq!(sent[0].your_discriminator, bird.my_discriminator);
        if let Some(t) = auth_type(auth) {
            let Output::Send(b) = out.iter().find(|o| matches!(o, Output::Send(_))).unwrap() else {
                unreachable!()
            };
            verify(b, t, KEY_ID, KEY).unwrap();
        }
    }
}
