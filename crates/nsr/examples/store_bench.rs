//! TENSOR Fig. 5(b) for the Redis store: time per record of a write and of
//! a read, against the number of records per call.
//!
//! Starts its own redis-server (no persistence) on a free loopback port and
//! measures, for records of `--size` bytes (default: 100, like a small
//! UPDATE, and 4096) and batches of 1, 2, 4, ... `--max-batch` records:
//! - write, B sessions: one `write` of B `Received` ops, one per session
//!   (nothing to merge: B list appends in one script call);
//! - write, 1 session: one `write` of B `Received` ops of one session
//!   (merged by the client into one append);
//! - read, B sessions: `load` of an instance of B sessions holding one
//!   record each (B × six keys, one `MULTI`/`EXEC`);
//! - read, 1 session: `load` of one session whose log holds B records.
//!
//! Each figure is the median over repetitions (at least `--min-reps`, and
//! for at least `--min-time-ms`), divided by B. `--json` prints JSON lines.
//!
//! ```text
//! cargo run --release -p holdfast-nsr --example store_bench [-- --json]
//! ```
//!
//! Known issues: loopback only (no network latency), one client, and
//! redis-server runs on the same cores as the client.

#[path = "../tests/common/mod.rs"]
mod common;

use bytes::Bytes;
use holdfast_nsr::{Op, RedisStore, SessionRecord, Store, StoreError, TcpParams, SCHEMA_VERSION};
use std::time::{Duration, Instant};

struct Args {
    json: bool,
    sizes: Vec<usize>,
    max_batch: usize,
    min_time: Duration,
    min_reps: usize,
}

fn parse_args() -> Result<Args, String> {
    let mut a = Args {
        json: false,
        sizes: vec![100, 4096],
        max_batch: 1024,
        min_time: Duration::from_millis(200),
        min_reps: 5,
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        let mut val = |name: &str| it.next().ok_or(format!("{name} needs a value"));
        match arg.as_str() {
            "--json" => a.json = true,
            "--size" => {
                a.sizes = val("--size")?
                    .split(',')
                    .map(|s| s.parse().map_err(|e| format!("--size: {e}")))
                    .collect::<Result<_, _>>()?
            }
            "--max-batch" => {
                a.max_batch = val("--max-batch")?
                    .parse()
                    .map_err(|e| format!("--max-batch: {e}"))?
            }
            "--min-time-ms" => {
                a.min_time = Duration::from_millis(
                    val("--min-time-ms")?
                        .parse()
                        .map_err(|e| format!("--min-time-ms: {e}"))?,
                )
            }
            "--min-reps" => {
                a.min_reps = val("--min-reps")?
                    .parse()
                    .map_err(|e| format!("--min-reps: {e}"))?
            }
            "-h" | "--help" => {
                println!(
                    "store_bench [--json] [--size 100,4096] [--max-batch 1024] \
                     [--min-time-ms 200] [--min-reps 5]"
                );
                std::process::exit(0);
            }
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    Ok(a)
}

fn record(snd: u32, rcv: u32) -> SessionRecord {
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
        snd_seq: snd,
        rcv_seq: rcv,
        established_unix_ms: 1,
    }
}

/// Median of `f`'s durations over the repetitions.
fn measure(
    min_time: Duration,
    min_reps: usize,
    mut f: impl FnMut() -> Result<(), StoreError>,
) -> Result<Duration, StoreError> {
    let mut times = Vec::new();
    let start = Instant::now();
    while times.len() < min_reps || start.elapsed() < min_time {
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

struct Row {
    size: usize,
    batch: usize,
    write_spread: Duration,
    write_one: Duration,
    read_spread: Duration,
    read_one: Duration,
}

fn us_per(d: Duration, n: usize) -> f64 {
    d.as_secs_f64() * 1e6 / n as f64
}

fn run(args: &Args, url: &holdfast_nsr::StoreUrl, port: u16) -> Result<Vec<Row>, StoreError> {
    let timeout = Duration::from_secs(5);
    let mut rows = Vec::new();
    for &size in &args.sizes {
        let payload = Bytes::from(vec![0x42u8; size]);
        let mut batch = 1;
        while batch <= args.max_batch {
            let mut raw = common::raw_conn(port);
            let _: () = redis::cmd("FLUSHALL")
                .query(&mut raw)
                .map_err(|e| StoreError::Unavailable(e.to_string()))?;

            // Writes, B sessions.
            let mut s = RedisStore::connect(url, "w-spread", timeout)?;
            let e = s.claim()?;
            let keys: Vec<String> = (0..batch)
                .map(|i| format!("10.0.{}.{}", i / 250, i % 250))
                .collect();
            let setup: Vec<Op> = keys
                .iter()
                .map(|k| Op::Session {
                    key: k.clone(),
                    record: record(0, 0),
                })
                .collect();
            s.write(e, &setup)?;
            let mut ack = 0u32;
            let write_spread = measure(args.min_time, args.min_reps, || {
                ack = ack.wrapping_add(size as u32);
                let ops: Vec<Op> = keys
                    .iter()
                    .map(|k| Op::Received {
                        key: k.clone(),
                        ack,
                        updates: payload.clone(),
                        partial: bytes::Bytes::new(),
                    })
                    .collect();
                s.write(e, &ops)
            })?;

            // Writes, one session.
            let mut s1 = RedisStore::connect(url, "w-one", timeout)?;
            let e1 = s1.claim()?;
            s1.write(
                e1,
                &[Op::Session {
                    key: "p".into(),
                    record: record(0, 0),
                }],
            )?;
            let mut ack = 0u32;
            let write_one = measure(args.min_time, args.min_reps, || {
                let ops: Vec<Op> = (0..batch)
                    .map(|_| {
                        ack = ack.wrapping_add(size as u32);
                        Op::Received {
                            key: "p".into(),
                            ack,
                            updates: payload.clone(),
                            partial: bytes::Bytes::new(),
                        }
                    })
                    .collect();
                s1.write(e1, &ops)
            })?;
            let _: () = redis::cmd("FLUSHALL")
                .query(&mut raw)
                .map_err(|e| StoreError::Unavailable(e.to_string()))?;

            // Reads, B sessions of one record each.
            let mut r = RedisStore::connect(url, "r-spread", timeout)?;
            let er = r.claim()?;
            let mut ops = setup.clone();
            ops.extend(keys.iter().map(|k| Op::Received {
                key: k.clone(),
                ack: size as u32,
                updates: payload.clone(),
                partial: bytes::Bytes::new(),
            }));
            r.write(er, &ops)?;
            let read_spread = measure(args.min_time, args.min_reps, || {
                let st = r.load()?;
                assert_eq!(st.sessions.len(), batch);
                Ok(())
            })?;

            // Reads, one session of B records (separate writes: B chunks).
            let mut r1 = RedisStore::connect(url, "r-one", timeout)?;
            let er1 = r1.claim()?;
            r1.write(
                er1,
                &[Op::Session {
                    key: "p".into(),
                    record: record(0, 0),
                }],
            )?;
            for i in 0..batch {
                r1.write(
                    er1,
                    &[Op::Received {
                        key: "p".into(),
                        ack: (size * (i + 1)) as u32,
                        updates: payload.clone(),
                        partial: bytes::Bytes::new(),
                    }],
                )?;
            }
            let read_one = measure(args.min_time, args.min_reps, || {
                let st = r1.load()?;
                assert_eq!(st.sessions[0].adj_in.len(), batch);
                Ok(())
            })?;

            let row = Row {
                size,
                batch,
                write_spread,
                write_one,
                read_spread,
                read_one,
            };
            if args.json {
                println!(
                    "{{\"record_bytes\":{},\"batch\":{},\"write_us_per_record_b_sessions\":{:.2},\
                     \"write_us_per_record_1_session\":{:.2},\"write_ms_per_call_b_sessions\":{:.3},\
                     \"read_us_per_record_b_sessions\":{:.2},\"read_us_per_record_1_session\":{:.2}}}",
                    size,
                    batch,
                    us_per(write_spread, batch),
                    us_per(write_one, batch),
                    write_spread.as_secs_f64() * 1e3,
                    us_per(read_spread, batch),
                    us_per(read_one, batch),
                );
            }
            rows.push(row);
            batch *= 2;
        }
    }
    Ok(rows)
}

fn warm_up(url: &holdfast_nsr::StoreUrl) -> Result<(), StoreError> {
    let mut s = RedisStore::connect(url, "warm-up", Duration::from_secs(5))?;
    let e = s.claim()?;
    s.write(
        e,
        &[Op::Session {
            key: "p".into(),
            record: record(0, 0),
        }],
    )?;
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_millis(300) {
        s.write(
            e,
            &[
                Op::Received {
                    key: "p".into(),
                    ack: 100,
                    updates: Bytes::from_static(&[0x42; 100]),
                    partial: bytes::Bytes::new(),
                },
                Op::Snapshot {
                    key: "p".into(),
                    adj_in: Bytes::new(),
                    adj_out: Bytes::new(),
                },
            ],
        )?;
        s.load()?;
    }
    Ok(())
}

fn main() {
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("store_bench: {e}");
            std::process::exit(2);
        }
    };
    let server = common::RedisProc::start();
    let version: String = redis::cmd("INFO")
        .arg("server")
        .query::<String>(&mut server.raw())
        .ok()
        .and_then(|i| {
            i.lines()
                .find_map(|l| l.strip_prefix("redis_version:").map(str::to_string))
        })
        .unwrap_or_default();
    // Warm-up (connections, allocator, CPU frequency): 300 ms of writes.
    if let Err(e) = warm_up(&server.url()) {
        eprintln!("store_bench: {e}");
        std::process::exit(1);
    }
    let rows = match run(&args, &server.url(), server.port) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("store_bench: {e}");
            std::process::exit(1);
        }
    };
    if args.json {
        return;
    }
    println!(
        "redis-server {version} on loopback; median of >= {} reps / {:?}; µs per record",
        args.min_reps, args.min_time
    );
    println!(
        "{:>6} {:>6} | {:>12} {:>12} {:>12} | {:>12} {:>12}",
        "bytes", "batch", "write B-sess", "write 1-sess", "ms/call B", "read B-sess", "read 1-sess"
    );
    for r in &rows {
        println!(
            "{:>6} {:>6} | {:>12.2} {:>12.2} {:>12.3} | {:>12.2} {:>12.2}",
            r.size,
            r.batch,
            us_per(r.write_spread, r.batch),
            us_per(r.write_one, r.batch),
            r.write_spread.as_secs_f64() * 1e3,
            us_per(r.read_spread, r.batch),
            us_per(r.read_one, r.batch),
        );
    }
}
