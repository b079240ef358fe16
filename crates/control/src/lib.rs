//! Holdfast's control plane as pure cores (issue 11): no I/O, no clocks, no
//! threads. Time is an input ([`Millis`], milliseconds since an epoch the
//! caller chooses). The controller's shell (etcd, gRPC, the agents) feeds
//! these functions and carries out what they return.
//!
//! - [`model`]: the desired state kept in etcd ([`DesiredState`], with
//!   [`SCHEMA_VERSION`]): hosts with capacity and failed/draining state,
//!   units with primary, backup, backup mode, epoch and weight, and the
//!   migrations in flight.
//! - [`localize`]: failure localization (TENSOR §3.3.2 inter-component
//!   measurements, §3.3.3 failure location). [`Localizer::handle`] takes
//!   heartbeats, pidfd and hang reports and IP SLA probes and returns
//!   [`Verdict`]s: the five failure kinds (application, container,
//!   container network, host, host network), a hung process (its agent
//!   found it frozen and killed it; handled as an application failure)
//!   and the notes that are not
//!   failures (a lost probe, a controller cut off from a healthy host, a
//!   suspected host and its recovery). It acts only on agreeing evidence
//!   from two vantage points, holds host-level verdicts for a 3 s
//!   confirmation, and never judges a failed host again until reset.
//! - [`placement`]: TRIPOD §V min-churn predictive backup placement
//!   ([`place`]): backups go where the work lands after any single host
//!   failure without overloading a survivor, and a valid backup never
//!   moves. [`failure_loads`] reports each host's load after each other
//!   host's failure (for `holdfast ctl units`).
//! - [`probe_plan`](mod@probe_plan): who probes whom (issue 29): hosts
//!   on a ring across segments with a bounded fanout, each unit by its
//!   backup host's agent, and each segment by its agent server, so an
//!   agent's probes do not grow with the fleet.
//! - [`plan`](mod@plan): from a verdict or an operator command (drain,
//!   reset, switchover) to fenced, resumable steps and the new desired
//!   state ([`plan()`], [`resume`], [`complete`]); epochs advance by one
//!   per takeover.
//!
//! # Known issues
//! - The etcd I/O, leader election, gRPC heartbeats and IP SLA probes, the
//!   agents, and `holdfast ctl` are not here (other crates of issue 11).
//! - Placement is greedy (TRIPOD solves a relaxed LP and rounds) and plans
//!   for single host failures only; see [`placement`].
//! - Localization gives nothing for partial partitions; see
//!   [`localize`].
//! - Steps outside a migration carry no progress record; see
//!   [`plan`](mod@plan).

pub mod localize;
pub mod model;
pub mod placement;
pub mod plan;
pub mod probe_plan;

pub use localize::{
    AppPolicy, Channel, Evidence, Finding, LocalizeConfig, Localizer, Measurement, Observation,
    ProcessState, Target, Vantage, Verdict,
};
pub use model::{
    BackupMode, DesiredState, FailureKind, FenceTarget, Host, HostId, HostState, Migration,
    MigrationReason, Millis, SchemaError, Unit, UnitId, SCHEMA_VERSION,
};
pub use placement::{
    after_failure, failure_loads, place, place_partial, HostLoad, Placement, PlacementError,
};
pub use plan::{
    complete, migration_steps, plan, resume, Command, Input, Plan, PlanContext, PlanError,
    PlannedStep, Progress, Step,
};
pub use probe_plan::{full_mesh, probe_plan, PlanInput, ProbePlan, DEFAULT_FANOUT};
