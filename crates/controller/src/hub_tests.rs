//! The `Attach` service over mutual TLS, on loopback: an agent
//! certificate attaches as its own host only.

use super::*;
use holdfast_control_api::certs::{init, CertPlan};
use holdfast_control_api::tls::{connect, Identity, Tls, TlsFiles};
use holdfast_control_api::v1::controller_client::ControllerClient;
use holdfast_control_api::v1::controller_server::ControllerServer;
use holdfast_control_api::v1::Hello;

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
