//! Lease mode: for handlers with effects outside the database. A delivery claims its
//! message's key with a lease and a fencing token, the handler runs outside any transaction
//! with the claim's derived keys, and the record completes afterwards; a re-execution (after
//! a crash, once the lease ran out) gets the same keys, so each external call it repeats goes
//! under the key of the first, and a system that deduplicates by key sees it once.

use std::error::Error as StdError;
use std::future::Future;
use std::time::Duration;

use idemkey_core::{
    Begin, Claim, ClaimRequest, DerivedKeys, ExpiredLease, Operation, Store, StoredResponse,
};

use crate::{Action, DeadLetter, Incoming, RetryReason, Settings};

/// A message's business code in lease mode: its external effects, each under a key derived
/// from the message's record (`keys.key("charge")`), so that a re-execution repeats them under
/// the same keys.
pub trait LeaseHandler: Send {
    /// How the handler fails; the claim is then given back for a later delivery.
    type Error: StdError + Send + Sync + 'static;

    /// Does the message's work.
    fn handle<'t>(
        &'t mut self,
        keys: &'t DerivedKeys,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 't;
}

/// An idempotent consumer in lease mode, on any store: each message's effects run under one
/// claim at a time, with derived keys, and the message is acknowledged once its record is
/// complete.
#[derive(Clone, Debug)]
pub struct LeaseInbox<S> {
    store: S,
    consumer: String,
    operation: Operation,
    settings: Settings,
    lease: Duration,
}

impl<S: Store> LeaseInbox<S> {
    /// The lease-mode inbox of `consumer` running `operation`, its records in `store`, with
    /// a 30 s lease renewed while the handler runs.
    pub fn new(store: S, consumer: impl Into<String>, operation: Operation) -> Self {
        Self {
            store,
            consumer: consumer.into(),
            operation,
            settings: Settings::default(),
            lease: Duration::from_secs(30),
        }
    }

    /// The inbox with `settings`.
    #[must_use]
    pub fn with_settings(mut self, settings: Settings) -> Self {
        self.settings = settings;
        self
    }

    /// The inbox with claims of `lease`: how long a crashed consumer's claim keeps the
    /// message from running again. Renewed every third of it while the handler runs.
    #[must_use]
    pub fn with_lease(mut self, lease: Duration) -> Self {
        self.lease = lease;
        self
    }

    /// The store.
    pub fn store(&self) -> &S {
        &self.store
    }

    /// Runs `handler` for `incoming` under the message's claim unless an earlier delivery
    /// completed it, and returns what the broker is to do with the delivery.
    pub async fn process<H: LeaseHandler>(&self, incoming: &Incoming<'_>, handler: H) -> Action {
        let key = match incoming.key() {
            Ok(key) => key,
            Err(refused) => return Action::DeadLetter(refused),
        };
        let request = ClaimRequest::new(
            self.consumer.clone(),
            self.operation.clone(),
            key,
            incoming.fingerprint(),
        )
        .retention(self.settings.retention)
        .lease(self.lease);
        match idemkey_core::begin(&self.store, &request, ExpiredLease::TakeOver).await {
            Ok(Begin::Execute(claim)) => self.execute(claim, handler, incoming.delivered).await,
            Ok(Begin::Replay(_)) => Action::Ack {
                publish: Vec::new(),
            },
            Ok(Begin::Mismatch) => Action::DeadLetter(DeadLetter::Reused),
            Ok(Begin::InFlight { retry_after }) => Action::Retry {
                after: retry_after,
                reason: RetryReason::InFlight,
            },
            Err(error) => self
                .settings
                .retry(incoming.delivered, RetryReason::Store(error.to_string())),
        }
    }

    /// Runs the handler under `claim`, then completes the record, or gives the claim back.
    async fn execute<H: LeaseHandler>(
        &self,
        mut claim: Claim,
        mut handler: H,
        delivered: u64,
    ) -> Action {
        let secret = match self.store.secret().await {
            Ok(secret) => secret,
            Err(error) => {
                return self
                    .give_back(&claim, delivered, RetryReason::Store(error.to_string()))
                    .await;
            }
        };
        let keys = DerivedKeys::new(secret, claim.record_id);
        let ran = self.renewing(&mut claim, handler.handle(&keys)).await;
        match ran {
            Ok(()) => match self
                .store
                .complete(&claim, &StoredResponse::new(200, ""))
                .await
            {
                Ok(()) => Action::Ack {
                    publish: Vec::new(),
                },
                // Fenced off (another delivery took the claim over) or the store failed: the
                // record says, at the next delivery, whether it completed.
                Err(error) => self
                    .settings
                    .retry(delivered, RetryReason::Store(error.to_string())),
            },
            Err(error) if delivered >= self.settings.max_deliveries => {
                let _ = self.store.release(&claim).await;
                Action::DeadLetter(DeadLetter::Poison {
                    deliveries: delivered,
                    error: error.to_string(),
                })
            }
            Err(error) => {
                self.give_back(&claim, delivered, RetryReason::Failed(error.to_string()))
                    .await
            }
        }
    }

    async fn give_back(&self, claim: &Claim, delivered: u64, reason: RetryReason) -> Action {
        if let Err(error) = self.store.release(claim).await {
            tracing::warn!(%error, "idemkey: releasing a claim; its lease will run out instead");
        }
        self.settings.retry(delivered, reason)
    }

    /// `run`, renewing `claim`'s lease every third of it meanwhile.
    async fn renewing<T>(&self, claim: &mut Claim, run: impl Future<Output = T>) -> T {
        let every = (self.lease / 3).max(Duration::from_millis(10));
        let mut run = std::pin::pin!(run);
        let mut ticks = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
        loop {
            tokio::select! {
                done = &mut run => return done,
                _ = ticks.tick() => {
                    if let Err(error) = self.store.extend(claim).await {
                        tracing::warn!(%error, "idemkey: renewing a lease");
                    }
                }
            }
        }
    }
}
