//! `ControlPacket::decode` never panics; a decoded packet encodes to the
//! octets it came from (up to Length, with the Reserved octet of a keyed
//! section zeroed; a packet without authentication may carry ignored
//! octets inside Length) and decodes back to itself; `verify`
//! and `sign` never panic; a session fed the octets never panics.
#![no_main]
use holdfast_bfd::*;
use libfuzzer_sys::fuzz_target;
use std::num::NonZeroU32;
use std::time::Duration;

fuzz_target!(|data: &[u8]| {
    let Ok(p) = ControlPacket::decode(data) else {
        return;
    };
    let enc = p.encode();
    assert_eq!(ControlPacket::decode(&enc).as_ref(), Ok(&p));
    let length = usize::from(data[3]);
    if p.auth.is_some() || length == MANDATORY_LEN {
        let mut expect = data[..length].to_vec();
        if p.auth.as_ref().is_some_and(|a| a.auth_type().is_keyed()) {
            expect[MANDATORY_LEN + 3] = 0;
        }
        assert_eq!(enc, expect);
    }
    if let Some(auth) = &p.auth {
        let t = auth.auth_type();
        let key = b"fuzz";
        let _ = verify(data, t, auth.key_id(), key);
        let mut signed = enc.clone();
        sign(&mut signed, key).expect("a decoded section signs");
        assert!(verify(&signed, t, auth.key_id(), key).is_ok() || !t.is_keyed());
    }
    let cfg = SessionConfig {
        auth: p.auth.as_ref().map(|a| AuthConfig {
            auth_type: a.auth_type(),
            key_id: a.key_id(),
            key: b"fuzz".to_vec(),
        }),
        ..SessionConfig::default()
    };
    let local = NonZeroU32::new(p.your_discriminator).unwrap_or(NonZeroU32::MIN);
    let mut s = Session::new(cfg, local, 0, Duration::ZERO).expect("valid configuration");
    for t in 0..3 {
        s.handle(
            Duration::from_millis(t * 10),
            Input::Received(data.to_vec()),
        );
        s.handle(Duration::from_millis(t * 10 + 5), Input::Timer);
    }
});
