//! A peer task's side of the messages: what the daemon, the RIB thread
//! and BFD send it ([`PeerCmd`]), and the neighbour's settings
//! ([`PeerSettings`]) it is started and reconfigured with.
//!
//! # Known issues
//! - None known.

use super::rib::ToPeer;
use crate::socket::SockOpts;
use holdfast_fsm::SessionConfig;
use holdfast_neighbor::PeerParams;
use holdfast_rib::{PeerId, PeerSpec};
use std::net::IpAddr;
use tokio::net::TcpStream;

/// Everything a peer task needs to know about its neighbour.
#[derive(Clone)]
pub struct PeerSettings {
    pub id: PeerId,
    pub instance: String,
    pub address: IpAddr,
    pub port: u16,
    pub enabled: bool,
    pub session: SessionConfig,
    pub sock: SockOpts,
    /// Engine spec without the per-session facts (filled at Established).
    pub spec: PeerSpec,
    /// Keep the peer's routes stale when it restarts (RFC 4724 helper).
    pub graceful_restart: bool,
    /// After a max-prefix Cease: restart after this many seconds (`Some`)
    /// or stay down until an operator resets the session (`None`).
    pub max_prefix_restart: Option<u32>,
}

impl PeerSettings {
    /// What the core needs of these settings.
    pub fn params(&self) -> PeerParams {
        PeerParams {
            enabled: self.enabled,
            session: self.session.clone(),
            graceful_restart: self.graceful_restart,
            max_prefix_restart: self.max_prefix_restart,
        }
    }
}

/// Commands to a peer task.
pub enum PeerCmd {
    Inbound(TcpStream),
    /// NSR takeover: the session's connection, rebuilt with TCP_REPAIR.
    Resume(Box<crate::resume::Resumed>),
    /// NSR takeover: the connection could not be restored; start afresh.
    AbortResume,
    Rib(ToPeer),
    Reconfigure(Box<PeerSettings>),
    AdminReset,
    Shutdown,
    /// The neighbour's BFD session: `true` Up (or BFD turned off),
    /// `false` went Down.
    Bfd(bool),
    /// The MRT updates log this session writes to, if any.
    Mrt(Option<crate::mrt::UpdateLog>),
    /// The daemon's BMP hub (`[[bmp]]`).
    Bmp(super::bmp::BmpHub),
}
