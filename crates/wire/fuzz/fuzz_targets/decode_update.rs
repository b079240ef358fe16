//! `decode_update` never panics with either context, and its outcome is
//! internally consistent.
#![no_main]
use holdfast_wire::*;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    for (four_octet_as, ibgp) in [(true, false), (false, true)] {
        let ctx = CodecCtx {
            four_octet_as,
            ibgp,
        };
        if let Ok(o) = decode_update(data, &ctx) {
            match o.action {
                Rfc7606Action::TreatAsWithdraw => {
                    assert!(o.update.attrs.is_none() && o.update.announced.is_empty())
                }
                Rfc7606Action::AttributeDiscard => assert!(!o.discarded.is_empty()),
                Rfc7606Action::None => assert!(o.reason.is_none()),
                Rfc7606Action::SessionReset => panic!("reset must be an Err"),
            }
            if !o.update.announced.is_empty() {
                let a = o
                    .update
                    .attrs
                    .as_ref()
                    .expect("announcements carry attributes");
                assert!(a.origin.is_some());
            }
        }
    }
});
