//! Non-stop routing state for Holdfast (TENSOR §3.1, TCPR §II): what a
//! primary holdfastd replicates, and the store that keeps it.
//!
//! Records and operations are in [`record`]; the [`Store`] trait has a Redis
//! backend ([`redis_store`]) for production and an in-memory one
//! ([`memory`]) for unit tests. Every write carries the writer's epoch and
//! is refused once another speaker has claimed the instance (fencing).
//! [`StoreUrl`] is the store's address as the configuration writes it
//! (`holdfast-config` uses this type for `[nsr] store`).
//!
//! Known issues: see the modules.

mod batch;
pub mod memory;
pub mod record;
pub mod redis_store;
pub mod store;
mod url;

pub use memory::MemoryStore;
pub use record::{
    BfdRecord, InstanceState, LogPos, Op, OriginatedRecord, SessionRecord, StoredBfd,
    StoredOriginated, StoredSession, TcpParams, SCHEMA_VERSION,
};
pub use redis_store::{RedisStore, StoreUrl};
pub use store::{Store, StoreError};
