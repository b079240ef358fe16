//! One TCP connection of a BGP session: message framing on the read side
//! (RFC 4271 §4.1 header checks via `holdfast_wire::frame`), the scan
//! that lets NSR replicate whole UPDATEs and KEEPALIVEs ahead of the framer
//! (`Conn::scan_ahead`, `Conn::read_ahead`), and a writer task that
//! coalesces queued messages into large writes.
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

use crate::nsr::{Nsr, Then};
use crate::unacked::Unacked;
use bytes::Bytes;
use holdfast_linux::nfq::ConnKey;
use holdfast_linux::repair::{self, TcpRepairState};
use holdfast_nsr::{Op, TcpParams};
use holdfast_wire::{frame, msg_type, DecodeError, HEADER_LEN};
use std::io;
use std::net::SocketAddr;
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Instant, SystemTime, UNIX_EPOCH};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::TcpStream;
use tokio::sync::mpsc;

/// Largest single write the writer task assembles from queued items.
const COALESCE_BYTES: usize = 256 * 1024;

/// Non-stop-routing state of a connection: where its byte streams stand in
/// TCP sequence space, so that every replicated message carries the ACK
/// number it implies (TENSOR §3.1.2) and every sent one its end sequence.
pub struct ConnRepl {
    pub nsr: Nsr,
    pub ckey: ConnKey,
    /// TCP parameters captured at establishment (or restored).
    pub tcp: TcpParams,
    /// Sequence number of the first byte counted by `consumed`.
    pub rcv_base: u32,
    /// Bytes of whole messages taken out of the receive buffer.
    pub consumed: u64,
    /// Bytes of whole messages replicated ahead of the framer (see
    /// [`Conn::scan_ahead`]); at or below `consumed` when nothing is.
    pub ahead: u64,
    /// Bytes the last `Received` written covers (its ACK number less
    /// `rcv_base`).
    pub covered: u64,
    /// Sequence number of the first byte counted by `queued`.
    pub snd_base: u32,
    /// Bytes handed to the replicator for writing.
    pub queued: u64,
    /// Session key in the store, once the session is replicated.
    pub key: Option<String>,
    /// Store generation this session last synchronised at.
    pub synced_gen: u64,
    /// OPEN bodies sent and received on this connection.
    pub open_tx: Option<Vec<u8>>,
    pub open_rx: Option<Vec<u8>>,
    /// While a snapshot is being taken: UPDATEs received and bytes sent
    /// meanwhile, appended to the snapshot when it arrives.
    pub during_snapshot: Option<(Vec<u8>, Vec<u8>)>,
    /// Log bytes stored since the last snapshot.
    pub log_bytes: u64,
    /// A session taken over whose stored logs are still being read: their
    /// size is added to `log_bytes` once known ([`ConnRepl::count_read_logs`]).
    pub logs_unread: Option<crate::nsr::PendingLogs>,
    pub last_acked: Instant,
    /// What the peer may not have acknowledged yet (see
    /// [`crate::unacked`]).
    pub unacked: Unacked,
}

impl ConnRepl {
    pub fn rcv_next(&self) -> u32 {
        self.rcv_base.wrapping_add(self.consumed as u32)
    }
    pub fn snd_next(&self) -> u32 {
        self.snd_base.wrapping_add(self.queued as u32)
    }
    /// A taken-over session: once its stored logs are read, their size
    /// counts in `log_bytes` (for compaction and `show nsr`).
    pub fn count_read_logs(&mut self) {
        let (Some(logs), Some(key)) = (&self.logs_unread, &self.key) else {
            return;
        };
        if let Some(bytes) = logs.bytes(key) {
            self.log_bytes += bytes;
            self.logs_unread = None;
        }
    }
    /// Whether operations of this session are stored now.
    pub fn replicating(&self) -> Option<&str> {
        match &self.key {
            Some(k) if self.synced_gen == self.nsr.gen() => Some(k),
            _ => None,
        }
    }
}

/// See [`Conn::snd_una`].
fn snd_una(r: &ConnRepl, written: &AtomicU64, rd: &OwnedReadHalf) -> Option<u32> {
    let written = written.load(Ordering::Acquire);
    let outq = repair::outq(rd.as_ref().as_fd()).ok()?;
    Some(r.snd_base.wrapping_add(written as u32).wrapping_sub(outq))
}

/// An `Arc<Vec<u8>>` as the owner of a `Bytes`, so a message is shared by
/// the writer and the store without a copy.
struct Shared(Arc<Vec<u8>>);

impl AsRef<[u8]> for Shared {
    fn as_ref(&self) -> &[u8] {
        &self.0
    }
}

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
    /// Bytes the writer has handed to the kernel.
    written: Arc<AtomicU64>,
    /// An error a read ahead met, reported by the next [`Conn::read_more`].
    read_err: Option<io::Error>,
    pub repl: Option<ConnRepl>,
}

/// What [`Conn::scan_ahead`] found past what is already replicated.
pub struct Ahead {
    /// The whole UPDATE messages, headers included.
    pub updates: Vec<u8>,
    /// The ACK number the bytes imply.
    pub ack: u32,
    /// The start of an unfinished message after them.
    pub partial: Bytes,
}

/// One framed message: its type and its body (the bytes after the
/// 19-byte header, whose checks `frame` has already done).
pub struct Frame {
    pub msg_type: u8,
    pub body: Vec<u8>,
}

impl Conn {
    /// A new connection. With NSR, its sequence numbers are captured now,
    /// before a byte is read or written, and its packets are gated from now
    /// on (so no ACK for an UPDATE that follows the peer's KEEPALIVE can
    /// leave before it is replicated).
    pub fn new(stream: TcpStream, outbound: bool, nsr: Option<&Nsr>) -> io::Result<Conn> {
        stream.set_nodelay(true)?;
        let repl = match nsr {
            Some(nsr) => {
                let st = repair::capture(stream.as_fd())?;
                let ckey = ConnKey {
                    local: st.local,
                    remote: st.remote,
                };
                nsr.gate.register(ckey, st.rcv_seq, st.rcv_wscale);
                Some(ConnRepl {
                    nsr: nsr.clone(),
                    ckey,
                    tcp: tcp_params(&st),
                    rcv_base: st.rcv_seq,
                    consumed: 0,
                    ahead: 0,
                    covered: 0,
                    snd_base: st.snd_seq,
                    queued: 0,
                    key: None,
                    synced_gen: 0,
                    open_tx: None,
                    open_rx: None,
                    during_snapshot: None,
                    log_bytes: 0,
                    logs_unread: None,
                    last_acked: Instant::now(),
                    unacked: Unacked::default(),
                })
            }
            None => None,
        };
        Self::with_repl(stream, outbound, repl)
    }

    /// A connection rebuilt by TCP_REPAIR on a backup, already replicated.
    pub fn with_repl(
        stream: TcpStream,
        outbound: bool,
        repl: Option<ConnRepl>,
    ) -> io::Result<Conn> {
        stream.set_nodelay(true)?;
        let local = stream.local_addr()?;
        let remote = stream.peer_addr()?;
        let (rd, wr) = stream.into_split();
        let (tx, rx) = mpsc::unbounded_channel();
        let written = Arc::new(AtomicU64::new(0));
        tokio::spawn(writer(wr, rx, written.clone()));
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
            written,
            read_err: None,
            repl,
        })
    }

    /// Lower bound of the peer's cumulative ACK: bytes the writer handed to
    /// the kernel minus what the kernel still holds unacknowledged. Read in
    /// that order, a concurrent write can only make it lower.
    pub fn snd_una(&self) -> Option<u32> {
        snd_una(self.repl.as_ref()?, &self.written, &self.rd)
    }

    /// Reads more bytes. `Ok(0)` means the peer closed. Cancel-safe.
    pub async fn read_more(&mut self) -> io::Result<usize> {
        if let Some(e) = self.read_err.take() {
            return Err(e);
        }
        if self.pos > 0 && self.pos == self.buf.len() {
            self.buf.clear();
            self.pos = 0;
        } else if self.pos > 32 * 1024 {
            self.buf.drain(..self.pos);
            self.pos = 0;
        }
        self.make_room();
        let n = self.rd.read_buf(&mut self.buf).await?;
        self.bytes_in += n as u64;
        Ok(n)
    }

    /// At least 16 KiB free at the buffer's end for the next read.
    fn make_room(&mut self) {
        if self.buf.capacity() - self.buf.len() < 16 * 1024 {
            self.buf.reserve(64 * 1024);
        }
    }

    /// Reads what the kernel holds without waiting (between the messages
    /// of one read, so what arrived meanwhile is replicated before the
    /// framer reaches it). Returns the bytes read; an end of stream or an
    /// error is left for the next [`Conn::read_more`], which reports it.
    pub fn read_ahead(&mut self) -> usize {
        if self.read_err.is_some() {
            return 0;
        }
        self.make_room();
        match self.rd.try_read_buf(&mut self.buf) {
            Ok(n) => {
                self.bytes_in += n as u64;
                n
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => 0,
            Err(e) => {
                self.read_err = Some(e);
                0
            }
        }
    }

    /// The bytes read past what is replicated, while they are whole
    /// UPDATEs and KEEPALIVEs (and the start of a message after them).
    /// Such messages may be replicated before the framer and the core see
    /// them: while the session stays Established the core passes every
    /// UPDATE to the RIB ([`holdfast_neighbor::PeerCore::takes_updates`]),
    /// so the log is the one the core's outputs would have made. The scan
    /// stops before any other message or a bad header, which go the
    /// framer's way first. Marks them replicated; `None` when no byte is
    /// new or the connection is not replicated.
    pub fn scan_ahead(&mut self) -> Option<Ahead> {
        let r = self.repl.as_mut()?;
        let from = r.ahead.max(r.consumed);
        let start = self.pos + (from - r.consumed) as usize;
        let scan = scan_messages(&self.buf[start..]);
        let partial = match scan.clean {
            true => &self.buf[start + scan.whole..],
            false => &[][..],
        };
        let (ahead, covered) = advance(from, &scan, partial.len(), r.covered)?;
        r.ahead = ahead;
        r.covered = covered;
        Some(Ahead {
            updates: scan.updates,
            ack: r.rcv_base.wrapping_add(covered as u32),
            partial: Bytes::copy_from_slice(partial),
        })
    }

    /// Where the receive side stands, from the socket, the gate and the
    /// framer (logged when a replicated session's hold timer expires:
    /// bytes the kernel holds unread, or an ACK the gate never let go).
    pub fn receive_diagnosis(&self) -> String {
        let fd = self.rd.as_ref().as_fd();
        let inq = repair::inq(fd).map_or_else(|e| e.to_string(), |n| n.to_string());
        let (ours, gate) = match self.repl.as_ref() {
            Some(r) => (
                Some(r.rcv_next()),
                r.nsr.gate.view(&r.ckey).map(|v| format!("{v:?}")),
            ),
            None => (None, None),
        };
        format!(
            "unread in kernel {inq} B; framed up to {ours:?}; partial message {} B; gate {}",
            self.unconsumed().len(),
            gate.as_deref().unwrap_or("not gating it")
        )
    }

    /// Whether the kernel holds bytes of this connection that have not
    /// been read yet (`SIOCINQ`).
    pub fn unread_in_kernel(&self) -> bool {
        repair::inq(self.rd.as_ref().as_fd()).is_ok_and(|n| n > 0)
    }

    /// Milliseconds since the peer's TCP last acknowledged us (any
    /// acceptable ACK), from `TCP_INFO`.
    pub fn last_ack_recv_ms(&self) -> Option<u32> {
        holdfast_linux::info::tcp_info(self.rd.as_ref().as_fd())
            .ok()
            .map(|i| i.last_ack_recv_ms)
    }

    /// A window probe, so the peer answers at once (see
    /// [`repair::window_probe`]).
    pub fn window_probe(&self) -> io::Result<()> {
        repair::window_probe(self.rd.as_ref().as_fd())
    }

    /// Bytes read from the socket that do not yet form a whole message.
    pub fn unconsumed(&self) -> &[u8] {
        &self.buf[self.pos..]
    }

    /// A restored connection continues a message the old primary had
    /// started to receive: those bytes come first.
    pub fn prefill(&mut self, bytes: &[u8]) {
        self.buf.extend_from_slice(bytes);
    }

    /// Next complete message in the buffer, if any.
    pub fn next_frame(&mut self) -> Result<Option<Frame>, DecodeError> {
        let rest = &self.buf[self.pos..];
        match frame(rest)? {
            None => Ok(None),
            Some((msg_type, len)) => {
                let body = rest[HEADER_LEN..len].to_vec();
                self.pos += len;
                if let Some(r) = self.repl.as_mut() {
                    r.consumed += len as u64;
                }
                Ok(Some(Frame { msg_type, body }))
            }
        }
    }

    /// Queues bytes for writing. Returns false if the writer has stopped.
    ///
    /// With NSR every byte goes through the replicator, in order: once the
    /// session is replicated, the bytes reach the writer only after the
    /// store has them (so a backup can rebuild the send queue).
    pub fn send(&mut self, bytes: Arc<Vec<u8>>) -> bool {
        self.bytes_out += bytes.len() as u64;
        let Some(r) = self.repl.as_mut() else {
            return self.tx.send(bytes).is_ok();
        };
        r.queued += bytes.len() as u64;
        let seq_end = r.snd_next();
        if let Some((_, out)) = r.during_snapshot.as_mut() {
            out.extend_from_slice(&bytes);
        }
        let then = Then::Write(self.tx.clone(), bytes.clone());
        let shared = Bytes::from_owner(Shared(bytes.clone()));
        if r.unacked.push(seq_end, shared.clone()) {
            let una = snd_una(r, &self.written, &self.rd);
            r.unacked.trim(una);
        }
        match r.replicating() {
            Some(key) => {
                let key = key.to_string();
                r.log_bytes += bytes.len() as u64;
                let op = Op::Sent {
                    key: key.clone(),
                    seq_end,
                    bytes: shared,
                };
                r.nsr.submit(&key, Some(op), r.synced_gen, then);
            }
            None => r.nsr.submit("", None, 0, then),
        }
        !self.tx.is_closed()
    }

    pub fn send_vec(&mut self, bytes: Vec<u8>) -> bool {
        self.send(Arc::new(bytes))
    }
}

/// A connection closed by the application (TCPR's done_writing): the store
/// forgets the session and the gate stops holding its packets, so the FIN
/// that follows the last queued bytes may leave.
impl Drop for Conn {
    fn drop(&mut self) {
        if let Some(r) = self.repl.take() {
            let key = r.key.clone().unwrap_or_default();
            let op = r.key.clone().map(|key| Op::Remove { key });
            if !key.is_empty() {
                r.nsr.forget(&key);
            }
            r.nsr
                .submit(&key, op, r.nsr.gen(), Then::Unregister(r.ckey));
        }
    }
}

/// Writes queued items in order, gathering small ones into one write, and
/// shuts the write side down once the connection is dropped and the queue
/// drained (so a NOTIFICATION queued before close still leaves).
async fn writer(
    mut wr: OwnedWriteHalf,
    mut rx: mpsc::UnboundedReceiver<Arc<Vec<u8>>>,
    written: Arc<AtomicU64>,
) {
    let mut gather: Vec<u8> = Vec::new();
    while let Some(first) = rx.recv().await {
        let (result, n) = match rx.try_recv() {
            Err(_) => (wr.write_all(&first).await, first.len()),
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
                (wr.write_all(&gather).await, gather.len())
            }
        };
        if result.is_err() {
            return;
        }
        written.fetch_add(n as u64, Ordering::Release);
    }
    let _ = wr.shutdown().await;
}

/// The whole UPDATEs and KEEPALIVEs at the start of some received bytes.
#[derive(Debug, PartialEq, Eq)]
pub struct Scan {
    /// The bytes they take.
    pub whole: usize,
    /// The UPDATEs among them, headers included.
    pub updates: Vec<u8>,
    /// The scan reached the end or an unfinished message, rather than
    /// another kind of message or a bad header.
    pub clean: bool,
}

/// Scans `bytes` from a message boundary for whole UPDATEs and KEEPALIVEs
/// (see [`Conn::scan_ahead`]).
pub fn scan_messages(bytes: &[u8]) -> Scan {
    let mut at = 0;
    let mut updates = Vec::new();
    let clean = loop {
        let rest = &bytes[at..];
        match frame(rest) {
            Ok(Some((msg_type::UPDATE, len))) => {
                updates.extend_from_slice(&rest[..len]);
                at += len;
            }
            Ok(Some((msg_type::KEEPALIVE, len))) => at += len,
            Ok(None) => break true,
            Ok(Some(_)) | Err(_) => break false,
        }
    };
    Scan {
        whole: at,
        updates,
        clean,
    }
}

/// Where a scan from stream offset `from` (the replicated whole messages'
/// end), with `partial` bytes of an unfinished message after it, leaves
/// the frontier: (whole messages replicated up to, bytes the ACK covers).
/// `None` when it adds nothing to the `covered` bytes already written, or
/// would cover fewer (an unfinished message whose start was written and
/// which, now whole, is not an UPDATE or a KEEPALIVE: the framer's).
pub fn advance(from: u64, scan: &Scan, partial: usize, covered: u64) -> Option<(u64, u64)> {
    let ahead = from + scan.whole as u64;
    let now = ahead + partial as u64;
    (now > covered || (now == covered && !scan.updates.is_empty())).then_some((ahead, now))
}

/// Wall clock in ms since the Unix epoch (TCP timestamps are carried over
/// a takeover by wall time).
pub fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

pub fn tcp_params(st: &TcpRepairState) -> TcpParams {
    TcpParams {
        mss: st.mss,
        snd_wscale: st.snd_wscale,
        rcv_wscale: st.rcv_wscale,
        sack: st.sack,
        timestamps: st.timestamps,
        ts_val: st.ts_val,
        ts_unix_ms: unix_ms(),
        snd_wnd: st.snd_wnd,
        rcv_wnd: st.rcv_wnd,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use holdfast_wire::{encode_keepalive, encode_route_refresh, Family, RouteRefresh};

    fn update(n: u8) -> Vec<u8> {
        let mut m = vec![0xff; 16];
        m.extend_from_slice(&[0, 23, msg_type::UPDATE, 0, 0, 0, n]);
        m
    }

    fn keepalive() -> Vec<u8> {
        let mut m = Vec::new();
        encode_keepalive(&mut m);
        m
    }

    #[test]
    fn scan_takes_updates_and_keepalives_up_to_an_unfinished_message() {
        let (u1, u2) = (update(1), update(2));
        let bytes = [u1.clone(), keepalive(), u2.clone(), u1[..7].to_vec()].concat();
        let scan = scan_messages(&bytes);
        assert_eq!(scan.whole, 23 + 19 + 23);
        assert_eq!(scan.updates, [u1, u2].concat());
        assert!(scan.clean);
        assert_eq!(
            scan_messages(&[]),
            Scan {
                whole: 0,
                updates: vec![],
                clean: true
            }
        );
    }

    #[test]
    fn scan_stops_before_any_other_message_or_a_bad_header() {
        let mut rr = Vec::new();
        let refresh = RouteRefresh {
            family: Family::IPV4_UNICAST,
            subtype: 0,
        };
        encode_route_refresh(&refresh, &mut rr);
        let u = update(1);
        let scan = scan_messages(&[u.clone(), rr, update(2)].concat());
        assert_eq!(
            (scan.whole, scan.updates, scan.clean),
            (23, u.clone(), false)
        );
        let mut bad = update(3);
        bad[0] = 0;
        let scan = scan_messages(&[u.clone(), bad].concat());
        assert_eq!((scan.whole, scan.clean), (23, false));
    }

    #[test]
    fn the_frontier_never_goes_back_and_skips_nothing_new() {
        let scan = |whole, updates: &[u8], clean| Scan {
            whole,
            updates: updates.to_vec(),
            clean,
        };
        // Two whole messages and 5 bytes of a third, from offset 100.
        assert_eq!(
            advance(100, &scan(42, b"u", true), 5, 100),
            Some((142, 147))
        );
        // Nothing arrived since: nothing to write.
        assert_eq!(advance(142, &scan(0, b"", true), 5, 147), None);
        // The third is whole now and is a ROUTE-REFRESH: its 5 bytes were
        // written, the framer's path writes the rest.
        assert_eq!(advance(142, &scan(0, b"", false), 0, 147), None);
        // More of it arrived.
        assert_eq!(advance(142, &scan(0, b"", true), 9, 147), Some((142, 151)));
        // KEEPALIVEs alone still move the ACK.
        assert_eq!(advance(151, &scan(19, b"", true), 0, 151), Some((170, 170)));
    }
}
