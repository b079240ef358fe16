//! `rediss://`: a redis-server with TLS and a certificate of a test CA,
//! made with the openssl command. Alone in its test binary because it sets
//! `SSL_CERT_FILE` (read by rustls-native-certs) for the process.

mod common;

use common::{RedisProc, Signal};
use holdfast_nsr::{Op, Store, StoreError, StoreUrl};
use holdfast_nsr_redis::RedisStore;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

fn openssl(dir: &Path, args: &[&str]) -> bool {
    Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .map(|s| s.success())
        .unwrap_or(false)
}

/// A CA and a server certificate for 127.0.0.1 in `dir`, or false.
fn make_certs(dir: &Path) -> bool {
    std::fs::write(
        dir.join("ext.cnf"),
        "subjectAltName=IP:127.0.0.1,DNS:localhost\nbasicConstraints=CA:FALSE\n",
    )
    .expect("write ext.cnf");
    openssl(
        dir,
        &[
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            "ca.key",
            "-out",
            "ca.crt",
            "-days",
            "2",
            "-subj",
            "/CN=holdfast-nsr test CA",
        ],
    ) && openssl(
        dir,
        &[
            "req",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            "srv.key",
            "-out",
            "srv.csr",
            "-subj",
            "/CN=127.0.0.1",
        ],
    ) && openssl(
        dir,
        &[
            "x509",
            "-req",
            "-in",
            "srv.csr",
            "-CA",
            "ca.crt",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-out",
            "srv.crt",
            "-days",
            "2",
            "-extfile",
            "ext.cnf",
        ],
    )
}

#[test]
fn redis_over_tls() {
    let certs = common::scratch_dir("tls");
    if !make_certs(&certs) {
        let _ = std::fs::remove_dir_all(&certs);
        common::skip("openssl could not make test certificates");
        return;
    }
    let tls_port = common::free_port();
    let path = |f: &str| certs.join(f).display().to_string();
    let (port, crt, key, ca) = (
        tls_port.to_string(),
        path("srv.crt"),
        path("srv.key"),
        path("ca.crt"),
    );
    let server = RedisProc::start_with(&[
        "--tls-port",
        &port,
        "--tls-cert-file",
        &crt,
        "--tls-key-file",
        &key,
        "--tls-ca-cert-file",
        &ca,
        "--tls-auth-clients",
        "no",
    ]);
    let url = StoreUrl::Redis {
        tls: true,
        host: "127.0.0.1".into(),
        port: tls_port,
        db: 0,
        username: None,
        password: None,
    };
    let timeout = Duration::from_millis(500);

    // The test CA is not trusted yet: refused.
    std::env::remove_var("SSL_CERT_DIR");
    std::env::set_var("SSL_CERT_FILE", path("srv.key")); // no certificates in it
    match RedisStore::connect(&url, "tls", timeout) {
        Err(StoreError::Unavailable(m)) => eprintln!("untrusted: {m}"),
        r => panic!("expected Unavailable, got {r:?}"),
    }

    std::env::set_var("SSL_CERT_FILE", &ca);
    let mut s = RedisStore::connect(&url, "tls", timeout).expect("connect over TLS");
    let e = s.claim().unwrap();
    s.write(
        e,
        &[Op::Received {
            key: "a".into(),
            ack: 1,
            updates: bytes::Bytes::from_static(b"u"),
            partial: bytes::Bytes::new(),
        }],
    )
    .unwrap();
    assert_eq!(s.epoch().unwrap(), e);

    // A hung TLS server: the handshake is bounded too.
    server.signal(Signal::SIGSTOP);
    let t0 = Instant::now();
    let r = RedisStore::connect(&url, "tls", timeout);
    assert!(matches!(r, Err(StoreError::Unavailable(_))), "{r:?}");
    assert!(t0.elapsed() < Duration::from_secs(2), "{:?}", t0.elapsed());
    let t0 = Instant::now();
    assert!(matches!(s.epoch(), Err(StoreError::Unavailable(_))));
    assert!(t0.elapsed() < Duration::from_secs(2), "{:?}", t0.elapsed());
    server.signal(Signal::SIGCONT);
    s.reconnect().unwrap();
    assert_eq!(s.epoch().unwrap(), e);
    drop(server);
    let _ = std::fs::remove_dir_all(&certs);
}
