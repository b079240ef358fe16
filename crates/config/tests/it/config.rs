use holdfast_config::*;
use std::net::IpAddr;

const SPEC_SNIPPET: &str = r#"
[global]
asn = 65000
router_id = "192.0.2.1"
listen = "0.0.0.0:179"          # optional; also accept a list via `listen = ["0.0.0.0:179", "[::]:179"]`? choose: a string OR array of strings

[[neighbor]]
address = "192.0.2.2"
remote_asn = 65001
import = "all"                  # "all" | "none" | name of a policy, as in BIRD
export = "all"
# hold_time, passive, vrf, md5_password, policy references ...
"#;

const GLOBAL: &str = "[global]\nasn = 65000\nrouter_id = \"192.0.2.1\"\n";

fn ok(text: &str) -> (Config, Vec<String>) {
    match parse(text) {
        Ok(v) => v,
        Err(e) => panic!("config rejected: {e}\n---\n{text}"),
    }
}

fn err(text: &str) -> ConfigError {
    match parse(text) {
        Ok(_) => panic!("config accepted but should not be:\n{text}"),
        Err(e) => e,
    }
}

fn key(n: usize) -> NeighborKey {
    NeighborKey {
        instance: "default".into(),
        address: format!("192.0.2.{n}").parse().unwrap(),
    }
}

#[test]
fn spec_snippet_parses() {
    let (cfg, warnings) = ok(SPEC_SNIPPET);
    assert!(warnings.is_empty(), "{warnings:?}");
    assert_eq!(cfg.global.asn, 65000);
    assert_eq!(cfg.global.listen, vec!["0.0.0.0:179".parse().unwrap()]);
    assert_eq!(cfg.global.hold_time, 90);
    assert_eq!(cfg.global.connect_retry, 5);
    assert_eq!(cfg.global.shards, 64);
    assert_eq!(cfg.global.workers, None);
    assert!(cfg.global.effective_workers() >= 1);
    assert_eq!(cfg.global.io_threads, None);
    assert_eq!(
        cfg.global.effective_io_threads(),
        std::thread::available_parallelism().map_or(1, |n| n.get())
    );
    assert_eq!(
        cfg.global.control_socket.to_str(),
        Some("/run/holdfast/holdfastd.sock")
    );
    assert_eq!(cfg.instances.len(), 1);
    assert_eq!(cfg.instances[0].name, DEFAULT_INSTANCE);
    let n = &cfg.neighbors[0];
    assert_eq!(n.key(), key(2));
    assert!(n.is_ebgp(&cfg.global));
    assert_eq!(n.import, PolicyRef::All);
    assert_eq!(n.export, PolicyRef::All);
    assert_eq!(n.effective_hold_time(&cfg.global), 90);
    assert_eq!(n.effective_keepalive(&cfg.global, 90), 30);
    assert_eq!(n.effective_connect_retry(&cfg.global), 5);
    assert_eq!(n.families, vec![AfiSafi::Ipv4Unicast, AfiSafi::Ipv6Unicast]);
    assert!(n.graceful_restart && n.enabled && !n.passive);
    assert!(!n.advertise_graceful_restart(&cfg.global));
}

#[test]
fn listen_accepts_list_and_defaults_to_both_families() {
    let (cfg, _) = ok(&format!(
        "{GLOBAL}listen = [\"0.0.0.0:179\", \"[::]:1179\"]\n"
    ));
    assert_eq!(cfg.global.listen.len(), 2);
    assert_eq!(cfg.global.listen[1], "[::]:1179".parse().unwrap());
    let (cfg, _) = ok(GLOBAL);
    assert_eq!(
        cfg.global.listen,
        vec!["0.0.0.0:179".parse().unwrap(), "[::]:179".parse().unwrap()]
    );
}

const FULL: &str = r#"
[global]
asn = 65000
router_id = "192.0.2.1"
listen = ["0.0.0.0:179", "[::]:179"]
hold_time = 180
keepalive = 60
connect_retry = 10
workers = 2
shards = 128
control_socket = "/run/hf.sock"
metrics_listen = "127.0.0.1:9179"
log_format = "json"
graceful_restart_time = 120
cluster_id = "192.0.2.100"
always_compare_med = true

[[instance]]
name = "blue"
vrf = "vrf-blue"
router_id = "198.51.100.1"
asn = 65100

[[instance.static]]
prefix = "203.0.113.0/24"
communities = ["65100:1"]

[[neighbor]]
address = "192.0.2.2"
remote_asn = 65001
description = "transit"
import = "from-transit"
export = "to-transit"
hold_time = 30
keepalive = 10
connect_retry = 3
passive = true
local_address = "192.0.2.1"
md5_password = "hunter2"
ttl_security = true
families = ["ipv4-unicast"]
next_hop_self = true
max_prefix = 1000
max_prefix_restart = 60
graceful_restart = false

[[neighbor]]
address = "192.0.2.3"
remote_asn = 65000
route_reflector_client = true
multihop = 2

[[neighbor]]
address = "2001:db8::2"
remote_asn = 65100
instance = "blue"
enabled = false

[[neighbor]]
address = "192.0.2.4"
remote_asn = 65002
import = "from-transit"
export = "none"
ttl_security = 2

[[prefix_list]]
name = "bogons"
entries = [
  { prefix = "10.0.0.0/8", le = 32, action = "deny" },
  { prefix = "0.0.0.0/0", le = 24 },
]

[[policy]]
name = "from-transit"
default = "reject"

[[policy.term]]
name = "no-bogons"
match = { prefix_list = "bogons" }
action = "next"

[[policy.term]]
name = "prefer"
action = "accept"
[policy.term.match]
prefix = ["192.0.2.0/24{24,32}", "2001:db8::/32+"]
as_path = "^65001( .*)?$"
as_path_contains = 65010
origin_as = [65001, 65002]
neighbor_as = 65001
community = "65000:100"
large_community = ["65000:1:2"]
ext_community = "rt:65000:1"
path_len_le = 10
path_len_ge = 1
family = "ipv4"
[policy.term.set]
local_pref = 200
med = 10
add_community = ["65000:1", "no-export"]
remove_community = "65000:2"
add_large_community = "65000:0:1"
prepend = { asn = 65000, count = 2 }
next_hop_self = true

[[policy]]
name = "to-transit"
default = "accept"
[[policy.term]]
name = "prepend"
set = { prepend = 3 }

[[network]]
prefix = "10.0.0.0/24"
count = 10000
next_hop = "192.0.2.1"
med = 5
local_pref = 100
large_communities = "65000:7:7"
ext_communities = ["soo:65000:9"]

[nsr]
store = "redis-sentinel://192.0.2.10:26379,192.0.2.11/holdfast"
instance = "edge-1"
manage_address = true
address = "192.0.2.50"
"#;

#[test]
fn full_schema_parses() {
    let (cfg, warnings) = ok(FULL);
    assert!(warnings.is_empty(), "{warnings:?}");
    let g = &cfg.global;
    assert_eq!(g.log_format, LogFormat::Json);
    assert_eq!(g.graceful_restart_time, Some(120));
    assert!(g.always_compare_med);
    assert_eq!(
        cfg.instances
            .iter()
            .map(|i| i.name.as_str())
            .collect::<Vec<_>>(),
        ["default", "blue"]
    );
    let n0 = &cfg.neighbors[0];
    assert_eq!(n0.ttl_security, Some(1));
    assert_eq!(n0.md5_password.as_ref().unwrap().as_bytes(), b"hunter2");
    assert!(
        !format!("{n0:?}").contains("hunter2"),
        "md5 key leaked into Debug"
    );
    assert_eq!(n0.import, PolicyRef::Named("from-transit".into()));
    assert_eq!(n0.effective_keepalive(g, 30), 10);
    let n1 = &cfg.neighbors[1];
    assert!(!n1.is_ebgp(g));
    assert_eq!(n1.effective_keepalive(g, 180), 60);
    assert!(n1.advertise_graceful_restart(g));
    let n2 = &cfg.neighbors[2];
    assert_eq!(n2.local_asn, Some(65100), "instance asn is inherited");
    assert!(!n2.is_ebgp(g));
    assert_eq!(
        n2.vrf.as_deref(),
        Some("vrf-blue"),
        "instance vrf is inherited"
    );
    assert_eq!(cfg.neighbors[3].ttl_security, Some(2));
    let term = &cfg.policy("from-transit").unwrap().terms[1];
    assert_eq!(
        term.set.prepend,
        Some(Prepend {
            asn: Some(65000),
            count: 2
        })
    );
    assert_eq!(term.set.add_community[1], CommunityValue(0xFFFF_FF01));
    assert_eq!(term.matches.as_path_contains, vec![65010]);
    assert_eq!(
        cfg.policy("to-transit").unwrap().terms[0].set.prepend,
        Some(Prepend {
            asn: None,
            count: 3
        })
    );
    assert_eq!(cfg.networks.len(), 2);
    assert_eq!(cfg.networks[1].instance, "blue");
    let nsr = cfg.nsr.as_ref().unwrap();
    assert!(nsr.enabled);
    assert_eq!(
        nsr.store,
        NsrStore::Sentinel {
            sentinels: vec![("192.0.2.10".into(), 26379), ("192.0.2.11".into(), 26379)],
            master: "holdfast".into()
        }
    );
}

#[test]
fn serialized_config_round_trips() {
    let (cfg, _) = ok(FULL);
    let text = toml::to_string(&cfg).unwrap();
    let (again, _) = ok(&text);
    assert_eq!(cfg, again, "{text}");
}

#[test]
fn rfc8212_defaults_and_warning() {
    let text = format!(
        "{GLOBAL}[[neighbor]]\naddress = \"192.0.2.2\"\nremote_asn = 65001\n\
         [[neighbor]]\naddress = \"192.0.2.3\"\nremote_asn = 65000\n\
         [[neighbor]]\naddress = \"192.0.2.4\"\nremote_asn = 65001\nimport = \"all\"\n"
    );
    let (cfg, warnings) = ok(&text);
    assert_eq!(
        (&cfg.neighbors[0].import, &cfg.neighbors[0].export),
        (&PolicyRef::None, &PolicyRef::None)
    );
    assert_eq!(
        (&cfg.neighbors[1].import, &cfg.neighbors[1].export),
        (&PolicyRef::All, &PolicyRef::All)
    );
    assert_eq!(
        (&cfg.neighbors[2].import, &cfg.neighbors[2].export),
        (&PolicyRef::All, &PolicyRef::None)
    );
    assert_eq!(warnings.len(), 3, "{warnings:?}");
    assert!(warnings.iter().all(|w| w.contains("RFC 8212")));
    assert!(warnings[0].contains("neighbor[0]") && warnings[0].contains("192.0.2.2"));
    assert!(warnings[2].contains("neighbor[2]") && warnings[2].contains("export"));
}

/// Issue 30: the GoBGP API's client CA and the control socket's group.
#[test]
fn mutual_tls_and_the_socket_group_load() {
    let (cfg, _) = ok("[global]\nasn = 65000\nrouter_id = \"192.0.2.1\"\ncontrol_socket_group = \"holdfast\"\ngrpc_listen = \"127.0.0.1:50051\"\ngrpc_tls_cert = \"/c.pem\"\ngrpc_tls_key = \"/k.pem\"\ngrpc_tls_ca = \"/ca.pem\"\n");
    assert_eq!(cfg.global.control_socket_group.as_deref(), Some("holdfast"));
    assert_eq!(
        cfg.global.grpc_tls_ca.as_deref(),
        Some(std::path::Path::new("/ca.pem"))
    );
    let (cfg, _) =
        ok("[global]\nasn = 65000\nrouter_id = \"192.0.2.1\"\ncontrol_socket_group = \"1001\"\n");
    assert_eq!(cfg.global.control_socket_group.as_deref(), Some("1001"));
    assert_eq!(cfg.global.grpc_tls_ca, None);
}

/// Issue 30: the GoBGP API off loopback only with client certificates or
/// an explicit `grpc_insecure = true`, which is warned about.
#[test]
fn grpc_api_off_loopback_needs_client_certificates_or_insecure() {
    let g = |extra: &str| format!("[global]\nasn = 65000\nrouter_id = \"192.0.2.1\"\n{extra}\n");
    let (_, w) = ok(&g("grpc_listen = \"127.0.0.1:50051\""));
    assert!(w.is_empty(), "{w:?}");
    let (_, w) = ok(&g("grpc_listen = \"[::1]:50051\""));
    assert!(w.is_empty(), "{w:?}");
    let (_, w) = ok(&g("grpc_listen = \"192.0.2.1:50051\"\ngrpc_tls_cert = \"/c.pem\"\ngrpc_tls_key = \"/k.pem\"\ngrpc_tls_ca = \"/ca.pem\""));
    assert!(w.is_empty(), "{w:?}");
    let (cfg, w) = ok(&g("grpc_listen = \"0.0.0.0:50051\"\ngrpc_insecure = true"));
    assert!(cfg.global.grpc_insecure);
    assert_eq!(w.len(), 1, "{w:?}");
    assert!(
        w[0].contains("global.grpc_insecure") && w[0].contains("0.0.0.0:50051"),
        "{w:?}"
    );
}

/// Each case: (config text, key the error must name, message fragment).
#[test]
fn validation_errors_name_the_key() {
    let nb = |extra: &str| {
        format!("{GLOBAL}[[neighbor]]\naddress = \"192.0.2.2\"\nremote_asn = 65001\n{extra}\n")
    };
    let g = |extra: &str| format!("[global]\nasn = 65000\nrouter_id = \"192.0.2.1\"\n{extra}\n");
    let cases: Vec<(String, &str, &str)> = vec![
        ("[global]\nasn = 0\nrouter_id = \"192.0.2.1\"\n".into(), "global.asn", "must be 1..=4294967295"),
        ("[global]\nasn = -1\nrouter_id = \"192.0.2.1\"\n".into(), "global.asn", ""),
        ("[global]\nasn = 5000000000\nrouter_id = \"192.0.2.1\"\n".into(), "global.asn", ""),
        ("[global]\nasn = 1\nrouter_id = \"0.0.0.0\"\n".into(), "global.router_id", ""),
        ("[global]\nasn = 1\nrouter_id = \"not-an-ip\"\n".into(), "global.router_id", ""),
        ("[global]\nrouter_id = \"192.0.2.1\"\n".into(), "global", "asn"),
        (g("listen = \"0.0.0.0\""), "global.listen", ""),
        (g("hold_time = 2"), "global.hold_time", "0 or 3"),
        (g("keepalive = 90"), "global.keepalive", ""),
        (g("connect_retry = 0"), "global.connect_retry", ""),
        (g("workers = 0"), "global.workers", ""),
        (g("io_threads = 0"), "global.io_threads", "1..=1024"),
        (g("io_threads = 2000"), "global.io_threads", "1..=1024"),
        (g("shards = 0"), "global.shards", ""),
        (g("control_socket = \"relative.sock\""), "global.control_socket", "absolute"),
        (g("metrics_listen = \"localhost\""), "global.metrics_listen", ""),
        (g("log_format = \"xml\""), "global.log_format", "xml"),
        (g("graceful_restart_time = 5000"), "global.graceful_restart_time", "4095"),
        (g("cluster_id = \"0.0.0.0\""), "global.cluster_id", ""),
        (g("always_compare_med = \"yes\""), "global.always_compare_med", ""),
        (g("grpc_listen = \"localhost\""), "global.grpc_listen", ""),
        (g("grpc_listen = \"127.0.0.1:50051\"\ngrpc_tls_cert = \"/c.pem\""), "global.grpc_tls_key", "grpc_tls_cert"),
        (g("grpc_listen = \"127.0.0.1:50051\"\ngrpc_tls_key = \"/k.pem\""), "global.grpc_tls_cert", "grpc_tls_key"),
        (g("grpc_tls_cert = \"/c.pem\"\ngrpc_tls_key = \"/k.pem\""), "global.grpc_tls_cert", "grpc_listen"),
        (g("grpc_listen = \"127.0.0.1:50051\"\ngrpc_tls_ca = \"/ca.pem\""), "global.grpc_tls_ca", "grpc_tls_cert"),
        (g("grpc_tls_ca = 5"), "global.grpc_tls_ca", ""),
        (g("grpc_listen = \"192.0.2.1:50051\""), "global.grpc_listen", "grpc_insecure = true"),
        (g("grpc_listen = \"0.0.0.0:50051\"\ngrpc_tls_cert = \"/c.pem\"\ngrpc_tls_key = \"/k.pem\""), "global.grpc_listen", "grpc_tls_ca"),
        (g("grpc_listen = \"[::]:50051\""), "global.grpc_listen", "loopback"),
        (g("grpc_listen = \"192.0.2.1:50051\"\ngrpc_tls_cert = \"/c.pem\"\ngrpc_tls_key = \"/k.pem\"\ngrpc_tls_ca = \"/ca.pem\"\ngrpc_insecure = true"), "global.grpc_insecure", "grpc_tls_ca"),
        (g("grpc_insecure = true"), "global.grpc_insecure", "grpc_listen"),
        (g("control_socket_group = \"-x\""), "global.control_socket_group", "group name"),
        (g("control_socket_group = \"a b\""), "global.control_socket_group", "group name"),
        (g("control_socket_grp = \"x\""), "global.control_socket_grp", "unknown field"),
        (format!("{GLOBAL}[[neighbor]]\naddress = \"192.0.2.2\"\nremote_asn = 65001\n[[neighbor]]\naddress = \"192.0.2.3\"\nremote_asn = 65001\n[[neighbor]]\naddress = \"192.0.2.4\"\nremote_asn = 0\n"),
            "neighbor[2].remote_asn", "must be 1..=4294967295"),
        (nb("local_asn = 0"), "neighbor[0].local_asn", "must be 1..=4294967295"),
        (format!("{GLOBAL}[[neighbor]]\naddress = \"192.0.2.300\"\nremote_asn = 1\n"), "neighbor[0].address", ""),
        (format!("{GLOBAL}[[neighbor]]\naddress = \"0.0.0.0\"\nremote_asn = 1\n"), "neighbor[0].address", "unicast"),
        (nb("import = \"foo\""), "neighbor[0].import", "unknown policy \"foo\""),
        (nb("export = \"bar\""), "neighbor[0].export", "unknown policy \"bar\""),
        (nb("instance = \"red\""), "neighbor[0].instance", "unknown instance \"red\""),
        (nb("hold_time = 1"), "neighbor[0].hold_time", "0 or 3"),
        (nb("hold_time = 70000"), "neighbor[0].hold_time", ""),
        (nb("hold_time = 9\nkeepalive = 9"), "neighbor[0].keepalive", ""),
        (nb("connect_retry = 0"), "neighbor[0].connect_retry", ""),
        (nb("passive = 1"), "neighbor[0].passive", ""),
        (nb("local_address = \"2001:db8::1\""), "neighbor[0].local_address", "family"),
        (nb("vrf = \"a/b\""), "neighbor[0].vrf", "interface name"),
        (nb(&format!("md5_password = \"{}\"", "x".repeat(81))), "neighbor[0].md5_password", "80"),
        (nb("md5_password = \"\""), "neighbor[0].md5_password", ""),
        (nb("ttl_security = 255"), "neighbor[0].ttl_security", ""),
        (nb("ttl_security = true\nmultihop = 2"), "neighbor[0].ttl_security", "multihop"),
        (nb("multihop = 0"), "neighbor[0].multihop", ""),
        (nb("families = []"), "neighbor[0].families", ""),
        (nb("families = [\"ipv4-multicast\"]"), "neighbor[0].families[0]", "ipv4-multicast"),
        (nb("families = [\"ipv4-unicast\", \"ipv4-unicast\"]"), "neighbor[0].families", "twice"),
        (nb("route_reflector_client = true"), "neighbor[0].route_reflector_client", "iBGP"),
        (nb("next_hop_self = \"x\""), "neighbor[0].next_hop_self", ""),
        (nb("max_prefix = 0"), "neighbor[0].max_prefix", ""),
        (nb("max_prefix_restart = 30"), "neighbor[0].max_prefix_restart", "requires max_prefix"),
        (nb("graceful_restart = 3"), "neighbor[0].graceful_restart", ""),
        (nb("enabled = \"no\""), "neighbor[0].enabled", ""),
        (nb("description = 5"), "neighbor[0].description", ""),
        (format!("{GLOBAL}[[neighbor]]\naddress = \"192.0.2.2\"\nremote_asn = 1\n[[neighbor]]\naddress = \"192.0.2.2\"\nremote_asn = 2\n"),
            "neighbor[1].address", "duplicate"),
        (format!("{GLOBAL}[[instance]]\nname = \"blue\"\nvrf = \"blue\"\n[[neighbor]]\naddress = \"192.0.2.2\"\nremote_asn = 1\ninstance = \"blue\"\nvrf = \"red\"\n"),
            "neighbor[0].vrf", "differs"),
        (format!("{GLOBAL}[[instance]]\nname = \"\"\n"), "instance[0].name", ""),
        (format!("{GLOBAL}[[instance]]\nname = \"a\"\n[[instance]]\nname = \"a\"\n"), "instance[1].name", "duplicate"),
        (format!("{GLOBAL}[[instance]]\nname = \"a\"\nvrf = \"much-too-long-vrf-name\"\n"), "instance[0].vrf", ""),
        (format!("{GLOBAL}[[instance]]\nname = \"a\"\nasn = 0\n"), "instance[0].asn", ""),
        (format!("{GLOBAL}[[instance]]\nname = \"a\"\nrouter_id = \"0.0.0.0\"\n"), "instance[0].router_id", ""),
        (format!("{GLOBAL}[[instance]]\nname = \"a\"\n[[instance.static]]\nprefix = \"10.0.0.1/24\"\n"), "instance[0].static[0].prefix", "host bits"),
        (format!("{GLOBAL}[[instance]]\nname = \"a\"\n[[instance.static]]\nprefix = \"10.0.0.0/24\"\ninstance = \"b\"\n"), "instance[0].static[0].instance", ""),
        (format!("{GLOBAL}[[network]]\nprefix = \"10.0.0.0/33\"\n"), "network[0].prefix", ""),
        (format!("{GLOBAL}[[network]]\nprefix = \"10.0.0.0/24\"\ncount = 0\n"), "network[0].count", ""),
        (format!("{GLOBAL}[[network]]\nprefix = \"255.255.0.0/16\"\ncount = 2\n"), "network[0].count", "end of the address space"),
        (format!("{GLOBAL}[[network]]\nprefix = \"10.0.0.0/24\"\ninstance = \"x\"\n"), "network[0].instance", "unknown instance"),
        (format!("{GLOBAL}[[network]]\nprefix = \"10.0.0.0/24\"\nnext_hop = \"0.0.0.0\"\n"), "network[0].next_hop", ""),
        (format!("{GLOBAL}[[network]]\nprefix = \"10.0.0.0/24\"\ncommunities = \"70000:1\"\n"), "network[0].communities", "ASN part"),
        (format!("{GLOBAL}[[network]]\nprefix = \"10.0.0.0/24\"\nlarge_communities = \"1:2\"\n"), "network[0].large_communities", ""),
        (format!("{GLOBAL}[[network]]\nprefix = \"10.0.0.0/24\"\next_communities = \"xx:1:2\"\n"), "network[0].ext_communities", ""),
        (format!("{GLOBAL}[[network]]\nprefix = \"10.0.0.0/24\"\nmed = -1\n"), "network[0].med", ""),
        (format!("{GLOBAL}[[network]]\nprefix = \"10.0.0.0/24\"\nlocal_pref = \"high\"\n"), "network[0].local_pref", ""),
        (format!("{GLOBAL}[[prefix_list]]\nname = \"p\"\nentries = [{{ prefix = \"10.0.0.0/8\", ge = 4 }}]\n"), "prefix_list[0].entries[0].ge", "8..=32"),
        (format!("{GLOBAL}[[prefix_list]]\nname = \"p\"\nentries = [{{ prefix = \"10.0.0.0/8\", ge = 20, le = 16 }}]\n"), "prefix_list[0].entries[0].le", ""),
        (format!("{GLOBAL}[[prefix_list]]\nname = \"p\"\nentries = [{{ prefix = \"10.0.0.0/8\", action = \"allow\" }}]\n"), "prefix_list[0].entries[0].action", "allow"),
        (format!("{GLOBAL}[[prefix_list]]\nname = \"p\"\n[[prefix_list]]\nname = \"p\"\n"), "prefix_list[1].name", "duplicate"),
        (format!("{GLOBAL}[[policy]]\nname = \"all\"\n"), "policy[0].name", "reserved"),
        (format!("{GLOBAL}[[policy]]\nname = \"p\"\n[[policy]]\nname = \"p\"\n"), "policy[1].name", "duplicate"),
        (format!("{GLOBAL}[[policy]]\nname = \"p\"\ndefault = \"maybe\"\n"), "policy[0].default", ""),
        (format!("{GLOBAL}[[policy]]\nname = \"p\"\n[[policy.term]]\nname = \"t\"\naction = \"drop\"\n"), "policy[0].term[0].action", "drop"),
        (format!("{GLOBAL}[[policy]]\nname = \"p\"\n[[policy.term]]\nname = \"t\"\n[[policy.term]]\nname = \"t\"\n"), "policy[0].term[1].name", "duplicate"),
        (format!("{GLOBAL}[[policy]]\nname = \"p\"\n[[policy.term]]\nname = \"t\"\nmatch = {{ prefix_list = \"nope\" }}\n"), "policy[0].term[0].match.prefix_list", "unknown prefix list \"nope\""),
        (format!("{GLOBAL}[[policy]]\nname = \"p\"\n[[policy.term]]\nname = \"t\"\nmatch = {{ prefix = [\"10.0.0.0/8{{4,2}}\"] }}\n"), "policy[0].term[0].match.prefix[0]", "LO <= HI"),
        (format!("{GLOBAL}[[policy]]\nname = \"p\"\n[[policy.term]]\nname = \"t\"\nmatch = {{ as_path = \"(\" }}\n"), "policy[0].term[0].match.as_path", "regex"),
        (format!("{GLOBAL}[[policy]]\nname = \"p\"\n[[policy.term]]\nname = \"t\"\nmatch = {{ as_path_contains = 0 }}\n"), "policy[0].term[0].match.as_path_contains", ""),
        (format!("{GLOBAL}[[policy]]\nname = \"p\"\n[[policy.term]]\nname = \"t\"\nmatch = {{ origin_as = \"x\" }}\n"), "policy[0].term[0].match.origin_as", ""),
        (format!("{GLOBAL}[[policy]]\nname = \"p\"\n[[policy.term]]\nname = \"t\"\nmatch = {{ neighbor_as = [0] }}\n"), "policy[0].term[0].match.neighbor_as", ""),
        (format!("{GLOBAL}[[policy]]\nname = \"p\"\n[[policy.term]]\nname = \"t\"\nmatch = {{ community = \"1\" }}\n"), "policy[0].term[0].match.community", ""),
        (format!("{GLOBAL}[[policy]]\nname = \"p\"\n[[policy.term]]\nname = \"t\"\nmatch = {{ large_community = \"1:2:x\" }}\n"), "policy[0].term[0].match.large_community", ""),
        (format!("{GLOBAL}[[policy]]\nname = \"p\"\n[[policy.term]]\nname = \"t\"\nmatch = {{ ext_community = \"0x12\" }}\n"), "policy[0].term[0].match.ext_community", "16 hex"),
        (format!("{GLOBAL}[[policy]]\nname = \"p\"\n[[policy.term]]\nname = \"t\"\nmatch = {{ path_len_le = 1, path_len_ge = 3 }}\n"), "policy[0].term[0].match.path_len_ge", ""),
        (format!("{GLOBAL}[[policy]]\nname = \"p\"\n[[policy.term]]\nname = \"t\"\nmatch = {{ family = \"ipx\" }}\n"), "policy[0].term[0].match.family", "ipx"),
        (format!("{GLOBAL}[[policy]]\nname = \"p\"\n[[policy.term]]\nname = \"t\"\nset = {{ local_pref = -5 }}\n"), "policy[0].term[0].set.local_pref", ""),
        (format!("{GLOBAL}[[policy]]\nname = \"p\"\n[[policy.term]]\nname = \"t\"\nset = {{ med = 1.5 }}\n"), "policy[0].term[0].set.med", ""),
        (format!("{GLOBAL}[[policy]]\nname = \"p\"\n[[policy.term]]\nname = \"t\"\nset = {{ add_community = [\"x\"] }}\n"), "policy[0].term[0].set.add_community[0]", "ASN:VALUE"),
        (format!("{GLOBAL}[[policy]]\nname = \"p\"\n[[policy.term]]\nname = \"t\"\nset = {{ remove_community = 7 }}\n"), "policy[0].term[0].set.remove_community", ""),
        (format!("{GLOBAL}[[policy]]\nname = \"p\"\n[[policy.term]]\nname = \"t\"\nset = {{ add_large_community = \"1\" }}\n"), "policy[0].term[0].set.add_large_community", ""),
        (format!("{GLOBAL}[[policy]]\nname = \"p\"\n[[policy.term]]\nname = \"t\"\nset = {{ prepend = 0 }}\n"), "policy[0].term[0].set.prepend", "1..=32"),
        (format!("{GLOBAL}[[policy]]\nname = \"p\"\n[[policy.term]]\nname = \"t\"\nset = {{ prepend = {{ asn = 0, count = 1 }} }}\n"), "policy[0].term[0].set.prepend", ""),
        (format!("{GLOBAL}[[policy]]\nname = \"p\"\n[[policy.term]]\nname = \"t\"\nset = {{ next_hop_self = 1 }}\n"), "policy[0].term[0].set.next_hop_self", ""),
        (format!("{GLOBAL}[nsr]\nstore = \"http://x\"\ninstance = \"a\"\n"), "nsr.store", "scheme"),
        (format!("{GLOBAL}[nsr]\nstore = \"redis-sentinel://a:1\"\ninstance = \"a\"\n"), "nsr.store", "mastername"),
        (format!("{GLOBAL}[nsr]\nstore = \"redis://a\"\ninstance = \"\"\n"), "nsr.instance", ""),
        (format!("{GLOBAL}[nsr]\nstore = \"redis://a\"\ninstance = \"e\"\nmanage_address = true\n"), "nsr.address", "manage_address"),
        (format!("{GLOBAL}[nsr]\nstore = \"redis://a\"\ninstance = \"e\"\nenabled = 0\n"), "nsr.enabled", ""),
        (format!("{GLOBAL}[nsr]\nstore = \"redis://a\"\n"), "nsr", "instance"),
        (format!("{GLOBAL}[nsr]\nstore = \"redis://a\"\ninstance = \"e\"\nwait_timeout_ms = 0\n"), "nsr.wait_timeout_ms", "1..=400"),
        (format!("{GLOBAL}[nsr]\nstore = \"redis://a\"\ninstance = \"e\"\nwait_timeout_ms = 500\n"), "nsr.wait_timeout_ms", "500 ms"),
        (format!("{GLOBAL}[nsr]\nstore = \"redis://a\"\ninstance = \"e\"\ncompact_ratio = -1.0\n"), "nsr.compact_ratio", "0..=1000"),
        (format!("{GLOBAL}[nsr]\nstore = \"redis://a\"\ninstance = \"e\"\ncompact_ratio = nan\n"), "nsr.compact_ratio", "0..=1000"),
        (format!("{GLOBAL}[nsr]\nstore = \"redis://a\"\ninstance = \"e\"\nwait_replicas = -1\n"), "nsr.wait_replicas", ""),
        (format!("{GLOBAL}[nsr]\nstore = \"redis://a\"\ninstance = \"e\"\nstore_user = \"u\"\n"), "nsr.store_user", "store_password_file"),
        (format!("{GLOBAL}[nsr]\nstore = \"redis://a\"\ninstance = \"e\"\nstore_user = \"a b\"\nstore_password_file = \"/p\"\n"), "nsr.store_user", "[A-Za-z0-9_.@-]"),
        (format!("{GLOBAL}[nsr]\nstore = \"redis://x@a\"\ninstance = \"e\"\nstore_user = \"u\"\nstore_password_file = \"/p\"\n"), "nsr.store_user", "one place"),
        (format!("{GLOBAL}[nsr]\nstore = \"redis://:pw@a\"\ninstance = \"e\"\nstore_password_file = \"/p\"\n"), "nsr.store_password_file", "one place"),
        (format!("{GLOBAL}[nsr]\nstore = \"redis://a\"\ninstance = \"e\"\nstore_password_file = \"p\"\n"), "nsr.store_password_file", "absolute"),
        (format!("{GLOBAL}[nsr]\nstore = \"redis-sentinel://a/m\"\ninstance = \"e\"\nstore_password_file = \"/p\"\n"), "nsr.store_password_file", "sentinel"),
        (format!("{GLOBAL}[nsr]\nstore = \"redis://a\"\ninstance = \"e\"\nstore_pass = \"x\"\n"), "nsr.store_pass", "unknown field"),
    ];
    let mut failures = Vec::new();
    for (text, want_key, fragment) in &cases {
        let e = err(text);
        let msg = e.to_string();
        if e.key() != Some(*want_key) || !msg.starts_with(want_key) || !msg.contains(fragment) {
            failures.push(format!(
                "want key {want_key:?} and {fragment:?}, got {:?}: {msg}",
                e.key()
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

#[test]
fn unknown_fields_are_rejected_with_their_name() {
    for (text, field) in [
        (format!("{GLOBAL}bogus_global = 1\n"), "bogus_global"),
        (format!("{GLOBAL}[[neighbor]]\naddress = \"192.0.2.2\"\nremote_asn = 1\nremote_as = 1\n"), "remote_as"),
        (format!("{GLOBAL}[[policy]]\nname = \"p\"\n[[policy.term]]\nname = \"t\"\nmatch = {{ prefixx = \"x\" }}\n"), "prefixx"),
        (format!("{GLOBAL}[[policy]]\nname = \"p\"\n[[policy.term]]\nname = \"t\"\nset = {{ weight = 1 }}\n"), "weight"),
        (format!("{GLOBAL}[[prefix_list]]\nname = \"p\"\nentries = [{{ prefix = \"10.0.0.0/8\", gt = 1 }}]\n"), "gt"),
        (format!("{GLOBAL}[[instance]]\nname = \"a\"\nrd = \"1:1\"\n"), "rd"),
        (format!("{GLOBAL}[[network]]\nprefix = \"10.0.0.0/8\"\nweight = 1\n"), "weight"),
        (format!("{GLOBAL}[nsr]\nstore = \"redis://a\"\ninstance = \"a\"\nttl = 3\n"), "ttl"),
        (format!("{GLOBAL}[bgp]\nx = 1\n"), "bgp"),
    ] {
        let e = err(&text);
        let msg = e.to_string();
        assert!(msg.contains(&format!("unknown field `{field}`")), "{msg}");
    }
}

#[test]
fn toml_syntax_errors_keep_line_and_column() {
    let e = err("[global]\nasn = 65000\nrouter_id = \n");
    match &e {
        ConfigError::Syntax {
            line,
            column,
            message,
            ..
        } => {
            assert_eq!(*line, Some(3), "{message}");
            assert!(column.is_some());
            assert!(message.contains("line 3"), "{message}");
        }
        other => panic!("expected syntax error, got {other:?}"),
    }
    let e = err(&format!(
        "{GLOBAL}[[neighbor]]\naddress = \"192.0.2.2\"\nremote_asn = \"x\"\n"
    ));
    match &e {
        ConfigError::Syntax {
            key, line, message, ..
        } => {
            assert_eq!(key.as_deref(), Some("neighbor[0].remote_asn"));
            assert_eq!(*line, Some(6), "{message}");
        }
        other => panic!("expected syntax error, got {other:?}"),
    }
}

#[test]
fn load_reads_files_and_reports_io_errors() {
    let dir = std::env::temp_dir().join(format!("hf-config-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("holdfast.toml");
    std::fs::write(&path, SPEC_SNIPPET).unwrap();
    let (cfg, _) = load(&path).unwrap();
    assert_eq!(cfg.neighbors.len(), 1);
    let e = load(&dir.join("missing.toml")).unwrap_err();
    assert!(matches!(e, ConfigError::Io { .. }));
    assert!(e.to_string().contains("missing.toml"));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn prefix_match_syntax() {
    let p = |s: &str| s.parse::<wire::Prefix>().unwrap();
    let m: PrefixMatch = "10.0.0.0/8{16,24}".parse().unwrap();
    assert_eq!((m.min_len, m.max_len), (16, 24));
    assert!(m.matches(&p("10.1.0.0/16")));
    assert!(m.matches(&p("10.1.2.0/24")));
    assert!(!m.matches(&p("10.1.2.0/25")));
    assert!(!m.matches(&p("10.0.0.0/8")));
    assert!(!m.matches(&p("11.1.0.0/16")));
    assert!(!m.matches(&p("2001:db8::/32")));
    let exact: PrefixMatch = "10.0.0.0/8".parse().unwrap();
    assert!(exact.matches(&p("10.0.0.0/8")) && !exact.matches(&p("10.0.0.0/9")));
    let plus: PrefixMatch = "2001:db8::/32+".parse().unwrap();
    assert_eq!((plus.min_len, plus.max_len), (32, 128));
    assert!(plus.matches(&p("2001:db8:1::/48")));
    let minus: PrefixMatch = "10.1.0.0/16-".parse().unwrap();
    assert!(
        minus.matches(&p("10.0.0.0/8"))
            && minus.matches(&p("0.0.0.0/0"))
            && !minus.matches(&p("11.0.0.0/8"))
    );
    let spaced: PrefixMatch = "10.0.0.0/8{ 9 , 10 }".parse().unwrap();
    assert_eq!((spaced.min_len, spaced.max_len), (9, 10));
    assert_eq!(m.to_string(), "10.0.0.0/8{16,24}");
    for bad in [
        "10.0.0.0/8{24,16}",
        "10.0.0.0/8{8,33}",
        "10.0.0.0/8{8}",
        "10.0.0.1/8{8,9}",
        "10.0.0.0/8{8,9",
        "10.0.0.0",
    ] {
        assert!(bad.parse::<PrefixMatch>().is_err(), "{bad} accepted");
    }
}

mod wire {
    pub use holdfast_wire::{AsPath, AsSegment, Prefix};
}

#[test]
fn prefix_list_semantics() {
    let text = format!(
        "{GLOBAL}[[prefix_list]]\nname = \"pl\"\nentries = [\n\
         {{ prefix = \"10.0.0.0/8\", le = 32, action = \"deny\" }},\n\
         {{ prefix = \"192.0.2.0/24\" }},\n\
         {{ prefix = \"198.51.100.0/24\", ge = 25, le = 26 }},\n\
         {{ prefix = \"0.0.0.0/0\", le = 24 }},\n]\n"
    );
    let (cfg, _) = ok(&text);
    let pl = cfg.prefix_list("pl").unwrap();
    let p = |s: &str| s.parse::<wire::Prefix>().unwrap();
    assert!(!pl.permits(&p("10.1.0.0/16")));
    assert!(pl.permits(&p("192.0.2.0/24")));
    assert!(pl.permits(&p("198.51.100.128/25")));
    assert!(!pl.permits(&p("198.51.100.0/28")));
    assert!(pl.permits(&p("203.0.113.0/24")));
    assert!(!pl.permits(&p("203.0.113.0/25")));
    assert!(!pl.permits(&p("2001:db8::/32")));
}

#[test]
fn as_path_regex_and_communities() {
    let re = AsPathRegex::new("^65001 .*65010$").unwrap();
    let path = wire::AsPath {
        segments: vec![wire::AsSegment::Sequence(vec![65001, 3356, 65010])],
    };
    assert!(re.is_match(&path));
    assert!(!AsPathRegex::new("^3356").unwrap().is_match(&path));
    assert_eq!(
        "65000:100".parse::<CommunityValue>().unwrap().0,
        (65000 << 16) | 100
    );
    assert_eq!(CommunityValue((65000 << 16) | 100).to_string(), "65000:100");
    let rt: ExtCommunityValue = "rt:65000:1".parse().unwrap();
    assert_eq!(rt.0, [0x00, 0x02, 0xfd, 0xe8, 0, 0, 0, 1]);
    assert_eq!(rt.to_string(), "rt:65000:1");
    assert_eq!(
        "0x0002fde800000001".parse::<ExtCommunityValue>().unwrap(),
        rt
    );
    let ip: ExtCommunityValue = "soo:192.0.2.1:7".parse().unwrap();
    assert_eq!(ip.0, [0x01, 0x03, 192, 0, 2, 1, 0, 7]);
    assert_eq!(ip.to_string(), "soo:192.0.2.1:7");
    let as4: ExtCommunityValue = "rt:4200000000:7".parse().unwrap();
    assert_eq!(as4.0[0], 0x02);
    assert_eq!(as4.to_string(), "rt:4200000000:7");
}

#[test]
fn nsr_store_forms() {
    let r: NsrStore = "redis://192.0.2.10:6379".parse().unwrap();
    assert_eq!(
        r,
        NsrStore::Redis {
            tls: false,
            host: "192.0.2.10".into(),
            port: 6379,
            db: 0,
            username: None,
            password: None
        }
    );
    let r: NsrStore = "rediss://user:pw@[2001:db8::1]/2".parse().unwrap();
    assert_eq!(
        r,
        NsrStore::Redis {
            tls: true,
            host: "2001:db8::1".into(),
            port: 6379,
            db: 2,
            username: Some("user".into()),
            password: Some("pw".into())
        }
    );
    assert_eq!(r.to_string().parse::<NsrStore>().unwrap(), r);
    assert!(
        !format!("{r:?}").contains("pw"),
        "password leaked into Debug"
    );
    assert!("redis://:0".parse::<NsrStore>().is_err());
    assert!("redis://host:99999".parse::<NsrStore>().is_err());
    let (cfg, _) = ok(&format!(
        "{GLOBAL}[nsr]\nstore = \"redis://192.0.2.10:6379\"\ninstance = \"edge-1\"\n"
    ));
    let nsr = cfg.nsr.unwrap();
    assert!(nsr.enabled && !nsr.manage_address && nsr.address.is_none());
    // By default a write waits for no replica.
    assert_eq!((nsr.wait_replicas, nsr.wait_timeout_ms), (0, 250));
    assert_eq!(nsr.compact_ratio, 2.0);
    let (cfg, _) = ok(&format!(
        "{GLOBAL}[nsr]\nstore = \"redis://192.0.2.10:6379\"\ninstance = \"edge-1\"\nwait_replicas = 1\nwait_timeout_ms = 100\n"
    ));
    let nsr = cfg.nsr.unwrap();
    assert_eq!((nsr.wait_replicas, nsr.wait_timeout_ms), (1, 100));
}

#[test]
fn nsr_store_user_and_password_file() {
    use std::os::unix::fs::PermissionsExt as _;
    let dir = std::env::temp_dir().join(format!("hf-config-pw-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let pw = dir.join("u1.pass");
    std::fs::write(&pw, "s3cret-pw\n").unwrap();
    std::fs::set_permissions(&pw, std::fs::Permissions::from_mode(0o600)).unwrap();
    let text = format!(
        "{GLOBAL}[nsr]\nstore = \"redis://192.0.2.10:6379\"\ninstance = \"u1\"\nstore_user = \"hf-u1\"\nstore_password_file = \"{}\"\n",
        pw.display()
    );
    let (cfg, _) = ok(&text);
    let nsr = cfg.nsr.clone().unwrap();
    // The URL to connect with carries both; nothing else shows the password.
    let url = nsr.store_url().unwrap();
    assert_eq!(url.to_string(), "redis://hf-u1:s3cret-pw@192.0.2.10:6379/0");
    assert_eq!(nsr.store_desc(), "redis://hf-u1:***@192.0.2.10:6379/0");
    let written = toml::to_string(&cfg).unwrap();
    assert!(!written.contains("s3cret"), "{written}");
    assert!(written.contains("store_password_file"), "{written}");
    assert_eq!(ok(&written).0, cfg);
    assert!(!format!("{cfg:?}").contains("s3cret"));
    // Readable by others: refused, naming the key and not the content.
    std::fs::set_permissions(&pw, std::fs::Permissions::from_mode(0o604)).unwrap();
    let e = nsr.store_url().unwrap_err();
    assert_eq!(e.key(), Some("nsr.store_password_file"));
    assert!(e.to_string().contains("chmod"), "{e}");
    std::fs::set_permissions(&pw, std::fs::Permissions::from_mode(0o600)).unwrap();
    std::fs::write(&pw, "\n").unwrap();
    let e = nsr.store_url().unwrap_err();
    assert!(e.to_string().contains("one line"), "{e}");
    std::fs::remove_file(&pw).unwrap();
    let e = nsr.store_url().unwrap_err();
    assert_eq!(e.key(), Some("nsr.store_password_file"));
    // Without them, the URL as written.
    let (cfg, _) = ok(&format!(
        "{GLOBAL}[nsr]\nstore = \"redis://:pw@192.0.2.10\"\ninstance = \"u1\"\nstore_user = \"hf-u1\"\n"
    ));
    let nsr = cfg.nsr.unwrap();
    assert_eq!(
        nsr.store_url().unwrap().to_string(),
        "redis://hf-u1:pw@192.0.2.10:6379/0"
    );
    // A Redis Cluster's seeds take the user and the password the same way.
    std::fs::write(&pw, "s3cret-pw\n").unwrap();
    std::fs::set_permissions(&pw, std::fs::Permissions::from_mode(0o600)).unwrap();
    let (cfg, _) = ok(&format!(
        "{GLOBAL}[nsr]\nstore = \"redis+cluster://192.0.2.10:7000,192.0.2.11:7000\"\ninstance = \"u1\"\nstore_user = \"hf-u1\"\nstore_password_file = \"{}\"\n",
        pw.display()
    ));
    let nsr = cfg.nsr.unwrap();
    assert_eq!(
        nsr.store_url().unwrap().to_string(),
        "redis+cluster://hf-u1:s3cret-pw@192.0.2.10:7000,192.0.2.11:7000"
    );
    assert_eq!(
        nsr.store_desc(),
        "redis+cluster://hf-u1:***@192.0.2.10:7000,192.0.2.11:7000"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn network_count_expansion() {
    let (cfg, _) = ok(&format!(
        "{GLOBAL}[[network]]\nprefix = \"10.0.0.0/24\"\ncount = 10000\n"
    ));
    let prefixes: Vec<wire::Prefix> = cfg.networks[0].prefixes().collect();
    assert_eq!(prefixes.len(), 10000);
    assert_eq!(prefixes[0].to_string(), "10.0.0.0/24");
    assert_eq!(prefixes[1].to_string(), "10.0.1.0/24");
    assert_eq!(prefixes[256].to_string(), "10.1.0.0/24");
    assert_eq!(prefixes[9999].to_string(), "10.39.15.0/24");
    let uniq: std::collections::HashSet<_> = prefixes.iter().collect();
    assert_eq!(uniq.len(), 10000);
    let (cfg, _) = ok(&format!(
        "{GLOBAL}[[network]]\nprefix = \"2001:db8::/48\"\ncount = 3\n"
    ));
    let v6: Vec<String> = cfg.networks[0].prefixes().map(|p| p.to_string()).collect();
    assert_eq!(v6, ["2001:db8::/48", "2001:db8:1::/48", "2001:db8:2::/48"]);
    let (cfg, _) = ok(&format!(
        "{GLOBAL}[[network]]\nprefix = \"255.255.255.0/24\"\n"
    ));
    assert_eq!(cfg.networks[0].prefixes().count(), 1);
    let (cfg, _) = ok(&format!(
        "{GLOBAL}[[network]]\nprefix = \"255.255.254.0/24\"\ncount = 2\n"
    ));
    assert_eq!(
        cfg.networks[0].prefixes().last().unwrap().to_string(),
        "255.255.255.0/24"
    );
}

const DIFF_BASE: &str = r#"
[global]
asn = 65000
router_id = "192.0.2.1"

[[prefix_list]]
name = "pl"
entries = [{ prefix = "10.0.0.0/8", le = 24 }]

[[policy]]
name = "in"
[[policy.term]]
name = "t"
match = { prefix_list = "pl" }
action = "accept"

[[policy]]
name = "out"
default = "accept"

[[neighbor]]
address = "192.0.2.2"
remote_asn = 65001
import = "in"
export = "out"
description = "a"

[[neighbor]]
address = "192.0.2.3"
remote_asn = 65002
import = "all"
export = "out"

[[neighbor]]
address = "192.0.2.4"
remote_asn = 65000
"#;

fn diff_of(old: &str, new: &str) -> ConfigDiff {
    diff(&ok(old).0, &ok(new).0)
}

#[test]
fn diff_identical_is_empty() {
    let d = diff_of(DIFF_BASE, DIFF_BASE);
    assert!(d.is_empty(), "{d:?}");
}

#[test]
fn diff_policy_body_change_marks_users_only() {
    let new = DIFF_BASE.replace("action = \"accept\"\n", "action = \"reject\"\n");
    let d = diff_of(DIFF_BASE, &new);
    assert_eq!(d.policy_changed, vec![key(2)]);
    assert_eq!(d.policies_changed, vec!["in".to_string()]);
    assert!(d.reset_required.is_empty() && d.added.is_empty() && d.removed.is_empty());
    assert!(!d.global_changed && !d.networks_changed);
}

#[test]
fn diff_prefix_list_change_reaches_policy_users() {
    let new = DIFF_BASE.replace("le = 24", "le = 23");
    let d = diff_of(DIFF_BASE, &new);
    assert_eq!(d.policy_changed, vec![key(2)]);
    assert_eq!(d.policies_changed, vec!["in".to_string()]);
}

#[test]
fn diff_policy_name_change() {
    let new = DIFF_BASE.replace("import = \"all\"", "import = \"in\"");
    let d = diff_of(DIFF_BASE, &new);
    assert_eq!(d.policy_changed, vec![key(3)]);
    assert!(d.policies_changed.is_empty());
}

#[test]
fn diff_hold_time_change_requires_reset() {
    let new = DIFF_BASE.replace("description = \"a\"", "description = \"a\"\nhold_time = 30");
    let d = diff_of(DIFF_BASE, &new);
    assert_eq!(d.reset_required, vec![key(2)]);
    assert!(d.policy_changed.is_empty());
    let new = DIFF_BASE.replace(
        "router_id = \"192.0.2.1\"",
        "router_id = \"192.0.2.1\"\nhold_time = 60",
    );
    let d = diff_of(DIFF_BASE, &new);
    assert!(d.global_changed);
    assert_eq!(
        d.reset_required,
        vec![key(2), key(3), key(4)],
        "inherited hold time changed"
    );
}

#[test]
fn diff_session_settings_require_reset() {
    for extra in [
        "md5_password = \"k\"",
        "passive = true",
        "local_address = \"192.0.2.1\"",
        "vrf = \"lo\"",
        "ttl_security = true",
        "multihop = 3",
        "families = [\"ipv4-unicast\"]",
        "local_asn = 65010",
        "enabled = false",
    ] {
        let new = DIFF_BASE.replace(
            "description = \"a\"",
            &format!("description = \"a\"\n{extra}"),
        );
        let d = diff_of(DIFF_BASE, &new);
        assert_eq!(d.reset_required, vec![key(2)], "{extra}");
    }
    let new = DIFF_BASE.replace("remote_asn = 65001", "remote_asn = 65009");
    assert_eq!(diff_of(DIFF_BASE, &new).reset_required, vec![key(2)]);
}

#[test]
fn diff_graceful_restart_time_resets_only_gr_neighbours() {
    let new = DIFF_BASE
        .replace(
            "router_id = \"192.0.2.1\"",
            "router_id = \"192.0.2.1\"\ngraceful_restart_time = 120",
        )
        .replace(
            "description = \"a\"",
            "description = \"a\"\ngraceful_restart = false",
        );
    let d = diff_of(DIFF_BASE, &new);
    assert_eq!(d.reset_required, vec![key(3), key(4)]);
    assert_eq!(d.settings_changed, vec![key(2)]);
    assert!(d.global_changed);
}

#[test]
fn diff_description_change_needs_no_reset() {
    let new = DIFF_BASE.replace(
        "description = \"a\"",
        "description = \"b\"\nmax_prefix = 10\nkeepalive = 20",
    );
    let d = diff_of(DIFF_BASE, &new);
    assert!(
        d.reset_required.is_empty() && d.policy_changed.is_empty(),
        "{d:?}"
    );
    assert_eq!(d.settings_changed, vec![key(2)]);
}

#[test]
fn diff_added_removed_and_networks() {
    let new = DIFF_BASE.replace("address = \"192.0.2.4\"", "address = \"192.0.2.5\"")
        + "\n[[network]]\nprefix = \"10.0.0.0/24\"\n";
    let d = diff_of(DIFF_BASE, &new);
    assert_eq!(d.added, vec![key(5)]);
    assert_eq!(d.removed, vec![key(4)]);
    assert!(d.networks_changed);
    assert!(d.reset_required.is_empty());
}

#[test]
fn neighbor_key_display() {
    let k = NeighborKey {
        instance: "blue".into(),
        address: "2001:db8::1".parse::<IpAddr>().unwrap(),
    };
    assert_eq!(k.to_string(), "blue/2001:db8::1");
}

#[test]
fn docs_examples_parse() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/config.md");
    let doc = std::fs::read_to_string(&path).unwrap();
    let mut full_files = 0;
    for block in doc.split("```toml\n").skip(1) {
        let block = block.split("```").next().unwrap();
        if block.trim_start().starts_with("[global]") {
            full_files += 1;
            if let Err(e) = parse(block) {
                panic!("docs/config.md example rejected: {e}\n---\n{block}");
            }
            continue;
        }
        let alone = format!("{GLOBAL}{block}");
        let with_deps = format!("{GLOBAL}{DOC_FRAGMENT_DEPS}{block}");
        if let (Err(e), Err(_)) = (parse(&alone), parse(&with_deps)) {
            panic!("docs/config.md example rejected: {e}\n---\n{alone}");
        }
    }
    assert!(full_files >= 2);
}

/// Definitions that the fragments in docs/config.md refer to.
const DOC_FRAGMENT_DEPS: &str = "[[prefix_list]]\nname = \"bogons\"\n";

#[test]
fn mrt_sections_are_checked_by_key() {
    let n = "[[neighbor]]\naddress = \"192.0.2.2\"\nremote_asn = 65001\nimport = \"all\"\nexport = \"all\"\n";
    let (cfg, _) = ok(&format!(
        "{GLOBAL}{n}[[mrt]]\nkind = \"table\"\nfile = \"/var/lib/holdfast/rib.%s.mrt\"\ninterval_secs = 300\ntable = \"in\"\n\n[[mrt]]\nkind = \"updates\"\nfile = \"/var/lib/holdfast/updates.mrt\"\nneighbors = [\"192.0.2.2\"]\n"
    ));
    assert_eq!(cfg.mrt.len(), 2);
    assert_eq!(cfg.mrt[0].kind, MrtKind::Table);
    assert_eq!(cfg.mrt[0].table, Some(MrtTable::In));
    assert_eq!(cfg.mrt[1].instance, DEFAULT_INSTANCE);
    for (body, want_key, fragment) in [
        (
            "kind = \"table\"\nfile = \"rib.mrt\"\ninterval_secs = 1\n",
            "mrt[0].file",
            "absolute",
        ),
        (
            "kind = \"table\"\nfile = \"/r.mrt\"\n",
            "mrt[0].interval_secs",
            "at least 1",
        ),
        (
            "kind = \"table\"\nfile = \"/r.mrt\"\ninterval_secs = 1\nneighbors = [\"192.0.2.2\"]\n",
            "mrt[0].neighbors",
            "only for",
        ),
        (
            "kind = \"updates\"\nfile = \"/u.mrt\"\ntable = \"loc\"\n",
            "mrt[0].table",
            "only for",
        ),
        (
            "kind = \"updates\"\nfile = \"/u.mrt\"\nneighbors = [\"192.0.2.9\"]\n",
            "mrt[0].neighbors[0]",
            "no neighbour 192.0.2.9",
        ),
        (
            "kind = \"updates\"\nfile = \"/u.mrt\"\ninstance = \"blue\"\n",
            "mrt[0].instance",
            "no instance",
        ),
    ] {
        let e = err(&format!("{GLOBAL}{n}[[mrt]]\n{body}"));
        let msg = e.to_string();
        assert!(
            msg.starts_with(want_key) && msg.contains(fragment),
            "{body}: got {msg:?}, want {want_key} ... {fragment}"
        );
    }
    let e = err(&format!(
        "{GLOBAL}[[mrt]]\nkind = \"table\"\nfile = \"/r.mrt\"\ninterval_secs = 1\nperiod = 3\n"
    ));
    assert!(
        e.to_string().contains("period"),
        "unknown keys are refused: {e}"
    );
}

#[test]
fn bmp_sections_are_checked_by_key() {
    let (cfg, _) = ok(&format!(
        "{GLOBAL}[[bmp]]\naddress = \"192.0.2.9:1790\"\n\n[[bmp]]\naddress = \"[2001:db8::9]:1790\"\nstatistics_interval_secs = 5\nroute_monitoring = [\"pre-policy\", \"post-policy\", \"loc-rib\", \"adj-rib-out\"]\n"
    ));
    assert_eq!(cfg.bmp.len(), 2);
    assert_eq!(cfg.bmp[0].statistics_interval_secs, 60);
    assert_eq!(cfg.bmp[0].route_monitoring, vec![BmpTable::PrePolicy]);
    assert_eq!(cfg.bmp[1].route_monitoring.len(), 4);
    for (body, want_key, fragment) in [
        ("address = \"192.0.2.9:0\"\n", "bmp[0].address", "port"),
        (
            "address = \"192.0.2.9:1790\"\nroute_monitoring = []\n",
            "bmp[0].route_monitoring",
            "at least one",
        ),
        (
            "address = \"192.0.2.9:1790\"\nretry_secs = 0\n",
            "bmp[0].retry_secs",
            "between",
        ),
    ] {
        let msg = err(&format!("{GLOBAL}[[bmp]]\n{body}")).to_string();
        assert!(
            msg.starts_with(want_key) && msg.contains(fragment),
            "{body}: got {msg:?}, want {want_key} ... {fragment}"
        );
    }
    let msg = err(&format!(
        "{GLOBAL}[[bmp]]\naddress = \"192.0.2.9:1790\"\n[[bmp]]\naddress = \"192.0.2.9:1790\"\n"
    ))
    .to_string();
    assert!(msg.starts_with("bmp[1].address"), "{msg}");
    for body in [
        "address = \"192.0.2.9:1790\"\nroute_monitoring = [\"post\"]\n",
        "address = \"192.0.2.9:1790\"\nport = 3\n",
    ] {
        let msg = err(&format!("{GLOBAL}[[bmp]]\n{body}")).to_string();
        assert!(msg.contains("bmp"), "{body}: {msg}");
    }
}

#[test]
fn kernel_tables() {
    let (c, _) = ok(GLOBAL);
    assert!(c.instances[0].kernel.is_none(), "off without [kernel]");
    let (c, _) = ok(&format!(
        "{GLOBAL}[kernel]\ntable = 100\necmp = 4\n\n[[instance]]\nname = \"blue\"\nkernel = {{ table = 101, metric = 50 }}\n"
    ));
    let k = c.instances[0].kernel.as_ref().unwrap();
    assert_eq!((k.table, k.metric, k.ecmp, k.protocol), (100, 32, 4, 179));
    assert!(!k.persist);
    let b = c.instance("blue").unwrap().kernel.as_ref().unwrap();
    assert_eq!((b.table, b.metric, b.ecmp), (101, 50, 1));
    let (c, _) = ok(&format!("{GLOBAL}[kernel]\n"));
    assert_eq!(c.instances[0].kernel.as_ref().unwrap().table, 254);
    for (bad, key) in [
        ("[kernel]\ntable = 0\n", "kernel.table"),
        ("[kernel]\necmp = 0\n", "kernel.ecmp"),
        ("[kernel]\nprotocol = 2\n", "kernel.protocol"),
        ("[kernel]\ntabel = 3\n", "tabel"),
    ] {
        let e = err(&format!("{GLOBAL}{bad}")).to_string();
        assert!(e.contains(key), "{e}");
    }
    let e = err(&format!(
        "{GLOBAL}[kernel]\ntable = 7\n\n[[instance]]\nname = \"blue\"\nkernel = {{ table = 7 }}\n"
    ))
    .to_string();
    assert!(e.contains("already"), "{e}");
}

#[test]
fn diff_kernel_changes_per_instance() {
    let d = |old: &str, new: &str| diff_of(&format!("{GLOBAL}{old}"), &format!("{GLOBAL}{new}"));
    let blue = "[[instance]]\nname = \"blue\"\n";
    // Unchanged: nothing.
    let same = d("[kernel]\ntable = 100\n", "[kernel]\ntable = 100\n");
    assert!(same.is_empty(), "{same:?}");
    // Added and removed; a kernel change alone is not an instance change
    // (BMP and RPKI are not restarted for it).
    let added = d("", "[kernel]\ntable = 100\n");
    assert!(!added.instances_changed);
    assert_eq!(added.kernel_changed.len(), 1);
    let k = &added.kernel_changed[0];
    assert_eq!(k.instance, "default");
    assert_eq!(k.action(), Some(KernelAction::Start));
    assert!(k
        .describe()
        .starts_with("added (table 100 metric 32 ecmp 1 protocol 179)"));
    let removed = d("[kernel]\ntable = 100\n", "");
    assert_eq!(
        removed.kernel_changed[0].action(),
        Some(KernelAction::Stop { withdraw: true })
    );
    let kept = d("[kernel]\ntable = 100\npersist = true\n", "");
    assert_eq!(
        kept.kernel_changed[0].action(),
        Some(KernelAction::Stop { withdraw: false })
    );
    assert!(kept.kernel_changed[0]
        .describe()
        .contains("left in the table"));
    // In place: metric, table and protocol move the routes, ecmp rewrites.
    for (new, moved, rewrite) in [
        ("[kernel]\ntable = 100\nmetric = 20\n", true, false),
        ("[kernel]\ntable = 101\n", true, false),
        ("[kernel]\ntable = 100\nprotocol = 201\n", true, false),
        ("[kernel]\ntable = 100\necmp = 2\n", false, true),
        ("[kernel]\ntable = 100\necmp = 2\nmetric = 7\n", true, true),
        ("[kernel]\ntable = 100\npersist = true\n", false, false),
    ] {
        let c = d("[kernel]\ntable = 100\n", new);
        assert_eq!(
            c.kernel_changed[0].action(),
            Some(KernelAction::Update { moved, rewrite }),
            "{new}"
        );
    }
    let m = d(
        "[kernel]\ntable = 100\n",
        "[kernel]\ntable = 100\nmetric = 20\n",
    );
    assert_eq!(
        m.kernel_changed[0].describe(),
        "metric 32 -> 20: routes written under the new key, then removed under the old"
    );
    // startup_hold alone: nothing to write, said so.
    let h = d(
        "[kernel]\nstartup_hold = 60\n",
        "[kernel]\nstartup_hold = 5\n",
    );
    let k = &h.kernel_changed[0];
    assert_eq!(
        k.action(),
        Some(KernelAction::Update {
            moved: false,
            rewrite: false
        })
    );
    assert!(k.startup_hold_deferred());
    assert_eq!(
        k.describe(),
        "startup_hold 60 -> 5: startup_hold applies at the next start only"
    );
    // `kernel = {...}` in an [[instance]], and an instance added with one.
    let i = d(
        &format!("{blue}kernel = {{ table = 7 }}\n"),
        &format!("{blue}kernel = {{ table = 7, ecmp = 4 }}\n"),
    );
    assert!(!i.instances_changed);
    assert_eq!(i.kernel_changed[0].instance, "blue");
    let new_inst = d("", &format!("{blue}kernel = {{ table = 7 }}\n"));
    assert!(new_inst.instances_changed);
    assert_eq!(new_inst.kernel_changed[0].instance, "blue");
    assert_eq!(
        new_inst.kernel_changed[0].action(),
        Some(KernelAction::Start)
    );
    // The default instance's `[kernel]` written as `kernel = {...}` in its
    // [[instance]] is the same thing.
    let same = d(
        "[kernel]\ntable = 9\n",
        "[[instance]]\nname = \"default\"\nkernel = { table = 9 }\n",
    );
    assert!(same.kernel_changed.is_empty(), "{same:?}");
}

#[test]
fn add_ext_community_is_refused_by_key_and_check_sums_a_file_up() {
    let policy = "[[policy]]\nname = \"p\"\n[[policy.term]]\nname = \"t\"\naction = \"accept\"\n[policy.term.set]\nadd_ext_community = \"rt:65000:1\"\n";
    let e = err(&format!("{GLOBAL}{policy}"));
    assert_eq!(
        e.key(),
        Some("policy[0].term[0].set.add_ext_community"),
        "{e}"
    );

    let dir = std::env::temp_dir().join(format!("hf-config-check-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("c.toml");
    std::fs::write(&file, SPEC_SNIPPET).unwrap();
    let c = check(&file).expect("a good file passes");
    assert_eq!((c.instances, c.neighbors, c.policies), (1, 1, 0));
    assert!(!c.nsr);
    let _ = std::fs::remove_dir_all(&dir);
}
