//! The I/O shell: one UDP socket per covered session, bound to the unit's
//! address and source port (`IP_TRANSPARENT` or `IPV6_TRANSPARENT`, so the
//! address need not be the relay host's), TTL or hop limit 255; a poller thread per process feeding store
//! snapshots to the send loop.

use crate::core::{Core, Input, Output};
use crate::store::Watched;
use crate::RelayError;
use std::collections::HashMap;
use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A send socket on exactly `from`, which may be any address
/// (`IP_TRANSPARENT`/`IPV6_TRANSPARENT` need CAP_NET_ADMIN), TTL or hop
/// limit 255 (RFC 5881 §5, RFC 5883).
pub fn open_socket(from: SocketAddr) -> Result<UdpSocket, RelayError> {
    use socket2::{Domain, Protocol, Socket, Type};
    use std::os::fd::AsFd;
    let err = |e: std::io::Error| RelayError::Socket(from, e);
    let v6 = from.is_ipv6();
    let s =
        Socket::new(Domain::for_address(from), Type::DGRAM, Some(Protocol::UDP)).map_err(err)?;
    if v6 {
        s.set_only_v6(true).map_err(err)?;
    }
    holdfast_linux::set_transparent(s.as_fd(), v6).map_err(err)?;
    s.set_reuse_address(true).map_err(err)?;
    holdfast_linux::set_ttl(s.as_fd(), v6, 255).map_err(err)?;
    s.set_nonblocking(true).map_err(err)?;
    s.bind(&from.into()).map_err(err)?;
    Ok(s.into())
}

/// Sockets by source address, opened on first use.
#[derive(Default)]
pub struct Sockets {
    open: HashMap<SocketAddr, UdpSocket>,
    pub send_errors: u64,
}

impl Sockets {
    /// Carries out the core's outputs.
    pub fn apply(&mut self, outs: Vec<Output>) {
        for o in outs {
            match o {
                Output::Send { from, to, payload } => {
                    let s = match self.open.entry(from) {
                        std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
                        std::collections::hash_map::Entry::Vacant(v) => match open_socket(from) {
                            Ok(s) => v.insert(s),
                            Err(e) => {
                                self.send_errors += 1;
                                tracing::warn!("{e}");
                                continue;
                            }
                        },
                    };
                    if let Err(e) = s.send_to(&payload, to) {
                        self.send_errors += 1;
                        tracing::debug!(%from, %to, "send: {e}");
                    }
                }
                Output::Started {
                    instance,
                    key,
                    local,
                    remote,
                    interval,
                } => tracing::info!(
                    instance,
                    key,
                    local,
                    remote,
                    interval_us = interval.as_micros() as u64,
                    "covering BFD session"
                ),
                Output::Stopped {
                    instance,
                    key,
                    from,
                    reason,
                } => {
                    tracing::info!(instance, key, ?reason, "no longer covering BFD session");
                    self.open.remove(&from);
                }
            }
        }
    }
}

/// Runs the relay until `stop` is set: a poller thread reads every
/// instance every `poll`, the calling thread sends, in `SCHED_FIFO` at
/// `realtime_priority` when it is not 0 (or at normal priority, with a
/// warning, when the kernel refuses).
pub fn run(
    mut core: Core,
    mut watched: Vec<Watched>,
    poll: Duration,
    stop: Arc<AtomicBool>,
    realtime_priority: u8,
) -> Result<(), RelayError> {
    let epoch = Instant::now();
    let (tx, rx) = mpsc::sync_channel::<(Duration, Input)>(1024);
    let stop2 = stop.clone();
    let poller = std::thread::Builder::new()
        .name("relay-poll".into())
        .spawn(move || {
            while !stop2.load(Ordering::Relaxed) {
                let start = Instant::now();
                for w in &mut watched {
                    let input = match w.poll() {
                        Ok(s) => Input::Snapshot(s),
                        Err(e) => {
                            tracing::warn!(instance = w.instance(), "store: {e}");
                            Input::StoreError {
                                instance: w.instance().to_string(),
                            }
                        }
                    };
                    if tx.send((epoch.elapsed(), input)).is_err() {
                        return;
                    }
                }
                std::thread::sleep(poll.saturating_sub(start.elapsed()));
            }
        })
        .map_err(RelayError::Thread)?;
    // After the poller started: threads inherit their creator's class.
    if realtime_priority != 0 {
        match holdfast_linux::sched::set_thread_realtime(realtime_priority) {
            Ok(()) => tracing::info!(
                priority = realtime_priority,
                "sending thread in the real-time class (SCHED_FIFO)"
            ),
            Err(e) => tracing::warn!(
                priority = realtime_priority,
                "sending thread left at normal priority: SCHED_FIFO refused ({e}); a busy host may delay the relay's packets (needs CAP_SYS_NICE and, with real-time group scheduling, a cgroup with cpu.rt_runtime_us)"
            ),
        }
    }
    let mut sockets = Sockets::default();
    while !stop.load(Ordering::Relaxed) {
        let now = epoch.elapsed();
        let wait = core
            .next_deadline()
            .map_or(Duration::from_millis(50), |d| d.saturating_sub(now))
            .min(Duration::from_millis(50));
        match rx.recv_timeout(wait) {
            Ok((at, input)) => {
                let outs = core.handle(at.max(now), input);
                sockets.apply(outs);
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
        }
        let outs = core.handle(epoch.elapsed(), Input::Timer);
        sockets.apply(outs);
    }
    drop(rx);
    let _ = poller.join();
    Ok(())
}
