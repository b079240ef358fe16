//! A recorded session replays to the same outputs: a takeover with RIB
//! output held until the resume, ROUTE-REFRESH requests pending across
//! other inputs and answered later; a changed output is found.

use super::*;
use crate::core::refresh_tests::{refresh_msg, resume_with_held_output};
use crate::core::tests::{keepalive, params, rib_bytes, t};
use holdfast_wire::Family;

/// A fresh directory under the system's temporary one.
fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("holdfast-neighbor-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

/// Feeds `input` through `core` as the shell does, recording it.
fn step(core: &mut PeerCore, rec: &mut Recorder, ms: u64, input: PeerInput) -> Vec<PeerOutput> {
    let line = rec.input_line(t(ms), &input);
    let out = core.handle(t(ms), input);
    rec.write(line, &out);
    out
}

#[test]
fn a_takeover_with_held_output_and_pending_refreshes_replays_identically() {
    let dir = temp_dir("replay");
    let peer: IpAddr = "10.0.0.9".parse().expect("address");
    let mut rec = Recorder::create(&dir, "default", peer, &params()).expect("recorder");
    let mut core = PeerCore::new(params());

    // The takeover, recorded input by input: held RIB output, then the
    // resume with one request the old primary had not answered.
    let mut live = PeerCore::new(params());
    let resumed = resume_with_held_output(&mut live, vec![Family::IPV6_UNICAST]);
    assert!(resumed.contains(&PeerOutput::WriteRib(rib_bytes(2))));
    step(&mut core, &mut rec, 0, PeerInput::Start { resuming: true });
    for (ms, input) in [
        (
            10,
            PeerInput::RibSend {
                gen: 1,
                bytes: rib_bytes(2),
            },
        ),
        (11, PeerInput::RibRefreshed { gen: 1 }),
        (
            12,
            PeerInput::RibSend {
                gen: 1,
                bytes: rib_bytes(1),
            },
        ),
    ] {
        assert!(step(&mut core, &mut rec, ms, input).is_empty());
    }
    let local = holdfast_fsm::open_for_config(&params().session);
    let remote = crate::core::tests::peer_open("10.0.0.9".parse().expect("id"), 90, false);
    let out = step(
        &mut core,
        &mut rec,
        50,
        PeerInput::Resume {
            local_open: local,
            remote_open: remote,
            refresh: vec![Family::IPV6_UNICAST],
        },
    );
    assert_eq!(out, resumed, "the recorded core decides as the live one");

    // A request from the peer stays pending across other inputs.
    let out = step(&mut core, &mut rec, 60, refresh_msg(Family::IPV4_UNICAST));
    assert_eq!(
        out.last(),
        Some(&PeerOutput::RefreshPending(vec![
            Family::IPV6_UNICAST,
            Family::IPV4_UNICAST
        ]))
    );
    step(&mut core, &mut rec, 70, keepalive(crate::Which::Main));
    step(
        &mut core,
        &mut rec,
        80,
        PeerInput::RibSend {
            gen: 1,
            bytes: rib_bytes(4),
        },
    );
    step(&mut core, &mut rec, 81, PeerInput::RibRefreshed { gen: 1 });
    step(&mut core, &mut rec, 90, PeerInput::Timer);
    let out = step(&mut core, &mut rec, 91, PeerInput::RibRefreshed { gen: 1 });
    assert_eq!(out, vec![PeerOutput::RefreshPending(vec![])]);
    rec.flush();
    drop(rec);

    let path = record_path(&dir, "default", peer);
    let report = replay(&path).expect("replay");
    assert_eq!(report.divergence, None);
    assert_eq!(report.inputs, 11);
    let text = std::fs::read_to_string(&path).expect("recording");
    for needle in ["RibRefreshed", "RefreshPending", "WriteRib", "\"refresh\":"] {
        assert!(text.contains(needle), "recording lacks {needle}");
    }

    // Negative control: the first held RIB output, released in the
    // resume's line, recorded as other bytes.
    const KEEPALIVE: &str = "ffffffffffffffffffffffffffffffff001304";
    let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
    let n = lines
        .iter()
        .position(|l| l.contains("\"Resume\""))
        .expect("resume line");
    let two = format!("{{\"WriteRib\":\"{KEEPALIVE}{KEEPALIVE}\"}}");
    assert!(lines[n].contains(&two), "{}", lines[n]);
    lines[n] = lines[n].replacen(&two, &format!("{{\"WriteRib\":\"{KEEPALIVE}\"}}"), 1);
    let bad = dir.join("tampered.jsonl");
    std::fs::write(&bad, lines.join("\n") + "\n").expect("write");
    let report = replay(&bad).expect("replay");
    assert_eq!(report.divergence.map(|d| d.line), Some(n + 1));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_recording_of_another_schema_is_refused() {
    let dir = temp_dir("schema");
    std::fs::create_dir_all(&dir).expect("dir");
    let path = dir.join("old.jsonl");
    std::fs::write(&path, "{\"schema\":1}\n").expect("write");
    assert!(matches!(
        replay(&path),
        Err(RecordError::Schema { found: 1, .. })
    ));
    let _ = std::fs::remove_dir_all(&dir);
}
