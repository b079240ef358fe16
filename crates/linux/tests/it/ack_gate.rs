//! The ACK gate against the real kernel: NFQUEUE rules in a fresh network
//! namespace per test, TCP over its loopback.
//!
//! Registering the server side: right after the handshake, before the
//! client sends anything, everything the server has received is the SYN,
//! so `confirmed = rcv_nxt` (read with `TCP_REPAIR` by
//! `nfq::read_rcv_nxt`); from then on `rcv_nxt + bytes read` is what a
//! speaker would confirm after replicating what it read. The receive window
//! scale comes from `repair::capture`.
//!
//! "Unacknowledged" is observed from the client: `tcpi_bytes_acked` and
//! `SIOCOUTQ` (bytes in its send queue not yet acknowledged).
//!
//! Needs root; tests skip otherwise (and fail with `HOLDFAST_REQUIRE_LAB=1`).

use crate::netns;

use holdfast_linux::nfq::read_rcv_nxt;
use holdfast_linux::{capture, outq, rules, tcp_info, AckGate, ConnKey, GateMode, GateStats};
use netns::Netns;
use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsFd;
use std::process::Command;
use std::sync::mpsc;
use std::time::{Duration, Instant};

// ---------------------------------------------------------------------------
// Harness.

/// Removes the tagged rules on drop (also on panic); `finish` checks that
/// `iptables -S` and `ip6tables -S` are clean afterwards.
struct Rules {
    tag: &'static str,
}

impl Rules {
    fn gate(tag: &'static str, queue: u16, port: u16) -> Rules {
        rules::install_gate(tag, queue, &[port]).expect("install_gate");
        // Idempotent.
        rules::install_gate(tag, queue, &[port]).expect("install_gate again");
        let listed = rules::list(tag).unwrap();
        assert_eq!(listed.len(), 4, "{listed:#?}");
        Rules { tag }
    }

    fn finish(self) {
        rules::remove_all(self.tag).expect("remove_all");
        for cmd in ["iptables", "ip6tables"] {
            let out = Command::new(cmd).args(["-w", "-S"]).output().unwrap();
            let text = String::from_utf8_lossy(&out.stdout);
            assert!(!text.contains("holdfast:"), "{cmd} -S not clean:\n{text}");
        }
    }
}

impl Drop for Rules {
    fn drop(&mut self) {
        let _ = rules::remove_all(self.tag);
    }
}

const IO_TIMEOUT: Duration = Duration::from_secs(5);

/// (client, server) connected over `listen_on`, connecting to `connect_to`.
fn pair(listen_on: SocketAddr, connect_to: SocketAddr) -> (TcpStream, TcpStream) {
    let l = TcpListener::bind(listen_on).expect("bind");
    let c = TcpStream::connect_timeout(&connect_to, IO_TIMEOUT).expect("connect");
    let (s, _) = l.accept().expect("accept");
    for x in [&c, &s] {
        x.set_read_timeout(Some(IO_TIMEOUT)).unwrap();
        x.set_write_timeout(Some(IO_TIMEOUT)).unwrap();
        x.set_nodelay(true).unwrap();
    }
    (c, s)
}

/// Registers the server side at its current `rcv_nxt`; returns (key, rcv_nxt).
fn register(gate: &AckGate, server: &TcpStream) -> (ConnKey, u32) {
    let key = ConnKey::new(server.local_addr().unwrap(), server.peer_addr().unwrap());
    let rcv = read_rcv_nxt(server.as_fd()).expect("read rcv_nxt");
    let st = capture(server.as_fd()).expect("capture");
    assert_eq!(st.rcv_seq, rcv, "nothing unread yet: copied_seq == rcv_nxt");
    gate.register(key, rcv, st.rcv_wscale);
    (key, rcv)
}

fn acked(s: &TcpStream) -> u64 {
    tcp_info(s.as_fd())
        .unwrap()
        .bytes_acked
        .expect("kernel >= 4.1")
}

/// Polls `f` every 200 µs until it holds; returns how long that took.
fn wait_for(limit: Duration, mut f: impl FnMut() -> bool) -> Option<Duration> {
    let t = Instant::now();
    loop {
        if f() {
            return Some(t.elapsed());
        }
        if t.elapsed() > limit {
            return None;
        }
        std::thread::sleep(Duration::from_micros(200));
    }
}

fn print_stats(what: &str, s: &GateStats) {
    println!(
        "{what}: packets {} passed {} clamped {} held {} (now {}) released {} superseded {} \
         dropped {} synthesized {} | added ACK delay p50 {} us, p99 {} us, max {} us over {} samples",
        s.packets,
        s.passed,
        s.clamped,
        s.held,
        s.held_now,
        s.released,
        s.superseded,
        s.dropped,
        s.synthesized,
        s.delay_p50_us,
        s.delay_p99_us,
        s.delay_max_us,
        s.delay_samples
    );
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

// ---------------------------------------------------------------------------

/// Received bytes stay unacknowledged until confirmed; partial confirms,
/// clamped data, request/response rounds; rules cleaned up.
#[test]
fn holds_acks_until_confirmed() {
    if !netns::root_or_skip() {
        return;
    }
    const Q: u16 = 7111;
    const PORT: u16 = 17911;
    let ns = Netns::new("hold");
    ns.run(|| {
        let rules = Rules::gate("t-hold", Q, PORT);
        let gate = AckGate::start(Q).expect("start gate");
        assert_eq!(gate.mode(), GateMode::Protected);
        let addr: SocketAddr = format!("127.0.0.1:{PORT}").parse().unwrap();
        let (mut client, mut server) = pair(addr, addr);
        let (key, rcv) = register(&gate, &server);
        let b0 = acked(&client);

        // 1. The client sends N bytes; the server reads them all, but
        //    nothing is confirmed: the client must see none acknowledged.
        const N: usize = 20_000;
        let data = pattern(N, 1);
        client.write_all(&data).unwrap();
        let mut got = vec![0u8; N];
        server.read_exact(&mut got).unwrap();
        assert_eq!(got, data);
        std::thread::sleep(Duration::from_millis(400));
        assert_eq!(acked(&client), b0, "acknowledged before confirm");
        assert_eq!(outq(client.as_fd()).unwrap() as usize, N);
        let s = gate.stats();
        assert!(s.held >= 1 && s.held_now >= 1, "{s:?}");

        // 2. Partial confirm: the client sees exactly that much acknowledged
        //    (an ACK synthesised by the gate: no held ACK carries it).
        gate.confirm(&key, rcv.wrapping_add(N as u32 / 2));
        let t = wait_for(Duration::from_secs(1), || {
            acked(&client) == b0 + N as u64 / 2
        })
        .expect("partial confirm not seen by the client");
        println!("partial confirm -> client saw the ACK after {t:?}");
        std::thread::sleep(Duration::from_millis(50));
        assert_eq!(
            acked(&client),
            b0 + N as u64 / 2,
            "acknowledged beyond confirm"
        );

        // 3. The server sends data: its ACK field is clamped, the client
        //    accepts the segment (checksum intact) but still has N/2
        //    unacknowledged.
        let reply = pattern(700, 2);
        server.write_all(&reply).unwrap();
        let mut r = vec![0u8; reply.len()];
        client.read_exact(&mut r).unwrap();
        assert_eq!(r, reply);
        std::thread::sleep(Duration::from_millis(50));
        assert_eq!(acked(&client), b0 + N as u64 / 2);
        assert!(gate.stats().clamped >= 1);

        // 4. Confirm everything: the client's send queue empties promptly.
        gate.confirm(&key, rcv.wrapping_add(N as u32));
        let t = wait_for(Duration::from_secs(1), || {
            outq(client.as_fd()).unwrap() == 0
        })
        .expect("client outq did not drain after confirm");
        println!("full confirm -> client outq 0 after {t:?}");
        assert!(t < Duration::from_millis(100), "{t:?}");
        assert_eq!(acked(&client), b0 + N as u64);

        // 5. BGP-like request/response rounds, confirming after the reply
        //    has been written (so the ACK often rides on clamped data).
        //    Every round must be acknowledged well within the peer's
        //    minimum RTO (200 ms): no ACK may be lost for good.
        let mut total = N as u32;
        let mut worst = Duration::ZERO;
        let mut sum = Duration::ZERO;
        const ROUNDS: u32 = 200;
        for i in 0..ROUNDS {
            let req = pattern(19 + (i as usize % 300), i as u8);
            client.write_all(&req).unwrap();
            let mut buf = vec![0u8; req.len()];
            server.read_exact(&mut buf).unwrap();
            server.write_all(&pattern(23, 9)).unwrap();
            total += req.len() as u32;
            gate.confirm(&key, rcv.wrapping_add(total));
            let mut resp = [0u8; 23];
            client.read_exact(&mut resp).unwrap();
            let want = b0 + u64::from(total);
            let t = wait_for(Duration::from_secs(2), || acked(&client) == want)
                .unwrap_or_else(|| panic!("round {i}: request never acknowledged"));
            worst = worst.max(t);
            sum += t;
        }
        println!(
            "{ROUNDS} request/response rounds: ACK seen by client after mean {:?}, worst {worst:?}",
            sum / ROUNDS
        );
        assert!(
            worst < Duration::from_millis(190),
            "an ACK waited for an RTO: {worst:?}"
        );
        let s = gate.stats();
        print_stats("holds_acks_until_confirmed", &s);
        assert_eq!(s.held_now, 0);
        assert_eq!(s.dropped, 0);

        // 6. Unregistered: everything passes again.
        gate.unregister(&key);
        client.write_all(b"after").unwrap();
        let mut b = [0u8; 5];
        server.read_exact(&mut b).unwrap();
        wait_for(Duration::from_secs(1), || {
            outq(client.as_fd()).unwrap() == 0
        })
        .expect("unregistered connection still gated");

        drop(gate);
        rules.finish();
    });
}

/// Store-replication-like load: the client streams, the server reads,
/// answers with a small message every 256 KiB (its ACK gets clamped) and
/// hands offsets to a "replicator" thread that confirms the newest one after
/// a simulated store latency. Prints throughput and the added ACK delay per
/// scenario (a fresh gate each, so each histogram is its own), with an
/// ungated baseline.
#[test]
fn streaming_with_replicator() {
    if !netns::root_or_skip() {
        return;
    }
    const Q: u16 = 7112;
    const PORT: u16 = 17912;
    let ns = Netns::new("stream");
    ns.run(|| {
        let rules = Rules::gate("t-stream", Q, PORT);
        let addr: SocketAddr = format!("127.0.0.1:{PORT}").parse().unwrap();
        const TOTAL: usize = 32 << 20;

        let run = |gated: bool, store_latency: Duration| -> (Duration, GateStats) {
            let gate = AckGate::start(Q).expect("start gate");
            let (mut client, mut server) = pair(addr, addr);
            let (key, rcv) = register(&gate, &server);
            if !gated {
                gate.unregister(&key);
            }
            let (tx, rx) = mpsc::channel::<u32>();
            let g2 = std::sync::Arc::clone(&gate);
            let replicator = std::thread::spawn(move || {
                while let Ok(mut off) = rx.recv() {
                    while let Ok(o) = rx.try_recv() {
                        off = o;
                    }
                    if !store_latency.is_zero() {
                        std::thread::sleep(store_latency);
                    }
                    g2.confirm(&key, rcv.wrapping_add(off));
                }
            });
            let reader = std::thread::spawn(move || {
                let mut buf = vec![0u8; 64 << 10];
                let mut n = 0usize;
                let mut next_reply = 256 << 10;
                while n < TOTAL {
                    let k = server.read(&mut buf).unwrap();
                    assert!(k > 0, "EOF");
                    n += k;
                    tx.send(n as u32).unwrap();
                    if n >= next_reply {
                        server.write_all(&[0xff; 19]).unwrap();
                        next_reply += 256 << 10;
                    }
                }
                server
            });
            let drain = client.try_clone().unwrap();
            let replies = std::thread::spawn(move || {
                let mut d = drain;
                let mut b = [0u8; 4096];
                let mut n = 0;
                while n < (TOTAL / (256 << 10)) * 19 {
                    n += d.read(&mut b).unwrap();
                }
            });
            let t = Instant::now();
            let chunk = pattern(16 << 10, 3);
            let mut sent = 0;
            while sent < TOTAL {
                client.write_all(&chunk).unwrap();
                sent += chunk.len();
            }
            let _server = reader.join().unwrap();
            wait_for(Duration::from_secs(5), || {
                outq(client.as_fd()).unwrap() == 0
            })
            .expect("stream not fully acknowledged");
            let elapsed = t.elapsed();
            replicator.join().unwrap();
            replies.join().unwrap();
            let s = gate.stats();
            assert_eq!(s.held_now, 0, "{s:?}");
            assert!(
                gate.is_running() && gate.error().is_none(),
                "{:?}",
                gate.error()
            );
            gate.unregister(&key);
            // Let the gate go only after the client has closed cleanly.
            drop(client);
            std::thread::sleep(Duration::from_millis(20));
            (elapsed, s)
        };

        let mbps = |d: Duration| (TOTAL as f64 * 8.0 / 1e6) / d.as_secs_f64();
        let _warm_up = run(false, Duration::ZERO);
        let (base, sb) = run(false, Duration::ZERO);
        println!(
            "ungated (queued, passed): {} MiB in {base:?} = {:.0} Mbit/s, {} packets",
            TOTAL >> 20,
            mbps(base),
            sb.packets
        );
        for lat in [0u64, 200, 1000] {
            let (t, s) = run(true, Duration::from_micros(lat));
            println!(
                "gated, store latency {lat} us: {t:?} = {:.0} Mbit/s",
                mbps(t)
            );
            print_stats("  gate", &s);
            assert!(s.held + s.clamped > 0);
            if lat >= 1000 {
                assert!(s.clamped > 0, "the server's replies carried clamped ACKs");
            }
        }
        rules.finish();
    });
}

/// DropAll (fencing) and a dead gate (what a crashed speaker leaves
/// behind): the server closing its socket must not reach the client —
/// neither FIN (read returning 0) nor RST (an error other than a timeout).
#[test]
fn dropall_and_dead_gate_hide_close() {
    if !netns::root_or_skip() {
        return;
    }
    const Q: u16 = 7113;
    const PORT: u16 = 17913;
    let ns = Netns::new("drop");
    ns.run(|| {
        let rules = Rules::gate("t-drop", Q, PORT);
        let gate = AckGate::start(Q).expect("start gate");
        let addr: SocketAddr = format!("127.0.0.1:{PORT}").parse().unwrap();
        let expect_silence = |client: &mut TcpStream, what: &str| {
            client
                .set_read_timeout(Some(Duration::from_millis(1500)))
                .unwrap();
            let mut b = [0u8; 16];
            match client.read(&mut b) {
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
                Ok(0) => panic!("{what}: the client saw a FIN"),
                Ok(n) => panic!("{what}: the client read {n} bytes"),
                Err(e) => panic!("{what}: the client saw {e} (RST?)"),
            }
        };

        // Fenced: DropAll, then the server closes (with unread data, so the
        // kernel sends a RST rather than a FIN).
        let (mut client, server) = pair(addr, addr);
        let (mut client2, server2) = pair(addr, addr);
        register(&gate, &server);
        client.write_all(b"unread").unwrap();
        std::thread::sleep(Duration::from_millis(50));
        gate.set_mode(GateMode::DropAll);
        assert_eq!(gate.mode(), GateMode::DropAll);
        drop(server);
        expect_silence(&mut client, "DropAll + close with unread data (RST)");
        let s = gate.stats();
        print_stats("DropAll", &s);
        assert!(s.dropped >= 1, "{s:?}");
        assert_eq!(s.held_now, 0);

        // A plain close (FIN), also fenced.
        drop(server2);
        expect_silence(&mut client2, "DropAll + close (FIN)");

        // Dead gate: back to Protected, then the gate goes away as if the
        // speaker had crashed (its NFQUEUE socket closes). Queued and new
        // packets are dropped by the kernel: no bypass, no fail-open.
        gate.set_mode(GateMode::Protected);
        let (mut client3, server3) = pair(addr, addr);
        client3.write_all(b"x").unwrap();
        let mut b = [0u8; 1];
        (&server3).read_exact(&mut b).unwrap();
        drop(gate);
        drop(server3);
        expect_silence(&mut client3, "dead gate + close (FIN)");

        rules.finish();
    });
}

/// IPv6, and an IPv4 client of a dual-stack IPv6 socket (v4-mapped
/// addresses on the socket, IPv4 on the wire: the key is normalised).
#[test]
fn ipv6_and_v4_mapped_keys() {
    if !netns::root_or_skip() {
        return;
    }
    const Q: u16 = 7114;
    const PORT: u16 = 17914;
    let ns = Netns::new("six");
    ns.run(|| {
        let rules = Rules::gate("t-six", Q, PORT);
        let gate = AckGate::start(Q).expect("start gate");
        let cases: [(&str, &str); 2] = [("[::1]", "[::1]"), ("[::]", "127.0.0.1")];
        for (listen, connect) in cases {
            let (mut client, mut server) = pair(
                format!("{listen}:{PORT}").parse().unwrap(),
                format!("{connect}:{PORT}").parse().unwrap(),
            );
            let (key, rcv) = register(&gate, &server);
            let b0 = acked(&client);
            client.write_all(&pattern(3000, 5)).unwrap();
            let mut got = vec![0u8; 3000];
            server.read_exact(&mut got).unwrap();
            std::thread::sleep(Duration::from_millis(300));
            assert_eq!(
                acked(&client),
                b0,
                "{connect}: acknowledged before confirm ({key:?})"
            );
            gate.confirm(&key, rcv.wrapping_add(3000));
            wait_for(Duration::from_secs(1), || acked(&client) == b0 + 3000)
                .unwrap_or_else(|| panic!("{connect}: confirm not seen"));
            gate.unregister(&key);
        }
        print_stats("ipv6_and_v4_mapped_keys", &gate.stats());
        drop(gate);
        rules.finish();
    });
}

/// GSO packets come through the queue whole (`NFQA_CFG_F_GSO`): a GSO
/// data packet whose ACK number is not confirmed is held, never let out with
/// it. With `gso_max_size` raised on the namespace's `lo` (MTU 1500), IPv6
/// TCP builds BIG TCP packets beyond 64 KiB whose payload length field is
/// 0 and which the queue copies only in part; the gate reads their length
/// from `NFQA_CAP_LEN`. Observed from the client: nothing it sent is
/// acknowledged, and nothing of the server's reply arrives, until the
/// confirm; then all of it.
#[test]
fn gso_and_big_tcp_data_wait_for_the_confirm() {
    if !netns::root_or_skip() {
        return;
    }
    const Q: u16 = 7116;
    const PORT: u16 = 17916;
    let ns = Netns::new("gso");
    ns.ip(&["link", "set", "lo", "mtu", "1500", "gso_max_size", "185000"]);
    ns.run(|| {
        let rules = Rules::gate("t-gso", Q, PORT);
        let gate = AckGate::start(Q).expect("start gate");
        let addr: SocketAddr = format!("[::1]:{PORT}").parse().unwrap();
        let (mut client, mut server) = pair(addr, addr);
        let (key, rcv) = register(&gate, &server);
        let b0 = acked(&client);
        // 1. Warm up with everything confirmed, so the server's congestion
        //    window and pacing rate let TCP build its largest packets.
        client.write_all(&pattern(1000, 3)).unwrap();
        let mut got = vec![0u8; 1000];
        server.read_exact(&mut got).unwrap();
        gate.confirm(&key, rcv.wrapping_add(1000));
        const W: usize = 8_000_000;
        let stream = |server: &TcpStream, n: usize, seed: u8| {
            let mut server = server.try_clone().unwrap();
            std::thread::spawn(move || server.write_all(&pattern(n, seed)))
        };
        let warm = stream(&server, W, 4);
        let mut buf = vec![0u8; W];
        client.read_exact(&mut buf).unwrap();
        warm.join().unwrap().unwrap();
        wait_for(Duration::from_secs(1), || acked(&client) == b0 + 1000)
            .expect("confirm not seen by the client");
        // 2. The client sends 1000 more bytes, the server reads them and
        //    nothing is confirmed; meanwhile the server streams on. Every
        //    packet it sends carries an ACK number beyond the confirmed one:
        //    small ones are clamped, GSO ones held (and what follows them).
        client.write_all(&pattern(1000, 5)).unwrap();
        server.read_exact(&mut got).unwrap();
        const R: usize = 4_000_000;
        let reply = stream(&server, R, 6);
        client
            .set_read_timeout(Some(Duration::from_millis(100)))
            .unwrap();
        let mut early = 0;
        let t = Instant::now();
        while t.elapsed() < Duration::from_millis(600) && early < R {
            match client.read(&mut buf[early..R]) {
                Ok(n) => early += n,
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
                Err(e) => panic!("client read: {e}"),
            }
        }
        assert_eq!(
            acked(&client),
            b0 + 1000,
            "acknowledged beyond the confirm (a GSO packet left unexamined?)"
        );
        let s = gate.stats();
        print_stats("gso before confirm", &s);
        assert!(s.held_now >= 1, "nothing held: {s:?}");
        assert!(early < R, "the whole reply arrived before the confirm");
        // 3. The confirm lets the rest through, in order.
        gate.confirm(&key, rcv.wrapping_add(2000));
        client.set_read_timeout(Some(IO_TIMEOUT)).unwrap();
        client.read_exact(&mut buf[early..R]).unwrap();
        assert!(
            buf[..R] == pattern(R, 6)[..],
            "the reply arrived whole and in order"
        );
        reply.join().unwrap().unwrap();
        wait_for(Duration::from_secs(1), || acked(&client) == b0 + 2000)
            .expect("confirm not seen by the client");
        let s = gate.stats();
        print_stats("gso after confirm", &s);
        assert_eq!(s.held_now, 0);
        println!("reply bytes the client read before the confirm: {early} of {R}");
        gate.unregister(&key);
        drop(gate);
        rules.finish();
    });
}

/// A client connection to `l` whose server end is gone without a word
/// (closed in repair mode): the next segment the client sends meets no
/// socket.
fn orphan(l: &TcpListener) -> TcpStream {
    let client = TcpStream::connect(l.local_addr().unwrap()).expect("connect");
    let (server, _) = l.accept().expect("accept");
    holdfast_linux::repair::close_silently(server.as_fd()).expect("close silently");
    drop(server);
    client
}

/// Whether a byte `c` sends is answered with a RST within `within`.
fn reset(c: &mut TcpStream, within: Duration) -> bool {
    c.write_all(b"x").expect("write");
    c.set_read_timeout(Some(within)).unwrap();
    let mut b = [0u8; 1];
    match c.read(&mut b) {
        Err(e) if e.kind() == ErrorKind::ConnectionReset => true,
        Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => false,
        other => panic!("unexpected read: {other:?}"),
    }
}

/// The rebuild guard: while it is installed, a segment of a connection
/// whose socket is gone is not answered with a RST (the client hears
/// nothing instead of being reset), while a SYN is still answered (a host
/// agent's probe of the port); a guard naming another local address
/// leaves the connection alone; `lift_guard` lets the segments through
/// and `remove_guard` then removes only the guard.
#[test]
fn guard_suppresses_rst() {
    if !netns::root_or_skip() {
        return;
    }
    const Q: u16 = 7115;
    const PORT: u16 = 17915;
    let ns = Netns::new("guard");
    ns.run(|| {
        let rules = Rules::gate("t-guard", Q, PORT);
        let gate = AckGate::start(Q).expect("start gate");
        let to: SocketAddr = format!("127.0.0.1:{PORT}").parse().unwrap();
        let l = TcpListener::bind(to).expect("listen");
        let wait = Duration::from_millis(700);
        // The negative control: unguarded, the orphan's byte meets a RST.
        assert!(
            reset(&mut orphan(&l), Duration::from_secs(2)),
            "no RST unguarded"
        );

        // A guard naming another local address leaves this connection alone.
        let other: std::net::IpAddr = "127.0.0.2".parse().unwrap();
        let mut c = orphan(&l);
        rules::install_guard("t-guard", &[PORT], &[other]).unwrap();
        assert!(
            reset(&mut c, Duration::from_secs(2)),
            "guard for another address"
        );
        rules::remove_guard("t-guard", &[other]).unwrap();

        let local: std::net::IpAddr = "127.0.0.1".parse().unwrap();
        // A guard of another family, left by an earlier install: the next
        // install removes it, so that lifting the guard may skip that family.
        let v6: std::net::IpAddr = "::1".parse().unwrap();
        rules::install_guard("t-guard", &[PORT], &[v6]).unwrap();
        let listed = rules::list("t-guard").unwrap();
        assert!(
            listed
                .iter()
                .any(|r| r.starts_with("ip6tables -A HF-GUARD-")),
            "{listed:#?}"
        );
        let mut c = orphan(&l);
        rules::install_guard("t-guard", &[PORT], &[local]).unwrap();
        // Idempotent.
        rules::install_guard("t-guard", &[PORT], &[local]).unwrap();
        // 4 gate rules, the 2 guard rules in their chain, the jump to it.
        let listed = rules::list("t-guard").unwrap();
        assert_eq!(listed.len(), 7, "{listed:#?}");
        assert!(!reset(&mut c, wait), "a RST while guarded");
        // A SYN is answered meanwhile (the handshake completes for the client).
        TcpStream::connect_timeout(&to, wait).expect("a SYN answered while guarded");

        // Lifted: a RETURN heads the guard's chain, its rules stay.
        rules::lift_guard("t-guard", &[local]).unwrap();
        let lifted = rules::list("t-guard").unwrap();
        assert_eq!(lifted.len(), 8, "{lifted:#?}");
        assert!(
            lifted.iter().any(|r| r.contains("-j RETURN")),
            "{lifted:#?}"
        );
        // Unguarded, the retransmitted byte meets the RST.
        c.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
        let mut b = [0u8; 1];
        let e = c.read(&mut b).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::ConnectionReset, "{e}");
        rules::remove_guard("t-guard", &[local]).unwrap();
        let left = rules::list("t-guard").unwrap();
        assert_eq!(left.len(), 4, "gate rules stay: {left:#?}");
        assert!(left.iter().all(|r| r.contains("-A OUTPUT")), "{left:#?}");
        drop(gate);
        rules.finish();
    });
}
