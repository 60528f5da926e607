//! The MySQL store on MariaDB or MySQL: the conformance suite, the seed cases in both
//! strategies, the server databases' shared cases (`server`: duplicates that wait for an
//! uncommitted claim, bounded; re-runs; lost connections), and what only MySQL does
//! (`mysql/my/waits.rs`, `mysql/my/faults.rs`, `mysql/my/record_wait.rs`): duplicates racing
//! after a rollback; real deadlocks run again; commit-time's insert bounded.
//!
//! Needs `IDEMKEY_TEST_MYSQL_URL` or a server at 127.0.0.1:3306 (required when `CI` is set,
//! the tests ignored otherwise); every test works in a database of its own.

mod my;

use std::time::Duration;

use crate::common::Fixture;
use crate::server::tools::TestNote;
use idemkey_core::{RecordState, Store, TryClaim};
use idemkey_sqlx::{Backend, MySqlStore};
use my::MySqlFixture;
use sqlx::MySql;
use sqlx::mysql::MySqlPoolOptions;

idemkey_core::store_conformance_suite!(
    MySqlFixture::store(),
    test: idemkey_test_support::test(flavor = "multi_thread", worker_threads = 2, needs = [mysql]),
);

seed_cases!(MySqlFixture, needs = [mysql]);

/// The seed cases again with the commit-time strategy.
mod commit_time {
    use super::*;

    seed_cases!(crate::common::CommitTime<MySqlFixture>, needs = [mysql]);
}

/// The cases every server database runs.
mod server {
    crate::server_cases!(sqlx::MySql, needs = [mysql]);
}

#[idemkey_test_support::test(flavor = "multi_thread", worker_threads = 2, needs = [mysql])]
async fn an_owner_left_by_an_old_takeover_is_not_trusted() {
    crate::common::upgrade::an_owner_left_by_an_old_takeover_is_not_trusted::<MySqlFixture>().await;
}

/// The database's clock in milliseconds, independent of the session's time zone.
const DB_MS: &str = "SELECT CAST(UNIX_TIMESTAMP(NOW(6)) * 1000 AS SIGNED)";

/// Leases and expiry are computed by the database from the statement's clock; the store binds
/// only durations. A claim made late in a transaction gets the time of its statement, in UTC
/// whatever the session's time zone, and `lookup` measures what is left of the lease with the
/// same clock.
#[idemkey_test_support::test(flavor = "multi_thread", worker_threads = 2, needs = [mysql])]
async fn leases_and_expiry_come_from_the_database_clock() {
    let pool = MySqlPoolOptions::new().max_connections(2);
    let store = my::store_with(pool).await;
    let req = idemkey_core::testkit::request("{}").lease(Duration::from_secs(3600));
    let mut tx = store.begin_write().await.unwrap();
    sqlx::query("SET time_zone = '+05:00'")
        .execute(&mut *tx)
        .await
        .unwrap();
    let began: i64 = sqlx::query_scalar(DB_MS).fetch_one(&mut *tx).await.unwrap();
    sqlx::query("DO SLEEP(0.05)")
        .execute(&mut *tx)
        .await
        .unwrap();
    <MySql as Backend>::try_claim(&mut tx, &req).await.unwrap();
    let (created, lease_until, unix): (i64, i64, i64) = sqlx::query_as(
        "SELECT created_at, lease_until, CAST(UNIX_TIMESTAMP() AS SIGNED) FROM idemkey_records",
    )
    .fetch_one(&mut *tx)
    .await
    .unwrap();
    tx.commit().await.unwrap();
    assert!(
        created >= began + 50,
        "created {created}, transaction began {began}"
    );
    assert!(
        (created / 1000 - unix).abs() <= 1,
        "UTC: {created} ms against {unix} s"
    );
    assert_eq!(
        lease_until - created,
        3_600_000,
        "one clock reading per statement"
    );
    let before = my::scalar(&store, DB_MS).await;
    let record = store.lookup(&req.scope).await.unwrap().unwrap();
    let after = my::scalar(&store, DB_MS).await;
    let RecordState::InFlight { lease_remaining } = record.state else {
        panic!("{record:?}")
    };
    let remaining = i64::try_from(lease_remaining.as_millis()).unwrap();
    assert!((lease_until - after - 1..=lease_until - before + 1).contains(&remaining));
}

/// Write transactions are READ COMMITTED even where the session defaults to SERIALIZABLE.
#[idemkey_test_support::test(flavor = "multi_thread", worker_threads = 2, needs = [mysql])]
async fn write_transactions_are_read_committed() {
    let pool = MySqlPoolOptions::new()
        .max_connections(2)
        .after_connect(|conn, _| {
            Box::pin(async move {
                sqlx::raw_sql("SET SESSION TRANSACTION ISOLATION LEVEL SERIALIZABLE")
                    .execute(conn)
                    .await
                    .map(|_| ())
            })
        });
    let store = my::store_with(pool).await;
    let mut tx = store.begin_write().await.unwrap();
    let count = "SELECT count(*) FROM note";
    let before: i64 = sqlx::query_scalar(count).fetch_one(&mut *tx).await.unwrap();
    // Under SERIALIZABLE the read would lock the table's gap and this insert would wait;
    // under REPEATABLE READ the second read would not see it.
    let insert = sqlx::query("INSERT INTO note VALUES ('rc', 'a', 'rc')").execute(store.pool());
    tokio::time::timeout(Duration::from_secs(60), insert)
        .await
        .expect("the insert waited for the transaction's read")
        .unwrap();
    let after: i64 = sqlx::query_scalar(count).fetch_one(&mut *tx).await.unwrap();
    assert_eq!(
        (before, after),
        (0, 1),
        "each statement sees what committed before it"
    );
    tx.rollback().await.unwrap();
    let req = crate::common::seed::request("actor-rc", "key-a", "rc");
    let outcome = crate::server::tools::run(&store, &req, TestNote::new(&req, "rc")).await;
    assert!(
        matches!(outcome, Ok(idemkey_sqlx::Outcome::Executed(_))),
        "{outcome:?}"
    );
}

/// Scopes compare byte for byte: case and trailing spaces make other scopes.
#[idemkey_test_support::test(flavor = "multi_thread", worker_threads = 2, needs = [mysql])]
async fn scopes_compare_bytes() {
    let store = MySqlFixture::store().await;
    let requests = [
        crate::common::seed::request("actor", "Key-A", "t"),
        crate::common::seed::request("actor", "key-a", "t"),
        crate::common::seed::request("actor ", "key-a", "t"),
        crate::common::seed::request("Actor", "key-a", "t"),
        crate::common::seed::request("actör", "key-a", "t"),
        crate::common::seed::request("actor", "key-a", "t"),
    ];
    let mut claimed = 0;
    for req in &requests {
        if let TryClaim::Claimed(_) = store.try_claim(req).await.unwrap() {
            claimed += 1;
        }
    }
    assert_eq!(claimed, 5, "the last one repeats the second");
    assert_eq!(MySqlFixture::count_records(&store).await, 5);
}

/// An actor longer than its column is refused before any write, never cut to a prefix
/// another actor could share.
#[idemkey_test_support::test(flavor = "multi_thread", worker_threads = 2, needs = [mysql])]
async fn an_actor_longer_than_its_column_is_refused() {
    let store = MySqlFixture::store().await;
    let long = "a".repeat(2049);
    let req = crate::common::seed::request(&long, "key-a", "t");
    let refused = store.try_claim(&req).await;
    assert!(
        matches!(refused, Err(idemkey_core::Error::Backend(_))),
        "{refused:?}"
    );
    let fits = crate::common::seed::request(&long[..2048], "key-a", "t");
    assert!(matches!(
        store.try_claim(&fits).await.unwrap(),
        TryClaim::Claimed(_)
    ));
    assert_eq!(MySqlFixture::count_records(&store).await, 1);
}

/// `connect_with` checks the durability settings and applies the migrations, which land with
/// their tracking table in the connection's database; applying them again changes nothing.
#[idemkey_test_support::test(flavor = "multi_thread", worker_threads = 2, needs = [mysql])]
async fn connect_with_migrates_into_the_connection_database() {
    let name = idemkey_test_support::db::mysql::create_database().await;
    let store = MySqlStore::connect_with(idemkey_test_support::db::mysql::options(&name))
        .await
        .unwrap();
    assert_eq!(store.pool().options().get_max_connections(), 10);
    assert_eq!(
        store.settings().claim_lock_timeout(),
        Duration::from_secs(5)
    );
    store.migrate().await.unwrap();
    let mut tables: Vec<String> = sqlx::query_scalar(
        "SELECT CAST(TABLE_NAME AS CHAR) FROM information_schema.TABLES WHERE TABLE_SCHEMA = ?",
    )
    .bind(&name)
    .fetch_all(store.pool())
    .await
    .unwrap();
    tables.sort();
    assert_eq!(
        tables,
        [
            "_idemkey_migrations",
            "idemkey_beats",
            "idemkey_owners",
            "idemkey_records",
            "idemkey_secret"
        ]
    );
    let applied = my::scalar(&store, "SELECT count(*) FROM _idemkey_migrations").await;
    assert_eq!(applied, 5);
    let (flush, sync, log_bin): (i64, i64, i64) = sqlx::query_as(
        "SELECT CAST(@@GLOBAL.innodb_flush_log_at_trx_commit AS SIGNED), \
         CAST(@@GLOBAL.sync_binlog AS SIGNED), CAST(@@GLOBAL.log_bin AS SIGNED)",
    )
    .fetch_one(store.pool())
    .await
    .unwrap();
    let safe = flush == 1 && (log_bin == 0 || sync == 1);
    assert_eq!(store.check_durability().await.unwrap(), safe);
}
