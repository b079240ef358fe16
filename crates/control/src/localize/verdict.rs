//! What the localizer gives: a verdict, its finding and the evidence
//! behind it (the rules are in the module doc of [`crate::localize`]).

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

use super::{Channel, Target, Vantage};
use crate::model::{FailureKind, HostId, Millis, UnitId};

/// What a piece of evidence says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Observation {
    /// The pidfd report: the process exited.
    ProcessExited,
    /// The pidfd report: the container is gone.
    ContainerGone,
    /// The agent's report: the process hung (and was killed).
    Hung,
    /// Consecutive missed measurements on a path.
    Missed(Channel),
    /// The path answered (positive evidence, e.g. the host is reachable).
    Answered(Channel),
}

/// One piece of evidence behind a verdict.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Evidence {
    /// The vantage point.
    pub from: Vantage,
    /// About what.
    pub to: Target,
    /// What it says.
    pub what: Observation,
    /// Since when (the first miss, the report, or the last answer).
    pub since: Millis,
    /// Consecutive misses (0 for reports and answers).
    pub count: u32,
}

/// What the localization found.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Finding {
    /// E1: the unit's process died; container and host are fine.
    Application {
        /// The unit.
        unit: UnitId,
        /// Its host.
        host: HostId,
    },
    /// The unit's process hung; its agent killed it. Container and host
    /// are fine.
    Hung {
        /// The unit.
        unit: UnitId,
        /// Its host.
        host: HostId,
    },
    /// E2: the unit's container is gone; the host is fine.
    Container {
        /// The unit.
        unit: UnitId,
        /// Its host.
        host: HostId,
    },
    /// E4: the unit's network; process and host are fine.
    ContainerNetwork {
        /// The unit.
        unit: UnitId,
        /// Its host.
        host: HostId,
    },
    /// E3: the host (confirmed).
    Host {
        /// The host.
        host: HostId,
    },
    /// E5: the host's network (confirmed: permanent).
    HostNetwork {
        /// The host.
        host: HostId,
    },
    /// Note: the host is unreachable; the verdict waits for `confirm_at`.
    Suspect {
        /// The host.
        host: HostId,
        /// The kind it would be.
        kind: FailureKind,
        /// When the window ends.
        confirm_at: Millis,
    },
    /// Note: a suspected host answered inside its window (a blip).
    Recovered {
        /// The host.
        host: HostId,
    },
    /// Note: a probe missed fewer times than a failure needs, then
    /// answered. No action.
    LostProbe {
        /// Its vantage point.
        from: Vantage,
        /// Its target.
        to: Target,
        /// How many it missed.
        missed: u32,
    },
    /// Note: the controller lost a host's agent, but other vantage points
    /// still reach the host. No action.
    ControllerCutOff {
        /// The host.
        host: HostId,
    },
}

impl Finding {
    /// The failure kind, for the six that act (TENSOR's five and hung).
    pub fn failure_kind(&self) -> Option<FailureKind> {
        match self {
            Finding::Application { .. } => Some(FailureKind::Application),
            Finding::Hung { .. } => Some(FailureKind::Hung),
            Finding::Container { .. } => Some(FailureKind::Container),
            Finding::ContainerNetwork { .. } => Some(FailureKind::ContainerNetwork),
            Finding::Host { .. } => Some(FailureKind::Host),
            Finding::HostNetwork { .. } => Some(FailureKind::HostNetwork),
            _ => None,
        }
    }

    /// Whether the controller acts on it.
    pub fn acts(&self) -> bool {
        self.failure_kind().is_some()
    }
}

/// A finding with its evidence and timing.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Verdict {
    /// What was found.
    pub finding: Finding,
    /// The measurements behind it.
    pub evidence: Vec<Evidence>,
    /// The first bad measurement among the evidence.
    pub first_bad: Millis,
    /// When it was reached.
    pub at: Millis,
}

impl Verdict {
    /// From the first bad measurement to the verdict.
    pub fn detection_ms(&self) -> Millis {
        self.at.saturating_sub(self.first_bad)
    }

    /// The distinct vantage points of its evidence.
    pub fn vantages(&self) -> BTreeSet<Vantage> {
        self.evidence.iter().map(|e| e.from.clone()).collect()
    }
}
