//! The PostgreSQL fixture: a schema of its own per test, on the server named by
//! `IDEMKEY_TEST_PG_URL`, so the tests run in parallel on one database.
#![allow(dead_code, unreachable_pub, clippy::unwrap_used)]

mod faults;
mod server;
mod waits;

use std::time::{SystemTime, UNIX_EPOCH};

use futures_util::future::BoxFuture;
use idemkey_sqlx::PgStore;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{AssertSqlSafe, Connection, PgConnection, Postgres, Transaction};

use crate::common::Fixture;

/// Test schemas are named `idemkey_t_<unix seconds>_<random>`.
const PREFIX: &str = "idemkey_t_";

/// A schema whose tests have ended is dropped by the next test that starts, once it is
/// this old (so one whose pool is still connecting is never taken for an ended one).
const REAP_AFTER_SECS: u64 = 60;

const NOTE_TABLE: &str = "CREATE TABLE note (
    id TEXT PRIMARY KEY,
    actor TEXT NOT NULL,
    title TEXT NOT NULL CHECK (length(trim(title)) BETWEEN 1 AND 200)
)";

/// The server's URL (`IDEMKEY_TEST_PG_URL`, else one answering at 127.0.0.1:5432).
pub fn url() -> String {
    idemkey_test_support::runner::needs::postgres_url()
}

pub struct PgFixture;

impl Fixture for PgFixture {
    type DB = Postgres;

    /// Pool of 40. Every duplicate may wait: the seed's 32-request race expects each loser to
    /// wait for the winner and replay; the cap itself has a test of its own.
    async fn store() -> PgStore {
        // 40: the 32-request race holds each request between its lookup and its claim,
        // and a request keeps its lookup's connection for the claim's transaction.
        store_with(PgPoolOptions::new().max_connections(40), |o| o)
            .await
            .with_max_waiters(32)
    }

    fn insert_note<'t>(
        tx: &'t mut Transaction<'static, Postgres>,
        id: &'t str,
        actor: &'t str,
        title: &'t str,
    ) -> BoxFuture<'t, Result<(), sqlx::Error>> {
        Box::pin(async move {
            sqlx::query("INSERT INTO note (id, actor, title) VALUES ($1, $2, $3)")
                .bind(id)
                .bind(actor)
                .bind(title)
                .execute(&mut **tx)
                .await
                .map(|_| ())
        })
    }

    async fn count_notes(store: &PgStore) -> i64 {
        scalar(store, "SELECT count(*) FROM note").await
    }

    async fn count_records(store: &PgStore) -> i64 {
        scalar(store, "SELECT count(*) FROM idemkey_records").await
    }
}

/// A migrated store with a `note` table in a fresh schema, whose connections carry the
/// schema's name as `search_path` and `application_name` (to find them in
/// `pg_stat_activity`).
pub async fn store_with(
    pool: PgPoolOptions,
    options: impl FnOnce(PgConnectOptions) -> PgConnectOptions,
) -> PgStore {
    let connect = fresh_schema().await;
    let store = PgStore::from_pool(pool.connect_with(options(connect)).await.unwrap());
    store.migrate().await.unwrap();
    sqlx::query(NOTE_TABLE).execute(store.pool()).await.unwrap();
    store
}

/// Options for a fresh schema of its own: its name as `search_path` and `application_name`.
pub async fn fresh_schema() -> PgConnectOptions {
    let url = url();
    let schema = create_schema(&url).await;
    PgStore::connect_options(&url)
        .unwrap()
        .options([("search_path", schema.as_str())])
        .application_name(&schema)
}

/// The store's schema, which is also its connections' `application_name`.
pub fn schema(store: &PgStore) -> String {
    let options = store.pool().connect_options();
    options.get_application_name().unwrap().to_owned()
}

pub async fn scalar(store: &PgStore, sql: &'static str) -> i64 {
    sqlx::query_scalar(sql)
        .fetch_one(store.pool())
        .await
        .unwrap()
}

async fn create_schema(url: &str) -> String {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let random = uuid::Uuid::new_v4().simple().to_string();
    let schema = format!("{PREFIX}{secs}_{}", &random[..12]);
    let mut admin = PgConnection::connect(url).await.unwrap();
    reap(&mut admin, secs).await;
    sqlx::raw_sql(AssertSqlSafe(format!("CREATE SCHEMA {schema}")))
        .execute(&mut admin)
        .await
        .unwrap();
    admin.close().await.unwrap();
    schema
}

/// Drops the schemas of tests that have ended: old enough, and no connection left that
/// names them. Best effort: another test may be dropping the same schema.
async fn reap(admin: &mut PgConnection, now: u64) {
    let ended: Vec<String> = sqlx::query_scalar(
        "SELECT nspname::text FROM pg_namespace n WHERE starts_with(nspname, $1) \
         AND NOT EXISTS (SELECT 1 FROM pg_stat_activity a WHERE a.application_name = n.nspname)",
    )
    .bind(PREFIX)
    .fetch_all(&mut *admin)
    .await
    .unwrap_or_default();
    for schema in ended {
        let created = schema[PREFIX.len()..]
            .split('_')
            .next()
            .and_then(|secs| secs.parse::<u64>().ok());
        let plain = schema
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_');
        if plain && created.is_some_and(|created| now.saturating_sub(created) >= REAP_AFTER_SECS) {
            let drop = format!("DROP SCHEMA IF EXISTS {schema} CASCADE");
            let _ = sqlx::raw_sql(AssertSqlSafe(drop))
                .execute(&mut *admin)
                .await;
        }
    }
}
