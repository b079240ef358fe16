//! Self-tests of the lab harness (no BGP).
//!
//! Topology of `lifecycle`:
//!
//! ```text
//!   198.18.1.1/24 fd00:0:0:1::1/64      198.18.1.2/24 fd00:0:0:1::2/64
//!        [ r1 ] ------------- veth ------------- [ r2 ]
//!          |                                        |
//!   192.0.2.1/24                             192.0.2.2/24
//!          |              +--------+                |
//!          +--------------| sw lan |----------------+
//!                         +--------+
//!                             |  192.0.2.3/24, 2001:db8:3::3/64
//!                          [ r3 ]
//! ```
//!
//! Checks:
//! * `lifecycle`: namespaces, veth link and bridge are created; v4/v6 ping over the link
//!   (TCP connect to a python listener; no `ping` binary) over the link and the bridge;
//!   link down makes it fail, link up restores it (polled); a spawned
//!   process is tracked; the link pcap gets packets; teardown removes every namespace
//!   and the work dir, and is idempotent.
//! * `cleanup_stale_removes_leftovers`: a fake `hf<hex>-...` namespace with a process
//!   inside is removed (process killed) by `cleanup_stale`, while a live lab survives.
//! * `teardown_on_panic`: a thread panicking while holding a lab leaves no namespace
//!   behind and keeps the work dir.
//! * `wait_for_timeout_is_useful`: timeouts name the condition and the last observation.

use std::net::{IpAddr, Ipv6Addr};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use holdfast_lab::{
    cleanup_stale, list_netns, skip_unless_ready, wait_for, wait_until, IfAddr, Lab, LabError,
};

/// TCP listener on [::]:7 (dual stack) used as a reachability target (no `ping` here).
const LISTENER: &str = "import socket\ns = socket.socket(socket.AF_INET6)\ns.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)\ns.bind(('::', 7))\ns.listen(16)\nwhile True:\n    s.accept()[0].close()\n";

/// TCP connect with a 1 s timeout from `host` to `dst`:7.
fn ping(lab: &Lab, host: holdfast_lab::HostId, dst: IpAddr) -> bool {
    let dst = dst.to_string();
    let probe =
        "import socket, sys\nsocket.create_connection((sys.argv[1], 7), timeout=1).close()\n";
    lab.exec(host, &["python3", "-c", probe, &dst])
        .map(|o| o.status.success())
        .unwrap_or(false)
}

fn namespaces_of(run_id: &str) -> Vec<String> {
    list_netns()
        .expect("ip netns list")
        .into_iter()
        .filter(|n| n.starts_with(run_id))
        .collect()
}

#[test]
fn lifecycle() {
    if skip_unless_ready(&[]) {
        return;
    }
    let mut lab = Lab::new("harness_lifecycle").expect("lab");
    let run_id = lab.run_id().to_string();
    let work = lab.work_dir().to_path_buf();
    let r1 = lab.host("r1").expect("r1");
    let r2 = lab.host("r2").expect("r2");
    let r3 = lab.host("r3").expect("r3");
    let link = lab.link_auto(r1, r2).expect("link");
    let info = lab.link_info(link).clone();
    assert!(info.if_a.starts_with(&run_id) && info.if_a.len() <= 15);
    let lan = lab
        .bridge(
            "lan",
            &[
                (r1, vec![IfAddr::new([192, 0, 2, 1], 24)]),
                (r2, vec![IfAddr::new([192, 0, 2, 2], 24)]),
                (
                    r3,
                    vec![
                        IfAddr::new([192, 0, 2, 3], 24),
                        IfAddr::new("2001:db8:3::3".parse::<Ipv6Addr>().unwrap(), 64),
                    ],
                ),
            ],
        )
        .expect("bridge");
    assert_eq!(lab.bridge_info(lan).ports.len(), 3);
    assert_eq!(namespaces_of(&run_id).len(), 4, "3 hosts + 1 switch");
    for h in [r1, r2] {
        lab.spawn(h, "listener", &["python3", "-c", LISTENER], &[])
            .expect("listener");
    }
    wait_for("listeners", Duration::from_secs(10), || {
        Ok((ping(&lab, r2, "198.18.1.2".parse().unwrap())
            && ping(&lab, r1, "192.0.2.1".parse().unwrap()))
        .then_some(()))
    })
    .expect("listeners up");

    let v4 = info.v4.unwrap();
    let v6 = info.v6.unwrap();
    assert!(ping(&lab, r1, v4.b.into()), "v4 over veth");
    assert!(ping(&lab, r2, v6.a.into()), "v6 over veth (no DAD wait)");
    assert!(
        ping(&lab, r3, "192.0.2.1".parse().unwrap()),
        "v4 over bridge"
    );

    lab.set_link_up(link, false).expect("down");
    assert!(!ping(&lab, r1, v4.b.into()), "unreachable with link down");
    lab.set_link_up(link, true).expect("up");
    wait_for("ping after link up", Duration::from_secs(10), || {
        Ok(ping(&lab, r1, v6.b.into()).then_some(()))
    })
    .expect("v6 address survives down/up");

    let p = lab
        .spawn(r3, "sleeper", &["sleep", "600"], &[])
        .expect("spawn");
    assert!(lab.is_running(p));
    lab.capture_start()
        .expect("captures (no-op when already running)");
    let pcap = lab.pcaps()[0].clone();
    wait_for("pcap to contain packets", Duration::from_secs(5), || {
        Ok((std::fs::metadata(&pcap).map(|m| m.len()).unwrap_or(0) > 100).then_some(()))
    })
    .expect("pcap written");

    lab.teardown();
    assert!(!lab.is_running(p), "spawned process stopped");
    assert!(namespaces_of(&run_id).is_empty(), "namespaces removed");
    assert!(!work.exists(), "work dir removed on success");
    lab.teardown();
}

#[test]
fn cleanup_stale_removes_leftovers() {
    if skip_unless_ready(&[]) {
        return;
    }
    let mut live = Lab::new("harness_live").expect("lab");
    live.host("keep").expect("host");
    let fake = format!("hf{:06x}-fake", std::process::id() & 0xff_ffff);
    let ok = Command::new("ip")
        .args(["netns", "add", &fake])
        .status()
        .expect("ip");
    assert!(ok.success());
    let mut child = Command::new("ip")
        .args(["netns", "exec", &fake, "sleep", "600"])
        .stdout(Stdio::null())
        .spawn()
        .expect("sleep in fake ns");
    wait_for(
        "sleep to enter the fake namespace",
        Duration::from_secs(5),
        || {
            let out = Command::new("ip")
                .args(["netns", "pids", &fake])
                .output()
                .expect("pids");
            Ok((!out.stdout.is_empty()).then_some(()))
        },
    )
    .expect("pid visible");

    let removed = cleanup_stale().expect("cleanup_stale");
    assert!(removed >= 1, "removed {removed}");
    assert!(
        !list_netns().unwrap().contains(&fake),
        "fake namespace gone"
    );
    let deadline = Instant::now() + Duration::from_secs(5);
    let status = loop {
        if let Some(st) = child.try_wait().expect("try_wait") {
            break Some(st);
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(status.is_some(), "process in stale namespace was killed");
    assert_eq!(namespaces_of(live.run_id()).len(), 1, "live lab untouched");
}

#[test]
fn teardown_on_panic() {
    if skip_unless_ready(&[]) {
        return;
    }
    let (tx, rx) = std::sync::mpsc::channel();
    let handle = std::thread::spawn(move || {
        let mut lab = Lab::new("harness_panic").expect("lab");
        let h = lab.host("doomed").expect("host");
        lab.spawn(h, "sleeper", &["sleep", "600"], &[])
            .expect("spawn");
        tx.send((lab.netns(h).to_string(), lab.work_dir().to_path_buf()))
            .unwrap();
        panic!("deliberate panic while holding a lab");
    });
    assert!(handle.join().is_err(), "thread panicked");
    let (ns, work) = rx.recv().expect("names");
    assert!(
        !list_netns().unwrap().contains(&ns),
        "namespace removed during unwinding"
    );
    assert!(work.exists(), "work dir kept after a panic");
    std::fs::remove_dir_all(&work).expect("clean kept dir");
}

#[test]
fn wait_for_timeout_is_useful() {
    let err = wait_for::<u32>("the answer", Duration::from_millis(300), || Ok(None)).unwrap_err();
    let text = err.to_string();
    assert!(matches!(err, LabError::WaitTimeout { .. }));
    assert!(
        text.contains("the answer") && text.contains("None"),
        "{text}"
    );

    let mut n = 40;
    let err = wait_until(
        "counter to reach 100",
        Duration::from_millis(300),
        || {
            n += 1;
            Ok(n)
        },
        |v| *v >= 100,
    )
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("counter to reach 100") && err.contains("last observed: 4"),
        "{err}"
    );
}
