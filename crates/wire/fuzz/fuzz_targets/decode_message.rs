//! `decode_message` never panics, with either AS width; a decode error
//! always converts to a NOTIFICATION that encodes to a legal message.
#![no_main]
use holdfast_wire::*;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    for four_octet_as in [true, false] {
        let ctx = CodecCtx {
            four_octet_as,
            ibgp: !four_octet_as,
        };
        if let Err(e) = decode_message(data, &ctx) {
            let mut out = Vec::new();
            encode_notification(&e.to_notification(), &mut out);
            assert!(matches!(frame(&out), Ok(Some((3, n))) if n == out.len()));
        }
    }
});
