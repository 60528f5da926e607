//! The SQLite upstreams' notes: one row per create in a `notes` table of a file of their own,
//! in WAL mode, as a small real API keeps them. One connection writes (SQLite takes one
//! writer at a time: more writers would only queue on its lock) and a few others read, which
//! WAL lets run beside the writer. Each create is its own transaction, committed before the
//! 201: at `synchronous = NORMAL` the commit reaches the WAL without an fsync (a fast API,
//! which a power cut may roll back by its last commits), at `FULL` with one (an API that keeps
//! what it acknowledges).

use std::path::Path;
use std::time::Duration;

use anyhow::Context;
use bytes::Bytes;
use sqlx::SqlitePool;
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};

use super::shown;

/// The reading connections: the replay workload's `GET`s are the only reads, and the API's
/// thread hands them out one at a time anyway.
pub(super) const READERS: u32 = 2;

/// How long a connection waits for SQLite's lock; only a checkpoint holds it besides the
/// writer.
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// The notes in a SQLite file.
pub(super) struct Notes {
    writer: SqlitePool,
    readers: SqlitePool,
}

impl Notes {
    /// Creates the file at `path` and its table; the connections' threads are named
    /// `{threads}-N`, for their CPU time.
    pub(super) async fn open(
        path: &Path,
        synchronous: SqliteSynchronous,
        threads: &'static str,
    ) -> anyhow::Result<Self> {
        let options = SqliteConnectOptions::new()
            .filename(path)
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(synchronous)
            .busy_timeout(BUSY_TIMEOUT)
            .thread_name(move |id| format!("{threads}-{id}"));
        let writer = pool(1)
            .connect_with(options.clone())
            .await
            .with_context(|| {
                format!("cannot open the upstream's SQLite file {}", path.display())
            })?;
        sqlx::query(
            "CREATE TABLE IF NOT EXISTS notes (id INTEGER PRIMARY KEY, body TEXT NOT NULL)",
        )
        .execute(&writer)
        .await?;
        let readers = pool(READERS).connect_with(options).await?;
        Ok(Self { writer, readers })
    }

    /// Inserts `body` (JSON, so UTF-8) as a new row; its id and the answer that shows it.
    pub(super) async fn insert(&self, body: &[u8]) -> anyhow::Result<(u64, Bytes)> {
        let text = std::str::from_utf8(body)?;
        let id: i64 = sqlx::query_scalar("INSERT INTO notes (body) VALUES (?1) RETURNING id")
            .bind(text)
            .fetch_one(&self.writer)
            .await?;
        let id = u64::try_from(id)?;
        Ok((id, shown(id, body)))
    }

    /// The answer that shows note `id`, read from the file (or the page cache).
    pub(super) async fn get(&self, id: u64) -> anyhow::Result<Option<Bytes>> {
        let Ok(row) = i64::try_from(id) else {
            return Ok(None);
        };
        let body: Option<String> = sqlx::query_scalar("SELECT body FROM notes WHERE id = ?1")
            .bind(row)
            .fetch_optional(&self.readers)
            .await?;
        Ok(body.map(|body| shown(id, body.as_bytes())))
    }

    /// Closes every connection, so that their threads are gone before the next upstream.
    pub(super) async fn close(&self) {
        self.readers.close().await;
        self.writer.close().await;
    }
}

/// `size` connections, all opened at once and kept: their threads stay the same for the
/// run, so their CPU time can be read. No test before each use: a local file has no
/// connection to lose.
fn pool(size: u32) -> SqlitePoolOptions {
    SqlitePoolOptions::new()
        .max_connections(size)
        .min_connections(size)
        .idle_timeout(None)
        .max_lifetime(None)
        .test_before_acquire(false)
}
