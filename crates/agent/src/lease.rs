//! The agent's lease task: grants the host's etcd lease, keeps
//! `agents/<host>` (or `agent-servers/<host>`) attached to it, renews it
//! each time the loop asks (through every member at once:
//! [`crate::renew`]), and reads the other host agents' records for the
//! failsafe ([`crate::failsafe`]) once a second. Every outcome goes to the
//! shell's loop as an event; a lost lease is granted anew.

use crate::failsafe;
use crate::shell::Event;
use holdfast_etcd::{Keys, Store};
use std::time::{Duration, Instant};
use tokio::sync::mpsc;

/// What the lease task needs.
pub(crate) struct LeaseTask {
    pub(crate) etcd: Vec<String>,
    pub(crate) cluster: String,
    pub(crate) host: String,
    /// The agent server's (not a host: `agent-servers/<host>`).
    pub(crate) agent_server: bool,
    pub(crate) ttl: Duration,
    pub(crate) renew: Duration,
    /// This agent's failsafe address, for its record.
    pub(crate) failsafe: Option<String>,
    /// Its failure domain, for its record.
    pub(crate) domain: Option<String>,
    /// Where the other agents probe this host, for its record.
    pub(crate) probe_addr: Option<String>,
    /// Its certificate for `https://` etcd endpoints (etcd's user
    /// `agent:HOST`).
    pub(crate) etcd_tls: Option<holdfast_etcd::TlsOptions>,
    pub(crate) t0: Instant,
    /// Counts the next-hop solicitations while renewals fail.
    pub(crate) solicited: prometheus_client::metrics::counter::Counter,
}

/// How often the lease task reads the other host agents from etcd.
const PEERS_EVERY: Duration = Duration::from_secs(1);

/// Grants the host's lease, keeps `agents/<host>` on it, and renews it each
/// time the loop asks; a lost lease is granted anew.
pub(crate) async fn lease_task(
    task: LeaseTask,
    mut asks: mpsc::UnboundedReceiver<bool>,
    ev: mpsc::UnboundedSender<Event>,
) {
    let LeaseTask {
        etcd,
        cluster,
        host,
        agent_server,
        ttl,
        renew,
        failsafe,
        domain,
        probe_addr,
        etcd_tls,
        t0,
        solicited,
    } = task;
    let mut solicitor = crate::renew::Solicitor::new(&etcd, solicited).await;
    let keys = Keys::new(&cluster);
    let key = if agent_server {
        keys.agent_server(&host)
    } else {
        keys.agent(&host)
    };
    // Renewals go to every member at once ([`crate::renew`]); grants,
    // puts and reads to one client per member, one member per ask (the
    // next one after a failure), every request bounded by the renewal
    // period.
    let mut renewers = match crate::renew::Renewers::start(&etcd, &keys, renew, etcd_tls.as_ref()) {
        Ok(r) => r,
        Err(e) => {
            let _ = ev.send(Event::LeaseFailed(e));
            return;
        }
    };
    let mut stores = Vec::new();
    for ep in etcd {
        match Store::new(vec![ep], renew, keys.clone(), true) {
            Ok(s) => stores.push(s.with_tls(etcd_tls.clone())),
            Err(e) => {
                let _ = ev.send(Event::LeaseFailed(e.to_string()));
                return;
            }
        }
    }
    if stores.is_empty() {
        let _ = ev.send(Event::LeaseFailed("no etcd endpoint".into()));
        return;
    }
    let mut cur = 0usize;
    let mut lease: Option<i64> = None;
    let mut peers_read: Option<Instant> = None;
    while let Some(mut fresh) = asks.recv().await {
        let store = &mut stores[cur];
        // Coalesce asks that queued up while etcd was slow.
        while let Ok(f) = asks.try_recv() {
            fresh |= f;
        }
        if fresh {
            // After a self-fence the host starts over on a new lease, even if
            // etcd kept the old one alive.
            if let Some(old) = lease.take() {
                let _ = store.revoke(old).await;
            }
        }
        let sent = t0.elapsed();
        let result: Result<Event, String> = match lease {
            None => match store.grant(ttl).await {
                Ok((id, _)) => {
                    let value = holdfast_etcd::store::to_json(&holdfast_etcd::AgentRecord {
                        schema: holdfast_etcd::SCHEMA,
                        host: host.clone(),
                        failsafe: failsafe.clone(),
                        version: holdfast_version::VERSION.to_string(),
                        domain: domain.clone(),
                        probe_addr: probe_addr.clone(),
                    });
                    match store.put_leased(&key, &value, id).await {
                        Ok(()) => {
                            lease = Some(id);
                            Ok(Event::LeaseGranted { id, sent })
                        }
                        Err(e) => Err(e.to_string()),
                    }
                }
                Err(e) => Err(e.to_string()),
            },
            // Through every member at once (a lossy link costs one
            // connection's renewal, not the host's).
            Some(id) => match renewers.renew(id, sent).await {
                Ok((left, sent)) if left > Duration::ZERO => Ok(Event::LeaseRenewed { sent }),
                Ok(_) => {
                    lease = None;
                    Err("the lease expired".into())
                }
                Err(e) => Err(e),
            },
        };
        solicitor.round(result.is_ok());
        match result {
            Ok(e) => {
                let _ = ev.send(e);
                // The agent server runs no units: it neither asks nor is asked.
                if !agent_server && peers_read.is_none_or(|t| t.elapsed() >= PEERS_EVERY) {
                    let prefix = keys.agent("");
                    let read =
                        tokio::time::timeout(renew, store.scan::<failsafe::AgentRecord>(&prefix));
                    if let Ok(Ok(records)) = read.await {
                        peers_read = Some(Instant::now());
                        let _ = ev.send(Event::Peers(failsafe::peers(&host, records)));
                    }
                }
            }
            Err(e) => {
                next_member(&mut cur, stores.len());
                let _ = ev.send(Event::LeaseFailed(e));
            }
        }
    }
}

/// The next member after one that failed.
fn next_member(cur: &mut usize, n: usize) {
    *cur = (*cur + 1) % n;
}
