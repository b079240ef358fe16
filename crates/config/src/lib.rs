//! Holdfast configuration: the TOML file of `holdfastd`, validated at load.
//!
//! [`load`]/[`parse`] return a [`Config`] whose every reference (instance,
//! policy, prefix list) resolves, plus warnings for the daemon to log;
//! [`check`] is `holdfast config check`.
//! Errors name the offending key (`neighbor[2].remote_asn: must be
//! 1..=4294967295`); TOML syntax and type errors keep toml's line and
//! column. [`diff`] compares two configurations for a reload. The file
//! format is documented in `docs/config.md`.
//!
//! Known issues:
//! - Only the first validation error is reported.
//! - `Network::prefixes` does not deduplicate overlapping `[[network]]`
//!   entries; the RIB sees each originated prefix once per entry.
//! - `Serialize` writes secrets (`md5_password`, a Redis password in
//!   `nsr.store`) in clear text so that the output reloads; `Debug` redacts.

#![forbid(unsafe_code)]

mod bfd;
mod diff;
mod load;
mod model;
mod policy;
mod values;

pub use bfd::{BfdAuth, BfdAuthType, BfdDefaults, BfdPassword, BfdSettings, MAX_INTERVAL_MS};
pub use diff::{diff, kernel_changes, ConfigDiff, KernelAction, KernelChange};
pub use model::{
    Bmp, BmpTable, Global, Instance, Kernel, LogFormat, Mrt, MrtKind, MrtTable, Neighbor,
    NeighborKey, Network, Nsr, Rpki, DEFAULT_INSTANCE, DEFAULT_KERNEL_PROTOCOL,
};
pub use policy::{
    AsPathRegex, ListAction, Match, MatchFamily, PolicyDef, PolicyDefault, PrefixListDef,
    PrefixListEntry, PrefixMatch, Prepend, RpkiState, SetActions, Term, TermAction,
};
pub use values::{
    parse_prefix_strict, AfiSafi, CommunityValue, ExtCommunityValue, LargeCommunityValue, Md5Key,
    NsrStore, PolicyRef,
};

use serde::Serialize;
use std::path::{Path, PathBuf};

/// A validated configuration. Serialising it (e.g. with `toml::to_string`)
/// yields a file that [`parse`] accepts and that loads to an equal value.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Config {
    pub global: Global,
    /// Every routing instance; always contains [`DEFAULT_INSTANCE`] first.
    #[serde(rename = "instance")]
    pub instances: Vec<Instance>,
    #[serde(rename = "neighbor")]
    pub neighbors: Vec<Neighbor>,
    #[serde(rename = "policy")]
    pub policies: Vec<PolicyDef>,
    #[serde(rename = "prefix_list")]
    pub prefix_lists: Vec<PrefixListDef>,
    /// Locally originated routes from `[[network]]` and `[[instance.static]]`.
    #[serde(rename = "network")]
    pub networks: Vec<Network>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nsr: Option<Nsr>,
    /// `[bfd]`: defaults of the neighbours' BFD sessions.
    pub bfd: BfdDefaults,
    /// `[[mrt]]`: MRT dumps and update logs.
    #[serde(rename = "mrt", skip_serializing_if = "Vec::is_empty")]
    pub mrt: Vec<Mrt>,
    /// `[[bmp]]`: BMP collectors.
    #[serde(rename = "bmp", skip_serializing_if = "Vec::is_empty")]
    pub bmp: Vec<Bmp>,
    /// `[[rpki]]`: RPKI caches (RTR).
    #[serde(rename = "rpki", skip_serializing_if = "Vec::is_empty")]
    pub rpki: Vec<Rpki>,
}

impl Config {
    pub fn instance(&self, name: &str) -> Option<&Instance> {
        self.instances.iter().find(|i| i.name == name)
    }
    pub fn neighbor(&self, key: &NeighborKey) -> Option<&Neighbor> {
        self.neighbors
            .iter()
            .find(|n| n.instance == key.instance && n.address == key.address)
    }
    pub fn policy(&self, name: &str) -> Option<&PolicyDef> {
        self.policies.iter().find(|p| p.name == name)
    }
    pub fn prefix_list(&self, name: &str) -> Option<&PrefixListDef> {
        self.prefix_lists.iter().find(|p| p.name == name)
    }
    /// Neighbours of one instance.
    pub fn neighbors_of<'a>(
        &'a self,
        instance: &'a str,
    ) -> impl Iterator<Item = &'a Neighbor> + 'a {
        self.neighbors
            .iter()
            .filter(move |n| n.instance == instance)
    }
}

/// Why a configuration was rejected.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// TOML syntax, unknown key, or a value of the wrong type or format.
    /// `message` starts with the key path when it is known and contains
    /// toml's "line L, column C" report.
    #[error("{message}")]
    Syntax {
        key: Option<String>,
        line: Option<usize>,
        column: Option<usize>,
        message: String,
    },
    /// A well-formed value that is out of range or inconsistent.
    #[error("{key}: {message}")]
    Invalid { key: String, message: String },
}

impl ConfigError {
    /// The dotted key path the error is about (`neighbor[0].import`).
    pub fn key(&self) -> Option<&str> {
        match self {
            ConfigError::Io { .. } => None,
            ConfigError::Syntax { key, .. } => key.as_deref(),
            ConfigError::Invalid { key, .. } => Some(key),
        }
    }
}

/// Reads and validates the configuration file at `path`.
pub fn load(path: &Path) -> Result<(Config, Vec<String>), ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    parse(&text)
}

/// Reads a password file (`[nsr] store_password_file`, `holdfast nsr acl
/// --password-file`): its one line, not empty; the file must not be
/// readable by others. Errors name `key` and the path, never the content.
pub fn read_password_file(key: &str, path: &Path) -> Result<String, ConfigError> {
    load::read_password_file(key, path)
}

/// What `holdfast config check` reports about a configuration file that
/// holdfastd would accept.
#[derive(Debug, Clone, Serialize)]
pub struct ConfigCheck {
    pub file: PathBuf,
    pub instances: usize,
    pub neighbors: usize,
    pub policies: usize,
    pub networks: usize,
    pub nsr: bool,
    pub mrt: usize,
    pub warnings: Vec<String>,
}

/// [`load`]s `path` as holdfastd does at start-up and on reload, and sums
/// it up. Nothing is bound or started. Every reference (instance, policy,
/// prefix list) resolves and every policy action is one holdfastd has, so
/// a file that passes compiles into the daemon's policies and sessions.
pub fn check(path: &Path) -> Result<ConfigCheck, ConfigError> {
    let (cfg, warnings) = load(path)?;
    Ok(ConfigCheck {
        file: path.to_path_buf(),
        instances: cfg.instances.len(),
        neighbors: cfg.neighbors.len(),
        policies: cfg.policies.len(),
        networks: cfg.networks.len(),
        nsr: cfg.nsr.as_ref().is_some_and(|n| n.enabled),
        mrt: cfg.mrt.len(),
        warnings,
    })
}

/// Parses and validates configuration text. The second value holds
/// warnings (e.g. RFC 8212 defaults) that the daemon should log.
pub fn parse(text: &str) -> Result<(Config, Vec<String>), ConfigError> {
    load::parse(text)
}
