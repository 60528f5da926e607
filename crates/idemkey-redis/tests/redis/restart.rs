//! A server restart: while Redis is down the same store answers `Unavailable` (within its
//! operation timeout, never hanging; how fast is a latency, measured by benchmarks, not here),
//! and once it is back the store reconnects by itself and replays what was stored before.

use std::time::{Duration, Instant};

use idemkey_core::testkit::request;
use idemkey_core::{Begin, Error, ExpiredLease, Store, StoredResponse, begin};
use idemkey_test_support::process::redis::RedisServer;

use crate::common::store_at;

#[idemkey_test_support::test(flavor = "multi_thread", worker_threads = 2, needs = [redis_server])]
async fn the_same_store_is_unavailable_while_down_and_works_after_a_restart() {
    // Every write is on disk before its reply, so a SIGKILL loses nothing.
    let mut server = tokio::task::spawn_blocking(|| {
        RedisServer::start(&["--appendonly", "yes", "--appendfsync", "always"])
    })
    .await
    .unwrap();
    let store = store_at(&server.url()).await;
    let req = request("{}");
    let Begin::Execute(claim) = begin(&store, &req, ExpiredLease::TakeOver).await.unwrap() else {
        panic!("expected to execute")
    };
    store
        .complete(&claim, &StoredResponse::new(201, "kept"))
        .await
        .unwrap();
    let secret = store.secret().await.unwrap();
    let pending = request("{}");
    let Begin::Execute(pending_claim) = begin(&store, &pending, ExpiredLease::TakeOver)
        .await
        .unwrap()
    else {
        panic!("expected to execute")
    };
    let done = StoredResponse::new(201, "after");

    let mut server = tokio::task::spawn_blocking(move || {
        server.kill();
        server
    })
    .await
    .unwrap();
    for _ in 0..3 {
        let down = store.lookup(&req.scope).await;
        assert!(matches!(down, Err(Error::Unavailable(_))), "{down:?}");
        let claim = store.try_claim(&request("{}")).await;
        assert!(matches!(claim, Err(Error::Unavailable(_))), "{claim:?}");
        // A completion cannot tell a dead connection from a lost reply: never `Ok`.
        let complete = store.complete(&pending_claim, &done).await;
        assert!(
            matches!(
                complete,
                Err(Error::Unavailable(_) | Error::OutcomeUnknown(_))
            ),
            "{complete:?}"
        );
    }

    let server = tokio::task::spawn_blocking(move || {
        server.restart();
        server
    })
    .await
    .unwrap();
    // The manager reconnects in the background; a request or two may still meet the old
    // failure before it does.
    let deadline = Instant::now() + Duration::from_secs(10);
    let replayed = loop {
        match begin(&store, &req, ExpiredLease::TakeOver).await {
            Ok(Begin::Replay(replayed)) => break replayed,
            Err(Error::Unavailable(_)) if Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            other => panic!("expected a replay after the restart, got {other:?}"),
        }
    };
    assert_eq!(replayed.body, "kept");
    // The completion never landed while the server was down: the claim still holds.
    store.complete(&pending_claim, &done).await.unwrap();
    assert_eq!(store.secret().await.unwrap(), secret);
    drop(server);
}
