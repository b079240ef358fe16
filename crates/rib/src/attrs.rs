//! Compact stored form of path attributes.
//!
//! `PathAttrs` is 224 bytes plus several heap vectors; with ~400k distinct
//! sets in a realistic table that dominates memory. [`Attrs`] keeps the
//! fields the decision process reads inline, the AS path (when it is a single
//! AS_SEQUENCE, the usual case) and communities as boxed slices, and moves
//! everything else behind one optional box. Conversion is lossless, so
//! interning by `Attrs` equality equals interning by `PathAttrs` equality.

use std::net::Ipv4Addr;

use holdfast_wire::{AsPath, AsSegment, LargeCommunity, MpNextHop, Origin, PathAttrs, RawAttr};

/// Rarely present attributes.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
struct Rare {
    /// The AS path when it is not a single AS_SEQUENCE.
    as_path: Option<AsPath>,
    mp_next_hop: Option<MpNextHop>,
    aggregator: Option<(u32, Ipv4Addr)>,
    ext_communities: Box<[[u8; 8]]>,
    large_communities: Box<[LargeCommunity]>,
    originator_id: Option<Ipv4Addr>,
    cluster_list: Box<[Ipv4Addr]>,
    unknown: Box<[RawAttr]>,
}

/// Interned attribute set as stored in the RIBs.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub(crate) struct Attrs {
    pub origin: Option<Origin>,
    pub atomic_aggregate: bool,
    pub next_hop: Option<Ipv4Addr>,
    pub med: Option<u32>,
    pub local_pref: Option<u32>,
    /// AS path as one AS_SEQUENCE (empty = empty path), unless `rare.as_path`.
    seq: Box<[u32]>,
    pub communities: Box<[u32]>,
    rare: Option<Box<Rare>>,
}

impl Attrs {
    pub(crate) fn from_path_attrs(a: &PathAttrs) -> Attrs {
        Attrs::from_owned(a.clone())
    }

    /// Converts without copying the vectors.
    pub(crate) fn from_owned(mut a: PathAttrs) -> Attrs {
        let mut seq = Vec::new();
        if let [AsSegment::Sequence(v)] = a.as_path.segments.as_mut_slice() {
            seq = std::mem::take(v);
        }
        let path = (seq.is_empty() && !a.as_path.segments.is_empty())
            .then(|| std::mem::take(&mut a.as_path));
        let rare = Rare {
            as_path: path,
            mp_next_hop: a.mp_next_hop,
            aggregator: a.aggregator,
            ext_communities: std::mem::take(&mut a.ext_communities).into_boxed_slice(),
            large_communities: std::mem::take(&mut a.large_communities).into_boxed_slice(),
            originator_id: a.originator_id,
            cluster_list: std::mem::take(&mut a.cluster_list).into_boxed_slice(),
            unknown: std::mem::take(&mut a.unknown).into_boxed_slice(),
        };
        Attrs {
            origin: a.origin,
            atomic_aggregate: a.atomic_aggregate,
            next_hop: a.next_hop,
            med: a.med,
            local_pref: a.local_pref,
            seq: seq.into_boxed_slice(),
            communities: std::mem::take(&mut a.communities).into_boxed_slice(),
            rare: (rare != Rare::default()).then(|| Box::new(rare)),
        }
    }

    /// RFC 6811 origin AS (see `policy::origin_for_validation`) without
    /// converting the set.
    pub(crate) fn origin_for_validation(&self, local_as: u32) -> Option<u32> {
        match self.rare.as_deref().and_then(|r| r.as_path.as_ref()) {
            Some(p) => p.origin_as(),
            None => Some(self.seq.last().copied().unwrap_or(local_as)),
        }
    }

    pub(crate) fn to_path_attrs(&self) -> PathAttrs {
        let r = self.rare.as_deref();
        let as_path = match r.and_then(|r| r.as_path.clone()) {
            Some(p) => p,
            None if self.seq.is_empty() => AsPath::default(),
            None => {
                // One spare slot: eBGP export prepends our AS.
                let mut v = Vec::with_capacity(self.seq.len() + 1);
                v.extend_from_slice(&self.seq);
                AsPath {
                    segments: vec![AsSegment::Sequence(v)],
                }
            }
        };
        PathAttrs {
            origin: self.origin,
            as_path,
            next_hop: self.next_hop,
            mp_next_hop: r.and_then(|r| r.mp_next_hop),
            med: self.med,
            local_pref: self.local_pref,
            atomic_aggregate: self.atomic_aggregate,
            aggregator: r.and_then(|r| r.aggregator),
            communities: self.communities.to_vec(),
            ext_communities: r.map(|r| r.ext_communities.to_vec()).unwrap_or_default(),
            large_communities: r.map(|r| r.large_communities.to_vec()).unwrap_or_default(),
            originator_id: r.and_then(|r| r.originator_id),
            cluster_list: r.map(|r| r.cluster_list.to_vec()).unwrap_or_default(),
            unknown: r.map(|r| r.unknown.to_vec()).unwrap_or_default(),
        }
    }

    fn full_path(&self) -> Option<&AsPath> {
        self.rare.as_ref().and_then(|r| r.as_path.as_ref())
    }

    /// AS path length for the decision process.
    pub(crate) fn decision_len(&self) -> usize {
        match self.full_path() {
            Some(p) => p.decision_len(),
            None => self.seq.len(),
        }
    }

    /// Neighbouring AS (first AS of the first AS_SEQUENCE).
    pub(crate) fn first_as(&self) -> Option<u32> {
        match self.full_path() {
            Some(p) => p.first_as(),
            None => self.seq.first().copied(),
        }
    }

    pub(crate) fn originator_id(&self) -> Option<Ipv4Addr> {
        self.rare.as_ref().and_then(|r| r.originator_id)
    }

    pub(crate) fn mp_next_hop(&self) -> Option<MpNextHop> {
        self.rare.as_ref().and_then(|r| r.mp_next_hop)
    }

    pub(crate) fn cluster_list(&self) -> &[Ipv4Addr] {
        self.rare.as_ref().map_or(&[], |r| &r.cluster_list)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roundtrip_is_lossless() {
        let mut a = PathAttrs {
            origin: Some(Origin::Egp),
            as_path: AsPath {
                segments: vec![AsSegment::Sequence(vec![1, 2, 3])],
            },
            next_hop: Some(Ipv4Addr::new(1, 2, 3, 4)),
            med: Some(5),
            communities: vec![7, 8],
            ..PathAttrs::default()
        };
        let c = Attrs::from_path_attrs(&a);
        assert!(c.rare.is_none());
        assert_eq!(c.to_path_attrs(), a);
        assert_eq!((c.decision_len(), c.first_as()), (3, Some(1)));
        a.as_path.segments.push(AsSegment::Set(vec![9, 10]));
        a.cluster_list = vec![Ipv4Addr::new(9, 9, 9, 9)];
        a.originator_id = Some(Ipv4Addr::new(8, 8, 8, 8));
        a.large_communities = vec![LargeCommunity {
            global: 1,
            local1: 2,
            local2: 3,
        }];
        let c = Attrs::from_path_attrs(&a);
        assert_eq!(c.to_path_attrs(), a);
        assert_eq!((c.decision_len(), c.cluster_list().len()), (4, 1));
        assert_eq!(c.originator_id(), Some(Ipv4Addr::new(8, 8, 8, 8)));
        let e = Attrs::from_path_attrs(&PathAttrs::default());
        assert_eq!(e.to_path_attrs(), PathAttrs::default());
        assert_eq!(e.first_as(), None);
    }
}
