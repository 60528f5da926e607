//! Contract §8 on a server database: a duplicate's claim waits for an uncommitted claim of
//! its scope, bounded by a claim-only lock timeout; an interrupted wait is in flight.

use std::time::Duration;

use idemkey_sqlx::failpoints::Point;
use idemkey_sqlx::{Outcome, SqlxStore};

use super::Server;
use super::tools::{Gate, Task, TestNote, actor, body, claims_blocked, run, spawn};
use crate::common::Fixture;
use crate::common::seed::request;

/// The store as another instance sees it: without this process's coalescing, which would keep
/// a duplicate waiting in the process instead of on the database, which these tests are about.
pub fn elsewhere<DB: Server>(store: &SqlxStore<DB>) -> SqlxStore<DB> {
    store.clone().coalescing(false)
}

/// Long enough never to run out in a test: a test decides when the winner ends.
pub const PATIENT: Duration = Duration::from_secs(600);

/// A fresh store whose claims wait [`PATIENT`]ly.
pub async fn patient<DB: Server>() -> SqlxStore<DB> {
    DB::with_claim_lock_timeout(DB::Fixture::store().await, PATIENT)
}

/// Holds a winner open at `BeforeCommit`, then starts `n` duplicates from other instances and
/// waits until their claims are blocked on the winner's uncommitted claim.
pub async fn winner_and_blocked_duplicates<DB: Server>(
    store: &SqlxStore<DB>,
    n: usize,
) -> (Gate, Task, Vec<Task>) {
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

pub async fn a_duplicate_waits_for_the_winner_then_replays_it<DB: Server>() {
    let store = patient::<DB>().await;
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
    assert_eq!(DB::Fixture::count_notes(&store).await, 1);
}

pub async fn a_duplicate_executes_when_the_winner_rolls_back<DB: Server>() {
    let store = patient::<DB>().await;
    let (gate, winner, mut duplicates) = winner_and_blocked_duplicates(&store, 1).await;
    gate.fail();
    let winner = winner.await.unwrap();
    let duplicate = duplicates.pop().unwrap().await.unwrap();
    assert!(winner.is_err(), "{winner:?}");
    assert!(
        matches!(duplicate, Ok(Outcome::Executed(_))),
        "{duplicate:?}"
    );
    assert_eq!(DB::Fixture::count_notes(&store).await, 1);
    assert_eq!(DB::Fixture::count_records(&store).await, 1);
}

pub async fn a_wait_past_the_claim_lock_timeout_is_in_flight<DB: Server>() {
    let asked = Duration::from_millis(50);
    let store = DB::with_claim_lock_timeout(DB::Fixture::store().await, asked);
    assert_eq!(
        DB::claim_lock_timeout(&store),
        DB::kept_claim_lock_timeout(asked)
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
    assert_eq!(DB::Fixture::count_notes(&store).await, 1);
}

/// A claim whose lock wait is interrupted (PostgreSQL: cancelled, 57014, what it reports when
/// the lock timeout fires in the instant the lock is granted and what an operator's
/// `pg_cancel_backend` causes; MySQL: `KILL QUERY`, 1317) is in flight, not a store failure:
/// it rolled back and nothing ran.
pub async fn an_interrupted_claim_wait_is_in_flight<DB: Server>() {
    let store = patient::<DB>().await;
    let (gate, winner, mut duplicates) = winner_and_blocked_duplicates(&store, 1).await;
    let duplicate = duplicates.pop().unwrap();
    DB::interrupt_claim_wait(&store, &duplicate).await;
    let duplicate = duplicate.await.unwrap();
    assert!(
        matches!(duplicate, Ok(Outcome::InFlight { .. })),
        "{duplicate:?}"
    );
    gate.pass();
    assert!(matches!(winner.await.unwrap(), Ok(Outcome::Executed(_))));
    assert_eq!(DB::Fixture::count_notes(&store).await, 1);
}
