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
