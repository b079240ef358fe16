//! The RTR router side as a pure core: bytes and time in, bytes to send,
//! connection decisions and VRP changes out. The shell (holdfastd's
//! `rpki` task) owns the TCP connection and the clock.
//!
//! One [`Client`] talks to one cache at a time; the shell moves it to
//! another cache with [`Client::handle`]`(Input::Connected)` after a
//! [`Input::Closed`]. The VRP set is kept across connections (RFC 8210 §6:
//! until the expire interval passes without a successful update), so a
//! reconnect first tries an incremental Serial Query.

use crate::pdu::{self, error_code, Pdu, PduError, Timers};
use crate::vrp::Vrp;
use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

/// The highest protocol version this router speaks (RFC 8210).
pub const MAX_VERSION: u8 = 1;

/// The configured timers, used until a version 1 End of Data gives the
/// cache's (and always with a version 0 cache).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClientConfig {
    pub refresh: Duration,
    pub retry: Duration,
    pub expire: Duration,
}

impl Default for ClientConfig {
    /// RFC 8210 §6's defaults.
    fn default() -> Self {
        ClientConfig {
            refresh: Duration::from_secs(3600),
            retry: Duration::from_secs(600),
            expire: Duration::from_secs(7200),
        }
    }
}

/// What happens to the client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Input {
    /// A connection to the cache is open.
    Connected,
    /// Bytes read from the connection.
    Received(Vec<u8>),
    /// The connection closed or failed.
    Closed,
    /// Time passed (the shell calls this at [`Client::next_deadline`]).
    Tick,
}

/// A committed change of the VRP set (at an End of Data, or when the data
/// expired).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct VrpUpdate {
    pub added: Vec<Vrp>,
    pub removed: Vec<Vrp>,
    /// A Reset Query's answer (the whole set was replaced), or expiry.
    pub reset: bool,
}

/// What the shell must do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Output {
    /// Write these bytes to the connection.
    Send(Vec<u8>),
    /// Close the connection and connect again after `after` (zero: now).
    Close { reason: String, after: Duration },
    /// The VRP set changed.
    Update(VrpUpdate),
    /// Something an operator should see in the log.
    Warn(String),
}

/// The client's state for `show rpki`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Status {
    pub connected: bool,
    pub version: u8,
    pub session: Option<u16>,
    pub serial: Option<u32>,
    pub vrps_v4: usize,
    pub vrps_v6: usize,
    pub timers: Timers,
    /// When the last End of Data was applied.
    pub last_update: Option<Instant>,
    /// End of Data PDUs applied, Cache Resets and Error Reports received.
    pub updates: u64,
    pub resets: u64,
    pub errors: u64,
}

/// A transfer between a Cache Response and its End of Data.
#[derive(Debug, Default)]
struct Transfer {
    /// The answer to a Reset Query: the set starts empty.
    reset: bool,
    /// Each VRP this transfer touched: present after it or not.
    changes: BTreeMap<Vrp, bool>,
}

/// The RTR client core.
#[derive(Debug)]
pub struct Client {
    timers: Timers,
    version: u8,
    /// The version is fixed once the cache answered with a Cache Response.
    negotiated: bool,
    connected: bool,
    buf: Vec<u8>,
    session: Option<u16>,
    serial: Option<u32>,
    vrps: BTreeSet<Vrp>,
    /// IPv4 VRPs among `vrps`.
    vrps_v4: usize,
    /// A query was sent and its Cache Response is awaited, or a transfer
    /// runs.
    querying: Option<Option<Transfer>>,
    /// When the last End of Data was applied (the expire interval runs
    /// from it).
    last_update: Option<Instant>,
    next_refresh: Option<Instant>,
    updates: u64,
    resets: u64,
    errors: u64,
}

fn is_v4(v: &Vrp) -> bool {
    v.prefix.afi() == holdfast_wire::Afi::Ipv4
}

fn secs(d: Duration) -> u32 {
    d.as_secs().min(u32::MAX as u64) as u32
}

impl Client {
    pub fn new(cfg: ClientConfig) -> Client {
        Client {
            timers: Timers {
                refresh: secs(cfg.refresh),
                retry: secs(cfg.retry),
                expire: secs(cfg.expire),
            },
            version: MAX_VERSION,
            negotiated: false,
            connected: false,
            buf: Vec::new(),
            session: None,
            serial: None,
            vrps: BTreeSet::new(),
            vrps_v4: 0,
            querying: None,
            last_update: None,
            next_refresh: None,
            updates: 0,
            resets: 0,
            errors: 0,
        }
    }

    /// The current VRP set.
    pub fn vrps(&self) -> &BTreeSet<Vrp> {
        &self.vrps
    }

    /// The retry interval in force (the delay before a reconnection).
    pub fn retry(&self) -> Duration {
        Duration::from_secs(self.timers.retry.max(1) as u64)
    }

    pub fn status(&self) -> Status {
        let v4 = self.vrps_v4;
        Status {
            connected: self.connected,
            version: self.version,
            session: self.session,
            serial: self.serial,
            vrps_v4: v4,
            vrps_v6: self.vrps.len() - v4,
            timers: self.timers,
            last_update: self.last_update,
            updates: self.updates,
            resets: self.resets,
            errors: self.errors,
        }
    }

    /// When [`Input::Tick`] is next due: the refresh (connected and idle)
    /// or the data's expiry.
    pub fn next_deadline(&self) -> Option<Instant> {
        let refresh = self
            .next_refresh
            .filter(|_| self.connected && self.querying.is_none());
        let expire = self.expiry();
        match (refresh, expire) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    fn expiry(&self) -> Option<Instant> {
        self.last_update
            .filter(|_| !self.vrps.is_empty() || self.session.is_some())
            .map(|t| t + Duration::from_secs(self.timers.expire as u64))
    }

    /// Feeds one input at time `now`.
    pub fn handle(&mut self, now: Instant, input: Input) -> Vec<Output> {
        let mut out = Vec::new();
        match input {
            Input::Connected => {
                self.connected = true;
                self.buf.clear();
                self.query(&mut out);
            }
            Input::Closed => {
                self.connected = false;
                self.buf.clear();
                self.querying = None;
            }
            Input::Received(bytes) => {
                self.buf.extend_from_slice(&bytes);
                self.drain(now, &mut out);
            }
            Input::Tick => {}
        }
        self.timers_due(now, &mut out);
        out
    }

    fn timers_due(&mut self, now: Instant, out: &mut Vec<Output>) {
        if self.expiry().is_some_and(|t| now >= t) {
            out.push(Output::Warn(format!(
                "RPKI data expired ({} s without a successful update): {} VRPs dropped",
                self.timers.expire,
                self.vrps.len()
            )));
            let removed: Vec<Vrp> = std::mem::take(&mut self.vrps).into_iter().collect();
            self.vrps_v4 = 0;
            self.session = None;
            self.serial = None;
            self.last_update = None;
            out.push(Output::Update(VrpUpdate {
                added: Vec::new(),
                removed,
                reset: true,
            }));
        }
        if self.connected && self.querying.is_none() && self.next_refresh.is_some_and(|t| now >= t)
        {
            self.query(out);
        }
    }

    fn send(&self, pdu: Pdu, out: &mut Vec<Output>) {
        let mut b = Vec::new();
        pdu.encode(self.version, &mut b);
        out.push(Output::Send(b));
    }

    /// A Serial Query when we hold a session's data, else a Reset Query.
    fn query(&mut self, out: &mut Vec<Output>) {
        let pdu = match (self.session, self.serial) {
            (Some(session), Some(serial)) => Pdu::SerialQuery { session, serial },
            _ => Pdu::ResetQuery,
        };
        self.send(pdu, out);
        self.querying = Some(None);
        self.next_refresh = None;
    }

    /// Sends an Error Report about `bad` and closes; `flush` drops our data
    /// (RFC 8210 §5.1 on a session mismatch, §5.6 on a bad transfer).
    fn fail(&mut self, code: u16, bad: &[u8], text: String, flush: bool, out: &mut Vec<Output>) {
        self.errors += 1;
        self.send(
            Pdu::ErrorReport {
                code,
                pdu: bad.to_vec(),
                text: text.clone(),
            },
            out,
        );
        if flush {
            self.session = None;
            self.serial = None;
        }
        self.querying = None;
        out.push(Output::Close {
            reason: format!("{}: {text}", pdu::error_name(code)),
            after: self.retry(),
        });
        self.connected = false;
        self.buf.clear();
    }

    fn drain(&mut self, now: Instant, out: &mut Vec<Output>) {
        while self.connected {
            let (version, p, n) = match pdu::decode(&self.buf) {
                Ok(Some(x)) => x,
                Ok(None) => return,
                Err(e) => {
                    let head = self.buf[..self.buf.len().min(64)].to_vec();
                    let text = e.to_string();
                    let code = e.code();
                    if let PduError::Version(_) = e {
                        // The cache speaks a version beyond ours: tell it ours.
                        self.negotiated = true;
                    }
                    self.fail(code, &head, text, false, out);
                    return;
                }
            };
            let raw: Vec<u8> = self.buf.drain(..n).collect();
            self.pdu(now, version, p, &raw, out);
        }
    }

    fn pdu(&mut self, now: Instant, version: u8, p: Pdu, raw: &[u8], out: &mut Vec<Output>) {
        if let Pdu::ErrorReport { code, text, .. } = &p {
            self.errors += 1;
            let unsupported = *code == error_code::UNSUPPORTED_VERSION;
            if unsupported && !self.negotiated && version < self.version {
                // RFC 8210 §7: fall back to the cache's version (RFC 6810).
                out.push(Output::Warn(format!(
                    "cache does not support RTR version {}: falling back to version {version}",
                    self.version
                )));
                self.version = version;
                self.close_now(
                    format!("version fallback to {version}"),
                    Duration::ZERO,
                    out,
                );
                return;
            }
            // Our session may be the problem (a restarted cache reports a
            // session mismatch as Corrupt Data): the next connection asks
            // for everything with a Reset Query. The VRPs stay until that
            // answer replaces them.
            self.session = None;
            self.serial = None;
            let after = self.retry();
            let text = text.trim_end_matches('\0');
            self.close_now(
                format!(
                    "cache sent Error Report: {} ({text})",
                    pdu::error_name(*code)
                ),
                after,
                out,
            );
            return;
        }
        if version != self.version {
            if !self.negotiated && version < self.version {
                self.version = version;
            } else {
                self.fail(
                    error_code::UNEXPECTED_VERSION,
                    raw,
                    format!(
                        "PDU version {version} on a version {} session",
                        self.version
                    ),
                    false,
                    out,
                );
                return;
            }
        }
        match p {
            Pdu::SerialNotify { .. } => {
                if self.querying.is_none() {
                    self.query(out);
                }
            }
            Pdu::CacheResponse { session } => {
                self.negotiated = true;
                let reset = self.session.is_none();
                if !reset && self.session != Some(session) {
                    self.fail(
                        error_code::CORRUPT_DATA,
                        raw,
                        format!(
                            "session ID {session} differs from {}",
                            self.session.unwrap_or_default()
                        ),
                        true,
                        out,
                    );
                    return;
                }
                self.session = Some(session);
                self.querying = Some(Some(Transfer {
                    reset,
                    changes: BTreeMap::new(),
                }));
            }
            Pdu::Ipv4Prefix(x) => {
                let v = Vrp::v4(x.addr, x.len, x.max_len, x.asn);
                self.prefix(v, x.announce, raw, out);
            }
            Pdu::Ipv6Prefix(x) => {
                let v = Vrp::v6(x.addr, x.len, x.max_len, x.asn);
                self.prefix(v, x.announce, raw, out);
            }
            Pdu::EndOfData {
                session,
                serial,
                timers,
            } => self.end_of_data(now, session, serial, timers, raw, out),
            Pdu::CacheReset => {
                self.resets += 1;
                self.session = None;
                self.serial = None;
                self.query(out);
            }
            Pdu::Other { .. } => {}
            Pdu::SerialQuery { .. } | Pdu::ResetQuery | Pdu::ErrorReport { .. } => {
                self.fail(
                    error_code::INVALID_REQUEST,
                    raw,
                    "a router-to-cache PDU sent by the cache".into(),
                    false,
                    out,
                );
            }
        }
    }

    fn close_now(&mut self, reason: String, after: Duration, out: &mut Vec<Output>) {
        self.querying = None;
        self.connected = false;
        self.buf.clear();
        out.push(Output::Close { reason, after });
    }

    fn prefix(&mut self, v: Option<Vrp>, announce: bool, raw: &[u8], out: &mut Vec<Output>) {
        let Some(Some(t)) = &mut self.querying else {
            self.fail(
                error_code::CORRUPT_DATA,
                raw,
                "Prefix PDU outside a Cache Response".into(),
                false,
                out,
            );
            return;
        };
        let Some(v) = v else { return };
        let present = t
            .changes
            .get(&v)
            .copied()
            .unwrap_or(!t.reset && self.vrps.contains(&v));
        match (announce, present) {
            (true, true) => {
                let text = format!("{v} announced twice");
                self.fail(error_code::DUPLICATE_ANNOUNCEMENT, raw, text, true, out);
            }
            (false, false) => {
                let text = format!("{v} withdrawn but not held");
                self.fail(error_code::WITHDRAWAL_OF_UNKNOWN, raw, text, true, out);
            }
            _ => {
                t.changes.insert(v, announce);
            }
        }
    }

    fn end_of_data(
        &mut self,
        now: Instant,
        session: u16,
        serial: u32,
        timers: Option<Timers>,
        raw: &[u8],
        out: &mut Vec<Output>,
    ) {
        let Some(Some(t)) = self.querying.take() else {
            self.fail(
                error_code::CORRUPT_DATA,
                raw,
                "End of Data without a Cache Response".into(),
                false,
                out,
            );
            return;
        };
        if self.session != Some(session) {
            self.fail(
                error_code::CORRUPT_DATA,
                raw,
                format!("End of Data for session {session}"),
                true,
                out,
            );
            return;
        }
        let mut upd = VrpUpdate {
            reset: t.reset,
            ..VrpUpdate::default()
        };
        if t.reset {
            let new: BTreeSet<Vrp> = t
                .changes
                .into_iter()
                .filter_map(|(v, p)| p.then_some(v))
                .collect();
            upd.removed = self.vrps.difference(&new).copied().collect();
            upd.added = new.difference(&self.vrps).copied().collect();
            self.vrps = new;
        } else {
            for (v, p) in t.changes {
                if p && self.vrps.insert(v) {
                    upd.added.push(v);
                } else if !p && self.vrps.remove(&v) {
                    upd.removed.push(v);
                }
            }
        }
        self.vrps_v4 = self
            .vrps_v4
            .saturating_add(upd.added.iter().filter(|v| is_v4(v)).count())
            .saturating_sub(upd.removed.iter().filter(|v| is_v4(v)).count());
        if let Some(tm) = timers {
            // RFC 8210 §6 ranges; values outside them are ignored.
            if (1..=86_400).contains(&tm.refresh)
                && (1..=7_200).contains(&tm.retry)
                && (600..=172_800).contains(&tm.expire)
            {
                self.timers = tm;
            } else {
                out.push(Output::Warn(format!(
                    "cache timers out of RFC 8210 ranges ignored: {tm:?}"
                )));
            }
        }
        self.serial = Some(serial);
        self.last_update = Some(now);
        self.next_refresh = Some(now + Duration::from_secs(self.timers.refresh as u64));
        self.updates += 1;
        out.push(Output::Update(upd));
    }
}

#[cfg(test)]
#[path = "client_tests.rs"]
mod tests;
