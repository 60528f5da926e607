//! [`Tx`]: the extractor that hands the handler the request's transaction.

use std::ops::{Deref, DerefMut};
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex, MutexGuard};

use axum::extract::FromRequestParts;
use axum::response::{IntoResponse, Response};
use http::request::Parts;
use idemkey_sqlx::{Backend, SqlxStore};
use sqlx::Transaction;

use crate::answer::{no_transaction, store_error};
use crate::misconfig::{self, Noticed};
use crate::problem_response;

/// Beside each typed [`TxSlot`] in a request's extensions: the database the layer offers a
/// transaction on. The slot is found by its type alone, so a handler asking for a `Tx` on
/// another database would otherwise be told there is no layer at all.
#[derive(Clone, Debug)]
pub(crate) struct TxOffer {
    database: &'static str,
    /// The offering layer's: its misconfiguration is logged once.
    noticed: Noticed,
}

impl TxOffer {
    /// A layer's offer of transactions on `DB`.
    pub(crate) fn new<DB: Backend>(noticed: Noticed) -> Self {
        Self {
            database: DB::NAME,
            noticed,
        }
    }
}

/// Where the request's transaction waits while the handler may borrow it.
pub(crate) struct TxSlot<DB: Backend>(Arc<Mutex<Slot<DB>>>);

struct Slot<DB: Backend> {
    tx: Option<Transaction<'static, DB>>,
    /// Lease mode: the store the handler's transaction begins on, at its first extraction,
    /// so that a handler that writes nothing opens none.
    source: Option<SqlxStore<DB>>,
    /// Whether a transaction was begun from `source`.
    begun: bool,
}

/// What the handler left in the slot once it answered.
pub(crate) enum Returned<DB: Backend> {
    /// It never began a transaction (lease mode only).
    Never,
    /// Its transaction, back.
    Back(Transaction<'static, DB>),
    /// It still holds its transaction (kept past its answer) or lost it.
    Held,
}

impl<DB: Backend> Clone for TxSlot<DB> {
    fn clone(&self) -> Self {
        Self(self.0.clone())
    }
}

impl<DB: Backend> TxSlot<DB> {
    /// A slot holding atomic mode's open transaction.
    pub(crate) fn new(tx: Transaction<'static, DB>) -> Self {
        Self::with(Slot {
            tx: Some(tx),
            source: None,
            begun: true,
        })
    }

    /// A slot whose transaction begins on `store` when the handler first takes it.
    pub(crate) fn lazy(store: SqlxStore<DB>) -> Self {
        Self::with(Slot {
            tx: None,
            source: Some(store),
            begun: false,
        })
    }

    /// Puts the slot, and what it offers, in a request's extensions.
    pub(crate) fn offer_in(&self, extensions: &mut http::Extensions, offer: TxOffer) {
        extensions.insert(self.clone());
        extensions.insert(offer);
    }

    fn with(slot: Slot<DB>) -> Self {
        Self(Arc::new(Mutex::new(slot)))
    }

    fn lock(&self) -> MutexGuard<'_, Slot<DB>> {
        // Only whole-value moves happen under the lock, so a poisoned slot is still sound.
        self.0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Takes the transaction back; `None` if the handler still holds or lost it.
    pub(crate) fn take(&self) -> Option<Transaction<'static, DB>> {
        self.lock().tx.take()
    }

    /// Takes back what the handler left, telling a transaction never begun from one held.
    pub(crate) fn returned(&self) -> Returned<DB> {
        let mut slot = self.lock();
        match slot.tx.take() {
            Some(tx) => Returned::Back(tx),
            None if slot.begun => Returned::Held,
            None => Returned::Never,
        }
    }

    /// The open transaction, or one begun from the lazy source; the rejection otherwise.
    async fn check_out(&self) -> Result<Transaction<'static, DB>, Response> {
        let source = {
            let mut slot = self.lock();
            if let Some(tx) = slot.tx.take() {
                return Ok(tx);
            }
            let Some(store) = slot.source.clone().filter(|_| !slot.begun) else {
                return Err(taken_twice());
            };
            slot.begun = true;
            store
        };
        source.begin_write().await.map_err(|error| {
            // Nothing was begun: the layer must not look for a transaction to commit.
            self.lock().begun = false;
            store_error(&error).into_response()
        })
    }
}

/// The request's transaction: the handler writes on it, and the layer stores the response
/// in it and commits once the handler has answered.
///
/// In atomic mode ([`super::AtomicIdempotencyLayer`]) the claim is already made in it. In
/// lease mode with [`IdempotencyLayer::transactional`](crate::IdempotencyLayer::transactional)
/// it begins when the handler takes it, after the claim committed, and the record's
/// completion is its last statement: what the handler wrote commits with the stored
/// response, or not at all.
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
        self.slot.lock().tx = self.tx.take();
    }
}

impl<S: Sync, DB: Backend> FromRequestParts<S> for Tx<DB> {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Response> {
        let Some(slot) = parts.extensions.get::<TxSlot<DB>>().cloned() else {
            return Err(not_offered::<DB>(parts.extensions.get::<TxOffer>()));
        };
        let tx = slot.check_out().await?;
        Ok(Self { tx: Some(tx), slot })
    }
}

/// Ends a transaction the handler left: commits it with `keep`, rolls it back otherwise. A
/// failed rollback leaves nothing committed (the connection is closed, not reused), so it is
/// only logged.
pub(crate) async fn end<DB: Backend>(
    tx: Option<Transaction<'static, DB>>,
    keep: bool,
) -> Result<(), idemkey_core::Error> {
    match tx {
        Some(tx) if keep => tx.commit().await.map_err(DB::commit_error),
        Some(tx) => {
            if let Err(error) = tx.rollback().await {
                tracing::warn!(%error, "rollback of the handler's transaction failed");
            }
            Ok(())
        }
        None => Ok(()),
    }
}

/// Logged once per process: with no layer on the route, no layer can hold the flag.
static NO_LAYER_NOTICED: AtomicBool = AtomicBool::new(false);

/// A handler takes a `Tx<DB>` that no layer of its route offers: none offers one at all, or
/// one offers a transaction on another database. Logged loudly once, naming which.
fn not_offered<DB: Backend>(offer: Option<&TxOffer>) -> Response {
    let detail = match offer {
        Some(offer) => format!(
            "the handler takes a Tx on {}, but the idempotency layer of its route offers a \
             transaction on {}: the handler's Tx<DB> must name the database of the layer's store",
            DB::NAME,
            offer.database
        ),
        None => format!(
            "the handler takes a Tx on {}, but no AtomicIdempotencyLayer, nor an \
             IdempotencyLayer made transactional(), is on its route",
            DB::NAME
        ),
    };
    let first = match offer {
        Some(offer) => offer.noticed.first(),
        None => misconfig::first(&NO_LAYER_NOTICED),
    };
    if first {
        tracing::error!("{detail}; every request of the route is answered 500 no-transaction");
    }
    problem_response(&no_transaction(detail)).into_response()
}

/// A handler takes `Tx` a second time while the first holds the transaction (or kept it).
fn taken_twice() -> Response {
    let problem =
        no_transaction("the handler takes Tx more than once: take it once and pass it on");
    problem_response(&problem).into_response()
}
