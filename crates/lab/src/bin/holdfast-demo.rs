//! `holdfast-demo` (what `make demo` runs): holdfastd between a bird2 and an
//! frr peer, each in its own network namespace, with routes flowing through.
//!
//! ```text
//!   bird2 (AS 65001) ── veth ── holdfastd (AS 65000) ── veth ── frr (AS 65002)
//!   originates 20.0.0.0/24…   originates 10.10.0.0/24 ×N      originates 30.0.0.0/24…
//! ```
//!
//! It shows each step as it happens, reads every view with the peer's own
//! tool (birdc, vtysh) or holdfastd's control socket, withdraws a route on
//! one side and shows the other side lose it, then tears everything down.
//! `--cleanup` removes namespaces left by a crashed earlier run.

use anyhow::{bail, Context};
use holdfast_api::RibTable;
use holdfast_lab::{
    cleanup_stale, Bird, Frr, Holdfastd, Lab, NeighborSpec, Peer, PeerKind, PeerSpec, RouteSpec,
};
use std::net::{IpAddr, Ipv4Addr};
use std::time::{Duration, Instant};

const WAIT: Duration = Duration::from_secs(60);

fn step(start: Instant, text: &str) {
    println!("[{:>6.2}s] {text}", start.elapsed().as_secs_f64());
}

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.iter().any(|a| a == "--cleanup") {
        let n = cleanup_stale()?;
        println!("removed {n} leftover namespace(s)");
        return Ok(());
    }
    let routes: u32 = match args.iter().position(|a| a == "--routes") {
        Some(i) => args
            .get(i + 1)
            .context("--routes N")?
            .parse()
            .context("--routes N")?,
        None => 1000,
    };
    holdfast_lab::preflight(&[PeerKind::Bird, PeerKind::Frr])?;
    cleanup_stale()?;
    let start = Instant::now();
    let mut lab = Lab::new("demo")?;
    let bird_h = lab.host("bird")?;
    let hf_h = lab.host("holdfast")?;
    let frr_h = lab.host("frr")?;
    let l1 = lab.link_auto(bird_h, hf_h)?;
    let l2 = lab.link_auto(hf_h, frr_h)?;
    let v4 = |l| {
        let i = lab.link_info(l);
        let p = i.v4.expect("link_auto assigns IPv4");
        (IpAddr::V4(p.a), IpAddr::V4(p.b))
    };
    let (bird_ip, hf_ip1) = v4(l1);
    let (hf_ip2, frr_ip) = v4(l2);
    step(
        start,
        &format!("namespaces up: bird {bird_ip} — holdfastd {hf_ip1} / {hf_ip2} — frr {frr_ip}"),
    );

    let config = format!(
        r#"[global]
asn = 65000
router_id = "{hf_ip1}"

[[network]]
prefix = "10.10.0.0/24"
count = {routes}
communities = ["65000:100"]
large_communities = ["65000:1:2"]

[[neighbor]]
address = "{bird_ip}"
remote_asn = 65001
description = "bird2 peer"
import = "all"
export = "all"

[[neighbor]]
address = "{frr_ip}"
remote_asn = 65002
description = "frr peer"
import = "all"
export = "all"
"#
    );
    let hf = Holdfastd::start(&mut lab, hf_h, "holdfastd", &config)?;
    step(start, &format!("holdfastd started (pid {})", hf.pid(&lab)));

    let bird_spec = PeerSpec::new(65001, Ipv4Addr::new(192, 0, 2, 1))
        .neighbor(NeighborSpec::new(hf_ip1, 65000).passive())
        .route(
            RouteSpec::new("20.0.0.0/24")
                .community(65001, 7)
                .large_community(65001, 8, 9)
                .med(10),
        )
        .route(RouteSpec::new("20.0.1.0/24"));
    let bird = Bird::start(&mut lab, bird_h, &bird_spec)?;
    let frr_spec = PeerSpec::new(65002, Ipv4Addr::new(192, 0, 2, 2))
        .neighbor(NeighborSpec::new(hf_ip2, 65000))
        .route(RouteSpec::new("30.0.0.0/24").community(65002, 7))
        .route(RouteSpec::new("30.0.1.0/24"));
    let mut frr = Frr::start(&mut lab, frr_h, &frr_spec)?;
    step(start, "bird2 and frr started");

    hf.wait_established(bird_ip, WAIT)?;
    hf.wait_established(frr_ip, WAIT)?;
    bird.wait_established(&lab, hf_ip1, WAIT)?;
    frr.wait_established(&lab, hf_ip2, WAIT)?;
    step(start, "all sessions Established");

    let want = routes as usize + 2;
    let count = |p: &dyn Peer, n: IpAddr| p.received_routes(&lab, n).map(|r| r.len()).unwrap_or(0);
    holdfast_lab::wait_for(
        &format!("bird to hold {want} routes from holdfastd"),
        WAIT,
        || {
            let n = count(&bird, hf_ip1);
            Ok((n >= want).then_some(n))
        },
    )?;
    holdfast_lab::wait_for(
        &format!("frr to hold {want} routes from holdfastd"),
        WAIT,
        || {
            let n = count(&frr, hf_ip2);
            Ok((n >= want).then_some(n))
        },
    )?;
    step(
        start,
        &format!("routes flowed: bird and frr each hold {want} routes via holdfastd"),
    );

    println!("\n--- holdfast show neighbors ---");
    for n in hf.neighbors()? {
        println!(
            "  {:<16} AS{:<6} {:<12} received {:>5}  advertised {:>5}",
            n.address, n.remote_as, n.state, n.prefixes_received, n.prefixes_advertised
        );
    }
    println!("\n--- frr (vtysh) sees bird's routes through holdfastd ---");
    for r in frr
        .received_routes(&lab, hf_ip2)?
        .into_iter()
        .filter(|r| r.prefix.starts_with("20."))
    {
        println!(
            "  {:<16} path {:?} med {:?} communities {:?} large {:?}",
            r.prefix, r.as_path, r.med, r.communities, r.large_communities
        );
    }
    println!("\n--- bird (birdc) sees frr's routes through holdfastd ---");
    for r in bird
        .received_routes(&lab, hf_ip1)?
        .into_iter()
        .filter(|r| r.prefix.starts_with("30."))
    {
        println!(
            "  {:<16} path {:?} communities {:?}",
            r.prefix, r.as_path, r.communities
        );
    }
    let loc = hf.rib(RibTable::Loc, None)?;
    println!("\nholdfastd Loc-RIB: {} prefixes\n", loc.len());

    frr.withdraw(&lab, &["30.0.1.0/24".to_string()])?;
    step(start, "frr withdrew 30.0.1.0/24");
    bird.wait_no_route(&lab, hf_ip1, "30.0.1.0/24", WAIT)?;
    step(
        start,
        "bird no longer has 30.0.1.0/24: the withdrawal propagated through holdfastd",
    );

    for (name, p, n) in [
        ("bird", &bird as &dyn Peer, hf_ip1),
        ("frr", &frr as &dyn Peer, hf_ip2),
    ] {
        let s = p.session(&lab, n)?.context("session vanished")?;
        if !s.is_established() {
            bail!("{name}'s session is {:?}", s.state);
        }
        println!("  {name}: session {:?}, up {:?} s", s.state, s.uptime_secs);
    }
    lab.teardown();
    step(start, "demo finished, lab torn down");
    Ok(())
}
