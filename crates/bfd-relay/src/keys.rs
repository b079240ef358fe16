//! `--keys FILE`: the authentication keys of the sessions the relay covers.
//!
//! The replicated record says which authentication a session sends with
//! (type and key ID, `holdfast_bfd::AuthRef`), never the key. A relay that
//! covers authenticated sessions is given the keys in a TOML file, readable
//! only by it:
//!
//! ```toml
//! [[key]]
//! instance = "edge-1"
//! peer = "198.18.0.1"   # optional: without it, every session of the instance
//! secret = "s3cret"
//! ```
//!
//! A per-peer entry wins over the instance's.

use serde::Deserialize;
use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::Path;

use crate::RelayError;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    #[serde(default)]
    key: Vec<Entry>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Entry {
    instance: String,
    peer: Option<IpAddr>,
    secret: String,
}

/// Keys by instance and peer (`None`: every peer of the instance).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Keys(BTreeMap<(String, Option<IpAddr>), Vec<u8>>);

impl Keys {
    /// Parses the TOML text of a keys file.
    pub fn parse(text: &str) -> Result<Keys, RelayError> {
        let f: File = toml::from_str(text).map_err(|e| RelayError::Keys(e.to_string()))?;
        let mut keys = Keys::default();
        for (i, e) in f.key.into_iter().enumerate() {
            if e.secret.is_empty() || e.secret.len() > 20 {
                return Err(RelayError::Keys(format!(
                    "key[{i}].secret: 1 to 20 octets (16 for a password or MD5)"
                )));
            }
            keys.insert(&e.instance, e.peer, e.secret.into_bytes());
        }
        Ok(keys)
    }

    /// Reads and parses a keys file.
    pub fn load(path: &Path) -> Result<Keys, RelayError> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| RelayError::Keys(format!("{}: {e}", path.display())))?;
        Keys::parse(&text).map_err(|e| RelayError::Keys(format!("{}: {e}", path.display())))
    }

    pub fn insert(&mut self, instance: &str, peer: Option<IpAddr>, secret: Vec<u8>) {
        self.0.insert((instance.to_string(), peer), secret);
    }

    /// The key of `instance`'s session with `peer`.
    pub fn get(&self, instance: &str, peer: IpAddr) -> Option<&[u8]> {
        self.0
            .get(&(instance.to_string(), Some(peer)))
            .or_else(|| self.0.get(&(instance.to_string(), None)))
            .map(Vec::as_slice)
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn per_peer_wins_and_errors_name_the_key() {
        let k = Keys::parse(
            "[[key]]\ninstance = \"edge-1\"\nsecret = \"all\"\n\
             [[key]]\ninstance = \"edge-1\"\npeer = \"198.18.0.1\"\nsecret = \"one\"\n",
        )
        .unwrap();
        assert_eq!(
            k.get("edge-1", "198.18.0.1".parse().unwrap()),
            Some(&b"one"[..])
        );
        assert_eq!(
            k.get("edge-1", "198.18.0.9".parse().unwrap()),
            Some(&b"all"[..])
        );
        assert_eq!(k.get("edge-2", "198.18.0.1".parse().unwrap()), None);
        let e = Keys::parse("[[key]]\ninstance = \"a\"\nsecret = \"\"\n").unwrap_err();
        assert!(e.to_string().contains("key[0].secret"), "{e}");
        let e = Keys::parse("[[key]]\ninstance = \"a\"\nsecret = \"x\"\nkey_id = 1\n").unwrap_err();
        assert!(e.to_string().contains("key_id"), "{e}");
    }
}
