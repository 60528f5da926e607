//! The service's own problem responses, beside idemkey's (behaviour [§10](https://docs.rs/idemkey/latest/idemkey/behaviour/index.html#10-errors), [§13](https://docs.rs/idemkey/latest/idemkey/behaviour/index.html#13-the-reference-notes-service)).

use axum::Extension;
use axum::response::{IntoResponse, Response};
use std::time::Duration;

use idemkey_core::{Problem, ProblemKind};
use idemkey_tower::{NotExecuted, problem_response};

/// The slugs of the service's own problems, beside idemkey's
/// ([`ProblemKind`](idemkey_core::ProblemKind)). Each has a section of
/// [`idemkey::problems`](https://docs.rs/idemkey/latest/idemkey/problems/index.html).
pub const PROBLEM_SLUGS: [&str; 5] = [
    VALIDATION,
    UNSUPPORTED_MEDIA_TYPE,
    UNAUTHORIZED,
    NOT_FOUND,
    INTERNAL,
];

const VALIDATION: &str = "validation";
const UNSUPPORTED_MEDIA_TYPE: &str = "unsupported-media-type";
const UNAUTHORIZED: &str = "unauthorized";
const NOT_FOUND: &str = "not-found";
const INTERNAL: &str = "internal";

/// 400 `validation`: the body is not a valid note. Never stored: a front end marks it
/// not executed.
pub fn validation_problem(detail: impl Into<String>) -> Problem {
    Problem::custom(VALIDATION, "Request body is invalid", 400).detail(detail)
}

/// 415 `unsupported-media-type`. Never stored: a front end marks it not executed.
pub fn unsupported_media_type_problem() -> Problem {
    Problem::custom(UNSUPPORTED_MEDIA_TYPE, "Content-Type must be JSON", 415)
        .detail("send the note as application/json")
}

/// 401 `unauthorized`; a front end adds `WWW-Authenticate: Bearer`.
pub fn unauthorized_problem() -> Problem {
    Problem::custom(UNAUTHORIZED, "Authentication is required", 401)
        .detail("send Authorization: Bearer <token>")
}

/// 404 `not-found`.
pub fn not_found_problem() -> Problem {
    Problem::custom(NOT_FOUND, "Not found", 404).detail("no such note")
}

/// 500 `internal`: a database failure while handling the request, logged here.
pub fn internal_problem(error: &sqlx::Error) -> Problem {
    tracing::error!(%error, "database error");
    Problem::custom(INTERNAL, "Internal error", 500).detail("database error")
}

/// 503 `store-unavailable`: no connection to write with (the pool's or SQLite's writer's wait
/// ran out), logged here. Nothing was written: a front end marks it not executed, so lease
/// mode gives its claim back (discarded if fresh, released if taken over) and the client's
/// retry with the same key runs it.
pub fn unavailable_problem(error: &idemkey_core::Error) -> Problem {
    tracing::warn!(%error, "no database connection to write the note with");
    Problem::new(ProblemKind::StoreUnavailable)
        .detail("the note was not written; retry with the same key")
        .retry_after(Duration::from_secs(1))
}

/// A problem of a rejection decided before anything ran: marked [`NotExecuted`].
pub(crate) fn not_executed(problem: &Problem) -> Response {
    (Extension(NotExecuted), problem_response(problem)).into_response()
}

pub(crate) fn unauthorized() -> Response {
    let mut response = problem_response(&unauthorized_problem());
    response.headers_mut().insert(
        http::header::WWW_AUTHENTICATE,
        http::HeaderValue::from_static("Bearer"),
    );
    response
}

pub(crate) fn not_found() -> Response {
    problem_response(&not_found_problem())
}

pub(crate) fn internal(error: &sqlx::Error) -> Response {
    problem_response(&internal_problem(error))
}

pub(crate) fn unavailable(error: &idemkey_core::Error) -> Response {
    not_executed(&unavailable_problem(error))
}
