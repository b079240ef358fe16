//! The daemon's monotonic clock: the time input of the pure cores (the
//! neighbour's `PeerCore`, BFD, NSR), and its conversion to Tokio's
//! deadlines.
//!
//! # Known issues
//! - None known.

use holdfast_fsm::Time;
use std::sync::OnceLock;
use std::time::Instant;

/// Monotonic time since the daemon started: the cores' time input.
pub fn now() -> Time {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    EPOCH.get_or_init(Instant::now).elapsed()
}

pub(crate) fn instant_of(t: Time) -> tokio::time::Instant {
    let epoch = Instant::now() - now();
    tokio::time::Instant::from_std(epoch + t)
}
