//! Export rules (RFC 4271 §9.1.3/§9.2, RFC 4456 §6/§8, RFC 1997 well-known
//! communities) and update packing: one attribute encoding per distinct
//! outgoing attribute set, prefixes packed behind it.

use std::borrow::Cow;

use rayon::prelude::*;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::sync::Arc;

use holdfast_wire::{
    attr_flags, well_known, Afi, Family, MpNextHop, PathAttrs, Prefix, Prefix4, Prefix6,
};

use crate::codec::{self, CodecCtx};
use crate::decision::SrcFacts;
use crate::intern::{hash_of, FxMap};
use crate::policy::{PolicyCtx, PolicyRef, PolicyVerdict};

/// Everything about a target peer that influences what it is sent. Peers
/// with equal [`GroupKey`]s form an update group.
#[derive(Debug, Clone)]
pub(crate) struct ExportParams {
    pub ebgp: bool,
    pub local_as: u32,
    pub nh4: Option<Ipv4Addr>,
    pub nh6: Option<Ipv6Addr>,
    pub nh6_ll: Option<Ipv6Addr>,
    pub four_octet_as: bool,
    pub families: Vec<Family>,
    pub rr_client: bool,
    pub next_hop_self: bool,
    pub policy: PolicyRef,
    pub cluster_id: Ipv4Addr,
    pub default_lp: u32,
}

pub(crate) type GroupKey = (
    bool,
    u32,
    Option<Ipv4Addr>,
    Option<Ipv6Addr>,
    Option<Ipv6Addr>,
    bool,
    Vec<Family>,
    bool,
    bool,
    usize,
);

impl ExportParams {
    pub(crate) fn key(&self) -> GroupKey {
        let mut f = self.families.clone();
        f.sort();
        f.dedup();
        (
            self.ebgp,
            self.local_as,
            self.nh4,
            self.nh6,
            self.nh6_ll,
            self.four_octet_as,
            f,
            self.rr_client,
            self.next_hop_self,
            self.policy.ident(),
        )
    }

    pub(crate) fn has_family(&self, afi: Afi) -> bool {
        self.families
            .iter()
            .any(|f| f.afi == afi && f.safi == holdfast_wire::Safi::Unicast)
    }

    pub(crate) fn codec_ctx(&self) -> CodecCtx {
        CodecCtx {
            four_octet_as: self.four_octet_as,
            ibgp: !self.ebgp,
        }
    }

    fn set_next_hop_self(&self, afi: Afi, a: &mut PathAttrs) {
        match afi {
            Afi::Ipv4 => {
                if let Some(nh) = self.nh4 {
                    a.next_hop = Some(nh);
                }
            }
            Afi::Ipv6 => {
                if let Some(nh) = self.nh6 {
                    a.mp_next_hop = Some(MpNextHop {
                        global: nh.into(),
                        link_local: self.nh6_ll,
                    });
                }
            }
        }
    }
}

/// Computes the attributes sent to a peer with parameters `p` for a route
/// learned from `src`, or None when the route must not be advertised.
/// The caller has already excluded the source peer itself.
pub(crate) fn export_route(
    p: &ExportParams,
    src: &SrcFacts,
    prefix: &Prefix,
    attrs: PathAttrs,
) -> Option<PathAttrs> {
    let afi = prefix.afi();
    if !p.has_family(afi) {
        return None;
    }
    if attrs.communities.contains(&well_known::NO_ADVERTISE) {
        return None;
    }
    if p.ebgp
        && attrs
            .communities
            .iter()
            .any(|c| *c == well_known::NO_EXPORT || *c == well_known::NO_EXPORT_SUBCONFED)
    {
        return None;
    }
    let ibgp_learned = !src.local && !src.ebgp;
    let reflect = ibgp_learned && !p.ebgp;
    if reflect && !(src.rr_client || p.rr_client) {
        return None;
    }
    let ctx = PolicyCtx {
        local_as: p.local_as,
        next_hop_v4: p.nh4,
        next_hop_v6: p.nh6,
        rpki: None,
    };
    let (verdict, med_set) = p.policy.evaluate_ext(prefix, &attrs, &ctx);
    let changed = match verdict {
        PolicyVerdict::Reject => return None,
        PolicyVerdict::Accept(Cow::Borrowed(_)) => None,
        PolicyVerdict::Accept(Cow::Owned(a)) => Some(a),
    };
    let mut out = changed.unwrap_or(attrs);
    if p.ebgp {
        out.as_path.prepend(p.local_as, 1);
        out.local_pref = None;
        // A MED learned from another AS is not passed on (RFC 4271
        // §5.1.4); one set by export policy or on a local route is.
        if !med_set && !src.local {
            out.med = None;
        }
        out.originator_id = None;
        out.cluster_list.clear();
        out.unknown
            .retain(|u| u.flags & attr_flags::TRANSITIVE != 0);
        p.set_next_hop_self(afi, &mut out);
    } else {
        out.local_pref = Some(out.local_pref.unwrap_or(p.default_lp));
        if reflect {
            if out.originator_id.is_none() {
                out.originator_id = Some(src.router_id);
            }
            out.cluster_list.insert(0, p.cluster_id);
        }
        if p.next_hop_self || src.local {
            p.set_next_hop_self(afi, &mut out);
        }
    }
    match afi {
        Afi::Ipv4 => out.mp_next_hop = None,
        Afi::Ipv6 => out.next_hop = None,
    }
    Some(out)
}

/// An outgoing attribute set, encoded once for its update group: the
/// attribute block (without MP_REACH_NLRI), the IPv6 next hop carried in
/// MP_REACH_NLRI, and a fingerprint of both.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct OutAttrs {
    pub block: Vec<u8>,
    pub nh: Option<MpNextHop>,
    pub hash: u64,
}

impl OutAttrs {
    /// Encodes the exported attributes of a route of family `afi`.
    pub(crate) fn encode(p: &ExportParams, afi: Afi, mut a: PathAttrs) -> OutAttrs {
        let nh = match afi {
            Afi::Ipv4 => None,
            Afi::Ipv6 => a.mp_next_hop.take(),
        };
        a.mp_next_hop = None;
        let block = codec::encode_attrs(&a, &p.codec_ctx());
        let hash = hash_of(&(&block, &nh));
        OutAttrs { block, nh, hash }
    }
}

/// Outgoing attributes; None = withdraw.
pub(crate) type Out = Option<Arc<OutAttrs>>;

/// One peer's changes of a batch: final state per prefix.
#[derive(Default, Clone)]
pub(crate) struct Changes {
    pub v4: Vec<(Prefix4, Out)>,
    pub v6: Vec<(Prefix6, Out)>,
}

impl Changes {
    pub(crate) fn append(&mut self, mut o: Changes) {
        self.v4.append(&mut o.v4);
        self.v6.append(&mut o.v6);
    }

    /// Same prefixes and same outgoing attributes in the same order.
    pub(crate) fn same_as(&self, o: &Changes) -> bool {
        fn eq<P: PartialEq>(a: &[(P, Out)], b: &[(P, Out)]) -> bool {
            a.len() == b.len()
                && a.iter().zip(b).all(|(x, y)| {
                    x.0 == y.0
                        && match (&x.1, &y.1) {
                            (None, None) => true,
                            (Some(p), Some(q)) => Arc::ptr_eq(p, q) || **p == **q,
                            _ => false,
                        }
                })
        }
        eq(&self.v4, &o.v4) && eq(&self.v6, &o.v6)
    }
}

/// Prefixes announced with one attribute set.
type Group<P> = (Arc<OutAttrs>, Vec<P>);

/// Groups announcements by attribute set (first appearance order).
fn group_by_attrs<P: Copy>(list: &[(P, Out)]) -> (Vec<P>, Vec<Group<P>>) {
    let mut withdrawn = Vec::new();
    let mut groups: Vec<Group<P>> = Vec::new();
    let mut by_ptr: FxMap<usize, usize> = FxMap::default();
    let mut by_hash: FxMap<u64, smallvec::SmallVec<[usize; 1]>> = FxMap::default();
    for (p, a) in list {
        match a {
            None => withdrawn.push(*p),
            Some(a) => {
                let ptr = Arc::as_ptr(a) as usize;
                let gi = match by_ptr.get(&ptr) {
                    Some(g) => *g,
                    None => {
                        let cands = by_hash.entry(a.hash).or_default();
                        let g = match cands.iter().find(|&&g| *groups[g].0 == **a) {
                            Some(g) => *g,
                            None => {
                                groups.push((a.clone(), Vec::new()));
                                cands.push(groups.len() - 1);
                                groups.len() - 1
                            }
                        };
                        by_ptr.insert(ptr, g);
                        g
                    }
                };
                groups[gi].1.push(*p);
            }
        }
    }
    (withdrawn, groups)
}

fn encode_v4(groups: &[Group<Prefix4>]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut buf: Vec<Prefix> = Vec::new();
    for (a, ps) in groups {
        buf.clear();
        buf.extend(ps.iter().copied().map(Prefix::V4));
        codec::pack_announce(&a.block, Afi::Ipv4, None, &buf, &mut out);
    }
    out
}

fn encode_v6(groups: &[Group<Prefix6>]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut buf: Vec<Prefix> = Vec::new();
    for (a, ps) in groups {
        buf.clear();
        buf.extend(ps.iter().copied().map(Prefix::V6));
        codec::pack_announce(&a.block, Afi::Ipv6, a.nh.as_ref(), &buf, &mut out);
    }
    out
}

/// Announcements per parallel encoding task.
const ENCODE_CHUNK: usize = 4096;

/// Packs groups in order; with `parallel`, chunks of groups are packed on
/// the current rayon pool and concatenated in order (same bytes).
fn encode_groups<P: Send + Sync>(
    groups: &[Group<P>],
    parallel: bool,
    f: impl Fn(&[Group<P>]) -> Vec<u8> + Sync + Send,
) -> Vec<u8> {
    let total: usize = groups.iter().map(|g| g.1.len()).sum();
    if !parallel || total < 2 * ENCODE_CHUNK {
        return f(groups);
    }
    let mut cuts = vec![0];
    let mut acc = 0;
    for (i, g) in groups.iter().enumerate() {
        acc += g.1.len();
        if acc >= ENCODE_CHUNK {
            cuts.push(i + 1);
            acc = 0;
        }
    }
    if *cuts.last().unwrap_or(&0) != groups.len() {
        cuts.push(groups.len());
    }
    let parts: Vec<Vec<u8>> = cuts
        .par_windows(2)
        .map(|w| f(&groups[w[0]..w[1]]))
        .collect();
    parts.concat()
}

/// Encodes a peer's changes as complete UPDATE messages: withdrawals first,
/// then each distinct attribute block with its prefixes packed behind it.
pub(crate) fn encode_changes(ch: &Changes, parallel: bool, out: &mut Vec<u8>) {
    let (w4, g4) = group_by_attrs(&ch.v4);
    let (w6, g6) = group_by_attrs(&ch.v6);
    if !w4.is_empty() {
        let w: Vec<Prefix> = w4.into_iter().map(Prefix::V4).collect();
        codec::pack_withdraw(&w, out);
    }
    if !w6.is_empty() {
        let w: Vec<Prefix> = w6.into_iter().map(Prefix::V6).collect();
        codec::pack_withdraw(&w, out);
    }
    out.extend_from_slice(&encode_groups(&g4, parallel, encode_v4));
    out.extend_from_slice(&encode_groups(&g6, parallel, encode_v6));
}
