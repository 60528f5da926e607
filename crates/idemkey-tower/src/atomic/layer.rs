//! [`AtomicIdempotencyLayer`].

use std::sync::Arc;

use idemkey_sqlx::{Backend, SqlxStore};
use tower::Layer;

use super::AtomicIdempotency;
use crate::{Config, Executions};

/// Applies [`AtomicIdempotency`] to a route: keyed requests run in atomic mode on `store`.
pub struct AtomicIdempotencyLayer<DB: Backend> {
    store: SqlxStore<DB>,
    config: Arc<Config>,
    executions: Executions,
}

impl<DB: Backend> Clone for AtomicIdempotencyLayer<DB> {
    fn clone(&self) -> Self {
        Self {
            store: self.store.clone(),
            config: self.config.clone(),
            executions: self.executions.clone(),
        }
    }
}

impl<DB: Backend> AtomicIdempotencyLayer<DB> {
    /// The layer with the default [`Config`].
    pub fn new(store: SqlxStore<DB>) -> Self {
        Self::with_config(store, Config::default())
    }

    /// The layer with `config` (its lease settings do not apply: atomic mode holds no lease).
    pub fn with_config(store: SqlxStore<DB>, config: Config) -> Self {
        Self {
            store,
            config: Arc::new(config),
            executions: Executions::new(),
        }
    }

    /// The same layer, counting its executions in `executions` (shared with other layers).
    #[must_use]
    pub fn with_executions(mut self, executions: Executions) -> Self {
        self.executions = executions;
        self
    }

    /// The exchanges this layer runs in tasks of their own (each commits or rolls back
    /// there): wait for them at shutdown.
    pub fn executions(&self) -> &Executions {
        &self.executions
    }
}

impl<S, DB: Backend> Layer<S> for AtomicIdempotencyLayer<DB> {
    type Service = AtomicIdempotency<S, DB>;

    fn layer(&self, inner: S) -> Self::Service {
        AtomicIdempotency {
            inner,
            store: self.store.clone(),
            config: self.config.clone(),
            executions: self.executions.clone(),
        }
    }
}
