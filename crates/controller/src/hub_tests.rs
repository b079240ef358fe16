//! The `Attach` service over mutual TLS, on loopback: an agent
//! certificate attaches as its own host only.

use super::*;
use holdfast_control_api::certs::{init, CertPlan};
use holdfast_control_api::tls::{connect, Identity, Tls, TlsFiles};
use holdfast_control_api::v1::controller_client::ControllerClient;
use holdfast_control_api::v1::controller_server::ControllerServer;
use holdfast_control_api::v1::{Hello, ProbeTarget};

fn hello(host: &str) -> AgentReport {
    AgentReport {
        body: Some(agent_report::Body::Hello(Hello {
            host: host.into(),
            agent_server: false,
            units: Vec::new(),
            highest_token: 0,
            schema: holdfast_control_api::SCHEMA,
            version: String::new(),
            reports_refused: true,
            probe_plans: false,
        })),
    }
}

/// Attaches with `tls` as `host`; the first thing the stream carries.
async fn first(
    addr: std::net::SocketAddr,
    tls: &Tls,
    host: &str,
) -> Result<Option<Command>, Status> {
    let ch = connect(&addr.to_string(), Some(&tls.client(Role::Controller)))
        .await
        .map_err(|e| Status::unavailable(e.to_string()))?;
    let (tx, rx) = mpsc::unbounded_channel();
    tx.send(hello(host)).expect("queued");
    let mut s = ControllerClient::new(ch)
        .attach(tokio_stream::wrappers::UnboundedReceiverStream::new(rx))
        .await?
        .into_inner();
    let got = tokio::time::timeout(Duration::from_secs(5), s.message())
        .await
        .map_err(|_| Status::deadline_exceeded("nothing on the stream"))?;
    drop(tx);
    got
}

#[tokio::test]
async fn an_agent_certificate_attaches_only_as_its_host() {
    let dir = std::env::temp_dir().join(format!("hf-hub-tls-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let plan = CertPlan {
        controllers: vec!["c1".into()],
        hosts: vec!["a".into()],
        operators: vec!["admin".into()],
        days: 1,
        ..CertPlan::default()
    };
    init(&dir, &plan).expect("certificates");
    let load = |r: Role, n: &str| {
        Tls::load(&TlsFiles::in_dir(&dir, &Identity::new(r, n).expect("name"))).expect("files")
    };
    let (hub, _observed) = Hub::new(Arc::new(|| Some(Token(7))));
    let hub = hub.require_certs(true);
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("port");
    let addr = l.local_addr().expect("addr");
    drop(l);
    let server = tonic::transport::Server::builder()
        .tls_config(load(Role::Controller, "c1").server())
        .expect("tls")
        .add_service(ControllerServer::new(hub.clone()))
        .serve(addr);
    tokio::spawn(server);
    let a = load(Role::Agent, "a");
    let mut got = Err(Status::unavailable("not tried"));
    for _ in 0..50 {
        got = first(addr, &a, "a").await;
        if got.is_ok() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let beat = got.expect("agent a attaches as a").expect("a command");
    assert_eq!(beat.token, 7, "the leader's beat");
    let e = first(addr, &a, "b").await.expect_err("a as b");
    assert_eq!(e.code(), tonic::Code::PermissionDenied, "{e:?}");
    assert!(
        e.message()
            .contains("certificate agent:a may not act as agent b"),
        "{e:?}"
    );
    let e = first(addr, &load(Role::Operator, "admin"), "a")
        .await
        .expect_err("an operator as a");
    assert_eq!(e.code(), tonic::Code::PermissionDenied, "{e:?}");
    assert!(!hub.attached("b"), "b never attached");
    std::fs::remove_dir_all(&dir).expect("cleanup");
}

/// The commands on a plaintext stream attached as `host`, with
/// `Hello.probe_plans` as given.
async fn attach_plain(
    addr: std::net::SocketAddr,
    host: &str,
    plans: bool,
) -> (Streaming<Command>, mpsc::UnboundedSender<AgentReport>) {
    let mut last = None;
    for _ in 0..50 {
        match connect(&format!("http://{addr}"), None).await {
            Ok(ch) => {
                let (tx, rx) = mpsc::unbounded_channel();
                let mut h = hello(host);
                if let Some(agent_report::Body::Hello(x)) = &mut h.body {
                    x.probe_plans = plans;
                }
                tx.send(h).expect("queued");
                let s = ControllerClient::new(ch)
                    .attach(tokio_stream::wrappers::UnboundedReceiverStream::new(rx))
                    .await
                    .expect("attach")
                    .into_inner();
                return (s, tx);
            }
            Err(e) => last = Some(e),
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("no server: {last:?}");
}

/// Serves `hub` in plaintext on a free loopback port.
fn serve_plain(hub: &Hub) -> std::net::SocketAddr {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("port");
    let addr = l.local_addr().expect("addr");
    drop(l);
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(ControllerServer::new(hub.clone()))
            .serve(addr),
    );
    addr
}

/// The next probe plan on `s` within 2 s (beats skipped); `None`: none came.
async fn next_plan(s: &mut Streaming<Command>) -> Option<Vec<String>> {
    let until = tokio::time::Instant::now() + Duration::from_secs(2);
    loop {
        let c = tokio::time::timeout_at(until, s.message()).await.ok()?;
        match c.expect("stream").expect("open").body {
            Some(command::Body::ProbeTargets(p)) => {
                return Some(p.targets.into_iter().map(|t| t.name).collect())
            }
            _ => continue,
        }
    }
}

#[tokio::test]
async fn probe_plans_go_to_agents_that_take_them_when_they_change() {
    let (hub, _observed) = Hub::new(Arc::new(|| Some(Token(7))));
    let addr = serve_plain(&hub);
    let target = |n: &str| ProbeTarget {
        name: n.into(),
        addr: "198.18.0.4:7".into(),
    };
    let plans = |a: &[&str], b: &[&str]| -> crate::probes::Plans {
        [
            ("a".to_string(), a.iter().map(|n| target(n)).collect()),
            ("b".to_string(), b.iter().map(|n| target(n)).collect()),
        ]
        .into_iter()
        .collect()
    };
    hub.set_probe_plans(Token(7), plans(&["host:b"], &["host:a"]));
    let (mut a, _ta) = attach_plain(addr, "a", true).await;
    let (mut b, _tb) = attach_plain(addr, "b", false).await;
    assert_eq!(
        next_plan(&mut a).await,
        Some(vec!["host:b".to_string()]),
        "on attach"
    );
    assert!(hub.wants_plans());
    // The same plan again: nothing; a's list changes: a gets it.
    hub.set_probe_plans(Token(7), plans(&["host:b"], &["host:a", "unit:u1"]));
    hub.set_probe_plans(
        Token(7),
        plans(&["host:b", "unit:u1"], &["host:a", "unit:u1"]),
    );
    assert_eq!(
        next_plan(&mut a).await,
        Some(vec!["host:b".to_string(), "unit:u1".to_string()]),
        "only the change"
    );
    // b's Hello did not ask for plans: it gets none.
    assert_eq!(next_plan(&mut b).await, None);
}

#[tokio::test]
async fn outcomes_in_a_heartbeat_are_dated_by_how_long_they_waited() {
    let (hub, mut observed) = Hub::new(Arc::new(|| Some(Token(7))));
    let addr = serve_plain(&hub);
    let (mut s, tx) = attach_plain(addr, "a", false).await;
    // The leader's first beat says it takes outcomes in heartbeats.
    let c = tokio::time::timeout(Duration::from_secs(2), s.message())
        .await
        .expect("a beat")
        .expect("stream")
        .expect("open");
    assert!(
        matches!(c.body, Some(command::Body::Beat(b)) if b.takes_measurements),
        "{:?}",
        c.body
    );
    let m = |target: &str, ok: bool, waited_ms: u32| v1::Measurement {
        from: "a".into(),
        target: target.into(),
        ok,
        waited_ms,
        ..v1::Measurement::default()
    };
    let sent = Instant::now();
    tx.send(AgentReport {
        body: Some(agent_report::Body::Heartbeat(v1::Heartbeat {
            seq: 1,
            sent_unix_ms: 0,
            measurements: vec![m("host:b", true, 300), m("host:c", false, 0)],
        })),
    })
    .expect("sent");
    let mut got = Vec::new();
    while got.len() < 2 {
        let o = tokio::time::timeout(Duration::from_secs(2), observed.recv())
            .await
            .expect("observed")
            .expect("open");
        got.push(o);
    }
    let arrived = Instant::now();
    assert_eq!(
        got.iter().map(|o| o.what.clone()).collect::<Vec<_>>(),
        vec![
            Measurement::Probe {
                from: Vantage::Agent(HostId::new("a")),
                to: Target::Host(HostId::new("b")),
                ok: true
            },
            Measurement::Probe {
                from: Vantage::Agent(HostId::new("a")),
                to: Target::Host(HostId::new("c")),
                ok: false
            },
        ],
        "in the order the agent had them"
    );
    // The answer waited 300 ms in its agent: dated that much before the
    // heartbeat's arrival; the miss went at once.
    assert!(got[0].at + Duration::from_millis(300) <= arrived);
    assert!(got[0].at + Duration::from_millis(300) >= sent);
    assert!(got[1].at >= sent);
    assert!(hub.attached("a"), "the heartbeat counts as one");
}
