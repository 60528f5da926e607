//! SQLite, PostgreSQL and MySQL stores for idemkey, and atomic mode: the stored response commits in
//! the same transaction as the business write, so a crash never leaves one without the other.
//!
//! ```
//! use idemkey_core::{ClaimRequest, Fingerprint, Key, Operation, StoredResponse};
//! use idemkey_sqlx::{handler_fn, AtomicOptions, Outcome, SqliteStore};
//!
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! # let dir = std::env::temp_dir().join(format!("idemkey-doc-{}", std::process::id()));
//! # std::fs::create_dir_all(&dir)?;
//! # let url = format!("sqlite://{}", dir.join("doc.db").display());
//! let store = SqliteStore::connect(&url).await?; // creates the file, applies migrations
//! sqlx::query("CREATE TABLE IF NOT EXISTS note (id TEXT PRIMARY KEY, title TEXT NOT NULL)")
//!     .execute(store.pool())
//!     .await?;
//!
//! let body = br#"{"title": "hello"}"#;
//! let request = ClaimRequest::new(
//!     "actor-a",
//!     Operation::new("create-note", "v1"),
//!     Key::parse(b"key-1")?,
//!     Fingerprint::builder("POST", "/v1/notes").content_type("application/json").body(body),
//! );
//! let mut handler = handler_fn(|tx| Box::pin(async move {
//!     // The business write runs on the claim's own transaction.
//!     sqlx::query("INSERT INTO note (id, title) VALUES ('n1', 'hello')").execute(&mut **tx).await?;
//!     Ok::<_, sqlx::Error>(StoredResponse::new(201, r#"{"id":"n1"}"#))
//! }));
//! let first = store.execute(&request, &AtomicOptions::default(), &mut handler).await?;
//! assert!(matches!(first, Outcome::Executed(_)));
//! let retry = store.execute(&request, &AtomicOptions::default(), &mut handler).await?;
//! assert!(matches!(retry, Outcome::Replayed(r) if r.status == 201));
//! # std::fs::remove_dir_all(&dir)?;
//! # Ok::<_, Box<dyn std::error::Error>>(())
//! # }).unwrap();
//! ```
//!
//! Lease mode uses the same stores through [`Store`](idemkey_core::Store).
//!
//! | feature | what it enables |
//! | --- | --- |
//! | `sqlite` (default) | [`SqliteStore`], with a bundled SQLite |
//! | `postgres` (default) | [`PgStore`]: duplicates wait (bounded, capped) for a concurrent claim |
//! | `mysql` | [`MySqlStore`] (MySQL 8, MariaDB): duplicates wait (bounded) for a concurrent claim |

#![cfg_attr(docsrs, feature(doc_cfg))]
#![cfg_attr(
    not(any(feature = "sqlite", feature = "postgres", feature = "mysql")),
    allow(dead_code, unused_macros, unused_imports)
)]

mod atomic;
mod backend;
mod cache;
mod error;
// Test-only hooks for this workspace's fault tests: not part of the public API.
#[doc(hidden)]
pub mod failpoints;
#[cfg(feature = "mysql")]
mod mysql;
#[cfg(feature = "postgres")]
mod postgres;
mod readers;
mod row;
#[cfg(feature = "sqlite")]
mod sqlite;
mod statements;
mod store;
mod usage;

pub use atomic::{
    AtomicBegin, AtomicClaim, AtomicError, AtomicHandler, AtomicLookup, AtomicOptions,
    AtomicResponse, HandlerFn, HandlerResult, Outcome, Strategy, handler_fn,
};
pub use backend::{Backend, Folded};
#[cfg(feature = "mysql")]
pub use mysql::{MySqlSettings, MySqlStore};
#[cfg(feature = "postgres")]
pub use postgres::{DEFAULT_CLAIM_LOCK_TIMEOUT, DEFAULT_MAX_CONNECTIONS, PgSettings, PgStore};
#[cfg(feature = "sqlite")]
pub use sqlite::{DEFAULT_BUSY_TIMEOUT, SqliteSettings, SqliteStore};
pub use store::SqlxStore;
