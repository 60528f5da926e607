//! [`TxSlot`]: where a request's transaction waits while its handler may borrow it, and
//! [`TxOffer`], what the layer offers beside it; [`end`] commits or rolls back what the
//! handler left.

use std::sync::{Arc, Mutex, MutexGuard};

use idemkey_sqlx::{Backend, SqlxStore};
use sqlx::Transaction;

use crate::misconfig::Noticed;

/// Beside each typed [`TxSlot`] in a request's extensions: the database the layer offers a
/// transaction on. The slot is found by its type alone, so a handler asking for a `Tx` on
/// another database would otherwise be told there is no layer at all.
#[derive(Clone, Debug)]
pub(crate) struct TxOffer {
    pub(super) database: &'static str,
    /// The offering layer's: its misconfiguration is logged once.
    pub(super) noticed: Noticed,
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

pub(super) struct Slot<DB: Backend> {
    pub(super) tx: Option<Transaction<'static, DB>>,
    /// Lease mode: the store the handler's transaction begins on, at its first extraction,
    /// so that a handler that writes nothing opens none.
    pub(super) source: Option<SqlxStore<DB>>,
    /// Whether a transaction was begun from `source`.
    pub(super) begun: bool,
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

    pub(super) fn lock(&self) -> MutexGuard<'_, Slot<DB>> {
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
