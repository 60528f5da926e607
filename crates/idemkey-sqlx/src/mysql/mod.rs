//! The MySQL and MariaDB backend (InnoDB).
//!
//! Every time (lease, expiry) is computed by the database from the statement's
//! `UTC_TIMESTAMP(6)`; the store binds durations only and never reads the application's
//! clock. Write transactions run at READ COMMITTED, not InnoDB's default REPEATABLE READ: a
//! duplicate that waited for a concurrent claim must see the record that committed, and the
//! duplicate-key check then takes no gap locks. The unique scope is the arbiter: a claim is an
//! `INSERT` that waits for a concurrent uncommitted one of its scope, bounded (see `wait.rs`),
//! and the duplicate key (1062) answers with the record it met. The statements are those
//! MySQL 8 and MariaDB both accept (see `queries.rs`); docs/mysql.md says which servers were
//! tested.
//!
//! Durability is the server's: `innodb_flush_log_at_trx_commit` is global, so
//! [`MySqlStore::connect_with`] reads it and warns unless it is 1 (behaviour
//! [§8](https://docs.rs/idemkey/latest/idemkey/behaviour/index.html#8-atomic-mode)): with 0
//! or 2 an acknowledged response can be lost with its note in a crash.

mod error;
mod queries;
mod wait;

use std::str::FromStr;
use std::time::Duration;

use idemkey_core::Result;
use sqlx::MySql;
use sqlx::mysql::{MySqlConnectOptions, MySqlPoolOptions};

use crate::SqlxStore;
use error::store_error;

pub use wait::MySqlSettings;

/// The MySQL (or MariaDB) store: records in the same database as the business tables.
pub type MySqlStore = SqlxStore<MySql>;

/// The pool size [`MySqlStore::connect`] uses.
const MAX_CONNECTIONS: u32 = 10;

impl SqlxStore<MySql> {
    /// Connection options for `url` (`mysql://user:password@host:3306/db`). sqlx's own
    /// defaults are what idemkey relies on: `utf8mb4`, the session time zone UTC, and
    /// `CLIENT_FOUND_ROWS` (an update counts the rows it matched). Each write transaction
    /// sets READ COMMITTED itself.
    pub fn connect_options(url: &str) -> Result<MySqlConnectOptions> {
        MySqlConnectOptions::from_str(url).map_err(store_error)
    }

    /// Connects to `url` with a pool of 10 connections, warns if the server's durability
    /// settings can lose acknowledged commits, and applies idemkey's migrations. Claims wait
    /// at most 5 s for each other.
    pub async fn connect(url: &str) -> Result<Self> {
        Self::connect_with(Self::connect_options(url)?).await
    }

    /// Opens a pool of 10 connections with `options`, checks the durability settings
    /// ([`Self::check_durability`]) and applies idemkey's migrations.
    ///
    /// Connections are not pinged when taken from the pool: a connection the server has
    /// dropped fails its next statement instead, is closed, and the request is answered
    /// `store-unavailable` (not executed), which a client retries with the same key.
    pub async fn connect_with(options: MySqlConnectOptions) -> Result<Self> {
        let pool = MySqlPoolOptions::new()
            .max_connections(MAX_CONNECTIONS)
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
        store.check_durability().await?;
        store.migrate().await?;
        Ok(store)
    }

    /// Applies idemkey's migrations (the `idemkey_records` and `idemkey_secret` tables),
    /// tracked in `_idemkey_migrations` so they never mix with the application's own, in the
    /// connection's database.
    pub async fn migrate(&self) -> Result<()> {
        let mut migrator = sqlx::migrate!("./migrations/mysql");
        migrator.dangerous_set_table_name("_idemkey_migrations");
        migrator
            .run(&self.pool)
            .await
            .map_err(|e| idemkey_core::Error::Backend(Box::new(e)))
    }

    /// Reads the server's durability settings, which are global, and warns of those that can
    /// lose an acknowledged commit: `innodb_flush_log_at_trx_commit` other than 1 (the redo
    /// log is not flushed at each commit), and, with the binary log on, `sync_binlog` other
    /// than 1 (a crash can lose committed transactions from the binary log, so replicas and
    /// a failover lose them). Returns whether both are safe.
    pub async fn check_durability(&self) -> Result<bool> {
        let (flush, sync_binlog, log_bin): (i64, i64, i64) = sqlx::query_as(
            "SELECT CAST(@@GLOBAL.innodb_flush_log_at_trx_commit AS SIGNED), \
             CAST(@@GLOBAL.sync_binlog AS SIGNED), CAST(@@GLOBAL.log_bin AS SIGNED)",
        )
        .fetch_one(&self.pool)
        .await
        .map_err(store_error)?;
        let mut safe = true;
        if flush != 1 {
            tracing::warn!(
                innodb_flush_log_at_trx_commit = flush,
                "the server does not flush its redo log at each commit: a crash can lose \
                 acknowledged records with their business writes; set it to 1"
            );
            safe = false;
        }
        if log_bin == 1 && sync_binlog != 1 {
            tracing::warn!(
                sync_binlog,
                "the binary log is not synced at each commit: a crash can lose committed \
                 transactions from it, and with them from replicas; set sync_binlog to 1"
            );
            safe = false;
        }
        Ok(safe)
    }

    /// The same store with atomic claims waiting at most `timeout` (rounded up to whole
    /// seconds, InnoDB's unit) for a concurrent, uncommitted claim of the same scope; past it
    /// the request is answered `request-in-flight`. Applies to the claim statement only: the
    /// business statements keep the session's own `innodb_lock_wait_timeout`. Defaults to
    /// 5 s.
    #[must_use]
    pub fn with_claim_lock_timeout(mut self, timeout: Duration) -> Self {
        self.settings = MySqlSettings::new(timeout);
        self
    }

    /// How atomic claims of this store wait.
    pub fn settings(&self) -> &MySqlSettings {
        &self.settings
    }
}

impl crate::backend::Sealed for MySql {}
