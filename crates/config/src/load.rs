//! TOML → [`Config`]: deserialisation into raw tables, then validation that
//! names the offending key.

use crate::bfd::{
    default_key_id, neighbor_bfd, BfdAuth, BfdDefaults, BfdSettings, RawNeighborBfd,
    MAX_INTERVAL_MS,
};
use crate::model::{
    default_families, default_instance, Global, Instance, Kernel, Mrt, MrtKind, Neighbor, Network,
    Nsr, DEFAULT_INSTANCE,
};
use crate::policy::{PolicyDef, PrefixListDef};
use crate::values::{max_len, AfiSafi, Md5Key, PolicyRef};
use crate::{Config, ConfigError};
use serde::de::{self, Deserializer, Visitor};
use serde::Deserialize;
use std::collections::HashSet;
use std::fmt;
use std::net::{IpAddr, Ipv4Addr};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    global: Global,
    #[serde(default)]
    instance: Vec<RawInstance>,
    #[serde(default)]
    neighbor: Vec<RawNeighbor>,
    #[serde(default)]
    policy: Vec<PolicyDef>,
    #[serde(default)]
    prefix_list: Vec<PrefixListDef>,
    #[serde(default)]
    network: Vec<Network>,
    nsr: Option<Nsr>,
    #[serde(default)]
    bfd: BfdDefaults,
    #[serde(default)]
    mrt: Vec<Mrt>,
    #[serde(default)]
    bmp: Vec<crate::model::Bmp>,
    #[serde(default)]
    rpki: Vec<crate::model::Rpki>,
    kernel: Option<Kernel>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawInstance {
    name: String,
    vrf: Option<String>,
    router_id: Option<Ipv4Addr>,
    asn: Option<u32>,
    kernel: Option<Kernel>,
    #[serde(default, rename = "static")]
    statics: Vec<Network>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawNeighbor {
    address: IpAddr,
    remote_asn: u32,
    local_asn: Option<u32>,
    description: Option<String>,
    #[serde(default = "default_instance")]
    instance: String,
    import: Option<PolicyRef>,
    export: Option<PolicyRef>,
    hold_time: Option<u16>,
    keepalive: Option<u16>,
    connect_retry: Option<u16>,
    #[serde(default)]
    passive: bool,
    local_address: Option<IpAddr>,
    vrf: Option<String>,
    md5_password: Option<Md5Key>,
    #[serde(default, deserialize_with = "ttl_security")]
    ttl_security: Option<u8>,
    multihop: Option<u8>,
    #[serde(default = "default_families")]
    families: Vec<AfiSafi>,
    #[serde(default)]
    route_reflector_client: bool,
    #[serde(default)]
    next_hop_self: bool,
    max_prefix: Option<u32>,
    max_prefix_restart: Option<u32>,
    #[serde(default = "yes")]
    graceful_restart: bool,
    #[serde(default = "yes")]
    enabled: bool,
    #[serde(default, deserialize_with = "neighbor_bfd")]
    bfd: Option<RawNeighborBfd>,
}

fn yes() -> bool {
    true
}

/// `ttl_security = true` (1 hop), `false` (off) or a hop count.
fn ttl_security<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u8>, D::Error> {
    struct V;
    impl<'de> Visitor<'de> for V {
        type Value = Option<u8>;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a boolean or a hop count 1..=254")
        }
        fn visit_bool<E: de::Error>(self, v: bool) -> Result<Option<u8>, E> {
            Ok(v.then_some(1))
        }
        fn visit_i64<E: de::Error>(self, v: i64) -> Result<Option<u8>, E> {
            match u8::try_from(v) {
                Ok(h @ 1..=254) => Ok(Some(h)),
                _ => Err(E::custom(format!("hop count {v} out of range 1..=254"))),
            }
        }
    }
    d.deserialize_any(V)
}

fn invalid(key: impl Into<String>, message: impl Into<String>) -> ConfigError {
    ConfigError::Invalid {
        key: key.into(),
        message: message.into(),
    }
}

fn syntax_error(text: &str, e: serde_path_to_error::Error<toml::de::Error>) -> ConfigError {
    let path = e.path().to_string();
    let inner = e.into_inner();
    let (line, column) = match inner.span() {
        Some(span) => {
            let before = &text[..span.start.min(text.len())];
            let line = before.matches('\n').count() + 1;
            let column = before.len() - before.rfind('\n').map_or(0, |i| i + 1) + 1;
            (Some(line), Some(column))
        }
        None => (None, None),
    };
    let msg = inner.to_string();
    let msg = msg.trim_end();
    let key = (path != ".").then_some(path);
    let message = match &key {
        Some(k) => format!("{k}: {msg}"),
        None => msg.to_string(),
    };
    ConfigError::Syntax {
        key,
        line,
        column,
        message,
    }
}

const ASN_RANGE: &str = "must be 1..=4294967295";

fn check_asn(key: String, asn: u32) -> Result<(), ConfigError> {
    if asn == 0 {
        return Err(invalid(key, ASN_RANGE));
    }
    Ok(())
}

fn check_hold(key: String, hold: u16) -> Result<(), ConfigError> {
    if hold == 1 || hold == 2 {
        return Err(invalid(key, "must be 0 or 3..=65535 (RFC 4271 §4.2)"));
    }
    Ok(())
}

fn check_keepalive(key: String, keepalive: u16, hold: u16) -> Result<(), ConfigError> {
    if hold != 0 && (keepalive == 0 || keepalive >= hold) {
        return Err(invalid(
            key,
            format!("must be 1..{hold} (below the hold time)"),
        ));
    }
    Ok(())
}

/// Instance, policy and prefix-list names: non-empty, no whitespace.
fn check_name(key: String, name: &str) -> Result<(), ConfigError> {
    if name.is_empty() || name.len() > 64 || !name.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(invalid(
            key,
            "must be 1..=64 printable characters without spaces",
        ));
    }
    Ok(())
}

/// Linux interface names: 1..=15 bytes, no '/', ':' or whitespace.
fn check_ifname(key: String, name: &str) -> Result<(), ConfigError> {
    let ok = !name.is_empty()
        && name.len() < 16
        && name != "."
        && name != ".."
        && name
            .bytes()
            .all(|b| b.is_ascii_graphic() && b != b'/' && b != b':');
    if !ok {
        return Err(invalid(
            key,
            format!("{name:?} is not a valid Linux interface name"),
        ));
    }
    Ok(())
}

/// Whether `g` can name a group (the name is looked up at start).
pub fn valid_group(g: &str) -> bool {
    !g.is_empty()
        && g.len() <= 32
        && !g.starts_with('-')
        && g.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
}

fn check_global(g: &Global) -> Result<(), ConfigError> {
    check_asn("global.asn".into(), g.asn)?;
    if g.router_id.is_unspecified() {
        return Err(invalid("global.router_id", "must not be 0.0.0.0"));
    }
    check_hold("global.hold_time".into(), g.hold_time)?;
    if let Some(k) = g.keepalive {
        check_keepalive("global.keepalive".into(), k, g.hold_time)?;
    }
    if g.connect_retry == 0 {
        return Err(invalid("global.connect_retry", "must be 1..=65535 seconds"));
    }
    if g.workers.is_some_and(|w| !(1..=1024).contains(&w)) {
        return Err(invalid("global.workers", "must be 1..=1024"));
    }
    if g.io_threads.is_some_and(|w| !(1..=1024).contains(&w)) {
        return Err(invalid("global.io_threads", "must be 1..=1024"));
    }
    if !(1..=65536).contains(&g.shards) {
        return Err(invalid("global.shards", "must be 1..=65536"));
    }
    if !g.control_socket.is_absolute() {
        return Err(invalid("global.control_socket", "must be an absolute path"));
    }
    if let Some(grp) = &g.control_socket_group {
        if !valid_group(grp) {
            return Err(invalid(
                "global.control_socket_group",
                "must be a group name (letters, digits, `_`, `-`, `.`; not starting with `-`) or a number",
            ));
        }
    }
    if let Some(t) = g.graceful_restart_time {
        if !(1..=4095).contains(&t) {
            return Err(invalid(
                "global.graceful_restart_time",
                "must be 1..=4095 seconds (RFC 4724)",
            ));
        }
    }
    if g.cluster_id.is_some_and(|c| c.is_unspecified()) {
        return Err(invalid("global.cluster_id", "must not be 0.0.0.0"));
    }
    match (&g.grpc_tls_cert, &g.grpc_tls_key) {
        (Some(_), None) => {
            return Err(invalid(
                "global.grpc_tls_key",
                "must be set with global.grpc_tls_cert",
            ))
        }
        (None, Some(_)) => {
            return Err(invalid(
                "global.grpc_tls_cert",
                "must be set with global.grpc_tls_key",
            ))
        }
        (Some(_), Some(_)) if g.grpc_listen.is_none() => {
            return Err(invalid(
                "global.grpc_tls_cert",
                "needs global.grpc_listen (the gRPC API is off without it)",
            ))
        }
        _ => {}
    }
    if g.grpc_tls_ca.is_some() && g.grpc_tls_cert.is_none() {
        return Err(invalid(
            "global.grpc_tls_ca",
            "needs global.grpc_tls_cert and global.grpc_tls_key (client certificates are checked over TLS)",
        ));
    }
    check_grpc_exposure(g)
}

/// The GoBGP API off loopback (issue 30): only with client certificates
/// (`grpc_tls_ca`), or with `grpc_insecure = true` said explicitly.
fn check_grpc_exposure(g: &Global) -> Result<(), ConfigError> {
    let Some(addr) = g.grpc_listen else {
        if g.grpc_insecure {
            return Err(invalid(
                "global.grpc_insecure",
                "needs global.grpc_listen (the gRPC API is off without it)",
            ));
        }
        return Ok(());
    };
    match (g.grpc_tls_ca.is_some(), g.grpc_insecure) {
        (true, true) => Err(invalid(
            "global.grpc_insecure",
            "must not be set with global.grpc_tls_ca (client certificates are required)",
        )),
        (false, false) if !addr.ip().is_loopback() => Err(invalid(
            "global.grpc_listen",
            format!(
                "{addr} is not a loopback address: the API can add routes and reset sessions, so it needs global.grpc_tls_ca (with grpc_tls_cert and grpc_tls_key; docs/security.md), or global.grpc_insecure = true to serve any client"
            ),
        )),
        _ => Ok(()),
    }
}

/// The warning of an API served to any client off loopback.
fn grpc_warning(g: &Global) -> Option<String> {
    let addr = g.grpc_listen.filter(|a| !a.ip().is_loopback())?;
    g.grpc_insecure.then(|| {
        format!(
            "global.grpc_insecure: the gRPC API on {addr} takes any client (no client certificate): it can add routes and reset sessions"
        )
    })
}

fn check_network(key: &str, n: &Network, instances: &[Instance]) -> Result<(), ConfigError> {
    if !instances.iter().any(|i| i.name == n.instance) {
        return Err(invalid(
            format!("{key}.instance"),
            format!("unknown instance {:?}", n.instance),
        ));
    }
    if n.count == 0 {
        return Err(invalid(format!("{key}.count"), "must be at least 1"));
    }
    if u128::from(n.count) > n.room() {
        return Err(invalid(
            format!("{key}.count"),
            format!(
                "{} prefixes of length /{} starting at {} run past the end of the address space",
                n.count,
                n.prefix.len(),
                n.prefix
            ),
        ));
    }
    if n.next_hop
        .is_some_and(|h| h.is_unspecified() || h.is_multicast())
    {
        return Err(invalid(
            format!("{key}.next_hop"),
            "must be a unicast address",
        ));
    }
    Ok(())
}

fn check_prefix_lists(lists: &[PrefixListDef]) -> Result<(), ConfigError> {
    let mut names = HashSet::new();
    for (i, l) in lists.iter().enumerate() {
        check_name(format!("prefix_list[{i}].name"), &l.name)?;
        if !names.insert(l.name.as_str()) {
            return Err(invalid(
                format!("prefix_list[{i}].name"),
                format!("duplicate prefix list {:?}", l.name),
            ));
        }
        for (j, e) in l.entries.iter().enumerate() {
            let (len, max) = (e.prefix.len(), max_len(&e.prefix));
            if let Some(ge) = e.ge {
                if ge < len || ge > max {
                    return Err(invalid(
                        format!("prefix_list[{i}].entries[{j}].ge"),
                        format!("must be {len}..={max}"),
                    ));
                }
            }
            if let Some(le) = e.le {
                let lo = e.ge.unwrap_or(len);
                if le < lo || le > max {
                    return Err(invalid(
                        format!("prefix_list[{i}].entries[{j}].le"),
                        format!("must be {lo}..={max}"),
                    ));
                }
            }
        }
    }
    Ok(())
}

fn check_policies(policies: &[PolicyDef], lists: &[PrefixListDef]) -> Result<(), ConfigError> {
    let mut names = HashSet::new();
    for (i, p) in policies.iter().enumerate() {
        check_name(format!("policy[{i}].name"), &p.name)?;
        if p.name == "all" || p.name == "none" {
            return Err(invalid(
                format!("policy[{i}].name"),
                format!("{:?} is reserved", p.name),
            ));
        }
        if !names.insert(p.name.as_str()) {
            return Err(invalid(
                format!("policy[{i}].name"),
                format!("duplicate policy {:?}", p.name),
            ));
        }
        let mut terms = HashSet::new();
        for (j, t) in p.terms.iter().enumerate() {
            let key = format!("policy[{i}].term[{j}]");
            check_name(format!("{key}.name"), &t.name)?;
            if !terms.insert(t.name.as_str()) {
                return Err(invalid(
                    format!("{key}.name"),
                    format!("duplicate term {:?}", t.name),
                ));
            }
            let m = &t.matches;
            if let Some(pl) = &m.prefix_list {
                if !lists.iter().any(|l| &l.name == pl) {
                    return Err(invalid(
                        format!("{key}.match.prefix_list"),
                        format!("unknown prefix list {pl:?}"),
                    ));
                }
            }
            if let (Some(le), Some(ge)) = (m.path_len_le, m.path_len_ge) {
                if ge > le {
                    return Err(invalid(
                        format!("{key}.match.path_len_ge"),
                        format!("{ge} exceeds path_len_le {le}"),
                    ));
                }
            }
            for (name, list) in [
                ("as_path_contains", &m.as_path_contains),
                ("origin_as", &m.origin_as),
                ("neighbor_as", &m.neighbor_as),
            ] {
                if list.contains(&0) {
                    return Err(invalid(format!("{key}.match.{name}"), ASN_RANGE));
                }
            }
            if !t.set.add_ext_community.is_empty() {
                // holdfastd's policy engine has no such action (yet).
                return Err(invalid(
                    format!("{key}.set.add_ext_community"),
                    "is not supported yet",
                ));
            }
            if let Some(pp) = &t.set.prepend {
                if !(1..=32).contains(&pp.count) {
                    return Err(invalid(
                        format!("{key}.set.prepend"),
                        "count must be 1..=32",
                    ));
                }
                if pp.asn == Some(0) {
                    return Err(invalid(
                        format!("{key}.set.prepend"),
                        format!("asn {ASN_RANGE}"),
                    ));
                }
            }
        }
    }
    Ok(())
}

fn check_kernel(key: &str, k: &Kernel) -> Result<(), ConfigError> {
    if k.table == 0 || k.table == 255 {
        return Err(invalid(
            format!("{key}.table"),
            "must not be 0 (unspecified) or 255 (local)",
        ));
    }
    if !(1..=64).contains(&k.ecmp) {
        return Err(invalid(format!("{key}.ecmp"), "must be in 1..=64"));
    }
    if k.protocol <= 4 {
        return Err(invalid(
            format!("{key}.protocol"),
            "0..=4 are the kernel's own (unspec, redirect, kernel, boot, static)",
        ));
    }
    Ok(())
}

/// `[kernel]` belongs to the default instance; two instances may not
/// share a table with the same protocol number.
fn place_kernel(top: Option<Kernel>, instances: &mut [Instance]) -> Result<(), ConfigError> {
    if let Some(k) = top {
        check_kernel("kernel", &k)?;
        if instances[0].kernel.is_some() {
            return Err(invalid(
                "kernel",
                "the default instance has `kernel` in [[instance]] too",
            ));
        }
        instances[0].kernel = Some(k);
    }
    let mut seen: Vec<(u32, u8, &str)> = Vec::new();
    for i in instances.iter() {
        if let Some(k) = &i.kernel {
            if let Some((_, _, other)) = seen
                .iter()
                .find(|(t, p, _)| *t == k.table && *p == k.protocol)
            {
                return Err(invalid(
                    format!("instance {:?} kernel.table", i.name),
                    format!(
                        "table {} with protocol {} is already instance {other:?}'s",
                        k.table, k.protocol
                    ),
                ));
            }
            seen.push((k.table, k.protocol, &i.name));
        }
    }
    Ok(())
}

fn build_instances(
    raw: Vec<RawInstance>,
    networks: &mut Vec<Network>,
) -> Result<Vec<Instance>, ConfigError> {
    let mut instances = vec![Instance::default_instance()];
    let mut seen = HashSet::new();
    let mut statics = Vec::new();
    for (i, r) in raw.into_iter().enumerate() {
        check_name(format!("instance[{i}].name"), &r.name)?;
        if !seen.insert(r.name.clone()) {
            return Err(invalid(
                format!("instance[{i}].name"),
                format!("duplicate instance {:?}", r.name),
            ));
        }
        if let Some(v) = &r.vrf {
            check_ifname(format!("instance[{i}].vrf"), v)?;
        }
        if let Some(a) = r.asn {
            check_asn(format!("instance[{i}].asn"), a)?;
        }
        if r.router_id.is_some_and(|r| r.is_unspecified()) {
            return Err(invalid(
                format!("instance[{i}].router_id"),
                "must not be 0.0.0.0",
            ));
        }
        for (j, mut s) in r.statics.into_iter().enumerate() {
            if s.instance != DEFAULT_INSTANCE && s.instance != r.name {
                return Err(invalid(
                    format!("instance[{i}].static[{j}].instance"),
                    format!("must be omitted or equal {:?}", r.name),
                ));
            }
            s.instance = r.name.clone();
            statics.push((format!("instance[{i}].static[{j}]"), s));
        }
        if let Some(k) = &r.kernel {
            check_kernel(&format!("instance[{i}].kernel"), k)?;
        }
        let inst = Instance {
            name: r.name,
            vrf: r.vrf,
            router_id: r.router_id,
            asn: r.asn,
            kernel: r.kernel,
        };
        if inst.name == DEFAULT_INSTANCE {
            instances[0] = inst;
        } else {
            instances.push(inst);
        }
    }
    for (key, s) in statics {
        check_network(&key, &s, &instances)?;
        networks.push(s);
    }
    Ok(instances)
}

fn build_neighbor(
    i: usize,
    r: RawNeighbor,
    cfg: &Config,
    warnings: &mut Vec<String>,
) -> Result<Neighbor, ConfigError> {
    let k = |f: &str| format!("neighbor[{i}].{f}");
    if r.address.is_unspecified() || r.address.is_multicast() {
        return Err(invalid(k("address"), "must be a unicast address"));
    }
    check_asn(k("remote_asn"), r.remote_asn)?;
    if let Some(a) = r.local_asn {
        check_asn(k("local_asn"), a)?;
    }
    let inst = cfg
        .instance(&r.instance)
        .ok_or_else(|| invalid(k("instance"), format!("unknown instance {:?}", r.instance)))?;
    for (f, p) in [("import", &r.import), ("export", &r.export)] {
        if let Some(PolicyRef::Named(name)) = p {
            if cfg.policy(name).is_none() {
                return Err(invalid(k(f), format!("unknown policy {name:?}")));
            }
        }
    }
    if let Some(h) = r.hold_time {
        check_hold(k("hold_time"), h)?;
    }
    let hold = r.hold_time.unwrap_or(cfg.global.hold_time);
    if let Some(ka) = r.keepalive {
        check_keepalive(k("keepalive"), ka, hold)?;
    }
    if r.connect_retry == Some(0) {
        return Err(invalid(k("connect_retry"), "must be 1..=65535 seconds"));
    }
    if let Some(la) = r.local_address {
        if la.is_ipv4() != r.address.is_ipv4() {
            return Err(invalid(
                k("local_address"),
                "address family differs from neighbor address",
            ));
        }
        if la.is_unspecified() || la.is_multicast() {
            return Err(invalid(k("local_address"), "must be a unicast address"));
        }
    }
    if let Some(v) = &r.vrf {
        check_ifname(k("vrf"), v)?;
        if let Some(iv) = &inst.vrf {
            if iv != v {
                return Err(invalid(
                    k("vrf"),
                    format!("{v:?} differs from instance {:?} vrf {iv:?}", inst.name),
                ));
            }
        }
    }
    if let Some(m) = &r.md5_password {
        if m.0.is_empty() || m.0.len() > 80 {
            return Err(invalid(
                k("md5_password"),
                "must be 1..=80 bytes (TCP_MD5SIG_MAXKEYLEN)",
            ));
        }
    }
    if r.multihop == Some(0) {
        return Err(invalid(k("multihop"), "must be 1..=255"));
    }
    if r.ttl_security.is_some() && r.multihop.is_some() {
        return Err(invalid(
            k("ttl_security"),
            "cannot be combined with multihop",
        ));
    }
    if r.families.is_empty() {
        return Err(invalid(k("families"), "must name at least one family"));
    }
    let mut fams = HashSet::new();
    if let Some(f) = r.families.iter().find(|f| !fams.insert(**f)) {
        return Err(invalid(k("families"), format!("{f:?} listed twice")));
    }
    if r.max_prefix == Some(0) {
        return Err(invalid(k("max_prefix"), "must be at least 1"));
    }
    if r.max_prefix_restart.is_some() && r.max_prefix.is_none() {
        return Err(invalid(k("max_prefix_restart"), "requires max_prefix"));
    }
    if r.max_prefix_restart == Some(0) {
        return Err(invalid(
            k("max_prefix_restart"),
            "must be at least 1 second",
        ));
    }
    let local_asn = r.local_asn.or(inst.asn);
    let local_as = local_asn.unwrap_or(cfg.global.asn);
    let ebgp = r.remote_asn != local_as;
    if ebgp && r.route_reflector_client {
        return Err(invalid(
            k("route_reflector_client"),
            "only valid for iBGP neighbours",
        ));
    }
    let mut default_policy = |f: &str, p: Option<PolicyRef>| match p {
        Some(p) => p,
        None if ebgp => {
            warnings.push(format!(
                "neighbor[{i}] ({}): eBGP session without {f} policy; {f} defaults to \"none\" (RFC 8212)",
                r.address
            ));
            PolicyRef::None
        }
        None => PolicyRef::All,
    };
    let import = default_policy("import", r.import);
    let export = default_policy("export", r.export);
    Ok(Neighbor {
        address: r.address,
        remote_asn: r.remote_asn,
        local_asn,
        description: r.description,
        vrf: r.vrf.or_else(|| inst.vrf.clone()),
        instance: r.instance,
        import,
        export,
        hold_time: r.hold_time,
        keepalive: r.keepalive,
        connect_retry: r.connect_retry,
        passive: r.passive,
        local_address: r.local_address,
        md5_password: r.md5_password,
        ttl_security: r.ttl_security,
        multihop: r.multihop,
        families: r.families,
        route_reflector_client: r.route_reflector_client,
        next_hop_self: r.next_hop_self,
        max_prefix: r.max_prefix,
        max_prefix_restart: r.max_prefix_restart,
        graceful_restart: r.graceful_restart,
        enabled: r.enabled,
        bfd: r
            .bfd
            .map(|b| build_bfd(&k("bfd"), b, &cfg.bfd))
            .transpose()?,
    })
}

fn check_interval(key: String, ms: u32) -> Result<(), ConfigError> {
    if !(1..=MAX_INTERVAL_MS).contains(&ms) {
        return Err(invalid(
            key,
            format!("must be 1..={MAX_INTERVAL_MS} milliseconds"),
        ));
    }
    Ok(())
}

fn check_bfd_defaults(b: &BfdDefaults) -> Result<(), ConfigError> {
    check_interval("bfd.min_rx_ms".into(), b.min_rx_ms)?;
    check_interval("bfd.min_tx_ms".into(), b.min_tx_ms)?;
    if b.multiplier == 0 {
        return Err(invalid("bfd.multiplier", "must be 1..=255"));
    }
    if b.realtime_priority > 99 {
        return Err(invalid(
            "bfd.realtime_priority",
            "must be 0 (normal priority) or a SCHED_FIFO priority 1..=99",
        ));
    }
    Ok(())
}

/// A neighbour's `bfd` table over the `[bfd]` defaults; `key` is
/// `neighbor[i].bfd`.
fn build_bfd(key: &str, r: RawNeighborBfd, d: &BfdDefaults) -> Result<BfdSettings, ConfigError> {
    let k = |f: &str| format!("{key}.{f}");
    let min_rx_ms = r.min_rx_ms.unwrap_or(d.min_rx_ms);
    let min_tx_ms = r.min_tx_ms.unwrap_or(d.min_tx_ms);
    if r.min_rx_ms.is_some() {
        check_interval(k("min_rx_ms"), min_rx_ms)?;
    }
    if r.min_tx_ms.is_some() {
        check_interval(k("min_tx_ms"), min_tx_ms)?;
    }
    if r.multiplier == Some(0) {
        return Err(invalid(k("multiplier"), "must be 1..=255"));
    }
    let auth = match (r.auth, r.password) {
        (None, None) => {
            if r.key_id.is_some() {
                return Err(invalid(k("key_id"), "requires auth"));
            }
            None
        }
        (None, Some(_)) => return Err(invalid(k("password"), "requires auth")),
        (Some(_), None) => return Err(invalid(k("password"), "required when auth is set")),
        (Some(auth_type), Some(password)) => {
            let max = auth_type.max_key_len();
            if password.0.is_empty() || password.0.len() > max {
                return Err(invalid(
                    k("password"),
                    format!("must be 1..={max} bytes for this auth type"),
                ));
            }
            Some(BfdAuth {
                auth_type,
                key_id: r.key_id.unwrap_or_else(default_key_id),
                password,
            })
        }
    };
    Ok(BfdSettings {
        min_rx_ms,
        min_tx_ms,
        multiplier: r.multiplier.unwrap_or(d.multiplier),
        multihop: r.multihop.unwrap_or(d.multihop),
        auth,
    })
}

fn check_nsr(n: &Nsr) -> Result<(), ConfigError> {
    if n.instance.is_empty()
        || n.instance.len() > 64
        || !n
            .instance
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
    {
        return Err(invalid(
            "nsr.instance",
            "must be 1..=64 characters of [A-Za-z0-9_.-]",
        ));
    }
    if n.compact_bytes < 65536 {
        return Err(invalid("nsr.compact_bytes", "must be at least 65536"));
    }
    if !(0.0..=1000.0).contains(&n.compact_ratio) {
        return Err(invalid("nsr.compact_ratio", "must be a number in 0..=1000"));
    }
    if !(1..=crate::model::MAX_WAIT_TIMEOUT_MS).contains(&n.wait_timeout_ms) {
        return Err(invalid(
            "nsr.wait_timeout_ms",
            format!(
                "must be 1..={} (every store command must answer within 500 ms)",
                crate::model::MAX_WAIT_TIMEOUT_MS
            ),
        ));
    }
    check_store_credentials(n)?;
    if n.manage_address && n.address.is_none() {
        return Err(invalid(
            "nsr.address",
            "required when manage_address = true",
        ));
    }
    if n.address
        .is_some_and(|a| a.is_unspecified() || a.is_multicast())
    {
        return Err(invalid("nsr.address", "must be a unicast address"));
    }
    Ok(())
}

/// `nsr.store_user` and `nsr.store_password_file` against the URL: one
/// place for the user and one for the password, a password for a user,
/// none with Sentinel (whose URLs carry no credentials).
fn check_store_credentials(n: &Nsr) -> Result<(), ConfigError> {
    let mut store = n.store.clone();
    let (url_user, url_password) = match store.credentials_mut() {
        Some((username, password)) => (username.is_some(), password.is_some()),
        None => {
            for (key, set) in [
                ("nsr.store_user", n.store_user.is_some()),
                ("nsr.store_password_file", n.store_password_file.is_some()),
            ] {
                if set {
                    return Err(invalid(key, "not supported with a redis-sentinel:// store"));
                }
            }
            return Ok(());
        }
    };
    if let Some(u) = &n.store_user {
        let ok = !u.is_empty()
            && u.len() <= 128
            && u.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-_.@".contains(&b));
        if !ok {
            return Err(invalid(
                "nsr.store_user",
                "must be 1..=128 characters of [A-Za-z0-9_.@-]",
            ));
        }
        if url_user {
            return Err(invalid(
                "nsr.store_user",
                "nsr.store names a user already: give it in one place",
            ));
        }
        if n.store_password_file.is_none() && !url_password {
            return Err(invalid(
                "nsr.store_user",
                "needs a password: set nsr.store_password_file",
            ));
        }
    }
    if let Some(p) = &n.store_password_file {
        if url_password {
            return Err(invalid(
                "nsr.store_password_file",
                "nsr.store carries a password already: give it in one place",
            ));
        }
        if p.as_os_str().is_empty() || !p.is_absolute() {
            return Err(invalid(
                "nsr.store_password_file",
                "must be an absolute path",
            ));
        }
    }
    Ok(())
}

/// Reads a password file: its first line, not empty; the file must not be
/// readable or writable by others. Errors name `key` and the path, never
/// the content.
pub(crate) fn read_password_file(key: &str, path: &std::path::Path) -> Result<String, ConfigError> {
    use std::os::unix::fs::PermissionsExt as _;
    let meta =
        std::fs::metadata(path).map_err(|e| invalid(key, format!("{}: {e}", path.display())))?;
    if meta.permissions().mode() & 0o007 != 0 {
        return Err(invalid(
            key,
            format!(
                "{}: mode {:o} lets others read it (chmod 600 or 640)",
                path.display(),
                meta.permissions().mode() & 0o777
            ),
        ));
    }
    let text = std::fs::read_to_string(path)
        .map_err(|e| invalid(key, format!("{}: {e}", path.display())))?;
    let line = text.lines().next().unwrap_or("");
    if line.is_empty() || text.lines().skip(1).any(|l| !l.is_empty()) {
        return Err(invalid(
            key,
            format!("{}: must hold the password on one line", path.display()),
        ));
    }
    Ok(line.to_string())
}

pub(crate) fn parse(text: &str) -> Result<(Config, Vec<String>), ConfigError> {
    let raw: RawConfig = serde_path_to_error::deserialize(toml::Deserializer::new(text))
        .map_err(|e| syntax_error(text, e))?;
    check_global(&raw.global)?;
    check_prefix_lists(&raw.prefix_list)?;
    check_policies(&raw.policy, &raw.prefix_list)?;
    let mut statics = Vec::new();
    let mut instances = build_instances(raw.instance, &mut statics)?;
    place_kernel(raw.kernel, &mut instances)?;
    for (j, n) in raw.network.iter().enumerate() {
        check_network(&format!("network[{j}]"), n, &instances)?;
    }
    let mut networks = raw.network;
    networks.extend(statics);
    if let Some(n) = &raw.nsr {
        check_nsr(n)?;
    }
    check_bfd_defaults(&raw.bfd)?;
    let mut cfg = Config {
        global: raw.global,
        instances,
        neighbors: Vec::with_capacity(raw.neighbor.len()),
        policies: raw.policy,
        prefix_lists: raw.prefix_list,
        networks,
        nsr: raw.nsr,
        bfd: raw.bfd,
        mrt: Vec::new(),
        bmp: Vec::new(),
        rpki: Vec::new(),
    };
    let mut warnings: Vec<String> = grpc_warning(&cfg.global).into_iter().collect();
    let mut keys = HashSet::new();
    for (i, r) in raw.neighbor.into_iter().enumerate() {
        let n = build_neighbor(i, r, &cfg, &mut warnings)?;
        if !keys.insert(n.key()) {
            return Err(invalid(
                format!("neighbor[{i}].address"),
                format!(
                    "duplicate neighbour {} in instance {:?}",
                    n.address, n.instance
                ),
            ));
        }
        cfg.neighbors.push(n);
    }
    for (i, m) in raw.mrt.iter().enumerate() {
        check_mrt(i, m, &cfg)?;
    }
    cfg.mrt = raw.mrt;
    for (i, b) in raw.bmp.iter().enumerate() {
        check_bmp(i, b, &raw.bmp[..i])?;
    }
    cfg.bmp = raw.bmp;
    for (i, r) in raw.rpki.iter().enumerate() {
        check_rpki(i, r, &raw.rpki[..i])?;
    }
    cfg.rpki = raw.rpki;
    check_rpki_policies(&cfg, &mut warnings)?;
    Ok((cfg, warnings))
}

fn check_rpki(
    i: usize,
    r: &crate::model::Rpki,
    before: &[crate::model::Rpki],
) -> Result<(), ConfigError> {
    let key = |k: &str| format!("rpki[{i}].{k}");
    if r.address.port() == 0 {
        return Err(invalid(
            key("address"),
            "needs a port (e.g. \"192.0.2.9:323\")",
        ));
    }
    if before.iter().any(|o| o.address == r.address) {
        return Err(invalid(
            key("address"),
            format!("duplicate cache {}", r.address),
        ));
    }
    if !(1..=86_400).contains(&r.refresh_secs) {
        return Err(invalid(key("refresh_secs"), "must be between 1 and 86400"));
    }
    if !(1..=7_200).contains(&r.retry_secs) {
        return Err(invalid(key("retry_secs"), "must be between 1 and 7200"));
    }
    if !(600..=172_800).contains(&r.expire_secs) {
        return Err(invalid(
            key("expire_secs"),
            "must be between 600 and 172800",
        ));
    }
    if r.expire_secs <= r.refresh_secs || r.expire_secs <= r.retry_secs {
        return Err(invalid(
            key("expire_secs"),
            "must exceed refresh_secs and retry_secs (RFC 8210 §6)",
        ));
    }
    Ok(())
}

/// `match.rpki` is an import condition: an export policy using it is
/// refused, naming the neighbour's `export`. Without `[[rpki]]` every route
/// is `not-found`, which deserves a warning.
fn check_rpki_policies(cfg: &Config, warnings: &mut Vec<String>) -> Result<(), ConfigError> {
    let uses = |name: &str| {
        cfg.policy(name)
            .is_some_and(|p| p.terms.iter().any(|t| !t.matches.rpki.is_empty()))
    };
    let mut used = false;
    for (i, n) in cfg.neighbors.iter().enumerate() {
        if let PolicyRef::Named(name) = &n.export {
            if uses(name) {
                return Err(invalid(
                    format!("neighbor[{i}].export"),
                    format!("policy {name:?} matches on rpki, which only import policies may"),
                ));
            }
        }
        if let PolicyRef::Named(name) = &n.import {
            used |= uses(name);
        }
    }
    if used && cfg.rpki.is_empty() {
        warnings.push(
            "an import policy matches on rpki but no [[rpki]] cache is configured: \
             every route is not-found"
                .into(),
        );
    }
    Ok(())
}

fn check_bmp(
    i: usize,
    b: &crate::model::Bmp,
    before: &[crate::model::Bmp],
) -> Result<(), ConfigError> {
    let key = |k: &str| format!("bmp[{i}].{k}");
    if b.address.port() == 0 {
        return Err(invalid(
            key("address"),
            "needs a port (e.g. \"192.0.2.9:1790\")",
        ));
    }
    if before.iter().any(|o| o.address == b.address) {
        return Err(invalid(
            key("address"),
            format!("duplicate collector {}", b.address),
        ));
    }
    if b.route_monitoring.is_empty() {
        return Err(invalid(
            key("route_monitoring"),
            "must name at least one of \"pre-policy\", \"post-policy\", \"loc-rib\", \"adj-rib-out\"",
        ));
    }
    if b.retry_secs == 0 || b.retry_secs > 3600 {
        return Err(invalid(key("retry_secs"), "must be between 1 and 3600"));
    }
    Ok(())
}

fn check_mrt(i: usize, m: &Mrt, cfg: &Config) -> Result<(), ConfigError> {
    let key = |k: &str| format!("mrt[{i}].{k}");
    if !m.file.starts_with('/') {
        return Err(invalid(key("file"), "must be an absolute path"));
    }
    if cfg.instance(&m.instance).is_none() {
        return Err(invalid(
            key("instance"),
            format!("no instance {:?}", m.instance),
        ));
    }
    match m.kind {
        MrtKind::Table => {
            if m.interval_secs == 0 {
                return Err(invalid(
                    key("interval_secs"),
                    "must be at least 1 for a table dump (`holdfast dump mrt` dumps on demand)",
                ));
            }
            if !m.neighbors.is_empty() {
                return Err(invalid(
                    key("neighbors"),
                    "only for kind = \"updates\" (a table dump holds every neighbour)",
                ));
            }
        }
        MrtKind::Updates => {
            if m.table.is_some() {
                return Err(invalid(key("table"), "only for kind = \"table\""));
            }
            for (j, a) in m.neighbors.iter().enumerate() {
                if cfg.neighbors_of(&m.instance).all(|n| n.address != *a) {
                    return Err(invalid(
                        format!("mrt[{i}].neighbors[{j}]"),
                        format!("no neighbour {a} in instance {:?}", m.instance),
                    ));
                }
            }
        }
    }
    Ok(())
}
