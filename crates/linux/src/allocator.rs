//! The one setting holdfastd changes in its allocator, mimalloc (v3):
//! how long freed memory stays resident before it is given back to the
//! kernel (`mi_option_purge_delay`).
//!
//! mimalloc v3 waits 1000 ms by default (v2 waited 10 ms). With non-stop
//! routing every received byte and every UPDATE sent passes through buffers
//! that live a few milliseconds (read, replicated, written); during a bulk
//! load a second's worth of them, tens of megabytes, stayed resident after
//! they were freed: a realistic 1M-route load peaked at 166–180 MB with NSR
//! against 146–152 MB without (docs/notes/issue12-nsr-performance.md). At
//! [`PURGE_DELAY_MS`] the pages freed by such buffers go back within that
//! time, while pages reused right away (the common case under load) are
//! never returned and faulted in again.
//!
//! A backup taking over is the exception: it keeps v3's delay until 10 s
//! after its sessions have resumed, past the table rebuild. Measured with a
//! preheated standby at 1M routes, the short delay made the takeover's
//! BGP resume 109–111 ms instead of 77–91 ms (its state load 2.4–3.2 ms
//! instead of 0.3–0.4 ms): the takeover allocates what the load had just
//! freed, and with the short delay those pages had gone back to the
//! kernel and were faulted in and zeroed again.
//!
//! Only built with the `mimalloc` feature (holdfastd's allocator); every
//! call is a plain option setter of the linked mimalloc library.
//!
//! # Known issues
//! - `libmimalloc-sys` names no constant for `mi_option_purge_delay`; its
//!   index in v3's `mi_option_t` is written here ([`OPTION_PURGE_DELAY`])
//!   and a unit test checks it against the option's v3 default.
//! - A backup switches to the short delay a fixed 10 s after its sessions
//!   resumed (`resume::SHORT_PURGE_AFTER`), not when its tables are
//!   rebuilt; a much larger table rebuilds later than that.

use libmimalloc_sys::{mi_option_get, mi_option_set, mi_option_t};
use std::ffi::c_long;

/// `mi_option_purge_delay` in mimalloc v3's `mi_option_e` (`mimalloc.h`).
const OPTION_PURGE_DELAY: mi_option_t = 15;

/// The purge delay holdfastd runs with, in milliseconds (mimalloc v2's).
pub const PURGE_DELAY_MS: c_long = 10;

/// Sets the purge delay to [`PURGE_DELAY_MS`], unless the operator chose
/// one (`MIMALLOC_PURGE_DELAY` in the environment).
pub fn use_short_purge_delay() {
    if std::env::var_os("MIMALLOC_PURGE_DELAY").is_none() {
        set_purge_delay_ms(PURGE_DELAY_MS);
    }
}

/// Sets mimalloc's purge delay to `ms` milliseconds (0: purge at once).
pub fn set_purge_delay_ms(ms: c_long) {
    // SAFETY: `mi_option_set` only stores the value in mimalloc's option
    // table (an atomic store); any option index and value are accepted.
    unsafe { mi_option_set(OPTION_PURGE_DELAY, ms) }
}

/// mimalloc's current purge delay in milliseconds.
pub fn purge_delay_ms() -> c_long {
    // SAFETY: `mi_option_get` reads mimalloc's option table, initialising
    // the option from the environment (`MIMALLOC_PURGE_DELAY`) first.
    unsafe { mi_option_get(OPTION_PURGE_DELAY) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_option_index_is_the_purge_delay() {
        // v3's default is 1000 ms, unless the environment says otherwise;
        // no other option of v3 defaults to 1000.
        let expect = std::env::var("MIMALLOC_PURGE_DELAY")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(1000);
        assert_eq!(purge_delay_ms(), expect);
        set_purge_delay_ms(PURGE_DELAY_MS);
        assert_eq!(purge_delay_ms(), PURGE_DELAY_MS);
    }
}
