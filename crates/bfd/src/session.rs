//! The per-session state machine (RFC 5880 §6).

use crate::packet::{self, Auth, ControlPacket, Diag, State};
use crate::types::{
    AuthRef, DropReason, Input, Output, ResumeState, SessionConfig, Time, SLOW_TX_US,
};
use serde::{Deserialize, Serialize};
use std::num::NonZeroU32;
use std::time::Duration;
use thiserror::Error;

/// Settings a session cannot run with.
#[derive(Debug, Clone, PartialEq, Eq, Error, Serialize, Deserialize)]
pub enum ConfigError {
    #[error("detect multiplier must be at least 1")]
    ZeroDetectMult,
    #[error("Desired Min TX must be nonzero (RFC 5880 §4.1)")]
    ZeroDesiredMinTx,
    #[error("password must be 1 to 16 octets, not {0}")]
    PasswordLen(usize),
    #[error("key of {len} octets is longer than {max}")]
    KeyTooLong { len: usize, max: usize },
    #[error("the local discriminator must be nonzero")]
    ZeroLocalDiscriminator,
    #[error("a session in state {0} needs a nonzero remote discriminator")]
    ZeroRemoteDiscriminator(State),
}

impl SessionConfig {
    /// Check the settings; [`Session::new`] and [`Input::Configure`] refuse
    /// what fails here.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.detect_mult == 0 {
            return Err(ConfigError::ZeroDetectMult);
        }
        if self.desired_min_tx_us == 0 {
            return Err(ConfigError::ZeroDesiredMinTx);
        }
        if let Some(a) = &self.auth {
            let max = a.auth_type.max_key_len();
            if !a.auth_type.is_keyed() && (a.key.is_empty() || a.key.len() > max) {
                return Err(ConfigError::PasswordLen(a.key.len()));
            }
            if a.key.len() > max {
                return Err(ConfigError::KeyTooLong {
                    len: a.key.len(),
                    max,
                });
            }
        }
        Ok(())
    }
}

/// Counters of one session.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionStats {
    pub packets_sent: u64,
    pub packets_received: u64,
    pub packets_dropped: u64,
    pub up_count: u64,
    pub down_count: u64,
}

/// What one call asks to transmit at its end.
#[derive(Default)]
struct Tx {
    /// A packet now (state change, Poll start, periodic timer).
    send: bool,
    /// A packet with the Final bit, answering a Poll.
    final_: bool,
}

/// One BFD session (RFC 5880 §6.8.1 state variables and timers): a pure
/// state machine. Feed it [`Input`]s with the current time and carry out
/// the returned [`Output`]s in order; deliver [`Input::Timer`] at
/// [`Session::next_deadline`].
///
/// The whole state is serde-serialisable, the jitter source included, so a
/// snapshot replays deterministically.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Session {
    cfg: SessionConfig,
    state: State,
    local_diag: Diag,
    local_discr: u32,
    remote_discr: u32,
    remote_state: State,
    /// Zero until a packet is accepted.
    remote_detect_mult: u8,
    remote_desired_min_tx_us: u32,
    remote_min_rx_us: u32,
    /// bfd.DesiredMinTxInterval and bfd.RequiredMinRxInterval: the values
    /// in the packets we send.
    adv_tx_us: u32,
    adv_rx_us: u32,
    /// The values the transmission interval and the detection time are
    /// computed from; they trail the advertised ones during a Poll
    /// Sequence (§6.8.3).
    tx_in_use_us: u32,
    rx_in_use_us: u32,
    polling: bool,
    xmit_auth_seq: u32,
    /// bfd.RcvAuthSeq, `Some` while bfd.AuthSeqKnown is 1.
    rcv_auth_seq: Option<u32>,
    /// The last packet sent, without its authentication section (Keyed
    /// MD5/SHA1 advance the sequence number when it changes).
    last_sent: Option<ControlPacket>,
    last_rx: Option<Time>,
    next_tx: Option<Time>,
    detect_deadline: Option<Time>,
    rng: u64,
    stats: SessionStats,
}

impl Session {
    /// A session in Down. `seed` drives the TX jitter (§6.8.7) and the
    /// initial authentication sequence number; the first packet is due at
    /// `now` unless the session is passive.
    pub fn new(
        cfg: SessionConfig,
        local_discriminator: NonZeroU32,
        seed: u64,
        now: Time,
    ) -> Result<Session, ConfigError> {
        cfg.validate()?;
        let tx = cfg.desired_min_tx_us.max(SLOW_TX_US);
        let rx = cfg.required_min_rx_us;
        let mut s = Session {
            state: State::Down,
            local_diag: Diag::None,
            local_discr: local_discriminator.get(),
            remote_discr: 0,
            remote_state: State::Down,
            remote_detect_mult: 0,
            remote_desired_min_tx_us: 0,
            remote_min_rx_us: 1,
            adv_tx_us: tx,
            adv_rx_us: rx,
            tx_in_use_us: tx,
            rx_in_use_us: rx,
            polling: false,
            xmit_auth_seq: 0,
            rcv_auth_seq: None,
            last_sent: None,
            last_rx: None,
            next_tx: None,
            detect_deadline: None,
            rng: seed,
            stats: SessionStats::default(),
            cfg,
        };
        s.xmit_auth_seq = s.random() as u32;
        if s.may_transmit() {
            s.next_tx = Some(now);
        }
        Ok(s)
    }

    /// Non-stop BFD: a session taken over from a failed primary, in the
    /// replicated state (normally Up) with the same discriminators and the
    /// intervals last advertised, so the peer sees neither a Poll nor a
    /// changed value. Returns the session and its first output: a packet
    /// at once. The detection timer waits for the peer's first packet or
    /// [`Input::PathReady`]: until the service address has moved here,
    /// none of the peer's packets can arrive, and the move (after the
    /// takeover is ready, by the control plane) may take longer than a
    /// detection time of a few hundred ms. A difference between
    /// `cfg` and the replicated intervals is negotiated by the next
    /// [`Input::Configure`].
    pub fn resume(
        cfg: SessionConfig,
        rs: ResumeState,
        seed: u64,
        now: Time,
    ) -> Result<(Session, Vec<Output>), ConfigError> {
        let local =
            NonZeroU32::new(rs.local_discriminator).ok_or(ConfigError::ZeroLocalDiscriminator)?;
        if rs.remote_discriminator == 0 && matches!(rs.state, State::Init | State::Up) {
            return Err(ConfigError::ZeroRemoteDiscriminator(rs.state));
        }
        let mut s = Session::new(cfg, local, seed, now)?;
        s.state = rs.state;
        s.local_diag = rs.local_diag;
        s.remote_discr = rs.remote_discriminator;
        s.remote_state = if rs.remote_discriminator == 0 {
            State::Down
        } else {
            rs.state
        };
        s.remote_detect_mult = rs.remote_detect_mult;
        s.remote_desired_min_tx_us = rs.remote_desired_min_tx_us;
        s.remote_min_rx_us = rs.remote_min_rx_us;
        s.adv_tx_us = rs.desired_min_tx_us.max(1);
        s.adv_rx_us = rs.required_min_rx_us;
        s.tx_in_use_us = s.adv_tx_us;
        s.rx_in_use_us = s.adv_rx_us;
        s.xmit_auth_seq = rs.xmit_auth_seq;
        s.rcv_auth_seq = rs.rcv_auth_seq;
        s.last_rx = Some(now);
        s.detect_deadline = None;
        s.next_tx = None;
        let mut out = Vec::new();
        let tx = Tx {
            send: true,
            final_: false,
        };
        s.flush(now, tx, &mut out);
        tracing::info!(
            local = s.local_discr,
            remote = s.remote_discr,
            state = %s.state,
            "BFD session resumed"
        );
        Ok((s, out))
    }

    /// The state a backup needs to [`Session::resume`] this session.
    pub fn resume_state(&self) -> ResumeState {
        ResumeState {
            state: self.state,
            local_diag: self.local_diag,
            local_discriminator: self.local_discr,
            remote_discriminator: self.remote_discr,
            desired_min_tx_us: self.adv_tx_us,
            required_min_rx_us: self.adv_rx_us,
            remote_detect_mult: self.remote_detect_mult,
            remote_desired_min_tx_us: self.remote_desired_min_tx_us,
            remote_min_rx_us: self.remote_min_rx_us,
            xmit_auth_seq: self.xmit_auth_seq,
            rcv_auth_seq: self.rcv_auth_seq,
            detect_mult: self.cfg.detect_mult,
            auth: self.cfg.auth.as_ref().map(|a| AuthRef {
                auth_type: a.auth_type,
                key_id: a.key_id,
            }),
        }
    }

    pub fn state(&self) -> State {
        self.state
    }

    /// bfd.LocalDiag: why the session last changed state.
    pub fn local_diag(&self) -> Diag {
        self.local_diag
    }

    pub fn local_discriminator(&self) -> u32 {
        self.local_discr
    }

    /// Zero until the peer is heard, and again after a detection time
    /// without a packet.
    pub fn remote_discriminator(&self) -> u32 {
        self.remote_discr
    }

    pub fn remote_state(&self) -> State {
        self.remote_state
    }

    pub fn config(&self) -> &SessionConfig {
        &self.cfg
    }

    pub fn stats(&self) -> &SessionStats {
        &self.stats
    }

    /// True while a Poll Sequence waits for the peer's Final.
    pub fn polling(&self) -> bool {
        self.polling
    }

    /// (Desired Min TX, Required Min RX) as advertised now, in µs.
    pub fn advertised_intervals(&self) -> (u32, u32) {
        (self.adv_tx_us, self.adv_rx_us)
    }

    /// The periodic transmission interval before jitter (§6.8.7): the
    /// larger of bfd.DesiredMinTxInterval in use and the peer's Required
    /// Min RX. `None` while the peer asks for no packets.
    pub fn tx_interval(&self) -> Option<Duration> {
        (self.remote_min_rx_us != 0)
            .then(|| Duration::from_micros(u64::from(self.tx_in_use_us.max(self.remote_min_rx_us))))
    }

    /// The detection time (§6.8.4, asynchronous mode): the peer's Detect
    /// Mult times the larger of our Required Min RX in use and the peer's
    /// Desired Min TX. `None` until the peer is heard.
    pub fn detection_time(&self) -> Option<Duration> {
        (self.remote_detect_mult != 0).then(|| {
            let per = self.rx_in_use_us.max(self.remote_desired_min_tx_us);
            Duration::from_micros(u64::from(self.remote_detect_mult) * u64::from(per))
        })
    }

    /// Earliest running timer (transmission or detection).
    pub fn next_deadline(&self) -> Option<Time> {
        match (self.next_tx, self.detect_deadline) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Process one input at time `now`.
    pub fn handle(&mut self, now: Time, input: Input) -> Vec<Output> {
        let mut out = Vec::new();
        let mut tx = Tx::default();
        match input {
            Input::Received(buf) => {
                if let Err(reason) = self.receive(now, &buf, &mut tx, &mut out) {
                    self.stats.packets_dropped += 1;
                    tracing::debug!(local = self.local_discr, %reason, "BFD packet dropped");
                    out.push(Output::Dropped(reason));
                }
            }
            Input::Timer => self.fire(now, &mut tx, &mut out),
            Input::AdminDown => {
                if self.state != State::AdminDown {
                    self.detect_deadline = None;
                    self.set_state(
                        State::AdminDown,
                        Diag::AdministrativelyDown,
                        &mut tx,
                        &mut out,
                    );
                }
            }
            Input::PathReady => {
                if self.detect_deadline.is_none() && matches!(self.state, State::Init | State::Up) {
                    self.detect_deadline = self.detection_time().map(|d| now + d);
                }
            }
            Input::AdminUp => {
                if self.state == State::AdminDown {
                    self.set_state(State::Down, Diag::None, &mut tx, &mut out);
                }
            }
            Input::Configure(cfg) => match cfg.validate() {
                Ok(()) => {
                    self.cfg = cfg;
                    self.sync_intervals(&mut tx);
                }
                Err(e) => {
                    tracing::warn!(local = self.local_discr, error = %e, "BFD configuration refused");
                }
            },
        }
        self.flush(now, tx, &mut out);
        out
    }

    /// §6.8.6 after the codec's checks: discriminator, authentication,
    /// then the remote variables and the state table.
    fn receive(
        &mut self,
        now: Time,
        buf: &[u8],
        tx: &mut Tx,
        out: &mut Vec<Output>,
    ) -> Result<(), DropReason> {
        let pkt = ControlPacket::decode(buf)?;
        if pkt.your_discriminator != 0 && pkt.your_discriminator != self.local_discr {
            return Err(DropReason::YourDiscriminator {
                got: pkt.your_discriminator,
                ours: self.local_discr,
            });
        }
        self.authenticate(now, buf, &pkt)?;
        self.stats.packets_received += 1;
        self.last_rx = Some(now);
        self.remote_discr = pkt.my_discriminator;
        self.remote_state = pkt.state;
        self.remote_detect_mult = pkt.detect_mult;
        self.remote_desired_min_tx_us = pkt.desired_min_tx_us;
        self.remote_min_rx_us = pkt.required_min_rx_us;
        if pkt.final_ && self.polling {
            self.polling = false;
            self.tx_in_use_us = self.adv_tx_us;
            self.rx_in_use_us = self.adv_rx_us;
            tracing::debug!(local = self.local_discr, "BFD poll sequence complete");
            out.push(Output::PollComplete);
            self.sync_intervals(tx);
        }
        if self.state == State::AdminDown {
            return Ok(());
        }
        self.detect_deadline = self.detection_time().map(|d| now + d);
        let neighbor_down = Diag::NeighborSignaledSessionDown;
        match (self.state, pkt.state) {
            (State::Init | State::Up, State::AdminDown) | (State::Up, State::Down) => {
                self.set_state(State::Down, neighbor_down, tx, out)
            }
            (State::Down, State::Down) => self.set_state(State::Init, self.local_diag, tx, out),
            (State::Down, State::Init) | (State::Init, State::Init | State::Up) => {
                self.set_state(State::Up, Diag::None, tx, out)
            }
            _ => {}
        }
        if pkt.poll {
            tx.final_ = true;
        }
        Ok(())
    }

    /// §6.7: the A bit against the configuration, the password or digest,
    /// and the sequence number window of Keyed MD5/SHA1 (§6.7.3, §6.7.4:
    /// `RcvAuthSeq` to `RcvAuthSeq + 3 × Detect Mult`, from `RcvAuthSeq + 1`
    /// when meticulous; Detect Mult is the received packet's).
    fn authenticate(
        &mut self,
        now: Time,
        buf: &[u8],
        pkt: &ControlPacket,
    ) -> Result<(), DropReason> {
        let Some(cfg) = &self.cfg.auth else {
            return match pkt.auth {
                Some(_) => Err(DropReason::UnexpectedAuth),
                None => Ok(()),
            };
        };
        packet::verify(buf, cfg.auth_type, cfg.key_id, &cfg.key)?;
        let Some(seq) = pkt.auth.as_ref().and_then(Auth::seq) else {
            return Ok(());
        };
        // bfd.AuthSeqKnown is cleared after twice the detection time
        // without a packet.
        if let (Some(last), Some(d)) = (self.last_rx, self.detection_time()) {
            if now >= last + 2 * d {
                self.rcv_auth_seq = None;
            }
        }
        if let Some(last) = self.rcv_auth_seq {
            let ahead = seq.wrapping_sub(last);
            let min = u32::from(cfg.auth_type.is_meticulous());
            let max = 3 * u32::from(pkt.detect_mult);
            if ahead < min || ahead > max {
                return Err(DropReason::Sequence { seq, last });
            }
        }
        self.rcv_auth_seq = Some(seq);
        Ok(())
    }

    /// Fire the detection timer (§6.8.4) and the transmission timer.
    fn fire(&mut self, now: Time, tx: &mut Tx, out: &mut Vec<Output>) {
        if self.detect_deadline.is_some_and(|d| d <= now) {
            self.detect_deadline = None;
            self.remote_discr = 0;
            self.remote_state = State::Down;
            if matches!(self.state, State::Init | State::Up) {
                self.set_state(State::Down, Diag::ControlDetectionTimeExpired, tx, out);
            }
        }
        if self.next_tx.is_some_and(|t| t <= now) {
            tx.send = true;
        }
    }

    /// The one place where the state changes: `StateChanged`, a tracing
    /// event, a packet at once, and the intervals of the new state.
    fn set_state(&mut self, to: State, diag: Diag, tx: &mut Tx, out: &mut Vec<Output>) {
        let from = self.state;
        if from == to {
            return;
        }
        tracing::info!(
            local = self.local_discr,
            remote = self.remote_discr,
            from = %from,
            to = %to,
            diag = %diag,
            "BFD session state change"
        );
        self.state = to;
        self.local_diag = diag;
        if to == State::Up {
            self.stats.up_count += 1;
        }
        if from == State::Up {
            self.stats.down_count += 1;
        }
        out.push(Output::StateChanged { from, to, diag });
        tx.send = true;
        self.sync_intervals(tx);
    }

    /// Bring the advertised intervals to what the configuration and the
    /// state want (§6.8.3). Not Up: Desired Min TX at least one second,
    /// everything at once, no Poll. Up: a change starts a Poll Sequence; a
    /// faster TX and a slower RX apply at once, a slower TX and a faster RX
    /// when the Final arrives. A change during a Poll waits for its end.
    fn sync_intervals(&mut self, tx: &mut Tx) {
        let want_rx = self.cfg.required_min_rx_us;
        if self.state != State::Up {
            let want_tx = self.cfg.desired_min_tx_us.max(SLOW_TX_US);
            self.adv_tx_us = want_tx;
            self.adv_rx_us = want_rx;
            self.tx_in_use_us = want_tx;
            self.rx_in_use_us = want_rx;
            self.polling = false;
            return;
        }
        let want_tx = self.cfg.desired_min_tx_us;
        if self.polling || (want_tx, want_rx) == (self.adv_tx_us, self.adv_rx_us) {
            return;
        }
        self.tx_in_use_us = self.tx_in_use_us.min(want_tx);
        self.rx_in_use_us = self.rx_in_use_us.max(want_rx);
        self.adv_tx_us = want_tx;
        self.adv_rx_us = want_rx;
        self.polling = true;
        tracing::debug!(
            local = self.local_discr,
            desired_min_tx_us = want_tx,
            required_min_rx_us = want_rx,
            "BFD poll sequence started"
        );
        tx.send = true;
    }

    /// Periodic transmission is allowed unless passive and unheard, or the
    /// peer asks for no packets (§6.8.7).
    fn may_transmit(&self) -> bool {
        !(self.cfg.passive && self.remote_discr == 0) && self.remote_min_rx_us != 0
    }

    /// Send what `tx` asks for and keep the transmission timer consistent
    /// with the current interval.
    fn flush(&mut self, now: Time, tx: Tx, out: &mut Vec<Output>) {
        let periodic = self.may_transmit();
        if tx.final_ || (tx.send && periodic) {
            let bytes = self.build(tx.final_);
            self.stats.packets_sent += 1;
            out.push(Output::Send(bytes));
            self.next_tx = periodic.then(|| now + self.jittered());
            return;
        }
        let Some(interval) = self.tx_interval().filter(|_| periodic) else {
            self.next_tx = None;
            return;
        };
        match self.next_tx {
            None => self.next_tx = Some(now),
            Some(t) if t > now + interval => self.next_tx = Some(now + self.jittered()),
            Some(_) => {}
        }
    }

    /// The next packet (§6.8.7), signed; advances the sequence number.
    fn build(&mut self, final_: bool) -> Vec<u8> {
        let mut pkt = ControlPacket {
            diag: self.local_diag,
            state: self.state,
            poll: self.polling && !final_,
            final_,
            control_plane_independent: false,
            demand: false,
            detect_mult: self.cfg.detect_mult,
            my_discriminator: self.local_discr,
            your_discriminator: self.remote_discr,
            desired_min_tx_us: self.adv_tx_us,
            required_min_rx_us: self.adv_rx_us,
            required_min_echo_rx_us: 0,
            auth: None,
        };
        let Some(auth) = self.cfg.auth.clone() else {
            return pkt.encode();
        };
        let seq = if auth.auth_type.is_meticulous() {
            let seq = self.xmit_auth_seq;
            self.xmit_auth_seq = seq.wrapping_add(1);
            seq
        } else {
            if auth.auth_type.is_keyed() && self.last_sent.as_ref() != Some(&pkt) {
                self.xmit_auth_seq = self.xmit_auth_seq.wrapping_add(1);
            }
            self.xmit_auth_seq
        };
        self.last_sent = Some(pkt.clone());
        pkt.auth = Some(Auth::unsigned(auth.auth_type, auth.key_id, seq, &auth.key));
        let mut bytes = pkt.encode();
        // The key length was validated with the configuration and the
        // section was just encoded, so signing cannot fail.
        let signed = packet::sign(&mut bytes, &auth.key);
        debug_assert!(signed.is_ok(), "{signed:?}");
        bytes
    }

    /// The transmission interval with the jitter of §6.8.7: reduced by
    /// 0–25%, or by 10–25% when bfd.DetectMult is 1.
    fn jittered(&mut self) -> Duration {
        let base = self
            .tx_interval()
            .unwrap_or(Duration::from_micros(u64::from(SLOW_TX_US)));
        let us = base.as_micros() as u64;
        let min_pct = if self.cfg.detect_mult == 1 { 10 } else { 0 };
        let lo = us * min_pct / 100;
        let hi = us * 25 / 100;
        let cut = lo + self.random() % (hi - lo + 1);
        Duration::from_micros(us - cut)
    }

    /// SplitMix64: a small deterministic generator for the jitter and the
    /// initial sequence number.
    fn random(&mut self) -> u64 {
        self.rng = self.rng.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.rng;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
}
