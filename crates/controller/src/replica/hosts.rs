//! The leader's watch over the hosts ([`HostWatch`]): an agent's lease
//! expiry, taken for a host failure only with evidence (the data plane, or
//! the agent back without its units, or away for [`LEASE_GRACE`]), and
//! the failed hosts marked, their backups placed anew and their units
//! migrated, all at once.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use super::migrate::{start_migrations, Plan};
use super::SharedRef;
use crate::fence::Token;
use crate::hub::Hub;
use crate::metrics::Reason;
use crate::sense::Localization;
use crate::state::{UnitRecord, MIGRATION_STEPS, SCHEMA};
use crate::store::{to_json, Outcome, Store, StoreError};

/// Hosts whose agent's lease expired (its `agents/<host>` key gone). A
/// lease expiry alone is not a host failure: etcd revokes every lease that
/// ran out while it was stalled (all its members stopped, a disk that does
/// not sync), and a renewal can miss its deadline on a lossy management
/// link, while the host and its units are fine. It is a failure when
///
/// - the localizer suspects the host (the data plane agrees): its verdict
///   is awaited, as before;
/// - the agent is back (a new lease, attached) and no longer runs a unit
///   it is the primary of (it fenced it);
/// - the agent is away and every unit it is the primary of fails the
///   controller's own heartbeat (fenced, or cut off with their host);
/// - the agent stays away for [`LEASE_GRACE`] (a host cut off from etcd
///   fences its units before its lease can expire, and a failsafe round
///   cannot keep them longer than one TTL past etcd's return).
///
/// An agent that comes back within the grace still running every unit it
/// is the primary of is left alone (a note in the log). A failed host is
/// recorded in `hosts/failed/` (never reused until reset by hand) and its
/// units are migrated, all at once.
#[derive(Default)]
pub(super) struct HostWatch {
    seen: BTreeSet<String>,
    /// Failed hosts whose units are still to be migrated: since when, why.
    failed: BTreeMap<String, (Instant, String)>,
    /// Hosts whose lease expired while the localizer suspects them: its
    /// verdict (host or host network) is awaited until the deadline.
    deferred: BTreeMap<String, Instant>,
    /// Hosts whose lease expired with no evidence from the data plane:
    /// since when (their agent is awaited for [`LEASE_GRACE`]).
    expired: BTreeMap<String, Instant>,
    last: Option<Instant>,
}

/// How long an agent whose lease expired (and whose host the data plane
/// does not suspect) has to come back with its units before its host is
/// taken for failed: one lease TTL (3 s), by which time an agent cut off
/// from etcd has fenced its units.
const LEASE_GRACE: Duration = Duration::from_secs(3);

/// Whether the `HOLDFAST_LEASE_EXPIRY_IS_FAILURE` environment variable asks
/// for the earlier rule (every lease expiry a host failure): the lab's
/// negative control only.
fn lease_expiry_is_failure() -> bool {
    std::env::var_os("HOLDFAST_LEASE_EXPIRY_IS_FAILURE").is_some_and(|v| v == "1")
}

impl HostWatch {
    /// A host failed (a verdict of the localization, or its lease expired):
    /// it is recorded failed and its units migrated.
    pub(super) fn fail(&mut self, host: &str, since: Instant, why: String) {
        self.failed.entry(host.to_string()).or_insert((since, why));
    }

    pub(super) async fn check(
        &mut self,
        shared: &SharedRef,
        store: &mut Store,
        token: Token,
        loc: &Localization,
        hub: &Hub,
        confirm: Duration,
    ) -> Result<Option<Outcome>, StoreError> {
        if self
            .last
            .is_some_and(|t| t.elapsed() < Duration::from_millis(100))
        {
            return Ok(None);
        }
        self.last = Some(Instant::now());
        let keys = store.keys().clone();
        let now: BTreeSet<String> = store
            .list(&format!("{}agents/", keys.prefix()))
            .await?
            .into_iter()
            .collect();
        let gone: Vec<String> = self.seen.difference(&now).cloned().collect();
        for host in gone {
            if loc.suspects(&host) {
                tracing::info!(%host, "agent lease expired while the host is suspected: awaiting the localizer's verdict");
                self.deferred
                    .insert(host, Instant::now() + confirm + Duration::from_millis(1500));
            } else if lease_expiry_is_failure() {
                let why = format!("{host}'s agent lease expired");
                self.fail(&host, Instant::now(), why);
            } else {
                tracing::info!(%host, "agent lease expired, the data plane suspects nothing: awaiting the agent");
                self.expired.entry(host).or_insert_with(Instant::now);
            }
        }
        if !self.expired.is_empty() {
            // Each host's units as the localization last read them (every
            // unit record read again at each check, every 100 ms while a
            // lease was out, was 7 MB a read at 10,000 units).
            let pending: Vec<(String, Instant)> =
                self.expired.iter().map(|(h, t)| (h.clone(), *t)).collect();
            for (host, since) in pending {
                let back = now.contains(&host) && hub.attached(&host);
                let units = loc.units_on(&host);
                let lost: Vec<&str> = units
                    .iter()
                    .filter(|u| hub.runs(&host, u).as_deref() != Some(crate::hub::PRIMARY_ROLE))
                    .map(String::as_str)
                    .collect();
                // Its units do not answer the controller either: fenced (or
                // cut off with it), no need to wait for its agent.
                let silent = !units.is_empty() && units.iter().all(|u| loc.unit_silent(u));
                if loc.suspects(&host) {
                    tracing::info!(%host, "agent lease expired and the host is now suspected: awaiting the localizer's verdict");
                    self.expired.remove(&host);
                    self.deferred
                        .insert(host, Instant::now() + confirm + Duration::from_millis(1500));
                } else if back && lost.is_empty() {
                    tracing::info!(%host, after_ms = since.elapsed().as_millis() as u64, "agent lease expired and renewed: the agent kept its units, no failure");
                    self.expired.remove(&host);
                } else if back {
                    let why = format!(
                        "{host}'s agent lease expired and its agent no longer runs {lost:?}"
                    );
                    self.expired.remove(&host);
                    self.fail(&host, since, why);
                } else if silent {
                    let why = format!("{host}'s agent lease expired and its units do not answer");
                    self.expired.remove(&host);
                    self.fail(&host, since, why);
                } else if since.elapsed() >= LEASE_GRACE {
                    let why = format!("{host}'s agent lease expired and its agent stayed away");
                    self.expired.remove(&host);
                    self.fail(&host, since, why);
                }
            }
        }
        let due: Vec<String> = self
            .deferred
            .iter()
            .filter(|(h, until)| !loc.suspects(h) || Instant::now() >= **until)
            .map(|(h, _)| h.clone())
            .collect();
        for host in due {
            self.deferred.remove(&host);
            let why = format!("{host}'s agent lease expired");
            self.fail(&host, Instant::now(), why);
        }
        self.seen.clone_from(&now);
        if self.failed.is_empty() {
            return Ok(None);
        }
        let failed: Vec<(String, Instant, String)> = self
            .failed
            .iter()
            .map(|(h, (t, w))| (h.clone(), *t, w.clone()))
            .collect();
        // The hosts newly failed: the backups they held placed anew (one
        // placement for all of them), then the hosts marked, a hundred
        // puts per transaction. The marks go last: a leader that stops in
        // between leaves hosts unmarked, which the next one places again.
        let marks: Vec<(String, bool)> = failed
            .iter()
            .map(|(h, _, _)| (keys.failed_host(h), false))
            .collect();
        let marked = store.read_many(&marks).await?;
        let new: Vec<&(String, Instant, String)> = failed
            .iter()
            .zip(&marked)
            .filter(|(_, m)| m.is_empty())
            .map(|(f, _)| f)
            .collect();
        if !new.is_empty() {
            let hosts: Vec<&str> = new.iter().map(|(h, _, _)| h.as_str()).collect();
            let mut puts = replace_backups_on(store, token, &hosts).await?;
            for (host, _, why) in &new {
                tracing::warn!(%host, %why, "host failed: never reused until `holdfast ctl reset`");
                let rec =
                    serde_json::json!({ "schema": SCHEMA, "host": host, "why": why, "by": token });
                puts.push((keys.failed_host(host), rec.to_string()));
            }
            for chunk in puts.chunks(holdfast_etcd::store::TXN_OPS) {
                if store.fenced_put(token, &[], chunk).await? == Outcome::Fenced {
                    return Ok(Some(Outcome::Fenced));
                }
            }
        }
        // Every unit of every failed host at once (one with a migration
        // under way is left to it).
        let units = store.units().await?;
        let mut owned: Vec<(String, String, Instant, String)> = Vec::new();
        for (host, since, why) in &failed {
            let mine: Vec<&str> = units
                .iter()
                .filter(|u| u.primary == *host)
                .map(|u| u.unit.as_str())
                .collect();
            if mine.is_empty() {
                self.failed.remove(host);
                continue;
            }
            for unit in mine {
                owned.push((unit.to_string(), host.clone(), *since, why.clone()));
            }
        }
        let plans: Vec<(Plan<'_>, Instant)> = owned
            .iter()
            .map(|(unit, host, since, why)| {
                let plan = Plan {
                    unit,
                    from: Some(host),
                    to: None,
                    why,
                    steps: &MIGRATION_STEPS,
                    done_request: None,
                    reason: host_reason(why),
                    binary: None,
                };
                (plan, *since)
            })
            .collect();
        let refs: Vec<(&Plan<'_>, Instant)> = plans.iter().map(|(p, t)| (p, *t)).collect();
        start_migrations(shared, store, token, &refs).await
    }
}

/// The new placements of the units whose backup was one of `hosts`, which
/// have just failed: TRIPOD's placement for those units only (every other
/// backup stays where it is: min-churn), all failed hosts at once.
async fn replace_backups_on(
    store: &mut Store,
    token: Token,
    hosts: &[&str],
) -> Result<Vec<(String, String)>, StoreError> {
    let keys = store.keys().clone();
    let (mut desired, records) = crate::placement::read_state_and_units(store).await?;
    let ids: Vec<holdfast_control::HostId> = hosts
        .iter()
        .map(|h| holdfast_control::HostId::new(*h))
        .collect();
    for id in &ids {
        if let Some(h) = desired.hosts.get_mut(id) {
            h.state = holdfast_control::HostState::Failed {
                kind: holdfast_control::FailureKind::Host,
                since: 0,
            };
        }
    }
    let (placed, _) = holdfast_control::place_partial(&desired);
    let records: BTreeMap<String, UnitRecord> =
        records.into_iter().map(|u| (u.unit.clone(), u)).collect();
    let mut puts = Vec::new();
    for (unit, u) in &desired.units {
        let Some(failed) = u.backup.as_ref().filter(|b| ids.contains(b)) else {
            continue;
        };
        if ids.contains(&u.primary) {
            continue;
        }
        let Some(mut rec) = records.get(&unit.0).cloned() else {
            continue;
        };
        rec.backup = placed.backups.get(unit).map(|h| h.0.clone());
        rec.epoch = token;
        tracing::info!(unit = %unit.0, failed = %failed.0, backup = ?rec.backup, "backup re-placed");
        puts.push((keys.unit(&unit.0), to_json(&rec)));
    }
    Ok(puts)
}

/// What a host failure's migrations count as.
fn host_reason(why: &str) -> Reason {
    if why.contains("lease") {
        Reason::LeaseExpired
    } else if why.contains("HostNetwork") {
        Reason::HostNetwork
    } else {
        Reason::Host
    }
}
