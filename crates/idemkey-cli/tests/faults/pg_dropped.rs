//! PostgreSQL connections dropped mid-request (`pg_terminate_backend`): while a request is
//! paused at a failpoint, or while its business write waits inside the database.
//!
//! A drop before the commit is sent leaves nothing and answers 503 `store-unavailable`; a
//! drop that loses the reply to `COMMIT` answers 500 `outcome-unknown`; either way the
//! retry executes exactly once. Needs `IDEMKEY_TEST_PG_URL` (skipped loudly outside CI).

use std::time::Duration;

use idemkey_notes::Mode;
use idemkey_sqlx::failpoints::Point;
use idemkey_test_support::db::Backend;
use idemkey_test_support::db::pg::{Hold, terminate};
use idemkey_test_support::process::notes::problem_slug;
use idemkey_test_support::wait_until;

use crate::app::{Action, App, created_id};

const LEASE: Duration = Duration::from_secs(4);
const IN_TRANSACTION: &str = "state = 'idle in transaction'";
/// The pool's idle connections, one of which the next statement will take.
const IDLE: &str = "state = 'idle'";

async fn app(mode: Mode) -> App {
    App::start(Backend::Postgres, mode, LEASE).await
}

/// Sends `key`, pauses it at `point`, drops the connections matching `condition`, lets it go
/// on, and returns the answer.
async fn dropped_at(app: &App, key: &str, point: Point, condition: &str) -> reqwest::Response {
    app.faults.arm(point, Action::Pause);
    let request = tokio::spawn(app.post_owned(key));
    app.faults.reached().await;
    assert!(
        terminate(&app.db, condition).await >= 1,
        "{key}: a connection dropped"
    );
    app.faults.go();
    request.await.unwrap()
}

/// Nothing of `key` is left, then the retry executes exactly once and replays.
async fn nothing_left_then_once(app: &App, key: &str) {
    let left = (app.notes(key).await, app.record(key).await);
    assert_eq!(left, (vec![], None), "{key}: nothing half-written");
    let id = created_id(app.post(key, key).await).await;
    let replay = app.post(key, key).await;
    assert_eq!(replay.headers()["idempotent-replayed"], "true");
    assert_eq!(created_id(replay).await, id);
    assert_eq!(app.notes(key).await, [id], "{key}: one note");
}

#[idemkey_test_support::test(flavor = "multi_thread", worker_threads = 2, needs = [postgres])]
async fn atomic_drop_before_complete_is_503_and_leaves_nothing() {
    let app = app(Mode::Atomic).await;
    let key = "drop-before-complete";
    let answer = dropped_at(&app, key, Point::BeforeComplete, IN_TRANSACTION).await;
    assert_eq!(answer.status(), 503);
    assert_eq!(problem_slug(answer).await, "store-unavailable");
    nothing_left_then_once(&app, key).await;
}

/// The commit's reply is lost: the client is told the outcome is unknown. (The connection
/// died before `COMMIT` reached the server, so here it did not commit.)
#[idemkey_test_support::test(flavor = "multi_thread", worker_threads = 2, needs = [postgres])]
async fn atomic_drop_at_commit_is_500_outcome_unknown() {
    let app = app(Mode::Atomic).await;
    let key = "drop-at-commit";
    let answer = dropped_at(&app, key, Point::BeforeCommit, IN_TRANSACTION).await;
    assert_eq!(answer.status(), 500);
    assert_eq!(problem_slug(answer).await, "outcome-unknown");
    nothing_left_then_once(&app, key).await;
}

/// The connection dies while the note's insert waits inside the database: the handler fails,
/// its rollback cannot reach the server either, and nothing is left.
#[idemkey_test_support::test(flavor = "multi_thread", worker_threads = 2, needs = [postgres])]
async fn atomic_drop_during_the_business_write_leaves_nothing() {
    let app = app(Mode::Atomic).await;
    let key = "drop-during-write";
    let answer = dropped_during_write(&app, key).await;
    assert_eq!(answer.status(), 500);
    assert_eq!(problem_slug(answer).await, "internal");
    nothing_left_then_once(&app, key).await;
}

/// Lease mode: the connection the claim (a statement that commits on its own) is about to
/// run on drops. Nothing ran, so 503, not `outcome-unknown`; nothing was claimed, and the
/// retry executes.
#[idemkey_test_support::test(flavor = "multi_thread", worker_threads = 2, needs = [postgres])]
async fn lease_drop_at_the_claim_is_503() {
    let app = app(Mode::Lease).await;
    let key = "lease-drop-at-claim";
    let mut answer = dropped_at(&app, key, Point::BeforeClaim, IDLE).await;
    // Every idle pooled connection was dropped, and each fails its next statement once (the
    // pool does not ping on acquire): a retry may meet another first. None of them runs.
    for _ in 0..10 {
        if answer.status() != 503 {
            break;
        }
        assert_eq!(problem_slug(answer).await, "store-unavailable");
        let left = (app.notes(key).await, app.record(key).await);
        assert_eq!(
            left,
            (vec![], None),
            "{key}: nothing claimed, nothing written"
        );
        answer = app.post(key, key).await;
    }
    let id = created_id(answer).await;
    let replay = app.post(key, key).await;
    assert_eq!(replay.headers()["idempotent-replayed"], "true");
    assert_eq!(created_id(replay).await, id);
    assert_eq!(app.notes(key).await, [id], "{key}: one note");
}

/// Lease mode, `--separate-completion`: every pooled connection drops while the response is
/// about to be stored; the completion is retried on a new connection, and the key replays.
#[idemkey_test_support::test(flavor = "multi_thread", worker_threads = 2, needs = [postgres])]
async fn lease_drop_before_complete_is_retried_on_a_new_connection() {
    let app = App::start_separate(Backend::Postgres, Mode::Lease, LEASE).await;
    let key = "lease-drop-before-complete";
    let answer = dropped_at(&app, key, Point::BeforeComplete, "state = 'idle'").await;
    let id = created_id(answer).await;
    assert_eq!(app.record(key).await, Some(2), "completed");
    let replay = app.post(key, key).await;
    assert_eq!(replay.headers()["idempotent-replayed"], "true");
    assert_eq!(created_id(replay).await, id);
    assert_eq!(app.notes(key).await, [id]);
}

/// Lease mode: the business write's connection dies; the claim is released (on another
/// connection), and the retry executes once.
#[idemkey_test_support::test(flavor = "multi_thread", worker_threads = 2, needs = [postgres])]
async fn lease_drop_during_the_business_write_releases_the_claim() {
    let app = app(Mode::Lease).await;
    let key = "lease-drop-during-write";
    let answer = dropped_during_write(&app, key).await;
    assert_eq!(answer.status(), 500);
    assert_eq!(problem_slug(answer).await, "internal");
    assert_eq!(app.record(key).await, Some(1), "released");
    assert_eq!(app.notes(key).await, Vec::<String>::new());
    let id = created_id(app.post(key, key).await).await;
    assert_eq!(app.notes(key).await, [id]);
}

/// Lease mode as served: the note's transaction's connection drops before the response is
/// stored in it. Nothing committed: 503, the claim released on another connection, and the
/// retry executes once.
#[idemkey_test_support::test(flavor = "multi_thread", worker_threads = 2, needs = [postgres])]
async fn lease_drop_before_the_completion_in_the_notes_transaction_releases() {
    let app = app(Mode::Lease).await;
    let key = "lease-tx-drop-before-complete";
    let answer = dropped_at(&app, key, Point::BeforeComplete, IN_TRANSACTION).await;
    assert_eq!(answer.status(), 503);
    assert_eq!(problem_slug(answer).await, "store-unavailable");
    assert_eq!(app.notes(key).await, Vec::<String>::new(), "rolled back");
    assert_eq!(app.record(key).await, Some(1), "released");
    let id = created_id(app.post(key, key).await).await;
    assert_eq!(app.notes(key).await, [id]);
}

/// Lease mode as served: the note's transaction's connection drops before its `COMMIT` (the
/// record completed in it). The client is told the outcome is unknown; the record is left to
/// its lease, since the commit might have landed. (Here it did not: after the lease the
/// retry executes, once, with the same note id, derived from the record.)
#[idemkey_test_support::test(flavor = "multi_thread", worker_threads = 2, needs = [postgres])]
async fn lease_drop_at_the_commit_of_the_notes_transaction_is_outcome_unknown() {
    let app = app(Mode::Lease).await;
    let key = "lease-tx-drop-at-commit";
    let answer = dropped_at(&app, key, Point::BeforeCommit, IN_TRANSACTION).await;
    assert_eq!(answer.status(), 500);
    assert_eq!(problem_slug(answer).await, "outcome-unknown");
    assert_eq!(app.notes(key).await, Vec::<String>::new(), "not committed");
    assert_eq!(app.record(key).await, Some(0), "left to its lease");
    let db = &app.db;
    wait_until("the lease to expire", 6000, || async {
        !db.lease_alive(key).await
    })
    .await;
    let id = created_id(app.post(key, key).await).await;
    let replay = app.post(key, key).await;
    assert_eq!(replay.headers()["idempotent-replayed"], "true");
    assert_eq!(created_id(replay).await, id);
    assert_eq!(app.notes(key).await, [id], "{key}: one note");
}

/// Holds the note's insert inside the database, terminates its connection, and returns the
/// answer.
async fn dropped_during_write(app: &App, key: &str) -> reqwest::Response {
    let hold = Hold::install(&app.db, key).await;
    let request = tokio::spawn(app.post_owned(key));
    let pid = Hold::waiter(&app.db).await;
    let condition = format!("pid = {pid}");
    assert_eq!(terminate(&app.db, &condition).await, 1);
    hold.release().await;
    request.await.unwrap()
}
