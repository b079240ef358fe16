//! `decode_open` never panics; a decoded OPEN re-encodes to the same value.
#![no_main]
use holdfast_wire::*;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(open) = decode_open(data) {
        let mut out = Vec::new();
        encode_open(&open, &mut out);
        if out.len() <= MAX_MESSAGE_LEN {
            assert_eq!(decode_open(&out[HEADER_LEN..]).expect("re-decode"), open);
        }
    }
});
