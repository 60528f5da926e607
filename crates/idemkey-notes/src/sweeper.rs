//! The background sweeper: deletes expired records in bounded batches (contract §9).

use std::time::Duration;

use idemkey_core::Store;

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

/// Runs [`sweep_all`] every `every` until the task is dropped. Safe on several instances at
/// once: each delete re-checks expiry, so instances never remove a renewed record.
pub async fn run_sweeper<S: Store>(store: S, every: Duration) {
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
