//! [`SqlxStore`]: the lease-mode [`Store`] over any [`Backend`].

use std::sync::Arc;
use std::time::Duration;

use idemkey_core::{
    ActorCaps, ActorForgotten, Claim, ClaimFlush, ClaimRequest, DerivedKeys, Error, Record,
    RecordState, Result, Scope, Store, StoredResponse, TryClaim,
};
use sqlx::pool::PoolConnection;
use sqlx::{Pool, Transaction};
use tokio::sync::OnceCell;

use crate::Backend;
use crate::atomic::coalescing::LocalClaims;
use crate::cache::TtlCache;
use crate::error::store_error;
use crate::failpoints::Point;
use crate::readers::Readers;
use crate::usage::Usages;

/// How many times lease mode's claim runs when the live record it met is gone before it can
/// be read: each time means another request removed that record in between.
const CLAIM_ATTEMPTS: usize = 3;

/// How many of an actor's records one statement of [`Store::forget_actor`] deletes: each
/// batch is a short write of its own, so requests queue behind none for long.
const FORGET_BATCH: u32 = 500;

/// A store of idempotency records in a SQL database, sharing the application's pool.
///
/// Use it through its aliases, [`crate::SqliteStore`], [`crate::PgStore`] and `MySqlStore`.
/// Lease mode goes through [`Store`]; atomic mode through [`SqlxStore::begin_atomic`] and
/// [`SqlxStore::execute`].
///
/// Lookups (every replay's read) and, on PostgreSQL, lease mode's claims run on up to eight
/// connections the store keeps beside the pool: opened by the pool, then detached from it, so
/// that a statement that ended gives its connection back without the round trip sqlx makes
/// to test every pooled connection it takes back. On PostgreSQL and MySQL, count them among
/// the server's connections.
#[derive(Debug)]
pub struct SqlxStore<DB: Backend> {
    pub(crate) pool: Pool<DB>,
    /// Where write transactions and the store's own writes take their connection: `pool`,
    /// except on SQLite (see [`Backend::writer_pool`]).
    pub(crate) writer: Pool<DB>,
    pub(crate) settings: DB::Settings,
    /// Atomic-mode claims in progress in this process, shared by clones; `None` when
    /// duplicates are not coalesced (see [`SqlxStore::coalescing`]).
    pub(crate) local: Option<Arc<LocalClaims>>,
    /// The derived-key secret once read from the database, shared by clones.
    secret: Arc<OnceCell<Arc<[u8]>>>,
    /// Whether this process's first heartbeat swept long-dead owners' rows, shared by clones.
    owners_swept: Arc<std::sync::atomic::AtomicBool>,
    /// Completed records kept in the process, if enabled (see
    /// [`SqlxStore::with_replay_cache`]); shared by clones.
    pub(crate) cache: Option<Arc<TtlCache>>,
    /// Per-actor caps checked as a record is created (see [`SqlxStore::with_actor_caps`]).
    caps: ActorCaps,
    /// The actors' usage as last read for the caps, shared by clones.
    usages: Arc<Usages>,
    /// The connections kept for lookups, shared by clones.
    readers: Arc<Readers<DB>>,
    #[cfg(feature = "failpoints")]
    pub(crate) failpoints: crate::failpoints::Failpoints,
}

impl<DB: Backend> Clone for SqlxStore<DB> {
    fn clone(&self) -> Self {
        Self {
            pool: self.pool.clone(),
            writer: self.writer.clone(),
            settings: self.settings.clone(),
            local: self.local.clone(),
            secret: self.secret.clone(),
            owners_swept: self.owners_swept.clone(),
            cache: self.cache.clone(),
            caps: self.caps,
            usages: self.usages.clone(),
            readers: self.readers.clone(),
            #[cfg(feature = "failpoints")]
            failpoints: self.failpoints.clone(),
        }
    }
}

impl<DB: Backend> SqlxStore<DB> {
    /// A store on an existing pool, whose schema must be migrated (see `migrate`).
    pub fn from_pool(pool: Pool<DB>) -> Self {
        let settings = DB::default_settings(&pool);
        Self {
            writer: DB::writer_pool(&pool),
            settings,
            pool,
            local: Some(Arc::default()),
            secret: Arc::default(),
            owners_swept: Arc::default(),
            cache: None,
            caps: ActorCaps::new(),
            usages: Arc::default(),
            readers: Arc::default(),
            #[cfg(feature = "failpoints")]
            failpoints: Default::default(),
        }
    }

    /// The same store with an in-process cache of completed records, so that replays of a
    /// hot key skip the database (behaviour [§7](https://docs.rs/idemkey/latest/idemkey/behaviour/index.html#7-replay)). Off by default.
    ///
    /// A completed record does not change until it is forgotten or expires. `forget` through
    /// this store (or a clone) takes effect at once; a `forget` by another process or
    /// instance, and the record's expiry, reach this cache within `ttl`: until then a retry
    /// may still be replayed (or, with another body, refused) from the copy. Nothing else is
    /// cached: claims, takeovers and every execution are decided by the database. `max_bytes`
    /// bounds the memory the copies take (stored responses, keys and bookkeeping).
    #[must_use]
    pub fn with_replay_cache(mut self, ttl: Duration, max_bytes: u64) -> Self {
        self.cache = Some(Arc::new(TtlCache::new(ttl, max_bytes)));
        self
    }

    /// The same store with per-actor caps on live records and stored bytes (behaviour [§11](https://docs.rs/idemkey/latest/idemkey/behaviour/index.html#11-security)),
    /// none by default. A request that would create a new record for an actor at a cap is
    /// refused with [`Error::ActorCap`] (429) in both modes, before or without executing:
    /// the check is made as the record is created (against a fresh reading, else in the
    /// transaction that creates the record, which it rolls back). A retry answered from an
    /// existing record is never refused.
    ///
    /// The check reads the actor's usage (a query over its live records, whose cost grows
    /// with them) at most once a second per actor in each process; in between, the process
    /// counts the records it creates itself on top of that reading. So an actor may pass
    /// the record cap by what other processes create for it within a second and, on
    /// PostgreSQL and MySQL, where concurrent requests do not see each other's uncommitted
    /// records, by the number of its requests in flight at once; records that expire are
    /// counted until the next reading.
    #[must_use]
    pub fn with_actor_caps(mut self, caps: ActorCaps) -> Self {
        self.caps = caps;
        self
    }

    /// Whether records are created under per-actor caps.
    pub(crate) fn has_caps(&self) -> bool {
        !self.caps.is_unlimited()
    }

    /// Checks the per-actor caps on `conn`, inside the transaction creating a record for
    /// `request` whose stored response (if stored with it) is `stored`.
    pub(crate) async fn within_caps(
        &self,
        conn: &mut DB::Connection,
        request: &ClaimRequest,
        stored: Option<&StoredResponse>,
    ) -> Result<()> {
        if !self.has_caps() {
            return Ok(());
        }
        let (actor, new_bytes) = (
            &request.scope.actor,
            stored.map_or(0, |stored| stored.encoded_len() as u64),
        );
        if let Some(checked) = self.usages.check(&self.caps, actor, new_bytes) {
            return checked;
        }
        let usage = DB::actor_usage(conn, actor).await?;
        let checked = self.caps.check(&usage, new_bytes);
        // A refusal is kept too: an actor at its cap must not cost a reading per request.
        self.usages.keep(actor, usage, checked.is_ok(), new_bytes);
        checked
    }

    /// Counts a response just stored in `claim`'s record towards its actor's byte cap.
    pub(crate) fn stored(&self, claim: &Claim, response: &StoredResponse) {
        if self.has_caps() {
            let bytes = response.encoded_len() as u64;
            self.usages.stored(&claim.scope.actor, bytes);
        }
    }

    /// Lease mode's claim as one statement that commits on its own: a transaction around it
    /// would add a BEGIN and a COMMIT round trip. A lost reply is not `OutcomeUnknown` here:
    /// at most a claim committed, nothing ran, and the claim's lease runs out.
    async fn try_claim_plain(&self, request: &ClaimRequest) -> Result<TryClaim> {
        if DB::CLAIM_ON_KEPT_CONNECTION {
            return self.try_claim_kept(request).await;
        }
        let mut conn = self.grouped_conn().await?;
        let outcome = claim_attempts::<DB>(&mut conn.0, request).await;
        self.claimed(conn, outcome, request.flush).await
    }

    /// [`Self::try_claim_plain`] on a connection kept for lookups, where the backend groups no
    /// claims: a claim that ended leaves its connection idle, so it is kept again without
    /// sqlx's test. One that failed closes its connection and fails the request, as on a
    /// pooled connection; it is not made again (a claim whose reply was lost may have
    /// committed).
    async fn try_claim_kept(&self, request: &ClaimRequest) -> Result<TryClaim> {
        DB::writable(&self.settings)?;
        let mut conn = self
            .readers
            .reader(&self.pool)
            .await
            .map_err(store_error::<DB>)?;
        let outcome = claim_attempts::<DB>(&mut conn, request).await;
        if matches!(outcome, Ok(_) | Err(Error::Contention)) {
            conn.done();
        }
        outcome
    }

    /// Lease mode's claim under per-actor caps: the claim and the check in one short write
    /// transaction, so a refused claim is never visible to other requests.
    async fn try_claim_capped(&self, request: &ClaimRequest) -> Result<TryClaim> {
        let (mut tx, relaxed) = self.begin_relaxed().await?;
        let outcome = DB::try_claim(&mut tx, request).await?;
        if matches!(outcome, TryClaim::Claimed(_)) {
            // On a refusal the transaction rolls back as it drops.
            self.within_caps(&mut tx, request, None).await?;
        }
        // Like the unconfined claim, a lost reply here is not `OutcomeUnknown`: nothing ran.
        tx.commit().await.map_err(store_error::<DB>)?;
        if relaxed && request.flush == ClaimFlush::OnClaim {
            DB::flush(&self.settings).await?;
        }
        Ok(outcome)
    }

    /// Lease mode's claim, with or without caps; a record it met is not yet [`Self::seen`].
    async fn claim_unseen(&self, request: &ClaimRequest) -> Result<TryClaim> {
        // The hook first: a paused request must not hold the writer from the others.
        self.hit(Point::BeforeClaim).await?;
        if self.has_caps() {
            // A fresh reading that has room reserves the record, so the claim needs no
            // transaction around it; otherwise the caps are read and checked with the claim.
            let actor = &request.scope.actor;
            let Some(Ok(())) = self.usages.check(&self.caps, actor, 0) else {
                return self.try_claim_capped(request).await;
            };
            let outcome = self.try_claim_plain(request).await;
            if !matches!(outcome, Ok(TryClaim::Claimed(_))) {
                self.usages.unreserve(actor);
            }
            return outcome;
        }
        self.try_claim_plain(request).await
    }

    /// The scope's completed record from the replay cache, if enabled and fresh.
    pub(crate) fn cached(&self, scope: &Scope) -> Option<Arc<Record>> {
        self.cache.as_ref()?.get(scope)
    }

    /// Keeps a record just read or committed in the replay cache, if enabled (only completed
    /// records are kept).
    pub(crate) fn remember(&self, scope: &Scope, record: &Record) {
        if let Some(cache) = &self.cache {
            cache.remember(scope, record);
        }
    }

    /// The scope's record from the database on `conn`, kept in the replay cache if
    /// completed. Call [`Self::cached`] first: this always asks the database.
    pub(crate) async fn lookup_on(
        &self,
        conn: &mut DB::Connection,
        scope: &Scope,
    ) -> Result<Option<Record>> {
        let record = DB::lookup(conn, scope).await?;
        if let Some(record) = &record {
            self.seen(record).await?;
            self.remember(scope, record);
        }
        Ok(record)
    }

    /// Returns once `record`, just read from the database, may be relied on: if it is
    /// completed, once every commit the read could have seen is on disk
    /// ([`Backend::flush_seen`]). A claim in flight promises nothing, and needs nothing.
    pub(crate) async fn seen(&self, record: &Record) -> Result<()> {
        match record.state {
            RecordState::Completed(_) => DB::flush_seen(&self.settings).await,
            _ => Ok(()),
        }
    }

    /// [`Self::seen`] for the record a claim met.
    pub(crate) async fn seen_by_claim(&self, claimed: TryClaim) -> Result<TryClaim> {
        if let TryClaim::Existing(record) = &claimed {
            self.seen(record).await?;
        }
        Ok(claimed)
    }

    /// The same store, coalescing atomic-mode duplicates in this process or not (on by
    /// default).
    ///
    /// Coalesced, a request whose scope another request of this store (or a clone) is
    /// claiming waits for it, bounded like a claim waiting on the database, instead of
    /// queueing for the database only to find the record: it answers from the record the
    /// first one committed (or in flight with it, or looks again if it ended without one), so
    /// duplicates replay as soon as the first one commits. Off, every duplicate goes to the database,
    /// which is the arbiter either way (and always across processes).
    #[must_use]
    pub fn coalescing(mut self, on: bool) -> Self {
        self.local = on.then(|| self.local.take().unwrap_or_default());
        self
    }

    /// The same store with a hook awaited at every [`crate::failpoints::Point`].
    #[cfg(feature = "failpoints")]
    #[doc(hidden)]
    #[must_use]
    pub fn with_failpoints(mut self, hook: crate::failpoints::Hook) -> Self {
        self.failpoints = crate::failpoints::Failpoints::new(hook);
        self
    }

    /// Awaits the failpoint hook, if the feature is on and a hook is set.
    #[allow(clippy::unused_async)]
    pub(crate) async fn hit(&self, _point: Point) -> Result<()> {
        #[cfg(feature = "failpoints")]
        return self.failpoints.hit(_point).await;
        #[cfg(not(feature = "failpoints"))]
        Ok(())
    }

    /// The pool, shared with the application's own queries.
    pub fn pool(&self) -> &Pool<DB> {
        &self.pool
    }

    /// Opens a write transaction the way the backend requires (SQLite: `BEGIN IMMEDIATE`, on
    /// a connection of its own that the process's writers queue for, so they wait in line
    /// rather than in SQLite's busy handler).
    ///
    /// On SQLite, refused with `Unavailable` once a sync failed (until the process restarts).
    pub async fn begin_write(&self) -> Result<Transaction<'static, DB>> {
        DB::writable(&self.settings)?;
        DB::begin_write(&self.writer, &self.settings).await
    }

    /// A write transaction whose commit may return before the disk has it, so that it never
    /// holds the writer through a sync: [`Self::begin_write`] elsewhere than on SQLite with
    /// group commit (a file in WAL mode opened by [`crate::SqliteStore::connect`]). Commit it
    /// through [`Self::complete_in`], or await [`Self::flush`] after its commit before
    /// answering for what it wrote; until then, a power cut may take it back.
    pub async fn begin_grouped_write(&self) -> Result<Transaction<'static, DB>> {
        Ok(self.begin_relaxed().await?.0)
    }

    /// [`Self::write_conn`] for writes that may return before the disk has them, so that none
    /// holds the writer through a sync (SQLite with group commit; elsewhere the same as
    /// `write_conn`). Give the connection back, then await [`Self::flush`] before answering
    /// for what was written on it.
    pub async fn grouped_write_conn(&self) -> Result<PoolConnection<DB>> {
        Ok(self.grouped_conn().await?.0)
    }

    /// [`Self::begin_grouped_write`], and whether its commit is relaxed (SQLite does not let
    /// a transaction change its sync level, so it is relaxed before it begins).
    async fn begin_relaxed(&self) -> Result<(Transaction<'static, DB>, bool)> {
        let (conn, relaxed) = self.grouped_conn().await?;
        if relaxed {
            return Ok((DB::begin_write_with(conn).await?, true));
        }
        drop(conn);
        Ok((self.begin_write().await?, false))
    }

    /// Returns once every write of the store committed before the call is on disk, sharing
    /// the sync with concurrent callers: what a commit of [`Self::begin_grouped_write`] needs
    /// before it is relied on. At once where every commit waits for the disk itself.
    ///
    /// On SQLite, a failed sync stops the store's writes until the process restarts, and
    /// this fails `Unavailable`.
    pub async fn flush(&self) -> Result<()> {
        DB::flush(&self.settings).await
    }

    /// Closes the pool, the connections kept for lookups and, on SQLite, the writer's
    /// connection.
    pub async fn close(&self) {
        self.readers.close().await;
        self.writer.close().await;
        self.pool.close().await;
    }

    /// The writer's connection for one of the store's short writes that another request
    /// may read before it is on disk (a claim, a takeover, a release): such a read answers
    /// `request-in-flight` or `key-reused`, or claims again behind a sync that covers the
    /// earlier write. Relaxed where the backend groups such commits
    /// ([`Backend::relax`]). Pass it to [`Self::grouped`] with what was written.
    async fn grouped_conn(&self) -> Result<(PoolConnection<DB>, bool)> {
        DB::writable(&self.settings)?;
        let mut conn = self.writer.acquire().await.map_err(store_error::<DB>)?;
        let relaxed = DB::relax(&mut conn, &self.settings).await?;
        Ok((conn, relaxed))
    }

    /// Gives the writer back first, so that the next write proceeds while this one waits
    /// for the disk; then, if the write was relaxed, waits for the flush that covers it.
    async fn grouped<T>(
        &self,
        (conn, relaxed): (PoolConnection<DB>, bool),
        written: Result<T>,
    ) -> Result<T> {
        drop(conn);
        let written = written?;
        if relaxed {
            DB::flush(&self.settings).await?;
        }
        Ok(written)
    }

    /// [`Self::grouped`] for a claim: its flush is left to [`Store::flush_claim`] when the
    /// request deferred it.
    async fn claimed<T>(
        &self,
        (conn, relaxed): (PoolConnection<DB>, bool),
        written: Result<T>,
        flush: ClaimFlush,
    ) -> Result<T> {
        let relaxed = relaxed && flush == ClaimFlush::OnClaim;
        self.grouped((conn, relaxed), written).await
    }

    pub(crate) async fn conn(&self) -> Result<PoolConnection<DB>> {
        self.pool.acquire().await.map_err(store_error::<DB>)
    }

    /// The scope's record from the database, read on a connection kept for lookups
    /// (`readers.rs`). A kept connection may have died while idle (a restarted server, a
    /// connection the server dropped): a read that fails on one runs once more, on a
    /// connection of the pool.
    pub(crate) async fn lookup_kept(&self, scope: &Scope) -> Result<Option<Record>> {
        let mut reader = self
            .readers
            .reader(&self.pool)
            .await
            .map_err(store_error::<DB>)?;
        match self.lookup_on(&mut reader, scope).await {
            Ok(record) => {
                reader.done();
                Ok(record)
            }
            Err(_) if reader.was_kept() => {
                drop(reader);
                self.lookup_on(&mut *self.conn().await?, scope).await
            }
            Err(error) => Err(error),
        }
    }

    /// A connection for writes outside a transaction: the store's own (complete, release,
    /// sweep...) and the application's. On SQLite it is the store's writer, so the process's
    /// writers queue in order instead of sleeping in SQLite's busy handler; elsewhere a
    /// pooled connection. On SQLite, do not call it while holding a transaction of
    /// [`Self::begin_write`]: both take the writer, so it would wait out the pool's acquire
    /// timeout and fail.
    ///
    /// On SQLite, refused with `Unavailable` once a sync failed (until the process restarts).
    pub async fn write_conn(&self) -> Result<PoolConnection<DB>> {
        DB::writable(&self.settings)?;
        let mut conn = self.writer.acquire().await.map_err(store_error::<DB>)?;
        DB::restore_sync(&mut conn, &self.settings).await?;
        Ok(conn)
    }
}

/// Lease mode's claim on `conn`, again while the live record it met is gone before it can be
/// read (each time means another request removed that record in between).
async fn claim_attempts<DB: Backend>(
    conn: &mut DB::Connection,
    request: &ClaimRequest,
) -> Result<TryClaim> {
    let mut outcome = Err(Error::Contention);
    for _ in 0..CLAIM_ATTEMPTS {
        outcome = DB::try_claim(conn, request).await;
        if !matches!(outcome, Err(Error::Contention)) {
            break;
        }
    }
    outcome
}

impl<DB: Backend> Store for SqlxStore<DB> {
    async fn lookup(&self, scope: &Scope) -> Result<Option<Record>> {
        if let Some(record) = self.cached(scope) {
            return Ok(Some(Record::clone(&record)));
        }
        self.lookup_kept(scope).await
    }

    async fn try_claim(&self, request: &ClaimRequest) -> Result<TryClaim> {
        let claimed = self.claim_unseen(request).await?;
        self.seen_by_claim(claimed).await
    }

    async fn reclaim(&self, request: &ClaimRequest, seen: &Record) -> Result<Option<Claim>> {
        let mut conn = self.grouped_conn().await?;
        let reclaimed = DB::reclaim(&mut conn.0, request, seen).await;
        self.claimed(conn, reclaimed, request.flush).await
    }

    async fn flush_claim(&self, _claim: &Claim) -> Result<()> {
        // Every commit before this call, the claim's included: a deferred commit returns
        // before its flush, never before its record is in the log (SQLite's WAL,
        // PostgreSQL's), which is flushed in order.
        DB::flush_claim(self).await
    }

    async fn complete(&self, claim: &Claim, response: &StoredResponse) -> Result<()> {
        // The hook first: a paused request must not hold the writer from the others.
        self.hit(Point::BeforeComplete).await?;
        // Grouped: whoever reads the record before its sync waits for one that covers it
        // (`Self::seen`).
        let mut conn = self.grouped_conn().await?;
        let completed = DB::complete(&mut conn.0, claim, response).await;
        self.grouped(conn, completed).await?;
        self.stored(claim, response);
        Ok(())
    }

    async fn release(&self, claim: &Claim) -> Result<()> {
        self.hit(Point::BeforeRelease).await?;
        let mut conn = self.grouped_conn().await?;
        let released = DB::release(&mut conn.0, claim).await;
        self.grouped(conn, released).await
    }

    async fn discard(&self, claim: &Claim) -> Result<()> {
        self.hit(Point::BeforeRelease).await?;
        let mut conn = self.grouped_conn().await?;
        let discarded = DB::discard(&mut conn.0, claim).await;
        self.grouped(conn, discarded).await
    }

    async fn extend(&self, claim: &mut Claim) -> Result<()> {
        // Not grouped, like the heartbeat: a renewal is on a deadline, and a grouped write
        // may wait for a sync already under way before its own.
        DB::extend(&mut *self.write_conn().await?, claim).await
    }

    async fn beat(&self, owner: idemkey_core::OwnerId, grace: std::time::Duration) -> Result<()> {
        let first = !self
            .owners_swept
            .swap(true, std::sync::atomic::Ordering::Relaxed);
        // Not grouped: a heartbeat is on a deadline (the process stops trusting its claims
        // when one is late), and a grouped write may wait for a sync already under way before
        // its own.
        DB::beat(&mut *self.write_conn().await?, owner, grace, first).await
    }

    async fn forget(&self, scope: &Scope) -> Result<bool> {
        let forgotten = DB::forget(&mut *self.write_conn().await?, scope).await;
        self.usages.forget(&scope.actor);
        if let Some(cache) = &self.cache {
            cache.forget(scope);
        }
        forgotten
    }

    async fn forget_version(&self, scope: &Scope, version: &str) -> Result<bool> {
        let forgotten = DB::forget_version(&mut *self.write_conn().await?, scope, version).await;
        self.usages.forget(&scope.actor);
        if let Some(cache) = &self.cache {
            cache.forget(scope);
        }
        forgotten
    }

    async fn forget_actor(&self, actor: &str) -> Result<ActorForgotten> {
        let mut forgotten = 0;
        loop {
            let deleted =
                DB::forget_actor(&mut *self.write_conn().await?, actor, FORGET_BATCH).await;
            // Whatever the outcome: a batch that failed after its deletion must not leave a copy.
            if let Some(cache) = &self.cache {
                cache.forget_actor(actor);
            }
            self.usages.forget(actor);
            let deleted = deleted?;
            forgotten += deleted;
            if deleted < u64::from(FORGET_BATCH) {
                break;
            }
        }
        let kept = DB::actor_usage(&mut *self.conn().await?, actor)
            .await?
            .records;
        Ok(ActorForgotten::new(forgotten, kept))
    }

    async fn sweep(&self, batch: u32) -> Result<u64> {
        DB::sweep(&mut *self.write_conn().await?, batch).await
    }

    /// Always kept: see [`SqlxStore::with_actor_caps`].
    fn with_caps(self, caps: ActorCaps) -> Result<Self> {
        Ok(self.with_actor_caps(caps))
    }

    async fn secret(&self) -> Result<Arc<[u8]>> {
        let secret = self
            .secret
            .get_or_try_init(|| async {
                let candidate = DerivedKeys::generate_secret()?;
                let mut conn = self.write_conn().await?;
                let kept = DB::load_secret(&mut conn, &candidate).await?;
                if kept.is_empty() {
                    return Err(Error::Backend(
                        "the stored derived-key secret is empty".into(),
                    ));
                }
                Ok::<_, Error>(Arc::from(kept))
            })
            .await?;
        Ok(secret.clone())
    }
}
