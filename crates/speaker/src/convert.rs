//! Translation between the configuration model (`holdfast-config`), the
//! engine's compiled forms (`holdfast-rib`), the FSM's session settings
//! (`holdfast-fsm`) and the control API's views (`holdfast-api`).
//!
//! Pure functions; no I/O.

use crate::msg::peer::PeerSettings;
use crate::peer::{PeerStatus, SharedStatus};
use crate::socket::SockOpts;
use anyhow::{anyhow, Context};
use holdfast_api::{
    format_community, format_ext_community, format_large_community, NeighborInfo, RibEntry,
};
use holdfast_config::{
    Config, Instance, MatchFamily, Neighbor, PolicyDef, PolicyDefault, PolicyRef as CfgRef,
    RpkiState, TermAction,
};
use holdfast_fsm::SessionConfig;
use holdfast_rib::policy::{Match, Policy, PrefixList, PrefixListEntry, SetAction, Term};
use holdfast_rib::{EngineConfig, PeerCounts, PeerId, PeerSpec, PolicyRef, Validity};
use holdfast_wire::{Afi, AsPath, MpNextHop, Origin, PathAttrs, Prefix};
use std::collections::{BTreeMap, HashMap};
use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;

/// Policies and originated routes compiled from one configuration.
pub struct Compiled {
    pub policies: HashMap<String, Arc<Policy>>,
    /// Originated routes per instance.
    /// Per instance; every prefix of one `[[network]]` shares its attributes.
    pub networks: HashMap<String, BTreeMap<Prefix, Arc<PathAttrs>>>,
}

pub fn compile(cfg: &Config) -> anyhow::Result<Compiled> {
    let lists: HashMap<&str, Arc<PrefixList>> = cfg
        .prefix_lists
        .iter()
        .map(|l| {
            let entries = l
                .entries
                .iter()
                .map(|e| PrefixListEntry {
                    prefix: e.prefix,
                    ge: e.ge,
                    le: e.le,
                    permit: e.action == holdfast_config::ListAction::Permit,
                })
                .collect();
            (
                l.name.as_str(),
                Arc::new(PrefixList {
                    name: l.name.clone(),
                    entries,
                }),
            )
        })
        .collect();
    let mut policies = HashMap::new();
    for p in &cfg.policies {
        let compiled = compile_policy(p, &lists).with_context(|| format!("policy {:?}", p.name))?;
        policies.insert(p.name.clone(), Arc::new(compiled));
    }
    let mut networks: HashMap<String, BTreeMap<Prefix, Arc<PathAttrs>>> = HashMap::new();
    for n in &cfg.networks {
        let attrs = Arc::new(network_attrs(n));
        let table = networks.entry(n.instance.clone()).or_default();
        for p in n.prefixes() {
            table.insert(p, attrs.clone());
        }
    }
    Ok(Compiled { policies, networks })
}

fn any(mut v: Vec<Match>) -> Option<Match> {
    match v.len() {
        0 => None,
        1 => v.pop(),
        _ => Some(Match::Any(v)),
    }
}

fn compile_policy(p: &PolicyDef, lists: &HashMap<&str, Arc<PrefixList>>) -> anyhow::Result<Policy> {
    let mut terms = Vec::new();
    for t in &p.terms {
        let m = &t.matches;
        let mut matches = Vec::new();
        if let Some(name) = &m.prefix_list {
            let l = lists
                .get(name.as_str())
                .ok_or_else(|| anyhow!("unknown prefix list {name:?}"))?;
            matches.push(Match::PrefixList(l.clone()));
        }
        if !m.prefix.is_empty() {
            let entries = m
                .prefix
                .iter()
                .map(|pm| PrefixListEntry {
                    prefix: pm.prefix,
                    ge: Some(pm.min_len),
                    le: Some(pm.max_len),
                    permit: true,
                })
                .collect();
            matches.push(Match::PrefixList(Arc::new(PrefixList {
                name: format!("{}:{}", p.name, t.name),
                entries,
            })));
        }
        if let Some(re) = &m.as_path {
            let re = regex::Regex::new(re.as_str()).map_err(|e| anyhow!("as_path: {e}"))?;
            matches.push(Match::AsPathRegex(re));
        }
        matches.extend(any(m
            .as_path_contains
            .iter()
            .map(|a| Match::AsPathContains(*a))
            .collect()));
        matches.extend(any(m
            .origin_as
            .iter()
            .map(|a| Match::OriginAs(*a))
            .collect()));
        matches.extend(any(m
            .neighbor_as
            .iter()
            .map(|a| Match::NeighborAs(*a))
            .collect()));
        matches.extend(any(m
            .community
            .iter()
            .map(|c| Match::Community(c.0))
            .collect()));
        matches.extend(any(m
            .large_community
            .iter()
            .map(|c| Match::LargeCommunity(c.0))
            .collect()));
        matches.extend(any(m
            .ext_community
            .iter()
            .map(|c| Match::ExtCommunity(c.0))
            .collect()));
        if let Some(n) = m.path_len_le {
            matches.push(Match::PathLenLe(n as usize));
        }
        if let Some(n) = m.path_len_ge {
            matches.push(Match::PathLenGe(n as usize));
        }
        if let Some(f) = m.family {
            matches.push(Match::Family(match f {
                MatchFamily::Ipv4 => Afi::Ipv4,
                MatchFamily::Ipv6 => Afi::Ipv6,
            }));
        }
        if !m.rpki.is_empty() {
            matches.push(Match::Rpki(
                m.rpki
                    .iter()
                    .map(|s| match s {
                        RpkiState::Valid => Validity::Valid,
                        RpkiState::Invalid => Validity::Invalid,
                        RpkiState::NotFound => Validity::NotFound,
                    })
                    .collect(),
            ));
        }
        let s = &t.set;
        let mut actions = Vec::new();
        if let Some(v) = s.local_pref {
            actions.push(SetAction::LocalPref(v));
        }
        if let Some(v) = s.med {
            actions.push(SetAction::Med(v));
        }
        actions.extend(
            s.remove_community
                .iter()
                .map(|c| SetAction::RemoveCommunity(c.0)),
        );
        actions.extend(s.add_community.iter().map(|c| SetAction::AddCommunity(c.0)));
        actions.extend(
            s.remove_large_community
                .iter()
                .map(|c| SetAction::RemoveLargeCommunity(c.0)),
        );
        actions.extend(
            s.add_large_community
                .iter()
                .map(|c| SetAction::AddLargeCommunity(c.0)),
        );
        if !s.add_ext_community.is_empty() {
            return Err(anyhow!(
                "term {:?}: set.add_ext_community is not supported yet",
                t.name
            ));
        }
        if let Some(pp) = &s.prepend {
            actions.push(SetAction::Prepend {
                asn: pp.asn,
                count: pp.count,
            });
        }
        if s.next_hop_self {
            actions.push(SetAction::NextHopSelf);
        }
        let verdict = match t.action {
            TermAction::Accept => Some(true),
            TermAction::Reject => Some(false),
            TermAction::Next => None,
        };
        terms.push(Term {
            name: t.name.clone(),
            matches,
            actions,
            verdict,
        });
    }
    Ok(Policy {
        name: p.name.clone(),
        terms,
        default_accept: p.default == PolicyDefault::Accept,
    })
}

fn network_attrs(n: &holdfast_config::Network) -> PathAttrs {
    let mut a = PathAttrs {
        origin: Some(Origin::Igp),
        as_path: AsPath::default(),
        ..PathAttrs::default()
    };
    match n.next_hop {
        Some(IpAddr::V4(v4)) => a.next_hop = Some(v4),
        Some(IpAddr::V6(v6)) => {
            a.mp_next_hop = Some(MpNextHop {
                global: IpAddr::V6(v6),
                link_local: None,
            })
        }
        None => {}
    }
    a.med = n.med;
    a.local_pref = n.local_pref;
    a.communities = n.communities.iter().map(|c| c.0).collect();
    a.large_communities = n.large_communities.iter().map(|c| c.0).collect();
    a.ext_communities = n.ext_communities.iter().map(|c| c.0).collect();
    a
}

pub fn engine_config(cfg: &Config, inst: &Instance) -> EngineConfig {
    let g = &cfg.global;
    EngineConfig {
        local_as: inst.effective_asn(g),
        router_id: inst.effective_router_id(g),
        cluster_id: Some(g.effective_cluster_id()),
        shards: g.shards.max(1),
        threads: g.effective_workers().max(1),
        always_compare_med: g.always_compare_med,
        default_local_pref: 100,
        fib_ecmp: inst.kernel.as_ref().map_or(0, |k| k.ecmp.max(1) as usize),
    }
}

fn policy_ref(r: &CfgRef, compiled: &Compiled) -> anyhow::Result<PolicyRef> {
    Ok(match r {
        CfgRef::All => PolicyRef::All,
        CfgRef::None => PolicyRef::None,
        CfgRef::Named(n) => PolicyRef::Policy(
            compiled
                .policies
                .get(n)
                .cloned()
                .ok_or_else(|| anyhow!("unknown policy {n:?}"))?,
        ),
    })
}

pub fn peer_settings(
    cfg: &Config,
    compiled: &Compiled,
    n: &Neighbor,
    id: PeerId,
) -> anyhow::Result<PeerSettings> {
    let g = &cfg.global;
    let inst = cfg
        .instance(&n.instance)
        .ok_or_else(|| anyhow!("neighbor {}: unknown instance", n.address))?;
    let local_as = n.local_as(g);
    let router_id = inst.effective_router_id(g);
    let mut session = SessionConfig::new(local_as, n.remote_asn, router_id);
    session.hold_time = n.effective_hold_time(g);
    session.keepalive_time = n.keepalive.or(g.keepalive);
    session.nsr = cfg.nsr.is_some();
    session.connect_retry = n.effective_connect_retry(g);
    session.passive = n.passive;
    session.families = n.families.iter().map(|f| f.family()).collect();
    session.graceful_restart = if n.advertise_graceful_restart(g) {
        g.graceful_restart_time
    } else {
        None
    };
    let sock = SockOpts {
        md5: n.md5_password.as_ref().map(|k| k.0.clone()),
        ttl_security: n.ttl_security,
        multihop: n.multihop,
        vrf: n.vrf.clone(),
        local_address: n.local_address,
    };
    let (v4, v6) = match n.local_address {
        Some(IpAddr::V4(a)) => (Some(a), None),
        Some(IpAddr::V6(a)) => (None, Some(a)),
        None => (None, None),
    };
    let spec = PeerSpec {
        id,
        address: n.address,
        remote_as: n.remote_asn,
        local_as,
        router_id: Ipv4Addr::UNSPECIFIED,
        local_addr_v4: v4,
        local_addr_v6: v6,
        local_addr_v6_ll: None,
        import: policy_ref(&n.import, compiled)
            .with_context(|| format!("neighbor {}: import", n.address))?,
        export: policy_ref(&n.export, compiled)
            .with_context(|| format!("neighbor {}: export", n.address))?,
        rr_client: n.route_reflector_client,
        next_hop_self: n.next_hop_self,
        max_prefix: n.max_prefix,
        families: session.families.clone(),
        four_octet_as: true,
    };
    Ok(PeerSettings {
        id,
        instance: n.instance.clone(),
        address: n.address,
        port: 179,
        enabled: n.enabled,
        session,
        sock,
        spec,
        graceful_restart: n.graceful_restart,
        max_prefix_restart: n.max_prefix_restart,
    })
}

pub fn neighbor_info(
    cfg: &Config,
    _id: PeerId,
    n: &Neighbor,
    status: &SharedStatus,
    counts: Option<PeerCounts>,
) -> NeighborInfo {
    let st: PeerStatus = status
        .lock()
        .map(|s| s.clone())
        .unwrap_or_else(|p| p.into_inner().clone());
    let c = counts.unwrap_or_default();
    let neg = st.negotiated.as_ref();
    NeighborInfo {
        instance: n.instance.clone(),
        address: n.address.to_string(),
        remote_as: n.remote_asn,
        local_as: n.local_as(&cfg.global),
        state: st.state.to_string(),
        uptime_secs: st.established_at.map(|t| t.elapsed().as_secs()),
        remote_id: neg.map(|n| n.remote_id.to_string()),
        hold_time: neg
            .map(|n| n.hold_time)
            .unwrap_or(n.effective_hold_time(&cfg.global)),
        keepalive: neg.map(|n| n.keepalive).unwrap_or(0),
        prefixes_received: c.received,
        prefixes_accepted: c.accepted,
        prefixes_advertised: c.advertised,
        msgs_in: st.stats.messages_in(),
        msgs_out: st.stats.messages_out(),
        established_count: st.stats.established_count,
        dropped_count: st.stats.dropped_count,
        last_error: st.stats.last_error.clone(),
        families: neg
            .map(|n| {
                n.families
                    .iter()
                    .map(|f| format!("{:?}-{:?}", f.afi, f.safi).to_lowercase())
                    .collect()
            })
            .unwrap_or_default(),
    }
}

pub fn rib_entry(prefix: Prefix, peer: Option<&String>, a: &PathAttrs, best: bool) -> RibEntry {
    let next_hop = a
        .mp_next_hop
        .map(|nh| nh.global.to_string())
        .or_else(|| a.next_hop.map(|nh| nh.to_string()));
    RibEntry {
        prefix: prefix.to_string(),
        peer: peer.cloned(),
        best,
        origin: match a.origin {
            Some(Origin::Igp) => "i",
            Some(Origin::Egp) => "e",
            Some(Origin::Incomplete) | None => "?",
        }
        .to_string(),
        as_path: holdfast_rib::as_path_string(a),
        next_hop,
        med: a.med,
        local_pref: a.local_pref,
        communities: a.communities.iter().map(|c| format_community(*c)).collect(),
        large_communities: a
            .large_communities
            .iter()
            .map(|c| format_large_community(c.global, c.local1, c.local2))
            .collect(),
        ext_communities: a.ext_communities.iter().map(format_ext_community).collect(),
        rpki: None,
    }
}

/// A neighbour's BFD settings as the session machine's configuration.
pub fn bfd_session(b: &holdfast_config::BfdSettings) -> holdfast_bfd::SessionConfig {
    use holdfast_bfd::AuthType;
    use holdfast_config::BfdAuthType;
    holdfast_bfd::SessionConfig {
        desired_min_tx_us: b.min_tx_ms.saturating_mul(1000),
        required_min_rx_us: b.min_rx_ms.saturating_mul(1000),
        detect_mult: b.multiplier,
        passive: false,
        auth: b.auth.as_ref().map(|a| holdfast_bfd::AuthConfig {
            auth_type: match a.auth_type {
                BfdAuthType::Simple => AuthType::SimplePassword,
                BfdAuthType::KeyedMd5 => AuthType::KeyedMd5,
                BfdAuthType::MeticulousMd5 => AuthType::MeticulousKeyedMd5,
                BfdAuthType::KeyedSha1 => AuthType::KeyedSha1,
                BfdAuthType::MeticulousSha1 => AuthType::MeticulousKeyedSha1,
            },
            key_id: a.key_id,
            key: a.password.0.as_bytes().to_vec(),
        }),
    }
}

/// What the BFD thread runs a neighbour's session with.
pub fn bfd_spec(
    n: &holdfast_config::Neighbor,
    b: &holdfast_config::BfdSettings,
) -> crate::bfd::BfdSpec {
    crate::bfd::BfdSpec {
        peer: n.address,
        local: n.local_address,
        multihop: b.multihop,
        vrf: n.vrf.clone(),
        session: bfd_session(b),
    }
}
