//! `holdfast-orchestrate`: the orchestration contract of non-stop routing, what a
//! controller of a pair of holdfastd speakers does when the primary fails (TENSOR
//! §3.3): detect the failure ([`detect()`]), fence the old primary ([`Fence`]), start
//! the backup with `--takeover`, move the service address, and wait until every
//! session is Established there ([`run_takeover`], [`TakeoverTimes`]).
//!
//! [`Orchestrator`] is the contract. It names no environment: the lab implements it
//! over network namespaces (`holdfast_lab::LabOrchestrator`), a production controller
//! over its hosts. This crate depends on nothing of the lab or of the tests.
//!
//! # Known issues
//! * Only the lab implements [`Orchestrator`] today; the production controller is a
//!   later issue.

#![forbid(unsafe_code)]

mod detect;
mod error;
mod takeover;

pub use detect::{detect, Connect, Detection, Local, Probe, ProbePolicy, ProbeSite};
pub use error::{Error, Result};
pub use takeover::{run_takeover, Fence, Orchestrator, TakeoverDeadlines, TakeoverTimes};
