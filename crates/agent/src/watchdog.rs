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
//!
//! **Failsafe** (Patroni's `failsafe_mode`). When etcd itself is down (its
//! quorum lost), no controller can write a migration, and fencing every
//! unit of every host would turn a control-plane outage into a data-plane
//! one. So an agent whose renewals are late ([`Watchdog::behind`]) asks
//! every other host agent whether it cannot renew either; an agent that
//! agrees promises not to start any of the asking host's units for one TTL
//! from its answer. Only agents start units, so when every one of them
//! agreed to a round sent at `f`, none can start these units before
//! `f + ttl`, and the agent may keep them until `f + ttl - margin`
//! ([`Watchdog::confirmed`]): a confirmed round counts like an acknowledged
//! renewal for the fence deadline. One agent that is not asked, does not
//! answer, or renews fine (so the asking host alone is cut off) and the
//! agent fences on the usual deadline.

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
    /// When the last failsafe round every other agent agreed to was sent.
    confirmed_at: Option<Time>,
    /// When the last failsafe round was sent.
    asked_at: Option<Time>,
    fenced: bool,
}

impl Watchdog {
    pub fn new(cfg: WatchdogConfig) -> Watchdog {
        Watchdog {
            cfg,
            renewed_at: None,
            sent_at: None,
            confirmed_at: None,
            asked_at: None,
            fenced: false,
        }
    }

    /// Every other agent agreed to a failsafe round sent at `sent`: none of
    /// them starts this host's units before `sent + ttl`.
    pub fn confirmed(&mut self, sent: Time) {
        if self.confirmed_at.is_none_or(|c| sent > c) {
            self.confirmed_at = Some(sent);
        }
    }

    /// Whether the renewals are late: none acknowledged (or none ever)
    /// among those sent over the last two renewal periods. An agent that is
    /// behind agrees to other agents' failsafe rounds.
    pub fn behind(&self, now: Time) -> bool {
        self.fenced
            || self
                .renewed_at
                .is_none_or(|r| now.saturating_sub(r) >= 2 * self.cfg.renew)
    }

    /// Whether a failsafe round is due: the host holds units under a lease
    /// whose renewals are late, and none was sent this renewal period.
    pub fn ask_due(&self, now: Time) -> bool {
        !self.fenced
            && self.renewed_at.is_some()
            && self.behind(now)
            && self
                .asked_at
                .is_none_or(|a| now.saturating_sub(a) >= self.cfg.renew)
    }

    /// A failsafe round is sent at `now`.
    pub fn asking(&mut self, now: Time) {
        self.asked_at = Some(now);
    }

    /// Whether the units are kept by a confirmed failsafe round rather than
    /// by the lease (the last confirmation is newer than the last renewal).
    pub fn in_failsafe(&self) -> bool {
        !self.fenced && matches!((self.confirmed_at, self.renewed_at), (Some(c), Some(r)) if c > r)
    }

    /// The send time the fence deadline counts from: the last acknowledged
    /// renewal or the last confirmed failsafe round, whichever is later
    /// (`None` before the first lease: nothing to fence against).
    fn alive_from(&self) -> Option<Time> {
        let r = self.renewed_at?;
        Some(self.confirmed_at.map_or(r, |c| c.max(r)))
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
        if let Some(r) = self.alive_from().filter(|_| !self.fenced) {
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
            .alive_from()
            .filter(|_| !self.fenced)
            .map(|r| r + self.cfg.ttl - self.cfg.margin);
        let ask = self.renewed_at.filter(|_| !self.fenced).map(|r| {
            let late = r + 2 * self.cfg.renew;
            self.asked_at.map_or(late, |a| late.max(a + self.cfg.renew))
        });
        [renew, fence, ask].into_iter().flatten().min()
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
        // Renewals are late from 1 s: a failsafe round is due (nobody
        // agrees to it here).
        assert_eq!(w.next_deadline(), Some(1000 * MS));
        assert!(w.ask_due(1000 * MS));
        w.asking(1000 * MS);
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

    #[test]
    fn a_confirmed_failsafe_round_moves_the_fence_deadline() {
        let mut w = Watchdog::new(WatchdogConfig::DEFAULT);
        w.sending(Duration::ZERO);
        w.renewed(Duration::ZERO);
        assert!(!w.behind(999 * MS));
        assert!(!w.ask_due(999 * MS), "renewals on time: nothing to ask");
        // Renewals from 500 ms on go unanswered.
        assert!(w.behind(1000 * MS));
        assert!(w.ask_due(1000 * MS));
        w.asking(1000 * MS);
        assert!(!w.ask_due(1200 * MS), "one round per renewal period");
        assert!(w.ask_due(1500 * MS));
        // The round sent at 1 s is confirmed: the deadline is 1 s + 1.5 s.
        w.confirmed(1000 * MS);
        assert!(w.in_failsafe());
        w.asking(1500 * MS);
        assert_eq!(w.check(1501 * MS), Action::Renew, "no fence at 1.5 s");
        w.sending(1501 * MS);
        assert_eq!(w.next_deadline(), Some(2000 * MS));
        assert_eq!(w.check(2499 * MS), Action::Renew);
        w.sending(2499 * MS);
        // The round sent at 1.5 s was refused (an agent renews fine, or one
        // did not answer): the deadline stays at 2.5 s.
        assert_eq!(w.check(2500 * MS), Action::Fence);
        assert!(!w.in_failsafe() && w.behind(2500 * MS));
        assert!(!w.ask_due(3000 * MS), "fenced: nothing left to keep");
        // Negative: without the confirmation the same agent fences at 1.5 s.
        let mut w = Watchdog::new(WatchdogConfig::DEFAULT);
        w.sending(Duration::ZERO);
        w.renewed(Duration::ZERO);
        assert_eq!(w.check(1500 * MS), Action::Fence);
        // An older confirmation than the last renewal changes nothing.
        let mut w = Watchdog::new(WatchdogConfig::DEFAULT);
        w.renewed(800 * MS);
        w.confirmed(300 * MS);
        assert!(!w.in_failsafe());
        w.sending(800 * MS);
        assert_eq!(w.check(2300 * MS), Action::Fence);
    }

    #[test]
    fn an_agent_without_a_lease_agrees_but_never_asks() {
        let w = Watchdog::new(WatchdogConfig::DEFAULT);
        assert!(w.behind(Duration::ZERO));
        assert!(!w.ask_due(10_000 * MS), "no lease: no units kept by one");
    }
}
