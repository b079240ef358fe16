//! Mutual TLS on the control plane's gRPC (issue 30, items 1 and 2): the
//! certificates made by `holdfast ctl certs init`, the controllers'
//! `Attach`, the agents' failsafe service and holdfastd's GoBGP API taking
//! only clients with a certificate from the CA, and an agent certificate
//! that names its host.
//!
//! ```text
//!   the plane of `holdfast_lab::plane` with `PlaneExtras::mtls`:
//!                 bridge `lan` 198.18.0.0/24
//!   [ peer ]  .1   frr (AS 65001) --- BGP --- service .10 (holdfastd unit u1)
//!   [ redis ] .2   the NSR store
//!   [ a ] .3, [ b ] .4   holdfast-agent --tls-* agent-a.pem / agent-b.pem;
//!                        u1's container on each (u1: primary a, backup b;
//!                        its GoBGP API on 127.0.0.1:50061 in the container,
//!                        grpc_tls_cert/key unit-u1.pem, grpc_tls_ca ca.pem)
//!   [ s ] .8             the agent server's agent (agent-s.pem)
//!                 bridge `mgmt` 198.19.0.0/24
//!   [ c1..c3 ] .31-.33   etcd + holdfast-controller --tls-* controller-cN.pem
//!                        (Attach :50051); the agents' failsafe on a, b :50052
//!   WORK/certs           `holdfast ctl certs init --hosts a,b,s
//!                        --controllers c1,c2,c3 --units u1 --operators admin`
//! ```
//!
//! The probes are `curl` over HTTP/2 (a gRPC call by hand: a framed
//! protobuf body, `grpc-status` read from the answer), run in the
//! namespace of the agent server `s` (management network) or of u1's
//! container; a call that gets a `grpc-status` back was served, one that
//! gets none was refused before any service saw it.
//!
//! Checked:
//! 1. **positive control**: with the certificates the plane works: one
//!    controller leads with the three agents attached (its log names each
//!    stream's certificate, `cert=agent:a`), frr's session with u1 is
//!    Established and u1 is PROTECTED on a;
//! 2. **no certificate, refused**: a plaintext HTTP/2 call and a TLS call
//!    without a client certificate get no answer from the leader's
//!    `Attach`, agent a's failsafe service or u1's GoBGP API, while the
//!    same TLS call with the operator's certificate is answered (a
//!    `grpc-status`); `gobgp --tls --tls-ca-file ca.pem` (which cannot
//!    present a certificate) is refused by the GoBGP API;
//! 3. **an agent certificate for `a` attaching as `b`**: a Hello naming b
//!    sent with agent-a.pem to every replica: the leader answers
//!    `PERMISSION_DENIED` (7; the others refuse any Attach as followers) and logs "attach refused" with
//!    `cert=agent:a` and `claimed=b`; the real b stays attached (the
//!    leader's status still shows three agents); likewise a failsafe ask
//!    naming a sent with agent-b.pem to agent a: `PERMISSION_DENIED`,
//!    logged ("failsafe ask refused", `cert=agent:b`), and the operator's
//!    certificate (not an agent's) is refused there too;
//! 4. the positive control again: u1 still Established, PROTECTED on a.

use std::path::Path;
use std::time::Duration;

use holdfast_lab::plane::{Plane, PlaneBins, PlaneExtras, PlaneSpec};
use holdfast_lab::{wait_for_every, HostId, PeerKind};

const LONG: Duration = Duration::from_secs(60);
const GOBGP_PORT: u16 = 50061;

/// A gRPC frame: no compression, the length, the message.
fn frame(msg: &[u8]) -> Vec<u8> {
    let mut f = vec![0u8];
    f.extend_from_slice(&u32::try_from(msg.len()).expect("small").to_be_bytes());
    f.extend_from_slice(msg);
    f
}

/// `AgentReport { hello: Hello { host, schema: 1 } }`, encoded.
fn hello(host: &str) -> Vec<u8> {
    let mut h = vec![0x0a, u8::try_from(host.len()).expect("short")];
    h.extend_from_slice(host.as_bytes());
    h.extend_from_slice(&[0x28, 0x01]);
    let mut r = vec![0x0a, u8::try_from(h.len()).expect("short")];
    r.extend_from_slice(&h);
    frame(&r)
}

/// `FailsafeAsk { host }`, encoded.
fn ask(host: &str) -> Vec<u8> {
    let mut a = vec![0x0a, u8::try_from(host.len()).expect("short")];
    a.extend_from_slice(host.as_bytes());
    frame(&a)
}

/// What one call got.
#[derive(Debug)]
struct Call {
    /// `grpc-status` of the answer, if one came.
    status: Option<u32>,
    /// curl's exit code and its verbose log (for the messages).
    code: i32,
    log: String,
}

/// A gRPC method as a client on `host` reaches it: `https://NAME:PORT/PATH`
/// with NAME (the server's role name, as its certificate has it)
/// resolved to `ip`.
struct Target<'a> {
    what: &'a str,
    host: HostId,
    name: &'a str,
    ip: &'a str,
    port: u16,
    path: &'a str,
}

/// Calls by curl in a target's namespace, with the certificates of `certs`.
struct Caller<'a> {
    p: &'a Plane,
    certs: &'a Path,
}

impl Caller<'_> {
    /// Sends `body` (a file of framed messages) to `t` with `cert` (a
    /// `ROLE-NAME` of the certificate directory) or none; `plain`:
    /// plaintext HTTP/2 instead of TLS.
    fn call(&self, t: &Target, body: &Path, cert: Option<&str>, plain: bool) -> Call {
        let Target {
            host,
            name,
            ip,
            port,
            path,
            ..
        } = *t;
        let d = |f: &str| self.certs.join(f).to_string_lossy().to_string();
        let resolve = format!("{name}:{port}:{ip}");
        let body = format!("@{}", body.display());
        let url = if plain {
            format!("http://{ip}:{port}{path}")
        } else {
            format!("https://{name}:{port}{path}")
        };
        let mut argv: Vec<String> = [
            "curl",
            "-sS",
            "-v",
            "--max-time",
            "5",
            "-o",
            "/dev/null",
            "-H",
            "content-type: application/grpc",
            "-H",
            "te: trailers",
            "--data-binary",
            &body,
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        if plain {
            argv.push("--http2-prior-knowledge".into());
        } else {
            argv.extend([
                "--http2".into(),
                "--cacert".into(),
                d("ca.pem"),
                "--resolve".into(),
                resolve,
            ]);
        }
        if let Some(c) = cert {
            argv.extend([
                "--cert".into(),
                d(&format!("{c}.pem")),
                "--key".into(),
                d(&format!("{c}-key.pem")),
            ]);
        }
        argv.push(url);
        let refs: Vec<&str> = argv.iter().map(String::as_str).collect();
        let out = self.p.lab.exec(host, &refs).expect("curl runs");
        let log = String::from_utf8_lossy(&out.stderr).to_string();
        let status = log
            .lines()
            .filter_map(|l| l.trim_start_matches("< ").strip_prefix("grpc-status: "))
            .filter_map(|v| v.trim().parse().ok())
            .next_back();
        Call {
            status,
            code: out.status.code().unwrap_or(-1),
            log,
        }
    }
}

/// `name`'s stderr, without the terminal colours tracing puts in it.
fn log_of(p: &Plane, name: &str) -> String {
    let raw = std::fs::read_to_string(p.lab.work_dir().join("logs").join(format!("{name}.stderr")))
        .unwrap_or_default();
    let mut out = String::with_capacity(raw.len());
    let mut chars = raw.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            // ESC [ ... m
            for d in chars.by_ref() {
                if d.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// Every log line of `name` with all of `words`.
fn logged(p: &Plane, name: &str, words: &[&str]) -> Vec<String> {
    log_of(p, name)
        .lines()
        .filter(|l| words.iter().all(|w| l.contains(w)))
        .map(str::to_string)
        .collect()
}

#[test]
fn only_certificates_of_the_ca_get_in_and_an_agent_only_as_its_host() {
    let Some(bins) = PlaneBins::ready(&[PeerKind::Frr], &["curl", "gobgp"]) else {
        return;
    };
    let spec = PlaneSpec::one_unit(&["a", "b"], false);
    let mut extras = PlaneExtras {
        mtls: true,
        ..PlaneExtras::default()
    };
    extras.unit_config.insert(
        "u1".into(),
        format!(
            "grpc_listen = \"127.0.0.1:{GOBGP_PORT}\"\ngrpc_tls_cert = \"@CERTS@/unit-u1.pem\"\ngrpc_tls_key = \"@CERTS@/unit-u1-key.pem\"\ngrpc_tls_ca = \"@CERTS@/ca.pem\"\n"
        ),
    );
    let p = Plane::up_with("control_plane_mtls", &spec, bins, &extras).expect("plane");
    let certs = p.certs.clone().expect("the plane's certificates");

    // 1. The plane works over mutual TLS.
    p.wait_established(LONG).unwrap_or_else(|e| panic!("{e}"));
    let leader = p.wait_leader(3, LONG).unwrap_or_else(|e| panic!("{e}"));
    p.wait_protected("u1", "a", LONG)
        .unwrap_or_else(|e| panic!("{e}"));
    let lname = leader["name"].as_str().expect("leader name").to_string();
    let lproc = format!("controller_{lname}");
    for h in ["a", "b", "s"] {
        assert!(
            !logged(&p, &lproc, &["agent attached", &format!("cert=agent:{h}")]).is_empty(),
            "{lname} logs agent {h}'s certificate on attach:\n{}",
            log_of(&p, &lproc)
        );
    }
    for name in ["controller_c1", "agent_a", "agent_s"] {
        assert!(
            logged(&p, name, &["plaintext"]).is_empty(),
            "{name} warns of no plaintext"
        );
    }
    println!(
        "1. {lname} leads with a, b and s attached over mutual TLS; u1 Established, PROTECTED on a"
    );

    let work = p.lab.work_dir().to_path_buf();
    let write = |f: &str, b: &[u8]| {
        let path = work.join(f);
        std::fs::write(&path, b).expect("body");
        path
    };
    let empty = write("empty.grpc", &frame(&[]));
    let hello_b = write("hello-b.grpc", &hello("b"));
    let ask_a = write("ask-a.grpc", &ask("a"));
    let c = Caller {
        p: &p,
        certs: &certs,
    };
    let s = p.agent_server.host.id;
    // The leader's address: a replica that does not lead refuses Attach
    // at once (FAILED_PRECONDITION), which curl reports as a broken stream.
    let n: u8 = lname.trim_start_matches('c').parse().expect("cN");
    let leader_ip = format!("198.19.0.{}", 30 + n);
    let leader_ip = leader_ip.as_str();
    let a_mgmt = "198.19.0.3";
    let attach = "/holdfast.control.v1.Controller/Attach";
    let failsafe = "/holdfast.control.v1.Agent/Failsafe";
    let get_bgp = "/apipb.GobgpApi/GetBgp";
    let container = p.units[0].containers["a"].id;

    // 2. No certificate, no answer; the operator's, an answer.
    let at = |what, host, name, ip, port, path| Target {
        what,
        host,
        name,
        ip,
        port,
        path,
    };
    let controller = |ip| {
        at(
            "a controller's Attach",
            s,
            "controller.holdfast",
            ip,
            50051,
            attach,
        )
    };
    let a_failsafe = at("a's failsafe", s, "agent.holdfast", a_mgmt, 50052, failsafe);
    let gobgp_api = at(
        "u1's GoBGP API",
        container,
        "unit.holdfast",
        "127.0.0.1",
        GOBGP_PORT,
        get_bgp,
    );
    for (t, body) in [
        (controller(leader_ip), &empty),
        (a_failsafe, &ask_a),
        (gobgp_api, &empty),
    ] {
        let what = t.what;
        let plain = c.call(&t, body, None, true);
        assert_eq!(
            plain.status, None,
            "{what}: plaintext answered: {}",
            plain.log
        );
        let bare = c.call(&t, body, None, false);
        assert_eq!(
            bare.status, None,
            "{what}: no certificate answered: {}",
            bare.log
        );
        assert_ne!(bare.code, 0, "{what}: curl without a certificate succeeded");
        let op = c.call(&t, body, Some("operator-admin"), false);
        assert!(
            op.status.is_some(),
            "{what}: the operator's certificate got no answer (curl {}): {}",
            op.code,
            op.log
        );
        println!(
            "2. {what}: plaintext refused (curl {}), no certificate refused (curl {}), operator answered (grpc-status {:?})",
            plain.code, bare.code, op.status
        );
    }
    let ca = certs.join("ca.pem").to_string_lossy().to_string();
    let port = GOBGP_PORT.to_string();
    let g = p
        .lab
        .exec(
            container,
            &[
                "gobgp",
                "-u",
                "127.0.0.1",
                "-p",
                &port,
                "--tls",
                "--tls-ca-file",
                &ca,
                "global",
            ],
        )
        .expect("gobgp runs");
    assert!(
        !g.status.success(),
        "gobgp without a client certificate was served: {}",
        String::from_utf8_lossy(&g.stdout)
    );
    println!(
        "2. gobgp --tls (no client certificate): refused ({})",
        format!(
            "{}{}",
            String::from_utf8_lossy(&g.stdout),
            String::from_utf8_lossy(&g.stderr)
        )
        .trim()
    );

    // 3. agent-a.pem attaching as b: refused and logged by the leader.
    let mut statuses = Vec::new();
    for ip in ["198.19.0.31", "198.19.0.32", "198.19.0.33"] {
        let r = c.call(&controller(ip), &hello_b, Some("agent-a"), false);
        statuses.push(r.status);
    }
    assert!(
        statuses.contains(&Some(7)),
        "no replica answered PERMISSION_DENIED to agent-a.pem attaching as b: {statuses:?}"
    );
    let refused = wait_for_every(
        "the leader logs the refused attach",
        Duration::from_secs(10),
        Duration::from_millis(100),
        || {
            let l = logged(&p, &lproc, &["attach refused", "cert=agent:a", "claimed=b"]);
            Ok((!l.is_empty()).then_some(l))
        },
    )
    .unwrap_or_else(|e| panic!("{e}:\n{}", log_of(&p, &lproc)));
    let after = p.wait_leader(3, LONG).unwrap_or_else(|e| panic!("{e}"));
    assert!(
        after["agents"]
            .as_array()
            .is_some_and(|a| a.iter().any(|x| x["host"] == "b")),
        "the real b stays attached: {after}"
    );
    println!(
        "3. agent-a.pem as b: grpc-status {statuses:?} (c1..c3); {lname} logged: {}",
        refused[0].trim()
    );
    let a_failsafe = at("a's failsafe", s, "agent.holdfast", a_mgmt, 50052, failsafe);
    let r = c.call(&a_failsafe, &ask_a, Some("agent-b"), false);
    assert_eq!(r.status, Some(7), "agent-b.pem asking as a: {}", r.log);
    let l = wait_for_every(
        "agent a logs the refused ask",
        Duration::from_secs(10),
        Duration::from_millis(100),
        || {
            let l = logged(
                &p,
                "agent_a",
                &["failsafe ask refused", "cert=agent:b", "claimed=a"],
            );
            Ok((!l.is_empty()).then_some(l))
        },
    )
    .unwrap_or_else(|e| panic!("{e}:\n{}", log_of(&p, "agent_a")));
    let op = c.call(&a_failsafe, &ask_a, Some("operator-admin"), false);
    assert_eq!(
        op.status,
        Some(7),
        "the operator's certificate asking as a: {}",
        op.log
    );
    println!(
        "3. agent-b.pem asking a's failsafe as a: PERMISSION_DENIED; agent a logged: {}",
        l[0].trim()
    );

    // 4. Still working.
    p.wait_established(LONG).unwrap_or_else(|e| panic!("{e}"));
    p.wait_protected("u1", "a", LONG)
        .unwrap_or_else(|e| panic!("{e}"));
    println!("4. u1 still Established and PROTECTED on a");
}
