//! Shared helpers of the robustness tests (rfc7606, graceful_restart,
//! hold_time_load, collision_and_reset, instances_vrf, max_prefix): a lab with
//! holdfastd in host `hf` and raw tester peers in their own hosts, one veth
//! link each (link n: holdfastd 198.18.n.1, tester 198.18.n.2).
#![allow(dead_code)]

use holdfast_lab::{Holdfastd, HostId, Lab};
use holdfast_tester::{Config, Peer};
use holdfast_wire::{AsPath, AsSegment, Origin, PathAttrs, Prefix, Prefix4};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;

pub const HF_AS: u32 = 65000;

/// One tester host linked to holdfastd's host.
#[derive(Clone)]
pub struct Side {
    pub host: HostId,
    pub netns: String,
    /// holdfastd's address on this link.
    pub hf_ip: IpAddr,
    /// The tester's address on this link.
    pub ip: IpAddr,
    /// The link's interface name in holdfastd's host.
    pub if_hf: String,
}

pub struct Setup {
    pub lab: Lab,
    pub hf: HostId,
    pub sides: Vec<Side>,
}

/// Creates host `hf` and `n` tester hosts `t1..tn`, each linked to `hf`.
pub fn setup(name: &str, n: usize) -> Setup {
    let mut lab = Lab::new(name).expect("lab");
    let hf = lab.host("hf").expect("host hf");
    let mut sides = Vec::new();
    for i in 1..=n {
        let h = lab.host(&format!("t{i}")).expect("tester host");
        let link = lab.link_auto(hf, h).expect("link");
        let info = lab.link_info(link).clone();
        let v4 = info.v4.expect("v4");
        sides.push(Side {
            host: h,
            netns: lab.netns(h).to_string(),
            hf_ip: v4.a.into(),
            ip: v4.b.into(),
            if_hf: info.if_a.clone(),
        });
    }
    Setup { lab, hf, sides }
}

/// A `[[neighbor]]` block for a passive eBGP tester neighbour.
pub fn neighbor_block(side: &Side, asn: u32, extra: &str) -> String {
    format!(
        "[[neighbor]]\naddress = \"{}\"\nremote_asn = {asn}\nimport = \"all\"\nexport = \"all\"\npassive = true\n{extra}\n",
        side.ip
    )
}

pub fn global_block(extra: &str) -> String {
    format!(
        "[global]\nasn = {HF_AS}\nrouter_id = \"192.0.2.1\"\nlisten = \"0.0.0.0:179\"\n{extra}\n"
    )
}

/// IPv4-unicast-only tester settings, BGP id 192.0.2.(100+id).
pub fn tester_cfg(asn: u32, id: u8) -> Config {
    let mut c = Config::new(asn, Ipv4Addr::new(192, 0, 2, 100 + id));
    c.families = vec![holdfast_wire::Family::IPV4_UNICAST];
    c
}

/// Connects a tester from `side`'s namespace to holdfastd, retrying until
/// holdfastd accepts it (its listener may not be ready yet).
pub fn connect(side: &Side, cfg: &Config, timeout: Duration) -> Peer {
    let deadline = std::time::Instant::now() + timeout;
    let mut last = String::new();
    while std::time::Instant::now() < deadline {
        let (ns, hf, ip, c) = (side.netns.clone(), side.hf_ip, side.ip, cfg.clone());
        match holdfast_tester::netns::in_netns(&ns, move || {
            Peer::connect(
                SocketAddr::new(hf, 179),
                Some(ip),
                &c,
                Duration::from_secs(5),
            )
        }) {
            Ok(Ok(p)) => return p,
            Ok(Err(e)) => last = e.to_string(),
            Err(e) => last = e.to_string(),
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    panic!(
        "tester {} could not establish with holdfastd {}: {last}",
        side.ip, side.hf_ip
    );
}

pub fn p4(s: &str) -> Prefix {
    s.parse().expect("prefix")
}

/// `n` consecutive /24s from `first` (a.b.c.0).
pub fn prefixes(first: Ipv4Addr, n: u32) -> Vec<Prefix> {
    let base = u32::from(first);
    (0..n)
        .map(|i| Prefix::V4(Prefix4::new(Ipv4Addr::from(base + (i << 8)), 24).expect("p")))
        .collect()
}

pub fn attrs(asn: u32, next_hop: IpAddr) -> PathAttrs {
    let nh = match next_hop {
        IpAddr::V4(a) => a,
        _ => panic!("v4 next hop"),
    };
    PathAttrs {
        origin: Some(Origin::Igp),
        as_path: AsPath {
            segments: vec![AsSegment::Sequence(vec![asn])],
        },
        next_hop: Some(nh),
        ..PathAttrs::default()
    }
}

/// Prefixes holdfastd has in a table (for `peer`, if given).
pub fn rib_prefixes(
    d: &Holdfastd,
    table: holdfast_api::RibTable,
    peer: Option<IpAddr>,
) -> Vec<String> {
    d.rib(table, peer)
        .expect("rib")
        .into_iter()
        .map(|e| e.prefix)
        .collect()
}

/// Starts holdfastd in host `hf`.
pub fn start_holdfastd(s: &mut Setup, config: &str) -> Holdfastd {
    let hf = s.hf;
    match Holdfastd::start(&mut s.lab, hf, "holdfastd", config) {
        Ok(d) => d,
        Err(e) => panic!("holdfastd did not start: {e}\nconfig:\n{config}"),
    }
}
