//! The proxy as a library, in front of a counting upstream: a retry is replayed without
//! reaching the upstream, a request of no covered route is forwarded unrecorded, and an
//! unreachable upstream gives the claim back; a configuration, parsed or built, is refused
//! naming the value at fault.

use std::sync::atomic::Ordering;

use axum::body::Body;
use http::{Request, StatusCode};
use idemkey_core::MemoryStore;
use idemkey_proxy::{Error, Proxy, ProxyConfig, Upstream};
use tower::ServiceExt;

use crate::in_process::{ROUTE, body_text, counting_upstream};

fn post(path: &str, key: Option<&str>) -> Request<Body> {
    // An HTTP/1.1 request names its host, or the proxy refuses it.
    let mut request = Request::post(path)
        .header("host", "proxy")
        .header("authorization", "Bearer alice");
    if let Some(key) = key {
        request = request.header("idempotency-key", key);
    }
    request.body(Body::from("{}")).unwrap()
}

#[idemkey_test_support::test]
async fn a_retry_is_replayed_without_reaching_the_upstream() {
    let (upstream, calls) = counting_upstream().await;
    let config: ProxyConfig = ROUTE.parse().unwrap();
    let proxy = Proxy::builder(upstream, MemoryStore::new())
        .config(config)
        .build()
        .unwrap();
    let first = proxy
        .service()
        .oneshot(post("/v1/items", Some("k1")))
        .await
        .unwrap();
    assert_eq!(first.status(), StatusCode::CREATED);
    assert_eq!(body_text(first).await, "call 1");
    let retry = proxy
        .service()
        .oneshot(post("/v1/items", Some("k1")))
        .await
        .unwrap();
    assert_eq!(retry.headers()["idempotent-replayed"], "true");
    assert_eq!(body_text(retry).await, "call 1");
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    // Outside the covered routes, every request reaches the upstream.
    for _ in 0..2 {
        let other = proxy
            .service()
            .oneshot(post("/other", Some("k1")))
            .await
            .unwrap();
        assert!(other.headers().get("idempotent-replayed").is_none());
    }
    assert_eq!(calls.load(Ordering::SeqCst), 3);
}

#[idemkey_test_support::test]
async fn an_unreachable_upstream_gives_the_claim_back() {
    // A port nothing listens on: bound, then closed.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    let upstream = Upstream::parse(&format!("http://{addr}")).unwrap();
    let proxy = Proxy::builder(upstream, MemoryStore::new())
        .build()
        .unwrap();
    for _ in 0..2 {
        let refused = proxy
            .service()
            .oneshot(post("/x", Some("k")))
            .await
            .unwrap();
        assert_eq!(refused.status(), StatusCode::BAD_GATEWAY);
        // Nothing was sent, so nothing was stored: the retry runs again, not replayed.
        assert!(refused.headers().get("idempotent-replayed").is_none());
        assert!(body_text(refused).await.contains("upstream-unreachable"));
    }
}

#[idemkey_test_support::test]
fn configuration_errors_name_the_value_at_fault() {
    let message = |text: &str| text.parse::<ProxyConfig>().unwrap_err().to_string();
    assert_eq!(
        message("[[route]]\nmismatch_status = 500"),
        "mismatch_status must be a 4xx status: 500"
    );
    assert_eq!(
        message("[[route]]\npath = \"v1\""),
        "a route's path must start with '/' or be '*': \"v1\""
    );
    assert_eq!(
        Upstream::parse("https://x").unwrap_err().to_string(),
        "--upstream must be an http:// URL: \"https://x\""
    );
    assert_eq!(
        message("[upstream]\ntimeout = \"0s\""),
        "[upstream] timeout must be at least 1ms: \"0s\""
    );
    assert_eq!(
        message("[upstream]\nderived_key_header = \"authorization\""),
        "[upstream] derived_key_header must not be a credential, hop-by-hop, framing, \
         forwarding or idempotency header: \"authorization\""
    );
    assert_eq!(
        message("[[route]]\nmethods = []\npath = \"/v1/*\""),
        "a route's methods must not be empty (path \"/v1/*\")"
    );
    assert_eq!(
        message("[[route]]\npath = \"/v1\"\n[[route]]\nmethods = [\"post\"]\npath = \"/v1\""),
        "POST \"/v1\" is covered by two routes (or listed twice)"
    );
    assert_eq!(
        Upstream::parse("http://app:s3cret@127.0.0.1:9000")
            .unwrap_err()
            .to_string(),
        "--upstream must not carry credentials (user:password@): \"http://app:***@127.0.0.1:9000\""
    );
}

/// A configuration made in code, not parsed from a file, is checked by the builder just
/// the same.
#[idemkey_test_support::test]
fn the_builder_refuses_what_the_file_would() {
    let upstream = Upstream::parse("http://127.0.0.1:9").unwrap();
    let mut config = ProxyConfig::default();
    config.actor.header = Some("x-api-key".into());
    config.upstream.derived_key_header = Some("x-api-key".into());
    let built = Proxy::builder(upstream, MemoryStore::new())
        .config(config)
        .build();
    assert!(matches!(built, Err(Error::DerivedKeyHeader(name)) if name == "x-api-key"));
}
