//! OPEN construction, capability negotiation (RFC 4271 §4.2/§6.2, RFC 4760,
//! RFC 5492, RFC 6286, RFC 6793, RFC 7607) and collision resolution
//! (RFC 4271 §6.8, RFC 6286 §2.3).

use crate::notification::{self, open as open_err, OPEN_MESSAGE_ERROR};
use crate::types::{CollisionWinner, Negotiated, SessionConfig};
use holdfast_wire::{Capability, Family, GracefulRestartCap, Notification, Open, AS_TRANS};
use std::net::Ipv4Addr;

/// BGP version spoken.
pub const BGP_VERSION: u8 = 4;

/// The OPEN sent for `cfg`: MP capability per family, route refresh if
/// configured, 4-octet AS always, GR if configured; `my_as` is AS_TRANS
/// when `local_as` does not fit in 2 octets.
pub fn open_for_config(cfg: &SessionConfig) -> Open {
    let mut capabilities: Vec<Capability> = Vec::new();
    for f in &cfg.families {
        let cap = Capability::Multiprotocol(*f);
        if !capabilities.contains(&cap) {
            capabilities.push(cap);
        }
    }
    if cfg.route_refresh {
        capabilities.push(Capability::RouteRefresh);
    }
    capabilities.push(Capability::FourOctetAs(cfg.local_as));
    if let Some(restart_time) = cfg.graceful_restart {
        capabilities.push(Capability::GracefulRestart(GracefulRestartCap {
            restart_state: false,
            notification: false,
            restart_time: restart_time.min(0x0fff),
            families: cfg.families.iter().map(|f| (*f, false)).collect(),
        }));
    }
    Open {
        version: BGP_VERSION,
        my_as: u16::try_from(cfg.local_as).unwrap_or(AS_TRANS),
        hold_time: cfg.hold_time,
        bgp_id: cfg.local_id,
        capabilities,
    }
}

fn has_cap(open: &Open, pred: impl Fn(&Capability) -> bool) -> bool {
    open.capabilities.iter().any(pred)
}

/// Families of the multiprotocol capabilities, or IPv4 unicast alone when
/// there are none (RFC 4760 §8).
fn mp_families(open: &Open) -> Vec<Family> {
    let mut v: Vec<Family> = Vec::new();
    for c in &open.capabilities {
        if let Capability::Multiprotocol(f) = c {
            if !v.contains(f) {
                v.push(*f);
            }
        }
    }
    if v.is_empty() {
        v.push(Family::IPV4_UNICAST);
    }
    v
}

/// The keepalive interval for a negotiated hold time: the configured value
/// capped at hold/3; unconfigured, hold/3, or for a session replicated for
/// non-stop routing (`nsr`) hold/9 but at least 1 s; 0 when hold is 0.
///
/// Why a ninth under NSR: the peer's HoldTimer runs from the last message
/// it received, so a takeover has the hold time minus the time since our
/// last KEEPALIVE, and BIRD starts its HoldTimer up to a quarter short
/// (`bgp_start_timer` jitters every BGP timer). With hold 9 s and
/// keepalive hold/3 that leaves 0.75 × 9 − 3 = 3.75 s in the worst case,
/// less than a host failure's detection plus takeover; hold/9 leaves 5.75 s.
/// RFC 4271 §4.4 allows KEEPALIVEs as often as one a second.
pub fn keepalive_for(hold_time: u16, configured: Option<u16>, nsr: bool) -> u16 {
    if hold_time == 0 {
        return 0;
    }
    let third = hold_time / 3;
    match configured {
        Some(k) => k.min(third),
        None if nsr => (hold_time / 9).max(1),
        None => third,
    }
}

/// Negotiated session parameters from the two raw OPENs. Pure, so the NSR
/// layer can replicate raw OPENs and re-derive the result.
///
/// Errors are the NOTIFICATION to send: 2/1 for a version other than 4
/// (data: our version), 2/2 for a peer AS that is 0 or not the configured
/// one, 2/3 for a zero BGP identifier or, on iBGP, our own (RFC 6286),
/// 2/6 for a hold time of 1 or 2 seconds.
pub fn negotiate(
    local: &Open,
    remote: &Open,
    cfg: &SessionConfig,
) -> Result<Negotiated, Notification> {
    if remote.version != BGP_VERSION {
        return Err(Notification {
            code: OPEN_MESSAGE_ERROR,
            subcode: open_err::UNSUPPORTED_VERSION,
            data: u16::from(BGP_VERSION).to_be_bytes().to_vec(),
        });
    }
    let remote_as = remote.asn();
    if remote.my_as == 0 || remote_as == 0 || remote_as != cfg.remote_as {
        return Err(notification::new(OPEN_MESSAGE_ERROR, open_err::BAD_PEER_AS));
    }
    let ibgp = remote_as == local.asn();
    if remote.bgp_id == Ipv4Addr::UNSPECIFIED || (ibgp && remote.bgp_id == local.bgp_id) {
        return Err(notification::new(
            OPEN_MESSAGE_ERROR,
            open_err::BAD_BGP_IDENTIFIER,
        ));
    }
    if matches!(remote.hold_time, 1 | 2) {
        return Err(notification::new(
            OPEN_MESSAGE_ERROR,
            open_err::UNACCEPTABLE_HOLD_TIME,
        ));
    }
    let hold_time = local.hold_time.min(remote.hold_time);
    let keepalive = keepalive_for(hold_time, cfg.keepalive_time, cfg.nsr);

    let both = |pred: fn(&Capability) -> bool| has_cap(local, pred) && has_cap(remote, pred);
    let four_octet_as = both(|c| matches!(c, Capability::FourOctetAs(_)));
    let route_refresh = both(|c| matches!(c, Capability::RouteRefresh));
    let enhanced_route_refresh = both(|c| matches!(c, Capability::EnhancedRouteRefresh));

    let theirs = mp_families(remote);
    let families = mp_families(local)
        .into_iter()
        .filter(|f| theirs.contains(f))
        .collect();

    let peer_graceful_restart = remote.capabilities.iter().find_map(|c| match c {
        Capability::GracefulRestart(g) => Some(g.clone()),
        _ => None,
    });

    Ok(Negotiated {
        hold_time,
        keepalive,
        remote_as,
        remote_id: remote.bgp_id,
        four_octet_as,
        families,
        route_refresh,
        enhanced_route_refresh,
        peer_graceful_restart,
        local_open: local.clone(),
        remote_open: remote.clone(),
    })
}

/// RFC 4271 §6.8: the connection initiated by the speaker with the higher
/// BGP identifier survives. `existing_is_outbound` tells whether the
/// existing connection was initiated by us. Equal identifiers (only legal
/// on eBGP, RFC 6286) keep the existing connection; use
/// [`resolve_collision_with_as`] to apply the RFC 6286 AS tie-break.
pub fn resolve_collision(
    local_id: Ipv4Addr,
    remote_id: Ipv4Addr,
    existing_is_outbound: bool,
) -> CollisionWinner {
    if local_id == remote_id {
        return CollisionWinner::Existing;
    }
    let keep_outbound = u32::from(local_id) > u32::from(remote_id);
    if keep_outbound == existing_is_outbound {
        CollisionWinner::Existing
    } else {
        CollisionWinner::New
    }
}

/// RFC 6286 §2.3: as [`resolve_collision`], but equal identifiers are
/// decided by AS number (the connection initiated by the speaker with the
/// larger AS survives).
pub fn resolve_collision_with_as(
    local_id: Ipv4Addr,
    local_as: u32,
    remote_id: Ipv4Addr,
    remote_as: u32,
    existing_is_outbound: bool,
) -> CollisionWinner {
    if local_id != remote_id || local_as == remote_as {
        return resolve_collision(local_id, remote_id, existing_is_outbound);
    }
    let keep_outbound = local_as > remote_as;
    if keep_outbound == existing_is_outbound {
        CollisionWinner::Existing
    } else {
        CollisionWinner::New
    }
}
