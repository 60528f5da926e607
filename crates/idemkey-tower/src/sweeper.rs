//! The background sweeper: deletes expired records in bounded batches (behaviour [§9](https://docs.rs/idemkey/latest/idemkey/behaviour/index.html#9-retention-and-time)).

use std::time::Duration;

use idemkey_core::Store;
use tokio::task::JoinHandle;

/// Records deleted per batch; each batch is its own short transaction.
pub const SWEEP_BATCH: u32 = 500;

/// Sweeps until no expired record is left; returns how many were deleted.
pub async fn sweep_all<S: Store>(store: &S) -> idemkey_core::Result<u64> {
    let mut total = 0;
    loop {
        let deleted = store.sweep(SWEEP_BATCH).await?;
        total += deleted;
        if deleted < u64::from(SWEEP_BATCH) {
            return Ok(total);
        }
    }
}

/// A task that runs [`sweep_all`] on a store at an interval, from [`Sweeper::spawn`] until it
/// is stopped or dropped, so it stops with the application that holds it.
///
/// Safe on several instances at once: each delete re-checks expiry, so no instance removes a
/// record renewed or claimed since it was selected.
///
/// ```
/// # tokio::runtime::Runtime::new().unwrap().block_on(async {
/// use std::time::Duration;
/// // With the facade: `use idemkey::{MemoryStore, tower::Sweeper};` (or its `SqliteStore`...).
/// use idemkey_core::MemoryStore;
/// use idemkey_tower::Sweeper;
///
/// let sweeper = Sweeper::spawn(MemoryStore::new(), Duration::from_secs(60));
/// // ... serve the application ...
/// sweeper.stop().await;
/// # });
/// ```
#[derive(Debug)]
pub struct Sweeper {
    task: JoinHandle<()>,
}

impl Sweeper {
    /// Starts sweeping `store` now and then every `every` (a failed sweep is logged and tried
    /// again at the next tick). Needs a tokio runtime.
    pub fn spawn<S: Store>(store: S, every: Duration) -> Self {
        Self {
            task: tokio::spawn(run(store, every)),
        }
    }

    /// Stops sweeping; a batch in progress is abandoned, which is safe (each is one statement).
    pub async fn stop(self) {
        self.task.abort();
        let _ = (&mut { self }.task).await;
    }
}

impl Drop for Sweeper {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn run<S: Store>(store: S, every: Duration) {
    let mut ticker = tokio::time::interval(every);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticker.tick().await;
        match sweep_all(&store).await {
            Ok(0) => {}
            Ok(deleted) => tracing::info!(deleted, "swept expired idempotency records"),
            Err(error) => tracing::warn!(%error, "sweep failed; retrying at the next tick"),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use idemkey_core::testkit::request;
    use idemkey_core::{Store, StoredResponse, TryClaim};
    use idemkey_sqlx::SqliteStore;

    use super::*;

    /// The spawned sweeper deletes an expired record by itself (counted in the table, which
    /// a lookup would not show: expired records are absent there already).
    #[tokio::test]
    async fn the_spawned_sweeper_deletes_expired_records() {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}", dir.path().join("s.db").display());
        let store = SqliteStore::connect(&url).await.unwrap();
        let req = request("{}").retention(Duration::ZERO);
        let TryClaim::Claimed(claim) = store.try_claim(&req).await.unwrap() else {
            panic!("a fresh scope")
        };
        store
            .complete(&claim, &StoredResponse::new(201, ""))
            .await
            .unwrap();
        let sweeper = Sweeper::spawn(store.clone(), Duration::from_millis(10));
        let mut left = 1;
        for _ in 0..1000 {
            left = sqlx::query_scalar::<_, i64>("SELECT count(*) FROM idemkey_records")
                .fetch_one(store.pool())
                .await
                .unwrap();
            if left == 0 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        sweeper.stop().await;
        assert_eq!(left, 0, "the sweeper deleted the expired record");
    }
}
