//! `--bench`: how many sessions one relay thread sustains. N synthetic Up
//! sessions (127.0.0.1, source ports from 20000) are covered at a given
//! interval and sent to a sink socket on loopback for a bounded time; the
//! report gives packets/s, the send thread's CPU share, and the intervals
//! between consecutive packets of a session against the nominal one (RFC
//! 5880 §6.8.7 allows 75–100% of it). Run it in a namespace of its own
//! (`unshare -n`), as root: the sockets use `IP_TRANSPARENT`.

use crate::core::{Core, CoreConfig, Input, Output, Snapshot};
use crate::shell::Sockets;
use crate::RelayError;
use holdfast_bfd::{Diag, ResumeState, State};
use holdfast_nsr::{BfdRecord, SCHEMA_VERSION};
use serde::Serialize;
use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// What `--bench` measured.
#[derive(Debug, Clone, Serialize)]
pub struct BenchReport {
    pub sessions: usize,
    pub interval_ms: u64,
    pub seconds: f64,
    pub sent: u64,
    pub received: u64,
    pub send_errors: u64,
    pub packets_per_s: f64,
    /// CPU time of the send thread / wall time.
    pub cpu_share: f64,
    pub tx_interval_p50_ms: f64,
    pub tx_interval_p99_ms: f64,
    pub tx_interval_max_ms: f64,
    /// Intervals longer than the nominal one (a peer at Detect Mult 3
    /// notices only past three of them).
    pub over_nominal: u64,
    /// Intervals longer than twice the nominal one.
    pub over_twice_nominal: u64,
}

/// Synthetic record `i` of a bench run.
pub fn synthetic(i: usize, interval_us: u32, sink: SocketAddr) -> (String, String) {
    let rs = ResumeState {
        state: State::Up,
        local_diag: Diag::None,
        local_discriminator: 1000 + i as u32,
        remote_discriminator: 5000 + i as u32,
        desired_min_tx_us: interval_us,
        required_min_rx_us: interval_us,
        remote_detect_mult: 3,
        remote_desired_min_tx_us: interval_us,
        remote_min_rx_us: interval_us,
        xmit_auth_seq: 0,
        rcv_auth_seq: None,
        detect_mult: 3,
        auth: None,
    };
    let rec = BfdRecord {
        schema: SCHEMA_VERSION,
        instance: "bench".into(),
        peer: sink.ip(),
        local: SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 20000 + i as u16),
        multihop: false,
        state: serde_json::to_value(rs).unwrap_or_default(),
    };
    (
        format!("bench-{i}"),
        serde_json::to_string(&rec).unwrap_or_default(),
    )
}

/// CPU time (user + system) of the calling thread.
fn thread_cpu() -> Duration {
    let Ok(s) = std::fs::read_to_string("/proc/thread-self/stat") else {
        return Duration::ZERO;
    };
    // Fields after the command name (which is in parentheses).
    let rest = s.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks: u64 = f.get(11).and_then(|v| v.parse().ok()).unwrap_or(0)
        + f.get(12).and_then(|v| v.parse().ok()).unwrap_or(0);
    // USER_HZ is 100 on Linux.
    Duration::from_millis(ticks * 10)
}

fn pct(v: &[Duration], p: f64) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    let i = ((v.len() - 1) as f64 * p).round() as usize;
    v[i].as_secs_f64() * 1e3
}

/// Runs the bench: `sessions` sessions at `interval` for `seconds`.
pub fn run(sessions: usize, interval: Duration, seconds: u64) -> Result<BenchReport, RelayError> {
    let sessions = sessions.clamp(1, 40_000);
    let seconds = seconds.clamp(1, 120);
    let sink = UdpSocket::bind("127.0.0.1:0")
        .map_err(|e| RelayError::Socket(SocketAddr::from(([127, 0, 0, 1], 0)), e))?;
    sink.set_read_timeout(Some(Duration::from_millis(100)))
        .map_err(|e| RelayError::Socket(SocketAddr::from(([127, 0, 0, 1], 0)), e))?;
    let sink_addr = sink
        .local_addr()
        .map_err(|e| RelayError::Socket(SocketAddr::from(([127, 0, 0, 1], 0)), e))?;
    let received = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let (r2, s2) = (received.clone(), stop.clone());
    let sink_thread = std::thread::spawn(move || {
        let mut buf = [0u8; 128];
        while !s2.load(Ordering::Relaxed) {
            if sink.recv_from(&mut buf).is_ok() {
                r2.fetch_add(1, Ordering::Relaxed);
            }
        }
    });
    let interval_us = u32::try_from(interval.as_micros()).unwrap_or(u32::MAX);
    let mut core = Core::new(
        CoreConfig {
            dest_port: Some(sink_addr.port()),
            cover: Duration::from_secs(3600),
            ..CoreConfig::default()
        },
        0x5eed,
    );
    let records = (0..sessions)
        .map(|i| synthetic(i, interval_us, sink_addr))
        .collect();
    let t0 = Instant::now();
    let mut sockets = Sockets::default();
    let outs = core.handle(
        t0.elapsed(),
        Input::Snapshot(Snapshot {
            instance: "bench".into(),
            epoch: 1,
            records,
            liveness: Vec::new(),
        }),
    );
    sockets.apply(outs);
    let mut last: HashMap<SocketAddr, Instant> = HashMap::with_capacity(sessions);
    let mut intervals = Vec::with_capacity(sessions * seconds as usize * 12);
    let mut sent = 0u64;
    let cpu0 = thread_cpu();
    let start = Instant::now();
    let end = start + Duration::from_secs(seconds);
    while Instant::now() < end {
        let now = t0.elapsed();
        if let Some(d) = core.next_deadline() {
            if d > now {
                std::thread::sleep((d - now).min(Duration::from_millis(10)));
            }
        }
        let outs = core.handle(t0.elapsed(), Input::Timer);
        let sends: Vec<SocketAddr> = outs
            .iter()
            .filter_map(|o| match o {
                Output::Send { from, .. } => Some(*from),
                _ => None,
            })
            .collect();
        sockets.apply(outs);
        let at = Instant::now();
        for from in sends {
            sent += 1;
            if let Some(prev) = last.insert(from, at) {
                if prev >= start {
                    intervals.push(at - prev);
                }
            }
        }
    }
    let wall = start.elapsed();
    let cpu = thread_cpu().saturating_sub(cpu0);
    std::thread::sleep(Duration::from_millis(200));
    stop.store(true, Ordering::Relaxed);
    let _ = sink_thread.join();
    intervals.sort_unstable();
    let over = intervals.iter().filter(|d| **d > interval).count() as u64;
    let over2 = intervals.iter().filter(|d| **d > interval * 2).count() as u64;
    Ok(BenchReport {
        sessions,
        interval_ms: interval.as_millis() as u64,
        seconds: wall.as_secs_f64(),
        sent,
        received: received.load(Ordering::Relaxed),
        send_errors: sockets.send_errors,
        packets_per_s: sent as f64 / wall.as_secs_f64(),
        cpu_share: cpu.as_secs_f64() / wall.as_secs_f64(),
        tx_interval_p50_ms: pct(&intervals, 0.5),
        tx_interval_p99_ms: pct(&intervals, 0.99),
        tx_interval_max_ms: intervals.last().map_or(0.0, |d| d.as_secs_f64() * 1e3),
        over_nominal: over,
        over_twice_nominal: over2,
    })
}
