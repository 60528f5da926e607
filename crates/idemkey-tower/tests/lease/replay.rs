//! What is stored and replayed, and what is rejected (behaviour §3, §4, §6, §7).

use http::StatusCode;
use idemkey_core::{Key, MemoryStore, Operation, RecordState, Scope, Store};
use idemkey_tower::{Config, DefaultOperation};

use crate::common::{App, send};

#[tokio::test]
async fn an_identical_retry_replays_the_stored_response() {
    let app = App::start(Config::default()).await;
    let request = || {
        app.json("/notes", "k1", r#"{"title":"x"}"#)
            .header("x-request-id", "req-1")
    };
    let first = send(request()).await;
    assert_eq!(first.status, 201);
    assert!(!first.replayed());
    assert_eq!(first.header("set-cookie"), Some("session=1"));

    let retry = send(request()).await;
    assert_eq!(retry.status, 201);
    assert!(retry.replayed());
    assert_eq!(retry.header("location"), Some("/notes/1"));
    assert_eq!(retry.header("content-type"), Some("application/json"));
    assert_eq!(retry.body, first.body);
    assert_eq!(
        retry.header("content-length"),
        Some(&*first.body.len().to_string())
    );
    // Per-request and never-stored headers are not replayed.
    assert_eq!(retry.header("set-cookie"), None);
    assert_eq!(retry.header("x-request-id"), None);
    assert_eq!(app.ctx.runs(), 1);

    // The record keeps the id of the request that created it.
    let operation = Operation::new("POST /notes", "v1");
    let scope = Scope::new("a", &operation, "k1".parse::<Key>().unwrap());
    let record = app.store.inner.lookup(&scope).await.unwrap().unwrap();
    assert_eq!(record.request_id.as_deref(), Some("req-1"));
    assert!(matches!(record.state, RecordState::Completed(_)));
}

#[tokio::test]
async fn a_different_request_under_the_same_key_is_rejected() {
    let app = App::start(Config::default()).await;
    send(app.json("/notes", "k", r#"{"title":"x"}"#)).await;
    let read = app.store.hooks.lookups.count();
    let other = send(app.json("/notes", "k", r#"{"title":"y"}"#)).await;
    other.assert_problem(422, "key-reused");
    assert_eq!(app.ctx.runs(), 1);
    // Answered from the one lookup: a key reused over and over costs one read each.
    assert_eq!(app.store.hooks.lookups.count() - read, 1, "one read");
}

#[tokio::test]
async fn the_mismatch_status_is_configurable() {
    let app = App::start(Config::default().mismatch_status(StatusCode::CONFLICT)).await;
    send(app.json("/notes", "k", r#"{"title":"x"}"#)).await;
    let other = send(app.json("/notes", "k", r#"{"title":"y"}"#)).await;
    other.assert_problem(409, "key-reused");
    assert_eq!(app.ctx.runs(), 1);
}

#[tokio::test]
async fn json_with_another_key_order_and_whitespace_is_the_same_request() {
    let app = App::start(Config::default()).await;
    send(app.json("/notes", "k", r#"{"title":"x","tags":[1,2]}"#)).await;
    let retry = send(app.json("/notes", "k", "{ \"tags\": [1, 2],\n  \"title\": \"x\" }")).await;
    assert!(retry.replayed());
    assert_eq!(app.ctx.runs(), 1);
}

#[tokio::test]
async fn a_business_4xx_is_stored() {
    let app = App::start(Config::default()).await;
    let first = send(app.post("/gone", Some("k"))).await;
    let retry = send(app.post("/gone", Some("k"))).await;
    assert_eq!((first.status, retry.status), (410, 410));
    assert!(retry.replayed());
    assert_eq!(retry.body, "the offer has ended");
    assert_eq!(app.ctx.runs(), 1);
}

/// A 404 rejects the request as sent (behaviour §6): not stored, and the key is free again
/// for a corrected request, even one with another body.
#[tokio::test]
async fn a_rejection_4xx_is_not_stored_and_frees_the_key() {
    let app = App::start(Config::default()).await;
    let first = send(app.post("/missing", Some("k"))).await;
    let retry = send(app.post("/missing", Some("k"))).await;
    assert_eq!((first.status, retry.status), (404, 404));
    assert!(!retry.replayed());
    assert_eq!(app.ctx.runs(), 2);
    // Another body under the same key is no key reuse: nothing was kept of the first.
    let other = send(app.post("/missing", Some("k")).body("another parent")).await;
    assert_eq!(other.status, 404);
    assert_eq!(app.ctx.runs(), 3);
}

#[tokio::test]
async fn a_body_over_the_limit_is_rejected_and_the_key_stays_usable() {
    let app = App::start(Config::default().request_body_limit(64)).await;
    let big = format!(r#"{{"title":"{}"}}"#, "x".repeat(100));
    send(app.json("/notes", "k", &big))
        .await
        .assert_problem(413, "payload-too-large");
    assert_eq!(app.ctx.runs(), 0);
    let small = send(app.json("/notes", "k", r#"{"title":"x"}"#)).await;
    assert_eq!(small.status, 201);
    assert!(!small.replayed());
}

#[tokio::test]
async fn a_response_over_the_storage_limit_is_replayed_without_its_body() {
    let app = App::start(Config::default().storage_limit(16)).await;
    let first = send(app.post("/big", Some("k"))).await;
    assert_eq!(first.status, 201);
    assert_eq!(first.body.len(), 100);
    assert_eq!(first.header("idempotent-body-omitted"), None);

    let retry = send(app.post("/big", Some("k"))).await;
    assert_eq!(retry.status, 201);
    assert!(retry.replayed());
    assert_eq!(retry.header("idempotent-body-omitted"), Some("true"));
    assert_eq!(retry.header("content-type"), Some("text/plain"));
    assert!(retry.body.is_empty());
    assert_eq!(app.ctx.runs(), 1);
}

#[tokio::test]
async fn a_streamed_response_of_unknown_length_is_replayed_without_its_body() {
    let app = App::start(Config::default()).await;
    let first = send(app.post("/stream", Some("k"))).await;
    assert_eq!(first.status, 200);
    assert_eq!(first.body, "one two three");

    let retry = send(app.post("/stream", Some("k"))).await;
    assert_eq!(retry.status, 200);
    assert!(retry.replayed());
    assert_eq!(retry.header("idempotent-body-omitted"), Some("true"));
    assert!(retry.body.is_empty());
    assert_eq!(app.ctx.runs(), 1);
}

#[tokio::test]
async fn a_version_bump_rejects_retries_unless_declared_compatible() {
    let memory = MemoryStore::new();
    let v1 = App::start_with(Config::default(), memory.clone(), |r| r).await;
    send(v1.post("/notes", Some("k"))).await;

    let v2 = Config::default().operation(DefaultOperation::new("v2"));
    let v2 = App::start_with(v2, memory.clone(), |r| r).await;
    send(v2.post("/notes", Some("k")))
        .await
        .assert_problem(422, "key-reused");

    let compatible = Config::default().operation(DefaultOperation::new("v2").compatible_with("v1"));
    let compatible = App::start_with(compatible, memory, |r| r).await;
    assert!(send(compatible.post("/notes", Some("k"))).await.replayed());
    assert_eq!(v1.ctx.runs() + v2.ctx.runs() + compatible.ctx.runs(), 1);
}
