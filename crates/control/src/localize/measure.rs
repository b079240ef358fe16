//! What the localizer takes in: a measurement from a vantage point of a
//! target over a channel, or a process state an agent reports (the
//! module doc of [`crate::localize`] says who measures what).

use serde::{Deserialize, Serialize};

use crate::model::{HostId, UnitId};

/// Where a measurement is taken from.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Vantage {
    /// The controller (gRPC heartbeats).
    Controller,
    /// The agent server (the BFD relay's host).
    AgentServer,
    /// The agent on a host.
    Agent(HostId),
}

/// What a measurement is about.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Target {
    /// A host (its agent, or its address).
    Host(HostId),
    /// A unit (its container, or its address).
    Unit(UnitId),
}

/// How a path measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Channel {
    /// The controller's gRPC heartbeat.
    Heartbeat,
    /// An IP SLA probe.
    IpSla,
    /// The agent's check of the unit's control socket.
    ControlSocket,
    /// A TCP handshake with the unit's service port (holdfastd's BGP
    /// port), from an agent or the agent server: a reset (nothing listens)
    /// misses, as the controller's own heartbeat to the unit does.
    Service,
}

/// A unit's process as its agent sees it (pidfd).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ProcessState {
    /// holdfastd runs.
    Running,
    /// holdfastd exited; its container is still there.
    Exited,
    /// Every process of the container is gone, or its namespace.
    ContainerGone,
    /// holdfastd hung (no watchdog ping), and its agent killed it.
    Hung,
}

/// One measurement.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Measurement {
    /// The controller's gRPC heartbeat to a host's agent or a unit's
    /// container.
    Heartbeat {
        /// The host or unit.
        to: Target,
        /// Answered in time.
        ok: bool,
    },
    /// The agent on the unit's host reports its process state (pidfd): sent
    /// when it changes.
    Process {
        /// The unit.
        unit: UnitId,
        /// Its state.
        state: ProcessState,
    },
    /// The agent on the unit's host checked the unit's control socket.
    ControlSocket {
        /// The unit.
        unit: UnitId,
        /// It answered.
        answers: bool,
    },
    /// An IP SLA probe.
    Probe {
        /// Who sent it.
        from: Vantage,
        /// To a host's or a unit's address.
        to: Target,
        /// Answered in time.
        ok: bool,
    },
    /// The same probe of a unit, read as a check of its service: answered
    /// by holdfastd (a completed handshake), not by a reset.
    Service {
        /// Who sent it.
        from: Vantage,
        /// The unit.
        unit: UnitId,
        /// holdfastd answered.
        answers: bool,
    },
}
