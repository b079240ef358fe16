//! Lease renewals sent to every etcd member at once, each over a
//! connection of its own.
//!
//! A renewal that goes to one member at a time fails with that member's
//! connection: on a lossy management link (30% loss both ways) a lost
//! segment holds the HTTP/2 connection behind TCP's retransmission timer
//! (200 ms, doubling), longer than the renewal period, and the renewals
//! after it queue behind it. [`Renewers`] keeps
//! [`CONNECTIONS_PER_MEMBER`] tasks and connections per member; a renewal goes to all of them and the first
//! acknowledgement within the renewal period counts (etcd's leader applies
//! whichever arrives). Each member's own request may take longer
//! ([`REQUEST_WITHIN`]: a connection made again over a lossy link loses
//! SYNs, retransmitted after 1 s): an acknowledgement that comes after its
//! own round still proves the lease lasted from that round's send time,
//! and is counted so (the watchdog keeps the latest send time). A lease etcd no longer knows (`lease not found`:
//! it ran out while etcd was stalled and etcd revoked it on waking) is
//! reported gone, so that the agent asks for a new one at once instead of
//! retrying until its watchdog fences.
//!
//! While renewals fail, [`Solicitor`] solicits each member's next hop
//! (ARP / Neighbor Solicitation) every round: after a link outage the
//! kernel would otherwise hold the queued renewals until its next
//! resolution attempt for the member, up to `retrans_time_ms` (1 s) after
//! the link is back, which a 1.2 s outage plus that second makes longer
//! than the lease's budget (TTL − margin = 1.5 s).
//!
//! # Known issues
//! - A keepalive sent over every connection is applied once per
//!   connection: harmless (a renewal is idempotent), but six times the
//!   requests of one (24 a second per agent with three members): etcd's
//!   load grows with the hosts. Fanning out only after a missed round would
//!   cost a renewal period first.

use crate::Time;
use holdfast_etcd::{Keys, Store};
use prometheus_client::metrics::counter::Counter;
use std::net::IpAddr;
use std::time::Duration;
use tokio::sync::mpsc;

/// Connections (and tasks) per member.
pub const CONNECTIONS_PER_MEMBER: usize = 2;

/// How long one member's request (or connect) may take.
pub const REQUEST_WITHIN: Duration = Duration::from_millis(1500);

type Answer = (u64, Result<Duration, String>);

/// One renewal task per etcd member.
pub struct Renewers {
    asks: Vec<mpsc::UnboundedSender<(u64, i64)>>,
    answers: mpsc::UnboundedReceiver<Answer>,
    round: u64,
    bound: Duration,
    /// Each recent round's lease and send time.
    sent: std::collections::BTreeMap<u64, (i64, Time)>,
}

impl Renewers {
    /// A task per member of `etcd`; a renewal waits up to `bound`; `tls`:
    /// the agent's certificate for `https://` endpoints.
    pub fn start(
        etcd: &[String],
        keys: &Keys,
        bound: Duration,
        tls: Option<&holdfast_etcd::TlsOptions>,
    ) -> Result<Renewers, String> {
        let (tx, answers) = mpsc::unbounded_channel();
        let mut asks = Vec::new();
        for ep in etcd
            .iter()
            .flat_map(|e| std::iter::repeat_n(e, CONNECTIONS_PER_MEMBER))
        {
            let store = Store::new(vec![ep.clone()], REQUEST_WITHIN, keys.clone(), true)
                .map_err(|e| e.to_string())?
                .with_tls(tls.cloned());
            let (ask_tx, ask_rx) = mpsc::unbounded_channel();
            tokio::spawn(renewer(store, ask_rx, tx.clone()));
            asks.push(ask_tx);
        }
        if asks.is_empty() {
            return Err("no etcd endpoint".into());
        }
        Ok(Renewers {
            asks,
            answers,
            round: 0,
            bound,
            sent: std::collections::BTreeMap::new(),
        })
    }

    /// Renews `lease`, sent at `sent`, through every member at once: the
    /// TTL left (zero: the lease is gone) and the send time of the round
    /// it answers — this one, or an earlier one whose answer came late —
    /// from the first acknowledgement; or every member's error once all
    /// failed or the bound passed.
    pub async fn renew(&mut self, lease: i64, sent: Time) -> Result<(Duration, Time), String> {
        self.round += 1;
        let round = self.round;
        self.sent.insert(round, (lease, sent));
        while self.sent.len() > 64 {
            self.sent.pop_first();
        }
        for a in &self.asks {
            let _ = a.send((round, lease));
        }
        let deadline = tokio::time::Instant::now() + self.bound;
        let mut errors = Vec::new();
        // The acknowledgement with the latest send time (answers to earlier
        // rounds, late, queue up ahead of this round's).
        let mut best: Option<(Duration, Time)> = None;
        while errors.len() < self.asks.len() {
            match tokio::time::timeout_at(deadline, self.answers.recv()).await {
                Ok(Some((r, answer))) => match answer {
                    // (An answer about an earlier lease is moot.)
                    Ok(left) => {
                        let Some(&(_, at)) = self.sent.get(&r).filter(|(l, _)| *l == lease) else {
                            continue;
                        };
                        if left == Duration::ZERO {
                            return Ok((left, at));
                        }
                        if best.is_none_or(|(_, b)| at > b) {
                            best = Some((left, at));
                        }
                        if r == round {
                            break;
                        }
                    }
                    Err(e) if r == round => errors.push(e),
                    // An earlier round's failure, late.
                    Err(_) => {}
                },
                Ok(None) => break,
                Err(_) => {
                    errors.push(format!("no member answered within {:?}", self.bound));
                    break;
                }
            }
        }
        best.ok_or_else(|| errors.join("; "))
    }
}

/// One member's renewals: the latest ask only (older ones queued behind a
/// slow request are moot).
async fn renewer(
    mut store: Store,
    mut asks: mpsc::UnboundedReceiver<(u64, i64)>,
    answers: mpsc::UnboundedSender<Answer>,
) {
    while let Some(mut ask) = asks.recv().await {
        while let Ok(later) = asks.try_recv() {
            ask = later;
        }
        let r = match store.renew(ask.1).await {
            Ok(left) => Ok(left),
            // etcd revoked it (it ran out while etcd was stalled): gone,
            // and a new one is to be granted, not retried.
            // (etcd-client reports it as a keepalive error, not a status.)
            Err(e) if e.to_string().contains("lease not found") => Ok(Duration::ZERO),
            Err(e) => Err(e.to_string()),
        };
        if answers.send((ask.0, r)).is_err() {
            return;
        }
    }
}

/// Solicits the etcd members' next hops while renewals fail.
pub struct Solicitor {
    members: Vec<IpAddr>,
    /// Since the first failed round of a run of them.
    failing: Option<std::time::Instant>,
    sent: Counter,
}

impl Solicitor {
    /// The members of `etcd` (`http[s]://HOST[:PORT]`; a name is resolved
    /// once, here); `sent` counts solicitations.
    pub async fn new(etcd: &[String], sent: Counter) -> Solicitor {
        let mut members = Vec::new();
        for ep in etcd {
            let Some(hostport) = authority(ep) else {
                tracing::warn!(endpoint = %ep, "etcd endpoint without a host: its next hop is not solicited");
                continue;
            };
            match tokio::net::lookup_host(hostport).await {
                Ok(addrs) => members.extend(addrs.map(|a| a.ip())),
                Err(e) => {
                    tracing::warn!(endpoint = %ep, error = %e, "etcd endpoint not resolved: its next hop is not solicited")
                }
            }
        }
        members.sort();
        members.dedup();
        Solicitor {
            members,
            failing: None,
            sent,
        }
    }

    /// After each renewal round: `ok` or not. A failed round solicits
    /// every member's next hop (in the background: a route lookup and a
    /// frame per member).
    pub fn round(&mut self, ok: bool) {
        if ok {
            if let Some(t) = self.failing.take() {
                tracing::info!(failed_for = ?t.elapsed(), "etcd lease renewed again: next hops no longer solicited");
            }
            return;
        }
        if self.failing.is_none() {
            tracing::info!(members = ?self.members, "etcd lease renewals failing: soliciting the members' next hops each round");
            self.failing = Some(std::time::Instant::now());
        }
        let members = self.members.clone();
        let sent = self.sent.clone();
        tokio::task::spawn_blocking(move || {
            for m in members {
                match holdfast_linux::solicit_next_hop(m) {
                    Ok(nh) => {
                        sent.inc();
                        tracing::debug!(member = %m, next_hop = %nh, "solicited");
                    }
                    Err(e) => tracing::debug!(member = %m, error = %e, "not solicited"),
                }
            }
        });
    }
}

/// `HOST:PORT` of an endpoint URL (port 2379 when it names none).
fn authority(ep: &str) -> Option<String> {
    let uri: tonic::codegen::http::Uri = ep.parse().ok()?;
    let host = uri.host().filter(|h| !h.is_empty())?;
    Some(format!("{host}:{}", uri.port_u16().unwrap_or(2379)))
}

#[cfg(test)]
mod tests {
    use super::authority;

    #[test]
    fn endpoint_authorities() {
        assert_eq!(
            authority("http://10.0.0.1:2379").as_deref(),
            Some("10.0.0.1:2379")
        );
        assert_eq!(authority("https://etcd-1/").as_deref(), Some("etcd-1:2379"));
        assert_eq!(
            authority("http://[fd00::1]:2380").as_deref(),
            Some("[fd00::1]:2380")
        );
        assert_eq!(
            authority("http://[fd00::1]").as_deref(),
            Some("[fd00::1]:2379")
        );
        assert_eq!(authority("10.0.0.2:2379").as_deref(), Some("10.0.0.2:2379"));
        assert_eq!(authority("http://"), None);
    }
}
