//! The GoBGP gRPC API (`holdfast-gobgp-api`) served by holdfastd when
//! `[global] grpc_listen` is set: its backend hands each request to the
//! daemon task as the control socket does (`DaemonReq::Control`), so the
//! gobgp client and `holdfast show …` read the same figures, and
//! subscribes to the default instance's best-path changes
//! (`DaemonReq::WatchBest`) for `WatchEvent`.
//!
//! The server runs on the daemon's Tokio runtime; it is started once, at
//! start-up (a SIGHUP does not move it).
//!
//! # Known issues
//! - A change of `grpc_listen` or of the TLS files takes effect at the
//!   next start only.

use crate::control::{DaemonReq, DaemonTx};
use crate::convert;
use anyhow::Context;
use holdfast_api::{Request, Response};
use holdfast_gobgp_api::{Backend, BestChange, TlsFiles};
use std::sync::Arc;
use tokio::sync::{mpsc, oneshot};

/// Best-path batches converted but not yet taken by the gRPC stream.
const CONVERTED_QUEUE: usize = 16;

struct DaemonBackend {
    tx: DaemonTx,
}

impl Backend for DaemonBackend {
    async fn request(&self, req: Request) -> Response {
        let (rtx, rrx) = oneshot::channel();
        if self.tx.send(DaemonReq::Control(req, rtx)).is_err() {
            return Response::error("holdfastd is stopping");
        }
        rrx.await
            .unwrap_or_else(|_| Response::error("holdfastd is stopping"))
    }

    async fn watch_best(&self) -> Result<mpsc::Receiver<Vec<BestChange>>, String> {
        let (rtx, rrx) = oneshot::channel();
        if self.tx.send(DaemonReq::WatchBest(rtx)).is_err() {
            return Err("holdfastd is stopping".into());
        }
        let mut raw = rrx
            .await
            .map_err(|_| "holdfastd is stopping".to_string())??;
        let (tx, rx) = mpsc::channel(CONVERTED_QUEUE);
        tokio::spawn(async move {
            while let Some(batch) = raw.recv().await {
                let changes: Vec<BestChange> = batch
                    .iter()
                    .map(|(p, b)| BestChange {
                        prefix: p.to_string(),
                        route: b.as_ref().map(|(from, a)| {
                            let from = from.map(|ip| ip.to_string());
                            convert::rib_entry(*p, from.as_ref(), a, true)
                        }),
                    })
                    .collect();
                if tx.send(changes).await.is_err() {
                    return;
                }
            }
        });
        Ok(rx)
    }
}

/// Starts the gRPC server if `grpc_listen` is set.
pub async fn start(g: &holdfast_config::Global, tx: DaemonTx) -> anyhow::Result<()> {
    let Some(addr) = g.grpc_listen else {
        return Ok(());
    };
    let tls = match (&g.grpc_tls_cert, &g.grpc_tls_key) {
        (Some(cert), Some(key)) => Some(TlsFiles {
            cert: cert.clone(),
            key: key.clone(),
            client_ca: g.grpc_tls_ca.clone(),
        }),
        _ => None,
    };
    holdfast_gobgp_api::serve(addr, tls, Arc::new(DaemonBackend { tx }))
        .await
        .with_context(|| format!("gRPC API (global.grpc_listen {addr})"))?;
    Ok(())
}
