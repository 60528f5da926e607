//! The middleware in an actix application, in process: concurrent duplicates forced to meet
//! while the first runs, a client that leaves mid-handler, rejections marked not executed,
//! and atomic mode's transaction, on the real layer and stores.
#![allow(clippy::unwrap_used)]

use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use actix_web::dev::{Service, ServiceResponse};
use actix_web::http::StatusCode;
use actix_web::{App, HttpMessage, HttpResponse, test, web};
use idemkey_actix::atomic::AtomicIdempotencyLayer;
use idemkey_actix::{Actor, Idempotency, IdempotencyLayer, NotExecuted, Tx};
use idemkey_core::MemoryStore;
use idemkey_sqlx::SqliteStore;
use tokio::sync::Notify;

/// What a test's handler shares with the test: how often it ran, and the gate it waits at.
#[derive(Clone, Default)]
struct Gate {
    runs: Arc<AtomicUsize>,
    entered: Arc<Notify>,
    release: Arc<Notify>,
}

/// Counts the run, says it is in, and waits to be released: the race is held open here.
async fn gated(gate: web::Data<Gate>, body: web::Bytes) -> HttpResponse {
    let run = gate.runs.fetch_add(1, Ordering::SeqCst) + 1;
    gate.entered.notify_one();
    gate.release.notified().await;
    HttpResponse::Created().body(format!("run {run}: {}", String::from_utf8_lossy(&body)))
}

/// A 400 for a body `bad`, marked not executed; 201 otherwise.
async fn validating(body: web::Bytes) -> HttpResponse {
    if body.as_ref() == b"bad" {
        let mut response = HttpResponse::BadRequest().body("bad body");
        response.extensions_mut().insert(NotExecuted);
        return response;
    }
    HttpResponse::Created().body(body)
}

fn post(key: &str, body: &'static str) -> test::TestRequest {
    test::TestRequest::post()
        .uri("/orders")
        .insert_header(("idempotency-key", key))
        .set_payload(body)
}

async fn text(response: ServiceResponse) -> String {
    String::from_utf8(test::read_body(response).await.to_vec()).unwrap()
}

macro_rules! lease_app {
    ($gate:expr, $handler:expr) => {
        test::init_service(
            App::new().app_data(web::Data::new($gate)).service(
                web::resource("/orders")
                    .wrap(Idempotency::new(IdempotencyLayer::new(MemoryStore::new())))
                    .wrap_fn(|request, service| {
                        request.extensions_mut().insert(Actor::new("tenant-1"));
                        service.call(request)
                    })
                    .route(web::post().to($handler)),
            ),
        )
        .await
    };
}

#[actix_web::test]
async fn a_duplicate_sent_while_the_first_runs_is_not_executed() {
    let gate = Gate::default();
    let app = Rc::new(lease_app!(gate.clone(), gated));
    let first = actix_web::rt::spawn({
        let app = app.clone();
        async move { text(app.call(post("k1", "one").to_request()).await.unwrap()).await }
    });
    gate.entered.notified().await;
    // The first holds the claim, its handler parked at the gate.
    let duplicate = app.call(post("k1", "one").to_request()).await.unwrap();
    assert_eq!(duplicate.status(), StatusCode::CONFLICT);
    assert!(duplicate.headers().contains_key("retry-after"));
    assert!(text(duplicate).await.contains("request-in-flight"));
    gate.release.notify_one();
    assert_eq!(first.await.unwrap(), "run 1: one");
    let replay = app.call(post("k1", "one").to_request()).await.unwrap();
    assert_eq!(replay.status(), StatusCode::CREATED);
    assert_eq!(replay.headers().get("idempotent-replayed").unwrap(), "true");
    assert_eq!(text(replay).await, "run 1: one");
    assert_eq!(gate.runs.load(Ordering::SeqCst), 1);
}

#[actix_web::test]
async fn a_client_that_leaves_does_not_cut_the_handler_short() {
    let gate = Gate::default();
    let app = Rc::new(lease_app!(gate.clone(), gated));
    let first = actix_web::rt::spawn({
        let app = app.clone();
        async move { app.call(post("k2", "two").to_request()).await.map(|_| ()) }
    });
    gate.entered.notified().await;
    // The client hangs up: its request's future is dropped while the handler runs.
    first.abort();
    let _ = first.await;
    gate.release.notify_one();
    // The handler finishes in its own task, and its answer is stored for the retry.
    let mut replay = app.call(post("k2", "two").to_request()).await.unwrap();
    while replay.status() == StatusCode::CONFLICT {
        tokio::task::yield_now().await;
        replay = app.call(post("k2", "two").to_request()).await.unwrap();
    }
    assert_eq!(replay.status(), StatusCode::CREATED);
    assert_eq!(replay.headers().get("idempotent-replayed").unwrap(), "true");
    assert_eq!(text(replay).await, "run 1: two");
    assert_eq!(gate.runs.load(Ordering::SeqCst), 1);
}

#[actix_web::test]
async fn a_rejection_marked_not_executed_frees_the_key() {
    let app = lease_app!(Gate::default(), validating);
    let rejected = app.call(post("k3", "bad").to_request()).await.unwrap();
    assert_eq!(rejected.status(), StatusCode::BAD_REQUEST);
    // Not stored: the same key with a corrected body runs, instead of 422 key-reused.
    let corrected = app.call(post("k3", "good").to_request()).await.unwrap();
    assert_eq!(corrected.status(), StatusCode::CREATED);
    assert!(!corrected.headers().contains_key("idempotent-replayed"));
    assert_eq!(text(corrected).await, "good");
}

/// Atomic mode: the order commits with the stored response; a failed insert (the table's
/// CHECK) rolls both back.
async fn insert_order(mut tx: Tx<sqlx::Sqlite>, body: web::Bytes) -> HttpResponse {
    let inserted = sqlx::query("INSERT INTO orders (body) VALUES (?)")
        .bind(String::from_utf8_lossy(&body).into_owned())
        .execute(&mut *tx)
        .await;
    match inserted {
        Ok(_) => HttpResponse::Created().body(body),
        Err(error) => {
            let mut response = HttpResponse::InternalServerError().body(error.to_string());
            response
                .extensions_mut()
                .insert(idemkey_actix::atomic::DbError::from(error));
            response
        }
    }
}

#[actix_web::test]
async fn atomic_mode_commits_the_order_with_its_answer_or_neither() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("orders.db").display());
    let store = SqliteStore::connect(&url).await.unwrap();
    sqlx::query("CREATE TABLE orders (body TEXT NOT NULL CHECK (body <> 'bad'))")
        .execute(store.pool())
        .await
        .unwrap();
    let app = test::init_service(
        App::new().service(
            web::resource("/orders")
                .wrap(Idempotency::new(AtomicIdempotencyLayer::new(store.clone())))
                .wrap_fn(|request, service| {
                    request.extensions_mut().insert(Actor::new("tenant-1"));
                    service.call(request)
                })
                .route(web::post().to(insert_order)),
        ),
    )
    .await;
    let failed = app.call(post("a1", "bad").to_request()).await.unwrap();
    assert_eq!(failed.status(), StatusCode::INTERNAL_SERVER_ERROR);
    let created = app.call(post("a2", "good").to_request()).await.unwrap();
    assert_eq!(created.status(), StatusCode::CREATED);
    let replay = app.call(post("a2", "good").to_request()).await.unwrap();
    assert_eq!(replay.headers().get("idempotent-replayed").unwrap(), "true");
    assert_eq!(text(replay).await, "good");
    let orders: Vec<(String,)> = sqlx::query_as("SELECT body FROM orders")
        .fetch_all(store.pool())
        .await
        .unwrap();
    assert_eq!(orders, [("good".to_owned(),)]);
    // The failed key kept nothing: it runs again (and fails again), never replayed.
    let again = app.call(post("a1", "bad").to_request()).await.unwrap();
    assert_eq!(again.status(), StatusCode::INTERNAL_SERVER_ERROR);
    assert!(!again.headers().contains_key("idempotent-replayed"));
}

#[actix_web::test]
async fn every_path_of_a_route_is_one_operation() {
    let app = test::init_service(
        App::new().service(
            web::resource("/orders/{id}/refunds")
                .wrap(Idempotency::new(IdempotencyLayer::new(MemoryStore::new())))
                .wrap_fn(|request, service| {
                    request.extensions_mut().insert(Actor::new("tenant-1"));
                    service.call(request)
                })
                .route(web::post().to(validating)),
        ),
    )
    .await;
    let refund = |id: &str| {
        test::TestRequest::post()
            .uri(&format!("/orders/{id}/refunds"))
            .insert_header(("idempotency-key", "r1"))
            .set_payload("refund")
            .to_request()
    };
    assert_eq!(
        app.call(refund("1")).await.unwrap().status(),
        StatusCode::CREATED
    );
    // One operation, `POST /orders/{id}/refunds`: the key sent to another order is another
    // request under the same key, refused rather than run or replayed.
    let other = app.call(refund("2")).await.unwrap();
    assert_eq!(other.status(), StatusCode::UNPROCESSABLE_ENTITY);
    assert!(text(other).await.contains("key-reused"));
}
