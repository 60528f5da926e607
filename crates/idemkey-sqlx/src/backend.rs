//! What each database provides: its SQL, its write transactions and its error rules.
//!
//! Each backend is a folder of the same files, so that the next one is a copy of a folder
//! with its own SQL and codes:
//!
//! - `mod.rs`: the store's alias (`SqliteStore`, `PgStore`, `MySqlStore`), its `connect_options`,
//!   `connect`, `connect_with` and `migrate` (its migrations under `migrations/<backend>`),
//!   anything its pool needs, and `impl Sealed`.
//! - `queries.rs`: the SQL constants and `impl Backend`, whose fenced statements, SQL and
//!   all, come from `crate::statements` (`fenced_statements!`) read through the folder's
//!   `dialect!` (its clock, null-safe equality and placeholders), and whose other statements'
//!   code comes from there too (`plain_statements!`; `upsert_statements!` and `claim_with!`
//!   where upserts return what they did) with the folder's SQL constants named. MySQL writes
//!   its claim, commit-time's record and heartbeat itself: it has no `RETURNING`, and a
//!   plain `INSERT`'s duplicate key is the claim's arbiter.
//! - `error.rs`: `store_error` for the backend, and the rules that read the database's own
//!   codes, reached only through the trait: [`Backend::is_unavailable`],
//!   [`Backend::is_retryable`], [`Backend::commit_error`] (and [`Backend::note_error`] where
//!   an error spoils a connection).
//!
//! A backend may add files for what it alone does: PostgreSQL's and MySQL's `wait.rs` bound
//! how an atomic claim waits for a concurrent uncommitted claim of its scope.

use std::future::Future;
use std::time::Instant;

use idemkey_core::{Claim, ClaimRequest, Record, Result, Scope, StoredResponse, TryClaim};
use sqlx::error::DatabaseError;
use sqlx::pool::PoolConnection;
use sqlx::{Database, Pool, Transaction};

use crate::SqlxStore;
use crate::failpoints::Point;

mod sealed {
    pub trait Sealed {}
}

pub(crate) use sealed::Sealed;

/// A database idemkey can store records in: SQLite, PostgreSQL or MySQL (and MariaDB).
///
/// Each statement runs on the connection it is given: the store's own short transactions in
/// lease mode, or the caller's transaction in atomic mode. Sealed: implemented by the SQL
/// stores only, for `sqlx::Sqlite`, `sqlx::Postgres` and `sqlx::MySql`.
pub trait Backend: Database + Sealed {
    /// What a store of this backend is configured with beyond its pool (PostgreSQL: how
    /// atomic claims wait for a concurrent claim; SQLite: nothing).
    type Settings: Clone + std::fmt::Debug + Send + Sync + 'static;

    /// The settings a store on `pool` starts with.
    fn default_settings(pool: &Pool<Self>) -> Self::Settings;

    /// Opens a write transaction that will not fail to upgrade later (SQLite:
    /// `BEGIN IMMEDIATE`, at the configured sync level: see [`Self::restore_sync`]).
    fn begin_write(
        pool: &Pool<Self>,
        settings: &Self::Settings,
    ) -> impl Future<Output = Result<Transaction<'static, Self>>> + Send;

    /// [`Self::begin_write`] on `looked_up`, the lookup's connection, when
    /// [`Self::CLAIM_ON_LOOKUP_CONNECTION`]; otherwise as the store begins its writes.
    fn begin_write_on(
        store: &SqlxStore<Self>,
        looked_up: Option<PoolConnection<Self>>,
    ) -> impl Future<Output = Result<Transaction<'static, Self>>> + Send {
        drop(looked_up);
        store.begin_write()
    }

    /// Whether atomic mode's claim begins its transaction on the connection the read-only
    /// lookup ran on, saving an acquire and a release (sqlx answers each release with a
    /// round trip). Not on SQLite, whose writes take the store's writer.
    const CLAIM_ON_LOOKUP_CONNECTION: bool = false;

    /// Whether lease mode's claim (one statement outside a transaction) runs on a connection
    /// kept for lookups (`readers.rs`), which goes back without the round trip sqlx makes to
    /// test every connection given back to its pool. Not on SQLite, whose writes take the
    /// store's writer.
    const CLAIM_ON_KEPT_CONNECTION: bool = false;

    /// Whether atomic mode reads the record before its write transaction unless the layer
    /// says otherwise (`AtomicIdempotencyLayer::lookup_first`): where a statement costs
    /// more than a retry's speculative execution saves, a backend starts without it.
    const LOOKUP_FIRST: bool = true;

    /// Atomic mode: opens a write transaction whose first statement claims the scope.
    ///
    /// `looked_up` is the lookup's connection when [`Self::CLAIM_ON_LOOKUP_CONNECTION`].
    /// `None` when a concurrent claim of the scope held it past the backend's bound
    /// (PostgreSQL's claim lock timeout, or its cap on waiting claims): the request is
    /// answered `request-in-flight`, and no transaction is left open.
    fn begin_claim(
        store: &SqlxStore<Self>,
        request: &ClaimRequest,
        _looked_up: Option<PoolConnection<Self>>,
    ) -> impl Future<Output = Result<Option<(Transaction<'static, Self>, TryClaim)>>> + Send {
        async move {
            let mut tx = store.begin_write().await?;
            store.hit(Point::BeforeClaim).await?;
            let outcome = Self::try_claim(&mut tx, request).await?;
            Ok(Some((tx, outcome)))
        }
    }

    /// The live record of a scope.
    fn lookup(
        conn: &mut Self::Connection,
        scope: &Scope,
    ) -> impl Future<Output = Result<Option<Record>>> + Send;

    /// Claims the scope, or returns its live record (see [`Store::try_claim`](idemkey_core::Store::try_claim)).
    fn try_claim(
        conn: &mut Self::Connection,
        request: &ClaimRequest,
    ) -> impl Future<Output = Result<TryClaim>> + Send;

    /// Atomic mode's commit-time claim: inserts the record already completed with
    /// `response`, as the transaction's last statement. Replaces only an expired row; `false`
    /// when a live record holds the scope (on PostgreSQL, once a concurrent uncommitted
    /// insert of the scope has ended: the unique scope is the arbiter).
    fn insert_completed(
        conn: &mut Self::Connection,
        request: &ClaimRequest,
        record_id: idemkey_core::RecordId,
        response: &StoredResponse,
    ) -> impl Future<Output = Result<bool>> + Send;

    /// Whether [`Self::insert_completed_and_commit`] runs the record's insert and the commit
    /// as one command here.
    const FOLDS_COMMIT: bool = false;

    /// Commit-time's record and the `COMMIT` in one round trip to the database, where the
    /// driver runs several statements as one command (SQLite, whose driver sends each
    /// statement to the connection's worker thread and waits for it, inside the window in
    /// which the process's one writer is held). Elsewhere [`Folded::Unsupported`], and the
    /// caller runs [`Self::insert_completed`] and commits.
    fn insert_completed_and_commit(
        tx: &mut Transaction<'static, Self>,
        request: &ClaimRequest,
        record_id: idemkey_core::RecordId,
        response: &StoredResponse,
    ) -> impl Future<Output = Folded> + Send {
        let _ = (tx, request, record_id, response);
        std::future::ready(Folded::Unsupported)
    }

    /// See [`Store::reclaim`](idemkey_core::Store::reclaim).
    fn reclaim(
        conn: &mut Self::Connection,
        request: &ClaimRequest,
        seen: &Record,
    ) -> impl Future<Output = Result<Option<Claim>>> + Send;

    /// See [`Store::complete`](idemkey_core::Store::complete).
    fn complete(
        conn: &mut Self::Connection,
        claim: &Claim,
        response: &StoredResponse,
    ) -> impl Future<Output = Result<()>> + Send;

    /// See [`Store::release`](idemkey_core::Store::release).
    fn release(
        conn: &mut Self::Connection,
        claim: &Claim,
    ) -> impl Future<Output = Result<()>> + Send;

    /// See [`Store::discard`](idemkey_core::Store::discard).
    fn discard(
        conn: &mut Self::Connection,
        claim: &Claim,
    ) -> impl Future<Output = Result<()>> + Send;

    /// See [`Store::extend`](idemkey_core::Store::extend).
    fn extend(
        conn: &mut Self::Connection,
        claim: &mut Claim,
    ) -> impl Future<Output = Result<()>> + Send;

    /// See [`Store::beat`](idemkey_core::Store::beat): `owner` alive for `grace` from now;
    /// `first` also deletes the heartbeats of owners dead for a day.
    fn beat(
        conn: &mut Self::Connection,
        owner: idemkey_core::OwnerId,
        grace: std::time::Duration,
        first: bool,
    ) -> impl Future<Output = Result<()>> + Send;

    /// See [`Store::forget`](idemkey_core::Store::forget).
    fn forget(
        conn: &mut Self::Connection,
        scope: &Scope,
    ) -> impl Future<Output = Result<bool>> + Send;

    /// Deletes the scope's record only if it was written by operation version `version`.
    fn forget_version(
        conn: &mut Self::Connection,
        scope: &Scope,
        version: &str,
    ) -> impl Future<Output = Result<bool>> + Send;

    /// Deletes up to `batch` of `actor`'s completed or expired records (see
    /// [`Store::forget_actor`](idemkey_core::Store::forget_actor)), re-checking both in the
    /// delete. Returns how many it deleted.
    fn forget_actor(
        conn: &mut Self::Connection,
        actor: &str,
        batch: u32,
    ) -> impl Future<Output = Result<u64>> + Send;

    /// See [`Store::sweep`](idemkey_core::Store::sweep).
    fn sweep(conn: &mut Self::Connection, batch: u32) -> impl Future<Output = Result<u64>> + Send;

    /// What `actor` keeps in the store: its live records and their stored bytes (per-actor
    /// caps, behaviour [§11](https://docs.rs/idemkey/latest/idemkey/behaviour/index.html#11-security)). Run in the transaction that creates a record, it counts that one.
    fn actor_usage(
        conn: &mut Self::Connection,
        actor: &str,
    ) -> impl Future<Output = Result<idemkey_core::ActorUsage>> + Send;

    /// The derived-key secret kept in the database: `candidate` is stored if there is none
    /// yet, and the stored one returned either way.
    fn load_secret(
        conn: &mut Self::Connection,
        candidate: &[u8],
    ) -> impl Future<Output = Result<Vec<u8>>> + Send;

    /// The pool that write transactions and the store's own writes take their connection
    /// from. Defaults to `pool` itself; SQLite uses a pool of one connection of its own.
    fn writer_pool(pool: &Pool<Self>) -> Pool<Self> {
        pool.clone()
    }

    /// Lets the next commit on `conn`, a connection of the writer pool, return before the
    /// disk has it, if this backend groups the store's short writes; the caller gives the
    /// connection back, then awaits [`Self::flush`] before relying on the write. Whether it
    /// did: only SQLite with group commit on (`sqlite/group.rs`); elsewhere every commit
    /// waits for the disk itself (PostgreSQL and MariaDB share their flushes already).
    fn relax(
        conn: &mut Self::Connection,
        settings: &Self::Settings,
    ) -> impl Future<Output = Result<bool>> + Send {
        let _ = (conn, settings);
        std::future::ready(Ok(false))
    }

    /// Puts the configured sync level back on `conn`, a connection of the writer pool, if a
    /// write that [`Self::relax`] relaxed left it so: before any write that is not grouped.
    /// Only SQLite relaxes; there, grouped writes in a row leave the connection relaxed and
    /// cost no statement to switch.
    fn restore_sync(
        conn: &mut Self::Connection,
        settings: &Self::Settings,
    ) -> impl Future<Output = Result<()>> + Send {
        let _ = (conn, settings);
        std::future::ready(Ok(()))
    }

    /// Opens a write transaction as [`Self::begin_write`] does, on `conn`, a connection of
    /// the writer pool that [`Self::relax`] relaxed (SQLite does not let a transaction
    /// change its sync level). Only called where `relax` relaxes.
    fn begin_write_with(
        conn: PoolConnection<Self>,
    ) -> impl Future<Output = Result<Transaction<'static, Self>>> + Send {
        async move {
            Transaction::begin(conn, None)
                .await
                .map_err(crate::error::store_error::<Self>)
        }
    }

    /// Refuses a write before it begins when the store can no longer make writes durable
    /// (SQLite: after a failed sync, until the process restarts). Defaults to yes.
    fn writable(settings: &Self::Settings) -> Result<()> {
        let _ = settings;
        Ok(())
    }

    /// Returns once every commit that [`Self::relax`] let return early is on disk.
    fn flush(settings: &Self::Settings) -> impl Future<Output = Result<()>> + Send {
        let _ = settings;
        std::future::ready(Ok(()))
    }

    /// Returns once a claim of `store` that [`Self::try_claim`] granted with
    /// [`ClaimFlush::Deferred`](idemkey_core::ClaimFlush::Deferred), and that had committed
    /// before the call, is on disk: [`Self::flush`] unless the backend defers claims
    /// otherwise (PostgreSQL commits them asynchronously).
    fn flush_claim(store: &SqlxStore<Self>) -> impl Future<Output = Result<()>> + Send {
        Self::flush(&store.settings)
    }

    /// Returns once every commit that a read which has just ended could have seen is on
    /// disk: awaited before a completed record read from the database is replayed, kept or
    /// handed on, where completions may return before the disk has them (SQLite with group
    /// commit, `sqlite/group.rs`). Elsewhere a completion is on disk before anyone can read it.
    fn flush_seen(settings: &Self::Settings) -> impl Future<Output = Result<()>> + Send {
        let _ = settings;
        std::future::ready(Ok(()))
    }

    /// How long an atomic claim's in-process duplicate waits for it before answering
    /// `request-in-flight` (see [`SqlxStore::coalescing`]): as long as a claim would wait on
    /// the database. Defaults to 5 s.
    fn duplicate_wait(_settings: &Self::Settings) -> std::time::Duration {
        std::time::Duration::from_secs(5)
    }

    /// Whether an error means "run the transaction again" (serialization failure, deadlock).
    fn is_retryable(_error: &sqlx::Error) -> bool {
        false
    }

    /// Whether one of this database's own errors may pass if tried again (a lock wait that
    /// ran out, a server shutting down), and so is `store-unavailable`; otherwise it is
    /// permanent until someone acts. The driver's own failures (pool timeouts, I/O) are
    /// classified for every backend alike.
    fn is_unavailable(error: &dyn DatabaseError) -> bool;

    /// Sees each of this database's errors before it is classified, for a backend whose
    /// connections an error can spoil (SQLite: after a read-only or I/O error the pools
    /// replace their connections). Defaults to nothing.
    fn note_error(_error: &dyn DatabaseError) {}

    /// Whether a connection the store kept for its lookups, sound when the pool handed it out
    /// at `since`, may serve another. Defaults to yes: a lookup that failed never gives its
    /// connection back. SQLite: not if a read-only or I/O error was seen since (see
    /// [`Self::note_error`]).
    fn reusable(_conn: &Self::Connection, _since: Instant) -> bool {
        true
    }

    /// What a failed `COMMIT` means: on a networked database a lost reply is
    /// [`Error::OutcomeUnknown`](idemkey_core::Error::OutcomeUnknown).
    fn commit_error(error: sqlx::Error) -> idemkey_core::Error {
        crate::error::store_error::<Self>(error)
    }
}

/// How [`Backend::insert_completed_and_commit`] ended.
#[derive(Debug)]
#[non_exhaustive]
pub enum Folded {
    /// The backend has no such command: nothing ran.
    Unsupported,
    /// The record and the transaction committed. The transaction handle is left over an
    /// empty transaction of the driver's count, to be dropped (its rollback is queued, not
    /// awaited).
    Committed,
    /// A row of the scope, live or expired, stopped the insert before the commit: the
    /// transaction is open as it was, and [`Backend::insert_completed`] decides.
    Conflict,
    /// The insert failed otherwise; nothing committed.
    InsertFailed(idemkey_core::Error),
    /// The `COMMIT` failed, as [`Backend::commit_error`] reports it.
    CommitFailed(idemkey_core::Error),
}
