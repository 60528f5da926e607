//! The test server's HTTP surface, after the reference notes service (behaviour §13).

use std::sync::Arc;

use axum::{
    Router,
    body::{Body, Bytes},
    extract::State,
    http::{HeaderMap, StatusCode, header},
    response::Response,
    routing::post,
};
use serde_json::json;

use super::store::{Decision, Store, Stored, fingerprint};

pub(crate) fn router(store: Arc<Store>) -> Router {
    Router::new()
        .route("/v1/notes", post(create).get(list))
        .with_state(store)
}

async fn create(State(store): State<Arc<Store>>, headers: HeaderMap, body: Bytes) -> Response {
    let Some(actor) = actor(&headers) else {
        return problem(401, "unauthorized");
    };
    let key = match key(&headers) {
        Ok(key) => key,
        Err(kind) => return problem(400, kind),
    };
    let Some(key) = key else {
        if !store.bugs.optional_key {
            return problem(400, "key-missing");
        }
        return respond(&store.create_note(actor, &body), false);
    };
    if store.bugs.no_storage {
        return respond(&store.create_note(actor, &body), false);
    }
    let scope = store.scope(actor, &key);
    let fingerprint = fingerprint(&body);
    match store.decide(&scope, &fingerprint) {
        Decision::Replay(stored) => return replay(&store, &stored),
        Decision::Mismatch if store.bugs.mismatch_409 => return problem(409, "key-reused"),
        Decision::Mismatch => return problem(422, "key-reused"),
        Decision::InFlight => return in_flight(),
        Decision::Execute => {}
    }
    if store.bugs.racy_claim {
        store.rendezvous(&scope).await;
    }
    let response = store.create_note(actor, &body);
    store.finish(&scope, &fingerprint, &response);
    respond(&response, false)
}

async fn list(State(store): State<Arc<Store>>, headers: HeaderMap) -> Response {
    let Some(actor) = actor(&headers) else {
        return problem(401, "unauthorized");
    };
    let body = json!({"notes": store.notes(actor)}).to_string();
    build(
        200,
        Some("application/json"),
        None,
        body.into_bytes(),
        false,
    )
}

/// `Bearer s1` is actor `a`, `Bearer s2` actor `b`.
fn actor(headers: &HeaderMap) -> Option<&'static str> {
    match headers.get(header::AUTHORIZATION)?.to_str().ok()? {
        "Bearer s1" => Some("a"),
        "Bearer s2" => Some("b"),
        _ => None,
    }
}

/// The key, `None` when absent (a key is required unless `optional_key`), or the problem kind.
fn key(headers: &HeaderMap) -> Result<Option<String>, &'static str> {
    let mut values = headers.get_all("idempotency-key").iter();
    let (Some(value), None) = (values.next(), values.next()) else {
        return if headers.contains_key("idempotency-key") {
            Err("key-invalid")
        } else {
            Ok(None)
        };
    };
    let bytes = value.as_bytes();
    let bare = match bytes {
        [b'"', inner @ .., b'"'] => inner,
        _ => bytes,
    };
    let visible = bare.iter().all(|b| (0x21..=0x7e).contains(b));
    if bare.is_empty() || bare.len() > 255 || !visible {
        return Err("key-invalid");
    }
    Ok(Some(String::from_utf8_lossy(bare).into_owned()))
}

fn replay(store: &Store, stored: &Stored) -> Response {
    let mut replayed = stored.clone();
    if store.bugs.replay_status_200 {
        replayed.status = 200;
    }
    if store.bugs.replay_without_headers {
        let Stored { status, body, .. } = replayed;
        return build(status, None, None, body, true);
    }
    respond(&replayed, true)
}

fn respond(stored: &Stored, replayed: bool) -> Response {
    build(
        stored.status,
        Some(stored.content_type),
        stored.location.as_deref(),
        stored.body.clone(),
        replayed,
    )
}

fn problem(status: u16, kind: &str) -> Response {
    let body = json!({"type": kind, "title": kind, "status": status}).to_string();
    build(
        status,
        Some("application/problem+json"),
        None,
        body.into_bytes(),
        false,
    )
}

fn in_flight() -> Response {
    let mut response = problem(409, "request-in-flight");
    response
        .headers_mut()
        .insert(header::RETRY_AFTER, header::HeaderValue::from_static("1"));
    response
}

fn build(
    status: u16,
    content_type: Option<&str>,
    location: Option<&str>,
    body: Vec<u8>,
    replayed: bool,
) -> Response {
    let mut builder = Response::builder().status(StatusCode::from_u16(status).expect("status"));
    if let Some(content_type) = content_type {
        builder = builder.header(header::CONTENT_TYPE, content_type);
    }
    if let Some(location) = location {
        builder = builder.header(header::LOCATION, location);
    }
    if replayed {
        builder = builder.header("idempotent-replayed", "true");
    }
    builder.body(Body::from(body)).expect("response")
}
