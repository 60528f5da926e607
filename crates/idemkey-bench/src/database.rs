//! The database of one run: a SQLite file in a temporary directory, a PostgreSQL schema of
//! its own ([`idemkey_test_support::db::pg::Schema`]), or a MySQL (MariaDB) database of its
//! own ([`idemkey_test_support::db::mysql::Named`]); removed at the end. Each is named after
//! the run (`idemkey_bench_RUN`), so a leftover one says whose it is.

use std::path::PathBuf;

use anyhow::Context;
use idemkey_server::{is_mysql, is_postgres, is_redis, redact};
use idemkey_test_support::db::mysql::Named;
use idemkey_test_support::db::pg::Schema;

/// The database a run uses, and what to remove at the end.
pub(crate) struct RunDatabase {
    /// The URL the server (and the raw transactions) use.
    pub(crate) url: String,
    owned: Owned,
}

/// What the run made, and removes.
enum Owned {
    Nothing,
    Directory(PathBuf),
    /// Dropped with everything in it when dropped.
    Schema(Schema),
    Database(Named),
}

impl RunDatabase {
    /// A fresh database: `None` makes a SQLite file in a new temporary directory; a
    /// `postgres://` URL gets a new schema, a `mysql://` (or `mariadb://`) URL a new
    /// database on the same server; a `sqlite:` URL is used as it is, and kept, and so is a
    /// `redis://` one (the proxy workloads' records).
    pub(crate) async fn prepare(url: Option<&str>, run: &str) -> anyhow::Result<Self> {
        let Some(url) = url else {
            let dir = std::env::temp_dir().join(format!("idemkey-bench-{run}"));
            std::fs::create_dir_all(&dir)
                .with_context(|| format!("cannot create {}", dir.display()))?;
            let url = format!("sqlite://{}", dir.join("bench.db").display());
            return Ok(Self {
                url,
                owned: Owned::Directory(dir),
            });
        };
        let name = format!("idemkey_bench_{run}");
        let connect = || format!("cannot create {name} on {}", redact(url));
        if is_mysql(url) {
            let database = Named::create(&mysql_url(url), &name)
                .await
                .with_context(connect)?;
            return Ok(Self {
                url: database.url(),
                owned: Owned::Database(database),
            });
        }
        // The proxy's records in Redis stay under a credential of the run's own (see
        // `workloads::proxy`): a shared Redis is never flushed.
        if is_redis(url) || !is_postgres(url)? {
            return Ok(Self::existing(url));
        }
        let schema = Schema::try_create_named(url, &name)
            .await
            .with_context(connect)?;
        Ok(Self {
            url: schema.url(),
            owned: Owned::Schema(schema),
        })
    }

    /// The database of a running service, used as it is and kept.
    pub(crate) fn existing(url: &str) -> Self {
        Self {
            url: mysql_url(url),
            owned: Owned::Nothing,
        }
    }

    /// Removes what [`RunDatabase::prepare`] made; reports, but does not fail on, a failure.
    pub(crate) async fn remove(self) {
        let result = match self.owned {
            Owned::Nothing => Ok(()),
            Owned::Directory(dir) => std::fs::remove_dir_all(dir).map_err(anyhow::Error::from),
            // The schema drops itself, on a thread of its own.
            Owned::Schema(schema) => tokio::task::spawn_blocking(move || drop(schema))
                .await
                .map_err(anyhow::Error::from),
            Owned::Database(database) => database.drop_database().await.map_err(Into::into),
        };
        if let Err(error) = result {
            eprintln!("idemkey: warning: cleaning up the bench database failed: {error:#}");
        }
    }
}

/// A `mariadb://` URL as sqlx opens it (`mysql://`), as `idemkey serve` does; others as
/// they are.
fn mysql_url(url: &str) -> String {
    url.replacen("mariadb://", "mysql://", 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mariadb_urls_open_as_mysql() {
        assert_eq!(mysql_url("mariadb://h/db"), "mysql://h/db");
        assert_eq!(mysql_url("mysql://h/db"), "mysql://h/db");
    }

    #[test]
    fn an_existing_database_is_kept_as_it_is() {
        let database = RunDatabase::existing("sqlite:///tmp/x.db");
        assert_eq!(database.url, "sqlite:///tmp/x.db");
        assert!(matches!(database.owned, Owned::Nothing));
    }
}
