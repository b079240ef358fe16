//! TCP connection repair for non-stop routing: capture the state of an
//! established connection, close a socket without telling the peer, and
//! rebuild the connection at the same sequence numbers in a new socket, the
//! way CRIU's libsoccr does.
//!
//! | step | Linux API |
//! |---|---|
//! | repair mode on / off | `setsockopt(IPPROTO_TCP, TCP_REPAIR, 1 / 0 / -1)` (`TCP_REPAIR_ON`, `TCP_REPAIR_OFF`, `TCP_REPAIR_OFF_NO_WP`) |
//! | sequence numbers | `TCP_REPAIR_QUEUE` (`TCP_SEND_QUEUE` / `TCP_RECV_QUEUE`) then get/set `TCP_QUEUE_SEQ` |
//! | queue lengths | `ioctl(SIOCOUTQ)` (= `TIOCOUTQ`), `ioctl(SIOCINQ)` (= `FIONREAD`) |
//! | negotiated options | `TCP_INFO` (`tcpi_options`, window scales), `TCP_MAXSEG` (the MSS clamp while in repair mode) |
//! | options on restore | `setsockopt(TCP_REPAIR_OPTIONS, struct tcp_repair_opt[])` with `TCPOPT_MAXSEG`, `TCPOPT_WINDOW`, `TCPOPT_SACK_PERM`, `TCPOPT_TIMESTAMP` |
//! | windows | get/set `TCP_REPAIR_WINDOW` (`struct tcp_repair_window`, Linux 4.8) |
//! | timestamp clock | get/set `TCP_TIMESTAMP` |
//! | sent-but-unacknowledged data | `send(2)` while `TCP_REPAIR_QUEUE` = `TCP_SEND_QUEUE`: queued as already sent, nothing goes on the wire |
//! | silent establishment | `connect(2)` in repair mode: straight to `ESTABLISHED`, no SYN |
//! | silent close | `close(2)` in repair mode: no FIN, no RST |
//!
//! Every call needs `CAP_NET_ADMIN` in the socket's network namespace.
//!
//! How the speaker uses it: [`capture`] the live socket whenever it needs a
//! fresh snapshot (it does not disturb the connection); on take-over, stop
//! the peer's segments from reaching a socket-less port (otherwise the
//! kernel answers them with a RST), [`close_silently`] the old socket if it
//! still exists, and [`restore`] at the replicated sequence numbers; then
//! let the peer's segments through again at once, and send something (a
//! KEEPALIVE) with `TCP_NODELAY` set.
//!
//! What the `repair` tests measured on loopback: a restore takes 16-17 µs
//! when repeated back to back, 90-140 µs as a one-off with cold caches, and
//! 0.6-0.9 ms with 4 MB to queue; bytes the peer sent while the connection had no socket arrive
//! when the peer's retransmission timer fires (about 150-200 ms later on a
//! Linux peer, more if it had already backed off).
//!
//! Known issues:
//! - Data the old socket received and acknowledged but the application did
//!   not consume is lost for good: the peer will never retransmit it, and a
//!   restored `rcv_nxt` below what was acknowledged stalls the connection.
//!   `Restore::rcv_nxt` must cover exactly the bytes the application
//!   consumed, and the old socket must not acknowledge anything beyond.
//! - The restored send queue counts as sent at restore time. Whatever of it
//!   the peer already has is acknowledged by the ACK that answers the
//!   window probe. What the peer never got is resent only by the tail-loss
//!   probe or retransmission timer of a socket with no RTT sample (about
//!   1 s), unless new data follows at once: with `TCP_NODELAY` (Nagle would
//!   hold a small write behind the unacknowledged queue) the peer SACKs the
//!   hole and the lost bytes are resent within a round trip.
//! - If the ACK answering the window probe is dropped (the take-over filter
//!   still in place), the first ACK comes only after that 1 s timer, and
//!   the RTT samples it yields, measured from the restore, inflate the
//!   retransmission timeout: 4 MB of mostly unsent queue then took 10-20 s
//!   to drain instead of 0.3 s.
//! - `TCPOPT_MAXSEG` only sets the MSS clamp; the segment size in use is
//!   fixed at `connect` (536 by default in repair mode), so [`restore`] also
//!   sets `TCP_MAXSEG` before `connect`, capped at Linux's 32767.
//! - A send queue larger than the new socket's send buffer would block
//!   `send(2)` forever in repair mode; [`restore`] then enlarges the buffer
//!   with `SO_SNDBUFFORCE`, which pins its size (no autotuning) for the life
//!   of the connection.
//! - Leaving repair mode resets `SO_REUSEADDR` (the kernel sets
//!   `sk_reuse = SK_NO_REUSE`); [`capture`] sets it again if it was on.
//! - Since Linux 6.7 the low bit of `TCP_TIMESTAMP` selects microsecond
//!   timestamps (`tcp_usec_ts`); [`restore`] keeps the captured low bit
//!   (rounding `ts_val` up by one if needed) so the clock does not change
//!   unit. [`TcpRepairState::ts_val_after`] advances a captured value
//!   correctly in both units.
//! - Half-closed connections (FIN sent or received) and connections in
//!   `SYN_SENT` are not captured; [`capture`] requires `ESTABLISHED`.
//! - Linux refuses `TCP_REPAIR` on sockets that are neither `ESTABLISHED`
//!   nor `CLOSE` (`EPERM`): [`close_silently`] on a socket the peer already
//!   closed fails, and the caller just closes it.

use crate::sockopt;
use socket2::{Domain, Protocol, SockAddr, SockRef, Socket, Type};
use std::io;
use std::net::{IpAddr, SocketAddr, SocketAddrV4, SocketAddrV6, TcpStream};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd};
use std::time::Duration;

// Values from <linux/tcp.h> that libc does not define.
/// `TCP_REPAIR_ON`.
const TCP_REPAIR_ON: libc::c_int = 1;
/// `TCP_REPAIR_OFF`: leave repair mode and send a window probe.
const TCP_REPAIR_OFF: libc::c_int = 0;
/// `TCP_REPAIR_OFF_NO_WP`: leave repair mode without a window probe.
const TCP_REPAIR_OFF_NO_WP: libc::c_int = -1;
/// `TCP_RECV_QUEUE` (`TCP_NO_QUEUE` = 0, `TCP_RECV_QUEUE` = 1, `TCP_SEND_QUEUE` = 2).
const TCP_RECV_QUEUE: libc::c_int = 1;
/// `TCP_SEND_QUEUE`.
const TCP_SEND_QUEUE: libc::c_int = 2;
/// `TCPI_OPT_TIMESTAMPS`.
const TCPI_OPT_TIMESTAMPS: u8 = 1;
/// `TCPI_OPT_SACK`.
const TCPI_OPT_SACK: u8 = 2;
/// `TCPI_OPT_WSCALE`.
const TCPI_OPT_WSCALE: u8 = 4;
/// `MAX_TCP_WINDOW` (<net/tcp.h>): the largest `TCP_MAXSEG` Linux accepts.
const MAX_TCP_WINDOW: u16 = 32767;
/// `TCP_ESTABLISHED` (`enum` in <net/tcp_states.h>).
const TCP_ESTABLISHED: u8 = 1;

// TCP option kinds accepted by `TCP_REPAIR_OPTIONS` (RFC 793, 7323, 2018;
// `TCPOPT_*` in <netinet/tcp.h> and the kernel's <net/tcp.h>, not in libc).
const TCPOPT_MAXSEG: u32 = 2;
const TCPOPT_WINDOW: u32 = 3;
const TCPOPT_SACK_PERM: u32 = 4;
const TCPOPT_TIMESTAMP: u32 = 8;

/// `struct tcp_repair_window` from <linux/tcp.h>.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
struct TcpRepairWindow {
    snd_wl1: u32,
    snd_wnd: u32,
    max_window: u32,
    rcv_wnd: u32,
    rcv_wup: u32,
}

// SAFETY: `#[repr(C)]` struct of `u32` fields only.
unsafe impl sockopt::Pod for TcpRepairWindow {}

/// Parameters of an established TCP connection captured from the live socket.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TcpRepairState {
    pub local: SocketAddr,
    pub remote: SocketAddr,
    /// Sequence number of the next byte the application will write
    /// (`write_seq`: `TCP_QUEUE_SEQ` of the send queue).
    pub snd_seq: u32,
    /// Sequence number of the next byte the application will read
    /// (`copied_seq` = `rcv_nxt` - `SIOCINQ`, read consistently).
    pub rcv_seq: u32,
    /// Bytes written but not yet acknowledged by the peer (`SIOCOUTQ`) at
    /// capture; includes bytes not yet sent.
    pub outq: u32,
    /// The MSS clamp (what the peer announced): `TCP_MAXSEG` read in repair
    /// mode.
    pub mss: u16,
    /// Window scale shifts from `TCP_INFO` (0 when scaling is off).
    pub snd_wscale: u8,
    pub rcv_wscale: u8,
    /// `tcpi_options & TCPI_OPT_SACK`.
    pub sack: bool,
    /// `tcpi_options & TCPI_OPT_TIMESTAMPS`.
    pub timestamps: bool,
    /// `TCP_TIMESTAMP` value at capture (ms clock incl. the socket's offset;
    /// on Linux >= 6.7 an odd value means a microsecond clock).
    pub ts_val: u32,
    /// From `TCP_REPAIR_WINDOW`: the peer's window and ours, in bytes.
    pub snd_wnd: u32,
    pub rcv_wnd: u32,
}

impl TcpRepairState {
    /// The `TCP_TIMESTAMP` value to restore after `elapsed` has passed since
    /// capture: `ts_val` advanced by elapsed milliseconds, or microseconds if
    /// the captured clock is the microsecond one (odd value, Linux >= 6.7),
    /// keeping the low bit that selects the unit.
    pub fn ts_val_after(&self, elapsed: Duration) -> u32 {
        if self.ts_val & 1 == 0 {
            let ms = elapsed.as_millis() as u32;
            self.ts_val.wrapping_add(ms).wrapping_add(ms & 1)
        } else {
            let us = elapsed.as_micros() as u32;
            self.ts_val.wrapping_add(us & !1)
        }
    }
}

/// `ioctl(fd, req, &mut int)` for the socket queue-length requests.
fn ioctl_len(fd: BorrowedFd<'_>, req: libc::Ioctl) -> io::Result<u32> {
    let mut val: libc::c_int = 0;
    // SAFETY: `fd` is live for the borrow; `SIOCINQ`/`SIOCOUTQ` write one
    // `int` through the pointer, which is valid and writable.
    let rc = unsafe { libc::ioctl(fd.as_raw_fd(), req, &mut val as *mut libc::c_int) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(val as u32)
}

/// `SIOCOUTQ`: bytes in the send queue not yet acknowledged (including bytes
/// not yet sent).
pub fn outq(fd: BorrowedFd<'_>) -> io::Result<u32> {
    // SIOCOUTQ is TIOCOUTQ (<linux/sockios.h>).
    ioctl_len(fd, libc::TIOCOUTQ)
}

/// `SIOCINQ`: bytes received and not yet read.
pub fn inq(fd: BorrowedFd<'_>) -> io::Result<u32> {
    // SIOCINQ is FIONREAD (<linux/sockios.h>).
    ioctl_len(fd, libc::FIONREAD)
}

fn set_repair(fd: BorrowedFd<'_>, mode: libc::c_int) -> io::Result<()> {
    sockopt::set_int(fd, libc::IPPROTO_TCP, libc::TCP_REPAIR, mode)
}

fn queue_seq(fd: BorrowedFd<'_>, queue: libc::c_int) -> io::Result<u32> {
    sockopt::set_int(fd, libc::IPPROTO_TCP, libc::TCP_REPAIR_QUEUE, queue)?;
    sockopt::get_int(fd, libc::IPPROTO_TCP, libc::TCP_QUEUE_SEQ).map(|v| v as u32)
}

fn set_queue_seq(fd: BorrowedFd<'_>, queue: libc::c_int, seq: u32) -> io::Result<()> {
    sockopt::set_int(fd, libc::IPPROTO_TCP, libc::TCP_REPAIR_QUEUE, queue)?;
    sockopt::set_int(
        fd,
        libc::IPPROTO_TCP,
        libc::TCP_QUEUE_SEQ,
        seq as libc::c_int,
    )
}

fn sock_addr(sa: SockAddr, what: &str) -> io::Result<SocketAddr> {
    sa.as_socket().ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{what} is not an IP address"),
        )
    })
}

/// Captures the state of an established socket. Enters repair mode briefly
/// and leaves it with `TCP_REPAIR_OFF_NO_WP` (no window probe), so the live
/// connection is undisturbed. `rcv_seq` is read consistently: `SIOCINQ`,
/// `TCP_QUEUE_SEQ` of the receive queue, `SIOCINQ` again, retried until the
/// two `SIOCINQ` values agree.
///
/// Must not race with reads or writes on the same socket (a `send` during
/// the capture fails with `EINVAL`).
pub fn capture(fd: BorrowedFd<'_>) -> io::Result<TcpRepairState> {
    let sock = SockRef::from(&fd);
    let local = sock_addr(sock.local_addr()?, "local address")?;
    let remote = sock_addr(sock.peer_addr()?, "peer address")?;
    let info = crate::info::tcp_info(fd)?;
    if info.state != TCP_ESTABLISHED {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("TCP state {} is not ESTABLISHED", info.state),
        ));
    }
    let reuse = sockopt::get_int(fd, libc::SOL_SOCKET, libc::SO_REUSEADDR)?;
    set_repair(fd, TCP_REPAIR_ON)?;
    let captured = capture_in_repair(fd, &info, local, remote);
    let off = set_repair(fd, TCP_REPAIR_OFF_NO_WP);
    let reuse = if reuse != 0 {
        sockopt::set_int(fd, libc::SOL_SOCKET, libc::SO_REUSEADDR, 1)
    } else {
        Ok(())
    };
    let st = captured?;
    off?;
    reuse?;
    Ok(st)
}

fn capture_in_repair(
    fd: BorrowedFd<'_>,
    info: &crate::info::TcpInfoLite,
    local: SocketAddr,
    remote: SocketAddr,
) -> io::Result<TcpRepairState> {
    let snd_seq = queue_seq(fd, TCP_SEND_QUEUE)?;
    let outq = outq(fd)?;
    let mut rcv_seq = None;
    for _ in 0..1000 {
        let before = inq(fd)?;
        let rcv_nxt = queue_seq(fd, TCP_RECV_QUEUE)?;
        if inq(fd)? == before {
            rcv_seq = Some(rcv_nxt.wrapping_sub(before));
            break;
        }
    }
    let rcv_seq = rcv_seq.ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::WouldBlock,
            "receive queue kept changing during capture",
        )
    })?;
    // In repair mode TCP_MAXSEG reports rx_opt.mss_clamp, which is what
    // TCPOPT_MAXSEG restores (libsoccr does the same).
    let mss = sockopt::get_int(fd, libc::IPPROTO_TCP, libc::TCP_MAXSEG)?;
    let mss = u16::try_from(mss).unwrap_or(info.snd_mss.min(u16::MAX.into()) as u16);
    let timestamps = info.options & TCPI_OPT_TIMESTAMPS != 0;
    let ts_val = if timestamps {
        sockopt::get_int(fd, libc::IPPROTO_TCP, libc::TCP_TIMESTAMP)? as u32
    } else {
        0
    };
    let (win, _) = sockopt::get::<TcpRepairWindow>(fd, libc::IPPROTO_TCP, libc::TCP_REPAIR_WINDOW)?;
    let (snd_wscale, rcv_wscale) = if info.options & TCPI_OPT_WSCALE != 0 {
        (info.snd_wscale, info.rcv_wscale)
    } else {
        (0, 0)
    };
    Ok(TcpRepairState {
        local,
        remote,
        snd_seq,
        rcv_seq,
        outq,
        mss,
        snd_wscale,
        rcv_wscale,
        sack: info.options & TCPI_OPT_SACK != 0,
        timestamps,
        ts_val,
        snd_wnd: win.snd_wnd,
        rcv_wnd: win.rcv_wnd,
    })
}

/// Puts the socket in repair mode so that closing it sends nothing (no FIN,
/// no RST). Close (drop) it right afterwards: until then it still receives
/// and acknowledges segments (so does a socket during [`capture`]), and
/// what it acknowledged is lost with it.
pub fn close_silently(fd: BorrowedFd<'_>) -> io::Result<()> {
    set_repair(fd, TCP_REPAIR_ON)
}

/// Sends a window probe on a live connection (repair mode on, then off
/// with `TCP_REPAIR_OFF`): the peer answers with an ACK carrying its current
/// window and acknowledgement. After a takeover the probe [`restore`] sent
/// may have been dropped by the guard; this one, sent once the guard is
/// gone, gets the connection moving at once instead of after a
/// retransmission timeout.
pub fn window_probe(fd: BorrowedFd<'_>) -> io::Result<()> {
    set_repair(fd, TCP_REPAIR_ON)?;
    set_repair(fd, TCP_REPAIR_OFF)
}

/// What [`restore`] rebuilds. (No `Debug`: it holds the MD5 key.)
#[derive(Clone, Copy)]
pub struct Restore<'a> {
    /// `local`/`remote`, `mss`, window scales, `sack`, `timestamps`,
    /// `snd_wnd` and `rcv_wnd` are used from here.
    pub state: &'a TcpRepairState,
    /// Sequence number of the first byte of `send_queue` (everything before
    /// it is acknowledged).
    pub snd_una: u32,
    /// Bytes the peer may not have acknowledged; restored as already-sent
    /// data (libsoccr: the sent-but-unacknowledged part is restored in repair
    /// mode).
    pub send_queue: &'a [u8],
    /// Next sequence number expected from the peer (restored `rcv_nxt`; the
    /// receive queue is empty).
    pub rcv_nxt: u32,
    /// `TCP_TIMESTAMP` value to set (the caller adds the elapsed wall time to
    /// the captured `ts_val`; see [`TcpRepairState::ts_val_after`]).
    pub ts_val: u32,
    /// RFC 2385 key, set before connect.
    pub md5_key: Option<&'a [u8]>,
    /// `SO_BINDTODEVICE`, if any.
    pub bind_device: Option<&'a str>,
}

/// Brings `local` and `remote` to one address family: an IPv6 socket when
/// `local` is IPv6 (IPv4 peers become v4-mapped), an IPv4 one otherwise
/// (a v4-mapped peer becomes plain IPv4).
fn family_pair(local: SocketAddr, remote: SocketAddr) -> io::Result<(SocketAddr, SocketAddr)> {
    let mismatch = || {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            "IPv4 local address with an IPv6 peer",
        )
    };
    match (local, remote) {
        (SocketAddr::V6(_), SocketAddr::V4(r)) => Ok((
            local,
            SocketAddr::V6(SocketAddrV6::new(r.ip().to_ipv6_mapped(), r.port(), 0, 0)),
        )),
        (SocketAddr::V4(_), SocketAddr::V6(r)) => match r.ip().to_ipv4_mapped() {
            Some(v4) => Ok((local, SocketAddr::V4(SocketAddrV4::new(v4, r.port())))),
            None => Err(mismatch()),
        },
        _ => Ok((local, remote)),
    }
}

fn is_v4_mapped(addr: &SocketAddr) -> bool {
    match addr.ip() {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().is_some(),
        IpAddr::V4(_) => false,
    }
}

/// `struct tcp_repair_opt { __u32 opt_code; __u32 opt_val; }` array, as bytes.
fn repair_options(st: &TcpRepairState) -> Vec<u8> {
    let mut opts: Vec<(u32, u32)> = vec![(TCPOPT_MAXSEG, st.mss.into())];
    // Always sent, even as 0/0: the new socket picked its own receive scale
    // at connect, which would be wrong for a connection without scaling.
    opts.push((
        TCPOPT_WINDOW,
        u32::from(st.snd_wscale) | u32::from(st.rcv_wscale) << 16,
    ));
    if st.sack {
        opts.push((TCPOPT_SACK_PERM, 0));
    }
    if st.timestamps {
        opts.push((TCPOPT_TIMESTAMP, 0));
    }
    opts.iter()
        .flat_map(|(code, val)| code.to_ne_bytes().into_iter().chain(val.to_ne_bytes()))
        .collect()
}

/// Rebuilds the connection in a new socket: `socket()`; `SO_REUSEADDR`;
/// `TCP_REPAIR` on; MD5 key; device; `bind(local)`; send queue
/// `TCP_QUEUE_SEQ` = `snd_una` − 1; receive queue `TCP_QUEUE_SEQ` = `rcv_nxt`;
/// `TCP_MAXSEG`; `connect(remote)` (in repair mode this goes straight to
/// `ESTABLISHED`, no SYN); `TCP_TIMESTAMP` (only with timestamps; after
/// `connect`, as libsoccr does); `TCP_REPAIR_OPTIONS`;
/// `TCP_REPAIR_WINDOW`; one acknowledged byte and `send_queue` written as
/// already-sent data (see `write_sent_queue`);
/// `TCP_REPAIR_OFF` with a window probe, so the peer answers with an ACK at
/// once. Returns the connected socket (blocking; the caller sets
/// non-blocking).
///
/// The old socket with the same address pair must be closed first (even in
/// repair mode it still holds the address pair), or this fails with
/// `EADDRNOTAVAIL`; a listening socket on the local port does not matter. On error the new socket is closed while still in
/// repair mode, so nothing reaches the peer.
pub fn restore(r: &Restore<'_>) -> io::Result<TcpStream> {
    let s = restore_in_repair(r)?;
    set_repair(s.as_fd(), TCP_REPAIR_OFF)?;
    Ok(s)
}

/// [`restore`] without the last step: the socket stays in repair mode. It
/// already owns its address pair, so segments from the peer reach it
/// instead of being answered with a RST, but it sends nothing (no window
/// probe) until [`window_probe`] takes it out of repair mode — after an
/// inbound guard is lifted, so that the peer's answer to the probe is not
/// dropped (a second probe soon after would be rate-limited by the peer,
/// `tcp_invalid_ratelimit`). Write nothing to it before that: in repair
/// mode writes go to the send queue as already-sent data.
pub fn restore_in_repair(r: &Restore<'_>) -> io::Result<TcpStream> {
    let st = r.state;
    let (local, remote) = family_pair(st.local, st.remote)?;
    let sock = Socket::new(
        Domain::for_address(local),
        Type::STREAM,
        Some(Protocol::TCP),
    )?;
    let fd = sock.as_fd();
    if local.is_ipv6() && (is_v4_mapped(&local) || is_v4_mapped(&remote)) {
        sock.set_only_v6(false)?;
    }
    // Before TCP_REPAIR: repair mode upgrades it to SK_FORCE_REUSE (bind
    // even beside a listener on the port); setting SO_REUSEADDR afterwards
    // would downgrade it to SK_CAN_REUSE.
    sock.set_reuse_address(true)?;
    set_repair(fd, TCP_REPAIR_ON)?;
    if let Some(key) = r.md5_key {
        crate::md5::set_tcp_md5(fd, remote, Some(key))?;
    }
    if let Some(dev) = r.bind_device {
        crate::device::bind_to_device(fd, dev)?;
    }
    sock.bind(&local.into())?;
    // One byte before `snd_una`: see `write_sent_queue`.
    set_queue_seq(fd, TCP_SEND_QUEUE, r.snd_una.wrapping_sub(1))?;
    set_queue_seq(fd, TCP_RECV_QUEUE, r.rcv_nxt)?;
    // TCPOPT_MAXSEG below only sets the clamp; the segment size in use
    // (mss_cache) is computed at connect from the clamp then in force, which
    // without this is the 536-byte default. Linux caps TCP_MAXSEG at 32767.
    let user_mss = libc::c_int::from(st.mss.min(MAX_TCP_WINDOW));
    if user_mss > 0 {
        sockopt::set_int(fd, libc::IPPROTO_TCP, libc::TCP_MAXSEG, user_mss)?;
    }
    sock.connect(&remote.into())?;
    if user_mss > 0 {
        // Back to "no user MSS", as on a socket that was never repaired
        // (best effort: only affects what a listener would announce).
        let _ = sockopt::set_int(fd, libc::IPPROTO_TCP, libc::TCP_MAXSEG, 0);
    }
    if st.timestamps {
        // Keep the captured low bit,
        // which Linux >= 6.7 reads as "microsecond clock"; rounding up keeps
        // the clock from going backwards.
        let mut ts = r.ts_val;
        if (ts ^ st.ts_val) & 1 != 0 {
            ts = ts.wrapping_add(1);
        }
        sockopt::set_int(
            fd,
            libc::IPPROTO_TCP,
            libc::TCP_TIMESTAMP,
            ts as libc::c_int,
        )?;
    }
    sockopt::set_bytes(
        fd,
        libc::IPPROTO_TCP,
        libc::TCP_REPAIR_OPTIONS,
        &repair_options(st),
    )?;
    let win = TcpRepairWindow {
        snd_wl1: r.rcv_nxt,
        snd_wnd: st.snd_wnd,
        max_window: st.snd_wnd,
        rcv_wnd: st.rcv_wnd,
        rcv_wup: r.rcv_nxt,
    };
    sockopt::set(fd, libc::IPPROTO_TCP, libc::TCP_REPAIR_WINDOW, &win)?;
    write_sent_queue(&sock, r.send_queue)?;
    Ok(sock.into())
}

/// Writes `data` into the send queue as already-sent segments (repair mode,
/// `TCP_SEND_QUEUE` selected), after one byte the peer has acknowledged
/// (the send queue's sequence was set one below `snd_una`; its value is
/// never read: a receiver trims what precedes RCV.NXT, RFC 9293 §3.10.7.4).
///
/// That byte is what makes the restored socket recover at once: the
/// peer's answer to the window probe acknowledges it, which is the socket's
/// first RTT sample, so its retransmission and loss-probe timers run on
/// that round trip. Without a sample Linux waits 3 s (RFC 6298 §5.7,
/// `tcp_init_metrics`) before resending bytes that never reached the peer,
/// and longer while the peer's window is closed: a peer held by such bytes
/// receives nothing else, not even a KEEPALIVE, meanwhile.
///
/// Never blocks: the send buffer is enlarged first if `data` would not fit.
fn write_sent_queue(sock: &Socket, data: &[u8]) -> io::Result<()> {
    let fd = sock.as_fd();
    sockopt::set_int(
        fd,
        libc::IPPROTO_TCP,
        libc::TCP_REPAIR_QUEUE,
        TCP_SEND_QUEUE,
    )?;
    // The queue is charged at skb truesize, a little above the payload;
    // the kernel doubles the value given.
    let need = data.len().saturating_add(data.len() / 2 + 64 * 1024);
    if sock.send_buffer_size()? < need {
        let val = libc::c_int::try_from(need / 2 + 1).unwrap_or(libc::c_int::MAX);
        sockopt::set_int(fd, libc::SOL_SOCKET, libc::SO_SNDBUFFORCE, val)?;
    }
    loop {
        match sock.send_with_flags(&[0u8], libc::MSG_DONTWAIT) {
            Ok(0) => return Err(io::Error::from(io::ErrorKind::WriteZero)),
            Ok(_) => break,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    let mut off = 0;
    while off < data.len() {
        match sock.send_with_flags(&data[off..], libc::MSG_DONTWAIT) {
            Ok(0) => return Err(io::Error::from(io::ErrorKind::WriteZero)),
            Ok(n) => off += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state(ts_val: u32) -> TcpRepairState {
        TcpRepairState {
            local: "127.0.0.1:1".parse().unwrap(),
            remote: "127.0.0.1:2".parse().unwrap(),
            snd_seq: 0,
            rcv_seq: 0,
            outq: 0,
            mss: 1460,
            snd_wscale: 7,
            rcv_wscale: 9,
            sack: true,
            timestamps: true,
            ts_val,
            snd_wnd: 0,
            rcv_wnd: 0,
        }
    }

    #[test]
    fn ts_val_after_keeps_the_unit_bit() {
        let ms = state(1000);
        assert_eq!(ms.ts_val_after(Duration::from_millis(4)), 1004);
        assert_eq!(ms.ts_val_after(Duration::from_millis(3)), 1004);
        let us = state(1001);
        assert_eq!(us.ts_val_after(Duration::from_micros(2500)), 3501);
        assert_eq!(
            state(u32::MAX - 1).ts_val_after(Duration::from_millis(2)),
            0
        );
    }

    #[test]
    fn repair_options_layout() {
        let b = repair_options(&state(0));
        assert_eq!(b.len(), 4 * 8);
        let word = |i: usize| u32::from_ne_bytes(b[i * 4..i * 4 + 4].try_into().unwrap());
        assert_eq!((word(0), word(1)), (TCPOPT_MAXSEG, 1460));
        assert_eq!((word(2), word(3)), (TCPOPT_WINDOW, 7 | 9 << 16));
        assert_eq!((word(4), word(5)), (TCPOPT_SACK_PERM, 0));
        assert_eq!((word(6), word(7)), (TCPOPT_TIMESTAMP, 0));
    }

    #[test]
    fn families_are_matched() {
        let v6: SocketAddr = "[::ffff:10.0.0.1]:179".parse().unwrap();
        let v4: SocketAddr = "10.0.0.2:5000".parse().unwrap();
        let (l, r) = family_pair(v6, v4).unwrap();
        assert_eq!(l, v6);
        assert_eq!(r, "[::ffff:10.0.0.2]:5000".parse::<SocketAddr>().unwrap());
        let (l, r) = family_pair(v4, v6).unwrap();
        assert_eq!((l, r), (v4, "10.0.0.1:179".parse().unwrap()));
        assert!(family_pair(v4, "[2001:db8::1]:179".parse().unwrap()).is_err());
        assert!(is_v4_mapped(&v6) && !is_v4_mapped(&"[::1]:1".parse().unwrap()));
    }
}
