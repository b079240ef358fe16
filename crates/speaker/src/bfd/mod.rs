//! BFD under the BGP sessions: the BFD thread, its sockets, and the
//! session table ([`table`]) that feeds `holdfast_bfd::Session`s.
//!
//! BFD runs on its own OS thread ("bfd") with its own current-thread Tokio
//! runtime, so neither route processing nor the I/O thread's work can
//! delay a control packet; in `SCHED_FIFO` (`[bfd] realtime_priority`,
//! [`schedule`]), so neither can any other process's CPU-bound work. The
//! daemon talks to it through [`Bfd`] (add, reconfigure, remove a
//! neighbour's session; `show bfd`); the thread tells
//! a neighbour's peer task when its BFD session goes Down or comes Up
//! (`PeerCmd::Bfd`, which the shell feeds to the core as
//! `PeerInput::BfdDown` / `BfdUp`).
//!
//! Non-stop BFD (with `[nsr]`): every session's [`holdfast_bfd::ResumeState`],
//! source address and port are replicated (`holdfast_nsr::Op::Bfd`, through
//! the replicator like every other op) whenever anything but the
//! authentication sequence numbers changes, and all of them anew when the
//! replicator asks sessions to re-synchronise. A takeover hands each stored
//! record to [`BfdCmd::Add`] (`resume`): the session continues with
//! `Session::resume` on the same source port, Up, with the same
//! discriminators and intervals.
//!
//! # RFCs
//! - RFC 5880: the session machine is `holdfast-bfd`'s; here: discriminator
//!   allocation (random, non-zero, unique) and demultiplexing (§6.8.6: by
//!   Your Discriminator, or by the source address and the mode when it is
//!   zero). The Detection Time (§6.8.4) is judged by when the kernel
//!   received each packet (`SO_TIMESTAMPNS`), and every queued packet is
//!   read before a session's timers are: a thread that was stopped or
//!   starved does not take its own stall for the peer's silence.
//! - RFC 5881 (single-hop): packets to UDP 3784, from a source port in
//!   49152–65535 unique per session, with TTL / hop limit 255; received on
//!   3784 and discarded unless their TTL / hop limit is 255 (read per
//!   datagram with `IP_RECVTTL` / `IPV6_RECVHOPLIMIT`, `holdfast_linux::udp_ttl`).
//!   IPv4 and IPv6.
//! - RFC 5883 (multihop): UDP 4784, sent with TTL 255, any TTL accepted.
//! - RFC 5882: Up → Down (unless the peer signalled AdminDown, §3.2) is
//!   reported to BGP, which goes down and holds down (see the peer core);
//!   the source address is the BGP session's local address (`local_address`,
//!   or the address the kernel routes from towards the peer).
//!
//! # Known issues
//! - Without `local_address`, the source address is the kernel's route
//!   choice towards the peer, which is the BGP connection's own only when
//!   BGP, too, lets the kernel choose.
//! - The receive sockets are not bound to a VRF: BFD for neighbours in a
//!   VRF instance sends from the VRF but receives only what the default
//!   VRF's sockets see.
//! - No Echo function and no Demand mode (those of `holdfast-bfd`).
//! - Non-stop BFD with the meticulous authentication types: the replicated
//!   bfd.XmitAuthSeq is the one of the last write, not of the last packet
//!   (it advances with every packet), so the peer drops a backup's packets
//!   until the number is back in its window, and the relay cannot cover
//!   such sessions. The keyed types and the simple password replicate
//!   every change of the number (it changes only with the content).
//! - BFD records are not part of `show nsr`'s protection figures, and a
//!   BFD op counts in its BGP session's replication lag (same key).

pub mod table;

use crate::msg::peer::PeerCmd;
use crate::nsr::Nsr;
use crate::obs::Metrics;
use holdfast_api::BfdSessionInfo;
use holdfast_config::NeighborKey;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::os::fd::AsFd;
use std::sync::Arc;
use table::{Rx, Table};
use tokio::io::Interest;
use tokio::net::UdpSocket;
use tokio::sync::{mpsc, oneshot};

/// RFC 5881 §4: single-hop control packets go to this port.
pub const SINGLE_HOP_PORT: u16 = 3784;
/// RFC 5883 §5: multihop control packets go to this port.
pub const MULTIHOP_PORT: u16 = 4784;

/// What a neighbour's BFD session is run with.
#[derive(Debug, Clone, PartialEq)]
pub struct BfdSpec {
    pub peer: IpAddr,
    /// The BGP session's local address, when configured.
    pub local: Option<IpAddr>,
    pub multihop: bool,
    pub vrf: Option<String>,
    pub session: holdfast_bfd::SessionConfig,
}

/// A request to the BFD thread.
pub enum BfdCmd {
    /// Start a session for this neighbour; its peer task hears of Down/Up.
    /// `resume`: a takeover's stored record of the session, which then
    /// continues where the old primary left it (same discriminators,
    /// state, intervals, source port) instead of starting Down.
    Add {
        key: NeighborKey,
        spec: BfdSpec,
        peer: mpsc::UnboundedSender<PeerCmd>,
        resume: Option<Box<holdfast_nsr::BfdRecord>>,
    },
    /// New timers or multiplier for a running session (a Poll Sequence
    /// while Up, RFC 5880 §6.8.3): the session is kept.
    Configure {
        key: NeighborKey,
        session: holdfast_bfd::SessionConfig,
    },
    /// A takeover's service addresses are in place: resumed sessions,
    /// whose detection waited for them, time the peer from now.
    PathReady,
    /// Stop the session (sends AdminDown, §6.8.16) and release BGP.
    Remove {
        key: NeighborKey,
    },
    Show(oneshot::Sender<Vec<BfdSessionInfo>>),
    /// `[bfd] realtime_priority` changed on reload: the thread's
    /// scheduling class (0: normal).
    Realtime(u8),
}

/// The daemon's handle on the BFD thread (started on first use).
#[derive(Clone)]
pub struct Bfd {
    tx: mpsc::UnboundedSender<BfdCmd>,
}

impl Bfd {
    /// Starts the BFD thread: binds the receive sockets and runs until
    /// every handle is dropped.
    /// `realtime_priority` is `[bfd] realtime_priority`.
    pub fn start(
        metrics: Arc<Metrics>,
        nsr: Option<Nsr>,
        realtime_priority: u8,
    ) -> std::io::Result<Bfd> {
        let (tx, rx) = mpsc::unbounded_channel();
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        std::thread::Builder::new()
            .name("bfd".into())
            .spawn(move || {
                schedule(realtime_priority);
                let rt = match tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                {
                    Ok(rt) => rt,
                    Err(e) => {
                        let _ = ready_tx.send(Err(e));
                        return;
                    }
                };
                rt.block_on(run(rx, metrics, nsr, ready_tx));
            })?;
        ready_rx
            .recv()
            .map_err(|_| std::io::Error::other("BFD thread ended at start"))??;
        Ok(Bfd { tx })
    }

    pub fn send(&self, cmd: BfdCmd) {
        if self.tx.send(cmd).is_err() {
            tracing::error!("BFD thread is gone");
        }
    }

    /// `show bfd`.
    pub async fn show(&self) -> Vec<BfdSessionInfo> {
        let (tx, rx) = oneshot::channel();
        self.send(BfdCmd::Show(tx));
        rx.await.unwrap_or_default()
    }
}

/// Puts the calling (BFD) thread in the scheduling class `priority`
/// names (`[bfd] realtime_priority`), or says why it stays where it is.
pub(crate) fn schedule(priority: u8) {
    match holdfast_linux::sched::set_thread_realtime(priority) {
        Ok(()) if priority == 0 => tracing::info!("BFD thread at normal priority"),
        Ok(()) => tracing::info!(priority, "BFD thread in the real-time class (SCHED_FIFO)"),
        Err(e) => tracing::warn!(
            priority,
            "BFD thread left at normal priority: SCHED_FIFO refused ({e}); a busy host may delay BFD packets (needs CAP_SYS_NICE and, with real-time group scheduling, a cgroup with cpu.rt_runtime_us)"
        ),
    }
}

/// Binds one receive socket (port 3784 or 4784, one address family).
fn bind_rx(addr: SocketAddr) -> std::io::Result<UdpSocket> {
    use socket2::{Domain, Protocol, Socket, Type};
    let v6 = addr.is_ipv6();
    let domain = if v6 { Domain::IPV6 } else { Domain::IPV4 };
    let s = Socket::new(domain, Type::DGRAM, Some(Protocol::UDP))?;
    if v6 {
        s.set_only_v6(true)?;
    }
    s.set_reuse_address(true)?;
    s.set_nonblocking(true)?;
    s.bind(&addr.into())?;
    holdfast_linux::enable_recv_ttl(s.as_fd(), v6)?;
    UdpSocket::from_std(std::net::UdpSocket::from(s))
}

/// Reads one receive socket for ever, handing each datagram to the loop.
async fn reader(sock: Arc<UdpSocket>, multihop: bool, out: mpsc::UnboundedSender<Rx>) {
    let mut buf = vec![0u8; 512];
    loop {
        if sock.readable().await.is_err() {
            return;
        }
        let got = sock.try_io(Interest::READABLE, || {
            holdfast_linux::recv_with_ttl(sock.as_fd(), &mut buf)
        });
        match got {
            Ok(d) => {
                if out.send(rx_of(&buf, d, multihop)).is_err() {
                    return;
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(e) => tracing::debug!("BFD receive: {e}"),
        }
    }
}

/// A datagram as the table takes it, stamped with the time the kernel
/// received it (our monotonic [`crate::clock::now`] scale).
fn rx_of(buf: &[u8], d: holdfast_linux::Datagram, multihop: bool) -> Rx {
    Rx {
        data: buf[..d.len].to_vec(),
        from: d.from,
        ttl: d.ttl,
        multihop,
        at: d
            .received
            .map(|t| arrival(t, crate::clock::now(), std::time::SystemTime::now())),
    }
}

/// A kernel receive timestamp (wall clock) on the monotonic scale: `now`
/// less how long ago, by the wall clock, the datagram arrived.
fn arrival(
    received: std::time::SystemTime,
    now: holdfast_bfd::Time,
    wall: std::time::SystemTime,
) -> holdfast_bfd::Time {
    now.saturating_sub(wall.duration_since(received).unwrap_or_default())
}

/// Every datagram queued on the receive sockets, read now without waiting
/// (before any detection timer is judged: after this thread was stopped or
/// starved, the peer's packets wait here with their arrival times).
fn drain(socks: &[(Arc<UdpSocket>, bool)], table: &mut Table) {
    let mut buf = [0u8; 512];
    for (sock, multihop) in socks {
        for _ in 0..DRAIN_MAX {
            match holdfast_linux::recv_with_ttl(sock.as_fd(), &mut buf) {
                Ok(d) => table.received(crate::clock::now(), rx_of(&buf, d, *multihop)),
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(e) => {
                    tracing::debug!("BFD receive: {e}");
                    break;
                }
            }
        }
    }
}

/// Datagrams one [`drain`] reads per socket at the most (a bound, not a
/// limit met in practice: a receive buffer holds a few thousand).
const DRAIN_MAX: usize = 100_000;

async fn run(
    mut cmds: mpsc::UnboundedReceiver<BfdCmd>,
    metrics: Arc<Metrics>,
    nsr: Option<Nsr>,
    ready: std::sync::mpsc::Sender<std::io::Result<()>>,
) {
    let (pkt_tx, mut pkts) = mpsc::unbounded_channel();
    let mut socks = Vec::new();
    for (ip, port, multihop) in [
        (IpAddr::V4(Ipv4Addr::UNSPECIFIED), SINGLE_HOP_PORT, false),
        (IpAddr::V6(Ipv6Addr::UNSPECIFIED), SINGLE_HOP_PORT, false),
        (IpAddr::V4(Ipv4Addr::UNSPECIFIED), MULTIHOP_PORT, true),
        (IpAddr::V6(Ipv6Addr::UNSPECIFIED), MULTIHOP_PORT, true),
    ] {
        let addr = SocketAddr::new(ip, port);
        match bind_rx(addr) {
            Ok(s) => {
                tracing::info!(%addr, "BFD listening");
                let s = Arc::new(s);
                socks.push((s.clone(), multihop));
                tokio::spawn(reader(s, multihop, pkt_tx.clone()));
            }
            Err(e) => tracing::error!(%addr, "BFD cannot listen: {e}"),
        }
    }
    if socks.is_empty() {
        let _ = ready.send(Err(std::io::Error::other(
            "no BFD receive socket could be bound",
        )));
        return;
    }
    let _ = ready.send(Ok(()));
    crate::watchdog::beat("bfd", crate::watchdog::BFD_BUDGET);
    drop(pkt_tx);
    let mut resync = nsr.as_ref().map(|n| n.shared.resync.subscribe());
    let mut table = Table::new(metrics, nsr);
    loop {
        let deadline = table
            .next_deadline()
            .map(crate::clock::instant_of)
            .unwrap_or_else(|| tokio::time::Instant::now() + std::time::Duration::from_secs(3600));
        tokio::select! {
            biased;
            cmd = cmds.recv() => match cmd {
                Some(BfdCmd::Show(reply)) => {
                    let _ = reply.send(table.show());
                }
                Some(cmd) => table.command(crate::clock::now(), cmd),
                None => {
                    table.shutdown(crate::clock::now());
                    return;
                }
            },
            Some(rx) = pkts.recv() => table.received(crate::clock::now(), rx),
            Ok(()) = resynced(resync.as_mut()) => table.replicate_all(),
            _ = tokio::time::sleep_until(deadline) => {
                // What arrived while this thread did not run (stopped,
                // starved) is read first, at its arrival time: a stall of
                // ours is not the peer's silence.
                while let Ok(rx) = pkts.try_recv() {
                    table.received(crate::clock::now(), rx);
                }
                drain(&socks, &mut table);
                table.timers(crate::clock::now());
            }
        }
    }
}

/// Resolves when the replicator asks every session to write itself anew
/// (after a store outage); never without NSR.
async fn resynced(rx: Option<&mut tokio::sync::watch::Receiver<u64>>) -> Result<(), ()> {
    match rx {
        Some(rx) => rx.changed().await.map_err(|_| ()),
        None => std::future::pending().await,
    }
}
