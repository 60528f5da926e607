//! Atomic mode for axum (feature `sqlx` of idemkey-tower; `sqlite` or `postgres` with `axum`
//! of the `idemkey` facade): the claim, the handler's writes and the stored response commit
//! in one transaction (behaviour [§8](https://docs.rs/idemkey/latest/idemkey/behaviour/index.html#8-atomic-mode)).
//!
//! [`AtomicIdempotencyLayer`] opens a write transaction for each keyed request and claims the
//! scope as its first statement; the handler takes the transaction with the [`Tx`] extractor
//! and writes on it; the layer then stores the response in the same transaction and commits,
//! and answers only once the commit is acknowledged. A response the policy does not store
//! (5xx, a handler marked [`NotExecuted`](crate::NotExecuted), a panic) rolls everything
//! back: no business row, no record. The whole exchange runs in a task of its own, so a
//! client going away never leaves a transaction half-way.
//!
//! ```no_run
//! use axum::{Router, routing::post, http::StatusCode};
//! // With the facade: `idemkey::SqliteStore`, `idemkey::atomic::{...}`, `idemkey::sqlx::Sqlite`.
//! use idemkey_sqlx::SqliteStore;
//! use idemkey_tower::atomic::{AtomicIdempotencyLayer, DbError, Tx};
//! use sqlx::Sqlite;
//!
//! async fn create(mut tx: Tx<Sqlite>) -> Result<(StatusCode, &'static str), DbError> {
//!     sqlx::query("INSERT INTO note (id, title) VALUES ('n1', 'hello')")
//!         .execute(&mut *tx)
//!         .await?;
//!     Ok((StatusCode::CREATED, r#"{"id":"n1"}"#))
//! }
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let store = SqliteStore::connect("sqlite://app.db").await?;
//! let app: Router = Router::new()
//!     .route("/v1/notes", post(create).layer(AtomicIdempotencyLayer::new(store)));
//! // Authentication, which inserts the `Actor`, goes outside: `.layer(auth)`.
//! # Ok(())
//! # }
//! ```
//!
//! Handlers must do only database work on `Tx`: a serialization failure (reported with
//! [`DbError`]) runs them again, at most three times.

mod handler;
mod layer;

mod service;
mod tx;

pub use handler::DbError;
pub use idemkey_sqlx::Strategy;
pub use layer::AtomicIdempotencyLayer;
pub use service::AtomicIdempotency;
pub use tx::Tx;
pub(crate) use tx::{Returned, TxSlot, end};
