//! `[[policy]]` and `[[prefix_list]]`: definitions plus the small matching
//! helpers (prefix patterns, prefix lists, AS-path regexes) that the policy
//! engine evaluates per route.

use crate::values::{
    leading_bits, max_len, one_or_many, parse_prefix_strict, CommunityValue, ExtCommunityValue,
    LargeCommunityValue,
};
use holdfast_wire::{AsPath, Prefix};
use regex::Regex;
use serde::de::{self, Deserializer, MapAccess, Visitor};
use serde::{Deserialize, Serialize, Serializer};
use std::fmt;
use std::str::FromStr;

/// What a policy does with a route no term accepted or rejected.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PolicyDefault {
    Accept,
    #[default]
    Reject,
}

/// A term's verdict: accept or reject the route (stop evaluating), or apply
/// `set` and continue with the next term.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TermAction {
    Accept,
    Reject,
    #[default]
    Next,
}

/// `[[policy]]`: ordered terms, first accept/reject wins, else `default`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PolicyDef {
    pub name: String,
    #[serde(default)]
    pub default: PolicyDefault,
    #[serde(default, rename = "term")]
    pub terms: Vec<Term>,
}

impl PolicyDef {
    /// Names of the prefix lists this policy references.
    pub fn prefix_lists(&self) -> impl Iterator<Item = &str> {
        self.terms
            .iter()
            .filter_map(|t| t.matches.prefix_list.as_deref())
    }
}

/// `[[policy.term]]`: every condition given in `match` must hold (AND);
/// a list inside one condition matches if any element does (OR).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Term {
    pub name: String,
    #[serde(default, rename = "match")]
    pub matches: Match,
    #[serde(default)]
    pub action: TermAction,
    #[serde(default)]
    pub set: SetActions,
}

/// Family selector for `match.family`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum MatchFamily {
    Ipv4,
    Ipv6,
}

/// An RFC 6811 route origin validation state, for `match.rpki`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RpkiState {
    Valid,
    Invalid,
    NotFound,
}

/// `[policy.term.match]`. An empty match matches every route.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Match {
    /// Name of a `[[prefix_list]]`; the route matches if the list permits it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefix_list: Option<String>,
    /// Inline prefix patterns (`"10.0.0.0/8{16,24}"`).
    #[serde(
        default,
        deserialize_with = "one_or_many",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub prefix: Vec<PrefixMatch>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub as_path: Option<AsPathRegex>,
    #[serde(
        default,
        deserialize_with = "one_or_many",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub as_path_contains: Vec<u32>,
    #[serde(
        default,
        deserialize_with = "one_or_many",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub origin_as: Vec<u32>,
    #[serde(
        default,
        deserialize_with = "one_or_many",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub neighbor_as: Vec<u32>,
    #[serde(
        default,
        deserialize_with = "one_or_many",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub community: Vec<CommunityValue>,
    #[serde(
        default,
        deserialize_with = "one_or_many",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub large_community: Vec<LargeCommunityValue>,
    #[serde(
        default,
        deserialize_with = "one_or_many",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub ext_community: Vec<ExtCommunityValue>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path_len_le: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path_len_ge: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub family: Option<MatchFamily>,
    /// RFC 6811 validation states (`"valid"`, `"invalid"`, `"not-found"`)
    /// against the `[[rpki]]` caches' VRPs; import policies only.
    #[serde(
        default,
        deserialize_with = "one_or_many",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub rpki: Vec<RpkiState>,
}

/// `[policy.term.set]`: attribute changes applied when the term matches.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SetActions {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub local_pref: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub med: Option<u32>,
    #[serde(
        default,
        deserialize_with = "one_or_many",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub add_community: Vec<CommunityValue>,
    #[serde(
        default,
        deserialize_with = "one_or_many",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub remove_community: Vec<CommunityValue>,
    #[serde(
        default,
        deserialize_with = "one_or_many",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub add_large_community: Vec<LargeCommunityValue>,
    #[serde(
        default,
        deserialize_with = "one_or_many",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub remove_large_community: Vec<LargeCommunityValue>,
    #[serde(
        default,
        deserialize_with = "one_or_many",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub add_ext_community: Vec<ExtCommunityValue>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prepend: Option<Prepend>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub next_hop_self: bool,
}

/// AS-path prepending: `prepend = 3` (own AS three times) or
/// `prepend = { asn = 65010, count = 2 }`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub struct Prepend {
    /// AS to prepend; `None` means the session's local AS.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub asn: Option<u32>,
    pub count: u8,
}

impl<'de> Deserialize<'de> for Prepend {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Table {
            asn: Option<u32>,
            count: u8,
        }
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Prepend;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a count or a table { asn, count }")
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Prepend, E> {
                let count =
                    u8::try_from(v).map_err(|_| E::custom(format!("count {v} out of range")))?;
                Ok(Prepend { asn: None, count })
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Prepend, E> {
                let count =
                    u8::try_from(v).map_err(|_| E::custom(format!("count {v} out of range")))?;
                Ok(Prepend { asn: None, count })
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Prepend, A::Error> {
                let t = Table::deserialize(de::value::MapAccessDeserializer::new(map))?;
                Ok(Prepend {
                    asn: t.asn,
                    count: t.count,
                })
            }
        }
        d.deserialize_any(V)
    }
}

/// An inline prefix pattern in BIRD syntax:
/// - `"10.0.0.0/8"` matches exactly that prefix;
/// - `"10.0.0.0/8{16,24}"` matches prefixes of length 16..=24 whose first
///   min(8, len) bits equal those of 10.0.0.0/8;
/// - `"10.0.0.0/8+"` is `{8,32}` (`{64,128}` style for IPv6), `"10.0.0.0/8-"` is `{0,8}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PrefixMatch {
    pub prefix: Prefix,
    pub min_len: u8,
    pub max_len: u8,
}

impl PrefixMatch {
    pub fn matches(&self, p: &Prefix) -> bool {
        if p.afi() != self.prefix.afi() || p.len() < self.min_len || p.len() > self.max_len {
            return false;
        }
        let n = self.prefix.len().min(p.len());
        leading_bits(p, n) == leading_bits(&self.prefix, n)
    }
}

impl FromStr for PrefixMatch {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let s = s.trim();
        let (base, range) = match s.find(['{', '+', '-']) {
            Some(i) => (&s[..i], Some(&s[i..])),
            None => (s, None),
        };
        let prefix = parse_prefix_strict(base)?;
        let (len, max) = (prefix.len(), max_len(&prefix));
        let (min_len, max_len) = match range {
            None => (len, len),
            Some("+") => (len, max),
            Some("-") => (0, len),
            Some(r) => {
                let inner = r
                    .strip_prefix('{')
                    .and_then(|r| r.strip_suffix('}'))
                    .ok_or_else(|| {
                        format!("{s:?}: expected PREFIX, PREFIX+, PREFIX- or PREFIX{{LO,HI}}")
                    })?;
                let (lo, hi) = inner
                    .split_once(',')
                    .ok_or_else(|| format!("{s:?}: expected {{LO,HI}}"))?;
                let lo: u8 = lo
                    .trim()
                    .parse()
                    .map_err(|_| format!("{s:?}: bad low length"))?;
                let hi: u8 = hi
                    .trim()
                    .parse()
                    .map_err(|_| format!("{s:?}: bad high length"))?;
                (lo, hi)
            }
        };
        if min_len > max_len || max_len > max {
            return Err(format!("{s:?}: need LO <= HI <= {max}"));
        }
        Ok(PrefixMatch {
            prefix,
            min_len,
            max_len,
        })
    }
}

impl fmt::Display for PrefixMatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let len = self.prefix.len();
        if (self.min_len, self.max_len) == (len, len) {
            write!(f, "{}", self.prefix)
        } else {
            write!(f, "{}{{{},{}}}", self.prefix, self.min_len, self.max_len)
        }
    }
}

impl Serialize for PrefixMatch {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}
impl<'de> Deserialize<'de> for PrefixMatch {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        String::deserialize(d)?.parse().map_err(de::Error::custom)
    }
}

/// A regular expression over the AS path written as space-separated ASNs
/// (`"^65001 .*$"`, `"(^| )65010( |$)"`). Compiled once at load time.
#[derive(Debug, Clone)]
pub struct AsPathRegex {
    source: String,
    regex: Regex,
}

impl AsPathRegex {
    pub fn new(source: &str) -> Result<Self, String> {
        let regex =
            Regex::new(source).map_err(|e| format!("invalid AS-path regex {source:?}: {e}"))?;
        Ok(AsPathRegex {
            source: source.to_string(),
            regex,
        })
    }
    pub fn as_str(&self) -> &str {
        &self.source
    }
    /// Matches against the path's ASNs in order, separated by single spaces
    /// (an empty path is the empty string).
    pub fn is_match(&self, path: &AsPath) -> bool {
        let text: Vec<String> = path.iter_asns().map(|a| a.to_string()).collect();
        self.regex.is_match(&text.join(" "))
    }
}

impl PartialEq for AsPathRegex {
    fn eq(&self, other: &Self) -> bool {
        self.source == other.source
    }
}

impl Serialize for AsPathRegex {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.source)
    }
}
impl<'de> Deserialize<'de> for AsPathRegex {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        AsPathRegex::new(&String::deserialize(d)?).map_err(de::Error::custom)
    }
}

/// Prefix-list entry verdict.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ListAction {
    #[default]
    Permit,
    Deny,
}

/// `[[prefix_list]]`: entries are tried in order, the first match decides,
/// and a prefix no entry matches is denied.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PrefixListDef {
    pub name: String,
    #[serde(default)]
    pub entries: Vec<PrefixListEntry>,
}

impl PrefixListDef {
    pub fn permits(&self, p: &Prefix) -> bool {
        self.entries
            .iter()
            .find(|e| e.matches(p))
            .is_some_and(|e| e.action == ListAction::Permit)
    }
}

/// One entry, FRR semantics: a prefix inside `prefix` whose length is
/// exactly the entry's length (no `ge`/`le`), or within `ge..=le` (a missing
/// `ge` is the entry's length, a missing `le` the family maximum).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PrefixListEntry {
    #[serde(with = "crate::values::prefix_str")]
    pub prefix: Prefix,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ge: Option<u8>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub le: Option<u8>,
    #[serde(default)]
    pub action: ListAction,
}

impl PrefixListEntry {
    /// The accepted length range.
    pub fn len_range(&self) -> (u8, u8) {
        let len = self.prefix.len();
        match (self.ge, self.le) {
            (None, None) => (len, len),
            (ge, le) => (ge.unwrap_or(len), le.unwrap_or(max_len(&self.prefix))),
        }
    }
    pub fn matches(&self, p: &Prefix) -> bool {
        let (lo, hi) = self.len_range();
        p.afi() == self.prefix.afi()
            && p.len() >= self.prefix.len()
            && (lo..=hi).contains(&p.len())
            && leading_bits(p, self.prefix.len()) == leading_bits(&self.prefix, self.prefix.len())
    }
}
