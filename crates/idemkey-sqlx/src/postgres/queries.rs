//! The SQL of the PostgreSQL store, on any connection: the store's own short transactions in
//! lease mode, or the caller's transaction in atomic mode.

use idemkey_core::{ClaimFlush, ClaimRequest, Error, Record, Result, Scope, TryClaim};
use sqlx::pool::PoolConnection;
use sqlx::postgres::{PgArguments, PgConnection};
use sqlx::{Pool, Postgres, Transaction};

use super::error::store_error;
use super::wait::{self, PgSettings};
use crate::row::{RecordRow, into_record};
use crate::{Backend, SqlxStore};

/// The database clock in milliseconds since the Unix epoch, read once per statement as
/// `clock.t`, so every time a statement writes agrees. `clock_timestamp()`, not `now()`:
/// `now()` stands still at the start of the transaction.
macro_rules! clock {
    () => {
        "(SELECT floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint AS t) AS clock"
    };
}

/// How every write transaction begins. Explicit, whatever the database's default: the
/// wait-then-replay of a duplicate claim needs each statement to see what committed before it.
const BEGIN_WRITE: &str = "BEGIN ISOLATION LEVEL READ COMMITTED";

/// Whether the row's claim names an owner whose heartbeat has lapsed (behaviour §8a): its
/// claim is then stale, whatever its lease. Lapsed means past its `alive_until` while beats
/// (any owner's) have come without a gap for a whole grace of its own, up to now (see the
/// SQLite store's): before the first beat after an outage or a step of the clock, nobody. An owner without a heartbeat row (a store
/// wrapper that never wrote one, or an owner swept a day after its death) leaves the claim
/// to its lease.
macro_rules! owner_lapsed {
    () => {
        concat!(
            crate::statements::owner_named!(),
            "EXISTS (SELECT 1 FROM idemkey_owners o, idemkey_beats b ",
            "WHERE o.owner = idemkey_records.owner AND o.alive_until <= clock.t ",
            "AND b.id = 1 AND b.since + o.grace <= clock.t ",
            "AND b.last_beat + o.grace * 2 / 5 > clock.t)"
        )
    };
}

/// How the statements written once for every backend (`crate::statements`) read here:
/// numbered `$N` placeholders, `IS NOT DISTINCT FROM` for null-safe equality, and the clock
/// read once per statement (`clock.t`).
macro_rules! dialect {
    (now) => {
        "clock.t"
    };
    (from_clock) => {
        concat!(" FROM ", clock!())
    };
    (same) => {
        "IS NOT DISTINCT FROM"
    };
    (param $n:literal) => {
        concat!("$", $n)
    };
    (owner_lapsed $n:literal) => {
        owner_lapsed!()
    };
}

const LOOKUP: &str = concat!(
    "SELECT record_id, version, fingerprint, state, token, ",
    "CASE WHEN state = 0 AND ",
    owner_lapsed!(),
    " THEN 0 ELSE GREATEST(COALESCE(lease_until, 0) - clock.t, 0) END, request_id, response ",
    "FROM idemkey_records, ",
    clock!(),
    " WHERE actor = $1 AND operation = $2 AND idem_key = $3 AND expires_at > clock.t"
);

// The upsert replaces only an expired row; a live row makes it return nothing. Meeting an
// uncommitted claim of the same scope, it waits for that transaction to end.
macro_rules! claim_sql {
    () => {
        concat!(
            "INSERT INTO idemkey_records (actor, operation, idem_key, record_id, version, ",
            "fingerprint, state, token, lease_until, expires_at, created_at, request_id, ",
            "response, owner, owner_record, owner_token) SELECT $1, $2, $3, $4, $5, $6, 0, 1, ",
            "clock.t + $7, clock.t + $7 + $8, clock.t, $9, NULL, $10, $4, 1 FROM ",
            clock!(),
            " ON CONFLICT (actor, operation, idem_key) DO UPDATE SET record_id = ",
            "excluded.record_id, version = excluded.version, fingerprint = excluded.fingerprint, ",
            "state = 0, token = 1, lease_until = excluded.lease_until, ",
            "expires_at = excluded.expires_at, created_at = excluded.created_at, ",
            "request_id = excluded.request_id, response = NULL, owner = excluded.owner, ",
            "owner_record = excluded.owner_record, owner_token = 1 ",
            "WHERE idemkey_records.expires_at <= excluded.created_at RETURNING token"
        )
    };
}

const CLAIM: &str = claim_sql!();

// Lease mode's claim when its flush is deferred (`ClaimFlush::Deferred`): it commits without
// waiting for the WAL flush (`synchronous_commit = off` for its own transaction only, set by
// the statement itself, saving a round trip). A later commit that does wait (the handler's
// transaction with its completion, the completion, or `FLUSH_CLAIM`) flushes the WAL up to
// its own record, the claim's included; the WAL writer flushes it within a few hundred
// milliseconds anyway. RETURNING is evaluated only for a row written.
const CLAIM_DEFERRED: &str = concat!(
    claim_sql!(),
    ", set_config('synchronous_commit', 'off', true)"
);

// The smallest transaction that waits for the WAL flush at its commit (the connection's
// `synchronous_commit = on`), so that every asynchronous commit before it is on disk too.
// It must write WAL of its own: PostgreSQL commits a transaction that wrote none
// asynchronously, even one with a transaction id (`SELECT txid_current()` flushes nothing).
// A transactional logical-decoding message is such a record, on no table and for no lock; a
// consumer of logical decoding sees an empty message with the prefix `idemkey`.
const FLUSH_CLAIM: &str = "SELECT pg_logical_emit_message(true, 'idemkey', '')";

// Atomic mode's claim runs under a short `lock_timeout` set at BEGIN. On success the same
// statement puts the session's own bound back (saved at BEGIN), saving a round trip:
// RETURNING is evaluated once the row is written, so only after the insert has its lock.
const CLAIM_RESTORING: &str = concat!(
    claim_sql!(),
    ", set_config('lock_timeout', current_setting('idemkey.lock_timeout'), true)"
);

// Commit-time claim (behaviour §8): the record, already completed, as the transaction's last
// statement. Like the claim it replaces only an expired row, and meeting an uncommitted insert
// of the same scope it waits for that transaction to end; a live row makes it return nothing.
const INSERT_COMPLETED: &str = concat!(
    "INSERT INTO idemkey_records (actor, operation, idem_key, record_id, version, ",
    "fingerprint, state, token, lease_until, expires_at, created_at, request_id, ",
    "response) SELECT $1, $2, $3, $4, $5, $6, 2, 1, NULL, clock.t + $7, clock.t, $8, $9 FROM ",
    clock!(),
    " ON CONFLICT (actor, operation, idem_key) DO UPDATE SET record_id = ",
    "excluded.record_id, version = excluded.version, fingerprint = excluded.fingerprint, ",
    "state = 2, token = 1, lease_until = NULL, expires_at = excluded.expires_at, ",
    "created_at = excluded.created_at, request_id = excluded.request_id, ",
    "response = excluded.response ",
    "WHERE idemkey_records.expires_at <= excluded.created_at RETURNING token"
);

const FORGET_VERSION: &str = "DELETE FROM idemkey_records WHERE actor = $1 AND operation = $2 AND idem_key = $3 AND version = $4";

const FORGET: &str =
    "DELETE FROM idemkey_records WHERE actor = $1 AND operation = $2 AND idem_key = $3";

// Per-actor caps (behaviour §11): the primary key's leading column finds the actor's rows.
const ACTOR_USAGE: &str = concat!(
    "SELECT count(*), COALESCE(SUM(octet_length(response)), 0)::bigint, ",
    "COALESCE(MIN(expires_at - clock.t), 0)::bigint FROM idemkey_records, ",
    clock!(),
    " WHERE actor = $1 AND expires_at > clock.t"
);

// Every completed or expired record of an actor, in batches (`idemkey forget --actor`). The
// primary key's leading column finds the actor's rows; a row being written is waited for, and
// the outer predicate re-checks it as it is when deleted.
const FORGET_ACTOR: &str = concat!(
    "DELETE FROM idemkey_records USING ",
    clock!(),
    " WHERE ctid = ANY(ARRAY(SELECT ctid FROM idemkey_records, ",
    clock!(),
    " WHERE actor = $1 AND (state = 2 OR expires_at <= clock.t) LIMIT $2 ",
    "FOR UPDATE OF idemkey_records)) AND (state = 2 OR expires_at <= clock.t)"
);

// SKIP LOCKED: sweepers on several instances take disjoint batches and never wait on a claim.
// The outer predicate re-checks expiry on the row as it is when deleted, so a row renewed
// since the inner select survives.
const SWEEP: &str = concat!(
    "DELETE FROM idemkey_records USING ",
    clock!(),
    " WHERE ctid = ANY(ARRAY(SELECT ctid FROM idemkey_records, ",
    clock!(),
    " WHERE expires_at <= clock.t LIMIT $1 FOR UPDATE OF idemkey_records SKIP LOCKED)) ",
    "AND expires_at <= clock.t"
);

// Two statements, once per process: whoever inserts first, every process reads the same row.
// A process's heartbeat: one row per owner, however many claims it holds. The clock is read
// before the row's lock, and several beats may be on their way at once, so a beat that read
// it earlier can commit later: it never moves the mark backwards.
const BEAT: &str = concat!(
    "INSERT INTO idemkey_owners (owner, alive_until, grace) SELECT $1, clock.t + $2, $2 FROM ",
    clock!(),
    " ON CONFLICT (owner) DO UPDATE SET ",
    "alive_until = GREATEST(idemkey_owners.alive_until, excluded.alive_until), ",
    "grace = excluded.grace"
);

// With each beat: the run of beats without a gap longer than $1 (two fifths of the grace; an
// owner beats every quarter) goes on, or starts again now.
const BEATS_RUN: &str = concat!(
    "INSERT INTO idemkey_beats (id, last_beat, since) SELECT 1, clock.t, clock.t FROM ",
    clock!(),
    " ON CONFLICT (id) DO UPDATE SET since = CASE WHEN ",
    "excluded.last_beat - idemkey_beats.last_beat > $1 THEN excluded.last_beat ",
    "ELSE idemkey_beats.since END, ",
    "last_beat = GREATEST(idemkey_beats.last_beat, excluded.last_beat)"
);

// Once per process: the rows of owners dead for a day (their claims are long stale).
const OWNERS_SWEEP: &str = concat!(
    "DELETE FROM idemkey_owners USING ",
    clock!(),
    " WHERE alive_until < clock.t - 86400000"
);

const SECRET_INSERT: &str =
    "INSERT INTO idemkey_secret (id, secret) VALUES (1, $1) ON CONFLICT (id) DO NOTHING";
const SECRET_SELECT: &str = "SELECT secret FROM idemkey_secret WHERE id = 1";

impl Backend for Postgres {
    type Settings = PgSettings;

    fn default_settings(pool: &Pool<Self>) -> PgSettings {
        PgSettings::for_pool(pool)
    }

    async fn begin_write(
        pool: &Pool<Self>,
        _settings: &Self::Settings,
    ) -> Result<Transaction<'static, Self>> {
        pool.begin_with(BEGIN_WRITE).await.map_err(store_error)
    }

    const CLAIM_ON_LOOKUP_CONNECTION: bool = true;

    const CLAIM_ON_KEPT_CONNECTION: bool = true;

    async fn begin_write_on(
        store: &SqlxStore<Self>,
        looked_up: Option<PoolConnection<Self>>,
    ) -> Result<Transaction<'static, Self>> {
        let Some(conn) = looked_up else {
            return store.begin_write().await;
        };
        Transaction::begin(conn, Some(sqlx::SqlSafeStr::into_sql_str(BEGIN_WRITE)))
            .await
            .map_err(store_error)
    }

    async fn begin_claim(
        store: &SqlxStore<Self>,
        request: &ClaimRequest,
        looked_up: Option<PoolConnection<Self>>,
    ) -> Result<Option<(Transaction<'static, Self>, TryClaim)>> {
        wait::begin_claim(store, request, looked_up).await
    }

    async fn lookup(conn: &mut Self::Connection, scope: &Scope) -> Result<Option<Record>> {
        let row: Option<RecordRow> = sqlx::query_as(LOOKUP)
            .bind(scope.actor.as_str())
            .bind(scope.operation.as_str())
            .bind(scope.key.as_str())
            .fetch_optional(conn)
            .await
            .map_err(store_error)?;
        row.map(into_record).transpose()
    }

    async fn try_claim(conn: &mut Self::Connection, request: &ClaimRequest) -> Result<TryClaim> {
        let sql = match request.flush {
            ClaimFlush::Deferred => CLAIM_DEFERRED,
            _ => CLAIM,
        };
        claim_with(conn, request, sql).await
    }

    async fn flush_claim(store: &SqlxStore<Self>) -> Result<()> {
        sqlx::query(FLUSH_CLAIM)
            .execute(&mut *store.conn().await?)
            .await
            .map_err(store_error)?;
        Ok(())
    }

    crate::statements::fenced_statements! {
        database: Postgres,
        dialect: dialect,
        liveness: liveness,
    }

    crate::statements::upsert_statements! {
        database: Postgres,
        insert_completed: INSERT_COMPLETED,
        beat: (BEAT, BEATS_RUN, OWNERS_SWEEP),
        liveness: liveness,
    }

    crate::statements::plain_statements! {
        database: Postgres,
        forget: FORGET,
        forget_version: FORGET_VERSION,
        forget_actor: FORGET_ACTOR,
        sweep: SWEEP,
        actor_usage: ACTOR_USAGE,
        secret: (SECRET_INSERT, SECRET_SELECT),
    }

    fn duplicate_wait(settings: &PgSettings) -> std::time::Duration {
        settings.claim_lock_timeout()
    }

    fn is_retryable(error: &sqlx::Error) -> bool {
        super::error::is_retryable(error)
    }

    fn is_unavailable(error: &dyn sqlx::error::DatabaseError) -> bool {
        super::error::is_unavailable(error)
    }

    fn commit_error(error: sqlx::Error) -> Error {
        super::error::commit_error(error)
    }
}

// `claim_with(conn, request, sql)`: CLAIM, or CLAIM_RESTORING, which also restores the
// session's `lock_timeout`.
crate::statements::claim_with!(Postgres);

/// Atomic mode's claim under a bound set at BEGIN; a successful claim also restores the
/// session's `lock_timeout` (an existing record does not: the caller restores it).
pub(super) async fn claim_restoring(
    conn: &mut PgConnection,
    request: &ClaimRequest,
) -> Result<TryClaim> {
    claim_with(conn, request, CLAIM_RESTORING).await
}

/// PostgreSQL judges the owners' heartbeats by its own clock, one for every process: nothing
/// to bind.
fn liveness<'q>(
    query: sqlx::query::Query<'q, Postgres, PgArguments>,
) -> sqlx::query::Query<'q, Postgres, PgArguments> {
    query
}

#[cfg(test)]
mod tests {
    /// The fence as PostgreSQL reads it: numbered placeholders, `IS NOT DISTINCT FROM` for the
    /// owner, who may be none, and the clock read once for the statement.
    #[test]
    fn the_fence_reads_in_postgresql() {
        assert_eq!(
            crate::statements::release_sql!(dialect),
            concat!(
                "UPDATE idemkey_records SET state = 1, lease_until = NULL, expires_at = clock.t + $1 ",
                "FROM (SELECT floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint AS t) AS clock ",
                "WHERE actor = $2 AND operation = $3 AND idem_key = $4 AND record_id = $5 ",
                "AND token = $6 AND state = 0 AND owner IS NOT DISTINCT FROM $7"
            )
        );
    }
}
