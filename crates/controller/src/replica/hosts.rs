//! The leader's watch over the hosts ([`HostWatch`]): an agent's lease
//! expiry, taken for a host failure only with evidence (the data plane, or
//! the agent back without its units, or away for [`LEASE_GRACE`]), and
//! the failed hosts marked and their units migrated, all at once. The
//! backups the failed hosts held are placed anew afterwards
//! ([`HostWatch::place_backups`]), once the migrations have been driven:
//! TRIPOD's placement over every unit (0.3-0.9 s at 10,000 units) stood
//! between a verdict and its fences.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use super::migrate::{start_migrations, Plan};
use super::SharedRef;
use crate::fence::Token;
use crate::hub::Hub;
use crate::metrics::Reason;
use crate::sense::Localization;
use crate::state::{MIGRATION_STEPS, SCHEMA};
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
    /// Whether every backup held by a host marked failed has been placed
    /// anew since this leader was elected (false at first: a leader that
    /// stopped between the marks and the placement leaves it to the next).
    backups_placed: bool,
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
        // The hosts newly failed marked, a hundred puts per transaction,
        // before their units' migrations: no migration goes to a host
        // marked failed, and a unit that finishes moving gets no backup
        // there. The backups they held are placed anew after the
        // migrations are driven ([`HostWatch::place_backups`]).
        let marks: Vec<(String, bool)> = failed
            .iter()
            .map(|(h, _, _)| (keys.failed_host(h), false))
            .collect();
        let marked = store.read_many(&marks).await?;
        let mut puts = Vec::new();
        for ((host, _, why), _) in failed.iter().zip(&marked).filter(|(_, m)| m.is_empty()) {
            tracing::warn!(%host, %why, "host failed: never reused until `holdfast ctl reset`");
            let rec =
                serde_json::json!({ "schema": SCHEMA, "host": host, "why": why, "by": token });
            puts.push((keys.failed_host(host), rec.to_string()));
        }
        if !puts.is_empty() {
            self.backups_placed = false;
        }
        if put_in_chunks(store, token, &puts).await? == Some(Outcome::Fenced) {
            return Ok(Some(Outcome::Fenced));
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

    /// The backups held by hosts marked failed placed anew, when a host
    /// was marked since the last placement (or none was made since this
    /// leader's election): TRIPOD's placement for those units only, every
    /// other backup where it is (min-churn). Called after the migrations
    /// are driven, so that it never delays a failed host's fences. A store
    /// error leaves it for the next pass.
    pub(super) async fn place_backups(
        &mut self,
        store: &mut Store,
        token: Token,
    ) -> Result<Option<Outcome>, StoreError> {
        if self.backups_placed {
            return Ok(None);
        }
        let puts = replace_failed_backups(store, token).await?;
        let last = put_in_chunks(store, token, &puts).await?;
        self.backups_placed = last != Some(Outcome::Fenced);
        Ok(last)
    }
}

/// `puts` written, [`holdfast_etcd::store::TXN_OPS`] per fenced
/// transaction: the last outcome (`None`: nothing to write), `Fenced` at
/// once.
async fn put_in_chunks(
    store: &mut Store,
    token: Token,
    puts: &[(String, String)],
) -> Result<Option<Outcome>, StoreError> {
    let mut last = None;
    for chunk in puts.chunks(holdfast_etcd::store::TXN_OPS) {
        let o = store.fenced_put(token, &[], chunk).await?;
        last = Some(o);
        if o == Outcome::Fenced {
            break;
        }
    }
    Ok(last)
}

/// The new placements of the units whose backup is a host marked failed
/// and whose primary is not ([`crate::placement::backups_off_failed`]),
/// all failed hosts at once.
async fn replace_failed_backups(
    store: &mut Store,
    token: Token,
) -> Result<Vec<(String, String)>, StoreError> {
    let keys = store.keys().clone();
    let (desired, records) = crate::placement::read_state_and_units(store).await?;
    let placed =
        crate::placement::off_runtime(move || crate::placement::backups_off_failed(&desired)).await;
    if placed.is_empty() {
        return Ok(Vec::new());
    }
    let mut puts = Vec::new();
    for mut rec in records {
        let Some(backup) = placed.get(&rec.unit) else {
            continue;
        };
        let failed = std::mem::replace(&mut rec.backup, backup.clone());
        rec.epoch = token;
        tracing::info!(unit = %rec.unit, failed = ?failed, backup = ?rec.backup, "backup re-placed");
        puts.push((keys.unit(&rec.unit), to_json(&rec)));
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
