//! What the peers see while the control plane handles a failure: each
//! peer's counters, uptime, routes and log before and after (see
//! [`PlaneWatch`]).
//!
//! A route that a peer sent into a failure reaches the other peers only
//! after the peer retransmits it. A peer whose retransmissions were lost
//! in a row (say a takeover, a host-network failure, then a switchover
//! within seconds) backs its timer off to 10 s and more. When the routes
//! are late and the sending peer's own socket to that unit still holds
//! unacknowledged bytes in backoff (`ss -tio`: `backoff:`, `rto:`), the
//! check waits for that next retransmission, up to [`BACKOFF_CAP`] from
//! the first deadline, and says so in its summary. A route that the unit
//! acknowledged and lost is not excused: the peer's socket then holds
//! nothing unacknowledged.

use std::net::IpAddr;
use std::time::{Duration, Instant};

use super::Plane;
use crate::error::{LabError, Result};
use crate::peer::{Peer, SessionState};

/// The longest a check waits past its first deadline for peers to
/// retransmit.
pub const BACKOFF_CAP: Duration = Duration::from_secs(60);

/// What the peers see while something happens: for every peer (frr, and
/// bird2 and gobgpd with [`PlaneSpec::more_peers`]) and every unit, the
/// peer's counters, uptime and routes before and after, and its log; and,
/// when asked for, frr's view of each unit's session sampled every 200 ms
/// (a vtysh call each).
pub struct PlaneWatch {
    start: Instant,
    before: Vec<Vec<crate::SessionView>>,
    sampled: Vec<crate::PeerWatch>,
    marks: Vec<crate::LogMark>,
}

impl Plane {
    /// Every peer: frr first.
    pub fn peers(&self) -> Vec<&dyn Peer> {
        let mut v: Vec<&dyn Peer> = vec![&self.frr];
        v.extend(self.others.iter().map(|p| p.as_ref()));
        v
    }

    /// [`Plane::kill_and_take_over`] under a [`PlaneWatch`], checked after
    /// `settle`: the takeover's times and what the peers saw (the check's
    /// summary); an error if any peer noticed.
    pub fn take_over_unseen(
        &self,
        unit: &str,
        host: &str,
        within: Duration,
        settle: Duration,
    ) -> Result<(super::Moved, String)> {
        let w = self.watch(false)?;
        let moved = self.kill_and_take_over(unit, host, within)?;
        Ok((moved, w.check(self, settle)?))
    }

    /// Starts watching (see [`PlaneWatch`]).
    pub fn watch(&self, sampled: bool) -> Result<PlaneWatch> {
        let marks = self.peers().iter().map(|p| p.log_mark()).collect();
        let before = self
            .peers()
            .iter()
            .map(|p| p.sessions(&self.lab))
            .collect::<Result<Vec<_>>>()?;
        let sampled = if sampled {
            self.units
                .iter()
                .map(|u| {
                    crate::PeerWatch::start_every(
                        self.frr.session_probe(&self.lab),
                        IpAddr::V4(u.service),
                        Duration::from_millis(200),
                    )
                })
                .collect()
        } else {
            Vec::new()
        };
        std::thread::sleep(Duration::from_millis(300));
        Ok(PlaneWatch {
            start: Instant::now(),
            before,
            sampled,
            marks,
        })
    }
}

impl PlaneWatch {
    /// [`PlaneWatch::check_grown`] with no routes added.
    pub fn check(self, p: &Plane, settle: Duration) -> Result<String> {
        let none = vec![0; p.peers().len()];
        self.check_grown(p, settle, &none)
    }

    /// After `settle` more seconds of watching: no session of any unit with
    /// any peer left Established (frr's samples; established and dropped
    /// counters unchanged; uptime never went back), no peer logged a
    /// NOTIFICATION, and each peer holds exactly the routes it held from
    /// each unit plus `added[i]` (peer `i` in [`Plane::peers`] order: routes
    /// announced meanwhile by another peer). Returns a one-line summary.
    pub fn check_grown(self, p: &Plane, settle: Duration, added: &[u32]) -> Result<String> {
        std::thread::sleep(settle);
        let mut summary = Vec::new();
        for w in self.sampled {
            let r = w.stop();
            r.assert_uninterrupted()?;
            summary.push(format!("{}: {} samples", r.neighbor, r.samples));
        }
        let elapsed = self.start.elapsed().as_secs();
        let peers = p.peers();
        for (i, peer) in peers.iter().enumerate() {
            let name = format!("{:?}", peer.kind());
            let want = added.get(i).copied().unwrap_or(0);
            // The routes may still be on their way: a few seconds at most,
            // or until a peer's next retransmission.
            let first = Instant::now() + Duration::from_secs(10);
            let mut deadline = first;
            let mut waited_for = None;
            loop {
                let after = peer.sessions(&p.lab)?;
                let mut bad = None;
                for u in &p.units {
                    let n = IpAddr::V4(u.service);
                    let find =
                        |v: &[crate::SessionView]| v.iter().find(|s| s.neighbor == n).cloned();
                    let (b, a) = match (find(&self.before[i]), find(&after)) {
                        (Some(b), Some(a)) => (b, a),
                        (None, None) => continue,
                        _ => {
                            return Err(LabError::Invalid(format!(
                                "{name}'s session with {n} came or went"
                            )))
                        }
                    };
                    let broken = a.state != SessionState::Established
                        || a.established_count != b.established_count
                        || a.dropped_count != b.dropped_count
                        || a.uptime_secs.unwrap_or(0) + 1 < b.uptime_secs.unwrap_or(0) + elapsed;
                    if broken {
                        return Err(LabError::Invalid(format!(
                            "{name} noticed {} ({n}): before {b:?}, after {a:?}, {elapsed} s apart",
                            u.name
                        )));
                    }
                    let routes = b.prefixes_received.map(|x| x + want);
                    if a.prefixes_received != routes {
                        bad = Some((
                            format!(
                                "{name} holds {:?} routes from {} ({n}), expected {routes:?}",
                                a.prefixes_received, u.name
                            ),
                            u.service,
                            u.name.clone(),
                        ));
                    }
                }
                let Some((e, unit_addr, unit)) = bad else {
                    if let Some(note) = waited_for.take() {
                        summary.push(format!(
                            "{note}; the routes reached {name} {:.1} s after the first deadline",
                            Instant::now()
                                .saturating_duration_since(first)
                                .as_secs_f64()
                        ));
                    }
                    break;
                };
                let now = Instant::now();
                if now >= deadline {
                    let backoff = peers
                        .iter()
                        .find_map(|q| retransmitting(p, *q, IpAddr::V4(unit_addr)));
                    match backoff {
                        Some(b) if now < first + BACKOFF_CAP => {
                            deadline = (now + b.rto + Duration::from_secs(3)).min(first + BACKOFF_CAP);
                            waited_for = Some(format!(
                                "LATE: {}'s bytes for {unit} ({unit_addr}) waited in its retransmission backoff ({b})",
                                b.peer
                            ));
                        }
                        Some(b) => {
                            return Err(LabError::Invalid(format!(
                                "{e}; {}'s bytes for it still wait in its retransmission backoff ({b}) {} s after the first deadline",
                                b.peer,
                                BACKOFF_CAP.as_secs()
                            )))
                        }
                        None => return Err(LabError::Invalid(e)),
                    }
                }
                std::thread::sleep(Duration::from_millis(200));
            }
            let notes = peer.notifications_since(&self.marks[i])?;
            if !notes.is_empty() {
                return Err(LabError::Invalid(format!(
                    "{name} logged NOTIFICATIONs: {notes:?}"
                )));
            }
        }
        summary.push(format!(
            "{} peer(s) x {} sessions: counters and uptime unbroken over {elapsed} s, no NOTIFICATION, routes held",
            peers.len(),
            p.units.len()
        ));
        Ok(summary.join("; "))
    }
}

/// A peer's socket to a unit that holds unacknowledged bytes while its
/// retransmission timer is backed off.
struct Backoff {
    peer: String,
    unacked_bytes: u64,
    backoff: u32,
    rto: Duration,
}

impl std::fmt::Display for Backoff {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} bytes unacknowledged, backoff {}, rto {} ms",
            self.unacked_bytes,
            self.backoff,
            self.rto.as_millis()
        )
    }
}

/// `peer`'s BGP socket to `unit`, read with `ss -tinoH` in the peer's
/// namespace, when it is in retransmission backoff with bytes queued.
fn retransmitting(p: &Plane, peer: &dyn Peer, unit: IpAddr) -> Option<Backoff> {
    let dst = unit.to_string();
    let out = p
        .lab
        .exec_ok(
            peer.host(),
            &["ss", "-tinoH", "state", "established", "dst", &dst],
        )
        .ok()?;
    let b = parse_ss_backoff(&out)?;
    Some(Backoff {
        peer: format!("{:?}", peer.kind()),
        ..b
    })
}

/// The first socket in `ss -tinoH state established` output (no state
/// column: Recv-Q, Send-Q, local, peer, then the details) whose Send-Q is
/// not empty and whose `backoff:` is above zero.
fn parse_ss_backoff(out: &str) -> Option<Backoff> {
    let words: Vec<&str> = out.split_whitespace().collect();
    let mut i = 0;
    while i + 4 <= words.len() {
        let (Ok(_recv_q), Ok(send_q)) = (words[i].parse::<u64>(), words[i + 1].parse::<u64>())
        else {
            i += 1;
            continue;
        };
        let rest = &words[i + 4..];
        let end = rest
            .iter()
            .position(|w| w.parse::<u64>().is_ok())
            .unwrap_or(rest.len());
        let field = |key: &str| {
            rest[..end]
                .iter()
                .find_map(|w| w.strip_prefix(key))
                .and_then(|v| v.parse::<f64>().ok())
        };
        if let (Some(backoff), Some(rto)) = (field("backoff:"), field("rto:")) {
            if send_q > 0 && backoff > 0.0 {
                return Some(Backoff {
                    peer: String::new(),
                    unacked_bytes: send_q,
                    backoff: backoff as u32,
                    rto: Duration::from_millis(rto as u64),
                });
            }
        }
        i += 4 + end;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ss_backoff_is_found_only_with_bytes_queued_and_a_backoff() {
        let backing_off = "0      19     198.18.0.1:179 198.18.0.12:44285 timer:(on,12sec,6)\n\t cubic wscale:7,7 rto:13440 backoff:6 rtt:0.5/0.25 ato:40 mss:1448 unacked:1 retrans:1/10\n";
        let b = parse_ss_backoff(backing_off).expect("backing off");
        assert_eq!((b.unacked_bytes, b.backoff), (19, 6));
        assert_eq!(b.rto, Duration::from_millis(13440));
        let idle = "0      0      198.18.0.1:179 198.18.0.12:44285 timer:(keepalive,1min,0)\n\t cubic rto:204 rtt:0.1/0.05 mss:1448\n";
        assert!(parse_ss_backoff(idle).is_none());
        let first_ok_second_backing = format!("{idle}{backing_off}");
        assert_eq!(
            parse_ss_backoff(&first_ok_second_backing).map(|b| b.backoff),
            Some(6)
        );
        let queued_no_backoff = "0      38     198.18.0.1:179 198.18.0.12:44285 timer:(on,200ms,0)\n\t cubic rto:204 mss:1448 unacked:2\n";
        assert!(parse_ss_backoff(queued_no_backoff).is_none());
    }
}
