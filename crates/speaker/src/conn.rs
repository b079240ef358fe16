//! One TCP connection of a BGP session: message framing on the read side
//! (RFC 4271 §4.1 header checks via `holdfast_wire::frame`) and a writer
//! task that coalesces queued messages into large writes.
//!
//! Outgoing bytes are shared (`Arc<Vec<u8>>`) so that an UPDATE encoding
//! produced once for an update group is written to every member without a
//! copy.
//!
//! # Known issues
//! - The receive side is unbounded: a peer can queue as much as the RIB
//!   thread has not yet consumed. Bounding it needs hold-timer suppression
//!   while we apply back-pressure, so that our own slowness never expires
//!   the session.

use holdfast_wire::{frame, DecodeError, HEADER_LEN};
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::TcpStream;
use tokio::sync::mpsc;

/// Largest single write the writer task assembles from queued items.
const COALESCE_BYTES: usize = 256 * 1024;

/// An open connection, owned by a peer task.
pub struct Conn {
    rd: OwnedReadHalf,
    buf: Vec<u8>,
    /// Start of unconsumed bytes in `buf`.
    pos: usize,
    tx: mpsc::UnboundedSender<Arc<Vec<u8>>>,
    pub local: SocketAddr,
    pub remote: SocketAddr,
    pub outbound: bool,
    /// Bytes handed to the writer, for metrics.
    pub bytes_out: u64,
    pub bytes_in: u64,
}

/// One framed message: its type and its body (the bytes after the
/// 19-byte header, whose checks `frame` has already done).
pub struct Frame {
    pub msg_type: u8,
    pub body: Vec<u8>,
}

impl Conn {
    pub fn new(stream: TcpStream, outbound: bool) -> io::Result<Conn> {
        stream.set_nodelay(true)?;
        let local = stream.local_addr()?;
        let remote = stream.peer_addr()?;
        let (rd, wr) = stream.into_split();
        let (tx, rx) = mpsc::unbounded_channel();
        tokio::spawn(writer(wr, rx));
        Ok(Conn {
            rd,
            buf: Vec::with_capacity(64 * 1024),
            pos: 0,
            tx,
            local,
            remote,
            outbound,
            bytes_out: 0,
            bytes_in: 0,
        })
    }

    /// Reads more bytes. `Ok(0)` means the peer closed. Cancel-safe.
    pub async fn read_more(&mut self) -> io::Result<usize> {
        if self.pos > 0 && self.pos == self.buf.len() {
            self.buf.clear();
            self.pos = 0;
        } else if self.pos > 32 * 1024 {
            self.buf.drain(..self.pos);
            self.pos = 0;
        }
        if self.buf.capacity() - self.buf.len() < 16 * 1024 {
            self.buf.reserve(64 * 1024);
        }
        let n = self.rd.read_buf(&mut self.buf).await?;
        self.bytes_in += n as u64;
        Ok(n)
    }

    /// Next complete message in the buffer, if any.
    pub fn next_frame(&mut self) -> Result<Option<Frame>, DecodeError> {
        let rest = &self.buf[self.pos..];
        match frame(rest)? {
            None => Ok(None),
            Some((msg_type, len)) => {
                let body = rest[HEADER_LEN..len].to_vec();
                self.pos += len;
                Ok(Some(Frame { msg_type, body }))
            }
        }
    }

    /// Queues bytes for writing. Returns false if the writer has stopped.
    pub fn send(&mut self, bytes: Arc<Vec<u8>>) -> bool {
        self.bytes_out += bytes.len() as u64;
        self.tx.send(bytes).is_ok()
    }

    pub fn send_vec(&mut self, bytes: Vec<u8>) -> bool {
        self.send(Arc::new(bytes))
    }
}

/// Writes queued items in order, gathering small ones into one write, and
/// shuts the write side down once the connection is dropped and the queue
/// drained (so a NOTIFICATION queued before close still leaves).
async fn writer(mut wr: OwnedWriteHalf, mut rx: mpsc::UnboundedReceiver<Arc<Vec<u8>>>) {
    let mut gather: Vec<u8> = Vec::new();
    while let Some(first) = rx.recv().await {
        let result = match rx.try_recv() {
            Err(_) => wr.write_all(&first).await,
            Ok(second) => {
                gather.clear();
                gather.extend_from_slice(&first);
                gather.extend_from_slice(&second);
                while gather.len() < COALESCE_BYTES {
                    match rx.try_recv() {
                        Ok(more) => gather.extend_from_slice(&more),
                        Err(_) => break,
                    }
                }
                wr.write_all(&gather).await
            }
        };
        if result.is_err() {
            return;
        }
    }
    let _ = wr.shutdown().await;
}
