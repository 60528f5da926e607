//! PostgreSQL as a [`Server`]: connections found by their `application_name` (the test's
//! schema) in `pg_stat_activity`, ended with `pg_terminate_backend`, their statements with
//! `pg_cancel_backend`.

use std::time::Duration;

use futures_util::future::BoxFuture;
use idemkey_sqlx::PgStore;
use sqlx::{Postgres, Transaction};

use super::PgFixture;
use crate::server::Server;
use crate::server::tools::{Task, wait_until};

/// A serialization failure (40001), raised on demand.
pub const SERIALIZATION_FAILURE: &str =
    "DO $$ BEGIN RAISE EXCEPTION 'provoked' USING ERRCODE = '40001'; END $$";

/// A deadlock (40P01), raised on demand.
pub const DEADLOCK: &str = "DO $$ BEGIN RAISE EXCEPTION 'provoked' USING ERRCODE = '40P01'; END $$";

impl Server for Postgres {
    type Fixture = PgFixture;

    const RETRYABLE: &'static str = SERIALIZATION_FAILURE;
    const RETRYABLE_SETUP: Option<&'static str> = None;

    fn with_claim_lock_timeout(store: PgStore, timeout: Duration) -> PgStore {
        store.with_claim_lock_timeout(timeout)
    }

    fn claim_lock_timeout(store: &PgStore) -> Duration {
        store.settings().claim_lock_timeout()
    }

    fn kept_claim_lock_timeout(asked: Duration) -> Duration {
        asked
    }

    fn connection_id<'t>(
        tx: &'t mut Transaction<'static, Postgres>,
    ) -> BoxFuture<'t, sqlx::Result<i64>> {
        Box::pin(async move {
            let pid: i32 = sqlx::query_scalar("SELECT pg_backend_pid()")
                .fetch_one(&mut **tx)
                .await?;
            Ok(i64::from(pid))
        })
    }

    fn execute<'t>(
        tx: &'t mut Transaction<'static, Postgres>,
        sql: &'static str,
    ) -> BoxFuture<'t, sqlx::Result<()>> {
        Box::pin(async move { sqlx::raw_sql(sql).execute(&mut **tx).await.map(|_| ()) })
    }

    async fn setup(store: &PgStore, sql: &'static str) {
        sqlx::raw_sql(sql).execute(store.pool()).await.unwrap();
    }

    async fn waiting(store: &PgStore, sql: &str) -> i64 {
        sqlx::query_scalar(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1 \
             AND wait_event_type = 'Lock' AND starts_with(query, $2)",
        )
        .bind(super::schema(store))
        .bind(sql)
        .fetch_one(store.pool())
        .await
        .unwrap()
    }

    /// Terminates the backend and waits until it is gone.
    async fn kill(store: &PgStore, pid: i64) {
        let pid = i32::try_from(pid).unwrap();
        let killed: bool = sqlx::query_scalar("SELECT pg_terminate_backend($1)")
            .bind(pid)
            .fetch_one(store.pool())
            .await
            .unwrap();
        assert!(killed, "backend {pid} not found");
        wait_until("the backend to exit", || async {
            let left: i64 =
                sqlx::query_scalar("SELECT count(*) FROM pg_stat_activity WHERE pid = $1")
                    .bind(pid)
                    .fetch_one(store.pool())
                    .await
                    .unwrap();
            left == 0
        })
        .await;
    }

    /// The claim may be blocked in its short first attempt, whose end (cancelled or not)
    /// leads to the waiting one: cancels whatever blocked claim there is until it answers.
    async fn interrupt_claim_wait(store: &PgStore, duplicate: &Task) {
        wait_until("the duplicate to answer", || async {
            sqlx::query(
                "SELECT pg_cancel_backend(pid) FROM pg_stat_activity WHERE application_name = $1 \
                 AND wait_event_type = 'Lock' AND starts_with(query, 'INSERT INTO idemkey_records')",
            )
            .bind(super::schema(store))
            .execute(store.pool())
            .await
            .unwrap();
            duplicate.is_finished()
        })
        .await;
    }
}
