//! Process file descriptors (`pidfd_open(2)`, Linux 5.3+): watching and
//! signalling a process without the race of a recycled PID.
//!
//! A host agent opens a pidfd for every unit process it starts or adopts.
//! The descriptor becomes readable when the process exits (so it can sit
//! in a `poll(2)` set or a tokio `AsyncFd`), and `pidfd_send_signal(2)`
//! reaches exactly that process even if its PID has since been reused.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

/// Opens a pidfd for `pid` (`ESRCH` if there is no such process).
pub fn open(pid: u32) -> io::Result<OwnedFd> {
    let pid = libc::pid_t::try_from(pid)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "PID out of range"))?;
    // SAFETY: pidfd_open takes a PID and a flags word and returns a new
    // descriptor or -1; no memory is passed.
    let rc = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0 as libc::c_uint) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    let fd = libc::c_int::try_from(rc)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "descriptor out of range"))?;
    // SAFETY: `fd` was just returned by the kernel and is owned by nobody
    // else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Whether the process has exited (its pidfd is readable), waiting up to
/// `timeout_ms` (0: just check; negative: wait for ever).
pub fn exited(fd: BorrowedFd<'_>, timeout_ms: i32) -> io::Result<bool> {
    let mut p = libc::pollfd {
        fd: fd.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    loop {
        // SAFETY: `p` is one valid pollfd that lives across the call; the
        // count passed is 1.
        let rc = unsafe { libc::poll(&mut p, 1, timeout_ms) };
        if rc >= 0 {
            return Ok(rc > 0 && p.revents & libc::POLLIN != 0);
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// Sends `signal` to the process of `fd` (`pidfd_send_signal(2)`); `ESRCH`
/// once it has exited.
pub fn send_signal(fd: BorrowedFd<'_>, signal: libc::c_int) -> io::Result<()> {
    // SAFETY: the descriptor is live for the borrow; a null siginfo and zero
    // flags ask for the same behaviour as kill(2).
    let rc = unsafe {
        libc::syscall(
            libc::SYS_pidfd_send_signal,
            fd.as_raw_fd(),
            signal,
            std::ptr::null::<libc::siginfo_t>(),
            0 as libc::c_uint,
        )
    };
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;
    use std::process::Command;

    #[test]
    fn watches_and_kills_exactly_its_process() {
        let mut child = Command::new("sleep").arg("30").spawn().expect("sleep");
        let fd = open(child.id()).expect("pidfd");
        assert!(!exited(fd.as_fd(), 0).unwrap(), "still running");
        send_signal(fd.as_fd(), libc::SIGKILL).expect("kill");
        assert!(exited(fd.as_fd(), 5000).unwrap(), "readable once it exits");
        let st = child.wait().unwrap();
        assert!(!st.success());
        // Reaped: the pidfd still refers to it, and signalling fails.
        assert!(send_signal(fd.as_fd(), libc::SIGKILL).is_err());
        assert!(open(u32::MAX).is_err());
    }
}
