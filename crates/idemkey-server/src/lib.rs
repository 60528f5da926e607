//! What idemkey's servers share: `idemkey serve` and `idemkey proxy` listen, log, stop and
//! open their stores through this crate, so that both behave alike.
//!
//! - [`serve`] runs a router within [`Limits`]: a header read timeout, a body inactivity
//!   timeout, a deadline on a whole body and a cap on open connections, then drains the
//!   open requests once its shutdown future completes (usually [`shutdown`]: SIGINT or
//!   SIGTERM).
//! - [`init_tracing`] sends logs to stderr, filtered by `RUST_LOG`.
//! - [`Database::open`] opens the store a URL names, a database or Redis records; a
//!   [`Database`] is a [`Store`](idemkey_core::Store) itself, whichever backend it holds, and
//!   [`on_sql_backend!`] reaches the SQL store inside for the callers that need it.
//!   [`open_redis`] opens Redis records alone. [`redact`] names such a URL without its
//!   passwords.
//!
//! ```no_run
//! use axum::Router;
//! use axum::routing::get;
//! use idemkey_server::Limits;
//!
//! # async fn run() -> std::io::Result<()> {
//! idemkey_server::init_tracing();
//! let app = Router::new().route("/", get(|| async { "hello" }));
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:8080").await?;
//! idemkey_server::serve(listener, app, Limits::default(), idemkey_server::shutdown()).await;
//! # Ok(())
//! # }
//! ```

mod body_time;
mod database;
mod dispatch;
mod error;
mod listen;
mod logs;
mod redact;
mod signals;

pub use database::{
    Database, REPLAY_CACHE_BYTES, RedisRecords, RedisSetup, is_mysql, is_postgres, is_redis,
    open_redis,
};
pub use error::{Error, Result};
pub use listen::{Limits, serve};
pub use logs::init_tracing;
pub use redact::redact;
pub use signals::shutdown;
