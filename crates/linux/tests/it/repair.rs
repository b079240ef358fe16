//! TCP_REPAIR capture and restore on loopback (127.0.0.1, ::1 and
//! IPv4-mapped ::ffff:127.0.0.1). Needs root.
//!
//! Each move runs in a network namespace of its own: while the moved socket
//! is gone, an iptables rule there drops the peer's segments to its port
//! (as the speaker's take-over filter must), since the kernel would answer
//! them with a RST. The peer is an ordinary socket throughout; the tests
//! check that it never sees EOF or a reset and that both byte streams
//! arrive complete, in order, exactly once.
//!
//! Checks: (a) a move at the captured state, with unacknowledged data
//! (`v4_client`, `v6_client`, `v4_mapped`, `v4_server_side_md5_listener_open`,
//! `v4_large_unsent_queue`); (b) bytes the peer sent while the moved end was
//! down arrive (`*_peer_sends_while_down`); data lost in flight is
//! retransmitted (`*_lost_in_flight`, by the timer; `*_recovered_by_new_data`,
//! at once when new data follows; `v4_lost_beyond_the_window`, within
//! 1.5 s although the peer's answer to the window probe acknowledges
//! nothing the peer had not acknowledged before); (c) capture does not disturb a live
//! connection (`capture_is_transparent_*`); (d) restore time, printed
//! (`restore_timing_repeated_moves`; run with `--nocapture`).

use crate::netns;

use holdfast_linux::repair::{self, Restore, TcpRepairState};
use holdfast_linux::{set_tcp_md5, tcp_info};
use netns::Netns;
use socket2::{Domain, Protocol, Socket, Type};
use std::io::{ErrorKind, Read, Write};
use std::net::{IpAddr, SocketAddr, TcpStream};
use std::os::fd::AsFd;
use std::time::{Duration, Instant};

const TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Side {
    Client,
    Server,
}

#[derive(Clone, Copy, Debug)]
struct Case {
    tag: &'static str,
    /// Listener address (port 0).
    listen: &'static str,
    /// Address the client connects to (the listener's port is added).
    connect: &'static str,
    /// Which end is captured, closed silently and restored.
    moved: Side,
    md5: Option<&'static [u8]>,
    /// Bytes the moved end writes while the peer's ACKs are dropped
    /// (unacknowledged, maybe unsent, at capture).
    unacked: usize,
    /// Bytes appended to the restored send queue that the peer never got.
    lost: &'static [u8],
    /// As many more such bytes (a pattern), beyond `lost`.
    lost_more: usize,
    /// The peer must have the whole restored send queue within this long.
    within: Option<Duration>,
    /// Bytes the peer writes while the moved end is down.
    while_down: usize,
    /// Stop dropping the peer's segments just before `restore` instead of
    /// just after, so the ACK answering the window probe gets through (as
    /// when the take-over filter queues rather than drops).
    lift_before_restore: bool,
    /// Right after the restore, set TCP_NODELAY and send 19 bytes (a BGP
    /// KEEPALIVE's worth) before waiting for anything.
    poke: bool,
}

const BASE: Case = Case {
    tag: "",
    listen: "127.0.0.1:0",
    connect: "127.0.0.1",
    moved: Side::Client,
    md5: None,
    unacked: 3000,
    lost: b"",
    lost_more: 0,
    within: None,
    while_down: 0,
    lift_before_restore: false,
    poke: false,
};

/// Distinct, position-dependent bytes, so reordering or duplication shows.
fn pattern(seed: u8, start: usize, n: usize) -> Vec<u8> {
    (start..start + n)
        .map(|i| ((i as u32).wrapping_mul(2_654_435_761) >> 24) as u8 ^ seed)
        .collect()
}

/// One end's socket plus everything written to and read from it.
struct End {
    s: TcpStream,
    sent: Vec<u8>,
    got: Vec<u8>,
}

impl End {
    fn new(s: TcpStream) -> End {
        s.set_read_timeout(Some(TIMEOUT)).unwrap();
        End {
            s,
            sent: Vec::new(),
            got: Vec::new(),
        }
    }

    fn write(&mut self, seed: u8, n: usize) {
        let data = pattern(seed, self.sent.len(), n);
        self.s.write_all(&data).unwrap();
        self.sent.extend_from_slice(&data);
    }

    /// Writes up to `n` bytes without blocking; returns how many went in.
    fn write_some(&mut self, seed: u8, n: usize) -> usize {
        let data = pattern(seed, self.sent.len(), n);
        self.s.set_nonblocking(true).unwrap();
        let mut off = 0;
        while off < data.len() {
            match self.s.write(&data[off..]) {
                Ok(k) => off += k,
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(e) => panic!("write: {e}"),
            }
        }
        self.s.set_nonblocking(false).unwrap();
        self.sent.extend_from_slice(&data[..off]);
        off
    }

    /// Reads until `total` bytes have been received in all; fails on EOF,
    /// reset or timeout.
    fn read_to(&mut self, total: usize) {
        let mut buf = vec![0u8; 256 * 1024];
        while self.got.len() < total {
            let want = (total - self.got.len()).min(buf.len());
            match self.s.read(&mut buf[..want]) {
                Ok(0) => panic!("EOF after {} of {total} bytes", self.got.len()),
                Ok(k) => self.got.extend_from_slice(&buf[..k]),
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => panic!("read after {} of {total} bytes: {e}", self.got.len()),
            }
        }
    }

    /// Nothing pending, no EOF, no error, still ESTABLISHED.
    fn assert_alive(&self, who: &str) {
        assert_eq!(tcp_info(self.s.as_fd()).unwrap().state, 1, "{who} state");
        self.s.set_nonblocking(true).unwrap();
        let mut b = [0u8; 1];
        match (&self.s).read(&mut b) {
            Err(e) if e.kind() == ErrorKind::WouldBlock => {}
            other => panic!("{who}: expected no data and no EOF/RST, got {other:?}"),
        }
        self.s.set_nonblocking(false).unwrap();
    }
}

fn assert_same(what: &str, got: &[u8], sent: &[u8]) {
    if got != sent {
        let first = got.iter().zip(sent).position(|(a, b)| a != b);
        panic!(
            "{what}: received {} bytes, sent {}, first difference at {first:?}",
            got.len(),
            sent.len()
        );
    }
}

/// A connected (client, server) pair, optionally with MD5 on both ends.
fn connect_pair(listen: &str, connect: &str, md5: Option<&[u8]>) -> (Socket, Socket) {
    let listen: SocketAddr = listen.parse().unwrap();
    let connect_ip: IpAddr = connect.parse().unwrap();
    let l = Socket::new(
        Domain::for_address(listen),
        Type::STREAM,
        Some(Protocol::TCP),
    )
    .unwrap();
    if let Some(k) = md5 {
        // On loopback the client's source is the address it connects to.
        set_tcp_md5(l.as_fd(), SocketAddr::new(connect_ip, 0), Some(k)).unwrap();
    }
    l.bind(&listen.into()).unwrap();
    l.listen(8).unwrap();
    let port = l.local_addr().unwrap().as_socket().unwrap().port();
    let to = SocketAddr::new(connect_ip, port);
    let c = Socket::new(Domain::for_address(to), Type::STREAM, Some(Protocol::TCP)).unwrap();
    if let Some(k) = md5 {
        set_tcp_md5(c.as_fd(), to, Some(k)).unwrap();
    }
    c.connect_timeout(&to.into(), TIMEOUT).unwrap();
    let (s, _) = l.accept().unwrap();
    // The listener stays open for the whole test (as the speaker's does).
    std::mem::forget(l);
    (c, s)
}

fn is_v6_on_wire(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(_) => false,
        IpAddr::V6(v6) => v6.to_ipv4_mapped().is_none(),
    }
}

/// Drops (or stops dropping) TCP segments to `port` in namespace `ns`.
fn block(ns: &str, v6: bool, port: u16, on: bool) {
    let tool = if v6 { "ip6tables" } else { "iptables" };
    let port = port.to_string();
    let op = if on { "-I" } else { "-D" };
    netns::exec_in(
        ns,
        tool,
        &[op, "INPUT", "-p", "tcp", "--dport", &port, "-j", "DROP"],
    );
}

fn wait_outq_zero(s: &TcpStream) {
    let t = Instant::now();
    while repair::outq(s.as_fd()).unwrap() != 0 {
        assert!(t.elapsed() < TIMEOUT, "data never acknowledged");
        std::thread::sleep(Duration::from_millis(1));
    }
}

fn run_case(c: Case) {
    if !netns::root_or_skip() {
        return;
    }
    let ns = Netns::new(c.tag);
    let name = ns.name.clone();
    ns.run(move || move_once(&name, c));
}

fn move_once(ns: &str, c: Case) {
    let (cl, sv) = connect_pair(c.listen, c.connect, c.md5);
    let (a, b) = match c.moved {
        Side::Client => (cl, sv),
        Side::Server => (sv, cl),
    };
    let (mut a, mut b) = (End::new(a.into()), End::new(b.into()));
    let a_port = a.s.local_addr().unwrap().port();
    let v6 = is_v6_on_wire(c.connect.parse().unwrap());

    // Traffic both ways before the move.
    a.write(1, 1000);
    b.read_to(a.sent.len());
    b.write(2, 1500);
    a.read_to(b.sent.len());
    wait_outq_zero(&a.s);

    // From here the peer's segments (ACKs included) do not reach the moved end.
    block(ns, v6, a_port, true);
    let written = a.write_some(3, c.unacked);
    std::thread::sleep(Duration::from_millis(20));

    let st = repair::capture(a.s.as_fd()).unwrap();
    let captured_at = Instant::now();
    let peer = repair::capture(b.s.as_fd()).unwrap();
    // Linux leaves timestamps out of connections signed with MD5.
    check_capture(&a, &st, &peer, written, c.md5.is_none());

    let End {
        s: old,
        sent: mut a_sent,
        got: a_got,
    } = a;
    repair::close_silently(old.as_fd()).unwrap();
    drop(old);

    if c.while_down > 0 {
        b.write(4, c.while_down);
    }
    std::thread::sleep(Duration::from_millis(30));

    let outq = st.outq as usize;
    let mut queue = a_sent[a_sent.len() - outq..].to_vec();
    let mut lost = c.lost.to_vec();
    lost.extend(pattern(8, 0, c.lost_more));
    queue.extend_from_slice(&lost);
    a_sent.extend_from_slice(&lost);
    let r = Restore {
        state: &st,
        snd_una: st.snd_seq.wrapping_sub(st.outq),
        send_queue: &queue,
        rcv_nxt: st.rcv_seq,
        ts_val: st.ts_val_after(captured_at.elapsed()),
        md5_key: c.md5,
        bind_device: None,
    };
    if c.lift_before_restore {
        block(ns, v6, a_port, false);
    }
    let t = Instant::now();
    let restored = repair::restore(&r).expect("restore");
    let took = t.elapsed();
    println!(
        "{}: restore took {} µs ({} bytes in the send queue)",
        c.tag,
        took.as_micros(),
        queue.len()
    );
    let mut a = End {
        got: a_got,
        sent: a_sent,
        ..End::new(restored)
    };
    let mss = tcp_info(a.s.as_fd()).unwrap().snd_mss;
    assert!(
        mss >= u32::from(st.mss.min(32767)) - 100,
        "segment size {mss} after restore, MSS clamp {}",
        st.mss
    );
    if !c.lift_before_restore {
        block(ns, v6, a_port, false);
    }
    let up = Instant::now();
    let poke = if c.poke { 19 } else { 0 };
    if c.poke {
        a.s.set_nodelay(true).unwrap();
        a.write(7, poke);
    }

    // Without any new data: the restored send queue reaches the peer, and
    // what the peer sent meanwhile reaches the restored end.
    let (a_total, b_total) = (b.sent.len(), a.sent.len());
    let (a_ms, b_ms) = std::thread::scope(|s| {
        let ta = s.spawn(|| {
            a.read_to(a_total);
            up.elapsed().as_millis()
        });
        let tb = s.spawn(|| {
            b.read_to(b_total);
            up.elapsed().as_millis()
        });
        (ta.join().unwrap(), tb.join().unwrap())
    });
    println!(
        "{}: peer had the whole restored send queue after {b_ms} ms; \
         restored end had the peer's {} while-down bytes after {a_ms} ms",
        c.tag, c.while_down
    );
    if let Some(within) = c.within {
        assert!(
            b_ms <= within.as_millis(),
            "{}: the peer had the restored send queue only after {b_ms} ms (bound {} ms)",
            c.tag,
            within.as_millis()
        );
    }

    // New data both ways after the move.
    a.write(5, 700);
    b.read_to(a.sent.len());
    b.write(6, 900);
    a.read_to(b.sent.len());
    assert_same("peer's stream", &b.got, &a.sent);
    assert_same("restored end's stream", &a.got, &b.sent);
    a.assert_alive("restored end");
    b.assert_alive("peer");

    let after = repair::capture(a.s.as_fd()).unwrap();
    assert_eq!(
        after.snd_seq.wrapping_sub(st.snd_seq) as usize,
        lost.len() + poke + 700
    );
    assert_eq!(
        after.rcv_seq.wrapping_sub(st.rcv_seq) as usize,
        c.while_down + 900
    );
    assert_eq!((after.local, after.remote), (st.local, st.remote));
}

/// The captured state agrees with the socket and with the peer's own view.
fn check_capture(
    a: &End,
    st: &TcpRepairState,
    peer: &TcpRepairState,
    written: usize,
    timestamps: bool,
) {
    assert_eq!(st.local, a.s.local_addr().unwrap());
    assert_eq!(st.remote, a.s.peer_addr().unwrap());
    assert_eq!((peer.local, peer.remote), (st.remote, st.local));
    assert_eq!(
        st.outq as usize, written,
        "SIOCOUTQ = bytes written since the block"
    );
    assert_eq!(st.rcv_seq, peer.snd_seq, "we read all the peer wrote");
    assert_eq!(
        st.snd_seq.wrapping_sub(st.outq),
        peer.rcv_seq,
        "acknowledged = what the peer had read before the block"
    );
    assert!(st.mss > 0 && st.sack, "{st:?}");
    assert_eq!(st.timestamps, timestamps, "{st:?}");
    assert_eq!(peer.timestamps, timestamps, "{peer:?}");
    assert_eq!(
        (st.snd_wscale, st.rcv_wscale),
        (peer.rcv_wscale, peer.snd_wscale)
    );
    assert!(st.snd_wnd > 0 && st.rcv_wnd > 0, "{st:?}");
}

#[test]
fn v4_client() {
    run_case(Case { tag: "c4", ..BASE });
}

#[test]
fn v6_client() {
    run_case(Case {
        tag: "c6",
        listen: "[::1]:0",
        connect: "::1",
        ..BASE
    });
}

#[test]
fn v4_mapped() {
    run_case(Case {
        tag: "m4",
        listen: "[::]:0",
        connect: "::ffff:127.0.0.1",
        ..BASE
    });
}

#[test]
fn v4_server_side_md5_listener_open() {
    run_case(Case {
        tag: "s4",
        moved: Side::Server,
        md5: Some(b"holdfast-md5"),
        ..BASE
    });
}

#[test]
fn v6_server_side_md5_listener_open() {
    run_case(Case {
        tag: "s6",
        listen: "[::1]:0",
        connect: "::1",
        moved: Side::Server,
        md5: Some(b"holdfast-md5"),
        ..BASE
    });
}

#[test]
fn v4_peer_sends_while_down() {
    run_case(Case {
        tag: "d4",
        while_down: 5000,
        ..BASE
    });
}

#[test]
fn v6_peer_sends_while_down() {
    run_case(Case {
        tag: "d6",
        listen: "[::1]:0",
        connect: "::1",
        while_down: 5000,
        ..BASE
    });
}

const LOST: &[u8] = b"bytes the old socket sent that never arrived";

/// Lost data comes back by the retransmission timer alone (about 0.27 s
/// once the window probe's answer gave an RTT sample).
#[test]
fn v4_lost_in_flight() {
    run_case(Case {
        tag: "l4",
        lost: LOST,
        lift_before_restore: true,
        ..BASE
    });
}

/// Same, the window probe's answer being dropped: no RTT sample, so the
/// loss probe after 1 s brings it back.
#[test]
fn v6_lost_in_flight() {
    run_case(Case {
        tag: "l6",
        listen: "[::1]:0",
        connect: "::1",
        lost: LOST,
        ..BASE
    });
}

/// New data sent at once with TCP_NODELAY makes the peer report the hole
/// (SACK) and the lost bytes are resent within a round trip.
#[test]
fn v4_lost_in_flight_recovered_by_new_data() {
    run_case(Case {
        tag: "k4",
        lost: LOST,
        poke: true,
        ..BASE
    });
}

#[test]
fn v6_lost_in_flight_recovered_by_new_data() {
    run_case(Case {
        tag: "k6",
        listen: "[::1]:0",
        connect: "::1",
        lost: LOST,
        poke: true,
        ..BASE
    });
}

/// The old socket had everything the peer received acknowledged, then
/// queued 400 kB beyond the peer's window that never left it, so the
/// restored queue is acknowledged only up to where it starts. The byte the
/// restore puts before it gives the socket an RTT sample at the window
/// probe's answer, and the queue arrives in about 0.27 s; without that byte
/// it took 3.0 s (Linux's RTO without a sample).
#[test]
fn v4_lost_beyond_the_window() {
    run_case(Case {
        tag: "w4",
        unacked: 0,
        lost_more: 400 * 1024,
        lift_before_restore: true,
        within: Some(Duration::from_millis(1500)),
        ..BASE
    });
}

/// Megabytes written while the peer's ACKs were dropped: most of it never
/// left the old socket, all of it is restored as sent.
#[test]
fn v4_large_unsent_queue() {
    run_case(Case {
        tag: "q4",
        unacked: 4 << 20,
        lift_before_restore: true,
        ..BASE
    });
}

/// (d) Twenty moves in a row on one connection, each with a little more
/// unacknowledged data; prints the restore times.
#[test]
fn restore_timing_repeated_moves() {
    if !netns::root_or_skip() {
        return;
    }
    for (tag, listen, connect) in [("t4", "127.0.0.1:0", "127.0.0.1"), ("t6", "[::1]:0", "::1")] {
        let ns = Netns::new(tag);
        let name = ns.name.clone();
        ns.run(move || repeated_moves(&name, tag, listen, connect));
    }
}

fn repeated_moves(ns: &str, tag: &str, listen: &str, connect: &str) {
    let (a, b) = connect_pair(listen, connect, None);
    let (mut a, mut b) = (End::new(a.into()), End::new(b.into()));
    let a_port = a.s.local_addr().unwrap().port();
    let v6 = is_v6_on_wire(connect.parse().unwrap());
    a.write(1, 100);
    b.read_to(a.sent.len());
    wait_outq_zero(&a.s);
    block(ns, v6, a_port, true);
    let mut times = Vec::new();
    for _ in 0..20 {
        a.write(2, 100);
        let st = repair::capture(a.s.as_fd()).unwrap();
        let at = Instant::now();
        let End { s: old, sent, got } = a;
        repair::close_silently(old.as_fd()).unwrap();
        drop(old);
        let queue = sent[sent.len() - st.outq as usize..].to_vec();
        let t = Instant::now();
        let s = repair::restore(&Restore {
            state: &st,
            snd_una: st.snd_seq.wrapping_sub(st.outq),
            send_queue: &queue,
            rcv_nxt: st.rcv_seq,
            ts_val: st.ts_val_after(at.elapsed()),
            md5_key: None,
            bind_device: None,
        })
        .unwrap();
        times.push(t.elapsed().as_micros());
        a = End {
            sent,
            got,
            ..End::new(s)
        };
    }
    block(ns, v6, a_port, false);
    b.read_to(a.sent.len());
    b.write(3, 100);
    a.read_to(b.sent.len());
    assert_same("peer's stream", &b.got, &a.sent);
    assert_same("restored end's stream", &a.got, &b.sent);
    a.assert_alive("restored end");
    b.assert_alive("peer");
    times.sort_unstable();
    println!(
        "{tag}: restore over 20 moves: min {} µs, median {} µs, max {} µs",
        times[0],
        times[times.len() / 2],
        times[times.len() - 1]
    );
}

/// (c) Capturing a live connection again and again, with data in flight and
/// unread data queued, changes nothing: the streams go on intact and the
/// sequence numbers advance by exactly what was written and read.
fn capture_is_transparent(listen: &str, connect: &str) {
    if !netns::root_or_skip() {
        return;
    }
    let (a, b) = connect_pair(listen, connect, None);
    a.set_reuse_address(true).unwrap();
    let (mut a, mut b) = (End::new(a.into()), End::new(b.into()));
    let first = repair::capture(a.s.as_fd()).unwrap();
    for round in 0..50 {
        a.write(1, 1000 + round * 37);
        let st = repair::capture(a.s.as_fd()).unwrap();
        assert_eq!(
            st.snd_seq.wrapping_sub(first.snd_seq) as usize,
            a.sent.len()
        );
        assert_eq!(st.rcv_seq.wrapping_sub(first.rcv_seq) as usize, a.got.len());
        b.write(2, 500 + round * 11);
        // Unread data in the receive queue does not move rcv_seq.
        let st = repair::capture(a.s.as_fd()).unwrap();
        assert_eq!(st.rcv_seq.wrapping_sub(first.rcv_seq) as usize, a.got.len());
        b.read_to(a.sent.len());
        a.read_to(b.sent.len());
    }
    assert_same("peer's stream", &b.got, &a.sent);
    assert_same("captured end's stream", &a.got, &b.sent);
    a.assert_alive("captured end");
    b.assert_alive("peer");
    assert!(
        socket2::SockRef::from(&a.s).reuse_address().unwrap(),
        "SO_REUSEADDR survives capture"
    );
}

#[test]
fn capture_is_transparent_v4() {
    capture_is_transparent("127.0.0.1:0", "127.0.0.1");
}

#[test]
fn capture_is_transparent_v6() {
    capture_is_transparent("[::1]:0", "::1");
}

#[test]
fn capture_refuses_a_listener() {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let e = repair::capture(l.as_fd()).unwrap_err();
    assert!(
        matches!(e.kind(), ErrorKind::InvalidInput | ErrorKind::NotConnected),
        "{e}"
    );
}
