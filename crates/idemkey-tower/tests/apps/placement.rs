//! Where applications put the layer: on one route, on a router, on a router with a
//! fallback, with GET and HEAD routes beside. A request that reaches no handler is answered
//! as if the layer were absent (behaviour §6).

use axum::Router;
use axum::response::IntoResponse;
use axum::routing::post;
use http::{Method, StatusCode};
use idemkey_tower::Config;

use crate::bed::{Db, Mode, send, serve_authenticated};

async fn create() -> (StatusCode, &'static str) {
    (StatusCode::CREATED, r#"{"id":"n1"}"#)
}

async fn list() -> &'static str {
    r#"{"notes":[]}"#
}

/// `Router::layer`: a path no route matches goes to the router's fallback, which the layer
/// wraps too; nothing may be claimed or stored for it.
#[idemkey_test_support::test]
async fn an_unknown_path_is_never_claimed() {
    for mode in Mode::ALL {
        let db = Db::new().await;
        let routes = Router::new().route("/notes", post(create).get(list));
        let client = serve_authenticated(db.protect(mode, Config::default(), routes)).await;
        for _ in 0..2 {
            let missing = send(client.post("/nowhere", "k", "{}")).await;
            assert_eq!(
                (missing.status, missing.replayed()),
                (404, false),
                "{mode:?}"
            );
        }
        assert_eq!((db.claims(), db.records().await), (0, 0), "{mode:?}");
        // The key is untouched: the real route takes it.
        assert_eq!(send(client.post("/notes", "k", "{}")).await.status, 201);
    }
}

/// The application's own fallback is no handler of a route either.
#[idemkey_test_support::test]
async fn a_custom_fallback_is_never_claimed() {
    for mode in Mode::ALL {
        let db = Db::new().await;
        let routes = Router::new()
            .route("/notes", post(create))
            .fallback(|| async { (StatusCode::NOT_FOUND, "no such thing here") });
        let client = serve_authenticated(db.protect(mode, Config::default(), routes)).await;
        let missing = send(client.post("/nowhere", "k", "{}")).await;
        assert_eq!(missing.status, 404, "{mode:?}");
        assert_eq!(missing.body, "no such thing here");
        assert_eq!((db.claims(), db.records().await), (0, 0), "{mode:?}");
    }
}

/// `post(h).layer(..)` with the default methods (POST, PATCH): a PATCH gets the router's 405,
/// with its `Allow` header, as without the layer. It is not stored, nothing of it is kept,
/// and the key stays free for the route's POST.
///
/// axum tells a route's layer nothing about which methods have handlers, so the layer claims
/// before the router's 405 answers and then frees the key; `route_layer` avoids the claim.
#[idemkey_test_support::test]
async fn a_method_the_route_does_not_serve_is_not_stored() {
    for mode in Mode::ALL {
        let db = Db::new().await;
        let route = db.protect_route(mode, Config::default(), post(create));
        let client = serve_authenticated(Router::new().route("/notes", route)).await;
        for _ in 0..2 {
            let patch = send(
                client
                    .request(Method::PATCH, "/notes")
                    .header("idempotency-key", "k"),
            )
            .await;
            assert_eq!((patch.status, patch.replayed()), (405, false), "{mode:?}");
            assert_eq!(patch.headers["allow"], "POST", "{mode:?}");
        }
        assert_eq!(db.records().await, 0, "{mode:?}");
        let post = send(client.post("/notes", "k", "{}")).await;
        assert_eq!((post.status, post.replayed()), (201, false), "{mode:?}");
    }
}

/// With `route_layer`, the 405 never reaches the layer: no claim at all.
#[idemkey_test_support::test]
async fn route_layer_keeps_other_methods_away_from_the_layer() {
    let db = Db::new().await;
    let layer = idemkey_tower::IdempotencyLayer::new(db.store.clone());
    let client =
        serve_authenticated(Router::new().route("/notes", post(create).route_layer(layer))).await;
    let patch = send(
        client
            .request(Method::PATCH, "/notes")
            .header("idempotency-key", "k"),
    )
    .await;
    assert_eq!(patch.status, 405);
    assert_eq!(db.claims(), 0);
}

/// GET and HEAD beside the protected POST: their key headers are ignored, nothing recorded.
#[idemkey_test_support::test]
async fn reads_beside_the_route_pass_through() {
    for mode in Mode::ALL {
        let db = Db::new().await;
        let routes = Router::new().route("/notes", post(create).get(list));
        let client = serve_authenticated(db.protect(mode, Config::default(), routes)).await;
        for method in [Method::GET, Method::HEAD] {
            let read = send(
                client
                    .request(method.clone(), "/notes")
                    .header("idempotency-key", "k"),
            )
            .await;
            assert_eq!(
                (read.status, read.replayed()),
                (200, false),
                "{mode:?} {method}"
            );
        }
        assert_eq!((db.claims(), db.records().await), (0, 0), "{mode:?}");
    }
}

/// A plain tower service mounted with `nest_service` is protected inside: axum gives it no
/// `MatchedPath`, yet it is a handler, not a fallback.
#[idemkey_test_support::test]
async fn a_service_mounted_with_nest_service_is_protected() {
    let db = Db::new().await;
    let runs = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = runs.clone();
    let service = tower::service_fn(move |_: axum::extract::Request| {
        counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        async { Ok::<_, std::convert::Infallible>(create().await.into_response()) }
    });
    let layer = idemkey_tower::IdempotencyLayer::new(db.store.clone());
    let app = Router::new().nest_service("/api", tower::Layer::layer(&layer, service));
    let client = serve_authenticated(app).await;
    let first = send(client.post("/api/notes", "k", "{}")).await;
    let retry = send(client.post("/api/notes", "k", "{}")).await;
    assert_eq!(
        (first.status, retry.status, retry.replayed()),
        (201, 201, true)
    );
    assert_eq!(runs.load(std::sync::atomic::Ordering::SeqCst), 1);
}
