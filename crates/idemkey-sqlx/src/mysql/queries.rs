//! The SQL of the MySQL store, on any connection: the store's own short transactions in lease
//! mode, or the caller's transaction in atomic mode.
//!
//! Statements both MySQL 8 and MariaDB accept: no `RETURNING` (MySQL has none), and no
//! `ON DUPLICATE KEY UPDATE`, whose affected-rows count cannot tell an insert from a live row
//! left alone (sqlx connects with `CLIENT_FOUND_ROWS`: both count 1). A claim is a plain
//! `INSERT`; the duplicate key (1062) is the arbiter's answer, after which the record is read,
//! and an expired one replaced by an `UPDATE` fenced on its expiry. Placeholders are `?`,
//! bound in the order they appear; the fenced statements are the ones written once for every
//! backend (`crate::statements`), read through this file's `dialect!`.

use std::time::Instant;

use idemkey_core::{
    ClaimRequest, Error, Record, RecordId, Result, Scope, StoredResponse, TryClaim,
};
use sqlx::mysql::{MySqlArguments, MySqlConnection};
use sqlx::pool::PoolConnection;
use sqlx::{AssertSqlSafe, MySql, Pool, SqlSafeStr, Transaction};

use super::error::{is_duplicate_key, is_lock_wait_ended, store_error};
use super::wait::{self, MySqlSettings};
use crate::error::millis;
use crate::row::{RecordRow, into_record};
use crate::{Backend, SqlxStore};

/// The database clock in milliseconds since the Unix epoch: the statement's start
/// (`UTC_TIMESTAMP` is fixed for a statement, so every reading in one agrees), as arithmetic
/// on UTC datetimes, which no session time zone or daylight-saving shift can skew (unlike
/// `UNIX_TIMESTAMP(NOW())`).
macro_rules! now {
    () => {
        "(TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6)) DIV 1000)"
    };
}

/// The scope's primary key, the condition of every statement on one record.
macro_rules! scope {
    () => {
        "actor = ? AND operation = ? AND idem_key = ?"
    };
}

/// The longest actor and operation name the columns hold, in bytes (the key's 255 characters
/// are its type's bound).
const MAX_ACTOR: usize = 2048;
const MAX_OPERATION: usize = 512;

/// How every write transaction begins, one round trip: READ COMMITTED (not InnoDB's default
/// REPEATABLE READ), so that a statement after a duplicate key sees the record that committed
/// meanwhile, and the duplicate-key check takes no gap locks.
pub(super) const BEGIN_WRITE: &str =
    "SET TRANSACTION ISOLATION LEVEL READ COMMITTED; START TRANSACTION";

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
            "WHERE o.owner = idemkey_records.owner AND o.alive_until <= ",
            now!(),
            " AND b.id = 1 AND b.since + o.grace <= ",
            now!(),
            " AND b.last_beat + o.grace * 2 / 5 > ",
            now!(),
            ")"
        )
    };
}

/// How the statements written once for every backend (`crate::statements`) read here: `?`
/// placeholders, bound in the order they appear, and `<=>` for null-safe equality.
macro_rules! dialect {
    (now) => {
        now!()
    };
    (from_clock) => {
        ""
    };
    (same) => {
        "<=>"
    };
    (param $n:literal) => {
        "?"
    };
    (owner_lapsed $n:literal) => {
        owner_lapsed!()
    };
}

const LOOKUP: &str = concat!(
    "SELECT record_id, version, fingerprint, state, token, ",
    "CASE WHEN state = 0 AND ",
    owner_lapsed!(),
    " THEN 0 ELSE CAST(GREATEST(COALESCE(lease_until, 0) - ",
    now!(),
    ", 0) AS SIGNED) END, request_id, response FROM idemkey_records WHERE ",
    scope!(),
    " AND expires_at > ",
    now!()
);

/// Whether a live record holds the scope.
const LIVE: &str = concat!(
    "SELECT 1 FROM idemkey_records WHERE ",
    scope!(),
    " AND expires_at > ",
    now!()
);

// The claim: a new record in flight. Meeting an uncommitted insert of the same scope, it waits
// for that transaction to end: 1062 if it committed, inserted if it rolled back.
const CLAIM: &str = concat!(
    "INSERT INTO idemkey_records (actor, operation, idem_key, record_id, version, fingerprint, ",
    "state, token, lease_until, expires_at, created_at, request_id, response, owner, ",
    "owner_record, owner_token) VALUES (?, ?, ?, ?, ?, ?, 0, 1, ",
    now!(),
    " + ?, ",
    now!(),
    " + ? + ?, ",
    now!(),
    ", ?, NULL, ?, ?, 1)"
);

// The claim of a scope whose record has expired: replaces it, only if still expired.
const CLAIM_EXPIRED: &str = concat!(
    "UPDATE idemkey_records SET record_id = ?, version = ?, fingerprint = ?, state = 0, ",
    "token = 1, lease_until = ",
    now!(),
    " + ?, expires_at = ",
    now!(),
    " + ? + ?, created_at = ",
    now!(),
    ", request_id = ?, response = NULL, owner = ?, owner_record = ?, owner_token = 1 ",
    "WHERE ",
    scope!(),
    " AND expires_at <= ",
    now!()
);

/// Bounds the statement it prefixes by the store's claim lock timeout, which the transaction's
/// `BEGIN` keeps in `@idemkey_claim_wait` ([`begin_commit_time`]), or else the session's own.
/// The cast: a variable the session never set is a string, which `SET STATEMENT` refuses
/// (1232). A MariaDB executable comment: MariaDB runs `SET STATEMENT ... FOR` as part of the
/// statement (no round trip of its own), MySQL reads a comment and keeps the session's bound
/// (its `SET_VAR` hint does not take InnoDB's variables).
macro_rules! bounded {
    () => {
        "/*M! SET STATEMENT innodb_lock_wait_timeout = CAST(\
         COALESCE(@idemkey_claim_wait, @@innodb_lock_wait_timeout) AS UNSIGNED) FOR */ "
    };
}

/// The user variable the commit-time transaction's `BEGIN` keeps the bound in, read by
/// [`bounded!`].
const CLAIM_WAIT_VARIABLE: &str = "@idemkey_claim_wait";

// Commit-time claim (behaviour §8): the record, already completed, as the transaction's last
// statement; like the claim, it waits for an uncommitted insert of the scope, at most the
// claim lock timeout on MariaDB.
const INSERT_COMPLETED: &str = concat!(
    bounded!(),
    "INSERT INTO idemkey_records (actor, operation, idem_key, record_id, version, fingerprint, ",
    "state, token, lease_until, expires_at, created_at, request_id, response) ",
    "VALUES (?, ?, ?, ?, ?, ?, 2, 1, NULL, ",
    now!(),
    " + ?, ",
    now!(),
    ", ?, ?)"
);

const COMPLETED_EXPIRED: &str = concat!(
    bounded!(),
    "UPDATE idemkey_records SET record_id = ?, version = ?, fingerprint = ?, state = 2, ",
    "token = 1, lease_until = NULL, expires_at = ",
    now!(),
    " + ?, created_at = ",
    now!(),
    ", request_id = ?, response = ? WHERE ",
    scope!(),
    " AND expires_at <= ",
    now!()
);

const FORGET: &str = concat!("DELETE FROM idemkey_records WHERE ", scope!());

const FORGET_VERSION: &str = concat!(
    "DELETE FROM idemkey_records WHERE ",
    scope!(),
    " AND version = ?"
);

// Oldest first through the expiry index; a row another transaction holds is waited for, not
// skipped (`SKIP LOCKED` needs MariaDB 10.6), and the expiry is checked on the row as deleted.
const SWEEP: &str = concat!(
    "DELETE FROM idemkey_records WHERE expires_at <= ",
    now!(),
    " ORDER BY expires_at LIMIT ?"
);

// Every completed or expired record of an actor, in batches (`idemkey forget --actor`): the
// primary key's leading column finds the actor's rows.
const FORGET_ACTOR: &str = concat!(
    "DELETE FROM idemkey_records WHERE actor = ? AND (state = 2 OR expires_at <= ",
    now!(),
    ") LIMIT ?"
);

// Per-actor caps (behaviour §11): the primary key's leading column finds the actor's rows.
const ACTOR_USAGE: &str = concat!(
    "SELECT CAST(count(*) AS SIGNED), CAST(COALESCE(SUM(LENGTH(response)), 0) AS SIGNED), ",
    "CAST(COALESCE(MIN(expires_at) - ",
    now!(),
    ", 0) AS SIGNED) FROM idemkey_records WHERE actor = ? AND expires_at > ",
    now!()
);

// A process's heartbeat: one row per owner, however many claims it holds. The clock is read
// before the row's lock, and several beats may be on their way at once, so a beat that read
// it earlier can commit later: it never moves the mark backwards.
const BEAT: &str = concat!(
    "INSERT INTO idemkey_owners (owner, alive_until, grace) VALUES (?, ",
    now!(),
    " + ?, ?) ON DUPLICATE KEY UPDATE alive_until = GREATEST(alive_until, VALUES(alive_until)), ",
    "grace = VALUES(grace)"
);

// With each beat: the run of beats without a gap longer than ? (two fifths of the grace; an
// owner beats every quarter) goes on, or starts again now. MySQL assigns left to right, each
// assignment seeing the ones before: `since` is set first, from the old `last_beat`.
const BEATS_RUN: &str = concat!(
    "INSERT INTO idemkey_beats (id, last_beat, since) VALUES (1, ",
    now!(),
    ", ",
    now!(),
    ") ON DUPLICATE KEY UPDATE since = IF(VALUES(last_beat) - last_beat > ?, ",
    "VALUES(last_beat), since), last_beat = GREATEST(last_beat, VALUES(last_beat))"
);

// Once per process: the rows of owners dead for a day (their claims are long stale).
const OWNERS_SWEEP: &str = concat!(
    "DELETE FROM idemkey_owners WHERE alive_until < ",
    now!(),
    " - 86400000"
);

// Two statements, once per process: whoever inserts first, every process reads the same row.
const SECRET_INSERT: &str =
    "INSERT INTO idemkey_secret (id, secret) VALUES (1, ?) ON DUPLICATE KEY UPDATE id = id";
const SECRET_SELECT: &str = "SELECT secret FROM idemkey_secret WHERE id = 1";

type Query<'q> = sqlx::query::Query<'q, MySql, MySqlArguments>;

impl Backend for MySql {
    type Settings = MySqlSettings;

    fn default_settings(_pool: &Pool<Self>) -> MySqlSettings {
        MySqlSettings::default()
    }

    async fn begin_write(
        pool: &Pool<Self>,
        _settings: &Self::Settings,
    ) -> Result<Transaction<'static, Self>> {
        pool.begin_with(BEGIN_WRITE).await.map_err(store_error)
    }

    const CLAIM_ON_LOOKUP_CONNECTION: bool = true;

    // A statement costs the server more than a retry's speculative run saves (docs/mysql.md):
    // atomic mode starts without the lookup here.
    const LOOKUP_FIRST: bool = false;

    /// Commit-time's transaction: keeps the claim lock timeout for the record's insert in the
    /// same round trip as `BEGIN`.
    async fn begin_write_on(
        store: &SqlxStore<Self>,
        looked_up: Option<PoolConnection<Self>>,
    ) -> Result<Transaction<'static, Self>> {
        let conn = match looked_up {
            Some(conn) => conn,
            None => store.conn().await?,
        };
        let sql = begin_commit_time(&store.settings);
        Transaction::begin(conn, Some(AssertSqlSafe(sql).into_sql_str()))
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

    async fn lookup(conn: &mut MySqlConnection, scope: &Scope) -> Result<Option<Record>> {
        let row: Option<RecordRow> = sqlx::query_as(LOOKUP)
            .bind(scope.actor.as_str())
            .bind(scope.operation.as_str())
            .bind(scope.key.as_str())
            .fetch_optional(conn)
            .await
            .map_err(store_error)?;
        row.map(into_record).transpose()
    }

    async fn try_claim(conn: &mut MySqlConnection, request: &ClaimRequest) -> Result<TryClaim> {
        claim(conn, request).await
    }

    async fn insert_completed(
        conn: &mut MySqlConnection,
        request: &ClaimRequest,
        record_id: RecordId,
        response: &StoredResponse,
    ) -> Result<bool> {
        fits(&request.scope)?;
        let encoded = response.encode();
        let inserted = scoped(INSERT_COMPLETED, &request.scope)
            .bind(record_id.as_bytes().as_slice())
            .bind(request.operation.version())
            .bind(request.fingerprint.as_bytes().as_slice())
            .bind(millis(request.retention))
            .bind(request.request_id.as_deref())
            .bind(&encoded)
            .execute(&mut *conn)
            .await;
        match inserted {
            Ok(_) => return Ok(true),
            Err(error) if is_duplicate_key(&error) => {}
            Err(error) => return held_past_bound(store_error(error)),
        }
        if is_live(conn, &request.scope).await? {
            return Ok(false);
        }
        let replaced = sqlx::query(COMPLETED_EXPIRED)
            .bind(record_id.as_bytes().as_slice())
            .bind(request.operation.version())
            .bind(request.fingerprint.as_bytes().as_slice())
            .bind(millis(request.retention))
            .bind(request.request_id.as_deref())
            .bind(&encoded);
        match rows(in_scope(replaced, &request.scope), conn).await {
            Ok(replaced) => Ok(replaced == 1),
            Err(error) => held_past_bound(error),
        }
    }

    crate::statements::fenced_statements! {
        database: MySql,
        dialect: dialect,
        liveness: std::convert::identity,
    }

    async fn beat(
        conn: &mut MySqlConnection,
        owner: idemkey_core::OwnerId,
        grace: std::time::Duration,
        first: bool,
    ) -> Result<()> {
        let beat = sqlx::query(BEAT)
            .bind(owner.as_bytes().as_slice())
            .bind(millis(grace))
            .bind(millis(grace));
        rows(beat, &mut *conn).await?;
        let run = sqlx::query(BEATS_RUN).bind(millis(grace) * 2 / 5);
        rows(run, &mut *conn).await?;
        if first {
            rows(sqlx::query(OWNERS_SWEEP), conn).await?;
        }
        Ok(())
    }

    crate::statements::plain_statements! {
        database: MySql,
        forget: FORGET,
        forget_version: FORGET_VERSION,
        forget_actor: FORGET_ACTOR,
        sweep: SWEEP,
        actor_usage: ACTOR_USAGE,
        secret: (SECRET_INSERT, SECRET_SELECT),
    }

    fn duplicate_wait(settings: &MySqlSettings) -> std::time::Duration {
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

/// Claims the scope, or returns its live record (see [`Backend::try_claim`]): the insert;
/// on a duplicate key, the live record, or else the expired one replaced.
/// [`Error::Contention`] when the row the insert met is gone by then, which only a claim
/// outside a transaction can meet: inside one, the duplicate key left the row share-locked.
pub(super) async fn claim(conn: &mut MySqlConnection, request: &ClaimRequest) -> Result<TryClaim> {
    fits(&request.scope)?;
    let acquired = Instant::now();
    let record_id = RecordId::new();
    let claimed = |record_id| TryClaim::Claimed(request.grant(record_id, 1, acquired, None));
    let inserted = scoped(CLAIM, &request.scope)
        .bind(record_id.as_bytes().as_slice())
        .bind(request.operation.version())
        .bind(request.fingerprint.as_bytes().as_slice())
        .bind(millis(request.lease))
        .bind(millis(request.lease))
        .bind(millis(request.retention))
        .bind(request.request_id.as_deref())
        .bind(owner_bytes(request))
        .bind(record_id.as_bytes().as_slice())
        .execute(&mut *conn)
        .await;
    match inserted {
        Ok(_) => return Ok(claimed(record_id)),
        Err(error) if is_duplicate_key(&error) => {}
        Err(error) => return Err(store_error(error)),
    }
    // Read first: a live record (the common duplicate) is answered without touching its lock.
    if let Some(record) = MySql::lookup(conn, &request.scope).await? {
        return Ok(TryClaim::Existing(record));
    }
    let replace = sqlx::query(CLAIM_EXPIRED)
        .bind(record_id.as_bytes().as_slice())
        .bind(request.operation.version())
        .bind(request.fingerprint.as_bytes().as_slice())
        .bind(millis(request.lease))
        .bind(millis(request.lease))
        .bind(millis(request.retention))
        .bind(request.request_id.as_deref())
        .bind(owner_bytes(request))
        .bind(record_id.as_bytes().as_slice());
    if rows(in_scope(replace, &request.scope), &mut *conn).await? == 1 {
        return Ok(claimed(record_id));
    }
    match MySql::lookup(conn, &request.scope).await? {
        Some(record) => Ok(TryClaim::Existing(record)),
        None => Err(Error::Contention),
    }
}

/// Commit-time's record statement failed with `error`. A lock wait that ran out (or was
/// interrupted) met a concurrent, uncommitted record of the scope: the scope is held
/// (`Ok(false)`), and claim-first's claim decides, as for a claim that waited, answering
/// `request-in-flight` if that record is still uncommitted past the bound once more.
fn held_past_bound(error: Error) -> Result<bool> {
    if is_lock_wait_ended(&error) {
        tracing::debug!("the record's insert waited past the claim lock timeout: held");
        return Ok(false);
    }
    Err(error)
}

/// How commit-time's write transaction begins, one round trip: the claim lock timeout kept in
/// `@idemkey_claim_wait` for the record's statements ([`bounded!`]), then READ COMMITTED.
fn begin_commit_time(settings: &MySqlSettings) -> String {
    format!(
        "SET {CLAIM_WAIT_VARIABLE} = {}; {BEGIN_WRITE}",
        settings.claim_lock_timeout().as_secs()
    )
}

/// Refuses a scope longer than its columns, before any write: strict SQL mode would refuse
/// it too (1406), but a server without it would cut it, and two actors sharing a prefix
/// would share records.
fn fits(scope: &Scope) -> Result<()> {
    if scope.actor.len() > MAX_ACTOR || scope.operation.len() > MAX_OPERATION {
        return Err(Error::Backend(
            format!(
                "the MySQL store holds actors of at most {MAX_ACTOR} bytes and operation \
                 names of at most {MAX_OPERATION}"
            )
            .into(),
        ));
    }
    Ok(())
}

async fn is_live(conn: &mut MySqlConnection, scope: &Scope) -> Result<bool> {
    let live = scoped(LIVE, scope)
        .fetch_optional(conn)
        .await
        .map_err(store_error)?;
    Ok(live.is_some())
}

/// The claim's owner as stored, if it names one.
fn owner_bytes(request: &ClaimRequest) -> Option<&[u8]> {
    request
        .owner
        .as_ref()
        .map(|owner| owner.as_bytes().as_slice())
}

fn scoped<'q>(sql: &'static str, scope: &'q Scope) -> Query<'q> {
    sqlx::query(sql)
        .bind(scope.actor.as_str())
        .bind(scope.operation.as_str())
        .bind(scope.key.as_str())
}

/// `query`, whose values come before its condition, with the scope bound after them.
fn in_scope<'q>(query: Query<'q>, scope: &'q Scope) -> Query<'q> {
    query
        .bind(scope.actor.as_str())
        .bind(scope.operation.as_str())
        .bind(scope.key.as_str())
}

/// Runs `query`; the number of rows its condition matched.
async fn rows(query: Query<'_>, conn: &mut MySqlConnection) -> Result<u64> {
    let done = query.execute(conn).await.map_err(store_error)?;
    Ok(done.rows_affected())
}

#[cfg(test)]
mod tests {
    /// The fence as MySQL reads it: `?` placeholders, bound in the order they appear, and
    /// `<=>` for the owner, who may be none.
    #[test]
    fn the_fence_reads_in_mysql() {
        assert_eq!(
            crate::statements::discard_sql!(dialect),
            "DELETE FROM idemkey_records WHERE actor = ? AND operation = ? AND idem_key = ? \
             AND record_id = ? AND token = ? AND state = 0 AND owner <=> ?"
        );
    }
}
