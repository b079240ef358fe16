//! The gate's decisions, driven with hand-built packets (no kernel, no
//! sockets).

use super::*;
use crate::packet::{fill_tcp_checksum, parse, tcp_checksum_ok, FIN, PSH};
use std::time::Duration;

const LOCAL: &str = "10.0.0.1:179";
const REMOTE: &str = "10.0.0.2:50000";

fn key() -> ConnKey {
    ConnKey::new(LOCAL.parse().unwrap(), REMOTE.parse().unwrap())
}

/// An IPv4/TCP packet from LOCAL to REMOTE with a timestamp option.
fn pkt(flags: u8, seq: u32, ack: u32, win: u16, payload: &[u8]) -> Vec<u8> {
    let tcp_len = 32;
    let total = 20 + tcp_len + payload.len();
    let mut p = vec![
        0x45, 0, 0, 0, 0, 0, 0x40, 0, 64, 6, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2,
    ];
    p[2..4].copy_from_slice(&(total as u16).to_be_bytes());
    p.extend_from_slice(&179u16.to_be_bytes());
    p.extend_from_slice(&50000u16.to_be_bytes());
    p.extend_from_slice(&seq.to_be_bytes());
    p.extend_from_slice(&ack.to_be_bytes());
    p.push(8 << 4);
    p.push(flags);
    p.extend_from_slice(&win.to_be_bytes());
    p.extend_from_slice(&[0, 0, 0, 0]);
    p.extend_from_slice(&[1, 1, 8, 10, 0, 0, 0, 7, 0, 0, 0, 9]);
    p.extend_from_slice(payload);
    fill_tcp_checksum(&mut p).unwrap();
    p
}

fn md5_pkt(flags: u8, seq: u32, ack: u32, payload: &[u8]) -> Vec<u8> {
    let mut p = pkt(flags, seq, ack, 100, payload);
    // Turn the timestamp option into an MD5 option header (kind 19) plus
    // padding: the gate only needs to see the kind.
    p[40..52].copy_from_slice(&[19, 12, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0]);
    fill_tcp_checksum(&mut p).unwrap();
    p
}

struct Rig {
    core: Core,
    out: Vec<Out>,
    t0: Instant,
    next_id: u32,
}

impl Rig {
    fn new() -> Rig {
        Rig {
            core: Core::new(true),
            out: Vec::new(),
            t0: Instant::now(),
            next_id: 1,
        }
    }

    fn at(&self, ms: u64) -> Instant {
        self.t0 + Duration::from_millis(ms)
    }

    /// Feeds a packet at time `ms`; returns (id, verdict, packet after).
    fn feed(&mut self, ms: u64, p: Vec<u8>) -> (u32, Verdict, Vec<u8>) {
        self.feed_skb(ms, p, SkbInfo::default())
    }

    /// [`Rig::feed`] with what the kernel says of the buffer.
    fn feed_skb(&mut self, ms: u64, mut p: Vec<u8>, skb: SkbInfo) -> (u32, Verdict, Vec<u8>) {
        let id = self.next_id;
        self.next_id = self.next_id.wrapping_add(1);
        let now = self.at(ms);
        let v = self.core.packet(id, &mut p, 1, skb, now, &mut self.out);
        (id, v, p)
    }

    fn drain(&mut self, ms: u64) -> Vec<Out> {
        let now = self.at(ms);
        self.core.drain(now, &mut self.out);
        self.take()
    }

    fn take(&mut self) -> Vec<Out> {
        std::mem::take(&mut self.out)
    }
}

fn accepts(out: &[Out]) -> Vec<u32> {
    out.iter()
        .filter_map(|o| match o {
            Out::Accept(id) => Some(*id),
            _ => None,
        })
        .collect()
}

fn drops(out: &[Out]) -> Vec<u32> {
    out.iter()
        .filter_map(|o| match o {
            Out::Drop(id) => Some(*id),
            _ => None,
        })
        .collect()
}

fn injected(out: &[Out]) -> Vec<Vec<u8>> {
    out.iter()
        .filter_map(|o| match o {
            Out::Inject { pkt, .. } => Some(pkt.clone()),
            _ => None,
        })
        .collect()
}

#[test]
fn keys_are_normalised() {
    let mapped = ConnKey::new(
        "[::ffff:10.0.0.1]:179".parse().unwrap(),
        "[::ffff:10.0.0.2]:50000".parse().unwrap(),
    );
    assert_eq!(mapped, key());
    let scoped = ConnKey::new(
        SocketAddr::V6(SocketAddrV6::new("fe80::1".parse().unwrap(), 179, 5, 3)),
        "[fe80::2]:1".parse().unwrap(),
    );
    assert_eq!(scoped.local, "[fe80::1]:179".parse::<SocketAddr>().unwrap());
}

#[test]
fn unregistered_and_non_tcp_pass() {
    let mut r = Rig::new();
    let (_, v, _) = r.feed(0, pkt(ACK, 1, 5000, 10, b""));
    assert_eq!(v, Verdict::Accept);
    let (_, v, _) = r.feed(0, vec![0x45, 0, 0, 20]);
    assert_eq!(v, Verdict::Accept);
    assert_eq!(r.core.snapshot().passed, 2);
}

#[test]
fn pure_ack_held_superseded_and_released() {
    let mut r = Rig::new();
    r.core.register(key(), 1000, 0);
    // At or below C: passes.
    let (_, v, _) = r.feed(0, pkt(ACK, 1, 1000, 10, b""));
    assert_eq!(v, Verdict::Accept);
    // Beyond C: held.
    let (a, v, _) = r.feed(1, pkt(ACK, 1, 1100, 10, b""));
    assert_eq!(v, Verdict::Hold);
    let (b, v, _) = r.feed(2, pkt(ACK, 1, 1200, 10, b""));
    assert_eq!(v, Verdict::Hold);
    assert_eq!(drops(&r.take()), vec![a], "older held ACK superseded");
    let s = r.core.snapshot();
    assert_eq!((s.held, s.held_now, s.superseded), (2, 1, 1));
    // A partial confirm does not release it (an ACK is synthesised instead).
    assert!(r.core.confirm(&key(), 1150));
    let out = r.drain(5);
    assert!(accepts(&out).is_empty());
    let inj = injected(&out);
    assert_eq!(inj.len(), 1);
    assert_eq!(parse(&inj[0]).unwrap().ack, 1150);
    // Reaching its A releases it unmodified.
    assert!(r.core.confirm(&key(), 1200));
    let out = r.drain(10);
    assert_eq!(accepts(&out), vec![b]);
    assert!(injected(&out).is_empty(), "the released ACK says it all");
    let s = r.core.snapshot();
    assert_eq!((s.held_now, s.released), (0, 1));
    // Delays: 1100 covered by the synthesised 1150 at 5 ms (arrived 1 ms),
    // 1200 by the release at 10 ms (arrived 2 ms).
    assert_eq!(s.delay_samples, 2);
    assert!(s.delay_max_us >= 7_500 && s.delay_max_us <= 8_000, "{s:?}");
    // Confirming the same value again does nothing.
    assert!(!r.core.confirm(&key(), 1200));
}

#[test]
fn data_is_clamped_with_window_widened() {
    let mut r = Rig::new();
    r.core.register(key(), 1000, 7);
    let (_, v, p) = r.feed(0, pkt(ACK | PSH, 50, 1000 + 1000, 20, b"update"));
    assert_eq!(v, Verdict::AcceptModified);
    let m = parse(&p).unwrap();
    assert_eq!(m.ack, 1000);
    assert_eq!(m.window, 20 + 8); // ceil(1000 / 128)
    assert!(tcp_checksum_ok(&p));
    // FIN is treated like data.
    let (_, v, p) = r.feed(0, pkt(ACK | FIN, 56, 2000, 20, b""));
    assert_eq!(v, Verdict::AcceptModified);
    assert_eq!(parse(&p).unwrap().ack, 1000);
    // RST passes untouched.
    let (_, v, p) = r.feed(0, pkt(ACK | RST, 57, 2000, 0, b""));
    assert_eq!(v, Verdict::Accept);
    assert_eq!(parse(&p).unwrap().ack, 2000);
    assert_eq!(r.core.snapshot().clamped, 2);
}

#[test]
fn confirm_after_clamped_data_synthesises_ack() {
    let mut r = Rig::new();
    r.core.register(key(), 1000, 2);
    // The kernel's ACK for 1000..2000 only ever rode on our data.
    let (_, v, _) = r.feed(0, pkt(ACK | PSH, 50, 2000, 100, b"0123456789"));
    assert_eq!(v, Verdict::AcceptModified);
    assert!(r.core.confirm(&key(), 1500));
    let inj = injected(&r.drain(1));
    assert_eq!(inj.len(), 1);
    let m = parse(&inj[0]).unwrap();
    assert!(m.is_pure_ack());
    assert_eq!(
        (m.src, m.dst),
        (LOCAL.parse().unwrap(), REMOTE.parse().unwrap())
    );
    assert_eq!(m.seq, 60, "seq follows the last segment sent");
    assert_eq!(m.ack, 1500);
    // Right edge kept: 2000 + 100 * 4 = 2400 -> (2400 - 1500) / 4 = 225.
    assert_eq!(m.window, 225);
    assert_eq!(m.timestamp, Some((7, 9)));
    assert!(tcp_checksum_ok(&inj[0]));
    // Confirming beyond what the kernel acknowledged stops at its ACK.
    assert!(r.core.confirm(&key(), 5000));
    let inj = injected(&r.drain(2));
    assert_eq!(parse(&inj[0]).unwrap().ack, 2000);
    // The synthesised ACK comes back through the queue and passes.
    let (_, v, _) = r.feed(3, inj[0].clone());
    assert_eq!(v, Verdict::Accept);
    // Nothing more to say.
    assert!(!r.core.confirm(&key(), 5001) || injected(&r.drain(4)).is_empty());
    assert_eq!(r.core.snapshot().synthesized, 2);
}

#[test]
fn window_update_is_clamped_not_held() {
    let mut r = Rig::new();
    r.core.register(key(), 1000, 0);
    // Something left, so the peer's view (ack 1000, edge 1100) is known.
    r.feed(0, pkt(ACK, 1, 1000, 100, b""));
    // Data arrives: the kernel's ACK 1500 is held.
    let (_, v, _) = r.feed(1, pkt(ACK, 1, 1500, 10, b""));
    assert_eq!(v, Verdict::Hold);
    // The application reads; the kernel announces the opened window with
    // the same ACK number: clamped and sent at once.
    let (_, v, p) = r.feed(2, pkt(ACK, 1, 1500, 5000, b""));
    assert_eq!(v, Verdict::AcceptModified);
    let m = parse(&p).unwrap();
    assert_eq!((m.ack, m.window), (1000, 5500));
    // A second one with the same edge is not news: held.
    let (_, v, _) = r.feed(3, pkt(ACK, 1, 1500, 5000, b""));
    assert_eq!(v, Verdict::Hold);
}

#[test]
fn signed_packets_are_held_in_order() {
    let mut r = Rig::new();
    r.core.register(key(), 1000, 0);
    let (a, v, _) = r.feed(0, md5_pkt(ACK | PSH, 10, 1100, b"aa"));
    assert_eq!(v, Verdict::Hold);
    // Unsigned data behind it waits too (order), a pure ACK goes to the
    // ACK slot.
    let (b, v, _) = r.feed(1, pkt(ACK | PSH, 12, 1100, 10, b"bb"));
    assert_eq!(v, Verdict::Hold);
    let (c, v, _) = r.feed(2, md5_pkt(ACK, 14, 1200, b""));
    assert_eq!(v, Verdict::Hold);
    let (d, v, _) = r.feed(3, md5_pkt(ACK | PSH, 14, 1200, b"cc"));
    assert_eq!(v, Verdict::Hold);
    assert!(r.core.confirm(&key(), 1100));
    let out = r.drain(4);
    assert_eq!(accepts(&out), vec![a, b]);
    assert!(
        injected(&out).is_empty(),
        "no ACK is synthesised for signed connections"
    );
    assert!(r.core.confirm(&key(), 1200));
    assert_eq!(accepts(&r.drain(5)), vec![c, d]);
    assert_eq!(r.core.snapshot().held_now, 0);
}

#[test]
fn truncated_packets_are_held_not_modified() {
    let mut r = Rig::new();
    r.core.register(key(), 1000, 0);
    let full = pkt(ACK | PSH, 10, 1100, 10, &[7u8; 200]);
    let (_, v, p) = r.feed(0, full[..100].to_vec());
    assert_eq!(v, Verdict::Hold);
    assert_eq!(p, full[..100].to_vec());
}

#[test]
fn gso_packets_are_held_in_order_or_passed_unmodified() {
    let gso = SkbInfo {
        csum_partial: true,
        gso: true,
        wire_len: None,
    };
    let mut r = Rig::new();
    r.core.register(key(), 1000, 0);
    // Within what is confirmed: one entry for many segments, unmodified.
    let big = pkt(ACK | PSH, 10, 1000, 10, &[7u8; 3000]);
    let (_, v, p) = r.feed_skb(0, big.clone(), gso);
    assert_eq!((v, p), (Verdict::Accept, big));
    // Beyond it: held, not clamped, and what follows waits behind it.
    let (a, v, _) = r.feed_skb(1, pkt(ACK | PSH, 3010, 1100, 10, &[7u8; 3000]), gso);
    assert_eq!(v, Verdict::Hold);
    let (b, v, _) = r.feed(2, pkt(ACK | PSH, 6010, 1100, 10, b"bb"));
    assert_eq!(v, Verdict::Hold);
    assert!(r.core.confirm(&key(), 1100));
    assert_eq!(accepts(&r.drain(3)), vec![a, b]);
    assert_eq!(r.core.snapshot().clamped, 0);
    // BIG TCP: no length in the IP header, the queue's copy cut short. The
    // gate still finds the connection and its ACK number, and holds it.
    let mut big = pkt(ACK | PSH, 6012, 1200, 10, &[7u8; 100]);
    big[2..4].copy_from_slice(&[0, 0]);
    let cut = big[..60].to_vec();
    let big_tcp = SkbInfo {
        wire_len: Some(100_000),
        ..gso
    };
    let (_, v, _) = r.feed_skb(4, cut.clone(), gso);
    assert_eq!(v, Verdict::Accept, "unreadable without the queue's length");
    let (c, v, p) = r.feed_skb(5, cut.clone(), big_tcp);
    assert_eq!((v, p), (Verdict::Hold, cut));
    assert!(r.core.confirm(&key(), 1200));
    assert_eq!(accepts(&r.drain(6)), vec![c]);
}

#[test]
fn clamped_packet_with_partial_checksum_gets_a_full_one() {
    let mut r = Rig::new();
    r.core.register(key(), 1000, 0);
    let mut p = pkt(ACK | PSH, 10, 1100, 10, b"abc");
    // What the stack leaves in a CHECKSUM_PARTIAL packet: not the sum.
    p[36..38].copy_from_slice(&[0x12, 0x34]);
    assert!(!tcp_checksum_ok(&p));
    let partial = SkbInfo {
        csum_partial: true,
        gso: false,
        wire_len: None,
    };
    let (_, v, out) = r.feed_skb(0, p, partial);
    assert_eq!(v, Verdict::AcceptModified);
    assert_eq!(parse(&out).unwrap().ack, 1000);
    assert!(tcp_checksum_ok(&out), "the kernel sends it as is");
}

#[test]
fn bypass_releases_and_passes_dropall_drops() {
    let mut r = Rig::new();
    r.core.register(key(), 1000, 0);
    let (a, _, _) = r.feed(0, pkt(ACK, 1, 1100, 10, b""));
    assert!(r.core.set_mode(GateMode::Bypass));
    let out = r.drain(1);
    assert_eq!(accepts(&out), vec![a]);
    let (_, v, p) = r.feed(2, pkt(ACK | PSH, 1, 1300, 10, b"x"));
    assert_eq!(v, Verdict::Accept);
    assert_eq!(parse(&p).unwrap().ack, 1300);

    assert!(r.core.set_mode(GateMode::Protected));
    r.drain(3);
    // Acknowledged during bypass: repeating 1300 reveals nothing new.
    let (_, v, _) = r.feed(4, pkt(ACK, 2, 1300, 10, b""));
    assert_eq!(v, Verdict::Accept);
    let (b, v, _) = r.feed(5, pkt(ACK, 2, 1400, 10, b""));
    assert_eq!(v, Verdict::Hold);

    assert!(r.core.set_mode(GateMode::DropAll));
    let out = r.drain(6);
    assert_eq!(drops(&out), vec![b]);
    let (_, v, _) = r.feed(7, pkt(ACK, 2, 1000, 10, b""));
    assert_eq!(v, Verdict::Drop, "even packets that could pass");
    let (_, v, _) = r.feed(7, vec![0x45, 0, 0, 20]);
    assert_eq!(v, Verdict::Drop, "even unparseable ones");
    let s = r.core.snapshot();
    assert_eq!((s.dropped, s.held_now), (3, 0));
}

#[test]
fn unregister_releases_and_stops_gating() {
    let mut r = Rig::new();
    r.core.register(key(), 1000, 0);
    let (a, v, _) = r.feed(0, pkt(ACK, 1, 1100, 10, b""));
    assert_eq!(v, Verdict::Hold);
    assert!(r.core.unregister(&key()));
    assert_eq!(accepts(&r.drain(1)), vec![a]);
    let (_, v, p) = r.feed(2, pkt(ACK | FIN, 1, 1200, 10, b""));
    assert_eq!(v, Verdict::Accept);
    assert_eq!(parse(&p).unwrap().ack, 1200);
    assert!(r.core.conns.is_empty());
}

#[test]
fn unregister_before_drain_releases_on_next_packet() {
    let mut r = Rig::new();
    r.core.register(key(), 1000, 0);
    let (a, _, _) = r.feed(0, pkt(ACK, 1, 1100, 10, b""));
    r.core.unregister(&key());
    let (_, v, _) = r.feed(1, pkt(ACK | FIN, 1, 1100, 10, b""));
    assert_eq!(accepts(&r.take()), vec![a], "held one first");
    assert_eq!(v, Verdict::Accept);
}

#[test]
fn sequence_wraps() {
    let mut r = Rig::new();
    r.core.register(key(), u32::MAX - 10, 0);
    let (_, v, _) = r.feed(0, pkt(ACK, 1, 20, 10, b""));
    assert_eq!(v, Verdict::Hold);
    r.core.confirm(&key(), 5);
    assert!(accepts(&r.drain(1)).is_empty());
    r.core.confirm(&key(), 20);
    assert_eq!(accepts(&r.drain(1)).len(), 1);
}

#[test]
fn histogram_quantiles() {
    let mut h = Histogram::new();
    assert_eq!(h.quantile(0.5), 0);
    for v in 1..=1000u64 {
        h.record(v);
    }
    let p50 = h.quantile(0.5);
    let p99 = h.quantile(0.99);
    assert!((500..=563).contains(&p50), "{p50}");
    assert!((990..=1000).contains(&p99), "{p99}");
    assert_eq!(h.quantile(1.0), 1000);
    // Buckets are contiguous and monotone.
    for i in 1..HIST_BUCKETS {
        assert_eq!(Histogram::upper(i - 1) + 1, lower(i), "bucket {i}");
        assert_eq!(Histogram::bucket(lower(i)), i);
        assert_eq!(Histogram::bucket(Histogram::upper(i)), i);
    }
    fn lower(i: usize) -> u64 {
        Histogram::upper(i - 1) + 1
    }
    h.record(u64::MAX);
    assert_eq!(h.max, u64::MAX);
}

#[test]
fn delay_over_a_window_from_two_snapshots_of_the_buckets() {
    let mut h = Histogram::new();
    // A load: long delays.
    for _ in 0..1000 {
        h.record(200_000);
    }
    let before = h.buckets();
    assert!(delay_quantile(&before, 0.5) >= 200_000);
    // Then rest: short ones. The whole histogram still says the load's
    // figure; the window says the rest's.
    for v in 1..=100u64 {
        h.record(v);
    }
    let after = h.buckets();
    assert!(delay_quantile(&after, 0.5) >= 200_000);
    let window = delay_buckets_since(&after, &before);
    assert_eq!(window.iter().map(|(_, c)| c).sum::<u64>(), 100);
    assert!((50..=56).contains(&delay_quantile(&window, 0.5)));
    assert!((99..=103).contains(&delay_quantile(&window, 0.99)));
    assert_eq!(delay_quantile(&[], 0.99), 0);
}

/// A held pure ACK overtaken by a clamped data segment carries an older
/// timestamp than the peer has seen (PAWS would discard it) and a stale
/// sequence number: it is replaced by a synthesised ACK built from the
/// newest segment.
#[test]
fn overtaken_held_ack_is_resynthesised() {
    let mut r = Rig::new();
    r.core.register(key(), 1000, 0);
    let (a, v, _) = r.feed(0, pkt(ACK, 100, 1500, 10, b""));
    assert_eq!(v, Verdict::Hold);
    let mut data = pkt(ACK | PSH, 100, 1500, 10, b"0123");
    // A later timestamp on the data segment.
    data[44..48].copy_from_slice(&77u32.to_be_bytes());
    fill_tcp_checksum(&mut data).unwrap();
    let (_, v, _) = r.feed(1, data);
    assert_eq!(v, Verdict::AcceptModified);
    assert!(r.core.confirm(&key(), 1500));
    let out = r.drain(2);
    assert_eq!(drops(&out), vec![a]);
    assert!(accepts(&out).is_empty());
    let inj = injected(&out);
    assert_eq!(inj.len(), 1);
    let m = parse(&inj[0]).unwrap();
    assert_eq!((m.seq, m.ack, m.timestamp), (104, 1500, Some((77, 9))));
    let s = r.core.snapshot();
    assert_eq!((s.released, s.held_now, s.synthesized), (1, 0, 1));
}

#[test]
fn registering_again_raises_confirmed_never_lowers() {
    let mut r = Rig::new();
    r.core.register(key(), 1000, 0);
    let (a, v, _) = r.feed(0, pkt(ACK, 1, 1100, 10, b""));
    assert_eq!(v, Verdict::Hold);
    // A lower value is ignored: C stays 1000.
    r.core.register(key(), 900, 0);
    assert!(!r.core.confirm(&key(), 1000));
    // A higher one raises it: the held ACK may leave, as it is.
    r.core.register(key(), 1100, 0);
    let out = r.drain(1);
    assert_eq!(accepts(&out), vec![a]);
    assert!(drops(&out).is_empty());
    assert!(injected(&out).is_empty());
    assert_eq!(r.core.snapshot().held_now, 0);
}

#[test]
fn unregister_while_dropall_drops_and_synthesises_nothing() {
    let mut r = Rig::new();
    r.core.register(key(), 1000, 0);
    let (a, v, _) = r.feed(0, pkt(ACK, 1, 1100, 10, b""));
    assert_eq!(v, Verdict::Hold);
    assert!(r.core.set_mode(GateMode::DropAll));
    assert!(!r.core.set_mode(GateMode::DropAll), "no change, no wake-up");
    assert!(r.core.unregister(&key()));
    let out = r.drain(1);
    assert_eq!(drops(&out), vec![a]);
    assert!(accepts(&out).is_empty());
    assert!(
        injected(&out).is_empty(),
        "a fenced gate tells the peer nothing"
    );
    assert!(r.core.conns.is_empty());
    assert_eq!(r.core.mode(), GateMode::DropAll);
    let s = r.core.snapshot();
    assert_eq!((s.dropped, s.held_now), (1, 0));
}

/// A dead process's RST, queued while a takeover's gate dropped everything
/// but read only after the gate left `DropAll`, is still dropped (seen in
/// the lab: `ss -K` of a leftover socket, then the sessions restored and
/// the mode changed before the thread read the RST).
#[test]
fn packets_queued_in_drop_all_stay_dropped_after_it() {
    let mut r = Rig::new();
    assert!(r.core.set_mode(GateMode::DropAll));
    let (a, v, _) = r.feed(0, pkt(ACK, 1, 1000, 10, b""));
    assert_eq!(v, Verdict::Drop);
    // The kernel queued ids a+1 and a+2 (an RST among them) before the
    // mode changed; the thread reads them afterwards.
    assert!(r.core.set_mode_after(GateMode::Protected, Some(a + 2)));
    let (_, v, _) = r.feed(1, pkt(RST | ACK, 2, 1000, 10, b""));
    assert_eq!(v, Verdict::Drop, "queued before the change");
    let (_, v, _) = r.feed(1, pkt(ACK, 2, 1000, 10, b""));
    assert_eq!(v, Verdict::Drop, "queued before the change");
    let (_, v, _) = r.feed(2, pkt(RST | ACK, 2, 1000, 10, b""));
    assert_eq!(v, Verdict::Accept, "queued after it: the new mode");
    assert_eq!(r.core.snapshot().dropped, 3);
    // Without the kernel's id (not readable), the change is immediate.
    assert!(r.core.set_mode(GateMode::DropAll));
    assert!(r.core.set_mode(GateMode::Protected));
    let (_, v, _) = r.feed(3, pkt(RST | ACK, 2, 1000, 10, b""));
    assert_eq!(v, Verdict::Accept);
}

/// Ids wrap around (mod 2^32): the barrier compares as sequence numbers.
#[test]
fn the_drop_all_barrier_wraps() {
    let mut r = Rig::new();
    r.next_id = u32::MAX - 1;
    assert!(r.core.set_mode(GateMode::DropAll));
    assert!(r.core.set_mode_after(GateMode::Bypass, Some(u32::MAX)));
    let (_, v, _) = r.feed(0, pkt(ACK, 1, 1000, 10, b""));
    assert_eq!(v, Verdict::Drop);
    let (_, v, _) = r.feed(0, pkt(ACK, 1, 1000, 10, b""));
    assert_eq!(v, Verdict::Drop);
    let (id, v, _) = r.feed(0, pkt(ACK, 1, 1000, 10, b""));
    assert_eq!((id, v), (0, Verdict::Accept));
}

#[test]
fn a_probe_is_injected_below_the_peer_with_what_it_knows() {
    let mut r = Rig::new();
    r.core.register(key(), 1000, 2);
    // Nothing left yet: no template, so no probe.
    assert!(r.core.probe(&key(), 48));
    assert!(injected(&r.drain(0)).is_empty());
    // The restored socket's own probe left (seq below what the peer has).
    let (_, v, _) = r.feed(1, pkt(ACK, 48, 1000, 100, b""));
    assert_eq!(v, Verdict::Accept);
    assert!(r.core.probe(&key(), 48));
    let inj = injected(&r.drain(2));
    assert_eq!(inj.len(), 1);
    let m = parse(&inj[0]).unwrap();
    assert!(m.is_pure_ack());
    assert_eq!(
        (m.seq, m.ack),
        (48, 1000),
        "the asked seq, the ACK the peer knows"
    );
    assert_eq!(m.window, 100);
    assert_eq!(m.timestamp, Some((7, 9)));
    assert!(tcp_checksum_ok(&inj[0]));
    // The kernel's ACK beyond C is held: the probe does not reveal it.
    let (_, v, _) = r.feed(3, pkt(ACK, 50, 1200, 100, b""));
    assert_eq!(v, Verdict::Hold);
    assert!(r.core.probe(&key(), 48));
    let inj = injected(&r.drain(4));
    assert_eq!(parse(&inj[0]).unwrap().ack, 1000);
    assert_eq!(r.core.snapshot().probes, 2);
    // Not gated: refused.
    r.core.unregister(&key());
    assert!(!r.core.probe(&key(), 48));
}
