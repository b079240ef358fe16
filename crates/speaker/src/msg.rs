//! The messages between the speaker's threads, at the bottom of its layers:
//! every thread's queue and handle is here, so that a module that sends to
//! a thread does not depend on the module that runs it (docs/architecture.md,
//! "The speaker's layers").
//!
//! - [`rib`]: to and from a RIB thread (`RibCmd`, `RibHandle`, `ToPeer`,
//!   the peer tasks' mailboxes).
//! - [`peer`]: to a peer task (`PeerCmd`) and its settings.
//! - [`fib`]: to a FIB thread (`FibCmd`, `FibHandle`, `FibConfig`).
//! - [`bmp`]: the BMP hub, through which sessions and RIB threads hand
//!   events to the collectors.
//!
//! A module here uses only its siblings and the modules below it (`resume`,
//! `mrt`, `socket`); the `layers` test checks that no module reaches back up.
//!
//! # Known issues
//! - None known.

pub mod bmp;
pub mod fib;
pub mod peer;
pub mod rib;
