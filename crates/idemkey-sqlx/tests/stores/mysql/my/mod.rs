//! The MySQL fixture: a database of its own per test, on the server named by
//! `IDEMKEY_TEST_MYSQL_URL`, so the tests run in parallel on one server.
#![allow(dead_code, unreachable_pub, clippy::unwrap_used)]

mod faults;
mod record_wait;
mod server;
mod waits;

use futures_util::future::BoxFuture;
use idemkey_sqlx::MySqlStore;
use idemkey_test_support::db::mysql;
use sqlx::mysql::MySqlPoolOptions;
use sqlx::{MySql, Transaction};

use crate::common::Fixture;

const NOTE_TABLE: &str = "CREATE TABLE note (
    id VARCHAR(64) PRIMARY KEY,
    actor VARCHAR(255) NOT NULL,
    title VARCHAR(1000) NOT NULL CHECK (CHAR_LENGTH(TRIM(title)) BETWEEN 1 AND 200)
) ENGINE = InnoDB";

pub struct MySqlFixture;

impl Fixture for MySqlFixture {
    type DB = MySql;

    /// Pool of 40: the seed's 32-request race holds each request between its lookup and its
    /// claim, and a request keeps its lookup's connection for the claim's transaction.
    async fn store() -> MySqlStore {
        store_with(MySqlPoolOptions::new().max_connections(40)).await
    }

    fn insert_note<'t>(
        tx: &'t mut Transaction<'static, MySql>,
        id: &'t str,
        actor: &'t str,
        title: &'t str,
    ) -> BoxFuture<'t, Result<(), sqlx::Error>> {
        Box::pin(async move {
            sqlx::query("INSERT INTO note (id, actor, title) VALUES (?, ?, ?)")
                .bind(id)
                .bind(actor)
                .bind(title)
                .execute(&mut **tx)
                .await
                .map(|_| ())
        })
    }

    async fn count_notes(store: &MySqlStore) -> i64 {
        scalar(store, "SELECT count(*) FROM note").await
    }

    async fn count_records(store: &MySqlStore) -> i64 {
        scalar(store, "SELECT count(*) FROM idemkey_records").await
    }
}

/// A migrated store with a `note` table in a fresh database.
pub async fn store_with(pool: MySqlPoolOptions) -> MySqlStore {
    let name = mysql::create_database().await;
    let store = MySqlStore::from_pool(pool.connect_with(mysql::options(&name)).await.unwrap());
    store.migrate().await.unwrap();
    sqlx::query(NOTE_TABLE).execute(store.pool()).await.unwrap();
    store
}

/// The store's database.
pub fn database(store: &MySqlStore) -> String {
    let options = store.pool().connect_options();
    options.get_database().unwrap().to_owned()
}

pub async fn scalar(store: &MySqlStore, sql: &'static str) -> i64 {
    sqlx::query_scalar(sql)
        .fetch_one(store.pool())
        .await
        .unwrap()
}
