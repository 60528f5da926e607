//! `POST /v1/notes`: validate, insert, answer 201 — in either mode.

use std::time::SystemTime;

use axum::Extension;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use idemkey_core::fingerprint::is_json_media_type;
use idemkey_tower::Actor;
use idemkey_tower::atomic::Tx;
use serde::Deserialize;

use crate::db::{Note, NotesDb};
use crate::{AppState, problems};

/// The longest title, in characters, after trimming.
pub const MAX_TITLE_CHARS: usize = 200;

/// The request body of `POST /v1/notes`.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateNote {
    /// 1 to 200 characters after trimming.
    pub title: String,
}

/// Validates the request before anything runs; a rejection is marked not executed.
#[allow(clippy::result_large_err)]
fn validate(headers: &HeaderMap, body: &[u8]) -> Result<Note, Response> {
    let media_type = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .map(|v| v.trim().to_ascii_lowercase());
    if !media_type.as_deref().is_some_and(is_json_media_type) {
        return Err(problems::unsupported_media_type());
    }
    let input: CreateNote = serde_json::from_slice(body)
        .map_err(|e| problems::validation(format!("body is not a valid note: {e}")))?;
    let title = input.title.trim();
    let chars = title.chars().count();
    if !(1..=MAX_TITLE_CHARS).contains(&chars) {
        return Err(problems::validation(format!(
            "title must be 1 to {MAX_TITLE_CHARS} characters after trimming, not {chars}"
        )));
    }
    Ok(Note {
        id: uuid::Uuid::new_v4().to_string(),
        title: title.to_owned(),
        created_at: humantime::format_rfc3339_millis(SystemTime::now()).to_string(),
    })
}

fn created(note: &Note) -> Response {
    let location = format!("/v1/notes/{}", note.id);
    (
        StatusCode::CREATED,
        [(header::LOCATION, location)],
        axum::Json(note),
    )
        .into_response()
}

/// Lease mode: the note is written on its own; the layer stores the response afterwards.
pub(crate) async fn create_lease<DB: NotesDb>(
    State(state): State<AppState<DB>>,
    Extension(actor): Extension<Actor>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let note = match validate(&headers, &body) {
        Ok(note) => note,
        Err(rejection) => return rejection,
    };
    let mut conn = match state.pool.acquire().await {
        Ok(conn) => conn,
        Err(error) => return problems::internal(&error),
    };
    match DB::insert_note(&mut conn, actor.as_str(), &note).await {
        Ok(()) => created(&note),
        Err(error) => problems::internal(&error),
    }
}

/// Atomic mode: the note is written on the claim's transaction, which the layer commits
/// with the stored response.
pub(crate) async fn create_atomic<DB: NotesDb>(
    Extension(actor): Extension<Actor>,
    mut tx: Tx<DB>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let note = match validate(&headers, &body) {
        Ok(note) => note,
        Err(rejection) => return rejection,
    };
    match DB::insert_note(&mut tx, actor.as_str(), &note).await {
        Ok(()) => created(&note),
        Err(error) => problems::internal(&error),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn json() -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(header::CONTENT_TYPE, "application/json".parse().unwrap());
        headers
    }

    #[test]
    fn titles_are_trimmed_and_bounded() {
        assert_eq!(
            validate(&json(), br#"{"title":"  hi  "}"#).unwrap().title,
            "hi"
        );
        let max = format!(r#"{{"title":"{}"}}"#, "é".repeat(200));
        assert!(validate(&json(), max.as_bytes()).is_ok());
        let over = format!(r#"{{"title":"{}"}}"#, "é".repeat(201));
        assert!(validate(&json(), over.as_bytes()).is_err());
        assert!(validate(&json(), br#"{"title":" \t "}"#).is_err());
    }

    #[test]
    fn unknown_fields_bad_json_and_media_types_are_rejected() {
        assert!(validate(&json(), br#"{"title":"a","x":1}"#).is_err());
        assert!(validate(&json(), b"{").is_err());
        assert!(validate(&HeaderMap::new(), br#"{"title":"a"}"#).is_err());
    }
}
