//! Whose answer a failure is: the handler's own errors stay the handler's.

use axum::body::Body;
use http::{Request, Response};
use idemkey_tower::atomic::AtomicIdempotencyLayer;
use idemkey_tower::{Actor, Config};
use sqlx::Sqlite;
use tower::{Layer, ServiceExt};

use crate::bed::Db;

/// Atomic mode, a request without a key on a route where keys are optional: the inner
/// service's error is returned as the service returned it, not turned into
/// `store-unavailable`, which would tell the client "not executed, retry" (behaviour §10).
#[idemkey_test_support::test]
async fn an_unrecorded_handlers_error_is_its_own() {
    let db = Db::new().await;
    let failing = tower::service_fn(|_: Request<Body>| async {
        Err::<Response<Body>, _>(std::io::Error::other("the handler's own failure"))
    });
    let config = Config::default().require_key(false);
    let service =
        AtomicIdempotencyLayer::<Sqlite>::with_config(db.store.clone(), config).layer(failing);
    let mut request = Request::post("/things").body(Body::empty()).unwrap();
    request.extensions_mut().insert(Actor::new("a"));
    let error = service.oneshot(request).await.unwrap_err();
    assert_eq!(error.to_string(), "the handler's own failure");
}
