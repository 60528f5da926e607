//! A wall clock ahead of the host's, on SQLite, with real processes: two proxies on one file,
//! B started with libfaketime 5 s ahead (an NTP step, a VM resumed with a stale clock), its
//! steady clock left alone. Each runs with a lease far longer than the test (300 s) and a
//! 1 s owner grace. SQLite's "database clock" is each process's own wall clock, so judged by
//! it, every owner but B looks 4 s past its heartbeat to B: B would take over a live claim.
//! The heartbeats are judged by the host's steady clock instead: B leaves A's live claim
//! alone for five graces, and still takes over the claim of an A that was killed.

use std::time::Duration;

use idemkey_test_support::process::binary;
use idemkey_test_support::process::proxy::Proxy;

use super::owner_grace::{ARGS, Told, Upstream, fresh_key, replays, send, taken_over};
use super::sqlite_url;
use super::upstream::slug;

/// B's wall clock, ahead of the host's by more than the grace.
const AHEAD: &str = "+5s";

/// A with the host's clock, B ahead of it, on one SQLite file.
fn proxies(upstream: &str, database_url: &str) -> (Proxy, Proxy) {
    let a = Proxy::start(binary::idemkey(), upstream, database_url, &ARGS);
    let b = Proxy::start_stepped(binary::idemkey(), AHEAD, upstream, database_url, &ARGS);
    (a, b)
}

#[idemkey_test_support::test(flavor = "multi_thread", worker_threads = 2, needs = [faketime])]
async fn sqlite_a_proxy_whose_clock_is_ahead_takes_over_no_live_claim() {
    let dir = tempfile::tempdir().unwrap();
    let (upstream, upstream_url) = Upstream::start().await;
    let (a, b) = proxies(&upstream_url, &sqlite_url(&dir));
    let (client, key) = (reqwest::Client::new(), fresh_key());
    let first = tokio::spawn(send(&client, &a, &key));
    upstream.held().await;
    // Five graces of retries through B while A's forward is held and A beats.
    for _ in 0..50 {
        let retry = send(&client, &b, &key).await.unwrap();
        let status = retry.status();
        let problem = slug(retry).await;
        assert_eq!(
            (status.as_u16(), problem.as_str()),
            (409, "request-in-flight"),
            "A is alive: its claim is in flight"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    upstream.release();
    let answer = first.await.unwrap().unwrap();
    assert_eq!(answer.status(), 201);
    let stored = (201, answer.json().await.unwrap());
    replays((&client, &upstream), &[&a, &b], &key, &stored).await;
    assert_eq!(upstream.calls(), 1, "A's forward only");
}

#[idemkey_test_support::test(flavor = "multi_thread", worker_threads = 2, needs = [faketime])]
async fn sqlite_a_proxy_whose_clock_is_ahead_takes_over_a_killed_owners_claim() {
    let dir = tempfile::tempdir().unwrap();
    let (upstream, upstream_url) = Upstream::start().await;
    let (mut a, b) = proxies(&upstream_url, &sqlite_url(&dir));
    let (client, key) = (reqwest::Client::new(), fresh_key());
    let first = tokio::spawn(send(&client, &a, &key));
    upstream.held().await;
    a.process.kill();
    assert!(first.await.unwrap().is_err(), "A died before answering");
    let stored = taken_over((&client, Told::Nothing), &b, &key, None).await;
    replays((&client, &upstream), &[&b], &key, &stored).await;
    assert_eq!(upstream.calls(), 1, "A's forward only");
}
