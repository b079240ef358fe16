//! `frame` never panics, and a framed length is within the buffer and legal.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(Some((_, len))) = holdfast_wire::frame(data) {
        assert!(len <= data.len());
        assert!((holdfast_wire::HEADER_LEN..=holdfast_wire::MAX_MESSAGE_LEN).contains(&len));
    }
});
