//! The per-neighbour session state machine (RFC 4271 §8.2.2).

use crate::negotiate::{negotiate, open_for_config};
use crate::notification::{self, describe, fsm as fsm_err};
use crate::types::{Action, Event, Negotiated, SessionConfig, SessionStats, State, Time, Timer};
use holdfast_wire::{Notification, Open};
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// Hold timer while waiting for the peer's OPEN (RFC 4271 §8.2.2 suggests
/// 4 minutes).
pub const OPEN_HOLD_TIME: Duration = Duration::from_secs(240);

/// Bound on timers fired by one [`Session::poll`] call.
const MAX_FIRES_PER_POLL: usize = 16;

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
struct Timers {
    connect_retry: Option<Time>,
    hold: Option<Time>,
    keepalive: Option<Time>,
    idle_hold: Option<Time>,
}

fn secs(s: u16) -> Duration {
    Duration::from_secs(u64::from(s))
}

/// One BGP session: a pure state machine. Feed it [`Event`]s with the
/// current time and carry out the returned [`Action`]s in order.
///
/// The whole state is serde-serialisable so that a backup can restore a
/// snapshot and replay the recorded inputs after it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Session {
    cfg: SessionConfig,
    state: State,
    timers: Timers,
    /// The OPEN sent on the current connection (OpenSent and later).
    sent_open: Option<Open>,
    /// Set in OpenConfirm and Established.
    negotiated: Option<Negotiated>,
    stats: SessionStats,
    established_at: Option<Time>,
}

impl Session {
    /// A session in Idle with no timer running; send `ManualStart` or
    /// `AutomaticStart` to bring it up.
    pub fn new(cfg: SessionConfig) -> Self {
        Session {
            cfg,
            state: State::Idle,
            timers: Timers::default(),
            sent_open: None,
            negotiated: None,
            stats: SessionStats::default(),
            established_at: None,
        }
    }

    /// Non-stop routing: a session taken over from a failed primary, put
    /// straight into Established from the two OPENs it exchanged (the
    /// negotiated parameters are re-derived with [`negotiate`], never
    /// copied). Returns the session and its first actions: a KEEPALIVE at
    /// once, so the peer hears from the new speaker without waiting a
    /// keepalive interval. Fails with the NOTIFICATION the OPENs would have
    /// caused if they no longer negotiate under `cfg`.
    pub fn resume(
        cfg: SessionConfig,
        local_open: Open,
        remote_open: Open,
        now: Time,
    ) -> Result<(Self, Vec<Action>), Notification> {
        let neg = negotiate(&local_open, &remote_open, &cfg)?;
        let mut s = Session::new(cfg);
        s.sent_open = Some(local_open);
        s.negotiated = Some(neg);
        s.state = State::Established;
        s.stats.established_count = 1;
        s.established_at = Some(now);
        s.arm_hold(now);
        s.arm_keepalive(now);
        s.stats.keepalives_out += 1;
        Ok((s, vec![Action::SendKeepalive]))
    }

    pub fn state(&self) -> State {
        self.state
    }

    /// Non-stop routing: restarts the HoldTimer without a message, in
    /// Established only (returns whether it did). For a session taken over
    /// whose peer is evidently alive (its TCP acknowledges ours) while its
    /// own bytes wait in its TCP retransmission backoff: they were sent to
    /// the failed primary, and the backoff grew with every takeover that
    /// followed (see the peer core's resume grace).
    pub fn restart_hold_timer(&mut self, now: Time) -> bool {
        if self.state != State::Established || self.timers.hold.is_none() {
            return false;
        }
        self.arm_hold(now);
        true
    }

    pub fn config(&self) -> &SessionConfig {
        &self.cfg
    }

    /// Negotiated parameters; `Some` exactly in OpenConfirm and Established.
    pub fn negotiated(&self) -> Option<&Negotiated> {
        self.negotiated.as_ref()
    }

    /// The OPEN we send with the current configuration.
    pub fn local_open(&self) -> Open {
        open_for_config(&self.cfg)
    }

    pub fn stats(&self) -> &SessionStats {
        &self.stats
    }

    /// When the session last entered Established; `None` unless Established.
    pub fn established_at(&self) -> Option<Time> {
        self.established_at
    }

    /// Deadline of one timer, if running.
    pub fn timer(&self, t: Timer) -> Option<Time> {
        match t {
            Timer::ConnectRetry => self.timers.connect_retry,
            Timer::Hold => self.timers.hold,
            Timer::Keepalive => self.timers.keepalive,
            Timer::IdleHold => self.timers.idle_hold,
        }
    }

    /// Earliest deadline of any running timer.
    pub fn next_deadline(&self) -> Option<Time> {
        self.next_timer().map(|(t, _)| t)
    }

    /// Running timer with the earliest deadline; on ties the hold timer
    /// first, so that a session is never kept alive by a keepalive sent in
    /// the same instant its hold timer expired.
    fn next_timer(&self) -> Option<(Time, Event)> {
        let t = &self.timers;
        [
            (t.hold, Event::HoldTimerExpires),
            (t.connect_retry, Event::ConnectRetryTimerExpires),
            (t.keepalive, Event::KeepaliveTimerExpires),
            (t.idle_hold, Event::IdleHoldTimerExpires),
        ]
        .into_iter()
        .filter_map(|(d, e)| d.map(|d| (d, e)))
        .fold(None, |best: Option<(Time, Event)>, (d, e)| match best {
            Some((bd, _)) if bd <= d => best,
            _ => Some((d, e)),
        })
    }

    /// Fire every timer whose deadline is <= `now` (as the matching
    /// `*Expires` events) and return the actions.
    pub fn poll(&mut self, now: Time) -> Vec<Action> {
        let mut out = Vec::new();
        for _ in 0..MAX_FIRES_PER_POLL {
            match self.next_timer() {
                Some((deadline, ev)) if deadline <= now => out.extend(self.handle(now, ev)),
                _ => break,
            }
        }
        out
    }

    /// Replace the configuration. Returns true if the running session must
    /// be reset for the change to take effect (the daemon then sends
    /// `Stop(Cease/Other Configuration Change)`): a change of hold time,
    /// either ASN, families, passive or GR once an OPEN has been sent, or of
    /// `passive` while connecting. Other fields apply from the next timer
    /// start or the next session.
    pub fn update_config(&mut self, cfg: SessionConfig) -> bool {
        let old = std::mem::replace(&mut self.cfg, cfg);
        let new = &self.cfg;
        let passive = old.passive != new.passive;
        match self.state {
            State::Idle => false,
            State::Connect | State::Active => passive,
            State::OpenSent | State::OpenConfirm | State::Established => {
                passive
                    || old.hold_time != new.hold_time
                    || old.local_as != new.local_as
                    || old.remote_as != new.remote_as
                    || old.families != new.families
                    || old.graceful_restart != new.graceful_restart
            }
        }
    }

    /// Process one input at time `now`.
    ///
    /// Timer expiry events for a timer that is not running are stale and
    /// ignored, so the daemon may deliver them from its own timers as well
    /// as through [`Session::poll`].
    pub fn handle(&mut self, now: Time, ev: Event) -> Vec<Action> {
        let mut out = Vec::new();
        let timer = match ev {
            Event::ConnectRetryTimerExpires => Some(&mut self.timers.connect_retry),
            Event::HoldTimerExpires => Some(&mut self.timers.hold),
            Event::KeepaliveTimerExpires => Some(&mut self.timers.keepalive),
            Event::IdleHoldTimerExpires => Some(&mut self.timers.idle_hold),
            _ => None,
        };
        if let Some(t) = timer {
            if t.take().is_none() {
                return out;
            }
        }
        self.count_in(&ev);
        match ev {
            Event::ManualStop => {
                let n = notification::cease(notification::cease::ADMINISTRATIVE_SHUTDOWN);
                self.teardown(now, Some(n), "manual stop".into(), false, false, &mut out);
            }
            Event::Stop(n) => {
                if self.state != State::Idle {
                    let graceful = self.graceful_after_notification(&n);
                    let reason = format!("stopped: {}", describe(&n));
                    self.teardown(now, Some(n), reason, graceful, true, &mut out);
                }
            }
            Event::UpdatesSent(n) => {
                if self.state == State::Established && n > 0 {
                    self.arm_keepalive(now);
                }
            }
            Event::RouteRefreshSent => {}
            ev => match self.state {
                State::Idle => self.in_idle(now, ev, &mut out),
                State::Connect | State::Active => self.in_connecting(now, ev, &mut out),
                State::OpenSent => self.in_open_sent(now, ev, &mut out),
                State::OpenConfirm => self.in_open_confirm(now, ev, &mut out),
                State::Established => self.in_established(now, ev, &mut out),
            },
        }
        self.count_out(&out);
        out
    }

    fn in_idle(&mut self, now: Time, ev: Event, out: &mut Vec<Action>) {
        match ev {
            Event::ManualStart | Event::AutomaticStart | Event::IdleHoldTimerExpires => {
                self.timers.idle_hold = None;
                let reason = match ev {
                    Event::ManualStart => "manual start",
                    Event::AutomaticStart => "automatic start",
                    _ => "idle hold timer expired",
                };
                self.start(now, reason, out);
            }
            // A connection while Idle is refused (RFC 4271 §8.2.2, Idle state).
            Event::TcpCrAcked | Event::TcpConnectionConfirmed => out.push(Action::CloseConnection),
            _ => {}
        }
    }

    fn start(&mut self, now: Time, reason: &str, out: &mut Vec<Action>) {
        if self.cfg.passive {
            self.set_state(now, State::Active, reason, false, out);
        } else {
            out.push(Action::Connect);
            self.arm_connect_retry(now);
            self.set_state(now, State::Connect, reason, false, out);
        }
    }

    fn in_connecting(&mut self, now: Time, ev: Event, out: &mut Vec<Action>) {
        match ev {
            Event::ConnectRetryTimerExpires => {
                if self.state == State::Connect {
                    out.push(Action::CloseConnection);
                }
                out.push(Action::Connect);
                self.arm_connect_retry(now);
                self.set_state(
                    now,
                    State::Connect,
                    "connect retry timer expired",
                    false,
                    out,
                );
            }
            Event::TcpCrAcked | Event::TcpConnectionConfirmed => {
                self.timers.connect_retry = None;
                let open = open_for_config(&self.cfg);
                self.sent_open = Some(open.clone());
                out.push(Action::SendOpen(open));
                self.timers.hold = Some(now + OPEN_HOLD_TIME);
                let reason = if ev == Event::TcpCrAcked {
                    "outbound connection established"
                } else {
                    "inbound connection accepted"
                };
                self.set_state(now, State::OpenSent, reason, false, out);
            }
            Event::TcpConnectionFails => {
                self.fall_back_to_active(now, "tcp connection failed", out)
            }
            Event::ManualStart | Event::AutomaticStart => {}
            other => {
                let reason = format!("unexpected {} in {}", event_name(&other), self.state);
                self.teardown(now, None, reason, false, true, out);
            }
        }
    }

    /// Close the connection and wait in Active; non-passive sessions retry
    /// when the ConnectRetry timer expires.
    fn fall_back_to_active(&mut self, now: Time, reason: &str, out: &mut Vec<Action>) {
        if self.state != State::Active {
            out.push(Action::CloseConnection);
        }
        self.timers = Timers::default();
        if !self.cfg.passive {
            self.arm_connect_retry(now);
        }
        self.set_state(now, State::Active, reason, false, out);
    }

    fn in_open_sent(&mut self, now: Time, ev: Event, out: &mut Vec<Action>) {
        match ev {
            Event::BgpOpen(remote) => {
                let local = self
                    .sent_open
                    .clone()
                    .unwrap_or_else(|| open_for_config(&self.cfg));
                match negotiate(&local, &remote, &self.cfg) {
                    Err(n) => {
                        let reason = format!("OPEN rejected: {}", describe(&n));
                        self.teardown(now, Some(n), reason, false, true, out);
                    }
                    Ok(neg) => {
                        out.push(Action::SendKeepalive);
                        self.timers = Timers::default();
                        self.negotiated = Some(neg);
                        self.arm_hold(now);
                        self.arm_keepalive(now);
                        self.set_state(now, State::OpenConfirm, "OPEN received", false, out);
                    }
                }
            }
            Event::TcpConnectionFails => {
                self.fall_back_to_active(now, "tcp connection failed", out)
            }
            other => self.connected_common(now, other, fsm_err::UNEXPECTED_IN_OPENSENT, out),
        }
    }

    fn in_open_confirm(&mut self, now: Time, ev: Event, out: &mut Vec<Action>) {
        match ev {
            Event::KeepAliveMsg => {
                self.arm_hold(now);
                self.set_state(now, State::Established, "KEEPALIVE received", false, out);
            }
            other => self.connected_common(now, other, fsm_err::UNEXPECTED_IN_OPENCONFIRM, out),
        }
    }

    fn in_established(&mut self, now: Time, ev: Event, out: &mut Vec<Action>) {
        match ev {
            Event::KeepAliveMsg | Event::UpdateMsg => self.arm_hold(now),
            Event::RouteRefreshMsg => {}
            other => self.connected_common(now, other, fsm_err::UNEXPECTED_IN_ESTABLISHED, out),
        }
    }

    /// Handling shared by OpenSent, OpenConfirm and Established for the
    /// events not specific to one of them.
    fn connected_common(&mut self, now: Time, ev: Event, fsm_subcode: u8, out: &mut Vec<Action>) {
        let peer_gr = self
            .negotiated
            .as_ref()
            .is_some_and(|n| n.peer_graceful_restart.is_some());
        match ev {
            Event::KeepaliveTimerExpires => {
                out.push(Action::SendKeepalive);
                self.arm_keepalive(now);
            }
            Event::HoldTimerExpires => {
                let n = notification::new(notification::HOLD_TIMER_EXPIRED, 0);
                self.teardown(
                    now,
                    Some(n),
                    "hold timer expired".into(),
                    peer_gr,
                    true,
                    out,
                );
            }
            Event::TcpConnectionFails => {
                self.teardown(
                    now,
                    None,
                    "tcp connection failed".into(),
                    peer_gr,
                    true,
                    out,
                );
            }
            Event::NotifMsg(n) => {
                let graceful = self.graceful_after_notification(&n);
                let reason = format!("NOTIFICATION received: {}", describe(&n));
                self.teardown(now, None, reason, graceful, true, out);
            }
            Event::BgpHeaderErr(n) => self.fail_with(now, n, out),
            Event::UpdateMsgErr(n) if self.state == State::Established => {
                self.fail_with(now, n, out)
            }
            Event::BgpOpenMsgErr(n) if self.state != State::Established => {
                self.fail_with(now, n, out)
            }
            // A second connection: collision detection (RFC 4271 §6.8) is
            // the daemon's, with `resolve_collision`.
            Event::TcpCrAcked | Event::TcpConnectionConfirmed => {}
            Event::ManualStart | Event::AutomaticStart => {}
            Event::ConnectRetryTimerExpires | Event::IdleHoldTimerExpires => {}
            other => {
                let n = notification::new(notification::FSM_ERROR, fsm_subcode);
                let graceful = self.graceful_after_notification(&n);
                let reason = format!("unexpected {} in {}", event_name(&other), self.state);
                self.teardown(now, Some(n), reason, graceful, true, out);
            }
        }
    }

    /// Send the NOTIFICATION for a message error, close, restart later.
    fn fail_with(&mut self, now: Time, n: Notification, out: &mut Vec<Action>) {
        let graceful = self.graceful_after_notification(&n);
        let reason = format!("error: {}", describe(&n));
        self.teardown(now, Some(n), reason, graceful, true, out);
    }

    /// RFC 4724 / RFC 8538: after a NOTIFICATION (sent or received) the
    /// peer's routes are kept stale only if both sides set the N bit and
    /// it is not a Hard Reset.
    fn graceful_after_notification(&self, n: &Notification) -> bool {
        self.negotiated.as_ref().is_some_and(|neg| {
            neg.peer_graceful_restart.is_some()
                && neg.notification_gr()
                && !notification::is_hard_reset(n)
        })
    }

    /// Send `notif` if connected, drop the connection, go Idle; with
    /// `restart`, start the idle hold timer for an automatic restart.
    fn teardown(
        &mut self,
        now: Time,
        notif: Option<Notification>,
        reason: String,
        graceful: bool,
        restart: bool,
        out: &mut Vec<Action>,
    ) {
        if let Some(n) = notif {
            if self.state.is_connected() {
                out.push(Action::SendNotification(n));
            }
        }
        if self.state.is_connected() || self.state == State::Connect {
            out.push(Action::CloseConnection);
        }
        if restart {
            self.stats.last_error = Some(reason.clone());
        }
        self.timers = Timers::default();
        if restart {
            self.timers.idle_hold = Some(now + secs(self.cfg.idle_hold_time));
        }
        self.set_state(now, State::Idle, &reason, graceful, out);
    }

    /// The one place where the state changes (as BIRD's
    /// `bgp_conn_set_state`): emits `StateChanged`, a tracing event,
    /// `Established`/`SessionDown`, and keeps the per-state data
    /// consistent. `graceful` only matters when leaving Established.
    fn set_state(
        &mut self,
        now: Time,
        to: State,
        reason: &str,
        graceful: bool,
        out: &mut Vec<Action>,
    ) {
        let from = self.state;
        if from == to {
            return;
        }
        tracing::info!(from = %from, to = %to, reason, "BGP session state change");
        self.state = to;
        out.push(Action::StateChanged {
            from,
            to,
            reason: reason.to_string(),
        });
        if from == State::Established {
            self.stats.dropped_count += 1;
            self.established_at = None;
            out.push(Action::SessionDown {
                graceful,
                reason: reason.to_string(),
            });
        }
        if !to.is_connected() {
            self.sent_open = None;
        }
        if !matches!(to, State::OpenConfirm | State::Established) {
            self.negotiated = None;
        }
        if to == State::Established {
            self.stats.established_count += 1;
            self.established_at = Some(now);
            if let Some(n) = &self.negotiated {
                out.push(Action::Established(n.clone()));
            }
        }
    }

    fn arm_connect_retry(&mut self, now: Time) {
        self.timers.connect_retry = Some(now + secs(self.cfg.connect_retry.max(1)));
    }

    fn arm_hold(&mut self, now: Time) {
        let hold = self.negotiated.as_ref().map_or(0, |n| n.hold_time);
        self.timers.hold = (hold > 0).then(|| now + secs(hold));
    }

    fn arm_keepalive(&mut self, now: Time) {
        let ka = self.negotiated.as_ref().map_or(0, |n| n.keepalive);
        self.timers.keepalive = (ka > 0).then(|| now + secs(ka));
    }

    fn count_in(&mut self, ev: &Event) {
        let s = &mut self.stats;
        match ev {
            Event::BgpOpen(_) => s.opens_in += 1,
            Event::KeepAliveMsg => s.keepalives_in += 1,
            Event::UpdateMsg | Event::UpdateMsgErr(_) => s.updates_in += 1,
            Event::RouteRefreshMsg => s.route_refresh_in += 1,
            Event::NotifMsg(n) => {
                s.notifications_in += 1;
                s.last_notification_received = Some(n.clone());
            }
            Event::UpdatesSent(n) => s.updates_out += n,
            Event::RouteRefreshSent => s.route_refresh_out += 1,
            _ => {}
        }
    }

    fn count_out(&mut self, out: &[Action]) {
        let s = &mut self.stats;
        for a in out {
            match a {
                Action::SendOpen(_) => s.opens_out += 1,
                Action::SendKeepalive => s.keepalives_out += 1,
                Action::SendNotification(n) => {
                    s.notifications_out += 1;
                    s.last_notification_sent = Some(n.clone());
                }
                _ => {}
            }
        }
    }
}

fn event_name(ev: &Event) -> &'static str {
    match ev {
        Event::ManualStart => "ManualStart",
        Event::ManualStop => "ManualStop",
        Event::AutomaticStart => "AutomaticStart",
        Event::ConnectRetryTimerExpires => "ConnectRetryTimer expiry",
        Event::HoldTimerExpires => "HoldTimer expiry",
        Event::KeepaliveTimerExpires => "KeepaliveTimer expiry",
        Event::IdleHoldTimerExpires => "IdleHoldTimer expiry",
        Event::TcpCrAcked => "TcpCrAcked",
        Event::TcpConnectionConfirmed => "TcpConnectionConfirmed",
        Event::TcpConnectionFails => "TcpConnectionFails",
        Event::BgpOpen(_) => "OPEN",
        Event::BgpHeaderErr(_) => "message header error",
        Event::BgpOpenMsgErr(_) => "OPEN error",
        Event::NotifMsg(_) => "NOTIFICATION",
        Event::KeepAliveMsg => "KEEPALIVE",
        Event::UpdateMsg => "UPDATE",
        Event::UpdateMsgErr(_) => "UPDATE error",
        Event::RouteRefreshMsg => "ROUTE-REFRESH",
        Event::Stop(_) => "Stop",
        Event::UpdatesSent(_) => "UpdatesSent",
        Event::RouteRefreshSent => "RouteRefreshSent",
    }
}
