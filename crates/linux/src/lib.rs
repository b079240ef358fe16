//! Linux specifics of Holdfast: socket options a BGP speaker needs that the
//! standard library and tokio do not expose. This is the only Holdfast
//! crate allowed `unsafe`; every block states why it is sound.
//!
//! All functions take a [`BorrowedFd`](std::os::fd::BorrowedFd), so they
//! work on `std::net`, `socket2` and tokio sockets alike (`sock.as_fd()`).
//!
//! | module | standard | Linux API |
//! |---|---|---|
//! | [`md5`] | RFC 2385 TCP MD5 Signature Option | `setsockopt(IPPROTO_TCP, TCP_MD5SIG, struct tcp_md5sig)` |
//! | [`ttl`](mod@ttl) | RFC 5082 GTSM; eBGP multihop TTL | `IP_TTL`, `IP_MINTTL`, `IPV6_UNICAST_HOPS`, `IPV6_MINHOPCOUNT` |
//! | [`device`] | Linux VRF (l3mdev) binding | `SO_BINDTODEVICE`, `if_nametoindex(3)` |
//! | [`info`] | session diagnostics | `getsockopt(IPPROTO_TCP, TCP_INFO, struct tcp_info)` |
//!
//! Later additions (TCP_REPAIR for non-stop routing, NFQUEUE) get modules of
//! their own beside these, using the helpers in `sockopt`.
//!
//! Known issues:
//! - MD5 keys are per peer address (`TCP_MD5SIG`); prefix keys and
//!   per-VRF-ifindex scoping (`TCP_MD5SIG_EXT`) are not exposed yet.
//! - On an IPv6 socket, [`set_gtsm`] and [`set_ttl`] also set the IPv4
//!   options for IPv4-mapped peers on a best-effort basis.

pub mod device;
pub mod info;
pub mod md5;
mod sockopt;
pub mod ttl;

pub use device::{bind_to_device, bound_device, ifindex};
pub use info::{tcp_info, TcpInfoLite};
pub use md5::{set_tcp_md5, TCP_MD5_MAX_KEY_LEN};
pub use ttl::{min_ttl, set_gtsm, set_ttl, ttl};
