//! `anonymous = true` shares one actor only among requests that carry no credential at all:
//! a request with a cookie, an `Authorization` or a configured credential header is an actor
//! of its own, so a stranger with a victim's key never gets the victim's answer.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use axum::Router;
use axum::body::Body;
use axum::routing::any;
use http::{Request, StatusCode};
use idemkey_core::MemoryStore;
use idemkey_proxy::{Proxy, ProxyConfig, Upstream};
use tower::ServiceExt;

use crate::in_process::{ROUTE, body_text};

/// An upstream that answers each call with its number, as if issuing a token.
async fn token_upstream() -> Upstream {
    let calls = Arc::new(AtomicUsize::new(0));
    let app = Router::new().fallback(any(move || {
        let n = calls.fetch_add(1, Ordering::SeqCst) + 1;
        async move { (StatusCode::CREATED, format!("token {n}")) }
    }));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    Upstream::parse(&format!("http://{addr}")).unwrap()
}

async fn proxy(actor: &str) -> Proxy<MemoryStore> {
    let config = format!("{ROUTE}\n[actor]\nanonymous = true\n{actor}");
    Proxy::builder(token_upstream().await, MemoryStore::new())
        .config(config.parse::<ProxyConfig>().unwrap())
        .build()
        .unwrap()
}

/// The body the proxy answers a keyed POST with `headers`.
async fn answer(proxy: &Proxy<MemoryStore>, key: &str, headers: &[(&str, &str)]) -> String {
    let mut request = Request::post("/v1/sessions")
        .header("host", "proxy")
        .header("idempotency-key", key);
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let response = proxy
        .service()
        .oneshot(request.body(Body::from("{}")).unwrap())
        .await
        .unwrap();
    body_text(response).await
}

#[idemkey_test_support::test]
async fn a_cookie_user_never_shares_the_anonymous_actor() {
    let proxy = proxy("").await;
    let victim = [("cookie", "session=victim")];
    assert_eq!(answer(&proxy, "k1", &victim).await, "token 1");
    assert_eq!(answer(&proxy, "k1", &victim).await, "token 1");
    // Without credentials, or with another's, the victim's key is a new request.
    assert_eq!(answer(&proxy, "k1", &[]).await, "token 2");
    assert_eq!(
        answer(&proxy, "k1", &[("cookie", "session=other")]).await,
        "token 3"
    );
    // The anonymous actor is shared only by requests without any credential.
    assert_eq!(answer(&proxy, "k1", &[]).await, "token 2");
    assert_eq!(answer(&proxy, "k1", &[("cookie", "")]).await, "token 2");
}

#[idemkey_test_support::test]
async fn credentials_beside_the_configured_one_are_actors_of_their_own() {
    // The actor is the session cookie; a client without it may still carry a credential.
    let proxy = proxy("cookie = \"session\"\ncredential_headers = [\"x-api-key\"]").await;
    let bearer = [("authorization", "Bearer victim")];
    assert_eq!(answer(&proxy, "k1", &bearer).await, "token 1");
    assert_eq!(answer(&proxy, "k1", &bearer).await, "token 1");
    assert_eq!(answer(&proxy, "k1", &[]).await, "token 2");
    assert_eq!(
        answer(&proxy, "k1", &[("x-api-key", "victim")]).await,
        "token 3"
    );
    assert_eq!(
        answer(&proxy, "k1", &[("x-api-key", "victim")]).await,
        "token 3"
    );
    assert_eq!(
        answer(&proxy, "k1", &[("x-api-key", "other")]).await,
        "token 4"
    );
}
