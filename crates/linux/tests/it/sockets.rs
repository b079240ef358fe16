//! Real sockets on loopback. These need root (CAP_NET_ADMIN / CAP_NET_RAW
//! for MD5 and SO_BINDTODEVICE) and a kernel with CONFIG_TCP_MD5SIG. The
//! IPv6 tests skip without `::1` (and fail with `HOLDFAST_REQUIRE_LAB=1`).

use crate::netns;

use holdfast_linux::*;
use socket2::{Domain, Protocol, Socket, Type};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::fd::AsFd;
use std::time::{Duration, Instant};

const TIMEOUT: Duration = Duration::from_secs(2);

fn listener(addr: &str, key: Option<&[u8]>, peer: &str) -> (Socket, SocketAddr) {
    let addr: SocketAddr = addr.parse().unwrap();
    let s = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP)).unwrap();
    if let Some(k) = key {
        set_tcp_md5(s.as_fd(), peer.parse().unwrap(), Some(k)).unwrap();
    }
    s.bind(&addr.into()).unwrap();
    s.listen(16).unwrap();
    let local = s.local_addr().unwrap().as_socket().unwrap();
    (s, local)
}

/// Connects to `to` with an optional key; nonblocking connect + poll,
/// bounded by `TIMEOUT`.
fn connect(to: SocketAddr, key: Option<&[u8]>) -> std::io::Result<Socket> {
    let s = Socket::new(Domain::for_address(to), Type::STREAM, Some(Protocol::TCP))?;
    if let Some(k) = key {
        set_tcp_md5(s.as_fd(), to, Some(k))?;
    }
    s.connect_timeout(&to.into(), TIMEOUT)?;
    Ok(s)
}

fn v6_loopback_available() -> bool {
    std::net::TcpListener::bind("[::1]:0").is_ok()
}

fn exchange(l: &Socket, c: Socket) {
    let (srv, _) = l.accept().unwrap();
    let mut c: TcpStream = c.into();
    let mut srv: TcpStream = srv.into();
    c.write_all(b"OPEN").unwrap();
    let mut buf = [0u8; 4];
    srv.set_read_timeout(Some(TIMEOUT)).unwrap();
    srv.read_exact(&mut buf).unwrap();
    assert_eq!(&buf, b"OPEN");
}

#[test]
fn md5_matching_keys_connect_v4() {
    let (l, addr) = listener("127.0.0.1:0", Some(b"s3cret"), "127.0.0.1:0");
    let c = connect(addr, Some(b"s3cret")).expect("connect with matching key");
    exchange(&l, c);
}

#[test]
fn md5_matching_keys_connect_v6() {
    if !v6_loopback_available() {
        netns::skip("no IPv6 loopback address ::1");
        return;
    }
    let (l, addr) = listener("[::1]:0", Some(b"v6-key"), "[::1]:0");
    let c = connect(addr, Some(b"v6-key")).expect("connect with matching key");
    exchange(&l, c);
}

#[test]
fn md5_v6_listener_with_v4_mapped_peer() {
    if !v6_loopback_available() {
        netns::skip("no IPv6 loopback address ::1");
        return;
    }
    let (l, addr) = listener("[::]:0", Some(b"mapped"), "127.0.0.1:0");
    let to: SocketAddr = format!("127.0.0.1:{}", addr.port()).parse().unwrap();
    let c = connect(to, Some(b"mapped")).expect("v4 peer of dual-stack listener");
    exchange(&l, c);
}

#[test]
fn md5_mismatched_keys_time_out() {
    let (_l, addr) = listener("127.0.0.1:0", Some(b"right"), "127.0.0.1:0");
    let start = Instant::now();
    let err = connect(addr, Some(b"wrong")).expect_err("mismatched key must not connect");
    assert!(start.elapsed() < TIMEOUT + Duration::from_secs(2));
    assert!(
        matches!(
            err.kind(),
            std::io::ErrorKind::TimedOut | std::io::ErrorKind::WouldBlock
        ),
        "unexpected error {err:?}"
    );
}

#[test]
fn md5_unsigned_connect_to_keyed_listener_fails() {
    let (_l, addr) = listener("127.0.0.1:0", Some(b"right"), "127.0.0.1:0");
    assert!(connect(addr, None).is_err());
}

#[test]
fn md5_removing_key_allows_unsigned_connect() {
    let (l, addr) = listener("127.0.0.1:0", Some(b"temp"), "127.0.0.1:0");
    set_tcp_md5(l.as_fd(), "127.0.0.1:0".parse().unwrap(), None).unwrap();
    let c = connect(addr, None).expect("key removed");
    exchange(&l, c);
    // Removing again is not an error.
    set_tcp_md5(l.as_fd(), "127.0.0.1:0".parse().unwrap(), None).unwrap();
}

#[test]
fn md5_rejects_long_key() {
    let s = Socket::new(Domain::IPV4, Type::STREAM, None).unwrap();
    let err = set_tcp_md5(
        s.as_fd(),
        "127.0.0.1:179".parse().unwrap(),
        Some(&[b'x'; 81]),
    )
    .unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::InvalidInput);
    set_tcp_md5(
        s.as_fd(),
        "127.0.0.1:179".parse().unwrap(),
        Some(&[b'x'; 80]),
    )
    .unwrap();
}

#[test]
fn gtsm_sets_ttl_and_min_ttl_v4() {
    let s = Socket::new(Domain::IPV4, Type::STREAM, None).unwrap();
    set_gtsm(s.as_fd(), false, 1).unwrap();
    assert_eq!(ttl(s.as_fd(), false).unwrap(), 255);
    assert_eq!(min_ttl(s.as_fd(), false).unwrap(), 255);
    set_gtsm(s.as_fd(), false, 3).unwrap();
    assert_eq!(min_ttl(s.as_fd(), false).unwrap(), 253);
    set_gtsm(s.as_fd(), false, 0).unwrap();
    assert_eq!(min_ttl(s.as_fd(), false).unwrap(), 0);
}

#[test]
fn gtsm_sets_hop_limit_and_min_hop_count_v6() {
    let s = Socket::new(Domain::IPV6, Type::STREAM, None).unwrap();
    set_gtsm(s.as_fd(), true, 2).unwrap();
    assert_eq!(ttl(s.as_fd(), true).unwrap(), 255);
    assert_eq!(min_ttl(s.as_fd(), true).unwrap(), 254);
}

#[test]
fn gtsm_connection_on_loopback_works() {
    let (l, addr) = listener("127.0.0.1:0", None, "127.0.0.1:0");
    set_gtsm(l.as_fd(), false, 1).unwrap();
    let s = Socket::new(Domain::IPV4, Type::STREAM, None).unwrap();
    set_gtsm(s.as_fd(), false, 1).unwrap();
    s.connect_timeout(&addr.into(), TIMEOUT).unwrap();
    exchange(&l, s);
}

#[test]
fn set_ttl_for_multihop() {
    let s = Socket::new(Domain::IPV4, Type::STREAM, None).unwrap();
    set_ttl(s.as_fd(), false, 2).unwrap();
    assert_eq!(ttl(s.as_fd(), false).unwrap(), 2);
    assert!(set_ttl(s.as_fd(), false, 0).is_err());
}

#[test]
fn bind_to_device_lo_and_bogus() {
    let s = Socket::new(Domain::IPV4, Type::STREAM, None).unwrap();
    bind_to_device(s.as_fd(), "lo").unwrap();
    assert_eq!(bound_device(s.as_fd()).unwrap().as_deref(), Some("lo"));
    let err = bind_to_device(s.as_fd(), "hf-bogus0").unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::ENODEV));
    bind_to_device(s.as_fd(), "").unwrap();
    assert_eq!(bound_device(s.as_fd()).unwrap(), None);
    assert!(bind_to_device(s.as_fd(), "a-name-longer-than-15").is_err());
    assert!(ifindex("lo").unwrap() >= 1);
    assert!(ifindex("hf-bogus0").is_err());
}

#[test]
fn tcp_info_on_connected_pair() {
    let (l, addr) = listener("127.0.0.1:0", None, "127.0.0.1:0");
    let c = connect(addr, None).unwrap();
    let (srv, _) = l.accept().unwrap();
    let mut cs: TcpStream = c.into();
    cs.write_all(&[0u8; 1000]).unwrap();
    let mut srv: TcpStream = srv.into();
    let mut buf = [0u8; 1000];
    srv.read_exact(&mut buf).unwrap();
    let info = tcp_info(cs.as_fd()).unwrap();
    assert_eq!(info.state, 1, "TCP_ESTABLISHED");
    assert!(
        (536..=65535).contains(&info.snd_mss),
        "snd_mss {}",
        info.snd_mss
    );
    assert!(info.rcv_mss >= 536, "rcv_mss {}", info.rcv_mss);
    if let Some(b) = info.bytes_acked {
        assert!(b <= 1001);
    }
    let sinfo = tcp_info(srv.as_fd()).unwrap();
    if let Some(b) = sinfo.bytes_received {
        assert_eq!(b, 1000);
    }
}
