//! The bytes of a replicated connection that the peer may not have
//! acknowledged yet, kept in memory whether or not the store answers.
//!
//! A session is written to the store anew at Established and after a store
//! outage (TENSOR §3.1.2 keeps the unacknowledged send buffer in the
//! backup). The record's send sequence must not pass the peer's ACK: a
//! backup that restored a send queue starting after bytes the peer never
//! got would leave a hole in the peer's stream that nobody can fill (its
//! TCP waits for them, then its hold timer expires). So the session record
//! takes its `snd_seq` from [`Unacked::base`] and is followed by one `Sent`
//! holding [`Unacked::op`]'s bytes.
//!
//! The chunks share the writer's buffers (`Bytes`), so keeping them costs
//! no copy; they are dropped once the kernel reports them acknowledged
//! (`SIOCOUTQ`), at the latest when the tail has doubled since the last
//! trim.
//!
//! Known issues: the tail is trimmed by whole chunks, so a large write
//! stays until all of it is acknowledged.

use bytes::Bytes;
use holdfast_nsr::Op;
use std::collections::VecDeque;

/// Never trim more often than once per this many bytes kept.
pub const TRIM_MIN: usize = 256 * 1024;

/// See the module documentation.
#[derive(Debug)]
pub struct Unacked {
    /// `(seq_end, bytes)`, oldest first, contiguous.
    chunks: VecDeque<(u32, Bytes)>,
    len: usize,
    trim_at: usize,
}

impl Default for Unacked {
    fn default() -> Self {
        Unacked {
            chunks: VecDeque::new(),
            len: 0,
            trim_at: TRIM_MIN,
        }
    }
}

/// `a` at or after `b` in mod-2^32 sequence space.
fn seq_ge(a: u32, b: u32) -> bool {
    (a.wrapping_sub(b) as i32) >= 0
}

impl Unacked {
    /// A restored connection: its send queue, ending at `seq_end`.
    pub fn restored(seq_end: u32, queue: Bytes) -> Unacked {
        let mut u = Unacked::default();
        if !queue.is_empty() {
            u.push(seq_end, queue);
        }
        u
    }

    /// Appends bytes written after the others, ending at `seq_end`.
    /// Returns whether the tail is due for a [`trim`](Self::trim).
    pub fn push(&mut self, seq_end: u32, bytes: Bytes) -> bool {
        self.len += bytes.len();
        self.chunks.push_back((seq_end, bytes));
        self.len > self.trim_at
    }

    /// Drops the chunks that end at or before `una` (a lower bound of the
    /// peer's cumulative ACK). `None`: the ACK could not be read; trim
    /// again only once the tail doubled.
    pub fn trim(&mut self, una: Option<u32>) {
        if let Some(una) = una {
            while let Some((end, b)) = self.chunks.front() {
                if !seq_ge(una, *end) {
                    break;
                }
                self.len -= b.len();
                self.chunks.pop_front();
            }
        }
        self.trim_at = (2 * self.len).max(TRIM_MIN);
    }

    /// Sequence number of the oldest byte kept, or `snd_next` when there
    /// is none.
    pub fn base(&self, snd_next: u32) -> u32 {
        self.chunks
            .front()
            .map_or(snd_next, |(end, b)| end.wrapping_sub(b.len() as u32))
    }

    /// Bytes kept.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.chunks.is_empty()
    }

    /// Everything kept as one `Sent` of session `key`, to follow its
    /// record; `None` when nothing is kept.
    pub fn op(&self, key: &str) -> Option<Op> {
        let (end, _) = self.chunks.back()?;
        let bytes = if self.chunks.len() == 1 {
            self.chunks[0].1.clone()
        } else {
            let mut v = Vec::with_capacity(self.len);
            for (_, b) in &self.chunks {
                v.extend_from_slice(b);
            }
            Bytes::from(v)
        };
        Some(Op::Sent {
            key: key.to_string(),
            seq_end: *end,
            bytes,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tail(start: u32, sizes: &[usize]) -> Unacked {
        let mut u = Unacked::default();
        let mut seq = start;
        for (i, n) in sizes.iter().enumerate() {
            seq = seq.wrapping_add(*n as u32);
            u.push(seq, Bytes::from(vec![i as u8; *n]));
        }
        u
    }

    #[test]
    fn base_is_the_oldest_byte_kept_or_snd_next() {
        let u = tail(1000, &[10, 20]);
        assert_eq!(u.base(1030), 1000);
        assert_eq!(u.len(), 30);
        assert_eq!(Unacked::default().base(77), 77);
    }

    #[test]
    fn trim_drops_whole_acknowledged_chunks_only() {
        let mut u = tail(1000, &[10, 20, 5]);
        u.trim(Some(1015));
        assert_eq!(
            (u.base(1035), u.len()),
            (1010, 25),
            "the chunk 1010..1030 is kept"
        );
        u.trim(Some(1030));
        assert_eq!((u.base(1035), u.len()), (1030, 5));
        u.trim(Some(1035));
        assert!(u.is_empty());
        assert_eq!(u.base(1035), 1035);
    }

    #[test]
    fn trim_across_the_sequence_wrap() {
        let mut u = tail(u32::MAX - 4, &[10, 10]);
        assert_eq!(u.base(15), u32::MAX - 4);
        u.trim(Some(5));
        assert_eq!((u.base(15), u.len()), (5, 10));
        u.trim(Some(u32::MAX - 100));
        assert_eq!(u.len(), 10, "an older ACK trims nothing");
    }

    #[test]
    fn op_is_every_byte_kept_ending_at_the_last_chunk() {
        let u = tail(1000, &[3, 2]);
        let Some(Op::Sent {
            key,
            seq_end,
            bytes,
            ..
        }) = u.op("k")
        else {
            panic!("a Sent")
        };
        assert_eq!((key.as_str(), seq_end), ("k", 1005));
        assert_eq!(&bytes[..], &[0, 0, 0, 1, 1]);
        assert!(Unacked::default().op("k").is_none());
    }

    #[test]
    fn push_asks_for_a_trim_once_the_tail_doubled() {
        let mut u = Unacked::default();
        assert!(!u.push(100, Bytes::from(vec![0; TRIM_MIN])));
        assert!(u.push(101, Bytes::from(vec![0; 1])));
        u.trim(None);
        assert!(!u.push(102, Bytes::from(vec![0; TRIM_MIN])));
        assert!(u.push(103 + TRIM_MIN as u32, Bytes::from(vec![0; TRIM_MIN + 1])));
    }

    #[test]
    fn restored_keeps_the_send_queue() {
        let u = Unacked::restored(500, Bytes::from_static(b"abc"));
        assert_eq!((u.base(500), u.len()), (497, 3));
        assert!(Unacked::restored(500, Bytes::new()).is_empty());
    }
}
