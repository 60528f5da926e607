//! Paths are normalised (RFC 3986 §6) before any route sees them: a route cannot be bypassed
//! by spelling its path otherwise, and no path leaves the upstream's base.

use std::sync::{Arc, Mutex};

use axum::Router;
use axum::body::Body;
use axum::routing::any;
use http::{Request, StatusCode, Uri};
use idemkey_core::MemoryStore;
use idemkey_proxy::{Proxy, ProxyConfig, Upstream};
use tower::ServiceExt;

use crate::in_process::{body_text, read_message, serve};

/// An upstream under `base` that notes every target it gets and answers 201.
async fn noting_upstream(base: &str) -> (Upstream, Arc<Mutex<Vec<String>>>) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let noted = seen.clone();
    let app = Router::new().fallback(any(move |uri: Uri| {
        noted.lock().unwrap().push(uri.to_string());
        async { StatusCode::CREATED }
    }));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (
        Upstream::parse(&format!("http://{addr}{base}")).unwrap(),
        seen,
    )
}

/// The status and body of the proxy's answer to a POST of `target` without a key.
async fn post(proxy: &Proxy<MemoryStore>, target: &str) -> (StatusCode, String) {
    let request = Request::post(target)
        .header("host", "proxy")
        .header("authorization", "Bearer alice")
        .body(Body::from("{}"))
        .unwrap();
    let response = proxy.service().oneshot(request).await.unwrap();
    (response.status(), body_text(response).await)
}

#[idemkey_test_support::test]
async fn a_required_key_cannot_be_bypassed_by_spelling_the_path_otherwise() {
    let (upstream, seen) = noting_upstream("").await;
    let config = "[[route]]\nmethods = [\"POST\"]\npath = \"/v1/payments\"\nrequire_key = true";
    let proxy = Proxy::builder(upstream, MemoryStore::new())
        .config(config.parse::<ProxyConfig>().unwrap())
        .build()
        .unwrap();
    for target in [
        "/v1/payments",
        "/v1//payments",
        "//v1/payments",
        "/v1/%70ayments",
        "/v1/%70AYMENTS/../payments",
        "/v1/./payments",
        "/v1/%2e/payments",
        "/v1/x/../payments",
        "/v1/x/%2E%2e/payments?a=1",
    ] {
        let (status, body) = post(&proxy, target).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{target}: {body}");
        assert!(body.contains("key-missing"), "{target}: {body}");
    }
    assert!(
        seen.lock().unwrap().is_empty(),
        "{:?}",
        seen.lock().unwrap()
    );
}

#[idemkey_test_support::test]
async fn a_path_never_leaves_the_upstreams_base() {
    let (upstream, seen) = noting_upstream("/api").await;
    let proxy = Proxy::builder(upstream, MemoryStore::new())
        .build()
        .unwrap();
    for target in [
        "/../admin",
        "/%2e%2e/admin",
        "/v1/../../admin",
        "/..%2fadmin",
        "/v1/%2F../admin",
        "/v1/..%5cadmin",
        "/v1/a%00b",
        "/v1/%zz",
        "/v1;jsessionid=x/payments",
    ] {
        let (status, body) = post(&proxy, target).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{target}: {body}");
        assert!(body.contains("bad-target"), "{target}: {body}");
    }
    assert!(
        seen.lock().unwrap().is_empty(),
        "{:?}",
        seen.lock().unwrap()
    );
    // What is forwarded is the normalised path, under the base.
    for (target, forwarded) in [
        ("/v1/a/../b?x=%2f..", "/api/v1/b?x=%2f.."),
        ("/v1//%7euser/%41/", "/api/v1/~user/A/"),
        ("/v1/%c3%a9/.", "/api/v1/%C3%A9/"),
        ("/", "/api/"),
    ] {
        let (status, _) = post(&proxy, target).await;
        assert_eq!(status, StatusCode::CREATED, "{target}");
        let last = seen.lock().unwrap().pop().unwrap();
        assert_eq!(last, forwarded, "{target}");
    }
}

/// Through the proxy's own listener, where the router notes the URI as sent: the record's
/// fingerprint is of the normalised path too, so a retry spelled otherwise is the same
/// request, replayed.
#[idemkey_test_support::test]
async fn a_retry_spelled_otherwise_is_the_same_request() {
    use tokio::io::AsyncWriteExt;

    let (upstream, seen) = noting_upstream("").await;
    let proxy = serve(upstream).await;
    let mut answers = Vec::new();
    for target in ["/v1/items", "/v1//items", "/v1/./%69tems"] {
        let mut client = tokio::net::TcpStream::connect(proxy).await.unwrap();
        let request = format!(
            "POST {target} HTTP/1.1\r\nhost: proxy\r\nauthorization: Bearer alice\r\n\
             idempotency-key: k1\r\ncontent-length: 2\r\n\r\n{{}}"
        );
        client.write_all(request.as_bytes()).await.unwrap();
        let (head, _) = read_message(&mut client, &mut Vec::new()).await.unwrap();
        answers.push(head);
    }
    assert!(answers[0].starts_with("HTTP/1.1 201"), "{}", answers[0]);
    for retry in &answers[1..] {
        assert!(retry.starts_with("HTTP/1.1 201"), "{retry}");
        assert!(retry.contains("idempotent-replayed: true"), "{retry}");
    }
    assert_eq!(seen.lock().unwrap().len(), 1);
}
