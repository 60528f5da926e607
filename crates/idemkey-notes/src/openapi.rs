//! `/openapi.json`: the service's OpenAPI 3 document, with the idempotency rules published in
//! an `x-idempotency` extension (behaviour [§9](https://docs.rs/idemkey/latest/idemkey/behaviour/index.html#9-retention-and-time)).
//!
//! The `doc_*` functions exist only to carry the path documentation; a test checks that every
//! documented operation is a real route.

use idemkey_tower::openapi::IdempotencyOpenApi;
use serde::Serialize;
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::{Modify, OpenApi, ToSchema};

use crate::config::{Mode, NotesConfig};
use crate::create::CreateNote;
use crate::db::Note;
use crate::read::NoteList;

/// An RFC 9457 problem, as every error of the service is answered.
#[derive(Serialize, ToSchema)]
pub(crate) struct ProblemDoc {
    /// A URI naming the problem type, its slug last. By default the type's section of
    /// idemkey's documentation:
    /// `https://docs.rs/idemkey/latest/idemkey/problems/index.html#key-reused`.
    #[serde(rename = "type")]
    pub(crate) type_uri: String,
    /// A short summary of the type.
    pub(crate) title: String,
    /// The HTTP status.
    pub(crate) status: u16,
    /// What happened this time.
    pub(crate) detail: Option<String>,
}

/// Creates a note. Requires `Idempotency-Key` (unless the service runs with `--optional-key`).
#[utoipa::path(post, path = "/v1/notes", request_body = CreateNote,
    params(("Idempotency-Key" = String, Header,
        pattern = "^([!#-~][!-~]{0,254}|\"([!#-\\[\\]-~]|\\\\[\"\\\\]){1,255}\")$",
        description = "1-255 visible ASCII characters, bare or as a quoted string")),
    responses(
        (status = 201, description = "Created; a retry replays it with `Idempotent-Replayed: true`", body = Note,
            headers(("Location" = String, description = "/v1/notes/{id}"))),
        (status = 400, description = "key-missing, key-invalid or validation", body = ProblemDoc, content_type = "application/problem+json"),
        (status = 401, description = "unauthorized", body = ProblemDoc, content_type = "application/problem+json"),
        (status = 409, description = "request-in-flight, with Retry-After", body = ProblemDoc, content_type = "application/problem+json"),
        (status = 413, description = "payload-too-large", body = ProblemDoc, content_type = "application/problem+json"),
        (status = 415, description = "unsupported-media-type", body = ProblemDoc, content_type = "application/problem+json"),
        (status = 422, description = "key-reused: the key was used for a different request", body = ProblemDoc, content_type = "application/problem+json"),
        (status = 429, description = "actor-cap-reached, with Retry-After: not executed (only with per-actor caps)", body = ProblemDoc, content_type = "application/problem+json"),
        (status = 500, description = "outcome-unknown, previous-attempt-unknown or internal", body = ProblemDoc, content_type = "application/problem+json"),
        (status = 503, description = "store-unavailable, with Retry-After: not executed", body = ProblemDoc, content_type = "application/problem+json"),
    ),
    security(("bearer" = [])))]
#[allow(dead_code)]
fn doc_create_note() {}

/// The actor's notes, oldest first.
#[utoipa::path(get, path = "/v1/notes", responses(
    (status = 200, body = NoteList),
    (status = 401, body = ProblemDoc, content_type = "application/problem+json")),
    security(("bearer" = [])))]
#[allow(dead_code)]
fn doc_list_notes() {}

/// One of the actor's notes; another actor's is 404.
#[utoipa::path(get, path = "/v1/notes/{id}", params(("id" = String, Path)), responses(
    (status = 200, body = Note),
    (status = 401, body = ProblemDoc, content_type = "application/problem+json"),
    (status = 404, body = ProblemDoc, content_type = "application/problem+json")),
    security(("bearer" = [])))]
#[allow(dead_code)]
fn doc_get_note() {}

/// Liveness and database reachability.
#[utoipa::path(get, path = "/healthz", responses((status = 200, body = String), (status = 503, body = String)))]
#[allow(dead_code)]
fn doc_healthz() {}

/// Prometheus metrics (`idemkey_*`).
#[utoipa::path(get, path = "/metrics", responses((status = 200, body = String, content_type = "text/plain")))]
#[allow(dead_code)]
fn doc_metrics() {}

#[derive(OpenApi)]
#[openapi(
    info(title = "idemkey notes", description = "The reference notes service of idemkey."),
    paths(doc_create_note, doc_list_notes, doc_get_note, doc_healthz, doc_metrics),
    components(schemas(Note, NoteList, CreateNote, ProblemDoc)),
    modifiers(&BearerAuth)
)]
struct ApiDoc;

struct BearerAuth;

impl Modify for BearerAuth {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let scheme = HttpBuilder::new().scheme(HttpAuthScheme::Bearer).build();
        if let Some(components) = openapi.components.as_mut() {
            components.add_security_scheme("bearer", SecurityScheme::Http(scheme));
        }
    }
}

/// The document for this configuration, as JSON: the routes above, with the idempotency of
/// `POST /v1/notes` documented by the layer's own [`IdempotencyOpenApi`].
pub fn document(config: &NotesConfig) -> serde_json::Value {
    let mut openapi = ApiDoc::openapi();
    IdempotencyOpenApi::new(&crate::idempotency_config(config))
        .paths(["/v1/notes"])
        .modify(&mut openapi);
    let rules = openapi
        .extensions
        .as_mut()
        .and_then(|extensions| extensions.get_mut("x-idempotency"))
        .and_then(serde_json::Value::as_object_mut);
    if let Some(rules) = rules {
        let settled = match config.mode {
            Mode::Atomic => "rolls back",
            Mode::Lease => "releases the claim (5xx) or frees the key (the rejections)",
        };
        let stored = format!(
            "2xx, 3xx and the 4xx that state an outcome (402, 410, ...) are stored; {REJECTION_LIST} \
             reject the request as sent and are never stored; anything else {settled}"
        );
        rules.insert("mode".into(), config.mode.to_string().into());
        let retention = humantime::format_duration(config.retention).to_string();
        rules.insert("retention".into(), retention.into());
        rules.insert("stored".into(), stored.into());
    }
    serde_json::to_value(&openapi).unwrap_or_default()
}

/// The rejection statuses, as the document lists them.
const REJECTION_LIST: &str =
    "400, 401, 403, 404, 405, 406, 408, 409, 411, 413, 414, 415, 422, 425, 429, 431";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_listed_rejections_are_the_policys() {
        let listed: Vec<u16> = REJECTION_LIST
            .split(", ")
            .map(|s| s.parse().unwrap())
            .collect();
        assert_eq!(listed, idemkey_core::REJECTION_STATUSES);
    }
}
