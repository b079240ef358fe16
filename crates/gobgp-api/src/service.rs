//! The tonic service (`apipb.GobgpApi`) over a [`Backend`], and the server.
//!
//! Served RPCs: `GetBgp`, `ListPeer`, `ResetPeer`, `ListPath` (GLOBAL,
//! ADJ_IN, ADJ_OUT; exact prefix or address lookups), `AddPath`,
//! `DeletePath` (GLOBAL), `WatchEvent` (table filter BEST, with `init`
//! for `--current`). Any other method answers `UNIMPLEMENTED` with a
//! message naming it ([`Named`] rewrites the generated stubs' generic
//! text).
//!
//! A `WatchEvent` subscriber reads from a bounded channel the backend
//! fills without waiting; a subscriber that falls behind is dropped by the
//! backend (its stream ends) so that it never slows route processing.
//!
//! # Known issues
//! - `ListPath` with `longer-prefixes` / `shorter-prefixes` lookups is
//!   refused (INVALID_ARGUMENT); exact prefixes and addresses work.
//! - `AddPath` returns no UUID: `DeletePath` by UUID (`gobgp global rib
//!   del all`) is refused; delete by prefix.

use crate::apipb::gobgp_api_server::{GobgpApi, GobgpApiServer};
use crate::apipb::{
    self, list_path_request, table_lookup_prefix, watch_event_request, watch_event_response,
    AddPathRequest, AddPathResponse, DeletePathRequest, GetBgpRequest, GetBgpResponse,
    ListPathRequest, ListPathResponse, ListPeerRequest, ListPeerResponse, Path, ResetPeerRequest,
    TableType, WatchEventRequest, WatchEventResponse,
};
use crate::convert;
use holdfast_api::{Body, NeighborInfo, Request, Response, RibEntry, RibTable};
use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::codegen::{http, BoxFuture, Context, Poll, Service};
use tonic::server::NamedService;
use tonic::{Code, Status};

/// One change of a prefix's best path: its new best route, or `None`
/// when it has none any more.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BestChange {
    pub prefix: String,
    pub route: Option<RibEntry>,
}

/// What the service needs from the daemon.
pub trait Backend: Send + Sync + 'static {
    /// Serves one control request as the control socket would.
    fn request(&self, req: Request) -> impl Future<Output = Response> + Send;
    /// Subscribes to the default instance's best-path changes. The
    /// channel is bounded and filled without waiting: the stream ends when
    /// the subscriber fell behind (or the daemon stops).
    fn watch_best(
        &self,
    ) -> impl Future<Output = Result<mpsc::Receiver<Vec<BestChange>>, String>> + Send;
}

/// The service over backend `B`.
pub struct GoBgp<B> {
    backend: Arc<B>,
}

impl<B> GoBgp<B> {
    pub fn new(backend: Arc<B>) -> Self {
        GoBgp { backend }
    }
}

type BoxStream<T> = Pin<Box<dyn tokio_stream::Stream<Item = Result<T, Status>> + Send>>;

fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}

fn internal(e: impl std::fmt::Display) -> Status {
    Status::internal(e.to_string())
}

impl<B: Backend> GoBgp<B> {
    async fn call(&self, req: Request) -> Result<Body, Status> {
        self.backend
            .request(req)
            .await
            .into_result()
            .map_err(|m| Status::new(Code::FailedPrecondition, m))
    }

    /// Withdraws the route `path` names from the default instance (what
    /// `gobgp global rib del` sends, as a withdrawal or a delete).
    async fn del_route(&self, path: &Path) -> Result<(), Status> {
        let prefix =
            convert::path_prefix(path).map_err(|e| Status::invalid_argument(e.to_string()))?;
        self.call(Request::DelRoute {
            instance: None,
            prefix,
        })
        .await?;
        Ok(())
    }

    async fn neighbors(&self) -> Result<Vec<NeighborInfo>, Status> {
        match self.call(Request::ShowNeighbors).await? {
            Body::Neighbors(v) => Ok(v),
            _ => Err(internal("unexpected answer to show_neighbors")),
        }
    }

    async fn local_as(&self) -> Result<(u32, String), Status> {
        match self.call(Request::ShowSummary).await? {
            Body::Summary(s) => Ok((s.asn, s.router_id)),
            _ => Err(internal("unexpected answer to show_summary")),
        }
    }

    async fn rib(
        &self,
        table: RibTable,
        peer: Option<String>,
        prefix: Option<String>,
    ) -> Result<Vec<RibEntry>, Status> {
        let req = Request::ShowRib {
            instance: None,
            prefix,
            peer,
            table,
            limit: None,
        };
        match self.call(req).await? {
            Body::Rib(v) => Ok(v),
            _ => Err(internal("unexpected answer to show_rib")),
        }
    }
}

/// The stream of a list, sent at once.
fn stream_of<T: Send + 'static>(items: Vec<T>) -> BoxStream<T> {
    Box::pin(tokio_stream::iter(items.into_iter().map(Ok)))
}

#[tonic::async_trait]
impl<B: Backend> GobgpApi for GoBgp<B> {
    async fn get_bgp(
        &self,
        _r: tonic::Request<GetBgpRequest>,
    ) -> Result<tonic::Response<GetBgpResponse>, Status> {
        let (asn, id) = self.local_as().await?;
        Ok(tonic::Response::new(GetBgpResponse {
            global: Some(convert::global(asn, &id)),
        }))
    }

    async fn list_peer(
        &self,
        r: tonic::Request<ListPeerRequest>,
    ) -> Result<tonic::Response<BoxStream<ListPeerResponse>>, Status> {
        let want = r.into_inner().address;
        let now = now();
        let peers: Vec<ListPeerResponse> = self
            .neighbors()
            .await?
            .iter()
            .filter(|n| want.is_empty() || n.address == want)
            .map(|n| ListPeerResponse {
                peer: Some(convert::peer(n, now)),
            })
            .collect();
        Ok(tonic::Response::new(stream_of(peers)))
    }

    async fn reset_peer(
        &self,
        r: tonic::Request<ResetPeerRequest>,
    ) -> Result<tonic::Response<()>, Status> {
        let r = r.into_inner();
        if r.soft {
            return Err(Status::unimplemented(
                "holdfastd does not implement a soft reset over the GoBGP API (a ROUTE-REFRESH is sent by `clear … soft in` on the peer)",
            ));
        }
        self.call(Request::NeighborReset { address: r.address })
            .await?;
        Ok(tonic::Response::new(()))
    }

    async fn list_path(
        &self,
        r: tonic::Request<ListPathRequest>,
    ) -> Result<tonic::Response<BoxStream<ListPathResponse>>, Status> {
        let r = r.into_inner();
        let table = match TableType::try_from(r.table_type) {
            Ok(TableType::Global) => RibTable::Loc,
            Ok(TableType::AdjIn) => RibTable::In,
            Ok(TableType::AdjOut) => RibTable::Out,
            _ => {
                return Err(Status::unimplemented(format!(
                    "holdfastd serves ListPath for the GLOBAL, ADJ_IN and ADJ_OUT tables, not {}",
                    r.table_type
                )))
            }
        };
        if r.sort_type != list_path_request::SortType::None as i32
            && r.sort_type != list_path_request::SortType::Prefix as i32
        {
            return Err(Status::invalid_argument("unknown sort type"));
        }
        let peer = match table {
            RibTable::Loc => None,
            _ if r.name.is_empty() => {
                return Err(Status::invalid_argument(
                    "ADJ_IN and ADJ_OUT need the neighbour's address (name)",
                ))
            }
            _ => Some(r.name.clone()),
        };
        let mut entries = Vec::new();
        if r.prefixes.is_empty() {
            entries = self.rib(table, peer, None).await?;
        } else {
            for p in &r.prefixes {
                if p.r#type != table_lookup_prefix::Type::Exact as i32 {
                    return Err(Status::invalid_argument(
                        "holdfastd serves exact prefix and address lookups only",
                    ));
                }
                if p.prefix.contains('/') {
                    entries.extend(
                        self.rib(table, peer.clone(), Some(p.prefix.clone()))
                            .await?,
                    );
                    continue;
                }
                // An address: the routes of the longest prefix covering it.
                let addr: std::net::IpAddr = p.prefix.parse().map_err(|_| {
                    Status::invalid_argument(format!("{}: not a prefix or address", p.prefix))
                })?;
                let all = self.rib(table, peer.clone(), None).await?;
                if let Some(best) = all
                    .iter()
                    .filter_map(|e| convert::covers(&e.prefix, &addr))
                    .max()
                {
                    entries.extend(
                        all.into_iter()
                            .filter(|e| convert::covers(&e.prefix, &addr) == Some(best)),
                    );
                }
            }
        }
        entries.retain(|e| convert::in_family(&e.prefix, r.family.as_ref()));
        let (asn, _) = self.local_as().await?;
        let dests = convert::destinations(&entries, now(), asn).map_err(internal)?;
        let items = dests
            .into_iter()
            .map(|d| ListPathResponse {
                destination: Some(d),
            })
            .collect();
        Ok(tonic::Response::new(stream_of(items)))
    }

    async fn add_path(
        &self,
        r: tonic::Request<AddPathRequest>,
    ) -> Result<tonic::Response<AddPathResponse>, Status> {
        let r = r.into_inner();
        if r.table_type != TableType::Global as i32 {
            return Err(Status::unimplemented(
                "holdfastd adds paths to the GLOBAL table only (no VRF over the GoBGP API)",
            ));
        }
        let path = r
            .path
            .ok_or_else(|| Status::invalid_argument("AddPath without a path"))?;
        if path.is_withdraw {
            self.del_route(&path).await?;
            return Ok(tonic::Response::new(AddPathResponse::default()));
        }
        let route =
            convert::route_spec(&path).map_err(|e| Status::invalid_argument(e.to_string()))?;
        self.call(Request::AddRoute {
            instance: None,
            route,
        })
        .await?;
        Ok(tonic::Response::new(AddPathResponse::default()))
    }

    async fn delete_path(
        &self,
        r: tonic::Request<DeletePathRequest>,
    ) -> Result<tonic::Response<()>, Status> {
        let r = r.into_inner();
        if r.table_type != TableType::Global as i32 {
            return Err(Status::unimplemented(
                "holdfastd deletes paths from the GLOBAL table only",
            ));
        }
        let Some(path) = r.path else {
            return Err(Status::unimplemented(
                "holdfastd deletes paths by prefix only (no UUIDs, no `del all`)",
            ));
        };
        self.del_route(&path).await?;
        Ok(tonic::Response::new(()))
    }

    async fn watch_event(
        &self,
        r: tonic::Request<WatchEventRequest>,
    ) -> Result<tonic::Response<BoxStream<WatchEventResponse>>, Status> {
        let r = r.into_inner();
        if r.peer.is_some() {
            return Err(Status::unimplemented(
                "holdfastd's WatchEvent serves best-path changes (table filter BEST) only, not peer events",
            ));
        }
        let filters = r.table.map(|t| t.filters).unwrap_or_default();
        use watch_event_request::table::filter::Type as F;
        if filters.is_empty() || filters.iter().any(|f| f.r#type != F::Best as i32) {
            return Err(Status::unimplemented(
                "holdfastd's WatchEvent serves the BEST table filter only (not ADJIN or POST_POLICY)",
            ));
        }
        let init = filters.iter().any(|f| f.init);
        let mut changes = self
            .backend
            .watch_best()
            .await
            .map_err(Status::unavailable)?;
        let (asn, _) = self.local_as().await?;
        let mut first = Vec::new();
        if init {
            let mut best = self.rib(RibTable::Loc, None, None).await?;
            best.retain(|e| e.best);
            for e in &best {
                first.push(convert::path(e, now(), asn).map_err(internal)?);
            }
        }
        let (tx, rx) = mpsc::channel::<Result<WatchEventResponse, Status>>(16);
        let table = |paths| WatchEventResponse {
            event: Some(watch_event_response::Event::Table(
                watch_event_response::TableEvent { paths },
            )),
        };
        tokio::spawn(async move {
            if !first.is_empty() && tx.send(Ok(table(first))).await.is_err() {
                return;
            }
            while let Some(batch) = changes.recv().await {
                let now = now();
                let paths: Vec<apipb::Path> = batch
                    .iter()
                    .filter_map(|c| match &c.route {
                        Some(e) => convert::path(e, now, asn).ok(),
                        None => convert::withdrawn_path(&c.prefix, now).ok(),
                    })
                    .collect();
                if !paths.is_empty() && tx.send(Ok(table(paths))).await.is_err() {
                    return;
                }
            }
            tracing::info!("gRPC WatchEvent: the best-path stream ended");
        });
        Ok(tonic::Response::new(Box::pin(ReceiverStream::new(rx))))
    }
}

/// The served methods, for the UNIMPLEMENTED message.
const SERVED: &str =
    "GetBgp, ListPeer, ResetPeer, ListPath, AddPath, DeletePath, WatchEvent (BEST)";

/// Wraps the generated server: an UNIMPLEMENTED answer (a stub, or an
/// unknown method) names the method and what holdfastd serves instead of
/// tonic's generic "Not yet implemented".
#[derive(Clone)]
pub struct Named<S>(pub S);

impl<S: NamedService> NamedService for Named<S> {
    const NAME: &'static str = S::NAME;
}

impl<S, Rq> Service<http::Request<Rq>> for Named<S>
where
    S: Service<
        http::Request<Rq>,
        Response = http::Response<tonic::body::Body>,
        Error = std::convert::Infallible,
    >,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = BoxFuture<Self::Response, Self::Error>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.0.poll_ready(cx)
    }

    fn call(&mut self, req: http::Request<Rq>) -> Self::Future {
        let method = req
            .uri()
            .path()
            .rsplit('/')
            .next()
            .unwrap_or_default()
            .to_string();
        let fut = self.0.call(req);
        Box::pin(async move {
            let mut resp = fut.await?;
            let h = resp.headers_mut();
            let unimplemented = h.get("grpc-status").is_some_and(|v| v.as_bytes() == b"12");
            let generic = h.get("grpc-message").is_none_or(|v| {
                v.as_bytes() == b"Not%20yet%20implemented" || v.as_bytes() == b"Not yet implemented"
            });
            if unimplemented && generic {
                let msg = format!(
                    "holdfastd does not implement GobgpApi/{method} (it serves {SERVED}; neighbours, policies and VRFs are configured in holdfast.toml)"
                );
                if let Ok(v) = http::HeaderValue::from_str(&msg.replace(' ', "%20")) {
                    h.insert("grpc-message", v);
                }
            }
            Ok(resp)
        })
    }
}

/// The certificate and key (PEM) of a TLS listener, and the CA whose
/// client certificates it requires (mutual TLS) when given.
#[derive(Debug, Clone)]
pub struct TlsFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
    pub client_ca: Option<PathBuf>,
}

#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("gRPC listen {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("reading {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("gRPC TLS: {0}")]
    Tls(String),
}

/// Binds `addr` and serves the GoBGP API over `backend` on the current
/// Tokio runtime (plaintext, or TLS with `tls`, requiring a client
/// certificate from `tls.client_ca` when set). Returns the bound
/// address once listening; the server runs until the runtime stops.
pub async fn serve<B: Backend>(
    addr: SocketAddr,
    tls: Option<TlsFiles>,
    backend: Arc<B>,
) -> Result<SocketAddr, ServeError> {
    let mut builder = tonic::transport::Server::builder();
    if let Some(t) = &tls {
        let read = |p: &PathBuf| {
            std::fs::read(p).map_err(|source| ServeError::Read {
                path: p.clone(),
                source,
            })
        };
        let identity = tonic::transport::Identity::from_pem(read(&t.cert)?, read(&t.key)?);
        let mut cfg = tonic::transport::ServerTlsConfig::new().identity(identity);
        if let Some(ca) = &t.client_ca {
            cfg = cfg
                .client_ca_root(tonic::transport::Certificate::from_pem(read(ca)?))
                .client_auth_optional(false);
        }
        builder = builder
            .tls_config(cfg)
            .map_err(|e| ServeError::Tls(e.to_string()))?;
    }
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|source| ServeError::Bind { addr, source })?;
    let bound = listener
        .local_addr()
        .map_err(|source| ServeError::Bind { addr, source })?;
    let svc = Named(GobgpApiServer::new(GoBgp::new(backend)));
    let incoming = tokio_stream::wrappers::TcpListenerStream::new(listener);
    let router = builder.add_service(svc);
    tokio::spawn(async move {
        if let Err(e) = router.serve_with_incoming(incoming).await {
            tracing::error!("gRPC server stopped: {e}");
        }
    });
    tracing::info!(
        addr = %bound,
        tls = tls.is_some(),
        client_certs = tls.as_ref().is_some_and(|t| t.client_ca.is_some()),
        "GoBGP gRPC API listening"
    );
    Ok(bound)
}
