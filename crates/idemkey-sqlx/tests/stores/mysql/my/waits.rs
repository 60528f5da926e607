//! Contract §8 on MySQL: a duplicate's claim waits for an uncommitted claim of its scope,
//! bounded by a claim-only lock wait timeout; the duplicate key is the arbiter, and a
//! deadlock between duplicates is run again, never answered 5xx.

use std::time::Duration;

use idemkey_core::StoredResponse;
use idemkey_sqlx::failpoints::Point;
use idemkey_sqlx::{AtomicHandler, AtomicOptions, HandlerResult, MySqlStore, Outcome, Strategy};
use sqlx::mysql::MySqlPoolOptions;
use sqlx::{MySql, Transaction};

use super::tools::{
    Gate, Task, TestNote, actor, body, claims_blocked, kill, run, running, spawn, spawn_with,
    wait_until, waiting,
};
use super::{MySqlFixture, store_with};
use crate::common::Fixture;
use crate::common::seed::request;

/// The store as another instance sees it: without this process's coalescing, which would keep
/// a duplicate waiting in the process instead of on the database, which these tests are about.
fn elsewhere(store: &MySqlStore) -> MySqlStore {
    store.clone().coalescing(false)
}

/// Long enough never to run out in a test: a test decides when the winner ends.
const PATIENT: Duration = Duration::from_secs(600);

/// Holds a winner open at `BeforeCommit`, then starts `n` duplicates from other instances and
/// waits until their claims are blocked on the winner's uncommitted claim.
async fn winner_and_blocked_duplicates(store: &MySqlStore, n: usize) -> (Gate, Task, Vec<Task>) {
    let req = request(&actor(), "key-a", "waited");
    let gate = Gate::new(Point::BeforeCommit);
    let held = store.clone().with_failpoints(gate.hook());
    let winner = spawn(&held, &req, TestNote::new(&req, "waited"));
    gate.reached().await;
    let duplicates = (0..n)
        .map(|_| spawn(&elsewhere(store), &req, TestNote::new(&req, "waited")))
        .collect();
    claims_blocked(store, i64::try_from(n).unwrap()).await;
    (gate, winner, duplicates)
}

#[idemkey_test_support::test(flavor = "multi_thread", worker_threads = 2, needs = [mysql])]
async fn a_duplicate_waits_for_the_winner_then_replays_it() {
    let store = MySqlFixture::store().await.with_claim_lock_timeout(PATIENT);
    let (gate, winner, mut duplicates) = winner_and_blocked_duplicates(&store, 1).await;
    gate.pass();
    let winner = winner.await.unwrap();
    let duplicate = duplicates.pop().unwrap().await.unwrap();
    assert!(matches!(winner, Ok(Outcome::Executed(_))), "{winner:?}");
    assert!(
        matches!(duplicate, Ok(Outcome::Replayed(_))),
        "{duplicate:?}"
    );
    assert_eq!(body(&winner), body(&duplicate));
    assert_eq!(MySqlFixture::count_notes(&store).await, 1);
}

#[idemkey_test_support::test(flavor = "multi_thread", worker_threads = 2, needs = [mysql])]
async fn a_duplicate_executes_when_the_winner_rolls_back() {
    let store = MySqlFixture::store().await.with_claim_lock_timeout(PATIENT);
    let (gate, winner, mut duplicates) = winner_and_blocked_duplicates(&store, 1).await;
    gate.fail();
    let winner = winner.await.unwrap();
    let duplicate = duplicates.pop().unwrap().await.unwrap();
    assert!(winner.is_err(), "{winner:?}");
    assert!(
        matches!(duplicate, Ok(Outcome::Executed(_))),
        "{duplicate:?}"
    );
    assert_eq!(MySqlFixture::count_notes(&store).await, 1);
    assert_eq!(MySqlFixture::count_records(&store).await, 1);
}

/// Two duplicates from other instances blocked on a winner that rolls back: InnoDB grants
/// both the row's lock at once and picks one of them as a deadlock's victim when both go on
/// to insert. The victim begins its claim again behind the other: one executes, the other
/// replays it, and neither is answered with an error.
#[idemkey_test_support::test(flavor = "multi_thread", worker_threads = 2, needs = [mysql])]
async fn duplicates_racing_after_a_rollback_execute_once_without_an_error() {
    let store = MySqlFixture::store().await.with_claim_lock_timeout(PATIENT);
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

#[idemkey_test_support::test(flavor = "multi_thread", worker_threads = 2, needs = [mysql])]
async fn a_wait_past_the_claim_lock_timeout_is_in_flight() {
    let store = MySqlFixture::store()
        .await
        .with_claim_lock_timeout(Duration::from_millis(50));
    assert_eq!(
        store.settings().claim_lock_timeout(),
        Duration::from_secs(1)
    );
    let req = request(&actor(), "key-a", "bounded");
    let gate = Gate::new(Point::BeforeCommit);
    let winner = spawn(
        &store.clone().with_failpoints(gate.hook()),
        &req,
        TestNote::new(&req, "bounded"),
    );
    gate.reached().await;
    // The winner stays open until after the duplicate has its answer. The outer timeout
    // only turns an unbounded wait (the bug) into a failure instead of a hang.
    let other_instance = elsewhere(&store);
    let duplicate = run(&other_instance, &req, TestNote::new(&req, "bounded"));
    let duplicate = tokio::time::timeout(PATIENT, duplicate).await.unwrap();
    assert!(
        matches!(duplicate, Ok(Outcome::InFlight { retry_after }) if retry_after == Duration::from_secs(1)),
        "{duplicate:?}"
    );
    gate.pass();
    assert!(matches!(winner.await.unwrap(), Ok(Outcome::Executed(_))));
    let retry = run(&store, &req, TestNote::new(&req, "bounded")).await;
    assert!(matches!(retry, Ok(Outcome::Replayed(_))), "{retry:?}");
    assert_eq!(MySqlFixture::count_notes(&store).await, 1);
}

/// A claim whose lock wait is interrupted (`KILL QUERY`, 1317) is in flight, not a store
/// failure: it rolled back and nothing ran.
#[idemkey_test_support::test(flavor = "multi_thread", worker_threads = 2, needs = [mysql])]
async fn an_interrupted_claim_wait_is_in_flight() {
    let store = MySqlFixture::store().await.with_claim_lock_timeout(PATIENT);
    let (gate, winner, mut duplicates) = winner_and_blocked_duplicates(&store, 1).await;
    let blocked = running(&store, "INSERT INTO idemkey_records").await;
    kill(&store, blocked[0], true).await;
    let duplicate = duplicates.pop().unwrap().await.unwrap();
    assert!(
        matches!(duplicate, Ok(Outcome::InFlight { .. })),
        "{duplicate:?}"
    );
    gate.pass();
    assert!(matches!(winner.await.unwrap(), Ok(Outcome::Executed(_))));
    assert_eq!(MySqlFixture::count_notes(&store).await, 1);
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
    let store = MySqlFixture::store().await.with_claim_lock_timeout(PATIENT);
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
