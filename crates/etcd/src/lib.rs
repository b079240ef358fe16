//! `holdfast-etcd`: what the controller replicas and the host agents share
//! to reach the control plane's etcd, and the `/metrics` endpoint both
//! serve.
//!
//! * [`store`]: etcd over several endpoints (one connection per member, the
//!   next tried when one fails or times out, every request bounded), leases,
//!   the election's campaign, fenced transactions.
//! * [`state`]: the key layout under `/holdfast/<cluster>/`, the JSON
//!   records stored there (schema-versioned), and the pure [`next_step`] of
//!   a migration from its records.
//! * [`auth`]: etcd's users and roles for the control plane
//!   (`holdfast ctl etcd-auth init`), who may write which keys.
//! * [`fence`]: the fencing token (the leader key's create revision).
//! * [`metrics`]: `GET /metrics` over HTTP, for the controller's registry
//!   and the agent's.
//!
//! See docs/control-plane.md.
//!
//! Known issues: see the modules.

pub mod auth;
pub mod fence;
pub mod metrics;
pub mod state;
pub mod store;

pub use etcd_client::TlsOptions;
pub use fence::Token;
pub use state::{
    next_step, AgentRecord, Keys, Migration, MigrationState, Next, OperatorRequest, UnitRecord,
    MIGRATION_STEPS, RESTART_STEPS, SCHEMA, SWITCHOVER_STEPS,
};
pub use store::{Outcome, Store, StoreError};
