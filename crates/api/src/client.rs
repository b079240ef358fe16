//! The control socket's client: one [`Request`] sent over a new connection
//! to holdfastd's Unix socket, one [`Response`] read back (blocking, with a
//! timeout). The `holdfast` CLI, the host agent (`nsr switchover`, `nsr
//! takeover` to a preheated standby) and the lab use it.
//!
//! Known issues:
//! - Blocking: an async caller runs it on a thread that may block.
//! - One connection per request; the daemon also answers several requests
//!   on one connection, which this client does not use.
//! - The connect is not bounded by the timeout: it fails at once when
//!   nothing listens, but waits while the listener's backlog is full.

use crate::{Request, Response};
use std::io::{self, BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::Duration;
use thiserror::Error;

/// Why no answer could be read.
#[derive(Debug, Error)]
pub enum ClientError {
    /// Nothing listens on the socket (or it is not there).
    #[error("connecting to {}: {error}", socket.display())]
    Connect { socket: PathBuf, error: io::Error },
    /// Sending the request or reading the answer failed or timed out.
    #[error("control socket {}: {error}", socket.display())]
    Io { socket: PathBuf, error: io::Error },
    /// The daemon closed the connection without answering.
    #[error("control socket {}: the daemon closed the connection without answering", socket.display())]
    Closed { socket: PathBuf },
    /// The answer is not a [`Response`].
    #[error("control socket {}: cannot decode the answer {answer:?}: {error}", socket.display())]
    Decode {
        socket: PathBuf,
        answer: String,
        error: serde_json::Error,
    },
}

/// Sends `req` to the control socket `socket` and reads the answer, each
/// of the send and the read bounded by `timeout`. An error answer
/// (`Response::Error`) is an answer: see [`Response::into_result`].
pub fn request(socket: &Path, req: &Request, timeout: Duration) -> Result<Response, ClientError> {
    let io_err = |error| ClientError::Io {
        socket: socket.to_path_buf(),
        error,
    };
    let mut s = UnixStream::connect(socket).map_err(|error| ClientError::Connect {
        socket: socket.to_path_buf(),
        error,
    })?;
    s.set_read_timeout(Some(timeout)).map_err(io_err)?;
    s.set_write_timeout(Some(timeout)).map_err(io_err)?;
    let mut line = req.to_line();
    line.push('\n');
    s.write_all(line.as_bytes()).map_err(io_err)?;
    let mut answer = String::new();
    BufReader::new(s).read_line(&mut answer).map_err(io_err)?;
    if answer.is_empty() {
        return Err(ClientError::Closed {
            socket: socket.to_path_buf(),
        });
    }
    Response::from_line(&answer).map_err(|error| ClientError::Decode {
        socket: socket.to_path_buf(),
        answer,
        error,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::net::UnixListener;

    fn socket_path(tag: &str) -> PathBuf {
        let p = std::env::temp_dir().join(format!("hf-api-{}-{tag}.sock", std::process::id()));
        let _ = std::fs::remove_file(&p);
        p
    }

    /// A one-connection server: reads one line, writes `answer`.
    fn serve_once(path: &Path, answer: &'static str) -> std::thread::JoinHandle<String> {
        let l = UnixListener::bind(path).expect("bind");
        std::thread::spawn(move || {
            let (s, _) = l.accept().expect("accept");
            let mut r = BufReader::new(s);
            let mut got = String::new();
            r.read_line(&mut got).expect("read");
            r.get_mut().write_all(answer.as_bytes()).expect("write");
            got
        })
    }

    #[test]
    fn one_request_one_answer() {
        let p = socket_path("ok");
        let server = serve_once(&p, "{\"ok\":{\"message\":\"hi\"}}\n");
        let r = request(&p, &Request::ShowSummary, Duration::from_secs(5)).expect("answer");
        assert_eq!(r, Response::message("hi"));
        assert_eq!(
            server.join().unwrap(),
            format!("{}\n", Request::ShowSummary.to_line())
        );
        let _ = std::fs::remove_file(&p);
    }

    #[test]
    fn errors_name_the_socket() {
        let p = socket_path("none");
        let e = request(&p, &Request::ShowSummary, Duration::from_secs(1)).unwrap_err();
        assert!(matches!(e, ClientError::Connect { .. }), "{e}");
        assert!(e.to_string().contains(&p.display().to_string()), "{e}");

        let server = serve_once(&p, "");
        let e = request(&p, &Request::ShowSummary, Duration::from_secs(5)).unwrap_err();
        assert!(matches!(e, ClientError::Closed { .. }), "{e}");
        server.join().unwrap();
        let _ = std::fs::remove_file(&p);

        let server = serve_once(&p, "not json\n");
        let e = request(&p, &Request::ShowSummary, Duration::from_secs(5)).unwrap_err();
        assert!(matches!(e, ClientError::Decode { .. }), "{e}");
        server.join().unwrap();
        let _ = std::fs::remove_file(&p);
    }
}
