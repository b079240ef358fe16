//! The session's side of BMP (`crate::bmp`): what the peer task tells the
//! collectors. The OPENs are kept as they went over each connection, and
//! the NOTIFICATION that ends a session is kept for its Peer Down.

use super::PeerTask;
use crate::msg::bmp::{BmpHub, SessionInfo};
use holdfast_fsm::Negotiated;
use holdfast_wire::bmp as wire;
use holdfast_wire::{encode_notification, encode_open, Family, Notification, HEADER_LEN};
use std::sync::Arc;

/// OPEN bodies of one connection: (sent, received).
pub(super) type Opens = (Option<Vec<u8>>, Option<Vec<u8>>);

/// A peer task's BMP state.
#[derive(Default)]
pub(super) struct BmpTap {
    pub hub: Option<BmpHub>,
    /// The established session as reported to the collectors.
    pub session: Option<Arc<SessionInfo>>,
    /// OPEN bodies (sent, received) of the main and the extra connection.
    pub opens: [Opens; 2],
    /// The last NOTIFICATION of the session: (Peer Down reason, body).
    pub notification: Option<(u8, Vec<u8>)>,
}

pub(super) fn slot(w: super::Which) -> usize {
    match w {
        super::Which::Main => 0,
        super::Which::Extra => 1,
    }
}

impl BmpTap {
    /// A NOTIFICATION sent (`local`) or received.
    pub fn notification(&mut self, local: bool, n: &Notification) {
        let mut buf = Vec::with_capacity(32);
        encode_notification(n, &mut buf);
        let reason = if local {
            wire::DOWN_LOCAL_NOTIFICATION
        } else {
            wire::DOWN_REMOTE_NOTIFICATION
        };
        self.notification = Some((reason, buf[HEADER_LEN..].to_vec()));
    }

    /// The UPDATE `body` was received.
    pub fn received(&self, body: &[u8]) {
        if let (Some(hub), Some(s)) = (&self.hub, &self.session) {
            if hub.active() {
                hub.received(s, body);
            }
        }
    }

    /// `bytes` (framed messages from the Adj-RIB-Out) were written.
    pub fn sent(&self, bytes: &Arc<Vec<u8>>) {
        if let (Some(hub), Some(s)) = (&self.hub, &self.session) {
            if hub.active() {
                hub.sent(s, bytes);
            }
        }
    }
}

impl PeerTask {
    /// The session is Established (or resumed by a takeover): a Peer Up.
    pub(super) fn bmp_up(&mut self, neg: &Negotiated, resumed: bool) {
        self.bmp.notification = None;
        let Some(hub) = self.bmp.hub.clone() else {
            return;
        };
        let Some(conn) = self.main.as_ref() else {
            return;
        };
        let (sent, received) = self.bmp.opens[0].clone();
        let repl = conn.repl.as_ref();
        let encoded = |o: &holdfast_wire::Open| {
            let mut b = Vec::new();
            encode_open(o, &mut b);
            b[HEADER_LEN..].to_vec()
        };
        let open_sent = sent
            .or_else(|| repl.and_then(|r| r.open_tx.clone()))
            .unwrap_or_else(|| encoded(&neg.local_open));
        let open_received = received
            .or_else(|| repl.and_then(|r| r.open_rx.clone()))
            .unwrap_or_else(|| encoded(&neg.remote_open));
        let info = Arc::new(SessionInfo {
            instance: self.s.instance.clone(),
            peer_id: self.s.id,
            address: self.s.address,
            asn: neg.remote_as,
            bgp_id: neg.remote_id,
            local: conn.local,
            remote_port: conn.remote.port(),
            open_sent,
            open_received,
            ctx: holdfast_wire::CodecCtx {
                four_octet_as: neg.four_octet_as,
                ibgp: neg.remote_as == self.s.session.local_as,
            },
            ipv6: neg.families.contains(&Family::IPV6_UNICAST),
            up_at: crate::mrt::now(),
            resumed,
        });
        self.bmp.session = Some(info.clone());
        hub.peer_up(info);
    }

    /// The session left Established: a Peer Down with the NOTIFICATION
    /// that ended it, if there was one.
    pub(super) fn bmp_down(&mut self) {
        let Some(s) = self.bmp.session.take() else {
            return;
        };
        let (reason, body) = match self.bmp.notification.take() {
            Some((r, b)) => (r, Some(b)),
            None => (wire::DOWN_REMOTE_NO_NOTIFICATION, None),
        };
        if let Some(hub) = &self.bmp.hub {
            hub.peer_down(&s, reason, body);
        }
    }

    /// The task ends with the session up (the neighbour was removed).
    pub(super) fn bmp_deconfigured(&mut self) {
        if let (Some(s), Some(hub)) = (self.bmp.session.take(), &self.bmp.hub) {
            hub.peer_down(&s, wire::DOWN_DECONFIGURED, None);
        }
    }
}
