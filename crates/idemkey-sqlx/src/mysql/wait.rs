//! How an atomic claim waits for a concurrent, uncommitted claim of the same scope (behaviour
//! [§8](https://docs.rs/idemkey/latest/idemkey/behaviour/index.html#8-atomic-mode)): bounded
//! by an `innodb_lock_wait_timeout` set for the claim statement alone, and begun again after
//! a deadlock.

use std::time::Duration;

use idemkey_core::{ClaimRequest, Result, TryClaim};
use sqlx::pool::PoolConnection;
use sqlx::{AssertSqlSafe, MySql, SqlSafeStr, Transaction};

use super::error::{is_deadlock, is_lock_wait_ended, store_error};
use crate::SqlxStore;
use crate::failpoints::Point;

/// How long an atomic claim waits for a concurrent claim of the same scope by default.
const DEFAULT_CLAIM_LOCK_TIMEOUT: Duration = Duration::from_secs(5);

/// InnoDB's largest `innodb_lock_wait_timeout` on MariaDB (MySQL's is larger).
const MAX_LOCK_WAIT_SECS: u64 = 100_000_000;

/// How many times a claim begins when InnoDB picks it as a deadlock's victim. Such a
/// deadlock is between duplicates only (two that met the same row, after the claim they
/// waited for rolled back), and the next attempt waits behind the winner instead.
const DEADLOCK_ATTEMPTS: usize = 3;

/// Puts the session's own lock wait back, kept in `@idemkey_lock_wait` by the first claim
/// on the connection: the business statements keep their ordinary waits.
const RESTORE: &str = "SET SESSION innodb_lock_wait_timeout = CAST(@idemkey_lock_wait AS UNSIGNED)";

/// MySQL settings of a [`crate::MySqlStore`]: how long atomic claims wait for each other.
///
/// Set with [`crate::MySqlStore::with_claim_lock_timeout`].
#[derive(Clone, Debug)]
pub struct MySqlSettings {
    lock_wait: Duration,
}

impl Default for MySqlSettings {
    /// A 5 s claim lock timeout.
    fn default() -> Self {
        Self::new(DEFAULT_CLAIM_LOCK_TIMEOUT)
    }
}

impl MySqlSettings {
    /// `timeout`, rounded up to whole seconds: InnoDB's lock wait timeout counts seconds.
    pub(crate) fn new(timeout: Duration) -> Self {
        let secs = timeout.as_secs() + u64::from(timeout.subsec_nanos() > 0);
        Self {
            lock_wait: Duration::from_secs(secs.clamp(1, MAX_LOCK_WAIT_SECS)),
        }
    }

    /// How long a claim waits for a concurrent claim of its scope, in whole seconds.
    pub fn claim_lock_timeout(&self) -> Duration {
        self.lock_wait
    }
}

/// Atomic mode's claim on MySQL, in a READ COMMITTED transaction whose claim waits at most
/// the claim lock timeout. `None` when it ran out: in flight, and the transaction rolled back.
///
/// Unlike PostgreSQL's, there is no cap on waiting claims: this process's duplicates of a
/// scope already wait for one another in the process, so each scope holds at most one pooled
/// connection waiting on the database.
pub(super) async fn begin_claim(
    store: &SqlxStore<MySql>,
    request: &ClaimRequest,
    mut looked_up: Option<PoolConnection<MySql>>,
) -> Result<Option<(Transaction<'static, MySql>, TryClaim)>> {
    let mut attempt = 1;
    loop {
        let conn = match looked_up.take() {
            Some(conn) => conn,
            None => store.conn().await?,
        };
        let mut tx = begin(conn, store.settings.lock_wait).await?;
        if attempt == 1 {
            store.hit(Point::BeforeClaim).await?;
        }
        let claimed = super::queries::claim(&mut tx, request).await;
        // Whatever happened, the session's bound comes back before anything else runs.
        let restored = restore(&mut tx).await;
        match claimed {
            Ok(outcome) => {
                restored?;
                return Ok(Some((tx, outcome)));
            }
            Err(error) if is_lock_wait_ended(&error) => {
                restored?;
                tx.rollback().await.map_err(store_error)?;
                let timeout = store.settings.lock_wait;
                tracing::debug!(?timeout, "claim lock wait ran out: in flight");
                return Ok(None);
            }
            // InnoDB rolled the transaction back already.
            Err(error) if is_deadlock(&error) && attempt < DEADLOCK_ATTEMPTS => {
                restored?;
                tx.rollback().await.map_err(store_error)?;
                tracing::debug!(attempt, "claim chosen as a deadlock's victim: again");
                attempt += 1;
            }
            Err(error) => return Err(error),
        }
    }
}

/// Opens a READ COMMITTED transaction on `conn` whose lock waits are bounded by `timeout`
/// until [`restore`]; the session's own bound is kept first, once per connection (a request
/// cancelled before its restore leaves the claim's bound, which the connection's next claim
/// puts back). One round trip.
async fn begin(
    conn: PoolConnection<MySql>,
    timeout: Duration,
) -> Result<Transaction<'static, MySql>> {
    let sql = format!(
        "SET @idemkey_lock_wait = CAST(COALESCE(@idemkey_lock_wait, \
         @@SESSION.innodb_lock_wait_timeout) AS UNSIGNED), \
         SESSION innodb_lock_wait_timeout = {}; {}",
        timeout.as_secs(),
        super::queries::BEGIN_WRITE
    );
    Transaction::begin(conn, Some(AssertSqlSafe(sql).into_sql_str()))
        .await
        .map_err(store_error)
}

async fn restore(tx: &mut Transaction<'static, MySql>) -> Result<()> {
    sqlx::raw_sql(RESTORE)
        .execute(&mut **tx)
        .await
        .map_err(store_error)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bound_is_whole_seconds() {
        let secs = |ms| MySqlSettings::new(Duration::from_millis(ms)).claim_lock_timeout();
        assert_eq!(secs(0), Duration::from_secs(1));
        assert_eq!(secs(20), Duration::from_secs(1));
        assert_eq!(secs(5000), Duration::from_secs(5));
        assert_eq!(secs(5001), Duration::from_secs(6));
    }
}
