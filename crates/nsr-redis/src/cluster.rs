//! The store on a Redis Cluster (`redis+cluster://`, issue 29): finding
//! the master of an instance's slot.
//!
//! Every key of an instance carries the hash tag `{<instance>}` (see the
//! crate's key layout), so all of them live in one slot
//! ([`redis::cluster_routing::get_slot`], redis-rs's cluster routing), and
//! one master serves the whole instance: its scripts, its `MULTI`/`EXEC`
//! reads and its `WAIT` (which then counts that shard's replicas). The
//! store keeps one connection to that master, as with a single server, so
//! its hand-packed pipelined writes are unchanged; what changes is how the
//! master is found:
//!
//! 1. a node named by a `MOVED` reply, if one came, else the seed nodes of
//!    the URL in turn, starting with the last one that answered, are asked
//!    `CLUSTER SLOTS` (after `AUTH`, with the URL's credentials);
//! 2. the master the answer names for the slot is connected to (the seed's
//!    own connection is kept when it is that master), authenticated, and
//!    checked with `ROLE`.
//!
//! Redirections: a `MOVED` (the slot has a new master: a failover, or a
//! resharding that has ended) drops the connection, and the next call
//! connects to the node it names. An `ASK` or `TRYAGAIN` (the slot is being
//! migrated) drops it too, and the next call asks the seeds again, until
//! the migration ends: Redis runs a multi-key command during a migration
//! only where *all* its keys are, and the store's scripts name keys that
//! usually do not exist (`part`, `rr`, ...), so an `ASKING` to the
//! importing node would be answered `TRYAGAIN` as well. The write that got
//! the redirection was not applied and fails as `Unavailable`; the unit
//! re-synchronises once the store answers again, as after any failed
//! write. `CLUSTERDOWN` is handled the same way.
//!
//! # Known issues
//! - A unit is unprotected while its slot is being migrated (milliseconds
//!   for one unit's keys with `redis-cli --cluster reshard`).
//! - The seeds and the masters must accept the same credentials (one
//!   user for the instance on every node: Redis does not replicate ACL
//!   users, so `ACL SETUSER` goes to every node).

use super::{host_port, message, open_socket};
use holdfast_nsr::{StoreError, StoreUrl};
use redis::Value;
use std::time::Instant;

/// The slot of an instance's keys (all of them share its hash tag).
pub(crate) fn slot_of(key_prefix: &str) -> u16 {
    redis::cluster_routing::get_slot(key_prefix.as_bytes())
}

/// How to reach the cluster's nodes.
pub(crate) struct Nodes<'a> {
    pub tls: bool,
    pub seeds: &'a [(String, u16)],
    pub username: Option<&'a str>,
    pub password: Option<&'a str>,
}

impl<'a> Nodes<'a> {
    /// The nodes of a `redis+cluster://` URL; `None` for any other.
    pub(crate) fn of(url: &'a StoreUrl) -> Option<Nodes<'a>> {
        match url {
            StoreUrl::Cluster {
                tls,
                nodes,
                username,
                password,
            } => Some(Nodes {
                tls: *tls,
                seeds: nodes,
                username: username.as_deref(),
                password: password.as_deref(),
            }),
            _ => None,
        }
    }
}

/// One range of `CLUSTER SLOTS`: its first and last slot and its master.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SlotRange {
    pub first: u16,
    pub last: u16,
    pub master: (String, u16),
}

fn text(v: &Value) -> Option<String> {
    match v {
        Value::BulkString(b) => String::from_utf8(b.clone()).ok(),
        Value::SimpleString(s) => Some(s.clone()),
        _ => None,
    }
}

fn int(v: &Value) -> Option<i64> {
    match v {
        Value::Int(n) => Some(*n),
        v => text(v)?.parse().ok(),
    }
}

/// Parses a `CLUSTER SLOTS` reply; an empty master host (a node that does
/// not know its own address) is `asked`'s host.
pub(crate) fn parse_slots(v: &Value, asked: &str) -> Result<Vec<SlotRange>, String> {
    let Value::Array(ranges) = v else {
        return Err(format!("CLUSTER SLOTS: not an array: {v:?}"));
    };
    ranges
        .iter()
        .map(|r| {
            let bad = || format!("CLUSTER SLOTS: bad range {r:?}");
            let Value::Array(items) = r else {
                return Err(bad());
            };
            let (first, last) = match (items.first().and_then(int), items.get(1).and_then(int)) {
                (Some(a), Some(b)) => (
                    u16::try_from(a).map_err(|_| bad())?,
                    u16::try_from(b).map_err(|_| bad())?,
                ),
                _ => return Err(bad()),
            };
            let Some(Value::Array(m)) = items.get(2) else {
                return Err(bad());
            };
            let host = m.first().and_then(text).ok_or_else(bad)?;
            let port = m
                .get(1)
                .and_then(int)
                .and_then(|p| u16::try_from(p).ok())
                .ok_or_else(bad)?;
            let host = if host.is_empty() || host == "?" {
                asked.to_string()
            } else {
                host
            };
            Ok(SlotRange {
                first,
                last,
                master: (host, port),
            })
        })
        .collect()
}

/// `AUTH` with the URL's credentials, if it has any.
fn auth(conn: &mut redis::Connection, nodes: &Nodes<'_>) -> Result<(), String> {
    let Some(pw) = nodes.password else {
        return Ok(());
    };
    let mut cmd = redis::cmd("AUTH");
    if let Some(u) = nodes.username {
        cmd.arg(u);
    }
    cmd.arg(pw)
        .query::<()>(conn)
        .map_err(|e| format!("AUTH: {}", super::describe(&e)))
}

/// An authenticated connection to `host:port`.
fn open_node(
    nodes: &Nodes<'_>,
    host: &str,
    port: u16,
    deadline: Instant,
) -> Result<redis::Connection, String> {
    let mut c = open_socket(nodes.tls, host, port, deadline).map_err(message)?;
    auth(&mut c, nodes)?;
    Ok(c)
}

/// Whether the connection's server says it is a master.
fn is_master(conn: &mut redis::Connection) -> Result<bool, String> {
    let role: Vec<Value> = redis::cmd("ROLE")
        .query(conn)
        .map_err(|e| format!("ROLE: {}", super::describe(&e)))?;
    Ok(match role.first() {
        Some(v) => text(v).as_deref() == Some("master"),
        None => false,
    })
}

/// The master of `slot` as `conn`'s node (`host`) sees it.
fn master_of(conn: &mut redis::Connection, host: &str, slot: u16) -> Result<(String, u16), String> {
    let v: Value = redis::cmd("CLUSTER")
        .arg("SLOTS")
        .query(conn)
        .map_err(|e| format!("CLUSTER SLOTS: {}", super::describe(&e)))?;
    parse_slots(&v, host)?
        .into_iter()
        .find(|r| (r.first..=r.last).contains(&slot))
        .map(|r| r.master)
        .ok_or_else(|| format!("slot {slot} is served by no node (CLUSTER SLOTS)"))
}

/// Connects to the master of `slot`: first `moved_to` (a node a `MOVED`
/// named), then through the seeds in turn from `first`. Returns the
/// connection (authenticated), its address, and the index of the seed that
/// answered (`first` when `moved_to` did).
pub(crate) fn open_master(
    nodes: &Nodes<'_>,
    slot: u16,
    moved_to: Option<&(String, u16)>,
    first: usize,
    deadline: Instant,
) -> Result<(redis::Connection, String, usize), StoreError> {
    let mut errors = Vec::new();
    if let Some((host, port)) = moved_to {
        let peer = host_port(host, *port);
        let attempt = || -> Result<redis::Connection, String> {
            let mut m = open_node(nodes, host, *port, deadline)?;
            match is_master(&mut m)? {
                true => Ok(m),
                false => Err("not a master".into()),
            }
        };
        match attempt() {
            Ok(m) => return Ok((m, peer, first)),
            Err(e) => errors.push(format!("{peer} (MOVED): {e}")),
        }
    }
    let n = nodes.seeds.len();
    for i in 0..n {
        let idx = (first + i) % n;
        let (host, port) = &nodes.seeds[idx];
        let seed = host_port(host, *port);
        let attempt = || -> Result<(redis::Connection, String), String> {
            let mut s = open_node(nodes, host, *port, deadline)?;
            let (mhost, mport) = master_of(&mut s, host, slot)?;
            let mpeer = host_port(&mhost, mport);
            let mut m = if (mhost.as_str(), mport) == (host.as_str(), *port) {
                s
            } else {
                drop(s);
                open_node(nodes, &mhost, mport, deadline)?
            };
            match is_master(&mut m)? {
                true => Ok((m, mpeer)),
                false => Err(format!("{mpeer} is not a master (yet)")),
            }
        };
        match attempt() {
            Ok((conn, peer)) => return Ok((conn, peer, idx)),
            Err(e) => errors.push(format!("seed {seed}: {e}")),
        }
        if Instant::now() >= deadline {
            break;
        }
    }
    Err(StoreError::Unavailable(format!(
        "no master of slot {slot} found: {}",
        errors.join("; ")
    )))
}

/// The masters of the cluster as a seed sees them (the first that
/// answers), each once: where a key scan must run, since each node scans
/// only its own keys.
pub(crate) fn masters(
    nodes: &Nodes<'_>,
    deadline: Instant,
) -> Result<Vec<(String, u16)>, StoreError> {
    let mut errors = Vec::new();
    for (host, port) in nodes.seeds {
        let attempt = || -> Result<Vec<(String, u16)>, String> {
            let mut s = open_node(nodes, host, *port, deadline)?;
            let v: Value = redis::cmd("CLUSTER")
                .arg("SLOTS")
                .query(&mut s)
                .map_err(|e| format!("CLUSTER SLOTS: {}", super::describe(&e)))?;
            let mut out: Vec<(String, u16)> = parse_slots(&v, host)?
                .into_iter()
                .map(|r| r.master)
                .collect();
            out.sort();
            out.dedup();
            Ok(out)
        };
        match attempt() {
            Ok(m) => return Ok(m),
            Err(e) => errors.push(format!("seed {}: {e}", host_port(host, *port))),
        }
        if Instant::now() >= deadline {
            break;
        }
    }
    Err(StoreError::Unavailable(format!(
        "no cluster node answered: {}",
        errors.join("; ")
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bulk(s: &str) -> Value {
        Value::BulkString(s.as_bytes().to_vec())
    }

    #[test]
    fn slots_parsed_with_an_empty_host_meaning_the_asked_node() {
        let v = Value::Array(vec![
            Value::Array(vec![
                Value::Int(0),
                Value::Int(5460),
                Value::Array(vec![bulk("10.0.0.1"), Value::Int(7000), bulk("id1")]),
                Value::Array(vec![bulk("10.0.0.4"), Value::Int(7003), bulk("id4")]),
            ]),
            Value::Array(vec![
                Value::Int(5461),
                Value::Int(16383),
                Value::Array(vec![bulk(""), Value::Int(7001)]),
            ]),
        ]);
        let r = parse_slots(&v, "10.0.0.9").unwrap();
        assert_eq!(
            r,
            vec![
                SlotRange {
                    first: 0,
                    last: 5460,
                    master: ("10.0.0.1".into(), 7000)
                },
                SlotRange {
                    first: 5461,
                    last: 16383,
                    master: ("10.0.0.9".into(), 7001)
                }
            ]
        );
        assert!(parse_slots(&Value::Int(1), "h").is_err());
        let bad = Value::Array(vec![Value::Array(vec![Value::Int(0)])]);
        assert!(parse_slots(&bad, "h").is_err());
    }

    #[test]
    fn an_instance_has_one_slot_the_tag_s() {
        // CLUSTER KEYSLOT answers the same (tests/cluster.rs checks it
        // against a real cluster); every key of an instance shares it.
        let p = holdfast_nsr::acl::key_prefix("edge-1");
        assert_eq!(slot_of(&p), slot_of("{edge-1}"));
        assert_eq!(slot_of(&format!("{p}s:k:rec")), slot_of(&p));
        assert_ne!(slot_of("hf:{edge-1}:"), slot_of("hf:{edge-2}:"));
    }
}
