//! The NSR store on a Redis Cluster (issue 29, item 3): the master of the
//! unit's slot is SIGKILLed in the middle of a 100k-route inbound burst.
//!
//! ```text
//!                 bridge `lan` 198.18.0.0/24
//!   [ p ] .20     frr: passes the feed's burst on to the unit (.10)
//!   [ redis ] .2  Redis Cluster: 3 masters + 3 replicas, ports 7000-7005,
//!                 node timeout 1 s, ACL users on every node;
//!                 `[nsr] store = "redis+cluster://198.18.0.2:7000,...:7001,...:7002"`
//!   [ a ] .3      host agent; the unit edge-1 (NSR on, wait_replicas = 1) at .10
//!   [ b ] .4      host agent: the controller's takeover at the end
//!   c1..c3        etcd + holdfast-controller (support/nsr_plane.rs)
//!   [ feed ] .5   raw test peers (the burst into frr; routes out of us)
//! ```
//!
//! Checks:
//! * at start the unit is PROTECTED: every write acknowledged by the
//!   slot's replica (`WAIT 1`);
//! * once a tenth of the burst is through, the master of `hf:{edge-1}`'s
//!   slot is SIGKILLed: the cluster promotes its replica (another node
//!   serves the slot, `CLUSTER NODES`), the unit reports itself
//!   UNPROTECTED (no replica left to acknowledge), and the session stays
//!   up;
//! * the killed node is started again, as its service manager would
//!   (its `nodes.conf` kept): it rejoins as the new master's replica, and
//!   the unit is PROTECTED again by itself, nothing done to it;
//! * the peer saw nothing (`nsr_plane`'s checks: frr's session never left
//!   Established, no NOTIFICATION, every route frr sent is in our
//!   Adj-RIB-In, fresh routes flow both ways);
//! * then the unit is SIGKILLed and the controller's takeover restores it
//!   from the cluster on b: the same checks, so nothing acknowledged was
//!   lost in the failover.
//!
//! Negative control (by hand, docs/notes/issue29-fleet.md): with the
//! store's `MOVED` handling removed, the store test
//! `cluster_follows_its_slot_to_a_new_master` fails.

use crate::{nsr_common, nsr_plane};

use holdfast_lab::{wait_ok, Frr, PeerKind};
use std::time::{Duration, Instant};

const T: Duration = Duration::from_secs(60);
const SLOT_KEY: &str = "hf:{edge-1}:epoch";

#[test]
fn frr_sees_nothing_when_a_cluster_master_dies_mid_burst() {
    let Some(mut r) = nsr_plane::Run::<Frr>::start_with(
        "nsr_redis_cluster",
        PeerKind::Frr,
        nsr_common::Options {
            redis_cluster: true,
            ..nsr_common::Options::default()
        },
        "[nsr]\nwait_replicas = 1\nwait_timeout_ms = 250\n",
    ) else {
        return;
    };
    let watch = r.watch();
    r.check("before the master kill");
    let since = std::time::SystemTime::now();
    let what = "the slot's master SIGKILLed during a 100k inbound burst";
    let mut figures = String::new();
    r.during_inbound_burst(what, |r| {
        let p = &mut r.plane;
        let cluster = p.redis.cluster_mut().expect("a cluster store");
        let dead = cluster
            .master_of(&p.lab, SLOT_KEY)
            .unwrap_or_else(|e| panic!("{e}"));
        let dead_port = cluster.nodes[dead].port();
        let t0 = Instant::now();
        cluster
            .kill(&mut p.lab, dead)
            .unwrap_or_else(|e| panic!("{e}"));
        let promoted = wait_ok(&format!("{what}: a replica promoted"), T, || {
            let m = p
                .redis
                .cluster()
                .expect("cluster")
                .master_of(&p.lab, SLOT_KEY)
                .map_err(|e| e.to_string())?;
            (m != dead).then_some(m).ok_or("not yet".to_string())
        })
        .unwrap_or_else(|e| panic!("{e}"));
        let t_promoted = t0.elapsed();
        wait_ok(&format!("{what}: UNPROTECTED"), T, || {
            let n = r.nsr_status();
            (n["protected"] == false).then_some(()).ok_or(n.to_string())
        })
        .unwrap_or_else(|e| panic!("{e}"));
        let p = &mut r.plane;
        let cluster = p.redis.cluster_mut().expect("cluster");
        let t1 = Instant::now();
        cluster
            .restart(&mut p.lab, dead)
            .unwrap_or_else(|e| panic!("{e}"));
        cluster.wait_ok(&p.lab, T).unwrap_or_else(|e| panic!("{e}"));
        let t_linked = t1.elapsed();
        r.wait_protected(&format!("{what}: the node back as a replica"));
        figures = format!(
            "node {dead_port} killed; {promoted_port} promoted after {t_promoted:?}; \
             the node started again: its replica link up after {t_linked:?}, PROTECTED after {:?}",
            t1.elapsed(),
            promoted_port = r.plane.redis.cluster().expect("cluster").nodes[promoted].port(),
        );
    });
    println!("{what}: {figures}");
    r.check(what);
    r.idle_kill();
    r.finish(watch, since);
}
