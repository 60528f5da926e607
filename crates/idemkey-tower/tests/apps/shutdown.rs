//! Graceful shutdown: the server stops, and the application waits for the executions that
//! outlived their clients, so their responses are stored (lease) or committed (atomic).

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::routing::post;
use http::StatusCode;
use idemkey_sqlx::SqliteStore;
use idemkey_tower::atomic::AtomicIdempotencyLayer;
use idemkey_tower::{Executions, IdempotencyLayer};
use tokio::sync::Notify;

use crate::bed::{Client, Db, Mode, auth, send};

/// What the test and the handler share.
#[derive(Default)]
struct Gate {
    entered: Notify,
    release: Notify,
}

async fn slow(State(gate): State<Arc<Gate>>) -> (StatusCode, &'static str) {
    gate.entered.notify_one();
    gate.release.notified().await;
    (StatusCode::CREATED, r#"{"id":"n1"}"#)
}

/// The application: one protected route, and the layer's executions.
fn app(mode: Mode, store: SqliteStore, gate: Arc<Gate>) -> (Router, Executions) {
    let executions = Executions::new();
    let route = match mode {
        Mode::Lease => {
            post(slow).layer(IdempotencyLayer::new(store).with_executions(executions.clone()))
        }
        Mode::Atomic => {
            post(slow).layer(AtomicIdempotencyLayer::new(store).with_executions(executions.clone()))
        }
    };
    let router = Router::new()
        .route("/notes", route)
        .layer(axum::middleware::from_fn(auth))
        .with_state(gate);
    (router, executions)
}

#[idemkey_test_support::test]
async fn shutdown_waits_for_executions_whose_clients_left() {
    for mode in Mode::ALL {
        let db = Db::new().await;
        let gate = Arc::new(Gate::default());
        let (router, executions) = app(mode, db.store.clone(), gate.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let client = Client::new(format!("http://{}", listener.local_addr().unwrap()));
        let stop = Arc::new(Notify::new());
        let stopped = stop.clone();
        let server = tokio::spawn(async move {
            axum::serve(listener, router)
                .with_graceful_shutdown(async move { stopped.notified().await })
                .await
        });
        let request = tokio::spawn(send(client.post("/notes", "k", "{}")));
        tokio::time::timeout(Duration::from_secs(20), gate.entered.notified())
            .await
            .expect("the handler began");
        request.abort();
        let _ = request.await;
        stop.notify_one();
        server.await.unwrap().unwrap();
        // The server is gone; the execution is not.
        assert_eq!(executions.len(), 1, "{mode:?}");
        let waiting = tokio::spawn({
            let executions = executions.clone();
            async move { executions.wait().await }
        });
        tokio::task::yield_now().await;
        assert!(
            !waiting.is_finished(),
            "{mode:?}: waits while the handler runs"
        );
        gate.release.notify_one();
        tokio::time::timeout(Duration::from_secs(20), waiting)
            .await
            .expect("the execution ended")
            .unwrap();
        let completed = db
            .count("SELECT count(*) FROM idemkey_records WHERE state = 2")
            .await;
        assert_eq!(completed, 1, "{mode:?}: the response was stored");
    }
}
