//! The election core: `Elector::handle(now, Input) -> Vec<Output>`, no I/O,
//! time an input.
//!
//! A replica holds an etcd lease and campaigns by creating the leader key
//! with it (a transaction: create only if the key is absent). The rule that
//! keeps a deposed leader from acting, in the Patroni style:
//!
//! * the lease is renewed every `ttl / 3` (each renewal RPC is bounded by the
//!   same time);
//! * the leader may act only until `sent + min(ttl, ttl_left) − margin`,
//!   where `sent` is when the last successful renewal (or the grant) was
//!   *sent* and `margin = ttl / 3`. etcd cannot expire the lease before
//!   `sent + ttl_left`, because it received the renewal after `sent`; so the
//!   leader stops acting at least `margin` before etcd could give the key to
//!   anyone else. One missed renewal is tolerated, two are not;
//! * past that deadline (or when the lease is gone, or a fenced write found
//!   the leader key no longer ours) the leader demotes itself and drops its
//!   lease; it campaigns again with a new one.
//!
//! A lease alone is not fencing (a paused process may wake after its
//! deadline and act before it checks the clock). The store-side fence is the
//! transaction compare on the leader key (see `store`), and the agent-side
//! one is [`crate::accept`].

use std::time::{Duration, Instant};

use crate::fence::Token;

/// Timing derived from the lease TTL.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timing {
    /// The lease TTL asked for.
    pub ttl: Duration,
    /// How often the lease is renewed (and the longest a renewal may take).
    pub renew_every: Duration,
    /// How long before the lease could expire the leader stops acting.
    pub margin: Duration,
    /// How often a follower tries to take the leader key.
    pub campaign_every: Duration,
}

impl Timing {
    /// `renew_every = margin = ttl / 3`; `campaign_every = ttl / 10` (a
    /// failed campaign is one cheap transaction; trying often shortens the
    /// failover after the leader key expires).
    pub fn from_ttl(ttl: Duration) -> Timing {
        let third = ttl / 3;
        Timing {
            ttl,
            renew_every: third,
            margin: third,
            campaign_every: ttl / 10,
        }
    }
}

/// Which store operation an [`Input::Failed`] is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// Lease grant.
    Grant,
    /// Leader-key creation.
    Campaign,
    /// Lease renewal.
    Renew,
}

/// What the shell reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Input {
    /// Time passed.
    Tick,
    /// A lease was granted; `sent` is when the grant was sent, `ttl` what
    /// etcd granted.
    Granted {
        /// The lease id.
        lease: i64,
        /// When the request was sent.
        sent: Instant,
        /// The TTL etcd granted.
        ttl: Duration,
    },
    /// The campaign transaction answered: `Some(token)` when it created the
    /// leader key (at that revision), `None` when another replica holds it.
    Campaigned {
        /// Our token if we created the key.
        won: Option<Token>,
    },
    /// A renewal answered; `ttl_left` zero means the lease is gone.
    Renewed {
        /// When the request was sent.
        sent: Instant,
        /// The TTL etcd reports.
        ttl_left: Duration,
    },
    /// A store operation failed or timed out.
    Failed(Op),
    /// A fenced write found that the leader key is no longer ours.
    Fenced,
}

/// Why a leader demoted itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Demotion {
    /// No successful renewal within `ttl − margin`.
    Deadline,
    /// etcd says the lease is gone.
    LeaseLost,
    /// A fenced write failed its compare on the leader key.
    Fenced,
}

/// What the shell must do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Output {
    /// Ask for a new lease of `Timing::ttl`.
    Grant,
    /// Try to create the leader key with this lease.
    Campaign {
        /// Our lease.
        lease: i64,
    },
    /// Renew this lease.
    Renew {
        /// Our lease.
        lease: i64,
    },
    /// Revoke this lease (best effort: it expires anyway).
    Revoke {
        /// The dropped lease.
        lease: i64,
    },
    /// We lead with this token from now on.
    Elected(Token),
    /// We stopped leading.
    Demoted(Demotion),
}

/// The replica's role.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// Not leading.
    Follower,
    /// Leading with this token.
    Leader(Token),
}

/// The election state machine of one replica.
#[derive(Debug, Clone)]
pub struct Elector {
    timing: Timing,
    role: Role,
    lease: Option<i64>,
    /// Until when the lease is surely alive at etcd, less the margin.
    valid_until: Option<Instant>,
    next_renew: Option<Instant>,
    next_campaign: Option<Instant>,
    next_grant: Option<Instant>,
    /// An operation was handed out and has not answered yet.
    pending: Option<Op>,
}

impl Elector {
    /// A follower without a lease.
    pub fn new(timing: Timing) -> Elector {
        Elector {
            timing,
            role: Role::Follower,
            lease: None,
            valid_until: None,
            next_renew: None,
            next_campaign: None,
            next_grant: None,
            pending: None,
        }
    }

    /// The timing in force.
    pub fn timing(&self) -> Timing {
        self.timing
    }

    /// The current role.
    pub fn role(&self) -> Role {
        self.role
    }

    /// Our lease, if any.
    pub fn lease(&self) -> Option<i64> {
        self.lease
    }

    /// The token to act with at `now`: `Some` only while leading and before
    /// the deadline (`sent + ttl − margin` of the last renewal).
    pub fn may_act(&self, now: Instant) -> Option<Token> {
        match self.role {
            Role::Leader(t) if self.valid_until.is_some_and(|v| now < v) => Some(t),
            _ => None,
        }
    }

    /// Feeds one input; returns what to do, in order.
    pub fn handle(&mut self, now: Instant, input: Input) -> Vec<Output> {
        let mut out = Vec::new();
        match input {
            Input::Tick => {}
            Input::Granted { lease, sent, ttl } => {
                self.pending = None;
                self.lease = Some(lease);
                self.extend(sent, ttl);
                self.next_campaign = Some(now);
            }
            Input::Campaigned { won } => {
                self.pending = None;
                match won {
                    Some(token) if self.valid_until.is_some_and(|v| now < v) => {
                        self.role = Role::Leader(token);
                        out.push(Output::Elected(token));
                    }
                    Some(_) => self.drop_lease(&mut out, None),
                    None => self.next_campaign = Some(now + self.timing.campaign_every),
                }
            }
            Input::Renewed { sent, ttl_left } => {
                self.pending = None;
                if ttl_left.is_zero() {
                    self.drop_lease(&mut out, Some(Demotion::LeaseLost));
                } else {
                    self.extend(sent, ttl_left);
                }
            }
            Input::Failed(op) => {
                self.pending = None;
                let retry = now + self.timing.renew_every / 4;
                match op {
                    Op::Grant => self.next_grant = Some(retry),
                    Op::Campaign => self.next_campaign = Some(retry),
                    Op::Renew => self.next_renew = Some(retry),
                }
            }
            Input::Fenced => {
                if matches!(self.role, Role::Leader(_)) {
                    self.drop_lease(&mut out, Some(Demotion::Fenced));
                }
            }
        }
        self.poll(now, &mut out);
        out
    }

    /// Deadlines first (demotion), then at most one store operation.
    fn poll(&mut self, now: Instant, out: &mut Vec<Output>) {
        if self.lease.is_some() && self.valid_until.is_none_or(|v| now >= v) {
            let why = matches!(self.role, Role::Leader(_)).then_some(Demotion::Deadline);
            self.drop_lease(out, why);
        }
        if self.pending.is_some() {
            return;
        }
        let due = |t: Option<Instant>| t.is_none_or(|t| now >= t);
        let op = match self.lease {
            None if due(self.next_grant) => Some((Op::Grant, Output::Grant)),
            None => None,
            Some(lease) if due(self.next_renew) => Some((Op::Renew, Output::Renew { lease })),
            Some(lease) if matches!(self.role, Role::Follower) && due(self.next_campaign) => {
                Some((Op::Campaign, Output::Campaign { lease }))
            }
            Some(_) => None,
        };
        if let Some((op, o)) = op {
            self.pending = Some(op);
            out.push(o);
        }
    }

    fn extend(&mut self, sent: Instant, ttl_left: Duration) {
        let until = sent + ttl_left.min(self.timing.ttl) - self.timing.margin;
        self.valid_until = Some(self.valid_until.map_or(until, |v| v.max(until)));
        self.next_renew = Some(sent + self.timing.renew_every);
    }

    fn drop_lease(&mut self, out: &mut Vec<Output>, demotion: Option<Demotion>) {
        if let Some(lease) = self.lease.take() {
            out.push(Output::Revoke { lease });
        }
        self.valid_until = None;
        self.next_renew = None;
        self.next_campaign = None;
        self.next_grant = None;
        if matches!(self.role, Role::Leader(_)) {
            self.role = Role::Follower;
            out.push(Output::Demoted(demotion.unwrap_or(Demotion::Deadline)));
        }
    }

    /// The earliest time something is due (for the shell's sleep).
    pub fn next_wake(&self) -> Option<Instant> {
        [
            self.valid_until,
            self.next_renew,
            self.next_campaign,
            self.next_grant,
        ]
        .into_iter()
        .flatten()
        .min()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TTL: Duration = Duration::from_millis(3000);

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    /// A follower that got lease 1 at `t0` and is asked to campaign.
    fn granted(t0: Instant) -> Elector {
        let mut e = Elector::new(Timing::from_ttl(TTL));
        assert_eq!(e.handle(t0, Input::Tick), vec![Output::Grant]);
        let out = e.handle(
            t0,
            Input::Granted {
                lease: 1,
                sent: t0,
                ttl: TTL,
            },
        );
        assert_eq!(out, vec![Output::Campaign { lease: 1 }]);
        e
    }

    fn leader(t0: Instant) -> Elector {
        let mut e = granted(t0);
        let out = e.handle(
            t0 + ms(5),
            Input::Campaigned {
                won: Some(Token(42)),
            },
        );
        assert_eq!(out, vec![Output::Elected(Token(42))]);
        e
    }

    #[test]
    fn winning_the_campaign_makes_a_leader_that_may_act() {
        let t0 = Instant::now();
        let e = leader(t0);
        assert_eq!(e.role(), Role::Leader(Token(42)));
        assert_eq!(e.may_act(t0 + ms(10)), Some(Token(42)));
    }

    #[test]
    fn losing_the_campaign_retries_after_a_tenth_of_the_ttl() {
        let t0 = Instant::now();
        let mut e = granted(t0);
        let out = e.handle(t0, Input::Campaigned { won: None });
        assert!(out.is_empty());
        assert!(e.handle(t0 + ms(299), Input::Tick).is_empty());
        assert_eq!(
            e.handle(t0 + ms(300), Input::Tick),
            vec![Output::Campaign { lease: 1 }]
        );
        e.handle(t0 + ms(301), Input::Campaigned { won: None });
        // The follower's lease is renewed like a leader's.
        assert_eq!(
            e.handle(t0 + ms(1000), Input::Tick),
            vec![Output::Renew { lease: 1 }]
        );
        let out = e.handle(
            t0 + ms(1001),
            Input::Renewed {
                sent: t0 + ms(1000),
                ttl_left: TTL,
            },
        );
        assert_eq!(out, vec![Output::Campaign { lease: 1 }]);
        assert_eq!(e.may_act(t0 + ms(1001)), None);
    }

    #[test]
    fn leader_stops_acting_at_ttl_minus_margin_without_renewal() {
        let t0 = Instant::now();
        let mut e = leader(t0);
        assert_eq!(
            e.handle(t0 + ms(1000), Input::Tick),
            vec![Output::Renew { lease: 1 }]
        );
        e.handle(t0 + ms(1100), Input::Failed(Op::Renew));
        assert_eq!(e.may_act(t0 + ms(1999)), Some(Token(42)));
        assert_eq!(e.may_act(t0 + ms(2000)), None);
        let out = e.handle(t0 + ms(2000), Input::Tick);
        assert_eq!(
            out,
            vec![
                Output::Revoke { lease: 1 },
                Output::Demoted(Demotion::Deadline),
                Output::Grant
            ]
        );
        assert_eq!(e.role(), Role::Follower);
    }

    #[test]
    fn deadline_counts_from_when_the_renewal_was_sent() {
        let t0 = Instant::now();
        let mut e = leader(t0);
        e.handle(t0 + ms(1000), Input::Tick);
        // The answer took 900 ms: the lease is good until sent + ttl − margin.
        e.handle(
            t0 + ms(1900),
            Input::Renewed {
                sent: t0 + ms(1000),
                ttl_left: TTL,
            },
        );
        assert_eq!(e.may_act(t0 + ms(2999)), Some(Token(42)));
        assert_eq!(e.may_act(t0 + ms(3000)), None);
    }

    #[test]
    fn a_shorter_ttl_left_shortens_nothing_already_granted_but_caps_the_extension() {
        let t0 = Instant::now();
        let mut e = leader(t0);
        e.handle(t0 + ms(1000), Input::Tick);
        e.handle(
            t0 + ms(1001),
            Input::Renewed {
                sent: t0 + ms(1000),
                ttl_left: ms(1500),
            },
        );
        // sent + 1500 − 1000 = 1500 < 2000 granted before: keep 2000.
        assert_eq!(e.may_act(t0 + ms(1999)), Some(Token(42)));
        assert_eq!(e.may_act(t0 + ms(2000)), None);
    }

    #[test]
    fn lease_gone_or_fenced_demotes_at_once() {
        let t0 = Instant::now();
        let mut e = leader(t0);
        e.handle(t0 + ms(1000), Input::Tick);
        let out = e.handle(
            t0 + ms(1001),
            Input::Renewed {
                sent: t0 + ms(1000),
                ttl_left: Duration::ZERO,
            },
        );
        assert_eq!(
            out[..2],
            [
                Output::Revoke { lease: 1 },
                Output::Demoted(Demotion::LeaseLost)
            ]
        );
        let mut e = leader(t0);
        let out = e.handle(t0 + ms(10), Input::Fenced);
        assert_eq!(
            out[..2],
            [
                Output::Revoke { lease: 1 },
                Output::Demoted(Demotion::Fenced)
            ]
        );
        assert_eq!(e.may_act(t0 + ms(11)), None);
    }

    #[test]
    fn a_win_that_arrives_after_the_deadline_is_not_taken() {
        let t0 = Instant::now();
        let mut e = granted(t0);
        let out = e.handle(
            t0 + ms(2500),
            Input::Campaigned {
                won: Some(Token(9)),
            },
        );
        assert_eq!(out, vec![Output::Revoke { lease: 1 }, Output::Grant]);
        assert_eq!(e.role(), Role::Follower);
    }

    #[test]
    fn fenced_as_a_follower_changes_nothing() {
        let t0 = Instant::now();
        let mut e = granted(t0);
        assert!(e.handle(t0, Input::Fenced).is_empty());
        assert_eq!(e.lease(), Some(1));
    }

    #[test]
    fn one_operation_at_a_time() {
        let t0 = Instant::now();
        let mut e = Elector::new(Timing::from_ttl(TTL));
        assert_eq!(e.handle(t0, Input::Tick), vec![Output::Grant]);
        assert!(e.handle(t0 + ms(5000), Input::Tick).is_empty());
        e.handle(t0 + ms(5001), Input::Failed(Op::Grant));
        assert!(e.handle(t0 + ms(5002), Input::Tick).is_empty());
        assert_eq!(e.handle(t0 + ms(5251), Input::Tick), vec![Output::Grant]);
    }
}
