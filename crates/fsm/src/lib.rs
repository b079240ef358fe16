//! Holdfast BGP session finite state machine.
//!
//! A pure state machine per neighbour, modelled on rustybgp's
//! `daemon/src/fsm.rs` and BIRD's `bgp_conn_set_state`: no I/O, no clocks,
//! no threads, no randomness. Time is an input ([`Time`]); the daemon feeds
//! [`Event`]s to [`Session::handle`], calls [`Session::poll`] at
//! [`Session::next_deadline`], and carries out the returned [`Action`]s
//! (encoding and sending messages, opening and closing TCP connections,
//! flushing or retaining routes). Every state change goes through one
//! function, which emits [`Action::StateChanged`] and a `tracing::info!`
//! event with `from`, `to` and `reason` fields. Because the machine is
//! deterministic and [`Session`] is serde-serialisable, a non-stop-routing
//! backup can restore a snapshot and replay the recorded inputs.
//!
//! # RFCs covered
//! - RFC 4271 §8 (FSM, events numbered as in §8.1), §6.8 (collision
//!   detection, [`resolve_collision`]), §4.2/§6.2 (OPEN checks), §4.4
//!   (hold and keepalive timers, keepalive = hold/3 or hold/9 under NSR,
//!   no jitter).
//! - RFC 4760 (multiprotocol capability; no capability means IPv4 unicast),
//!   RFC 5492 (capabilities), RFC 2918 / RFC 7313 (route refresh, enhanced).
//! - RFC 6793 (4-octet AS; AS_TRANS in `my_as`), RFC 7607 (AS 0 rejected).
//! - RFC 6286 (BGP identifier checks, AS tie-break for equal identifiers).
//! - RFC 6608 (FSM error subcodes), RFC 4486 (Cease subcodes).
//! - RFC 4724 (graceful restart helper: `SessionDown { graceful }`),
//!   RFC 8538 (N bit, Hard Reset never graceful).
//!
//! # Behaviour beyond or apart from RFC 4271
//! - After an error the session goes Idle and restarts itself after
//!   `idle_hold_time` (IdleHoldTimer, Event 13), as BIRD and FRR do.
//!   `ManualStop` is the only way to stay down.
//! - TcpConnectionFails in Connect or Active goes to Active with the
//!   ConnectRetry timer restarted (RFC 4271 goes Idle when DelayOpen is not
//!   used); the next attempt follows the timer.
//! - `passive` sessions wait in Active without a ConnectRetry timer and
//!   never emit `Action::Connect`.
//! - A connection reported while Idle is refused with `CloseConnection`; a
//!   second connection in OpenSent and later is ignored here: collision
//!   detection is done by the daemon with [`resolve_collision`].
//! - Message header errors send their NOTIFICATION in every connected state.
//!
//! # Known issues
//! - No DelayOpen timer, no peer oscillation damping (the idle hold time
//!   does not grow with repeated failures), no ConnectRetryCounter.
//! - The OPEN we send leaves the GR N bit clear, so `SessionDown` after a
//!   NOTIFICATION is never graceful in practice; when both sides set it,
//!   the RFC 8538 rule (all but Hard Reset) is applied.
//! - GR restarting-speaker mode (R bit, forwarding state) is not modelled;
//!   helper mode only. An OPEN from a restarting peer on a new connection
//!   while Established is the daemon's to handle.
//! - Changes of `local_id` or `route_refresh` do not request a reset; they
//!   apply to the next session.

#![forbid(unsafe_code)]

mod negotiate;
pub mod notification;
mod session;
mod types;

pub use negotiate::{
    keepalive_for, negotiate, open_for_config, resolve_collision, resolve_collision_with_as,
    BGP_VERSION,
};
pub use session::{Session, OPEN_HOLD_TIME};
pub use types::{
    Action, CollisionWinner, Event, Negotiated, SessionConfig, SessionStats, State, Time, Timer,
};

#[cfg(test)]
mod tests;
