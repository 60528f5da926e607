//! The business code atomic mode runs in the claim's transaction ([`AtomicHandler`]), and
//! what it must say of its response ([`AtomicResponse`]).

use std::error::Error as StdError;
use std::future::Future;

use futures_util::future::BoxFuture;
use idemkey_core::{StatusPolicy, StoredResponse};
use sqlx::Transaction;

use crate::Backend;

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
    /// that knows its own verdict (the layer's, decided by the application's policy)
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
