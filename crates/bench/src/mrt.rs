//! The MRT TABLE_DUMP_V2 table (RFC 6396) gobgpd originates in Fig. 6(b)
//! with `gobgp mrt inject global FILE`, written with the encoders of
//! `holdfast_wire::mrt`.

use crate::dut::origin_prefix;
use anyhow::{Context, Result};
use holdfast_wire::mrt::{peer_index_table, rib_record, MrtPeer, MrtRibEntry};
use holdfast_wire::{AsPath, Origin, PathAttrs, Prefix, Prefix4};
use std::io::Write;
use std::net::{IpAddr, Ipv4Addr};
use std::path::Path;

/// Entries repeated after the table: `gobgp mrt inject` (3.10) exits before
/// its last ~1–2k paths reach gobgpd, so the table is followed by this many
/// repeats of its first entries (re-adding an existing path changes nothing).
pub const PAD: usize = 5000;

/// Encodes `n` consecutive /24s from [`crate::dut::ORIGIN_BASE`], each with
/// ORIGIN IGP, an empty AS_PATH and NEXT_HOP `next_hop`, from one peer
/// (`next_hop`, AS 0), then [`PAD`] repeats of the first entries.
pub fn encode_table(n: usize, next_hop: Ipv4Addr) -> Vec<u8> {
    let mut out = Vec::with_capacity((n + PAD) * 40 + 64);
    let peer = MrtPeer {
        bgp_id: next_hop,
        address: IpAddr::V4(next_hop),
        asn: 0,
    };
    peer_index_table(0, next_hop, "", &[peer], &mut out);
    let attrs = PathAttrs {
        origin: Some(Origin::Igp),
        as_path: AsPath::default(),
        next_hop: Some(next_hop),
        ..PathAttrs::default()
    };
    let entry = [MrtRibEntry {
        peer_index: 0,
        originated: 0,
        attrs: &attrs,
    }];
    let total = if n == 0 { 0 } else { n + PAD };
    for seq in 0..total {
        let i = seq % n.max(1);
        let prefix = Prefix::V4(Prefix4::new(origin_prefix(i), 24).expect("a /24"));
        rib_record(0, seq as u32, &prefix, &entry, &mut out);
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
    use holdfast_wire::mrt::{RIB_IPV4_UNICAST, TABLE_DUMP_V2};

    #[test]
    fn records_are_framed() {
        let b = encode_table(2, Ipv4Addr::new(192, 0, 2, 1));
        // Peer index table: 12-byte header + 4 + 2 + 2 + 1 + 4 + 4 + 4.
        let first = 12 + 21;
        assert_eq!(u16::from_be_bytes([b[4], b[5]]), TABLE_DUMP_V2);
        assert_eq!(u32::from_be_bytes([b[8], b[9], b[10], b[11]]) as usize, 21);
        assert_eq!(
            u16::from_be_bytes([b[first + 6], b[first + 7]]),
            RIB_IPV4_UNICAST
        );
        // Second RIB entry's prefix: 32.0.1.0/24.
        let rib_len = 12 + 4 + 1 + 3 + 2 + 2 + 4 + 2 + 14;
        let p = first + rib_len + 12 + 4;
        assert_eq!(&b[p..p + 4], &[24, 32, 0, 1]);
        // Its attributes, as gobgp mrt inject has always been given them:
        // ORIGIN IGP, an empty AS_PATH, NEXT_HOP.
        let attrs = p + 4 + 2 + 2 + 4 + 2;
        assert_eq!(
            &b[attrs..attrs + 14],
            &[0x40, 1, 1, 0, 0x40, 2, 0, 0x40, 3, 4, 192, 0, 2, 1]
        );
        assert_eq!(b.len(), first + (2 + PAD) * rib_len);
    }
}
