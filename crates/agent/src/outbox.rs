//! Probe outcomes carried in heartbeats (issue 29).
//!
//! An agent reports its probes' outcomes on its `Attach` stream. Sent one
//! `Measurement` report each, an agent server at 1,000 hosts sent 1,100
//! messages a second and the fleet 50,000: each a gRPC message the leader
//! decodes and wakes for. [`Outbox`] keeps them for the next heartbeat
//! (one every 100 ms), so an agent sends ten messages a second however
//! many targets it probes:
//!
//! - only to a leader whose beat says it takes them
//!   (`LeaderBeat.takes_measurements`); a leader of an older build gets
//!   each outcome in a report of its own, as before;
//! - a miss (no answer, or a reset) does not wait: it goes at once in a
//!   heartbeat of its own, with every outcome that waited before it, so the
//!   order of the outcomes is kept and a failure's first evidence is not
//!   delayed;
//! - at most [`MAX_BATCH`] outcomes in one heartbeat (one goes out as soon
//!   as that many wait).
//!
//! Pure: the caller gives the clock.

use holdfast_control_api::v1::{agent_report, Heartbeat, Measurement};

/// The most outcomes one heartbeat carries (about 40 bytes each).
pub const MAX_BATCH: usize = 1024;

/// What waits for the next heartbeat on one `Attach` stream.
#[derive(Debug, Default)]
pub struct Outbox {
    /// This stream's leader takes outcomes in heartbeats.
    batching: bool,
    /// Each outcome, and when it came (the agent's clock, Unix ms).
    pending: Vec<(Measurement, u64)>,
    seq: u64,
}

impl Outbox {
    /// A new stream: outcomes go one by one until its leader's beat says
    /// it takes them in heartbeats.
    pub fn connected(&mut self) {
        self.batching = false;
        self.pending.clear();
    }

    /// The stream's leader beat (a beat whose token was accepted): whether
    /// it takes outcomes in heartbeats. What waited goes out one by one if
    /// it no longer does.
    pub fn beat(&mut self, takes_measurements: bool) -> Vec<agent_report::Body> {
        self.batching = takes_measurements;
        if takes_measurements {
            return Vec::new();
        }
        self.pending
            .drain(..)
            .map(|(m, _)| agent_report::Body::Measurement(m))
            .collect()
    }

    /// Whether outcomes wait for heartbeats.
    pub fn batching(&self) -> bool {
        self.batching
    }

    /// A probe's outcome as it comes (`unix_ms`: the agent's clock): what
    /// to send now.
    pub fn measured(&mut self, m: Measurement, unix_ms: u64) -> Option<agent_report::Body> {
        if !self.batching {
            return Some(agent_report::Body::Measurement(m));
        }
        let miss = !m.ok || m.refused;
        self.pending.push((m, unix_ms));
        (miss || self.pending.len() >= MAX_BATCH).then(|| self.heartbeat(unix_ms))
    }

    /// A heartbeat, with every outcome that waited for it, and how long
    /// each waited (`Measurement.waited_ms`).
    pub fn heartbeat(&mut self, unix_ms: u64) -> agent_report::Body {
        self.seq += 1;
        let measurements = self
            .pending
            .drain(..)
            .map(|(mut m, at)| {
                m.waited_ms = u32::try_from(unix_ms.saturating_sub(at)).unwrap_or(u32::MAX);
                m
            })
            .collect();
        agent_report::Body::Heartbeat(Heartbeat {
            seq: self.seq,
            sent_unix_ms: unix_ms,
            measurements,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(target: &str, ok: bool) -> Measurement {
        Measurement {
            from: "a".into(),
            target: target.into(),
            ok,
            ..Measurement::default()
        }
    }

    fn carried(b: &agent_report::Body) -> Vec<String> {
        match b {
            agent_report::Body::Heartbeat(h) => {
                h.measurements.iter().map(|m| m.target.clone()).collect()
            }
            agent_report::Body::Measurement(m) => vec![format!("single {}", m.target)],
            _ => Vec::new(),
        }
    }

    #[test]
    fn outcomes_go_one_by_one_until_the_leader_takes_them_in_heartbeats() {
        let mut o = Outbox::default();
        let b = o.measured(m("host:b", true), 1).expect("sent at once");
        assert_eq!(carried(&b), ["single host:b"]);
        assert!(o.beat(true).is_empty());
        assert!(o.measured(m("host:b", true), 2).is_none());
        assert!(o.measured(m("unit:u", true), 3).is_none());
        let b = o.heartbeat(4);
        assert_eq!(carried(&b), ["host:b", "unit:u"]);
        let agent_report::Body::Heartbeat(h) = b else {
            unreachable!()
        };
        let waited: Vec<u32> = h.measurements.iter().map(|m| m.waited_ms).collect();
        assert_eq!(waited, [2, 1], "each outcome says how long it waited");
        assert!(carried(&o.heartbeat(5)).is_empty(), "nothing waits twice");
    }

    #[test]
    fn a_miss_goes_at_once_after_what_waited() {
        let mut o = Outbox::default();
        o.beat(true);
        assert!(o.measured(m("host:b", true), 1).is_none());
        let b = o
            .measured(m("unit:u", false), 2)
            .expect("a miss does not wait");
        assert_eq!(carried(&b), ["host:b", "unit:u"]);
        let mut refused = m("unit:u", true);
        refused.refused = true;
        assert!(o.measured(refused, 3).is_some(), "a reset is a miss too");
    }

    #[test]
    fn a_new_stream_starts_one_by_one_and_a_full_batch_goes() {
        let mut o = Outbox::default();
        o.beat(true);
        for i in 0..MAX_BATCH - 1 {
            assert!(o.measured(m(&format!("unit:{i}"), true), 1).is_none());
        }
        let b = o.measured(m("unit:last", true), 1).expect("full");
        assert_eq!(carried(&b).len(), MAX_BATCH);
        o.measured(m("unit:x", true), 1);
        o.connected();
        assert!(!o.batching());
        assert!(
            carried(&o.heartbeat(2)).is_empty(),
            "the old stream's outcomes are dropped"
        );
        o.beat(true);
        o.measured(m("unit:y", true), 3);
        let singles = o.beat(false);
        assert_eq!(singles.len(), 1, "what waited goes one by one");
    }
}
