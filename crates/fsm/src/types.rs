//! Plain data exchanged with the FSM: configuration, events, actions,
//! negotiated parameters and counters.

use holdfast_wire::{Family, GracefulRestartCap, Notification, Open};
use serde::{Deserialize, Serialize};
use std::fmt;
use std::net::Ipv4Addr;

/// Monotonic time as a serde-able input (duration since an arbitrary epoch
/// chosen by the daemon).
pub type Time = std::time::Duration;

/// Session states of RFC 4271 §8.2.2.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum State {
    Idle,
    Connect,
    Active,
    OpenSent,
    OpenConfirm,
    Established,
}

impl State {
    /// The RFC name of the state, as shown by the CLI.
    pub const fn as_str(self) -> &'static str {
        match self {
            State::Idle => "Idle",
            State::Connect => "Connect",
            State::Active => "Active",
            State::OpenSent => "OpenSent",
            State::OpenConfirm => "OpenConfirm",
            State::Established => "Established",
        }
    }

    /// True in the states where a TCP connection carrying BGP exists
    /// (OpenSent, OpenConfirm, Established).
    pub const fn is_connected(self) -> bool {
        matches!(
            self,
            State::OpenSent | State::OpenConfirm | State::Established
        )
    }
}

impl fmt::Display for State {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Static per-neighbour settings.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionConfig {
    pub local_as: u32,
    pub remote_as: u32,
    pub local_id: Ipv4Addr,
    /// Hold time proposed in our OPEN (default 90).
    pub hold_time: u16,
    /// Keepalive interval; `None` means negotiated hold time / 3 (a ninth
    /// with `nsr`). A configured value is capped at negotiated hold time / 3.
    pub keepalive_time: Option<u16>,
    /// The session is replicated for non-stop routing: with no configured
    /// keepalive interval, KEEPALIVEs go every ninth of the hold time (at
    /// least 1 s), so that the peer has heard from us at most that long
    /// before a failure and a takeover has most of its hold time ([`keepalive_for`](crate::keepalive_for)).
    #[serde(default)]
    pub nsr: bool,
    /// ConnectRetry timer in seconds (RFC default 120; daemon default 5).
    /// Zero is treated as one second.
    pub connect_retry: u16,
    /// Never initiate connections; wait in Active for the peer.
    pub passive: bool,
    /// Families advertised with the multiprotocol capability.
    pub families: Vec<Family>,
    /// Advertise the Graceful Restart capability with this restart time.
    /// Helper mode is always on, whatever this says.
    pub graceful_restart: Option<u16>,
    /// Advertise the route refresh capability (RFC 2918).
    pub route_refresh: bool,
    /// Delay in seconds before an automatic restart after an error (default 5).
    pub idle_hold_time: u16,
}

impl SessionConfig {
    /// A configuration with the daemon defaults: hold 90, keepalive hold/3,
    /// connect-retry 5, active, IPv4 unicast, no GR, route refresh on,
    /// idle hold 5.
    pub fn new(local_as: u32, remote_as: u32, local_id: Ipv4Addr) -> Self {
        SessionConfig {
            local_as,
            remote_as,
            local_id,
            hold_time: 90,
            keepalive_time: None,
            nsr: false,
            connect_retry: 5,
            passive: false,
            families: vec![Family::IPV4_UNICAST],
            graceful_restart: None,
            route_refresh: true,
            idle_hold_time: 5,
        }
    }

    /// True for an internal (same-AS) session.
    pub fn is_ibgp(&self) -> bool {
        self.local_as == self.remote_as
    }
}

/// FSM inputs, named after the events of RFC 4271 §8.1.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Event {
    /// Event 1: ManualStart (Event 5, ManualStart_with_PassiveTcpEstablishment,
    /// is expressed by `SessionConfig::passive`). Clears an administrative stop.
    ManualStart,
    /// Event 2: ManualStop. Sends Cease/Administrative Shutdown when
    /// connected; no automatic restart follows.
    ManualStop,
    /// Event 3: AutomaticStart.
    AutomaticStart,
    /// Event 9: ConnectRetryTimer_Expires.
    ConnectRetryTimerExpires,
    /// Event 10: HoldTimer_Expires.
    HoldTimerExpires,
    /// Event 11: KeepaliveTimer_Expires.
    KeepaliveTimerExpires,
    /// Event 13: IdleHoldTimer_Expires (automatic restart after an error).
    IdleHoldTimerExpires,
    /// Event 16: Tcp_CR_Acked — our outbound connection succeeded.
    TcpCrAcked,
    /// Event 17: TcpConnectionConfirmed — an inbound connection was accepted.
    TcpConnectionConfirmed,
    /// Event 18: TcpConnectionFails.
    TcpConnectionFails,
    /// Event 19: BGPOpen — a valid, decoded OPEN.
    BgpOpen(Open),
    /// Event 21: BGPHeaderErr, carrying the NOTIFICATION to send.
    BgpHeaderErr(Notification),
    /// Event 22: BGPOpenMsgErr, carrying the NOTIFICATION to send.
    BgpOpenMsgErr(Notification),
    /// Events 24/25: NotifMsgVerErr / NotifMsg — a NOTIFICATION was received.
    NotifMsg(Notification),
    /// Event 26: KeepAliveMsg.
    KeepAliveMsg,
    /// Event 27: UpdateMsg. The body is handled elsewhere; restarts the hold timer.
    UpdateMsg,
    /// Event 28: UpdateMsgErr, carrying the NOTIFICATION to send.
    UpdateMsgErr(Notification),
    /// A ROUTE-REFRESH message was received (RFC 2918; no RFC 4271 event
    /// number). Counted only: it does not restart the hold timer, which
    /// RFC 4271 ties to KEEPALIVE and UPDATE.
    RouteRefreshMsg,
    /// Event 8-like (AutomaticStop) with a reason: the daemon asks to send
    /// this NOTIFICATION and close (max-prefix Cease, admin reset, config
    /// change). The session restarts after the idle hold time; follow with
    /// `ManualStop` to keep it down.
    Stop(Notification),
    /// The daemon sent this many UPDATEs: counted, and restarts the
    /// keepalive timer in Established (RFC 4271 §4.4). No RFC event number.
    UpdatesSent(u64),
    /// The daemon sent a ROUTE-REFRESH: counted only. No RFC event number.
    RouteRefreshSent,
}

/// FSM outputs, to be carried out by the daemon in order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Action {
    /// Start an outbound TCP connection.
    Connect,
    /// Drop the TCP connection (after sends queued before it), or abandon
    /// the connection attempt in progress.
    CloseConnection,
    SendOpen(Open),
    SendKeepalive,
    SendNotification(Notification),
    StateChanged {
        from: State,
        to: State,
        reason: String,
    },
    /// The session entered Established with these parameters.
    Established(Negotiated),
    /// The session left Established: routes must be flushed or, if
    /// `graceful`, kept as stale (RFC 4724 helper). Emitted exactly once
    /// per `Established`, never for failures before Established.
    SessionDown {
        graceful: bool,
        reason: String,
    },
}

/// Session parameters agreed from the two OPENs (see [`crate::negotiate`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Negotiated {
    /// min(ours, theirs); 0 means no keepalives and no hold timer.
    pub hold_time: u16,
    /// Keepalive interval; 0 when `hold_time` is 0.
    pub keepalive: u16,
    pub remote_as: u32,
    pub remote_id: Ipv4Addr,
    /// Both sides advertised the 4-octet AS capability (RFC 6793).
    pub four_octet_as: bool,
    /// Intersection of the multiprotocol capabilities; a side that sends
    /// none is taken to support IPv4 unicast only (RFC 4760 §8).
    pub families: Vec<Family>,
    pub route_refresh: bool,
    pub enhanced_route_refresh: bool,
    /// The peer's Graceful Restart capability, if it sent one.
    pub peer_graceful_restart: Option<GracefulRestartCap>,
    pub local_open: Open,
    pub remote_open: Open,
}

impl Negotiated {
    /// RFC 8538: both sides set the N bit, so NOTIFICATIONs other than
    /// Cease/Hard Reset trigger graceful restart procedures.
    pub fn notification_gr(&self) -> bool {
        let local_n =
            self.local_open.capabilities.iter().any(
                |c| matches!(c, holdfast_wire::Capability::GracefulRestart(g) if g.notification),
            );
        let peer_n = self
            .peer_graceful_restart
            .as_ref()
            .is_some_and(|g| g.notification);
        local_n && peer_n
    }
}

/// Counters for observability.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionStats {
    pub opens_in: u64,
    pub opens_out: u64,
    pub updates_in: u64,
    pub updates_out: u64,
    pub keepalives_in: u64,
    pub keepalives_out: u64,
    pub notifications_in: u64,
    pub notifications_out: u64,
    pub route_refresh_in: u64,
    pub route_refresh_out: u64,
    /// Times the session entered Established.
    pub established_count: u64,
    /// Times the session left Established.
    pub dropped_count: u64,
    /// Why the session last went down (not set by `ManualStop`).
    pub last_error: Option<String>,
    pub last_notification_sent: Option<Notification>,
    pub last_notification_received: Option<Notification>,
}

impl SessionStats {
    /// All messages received.
    pub fn messages_in(&self) -> u64 {
        self.opens_in
            + self.updates_in
            + self.keepalives_in
            + self.notifications_in
            + self.route_refresh_in
    }
    /// All messages sent.
    pub fn messages_out(&self) -> u64 {
        self.opens_out
            + self.updates_out
            + self.keepalives_out
            + self.notifications_out
            + self.route_refresh_out
    }
}

/// RFC 4271 §6.8 collision detection outcome: which connection survives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum CollisionWinner {
    Existing,
    New,
}

/// The FSM's timers, for [`crate::Session::timer`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Timer {
    ConnectRetry,
    Hold,
    Keepalive,
    IdleHold,
}
