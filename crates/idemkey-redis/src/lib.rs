//! A lease-mode idemkey [`Store`](idemkey_core::Store) on Redis 7+ or Valkey 8+, standalone
//! or cluster.
//!
//! Every operation is one atomic server-side script (`lua/*.lua`), fenced by the claim's token
//! and record id and timed by the server's clock (`TIME`), never the application's. Each record
//! is one hash whose key carries a cluster hash tag, so in a cluster every script touches one
//! slot (on a standalone server under per-actor caps, the record's scripts also keep the
//! actor's ledger: a keyed create is two scripts, the claim and the completion). Records
//! expire by TTL at their logical expiry: [`Store::sweep`](idemkey_core::Store::sweep) has
//! nothing to do and returns 0.
//!
//! ```no_run
//! # async fn run() -> idemkey_core::Result<()> {
//! use idemkey_redis::RedisStore;
//!
//! // Standalone (`redis://`, `rediss://`) or cluster (`redis+cluster://h1:p1,h2:p2`).
//! let store = RedisStore::connect("redis://127.0.0.1:6379").await?;
//! # let _ = store;
//! # Ok(())
//! # }
//! ```
//!
//! TLS: `rediss://` (and `rediss+cluster://`) connect over TLS (rustls), checking the server's
//! certificate against the system's roots, or only against the CA of
//! [`RedisOptions::tls_root_certificate`].

mod cache;
mod caps;
mod connect;
mod connection;
mod durable;
mod error;
mod keys;
mod record;
mod scripts;
mod store;

pub use connect::RedisOptions;
pub use connection::RedisConnection;
pub use keys::DEFAULT_PREFIX;
pub use store::RedisStore;
