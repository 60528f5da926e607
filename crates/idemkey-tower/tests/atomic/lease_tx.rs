//! Lease mode with `IdempotencyLayer::transactional`: the claim commits first, then the
//! handler's writes and the record's completion commit together, or not at all.

use std::sync::Arc;
use std::time::Duration;

use idemkey_sqlx::DEFAULT_BUSY_TIMEOUT;
use idemkey_tower::Config;

use crate::server::{Behaviour, Layer, TestServer};

async fn lease() -> TestServer {
    TestServer::start_with(Layer::LeaseTx, None).await
}

/// The first two cases again, on a service built with `Idempotency::new(..).transactional()`.
#[tokio::test]
async fn idempotency_new_is_transactional_too() {
    let s = TestServer::start_with(Layer::LeaseTxService, None).await;
    the_claim_commits_first_and_the_note_commits_with_its_record_on(&s).await;
    let s = TestServer::start_with(Layer::LeaseTxService, None).await;
    a_lease_lost_before_completion_rolls_the_handler_back_on(&s).await;
}

#[tokio::test]
async fn the_claim_commits_first_and_the_note_commits_with_its_record() {
    the_claim_commits_first_and_the_note_commits_with_its_record_on(&lease().await).await;
}

async fn the_claim_commits_first_and_the_note_commits_with_its_record_on(s: &TestServer) {
    let first = s.post_in_background("k", Behaviour::WaitAfterInsert);
    s.entered().await;
    // The handler has written its note and waits: the claim is committed, in flight, and
    // the note is not (a reader sees the record, not the note).
    assert_eq!(s.counts().await, (0, 1));
    assert_eq!(s.record().await.0, 0, "in flight");
    s.release_handler.notify_one();
    assert_eq!(first.await.unwrap().status(), 201);
    assert_eq!(s.counts().await, (1, 1));
    assert_eq!(s.record().await.0, 2, "completed");
    let retry = s.post("k", Behaviour::Create).await;
    assert_eq!(retry.status(), 201);
    assert_eq!(retry.headers()["idempotent-replayed"], "true");
    assert_eq!(s.counts().await, (1, 1));
}

#[tokio::test]
async fn a_lease_lost_before_completion_rolls_the_handler_back() {
    a_lease_lost_before_completion_rolls_the_handler_back_on(&lease().await).await;
}

async fn a_lease_lost_before_completion_rolls_the_handler_back_on(s: &TestServer) {
    let first = s.post_in_background("k", Behaviour::WaitBeforeTx);
    s.entered().await;
    // Another executor takes the record over, as after an expired lease: the token moves on.
    sqlx::query("UPDATE idemkey_records SET token = token + 1")
        .execute(s.store.pool())
        .await
        .unwrap();
    s.release_handler.notify_one();
    let first = first.await.unwrap();
    assert_eq!(first.status(), 409, "not the 201 of a rolled-back note");
    assert_eq!(first.headers()["content-type"], "application/problem+json");
    assert_eq!(s.counts().await, (0, 1), "no note");
    assert_eq!(
        s.record().await,
        (0, 2),
        "the newer owner's record, untouched"
    );
}

#[tokio::test]
async fn unstored_answers_roll_back_and_release() {
    let s = lease().await;
    for (behaviour, status) in [(Behaviour::Fail500, 500), (Behaviour::Panic, 500)] {
        let response = s.post("k", behaviour).await;
        assert_eq!(response.status(), status, "{behaviour:?}");
        assert_eq!(s.counts().await, (0, 1), "{behaviour:?}: no note");
        assert_eq!(s.record().await.0, 1, "{behaviour:?}: released");
    }
    // A rejection rolls back too, and frees the key.
    assert_eq!(s.post("r", Behaviour::Reject).await.status(), 400);
    assert_eq!(s.counts().await, (0, 1));
    // The released key executes again, once.
    assert_eq!(s.post("k", Behaviour::Create).await.status(), 201);
    assert_eq!(s.post("k", Behaviour::Create).await.status(), 201);
    assert_eq!(s.counts().await, (1, 1));
    assert_eq!(s.record().await.0, 2);
}

#[tokio::test]
async fn a_handler_without_tx_is_completed_in_the_store() {
    let s = lease().await;
    assert_eq!(s.post("k", Behaviour::NoTx).await.status(), 201);
    assert_eq!(s.record().await.0, 2);
    let retry = s.post("k", Behaviour::NoTx).await;
    assert_eq!(retry.headers()["idempotent-replayed"], "true");
}

#[tokio::test]
async fn requests_without_a_key_commit_by_the_policy() {
    let s = lease().await;
    assert_eq!(s.post_without_key(Behaviour::Create).await.status(), 201);
    assert_eq!(s.post_without_key(Behaviour::Fail500).await.status(), 500);
    assert_eq!(s.counts().await, (1, 0));
}

#[tokio::test]
async fn a_client_gone_mid_handler_still_commits() {
    let s = lease().await;
    let client = s.post_in_background("k", Behaviour::WaitAfterInsert);
    s.entered().await;
    client.abort();
    assert!(client.await.unwrap_err().is_cancelled());
    s.release_handler.notify_one();
    // Lease mode answers a duplicate in flight at once: wait for the exchange to end.
    let stored = async {
        while s.record().await.0 == 0 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(20), stored)
        .await
        .expect("the handler's exchange never completed its record");
    let retry = s.post("k", Behaviour::Create).await;
    assert_eq!(retry.headers()["idempotent-replayed"], "true");
    assert_eq!(s.counts().await, (1, 1));
}

/// On SQLite, an owner stalled inside its transaction holds the database's one writer. Past
/// its lease, another executor (B: a store of its own on the same file, as another process
/// would be) cannot take the key over: its claim waits for the writer, and B answers 503
/// `store-unavailable` without executing. When the owner goes on, its completion stands (no
/// one took its token), and B replays it. (On PostgreSQL the takeover goes through and the
/// owner's transaction is fenced off: idemkey-cli's `tests/stale.rs`.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_sqlite_an_owner_stalled_in_its_transaction_keeps_the_key() {
    let config = || {
        Config::default()
            .require_key(false)
            .lease(Duration::from_millis(500))
    };
    let dir = Arc::new(tempfile::tempdir().unwrap());
    let a = TestServer::start_on(dir, (Layer::LeaseTx, config()), None, DEFAULT_BUSY_TIMEOUT).await;
    let b = a
        .another(Layer::LeaseTx, config(), Duration::from_millis(300))
        .await;
    let first = a.post_in_background("k", Behaviour::WaitAfterInsert);
    a.entered().await;
    // A's note is written and its transaction open; its lease runs out by the database's
    // clock (renewing it would need the writer A's own transaction holds).
    let expired = "SELECT lease_until <= CAST(unixepoch('subsec') * 1000 AS INTEGER) \
                   FROM idemkey_records";
    let mut waited = 0;
    while !sqlx::query_scalar::<_, bool>(expired)
        .fetch_one(b.store.pool())
        .await
        .unwrap()
    {
        waited += 1;
        assert!(waited < 1000, "the lease never ran out");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let refused = b.post("k", Behaviour::Create).await;
    assert_eq!(refused.status(), 503, "B cannot take over");
    assert_eq!(refused.headers()["retry-after"], "1");
    let problem: serde_json::Value =
        serde_json::from_slice(&refused.bytes().await.unwrap()).unwrap();
    assert!(
        problem["type"]
            .as_str()
            .unwrap()
            .ends_with("store-unavailable"),
        "{problem}"
    );
    assert_eq!(b.record().await, (0, 1), "still A's claim, token 1");
    assert_eq!(b.counts().await, (0, 1), "B wrote nothing");

    a.release_handler.notify_one();
    let first = first.await.unwrap();
    assert_eq!(first.status(), 201, "A's completion stands");
    assert!(first.headers().get("idempotent-replayed").is_none());
    assert_eq!(b.record().await, (2, 1), "completed under A's token");
    let retry = b.post("k", Behaviour::Create).await;
    assert_eq!(retry.status(), 201);
    assert_eq!(retry.headers()["idempotent-replayed"], "true");
    assert_eq!(b.counts().await, (1, 1), "one note");
}
