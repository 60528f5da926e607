//! Misconfigured applications are told what is wrong: loudly, once, with the likely cause.

use axum::body::{Body, to_bytes};
use axum::extract::Request;
use axum::routing::post;
use axum::{Router, middleware};
use http::StatusCode;
use idemkey_core::MemoryStore;
use idemkey_sqlx::SqliteStore;
use idemkey_tower::atomic::{AtomicIdempotencyLayer, Tx};
use idemkey_tower::{Actor, IdempotencyLayer};
use sqlx::{Postgres, Sqlite};
use tower::ServiceExt;
use tracing::Level;

use crate::logs::Logs;

async fn created() -> StatusCode {
    StatusCode::CREATED
}

async fn takes_a_pg_tx(_tx: Tx<Postgres>) -> StatusCode {
    StatusCode::CREATED
}

async fn takes_a_sqlite_tx(_tx: Tx<Sqlite>) -> StatusCode {
    StatusCode::CREATED
}

async fn authenticate(mut request: Request) -> Request {
    request.extensions_mut().insert(Actor::new("tenant"));
    request
}

async fn sqlite() -> (SqliteStore, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("misconfig.db").display());
    (SqliteStore::connect(&url).await.unwrap(), dir)
}

/// `app`'s status and problem detail for a keyed POST to `path`.
async fn send(app: &Router, path: &str) -> (StatusCode, String) {
    let request = Request::post(path)
        .header("idempotency-key", "k")
        .body(Body::empty())
        .unwrap();
    let response = app.clone().oneshot(request).await.unwrap();
    let status = response.status();
    let body = to_bytes(response.into_body(), usize::MAX).await.unwrap();
    let problem: serde_json::Value = serde_json::from_slice(&body).unwrap();
    (
        status,
        problem["detail"].as_str().unwrap_or_default().to_owned(),
    )
}

/// A keyed request without an actor is 401 each time, and the likely cause (authentication
/// inside the layer, or missing) is logged once per layer, in both modes.
#[tokio::test]
async fn a_keyed_request_without_an_actor_is_logged_once_per_layer() {
    let (store, _dir) = sqlite().await;
    let lease = Router::new()
        .route("/notes", post(created))
        .layer(IdempotencyLayer::new(MemoryStore::new()));
    let atomic = Router::new().route(
        "/notes",
        post(created).layer(AtomicIdempotencyLayer::new(store)),
    );
    for app in [lease, atomic] {
        let logs = Logs::capture();
        for _ in 0..2 {
            assert_eq!(send(&app, "/notes").await.0, StatusCode::UNAUTHORIZED);
        }
        let cause = "a `Router::layer` added after another runs before it";
        assert_eq!(logs.count(Level::WARN, cause), 1);
    }
}

/// A handler's `Tx` on another database than its layer's store is told apart from a route
/// without a layer, in the problem and in an ERROR logged once.
#[tokio::test]
async fn a_tx_on_another_database_is_told_apart_from_no_layer() {
    let (store, _dir) = sqlite().await;
    let app = Router::new()
        .route(
            "/other-database",
            post(takes_a_pg_tx).layer(AtomicIdempotencyLayer::new(store)),
        )
        .route("/no-layer", post(takes_a_sqlite_tx))
        .layer(middleware::map_request(authenticate));
    let logs = Logs::capture();
    for _ in 0..2 {
        let (status, detail) = send(&app, "/other-database").await;
        assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR);
        assert!(detail.contains("a Tx on PostgreSQL"), "{detail}");
        assert!(
            detail.contains("offers a transaction on SQLite"),
            "{detail}"
        );
        let (status, detail) = send(&app, "/no-layer").await;
        assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR);
        assert!(detail.contains("no AtomicIdempotencyLayer"), "{detail}");
    }
    assert_eq!(
        logs.count(Level::ERROR, "offers a transaction on SQLite"),
        1
    );
    assert_eq!(logs.count(Level::ERROR, "no AtomicIdempotencyLayer"), 1);
}
