//! The `Retry-After` of `request-in-flight`: when the original's answer is likely, never past
//! its lease (behaviour §5). The original is held in its handler while its duplicates ask.

use std::time::Duration;

use idemkey_core::{ManualClock, MemoryStore};
use idemkey_tower::Config;

use crate::common::{App, Reply, send, wait_for};

/// A duplicate's answer to `app` and to `other`, another instance on the same store (which
/// knows the original only from the store's record), while `app` holds the original.
async fn duplicates_while_held(app: &App, other: &App) -> (Reply, Reply) {
    let first = tokio::spawn(send(app.post("/gated", Some("k"))));
    wait_for("the handler", &app.ctx.entered).await;
    let here = send(app.post("/gated", Some("k"))).await;
    let there = send(other.post("/gated", Some("k"))).await;
    app.ctx.release.raise(1);
    assert_eq!(first.await.expect("the original").status, 201);
    for reply in [&here, &there] {
        reply.assert_problem(409, "request-in-flight");
    }
    (here, there)
}

/// Two instances over one store whose clock stands still: the lease left is the whole lease.
async fn two_instances(config: Config) -> (App, App) {
    let memory = MemoryStore::with_clock(ManualClock::at(1_000_000));
    let app = App::start_with(config.clone(), memory.clone(), |r| r).await;
    let other = app.sibling(config, memory).await;
    (app, other)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn by_default_a_duplicate_is_told_to_come_back_in_a_second_not_a_lease() {
    let (app, other) = two_instances(Config::default()).await;
    let (here, there) = duplicates_while_held(&app, &other).await;
    assert_eq!(here.header("retry-after"), Some("1"));
    assert_eq!(there.header("retry-after"), Some("1"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_configured_retry_after_is_sent() {
    let config = Config::default().in_flight_retry_after(Duration::from_millis(4500));
    let (app, other) = two_instances(config).await;
    let (here, there) = duplicates_while_held(&app, &other).await;
    assert_eq!(here.header("retry-after"), Some("5"), "whole seconds, up");
    assert_eq!(there.header("retry-after"), Some("5"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_retry_after_never_passes_the_lease() {
    let config = Config::default()
        .in_flight_retry_after(Duration::from_secs(60))
        .lease(Duration::from_secs(3));
    let (app, other) = two_instances(config).await;
    let (here, there) = duplicates_while_held(&app, &other).await;
    assert_eq!(here.header("retry-after"), Some("3"));
    assert_eq!(there.header("retry-after"), Some("3"));
}
