//! `holdfast-controller`: the control plane's replicas (TENSOR §3.3). Three
//! replicas elect a leader on an etcd lease; desired state (units, failed
//! hosts, the store epoch, the migrations in flight) lives in etcd; a new
//! leader carries on a migration its predecessor began, each step exactly
//! once; every command carries the leader's fencing token.
//!
//! * [`elect`]: the pure election core (`Elector::handle(now, Input) ->
//!   Vec<Output>`) and its timing rule (act only until the last renewal's
//!   send time + TTL − margin).
//! * [`fence`], [`state`], [`store`] (from `holdfast-etcd`, which the host
//!   agents use too): the fencing token (the agents check it with
//!   `holdfast_control_api::accept_token`); the key layout, the JSON
//!   records (schema-versioned) and the pure [`next_step`] of a migration;
//!   etcd over several endpoints, fenced transactions.
//! * [`placement`]: the desired state as `holdfast-control`'s model, and
//!   TRIPOD's min-churn choice of a unit's new backup after a migration.
//! * [`hub`]: the agents' `Attach` streams (gRPC), accepted only while the
//!   replica may act as leader; commands with the leader's token, their
//!   results, and unit events for failure detection.
//! * [`probes`]: the agents' probe plans (who probes whom,
//!   `holdfast_control::probe_plan`), pushed on their streams.
//! * [`sense`]: the leader's failure localization: the controller's own
//!   heartbeats to hosts and units, the agents' and the agent server's
//!   measurements, fed to `holdfast_control::Localizer`.
//! * [`metrics`]: Prometheus metrics of the replica, served at `/metrics`
//!   (`holdfast_etcd::metrics::serve`).
//! * [`replica`]: the I/O shell (elector and worker tasks, status file):
//!   acting on the localizer's verdicts and on agents' leases expiring in
//!   etcd, and migrations carried out through the agents (fence, takeover,
//!   address).
//!
//! See docs/control-plane.md.

pub mod elect;
pub mod hub;
pub mod metrics;
pub mod placement;
pub mod probes;
pub mod replica;
pub mod sense;

pub use holdfast_etcd::{fence, state, store};

pub use elect::{Demotion, Elector, Role, Timing};
pub use fence::Token;
pub use replica::{Config, Replica, Status};
pub use state::{
    next_step, AgentRecord, Keys, Migration, MigrationState, Next, OperatorRequest, UnitRecord,
    MIGRATION_STEPS, RESTART_STEPS, SCHEMA, SWITCHOVER_STEPS,
};
pub use store::{Outcome, Store, StoreError};
