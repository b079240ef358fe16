//! The FIB thread's side of the messages: what the RIB thread and the
//! daemon send it ([`FibCmd`], through a [`FibHandle`]), and `[kernel]` as
//! it needs it ([`FibConfig`]).
//!
//! # Known issues
//! - None known.

use holdfast_api::FibInfo;
use holdfast_rib::FibRoute;
use std::sync::mpsc;
use std::time::Duration;
use tokio::sync::oneshot;

/// `[kernel]` as the core needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FibConfig {
    pub table: u32,
    pub metric: u32,
    pub ecmp: usize,
    pub protocol: u8,
}

/// What the FIB thread is told.
pub enum FibCmd {
    Routes(Vec<FibRoute>),
    /// Start writing; our routes the RIB does not want are kept for
    /// `hold`.
    Activate {
        hold: Duration,
    },
    /// A reload changed `[kernel]` (see `fib::core::Core::reconfigure`).
    Reconfigure {
        cfg: FibConfig,
        persist: bool,
    },
    Show {
        limit: usize,
        reply: oneshot::Sender<FibInfo>,
    },
    /// Stop the thread; with `withdraw`, remove every route of ours
    /// first. Answered when done.
    Stop {
        withdraw: bool,
        done: mpsc::Sender<()>,
    },
}

/// The sending side, kept by the RIB thread and the daemon.
#[derive(Clone)]
pub struct FibHandle {
    tx: mpsc::Sender<FibCmd>,
}

impl FibHandle {
    /// A new queue: the handle, and the receiving side for the FIB thread.
    pub fn channel() -> (FibHandle, mpsc::Receiver<FibCmd>) {
        let (tx, rx) = mpsc::channel();
        (FibHandle { tx }, rx)
    }

    pub fn send(&self, cmd: FibCmd) {
        // The thread lives as long as the process unless stopped.
        let _ = self.tx.send(cmd);
    }

    pub async fn show(&self, limit: usize) -> Option<FibInfo> {
        let (tx, rx) = oneshot::channel();
        self.send(FibCmd::Show { limit, reply: tx });
        rx.await.ok()
    }

    /// Stops the thread (see `FibCmd::Stop`), waiting at most `timeout`.
    pub fn stop(&self, withdraw: bool, timeout: Duration) {
        let (tx, rx) = mpsc::channel();
        self.send(FibCmd::Stop { withdraw, done: tx });
        let _ = rx.recv_timeout(timeout);
    }
}
