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
//! Handlers must do only database work on `Tx`: a serialization failure or a deadlock
//! (reported with [`DbError`]) runs them again, at most three times.
//!
//! Two compiler messages to expect: `&mut tx` where sqlx wants an executor fails with a wall
//! of trait errors (write `&mut *tx`, the connection `Tx` dereferences to); and a handler
//! that does not implement axum's `Handler` gets a readable error once marked
//! `#[axum::debug_handler]` (axum's `macros` feature).
//!
//! ## Handlers with their own error type
//!
//! [`DbError`] answers 500 `handler-failed` (rolled back, nothing stored, a retry with the
//! same key is safe). A handler with an error type of its own can answer a business status
//! for a constraint violation, and keeps the re-run after a serialization failure by
//! attaching the database error to whatever it answers ([`DbError::attach`]):
//!
//! ```no_run
//! use axum::http::StatusCode;
//! use axum::response::{IntoResponse, Response};
//! use idemkey_tower::atomic::{DbError, Tx};
//! use sqlx::Sqlite;
//!
//! enum CreateError {
//!     Taken,
//!     Db(DbError),
//! }
//!
//! impl From<sqlx::Error> for CreateError {
//!     fn from(error: sqlx::Error) -> Self {
//!         let error = DbError::from(error);
//!         if error.is_unique_violation() { Self::Taken } else { Self::Db(error) }
//!     }
//! }
//!
//! impl IntoResponse for CreateError {
//!     fn into_response(self) -> Response {
//!         match self {
//!             // A 409 is not stored (`StatusPolicy::Default`): rolled back, the key is free.
//!             Self::Taken => (StatusCode::CONFLICT, "this id is taken").into_response(),
//!             // Its own answer, with the error attached: a serialization failure still
//!             // runs the handler again. (`Self::Db(error) => error.into_response()` answers
//!             // the layer's `handler-failed` instead.)
//!             Self::Db(error) => {
//!                 let mut response = StatusCode::INTERNAL_SERVER_ERROR.into_response();
//!                 error.attach(&mut response);
//!                 response
//!             }
//!         }
//!     }
//! }
//!
//! async fn create(mut tx: Tx<Sqlite>) -> Result<StatusCode, CreateError> {
//!     sqlx::query("INSERT INTO note (id) VALUES ('n1')")
//!         .execute(&mut *tx)
//!         .await?;
//!     Ok(StatusCode::CREATED)
//! }
//! ```

mod error;
mod handler;
mod layer;
mod service;
mod shared;

pub use crate::tx::Tx;
pub use error::DbError;
pub use idemkey_sqlx::Strategy;
pub use layer::AtomicIdempotencyLayer;
pub use service::AtomicIdempotency;
