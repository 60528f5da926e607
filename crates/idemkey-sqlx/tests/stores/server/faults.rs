//! Faults on a server database: an error the runner retries re-runs the handler (at most 3
//! times, then `store-unavailable`), and a lost connection leaves nothing half-written.

use idemkey_core::Error;
use idemkey_sqlx::failpoints::Point;
use idemkey_sqlx::{AtomicError, Outcome, SqlxStore};

use super::Server;
use super::tools::{Gate, NoteResult, TestNote, actor, run, spawn};
use crate::common::Fixture;
use crate::common::seed::request;

pub async fn a_retryable_failure_every_time_is_store_unavailable_after_3_attempts<DB: Server>() {
    let store = DB::Fixture::store().await;
    if let Some(setup) = DB::RETRYABLE_SETUP {
        DB::setup(&store, setup).await;
    }
    let req = request(&actor(), "key-a", "never");
    let handler = TestNote::new(&req, "never").before(DB::RETRYABLE, |_| true);
    let outcome = run(&store, &req, handler.clone()).await;
    assert!(
        matches!(outcome, Err(AtomicError::Store(Error::Unavailable(_)))),
        "{outcome:?}"
    );
    assert_eq!(handler.calls(), 3);
    assert_eq!(
        (
            DB::Fixture::count_notes(&store).await,
            DB::Fixture::count_records(&store).await
        ),
        (0, 0)
    );
}

/// Ends the request's connection while it is paused at `point`, after the handler's write.
async fn killed_at<DB: Server>(point: Point) -> (SqlxStore<DB>, NoteResult) {
    let store = DB::Fixture::store().await;
    let req = request(&actor(), "key-a", "killed");
    let gate = Gate::new(point);
    let handler = TestNote::new(&req, "killed");
    let task = spawn(
        &store.clone().with_failpoints(gate.hook()),
        &req,
        handler.clone(),
    );
    gate.reached().await;
    DB::kill(&store, handler.connection()).await;
    gate.pass();
    let outcome = task.await.unwrap();
    assert_eq!(
        (
            DB::Fixture::count_notes(&store).await,
            DB::Fixture::count_records(&store).await
        ),
        (0, 0),
        "nothing half-written"
    );
    let retry = run(&store, &req, TestNote::new(&req, "killed")).await;
    assert!(matches!(retry, Ok(Outcome::Executed(_))), "{retry:?}");
    assert_eq!(DB::Fixture::count_notes(&store).await, 1);
    (store, outcome)
}

pub async fn a_lost_connection_mid_request_writes_nothing_and_a_retry_executes_once<DB: Server>() {
    let (_, outcome) = killed_at::<DB>(Point::BeforeComplete).await;
    assert!(matches!(outcome, Err(AtomicError::Store(_))), "{outcome:?}");
}

/// The commit's reply never comes: the caller cannot know whether it committed.
pub async fn a_lost_connection_at_commit_is_outcome_unknown<DB: Server>() {
    let (_, outcome) = killed_at::<DB>(Point::BeforeCommit).await;
    assert!(
        matches!(outcome, Err(AtomicError::Store(Error::OutcomeUnknown(_)))),
        "{outcome:?}"
    );
}
