//! The reference notes service of idemkey: the seed experiment as a real HTTP API.
//!
//! `POST /v1/notes` creates a note under an `Idempotency-Key`, in atomic mode (the record
//! commits with the note, the default) or lease mode; `GET /v1/notes/{id}` and
//! `GET /v1/notes` read the caller's notes; `/healthz`, `/metrics` and `/openapi.json` serve
//! operations. Bearer tokens name the actor. The exact surface is behaviour [§13](https://docs.rs/idemkey/latest/idemkey/behaviour/index.html#13-the-reference-notes-service).
//!
//! ```no_run
//! use idemkey_notes::{NotesConfig, NotesDb, router};
//! use idemkey_sqlx::SqliteStore;
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let store = SqliteStore::connect("sqlite://notes.db").await?;
//! sqlx::Sqlite::migrate_notes(store.pool()).await?;
//! let config = NotesConfig {
//!     tokens: vec![("alice".into(), "s3cret".into())],
//!     ..NotesConfig::default()
//! };
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:8080").await?;
//! axum::serve(listener, router(store, config)).await?;
//! # Ok(())
//! # }
//! ```

mod auth;
mod bare;
mod config;
mod create;
mod db;
mod openapi;
mod problems;
mod read;
mod service;

use std::sync::Arc;

use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{MethodRouter, get, post};
use axum::{Json, Router, middleware};
use idemkey_core::{Operation, Store};
use idemkey_sqlx::SqlxStore;
use idemkey_tower::atomic::AtomicIdempotencyLayer;
use idemkey_tower::{Config, IdempotencyLayer};
use sqlx::Pool;

pub use auth::Tokens;
pub use bare::router_without_idempotency;
pub use config::{Mode, NotesConfig, RenderMetrics};
pub use create::{CreateNote, MAX_TITLE_CHARS, parse_note};
pub use db::{Note, NotesDb};
pub use openapi::document as openapi_document;
pub use problems::{
    PROBLEM_SLUGS, internal_problem, not_found_problem, unauthorized_problem, unavailable_problem,
    unsupported_media_type_problem, validation_problem,
};
pub use read::NoteList;
pub use service::{Ready, ServiceError, ServiceOptions, serve};

/// The operation every create is recorded under.
pub const CREATE_NOTE: (&str, &str) = ("create-note", "v1");

/// What the handlers share, behind one `Arc`: axum clones the state, and the idempotency
/// layer the route's service, for every request, replays included; one reference count is
/// cheaper than the half dozen of the pools and the store.
pub(crate) struct AppState<DB: NotesDb>(Arc<Shared<DB>>);

/// The fields of [`AppState`].
pub(crate) struct Shared<DB: NotesDb> {
    pool: Pool<DB>,
    /// For lease mode's writes, which run outside the layer's transaction: on SQLite they
    /// must queue for the store's writer like the layer's own.
    store: SqlxStore<DB>,
    /// Whether lease mode's layer offers keyed creates its transaction.
    transactional: bool,
    config: NotesConfig,
}

impl<DB: NotesDb> Clone for AppState<DB> {
    fn clone(&self) -> Self {
        Self(self.0.clone())
    }
}

impl<DB: NotesDb> std::ops::Deref for AppState<DB> {
    type Target = Shared<DB>;

    fn deref(&self) -> &Shared<DB> {
        &self.0
    }
}

/// The idempotency settings of `POST /v1/notes`.
pub fn idempotency_config(config: &NotesConfig) -> Config {
    let idempotency = Config::default()
        // The route declares POST only: a request with another method is answered 405 by
        // the router without touching (or burning) the key.
        .methods([http::Method::POST])
        .require_key(!config.optional_key)
        .operation(|_: &http::request::Parts| Operation::new(CREATE_NOTE.0, CREATE_NOTE.1))
        .retention(config.retention)
        .lease(config.lease);
    let idempotency = match config.owner_grace {
        Some(grace) => idempotency.owner_grace(grace),
        None => idempotency,
    };
    match &config.secret {
        Some(secret) => idempotency.secret(secret.clone()),
        None => idempotency,
    }
}

/// The service's router, on a migrated store (idemkey's records and the `notes` table).
pub fn router<DB: NotesDb>(store: SqlxStore<DB>, config: NotesConfig) -> Router {
    let idempotency = idempotency_config(&config);
    let executions = config.executions.clone();
    let create = match config.mode {
        Mode::Lease if config.separate_completion => {
            return router_with_records(store.clone(), store, config);
        }
        Mode::Lease => post(create::create_lease::<DB>).layer(
            IdempotencyLayer::with_config(store.clone(), idempotency)
                .with_executions(executions)
                .transactional(),
        ),
        Mode::Atomic => {
            let layer = AtomicIdempotencyLayer::with_config(store.clone(), idempotency)
                .with_executions(executions)
                .strategy(config.strategy);
            // Unless told, the layer keeps the database's own default.
            let layer = match config.lookup_first {
                Some(on) => layer.lookup_first(on),
                None => layer,
            };
            post(create::create_atomic::<DB>).layer(layer)
        }
    };
    build(store, (create, config.mode == Mode::Lease), config)
}

/// The service's router in lease mode, whatever `config.mode` says, with the idempotency
/// records kept in `records` (a Redis store, say) and the notes in `store`'s database
/// (behaviour [§13](https://docs.rs/idemkey/latest/idemkey/behaviour/index.html#13-the-reference-notes-service), `--records-url`). Atomic mode has no such form: its records must commit
/// with the notes, in the same database.
pub fn router_with_records<DB: NotesDb, S: Store>(
    store: SqlxStore<DB>,
    records: S,
    mut config: NotesConfig,
) -> Router {
    config.mode = Mode::Lease;
    let layer = IdempotencyLayer::with_config(records, idempotency_config(&config))
        .with_executions(config.executions.clone());
    build(
        store,
        (post(create::create_lease::<DB>).layer(layer), false),
        config,
    )
}

/// The routes around `create`, the `POST /v1/notes` of the configured mode, and whether its
/// layer is lease mode's transactional one.
fn build<DB: NotesDb>(
    store: SqlxStore<DB>,
    (create, transactional): (MethodRouter<AppState<DB>>, bool),
    config: NotesConfig,
) -> Router {
    let tokens = auth::Tokens::new(&config.tokens);
    let state = AppState(Arc::new(Shared {
        pool: store.pool().clone(),
        store,
        transactional,
        config,
    }));
    let v1 = Router::new()
        .route("/v1/notes", create.get(read::list_notes::<DB>))
        .route("/v1/notes/{id}", get(read::get_note::<DB>))
        .route_layer(middleware::from_fn_with_state(tokens, auth::authenticate));
    Router::new()
        .merge(v1)
        .route("/healthz", get(healthz::<DB>))
        .route("/metrics", get(metrics::<DB>))
        .route("/openapi.json", get(openapi_json::<DB>))
        .with_state(state)
}

async fn healthz<DB: NotesDb>(State(state): State<AppState<DB>>) -> Response {
    match DB::ping(&state.pool).await {
        Ok(_) => (StatusCode::OK, "ok\n").into_response(),
        Err(error) => {
            tracing::warn!(%error, "health check failed");
            (StatusCode::SERVICE_UNAVAILABLE, "database unavailable\n").into_response()
        }
    }
}

async fn metrics<DB: NotesDb>(State(state): State<AppState<DB>>) -> Response {
    let text = state
        .config
        .metrics
        .as_ref()
        .map(|render| render())
        .unwrap_or_default();
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], text).into_response()
}

async fn openapi_json<DB: NotesDb>(State(state): State<AppState<DB>>) -> Response {
    Json(openapi::document(&state.config)).into_response()
}
