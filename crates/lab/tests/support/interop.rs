//! Shared scenario of the `interop_<peer>` tests: holdfastd (AS 65000) in host `h`
//! against one real peer (AS 65001) in host `p`, over two point-to-point links,
//! one session per (link, address family) so that every combination of
//! {holdfastd active, holdfastd passive} x {IPv4 transport, IPv6 transport} is covered.
//! Each session carries the unicast family of its transport only (BIRD cannot carry a
//! family over the other family's transport without an explicit next hop, see the lab
//! crate's known issues), so every family is covered by an active and a passive session.
//!
//! ```text
//!   [ h: holdfastd AS65000 ] 198.18.1.1    ===== link 1 ===== 198.18.1.2    [ p: peer AS65001 ]
//!                            fd00:0:0:1::1                    fd00:0:0:1::2
//!                            198.18.2.1    ===== link 2 ===== 198.18.2.2
//!                            fd00:0:0:2::1                    fd00:0:0:2::2
//!   s1 v4 link 1: holdfastd active,  peer passive
//!   s2 v6 link 1: holdfastd passive, peer active
//!   s3 v4 link 2: holdfastd passive, peer active
//!   s4 v6 link 2: holdfastd active,  peer passive
//! ```
//!
//! [`run`] checks, with the peer's own tools (the `Peer` trait) and with holdfastd's
//! control socket:
//! 1. every session reaches Established on both sides;
//! 2. holdfastd's `[[network]]` routes arrive at the peer on every session of their
//!    family with AS path `65000`, next hop = holdfastd's session address, exact MED,
//!    communities and large communities; the peer's routes show up in holdfastd's
//!    Adj-RIB-In of every session of their family with AS path `65001` and exact MED,
//!    communities and large communities;
//! 3. a withdrawal by the peer empties holdfastd's Adj-RIB-In; a reload that removes a
//!    `[[network]]` withdraws it at the peer, and one that changes a network's MED,
//!    communities and large communities replaces the route at the peer;
//! 4. a reload to an export policy accepting only some prefixes (and setting MED,
//!    prepending 65000 twice, adding a community and a large community) withdraws the
//!    others at the peer and rewrites the accepted ones; a reload back to
//!    `export = "all"` re-announces the others and restores the original attributes;
//! 5. through 3 and 4 no session was reset: the peer's uptime kept growing, its
//!    established/dropped counters (where the tool exposes them) and holdfastd's are
//!    unchanged, and neither the peer's log nor holdfastd's shows a NOTIFICATION;
//!    holdfastd's `msgs_out` counted the UPDATEs the reloads sent.

#![allow(dead_code)]

use std::net::IpAddr;
use std::time::{Duration, Instant};

use holdfast_api::{RibEntry, RibTable};
use holdfast_lab::{
    wait_until, Holdfastd, HostId, Lab, LogMark, NeighborSpec, Peer, PeerSpec, RouteSpec,
    RouteView, SessionView,
};

pub const HF_AS: u32 = 65000;
pub const PEER_AS: u32 = 65001;
pub const SESSION_TIMEOUT: Duration = Duration::from_secs(30);
pub const ROUTE_TIMEOUT: Duration = Duration::from_secs(20);

/// One BGP session between holdfastd and the peer.
#[derive(Debug, Clone)]
pub struct Sess {
    pub name: String,
    /// holdfastd's end of the transport.
    pub hf: IpAddr,
    /// The peer's end.
    pub peer: IpAddr,
    pub hf_passive: bool,
    /// MD5 password configured on holdfastd's side / on the peer's side.
    pub hf_md5: Option<String>,
    pub peer_md5: Option<String>,
    /// Whether the session is expected to come up (false: mismatched MD5 passwords).
    pub expect_up: bool,
    /// Address families carried (IPv4 unicast, IPv6 unicast); default: the transport's.
    pub families: (bool, bool),
    /// For the family other than the transport's: the next hop the peer must see on
    /// holdfastd's routes, and the one holdfastd must see on the peer's routes.
    pub other_nh: Option<(IpAddr, IpAddr)>,
}

impl Sess {
    pub fn new(name: &str, (hf, peer): (IpAddr, IpAddr), hf_passive: bool) -> Self {
        Sess {
            name: name.to_string(),
            hf,
            peer,
            hf_passive,
            hf_md5: None,
            peer_md5: None,
            expect_up: true,
            families: (hf.is_ipv4(), hf.is_ipv6()),
            other_nh: None,
        }
    }
    /// Both unicast families over this transport; `other_nh` as in the field doc.
    pub fn multi_family(mut self, hf_nh: IpAddr, peer_nh: IpAddr) -> Self {
        self.families = (true, true);
        self.other_nh = Some((hf_nh, peer_nh));
        self
    }
    pub fn v6(&self) -> bool {
        self.hf.is_ipv6()
    }
    pub fn carries(&self, v6: bool) -> bool {
        if v6 {
            self.families.1
        } else {
            self.families.0
        }
    }
    /// Families carried, as `v6` flags.
    pub fn fams(&self) -> Vec<bool> {
        [false, true]
            .into_iter()
            .filter(|v6| self.carries(*v6))
            .collect()
    }
    fn family_names(&self) -> Vec<String> {
        self.fams()
            .iter()
            .map(|v6| if *v6 { "ipv6-unicast" } else { "ipv4-unicast" }.to_string())
            .collect()
    }
    fn hf_nh(&self, v6: bool) -> IpAddr {
        if v6 == self.v6() {
            self.hf
        } else {
            self.other_nh.expect("other_nh").0
        }
    }
    fn peer_nh(&self, v6: bool) -> IpAddr {
        if v6 == self.v6() {
            self.peer
        } else {
            self.other_nh.expect("other_nh").1
        }
    }
}

/// A `[[network]]` of holdfastd.
#[derive(Debug, Clone)]
pub struct Net {
    pub prefix: &'static str,
    pub communities: Vec<(u16, u16)>,
    pub large: Vec<(u32, u32, u32)>,
    pub med: Option<u32>,
}

impl Net {
    fn toml(&self) -> String {
        let mut s = format!("[[network]]\nprefix = \"{}\"\n", self.prefix);
        if !self.communities.is_empty() {
            let c: Vec<String> = self
                .communities
                .iter()
                .map(|(a, b)| format!("\"{a}:{b}\""))
                .collect();
            s += &format!("communities = [{}]\n", c.join(", "));
        }
        if !self.large.is_empty() {
            let c: Vec<String> = self
                .large
                .iter()
                .map(|(a, b, c)| format!("\"{a}:{b}:{c}\""))
                .collect();
            s += &format!("large_communities = [{}]\n", c.join(", "));
        }
        if let Some(m) = self.med {
            s += &format!("med = {m}\n");
        }
        s
    }
    fn v6(&self) -> bool {
        self.prefix.contains(':')
    }
}

/// Creates hosts `h` (holdfastd) and `p` (peer) and `links` links between them; returns
/// the four standard sessions over links 1 and 2 (see the module doc) plus, per extra
/// link, its (v4, v6) address pairs as (hf, peer).
/// Per extra link: [(holdfastd v4, peer v4), (holdfastd v6, peer v6)].
pub type LinkAddrs = [(IpAddr, IpAddr); 2];

pub fn topology(lab: &mut Lab, links: usize) -> (HostId, HostId, Vec<Sess>, Vec<LinkAddrs>) {
    let h = lab.host("h").expect("host h");
    let p = lab.host("p").expect("host p");
    let mut addrs = Vec::new();
    for _ in 0..links {
        let l = lab.link_auto(h, p).expect("link");
        let info = lab.link_info(l).clone();
        let (v4, v6) = (info.v4.unwrap(), info.v6.unwrap());
        addrs.push([(v4.a.into(), v4.b.into()), (v6.a.into(), v6.b.into())]);
    }
    let mk = Sess::new;
    let sessions = vec![
        mk("s1-v4-hf-active", addrs[0][0], false),
        mk("s2-v6-hf-passive", addrs[0][1], true),
        mk("s3-v4-hf-passive", addrs[1][0], true),
        mk("s4-v6-hf-active", addrs[1][1], false),
    ];
    let extra = addrs[2..].to_vec();
    (h, p, sessions, extra)
}

/// s5: holdfastd active over the IPv4 addresses of `link`, carrying IPv4 and IPv6
/// unicast; the peer's IPv6 next hop is the IPv4-mapped address of its end, holdfastd's
/// its global IPv6 address on the link.
pub fn mapped_multi_family(link: LinkAddrs) -> Sess {
    let [(hf4, p4), (hf6, _)] = link;
    let IpAddr::V4(p4v4) = p4 else {
        panic!("link's first pair must be IPv4: {p4}")
    };
    Sess::new("s5-v4-hf-active-multi-family", (hf4, p4), false)
        .multi_family(hf6, IpAddr::V6(p4v4.to_ipv6_mapped()))
}

/// holdfastd's networks: A (all attributes), B (filtered by the partial policy),
/// C (removed by a reload), per family.
pub fn networks() -> Vec<Net> {
    let n = |prefix, communities: Vec<(u16, u16)>, large: Vec<(u32, u32, u32)>, med| Net {
        prefix,
        communities,
        large,
        med,
    };
    vec![
        n(
            "10.10.0.0/24",
            vec![(65000, 100), (65000, 200)],
            vec![(65000, 1, 2)],
            Some(50),
        ),
        n("10.10.1.0/24", vec![(65000, 101)], vec![], None),
        n("10.10.2.0/24", vec![], vec![(65000, 3, 3)], Some(7)),
        n(
            "2001:db8:a0::/48",
            vec![(65000, 600)],
            vec![(65000, 6, 0), (65000, 6, 1)],
            Some(60),
        ),
        n("2001:db8:a1::/48", vec![], vec![], Some(61)),
        n("2001:db8:a2::/48", vec![(65000, 602)], vec![], None),
    ]
}

pub const NET_A: [&str; 2] = ["10.10.0.0/24", "2001:db8:a0::/48"];
pub const NET_B: [&str; 2] = ["10.10.1.0/24", "2001:db8:a1::/48"];
pub const NET_C: [&str; 2] = ["10.10.2.0/24", "2001:db8:a2::/48"];

/// The peer's routes.
pub fn peer_routes() -> Vec<RouteSpec> {
    vec![
        RouteSpec::new("203.0.113.0/24")
            .med(7)
            .community(65001, 1)
            .community(65001, 2)
            .large_community(65001, 2, 3),
        RouteSpec::new("2001:db8:f0::/48")
            .med(8)
            .community(65001, 6)
            .large_community(65001, 6, 6),
    ]
}

/// holdfastd's configuration. `export` is the export policy of every neighbour.
pub fn hf_config(sessions: &[Sess], nets: &[Net], export: &str) -> String {
    let mut s = format!(
        "[global]\nasn = {HF_AS}\nrouter_id = \"192.0.2.100\"\nconnect_retry = 1\nworkers = 1\nshards = 4\n\n"
    );
    for x in sessions {
        s += &format!(
            "[[neighbor]]\naddress = \"{}\"\nremote_asn = {PEER_AS}\nlocal_address = \"{}\"\ndescription = \"{}\"\nimport = \"all\"\nexport = \"{export}\"\npassive = {}\nfamilies = {:?}\n",
            x.peer,
            x.hf,
            x.name,
            x.hf_passive,
            x.family_names()
        );
        if let Some(pw) = &x.hf_md5 {
            s += &format!("md5_password = \"{pw}\"\n");
        }
        s.push('\n');
    }
    for n in nets {
        s += &n.toml();
        s.push('\n');
    }
    s += "[[policy]]\nname = \"only-a\"\ndefault = \"reject\"\n[[policy.term]]\nname = \"a\"\naction = \"accept\"\n";
    s += &format!(
        "match = {{ prefix = [\"{}\", \"{}\"] }}\n",
        NET_A[0], NET_A[1]
    );
    s += "set = { med = 5, prepend = 2, add_community = \"65000:777\", add_large_community = \"65000:77:77\" }\n";
    s
}

/// The peer's spec: the mirror image of `sessions`.
pub fn peer_spec(sessions: &[Sess], routes: &[RouteSpec]) -> PeerSpec {
    let mut spec = PeerSpec::new(PEER_AS, "192.0.2.200".parse().unwrap());
    for x in sessions {
        let mut n = NeighborSpec::new(x.hf, HF_AS)
            .local(x.peer)
            .families(x.families.0, x.families.1);
        if !x.hf_passive {
            n = n.passive();
        }
        if let Some(pw) = &x.peer_md5 {
            n = n.md5(pw);
        }
        spec = spec.neighbor(n);
    }
    for r in routes {
        spec = spec.route(r.clone());
    }
    spec
}

fn sorted<T: Ord + Clone>(v: &[T]) -> Vec<T> {
    let mut v = v.to_vec();
    v.sort_unstable();
    v
}

/// Whether the peer's view `got` of holdfastd's network `n` sent over `s` is exact.
fn peer_view_ok(got: &RouteView, n: &Net, s: &Sess) -> bool {
    peer_view_is(got, n, s, &[HF_AS])
}

fn peer_view_is(got: &RouteView, n: &Net, s: &Sess, as_path: &[u32]) -> bool {
    got.as_path == as_path
        && got.next_hop == Some(s.hf_nh(n.v6()))
        && got.med == n.med
        && got.communities == sorted(&n.communities)
        && got.large_communities == sorted(&n.large)
}

/// Whether holdfastd's Adj-RIB-In entry `e` is the peer's route `r`.
fn rib_in_ok(e: &RibEntry, r: &RouteSpec, s: &Sess) -> bool {
    let comms: Vec<String> = sorted(&r.communities)
        .iter()
        .map(|(a, b)| format!("{a}:{b}"))
        .collect();
    let large: Vec<String> = sorted(&r.large_communities)
        .iter()
        .map(|(a, b, c)| format!("{a}:{b}:{c}"))
        .collect();
    e.as_path == PEER_AS.to_string()
        && e.med == r.med
        && sorted(&e.communities) == comms
        && sorted(&e.large_communities) == large
        && e.next_hop.as_deref() == Some(s.peer_nh(r.is_v6()).to_string().as_str())
}

fn norm(p: &str) -> String {
    holdfast_lab::normalize_prefix(p).unwrap()
}

/// Adj-RIB-In of holdfastd for `s`, entries for `prefix`.
pub fn rib_in(hf: &Holdfastd, s: &Sess, prefix: &str) -> Vec<RibEntry> {
    let p = norm(prefix);
    hf.rib(RibTable::In, Some(s.peer))
        .unwrap_or_default()
        .into_iter()
        .filter(|e| norm(&e.prefix) == p)
        .collect()
}

/// Session view on both sides, for the no-reset check.
#[derive(Debug, Clone)]
pub struct Snapshot {
    pub at: Instant,
    pub peer: SessionView,
    pub hf_counts: (u64, u64),
    pub hf_msgs_out: u64,
}

pub fn snapshot<P: Peer>(lab: &Lab, hf: &Holdfastd, peer: &P, s: &Sess) -> Snapshot {
    let view = peer
        .session(lab, s.hf)
        .expect("peer session")
        .expect("session configured");
    let n = hf
        .neighbor(s.peer)
        .expect("hf neighbor")
        .expect("hf neighbor configured");
    assert!(
        view.is_established() && n.state == "Established",
        "{}: {view:?} / {n:?}",
        s.name
    );
    Snapshot {
        at: Instant::now(),
        peer: view,
        hf_counts: (n.established_count, n.dropped_count),
        hf_msgs_out: n.msgs_out,
    }
}

/// No reset since `before`: still Established, counters unchanged, uptime grew.
pub fn assert_not_reset<P: Peer>(lab: &Lab, hf: &Holdfastd, peer: &P, s: &Sess, before: &Snapshot) {
    let now = snapshot(lab, hf, peer, s);
    let b = &before.peer;
    let a = &now.peer;
    assert_eq!(
        (a.established_count, a.dropped_count),
        (b.established_count, b.dropped_count),
        "{}: the peer's session counters changed across reloads: before {b:?}, after {a:?}",
        s.name
    );
    assert_eq!(
        now.hf_counts, before.hf_counts,
        "{}: holdfastd's session counters changed",
        s.name
    );
    // The reloads sent at least three UPDATEs on every session (C withdrawn, B withdrawn,
    // B re-announced); holdfastd's message counter must show them.
    assert!(
        now.hf_msgs_out >= before.hf_msgs_out + 3,
        "{}: holdfastd's msgs_out went from {} to {} across the reloads",
        s.name,
        before.hf_msgs_out,
        now.hf_msgs_out
    );
    let elapsed = now.at.duration_since(before.at).as_secs();
    let (u0, u1) = (
        b.uptime_secs.expect("uptime before"),
        a.uptime_secs.expect("uptime after"),
    );
    // Tools round uptimes to whole seconds; allow 2 s of slack, never a restart from 0.
    assert!(
        u1 + 2 >= u0 + elapsed,
        "{}: the peer's uptime did not keep growing ({u0} s -> {u1} s over {elapsed} s): session reset",
        s.name
    );
}

/// No NOTIFICATION in the peer's logs after `mark` (`Peer::notifications_since`).
pub fn assert_peer_log_clean<P: Peer>(what: &str, peer: &P, mark: &LogMark) {
    let lines = peer.notifications_since(mark).expect("peer log");
    assert!(
        lines.is_empty(),
        "{what} log shows a NOTIFICATION: {}",
        lines.join(" | ")
    );
}

/// The whole scenario (see the module doc). `sessions` may contain extra sessions;
/// routes are checked on every session with `expect_up`.
pub fn run<P: Peer>(
    lab: &mut Lab,
    h: HostId,
    p: HostId,
    sessions: &[Sess],
    start: impl FnOnce(&mut Lab, HostId, &PeerSpec) -> P,
) -> (Holdfastd, P) {
    let t0 = Instant::now();
    let nets = networks();
    let routes = peer_routes();
    let hf = Holdfastd::start(lab, h, "holdfastd", &hf_config(sessions, &nets, "all"))
        .expect("holdfastd");
    let mut peer = start(lab, p, &peer_spec(sessions, &routes));
    let up: Vec<&Sess> = sessions.iter().filter(|s| s.expect_up).collect();

    // 1. Sessions.
    for s in &up {
        let v = peer
            .wait_established(lab, s.hf, SESSION_TIMEOUT)
            .unwrap_or_else(|e| panic!("{}: {} side: {e}", s.name, peer.kind()));
        assert_eq!(v.remote_as.unwrap_or(HF_AS), HF_AS, "{v:?}");
        let n = hf
            .wait_established(s.peer, SESSION_TIMEOUT)
            .unwrap_or_else(|e| panic!("{}: holdfastd side: {e}", s.name));
        assert_eq!(n.remote_as, PEER_AS);
        assert_eq!(n.families, s.family_names(), "{}: {n:?}", s.name);
    }
    eprintln!(
        "[{:>5.1}s] all sessions Established",
        t0.elapsed().as_secs_f64()
    );

    // 2. Routes, both ways, exact attributes.
    for s in &up {
        for n in nets.iter().filter(|n| s.carries(n.v6())) {
            peer.wait_route(lab, s.hf, n.prefix, ROUTE_TIMEOUT, |r| {
                peer_view_ok(r, n, s)
            })
            .unwrap_or_else(|e| {
                panic!(
                    "{}: {} did not get {} as originated: {e}",
                    s.name,
                    peer.kind(),
                    n.prefix
                )
            });
        }
        for r in routes.iter().filter(|r| s.carries(r.is_v6())) {
            wait_until(
                &format!("{}: {} in holdfastd's Adj-RIB-In", s.name, r.prefix),
                ROUTE_TIMEOUT,
                || Ok(rib_in(&hf, s, &r.prefix)),
                |v| v.len() == 1 && rib_in_ok(&v[0], r, s),
            )
            .unwrap_or_else(|e| panic!("{e}"));
        }
    }
    eprintln!(
        "[{:>5.1}s] routes flow both ways",
        t0.elapsed().as_secs_f64()
    );

    let before: Vec<Snapshot> = up.iter().map(|s| snapshot(lab, &hf, &peer, s)).collect();
    let peer_log_mark = peer.log_mark();

    // 3a. Withdrawal by the peer.
    let prefixes: Vec<String> = routes.iter().map(|r| r.prefix.clone()).collect();
    peer.withdraw(lab, &prefixes).expect("peer withdraw");
    for s in &up {
        for r in routes.iter().filter(|r| s.carries(r.is_v6())) {
            wait_until(
                &format!("{}: {} gone from holdfastd's Adj-RIB-In", s.name, r.prefix),
                ROUTE_TIMEOUT,
                || Ok(rib_in(&hf, s, &r.prefix)),
                Vec::is_empty,
            )
            .unwrap_or_else(|e| panic!("{e}"));
        }
    }
    // 3b. Withdrawal by holdfastd: a reload without the C networks, which also changes
    // the attributes of the A networks (implicit replacement at the peer).
    let mut nets_ab: Vec<Net> = nets
        .iter()
        .filter(|n| !NET_C.contains(&n.prefix))
        .cloned()
        .collect();
    for n in nets_ab.iter_mut().filter(|n| NET_A.contains(&n.prefix)) {
        n.med = n.med.map(|m| m + 1000);
        n.communities.push((65000, 999));
        n.large.remove(0);
    }
    hf.reload(lab, &hf_config(sessions, &nets_ab, "all"))
        .expect("reload");
    for (s, v6) in up
        .iter()
        .flat_map(|s| s.fams().into_iter().map(move |v6| (s, v6)))
    {
        let c = NET_C[v6 as usize];
        peer.wait_no_route(lab, s.hf, c, ROUTE_TIMEOUT)
            .unwrap_or_else(|e| panic!("{}: network removed by reload: {e}", s.name));
        let a = nets_ab
            .iter()
            .find(|n| n.prefix == NET_A[v6 as usize])
            .unwrap();
        peer.wait_route(lab, s.hf, a.prefix, ROUTE_TIMEOUT, |r| {
            peer_view_ok(r, a, s)
        })
        .unwrap_or_else(|e| panic!("{}: network attributes changed by reload: {e}", s.name));
    }
    eprintln!(
        "[{:>5.1}s] withdrawals propagate both ways",
        t0.elapsed().as_secs_f64()
    );

    // 4. Export policy change by reload: only A, then all again.
    hf.reload(lab, &hf_config(sessions, &nets_ab, "only-a"))
        .expect("reload");
    for (s, v6) in up
        .iter()
        .flat_map(|s| s.fams().into_iter().map(move |v6| (s, v6)))
    {
        let (a, b) = (NET_A[v6 as usize], NET_B[v6 as usize]);
        peer.wait_no_route(lab, s.hf, b, ROUTE_TIMEOUT)
            .unwrap_or_else(|e| panic!("{}: export policy only-a: {e}", s.name));
        // A stays, rewritten by the policy's `set`.
        let mut want = nets_ab.iter().find(|n| n.prefix == a).unwrap().clone();
        want.med = Some(5);
        want.communities.push((65000, 777));
        want.large.push((65000, 77, 77));
        peer.wait_route(lab, s.hf, a, ROUTE_TIMEOUT, |r| {
            peer_view_is(r, &want, s, &[HF_AS; 3])
        })
        .unwrap_or_else(|e| panic!("{}: export policy only-a must rewrite {a}: {e}", s.name));
    }
    hf.reload(lab, &hf_config(sessions, &nets_ab, "all"))
        .expect("reload");
    for (s, v6) in up
        .iter()
        .flat_map(|s| s.fams().into_iter().map(move |v6| (s, v6)))
    {
        for p in [NET_A[v6 as usize], NET_B[v6 as usize]] {
            let n = nets_ab.iter().find(|n| n.prefix == p).unwrap();
            peer.wait_route(lab, s.hf, p, ROUTE_TIMEOUT, |r| peer_view_ok(r, n, s))
                .unwrap_or_else(|e| panic!("{}: export policy back to all: {e}", s.name));
        }
    }
    eprintln!(
        "[{:>5.1}s] export policy reloads took effect",
        t0.elapsed().as_secs_f64()
    );

    // 5. No session was reset by any of this.
    for (s, b) in up.iter().zip(&before) {
        assert_not_reset(lab, &hf, &peer, s, b);
    }
    assert_peer_log_clean(
        &format!("{} (after the reloads)", peer.kind()),
        &peer,
        &peer_log_mark,
    );
    assert_peer_log_clean(&peer.kind().to_string(), &peer, &LogMark::start());
    if let Some(line) = hf
        .log_text(lab)
        .lines()
        .find(|l| l.contains("NOTIFICATION"))
    {
        panic!("holdfastd log shows a NOTIFICATION: {line}");
    }
    (hf, peer)
}
