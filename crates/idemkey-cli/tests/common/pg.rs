//! A PostgreSQL schema of its own per test, on the server named by `IDEMKEY_TEST_PG_URL`.

use sqlx::{AssertSqlSafe, Connection, PgConnection};

/// A fresh schema, dropped with everything in it when this is dropped.
pub struct Schema {
    pub name: String,
    base: String,
}

/// The server's URL; `None` (after a loud notice) when it is not set outside CI.
pub fn url() -> Option<String> {
    idemkey_core::testkit::pg_url()
}

impl Schema {
    /// Creates `idemkey_s_<random>` on the server at `base`.
    pub async fn create(base: &str) -> Self {
        let name = format!("idemkey_s_{}", uuid::Uuid::new_v4().simple());
        let mut conn = PgConnection::connect(base).await.unwrap();
        sqlx::query(AssertSqlSafe(format!("CREATE SCHEMA {name}")))
            .execute(&mut conn)
            .await
            .unwrap();
        Self {
            name,
            base: base.to_owned(),
        }
    }

    /// The server's URL with this schema first on the search path.
    pub fn url(&self) -> String {
        let separator = if self.base.contains('?') { '&' } else { '?' };
        format!(
            "{}{separator}options=-c%20search_path%3D{}",
            self.base, self.name
        )
    }

    /// Counts the rows of a table of this schema.
    pub async fn count(&self, table: &str) -> i64 {
        let mut conn = PgConnection::connect(&self.base).await.unwrap();
        let sql = format!("SELECT count(*) FROM {}.{table}", self.name);
        sqlx::query_scalar(AssertSqlSafe(sql))
            .fetch_one(&mut conn)
            .await
            .unwrap()
    }
}

impl Drop for Schema {
    fn drop(&mut self) {
        // Drop runs outside any runtime guarantee: do it on a thread of its own.
        let (base, name) = (self.base.clone(), self.name.clone());
        let _ = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build();
            if let Ok(runtime) = runtime {
                runtime.block_on(async {
                    if let Ok(mut conn) = PgConnection::connect(&base).await {
                        let sql = format!("DROP SCHEMA IF EXISTS {name} CASCADE");
                        let _ = sqlx::query(AssertSqlSafe(sql)).execute(&mut conn).await;
                    }
                });
            }
        })
        .join();
    }
}
