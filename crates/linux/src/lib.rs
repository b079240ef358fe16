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
//! | [`udp_ttl`] | RFC 5881 §5 BFD TTL check: a datagram's received TTL / hop limit | `IP_RECVTTL`, `IPV6_RECVHOPLIMIT`, `recvmsg(2)` control messages |
//! | [`device`] | Linux VRF (l3mdev) binding | `SO_BINDTODEVICE`, `if_nametoindex(3)` |
//! | [`info`] | session diagnostics | `getsockopt(IPPROTO_TCP, TCP_INFO, struct tcp_info)` |
//! | [`repair`] | non-stop routing: TCP connection capture and restore (CRIU libsoccr) | `TCP_REPAIR`, `TCP_REPAIR_QUEUE`, `TCP_QUEUE_SEQ`, `TCP_REPAIR_OPTIONS`, `TCP_REPAIR_WINDOW`, `TCP_TIMESTAMP`, `SIOCINQ`/`SIOCOUTQ` |
//! | [`announce`] | address take-over: RFC 5227 gratuitous ARP, RFC 4861 unsolicited NA; a next hop solicited now: RFC 826 ARP request, RFC 4861 NS | `AF_PACKET` raw socket, ICMPv6 raw socket |
//! | [`nfq`] | non-stop routing: the ACK gate's thread, its NFQUEUE codec and ACK injector (TENSOR §3.1, TCPR §II-C) | NFQUEUE over `NETLINK_NETFILTER`, eventfd, `IPPROTO_RAW` sockets |
//! | [`gate`] | the ACK gate's decisions: hold, clamp, release, synthesise (TCPR §II-C, RFC 7323 PAWS) | none (pure) |
//! | [`netns`] | running code inside a network namespace | `setns(2)` |
//! | [`nslock`] | one NSR speaker per network namespace: a lock released when its holder dies, naming its holder | abstract Unix socket, `SO_PEERCRED` |
//! | [`notify`] | systemd's `sd_notify` (`READY=1`, `WATCHDOG=1`), both the service's and the supervisor's end | `AF_UNIX` datagrams, `SO_TIMESTAMPNS`, `SO_PASSCRED` |
//! | [`progress`] | hang detection: one atomic progress stamp per event loop, checked by the watchdog pinger | none (atomics) |
//! | [`packet`] | IPv4/IPv6 + TCP header parsing and rewriting, RFC 1624 checksum update | none (pure) |
//! | [`resident`] | small idle units: the start-up code's pages leave the resident set | `dl_iterate_phdr(3)`, `/proc/self/smaps`, `madvise(MADV_DONTNEED)` |
//! | [`rtnl`] | the kernel FIB: route writes in batches, dumps, notifications | `NETLINK_ROUTE` (`RTM_NEWROUTE`, `RTM_DELROUTE`, `RTM_GETROUTE`, `RTA_MULTIPATH`) |
//! | [`sched`] | RFC 5880 §6.8.7 BFD transmission on time on a busy host: the timer thread in the real-time class | `sched_setscheduler(2)` `SCHED_FIFO`, `SCHED_RESET_ON_FORK` |
//! | [`statusfile`] | status files written off the event loop: a stalled journal commit delays the file, not the lease renewals beside it | `write(2)`, `rename(2)` on a thread of their own |
//! | [`sigpipe`] | command-line tools in a pipe: end by `SIGPIPE` when the reader goes | `signal(SIGPIPE, SIG_DFL)` |
//! | [`rules`] | the gate's NFQUEUE rules and the rebuild guard | `iptables`/`ip6tables` (xtables `NFQUEUE`, `comment`) |
//!
//! Later additions (TCP_REPAIR for non-stop routing, NFQUEUE) get modules of
//! their own beside these, using the helpers in `sockopt`.
//!
//! Known issues:
//! - MD5 keys are per peer address (`TCP_MD5SIG`); prefix keys and
//!   per-VRF-ifindex scoping (`TCP_MD5SIG_EXT`) are not exposed yet.
//! - On an IPv6 socket, [`set_gtsm`] and [`set_ttl`] also set the IPv4
//!   options for IPv4-mapped peers on a best-effort basis.

#[cfg(feature = "mimalloc")]
pub mod allocator;
pub mod announce;
pub mod device;
pub mod gate;
pub mod info;
pub mod md5;
pub mod netns;
pub mod nfq;
pub mod notify;
pub mod nslock;
pub mod packet;
pub mod pidfd;
pub mod progress;
pub mod repair;
pub mod resident;
pub mod rtnl;
pub mod rules;
pub mod sched;
pub mod sigpipe;
mod sockopt;
pub mod statusfile;
pub mod ttl;
pub mod udp_ttl;

pub use announce::{address_is_local, announce_address, solicit_next_hop};
pub use device::{bind_to_device, bound_device, ifindex, set_transparent};
pub use info::{tcp_info, TcpInfoLite};
pub use md5::{set_tcp_md5, TCP_MD5_MAX_KEY_LEN};
pub use nfq::{AckGate, ConnKey, GateMode, GateStats};
pub use repair::{
    capture, close_silently, outq, restore, restore_in_repair, window_probe, Restore,
    TcpRepairState,
};
pub use ttl::{min_ttl, set_gtsm, set_ttl, ttl};
pub use udp_ttl::{enable_recv_ttl, recv_with_ttl, Datagram};
