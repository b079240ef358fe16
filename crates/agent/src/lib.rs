//! `holdfast-agent`: the host agent of the control plane (TENSOR §3.3.2,
//! issue 11), one per host and one on the agent server. This crate holds
//! the agent's machinery and its pure core; the binary that runs it
//! against the controller's Attach stream comes with the controller.
//!
//! - [`core`]: the pure core, `AgentCore::handle(now, input) -> outputs`:
//!   commands checked against the fencing token, the lease watchdog's
//!   self-fence, and every report to the controller
//!   (`holdfast_control_api`).
//! - [`probe`]: IP SLA probes as a pure core, `Prober::handle(now, input)
//!   -> outputs`: one probe per target every interval (100 ms by default),
//!   each answered or lost after a timeout, every outcome a serde
//!   [`probe::Measurement`] for the controller's localization. The shell
//!   ([`probe::tcp_probe`]) counts a TCP handshake or a reset as an answer:
//!   either proves the target's stack is up.
//! - [`outbox`]: probe outcomes carried in the heartbeats, to a leader
//!   that takes them there (issue 29: one message per heartbeat, not one
//!   per outcome); a miss goes at once.
//! - [`watchdog`]: the self-fencing rule. An agent that cannot renew its
//!   etcd lease fences its own units before the lease can expire, so the
//!   controller may migrate them once it has (Patroni's watchdog); through
//!   an etcd outage every host agent agrees on, it keeps them (Patroni's
//!   failsafe mode).
//! - [`hang`]: hang detection, the agent as its units' watchdog: each
//!   holdfastd pings a socket of its own (`sd_notify` `WATCHDOG=1`) while
//!   its event loops make progress; a unit silent for `--hang-ms` with its
//!   process stopped, or for 4 × `--hang-ms` (after a start-up
//!   allowance), is fenced through its pidfd and reported `HUNG`.
//!   The pings are read with their kernel receive times, all of them
//!   before judging, so the agent's own stall is never the unit's.
//! - [`failsafe`]: the agents' failsafe service and rounds (gRPC, on the
//!   management network) and the peers read from etcd; with `--tls-*`,
//!   mutual TLS and an ask only for the host its certificate names.
//! - [`attach`]: the Attach stream to the leader etcd names, left when
//!   the leader falls silent (`--leader-silence-ms`, [`attach::Silence`]);
//!   with `--tls-*`, over mutual TLS (`holdfast_control_api::tls`).
//! - [`renew`]: lease renewals through every etcd member at once, each over
//!   a connection of its own (robust to a lossy management link).
//! - [`runtime`]: the [`runtime::Runtime`] trait (start a unit, watch it,
//!   fence it) and [`runtime::ProcessRuntime`], which runs each unit as a
//!   process, optionally inside a network namespace (the lab's container),
//!   and watches and kills it through a pidfd, never by PID.
//!
//! # Known issues
//! - Probes are TCP connects only; ICMP needs a raw socket.
//! - `ProcessRuntime` is the only runtime; a systemd runtime (units as
//!   `holdfastd@NAME.service`) would implement the same trait.

#![forbid(unsafe_code)]

pub mod attach;
pub mod core;
pub mod failsafe;
pub mod hang;
mod lease;
pub mod metrics;
pub mod outbox;
pub mod probe;
pub mod renew;
pub mod runtime;
pub mod schemas;
pub mod shell;
pub mod watchdog;

use std::time::Duration;

/// Time since an arbitrary origin: an input to the pure cores.
pub type Time = Duration;
