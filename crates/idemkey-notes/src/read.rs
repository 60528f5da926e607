//! `GET /v1/notes/{id}` and `GET /v1/notes`: the actor's notes only.

use axum::Extension;
use axum::extract::{Path, State};
use axum::response::{IntoResponse, Response};
use idemkey_tower::Actor;
use serde::Serialize;

use crate::db::{Note, NotesDb};
use crate::{AppState, problems};

/// The body of `GET /v1/notes`.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct NoteList {
    /// The actor's notes, oldest first.
    pub notes: Vec<Note>,
}

/// One note; another actor's note is 404, as if it did not exist.
pub(crate) async fn get_note<DB: NotesDb>(
    State(state): State<AppState<DB>>,
    Extension(actor): Extension<Actor>,
    Path(id): Path<String>,
) -> Response {
    match DB::get_note(&state.pool, actor.as_str(), &id).await {
        Ok(Some(note)) => axum::Json(note).into_response(),
        Ok(None) => problems::not_found(),
        Err(error) => problems::internal(&error),
    }
}

/// The actor's notes.
pub(crate) async fn list_notes<DB: NotesDb>(
    State(state): State<AppState<DB>>,
    Extension(actor): Extension<Actor>,
) -> Response {
    match DB::list_notes(&state.pool, actor.as_str()).await {
        Ok(notes) => axum::Json(NoteList { notes }).into_response(),
        Err(error) => problems::internal(&error),
    }
}
