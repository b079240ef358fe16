//! The control plane's `/metrics` endpoint: a text exposition (whatever
//! `render` returns: the controller replica's or the host agent's
//! Prometheus registry) served at `GET /metrics` with axum over HTTP/1.1.
//!
//! Known issues: plain HTTP only, no TLS or authentication; bind it to a
//! management address.

use std::net::SocketAddr;
use std::sync::Arc;

/// Serves `render()` at `GET /metrics` on `addr` until the task is dropped.
pub async fn serve(
    addr: SocketAddr,
    render: Arc<dyn Fn() -> String + Send + Sync>,
) -> std::io::Result<()> {
    let app = axum::Router::new().route(
        "/metrics",
        axum::routing::get(move || {
            let render = render.clone();
            async move {
                (
                    [(
                        axum::http::header::CONTENT_TYPE,
                        "application/openmetrics-text; version=1.0.0; charset=utf-8",
                    )],
                    render(),
                )
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind(addr).await?;
    axum::serve(listener, app).await
}
