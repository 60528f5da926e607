//! [`Tx`]: the extractor that hands the handler the request's transaction, in both modes.

use std::ops::{Deref, DerefMut};
use std::sync::atomic::AtomicBool;

use axum::extract::FromRequestParts;
use axum::response::{IntoResponse, Response};
use http::request::Parts;
use idemkey_sqlx::Backend;
use sqlx::Transaction;

use super::slot::{TxOffer, TxSlot};
use crate::answer::{no_transaction, store_error};
use crate::misconfig;
use crate::problem_response;

/// The request's transaction: the handler writes on it, and the layer stores the response
/// in it and commits once the handler has answered.
///
/// In atomic mode ([`AtomicIdempotencyLayer`](crate::atomic::AtomicIdempotencyLayer)) the
/// claim is already made in it. In lease mode with
/// [`IdempotencyLayer::transactional`](crate::IdempotencyLayer::transactional) it begins when
/// the handler takes it, after the claim committed, and the record's completion is its last
/// statement: what the handler wrote commits with the stored response, or not at all.
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

impl<DB: Backend> Tx<DB> {
    /// The transaction offered to the request whose extensions these are, for front ends
    /// other than axum (idemkey-actix's extractor wraps it): the slot is read now, and the
    /// transaction checked out (begun, in lease mode) when the future runs. The error is the
    /// problem response the handler's request is answered with, as the axum extractor's.
    pub fn from_extensions(
        extensions: &http::Extensions,
    ) -> impl Future<Output = Result<Self, Response>> + Send + 'static {
        let slot = extensions
            .get::<TxSlot<DB>>()
            .cloned()
            .ok_or_else(|| not_offered::<DB>(extensions.get::<TxOffer>()));
        async move {
            let slot = slot?;
            let tx = check_out(&slot).await?;
            Ok(Self { tx: Some(tx), slot })
        }
    }
}

impl<S: Sync, DB: Backend> FromRequestParts<S> for Tx<DB> {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Response> {
        Self::from_extensions(&parts.extensions).await
    }
}

/// The slot's open transaction, or one begun from its lazy source; the rejection otherwise.
async fn check_out<DB: Backend>(slot: &TxSlot<DB>) -> Result<Transaction<'static, DB>, Response> {
    let source = {
        let mut held = slot.lock();
        if let Some(tx) = held.tx.take() {
            return Ok(tx);
        }
        let Some(store) = held.source.clone().filter(|_| !held.begun) else {
            return Err(taken_twice());
        };
        held.begun = true;
        store
    };
    // Grouped: every commit of it goes through `tx/lease.rs`, which waits for its sync.
    source.begin_grouped_write().await.map_err(|error| {
        // Nothing was begun: the layer must not look for a transaction to commit.
        slot.lock().begun = false;
        store_error(&error).into_response()
    })
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
