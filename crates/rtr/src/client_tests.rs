use super::*;
use crate::pdu::{decode, PrefixPdu};
use std::net::Ipv4Addr;

fn bytes(v: u8, pdus: &[Pdu]) -> Vec<u8> {
    let mut b = Vec::new();
    for p in pdus {
        p.encode(v, &mut b);
    }
    b
}

fn v4(announce: bool, a: [u8; 4], len: u8, max_len: u8, asn: u32) -> Pdu {
    Pdu::Ipv4Prefix(PrefixPdu {
        announce,
        addr: Ipv4Addr::from(a),
        len,
        max_len,
        asn,
    })
}

fn sent(out: &[Output]) -> Vec<(u8, Pdu)> {
    out.iter()
        .filter_map(|o| match o {
            Output::Send(b) => {
                let (v, p, _) = decode(b).unwrap().unwrap();
                Some((v, p))
            }
            _ => None,
        })
        .collect()
}

fn update(out: &[Output]) -> Option<&VrpUpdate> {
    out.iter().find_map(|o| match o {
        Output::Update(u) => Some(u),
        _ => None,
    })
}

const T: Timers = Timers {
    refresh: 60,
    retry: 5,
    expire: 600,
};

fn eod(session: u16, serial: u32) -> Pdu {
    Pdu::EndOfData {
        session,
        serial,
        timers: Some(T),
    }
}

#[test]
fn reset_then_serial_then_notify() {
    let t0 = Instant::now();
    let mut c = Client::new(ClientConfig::default());
    let out = c.handle(t0, Input::Connected);
    assert_eq!(sent(&out), vec![(1, Pdu::ResetQuery)]);
    let out = c.handle(
        t0,
        Input::Received(bytes(
            1,
            &[
                Pdu::CacheResponse { session: 42 },
                v4(true, [10, 0, 0, 0], 8, 24, 65001),
                v4(true, [192, 0, 2, 0], 24, 24, 65002),
                eod(42, 1),
            ],
        )),
    );
    let u = update(&out).unwrap();
    assert!(u.reset);
    assert_eq!(u.added.len(), 2);
    let st = c.status();
    assert_eq!(
        (st.session, st.serial, st.vrps_v4, st.timers),
        (Some(42), Some(1), 2, T)
    );
    assert_eq!(c.next_deadline(), Some(t0 + Duration::from_secs(60)));
    // Serial Notify: a Serial Query with our serial.
    let out = c.handle(
        t0,
        Input::Received(bytes(
            1,
            &[Pdu::SerialNotify {
                session: 42,
                serial: 2,
            }],
        )),
    );
    assert_eq!(
        sent(&out),
        vec![(
            1,
            Pdu::SerialQuery {
                session: 42,
                serial: 1
            }
        )]
    );
    // Incremental answer split at an odd byte boundary.
    let b = bytes(
        1,
        &[
            Pdu::CacheResponse { session: 42 },
            v4(false, [192, 0, 2, 0], 24, 24, 65002),
            v4(true, [192, 0, 2, 0], 24, 24, 65003),
            eod(42, 2),
        ],
    );
    assert!(update(&c.handle(t0, Input::Received(b[..13].to_vec()))).is_none());
    let out = c.handle(t0, Input::Received(b[13..].to_vec()));
    let u = update(&out).unwrap();
    assert!(!u.reset);
    assert_eq!(
        u.added,
        vec![Vrp::v4(Ipv4Addr::new(192, 0, 2, 0), 24, 24, 65003).unwrap()]
    );
    assert_eq!(
        u.removed,
        vec![Vrp::v4(Ipv4Addr::new(192, 0, 2, 0), 24, 24, 65002).unwrap()]
    );
    assert_eq!(c.status().serial, Some(2));
    assert_eq!((c.status().vrps_v4, c.status().vrps_v6), (2, 0));
    // The refresh timer sends a Serial Query.
    let out = c.handle(t0 + Duration::from_secs(61), Input::Tick);
    assert_eq!(
        sent(&out),
        vec![(
            1,
            Pdu::SerialQuery {
                session: 42,
                serial: 2
            }
        )]
    );
}

#[test]
fn falls_back_to_version_0() {
    let t0 = Instant::now();
    let mut c = Client::new(ClientConfig::default());
    c.handle(t0, Input::Connected);
    let err = bytes(
        0,
        &[Pdu::ErrorReport {
            code: error_code::UNSUPPORTED_VERSION,
            pdu: vec![1, 2, 0, 0, 0, 0, 0, 8],
            text: String::new(),
        }],
    );
    let out = c.handle(t0, Input::Received(err));
    assert!(out
        .iter()
        .any(|o| matches!(o, Output::Close { after, .. } if after.is_zero())));
    let out = c.handle(t0, Input::Connected);
    assert_eq!(sent(&out), vec![(0, Pdu::ResetQuery)]);
    let v0 = bytes(
        0,
        &[
            Pdu::CacheResponse { session: 1 },
            v4(true, [10, 0, 0, 0], 8, 8, 1),
            Pdu::EndOfData {
                session: 1,
                serial: 5,
                timers: None,
            },
        ],
    );
    let out = c.handle(t0, Input::Received(v0));
    assert_eq!(update(&out).unwrap().added.len(), 1);
    let st = c.status();
    assert_eq!((st.version, st.serial), (0, Some(5)));
    // Configured timers stay in force with version 0.
    assert_eq!(st.timers.refresh, 3600);
}

#[test]
fn bad_transfers_send_error_reports() {
    let t0 = Instant::now();
    let mut c = Client::new(ClientConfig::default());
    c.handle(t0, Input::Connected);
    let out = c.handle(
        t0,
        Input::Received(bytes(
            1,
            &[
                Pdu::CacheResponse { session: 1 },
                v4(true, [10, 0, 0, 0], 8, 8, 1),
                v4(true, [10, 0, 0, 0], 8, 8, 1),
            ],
        )),
    );
    let s = sent(&out);
    assert!(matches!(
        s[0].1,
        Pdu::ErrorReport {
            code: error_code::DUPLICATE_ANNOUNCEMENT,
            ..
        }
    ));
    assert!(out.iter().any(|o| matches!(o, Output::Close { .. })));
    assert_eq!(c.vrps().len(), 0);
    // Withdrawal of an unknown VRP.
    c.handle(t0, Input::Connected);
    let out = c.handle(
        t0,
        Input::Received(bytes(
            1,
            &[
                Pdu::CacheResponse { session: 1 },
                v4(false, [10, 0, 0, 0], 8, 8, 1),
            ],
        )),
    );
    assert!(matches!(
        sent(&out)[0].1,
        Pdu::ErrorReport {
            code: error_code::WITHDRAWAL_OF_UNKNOWN,
            ..
        }
    ));
    // A Prefix PDU with no Cache Response before it.
    c.handle(t0, Input::Connected);
    let out = c.handle(
        t0,
        Input::Received(bytes(1, &[v4(true, [10, 0, 0, 0], 8, 8, 1)])),
    );
    assert!(matches!(
        sent(&out)[0].1,
        Pdu::ErrorReport {
            code: error_code::CORRUPT_DATA,
            ..
        }
    ));
}

#[test]
fn session_change_and_cache_reset() {
    let t0 = Instant::now();
    let mut c = Client::new(ClientConfig::default());
    c.handle(t0, Input::Connected);
    c.handle(
        t0,
        Input::Received(bytes(
            1,
            &[
                Pdu::CacheResponse { session: 1 },
                v4(true, [10, 0, 0, 0], 8, 8, 1),
                eod(1, 1),
            ],
        )),
    );
    // Reconnect: Serial Query; a Cache Reset asks for a Reset Query.
    c.handle(t0, Input::Closed);
    let out = c.handle(t0, Input::Connected);
    assert_eq!(
        sent(&out),
        vec![(
            1,
            Pdu::SerialQuery {
                session: 1,
                serial: 1
            }
        )]
    );
    let out = c.handle(t0, Input::Received(bytes(1, &[Pdu::CacheReset])));
    assert_eq!(sent(&out), vec![(1, Pdu::ResetQuery)]);
    // The reset answer replaces the set: one removed, one added.
    let out = c.handle(
        t0,
        Input::Received(bytes(
            1,
            &[
                Pdu::CacheResponse { session: 2 },
                v4(true, [10, 0, 0, 0], 8, 16, 1),
                eod(2, 7),
            ],
        )),
    );
    let u = update(&out).unwrap();
    assert_eq!((u.added.len(), u.removed.len(), u.reset), (1, 1, true));
    // A Cache Response with another session ID during a Serial Query.
    c.handle(t0, Input::Closed);
    c.handle(t0, Input::Connected);
    let out = c.handle(
        t0,
        Input::Received(bytes(1, &[Pdu::CacheResponse { session: 3 }])),
    );
    assert!(matches!(
        sent(&out)[0].1,
        Pdu::ErrorReport {
            code: error_code::CORRUPT_DATA,
            ..
        }
    ));
    assert_eq!(c.status().session, None);
    // The VRPs stay until new data replaces them (routes keep their state).
    assert_eq!(c.vrps().len(), 1);
}

#[test]
fn an_error_report_from_the_cache_resets_the_session() {
    let t0 = Instant::now();
    let mut c = Client::new(ClientConfig::default());
    c.handle(t0, Input::Connected);
    c.handle(
        t0,
        Input::Received(bytes(
            1,
            &[
                Pdu::CacheResponse { session: 1 },
                v4(true, [10, 0, 0, 0], 8, 8, 1),
                eod(1, 1),
            ],
        )),
    );
    c.handle(t0, Input::Closed);
    let out = c.handle(t0, Input::Connected);
    assert_eq!(
        sent(&out),
        vec![(
            1,
            Pdu::SerialQuery {
                session: 1,
                serial: 1
            }
        )]
    );
    // A restarted cache: "Session ID mismatch" as Corrupt Data.
    let err = Pdu::ErrorReport {
        code: error_code::CORRUPT_DATA,
        pdu: Vec::new(),
        text: "Session ID mismatch\0".into(),
    };
    let out = c.handle(t0, Input::Received(bytes(1, &[err])));
    assert!(out
        .iter()
        .any(|o| matches!(o, Output::Close { reason, .. } if reason.ends_with("mismatch)"))));
    let out = c.handle(t0, Input::Connected);
    assert_eq!(sent(&out), vec![(1, Pdu::ResetQuery)]);
    assert_eq!(c.vrps().len(), 1);
}

#[test]
fn data_expires() {
    let t0 = Instant::now();
    let mut c = Client::new(ClientConfig::default());
    c.handle(t0, Input::Connected);
    c.handle(
        t0,
        Input::Received(bytes(
            1,
            &[
                Pdu::CacheResponse { session: 1 },
                v4(true, [10, 0, 0, 0], 8, 8, 1),
                eod(1, 1),
            ],
        )),
    );
    c.handle(t0, Input::Closed);
    assert_eq!(c.next_deadline(), Some(t0 + Duration::from_secs(600)));
    assert!(update(&c.handle(t0 + Duration::from_secs(599), Input::Tick)).is_none());
    let out = c.handle(t0 + Duration::from_secs(600), Input::Tick);
    let u = update(&out).unwrap();
    assert_eq!((u.removed.len(), u.reset), (1, true));
    assert!(c.vrps().is_empty());
    assert_eq!(c.next_deadline(), None);
}
