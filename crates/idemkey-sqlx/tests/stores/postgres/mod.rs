//! The PostgreSQL store: the conformance suite, the seed cases, the server databases' shared
//! cases (`server`: duplicates that wait for an uncommitted claim, bounded; re-runs; lost
//! connections), and what only PostgreSQL does (`postgres/pg/waits.rs`,
//! `postgres/pg/faults.rs`): waiting claims capped in number; re-runs after serialization
//! failures.
//!
//! Needs `IDEMKEY_TEST_PG_URL` or a server at 127.0.0.1:5432 (required when `CI` is set,
//! the tests ignored otherwise); every test works in a PostgreSQL schema of its own.

mod pg;

use std::time::Duration;

use crate::common::Fixture;
use crate::server::tools::TestNote;
use idemkey_core::RecordState;
use idemkey_sqlx::{Backend, PgStore};
use pg::PgFixture;
use sqlx::Postgres;

idemkey_core::store_conformance_suite!(
    PgFixture::store(),
    test: idemkey_test_support::test(flavor = "multi_thread", worker_threads = 2, needs = [postgres]),
);

seed_cases!(PgFixture, needs = [postgres]);

/// The seed cases again with the commit-time strategy.
mod commit_time {
    use super::*;

    seed_cases!(crate::common::CommitTime<PgFixture>, needs = [postgres]);
}

/// The cases every server database runs.
mod server {
    crate::server_cases!(sqlx::Postgres, needs = [postgres]);
}

#[idemkey_test_support::test(flavor = "multi_thread", worker_threads = 2, needs = [postgres])]
async fn an_owner_left_by_an_old_takeover_is_not_trusted() {
    crate::common::upgrade::an_owner_left_by_an_old_takeover_is_not_trusted::<PgFixture>().await;
}

async fn db_ms(store: &PgStore) -> i64 {
    pg::scalar(
        store,
        "SELECT floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint",
    )
    .await
}

/// Leases and expiry are computed by the database from `clock_timestamp()`; the store binds
/// only durations and has no application clock at all. A claim made late in a transaction
/// gets the time of its statement, not the transaction's start (`now()`), and `lookup`
/// measures what is left of the lease with the same clock.
#[idemkey_test_support::test(flavor = "multi_thread", worker_threads = 2, needs = [postgres])]
async fn leases_and_expiry_come_from_the_database_clock() {
    let store = PgFixture::store().await;
    let req = idemkey_core::testkit::request("{}").lease(Duration::from_secs(3600));
    let mut tx = store.begin_write().await.unwrap();
    let late: &str = "SELECT clock_timestamp() > now() + interval '50 ms'";
    while !sqlx::query_scalar::<_, bool>(late)
        .fetch_one(&mut *tx)
        .await
        .unwrap()
    {
        tokio::task::yield_now().await;
    }
    <Postgres as Backend>::try_claim(&mut tx, &req)
        .await
        .unwrap();
    let (created, lease_until, started): (i64, i64, i64) = sqlx::query_as(
        "SELECT created_at, lease_until, floor(extract(epoch FROM now()) * 1000)::bigint \
         FROM idemkey_records",
    )
    .fetch_one(&mut *tx)
    .await
    .unwrap();
    tx.commit().await.unwrap();
    assert!(
        created >= started + 50,
        "created {created}, transaction began {started}"
    );
    assert_eq!(
        lease_until - created,
        3_600_000,
        "one clock reading per statement"
    );
    let before = db_ms(&store).await;
    let record = idemkey_core::Store::lookup(&store, &req.scope)
        .await
        .unwrap()
        .unwrap();
    let after = db_ms(&store).await;
    let RecordState::InFlight { lease_remaining } = record.state else {
        panic!("{record:?}")
    };
    let remaining = i64::try_from(lease_remaining.as_millis()).unwrap();
    assert!((lease_until - after..=lease_until - before + 1).contains(&remaining));
}

/// Write transactions are READ COMMITTED even where the database defaults to SERIALIZABLE,
/// and `synchronous_commit` is left on.
#[idemkey_test_support::test(flavor = "multi_thread", worker_threads = 2, needs = [postgres])]
async fn write_transactions_are_read_committed_with_synchronous_commit() {
    let pool = sqlx::postgres::PgPoolOptions::new().max_connections(2);
    let store = pg::store_with(pool, |o| {
        o.options([("default_transaction_isolation", "serializable")])
    })
    .await;
    let mut tx = store.begin_write().await.unwrap();
    let isolation: String = sqlx::query_scalar("SHOW transaction_isolation")
        .fetch_one(&mut *tx)
        .await
        .unwrap();
    let sync: String = sqlx::query_scalar("SHOW synchronous_commit")
        .fetch_one(&mut *tx)
        .await
        .unwrap();
    assert_eq!(
        (isolation.as_str(), sync.as_str()),
        ("read committed", "on")
    );
    tx.rollback().await.unwrap();
    let req = crate::common::seed::request("actor-rc", "key-a", "rc");
    let outcome = crate::server::tools::run(&store, &req, TestNote::new(&req, "rc")).await;
    assert!(
        matches!(outcome, Ok(idemkey_sqlx::Outcome::Executed(_))),
        "{outcome:?}"
    );
}

/// `connect_with` sizes the pool and the waiter cap, and applies the migrations, which land
/// with their tracking table in the connection's schema; applying them again changes nothing.
#[idemkey_test_support::test(flavor = "multi_thread", worker_threads = 2, needs = [postgres])]
async fn connect_with_migrates_into_the_connection_schema() {
    let store = PgStore::connect_with(pg::fresh_schema().await)
        .await
        .unwrap();
    assert_eq!(store.pool().options().get_max_connections(), 10);
    let settings = store.settings();
    assert_eq!(
        settings.claim_lock_timeout(),
        idemkey_sqlx::DEFAULT_CLAIM_LOCK_TIMEOUT
    );
    assert_eq!(settings.max_waiters(), 5, "half the pool");
    store.migrate().await.unwrap();
    let tables: Vec<String> = sqlx::query_scalar(
        "SELECT tablename::text FROM pg_tables WHERE schemaname = $1 ORDER BY tablename",
    )
    .bind(pg::schema(&store))
    .fetch_all(store.pool())
    .await
    .unwrap();
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
    let applied = pg::scalar(&store, "SELECT count(*) FROM _idemkey_migrations").await;
    assert_eq!(applied, 5);
}

/// Lease mode's deferred claim commits without waiting for the WAL flush, for its own
/// transaction only: the connection, which the handler's transaction may take next, is back
/// at `synchronous_commit = on`. `flush_claim` then waits for a flush that covers the claim.
#[idemkey_test_support::test(flavor = "multi_thread", worker_threads = 2, needs = [postgres])]
async fn a_deferred_claim_is_asynchronous_for_itself_alone_until_flushed() {
    use idemkey_core::{ClaimFlush, Store, TryClaim};

    let store = PgFixture::store().await;
    let request = idemkey_core::testkit::request("{}").flush(ClaimFlush::Deferred);
    let mut conn = store.pool().acquire().await.unwrap();
    let claimed = <Postgres as Backend>::try_claim(&mut conn, &request)
        .await
        .unwrap();
    let TryClaim::Claimed(claim) = claimed else {
        panic!("granted: {claimed:?}")
    };
    let level: String = sqlx::query_scalar("SHOW synchronous_commit")
        .fetch_one(&mut *conn)
        .await
        .unwrap();
    assert_eq!(
        level, "on",
        "the claim's setting ended with its transaction"
    );
    let written: String = sqlx::query_scalar("SELECT pg_current_wal_insert_lsn()::text")
        .fetch_one(&mut *conn)
        .await
        .unwrap();
    drop(conn);
    let seen = store.lookup(&request.scope).await.unwrap();
    assert!(seen.is_some(), "committed before its flush");
    store.flush_claim(&claim).await.unwrap();
    let flushed: bool = sqlx::query_scalar("SELECT pg_current_wal_flush_lsn() >= $1::pg_lsn")
        .bind(written)
        .fetch_one(store.pool())
        .await
        .unwrap();
    assert!(flushed, "the flush covers the claim");
}
