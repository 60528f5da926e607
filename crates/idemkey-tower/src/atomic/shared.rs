//! [`Shared`]: what every request of an atomic layer shares, in place of the pieces its
//! service would otherwise pass around one by one.

use std::sync::Arc;

use idemkey_sqlx::{Backend, SqlxStore, Strategy};

use crate::misconfig::Noticed;
use crate::tx::TxOffer;
use crate::{Config, Executions};

/// What every request of a layer shares: its store and settings, the exchanges it runs in
/// tasks of their own, how its route claims, and whether a misconfiguration was logged.
pub(crate) struct Shared<DB: Backend> {
    pub(crate) store: SqlxStore<DB>,
    pub(crate) config: Arc<Config>,
    pub(crate) executions: Executions,
    pub(crate) plan: Plan,
    /// Whether a misconfiguration was logged already: shared with the layer's services.
    pub(crate) noticed: Noticed,
}

/// How the layer's route claims: the strategy, and whether a lookup comes first.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Plan {
    pub(crate) strategy: Strategy,
    pub(crate) lookup: bool,
}

impl<DB: Backend> Clone for Shared<DB> {
    fn clone(&self) -> Self {
        Self {
            store: self.store.clone(),
            config: self.config.clone(),
            executions: self.executions.clone(),
            plan: self.plan,
            noticed: self.noticed.clone(),
        }
    }
}

impl<DB: Backend> Shared<DB> {
    /// What a new layer over `store` with `config` shares: the default strategy, and the
    /// backend's default for the lookup first.
    pub(crate) fn new(store: SqlxStore<DB>, config: Config) -> Self {
        Self {
            store,
            config: Arc::new(config),
            executions: Executions::new(),
            plan: Plan {
                strategy: Strategy::default(),
                lookup: DB::LOOKUP_FIRST,
            },
            noticed: Noticed::default(),
        }
    }

    /// The layer's offer of transactions on `DB`, put beside each request's transaction.
    pub(crate) fn offer(&self) -> TxOffer {
        TxOffer::new::<DB>(self.noticed.clone())
    }
}
