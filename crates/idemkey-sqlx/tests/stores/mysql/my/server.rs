//! MySQL and MariaDB as a [`Server`]: connections found in `PROCESSLIST` by the test's
//! database, ended with `KILL`, their statements with `KILL QUERY`.

use std::time::Duration;

use futures_util::future::BoxFuture;
use idemkey_sqlx::MySqlStore;
use sqlx::{AssertSqlSafe, MySql, Transaction};

use super::MySqlFixture;
use crate::server::Server;
use crate::server::tools::{Task, wait_until};

/// A procedure that raises InnoDB's deadlock error (1213), as a victim would get it.
const PROVOKE: &str = "CREATE PROCEDURE provoke_deadlock() \
    SIGNAL SQLSTATE '40001' SET MYSQL_ERRNO = 1213, MESSAGE_TEXT = 'provoked'";

impl Server for MySql {
    type Fixture = MySqlFixture;

    const RETRYABLE: &'static str = "CALL provoke_deadlock()";
    const RETRYABLE_SETUP: Option<&'static str> = Some(PROVOKE);

    fn with_claim_lock_timeout(store: MySqlStore, timeout: Duration) -> MySqlStore {
        store.with_claim_lock_timeout(timeout)
    }

    fn claim_lock_timeout(store: &MySqlStore) -> Duration {
        store.settings().claim_lock_timeout()
    }

    fn kept_claim_lock_timeout(asked: Duration) -> Duration {
        let millis = u64::try_from(asked.as_millis()).unwrap();
        Duration::from_secs(millis.div_ceil(1000))
    }

    fn connection_id<'t>(
        tx: &'t mut Transaction<'static, MySql>,
    ) -> BoxFuture<'t, sqlx::Result<i64>> {
        Box::pin(async move {
            let id: u64 = sqlx::query_scalar("SELECT CONNECTION_ID()")
                .fetch_one(&mut **tx)
                .await?;
            Ok(i64::try_from(id).unwrap())
        })
    }

    fn execute<'t>(
        tx: &'t mut Transaction<'static, MySql>,
        sql: &'static str,
    ) -> BoxFuture<'t, sqlx::Result<()>> {
        Box::pin(async move { sqlx::raw_sql(sql).execute(&mut **tx).await.map(|_| ()) })
    }

    async fn setup(store: &MySqlStore, sql: &'static str) {
        sqlx::raw_sql(sql).execute(store.pool()).await.unwrap();
    }

    /// A claim seen running while the winner is held open can only be waiting for the
    /// winner's lock.
    async fn waiting(store: &MySqlStore, sql: &str) -> i64 {
        i64::try_from(running(store, sql).await.len()).unwrap()
    }

    async fn kill(store: &MySqlStore, id: i64) {
        kill(store, u64::try_from(id).unwrap(), false).await;
    }

    async fn interrupt_claim_wait(store: &MySqlStore, _duplicate: &Task) {
        let blocked = running(store, "INSERT INTO idemkey_records").await;
        kill(store, blocked[0], true).await;
    }
}

/// The ids of the store's connections running a statement that starts with `sql`: from
/// `PROCESSLIST`, since MariaDB's `INNODB_TRX` can serve a stale copy.
pub async fn running(store: &MySqlStore, sql: &str) -> Vec<u64> {
    sqlx::query_scalar(
        "SELECT CAST(ID AS UNSIGNED) FROM information_schema.PROCESSLIST \
         WHERE DB = ? AND COMMAND IN ('Query', 'Execute') AND INFO LIKE CONCAT(?, '%')",
    )
    .bind(super::database(store))
    .bind(sql)
    .fetch_all(store.pool())
    .await
    .unwrap()
}

/// Kills a connection (`KILL`, or `KILL QUERY` for its statement alone) and, for a
/// connection, waits until it is gone.
pub async fn kill(store: &MySqlStore, id: u64, query_only: bool) {
    let what = if query_only { "KILL QUERY" } else { "KILL" };
    sqlx::raw_sql(AssertSqlSafe(format!("{what} {id}")))
        .execute(store.pool())
        .await
        .unwrap();
    if query_only {
        return;
    }
    wait_until("the connection to end", || async {
        let left: i64 =
            sqlx::query_scalar("SELECT count(*) FROM information_schema.PROCESSLIST WHERE ID = ?")
                .bind(id)
                .fetch_one(store.pool())
                .await
                .unwrap();
        left == 0
    })
    .await;
}
