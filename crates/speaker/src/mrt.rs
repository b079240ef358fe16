//! MRT output (RFC 6396, encoders in `holdfast_wire::mrt`): table dumps
//! (`holdfast dump mrt FILE --table loc|in|out`, and `[[mrt]] kind =
//! "table"` on a timer) and the BGP4MP log of the UPDATEs received from
//! neighbours (`[[mrt]] kind = "updates"`).
//!
//! A dump is taken from one answer of the instance's RIB thread, encoded
//! off the I/O thread, written to `FILE.tmp` and renamed over `FILE`, so a
//! reader never sees half a dump. Peer index 0 is this speaker (its router
//! ID and AS, address 0.0.0.0): the Loc-RIB's locally originated routes
//! name it. The in and out tables without a neighbour hold every
//! neighbour's routes, one entry per neighbour under each prefix.
//!
//! The updates log gets every UPDATE a session receives, whole and as it
//! came (BGP4MP_ET / BGP4MP_MESSAGE_AS4, microsecond timestamps), and its
//! state changes (BGP4MP_STATE_CHANGE_AS4). Sessions hand records to one
//! writer task through a bounded queue and never wait for the disk: when
//! the queue is full the record is dropped and counted
//! (`mrt_records_dropped` in the log when the file rotates or closes).
//!
//! # Known issues
//! - A route's "originated time" in a dump is the time of the dump: the RIB
//!   does not keep when each route was learned.
//! - Dumps and logs cover unicast IPv4 and IPv6 only.

use std::collections::BTreeMap;
use std::io::Write;
use std::net::{IpAddr, Ipv4Addr};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use holdfast_rib::{PathAttrs, PeerId, Prefix, LOCAL_PEER};
use holdfast_wire::mrt::{self, MrtPeer, MrtRibEntry, MrtSession, MrtState};
use tokio::sync::mpsc;

/// Seconds and microseconds since the epoch, now.
pub fn now() -> (u32, u32) {
    let d = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    (d.as_secs() as u32, d.subsec_micros())
}

/// What one table dump holds.
pub struct DumpInput {
    pub secs: u32,
    /// This speaker: the collector's BGP ID and peer index 0.
    pub router_id: Ipv4Addr,
    pub local_as: u32,
    /// The instance's name, written as the view name.
    pub view: String,
    /// Every neighbour the routes may name, with what the index table says
    /// about it.
    pub peers: Vec<(PeerId, MrtPeer)>,
    pub routes: Vec<(Prefix, PeerId, Arc<PathAttrs>, bool)>,
}

/// What a dump wrote.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DumpStats {
    pub prefixes: u64,
    pub routes: u64,
    pub bytes: u64,
}

/// Encodes a PEER_INDEX_TABLE and one RIB record per prefix, prefixes in
/// order (IPv4 before IPv6), sequence numbers from 0.
pub fn encode_dump(input: DumpInput) -> (Vec<u8>, DumpStats) {
    let mut index: Vec<MrtPeer> = vec![MrtPeer {
        bgp_id: input.router_id,
        address: IpAddr::V4(Ipv4Addr::UNSPECIFIED),
        asn: input.local_as,
    }];
    let mut slot: BTreeMap<PeerId, u16> = BTreeMap::new();
    slot.insert(LOCAL_PEER, 0);
    for (id, p) in input.peers.iter().take(u16::MAX as usize - 1) {
        slot.insert(*id, index.len() as u16);
        index.push(*p);
    }
    let mut out = Vec::with_capacity(64 + input.routes.len() * 64);
    mrt::peer_index_table(input.secs, input.router_id, &input.view, &index, &mut out);
    // Each route's peer id becomes its peer's index (in place: the table
    // may hold millions), routes of peers not in the index left out, in
    // (prefix, index) order.
    let mut rows = input.routes;
    rows.retain_mut(|r| match slot.get(&r.1) {
        Some(&i) => {
            r.1 = PeerId::from(i);
            true
        }
        None => false,
    });
    rows.sort_unstable_by_key(|r| (r.0, r.1));
    let mut stats = DumpStats::default();
    let mut entries: Vec<MrtRibEntry<'_>> = Vec::new();
    for group in rows.chunk_by(|a, b| a.0 == b.0) {
        entries.clear();
        entries.extend(group.iter().map(|r| MrtRibEntry {
            peer_index: r.1 as u16,
            originated: input.secs,
            attrs: &r.2,
        }));
        mrt::rib_record(
            input.secs,
            stats.prefixes as u32,
            &group[0].0,
            &entries,
            &mut out,
        );
        stats.prefixes += 1;
        stats.routes += entries.len() as u64;
    }
    stats.bytes = out.len() as u64;
    (out, stats)
}

/// Writes `bytes` to `path` through `path.tmp` and a rename.
pub fn write_atomically(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    let tmp = PathBuf::from(tmp);
    {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(bytes)?;
        f.sync_data()?;
    }
    std::fs::rename(&tmp, path)
}

/// `template` with `%Y %m %d %H %M %S` (UTC), `%s` (seconds since the
/// epoch) and `%%` replaced for the time `secs`.
pub fn expand_file(template: &str, secs: u64) -> String {
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    let (y, m, d) = civil_from_days(days);
    let mut out = String::with_capacity(template.len() + 16);
    let mut chars = template.chars();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('Y') => out.push_str(&format!("{y:04}")),
            Some('m') => out.push_str(&format!("{m:02}")),
            Some('d') => out.push_str(&format!("{d:02}")),
            Some('H') => out.push_str(&format!("{:02}", rem / 3600)),
            Some('M') => out.push_str(&format!("{:02}", rem / 60 % 60)),
            Some('S') => out.push_str(&format!("{:02}", rem % 60)),
            Some('s') => out.push_str(&secs.to_string()),
            Some('%') => out.push('%'),
            Some(other) => {
                out.push('%');
                out.push(other);
            }
            None => out.push('%'),
        }
    }
    out
}

/// Year, month, day of a day count since 1970-01-01 (Howard Hinnant's
/// `civil_from_days`).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

/// Records waiting for the updates log's writer, at most.
const LOG_QUEUE: usize = 65_536;

/// A session's handle on an updates log: cheap to clone, never blocks.
#[derive(Clone)]
pub struct UpdateLog {
    tx: mpsc::Sender<Vec<u8>>,
    dropped: Arc<AtomicU64>,
}

impl UpdateLog {
    /// Logs one received message (`body` without its 19-octet header).
    pub fn message(&self, session: &MrtSession, msg_type: u8, body: &[u8]) {
        let (secs, micros) = now();
        let mut rec = Vec::new();
        mrt::bgp4mp_message(secs, micros, session, msg_type, body, &mut rec);
        self.push(rec);
    }

    /// Logs a session state change.
    pub fn state(&self, session: &MrtSession, from: MrtState, to: MrtState) {
        let (secs, micros) = now();
        let mut rec = Vec::with_capacity(64);
        mrt::bgp4mp_state_change(secs, micros, session, from, to, &mut rec);
        self.push(rec);
    }

    fn push(&self, rec: Vec<u8>) {
        if self.tx.try_send(rec).is_err() {
            self.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// BGP4MP's number for an RFC 4271 state.
pub fn mrt_state(s: holdfast_fsm::State) -> MrtState {
    use holdfast_fsm::State;
    match s {
        State::Idle => MrtState::Idle,
        State::Connect => MrtState::Connect,
        State::Active => MrtState::Active,
        State::OpenSent => MrtState::OpenSent,
        State::OpenConfirm => MrtState::OpenConfirm,
        State::Established => MrtState::Established,
    }
}

/// Starts the writer of an updates log: appends to the file named by
/// `template` for the current time, and starts the next file every
/// `rotate` (none: one file). Ends when every [`UpdateLog`] is dropped.
pub fn spawn_update_log(template: String, rotate: Option<Duration>) -> UpdateLog {
    let (tx, mut rx) = mpsc::channel::<Vec<u8>>(LOG_QUEUE);
    let dropped = Arc::new(AtomicU64::new(0));
    let log = UpdateLog {
        tx,
        dropped: dropped.clone(),
    };
    tokio::spawn(async move {
        let mut file: Option<(String, std::fs::File)> = None;
        let mut opened_at = 0u64;
        let mut batch: Vec<u8> = Vec::new();
        while let Some(first) = rx.recv().await {
            batch.clear();
            batch.extend_from_slice(&first);
            while batch.len() < (1 << 20) {
                match rx.try_recv() {
                    Ok(r) => batch.extend_from_slice(&r),
                    Err(_) => break,
                }
            }
            let secs = u64::from(now().0);
            let due = rotate.is_some_and(|r| secs >= opened_at + r.as_secs().max(1));
            if file.is_none() || due {
                let start = match rotate {
                    Some(r) => secs - secs % r.as_secs().max(1),
                    None => secs,
                };
                let name = expand_file(&template, start);
                if let Some((old, _)) = file.take() {
                    report_dropped(&old, &dropped);
                }
                match std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(&name)
                {
                    Ok(f) => {
                        tracing::info!(file = %name, "MRT updates log opened");
                        file = Some((name, f));
                        opened_at = start;
                    }
                    Err(e) => {
                        tracing::warn!(file = %name, error = %e, "MRT updates log: cannot open; records dropped");
                        dropped.fetch_add(1, Ordering::Relaxed);
                        continue;
                    }
                }
            }
            if let Some((name, f)) = file.as_mut() {
                if let Err(e) = f.write_all(&batch) {
                    tracing::warn!(file = %name, error = %e, "MRT updates log: write failed; records dropped");
                    dropped.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
        if let Some((name, _)) = file {
            report_dropped(&name, &dropped);
        }
    });
    log
}

fn report_dropped(file: &str, dropped: &AtomicU64) {
    let n = dropped.swap(0, Ordering::Relaxed);
    if n > 0 {
        tracing::warn!(
            file,
            mrt_records_dropped = n,
            "MRT updates log: records dropped (queue full or write failed)"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use holdfast_wire::{AsPath, AsSegment};

    #[test]
    fn file_names_take_the_utc_time() {
        // 2026-11-25 04:51:29 UTC.
        let t = 1_795_582_289;
        assert_eq!(
            expand_file("/var/lib/holdfast/rib.%Y%m%d.%H%M%S.mrt", t),
            "/var/lib/holdfast/rib.20261125.045129.mrt"
        );
        assert_eq!(expand_file("u.%s.%%.%q", 7), "u.7.%.%q");
        assert_eq!(expand_file("%Y-%m-%d", 951_782_400), "2000-02-29");
        assert_eq!(expand_file("%Y-%m-%d", 0), "1970-01-01");
    }

    fn attrs(asn: u32) -> Arc<PathAttrs> {
        Arc::new(PathAttrs {
            as_path: AsPath {
                segments: vec![AsSegment::Sequence(vec![asn])],
            },
            next_hop: Some(Ipv4Addr::new(192, 0, 2, 1)),
            ..PathAttrs::default()
        })
    }

    #[test]
    fn a_dump_groups_each_prefix_and_names_ourselves_at_index_0() {
        let peer = |n: u8| MrtPeer {
            bgp_id: Ipv4Addr::new(192, 0, 2, n),
            address: IpAddr::V4(Ipv4Addr::new(192, 0, 2, n)),
            asn: 65000 + u32::from(n),
        };
        let p1: Prefix = "10.1.0.0/16".parse().unwrap();
        let p2: Prefix = "10.2.0.0/16".parse().unwrap();
        let input = DumpInput {
            secs: 1_700_000_000,
            router_id: Ipv4Addr::new(198, 51, 100, 1),
            local_as: 65000,
            view: "default".into(),
            peers: vec![(7, peer(1)), (9, peer(2))],
            routes: vec![
                (p2, LOCAL_PEER, attrs(65000), true),
                (p1, 9, attrs(65002), true),
                (p1, 7, attrs(65001), true),
                (p1, 12345, attrs(1), true),
            ],
        };
        let (bytes, stats) = encode_dump(input);
        assert_eq!(
            stats,
            DumpStats {
                prefixes: 2,
                routes: 3,
                bytes: bytes.len() as u64
            },
            "a route of a peer not in the index is left out"
        );
        let elems: Vec<_> = bgpkit_parser::BgpkitParser::from_reader(&bytes[..])
            .into_iter()
            .map(|e| {
                (
                    e.prefix.prefix.to_string(),
                    e.peer_ip.to_string(),
                    u32::from(e.peer_asn),
                )
            })
            .collect();
        assert_eq!(
            elems,
            vec![
                ("10.1.0.0/16".into(), "192.0.2.1".into(), 65001),
                ("10.1.0.0/16".into(), "192.0.2.2".into(), 65002),
                ("10.2.0.0/16".into(), "0.0.0.0".into(), 65000),
            ]
        );
    }
}
