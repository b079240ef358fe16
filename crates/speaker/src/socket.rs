//! Session sockets: outbound connects and listeners with the per-neighbour
//! options of RFC 2385 (TCP MD5), RFC 5082 (GTSM), eBGP multihop TTL and
//! Linux VRF binding (`SO_BINDTODEVICE`). The `unsafe` socket options live in
//! `holdfast-linux`; this module only decides which to apply.

use std::io;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::AsFd;
use tokio::net::{TcpListener, TcpSocket, TcpStream};

/// Socket options of one neighbour.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SockOpts {
    pub md5: Option<String>,
    /// GTSM: accept only packets at most this many hops away.
    pub ttl_security: Option<u8>,
    /// eBGP multihop: outgoing TTL.
    pub multihop: Option<u8>,
    pub vrf: Option<String>,
    pub local_address: Option<IpAddr>,
}

fn apply<F: AsFd>(sock: &F, remote: IpAddr, opts: &SockOpts) -> io::Result<()> {
    let v6 = remote.is_ipv6();
    if let Some(key) = &opts.md5 {
        holdfast_linux::set_tcp_md5(
            sock.as_fd(),
            SocketAddr::new(remote, 0),
            Some(key.as_bytes()),
        )?;
    }
    if let Some(hops) = opts.ttl_security {
        holdfast_linux::set_gtsm(sock.as_fd(), v6, hops)?;
    } else if let Some(ttl) = opts.multihop {
        holdfast_linux::set_ttl(sock.as_fd(), v6, ttl)?;
    }
    Ok(())
}

/// Connects to `remote` with the neighbour's options.
pub async fn connect(remote: SocketAddr, opts: &SockOpts) -> io::Result<TcpStream> {
    let sock = if remote.is_ipv4() {
        TcpSocket::new_v4()?
    } else {
        TcpSocket::new_v6()?
    };
    if let Some(dev) = &opts.vrf {
        holdfast_linux::bind_to_device(sock.as_fd(), dev)?;
    }
    apply(&sock, remote.ip(), opts)?;
    if let Some(local) = opts.local_address {
        sock.set_reuseaddr(true)?;
        sock.bind(SocketAddr::new(local, 0))?;
    }
    sock.connect(remote).await
}

/// Applies the options that matter after accept (GTSM and TTL); the MD5
/// key must already be on the listener.
pub fn accepted(stream: &TcpStream, opts: &SockOpts) -> io::Result<()> {
    let remote = stream.peer_addr()?.ip();
    let v6 = remote.is_ipv6();
    if let Some(hops) = opts.ttl_security {
        holdfast_linux::set_gtsm(stream.as_fd(), v6, hops)?;
    } else if let Some(ttl) = opts.multihop {
        holdfast_linux::set_ttl(stream.as_fd(), v6, ttl)?;
    }
    Ok(())
}

/// Binds a listener, optionally inside a VRF device.
pub fn listen(addr: SocketAddr, vrf: Option<&str>) -> io::Result<TcpListener> {
    let sock = if addr.is_ipv4() {
        TcpSocket::new_v4()?
    } else {
        TcpSocket::new_v6()?
    };
    if addr.is_ipv6() {
        socket2::SockRef::from(&sock).set_only_v6(true)?;
    }
    sock.set_reuseaddr(true)?;
    if let Some(dev) = vrf {
        holdfast_linux::bind_to_device(sock.as_fd(), dev)?;
    }
    sock.bind(addr)?;
    sock.listen(1024)
}

/// Installs (or with `None` removes) a neighbour's MD5 key on a listener.
pub fn listener_md5(l: &TcpListener, remote: IpAddr, key: Option<&str>) -> io::Result<()> {
    holdfast_linux::set_tcp_md5(
        l.as_fd(),
        SocketAddr::new(remote, 0),
        key.map(str::as_bytes),
    )
}
