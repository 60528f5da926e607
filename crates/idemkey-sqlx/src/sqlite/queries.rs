//! The SQL of the SQLite store, on any connection: the store's own short transactions in
//! lease mode, or the caller's transaction in atomic mode.

use std::time::Instant;

use futures_util::StreamExt;
use idemkey_core::{ClaimRequest, Record, Result, Scope, StoredResponse, TryClaim};
use sqlx::{Either, Pool, Sqlite, Transaction};

use super::SqliteSettings;
use super::error::store_error;
use crate::row::{RecordRow, into_record};
use crate::{Backend, Folded};

/// The database clock in milliseconds since the Unix epoch.
macro_rules! now {
    () => {
        "CAST(unixepoch('subsec') * 1000 AS INTEGER)"
    };
}

/// Whether the row's claim names an owner whose heartbeat has lapsed (behaviour §8a): its
/// claim is then stale, whatever its lease. Lapsed means past its mark while beats (any
/// owner's) have come without a gap for a whole grace of its own: after an outage that
/// stopped every beat, no owner is lapsed before the others had a grace to beat again, nor
/// before the first beat after it (the run must be unbroken now: a beat within two fifths of
/// the grace). Both
/// are judged by the host's steady clock (`steady.rs`), bound as `$now`, so that one
/// process's wall clock stepping forward lapses no one. An owner without a steady mark (no
/// heartbeat row, or one that a binary judging by the wall clock wrote) leaves the claim to
/// its lease.
macro_rules! owner_lapsed {
    ($now:expr) => {
        concat!(
            crate::statements::owner_named!(),
            "EXISTS (SELECT 1 FROM idemkey_owners o, idemkey_beats b ",
            "WHERE o.owner = idemkey_records.owner AND o.steady_until <= ",
            $now,
            " AND b.id = 1 AND b.steady_since + o.grace <= ",
            $now,
            " AND b.steady_last + o.grace * 2 / 5 > ",
            $now,
            ")"
        )
    };
}

/// How the statements written once for every backend (`crate::statements`) read here:
/// numbered `?N` placeholders, `IS` for null-safe equality, and the steady clock bound last.
macro_rules! dialect {
    (now) => {
        now!()
    };
    (from_clock) => {
        ""
    };
    (same) => {
        "IS"
    };
    (param $n:literal) => {
        concat!("?", $n)
    };
    (owner_lapsed $n:literal) => {
        owner_lapsed!(concat!("?", $n))
    };
}

const LOOKUP: &str = concat!(
    "SELECT record_id, version, fingerprint, state, token, ",
    "CASE WHEN state = 0 AND ",
    owner_lapsed!("?4"),
    " THEN 0 ELSE MAX(COALESCE(lease_until, 0) - ",
    now!(),
    ", 0) END, request_id, response ",
    "FROM idemkey_records WHERE actor = ?1 AND operation = ?2 AND idem_key = ?3 ",
    "AND expires_at > ",
    now!()
);

// The upsert replaces only an expired row; a live row makes it return nothing.
const CLAIM: &str = concat!(
    "INSERT INTO idemkey_records (actor, operation, idem_key, record_id, version, fingerprint, ",
    "state, token, lease_until, expires_at, created_at, request_id, response, owner, ",
    "owner_record, owner_token) VALUES (?1, ?2, ?3, ?4, ?5, ?6, 0, 1, ",
    now!(),
    " + ?7, ",
    now!(),
    " + ?7 + ?8, ",
    now!(),
    ", ?9, NULL, ?10, ?4, 1) ",
    "ON CONFLICT (actor, operation, idem_key) DO UPDATE SET record_id = excluded.record_id, ",
    "version = excluded.version, fingerprint = excluded.fingerprint, state = 0, token = 1, ",
    "lease_until = excluded.lease_until, expires_at = excluded.expires_at, ",
    "created_at = excluded.created_at, request_id = excluded.request_id, response = NULL, ",
    "owner = excluded.owner, owner_record = excluded.owner_record, owner_token = 1 ",
    "WHERE idemkey_records.expires_at <= ",
    now!(),
    " RETURNING token"
);

/// The insert of a completed record, without a conflict clause.
macro_rules! insert_completed {
    () => {
        concat!(
            "INSERT INTO idemkey_records (actor, operation, idem_key, record_id, version, ",
            "fingerprint, state, token, lease_until, expires_at, created_at, request_id, ",
            "response) VALUES (?1, ?2, ?3, ?4, ?5, ?6, 2, 1, NULL, ",
            now!(),
            " + ?7, ",
            now!(),
            ", ?8, ?9)"
        )
    };
}

// Commit-time claim (behaviour §8): the record, already completed, as the transaction's last
// statement; it replaces only an expired row, and a live row makes it return nothing.
const INSERT_COMPLETED: &str = concat!(
    insert_completed!(),
    " ON CONFLICT (actor, operation, idem_key) DO UPDATE SET record_id = excluded.record_id, ",
    "version = excluded.version, fingerprint = excluded.fingerprint, state = 2, token = 1, ",
    "lease_until = NULL, expires_at = excluded.expires_at, ",
    "created_at = excluded.created_at, request_id = excluded.request_id, ",
    "response = excluded.response ",
    "WHERE idemkey_records.expires_at <= ",
    now!(),
    " RETURNING token"
);

// Commit-time's record and the commit as one command (`insert_completed_and_commit`). A plain
// insert: any row of the scope, live or expired, stops the command at the insert with a
// primary-key violation, before `COMMIT`, and the upsert above decides. The closing `BEGIN`
// opens an empty transaction, because the driver still counts one open and will roll it back.
// sqlx 0.9 runs such a query as one command, though it marks several statements in one query
// deprecated (launchbadge/sqlx#3108); `tests/stores/sqlite/folded.rs` fails if an upgrade stops it.
const INSERT_COMPLETED_COMMIT: &str = concat!(insert_completed!(), "; COMMIT; BEGIN");

const FORGET_VERSION: &str = "DELETE FROM idemkey_records WHERE actor = ?1 AND operation = ?2 AND idem_key = ?3 AND version = ?4";

const FORGET: &str =
    "DELETE FROM idemkey_records WHERE actor = ?1 AND operation = ?2 AND idem_key = ?3";

// The outer predicate re-checks expiry, so a row renewed since the inner select survives.
const SWEEP: &str = concat!(
    "DELETE FROM idemkey_records WHERE rowid IN (SELECT rowid FROM idemkey_records ",
    "WHERE expires_at <= ",
    now!(),
    " LIMIT ?1) AND expires_at <= ",
    now!()
);

// Every completed or expired record of an actor, in batches (`idemkey forget --actor`); the
// outer predicate re-checks both, so a record claimed again since is kept.
const FORGET_ACTOR: &str = concat!(
    "DELETE FROM idemkey_records WHERE rowid IN (SELECT rowid FROM idemkey_records ",
    "WHERE actor = ?1 AND (state = 2 OR expires_at <= ",
    now!(),
    ") LIMIT ?2) AND (state = 2 OR expires_at <= ",
    now!(),
    ")"
);

// Per-actor caps (behaviour §11): the primary key's leading column finds the actor's rows.
const ACTOR_USAGE: &str = concat!(
    "SELECT count(*), COALESCE(SUM(length(response)), 0), COALESCE(MIN(expires_at) - ",
    now!(),
    ", 0) FROM idemkey_records WHERE actor = ?1 AND expires_at > ",
    now!()
);

// A process's heartbeat: one row per owner, however many claims it holds, marked in the wall
// clock (for binaries that judge by it) and in the steady clock (?3). Beats may commit out of
// order (several are on their way at once), so one never moves a mark backwards.
const BEAT: &str = concat!(
    "INSERT INTO idemkey_owners (owner, alive_until, grace, steady_until) VALUES (?1, ",
    now!(),
    " + ?2, ?2, ?3 + ?2) ON CONFLICT (owner) DO UPDATE SET ",
    "alive_until = MAX(idemkey_owners.alive_until, excluded.alive_until), grace = excluded.grace, ",
    "steady_until = MAX(COALESCE(idemkey_owners.steady_until, 0), excluded.steady_until)"
);

// With each beat: the run of beats without a gap longer than ?1 (two fifths of the grace; an
// owner beats every quarter) goes on, or starts again now; in the wall clock as before, and
// in the steady clock (?2), whose run also starts again when the clock goes back by more than
// a grace: the host restarted, its steady clock with it.
const BEATS_RUN: &str = concat!(
    "INSERT INTO idemkey_beats (id, last_beat, since, steady_last, steady_since) VALUES (1, ",
    now!(),
    ", ",
    now!(),
    ", ?2, ?2) ON CONFLICT (id) DO UPDATE SET since = CASE WHEN ",
    "excluded.last_beat - idemkey_beats.last_beat > ?1 THEN excluded.last_beat ",
    "ELSE idemkey_beats.since END, ",
    "last_beat = MAX(idemkey_beats.last_beat, excluded.last_beat), ",
    "steady_since = CASE WHEN idemkey_beats.steady_last IS NULL ",
    "OR excluded.steady_last - idemkey_beats.steady_last > ?1 ",
    "OR idemkey_beats.steady_last - excluded.steady_last > ?1 * 5 / 2 ",
    "THEN excluded.steady_last ELSE idemkey_beats.steady_since END, ",
    "steady_last = CASE WHEN idemkey_beats.steady_last IS NULL ",
    "OR idemkey_beats.steady_last - excluded.steady_last > ?1 * 5 / 2 ",
    "THEN excluded.steady_last ",
    "ELSE MAX(idemkey_beats.steady_last, excluded.steady_last) END"
);

// Once per process: the rows of owners dead for a day (their claims are long stale).
const OWNERS_SWEEP: &str = concat!(
    "DELETE FROM idemkey_owners WHERE alive_until < ",
    now!(),
    " - 86400000"
);

// Two statements, once per process: whoever inserts first, every process reads the same row.
const SECRET_INSERT: &str =
    "INSERT INTO idemkey_secret (id, secret) VALUES (1, ?1) ON CONFLICT (id) DO NOTHING";
const SECRET_SELECT: &str = "SELECT secret FROM idemkey_secret WHERE id = 1";

impl Backend for Sqlite {
    type Settings = SqliteSettings;

    fn default_settings(_pool: &Pool<Self>) -> Self::Settings {
        SqliteSettings::default()
    }

    fn writer_pool(pool: &Pool<Self>) -> Pool<Self> {
        super::writer_pool(pool)
    }

    async fn relax(conn: &mut Self::Connection, settings: &SqliteSettings) -> Result<bool> {
        if settings.grouping.flush().is_none() {
            return Ok(false);
        }
        if let Some(relax) = settings.grouping.take_relax() {
            sqlx::raw_sql(relax)
                .execute(conn)
                .await
                .map_err(store_error)?;
        }
        Ok(true)
    }

    async fn restore_sync(conn: &mut Self::Connection, settings: &SqliteSettings) -> Result<()> {
        let Some(restore) = settings.grouping.take_restore() else {
            return Ok(());
        };
        if let Err(error) = sqlx::raw_sql(restore).execute(conn).await {
            // Still relaxed, maybe: the next write that is not grouped tries again, and
            // this one does not commit at `NORMAL`.
            settings.grouping.relaxed();
            return Err(store_error(error));
        }
        Ok(())
    }

    async fn begin_write_with(
        conn: sqlx::pool::PoolConnection<Self>,
    ) -> Result<Transaction<'static, Self>> {
        Transaction::begin(
            conn,
            Some(sqlx::SqlSafeStr::into_sql_str("BEGIN IMMEDIATE")),
        )
        .await
        .map_err(store_error)
    }

    async fn flush(settings: &SqliteSettings) -> Result<()> {
        let Some(flush) = settings.grouping.flush() else {
            return Ok(());
        };
        if let Err(error) = flush.flush().await {
            settings.writes.stop(&error);
        }
        // Also when the sync that covered this write succeeded after another failed: the
        // failed one may have lost frames before this write's, and the WAL drops every frame
        // after a lost one.
        settings.writes.check()
    }

    async fn flush_seen(settings: &SqliteSettings) -> Result<()> {
        match settings.grouping.flush() {
            Some(flush) if !flush.seen_synced() => Self::flush(settings).await,
            _ => Ok(()),
        }
    }

    fn writable(settings: &SqliteSettings) -> Result<()> {
        settings.writes.check()
    }

    async fn begin_write(
        pool: &Pool<Self>,
        settings: &SqliteSettings,
    ) -> Result<Transaction<'static, Self>> {
        let mut conn = pool.acquire().await.map_err(store_error)?;
        // Before the transaction: SQLite does not let one change its sync level.
        Self::restore_sync(&mut conn, settings).await?;
        // A deferred transaction that upgrades to a writer fails with SQLITE_BUSY under
        // concurrency, busy timeout or not; IMMEDIATE takes the write lock up front.
        Self::begin_write_with(conn).await
    }

    async fn lookup(conn: &mut Self::Connection, scope: &Scope) -> Result<Option<Record>> {
        let row: Option<RecordRow> = sqlx::query_as(LOOKUP)
            .bind(scope.actor.as_str())
            .bind(scope.operation.as_str())
            .bind(scope.key.as_str())
            .bind(super::steady::now_ms())
            .fetch_optional(conn)
            .await
            .map_err(store_error)?;
        row.map(into_record).transpose()
    }

    async fn try_claim(conn: &mut Self::Connection, request: &ClaimRequest) -> Result<TryClaim> {
        claim_with(conn, request, CLAIM).await
    }

    const FOLDS_COMMIT: bool = true;

    async fn insert_completed_and_commit(
        tx: &mut Transaction<'static, Self>,
        request: &ClaimRequest,
        record_id: idemkey_core::RecordId,
        response: &StoredResponse,
    ) -> Folded {
        let query =
            crate::statements::completed!(INSERT_COMPLETED_COMMIT, request, record_id, response);
        // Each statement that ends yields its result: how many ended tells which one failed.
        let mut ended = 0;
        let mut results = sqlx::Executor::fetch_many(&mut **tx, query);
        while let Some(result) = results.next().await {
            match result {
                Ok(Either::Left(_)) => ended += 1,
                Ok(Either::Right(_)) => {}
                Err(error) => return folded_failure(ended, error),
            }
        }
        Folded::Committed
    }

    crate::statements::fenced_statements! {
        database: Sqlite,
        dialect: dialect,
        liveness: liveness,
    }

    crate::statements::upsert_statements! {
        database: Sqlite,
        insert_completed: INSERT_COMPLETED,
        beat: (BEAT, BEATS_RUN, OWNERS_SWEEP),
        liveness: liveness,
    }

    crate::statements::plain_statements! {
        database: Sqlite,
        forget: FORGET,
        forget_version: FORGET_VERSION,
        forget_actor: FORGET_ACTOR,
        sweep: SWEEP,
        actor_usage: ACTOR_USAGE,
        secret: (SECRET_INSERT, SECRET_SELECT),
    }

    fn is_unavailable(error: &dyn sqlx::error::DatabaseError) -> bool {
        super::error::is_unavailable(error)
    }

    fn note_error(error: &dyn sqlx::error::DatabaseError) {
        super::error::note_fault(error);
    }

    fn reusable(conn: &Self::Connection, since: Instant) -> bool {
        super::reusable_since(conn, Some(since))
    }
}

crate::statements::claim_with!(Sqlite);

/// What the failure of the `ended + 1`th statement of [`INSERT_COMPLETED_COMMIT`] means.
fn folded_failure(ended: usize, error: sqlx::Error) -> Folded {
    match ended {
        0 if matches!(&error, sqlx::Error::Database(e) if e.is_unique_violation()) => {
            Folded::Conflict
        }
        0 => Folded::InsertFailed(store_error(error)),
        1 => Folded::CommitFailed(Sqlite::commit_error(error)),
        // Only the closing `BEGIN` failed: the commit stands, and the connection, which the
        // driver still counts inside a transaction, is closed rather than reused (`reusable`).
        _ => {
            tracing::warn!(%error, "BEGIN after a committed record failed");
            Folded::Committed
        }
    }
}

/// Binds what the owners' heartbeats are judged by after a statement's own parameters: the
/// host's steady clock (`steady.rs`).
fn liveness<'q>(
    query: sqlx::query::Query<'q, sqlx::Sqlite, sqlx::sqlite::SqliteArguments>,
) -> sqlx::query::Query<'q, sqlx::Sqlite, sqlx::sqlite::SqliteArguments> {
    query.bind(super::steady::now_ms())
}

#[cfg(test)]
mod tests {
    /// The fence as SQLite reads it: numbered placeholders, and `IS` for the owner, who may be
    /// none.
    #[test]
    fn the_fence_reads_in_sqlite() {
        assert_eq!(
            crate::statements::discard_sql!(dialect),
            "DELETE FROM idemkey_records WHERE actor = ?1 AND operation = ?2 AND idem_key = ?3 \
             AND record_id = ?4 AND token = ?5 AND state = 0 AND owner IS ?6"
        );
    }
}
