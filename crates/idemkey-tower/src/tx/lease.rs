//! Lease mode with the record's completion in the handler's transaction:
//! [`IdempotencyLayer::transactional`], on a sqlx store.

use std::sync::Arc;

use futures_util::future::BoxFuture;
use idemkey_core::{Claim, Error, StoredResponse};
use idemkey_sqlx::{Backend, SqlxStore};

use super::offered::{MaybeTransactions, Offered, Transactions};
use super::slot::{Returned, TxOffer, TxSlot, end};
use crate::lease::{Idempotency, IdempotencyLayer, Shared};

impl<DB: Backend> IdempotencyLayer<SqlxStore<DB>> {
    /// The same layer, offering each handler a [`Tx`](crate::atomic::Tx) on the store's database
    /// whose last statement completes the record: what the handler writes on it commits
    /// with the stored response, or not at all (behaviour [§8a](https://docs.rs/idemkey/latest/idemkey/behaviour/index.html#8a-external-effects-lease-mode)).
    ///
    /// The claim still commits first, with its lease and fencing token, so the handler may
    /// make external calls under its derived keys; only the completion moves. It costs one
    /// commit less than completing on its own. If the lease was lost meanwhile, the
    /// completion matches nothing and everything rolls back: the client is told
    /// `request-in-flight`, and the newer execution's answer is the one stored. A
    /// response that is not stored (a 5xx, a panic) rolls back too, and the claim is
    /// released. A handler that does not take `Tx` is settled as without this.
    ///
    /// The transaction begins when the handler takes `Tx`, and on SQLite holds the store's
    /// writer until the handler answers: take it after slow external calls, not before.
    #[must_use]
    pub fn transactional(mut self) -> Self {
        self.shared.transactions = lease_transactions(&self.shared);
        self
    }
}

impl<S, DB: Backend> Idempotency<S, SqlxStore<DB>> {
    /// The same service, offering each handler a [`Tx`](crate::atomic::Tx) whose last statement
    /// completes the record: [`IdempotencyLayer::transactional`], for a service built with
    /// [`Idempotency::new`].
    #[must_use]
    pub fn transactional(mut self) -> Self {
        let shared = self.shared_mut();
        shared.transactions = lease_transactions(shared);
        self
    }
}

fn lease_transactions<DB: Backend>(shared: &Shared<SqlxStore<DB>>) -> MaybeTransactions {
    let offer = TxOffer::new::<DB>(shared.noticed.clone());
    MaybeTransactions(Some(Arc::new(LeaseTransactions(
        shared.store.clone(),
        offer,
    ))))
}

/// [`Transactions`] on a sqlx store: a lazy [`TxSlot`] per execution.
struct LeaseTransactions<DB: Backend>(SqlxStore<DB>, TxOffer);

impl<DB: Backend> Transactions for LeaseTransactions<DB> {
    fn offer(&self, extensions: &mut http::Extensions) -> Box<dyn Offered> {
        let slot = TxSlot::lazy(self.0.clone());
        slot.offer_in(extensions, self.1.clone());
        Box::new(Offer(slot, self.0.clone()))
    }
}

/// The layer's end of one execution's slot, and the store that completes in it.
struct Offer<DB: Backend>(TxSlot<DB>, SqlxStore<DB>);

impl<DB: Backend> Offered for Offer<DB> {
    fn complete<'a>(
        self: Box<Self>,
        claim: &'a Claim,
        stored: &'a StoredResponse,
    ) -> BoxFuture<'a, Option<Result<(), Error>>> {
        Box::pin(async move {
            let tx = match self.0.returned() {
                Returned::Never => return None,
                Returned::Held => return Some(Err(held())),
                Returned::Back(tx) => tx,
            };
            Some(self.1.complete_in(tx, claim, stored).await)
        })
    }

    fn finish(self: Box<Self>, keep: bool) -> BoxFuture<'static, Result<(), Error>> {
        Box::pin(async move {
            match self.0.returned() {
                Returned::Back(tx) => {
                    end(Some(tx), keep).await?;
                    // Begun grouped (`extractor.rs`): committed, it is relied on only once
                    // its sync is done; failed, whether it survives a power cut is unknown.
                    if keep {
                        self.1
                            .flush()
                            .await
                            .map_err(|error| Error::OutcomeUnknown(Box::new(error)))?;
                    }
                    Ok(())
                }
                Returned::Never => Ok(()),
                // It rolls back wherever it is dropped, as it is never committed.
                Returned::Held if keep => Err(held()),
                Returned::Held => Ok(()),
            }
        })
    }
}

/// A handler that kept its transaction past its answer: nothing it wrote can commit.
fn held() -> Error {
    Error::Backend("the handler kept its transaction past its answer".into())
}
