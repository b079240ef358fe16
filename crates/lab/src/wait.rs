//! Polling with deadlines: the only sanctioned way for tests to wait.

use std::fmt::Debug;
use std::thread;
use std::time::{Duration, Instant};

use crate::error::{LabError, Result};

/// Interval used by [`wait_for`] and [`wait_until`].
pub const DEFAULT_POLL_INTERVAL: Duration = Duration::from_millis(200);

/// Poll `f` every [`DEFAULT_POLL_INTERVAL`] until it returns `Ok(Some(_))` or `timeout` passes.
///
/// Errors returned by `f` are treated as "not yet" and remembered; on timeout the returned
/// [`LabError::WaitTimeout`] carries `desc` and the last observation (`None` or the error).
pub fn wait_for<T: Debug>(
    desc: &str,
    timeout: Duration,
    f: impl FnMut() -> Result<Option<T>>,
) -> Result<T> {
    wait_for_every(desc, timeout, DEFAULT_POLL_INTERVAL, f)
}

/// [`wait_for`] with an explicit poll interval.
pub fn wait_for_every<T: Debug>(
    desc: &str,
    timeout: Duration,
    interval: Duration,
    mut f: impl FnMut() -> Result<Option<T>>,
) -> Result<T> {
    poll(desc, timeout, interval, || match f() {
        Ok(Some(v)) => Ok(v),
        Ok(None) => Err("None".to_string()),
        Err(e) => Err(format!("error: {e}")),
    })
}

/// Poll `observe` until `pred` accepts the observed value or `timeout` passes.
///
/// On timeout the error includes the `Debug` rendering of the last observed value, which is
/// usually what one needs to understand a failing test.
pub fn wait_until<T: Debug>(
    desc: &str,
    timeout: Duration,
    mut observe: impl FnMut() -> Result<T>,
    mut pred: impl FnMut(&T) -> bool,
) -> Result<T> {
    poll(desc, timeout, DEFAULT_POLL_INTERVAL, || match observe() {
        Ok(v) if pred(&v) => Ok(v),
        Ok(v) => Err(format!("{v:?}")),
        Err(e) => Err(format!("error: {e}")),
    })
}

/// Poll `f` until it returns `Ok` or `timeout` passes; on timeout the error
/// carries the last `Err` text (say in it what was seen instead).
pub fn wait_ok<T: Debug>(
    desc: &str,
    timeout: Duration,
    f: impl FnMut() -> std::result::Result<T, String>,
) -> Result<T> {
    poll(desc, timeout, DEFAULT_POLL_INTERVAL, f)
}

/// Run `check` every [`DEFAULT_POLL_INTERVAL`] for the whole of `window` (at least
/// once), for conditions that must keep holding: "the session stays up", "no route is
/// withdrawn while the peer restarts". `check` asserts, so the test fails at the first
/// observation that breaks the condition.
pub fn hold_for(window: Duration, mut check: impl FnMut()) {
    let until = Instant::now() + window;
    loop {
        check();
        let now = Instant::now();
        if now >= until {
            return;
        }
        thread::sleep(DEFAULT_POLL_INTERVAL.min(until - now));
    }
}

/// The one polling loop: `step` returns the value when done, or a rendering of what it
/// observed, which the timeout error carries.
fn poll<T>(
    desc: &str,
    timeout: Duration,
    interval: Duration,
    mut step: impl FnMut() -> std::result::Result<T, String>,
) -> Result<T> {
    let start = Instant::now();
    let deadline = start + timeout;
    loop {
        let last = match step() {
            Ok(v) => return Ok(v),
            Err(last) => last,
        };
        let now = Instant::now();
        if now >= deadline {
            return Err(LabError::WaitTimeout {
                desc: desc.to_string(),
                elapsed: now - start,
                last,
            });
        }
        thread::sleep(interval.min(deadline - now));
    }
}
