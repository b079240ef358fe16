//! Observability: Prometheus metrics and the log lines that go with them.
//!
//! Each function here is the single call site for one kind of event: it
//! updates the metric and emits the `tracing` event together, so logs and
//! metrics cannot disagree. The peer span (instance, peer, asn) is entered
//! by the caller.
//!
//! Served as text exposition format over plain HTTP/1.1 (`GET /metrics`).

mod rpki;

pub use self::rpki::RpkiMetrics;
use holdfast_fsm::State;
use holdfast_wire::Notification;
use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;
use std::sync::atomic::AtomicU64;
use std::sync::Mutex;
use std::time::Duration;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PeerLabels {
    pub instance: String,
    pub peer: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct InstanceLabels {
    pub instance: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelValue)]
pub enum MsgType {
    Open,
    Update,
    Notification,
    Keepalive,
    RouteRefresh,
    Other,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct MsgLabels {
    instance: String,
    peer: String,
    r#type: MsgType,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct NotifLabels {
    instance: String,
    peer: String,
    direction: String,
    code: u8,
    subcode: u8,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TransitionLabels {
    instance: String,
    peer: String,
    to: String,
}

pub struct Metrics {
    registry: Mutex<Registry>,
    session_state: Family<PeerLabels, Gauge>,
    session_up: Family<PeerLabels, Gauge>,
    transitions: Family<TransitionLabels, Counter>,
    messages_in: Family<MsgLabels, Counter>,
    notifications: Family<NotifLabels, Counter>,
    bytes_out: Family<PeerLabels, Counter>,
    pub prefixes_received: Family<PeerLabels, Gauge>,
    pub prefixes_accepted: Family<PeerLabels, Gauge>,
    pub prefixes_advertised: Family<PeerLabels, Gauge>,
    pub loc_rib_routes: Family<InstanceLabels, Gauge>,
    pub attr_sets: Family<InstanceLabels, Gauge>,
    batch_seconds: Family<InstanceLabels, Histogram>,
    updates_processed: Family<InstanceLabels, Counter>,
    parse_seconds: Family<InstanceLabels, Counter<f64, AtomicU64>>,
    decision_seconds: Family<InstanceLabels, Counter<f64, AtomicU64>>,
    nsr: Family<NsrLabels, Gauge>,
    nsr_session: Family<NsrSessionLabels, Gauge>,
    bfd_state: Family<PeerLabels, Gauge>,
    bfd_transitions: Family<TransitionLabels, Counter>,
    bfd_packets: Family<BfdPacketLabels, Counter>,
    fib_routes: Family<FibStateLabels, Gauge>,
    fib_writes: Family<FibOpLabels, Counter>,
    fib_errors: Family<InstanceLabels, Counter>,
    fib_batch_seconds: Family<InstanceLabels, Histogram>,
    fib_dumps: Family<InstanceLabels, Counter>,
    fib_adopted: Family<InstanceLabels, Counter>,
    fib_lost: Family<InstanceLabels, Counter>,
    /// `holdfast_rpki_*` (`obs/rpki.rs`).
    pub rpki: RpkiMetrics,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct FibStateLabels {
    instance: String,
    state: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct FibOpLabels {
    instance: String,
    op: &'static str,
}

/// What one batch of route messages did (the FIB core's counters after
/// the batch minus before).
#[derive(Debug, Clone, Copy, Default)]
pub struct FibWrites {
    pub added: u64,
    pub replaced: u64,
    pub deleted: u64,
    /// Next-hop objects of ours created and deleted.
    pub nexthops_added: u64,
    pub nexthops_deleted: u64,
    pub errors: u64,
    /// The batch's final acknowledgement never came (a dump follows).
    pub lost: bool,
}

/// The kernel FIB's routes by state (`show fib`'s figures).
#[derive(Debug, Clone, Copy, Default)]
pub struct FibRoutes {
    pub wanted: u64,
    pub installed: u64,
    pub pending: u64,
    pub unresolved: u64,
    pub failed: u64,
    pub stale: u64,
    /// Ours under a key a reload replaced, still to delete or rewrite.
    pub old_key: u64,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BfdPacketLabels {
    instance: String,
    peer: String,
    direction: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct NsrLabels {
    instance: String,
    figure: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct NsrSessionLabels {
    instance: String,
    session: String,
    figure: String,
}

impl Metrics {
    /// Publishes `show nsr` as gauges (the same figures the CLI shows).
    pub fn nsr(&self, st: &holdfast_api::NsrStatus) {
        let set = |figure: &str, v: u64| {
            self.nsr
                .get_or_create(&NsrLabels {
                    instance: st.instance.clone(),
                    figure: figure.to_string(),
                })
                .set(v as i64);
        };
        set("protected", u64::from(st.protected));
        set("epoch", st.epoch);
        set("store_epoch", st.store_epoch);
        set("store_latency_p50_us", st.store_latency_p50_us);
        set("store_latency_p99_us", st.store_latency_p99_us);
        set("ack_delay_p50_us", st.ack_delay_p50_us);
        set("ack_delay_p99_us", st.ack_delay_p99_us);
        set("ack_packets_held", st.ack_packets_held);
        set("ack_packets_clamped", st.ack_packets_clamped);
        set("writes", st.writes);
        set("write_errors", st.write_errors);
        for s in &st.sessions {
            let set = |figure: &str, v: u64| {
                self.nsr_session
                    .get_or_create(&NsrSessionLabels {
                        instance: st.instance.clone(),
                        session: s.key.clone(),
                        figure: figure.to_string(),
                    })
                    .set(v as i64);
            };
            set("protected", u64::from(s.protected));
            set("lag_ops", s.lag_ops);
            set("lag_us", s.lag_us);
            set("log_bytes", s.log_bytes);
        }
    }
}

fn state_code(s: State) -> i64 {
    match s {
        State::Idle => 1,
        State::Connect => 2,
        State::Active => 3,
        State::OpenSent => 4,
        State::OpenConfirm => 5,
        State::Established => 6,
    }
}

fn msg_type(t: u8) -> MsgType {
    match t {
        1 => MsgType::Open,
        2 => MsgType::Update,
        3 => MsgType::Notification,
        4 => MsgType::Keepalive,
        5 => MsgType::RouteRefresh,
        _ => MsgType::Other,
    }
}

impl Metrics {
    pub fn new() -> Metrics {
        let mut r = Registry::with_prefix("holdfast");
        let m = Metrics {
            registry: Mutex::new(Registry::default()),
            session_state: Family::default(),
            session_up: Family::default(),
            transitions: Family::default(),
            messages_in: Family::default(),
            notifications: Family::default(),
            bytes_out: Family::default(),
            prefixes_received: Family::default(),
            prefixes_accepted: Family::default(),
            prefixes_advertised: Family::default(),
            loc_rib_routes: Family::default(),
            attr_sets: Family::default(),
            batch_seconds: Family::new_with_constructor(|| {
                Histogram::new(exponential_buckets(0.0001, 4.0, 10))
            }),
            updates_processed: Family::default(),
            parse_seconds: Family::default(),
            decision_seconds: Family::default(),
            nsr: Family::default(),
            nsr_session: Family::default(),
            bfd_state: Family::default(),
            bfd_transitions: Family::default(),
            bfd_packets: Family::default(),
            fib_routes: Family::default(),
            fib_writes: Family::default(),
            fib_errors: Family::default(),
            fib_batch_seconds: Family::new_with_constructor(|| {
                Histogram::new(exponential_buckets(0.00005, 4.0, 10))
            }),
            fib_dumps: Family::default(),
            fib_adopted: Family::default(),
            fib_lost: Family::default(),
            rpki: RpkiMetrics::default(),
        };
        m.rpki.register(&mut r);
        r.register(
            "fib_routes",
            "Kernel FIB routes by state: wanted (by the RIB), installed (ours in the table), pending, unresolved, failed, stale",
            m.fib_routes.clone(),
        );
        r.register(
            "fib_writes",
            "Kernel FIB writes acknowledged, by op: added, replaced, deleted (routes), nexthop_added, nexthop_deleted (next-hop objects)",
            m.fib_writes.clone(),
        );
        r.register(
            "fib_errors",
            "Kernel FIB route writes the kernel refused (retried every 10 s)",
            m.fib_errors.clone(),
        );
        r.register(
            "fib_batch_seconds",
            "Time to write one batch of route messages and read the kernel's answers",
            m.fib_batch_seconds.clone(),
        );
        r.register(
            "fib_dumps",
            "Kernel table dumps (activation and reconciliations)",
            m.fib_dumps.clone(),
        );
        r.register(
            "fib_adopted",
            "Routes of ours found in the kernel table at activation and kept as they were",
            m.fib_adopted.clone(),
        );
        r.register(
            "fib_lost",
            "Kernel answers or notifications lost (ENOBUFS, a missing acknowledgement), each reconciled by a dump",
            m.fib_lost.clone(),
        );
        r.register(
            "bfd_state",
            "BFD session state (RFC 5880 codes: 0 AdminDown, 1 Down, 2 Init, 3 Up)",
            m.bfd_state.clone(),
        );
        r.register(
            "bfd_transitions",
            "BFD session state changes by target state",
            m.bfd_transitions.clone(),
        );
        r.register(
            "bfd_packets",
            "BFD control packets by direction: in, out, dropped",
            m.bfd_packets.clone(),
        );
        r.register(
            "nsr",
            "Non-stop routing, by figure: protected (0/1), epoch, store_epoch, store_latency_p50_us, store_latency_p99_us, ack_delay_p50_us, ack_delay_p99_us, ack_packets_held, ack_packets_clamped, writes, write_errors",
            m.nsr.clone(),
        );
        r.register(
            "nsr_session",
            "Non-stop routing per session, by figure: protected (0/1), lag_ops, lag_us, log_bytes",
            m.nsr_session.clone(),
        );
        r.register(
            "session_state",
            "FSM state (1 Idle .. 6 Established)",
            m.session_state.clone(),
        );
        r.register(
            "session_established",
            "1 when the session is Established",
            m.session_up.clone(),
        );
        r.register(
            "session_transitions",
            "FSM state changes by target state",
            m.transitions.clone(),
        );
        r.register(
            "messages_received",
            "BGP messages received by type",
            m.messages_in.clone(),
        );
        r.register(
            "notifications",
            "NOTIFICATIONs sent and received",
            m.notifications.clone(),
        );
        r.register(
            "bytes_sent",
            "Bytes queued to the peer",
            m.bytes_out.clone(),
        );
        r.register(
            "prefixes_received",
            "Prefixes in the Adj-RIB-In",
            m.prefixes_received.clone(),
        );
        r.register(
            "prefixes_accepted",
            "Prefixes accepted by import policy",
            m.prefixes_accepted.clone(),
        );
        r.register(
            "prefixes_advertised",
            "Prefixes in the Adj-RIB-Out",
            m.prefixes_advertised.clone(),
        );
        r.register(
            "loc_rib_routes",
            "Prefixes in the Loc-RIB",
            m.loc_rib_routes.clone(),
        );
        r.register(
            "attribute_sets",
            "Distinct interned attribute sets",
            m.attr_sets.clone(),
        );
        r.register(
            "rib_batch_seconds",
            "Time to process one batch of UPDATEs",
            m.batch_seconds.clone(),
        );
        r.register(
            "updates_processed",
            "UPDATE messages processed by the RIB",
            m.updates_processed.clone(),
        );
        r.register(
            "parse_seconds",
            "Time spent decoding UPDATEs and applying import policy",
            m.parse_seconds.clone(),
        );
        r.register(
            "decision_seconds",
            "Time spent in the decision process and export",
            m.decision_seconds.clone(),
        );
        *m.registry.lock().expect("registry") = r;
        m
    }

    pub fn peer_configured(&self, l: &PeerLabels) {
        self.session_state
            .get_or_create(l)
            .set(state_code(State::Idle));
        self.session_up.get_or_create(l).set(0);
    }

    pub fn peer_removed(&self, l: &PeerLabels) {
        self.session_state.remove(l);
        self.session_up.remove(l);
        self.prefixes_received.remove(l);
        self.prefixes_accepted.remove(l);
        self.prefixes_advertised.remove(l);
    }

    pub fn session_state(&self, l: &PeerLabels, from: State, to: State, reason: &str) {
        tracing::debug!(?from, ?to, reason, "state change");
        self.session_state.get_or_create(l).set(state_code(to));
        self.session_up
            .get_or_create(l)
            .set(i64::from(to == State::Established));
        let t = TransitionLabels {
            instance: l.instance.clone(),
            peer: l.peer.clone(),
            to: format!("{to:?}"),
        };
        self.transitions.get_or_create(&t).inc();
    }

    /// Adds received-message counts, indexed by message type code (1..=5;
    /// framing has already rejected any other type).
    pub fn messages_in(&self, l: &PeerLabels, counts: &[u64; 6]) {
        for (t, n) in counts.iter().enumerate().filter(|(_, n)| **n > 0) {
            let m = MsgLabels {
                instance: l.instance.clone(),
                peer: l.peer.clone(),
                r#type: msg_type(t as u8),
            };
            self.messages_in.get_or_create(&m).inc_by(*n);
        }
    }

    pub fn notification(&self, l: &PeerLabels, direction: &str, n: &Notification) {
        let m = NotifLabels {
            instance: l.instance.clone(),
            peer: l.peer.clone(),
            direction: direction.to_string(),
            code: n.code,
            subcode: n.subcode,
        };
        self.notifications.get_or_create(&m).inc();
    }

    pub fn bytes_out(&self, l: &PeerLabels, n: usize) {
        self.bytes_out.get_or_create(l).inc_by(n as u64);
    }

    pub fn rib_batch(
        &self,
        instance: &str,
        msgs: usize,
        took: Duration,
        phases: holdfast_rib::PhaseTiming,
    ) {
        let l = InstanceLabels {
            instance: instance.to_string(),
        };
        tracing::debug!(
            instance,
            msgs,
            took_us = took.as_micros() as u64,
            import_us = phases.import.as_micros() as u64,
            decision_us = phases.decision.as_micros() as u64,
            "RIB batch"
        );
        self.parse_seconds
            .get_or_create(&l)
            .inc_by(phases.import.as_secs_f64());
        self.decision_seconds
            .get_or_create(&l)
            .inc_by(phases.decision.as_secs_f64());
        self.batch_seconds
            .get_or_create(&l)
            .observe(took.as_secs_f64());
        self.updates_processed.get_or_create(&l).inc_by(msgs as u64);
    }

    /// A BFD session was created (state Down) for this neighbour.
    pub fn bfd_configured(&self, l: &PeerLabels, discriminator: u32, peer: &str) {
        tracing::info!(discriminator, peer, "BFD session created");
        self.bfd_state
            .get_or_create(l)
            .set(i64::from(holdfast_bfd::State::Down.code()));
    }

    pub fn bfd_removed(&self, l: &PeerLabels) {
        tracing::info!("BFD session removed");
        self.bfd_state.remove(l);
    }

    /// A BFD state change: the log line and the metrics.
    pub fn bfd_state(
        &self,
        l: &PeerLabels,
        from: holdfast_bfd::State,
        to: holdfast_bfd::State,
        diag: holdfast_bfd::Diag,
    ) {
        if to == holdfast_bfd::State::Up || from == holdfast_bfd::State::Up {
            tracing::warn!(%from, %to, %diag, "BFD state change");
        } else {
            tracing::info!(%from, %to, %diag, "BFD state change");
        }
        self.bfd_state.get_or_create(l).set(i64::from(to.code()));
        let t = TransitionLabels {
            instance: l.instance.clone(),
            peer: l.peer.clone(),
            to: format!("{to:?}"),
        };
        self.bfd_transitions.get_or_create(&t).inc();
    }

    /// A BFD packet sent (`out`), accepted by demultiplexing (`in`), or
    /// discarded (`dropped`, with the reason logged at debug).
    pub fn bfd_packet(
        &self,
        l: &PeerLabels,
        direction: &str,
        reason: Option<&dyn std::fmt::Display>,
    ) {
        if let Some(r) = reason {
            tracing::debug!(reason = %r, "BFD packet dropped");
        }
        self.bfd_packets
            .get_or_create(&BfdPacketLabels {
                instance: l.instance.clone(),
                peer: l.peer.clone(),
                direction: direction.to_string(),
            })
            .inc();
    }

    /// One batch of route messages written to the kernel FIB and answered.
    pub fn fib_batch(&self, instance: &str, msgs: usize, w: FibWrites, took: Duration) {
        tracing::debug!(
            instance,
            msgs,
            added = w.added,
            replaced = w.replaced,
            deleted = w.deleted,
            errors = w.errors,
            took_us = took.as_micros() as u64,
            "kernel FIB: batch written"
        );
        let l = InstanceLabels {
            instance: instance.to_string(),
        };
        for (op, n) in [
            ("added", w.added),
            ("replaced", w.replaced),
            ("deleted", w.deleted),
            ("nexthop_added", w.nexthops_added),
            ("nexthop_deleted", w.nexthops_deleted),
        ] {
            if n > 0 {
                self.fib_writes
                    .get_or_create(&FibOpLabels {
                        instance: instance.to_string(),
                        op,
                    })
                    .inc_by(n);
            }
        }
        if w.errors > 0 {
            self.fib_errors.get_or_create(&l).inc_by(w.errors);
        }
        self.fib_batch_seconds
            .get_or_create(&l)
            .observe(took.as_secs_f64());
        if w.lost {
            self.fib_lost(instance, "the acknowledgement of a batch");
        }
    }

    /// The kernel table was read (activation: `adopted` routes of ours kept;
    /// or a reconciliation).
    pub fn fib_dump(&self, instance: &str, adopted: u64, took: Duration) {
        let ms = took.as_millis() as u64;
        if adopted > 0 {
            tracing::info!(
                instance,
                adopted,
                ms,
                "kernel FIB: table read, our routes adopted"
            );
        } else {
            tracing::debug!(instance, ms, "kernel FIB: table read");
        }
        let l = InstanceLabels {
            instance: instance.to_string(),
        };
        self.fib_dumps.get_or_create(&l).inc();
        if adopted > 0 {
            self.fib_adopted.get_or_create(&l).inc_by(adopted);
        }
    }

    /// The kernel dropped answers or notifications for the FIB; a dump
    /// reconciles.
    pub fn fib_lost(&self, instance: &str, what: &str) {
        tracing::info!(
            instance,
            what,
            "kernel FIB: lost from the kernel, reconciling by a dump"
        );
        self.fib_lost
            .get_or_create(&InstanceLabels {
                instance: instance.to_string(),
            })
            .inc();
    }

    /// The kernel FIB's routes by state (gauges, no log line).
    pub fn fib_routes(&self, instance: &str, r: FibRoutes) {
        for (state, v) in [
            ("wanted", r.wanted),
            ("installed", r.installed),
            ("pending", r.pending),
            ("unresolved", r.unresolved),
            ("failed", r.failed),
            ("stale", r.stale),
            ("old_key", r.old_key),
        ] {
            self.fib_routes
                .get_or_create(&FibStateLabels {
                    instance: instance.to_string(),
                    state,
                })
                .set(v as i64);
        }
    }

    pub fn encode(&self) -> String {
        let mut out = String::new();
        let r = self.registry.lock().expect("registry");
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &r);
        out
    }
}
