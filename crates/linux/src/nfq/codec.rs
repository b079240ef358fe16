//! The NFQUEUE netlink codec: the messages the ACK gate sends
//! (binding and configuring its queue, verdicts with or without a rewritten
//! packet) and the parsing of what the kernel sends back (queued packets,
//! errors and acknowledgements). Pure: bytes in, bytes out; the socket is
//! in [`crate::nfq`].
//!
//! Standards: netlink (netlink(7), RFC 3549) and nfnetlink
//! (`linux/netfilter/nfnetlink.h`: `struct nfgenmsg` after the netlink
//! header), NFQUEUE (`linux/netfilter/nfnetlink_queue.h`: `NFQNL_MSG_*`
//! messages, `NFQA_*` attributes). Netlink headers and attribute headers
//! are in host byte order, NFQUEUE's attribute payloads in network byte
//! order.
//!
//! # Known issues
//!
//! - Only the attributes the gate uses are read (`NFQA_PACKET_HDR`,
//!   `NFQA_IFINDEX_OUTDEV`, `NFQA_PAYLOAD`, `NFQA_CAP_LEN`, `NFQA_SKB_INFO`); conntrack, marks, timestamps,
//!   UIDs and nested attributes are skipped.
//! - Messages are built for one queue and `AF_UNSPEC`; batched verdicts
//!   (`NFQNL_MSG_VERDICT_BATCH`) are not used: one message per packet.
//! - A packet message without `NFQA_PACKET_HDR` is reported as
//!   [`NlMsg::Other`]; a packet without `NFQA_PAYLOAD` has an empty payload.

use crate::gate::SkbInfo;
use std::ops::Range;

const NFNL_SUBSYS_QUEUE: u16 = 3;
const NFQNL_MSG_PACKET: u16 = 0;
const NFQNL_MSG_VERDICT: u16 = 1;
const NFQNL_MSG_CONFIG: u16 = 2;
const NFQNL_CFG_CMD_BIND: u8 = 1;
const NFQNL_COPY_PACKET: u8 = 2;
const NFQA_CFG_CMD: u16 = 1;
const NFQA_CFG_PARAMS: u16 = 2;
const NFQA_CFG_QUEUE_MAXLEN: u16 = 3;
const NFQA_CFG_MASK: u16 = 4;
const NFQA_CFG_FLAGS: u16 = 5;
const NFQA_CFG_F_FAIL_OPEN: u32 = 1 << 0;
const NFQA_CFG_F_GSO: u32 = 1 << 2;
const NFQA_PACKET_HDR: u16 = 1;
const NFQA_VERDICT_HDR: u16 = 2;
const NFQA_IFINDEX_OUTDEV: u16 = 6;
const NFQA_PAYLOAD: u16 = 10;
const NFQA_CAP_LEN: u16 = 13;
const NFQA_SKB_INFO: u16 = 14;
/// `NFQA_SKB_INFO` bits: the TCP checksum is only the pseudo-header's
/// (`CHECKSUM_PARTIAL`), and the packet is a GSO packet.
const NFQA_SKB_CSUMNOTREADY: u32 = 1 << 0;
const NFQA_SKB_GSO: u32 = 1 << 1;
pub(super) const NF_DROP: u32 = 0;
pub(super) const NF_ACCEPT: u32 = 1;
const NLA_TYPE_MASK: u16 = 0x3fff;
const NLMSG_HDRLEN: usize = 16;
const NFGEN_HDRLEN: usize = 4;
/// Kernel queue length: packets held plus packets not yet read.
const QUEUE_MAXLEN: u32 = 16384;

fn align4(n: usize) -> usize {
    (n + 3) & !3
}

/// Netlink message header + nfgenmsg for queue `queue` (length patched by
/// the caller).
fn nfq_header(buf: &mut Vec<u8>, msg_type: u16, flags: u16, seq: u32, queue: u16) {
    buf.clear();
    buf.extend_from_slice(&0u32.to_ne_bytes()); // nlmsg_len
    buf.extend_from_slice(&((NFNL_SUBSYS_QUEUE << 8) | msg_type).to_ne_bytes());
    buf.extend_from_slice(&flags.to_ne_bytes());
    buf.extend_from_slice(&seq.to_ne_bytes());
    buf.extend_from_slice(&0u32.to_ne_bytes()); // nlmsg_pid
    buf.push(libc::AF_UNSPEC as u8); // nfgen_family
    buf.push(0); // NFNETLINK_V0
    buf.extend_from_slice(&queue.to_be_bytes()); // res_id
}

fn put_attr(buf: &mut Vec<u8>, ty: u16, data: &[u8]) {
    buf.extend_from_slice(&((4 + data.len()) as u16).to_ne_bytes());
    buf.extend_from_slice(&ty.to_ne_bytes());
    buf.extend_from_slice(data);
    buf.resize(align4(buf.len()), 0);
}

fn patch_len(buf: &mut [u8], len: usize) {
    buf[..4].copy_from_slice(&(len as u32).to_ne_bytes());
}

/// The message binding queue `queue` (request `seq`, acknowledgement
/// asked for): whole packets (copy range 0xffff, which the kernel caps at
/// 65531), a kernel queue of [`QUEUE_MAXLEN`] packets, fail-open explicitly
/// cleared and GSO set (see the module docs of [`crate::nfq`]).
pub(super) fn bind_message(queue: u16, seq: u32) -> Vec<u8> {
    let mut m = Vec::with_capacity(96);
    nfq_header(
        &mut m,
        NFQNL_MSG_CONFIG,
        (libc::NLM_F_REQUEST | libc::NLM_F_ACK) as u16,
        seq,
        queue,
    );
    // struct nfqnl_msg_config_cmd { u8 command; u8 pad; be16 pf; }
    put_attr(&mut m, NFQA_CFG_CMD, &[NFQNL_CFG_CMD_BIND, 0, 0, 0]);
    // struct nfqnl_msg_config_params { be32 copy_range; u8 copy_mode; }
    // (packed); the kernel caps the range at 65531.
    let mut params = 0xffffu32.to_be_bytes().to_vec();
    params.push(NFQNL_COPY_PACKET);
    put_attr(&mut m, NFQA_CFG_PARAMS, &params);
    put_attr(&mut m, NFQA_CFG_QUEUE_MAXLEN, &QUEUE_MAXLEN.to_be_bytes());
    // Explicitly clear fail-open; set GSO.
    put_attr(
        &mut m,
        NFQA_CFG_MASK,
        &(NFQA_CFG_F_FAIL_OPEN | NFQA_CFG_F_GSO).to_be_bytes(),
    );
    put_attr(&mut m, NFQA_CFG_FLAGS, &NFQA_CFG_F_GSO.to_be_bytes());
    let len = m.len();
    patch_len(&mut m, len);
    m
}

/// Builds in `buf` the verdict `verdict` ([`NF_ACCEPT`], [`NF_DROP`]) on
/// packet `id` of queue `queue`. With `payload_len`, the message goes on
/// with a replacement payload of that many bytes: `buf` then ends with the
/// payload attribute's header, the message length already counts the
/// payload and its padding, and the returned number of zero bytes must
/// follow the payload.
pub(super) fn verdict_message(
    buf: &mut Vec<u8>,
    queue: u16,
    id: u32,
    verdict: u32,
    payload_len: Option<usize>,
) -> usize {
    nfq_header(buf, NFQNL_MSG_VERDICT, libc::NLM_F_REQUEST as u16, 0, queue);
    let mut vh = [0u8; 8];
    vh[..4].copy_from_slice(&verdict.to_be_bytes());
    vh[4..].copy_from_slice(&id.to_be_bytes());
    put_attr(buf, NFQA_VERDICT_HDR, &vh);
    match payload_len {
        None => {
            let len = buf.len();
            patch_len(buf, len);
            0
        }
        Some(n) => {
            buf.extend_from_slice(&((4 + n) as u16).to_ne_bytes());
            buf.extend_from_slice(&NFQA_PAYLOAD.to_ne_bytes());
            let pad = align4(n) - n;
            let len = buf.len() + n + pad;
            patch_len(buf, len);
            pad
        }
    }
}

/// One message read from the netlink socket.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum NlMsg {
    Packet {
        id: u32,
        payload: Range<usize>,
        oif: u32,
        skb: SkbInfo,
    },
    /// `NLMSG_ERROR` (error 0 is an ACK).
    Error {
        seq: u32,
        errno: i32,
    },
    Other,
}

fn u16_at(b: &[u8], at: usize) -> u16 {
    u16::from_ne_bytes([b[at], b[at + 1]])
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_ne_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

fn be32_at(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

/// Splits a datagram read from the socket into messages; a truncated or
/// malformed tail is ignored.
pub(super) fn parse_nl(buf: &[u8], msgs: &mut Vec<NlMsg>) {
    let mut off = 0;
    while off + NLMSG_HDRLEN <= buf.len() {
        let len = u32_at(buf, off) as usize;
        if len < NLMSG_HDRLEN || off + len > buf.len() {
            break;
        }
        let ty = u16_at(buf, off + 4);
        let seq = u32_at(buf, off + 8);
        let msg = if ty == libc::NLMSG_ERROR as u16 && len >= NLMSG_HDRLEN + 4 {
            NlMsg::Error {
                seq,
                errno: -(u32_at(buf, off + NLMSG_HDRLEN) as i32),
            }
        } else if ty == (NFNL_SUBSYS_QUEUE << 8) | NFQNL_MSG_PACKET {
            let mut id = None;
            let mut payload = 0..0;
            let mut oif = 0;
            let mut skb = SkbInfo::default();
            let mut a = off + NLMSG_HDRLEN + NFGEN_HDRLEN;
            let end = off + len;
            while a + 4 <= end {
                let alen = usize::from(u16_at(buf, a));
                let aty = u16_at(buf, a + 2) & NLA_TYPE_MASK;
                if alen < 4 || a + alen > end {
                    break;
                }
                let data = a + 4..a + alen;
                match aty {
                    NFQA_PACKET_HDR if data.len() >= 4 => id = Some(be32_at(buf, data.start)),
                    NFQA_IFINDEX_OUTDEV if data.len() >= 4 => oif = be32_at(buf, data.start),
                    NFQA_PAYLOAD => payload = data,
                    NFQA_SKB_INFO if data.len() >= 4 => {
                        let bits = be32_at(buf, data.start);
                        skb.csum_partial = bits & NFQA_SKB_CSUMNOTREADY != 0;
                        skb.gso = bits & NFQA_SKB_GSO != 0;
                    }
                    NFQA_CAP_LEN if data.len() >= 4 => {
                        skb.wire_len = Some(be32_at(buf, data.start));
                    }
                    _ => {}
                }
                a += align4(alen);
            }
            match id {
                Some(id) => NlMsg::Packet {
                    id,
                    payload,
                    oif,
                    skb,
                },
                None => NlMsg::Other,
            }
        } else {
            NlMsg::Other
        };
        msgs.push(msg);
        off += align4(len);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_netlink_packet_messages() {
        let mut m = Vec::new();
        nfq_header(&mut m, NFQNL_MSG_PACKET, 0, 0, 3);
        // NFQA_PACKET_HDR: id, hw protocol, hook (7 bytes).
        put_attr(&mut m, NFQA_PACKET_HDR, &[0, 0, 0, 42, 8, 0, 3]);
        put_attr(&mut m, NFQA_IFINDEX_OUTDEV, &7u32.to_be_bytes());
        let start = m.len() + 4;
        put_attr(&mut m, NFQA_PAYLOAD, b"abcde");
        put_attr(
            &mut m,
            NFQA_SKB_INFO,
            &(NFQA_SKB_CSUMNOTREADY | NFQA_SKB_GSO).to_be_bytes(),
        );
        put_attr(&mut m, NFQA_CAP_LEN, &100_000u32.to_be_bytes());
        let len = m.len();
        patch_len(&mut m, len);
        // A second packet without NFQA_SKB_INFO: a complete checksum.
        let mut p = Vec::new();
        nfq_header(&mut p, NFQNL_MSG_PACKET, 0, 0, 3);
        put_attr(&mut p, NFQA_PACKET_HDR, &[0, 0, 0, 43, 8, 0, 3]);
        put_attr(&mut p, NFQA_SKB_INFO, &NFQA_SKB_CSUMNOTREADY.to_be_bytes());
        let len = p.len();
        patch_len(&mut p, len);
        m.extend_from_slice(&p);
        // Followed by an error message.
        let mut e = vec![0u8; 36];
        e[..4].copy_from_slice(&36u32.to_ne_bytes());
        e[4..6].copy_from_slice(&(libc::NLMSG_ERROR as u16).to_ne_bytes());
        e[8..12].copy_from_slice(&9u32.to_ne_bytes());
        e[16..20].copy_from_slice(&(-libc::ENOENT).to_ne_bytes());
        m.extend_from_slice(&e);
        let mut msgs = Vec::new();
        parse_nl(&m, &mut msgs);
        assert_eq!(
            msgs,
            vec![
                NlMsg::Packet {
                    id: 42,
                    payload: start..start + 5,
                    oif: 7,
                    skb: SkbInfo {
                        csum_partial: true,
                        gso: true,
                        wire_len: Some(100_000)
                    }
                },
                NlMsg::Packet {
                    id: 43,
                    payload: 0..0,
                    oif: 0,
                    skb: SkbInfo {
                        csum_partial: true,
                        gso: false,
                        wire_len: None
                    }
                },
                NlMsg::Error {
                    seq: 9,
                    errno: libc::ENOENT
                }
            ]
        );
        // Truncated input yields nothing rather than panicking.
        msgs.clear();
        parse_nl(&m[..10], &mut msgs);
        parse_nl(&m[..30], &mut msgs);
        assert!(msgs.is_empty());
    }

    /// The attributes of a message built here: (type, data).
    fn attrs(m: &[u8]) -> Vec<(u16, Vec<u8>)> {
        let mut out = Vec::new();
        let mut a = NLMSG_HDRLEN + NFGEN_HDRLEN;
        while a + 4 <= m.len() {
            let alen = usize::from(u16_at(m, a));
            out.push((u16_at(m, a + 2), m[a + 4..(a + alen).min(m.len())].to_vec()));
            a += align4(alen);
        }
        out
    }

    #[test]
    fn bind_message_clears_fail_open_and_sets_gso() {
        let m = bind_message(1707, 1);
        assert_eq!(u32_at(&m, 0) as usize, m.len());
        assert_eq!(u16_at(&m, 4), (NFNL_SUBSYS_QUEUE << 8) | NFQNL_MSG_CONFIG);
        assert_eq!(
            u16_at(&m, 6),
            (libc::NLM_F_REQUEST | libc::NLM_F_ACK) as u16
        );
        assert_eq!(u32_at(&m, 8), 1, "sequence number");
        assert_eq!(&m[18..20], &1707u16.to_be_bytes(), "res_id: the queue");
        let mut params = 0xffffu32.to_be_bytes().to_vec();
        params.push(NFQNL_COPY_PACKET);
        assert_eq!(
            attrs(&m),
            vec![
                (NFQA_CFG_CMD, vec![NFQNL_CFG_CMD_BIND, 0, 0, 0]),
                (NFQA_CFG_PARAMS, params),
                (NFQA_CFG_QUEUE_MAXLEN, QUEUE_MAXLEN.to_be_bytes().to_vec()),
                (
                    NFQA_CFG_MASK,
                    (NFQA_CFG_F_FAIL_OPEN | NFQA_CFG_F_GSO)
                        .to_be_bytes()
                        .to_vec()
                ),
                (NFQA_CFG_FLAGS, NFQA_CFG_F_GSO.to_be_bytes().to_vec()),
            ]
        );
    }

    #[test]
    fn verdict_messages_with_and_without_payload() {
        let mut m = Vec::new();
        assert_eq!(verdict_message(&mut m, 3, 42, NF_DROP, None), 0);
        assert_eq!(u32_at(&m, 0) as usize, m.len());
        assert_eq!(u16_at(&m, 4), (NFNL_SUBSYS_QUEUE << 8) | NFQNL_MSG_VERDICT);
        let mut vh = NF_DROP.to_be_bytes().to_vec();
        vh.extend_from_slice(&42u32.to_be_bytes());
        assert_eq!(attrs(&m), vec![(NFQA_VERDICT_HDR, vh)]);

        // Reused buffer; a 5-byte payload follows with 3 bytes of padding.
        let pad = verdict_message(&mut m, 3, 43, NF_ACCEPT, Some(5));
        assert_eq!(pad, 3);
        assert_eq!(u32_at(&m, 0) as usize, m.len() + 5 + 3);
        let mut whole = m.clone();
        whole.extend_from_slice(b"abcde\0\0\0");
        let mut vh = NF_ACCEPT.to_be_bytes().to_vec();
        vh.extend_from_slice(&43u32.to_be_bytes());
        assert_eq!(
            attrs(&whole),
            vec![(NFQA_VERDICT_HDR, vh), (NFQA_PAYLOAD, b"abcde".to_vec())]
        );
    }
}
