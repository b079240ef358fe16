//! The self-fencing rule of an agent (issue 11; Patroni's watchdog).
//!
//! The agent holds an etcd lease of `ttl` and renews it every `renew`. The
//! controller migrates a host's units only after the host's lease has
//! expired in etcd. For that to be safe the agent must have fenced its
//! units first, so it fences when it has not renewed for `ttl - margin`,
//! where the margin covers one renewal period, the time fencing takes, and
//! clock drift between the agent and etcd:
//!
//! ```text
//! renew + fence_time + drift <= margin < ttl
//! ```
//!
//! A renewal is counted from the moment the request was *sent*, not when
//! the answer came back: etcd may have applied it any time in between, so
//! the lease is only known to last `ttl` from the send.

use crate::Time;
use std::time::Duration;

/// Settings of the watchdog.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WatchdogConfig {
    /// The lease's time to live.
    pub ttl: Duration,
    /// How often the agent renews.
    pub renew: Duration,
    /// Fence this long before the lease could expire.
    pub margin: Duration,
}

/// Why a configuration cannot be safe.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WatchdogError {
    #[error("margin ({margin:?}) must be at least the renewal period ({renew:?}) plus the fencing time ({fence:?})")]
    MarginTooSmall {
        margin: Duration,
        renew: Duration,
        fence: Duration,
    },
    #[error("margin ({margin:?}) must be below the lease TTL ({ttl:?})")]
    MarginTooLarge { margin: Duration, ttl: Duration },
}

impl WatchdogConfig {
    /// A 3 s lease renewed every 500 ms, fencing 1.5 s before it could
    /// expire.
    pub const DEFAULT: WatchdogConfig = WatchdogConfig {
        ttl: Duration::from_secs(3),
        renew: Duration::from_millis(500),
        margin: Duration::from_millis(1500),
    };

    /// Checks `renew + fence_time <= margin < ttl`.
    pub fn validate(&self, fence_time: Duration) -> Result<(), WatchdogError> {
        if self.margin >= self.ttl {
            return Err(WatchdogError::MarginTooLarge {
                margin: self.margin,
                ttl: self.ttl,
            });
        }
        if self.renew + fence_time > self.margin {
            return Err(WatchdogError::MarginTooSmall {
                margin: self.margin,
                renew: self.renew,
                fence: fence_time,
            });
        }
        Ok(())
    }
}

/// What the agent must do now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// The lease is safe.
    Hold,
    /// Send a renewal now.
    Renew,
    /// Fence every unit on the host now: the lease may expire before a
    /// renewal could land.
    Fence,
}

/// The watchdog: renewals in, actions out.
#[derive(Debug, Clone)]
pub struct Watchdog {
    cfg: WatchdogConfig,
    /// When the last acknowledged renewal was sent.
    renewed_at: Option<Time>,
    /// When the last renewal was sent (acknowledged or not).
    sent_at: Option<Time>,
    fenced: bool,
}

impl Watchdog {
    pub fn new(cfg: WatchdogConfig) -> Watchdog {
        Watchdog {
            cfg,
            renewed_at: None,
            sent_at: None,
            fenced: false,
        }
    }

    /// The lease was granted or renewed by a request sent at `sent`.
    pub fn renewed(&mut self, sent: Time) {
        if self.renewed_at.is_none_or(|r| sent > r) {
            self.renewed_at = Some(sent);
        }
    }

    /// A renewal request is sent at `now`.
    pub fn sending(&mut self, now: Time) {
        self.sent_at = Some(now);
    }

    /// Whether the agent fenced its units (terminal until [`Watchdog::reset`]).
    pub fn fenced(&self) -> bool {
        self.fenced
    }

    /// A new lease after fencing: the host starts over.
    pub fn reset(&mut self) {
        *self = Watchdog::new(self.cfg);
    }

    /// The action due at `now`. `Fence` is returned once; afterwards the
    /// agent keeps asking for a lease (`Renew`, which must grant a new one:
    /// the old lease may have expired) until [`Watchdog::reset`].
    pub fn check(&mut self, now: Time) -> Action {
        if let Some(r) = self.renewed_at.filter(|_| !self.fenced) {
            if now.saturating_sub(r) + self.cfg.margin >= self.cfg.ttl {
                self.fenced = true;
                return Action::Fence;
            }
        }
        // Without a lease yet, the grant is retried at the same pace.
        let since_send = self
            .sent_at
            .map_or(Duration::MAX, |s| now.saturating_sub(s));
        if since_send >= self.cfg.renew {
            Action::Renew
        } else {
            Action::Hold
        }
    }

    /// When [`Watchdog::check`] next has something to say.
    pub fn next_deadline(&self) -> Option<Time> {
        let renew = self.sent_at.map(|s| s + self.cfg.renew);
        let fence = self
            .renewed_at
            .filter(|_| !self.fenced)
            .map(|r| r + self.cfg.ttl - self.cfg.margin);
        match (renew, fence) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn validation_names_the_broken_rule() {
        assert!(WatchdogConfig::DEFAULT.validate(500 * MS).is_ok());
        let e = WatchdogConfig::DEFAULT.validate(1200 * MS).unwrap_err();
        assert!(matches!(e, WatchdogError::MarginTooSmall { .. }), "{e}");
        let bad = WatchdogConfig {
            margin: 3000 * MS,
            ..WatchdogConfig::DEFAULT
        };
        assert!(matches!(
            bad.validate(MS).unwrap_err(),
            WatchdogError::MarginTooLarge { .. }
        ));
    }

    /// The table: (time, event, expected action).
    #[test]
    fn renews_on_time_and_fences_before_the_lease_can_expire() {
        let mut w = Watchdog::new(WatchdogConfig::DEFAULT);
        assert_eq!(w.check(Duration::ZERO), Action::Renew);
        w.sending(Duration::ZERO);
        // No grant yet: retried at the renewal pace, not at once.
        assert_eq!(w.check(MS), Action::Hold);
        assert_eq!(w.next_deadline(), Some(500 * MS));
        w.renewed(Duration::ZERO);
        assert_eq!(w.check(100 * MS), Action::Hold);
        assert_eq!(w.check(500 * MS), Action::Renew);
        w.sending(500 * MS);
        // No answer from etcd from now on.
        assert_eq!(w.check(900 * MS), Action::Hold);
        assert_eq!(w.check(1000 * MS), Action::Renew);
        w.sending(1000 * MS);
        assert_eq!(w.next_deadline(), Some(1500 * MS));
        // The last acknowledged renewal was sent at 0: the lease may expire
        // at 3 s; the agent fences at 3 s - 1.5 s.
        assert_eq!(w.check(1499 * MS), Action::Hold);
        assert_eq!(w.check(1500 * MS), Action::Fence);
        assert!(w.fenced());
        // Fenced once; from then on it asks for a new lease at the renewal
        // pace (the last request went out at 1 s).
        assert_eq!(w.check(1501 * MS), Action::Renew);
        w.sending(1501 * MS);
        assert_eq!(w.check(1600 * MS), Action::Hold, "fences once");
        assert_eq!(w.next_deadline(), Some(2001 * MS));
        w.reset();
        assert_eq!(w.check(2000 * MS), Action::Renew);
    }

    #[test]
    fn a_late_answer_counts_from_its_send_time() {
        let mut w = Watchdog::new(WatchdogConfig::DEFAULT);
        w.sending(Duration::ZERO);
        w.renewed(Duration::ZERO);
        w.sending(500 * MS);
        // The answer to the 500 ms request arrives at 1.4 s: the lease lasts
        // from 500 ms, so the fence point moves to 2 s, not 2.9 s.
        w.renewed(500 * MS);
        assert_eq!(w.check(1999 * MS), Action::Renew);
        w.sending(1999 * MS);
        assert_eq!(w.check(2000 * MS), Action::Fence);
        // An older answer never moves it back.
        let mut w = Watchdog::new(WatchdogConfig::DEFAULT);
        w.renewed(800 * MS);
        w.renewed(300 * MS);
        w.sending(800 * MS);
        assert_eq!(w.check(2299 * MS), Action::Renew);
        w.sending(2299 * MS);
        assert_eq!(w.check(2300 * MS), Action::Fence);
    }
}
