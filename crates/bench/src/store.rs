//! Fig. 5(b): time of a store write and of a store read against the number
//! of records per call, against a redis-server inside a lab namespace, over
//! its loopback (`holdfast-bench --figures 5b` runs only this).
//!
//! For records of `size` bytes and batches of B = 1, 2, 4, … records:
//! - write, B sessions: one `write` of B `Received` ops, one per session;
//! - write, 1 session: one `write` of B `Received` ops of one session
//!   (merged by the client into one append);
//! - read, B sessions: `load` of an instance of B sessions holding one record each;
//! - read, 1 session: `load` of one session whose log holds B records.
//!
//! Each round takes the median over repetitions (at least `MIN_REPS`, and
//! for at least `min_time`); the figure is the median of the rounds' medians
//! with their min–max.

use crate::util::Cell;
use anyhow::{anyhow, Result};
use bytes::Bytes;
use holdfast_lab::{Lab, Redis};
use holdfast_nsr::{Op, SessionRecord, Store, StoreError, StoreUrl, TcpParams, SCHEMA_VERSION};
use holdfast_nsr_redis::RedisStore;
use holdfast_tester::netns::in_netns;
use std::net::{IpAddr, Ipv4Addr};
use std::time::{Duration, Instant};

const MIN_REPS: usize = 5;

/// The four series of the figure, in order.
pub const SERIES: [&str; 4] = [
    "write, B sessions",
    "write, 1 session",
    "read, B sessions",
    "read, 1 session",
];

fn record() -> SessionRecord {
    SessionRecord {
        schema: SCHEMA_VERSION,
        instance: "default".into(),
        peer: "192.0.2.1".parse().expect("addr"),
        local: "192.0.2.2:179".parse().expect("addr"),
        remote: "192.0.2.1:40000".parse().expect("addr"),
        outbound: false,
        open_sent: vec![4, 0xfd, 0xe8, 0, 90, 10, 0, 0, 2, 0],
        open_received: vec![4, 0xfd, 0xe9, 0, 90, 10, 0, 0, 1, 0],
        tcp: TcpParams {
            mss: 1460,
            snd_wscale: 7,
            rcv_wscale: 7,
            sack: true,
            timestamps: true,
            ts_val: 1,
            ts_unix_ms: 1,
            snd_wnd: 65535,
            rcv_wnd: 65535,
        },
        snd_seq: 0,
        rcv_seq: 0,
        established_unix_ms: 1,
    }
}

/// Median of `f`'s durations over the repetitions.
fn timed(
    min_time: Duration,
    mut f: impl FnMut() -> Result<(), StoreError>,
) -> Result<Duration, StoreError> {
    let mut times = Vec::new();
    let start = Instant::now();
    while times.len() < MIN_REPS || start.elapsed() < min_time {
        let t0 = Instant::now();
        f()?;
        times.push(t0.elapsed());
        if times.len() >= 100_000 {
            break;
        }
    }
    times.sort();
    Ok(times[times.len() / 2])
}

fn received(key: &str, ack: u32, payload: &Bytes) -> Op {
    Op::Received {
        key: key.to_string(),
        ack,
        updates: payload.clone(),
        partial: Bytes::new(),
    }
}

/// One round at one batch size: milliseconds per call of the four series.
fn step(
    url: &StoreUrl,
    size: usize,
    batch: usize,
    min_time: Duration,
) -> Result<[f64; 4], StoreError> {
    let timeout = Duration::from_secs(5);
    let payload = Bytes::from(vec![0x42u8; size]);
    let keys: Vec<String> = (0..batch)
        .map(|i| format!("10.{}.{}.{}", i / 62500, (i / 250) % 250, i % 250))
        .collect();
    let setup: Vec<Op> = keys
        .iter()
        .map(|k| Op::Session {
            key: k.clone(),
            record: record(),
        })
        .collect();

    let mut s = RedisStore::connect(url, &format!("w-spread-{batch}"), timeout)?;
    let e = s.claim()?;
    s.write(e, &setup)?;
    let mut ack = 0u32;
    let write_spread = timed(min_time, || {
        ack = ack.wrapping_add(size as u32);
        let ops: Vec<Op> = keys.iter().map(|k| received(k, ack, &payload)).collect();
        s.write(e, &ops)
    })?;

    let mut s1 = RedisStore::connect(url, &format!("w-one-{batch}"), timeout)?;
    let e1 = s1.claim()?;
    s1.write(
        e1,
        &[Op::Session {
            key: "p".into(),
            record: record(),
        }],
    )?;
    let mut ack = 0u32;
    let write_one = timed(min_time, || {
        let ops: Vec<Op> = (0..batch)
            .map(|_| {
                ack = ack.wrapping_add(size as u32);
                received("p", ack, &payload)
            })
            .collect();
        s1.write(e1, &ops)
    })?;

    let mut r = RedisStore::connect(url, &format!("r-spread-{batch}"), timeout)?;
    let er = r.claim()?;
    let mut ops = setup.clone();
    ops.extend(keys.iter().map(|k| received(k, size as u32, &payload)));
    r.write(er, &ops)?;
    let read_spread = timed(min_time, || {
        let st = r.load()?;
        if st.sessions.len() == batch {
            Ok(())
        } else {
            Err(StoreError::Unavailable(format!(
                "read {} sessions of {batch}",
                st.sessions.len()
            )))
        }
    })?;

    let mut r1 = RedisStore::connect(url, &format!("r-one-{batch}"), timeout)?;
    let er1 = r1.claim()?;
    r1.write(
        er1,
        &[Op::Session {
            key: "p".into(),
            record: record(),
        }],
    )?;
    for i in 0..batch {
        r1.write(er1, &[received("p", (size * (i + 1)) as u32, &payload)])?;
    }
    let read_one = timed(min_time, || {
        let st = r1.load()?;
        match st.sessions.first() {
            Some(x) if x.adj_in.len() == batch => Ok(()),
            _ => Err(StoreError::Unavailable("short read".into())),
        }
    })?;
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    Ok([
        ms(write_spread),
        ms(write_one),
        ms(read_spread),
        ms(read_one),
    ])
}

/// Fig. 5(b): for each batch size, the four series' cells (ms per call).
pub fn run(
    size: usize,
    batches: &[usize],
    rounds: usize,
    min_time: Duration,
    started: Instant,
) -> Result<Vec<[Cell; 4]>> {
    let mut lab = Lab::new("bench-5b")?;
    let h = lab.host("store")?;
    let redis = Redis::start(&mut lab, h, IpAddr::V4(Ipv4Addr::LOCALHOST), 6379)?;
    let url: StoreUrl = redis
        .url()
        .parse()
        .map_err(|e| anyhow!("store URL {}: {e:?}", redis.url()))?;
    let ns = lab.netns(h).to_string();
    let result = (|| -> Result<Vec<[Cell; 4]>> {
        // Warm-up (connections, allocator, CPU frequency).
        {
            let url = url.clone();
            in_netns(&ns, move || step(&url, size, 8, Duration::from_millis(300)))?
                .map_err(|e| anyhow!("store warm-up: {e}"))?;
        }
        let mut per: Vec<[Vec<f64>; 4]> = vec![Default::default(); batches.len()];
        for round in 0..rounds.max(1) {
            for (bi, &b) in batches.iter().enumerate() {
                redis.cli(&lab, &["FLUSHALL"])?;
                let url = url.clone();
                let v = in_netns(&ns, move || step(&url, size, b, min_time))?
                    .map_err(|e| anyhow!("store batch {b}: {e}"))?;
                println!(
                    "[{:>7.1}s] 5(b) {size} B records, batch {b}, round {}: write {:.3}/{:.3} ms, read {:.3}/{:.3} ms per call",
                    started.elapsed().as_secs_f64(),
                    round + 1,
                    v[0],
                    v[1],
                    v[2],
                    v[3]
                );
                for (k, x) in v.iter().enumerate() {
                    per[bi][k].push(*x);
                }
            }
        }
        Ok(per
            .into_iter()
            .zip(batches)
            .map(|(series, &b)| {
                series.map(|vals| {
                    let mut c = Cell::from_runs(&vals, None);
                    if let Some((m, _, _)) = c.value {
                        c.extra = vec![format!("{:.1}", m * 1e3 / b as f64)];
                    }
                    c
                })
            })
            .collect())
    })();
    redis.stop(&mut lab);
    lab.teardown();
    result
}

/// Batch sizes 1, 2, 4, … up to `max`.
pub fn batches(max: usize) -> Vec<usize> {
    let mut v = Vec::new();
    let mut b = 1;
    while b <= max.max(1) {
        v.push(b);
        b *= 2;
    }
    v
}
