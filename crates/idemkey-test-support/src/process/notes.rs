//! The notes API as the tests speak it: the actors every test server knows, and the requests
//! and answers the tests look at.

use std::net::SocketAddr;

use crate::process::serve::Serve;

/// The secret of `alice`, whom every test server knows.
pub const ALICE: &str = "alice-secret";
/// The secret of `bob`, whom every test server knows.
pub const BOB: &str = "bob-secret";

/// A POST /v1/notes with a key (raw bytes allowed) and a body.
pub fn create(
    client: &reqwest::Client,
    server: &Serve,
    secret: &str,
    key: Option<&[u8]>,
    body: &str,
) -> reqwest::RequestBuilder {
    let mut request = client
        .post(server.url("/v1/notes"))
        .header("authorization", format!("Bearer {secret}"))
        .header("content-type", "application/json")
        .body(body.to_owned());
    if let Some(key) = key {
        request = request.header(
            "idempotency-key",
            reqwest::header::HeaderValue::from_bytes(key).unwrap(),
        );
    }
    request
}

/// A POST /v1/notes to `addr` as `secret`, with `key` and the title as body.
pub fn create_titled(
    client: &reqwest::Client,
    addr: SocketAddr,
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

/// The number of notes an actor has.
pub async fn count_notes(client: &reqwest::Client, server: &Serve, secret: &str) -> usize {
    let list: serde_json::Value = client
        .get(server.url("/v1/notes"))
        .header("authorization", format!("Bearer {secret}"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    list["notes"].as_array().unwrap().len()
}

/// The `type` slug of a problem+json body, checking the media type and `no-store`.
pub async fn problem_slug(response: reqwest::Response) -> String {
    let headers = response.headers().clone();
    assert_eq!(headers["content-type"], "application/problem+json");
    assert_eq!(headers["cache-control"], "no-store");
    let body: serde_json::Value = response.json().await.unwrap();
    let type_uri = body["type"].as_str().unwrap();
    type_uri.rsplit(['/', '#']).next().unwrap().to_owned()
}

/// Every note `secret`'s actor has, `(title, id)`, as the list at `url` gives them: the
/// array `field` of its JSON body (`notes` at `/v1/notes`).
pub async fn listed(
    client: &reqwest::Client,
    url: &str,
    field: &str,
    secret: &str,
) -> Vec<(String, String)> {
    let list: serde_json::Value = client
        .get(url)
        .header("authorization", format!("Bearer {secret}"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let text = |note: &serde_json::Value, name: &str| note[name].as_str().unwrap().to_owned();
    list[field]
        .as_array()
        .unwrap()
        .iter()
        .map(|note| (text(note, "title"), text(note, "id")))
        .collect()
}
