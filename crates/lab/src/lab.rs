//! The [`Lab`]: namespaces, links, bridges, processes, captures and teardown.

use std::fs::{DirBuilder, File};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::os::unix::fs::DirBuilderExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::cmd::{
    argv, check_output, require_tool, run_ok, run_timeout, send_signal, wait_child, Signal,
    DEFAULT_CMD_TIMEOUT,
};
use crate::error::{io_ctx, LabError, Result};
use crate::stale;

mod kept;
use kept::adopted_alive;
pub use kept::{KeptLab, KeptProc};

/// Maximum Linux interface name length.
const IFNAMSIZ_MAX: usize = 15;
/// How long a stopped process gets between SIGTERM and SIGKILL.
const TERM_GRACE: Duration = Duration::from_secs(3);
/// Pause between stopping daemons and stopping captures.
const CAPTURE_DRAIN: Duration = Duration::from_millis(200);

/// Handle to a host (network namespace) of a [`Lab`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct HostId(pub(crate) usize);

/// Handle to a veth link of a [`Lab`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct LinkId(pub(crate) usize);

/// Handle to a bridge (switch namespace) of a [`Lab`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct BridgeId(pub(crate) usize);

/// Handle to a process started by a [`Lab`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ProcId(pub(crate) usize);

impl HostId {
    /// Its index among the lab's hosts (the order of [`Lab::hosts`] and of
    /// [`KeptLab::hosts`]).
    pub fn index(self) -> usize {
        self.0
    }
}

impl ProcId {
    /// Its index among the lab's processes (for [`Lab::proc_id`]).
    pub fn index(self) -> usize {
        self.0
    }
}

/// The two ends' addresses of a point-to-point subnet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct AddrPair<A> {
    /// Address of the `a` end.
    pub a: A,
    /// Address of the `b` end.
    pub b: A,
    /// Prefix length of the shared subnet.
    pub prefix_len: u8,
}

/// One interface address with its prefix length.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct IfAddr {
    /// The address.
    pub addr: IpAddr,
    /// Prefix length.
    pub prefix_len: u8,
}

impl IfAddr {
    /// Convenience constructor.
    pub fn new(addr: impl Into<IpAddr>, prefix_len: u8) -> Self {
        IfAddr {
            addr: addr.into(),
            prefix_len,
        }
    }
}

/// A host of the lab.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct HostInfo {
    /// Name given by the test.
    pub name: String,
    /// Network namespace name (`hf<hex>-<name>`).
    pub netns: String,
}

/// A veth link between two hosts.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct LinkInfo {
    /// First host.
    pub a: HostId,
    /// Second host.
    pub b: HostId,
    /// Interface name inside `a`.
    pub if_a: String,
    /// Interface name inside `b`.
    pub if_b: String,
    /// IPv4 addressing, if any.
    pub v4: Option<AddrPair<Ipv4Addr>>,
    /// IPv6 addressing, if any.
    pub v6: Option<AddrPair<Ipv6Addr>>,
}

/// One host attached to a bridge.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct BridgePort {
    /// The attached host.
    pub host: HostId,
    /// Interface name inside the host.
    pub host_if: String,
    /// Interface name inside the switch namespace.
    pub switch_if: String,
    /// Addresses configured on `host_if`.
    pub addrs: Vec<IfAddr>,
}

/// A switch: its own namespace holding a Linux bridge and one veth per member.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct BridgeInfo {
    /// Name given by the test.
    pub name: String,
    /// Switch namespace name.
    pub netns: String,
    /// Bridge device name inside the switch namespace.
    pub bridge_if: String,
    /// Attached hosts.
    pub ports: Vec<BridgePort>,
}

struct ProcEntry {
    name: String,
    /// `None` for a process adopted from a [`KeptLab`] (started by another process).
    child: Option<Child>,
    pid: u32,
    /// Start time (`/proc/PID/stat` field 22), so an adopted pid that was reused by an
    /// unrelated process is never signalled.
    start_time: Option<u64>,
    stdout: PathBuf,
    stderr: PathBuf,
    capture: bool,
    exit: Option<ExitStatus>,
}

/// tcpdump's capture buffer (`-B`, KiB); see `capture_iface`.
const CAPTURE_BUFFER_KIB: &str = "16384";

/// A set of network namespaces, links and processes that is torn down as a unit.
///
/// Dropping a `Lab` tears it down; when the drop happens during a panic (or after
/// [`Lab::fail`]) the work directory with logs and pcaps is kept and its path printed.
pub struct Lab {
    run_id: String,
    test_name: String,
    work_dir: PathBuf,
    hosts: Vec<HostInfo>,
    links: Vec<LinkInfo>,
    bridges: Vec<BridgeInfo>,
    procs: Vec<ProcEntry>,
    captured: Vec<(String, String)>,
    pcaps: Vec<PathBuf>,
    pcap_enabled: bool,
    failed: bool,
    torn_down: bool,
    /// Kept ([`Lab::keep`]) or adopted ([`Lab::adopt`]): dropping it tears nothing down.
    kept: bool,
}

/// Start time of `pid` in clock ticks since boot (`/proc/PID/stat` field 22).
pub(crate) fn proc_start_time(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit_once(')')?
        .1
        .split_whitespace()
        .nth(19)?
        .parse()
        .ok()
}

impl std::fmt::Debug for Lab {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lab")
            .field("run_id", &self.run_id)
            .field("test_name", &self.test_name)
            .field("work_dir", &self.work_dir)
            .field("hosts", &self.hosts)
            .field("links", &self.links.len())
            .field("bridges", &self.bridges.len())
            .field("procs", &self.procs.len())
            .finish()
    }
}

fn mkdir(path: &Path) -> Result<()> {
    DirBuilder::new()
        .recursive(true)
        .mode(0o755)
        .create(path)
        .map_err(io_ctx(format!("creating {}", path.display())))
}

fn sanitize(name: &str) -> String {
    name.chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .take(40)
        .collect()
}

fn validate_name(kind: &str, name: &str, max: usize) -> Result<()> {
    let ok = !name.is_empty()
        && name.len() <= max
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
    if ok {
        Ok(())
    } else {
        Err(LabError::Invalid(format!(
            "{kind} name `{name}` must be 1..={max} chars of [a-z0-9_]"
        )))
    }
}

fn addr_cmd(ns: &str, ifname: &str, addr: IpAddr, len: u8) -> Vec<String> {
    let mut v = argv(&["ip", "-n", ns, "addr", "add"]);
    v.push(format!("{addr}/{len}"));
    v.extend(argv(&["dev", ifname]));
    if addr.is_ipv6() {
        v.push("nodad".into());
    }
    v
}

impl Lab {
    /// Create an empty lab: checks root and base tools (`ip`, `kill`, `sysctl`, and
    /// `tcpdump` unless `HOLDFAST_LAB_PCAP=0`), picks a unique run id and creates the work
    /// directory under `$HOLDFAST_LAB_DIR` (default `/tmp`).
    pub fn new(test_name: &str) -> Result<Lab> {
        if !crate::cmd::is_root() {
            return Err(LabError::NotRoot);
        }
        for tool in ["ip", "kill", "sysctl"] {
            require_tool(tool)?;
        }
        let pcap_enabled = std::env::var("HOLDFAST_LAB_PCAP").map_or(true, |v| v != "0");
        if pcap_enabled {
            require_tool("tcpdump")?;
        }
        let run_id = stale::new_run_id()?;
        let base = std::env::var_os("HOLDFAST_LAB_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from("/tmp"));
        let work_dir = base.join(format!("holdfast-lab-{}-{run_id}", sanitize(test_name)));
        for sub in ["", "logs", "pcap", "peers"] {
            mkdir(&work_dir.join(sub))?;
        }
        stale::register(&run_id)?;
        Ok(Lab {
            run_id,
            test_name: test_name.to_string(),
            work_dir,
            hosts: Vec::new(),
            links: Vec::new(),
            bridges: Vec::new(),
            procs: Vec::new(),
            captured: Vec::new(),
            pcaps: Vec::new(),
            pcap_enabled,
            failed: false,
            torn_down: false,
            kept: false,
        })
    }

    /// No captures from now on (a benchmark's lab: a capture on a bridge
    /// puts a packet socket in every packet's path, and its `tcpdump`
    /// takes a share of the cores the benchmark measures).
    pub fn without_captures(&mut self) {
        self.pcap_enabled = false;
    }

    /// Number of processes started so far ([`ProcId`]s are `0..proc_count()`).
    pub fn proc_count(&self) -> usize {
        self.procs.len()
    }

    /// The process with index `i` (`i < proc_count()`).
    pub fn proc_id(&self, i: usize) -> Option<ProcId> {
        (i < self.procs.len()).then_some(ProcId(i))
    }

    /// The log name of a process.
    pub fn proc_name(&self, p: ProcId) -> &str {
        &self.procs[p.0].name
    }

    /// Unique id of this run (`hf` + 6 hex digits); prefix of every namespace and interface.
    pub fn run_id(&self) -> &str {
        &self.run_id
    }

    /// Work directory (logs, pcaps, peer configs).
    pub fn work_dir(&self) -> &Path {
        &self.work_dir
    }

    /// A copy of the holdfastd binary `from` at `builds/NAME/holdfastd` in
    /// the work directory: another build path, which is what agents and
    /// `holdfast ctl upgrade` tell builds apart by.
    pub fn place_build(&self, from: &Path, name: &str) -> Result<PathBuf> {
        let dir = self.work_dir.join("builds").join(name);
        std::fs::create_dir_all(&dir).map_err(io_ctx(dir.display().to_string()))?;
        let to = dir.join("holdfastd");
        std::fs::copy(from, &to).map_err(io_ctx(format!("copy {}", from.display())))?;
        Ok(to)
    }

    /// Create a host: a namespace with `lo` up, IPv4/IPv6 forwarding on, IPv6 enabled,
    /// DAD off (addresses usable at once) and IPv6 addresses kept across link down.
    pub fn host(&mut self, name: &str) -> Result<HostId> {
        validate_name("host", name, 20)?;
        if self.hosts.iter().any(|h| h.name == name) {
            return Err(LabError::Invalid(format!("host `{name}` exists")));
        }
        let netns = format!("{}-{name}", self.run_id);
        // Registered first so teardown removes the namespace even if setup fails halfway.
        self.hosts.push(HostInfo {
            name: name.to_string(),
            netns: netns.clone(),
        });
        self.ns_create(&netns)?;
        Ok(HostId(self.hosts.len() - 1))
    }

    fn ns_create(&self, netns: &str) -> Result<()> {
        run_ok(&argv(&["ip", "netns", "add", netns]), DEFAULT_CMD_TIMEOUT)?;
        run_ok(
            &argv(&["ip", "-n", netns, "link", "set", "lo", "up"]),
            DEFAULT_CMD_TIMEOUT,
        )?;
        let sysctls = [
            "net.ipv4.ip_forward=1",
            "net.ipv6.conf.all.disable_ipv6=0",
            "net.ipv6.conf.default.disable_ipv6=0",
            "net.ipv6.conf.all.forwarding=1",
            "net.ipv6.conf.all.accept_dad=0",
            "net.ipv6.conf.default.accept_dad=0",
            "net.ipv6.conf.all.keep_addr_on_down=1",
            "net.ipv6.conf.default.keep_addr_on_down=1",
        ];
        let mut cmd = argv(&["ip", "netns", "exec", netns, "sysctl", "-q", "-w"]);
        cmd.extend(sysctls.iter().map(|s| s.to_string()));
        run_ok(&cmd, DEFAULT_CMD_TIMEOUT).map(drop)
    }

    /// Information about a host.
    pub fn host_info(&self, host: HostId) -> &HostInfo {
        &self.hosts[host.0]
    }

    /// Namespace name of a host.
    pub fn netns(&self, host: HostId) -> &str {
        &self.hosts[host.0].netns
    }

    /// All hosts created so far.
    pub fn hosts(&self) -> impl Iterator<Item = (HostId, &HostInfo)> {
        self.hosts.iter().enumerate().map(|(i, h)| (HostId(i), h))
    }

    fn ifname(&self, suffix: &str) -> Result<String> {
        let name = format!("{}{suffix}", self.run_id);
        if name.len() > IFNAMSIZ_MAX {
            return Err(LabError::Invalid(format!(
                "interface name `{name}` exceeds {IFNAMSIZ_MAX} chars"
            )));
        }
        Ok(name)
    }

    /// Join two hosts with a veth pair and configure the given addresses.
    /// With `HOLDFAST_LAB_PCAP` not `0`, a capture on the `a` end starts immediately.
    pub fn link(
        &mut self,
        a: HostId,
        b: HostId,
        v4: Option<AddrPair<Ipv4Addr>>,
        v6: Option<AddrPair<Ipv6Addr>>,
    ) -> Result<LinkId> {
        if a == b || a.0 >= self.hosts.len() || b.0 >= self.hosts.len() {
            return Err(LabError::Invalid(format!("bad link ends {a:?} {b:?}")));
        }
        let idx = self.links.len() + 1;
        let if_a = self.ifname(&format!("l{idx}a"))?;
        let if_b = self.ifname(&format!("l{idx}b"))?;
        let (ns_a, ns_b) = (self.netns(a).to_string(), self.netns(b).to_string());
        run_ok(
            &argv(&[
                "ip", "link", "add", &if_a, "netns", &ns_a, "type", "veth", "peer", "name", &if_b,
                "netns", &ns_b,
            ]),
            DEFAULT_CMD_TIMEOUT,
        )?;
        let mut cmds = Vec::new();
        if let Some(p) = v4 {
            cmds.push(addr_cmd(&ns_a, &if_a, p.a.into(), p.prefix_len));
            cmds.push(addr_cmd(&ns_b, &if_b, p.b.into(), p.prefix_len));
        }
        if let Some(p) = v6 {
            cmds.push(addr_cmd(&ns_a, &if_a, p.a.into(), p.prefix_len));
            cmds.push(addr_cmd(&ns_b, &if_b, p.b.into(), p.prefix_len));
        }
        cmds.push(argv(&["ip", "-n", &ns_a, "link", "set", &if_a, "up"]));
        cmds.push(argv(&["ip", "-n", &ns_b, "link", "set", &if_b, "up"]));
        for c in &cmds {
            run_ok(c, DEFAULT_CMD_TIMEOUT)?;
        }
        self.links.push(LinkInfo {
            a,
            b,
            if_a: if_a.clone(),
            if_b,
            v4,
            v6,
        });
        if self.pcap_enabled {
            self.capture_iface(&ns_a, &if_a, &format!("link{idx}"))?;
        }
        Ok(LinkId(idx - 1))
    }

    /// [`Lab::link`] with addresses allocated automatically: link number `n` (1-based)
    /// gets `198.18.n.1/24`–`.2` (spilling into 198.19.0.0/16 past 255) and
    /// `fd00:0:0:n::1/64`–`::2`.
    pub fn link_auto(&mut self, a: HostId, b: HostId) -> Result<LinkId> {
        let n = self.links.len() + 1;
        let (o2, o3) = if n <= 255 {
            (18u8, n as u8)
        } else {
            (19u8, (n % 256) as u8)
        };
        let v4 = AddrPair {
            a: Ipv4Addr::new(198, o2, o3, 1),
            b: Ipv4Addr::new(198, o2, o3, 2),
            prefix_len: 24,
        };
        let seg = n as u16;
        let v6 = AddrPair {
            a: Ipv6Addr::new(0xfd00, 0, 0, seg, 0, 0, 0, 1),
            b: Ipv6Addr::new(0xfd00, 0, 0, seg, 0, 0, 0, 2),
            prefix_len: 64,
        };
        self.link(a, b, Some(v4), Some(v6))
    }

    /// Information about a link (interface names, addresses).
    pub fn link_info(&self, link: LinkId) -> &LinkInfo {
        &self.links[link.0]
    }

    /// Failure injection: set both ends of a link administratively down or up.
    /// Addresses (including IPv6) survive a down/up cycle.
    pub fn set_link_up(&self, link: LinkId, up: bool) -> Result<()> {
        let l = &self.links[link.0];
        let state = if up { "up" } else { "down" };
        for (host, ifname) in [(l.a, &l.if_a), (l.b, &l.if_b)] {
            run_ok(
                &argv(&["ip", "-n", self.netns(host), "link", "set", ifname, state]),
                DEFAULT_CMD_TIMEOUT,
            )?;
        }
        Ok(())
    }

    /// Create a switch namespace with a Linux bridge and attach each member host through
    /// its own veth pair, configuring the given addresses on the host side.
    pub fn bridge(&mut self, name: &str, members: &[(HostId, Vec<IfAddr>)]) -> Result<BridgeId> {
        validate_name("bridge", name, 16)?;
        if self.bridges.iter().any(|b| b.name == name) {
            return Err(LabError::Invalid(format!("bridge `{name}` exists")));
        }
        let idx = self.bridges.len() + 1;
        let netns = format!("{}-sw-{name}", self.run_id);
        let bridge_if = self.ifname(&format!("b{idx}"))?;
        self.bridges.push(BridgeInfo {
            name: name.to_string(),
            netns: netns.clone(),
            bridge_if: bridge_if.clone(),
            ports: Vec::new(),
        });
        self.ns_create(&netns)?;
        run_ok(
            &argv(&[
                "ip", "-n", &netns, "link", "add", &bridge_if, "type", "bridge",
            ]),
            DEFAULT_CMD_TIMEOUT,
        )?;
        run_ok(
            &argv(&["ip", "-n", &netns, "link", "set", &bridge_if, "up"]),
            DEFAULT_CMD_TIMEOUT,
        )?;
        for (host, addrs) in members {
            self.add_port(idx - 1, *host, addrs)?;
        }
        if self.pcap_enabled {
            self.capture_iface(&netns, &bridge_if, &format!("bridge-{name}"))?;
        }
        Ok(BridgeId(idx - 1))
    }

    /// Attaches one more host to an existing bridge (a veth pair, the
    /// addresses on the host side), e.g. a relay host added to a topology
    /// after it was built.
    pub fn bridge_attach(
        &mut self,
        bridge: BridgeId,
        host: HostId,
        addrs: &[IfAddr],
    ) -> Result<()> {
        if bridge.0 >= self.bridges.len() {
            return Err(LabError::Invalid(format!("bad bridge {bridge:?}")));
        }
        self.add_port(bridge.0, host, addrs)
    }

    /// One bridge port: a veth pair from the bridge (index `b`) to `host`,
    /// with `addrs` on the host side.
    fn add_port(&mut self, b: usize, host: HostId, addrs: &[IfAddr]) -> Result<()> {
        let (netns, bridge_if, n) = {
            let br = &self.bridges[b];
            (br.netns.clone(), br.bridge_if.clone(), br.ports.len())
        };
        let host_ns = self
            .hosts
            .get(host.0)
            .ok_or_else(|| LabError::Invalid(format!("bad bridge member {host:?}")))?
            .netns
            .clone();
        let idx = b + 1;
        let switch_if = self.ifname(&format!("b{idx}s{}", n + 1))?;
        let host_if = self.ifname(&format!("b{idx}h{}", n + 1))?;
        let mut cmds = vec![
            argv(&[
                "ip", "link", "add", &switch_if, "netns", &netns, "type", "veth", "peer", "name",
                &host_if, "netns", &host_ns,
            ]),
            argv(&[
                "ip", "-n", &netns, "link", "set", &switch_if, "master", &bridge_if,
            ]),
            argv(&["ip", "-n", &netns, "link", "set", &switch_if, "up"]),
        ];
        for a in addrs {
            cmds.push(addr_cmd(&host_ns, &host_if, a.addr, a.prefix_len));
        }
        cmds.push(argv(&["ip", "-n", &host_ns, "link", "set", &host_if, "up"]));
        for c in &cmds {
            run_ok(c, DEFAULT_CMD_TIMEOUT)?;
        }
        self.bridges[b].ports.push(BridgePort {
            host,
            host_if,
            switch_if,
            addrs: addrs.to_vec(),
        });
        Ok(())
    }

    /// Re-creates a host whose namespace was deleted (a container after a
    /// container failure, re-created by its runtime): the namespace again
    /// under the same name, with its bridge ports (the same interface names
    /// and addresses), up.
    pub fn revive_host(&mut self, host: HostId) -> Result<()> {
        let netns = self
            .hosts
            .get(host.0)
            .ok_or_else(|| LabError::Invalid(format!("bad host {host:?}")))?
            .netns
            .clone();
        if Path::new("/run/netns").join(&netns).exists() {
            return Ok(());
        }
        self.ns_create(&netns)?;
        for br in &self.bridges {
            for p in br.ports.iter().filter(|p| p.host == host) {
                let _ = run_ok(
                    &argv(&["ip", "-n", &br.netns, "link", "del", &p.switch_if]),
                    DEFAULT_CMD_TIMEOUT,
                );
                let mut cmds = vec![
                    argv(&[
                        "ip",
                        "link",
                        "add",
                        &p.switch_if,
                        "netns",
                        &br.netns,
                        "type",
                        "veth",
                        "peer",
                        "name",
                        &p.host_if,
                        "netns",
                        &netns,
                    ]),
                    argv(&[
                        "ip",
                        "-n",
                        &br.netns,
                        "link",
                        "set",
                        &p.switch_if,
                        "master",
                        &br.bridge_if,
                    ]),
                    argv(&["ip", "-n", &br.netns, "link", "set", &p.switch_if, "up"]),
                ];
                for a in &p.addrs {
                    cmds.push(addr_cmd(&netns, &p.host_if, a.addr, a.prefix_len));
                }
                cmds.push(argv(&["ip", "-n", &netns, "link", "set", &p.host_if, "up"]));
                for c in &cmds {
                    run_ok(c, DEFAULT_CMD_TIMEOUT)?;
                }
            }
        }
        Ok(())
    }

    /// Information about a bridge.
    pub fn bridge_info(&self, bridge: BridgeId) -> &BridgeInfo {
        &self.bridges[bridge.0]
    }

    /// Before a cut-off host is reconnected: drops what its processes sent
    /// while it was cut off and still waits on its port of `bridge` (the
    /// neighbour queues and the qdisc), so that it does not reach anyone when
    /// the port comes up. Returns the interface name.
    pub fn drop_queued(&self, bridge: BridgeId, host: HostId) -> Result<String> {
        let port = self
            .bridge_info(bridge)
            .ports
            .iter()
            .find(|p| p.host == host)
            .map(|p| p.host_if.clone())
            .ok_or_else(|| {
                LabError::Invalid(format!(
                    "host `{}` is not on the bridge",
                    self.host_info(host).name
                ))
            })?;
        for cmd in [
            vec!["ip", "neigh", "flush", "dev", &port],
            vec!["tc", "qdisc", "replace", "dev", &port, "root", "pfifo"],
            vec!["tc", "qdisc", "del", "dev", &port, "root"],
        ] {
            self.exec_ok(host, &cmd)?;
        }
        Ok(port)
    }

    /// Failure injection: set the switch side of `host`'s bridge port down or up.
    pub fn set_bridge_port_up(&self, bridge: BridgeId, host: HostId, up: bool) -> Result<()> {
        let b = &self.bridges[bridge.0];
        let port = b
            .ports
            .iter()
            .find(|p| p.host == host)
            .ok_or_else(|| LabError::Invalid(format!("{host:?} not on bridge {}", b.name)))?;
        let state = if up { "up" } else { "down" };
        run_ok(
            &argv(&["ip", "-n", &b.netns, "link", "set", &port.switch_if, state]),
            DEFAULT_CMD_TIMEOUT,
        )
        .map(drop)
    }

    /// Failure injection (a host failure): set every link of `host` down or up, both
    /// ends: its veth links ([`Lab::set_link_up`]) and its bridge ports (the host's
    /// interface and the switch side).
    pub fn set_host_links_up(&self, host: HostId, up: bool) -> Result<()> {
        for (i, l) in self.links.iter().enumerate() {
            if l.a == host || l.b == host {
                self.set_link_up(LinkId(i), up)?;
            }
        }
        let state = if up { "up" } else { "down" };
        for b in &self.bridges {
            for p in b.ports.iter().filter(|p| p.host == host) {
                for (ns, ifname) in [
                    (self.netns(host), &p.host_if),
                    (b.netns.as_str(), &p.switch_if),
                ] {
                    run_ok(
                        &argv(&["ip", "-n", ns, "link", "set", ifname, state]),
                        DEFAULT_CMD_TIMEOUT,
                    )?;
                }
            }
        }
        Ok(())
    }

    /// All bridges created so far.
    pub fn bridges(&self) -> impl Iterator<Item = (BridgeId, &BridgeInfo)> {
        self.bridges
            .iter()
            .enumerate()
            .map(|(i, b)| (BridgeId(i), b))
    }

    /// All links created so far.
    pub fn links(&self) -> impl Iterator<Item = (LinkId, &LinkInfo)> {
        self.links.iter().enumerate().map(|(i, l)| (LinkId(i), l))
    }

    /// The host named `name`, if any.
    pub fn host_by_name(&self, name: &str) -> Option<HostId> {
        self.hosts.iter().position(|h| h.name == name).map(HostId)
    }

    fn ns_argv(&self, host: HostId, cmd: &[&str]) -> Vec<String> {
        let mut v = argv(&["ip", "netns", "exec", self.netns(host)]);
        v.extend(cmd.iter().map(|s| s.to_string()));
        v
    }

    /// Run a command inside a host and return its output (exit status not checked).
    /// Bounded by [`DEFAULT_CMD_TIMEOUT`].
    pub fn exec(&self, host: HostId, cmd: &[&str]) -> Result<Output> {
        self.exec_timeout(host, cmd, DEFAULT_CMD_TIMEOUT)
    }

    /// [`Lab::exec`] with an explicit time limit.
    pub fn exec_timeout(&self, host: HostId, cmd: &[&str], timeout: Duration) -> Result<Output> {
        run_timeout(&self.ns_argv(host, cmd), timeout)
    }

    /// Run a command inside a host, fail on non-zero exit, return stdout as text.
    pub fn exec_ok(&self, host: HostId, cmd: &[&str]) -> Result<String> {
        self.exec_ok_timeout(host, cmd, DEFAULT_CMD_TIMEOUT)
    }

    /// [`Lab::exec_ok`] with an explicit time limit.
    pub fn exec_ok_timeout(&self, host: HostId, cmd: &[&str], timeout: Duration) -> Result<String> {
        let full = self.ns_argv(host, cmd);
        let out = run_timeout(&full, timeout)?;
        check_output(&full, &out)?;
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// Start a long-running process inside a host (in its own process group).
    /// stdout/stderr go to `logs/<name>.stdout|.stderr` in the work dir; the process is
    /// stopped at teardown.
    pub fn spawn(
        &mut self,
        host: HostId,
        name: &str,
        cmd: &[&str],
        env: &[(&str, &str)],
    ) -> Result<ProcId> {
        let full = self.ns_argv(host, cmd);
        self.spawn_argv(name, &full, env, false)
    }

    /// Start `ip monitor route` inside a host and return once it is known
    /// to be subscribed and writing: a marker route (`unreachable
    /// 192.0.2.255/32` in table 252, a documentation prefix in a table the
    /// lab uses for nothing else) is added and deleted until the monitor's
    /// log shows it. Tests then read the log with [`Lab::proc_logs`] and
    /// look for their own prefixes.
    pub fn spawn_route_monitor(&mut self, host: HostId, name: &str) -> Result<ProcId> {
        let mon = self.spawn(host, name, &["ip", "monitor", "route"], &[])?;
        let log = self.procs[mon.0].stdout.clone();
        let marker = ["192.0.2.255/32", "table", "252"];
        crate::wait::wait_for(
            &format!("{name}: ip monitor route subscribed"),
            DEFAULT_CMD_TIMEOUT,
            || {
                let mut add = vec!["ip", "route", "replace", "unreachable"];
                add.extend(marker);
                self.exec_ok(host, &add)?;
                let mut del = vec!["ip", "route", "del", "unreachable"];
                del.extend(marker);
                self.exec_ok(host, &del)?;
                let seen = std::fs::read_to_string(&log).unwrap_or_default();
                Ok(seen.contains("192.0.2.255").then_some(()))
            },
        )?;
        Ok(mon)
    }

    fn spawn_argv(
        &mut self,
        name: &str,
        full: &[String],
        env: &[(&str, &str)],
        capture: bool,
    ) -> Result<ProcId> {
        let mut base = sanitize(name);
        if self.procs.iter().any(|p| p.name == base) {
            base = format!("{base}-{}", self.procs.len());
        }
        let stdout = self.work_dir.join("logs").join(format!("{base}.stdout"));
        let stderr = self.work_dir.join("logs").join(format!("{base}.stderr"));
        let out_f =
            File::create(&stdout).map_err(io_ctx(format!("creating {}", stdout.display())))?;
        let err_f =
            File::create(&stderr).map_err(io_ctx(format!("creating {}", stderr.display())))?;
        let child = Command::new(&full[0])
            .args(&full[1..])
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(out_f)
            .stderr(err_f)
            .process_group(0)
            .spawn()
            .map_err(io_ctx(format!("spawning `{}`", full.join(" "))))?;
        let pid = child.id();
        self.procs.push(ProcEntry {
            name: base,
            child: Some(child),
            pid,
            start_time: proc_start_time(pid),
            stdout,
            stderr,
            capture,
            exit: None,
        });
        Ok(ProcId(self.procs.len() - 1))
    }

    /// Pid of a spawned process (also its process group id).
    pub fn pid(&self, p: ProcId) -> u32 {
        self.procs[p.0].pid
    }

    /// Paths of a process's stdout and stderr logs.
    pub fn proc_logs(&self, p: ProcId) -> (&Path, &Path) {
        let e = &self.procs[p.0];
        (&e.stdout, &e.stderr)
    }

    /// Whether a spawned process is still running (reaps it if it exited). For an
    /// adopted process: whether its pid exists, is no zombie and has the recorded start
    /// time (a zombie child of this process is reaped).
    pub fn is_running(&mut self, p: ProcId) -> bool {
        let e = &mut self.procs[p.0];
        if e.exit.is_some() {
            return false;
        }
        match &mut e.child {
            Some(child) => match child.try_wait() {
                Ok(Some(st)) => {
                    e.exit = Some(st);
                    false
                }
                Ok(None) => true,
                Err(_) => false,
            },
            None => adopted_alive(e.pid, e.start_time),
        }
    }

    /// Deliver a signal to a spawned process's whole process group.
    pub fn kill(&mut self, p: ProcId, sig: Signal) {
        if self.is_running(p) {
            send_signal(self.procs[p.0].pid, sig, true);
        }
    }

    /// Stop a process: SIGTERM to its group, up to 3 s grace, then SIGKILL. Returns the
    /// exit status when it could be collected.
    pub fn stop_proc(&mut self, p: ProcId) -> Option<ExitStatus> {
        self.stop_many(&[p]);
        self.procs[p.0].exit
    }

    fn stop_many(&mut self, ids: &[ProcId]) {
        let live: Vec<ProcId> = ids
            .iter()
            .copied()
            .filter(|&p| self.is_running(p))
            .collect();
        for &p in &live {
            let pid = self.procs[p.0].pid;
            send_signal(pid, Signal::Cont, true);
            send_signal(pid, Signal::Term, true);
        }
        let deadline = Instant::now() + TERM_GRACE;
        for &p in &live {
            let left = deadline.saturating_duration_since(Instant::now());
            self.wait_gone(p, left);
        }
        for &p in &live {
            if self.is_running(p) {
                send_signal(self.procs[p.0].pid, Signal::Kill, true);
                self.wait_gone(p, Duration::from_secs(2));
            }
        }
    }

    /// Waits up to `timeout` for a process to exit (collecting a child's status).
    fn wait_gone(&mut self, p: ProcId, timeout: Duration) {
        let e = &mut self.procs[p.0];
        if e.exit.is_some() {
            return;
        }
        if let Some(child) = &mut e.child {
            e.exit = wait_child(child, timeout);
            return;
        }
        let deadline = Instant::now() + timeout;
        while adopted_alive(e.pid, e.start_time) && Instant::now() < deadline {
            thread::sleep(Duration::from_millis(10));
        }
    }

    fn capture_iface(&mut self, netns: &str, ifname: &str, label: &str) -> Result<()> {
        if self.captured.iter().any(|(n, i)| n == netns && i == ifname) {
            return Ok(());
        }
        let file = self
            .work_dir
            .join("pcap")
            .join(format!("{label}-{ifname}.pcap"));
        let file_s = file.to_string_lossy().into_owned();
        let full = argv(&[
            "ip",
            "netns",
            "exec",
            netns,
            "tcpdump",
            "--immediate-mode",
            // A 16 MiB capture buffer: with the default 2 MiB a 100k-route
            // burst lost about 15% of its packets. Not more: the kernel
            // zeroes the whole ring in one system call that a kernel
            // without preemption (this machine kind: PREEMPT_NONE) does not
            // interrupt, and 64 MiB held a CPU for 270-320 ms, delaying
            // real-time BFD threads of other labs by as much (2026-11-29,
            // perf: tcpdump in `packet_set_ring` → `clear_page_erms`).
            // Teardown reports what the kernel dropped.
            "-B",
            CAPTURE_BUFFER_KIB,
            "-i",
            ifname,
            "-U",
            "-n",
            "-s",
            "0",
            "-Z",
            "root",
            "-w",
            &file_s,
        ]);
        let p = self.spawn_argv(&format!("tcpdump-{label}"), &full, &[], true)?;
        self.captured.push((netns.to_string(), ifname.to_string()));
        self.pcaps.push(file);
        let stderr = self.procs[p.0].stderr.clone();
        crate::wait::wait_for_every(
            &format!("tcpdump on {ifname} to start"),
            Duration::from_secs(5),
            Duration::from_millis(20),
            || {
                let text = std::fs::read_to_string(&stderr).unwrap_or_default();
                Ok(text.contains("listening on").then_some(()))
            },
        )
    }

    /// Start captures on every link and bridge that has none yet (useful when the lab was
    /// created with `HOLDFAST_LAB_PCAP=0`, or to be explicit).
    pub fn capture_start(&mut self) -> Result<()> {
        require_tool("tcpdump")?;
        let links: Vec<(String, String, String)> = self
            .links
            .iter()
            .enumerate()
            .map(|(i, l)| {
                (
                    self.netns(l.a).to_string(),
                    l.if_a.clone(),
                    format!("link{}", i + 1),
                )
            })
            .collect();
        let bridges: Vec<(String, String, String)> = self
            .bridges
            .iter()
            .map(|b| {
                (
                    b.netns.clone(),
                    b.bridge_if.clone(),
                    format!("bridge-{}", b.name),
                )
            })
            .collect();
        for (ns, ifname, label) in links.into_iter().chain(bridges) {
            self.capture_iface(&ns, &ifname, &label)?;
        }
        self.pcap_enabled = true;
        Ok(())
    }

    /// Capture inside `host`'s namespace on each of its bridge ports: what the host
    /// itself receives and sends (a peer's own view of the wire). Returns the files,
    /// one per port; a port already captured keeps its file.
    pub fn capture_host(&mut self, host: HostId) -> Result<Vec<PathBuf>> {
        require_tool("tcpdump")?;
        let ns = self.netns(host).to_string();
        let name = self.host_info(host).name.clone();
        let ports: Vec<String> = self
            .bridges
            .iter()
            .flat_map(|b| b.ports.iter().filter(|p| p.host == host))
            .map(|p| p.host_if.clone())
            .collect();
        let mut files = Vec::new();
        for ifname in ports {
            let label = format!("host-{name}");
            self.capture_iface(&ns, &ifname, &label)?;
            files.push(
                self.work_dir
                    .join("pcap")
                    .join(format!("{label}-{ifname}.pcap")),
            );
        }
        Ok(files)
    }

    /// Paths of all pcap files being written.
    pub fn pcaps(&self) -> &[PathBuf] {
        &self.pcaps
    }

    /// Directory for a peer's generated files (`peers/<host>-<kind>`), created on demand.
    pub fn peer_dir(&self, host: HostId, kind: &str) -> Result<PathBuf> {
        let dir = self
            .work_dir
            .join("peers")
            .join(format!("{}-{kind}", self.hosts[host.0].name));
        mkdir(&dir)?;
        Ok(dir)
    }

    /// Mark the run as failed: the work directory is kept at teardown and its path printed.
    pub fn fail(&mut self, reason: &str) {
        self.failed = true;
        let _ = std::fs::write(self.work_dir.join("FAILED"), format!("{reason}\n"));
    }

    /// Whether the run has been marked failed.
    pub fn is_failed(&self) -> bool {
        self.failed
    }

    /// Stop every process (daemons first, then captures), kill leftovers in every
    /// namespace, delete the namespaces and the run's scratch directories (tmpfs), and
    /// delete the work directory unless the run
    /// failed (panic, [`Lab::fail`]) or `HOLDFAST_LAB_KEEP=1`. Idempotent.
    pub fn teardown(&mut self) {
        if thread::panicking() {
            self.failed = true;
        }
        if self.torn_down {
            return;
        }
        self.torn_down = true;
        let daemons: Vec<ProcId> = (0..self.procs.len())
            .rev()
            .filter(|&i| !self.procs[i].capture)
            .map(ProcId)
            .collect();
        self.stop_many(&daemons);
        // Give tcpdump a moment to write the daemons' last packets (FIN, NOTIFICATION).
        if !daemons.is_empty() && self.procs.iter().any(|p| p.capture) {
            thread::sleep(CAPTURE_DRAIN);
        }
        let captures: Vec<ProcId> = (0..self.procs.len())
            .filter(|&i| self.procs[i].capture)
            .map(ProcId)
            .collect();
        self.stop_many(&captures);
        self.report_capture_drops(&captures);
        let names: Vec<String> = self
            .hosts
            .iter()
            .map(|h| h.netns.clone())
            .chain(self.bridges.iter().map(|b| b.netns.clone()))
            .collect();
        stale::destroy_namespaces(&names);
        stale::remove_scratch(&self.run_id);
        stale::unregister(&self.run_id);
        let keep = std::env::var("HOLDFAST_LAB_KEEP").is_ok_and(|v| v == "1");
        if self.failed || keep {
            eprintln!(
                "holdfast-lab: {}: kept work dir {} (logs, pcaps, configs)",
                self.test_name,
                self.work_dir.display()
            );
        } else {
            let _ = std::fs::remove_dir_all(&self.work_dir);
        }
    }

    /// Says which captures lost packets (tcpdump's own count at exit), so
    /// that a reader of a kept capture knows it is incomplete.
    fn report_capture_drops(&self, captures: &[ProcId]) {
        for &ProcId(i) in captures {
            let p = &self.procs[i];
            let text = std::fs::read_to_string(&p.stderr).unwrap_or_default();
            let dropped = text
                .lines()
                .find_map(|l| l.strip_suffix(" packets dropped by kernel"))
                .and_then(|n| n.trim().parse::<u64>().ok())
                .unwrap_or(0);
            if dropped > 0 {
                eprintln!(
                    "holdfast-lab: {}: capture {} lost {dropped} packets (dropped by kernel, buffer {CAPTURE_BUFFER_KIB} KiB)",
                    self.test_name, p.name
                );
            }
        }
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        if !self.kept {
            self.teardown();
        }
    }
}
