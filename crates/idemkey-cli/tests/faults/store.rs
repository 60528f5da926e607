//! Faults at each store step (claim, business write, complete, release, commit), injected
//! with idemkey-sqlx's test-only failpoints into the notes service, seen through HTTP, on
//! SQLite and PostgreSQL.
//!
//! - Before execution a fault is 503 `store-unavailable` (`Retry-After`), and nothing runs.
//! - Atomic mode never leaves a record without its note or a note without its record.
//! - Lease mode never leaves a claim beyond its lease: after it, a retry takes over.
//! - Once the fault clears, the retry executes exactly once, and replays from then on.

use std::time::Duration;

use idemkey_notes::Mode;
use idemkey_sqlx::failpoints::Point;
use idemkey_test_support::db::Backend;
use idemkey_test_support::process::notes::problem_slug;
use idemkey_test_support::wait_until;

use crate::app::{Action, App, created_id};

/// Long enough that an immediate retry lands inside it (checked with the database's clock,
/// never assumed); short enough to wait out.
const LEASE: Duration = Duration::from_secs(4);

macro_rules! on_both_backends {
    ($($case:ident),* $(,)?) => {
        mod sqlite { $(
            #[idemkey_test_support::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $case() { super::$case(super::Backend::Sqlite).await }
        )* }
        mod postgres { $(
            #[idemkey_test_support::test(flavor = "multi_thread", worker_threads = 2, needs = [postgres])]
            async fn $case() { super::$case(super::Backend::Postgres).await }
        )* }
    };
}

on_both_backends!(
    atomic_store_faults_are_503_and_leave_nothing,
    atomic_failed_business_write_rolls_back,
    lease_claim_faults_are_503_and_nothing_runs,
    lease_failed_business_write_releases_the_claim,
    lease_failed_complete_holds_the_key_only_until_the_lease_expires,
    lease_failed_release_holds_the_key_only_until_the_lease_expires,
    lease_completion_faults_in_the_notes_transaction_roll_back_and_release,
);

/// A 503 `store-unavailable` with `Retry-After`.
async fn assert_unavailable(response: reqwest::Response, what: &str) {
    assert_eq!(response.status(), 503, "{what}");
    assert_eq!(response.headers()["retry-after"], "1", "{what}");
    assert_eq!(problem_slug(response).await, "store-unavailable", "{what}");
}

/// The retry executes once (a note of its own, the record completed), then replays.
async fn executes_once(app: &App, key: &str) -> String {
    let first = app.post(key, key).await;
    assert!(
        first.headers().get("idempotent-replayed").is_none(),
        "{key}"
    );
    let id = created_id(first).await;
    let replay = app.post(key, key).await;
    assert_eq!(replay.headers()["idempotent-replayed"], "true", "{key}");
    assert_eq!(created_id(replay).await, id, "{key}");
    assert_eq!(app.notes(key).await, [id.as_str()], "{key}: one note");
    assert_eq!(app.record(key).await, Some(2), "{key}: completed");
    id
}

async fn atomic_store_faults_are_503_and_leave_nothing(backend: Backend) {
    let app = App::start(backend, Mode::Atomic, LEASE).await;
    let points = [
        Point::AfterLookup,
        Point::BeforeClaim,
        Point::BeforeComplete,
        Point::BeforeCommit,
    ];
    for point in points {
        let key = format!("atomic-{point:?}");
        app.faults.arm(point, Action::Fail(1));
        assert_unavailable(app.post(&key, &key).await, &key).await;
        let left = (app.notes(&key).await, app.record(&key).await);
        assert_eq!(left, (vec![], None), "{key}: nothing half-written");
        executes_once(&app, &key).await;
    }
}

async fn atomic_failed_business_write_rolls_back(backend: Backend) {
    let app = App::start(backend, Mode::Atomic, LEASE).await;
    let key = "atomic-business-write";
    app.db.fail_inserts_titled(key).await;
    let failed = app.post(key, key).await;
    assert_eq!(failed.status(), 500);
    assert_eq!(problem_slug(failed).await, "internal");
    assert_eq!(
        (app.notes(key).await, app.record(key).await),
        (vec![], None)
    );
    app.db.allow_inserts().await;
    executes_once(&app, key).await;
}

async fn lease_claim_faults_are_503_and_nothing_runs(backend: Backend) {
    let app = App::start(backend, Mode::Lease, LEASE).await;
    // The claim is one statement that commits on its own: no `BeforeCommit` in lease mode.
    let key = "lease-BeforeClaim";
    app.faults.arm(Point::BeforeClaim, Action::Fail(1));
    assert_unavailable(app.post(key, key).await, key).await;
    let left = (app.notes(key).await, app.record(key).await);
    assert_eq!(left, (vec![], None), "{key}: no claim, no note");
    executes_once(&app, key).await;
}

async fn lease_failed_business_write_releases_the_claim(backend: Backend) {
    let app = App::start(backend, Mode::Lease, LEASE).await;
    let key = "lease-business-write";
    app.db.fail_inserts_titled(key).await;
    let failed = app.post(key, key).await;
    assert_eq!(failed.status(), 500);
    assert_eq!(problem_slug(failed).await, "internal");
    assert_eq!(app.record(key).await, Some(1), "released, not in flight");
    app.db.allow_inserts().await;
    executes_once(&app, key).await;
}

/// Completion keeps failing: the client still gets the handler's response (behaviour §10),
/// the key answers 409 while the lease lives, and after it a retry takes over and answers
/// with the same note (its id is derived from the record), which is then stored.
async fn lease_failed_complete_holds_the_key_only_until_the_lease_expires(backend: Backend) {
    let app = App::start_separate(backend, Mode::Lease, LEASE).await;
    let key = "lease-complete";
    app.faults
        .arm(Point::BeforeComplete, Action::Fail(usize::MAX));
    let id = created_id(app.post(key, key).await).await;
    assert_eq!(app.record(key).await, Some(0), "still in flight");
    held_until_the_lease_expires(&app, key).await;
    app.faults.disarm();
    assert_eq!(executes_once(&app, key).await, id, "the same note");
}

/// Lease mode as served, the response stored as the note's transaction's last statement: a
/// fault storing it or before its `COMMIT` rolls the note back, releases the claim and
/// answers 503 (nothing the client was told about exists); the retry executes once.
async fn lease_completion_faults_in_the_notes_transaction_roll_back_and_release(backend: Backend) {
    let app = App::start(backend, Mode::Lease, LEASE).await;
    for point in [Point::BeforeComplete, Point::BeforeCommit] {
        let key = format!("lease-tx-{point:?}");
        app.faults.arm(point, Action::Fail(1));
        assert_unavailable(app.post(&key, &key).await, &key).await;
        assert_eq!(
            app.notes(&key).await,
            Vec::<String>::new(),
            "{key}: rolled back"
        );
        assert_eq!(app.record(&key).await, Some(1), "{key}: released");
        executes_once(&app, &key).await;
    }
}

/// Releasing fails after a failed business write: the claim stays until its lease expires.
async fn lease_failed_release_holds_the_key_only_until_the_lease_expires(backend: Backend) {
    let app = App::start_separate(backend, Mode::Lease, LEASE).await;
    let key = "lease-release";
    app.db.fail_inserts_titled(key).await;
    app.faults
        .arm(Point::BeforeRelease, Action::Fail(usize::MAX));
    assert_eq!(app.post(key, key).await.status(), 500);
    assert_eq!(app.record(key).await, Some(0), "still in flight");
    app.db.allow_inserts().await;
    held_until_the_lease_expires(&app, key).await;
    app.faults.disarm();
    executes_once(&app, key).await;
}

/// A retry while the lease lives (by the database's clock, before and after it) is 409
/// `request-in-flight`; then waits, polling the database, until the lease has run out.
async fn held_until_the_lease_expires(app: &App, key: &str) {
    let notes = app.notes(key).await;
    let retry = app.post(key, key).await;
    let status = retry.status();
    if app.db.lease_alive(key).await {
        assert_eq!(status, 409, "{key}: the lease is alive");
        assert!(retry.headers().contains_key("retry-after"));
        assert_eq!(problem_slug(retry).await, "request-in-flight");
    } else {
        eprintln!("{key}: the lease ran out before the check; 409 not asserted");
    }
    assert_eq!(app.notes(key).await, notes, "{key}: the retry did not run");
    let db = &app.db;
    wait_until("the lease to expire", 6000, || async {
        !db.lease_alive(key).await
    })
    .await;
}
