//! What a peer received, read back from a packet capture: the BGP messages one
//! address sent another, with their capture timestamps.
//!
//! The lab captures with `tcpdump -w` inside the peer's own namespace (see
//! [`crate::Lab::capture_host`]), so the file shows exactly what reached the peer.
//! [`bgp_messages`] reads a classic pcap file (microsecond or nanosecond
//! timestamps, Ethernet or Linux cooked link types), keeps the TCP segments from
//! `from` to `to` with port 179 on either side, reassembles each TCP stream by
//! sequence number (retransmissions and overlaps counted once, out-of-order
//! segments held back until the gap fills), cuts it into BGP messages (RFC 4271
//! §4.1) and decodes UPDATEs with `holdfast-wire` (RFC 4271 §4.3, RFC 4760 NLRI).
//!
//! A stream whose SYN is not in the file (the capture started on an established
//! session) is joined at the first segment that starts with a BGP marker.
//!
//! Known issues: no IP fragment reassembly (BGP over TCP does not fragment in the
//! lab), no VLAN tags, and a truncated last record (tcpdump still writing) is
//! ignored.

use std::collections::{BTreeMap, HashMap};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::path::Path;

use holdfast_wire::{decode_update, frame, CodecCtx, HEADER_LEN};

use crate::error::{LabError, Result};

/// One BGP message as captured.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BgpRecord {
    /// Capture time of the segment that completed the message, seconds since the
    /// Unix epoch.
    pub at: f64,
    /// Message type (1 OPEN, 2 UPDATE, 3 NOTIFICATION, 4 KEEPALIVE, 5 ROUTE-REFRESH).
    pub kind: u8,
    /// Prefixes announced (UPDATE NLRI and MP_REACH_NLRI).
    pub announced: u32,
    /// Prefixes withdrawn (withdrawn routes and MP_UNREACH_NLRI).
    pub withdrawn: u32,
    /// TCP source port of its stream (a new port means a new connection).
    pub src_port: u16,
}

/// TCP flags of interest.
const SYN: u8 = 0x02;
const FIN: u8 = 0x01;
const RST: u8 = 0x04;

struct Segment<'a> {
    at: f64,
    src: IpAddr,
    dst: IpAddr,
    sport: u16,
    dport: u16,
    seq: u32,
    flags: u8,
    payload: &'a [u8],
}

/// A TCP stream being cut into BGP messages.
#[derive(Default)]
struct Stream {
    /// Sequence number of the next byte expected; `None` until joined.
    next: Option<u32>,
    /// Joined bytes not yet cut into messages.
    buf: Vec<u8>,
    /// Segments ahead of `next`, by sequence number.
    ahead: BTreeMap<u32, Vec<u8>>,
}

fn seq_lt(a: u32, b: u32) -> bool {
    (a.wrapping_sub(b) as i32) < 0
}

impl Stream {
    fn push(&mut self, seq: u32, flags: u8, data: &[u8]) {
        if flags & SYN != 0 {
            self.next = Some(seq.wrapping_add(1));
            self.buf.clear();
            self.ahead.clear();
            return;
        }
        if data.is_empty() {
            return;
        }
        let Some(next) = self.next else {
            if data.len() >= 16 && data[..16].iter().all(|b| *b == 0xff) {
                self.next = Some(seq.wrapping_add(data.len() as u32));
                self.buf.extend_from_slice(data);
            }
            return;
        };
        if seq_lt(next, seq) {
            self.ahead.entry(seq).or_insert_with(|| data.to_vec());
            return;
        }
        let skip = next.wrapping_sub(seq) as usize;
        if skip < data.len() {
            self.buf.extend_from_slice(&data[skip..]);
            self.next = Some(seq.wrapping_add(data.len() as u32));
        }
        // Segments that now fit.
        while let Some((&s, _)) = self.ahead.iter().next() {
            let n = self.next.unwrap_or(s);
            if seq_lt(n, s) {
                break;
            }
            let d = self.ahead.remove(&s).unwrap_or_default();
            let skip = n.wrapping_sub(s) as usize;
            if skip < d.len() {
                self.buf.extend_from_slice(&d[skip..]);
                self.next = Some(s.wrapping_add(d.len() as u32));
            }
        }
    }

    fn messages(&mut self, at: f64, src_port: u16, ctx: &CodecCtx, out: &mut Vec<BgpRecord>) {
        let mut used = 0;
        while let Ok(Some((kind, len))) = frame(&self.buf[used..]) {
            let msg = &self.buf[used..used + len];
            let (mut announced, mut withdrawn) = (0, 0);
            if kind == 2 {
                if let Ok(o) = decode_update(&msg[HEADER_LEN..], ctx) {
                    announced = o.update.announced.len() as u32;
                    withdrawn = o.update.withdrawn.len() as u32;
                }
            }
            out.push(BgpRecord {
                at,
                kind,
                announced,
                withdrawn,
                src_port,
            });
            used += len;
        }
        self.buf.drain(..used);
    }
}

/// The BGP messages `from` sent to `to` in the capture `path`, in capture order.
pub fn bgp_messages(path: &Path, from: IpAddr, to: IpAddr) -> Result<Vec<BgpRecord>> {
    let data = std::fs::read(path)
        .map_err(|e| LabError::Invalid(format!("reading {}: {e}", path.display())))?;
    let ctx = CodecCtx {
        four_octet_as: true,
        ibgp: false,
    };
    let mut streams: HashMap<(u16, u16), Stream> = HashMap::new();
    let mut out = Vec::new();
    for seg in segments(&data)? {
        if seg.src != from || seg.dst != to || (seg.sport != 179 && seg.dport != 179) {
            continue;
        }
        let s = streams.entry((seg.sport, seg.dport)).or_default();
        s.push(seg.seq, seg.flags, seg.payload);
        s.messages(seg.at, seg.sport, &ctx, &mut out);
        if seg.flags & (FIN | RST) != 0 {
            streams.remove(&(seg.sport, seg.dport));
        }
    }
    Ok(out)
}

/// What `tcpdump -r PATH -tt -e -n FILTER` prints of a capture, one line per
/// packet with its Unix timestamp first, between `from` and `to` (seconds since the
/// epoch): a failed run's own view of the wire (BFD control packets, ARP), for its
/// evidence.
pub fn tcpdump_lines(path: &Path, filter: &str, from: f64, to: f64) -> Result<Vec<String>> {
    let out = std::process::Command::new("tcpdump")
        .args(["-r"])
        .arg(path)
        .args(["-tt", "-e", "-n", filter])
        .output()
        .map_err(|e| LabError::Invalid(format!("tcpdump -r {}: {e}", path.display())))?;
    Ok(String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| {
            l.split_whitespace()
                .next()
                .and_then(|t| t.parse::<f64>().ok())
                .is_some_and(|t| t >= from && t <= to)
        })
        .map(str::to_string)
        .collect())
}

fn bad(path_part: &str) -> LabError {
    LabError::Invalid(format!("pcap: {path_part}"))
}

fn segments(data: &[u8]) -> Result<Vec<Segment<'_>>> {
    if data.len() < 24 {
        return Err(bad("shorter than its global header"));
    }
    let magic = u32::from_le_bytes([data[0], data[1], data[2], data[3]]);
    let (le, nanos) = match magic {
        0xa1b2_c3d4 => (true, false),
        0xa1b2_3c4d => (true, true),
        0xd4c3_b2a1 => (false, false),
        0x4d3c_b2a1 => (false, true),
        m => return Err(bad(&format!("unknown magic {m:#x} (pcapng is not read)"))),
    };
    let u32_at = |b: &[u8], i: usize| {
        let a = [b[i], b[i + 1], b[i + 2], b[i + 3]];
        if le {
            u32::from_le_bytes(a)
        } else {
            u32::from_be_bytes(a)
        }
    };
    let linktype = u32_at(data, 20);
    let mut out = Vec::new();
    let mut i = 24;
    while i + 16 <= data.len() {
        let sec = u32_at(data, i);
        let frac = u32_at(data, i + 4);
        let caplen = u32_at(data, i + 8) as usize;
        i += 16;
        if i + caplen > data.len() {
            break;
        }
        let pkt = &data[i..i + caplen];
        i += caplen;
        let at = f64::from(sec) + f64::from(frac) / if nanos { 1e9 } else { 1e6 };
        let l3 = match linktype {
            1 if pkt.len() >= 14 => Some((u16::from_be_bytes([pkt[12], pkt[13]]), &pkt[14..])),
            113 if pkt.len() >= 16 => Some((u16::from_be_bytes([pkt[14], pkt[15]]), &pkt[16..])),
            _ => None,
        };
        if let Some(seg) = l3.and_then(|(et, p)| ip_tcp(at, et, p)) {
            out.push(seg);
        }
    }
    Ok(out)
}

fn ip_tcp(at: f64, ethertype: u16, p: &[u8]) -> Option<Segment<'_>> {
    let (src, dst, proto, rest) = match ethertype {
        0x0800 if p.len() >= 20 => {
            let ihl = usize::from(p[0] & 0x0f) * 4;
            let total = usize::from(u16::from_be_bytes([p[2], p[3]])).min(p.len());
            if ihl < 20 || total < ihl {
                return None;
            }
            let s = Ipv4Addr::new(p[12], p[13], p[14], p[15]);
            let d = Ipv4Addr::new(p[16], p[17], p[18], p[19]);
            (IpAddr::V4(s), IpAddr::V4(d), p[9], &p[ihl..total])
        }
        0x86dd if p.len() >= 40 => {
            let plen = usize::from(u16::from_be_bytes([p[4], p[5]]));
            let mut s = [0u8; 16];
            let mut d = [0u8; 16];
            s.copy_from_slice(&p[8..24]);
            d.copy_from_slice(&p[24..40]);
            let end = (40 + plen).min(p.len());
            (
                IpAddr::V6(Ipv6Addr::from(s)),
                IpAddr::V6(Ipv6Addr::from(d)),
                p[6],
                &p[40..end],
            )
        }
        _ => return None,
    };
    if proto != 6 || rest.len() < 20 {
        return None;
    }
    let off = usize::from(rest[12] >> 4) * 4;
    if off < 20 || off > rest.len() {
        return None;
    }
    Some(Segment {
        at,
        src,
        dst,
        sport: u16::from_be_bytes([rest[0], rest[1]]),
        dport: u16::from_be_bytes([rest[2], rest[3]]),
        seq: u32::from_be_bytes([rest[4], rest[5], rest[6], rest[7]]),
        flags: rest[13],
        payload: &rest[off..],
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pcap_with(segs: &[(u32, u8, Vec<u8>)]) -> Vec<u8> {
        let mut f = Vec::new();
        f.extend_from_slice(&0xa1b2_c3d4u32.to_le_bytes());
        f.extend_from_slice(&2u16.to_le_bytes());
        f.extend_from_slice(&4u16.to_le_bytes());
        f.extend_from_slice(&[0; 8]);
        f.extend_from_slice(&65535u32.to_le_bytes());
        f.extend_from_slice(&1u32.to_le_bytes());
        for (n, (seq, flags, payload)) in segs.iter().enumerate() {
            let mut pkt = vec![0u8; 12];
            pkt.extend_from_slice(&[0x08, 0x00]);
            let total = 20 + 20 + payload.len();
            let mut ip = vec![
                0x45,
                0,
                (total >> 8) as u8,
                total as u8,
                0,
                0,
                0,
                0,
                64,
                6,
                0,
                0,
            ];
            ip.extend_from_slice(&[10, 0, 0, 1, 10, 0, 0, 2]);
            pkt.extend_from_slice(&ip);
            let mut tcp = vec![0, 179, 0xc0, 0x00];
            tcp.extend_from_slice(&seq.to_be_bytes());
            tcp.extend_from_slice(&[0, 0, 0, 0, 0x50, *flags, 0, 0, 0, 0, 0, 0]);
            pkt.extend_from_slice(&tcp);
            pkt.extend_from_slice(payload);
            f.extend_from_slice(&(n as u32 + 1).to_le_bytes());
            f.extend_from_slice(&0u32.to_le_bytes());
            f.extend_from_slice(&(pkt.len() as u32).to_le_bytes());
            f.extend_from_slice(&(pkt.len() as u32).to_le_bytes());
            f.extend_from_slice(&pkt);
        }
        f
    }

    fn keepalive() -> Vec<u8> {
        let mut m = vec![0xff; 16];
        m.extend_from_slice(&[0, 19, 4]);
        m
    }

    fn update_one_withdrawal() -> Vec<u8> {
        // Withdrawn 10.1.0.0/16, no attributes, no NLRI.
        let mut m = vec![0xff; 16];
        m.extend_from_slice(&[0, 26, 2, 0, 3, 16, 10, 1, 0, 0]);
        m
    }

    #[test]
    fn reassembles_split_retransmitted_and_out_of_order_messages() {
        let ka = keepalive();
        let up = update_one_withdrawal();
        let mut two = ka.clone();
        two.extend_from_slice(&up);
        let segs = vec![
            // Joined at a marker; the UPDATE is split, its tail arrives first.
            (1000, 0x18, ka.clone()),
            (1000 + 19 + 10, 0x18, up[10..].to_vec()),
            (1000 + 19, 0x18, up[..10].to_vec()),
            // A retransmission of both (counted once), then a KEEPALIVE.
            (1000, 0x18, two),
            (1000 + 19 + 26, 0x18, ka),
        ];
        let file = std::env::temp_dir().join(format!("hf-pcap-test-{}.pcap", std::process::id()));
        std::fs::write(&file, pcap_with(&segs)).unwrap();
        let from = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1));
        let to = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2));
        let msgs = bgp_messages(&file, from, to).unwrap();
        let kinds: Vec<u8> = msgs.iter().map(|m| m.kind).collect();
        assert_eq!(kinds, vec![4, 2, 4]);
        assert_eq!(msgs[1].withdrawn, 1);
        assert_eq!(msgs[1].announced, 0);
        assert_eq!(msgs[1].at, 3.0, "completed by the third segment");
        assert!(bgp_messages(&file, to, from).unwrap().is_empty());
        std::fs::remove_file(&file).unwrap();
    }
}
