//! Claim-first (behaviour [§8](https://docs.rs/idemkey/latest/idemkey/behaviour/index.html#8-atomic-mode)): [`SqlxStore::execute`] with the record claimed first, around
//! a handler, with the storage policy and the re-runs after serialization failures.

use idemkey_core::{ClaimRequest, Error};

use super::claim::{AtomicBegin, AtomicClaim, completed, rollback};
use super::handler::{AtomicHandler, AtomicResponse};
use super::options::AtomicOptions;
use super::outcome::{AtomicError, Outcome, exhausted, retryable};
use crate::{Backend, SqlxStore};

impl<DB: Backend> SqlxStore<DB> {
    /// [`Self::execute`] with [`super::Strategy::ClaimFirst`]; `begun` is the first attempt's
    /// beginning when the caller already has it.
    pub(crate) async fn execute_claim_first<H: AtomicHandler<DB>>(
        &self,
        request: &ClaimRequest,
        options: &AtomicOptions,
        handler: &mut H,
        mut begun: Option<AtomicBegin<DB>>,
    ) -> Result<Outcome<H::Response>, AtomicError<H::Error>> {
        let attempts = options.max_attempts.max(1);
        for attempt in 1..=attempts {
            let begin = match begun.take() {
                Some(begin) => begin,
                None => self.begin_atomic(request, options.on_expired).await?,
            };
            let atomic = match begin {
                AtomicBegin::Execute(atomic) => atomic,
                AtomicBegin::Replay(response) => return Ok(Outcome::Replayed(response)),
                AtomicBegin::Mismatch => return Ok(Outcome::Mismatch),
                AtomicBegin::InFlight { retry_after } => {
                    return Ok(Outcome::InFlight { retry_after });
                }
            };
            let last = attempt == attempts;
            // `turn` keeps this process's duplicates waiting until this attempt ends.
            let (tx, claim, turn) = atomic.split();
            let (tx, result) = handler.call(tx).await;
            let response = match result {
                Ok(response) => response,
                Err(error) => {
                    rollback(tx).await;
                    match retryable::<DB>(&error) {
                        true if !last => continue,
                        true => return Err(exhausted(attempts).into()),
                        false => return Err(AtomicError::Handler(error)),
                    }
                }
            };
            if response.retryable() {
                rollback(tx).await;
                if last {
                    return Err(exhausted(attempts).into());
                }
                continue;
            }
            if !response.stored(options.policy) {
                rollback(tx).await;
                return Ok(Outcome::NotStored(response));
            }
            let tx = tx.ok_or_else(|| Error::Backend("the handler lost the transaction".into()))?;
            let stored = response.to_stored();
            // A record claimed afresh holds this request's version and fingerprint; one taken
            // over keeps the old record's, which only a lookup reads.
            let fresh = claim.fresh.then_some((claim.record_id, claim.token));
            match self
                .complete_atomic(AtomicClaim::join(tx, claim, turn), &stored)
                .await
            {
                Ok(()) => {
                    if let Some((record_id, token)) = fresh {
                        let record = completed(request, record_id, token, &stored);
                        self.remember(&request.scope, &record);
                    }
                    return Ok(Outcome::Executed(response));
                }
                Err(error) if !last && retryable::<DB>(&error) => continue,
                Err(error) if retryable::<DB>(&error) => return Err(exhausted(attempts).into()),
                Err(error) => return Err(error.into()),
            }
        }
        Err(exhausted(attempts).into())
    }
}
