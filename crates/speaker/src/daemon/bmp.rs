//! The daemon's side of BMP (`crate::bmp`): the collectors' tasks, started
//! from `[[bmp]]` and again after a reload that changes it (or the
//! instances), and the hub handed to every session.

use super::Daemon;
use crate::bmp::BmpRuntime;
use crate::peer::PeerCmd;

impl Daemon {
    /// Starts the BMP sessions of the running configuration; the old ones
    /// (after a reload) end with a Termination.
    pub(super) fn restart_bmp(&mut self) {
        let ribs = self
            .instances
            .iter()
            .map(|(name, i)| (name.clone(), i.rib.clone()))
            .collect();
        let new = BmpRuntime::start(
            &self.cfg.bmp,
            &self.bmp_hub,
            ribs,
            self.cfg.global.router_id,
        );
        let mut old = std::mem::replace(&mut self.bmp, new);
        tokio::spawn(async move { old.stop().await });
    }

    /// Hands a new session the BMP hub.
    pub(super) fn bmp_attach(&self, tx: &tokio::sync::mpsc::UnboundedSender<PeerCmd>) {
        let _ = tx.send(PeerCmd::Bmp(self.bmp_hub.clone()));
    }
}
