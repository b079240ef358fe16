//! systemd's `sd_notify` protocol, both ends (issue 25, hang detection).
//!
//! - [`Notifier`]: the service's end. [`Notifier::from_env`] reads
//!   `NOTIFY_SOCKET` (a path, or an abstract name written `@name`) and
//!   sends datagrams such as `READY=1` and `WATCHDOG=1` to it;
//!   [`watchdog_interval`] reads `WATCHDOG_USEC` (and `WATCHDOG_PID`, which
//!   must name this process when set), the period within which the
//!   service must ping.
//! - [`Listener`]: the supervisor's end (what systemd does, and what
//!   `holdfast-agent` does for the units it runs): a datagram socket bound
//!   to a path, with `SO_TIMESTAMPNS` and `SO_PASSCRED` on, so each message
//!   comes with the kernel's receive time and the sender's pid.
//!   [`Listener::drain`] reads every queued message without waiting: a
//!   supervisor that was itself stopped or starved reads the pings that
//!   came meanwhile, each with its real arrival time, before it judges.
//!
//! No `unsafe`: `std`'s `UnixDatagram` (abstract names through
//! `SocketAddrExt`) and `nix`'s `recvmsg` with its control messages.
//!
//! # Known issues
//! - The receive time is `CLOCK_REALTIME` (what `SO_TIMESTAMPNS` gives); a
//!   step of the wall clock between a ping and its reading shifts that
//!   ping's age by the step.
//! - File descriptors passed with a message (`FDSTORE=1`) are not taken.

use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::net::{SocketAddr, UnixDatagram};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The service's end: sends state strings to the supervisor.
#[derive(Debug)]
pub struct Notifier {
    sock: UnixDatagram,
    addr: SocketAddr,
}

/// Where `NOTIFY_SOCKET` points: an abstract name (`@name`) or a path.
fn notify_addr(spec: &str) -> io::Result<SocketAddr> {
    match spec.strip_prefix('@') {
        Some(name) => {
            use std::os::linux::net::SocketAddrExt;
            SocketAddr::from_abstract_name(name.as_bytes())
        }
        None => SocketAddr::from_pathname(spec),
    }
}

impl Notifier {
    /// The supervisor named by `NOTIFY_SOCKET`, if any.
    pub fn from_env() -> io::Result<Option<Notifier>> {
        match std::env::var("NOTIFY_SOCKET") {
            Ok(spec) if !spec.is_empty() => Notifier::to(&spec).map(Some),
            _ => Ok(None),
        }
    }

    /// A notifier for the socket `spec` (as in `NOTIFY_SOCKET`).
    pub fn to(spec: &str) -> io::Result<Notifier> {
        let addr = notify_addr(spec)?;
        let sock = UnixDatagram::unbound()?;
        sock.set_nonblocking(true)?;
        Ok(Notifier { sock, addr })
    }

    /// Sends one state string (`READY=1`, `WATCHDOG=1`, `STATUS=...`;
    /// several separated by newlines). Never blocks: a full queue is an
    /// error (`WouldBlock`), and the next ping tries again.
    pub fn notify(&self, state: &str) -> io::Result<()> {
        self.sock
            .send_to_addr(state.as_bytes(), &self.addr)
            .map(|_| ())
    }
}

/// The watchdog period the supervisor asks for (`WATCHDOG_USEC`), unless
/// `WATCHDOG_PID` names another process. The service must send
/// `WATCHDOG=1` at least this often (systemd advises every half of it).
pub fn watchdog_interval() -> Option<Duration> {
    parse_watchdog(
        std::env::var("WATCHDOG_USEC").ok().as_deref(),
        std::env::var("WATCHDOG_PID").ok().as_deref(),
        std::process::id(),
    )
}

/// [`watchdog_interval`] from the two variables' values and this pid.
pub fn parse_watchdog(usec: Option<&str>, pid: Option<&str>, me: u32) -> Option<Duration> {
    let usec: u64 = usec?.trim().parse().ok().filter(|u| *u > 0)?;
    if pid.is_some_and(|p| p.trim().parse::<u32>().ok() != Some(me)) {
        return None;
    }
    Some(Duration::from_micros(usec))
}

/// One message received by a [`Listener`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    /// When the kernel received it (`SO_TIMESTAMPNS`, wall clock); the
    /// time of the reading when the kernel gave none.
    pub at: SystemTime,
    /// The sender's pid (`SCM_CREDENTIALS`), when given.
    pub pid: Option<u32>,
    /// The state string.
    pub text: String,
}

impl Message {
    /// Whether it carries `NAME=1` (`READY`, `WATCHDOG`, ...) on a line of
    /// its own.
    pub fn has(&self, name: &str) -> bool {
        self.text
            .lines()
            .any(|l| l.strip_prefix(name).and_then(|r| r.strip_prefix('=')) == Some("1"))
    }
}

/// The supervisor's end: a datagram socket bound to a path.
#[derive(Debug)]
pub struct Listener {
    sock: UnixDatagram,
    path: PathBuf,
}

impl Listener {
    /// Binds `path` (an old socket file there is replaced, so a process
    /// that pinged the previous one reaches nobody).
    pub fn bind(path: &Path) -> io::Result<Listener> {
        use nix::sys::socket::{setsockopt, sockopt};
        match std::fs::remove_file(path) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
            _ => {}
        }
        let sock = UnixDatagram::bind(path)?;
        sock.set_nonblocking(true)?;
        setsockopt(&sock, sockopt::ReceiveTimestampns, &true).map_err(io::Error::from)?;
        setsockopt(&sock, sockopt::PassCred, &true).map_err(io::Error::from)?;
        Ok(Listener {
            sock,
            path: path.to_path_buf(),
        })
    }

    /// Its path (for `NOTIFY_SOCKET`).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Reads every queued message (at most `max`) without waiting,
    /// appending them to `out` in arrival order.
    pub fn drain(&self, out: &mut Vec<Message>, max: usize) -> io::Result<()> {
        use nix::sys::socket::{recvmsg, ControlMessageOwned, MsgFlags, UnixAddr};
        let mut buf = [0u8; 4096];
        for _ in 0..max {
            let mut cmsg =
                nix::cmsg_space!(nix::sys::time::TimeSpec, nix::sys::socket::UnixCredentials);
            let mut iov = [io::IoSliceMut::new(&mut buf)];
            let r = recvmsg::<UnixAddr>(
                self.sock.as_raw_fd(),
                &mut iov,
                Some(&mut cmsg),
                MsgFlags::MSG_DONTWAIT,
            );
            let msg = match r {
                Ok(m) => m,
                Err(nix::errno::Errno::EAGAIN) => return Ok(()),
                Err(nix::errno::Errno::EINTR) => continue,
                Err(e) => return Err(e.into()),
            };
            let mut at = None;
            let mut pid = None;
            for c in msg.cmsgs().map_err(io::Error::from)? {
                match c {
                    ControlMessageOwned::ScmTimestampns(ts) => {
                        at = Some(
                            UNIX_EPOCH
                                + Duration::new(ts.tv_sec().max(0) as u64, ts.tv_nsec() as u32),
                        );
                    }
                    ControlMessageOwned::ScmCredentials(c) => {
                        pid = u32::try_from(c.pid()).ok();
                    }
                    _ => {}
                }
            }
            let n = msg.bytes;
            out.push(Message {
                at: at.unwrap_or_else(SystemTime::now),
                pid,
                text: String::from_utf8_lossy(&buf[..n]).into_owned(),
            });
        }
        Ok(())
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pings_arrive_with_kernel_time_and_the_senders_pid() {
        let dir = std::env::temp_dir().join(format!("hf-notify-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("n.sock");
        let l = Listener::bind(&path).unwrap();
        let n = Notifier::to(path.to_str().unwrap()).unwrap();
        let before = SystemTime::now();
        n.notify("READY=1\nSTATUS=serving").unwrap();
        std::thread::sleep(Duration::from_millis(30));
        n.notify("WATCHDOG=1").unwrap();
        // Read 50 ms late: the times are the kernel's, not the reading's.
        std::thread::sleep(Duration::from_millis(50));
        let read_at = SystemTime::now();
        let mut out = Vec::new();
        l.drain(&mut out, 64).unwrap();
        assert_eq!(out.len(), 2, "{out:?}");
        assert!(out[0].has("READY") && !out[0].has("WATCHDOG"));
        assert!(out[1].has("WATCHDOG"));
        assert_eq!(out[0].pid, Some(std::process::id()));
        assert!(out[0].at >= before && out[0].at < out[1].at);
        let late = read_at.duration_since(out[1].at).unwrap();
        assert!(late >= Duration::from_millis(40), "{late:?}");
        // Nothing queued: no wait, nothing read.
        l.drain(&mut out, 64).unwrap();
        assert_eq!(out.len(), 2);
        // A new bind replaces the socket: the old one's sender reaches
        // nobody.
        drop(l);
        assert!(n.notify("WATCHDOG=1").is_err());
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn abstract_names_and_the_watchdog_period() {
        let name = format!("hf-notify-abstract-{}", std::process::id());
        let l = {
            use std::os::linux::net::SocketAddrExt;
            let a = SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
            UnixDatagram::bind_addr(&a).unwrap()
        };
        let n = Notifier::to(&format!("@{name}")).unwrap();
        n.notify("WATCHDOG=1").unwrap();
        let mut b = [0u8; 64];
        let k = l.recv(&mut b).unwrap();
        assert_eq!(&b[..k], b"WATCHDOG=1");
        assert!(notify_addr("/no/such/dir/sock").is_ok());
        let ms = Duration::from_millis;
        assert_eq!(parse_watchdog(Some("500000"), None, 7), Some(ms(500)));
        assert_eq!(parse_watchdog(Some("500000"), Some("7"), 7), Some(ms(500)));
        assert_eq!(parse_watchdog(Some("500000"), Some("8"), 7), None);
        assert_eq!(parse_watchdog(Some("0"), None, 7), None);
        assert_eq!(parse_watchdog(Some("x"), None, 7), None);
        assert_eq!(parse_watchdog(None, None, 7), None);
    }
}
