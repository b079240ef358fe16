//! One holder per network namespace: a lock that a process holds for as
//! long as it lives, and that names its holder to whoever finds it taken.
//!
//! The lock is a listening Unix socket bound to an *abstract* name. The
//! abstract socket namespace belongs to the network namespace, so the same
//! name may be held once per network namespace and nowhere else, and the
//! kernel releases it when the holder's socket closes — when the process
//! exits or is killed, too. A process that crashed therefore never leaves a
//! stale lock behind.
//!
//! The holder accepts connections on a thread of its own and writes each
//! one a line describing itself (given to [`NetnsLock::acquire`]), then
//! closes it. A process that finds the lock taken connects, reads the
//! holder's process id from the connection (`SO_PEERCRED`, set by the
//! kernel, so it cannot lie) and its description (waiting at most
//! [`DESCRIBE_WAIT`]: a frozen holder does not answer) and returns them as
//! a [`Holder`].
//!
//! # Known issues
//! - The pid is the holder's in *its* pid namespace as seen from ours: 0
//!   when the holder's pid namespace is not a descendant of ours.
//! - A holder that is frozen (SIGSTOP) keeps the lock and answers no
//!   description; [`Holder::description`] is then `None`.

use nix::sys::socket::{self, sockopt, AddressFamily, SockFlag, SockType, UnixAddr};
use std::io::{self, Read, Write};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixListener, UnixStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How long a process that found the lock taken waits for the holder's
/// description.
pub const DESCRIBE_WAIT: Duration = Duration::from_millis(500);

/// Longest description written to a connection.
const MAX_DESCRIPTION: usize = 1024;

/// A lock held on an abstract name in this network namespace; released
/// when dropped (or when the process exits).
#[derive(Debug)]
pub struct NetnsLock {
    name: String,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

/// Who holds a lock that was found taken.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Holder {
    /// The holder's process id (`SO_PEERCRED`); 0 if not visible from here.
    pub pid: i32,
    /// The holder's command line (`/proc/PID/cmdline`), if readable.
    pub cmdline: Option<String>,
    /// What the holder says about itself, if it answered in time.
    pub description: Option<String>,
}

impl std::fmt::Display for Holder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "pid {}", self.pid)?;
        if let Some(c) = &self.cmdline {
            write!(f, " ({c})")?;
        }
        match &self.description {
            Some(d) => write!(f, ": {d}"),
            None => write!(f, ": no answer (frozen?)"),
        }
    }
}

fn abstract_addr(name: &str) -> io::Result<SocketAddr> {
    SocketAddr::from_abstract_name(name.as_bytes())
}

impl NetnsLock {
    /// Takes the lock `name` in the calling thread's network namespace.
    /// `Ok(Err(holder))`: another process holds it. `description` is what
    /// this process will tell the next one (one line; truncated to 1 KiB).
    pub fn acquire(name: &str, description: &str) -> io::Result<Result<NetnsLock, Holder>> {
        let addr = abstract_addr(name)?;
        // A holder that is exiting refuses connections before its name is
        // free: try again briefly.
        let deadline = Instant::now() + Duration::from_secs(1);
        loop {
            match UnixListener::bind_addr(&addr) {
                Ok(listener) => return Ok(Ok(Self::serve(name, listener, description)?)),
                Err(e) if e.kind() == io::ErrorKind::AddrInUse => match holder(name)? {
                    Some(h) => return Ok(Err(h)),
                    None if Instant::now() < deadline => {
                        std::thread::sleep(Duration::from_millis(10));
                    }
                    None => {
                        return Err(io::Error::new(
                            io::ErrorKind::AddrInUse,
                            format!("abstract socket @{name} is bound but accepts no connection"),
                        ))
                    }
                },
                Err(e) => return Err(e),
            }
        }
    }

    fn serve(name: &str, listener: UnixListener, description: &str) -> io::Result<NetnsLock> {
        let mut line: String = description
            .chars()
            .filter(|c| *c != '\n')
            .take(MAX_DESCRIPTION)
            .collect();
        line.push('\n');
        let stop = Arc::new(AtomicBool::new(false));
        let stop2 = Arc::clone(&stop);
        let thread = std::thread::Builder::new()
            .name("netns-lock".into())
            .spawn(move || {
                for conn in listener.incoming() {
                    if stop2.load(Ordering::SeqCst) {
                        break;
                    }
                    if let Ok(mut c) = conn {
                        let _ = c.set_write_timeout(Some(DESCRIBE_WAIT));
                        let _ = c.write_all(line.as_bytes());
                    }
                }
            })?;
        Ok(NetnsLock {
            name: name.to_string(),
            stop,
            thread: Some(thread),
        })
    }

    /// The lock's abstract name.
    pub fn name(&self) -> &str {
        &self.name
    }
}

impl Drop for NetnsLock {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // Wake the accepting thread so that it sees the flag and closes the
        // listener.
        if let Ok(addr) = abstract_addr(&self.name) {
            let _ = UnixStream::connect_addr(&addr);
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Connects to the holder of `name` without blocking (a frozen holder's
/// backlog may be full) and asks who it is. `None`: nobody listens.
fn holder(name: &str) -> io::Result<Option<Holder>> {
    let fd: OwnedFd = socket::socket(
        AddressFamily::Unix,
        SockType::Stream,
        SockFlag::SOCK_NONBLOCK | SockFlag::SOCK_CLOEXEC,
        None,
    )?;
    let addr = UnixAddr::new_abstract(name.as_bytes())?;
    match socket::connect(fd.as_raw_fd(), &addr) {
        Ok(()) => {}
        Err(nix::errno::Errno::ECONNREFUSED) => return Ok(None),
        Err(nix::errno::Errno::EAGAIN) => {
            return Ok(Some(Holder {
                pid: 0,
                cmdline: None,
                description: Some("its lock's backlog is full (frozen?)".into()),
            }))
        }
        Err(e) => return Err(e.into()),
    }
    let cred = socket::getsockopt(&fd, sockopt::PeerCredentials)?;
    let pid = cred.pid();
    let mut stream = UnixStream::from(fd);
    stream.set_nonblocking(false)?;
    stream.set_read_timeout(Some(DESCRIBE_WAIT))?;
    let mut buf = Vec::new();
    let _ = (&mut stream)
        .take(MAX_DESCRIPTION as u64 + 1)
        .read_to_end(&mut buf);
    let text = String::from_utf8_lossy(&buf).trim().to_string();
    Ok(Some(Holder {
        pid,
        cmdline: (pid > 0).then(|| cmdline(pid)).flatten(),
        description: (!text.is_empty()).then_some(text),
    }))
}

/// `/proc/PID/cmdline` with spaces between the arguments.
fn cmdline(pid: i32) -> Option<String> {
    let raw = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    let words: Vec<String> = raw
        .split(|b| *b == 0)
        .filter(|w| !w.is_empty())
        .map(|w| String::from_utf8_lossy(w).into_owned())
        .collect();
    (!words.is_empty()).then(|| words.join(" "))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unique(tag: &str) -> String {
        format!("holdfast-test-{tag}-{}", std::process::id())
    }

    #[test]
    fn a_second_acquire_names_the_holder() {
        let name = unique("second");
        let lock = NetnsLock::acquire(&name, "instance \"a\", NFQUEUE 3")
            .unwrap()
            .expect("free");
        let h = NetnsLock::acquire(&name, "instance \"b\"")
            .unwrap()
            .expect_err("taken");
        assert_eq!(h.pid, std::process::id() as i32);
        assert_eq!(h.description.as_deref(), Some("instance \"a\", NFQUEUE 3"));
        assert!(h.cmdline.is_some());
        assert!(h.to_string().contains("NFQUEUE 3"), "{h}");
        // Asking again works as often as needed (connections are served).
        for _ in 0..3 {
            assert!(NetnsLock::acquire(&name, "x").unwrap().is_err());
        }
        drop(lock);
    }

    #[test]
    fn dropping_releases() {
        let name = unique("drop");
        let lock = NetnsLock::acquire(&name, "first").unwrap().expect("free");
        drop(lock);
        let again = NetnsLock::acquire(&name, "second")
            .unwrap()
            .expect("free again");
        assert_eq!(again.name(), name);
    }

    #[test]
    fn different_names_do_not_conflict() {
        let a = NetnsLock::acquire(&unique("a"), "a").unwrap();
        let b = NetnsLock::acquire(&unique("b"), "b").unwrap();
        assert!(a.is_ok() && b.is_ok());
    }
}
