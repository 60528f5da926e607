//! Commit-time on MySQL without the lookup (the service's default there): a duplicate from
//! another instance runs its handler, and its record's insert waits on the first request's
//! uncommitted record at most the store's claim lock timeout, set in the statement itself
//! (MariaDB's `SET STATEMENT`), never the session's `innodb_lock_wait_timeout`. Past it, the
//! duplicate is answered `request-in-flight`, as a claim that waited.

use std::time::Duration;

use idemkey_sqlx::failpoints::Point;
use idemkey_sqlx::{AtomicOptions, MySqlStore, Outcome, Strategy};
use sqlx::mysql::MySqlPoolOptions;

use super::store_with;
use crate::common::Fixture;
use crate::common::seed::request;
use crate::server::tools::{Gate, TestNote, actor, run_with, spawn_with};

/// InnoDB's "wait forever" on MariaDB: only the store's own bound can end a wait.
const FOREVER: &str = "SET SESSION innodb_lock_wait_timeout = 100000000";

/// Turns a wait the store failed to bound into a failure instead of a hang; nothing is
/// asserted about how long the bounded one took.
const GUARD: Duration = Duration::from_secs(120);

fn commit_time_without_lookup() -> AtomicOptions {
    AtomicOptions {
        strategy: Strategy::CommitTime,
        lookup: false,
        ..AtomicOptions::default()
    }
}

/// A store of `connections` that would wait forever on a row lock, claims bounded by 1 s.
async fn patient_sessions(connections: u32) -> MySqlStore {
    let pool = MySqlPoolOptions::new()
        .max_connections(connections)
        .after_connect(|conn, _| {
            Box::pin(async move { sqlx::raw_sql(FOREVER).execute(conn).await.map(|_| ()) })
        });
    store_with(pool)
        .await
        .with_claim_lock_timeout(Duration::from_secs(1))
}

#[idemkey_test_support::test(flavor = "multi_thread", worker_threads = 2, needs = [mysql])]
async fn a_commit_time_insert_waits_at_most_the_claim_lock_timeout() {
    let store = patient_sessions(8).await;
    let options = commit_time_without_lookup();
    let req = request(&actor(), "key-a", "bounded");
    // The first request's record is inserted and its transaction held open before COMMIT.
    let gate = Gate::new(Point::BeforeCommit);
    let first = spawn_with(
        &store.clone().with_failpoints(gate.hook()),
        &req,
        options,
        TestNote::new(&req, "bounded"),
    );
    gate.reached().await;
    // Another instance: no in-process coalescing to wait in instead of the database.
    let other_instance = store.clone().coalescing(false);
    let duplicate = TestNote::new(&req, "bounded");
    let answered = run_with(&other_instance, &req, options, duplicate.clone());
    let answered = tokio::time::timeout(GUARD, answered)
        .await
        .expect("the record's insert waited on the session's bound, not the store's");
    assert!(
        matches!(answered, Ok(Outcome::InFlight { .. })),
        "{answered:?}"
    );
    assert_eq!(
        duplicate.calls(),
        1,
        "it ran speculatively, then rolled back"
    );
    gate.pass();
    let first = first.await.unwrap();
    assert!(matches!(first, Ok(Outcome::Executed(_))), "{first:?}");
    let retry = run_with(
        &other_instance,
        &req,
        options,
        TestNote::new(&req, "bounded"),
    )
    .await;
    assert!(matches!(retry, Ok(Outcome::Replayed(_))), "{retry:?}");
    assert_eq!(super::MySqlFixture::count_notes(&store).await, 1);
}

/// The bound is the record's statement alone: the handler's statements before it see the
/// session's `innodb_lock_wait_timeout`, and so does the connection's next user after it.
#[idemkey_test_support::test(flavor = "multi_thread", worker_threads = 2, needs = [mysql])]
async fn the_session_keeps_its_own_lock_wait() {
    // One connection: the request's, then the test's.
    let store = patient_sessions(1).await;
    let req = request(&actor(), "key-a", "seen");
    let seen = TestNote::new(&req, "seen")
        .before("SET @seen = @@SESSION.innodb_lock_wait_timeout", |_| true);
    let outcome = run_with(&store, &req, commit_time_without_lookup(), seen).await;
    assert!(matches!(outcome, Ok(Outcome::Executed(_))), "{outcome:?}");
    let (seen, after): (u64, u64) = sqlx::query_as(
        "SELECT CAST(@seen AS UNSIGNED), CAST(@@SESSION.innodb_lock_wait_timeout AS UNSIGNED)",
    )
    .fetch_one(store.pool())
    .await
    .unwrap();
    assert_eq!((seen, after), (100_000_000, 100_000_000));
}

/// The record's insert in a transaction the caller began itself (`begin_write`, not
/// commit-time's own `BEGIN`), on a connection that never kept the bound: the session's own
/// bound applies, and the insert goes through.
#[idemkey_test_support::test(flavor = "multi_thread", worker_threads = 2, needs = [mysql])]
async fn the_insert_runs_in_a_transaction_begun_elsewhere() {
    let store = patient_sessions(1).await;
    let req = request(&actor(), "key-a", "elsewhere");
    let mut tx = store.begin_write().await.unwrap();
    let response = idemkey_core::StoredResponse::new(201, "{}");
    let inserted = <sqlx::MySql as idemkey_sqlx::Backend>::insert_completed(
        &mut tx,
        &req,
        idemkey_core::RecordId::new(),
        &response,
    )
    .await;
    assert!(matches!(inserted, Ok(true)), "{inserted:?}");
    tx.commit().await.unwrap();
    assert_eq!(super::MySqlFixture::count_records(&store).await, 1);
}
