//! What the idempotency layer costs requests that carry no key, measured in-process (no
//! sockets, so nothing but the router's own work is timed): the service's route with the
//! layer against the same route without it, on three handlers — one that does no I/O (the
//! layer's whole overhead shows), and the note's insert under the lease layer and under the
//! atomic layer (whose transaction the handler uses; without the layer the handler opens and
//! commits a transaction of its own, through the store's writer as the layer does).

use std::sync::Arc;
use std::time::SystemTime;

use anyhow::Context;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Extension, Router, middleware};
use bytes::Bytes;
use idemkey_notes::{CreateNote, Note, NotesConfig, NotesDb, idempotency_config};
use idemkey_sqlx::SqlxStore;
use idemkey_tower::atomic::{AtomicIdempotencyLayer, Tx};
use idemkey_tower::{Actor, IdempotencyLayer};
use tower::ServiceExt;

use super::Ctx;
use super::report::{Ratio, WorkloadReport};
use super::runner::{self, Op, Worker};
use idemkey_server::{Database, on_sql_backend};

/// Key-less `POST /v1/notes` requests sent straight into a router.
struct InProcess {
    router: Router,
}

impl Op for InProcess {
    async fn call(&self, _worker: &mut Worker) -> Result<usize, u16> {
        let request = Request::post("/v1/notes")
            .header(header::CONTENT_TYPE, "application/json")
            .body(Body::from(r#"{"title":"layer"}"#))
            .map_err(|_| 0_u16)?;
        let response = match self.router.clone().oneshot(request).await {
            Ok(response) => response,
            Err(never) => match never {},
        };
        let status = response.status();
        // Read the body, as a server would to send it.
        let _ = axum::body::to_bytes(response.into_body(), usize::MAX).await;
        if status == StatusCode::CREATED {
            Ok(0)
        } else {
            Err(status.as_u16())
        }
    }
}

/// Runs the three pairs on the run's database.
pub(crate) async fn layer(ctx: &Ctx) -> anyhow::Result<(WorkloadReport, Vec<Ratio>)> {
    // As in `idemkey serve`: spans at info are enabled, so the layer pays for any it makes.
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::new("info"))
        .with_writer(std::io::sink)
        .try_init();
    let url = ctx
        .database_url
        .as_deref()
        .context("layer needs --database-url when --url is given")?;
    // The layer's pairs run atomic mode too: `open_sql` refuses Redis.
    let database = Database::open_sql(url, true).await?;
    on_sql_backend!(
        database,
        store => pairs(ctx, store).await,
        _ => anyhow::bail!("layer needs a database, not Redis records")
    )
}

async fn pairs<DB: NotesDb>(
    ctx: &Ctx,
    store: SqlxStore<DB>,
) -> anyhow::Result<(WorkloadReport, Vec<Ratio>)> {
    DB::migrate_notes(store.pool()).await?;
    let config = idempotency_config(&NotesConfig {
        optional_key: true,
        ..NotesConfig::default()
    });
    let lease = IdempotencyLayer::with_config(store.clone(), config.clone());
    let atomic = AtomicIdempotencyLayer::with_config(store.clone(), config);
    let routes = [
        (
            "no-I/O handler, lease layer",
            post(noop).layer(lease.clone()),
            post(noop),
        ),
        (
            "insert in its own transaction, lease layer",
            post(insert_in_own_tx::<DB>).layer(lease),
            post(insert_in_own_tx::<DB>),
        ),
        (
            "insert in the layer's transaction, atomic layer",
            post(insert_on_tx::<DB>).layer(atomic),
            post(insert_in_own_tx::<DB>),
        ),
    ];
    let mut workers: Vec<Worker> = (0..ctx.concurrency)
        .map(|id| Worker::new(id, None))
        .collect();
    let mut sides = Vec::new();
    let mut ratios = Vec::new();
    for (name, with, without) in routes {
        let app = |route| {
            Router::new()
                .route("/v1/notes", route)
                .with_state(store.clone())
                .layer(middleware::map_request(authenticate))
        };
        let (with, without) = (
            Arc::new(InProcess { router: app(with) }),
            Arc::new(InProcess {
                router: app(without),
            }),
        );
        let bar = ctx.bar("layer", ctx.rounds);
        let (a, b) =
            runner::pair(&with, &without, &mut workers, ctx.budget, ctx.rounds, &bar).await;
        bar.finish_and_clear();
        let (a, b) = (
            a[0].summary(&format!("{name}: with")),
            b[0].summary(&format!("{name}: without")),
        );
        ratios.push(Ratio::at_least(
            &format!("layer, no key, {name}: with / without (throughput)"),
            a.throughput,
            b.throughput,
            0.97,
        ));
        sides.extend([a, b]);
    }
    store.close().await;
    Ok((WorkloadReport::new("layer", sides), ratios))
}

/// Stands in for the service's bearer authentication, outside the layer as there.
async fn authenticate(mut request: Request) -> Request {
    request.extensions_mut().insert(Actor::new("bench"));
    request
}

fn note(body: &[u8]) -> Option<Note> {
    let input: CreateNote = serde_json::from_slice(body).ok()?;
    Some(Note {
        id: uuid::Uuid::new_v4().to_string(),
        title: input.title.trim().to_owned(),
        created_at: humantime::format_rfc3339_millis(SystemTime::now()).to_string(),
    })
}

fn created(note: &Note) -> Response {
    let location = format!("/v1/notes/{}", note.id);
    (
        StatusCode::CREATED,
        [(header::LOCATION, location)],
        axum::Json(note),
    )
        .into_response()
}

async fn noop(body: Bytes) -> Response {
    match note(&body) {
        Some(note) => created(&note),
        None => StatusCode::BAD_REQUEST.into_response(),
    }
}

async fn insert_on_tx<DB: NotesDb>(
    Extension(actor): Extension<Actor>,
    mut tx: Tx<DB>,
    body: Bytes,
) -> Response {
    let Some(note) = note(&body) else {
        return StatusCode::BAD_REQUEST.into_response();
    };
    match DB::insert_note(&mut tx, actor.as_str(), &note).await {
        Ok(()) => created(&note),
        Err(_) => StatusCode::INTERNAL_SERVER_ERROR.into_response(),
    }
}

async fn insert_in_own_tx<DB: NotesDb>(
    State(store): State<SqlxStore<DB>>,
    Extension(actor): Extension<Actor>,
    body: Bytes,
) -> Response {
    let Some(note) = note(&body) else {
        return StatusCode::BAD_REQUEST.into_response();
    };
    let Ok(mut tx) = store.begin_write().await else {
        return StatusCode::SERVICE_UNAVAILABLE.into_response();
    };
    match DB::insert_note(&mut tx, actor.as_str(), &note).await {
        Ok(()) if tx.commit().await.is_ok() => created(&note),
        _ => StatusCode::INTERNAL_SERVER_ERROR.into_response(),
    }
}
