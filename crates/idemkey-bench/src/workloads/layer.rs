//! What the idempotency layer costs requests that carry no key, measured in-process (no
//! sockets, so nothing but the router's own work is timed): a route with the layer against
//! the same route without it, on three handlers. The first does no I/O, so the layer's whole
//! overhead shows; it stands in for a handler and is the bench's own. The other two are the
//! notes service's own router ([`idemkey_notes::router`]) in lease mode (the note inserted
//! on the store's writer) and in atomic mode (on the layer's transaction), each against the
//! same routes without the layer ([`idemkey_notes::router_without_idempotency`]).

use std::sync::Arc;
use std::time::SystemTime;

use anyhow::Context;
use axum::body::Body;
use axum::extract::Request;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Router, middleware};
use bytes::Bytes;
use idemkey_notes::{CreateNote, Mode, Note, NotesConfig, NotesDb, idempotency_config};
use idemkey_sqlx::SqlxStore;
use idemkey_tower::{Actor, IdempotencyLayer};
use tower::ServiceExt;

use crate::ctx::Ctx;
use crate::harness::report::{Ratio, WorkloadReport};
use crate::harness::runner::{self, Op, Worker};
use crate::targets::{self, Id};
use idemkey_server::{Database, on_sql_backend};

/// The bench's actor and its token, for the notes service's own authentication.
const ACTOR: (&str, &str) = ("bench", "bench-layer");

/// Key-less `POST /v1/notes` requests sent straight into a router.
struct InProcess {
    router: Router,
}

impl Op for InProcess {
    async fn call(&self, _worker: &mut Worker) -> Result<usize, u16> {
        let request = Request::post("/v1/notes")
            .header(header::CONTENT_TYPE, "application/json")
            .header(header::AUTHORIZATION, format!("Bearer {}", ACTOR.1))
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
    let config = |mode| NotesConfig {
        mode,
        optional_key: true,
        tokens: vec![(ACTOR.0.to_owned(), ACTOR.1.to_owned())],
        ..NotesConfig::default()
    };
    let lease =
        IdempotencyLayer::with_config(store.clone(), idempotency_config(&config(Mode::Lease)));
    let bare = || idemkey_notes::router_without_idempotency(store.clone(), config(Mode::Lease));
    let routers = [
        (
            "no-I/O handler, lease layer",
            stand_in(post(noop).layer(lease)),
            stand_in(post(noop)),
        ),
        (
            "insert in its own transaction, lease layer",
            idemkey_notes::router(store.clone(), config(Mode::Lease)),
            bare(),
        ),
        (
            "insert in the layer's transaction, atomic layer",
            idemkey_notes::router(store.clone(), config(Mode::Atomic)),
            bare(),
        ),
    ];
    let mut workers: Vec<Worker> = (0..ctx.concurrency)
        .map(|id| Worker::new(id, None))
        .collect();
    let mut sides = Vec::new();
    let mut ratios = Vec::new();
    for (name, with, without) in routers {
        let (with, without) = (
            Arc::new(InProcess { router: with }),
            Arc::new(InProcess { router: without }),
        );
        let bar = ctx.bar("layer", ctx.rounds);
        let (a, b) =
            runner::pair(&with, &without, &mut workers, ctx.budget, ctx.rounds, &bar).await;
        bar.finish_and_clear();
        let (a, b) = (
            a[0].summary(&format!("{name}: with")),
            b[0].summary(&format!("{name}: without")),
        );
        ratios.push(targets::ratio(
            Id::LayerNoKey,
            &format!("layer, no key, {name}: with / without (throughput)"),
            a.throughput,
            b.throughput,
        ));
        sides.extend([a, b]);
    }
    store.close().await;
    Ok((WorkloadReport::new("layer", sides), ratios))
}

/// The no-I/O handler's route, behind a stand-in for the service's authentication.
fn stand_in(route: axum::routing::MethodRouter) -> Router {
    Router::new()
        .route("/v1/notes", route)
        .layer(middleware::map_request(authenticate))
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
