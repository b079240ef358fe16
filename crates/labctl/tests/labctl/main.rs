//! `holdfast lab`, `holdfast lab chaos` and the demo's run, one test binary:
//! each scenario a module in a directory of its own, its topology and checks
//! in its header; the takeovers' helpers in `tests/support/`.
//!
//! One scenario: `cargo test --release -p holdfast-labctl --test labctl chaos::
//! -- --nocapture`. The whole suite is `make test` (scripts/run-tests.py),
//! which runs each test in its own process and these timing-sensitive ones
//! with nothing else running.

#[path = "../support/takeovers.rs"]
mod takeovers;

mod bfd_50ms;
mod chaos;
mod demo_reduced;
mod lab_command;
