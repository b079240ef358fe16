//! The ACK gate's thread: outgoing TCP segments of BGP sessions pass
//! through an NFQUEUE served by a thread of the speaker, which keeps the
//! kernel from acknowledging received bytes before they are replicated
//! (TENSOR §3.1, TCPR §II-C).
//!
//! The gate is in four parts:
//!
//! | part | where | what |
//! |---|---|---|
//! | decisions | [`crate::gate`] | pure: hold, clamp, release, drop, synthesise (`Core::packet`, `Core::drain`) |
//! | netlink codec | `nfq/codec.rs` | pure: the NFQUEUE bind and verdict messages, parsing of queued packets |
//! | injector | `nfq/inject.rs` | `IPPROTO_RAW` sockets sending the synthesised ACKs |
//! | thread | this module | the netlink socket, the I/O loop (`run`) and the public handle [`AckGate`] |
//!
//! The speaker's calls ([`AckGate::register`], [`AckGate::confirm`], …)
//! take the core's lock, record the change and, when there is something to
//! do, wake the thread through an eventfd. The thread `poll`s the queue
//! socket and the eventfd; each round it lets the core turn queued work into
//! actions, carries them out (verdicts on held packets, injected ACKs), then
//! reads up to 256 datagrams of queued packets and issues each packet's
//! verdict after the actions the core asked for first.
//!
//! Standards: NFQUEUE over nfnetlink (`NETLINK_NETFILTER`,
//! `linux/netfilter/nfnetlink_queue.h`), TENSOR §3.1 and TCPR §II-C (the
//! gating itself is described in [`crate::gate`]).
//!
//! # Kernel side
//!
//! [`rules::install_gate`](crate::rules::install_gate) sends every outgoing
//! TCP packet to or from the BGP ports to queue `queue_num`. This module
//! binds the queue over a raw `NETLINK_NETFILTER` socket (the `nfq` crate
//! hides its descriptor, so it cannot be polled together with a wake-up
//! eventfd), asks for whole packets, sets `NFQA_CFG_F_GSO` and deliberately
//! leaves `NFQA_CFG_F_FAIL_OPEN` unset:
//!
//! - with `GSO` the kernel queues a large packet of a bulk transfer as one
//!   entry, as TCP built it, instead of cutting it into MSS-sized segments
//!   and completing their checksums first. Without it, every 64 KiB the
//!   speaker wrote to a peer came back as some 45 queued packets, each
//!   copied, judged, re-injected and received on its own. The price: a GSO
//!   packet cannot be rewritten (it is held instead of clamped, see
//!   [`crate::gate`]), and a clamped packet's checksum is computed in full
//!   when the kernel reports it partial (`NFQA_SKB_INFO`);
//! - without fail-open (and without `--queue-bypass` on the rule) the kernel
//!   drops packets when the queue is full or nobody is bound. When the
//!   speaker dies its netlink socket closes, the kernel drops every packet
//!   still queued and every new one: a dying primary's FIN or RST never
//!   reaches the peer.
//!
//! # Known issues
//!
//! - One thread serves the queue; every packet of the gated ports waits for
//!   it (and for the core's lock, shared with the speaker's calls).
//! - A verdict that cannot be sent after a few retries leaves its packet
//!   in the kernel queue until the queue goes away (fail closed); the
//!   error is kept for [`AckGate::error`].
//! - A datagram larger than the receive buffer (128 KiB) is dropped
//!   unread; its packet stays queued until the gate stops.
//! - Packets that arrive while the queue is being bound are accepted
//!   unexamined (nothing is registered yet).

pub use crate::gate::{ConnKey, GateMode, GateStats};
use crate::gate::{Core, Out, Verdict};
use crate::sockopt;
use inject::Injector;
use std::io;
use std::mem::size_of;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::Instant;

mod codec;
mod inject;

/// Receive buffer of the netlink socket.
const RCVBUF: libc::c_int = 8 << 20;
/// One queued packet (copy range at most 65531) plus its metadata.
const RECV_BUF: usize = 128 << 10;

fn cvt(rc: libc::c_int) -> io::Result<libc::c_int> {
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(rc)
    }
}

fn cvt_size(rc: isize) -> io::Result<usize> {
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(rc as usize)
    }
}

// ---------------------------------------------------------------------------
// The queue socket.

/// The netlink socket bound to one queue.
struct Nl {
    fd: OwnedFd,
    queue: u16,
    hdr: Vec<u8>,
}

impl Nl {
    /// Opens the socket in the calling thread's network namespace, binds the
    /// queue and configures it. Packets that arrive before the
    /// configuration is acknowledged are returned (to be accepted: nothing
    /// is registered yet).
    fn open(queue: u16) -> io::Result<(Nl, Vec<u32>)> {
        // SAFETY: plain socket(2) call; the result is checked.
        let raw = cvt(unsafe {
            libc::socket(
                libc::AF_NETLINK,
                libc::SOCK_RAW | libc::SOCK_CLOEXEC,
                libc::NETLINK_NETFILTER,
            )
        })?;
        // SAFETY: `raw` is a fresh descriptor that nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        // SAFETY: all-zero is a valid `sockaddr_nl` (port id 0: the kernel
        // picks one).
        let mut addr: libc::sockaddr_nl = unsafe { std::mem::zeroed() };
        addr.nl_family = libc::AF_NETLINK as libc::sa_family_t;
        // SAFETY: `addr` is a valid `sockaddr_nl` of the given length.
        cvt(unsafe {
            libc::bind(
                fd.as_raw_fd(),
                (&addr as *const libc::sockaddr_nl).cast(),
                size_of::<libc::sockaddr_nl>() as libc::socklen_t,
            )
        })?;
        let b = fd.as_fd();
        sockopt::set_int(b, libc::SOL_NETLINK, libc::NETLINK_NO_ENOBUFS, 1)?;
        if sockopt::set_int(b, libc::SOL_SOCKET, libc::SO_RCVBUFFORCE, RCVBUF).is_err() {
            sockopt::set_int(b, libc::SOL_SOCKET, libc::SO_RCVBUF, RCVBUF)?;
        }
        let mut nl = Nl {
            fd,
            queue,
            hdr: Vec::with_capacity(64),
        };
        let early = nl.configure()?;
        Ok((nl, early))
    }

    fn configure(&mut self) -> io::Result<Vec<u32>> {
        const SEQ: u32 = 1;
        let m = codec::bind_message(self.queue, SEQ);
        self.send(&[&m])?;
        let mut early = Vec::new();
        let mut buf = vec![0u8; RECV_BUF];
        let mut msgs = Vec::new();
        loop {
            let n = self.recv(&mut buf, false)?.unwrap_or(0);
            msgs.clear();
            codec::parse_nl(&buf[..n], &mut msgs);
            for msg in msgs.drain(..) {
                match msg {
                    codec::NlMsg::Error { seq: SEQ, errno: 0 } => return Ok(early),
                    codec::NlMsg::Error { seq: SEQ, errno } => {
                        let e = io::Error::from_raw_os_error(errno);
                        return Err(io::Error::new(
                            e.kind(),
                            format!("binding NFQUEUE {}: {e}", self.queue),
                        ));
                    }
                    codec::NlMsg::Packet { id, .. } => early.push(id),
                    _ => {}
                }
            }
        }
    }

    fn send(&self, parts: &[&[u8]]) -> io::Result<()> {
        let mut iov: [libc::iovec; 3] = [libc::iovec {
            iov_base: std::ptr::null_mut(),
            iov_len: 0,
        }; 3];
        let n = parts.len().min(3);
        for (v, p) in iov.iter_mut().zip(parts) {
            v.iov_base = p.as_ptr() as *mut libc::c_void;
            v.iov_len = p.len();
        }
        // SAFETY: all-zero is a valid `msghdr` (no name: the kernel is the
        // default destination of a netlink socket; no control data).
        let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
        msg.msg_iov = iov.as_mut_ptr();
        msg.msg_iovlen = n as _;
        loop {
            // SAFETY: `msg` points to `n` iovecs describing live slices that
            // the kernel only reads during the call.
            let rc = unsafe { libc::sendmsg(self.fd.as_raw_fd(), &msg, 0) };
            match cvt_size(rc) {
                Ok(_) => return Ok(()),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
        }
    }

    /// Reads one datagram; `Ok(None)` when nothing is waiting (non-blocking
    /// mode) or the datagram was larger than `buf` (dropped).
    fn recv(&self, buf: &mut [u8], nonblocking: bool) -> io::Result<Option<usize>> {
        let flags = libc::MSG_TRUNC | if nonblocking { libc::MSG_DONTWAIT } else { 0 };
        loop {
            // SAFETY: `buf` is writable for `buf.len()` bytes.
            let rc = unsafe {
                libc::recv(
                    self.fd.as_raw_fd(),
                    buf.as_mut_ptr().cast(),
                    buf.len(),
                    flags,
                )
            };
            match cvt_size(rc) {
                Ok(n) if n > buf.len() => return Ok(Some(0)),
                Ok(n) => return Ok(Some(n)),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(None),
                Err(e) if e.raw_os_error() == Some(libc::ENOBUFS) => continue,
                Err(e) => return Err(e),
            }
        }
    }

    /// Issues a verdict, retrying briefly on transient memory shortage. A
    /// verdict that cannot be sent leaves the packet queued (it is dropped
    /// when the queue goes away): the gate fails closed.
    fn verdict(&mut self, id: u32, verdict: u32, payload: Option<&[u8]>) -> io::Result<()> {
        let mut tries = 0;
        loop {
            match self.verdict_once(id, verdict, payload) {
                Err(e)
                    if tries < 5
                        && matches!(
                            e.raw_os_error(),
                            Some(libc::ENOBUFS | libc::ENOMEM | libc::EAGAIN)
                        ) =>
                {
                    tries += 1;
                    std::thread::sleep(std::time::Duration::from_micros(100 << tries));
                }
                r => return r,
            }
        }
    }

    fn verdict_once(&mut self, id: u32, verdict: u32, payload: Option<&[u8]>) -> io::Result<()> {
        let mut hdr = std::mem::take(&mut self.hdr);
        let pad =
            codec::verdict_message(&mut hdr, self.queue, id, verdict, payload.map(<[u8]>::len));
        let r = match payload {
            None => self.send(&[&hdr]),
            Some(p) => self.send(&[&hdr, p, &[0u8; 3][..pad]]),
        };
        self.hdr = hdr;
        r
    }
}

// ---------------------------------------------------------------------------
// Thread and public handle.

struct Shared {
    core: Mutex<Core>,
    wake: OwnedFd,
    stop: AtomicBool,
    running: AtomicBool,
    error: Mutex<Option<String>>,
}

impl Shared {
    fn core(&self) -> MutexGuard<'_, Core> {
        // A panic while holding the lock leaves consistent-enough state for
        // counters; keep serving rather than cascading the panic.
        self.core.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Records a non-fatal error (the latest one is kept).
    fn note(&self, r: io::Result<()>) {
        if let Err(e) = r {
            *self.error.lock().unwrap_or_else(|p| p.into_inner()) = Some(format!("verdict: {e}"));
        }
    }

    fn wake(&self) {
        let one = 1u64.to_ne_bytes();
        // SAFETY: writes 8 bytes from a live buffer to our eventfd. A full
        // counter (EAGAIN) already means "wake up", so errors are ignored.
        let _ = unsafe { libc::write(self.wake.as_raw_fd(), one.as_ptr().cast(), 8) };
    }
}

/// The ACK gate. See the module documentation.
pub struct AckGate {
    shared: Arc<Shared>,
    thread: Mutex<Option<JoinHandle<()>>>,
    queue_num: u16,
}

impl std::fmt::Debug for AckGate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AckGate")
            .field("queue_num", &self.queue_num)
            .field("mode", &self.mode())
            .finish()
    }
}

impl AckGate {
    /// Binds NFQUEUE `queue_num` (in the calling thread's network namespace)
    /// and starts the gate thread ("ack-gate"). Mode starts `Protected`.
    ///
    /// Fails if the queue is bound by another socket (another speaker).
    pub fn start(queue_num: u16) -> io::Result<Arc<AckGate>> {
        let (mut nl, early) = Nl::open(queue_num)?;
        for id in early {
            nl.verdict(id, codec::NF_ACCEPT, None)?;
        }
        // SAFETY: plain eventfd(2) call; the result is checked.
        let efd = cvt(unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) })?;
        // SAFETY: a fresh descriptor that nothing else owns.
        let wake = unsafe { OwnedFd::from_raw_fd(efd) };
        let injector = Injector::open();
        let shared = Arc::new(Shared {
            core: Mutex::new(Core::new(injector.usable())),
            wake,
            stop: AtomicBool::new(false),
            running: AtomicBool::new(true),
            error: Mutex::new(None),
        });
        let s2 = Arc::clone(&shared);
        // Hang detection: the gate reports each round's progress.
        let stamp = crate::progress::global().register("ack-gate", GATE_BUDGET);
        let thread = std::thread::Builder::new()
            .name("ack-gate".into())
            .spawn(move || {
                if let Err(e) = run(&s2, nl, injector, &stamp) {
                    *s2.error.lock().unwrap_or_else(|p| p.into_inner()) = Some(e.to_string());
                }
                s2.running.store(false, Ordering::SeqCst);
            })?;
        Ok(Arc::new(AckGate {
            shared,
            thread: Mutex::new(Some(thread)),
            queue_num,
        }))
    }

    /// Gate this connection from now on. `confirmed` = highest ACK number
    /// that may leave now; `rcv_wscale` = our receive window scale (to widen
    /// the window field when clamping). Registering a registered connection
    /// updates its window scale and raises (never lowers) `confirmed`.
    pub fn register(&self, key: ConnKey, confirmed: u32, rcv_wscale: u8) {
        if self
            .shared
            .core()
            .register(key.normalised(), confirmed, rcv_wscale)
        {
            self.shared.wake();
        }
    }

    /// Stop gating: its packets pass untouched (used before a deliberate
    /// close, TCPR's `done_writing`). Packets still held are released, and
    /// the peer is told the kernel's latest ACK.
    pub fn unregister(&self, key: &ConnKey) {
        if self.shared.core().unregister(&key.normalised()) {
            self.shared.wake();
        }
    }

    /// Bytes before sequence `ack` are replicated: held packets whose ACK is
    /// now covered are released (in order). Sequence arithmetic is mod 2^32;
    /// a value not after the current one is ignored.
    pub fn confirm(&self, key: &ConnKey, ack: u32) {
        if self.shared.core().confirm(&key.normalised(), ack) {
            self.shared.wake();
        }
    }

    /// Injects a window probe on this connection: a pure ACK with sequence
    /// number `seq` (chosen before what the peer has received, so that it
    /// answers with an ACK), acknowledging only what the peer knows. After
    /// a takeover the restored socket's own probe may go unanswered (its
    /// answer lost); this repeats it without toggling repair mode on a live
    /// socket. Nothing happens on a connection that is not gated, before
    /// any of its packets left, or without raw sockets.
    pub fn probe(&self, key: &ConnKey, seq: u32) {
        if self.shared.core().probe(&key.normalised(), seq) {
            self.shared.wake();
        }
    }

    /// What the gate knows of this connection, if it is registered.
    pub fn view(&self, key: &ConnKey) -> Option<crate::gate::ConnView> {
        self.shared.core().view(&key.normalised())
    }

    /// Leaving [`GateMode::DropAll`], the packets the kernel queued
    /// before this call are still dropped, even those the gate thread has
    /// not read yet (their ids, up to the queue's `id_sequence` in
    /// /proc/net/netfilter/nfnetlink_queue, read here).
    pub fn set_mode(&self, mode: GateMode) {
        let through = (self.mode() == GateMode::DropAll && mode != GateMode::DropAll)
            .then(|| queued_through(self.queue_num))
            .flatten();
        if self.shared.core().set_mode_after(mode, through) {
            self.shared.wake();
        }
    }

    pub fn mode(&self) -> GateMode {
        self.shared.core().mode()
    }

    pub fn stats(&self) -> GateStats {
        self.shared.core().snapshot()
    }

    /// The queue number this gate serves.
    pub fn queue_num(&self) -> u16 {
        self.queue_num
    }

    /// Whether the gate thread is still serving the queue. If it stopped on
    /// an error ([`AckGate::error`]), its queue socket is closed and the
    /// kernel drops every matching packet (fail closed, like a crash): the
    /// speaker should treat that as fatal.
    pub fn is_running(&self) -> bool {
        self.shared.running.load(Ordering::SeqCst)
    }

    /// The error the gate thread stopped on, or else the latest verdict
    /// that could not be sent, if any.
    pub fn error(&self) -> Option<String> {
        self.shared
            .error
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
}

impl Drop for AckGate {
    /// Stops the thread and closes the queue socket: the kernel then drops
    /// every packet still queued and every new one that matches the rules
    /// (like a crash). For an orderly shutdown, switch to `Bypass` and
    /// remove the rules first.
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        self.shared.wake();
        let handle = self.thread.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(h) = handle {
            let _ = h.join();
        }
    }
}

/// Carries out `out` in order. A verdict that cannot be sent is recorded
/// and skipped (its packet stays queued: fail closed); a lost synthesised
/// ACK is recovered like any lost ACK.
fn execute(shared: &Shared, nl: &mut Nl, inj: &Injector, out: &mut Vec<Out>) {
    for o in out.drain(..) {
        match o {
            Out::Accept(id) => shared.note(nl.verdict(id, codec::NF_ACCEPT, None)),
            Out::Drop(id) => shared.note(nl.verdict(id, codec::NF_DROP, None)),
            Out::Inject { pkt, dst, oif } => {
                let _ = inj.send(&pkt, dst, oif);
            }
        }
    }
}

/// How long one round of the gate thread may take before the process's
/// watchdog counts it stuck ([`crate::progress`]).
const GATE_BUDGET: std::time::Duration = std::time::Duration::from_secs(2);

fn run(
    shared: &Shared,
    mut nl: Nl,
    inj: Injector,
    stamp: &crate::progress::Stamp,
) -> io::Result<()> {
    let mut buf = vec![0u8; RECV_BUF];
    let mut msgs = Vec::new();
    let mut out = Vec::new();
    let mut pfd = [
        libc::pollfd {
            fd: nl.fd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        },
        libc::pollfd {
            fd: shared.wake.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        },
    ];
    loop {
        stamp.idle();
        // SAFETY: `pfd` is a live array of two pollfds.
        let rc = unsafe { libc::poll(pfd.as_mut_ptr(), 2, -1) };
        stamp.busy();
        if rc < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        if shared.stop.load(Ordering::SeqCst) {
            return Ok(());
        }
        if pfd[1].revents != 0 {
            let mut v = [0u8; 8];
            // SAFETY: reads at most 8 bytes into a live buffer; the eventfd
            // is non-blocking, so EAGAIN just means it was already reset.
            let _ = unsafe { libc::read(shared.wake.as_raw_fd(), v.as_mut_ptr().cast(), 8) };
        }
        shared.core().drain(Instant::now(), &mut out);
        execute(shared, &mut nl, &inj, &mut out);
        // Up to 256 datagrams per round, so a flood cannot starve confirms.
        for _ in 0..256 {
            let Some(n) = nl.recv(&mut buf, true)? else {
                break;
            };
            msgs.clear();
            codec::parse_nl(&buf[..n], &mut msgs);
            for msg in msgs.drain(..) {
                let codec::NlMsg::Packet {
                    id,
                    payload,
                    oif,
                    skb,
                } = msg
                else {
                    continue;
                };
                let pkt = &mut buf[payload];
                let v = {
                    let mut core = shared.core();
                    core.drain(Instant::now(), &mut out);
                    core.packet(id, pkt, oif, skb, Instant::now(), &mut out)
                };
                execute(shared, &mut nl, &inj, &mut out);
                let r = match v {
                    Verdict::Accept => nl.verdict(id, codec::NF_ACCEPT, None),
                    Verdict::AcceptModified => nl.verdict(id, codec::NF_ACCEPT, Some(pkt)),
                    Verdict::Drop => nl.verdict(id, codec::NF_DROP, None),
                    Verdict::Hold => Ok(()),
                };
                shared.note(r);
            }
        }
    }
}

/// The id of the last packet the kernel queued on `queue_num` in this
/// network namespace (`id_sequence`, the eighth field of the queue's line
/// in /proc/net/netfilter/nfnetlink_queue); `None` if it cannot be read.
fn queued_through(queue_num: u16) -> Option<u32> {
    let text = std::fs::read_to_string("/proc/net/netfilter/nfnetlink_queue").ok()?;
    id_sequence(&text, queue_num)
}

/// [`queued_through`]'s parser.
fn id_sequence(text: &str, queue_num: u16) -> Option<u32> {
    text.lines().find_map(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        (f.first()?.parse::<u16>().ok()? == queue_num).then(|| f.get(7)?.parse().ok())?
    })
}

/// Reads the next expected receive sequence number (`rcv_nxt`) of a TCP
/// socket by briefly entering `TCP_REPAIR` (needs `CAP_NET_ADMIN`) and
/// leaving it without a window probe. Meant for a quiescent socket right
/// after the handshake, to register it with `confirmed = rcv_nxt`; the
/// speaker's repair-based connection capture gives the same value.
pub fn read_rcv_nxt(fd: BorrowedFd<'_>) -> io::Result<u32> {
    const TCP_NO_QUEUE: libc::c_int = 0;
    const TCP_RECV_QUEUE: libc::c_int = 1;
    const TCP_REPAIR_OFF_NO_WP: libc::c_int = -1;
    // Leaving repair mode resets `sk_reuse`; keep SO_REUSEADDR as it was.
    let reuse = sockopt::get_int(fd, libc::SOL_SOCKET, libc::SO_REUSEADDR)?;
    sockopt::set_int(fd, libc::IPPROTO_TCP, libc::TCP_REPAIR, 1)?;
    let r = sockopt::set_int(
        fd,
        libc::IPPROTO_TCP,
        libc::TCP_REPAIR_QUEUE,
        TCP_RECV_QUEUE,
    )
    .and_then(|_| sockopt::get_int(fd, libc::IPPROTO_TCP, libc::TCP_QUEUE_SEQ));
    let _ = sockopt::set_int(fd, libc::IPPROTO_TCP, libc::TCP_REPAIR_QUEUE, TCP_NO_QUEUE);
    if sockopt::set_int(
        fd,
        libc::IPPROTO_TCP,
        libc::TCP_REPAIR,
        TCP_REPAIR_OFF_NO_WP,
    )
    .is_err()
    {
        sockopt::set_int(fd, libc::IPPROTO_TCP, libc::TCP_REPAIR, 0)?;
    }
    if reuse != 0 {
        sockopt::set_int(fd, libc::SOL_SOCKET, libc::SO_REUSEADDR, 1)?;
    }
    r.map(|v| v as u32)
}

#[cfg(test)]
mod tests;
