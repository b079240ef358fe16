//! A session with a real BIRD 2 recorded by `holdfastd --record DIR` and
//! replayed by `holdfast replay FILE` through the peer core.
//!
//! ```text
//!   [ h: holdfastd AS65000 ] 198.18.1.1 ===== link ===== 198.18.1.2 [ p: bird AS65001 ]
//!        --record <work dir>/record         holdfastd active, bird passive
//! ```
//!
//! Checked:
//! * routes both ways: holdfastd's `[[network]]` at BIRD (`birdc`), BIRD's routes in
//!   holdfastd's Adj-RIB-In, and one BIRD announces later;
//! * a ROUTE-REFRESH from BIRD (`birdc reload in`) reaches holdfastd: it is in the
//!   recording with the core's pending-request list and the RIB's answer (the
//!   RIB's bytes are inputs and outputs of the core too), and BIRD still holds
//!   holdfastd's route;
//! * a flap (`birdc restart`): BIRD's session is Established again, counted twice;
//! * `holdfast replay` of the recording: every output identical, exit status 0, and the
//!   recording holds the inputs above (OPEN, UPDATEs, ROUTE-REFRESH, NOTIFICATION,
//!   two PeerUp);
//! * negative control: the same recording with one recorded output changed is reported
//!   as differing at that line, with a non-zero exit status.

use holdfast_lab::{
    find_binary, skip_unless_ready, wait_ok, wait_until, Bird, Holdfastd, Lab, NeighborSpec, Peer,
    PeerKind, PeerSpec, RouteSpec, StartOpts,
};
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

const T: Duration = Duration::from_secs(30);

fn config(bird: IpAddr, local: IpAddr) -> String {
    format!(
        "[global]\nasn = 65000\nrouter_id = \"192.0.2.100\"\nconnect_retry = 1\nworkers = 1\n\n\
         [[neighbor]]\naddress = \"{bird}\"\nremote_asn = 65001\nlocal_address = \"{local}\"\n\
         import = \"all\"\nexport = \"all\"\n\n\
         [[network]]\nprefix = \"203.0.113.0/24\"\n"
    )
}

fn replay(file: &Path, json: bool) -> (bool, String) {
    let bin = find_binary("holdfast", "HOLDFAST_BIN").expect("holdfast binary");
    let mut cmd = Command::new(bin);
    cmd.arg("replay").arg(file);
    if json {
        cmd.arg("--json");
    }
    let out = cmd.output().expect("run holdfast replay");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

fn recording(dir: &Path) -> PathBuf {
    let files: Vec<PathBuf> = std::fs::read_dir(dir)
        .expect("record dir")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .collect();
    assert_eq!(files.len(), 1, "one neighbour, one file: {files:?}");
    files[0].clone()
}

#[test]
fn record_and_replay_a_bird_session() {
    if skip_unless_ready(&[PeerKind::Bird]) {
        return;
    }
    let mut lab = Lab::new("record_replay").expect("lab");
    let (h, p) = (lab.host("h").expect("host"), lab.host("p").expect("host"));
    let link = lab.link_auto(h, p).expect("link");
    let v4 = lab.link_info(link).v4.expect("addresses");
    let (hf_ip, bird_ip): (IpAddr, IpAddr) = (v4.a.into(), v4.b.into());

    let spec = PeerSpec::new(65001, "192.0.2.200".parse().unwrap())
        .neighbor(NeighborSpec::new(hf_ip, 65000).local(bird_ip).passive())
        .route(RouteSpec::new("198.51.100.0/24").med(7))
        .route(RouteSpec::new("198.51.101.0/24"));
    let mut bird = Bird::start(&mut lab, p, &spec).expect("bird");
    let dir = lab.work_dir().join("record");
    let opts = StartOpts {
        args: vec!["--record".into(), dir.to_string_lossy().into_owned()],
        ..StartOpts::default()
    };
    let hf = Holdfastd::start_with(&mut lab, h, "hf", &config(bird_ip, hf_ip), &opts)
        .expect("holdfastd");

    // Routes both ways.
    bird.wait_established(&lab, hf_ip, T).expect("established");
    bird.wait_route(&lab, hf_ip, "203.0.113.0/24", T, |_| true)
        .expect("holdfastd's route at bird");
    let in_rib = |n: usize| {
        wait_until(
            &format!("{n} routes from bird in holdfastd"),
            T,
            || hf.rib(holdfast_api::RibTable::In, Some(bird_ip)),
            |r| r.len() == n,
        )
    };
    in_rib(2).expect("bird's routes in holdfastd");

    // A ROUTE-REFRESH from bird.
    bird.request_refresh(&lab, hf_ip).expect("birdc reload in");
    let rec = recording(&dir);
    wait_ok("ROUTE-REFRESH recorded", T, || {
        let text = std::fs::read_to_string(&rec).map_err(|e| e.to_string())?;
        if text.contains("\"msg_type\":5") {
            Ok(())
        } else {
            Err(format!("{} lines, no ROUTE-REFRESH", text.lines().count()))
        }
    })
    .expect("holdfastd received the ROUTE-REFRESH");
    bird.wait_route(&lab, hf_ip, "203.0.113.0/24", T, |_| true)
        .expect("route still at bird after the refresh");

    // A flap, then a new route from bird on the new session.
    let before = bird
        .session(&lab, hf_ip)
        .expect("session")
        .and_then(|s| s.established_count)
        .unwrap_or(0);
    bird.reset_session(&lab, hf_ip).expect("birdc restart");
    wait_until(
        "bird re-established the session",
        T,
        || bird.session(&lab, hf_ip),
        |s| {
            s.as_ref().is_some_and(|s| {
                s.established_count.unwrap_or(0) > before && s.uptime_secs.is_some()
            })
        },
    )
    .expect("flap");
    bird.announce(&lab, &[RouteSpec::new("198.51.102.0/24")])
        .expect("announce");
    in_rib(3).expect("bird's new route in holdfastd");
    bird.wait_route(&lab, hf_ip, "203.0.113.0/24", T, |_| true)
        .expect("holdfastd's route at bird after the flap");

    hf.stop(&mut lab);

    // The recording replays to identical outputs.
    let text = std::fs::read_to_string(&rec).expect("recording");
    for needle in [
        "\"msg_type\":1",
        "\"msg_type\":2",
        "\"msg_type\":3",
        "\"msg_type\":5",
        "\"RefreshPending\"",
        "\"RibRefreshed\"",
        "\"WriteRib\"",
        "\"gen\":1",
        "\"gen\":2",
    ] {
        assert!(text.contains(needle), "recording lacks {needle}");
    }
    let (ok, out) = replay(&rec, false);
    assert!(ok, "replay failed:\n{out}");
    assert!(out.contains("identical"), "{out}");
    let (ok, out) = replay(&rec, true);
    assert!(ok, "{out}");
    let report: serde_json::Value = serde_json::from_str(&out).expect("json report");
    assert!(report["divergence"].is_null(), "{report}");
    let inputs = report["inputs"].as_u64().unwrap_or(0);
    assert!(inputs >= 10, "{report}");

    // Negative control: change the first session generation the core announced.
    let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
    let (n, line) = lines
        .iter()
        .enumerate()
        .find(|(_, l)| l.contains("\"PeerUp\":{\"gen\":1"))
        .map(|(i, l)| {
            (
                i,
                l.replace("\"PeerUp\":{\"gen\":1", "\"PeerUp\":{\"gen\":7"),
            )
        })
        .expect("a PeerUp line");
    lines[n] = line;
    let bad = lab.work_dir().join("tampered.jsonl");
    std::fs::write(&bad, lines.join("\n") + "\n").expect("write tampered copy");
    let (ok, out) = replay(&bad, false);
    assert!(!ok, "a tampered recording must not replay cleanly:\n{out}");
    assert!(
        out.contains(&format!("first difference at line {}", n + 1)),
        "{out}"
    );

    bird.stop(&mut lab);
    lab.teardown();
}
