//! The GoBGP gRPC API (`gobgp.proto`'s `apipb.GobgpApi` service, GoBGP 3.x)
//! served by holdfastd, so that the stock `gobgp` client and tools
//! written for GoBGP work against it: `gobgp neighbor [ADDR]`,
//! `gobgp neighbor ADDR adj-in|adj-out`, `gobgp global rib [-a
//! ipv4|ipv6]`, `gobgp global rib add|del PREFIX …`, `gobgp global`,
//! `gobgp neighbor ADDR softreset|reset`, and `gobgp monitor global rib
//! [--current]`.
//!
//! The messages are generated at build time from Debian's
//! golang-github-osrg-gobgp-dev (`build.rs`). [`convert`] holds the pure
//! conversions between them and holdfast's control types; [`service`]
//! the tonic service, generic over a [`Backend`] that holdfastd
//! implements with the requests its control socket serves (so the figures
//! agree with `holdfast show neighbors` / `show rib`), and the server
//! with optional TLS. This crate does not depend on the speaker.
//!
//! Every other RPC answers `UNIMPLEMENTED`, naming the method.
//!
//! # Known issues
//! - Only the default routing instance and the ipv4-unicast and
//!   ipv6-unicast families are served; `gobgp vrf …` is UNIMPLEMENTED.
//! - See [`convert`] for what the `Peer` and `Path` messages lack.

#![forbid(unsafe_code)]

/// Generated from GoBGP's `gobgp.proto`, `attribute.proto` and
/// `capability.proto` (package `apipb`).
#[allow(clippy::all, clippy::pedantic)]
pub mod apipb {
    tonic::include_proto!("apipb");
}

pub mod convert;
pub mod service;

pub use service::{serve, Backend, BestChange, ServeError, TlsFiles};
