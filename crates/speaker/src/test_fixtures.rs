//! Test fixtures shared by the crate's unit tests.

use holdfast_nsr::{SessionRecord, TcpParams, SCHEMA_VERSION};

/// A passive session's record (192.0.2.2:179 from 192.0.2.1:40000) with
/// the given OPEN bodies and sequence numbers.
pub(crate) fn session_record(
    (open_sent, open_received): (Vec<u8>, Vec<u8>),
    (snd_seq, rcv_seq): (u32, u32),
) -> SessionRecord {
    SessionRecord {
        schema: SCHEMA_VERSION,
        instance: "default".into(),
        peer: "192.0.2.1".parse().expect("addr"),
        local: "192.0.2.2:179".parse().expect("addr"),
        remote: "192.0.2.1:40000".parse().expect("addr"),
        outbound: false,
        open_sent,
        open_received,
        tcp: TcpParams {
            mss: 1460,
            snd_wscale: 7,
            rcv_wscale: 7,
            sack: true,
            timestamps: true,
            ts_val: 0,
            ts_unix_ms: 0,
            snd_wnd: 65535,
            rcv_wnd: 65535,
        },
        snd_seq,
        rcv_seq,
        established_unix_ms: 0,
    }
}
