//! Settling a claim once its handler is done: the record completed, released or discarded,
//! in the store or in the handler's transaction (behaviour [§6](https://docs.rs/idemkey/latest/idemkey/behaviour/index.html#6-what-is-stored), [§8a](https://docs.rs/idemkey/latest/idemkey/behaviour/index.html#8a-external-effects-lease-mode), [§10](https://docs.rs/idemkey/latest/idemkey/behaviour/index.html#10-errors)).

use std::time::{Duration, Instant};

use idemkey_core::{Claim, Error, Problem, RecordState, Store, StoredResponse};

use crate::Config;
use crate::answer::{lease_lost, outcome_unknown, store_failure};
use crate::observe::{outcome, timed};
use crate::tx::Offered;

/// How many times completing a record is tried before giving up (behaviour [§10](https://docs.rs/idemkey/latest/idemkey/behaviour/index.html#10-errors)).
const COMPLETE_ATTEMPTS: u32 = 4;
const COMPLETE_BACKOFF: Duration = Duration::from_millis(50);

/// What becomes of the claim once the handler is done.
pub(crate) enum Settle {
    Store(StoredResponse),
    Release,
    /// The handler did nothing: discard the record so the key can carry a corrected request.
    /// Only a fresh record is discarded; one claimed again is released, as an earlier
    /// execution may have used its derived keys.
    Discard,
}

/// Stores, releases or discards in the store's own transactions.
pub(crate) async fn settle_in_store<St: Store>(store: &St, claim: &Claim, settle: Settle) {
    match settle {
        Settle::Store(stored) => complete(store, claim, &stored).await,
        Settle::Release => release(store, claim, false).await,
        Settle::Discard if claim.fresh => release(store, claim, true).await,
        Settle::Discard => {
            tracing::info!(
                "nothing done, but an earlier attempt may have been: keeping the record"
            );
            release(store, claim, false).await;
        }
    }
}

/// Settles an execution whose handler was offered a transaction: a stored response is the
/// transaction's last statement, anything else rolls it back before the store releases.
/// `Some` problem replaces the handler's answer when what it wrote did not commit.
pub(crate) async fn settle_in_tx<St: Store>(
    offered: Box<dyn Offered>,
    (store, claim): (&St, &Claim),
    settle: Settle,
    config: &Config,
) -> Option<Problem> {
    let Settle::Store(stored) = settle else {
        if let Err(error) = offered.finish(false).await {
            tracing::error!(%error, "the handler kept its transaction past its answer");
        }
        settle_in_store(store, claim, settle).await;
        return None;
    };
    match timed("complete", offered.complete(claim, &stored)).await {
        None => complete(store, claim, &stored).await,
        Some(Ok(())) => outcome("executed"),
        Some(Err(Error::Fenced)) => {
            tracing::error!("lease lost before completion: what the handler wrote rolled back");
            outcome("lease_lost");
            return Some(lease_lost(config));
        }
        Some(Err(error)) => return Some(not_committed(store, claim, &error).await),
    }
    None
}

/// The answer when the handler's transaction did not commit with its record. Rolled back,
/// the claim is released for a retry (kept, not discarded: external calls may have been
/// made under its derived keys). A lost commit reply leaves the record to its lease: it
/// may have committed, completed.
async fn not_committed<St: Store>(store: &St, claim: &Claim, error: &Error) -> Problem {
    if let Error::OutcomeUnknown(_) = error {
        tracing::error!(%error, "the outcome of the handler's transaction is unknown");
        outcome("outcome_unknown");
        return outcome_unknown();
    }
    tracing::error!(%error, "the handler's transaction did not commit; releasing the claim");
    release(store, claim, false).await;
    store_failure(error, "what the handler wrote was rolled back")
}

/// Completes the record, retrying within the lease; on failure the record stays in flight
/// until its lease expires, and the handler's response is still returned (behaviour [§10](https://docs.rs/idemkey/latest/idemkey/behaviour/index.html#10-errors)).
async fn complete<St: Store>(store: &St, claim: &Claim, stored: &StoredResponse) {
    let trusted_until = claim.trusted_until(claim.lease / 10);
    let mut backoff = COMPLETE_BACKOFF;
    for attempt in 1..=COMPLETE_ATTEMPTS {
        match timed("complete", store.complete(claim, stored)).await {
            Ok(()) => return outcome("executed"),
            // An earlier attempt's reply was lost after it applied: the record is already
            // completed, by this very claim.
            Err(Error::Fenced) if attempt > 1 && completed_by(store, claim, stored).await => {
                tracing::info!("the response was stored by an attempt whose reply was lost");
                return outcome("executed");
            }
            Err(Error::Fenced) => {
                tracing::error!("lease lost before completion: the response was not stored");
                return outcome("lease_lost");
            }
            Err(err) if attempt < COMPLETE_ATTEMPTS && Instant::now() + backoff < trusted_until => {
                tracing::warn!(error = %err, attempt, "could not store the response; retrying");
                tokio::time::sleep(backoff).await;
                backoff *= 2;
            }
            Err(err) => {
                tracing::error!(
                    error = %err,
                    "could not store the response; the record stays in flight until its lease expires"
                );
                return outcome("complete_failed");
            }
        }
    }
}

/// Whether the record is completed under this claim (its record id and token) with
/// `stored`: only this claim's holder could have completed it so, since a takeover moves the
/// token on.
async fn completed_by<St: Store>(store: &St, claim: &Claim, stored: &StoredResponse) -> bool {
    match timed("lookup", store.lookup(&claim.scope)).await {
        Ok(Some(record)) => {
            record.record_id == claim.record_id
                && record.token == claim.token
                && matches!(&record.state, RecordState::Completed(response) if response == stored)
        }
        Ok(None) => false,
        Err(err) => {
            tracing::warn!(error = %err, "could not read the record back after a lost reply");
            false
        }
    }
}

/// Releases the claim; with `discard`, deletes its record instead in one fenced step, which
/// is only safe because the handler reported that it did nothing under its derived keys.
async fn release<St: Store>(store: &St, claim: &Claim, discard: bool) {
    let released = if discard {
        timed("discard", store.discard(claim)).await
    } else {
        timed("release", store.release(claim)).await
    };
    match released {
        Ok(()) if discard => outcome("not_executed"),
        Ok(()) => outcome("released"),
        Err(Error::Fenced) => {
            tracing::error!("lease lost before release: another executor holds the record");
            outcome("lease_lost");
        }
        Err(err) => {
            tracing::error!(
                error = %err,
                "could not release the claim; the record stays in flight until its lease expires"
            );
            outcome("release_failed");
        }
    }
}
