//! Idempotency keys for HTTP APIs: a retry that carries the same `Idempotency-Key` as its
//! original gets the original's response, a key reused for a different request is rejected,
//! and concurrent duplicates produce one execution.
//!
//! One dependency line:
//!
//! ```toml
//! idemkey = { version = "0.1", features = ["axum", "sqlite"] }
//! ```
//!
//! **Lease mode** protects any handler, including ones that call other systems: the request
//! is claimed, the handler runs, its response is stored. A handler that may run again after a
//! crash passes `DerivedKeys::key(..)` to the systems it calls.
//!
//! ```
//! # #[cfg(all(feature = "axum", feature = "sqlite"))]
//! # tokio::runtime::Runtime::new().unwrap().block_on(async {
//! use axum::{Router, body::Body, extract::Request, middleware, routing::post};
//! use idemkey::{Actor, IdempotencyLayer, SqliteStore};
//! use tower::ServiceExt;
//!
//! async fn create_order() -> (http::StatusCode, &'static str) {
//!     (http::StatusCode::CREATED, r#"{"id":"o1"}"#)
//! }
//!
//! // Your authentication, outside the layer, names the actor.
//! async fn authenticate(mut request: Request) -> Request {
//!     request.extensions_mut().insert(Actor::new("tenant-1"));
//!     request
//! }
//!
//! # let dir = tempfile::tempdir()?;
//! # let url = format!("sqlite://{}", dir.path().join("app.db").display());
//! let store = SqliteStore::connect(&url).await?; // e.g. "sqlite://app.db"
//! let app = Router::new()
//!     .route("/orders", post(create_order).layer(IdempotencyLayer::new(store)))
//!     .layer(middleware::map_request(authenticate));
//!
//! let order = || {
//!     Request::post("/orders").header("idempotency-key", "k1").body(Body::empty()).unwrap()
//! };
//! let first = app.clone().oneshot(order()).await?;
//! let retry = app.oneshot(order()).await?;
//! assert_eq!(retry.headers()["idempotent-replayed"], "true");
//! # Ok::<_, Box<dyn std::error::Error>>(())
//! # }).unwrap();
//! ```
//!
//! **Atomic mode** commits the stored response in the same database transaction as the
//! handler's writes: the handler takes the transaction with [`atomic::Tx`].
//!
//! ```
//! # #[cfg(all(feature = "axum", feature = "sqlite"))]
//! # tokio::runtime::Runtime::new().unwrap().block_on(async {
//! use axum::{Router, body::Body, extract::Request, middleware, routing::post};
//! use idemkey::atomic::{AtomicIdempotencyLayer, DbError, Tx};
//! use idemkey::{Actor, SqliteStore, sqlx};
//! use tower::ServiceExt;
//!
//! async fn create_note(mut tx: Tx<sqlx::Sqlite>) -> Result<http::StatusCode, DbError> {
//!     sqlx::query("INSERT INTO notes (title) VALUES ('hello')").execute(&mut *tx).await?;
//!     Ok(http::StatusCode::CREATED)
//! }
//!
//! # async fn authenticate(mut request: Request) -> Request {
//! #     request.extensions_mut().insert(Actor::new("tenant-1"));
//! #     request
//! # }
//! # let dir = tempfile::tempdir()?;
//! # let url = format!("sqlite://{}", dir.path().join("app.db").display());
//! let store = SqliteStore::connect(&url).await?;
//! sqlx::query("CREATE TABLE notes (title TEXT)").execute(store.pool()).await?;
//! let app = Router::new()
//!     .route("/notes", post(create_note).layer(AtomicIdempotencyLayer::new(store)))
//!     .layer(middleware::map_request(authenticate));
//! # let note = || Request::post("/notes").header("idempotency-key", "k1").body(Body::empty()).unwrap();
//! # app.clone().oneshot(note()).await?;
//! # assert_eq!(app.oneshot(note()).await?.headers()["idempotent-replayed"], "true");
//! # Ok::<_, Box<dyn std::error::Error>>(())
//! # }).unwrap();
//! ```
//!
//! What the layer does, request by request, is in [`behaviour`] (cited across the crates as
//! "behaviour §N"); where to put it in an axum application in the repository's `docs/axum.md`.
//! What each problem idemkey answers means, and what to do about it, is in [`problems`]: the
//! page each default problem `type` points at.
//!
//! The building blocks live in their own crates, re-exported here: the protocol
//! (`idemkey-core`) at the root, the layer (`idemkey-tower`) as [`tower`](mod@crate::tower), and
//! the SQL stores (`idemkey-sqlx`) as [`sql`].
//!
//! # Features
#![doc = document_features::document_features!()]
#![cfg_attr(docsrs, feature(doc_cfg))]

pub use idemkey_core::*;

pub mod behaviour;
pub mod problems;

#[cfg(feature = "axum")]
pub use idemkey_tower::{
    Actor, Config, DefaultOperation, Idempotency, IdempotencyLayer, MakeOperation, NotExecuted,
    ResponsePolicy,
};

/// The tower/axum layer and its building blocks (`idemkey-tower`).
#[cfg(feature = "axum")]
pub mod tower {
    pub use idemkey_tower::*;
}

#[cfg(all(feature = "axum", any(feature = "sqlite", feature = "postgres")))]
pub use idemkey_tower::atomic;

/// The SQL stores and atomic mode without the layer (`idemkey-sqlx`).
#[cfg(any(feature = "sqlite", feature = "postgres"))]
pub mod sql {
    pub use idemkey_sqlx::*;
}

#[cfg(feature = "postgres")]
pub use idemkey_sqlx::PgStore;
#[cfg(feature = "sqlite")]
pub use idemkey_sqlx::SqliteStore;
/// The Redis store (`idemkey-redis`): lease mode's records in Redis or Valkey.
#[cfg(feature = "redis")]
pub mod redis {
    pub use idemkey_redis::*;
}
#[cfg(feature = "redis")]
pub use idemkey_redis::RedisStore;
/// The sqlx version the stores are built on, for the handler's own queries.
#[cfg(any(feature = "sqlite", feature = "postgres"))]
pub use sqlx;
