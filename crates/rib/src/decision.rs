//! Loc-RIB best-path selection (RFC 4271 §9.1.2.2, RFC 4456 §9).
//!
//! Each step eliminates candidates from the set left by the previous step,
//! in the RFC's order, so MED comparison is only among routes from the same
//! neighbouring AS and cannot make the ordering intransitive.

use std::net::{IpAddr, Ipv4Addr};

use holdfast_wire::Origin;
use smallvec::SmallVec;

use crate::attrs::Attrs;
use crate::intern::FxMap;
use crate::rib::Path;
use crate::PeerId;

/// What the decision and export steps need to know about a route's source.
#[derive(Debug, Clone)]
pub(crate) struct SrcFacts {
    pub ebgp: bool,
    pub local: bool,
    pub rr_client: bool,
    pub router_id: Ipv4Addr,
    pub addr: IpAddr,
}

impl SrcFacts {
    pub(crate) fn local(router_id: Ipv4Addr) -> Self {
        SrcFacts {
            ebgp: false,
            local: true,
            rr_client: false,
            router_id,
            addr: IpAddr::V4(Ipv4Addr::UNSPECIFIED),
        }
    }
}

pub(crate) struct DecisionCtx<'a> {
    pub peers: &'a FxMap<PeerId, SrcFacts>,
    pub local_as: u32,
    pub always_compare_med: bool,
    pub default_lp: u32,
    /// `EngineConfig::fib_ecmp`: 0 = no FIB output.
    pub fib_ecmp: usize,
}

const UNKNOWN: SrcFacts = SrcFacts {
    ebgp: false,
    local: false,
    rr_client: false,
    router_id: Ipv4Addr::BROADCAST,
    addr: IpAddr::V4(Ipv4Addr::BROADCAST),
};

pub(crate) fn origin_rank(a: &Attrs) -> u8 {
    match a.origin {
        Some(Origin::Igp) => 0,
        Some(Origin::Egp) => 1,
        Some(Origin::Incomplete) | None => 2,
    }
}

/// Keeps only the candidates minimising `key`.
fn keep_min<T, K: Ord>(c: &mut SmallVec<[T; 8]>, key: impl Fn(&T) -> K) {
    if c.len() < 2 {
        return;
    }
    let Some(min) = c.iter().map(&key).min() else {
        return;
    };
    c.retain(|x| key(x) == min);
}

/// Index in `paths` of the best eligible path, or None.
pub(crate) fn best_index(paths: &[Path], ctx: &DecisionCtx<'_>) -> Option<usize> {
    let mut c: SmallVec<[(usize, &Attrs, &SrcFacts); 8]> = SmallVec::new();
    for (i, p) in paths.iter().enumerate() {
        if let Some(a) = &p.post {
            let f = ctx.peers.get(&p.peer).unwrap_or(&UNKNOWN);
            c.push((i, a, f));
        }
    }
    match c.len() {
        0 => return None,
        1 => return Some(c[0].0),
        _ => {}
    }
    // Locally originated routes first (acts like a weight).
    keep_min(&mut c, |x| !x.2.local);
    // 1. Highest LOCAL_PREF.
    keep_min(&mut c, |x| {
        std::cmp::Reverse(x.1.local_pref.unwrap_or(ctx.default_lp))
    });
    // 2. Shortest AS_PATH.
    keep_min(&mut c, |x| x.1.decision_len());
    // 3. Lowest ORIGIN.
    keep_min(&mut c, |x| origin_rank(x.1));
    // 4. Lowest MED among routes from the same neighbouring AS.
    if c.len() > 1 {
        let nas = |a: &Attrs| a.first_as().unwrap_or(ctx.local_as);
        let snapshot: SmallVec<[(u32, u32); 8]> =
            c.iter().map(|x| (nas(x.1), x.1.med.unwrap_or(0))).collect();
        let acm = ctx.always_compare_med;
        let mut k = 0;
        c.retain(|_| {
            let (na, med) = snapshot[k];
            k += 1;
            !snapshot
                .iter()
                .any(|(nb, mb)| (acm || *nb == na) && *mb < med)
        });
    }
    // 5. eBGP over iBGP.
    keep_min(&mut c, |x| !x.2.ebgp);
    // 6. (IGP cost: not available.) RFC 4456 §9: shortest CLUSTER_LIST.
    keep_min(&mut c, |x| x.1.cluster_list().len());
    // 7. Lowest BGP identifier; ORIGINATOR_ID replaces it when present.
    keep_min(&mut c, |x| {
        u32::from(x.1.originator_id().unwrap_or(x.2.router_id))
    });
    // 8. Lowest peer address.
    keep_min(&mut c, |x| x.2.addr);
    // Deterministic final tie-break: lowest peer id.
    keep_min(&mut c, |x| paths[x.0].peer);
    c.first().map(|x| x.0)
}
