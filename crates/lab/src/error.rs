//! Error type shared by the whole harness.

use std::time::Duration;

/// Everything that can go wrong while building or driving a lab.
#[derive(Debug, thiserror::Error)]
pub enum LabError {
    /// The harness manipulates network namespaces and must run as root.
    #[error("the lab needs root (effective uid 0)")]
    NotRoot,
    /// A required executable is not installed.
    #[error("required tool `{0}` not found")]
    MissingTool(String),
    /// A filesystem or process-spawn operation failed.
    #[error("{context}: {source}")]
    Io {
        /// What the harness was doing.
        context: String,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// A command exited unsuccessfully.
    #[error("command `{command}` failed ({status}): {output}")]
    CommandFailed {
        /// The command line.
        command: String,
        /// Exit status description.
        status: String,
        /// Captured stderr (or stdout when stderr was empty).
        output: String,
    },
    /// A command did not finish in time and was killed.
    #[error("command `{command}` did not finish within {timeout:?}")]
    CommandTimeout {
        /// The command line.
        command: String,
        /// The limit that was exceeded.
        timeout: Duration,
    },
    /// A polled condition did not become true before its deadline.
    #[error("timed out after {elapsed:?} waiting for {desc}; last observed: {last}")]
    WaitTimeout {
        /// Description given by the caller.
        desc: String,
        /// How long the harness waited.
        elapsed: Duration,
        /// Debug rendering of the last observed value (or error).
        last: String,
    },
    /// A peer tool produced output the harness could not understand.
    #[error("cannot parse {what}: {detail}")]
    Parse {
        /// Which output.
        what: String,
        /// Why.
        detail: String,
    },
    /// The caller passed something the harness cannot honour.
    #[error("invalid argument: {0}")]
    Invalid(String),
}

/// Result alias used throughout the crate.
pub type Result<T, E = LabError> = std::result::Result<T, E>;

/// Build a closure mapping an `io::Error` into [`LabError::Io`] with context.
pub fn io_ctx(context: impl Into<String>) -> impl FnOnce(std::io::Error) -> LabError {
    let context = context.into();
    move |source| LabError::Io { context, source }
}

/// Shorthand for a parse error.
pub fn parse_err(what: impl Into<String>, detail: impl Into<String>) -> LabError {
    LabError::Parse {
        what: what.into(),
        detail: detail.into(),
    }
}
