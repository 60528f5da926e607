//! Idempotency keys for actix-web: idemkey's layer as an actix middleware.
//!
//! [`Idempotency`] wraps a resource or a scope in one of idemkey's tower layers, so an actix
//! application gets what an axum one gets, answer for answer: the key scoped to (actor,
//! operation, key), the request fingerprinted, the first result stored and replayed with
//! `Idempotent-Replayed: true`, a reused key refused (422 `key-reused`), concurrent
//! duplicates executed once (409 `request-in-flight` with `Retry-After`), every problem as
//! `application/problem+json`. Both modes:
//!
//! - **lease mode**, `IdempotencyLayer` on any store (SQLite, PostgreSQL, MySQL, Redis):
//!   the handler runs under a claim and its response is stored afterwards; made
//!   `transactional()`, it offers a keyed request the [`Tx`] its record completes in;
//! - **atomic mode** (feature `sqlx`), `AtomicIdempotencyLayer`: the claim, the handler's
//!   writes on [`Tx`] and the stored response commit in one database transaction.
//!
//! Authentication runs outside it and puts an [`Actor`] in the request's extensions.
//!
//! ```no_run
//! use actix_web::{App, HttpMessage, HttpResponse, HttpServer, web};
//! use actix_web::dev::Service as _;
//! use idemkey_actix::{Actor, Config, Idempotency, IdempotencyLayer, Tx};
//! use idemkey_sqlx::SqliteStore;
//!
//! async fn create(mut tx: Tx<sqlx::Sqlite>, body: web::Bytes) -> HttpResponse {
//!     let id = uuid::Uuid::new_v4().to_string();
//!     match sqlx::query("INSERT INTO orders (id, body) VALUES (?, ?)")
//!         .bind(&id)
//!         .bind(body.to_vec())
//!         .execute(&mut *tx)
//!         .await
//!     {
//!         Ok(_) => HttpResponse::Created().json(serde_json::json!({ "id": id })),
//!         Err(_) => HttpResponse::InternalServerError().finish(),
//!     }
//! }
//!
//! # async fn run() -> std::io::Result<()> {
//! let store = SqliteStore::connect("sqlite://orders.db").await.expect("store");
//! HttpServer::new(move || {
//!     let layer = IdempotencyLayer::with_config(store.clone(), Config::default()).transactional();
//!     App::new().service(
//!         web::resource("/orders")
//!             .wrap(Idempotency::new(layer))
//!             // Outside the middleware (actix runs the last `wrap` first): who is asking.
//!             .wrap_fn(|request, service| {
//!                 request.extensions_mut().insert(Actor::new("tenant-42"));
//!                 service.call(request)
//!             })
//!             .route(web::post().to(create)),
//!     )
//! })
//! .bind("127.0.0.1:8080")?
//! .run()
//! .await
//! # }
//! ```
//!
//! The operation is, by default, the method and the request's path: name it with
//! `Config::operation` for a route with parameters (`/orders/{id}/refunds`), whose paths
//! differ. A handler reports a rejection decided before it did anything by putting
//! [`NotExecuted`] in its response's extensions (`response.extensions_mut().insert(...)`),
//! and, in atomic mode, a database error by putting its `DbError` there, so the layer
//! re-runs it after a serialization failure.
//!
//! How it works: the layer's work runs in tasks of its own, while actix's services stay on
//! their worker thread; the [`Bridge`] hands the layer's calls of the handler to a task on
//! the worker that holds the request.

#![cfg_attr(docsrs, feature(doc_cfg))]

mod bridge;
mod convert;
mod extract;
mod middleware;
mod problem;

pub use bridge::Bridge;
pub use convert::RequestBody;
#[cfg(feature = "sqlx")]
pub use extract::Tx;
pub use extract::{Keys, claim};
pub use idemkey_tower::{Actor, Config, IdempotencyLayer, NotExecuted};
pub use middleware::{Idempotency, IdempotencyMiddleware};
pub use problem::problem_response;

/// Atomic mode's layer and what a handler reports with (`idemkey_tower::atomic`).
#[cfg(feature = "sqlx")]
pub mod atomic {
    pub use idemkey_tower::atomic::{AtomicIdempotencyLayer, DbError, Strategy};
}
