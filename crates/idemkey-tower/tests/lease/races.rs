//! Duplicates in flight, callers that go away, expired leases (behaviour §5, §6).
//!
//! The gated handler blocks until the test hands out a permit, and the test hands it out only
//! once what it tests is under way (a handler entered, a duplicate waiting, a claim held), so
//! the interleaving each test is named for is forced; the one path left to chance says so.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use http::StatusCode;
use idemkey_core::{ExpiredLease, ManualClock, MemoryStore};
use idemkey_tower::Config;
use tokio::sync::Barrier;
use tokio::task::JoinSet;
use tower_http::timeout::TimeoutLayer;

use crate::common::{App, Reply, send, wait_for, wait_until};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_duplicate_of_a_running_request_gets_409_and_a_different_one_422() {
    let app = App::start(Config::default()).await;
    let first = tokio::spawn(send(app.post("/gated", Some("k"))));
    wait_for("the handler", &app.ctx.entered).await;

    let duplicate = send(app.post("/gated", Some("k"))).await;
    duplicate.assert_problem(409, "request-in-flight");
    let retry_after: u64 = duplicate.header("retry-after").unwrap().parse().unwrap();
    assert!(retry_after >= 1);
    let different = send(app.json("/gated", "k", r#"{"other":true}"#)).await;
    different.assert_problem(422, "key-reused");

    app.ctx.release.raise(1);
    let first = first.await.unwrap();
    assert_eq!(first.status, 201);
    assert!(!first.replayed());
    assert_eq!(app.ctx.runs(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_duplicate_gets_the_replay_once_the_original_finishes() {
    let app = App::start(Config::default().wait_in_flight(Duration::from_secs(60))).await;
    let first = tokio::spawn(send(app.post("/gated", Some("k"))));
    wait_for("the handler", &app.ctx.entered).await;
    let duplicate = tokio::spawn(send(app.post("/gated", Some("k"))));
    // The duplicate's claim step runs in a task of its own (after its lookup, whose check of
    // the execution would count as a waiter for an instant); there it waits for the original
    // in this process.
    let executions = app.layer.executions();
    wait_until("the duplicate's claim step", || executions.len() == 2).await;
    let layer = &app.layer;
    wait_until("the duplicate to wait", || layer.waiting_duplicates() == 1).await;
    assert_eq!(
        app.store.hooks.lookups.count(),
        1,
        "the original's lookup only"
    );

    app.ctx.release.raise(1);
    let (first, duplicate) = (first.await.unwrap(), duplicate.await.unwrap());
    assert_eq!((first.status, duplicate.status), (201, 201));
    assert!(!first.replayed());
    assert!(duplicate.replayed());
    assert_eq!(duplicate.body, first.body);
    assert_eq!(app.ctx.runs(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handler_finishes_and_is_stored_when_the_client_goes_away() {
    let app = App::start(Config::default()).await;
    let client = tokio::spawn(send(app.post("/gated", Some("k"))));
    wait_for("the handler", &app.ctx.entered).await;
    client.abort();
    wait_for("the server to drop the request", &app.ctx.dropped).await;

    app.ctx.release.raise(1);
    wait_for("the completion", &app.store.hooks.completes).await;
    let retry = send(app.post("/gated", Some("k"))).await;
    assert_eq!(retry.status, 201);
    assert!(retry.replayed());
    assert_eq!(retry.json()["n"], 1);
    assert_eq!(app.ctx.runs(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handler_finishes_and_is_stored_when_a_timeout_layer_gives_up() {
    let timeout =
        TimeoutLayer::with_status_code(StatusCode::REQUEST_TIMEOUT, Duration::from_secs(1));
    let app = App::start_with(Config::default(), MemoryStore::new(), |r| r.layer(timeout)).await;
    let timed_out = send(app.post("/gated", Some("k"))).await;
    assert_eq!(timed_out.status, 408);
    wait_for("the handler", &app.ctx.entered).await;

    app.ctx.release.raise(1);
    wait_for("the completion", &app.store.hooks.completes).await;
    let retry = send(app.post("/gated", Some("k"))).await;
    assert_eq!(retry.status, 201);
    assert!(retry.replayed());
    assert_eq!(app.ctx.runs(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_lease_is_taken_over_and_the_old_executor_cannot_complete() {
    let clock = ManualClock::at(1_000_000);
    let memory = MemoryStore::with_clock(clock.clone());
    let app = App::start_with(Config::default(), memory.clone(), |r| r).await;
    // The takeover comes from another instance: this one knows its executor is alive.
    let other = app.sibling(Config::default(), memory).await;
    let first = tokio::spawn(send(app.post("/gated", Some("k"))));
    wait_for("the first handler", &app.ctx.entered).await;
    clock.advance(Duration::from_secs(31));
    let second = tokio::spawn(send(other.post("/gated", Some("k"))));
    wait_for("the second handler", &app.ctx.entered).await;

    app.ctx.release.raise(2);
    let (first, second) = (first.await.unwrap(), second.await.unwrap());
    assert_eq!((first.status, second.status), (201, 201));
    assert!(!first.replayed() && !second.replayed());
    let retry = send(app.post("/gated", Some("k"))).await;
    assert!(retry.replayed());
    assert_eq!(
        retry.body, second.body,
        "the new owner's response is the stored one"
    );
    assert_eq!(app.ctx.runs(), 2);
    let derived = app.ctx.derived.lock().unwrap().clone();
    assert_eq!(derived[0], derived[1], "the record id survives a takeover");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_lease_can_answer_previous_attempt_unknown() {
    let clock = ManualClock::at(1_000_000);
    let memory = MemoryStore::with_clock(clock.clone());
    let config = Config::default().expired_lease(ExpiredLease::PreviousAttemptUnknown);
    let app = App::start_with(config.clone(), memory.clone(), |r| r).await;
    let other = app.sibling(config, memory).await;
    let first = tokio::spawn(send(app.post("/gated", Some("k"))));
    wait_for("the first handler", &app.ctx.entered).await;
    clock.advance(Duration::from_secs(31));

    let second = send(other.post("/gated", Some("k"))).await;
    second.assert_problem(500, "previous-attempt-unknown");
    app.ctx.release.raise(1);
    assert_eq!(first.await.unwrap().status, 201);
    let third = send(app.post("/gated", Some("k"))).await;
    third.assert_problem(500, "previous-attempt-unknown");
    assert!(third.replayed());
    assert_eq!(app.ctx.runs(), 1);
}

/// The execution that wins is held at the gate until every other request of the storm has
/// been answered, so none of them can be a replay: each must be a 409. A second execution
/// would block at the gate too, and the test would miss a reply.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_storm_of_identical_requests_executes_once() {
    const STORM: usize = 32;
    let app = App::start(Config::default()).await;
    let barrier = Arc::new(Barrier::new(STORM));
    let mut replies = JoinSet::new();
    for _ in 0..STORM {
        let request = app.json("/gated", "storm", r#"{"title":"x"}"#);
        let barrier = barrier.clone();
        replies.spawn(async move {
            barrier.wait().await;
            send(request).await
        });
    }
    wait_for("the execution", &app.ctx.entered).await;
    for _ in 1..STORM {
        next(&mut replies)
            .await
            .assert_problem(409, "request-in-flight");
    }
    assert_eq!(app.ctx.runs(), 1);

    app.ctx.release.raise(1);
    let executed = next(&mut replies).await;
    assert_eq!(executed.status, 201);
    assert!(!executed.replayed());
    assert_eq!(executed.json()["n"], 1);
    let retry = send(app.json("/gated", "storm", r#"{"title":"x"}"#)).await;
    assert!(retry.replayed());
    assert_eq!(retry.body, executed.body);
    assert_eq!(app.ctx.runs(), 1);
}

/// The next reply of `replies` to come; fails the test instead of hanging if none does.
async fn next(replies: &mut JoinSet<Reply>) -> Reply {
    let reply = tokio::time::timeout(Duration::from_secs(20), replies.join_next()).await;
    let reply = reply.expect("a reply").expect("a request left");
    reply.expect("the request's task did not panic")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_heartbeat_keeps_a_long_handler_from_being_taken_over() {
    let clock = ManualClock::at(1_000_000);
    let memory = MemoryStore::with_clock(clock.clone());
    let config = Config::default().lease(Duration::from_millis(300));
    let app = App::start_with(config, memory, |r| r).await;
    let first = tokio::spawn(send(app.post("/gated", Some("k"))));
    wait_for("the handler", &app.ctx.entered).await;
    // By the store's clock the lease has run out; only a renewal after this keeps it.
    clock.advance(Duration::from_secs(10));
    let renewed = app.store.hooks.extended.notified();
    tokio::time::timeout(Duration::from_secs(20), renewed)
        .await
        .expect("a heartbeat");

    let duplicate = send(app.post("/gated", Some("k"))).await;
    duplicate.assert_problem(409, "request-in-flight");
    app.ctx.release.raise(1);
    assert_eq!(first.await.unwrap().status, 201);
    assert!(send(app.post("/gated", Some("k"))).await.replayed());
    assert_eq!(app.ctx.runs(), 1);
}

/// Duplicates of a request this instance is executing are answered without the store (a storm
/// would otherwise queue for the store's connections): 32 of them, released together while the
/// original is held, all get 409 and the store sees no claim or lookup of theirs. A different
/// request under the key still goes to the store, which rejects it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn duplicates_of_a_local_execution_are_answered_without_the_store() {
    const STORM: usize = 32;
    let app = App::start(Config::default()).await;
    let first = tokio::spawn(send(app.post("/gated", Some("k"))));
    wait_for("the handler", &app.ctx.entered).await;
    let claims = app.store.hooks.claims.load(Ordering::SeqCst);
    let lookups = app.store.hooks.lookups.count();

    let barrier = Arc::new(Barrier::new(STORM));
    let tasks: Vec<_> = (0..STORM)
        .map(|_| {
            let request = app.post("/gated", Some("k"));
            let barrier = barrier.clone();
            tokio::spawn(async move {
                barrier.wait().await;
                send(request).await
            })
        })
        .collect();
    for task in tasks {
        let reply = task.await.unwrap();
        reply.assert_problem(409, "request-in-flight");
        assert!(reply.header("retry-after").is_some());
    }
    assert_eq!(app.store.hooks.claims.load(Ordering::SeqCst), claims);
    assert_eq!(app.store.hooks.lookups.count(), lookups);
    let different = send(app.json("/gated", "k", r#"{"other":true}"#)).await;
    different.assert_problem(422, "key-reused");

    app.ctx.release.raise(1);
    assert_eq!(first.await.unwrap().status, 201);
    let retry = send(app.post("/gated", Some("k"))).await;
    assert!(retry.replayed());
    assert_eq!(app.ctx.runs(), 1);
}

/// Duplicates of a request that is claiming neither read nor claim (a storm arriving at once
/// would otherwise queue for the store's connections, to find a claim the store can only
/// refuse): the first is held inside its claim, 16 duplicates arrive, and none of them asks
/// the store anything. Each either waits for the first's claim (its turn, taken before its
/// lookup) or, arriving once it was granted, finds the execution: 409 either way. Once it
/// ends, a retry replays. (Which of the two each duplicate meets is not forced here; the
/// unit tests of `lease/begin.rs` force the wait.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn duplicates_of_a_request_claiming_neither_read_nor_claim() {
    const STORM: usize = 16;
    let app = App::start(Config::default()).await;
    app.store
        .hooks
        .hold_next_claim
        .store(true, Ordering::SeqCst);
    let first = tokio::spawn(send(app.post("/gated", Some("k"))));
    wait_for("the first claim", &app.store.hooks.claim_reached).await;
    assert_eq!(app.store.hooks.lookups.count(), 1, "the first's own lookup");
    let duplicates: Vec<_> = (0..STORM)
        .map(|_| tokio::spawn(send(app.post("/gated", Some("k")))))
        .collect();
    app.store.hooks.claim_go.raise(1);
    wait_for("the handler", &app.ctx.entered).await;
    for duplicate in duplicates {
        duplicate
            .await
            .unwrap()
            .assert_problem(409, "request-in-flight");
    }
    assert_eq!(app.store.hooks.claims.load(Ordering::SeqCst), 1);
    assert_eq!(app.store.hooks.lookups.count(), 1, "no duplicate read");
    app.ctx.release.raise(1);
    assert_eq!(first.await.unwrap().status, 201);
    assert!(send(app.post("/gated", Some("k"))).await.replayed());
    assert_eq!(app.ctx.runs(), 1);
}
