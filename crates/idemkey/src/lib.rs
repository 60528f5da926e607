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
//! is claimed, the handler runs, its response is stored. The handler may run again for the
//! same request (after a crash, or after a 5xx released the claim), so each call it makes to
//! another system carries a key derived from the request: the handler takes [`Keys`], gets
//! its [`DerivedKeys`] with `keys.get().await` (which waits, the first time, until the claim
//! is on disk) and passes `keys.key("charge")` to the other system's own idempotency
//! mechanism. The layer's settings
//! are a [`Config`], applied with [`IdempotencyLayer::with_config`]; a
//! [`Sweeper`](crate::tower::Sweeper) deletes expired records while the application runs.
//!
//! ```
//! # #[cfg(all(feature = "axum", feature = "sqlite"))]
//! # tokio::runtime::Runtime::new().unwrap().block_on(async {
//! use std::time::Duration;
//!
//! use axum::http::StatusCode;
//! use axum::{Router, body::Body, extract::Request, middleware, routing::post};
//! use idemkey::tower::Sweeper;
//! use idemkey::{Actor, Config, IdempotencyLayer, Keys, SqliteStore};
//! use tower::ServiceExt;
//! # use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
//! # static CHARGES: AtomicUsize = AtomicUsize::new(0);
//!
//! // Stands in for your payment provider's client, which charges once per idempotency key.
//! async fn charge(idempotency_key: String, cents: u64) -> Result<(), std::io::Error> {
//! #   let _ = (idempotency_key, cents, CHARGES.fetch_add(1, SeqCst));
//!     Ok(())
//! }
//!
//! async fn create_order(
//!     keys: Keys,
//! ) -> Result<(StatusCode, &'static str), StatusCode> {
//!     let keys = keys.get().await.map_err(|_| StatusCode::SERVICE_UNAVAILABLE)?;
//!     // The same key on every run of this request, so a second run cannot charge twice.
//!     charge(keys.key("charge"), 4200).await.map_err(|_| StatusCode::BAD_GATEWAY)?;
//!     Ok((StatusCode::CREATED, r#"{"id":"o1"}"#))
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
//! // A duplicate of a request still running waits up to 5 s for its answer (409 by default).
//! let config = Config::default().wait_in_flight(Duration::from_secs(5));
//! let layer = IdempotencyLayer::with_config(store.clone(), config);
//! let app = Router::new()
//!     .route("/orders", post(create_order).layer(layer))
//!     .layer(middleware::map_request(authenticate));
//! // Deletes expired records now and every minute, until stopped or dropped.
//! let sweeper = Sweeper::spawn(store, Duration::from_secs(60));
//!
//! let order = || {
//!     Request::post("/orders").header("idempotency-key", "k1").body(Body::empty()).unwrap()
//! };
//! let first = app.clone().oneshot(order()).await?;
//! let retry = app.oneshot(order()).await?;
//! assert_eq!(first.status(), StatusCode::CREATED);
//! assert_eq!(retry.headers()["idempotent-replayed"], "true");
//! # assert_eq!(CHARGES.load(SeqCst), 1, "charged once");
//! sweeper.stop().await;
//! # Ok::<_, Box<dyn std::error::Error>>(())
//! # }).unwrap();
//! ```
//!
//! **Atomic mode** commits the stored response in the same database transaction as the
//! handler's writes: the handler takes the transaction with [`atomic::Tx`]. Its layer takes
//! the same [`Config`] with [`atomic::AtomicIdempotencyLayer::with_config`] (the lease
//! settings aside), and its records are swept the same way. One store may serve routes of
//! both modes: clone it into each layer and into the one sweeper.
//!
//! ```
//! # #[cfg(all(feature = "axum", feature = "sqlite"))]
//! # tokio::runtime::Runtime::new().unwrap().block_on(async {
//! use axum::http::StatusCode;
//! use axum::{Router, body::Body, extract::Request, middleware, routing::post};
//! use idemkey::atomic::{AtomicIdempotencyLayer, DbError, Tx};
//! use idemkey::{Actor, SqliteStore, sqlx};
//! use tower::ServiceExt;
//!
//! async fn create_note(mut tx: Tx<sqlx::Sqlite>) -> Result<StatusCode, DbError> {
//!     sqlx::query("INSERT INTO notes (title) VALUES ('hello')").execute(&mut *tx).await?;
//!     Ok(StatusCode::CREATED)
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
//! "behaviour §N"). In an axum application, authentication goes outside the layer (it inserts
//! the [`Actor`]), and so do compression (the record keeps the plain body), CORS and timeouts;
//! nesting, fallbacks and `route_layer` are in the repository's `docs/axum.md`. The package's
//! examples are complete programs: `lease_external` (an outside payment service called under
//! a derived key), `atomic_sqlite`, `atomic_postgres`, `plain_tower` (the layer without axum)
//! and `queue_consumer` (atomic mode without HTTP).
//! What each problem idemkey answers means, and what to do about it, is in [`problems`]: the
//! page each default problem `type` points at.
//!
//! The building blocks live in their own crates, re-exported here: the protocol
//! (`idemkey-core`) at the root, the layer (`idemkey-tower`) as [`tower`](mod@crate::tower), and
//! the SQL stores (`idemkey-sqlx`) as [`sql`]. The client half, a reqwest middleware that keys
//! each create request once and retries it safely (`idemkey-reqwest`), is [`client`] with the
//! `client` feature.
//!
//! # Features
#![doc = document_features::document_features!()]
#![cfg_attr(docsrs, feature(doc_cfg))]

pub use idemkey_core::*;

pub mod behaviour;
pub mod problems;

// The README (the crate's page) shows complete programs: compiled here so they stay complete.
#[cfg(all(doctest, feature = "axum", feature = "sqlite"))]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;

#[cfg(feature = "axum")]
pub use idemkey_tower::{
    Actor, Config, DefaultOperation, Idempotency, IdempotencyLayer, Keys, MakeOperation,
    NotExecuted, ResponsePolicy,
};

/// The tower/axum layer and its building blocks (`idemkey-tower`).
#[cfg(feature = "axum")]
pub mod tower {
    pub use idemkey_tower::*;
}

#[cfg(all(
    feature = "axum",
    any(feature = "sqlite", feature = "postgres", feature = "mysql")
))]
pub use idemkey_tower::atomic;

/// The actix-web middleware (`idemkey-actix`): idemkey's layer in both modes, its answers the
/// axum layer's.
#[cfg(feature = "actix")]
pub use idemkey_actix as actix;

/// The SQL stores and atomic mode without the layer (`idemkey-sqlx`).
#[cfg(any(feature = "sqlite", feature = "postgres", feature = "mysql"))]
pub mod sql {
    pub use idemkey_sqlx::*;
}

#[cfg(feature = "mysql")]
pub use idemkey_sqlx::MySqlStore;
#[cfg(feature = "postgres")]
pub use idemkey_sqlx::PgStore;
#[cfg(feature = "sqlite")]
pub use idemkey_sqlx::SqliteStore;
/// The Redis store (`idemkey-redis`): lease mode's records in Redis or Valkey.
#[cfg(feature = "redis")]
pub mod redis {
    pub use idemkey_redis::*;
}
/// Messages, once (`idemkey-inbox`): an idempotent consumer of NATS JetStream or RabbitMQ, its
/// record and outbox committed in the handler's transaction.
#[cfg(any(feature = "nats", feature = "amqp"))]
pub use idemkey_inbox as inbox;
#[cfg(feature = "redis")]
pub use idemkey_redis::RedisStore;

/// The client half (`idemkey-reqwest`): a reqwest middleware that gives each create request one
/// `Idempotency-Key`, kept on every retry, and retries exactly what is safe to retry.
#[cfg(feature = "client")]
pub use idemkey_reqwest as client;
/// The sqlx version the stores are built on, for the handler's own queries.
#[cfg(any(feature = "sqlite", feature = "postgres", feature = "mysql"))]
pub use sqlx;
