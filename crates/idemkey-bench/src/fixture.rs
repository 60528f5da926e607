//! A fresh database for one run: a SQLite file in a temporary directory, a PostgreSQL
//! schema of its own, or a MySQL (MariaDB) database of its own; removed at the end.

use std::path::PathBuf;

use anyhow::Context;
use sqlx::Connection;
use sqlx::mysql::MySqlConnection;
use sqlx::postgres::PgConnection;

use idemkey_server::{is_mysql, is_postgres, is_redis, redact};

/// The database a run uses, and how to clean it up.
pub(crate) struct Fixture {
    /// The URL the server (and the raw transactions) use.
    pub(crate) url: String,
    cleanup: Cleanup,
}

enum Cleanup {
    None,
    Directory(PathBuf),
    Schema { admin_url: String, schema: String },
    Database { admin_url: String, database: String },
}

impl Fixture {
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
                cleanup: Cleanup::Directory(dir),
            });
        };
        if is_mysql(url) {
            return Self::mysql(&mysql_url(url), run).await;
        }
        if is_redis(url) {
            // The proxy's records, under a credential of the run's own (see `proxy`): a
            // shared Redis is never flushed, and idemkey proxy has no key prefix to vary.
            return Ok(Self {
                url: url.to_owned(),
                cleanup: Cleanup::None,
            });
        }
        if !is_postgres(url)? {
            return Ok(Self {
                url: url.to_owned(),
                cleanup: Cleanup::None,
            });
        }
        let schema = format!("idemkey_bench_{run}");
        let mut conn = PgConnection::connect(url)
            .await
            .with_context(|| format!("cannot connect to {}", redact(url)))?;
        sqlx::query(sqlx::AssertSqlSafe(format!("CREATE SCHEMA {schema}")))
            .execute(&mut conn)
            .await
            .with_context(|| format!("cannot create schema {schema}"))?;
        let _ = conn.close().await;
        Ok(Self {
            url: with_search_path(url, &schema),
            cleanup: Cleanup::Schema {
                admin_url: url.to_owned(),
                schema,
            },
        })
    }

    /// A new database `idemkey_bench_RUN` on the server of `url` (the user needs `CREATE`
    /// and `DROP`), in which the service and the workloads make their tables.
    async fn mysql(url: &str, run: &str) -> anyhow::Result<Self> {
        let database = format!("idemkey_bench_{run}");
        let mut conn = MySqlConnection::connect(url)
            .await
            .with_context(|| format!("cannot connect to {}", redact(url)))?;
        let create = format!("CREATE DATABASE {database} CHARACTER SET utf8mb4");
        sqlx::raw_sql(sqlx::AssertSqlSafe(create))
            .execute(&mut conn)
            .await
            .with_context(|| format!("cannot create database {database}"))?;
        let _ = conn.close().await;
        Ok(Self {
            url: with_database(url, &database),
            cleanup: Cleanup::Database {
                admin_url: url.to_owned(),
                database,
            },
        })
    }

    /// The database of a running service, used as it is and kept.
    pub(crate) fn existing(url: &str) -> Self {
        Self {
            url: mysql_url(url),
            cleanup: Cleanup::None,
        }
    }

    /// Removes what [`Fixture::prepare`] made; reports, but does not fail on, a failure.
    pub(crate) async fn remove(self) {
        let result = match &self.cleanup {
            Cleanup::None => Ok(()),
            Cleanup::Directory(dir) => std::fs::remove_dir_all(dir).map_err(anyhow::Error::from),
            Cleanup::Schema { admin_url, schema } => drop_schema(admin_url, schema).await,
            Cleanup::Database {
                admin_url,
                database,
            } => drop_database(admin_url, database).await,
        };
        if let Err(error) = result {
            eprintln!("idemkey: warning: cleaning up the bench database failed: {error:#}");
        }
    }
}

async fn drop_schema(url: &str, schema: &str) -> anyhow::Result<()> {
    let mut conn = PgConnection::connect(url).await?;
    sqlx::query(sqlx::AssertSqlSafe(format!("DROP SCHEMA {schema} CASCADE")))
        .execute(&mut conn)
        .await?;
    let _ = conn.close().await;
    Ok(())
}

async fn drop_database(url: &str, database: &str) -> anyhow::Result<()> {
    let mut conn = MySqlConnection::connect(url).await?;
    let drop = format!("DROP DATABASE {database}");
    sqlx::raw_sql(sqlx::AssertSqlSafe(drop))
        .execute(&mut conn)
        .await?;
    let _ = conn.close().await;
    Ok(())
}

/// A `mariadb://` URL as sqlx opens it (`mysql://`), as `idemkey serve` does; others as
/// they are.
pub(crate) fn mysql_url(url: &str) -> String {
    url.replacen("mariadb://", "mysql://", 1)
}

/// A MySQL `url` naming `database` instead of its own (its path), query kept.
pub(crate) fn with_database(url: &str, database: &str) -> String {
    let (scheme, rest) = url.split_once("://").unwrap_or(("mysql", url));
    let (before_query, query) = match rest.split_once('?') {
        Some((before, query)) => (before, Some(query)),
        None => (rest, None),
    };
    let authority = before_query.split('/').next().unwrap_or_default();
    let mut out = format!("{scheme}://{authority}/{database}");
    if let Some(query) = query {
        out.push('?');
        out.push_str(query);
    }
    out
}

/// `url` with every connection's `search_path` set to `schema` (libpq's `options`).
pub(crate) fn with_search_path(url: &str, schema: &str) -> String {
    let separator = if url.contains('?') { '&' } else { '?' };
    format!("{url}{separator}options=-c%20search_path%3D{schema}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn search_path_goes_into_the_options() {
        assert_eq!(
            with_search_path("postgres://u@h/db", "s1"),
            "postgres://u@h/db?options=-c%20search_path%3Ds1"
        );
        assert!(with_search_path("postgres://u@h/db?sslmode=disable", "s").contains("&options="));
    }

    #[test]
    fn the_database_replaces_the_path() {
        let url = "mysql://root@127.0.0.1:3306/test";
        assert_eq!(with_database(url, "b1"), "mysql://root@127.0.0.1:3306/b1");
        assert_eq!(
            with_database("mysql://u:p@h/db?ssl-mode=disabled", "b"),
            "mysql://u:p@h/b?ssl-mode=disabled"
        );
        assert_eq!(with_database("mysql://h:3306", "b"), "mysql://h:3306/b");
        assert_eq!(mysql_url("mariadb://h/db"), "mysql://h/db");
    }
}
