//! Lease mode's completion in the handler's own transaction, seen from the generic flow (any
//! store, any features): the sqlx side is `lease` beside it (feature `sqlx`).

use std::fmt;
use std::sync::Arc;

use futures_util::future::BoxFuture;
use idemkey_core::{Claim, Error, StoredResponse};

/// Offers each execution a transaction its handler may write on, and settles it.
pub(crate) trait Transactions: Send + Sync {
    /// Puts a transaction slot in `extensions`; returns the layer's end of it.
    fn offer(&self, extensions: &mut http::Extensions) -> Box<dyn Offered>;
}

/// The layer's end of one execution's transaction slot.
pub(crate) trait Offered: Send {
    /// Completes `claim` with `stored` as the handler's transaction's last statement and
    /// commits. `None` when the handler began no transaction: the caller completes in the
    /// store. [`Error::Fenced`] and the other errors but [`Error::OutcomeUnknown`] mean
    /// that nothing the handler wrote committed.
    fn complete<'a>(
        self: Box<Self>,
        claim: &'a Claim,
        stored: &'a StoredResponse,
    ) -> BoxFuture<'a, Option<Result<(), Error>>>;

    /// Ends the handler's transaction, if it began one: commits it with `keep` (an
    /// unrecorded request whose answer the policy keeps), rolls it back otherwise.
    fn finish(self: Box<Self>, keep: bool) -> BoxFuture<'static, Result<(), Error>>;
}

/// A shared [`Transactions`], or none: what the lease layer carries.
#[derive(Clone, Default)]
pub(crate) struct MaybeTransactions(pub(crate) Option<Arc<dyn Transactions>>);

impl MaybeTransactions {
    /// A slot in `extensions`, if transactions are on.
    pub(crate) fn offer(&self, extensions: &mut http::Extensions) -> Option<Box<dyn Offered>> {
        self.0
            .as_ref()
            .map(|transactions| transactions.offer(extensions))
    }
}

impl fmt::Debug for MaybeTransactions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(if self.0.is_some() { "on" } else { "off" })
    }
}
