//! The kernel FIB threads of the routing instances (`[kernel]`, an
//! instance's `kernel`): started with the instances at start, and on a
//! SIGHUP reload brought to the new configuration by its diff
//! (`holdfast_config::KernelChange`): started, stopped (our routes removed
//! unless `persist`) or reconfigured in place (new key: routes moved; new
//! `ecmp`: entries rewritten). Every FIB command goes through the
//! instance's RIB thread, so it is ordered with the forwarding entries the
//! RIB hands over.

use super::{Daemon, Instance};
use crate::fib;
use crate::msg::fib::{FibConfig, FibHandle};
use crate::msg::rib::RibCmd;
use holdfast_config::{Kernel, KernelAction, KernelChange};
use std::sync::mpsc;
use std::time::Duration;

/// `[kernel]` as the FIB core takes it.
pub(super) fn fib_config(k: &Kernel) -> FibConfig {
    FibConfig {
        table: k.table,
        metric: k.metric,
        ecmp: k.ecmp.max(1) as usize,
        protocol: k.protocol,
    }
}

impl Daemon {
    /// A holding FIB thread for `instance` (after `after`, the instance's
    /// previous one still removing its routes); `None` (logged) when the
    /// rtnetlink sockets cannot be opened.
    pub(super) fn spawn_fib(
        &self,
        instance: &str,
        k: &Kernel,
        after: Option<mpsc::Receiver<()>>,
    ) -> Option<FibHandle> {
        match fib::spawn(
            instance.to_string(),
            fib_config(k),
            k.persist,
            self.metrics.clone(),
            after,
        ) {
            Ok(f) => Some(f),
            Err(e) => {
                tracing::error!(instance = %instance, error = %e, "kernel FIB not started: rtnetlink socket");
                None
            }
        }
    }

    /// A reload's `[kernel]` changes, each applied to its instance's FIB;
    /// one log line for all of them. Returns the names of the instances
    /// whose FIB changed, for the reload's summary (empty: none).
    pub(super) fn sync_kernel(&mut self, changes: &[KernelChange]) -> String {
        if changes.is_empty() {
            return String::new();
        }
        let mut said = Vec::new();
        for c in changes {
            said.push(format!("{}: {}", c.instance, c.describe()));
            let Some(action) = c.action() else { continue };
            if !self.instances.contains_key(&c.instance) {
                continue;
            }
            // A FIB that could not start before (rtnetlink sockets) is
            // started now rather than reconfigured.
            let not_running = self
                .instances
                .get(&c.instance)
                .is_some_and(|i| i.fib.is_none());
            let action = match action {
                KernelAction::Update { .. } if not_running => KernelAction::Start,
                a => a,
            };
            match (action, &c.new) {
                (KernelAction::Start, Some(k)) => {
                    let after = self
                        .instances
                        .get_mut(&c.instance)
                        .and_then(|i| i.fib_retiring.take());
                    let Some(f) = self.spawn_fib(&c.instance, k, after) else {
                        continue;
                    };
                    if let Some(inst) = self.instances.get_mut(&c.instance) {
                        inst.rib.send(RibCmd::FibStart {
                            fib: f.clone(),
                            ecmp: k.ecmp.max(1) as usize,
                        });
                        inst.fib = Some(f);
                    }
                }
                (KernelAction::Stop { withdraw }, _) => {
                    if let Some(inst) = self.instances.get_mut(&c.instance) {
                        let (done, rx) = mpsc::channel();
                        inst.rib.send(RibCmd::FibStop { withdraw, done });
                        inst.fib = None;
                        inst.fib_retiring = Some(rx);
                    }
                }
                (KernelAction::Update { .. }, Some(k)) => {
                    if let Some(inst) = self.instances.get(&c.instance) {
                        inst.rib.send(RibCmd::FibReconfigure {
                            cfg: fib_config(k),
                            persist: k.persist,
                        });
                    }
                }
                _ => {}
            }
        }
        tracing::info!("kernel FIB reloaded: {}", said.join("; "));
        changes
            .iter()
            .map(|c| c.instance.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    }
}

impl Instance {
    /// At a normal stop: the FIB thread stopped (our routes removed unless
    /// `persist`), and a previous one still removing its routes after a
    /// reload waited for; each at most `timeout`.
    pub(super) fn stop_fib(&mut self, name: &str, timeout: Duration) {
        if let Some(f) = self.fib.take() {
            tracing::info!(instance = %name, "stopping the kernel FIB");
            f.stop(true, timeout);
        }
        if let Some(rx) = self.fib_retiring.take() {
            let _ = rx.recv_timeout(timeout);
        }
    }
}
