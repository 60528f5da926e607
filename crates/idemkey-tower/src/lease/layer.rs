//! [`IdempotencyLayer`]: applies [`Idempotency`] to a service.

use std::sync::Arc;

use tower::Layer;

use super::running::Running;
use super::transactions::MaybeTransactions;
use crate::{Config, Executions, Idempotency};

/// Layer that applies the [`Idempotency`] middleware, in lease mode, with one store and
/// [`Config`].
///
/// Place it inside the authentication layer (which provides the [`Actor`](crate::Actor)) and
/// inside any compression layer (so stored bodies are uncompressed).
#[derive(Clone, Debug)]
pub struct IdempotencyLayer<St> {
    pub(crate) store: St,
    config: Arc<Config>,
    executions: Executions,
    /// What the services of this layer are executing, shared by all of them.
    running: Arc<Running>,
    /// Whether handlers are offered a transaction that completes the record
    /// (`transactional`, feature `sqlx`).
    pub(crate) transactions: MaybeTransactions,
}

impl<St> IdempotencyLayer<St> {
    /// A layer over `store` with the default [`Config`].
    pub fn new(store: St) -> Self {
        Self::with_config(store, Config::default())
    }

    /// A layer over `store` with `config`.
    pub fn with_config(store: St, config: Config) -> Self {
        Self {
            store,
            config: Arc::new(config),
            executions: Executions::new(),
            running: Arc::default(),
            transactions: MaybeTransactions::default(),
        }
    }

    /// The same layer, counting its executions in `executions` (shared with other layers).
    #[must_use]
    pub fn with_executions(mut self, executions: Executions) -> Self {
        self.executions = executions;
        self
    }

    /// The executions this layer runs in tasks of their own: wait for them at shutdown.
    pub fn executions(&self) -> &Executions {
        &self.executions
    }

    /// The layer's settings.
    pub fn config(&self) -> &Config {
        &self.config
    }
}

impl<S, St: Clone> Layer<S> for IdempotencyLayer<St> {
    type Service = Idempotency<S, St>;

    fn layer(&self, inner: S) -> Self::Service {
        Idempotency::from_shared(
            inner,
            self.store.clone(),
            self.config.clone(),
            (self.executions.clone(), self.running.clone()),
        )
        .with_transactions(self.transactions.clone())
    }
}
