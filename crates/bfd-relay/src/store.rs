//! Reading the units' BFD records from the store (`holdfast_nsr_redis`'s
//! client and key layout), one pipelined round trip per instance and poll.

use crate::core::Snapshot;
use crate::RelayError;
use holdfast_nsr::StoreUrl;
use holdfast_nsr_redis::RedisStore;
use std::time::Duration;

/// One instance's store, read-only.
pub struct Watched {
    store: RedisStore,
}

impl Watched {
    pub fn connect(url: &StoreUrl, instance: &str, timeout: Duration) -> Result<Self, RelayError> {
        Ok(Watched {
            store: RedisStore::connect(url, instance, timeout)?,
        })
    }

    pub fn instance(&self) -> &str {
        self.store.instance()
    }

    /// Reads the epoch, the BFD hash and the BGP sessions' replicated
    /// sequences (`rcv`, `una`: they move with every keepalive while the
    /// unit lives).
    pub fn poll(&mut self) -> Result<Snapshot, RelayError> {
        let prefix = self.store.key_prefix().to_string();
        let instance = self.store.instance().to_string();
        let (epoch, records, liveness) = self.store.with_connection(|c| {
            let (epoch, mut records, members): (Option<u64>, Vec<(String, String)>, Vec<String>) =
                redis::pipe()
                    .cmd("GET")
                    .arg(format!("{prefix}epoch"))
                    .cmd("HGETALL")
                    .arg(format!("{prefix}bfd"))
                    .cmd("SMEMBERS")
                    .arg(format!("{prefix}sessions"))
                    .query(c)?;
            records.sort();
            let mut liveness = Vec::new();
            if !members.is_empty() {
                let mut keys = Vec::with_capacity(members.len() * 2);
                let mut members = members;
                members.sort();
                for m in &members {
                    keys.push(format!("{prefix}s:{m}:rcv"));
                    keys.push(format!("{prefix}s:{m}:una"));
                }
                let vals: Vec<Option<String>> = redis::cmd("MGET").arg(&keys).query(c)?;
                liveness = vals.into_iter().map(Option::unwrap_or_default).collect();
            }
            Ok((epoch.unwrap_or(0), records, liveness))
        })?;
        Ok(Snapshot {
            instance,
            epoch,
            records,
            liveness,
        })
    }
}

/// Instances that have BFD records (`hf:{NAME}:bfd` keys), for a relay
/// started without `--instance`. Bounded: at most 1,000 SCAN calls.
pub fn discover(url: &StoreUrl, timeout: Duration) -> Result<Vec<String>, RelayError> {
    let mut names = Vec::new();
    // A cluster's nodes each scan their own keys only.
    for server in RedisStore::masters(url, timeout)? {
        names.extend(scan_bfd_keys(&server, timeout)?);
    }
    let mut out: Vec<String> = names
        .iter()
        .filter_map(|k| k.strip_prefix("hf:{")?.strip_suffix("}:bfd"))
        .map(str::to_string)
        .collect();
    out.sort();
    out.dedup();
    Ok(out)
}

/// The `hf:{*}:bfd` keys of one server.
fn scan_bfd_keys(url: &StoreUrl, timeout: Duration) -> Result<Vec<String>, RelayError> {
    let mut s = RedisStore::connect(url, "_relay", timeout)?;
    Ok(s.with_connection(|c| {
        let mut cursor: u64 = 0;
        let mut names = Vec::new();
        for _ in 0..1000 {
            let (next, keys): (u64, Vec<String>) = redis::cmd("SCAN")
                .arg(cursor)
                .arg("MATCH")
                .arg("hf:{*}:bfd")
                .arg("COUNT")
                .arg(1000)
                .query(c)?;
            names.extend(keys);
            cursor = next;
            if cursor == 0 {
                break;
            }
        }
        Ok(names)
    })?)
}
