//! A minimal MRT TABLE_DUMP_V2 writer (RFC 6396): the table gobgpd
//! originates in Fig. 6(b) with `gobgp mrt inject global FILE`.

use crate::dut::origin_prefix;
use anyhow::{Context, Result};
use std::io::Write;
use std::net::Ipv4Addr;
use std::path::Path;

const TABLE_DUMP_V2: u16 = 13;
const PEER_INDEX_TABLE: u16 = 1;
const RIB_IPV4_UNICAST: u16 = 2;

fn record(out: &mut Vec<u8>, subtype: u16, body: &[u8]) {
    out.extend_from_slice(&0u32.to_be_bytes());
    out.extend_from_slice(&TABLE_DUMP_V2.to_be_bytes());
    out.extend_from_slice(&subtype.to_be_bytes());
    out.extend_from_slice(&(body.len() as u32).to_be_bytes());
    out.extend_from_slice(body);
}

/// Entries repeated after the table: `gobgp mrt inject` (3.10) exits before
/// its last ~1–2k paths reach gobgpd, so the table is followed by this many
/// repeats of its first entries (re-adding an existing path changes nothing).
pub const PAD: usize = 5000;

/// Encodes `n` consecutive /24s from [`crate::dut::ORIGIN_BASE`], each with
/// ORIGIN IGP, an empty AS_PATH and NEXT_HOP `next_hop`, from one peer
/// (`next_hop`, AS 0), then [`PAD`] repeats of the first entries.
pub fn encode_table(n: usize, next_hop: Ipv4Addr) -> Vec<u8> {
    let mut out = Vec::with_capacity((n + PAD) * 40 + 64);
    let mut peers = Vec::new();
    peers.extend_from_slice(&next_hop.octets()); // collector BGP ID
    peers.extend_from_slice(&0u16.to_be_bytes()); // view name length
    peers.extend_from_slice(&1u16.to_be_bytes()); // peer count
    peers.push(0b10); // peer type: IPv4 address, 4-octet AS
    peers.extend_from_slice(&next_hop.octets()); // peer BGP ID
    peers.extend_from_slice(&next_hop.octets()); // peer address
    peers.extend_from_slice(&0u32.to_be_bytes()); // peer AS
    record(&mut out, PEER_INDEX_TABLE, &peers);
    let mut attrs = Vec::new();
    attrs.extend_from_slice(&[0x40, 1, 1, 0]); // ORIGIN IGP
    attrs.extend_from_slice(&[0x40, 2, 0]); // AS_PATH, empty
    attrs.extend_from_slice(&[0x40, 3, 4]); // NEXT_HOP
    attrs.extend_from_slice(&next_hop.octets());
    let mut body = Vec::with_capacity(64);
    let total = if n == 0 { 0 } else { n + PAD };
    for seq in 0..total {
        let i = seq % n.max(1);
        body.clear();
        body.extend_from_slice(&(seq as u32).to_be_bytes()); // sequence number
        body.push(24);
        body.extend_from_slice(&origin_prefix(i).octets()[..3]);
        body.extend_from_slice(&1u16.to_be_bytes()); // entry count
        body.extend_from_slice(&0u16.to_be_bytes()); // peer index
        body.extend_from_slice(&0u32.to_be_bytes()); // originated time
        body.extend_from_slice(&(attrs.len() as u16).to_be_bytes());
        body.extend_from_slice(&attrs);
        record(&mut out, RIB_IPV4_UNICAST, &body);
    }
    out
}

/// Writes [`encode_table`] to `path`.
pub fn write_table(path: &Path, n: usize, next_hop: Ipv4Addr) -> Result<()> {
    let bytes = encode_table(n, next_hop);
    let mut f =
        std::fs::File::create(path).with_context(|| format!("creating {}", path.display()))?;
    f.write_all(&bytes)
        .with_context(|| format!("writing {}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_are_framed() {
        let b = encode_table(2, Ipv4Addr::new(192, 0, 2, 1));
        // Peer index table: 12-byte header + 4 + 2 + 2 + 1 + 4 + 4 + 4.
        let first = 12 + 21;
        assert_eq!(u16::from_be_bytes([b[4], b[5]]), TABLE_DUMP_V2);
        assert_eq!(u32::from_be_bytes([b[8], b[9], b[10], b[11]]) as usize, 21);
        assert_eq!(u16::from_be_bytes([b[first + 6], b[first + 7]]), 2);
        // Second RIB entry's prefix: 32.0.1.0/24.
        let rib_len = 12 + 4 + 1 + 3 + 2 + 2 + 4 + 2 + 14;
        let p = first + rib_len + 12 + 4;
        assert_eq!(&b[p..p + 4], &[24, 32, 0, 1]);
        assert_eq!(b.len(), first + (2 + PAD) * rib_len);
    }
}
