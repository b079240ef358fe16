//! The agent's link to the leading controller replica: one `Attach`
//! stream, left when the leader falls silent.
//!
//! - **Whom to attach to.** The `leader` key in etcd names the leader, its
//!   fencing token and where it serves `Attach` (its `--listen`); the agent
//!   attaches to the `--controller` with that address. The token goes to
//!   the core at once (a deposed leader's commands are refused from then
//!   on). With no leader named, the agent waits for one; with etcd
//!   unreadable, or a leader address that matches no `--controller`, it
//!   tries each `--controller` in turn (a replica that does not lead
//!   refuses). Every connect and attach is bounded ([`ATTACH_WITHIN`]): a
//!   frozen replica completes TCP handshakes but never answers.
//! - **Silence.** The leader beats on every stream every 100 ms. A stream
//!   on which nothing arrived for `--leader-silence-ms` is left: a frozen
//!   leader keeps its TCP connections open, so the stream alone would never
//!   end. Silence is judged by [`Silence`] from arrival times, over time the
//!   agent itself was running: a check that comes late (this agent was
//!   stopped or starved, the beats are waiting in its socket) starts a
//!   fresh window instead of counting the agent's own stall against the
//!   leader.
//!
//! # Known issues
//! - Arrival is when the agent's runtime read the message, not the
//!   kernel's receive time (the gRPC stack hides it); the late-check rule
//!   covers the agent's own stalls that the runtime noticed.

use crate::shell::Event;
use holdfast_control_api::v1::controller_client::ControllerClient;
use holdfast_control_api::v1::{agent_report, command, AgentReport};
use holdfast_etcd::{Keys, Store};
use std::time::{Duration, Instant};
use tokio::sync::mpsc;

/// How long a connect, and then the `Attach` call, may take.
pub const ATTACH_WITHIN: Duration = Duration::from_millis(500);
/// How long one read of the `leader` key may take.
const READ_WITHIN: Duration = Duration::from_millis(300);
/// How often etcd is read again while it names no leader.
const NO_LEADER_WAIT: Duration = Duration::from_millis(100);

/// How long to wait before the next attach after `n` failed in a row with
/// the same replica: 100 ms, doubling up to 800 ms, each wait drawn from its
/// upper half; a replica newly named leader is tried at once. A
/// thousand agents whose leader went away all attach again at once; a
/// replica that cannot answer them all in [`ATTACH_WITHIN`] would see every
/// one of them back 100 ms later, and again, without it (issue 29,
/// `holdfast-ctl-sim`).
#[derive(Debug, Clone, Default)]
pub struct Backoff {
    failures: u32,
    /// The replica the failures were with.
    with: Option<String>,
}

impl Backoff {
    /// The first wait.
    pub const FIRST: Duration = Duration::from_millis(100);
    /// The longest: a leader killed is replaced in about 3 s, and its
    /// agents, which kept failing against it, must not wait much longer.
    pub const MAX: Duration = Duration::from_millis(800);

    /// An attach failed: the wait before the next, with `unit` in [0, 1)
    /// drawn at random.
    pub fn failed(&mut self, unit: f64) -> Duration {
        let cap = Self::FIRST
            .saturating_mul(1 << self.failures.min(4))
            .min(Self::MAX);
        self.failures = self.failures.saturating_add(1);
        cap.mul_f64(0.5 + unit.clamp(0.0, 1.0) / 2.0)
    }

    /// An attach succeeded.
    pub fn reset(&mut self) {
        self.failures = 0;
    }

    /// The next attach goes to `url`: another replica than the failures
    /// were with (a new leader) starts afresh.
    pub fn towards(&mut self, url: &str) {
        if self.with.as_deref() != Some(url) {
            self.failures = 0;
            self.with = Some(url.to_string());
        }
    }
}

/// Whether the leader has been silent for the allowed time, judged from
/// the arrival times of its messages over time this agent was running.
#[derive(Debug, Clone)]
pub struct Silence {
    allowed: Duration,
    /// How often [`Silence::check`] is meant to run.
    period: Duration,
    last_heard: Instant,
    last_check: Instant,
}

impl Silence {
    /// A fresh window at `now` (a stream just opened).
    pub fn new(now: Instant, allowed: Duration) -> Silence {
        Silence {
            allowed,
            period: Self::period_for(allowed),
            last_heard: now,
            last_check: now,
        }
    }

    /// How often to check: a quarter of the allowed silence (10 ms at least).
    pub fn period_for(allowed: Duration) -> Duration {
        (allowed / 4).max(Duration::from_millis(10))
    }

    /// How often [`Silence::check`] should run.
    pub fn period(&self) -> Duration {
        self.period
    }

    /// Something arrived from the leader at `at`.
    pub fn heard(&mut self, at: Instant) {
        self.last_heard = self.last_heard.max(at);
    }

    /// Whether the leader is silent at `now`. A check more than two periods
    /// after the previous one means this agent did not run meanwhile: what
    /// the leader sent may be waiting unread, so the window starts afresh.
    pub fn check(&mut self, now: Instant) -> bool {
        if now.saturating_duration_since(self.last_check) > self.period * 2 {
            self.last_heard = self.last_heard.max(now);
        }
        self.last_check = now;
        now.saturating_duration_since(self.last_heard) >= self.allowed
    }
}

/// What the attach task needs.
pub struct AttachTask {
    pub controllers: Vec<String>,
    pub etcd: Vec<String>,
    pub cluster: String,
    /// `--leader-silence-ms`.
    pub silence: Duration,
    /// Mutual TLS towards the controllers (`--tls-*`); plaintext without.
    pub tls: Option<tonic::transport::ClientTlsConfig>,
    /// Its certificate for `https://` etcd endpoints.
    pub etcd_tls: Option<holdfast_etcd::TlsOptions>,
}

/// The `--controller` whose address is `attach` (`ADDR:PORT`).
pub fn controller_for(controllers: &[String], attach: &str) -> Option<usize> {
    controllers.iter().position(|u| {
        let rest = u.split_once("://").map_or(u.as_str(), |(_, r)| r);
        rest.trim_end_matches('/') == attach
    })
}

/// The leader etcd names: where it serves `Attach` and its token. `Err`:
/// etcd did not answer; `Ok(None)`: no leader.
async fn read_leader(
    stores: &mut [Store],
    cur: &mut usize,
) -> Result<Option<(Option<String>, u64)>, ()> {
    for _ in 0..stores.len() {
        let s = &mut stores[*cur];
        match tokio::time::timeout(READ_WITHIN, s.leader()).await {
            Ok(Ok(l)) => {
                return Ok(l.map(|(rec, token)| (rec.attach, u64::try_from(token.0).unwrap_or(0))))
            }
            _ => *cur = (*cur + 1) % stores.len(),
        }
    }
    Err(())
}

/// Keeps one Attach stream open to the leading replica; never returns
/// while the reports' sender lives.
pub(crate) async fn attach_task(
    task: AttachTask,
    mut reports: mpsc::UnboundedReceiver<AgentReport>,
    ev: mpsc::UnboundedSender<Event>,
) {
    let AttachTask {
        controllers,
        etcd,
        cluster,
        silence,
        tls,
        etcd_tls,
    } = task;
    let keys = Keys::new(&cluster);
    let mut stores: Vec<Store> = etcd
        .into_iter()
        .filter_map(|ep| Store::new(vec![ep], READ_WITHIN, keys.clone(), true).ok())
        .map(|s| s.with_tls(etcd_tls.clone()))
        .collect();
    let mut cur = 0usize;
    let mut next = 0usize;
    let mut backoff = Backoff::default();
    loop {
        let named = if stores.is_empty() {
            Err(())
        } else {
            read_leader(&mut stores, &mut cur).await
        };
        let url = match named {
            Ok(None) => {
                tokio::time::sleep(NO_LEADER_WAIT).await;
                continue;
            }
            Ok(Some((attach, token))) => {
                let _ = ev.send(Event::LeaderToken(token));
                attach
                    .as_deref()
                    .and_then(|a| controller_for(&controllers, a))
                    .map(|i| controllers[i].clone())
            }
            Err(()) => None,
        };
        let url = url.unwrap_or_else(|| {
            next += 1;
            controllers[(next - 1) % controllers.len()].clone()
        });
        // A leader other than the one that just failed us is tried at once.
        backoff.towards(&url);
        let client = tokio::time::timeout(
            ATTACH_WITHIN,
            holdfast_control_api::tls::connect(&url, tls.as_ref()),
        )
        .await;
        let Ok(Ok(mut client)) = client.map(|c| c.map(ControllerClient::new)) else {
            tokio::time::sleep(backoff.failed(fastrand::f64())).await;
            continue;
        };
        let (tx, rx) = mpsc::unbounded_channel::<AgentReport>();
        let outbound = tokio_stream::wrappers::UnboundedReceiverStream::new(rx);
        let mut inbound = match tokio::time::timeout(ATTACH_WITHIN, client.attach(outbound)).await {
            Ok(Ok(r)) => r.into_inner(),
            Ok(Err(s)) => {
                let _ = ev.send(Event::Detached(format!("{url}: {}", s.message())));
                tokio::time::sleep(backoff.failed(fastrand::f64())).await;
                continue;
            }
            Err(_) => {
                let _ = ev.send(Event::Detached(format!(
                    "{url}: no answer to Attach within {ATTACH_WITHIN:?}"
                )));
                tokio::time::sleep(backoff.failed(fastrand::f64())).await;
                continue;
            }
        };
        backoff.reset();
        let _ = ev.send(Event::Attached(url.clone()));
        // A stream starts with the core's Hello: reports queued for the
        // stream before (heartbeats while it was failing) are dropped.
        let mut hello_sent = false;
        let mut quiet = Silence::new(Instant::now(), silence);
        let mut check = tokio::time::interval(quiet.period());
        check.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
        let mut token_told = None;
        loop {
            tokio::select! {
                biased;
                m = inbound.message() => match m {
                    Ok(Some(c)) => {
                        quiet.heard(Instant::now());
                        // A beat goes to the core only when it tells a new token.
                        let beat = matches!(c.body, Some(command::Body::Beat(_)));
                        if !beat || token_told != Some(c.token) {
                            token_told = Some(c.token);
                            let _ = ev.send(Event::Command(c));
                        }
                    }
                    Ok(None) => {
                        let _ = ev.send(Event::Detached(format!("{url}: closed")));
                        break;
                    }
                    Err(s) => {
                        let _ = ev.send(Event::Detached(format!("{url}: {}", s.message())));
                        break;
                    }
                },
                r = reports.recv() => match r {
                    Some(r) => {
                        let is_hello = matches!(r.body, Some(agent_report::Body::Hello(_)));
                        hello_sent |= is_hello;
                        if hello_sent && tx.send(r).is_err() {
                            break;
                        }
                    }
                    None => return,
                },
                _ = check.tick() => {
                    if quiet.check(Instant::now()) {
                        tracing::warn!(%url, silence_ms = silence.as_millis() as u64, "the leader is silent: leaving it for the one etcd names");
                        let _ = ev.send(Event::Detached(format!(
                            "{url}: silent for {silence:?}"
                        )));
                        break;
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn a_silent_leader_is_left_after_the_allowed_time() {
        let t0 = Instant::now();
        let mut s = Silence::new(t0, 1000 * MS);
        assert_eq!(s.period(), 250 * MS);
        let mut t = t0;
        // Beats every 100 ms: never silent.
        for _ in 0..30 {
            t += 100 * MS;
            s.heard(t);
            assert!(!s.check(t));
        }
        // The leader freezes: checks every 250 ms, silent at 1 s.
        let frozen = t;
        for k in 1..=3 {
            assert!(!s.check(frozen + k * 250 * MS));
        }
        assert!(s.check(frozen + 1000 * MS));
    }

    #[test]
    fn the_agents_own_stall_is_not_the_leaders_silence() {
        let t0 = Instant::now();
        let mut s = Silence::new(t0, 1000 * MS);
        s.heard(t0 + 100 * MS);
        assert!(!s.check(t0 + 250 * MS));
        // The agent itself is stopped for 5 s: its next check is late, the
        // beats wait in its socket. A fresh window, not a departure.
        assert!(!s.check(t0 + 5250 * MS));
        s.heard(t0 + 5260 * MS);
        assert!(!s.check(t0 + 5500 * MS));
        // And a leader that stays silent after that is still left.
        assert!(!s.check(t0 + 5750 * MS));
        assert!(!s.check(t0 + 6000 * MS));
        assert!(s.check(t0 + 6260 * MS));
    }

    #[test]
    fn attach_retries_back_off_to_800_ms_with_jitter_and_start_over() {
        let mut b = Backoff::default();
        let top: Vec<Duration> = (0..7).map(|_| b.failed(0.999_999)).collect();
        let ms = |d: &Duration| d.as_millis();
        assert_eq!(
            top.iter().map(ms).collect::<Vec<_>>(),
            [99, 199, 399, 799, 799, 799, 799]
        );
        b.reset();
        assert_eq!(b.failed(0.0), 50 * MS, "the lower half of the first wait");
        b.towards("http://c1");
        b.failed(0.0);
        b.towards("http://c1");
        assert_eq!(b.failed(0.0), 100 * MS, "the same replica: longer");
        b.towards("http://c2");
        assert_eq!(b.failed(0.0), 50 * MS, "a new leader: afresh");
    }

    #[test]
    fn the_leader_is_found_by_its_attach_address() {
        let c = vec![
            "http://198.19.0.1:50051".to_string(),
            "http://198.19.0.2:50051/".to_string(),
        ];
        assert_eq!(controller_for(&c, "198.19.0.2:50051"), Some(1));
        assert_eq!(controller_for(&c, "198.19.0.1:50051"), Some(0));
        assert_eq!(controller_for(&c, "0.0.0.0:50051"), None);
    }
}
