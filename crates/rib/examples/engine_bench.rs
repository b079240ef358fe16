//! Throughput and memory of the RIB engine for 1M IPv4 /24 routes learned
//! from one eBGP peer and re-advertised to another.
//!
//! `cargo run --release -p holdfast-rib --example engine_bench [threads...]`
//!
//! `engine_bench MODE THREADS BATCH SILENT` adds SILENT more Established
//! eBGP peers that export nothing (`export = "none"`: a route server's or a
//! gateway's receive-only sessions), to measure what they cost the export
//! pass.

use std::net::{IpAddr, Ipv4Addr};
use std::time::Instant;

use holdfast_rib::{Engine, EngineConfig, Family, PeerSpec, PolicyRef};
use holdfast_wire::{
    encode_update, frame, AsPath, AsSegment, CodecCtx, Origin, PathAttrs, Prefix, Prefix4, Update,
};

/// CPU seconds used by all threads of this process (ns precision, from
/// /proc/self/task/*/schedstat).
fn cpu_s() -> f64 {
    let mut ns = 0u64;
    if let Ok(dir) = std::fs::read_dir("/proc/self/task") {
        for t in dir.flatten() {
            let s = std::fs::read_to_string(t.path().join("schedstat")).unwrap_or_default();
            ns += s
                .split_whitespace()
                .next()
                .and_then(|x| x.parse::<u64>().ok())
                .unwrap_or(0);
        }
    }
    ns as f64 / 1e9
}

/// Resident set size in kB from /proc/self/status.
fn rss_kb() -> u64 {
    let s = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    s.lines()
        .find(|l| l.starts_with("VmRSS:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

const ROUTES: u32 = 1_000_000;

fn spec(id: u32, asn: u32) -> PeerSpec {
    PeerSpec {
        id,
        address: IpAddr::V4(Ipv4Addr::from(0xc612_0000 + id)),
        remote_as: asn,
        local_as: 65000,
        router_id: Ipv4Addr::from(0x0101_0000 + id),
        local_addr_v4: Some(Ipv4Addr::new(192, 0, 2, 254)),
        local_addr_v6: None,
        local_addr_v6_ll: None,
        import: PolicyRef::All,
        export: PolicyRef::All,
        rr_client: false,
        next_hop_self: false,
        max_prefix: None,
        families: vec![Family::IPV4_UNICAST],
        four_octet_as: true,
    }
}

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

/// Generates UPDATE bodies on demand, `want` messages at a time.
struct Workload {
    realistic: bool,
    rng: Rng,
    n: u32,
    set: u32,
}

impl Workload {
    fn new(realistic: bool) -> Self {
        Workload {
            realistic,
            rng: Rng(0x1234_5678_9abc_def1),
            n: 0,
            set: 0,
        }
    }

    fn take(&mut self, want: usize) -> Vec<Vec<u8>> {
        let realistic = self.realistic;
        let rng = &mut self.rng;
        let ctx = CodecCtx {
            four_octet_as: true,
            ibgp: false,
        };
        let mut out = Vec::new();
        let mut n = self.n;
        let mut set = self.set;
        let mut buf = Vec::new();
        while n < ROUTES && out.len() < want {
            let (count, attrs) = if realistic {
                let len = 2 + (rng.next() % 5) as usize;
                let mut path = vec![65001];
                for _ in 1..len {
                    path.push(1000 + (rng.next() % 60000) as u32);
                }
                let comms = (0..(rng.next() % 4))
                    .map(|_| (65001 << 16) | (rng.next() % 1000) as u32)
                    .collect();
                let a = PathAttrs {
                    origin: Some(Origin::Igp),
                    as_path: AsPath {
                        segments: vec![AsSegment::Sequence(path)],
                    },
                    next_hop: Some(Ipv4Addr::new(192, 0, 2, 1)),
                    med: Some(set % 7),
                    communities: comms,
                    ..PathAttrs::default()
                };
                (2 + (rng.next() % 2) as u32, a)
            } else {
                let a = PathAttrs {
                    origin: Some(Origin::Igp),
                    as_path: AsPath {
                        segments: vec![AsSegment::Sequence(vec![65001, 100 + set, 200 + set % 50])],
                    },
                    next_hop: Some(Ipv4Addr::new(192, 0, 2, 1)),
                    communities: vec![(65001 << 16) | (set % 100)],
                    ..PathAttrs::default()
                };
                (500, a)
            };
            let count = count.min(ROUTES - n);
            let announced = (n..n + count)
                .map(|i| {
                    Prefix::V4(Prefix4 {
                        addr: (0x0100_0000 + i) << 8,
                        len: 24,
                    })
                })
                .collect();
            n += count;
            set += 1;
            buf.clear();
            encode_update(
                &Update {
                    withdrawn: vec![],
                    attrs: Some(attrs),
                    announced,
                    end_of_rib: None,
                },
                &ctx,
                &mut buf,
            );
            let mut i = 0;
            while i < buf.len() {
                let (_, len) = frame(&buf[i..]).expect("frame").expect("whole");
                out.push(buf[i + 19..i + len].to_vec());
                i += len;
            }
        }
        self.n = n;
        self.set = set;
        out
    }
}

fn run(name: &str, realistic: bool, threads: usize, chunk: usize, silent: u32) {
    let mut w = Workload::new(realistic);
    let cfg = EngineConfig {
        local_as: 65000,
        router_id: Ipv4Addr::new(10, 0, 0, 1),
        cluster_id: None,
        shards: 32,
        threads,
        always_compare_med: false,
        default_local_pref: 100,
        fib_ecmp: 0,
    };
    let mut e = Engine::new(cfg);
    e.add_peer(spec(1, 65001));
    e.add_peer(spec(2, 65002));
    e.peer_up(spec(1, 65001));
    e.peer_up(spec(2, 65002));
    for id in 3..3 + silent {
        let s = PeerSpec {
            export: PolicyRef::None,
            ..spec(id, 66000 + id)
        };
        e.add_peer(s.clone());
        e.peer_up(s);
    }
    // Cost of generating the input alone (deterministic, same work),
    // subtracted from the measured loop below.
    let (gen_wall, gen_cpu) = {
        let mut dry = Workload::new(realistic);
        let (t, c) = (Instant::now(), cpu_s());
        while !dry.take(chunk).is_empty() {}
        (t.elapsed(), cpu_s() - c)
    };
    let rss0 = rss_kb();
    let mut bytes = 0usize;
    let mut nmsgs = 0usize;
    let (t, c) = (Instant::now(), cpu_s());
    loop {
        let msgs = w.take(chunk);
        if msgs.is_empty() {
            break;
        }
        nmsgs += msgs.len();
        let batch: Vec<(u32, Vec<u8>)> = msgs.into_iter().map(|m| (1, m)).collect();
        let out = e.apply_raw(batch);
        bytes += out.messages.iter().map(|(_, m)| m.len()).sum::<usize>();
    }
    let dt = t.elapsed().saturating_sub(gen_wall);
    let cpu = (cpu_s() - c - gen_cpu).max(0.0);
    let rss = rss_kb().saturating_sub(rss0);
    let c1 = e.counts(1);
    let c2 = e.counts(2);
    println!(
        "{name:9} threads={threads} silent={silent} batch={:>6}: wall {:6.3} s cpu {:6.3} s  msgs_in={nmsgs} out_bytes={bytes} attr_sets={} rss_delta={:.1} MB accepted={} advertised={}",
        if chunk == usize::MAX { "all".to_string() } else { chunk.to_string() },
        dt.as_secs_f64(),
        cpu,
        e.attr_sets(),
        rss as f64 / 1024.0,
        c1.accepted,
        c2.advertised
    );
}

/// Without arguments, runs every case in a fresh process (so that RSS
/// deltas are not hidden by memory freed by an earlier case). With
/// `packed|realistic THREADS BATCH [SILENT]` (BATCH 0 = whole stream in one
/// call), runs one case.
fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.len() == 3 || args.len() == 4 {
        let threads = args[1].parse().unwrap_or(1);
        let chunk = match args[2].parse().unwrap_or(0) {
            0 => usize::MAX,
            n => n,
        };
        let silent = args.get(3).and_then(|a| a.parse().ok()).unwrap_or(0);
        run(&args[0], args[0] == "realistic", threads, chunk, silent);
        return;
    }
    let exe = std::env::current_exe().expect("current exe");
    for threads in ["1", "2"] {
        for mode in ["packed", "realistic"] {
            for batch in ["0", "256"] {
                let st = std::process::Command::new(&exe)
                    .args([mode, threads, batch])
                    .status();
                if !st.is_ok_and(|s| s.success()) {
                    eprintln!("{mode} {threads} {batch} failed");
                }
            }
        }
    }
}
