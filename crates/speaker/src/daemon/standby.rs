//! The daemon as a preheated standby (`holdfastd --standby`): it builds
//! the routing instances' RIB threads, gives every configured neighbour
//! its engine id ahead of time, and runs the follower
//! ([`crate::standby`]) until `holdfast nsr takeover` (or SIGTERM). Then
//! [`super::run`] takes over exactly as `--takeover` does, loading only
//! what follows the positions the standby reached.
//!
//! While standby the daemon answers `show nsr` (role `standby`, with what
//! it has followed) and the takeover request; every other request is
//! refused. No peer task, listener, gate, guard, address or store write
//! exists until the takeover.
//!
//! # Known issues
//! - SIGHUP is ignored while standby: the configuration read at start is
//!   the one the takeover uses.
//! - Stopping the follower waits for its poll in progress (at most one
//!   store round trip, bounded by the store timeout).

use super::{Daemon, TakeoverOpts};
use crate::control::DaemonReq;
use crate::resume::LazyStore;
use crate::standby::{FollowCore, Follower, Target};
use anyhow::Context;
use holdfast_api::{NsrStatus, Request, Response};
use holdfast_config::Config;
use holdfast_nsr::LogPos;
use std::collections::HashMap;
use tokio::signal::unix::Signal;
use tokio::sync::{mpsc, oneshot};

/// `holdfast nsr takeover`, as the standby received it.
pub(super) struct Trigger {
    pub opts: TakeoverOpts,
    /// Where the standby stopped in the stored logs.
    pub positions: HashMap<String, LogPos>,
    /// Answered once the instance is claimed and the state loaded.
    pub reply: oneshot::Sender<Response>,
}

impl Daemon {
    /// Follows the store until the takeover request (`Some`) or SIGTERM /
    /// SIGINT (`None`).
    pub(super) async fn standby(
        &mut self,
        cfg: &Config,
        rx: &mut mpsc::UnboundedReceiver<DaemonReq>,
        signals: [&mut Signal; 3],
    ) -> anyhow::Result<Option<Trigger>> {
        let [hup, term, int] = signals;
        let n = cfg
            .nsr
            .as_ref()
            .filter(|n| n.enabled)
            .context("--standby needs an enabled [nsr] section")?;
        self.ensure_instances(cfg, true);
        let compiled = crate::convert::compile(cfg).context("compiling policies")?;
        let mut targets = HashMap::new();
        for nb in &cfg.neighbors {
            let id = self.new_peer_id(&nb.key());
            self.preassigned.insert(nb.key(), id);
            let settings = crate::convert::peer_settings(cfg, &compiled, nb, id)?;
            targets.insert(
                (settings.instance.clone(), settings.address),
                Target { settings },
            );
        }
        // Networks originated now, as the takeover's configuration would:
        // the preheated tables then hold them.
        self.sync_networks(cfg, &compiled)?;
        let ribs = self
            .instances
            .iter()
            .map(|(k, v)| (k.clone(), v.rib.clone()))
            .collect();
        let follower = Follower::start(Box::new(LazyStore::new(n)), FollowCore::new(targets), ribs)
            .context("starting the standby's follower thread")?;
        tracing::info!(instance = %n.instance, store = %n.store_desc(), "standby: following the state store; `holdfast nsr takeover` takes over");
        crate::watchdog::ready("standby");
        let stop = |f: Follower| async move {
            tokio::task::spawn_blocking(move || f.stop())
                .await
                .unwrap_or_default()
        };
        loop {
            tokio::select! {
                Some(req) = rx.recv() => match req {
                    DaemonReq::Control(Request::NsrTakeover { epoch, ready_file }, reply) => {
                        tracing::info!(?epoch, ?ready_file, "standby: takeover requested");
                        let positions = stop(follower).await;
                        return Ok(Some(Trigger {
                            opts: TakeoverOpts {
                                ready_file: ready_file.map(Into::into),
                                epoch: epoch.unwrap_or(0),
                            },
                            positions,
                            reply,
                        }));
                    }
                    DaemonReq::Control(Request::ShowNsr, reply) => {
                        let status = follower.status.lock().map(|s| s.clone()).unwrap_or_default();
                        let _ = reply.send(Response::nsr(NsrStatus {
                            enabled: true,
                            instance: n.instance.clone(),
                            role: "standby".into(),
                            store_epoch: status.store_epoch,
                            store: n.store_desc(),
                            standby: Some(status),
                            ..Default::default()
                        }));
                    }
                    DaemonReq::Control(_, reply) => {
                        let _ = reply.send(Response::error(
                            "this holdfastd is a standby: it serves no session until `holdfast nsr takeover`",
                        ));
                    }
                    DaemonReq::WatchBest(reply) => {
                        let _ = reply.send(Err("a standby has no tables to watch yet".into()));
                    }
                    DaemonReq::Metrics(reply) => {
                        let _ = reply.send(self.metrics.encode());
                    }
                },
                _ = hup.recv() => {
                    tracing::warn!("standby: SIGHUP ignored; the configuration read at start is the one the takeover uses");
                }
                _ = term.recv() => break,
                _ = int.recv() => break,
            }
        }
        tracing::info!("standby: stopped");
        stop(follower).await;
        Ok(None)
    }
}
