//! The handle's guarantees; the decisions are tested in `gate/tests.rs`,
//! the codec in `nfq/codec.rs`, the whole gate against the kernel in
//! `tests/ack_gate.rs`.

use super::*;

#[test]
fn gate_is_send_and_sync() {
    fn check<T: Send + Sync>() {}
    check::<AckGate>();
    check::<std::sync::Arc<AckGate>>();
}

#[test]
fn id_sequence_is_read_from_the_queue_line() {
    let text = "    0  12345     0 2 65531     0     0        7  1\n 1707  23456     2 2 65531     0     0   123456  1\n";
    assert_eq!(id_sequence(text, 1707), Some(123456));
    assert_eq!(id_sequence(text, 0), Some(7));
    assert_eq!(id_sequence(text, 1708), None);
    assert_eq!(id_sequence("", 1707), None);
}
