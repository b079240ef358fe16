//! etcd with client-certificate authentication and roles (issue 30, item
//! 3): the control plane's etcd takes only clients with a certificate from
//! the CA, maps the certificate's common name to its user, and refuses a
//! write outside the user's role; the control plane works end to end on
//! it.
//!
//! ```text
//!   the plane of `holdfast_lab::plane` with `PlaneExtras::etcd_auth`:
//!                 bridge `lan` 198.18.0.0/24
//!   [ peer ]  .1   frr (AS 65001) --- BGP --- service .10 (holdfastd unit u1)
//!   [ redis ] .2   the NSR store
//!   [ a ] .3, [ b ] .4   holdfast-agent --tls-* agent-a.pem / agent-b.pem
//!                        (etcd user agent:a / agent:b); u1: primary a, backup b
//!   [ s ] .8             the agent server's agent (agent:s)
//!                 bridge `mgmt` 198.19.0.0/24
//!   [ c1..c3 ] .31-.33   etcd --client-cert-auth, https://198.19.0.3N:2379
//!                        (etcd-cN.pem; peers plain http :2380), and
//!                        holdfast-controller --tls-* controller-cN.pem
//!                        (etcd user controller:cN)
//!   WORK/certs           `holdfast ctl certs init --hosts a,b,s
//!                        --controllers c1,c2,c3 --units u1 --operators admin
//!                        --etcd-members c1=198.19.0.31,...` (and etcd-root.pem)
//!   then                 `holdfast ctl --tls-cert etcd-root.pem ... etcd-auth init
//!                        --hosts a,b,s --controllers c1,c2,c3` (auth enable)
//! ```
//!
//! Every probe is the real `etcdctl` (3.4) in c1's namespace. Checked:
//! 1. **positive control**: one controller leads with the three agents
//!    attached, frr's session with u1 is Established, u1 PROTECTED on a;
//!    `holdfast ctl status` as the operator answers; etcd lists the roles
//!    and users (`role list`, `user get agent:a`) to its root;
//! 2. **no certificate**: `etcdctl get` with the CA but no client
//!    certificate is refused in the TLS handshake (a member logs `tls:
//!    client didn't provide a certificate`), and plain `http://` to the
//!    client port is refused; the root certificate reads the same keys;
//! 3. **an agent writing a placement**: `etcdctl put` of u1's placement
//!    (the value read back) with agent-a.pem: `permission denied`; with
//!    controller-c1.pem: `OK`; the operator's certificate may not write
//!    an agent's key either;
//! 4. **an agent writing another host's keys**: agent-a.pem putting
//!    `agents/b` and `agent-servers/b`: `permission denied`; agent a may
//!    read the agents' keys (its peers) but not the placements (u1's
//!    configuration);
//! 5. **end to end**: u1's holdfastd is SIGKILLed; the controller takes it
//!    over on b through etcd (every replica and agent on its own
//!    certificate); u1 PROTECTED on b; frr saw nothing (`PlaneWatch`).

use std::time::Duration;

use holdfast_lab::plane::{Moved, Plane, PlaneBins, PlaneExtras, PlaneSpec, UNITS_PREFIX};
use holdfast_lab::PeerKind;

const LONG: Duration = Duration::from_secs(60);
const AGENTS: &str = "/holdfast/default/agents/";

/// `etcdctl ARGS` with the certificate `stem` (or none): (succeeded,
/// stdout and stderr).
fn ctl_as(p: &mut Plane, stem: Option<&str>, args: &[&str]) -> (bool, String) {
    let o = p
        .etcd
        .ctl_as(&mut p.lab, stem, args)
        .unwrap_or_else(|e| panic!("etcdctl {args:?}: {e}"));
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    (o.status.success(), text.trim().to_string())
}

fn assert_denied(p: &mut Plane, stem: &str, args: &[&str]) {
    let (ok, out) = ctl_as(p, Some(stem), args);
    assert!(
        !ok && out.contains("permission denied"),
        "{stem} {args:?}: expected permission denied, got ok={ok} {out:?}"
    );
}

#[test]
fn etcd_takes_only_certificates_and_refuses_writes_outside_a_role() {
    let Some(bins) = PlaneBins::ready(&[PeerKind::Frr], &[]) else {
        return;
    };
    let spec = PlaneSpec::one_unit(&["a", "b"], false);
    let extras = PlaneExtras {
        etcd_auth: true,
        ..PlaneExtras::default()
    };
    let mut p = Plane::up_with("etcd_auth", &spec, bins, &extras).expect("plane");
    p.wait_established(LONG).unwrap_or_else(|e| panic!("{e}"));
    p.wait_leader(3, LONG).unwrap_or_else(|e| panic!("{e}"));
    p.wait_protected("u1", "a", LONG)
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(
        p.etcd.endpoints().starts_with("https://"),
        "{}",
        p.etcd.endpoints()
    );

    // 1. The plane on etcd with authentication; the operator's view.
    let status = p.ctl(&["status"]).expect("holdfast ctl status");
    assert!(status["leader"]["name"].is_string(), "{status}");
    let roles = p
        .etcd
        .ctl(&mut p.lab, &["role", "list"])
        .expect("role list");
    for r in [
        "holdfast-controller",
        "holdfast-operator",
        "holdfast-agent-a",
        "holdfast-agent-b",
        "holdfast-agent-s",
    ] {
        assert!(roles.lines().any(|l| l.trim() == r), "{r} in {roles:?}");
    }
    let user = p
        .etcd
        .ctl(&mut p.lab, &["user", "get", "agent:a"])
        .expect("user get");
    assert!(user.contains("holdfast-agent-a"), "{user}");
    println!(
        "1. plane up on etcd with client certificates: leader {}, u1 PROTECTED on a; roles {:?}",
        status["leader"]["name"],
        roles.lines().collect::<Vec<_>>()
    );

    // 2. No certificate: refused; the root certificate reads.
    let (ok, out) = ctl_as(&mut p, None, &["get", AGENTS, "--prefix", "--keys-only"]);
    assert!(!ok, "no client certificate was answered: {out}");
    let rejected: Vec<String> = p
        .etcd
        .members()
        .iter()
        .filter_map(|m| m.proc_id())
        .filter_map(|id| std::fs::read_to_string(p.lab.proc_logs(id).1).ok())
        .flat_map(|log| {
            log.lines()
                .filter(|l| l.contains("didn't provide a certificate"))
                .map(str::to_string)
                .collect::<Vec<_>>()
        })
        .collect();
    assert!(
        !rejected.is_empty(),
        "no member logged the handshake without a certificate"
    );
    let plain = p
        .etcd
        .endpoints()
        .split(',')
        .next()
        .expect("an endpoint")
        .replace("https://", "http://");
    let host = p.etcd.members()[0].host;
    let o = p
        .lab
        .exec(
            host,
            &[
                "etcdctl",
                &format!("--endpoints={plain}"),
                "--command-timeout=2s",
                "get",
                AGENTS,
                "--prefix",
            ],
        )
        .expect("etcdctl over http");
    assert!(!o.status.success(), "plain http was answered");
    let keys = p
        .etcd
        .ctl(&mut p.lab, &["get", AGENTS, "--prefix", "--keys-only"])
        .expect("root reads");
    assert!(
        keys.contains("agents/a") && keys.contains("agents/b"),
        "{keys}"
    );
    println!(
        "2. etcdctl without a client certificate: refused ({}; etcd: {}); plain http: refused; root reads the agents' keys",
        out.lines().last().unwrap_or_default(),
        rejected[0]
    );

    // 3. A placement: an agent may not write it; a controller may.
    let key = format!("{UNITS_PREFIX}u1");
    let rec = p
        .etcd
        .ctl(&mut p.lab, &["get", &key, "--print-value-only"])
        .expect("u1");
    let rec = rec.trim().to_string();
    assert!(rec.contains("\"unit\":\"u1\""), "{rec}");
    assert_denied(&mut p, "agent-a", &["put", &key, &rec]);
    assert_denied(&mut p, "agent-b", &["put", &key, &rec]);
    let (ok, out) = ctl_as(&mut p, Some("controller-c1"), &["put", &key, &rec]);
    assert!(ok && out == "OK", "controller put: {out}");
    assert_denied(
        &mut p,
        "operator-admin",
        &["put", &format!("{AGENTS}a"), "{}"],
    );
    println!("3. put of u1's placement: agent-a, agent-b permission denied; controller-c1 OK; operator on agents/a denied");

    // 4. Another host's keys: refused; its own peers readable, placements not.
    assert_denied(&mut p, "agent-a", &["put", &format!("{AGENTS}b"), "{}"]);
    assert_denied(
        &mut p,
        "agent-a",
        &["put", "/holdfast/default/agent-servers/b", "{}"],
    );
    assert_denied(&mut p, "agent-a", &["del", &format!("{AGENTS}b")]);
    let (ok, out) = ctl_as(
        &mut p,
        Some("agent-a"),
        &["get", AGENTS, "--prefix", "--keys-only"],
    );
    assert!(
        ok && out.contains("agents/b"),
        "agent a reads its peers: {out}"
    );
    assert_denied(&mut p, "agent-a", &["get", &key]);
    println!("4. agent-a on agents/b, agent-servers/b (put, del): permission denied; agent-a reads agents/ but not units/");

    // 5. End to end: an application failure taken over through etcd.
    let (
        Moved {
            to,
            running: moved,
            protected,
        },
        seen,
    ) = p
        .take_over_unseen("u1", "a", LONG, Duration::from_secs(2))
        .unwrap_or_else(|e| panic!("u1's takeover: {e}"));
    let (primary, backup) = p.placement("u1").expect("holdfast ctl units");
    assert_eq!(primary, to);
    println!(
        "5. u1 SIGKILLed on a: on {to} (backup {backup:?}) in {moved:?}, PROTECTED in {protected:?}; frr: {seen}"
    );
}
