//! A Redis Cluster as the lab's NSR store (issue 29): three masters with a
//! replica each, six `redis-server` processes from Debian's package in one
//! host (ports `first`..`first + 5`, cluster bus at +10000), made with
//! `redis-cli --cluster create --cluster-replicas 1`, a node timeout of
//! 1 s (a killed master's replica is promoted about 2 s after the kill).
//! Each node keeps its `nodes.conf` in its directory, so a node restarted
//! after a kill rejoins the cluster (as a replica of whoever took over its
//! slots).
//!
//! With ACL users every node has the same administrator (`default`, whose
//! password replicas use as `masterauth`), and [`RedisCluster::set_user`]
//! creates a user on every node (Redis does not replicate ACL users).
//!
//! [`StoreServers`] is what a plane's units use: one server or a cluster.
//!
//! Known issues: all six nodes share one host (one network namespace), so
//! a host or link failure takes the whole cluster; kill processes to fail
//! one node.

use std::net::IpAddr;
use std::time::{Duration, Instant};

use crate::cmd::pid_alive;
use crate::error::{LabError, Result};
use crate::lab::{HostId, Lab};
use crate::redis::{random_password, Redis};

/// A running Redis Cluster.
#[derive(Debug)]
pub struct RedisCluster {
    /// The six nodes; the first three are the URL's seeds (and the first
    /// masters, though failovers move that role).
    pub nodes: Vec<Redis>,
    admin: Option<String>,
}

/// One line of `CLUSTER NODES`.
#[derive(Debug, Clone, PartialEq, Eq)]
struct NodeLine {
    port: u16,
    master: bool,
    failed: bool,
    slots: Vec<(u16, u16)>,
}

/// Parses `CLUSTER NODES`: `<id> <ip:port@bus> <flags> <master> <ping>
/// <pong> <epoch> <link> <slot ranges...>`.
fn parse_nodes(text: &str) -> Vec<NodeLine> {
    text.lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let addr = f.get(1)?.split('@').next()?;
            let port = addr.rsplit_once(':')?.1.parse().ok()?;
            let flags = f.get(2)?;
            let slots = f
                .iter()
                .skip(8)
                .filter(|s| !s.starts_with('['))
                .filter_map(|s| match s.split_once('-') {
                    Some((a, b)) => Some((a.parse().ok()?, b.parse().ok()?)),
                    None => s.parse().ok().map(|a| (a, a)),
                })
                .collect();
            Some(NodeLine {
                port,
                master: flags.contains("master"),
                failed: flags.contains("fail"),
                slots,
            })
        })
        .collect()
}

impl RedisCluster {
    /// Starts six nodes in `host` on `bind`, ports `first_port`..+5, and
    /// makes them a cluster; returns once every node says
    /// `cluster_state:ok` and every replica's link is up. `acl`: ACL users
    /// (see the module documentation).
    pub fn start(
        lab: &mut Lab,
        host: HostId,
        bind: IpAddr,
        first_port: u16,
        acl: bool,
    ) -> Result<RedisCluster> {
        let admin = if acl { Some(random_password()?) } else { None };
        let mut nodes = Vec::new();
        for i in 0..6u16 {
            let mut extra: Vec<String> = [
                "--cluster-enabled",
                "yes",
                "--cluster-config-file",
                "nodes.conf",
                "--cluster-node-timeout",
                "1000",
                // Any replica may be promoted, however stale its link.
                "--cluster-replica-validity-factor",
                "0",
            ]
            .iter()
            .map(|s| s.to_string())
            .collect();
            if let Some(pw) = &admin {
                extra.extend(["--masterauth".to_string(), pw.clone()]);
            }
            nodes.push(Redis::start_with(
                lab,
                host,
                bind,
                first_port + i,
                extra,
                admin.clone(),
            )?);
        }
        let addrs: Vec<String> = nodes
            .iter()
            .map(|n| format!("{}:{}", bind, n.port()))
            .collect();
        let mut args: Vec<&str> = vec!["--cluster", "create"];
        args.extend(addrs.iter().map(String::as_str));
        args.extend(["--cluster-replicas", "1", "--cluster-yes"]);
        nodes[0].cli(lab, &args)?;
        let c = RedisCluster { nodes, admin };
        c.wait_ok(lab, Duration::from_secs(30))?;
        Ok(c)
    }

    /// `redis+cluster://` with the first three nodes as seeds.
    pub fn url(&self) -> String {
        let seeds: Vec<String> = self.nodes[..3]
            .iter()
            .map(|n| match n.addr() {
                IpAddr::V4(a) => format!("{a}:{}", n.port()),
                IpAddr::V6(a) => format!("[{a}]:{}", n.port()),
            })
            .collect();
        format!("redis+cluster://{}", seeds.join(","))
    }

    /// Whether the nodes run with ACL users.
    pub fn acl(&self) -> bool {
        self.admin.is_some()
    }

    /// `ACL SETUSER ...` (and `ACL SAVE`) on every node.
    pub fn set_user(&self, lab: &Lab, args: &[&str]) -> Result<()> {
        for n in &self.nodes {
            n.set_user(lab, args)?;
        }
        Ok(())
    }

    /// `CLUSTER NODES` from the first running node that answers.
    fn view(&self, lab: &Lab) -> Result<Vec<NodeLine>> {
        let mut last = None;
        for n in self.nodes.iter().filter(|n| pid_alive(n.pid())) {
            match n.cli(lab, &["CLUSTER", "NODES"]) {
                Ok(t) => return Ok(parse_nodes(&t)),
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| LabError::Invalid("no cluster node runs".into())))
    }

    /// The index of the node serving `key`'s slot as master (as a running
    /// node sees it).
    pub fn master_of(&self, lab: &Lab, key: &str) -> Result<usize> {
        let any = self
            .nodes
            .iter()
            .find(|n| pid_alive(n.pid()))
            .ok_or_else(|| LabError::Invalid("no cluster node runs".into()))?;
        let slot: u16 = any
            .cli(lab, &["CLUSTER", "KEYSLOT", key])?
            .trim()
            .parse()
            .map_err(|_| LabError::Invalid(format!("CLUSTER KEYSLOT {key}: not a number")))?;
        let view = self.view(lab)?;
        let port = view
            .iter()
            .find(|l| {
                l.master && !l.failed && l.slots.iter().any(|(a, b)| (*a..=*b).contains(&slot))
            })
            .map(|l| l.port)
            .ok_or_else(|| LabError::Invalid(format!("no master serves slot {slot}")))?;
        self.nodes
            .iter()
            .position(|n| n.port() == port)
            .ok_or_else(|| LabError::Invalid(format!("port {port} is no node of the lab's")))
    }

    /// The indexes of the nodes that are masters now.
    pub fn masters(&self, lab: &Lab) -> Result<Vec<usize>> {
        let view = self.view(lab)?;
        Ok(self
            .nodes
            .iter()
            .enumerate()
            .filter(|(_, n)| {
                view.iter()
                    .any(|l| l.port == n.port() && l.master && !l.failed && !l.slots.is_empty())
            })
            .map(|(i, _)| i)
            .collect())
    }

    /// Waits until every running node says `cluster_state:ok`, sees every
    /// slot served by a live master, and every replica's link is up.
    pub fn wait_ok(&self, lab: &Lab, within: Duration) -> Result<()> {
        let until = Instant::now() + within;
        let mut last = String::new();
        loop {
            let mut ok = true;
            for n in self.nodes.iter().filter(|n| pid_alive(n.pid())) {
                let info = n.cli(lab, &["CLUSTER", "INFO"]).unwrap_or_default();
                let repl = n.cli(lab, &["INFO", "replication"]).unwrap_or_default();
                let linked = !repl.contains("role:slave") || repl.contains("master_link_status:up");
                if !info.contains("cluster_state:ok") || !linked {
                    ok = false;
                    last = format!("node {}: {}", n.port(), info.lines().next().unwrap_or(""));
                    break;
                }
            }
            if ok {
                return Ok(());
            }
            if Instant::now() > until {
                return Err(LabError::Invalid(format!(
                    "Redis Cluster not ok within {within:?}: {last}"
                )));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// SIGKILLs node `i`.
    pub fn kill(&mut self, lab: &mut Lab, i: usize) -> Result<()> {
        self.nodes[i].kill(lab)
    }

    /// Starts node `i` again (its `nodes.conf` kept, its data gone).
    pub fn restart(&mut self, lab: &mut Lab, i: usize) -> Result<()> {
        self.nodes[i].restart(lab)
    }

    /// Stops every node.
    pub fn stop(&self, lab: &mut Lab) {
        for n in &self.nodes {
            n.stop(lab);
        }
    }
}

/// Servers a store user is made on: one `redis-server`, a cluster's
/// every node.
pub trait AclServers {
    /// `ACL SETUSER` (`args`) and `ACL SAVE` on every server.
    fn set_acl_user(&self, lab: &Lab, args: &[&str]) -> Result<()>;
}

impl AclServers for Redis {
    fn set_acl_user(&self, lab: &Lab, args: &[&str]) -> Result<()> {
        self.set_user(lab, args)
    }
}

impl AclServers for StoreServers {
    fn set_acl_user(&self, lab: &Lab, args: &[&str]) -> Result<()> {
        self.set_user(lab, args)
    }
}

/// The NSR store of a plane: one `redis-server`, or a Redis Cluster.
#[derive(Debug)]
pub enum StoreServers {
    Single(Redis),
    Cluster(RedisCluster),
}

impl StoreServers {
    /// The `[nsr] store` URL.
    pub fn url(&self) -> String {
        match self {
            StoreServers::Single(r) => r.url(),
            StoreServers::Cluster(c) => c.url(),
        }
    }

    /// Whether the servers run with ACL users.
    pub fn acl(&self) -> bool {
        match self {
            StoreServers::Single(r) => r.acl(),
            StoreServers::Cluster(c) => c.acl(),
        }
    }

    /// Creates a user (`ACL SETUSER` arguments) on every server.
    pub fn set_user(&self, lab: &Lab, args: &[&str]) -> Result<()> {
        match self {
            StoreServers::Single(r) => r.set_user(lab, args),
            StoreServers::Cluster(c) => c.set_user(lab, args),
        }
    }

    /// The single server; panics on a cluster (a scenario that kills or
    /// stalls "the" store runs on a single server).
    pub fn single(&self) -> &Redis {
        match self {
            StoreServers::Single(r) => r,
            StoreServers::Cluster(_) => panic!("a single-server store step on a Redis Cluster"),
        }
    }

    /// [`StoreServers::single`], mutable.
    pub fn single_mut(&mut self) -> &mut Redis {
        match self {
            StoreServers::Single(r) => r,
            StoreServers::Cluster(_) => panic!("a single-server store step on a Redis Cluster"),
        }
    }

    /// The cluster, if the store is one.
    pub fn cluster(&self) -> Option<&RedisCluster> {
        match self {
            StoreServers::Single(_) => None,
            StoreServers::Cluster(c) => Some(c),
        }
    }

    /// [`StoreServers::cluster`], mutable.
    pub fn cluster_mut(&mut self) -> Option<&mut RedisCluster> {
        match self {
            StoreServers::Single(_) => None,
            StoreServers::Cluster(c) => Some(c),
        }
    }

    /// The server holding `key` now: the single one, or the master of the
    /// key's slot.
    pub fn server_of(&self, lab: &Lab, key: &str) -> Result<&Redis> {
        match self {
            StoreServers::Single(r) => Ok(r),
            StoreServers::Cluster(c) => Ok(&c.nodes[c.master_of(lab, key)?]),
        }
    }

    /// The servers holding keys: the single one, or every master.
    pub fn masters(&self, lab: &Lab) -> Result<Vec<&Redis>> {
        match self {
            StoreServers::Single(r) => Ok(vec![r]),
            StoreServers::Cluster(c) => {
                Ok(c.masters(lab)?.into_iter().map(|i| &c.nodes[i]).collect())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cluster_nodes_parsed() {
        let t = "\
07c3 198.18.0.2:7000@17000 myself,master - 0 0 1 connected 0-5460
67ed 198.18.0.2:7001@17001 master - 0 1700 2 connected 5461-10922 [5500->-292f]
292f 198.18.0.2:7002@17002 master,fail - 1700 1690 3 disconnected
e7d1 198.18.0.2:7003@17003 slave 07c3 0 1700 1 connected
6ec1 198.18.0.2:7005@17005 master - 0 1700 7 connected 10923-16383 42
";
        let v = parse_nodes(t);
        assert_eq!(v.len(), 5);
        assert_eq!(v[0].slots, vec![(0, 5460)]);
        assert_eq!(v[1].slots, vec![(5461, 10922)]);
        assert!(v[2].failed && v[2].master && v[2].slots.is_empty());
        assert!(!v[3].master);
        assert_eq!(v[4].slots, vec![(10923, 16383), (42, 42)]);
        assert_eq!(v[4].port, 7005);
    }
}
