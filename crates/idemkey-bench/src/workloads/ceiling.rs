//! The database ceiling: the two rows a keyed create commits (the record with its stored
//! response, and the note) written directly through sqlx, one transaction each, at the same
//! concurrency, alternating with keyed creates over HTTP on the same database. PostgreSQL and
//! MySQL get one connection per worker; SQLite one connection the workers queue for.

use std::future::Future;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::Context;
use idemkey_core::StoredResponse;
use idemkey_notes::{Mode, Note, NotesDb};
use idemkey_sqlx::{MySqlStore, PgStore, SqliteStore, SqlxStore};
use sqlx::pool::PoolOptions;
use sqlx::{MySql, Postgres, Sqlite};

use super::http::Create;
use crate::ctx::Ctx;
use crate::harness::report::{Ratio, WorkloadReport};
use crate::harness::runner::{self, Op, Worker};
use crate::targets::{self, Id};

/// The actor of the raw transactions' rows.
const ACTOR: &str = "bench-ceiling";

/// A database the raw transaction runs on.
pub(crate) trait RawDb: NotesDb {
    /// Inserts a completed record holding `response`, as the service leaves it at commit.
    fn insert_record(
        conn: &mut Self::Connection,
        key: &str,
        response: &[u8],
    ) -> impl Future<Output = Result<(), sqlx::Error>> + Send;
}

const INSERT_RECORD: &str = "INSERT INTO idemkey_records (actor, operation, idem_key, \
     record_id, version, fingerprint, state, token, lease_until, expires_at, created_at, \
     request_id, response) VALUES ($1, 'create-note', $2, $3, 'v1', $4, 2, 1, NULL, $5, $6, \
     NULL, $7)";

/// [`INSERT_RECORD`] with MySQL's placeholders.
const MY_INSERT_RECORD: &str = "INSERT INTO idemkey_records (actor, operation, idem_key, \
     record_id, version, fingerprint, state, token, lease_until, expires_at, created_at, \
     request_id, response) VALUES (?, 'create-note', ?, ?, 'v1', ?, 2, 1, NULL, ?, ?, NULL, ?)";

macro_rules! raw_db {
    ($db:ty, $sql:expr) => {
        impl RawDb for $db {
            async fn insert_record(
                conn: &mut Self::Connection,
                key: &str,
                response: &[u8],
            ) -> Result<(), sqlx::Error> {
                let now = now_ms();
                sqlx::query($sql)
                    .bind(ACTOR)
                    .bind(key)
                    .bind(uuid::Uuid::new_v4().as_bytes().as_slice())
                    .bind([7_u8; 32].as_slice())
                    .bind(now + 86_400_000)
                    .bind(now)
                    .bind(response)
                    .execute(conn)
                    .await?;
                Ok(())
            }
        }
    };
}

raw_db!(Sqlite, INSERT_RECORD);
raw_db!(Postgres, INSERT_RECORD);
raw_db!(MySql, MY_INSERT_RECORD);

fn now_ms() -> i64 {
    let since = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    i64::try_from(since.as_millis()).unwrap_or(i64::MAX)
}

/// One raw two-row transaction per call.
struct RawTx<DB: RawDb> {
    store: SqlxStore<DB>,
    prefix: String,
    response: Vec<u8>,
}

impl<DB: RawDb> Op for RawTx<DB> {
    async fn call(&self, worker: &mut Worker) -> Result<usize, u16> {
        let seq = worker.next_seq();
        let key = format!("{}-{}-{seq}", self.prefix, worker.id);
        match self.transaction(&key).await {
            Ok(()) => Ok(0),
            Err(error) => {
                tracing::warn!(error = %format!("{error:#}"), "raw transaction failed");
                Err(500)
            }
        }
    }
}

impl<DB: RawDb> RawTx<DB> {
    async fn transaction(&self, key: &str) -> anyhow::Result<()> {
        let note = Note {
            id: uuid::Uuid::new_v4().to_string(),
            title: key.to_owned(),
            created_at: humantime::format_rfc3339_millis(SystemTime::now()).to_string(),
        };
        let mut tx = self.store.begin_write().await?;
        DB::insert_record(&mut tx, key, &self.response).await?;
        DB::insert_note(&mut tx, ACTOR, &note).await?;
        tx.commit().await?;
        Ok(())
    }
}

/// A stored 201 the size of the service's: Location, Content-Type and the note as JSON.
pub(crate) fn stored_201() -> StoredResponse {
    let body = r#"{"id":"00000000-0000-0000-0000-000000000000","title":"bench-00000000-k-0-1","created_at":"2026-01-01T00:00:00.000Z"}"#;
    StoredResponse::new(201, body)
        .with_header("location", "/v1/notes/00000000-0000-0000-0000-000000000000")
        .with_header("content-type", "application/json")
}

fn stored_response() -> Vec<u8> {
    stored_201().encode()
}

/// Keyed creates over HTTP against the raw transaction, in alternating rounds.
pub(crate) async fn ceiling(
    ctx: &Ctx,
    url: &str,
    workers: &mut Vec<Worker>,
) -> anyhow::Result<(WorkloadReport, Vec<Ratio>)> {
    let connections = u32::try_from(ctx.concurrency).unwrap_or(u32::MAX);
    if idemkey_server::is_mysql(url) {
        let options = MySqlStore::connect_options(url)?;
        let store = MySqlStore::from_pool(pool_options(connections).connect_with(options).await?);
        store.migrate().await?;
        run(ctx, store, workers, "MySQL").await
    } else if idemkey_server::is_postgres(url)? {
        let options = PgStore::connect_options(url)?;
        let store = PgStore::from_pool(pool_options(connections).connect_with(options).await?);
        store.migrate().await?;
        run(ctx, store, workers, "PostgreSQL").await
    } else {
        // SQLite has one writer at a time: one connection, which the workers queue for, is
        // the fastest way through (several connections poll the lock in the busy handler).
        let options = SqliteStore::connect_options(url)?;
        let store = SqliteStore::from_pool(pool_options(1).connect_with(options).await?);
        store.migrate().await?;
        run(ctx, store, workers, "SQLite").await
    }
}

/// Connections not pinged at every acquire: the database alone.
pub(crate) fn pool_options<DB: sqlx::Database>(connections: u32) -> PoolOptions<DB> {
    PoolOptions::new()
        .max_connections(connections)
        .test_before_acquire(false)
}

async fn run<DB: RawDb>(
    ctx: &Ctx,
    store: SqlxStore<DB>,
    workers: &mut Vec<Worker>,
    backend: &str,
) -> anyhow::Result<(WorkloadReport, Vec<Ratio>)> {
    DB::migrate_notes(store.pool())
        .await
        .context("cannot create the notes table")?;
    let bar = ctx.bar("ceiling", ctx.rounds);
    let http = Arc::new(Create {
        keyed: true,
        prefix: format!("{}-c", ctx.prefix),
    });
    let raw = Arc::new(RawTx {
        store: store.clone(),
        prefix: format!("{}-r", ctx.prefix),
        response: stored_response(),
    });
    let (a, b) = runner::pair(&http, &raw, workers, ctx.budget, ctx.rounds, &bar).await;
    bar.finish_and_clear();
    store.close().await;
    let a = a[0].summary("create with a fresh key (HTTP)");
    let b = b[0].summary(&format!("raw two-row transaction on {backend} (sqlx)"));
    let name = format!(
        "{} create / raw two-row transaction on {backend} (throughput)",
        ctx.mode
    );
    let ratio = if backend == "PostgreSQL" && ctx.mode == Mode::Atomic {
        targets::ratio(Id::CeilingPostgresAtomic, &name, a.throughput, b.throughput)
    } else {
        Ratio::info(&name, a.throughput, b.throughput)
    };
    Ok((WorkloadReport::new("ceiling", vec![a, b]), vec![ratio]))
}
