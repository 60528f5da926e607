//! `idemkey proxy`: lease mode in front of any HTTP API, in any language, without changing
//! its code (behaviour §14). Composed from the layer and stores the notes service uses; no
//! second protocol.

mod actor;
mod args;
mod config;
mod forward;
mod headers;
mod routes;

use std::io::Write;
use std::net::SocketAddr;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{any_service, get};
use idemkey_core::{Key, Operation, Scope, Store};
use idemkey_tower::{Executions, Sweeper};
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use tokio::net::TcpListener;

pub(crate) use args::ProxyArgs;
use config::ProxyConfig;
use forward::{Forward, Upstream};

use idemkey_server::{Database, RedisSetup, is_redis, open_redis, redact};

/// Starts the proxy and runs it until SIGINT or SIGTERM.
pub(crate) async fn run(args: ProxyArgs) -> anyhow::Result<ExitCode> {
    idemkey_server::init_tracing();
    let file = match &args.config {
        Some(path) => ProxyConfig::load(path)?,
        None => ProxyConfig::default(),
    };
    let upstream = Upstream::parse(&args.upstream)?;
    if let Some(base) = &args.problem_base {
        idemkey_core::problem::set_type_base(base.clone())
            .map_err(|set| anyhow::anyhow!("the problem type base is already {set}"))?;
    }
    let metrics = PrometheusBuilder::new()
        .install_recorder()
        .context("cannot install the metrics recorder")?;
    let proxy = Proxy {
        args,
        file,
        upstream,
        metrics,
    };
    if is_redis(&proxy.args.database_url) {
        let setup = RedisSetup {
            replicas: proxy.args.records_wait_replicas,
            fsync: proxy.args.records_wait_fsync,
            replay_cache: !proxy.args.no_replay_cache,
            tls_ca: proxy.args.records_tls_ca.clone(),
        };
        let records = open_redis(&proxy.args.database_url, setup).await?;
        proxy.run(records).await?;
        return Ok(ExitCode::SUCCESS);
    }
    match Database::open(&proxy.args.database_url, true).await? {
        Database::Sqlite(store) => proxy.run(store).await?,
        Database::Postgres(store) => proxy.run(store).await?,
    }
    Ok(ExitCode::SUCCESS)
}

/// Everything the proxy is started with.
struct Proxy {
    args: ProxyArgs,
    file: ProxyConfig,
    upstream: Upstream,
    metrics: PrometheusHandle,
}

impl Proxy {
    async fn run<S: Store>(self, store: S) -> anyhow::Result<()> {
        let executions = Executions::new();
        let shared = routes::Shared {
            actor: actor::ProxyActor {
                source: self.file.actor.source()?,
                anonymous: self.file.actor.anonymous,
            },
            retention: self.args.retention,
            lease: self.args.lease,
            secret: self.args.secret.as_deref().map(|s| s.as_bytes().into()),
            executions: executions.clone(),
        };
        let forward = Forward::new(
            self.upstream.clone(),
            self.file.upstream.timeout()?,
            self.file.upstream.derived_key_header()?,
            self.file.upstream.release_unknown()?,
        );
        let service = routes::service(&store, &self.file.routes()?, &shared, forward);
        // Every path reaches the proxy's service as a route, not a fallback: the layer
        // passes requests that reached no route through unrecorded.
        let app = Router::new()
            .route("/", any_service(service.clone()))
            .route("/{*path}", any_service(service));
        let listener = bind(self.args.listen).await?;
        let admin_listener = bind(self.args.admin_listen).await?;
        self.announce(listener.local_addr()?, admin_listener.local_addr()?);
        let admin = admin(store.clone(), self.metrics.clone());
        let admin = tokio::spawn(async move {
            let serving = axum::serve(admin_listener, admin)
                .with_graceful_shutdown(idemkey_server::shutdown());
            if let Err(error) = serving.await {
                tracing::error!(%error, "admin listener failed");
            }
        });
        let every =
            (self.args.retention / 10).clamp(Duration::from_secs(1), Duration::from_secs(60));
        let sweeper = Sweeper::spawn(store, every);
        let limits = self.args.connections.limits();
        idemkey_server::serve(listener, app, limits, idemkey_server::shutdown()).await;
        // Claimed requests whose clients left still run: let them store their answers.
        executions.wait().await;
        sweeper.stop().await;
        admin.abort();
        tracing::info!("stopped");
        Ok(())
    }

    fn announce(&self, addr: SocketAddr, admin: SocketAddr) {
        let mut out = std::io::stdout().lock();
        let _ = writeln!(
            out,
            "idemkey proxy: listening on http://{addr}, admin on http://{admin}, forwarding to {} (records in {})",
            self.upstream,
            redact(&self.args.database_url)
        );
        let _ = out.flush();
    }
}

async fn bind(addr: SocketAddr) -> anyhow::Result<TcpListener> {
    TcpListener::bind(addr)
        .await
        .with_context(|| format!("cannot listen on {addr}"))
}

/// The admin listener: `/healthz` (the store answers) and `/metrics`.
fn admin<S: Store>(store: S, metrics: PrometheusHandle) -> Router {
    Router::new()
        .route("/healthz", get(healthz::<S>))
        .route("/metrics", get(move || async move { metrics.render() }))
        .with_state(store)
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
