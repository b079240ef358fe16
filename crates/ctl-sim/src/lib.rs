//! `holdfast-ctl-sim`: the control plane's scale harness (issue 29, item
//! 2). A benchmark command, not a test.
//!
//! The real `holdfast-controller` replicas run against a real 3-member
//! etcd in lab namespaces; one process simulates every host agent and
//! agent server of a fleet of `--hosts` hosts and `--units` units (about
//! ten per host), each with its own etcd lease and `Attach` stream,
//! speaking the real protocol ([`agents`]). The harness measures the
//! steady state, injects failures (a host, a rack, the leading replica,
//! etcd's leader member) and reports what each cost ([`driver`],
//! [`report`]); placement churn is computed for TRIPOD and for the naive
//! choice ([`churn`]).
//!
//! - [`fleet`]: the simulated fleet and its probe plan (pure).
//! - [`churn`]: units moved per failure, TRIPOD against naive (pure).
//! - [`agents`]: the simulated agents (tokio; `holdfast-ctl-sim agents`).
//! - [`driver`]: the lab, the measurements, the injections.
//! - [`report`]: the figures.
//!
//! ```text
//! holdfast-ctl-sim --hosts 100 --units 1000 [--rack 50] [--probes ring|full]
//!     [--inject host,rack,leader,etcd] [--window-s 10] [--json]
//! ```
//!
//! # Known issues
//! - The simulated agents report every probe outcome, as the agents do
//!   today; see [`agents`].
//! - The agents share the machine's two cores with the replicas and etcd:
//!   at the largest sizes the harness measures its own load too (its
//!   `Stats` events show what it managed to send).

#![forbid(unsafe_code)]

pub mod agents;
pub mod churn;
pub mod driver;
pub mod fleet;
pub mod report;
