//! The pure peer core: everything a neighbour decides, with no I/O.
//!
//! [`PeerCore::handle`]`(now, PeerInput) -> Vec<PeerOutput>` owns both FSM
//! slots of a neighbour (the main connection and a second one racing it) and
//! is the only code that drives [`holdfast_fsm::Session`]. Frames,
//! connection events, timers, RIB output, CLI commands, configuration
//! changes and the NSR resume are all [`PeerInput`]s; the I/O shell
//! (holdfast-speaker's `peer.rs`) carries out the [`PeerOutput`]s in order
//! and owns the sockets. Inputs and outputs are serde types, so a session
//! can be recorded (`holdfastd --record DIR`) and replayed (`holdfast
//! replay FILE`) to the same outputs: the core is deterministic, time is
//! an input.
//!
//! # RFCs covered
//! - RFC 4271 §6.8: connection collision detection. A second (inbound)
//!   connection gets its own FSM until both know the peer's BGP identifier;
//!   the connection opened by the speaker with the higher identifier
//!   survives, the other is closed with Cease/Connection Collision
//!   Resolution. A new connection while Established loses the same way.
//! - RFC 4724 §4.2: a new connection from an Established peer that
//!   negotiated graceful restart is a restart: the old session ends
//!   gracefully and the peer's routes stay, stale, for its restart time,
//!   then until End-of-RIB or the stale-path time.
//! - RFC 4486: a maximum-prefix Cease keeps the session down until an
//!   operator resets it, or for `max_prefix_restart` seconds.
//! - RFC 5882 §4.3 / RFC 9384: [`PeerInput::BfdDown`] stops the session
//!   with Cease/BFD Down (subcode 10) and keeps it down while BFD is down
//!   and then for a hold-down (the neighbour's ConnectRetry time) after
//!   [`PeerInput::BfdUp`], so a flapping link does not flap BGP. BGP does
//!   not wait for BFD at its first start (RFC 5882 §4.1 leaves this to the
//!   operator).
//! - RFC 2918: a ROUTE-REFRESH (subtype 0) on an Established session asks
//!   the RIB to re-send the family ([`PeerOutput::RouteRefresh`]). The
//!   request stays pending, in the core, until the RIB's answer has been
//!   handed to the replicator ([`PeerInput::RibRefreshed`], which follows
//!   the answer's [`PeerInput::RibSend`]s); every change of the pending
//!   list is a [`PeerOutput::RefreshPending`], which the shell replicates
//!   before the bytes that carried the request are confirmed (docs/nsr.md).
//!   A new session forgets the requests of the one before. After a
//!   takeover, [`PeerInput::Resume`] carries the requests the old primary
//!   had not answered, and the core asks the RIB for them again.
//! - The NSR resume: while a resume is awaited, RIB output
//!   ([`PeerInput::RibSend`], [`PeerInput::RibReset`],
//!   [`PeerInput::RibRefreshed`]) is held in the core; it is released, in
//!   order, after the resumed session's first KEEPALIVE (or dropped by
//!   [`PeerInput::AbortResume`]).
//! - RFC 4271 §4.4/§10 HoldTimer, with one NSR exception, the *resume
//!   grace*: after a takeover, until the peer's first message arrives on
//!   the restored connection (at most [`RESUME_GRACE`]),
//!   [`PeerInput::TransportAlive`] restarts an expiring HoldTimer when the
//!   peer's TCP acknowledged our bytes within a KeepaliveTime (plus 1 s).
//!   The peer's own bytes were sent to the failed primary and wait in its
//!   TCP retransmission backoff, which doubles with every takeover that
//!   lands between two retransmissions (found by `holdfast lab chaos`:
//!   five takeovers of one unit in 30 s pushed bird2's next retransmission
//!   25 s past the last resume, beyond its 9 s hold time).
//!
//! # Known issues
//! - Enhanced route refresh (RFC 7313) BoRR/EoRR markers from the peer are
//!   not acted on; only the request subtype is, and only its family is kept
//!   pending, so a takeover answers it as a plain request.
//! - The stale-path time after a graceful restart is fixed (360 s, FRR's
//!   default), not configurable.
//! - The RIB output held while a resume is awaited is not bounded (the RIB
//!   sends little before the resume; the session's Adj-RIB-Out difference
//!   follows it).

use holdfast_fsm::{
    resolve_collision, Action, CollisionWinner, Event, Negotiated, Session, SessionConfig,
    SessionStats, State, Time,
};
use holdfast_wire::error::cease_subcode::{
    ADMINISTRATIVE_RESET, BFD_DOWN, CONNECTION_COLLISION_RESOLUTION, MAX_PREFIXES,
    OTHER_CONFIGURATION_CHANGE,
};
use holdfast_wire::error::error_code::CEASE;
use holdfast_wire::{
    decode_notification, decode_open, decode_route_refresh, msg_type, Family, Notification, Open,
};
use serde::{Deserialize, Serialize};
use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

/// How long a graceful-restart peer's routes stay stale after it comes back,
/// waiting for End-of-RIB (FRR's default stale-path time).
pub const STALE_PATH_TIME: Duration = Duration::from_secs(360);

/// One of the neighbour's two connection slots.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Which {
    /// The session's connection.
    Main,
    /// A second connection racing the main one (collision detection).
    Extra,
}

/// What the core needs to know of the neighbour's configuration.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PeerParams {
    pub enabled: bool,
    pub session: SessionConfig,
    /// Keep the peer's routes stale when it restarts (RFC 4724 helper).
    pub graceful_restart: bool,
    /// After a max-prefix Cease: start again after this many seconds
    /// (`Some`), or stay down until an operator resets the session (`None`).
    pub max_prefix_restart: Option<u32>,
}

/// Encoded, framed BGP messages from the RIB for one session (the buffer
/// is shared with the other sessions it goes to). Recorded as hex; shown
/// by its length only.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RibBytes(#[serde(with = "hex_arc")] pub Arc<Vec<u8>>);

impl std::fmt::Debug for RibBytes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "RibBytes({} bytes)", self.0.len())
    }
}

/// Every input of a neighbour.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum PeerInput {
    /// The peer task starts. `resuming`: an NSR takeover is under way and
    /// the session waits for [`PeerInput::Resume`] instead of connecting.
    Start { resuming: bool },
    /// The outbound connection attempt succeeded; the shell holds it until
    /// the core answers [`PeerOutput::Attach`] or [`PeerOutput::Refuse`].
    Connected,
    /// The outbound connection attempt failed.
    ConnectFailed,
    /// An inbound connection was accepted; the shell holds it as for
    /// [`PeerInput::Connected`].
    Inbound,
    /// The connection on a slot was closed by the peer or failed.
    Closed(Which),
    /// One whole message read on a slot's connection.
    Message {
        slot: Which,
        msg_type: u8,
        #[serde(with = "hex_bytes")]
        body: Vec<u8>,
    },
    /// The framing layer found a bad header (BGPHeaderErr).
    HeaderError {
        slot: Which,
        notification: Notification,
    },
    /// A deadline of [`PeerCore::next_deadline`] has come.
    Timer,
    /// The RIB's output (whole BGP messages) for session generation `gen`.
    RibSend { gen: u64, bytes: RibBytes },
    /// The RIB asks that session generation `gen` be reset (max-prefix).
    RibReset {
        gen: u64,
        notification: Notification,
    },
    /// The RIB's answer to the oldest pending ROUTE-REFRESH of session
    /// generation `gen` (the table and an End-of-RIB, in the
    /// [`PeerInput::RibSend`]s before this) was handed to the replicator.
    RibRefreshed { gen: u64 },
    /// `holdfast reset`: Cease/Administrative Reset, or start when Idle.
    AdminReset,
    /// SIGHUP: the neighbour's new parameters. `transport_changed`: socket
    /// options or the port changed, which needs a new connection.
    Reconfigure {
        params: PeerParams,
        transport_changed: bool,
    },
    /// The neighbour is removed (or the daemon stops).
    Shutdown,
    /// NSR takeover: the session continues, in Established, on the
    /// restored connection the shell holds, from the two replicated OPENs.
    /// `refresh`: the ROUTE-REFRESH requests the old primary had not
    /// answered (replicated), oldest first.
    Resume {
        local_open: Open,
        remote_open: Open,
        #[serde(default)]
        refresh: Vec<Family>,
    },
    /// NSR takeover: the connection could not be restored; start afresh.
    AbortResume,
    /// The neighbour's BFD session went from Up to Down (not because the
    /// peer signalled AdminDown, RFC 5882 §3.2).
    BfdDown,
    /// The neighbour's BFD session is Up again, or BFD was turned off.
    BfdUp,
    /// The main connection's HoldTimer is due during the resume grace: the
    /// peer's TCP last acknowledged us `last_ack_ms` ago (`TCP_INFO`).
    TransportAlive { last_ack_ms: u32 },
}

/// How long after a takeover the resume grace may last: Linux's largest
/// retransmission timeout (`TCP_RTO_MAX`, 120 s) plus a margin.
pub const RESUME_GRACE: Duration = Duration::from_secs(130);

/// A message the core wants written on a slot's connection.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Message {
    Open(Open),
    Keepalive,
    Notification(Notification),
}

/// Every decision of a neighbour; the shell carries them out in order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum PeerOutput {
    /// Open an outbound connection for the main slot.
    Connect,
    /// Close the slot's connection and any connection attempt.
    Close(Which),
    /// Put the connection the shell holds on this slot.
    Attach(Which),
    /// Close the connection the shell holds, after writing this message.
    Refuse(Option<Notification>),
    /// The extra connection replaces the main one (it won the collision).
    Promote,
    /// Write a message on the slot's connection.
    Send(Which, Message),
    /// Write this RIB output (of a [`PeerInput::RibSend`]) on the main
    /// connection.
    WriteRib(RibBytes),
    /// The main session changed state (RFC 4271 §8.2.2).
    StateChanged {
        from: State,
        to: State,
        reason: String,
    },
    /// A NOTIFICATION arrived.
    NotificationReceived(Notification),
    /// A received UPDATE body for the RIB.
    Update(#[serde(with = "hex_bytes")] Vec<u8>),
    /// The peer asks for the family again (ROUTE-REFRESH): ask the RIB.
    RouteRefresh(Family),
    /// The session's ROUTE-REFRESH requests not answered yet changed: these
    /// (oldest first) are to be replicated (NSR), before the bytes that
    /// carried a new one are confirmed.
    RefreshPending(Vec<Family>),
    /// The session is Established: generation `gen`.
    PeerUp { gen: u64, negotiated: Negotiated },
    /// The session went down; `graceful`: its routes are kept stale.
    PeerDown { graceful: bool },
    /// The graceful-restart timer ran out: flush the stale routes.
    StaleTimeout,
    /// NSR: the session resumed on the restored connection.
    Resumed,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Slot {
    fsm: Session,
    /// The slot has a connection; `Some(outbound)`.
    conn: Option<bool>,
    /// An outbound connection attempt is under way.
    connecting: bool,
}

impl Slot {
    fn new(cfg: SessionConfig) -> Slot {
        Slot {
            fsm: Session::new(cfg),
            conn: None,
            connecting: false,
        }
    }
}

/// The decisions of one neighbour: see the module docs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PeerCore {
    params: PeerParams,
    main: Slot,
    extra: Option<Slot>,
    /// Session generation: bumped at every Established.
    gen: u64,
    /// The RIB has been told the session is up.
    up: bool,
    last_negotiated: Option<Negotiated>,
    /// Graceful restart: when the peer's stale routes are flushed.
    stale_deadline: Option<Time>,
    /// After a max-prefix Cease: when the session starts again.
    restart_at: Option<Time>,
    /// Waiting for an NSR resume.
    resuming: bool,
    /// BFD is Down: the session is held down (RFC 5882).
    #[serde(default)]
    bfd_down: bool,
    /// BFD came back: the session starts again at this time (hold-down).
    #[serde(default)]
    bfd_restart_at: Option<Time>,
    /// After a takeover, until the peer's first message: the end of the
    /// resume grace (module docs).
    #[serde(default)]
    resume_grace_until: Option<Time>,
    /// ROUTE-REFRESH requests of session `gen` the RIB has not answered
    /// yet, oldest first (module docs).
    #[serde(default)]
    refresh: VecDeque<Family>,
    /// RIB output arrived while a resume is awaited, released after it.
    #[serde(default)]
    held: Vec<PeerInput>,
}

impl PeerCore {
    pub fn new(params: PeerParams) -> PeerCore {
        PeerCore {
            main: Slot::new(params.session.clone()),
            params,
            extra: None,
            gen: 0,
            up: false,
            last_negotiated: None,
            stale_deadline: None,
            restart_at: None,
            resuming: false,
            bfd_down: false,
            bfd_restart_at: None,
            resume_grace_until: None,
            refresh: VecDeque::new(),
            held: Vec::new(),
        }
    }

    /// Whether the main HoldTimer is due (at `now`) during the resume grace:
    /// the shell then reports [`PeerInput::TransportAlive`] first.
    pub fn hold_grace_due(&self, now: Time) -> bool {
        self.resume_grace_until.is_some_and(|g| now < g)
            && self
                .main
                .fsm
                .timer(holdfast_fsm::Timer::Hold)
                .is_some_and(|d| d <= now)
    }

    /// BFD holds the session down (BFD Down, or its hold-down running).
    pub fn bfd_held(&self) -> bool {
        self.bfd_down || self.bfd_restart_at.is_some()
    }

    pub fn params(&self) -> &PeerParams {
        &self.params
    }

    /// The main session, read-only (status, metrics, NSR records).
    pub fn session(&self) -> &Session {
        &self.main.fsm
    }

    pub fn state(&self) -> State {
        self.main.fsm.state()
    }

    pub fn negotiated(&self) -> Option<&Negotiated> {
        self.main.fsm.negotiated()
    }

    pub fn stats(&self) -> &SessionStats {
        self.main.fsm.stats()
    }

    /// The session generation of the last Established.
    pub fn gen(&self) -> u64 {
        self.gen
    }

    /// The RIB knows the session as up.
    pub fn is_up(&self) -> bool {
        self.up
    }

    /// Whether an UPDATE arriving on the main connection now goes to the
    /// RIB (the main session is Established and the RIB knows it up). Until
    /// a message other than an UPDATE or a KEEPALIVE arrives this stays
    /// true, so the shell may replicate such messages before handing them
    /// to [`PeerCore::handle`].
    pub fn takes_updates(&self) -> bool {
        self.up && self.main.fsm.state() == State::Established
    }

    /// An NSR resume is awaited.
    pub fn resuming(&self) -> bool {
        self.resuming
    }

    /// The current session's ROUTE-REFRESH requests not answered yet,
    /// oldest first (written again when the session is written anew).
    pub fn pending_refreshes(&self) -> Vec<Family> {
        self.refresh.iter().copied().collect()
    }

    /// RIB output held while a resume is awaited (inputs, in order).
    pub fn held(&self) -> &[PeerInput] {
        &self.held
    }

    /// Whether an extra (collision) slot exists.
    pub fn has_extra(&self) -> bool {
        self.extra.is_some()
    }

    /// When [`PeerInput::Timer`] is next due.
    pub fn next_deadline(&self) -> Option<Time> {
        [
            self.main.fsm.next_deadline(),
            self.extra.as_ref().and_then(|e| e.fsm.next_deadline()),
            self.stale_deadline,
            self.restart_at,
            self.bfd_restart_at,
        ]
        .into_iter()
        .flatten()
        .min()
    }

    /// Processes one input at time `now`.
    pub fn handle(&mut self, now: Time, input: PeerInput) -> Vec<PeerOutput> {
        let mut out = Vec::new();
        self.handle_into(now, input, &mut out);
        out
    }

    /// [`PeerCore::handle`], appending to `out` (no allocation per input on
    /// the hot path).
    pub fn handle_into(&mut self, now: Time, input: PeerInput, out: &mut Vec<PeerOutput>) {
        let mut cx = Cx { now, out };
        self.dispatch(&mut cx, input);
    }

    fn dispatch(&mut self, cx: &mut Cx, input: PeerInput) {
        let from_rib = matches!(
            input,
            PeerInput::RibSend { .. } | PeerInput::RibReset { .. } | PeerInput::RibRefreshed { .. }
        );
        if from_rib && self.resuming {
            self.held.push(input);
            return;
        }
        match input {
            PeerInput::Start { resuming } => {
                self.resuming = resuming;
                if self.params.enabled && !resuming {
                    self.fsm(cx, Which::Main, Event::ManualStart);
                }
            }
            PeerInput::Connected => self.connected(cx),
            PeerInput::ConnectFailed => {
                self.main.connecting = false;
                self.fsm(cx, Which::Main, Event::TcpConnectionFails);
            }
            PeerInput::Inbound => self.inbound(cx),
            PeerInput::Closed(w) => self.closed(cx, w),
            PeerInput::Message {
                slot,
                msg_type,
                body,
            } => self.message(cx, slot, msg_type, body),
            PeerInput::HeaderError { slot, notification } => {
                self.fsm(cx, slot, Event::BgpHeaderErr(notification));
            }
            PeerInput::Timer => self.timer(cx),
            PeerInput::RibSend { gen, bytes } => {
                if self.up && gen == self.gen && self.main.conn.is_some() {
                    let messages = count_messages(&bytes.0) as u64;
                    cx.out.push(PeerOutput::WriteRib(bytes));
                    // RIB output bypasses the FSM: tell it, so the counters
                    // move and the KeepaliveTimer restarts (RFC 4271 §4.4).
                    self.fsm(cx, Which::Main, Event::UpdatesSent(messages));
                }
            }
            PeerInput::RibReset { gen, notification } => {
                if self.up && gen == self.gen {
                    self.rib_reset(cx, notification);
                }
            }
            PeerInput::RibRefreshed { gen } => {
                if gen == self.gen && self.refresh.pop_front().is_some() {
                    cx.out
                        .push(PeerOutput::RefreshPending(self.pending_refreshes()));
                }
            }
            PeerInput::AdminReset => {
                self.restart_at = None;
                if self.main.fsm.state() == State::Idle {
                    if self.bfd_held() {
                        tracing::info!("reset ignored: BFD holds the session down");
                    } else if self.params.enabled {
                        self.fsm(cx, Which::Main, Event::ManualStart);
                    }
                } else {
                    let n = cease(ADMINISTRATIVE_RESET);
                    self.fsm(cx, Which::Main, Event::Stop(n));
                }
            }
            PeerInput::Reconfigure {
                params,
                transport_changed,
            } => self.reconfigure(cx, params, transport_changed),
            PeerInput::Shutdown => {
                self.fsm(cx, Which::Main, Event::ManualStop);
                self.session_down(cx, false, "neighbour removed");
            }
            PeerInput::Resume {
                local_open,
                remote_open,
                refresh,
            } => self.resume(cx, local_open, remote_open, refresh),
            PeerInput::AbortResume => {
                self.resuming = false;
                self.held.clear();
                if self.params.enabled {
                    self.fsm(cx, Which::Main, Event::ManualStart);
                }
            }
            PeerInput::BfdDown => self.bfd_down(cx),
            PeerInput::BfdUp => self.bfd_up(cx),
            PeerInput::TransportAlive { last_ack_ms } => self.transport_alive(cx, last_ack_ms),
        }
    }

    /// The resume grace (module docs): the HoldTimer restarts while the
    /// peer's TCP is evidently alive.
    fn transport_alive(&mut self, cx: &Cx, last_ack_ms: u32) {
        if !self.hold_grace_due(cx.now) {
            return;
        }
        let keepalive = self.negotiated().map_or(0, |n| u64::from(n.keepalive));
        if u64::from(last_ack_ms) > keepalive * 1000 + 1000 {
            return;
        }
        if self.main.fsm.restart_hold_timer(cx.now) {
            tracing::info!(
                last_ack_ms,
                "NSR: HoldTimer restarted: no message from the peer since the takeover, but its TCP acknowledges ours (its bytes wait in its retransmission backoff)"
            );
        }
    }

    /// RFC 5882 §4.3: BFD Down takes the session down (Cease/BFD Down,
    /// RFC 9384) and keeps it in Idle until [`PeerInput::BfdUp`].
    fn bfd_down(&mut self, cx: &mut Cx) {
        self.bfd_restart_at = None;
        if self.bfd_down {
            return;
        }
        self.bfd_down = true;
        if self.resuming {
            return;
        }
        tracing::warn!("BFD down: stopping the session (Cease/BFD Down)");
        if self.main.fsm.state() != State::Idle {
            self.fsm(cx, Which::Main, Event::Stop(cease(BFD_DOWN)));
        }
        self.fsm(cx, Which::Main, Event::ManualStop);
        if self.extra.take().is_some() {
            cx.out.push(PeerOutput::Close(Which::Extra));
        }
        self.session_down(cx, false, "BFD down");
    }

    /// BFD is back: the session starts again after the hold-down (the
    /// ConnectRetry time), unless BFD goes down again first.
    fn bfd_up(&mut self, cx: &mut Cx) {
        if !self.bfd_down {
            return;
        }
        self.bfd_down = false;
        let hold = Duration::from_secs(u64::from(self.params.session.connect_retry.max(1)));
        tracing::info!(
            hold_down_s = hold.as_secs(),
            "BFD up: session starts after the hold-down"
        );
        self.bfd_restart_at = Some(cx.now + hold);
    }

    fn slot(&mut self, w: Which) -> Option<&mut Slot> {
        match w {
            Which::Main => Some(&mut self.main),
            Which::Extra => self.extra.as_mut(),
        }
    }

    /// The one place an FSM is driven.
    fn fsm(&mut self, cx: &mut Cx, w: Which, ev: Event) {
        let now = cx.now;
        let Some(slot) = self.slot(w) else { return };
        let actions = slot.fsm.handle(now, ev);
        self.execute(cx, w, actions);
    }

    fn execute(&mut self, cx: &mut Cx, w: Which, actions: Vec<Action>) {
        for a in actions {
            self.action(cx, w, a);
        }
    }

    fn action(&mut self, cx: &mut Cx, w: Which, a: Action) {
        match a {
            Action::Connect => {
                if w == Which::Main {
                    self.main.connecting = true;
                    cx.out.push(PeerOutput::Connect);
                }
            }
            Action::CloseConnection => {
                if let Some(slot) = self.slot(w) {
                    slot.conn = None;
                    slot.connecting = false;
                    cx.out.push(PeerOutput::Close(w));
                }
            }
            Action::SendOpen(open) => self.send(cx, w, Message::Open(open)),
            Action::SendKeepalive => self.send(cx, w, Message::Keepalive),
            Action::SendNotification(n) => {
                tracing::warn!(code = n.code, subcode = n.subcode, "sending NOTIFICATION");
                self.send(cx, w, Message::Notification(n));
            }
            Action::StateChanged { from, to, reason } => {
                if w == Which::Main {
                    cx.out.push(PeerOutput::StateChanged { from, to, reason });
                }
            }
            Action::Established(neg) => self.established(cx, w, neg),
            Action::SessionDown { graceful, reason } => {
                if w == Which::Main {
                    self.session_down(cx, graceful, &reason);
                }
            }
        }
    }

    fn send(&mut self, cx: &mut Cx, w: Which, m: Message) {
        if self.slot(w).is_some_and(|s| s.conn.is_some()) {
            cx.out.push(PeerOutput::Send(w, m));
        }
    }

    fn connected(&mut self, cx: &mut Cx) {
        self.main.connecting = false;
        if self.main.conn.is_some() {
            cx.out.push(PeerOutput::Refuse(None));
            return;
        }
        self.main.conn = Some(true);
        cx.out.push(PeerOutput::Attach(Which::Main));
        self.fsm(cx, Which::Main, Event::TcpCrAcked);
    }

    fn inbound(&mut self, cx: &mut Cx) {
        if !self.params.enabled || self.bfd_held() {
            cx.out.push(PeerOutput::Refuse(None));
            return;
        }
        match self.main.fsm.state() {
            State::Idle | State::Connect | State::Active => {
                self.drop_main_conn(cx);
                self.attach_inbound(cx, Which::Main);
            }
            State::OpenSent | State::OpenConfirm => {
                if self.extra.is_none() {
                    self.extra = Some(Slot::new(self.params.session.clone()));
                    self.attach_inbound(cx, Which::Extra);
                } else {
                    cx.out.push(PeerOutput::Refuse(None));
                }
            }
            State::Established => {
                let peer_gr = self
                    .main
                    .fsm
                    .negotiated()
                    .and_then(|n| n.peer_graceful_restart.as_ref())
                    .is_some();
                if peer_gr && self.params.graceful_restart {
                    tracing::info!("new connection from an established graceful-restart peer: treating it as a restart");
                    self.fsm(cx, Which::Main, Event::TcpConnectionFails);
                    self.drop_main_conn(cx);
                    self.attach_inbound(cx, Which::Main);
                } else {
                    // RFC 4271 §6.8: the new connection loses to the
                    // Established one; say why before closing it.
                    tracing::info!("second connection while Established: closed with Cease/7");
                    cx.out.push(PeerOutput::Refuse(Some(cease(
                        CONNECTION_COLLISION_RESOLUTION,
                    ))));
                }
            }
        }
    }

    fn drop_main_conn(&mut self, cx: &mut Cx) {
        if self.main.conn.is_some() || self.main.connecting {
            self.main.conn = None;
            self.main.connecting = false;
            cx.out.push(PeerOutput::Close(Which::Main));
        }
    }

    /// Puts the held inbound connection on a slot, starting its FSM if needed.
    fn attach_inbound(&mut self, cx: &mut Cx, w: Which) {
        let now = cx.now;
        let Some(slot) = self.slot(w) else { return };
        if slot.fsm.state() == State::Idle {
            let actions: Vec<Action> = slot
                .fsm
                .handle(now, Event::AutomaticStart)
                .into_iter()
                .filter(|a| !matches!(a, Action::Connect))
                .collect();
            self.execute(cx, w, actions);
        }
        let Some(slot) = self.slot(w) else { return };
        slot.connecting = false;
        slot.conn = Some(false);
        cx.out.push(PeerOutput::Attach(w));
        self.fsm(cx, w, Event::TcpConnectionConfirmed);
    }

    fn closed(&mut self, cx: &mut Cx, w: Which) {
        let Some(slot) = self.slot(w) else { return };
        slot.conn = None;
        cx.out.push(PeerOutput::Close(w));
        self.fsm(cx, w, Event::TcpConnectionFails);
        if w == Which::Extra {
            self.extra = None;
        }
    }

    fn message(&mut self, cx: &mut Cx, w: Which, kind: u8, body: Vec<u8>) {
        if w == Which::Main {
            self.resume_grace_until = None;
        }
        let ev = match kind {
            msg_type::UPDATE => {
                let established = self.slot(w).map(|s| s.fsm.state()) == Some(State::Established);
                if w == Which::Main && established && self.up {
                    cx.out.push(PeerOutput::Update(body));
                }
                Event::UpdateMsg
            }
            msg_type::OPEN => match decode_open(&body) {
                Ok(open) => Event::BgpOpen(open),
                Err(e) => Event::BgpOpenMsgErr(e.to_notification()),
            },
            msg_type::KEEPALIVE => Event::KeepAliveMsg,
            msg_type::NOTIFICATION => {
                let n = decode_notification(&body).unwrap_or(Notification {
                    code: 0,
                    subcode: 0,
                    data: body,
                });
                tracing::warn!(code = n.code, subcode = n.subcode, "received NOTIFICATION");
                cx.out.push(PeerOutput::NotificationReceived(n.clone()));
                Event::NotifMsg(n)
            }
            msg_type::ROUTE_REFRESH => {
                match decode_route_refresh(&body) {
                    Ok(rr) if self.up && w == Which::Main && rr.subtype == 0 => {
                        cx.out.push(PeerOutput::RouteRefresh(rr.family));
                        self.refresh.push_back(rr.family);
                        cx.out
                            .push(PeerOutput::RefreshPending(self.pending_refreshes()));
                    }
                    Ok(_) => {}
                    Err(e) => tracing::warn!(error = %e, "malformed ROUTE-REFRESH ignored"),
                }
                Event::RouteRefreshMsg
            }
            _ => return,
        };
        let was_open = matches!(ev, Event::BgpOpen(_));
        self.fsm(cx, w, ev);
        if was_open {
            self.check_collision(cx);
        }
    }

    /// RFC 4271 §6.8: once both connections know the peer's identifier, the
    /// one opened by the speaker with the higher identifier survives.
    fn check_collision(&mut self, cx: &mut Cx) {
        let Some(extra) = &self.extra else { return };
        let both_open =
            self.main.fsm.state() == State::OpenConfirm && extra.fsm.state() == State::OpenConfirm;
        if !both_open {
            return;
        }
        let Some(remote_id) = extra.fsm.negotiated().map(|n| n.remote_id) else {
            return;
        };
        let existing_outbound = self.main.conn.unwrap_or(false);
        let winner = resolve_collision(self.params.session.local_id, remote_id, existing_outbound);
        tracing::info!(?winner, "connection collision resolved");
        match winner {
            CollisionWinner::Existing => self.drop_extra(cx),
            CollisionWinner::New => self.promote_extra(cx),
        }
    }

    fn drop_extra(&mut self, cx: &mut Cx) {
        self.fsm(
            cx,
            Which::Extra,
            Event::Stop(cease(CONNECTION_COLLISION_RESOLUTION)),
        );
        if self.extra.take().is_some() {
            cx.out.push(PeerOutput::Close(Which::Extra));
        }
    }

    /// The extra connection wins: the main one is closed with Cease/7 and
    /// the extra slot takes its place.
    fn promote_extra(&mut self, cx: &mut Cx) {
        let Some(extra) = self.extra.take() else {
            return;
        };
        let actions = self
            .main
            .fsm
            .handle(cx.now, Event::Stop(cease(CONNECTION_COLLISION_RESOLUTION)));
        for a in actions {
            if matches!(a, Action::SendNotification(_) | Action::CloseConnection) {
                self.action(cx, Which::Main, a);
            }
        }
        self.main = extra;
        cx.out.push(PeerOutput::Promote);
    }

    fn established(&mut self, cx: &mut Cx, w: Which, neg: Negotiated) {
        if w == Which::Extra {
            self.promote_extra(cx);
        } else if self.extra.as_ref().is_some_and(|e| e.conn.is_some()) {
            self.drop_extra(cx);
        }
        self.gen += 1;
        self.up = true;
        // A new session: the requests of an earlier one are no longer
        // pending (its `Session` record clears the stored ones too).
        self.refresh.clear();
        tracing::info!(
            remote_id = %neg.remote_id,
            hold = neg.hold_time,
            families = ?neg.families,
            "session established"
        );
        if self.stale_deadline.is_some() {
            self.stale_deadline = Some(cx.now + STALE_PATH_TIME);
        }
        self.last_negotiated = Some(neg.clone());
        cx.out.push(PeerOutput::PeerUp {
            gen: self.gen,
            negotiated: neg,
        });
    }

    fn session_down(&mut self, cx: &mut Cx, graceful: bool, reason: &str) {
        if !self.up {
            return;
        }
        self.up = false;
        self.resume_grace_until = None;
        let restart_time = self
            .last_negotiated
            .as_ref()
            .and_then(|n| n.peer_graceful_restart.as_ref())
            .map(|gr| gr.restart_time);
        let graceful = graceful && self.params.graceful_restart && restart_time.is_some();
        tracing::warn!(graceful, reason, "session down");
        cx.out.push(PeerOutput::PeerDown { graceful });
        self.stale_deadline =
            graceful.then(|| cx.now + Duration::from_secs(u64::from(restart_time.unwrap_or(0))));
    }

    fn timer(&mut self, cx: &mut Cx) {
        let now = cx.now;
        let actions = self.main.fsm.poll(now);
        self.execute(cx, Which::Main, actions);
        if let Some(extra) = self.extra.as_mut() {
            let actions = extra.fsm.poll(now);
            self.execute(cx, Which::Extra, actions);
            if self.extra.as_ref().map(|e| e.fsm.state()) == Some(State::Idle) {
                self.extra = None;
                cx.out.push(PeerOutput::Close(Which::Extra));
            }
        }
        if self.stale_deadline.is_some_and(|d| d <= now) {
            self.stale_deadline = None;
            tracing::info!("graceful-restart timer expired: flushing stale routes");
            cx.out.push(PeerOutput::StaleTimeout);
        }
        if self.bfd_restart_at.is_some_and(|d| d <= now) {
            self.bfd_restart_at = None;
            if self.params.enabled && self.restart_at.is_none() && !self.resuming {
                tracing::info!("BFD hold-down over: starting the session again");
                self.fsm(cx, Which::Main, Event::ManualStart);
            }
        }
        if self.restart_at.is_some_and(|d| d <= now) {
            self.restart_at = None;
            if self.params.enabled && !self.bfd_held() {
                tracing::info!("max-prefix restart time over: starting the session again");
                self.fsm(cx, Which::Main, Event::ManualStart);
            }
        }
    }

    /// The RIB resets the session; a max-prefix Cease keeps it down
    /// (RFC 4486) until an operator reset or `max_prefix_restart` seconds.
    fn rib_reset(&mut self, cx: &mut Cx, n: Notification) {
        let max_prefix = n.code == CEASE && n.subcode == MAX_PREFIXES;
        self.fsm(cx, Which::Main, Event::Stop(n));
        if max_prefix {
            self.fsm(cx, Which::Main, Event::ManualStop);
            match self.params.max_prefix_restart {
                Some(secs) => {
                    tracing::warn!(secs, "maximum prefix count exceeded: restarting later");
                    self.restart_at = Some(cx.now + Duration::from_secs(u64::from(secs)));
                }
                None => {
                    tracing::warn!("maximum prefix count exceeded: session stays down until reset")
                }
            }
        }
    }

    fn reconfigure(&mut self, cx: &mut Cx, new: PeerParams, transport_changed: bool) {
        let reset = self.main.fsm.update_config(new.session.clone()) || transport_changed;
        let was_enabled = self.params.enabled;
        self.params = new;
        if !self.params.enabled {
            self.restart_at = None;
            if was_enabled {
                self.fsm(cx, Which::Main, Event::ManualStop);
                self.session_down(cx, false, "neighbour disabled");
            }
        } else if !was_enabled {
            if !self.bfd_held() {
                self.fsm(cx, Which::Main, Event::ManualStart);
            }
        } else if reset {
            tracing::info!("session settings changed: resetting");
            let n = cease(OTHER_CONFIGURATION_CHANGE);
            self.fsm(cx, Which::Main, Event::Stop(n));
        }
    }

    /// Takeover: the session continues on the restored connection, in
    /// Established, without a new OPEN exchange. The RIB output held
    /// meanwhile follows its first KEEPALIVE; then the requests the old
    /// primary had not answered go to the RIB again.
    fn resume(&mut self, cx: &mut Cx, local_open: Open, remote_open: Open, refresh: Vec<Family>) {
        self.resuming = false;
        let (fsm, actions) =
            match Session::resume(self.params.session.clone(), local_open, remote_open, cx.now) {
                Ok(x) => x,
                Err(n) => {
                    tracing::error!(
                    code = n.code,
                    subcode = n.subcode,
                    "stored session no longer negotiates with this configuration; starting afresh"
                );
                    cx.out.push(PeerOutput::Refuse(None));
                    if self.params.enabled {
                        self.fsm(cx, Which::Main, Event::ManualStart);
                    }
                    self.release_held(cx);
                    return;
                }
            };
        self.last_negotiated = fsm.negotiated().cloned();
        self.main = Slot {
            fsm,
            conn: Some(false),
            connecting: false,
        };
        self.gen = 1;
        self.up = true;
        self.resume_grace_until = Some(cx.now + RESUME_GRACE);
        cx.out.push(PeerOutput::Attach(Which::Main));
        cx.out.push(PeerOutput::StateChanged {
            from: State::Idle,
            to: State::Established,
            reason: "resumed after takeover".into(),
        });
        cx.out.push(PeerOutput::Resumed);
        self.refresh.clear();
        self.execute(cx, Which::Main, actions);
        self.release_held(cx);
        if !refresh.is_empty() && self.up && self.main.fsm.state() == State::Established {
            tracing::info!(
                requests = refresh.len(),
                "NSR: answering the ROUTE-REFRESH request(s) the old primary had not answered"
            );
            for family in refresh {
                cx.out.push(PeerOutput::RouteRefresh(family));
                self.refresh.push_back(family);
            }
            cx.out
                .push(PeerOutput::RefreshPending(self.pending_refreshes()));
        }
    }

    /// The RIB output held while the resume was awaited, in order.
    fn release_held(&mut self, cx: &mut Cx) {
        for input in std::mem::take(&mut self.held) {
            self.dispatch(cx, input);
        }
    }
}

/// BGP messages in a buffer of whole, framed messages (length at header
/// octets 16..18).
fn count_messages(mut buf: &[u8]) -> usize {
    let mut n = 0;
    while buf.len() >= 19 {
        let len = usize::from(u16::from_be_bytes([buf[16], buf[17]]));
        if len < 19 || len > buf.len() {
            break;
        }
        buf = &buf[len..];
        n += 1;
    }
    n
}

/// The time and output of one input.
struct Cx<'a> {
    now: Time,
    out: &'a mut Vec<PeerOutput>,
}

fn cease(subcode: u8) -> Notification {
    Notification {
        code: CEASE,
        subcode,
        data: vec![],
    }
}

/// RIB output as a hex string in recordings.
mod hex_arc {
    use serde::{Deserializer, Serializer};
    use std::sync::Arc;

    pub fn serialize<S: Serializer>(b: &Arc<Vec<u8>>, s: S) -> Result<S::Ok, S::Error> {
        super::hex_bytes::serialize(b, s)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Arc<Vec<u8>>, D::Error> {
        super::hex_bytes::deserialize(d).map(Arc::new)
    }
}

/// Message bodies as hex strings in recordings.
mod hex_bytes {
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(b: &[u8], s: S) -> Result<S::Ok, S::Error> {
        const HEX: &[u8; 16] = b"0123456789abcdef";
        let mut out = String::with_capacity(b.len() * 2);
        for &x in b {
            out.push(char::from(HEX[usize::from(x >> 4)]));
            out.push(char::from(HEX[usize::from(x & 15)]));
        }
        s.serialize_str(&out)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
        let s = String::deserialize(d)?;
        if s.len() % 2 != 0 {
            return Err(serde::de::Error::custom("odd number of hex digits"));
        }
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).map_err(serde::de::Error::custom))
            .collect()
    }
}

#[cfg(test)]
#[path = "core_tests.rs"]
pub(crate) mod tests;

#[cfg(test)]
#[path = "refresh_tests.rs"]
pub(crate) mod refresh_tests;
