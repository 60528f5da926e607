//! The store a URL names: a database (SQLite, PostgreSQL, MySQL), or idempotency records in Redis
//! or Valkey. The one place that reads a URL's scheme, for every command that opens a store.

use std::path::PathBuf;
use std::time::Duration;

use idemkey_sqlx::{MySqlStore, PgStore, SqliteStore};

use crate::error::{Error, Result};
use crate::redact::redact;

/// The store a URL names: a database, or records in Redis. Exhaustive on purpose: a caller
/// that needs the concrete SQL store (atomic mode, the notes' table) matches on it through
/// [`on_sql_backend!`](crate::on_sql_backend), and a new backend must reach each one.
#[derive(Clone, Debug)]
pub enum Database {
    /// `sqlite://FILE`.
    Sqlite(SqliteStore),
    /// `postgres://...` or `postgresql://...`.
    Postgres(PgStore),
    /// `mysql://...` or `mariadb://...`: MySQL 8 or MariaDB.
    Mysql(MySqlStore),
    /// `redis://...`, `rediss://...` or a cluster's (see [`is_redis`]): idempotency records
    /// in Redis or Valkey, lease mode only.
    Redis(RedisRecords),
}

/// Runs `$call` on the SQL store `$database` holds, bound to `$store` (a
/// `SqlxStore<DB>` of each backend in turn), or `$other` on Redis records, bound to
/// `$records`: for the callers that need the concrete SQL store.
///
/// ```no_run
/// use idemkey_server::{Database, on_sql_backend};
///
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// let database = Database::open_sql("sqlite://idemkey.db", true).await?;
/// let pool_size = on_sql_backend!(database, store => store.pool().size(), _records => 0);
/// # let _ = pool_size;
/// # Ok(())
/// # }
/// ```
#[macro_export]
macro_rules! on_sql_backend {
    ($database:expr, $store:ident => $call:expr, $records:pat => $other:expr) => {
        match $database {
            $crate::Database::Sqlite($store) => $call,
            $crate::Database::Postgres($store) => $call,
            $crate::Database::Mysql($store) => $call,
            $crate::Database::Redis($records) => $other,
        }
    };
}

/// Whether a database URL names MySQL or MariaDB (`mysql://`, or `mariadb://`, which is
/// opened as `mysql://`).
pub fn is_mysql(url: &str) -> bool {
    url.starts_with("mysql://") || url.starts_with("mariadb://")
}

/// Whether a database URL names PostgreSQL (`true`) or SQLite (`false`); any other scheme,
/// MySQL's included (see [`is_mysql`]), is an error.
pub fn is_postgres(url: &str) -> Result<bool> {
    if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        Ok(true)
    } else if url.starts_with("sqlite:") {
        Ok(false)
    } else {
        Err(Error::UnsupportedDatabase { url: redact(url) })
    }
}

impl Database {
    /// Opens the store `url` names: Redis records as [`RedisSetup::default`] says, or a
    /// database, migrated; a missing SQLite file is created only if `create` is set.
    pub async fn open(url: &str, create: bool) -> Result<Self> {
        Self::open_with(url, create, RedisSetup::default()).await
    }

    /// [`Database::open`], Redis records set up as `redis` says.
    pub async fn open_with(url: &str, create: bool, redis: RedisSetup) -> Result<Self> {
        if is_redis(url) {
            return open_redis(url, redis).await.map(Self::Redis);
        }
        Self::open_sql(url, create).await
    }

    /// Opens the database `url` names, never Redis (an unsupported database URL), and applies
    /// idemkey's migrations. A missing SQLite file is created only if `create` is set.
    pub async fn open_sql(url: &str, create: bool) -> Result<Self> {
        let failed = |source| Error::Database {
            url: redact(url),
            source,
        };
        if is_mysql(url) {
            let url = url.replacen("mariadb://", "mysql://", 1);
            let store = MySqlStore::connect(&url).await.map_err(failed)?;
            return Ok(Self::Mysql(store));
        }
        if is_postgres(url)? {
            let store = PgStore::connect(url).await.map_err(failed)?;
            return Ok(Self::Postgres(store));
        }
        let options = SqliteStore::connect_options(url)
            .map_err(failed)?
            .create_if_missing(create);
        let store = SqliteStore::connect_with(options).await.map_err(failed)?;
        Ok(Self::Sqlite(store))
    }
}

/// Idempotency records kept in Redis or Valkey (lease mode only).
pub type RedisRecords = idemkey_redis::RedisStore<idemkey_redis::RedisConnection>;

/// Whether a URL names Redis records rather than a database.
pub fn is_redis(url: &str) -> bool {
    [
        "redis://",
        "rediss://",
        "redis+unix://",
        "redis+cluster://",
        "rediss+cluster://",
    ]
    .iter()
    .any(|scheme| url.starts_with(scheme))
}

/// How long a completion waits for [`RedisSetup::replicas`] or [`RedisSetup::fsync`].
const DURABLE_WAIT: Duration = Duration::from_secs(1);

/// The memory a replay cache may take, whether of Redis records or of a database's: 64 MiB.
pub const REPLAY_CACHE_BYTES: u64 = 64 * 1024 * 1024;

/// How the Redis records are used: what each completion waits for before it returns, and
/// whether replays are cached. The default, for maintenance commands: neither.
#[derive(Clone, Debug, Default)]
pub struct RedisSetup {
    /// Each stored response waits until this many replicas have it (`WAIT`, at most 1 s).
    pub replicas: Option<u32>,
    /// Each stored response waits until Redis has fsynced it (`WAITAOF`, at most 1 s).
    pub fsync: bool,
    /// Whether to keep completed records in the process, kept exact by `CLIENT TRACKING`.
    /// Standalone servers only: a cluster has no replay cache, and a server that cannot
    /// track keys serves the records without it.
    pub replay_cache: bool,
    /// A PEM file holding the only CA certificate trusted for `rediss://`, instead of the
    /// system's roots.
    pub tls_ca: Option<PathBuf>,
}

/// Connects to the Redis (or cluster) at `url`, set up as `setup` says; the first connection is
/// made here, so an unreachable server (or one that cannot wait as asked) fails at start-up.
pub async fn open_redis(url: &str, setup: RedisSetup) -> Result<RedisRecords> {
    if !is_redis(url) {
        return Err(Error::UnsupportedRecords { url: redact(url) });
    }
    let mut options = idemkey_redis::RedisOptions::new();
    if let Some(replicas) = setup.replicas {
        options = options.wait_replicas(replicas, DURABLE_WAIT);
    }
    if setup.fsync {
        options = options.wait_fsync(DURABLE_WAIT);
    }
    if let Some(path) = setup.tls_ca {
        let pem = std::fs::read(&path).map_err(|source| Error::TlsCa { path, source })?;
        options = options.tls_root_certificate(pem);
    }
    let connect = |options| async move {
        idemkey_redis::RedisStore::connect_with(url, &options)
            .await
            .map_err(|source| Error::Records {
                url: redact(url),
                source,
            })
    };
    if !setup.replay_cache || url.contains("+cluster://") {
        return connect(options).await;
    }
    // The cache is a default, not a requirement: a server that cannot track keys for it
    // (no RESP3 or no CLIENT TRACKING) still serves the records, only without it.
    match connect(options.clone().replay_cache(REPLAY_CACHE_BYTES)).await {
        Ok(records) => Ok(records),
        Err(cached) => {
            let records = connect(options).await?;
            tracing::warn!(error = %chain(&cached), "replays are not cached");
            Ok(records)
        }
    }
}

/// An error and its sources on one line, as `{:#}` prints an `anyhow::Error`.
fn chain(error: &dyn std::error::Error) -> String {
    let mut line = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        line.push_str(": ");
        line.push_str(&cause.to_string());
        source = cause.source();
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_name_their_backend() {
        assert!(is_postgres("postgres://u@h/db").unwrap());
        assert!(!is_postgres("sqlite://x.db").unwrap());
        assert!(is_postgres("mysql://x").is_err());
        assert!(is_mysql("mysql://u@h/db") && is_mysql("mariadb://u@h/db"));
        assert!(!is_mysql("postgres://h/db") && !is_mysql("sqlite://mysql.db"));
        assert!(is_redis("redis+cluster://a:1,b:2") && !is_redis("postgres://h/db"));
    }
}
