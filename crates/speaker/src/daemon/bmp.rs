//! The daemon's side of BMP (`crate::bmp`): the collectors' tasks, started
//! from `[[bmp]]` and again after a reload that changes it (or the
//! instances), and the hub handed to every session.

use super::Daemon;
use crate::bmp::{BmpInstance, BmpRuntime};
use crate::msg::peer::PeerCmd;
use crate::msg::rib::RibCmd;

impl Daemon {
    /// Starts the BMP sessions of the running configuration; the old ones
    /// (after a reload) end with a Termination.
    pub(super) fn restart_bmp(&mut self) {
        let g = &self.cfg.global;
        let ribs = self
            .cfg
            .instances
            .iter()
            .filter_map(|c| {
                let i = self.instances.get(&c.name)?;
                i.rib.send(RibCmd::Bmp(self.bmp_hub.clone()));
                let inst = BmpInstance {
                    rib: i.rib.clone(),
                    asn: c.effective_asn(g),
                    router_id: c.effective_router_id(g),
                };
                Some((c.name.clone(), inst))
            })
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
