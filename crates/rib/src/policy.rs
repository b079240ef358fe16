//! Import/export policy: ordered terms of matches and actions, BIRD-like
//! `all` / `none` shortcuts, prefix lists with ge/le, AS-path regular
//! expressions, RFC 1997 / 4360 / 8092 community matches and set actions,
//! RFC 6811 origin validation states (`Match::Rpki`, against the VRP table
//! the context carries).

use std::borrow::Cow;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::sync::Arc;

use holdfast_rtr::{Validity, VrpTable};
use holdfast_wire::{Afi, AsSegment, LargeCommunity, PathAttrs, Prefix};

/// A named prefix list; the first matching entry decides.
#[derive(Debug, Clone)]
pub struct PrefixList {
    pub name: String,
    pub entries: Vec<PrefixListEntry>,
}

/// `prefix [ge N] [le M] permit|deny`. Without ge/le only the exact prefix
/// matches; with them, any more specific prefix whose length is in range.
#[derive(Debug, Clone)]
pub struct PrefixListEntry {
    pub prefix: Prefix,
    pub ge: Option<u8>,
    pub le: Option<u8>,
    pub permit: bool,
}

impl PrefixListEntry {
    fn matches(&self, p: &Prefix) -> bool {
        let covered = match (&self.prefix, p) {
            (Prefix::V4(a), Prefix::V4(b)) => a.contains(b),
            (Prefix::V6(a), Prefix::V6(b)) => a.contains(b),
            _ => false,
        };
        if !covered {
            return false;
        }
        let len = p.len();
        if self.ge.is_none() && self.le.is_none() {
            return len == self.prefix.len();
        }
        let max = if p.afi() == Afi::Ipv4 { 32 } else { 128 };
        let lo = self.ge.unwrap_or(self.prefix.len());
        let hi = self.le.unwrap_or(max);
        len >= lo && len <= hi
    }
}

impl PrefixList {
    /// True if the first matching entry permits `p`; false when none match.
    pub fn permits(&self, p: &Prefix) -> bool {
        self.entries
            .iter()
            .find(|e| e.matches(p))
            .map(|e| e.permit)
            .unwrap_or(false)
    }
}

/// One condition of a term.
#[derive(Debug, Clone)]
pub enum Match {
    PrefixList(Arc<PrefixList>),
    /// Regular expression over the space-separated AS path ("65001 65002").
    AsPathRegex(regex::Regex),
    AsPathContains(u32),
    OriginAs(u32),
    NeighborAs(u32),
    Community(u32),
    LargeCommunity(LargeCommunity),
    ExtCommunity([u8; 8]),
    PathLenGe(usize),
    PathLenLe(usize),
    Family(Afi),
    /// The route's RFC 6811 state is one of these.
    Rpki(Vec<Validity>),
    Not(Box<Match>),
    /// True if any of the inner matches holds (a list in one condition).
    Any(Vec<Match>),
}

impl Match {
    fn prefix_dependent(&self) -> bool {
        match self {
            Match::PrefixList(_) | Match::Family(_) | Match::Rpki(_) => true,
            Match::Not(m) => m.prefix_dependent(),
            Match::Any(v) => v.iter().any(Match::prefix_dependent),
            _ => false,
        }
    }

    fn uses_rpki(&self) -> bool {
        match self {
            Match::Rpki(_) => true,
            Match::Not(m) => m.uses_rpki(),
            Match::Any(v) => v.iter().any(Match::uses_rpki),
            _ => false,
        }
    }

    fn eval(&self, prefix: &Prefix, a: &PathAttrs, ctx: &PolicyCtx<'_>) -> bool {
        match self {
            Match::PrefixList(l) => l.permits(prefix),
            Match::AsPathRegex(re) => re.is_match(&as_path_string(a)),
            Match::AsPathContains(asn) => a.as_path.contains(*asn),
            Match::OriginAs(asn) => a.as_path.origin_as() == Some(*asn),
            Match::NeighborAs(asn) => a.as_path.first_as() == Some(*asn),
            Match::Community(c) => a.communities.contains(c),
            Match::LargeCommunity(c) => a.large_communities.contains(c),
            Match::ExtCommunity(c) => a.ext_communities.contains(c),
            Match::PathLenGe(n) => a.as_path.decision_len() >= *n,
            Match::PathLenLe(n) => a.as_path.decision_len() <= *n,
            Match::Family(f) => prefix.afi() == *f,
            Match::Rpki(states) => states.contains(&validity(prefix, a, ctx)),
            Match::Not(m) => !m.eval(prefix, a, ctx),
            Match::Any(v) => v.iter().any(|m| m.eval(prefix, a, ctx)),
        }
    }
}

/// RFC 6811 origin AS of a route: the last AS of a final AS_SEQUENCE, the
/// local AS for an empty AS_PATH (a route of our own AS), none otherwise.
pub fn origin_for_validation(a: &PathAttrs, local_as: u32) -> Option<u32> {
    if a.as_path.segments.is_empty() {
        return Some(local_as);
    }
    a.as_path.origin_as()
}

/// The route's RFC 6811 state against the context's VRPs (`not-found`
/// without any).
pub fn validity(prefix: &Prefix, a: &PathAttrs, ctx: &PolicyCtx<'_>) -> Validity {
    match ctx.rpki {
        Some(t) => t.validate(prefix, origin_for_validation(a, ctx.local_as)),
        None => Validity::NotFound,
    }
}

/// The AS path as matched by [`Match::AsPathRegex`]: AS numbers separated by
/// single spaces; AS_SET members are wrapped in braces like `{1 2}`.
pub fn as_path_string(a: &PathAttrs) -> String {
    let mut s = String::new();
    for seg in &a.as_path.segments {
        let (open, close, v) = match seg {
            AsSegment::Sequence(v) | AsSegment::ConfedSequence(v) => ("", "", v),
            AsSegment::Set(v) | AsSegment::ConfedSet(v) => ("{", "}", v),
        };
        if !s.is_empty() {
            s.push(' ');
        }
        s.push_str(open);
        for (i, asn) in v.iter().enumerate() {
            if i > 0 {
                s.push(' ');
            }
            s.push_str(&asn.to_string());
        }
        s.push_str(close);
    }
    s
}

/// Attribute modification applied when a term matches.
#[derive(Debug, Clone)]
pub enum SetAction {
    LocalPref(u32),
    Med(u32),
    AddCommunity(u32),
    RemoveCommunity(u32),
    AddLargeCommunity(LargeCommunity),
    RemoveLargeCommunity(LargeCommunity),
    /// Prepend `asn` (None = the local AS) `count` times.
    Prepend {
        asn: Option<u32>,
        count: u8,
    },
    NextHopSelf,
    StripCommunities,
}

/// A policy term: when all matches hold, apply actions, then the verdict.
#[derive(Debug, Clone)]
pub struct Term {
    pub name: String,
    pub matches: Vec<Match>,
    pub actions: Vec<SetAction>,
    /// Some(true) accept, Some(false) reject, None continue with next term.
    pub verdict: Option<bool>,
}

/// A compiled policy.
#[derive(Debug, Clone)]
pub struct Policy {
    pub name: String,
    pub terms: Vec<Term>,
    pub default_accept: bool,
}

/// `all`, `none` or a named policy, as in BIRD's `import`/`export`.
#[derive(Debug, Clone)]
pub enum PolicyRef {
    All,
    None,
    Policy(Arc<Policy>),
}

impl PolicyRef {
    /// Identity used to form update groups (same Arc = same policy).
    pub(crate) fn ident(&self) -> usize {
        match self {
            PolicyRef::All => 1,
            PolicyRef::None => 0,
            PolicyRef::Policy(p) => Arc::as_ptr(p) as usize,
        }
    }

    pub(crate) fn prefix_dependent(&self) -> bool {
        match self {
            PolicyRef::Policy(p) => p.prefix_dependent(),
            _ => false,
        }
    }

    /// Whether a term matches on the RPKI state (re-evaluated when the
    /// VRPs change).
    pub fn uses_rpki(&self) -> bool {
        match self {
            PolicyRef::Policy(p) => p
                .terms
                .iter()
                .any(|t| t.matches.iter().any(Match::uses_rpki)),
            _ => false,
        }
    }

    pub(crate) fn evaluate_ext<'a>(
        &self,
        prefix: &Prefix,
        attrs: &'a PathAttrs,
        ctx: &PolicyCtx<'_>,
    ) -> (PolicyVerdict<'a>, bool) {
        match self {
            PolicyRef::All => (PolicyVerdict::Accept(Cow::Borrowed(attrs)), false),
            PolicyRef::None => (PolicyVerdict::Reject, false),
            PolicyRef::Policy(p) => p.evaluate_ext(prefix, attrs, ctx),
        }
    }
}

/// Facts a policy may need besides the route itself.
#[derive(Debug, Clone, Default)]
pub struct PolicyCtx<'r> {
    /// AS used by `Prepend { asn: None, .. }`, and the origin of a route
    /// with an empty AS_PATH for RPKI validation.
    pub local_as: u32,
    /// Our addresses used by `NextHopSelf`.
    pub next_hop_v4: Option<Ipv4Addr>,
    pub next_hop_v6: Option<Ipv6Addr>,
    /// The VRPs `Match::Rpki` validates against (none: every route is
    /// `not-found`).
    pub rpki: Option<&'r VrpTable>,
}

/// Result of a policy evaluation; `Accept` borrows when nothing changed.
/// The owned variant is large on purpose: boxing it would cost an extra
/// allocation for every modified route.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq)]
pub enum PolicyVerdict<'a> {
    Accept(Cow<'a, PathAttrs>),
    Reject,
}

impl Policy {
    /// True if any term looks at the prefix (otherwise the result of one
    /// evaluation holds for every prefix sharing the attributes).
    pub fn prefix_dependent(&self) -> bool {
        self.terms
            .iter()
            .any(|t| t.matches.iter().any(Match::prefix_dependent))
    }

    /// Evaluates the terms in order.
    pub fn evaluate<'a>(
        &self,
        prefix: &Prefix,
        attrs: &'a PathAttrs,
        ctx: &PolicyCtx<'_>,
    ) -> PolicyVerdict<'a> {
        self.evaluate_ext(prefix, attrs, ctx).0
    }

    /// Also reports whether MED was set by an action (kept on eBGP export).
    pub(crate) fn evaluate_ext<'a>(
        &self,
        prefix: &Prefix,
        attrs: &'a PathAttrs,
        ctx: &PolicyCtx<'_>,
    ) -> (PolicyVerdict<'a>, bool) {
        let mut cur: Cow<'a, PathAttrs> = Cow::Borrowed(attrs);
        let mut med_set = false;
        for t in &self.terms {
            if !t.matches.iter().all(|m| m.eval(prefix, &cur, ctx)) {
                continue;
            }
            for a in &t.actions {
                med_set |= apply_action(a, prefix, cur.to_mut(), ctx);
            }
            match t.verdict {
                Some(true) => return (PolicyVerdict::Accept(cur), med_set),
                Some(false) => return (PolicyVerdict::Reject, false),
                None => {}
            }
        }
        if self.default_accept {
            (PolicyVerdict::Accept(cur), med_set)
        } else {
            (PolicyVerdict::Reject, false)
        }
    }
}

/// Applies one action; returns true if it set the MED.
fn apply_action(
    a: &SetAction,
    prefix: &Prefix,
    attrs: &mut PathAttrs,
    ctx: &PolicyCtx<'_>,
) -> bool {
    match a {
        SetAction::LocalPref(v) => attrs.local_pref = Some(*v),
        SetAction::Med(v) => {
            attrs.med = Some(*v);
            return true;
        }
        SetAction::AddCommunity(c) => {
            if !attrs.communities.contains(c) {
                attrs.communities.push(*c);
            }
        }
        SetAction::RemoveCommunity(c) => attrs.communities.retain(|x| x != c),
        SetAction::AddLargeCommunity(c) => {
            if !attrs.large_communities.contains(c) {
                attrs.large_communities.push(*c);
            }
        }
        SetAction::RemoveLargeCommunity(c) => attrs.large_communities.retain(|x| x != c),
        SetAction::Prepend { asn, count } => attrs
            .as_path
            .prepend(asn.unwrap_or(ctx.local_as), *count as usize),
        SetAction::NextHopSelf => match prefix {
            Prefix::V4(_) => {
                if let Some(nh) = ctx.next_hop_v4 {
                    attrs.next_hop = Some(nh);
                }
            }
            Prefix::V6(_) => {
                if let Some(nh) = ctx.next_hop_v6 {
                    attrs.mp_next_hop = Some(holdfast_wire::MpNextHop {
                        global: nh.into(),
                        link_local: None,
                    });
                }
            }
        },
        SetAction::StripCommunities => {
            attrs.communities.clear();
            attrs.ext_communities.clear();
            attrs.large_communities.clear();
        }
    }
    false
}
