//! The PostgreSQL backend.
//!
//! Every time (lease, expiry) is computed by the database from `clock_timestamp()`; the store
//! binds durations only and never reads the application's clock. Transactions run at READ
//! COMMITTED. The store's connections run with `synchronous_commit=on` whatever the server's,
//! database's or role's default (behaviour [§8](https://docs.rs/idemkey/latest/idemkey/behaviour/index.html#8-atomic-mode)): an acknowledged response is durable only if
//! its commit is, and `off` can lose a note together with its record after a crash. One
//! statement turns it off for its own transaction: lease mode's claim when its flush is
//! deferred (`ClaimFlush::Deferred`), which a later durable commit flushes with its own.

mod error;
mod queries;
mod wait;

use std::str::FromStr;
use std::time::Duration;

use idemkey_core::Result;
use sqlx::Postgres;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};

use crate::SqlxStore;
use error::store_error;

pub use wait::{DEFAULT_CLAIM_LOCK_TIMEOUT, PgSettings};

/// The PostgreSQL store: records in the same database as the business tables.
pub type PgStore = SqlxStore<Postgres>;

/// The pool size [`PgStore::connect`] uses. Defaults to 10.
pub const DEFAULT_MAX_CONNECTIONS: u32 = 10;

impl SqlxStore<Postgres> {
    /// Connection options for `url` (`postgres://user@host/db`), with
    /// `synchronous_commit=on`, sent when each connection starts (no statement per request),
    /// after any `options` of the URL, so it wins over them and over the server's default.
    /// Each write transaction sets READ COMMITTED itself.
    ///
    /// For synchronous replication with `remote_apply`, add it after these options:
    /// `PgStore::connect_options(url)?.options([("synchronous_commit", "remote_apply")])`.
    /// A pool made elsewhere (for [`SqlxStore::from_pool`]) must set it the same way.
    pub fn connect_options(url: &str) -> Result<PgConnectOptions> {
        let options = PgConnectOptions::from_str(url).map_err(store_error)?;
        Ok(options.options([("synchronous_commit", "on")]))
    }

    /// Connects to `url` with a pool of [`DEFAULT_MAX_CONNECTIONS`] and applies idemkey's
    /// migrations. Claims wait at most [`DEFAULT_CLAIM_LOCK_TIMEOUT`] for each other, and at
    /// most half the pool's connections wait at once.
    pub async fn connect(url: &str) -> Result<Self> {
        Self::connect_with(Self::connect_options(url)?).await
    }

    /// Opens a pool of [`DEFAULT_MAX_CONNECTIONS`] connections with `options` and applies
    /// idemkey's migrations.
    ///
    /// Connections are not pinged when taken from the pool (sqlx's `test_before_acquire`):
    /// a ping is a round trip on every request's every acquire. A connection the server has
    /// dropped fails its next statement instead, is closed, and the request is answered
    /// `store-unavailable` (not executed), which a client retries with the same key.
    pub async fn connect_with(options: PgConnectOptions) -> Result<Self> {
        let pool = PgPoolOptions::new()
            .max_connections(DEFAULT_MAX_CONNECTIONS)
            // No reaping of idle or old connections: sqlx 0.9.0's task for it counts the idle
            // connections while a release may be between queueing one and counting it, and a count
            // read below zero (wrapped) makes it loop without yielding: a core spun for good, and
            // a process that cannot exit. The pool is bounded; a dead connection fails its
            // statement.
            // Reported to sqlx as "100% CPU in spawn_maintenance_tasks".
            .idle_timeout(None)
            .max_lifetime(None)
            .test_before_acquire(false)
            .connect_with(options)
            .await
            .map_err(store_error)?;
        let store = Self::from_pool(pool);
        store.migrate().await?;
        Ok(store)
    }

    /// Applies idemkey's migrations (the `idemkey_records` table), tracked in
    /// `_idemkey_migrations` so they never mix with the application's own. Both tables go to
    /// the first schema of the connection's `search_path`.
    pub async fn migrate(&self) -> Result<()> {
        let mut migrator = sqlx::migrate!("./migrations/postgres");
        migrator.dangerous_set_table_name("_idemkey_migrations");
        migrator
            .run(&self.pool)
            .await
            .map_err(|e| idemkey_core::Error::Backend(Box::new(e)))
    }

    /// The same store with atomic claims waiting at most `timeout` for a concurrent,
    /// uncommitted claim of the same scope; past it the request is answered
    /// `request-in-flight`. Applies to the claim statement only: the business statements
    /// keep the session's own `lock_timeout`. Defaults to [`DEFAULT_CLAIM_LOCK_TIMEOUT`].
    /// The result still shares this store's waiter cap.
    #[must_use]
    pub fn with_claim_lock_timeout(mut self, timeout: Duration) -> Self {
        self.settings = self.settings.with_lock_timeout(timeout);
        self
    }

    /// The same store with at most `max` claims waiting at once (at least one), so waiters
    /// never hold every pooled connection; the next duplicate is answered
    /// `request-in-flight`. Defaults to half the pool's maximum size. This starts a new cap:
    /// set it before cloning the store, since clones share one cap.
    #[must_use]
    pub fn with_max_waiters(mut self, max: usize) -> Self {
        self.settings = PgSettings::new(self.settings.claim_lock_timeout(), max);
        self
    }

    /// How atomic claims of this store wait.
    pub fn settings(&self) -> &PgSettings {
        &self.settings
    }
}

impl crate::backend::Sealed for Postgres {}
