//! The leader's side of `holdfast ctl upgrade`: one unit
//! ([`OperatorRequest::Upgrade`], a migration of [`UPGRADE_STEPS`] started
//! by the caller), a host's units one at a time ([`upgrade_host`]), and
//! the abort ([`abort_upgrade`]), which is carried out ahead of any other
//! request (a host's upgrade stays pending while it works).

use std::time::Instant;

use holdfast_control_api::v1::{command, FenceUnit, StartUnit};

use super::migrate::{start_migration, Plan};
use super::{Config, SharedRef};
use crate::fence::Token;
use crate::hub::Hub;
use crate::metrics::Reason;
use crate::state::{Migration, OperatorRequest, UnitRecord, UPGRADE_STEPS};
use crate::store::{Outcome, Store, StoreError};

/// `holdfast ctl upgrade --host HOST --binary PATH`: the next unit whose
/// primary is HOST gets an upgrade migration once none of the host's runs;
/// an upgrade moves the unit to its backup host, so the request is done
/// when no unit that can move is left on HOST (one without a backup host
/// stays, and is logged). A refusal stops the whole request.
pub(super) async fn upgrade_host(
    shared: &SharedRef,
    store: &mut Store,
    token: Token,
    host: &str,
    binary: &str,
    request: String,
) -> Result<Option<Outcome>, StoreError> {
    let keys = store.keys().clone();
    let units: Vec<UnitRecord> = store
        .units()
        .await?
        .into_iter()
        .filter(|u| u.primary == host)
        .collect();
    let in_flight = store.migrations_in_flight().await?;
    if in_flight
        .iter()
        .any(|(_, m)| units.iter().any(|u| u.unit == m.unit))
    {
        // One at a time: the one under way first.
        return Ok(None);
    }
    let mut next = None;
    for u in &units {
        let last: Option<Migration> = store.get(&keys.migration_of(&u.unit)).await?;
        if let Some(why) =
            last.and_then(|m| m.refused.filter(|_| m.binary.as_deref() == Some(binary)))
        {
            tracing::warn!(%host, unit = %u.unit, %binary, why, "host upgrade stopped: a unit's upgrade was refused");
            return store
                .fenced_write(token, &[], &[], &[request])
                .await
                .map(Some);
        }
        if u.backup.as_ref().is_none_or(|b| b == host) {
            tracing::warn!(%host, unit = %u.unit, "host upgrade: the unit has no backup host to move to; it stays");
            continue;
        }
        next = Some(u.unit.clone());
        break;
    }
    let Some(unit) = next else {
        tracing::info!(%host, %binary, "host upgrade done: no unit that can move is left on the host");
        return store
            .fenced_write(token, &[], &[], &[request])
            .await
            .map(Some);
    };
    let why = format!("upgrade of host {host} to {binary} (holdfast ctl)");
    let plan = Plan {
        unit: &unit,
        from: Some(host),
        to: None,
        why: &why,
        steps: &UPGRADE_STEPS,
        done_request: None,
        reason: Reason::Upgrade,
        binary: Some(binary),
    };
    start_migration(shared, store, token, &plan, Instant::now()).await
}

/// The first abort among the pending requests (`holdfast ctl upgrade
/// --abort`), if any: `(id, request)`.
pub(super) async fn first_abort(
    store: &mut Store,
    ids: &[String],
) -> Result<Option<(String, OperatorRequest)>, StoreError> {
    let keys = store.keys().clone();
    for id in ids {
        // Unreadable ones are dropped in their turn.
        if let Ok(Some(req)) = store.get::<OperatorRequest>(&keys.request(id)).await {
            if matches!(
                req,
                OperatorRequest::AbortUpgrade { .. } | OperatorRequest::AbortUpgradeHost { .. }
            ) {
                return Ok(Some((id.clone(), req)));
            }
        }
    }
    Ok(None)
}

/// `holdfast ctl upgrade --host HOST --abort`: the host's pending upgrade
/// requests are dropped (no further unit starts), and the upgrade of its
/// unit under way is aborted as [`abort_upgrade`] does.
pub(super) async fn abort_upgrade_host(
    store: &mut Store,
    cfg: &Config,
    token: Token,
    hub: &Hub,
    host: &str,
    request: String,
) -> Result<Option<Outcome>, StoreError> {
    let keys = store.keys().clone();
    let mut deletes = Vec::new();
    for id in store.list(&format!("{}requests/", keys.prefix())).await? {
        let key = keys.request(&id);
        if let Ok(Some(OperatorRequest::UpgradeHost { host: h, .. })) =
            store.get::<OperatorRequest>(&key).await
        {
            if h == host {
                deletes.push(key);
            }
        }
    }
    if !deletes.is_empty() {
        let o = store.fenced_write(token, &[], &[], &deletes).await?;
        if !matches!(o, Outcome::Committed(_)) {
            return Ok(Some(o));
        }
        tracing::warn!(%host, "host upgrade aborted: no further unit of the host is upgraded");
    }
    let moving: Vec<String> = store
        .migrations_in_flight()
        .await?
        .into_iter()
        .filter(|(_, m)| m.from == host && m.binary.is_some())
        .map(|(_, m)| m.unit)
        .collect();
    match moving.first() {
        Some(unit) => abort_upgrade(store, cfg, token, hub, unit, request).await,
        None => store
            .fenced_write(token, &[], &[], &[request])
            .await
            .map(Some),
    }
}

/// `holdfast ctl upgrade --abort UNIT`: an upgrade whose switchover is not
/// recorded yet is dropped (the old primary, if asked to switch over
/// already, keeps serving once no one claims the instance). The backup
/// host gets back what the placement asks for: a standby of the
/// placement's binary (`preheated`), or none (the upgrade's is fenced).
/// An upgrade past that point finishes (upgrade again to roll back).
pub(super) async fn abort_upgrade(
    store: &mut Store,
    cfg: &Config,
    token: Token,
    hub: &Hub,
    unit: &str,
    request: String,
) -> Result<Option<Outcome>, StoreError> {
    let keys = store.keys().clone();
    let upgrade = store
        .migrations_in_flight()
        .await?
        .into_iter()
        .find(|(_, m)| m.unit == unit && m.binary.is_some());
    let Some((mkey, m)) = upgrade else {
        tracing::info!(%unit, "no upgrade of the unit in flight: nothing to abort");
        return store
            .fenced_write(token, &[], &[], &[request])
            .await
            .map(Some);
    };
    let done: std::collections::BTreeSet<String> =
        store.list(&keys.steps(&m.id)).await?.into_iter().collect();
    if done.contains("switchover") {
        tracing::warn!(%unit, migration = %m.id, "upgrade not aborted: its switchover is done, so it finishes (upgrade to the old binary to roll back)");
        return store
            .fenced_write(token, &[], &[], &[request])
            .await
            .map(Some);
    }
    let o = store
        .fenced_write(token, &[], &[], &[mkey, request])
        .await?;
    if matches!(o, Outcome::Committed(_)) {
        tracing::warn!(%unit, migration = %m.id, "upgrade aborted before its switchover: the unit stays on its primary and binary");
        let placed = store.get::<UnitRecord>(&keys.unit(unit)).await?;
        let body = match placed {
            Some(u) if u.preheated => Some(command::Body::StartUnit(StartUnit {
                unit: u.unit.clone(),
                config: u.config.clone(),
                standby: true,
                binary: u.binary.clone().unwrap_or_default(),
                ..Default::default()
            })),
            // Only a standby can run there: the primary is elsewhere.
            Some(u) if u.primary != m.to && hub.runs(&m.to, unit).is_some() => {
                Some(command::Body::FenceUnit(FenceUnit { unit: u.unit }))
            }
            _ => None,
        };
        if let Some(body) = body {
            if let Err(e) = hub.command(&m.to, token, body, cfg.command_timeout).await {
                tracing::warn!(%unit, host = %m.to, error = %e, "the backup host's standby not put back as the placement asks");
            }
        }
    }
    Ok(Some(o))
}
