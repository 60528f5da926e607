//! How an atomic claim waits for a concurrent, uncommitted claim of the same scope (behaviour
//! [§8](https://docs.rs/idemkey/latest/idemkey/behaviour/index.html#8-atomic-mode)): bounded by a `lock_timeout` on the claim statement alone, and capped in number.

use std::sync::Arc;
use std::time::Duration;

use idemkey_core::{ClaimRequest, Result, TryClaim};
use sqlx::pool::PoolConnection;
use sqlx::{AssertSqlSafe, Pool, Postgres, SqlSafeStr, Transaction};
use tokio::sync::Semaphore;

use super::error::{is_lock_wait_ended, store_error};
use crate::SqlxStore;
use crate::error::millis;
use crate::failpoints::Point;

/// How long an atomic claim waits for a concurrent claim of the same scope to commit or
/// roll back before answering `request-in-flight`. Defaults to 5 s.
pub const DEFAULT_CLAIM_LOCK_TIMEOUT: Duration = Duration::from_secs(5);

/// The first attempt's bound, taken without a waiter permit: it outlasts a row lock held for
/// a statement or two (a sweep, a duplicate about to replay), and a claim that has no permit
/// holds its pooled connection no longer than this.
const PROBE: Duration = Duration::from_millis(2);

/// The session's own `lock_timeout`, kept for the transaction in a custom setting so the
/// claim can put it back: the business statements keep their ordinary lock waits.
const RESTORE: &str =
    "SELECT set_config('lock_timeout', current_setting('idemkey.lock_timeout'), true)";

/// PostgreSQL settings of a [`crate::PgStore`]: how atomic claims wait for each other.
///
/// Set with [`crate::PgStore::with_claim_lock_timeout`] and
/// [`crate::PgStore::with_max_waiters`]. Clones of a store share one waiter cap.
#[derive(Clone, Debug)]
pub struct PgSettings {
    lock_timeout: Duration,
    max_waiters: usize,
    waiters: Arc<Semaphore>,
}

impl PgSettings {
    /// The defaults for a store on `pool`: a 5 s claim lock timeout, and at most half the
    /// pool's connections (at least one) held by waiting claims.
    pub(crate) fn for_pool(pool: &Pool<Postgres>) -> Self {
        let half = pool.options().get_max_connections() / 2;
        Self::new(
            DEFAULT_CLAIM_LOCK_TIMEOUT,
            usize::try_from(half).unwrap_or(1),
        )
    }

    pub(crate) fn new(lock_timeout: Duration, max_waiters: usize) -> Self {
        let max_waiters = max_waiters.max(1);
        Self {
            lock_timeout,
            max_waiters,
            waiters: Arc::new(Semaphore::new(max_waiters)),
        }
    }

    /// The same settings with another claim lock timeout, sharing the waiter cap.
    pub(crate) fn with_lock_timeout(mut self, lock_timeout: Duration) -> Self {
        self.lock_timeout = lock_timeout;
        self
    }

    /// How long a claim waits for a concurrent claim of its scope.
    pub fn claim_lock_timeout(&self) -> Duration {
        self.lock_timeout
    }

    /// How many claims of this store may wait at once; the next is answered in flight.
    pub fn max_waiters(&self) -> usize {
        self.max_waiters
    }
}

/// Atomic mode's claim on PostgreSQL.
///
/// A first attempt waits only [`PROBE`]. If a concurrent claim still holds the scope, the
/// request takes a waiter permit (none left: in flight) and claims again in a new
/// transaction, waiting up to the claim lock timeout; the permit is held only while waiting.
pub(super) async fn begin_claim(
    store: &SqlxStore<Postgres>,
    request: &ClaimRequest,
    looked_up: Option<PoolConnection<Postgres>>,
) -> Result<Option<(Transaction<'static, Postgres>, TryClaim)>> {
    let conn = match looked_up {
        Some(conn) => conn,
        None => store.conn().await?,
    };
    let mut tx = begin(conn, PROBE).await?;
    store.hit(Point::BeforeClaim).await?;
    if let Some(outcome) = claim(&mut tx, request).await? {
        return Ok(Some((tx, outcome)));
    }
    // A statement that failed aborted the transaction: start a new one.
    tx.rollback().await.map_err(store_error)?;
    let settings = &store.settings;
    let Ok(_permit) = settings.waiters.try_acquire() else {
        tracing::debug!(
            max = settings.max_waiters,
            "claim waiters at their cap: in flight"
        );
        return Ok(None);
    };
    let mut tx = begin(store.conn().await?, settings.lock_timeout).await?;
    if let Some(outcome) = claim(&mut tx, request).await? {
        return Ok(Some((tx, outcome)));
    }
    tx.rollback().await.map_err(store_error)?;
    tracing::debug!(timeout = ?settings.lock_timeout, "claim lock wait ran out: in flight");
    Ok(None)
}

/// Opens a READ COMMITTED transaction on `conn` whose lock waits are bounded by `timeout`
/// until [`claim`] restores the session's bound. One round trip.
async fn begin(
    conn: PoolConnection<Postgres>,
    timeout: Duration,
) -> Result<Transaction<'static, Postgres>> {
    // Zero would mean "wait forever"; PostgreSQL's maximum is i32::MAX ms.
    let ms = millis(timeout).clamp(1, i64::from(i32::MAX));
    let sql = format!(
        "BEGIN ISOLATION LEVEL READ COMMITTED; \
         SELECT set_config('idemkey.lock_timeout', current_setting('lock_timeout'), true); \
         SET LOCAL lock_timeout = '{ms}ms'"
    );
    Transaction::begin(conn, Some(AssertSqlSafe(sql).into_sql_str()))
        .await
        .map_err(store_error)
}

/// The claim under the transaction's bound, then the session's bound back (in the claim's
/// own statement when it claims). `None` when the bound ran out: the transaction is aborted
/// and must be rolled back.
async fn claim(
    tx: &mut Transaction<'static, Postgres>,
    request: &ClaimRequest,
) -> Result<Option<TryClaim>> {
    match super::queries::claim_restoring(tx, request).await {
        Ok(outcome @ TryClaim::Claimed(_)) => Ok(Some(outcome)),
        Ok(outcome) => {
            sqlx::query(RESTORE)
                .execute(&mut **tx)
                .await
                .map_err(store_error)?;
            Ok(Some(outcome))
        }
        Err(error) if is_lock_wait_ended(&error) => Ok(None),
        Err(error) => Err(error),
    }
}
