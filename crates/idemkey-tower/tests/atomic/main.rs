//! Atomic mode over real sockets on a SQLite file: one transaction holds the claim, the
//! handler's note and the stored response, whatever the client does.
#![allow(clippy::unwrap_used)]

mod lease_tx;
mod logs;
mod misconfig;
mod server;

use std::sync::Arc;
use std::time::Duration;

use idemkey_sqlx::failpoints::Point;
use server::{Behaviour, TestServer};

#[tokio::test]
async fn executes_once_then_replays() {
    let s = TestServer::start(None).await;
    let first = s.post("k", Behaviour::Create).await;
    assert_eq!(first.status(), 201);
    let body = first.text().await.unwrap();
    let retry = s.post("k", Behaviour::Create).await;
    assert_eq!(retry.headers()["idempotent-replayed"], "true");
    assert_eq!(retry.text().await.unwrap(), body);
    assert_eq!(s.counts().await, (1, 1));
}

#[tokio::test]
async fn unstored_status_panic_and_not_executed_roll_back() {
    let s = TestServer::start(None).await;
    for (behaviour, status) in [
        (Behaviour::Fail500, 500),
        (Behaviour::Panic, 500),
        (Behaviour::Reject, 400),
    ] {
        let response = s.post("k", behaviour).await;
        assert_eq!(response.status(), status, "{behaviour:?}");
        assert_eq!(
            s.counts().await,
            (0, 0),
            "{behaviour:?}: no note, no record"
        );
    }
    // Nothing was stored: the same key executes afresh.
    assert_eq!(s.post("k", Behaviour::Create).await.status(), 201);
    assert_eq!(s.counts().await, (1, 1));
}

/// A panicking handler answers the problem it answers in lease mode (behaviour §10).
#[tokio::test]
async fn a_panicking_handler_is_handler_failed_as_in_lease_mode() {
    let s = TestServer::start(None).await;
    let response = s.post("k", Behaviour::Panic).await;
    assert_eq!(response.status(), 500);
    let problem: serde_json::Value = serde_json::from_str(&response.text().await.unwrap()).unwrap();
    let type_uri = problem["type"].as_str().unwrap();
    assert!(type_uri.ends_with("#handler-failed"), "{type_uri}");
    assert_eq!(s.counts().await, (0, 0), "rolled back");
}

#[tokio::test]
async fn requests_without_a_key_run_in_a_transaction_unrecorded() {
    let s = TestServer::start(None).await;
    assert_eq!(s.post_without_key(Behaviour::Create).await.status(), 201);
    assert_eq!(s.post_without_key(Behaviour::Fail500).await.status(), 500);
    assert_eq!(s.counts().await, (1, 0));
}

#[tokio::test]
async fn a_client_gone_mid_handler_does_not_abandon_the_transaction() {
    let s = TestServer::start(None).await;
    let client = s.post_in_background("k", Behaviour::WaitAfterInsert);
    s.handler_entered.notified().await;
    client.abort();
    assert!(client.await.unwrap_err().is_cancelled());
    s.release_handler.notify_one();
    // The exchange goes on without its client and commits; the retry replays it.
    let retry = s.post("k", Behaviour::Create).await;
    assert_eq!(retry.status(), 201);
    assert_eq!(retry.headers()["idempotent-replayed"], "true");
    assert_eq!(s.counts().await, (1, 1));
}

/// The client goes away while the exchange is paused at each step; the exchange still ends
/// deterministically (here: commits), and no connection returns to the pool with a
/// transaction open (the retry would wait on its lock and answer 503).
#[tokio::test]
async fn cancellation_at_each_step_commits_or_rolls_back_cleanly() {
    for point in [
        Point::AfterLookup,
        Point::BeforeClaim,
        Point::BeforeComplete,
        Point::BeforeCommit,
    ] {
        let reached = Arc::new(tokio::sync::Notify::new());
        let release = Arc::new(tokio::sync::Notify::new());
        let s = TestServer::start(Some(server::pause_at(
            point,
            reached.clone(),
            release.clone(),
        )))
        .await;
        let client = tokio::spawn({
            let s = s.clone();
            async move { s.post("k", Behaviour::Create).await }
        });
        reached.notified().await;
        client.abort();
        assert!(client.await.unwrap_err().is_cancelled());
        release.notify_one();
        let retry = tokio::time::timeout(Duration::from_secs(30), s.post("k", Behaviour::Create))
            .await
            .unwrap();
        assert_eq!(retry.status(), 201, "{point:?}");
        if point != Point::AfterLookup {
            // Past the claim, the abandoned exchange holds the write lock: it commits first.
            assert_eq!(retry.headers()["idempotent-replayed"], "true", "{point:?}");
        }
        assert_eq!(s.counts().await, (1, 1), "{point:?}");
    }
}
