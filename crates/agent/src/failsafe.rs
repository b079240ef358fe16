//! The failsafe's I/O: what lets a host keep its units through an etcd
//! outage (the rule and its safety argument are in [`crate::watchdog`]; the
//! decisions are the core's).
//!
//! - [`serve`]: the `holdfast.control.v1.Agent` service each host agent
//!   offers on the management network (`--failsafe-listen`). An ask goes
//!   to the agent's loop, where the core answers it
//!   ([`crate::core::AgentInput::FailsafeAsked`]).
//! - [`round`]: the round an agent with late renewals sends to every other
//!   host agent at once, each call bounded by one renewal period. It is
//!   confirmed only when every one of them agreed.
//! - [`Peers`]: the other host agents and where they answer, read from
//!   etcd while it works (each `agents/<host>` record carries its agent's
//!   `failsafe` address). A host agent that serves no failsafe is still a
//!   peer: it cannot agree, so no round is confirmed.
//! - With mutual TLS (`--tls-*`, issue 30) the service takes only clients
//!   with a certificate from the CA, and an ask must name the host its
//!   agent certificate names (refused with `PERMISSION_DENIED` and logged,
//!   "failsafe ask refused", otherwise); the rounds present this agent's
//!   certificate and trust only agents' (`agent.holdfast`).
//!
//! # Known issues
//! - The peers are those registered when etcd last answered. A host whose
//!   agent registers while this one is cut off from etcd (and only then)
//!   is not asked: if the controller moved units onto it, a partition that
//!   kept every other host from etcd could leave two primaries. Patroni's
//!   failsafe mode has the same bound.
//! - One unreachable host agent (a dead host) during an etcd outage
//!   confirms no round: the other hosts then fence on the usual deadline.

use holdfast_control_api::tls::{check_claim, connect, Peer, Role};
use holdfast_control_api::v1::agent_client::AgentClient;
use holdfast_control_api::v1::agent_server::{Agent, AgentServer};
use holdfast_control_api::v1::{FailsafeAnswer, FailsafeAsk};
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;
use tokio::sync::{mpsc, oneshot};
use tonic::transport::{ClientTlsConfig, ServerTlsConfig};
use tonic::{Request, Response, Status};

/// The other host agents, by host: where each serves the failsafe, if it
/// does.
pub type Peers = BTreeMap<String, Option<String>>;

pub use holdfast_etcd::AgentRecord;

/// The peers of `me` among the `agents/` records.
pub fn peers(me: &str, records: Vec<(String, AgentRecord)>) -> Peers {
    records
        .into_iter()
        .filter(|(_, r)| r.host != me)
        .map(|(_, r)| (r.host, r.failsafe))
        .collect()
}

/// An ask from another agent, for the loop; the core's answer goes back on
/// `reply` as (agree, promise in ms).
pub struct Asked {
    pub from: String,
    pub units: Vec<String>,
    pub reply: oneshot::Sender<(bool, u64)>,
}

struct Service {
    host: String,
    asks: mpsc::UnboundedSender<Asked>,
    /// Client certificates required (then an ask's host is checked).
    tls: bool,
}

#[tonic::async_trait]
impl Agent for Service {
    async fn failsafe(
        &self,
        req: Request<FailsafeAsk>,
    ) -> Result<Response<FailsafeAnswer>, Status> {
        let peer = Peer::of(&req, self.tls);
        let ask = req.into_inner();
        if let Err(r) = check_claim(&peer, Role::Agent, &ask.host) {
            tracing::warn!(cert = %peer, claimed = %ask.host, error = %r, "failsafe ask refused");
            return Err(Status::permission_denied(r.to_string()));
        }
        let (reply, answer) = oneshot::channel();
        self.asks
            .send(Asked {
                from: ask.host,
                units: ask.units,
                reply,
            })
            .map_err(|_| Status::unavailable("the agent is stopping"))?;
        let (agree, promise_ms) = answer
            .await
            .map_err(|_| Status::unavailable("the agent is stopping"))?;
        Ok(Response::new(FailsafeAnswer {
            host: self.host.clone(),
            agree,
            promise_ms,
        }))
    }
}

/// Serves the agents' failsafe service on `addr` until the process ends
/// (with `tls`, only to clients with a certificate from its CA).
pub fn serve(
    addr: SocketAddr,
    host: String,
    asks: mpsc::UnboundedSender<Asked>,
    tls: Option<ServerTlsConfig>,
) {
    tokio::spawn(async move {
        let svc = AgentServer::new(Service {
            host,
            asks,
            tls: tls.is_some(),
        });
        let mut builder = tonic::transport::Server::builder();
        if let Some(t) = tls {
            builder = match builder.tls_config(t) {
                Ok(b) => b,
                Err(e) => {
                    tracing::error!(%addr, error = %e, "failsafe service's TLS");
                    return;
                }
            };
        }
        if let Err(e) = builder.add_service(svc).serve(addr).await {
            tracing::error!(%addr, error = %e, "failsafe service stopped");
        }
    });
}

/// Asks every peer at once; `Ok` when every one agreed within `timeout`,
/// else why not (the first peer that did not).
pub async fn round(
    me: String,
    peers: Peers,
    units: Vec<String>,
    timeout: Duration,
    tls: Option<ClientTlsConfig>,
) -> Result<(), String> {
    let asks = peers.into_iter().map(|(host, addr)| {
        let tls = tls.clone();
        let ask = FailsafeAsk {
            host: me.clone(),
            units: units.clone(),
        };
        async move {
            let Some(addr) = addr else {
                return Err(format!("{host} serves no failsafe"));
            };
            let call = async {
                let mut c = connect(&addr, tls.as_ref())
                    .await
                    .map(AgentClient::new)
                    .map_err(|e| e.to_string())?;
                c.failsafe(ask)
                    .await
                    .map(Response::into_inner)
                    .map_err(|s| s.message().to_string())
            };
            match tokio::time::timeout(timeout, call).await {
                Ok(Ok(a)) if a.agree => Ok(()),
                Ok(Ok(_)) => Err(format!("{host} renews its lease")),
                Ok(Err(e)) => Err(format!("{host}: {e}")),
                Err(_) => Err(format!("{host}: no answer within {timeout:?}")),
            }
        }
    });
    // Concurrently; a task that died is a peer that did not agree.
    let tasks: Vec<_> = asks.map(tokio::spawn).collect();
    for t in tasks {
        t.await.map_err(|e| format!("failsafe ask: {e}"))??;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn peers_are_the_other_hosts_with_their_addresses() {
        let rec = |h: &str, a: Option<&str>| {
            (
                h.to_string(),
                AgentRecord {
                    schema: 1,
                    host: h.into(),
                    failsafe: a.map(str::to_string),
                    version: String::new(),
                    domain: None,
                    probe_addr: None,
                },
            )
        };
        let p = peers(
            "a",
            vec![
                rec("a", Some("10.0.0.1:50052")),
                rec("b", Some("10.0.0.2:50052")),
                rec("c", None),
            ],
        );
        assert_eq!(
            p.into_iter().collect::<Vec<_>>(),
            vec![
                ("b".to_string(), Some("10.0.0.2:50052".to_string())),
                ("c".to_string(), None)
            ]
        );
    }

    /// A round against real services on loopback: every peer agreeing
    /// confirms it; one that disagrees, serves nothing or is not there
    /// refuses it.
    #[tokio::test]
    async fn a_round_is_confirmed_only_when_every_peer_agrees() {
        let mut addrs = Vec::new();
        for (i, agree) in [true, true, false].into_iter().enumerate() {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            let addr = l.local_addr().unwrap();
            drop(l);
            let (tx, mut rx) = mpsc::unbounded_channel::<Asked>();
            serve(addr, format!("p{i}"), tx, None);
            tokio::spawn(async move {
                while let Some(a) = rx.recv().await {
                    assert_eq!(a.from, "me");
                    assert_eq!(a.units, vec!["edge-1".to_string()]);
                    let _ = a.reply.send((agree, 3000));
                }
            });
            addrs.push(addr.to_string());
        }
        let t = Duration::from_secs(2);
        let units = vec!["edge-1".to_string()];
        let ask = |p: &[(&str, Option<&String>)]| {
            let peers: Peers = p.iter().map(|(h, a)| (h.to_string(), a.cloned())).collect();
            round("me".into(), peers, units.clone(), t, None)
        };
        let mut ok = false;
        for _ in 0..50 {
            ok = ask(&[("p0", Some(&addrs[0])), ("p1", Some(&addrs[1]))])
                .await
                .is_ok();
            if ok {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert!(ok, "two agreeing peers confirm the round");
        let e = ask(&[("p0", Some(&addrs[0])), ("p2", Some(&addrs[2]))])
            .await
            .unwrap_err();
        assert!(e.contains("p2 renews"), "{e}");
        let e = ask(&[("p0", Some(&addrs[0])), ("p3", None)])
            .await
            .unwrap_err();
        assert!(e.contains("serves no failsafe"), "{e}");
        let gone = "127.0.0.1:1".to_string();
        assert!(ask(&[("p0", Some(&addrs[0])), ("p4", Some(&gone))])
            .await
            .is_err());
        assert!(
            ask(&[]).await.is_ok(),
            "no other host agent: nobody could start the units"
        );
    }

    /// With mutual TLS: an agent's certificate asks for its own host only;
    /// a plaintext client and a certificate of another CA are refused.
    #[tokio::test]
    async fn with_tls_an_ask_names_the_host_of_its_certificate() {
        use holdfast_control_api::certs::{init, CertPlan};
        use holdfast_control_api::tls::{Identity, Role, Tls, TlsFiles};
        let dir = std::env::temp_dir().join(format!("hf-failsafe-tls-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let plan = CertPlan {
            hosts: vec!["a".into(), "p".into()],
            units: vec!["u".into()],
            days: 1,
            ..CertPlan::default()
        };
        init(&dir, &plan).unwrap();
        let other = dir.join("other");
        init(&other, &plan).unwrap();
        let files = |d: &std::path::Path, r: Role, n: &str| {
            Tls::load(&TlsFiles::in_dir(d, &Identity::new(r, n).unwrap())).unwrap()
        };
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        drop(l);
        let (tx, mut rx) = mpsc::unbounded_channel::<Asked>();
        serve(
            addr,
            "p".into(),
            tx,
            Some(files(&dir, Role::Agent, "p").server()),
        );
        tokio::spawn(async move {
            while let Some(a) = rx.recv().await {
                let _ = a.reply.send((true, 3000));
            }
        });
        let t = Duration::from_secs(2);
        let peers: Peers = [("p".to_string(), Some(addr.to_string()))].into();
        let ask = |me: &str, tls: Option<ClientTlsConfig>| {
            round(me.into(), peers.clone(), vec!["u".into()], t, tls)
        };
        let a = files(&dir, Role::Agent, "a");
        let mut ok = Err(String::new());
        for _ in 0..50 {
            ok = ask("a", Some(a.client(Role::Agent))).await;
            if ok.is_ok() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert_eq!(ok, Ok(()), "agent a asking as a");
        let e = ask("b", Some(a.client(Role::Agent))).await.unwrap_err();
        assert!(
            e.contains("certificate agent:a may not act as agent b"),
            "{e}"
        );
        let u = files(&dir, Role::Unit, "u");
        let e = ask("u", Some(u.client(Role::Agent))).await.unwrap_err();
        assert!(e.contains("is not of role agent"), "{e}");
        assert!(ask("a", None).await.is_err(), "plaintext");
        let stranger = files(&other, Role::Agent, "a");
        assert!(
            ask("a", Some(stranger.client(Role::Agent))).await.is_err(),
            "a certificate of another CA"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
