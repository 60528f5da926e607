//! Handlers whose behaviour and timing the tests control.

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Extension, Router};
use bytes::Bytes;
use http::StatusCode;
use http::header::{CONTENT_TYPE, LOCATION, SET_COOKIE};
use idemkey_tower::Keys;
use idemkey_tower::{Actor, NotExecuted};

use super::Ctx;

pub(super) fn routes(ctx: Arc<Ctx>) -> Router {
    Router::new()
        .route("/notes", post(notes).get(|| async { "list" }))
        .route("/gated", post(gated))
        .route("/flaky", post(flaky))
        .route("/panic", post(panics))
        .route("/validate", post(validate))
        .route("/shaky", post(shaky))
        .route("/missing", post(missing))
        .route("/gone", post(gone))
        .route("/big", post(big))
        .route("/stream", post(stream))
        .with_state(ctx)
}

/// Authentication stand-in: the actor is the `x-actor` header.
pub(super) async fn authenticate(mut request: Request) -> Request {
    let actor = request
        .headers()
        .get("x-actor")
        .and_then(|v| v.to_str().ok());
    if let Some(actor) = actor.map(Actor::new) {
        request.extensions_mut().insert(actor);
    }
    request
}

/// Counts request futures dropped before they finished.
pub(super) async fn probe(State(ctx): State<Arc<Ctx>>, request: Request, next: Next) -> Response {
    struct Armed(Arc<Ctx>, bool);
    impl Drop for Armed {
        fn drop(&mut self) {
            if self.1 {
                self.0.dropped.raise(1);
            }
        }
    }
    let mut armed = Armed(ctx, true);
    let response = next.run(request).await;
    armed.1 = false;
    response
}

/// Counts a run and records its derived key; returns the run's number.
fn run<'a>(ctx: &'a Ctx, request: &Request) -> impl Future<Output = usize> + Send + 'a {
    // Not an `async fn`: its future would hold the `&Request`, which is not `Send`.
    let keys = Keys::from_extensions(request.extensions());
    counted(ctx, keys)
}

async fn counted(ctx: &Ctx, keys: Option<Keys>) -> usize {
    if let Some(keys) = keys {
        let keys = keys.get().await.expect("the claim is on disk");
        ctx.derived
            .lock()
            .expect("not poisoned")
            .push(keys.key("charge"));
    }
    ctx.runs.fetch_add(1, Ordering::SeqCst) + 1
}

async fn created(n: usize, request: Request) -> Response {
    let body = axum::body::to_bytes(request.into_body(), usize::MAX)
        .await
        .expect("a readable body");
    let headers = [
        (LOCATION, format!("/notes/{n}")),
        (CONTENT_TYPE, "application/json".to_owned()),
        (SET_COOKIE, "session=1".to_owned()),
    ];
    let body = format!(r#"{{"n":{n},"len":{}}}"#, body.len());
    (
        StatusCode::CREATED,
        headers,
        [("x-request-id", "rid-1")],
        body,
    )
        .into_response()
}

async fn notes(State(ctx): State<Arc<Ctx>>, request: Request) -> Response {
    created(run(&ctx, &request).await, request).await
}

async fn gated(State(ctx): State<Arc<Ctx>>, request: Request) -> Response {
    let n = run(&ctx, &request).await;
    ctx.entered.raise(1);
    ctx.release.take().await;
    created(n, request).await
}

async fn flaky(State(ctx): State<Arc<Ctx>>, request: Request) -> Response {
    match run(&ctx, &request).await {
        1 => (StatusCode::INTERNAL_SERVER_ERROR, "upstream failed").into_response(),
        n => created(n, request).await,
    }
}

async fn panics(State(ctx): State<Arc<Ctx>>, request: Request) -> Response {
    let n = run(&ctx, &request).await;
    assert!(n != 1, "the first run panics on purpose");
    created(n, request).await
}

async fn validate(State(ctx): State<Arc<Ctx>>, request: Request) -> Response {
    let n = run(&ctx, &request).await;
    let (parts, body) = request.into_parts();
    let bytes = axum::body::to_bytes(body, usize::MAX)
        .await
        .expect("a readable body");
    let value: serde_json::Value = serde_json::from_slice(&bytes).unwrap_or_default();
    if value["title"].is_string() {
        return created(n, Request::from_parts(parts, Body::from(bytes))).await;
    }
    let rejection = (
        StatusCode::BAD_REQUEST,
        Extension(NotExecuted),
        "title is required",
    );
    rejection.into_response()
}

/// Fails, then rejects as not executed, then succeeds.
async fn shaky(State(ctx): State<Arc<Ctx>>, request: Request) -> Response {
    match run(&ctx, &request).await {
        1 => (StatusCode::BAD_GATEWAY, "upstream failed").into_response(),
        2 => (StatusCode::BAD_REQUEST, Extension(NotExecuted), "not now").into_response(),
        n => created(n, request).await,
    }
}

async fn missing(State(ctx): State<Arc<Ctx>>, request: Request) -> Response {
    run(&ctx, &request).await;
    (StatusCode::NOT_FOUND, "no such parent").into_response()
}

async fn gone(State(ctx): State<Arc<Ctx>>, request: Request) -> Response {
    run(&ctx, &request).await;
    (StatusCode::GONE, "the offer has ended").into_response()
}

async fn big(State(ctx): State<Arc<Ctx>>, request: Request) -> Response {
    run(&ctx, &request).await;
    let headers = [(CONTENT_TYPE, "text/plain")];
    (StatusCode::CREATED, headers, "x".repeat(100)).into_response()
}

async fn stream(State(ctx): State<Arc<Ctx>>, request: Request) -> Response {
    run(&ctx, &request).await;
    let chunks = ["one ", "two ", "three"].map(|c| Ok::<_, Infallible>(Bytes::from(c)));
    let body = Body::from_stream(futures_util::stream::iter(chunks));
    (StatusCode::OK, [(CONTENT_TYPE, "text/plain")], body).into_response()
}
