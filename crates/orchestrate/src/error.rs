//! The crate's error type.

use std::time::Duration;

/// What can go wrong in the contract's own code (detection). An [`crate::Orchestrator`]
/// has its own error type, which converts from this one.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A TCP probe could not be sent from where it was meant to run (e.g. the network
    /// namespace does not exist).
    #[error("probe in {from}: {source}")]
    ProbeSite {
        /// Where the probe was to run ([`crate::Probe::Tcp`]'s `from`).
        from: String,
        /// Why it could not.
        #[source]
        source: std::io::Error,
    },
    /// The target still answered when the detection deadline passed.
    #[error("no failure detected within {deadline:?} ({probe})")]
    NotDetected {
        /// [`crate::ProbePolicy::deadline`].
        deadline: Duration,
        /// [`crate::Probe::describe`].
        probe: String,
    },
}

/// Result alias of the crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;
