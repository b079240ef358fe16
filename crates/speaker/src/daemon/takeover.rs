//! The daemon's side of non-stop routing: planning which neighbours resume
//! a stored session, completing a takeover, `show nsr`, and a planned
//! switchover.
//!
//! # Known issues
//! - A stored session whose neighbour is no longer configured is removed
//!   from the store but its connection is not rebuilt: the peer finds out
//!   when its hold timer expires.
//! - A takeover that fails once the sockets are being rebuilt ends the
//!   daemon ([`super::Exit::TakeoverFailed`]); sessions restored before the
//!   failure are lost with it.

use super::{Daemon, ResumeTarget};
use crate::msg::peer::{PeerCmd, PeerSettings};
use crate::msg::rib::{ResumePeer, RibCmd};
use crate::peer::resume_spec;
use holdfast_api::{NsrStatus, Response};
use holdfast_nsr::Op;
use std::sync::atomic::Ordering;
use std::time::Duration;
use tokio::sync::oneshot;

/// Default time a switchover waits for the backup to claim the instance.
const SWITCHOVER_TIMEOUT: Duration = Duration::from_secs(120);

impl Daemon {
    /// While taking over: whether this neighbour has a stored session to
    /// resume. If so, its tables go to the RIB thread's resume batch.
    pub(super) fn plan_resume(&mut self, s: &PeerSettings) -> bool {
        let Some(t) = self.takeover.as_ref() else {
            return false;
        };
        let Some(stored) = t.sessions.get(&(s.instance.clone(), s.address)) else {
            return false;
        };
        let Some((spec, ctx)) = resume_spec(s, &stored.record, &t.interfaces) else {
            return false;
        };
        let preheated = t.preheated.contains(&stored.key);
        self.resume_peers
            .entry(s.instance.clone())
            .or_default()
            .push(ResumePeer::logs_to_come(
                stored.key.clone(),
                spec,
                ctx,
                preheated,
            ));
        true
    }

    /// Takeover steps 3–7, once the configuration is applied.
    pub(super) fn complete_takeover(&mut self) -> anyhow::Result<()> {
        let Some(mut t) = self.takeover.take() else {
            return Ok(());
        };
        let nsr = t.nsr.clone();
        let started = t.started;
        for (name, peers) in std::mem::take(&mut self.resume_peers) {
            let Ok(inst) = self.instance(&name) else {
                continue;
            };
            let (tx, rx) = oneshot::channel();
            self.hold_for_rpki(&inst.rib);
            inst.rib.send(RibCmd::Resume {
                peers,
                logs: Some(t.logs.clone()),
                reply: tx,
            });
            let nsr = nsr.clone();
            let logs = t.logs.clone();
            let failed = self.takeover_failed.clone();
            tokio::spawn(async move {
                match rx.await {
                    Ok(Ok(report)) => {
                        let total = started.elapsed().as_micros() as u64;
                        tracing::info!(
                            routes = report.routes_in,
                            announced = report.announced,
                            withdrawn = report.withdrawn,
                            rebuild_ms = report.micros / 1000,
                            since_start_ms = total / 1000,
                            "takeover: tables rebuilt"
                        );
                        if let Ok(mut tt) = nsr.shared.takeover.lock() {
                            let tt = tt.get_or_insert_with(Default::default);
                            tt.routes += report.routes_in as u64;
                            tt.tables_us = tt.tables_us.max(total);
                            tt.logs_us = logs.since_start_us().unwrap_or(tt.logs_us);
                        }
                    }
                    // The sessions run, but their tables cannot be built:
                    // the daemon ends, and another takeover starts from
                    // the same stored state.
                    Ok(Err(e)) => {
                        let _ = failed.send(anyhow::anyhow!(
                            "the stored logs of the sessions taken over cannot be read: {e}"
                        ));
                    }
                    Err(_) => {}
                }
            });
        }
        // Stored sessions nobody configures any more are forgotten.
        let targets: std::collections::HashSet<(String, std::net::IpAddr)> = self
            .resume_targets
            .iter()
            .map(|r| (r.instance.clone(), r.address))
            .collect();
        for (k, s) in &t.sessions {
            if !targets.contains(k) {
                tracing::warn!(key = %s.key, "stored session has no neighbour in the configuration: forgotten");
                nsr.submit(
                    &s.key,
                    Some(Op::Remove { key: s.key.clone() }),
                    nsr.gen(),
                    crate::nsr::Then::Nothing,
                );
            }
        }
        let targets = std::mem::take(&mut self.resume_targets);
        let ribs: std::collections::HashMap<String, crate::msg::rib::RibHandle> = self
            .instances
            .iter()
            .map(|(k, v)| (k.clone(), v.rib.clone()))
            .collect();
        // The rest waits for the orchestrator to move the address; the
        // daemon meanwhile answers its control socket. A failure ends the
        // daemon (`Exit::TakeoverFailed`).
        let failed = self.takeover_failed.clone();
        let bfd = self.bfd.clone();
        tokio::spawn(async move {
            if let Err(e) = restore_all(&mut t, targets, ribs, bfd).await {
                tracing::error!(error = format!("{e:#}"), "takeover failed");
                let _ = failed.send(e);
            }
        });
        Ok(())
    }

    pub(super) fn nsr_status(&self) -> NsrStatus {
        match &self.nsr {
            Some(n) => n.status("primary"),
            None => NsrStatus::default(),
        }
    }

    /// `holdfast nsr switchover`: every state change is already in the
    /// store before it takes effect, so the primary needs no quiescing; it
    /// waits for a backup to claim the instance, and then (fenced) exits
    /// without a packet reaching any peer.
    pub(super) fn switchover(&mut self, timeout_secs: Option<u64>) -> Response {
        let Some(n) = &self.nsr else {
            return Response::error("NSR is not enabled");
        };
        if !n.shared.protected.load(Ordering::SeqCst) {
            return Response::error(
                "not protected (the state store is unavailable or a session is re-synchronising): a switchover now would lose sessions",
            );
        }
        n.shared.switching.store(true, Ordering::SeqCst);
        let shared = n.shared.clone();
        let limit = timeout_secs.map_or(SWITCHOVER_TIMEOUT, Duration::from_secs);
        tokio::spawn(async move {
            tokio::time::sleep(limit).await;
            if shared.switching.swap(false, Ordering::SeqCst) {
                tracing::warn!(
                    "switchover: no backup claimed the instance in time; continuing as primary"
                );
            }
        });
        tracing::info!("switchover: ready; start `holdfastd --takeover` on the backup");
        Response::message(format!(
            "ready for takeover of instance {:?}: start `holdfastd --takeover` on the backup; this process exits once it has claimed the instance (waiting up to {} s)",
            n.shared.instance,
            limit.as_secs()
        ))
    }
}

/// Takeover steps 4–7: ready, address, sockets, guard, resume. Once the
/// addresses are here, resumed BFD sessions start timing the peer (their
/// detection waited: none of its packets could arrive before).
///
/// Every socket is rebuilt (still in repair mode) and the guard lifted
/// before any session resumes: a resumed session leaves repair mode, which
/// sends the window probe, and the peer's answer must find the guard gone.
/// With more than one I/O thread a peer task runs the moment it is told;
/// an answer the guard dropped left the restored socket without an RTT
/// sample until the peer's next message (seconds later), and its first
/// retransmission came after the peer's HoldTimer had expired.
async fn restore_all(
    t: &mut crate::resume::Takeover,
    targets: Vec<ResumeTarget>,
    ribs: std::collections::HashMap<String, crate::msg::rib::RibHandle>,
    bfd: Option<crate::bfd::Bfd>,
) -> anyhow::Result<()> {
    t.announce_ready()?;
    t.wait_for_addresses().await?;
    if let Some(b) = &bfd {
        b.send(crate::bfd::BfdCmd::PathReady);
    }
    t.open_gate();
    let mut resumes = Vec::with_capacity(targets.len());
    for target in targets {
        let ResumeTarget {
            instance,
            address,
            id,
            sock,
            tx,
        } = target;
        let Some(stored) = t.sessions.get(&(instance.clone(), address)).cloned() else {
            continue;
        };
        match t.restore(&stored, &sock) {
            Ok(r) => resumes.push((tx, PeerCmd::Resume(Box::new(r)))),
            Err(e) => {
                tracing::error!(peer = %address, error = format!("{e:#}"), "takeover: session could not be restored; it starts afresh");
                if let Some(rib) = ribs.get(&instance) {
                    rib.send(RibCmd::PeerDown {
                        peer: id,
                        graceful: false,
                    });
                }
                resumes.push((tx, PeerCmd::AbortResume));
            }
        }
    }
    let lifted = t.finish();
    for (tx, cmd) in resumes {
        let _ = tx.send(cmd);
    }
    if lifted.is_ok() {
        t.remove_guard();
    }
    lifted
}
