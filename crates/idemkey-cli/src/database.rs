//! Opening the database a URL names: SQLite or PostgreSQL.

use anyhow::{Context, bail};
use idemkey_sqlx::SqliteStore;

/// A store on one of the two backends.
pub(crate) enum Database {
    Sqlite(SqliteStore),
    Postgres(idemkey_sqlx::PgStore),
}

/// Which backend a URL names.
pub(crate) fn is_postgres(url: &str) -> anyhow::Result<bool> {
    if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        Ok(true)
    } else if url.starts_with("sqlite:") {
        Ok(false)
    } else {
        bail!(
            "unsupported database URL {}: use sqlite://FILE or postgres://...",
            redact(url)
        )
    }
}

/// Connects and applies idemkey's migrations. A missing SQLite file is created only if
/// `create` is set.
pub(crate) async fn open(url: &str, create: bool) -> anyhow::Result<Database> {
    let context = || format!("cannot open the database at {}", redact(url));
    if is_postgres(url)? {
        let store = idemkey_sqlx::PgStore::connect(url)
            .await
            .with_context(context)?;
        return Ok(Database::Postgres(store));
    }
    let options = SqliteStore::connect_options(url)
        .with_context(context)?
        .create_if_missing(create);
    let store = SqliteStore::connect_with(options)
        .await
        .with_context(context)?;
    Ok(Database::Sqlite(store))
}

/// Idempotency records kept in Redis or Valkey (`--records-url`, lease mode only).
pub(crate) type RedisRecords = idemkey_redis::RedisStore<idemkey_redis::RedisConnection>;

/// Whether a URL names Redis records rather than a database.
pub(crate) fn is_redis(url: &str) -> bool {
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

/// How long a completion waits for `--records-wait-replicas` replicas or
/// `--records-wait-fsync`.
const DURABLE_WAIT: std::time::Duration = std::time::Duration::from_secs(1);

/// The memory bound of the replay cache of Redis records.
const REPLAY_CACHE_BYTES: u64 = 64 * 1024 * 1024;

/// How the Redis records are used: what each completion waits for before it returns, and
/// whether replays are cached. The default, for maintenance commands: neither.
#[derive(Clone, Debug, Default)]
pub(crate) struct RedisSetup {
    /// `--records-wait-replicas`.
    pub(crate) replicas: Option<u32>,
    /// `--records-wait-fsync`.
    pub(crate) fsync: bool,
    /// Whether to keep completed records in the process (on a standalone server; not on a
    /// cluster, which has no replay cache): not `--no-replay-cache`.
    pub(crate) replay_cache: bool,
    /// `--records-tls-ca`.
    pub(crate) tls_ca: Option<std::path::PathBuf>,
}

/// Connects to the Redis (or cluster) at `url`, set up as `setup` says; the first connection is
/// made here, so an unreachable server (or one that cannot wait as asked) fails at start-up.
pub(crate) async fn open_redis(url: &str, setup: RedisSetup) -> anyhow::Result<RedisRecords> {
    if !is_redis(url) {
        bail!(
            "unsupported records URL {}: use redis://HOST:PORT[/DB] or redis+cluster://HOST:PORT,...",
            redact(url)
        );
    }
    let mut options = idemkey_redis::RedisOptions::new();
    if let Some(replicas) = setup.replicas {
        options = options.wait_replicas(replicas, DURABLE_WAIT);
    }
    if setup.fsync {
        options = options.wait_fsync(DURABLE_WAIT);
    }
    if let Some(path) = &setup.tls_ca {
        let pem = std::fs::read(path)
            .with_context(|| format!("cannot read --records-tls-ca {}", path.display()))?;
        options = options.tls_root_certificate(pem);
    }
    let connect = |options| async move {
        idemkey_redis::RedisStore::connect_with(url, &options)
            .await
            .with_context(|| format!("cannot connect to the records at {}", redact(url)))
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
            tracing::warn!(error = format!("{cached:#}"), "replays are not cached");
            Ok(records)
        }
    }
}

/// Query parameters that carry a secret (libpq's `password` and `sslpassword`).
const SECRET_PARAMETERS: [&str; 2] = ["password", "sslpassword"];

/// The URL without its passwords, for messages: the one in the user info and any in the
/// query string.
pub(crate) fn redact(url: &str) -> String {
    let (base, query) = match url.split_once('?') {
        Some((base, query)) => (base, Some(query)),
        None => (url, None),
    };
    let mut redacted = match (base.find("://"), base.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme => match base[scheme + 3..at].split_once(':') {
            Some((user, _password)) => {
                format!("{}{user}:***{}", &base[..scheme + 3], &base[at..])
            }
            None => base.to_owned(),
        },
        _ => base.to_owned(),
    };
    if let Some(query) = query {
        redacted.push('?');
        redacted.push_str(&redact_query(query));
    }
    redacted
}

fn redact_query(query: &str) -> String {
    let pairs = query.split('&').map(|pair| match pair.split_once('=') {
        Some((name, _)) if SECRET_PARAMETERS.contains(&name.to_ascii_lowercase().as_str()) => {
            format!("{name}=***")
        }
        _ => pair.to_owned(),
    });
    pairs.collect::<Vec<_>>().join("&")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls() {
        assert!(is_postgres("postgres://u@h/db").unwrap());
        assert!(!is_postgres("sqlite://x.db").unwrap());
        assert!(is_postgres("mysql://x").is_err());
        assert_eq!(redact("postgres://u:pw@h/db"), "postgres://u:***@h/db");
        assert_eq!(redact("sqlite://x.db"), "sqlite://x.db");
        assert_eq!(
            redact("postgres://u@h/db?sslmode=require&password=hunter2&PassWord=x"),
            "postgres://u@h/db?sslmode=require&password=***&PassWord=***"
        );
        assert_eq!(
            redact("postgres://u:pw@h/db?application_name=a"),
            "postgres://u:***@h/db?application_name=a"
        );
    }
}
