//! The daemon's side of MRT (`crate::mrt`): `holdfast dump mrt`, the
//! `[[mrt]] kind = "table"` timers (each sends the daemon the same
//! request, so a timed dump passes the control choke point like an
//! operator's) and the `kind = "updates"` logs handed to the sessions.
//!
//! # Known issues
//! - A reload that changes `[[mrt]]` restarts every timer and log: an
//!   updates log that rotates starts its next file at once.
//! - The daemon serves no other request while a dump is encoded and
//!   written (about 0.3 s at 1M routes, docs/notes/issue13-mrt.md), as with
//!   `show rib`; sessions are not affected.

use super::Daemon;
use crate::control::{DaemonReq, DaemonTx};
use crate::mrt::{self as out, DumpInput, UpdateLog};
use crate::msg::peer::PeerCmd;
use crate::msg::rib::{QueryResult, RibQuery};
use holdfast_api::{MrtDumpInfo, Request, Response, RibTable};
use holdfast_config::{Config, MrtKind, MrtTable};
use holdfast_wire::mrt::MrtPeer;
use std::net::{IpAddr, Ipv4Addr};
use std::time::{Duration, Instant};
use tokio::sync::oneshot;

/// The running MRT timers and logs.
#[derive(Default)]
pub(super) struct MrtRuntime {
    timers: Vec<tokio::task::JoinHandle<()>>,
    /// `(instance, neighbours (empty: all), log)`.
    logs: Vec<(String, Vec<IpAddr>, UpdateLog)>,
}

impl Drop for MrtRuntime {
    fn drop(&mut self) {
        for t in &self.timers {
            t.abort();
        }
    }
}

impl MrtRuntime {
    /// Starts what `cfg` asks for; `tx` reaches the daemon's request loop.
    pub(super) fn start(cfg: &Config, tx: &DaemonTx) -> Self {
        let mut rt = MrtRuntime::default();
        for m in &cfg.mrt {
            match m.kind {
                MrtKind::Table => {
                    let every = Duration::from_secs(m.interval_secs.max(1));
                    let (file, instance, table) = (
                        m.file.clone(),
                        m.instance.clone(),
                        match m.table.unwrap_or_default() {
                            MrtTable::Loc => RibTable::Loc,
                            MrtTable::In => RibTable::In,
                            MrtTable::Out => RibTable::Out,
                        },
                    );
                    let tx = tx.clone();
                    rt.timers.push(tokio::spawn(async move {
                        let mut tick = tokio::time::interval(every);
                        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                        tick.tick().await;
                        loop {
                            tick.tick().await;
                            let path = out::expand_file(&file, u64::from(out::now().0));
                            let (rtx, rrx) = oneshot::channel();
                            let req = Request::DumpMrt {
                                path: path.clone(),
                                table,
                                instance: Some(instance.clone()),
                                peer: None,
                            };
                            if tx.send(DaemonReq::Control(req, rtx)).is_err() {
                                return;
                            }
                            match rrx.await {
                                Ok(Response::Ok(_)) => {}
                                Ok(Response::Error { message }) => {
                                    tracing::warn!(file = %path, "MRT dump failed: {message}")
                                }
                                Err(_) => return,
                            }
                        }
                    }));
                }
                MrtKind::Updates => {
                    let rotate =
                        (m.interval_secs > 0).then(|| Duration::from_secs(m.interval_secs));
                    let log = out::spawn_update_log(m.file.clone(), rotate);
                    rt.logs.push((m.instance.clone(), m.neighbors.clone(), log));
                }
            }
        }
        rt
    }

    /// The updates log of a neighbour, if one names it.
    pub(super) fn log_for(&self, instance: &str, address: IpAddr) -> Option<UpdateLog> {
        self.logs
            .iter()
            .find(|(i, n, _)| i == instance && (n.is_empty() || n.contains(&address)))
            .map(|(_, _, l)| l.clone())
    }
}

impl Daemon {
    /// Starts the MRT timers and logs of the running configuration (again,
    /// after a reload that changed them) and hands each session its log.
    pub(super) fn restart_mrt(&mut self) {
        self.mrt = MrtRuntime::start(&self.cfg, &self.self_tx);
        for (key, e) in &self.peers {
            let _ =
                e.tx.send(PeerCmd::Mrt(self.mrt.log_for(&key.instance, key.address)));
        }
    }

    /// `dump mrt`: one answer of the RIB thread, encoded and written off
    /// the I/O thread.
    pub(super) async fn dump_mrt(
        &self,
        path: String,
        table: RibTable,
        instance: Option<String>,
        peer: Option<String>,
    ) -> anyhow::Result<MrtDumpInfo> {
        let started = Instant::now();
        if !path.starts_with('/') {
            anyhow::bail!("{path}: the path must be absolute");
        }
        let inst_name = instance.unwrap_or_else(|| "default".to_string());
        let inst = self.instance(&inst_name)?;
        let only: Option<IpAddr> = match &peer {
            None => None,
            Some(p) => Some(
                p.parse()
                    .map_err(|_| anyhow::anyhow!("{p}: not an IP address"))?,
            ),
        };
        let neighbours: Vec<_> = self
            .peers
            .values()
            .filter(|e| e.neighbor.instance == inst_name)
            .filter(|e| only.is_none_or(|a| e.neighbor.address == a))
            .collect();
        if let (Some(a), true) = (only, neighbours.is_empty()) {
            anyhow::bail!("no neighbour {a} in instance {inst_name}");
        }
        let mut routes = Vec::new();
        match table {
            RibTable::Loc => {
                let Some(QueryResult::Routes(r)) = inst.rib.query(RibQuery::Loc).await else {
                    anyhow::bail!("RIB thread did not answer");
                };
                routes = r;
                if only.is_some() {
                    let id = neighbours.first().map(|e| e.id);
                    routes.retain(|r| Some(r.1) == id);
                }
            }
            RibTable::In | RibTable::Out => {
                for e in &neighbours {
                    let q = if table == RibTable::In {
                        RibQuery::AdjIn(e.id)
                    } else {
                        RibQuery::AdjOut(e.id)
                    };
                    let Some(QueryResult::Routes(r)) = inst.rib.query(q).await else {
                        anyhow::bail!("RIB thread did not answer");
                    };
                    routes.extend(r);
                }
            }
        }
        let peers = neighbours
            .iter()
            .map(|e| {
                let bgp_id = e
                    .status
                    .lock()
                    .ok()
                    .and_then(|s| s.negotiated.as_ref().map(|n| n.remote_id))
                    .unwrap_or(Ipv4Addr::UNSPECIFIED);
                (
                    e.id,
                    MrtPeer {
                        bgp_id,
                        address: e.neighbor.address,
                        asn: e.neighbor.remote_asn,
                    },
                )
            })
            .collect();
        let cfg_inst = self.cfg.instance(&inst_name);
        let input = DumpInput {
            secs: out::now().0,
            router_id: cfg_inst
                .and_then(|i| i.router_id)
                .unwrap_or(self.cfg.global.router_id),
            local_as: cfg_inst.and_then(|i| i.asn).unwrap_or(self.cfg.global.asn),
            view: inst_name.clone(),
            peers,
            routes,
        };
        let file = path.clone();
        let stats = tokio::task::spawn_blocking(move || {
            let (bytes, stats) = out::encode_dump(input);
            out::write_atomically(std::path::Path::new(&file), &bytes).map(|()| stats)
        })
        .await
        .map_err(|e| anyhow::anyhow!("the MRT writer failed: {e}"))?
        .map_err(|e| anyhow::anyhow!("{path}: {e}"))?;
        let info = MrtDumpInfo {
            path,
            instance: inst_name,
            table: table.as_str().to_string(),
            prefixes: stats.prefixes,
            routes: stats.routes,
            bytes: stats.bytes,
            millis: started.elapsed().as_millis() as u64,
        };
        tracing::info!(
            file = %info.path,
            table = %info.table,
            instance = %info.instance,
            prefixes = info.prefixes,
            routes = info.routes,
            bytes = info.bytes,
            ms = info.millis,
            "MRT dump written"
        );
        Ok(info)
    }
}
