//! [`Tx`]: the extractor that hands the handler the claim's transaction.

use std::ops::{Deref, DerefMut};
use std::sync::{Arc, Mutex, MutexGuard};

use axum::extract::FromRequestParts;
use axum::response::{IntoResponse, Response};
use http::request::Parts;
use idemkey_core::Problem;
use idemkey_sqlx::Backend;
use sqlx::Transaction;

use crate::problem_response;

/// Where the claim's transaction waits while the handler may borrow it.
pub(crate) struct TxSlot<DB: Backend>(Arc<Mutex<Option<Transaction<'static, DB>>>>);

impl<DB: Backend> Clone for TxSlot<DB> {
    fn clone(&self) -> Self {
        Self(self.0.clone())
    }
}

impl<DB: Backend> TxSlot<DB> {
    pub(crate) fn new(tx: Transaction<'static, DB>) -> Self {
        Self(Arc::new(Mutex::new(Some(tx))))
    }

    fn lock(&self) -> MutexGuard<'_, Option<Transaction<'static, DB>>> {
        // Only whole-value moves happen under the lock, so a poisoned slot is still sound.
        self.0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Takes the transaction back; `None` if the handler still holds or lost it.
    pub(crate) fn take(&self) -> Option<Transaction<'static, DB>> {
        self.lock().take()
    }
}

/// The request's transaction in atomic mode: the claim is already made in it, and the layer
/// stores the response in it and commits once the handler has answered.
///
/// Dereferences to the connection, as a `sqlx::Transaction` does: write with
/// `query.execute(&mut *tx)`. Use only this transaction: a second pooled connection would
/// wait on its lock. Hold it only while the handler runs.
pub struct Tx<DB: Backend> {
    tx: Option<Transaction<'static, DB>>,
    slot: TxSlot<DB>,
}

impl<DB: Backend> Deref for Tx<DB> {
    type Target = DB::Connection;

    fn deref(&self) -> &DB::Connection {
        match &self.tx {
            Some(tx) => tx,
            None => unreachable!("a Tx holds its transaction until dropped"),
        }
    }
}

impl<DB: Backend> DerefMut for Tx<DB> {
    fn deref_mut(&mut self) -> &mut DB::Connection {
        match &mut self.tx {
            Some(tx) => tx,
            None => unreachable!("a Tx holds its transaction until dropped"),
        }
    }
}

impl<DB: Backend> Drop for Tx<DB> {
    fn drop(&mut self) {
        *self.slot.lock() = self.tx.take();
    }
}

impl<S: Sync, DB: Backend> FromRequestParts<S> for Tx<DB> {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Response> {
        let slot = parts.extensions.get::<TxSlot<DB>>().cloned();
        let tx = slot.as_ref().and_then(TxSlot::take);
        match (tx, slot) {
            (Some(tx), Some(slot)) => Ok(Self { tx: Some(tx), slot }),
            _ => Err(no_transaction()),
        }
    }
}

fn no_transaction() -> Response {
    let problem = Problem::custom("no-transaction", "No transaction for this request", 500)
        .detail("the handler needs AtomicIdempotencyLayer on its route, and takes Tx once");
    problem_response(&problem).into_response()
}
