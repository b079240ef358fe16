//! Non-stop routing in the lab: the standard NSR topology ([`NsrTopo`]) and a holdfastd
//! configuration for it ([`nsr_config`]). Every takeover in the lab goes through
//! its control plane ([`crate::plane`]: the controllers and the host agents).
//!
//! ```text
//!                         bridge `lan` (198.18.0.0/24, fd00::/64)
//!   [ peer ] .1 ----+
//!   [ redis ] .2 ---+---- switch
//!   [ a ] .3 -------+      service address .10 / fd00::10: on `a` at first,
//!   [ b ] .4 -------+      moved to the host that takes over
//!   [ feed ] .5 ----+      route feeds (raw test peers)
//! ```

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use crate::error::{LabError, Result};
use crate::lab::{BridgeId, HostId, IfAddr, Lab};

/// IPv4 prefix length of the NSR bridge subnet (198.18.0.0/24: `Lab::link_auto` uses
/// 198.18.1-255.0/24 and 198.19.0.0/16, never 198.18.0.0/24).
pub const NSR_V4_LEN: u8 = 24;
/// IPv6 prefix length of the NSR bridge subnet (fd00::/64: `link_auto` uses
/// fd00:0:0:n::/64 with n ≥ 1).
pub const NSR_V6_LEN: u8 = 64;
/// Local AS of [`nsr_config`] (override with `asn = ...` in its `extra`).
pub const NSR_LOCAL_AS: u32 = 65000;

fn v4(last: u8) -> Ipv4Addr {
    Ipv4Addr::new(198, 18, 0, last)
}

fn v6(last: u16) -> Ipv6Addr {
    Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, last)
}

/// One host of the NSR topology.
#[derive(Debug, Clone)]
pub struct NsrHost {
    /// The lab host.
    pub id: HostId,
    /// Its interface on the bridge.
    pub ifname: String,
    /// Its own IPv4 address on the bridge.
    pub v4: Ipv4Addr,
    /// Its own IPv6 address on the bridge.
    pub v6: Ipv6Addr,
}

/// The NSR topology: hosts `peer` (.1), `redis` (.2), `a` (.3), `b` (.4) and `feed` (.5) on one
/// bridge `lan` (198.18.0.0/24, fd00::/64); the service address .10 / fd00::10 is on
/// `a` after [`NsrTopo::build`].
#[derive(Debug, Clone)]
pub struct NsrTopo {
    /// The bridge.
    pub bridge: BridgeId,
    /// Where the real BGP peer(s) run.
    pub peer: NsrHost,
    /// Where the Redis store runs.
    pub redis: NsrHost,
    /// First holdfastd host (holds the service address at first).
    pub a: NsrHost,
    /// Second holdfastd host.
    pub b: NsrHost,
    /// A host for test peers (route feeds) on the same bridge.
    pub feed: NsrHost,
    /// IPv4 service address (the speaker's router id and session address).
    pub service_v4: Ipv4Addr,
    /// IPv6 service address.
    pub service_v6: Ipv6Addr,
}

impl NsrTopo {
    /// Creates the hosts and the bridge, and puts the service addresses on `a`.
    pub fn build(lab: &mut Lab) -> Result<NsrTopo> {
        let names = [("peer", 1u8), ("redis", 2), ("a", 3), ("b", 4), ("feed", 5)];
        let mut members = Vec::new();
        for (name, last) in names {
            let id = lab.host(name)?;
            members.push((
                id,
                vec![
                    IfAddr::new(v4(last), NSR_V4_LEN),
                    IfAddr::new(v6(u16::from(last)), NSR_V6_LEN),
                ],
            ));
        }
        let bridge = lab.bridge("lan", &members)?;
        let info = lab.bridge_info(bridge).clone();
        let host = |i: usize| {
            let p = &info.ports[i];
            NsrHost {
                id: p.host,
                ifname: p.host_if.clone(),
                v4: v4(names[i].1),
                v6: v6(u16::from(names[i].1)),
            }
        };
        let topo = NsrTopo {
            bridge,
            peer: host(0),
            redis: host(1),
            a: host(2),
            b: host(3),
            feed: host(4),
            service_v4: v4(10),
            service_v6: v6(0x10),
        };
        topo.add_service(lab, topo.a.id)?;
        Ok(topo)
    }

    /// The topology [`NsrTopo::build`] makes, without a lab: its addresses, host ids
    /// 0-4 and bridge 0, with placeholder interface names (`if0`..`if4`). For
    /// generating configurations (and testing them) where no lab runs.
    pub fn unbuilt() -> NsrTopo {
        let h = |i: usize, last: u8| NsrHost {
            id: HostId(i),
            ifname: format!("if{i}"),
            v4: v4(last),
            v6: v6(u16::from(last)),
        };
        NsrTopo {
            bridge: BridgeId(0),
            peer: h(0, 1),
            redis: h(1, 2),
            a: h(2, 3),
            b: h(3, 4),
            feed: h(4, 5),
            service_v4: v4(10),
            service_v6: v6(0x10),
        }
    }

    /// Adds the BFD relay host (`relay`, .6 / ::6) to the bridge: the
    /// agent host of TENSOR §3.3.2 on the peers' L2 segment, where
    /// `holdfast-bfd-relay` runs.
    pub fn add_relay_host(&self, lab: &mut Lab) -> Result<NsrHost> {
        self.add_host(lab, "relay", 6)
    }

    /// Adds a host `name` to the bridge with the addresses `.n` / `::n`
    /// (the control plane's hosts, say).
    pub fn add_host(&self, lab: &mut Lab, name: &str, n: u8) -> Result<NsrHost> {
        let id = lab.host(name)?;
        lab.bridge_attach(
            self.bridge,
            id,
            &[
                IfAddr::new(v4(n), NSR_V4_LEN),
                IfAddr::new(v6(u16::from(n)), NSR_V6_LEN),
            ],
        )?;
        let ifname = lab
            .bridge_info(self.bridge)
            .ports
            .last()
            .map(|p| p.host_if.clone())
            .unwrap_or_default();
        Ok(NsrHost {
            id,
            ifname,
            v4: v4(n),
            v6: v6(u16::from(n)),
        })
    }

    /// The service addresses (IPv4, IPv6).
    pub fn service_addrs(&self) -> [IpAddr; 2] {
        [self.service_v4.into(), self.service_v6.into()]
    }

    /// The service address of the family of `addr`.
    pub fn service_for(&self, addr: IpAddr) -> IpAddr {
        if addr.is_ipv4() {
            self.service_v4.into()
        } else {
            self.service_v6.into()
        }
    }

    /// The topology host `id`.
    pub fn host(&self, id: HostId) -> Result<&NsrHost> {
        [&self.peer, &self.redis, &self.a, &self.b]
            .into_iter()
            .find(|h| h.id == id)
            .ok_or_else(|| LabError::Invalid(format!("{id:?} is not in the NSR topology")))
    }

    /// The bridge interface of host `id`.
    pub fn ifname(&self, id: HostId) -> Result<&str> {
        Ok(&self.host(id)?.ifname)
    }

    /// The other speaker host (`a` ↔ `b`).
    pub fn other(&self, id: HostId) -> HostId {
        if id == self.a.id {
            self.b.id
        } else {
            self.a.id
        }
    }

    /// Which of the service addresses (v4, v6) `host` has right now (`ip addr`).
    pub fn service_addrs_on(&self, lab: &Lab, host: HostId) -> Result<(bool, bool)> {
        let out = lab.exec_ok(
            host,
            &["ip", "-o", "addr", "show", "dev", self.ifname(host)?],
        )?;
        let has = |a: IpAddr| {
            let needle = format!(" {a}/");
            out.lines().any(|l| l.contains(&needle))
        };
        Ok((has(self.service_v4.into()), has(self.service_v6.into())))
    }

    /// The speaker host (`a` or `b`) holding both service addresses now; an error if
    /// none or both do, or if an address is split between them.
    pub fn service_host(&self, lab: &Lab) -> Result<HostId> {
        let on_a = self.service_addrs_on(lab, self.a.id)?;
        let on_b = self.service_addrs_on(lab, self.b.id)?;
        match (on_a, on_b) {
            ((true, true), (false, false)) => Ok(self.a.id),
            ((false, false), (true, true)) => Ok(self.b.id),
            _ => Err(LabError::Invalid(format!(
                "service addresses not on exactly one host: a has (v4, v6) = {on_a:?}, b has {on_b:?}"
            ))),
        }
    }

    /// MAC address of `host`'s bridge interface.
    pub fn mac(&self, lab: &Lab, host: HostId) -> Result<String> {
        let out = lab.exec_ok(
            host,
            &["ip", "-o", "link", "show", "dev", self.ifname(host)?],
        )?;
        out.split_whitespace()
            .skip_while(|w| *w != "link/ether")
            .nth(1)
            .map(str::to_ascii_lowercase)
            .ok_or_else(|| crate::error::parse_err("ip link", out.clone()))
    }

    /// The link-layer address `on`'s neighbour table (`ip neigh`) has for `addr`, if any
    /// entry with one exists (FAILED/INCOMPLETE entries have none).
    pub fn neighbour_mac(&self, lab: &Lab, on: HostId, addr: IpAddr) -> Result<Option<String>> {
        let a = addr.to_string();
        let out = lab.exec_ok(
            on,
            &["ip", "neigh", "show", "to", &a, "dev", self.ifname(on)?],
        )?;
        Ok(out.lines().find_map(|l| {
            l.split_whitespace()
                .skip_while(|w| *w != "lladdr")
                .nth(1)
                .map(str::to_ascii_lowercase)
        }))
    }

    /// Adds (`add`) the service addresses missing on `host`, or deletes
    /// them, over rtnetlink in its namespace (the IPv6 one is added without
    /// duplicate address detection, so that it can be announced at once).
    /// No `ip` process: a takeover's address move is on the critical path
    /// of every session's resume.
    fn set_service(&self, lab: &Lab, host: HostId, add: bool) -> Result<()> {
        let ifname = self.ifname(host)?.to_string();
        let netns = lab.netns(host).to_string();
        let context = format!(
            "{} the service addresses on {ifname} in {netns}",
            if add { "adding" } else { "deleting" }
        );
        let addrs = [
            (IpAddr::from(self.service_v4), NSR_V4_LEN),
            (IpAddr::from(self.service_v6), NSR_V6_LEN),
        ];
        holdfast_linux::netns::in_netns(&netns, move || -> std::io::Result<()> {
            let index = holdfast_linux::device::ifindex(&ifname)?;
            for (addr, len) in addrs {
                // An address already there is left alone: replacing it
                // would notify every netlink listener (a kernel FIB
                // re-reads its addresses on that).
                if add && holdfast_linux::address_is_local(addr) {
                    continue;
                }
                holdfast_linux::rtnl::set_address(add, index, addr, len)?;
            }
            Ok(())
        })
        .and_then(|r| r)
        .map_err(|source| LabError::Io { context, source })
    }

    /// Adds the service addresses on `host` (no announcement).
    pub fn add_service(&self, lab: &Lab, host: HostId) -> Result<()> {
        self.set_service(lab, host, true)
    }

    /// Deletes the service addresses present on `host`.
    pub fn del_service(&self, lab: &Lab, host: HostId) -> Result<()> {
        self.set_service(lab, host, false)
    }
}

/// A holdfastd configuration for the NSR topology: AS [`NSR_LOCAL_AS`], router id and
/// every session's local address = the service address (of the session's family),
/// listening on the wildcard addresses (so the same file works on `a` and `b`),
/// `connect_retry = 1`, import/export `all`, and
/// `[nsr] store = redis_url, instance, address = <IPv4 service address>`.
///
/// `extra` is TOML added to it: key lines before any table header, or under a
/// `[global]` / `[nsr]` header, are merged into those tables (replacing a generated key
/// of the same name, e.g. `asn = 65010` or `[nsr]\nmanage_address = true`); other
/// tables (`[[network]]`, `[[policy]]`, more `[[neighbor]]`s) are appended.
pub fn nsr_config(
    topo: &NsrTopo,
    redis_url: &str,
    instance: &str,
    neighbors: &[(IpAddr, u32)],
    extra: &str,
) -> String {
    let mut global = vec![
        format!("asn = {NSR_LOCAL_AS}"),
        format!("router_id = \"{}\"", topo.service_v4),
        "listen = [\"0.0.0.0:179\", \"[::]:179\"]".to_string(),
        "connect_retry = 1".to_string(),
    ];
    let mut nsr = vec![
        format!("store = \"{redis_url}\""),
        format!("instance = \"{instance}\""),
        format!("address = \"{}\"", topo.service_v4),
    ];
    let mut rest = String::new();
    // Which table the current extra line belongs to: 0 global, 1 nsr, 2 other.
    let mut section = 0;
    for line in extra.lines() {
        let t = line.trim();
        if t.starts_with('[') {
            section = match t {
                "[global]" => 0,
                "[nsr]" => 1,
                _ => 2,
            };
            if section == 2 {
                rest.push_str(line);
                rest.push('\n');
            }
            continue;
        }
        match section {
            0 | 1 => {
                let table = if section == 0 { &mut global } else { &mut nsr };
                if let Some(k) = toml_key(t) {
                    table.retain(|l| toml_key(l) != Some(k));
                }
                if !t.is_empty() {
                    table.push(t.to_string());
                }
            }
            _ => {
                rest.push_str(line);
                rest.push('\n');
            }
        }
    }
    let mut s = String::from("[global]\n");
    for l in &global {
        s.push_str(l);
        s.push('\n');
    }
    s.push_str("\n[nsr]\n");
    for l in &nsr {
        s.push_str(l);
        s.push('\n');
    }
    for (addr, remote_as) in neighbors {
        s.push_str(&format!(
            "\n[[neighbor]]\naddress = \"{addr}\"\nremote_asn = {remote_as}\nlocal_address = \"{}\"\nimport = \"all\"\nexport = \"all\"\n",
            topo.service_for(*addr)
        ));
    }
    if !rest.is_empty() {
        s.push('\n');
        s.push_str(&rest);
    }
    s
}

/// The key of a `key = value` line.
fn toml_key(line: &str) -> Option<&str> {
    let (k, _) = line.split_once('=')?;
    let k = k.trim();
    (!k.is_empty() && !k.starts_with('#')).then_some(k)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn topo() -> NsrTopo {
        NsrTopo::unbuilt()
    }

    #[test]
    fn config_has_service_address_and_merges_extra() {
        let t = topo();
        let c = nsr_config(
            &t,
            "redis://198.18.0.2:6379",
            "edge-1",
            &[
                ("198.18.0.1".parse().unwrap(), 65001),
                ("fd00::1".parse().unwrap(), 65001),
            ],
            "hold_time = 9\nasn = 65010\n[nsr]\nmanage_address = true\n[[network]]\nprefix = \"10.0.0.0/24\"\n",
        );
        assert!(
            c.starts_with("[global]\nrouter_id = \"198.18.0.10\"\n"),
            "{c}"
        );
        assert!(
            c.contains("asn = 65010\n") && !c.contains("asn = 65000"),
            "{c}"
        );
        assert!(c.contains("hold_time = 9\n"), "{c}");
        assert!(
            c.contains("[nsr]\nstore = \"redis://198.18.0.2:6379\"\ninstance = \"edge-1\"\naddress = \"198.18.0.10\"\nmanage_address = true\n"),
            "{c}"
        );
        assert!(
            c.contains("address = \"fd00::1\"\nremote_asn = 65001\nlocal_address = \"fd00::10\"\n"),
            "{c}"
        );
        assert!(
            c.ends_with("[[network]]\nprefix = \"10.0.0.0/24\"\n"),
            "{c}"
        );
    }

    #[test]
    fn addresses_do_not_collide_with_link_auto() {
        let t = topo();
        assert_eq!(t.service_v4.octets()[..3], [198, 18, 0]);
        assert_eq!(t.service_v6.segments()[..4], [0xfd00, 0, 0, 0]);
        assert_eq!(t.other(t.a.id), t.b.id);
        assert_eq!(t.other(t.b.id), t.a.id);
    }
}
