//! The routes and handlers: the notes API of `idemkey serve`, on actix-web.

use std::net::TcpListener;
use std::sync::Arc;
use std::time::Duration;

use actix_web::dev::{Payload, Server};
use actix_web::middleware::from_fn;
use actix_web::{FromRequest, HttpMessage, HttpRequest, HttpResponse, HttpServer, web};
use idemkey_actix::atomic::{AtomicIdempotencyLayer, DbError};
use idemkey_actix::{Actor, Idempotency, IdempotencyLayer, NotExecuted, Tx, claim};
use idemkey_core::Problem;
use idemkey_notes::{
    Mode, Note, NoteList, NotesConfig, NotesDb, Tokens, idempotency_config, parse_note,
};
use idemkey_sqlx::SqlxStore;
use idemkey_tower::Sweeper;
use metrics_exporter_prometheus::PrometheusHandle;
use tower::util::Either;

use crate::auth;

/// The largest request body a handler reads, as axum's default.
const BODY_LIMIT: usize = 2 * 1024 * 1024;

/// What the handlers share.
struct Shared<DB: NotesDb> {
    store: SqlxStore<DB>,
    config: NotesConfig,
    metrics: PrometheusHandle,
}

/// The server on `listener`, not yet running; a sweeper deletes expired records meanwhile.
pub(crate) fn server<DB: NotesDb>(
    store: SqlxStore<DB>,
    config: NotesConfig,
    listener: TcpListener,
    workers: Option<usize>,
) -> anyhow::Result<Server> {
    let metrics = metrics_exporter_prometheus::PrometheusBuilder::new().install_recorder()?;
    let upkeep = metrics.clone();
    actix_web::rt::spawn(async move {
        let mut tick = actix_web::rt::time::interval(Duration::from_secs(5));
        loop {
            tick.tick().await;
            upkeep.run_upkeep();
        }
    });
    let every = (config.retention / 10).clamp(Duration::from_secs(1), Duration::from_secs(60));
    // Runs until the process ends; a sweep is a batch of deletes, safe to cut short.
    let _sweeper = Sweeper::spawn(store.clone(), every);
    let idempotency = idempotency_config(&config);
    // One layer for every worker: one owner, one heartbeat, one set of turns.
    let mode = config.mode;
    let layer = match mode {
        Mode::Lease => Either::Left(
            IdempotencyLayer::with_config(store.clone(), idempotency)
                .with_executions(config.executions.clone())
                .transactional(),
        ),
        Mode::Atomic => Either::Right(
            AtomicIdempotencyLayer::with_config(store.clone(), idempotency)
                .with_executions(config.executions.clone())
                .strategy(config.strategy),
        ),
    };
    let tokens = Tokens::new(&config.tokens);
    let shared = web::Data::from(Arc::new(Shared {
        store,
        config,
        metrics,
    }));
    let mut server = HttpServer::new(move || {
        let authenticate = || {
            let tokens = tokens.clone();
            from_fn(move |request, next| auth::authenticate(tokens.clone(), request, next))
        };
        let notes = web::resource("/v1/notes")
            .route(web::get().to(list::<DB>))
            .route(match mode {
                Mode::Lease => web::post().to(create_lease::<DB>),
                Mode::Atomic => web::post().to(create_atomic::<DB>),
            })
            .wrap(Idempotency::new(layer.clone()))
            .wrap(authenticate());
        actix_web::App::new()
            .app_data(shared.clone())
            .app_data(web::PayloadConfig::new(BODY_LIMIT))
            .service(notes)
            .service(
                web::resource("/v1/notes/{id}")
                    .route(web::get().to(get::<DB>))
                    .wrap(authenticate()),
            )
            .route("/healthz", web::get().to(healthz::<DB>))
            .route("/metrics", web::get().to(render_metrics::<DB>))
            .route("/openapi.json", web::get().to(openapi::<DB>))
    })
    .listen(listener)?;
    if let Some(workers) = workers {
        server = server.workers(workers);
    }
    Ok(server.run())
}

fn actor(request: &HttpRequest) -> Actor {
    // The authentication around every notes route put it there.
    request
        .extensions()
        .get::<Actor>()
        .cloned()
        .unwrap_or_else(|| Actor::new(""))
}

fn content_type(request: &HttpRequest) -> Option<&str> {
    request
        .headers()
        .get(actix_web::http::header::CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
}

fn respond(problem: &Problem) -> HttpResponse {
    idemkey_actix::problem_response(problem)
}

/// A problem decided before anything ran: marked so that the record is not stored.
fn not_executed(problem: &Problem) -> HttpResponse {
    let mut response = respond(problem);
    response.extensions_mut().insert(NotExecuted);
    response
}

fn created(note: &Note) -> HttpResponse {
    HttpResponse::Created()
        .insert_header(("location", format!("/v1/notes/{}", note.id)))
        .json(note)
}

/// Atomic mode: the note is written on the claim's transaction, which the middleware commits
/// with the stored response.
async fn create_atomic<DB: NotesDb>(
    request: HttpRequest,
    mut tx: Tx<DB>,
    body: web::Bytes,
) -> HttpResponse {
    let note = match parse_note(content_type(&request), &body) {
        Ok(note) => note,
        Err(problem) => return not_executed(&problem),
    };
    match DB::insert_note(&mut tx, actor(&request).as_str(), &note).await {
        Ok(()) => created(&note),
        Err(error) => {
            let mut response = respond(&idemkey_notes::internal_problem(&error));
            // So that a serialization failure or a deadlock runs the handler again.
            response.extensions_mut().insert(DbError::from(error));
            response
        }
    }
}

/// Lease mode: a keyed note is written on the transaction its record completes in; a
/// key-less one (`--optional-key`) on the store's writer, autocommitted.
async fn create_lease<DB: NotesDb>(
    request: HttpRequest,
    shared: web::Data<Shared<DB>>,
    body: web::Bytes,
) -> HttpResponse {
    let note = match parse_note(content_type(&request), &body) {
        Ok(note) => note,
        Err(problem) => return not_executed(&problem),
    };
    let actor = actor(&request);
    let stored = if claim(&request).is_some() {
        let mut tx = match Tx::<DB>::from_request(&request, &mut Payload::None).await {
            Ok(tx) => tx,
            Err(rejection) => return rejection.error_response(),
        };
        DB::insert_note_once(&mut tx, actor.as_str(), &note).await
    } else {
        let mut conn = match shared.store.write_conn().await {
            Ok(conn) => conn,
            Err(error) => return not_executed(&idemkey_notes::unavailable_problem(&error)),
        };
        DB::insert_note_once(&mut conn, actor.as_str(), &note).await
    };
    match stored {
        Ok(stored) => created(&stored),
        Err(error) => respond(&idemkey_notes::internal_problem(&error)),
    }
}

/// One note; another actor's note is 404, as if it did not exist.
async fn get<DB: NotesDb>(
    request: HttpRequest,
    shared: web::Data<Shared<DB>>,
    id: web::Path<String>,
) -> HttpResponse {
    let actor = actor(&request);
    match DB::get_note(shared.store.pool(), actor.as_str(), &id).await {
        Ok(Some(note)) => HttpResponse::Ok().json(note),
        Ok(None) => respond(&idemkey_notes::not_found_problem()),
        Err(error) => respond(&idemkey_notes::internal_problem(&error)),
    }
}

/// The actor's notes.
async fn list<DB: NotesDb>(request: HttpRequest, shared: web::Data<Shared<DB>>) -> HttpResponse {
    let actor = actor(&request);
    match DB::list_notes(shared.store.pool(), actor.as_str()).await {
        Ok(notes) => HttpResponse::Ok().json(NoteList { notes }),
        Err(error) => respond(&idemkey_notes::internal_problem(&error)),
    }
}

async fn healthz<DB: NotesDb>(shared: web::Data<Shared<DB>>) -> HttpResponse {
    match DB::ping(shared.store.pool()).await {
        Ok(()) => HttpResponse::Ok().body("ok\n"),
        Err(error) => {
            tracing::warn!(%error, "health check failed");
            HttpResponse::ServiceUnavailable().body("database unavailable\n")
        }
    }
}

async fn render_metrics<DB: NotesDb>(shared: web::Data<Shared<DB>>) -> HttpResponse {
    HttpResponse::Ok()
        .content_type("text/plain; version=0.0.4")
        .body(shared.metrics.render())
}

async fn openapi<DB: NotesDb>(shared: web::Data<Shared<DB>>) -> HttpResponse {
    HttpResponse::Ok().json(idemkey_notes::openapi_document(&shared.config))
}
