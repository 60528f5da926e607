//! Faults on PostgreSQL: serialization failures and deadlocks re-run the handler (at most 3
//! times, then `store-unavailable`), and a lost connection leaves nothing half-written.

use idemkey_core::Error;
use idemkey_sqlx::failpoints::Point;
use idemkey_sqlx::{AtomicError, Outcome};

use super::PgFixture;
use super::tools::{Gate, TestNote, actor, kill, run, spawn};
use crate::common::Fixture;
use crate::common::seed::request;

const SERIALIZATION_FAILURE: &str =
    "DO $$ BEGIN RAISE EXCEPTION 'provoked' USING ERRCODE = '40001'; END $$";
const DEADLOCK: &str = "DO $$ BEGIN RAISE EXCEPTION 'provoked' USING ERRCODE = '40P01'; END $$";

#[idemkey_test_support::test(flavor = "multi_thread", worker_threads = 2, needs = [postgres])]
async fn serialization_failures_and_deadlocks_rerun_the_handler() {
    let store = PgFixture::store().await;
    for sql in [SERIALIZATION_FAILURE, DEADLOCK] {
        let req = request(&actor(), "key-a", "rerun");
        let handler = TestNote::new(&req, "rerun").before(sql, |call| call == 1);
        let outcome = run(&store, &req, handler.clone()).await;
        assert!(matches!(outcome, Ok(Outcome::Executed(_))), "{outcome:?}");
        assert_eq!(handler.calls(), 2, "{sql}");
    }
    assert_eq!(PgFixture::count_notes(&store).await, 2);
}

#[idemkey_test_support::test(flavor = "multi_thread", worker_threads = 2, needs = [postgres])]
async fn a_serialization_failure_every_time_is_store_unavailable_after_3_attempts() {
    let store = PgFixture::store().await;
    let req = request(&actor(), "key-a", "never");
    let handler = TestNote::new(&req, "never").before(SERIALIZATION_FAILURE, |_| true);
    let outcome = run(&store, &req, handler.clone()).await;
    assert!(
        matches!(outcome, Err(AtomicError::Store(Error::Unavailable(_)))),
        "{outcome:?}"
    );
    assert_eq!(handler.calls(), 3);
    assert_eq!(
        (
            PgFixture::count_notes(&store).await,
            PgFixture::count_records(&store).await
        ),
        (0, 0)
    );
}

/// A deferred constraint trigger fails the first `COMMIT` with 40001: the error from the
/// commit keeps its `sqlx::Error`, so the runner recognises it and runs the handler again.
#[idemkey_test_support::test(flavor = "multi_thread", worker_threads = 2, needs = [postgres])]
async fn a_serialization_failure_at_commit_reruns_the_handler() {
    let store = PgFixture::store().await;
    sqlx::raw_sql(
        "CREATE SEQUENCE commits;
         CREATE FUNCTION fail_first_commit() RETURNS trigger LANGUAGE plpgsql AS $$
         BEGIN
             IF nextval('commits') = 1 THEN
                 RAISE EXCEPTION 'provoked at commit' USING ERRCODE = '40001';
             END IF;
             RETURN NULL;
         END $$;
         CREATE CONSTRAINT TRIGGER fail_first_commit AFTER INSERT ON note
             DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION fail_first_commit();",
    )
    .execute(store.pool())
    .await
    .unwrap();
    let req = request(&actor(), "key-a", "commit");
    let handler = TestNote::new(&req, "commit");
    let outcome = run(&store, &req, handler.clone()).await;
    assert!(matches!(outcome, Ok(Outcome::Executed(_))), "{outcome:?}");
    assert_eq!(handler.calls(), 2);
    assert_eq!(PgFixture::count_notes(&store).await, 1);
}

/// Kills the request's backend while it is paused at `point`, after the handler's write.
async fn killed_at(point: Point) -> (idemkey_sqlx::PgStore, super::tools::NoteResult) {
    let store = PgFixture::store().await;
    let req = request(&actor(), "key-a", "killed");
    let gate = Gate::new(point);
    let handler = TestNote::new(&req, "killed");
    let task = spawn(
        &store.clone().with_failpoints(gate.hook()),
        &req,
        handler.clone(),
    );
    gate.reached().await;
    kill(
        &store,
        handler.pid.load(std::sync::atomic::Ordering::SeqCst),
    )
    .await;
    gate.pass();
    let outcome = task.await.unwrap();
    assert_eq!(
        (
            PgFixture::count_notes(&store).await,
            PgFixture::count_records(&store).await
        ),
        (0, 0),
        "nothing half-written"
    );
    let retry = run(&store, &req, TestNote::new(&req, "killed")).await;
    assert!(matches!(retry, Ok(Outcome::Executed(_))), "{retry:?}");
    assert_eq!(PgFixture::count_notes(&store).await, 1);
    (store, outcome)
}

#[idemkey_test_support::test(flavor = "multi_thread", worker_threads = 2, needs = [postgres])]
async fn a_lost_connection_mid_request_writes_nothing_and_a_retry_executes_once() {
    let (_, outcome) = killed_at(Point::BeforeComplete).await;
    assert!(matches!(outcome, Err(AtomicError::Store(_))), "{outcome:?}");
}

/// The commit's reply never comes: the caller cannot know whether it committed.
#[idemkey_test_support::test(flavor = "multi_thread", worker_threads = 2, needs = [postgres])]
async fn a_lost_connection_at_commit_is_outcome_unknown() {
    let (_, outcome) = killed_at(Point::BeforeCommit).await;
    assert!(
        matches!(outcome, Err(AtomicError::Store(Error::OutcomeUnknown(_)))),
        "{outcome:?}"
    );
}
