//! [`SqlxStore::execute`]: atomic mode around a handler, with the storage policy and the
//! re-runs after serialization failures.

use std::error::Error as StdError;
use std::future::Future;
use std::time::Duration;

use futures_util::future::BoxFuture;
use idemkey_core::{ClaimRequest, Error, ExpiredLease, StatusPolicy, StoredResponse};
use sqlx::Transaction;

use crate::commit_time::completed;
use crate::{AtomicBegin, AtomicClaim, Backend, SqlxStore};

impl std::str::FromStr for Strategy {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "claim-first" => Ok(Self::ClaimFirst),
            "commit-time" => Ok(Self::CommitTime),
            other => Err(format!(
                "unknown strategy {other:?}: expected claim-first or commit-time"
            )),
        }
    }
}

impl std::fmt::Display for Strategy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::ClaimFirst => "claim-first",
            Self::CommitTime => "commit-time",
        })
    }
}

/// Options of [`SqlxStore::execute`].
#[derive(Clone, Copy, Debug)]
pub struct AtomicOptions {
    /// Which responses are stored; the others roll back. Defaults to [`StatusPolicy::Default`].
    pub policy: StatusPolicy,
    /// What to do with an expired lease left by lease mode. Defaults to taking over.
    pub on_expired: ExpiredLease,
    /// How many times a transaction runs before serialization failures become
    /// `store-unavailable`. Defaults to 3.
    pub max_attempts: u32,
    /// Claim first, or at commit time. Defaults to [`Strategy::ClaimFirst`].
    pub strategy: Strategy,
    /// Whether a read-only lookup precedes the write transaction, so that a retry of a
    /// completed request is replayed without running the handler or taking the write lock.
    /// Defaults to true. Without it, under [`Strategy::CommitTime`], such a retry runs the
    /// handler speculatively and rolls it back; claim-first claims the record instead.
    pub lookup: bool,
}

/// How atomic mode claims a scope (behaviour §8); chosen per route.
///
/// Both commit the record and the business writes in one transaction, or neither; both
/// answer a duplicate with the first request's response. They differ in when the record is
/// written, and so in what a duplicate costs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum Strategy {
    /// The record is inserted in flight as the transaction's first statement, the handler
    /// runs, and the completion updates the record. A concurrent duplicate waits at its
    /// claim (bounded) and never runs the handler. For handlers whose work is expensive.
    #[default]
    ClaimFirst,
    /// The handler runs first and the record is inserted, already completed, as the
    /// transaction's last statement: one statement instead of two. A concurrent duplicate
    /// from another process runs the handler speculatively, its insert waits for the first
    /// transaction, and it rolls back and replays (duplicates in one process wait for each
    /// other instead). For light handlers whose only effects are in the transaction.
    CommitTime,
}

impl Default for AtomicOptions {
    fn default() -> Self {
        Self {
            policy: StatusPolicy::default(),
            on_expired: ExpiredLease::default(),
            max_attempts: 3,
            strategy: Strategy::default(),
            lookup: true,
        }
    }
}

/// A handler's result as atomic mode needs it: a status for the policy, and what to store.
pub trait AtomicResponse {
    /// The HTTP status.
    fn status(&self) -> u16;
    /// The response as stored for replay.
    fn to_stored(&self) -> StoredResponse;
    /// The handler did nothing (a rejection decided before execution): roll back, whatever
    /// the status. Defaults to false.
    fn not_executed(&self) -> bool {
        false
    }
    /// The response reports a serialization failure or deadlock: run the handler again.
    /// Defaults to false.
    fn retryable(&self) -> bool {
        false
    }
    /// Whether the response commits (with its record) under `policy`; otherwise everything
    /// rolls back. Defaults to: not [`Self::not_executed`], and stored by `policy`. A response
    /// that knows its own verdict (idemkey-tower's, decided by the application's policy)
    /// overrides this.
    fn stored(&self, policy: StatusPolicy) -> bool {
        !self.not_executed() && policy.stores(self.status())
    }
}

impl AtomicResponse for StoredResponse {
    fn status(&self) -> u16 {
        self.status
    }

    fn to_stored(&self) -> StoredResponse {
        self.clone()
    }
}

/// Business code run inside the claim's transaction. It may run more than once (after a
/// serialization failure), so it must do only database work on the transaction it is given.
pub trait AtomicHandler<DB: Backend>: Send {
    /// What the handler returns.
    type Response: AtomicResponse + Send;
    /// How the handler fails; a failure rolls everything back.
    type Error: StdError + Send + Sync + 'static;

    /// Runs with the transaction and gives it back (`None` if it was lost: rolled back).
    fn call(
        &mut self,
        tx: Transaction<'static, DB>,
    ) -> impl Future<Output = HandlerResult<DB, Self::Response, Self::Error>> + Send;
}

/// What an [`AtomicHandler`] gives back: the transaction, unless lost, and its result.
pub type HandlerResult<DB, R, E> = (Option<Transaction<'static, DB>>, Result<R, E>);

/// A closure as an [`AtomicHandler`]: see [`handler_fn`].
#[derive(Clone, Debug)]
pub struct HandlerFn<F>(F);

/// Wraps `|tx| Box::pin(async move { ... })` as an [`AtomicHandler`].
pub fn handler_fn<DB, F, R, E>(f: F) -> HandlerFn<F>
where
    DB: Backend,
    F: for<'t> FnMut(&'t mut Transaction<'static, DB>) -> BoxFuture<'t, Result<R, E>> + Send,
{
    HandlerFn(f)
}

impl<DB, F, R, E> AtomicHandler<DB> for HandlerFn<F>
where
    DB: Backend,
    F: for<'t> FnMut(&'t mut Transaction<'static, DB>) -> BoxFuture<'t, Result<R, E>> + Send,
    R: AtomicResponse + Send,
    E: StdError + Send + Sync + 'static,
{
    type Response = R;
    type Error = E;

    async fn call(&mut self, mut tx: Transaction<'static, DB>) -> HandlerResult<DB, R, E> {
        let result = (self.0)(&mut tx).await;
        (Some(tx), result)
    }
}

/// How an atomic request ended.
#[derive(Debug)]
pub enum Outcome<R> {
    /// The handler ran, and its response committed with its writes.
    Executed(R),
    /// The handler ran, but the policy does not store its response: all rolled back.
    NotStored(R),
    /// An equal earlier request completed: its stored response.
    Replayed(StoredResponse),
    /// The key was used for a different request: 422 `key-reused`.
    Mismatch,
    /// 409 `request-in-flight`: an in-flight record left by lease mode, or (PostgreSQL) a
    /// concurrent claim still uncommitted past the wait bound or beyond the waiter cap.
    InFlight {
        /// When to try again.
        retry_after: Duration,
    },
}

/// Why [`SqlxStore::execute`] failed. Either way, nothing was committed, unless the error
/// is [`Error::OutcomeUnknown`].
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AtomicError<E> {
    /// The handler failed.
    #[error("handler failed: {0}")]
    Handler(#[source] E),
    /// The store failed.
    #[error(transparent)]
    Store(#[from] Error),
}

impl<DB: Backend> SqlxStore<DB> {
    /// Runs `handler` in atomic mode: claim, business writes and stored response in one
    /// transaction, committed if and only if the policy stores the response.
    pub async fn execute<H: AtomicHandler<DB>>(
        &self,
        request: &ClaimRequest,
        options: &AtomicOptions,
        handler: &mut H,
    ) -> Result<Outcome<H::Response>, AtomicError<H::Error>> {
        match options.strategy {
            Strategy::ClaimFirst => {
                self.execute_claim_first(request, options, handler, None)
                    .await
            }
            Strategy::CommitTime => self.execute_commit_time(request, options, handler).await,
        }
    }

    /// [`Self::execute`] with [`Strategy::ClaimFirst`]; `begun` is the first attempt's
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

pub(crate) async fn rollback<DB: Backend>(tx: Option<Transaction<'static, DB>>) {
    if let Some(tx) = tx
        && let Err(error) = tx.rollback().await
    {
        // The connection is closed rather than reused when a rollback fails, so nothing
        // half-done survives; the request already failed for its own reason.
        tracing::warn!(%error, "rollback failed");
    }
}

/// Whether a serialization failure or deadlock is somewhere in the error's chain.
pub(crate) fn retryable<DB: Backend>(error: &(dyn StdError + 'static)) -> bool {
    let mut current = Some(error);
    while let Some(error) = current {
        if let Some(sqlx_error) = error.downcast_ref::<sqlx::Error>() {
            return DB::is_retryable(sqlx_error);
        }
        current = error.source();
    }
    false
}

pub(crate) fn exhausted(attempts: u32) -> Error {
    Error::Unavailable(format!("transaction failed to serialize {attempts} times").into())
}

impl<R> From<idemkey_core::Answer> for Outcome<R> {
    fn from(answer: idemkey_core::Answer) -> Self {
        match answer {
            idemkey_core::Answer::Replay(response) => Self::Replayed(response),
            idemkey_core::Answer::Mismatch => Self::Mismatch,
            idemkey_core::Answer::InFlight { retry_after } => Self::InFlight { retry_after },
        }
    }
}
