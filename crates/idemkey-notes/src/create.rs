//! `POST /v1/notes`: validate, insert, answer 201 — in either mode.

use std::time::SystemTime;

use axum::Extension;
use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use idemkey_core::fingerprint::is_json_media_type;
use idemkey_core::{Claim, DerivedKeys, Problem};
use idemkey_sqlx::SqlxStore;
use idemkey_tower::atomic::{DbError, Tx};
use idemkey_tower::{Actor, Keys};
use serde::Deserialize;
use sqlx::pool::PoolConnection;

use crate::db::{Note, NotesDb};
use crate::{AppState, problems};

/// The longest title, in characters, after trimming.
pub const MAX_TITLE_CHARS: usize = 200;

/// The request body of `POST /v1/notes`.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateNote {
    /// 1 to 200 characters after trimming (Unicode white space); no NUL character. The
    /// pattern: no NUL, and one character that is not white space (what `str::trim` removes).
    #[schema(
        min_length = 1,
        max_length = 200,
        pattern = "^[^\\u0000]*[^\\u0000\\t\\n\\u000b\\f\\r \\u0085\\u00a0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f\\u3000][^\\u0000]*$"
    )]
    pub title: String,
}

/// Validates the request before anything runs; a rejection is marked not executed.
#[allow(clippy::result_large_err)]
fn validate(headers: &HeaderMap, body: &[u8]) -> Result<Note, Response> {
    let content_type = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok());
    parse_note(content_type, body).map_err(|problem| problems::not_executed(&problem))
}

/// The note a `POST /v1/notes` asks for, with a new id and the time now, from the request's
/// `Content-Type` and body; the problem to answer otherwise (400 `validation` or 415
/// `unsupported-media-type`), which nothing has run for: never stored. Every front end of
/// the notes validates with it, so that they answer alike.
pub fn parse_note(content_type: Option<&str>, body: &[u8]) -> Result<Note, Problem> {
    let media_type = content_type
        .and_then(|v| v.split(';').next())
        .map(|v| v.trim().to_ascii_lowercase());
    if !media_type.as_deref().is_some_and(is_json_media_type) {
        return Err(problems::unsupported_media_type_problem());
    }
    let input: CreateNote = serde_json::from_slice(body)
        .map_err(|e| problems::validation_problem(format!("body is not a valid note: {e}")))?;
    let title = input.title.trim();
    if title.contains('\0') {
        // Neither database stores it as text (PostgreSQL refuses it; SQLite's length() stops
        // at it): a 400 here, not a 500 from the insert.
        return Err(problems::validation_problem("title must not contain NUL"));
    }
    let chars = title.chars().count();
    if !(1..=MAX_TITLE_CHARS).contains(&chars) {
        return Err(problems::validation_problem(format!(
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

/// Lease mode: the note is written on the layer's transaction, which commits with the stored
/// response after the claim committed; with the records elsewhere (Redis, `--records-url`)
/// or `--separate-completion`, on its own, and the layer stores the response afterwards.
///
/// The handler may run again for the same record (after a crash, a lease takeover or a
/// release, behaviour [§8a](https://docs.rs/idemkey/latest/idemkey/behaviour/index.html#8a-external-effects-lease-mode)), so the note's id is derived from the record and the insert
/// happens once: a re-execution answers with the note an earlier execution wrote, if one
/// committed.
///
/// In the layer's transaction the note commits with the stored response or not at all, so a
/// re-execution never finds an earlier one: the note needs no derived id there, and the
/// claim no flush of its own (the transaction's commit flushes it, `idemkey_tower::Keys`).
pub(crate) async fn create_lease<DB: NotesDb>(
    Extension(actor): Extension<Actor>,
    keys: Option<Keys>,
    mut writer: LeaseWriter<DB>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let on_its_own = !matches!(writer, LeaseWriter::Tx(_));
    let keys = match keys {
        Some(keys) if on_its_own => match keys.get().await {
            Ok(keys) => Some(keys),
            Err(error) => return problems::unavailable(&error),
        },
        _ => None,
    };
    let note = match lease_note(keys.as_ref(), &headers, &body) {
        Ok(note) => note,
        Err(rejection) => return rejection,
    };
    let stored = match DB::insert_note_once(writer.conn(), actor.as_str(), &note).await {
        Ok(stored) => stored,
        Err(error) => return problems::internal(&error),
    };
    match writer.flush().await {
        Ok(()) => created(&stored),
        Err(error) => problems::unavailable(&error),
    }
}

/// Where lease mode's create writes: a keyed request on the layer's transaction when the
/// layer is transactional, so that it completes the record; otherwise on the store's
/// writer, one autocommitted statement, as it would without the layer.
pub(crate) enum LeaseWriter<DB: NotesDb> {
    Tx(Tx<DB>),
    Conn(PoolConnection<DB>),
    /// A keyed note written on its own: committed without waiting for the disk, so that it
    /// does not hold the writer through a sync, then flushed (a sync shared with the writes
    /// of the moment) before it is answered for.
    Grouped(PoolConnection<DB>, SqlxStore<DB>),
}

impl<DB: NotesDb> LeaseWriter<DB> {
    fn conn(&mut self) -> &mut DB::Connection {
        match self {
            Self::Tx(tx) => tx,
            Self::Conn(conn) | Self::Grouped(conn, _) => conn,
        }
    }

    /// Gives the writer back, then returns once what was written on it is on disk.
    async fn flush(self) -> idemkey_core::Result<()> {
        match self {
            Self::Grouped(conn, store) => {
                drop(conn);
                store.flush().await
            }
            Self::Tx(_) | Self::Conn(_) => Ok(()),
        }
    }
}

impl<DB: NotesDb> FromRequestParts<AppState<DB>> for LeaseWriter<DB> {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, state: &AppState<DB>) -> Result<Self, Response> {
        // The layer puts a claim in the extensions of the requests it records, only.
        if state.transactional && parts.extensions.get::<Claim>().is_some() {
            return Tx::from_request_parts(parts, state).await.map(Self::Tx);
        }
        // A keyed note written on its own takes its id from the derived keys, so its claim
        // goes to disk first: before the writer is taken, which a flush must not hold.
        let unavailable = |error: idemkey_core::Error| problems::unavailable(&error);
        let Some(keys) = Keys::from_extensions(&parts.extensions) else {
            return state
                .store
                .write_conn()
                .await
                .map(Self::Conn)
                .map_err(unavailable);
        };
        keys.get().await.map_err(unavailable)?;
        let conn = state
            .store
            .grouped_write_conn()
            .await
            .map_err(unavailable)?;
        Ok(Self::Grouped(conn, state.store.clone()))
    }
}

/// The validated note, its id derived from the record's keys when they are given (a keyed note
/// written on its own).
#[allow(clippy::result_large_err)]
fn lease_note(
    keys: Option<&DerivedKeys>,
    headers: &HeaderMap,
    body: &[u8],
) -> Result<Note, Response> {
    let mut note = validate(headers, body)?;
    if let Some(keys) = keys {
        note.id = derived_id(keys);
    }
    Ok(note)
}

/// The note id of a record: a UUID (version 8) from the record's derived key `note`.
fn derived_id(keys: &DerivedKeys) -> String {
    let key = keys.key("note");
    // The derived key is 64 hex characters; its first 128 bits make the id.
    let bits = u128::from_str_radix(&key[..32], 16).unwrap_or_default();
    uuid::Builder::from_custom_bytes(bits.to_be_bytes())
        .into_uuid()
        .to_string()
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
        Err(error) => {
            // Attached, so that a serialization failure or a deadlock runs the handler again.
            let mut response = problems::internal(&error);
            DbError::from(error).attach(&mut response);
            response
        }
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
        assert!(validate(&json(), br#"{"title":"a\u0000b"}"#).is_err());
    }

    #[test]
    fn derived_ids_are_uuids_stable_per_record() {
        let record = idemkey_core::RecordId::new();
        let keys = DerivedKeys::new(b"s".as_slice(), record);
        let id = derived_id(&keys);
        assert_eq!(id, derived_id(&DerivedKeys::new(b"s".as_slice(), record)));
        assert_ne!(
            id,
            derived_id(&DerivedKeys::new(
                b"s".as_slice(),
                idemkey_core::RecordId::new()
            ))
        );
        assert_eq!(uuid::Uuid::parse_str(&id).unwrap().get_version_num(), 8);
    }

    #[test]
    fn unknown_fields_bad_json_and_media_types_are_rejected() {
        assert!(validate(&json(), br#"{"title":"a","x":1}"#).is_err());
        assert!(validate(&json(), b"{").is_err());
        assert!(validate(&HeaderMap::new(), br#"{"title":"a"}"#).is_err());
    }
}
