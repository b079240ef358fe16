//! The control socket: newline-delimited JSON requests and responses
//! (`holdfast_api::Request` / `holdfast_api::Response`) over a Unix socket,
//! plus the Prometheus endpoint over HTTP. Both hand their requests to the
//! daemon task, which owns all state.

use crate::msg::rib::BestBatch;
use holdfast_api::{Request, Response};
use std::path::Path;
use std::sync::Arc;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, UnixListener};
use tokio::sync::{mpsc, oneshot};

/// A request to the daemon task.
pub enum DaemonReq {
    Control(Request, oneshot::Sender<Response>),
    Metrics(oneshot::Sender<String>),
    /// The default instance's best-path changes (the gRPC API's
    /// `WatchEvent`), or why not.
    WatchBest(oneshot::Sender<Result<mpsc::Receiver<Arc<BestBatch>>, String>>),
}

pub type DaemonTx = mpsc::UnboundedSender<DaemonReq>;

/// Binds the control socket, replacing a stale socket file.
pub fn serve_control(path: &Path, tx: DaemonTx) -> std::io::Result<()> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    if path.exists() {
        std::fs::remove_file(path)?;
    }
    let listener = UnixListener::bind(path)?;
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            let tx = tx.clone();
            tokio::spawn(async move {
                let (rd, mut wr) = stream.into_split();
                let mut lines = BufReader::new(rd).lines();
                while let Ok(Some(line)) = lines.next_line().await {
                    let resp = match serde_json::from_str::<Request>(&line) {
                        Ok(req) => {
                            let (rtx, rrx) = oneshot::channel();
                            if tx.send(DaemonReq::Control(req, rtx)).is_err() {
                                return;
                            }
                            match rrx.await {
                                Ok(r) => r,
                                Err(_) => return,
                            }
                        }
                        Err(e) => Response::error(format!("bad request: {e}")),
                    };
                    let mut out = resp.to_line();
                    out.push('\n');
                    if wr.write_all(out.as_bytes()).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    Ok(())
}

/// Serves `GET /metrics` in the Prometheus text format.
pub async fn serve_metrics(addr: std::net::SocketAddr, tx: DaemonTx) -> std::io::Result<()> {
    let listener = TcpListener::bind(addr).await?;
    let tx = Arc::new(tx);
    tokio::spawn(async move {
        loop {
            let Ok((mut stream, _)) = listener.accept().await else {
                continue;
            };
            let tx = tx.clone();
            tokio::spawn(async move {
                let mut req = Vec::with_capacity(1024);
                let mut buf = [0u8; 1024];
                while !req.windows(4).any(|w| w == b"\r\n\r\n") && req.len() < 16 * 1024 {
                    match stream.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => req.extend_from_slice(&buf[..n]),
                    }
                }
                let first = String::from_utf8_lossy(&req)
                    .lines()
                    .next()
                    .unwrap_or_default()
                    .to_string();
                let (status, body) = if first.starts_with("GET /metrics") {
                    let (rtx, rrx) = oneshot::channel();
                    if tx.send(DaemonReq::Metrics(rtx)).is_err() {
                        return;
                    }
                    ("200 OK", rrx.await.unwrap_or_default())
                } else {
                    ("404 Not Found", "not found\n".to_string())
                };
                let head = format!(
                    "HTTP/1.1 {status}\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                    body.len()
                );
                let _ = stream.write_all(head.as_bytes()).await;
                let _ = stream.write_all(body.as_bytes()).await;
            });
        }
    });
    Ok(())
}
