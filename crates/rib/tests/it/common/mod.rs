//! Shared helpers for the engine tests.
#![allow(dead_code)]

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::Arc;

use holdfast_rib::*;
use holdfast_wire::{
    decode_message, encode_update, frame, AsPath, AsSegment, CodecCtx, Message, Origin, PathAttrs,
    Prefix, Update,
};

pub const LOCAL_AS: u32 = 65000;

pub fn cfg(threads: usize) -> EngineConfig {
    EngineConfig {
        local_as: LOCAL_AS,
        router_id: Ipv4Addr::new(10, 0, 0, 1),
        cluster_id: None,
        shards: 8,
        threads,
        always_compare_med: false,
        default_local_pref: 100,
        fib_ecmp: 0,
    }
}

/// Peer `id` at 192.0.2.id with BGP id 1.1.1.id.
pub fn peer(id: u32, remote_as: u32) -> PeerSpec {
    PeerSpec {
        id,
        address: IpAddr::V4(Ipv4Addr::new(192, 0, 2, id as u8)),
        remote_as,
        local_as: LOCAL_AS,
        router_id: Ipv4Addr::new(1, 1, 1, id as u8),
        local_addr_v4: Some(Ipv4Addr::new(192, 0, 2, 254)),
        local_addr_v6: Some("2001:db8::fe".parse().unwrap()),
        local_addr_v6_ll: Some("fe80::fe".parse().unwrap()),
        import: PolicyRef::All,
        export: PolicyRef::All,
        rr_client: false,
        next_hop_self: false,
        max_prefix: None,
        families: vec![Family::IPV4_UNICAST, Family::IPV6_UNICAST],
        four_octet_as: true,
    }
}

pub fn p(s: &str) -> Prefix {
    s.parse().unwrap()
}

pub fn attrs(path: &[u32], nh: [u8; 4]) -> PathAttrs {
    PathAttrs {
        origin: Some(Origin::Igp),
        as_path: AsPath {
            segments: if path.is_empty() {
                vec![]
            } else {
                vec![AsSegment::Sequence(path.to_vec())]
            },
        },
        next_hop: Some(Ipv4Addr::from(nh)),
        ..PathAttrs::default()
    }
}

pub fn ann(prefixes: &[&str], a: PathAttrs) -> Update {
    Update {
        withdrawn: vec![],
        attrs: Some(a),
        announced: prefixes.iter().map(|s| p(s)).collect(),
        end_of_rib: None,
    }
}

pub fn wd(prefixes: &[&str]) -> Update {
    Update {
        withdrawn: prefixes.iter().map(|s| p(s)).collect(),
        attrs: None,
        announced: vec![],
        end_of_rib: None,
    }
}

pub fn eor(f: Family) -> Update {
    Update {
        end_of_rib: Some(f),
        ..Update::default()
    }
}

/// UPDATE bodies (after the header) for `u`.
pub fn raw(u: &Update) -> Vec<Vec<u8>> {
    let mut buf = Vec::new();
    encode_update(
        u,
        &CodecCtx {
            four_octet_as: true,
            ibgp: false,
        },
        &mut buf,
    );
    split(&buf).into_iter().map(|m| m[19..].to_vec()).collect()
}

pub fn split(buf: &[u8]) -> Vec<&[u8]> {
    let mut v = Vec::new();
    let mut i = 0;
    while i < buf.len() {
        let (_, n) = frame(&buf[i..]).unwrap().unwrap();
        v.push(&buf[i..i + n]);
        i += n;
    }
    v
}

/// Decodes every message sent to `id` in `out`.
pub fn sent(out: &Output, id: PeerId) -> Vec<Update> {
    // ibgp: true so that LOCAL_PREF is kept by the decoder (RFC 7606).
    let ctx = CodecCtx {
        four_octet_as: true,
        ibgp: true,
    };
    let mut v = Vec::new();
    for (pid, bytes) in &out.messages {
        if *pid != id {
            continue;
        }
        for m in split(bytes) {
            match decode_message(m, &ctx).unwrap() {
                Message::Update(u) => v.push(u),
                other => panic!("unexpected {other:?}"),
            }
        }
    }
    v
}

/// (prefix, attrs) announced and prefixes withdrawn to `id`.
pub fn announced(out: &Output, id: PeerId) -> Vec<(Prefix, PathAttrs)> {
    let mut v = Vec::new();
    for u in sent(out, id) {
        for pr in &u.announced {
            v.push((*pr, u.attrs.clone().unwrap()));
        }
    }
    v.sort_by_key(|a| a.0);
    v
}

pub fn withdrawn(out: &Output, id: PeerId) -> Vec<Prefix> {
    let mut v: Vec<Prefix> = sent(out, id)
        .into_iter()
        .flat_map(|u| u.withdrawn)
        .collect();
    v.sort();
    v
}

/// The peer of the best path for `prefix`.
pub fn best(e: &Engine, prefix: &str) -> Option<PeerId> {
    e.lookup(&p(prefix)).into_iter().find(|x| x.2).map(|x| x.0)
}

pub fn v6nh(g: &str) -> holdfast_wire::MpNextHop {
    holdfast_wire::MpNextHop {
        global: IpAddr::V6(g.parse::<Ipv6Addr>().unwrap()),
        link_local: None,
    }
}

pub fn arc_eq(a: &Arc<Vec<u8>>, b: &Arc<Vec<u8>>) -> bool {
    Arc::ptr_eq(a, b)
}
