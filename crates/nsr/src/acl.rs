//! Redis ACL users for the store (issue 30): the `ACL SETUSER` rules that
//! limit a unit's user to its own instance's keys, and a BFD relay's user
//! to reading the instances it covers. Pure functions; applying them is
//! the operator's (`holdfast nsr acl`, docs/security.md) or the
//! lab's. They follow `holdfast-nsr-redis`'s key layout and commands (its
//! tests run the whole store suite under these rules); they live here so
//! that the CLI links no Redis client.
//!
//! A unit's user (its primary, its standby and its backup share it: they
//! are the same instance) may run exactly the commands the store client
//! sends ([`UNIT_COMMANDS`], including those its Lua scripts call: Redis
//! checks a script's calls against the caller's user), on keys matching
//! `hf:{<instance>}:*` (see the crate's key layout), and no Pub/Sub
//! channel (the store uses none). Anything else is answered `NOPERM`:
//! another instance's keys, `KEYS`, `FLUSHALL`, `CONFIG`, `ACL` ...
//!
//! A relay's user may only read ([`RELAY_COMMANDS`], `%R~` key patterns)
//! the keys of the instances it covers; `SCAN` (the relay's discovery of
//! instances when started without `--instance`) only when it covers all
//! of them.
//!
//! Passwords are given to Redis as their SHA-256 (`#<hex>`), so that the
//! printed rules (and Redis's own `ACL LIST`) never carry them.
//!
//! Known issues:
//! - Needs Redis 6.2 or later (`%R~` read-only key patterns: 7.0; the
//!   relay's rules use them).
//! - `SCAN` is not filtered by key patterns: a relay user allowed it sees
//!   every key's name (not its value).
//! - A replica that authenticates to its master (`masteruser`) needs a user
//!   of its own (`+psync +replconf +ping`); not produced here.

use std::fmt;

/// Commands of a unit's user: those `RedisStore` sends (connection
/// set-up, reads, `MULTI`/`EXEC`, `WAIT`, the scripts) and those its
/// scripts call.
pub const UNIT_COMMANDS: &[&str] = &[
    // Connection set-up (`AUTH` is always allowed).
    "ping",
    "select",
    "client|setname",
    "role",
    "script|load",
    // A Redis Cluster's slot map (`redis+cluster://`).
    "cluster|slots",
    // Writes: the scripts, and what they call.
    "eval",
    "evalsha",
    "get",
    "set",
    "del",
    "exists",
    "incr",
    "rpush",
    "lindex",
    "lpop",
    "sadd",
    "srem",
    "hset",
    "hdel",
    "time",
    "wait",
    // Reads (`load`, the standby's follower).
    "smembers",
    "lrange",
    "llen",
    "hgetall",
    "multi",
    "exec",
    "discard",
];

/// Commands of a relay's user: the connection set-up and its reads.
pub const RELAY_COMMANDS: &[&str] = &[
    "ping",
    "select",
    "client|setname",
    "role",
    "script|load",
    "cluster|slots",
    "get",
    "mget",
    "hgetall",
    "smembers",
];

/// The key prefix of `instance`: `hf:{<instance>}:` (the braces make the
/// name a hash tag).
pub fn key_prefix(instance: &str) -> String {
    format!("hf:{{{instance}}}:")
}

/// The user name a unit gets by default: `hf-<instance>`.
pub fn default_user(instance: &str) -> String {
    format!("hf-{instance}")
}

/// How the user's password is given to Redis.
#[derive(Clone, PartialEq, Eq)]
pub enum AclSecret {
    /// A password, sent as its SHA-256 (`#<hex>`).
    Password(String),
    /// A password's SHA-256 in hexadecimal (64 digits), as is.
    Sha256(String),
}

impl fmt::Debug for AclSecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AclSecret::Password(_) => f.write_str("Password(<redacted>)"),
            AclSecret::Sha256(h) => write!(f, "Sha256({h})"),
        }
    }
}

/// A rule set that cannot be made.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AclError {
    #[error("instance {0:?}: must be 1..=64 characters of [A-Za-z0-9_.-]")]
    Instance(String),
    #[error("user {0:?}: must be 1..=128 characters of [A-Za-z0-9_.@-]")]
    User(String),
    #[error("password: must not be empty")]
    EmptyPassword,
    #[error("password hash: must be 64 hexadecimal digits")]
    Hash,
}

/// One user's rules: `ACL SETUSER <user> <rules...>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AclUser {
    pub user: String,
    pub rules: Vec<String>,
}

impl AclUser {
    /// The command's arguments, `ACL SETUSER` included.
    pub fn args(&self) -> Vec<String> {
        let mut a = vec!["ACL".to_string(), "SETUSER".to_string(), self.user.clone()];
        a.extend(self.rules.iter().cloned());
        a
    }
}

/// `ACL SETUSER user rules...` on one line, as `redis-cli` reads it from
/// its standard input (no rule contains a space or a quote).
impl fmt::Display for AclUser {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.args().join(" "))
    }
}

/// The SHA-256 of `password` in lower-case hexadecimal, as Redis's
/// `ACL GETUSER` shows it and `#<hash>` takes it.
pub fn password_sha256(password: &str) -> String {
    let d = ring::digest::digest(&ring::digest::SHA256, password.as_bytes());
    d.as_ref().iter().map(|b| format!("{b:02x}")).collect()
}

fn check_instance(instance: &str) -> Result<(), AclError> {
    let ok = !instance.is_empty()
        && instance.len() <= 64
        && instance
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b));
    if ok {
        Ok(())
    } else {
        Err(AclError::Instance(instance.to_string()))
    }
}

fn check_user(user: &str) -> Result<(), AclError> {
    let ok = !user.is_empty()
        && user.len() <= 128
        && user
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.@".contains(&b));
    if ok {
        Ok(())
    } else {
        Err(AclError::User(user.to_string()))
    }
}

fn secret_rule(secret: &AclSecret) -> Result<String, AclError> {
    match secret {
        AclSecret::Password(p) if p.is_empty() => Err(AclError::EmptyPassword),
        AclSecret::Password(p) => Ok(format!("#{}", password_sha256(p))),
        AclSecret::Sha256(h) => {
            if h.len() == 64 && h.bytes().all(|b| b.is_ascii_hexdigit()) {
                Ok(format!("#{}", h.to_ascii_lowercase()))
            } else {
                Err(AclError::Hash)
            }
        }
    }
}

/// `reset on #<hash>`, then `resetchannels -@all`: a user with only its
/// password, no key, no channel and no command yet.
fn head(secret: &AclSecret) -> Result<Vec<String>, AclError> {
    Ok(vec![
        "reset".to_string(),
        "on".to_string(),
        secret_rule(secret)?,
        "resetchannels".to_string(),
        "-@all".to_string(),
    ])
}

/// The rules of the user `user` of the unit `instance` (its primary,
/// standby and backup): its own keys, read and write, and
/// [`UNIT_COMMANDS`].
pub fn unit_user(instance: &str, user: &str, secret: &AclSecret) -> Result<AclUser, AclError> {
    check_instance(instance)?;
    check_user(user)?;
    let mut rules = head(secret)?;
    rules.push(format!("~{}*", key_prefix(instance)));
    rules.extend(UNIT_COMMANDS.iter().map(|c| format!("+{c}")));
    Ok(AclUser {
        user: user.to_string(),
        rules,
    })
}

/// The rules of a BFD relay's user: read-only access to the keys of
/// `instances` and [`RELAY_COMMANDS`]; with no instance, to every
/// instance's keys and `SCAN` too (the relay then discovers them).
pub fn relay_user(instances: &[&str], user: &str, secret: &AclSecret) -> Result<AclUser, AclError> {
    check_user(user)?;
    for i in instances {
        check_instance(i)?;
    }
    let mut rules = head(secret)?;
    if instances.is_empty() {
        rules.push("%R~hf:{*}:*".to_string());
    } else {
        rules.extend(instances.iter().map(|i| format!("%R~{}*", key_prefix(i))));
    }
    rules.extend(RELAY_COMMANDS.iter().map(|c| format!("+{c}")));
    if instances.is_empty() {
        rules.push("+scan".to_string());
    }
    Ok(AclUser {
        user: user.to_string(),
        rules,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pw() -> AclSecret {
        AclSecret::Password("s3cret".into())
    }

    #[test]
    fn sha256_matches_redis() {
        // `ACL SETUSER x >s3cret` then `ACL GETUSER x` shows this hash.
        assert_eq!(
            password_sha256("s3cret"),
            "1ec1c26b50d5d3c58d9583181af8076655fe00756bf7285940ba3670f99fcba0"
        );
    }

    #[test]
    fn unit_rules_own_keys_only() {
        let u = unit_user("u1", "hf-u1", &pw()).unwrap();
        assert_eq!(u.user, "hf-u1");
        assert_eq!(
            &u.rules[..6],
            &[
                "reset",
                "on",
                "#1ec1c26b50d5d3c58d9583181af8076655fe00756bf7285940ba3670f99fcba0",
                "resetchannels",
                "-@all",
                "~hf:{u1}:*",
            ]
        );
        let keys: Vec<&String> = u.rules.iter().filter(|r| r.contains('~')).collect();
        assert_eq!(keys, ["~hf:{u1}:*"]);
        // No channel, no administrative or keyspace-wide command.
        assert!(!u.rules.iter().any(|r| r.starts_with('&')));
        for bad in [
            "+@all",
            "+keys",
            "+scan",
            "+flushall",
            "+config",
            "+acl",
            "+subscribe",
        ] {
            assert!(!u.rules.iter().any(|r| r == bad), "{bad}");
        }
        // Every command the scripts call.
        for c in [
            "+evalsha",
            "+eval",
            "+script|load",
            "+time",
            "+lpop",
            "+hset",
            "+wait",
        ] {
            assert!(u.rules.iter().any(|r| r == c), "{c}");
        }
        assert!(!u.to_string().contains("s3cret"));
        assert!(!format!("{:?}", pw()).contains("s3cret"));
        assert!(u
            .to_string()
            .starts_with("ACL SETUSER hf-u1 reset on #1ec1"));
    }

    #[test]
    fn prefixes_do_not_overlap() {
        // `hf:{u1}:*` does not match u10's keys: the brace ends the name.
        let p = format!("{}*", key_prefix("u1"));
        assert_eq!(p, "hf:{u1}:*");
        assert!(!"hf:{u10}:epoch".starts_with(p.trim_end_matches('*')));
    }

    #[test]
    fn relay_rules_read_only() {
        let r = relay_user(&["u1", "u2"], "hf-relay", &pw()).unwrap();
        let keys: Vec<&String> = r.rules.iter().filter(|r| r.contains('~')).collect();
        assert_eq!(keys, ["%R~hf:{u1}:*", "%R~hf:{u2}:*"]);
        for bad in ["+eval", "+evalsha", "+set", "+scan", "+incr"] {
            assert!(!r.rules.iter().any(|x| x == bad), "{bad}");
        }
        let all = relay_user(&[], "hf-relay", &pw()).unwrap();
        assert!(all.rules.iter().any(|x| x == "%R~hf:{*}:*"));
        assert!(all.rules.iter().any(|x| x == "+scan"));
    }

    #[test]
    fn bad_names_and_secrets() {
        assert_eq!(
            unit_user("u*", "x", &pw()).unwrap_err(),
            AclError::Instance("u*".into())
        );
        assert!(unit_user("", "x", &pw()).is_err());
        assert!(unit_user("u1", "a b", &pw()).is_err());
        assert!(unit_user("u1", "x", &AclSecret::Password(String::new())).is_err());
        assert!(unit_user("u1", "x", &AclSecret::Sha256("abc".into())).is_err());
        let h = password_sha256("p").to_ascii_uppercase();
        let u = unit_user("u1", "x", &AclSecret::Sha256(h)).unwrap();
        assert_eq!(u.rules[2], format!("#{}", password_sha256("p")));
        assert!(relay_user(&["ok", "no?"], "r", &pw()).is_err());
    }
}
