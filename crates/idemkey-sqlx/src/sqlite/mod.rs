//! The SQLite backend.

mod queries;

use std::str::FromStr;
use std::time::Duration;

use idemkey_core::Result;
use sqlx::Sqlite;
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};

use crate::SqlxStore;
use crate::error::store_error;

/// The SQLite store: records in the same database file as the business tables.
pub type SqliteStore = SqlxStore<Sqlite>;

/// How long a statement waits for another connection's write lock before giving up with
/// `store-unavailable`. Defaults to 5 s.
pub const DEFAULT_BUSY_TIMEOUT: Duration = Duration::from_secs(5);

impl SqlxStore<Sqlite> {
    /// Connection options for `url` with what idemkey relies on: the file is created if
    /// missing, WAL journal, `synchronous=FULL`, a 5 s busy timeout, foreign keys on.
    pub fn connect_options(url: &str) -> Result<SqliteConnectOptions> {
        let options = SqliteConnectOptions::from_str(url).map_err(store_error)?;
        Ok(options
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(SqliteSynchronous::Full)
            .busy_timeout(DEFAULT_BUSY_TIMEOUT)
            .foreign_keys(true))
    }

    /// Opens (creating if needed) the database at `url` (`sqlite://idemkey.db`) with
    /// [`SqliteStore::connect_options`], and applies idemkey's migrations.
    ///
    /// `sqlite::memory:` gives each pooled connection its own database: use a file.
    pub async fn connect(url: &str) -> Result<Self> {
        Self::connect_with(Self::connect_options(url)?).await
    }

    /// Opens a pool of 8 connections with `options` and applies idemkey's migrations.
    pub async fn connect_with(options: SqliteConnectOptions) -> Result<Self> {
        let pool = SqlitePoolOptions::new()
            .max_connections(8)
            .connect_with(options)
            .await
            .map_err(store_error)?;
        let store = Self::from_pool(pool);
        store.migrate().await?;
        Ok(store)
    }

    /// Applies idemkey's migrations (the `idemkey_records` table), tracked in
    /// `_idemkey_migrations` so they never mix with the application's own.
    pub async fn migrate(&self) -> Result<()> {
        let mut migrator = sqlx::migrate!("./migrations/sqlite");
        migrator.dangerous_set_table_name("_idemkey_migrations");
        migrator
            .run(&self.pool)
            .await
            .map_err(|e| idemkey_core::Error::Backend(Box::new(e)))
    }
}

impl crate::backend::Sealed for Sqlite {}
