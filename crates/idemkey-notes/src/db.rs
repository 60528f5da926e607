//! The `notes` table, on SQLite or PostgreSQL.

use std::future::Future;

use idemkey_sqlx::Backend;
use serde::Serialize;
use sqlx::{Pool, Postgres, Sqlite};

/// A note, as stored and as returned.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, sqlx::FromRow, utoipa::ToSchema)]
pub struct Note {
    /// The note's id.
    pub id: String,
    /// The title, trimmed.
    pub title: String,
    /// When it was created, RFC 3339 in UTC.
    pub created_at: String,
}

/// A database the notes service runs on: idemkey's backend plus the `notes` table.
pub trait NotesDb: Backend {
    /// Creates the `notes` table if needed (tracked in `_notes_migrations`).
    fn migrate_notes(pool: &Pool<Self>) -> impl Future<Output = Result<(), sqlx::Error>> + Send;

    /// Checks that the database answers.
    fn ping(pool: &Pool<Self>) -> impl Future<Output = Result<(), sqlx::Error>> + Send;

    /// Inserts a note for `actor` on `conn` (the claim's transaction in atomic mode).
    fn insert_note(
        conn: &mut Self::Connection,
        actor: &str,
        note: &Note,
    ) -> impl Future<Output = Result<(), sqlx::Error>> + Send;

    /// Inserts a note for `actor` on `conn` unless one with its id exists, and returns the
    /// stored note: a re-execution of a lease-mode request gets the first execution's note.
    fn insert_note_once(
        conn: &mut Self::Connection,
        actor: &str,
        note: &Note,
    ) -> impl Future<Output = Result<Note, sqlx::Error>> + Send;

    /// The actor's note with this id.
    fn get_note(
        pool: &Pool<Self>,
        actor: &str,
        id: &str,
    ) -> impl Future<Output = Result<Option<Note>, sqlx::Error>> + Send;

    /// The actor's notes, oldest first.
    fn list_notes(
        pool: &Pool<Self>,
        actor: &str,
    ) -> impl Future<Output = Result<Vec<Note>, sqlx::Error>> + Send;
}

const INSERT: &str = "INSERT INTO notes (id, actor, title, created_at) VALUES ($1, $2, $3, $4)";
const INSERT_ONCE: &str = "INSERT INTO notes (id, actor, title, created_at) VALUES ($1, $2, $3, $4) \
     ON CONFLICT (id) DO NOTHING RETURNING id, title, created_at";
const GET: &str = "SELECT id, title, created_at FROM notes WHERE actor = $1 AND id = $2";
const LIST: &str =
    "SELECT id, title, created_at FROM notes WHERE actor = $1 ORDER BY created_at, id";

fn migrator(mut migrator: sqlx::migrate::Migrator) -> sqlx::migrate::Migrator {
    migrator.dangerous_set_table_name("_notes_migrations");
    migrator
}

/// Implements [`NotesDb`] for a backend: the statements are the same text on both.
macro_rules! notes_db {
    ($db:ty, $migrations:literal) => {
        impl NotesDb for $db {
            async fn migrate_notes(pool: &Pool<Self>) -> Result<(), sqlx::Error> {
                migrator(sqlx::migrate!($migrations)).run(pool).await?;
                Ok(())
            }

            async fn ping(pool: &Pool<Self>) -> Result<(), sqlx::Error> {
                sqlx::query("SELECT 1").execute(pool).await.map(|_| ())
            }

            async fn insert_note(
                conn: &mut Self::Connection,
                actor: &str,
                note: &Note,
            ) -> Result<(), sqlx::Error> {
                sqlx::query(INSERT)
                    .bind(&note.id)
                    .bind(actor)
                    .bind(&note.title)
                    .bind(&note.created_at)
                    .execute(conn)
                    .await?;
                Ok(())
            }

            async fn insert_note_once(
                conn: &mut Self::Connection,
                actor: &str,
                note: &Note,
            ) -> Result<Note, sqlx::Error> {
                let inserted = sqlx::query_as(INSERT_ONCE)
                    .bind(&note.id)
                    .bind(actor)
                    .bind(&note.title)
                    .bind(&note.created_at)
                    .fetch_optional(&mut *conn)
                    .await?;
                if let Some(inserted) = inserted {
                    return Ok(inserted);
                }
                // A re-execution: the first execution's note.
                sqlx::query_as(GET)
                    .bind(actor)
                    .bind(&note.id)
                    .fetch_optional(conn)
                    .await?
                    .ok_or(sqlx::Error::RowNotFound)
            }

            async fn get_note(
                pool: &Pool<Self>,
                actor: &str,
                id: &str,
            ) -> Result<Option<Note>, sqlx::Error> {
                sqlx::query_as(GET)
                    .bind(actor)
                    .bind(id)
                    .fetch_optional(pool)
                    .await
            }

            async fn list_notes(pool: &Pool<Self>, actor: &str) -> Result<Vec<Note>, sqlx::Error> {
                sqlx::query_as(LIST).bind(actor).fetch_all(pool).await
            }
        }
    };
}

notes_db!(Sqlite, "./migrations/sqlite");
notes_db!(Postgres, "./migrations/postgres");
