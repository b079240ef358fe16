//! Non-stop routing state for Holdfast (TENSOR §3.1, TCPR §II): what a
//! primary holdfastd replicates, and the interface of the store that keeps
//! it. No I/O: this crate is a pure core.
//!
//! Records and operations are in [`record`]; the [`Store`] trait has a Redis
//! backend for production (`holdfast-nsr-redis`, the only crate that links
//! redis-rs) and an in-memory one ([`memory`]) for unit tests. Every write
//! carries the writer's epoch and is refused once another speaker has
//! claimed the instance (fencing). [`batch`] is what both backends share
//! (merging a batch's ops into steps, reading records back), so that they
//! store the same chunks. [`StoreUrl`] is the store's address as the
//! configuration writes it (`holdfast-config` uses this type for `[nsr]
//! store`). [`acl`] makes the Redis ACL rules that limit a unit's store
//! user to its own keys.
//!
//! Known issues: see the modules.

pub mod acl;
pub mod batch;
pub mod memory;
pub mod record;
pub mod store;
mod url;

pub use memory::MemoryStore;
pub use record::{
    BfdRecord, InstanceState, LogPos, Op, OriginatedRecord, SessionRecord, StoredBfd,
    StoredOriginated, StoredSession, TcpParams, SCHEMA_VERSION,
};
pub use store::{LogChunks, LogEnd, LogRange, Store, StoreError};
pub use url::StoreUrl;
