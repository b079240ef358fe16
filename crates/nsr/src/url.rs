//! The state store's address: `redis://`, `rediss://` (TLS),
//! `redis-sentinel://` or `redis+cluster://` (`rediss+cluster://`) URLs, parsed with `FromStr` and written back with
//! `Display` (the configuration's `[nsr] store` value, which
//! `holdfast-config` deserialises into this type).
//!
//! Known issues:
//! - Redis URL query parameters (`?protocol=resp3`, …) and Unix socket
//!   paths (`redis+unix://`) are not accepted.
//! - Sentinel URLs carry no credentials (see `holdfast-nsr-redis`).

use serde::de::{self, Deserializer, Visitor};
use serde::{Deserialize, Serialize, Serializer};
use std::fmt;
use std::str::FromStr;

/// Where the NSR state store lives (the configuration's `[nsr] store`).
/// `Debug` does not print the password; `Display` (and `Serialize`) does, so
/// that the written value parses back to the same one: use
/// [`StoreUrl::redacted`] for logs and errors.
#[derive(Clone, PartialEq, Eq, Hash)]
pub enum StoreUrl {
    /// `redis://[user:password@]host[:port][/db]` or `rediss://` (TLS).
    Redis {
        tls: bool,
        host: String,
        port: u16,
        db: u32,
        username: Option<String>,
        password: Option<String>,
    },
    /// `redis-sentinel://host:port,host:port/mastername`.
    Sentinel {
        sentinels: Vec<(String, u16)>,
        master: String,
    },
    /// `redis+cluster://[user:password@]host:port,host:port` or
    /// `rediss+cluster://` (TLS): seed nodes of a Redis Cluster, asked for
    /// the master of the instance's slot. The cluster has database 0 only.
    Cluster {
        tls: bool,
        nodes: Vec<(String, u16)>,
        username: Option<String>,
        password: Option<String>,
    },
}

impl fmt::Debug for StoreUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StoreUrl::Redis {
                tls,
                host,
                port,
                db,
                username,
                password,
            } => f
                .debug_struct("Redis")
                .field("tls", tls)
                .field("host", host)
                .field("port", port)
                .field("db", db)
                .field("username", username)
                .field("password", &password.as_ref().map(|_| "<redacted>"))
                .finish(),
            StoreUrl::Sentinel { sentinels, master } => f
                .debug_struct("Sentinel")
                .field("sentinels", sentinels)
                .field("master", master)
                .finish(),
            StoreUrl::Cluster {
                tls,
                nodes,
                username,
                password,
            } => f
                .debug_struct("Cluster")
                .field("tls", tls)
                .field("nodes", nodes)
                .field("username", username)
                .field("password", &password.as_ref().map(|_| "<redacted>"))
                .finish(),
        }
    }
}

fn parse_host_port(s: &str, default_port: u16) -> Result<(String, u16), String> {
    let (host, port) = if let Some(rest) = s.strip_prefix('[') {
        let (h, after) = rest
            .split_once(']')
            .ok_or_else(|| format!("{s:?}: unterminated '['"))?;
        h.parse::<std::net::Ipv6Addr>()
            .map_err(|_| format!("{s:?}: bad IPv6 address"))?;
        match after.strip_prefix(':') {
            Some(p) => (h, Some(p)),
            None if after.is_empty() => (h, None),
            None => return Err(format!("{s:?}: junk after ']'")),
        }
    } else {
        match s.split_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (s, None),
        }
    };
    let valid_host = !host.is_empty()
        && host
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-.:_".contains(&b));
    if !valid_host {
        return Err(format!("{s:?}: bad host"));
    }
    let port = match port {
        Some(p) => p
            .parse::<u16>()
            .ok()
            .filter(|p| *p != 0)
            .ok_or_else(|| format!("{s:?}: bad port"))?,
        None => default_port,
    };
    Ok((host.to_string(), port))
}

/// `user:password@rest`, `:password@rest`, `user@rest` or `rest`: the user,
/// the password and the rest.
fn credentials(s: &str) -> (Option<String>, Option<String>, &str) {
    let Some((auth, rest)) = s.rsplit_once('@') else {
        return (None, None, s);
    };
    match auth.split_once(':') {
        Some((u, p)) => (
            (!u.is_empty()).then(|| u.to_string()),
            Some(p.to_string()),
            rest,
        ),
        None => (Some(auth.to_string()), None, rest),
    }
}

/// `user:password@`, as [`credentials`] reads it back.
fn write_credentials(
    f: &mut fmt::Formatter<'_>,
    username: &Option<String>,
    password: &Option<String>,
) -> fmt::Result {
    match (username, password) {
        (Some(u), Some(p)) => write!(f, "{u}:{p}@"),
        (None, Some(p)) => write!(f, ":{p}@"),
        (Some(u), None) => write!(f, "{u}@"),
        (None, None) => Ok(()),
    }
}

impl FromStr for StoreUrl {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        if let Some(rest) = s.strip_prefix("redis-sentinel://") {
            let (hosts, master) = rest
                .split_once('/')
                .ok_or_else(|| format!("{s:?}: missing \"/mastername\""))?;
            if master.is_empty() || master.contains('/') {
                return Err(format!("{s:?}: missing or bad master name"));
            }
            let sentinels = hosts
                .split(',')
                .map(|h| parse_host_port(h, 26379))
                .collect::<Result<Vec<_>, _>>()?;
            return Ok(StoreUrl::Sentinel {
                sentinels,
                master: master.to_string(),
            });
        }
        let cluster = if let Some(r) = s.strip_prefix("rediss+cluster://") {
            Some((true, r))
        } else {
            s.strip_prefix("redis+cluster://").map(|r| (false, r))
        };
        if let Some((tls, rest)) = cluster {
            let (username, password, hostpart) = credentials(rest);
            let hosts = match hostpart.split_once('/') {
                Some((h, "" | "0")) => h,
                Some(_) => return Err(format!("{s:?}: a cluster has database 0 only")),
                None => hostpart,
            };
            let nodes = hosts
                .split(',')
                .map(|h| parse_host_port(h, 6379))
                .collect::<Result<Vec<_>, _>>()?;
            return Ok(StoreUrl::Cluster {
                tls,
                nodes,
                username,
                password,
            });
        }
        let (tls, rest) = if let Some(r) = s.strip_prefix("rediss://") {
            (true, r)
        } else if let Some(r) = s.strip_prefix("redis://") {
            (false, r)
        } else {
            return Err(format!(
                "{s:?}: scheme must be redis://, rediss://, redis-sentinel://, redis+cluster:// or rediss+cluster://"
            ));
        };
        let (username, password, hostpart) = credentials(rest);
        let (hp, db) = match hostpart.split_once('/') {
            Some((hp, "")) => (hp, 0),
            Some((hp, d)) => (
                hp,
                d.parse()
                    .map_err(|_| format!("{s:?}: database must be a number"))?,
            ),
            None => (hostpart, 0),
        };
        let (host, port) = parse_host_port(hp, 6379)?;
        Ok(StoreUrl::Redis {
            tls,
            host,
            port,
            db,
            username,
            password,
        })
    }
}

impl StoreUrl {
    /// The user and the password of a URL that carries them (`redis://`,
    /// `rediss://`, `redis+cluster://`); `None` for Sentinel.
    pub fn credentials_mut(&mut self) -> Option<(&mut Option<String>, &mut Option<String>)> {
        match self {
            StoreUrl::Redis {
                username, password, ..
            }
            | StoreUrl::Cluster {
                username, password, ..
            } => Some((username, password)),
            StoreUrl::Sentinel { .. } => None,
        }
    }

    /// The URL with the password replaced by `***`, for logs and errors.
    pub fn redacted(&self) -> String {
        match self {
            StoreUrl::Redis {
                password: Some(_), ..
            }
            | StoreUrl::Cluster {
                password: Some(_), ..
            } => {
                let mut c = self.clone();
                if let StoreUrl::Redis { password, .. } | StoreUrl::Cluster { password, .. } =
                    &mut c
                {
                    *password = Some("***".into());
                }
                c.to_string()
            }
            _ => self.to_string(),
        }
    }
}

impl fmt::Display for StoreUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let hp = |h: &str, p: u16| {
            if h.contains(':') {
                format!("[{h}]:{p}")
            } else {
                format!("{h}:{p}")
            }
        };
        match self {
            StoreUrl::Redis {
                tls,
                host,
                port,
                db,
                username,
                password,
            } => {
                f.write_str(if *tls { "rediss://" } else { "redis://" })?;
                write_credentials(f, username, password)?;
                write!(f, "{}/{db}", hp(host, *port))
            }
            StoreUrl::Sentinel { sentinels, master } => {
                let hosts: Vec<String> = sentinels.iter().map(|(h, p)| hp(h, *p)).collect();
                write!(f, "redis-sentinel://{}/{master}", hosts.join(","))
            }
            StoreUrl::Cluster {
                tls,
                nodes,
                username,
                password,
            } => {
                f.write_str(if *tls {
                    "rediss+cluster://"
                } else {
                    "redis+cluster://"
                })?;
                write_credentials(f, username, password)?;
                let hosts: Vec<String> = nodes.iter().map(|(h, p)| hp(h, *p)).collect();
                f.write_str(&hosts.join(","))
            }
        }
    }
}

impl Serialize for StoreUrl {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for StoreUrl {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = StoreUrl;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(
                    "a redis://, rediss://, redis-sentinel://, redis+cluster:// or rediss+cluster:// URL",
                )
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<StoreUrl, E> {
                v.parse().map_err(E::custom)
            }
        }
        d.deserialize_str(V)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sentinel_default_port_and_round_trip() {
        let u: StoreUrl = "redis-sentinel://h1,[2001:db8::1]:26380/mymaster"
            .parse()
            .unwrap();
        assert_eq!(
            u,
            StoreUrl::Sentinel {
                sentinels: vec![("h1".into(), 26379), ("2001:db8::1".into(), 26380)],
                master: "mymaster".into(),
            }
        );
        assert_eq!(u.to_string().parse::<StoreUrl>().unwrap(), u);
        assert!("redis-sentinel://h1".parse::<StoreUrl>().is_err());
        assert!("http://h1".parse::<StoreUrl>().is_err());
    }

    #[test]
    fn cluster_urls_round_trip() {
        let u: StoreUrl = "redis+cluster://hf-edge:pw@10.0.0.1:7000,[2001:db8::2],h3:7002"
            .parse()
            .unwrap();
        assert_eq!(
            u,
            StoreUrl::Cluster {
                tls: false,
                nodes: vec![
                    ("10.0.0.1".into(), 7000),
                    ("2001:db8::2".into(), 6379),
                    ("h3".into(), 7002)
                ],
                username: Some("hf-edge".into()),
                password: Some("pw".into()),
            }
        );
        assert_eq!(u.to_string().parse::<StoreUrl>().unwrap(), u);
        assert_eq!(
            u.redacted(),
            "redis+cluster://hf-edge:***@10.0.0.1:7000,[2001:db8::2]:6379,h3:7002"
        );
        assert!(!format!("{u:?}").contains("pw\""));
        let t: StoreUrl = "rediss+cluster://h1:7000/0".parse().unwrap();
        assert!(matches!(t, StoreUrl::Cluster { tls: true, .. }), "{t:?}");
        let e = "redis+cluster://h1:7000/1".parse::<StoreUrl>().unwrap_err();
        assert!(e.contains("database 0 only"), "{e}");
        assert!("redis+cluster://h1:0".parse::<StoreUrl>().is_err());
    }

    #[test]
    fn redacted_and_serde() {
        let u: StoreUrl = "redis://:s3cret@h:7000/1".parse().unwrap();
        assert_eq!(u.redacted(), "redis://:***@h:7000/1");
        assert!(!format!("{u:?}").contains("s3cret"));
        // Serialised as the URL itself, so that a written config reloads.
        let json = serde_json::to_string(&u).unwrap();
        assert_eq!(json, "\"redis://:s3cret@h:7000/1\"");
        assert_eq!(serde_json::from_str::<StoreUrl>(&json).unwrap(), u);
        let e = serde_json::from_str::<StoreUrl>("\"redis://h:0\"").unwrap_err();
        assert!(e.to_string().contains("bad port"), "{e}");
    }
}
