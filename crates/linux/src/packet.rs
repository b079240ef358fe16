//! IPv4/IPv6 + TCP header parsing and the few rewrites the ACK gate needs.
//!
//! Pure and I/O-free: everything works on byte slices holding a packet as
//! the network layer sees it (starting at the IP header), which is what
//! NFQUEUE hands to user space.
//!
//! Checksums are updated incrementally with RFC 1624 equation 3,
//! `HC' = ~(~HC + ~m + m')`, so rewriting the ACK number and window of a
//! segment costs a handful of additions. This is only sound when the packet
//! carries a *complete* checksum; for one whose checksum the kernel left
//! partial (`CHECKSUM_PARTIAL`, reported in `NFQA_SKB_INFO`) the gate calls
//! [`fill_tcp_checksum`] after the rewrite.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

/// TCP flag bits (the low byte of the flags field).
pub const FIN: u8 = 0x01;
pub const SYN: u8 = 0x02;
pub const RST: u8 = 0x04;
pub const PSH: u8 = 0x08;
pub const ACK: u8 = 0x10;
pub const URG: u8 = 0x20;

/// TCP option kinds this module looks at.
const OPT_END: u8 = 0;
const OPT_NOP: u8 = 1;
const OPT_TIMESTAMP: u8 = 8;
const OPT_MD5: u8 = 19;
const OPT_AO: u8 = 29;

/// `a` comes strictly after `b` in sequence space (RFC 1982 style, mod 2^32).
#[inline]
pub fn seq_after(a: u32, b: u32) -> bool {
    (a.wrapping_sub(b) as i32) > 0
}

/// `a` comes strictly before `b` in sequence space.
#[inline]
pub fn seq_before(a: u32, b: u32) -> bool {
    seq_after(b, a)
}

/// What the gate needs to know about a TCP packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TcpMeta {
    /// Source and destination (address, port) as written in the packet.
    pub src: SocketAddr,
    pub dst: SocketAddr,
    /// Offset of the TCP header from the start of the packet.
    pub tcp_offset: usize,
    /// TCP header length including options (data offset * 4).
    pub tcp_header_len: usize,
    pub seq: u32,
    pub ack: u32,
    /// Flags byte (`FIN`, `SYN`, `RST`, `PSH`, `ACK`, `URG`, ECE, CWR).
    pub flags: u8,
    /// Raw window field (not scaled).
    pub window: u16,
    /// TCP payload length according to the IP length fields.
    pub payload_len: usize,
    /// The buffer holds fewer bytes than the IP header announces (the queue
    /// copy range cut it): the headers are readable, but the packet cannot
    /// be handed back modified.
    pub truncated: bool,
    /// An RFC 2385 MD5 signature or RFC 5925 TCP-AO option is present: any
    /// change to the header would invalidate it.
    pub signed: bool,
    /// Timestamp option (TSval, TSecr), if present.
    pub timestamp: Option<(u32, u32)>,
}

impl TcpMeta {
    #[inline]
    pub fn has(&self, flag: u8) -> bool {
        self.flags & flag != 0
    }

    /// An ACK that carries nothing else: no payload, no SYN, FIN or RST.
    #[inline]
    pub fn is_pure_ack(&self) -> bool {
        self.has(ACK) && !self.has(SYN | FIN | RST) && self.payload_len == 0
    }

    /// The sequence number just after this segment (payload, SYN and FIN
    /// each occupy sequence space).
    #[inline]
    pub fn seq_end(&self) -> u32 {
        let mut n = self.payload_len as u32;
        if self.has(SYN) {
            n = n.wrapping_add(1);
        }
        if self.has(FIN) {
            n = n.wrapping_add(1);
        }
        self.seq.wrapping_add(n)
    }

    /// Length of IP + TCP headers (where the payload starts).
    #[inline]
    pub fn headers_len(&self) -> usize {
        self.tcp_offset + self.tcp_header_len
    }

    /// The right edge of the receive window this packet advertises, given
    /// the sender's receive window scale. Not meaningful on SYNs (whose
    /// window is never scaled).
    #[inline]
    pub fn right_edge(&self, wscale: u8) -> u32 {
        self.ack
            .wrapping_add(u32::from(self.window) << wscale.min(14))
    }
}

#[inline]
fn be16(b: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([b[at], b[at + 1]])
}

#[inline]
fn be32(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

/// Parses an IPv4 or IPv6 packet carrying TCP. Returns `None` for anything
/// else: other protocols, IP fragments, IPv6 jumbograms, ESP, malformed or
/// too-short headers. Only the headers need to be present in `pkt`.
pub fn parse(pkt: &[u8]) -> Option<TcpMeta> {
    parse_len(pkt, None)
}

/// [`parse`], for a packet whose length the queue reported apart
/// (`wire_len`: `NFQA_CAP_LEN`, the length before the copy was cut). A GSO
/// packet beyond 64 KiB (BIG TCP, RFC 2675's jumbograms without the
/// option) carries 0 in its IP length field; its length is then
/// `wire_len`. Without it such a packet is not parsed.
pub fn parse_len(pkt: &[u8], wire_len: Option<usize>) -> Option<TcpMeta> {
    let first = *pkt.first()?;
    let (src_ip, dst_ip, tcp_offset, ip_total) = match first >> 4 {
        4 => {
            if pkt.len() < 20 {
                return None;
            }
            let ihl = usize::from(first & 0x0f) * 4;
            let total = match (be16(pkt, 2), wire_len) {
                (0, Some(n)) => n,
                (t, _) => usize::from(t),
            };
            let frag = be16(pkt, 6);
            // More-fragments set or a non-zero offset: not a whole segment.
            if ihl < 20 || pkt.len() < ihl || total < ihl || frag & 0x3fff != 0 || pkt[9] != 6 {
                return None;
            }
            let s = Ipv4Addr::new(pkt[12], pkt[13], pkt[14], pkt[15]);
            let d = Ipv4Addr::new(pkt[16], pkt[17], pkt[18], pkt[19]);
            (IpAddr::V4(s), IpAddr::V4(d), ihl, total)
        }
        6 => {
            if pkt.len() < 40 {
                return None;
            }
            let total = match (usize::from(be16(pkt, 4)), wire_len) {
                (0, Some(n)) if n > 40 => n,
                (0, _) => return None, // jumbogram (or nothing at all)
                (plen, _) => 40 + plen,
            };
            let mut s = [0u8; 16];
            let mut d = [0u8; 16];
            s.copy_from_slice(&pkt[8..24]);
            d.copy_from_slice(&pkt[24..40]);
            let mut next = pkt[6];
            let mut off = 40;
            loop {
                match next {
                    6 => break,
                    // Hop-by-hop, routing, destination options.
                    0 | 43 | 60 => {
                        if pkt.len() < off + 8 {
                            return None;
                        }
                        next = pkt[off];
                        off += (usize::from(pkt[off + 1]) + 1) * 8;
                    }
                    // Authentication header.
                    51 => {
                        if pkt.len() < off + 8 {
                            return None;
                        }
                        next = pkt[off];
                        off += (usize::from(pkt[off + 1]) + 2) * 4;
                    }
                    // Fragment, ESP, no-next-header, anything else.
                    _ => return None,
                }
                if off > total {
                    return None;
                }
            }
            (
                IpAddr::V6(Ipv6Addr::from(s)),
                IpAddr::V6(Ipv6Addr::from(d)),
                off,
                total,
            )
        }
        _ => return None,
    };
    let t = tcp_offset;
    if pkt.len() < t + 20 {
        return None;
    }
    let doff = usize::from(pkt[t + 12] >> 4) * 4;
    if doff < 20 || pkt.len() < t + doff || ip_total < t + doff {
        return None;
    }
    let mut timestamp = None;
    let mut signed = false;
    let opts = &pkt[t + 20..t + doff];
    let mut i = 0;
    while i < opts.len() {
        match opts[i] {
            OPT_END => break,
            OPT_NOP => i += 1,
            kind => {
                let Some(&len) = opts.get(i + 1) else { break };
                let len = usize::from(len);
                if len < 2 || i + len > opts.len() {
                    break;
                }
                match kind {
                    OPT_TIMESTAMP if len == 10 => {
                        timestamp = Some((be32(opts, i + 2), be32(opts, i + 6)));
                    }
                    OPT_MD5 | OPT_AO => signed = true,
                    _ => {}
                }
                i += len;
            }
        }
    }
    Some(TcpMeta {
        src: SocketAddr::new(src_ip, be16(pkt, t)),
        dst: SocketAddr::new(dst_ip, be16(pkt, t + 2)),
        tcp_offset: t,
        tcp_header_len: doff,
        seq: be32(pkt, t + 4),
        ack: be32(pkt, t + 8),
        flags: pkt[t + 13],
        window: be16(pkt, t + 14),
        payload_len: ip_total - t - doff,
        truncated: pkt.len() < ip_total,
        signed,
        timestamp,
    })
}

/// One's-complement sum of `data` as big-endian 16-bit words (an odd last
/// byte is padded with zero), added to `acc`. Not folded.
fn sum_words(mut acc: u64, data: &[u8]) -> u64 {
    let mut chunks = data.chunks_exact(2);
    for c in &mut chunks {
        acc += u64::from(u16::from_be_bytes([c[0], c[1]]));
    }
    if let [last] = chunks.remainder() {
        acc += u64::from(*last) << 8;
    }
    acc
}

fn fold(mut acc: u64) -> u16 {
    while acc > 0xffff {
        acc = (acc & 0xffff) + (acc >> 16);
    }
    acc as u16
}

/// RFC 1624 equation 3: the checksum `hc` after one 16-bit word of the
/// covered data changed from `old` to `new`.
#[inline]
pub fn csum_update16(hc: u16, old: u16, new: u16) -> u16 {
    !fold(u64::from(!hc) + u64::from(!old) + u64::from(new))
}

/// [`csum_update16`] for a 32-bit field (two words).
#[inline]
pub fn csum_update32(hc: u16, old: u32, new: u32) -> u16 {
    let hc = csum_update16(hc, (old >> 16) as u16, (new >> 16) as u16);
    csum_update16(hc, old as u16, new as u16)
}

/// Sum of the TCP pseudo-header for a segment of `tcp_len` bytes.
fn pseudo_sum(src: IpAddr, dst: IpAddr, tcp_len: usize) -> u64 {
    let mut acc = 0u64;
    match (src, dst) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            acc = sum_words(acc, &s.octets());
            acc = sum_words(acc, &d.octets());
            acc += 6;
            acc += tcp_len as u64;
        }
        (s, d) => {
            let s6 = match s {
                IpAddr::V6(a) => a,
                IpAddr::V4(a) => a.to_ipv6_mapped(),
            };
            let d6 = match d {
                IpAddr::V6(a) => a,
                IpAddr::V4(a) => a.to_ipv6_mapped(),
            };
            acc = sum_words(acc, &s6.octets());
            acc = sum_words(acc, &d6.octets());
            acc += (tcp_len as u64) >> 16;
            acc += (tcp_len as u64) & 0xffff;
            acc += 6;
        }
    }
    acc
}

/// The TCP checksum of a whole packet computed from scratch (the checksum
/// field itself is treated as zero). `None` if `pkt` is not a complete TCP
/// packet.
pub fn tcp_checksum(pkt: &[u8]) -> Option<u16> {
    let m = parse(pkt)?;
    if m.truncated {
        return None;
    }
    let t = m.tcp_offset;
    let end = m.headers_len() + m.payload_len;
    let seg = &pkt[t..end];
    let mut acc = pseudo_sum(m.src.ip(), m.dst.ip(), seg.len());
    acc = sum_words(acc, &seg[..16]);
    acc = sum_words(acc, &seg[18..]);
    Some(!fold(acc))
}

/// Whether the TCP checksum of a complete packet verifies.
pub fn tcp_checksum_ok(pkt: &[u8]) -> bool {
    let Some(m) = parse(pkt) else { return false };
    if m.truncated {
        return false;
    }
    let t = m.tcp_offset;
    let seg = &pkt[t..m.headers_len() + m.payload_len];
    fold(sum_words(
        pseudo_sum(m.src.ip(), m.dst.ip(), seg.len()),
        seg,
    )) == 0xffff
}

/// Writes the checksum [`tcp_checksum`] computes into the packet.
pub fn fill_tcp_checksum(pkt: &mut [u8]) -> Option<()> {
    let m = parse(pkt)?;
    let c = tcp_checksum(pkt)?;
    pkt[m.tcp_offset + 16..m.tcp_offset + 18].copy_from_slice(&c.to_be_bytes());
    Some(())
}

/// The window field to advertise with `new_ack` instead of `ack` so that
/// the right edge (`ack + window << wscale`) does not move left: the window
/// grows by `ceil((ack - new_ack) / 2^wscale)`, saturating at 65535.
pub fn widened_window(window: u16, ack: u32, new_ack: u32, wscale: u8) -> u16 {
    let ws = u32::from(wscale.min(14));
    let gap = u64::from(ack.wrapping_sub(new_ack));
    let extra = (gap + (1u64 << ws) - 1) >> ws;
    (u64::from(window) + extra).min(0xffff) as u16
}

/// The window field that advertises `right_edge` together with `ack`
/// (rounded up to the scale granularity, saturating at 65535).
pub fn window_for_edge(right_edge: u32, ack: u32, wscale: u8) -> u16 {
    if seq_before(right_edge, ack) {
        return 0;
    }
    let ws = u32::from(wscale.min(14));
    let span = u64::from(right_edge.wrapping_sub(ack));
    ((span + (1u64 << ws) - 1) >> ws).min(0xffff) as u16
}

/// Rewrites the ACK number and window field of the TCP header described by
/// `m` (which must come from `parse(pkt)`), updating the checksum
/// incrementally. The caller must not hand back a truncated packet.
pub fn rewrite_ack_window(pkt: &mut [u8], m: &TcpMeta, ack: u32, window: u16) {
    let t = m.tcp_offset;
    let mut ck = be16(pkt, t + 16);
    let old_ack = be32(pkt, t + 8);
    let old_win = be16(pkt, t + 14);
    ck = csum_update32(ck, old_ack, ack);
    ck = csum_update16(ck, old_win, window);
    pkt[t + 8..t + 12].copy_from_slice(&ack.to_be_bytes());
    pkt[t + 14..t + 16].copy_from_slice(&window.to_be_bytes());
    pkt[t + 16..t + 18].copy_from_slice(&ck.to_be_bytes());
}

/// TCPR's clamp: acknowledge only up to `confirmed` and widen the window so
/// the advertised right edge stays where the kernel put it. Returns the
/// new window field. `m` must come from `parse(pkt)`.
pub fn clamp_ack(pkt: &mut [u8], m: &TcpMeta, confirmed: u32, wscale: u8) -> u16 {
    let win = widened_window(m.window, m.ack, confirmed, wscale);
    rewrite_ack_window(pkt, m, confirmed, win);
    win
}

/// Builds a pure ACK from the headers of an earlier packet of the same
/// connection (`template` holds at least `m.headers_len()` bytes, `m` is its
/// parse): same addresses, ports and IP header fields, sequence number
/// `seq`, ACK number `ack`, window field `window`, ACK flag only, and only
/// the timestamp option (copied) among the options. IPv6 extension headers
/// are not copied. The IPv4 identification and header checksum are left
/// zero (a raw `IPPROTO_RAW` socket fills both in); the TCP checksum is
/// complete.
pub fn build_pure_ack(template: &[u8], m: &TcpMeta, seq: u32, ack: u32, window: u16) -> Vec<u8> {
    let ip_len = match m.src {
        SocketAddr::V4(_) => m.tcp_offset,
        SocketAddr::V6(_) => 40,
    };
    let opt_len = if m.timestamp.is_some() { 12 } else { 0 };
    let tcp_len = 20 + opt_len;
    let total = ip_len + tcp_len;
    let mut p = Vec::with_capacity(total);
    p.extend_from_slice(&template[..ip_len]);
    match m.src {
        SocketAddr::V4(_) => {
            p[2..4].copy_from_slice(&(total as u16).to_be_bytes());
            p[4..6].copy_from_slice(&[0, 0]); // identification: kernel fills
            p[10..12].copy_from_slice(&[0, 0]); // header checksum: kernel fills
        }
        SocketAddr::V6(_) => {
            p[4..6].copy_from_slice(&(tcp_len as u16).to_be_bytes());
            p[6] = 6;
        }
    }
    p.extend_from_slice(&m.src.port().to_be_bytes());
    p.extend_from_slice(&m.dst.port().to_be_bytes());
    p.extend_from_slice(&seq.to_be_bytes());
    p.extend_from_slice(&ack.to_be_bytes());
    p.push(((tcp_len / 4) as u8) << 4);
    p.push(ACK);
    p.extend_from_slice(&window.to_be_bytes());
    p.extend_from_slice(&[0, 0, 0, 0]); // checksum, urgent pointer
    if let Some((val, ecr)) = m.timestamp {
        p.extend_from_slice(&[OPT_NOP, OPT_NOP, OPT_TIMESTAMP, 10]);
        p.extend_from_slice(&val.to_be_bytes());
        p.extend_from_slice(&ecr.to_be_bytes());
    }
    if let SocketAddr::V4(_) = m.src {
        // Fill the IPv4 header checksum too, so the packet is complete on
        // its own (the kernel recomputes it anyway for IP_HDRINCL).
        let ihl = ip_len;
        let ck = !fold(sum_words(0, &p[..ihl]));
        p[10..12].copy_from_slice(&ck.to_be_bytes());
    }
    let _ = fill_tcp_checksum(&mut p);
    p
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Builds an IPv4/TCP packet with a correct checksum.
    fn v4_packet(
        flags: u8,
        seq: u32,
        ack: u32,
        window: u16,
        opts: &[u8],
        payload: &[u8],
    ) -> Vec<u8> {
        assert_eq!(opts.len() % 4, 0);
        let tcp_len = 20 + opts.len();
        let total = 20 + tcp_len + payload.len();
        let mut p = vec![
            0x45, 0, 0, 0, 0x12, 0x34, 0x40, 0, 64, 6, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2,
        ];
        p[2..4].copy_from_slice(&(total as u16).to_be_bytes());
        let ck = !fold(sum_words(0, &p));
        p[10..12].copy_from_slice(&ck.to_be_bytes());
        p.extend_from_slice(&179u16.to_be_bytes());
        p.extend_from_slice(&50000u16.to_be_bytes());
        p.extend_from_slice(&seq.to_be_bytes());
        p.extend_from_slice(&ack.to_be_bytes());
        p.push(((tcp_len / 4) as u8) << 4);
        p.push(flags);
        p.extend_from_slice(&window.to_be_bytes());
        p.extend_from_slice(&[0, 0, 0, 0]);
        p.extend_from_slice(opts);
        p.extend_from_slice(payload);
        fill_tcp_checksum(&mut p).unwrap();
        p
    }

    /// Builds an IPv6/TCP packet (optionally with a hop-by-hop header).
    fn v6_packet(flags: u8, seq: u32, ack: u32, window: u16, hbh: bool, payload: &[u8]) -> Vec<u8> {
        let ext = if hbh { 8 } else { 0 };
        let plen = ext + 20 + payload.len();
        let mut p = vec![0x60, 0, 0, 0];
        p.extend_from_slice(&(plen as u16).to_be_bytes());
        p.push(if hbh { 0 } else { 6 });
        p.push(64);
        let s: Ipv6Addr = "2001:db8::1".parse().unwrap();
        let d: Ipv6Addr = "2001:db8::2".parse().unwrap();
        p.extend_from_slice(&s.octets());
        p.extend_from_slice(&d.octets());
        if hbh {
            p.extend_from_slice(&[6, 0, 1, 4, 0, 0, 0, 0]); // next=TCP, PadN
        }
        p.extend_from_slice(&40179u16.to_be_bytes());
        p.extend_from_slice(&179u16.to_be_bytes());
        p.extend_from_slice(&seq.to_be_bytes());
        p.extend_from_slice(&ack.to_be_bytes());
        p.push(5 << 4);
        p.push(flags);
        p.extend_from_slice(&window.to_be_bytes());
        p.extend_from_slice(&[0, 0, 0, 0]);
        p.extend_from_slice(payload);
        fill_tcp_checksum(&mut p).unwrap();
        p
    }

    fn ts_opts(val: u32, ecr: u32) -> Vec<u8> {
        let mut o = vec![OPT_NOP, OPT_NOP, OPT_TIMESTAMP, 10];
        o.extend_from_slice(&val.to_be_bytes());
        o.extend_from_slice(&ecr.to_be_bytes());
        o
    }

    /// A known-good checksum: computed by hand-summing the words, so the
    /// from-scratch routine itself is checked and not only compared with
    /// the incremental one.
    #[test]
    fn checksum_matches_reference_sum() {
        let p = v4_packet(ACK, 1, 2, 3, &[], &[]);
        // Pseudo header: 0a00 0001 0a00 0002 0006 0014; TCP header words:
        // 00b3 c350 0000 0001 0000 0002 5010 0003 0000 0000.
        let words: [u32; 16] = [
            0x0a00, 0x0001, 0x0a00, 0x0002, 0x0006, 0x0014, 0x00b3, 0xc350, 0x0000, 0x0001, 0x0000,
            0x0002, 0x5010, 0x0003, 0x0000, 0x0000,
        ];
        let mut s: u32 = words.iter().sum();
        while s > 0xffff {
            s = (s & 0xffff) + (s >> 16);
        }
        let expect = !(s as u16);
        assert_eq!(be16(&p, 36), expect);
        assert!(tcp_checksum_ok(&p));
    }

    #[test]
    fn parse_v4() {
        let p = v4_packet(ACK | PSH, 1000, 2000, 512, &ts_opts(7, 9), b"hello");
        let m = parse(&p).unwrap();
        assert_eq!(m.src, "10.0.0.1:179".parse().unwrap());
        assert_eq!(m.dst, "10.0.0.2:50000".parse().unwrap());
        assert_eq!((m.seq, m.ack, m.window), (1000, 2000, 512));
        assert_eq!(m.tcp_offset, 20);
        assert_eq!(m.tcp_header_len, 32);
        assert_eq!(m.payload_len, 5);
        assert_eq!(m.timestamp, Some((7, 9)));
        assert!(!m.truncated && !m.signed && !m.is_pure_ack());
        assert_eq!(m.seq_end(), 1005);
        assert!(tcp_checksum_ok(&p));
    }

    #[test]
    fn parse_v6_with_extension_header() {
        for hbh in [false, true] {
            let p = v6_packet(ACK, 5, 6, 7, hbh, b"xyz");
            let m = parse(&p).unwrap();
            assert_eq!(m.src, "[2001:db8::1]:40179".parse().unwrap());
            assert_eq!(m.dst, "[2001:db8::2]:179".parse().unwrap());
            assert_eq!(m.tcp_offset, if hbh { 48 } else { 40 });
            assert_eq!(m.payload_len, 3);
            assert!(tcp_checksum_ok(&p));
        }
    }

    #[test]
    fn rejects_non_tcp_fragments_and_garbage() {
        let mut p = v4_packet(ACK, 1, 2, 3, &[], &[]);
        p[9] = 17;
        assert!(parse(&p).is_none());
        let mut p = v4_packet(ACK, 1, 2, 3, &[], &[]);
        p[6] = 0x20; // more fragments
        assert!(parse(&p).is_none());
        assert!(parse(&[]).is_none());
        assert!(parse(&[0x45; 19]).is_none());
        let p = v4_packet(ACK, 1, 2, 3, &[], &[]);
        assert!(parse(&p[..39]).is_none());
        let mut p = v6_packet(ACK, 1, 2, 3, false, &[]);
        p[6] = 44; // fragment header
        assert!(parse(&p).is_none());
        assert!(parse(&[0x20; 60]).is_none());
    }

    #[test]
    fn truncated_and_signed() {
        let p = v4_packet(ACK, 1, 2, 3, &[], &[0u8; 100]);
        let m = parse(&p[..60]).unwrap();
        assert!(m.truncated);
        assert_eq!(m.payload_len, 100);
        assert!(tcp_checksum(&p[..60]).is_none());
        // MD5 option: kind 19, len 18, padded to 20.
        let mut o = vec![OPT_MD5, 18];
        o.extend_from_slice(&[0xab; 16]);
        o.extend_from_slice(&[OPT_NOP, OPT_END]);
        let p = v4_packet(ACK, 1, 2, 3, &o, &[]);
        assert!(parse(&p).unwrap().signed);
    }

    #[test]
    fn big_tcp_lengths_come_from_the_queue() {
        // IPv4 BIG TCP: total length 0, the copy cut at 60 bytes of 100,000.
        let mut p = v4_packet(ACK, 1, 2, 3, &[], &[0u8; 100]);
        p[2..4].copy_from_slice(&[0, 0]);
        assert!(parse(&p[..60]).is_none(), "shorter than its own headers");
        let m = parse_len(&p[..60], Some(100_000)).unwrap();
        assert!(m.truncated);
        assert_eq!((m.ack, m.payload_len), (2, 100_000 - 40));
        // IPv6: payload length 0.
        let mut p = v6_packet(ACK, 1, 2, 3, false, &[0u8; 100]);
        p[4..6].copy_from_slice(&[0, 0]);
        assert!(parse(&p).is_none());
        let m = parse_len(&p[..80], Some(100_000)).unwrap();
        assert!(m.truncated);
        assert_eq!((m.ack, m.payload_len), (2, 100_000 - 60));
        // A length field that is set wins over the queue's figure.
        let p = v4_packet(ACK, 1, 2, 3, &[], &[0u8; 100]);
        assert_eq!(parse_len(&p, Some(9999)).unwrap().payload_len, 100);
    }

    #[test]
    fn pure_ack_detection() {
        let cases: [(u8, &[u8], bool); 7] = [
            (ACK, b"", true),
            (ACK | PSH, b"", true),
            (ACK, b"d", false),
            (ACK | FIN, b"", false),
            (ACK | SYN, b"", false),
            (ACK | RST, b"", false),
            (RST, b"", false),
        ];
        for (flags, payload, pure) in cases {
            let p = v4_packet(flags, 1, 2, 3, &[], payload);
            assert_eq!(parse(&p).unwrap().is_pure_ack(), pure, "flags {flags:#x}");
        }
    }

    #[test]
    fn seq_arithmetic_wraps() {
        assert!(seq_after(1, 0));
        assert!(seq_after(5, u32::MAX - 5));
        assert!(!seq_after(u32::MAX - 5, 5));
        assert!(seq_before(u32::MAX, 0));
        assert!(!seq_after(7, 7) && !seq_before(7, 7));
        let p = v4_packet(ACK | FIN, u32::MAX - 1, 0, 0, &[], b"ab");
        assert_eq!(parse(&p).unwrap().seq_end(), 1);
    }

    #[test]
    fn window_widening() {
        // No scaling: the window grows by exactly the gap.
        assert_eq!(widened_window(1000, 5000, 4000, 0), 2000);
        // Scale 7 (128-byte units): ceil(1000 / 128) = 8.
        assert_eq!(widened_window(10, 5000, 4000, 7), 18);
        // The right edge never moves left.
        for ws in 0..=14u8 {
            for gap in [0u32, 1, 127, 128, 129, 65535, 1 << 20] {
                let (a, w) = (u32::MAX - 3, 100u16); // wraps
                let c = a.wrapping_sub(gap);
                let nw = widened_window(w, a, c, ws);
                let old_edge = u64::from(w) << ws;
                let new_edge = (u64::from(nw) << ws) as i64 - i64::from(gap);
                if nw < 0xffff {
                    assert!(new_edge >= old_edge as i64, "ws {ws} gap {gap}");
                    assert!(
                        new_edge - (old_edge as i64) < (1i64 << ws),
                        "ws {ws} gap {gap}"
                    );
                }
            }
        }
        assert_eq!(widened_window(65000, 1 << 20, 0, 0), 65535);
        assert_eq!(window_for_edge(1000, 400, 0), 600);
        assert_eq!(window_for_edge(1000, 400, 4), 38);
        assert_eq!(window_for_edge(400, 1000, 4), 0);
    }

    #[test]
    fn clamp_v4_recomputed_checksum() {
        for (ack, confirmed, ws) in [
            (0x1234_5678u32, 0x1234_0000u32, 7u8),
            (10, u32::MAX - 10, 0), // wraps
            (0xffff_ffff, 0x0000_0001, 14),
            (70000, 1, 2),
        ] {
            let mut p = v4_packet(ACK | PSH, 42, ack, 0x0102, &ts_opts(1, 2), b"BGP data!");
            let m = parse(&p).unwrap();
            let win = clamp_ack(&mut p, &m, confirmed, ws);
            let m2 = parse(&p).unwrap();
            assert_eq!(m2.ack, confirmed);
            assert_eq!(m2.window, win);
            assert_eq!(win, widened_window(0x0102, ack, confirmed, ws));
            assert!(tcp_checksum_ok(&p), "incremental checksum must verify");
            assert_eq!(be16(&p, m.tcp_offset + 16), tcp_checksum(&p).unwrap());
            // Everything else is untouched.
            assert_eq!(
                (m2.seq, m2.flags, m2.payload_len),
                (m.seq, m.flags, m.payload_len)
            );
            assert_eq!(&p[m.headers_len()..], b"BGP data!");
        }
    }

    #[test]
    fn clamp_v6_recomputed_checksum() {
        for hbh in [false, true] {
            let mut p = v6_packet(ACK | FIN, 9, 100_000, 300, hbh, b"bye");
            let m = parse(&p).unwrap();
            clamp_ack(&mut p, &m, 99_000, 3);
            let m2 = parse(&p).unwrap();
            assert_eq!(m2.ack, 99_000);
            assert_eq!(m2.window, 300 + 125);
            assert!(tcp_checksum_ok(&p));
        }
    }

    #[test]
    fn incremental_update_matches_scratch_on_many_values() {
        // Deterministic pseudo-random fields.
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for _ in 0..2000 {
            let r = next();
            let mut p = v4_packet(
                ACK,
                r as u32,
                (r >> 32) as u32,
                (r >> 8) as u16,
                &[],
                &[r as u8; 3],
            );
            let m = parse(&p).unwrap();
            let r2 = next();
            rewrite_ack_window(&mut p, &m, r2 as u32, (r2 >> 40) as u16);
            assert!(tcp_checksum_ok(&p));
        }
    }

    #[test]
    fn builds_pure_ack_from_template() {
        let p = v4_packet(ACK | PSH, 1000, 2000, 512, &ts_opts(7, 9), b"payload");
        let m = parse(&p).unwrap();
        let a = build_pure_ack(&p, &m, m.seq_end(), 1990, 600);
        let am = parse(&a).unwrap();
        assert!(am.is_pure_ack());
        assert_eq!((am.src, am.dst), (m.src, m.dst));
        assert_eq!((am.seq, am.ack, am.window), (1007, 1990, 600));
        assert_eq!(am.timestamp, Some((7, 9)));
        assert!(!am.truncated);
        assert!(tcp_checksum_ok(&a));
        assert_eq!(fold(sum_words(0, &a[..20])), 0xffff, "IPv4 header checksum");

        let p6 = v6_packet(ACK, 1, 2, 3, true, b"x");
        let m6 = parse(&p6).unwrap();
        let a6 = build_pure_ack(&p6, &m6, 2, 2, 3);
        let am6 = parse(&a6).unwrap();
        assert_eq!(am6.tcp_offset, 40);
        assert!(am6.is_pure_ack() && am6.timestamp.is_none());
        assert!(tcp_checksum_ok(&a6));
    }
}
