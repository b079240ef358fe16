//! The control socket: newline-delimited JSON requests and responses
//! (`holdfast_api::Request` / `holdfast_api::Response`) over a Unix socket,
//! plus the Prometheus endpoint over HTTP. Both hand their requests to the
//! daemon task, which owns all state.
//!
//! The control socket is created 0600, or 0660 owned by
//! `global.control_socket_group` when set (issue 30); holdfastd refuses to
//! start when the socket's directory is writable by others
//! ([`check_socket_dir`], before anything else starts): anyone who could
//! write there could put their own socket in its place.
//!
//! # Known issues
//! - Between `bind` and the `chmod` the socket has the umask's mode; with
//!   the usual umask (022) nobody else may connect to it (connecting needs
//!   write permission) during that window either.

use crate::msg::rib::BestBatch;
use holdfast_api::{Request, Response};
use std::path::{Path, PathBuf};
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

/// Why the control socket's directory is not safe.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SocketDirError {
    #[error("control socket directory {dir} is writable by others (mode {mode:04o}): make it 0755 or tighter, or choose another global.control_socket")]
    WorldWritable { dir: PathBuf, mode: u32 },
}

/// The rule on the directory's `mode` (pure): nobody but its owner and
/// group may write there.
pub fn socket_dir_ok(dir: &Path, mode: u32) -> Result<(), SocketDirError> {
    if mode & 0o002 != 0 {
        return Err(SocketDirError::WorldWritable {
            dir: dir.to_path_buf(),
            mode: mode & 0o7777,
        });
    }
    Ok(())
}

/// Checks the directory of the control socket `path`, if it exists (a
/// missing one is created 0755 by [`serve_control`]).
pub fn check_socket_dir(path: &Path) -> anyhow::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let Some(dir) = path.parent() else {
        return Ok(());
    };
    match std::fs::metadata(dir) {
        Ok(m) => Ok(socket_dir_ok(dir, m.permissions().mode())?),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(anyhow::anyhow!(
            "control socket directory {}: {e}",
            dir.display()
        )),
    }
}

/// The group `global.control_socket_group` names (a name or a number).
pub fn resolve_group(group: &str) -> anyhow::Result<nix::unistd::Gid> {
    if let Ok(n) = group.parse::<u32>() {
        return Ok(nix::unistd::Gid::from_raw(n));
    }
    match nix::unistd::Group::from_name(group) {
        Ok(Some(g)) => Ok(g.gid),
        Ok(None) => anyhow::bail!("global.control_socket_group: no group `{group}`"),
        Err(e) => anyhow::bail!("global.control_socket_group `{group}`: {e}"),
    }
}

/// Binds the control socket, replacing a stale socket file: mode 0600, or
/// 0660 owned by `group`.
pub fn serve_control(
    path: &Path,
    group: Option<nix::unistd::Gid>,
    tx: DaemonTx,
) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    if path.exists() {
        std::fs::remove_file(path)?;
    }
    let listener = UnixListener::bind(path)?;
    if let Some(gid) = group {
        nix::unistd::chown(path, None, Some(gid)).map_err(std::io::Error::from)?;
    }
    let mode = if group.is_some() { 0o660 } else { 0o600 };
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))?;
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn a_directory_others_may_write_is_refused() {
        let d = Path::new("/run/x");
        assert_eq!(socket_dir_ok(d, 0o40755), Ok(()));
        assert_eq!(socket_dir_ok(d, 0o700), Ok(()));
        assert_eq!(
            socket_dir_ok(d, 0o770),
            Ok(()),
            "group-writable is the group's"
        );
        let e = socket_dir_ok(d, 0o41777).unwrap_err();
        assert_eq!(
            e,
            SocketDirError::WorldWritable {
                dir: d.into(),
                mode: 0o1777
            }
        );
        assert!(
            e.to_string()
                .contains("/run/x is writable by others (mode 1777)"),
            "{e}"
        );
        assert!(socket_dir_ok(d, 0o757).is_err());
    }

    #[test]
    fn groups_are_names_or_numbers() {
        assert_eq!(resolve_group("0").unwrap().as_raw(), 0);
        assert_eq!(resolve_group("root").unwrap().as_raw(), 0);
        let e = resolve_group("no-such-group-hf").unwrap_err();
        assert!(e.to_string().contains("global.control_socket_group"), "{e}");
    }

    #[tokio::test]
    async fn the_socket_is_0600_or_0660_with_a_group() {
        let dir = std::env::temp_dir().join(format!("hf-ctl-sock-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o1777)).unwrap();
        let path = dir.join("s.sock");
        let e = check_socket_dir(&path).unwrap_err();
        assert!(e.to_string().contains("writable by others"), "{e}");
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        check_socket_dir(&path).unwrap();
        let (tx, _rx) = mpsc::unbounded_channel();
        serve_control(&path, None, tx.clone()).unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        serve_control(&path, Some(nix::unistd::Gid::from_raw(0)), tx).unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o660);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
