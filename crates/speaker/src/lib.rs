//! `holdfast-speaker`: the Holdfast BGP speaker (`holdfastd` is its binary).
//!
//! Threads: one I/O thread (a current-thread Tokio runtime) runs every
//! session, timer, listener, the control socket and the metrics endpoint;
//! one RIB thread per routing instance runs route processing, which fans out
//! to a worker pool of `--workers` threads. Session liveness therefore never
//! waits on route processing. BFD, when a neighbour asks for it, runs on a
//! thread of its own ("bfd", `bfd/`), so neither can delay its packets.
//! A preheated standby (`--standby`) follows the NSR store on a thread of
//! its own ("nsr-standby", `standby.rs`) and feeds the RIB threads. An
//! instance with `[kernel]` has a FIB thread ("fib-NAME", `fib/`) that
//! installs its best paths into a kernel routing table over rtnetlink.
//! Every event loop reports its progress, and a small thread ("watchdog",
//! `watchdog.rs`) tells the supervisor (`sd_notify` `READY=1`,
//! `WATCHDOG=1`) only while each one does.
//!
//! Signals: SIGHUP reloads the configuration (only what changed is touched),
//! SIGTERM/SIGINT stop the daemon after sending Cease to every peer.
//!
//! Public: [`daemon::run`] (what the binary runs, and how it ended) and
//! [`repl_core`], the non-stop-routing replicator's pure state machine (for
//! simulations and tests outside the crate).
//!
//! # Known issues
//! - None known beyond those of each module.

#![forbid(unsafe_code)]

mod addrs;
mod bfd;
mod bmp;
mod clock;
mod conn;
mod control;
mod convert;
pub mod daemon;
mod fib;
mod grpc;
#[cfg(test)]
mod layers;
mod mrt;
mod msg;
mod nsr;
mod obs;
pub mod peer;
mod resume;
mod rib_thread;
mod rpki;
mod socket;
mod standby;
mod tables;
#[cfg(test)]
mod test_fixtures;
mod unacked;
mod watchdog;

pub use nsr::core as repl_core;

pub use holdfast_neighbor::{
    replay, PeerCore, PeerInput, PeerOutput, PeerParams, ReplayReport, RECORD_SCHEMA,
};
