//! `TCP_INFO`: per-connection transport statistics for `show neighbor`.

use crate::sockopt;
use std::io;
use std::mem::offset_of;
use std::os::fd::BorrowedFd;

/// The prefix of `struct tcp_info` (`<linux/tcp.h>`) up to `tcpi_segs_in`
/// (Linux 4.2). Older kernels fill less; the returned length says how much.
#[repr(C)]
#[derive(Clone, Copy)]
struct RawTcpInfo {
    state: u8,
    ca_state: u8,
    retransmits: u8,
    probes: u8,
    backoff: u8,
    options: u8,
    wscale: u8,
    flags: u8,
    rto: u32,
    ato: u32,
    snd_mss: u32,
    rcv_mss: u32,
    unacked: u32,
    sacked: u32,
    lost: u32,
    retrans: u32,
    fackets: u32,
    last_data_sent: u32,
    last_ack_sent: u32,
    last_data_recv: u32,
    last_ack_recv: u32,
    pmtu: u32,
    rcv_ssthresh: u32,
    rtt: u32,
    rttvar: u32,
    snd_ssthresh: u32,
    snd_cwnd: u32,
    advmss: u32,
    reordering: u32,
    rcv_rtt: u32,
    rcv_space: u32,
    total_retrans: u32,
    pacing_rate: u64,
    max_pacing_rate: u64,
    bytes_acked: u64,
    bytes_received: u64,
    segs_out: u32,
    segs_in: u32,
}

// SAFETY: `#[repr(C)]` struct of integer fields only.
unsafe impl sockopt::Pod for RawTcpInfo {}

/// The useful subset of `TCP_INFO`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TcpInfoLite {
    /// Kernel TCP state (`TCP_ESTABLISHED` = 1, ...).
    pub state: u8,
    /// `TCPI_OPT_*` bits: options negotiated at the handshake.
    pub options: u8,
    /// Window scales we apply to the peer's windows and it applies to ours.
    pub snd_wscale: u8,
    pub rcv_wscale: u8,
    /// Smoothed round-trip time and its variance, microseconds.
    pub rtt_us: u32,
    pub rttvar_us: u32,
    pub snd_mss: u32,
    pub rcv_mss: u32,
    pub pmtu: u32,
    pub snd_cwnd: u32,
    /// Segments sent but not yet acknowledged.
    pub unacked: u32,
    /// Milliseconds since the peer's last acceptable ACK (any, also one
    /// that acknowledges nothing new).
    pub last_ack_recv_ms: u32,
    pub total_retrans: u32,
    /// `None` on kernels older than 4.1.
    pub bytes_acked: Option<u64>,
    pub bytes_received: Option<u64>,
    /// `None` on kernels older than 4.2.
    pub segs_out: Option<u32>,
    pub segs_in: Option<u32>,
}

/// Reads `TCP_INFO` from a TCP socket.
pub fn tcp_info(fd: BorrowedFd<'_>) -> io::Result<TcpInfoLite> {
    let (r, len) = sockopt::get::<RawTcpInfo>(fd, libc::IPPROTO_TCP, libc::TCP_INFO)?;
    let has = |end: usize| len >= end;
    // `tcpi_snd_wscale : 4, tcpi_rcv_wscale : 4`: C bit-fields are
    // allocated from the low bits on little-endian targets.
    let (lo, hi) = (r.wscale & 0x0f, r.wscale >> 4);
    let (snd_wscale, rcv_wscale) = if cfg!(target_endian = "little") {
        (lo, hi)
    } else {
        (hi, lo)
    };
    Ok(TcpInfoLite {
        state: r.state,
        options: r.options,
        snd_wscale,
        rcv_wscale,
        rtt_us: r.rtt,
        rttvar_us: r.rttvar,
        snd_mss: r.snd_mss,
        rcv_mss: r.rcv_mss,
        pmtu: r.pmtu,
        snd_cwnd: r.snd_cwnd,
        unacked: r.unacked,
        last_ack_recv_ms: r.last_ack_recv,
        total_retrans: r.total_retrans,
        bytes_acked: has(offset_of!(RawTcpInfo, bytes_acked) + 8).then_some(r.bytes_acked),
        bytes_received: has(offset_of!(RawTcpInfo, bytes_received) + 8).then_some(r.bytes_received),
        segs_out: has(offset_of!(RawTcpInfo, segs_out) + 4).then_some(r.segs_out),
        segs_in: has(offset_of!(RawTcpInfo, segs_in) + 4).then_some(r.segs_in),
    })
}
