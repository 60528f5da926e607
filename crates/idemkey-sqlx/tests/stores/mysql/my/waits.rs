//! Contract §8 as only MySQL keeps it (the waits both server databases share are in
//! `server/waits.rs`): the duplicate key is the arbiter, and a deadlock between duplicates is
//! run again, never answered 5xx; commit-time's insert waits; business statements keep their
//! own lock waits.

use std::time::Duration;

use idemkey_core::StoredResponse;
use idemkey_sqlx::failpoints::Point;
use idemkey_sqlx::{AtomicHandler, AtomicOptions, HandlerResult, MySqlStore, Outcome, Strategy};
use sqlx::mysql::MySqlPoolOptions;
use sqlx::{MySql, Transaction};

use super::{MySqlFixture, store_with};
use crate::common::Fixture;
use crate::common::seed::request;
use crate::server::Server;
use crate::server::tools::{Gate, TestNote, actor, body, claims_blocked, spawn_with, wait_until};
use crate::server::waits::{elsewhere, patient, winner_and_blocked_duplicates};

/// How many of the store's connections run a statement that starts with `sql`.
async fn waiting(store: &MySqlStore, sql: &str) -> i64 {
    <MySql as Server>::waiting(store, sql).await
}

/// Two duplicates from other instances blocked on a winner that rolls back: InnoDB grants
/// both the row's lock at once and picks one of them as a deadlock's victim when both go on
/// to insert. The victim begins its claim again behind the other: one executes, the other
/// replays it, and neither is answered with an error.
#[idemkey_test_support::test(flavor = "multi_thread", worker_threads = 2, needs = [mysql])]
async fn duplicates_racing_after_a_rollback_execute_once_without_an_error() {
    let store = patient::<MySql>().await;
    let (gate, winner, duplicates) = winner_and_blocked_duplicates(&store, 2).await;
    let deadlocks_before = deadlocks(&store).await;
    gate.fail();
    assert!(winner.await.unwrap().is_err());
    let (mut executed, mut replayed) = (0, 0);
    for duplicate in duplicates {
        match duplicate.await.unwrap() {
            Ok(Outcome::Executed(_)) => executed += 1,
            Ok(Outcome::Replayed(_)) => replayed += 1,
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!((executed, replayed), (1, 1));
    assert_eq!(MySqlFixture::count_notes(&store).await, 1);
    let deadlocked = deadlocks(&store).await - deadlocks_before;
    println!("deadlocks InnoDB broke meanwhile (any test's): {deadlocked}");
}

/// InnoDB's count of deadlocks, server-wide.
async fn deadlocks(store: &MySqlStore) -> i64 {
    sqlx::query_scalar(
        "SELECT CAST(COUNT AS SIGNED) FROM information_schema.INNODB_METRICS \
         WHERE NAME = 'lock_deadlocks'",
    )
    .fetch_optional(store.pool())
    .await
    .unwrap()
    .unwrap_or(0)
}

/// Commit-time: a duplicate from another instance runs its handler, and its record's insert
/// waits for the winner's transaction; once the winner commits, it rolls back and replays.
#[idemkey_test_support::test(flavor = "multi_thread", worker_threads = 2, needs = [mysql])]
async fn a_commit_time_duplicate_waits_at_its_insert_then_replays() {
    let store = MySqlFixture::store().await;
    let options = AtomicOptions {
        strategy: Strategy::CommitTime,
        ..AtomicOptions::default()
    };
    let req = request(&actor(), "key-a", "late");
    let gate = Gate::new(Point::BeforeCommit);
    let held = store.clone().with_failpoints(gate.hook());
    let winner = spawn_with(&held, &req, options, TestNote::new(&req, "late"));
    gate.reached().await;
    let duplicate = TestNote::new(&req, "late");
    let task = spawn_with(&elsewhere(&store), &req, options, duplicate.clone());
    claims_blocked(&store, 1).await;
    assert_eq!(duplicate.calls(), 1, "the duplicate ran speculatively");
    gate.pass();
    let (winner, duplicate) = (winner.await.unwrap(), task.await.unwrap());
    assert!(matches!(winner, Ok(Outcome::Executed(_))), "{winner:?}");
    assert!(
        matches!(duplicate, Ok(Outcome::Replayed(_))),
        "{duplicate:?}"
    );
    assert_eq!(body(&winner), body(&duplicate));
    assert_eq!(MySqlFixture::count_notes(&store).await, 1);
}

/// The claim's short lock wait is gone once the claim is made: the business statements see
/// the session's own `innodb_lock_wait_timeout` (set when each connection opens).
#[idemkey_test_support::test(flavor = "multi_thread", worker_threads = 2, needs = [mysql])]
async fn business_statements_keep_their_ordinary_lock_waits() {
    let pool = MySqlPoolOptions::new()
        .max_connections(4)
        .after_connect(|conn, _| {
            Box::pin(async move {
                sqlx::raw_sql("SET SESSION innodb_lock_wait_timeout = 31")
                    .execute(conn)
                    .await
                    .map(|_| ())
            })
        });
    let store = store_with(pool)
        .await
        .with_claim_lock_timeout(Duration::from_secs(1));
    for title in ["first", "second"] {
        let req = request(&actor(), "key-a", title);
        let outcome = store
            .execute(&req, &AtomicOptions::default(), &mut ShowLockWait)
            .await
            .unwrap();
        assert!(
            matches!(&outcome, Outcome::Executed(r) if r.body == "31"),
            "{outcome:?}"
        );
    }
    let after: u64 = sqlx::query_scalar("SELECT @@SESSION.innodb_lock_wait_timeout")
        .fetch_one(store.pool())
        .await
        .unwrap();
    assert_eq!(after, 31, "and so do the pool's next users");
    assert_eq!(waiting(&store, "INSERT").await, 0);
}

/// Answers with the `innodb_lock_wait_timeout` it sees.
struct ShowLockWait;

impl AtomicHandler<MySql> for ShowLockWait {
    type Response = StoredResponse;
    type Error = sqlx::Error;

    async fn call(
        &mut self,
        mut tx: Transaction<'static, MySql>,
    ) -> HandlerResult<MySql, StoredResponse, sqlx::Error> {
        let seen = sqlx::query_scalar::<_, u64>("SELECT @@SESSION.innodb_lock_wait_timeout")
            .fetch_one(&mut *tx)
            .await;
        let result = seen.map(|seen| StoredResponse::new(201, seen.to_string()));
        (Some(tx), result)
    }
}

/// Sixteen duplicates from other instances blocked on one winner all replay it once it
/// commits: the duplicate key answers each, none deadlocks.
#[idemkey_test_support::test(flavor = "multi_thread", worker_threads = 2, needs = [mysql])]
async fn many_blocked_duplicates_all_replay_the_winner() {
    let store = patient::<MySql>().await;
    let (gate, winner, duplicates) = winner_and_blocked_duplicates(&store, 16).await;
    gate.pass();
    assert!(matches!(winner.await.unwrap(), Ok(Outcome::Executed(_))));
    for duplicate in duplicates {
        let outcome = duplicate.await.unwrap();
        assert!(matches!(outcome, Ok(Outcome::Replayed(_))), "{outcome:?}");
    }
    assert_eq!(MySqlFixture::count_notes(&store).await, 1);
    wait_until("no transaction left waiting", || async {
        waiting(&store, "INSERT").await == 0
    })
    .await;
}
