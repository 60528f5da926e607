//! [`Proxy`]: its service, its listener with graceful shutdown, and its admin routes and
//! listener.

use std::future::Future;
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{any_service, get};
use idemkey_core::{Key, Operation, Scope, Store};
use idemkey_server::Limits;
use idemkey_tower::{Executions, Sweeper};
use tokio::net::TcpListener;

use crate::builder::ProxyBuilder;
use crate::routes::ProxyService;
use crate::upstream::Upstream;

/// Idempotency keys in front of an upstream: lease mode over any [`Store`].
#[derive(Debug)]
pub struct Proxy<S> {
    pub(crate) store: S,
    pub(crate) service: ProxyService,
    pub(crate) executions: Executions,
    pub(crate) retention: Duration,
}

impl<S: Store> Proxy<S> {
    /// A builder of the proxy that forwards to `upstream` and keeps its records in `store`.
    pub fn builder(upstream: Upstream, store: S) -> ProxyBuilder<S> {
        ProxyBuilder::new(upstream, store)
    }

    /// The proxy as a tower service: each request of a covered route is recorded, the rest
    /// are forwarded unrecorded.
    pub fn service(&self) -> ProxyService {
        self.service.clone()
    }

    /// Serves clients on `listener` within `limits`, sweeping expired records, until
    /// `shutdown` completes; then lets recorded requests whose clients left store their
    /// answers, and stops the sweeper.
    pub async fn serve(
        self,
        listener: TcpListener,
        limits: Limits,
        shutdown: impl Future<Output = ()>,
    ) {
        // Every path reaches the proxy's service as a route, not a fallback: the layer
        // passes requests that reached no route through unrecorded.
        let app = Router::new()
            .route("/", any_service(self.service.clone()))
            .route("/{*path}", any_service(self.service));
        let every = (self.retention / 10).clamp(Duration::from_secs(1), Duration::from_secs(60));
        let sweeper = Sweeper::spawn(self.store, every);
        idemkey_server::serve(listener, app, limits, shutdown).await;
        self.executions.wait().await;
        sweeper.stop().await;
    }

    /// Serves [`admin`](Self::admin)'s routes on `listener` until `shutdown` completes,
    /// through the same bounded accept loop as [`serve`](Self::serve) (a header timeout, a
    /// body timeout and a connection cap of the admin's own, from `limits`): a client that
    /// sends half a request, or holds idle connections, cannot keep the admin's sockets.
    pub fn serve_admin<F>(
        &self,
        listener: TcpListener,
        metrics: F,
        limits: Limits,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> impl Future<Output = ()> + Send + 'static
    where
        F: Fn() -> String + Clone + Send + Sync + 'static,
    {
        idemkey_server::serve(listener, self.admin(metrics), limits, shutdown)
    }

    /// The admin routes, apart from the upstream's paths: `/healthz` (the store answers)
    /// and `/metrics` (what `metrics` renders, such as a Prometheus exposition).
    pub fn admin<F>(&self, metrics: F) -> Router
    where
        F: Fn() -> String + Clone + Send + Sync + 'static,
    {
        Router::new()
            .route("/healthz", get(healthz::<S>))
            .route("/metrics", get(move || async move { metrics() }))
            .with_state(self.store.clone())
    }
}

/// A lookup of a scope no request can have: the store answers, or the proxy is unhealthy.
async fn healthz<S: Store>(State(store): State<S>) -> Response {
    let Ok(key) = "healthz".parse::<Key>() else {
        return StatusCode::INTERNAL_SERVER_ERROR.into_response();
    };
    let probe = Scope::new("", &Operation::new("healthz", ""), key);
    match store.lookup(&probe).await {
        Ok(_) => (StatusCode::OK, "ok\n").into_response(),
        Err(error) => {
            tracing::warn!(%error, "health check failed");
            (StatusCode::SERVICE_UNAVAILABLE, "store unavailable\n").into_response()
        }
    }
}
