//! The SQLite backend.
//!
//! It has no `wait.rs` as PostgreSQL has: a write transaction holds the whole database, so
//! an atomic claim never meets a concurrent uncommitted claim of its scope. The process's
//! writers queue for its one writer connection, and another process's lock is waited out by
//! the busy timeout ([`DEFAULT_BUSY_TIMEOUT`]).

mod error;
mod group;
mod queries;
mod steady;
mod sync_failure;

use std::str::FromStr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use idemkey_core::Result;
use sqlx::pool::PoolConnectionMetadata;
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteConnection, SqliteJournalMode, SqlitePool, SqlitePoolOptions,
    SqliteSynchronous,
};
use sqlx::{Connection, Sqlite};

use crate::SqlxStore;
use error::store_error;
use group::Grouping;

/// The SQLite store: records in the same database file as the business tables.
pub type SqliteStore = SqlxStore<Sqlite>;

/// What a SQLite store is configured with beyond its pool: whether its short writes share
/// their syncs (group commit), which [`SqliteStore::connect_with`] turns on for a file in WAL
/// mode (behaviour [§8a](https://docs.rs/idemkey/latest/idemkey/behaviour/index.html#8a-external-effects-lease-mode)).
#[derive(Clone, Debug, Default)]
pub struct SqliteSettings {
    grouping: Arc<Grouping>,
    /// Stopped for good by a failed sync (`sync_failure.rs`).
    writes: Arc<sync_failure::Writes>,
}

/// How long a statement waits for another connection's write lock before giving up with
/// `store-unavailable`. Defaults to 5 s.
pub const DEFAULT_BUSY_TIMEOUT: Duration = Duration::from_secs(5);

impl SqlxStore<Sqlite> {
    /// Connection options for `url` with what idemkey relies on: the file is created if
    /// missing, WAL journal, `synchronous=FULL`, a 5 s busy timeout, foreign keys on.
    pub fn connect_options(url: &str) -> Result<SqliteConnectOptions> {
        let options = SqliteConnectOptions::from_str(url).map_err(store_error)?;
        Ok(options
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(SqliteSynchronous::Full)
            .busy_timeout(DEFAULT_BUSY_TIMEOUT)
            .foreign_keys(true))
    }

    /// Opens (creating if needed) the database at `url` (`sqlite://idemkey.db`) with
    /// [`SqliteStore::connect_options`], and applies idemkey's migrations.
    ///
    /// `sqlite::memory:` gives each pooled connection its own database: use a file.
    pub async fn connect(url: &str) -> Result<Self> {
        Self::connect_with(Self::connect_options(url)?).await
    }

    /// Opens a pool of 8 connections with `options` and applies idemkey's migrations. Write
    /// transactions take a ninth connection of their own, one at a time (see
    /// [`SqlxStore::begin_write`]).
    ///
    /// A pooled connection is closed rather than handed out (see `reusable`) when it still
    /// counts as inside a transaction, or was opened before the last I/O or read-only error:
    /// after a failed `COMMIT` (a full disk), SQLite has already rolled back, the driver's
    /// `ROLLBACK` fails, and the connection would otherwise refuse every later `BEGIN`; after
    /// the file was read-only for a while, SQLite keeps the connection read-only for good.
    /// Pools made elsewhere (for [`SqlxStore::from_pool`]) get neither check.
    ///
    /// A database file that does not exist yet is created readable and writable by its owner
    /// only (0600 on Unix, whatever the umask): it holds stored responses and raw keys, and
    /// SQLite gives the `-wal` and `-shm` files the database file's permissions. An existing
    /// file keeps its own.
    pub async fn connect_with(options: SqliteConnectOptions) -> Result<Self> {
        create_private(options.get_filename())?;
        let pool = SqlitePoolOptions::new()
            .max_connections(8)
            // No reaping of idle or old connections: sqlx 0.9.0's task for it counts the idle
            // connections while a release may be between queueing one and counting it, and a count
            // read below zero (wrapped) makes it loop without yielding: a core spun for good, and
            // a process that cannot exit. The pool is bounded; a dead connection fails its
            // statement.
            // Reported to sqlx as "100% CPU in spawn_maintenance_tasks".
            .idle_timeout(None)
            .max_lifetime(None)
            // A ping is a round trip to the connection's worker thread on every acquire, and
            // a connection to a local file has no peer that could have gone away.
            .test_before_acquire(false)
            .before_acquire(|conn, meta| Box::pin(async move { Ok(reusable(conn, &meta)) }))
            .connect_with(options)
            .await
            .map_err(store_error)?;
        let store = Self::from_pool(pool);
        store.migrate().await?;
        store.group_commits().await?;
        Ok(store)
    }

    /// Turns group commit on for the store's short lease-mode writes (claims, takeovers,
    /// releases: see `group.rs`) where it keeps them durable: a database file
    /// in WAL mode with `synchronous` at `FULL` or `EXTRA`, as [`Self::connect_options`]
    /// sets. Completions, atomic mode and the application's own transactions keep the
    /// configured level.
    async fn group_commits(&self) -> Result<()> {
        // The application's queries on `pool()` would share a writer that is the pool,
        // relaxed by a grouped write or not: no grouping there.
        if is_own_writer(&self.pool) {
            return Ok(());
        }
        let mut conn = self.write_conn().await?;
        let journal: String = sqlx::query_scalar("PRAGMA journal_mode")
            .fetch_one(&mut *conn)
            .await
            .map_err(store_error)?;
        let level: i64 = sqlx::query_scalar("PRAGMA synchronous")
            .fetch_one(&mut *conn)
            .await
            .map_err(store_error)?;
        let file = self.pool.connect_options().get_filename().to_owned();
        if !journal.eq_ignore_ascii_case("wal") || level < 2 || !file.is_file() {
            return Ok(());
        }
        // Absolute: the syncs open the file by name, whatever the directory is then.
        let file =
            std::fs::canonicalize(&file).map_err(|e| idemkey_core::Error::Backend(Box::new(e)))?;
        self.settings.grouping.enable(&file, level);
        Ok(())
    }

    /// Applies idemkey's migrations (the `idemkey_records` table), tracked in
    /// `_idemkey_migrations` so they never mix with the application's own.
    pub async fn migrate(&self) -> Result<()> {
        let mut migrator = sqlx::migrate!("./migrations/sqlite");
        migrator.dangerous_set_table_name("_idemkey_migrations");
        migrator
            .run(&self.pool)
            .await
            .map_err(|e| idemkey_core::Error::Backend(Box::new(e)))
    }
}

/// Creates the database file at `path`, owner-only, if it does not exist (behaviour [§11](https://docs.rs/idemkey/latest/idemkey/behaviour/index.html#11-security)).
#[cfg(unix)]
fn create_private(path: &std::path::Path) -> Result<()> {
    use std::os::unix::fs::OpenOptionsExt;

    if path.as_os_str().is_empty() || path == std::path::Path::new(":memory:") {
        return Ok(());
    }
    let created = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path);
    // Already there (kept as it is), or not creatable here: SQLite's own open follows and
    // reports a real problem with its usual error.
    if let Err(error) = created {
        tracing::debug!(%error, path = %path.display(), "database file not created beforehand");
    }
    Ok(())
}

#[cfg(not(unix))]
fn create_private(_path: &std::path::Path) -> Result<()> {
    Ok(())
}

/// The pool of SQLite's write transactions: one connection on the same options, so the
/// process's writers queue for it in order. Without it, each of several pooled writers polls
/// the write lock in SQLite's busy handler, which sleeps 1, 2, 5, ... up to 100 ms between
/// tries: under load some writers waited hundreds of milliseconds while the lock was free
/// most of the time. Other processes on the same file still meet the busy timeout, and the
/// wait in line here is bounded by [`DEFAULT_BUSY_TIMEOUT`] (or the pool's acquire timeout if
/// shorter), past which the request is `store-unavailable` as before. A pool of one
/// connection is its own writer.
pub(crate) fn writer_pool(pool: &SqlitePool) -> SqlitePool {
    if is_own_writer(pool) {
        return pool.clone();
    }
    let options = pool.options();
    SqlitePoolOptions::new()
        .max_connections(1)
        .test_before_acquire(false)
        // See `connect_with`: no reaping task.
        .idle_timeout(None)
        .max_lifetime(None)
        .acquire_timeout(options.get_acquire_timeout().min(DEFAULT_BUSY_TIMEOUT))
        // See `reusable`.
        .before_acquire(|conn, meta| Box::pin(async move { Ok(reusable(conn, &meta)) }))
        .connect_lazy_with((*pool.connect_options()).clone())
}

/// Whether `pool` has a single connection, which is then its own writer.
fn is_own_writer(pool: &SqlitePool) -> bool {
    pool.options().get_max_connections() <= 1
}

/// Whether a pooled connection may be handed out. Replacing a connection costs an open of
/// the file.
fn reusable(conn: &SqliteConnection, meta: &PoolConnectionMetadata) -> bool {
    reusable_since(conn, Instant::now().checked_sub(meta.age))
}

/// Whether a connection last known sound at `since` (`None`: too long ago to tell) may be
/// used again: not inside a transaction, and no fault [`error::note_fault`] saw since.
fn reusable_since(conn: &SqliteConnection, since: Option<Instant>) -> bool {
    !conn.is_in_transaction() && !error::opened_before_fault(since)
}

impl crate::backend::Sealed for Sqlite {}

#[cfg(test)]
mod tests {
    use super::*;

    /// The store's pools run no task of sqlx's that reaps connections (see `connect_with`):
    /// neither an idle timeout nor a lifetime is set.
    #[tokio::test]
    async fn no_reaping_task_runs_beside_the_pools() {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}", dir.path().join("r.db").display());
        let options = SqliteConnectOptions::from_str(&url)
            .unwrap()
            .create_if_missing(true);
        let store = SqliteStore::connect_with(options).await.unwrap();
        let writer = writer_pool(store.pool());
        for pool in [store.pool(), &writer] {
            assert_eq!(pool.options().get_idle_timeout(), None);
            assert_eq!(pool.options().get_max_lifetime(), None);
        }
    }

    /// With no busy wait at all, 16 concurrent write transactions of one store all begin:
    /// they queue for the writer instead of meeting SQLite's lock.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn writers_of_one_store_queue_instead_of_meeting_the_lock() {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}", dir.path().join("w.db").display());
        let options = SqliteStore::connect_options(&url)
            .unwrap()
            .busy_timeout(Duration::ZERO);
        let store = SqliteStore::connect_with(options).await.unwrap();
        sqlx::query("CREATE TABLE _w (i INTEGER)")
            .execute(store.pool())
            .await
            .unwrap();
        let writers: Vec<_> = (0..16)
            .map(|i| {
                let store = store.clone();
                tokio::spawn(async move {
                    let mut tx = store.begin_write().await.unwrap();
                    let insert = sqlx::query("INSERT INTO _w (i) VALUES (?1)").bind(i);
                    insert.execute(&mut *tx).await.unwrap();
                    tx.commit().await.unwrap();
                })
            })
            .collect();
        for writer in writers {
            writer.await.unwrap();
        }
        let n: i64 = sqlx::query_scalar("SELECT count(*) FROM _w")
            .fetch_one(store.pool())
            .await
            .unwrap();
        assert_eq!(n, 16);
        store.close().await;
    }

    async fn store_in(dir: &tempfile::TempDir) -> SqliteStore {
        let url = format!("sqlite://{}", dir.path().join("g.db").display());
        SqliteStore::connect(&url).await.unwrap()
    }

    /// A claim of a scope of its own (an actor of its own).
    fn claim_request(actor: &str) -> idemkey_core::ClaimRequest {
        idemkey_core::testkit::request_for(actor, "create-note", "{}")
    }

    /// A claim commits without holding the writer through its sync: while syncs are held
    /// off, the claim does not return, and an application's write transaction begins and
    /// commits meanwhile, at the configured `synchronous` level. Once syncs resume, one sync
    /// that began after both claims' commits returns them. Without group commit the claims
    /// would return before any sync ran (each commit syncing itself, holding the writer).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn claims_share_a_sync_that_begins_after_them_and_free_the_writer_meanwhile() {
        use idemkey_core::{Store, TryClaim};

        let dir = tempfile::tempdir().unwrap();
        let store = store_in(&dir).await;
        let flush = store.settings.grouping.flush().expect("group commit is on");
        let (syncs, taken) = flush.counts();
        let held = flush.hold().await;
        let claims: Vec<_> = ["k1", "k2"]
            .into_iter()
            .map(|key| {
                let store = store.clone();
                tokio::spawn(async move { store.try_claim(&claim_request(key)).await })
            })
            .collect();
        // Both claims have committed and wait for a sync, which is held off.
        tickets(flush, taken, 2).await;
        let visible: i64 = sqlx::query_scalar("SELECT count(*) FROM idemkey_records")
            .fetch_one(store.pool())
            .await
            .unwrap();
        assert_eq!(visible, 2, "both claims committed");
        assert!(
            claims.iter().all(|claim| !claim.is_finished()),
            "they wait for a sync"
        );

        let mut tx = store.begin_write().await.unwrap();
        let level: i64 = sqlx::query_scalar("PRAGMA synchronous")
            .fetch_one(&mut *tx)
            .await
            .unwrap();
        assert_eq!(level, 2, "the application's transaction commits at FULL");
        tx.commit().await.unwrap();

        drop(held);
        for claim in claims {
            assert!(matches!(
                claim.await.unwrap().unwrap(),
                TryClaim::Claimed(_)
            ));
        }
        assert_eq!(flush.counts().0, syncs + 1, "one sync covered both");
        store.close().await;
    }

    /// A deferred claim (the layer's) returns without a sync, syncs held off or not; its
    /// flush comes with `flush_claim`, which waits for a sync that begins after the call.
    /// Without the deferral the claim would not return while syncs are held off.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_deferred_claim_waits_for_no_sync_until_its_flush_is_asked_for() {
        use idemkey_core::{ClaimFlush, Store, TryClaim};

        let dir = tempfile::tempdir().unwrap();
        let store = store_in(&dir).await;
        let flush = store.settings.grouping.flush().expect("group commit is on");
        let (syncs, taken) = flush.counts();
        let held = flush.hold().await;
        let request = claim_request("deferred").flush(ClaimFlush::Deferred);
        let claimed = tokio::time::timeout(Duration::from_secs(30), store.try_claim(&request))
            .await
            .expect("a deferred claim waits for no sync")
            .unwrap();
        let TryClaim::Claimed(claim) = claimed else {
            panic!("granted");
        };
        assert_eq!(flush.counts(), (syncs, taken), "no ticket taken, no sync");
        let flushing = tokio::spawn({
            let (store, claim) = (store.clone(), claim.clone());
            async move { store.flush_claim(&claim).await }
        });
        tickets(flush, taken, 1).await;
        assert!(!flushing.is_finished(), "the flush waits for a sync");
        drop(held);
        flushing.await.unwrap().unwrap();
        assert_eq!(flush.counts().0, syncs + 1, "one sync");
        store.close().await;
    }

    /// A claim of its own scope, granted.
    async fn granted(store: &SqliteStore, actor: &str) -> idemkey_core::Claim {
        use idemkey_core::{Store, TryClaim};
        match store.try_claim(&claim_request(actor)).await.unwrap() {
            TryClaim::Claimed(claim) => claim,
            other => panic!("not granted: {other:?}"),
        }
    }

    /// Waits until `n` more tickets than `taken` are taken: that many writes or reads wait
    /// for a sync.
    async fn tickets(flush: &group::GroupFlush, taken: u64, n: u64) {
        let waiting = async {
            while flush.counts().1 < taken + n {
                tokio::task::yield_now().await;
            }
        };
        tokio::time::timeout(Duration::from_secs(30), waiting)
            .await
            .expect("they wait for a sync");
    }

    /// The handler's transaction of lease mode's transactional layer commits with its
    /// record's completion without holding the writer through its sync: while syncs are
    /// held off, `complete_in` does not return, and the writer serves another transaction
    /// meanwhile. Without the grouping the commit would sync itself, holding the writer, and
    /// return before any grouped sync ran.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_grouped_transaction_frees_the_writer_and_returns_after_its_sync() {
        use idemkey_core::StoredResponse;

        let dir = tempfile::tempdir().unwrap();
        let store = store_in(&dir).await;
        let claim = granted(&store, "tx").await;
        let flush = store.settings.grouping.flush().expect("group commit is on");
        let (syncs, taken) = flush.counts();
        let held = flush.hold().await;
        let completing = tokio::spawn({
            let store = store.clone();
            async move {
                let tx = store.begin_grouped_write().await?;
                let stored = StoredResponse::new(201, "{}");
                store.complete_in(tx, &claim, &stored).await
            }
        });
        tickets(flush, taken, 1).await;
        assert!(!completing.is_finished(), "it waits for a sync");
        let mut other = store.begin_write().await.unwrap();
        sqlx::query("SELECT 1").execute(&mut *other).await.unwrap();
        other.commit().await.unwrap();

        drop(held);
        completing.await.unwrap().unwrap();
        assert_eq!(flush.counts().0, syncs + 1, "one sync");
        store.close().await;
    }

    /// A completion's record is replayed only once it is on disk: a lookup that reads it
    /// before its sync waits for a sync that began after the read. Once one has, lookups
    /// cost no sync while nothing is written. Without the wait the lookup would return the
    /// record while its sync is held off: an answer a power cut could take back.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_completed_record_is_replayed_only_once_a_sync_covers_it() {
        use idemkey_core::{RecordState, Store, StoredResponse};

        let dir = tempfile::tempdir().unwrap();
        let store = store_in(&dir).await;
        let claim = granted(&store, "replayed").await;
        let flush = store.settings.grouping.flush().expect("group commit is on");
        let (syncs, taken) = flush.counts();
        let held = flush.hold().await;
        let completing = tokio::spawn({
            let (store, claim) = (store.clone(), claim.clone());
            async move {
                let stored = StoredResponse::new(201, "{}");
                store.complete(&claim, &stored).await
            }
        });
        tickets(flush, taken, 1).await;
        let looking = tokio::spawn({
            let (store, scope) = (store.clone(), claim.scope.clone());
            async move { store.lookup(&scope).await }
        });
        tickets(flush, taken, 2).await;
        assert!(!looking.is_finished(), "the replay waits for a sync");

        drop(held);
        completing.await.unwrap().unwrap();
        let record = looking.await.unwrap().unwrap().expect("the record");
        assert!(matches!(record.state, RecordState::Completed(_)));
        assert_eq!(flush.counts().0, syncs + 1, "one sync covered both");
        store.lookup(&claim.scope).await.unwrap();
        assert_eq!(
            flush.counts().0,
            syncs + 1,
            "nothing written since: no sync"
        );
        store.close().await;
    }

    /// A completed record that another process committed and has not synced yet is synced
    /// by its reader, without waiting for the writer's own sync: here a second store on the
    /// same file, whose syncs are held off. Without it, the reader would replay a record that
    /// is in no one's sync.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_record_another_process_has_not_synced_is_synced_by_its_reader() {
        use idemkey_core::{RecordState, Store, StoredResponse};

        let dir = tempfile::tempdir().unwrap();
        let (reader, writer) = (store_in(&dir).await, store_in(&dir).await);
        let claim = granted(&writer, "elsewhere").await;
        reader.lookup(&claim.scope).await.unwrap();
        let own = reader
            .settings
            .grouping
            .flush()
            .expect("group commit is on");
        let theirs = writer
            .settings
            .grouping
            .flush()
            .expect("group commit is on");
        let (syncs, their_taken) = (own.counts().0, theirs.counts().1);
        let held = theirs.hold().await;
        let completing = tokio::spawn({
            let (writer, claim) = (writer.clone(), claim.clone());
            async move {
                let stored = StoredResponse::new(201, "{}");
                writer.complete(&claim, &stored).await
            }
        });
        tickets(theirs, their_taken, 1).await;

        let record = reader
            .lookup(&claim.scope)
            .await
            .unwrap()
            .expect("the record");
        assert!(matches!(record.state, RecordState::Completed(_)));
        assert_eq!(own.counts().0, syncs + 1, "the reader synced");
        assert!(
            !completing.is_finished(),
            "the writer's own sync is still held off"
        );
        drop(held);
        completing.await.unwrap().unwrap();
        reader.close().await;
        writer.close().await;
    }

    /// The sync level of the writer's connection, as a write of the store or the
    /// application's transaction on it sees it.
    async fn writer_level(store: &SqliteStore, in_transaction: bool) -> i64 {
        let level = sqlx::query_scalar("PRAGMA synchronous");
        if in_transaction {
            let mut tx = store.begin_write().await.unwrap();
            return level.fetch_one(&mut *tx).await.unwrap();
        }
        level
            .fetch_one(&mut *store.write_conn().await.unwrap())
            .await
            .unwrap()
    }

    /// Grouped writes in a row leave the writer's connection relaxed, without a `PRAGMA`
    /// each; every other write on it, the store's or the application's transaction, gets it
    /// back at the configured level first. Without the level put back, the completion's
    /// write would commit at `NORMAL` (level 1) and return before the disk has it.
    #[tokio::test]
    async fn grouped_writes_stay_relaxed_and_any_other_write_is_at_the_configured_level() {
        use idemkey_core::Store;

        let dir = tempfile::tempdir().unwrap();
        let store = store_in(&dir).await;
        let grouping = &store.settings.grouping;
        store.try_claim(&claim_request("a")).await.unwrap();
        store.try_claim(&claim_request("b")).await.unwrap();
        assert_eq!(
            grouping.take_relax(),
            None,
            "still relaxed after two claims"
        );
        assert_eq!(writer_level(&store, false).await, 2, "a write of the store");
        store.try_claim(&claim_request("c")).await.unwrap();
        assert_eq!(writer_level(&store, true).await, 2, "a transaction");
        store.close().await;
    }

    /// Under per-actor caps a claim is a transaction of its own (the claim and the check),
    /// grouped all the same: relaxed before it begins, as SQLite refuses to change the sync
    /// level inside a transaction.
    #[tokio::test]
    async fn a_claim_under_caps_is_grouped_too() {
        use idemkey_core::{ActorCaps, Store, TryClaim};

        let dir = tempfile::tempdir().unwrap();
        let store = store_in(&dir)
            .await
            .with_actor_caps(ActorCaps::new().max_records(10));
        let flush = store.settings.grouping.flush().expect("group commit is on");
        let (syncs, _) = flush.counts();
        let claimed = store.try_claim(&claim_request("capped")).await.unwrap();
        assert!(matches!(claimed, TryClaim::Claimed(_)));
        assert_eq!(flush.counts().0, syncs + 1, "its own sync");
        store.close().await;
    }

    /// A failed sync stops the store's writes for good: the claim it covered fails
    /// `store-unavailable`, and so does every later write (a claim, a completion, the
    /// application's transaction), although syncs succeed again; reads go on. A store opened
    /// afresh on the file, as after a restart, writes again. Without the stop, the claim
    /// after the failure would be granted on a WAL that may have lost frames.
    #[tokio::test]
    async fn a_failed_sync_refuses_every_later_write() {
        use idemkey_core::{Error, Store, StoredResponse, TryClaim};

        let dir = tempfile::tempdir().unwrap();
        let store = store_in(&dir).await;
        let flush = store.settings.grouping.flush().expect("group commit is on");
        let TryClaim::Claimed(held) = store.try_claim(&claim_request("before")).await.unwrap()
        else {
            panic!("the first claim is granted");
        };
        flush.fail_syncs(true);
        let failed = store.try_claim(&claim_request("failed")).await;
        assert!(matches!(failed, Err(Error::Unavailable(_))), "{failed:?}");
        flush.fail_syncs(false);
        let later = store.try_claim(&claim_request("later")).await;
        assert!(matches!(later, Err(Error::Unavailable(_))), "{later:?}");
        let stored = StoredResponse::new(201, "{}");
        let completed = store.complete(&held, &stored).await;
        assert!(
            matches!(completed, Err(Error::Unavailable(_))),
            "{completed:?}"
        );
        assert!(matches!(
            store.begin_write().await,
            Err(Error::Unavailable(_))
        ));
        let record = store.lookup(&held.scope).await.unwrap();
        assert!(record.is_some(), "reads go on");
        let n: i64 = sqlx::query_scalar("SELECT count(*) FROM idemkey_records")
            .fetch_one(store.pool())
            .await
            .unwrap();
        assert_eq!(n, 2, "the claim after the failure was never written");
        store.close().await;

        let reopened = store_in(&dir).await;
        let claimed = reopened.try_claim(&claim_request("later")).await.unwrap();
        assert!(matches!(claimed, TryClaim::Claimed(_)));
        reopened.close().await;
    }

    /// A database that is not a file in WAL mode keeps every commit syncing itself.
    #[tokio::test]
    async fn group_commit_needs_a_wal_file() {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}", dir.path().join("d.db").display());
        let options = SqliteStore::connect_options(&url)
            .unwrap()
            .journal_mode(SqliteJournalMode::Delete);
        let store = SqliteStore::connect_with(options).await.unwrap();
        assert!(store.settings.grouping.flush().is_none());
        store.close().await;
    }

    /// A pool of one connection (the only way to use `sqlite::memory:`) is its own writer.
    #[tokio::test]
    async fn a_one_connection_pool_is_its_own_writer() {
        let pool = SqlitePoolOptions::new()
            .max_connections(1)
            .connect("sqlite::memory:")
            .await
            .unwrap();
        let store = SqliteStore::from_pool(pool);
        store.migrate().await.unwrap();
        let mut tx = store.begin_write().await.unwrap();
        let n: i64 = sqlx::query_scalar("SELECT count(*) FROM idemkey_records")
            .fetch_one(&mut *tx)
            .await
            .unwrap();
        assert_eq!(n, 0);
    }
}
