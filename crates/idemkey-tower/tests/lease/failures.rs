//! Responses that are not stored, and a store that fails (behaviour §6, §10).

use std::sync::atomic::Ordering;
use std::time::Duration;

use idemkey_tower::Config;

use crate::common::{App, Fail, send, wait_for};

#[tokio::test]
async fn a_5xx_releases_the_claim_and_the_retry_runs_with_the_same_derived_keys() {
    let app = App::start(Config::default()).await;
    let first = send(app.post("/flaky", Some("k"))).await;
    assert_eq!(first.status, 500);
    assert_eq!(first.body, "upstream failed");
    let retry = send(app.post("/flaky", Some("k"))).await;
    assert_eq!(retry.status, 201);
    assert!(!retry.replayed());
    let again = send(app.post("/flaky", Some("k"))).await;
    assert!(again.replayed());
    assert_eq!(app.ctx.runs(), 2);
    let derived = app.ctx.derived.lock().unwrap().clone();
    assert_eq!(derived.len(), 2);
    assert_eq!(derived[0], derived[1]);
    assert_eq!(derived[0].len(), 64);
}

#[tokio::test]
async fn a_panicking_handler_gets_a_500_problem_and_the_claim_is_released() {
    let app = App::start(Config::default()).await;
    send(app.post("/panic", Some("k")))
        .await
        .assert_problem(500, "handler-failed");
    let retry = send(app.post("/panic", Some("k"))).await;
    assert_eq!(retry.status, 201);
    assert!(!retry.replayed());
    assert_eq!(app.ctx.runs(), 2);
}

#[tokio::test]
async fn a_rejection_marked_not_executed_frees_the_key_for_a_corrected_request() {
    let app = App::start(Config::default()).await;
    let invalid = send(app.json("/validate", "k", r#"{"name":"x"}"#)).await;
    assert_eq!(invalid.status, 400);
    assert_eq!(invalid.body, "title is required");
    let valid = send(app.json("/validate", "k", r#"{"title":"x"}"#)).await;
    assert_eq!(valid.status, 201);
    assert!(!valid.replayed());
    assert!(
        send(app.json("/validate", "k", r#"{"title":"x"}"#))
            .await
            .replayed()
    );
    assert_eq!(app.ctx.runs(), 2);
}

#[tokio::test]
async fn not_executed_keeps_a_record_that_an_earlier_attempt_ran_under() {
    let app = App::start(Config::default()).await;
    let body = r#"{"title":"x"}"#;
    assert_eq!(send(app.json("/shaky", "k", body)).await.status, 502);
    assert_eq!(send(app.json("/shaky", "k", body)).await.status, 400);
    // The first attempt may have had effects under the record's derived keys: keep it.
    let other = send(app.json("/shaky", "k", r#"{"title":"y"}"#)).await;
    other.assert_problem(422, "key-reused");
    let retry = send(app.json("/shaky", "k", body)).await;
    assert_eq!(retry.status, 201);
    assert_eq!(app.ctx.runs(), 3);
    let derived = app.ctx.derived.lock().unwrap().clone();
    assert!(derived.iter().all(|key| *key == derived[0]));
}

#[tokio::test]
async fn a_store_failure_before_execution_is_503_and_nothing_runs() {
    let app = App::start(Config::default()).await;
    app.store.fail_claims(Fail::Unavailable);
    let reply = send(app.post("/notes", Some("k"))).await;
    reply.assert_problem(503, "store-unavailable");
    assert_eq!(reply.header("retry-after"), Some("1"));
    assert_eq!(app.ctx.runs(), 0);
}

/// A claim that waited (for the writer, a connection, a lock) while the owner's heartbeat
/// lapsed: other processes may take it over the moment it is made, so nothing runs under it.
/// The claim is held inside the store while beats fail for longer than the grace.
#[tokio::test]
async fn a_claim_granted_after_its_owner_lapsed_is_given_back_and_nothing_runs() {
    const GRACE: Duration = Duration::from_millis(200);
    let app = App::start(Config::default().owner_grace(GRACE)).await;
    let hooks = &app.store.hooks;
    hooks.hold_next_claim.store(true, Ordering::SeqCst);
    let first = tokio::spawn(send(app.post("/notes", Some("k"))));
    wait_for("the claim", &hooks.claim_reached).await;
    hooks.failing_beats.store(true, Ordering::SeqCst);
    tokio::time::sleep(GRACE * 2).await;
    hooks.claim_go.raise(1);
    let reply = first.await.unwrap();
    reply.assert_problem(503, "store-unavailable");
    assert_eq!(app.ctx.runs(), 0, "nothing ran under the lapsed claim");
    wait_for("the claim given back", &hooks.releases).await;
    // Beats get through again: the key is free (a kept claim of this live owner would answer
    // 409 in flight until its lease ends), so the retry runs once.
    hooks.failing_beats.store(false, Ordering::SeqCst);
    let retry = loop {
        let reply = send(app.post("/notes", Some("k"))).await;
        if reply.status != 503 {
            break reply;
        }
        tokio::time::sleep(GRACE / 4).await;
    };
    assert_eq!(retry.status, 201, "body: {:?}", retry.body);
    assert_eq!(app.ctx.runs(), 1);
}

/// A claim that stands although its reply was lost: it names this live process, whose
/// heartbeat would keep it for the whole lease (30 s). Nothing ran under it, so the process
/// gives it back, and the retry executes at once, under the same record.
#[tokio::test]
async fn a_claim_whose_reply_was_lost_is_given_back_and_the_retry_executes() {
    let app = App::start(Config::default().owner_grace(Duration::from_secs(1))).await;
    let hooks = &app.store.hooks;
    hooks.lost_claim_replies.store(1, Ordering::SeqCst);
    send(app.post("/notes", Some("k")))
        .await
        .assert_problem(503, "store-unavailable");
    assert_eq!(app.ctx.runs(), 0);
    wait_for("the claim given back", &hooks.releases).await;
    let retry = send(app.post("/notes", Some("k"))).await;
    assert_eq!(retry.status, 201, "body: {:?}", retry.body);
    assert!(!retry.replayed());
    assert_eq!(app.ctx.runs(), 1);
}

/// Without an owner the failed claim could be another process's, which is never touched: it
/// is left to its lease.
#[tokio::test]
async fn a_lost_claim_reply_without_an_owner_waits_for_its_lease() {
    let app = App::start(Config::default()).await;
    app.store
        .hooks
        .lost_claim_replies
        .store(1, Ordering::SeqCst);
    send(app.post("/notes", Some("k")))
        .await
        .assert_problem(503, "store-unavailable");
    send(app.post("/notes", Some("k")))
        .await
        .assert_problem(409, "request-in-flight");
    assert_eq!(app.ctx.runs(), 0);
}

#[tokio::test]
async fn a_lost_commit_reply_is_outcome_unknown() {
    let app = App::start(Config::default()).await;
    app.store.fail_claims(Fail::OutcomeUnknown);
    let reply = send(app.post("/notes", Some("k"))).await;
    reply.assert_problem(500, "outcome-unknown");
    assert_eq!(app.ctx.runs(), 0);
}

#[tokio::test]
async fn a_failed_completion_is_retried_within_the_lease() {
    let app = App::start(Config::default()).await;
    app.store.hooks.failing_completes.store(2, Ordering::SeqCst);
    let first = send(app.post("/notes", Some("k"))).await;
    assert_eq!(first.status, 201);
    let retry = send(app.post("/notes", Some("k"))).await;
    assert!(retry.replayed());
    assert_eq!(retry.body, first.body);
    assert_eq!(app.ctx.runs(), 1);
}

#[tokio::test]
async fn when_completion_keeps_failing_the_response_is_still_returned() {
    let app = App::start(Config::default()).await;
    app.store
        .hooks
        .failing_completes
        .store(usize::MAX, Ordering::SeqCst);
    let first = send(app.post("/notes", Some("k"))).await;
    assert_eq!(first.status, 201);
    assert!(!first.replayed());
    // The record stays in flight until its lease expires (behaviour §10).
    let retry = send(app.post("/notes", Some("k"))).await;
    retry.assert_problem(409, "request-in-flight");
    assert_eq!(app.ctx.runs(), 1);
}
