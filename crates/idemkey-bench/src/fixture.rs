//! A fresh database for one run: a SQLite file in a temporary directory, or a PostgreSQL
//! schema of its own; removed at the end.

use std::path::PathBuf;

use anyhow::Context;
use sqlx::Connection;
use sqlx::postgres::PgConnection;

use idemkey_server::{is_postgres, redact};

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
}

impl Fixture {
    /// A fresh database: `None` makes a SQLite file in a new temporary directory; a
    /// `postgres://` URL gets a new schema; a `sqlite:` URL is used as it is, and kept.
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

    /// The database of a running service, used as it is and kept.
    pub(crate) fn existing(url: &str) -> Self {
        Self {
            url: url.to_owned(),
            cleanup: Cleanup::None,
        }
    }

    /// Removes what [`Fixture::prepare`] made; reports, but does not fail on, a failure.
    pub(crate) async fn remove(self) {
        let result = match &self.cleanup {
            Cleanup::None => Ok(()),
            Cleanup::Directory(dir) => std::fs::remove_dir_all(dir).map_err(anyhow::Error::from),
            Cleanup::Schema { admin_url, schema } => drop_schema(admin_url, schema).await,
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
}
