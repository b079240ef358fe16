//! The lab's scenarios, one test binary: holdfastd, its control plane and
//! real peers (bird2, frr, gobgpd, exabgp, pmacct's pmbmpd, stayrtr, etcd,
//! Redis) in network namespaces. Each scenario is a module in a directory of
//! its own, its topology and checks in its header; the helpers several share
//! are in `tests/support/` (declared once here, under the names the
//! scenarios use). One binary instead of one per scenario: `make test` links
//! it once.
//!
//! One scenario: `cargo test --release -p holdfast-lab --test lab nsr_frr:: --
//! --nocapture` (a filter on the test names, which start with the scenario's
//! module). Every test builds its own lab under its own run id, but cargo
//! runs a binary's tests as many at a time as the harness has threads, and
//! some scenarios are timing-sensitive or share something (the Debian
//! package): the whole suite is `make test` (scripts/run-tests.py: each test
//! in its own process, its groups and job counts).

#[path = "../support/interop.rs"]
mod common;
#[path = "../support/fib.rs"]
mod fib_common;
#[path = "../support/nsr.rs"]
mod nsr_common;
#[path = "../support/nsr_plane.rs"]
mod nsr_plane;
#[path = "../support/peer_bfd.rs"]
mod peer_bfd;
#[path = "../support/robust.rs"]
mod robust_common;
#[path = "../support/upgrade.rs"]
mod upgrade_common;

mod agent_self_fence;
mod bfd_interop;
mod bfd_tx_load;
mod bmp_pmbmpd;
mod collision_and_reset;
mod control_plane_hang;
mod control_plane_localize;
mod control_plane_mtls;
mod control_plane_scale;
mod control_plane_takeover;
mod controller_etcd;
mod deb_package;
mod etcd_auth;
mod etcd_quorum_loss;
mod etcd_stall;
mod gobgp_api;
mod graceful_restart;
mod gtsm;
mod harness_self;
mod hold_time_load;
mod instances_vrf;
mod interop_bird;
mod interop_exabgp;
mod interop_frr;
mod interop_gobgp;
mod joint_unit;
mod k8s_manifests;
mod kernel_fib;
mod kernel_fib_nsr;
mod kernel_fib_reload;
mod leader_freeze;
mod max_prefix;
mod mrt_dump;
mod nsr_api_routes;
mod nsr_bfd_frr;
mod nsr_bfd_relay_bird;
mod nsr_bfd_relay_frr;
mod nsr_bird;
mod nsr_frr;
mod nsr_gobgp;
mod nsr_lab_self;
mod nsr_manage_address;
mod nsr_netns_lock;
mod nsr_redis_cluster;
mod nsr_refresh_frr;
mod nsr_standby_frr;
mod nsr_wait_replicas;
mod peers_pairwise;
mod preheated_backup;
mod record_replay;
mod redis_acl;
mod rfc7606;
mod rpki_stayrtr;
mod stall_bfd;
mod stall_store;
mod upgrade_frr;
mod upgrade_releases;
