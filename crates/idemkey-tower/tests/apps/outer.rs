//! Layers applications put around the idempotency layer: a timeout, CORS, and compression
//! (outside, where it belongs, and inside, where a replay must still never send an encoding
//! the retry did not accept).

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::routing::post;
use http::{Method, StatusCode};
use idemkey_tower::Config;
use tokio::sync::Notify;
use tower_http::compression::CompressionLayer;
use tower_http::cors::CorsLayer;
use tower_http::timeout::TimeoutLayer;

use crate::bed::{Client, Db, Mode, send, serve_authenticated};

/// Long enough for tower-http to compress it (it skips bodies under 32 bytes).
const CREATED: &str = r#"{"id":"n1","title":"a note long enough to be worth compressing"}"#;

async fn create() -> (StatusCode, [(&'static str, &'static str); 1], &'static str) {
    (
        StatusCode::CREATED,
        [("content-type", "application/json")],
        CREATED,
    )
}

/// A handler that waits for the test, then creates.
async fn slow(State(gate): State<Arc<(Notify, Notify)>>) -> (StatusCode, &'static str) {
    gate.0.notify_one();
    gate.1.notified().await;
    (StatusCode::CREATED, CREATED)
}

/// A timeout layer outside gives up on the request; the handler, once begun, still runs to
/// completion and its response is stored (behaviour §6), so the retry replays it.
#[idemkey_test_support::test]
async fn a_timeout_outside_does_not_abandon_the_execution() {
    for mode in Mode::ALL {
        let db = Db::new().await;
        let gate = Arc::new((Notify::new(), Notify::new()));
        let routes = Router::new()
            .route("/notes", post(slow))
            .with_state(gate.clone());
        let app =
            db.protect(mode, Config::default(), routes)
                .layer(TimeoutLayer::with_status_code(
                    StatusCode::REQUEST_TIMEOUT,
                    Duration::from_millis(100),
                ));
        let client = serve_authenticated(app).await;
        let first = tokio::spawn(send(client.post("/notes", "k", "{}")));
        tokio::time::timeout(Duration::from_secs(20), gate.0.notified())
            .await
            .expect("the handler began");
        assert_eq!(first.await.unwrap().status, 408, "{mode:?}");
        gate.1.notify_one();
        let retry = eventually_settled(&client).await;
        assert_eq!((retry.status, retry.replayed()), (201, true), "{mode:?}");
        assert_eq!(db.records().await, 1, "{mode:?}");
    }
}

/// Retries until the original is no longer in flight (409), a bounded number of times.
async fn eventually_settled(client: &Client) -> crate::bed::Reply {
    for _ in 0..200 {
        let reply = send(client.post("/notes", "k", "{}")).await;
        if reply.status != 409 {
            return reply;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("the original request never settled");
}

/// CORS outside: preflights never reach the layer, and replays carry the CORS headers the
/// outer layer adds, with `Idempotent-Replayed` exposed to the page.
#[idemkey_test_support::test]
async fn cors_outside_answers_preflights_and_decorates_replays() {
    for mode in Mode::ALL {
        let db = Db::new().await;
        let routes = Router::new().route("/notes", post(create));
        let app = db
            .protect(mode, Config::default(), routes)
            .layer(CorsLayer::permissive());
        let client = serve_authenticated(app).await;
        let preflight = send(
            client
                .request(Method::OPTIONS, "/notes")
                .header("origin", "https://app.example")
                .header("access-control-request-method", "POST")
                .header(
                    "access-control-request-headers",
                    "idempotency-key, content-type",
                ),
        )
        .await;
        assert_eq!(preflight.status, 200, "{mode:?}");
        assert!(
            preflight
                .headers
                .contains_key("access-control-allow-headers")
        );
        let post = || {
            client
                .post("/notes", "k", "{}")
                .header("origin", "https://app.example")
        };
        send(post()).await;
        let retry = send(post()).await;
        assert!(retry.replayed(), "{mode:?}");
        assert_eq!(retry.headers["access-control-allow-origin"], "*");
        assert_eq!(retry.headers["access-control-expose-headers"], "*");
        assert_eq!(db.records().await, 1, "{mode:?}");
    }
}

/// The documented place: compression outside. The record holds the plain body; each retry
/// gets it in the encoding it accepts.
#[idemkey_test_support::test]
async fn compression_outside_encodes_each_replay_for_its_retry() {
    for mode in Mode::ALL {
        let db = Db::new().await;
        let routes = Router::new().route("/notes", post(create));
        let app = db
            .protect(mode, Config::default(), routes)
            .layer(CompressionLayer::new());
        let client = serve_authenticated(app).await;
        let gzip = || {
            client
                .post("/notes", "k", "{}")
                .header("accept-encoding", "gzip")
        };
        let first = send(gzip()).await;
        assert_eq!(first.headers["content-encoding"], "gzip", "{mode:?}");
        let plain = send(client.post("/notes", "k", "{}")).await;
        assert!(plain.replayed(), "{mode:?}");
        assert!(plain.headers.get("content-encoding").is_none(), "{mode:?}");
        assert_eq!(plain.body, CREATED);
        let again = send(gzip()).await;
        assert_eq!(again.headers["content-encoding"], "gzip", "{mode:?}");
        assert_eq!(again.body, first.body);
    }
}

/// Compression inside the layer: the encoded body streams (no known length), so it is
/// stored without its body (behaviour §6); no replay then sends an encoding, whatever the retry
/// accepts. (A stored encoded body is replayed only to a retry that accepts its coding: see
/// the unit tests of `replay_response`.)
#[idemkey_test_support::test]
async fn compression_inside_never_replays_an_encoding() {
    for mode in Mode::ALL {
        let db = Db::new().await;
        let routes = Router::new()
            .route("/notes", post(create))
            .layer(CompressionLayer::new());
        let client = serve_authenticated(db.protect(mode, Config::default(), routes)).await;
        let gzip = || {
            client
                .post("/notes", "k", "{}")
                .header("accept-encoding", "gzip")
        };
        let first = send(gzip()).await;
        assert_eq!(first.headers["content-encoding"], "gzip", "{mode:?}");
        for retry in [
            client.post("/notes", "k", "{}"),
            client
                .post("/notes", "k", "{}")
                .header("accept-encoding", "br"),
            gzip(),
        ] {
            let replay = send(retry).await;
            assert_eq!((replay.status, replay.replayed()), (201, true), "{mode:?}");
            assert!(replay.headers.get("content-encoding").is_none(), "{mode:?}");
            assert_eq!(replay.headers["idempotent-body-omitted"], "true");
            assert!(replay.body.is_empty());
        }
    }
}
