//! Lease renewals sent to every etcd member at once, each over a
//! connection of its own.
//!
//! A renewal that goes to one member at a time fails with that member's
//! connection: on a lossy management link (30% loss both ways) a lost
//! segment holds the HTTP/2 connection behind TCP's retransmission timer
//! (200 ms, doubling), longer than the renewal period, and the renewals
//! after it queue behind it. [`Renewers`] keeps one task and one
//! connection per member; a renewal goes to all of them, each bounded by
//! the renewal period, and the first acknowledgement counts (etcd's leader
//! applies whichever arrives). A member whose connection failed four times
//! in a row gets a new one (a fresh TCP connection starts with a fresh
//! retransmission timer). A lease etcd no longer knows (`lease not found`:
//! it ran out while etcd was stalled and etcd revoked it on waking) is
//! reported gone, so that the agent asks for a new one at once instead of
//! retrying until its watchdog fences.
//!
//! # Known issues
//! - A keepalive sent to several members is applied up to once per
//!   member: harmless (a renewal is idempotent), three times the requests.

use holdfast_controller::{Keys, Store};
use std::time::Duration;
use tokio::sync::mpsc;

/// After this many failures in a row, a member's connection is replaced.
const RECONNECT_AFTER: u32 = 4;

type Answer = (u64, Result<Duration, String>);

/// One renewal task per etcd member.
pub struct Renewers {
    asks: Vec<mpsc::UnboundedSender<(u64, i64)>>,
    answers: mpsc::UnboundedReceiver<Answer>,
    round: u64,
    bound: Duration,
}

impl Renewers {
    /// A task per member of `etcd`, every request bounded by `bound`.
    pub fn start(etcd: &[String], keys: &Keys, bound: Duration) -> Result<Renewers, String> {
        let (tx, answers) = mpsc::unbounded_channel();
        let mut asks = Vec::new();
        for ep in etcd {
            let store =
                Store::new(vec![ep.clone()], bound, keys.clone(), true).map_err(|e| e.to_string())?;
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
        })
    }

    /// Renews `lease` through every member at once: the TTL left from the
    /// first that answers (zero: the lease is gone), or every member's
    /// error once all failed or the bound passed.
    pub async fn renew(&mut self, lease: i64) -> Result<Duration, String> {
        self.round += 1;
        let round = self.round;
        for a in &self.asks {
            let _ = a.send((round, lease));
        }
        let deadline = tokio::time::Instant::now() + self.bound;
        let mut errors = Vec::new();
        while errors.len() < self.asks.len() {
            match tokio::time::timeout_at(deadline, self.answers.recv()).await {
                Ok(Some((r, answer))) if r == round => match answer {
                    Ok(left) => return Ok(left),
                    Err(e) => errors.push(e),
                },
                // An answer to an earlier round, late.
                Ok(Some(_)) => {}
                Ok(None) => break,
                Err(_) => {
                    errors.push(format!("no member answered within {:?}", self.bound));
                    break;
                }
            }
        }
        Err(errors.join("; "))
    }
}

/// One member's renewals: the latest ask only (older ones queued behind a
/// slow request are moot).
async fn renewer(
    mut store: Store,
    mut asks: mpsc::UnboundedReceiver<(u64, i64)>,
    answers: mpsc::UnboundedSender<Answer>,
) {
    let mut failures = 0u32;
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
        if r.is_err() {
            failures += 1;
            if failures >= RECONNECT_AFTER {
                store.reconnect();
                failures = 0;
            }
        } else {
            failures = 0;
        }
        if answers.send((ask.0, r)).is_err() {
            return;
        }
    }
}
