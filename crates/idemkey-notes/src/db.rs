//! The `notes` table, on SQLite, PostgreSQL or MySQL.

use std::future::Future;

use idemkey_sqlx::Backend;
use serde::Serialize;
use sqlx::{MySql, Pool, Postgres, Sqlite};

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
                // Run to completion, not `fetch_optional`: on SQLite, outside a transaction,
                // the insert commits when it completes, and sqlx resets a statement it stops
                // reading early ignoring the result, so a failed commit would pass unseen.
                let inserted: Vec<Note> = sqlx::query_as(INSERT_ONCE)
                    .bind(&note.id)
                    .bind(actor)
                    .bind(&note.title)
                    .bind(&note.created_at)
                    .fetch_all(&mut *conn)
                    .await?;
                if let Some(inserted) = inserted.into_iter().next() {
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

// MySQL's own statements: `?` placeholders, and no `ON CONFLICT ... RETURNING`.
const MY_INSERT: &str = "INSERT INTO notes (id, actor, title, created_at) VALUES (?, ?, ?, ?)";
const MY_GET: &str = "SELECT id, title, created_at FROM notes WHERE actor = ? AND id = ?";
const MY_LIST: &str =
    "SELECT id, title, created_at FROM notes WHERE actor = ? ORDER BY created_at, id";

impl NotesDb for MySql {
    async fn migrate_notes(pool: &Pool<Self>) -> Result<(), sqlx::Error> {
        migrator(sqlx::migrate!("./migrations/mysql"))
            .run(pool)
            .await?;
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
        my_insert(conn, actor, note).await
    }

    async fn insert_note_once(
        conn: &mut Self::Connection,
        actor: &str,
        note: &Note,
    ) -> Result<Note, sqlx::Error> {
        match my_insert(&mut *conn, actor, note).await {
            Ok(()) => return Ok(note.clone()),
            // A re-execution: the first execution's note.
            Err(sqlx::Error::Database(e)) if e.is_unique_violation() => {}
            Err(error) => return Err(error),
        }
        my_get_on(conn, actor, &note.id)
            .await?
            .ok_or(sqlx::Error::RowNotFound)
    }

    async fn get_note(
        pool: &Pool<Self>,
        actor: &str,
        id: &str,
    ) -> Result<Option<Note>, sqlx::Error> {
        sqlx::query_as(MY_GET)
            .bind(actor)
            .bind(id)
            .fetch_optional(pool)
            .await
    }

    async fn list_notes(pool: &Pool<Self>, actor: &str) -> Result<Vec<Note>, sqlx::Error> {
        sqlx::query_as(MY_LIST).bind(actor).fetch_all(pool).await
    }
}

async fn my_insert(
    conn: &mut sqlx::MySqlConnection,
    actor: &str,
    note: &Note,
) -> Result<(), sqlx::Error> {
    sqlx::query(MY_INSERT)
        .bind(&note.id)
        .bind(actor)
        .bind(&note.title)
        .bind(&note.created_at)
        .execute(conn)
        .await
        .map(|_| ())
}

/// The note a re-execution finds, on the connection it inserted on.
async fn my_get_on(
    conn: &mut sqlx::MySqlConnection,
    actor: &str,
    id: &str,
) -> Result<Option<Note>, sqlx::Error> {
    sqlx::query_as(MY_GET)
        .bind(actor)
        .bind(id)
        .fetch_optional(conn)
        .await
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use idemkey_sqlx::SqliteStore;

    use super::*;

    /// Lease mode's insert commits on its own as its statement completes; a commit that fails
    /// (here a deferred foreign key a trigger breaks) is an error, not a stored note.
    #[tokio::test]
    async fn an_insert_whose_commit_fails_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}", dir.path().join("notes.db").display());
        let store = SqliteStore::connect(&url).await.unwrap();
        Sqlite::migrate_notes(store.pool()).await.unwrap();
        sqlx::raw_sql(
            "CREATE TABLE parent (id INTEGER PRIMARY KEY); \
             CREATE TABLE child (p INTEGER REFERENCES parent (id) DEFERRABLE INITIALLY DEFERRED); \
             CREATE TRIGGER doomed AFTER INSERT ON notes BEGIN INSERT INTO child VALUES (1); END",
        )
        .execute(store.pool())
        .await
        .unwrap();
        let note = Note {
            id: "n-1".into(),
            title: "doomed".into(),
            created_at: "2026-11-29T00:00:00.000Z".into(),
        };
        let mut conn = store.write_conn().await.unwrap();
        let inserted = Sqlite::insert_note_once(&mut conn, "alice", &note).await;
        assert!(inserted.is_err(), "{inserted:?}");
        let stored = Sqlite::get_note(store.pool(), "alice", "n-1")
            .await
            .unwrap();
        assert_eq!(stored, None);
    }
}
