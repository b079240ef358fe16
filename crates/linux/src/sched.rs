//! Real-time scheduling for the threads that keep a protocol's timers
//! (BFD, RFC 5880 §6.8.7: a packet every Desired Min TX Interval, less up
//! to 25% jitter, never more).
//!
//! On a busy host the kernel's fair scheduler may leave a runnable thread
//! waiting for tens of milliseconds behind CPU-bound work (a table load, a
//! build, another daemon), and a BFD session at 50 ms × 3 has 150 ms in
//! all. A `SCHED_FIFO` thread runs as soon as it wakes, ahead of every
//! normal thread. `SCHED_RESET_ON_FORK` keeps its children (none are
//! expected) out of the real-time class.
//!
//! The kernel caps what real-time threads may take (`sched_rt_runtime_us`,
//! 95% of each second by default), so a runaway thread cannot freeze a
//! host. With `CONFIG_RT_GROUP_SCHED`, a thread in a cgroup without a
//! real-time budget (`cpu.rt_runtime_us` = 0, the default for a new group)
//! is refused with `EPERM`, as is a process without `CAP_SYS_NICE` or an
//! `RLIMIT_RTPRIO`: callers log the refusal and go on at normal priority.
//!
//! The other way round, [`set_thread_idle`] puts a thread that does
//! deferred work (freeing a large table after a takeover) in `SCHED_IDLE`:
//! it runs only when no other thread of the host wants the CPU.
//!
//! Known issues:
//! - Only the calling thread changes; there is no way to name another
//!   thread of the process (a tid would race with its exit).

use std::io;

/// Lowest and highest `SCHED_FIFO` priorities Linux accepts.
pub const RT_PRIORITY_RANGE: std::ops::RangeInclusive<u8> = 1..=99;

/// Puts the calling thread in `SCHED_FIFO` at `priority` (1–99), or back
/// in `SCHED_OTHER` when `priority` is 0.
pub fn set_thread_realtime(priority: u8) -> io::Result<()> {
    if priority != 0 && !RT_PRIORITY_RANGE.contains(&priority) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("real-time priority {priority} is outside 1-99"),
        ));
    }
    let policy = if priority == 0 {
        libc::SCHED_OTHER
    } else {
        libc::SCHED_FIFO
    } | libc::SCHED_RESET_ON_FORK;
    let param = libc::sched_param {
        sched_priority: i32::from(priority),
    };
    // SAFETY: `param` is a valid, initialized `sched_param` that outlives
    // the call; pid 0 names the calling thread.
    let rc = unsafe { libc::sched_setscheduler(0, policy, &param) };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Puts the calling thread in `SCHED_IDLE`: it runs only on a CPU nothing
/// else wants. Lowering a thread's class needs no privilege.
pub fn set_thread_idle() -> io::Result<()> {
    let param = libc::sched_param { sched_priority: 0 };
    // SAFETY: `param` is a valid, initialized `sched_param` that outlives
    // the call; pid 0 names the calling thread.
    let rc = unsafe {
        libc::sched_setscheduler(0, libc::SCHED_IDLE | libc::SCHED_RESET_ON_FORK, &param)
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Whether the calling thread is in `SCHED_IDLE`.
pub fn thread_idle() -> io::Result<bool> {
    // SAFETY: no arguments besides pid 0 (the calling thread).
    let policy = unsafe { libc::sched_getscheduler(0) };
    if policy < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(policy & !libc::SCHED_RESET_ON_FORK == libc::SCHED_IDLE)
}

/// The calling thread's policy and priority: `Some(priority)` in
/// `SCHED_FIFO` or `SCHED_RR`, `None` otherwise.
pub fn thread_realtime() -> io::Result<Option<u8>> {
    // SAFETY: no arguments besides pid 0 (the calling thread).
    let policy = unsafe { libc::sched_getscheduler(0) };
    if policy < 0 {
        return Err(io::Error::last_os_error());
    }
    let policy = policy & !libc::SCHED_RESET_ON_FORK;
    if policy != libc::SCHED_FIFO && policy != libc::SCHED_RR {
        return Ok(None);
    }
    let mut param = libc::sched_param { sched_priority: 0 };
    // SAFETY: `param` is a valid `sched_param` the kernel writes into; it
    // outlives the call.
    let rc = unsafe { libc::sched_getparam(0, &mut param) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(Some(param.sched_priority.clamp(0, 99) as u8))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn out_of_range_is_refused_before_the_kernel() {
        let e = set_thread_realtime(100).expect_err("100 is no priority");
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
    }

    #[test]
    fn idle_needs_no_privilege() {
        std::thread::spawn(|| {
            assert!(!thread_idle().expect("read"));
            set_thread_idle().expect("idle");
            assert!(thread_idle().expect("read"));
            assert_eq!(thread_realtime().expect("read"), None);
        })
        .join()
        .expect("thread");
    }

    #[test]
    fn realtime_then_back_or_refused_with_eperm() {
        // Run in a thread of its own: the test harness's thread keeps its
        // class whatever happens here.
        std::thread::spawn(|| match set_thread_realtime(10) {
            Ok(()) => {
                assert_eq!(thread_realtime().expect("read"), Some(10));
                set_thread_realtime(0).expect("back to normal");
                assert_eq!(thread_realtime().expect("read"), None);
            }
            Err(e) => assert_eq!(e.raw_os_error(), Some(libc::EPERM), "{e}"),
        })
        .join()
        .expect("thread");
    }
}
