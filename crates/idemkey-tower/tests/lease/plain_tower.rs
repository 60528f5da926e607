//! The layer on a plain tower service, without a router or a socket.

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use axum::body::Body;
use http::{Request, Response};
use idemkey_core::MemoryStore;
use idemkey_tower::{Actor, Config, IdempotencyLayer};
use tower::{ServiceBuilder, ServiceExt, service_fn};

fn request() -> Request<String> {
    let mut request = Request::post("/charge")
        .header("idempotency-key", "k")
        .body("{}".to_owned())
        .expect("a valid request");
    request.extensions_mut().insert(Actor::new("a"));
    request
}

#[tokio::test]
async fn a_service_error_is_returned_and_releases_the_claim() {
    let runs = Arc::new(AtomicUsize::new(0));
    let counter = runs.clone();
    let service = service_fn(move |_: Request<Body>| {
        let n = counter.fetch_add(1, Ordering::SeqCst) + 1;
        async move {
            match n {
                1 => Err("backend down"),
                _ => Ok::<_, &str>(Response::new(Body::from("charged"))),
            }
        }
    });
    let layer = IdempotencyLayer::with_config(MemoryStore::new(), Config::default());
    let service = ServiceBuilder::new().layer(layer).service(service);

    let first = service.clone().oneshot(request()).await;
    assert_eq!(first.unwrap_err(), "backend down");
    let second = service.clone().oneshot(request()).await.unwrap();
    assert_eq!(second.status(), 200);
    let third = service.oneshot(request()).await.unwrap();
    assert_eq!(third.headers()["idempotent-replayed"], "true");
    assert_eq!(runs.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn requests_without_a_key_on_other_methods_pass_through() {
    let service = service_fn(|_: Request<Body>| async {
        Ok::<_, Infallible>(Response::new(Body::from("ok")))
    });
    let layer = IdempotencyLayer::new(MemoryStore::new());
    let service = ServiceBuilder::new().layer(layer).service(service);
    let get = Request::get("/charge").body(String::new()).unwrap();
    assert_eq!(service.oneshot(get).await.unwrap().status(), 200);
}
