//! `holdfast-labctl`: the `holdfast lab` operator command and `make demo`, built on the
//! `holdfast-lab` harness and its control plane (`holdfast_lab::plane`).
//!
//! * [`scenario`]: the TOML scenarios of `holdfast lab` (`lab/scenarios/`).
//! * [`command`]: `lab up|status|fail|heal|down|list`: a lab kept running between
//!   invocations through a state file, with its control plane (etcd, three controller
//!   replicas, the host agents); TENSOR's four failure kinds injected, each found and
//!   handled by the controller.
//! * [`chaos`]: `holdfast lab chaos`: randomized failures recovered by the
//!   control plane (controller and agents), checked on frr, bird2 and gobgpd.
//! * [`demo`]: `make demo`: the demo scenario through the four failure kinds, TENSOR
//!   Table 1 with what the peers saw, as Markdown and a PNG.
//!
//! Binaries: `holdfast-lab` (what `holdfast lab ...` runs, from the directory of the
//! `holdfast` executable) and `holdfast-demo` (what `make demo` runs). Errors are the
//! harness's [`holdfast_lab::LabError`].
//!
//! # Known issues
//! * Everything here needs root and the peers' daemons installed, like the harness.

#![forbid(unsafe_code)]

pub mod chaos;
pub mod command;
pub mod demo;
pub mod scenario;
