//! The business write both consumers make: one row per message in `bench_shipments`, on
//! each database the inbox runs on.

use std::future::Future;

use idemkey_inbox::OutboxDb;
use sqlx::{MySql, Postgres, Sqlite};

/// The table, with no key: each execution adds a row.
pub(crate) const TABLE: &str = "CREATE TABLE IF NOT EXISTS bench_shipments \
    (order_id VARCHAR(64) NOT NULL, shipped_at BIGINT NOT NULL)";

/// A database the inbox runs on, with the bench's insert spelled in its dialect.
pub(crate) trait BenchDb: OutboxDb {
    /// Creates [`TABLE`] if it is missing.
    fn create_table(pool: &sqlx::Pool<Self>) -> impl Future<Output = sqlx::Result<()>> + Send;

    /// Inserts the shipment of `order` on `conn`.
    fn insert<'c>(
        conn: &'c mut <Self as sqlx::Database>::Connection,
        order: &'c str,
    ) -> impl Future<Output = sqlx::Result<()>> + Send + 'c;
}

macro_rules! bench_db {
    ($db:ty, $insert:literal) => {
        impl BenchDb for $db {
            async fn create_table(pool: &sqlx::Pool<Self>) -> sqlx::Result<()> {
                sqlx::query(TABLE).execute(pool).await.map(drop)
            }

            async fn insert<'c>(
                conn: &'c mut <Self as sqlx::Database>::Connection,
                order: &'c str,
            ) -> sqlx::Result<()> {
                sqlx::query($insert)
                    .bind(order)
                    .bind(now_ms())
                    .execute(conn)
                    .await?;
                Ok(())
            }
        }
    };
}

bench_db!(
    Sqlite,
    "INSERT INTO bench_shipments (order_id, shipped_at) VALUES (?1, ?2)"
);
bench_db!(
    Postgres,
    "INSERT INTO bench_shipments (order_id, shipped_at) VALUES ($1, $2)"
);
bench_db!(
    MySql,
    "INSERT INTO bench_shipments (order_id, shipped_at) VALUES (?, ?)"
);

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}
