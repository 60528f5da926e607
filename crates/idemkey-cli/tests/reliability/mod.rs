//! What the reliability tests share: `idemkey serve` processes that can be killed, paused
//! and restarted, the databases behind them, and a seeded random schedule.
#![allow(dead_code, unreachable_pub, clippy::unwrap_used)]

pub mod app;
pub mod campaign;
pub mod db;
pub mod pg;
pub mod rng;
pub mod serve;

/// The secrets of the actors every reliability server knows.
pub const ALICE: &str = "alice-secret";
pub const BOB: &str = "bob-secret";

/// Polls `check` every 10 ms until it holds; panics after `limit` polls, so a broken test
/// fails rather than hangs. Nothing is asserted about how long it took.
pub async fn wait_until<F, Fut>(what: &str, limit: usize, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    for _ in 0..limit {
        if check().await {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    panic!("never happened: {what}");
}

/// A POST /v1/notes to `addr` as `secret`, with `key` and the title as body.
pub fn create(
    client: &reqwest::Client,
    addr: std::net::SocketAddr,
    secret: &str,
    key: &str,
    title: &str,
) -> reqwest::RequestBuilder {
    client
        .post(format!("http://{addr}/v1/notes"))
        .header("authorization", format!("Bearer {secret}"))
        .header("idempotency-key", key)
        .header("content-type", "application/json")
        .body(serde_json::json!({ "title": title }).to_string())
}

/// The `type` slug of a problem+json body, checking the media type and `no-store`.
pub async fn problem_slug(response: reqwest::Response) -> String {
    let headers = response.headers().clone();
    assert_eq!(headers["content-type"], "application/problem+json");
    assert_eq!(headers["cache-control"], "no-store");
    let body: serde_json::Value = response.json().await.unwrap();
    let type_uri = body["type"].as_str().unwrap();
    type_uri.rsplit('/').next().unwrap().to_owned()
}
