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

/// Runs `idemkey check` (`binary::idemkey`) against `server`'s `POST /v1/notes` as
/// [`ALICE`], with [`BOB`] as the second actor, and asserts that all ten cases pass: the
/// verdicts every notes front end must give.
pub fn check_passes(server: &Serve) {
    let dir = tempfile_dir();
    let report = dir.join("report.json");
    let url = server.url("/v1/notes");
    let out = std::process::Command::new(crate::process::binary::idemkey())
        .args(["check", &url])
        .args(["--body", r#"{"title": "hello"}"#])
        .args(["--alt-body", r#"{"title": "other"}"#])
        .args(["-H", &format!("Authorization: Bearer {ALICE}")])
        .args(["--actor2-header", &format!("Authorization: Bearer {BOB}")])
        .args(["--list", "/v1/notes"])
        .args(["--invalid-body", r#"{"title": ""}"#])
        .args(["--json", report.to_str().unwrap()])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&report).unwrap()).unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    let cases = report["cases"].as_array().unwrap();
    assert_eq!(cases.len(), 10);
    assert!(cases.iter().all(|c| c["verdict"] == "pass"), "{stdout}");
}

/// A directory of the process's own for one report.
fn tempfile_dir() -> std::path::PathBuf {
    static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    let dir = std::env::temp_dir().join(format!("idemkey-check-{}-{n}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Asserts that a storm's answers agree on one note, `note_id`: each is a 201 with that note
/// (executed or replayed) or the in-flight 409 a duplicate gets while the executor has not
/// finished (behaviour §8). Returns how many were 201s, at least one.
pub fn one_note_answers(
    label: &str,
    answers: &[crate::net::storm::Answer],
    note_id: &str,
) -> usize {
    let mut created = 0;
    for answer in answers {
        let body: serde_json::Value = serde_json::from_str(&answer.body).unwrap_or_default();
        match answer.status {
            201 => {
                created += 1;
                assert_eq!(body["id"], note_id, "{label}: {answer:?}");
            }
            409 => {
                let slug = body["type"]
                    .as_str()
                    .unwrap_or("")
                    .rsplit(['/', '#'])
                    .next();
                assert_eq!(slug, Some("request-in-flight"), "{label}: {answer:?}");
            }
            _ => panic!("{label}: {answer:?}"),
        }
    }
    assert!(created > 0, "{label}: {answers:?}");
    created
}
