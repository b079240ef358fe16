//! The controller's desired state: the record kept in etcd (issue 11).
//!
//! One [`DesiredState`] holds the hosts (their capacity and whether they
//! failed), the units (their primary and backup hosts, backup mode and
//! epoch) and the migrations in flight. It is the target, not a report:
//! when the planner ([`crate::plan`](mod@crate::plan)) decides a takeover, the unit's new
//! primary, its new epoch and its new backup are written at once, and the
//! [`Migration`] record says which steps towards that target are done, so
//! that a new leader carries on where its predecessor stopped.
//!
//! Times are [`Millis`]: milliseconds since an epoch the caller chooses
//! (the controller uses the Unix epoch in stored records). Every type is
//! serde; the record carries [`SCHEMA_VERSION`] (records replicated between
//! builds carry an explicit schema version, as in `holdfast-nsr`).
//!
//! # Known issues
//! - Capacity and weight are abstract integers (a unit's share of a host);
//!   nothing maps them to CPU or memory.
//! - The etcd key layout and the compare-and-swap around a write are the
//!   shell's (another crate); this module only defines the value.

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};

/// Milliseconds since an epoch the caller chooses. Every time in this crate
/// is one of these.
pub type Millis = u64;

/// The schema of [`DesiredState`]. A reader refuses a record whose
/// `schema_version` is newer ([`DesiredState::check_schema`]).
pub const SCHEMA_VERSION: u32 = 1;

/// A host's name (an agent host that runs units).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct HostId(pub String);

/// A unit's name (one holdfastd instance with its primary and backup).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct UnitId(pub String);

impl HostId {
    /// A host id from a name.
    pub fn new(name: impl Into<String>) -> Self {
        Self(name.into())
    }
}

impl UnitId {
    /// A unit id from a name.
    pub fn new(name: impl Into<String>) -> Self {
        Self(name.into())
    }
}

impl fmt::Display for HostId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Display for UnitId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// TENSOR §3.3.3's five failure kinds (Figure 3, E1–E5), and a hung
/// process.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FailureKind {
    /// E1: the BGP/BFD process died; container and host are fine.
    Application,
    /// E2: the container is gone (every process, the namespace).
    Container,
    /// E4: the container's (virtual) network; process and host are fine.
    ContainerNetwork,
    /// E3: the host machine.
    Host,
    /// E5: the host's network.
    HostNetwork,
    /// The BGP/BFD process stopped making progress (no watchdog ping: a
    /// SIGSTOP, a deadlock, a starved or stuck event loop); its agent
    /// killed it. Handled as an application failure (issue 25).
    Hung,
}

impl FailureKind {
    /// Host-level kinds: every unit on the host moves and the host is never
    /// reused until a manual reset.
    pub fn is_host_level(self) -> bool {
        matches!(self, FailureKind::Host | FailureKind::HostNetwork)
    }
}

/// Whether a host may carry units.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HostState {
    /// In service.
    Healthy,
    /// Failed: never a primary nor a backup again until `holdfast ctl reset
    /// HOST` (TENSOR §3.3.3: "the original server will not be re-used before
    /// a manual reset").
    Failed {
        /// The verdict that failed it.
        kind: FailureKind,
        /// When the verdict was reached.
        since: Millis,
    },
    /// Being emptied by the operator: its primaries switch over, no new
    /// primary or backup lands on it.
    Draining,
}

/// One agent host.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Host {
    /// Its name.
    pub name: HostId,
    /// The weight it may carry: its primaries, its preheated standbys, and
    /// the cold backups that land on it when another host fails.
    pub capacity: u32,
    /// In service, failed or draining.
    pub state: HostState,
    /// Its failure domain (a rack, a power feed): hosts that may fail
    /// together. A unit's backup goes outside its primary's domain when
    /// another domain has room.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub domain: Option<String>,
}

impl Host {
    /// A healthy host.
    pub fn healthy(name: impl Into<String>, capacity: u32) -> Self {
        Self {
            name: HostId::new(name),
            capacity,
            state: HostState::Healthy,
            domain: None,
        }
    }

    /// The same host in failure domain `domain`.
    pub fn in_domain(mut self, domain: impl Into<String>) -> Self {
        self.domain = Some(domain.into());
        self
    }

    /// Healthy: may be chosen as a primary or backup.
    pub fn is_usable(&self) -> bool {
        self.state == HostState::Healthy
    }

    /// Failed (until reset).
    pub fn is_failed(&self) -> bool {
        matches!(self.state, HostState::Failed { .. })
    }
}

/// How a unit's backup waits (TENSOR §3.3.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BackupMode {
    /// Created and booted at takeover: costs the backup host nothing until
    /// the primary fails.
    Cold,
    /// Kept alive, loading state at takeover: costs its weight on the
    /// backup host all the time.
    Preheated,
}

/// One unit: a holdfastd instance, where it runs and where it would go.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Unit {
    /// Its name.
    pub name: UnitId,
    /// The NSR instance it serves (the store key of `holdfast-nsr`).
    pub instance: String,
    /// The host it runs on.
    pub primary: HostId,
    /// The host it would move to; `None` when no host fits.
    pub backup: Option<HostId>,
    /// Cold or preheated.
    pub backup_mode: BackupMode,
    /// The instance's epoch: advances by one per takeover (the store
    /// fences every writer of an older one).
    pub epoch: u64,
    /// Its share of a host's capacity.
    pub weight: u32,
}

impl Unit {
    /// A unit of weight 1 with a cold backup, at epoch 1.
    pub fn new(name: impl Into<String>, primary: &HostId, backup: Option<&HostId>) -> Self {
        let name = name.into();
        Self {
            instance: name.clone(),
            name: UnitId(name),
            primary: primary.clone(),
            backup: backup.cloned(),
            backup_mode: BackupMode::Cold,
            epoch: 1,
            weight: 1,
        }
    }
}

/// Why a unit moves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MigrationReason {
    /// A localized failure.
    Failure(FailureKind),
    /// `holdfast ctl drain HOST`: a planned switchover.
    Drain,
    /// `holdfast ctl switchover UNIT`: a planned switchover.
    Switchover,
}

/// A primary that must be fenced before the takeover starts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FenceTarget {
    /// Where it runs (or ran).
    pub host: HostId,
    /// Its epoch: everything at this epoch or below is fenced.
    pub epoch: u64,
}

/// A takeover in flight. The unit in [`DesiredState::units`] already names
/// the target (`to`, `to_epoch`, `new_backup`); `step` counts the steps of
/// [`crate::plan::migration_steps`] that are done.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Migration {
    /// The unit.
    pub unit: UnitId,
    /// The old primary's host.
    pub from: HostId,
    /// The new primary's host (`from` itself for a restart in place).
    pub to: HostId,
    /// Why.
    pub reason: MigrationReason,
    /// The etcd revision of the write that started it.
    pub started_at_revision: u64,
    /// Steps done so far.
    pub step: u32,
    /// The old primary's epoch (fenced first).
    pub from_epoch: u64,
    /// The new primary's epoch (`from_epoch + 1`).
    pub to_epoch: u64,
    /// Earlier primaries of an unfinished migration this one superseded,
    /// fenced after `from`.
    pub also_fence: Vec<FenceTarget>,
    /// The backup placed for the new primary, if any host fits.
    pub new_backup: Option<HostId>,
    /// The unit's backup mode.
    pub backup_mode: BackupMode,
}

/// A record whose schema this build cannot read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("desired state has schema {found}, this build reads up to {supported}")]
pub struct SchemaError {
    /// The record's schema.
    pub found: u32,
    /// [`SCHEMA_VERSION`].
    pub supported: u32,
}

/// The controller's whole desired state.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DesiredState {
    /// [`SCHEMA_VERSION`] of the writer.
    pub schema_version: u32,
    /// Every host, by name.
    pub hosts: BTreeMap<HostId, Host>,
    /// Every unit, by name.
    pub units: BTreeMap<UnitId, Unit>,
    /// Takeovers in flight, by unit (at most one per unit).
    pub migrations: BTreeMap<UnitId, Migration>,
}

impl Default for DesiredState {
    fn default() -> Self {
        Self {
            schema_version: SCHEMA_VERSION,
            hosts: BTreeMap::new(),
            units: BTreeMap::new(),
            migrations: BTreeMap::new(),
        }
    }
}

impl DesiredState {
    /// A state with these hosts and units and no migration.
    pub fn new(
        hosts: impl IntoIterator<Item = Host>,
        units: impl IntoIterator<Item = Unit>,
    ) -> Self {
        Self {
            hosts: hosts.into_iter().map(|h| (h.name.clone(), h)).collect(),
            units: units.into_iter().map(|u| (u.name.clone(), u)).collect(),
            ..Self::default()
        }
    }

    /// Refuses a record written by a newer schema.
    pub fn check_schema(&self) -> Result<(), SchemaError> {
        if self.schema_version > SCHEMA_VERSION {
            return Err(SchemaError {
                found: self.schema_version,
                supported: SCHEMA_VERSION,
            });
        }
        Ok(())
    }

    /// The host, if known.
    pub fn host(&self, id: &HostId) -> Option<&Host> {
        self.hosts.get(id)
    }

    /// Whether the host exists and is healthy (a possible primary or backup).
    pub fn is_usable(&self, id: &HostId) -> bool {
        self.hosts.get(id).is_some_and(Host::is_usable)
    }

    /// Whether the host exists and has failed (until reset).
    pub fn is_failed(&self, id: &HostId) -> bool {
        self.hosts.get(id).is_some_and(Host::is_failed)
    }

    /// The units whose primary is on `host`, by name.
    pub fn units_on(&self, host: &HostId) -> Vec<UnitId> {
        self.units
            .values()
            .filter(|u| &u.primary == host)
            .map(|u| u.name.clone())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_through_json_with_its_schema() {
        let a = HostId::new("a");
        let b = HostId::new("b");
        let mut s = DesiredState::new(
            [Host::healthy("a", 4), Host::healthy("b", 4)],
            [Unit::new("u1", &a, Some(&b))],
        );
        if let Some(h) = s.hosts.get_mut(&b) {
            h.state = HostState::Failed {
                kind: FailureKind::HostNetwork,
                since: 42,
            };
        }
        let json = serde_json::to_string(&s).expect("encode");
        assert!(json.contains("\"schema_version\":1"), "{json}");
        assert!(json.contains("\"host_network\""), "{json}");
        let back: DesiredState = serde_json::from_str(&json).expect("decode");
        assert_eq!(back, s);
        assert!(back.check_schema().is_ok());
        assert!(back.is_failed(&b));
        assert!(!back.is_usable(&b));
        assert_eq!(back.units_on(&a), vec![UnitId::new("u1")]);
    }

    #[test]
    fn refuses_a_newer_schema() {
        let s = DesiredState {
            schema_version: SCHEMA_VERSION + 1,
            ..DesiredState::default()
        };
        assert_eq!(
            s.check_schema(),
            Err(SchemaError {
                found: SCHEMA_VERSION + 1,
                supported: SCHEMA_VERSION
            })
        );
    }
}
