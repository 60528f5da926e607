//! The lease-mode layer's races (behaviour §5, §6) end to end on Redis: a real axum server
//! behind `IdempotencyLayer` over a `RedisStore` on the standalone server, driven over HTTP.
//!
//! Every interleaving is forced: the handler blocks until the test releases it, a barrier
//! lets a storm go at once, and where a test needs to know that a request has reached Redis
//! it watches the server's `MONITOR` (see `app::Monitor`) or reads the record, never a
//! sleep. Nothing asserts on elapsed time.

use std::sync::Arc;
use std::time::Duration;

use idemkey_core::RecordState;
use idemkey_test_support::runner::needs::redis_url;
use idemkey_tower::Config;
use tokio::sync::{Barrier, mpsc};

use crate::app::{App, Reply, send, wait_for};

#[idemkey_test_support::test(flavor = "multi_thread", worker_threads = 2, needs = [redis])]
async fn a_duplicate_of_a_running_request_gets_409_and_a_different_one_422() {
    let url = redis_url();
    let app = App::start(&url, Config::default()).await;
    let first = tokio::spawn(send(app.post("k")));
    wait_for("the handler", &app.ctx.entered).await;

    let duplicate = send(app.post("k")).await;
    duplicate.assert_problem(409, "request-in-flight");
    let retry_after: u64 = duplicate.header("retry-after").unwrap().parse().unwrap();
    assert!(retry_after >= 1);
    let different = send(app.json("k", r#"{"other":true}"#)).await;
    different.assert_problem(422, "key-reused");

    app.ctx.release.raise(1);
    let first = first.await.unwrap();
    assert_eq!(first.status, 201);
    assert!(!first.replayed());
    assert!(matches!(
        app.record("k").await.unwrap().state,
        RecordState::Completed(_)
    ));
    let retry = send(app.post("k")).await;
    assert!(retry.replayed());
    assert_eq!(retry.body, first.body);
    assert_eq!(app.ctx.runs(), 1);
}

/// The duplicate must have found the original in flight, or it would get the same replay
/// without ever waiting. It goes to another instance (a duplicate on the original's own
/// instance waits in that process, without Redis). Redis cannot be hooked, so the test watches
/// it: with `MONITOR` on before the duplicate is sent, it waits until Redis has run the
/// duplicate's claim (which, with the original gated, can only have found the record in
/// flight) and then one of its polling lookups; only then is the original released.
#[idemkey_test_support::test(flavor = "multi_thread", worker_threads = 2, needs = [redis])]
async fn a_waiting_duplicate_gets_the_replay_once_the_original_finishes() {
    let url = redis_url();
    let config = Config::default().wait_in_flight(Duration::from_secs(60));
    let app = App::start(&url, config.clone()).await;
    let other = app.sibling(config).await;
    let first = tokio::spawn(send(app.post("k")));
    wait_for("the handler", &app.ctx.entered).await;
    let monitor = app.monitor("k").await;
    let duplicate = tokio::spawn(send(other.post("k")));
    wait_for("the duplicate's claim", &monitor.claims).await;
    wait_for("the duplicate to poll", &monitor.lookups).await;
    let record = app.record("k").await.unwrap();
    assert!(matches!(record.state, RecordState::InFlight { .. }));
    assert!(!duplicate.is_finished());

    app.ctx.release.raise(1);
    let (first, duplicate) = (first.await.unwrap(), duplicate.await.unwrap());
    assert_eq!((first.status, duplicate.status), (201, 201));
    assert!(!first.replayed());
    assert!(duplicate.replayed());
    assert_eq!(duplicate.body, first.body);
    assert_eq!(app.ctx.runs(), 1);
}

const STORM: usize = 32;

/// Sends `size` identical requests, released together by a barrier; their replies arrive on
/// the channel in the order they finish.
fn storm(app: &App, size: usize) -> mpsc::UnboundedReceiver<Reply> {
    let (replies, received) = mpsc::unbounded_channel();
    let barrier = Arc::new(Barrier::new(size));
    for _ in 0..size {
        let request = app.json("storm", r#"{"title":"x"}"#);
        let (barrier, replies) = (barrier.clone(), replies.clone());
        tokio::spawn(async move {
            barrier.wait().await;
            replies.send(send(request).await).unwrap();
        });
    }
    received
}

async fn next(replies: &mut mpsc::UnboundedReceiver<Reply>) -> Reply {
    tokio::time::timeout(Duration::from_secs(20), replies.recv())
        .await
        .expect("gave up waiting for a reply")
        .unwrap()
}

/// After a storm: every retry replays the one execution's response.
async fn assert_retries_replay(app: &App, executed: &Reply) {
    for _ in 0..4 {
        let retry = send(app.json("storm", r#"{"title":"x"}"#)).await;
        assert_eq!(retry.status, 201);
        assert!(retry.replayed());
        assert_eq!(retry.body, executed.body);
    }
}

/// The execution that wins is held at the gate until every other request of the storm has
/// been answered, so none of them can be a replay: each must be a 409. A second execution
/// would block at the gate too, and the test would miss a reply.
#[idemkey_test_support::test(flavor = "multi_thread", worker_threads = 2, needs = [redis])]
async fn a_storm_of_identical_requests_executes_once() {
    let url = redis_url();
    let app = App::start(&url, Config::default()).await;
    let mut replies = storm(&app, STORM);
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
    assert_retries_replay(&app, &executed).await;
    assert_eq!(app.ctx.runs(), 1);
}

/// With `wait_in_flight`: one request executes on one instance and is held; a storm of 31
/// duplicates, released together on another instance, is held until Redis has run a claim
/// for each of them (`MONITOR` counts them, on before the storm), so all have found the
/// record in flight and are waiting; each must then get the replay.
#[idemkey_test_support::test(flavor = "multi_thread", worker_threads = 2, needs = [redis])]
async fn a_storm_waiting_in_flight_executes_once_and_replays_to_the_rest() {
    let url = redis_url();
    let config = Config::default().wait_in_flight(Duration::from_secs(60));
    let app = App::start(&url, config.clone()).await;
    let other = app.sibling(config).await;
    let monitor = app.monitor("storm").await;
    let mut replies = storm(&app, 1);
    wait_for("the execution", &app.ctx.entered).await;
    let mut duplicates = storm(&other, STORM - 1);
    for i in 0..STORM {
        wait_for(&format!("claim {i} of the storm"), &monitor.claims).await;
    }
    assert!(
        replies.is_empty() && duplicates.is_empty(),
        "nothing answers before the release"
    );

    app.ctx.release.raise(1);
    let mut all = vec![next(&mut replies).await];
    for _ in 1..STORM {
        all.push(next(&mut duplicates).await);
    }
    let (executed, replayed): (Vec<_>, Vec<_>) = all.into_iter().partition(|r| !r.replayed());
    assert_eq!(executed.len(), 1, "exactly one reply is not a replay");
    let executed = &executed[0];
    assert_eq!(executed.status, 201);
    assert_eq!(executed.json()["n"], 1);
    for reply in &replayed {
        assert_eq!(reply.status, 201, "body: {:?}", reply.body);
        assert_eq!(reply.body, executed.body);
    }
    assert_retries_replay(&app, executed).await;
    assert_eq!(app.ctx.runs(), 1);
}

/// Two instances on the same records, with a 300 ms lease. The first executes on an instance
/// that then freezes whole (its handler blocks its only thread, so its heartbeat cannot renew
/// the lease: a paused process). The test waits until Redis reports the lease expired, by its
/// own clock, then a retry on the second instance takes over and executes again under the
/// same record id, so with the same derived keys. The first instance is thawed while the second
/// still runs: its completion comes first and must be fenced; the second's is stored.
#[idemkey_test_support::test(flavor = "multi_thread", worker_threads = 2, needs = [redis])]
async fn an_expired_lease_is_taken_over_and_the_old_executor_cannot_complete() {
    let url = redis_url();
    let config = Config::default().lease(Duration::from_millis(300));
    let app = App::start(&url, config.clone()).await;
    let paused = app.frozen_sibling(config).await;
    let first = tokio::spawn(send(paused.post("k")));
    wait_for("the first handler", &app.ctx.entered).await;
    let claimed = app.record("k").await.unwrap();
    let expired = app
        .record_when("k", "the lease to expire", |r| {
            matches!(r.state, RecordState::InFlight { lease_remaining } if lease_remaining.is_zero())
        })
        .await;
    assert_eq!(expired.token, claimed.token, "nobody took it over yet");

    let second = tokio::spawn(send(app.post("k")));
    wait_for("the second handler", &app.ctx.entered).await;
    let taken = app.record("k").await.unwrap();
    assert_eq!(taken.record_id, claimed.record_id);
    assert_eq!(taken.token, claimed.token + 1);

    paused.ctx.frozen.thaw();
    let first = first.await.unwrap();
    // The layer answers only after its completion attempt: that was refused, so the record is
    // still the second executor's, in flight.
    assert_eq!(first.status, 201);
    assert!(!first.replayed());
    assert_eq!(first.json()["n"], 1);
    let after = app.record("k").await.unwrap();
    assert!(
        matches!(after.state, RecordState::InFlight { .. }),
        "{after:?}"
    );
    assert_eq!(after.token, taken.token);

    app.ctx.release.raise(1);
    let second = second.await.unwrap();
    assert_eq!(second.status, 201);
    assert!(!second.replayed());
    assert_eq!(second.json()["n"], 2);
    for instance in [&app, &paused] {
        let retry = send(instance.post("k")).await;
        assert!(retry.replayed());
        assert_eq!(
            retry.body, second.body,
            "the new owner's response is the stored one"
        );
    }
    assert_eq!(app.ctx.runs(), 2);
    let derived = app.ctx.derived.lock().unwrap().clone();
    assert_eq!(derived.len(), 2);
    assert_eq!(derived[0], derived[1], "the record id survives a takeover");
}

/// The client goes away while the handler is held; the server drops the request, yet the
/// handler finishes and its response is stored (the test waits until Redis holds it).
#[idemkey_test_support::test(flavor = "multi_thread", worker_threads = 2, needs = [redis])]
async fn a_handler_finishes_and_is_stored_when_the_client_goes_away() {
    let url = redis_url();
    let app = App::start(&url, Config::default()).await;
    let client = tokio::spawn(send(app.post("k")));
    wait_for("the handler", &app.ctx.entered).await;
    client.abort();
    wait_for("the server to drop the request", &app.ctx.dropped).await;
    assert!(matches!(
        app.record("k").await.unwrap().state,
        RecordState::InFlight { .. }
    ));

    app.ctx.release.raise(1);
    app.record_when("k", "the completion", |r| {
        matches!(r.state, RecordState::Completed(_))
    })
    .await;
    let retry = send(app.post("k")).await;
    assert_eq!(retry.status, 201);
    assert!(retry.replayed());
    assert_eq!(retry.json()["n"], 1);
    assert_eq!(app.ctx.runs(), 1);
}
