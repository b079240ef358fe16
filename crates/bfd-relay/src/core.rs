//! The relay's pure core: what the store says → which control packets to
//! send and when. No sockets, no clocks: time is an input, as in
//! `holdfast-bfd`.

use holdfast_bfd::{sign, Auth, ControlPacket, ResumeState, State, Time};
use holdfast_nsr::{BfdRecord, SCHEMA_VERSION};
use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap};
use std::net::SocketAddr;
use std::time::Duration;

use crate::keys::Keys;

/// UDP port of RFC 5881 single-hop control packets.
pub const PORT_SINGLE_HOP: u16 = 3784;
/// UDP port of RFC 5883 multihop control packets.
pub const PORT_MULTIHOP: u16 = 4784;

/// Settings of the core.
#[derive(Debug, Clone)]
pub struct CoreConfig {
    /// Detect Mult the relay advertises for records written before the
    /// session's own was replicated (`ResumeState::detect_mult` 0).
    pub detect_mult: u8,
    /// Keys of authenticated sessions (`--keys`).
    pub keys: Keys,
    /// How long an instance stays covered after the last sign of life in
    /// the store (its epoch, BFD records or BGP receive/acknowledge
    /// sequences changing). Must exceed the BGP keepalive interval.
    pub cover: Duration,
    /// Destination port override (the bench's sink); `None` for 3784/4784.
    pub dest_port: Option<u16>,
}

impl Default for CoreConfig {
    fn default() -> Self {
        CoreConfig {
            detect_mult: 3,
            keys: Keys::default(),
            cover: Duration::from_secs(10),
            dest_port: None,
        }
    }
}

/// What one poll of an instance's store found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Snapshot {
    pub instance: String,
    pub epoch: u64,
    /// The BFD hash: key → record JSON (as stored).
    pub records: Vec<(String, String)>,
    /// Anything that moves while the unit is alive and replicating (the
    /// BGP sessions' `rcv`/`una` values); compared for change only.
    pub liveness: Vec<String>,
}

/// What the core is fed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Input {
    /// A fresh read of one instance.
    Snapshot(Snapshot),
    /// The instance's store could not be read.
    StoreError { instance: String },
    /// The relay is no longer told to watch this instance.
    Forget { instance: String },
    /// Fire every transmission due at `now`.
    Timer,
}

/// Why the relay stopped sending for a session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopReason {
    /// The record was removed (the unit dropped the session on purpose).
    Removed,
    /// The record's state is not Up.
    NotUp,
    /// Nothing of the instance changed in the store for the cover time:
    /// the unit is gone and nobody took over.
    Silent,
    /// The instance is no longer watched.
    Forgotten,
    /// The record could not be used (schema, JSON, address family).
    Unusable,
    /// The session authenticates and the relay cannot send what it sends:
    /// no key for it in `--keys`, or a meticulous type (whose sequence
    /// number two senders cannot share).
    Auth,
}

/// What the shell carries out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Output {
    /// Send `payload` from `from` (the unit's address and source port) to
    /// `to`, TTL/hop limit 255.
    Send {
        from: SocketAddr,
        to: SocketAddr,
        payload: Vec<u8>,
    },
    /// The relay started covering a session (log it).
    Started {
        instance: String,
        key: String,
        local: u32,
        remote: u32,
        interval: Duration,
    },
    /// The relay stopped covering a session: the shell may close the
    /// socket bound to `from`.
    Stopped {
        instance: String,
        key: String,
        from: SocketAddr,
        reason: StopReason,
    },
}

#[derive(Debug, Clone)]
struct Covered {
    from: SocketAddr,
    to: SocketAddr,
    payload: Vec<u8>,
    /// Nominal transmission interval (RFC 5880 §6.8.7: the larger of our
    /// Desired Min TX and the peer's Required Min RX).
    interval: Duration,
    /// Generation: heap entries of an older one are stale.
    gen: u64,
    next_tx: Time,
}

#[derive(Debug, Default)]
struct Unit {
    epoch: u64,
    liveness: Vec<String>,
    records: Vec<(String, String)>,
    last_change: Option<Time>,
    silent: bool,
    sessions: BTreeMap<String, Covered>,
}

/// Counters of the core.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CoreStats {
    pub sent: u64,
    pub sessions: usize,
    pub store_errors: u64,
}

/// The relay core: `handle(now, input) -> outputs`.
#[derive(Debug)]
pub struct Core {
    cfg: CoreConfig,
    units: BTreeMap<String, Unit>,
    heap: BinaryHeap<Reverse<(Time, String, String, u64)>>,
    gen: u64,
    rng: u64,
    stats: CoreStats,
}

/// The packet the relay sends for a session in state Up (RFC 5880 §4.1):
/// the unit's diagnostic, discriminators and advertised intervals, no Poll
/// or Final, and `detect_mult` when the record does not carry the unit's.
pub fn up_packet(rs: &ResumeState, detect_mult: u8) -> ControlPacket {
    ControlPacket {
        diag: rs.local_diag,
        state: State::Up,
        poll: false,
        final_: false,
        control_plane_independent: false,
        demand: false,
        detect_mult: if rs.detect_mult == 0 {
            detect_mult
        } else {
            rs.detect_mult
        },
        my_discriminator: rs.local_discriminator,
        your_discriminator: rs.remote_discriminator,
        desired_min_tx_us: rs.desired_min_tx_us,
        required_min_rx_us: rs.required_min_rx_us,
        required_min_echo_rx_us: 0,
        auth: None,
    }
}

/// Why a session's packet cannot be built.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AuthGap {
    /// A meticulous type: its sequence number grows with every packet, so
    /// the relay's packets would race the unit's.
    Meticulous,
    /// No key for the session in `--keys`.
    NoKey,
}

/// The bytes the relay sends for a session: [`up_packet`], with the unit's
/// authentication when it has one. Simple password and keyed MD5/SHA1
/// carry the replicated bfd.XmitAuthSeq, which the unit advances only when
/// its packet's content changes and replicates when it does: the relay's
/// packet is then the unit's own (RFC 5880 §6.7.2–§6.7.4).
pub fn payload(rs: &ResumeState, detect_mult: u8, key: Option<&[u8]>) -> Result<Vec<u8>, AuthGap> {
    let mut pkt = up_packet(rs, detect_mult);
    let Some(a) = rs.auth else {
        return Ok(pkt.encode());
    };
    if a.auth_type.is_meticulous() {
        return Err(AuthGap::Meticulous);
    }
    let key = key.ok_or(AuthGap::NoKey)?;
    pkt.auth = Some(Auth::unsigned(a.auth_type, a.key_id, rs.xmit_auth_seq, key));
    let mut bytes = pkt.encode();
    sign(&mut bytes, key).map_err(|_| AuthGap::NoKey)?;
    Ok(bytes)
}

impl Core {
    pub fn new(cfg: CoreConfig, seed: u64) -> Core {
        Core {
            cfg,
            units: BTreeMap::new(),
            heap: BinaryHeap::new(),
            gen: 0,
            rng: seed | 1,
            stats: CoreStats::default(),
        }
    }

    pub fn stats(&self) -> CoreStats {
        let mut s = self.stats;
        s.sessions = self.units.values().map(|u| u.sessions.len()).sum();
        s
    }

    /// Sessions being covered: (instance, key, local discriminator source
    /// address, interval).
    pub fn covered(&self) -> Vec<(String, String, SocketAddr, Duration)> {
        self.units
            .iter()
            .flat_map(|(i, u)| {
                u.sessions
                    .iter()
                    .map(move |(k, c)| (i.clone(), k.clone(), c.from, c.interval))
            })
            .collect()
    }

    /// When [`Input::Timer`] is next due.
    pub fn next_deadline(&mut self) -> Option<Time> {
        while let Some(Reverse((t, inst, key, gen))) = self.heap.peek() {
            let live = self
                .units
                .get(inst)
                .and_then(|u| u.sessions.get(key))
                .is_some_and(|c| c.gen == *gen);
            if live {
                return Some(*t);
            }
            self.heap.pop();
        }
        None
    }

    /// xorshift64*: the §6.8.7 jitter.
    fn jitter(&mut self, interval: Duration) -> Duration {
        self.rng ^= self.rng >> 12;
        self.rng ^= self.rng << 25;
        self.rng ^= self.rng >> 27;
        let r = self.rng.wrapping_mul(0x2545_F491_4F6C_DD1D);
        // 75–100% of the interval (75–90% with Detect Mult 1).
        let span = if self.cfg.detect_mult == 1 { 15 } else { 25 };
        let pct = 75 + (r % (span + 1));
        interval * pct as u32 / 100
    }

    pub fn handle(&mut self, now: Time, input: Input) -> Vec<Output> {
        let mut out = Vec::new();
        match input {
            Input::Snapshot(s) => self.snapshot(now, s, &mut out),
            Input::StoreError { instance } => {
                self.stats.store_errors += 1;
                // Keep covering until the cover time runs out.
                self.check_silence(now, &instance, &mut out);
            }
            Input::Forget { instance } => {
                if let Some(u) = self.units.remove(&instance) {
                    for (key, c) in u.sessions {
                        out.push(Output::Stopped {
                            instance: instance.clone(),
                            key,
                            from: c.from,
                            reason: StopReason::Forgotten,
                        });
                    }
                }
            }
            Input::Timer => self.timer(now, &mut out),
        }
        out
    }

    /// Sends what is due. Silence is not judged here but when the store
    /// is read (every snapshot and every failed read): a relay that was
    /// itself stopped or starved has not watched the store meanwhile, and
    /// must not take its own stall for the unit's silence.
    fn timer(&mut self, now: Time, out: &mut Vec<Output>) {
        while let Some(Reverse((t, _, _, _))) = self.heap.peek() {
            if *t > now {
                break;
            }
            let Some(Reverse((_, inst, key, gen))) = self.heap.pop() else {
                break;
            };
            let Some(c) = self
                .units
                .get(&inst)
                .and_then(|u| u.sessions.get(&key))
                .filter(|c| c.gen == gen)
            else {
                continue;
            };
            let interval = c.interval;
            out.push(Output::Send {
                from: c.from,
                to: c.to,
                payload: c.payload.clone(),
            });
            self.stats.sent += 1;
            let next = now + self.jitter(interval);
            if let Some(c) = self
                .units
                .get_mut(&inst)
                .and_then(|u| u.sessions.get_mut(&key))
            {
                c.next_tx = next;
            }
            self.heap.push(Reverse((next, inst, key, gen)));
        }
    }

    fn check_silence(&mut self, now: Time, instance: &str, out: &mut Vec<Output>) {
        let Some(u) = self.units.get_mut(instance) else {
            return;
        };
        let last = u.last_change.unwrap_or(now);
        if !u.silent && now.saturating_sub(last) >= self.cfg.cover {
            u.silent = true;
            tracing::warn!(
                instance,
                cover_ms = self.cfg.cover.as_millis() as u64,
                "nothing changed in the store for the cover time: the unit is gone, no longer covering it"
            );
            for (key, c) in std::mem::take(&mut u.sessions) {
                out.push(Output::Stopped {
                    instance: instance.to_string(),
                    key,
                    from: c.from,
                    reason: StopReason::Silent,
                });
            }
        }
    }

    fn snapshot(&mut self, now: Time, s: Snapshot, out: &mut Vec<Output>) {
        let inst = s.instance.clone();
        let u = self.units.entry(inst.clone()).or_default();
        let changed = u.last_change.is_none()
            || u.epoch != s.epoch
            || u.liveness != s.liveness
            || u.records != s.records;
        if changed {
            u.last_change = Some(now);
            u.epoch = s.epoch;
            u.liveness = s.liveness;
            if u.silent {
                tracing::info!(instance = %inst, "the store moves again: covering the unit");
            }
            u.silent = false;
        }
        let records_changed = u.records != s.records;
        u.records = s.records;
        if u.silent {
            return;
        }
        if !records_changed && !u.sessions.is_empty() {
            self.check_silence(now, &inst, out);
            return;
        }
        let records = u.records.clone();
        let mut seen = std::collections::BTreeSet::new();
        for (key, json) in &records {
            seen.insert(key.clone());
            match self.parse(json) {
                Ok((rec, rs)) if rs.state == State::Up && rs.remote_discriminator != 0 => {
                    self.cover(now, &inst, key, &rec, &rs, out);
                }
                Ok(_) => self.stop(&inst, key, StopReason::NotUp, out),
                Err(e) => {
                    tracing::warn!(instance = %inst, key, "unusable BFD record: {e}");
                    self.stop(&inst, key, StopReason::Unusable, out);
                }
            }
        }
        let gone: Vec<String> = self
            .units
            .get(&inst)
            .map(|u| {
                u.sessions
                    .keys()
                    .filter(|k| !seen.contains(*k))
                    .cloned()
                    .collect()
            })
            .unwrap_or_default();
        for k in gone {
            self.stop(&inst, &k, StopReason::Removed, out);
        }
        self.check_silence(now, &inst, out);
    }

    fn parse(&self, json: &str) -> Result<(BfdRecord, ResumeState), crate::RelayError> {
        let rec: BfdRecord = serde_json::from_str(json)?;
        if rec.schema > SCHEMA_VERSION {
            return Err(crate::RelayError::Schema(rec.schema));
        }
        let rs: ResumeState = serde_json::from_value(rec.state.clone())?;
        Ok((rec, rs))
    }

    fn cover(
        &mut self,
        now: Time,
        inst: &str,
        key: &str,
        rec: &BfdRecord,
        rs: &ResumeState,
        out: &mut Vec<Output>,
    ) {
        let port = self.cfg.dest_port.unwrap_or(if rec.multihop {
            PORT_MULTIHOP
        } else {
            PORT_SINGLE_HOP
        });
        let to = SocketAddr::new(rec.peer, port);
        let key_of = self.cfg.keys.get(inst, rec.peer);
        let payload = match payload(rs, self.cfg.detect_mult, key_of) {
            Ok(p) => p,
            Err(gap) => {
                tracing::warn!(
                    instance = inst,
                    key,
                    ?gap,
                    "authenticated BFD session the relay cannot send for: not covered"
                );
                self.stop(inst, key, StopReason::Auth, out);
                return;
            }
        };
        let interval = Duration::from_micros(u64::from(
            rs.desired_min_tx_us.max(rs.remote_min_rx_us).max(1),
        ));
        let Some(u) = self.units.get_mut(inst) else {
            return;
        };
        if let Some(c) = u.sessions.get_mut(key) {
            if c.from == rec.local && c.to == to && c.payload == payload && c.interval == interval {
                return;
            }
            if c.from != rec.local {
                out.push(Output::Stopped {
                    instance: inst.to_string(),
                    key: key.to_string(),
                    from: c.from,
                    reason: StopReason::Removed,
                });
            }
        }
        self.gen += 1;
        let gen = self.gen;
        // The first packet at once: the unit may be silent right now.
        u.sessions.insert(
            key.to_string(),
            Covered {
                from: rec.local,
                to,
                payload,
                interval,
                gen,
                next_tx: now,
            },
        );
        self.heap
            .push(Reverse((now, inst.to_string(), key.to_string(), gen)));
        out.push(Output::Started {
            instance: inst.to_string(),
            key: key.to_string(),
            local: rs.local_discriminator,
            remote: rs.remote_discriminator,
            interval,
        });
    }

    fn stop(&mut self, inst: &str, key: &str, reason: StopReason, out: &mut Vec<Output>) {
        if let Some(c) = self
            .units
            .get_mut(inst)
            .and_then(|u| u.sessions.remove(key))
        {
            out.push(Output::Stopped {
                instance: inst.to_string(),
                key: key.to_string(),
                from: c.from,
                reason,
            });
        }
    }
}
