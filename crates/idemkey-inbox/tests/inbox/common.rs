//! What the tests share: stores with a business table of their own, and handlers.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use futures_util::future::BoxFuture;
use idemkey_core::Operation;
use idemkey_inbox::{Inbox, Outbox, Settings};
use idemkey_sqlx::{PgStore, SqliteStore};
use sqlx::{Postgres, Sqlite, Transaction};

/// A unique name, for tables, streams and consumers that tests share a server with.
pub fn unique(prefix: &str) -> String {
    format!("{prefix}_{}", uuid::Uuid::new_v4().simple())
}

/// An inbox on a fresh SQLite file, with settings that retry at once.
pub async fn sqlite_inbox(dir: &tempfile::TempDir) -> Inbox<Sqlite> {
    let url = format!("sqlite://{}", dir.path().join("inbox.db").display());
    let store = SqliteStore::connect(&url).await.unwrap();
    sqlx::query("CREATE TABLE shipments (order_id TEXT NOT NULL)")
        .execute(store.pool())
        .await
        .unwrap();
    let inbox = Inbox::new(store, "shipper", Operation::new("ship", "v1")).with_settings(fast());
    inbox.migrate().await.unwrap();
    inbox
}

/// An inbox on the PostgreSQL test server, whose business table is `table`.
pub async fn pg_inbox(table: &str) -> Inbox<Postgres> {
    let inbox = pg_inbox_of(&unique("shipper")).await;
    let create = format!("CREATE TABLE {table} (order_id TEXT NOT NULL)");
    sqlx::query(sqlx::AssertSqlSafe(create))
        .execute(inbox.store().pool())
        .await
        .unwrap();
    inbox
}

/// An inbox of `consumer` on the PostgreSQL test server, with a store of its own: another
/// process's, as far as the store knows.
pub async fn pg_inbox_of(consumer: &str) -> Inbox<Postgres> {
    let url = idemkey_test_support::runner::needs::postgres_url();
    let store = PgStore::connect(&url).await.unwrap();
    let inbox = Inbox::new(store, consumer, Operation::new("ship", "v1")).with_settings(fast());
    inbox.migrate().await.unwrap();
    inbox
}

/// Retries at once (1 ms), dead-letters at the third delivery.
pub fn fast() -> Settings {
    let mut settings = Settings::default();
    settings.max_deliveries = 3;
    settings.initial_backoff = std::time::Duration::from_millis(1);
    settings.max_backoff = std::time::Duration::from_millis(5);
    settings
}

/// Counts its runs; inserts the order into `shipments` and publishes it to `shipped`.
#[derive(Clone, Default)]
pub struct Ship {
    pub runs: Arc<AtomicUsize>,
}

impl Ship {
    pub fn runs(&self) -> usize {
        self.runs.load(Ordering::SeqCst)
    }

    /// The handler for `order` on SQLite.
    pub fn sqlite(
        &self,
        order: &str,
    ) -> impl for<'t> FnMut(
        &'t mut Transaction<'static, Sqlite>,
        &'t mut Outbox,
    ) -> BoxFuture<'t, Result<(), sqlx::Error>>
    + Send {
        let (runs, order) = (Arc::clone(&self.runs), order.to_owned());
        move |tx, outbox| {
            runs.fetch_add(1, Ordering::SeqCst);
            let order = order.clone();
            Box::pin(async move {
                sqlx::query("INSERT INTO shipments (order_id) VALUES (?1)")
                    .bind(&order)
                    .execute(&mut **tx)
                    .await?;
                outbox.publish("shipped", order.into_bytes());
                Ok(())
            })
        }
    }
}

/// The rows of `shipments` on SQLite.
pub async fn shipped(inbox: &Inbox<Sqlite>) -> Vec<String> {
    sqlx::query_scalar("SELECT order_id FROM shipments ORDER BY rowid")
        .fetch_all(inbox.store().pool())
        .await
        .unwrap()
}
