//! The actor is an HMAC of the credential keyed by the store's secret: the `actor` column
//! cannot be searched with a dictionary of credentials. Records made under the plain
//! SHA-256 digest of earlier versions are still found, so no retry of them executes twice.

use std::sync::atomic::Ordering;

use axum::body::Body;
use http::request::Parts;
use http::{Method, Request, StatusCode};
use idemkey_core::{Key, MemoryStore, Operation, Scope, Store};
use idemkey_proxy::{Proxy, ProxyConfig};
use idemkey_tower::{Config, IdempotencyLayer};
use sha2::{Digest, Sha256};
use tower::{Layer, ServiceExt};

use crate::in_process::{ROUTE, body_text, counting_upstream};

const BASIC: &str = "Basic YWxpY2U6cGFzc3dvcmQ=";

/// The actor earlier versions stored: `header:` and 128 bits of SHA-256 of the credential.
fn unkeyed(credential: &str) -> String {
    let hash = Sha256::new()
        .chain_update(b"header\0")
        .chain_update(credential)
        .finalize();
    format!("header:{}", hex::encode(&hash[..16]))
}

fn post(key: &str) -> Request<Body> {
    Request::post("/v1/items")
        .header("host", "proxy")
        .header("authorization", BASIC)
        .header("idempotency-key", key)
        .body(Body::from("{}"))
        .unwrap()
}

async fn text(proxy: &Proxy<MemoryStore>, request: Request<Body>) -> String {
    body_text(proxy.service().oneshot(request).await.unwrap()).await
}

fn scope(actor: &str, key: &str) -> Scope {
    let operation = Operation::new("POST /v1/items", "proxy");
    Scope::new(actor, &operation, key.parse::<Key>().unwrap())
}

#[idemkey_test_support::test]
async fn the_actor_is_keyed_by_the_stores_secret() {
    let (upstream, _) = counting_upstream().await;
    let store = MemoryStore::new();
    let proxy = Proxy::builder(upstream, store.clone())
        .config(ROUTE.parse::<ProxyConfig>().unwrap())
        .build()
        .unwrap();
    assert_eq!(text(&proxy, post("k1")).await, "call 1");
    assert_eq!(text(&proxy, post("k1")).await, "call 1");
    // Stored, but not under the digest anyone can compute from a guessed credential.
    let found = store.lookup(&scope(&unkeyed(BASIC), "k1")).await.unwrap();
    assert!(
        found.is_none(),
        "the actor is the unkeyed digest of the credential"
    );
}

/// A record an earlier version of the proxy made: the same scope and fingerprint, under the
/// unkeyed actor.
async fn record_of_an_earlier_version(store: &MemoryStore, key: &str) {
    let actor = |_: &Parts| Some(unkeyed(BASIC));
    let operation =
        |parts: &Parts| Operation::new(format!("{} {}", parts.method, parts.uri.path()), "proxy");
    let config = Config::default()
        .methods([Method::POST])
        .actor(actor)
        .operation(operation);
    let earlier = IdempotencyLayer::with_config(store.clone(), config).layer(tower::service_fn(
        |_: Request<Body>| async {
            Ok::<_, std::convert::Infallible>(
                http::Response::builder()
                    .status(201)
                    .body(Body::from("earlier"))
                    .unwrap(),
            )
        },
    ));
    let response = earlier.oneshot(post(key)).await.unwrap();
    assert_eq!(response.status(), StatusCode::CREATED);
}

#[idemkey_test_support::test]
async fn with_earlier_digests_a_record_under_the_unkeyed_actor_is_still_replayed() {
    let (upstream, calls) = counting_upstream().await;
    let store = MemoryStore::new();
    record_of_an_earlier_version(&store, "old").await;
    let config = format!("{ROUTE}\n[actor]\nearlier_digests = true");
    let proxy = Proxy::builder(upstream, store.clone())
        .config(config.parse::<ProxyConfig>().unwrap())
        .build()
        .unwrap();
    assert_eq!(text(&proxy, post("old")).await, "earlier");
    assert_eq!(calls.load(Ordering::SeqCst), 0);
    // A new key is recorded under the keyed actor.
    assert_eq!(text(&proxy, post("new")).await, "call 1");
    let found = store.lookup(&scope(&unkeyed(BASIC), "new")).await.unwrap();
    assert!(found.is_none());
}

#[idemkey_test_support::test]
async fn by_default_a_record_under_the_unkeyed_actor_is_not_looked_for() {
    let (upstream, calls) = counting_upstream().await;
    let store = MemoryStore::new();
    record_of_an_earlier_version(&store, "old").await;
    let proxy = Proxy::builder(upstream, store.clone())
        .config(ROUTE.parse::<ProxyConfig>().unwrap())
        .build()
        .unwrap();
    // Without the extra read, the key is new to the keyed actor.
    assert_eq!(text(&proxy, post("old")).await, "call 1");
    assert_eq!(calls.load(Ordering::SeqCst), 1);
}
